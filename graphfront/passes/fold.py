"""Constant folding (``Job -> Job``).

An op is *constant* when it is pure (:func:`graphfront.runtime.plan.is_pure`: no random
numbers, no in-place update, no ``ctrl_in_op_name``) and every input it reads the data
of is constant. Inputs that only lend their static shape (the ``like`` of
``constant_like``/``zero_like``/``reshape_like``…, the ``x_like`` of ``conv_data_grad``)
do not count (unless that shape may change between runs: a ``ListNumpy`` placeholder or
a blob computed from one), so e.g. the ``constant_like`` that seeds a loss gradient is
constant; so is a learning-rate schedule whose value does not depend on the train step
(no warmup, no decay or a piecewise one without boundaries).
Sources with no input are constant only when they are known to be deterministic
(``constant``, ``arange``, ``eye``, ``folded_constant``); placeholders and variables
never are.

The pass evaluates the constant subgraphs once with the registered kernels, on the
ops' own devices, and replaces every constant blob that a non-constant op (or a return
or watch) reads by a ``folded_constant`` op holding its value (graphfront-only; the
value's bytes are base64 text in attr ``data``, exact for every dtype — OneFlow's
``constant`` can only hold a scalar fill). The folded subgraph is then removed. Blobs
with more than :data:`MAX_FOLD_ELEMENTS` elements are left to be computed at run time
(storing them would cost more memory than computing them costs time), as are constant
sources read directly (they are constants already), dynamic blobs (a folded constant has
a static shape) and blobs of host objects (``tensor_buffer``: a folded constant holds
numbers only).
"""
from __future__ import annotations

import torch

from graphfront.framework import job_builder as jb
from graphfront.ops.fused_ops import encode_constant
from graphfront.passes.rewrite import Net
from graphfront.runtime import plan as rt

MAX_FOLD_ELEMENTS = 1 << 16

# op type -> inputs read for their static shape (and dtype) only
SHAPE_ONLY_INPUTS = {
    "constant_like_conf": {"like"}, "zero_like": {"like"}, "ones_like": {"like", "x"},
    "reshape_like": {"like"}, "broadcast_like": {"like"}, "reduce_sum_like": {"like"},
    "cast_like": {"dtype_like"}, "split_like": {"like"}, "conv_data_grad": {"x_like"},
}
DETERMINISTIC_SOURCES = frozenset({"constant", "arange", "eye", "folded_constant"})


def _step_independent_lr(op) -> bool:
    """A learning-rate schedule whose value does not depend on the train step: no warmup
    and no decay, or a piecewise decay without boundaries."""
    if op.WhichOneof("op_type") != "learning_rate_schedule_conf":
        return False
    conf = op.learning_rate_schedule_conf
    if conf.HasField("warmup_conf"):
        return False
    if not conf.HasField("learning_rate_decay"):
        return True
    kind = conf.learning_rate_decay.WhichOneof("type")
    d = getattr(conf.learning_rate_decay, kind) if kind else None
    return kind in ("piecewise_constant_conf", "piecewise_scaling_conf") and len(d.boundaries) == 0


def _dynamic_lbns(job):
    """Lbns whose shape may change between runs: blobs marked dynamic and, conservatively,
    every blob computed from one (shape inference does not carry the flag through every op)."""
    found = {lbn for lbn, p in job.helper.lbn2logical_blob_desc.items() if p.is_dynamic}
    changed = bool(found)
    while changed:  # one sweep when the job lists producers first
        changed = False
        for op in job.net.op:
            if any(lbn in found for _, _, lbn in jb.op_inputs(op)):
                for _, _, lbn in jb.op_outputs(op):
                    if lbn not in found:
                        found.add(lbn)
                        changed = True
    return found


