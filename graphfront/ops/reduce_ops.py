"""Reduction ops: ``reduce_*`` over axes, arg/sort/top-k, square sums, finiteness counts and
``l2_normalize``.

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0 (``oneflow/user/ops/``:
``reduce_ops.cpp``, ``argmax_op.cpp``, ``top_k_op.cpp``, ``sort_op.cpp``,
``square_sum_op.cpp``, ``count_not_finite_op.cpp``, ``l2_normalize_op.cpp``). Where a
formula is a convention (ties of max/min) the op's docstring says which.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import OpRunError
from graphfront.ops.common import at_least_1d, float_input, index_checks, like, norm_axis, raising_bad_ids
from graphfront.ops import common, onnx_rules, xla_rules
from graphfront.ops.onnx_rules import const_as, int64s, nonzero, reduce_node
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


# ----------------------------------------------------------------- reductions

def _reduce_axes(ctx):
    d = ctx.input("input_tensor")
    axes = ctx.attr("axis")
    ctx.check(len(axes) > 0, "attr 'axis' must not be empty")
    return d, sorted({norm_axis(a, len(d.shape)) for a in axes})


def _reduce_infer(out_dtype=None):
    def infer(ctx):
        d, axes = _reduce_axes(ctx)
        if ctx.attr("keepdims"):
            shape = tuple(1 if i in axes else s for i, s in enumerate(d.shape))
        else:
            shape = at_least_1d(s for i, s in enumerate(d.shape) if i not in axes)
        ctx.set_output("output_tensor", shape, out_dtype or d.dtype)
    return infer


def reduce_axes(k):
    """``(axes, keepdims)`` of a ``reduce_*`` op at run time: its ``axis`` attr as sorted,
    distinct non-negative axes of ``input_tensor`` (shared by the kernels and xla rules).
    keepdims is also True when every axis is reduced (see ``flat_result``)."""
    ndim = len(k.input("input_tensor").shape)
    axes = tuple(sorted({a % ndim for a in k.attr("axis")}))
    return axes, k.attr("keepdims") or len(axes) == ndim


def _removes_every_axis(ndim, axes, keepdims):
    """Whether a reduction over ``axes`` of a rank-``ndim`` input removes every axis: OneFlow's
    single-client result then has shape ``(1,)``, the kept-dims result reshaped."""
    return not keepdims and len(axes) == ndim


def flat_result(k, fn):
    """``fn`` (the reduction with ``reduce_axes(k)``), its result reshaped to ``(1,)`` when the
    op removes every axis."""
    axes, _ = reduce_axes(k)
    if _removes_every_axis(len(k.input("input_tensor").shape), axes, k.attr("keepdims")):
        return lambda x: fn(x).reshape(1)
    return fn


def _reduce_kernel(fn):
    def make(k):
        axes, keep = reduce_axes(k)
        return flat_result(k, lambda x: fn(x, axes, keep))
    return make


REDUCE_ATTRS = {"axis": "list_int32", "keepdims": ("bool", False)}


def _reduce_onnx_node(c, onnx_type, x, out):
    """The ``Reduce*`` node of a ``reduce_*`` op (attrs axis, keepdims) of ``x`` into ``out``
    (a fresh name when None); one that removes every axis keeps them and reshapes to ``(1,)``."""
    ndim = len(c.input_desc("input_tensor").shape)
    axes = sorted({a % ndim for a in c.attr("axis")})
    if not _removes_every_axis(ndim, axes, c.attr("keepdims")):
        return reduce_node(c, onnx_type, x, axes, int(c.attr("keepdims")), out)
    return c.node("Reshape", [reduce_node(c, onnx_type, x, axes, 1), c.const(int64s([1]))],
                  None if out is None else [out])


def _reduce_onnx(onnx_type):
    """``reduce_*`` ops (``input_tensor`` -> ``output_tensor``, attrs axis, keepdims)."""
    def convert(c):
        _reduce_onnx_node(c, onnx_type, c.input("input_tensor"), c.output("output_tensor"))
    return convert


def _reduce_xla(name):
    """``reduce_*`` ops (``input_tensor`` -> ``output_tensor``, attrs axis, keepdims)."""
    def make(k):
        axes, keep = reduce_axes(k)
        fn = xla_rules.jnp_fn(name)
        dtype = k.output("output_tensor").dtype.np
        if name == "sum":
            return flat_result(k, lambda x: fn(x, axis=axes, keepdims=keep, dtype=dtype))
        return flat_result(k, lambda x: fn(x, axis=axes, keepdims=keep).astype(dtype))
    return make


op("reduce_sum", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(lambda x, a, keep: torch.sum(x, dim=a, keepdim=keep, dtype=x.dtype)),
   xla=_reduce_xla("sum"),
   sbp=_sbp.reduce(split_to_partial=True, partial_in=True), onnx=_reduce_onnx("ReduceSum"),
   grad=lambda g: g.needs("input_tensor") and g.set_grad("input_tensor", g.emit(
       "broadcast_like", {"x": g.dout("output_tensor"), "like": g.input("input_tensor")},
       {"broadcast_axes": g.attr("axis")})))


def _reduce_extremum_grad(g):
    """reduce_max/reduce_min grad: dy shared equally by the input elements equal to the result
    (OneFlow's seven-op wiring, ``oneflow/user/ops/reduce_ops.cpp``)."""
    if not g.needs("input_tensor"):
        return
    x, n = g.input("input_tensor"), g.op_name
    axis, keep = g.attr("axis"), g.attr("keepdims")
    out = g.emit("broadcast_like", {"x": g.output("output_tensor"), "like": x}, {"broadcast_axes": axis},
                 name=f"{n}_grad_broadcast_out")
    eq = g.emit("broadcast_equal", {"x": x, "y": out}, name=f"{n}_grad_broadcast_eq")
    mask = g.emit("cast_like", {"in": eq, "dtype_like": x}, name=f"{n}_grad_cast_mask")
    count = g.emit("reduce_sum", {"input_tensor": mask}, {"axis": axis, "keepdims": keep},
                   name=f"{n}_grad_reduce_sum_mask")
    divided = g.emit("broadcast_div", {"x": g.dout("output_tensor"), "y": count}, name=f"{n}_grad_divide_count")
    spread = g.emit("broadcast_like", {"x": divided, "like": x}, {"broadcast_axes": axis},
                    name=f"{n}_grad_broadcast_divided_dy")
    g.set_grad("input_tensor", g.emit("multiply", {"x": spread, "y": mask}, name=f"{n}_grad_multiply_mask"))


def _prod(x, axes, keep):
    for a in sorted(axes, reverse=True):
        x = torch.prod(x, dim=a, keepdim=keep)
    return x


# (max, min, product, any, all of parts are not their sums: split on kept axes only)
_KEPT_AXES = _sbp.reduce(split_to_partial=False)
op("reduce_max", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(lambda x, a, keep: torch.amax(x, dim=a, keepdim=keep)),
   onnx=_reduce_onnx("ReduceMax"), sbp=_KEPT_AXES,
   grad=_reduce_extremum_grad, xla=_reduce_xla("max"))
op("reduce_min", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(lambda x, a, keep: torch.amin(x, dim=a, keepdim=keep)),
   onnx=_reduce_onnx("ReduceMin"), sbp=_KEPT_AXES,
   grad=_reduce_extremum_grad, xla=_reduce_xla("min"))
# no grad function (as OneFlow)
op("reduce_prod", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(_prod), onnx=_reduce_onnx("ReduceProd"),
   xla=_reduce_xla("prod"), sbp=_KEPT_AXES)


def _reduce_logical_onnx(onnx_type):
    """reduce_any (ReduceMax) / reduce_all (ReduceMin) of ``x != 0``, bool."""
    def convert(c):
        flags = c.node("Cast", [nonzero(c, c.input("input_tensor"))], to=onnx_rules.INT32)
        r = _reduce_onnx_node(c, onnx_type, flags, None)
        c.node("Cast", [r], [c.output("output_tensor")], to=onnx_rules.BOOL)
    return convert


def _reduce_logical_xla(name):
    """reduce_any / reduce_all of ``x != 0`` (bool)."""
    def make(k):
        axes, keep = reduce_axes(k)
        fn = xla_rules.jnp_fn(name)
        return flat_result(k, lambda x: fn(x != 0, axis=axes, keepdims=keep))
    return make


op("reduce_any", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(_dt.bool), kernel=_reduce_kernel(lambda x, a, keep: torch.any(x != 0, dim=a, keepdim=keep)),
   onnx=_reduce_logical_onnx("ReduceMax"), xla=_reduce_logical_xla("any"), sbp=_KEPT_AXES)
op("reduce_all", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(_dt.bool), kernel=_reduce_kernel(lambda x, a, keep: torch.all(x != 0, dim=a, keepdim=keep)),
   onnx=_reduce_logical_onnx("ReduceMin"), xla=_reduce_logical_xla("all"), sbp=_KEPT_AXES)


def _check_reduced_shape(ctx, big, small, axes_attr):
    """``small``'s shape must be ``big``'s with the dims on attr ``axes_attr`` set to 1, or
    that shape with leading 1s left out (a broadcast operand's gradient), or with those dims
    removed ((1,) where all are): OneFlow's ``IsAxesLegal`` of ``broadcast_like``. A dynamic
    blob, whose dims are upper bounds, is checked for its rank only."""
    b, s = ctx.input(big), ctx.input(small)
    axes = ctx.attr(axes_attr)
    ctx.check(all(-len(b.shape) <= a < len(b.shape) for a in axes),
              f"attr '{axes_attr}' {list(axes)} has an axis out of range for input '{big}' of shape {b.shape}")
    axes = {a % len(b.shape) for a in axes}
    ones = tuple(1 if i in axes else d for i, d in enumerate(b.shape))
    removed = tuple(d for i, d in enumerate(b.shape) if i not in axes) or (1,)
    padded = (1,) * (len(b.shape) - len(s.shape)) + tuple(s.shape)
    fits = (len(s.shape) <= len(b.shape) if b.is_dynamic or s.is_dynamic
            else tuple(s.shape) == removed or padded == ones)
    ctx.check(fits, f"input '{small}' must have shape {ones} or {removed} (input '{big}' {b.shape} with "
                    f"attr '{axes_attr}' {sorted(axes)} set to 1 or removed), received {s.shape}")


def _reduce_sum_like_infer(ctx):
    x, like_ = ctx.input("x"), ctx.input("like")
    _check_reduced_shape(ctx, "x", "like", "axis")
    ctx.set_output("y", like_.shape, x.dtype)


def _reduce_sum_like_kernel(k):
    axes = tuple(k.attr("axis"))
    shape = k.input("like").shape
    if not axes:
        return lambda x, like_: x
    if k.input("like").is_dynamic:
        return lambda x, like_: torch.sum(x, dim=axes, keepdim=True).reshape(like_.shape)
    return lambda x, like_: torch.sum(x, dim=axes, keepdim=True).reshape(shape)


def _reduce_sum_like_xla(k):
    axes, shape = tuple(k.attr("axis")), k.input("like").shape
    if not axes:
        return lambda x, like_: x
    return lambda x, like_: xla_rules.jnp().sum(x, axis=axes, keepdims=True).reshape(shape)


def _reduce_sum_like_onnx(c):
    """sum of x over attr axis (kept), reshaped to like's shape."""
    axes = list(c.attr("axis"))
    if not axes:
        c.node("Identity", [c.input("x")], [c.output("y")])
        return
    s = reduce_node(c, "ReduceSum", c.input("x"), axes, 1)
    c.node("Reshape", [s, c.const(int64s(c.input_desc("like").shape))], [c.output("y")])


def _kept_positions(big, small, axes):
    """Each axis ``k`` of shape ``big`` outside ``axes`` -> its position in shape ``small``
    (the same index, or with ``axes`` removed), where the two dims agree."""
    kept = [k for k in range(len(big)) if k not in axes]
    if len(small) not in (len(big), len(kept)):
        return {}
    pos = {k: k if len(small) == len(big) else j for j, k in enumerate(kept)}
    return {k: j for k, j in pos.items() if small[j] == big[k]}


def _reduce_sum_like_sbp(ctx):
    """OneFlow's: x split on a kept axis splits like and y on it; on a summed axis, y is a
    partial sum (like, read for its shape, broadcast); partial sums pass through."""
    x = ctx.shape("x")
    axes = {a % len(x) for a in ctx.attr("axis")}
    s = _sbp.split
    cands = [{"x": s(k), "like": s(j), "y": s(j)} for k, j in _kept_positions(x, ctx.shape("like"), axes).items()]
    cands += [{"x": s(k), "like": _sbp.B, "y": _sbp.P} for k in sorted(axes)]
    return cands + [{"x": _sbp.P, "like": _sbp.B, "y": _sbp.P}]


op("reduce_sum_like", inputs=["x", "like"], outputs=["y"], attrs={"axis": "list_int32"},
   infer=_reduce_sum_like_infer, kernel=_reduce_sum_like_kernel, no_grad=True, onnx=_reduce_sum_like_onnx,
   xla=_reduce_sum_like_xla, sbp=_reduce_sum_like_sbp)


def _broadcast_like_infer(ctx):
    ctx.check(len(ctx.attr("broadcast_axes")) > 0, "attr 'broadcast_axes' must not be empty")
    _check_reduced_shape(ctx, "like", "x", "broadcast_axes")
    ctx.check(ctx.input("x").dtype == ctx.input("like").dtype,  # y is like's desc: OneFlow reads x as y's type
              f"input 'x' must have the dtype of input 'like', {ctx.input('like').dtype}, "
              f"received {ctx.input('x').dtype}")
    ctx.set_output("y", ctx.input("like").shape, ctx.input("like").dtype)


def _broadcast_like_kernel(k):
    like_shape = k.input("like").shape
    axes = sorted(a % len(like_shape) for a in k.attr("broadcast_axes"))
    x_shape = k.input("x").shape
    keep_shape = tuple(1 if i in axes else s for i, s in enumerate(like_shape))
    needs_view = x_shape != keep_shape
    if k.input("like").is_dynamic:  # the run-time shape of `like`
        return lambda x, like_: x.reshape([1 if i in axes else s for i, s in enumerate(like_.shape)]).expand(
            like_.shape)
    return lambda x, like_: (x.reshape(keep_shape) if needs_view else x).expand(like_shape)


def _broadcast_like_xla(k):
    like_shape = k.input("like").shape
    axes = sorted(a % len(like_shape) for a in k.attr("broadcast_axes"))
    keep_shape = tuple(1 if i in axes else s for i, s in enumerate(like_shape))
    return lambda x, like_: xla_rules.jnp().broadcast_to(x.reshape(keep_shape), like_shape)


def _broadcast_like_keep_shape_onnx(c):
    """broadcast_like: ``like``'s shape with 1 on ``broadcast_axes`` (``x`` reshaped to it)."""
    shape = c.input_desc("like").shape
    axes = {a % len(shape) for a in c.attr("broadcast_axes")}
    return [1 if i in axes else s for i, s in enumerate(shape)]


def _broadcast_like_sbp(ctx):
    """OneFlow's: like split on a kept axis splits x and y on it; on a broadcast axis, x is
    broadcast; a partial x gives a partial y (like, read for its shape, broadcast)."""
    like = ctx.shape("like")
    axes = {a % len(like) for a in ctx.attr("broadcast_axes")}
    s = _sbp.split
    cands = [{"x": s(j), "like": s(k), "y": s(k)} for k, j in _kept_positions(like, ctx.shape("x"), axes).items()]
    cands += [{"x": _sbp.B, "like": s(k), "y": s(k)} for k in sorted(axes)]
    return cands + [{"x": _sbp.P, "like": _sbp.B, "y": _sbp.P}]


op("broadcast_like", inputs=["x", "like"], outputs=["y"], attrs={"broadcast_axes": "list_int32"},
   infer=_broadcast_like_infer, kernel=_broadcast_like_kernel, xla=_broadcast_like_xla,
   onnx=onnx_rules.expand_to_output("x", "y", _broadcast_like_keep_shape_onnx),
   grad=lambda g: g.needs("x") and g.set_grad("x", g.emit(
       "reduce_sum_like", {"x": g.dout("y"), "like": g.input("x")}, {"axis": g.attr("broadcast_axes")})),
   view=True, sbp=_broadcast_like_sbp)


# ----------------------------------------------------------------- argmax, top_k, sort

def _vector_input(k):
    """Whether the argmax input is a vector: the result keeps the reduced axis, shape ``(1,)``
    (OneFlow's single-client argmax of a vector)."""
    return len(k.input("in").shape) == 1


def _argmax_onnx(c):
    """argmax over the last axis, the first of equal maxima (int64)."""
    keep = int(len(c.input_desc("in").shape) == 1)
    c.node("ArgMax", [c.input("in")], [c.output("out")], axis=-1, keepdims=keep, select_last_index=0)


# argmax, top_k, sort, arg_sort: along the last axis, independent along the others (OneFlow's rules)
_ALONG_LAST = _sbp.leading("in", 1)

# argmax: int64 index of the max over the last axis (the first of equal maxima); the input's
# shape without its last axis, (1,) for a vector
op("argmax", inputs=["in"], outputs=["out"],
   infer=lambda ctx: ctx.set_output("out", at_least_1d(ctx.input("in").shape[:-1]), _dt.int64),
   kernel=lambda k: functools.partial(torch.argmax, dim=-1, keepdim=_vector_input(k)), no_grad=True,
   onnx=_argmax_onnx, sbp=_ALONG_LAST,
   xla=lambda k: lambda x: xla_rules.jnp().argmax(x, axis=-1, keepdims=_vector_input(k)).astype("int64"))


def _top_k_infer(ctx):
    d = ctx.input("in")
    k = ctx.attr("k")
    ctx.check(len(d.shape) >= 1, f"input 'in' must have rank >= 1, received shape {d.shape}")
    ctx.check(k >= 1, f"attr 'k' must be >= 1, received {k}")
    ctx.set_output("out", d.shape[:-1] + (min(k, d.shape[-1]),), _dt.int32)


def _top_k_kernel(k):
    # always largest first, equal values in index order: with sorted=False the order is
    # unspecified (OneFlow's CPU kernel, oneflow/user/kernels/top_k_kernel.cpp, keeps
    # std::nth_element's order), so the sorted order is one it allows, and the one ONNX TopK
    # (the exported form) and the xla rule give. (A stable sort: torch.topk orders ties arbitrarily.)
    n = min(k.attr("k"), k.input("in").shape[-1])
    return lambda x: torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :n].to(torch.int32)


