"""Gather and scatter ops: ``gather``, ``batch_gather``, ``gather_nd``, ``dim_gather``, the
segment sums and the ``scatter_nd`` family.

Op type, argument and attr names, attr types and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/``: ``gather_op.cpp``, ``batch_gather_op.cpp``, ``gather_nd``/``scatter_nd``
in ``nd_index_slice_ops.cpp``, ``dim_gather_op.cpp``, ``dim_scatter_ops.cpp``,
``unsorted_segment_sum_op.cpp``, ``unsorted_batch_segment_sum_op.cpp``).
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework.errors import OpRunError
from graphfront.ops.common import balanced_range, index_checks, integer_input, norm_axis, numel, raising_bad_ids, same_dtype
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import int64s, np_dtype, reduce_node
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


# ============================================================== gather family
#
# Index inputs take any integer dtype. Out-of-range indices are not errors: gather,
# batch_gather and gather_nd produce zeros for them and the segment-sum / scatter ops
# drop their contributions, so each op and its gradient agree (the gradient of a
# dropped contribution is zero). dim_gather / dim_scatter_add_like keep torch.gather's
# run-time bounds check.


def _valid_ids(ids, size):
    """``(clamped ids, mask of in-range ids)`` without a host sync."""
    valid = (ids >= 0) & (ids < size)
    return ids * valid, valid


def _zero_invalid(out, valid, dim):
    """Zero the slices of ``out`` along ``dim`` (indexed like the flat ``valid``) that were out of range."""
    shape = [1] * out.dim()
    shape[dim] = -1
    return torch.where(valid.reshape(shape), out, False if out.dtype == torch.bool else 0)


def _valid_ids_xla(ids, size):
    """``(ids with out-of-range entries set to 0, in-range mask)`` of a flat jax index array."""
    jnp = xla_rules.jnp()
    ids = ids.astype("int64")
    valid = (ids >= 0) & (ids < size)
    return jnp.where(valid, ids, 0), valid


def _gather_xla(k):
    axis = norm_axis(k.attr("axis"), len(k.input("in").shape))
    shape = tuple(k.output("out").shape)
    size = k.input("in").shape[axis]

    def gather(x, idx):
        jnp = xla_rules.jnp()
        ids, valid = _valid_ids_xla(idx.reshape(-1), size)
        mask = valid.reshape((1,) * axis + (-1,) + (1,) * (x.ndim - axis - 1))
        return jnp.where(mask, jnp.take(x, ids, axis=axis), jnp.zeros((), x.dtype)).reshape(shape)
    return gather


def _gather_infer(ctx):
    x = ctx.input("in")
    idx = integer_input(ctx, "indices")
    ctx.check(len(x.shape) > 0, "input 'in' is rank 0; gather needs rank >= 1")
    axis = norm_axis(ctx.attr("axis"), len(x.shape), "attr 'axis'")
    ctx.set_output("out", x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def _gather_kernel(k):
    axis = norm_axis(k.attr("axis"), len(k.input("in").shape))

    def gather(x, idx):
        # (shapes of the run-time tensors: a dynamic input is smaller than its BlobDesc)
        ids, valid = _valid_ids(idx.reshape(-1).long(), x.shape[axis])
        out = _zero_invalid(torch.index_select(x, axis, ids), valid, axis)
        return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])
    return gather


def _gather_grad(g):
    if g.needs("in"):
        g.set_grad("in", g.emit("unsorted_segment_sum_like",
                                {"data": g.dout("out"), "segment_ids": g.input("indices"), "like": g.input("in")},
                                {"axis": g.attr("axis")}))


def _valid_ids_onnx(c, idx, size):
    """``(in-range mask, ids with out-of-range entries set to 0)`` of an index tensor, as int64."""
    ids = c.node("Cast", [idx], to=onnx_rules.INT64)
    valid = c.node("And", [c.node("GreaterOrEqual", [ids, c.const(np.int64(0))]),
                           c.node("Less", [ids, c.const(np.asarray(size, dtype=np.int64))])])
    return valid, c.node("Where", [valid, ids, c.const(np.int64(0))])


def _zero_invalid_onnx(c, out_value, valid, valid_shape, out_desc, out):
    """``Where(valid reshaped to valid_shape, value, 0)``: zeros where an index was out of range."""
    mask = c.node("Reshape", [valid, c.const(int64s(valid_shape))])
    c.node("Where", [mask, out_value, c.const(np.zeros((), dtype=np_dtype(out_desc)))], [out])


def _gather_onnx(c):
    """gather: out-of-range indices give zero slices (as the kernel), not an error."""
    shape = c.input_desc("in").shape
    axis = c.attr("axis") % len(shape)
    idx_shape = c.input_desc("indices").shape
    valid, ids = _valid_ids_onnx(c, c.input("indices"), shape[axis])
    g = c.node("Gather", [c.input("in"), ids], axis=axis)
    _zero_invalid_onnx(c, g, valid, [1] * axis + list(idx_shape) + [1] * (len(shape) - axis - 1),
                  c.output_desc("out"), c.output("out"))


def _gather_sbp(ctx):
    """OneFlow's gather layouts (``oneflow/user/ops/gather_op.cpp``): the indices split along
    their axis ``k`` with ``in`` broadcast give ``out`` split along ``axis + k`` (a data
    parallel lookup); ``in`` split along an axis other than ``axis`` with the indices
    broadcast gives ``out`` split along that axis's place in ``out``."""
    rank_in, rank_idx = ctx.ndim("in"), ctx.ndim("indices")
    axis = ctx.attr("axis") % rank_in
    cands = [{"in": _sbp.B, "indices": _sbp.split(k), "out": _sbp.split(axis + k)} for k in range(rank_idx)]
    cands += [{"in": _sbp.split(j), "indices": _sbp.B, "out": _sbp.split(j if j < axis else j + rank_idx - 1)}
              for j in range(rank_in) if j != axis]
    return cands


op("gather", inputs=["in", "indices"], outputs=["out"], attrs={"axis": ("int64", 0)}, infer=_gather_infer,
   kernel=_gather_kernel, grad=_gather_grad, onnx=_gather_onnx, xla=_gather_xla, amp="clear", sbp=_gather_sbp)


def _segment_geometry(ctx, data, ids, axis):
    n = len(data.shape)
    axis = norm_axis(axis, n, "attr 'axis'")
    k = len(ids.shape)
    ctx.check(data.shape[axis:axis + k] == ids.shape,
              f"input 'segment_ids' of shape {ids.shape} must equal dims {axis}..{axis + k - 1} of input "
              f"'data' {data.shape}")
    return axis, k


def _segment_sum_fn(axis, segments):
    """``(data, ids) -> out``: sum ``data`` slices into ``segments`` rows ``ids`` along ``axis``.

    Run-time shapes (dynamic blobs sum what they hold). float16/bfloat16 data accumulate
    in float32 and round once at the end, as OneFlow's UnsortedSegmentSumKernel
    (``oneflow/user/kernels/unsorted_segment_sum_kernel.cpp``, float16 via float buffer)."""
    def segment_sum(data, ids):
        rest = tuple(data.shape[axis + ids.dim():])
        outer, inner = numel(data.shape[:axis]), numel(rest)
        acc = torch.float32 if data.dtype in (torch.float16, torch.bfloat16) else data.dtype
        out = torch.zeros((outer, segments, inner), dtype=acc, device=data.device)
        ids, valid = _valid_ids(ids.reshape(-1).long(), segments)
        out.index_add_(1, ids, _zero_invalid(data.reshape(outer, ids.numel(), inner).to(acc), valid, 1))
        return out.reshape(tuple(data.shape[:axis]) + (segments,) + rest).to(data.dtype)
    return segment_sum