def constant_ops(job):
    """Names of the constant ops of ``job`` (see module docstring), producers first."""
    dynamic = _dynamic_lbns(job)
    candidates = [op for op in job.net.op if (rt.is_pure(op) or _step_independent_lr(op)) and not op.ctrl_in_op_name]
    const_lbns, names, found = set(), [], set()
    changed = True
    while changed:  # one sweep when the job lists producers first, as built jobs do
        changed = False
        for op in candidates:
            if op.name in found:
                continue
            t = jb.op_type_name(op)
            ins = jb.op_inputs(op)
            if not ins:
                ok = t in DETERMINISTIC_SOURCES
            else:
                shape_only = SHAPE_ONLY_INPUTS.get(t, ())
                if _step_independent_lr(op):
                    shape_only = {"train_step"}
                ok = all((arg in shape_only and lbn not in dynamic) or lbn in const_lbns
                         for arg, _, lbn in ins)
            if ok:
                names.append(op.name)
                found.add(op.name)
                const_lbns.update(lbn for _, _, lbn in jb.op_outputs(op))
                changed = True
    return names


def _foldable(desc) -> bool:
    return desc.numel <= MAX_FOLD_ELEMENTS and not desc.is_dynamic and desc.dtype.torch is not None


def fold_constants(job):
    """Replace constant subgraphs by ``folded_constant`` ops (see module docstring)."""
    names = constant_ops(job)
    if not names:
        return job
    net = Net(job)
    const = set(names)
    frontier = []  # (lbn, producer name)
    for name in names:
        op = net.op(name)
        if not jb.op_inputs(op):
            continue  # a constant source read directly stays as it is
        for _, _, lbn in jb.op_outputs(op):
            if lbn in net.protected:
                continue
            if any(r.name not in const for r, _, _ in net.readers(lbn)) and \
                    _foldable(net.desc(lbn)):
                frontier.append((lbn, name))
    if not frontier:
        return job
    # evaluate what the frontier needs, in schedule order
    needed, stack = set(), [p for _, p in frontier]
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        op = net.op(n)
        shape_only = {"train_step"} if _step_independent_lr(op) else SHAPE_ONLY_INPUTS.get(jb.op_type_name(op), ())
        stack.extend(net.producer[lbn] for arg, _, lbn in jb.op_inputs(op) if arg not in shape_only)
    descs = {lbn: jb.TensorDesc.from_proto(p) for lbn, p in job.helper.lbn2logical_blob_desc.items()}
    placements = rt.placements_of(job)
    values = {}
    for name in names:
        if name not in needed:
            continue
        op = net.op(name)
        device = rt.device_of(op, placements.get(name, ("0:0",)))
        shape_only = {"train_step"} if _step_independent_lr(op) else SHAPE_ONLY_INPUTS.get(jb.op_type_name(op), ())
        for arg, _, lbn in jb.op_inputs(op):
            if arg in shape_only and lbn not in values:
                d = descs[lbn]
                values[lbn] = torch.zeros(d.shape, dtype=d.dtype.torch, device=device)
        values.update(rt.run_op(op, descs, device, values))
    for lbn, producer in frontier:
        d = descs[lbn]
        value = values[lbn]
        folded = net.add_user_op(f"System-FoldedConstant-{producer}", "folded_constant", {},
                                 {"shape": d.shape, "dtype": d.dtype, "data": encode_constant(value.to(d.dtype.torch))},
                                 like_op=producer)
        new = folded.user_conf.output["out"].s[0]
        for reader, arg, i in net.readers(lbn):
            if reader.name not in const:
                net.set_input(reader, arg, i, new)
        net.redirect_relations(lbn, new)  # (a folded gradient stays the variable's gradient)
    # drop constant ops nobody reads any more (latest first)
    for name in reversed(names):
        op = net.op(name)
        if all(lbn not in net.protected and not net.readers(lbn) for _, _, lbn in jb.op_outputs(op)):
            net.remove(name)
            for _, _, lbn in jb.op_inputs(op):
                net.consumers[lbn] = [c for c in net.consumers.get(lbn, []) if c[0] != name]
    return net.finish()