def _top_k_xla(k):
    n = min(k.attr("k"), k.input("in").shape[-1])
    return lambda x: xla_rules.jnp().argsort(x, axis=-1, stable=True, descending=True)[..., :n].astype("int32")


def _top_k_onnx_node(c, k, largest, values):
    """``TopK`` over the last axis, sorted; equal values keep their index order (a stable sort)."""
    outs = [c.output("out"), c.tmp("indices")] if values else [c.tmp("values"), c.tmp("indices")]
    c.node("TopK", [c.input("in"), c.const(int64s([k]))], outs, axis=-1, largest=int(largest), sorted=1)
    if not values:
        c.node("Cast", [outs[1]], [c.output("out")], to=onnx_rules.INT32)


def _top_k_onnx(c):
    """int32 indices of the k largest entries of the last axis, largest first; on equal values
    the lower index first (as the kernel)."""
    k = c.output_desc("out").shape[-1]
    _top_k_onnx_node(c, k, True, False)


# top_k: int32 indices of the k largest entries of the last axis
op("top_k", inputs=["in"], outputs=["out"], attrs={"k": ("int32", 0), "sorted": ("bool", False)},
   infer=_top_k_infer, kernel=_top_k_kernel, no_grad=True, onnx=_top_k_onnx, xla=_top_k_xla, sbp=_ALONG_LAST)


