"""Draw a Job as a Graphviz graph: ``job_func.graph.render("job.svg")``.

One box per op (op name, op type, the SBP of its blobs when the Job states one), one
arrow per consumed blob labelled with its logical shape and dtype (from
``helper.lbn2logical_blob_desc`` when the Job carries it). Ops are filled by the
calculation pass that built them, as OneFlow records it in the op's scope
(``ScopeProto.calculation_pass_name``; OneFlow v0.6.0 ``oneflow/core/job/scope.proto``):
forward, backward (autograd) or optimizer (model update); interface ops (input,
return) and variables have shapes of their own.

The drawing uses the ``graphviz`` Python package (``pip install graphviz``, part of the
``examples`` extra) and Graphviz's ``dot`` program (``apt-get install graphviz``).
"""
from __future__ import annotations

import os
import shutil
import warnings

from graphfront.core import data_type_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework import scope_symbols as _scope

#: Fill colour per calculation pass (forward / backward / optimizer) and for interface ops.
COLORS = {
    "forward_pass": "#cfe2ff",
    "backward_pass": "#ffd8b0",
    "optimizer_pass": "#c8f0c8",
    "interface": "#eeeeee",
}
_INTERFACE = {"input_conf": "input", "return_conf": "return", "output_conf": "output"}


def _sbp_text(sbp) -> str:
    kind = sbp.WhichOneof("parallel_type")
    if kind == "split_parallel":
        return f"S({sbp.split_parallel.axis})"
    return {"broadcast_parallel": "B", "partial_sum_parallel": "P"}.get(kind, "?")


def op_sbp(job, op) -> list:
    """``["bn: S(0)", ...]``: the SBP the Job states for ``op``'s blobs (empty when none).

    Read from ``job_parallel_view_conf`` (1-D and N-D signatures), a variable's
    ``nd_sbp`` strings and an interface op's ``blob_conf.nd_sbp``.
    """
    view = job.job_parallel_view_conf
    lines = []
    if op.name in view.op_name2sbp_signature_conf:
        for bn, sbp in sorted(view.op_name2sbp_signature_conf[op.name].bn_in_op2sbp_parallel.items()):
            lines.append(f"{bn}: {_sbp_text(sbp)}")
    if op.name in view.op_name2nd_sbp_signature_conf:
        one_d = view.op_name2sbp_signature_conf[op.name].bn_in_op2sbp_parallel if \
            op.name in view.op_name2sbp_signature_conf else {}
        for bn, nd in sorted(view.op_name2nd_sbp_signature_conf[op.name].bn_in_op2nd_sbp.items()):
            if bn in one_d and list(nd.sbp_parallel) == [one_d[bn]]:
                continue  # the same layout as the 1-D signature line
            lines.append(f"{bn}: [{', '.join(_sbp_text(s) for s in nd.sbp_parallel)}]")
    kind = jb.op_kind(op)
    if kind == "variable_conf" and op.variable_conf.nd_sbp:
        lines.append(f"out: [{', '.join(op.variable_conf.nd_sbp)}]")
    elif kind in ("input_conf", "output_conf"):
        nd = getattr(op, kind).blob_conf.nd_sbp.sbp_parallel
        if nd:
            lines.append(f"out: [{', '.join(_sbp_text(s) for s in nd)}]")
    return lines


def calculation_pass(op) -> str:
    """``"forward_pass"``, ``"backward_pass"`` or ``"optimizer_pass"`` for ``op``.

    Read from the op's scope symbol; an op whose scope is unknown to this process (a Job
    read from a file) counts as forward.
    """
    sym = _scope.SYMBOLS.get(op.scope_symbol_id)
    return sym.calculation_pass_name if sym is not None and sym.calculation_pass_name else "forward_pass"


def _blob_label(job, lbn) -> str:
    descs = job.helper.lbn2logical_blob_desc
    if lbn not in descs:
        return ""
    desc = descs[lbn]
    return f"{tuple(desc.shape.dim)} {data_type_pb2.DataType.Name(desc.data_type)[1:].lower()}"