def _segment_sum_xla_fn(axis, segments):
    """The jax form of :func:`_segment_sum_fn` (static shapes)."""
    def segment_sum(data, ids):
        jnp = xla_rules.jnp()
        rest = tuple(data.shape[axis + ids.ndim:])
        outer, inner = numel(data.shape[:axis]), numel(rest)
        acc = "float32" if data.dtype in (jnp.float16, jnp.bfloat16) else data.dtype
        ids, valid = _valid_ids_xla(ids.reshape(-1), segments)
        src = jnp.where(valid[None, :, None], data.reshape(outer, ids.size, inner).astype(acc), 0)
        out = jnp.zeros((outer, segments, inner), acc).at[:, ids, :].add(src)
        return out.reshape(tuple(data.shape[:axis]) + (segments,) + rest).astype(data.dtype)
    return segment_sum


def _unsorted_segment_sum_infer(ctx):
    data, ids = ctx.input("data"), integer_input(ctx, "segment_ids")
    axis, k = _segment_geometry(ctx, data, ids, ctx.attr("axis"))
    segments = ctx.attr("num_segments")
    ctx.check(segments >= 1, f"attr 'num_segments' must be >= 1, received {segments}")
    ctx.set_output("out", data.shape[:axis] + (segments,) + data.shape[axis + k:], data.dtype)


def _unsorted_segment_sum_kernel(k):
    return _segment_sum_fn(norm_axis(k.attr("axis"), len(k.input("data").shape)), k.attr("num_segments"))


# Every scatter-add op converts to ONNX as one shape: ``out[b, ids[b, n, i], i] += src[b, n, i]``
# over a (B, S, inner) output, ids shaped (B, N, inner) or (B, N, 1). Ids outside [0, S)
# add nothing (as the kernels of scatter_nd, the segment sums and tensor_scatter_nd_add;
# dim_scatter_add_like's kernel raises on them instead).
def _scatter_add_onnx(c, base, ids3, src3, src_shape, segments, dtype, out):
    """``out`` (B, S, inner) = ``base`` (or zeros) plus ``src3`` (shaped ``src_shape`` = (B, N, inner))
    added at ``ids3`` (B, N, inner or 1) along axis 1; ids outside [0, segments) add nothing.

    ScatterElements with ``reduction="add"`` from opset 16; before it, the sum over N of a
    one-hot ``Where`` (B, N, S, inner): the same sums, inf and NaN entries included."""
    b, _, inner = src_shape
    zero = c.const(np.zeros((), dtype=dtype))
    valid, ids = _valid_ids_onnx(c, ids3, segments)
    if c.opset >= 16:
        src = c.node("Where", [valid, src3, zero])
        ids = c.node("Expand", [ids, c.const(int64s(src_shape))])
        if base is None:
            base = c.node("Expand", [zero, c.const(int64s([b, segments, inner]))])
        c.node("ScatterElements", [base, ids, src], [out], axis=1, reduction="add")
        return
    two = c.const(int64s([2]))
    hot = c.node("Equal", [c.node("Unsqueeze", [ids, two]),
                           c.const(np.arange(segments, dtype=np.int64).reshape(1, 1, segments, 1))])
    hot = c.node("And", [hot, c.node("Unsqueeze", [valid, two])])
    spread = c.node("Where", [hot, c.node("Unsqueeze", [src3, two]), zero])
    if base is None:
        reduce_node(c, "ReduceSum", spread, [1], 0, out)
    else:
        c.node("Add", [base, reduce_node(c, "ReduceSum", spread, [1], 0)], [out])


def _prod_onnx(dims):
    return int(np.prod(dims, dtype=np.int64))


def _segment_sum_onnx(segments_of):
    """unsorted_segment_sum(_like): ``data`` slices summed into rows ``segment_ids`` of axis ``axis``."""
    def convert(c):
        shape, ids_shape = c.input_desc("data").shape, c.input_desc("segment_ids").shape
        axis = c.attr("axis") % len(shape)
        segments = segments_of(c, axis)
        outer, n, inner = _prod_onnx(shape[:axis]), _prod_onnx(ids_shape), _prod_onnx(shape[axis + len(ids_shape):])
        ids = c.node("Reshape", [c.input("segment_ids"), c.const(int64s([1, n, 1]))])
        ids = c.node("Expand", [ids, c.const(int64s([outer, n, 1]))])
        src = c.node("Reshape", [c.input("data"), c.const(int64s([outer, n, inner]))])
        res = c.tmp("summed")
        _scatter_add_onnx(c, None, ids, src, [outer, n, inner], segments, np_dtype(c.output_desc("out")), res)
        c.node("Reshape", [res, c.const(int64s(c.output_desc("out").shape))], [c.output("out")])
    return convert


_unsorted_segment_sum_onnx = _segment_sum_onnx(lambda c, axis: c.attr("num_segments"))


def _unsorted_segment_sum_sbp(ctx):
    """OneFlow's (``unsorted_segment_sum_op.cpp``): ``data`` and ``segment_ids`` split along one
    of the ids' axes give partial sums; ``data`` split off the ids' axes (ids broadcast) gives
    ``out`` split at that axis's place; a partial ``data`` gives a partial ``out``."""
    S, B = _sbp.split, _sbp.B
    axis, k = ctx.attr("axis") % ctx.ndim("data"), ctx.ndim("segment_ids")
    return [{"data": S(axis + i), "segment_ids": S(i), "out": _sbp.P} for i in range(k)] + \
        [{"data": S(j), "segment_ids": B, "out": S(j if j < axis else j - k + 1)}
         for j in range(ctx.ndim("data")) if not axis <= j < axis + k] + \
        [{"data": _sbp.P, "segment_ids": B, "out": _sbp.P}]


op("unsorted_segment_sum", inputs=["data", "segment_ids"], outputs=["out"],
   attrs={"axis": ("int64", 0), "num_segments": ("int64", 0)}, sbp=_unsorted_segment_sum_sbp,
   infer=_unsorted_segment_sum_infer, kernel=_unsorted_segment_sum_kernel, onnx=_unsorted_segment_sum_onnx,
   xla=lambda k: _segment_sum_xla_fn(norm_axis(k.attr("axis"), len(k.input("data").shape)), k.attr("num_segments")),
   grad=lambda g: g.needs("data") and g.set_grad("data", g.emit(
       "gather", {"in": g.dout("out"), "indices": g.input("segment_ids")}, {"axis": g.attr("axis")})))


def _unsorted_segment_sum_like_infer(ctx):
    data, ids, like_ = ctx.input("data"), integer_input(ctx, "segment_ids"), ctx.input("like")
    axis, k = _segment_geometry(ctx, data, ids, ctx.attr("axis"))
    ctx.check(len(like_.shape) == len(data.shape) - k + 1 and like_.shape[:axis] == data.shape[:axis]
              and like_.shape[axis + 1:] == data.shape[axis + k:],
              f"input 'like' of shape {like_.shape} does not fit input 'data' {data.shape} with 'segment_ids' "
              f"{ids.shape} at axis {axis}")
    ctx.set_output("out", like_.shape, data.dtype)


def _unsorted_segment_sum_like_kernel(k):
    axis = norm_axis(k.attr("axis"), len(k.input("data").shape))
    fn = _segment_sum_fn(axis, k.input("like").shape[axis])
    return lambda data_, ids_, like_: fn(data_, ids_)


