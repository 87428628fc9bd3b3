"""Ops whose result size is known only at run time, and the ops that move blobs between
dynamic and static shapes.

A dynamic blob's BlobDesc carries its *maximum* shape and ``is_dynamic``; at run time
its kernel output may be smaller along any axis (graphfront passes the actual tensor).

=====================================  =======================================================
op                                     computes
=====================================  =======================================================
``argwhere`` (input -> output,         coordinates of the non-zero elements of ``input``:
output_size)                           ``output`` dynamic (numel, ndim) in attr ``dtype``, one
                                       row per non-zero element in row-major order; int
                                       ``output_size`` (1,) = their number. NoGrad.
                                       (``oneflow/user/ops/arg_where_op.cpp``)
``unique_with_counts`` (x -> y, idx,   1-D ``x``: ``y[:num_unique]`` its distinct values
count, num_unique)                     (ascending), ``idx`` (``out_idx`` dtype) with
                                       ``x == y[idx]``, ``count[:num_unique]`` occurrences;
                                       ``y``/``count`` are shaped like ``x`` and zero past
                                       ``num_unique``. NoGrad. (``unique_with_counts_op.cpp``)
``indexed_slices_reduce_sum``          sums the rows of ``x_values`` (shape ``x_indices.shape +
(x_indices, x_values -> y_indices,     value dims``) that share an index: ``y_indices[:k]``
y_values, num_unique)                  distinct indices (ascending), ``y_values[:k]`` the sums,
                                       zero past ``k``; ``num_unique`` int64 (1,) = k. NoGrad.
``cast_to_static_shape`` (input ->     the same values with a static BlobDesc; a smaller
output)                                run-time blob is zero-padded to the static shape (one
                                       larger in some dim: its elements in order, then zeros).
                                       Grad: ``identity`` (as OneFlow).
system ``dynamic_reshape_conf``        ``in`` reshaped at run time to ``shape``, whose one -1
(in -> out)                            takes what the run-time element count leaves; dynamic
                                       when ``in`` is. Grad: ``dynamic_reshape_like_conf``.
                                       (OneFlow's ``DynamicReshapeOp``.)
system ``dynamic_reshape_like_conf``   ``x`` reshaped to ``like``'s run-time shape. (OneFlow's
(x, like -> y)                         ``DynamicReshapeLikeOp``.)
system ``shape_elem_cnt_conf``         the product of ``x``'s run-time dims over the axes of
(x -> y)                               ``include_axis_conf``, ``range_axis_conf`` [begin, end],
                                       or all but ``exclude_axis_conf``'s: ``y`` (1,) in
                                       ``data_type`` (int32 default). NoGrad. (OneFlow's
                                       ``ShapeElemCntOp``.)
system ``sync_dynamic_resize_conf``    ``out`` = ``in`` narrowed along ``axis`` to
(in, size -> out)                      ``size[0]`` elements; dynamic. (OneFlow's
                                       ``SyncDynamicResizeOp``.)
system                                 ``x`` broadcast (numpy rules) to the run-time shapes of
``broadcast_to_compatible_with_conf``  ``x`` and every ``compatible`` blob: the BlobDesc has the
(x, compatible* -> y)                  broadcast of their maximum shapes, dynamic when any
                                       input is. Grad (``x`` only): summed back to ``x``.
                                       (OneFlow's ``BroadcastToCompatibleWithOp``.)
=====================================  =======================================================
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from graphfront.core import op_conf_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import OpCheckError, OpRunError
from graphfront.ops import xla_rules
from graphfront.ops.common import broadcast_shape, numel, reduce_to
from graphfront.ops.onnx_rules import int64s, nonzero
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp
from graphfront.ops.system import system_op

_INDEX_DTYPES = (_dt.int32, _dt.int64)


def _index_dtype(ctx, name):
    d = ctx.attr(name)
    ctx.check(d in _INDEX_DTYPES, f"attr '{name}' expected int32 or int64, received {d.name if d else d}")
    return d


# ------------------------------------------------------------------ argwhere

def _argwhere_infer(ctx):
    x = ctx.input("input")
    dtype = _index_dtype(ctx, "dtype")
    ctx.set_output("output", (numel(x.shape), len(x.shape)), dtype, is_dynamic=True)
    ctx.set_output("output_size", (1,), dtype)


def _argwhere_kernel(k):
    dtype = k.attr("dtype").torch

    def argwhere(x):
        coords = torch.nonzero(x).to(dtype)
        return coords, torch.tensor([coords.shape[0]], dtype=dtype, device=x.device)
    return argwhere


def _argwhere_onnx(c):
    """output: the (count, ndim) coordinates of the non-zero entries in row-major order (NonZero,
    transposed), the dynamic blob of the kernel; output_size: (1,) count. Both of attr dtype."""
    to = c.dtype_code(c.attr("dtype"))
    nz = c.node("NonZero", [nonzero(c, c.input("input"))])
    c.node("Cast", [c.node("Transpose", [nz], perm=[1, 0])], [c.output("output")], to=to)
    count = c.node("Slice", [c.node("Shape", [nz]), c.const(int64s([1])), c.const(int64s([2])), c.const(int64s([0]))])
    c.node("Cast", [count], [c.output("output_size")], to=to)


op("argwhere", inputs=["input"], outputs=["output", "output_size"], attrs={"dtype": ("dtype", _dt.int32)},
   infer=_argwhere_infer, kernel=_argwhere_kernel, no_grad=True, onnx=_argwhere_onnx, host_reads=True,
   doc="coordinates of non-zero elements (dynamic (numel, ndim)) and their count")


# ------------------------------------------------------------------ unique_with_counts

def _pad0(t, n):
    """Zero-pad dim 0 of ``t`` to ``n`` rows."""
    return F.pad(t, [0, 0] * (t.dim() - 1) + [0, n - t.shape[0]]) if t.shape[0] < n else t


def _unique_infer(ctx):
    x = ctx.input("x")
    ctx.check(len(x.shape) == 1, f"input 'x' expected rank 1, received shape {x.shape}")
    idx_dtype = _index_dtype(ctx, "out_idx")
    ctx.set_output("y", x.shape, x.dtype, is_dynamic=x.is_dynamic)
    ctx.set_output("idx", x.shape, idx_dtype, is_dynamic=x.is_dynamic)
    ctx.set_output("count", x.shape, idx_dtype, is_dynamic=x.is_dynamic)
    ctx.set_output("num_unique", (1,), idx_dtype)


def _unique_kernel(k):
    idx_dtype = k.attr("out_idx").torch

    def unique_with_counts(x):
        y, idx, count = torch.unique(x, sorted=True, return_inverse=True, return_counts=True)
        n = x.shape[0]
        return (_pad0(y, n), idx.to(idx_dtype), _pad0(count.to(idx_dtype), n),
                torch.tensor([y.shape[0]], dtype=idx_dtype, device=x.device))
    return unique_with_counts


def _pad_end_onnx(c, x, n, length):
    """``x`` (length,) zero-padded at the end to ``n`` entries."""
    pads = c.node("Concat", [c.const(int64s([0])), c.node("Sub", [c.const(int64s([n])), length])], axis=0)
    return c.node("Pad", [x, pads])


def _unique_with_counts_onnx(c):
    """Unique (sorted): y the distinct values ascending and count their counts, both zero-padded
    to x's length; idx the position of each x in y; num_unique (1,). Indices of attr out_idx."""
    n = c.input_desc("x").shape[0]
    to = c.dtype_code(c.attr("out_idx"))
    y, inverse, counts = c.tmp("y"), c.tmp("inverse"), c.tmp("counts")
    c.node("Unique", [c.input("x")], [y, "", inverse, counts], sorted=1)
    length = c.node("Shape", [y])
    c.node("Identity", [_pad_end_onnx(c, y, n, length)], [c.output("y")])
    c.node("Cast", [inverse], [c.output("idx")], to=to)
    c.node("Cast", [_pad_end_onnx(c, counts, n, length)], [c.output("count")], to=to)
    c.node("Cast", [length], [c.output("num_unique")], to=to)