def _in_top_k_infer(ctx):
    t, p = ctx.input("targets"), ctx.input("predictions")
    ctx.check(len(t.shape) == 1, f"input 'targets' must be 1-D, received shape {t.shape}")
    ctx.check(len(p.shape) == 2, f"input 'predictions' must be 2-D, received shape {p.shape}")
    ctx.check(t.is_dynamic == p.is_dynamic, f"inputs 'targets' and 'predictions' must both be dynamic or both "
                                            f"static, received dynamic={t.is_dynamic} and {p.is_dynamic}")
    # dynamic inputs: the static shapes are upper bounds, the kernel checks the run-time rows
    ctx.check(t.is_dynamic or t.shape[0] == p.shape[0],
              f"input 'targets' expected shape {(p.shape[0],)} (rows of 'predictions' {p.shape}), received {t.shape}")
    ctx.check(t.dtype.is_integer, f"input 'targets' expected an integer dtype, received {t.dtype.name}")
    ctx.check(p.dtype.is_floating_point, f"input 'predictions' expected a floating dtype, received {p.dtype.name}")
    ctx.set_output("out", t.shape, _dt.int8)


def _in_top_k_kernel(k):
    kk = k.attr("k")

    def in_top_k(targets, predictions):
        if targets.shape[0] != predictions.shape[0]:
            raise OpRunError(f"op '{k.op_name}' (in_top_k): input 'targets' has {targets.shape[0]} rows, "
                             f"'predictions' {predictions.shape[0]}: they must be equal")
        # the target is in the top k when fewer than k classes score strictly higher; a row
        # with a non-finite score cannot say (0), as OneFlow's and TensorFlow's kernels
        target_score = predictions.gather(1, targets.long().unsqueeze(1))
        return (((predictions > target_score).sum(1) < kk) & torch.isfinite(predictions).all(1)).to(torch.int8)
    return in_top_k