def _unsorted_segment_sum_like_xla(k):
    axis = norm_axis(k.attr("axis"), len(k.input("data").shape))
    fn = _segment_sum_xla_fn(axis, k.input("like").shape[axis])
    return lambda data_, ids_, like_: fn(data_, ids_)


_unsorted_segment_sum_like_onnx = _segment_sum_onnx(lambda c, axis: c.input_desc("like").shape[axis])


def _segment_sum_sbp(ctx):
    """OneFlow's unsorted segment sum layouts (``unsorted_segment_sum_op.cpp``): ``data`` and
    ``segment_ids`` split along one of the ids' axes give partial sums (each device sums its
    rows into every segment; a gathered table's gradient)."""
    axis = ctx.attr("axis") % ctx.ndim("data")
    return [{"data": _sbp.split(axis + k), "segment_ids": _sbp.split(k), "like": _sbp.B, "out": _sbp.P}
            for k in range(ctx.ndim("segment_ids"))]


op("unsorted_segment_sum_like", inputs=["data", "segment_ids", "like"], outputs=["out"],
   attrs={"axis": ("int64", 0)}, infer=_unsorted_segment_sum_like_infer, sbp=_segment_sum_sbp,
   kernel=_unsorted_segment_sum_like_kernel, onnx=_unsorted_segment_sum_like_onnx, xla=_unsorted_segment_sum_like_xla)


def _batch_dims(ctx, x, idx, x_arg):
    b = len(idx.shape) - 1
    ctx.check(len(idx.shape) >= 1 and len(x.shape) >= len(idx.shape) and x.shape[:b] == idx.shape[:b],
              f"input '{x_arg}' of shape {x.shape} and indices of shape {idx.shape} must share the leading "
              f"(batch) dims {idx.shape[:b]}")
    return b


def _batch_gather_infer(ctx):
    x, idx = ctx.input("in"), integer_input(ctx, "indices")
    b = _batch_dims(ctx, x, idx, "in")
    ctx.set_output("out", idx.shape + x.shape[b + 1:], x.dtype)


def _batch_gather_kernel(k):
    x_shape, i_shape = k.input("in").shape, k.input("indices").shape
    b = len(i_shape) - 1
    batch, inner = numel(x_shape[:b]), numel(x_shape[b + 1:])
    count = i_shape[-1]
    out_shape = tuple(k.output("out").shape)

    def batch_gather(x, idx):
        ids, valid = _valid_ids(idx.reshape(batch * count).long(), x_shape[b])
        index = ids.reshape(batch, count, 1).expand(batch, count, inner)
        out = torch.gather(x.reshape(batch, x_shape[b], inner), 1, index)
        return _zero_invalid(out.reshape(batch * count, inner), valid, 0).reshape(out_shape)
    return batch_gather


def _batch_geometry(k, data_arg, ids_arg):
    """``(batch, count, inner, b)`` of a batch gather/segment-sum: ``ids`` (batch..., count)."""
    d_shape, i_shape = k.input(data_arg).shape, k.input(ids_arg).shape
    b = len(i_shape) - 1
    return numel(d_shape[:b]), i_shape[-1], numel(d_shape[b + 1:]), b


def _batch_gather_xla(k):
    batch, count, inner, b = _batch_geometry(k, "in", "indices")
    size = k.input("in").shape[b]
    out_shape = tuple(k.output("out").shape)

    def batch_gather(x, idx):
        jnp = xla_rules.jnp()
        ids, valid = _valid_ids_xla(idx.reshape(-1), size)
        out = jnp.take_along_axis(x.reshape(batch, size, inner), ids.reshape(batch, count, 1), axis=1)
        return jnp.where(valid.reshape(batch, count, 1), out, jnp.zeros((), x.dtype)).reshape(out_shape)
    return batch_gather


def _unsorted_batch_segment_sum_xla(k):
    batch, count, inner, _ = _batch_geometry(k, "data", "segment_ids")
    segments = k.attr("num_segments")
    out_shape = tuple(k.output("out").shape)

    def batch_segment_sum(data, ids):
        jnp = xla_rules.jnp()
        ids, valid = _valid_ids_xla(ids.reshape(-1), segments)
        src = jnp.where(valid[:, None], data.reshape(batch * count, inner), 0).reshape(batch, count, inner)
        rows = np.arange(batch)[:, None]
        out = jnp.zeros((batch, segments, inner), data.dtype).at[rows, ids.reshape(batch, count)].add(src)
        return out.reshape(out_shape)
    return batch_segment_sum


def _batch_gather_onnx(c):
    """batch_gather: ``GatherND`` with the leading dims of ``indices`` as batch dims."""
    shape, idx_shape = c.input_desc("in").shape, c.input_desc("indices").shape
    b = len(idx_shape) - 1
    valid, ids = _valid_ids_onnx(c, c.input("indices"), shape[b])
    ids = c.node("Unsqueeze", [ids, c.const(int64s([-1]))])
    g = c.node("GatherND", [c.input("in"), ids], batch_dims=b)
    _zero_invalid_onnx(c, g, valid, list(idx_shape) + [1] * (len(shape) - b - 1), c.output_desc("out"), c.output("out"))


def _batch_sbp(x, ids, sums):
    """batch_gather (``x`` = in, ``ids`` = indices, ``sums`` False) and
    unsorted_batch_segment_sum (data, segment_ids, True), ``ids`` of shape (batch..., n): every
    blob split along a batch axis (OneFlow's); ``x`` split along an axis after the gathered
    one with ``ids`` broadcast gives ``out`` split there; a partial ``x`` with ``ids``
    broadcast gives a partial ``out``; the segment sum of ``x`` and ``ids`` split along the
    summed axis is a partial sum."""
    def rule(ctx):
        S, B, P = _sbp.split, _sbp.B, _sbp.P
        b = ctx.ndim(ids) - 1
        return [_sbp.signature(ctx, S(i)) for i in range(b)] + \
            [_sbp.signature(ctx, S(j), **{ids: B}) for j in range(b + 1, ctx.ndim(x))] + \
            [_sbp.signature(ctx, P, **{ids: B})] + ([_sbp.signature(ctx, S(b), out=P)] if sums else [])
    return rule


op("batch_gather", inputs=["in", "indices"], outputs=["out"], infer=_batch_gather_infer,
   kernel=_batch_gather_kernel, onnx=_batch_gather_onnx, xla=_batch_gather_xla,
   sbp=_batch_sbp("in", "indices", False),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit(
       "unsorted_batch_segment_sum", {"data": g.dout("out"), "segment_ids": g.input("indices")},
       {"num_segments": g.desc(g.input("in")).shape[len(g.desc(g.input("indices")).shape) - 1]})))


def _unsorted_batch_segment_sum_infer(ctx):
    data, ids = ctx.input("data"), integer_input(ctx, "segment_ids")
    b = _batch_dims(ctx, data, ids, "data")
    ctx.check(data.shape[b] == ids.shape[-1], f"input 'data' of shape {data.shape} expected dim {b} = "
                                              f"{ids.shape[-1]} (last dim of 'segment_ids' {ids.shape})")
    segments = ctx.attr("num_segments")
    ctx.check(segments >= 1, f"attr 'num_segments' must be >= 1, received {segments}")
    ctx.set_output("out", ids.shape[:-1] + (segments,) + data.shape[b + 1:], data.dtype)