def job_digraph(job, title=None):
    """The Job as a ``graphviz.Digraph`` (not yet laid out; see :func:`render_job`).

    Args:
        job: a ``Job`` proto (completed or as built).
        title: graph label; default the job name.

    Returns:
        graphviz.Digraph: nodes named after the ops, edges after the blobs (lbns).

    Raises:
        ImportError: the ``graphviz`` package is not installed (message says how).
    """
    try:
        import graphviz
    except ImportError as e:
        raise ImportError("drawing a job needs the graphviz package: pip install graphviz "
                          "(and Graphviz's dot program: apt-get install graphviz)") from e
    graph = graphviz.Digraph(name=job.job_conf.job_name or "job")
    graph.attr(label=title or f"job '{job.job_conf.job_name}'", labelloc="t", rankdir="TB", fontname="Helvetica")
    graph.attr("node", fontname="Helvetica", fontsize="10", style="filled,rounded", shape="box")
    graph.attr("edge", fontname="Helvetica", fontsize="8", color="#555555")
    producer = {}
    for op in job.net.op:
        for _, _, lbn in jb.op_outputs(op):
            producer[lbn] = op.name
    for op in job.net.op:
        kind = jb.op_kind(op)
        lines = [op.name, jb.op_type_name(op)] + op_sbp(job, op)
        if kind in _INTERFACE:
            graph.node(op.name, "\n".join(lines), shape="ellipse", fillcolor=COLORS["interface"])
        elif kind == "variable_conf":
            shape = tuple(op.variable_conf.shape.dim)
            graph.node(op.name, "\n".join(lines + [str(shape)]), shape="cylinder",
                       fillcolor=COLORS[calculation_pass(op)])
        else:
            graph.node(op.name, "\n".join(lines), fillcolor=COLORS.get(calculation_pass(op), "white"))
        for _, _, lbn in jb.op_inputs(op):
            if lbn in producer:
                graph.edge(producer[lbn], op.name, label=_blob_label(job, lbn))
    with graph.subgraph(name="cluster_legend") as legend:
        legend.attr(label="legend", fontsize="9", style="dashed")
        for name in ("forward_pass", "backward_pass", "optimizer_pass"):
            legend.node(f"legend_{name}", name.replace("_pass", ""), fillcolor=COLORS[name], fontsize="9")
    return graph


def render_job(job, path, title=None, *, warn_stacklevel=2) -> str:
    """Draw ``job`` into ``path``; the format comes from the extension (``.svg``, ``.png``, ``.pdf``...).

    ``.gv`` / ``.dot`` write the Graphviz (DOT) source itself, which needs no ``dot``
    program. A picture format asked for where Graphviz's ``dot`` is not installed also
    writes the source, beside ``path`` with the extension ``.gv``, warns how to render it,
    and returns that path.

    Args:
        job: a ``Job`` proto.
        path: output file; written whole (a temporary file renamed over it).
        title: graph label; default the job name.
        warn_stacklevel: ``stacklevel`` of the missing-``dot`` warning (the caller's line).

    Returns:
        str: the path written: ``path``, or its ``.gv`` sibling when ``dot`` is missing.

    Raises:
        ValueError: ``path`` has no extension naming a Graphviz output format.
        ImportError: the ``graphviz`` package is missing.
    """
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    graph = job_digraph(job, title)
    import graphviz
    if fmt in SOURCE_FORMATS:
        return _write_atomic(path, graph.source.encode())
    if fmt not in graphviz.FORMATS:
        raise ValueError(f"render: cannot tell the picture format from {path!r}; use an extension such as "
                         ".svg, .png, .pdf or .gv (the DOT source)")
    if shutil.which("dot") is None:
        source = os.path.splitext(path)[0] + ".gv"
        warnings.warn(f"render: Graphviz's dot program is not installed (apt-get install graphviz), so the job's "
                      f"DOT source was written to {source!r} instead of {path!r}; render it later with "
                      f"`dot -T{fmt} {source} -o {path}`", stacklevel=warn_stacklevel)
        return _write_atomic(source, graph.source.encode())
    return _write_atomic(path, graph.pipe(format=fmt))


SOURCE_FORMATS = ("gv", "dot")


def _write_atomic(path, data) -> str:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path