def _in_top_k_onnx(c):
    """int8 1 where fewer than k classes score strictly higher than the target's class and
    every score of the row is finite."""
    p = c.input("predictions")
    target = c.node("Unsqueeze", [c.node("Cast", [c.input("targets")], to=onnx_rules.INT64), c.const(int64s([1]))])
    score = c.node("GatherElements", [p, target], axis=1)
    higher = c.node("Cast", [c.node("Greater", [p, score])], to=onnx_rules.INT64)
    count = reduce_node(c, "ReduceSum", higher, [1], 0)
    bad = c.node("Cast", [c.node("Or", [c.node("IsNaN", [p]), c.node("IsInf", [p])])], to=onnx_rules.INT64)
    finite = c.node("Equal", [reduce_node(c, "ReduceSum", bad, [1], 0), c.const(np.int64(0))])
    inside = c.node("And", [c.node("Less", [count, c.const(np.int64(c.attr("k")))]), finite])
    c.node("Cast", [inside], [c.output("out")], to=onnx_rules.INT8)


def _in_top_k_xla(k):
    kk = k.attr("k")
    (_, size, error), = _IN_TOP_K_CHECKS(k)

    def in_top_k(targets, predictions):
        jnp = xla_rules.jnp()
        xla_rules.check_ids(targets, size, error)
        target_score = jnp.take_along_axis(predictions, targets.astype("int32")[:, None], axis=1, mode="clip")
        return (((predictions > target_score).sum(1) < kk) & jnp.isfinite(predictions).all(1)).astype("int8")
    return in_top_k


_IN_TOP_K_CHECKS = index_checks("in_top_k", "targets", lambda k: k.input("predictions").shape[1])
op("in_top_k", inputs=["targets", "predictions"], outputs=["out"], attrs={"k": ("int32", 0)},
   infer=_in_top_k_infer, kernel=raising_bad_ids(_IN_TOP_K_CHECKS, 0, _in_top_k_kernel), checks=_IN_TOP_K_CHECKS,
   no_grad=True, onnx=_in_top_k_onnx, xla=_in_top_k_xla, sbp=_sbp.batch())


def _direction(ctx):
    d = ctx.attr("direction")
    ctx.check(d in ("ASCENDING", "DESCENDING"), f"attr 'direction' must be 'ASCENDING' or 'DESCENDING', "
                                                f"received {d!r}")


def _sort_infer(out_dtype=None):
    def infer(ctx):
        _direction(ctx)
        d = ctx.input("in")
        ctx.check(len(d.shape) >= 1, f"input 'in' must have rank >= 1, received shape {d.shape}")
        ctx.set_output("out", d.shape, out_dtype or d.dtype)
    return infer


def _sort_kernel(indices):
    def make(k):
        desc = k.attr("direction") == "DESCENDING"
        if indices:
            return lambda x: torch.sort(x, dim=-1, descending=desc, stable=True).indices.to(torch.int32)
        return lambda x: torch.sort(x, dim=-1, descending=desc, stable=True).values
    return make


def _sort_xla(indices):
    """The kernel's stable sort over jax arrays (NaN the largest value, as torch.sort)."""
    def make(k):
        desc = k.attr("direction") == "DESCENDING"
        if indices:
            return lambda x: xla_rules.jnp().argsort(x, axis=-1, stable=True, descending=desc).astype("int32")
        return lambda x: xla_rules.jnp().sort(x, axis=-1, stable=True, descending=desc)
    return make


def _sort_onnx(values):
    """sort (values) / arg_sort (int32 indices): a stable sort of the last axis as TopK of all entries."""
    def convert(c):
        _top_k_onnx_node(c, c.input_desc("in").shape[-1], c.attr("direction") == "DESCENDING", values)
    return convert


op("arg_sort", inputs=["in"], outputs=["out"], attrs={"direction": "string"}, infer=_sort_infer(_dt.int32),
   kernel=_sort_kernel(True), no_grad=True, onnx=_sort_onnx(False), xla=_sort_xla(True), sbp=_ALONG_LAST)
