"""Sparse (indexed-slices) model updates: ``indexed_slices_{sgd,momentum,adam}_update``.

OneFlow v0.6.0 (``oneflow/user/ops/model_update_ops.cpp``,
``oneflow/user/kernels/model_update_kernels.cpp``): the gradient of a variable read
through ``gather`` is given as ``(model_diff_indices, model_diff_values)`` — the gathered
row ids (any integer shape ``I``) and one gradient row per id (shape ``I + model.shape[1:]``).
The kernel sums the values of equal ids (``indexed_slices_reduce_sum``), drops ids outside
``[0, model.shape[0])`` and applies the dense update formula of ``sgd_update`` /
``momentum_update`` / ``adam_update`` (see :mod:`graphfront.ops.optimizer_ops`) to those
rows only: the other rows of the model *and of its state* (momentum, Adam's m and v)
keep their values ("lazy" updates). The ops are NoGrad and update ``model`` and the
state in place. The ``indexed_slices_optimizer`` pass
(:mod:`graphfront.passes.indexed_slices`) emits them.

On several devices (OneFlow's SBP signatures of these ops): ``model`` and its state
split on axis 0 with the ids and values broadcast — each device updates the rows it
holds, ids counted from its first row (ids of other devices' rows are dropped there) —
or split on an axis ``k >= 1`` with ``model_diff_values`` split on the matching axis
``indices.ndim + k - 1``; all broadcast otherwise. On a device grid a model split on
axis 0 along a grid axis is refused (JobBuildError naming the op).
"""
from __future__ import annotations

import torch

from graphfront.framework.errors import JobBuildError
from graphfront.ops import optimizer_ops as dense, xla_rules
from graphfront.ops.common import balanced_range
from graphfront.ops.registry import ArgDef, op
from graphfront.parallel import sbp as _sbp

_IDX = ["model", "model_diff_indices", "model_diff_values", "learning_rate?"]


def reduce_rows(indices, values, rows):
    """``(unique ids, summed values)`` of the in-range ids ``[0, rows)``; the values of
    equal ids add up (OneFlow's ``indexed_slices_reduce_sum``)."""
    ids = indices.reshape(-1).long()
    vals = values.reshape(ids.numel(), -1)
    keep = (ids >= 0) & (ids < rows)
    ids, vals = ids[keep], vals[keep]
    unique, inverse = torch.unique(ids, return_inverse=True)
    summed = torch.zeros((unique.numel(), vals.shape[1]), dtype=vals.dtype, device=vals.device)
    summed.index_add_(0, inverse, vals)
    return unique, summed


def _infer(state):
    def infer(ctx):
        m, idx, val = ctx.input("model"), ctx.input("model_diff_indices"), ctx.input("model_diff_values")
        ctx.check(m.dtype.is_floating_point, f"input 'model' must be floating point, received {m.dtype.name}")
        ctx.check(len(m.shape) >= 1, f"input 'model' must have rank >= 1, received shape {m.shape}")
        ctx.check(idx.dtype.is_integer, f"input 'model_diff_indices' expected an integer dtype, received "
                                        f"{idx.dtype.name}")
        expected = tuple(idx.shape) + tuple(m.shape[1:])
        ctx.check(val.shape == expected, f"input 'model_diff_values' expected shape {expected} (indices "
                                         f"{idx.shape} + model rows {m.shape[1:]}), received {val.shape}")
        ctx.check(val.dtype is m.dtype, f"input 'model_diff_values' expected dtype {m.dtype.name} (as 'model'), "
                                        f"received {val.dtype.name}")
        dense.check_update_inputs(ctx, state)
    return infer


def _sbp_rule(state):
    def rule(ctx):
        if ctx.grid_axis is not None and ctx.sbp("model") == _sbp.split(0):
            raise JobBuildError(f"op '{ctx.op_name}' ({ctx.op_conf.user_conf.op_type_name}): its model arrives split "
                                f"on axis 0 (S(0)) along axis {ctx.grid_axis} of a device grid; graphfront's sparse "
                                "updates count row ids over a line of devices only (lay the variable out as B on "
                                "that grid axis, or place the job on a line of devices)")
        held = {a: None for a in ("model",) + tuple(state) if ctx.has(a)}
        cands = [{a: _sbp.B for a in ctx.args} | {a: _sbp.split(0) for a in held}]
        first = ctx.ndim("model_diff_indices")
        for k in range(1, ctx.ndim("model")):
            cands.append({a: _sbp.B for a in ctx.args} | {a: _sbp.split(k) for a in held}
                         | {"model_diff_values": _sbp.split(first + k - 1)})
        return cands
    return rule