op("unique_with_counts", inputs=["x"], outputs=["y", "idx", "count", "num_unique"],
   attrs={"out_idx": ("dtype", _dt.int32)}, infer=_unique_infer, kernel=_unique_kernel, no_grad=True,
   onnx=_unique_with_counts_onnx, host_reads=True,
   doc="distinct values of a 1-D blob, the index of each element's value and the counts")


# ------------------------------------------------------------------ indexed_slices_reduce_sum

def _indexed_slices_infer(ctx):
    ind, val = ctx.input("x_indices"), ctx.input("x_values")
    ctx.check(ind.dtype in _INDEX_DTYPES, f"input 'x_indices' expected int32 or int64, received {ind.dtype.name}")
    ctx.check(val.shape[:len(ind.shape)] == ind.shape,
              f"input 'x_values' expected a shape starting with {ind.shape} (the shape of 'x_indices'), "
              f"received {val.shape}")
    n = numel(ind.shape)
    ctx.set_output("y_indices", (n,), ind.dtype)
    ctx.set_output("y_values", (n,) + tuple(val.shape[len(ind.shape):]), val.dtype)
    ctx.set_output("num_unique", (1,), _dt.int64)


def _indexed_slices_kernel(k):
    index_ndim = len(k.input("x_indices").shape)

    def indexed_slices_reduce_sum(ind, val):
        flat = ind.reshape(-1)
        rows = val.reshape((flat.shape[0],) + tuple(val.shape[index_ndim:]))
        uniq, inverse = torch.unique(flat, sorted=True, return_inverse=True)
        sums = torch.zeros((flat.shape[0],) + tuple(rows.shape[1:]), dtype=val.dtype, device=val.device)
        sums.index_add_(0, inverse, rows)
        return _pad0(uniq, flat.shape[0]), sums, torch.tensor([uniq.shape[0]], dtype=torch.int64, device=val.device)
    return indexed_slices_reduce_sum