op("sort", inputs=["in"], outputs=["out"], attrs={"direction": "string"}, infer=_sort_infer(),
   kernel=_sort_kernel(False), no_grad=True, onnx=_sort_onnx(True), xla=_sort_xla(False), sbp=_ALONG_LAST)


# ----------------------------------------------------------------- square sums, finiteness counts

def _sum_infer(dtype=None, repeated=False):
    def infer(ctx):
        ins = ctx.inputs("x") if repeated else [ctx.input("x")]
        for i, d in enumerate(ins):
            ctx.check(d.dtype is ins[0].dtype,
                      f"input 'x_{i}' expected dtype {ins[0].dtype.name}, received {d.dtype.name}")
        ctx.set_output("y", (1,), dtype or ins[0].dtype)
    return infer


def _square_sum(x):
    return torch.sum(x * x).reshape(1)


_CHUNK = 1 << 26   # elements per concatenation of a multi-tensor reduction (a bound on its temporary memory)


def _chunks(xs):
    """The elements of the tensors ``xs`` (one dtype) as 1-D tensors in memory order
    (:func:`_memory_order`): where :func:`~graphfront.ops.common.multi_tensor_kernels`, each
    run of consecutive tensors lying side by side in one buffer
    (:func:`~graphfront.ops.common.packed_empty_like`) as one view of it, and the others in
    a few concatenations of at most ``_CHUNK`` elements (or one tensor, when larger), so that
    a multi-tensor reduction runs a few large kernels whatever the number of tensors, as
    OneFlow's multi-tensor kernels do; else one per tensor."""
    if not common.multi_tensor_kernels(xs[0].device):
        yield from (_memory_order(x) for x in xs)
        return
    chunk, size = [], 0
    for run in _runs([_memory_order(x) for x in xs]):
        if len(run) > 1:
            yield run[0].as_strided((sum(p.numel() for p in run),), (1,))
            continue
        if chunk and size + run[0].numel() > _CHUNK:
            yield torch.cat(chunk) if len(chunk) > 1 else chunk[0]
            chunk, size = [], 0
        chunk.append(run[0])
        size += run[0].numel()
    if chunk:
        yield torch.cat(chunk) if len(chunk) > 1 else chunk[0]


def _runs(parts):
    """``parts`` (1-D tensors) split into runs of consecutive ones that share one storage,
    each starting where the one before ends (the same storage, not merely adjacent memory:
    which separate allocations happen to touch varies from step to step)."""
    run = []
    for p in parts:
        if run and not (p.stride() == (1,) and run[-1].stride() == (1,)
                        and p.untyped_storage()._cdata == run[-1].untyped_storage()._cdata
                        and p.storage_offset() == run[-1].storage_offset() + run[-1].numel()):
            yield run
            run = []
        run.append(p)
    if run:
        yield run


def _memory_order(x):
    """The elements of ``x`` as a 1-D tensor in the order they lie in memory: a view when
    ``x`` is dense (contiguous, channels-last or any permutation), else a copy."""
    order = sorted(range(x.dim()), key=lambda d: -x.stride(d))
    return x.permute(order).reshape(-1)


def _count_not_finite(f):
    """The inf and NaN elements of ``f``, an int64 scalar: ``f - f`` is 0 exactly for a finite
    ``f`` and NaN for inf and NaN, so the count is its nonzeros."""
    return torch.count_nonzero(f - f)


def _count_not_finite_kernel(k):
    """The kernel of ``count_not_finite`` / ``multi_count_not_finite``: the inf and NaN elements
    of all ``xs``, int64 ``(1,)``, summed over :func:`_chunks`. Each chunk's count is an
    :func:`~graphfront.ops.common.inductor_kernel`: on a GPU one reduction reading the chunk
    once (eager, ``f - f`` is written, then compared with 0, then summed)."""
    counts = []   # one compiled count per chunk (the chunks of a step keep their sizes)

    def run(xs):
        if not xs[0].is_floating_point():
            return torch.zeros(1, dtype=torch.int64, device=xs[0].device)
        parts = []
        for i, f in enumerate(_chunks(xs)):
            if i == len(counts):
                counts.append(common.inductor_kernel(("count_not_finite",), _count_not_finite))
            parts.append(counts[i](f))
        return functools.reduce(torch.add, parts).reshape(1)
    return run


def _multi_square_sum(xs):
    """``sum(x * x)`` over every element of all ``xs``, shape ``(1,)``, their dtype. Where
    :func:`~graphfront.ops.common.multi_tensor_kernels` (a GPU) the tensors' L2 norms come from one multi-tensor kernel
    (``torch._foreach_norm``: each element read once, accumulated in float32 or wider, no
    concatenation), then the sum of their squares; else one reduction per tensor."""
    if common.multi_tensor_kernels(xs[0].device):
        norms = torch.stack(torch._foreach_norm(xs, 2, dtype=torch.promote_types(xs[0].dtype, torch.float32)))
        return (norms * norms).sum().to(xs[0].dtype).reshape(1)
    return functools.reduce(torch.add, [_square_sum(f) for f in _chunks(xs)])


def _square_sum_onnx(c):
    """sum(x * x) over all elements, shape (1,)."""
    x = c.input("x")
    s = c.node("ReduceSum", [c.node("Mul", [x, x])], keepdims=0)
    c.node("Reshape", [s, c.const(int64s([1]))], [c.output("y")])


# square_sum / multi_square_sum: no grad function; count_not_finite*: NoGrad
def _square_sum_xla(x):
    return (x * x).sum().reshape(1)


def _count_not_finite_xla(x):
    return (~xla_rules.jnp().isfinite(x)).sum(dtype="int64").reshape(1)


op("square_sum", inputs=["x"], outputs=["y"], infer=_sum_infer(), kernel=lambda k: _square_sum, onnx=_square_sum_onnx,
   xla=lambda k: _square_sum_xla,
   sbp=_sbp.reduce(split_to_partial=True))


def _sum_to_one_onnx(c, parts, out):
    total = parts[0]
    for p in parts[1:]:
        total = c.node("Add", [total, p])
    c.node("Reshape", [total, c.const(int64s([1]))], [out])


def _multi_square_sum_onnx(c):
    """sum of x * x over every element of every ``x``, shape (1,)."""
    parts = [c.node("ReduceSum", [c.node("Mul", [x, x])], keepdims=0) for x in c.inputs("x")]
    _sum_to_one_onnx(c, parts, c.output("y"))