def _unsorted_batch_segment_sum_kernel(k):
    d_shape, i_shape = k.input("data").shape, k.input("segment_ids").shape
    b = len(i_shape) - 1
    batch, inner, count = numel(d_shape[:b]), numel(d_shape[b + 1:]), i_shape[-1]
    segments = k.attr("num_segments")
    out_shape = tuple(k.output("out").shape)

    def batch_segment_sum(data, ids):
        ids, valid = _valid_ids(ids.reshape(batch * count).long(), segments)
        src = _zero_invalid(data.reshape(batch * count, inner), valid, 0).reshape(batch, count, inner)
        out = torch.zeros((batch, segments, inner), dtype=data.dtype, device=data.device)
        out.scatter_add_(1, ids.reshape(batch, count, 1).expand(batch, count, inner), src)
        return out.reshape(out_shape)
    return batch_segment_sum


def _unsorted_batch_segment_sum_onnx(c):
    """Per batch row (the leading dims of ``segment_ids``), ``data`` rows summed into ``num_segments``."""
    shape, ids_shape = c.input_desc("data").shape, c.input_desc("segment_ids").shape
    b = len(ids_shape) - 1
    batch, n, inner = _prod_onnx(ids_shape[:-1]), ids_shape[-1], _prod_onnx(shape[b + 1:])
    ids = c.node("Reshape", [c.input("segment_ids"), c.const(int64s([batch, n, 1]))])
    src = c.node("Reshape", [c.input("data"), c.const(int64s([batch, n, inner]))])
    res = c.tmp("summed")
    _scatter_add_onnx(c, None, ids, src, [batch, n, inner], c.attr("num_segments"), np_dtype(c.output_desc("out")), res)
    c.node("Reshape", [res, c.const(int64s(c.output_desc("out").shape))], [c.output("out")])


op("unsorted_batch_segment_sum", inputs=["data", "segment_ids"], outputs=["out"],
   attrs={"num_segments": ("int64", 0)}, infer=_unsorted_batch_segment_sum_infer,
   kernel=_unsorted_batch_segment_sum_kernel, onnx=_unsorted_batch_segment_sum_onnx,
   xla=_unsorted_batch_segment_sum_xla, sbp=_batch_sbp("data", "segment_ids", True),
   grad=lambda g: g.needs("data") and g.set_grad("data", g.emit(
       "batch_gather", {"in": g.dout("out"), "indices": g.input("segment_ids")})))


# ---------------------------------------------------------------- *_nd (tf.gather_nd style)

def _nd_geometry(ctx, shape, idx, what):
    ctx.check(len(idx.shape) >= 1, f"input 'indices' must have rank >= 1, received shape {idx.shape}")
    k = idx.shape[-1]
    ctx.check(k <= len(shape), f"last dim of input 'indices' {idx.shape} is {k}, larger than the rank of "
                               f"{what} {tuple(shape)}")
    return k


def _nd_linear(shape, idx):
    """``(flat row ids, in-range mask, row count)`` of the index tensor ``idx`` into the
    first ``idx.shape[-1]`` dims of ``shape`` (row-major); out-of-range rows get id 0.
    Shapes are the run-time ones, so dynamic blobs index what they hold."""
    k = idx.shape[-1]
    count = numel(idx.shape[:-1])
    strides, acc = [], 1
    for d in reversed(shape[:k]):
        strides.insert(0, acc)
        acc *= d
    if k == 0:
        zeros = torch.zeros(count, dtype=torch.long, device=idx.device)
        return zeros, zeros == 0, acc
    idx = idx.reshape(count, k).long()
    # (column by column with Python ints: no constant tensor is copied to the device per call)
    valid = (idx[:, 0] >= 0) & (idx[:, 0] < shape[0])
    ids = idx[:, 0] * strides[0]
    for j in range(1, k):
        valid = valid & (idx[:, j] >= 0) & (idx[:, j] < shape[j])
        ids = ids + idx[:, j] * strides[j]
    return torch.where(valid, ids, torch.zeros_like(ids)), valid, acc


def _nd_linear_xla(shape, idx):
    """The jax form of :func:`_nd_linear` (static shapes)."""
    jnp = xla_rules.jnp()
    k = idx.shape[-1]
    count = numel(idx.shape[:-1])
    rows = numel(shape[:k])
    if k == 0:
        return jnp.zeros(count, "int64"), jnp.ones(count, bool), rows
    idx = idx.reshape(count, k).astype("int64")
    valid = ((idx >= 0) & (idx < np.asarray(shape[:k], np.int64))).all(axis=1)
    strides = np.cumprod((1,) + tuple(shape[1:k])[::-1])[::-1].astype(np.int64)
    ids = (idx * strides).sum(axis=1)
    return jnp.where(valid, ids, 0), valid, rows


def _gather_nd_xla(k):
    shape = tuple(k.input("params").shape)
    out_shape = tuple(k.output("out").shape)

    def gather_nd(params, idx):
        jnp = xla_rules.jnp()
        ids, valid, rows = _nd_linear_xla(shape, idx)
        got = params.reshape(rows, numel(shape[idx.shape[-1]:]))[ids]
        return jnp.where(valid[:, None], got, jnp.zeros((), params.dtype)).reshape(out_shape)
    return gather_nd


def _gather_nd_infer(ctx):
    params, idx = ctx.input("params"), integer_input(ctx, "indices")
    k = _nd_geometry(ctx, params.shape, idx, "input 'params'")
    ctx.set_output("out", idx.shape[:-1] + params.shape[k:], params.dtype)


def _gather_nd_kernel(k):
    def gather_nd(params, idx):
        ids, valid, rows = _nd_linear(params.shape, idx)
        slice_shape = tuple(params.shape[idx.shape[-1]:])  # (explicit sizes: a -1 is ambiguous with 0 elements)
        out_shape = tuple(idx.shape[:-1]) + slice_shape
        return _zero_invalid(params.reshape(rows, numel(slice_shape))[ids], valid, 0).reshape(out_shape)
    return gather_nd


def _gather_nd_onnx(c):
    """gather_nd: rows whose index tuple is out of range give zeros (as the kernel)."""
    shape, idx_shape = c.input_desc("params").shape, c.input_desc("indices").shape
    k = idx_shape[-1]
    valid, ids = _valid_ids_onnx(c, c.input("indices"), np.array(shape[:k], dtype=np.int64))
    # a row is valid when all its k entries are: min over the last axis of the int mask
    row = reduce_node(c, "ReduceMin", c.node("Cast", [valid], to=onnx_rules.INT32), [-1], 0)
    row = c.node("Cast", [row], to=onnx_rules.BOOL)
    g = c.node("GatherND", [c.input("params"), ids])
    _zero_invalid_onnx(c, g, row, list(idx_shape[:-1]) + [1] * (len(shape) - k), c.output_desc("out"), c.output("out"))


def _gather_nd_sbp(ctx):
    """OneFlow's (``nd_index_slice_ops.cpp``), ``indices`` (n..., k) picking rows of the first k
    axes of ``params``: ``indices`` split along an index axis (params broadcast) gives ``out``
    split there; ``params`` split along an axis after the picked ones (indices broadcast)
    gives ``out`` split at its place; a partial ``params`` gives a partial ``out``."""
    S, B = _sbp.split, _sbp.B
    n, k = ctx.ndim("indices") - 1, ctx.shape("indices")[-1]
    return [{"params": B, "indices": S(i), "out": S(i)} for i in range(n)] + \
        [{"params": S(j), "indices": B, "out": S(j - k + n)} for j in range(k, ctx.ndim("params"))] + \
        [{"params": _sbp.P, "indices": B, "out": _sbp.P}]