op("indexed_slices_reduce_sum", inputs=["x_indices", "x_values"], outputs=["y_indices", "y_values", "num_unique"],
   infer=_indexed_slices_infer, kernel=_indexed_slices_kernel, no_grad=True, host_reads=True,
   doc="sum the value rows of duplicate indices (sparse gradient compaction)")


# ------------------------------------------------------------------ cast_to_static_shape

def _to_static(shape, pad_end):
    """``x -> x`` zero-padded at the end of each dim to ``shape``; ``pad_end(x, grow)`` pads
    ``x`` by ``grow[d]`` zeros at the end of each dim d (torch or jax.numpy)."""
    def cast_to_static_shape(x):
        if tuple(x.shape) == shape:
            return x
        if any(have > want for have, want in zip(x.shape, shape)):  # (a fed blob may exceed a dim, not the size)
            return pad_end(x.reshape(-1), [numel(shape) - numel(x.shape)]).reshape(shape)
        return pad_end(x, [want - have for have, want in zip(x.shape, shape)])
    return cast_to_static_shape


def _cast_to_static_kernel(k):
    return _to_static(tuple(k.input("input").shape),
                      lambda x, grow: F.pad(x, [p for g in reversed(grow) for p in (0, g)]))


def _cast_to_static_xla(k):
    """As the kernel: every value of a lowered step has a static shape, so only a fed array
    smaller than its blob (a dynamic placeholder) is padded, at trace time."""
    return _to_static(tuple(k.input("input").shape),
                      lambda x, grow: xla_rules.jnp().pad(x, [(0, g) for g in grow]))


def _cast_to_static_shape_onnx(c):
    """The input zero-padded at the end of each dim to its static shape (a no-op unless the
    input is a dynamic blob holding fewer entries, e.g. argwhere's output)."""
    shape = c.output_desc("output").shape
    grow = c.node("Sub", [c.const(int64s(shape)), c.node("Shape", [c.input("input")])])
    pads = c.node("Concat", [c.const(int64s([0] * len(shape))), grow], axis=0)
    c.node("Pad", [c.input("input"), pads], [c.output("output")])