def _multi_sum_sbp(ctx):
    """multi_square_sum, multi_count_not_finite (OneFlow's): every x split on one axis (one
    each of them has) gives a partial sum."""
    rank = min(len(ctx.shape("x", i)) for i in range(ctx.count("x")))
    return [{"x": _sbp.split(k), "y": _sbp.P} for k in range(rank)]


op("multi_square_sum", inputs=["x*"], outputs=["y"], infer=_sum_infer(repeated=True),
   kernel=lambda k: _multi_square_sum, sbp=_multi_sum_sbp,
   onnx=_multi_square_sum_onnx, xla=lambda k: (lambda xs: functools.reduce(lambda a, b: a + b,
                                                                           [_square_sum_xla(x) for x in xs])))


def _count_not_finite_onnx_node(c, x, desc):
    """int64 scalar: the number of inf and NaN entries (0 for integer dtypes)."""
    if not desc.dtype.is_floating_point:
        return c.const(np.int64(0))
    bad = c.node("Or", [c.node("IsInf", [x]), c.node("IsNaN", [x])])
    return c.node("ReduceSum", [c.node("Cast", [bad], to=onnx_rules.INT64)], keepdims=0)


def _count_not_finite_onnx(c):
    """count_not_finite / multi_count_not_finite: int64 (1,) count of inf and NaN in every ``x``."""
    parts = [_count_not_finite_onnx_node(c, x, c.input_desc("x", i)) for i, x in enumerate(c.inputs("x"))]
    _sum_to_one_onnx(c, parts, c.output("y"))


op("count_not_finite", inputs=["x"], outputs=["y"], infer=_sum_infer(_dt.int64),
   kernel=lambda k: (lambda x, count=_count_not_finite_kernel(k): count([x])), no_grad=True,
   onnx=_count_not_finite_onnx,
   sbp=_sbp.reduce(split_to_partial=True),
   xla=lambda k: _count_not_finite_xla)
op("multi_count_not_finite", inputs=["x*"], outputs=["y"], infer=_sum_infer(_dt.int64, repeated=True),
   kernel=_count_not_finite_kernel, no_grad=True, sbp=_multi_sum_sbp,
   onnx=_count_not_finite_onnx, xla=lambda k: (lambda xs: functools.reduce(lambda a, b: a + b,
                                                                           [_count_not_finite_xla(x) for x in xs])))


# l2_normalize (x -> y, square_x_sum): y = x / sqrt(max(sum(x^2, axis), epsilon)), a division
# by the rounded square root as OneFlow's kernel does (``x * rsqrt`` rounds twice: a lone
# element along ``axis`` would not normalize to exactly +-1, nor its gradient cancel to 0)

def _l2_normalize_infer(ctx):
    x = float_input(ctx, "x")
    axis = norm_axis(ctx.attr("axis"), len(x.shape), "attr 'axis'")
    ctx.check(ctx.attr("epsilon") > 0, f"attr 'epsilon' must be > 0, received {ctx.attr('epsilon')}")
    ctx.set_output("y", x.shape, x.dtype)
    ctx.set_output("square_x_sum", tuple(1 if i == axis else s for i, s in enumerate(x.shape)), x.dtype)


def _l2_normalize_kernel(k):
    axis, eps = k.attr("axis") % len(k.input("x").shape), k.attr("epsilon")

    def l2_normalize(x):
        ss = torch.sum(x * x, dim=axis, keepdim=True)
        return x / torch.sqrt(torch.clamp(ss, min=eps)), ss
    return l2_normalize


def _l2_normalize_xla(k):
    axis, eps = k.attr("axis") % len(k.input("x").shape), k.attr("epsilon")

    def l2_normalize(x):
        ss = (x * x).sum(axis=axis, keepdims=True)
        return x / xla_rules.jnp().sqrt(xla_rules.jnp().maximum(ss, eps)), ss
    return l2_normalize


def _l2_normalize_grad_xla(k):
    axis, eps = k.attr("axis") % len(k.input("y").shape), k.attr("epsilon")

    def l2_normalize_grad(dy, y, ss):
        inv = xla_rules.lax().rsqrt(xla_rules.jnp().maximum(ss, eps))
        inner = dy - y * (dy * y).sum(axis=axis, keepdims=True)
        return xla_rules.jnp().where(ss >= eps, inner * inv, dy * inv)
    return l2_normalize_grad


def _l2_normalize_grad_kernel(k):
    axis, eps = k.attr("axis") % len(k.input("y").shape), k.attr("epsilon")

    def l2_normalize_grad(dy, y, ss):
        inv = torch.rsqrt(torch.clamp(ss, min=eps))
        inner = dy - y * torch.sum(dy * y, dim=axis, keepdim=True)
        # below epsilon the normalizer is the constant sqrt(epsilon): the map is linear
        return torch.where(ss >= eps, inner * inv, dy * inv)
    return l2_normalize_grad


L2_ATTRS = {"axis": ("int32", 0), "epsilon": ("float", 0.0)}


def _l2_normalize_onnx(c):
    """y = x / sqrt(max(sum(x^2, axis), epsilon)); square_x_sum = sum(x^2, axis) (kept dims)."""
    x, d = c.input("x"), c.input_desc("x")
    axis = c.attr("axis") % len(d.shape)
    ss = reduce_node(c, "ReduceSum", c.node("Mul", [x, x]), [axis], 1, c.output("square_x_sum"))
    norm = c.node("Sqrt", [c.node("Max", [ss, const_as(c, c.attr("epsilon"), d)])])
    c.node("Div", [x, norm], [c.output("y")])


def _l2_normalize_grad_onnx(c):
    """inv = 1 / sqrt(max(ss, epsilon)); dx = (dy - y * sum(dy * y, axis)) * inv where ss >= epsilon, else dy * inv."""
    dy, y, ss, d = c.input("dy"), c.input("y"), c.input("square_x_sum"), c.input_desc("y")
    eps = const_as(c, c.attr("epsilon"), d)
    inv = c.node("Reciprocal", [c.node("Sqrt", [c.node("Max", [ss, eps])])])
    dot = reduce_node(c, "ReduceSum", c.node("Mul", [dy, y]), [c.attr("axis") % len(d.shape)], 1)
    inner = c.node("Sub", [dy, c.node("Mul", [y, dot])])
    c.node("Where", [c.node("GreaterOrEqual", [ss, eps]), c.node("Mul", [inner, inv]), c.node("Mul", [dy, inv])],
           [c.output("dx")])


