"""Eager execution: a job function that runs op by op while it is called.

With eager execution on (OneFlow's single-client eager mode), every call of a
``global_function`` builds its Job again through an :class:`EagerJobBuilder`: each op is
checked and inferred exactly as in a lazy build (``add_op``) and then run at once through
its registered kernel on concrete tensors, kept per lbn in ``builder.values``. So a blob's
value is known inside the job function (``blob.numpy()``, ``flow.watch`` handlers run at
once), variables are created and initialized on first use and keep their values in the
session's VariableStore across calls. OneFlow's eager mode runs each op as a stateless
call, with a new kernel: so does graphfront for a random op (``random=True`` in the
registry), whose draws restart at every call (a seeded op draws the same numbers each time,
where a lazy job's kernel goes on; OneFlow's ``test_TestRandomSource`` expects both). The
kernel of any other op is kept from one call to the next (by the op's position in the job
function and checked against its type, attrs and blob shapes), which changes nothing for a
pure op and lets a data reader go on where the previous call left it, as the kernel of a
lazy job does (``keeps_state=True``; OneFlow's single-client eager mode had no readers).

A job placed on several devices runs in the consistent view as on one: each op computes its
logical blob once, on the first device of its placement, so its values are those the lazy
job's workers compute together (the work is not spread over the devices), and
``blob.numpy()`` is the logical blob, as OneFlow's eager ``numpy()`` boxes a consistent blob
to device 0. A source op whose devices each make their own part (a data reader splitting
the batch over its devices, each reading its own shards) runs once per device, each kernel
seeing its part and its ``parallel_id`` as in a lazy job's worker, and its blob is the
parts joined (:func:`graphfront.parallel.sbp.source_signature` gives the
layout). The mirrored view on several devices, whose ops see one device's part each, is
refused.

A train job then runs its backward and update part (:func:`train_step`): the Job built
during the call is completed by the passes a lazy job needs (autograd, optimizer) and
the cleanup passes that rewrite update ops only, not by the fusions, which would rewrite
the forward that ran already; it runs once through a per-op plan in which every op the
call ran is bound to its computed value instead of running again. The gradients therefore differentiate exactly the
forward values of the call (the same random draws too), and the update runs the
optimizer's own update ops. Results equal a lazy job's up to the roundings in which a
fused kernel differs from the kernels it replaces.
"""
from __future__ import annotations

import copy

import torch

from graphfront.framework import job_builder as jb
from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import GraphfrontError, JobBuildError, format_location, user_frame
from graphfront.ops import registry
from graphfront.ops.common import host_concat
from graphfront.parallel import sbp as _sbp
from graphfront.passes import DISABLED_PASSES, complete, pass_names
from graphfront.passes.boxing import device_count
from graphfront.runtime.plan import Plan, make_kernel, run_op
from graphfront.runtime.variable_store import default_initializer
from graphfront.runtime.walk import INTERFACE_KINDS, device_of, watcher