op("cast_to_static_shape", inputs=["input"], outputs=["output"],
   infer=lambda ctx: ctx.set_output("output", ctx.input("input").shape, ctx.input("input").dtype, is_dynamic=False),
   kernel=_cast_to_static_kernel, onnx=_cast_to_static_shape_onnx, xla=_cast_to_static_xla,
   sbp=_sbp.elementwise(p_all=True),  # (the consistent view's blobs are static: the identity)
   grad=lambda g: g.set_grad("input", g.emit("identity", {"in": g.dout("output")})),
   doc="the same blob with a static shape (zero-padded when the run-time blob is smaller)", amp="clear")


# ------------------------------------------------------------------ sync_dynamic_resize (system op)

def _sync_dynamic_resize_infer(ctx):
    conf, x, size = ctx.conf, ctx.input("in"), ctx.input("size")
    if not 0 <= conf.axis < len(x.shape):
        raise OpCheckError(f"sync_dynamic_resize_conf: axis {conf.axis} is out of range for input 'in' of "
                           f"shape {x.shape}")
    if size.dtype not in _INDEX_DTYPES or numel(size.shape) != 1:
        raise OpCheckError(f"sync_dynamic_resize_conf: input 'size' expected an int32/int64 blob of one element, "
                           f"received {size.dtype.name} {size.shape}")
    ctx.set_output("out", x.shape, x.dtype, is_dynamic=True)


def _sync_dynamic_resize_kernel(k):
    axis = k.conf.axis

    def sync_dynamic_resize(x, size):
        n = int(size.reshape(-1)[0])
        if not 0 <= n <= x.shape[axis]:
            raise ValueError(f"sync_dynamic_resize: size {n} is out of range for axis {axis} of a blob of "
                             f"shape {tuple(x.shape)}")
        return x.narrow(axis, 0, n)
    return sync_dynamic_resize


system_op("sync_dynamic_resize_conf", ("in", "size"), infer=_sync_dynamic_resize_infer,
          kernel=_sync_dynamic_resize_kernel, view=True, no_grad=True)


# ------------------------------------------------------------------ dynamic_reshape (system ops)

def _takes(count, shape) -> bool:
    """Whether ``count`` elements fit ``shape`` (dims > 0, at most one -1)."""
    rest = math.prod(d for d in shape if d != -1)
    return count % rest == 0 if -1 in shape else count == rest


def _dynamic_reshape_infer(ctx):
    x, shape = ctx.input("in"), [int(d) for d in ctx.conf.shape.dim]
    if shape.count(-1) > 1 or any(d == 0 or d < -1 for d in shape):
        raise OpCheckError(f"shape {tuple(shape)} expects dims > 0 and at most one -1")
    if not _takes(numel(x.shape), shape):
        raise OpCheckError(f"input 'in' of shape {x.shape} cannot take the shape {tuple(shape)}")
    if -1 in shape:
        shape[shape.index(-1)] = numel(x.shape) // math.prod(d for d in shape if d != -1)
    ctx.set_output("out", tuple(shape), x.dtype, is_dynamic=x.is_dynamic)


def _dynamic_reshape_kernel(k):
    shape = tuple(int(d) for d in k.conf.shape.dim)

    def dynamic_reshape(x):
        if not _takes(x.numel(), shape):
            raise OpRunError(f"op '{k.op_name}' (dynamic_reshape_conf): input 'in' of run-time shape "
                             f"{tuple(x.shape)} cannot take the shape {shape}")
        return x.reshape(shape)
    return dynamic_reshape


def _dynamic_reshape_grad(g):
    """``dynamic_reshape_like_conf`` of the output's gradient to the input (OneFlow's grad)."""
    conf = op_conf_pb2.OperatorConf(name=g.builder.unique_op_name(f"{g.op_name}_grad"))
    c = conf.dynamic_reshape_like_conf
    c.x, c.like, c.y = g.dout("out"), g.input("in"), "y"
    added = g.builder.add_op(conf, location=g.builder.locations.get(g.op_name))
    g.set_grad("in", f"{added.name}/y")


def _dynamic_reshape_like_infer(ctx):
    x, like_ = ctx.input("x"), ctx.input("like")
    if numel(x.shape) != numel(like_.shape):
        raise OpCheckError(f"input 'x' of shape {x.shape} cannot take the shape "
                           f"{like_.shape} of input 'like'")
    ctx.set_output("y", like_.shape, x.dtype, is_dynamic=like_.is_dynamic)


