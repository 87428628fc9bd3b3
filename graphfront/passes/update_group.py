"""Grouping of model updates into multi-tensor updates (``Job -> Job``).

All ``sgd_update`` (or all ``momentum_update``) ops of a job that share their attrs,
their ``learning_rate``/``scale_by_tensor``/``skip_if`` blobs, placement and model dtype
— in practice every variable of one optimizer — become one ``multi_tensor_sgd_update``
(``multi_tensor_momentum_update``) op, whose kernel updates the whole list with
``torch._foreach_*`` calls instead of one small kernel chain per variable. The update
formulas are unchanged (``graphfront/ops/fused_ops.py``).
"""
from __future__ import annotations

from graphfront.ops import registry
from graphfront.passes.rewrite import Net, has_op_types, single_input, user_type
from graphfront.runtime import plan as rt

GROUPABLE = {"sgd_update": ("multi_tensor_sgd_update", ()),
             "momentum_update": ("multi_tensor_momentum_update", ("momentum",))}
_SCALARS = ("learning_rate", "scale_by_tensor", "skip_if")


def group_update_ops(job):
    """Replace groups of two or more compatible update ops by one multi-tensor update."""
    if not has_op_types(job, GROUPABLE):
        return job
    net = Net(job)
    placements = rt.placements_of(job)
    groups = {}
    for op in job.net.op:
        t = user_type(op)
        if t not in GROUPABLE or op.ctrl_in_op_name:
            continue
        attrs = tuple(sorted((k, repr(v)) for k, v in net.attrs(op).items()))
        scalars = tuple(single_input(op, a) for a in _SCALARS)
        model = single_input(op, "model")
        key = (t, attrs, scalars, op.device_tag, placements.get(op.name), net.desc(model).dtype.name)
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
        for a in _SCALARS:
            lbn = single_input(ops[0], a)
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