class EagerJobBuilder(jb.JobBuilder):
    """A ``JobBuildAndInferCtx`` that runs every op as soon as it is added.

    Args:
        job, scope, session: as :class:`~graphfront.framework.job_builder.JobBuilder`.
        feeds: one tensor per ``input_conf`` op, in the order the inputs are added.
        kernels: the kernels of earlier calls of this job, kept between calls: position
            of the user op in the call -> (its signature, its kernel).

    Attributes:
        values: lbn -> the tensor it holds in this call.
        executed: op name -> a copy of the op conf as it ran (compute ops only).
        watched: names of the ``foreign_watch_conf`` ops whose handlers ran.
    """

    def __init__(self, job, scope, session, feeds, kernels):
        super().__init__(job, scope, session)
        self.values = {}
        self.executed = {}
        self.watched = set()
        self._feeds = list(feeds)
        self._kernels = kernels

    def add_op(self, op_conf, location=None):
        """Check, infer and append ``op_conf`` (as a lazy build does), then run it.

        Raises JobBuildError for a bad op conf or an op placed on several devices in the
        mirrored view; a kernel's own error (OpRunError for a bad value) propagates, a
        note naming the op and the user's line added where it names neither.
        """
        location = location or user_frame()
        added = super().add_op(op_conf, location)
        try:
            self._run(added, location)
        except GraphfrontError:  # (names the op and the user's line already)
            raise
        except Exception as e:
            e.add_note(f"(eager execution of op '{added.name}' ({jb.op_type_name(added)})"
                       f"{format_location(location)})")
            raise
        return added

    def _run(self, op, location):
        ids = self.device_ids_of(op.name)
        if device_count(ids) > 1 and self.logical_view == "mirrored":
            raise JobBuildError(f"op '{op.name}' ({jb.op_type_name(op)}) is placed on devices {list(ids)} in the "
                                "mirrored view: eager execution computes logical (consistent) blobs; use the "
                                "consistent view (FunctionConfig().default_logical_view(flow.scope.consistent_view())) "
                                f"or one device{format_location(location)}")
        device = device_of(op, ids)
        kind = jb.op_kind(op)
        if kind not in INTERFACE_KINDS and registry.op_def(op).kernel is None:
            raise JobBuildError(f"op '{op.name}' ({jb.op_type_name(op)}) has no kernel: a job pass lowers it, so it "
                                f"cannot run in eager execution{format_location(location)}")
        outs = [lbn for _, _, lbn in jb.op_outputs(op)]
        if kind == "input_conf":
            self.values[outs[0]] = self._feeds.pop(0).to(device)
        elif kind == "variable_conf":
            d = self.descs[outs[0]]
            self.values[outs[0]] = self.session.variables.ensure(op, d.shape, d.dtype, device,
                                                                 default_initializer(self.job.job_conf))
        elif kind == "foreign_watch_conf":
            value = self.values[getattr(op.foreign_watch_conf, "in")]
            watcher(self.session.watchers, op.foreign_watch_conf.handler_uuid)(copied(value))
            self.watched.add(op.name)
        elif kind != "return_conf":
            ins = {lbn: _on(self.values[lbn], device) for _, _, lbn in jb.op_inputs(op)}
            layout = self._device_parts(op, ids)
            kernels = self._kernels_of(op, device, layout, device_count(ids))
            if layout is None:
                self.values.update(run_op(op, self.descs, device, ins, kernels[0]))
            else:
                parts = [run_op(op, self.descs, device, ins, k) for k in kernels]
                for a, i, lbn in jb.op_outputs(op):
                    self.values[lbn] = _joined([p[lbn] for p in parts], layout[_sbp.bn_in_op(op, a, i)])
            self.executed[op.name] = copy.deepcopy(op)

    def _device_parts(self, op, ids):
        """The SBP signature of an op whose devices each make their own part of its outputs,
        or None: a data reader or another source op on several devices whose rule splits
        an output (each device reads its own files), not a random op that draws the whole
        blob and keeps its part (``decode_random``: one draw is the logical blob)."""
        opdef = registry.op_def(op)
        n = device_count(ids)
        if n == 1 or jb.op_inputs(op) or opdef.sbp is None or (opdef.random and not opdef.keeps_state):
            return None
        layout = _sbp.source_signature(op, self.descs, n)
        return layout if any(_sbp.split_axis(s) is not None for s in layout.values()) else None

    def _kernels_of(self, op, device, layout, n):
        """The kernels of an op, one per device part (one kernel without ``layout``): those
        the op at this position ran in the previous call when type, attrs, blob shapes and
        devices are the same, else new ones; always new ones for a system op and for a
        random op (OneFlow's stateless eager call) unless it keeps state."""
        def made():
            if layout is None:
                return [make_kernel(op, self.descs, device)]
            return [make_kernel(op, _local_descs(op, self.descs, layout, n, i), device, signature=layout,
                                parallel_ctx=(i, n), logical_descs=self.descs) for i in range(n)]

        opdef = registry.op_def(op)
        if jb.op_kind(op) != "user_conf" or (opdef.random and not opdef.keeps_state):
            return made()
        ins, outs = jb.op_args(op)
        signature = (op.user_conf.op_type_name, str(device), n if layout else 1,
                     sorted((k, v.SerializeToString(deterministic=True)) for k, v in op.user_conf.attr.items()),
                     [(a, [self.descs[lbn] for lbn in lbns]) for a, lbns in list(ins.items()) + list(outs.items())])
        position = len(self.executed)
        kept = self._kernels.get(position)
        if kept is None or kept[0] != signature:
            kept = self._kernels[position] = (signature, made())
        return kept[1]