def _shape_elem_cnt_axes(conf, ndim):
    which = conf.WhichOneof("axis_conf")
    if which is None:
        raise OpCheckError("sets none of include_axis_conf, exclude_axis_conf, range_axis_conf")
    if which == "range_axis_conf":
        r = conf.range_axis_conf
        listed = [r.begin_axis, r.end_axis]
    else:
        listed = list(getattr(conf, which).axis)
    if any(not -ndim <= a < ndim for a in listed) and ndim:
        raise OpCheckError(f"{which} axes {listed} are out of range for input 'x' of rank {ndim}")
    listed = [a % ndim if ndim else 0 for a in listed]
    if which == "range_axis_conf":
        return list(range(listed[0], listed[1] + 1))
    return listed if which == "include_axis_conf" else [a for a in range(ndim) if a not in listed]


def _shape_elem_cnt_infer(ctx):
    x, conf = ctx.input("x"), ctx.conf
    _shape_elem_cnt_axes(conf, len(x.shape))
    dtype = _dt.from_proto(conf.data_type)
    if dtype not in (_dt.int32, _dt.int64, _dt.float32, _dt.float64):
        raise OpCheckError(f"data_type expects int32, int64, float32 or float64, received {dtype.name}")
    ctx.set_output("y", (1,), dtype)


def _shape_elem_cnt_kernel(k):
    dtype = _dt.from_proto(k.conf.data_type).torch

    def shape_elem_cnt(x):  # (a fill from the host's shape: nothing is read back)
        count = math.prod(x.shape[a] for a in _shape_elem_cnt_axes(k.conf, x.dim()))
        return torch.full((1,), count, dtype=dtype, device=x.device)
    return shape_elem_cnt


def _shape_elem_cnt_xla(k):
    """The count of the traced (fixed) shape, a constant of the lowered step."""
    dtype = _dt.from_proto(k.conf.data_type).np
    return lambda x: xla_rules.jnp().full((1,), math.prod(x.shape[a] for a in _shape_elem_cnt_axes(k.conf, x.ndim)),
                                          dtype=dtype)


# (the lowered step fixes every shape: XLA's reshapes resolve the -1 from the traced shape)
system_op("shape_elem_cnt_conf", ("x",), ("y",), infer=_shape_elem_cnt_infer, kernel=_shape_elem_cnt_kernel,
          xla=_shape_elem_cnt_xla, no_grad=True)
system_op("dynamic_reshape_conf", ("in",), infer=_dynamic_reshape_infer, kernel=_dynamic_reshape_kernel,
          xla=lambda k: (lambda x, s=tuple(int(d) for d in k.conf.shape.dim): x.reshape(s)),
          grad=_dynamic_reshape_grad, view=True)
system_op("dynamic_reshape_like_conf", ("x", "like"), ("y",), infer=_dynamic_reshape_like_infer,
          kernel=lambda k: (lambda x, like: x.reshape(like.shape)), xla=lambda k: (lambda x, like: x.reshape(like.shape)),
          view=True, no_grad=True)


# ------------------------------------------------------------------ broadcast_to_compatible_with (system op)

def _broadcast_compatible_infer(ctx):
    x = ctx.input("x")
    ins = [x] + ctx.inputs("compatible")
    shape = x.shape
    for i, c in enumerate(ins[1:]):
        shape = broadcast_shape(shape, c.shape, f"input 'x' and input 'compatible' {i}")
    ctx.set_output("y", shape, x.dtype, is_dynamic=any(d.is_dynamic for d in ins))


def _broadcast_compatible_kernel(k):
    return lambda x, compatible: x.expand(torch.broadcast_shapes(x.shape, *(c.shape for c in compatible)))


def _broadcast_compatible_grad(g):
    if g.needs("x"):
        g.set_grad("x", reduce_to(g, g.dout("y"), g.input("x"), g.op_name))


system_op("broadcast_to_compatible_with_conf", ("x", "compatible*"), ("y",), infer=_broadcast_compatible_infer,
          kernel=_broadcast_compatible_kernel, grad=_broadcast_compatible_grad, view=True)
