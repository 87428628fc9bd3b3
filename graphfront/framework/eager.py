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
layout).

In the mirrored view on several devices every op runs once per device on that device's
values (:class:`DeviceParts`), as a lazy mirrored job's workers do: a ``Numpy`` argument
is split along axis 0, a ``ListNumpy`` argument takes one array per device, variables are
shared, and returned and watched blobs are the devices' parts concatenated along axis 0
(``blob.numpy(rank)``: device ``rank``'s part). A train step sums the devices' gradients
where the lazy job all-reduces them (:func:`_mirrored_update`). An op that updates a
variable in the forward (batch normalization's moving statistics) updates it from the first
device's values; the others update a copy, as each worker of a lazy job updates its own
and the first device's is the one the session keeps.

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
from graphfront.passes.mirrored import mirror
from graphfront.runtime.plan import Plan, make_kernel, run_op
from graphfront.runtime.variable_store import default_initializer
from graphfront.runtime.walk import INTERFACE_KINDS, device_of, mutated_lbns, watcher


class EagerJobBuilder(jb.JobBuilder):
    """A ``JobBuildAndInferCtx`` that runs every op as soon as it is added.

    Args:
        job, scope, session: as :class:`~graphfront.framework.job_builder.JobBuilder`.
        feeds: one callable per ``input_conf`` op, in the order the inputs are added:
            ``feed(parts)`` gives its tensors on ``parts`` devices (one, or one per device
            of a placement in the mirrored view).
        kernels: the kernels of earlier calls of this job, kept between calls: position
            of the user op in the call -> (its signature, its kernel).

    Attributes:
        values: lbn -> the value it holds in this call (:func:`value_of`).
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

        Raises JobBuildError for a bad op conf or an op without a kernel; a kernel's own
        error (OpRunError for a bad value) propagates, a note naming the op and the user's
        line added where it names neither.
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
        mirrored = self._mirrored_count(op, device_count(ids))
        device = device_of(op, ids)
        kind = jb.op_kind(op)
        if kind not in INTERFACE_KINDS and registry.op_def(op).kernel is None:
            raise JobBuildError(f"op '{op.name}' ({jb.op_type_name(op)}) has no kernel: a job pass lowers it, so it "
                                f"cannot run in eager execution{format_location(location)}")
        outs = [lbn for _, _, lbn in jb.op_outputs(op)]
        if kind == "input_conf":
            parts = [t.to(device) for t in self._feeds.pop(0)(mirrored or 1)]
            self.values[outs[0]] = DeviceParts(parts) if mirrored else parts[0]
        elif kind == "variable_conf":
            d = self.descs[outs[0]]
            value = self.session.variables.ensure(op, d.shape, d.dtype, device, default_initializer(self.job.job_conf))
            self.values[outs[0]] = DeviceParts([value] * mirrored) if mirrored else value
        elif kind == "foreign_watch_conf":
            value = whole(self.values[getattr(op.foreign_watch_conf, "in")])
            watcher(self.session.watchers, op.foreign_watch_conf.handler_uuid)(copied(value))
            self.watched.add(op.name)
        elif kind != "return_conf":
            self._compute(op, device, ids, mirrored)
            self.executed[op.name] = copy.deepcopy(op)

    def _mirrored_count(self, op, n):
        """In the mirrored view, the number of devices an op runs on, once per device: those
        of its placement or of the mirrored blobs it reads (a lazy mirrored job runs every
        op on each of its devices); 0 outside the mirrored view or on one device."""
        if self.logical_view != "mirrored":
            return 0
        count = max([n] + [len(v) for _, _, lbn in jb.op_inputs(op)
                           if isinstance(v := self.values.get(lbn), DeviceParts)])
        return count if count > 1 else 0

    def _compute(self, op, device, ids, mirrored):
        """Run a compute op: once (on logical blobs), once per device part of a source op
        (:meth:`_device_parts`), or in the mirrored view once per device (``mirrored``
        devices) on its values."""
        n = device_count(ids)
        layout = None if mirrored else self._device_parts(op, ids)
        if mirrored:
            kernels = self._kernels_of(op, device, mirrored, lambda i: make_kernel(
                op, self.descs, device, parallel_ctx=(i, mirrored)))
        elif layout is not None:
            kernels = self._kernels_of(op, device, n, lambda i: make_kernel(
                op, _local_descs(op, self.descs, layout, n, i), device, signature=layout, parallel_ctx=(i, n),
                logical_descs=self.descs))
        else:
            kernels = self._kernels_of(op, device, 1, lambda i: make_kernel(op, self.descs, device))
        ins = [lbn for _, _, lbn in jb.op_inputs(op)]
        own = set(mutated_lbns(op)) if mirrored else set()  # (device 0 updates the variable, the others a copy)

        def inputs(i):
            values = {lbn: _part(self.values[lbn], i) for lbn in ins}
            return {lbn: _on(v.clone() if i and lbn in own else v, device) for lbn, v in values.items()}
        parts = [run_op(op, self.descs, device, inputs(i), k) for i, k in enumerate(kernels)]
        for a, i, lbn in jb.op_outputs(op):
            values = [p[lbn] for p in parts]
            if mirrored:
                self.values[lbn] = DeviceParts(values)
            else:
                self.values[lbn] = values[0] if layout is None else _joined(values, layout[_sbp.bn_in_op(op, a, i)])

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

    def _kernels_of(self, op, device, count, make):
        """The ``count`` kernels of an op, ``make(i)`` making the one of part ``i``: those
        the op at this position ran in the previous call when type, attrs, blob shapes and
        devices are the same, else new ones; always new ones for a system op and for a
        random op (OneFlow's stateless eager call) unless it keeps state."""
        opdef = registry.op_def(op)
        if jb.op_kind(op) != "user_conf" or (opdef.random and not opdef.keeps_state):
            return [make(i) for i in range(count)]
        ins, outs = jb.op_args(op)
        signature = (op.user_conf.op_type_name, str(device), count,
                     sorted((k, v.SerializeToString(deterministic=True)) for k, v in op.user_conf.attr.items()),
                     [(a, [self.descs[lbn] for lbn in lbns]) for a, lbns in list(ins.items()) + list(outs.items())])
        position = len(self.executed)
        kept = self._kernels.get(position)
        if kept is None or kept[0] != signature:
            kept = self._kernels[position] = (signature, [make(i) for i in range(count)])
        return kept[1]


class DeviceParts(list):
    """The values of a blob in the mirrored view on several devices: one per device, in
    the order of its placement's devices."""


def _part(value, index):
    """Device ``index``'s value of a blob: its own of a mirrored blob, else the whole value."""
    return value[index] if isinstance(value, DeviceParts) else value


def whole(value):
    """The value a mirrored blob's parts make together, concatenated along axis 0 (as a lazy
    mirrored job returns and watches them); any other value as it is."""
    return _joined(value, _sbp.split(0)) if isinstance(value, DeviceParts) else value


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


def value_of(blob):
    """The value blob ``blob`` holds in the eager call running now: a tensor (a host value
    for records and tensor buffers), or the :class:`DeviceParts` of a mirrored blob on
    several devices.

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


def numpy_of(blob, rank=None):
    """``blob.numpy(rank)`` in eager execution: a numpy copy of :func:`value_of`. A
    consistent blob is the logical one whatever its placement (``rank`` None or 0, as
    OneFlow's eager ``numpy()`` boxes it to device 0); a mirrored blob on several devices
    is device ``rank``'s part, and with ``rank`` None the parts concatenated along axis 0.

    Raises ValueError for a ``rank`` outside the blob's devices."""
    value = value_of(blob)
    count = len(value) if isinstance(value, DeviceParts) else 1
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < count):
        expected = (f"None or a device index in [0, {count}) (a mirrored blob on {count} devices)" if count > 1
                    else "None or 0 (a consistent blob: both give the logical blob)")
        raise ValueError(f"blob '{blob.lbn}'.numpy(rank={rank!r}): rank must be {expected}"
                         f"{format_location(user_frame())}")
    return _dt.tensor_to_numpy(whole(value) if rank is None else _part(value, rank))


# the cleanup passes of a train step: they rewrite update ops only, never an op the call ran
_STEP_PASSES = ("prune_dead_ops", "fuse_update_ops", "group_update_ops")


def train_step(builder) -> list:
    """Complete the Job an eager call of a train job built and run its backward and update
    part; returns the job's results (tensors, in return-op order).

    The optimizer's state variables are created on first use. Watch handlers of the
    forward ran during the call and do not run again; those of gradients
    (``flow.watch_diff``) run here. In the mirrored view on several devices see
    :func:`_mirrored_update`.
    """
    session = builder.session
    job = copy.deepcopy(builder.job)
    skipped = job.job_conf.flag_name2flag_value[DISABLED_PASSES].at_list_string
    skipped.val.extend(n for n in pass_names() if n not in _STEP_PASSES and n not in skipped.val)
    job = complete(job)
    mirrored = max((len(v) for v in builder.values.values() if isinstance(v, DeviceParts)), default=0)
    if mirrored:
        job = mirror(job, mirrored)
    session.init_variables(job)
    ran = [op for op in job.net.op if op.name in builder.watched or builder.executed.get(op.name) == op]
    jb.JobBuilder(job).remove_ops([op.name for op in ran if not jb.op_outputs(op)])  # (watches, assigns ...)
    bound = [lbn for op in ran for _, _, lbn in jb.op_outputs(op)]
    if mirrored:
        return _mirrored_update(builder, job, {op.name for op in ran}, bound, mirrored)
    plan = Plan(job, session.variables, session.watchers, cuda_graph=False, bound=bound)
    feeds = [builder.values[lbn] for lbn in plan.input_lbns]
    return plan(feeds + [builder.values[lbn] for lbn in bound])


def _mirrored_update(builder, job, ran, bound, n):
    """The backward and update part of an eager train call in the mirrored view on ``n``
    devices, ``job`` completed and made mirrored (:func:`graphfront.passes.mirrored.mirror`).

    Each device runs the backward ops that its gradients and gradient watchers need on its
    own forward values (one plan, run once per device); the all-reduces of the gradients
    and of the loss instance count are the sums of the devices' values; the rest (the
    gradients' scaling and the optimizer's updates) runs once, on the first device's
    values. So the update is the one a lazy mirrored job's workers make together. A
    gradient watcher receives the devices' gradients concatenated along axis 0.
    """
    session = builder.session
    producer = {lbn: op for op in job.net.op for _, _, lbn in jb.op_outputs(op)}
    reduces = [op for op in job.net.op if jb.op_type_name(op) == "_nccl_logical_all_reduce"]
    reducing = {op.name for op in reduces}
    watches = [op for op in job.net.op if jb.op_kind(op) == "foreign_watch_conf"]
    local, todo = set(), [lbn for op in reduces + watches for _, _, lbn in jb.op_inputs(op)]
    while todo:  # the backward ops the reduced blobs and the watched gradients need
        op = producer[todo.pop()]
        if op.name not in ran and op.name not in local and jb.op_kind(op) not in INTERFACE_KINDS:
            local.add(op.name)
            todo.extend(lbn for _, _, lbn in jb.op_inputs(op))
    rest = {op.name for op in job.net.op if op.name not in local and op.name not in ran}
    reduced = [lbn for op in reduces for _, _, lbn in jb.op_inputs(op)]
    crossing = sorted({lbn for op in job.net.op if op.name in rest and op.name not in reducing
                       for _, _, lbn in jb.op_inputs(op) if producer[lbn].name in local})
    collected = {uuid: [] for uuid in session.watchers}
    plan = Plan(job, session.variables, {uuid: parts.append for uuid, parts in collected.items()}, cuda_graph=False,
                bound=bound, ran=rest, returning=reduced + crossing)
    first = len(plan.output_names)
    per_device = [plan([_part(builder.values[lbn], i) for lbn in plan.input_lbns + bound])[first:]
                  for i in range(n)]
    for uuid, parts in collected.items():
        if parts:
            watcher(session.watchers, uuid)(whole(DeviceParts(parts)))
    sums = [sum(values[k] for values in per_device) for k in range(len(reduced))]
    results = [copied(whole(builder.values[lbn])) for lbn in plan.result_lbns]  # (before the update)
    update_job = copy.deepcopy(job)
    jb.JobBuilder(update_job).remove_ops([op.name for op in watches])
    out_of_reduces = [lbn for op in reduces for _, _, lbn in jb.op_outputs(op)]
    update = Plan(update_job, session.variables, session.watchers, cuda_graph=False,
                  bound=bound + out_of_reduces + crossing, ran=local)
    update([_part(builder.values[lbn], 0) for lbn in update.input_lbns + bound] + sums
           + list(per_device[0][len(reduced):]))
    return results