def _l2_normalize_sbp(ctx):
    """Every arg split along one axis other than the normalized ``axis``."""
    rank = ctx.ndim(ctx.input_args[0])
    axis = ctx.attr("axis") % rank
    return [{a: _sbp.split(k) for a in ctx.args} for k in range(rank) if k != axis]


op("l2_normalize", inputs=["x"], outputs=["y", "square_x_sum"], attrs=L2_ATTRS, infer=_l2_normalize_infer,
   kernel=_l2_normalize_kernel, onnx=_l2_normalize_onnx, xla=_l2_normalize_xla, sbp=_l2_normalize_sbp,
   grad=lambda g: g.needs("x") and g.set_grad("x", g.emit(
       "l2_normalize_grad", {"dy": g.dout("y"), "y": g.output("y"), "square_x_sum": g.output("square_x_sum")},
       g.attrs)))
op("l2_normalize_grad", inputs=["dy", "y", "square_x_sum"], outputs=["dx"], attrs=L2_ATTRS, infer=like("y"),
   kernel=_l2_normalize_grad_kernel, xla=_l2_normalize_grad_xla, onnx=_l2_normalize_grad_onnx, sbp=_l2_normalize_sbp)


# ----------------------------------------------------------------- two-stage reduce_max / reduce_min
# OneFlow v0.6.0 ``oneflow/user/ops/two_stage_reduce_ops.cpp`` and
# ``oneflow/user/kernels/two_stage_reduce_kernel.cpp``: ``flow.math.two_stage_reduce_max/min``
# reduces each device's part of a split blob (device stage: the part's extremum, ``mask``
# int8 = the part's elements equal to it, ``count`` int32 = how many), concatenates the
# parts' results and reduces them again (global stage, weighting each part's extremum by its
# count). The gradient is shared equally by every input element equal to the final extremum:
# the global stage gives part ``p`` ``dy * count_p / sum(count over the parts holding the
# extremum)``, the device stage splits that equally among its ``count_p`` elements.
# graphfront's ops are logical: the device stage sees one part (a slice) as a whole blob,
# so its ``out`` keeps the reduced axes with size 1.

def _two_stage_axes(rank, axis):
    """The reduced axes (sorted, non-negative); an empty ``axis`` reduces every axis."""
    return tuple(range(rank)) if not axis else tuple(sorted({a % rank for a in axis}))


def _kept_shape(shape, axes):
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def _check_dtype(ctx, arg, dtype):
    d = ctx.input(arg)
    ctx.check(d.dtype is dtype, f"input '{arg}' expected {dtype.name}, received {d.dtype.name}")
    return d


def _device_stage_infer(ctx):
    d = ctx.input("in")
    axes = _two_stage_axes(len(d.shape), ctx.attr("axis"))
    ctx.set_output("out", _kept_shape(d.shape, axes), d.dtype)
    ctx.set_output("mask", d.shape, _dt.int8)
    ctx.set_output("count", _kept_shape(d.shape, axes), _dt.int32)


def _device_stage_grad_infer(ctx):
    dy, mask = ctx.input("out_diff"), _check_dtype(ctx, "mask", _dt.int8)
    count = _check_dtype(ctx, "count", _dt.int32)
    ctx.check(dy.shape == count.shape, f"input 'out_diff' expected the shape of 'count' {count.shape}, "
                                       f"received {dy.shape}")
    ctx.set_output("in_diff", mask.shape, dy.dtype)


def _global_stage_infer(ctx):
    d, count = ctx.input("in"), _check_dtype(ctx, "device_count", _dt.int32)
    ctx.check(count.shape == d.shape, f"input 'device_count' expected the shape of 'in' {d.shape}, "
                                      f"received {count.shape}")
    axes = _two_stage_axes(len(d.shape), ctx.attr("axis"))
    kept = _kept_shape(d.shape, axes)
    ctx.set_output("out", kept if ctx.attr("keepdims") else at_least_1d(s for i, s in enumerate(d.shape)
                                                                        if i not in axes), d.dtype)
    ctx.set_output("mask", d.shape, _dt.int8)


def _global_stage_grad_infer(ctx):
    dy, mask = ctx.input("out_diff"), _check_dtype(ctx, "mask", _dt.int8)
    count = _check_dtype(ctx, "device_count", _dt.int32)
    ctx.check(count.shape == mask.shape, f"input 'device_count' expected the shape of 'mask' {mask.shape}, "
                                         f"received {count.shape}")
    ctx.set_output("in_diff", mask.shape, dy.dtype)


def _stage_axes(k, arg):
    return _two_stage_axes(len(k.input(arg).shape), k.attr("axis"))


def _device_stage_kernel(extremum):
    def make(k):
        axes = _stage_axes(k, "in")

        def run(x):
            out = extremum(x, dim=axes, keepdim=True)
            hit = x == out
            return out, hit.to(torch.int8), torch.sum(hit, dim=axes, keepdim=True, dtype=torch.int32)
        return run
    return make


def _device_stage_grad_kernel(k):
    return lambda dy, mask, count: (dy / count.to(dy.dtype)) * mask.to(dy.dtype)


def _global_stage_kernel(extremum):
    def make(k):
        axes = _stage_axes(k, "in")
        shape = k.output("out").shape

        def run(x, device_count):
            out = extremum(x, dim=axes, keepdim=True)
            return out.reshape(shape), (x == out).to(torch.int8)
        return run
    return make


def _global_stage_grad_kernel(k):
    axes = _stage_axes(k, "mask")

    def run(dy, mask, device_count):
        weight = device_count * mask.to(torch.int32)  # each part's count where it holds the extremum
        total = torch.sum(weight, dim=axes, keepdim=True, dtype=torch.int32)
        return (dy.reshape(total.shape) / total.to(dy.dtype)) * weight.to(dy.dtype)
    return run


def _device_stage_xla(name):
    def make(k):
        axes, np_ = _stage_axes(k, "in"), xla_rules.jnp()
        fn = xla_rules.jnp_fn(name)

        def run(x):
            out = fn(x, axis=axes, keepdims=True)
            hit = x == out
            return out, hit.astype(np_.int8), np_.sum(hit, axis=axes, keepdims=True, dtype=np_.int32)
        return run
    return make


def _global_stage_xla(name):
    def make(k):
        axes, np_ = _stage_axes(k, "in"), xla_rules.jnp()
        fn, shape = xla_rules.jnp_fn(name), k.output("out").shape

        def run(x, device_count):
            out = fn(x, axis=axes, keepdims=True)
            return out.reshape(shape), (x == out).astype(np_.int8)
        return run
    return make


