"""Inspectable plans: ``job_func.graph`` is a :class:`JobGraph`.

It shows a compiled job three ways:

* ``print(job_func.graph)`` / ``.table()``: one row per op of the completed Job, in the
  order the plan runs them: op name, op type, input and output lbns, output shapes
  (with each blob's SBP layout in a multi-device job), dtypes and device (rendered by
  ``tabulate``);
* ``.code()``: the generated Python source the plan runs on every call;
* ``.text()``: the completed Job as text proto (``.user_job_text()`` for the Job as the
  job function built it, before the passes);
* ``.render("job.svg")``: a Graphviz picture of the completed Job (op types, blob
  shapes, SBP when set, forward / backward / optimizer ops coloured).

``.proto`` and ``.user_job`` are the Job protos themselves; ``.passes`` lists the
completion passes that ran (the job's completion log).
"""
from __future__ import annotations

from google.protobuf import text_format
from tabulate import tabulate

from graphfront.framework import job_builder as jb
from graphfront.parallel.sbp import blob_sbps
from graphfront.runtime.plan import device_of, placements_of
from graphfront.passes import COMPLETION_LOG
from graphfront.framework.job_picture import render_job

TABLE_HEADERS = ("#", "op name", "op type", "inputs", "outputs", "shapes", "dtypes", "device")


class JobGraph:
    """A compiled job, for reading (see module docstring).

    Args:
        compiled_job: a :class:`graphfront.framework.session.CompiledJob`.
    """

    def __init__(self, compiled_job):
        self.compiled_job = compiled_job
        self.name = compiled_job.name

    @property
    def proto(self):
        """The completed Job proto (after autograd, optimizer and cleanup passes)."""
        return self.compiled_job.job

    @property
    def user_job(self):
        """The Job proto as the job function built it."""
        return self.compiled_job.user_job

    @property
    def passes(self) -> list:
        """Names of the completion passes that ran, in order."""
        flags = self.proto.job_conf.flag_name2flag_value
        return list(flags[COMPLETION_LOG].at_list_string.val) if COMPLETION_LOG in flags else []

    def rows(self) -> list:
        """One tuple per op, in plan order: the table's columns (see :data:`TABLE_HEADERS`)."""
        job = self.proto
        descs = job.helper.lbn2logical_blob_desc
        placements = placements_of(job)
        sbps = blob_sbps(job)  # multi-device jobs: each blob's SBP layout beside its shape
        rows = []
        for i, op in enumerate(self.compiled_job.plan.order):
            outs = [lbn for _, _, lbn in jb.op_outputs(op)]
            ins = [lbn for _, _, lbn in jb.op_inputs(op)]
            out_descs = [(l, jb.TensorDesc.from_proto(descs[l])) for l in outs if l in descs]
            shapes = ", ".join(str(tuple(d.shape)) + (f" {sbps[l]}" if l in sbps else "") for l, d in out_descs)
            dtypes = ", ".join(d.dtype.name for _, d in out_descs)
            device = device_of(op, placements.get(op.name, ("0:0",)))
            rows.append((i, op.name, jb.op_type_name(op), "\n".join(ins), "\n".join(outs), shapes, dtypes,
                         str(device)))
        return rows

    def table(self, tablefmt="simple") -> str:
        """The op table as text (any ``tabulate`` format: "simple", "github", "grid" ...)."""
        return tabulate(self.rows(), headers=TABLE_HEADERS, tablefmt=tablefmt)

    def code(self) -> str:
        """The generated Python source of the plan (exactly what runs on each call)."""
        return self.compiled_job.plan.source

    def text(self) -> str:
        """The completed Job as text proto."""
        return text_format.MessageToString(self.proto)

    def user_job_text(self) -> str:
        """The Job as the job function built it (before the passes), as text proto."""
        return text_format.MessageToString(self.user_job)

    def render(self, path, user_job=False) -> str:
        """Draw the completed Job (``user_job=True``: the Job as built) into ``path``.

        Args:
            path: output file; its extension picks the format (``.svg``, ``.png``, ``.pdf``...,
                or ``.gv`` for the DOT source).
            user_job: draw the Job before the completion passes.

        Returns:
            str: the path written; where Graphviz's ``dot`` is not installed, the DOT
            source beside ``path`` (``.gv``), with a warning.

        Raises:
            ValueError: unknown picture format.
            ImportError: the ``graphviz`` package is missing.
        """
        job = self.user_job if user_job else self.proto
        return render_job(job, path, title=f"job '{self.name}' ({'as built' if user_job else 'completed'})",
                          warn_stacklevel=3)

    def to_tensorboard(self, logdir, user_job=False) -> str:
        """Write the completed Job (``user_job=True``: as built) for TensorBoard's Graphs tab:
        TensorBoard's ``GraphDef`` in a new event file under ``logdir`` (one node per op,
        grouped by forward / backward / optimizer pass; see
        :mod:`graphfront.framework.tensorboard_graph`).

        Returns:
            str: the event file written.

        Raises:
            ImportError: the ``tensorboard`` package is not installed.
        """
        from graphfront.framework.tensorboard_graph import write_job_graph
        return write_job_graph(self.user_job if user_job else self.proto, logdir)

    def __len__(self):
        return len(self.proto.net.op)

    def __str__(self):
        head = f"job '{self.name}': {len(self)} ops (passes: {', '.join(self.passes) or 'none'})"
        return head + "\n" + self.table()

    def __repr__(self):
        return f"<JobGraph '{self.name}': {len(self)} ops>"