def _kernel(step, inputs, state):
    names = [ArgDef.parse(s).name for s in inputs]

    def make(k):
        apply = step(k)
        lr_val = k.attrs.get("learning_rate_val", 0.0)
        split = k.sbp("model") == _sbp.split(0)  # (this device's rows: a part of the model)
        first_row = balanced_range(k.logical("model").shape[0], k.parallel_num, k.parallel_id).start if split else 0

        def run(*values):
            args = dict(zip(names, values))
            model = args["model"]
            indices = args["model_diff_indices"]
            ids, g = reduce_rows(indices - first_row if first_row else indices, args["model_diff_values"],
                                 model.shape[0])
            if ids.numel() == 0:
                return None
            rows = model.index_select(0, ids)
            sub = {**args, **{s: args[s].index_select(0, ids) for s in state}}
            lr = args.get("learning_rate")
            apply(rows, g.reshape(rows.shape).to(model.dtype), lr_val if lr is None else lr, sub)
            model.index_copy_(0, ids, rows)
            for s in state:
                args[s].index_copy_(0, ids, sub[s])
            return None
        return run
    return make


def _xla(xla_step, inputs, state):
    """The dense rule on every row, with the values of equal ids summed into their row (ids
    out of range dropped), kept only on the rows some id names: the same values as the
    kernel's update of the named rows alone (each formula is row-wise), in static shapes."""
    names = [ArgDef.parse(s).name for s in inputs]

    def make(k):
        jnp = xla_rules.jnp()
        apply = xla_step(k)
        lr_val = k.attrs.get("learning_rate_val", 0.0)
        model_shape = tuple(k.input("model").shape)

        def run(*values):
            args = dict(zip(names, values))
            model = args["model"]
            ids = args["model_diff_indices"].reshape(-1).astype(jnp.int64)
            ids = jnp.where(ids >= 0, ids, model_shape[0])  # (a negative id is dropped, not counted from the end)
            vals = args["model_diff_values"].reshape((ids.shape[0],) + model_shape[1:]).astype(model.dtype)
            g = jnp.zeros(model_shape, model.dtype).at[ids].add(vals, mode="drop")
            named = jnp.zeros(model_shape[:1], bool).at[ids].set(True, mode="drop")
            lr = args.get("learning_rate")
            new = apply(model, g, lr_val if lr is None else lr.reshape(()), args)
            keep = named.reshape(model_shape[:1] + (1,) * (len(model_shape) - 1))
            return None, tuple(jnp.where(keep, new[a], args[a]) if a in new else None
                               for a in ("model",) + tuple(state))
        return run
    return make


def _sparse_update(op_type, extra_inputs, attrs, state, step, xla_step, doc):
    inputs = _IDX + extra_inputs
    op(op_type, inputs=inputs, outputs=[], attrs={"learning_rate_val": ("float", 0.0), **attrs},
       infer=_infer(state), kernel=_kernel(step, inputs, state), no_grad=True, xla=_xla(xla_step, inputs, state),
       sbp=_sbp_rule(state), mutates=("model",) + tuple(state), host_reads=True, doc=doc)  # (unique ids: a size read on the host)


_sparse_update("indexed_slices_sgd_update", [], {"weight_decay": ("float", 0.0)}, (), dense._sgd_step,
               dense._sgd_xla_step,
               "sgd_update on the rows named by model_diff_indices")
_sparse_update("indexed_slices_momentum_update", ["momentum"],
               {"weight_decay": ("float", 0.0), "beta": ("float", 0.9)}, ("momentum",), dense._momentum_step,
               dense._momentum_xla_step,
               "momentum_update on the rows named by model_diff_indices (their momentum only)")
_sparse_update("indexed_slices_adam_update", ["bias_correction1?", "bias_correction2?", "m", "v", "max_v"],
               {"bias_correction1_val": ("float", 1.0), "bias_correction2_val": ("float", 1.0),
                "beta1": ("float", 0.9), "beta2": ("float", 0.999), "epsilon": ("float", 1e-8),
                "weight_decay": ("float", 0.0), "amsgrad": ("bool", False), "do_bias_correction": ("bool", True)},
               ("m", "v", "max_v"), dense._adam_step, dense.adam_xla_step,
               "adam_update on the rows named by model_diff_indices (their m, v and max_v only): lazy Adam")