def _device_stage_grad_xla(k):
    return lambda dy, mask, count: (dy / count.astype(dy.dtype)) * mask.astype(dy.dtype)


def _global_stage_grad_xla(k):
    axes, np_ = _stage_axes(k, "mask"), xla_rules.jnp()

    def run(dy, mask, device_count):
        weight = device_count * mask.astype(np_.int32)
        total = np_.sum(weight, axis=axes, keepdims=True, dtype=np_.int32)
        return (dy.reshape(total.shape) / total.astype(dy.dtype)) * weight.astype(dy.dtype)
    return run


def _stage_onnx_hits(c, onnx_type, x, axes, out=None):
    """``(extremum with kept axes, bool x == extremum)`` as ONNX nodes."""
    out = reduce_node(c, onnx_type, x, axes, 1, out)
    return out, c.node("Equal", [x, out])


def _device_stage_onnx(onnx_type):
    def convert(c):
        axes = list(_two_stage_axes(len(c.input_desc("in").shape), c.attr("axis")))
        _, hit = _stage_onnx_hits(c, onnx_type, c.input("in"), axes, c.output("out"))
        c.node("Cast", [hit], [c.output("mask")], to=onnx_rules.INT8)
        reduce_node(c, "ReduceSum", c.node("Cast", [hit], to=onnx_rules.INT32), axes, 1, c.output("count"))
    return convert


def _global_stage_onnx(onnx_type):
    def convert(c):
        axes = list(_two_stage_axes(len(c.input_desc("in").shape), c.attr("axis")))
        out, hit = _stage_onnx_hits(c, onnx_type, c.input("in"), axes)
        c.node("Reshape", [out, c.const(int64s(c.output_desc("out").shape))], [c.output("out")])
        c.node("Cast", [hit], [c.output("mask")], to=onnx_rules.INT8)
    return convert


def _device_stage_grad_onnx(c):
    to = c.dtype_code(c.input_desc("out_diff").dtype)
    divided = c.node("Div", [c.input("out_diff"), c.node("Cast", [c.input("count")], to=to)])
    c.node("Mul", [divided, c.node("Cast", [c.input("mask")], to=to)], [c.output("in_diff")])


def _global_stage_grad_onnx(c):
    to = c.dtype_code(c.input_desc("out_diff").dtype)
    axes = list(_two_stage_axes(len(c.input_desc("mask").shape), c.attr("axis")))
    kept = _kept_shape(c.input_desc("mask").shape, axes)
    weight = c.node("Mul", [c.input("device_count"), c.node("Cast", [c.input("mask")], to=onnx_rules.INT32)])
    total = c.node("Cast", [reduce_node(c, "ReduceSum", weight, axes, 1)], to=to)
    dy = c.node("Reshape", [c.input("out_diff"), c.const(int64s(kept))])
    c.node("Mul", [c.node("Div", [dy, total]), c.node("Cast", [weight], to=to)], [c.output("in_diff")])


def _two_stage_sbp(ctx):
    """Every arg split on one axis that is not reduced (``out`` / ``out_diff`` of a global stage
    without keepdims on that axis's place among the kept axes)."""
    rank = ctx.ndim("mask")
    axes = _two_stage_axes(rank, ctx.attrs.get("axis"))
    dropped = not ctx.attrs.get("keepdims", True)
    cands = []
    for k in (k for k in range(rank) if k not in axes):
        sig = {a: _sbp.split(k) for a in ctx.args}
        if dropped:
            for a in ("out", "out_diff"):
                if ctx.has(a):
                    sig[a] = _sbp.split(k - sum(1 for a_ in axes if a_ < k))
        cands.append(sig)
    return cands


def _device_stage_grad(grad_type):
    def grad(g):
        if g.needs("in"):
            g.set_grad("in", g.emit(grad_type, {"out_diff": g.dout("out"), "mask": g.output("mask"),
                                                "count": g.output("count")},
                                    {"axis": g.attr("axis")}, name=f"{g.op_name}_grad"))
    return grad


def _global_stage_grad(grad_type):
    def grad(g):
        if g.needs("in"):
            g.set_grad("in", g.emit(grad_type, {"out_diff": g.dout("out"), "mask": g.output("mask"),
                                                "device_count": g.input("device_count")},
                                    {"axis": g.attr("axis"), "keepdims": g.attr("keepdims")},
                                    name=f"{g.op_name}_grad"))
    return grad


_STAGE_AXIS = {"axis": "list_int32"}
_GLOBAL_ATTRS = {"axis": "list_int32", "keepdims": ("bool", False)}

for _kind, _torch_fn, _onnx_type in (("max", torch.amax, "ReduceMax"), ("min", torch.amin, "ReduceMin")):
    op(f"reduce_{_kind}_device_stage", inputs=["in"], outputs=["out", "mask", "count"], attrs=_STAGE_AXIS,
       infer=_device_stage_infer, kernel=_device_stage_kernel(_torch_fn), sbp=_two_stage_sbp,
       xla=_device_stage_xla(_kind), onnx=_device_stage_onnx(_onnx_type),
       grad=_device_stage_grad(f"reduce_{_kind}_device_stage_grad"))
    op(f"reduce_{_kind}_device_stage_grad", inputs=["out_diff", "mask", "count"], outputs=["in_diff"],
       attrs=_STAGE_AXIS, infer=_device_stage_grad_infer, kernel=_device_stage_grad_kernel, sbp=_two_stage_sbp,
       xla=_device_stage_grad_xla, onnx=_device_stage_grad_onnx)
    op(f"reduce_{_kind}_global_stage", inputs=["in", "device_count"], outputs=["out", "mask"], attrs=_GLOBAL_ATTRS,
       infer=_global_stage_infer, kernel=_global_stage_kernel(_torch_fn), sbp=_two_stage_sbp,
       xla=_global_stage_xla(_kind), onnx=_global_stage_onnx(_onnx_type),
       grad=_global_stage_grad(f"reduce_{_kind}_global_stage_grad"))
    op(f"reduce_{_kind}_global_stage_grad", inputs=["out_diff", "mask", "device_count"], outputs=["in_diff"],
       attrs=_GLOBAL_ATTRS, infer=_global_stage_grad_infer, kernel=_global_stage_grad_kernel, sbp=_two_stage_sbp,
       xla=_global_stage_grad_xla, onnx=_global_stage_grad_onnx)