def _scatter_nd_sbp(sums=True):
    """scatter_nd(_like), tensor_scatter_nd_add / _update (OneFlow's), ``indices`` (n..., k)
    picking rows of the first k axes of ``out``: ``updates`` split along an axis after the
    index axes (indices broadcast) gives ``out`` split at the matching axis (``like`` /
    ``params`` too); where the scattered rows add up (``sums``: not _update, whose rows replace
    params's), ``indices`` and ``updates`` split along an index axis give a partial ``out``
    (into zeros, or onto a partial ``params``); partial ``updates`` (and ``params``) with
    ``indices`` broadcast give a partial ``out`` (``like``, read for its shape, broadcast)."""
    def rule(ctx):
        S, B, P = _sbp.split, _sbp.B, _sbp.P
        n, k = ctx.ndim("indices") - 1, ctx.shape("indices")[-1]
        return [_sbp.signature(ctx, S(k + j - n), indices=B, updates=S(j)) for j in range(n, ctx.ndim("updates"))] + \
            [_sbp.signature(ctx, P, indices=S(i), updates=S(i), like=B) for i in range(n) if sums] + \
            [_sbp.signature(ctx, P, indices=B, like=B)]
    return rule


op("gather_nd", inputs=["params", "indices"], outputs=["out"], infer=_gather_nd_infer, kernel=_gather_nd_kernel,
   onnx=_gather_nd_onnx, xla=_gather_nd_xla, sbp=_gather_nd_sbp,
   grad=lambda g: g.needs("params") and g.set_grad("params", g.emit(
       "scatter_nd_like", {"like": g.input("params"), "indices": g.input("indices"), "updates": g.dout("out")})))


def _check_updates(ctx, shape, idx, k):
    u = ctx.input("updates")
    expected = idx.shape[:-1] + tuple(shape[k:])
    ctx.check(u.shape == expected, f"input 'updates' expected shape {expected} (indices {idx.shape} into "
                                   f"shape {tuple(shape)}), received {u.shape}")
    return u


def _scatter_add_fn(mode):
    """``(base, idx, updates) -> out``: rows of ``base`` at ``idx`` get ``updates`` added or written."""
    def scatter(base, idx, updates):
        shape = base.shape
        ids, valid, rows = _nd_linear(shape, idx)
        cols = numel(shape[idx.shape[-1]:])  # (explicit sizes: a -1 is ambiguous with 0 elements)
        out = base.reshape(rows, cols)
        src = updates.reshape(ids.shape[0], cols)
        if mode == "add":
            out.index_add_(0, ids, _zero_invalid(src, valid, 0))
        else:
            out[ids[valid]] = src[valid]
        return out.reshape(shape)
    return scatter


def _scatter_xla_fn(mode):
    """The jax form of :func:`_scatter_add_fn` (static shapes). Among duplicate indices which
    update a "set" writes is unspecified, as in the kernel."""
    def scatter(base, idx, updates):
        jnp = xla_rules.jnp()
        shape = base.shape
        ids, valid, rows = _nd_linear_xla(shape, idx)
        cols = numel(shape[idx.shape[-1]:])
        out = base.reshape(rows, cols)
        src = updates.reshape(ids.shape[0], cols)
        if mode == "add":
            out = out.at[ids].add(jnp.where(valid[:, None], src, jnp.zeros((), src.dtype)))
        else:  # (rows out of range go past the end: dropped)
            out = out.at[jnp.where(valid, ids, rows)].set(src, mode="drop")
        return out.reshape(shape)
    return scatter


def _into_zeros_xla(shape_of):
    """scatter_nd(_like)'s rule: ``updates`` added into zeros of shape ``shape_of(*args)``; the
    last two args are ``(indices, updates)``."""
    fn = _scatter_xla_fn("add")
    return lambda *args: fn(xla_rules.jnp().zeros(shape_of(*args), args[-1].dtype), args[-2], args[-1])


def _scatter_nd_infer(ctx):
    idx = integer_input(ctx, "indices")
    shape = ctx.attr("shape")
    ctx.check(len(shape) >= 1 and all(s >= 1 for s in shape), f"attr 'shape' must be a non-empty list of "
                                                               f"positive dims, received {tuple(shape)}")
    k = _nd_geometry(ctx, shape, idx, "attr 'shape'")
    u = _check_updates(ctx, shape, idx, k)
    ctx.set_output("out", shape, u.dtype)


def _scatter_nd_kernel(k):
    shape = tuple(k.output("out").shape)  # (this device's part of attr shape)
    fn = _scatter_add_fn("add")
    return lambda idx, updates: fn(torch.zeros(shape, dtype=updates.dtype, device=updates.device), idx, updates)


def _nd_rows_onnx(c, shape):
    """``(n, k, rows, inner, ids)``: the row-major row id (int64, (n, 1)) that each index tuple of
    ``indices`` (..., k) picks in the first k dims of ``shape``; -1 for a tuple out of range."""
    idx_shape = c.input_desc("indices").shape
    k, n = idx_shape[-1], _prod_onnx(idx_shape[:-1])
    ids = c.node("Reshape", [c.node("Cast", [c.input("indices")], to=onnx_rules.INT64), c.const(int64s([n, k]))])
    valid, ids = _valid_ids_onnx(c, ids, np.array(shape[:k], dtype=np.int64))
    strides = np.cumprod([1] + shape[:k][::-1][:-1])[::-1] if k else np.zeros(0)
    linear = c.node("MatMul", [ids, c.const(np.array(strides, dtype=np.int64).reshape(k, 1))])
    row_ok = reduce_node(c, "ReduceMin", c.node("Cast", [valid], to=onnx_rules.INT32), [1], 1)
    row_ok = c.node("Cast", [row_ok], to=onnx_rules.BOOL)
    return n, k, _prod_onnx(shape[:k]), _prod_onnx(shape[k:]), c.node("Where", [row_ok, linear, c.const(np.int64(-1))])


def _scatter_nd_add_onnx(base_arg, shape_of):
    """scatter_nd / scatter_nd_like (into zeros) and tensor_scatter_nd_add (into ``params``):
    ``indices`` (..., k) pick rows of the first k dims of the output (row-major ids)."""
    def convert(c):
        shape = list(shape_of(c))
        n, k, rows, inner, linear = _nd_rows_onnx(c, shape)
        base = None
        if base_arg is not None:
            base = c.node("Reshape", [c.input(base_arg), c.const(int64s([1, rows, inner]))])
        src = c.node("Reshape", [c.input("updates"), c.const(int64s([1, n, inner]))])
        res = c.tmp("scattered")
        _scatter_add_onnx(c, base, c.node("Reshape", [linear, c.const(int64s([1, n, 1]))]), src, [1, n, inner], rows,
                     np_dtype(c.output_desc("out")), res)
        c.node("Reshape", [res, c.const(int64s(shape))], [c.output("out")])
    return convert


_scatter_nd_onnx = _scatter_nd_add_onnx(None, lambda c: c.attr("shape"))


op("scatter_nd", inputs=["indices", "updates"], outputs=["out"], attrs={"shape": "shape"},
   infer=_scatter_nd_infer, kernel=_scatter_nd_kernel, onnx=_scatter_nd_onnx, sbp=_scatter_nd_sbp(),
   xla=lambda k: _into_zeros_xla(lambda idx, updates: tuple(k.output("out").shape)),
   grad=lambda g: g.needs("updates") and g.set_grad("updates", g.emit(
       "gather_nd", {"params": g.dout("out"), "indices": g.input("indices")})))


