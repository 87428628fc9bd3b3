"""Grouping of model updates into multi-tensor updates (``Job -> Job``).

All ``sgd_update`` (``momentum_update``, ``adam_update``) ops of a job that share their
attrs, their ``learning_rate``/``scale_by_tensor``/``skip_if`` blobs, placement and model
dtype — in practice every variable of one optimizer — become one
``multi_tensor_sgd_update`` (``multi_tensor_momentum_update``, ``multi_tensor_adam_update``)
op, whose kernel updates the whole list in a few multi-tensor kernels instead of one small
kernel chain per variable (``graphfront/ops/fused_ops.py``).

:func:`group_scalar_mul_by_tensor` likewise makes the ``scalar_mul_by_tensor`` ops that
scale gradients by one factor for the optimizer (dynamic loss scaling's undo) one
``multi_scalar_mul_by_tensor``, and :func:`group_variable_casts` the ``cast`` ops of
variables (auto mixed precision's float32 weights to float16 at every step) one
``multi_cast``.

``adam_update`` groups only without ``l1``/``l2`` and, with ``do_bias_correction``, when its
``bias_correction1/2`` blobs are ``adam_bias_correction_factor`` ops of its own ``beta1`` /
``beta2`` over one ``train_step``: the multi-tensor kernel computes those factors itself
from ``train_step``, and the factor ops left without readers are pruned.
"""
from __future__ import annotations

from graphfront.framework import job_builder as jb
from graphfront.ops import registry
from graphfront.passes.boxing import parallel_num
from graphfront.passes.rewrite import Net, has_op_types, single_input, user_type

GROUPABLE = {"sgd_update": ("multi_tensor_sgd_update", ()),
             "momentum_update": ("multi_tensor_momentum_update", ("momentum",)),
             "adam_update": ("multi_tensor_adam_update", ("m", "v", "max_v"))}
_SCALARS = ("learning_rate", "scale_by_tensor", "skip_if")
_UNGROUPABLE = object()


def _train_step(net, op):
    """The ``train_step`` lbn an ``adam_update`` op's bias correction comes from: None without
    bias correction, ``_UNGROUPABLE`` when its factors are not ``adam_bias_correction_factor``
    ops of its own betas over one train step."""
    if user_type(op) != "adam_update":
        return None
    attrs = net.attrs(op)
    if not attrs.get("do_bias_correction", True):
        return None
    steps = set()
    for idx in (1, 2):
        lbn = single_input(op, f"bias_correction{idx}")
        factor = net.producer_op(lbn) if lbn is not None else None
        if user_type(factor) != "adam_bias_correction_factor" or \
                net.attrs(factor)["beta"] != attrs[f"beta{idx}"]:
            return _UNGROUPABLE
        steps.add(single_input(factor, "train_step"))
    return steps.pop() if len(steps) == 1 else _UNGROUPABLE


def group_update_ops(job):
    """Replace groups of two or more compatible update ops by one multi-tensor update."""
    if not has_op_types(job, GROUPABLE):
        return job
    net = Net(job)
    groups = {}
    for op in job.net.op:
        t = user_type(op)
        if t not in GROUPABLE or op.ctrl_in_op_name:
            continue
        attrs = tuple(sorted((k, repr(v)) for k, v in net.attrs(op).items()))
        train_step = _train_step(net, op)
        if train_step is _UNGROUPABLE:
            continue
        scalars = tuple(single_input(op, a) for a in _SCALARS) + (train_step,)
        model = single_input(op, "model")
        key = (t, attrs, scalars, net.placement(op), net.desc(model).dtype.name)
        groups.setdefault(key, []).append(op.name)
    changed = False
    for key, names in groups.items():
        if len(names) < 2:
            continue
        t = key[0]
        multi, state = GROUPABLE[t]
        ops = [net.op(n) for n in names]
        inputs = {"model": [single_input(o, "model") for o in ops],
                  "model_diff": [single_input(o, "model_diff") for o in ops]}
        for s in state:
            inputs[s] = [single_input(o, s) for o in ops]
        for a, lbn in zip(_SCALARS + ("train_step",), key[2]):
            if lbn is not None:
                inputs[a] = lbn
        attrs = net.attrs(ops[0])
        known = registry.lookup(multi).attrs
        if any(k not in known and v != registry.lookup(t).attrs[k].default for k, v in attrs.items()):
            continue  # an attr the multi-tensor op cannot express
        attrs = {k: v for k, v in attrs.items() if k in known}
        net.add_user_op(f"System-MultiTensorUpdate-{names[0]}", multi, inputs, attrs, outputs=(), like_op=names[0])
        net.remove(*names)
        changed = True
    return net.finish() if changed else job