def _local_descs(op, descs, layout, n, index):
    """``descs`` with the outputs of ``op`` cut to device ``index``'s part of ``layout``."""
    local = dict(descs)
    for a, i, lbn in jb.op_outputs(op):
        d = descs[lbn]
        local[lbn] = d._replace(shape=_sbp.local_shape(d.shape, layout[_sbp.bn_in_op(op, a, i)], n, index))
    return local


def _joined(parts, sbp):
    """The logical blob of the devices' ``parts`` laid out as ``sbp``: the parts
    concatenated along a split axis (host values, such as records, along axis 0),
    their sum for a partial sum, one of them for broadcast."""
    axis = _sbp.split_axis(sbp)
    if axis is None:
        return sum(parts[1:], parts[0]) if sbp == _sbp.P else parts[0]
    return torch.cat(parts, axis) if isinstance(parts[0], torch.Tensor) else host_concat(parts)


def _on(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def copied(value):
    """A copy of a tensor value (it may be a variable's, which later ops update in place);
    a host value (a data pipeline's records) as it is."""
    return value.clone() if isinstance(value, torch.Tensor) else value


def value_of(blob) -> torch.Tensor:
    """The tensor blob ``blob`` holds in the eager call running now.

    Raises RuntimeError when no eager call is running (a lazy job's blobs hold no value
    while the job is built) or the blob belongs to another job or call.
    """
    builder = jb.current() if jb.is_building() else None
    if not isinstance(builder, EagerJobBuilder):
        raise RuntimeError(f"blob '{blob.lbn}'.numpy(): a blob holds a value only in eager execution "
                           "(flow.enable_eager_execution(True) before the job functions are defined) while "
                           "its job function runs; in a lazy job return the blob or use flow.watch"
                           f"{format_location(user_frame())}")
    if blob.lbn not in builder.values:
        raise RuntimeError(f"blob '{blob.lbn}' is not a blob of the job '{builder.job_name}' running now"
                           f"{format_location(user_frame())}")
    return builder.values[blob.lbn]


def numpy_of(blob):
    """``blob.numpy()`` in eager execution: a numpy copy of :func:`value_of`."""
    return _dt.tensor_to_numpy(value_of(blob))


# the cleanup passes of a train step: they rewrite update ops only, never an op the call ran
_STEP_PASSES = ("prune_dead_ops", "fuse_update_ops", "group_update_ops")


def train_step(builder) -> list:
    """Complete the Job an eager call of a train job built and run its backward and update
    part; returns the job's results (tensors, in return-op order).

    The optimizer's state variables are created on first use. Watch handlers of the
    forward ran during the call and do not run again; those of gradients
    (``flow.watch_diff``) run here.
    """
    session = builder.session
    job = copy.deepcopy(builder.job)
    skipped = job.job_conf.flag_name2flag_value[DISABLED_PASSES].at_list_string
    skipped.val.extend(n for n in pass_names() if n not in _STEP_PASSES and n not in skipped.val)
    job = complete(job)
    session.init_variables(job)
    ran = [op for op in job.net.op if op.name in builder.watched or builder.executed.get(op.name) == op]
    jb.JobBuilder(job).remove_ops([op.name for op in ran if not jb.op_outputs(op)])  # (watches, assigns ...)
    bound = [lbn for op in ran for _, _, lbn in jb.op_outputs(op)]
    plan = Plan(job, session.variables, session.watchers, cuda_graph=False, bound=bound)
    feeds = [builder.values[lbn] for lbn in plan.input_lbns]
    return plan(feeds + [builder.values[lbn] for lbn in bound])