def _scatter_nd_like_infer(ctx):
    like_, idx = ctx.input("like"), integer_input(ctx, "indices")
    k = _nd_geometry(ctx, like_.shape, idx, "input 'like'")
    u = _check_updates(ctx, like_.shape, idx, k)
    ctx.set_output("out", like_.shape, u.dtype)


def _scatter_nd_like_kernel(k):
    fn = _scatter_add_fn("add")
    return lambda like_, idx, updates: fn(torch.zeros(like_.shape, dtype=updates.dtype, device=updates.device),
                                          idx, updates)


_scatter_nd_like_onnx = _scatter_nd_add_onnx(None, lambda c: c.input_desc("like").shape)


op("scatter_nd_like", inputs=["like", "indices", "updates"], outputs=["out"], infer=_scatter_nd_like_infer,
   kernel=_scatter_nd_like_kernel, onnx=_scatter_nd_like_onnx, sbp=_scatter_nd_sbp(),
   xla=lambda k: _into_zeros_xla(lambda like_, idx, updates: like_.shape))


def _tensor_scatter_nd_infer(ctx):
    params, idx = ctx.input("params"), integer_input(ctx, "indices")
    k = _nd_geometry(ctx, params.shape, idx, "input 'params'")
    _check_updates(ctx, params.shape, idx, k)
    same_dtype(ctx, "params", "updates")
    ctx.set_output("out", params.shape, params.dtype)


def _tensor_scatter_nd_kernel(mode):
    def make(k):
        fn = _scatter_add_fn(mode)
        return lambda params, updates, idx: fn(params.clone(), idx, updates)
    return make


def _tensor_scatter_nd_xla(mode):
    def make(k):
        fn = _scatter_xla_fn(mode)
        return lambda params, updates, idx: fn(params, idx, updates)
    return make


def _tensor_scatter_nd_add_grad(g):
    if g.needs("params"):
        g.set_grad("params", g.dout("out"))
    if g.needs("updates"):
        g.set_grad("updates", g.emit("gather_nd", {"params": g.dout("out"), "indices": g.input("indices")},
                                     name=f"{g.op_name}_updates_grad"))


def _tensor_scatter_nd_update_grad(g):
    dy, idx = g.dout("out"), g.input("indices")
    if g.needs("updates"):
        g.set_grad("updates", g.emit("gather_nd", {"params": dy, "indices": idx}, name=f"{g.op_name}_updates_grad"))
    if g.needs("params"):
        zeros = g.emit("zero_like", {"like": g.input("updates")}, name=f"{g.op_name}_zero_updates")
        g.set_grad("params", g.emit("tensor_scatter_nd_update", {"params": dy, "updates": zeros, "indices": idx},
                                    name=f"{g.op_name}_params_grad"))


_tensor_scatter_nd_add_onnx = _scatter_nd_add_onnx("params", lambda c: c.input_desc("params").shape)


op("tensor_scatter_nd_add", inputs=["params", "updates", "indices"], outputs=["out"],
   infer=_tensor_scatter_nd_infer, kernel=_tensor_scatter_nd_kernel("add"), grad=_tensor_scatter_nd_add_grad,
   sbp=_scatter_nd_sbp(),
   onnx=_tensor_scatter_nd_add_onnx, xla=_tensor_scatter_nd_xla("add"))


def _tensor_scatter_nd_update_onnx(c):
    """params with the rows picked by ``indices`` replaced by ``updates`` (ScatterND); a row whose
    index is out of range is written to a scratch row past the end, dropped after (as the kernel
    skips it). Among duplicate indices which update wins is unspecified, in ONNX as in the kernel."""
    shape = list(c.input_desc("params").shape)
    n, k, rows, inner, linear = _nd_rows_onnx(c, shape)
    linear = c.node("Where", [c.node("Less", [linear, c.const(np.int64(0))]), c.const(np.int64(rows)), linear])
    base = c.node("Reshape", [c.input("params"), c.const(int64s([rows, inner]))])
    base = c.node("Concat", [base, c.const(np.zeros((1, inner), dtype=np_dtype(c.input_desc("params"))))], axis=0)
    src = c.node("Reshape", [c.input("updates"), c.const(int64s([n, inner]))])
    res = c.node("ScatterND", [base, linear, src])
    res = c.node("Slice", [res, c.const(int64s([0])), c.const(int64s([rows])), c.const(int64s([0]))])
    c.node("Reshape", [res, c.const(int64s(shape))], [c.output("out")])


op("tensor_scatter_nd_update", inputs=["params", "updates", "indices"], outputs=["out"],
   infer=_tensor_scatter_nd_infer, kernel=_tensor_scatter_nd_kernel("update"), onnx=_tensor_scatter_nd_update_onnx,
   sbp=_scatter_nd_sbp(sums=False),
   xla=_tensor_scatter_nd_xla("update"),
   grad=_tensor_scatter_nd_update_grad)


# ---------------------------------------------------------------- dim_gather (torch.gather)

def _dim_index_check(ctx, x, idx, x_arg):
    n = len(x.shape)
    dim = norm_axis(ctx.attr("dim"), n, "attr 'dim'")
    ctx.check(len(idx.shape) == n, f"input 'index' must have the rank of input '{x_arg}' {x.shape}, received "
                                   f"shape {idx.shape}")
    ctx.check(all(i <= s for d, (i, s) in enumerate(zip(idx.shape, x.shape)) if d != dim),
              f"input 'index' of shape {idx.shape} exceeds input '{x_arg}' {x.shape} outside dim {dim}")
    return dim


def _dim_gather_infer(ctx):
    x, idx = ctx.input("input"), integer_input(ctx, "index")
    _dim_index_check(ctx, x, idx, "input")
    ctx.set_output("output", idx.shape, x.dtype)


def _dim_size(arg):
    return lambda k: k.input(arg).shape[norm_axis(k.attr("dim"), len(k.input(arg).shape))]


def _dim_grid_xla(idx, dim, checks, k):
    """The index tuple that puts element ``i`` of ``idx`` at ``i`` with its ``dim`` entry replaced by
    ``idx[i]`` (torch.gather / scatter_add's addressing); reports the op's index check (``checks``)."""
    lax = xla_rules.lax()
    (_, size, error), = checks(k)
    xla_rules.check_ids(idx, size, error)
    return tuple(idx.astype("int64") if d == dim else lax.broadcasted_iota("int64", idx.shape, d)
                 for d in range(idx.ndim))


def _dim_gather_xla(k):
    dim = norm_axis(k.attr("dim"), len(k.input("input").shape))
    return lambda x, idx: x.at[_dim_grid_xla(idx, dim, _DIM_GATHER_CHECKS, k)].get(mode="clip")


def _dim_sbp(x, kind):
    """dim_gather (``x`` = input, ``kind`` "gather") and the dim_scatter ops (``x`` = like /
    input, ``kind`` "add" or "update"), OneFlow's (``dim_gather_op.cpp``, ``dim_scatter_ops.cpp``):
    every blob split along an axis other than ``dim`` where ``index`` is as long as ``x``;
    ``index`` (and ``src``) split along ``dim``: dim_gather's output split there (input
    broadcast), a scatter-add's output partial (like broadcast, input partial); partial
    inputs of a linear op (``input`` of dim_gather; ``src`` and ``input`` of the scatters) with
    ``index`` broadcast give a partial output (``like``, read for its shape, broadcast)."""
    def rule(ctx):
        S, B, P = _sbp.split, _sbp.B, _sbp.P
        dim, shape, ishape = ctx.attr("dim") % ctx.ndim(x), ctx.shape(x), ctx.shape("index")
        cands = [_sbp.signature(ctx, S(i)) for i in range(len(shape)) if i != dim and shape[i] == ishape[i]]
        if kind == "gather":
            cands.append({x: B, "index": S(dim), "output": S(dim)})
        elif kind == "add":
            cands.append(_sbp.signature(ctx, P, index=S(dim), src=S(dim), like=B))
        return cands + [_sbp.signature(ctx, P, index=B, like=B)]
    return rule