def _feeds_itself(net, ops) -> bool:
    """Whether an input of one of ``ops`` is computed from the output of another (merging
    them would close a cycle): a walk up the producers of their inputs."""
    names = {o.name for o in ops}
    todo = [single_input(o, "x") for o in ops]
    seen = set()
    while todo:
        producer = net.producer_op(todo.pop())
        if producer is None or producer.name in seen:
            continue
        if producer.name in names:
            return True
        seen.add(producer.name)
        todo.extend(lbn for _, _, lbn in jb.op_inputs(producer))
    return False


_SCALINGS = {"scalar_mul_by_tensor": "scalar", "fused_cast_scale": "scale_by_tensor"}   # op type -> its scalar
_OPTIMIZER_READERS = ("multi_count_not_finite", "count_not_finite", "multi_square_sum", "square_sum")


def group_scalar_mul_by_tensor(job):
    """Replace the ``scalar_mul_by_tensor`` and ``fused_cast_scale`` (attr ``scale`` 1) ops of
    one ``scalar`` (and output dtype and placement) whose outputs only update ops and the
    optimizer's reductions (non-finite counts, square sums) read by one
    ``multi_scalar_mul_by_tensor``: the loss-scale undo of every gradient, float16 ones cast
    on the way, in a few multi-tensor kernels. A group one of whose inputs is computed from
    another's output stays as it is (one op would feed itself)."""
    if not has_op_types(job, _SCALINGS):
        return job
    net = Net(job)
    groups = {}
    for op in job.net.op:
        t = user_type(op)
        if t not in _SCALINGS or op.ctrl_in_op_name or (t == "fused_cast_scale" and net.attrs(op)["scale"] != 1.0):
            continue
        y = op.user_conf.output["y"].s[0]
        readers = [r for r, _, _ in net.readers(y)]
        if y in net.protected or not readers or any(
                user_type(r) not in _OPTIMIZER_READERS and user_type(r) not in GROUPABLE
                and not (user_type(r) or "").startswith("multi_tensor_") for r in readers):
            continue
        key = (single_input(op, _SCALINGS[t]), net.placement(op), net.desc(y).dtype.name)
        groups.setdefault(key, []).append(op)
    changed = False
    for (scalar, *_), ops in groups.items():
        if len(ops) < 2 or _feeds_itself(net, ops):
            continue
        multi = net.add_user_op(f"System-MultiScalarMulByTensor-{ops[0].name}", "multi_scalar_mul_by_tensor",
                                {"x": [single_input(o, "x") for o in ops], "scalar": scalar},
                                outputs={"y": len(ops)}, like_op=ops[-1].name)
        for i, o in enumerate(ops):
            net.redirect(o.user_conf.output["y"].s[0], multi.user_conf.output["y"].s[i])
        net.remove(*(o.name for o in ops))
        changed = True
    return net.finish() if changed else job


def group_variable_casts(job):
    """Replace the ``cast`` ops reading a variable, of one source and target dtype, by one
    ``multi_cast`` placed where the first of them was (each output then exists before any of
    their readers): on a GPU a few multi-tensor kernels instead of one small kernel per
    weight. Jobs on one device only (the multi-op's inputs share one layout)."""
    if not has_op_types(job, ("cast",)) or parallel_num(job) > 1:
        return job
    net = Net(job)
    groups = {}
    for op in job.net.op:
        if user_type(op) != "cast" or op.ctrl_in_op_name:
            continue
        x = single_input(op, "in")
        if jb.op_kind(net.producer_op(x)) != "variable_conf":
            continue
        groups.setdefault((op.device_tag, net.desc(x).dtype.name, net.attrs(op)["dtype"]), []).append(op)
    changed = False
    for (_, _, dtype), ops in groups.items():
        if len(ops) < 2:
            continue
        multi = net.add_user_op(f"System-MultiCast-{ops[0].name}", "multi_cast",
                                {"in": [single_input(o, "in") for o in ops]}, {"dtype": dtype},
                                outputs={"out": len(ops)}, like_op=ops[0].name)
        for i, o in enumerate(ops):
            net.redirect(o.user_conf.output["out"].s[0], multi.user_conf.output["out"].s[i])
        net.remove(*(o.name for o in ops))
        changed = True
    return net.finish() if changed else job