_DIM_GATHER_CHECKS = index_checks("dim_gather", "index", _dim_size("input"))
op("dim_gather", inputs=["input", "index"], outputs=["output"], attrs={"dim": ("int32", 0)},
   infer=_dim_gather_infer, onnx=lambda c: c.node("GatherElements", [c.input("input"), c.input("index")],
                                                  [c.output("output")], axis=c.attr("dim")),
   checks=_DIM_GATHER_CHECKS, xla=_dim_gather_xla, sbp=_dim_sbp("input", "gather"),
   kernel=raising_bad_ids(_DIM_GATHER_CHECKS, 1, lambda k: (
       lambda x, idx, d=norm_axis(k.attr("dim"), len(k.input("input").shape)): torch.gather(x, d, idx.long()))),
   grad=lambda g: g.needs("input") and g.set_grad("input", g.emit(
       "dim_scatter_add_like", {"like": g.input("input"), "index": g.input("index"), "src": g.dout("output")},
       {"dim": g.attr("dim")})))


def _dim_scatter_add_like_infer(ctx):
    like_, idx, src = ctx.input("like"), integer_input(ctx, "index"), ctx.input("src")
    _dim_index_check(ctx, like_, idx, "like")
    ctx.check(src.shape == idx.shape, f"input 'src' expected shape {idx.shape} (as 'index'), received {src.shape}")
    ctx.set_output("output", like_.shape, src.dtype)


def _dim_scatter_add_like_kernel(k):
    dim = norm_axis(k.attr("dim"), len(k.input("like").shape))
    return lambda like_, idx, src: torch.zeros(like_.shape, dtype=src.dtype, device=src.device).scatter_add_(
        dim, idx.long(), src)


def _dim_scatter_sum_onnx(c, like, index, src, out):
    """``out`` = zeros of shape ``like`` with ``src[i]`` added at ``index[i]`` along attr ``dim``
    (torch.scatter_add); an index smaller than ``like`` outside ``dim`` is zero-padded (padding
    adds 0). Out-of-range ids add nothing here, where the kernels raise."""
    ishape = list(c.input_desc("index").shape)
    dim = c.attr("dim") % len(like)
    target = [ishape[i] if i == dim else like[i] for i in range(len(like))]
    if target != ishape:
        after = [t - s for t, s in zip(target, ishape)]
        pads = c.const(int64s([0] * len(like) + after))
        index = c.node("Pad", [index, pads, c.const(np.zeros((), dtype=np_dtype(c.input_desc("index"))))])
        src = c.node("Pad", [src, pads, c.const(np.zeros((), dtype=np_dtype(c.input_desc("src"))))])
    b, n, inner = _prod_onnx(like[:dim]), ishape[dim], _prod_onnx(like[dim + 1:])
    three = c.const(int64s([b, n, inner]))
    res = c.tmp("summed")
    _scatter_add_onnx(c, None, c.node("Reshape", [index, three]), c.node("Reshape", [src, three]), [b, n, inner],
                      like[dim], np_dtype(c.output_desc("output")), res)
    c.node("Reshape", [res, c.const(int64s(like))], out)


def _dim_scatter_add_like_onnx(c):
    """See :func:`_dim_scatter_sum_onnx`."""
    _dim_scatter_sum_onnx(c, list(c.input_desc("like").shape), c.input("index"), c.input("src"), [c.output("output")])


_DIM_SCATTER_CHECKS = index_checks("dim_scatter_add_like", "index", _dim_size("like"))
op("dim_scatter_add_like", inputs=["like", "index", "src"], outputs=["output"], attrs={"dim": ("int32", 0)},
   infer=_dim_scatter_add_like_infer, kernel=raising_bad_ids(_DIM_SCATTER_CHECKS, 1, _dim_scatter_add_like_kernel),
   checks=_DIM_SCATTER_CHECKS, onnx=_dim_scatter_add_like_onnx, grad=lambda g: _dim_scatter_src_grad(g),
   sbp=_dim_sbp("like", "add"),
   xla=lambda k: (
       lambda like_, idx, src, dim=norm_axis(k.attr("dim"), len(k.input("like").shape)): xla_rules.jnp().zeros(
           like_.shape, src.dtype).at[_dim_grid_xla(idx, dim, _DIM_SCATTER_CHECKS, k)].add(src, mode="drop")))



# ---------------------------------------------------------------- dim_scatter_add / dim_scatter_update
# (torch.Tensor.scatter_add / scatter: ``input`` with ``src[i]`` added at / written to
# ``index[i]`` along ``dim``; OneFlow's ``dim_scatter_add`` / ``dim_scatter_update``)

def _dim_scatter_infer(ctx):
    x, idx, src = ctx.input("input"), integer_input(ctx, "index"), ctx.input("src")
    _dim_index_check(ctx, x, idx, "input")
    ctx.check(src.shape == idx.shape, f"input 'src' expected shape {idx.shape} (as 'index'), received {src.shape}")
    ctx.check(src.dtype == x.dtype, f"input 'src' expected dtype {x.dtype.name} (as 'input'), received "
                                    f"{src.dtype.name}")
    ctx.set_output("output", x.shape, x.dtype)


def _dim_scatter_kernel(method):
    def make(k):
        dim = norm_axis(k.attr("dim"), len(k.input("input").shape))
        return lambda x, idx, src: getattr(x.clone(), method)(dim, idx.long(), src)
    return make


def _dim_scatter_xla(mode):
    def make(k):
        dim = norm_axis(k.attr("dim"), len(k.input("input").shape))
        checks = _DIM_SCATTER_INTO_CHECKS[mode]
        return lambda x, idx, src: getattr(x.at[_dim_grid_xla(idx, dim, checks, k)], mode)(src, mode="drop")
    return make


def _dim_scatter_src_grad(g):
    if g.needs("src"):
        g.set_grad("src", g.emit("dim_gather", {"input": g.dout("output"), "index": g.input("index")},
                                 {"dim": g.attr("dim")}, name=f"{g.op_name}_src_grad"))


def _dim_scatter_add_grad(g):
    _dim_scatter_src_grad(g)
    if g.needs("input"):
        g.set_grad("input", g.dout("output"))


def _dim_scatter_update_grad(g):
    """d input: dy with the written places zeroed (they no longer depend on input)."""
    _dim_scatter_src_grad(g)
    if g.needs("input"):
        zeros = g.emit("zero_like", {"like": g.input("src")}, name=f"{g.op_name}_zero_src")
        g.set_grad("input", g.emit("dim_scatter_update", {"input": g.dout("output"), "index": g.input("index"),
                                                          "src": zeros}, {"dim": g.attr("dim")},
                                   name=f"{g.op_name}_input_grad"))


def _dim_scatter_add_onnx(c):
    """input + the scatter-sum of src (see :func:`_dim_scatter_sum_onnx`)."""
    summed = c.tmp("scattered")
    _dim_scatter_sum_onnx(c, list(c.input_desc("input").shape), c.input("index"), c.input("src"), [summed])
    c.node("Add", [c.input("input"), summed], [c.output("output")])


_DIM_SCATTER_INTO_CHECKS = {mode: index_checks(op_type, "index", _dim_size("input"))
                            for mode, op_type in (("add", "dim_scatter_add"), ("set", "dim_scatter_update"))}
op("dim_scatter_add", inputs=["input", "index", "src"], outputs=["output"], attrs={"dim": ("int32", 0)},
   infer=_dim_scatter_infer, checks=_DIM_SCATTER_INTO_CHECKS["add"],
   kernel=raising_bad_ids(_DIM_SCATTER_INTO_CHECKS["add"], 1, _dim_scatter_kernel("scatter_add_")),
   grad=_dim_scatter_add_grad, xla=_dim_scatter_xla("add"), onnx=_dim_scatter_add_onnx, sbp=_dim_sbp("input", "add"),
   doc="input with src[i] added at index[i] along dim (torch scatter_add)")
op("dim_scatter_update", inputs=["input", "index", "src"], outputs=["output"], attrs={"dim": ("int32", 0)},
   infer=_dim_scatter_infer, checks=_DIM_SCATTER_INTO_CHECKS["set"],
   kernel=raising_bad_ids(_DIM_SCATTER_INTO_CHECKS["set"], 1, _dim_scatter_kernel("scatter_")),
   grad=_dim_scatter_update_grad, xla=_dim_scatter_xla("set"), sbp=_dim_sbp("input", "update"),
   onnx=lambda c: c.node("ScatterElements", [c.input("input"), c.input("index"), c.input("src")],
                         [c.output("output")], axis=c.attr("dim") % len(c.input_desc("input").shape)),
   doc="input with src[i] written at index[i] along dim (torch scatter; duplicates: any one wins)")


# ------------------------------------------------------------------ distributed_partial_fc_sample
# OneFlow v0.6.0 ``oneflow/user/ops/partial_fc_sample_op.cpp`` and
# ``oneflow/user/kernels/partial_fc_sample_kernel.cu`` (Partial FC: a softmax over a sample of
# the classes). The classes (rows of ``weight``) are cut into ``parallel_num`` shards, one per
# device, as OneFlow splits ``weight`` (``BalancedSplitter``: the first ``classes %
# parallel_num`` shards one class longer); each shard contributes ``num_sample / parallel_num``
# class ids to ``sampled_label``: first the shard's classes that occur in ``label`` (ascending),
# then others of the shard in a random order. ``sampled_weight`` = the rows of ``weight`` at
# ``sampled_label``; ``mapped_label`` = each label's position in ``sampled_label``. OneFlow
# takes the shard count from the op's placement at run time; graphfront's ops are logical, so
# it is the attr ``parallel_num`` (filled by flow.distributed_partial_fc_sample). The random
# order comes from torch's generator seeded with ``seed`` (OneFlow's curand stream cannot be
# reproduced): the sample differs from OneFlow's, its structure does not. A shard holding more
# label classes than its share of the sample is refused (OneFlow's kernel then maps the extra
# labels past the shard's part of the sample, onto other classes' columns or past the end).
# The weight gradient is the sampled rows' gradient summed back into weight's shape (OneFlow
# routes it through a ``distributed_partial_fc_sample_disable_boxing`` op that only relabels
# per-device layouts, then ``unsorted_segment_sum_like``).

def _partial_fc_parts(ctx):
    weight, num_sample, parts = ctx.input("weight"), ctx.attr("num_sample"), ctx.attr("parallel_num")
    ctx.check(parts >= 1, f"attr 'parallel_num' must be >= 1, received {parts}")
    ctx.check(num_sample % parts == 0,
              f"attr 'num_sample' ({num_sample}) must divide by 'parallel_num' ({parts})")
    smallest = weight.shape[0] // parts
    ctx.check(0 < num_sample // parts <= smallest,
              f"attr 'num_sample' must lie in [{parts}, {smallest * parts}] ({num_sample // parts} per shard of "
              f"the {weight.shape[0]} classes (weight.shape[0]) cut into {parts}, the smallest holding {smallest}), "
              f"received {num_sample}")


def _partial_fc_infer(ctx):
    weight, label = ctx.input("weight"), integer_input(ctx, "label")
    ctx.check(len(weight.shape) >= 1 and len(label.shape) == 1,
              f"inputs 'weight' (rank >= 1) and 'label' (rank 1) received shapes {weight.shape}, {label.shape}")
    _partial_fc_parts(ctx)
    ctx.set_output("mapped_label", label.shape, label.dtype)
    ctx.set_output("sampled_label", (ctx.attr("num_sample"),), label.dtype)
    ctx.set_output("sampled_weight", (ctx.attr("num_sample"),) + tuple(weight.shape[1:]), weight.dtype)


def _partial_fc_checks(k):
    return index_checks("distributed_partial_fc_sample", "label", lambda k_: k_.input("weight").shape[0])(k)


def _partial_fc_kernel(k):
    parts, classes = k.attr("parallel_num"), k.input("weight").shape[0]
    per_sample = k.attr("num_sample") // parts
    shards = [balanced_range(classes, parts, p) for p in range(parts)]  # shard p: its classes
    shard_of = torch.repeat_interleave(torch.arange(parts), torch.tensor([len(r) for r in shards]))
    gen = k.generator(k.attr("seed"))

    def run(weight, label):
        ids = label.long()
        # scatter raises on a class id outside [0, classes) on the CPU (checked before the step elsewhere)
        positive = torch.zeros(classes, dtype=torch.bool, device=ids.device).scatter_(0, ids, True)
        sampled, ranks = [], []
        for p, r in enumerate(shards):
            shard = positive[r.start:r.stop]
            labelled = torch.nonzero(shard).flatten()  # (its size is read on the host: one read per shard)
            if labelled.numel() > per_sample:
                raise OpRunError(
                    f"op '{k.op_name}' (distributed_partial_fc_sample): input 'label' holds {labelled.numel()} "
                    f"distinct classes of shard {p} (classes [{r.start}, {r.stop})), more than its share of the "
                    f"sample, num_sample / parallel_num = {per_sample}; raise attr 'num_sample' (each shard's share "
                    f"must hold the label classes it owns)")
            others = torch.nonzero(~shard).flatten()
            others = others[torch.randperm(others.numel(), generator=gen, device=others.device)]
            sampled.append(torch.cat([labelled, others])[:per_sample] + r.start)
            ranks.append(shard.cumsum(0) - 1)  # a positive's rank in its shard
        sampled_label = torch.cat(sampled)
        mapped = shard_of.to(ids.device)[ids] * per_sample + torch.cat(ranks)[ids]
        return mapped.to(label.dtype), sampled_label.to(label.dtype), weight.index_select(0, sampled_label)
    return run


def _partial_fc_grad(g):
    if g.needs("weight"):
        g.set_grad("weight", g.emit("unsorted_segment_sum_like",
                                    {"data": g.dout("sampled_weight"), "segment_ids": g.output("sampled_label"),
                                     "like": g.input("weight")}, {"axis": 0},
                                    name=f"{g.op_name}_grad_unsorted_segment_sum_like"))


op("distributed_partial_fc_sample", inputs=["weight", "label"],
   outputs=["mapped_label", "sampled_label", "sampled_weight"],
   attrs={"num_sample": "int64", "seed": ("int64", 0), "parallel_num": ("int64", 1)},
   infer=_partial_fc_infer, kernel=raising_bad_ids(_partial_fc_checks, 1, _partial_fc_kernel),
   checks=_partial_fc_checks, grad=_partial_fc_grad, random=True, host_reads=True)
