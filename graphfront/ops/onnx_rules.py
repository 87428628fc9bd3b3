"""Shared builders of ONNX converters (the ``onnx=`` rule of an op, see the registry).

A converter is ``convert(c)`` with ``c`` an :class:`graphfront.onnx.OnnxCtx`; these
helpers build the common shapes of converter, the way ``unary_family`` builds kernels.
They import nothing from the ``onnx`` package: ``c.node`` builds the nodes.
"""
from __future__ import annotations

import numpy as np


def same(onnx_type, **attrs):
    """One ONNX node of ``onnx_type``: the op's inputs in declaration order (absent optional
    inputs dropped, repeated inputs flattened) to its outputs in declaration order."""
    def convert(c):
        c.node(onnx_type, c.all_inputs(), c.all_outputs(), **attrs)
    return convert


def scalar(onnx_type):
    """``scalar_*`` ops (input ``in``, attr operand): ``onnx_type(in, const)``."""
    def convert(c):
        s = c.attr("int_operand") if c.attr("has_int_operand") else c.attr("float_operand")
        c.node(onnx_type, [c.input("in"), c.const(np.array(s, dtype=c.input_desc("in").dtype.np))],
               [c.output("out")])
    return convert


def reshape_to_output(in_arg, out_arg):
    """Ops that only change the shape (static shapes): ``Reshape`` to the inferred output shape."""
    def convert(c):
        shape = c.const(np.array(c.output_desc(out_arg).shape, dtype=np.int64))
        c.node("Reshape", [c.input(in_arg), shape], [c.output(out_arg)])
    return convert


def reduce(onnx_type):
    """``reduce_*`` ops (``input_tensor`` -> ``output_tensor``, attrs axis, keepdims).

    Axes are an input of ``ReduceSum`` from opset 13 and of the others from opset 18,
    an attribute before."""
    def convert(c):
        ndim = len(c.input_desc("input_tensor").shape)
        axes = sorted({a % ndim for a in c.attr("axis")})
        keep = int(c.attr("keepdims"))
        x = c.input("input_tensor")
        if c.opset >= (13 if onnx_type == "ReduceSum" else 18):
            c.node(onnx_type, [x, c.const(np.array(axes, dtype=np.int64))], [c.output("output_tensor")],
                   keepdims=keep)
        else:
            c.node(onnx_type, [x], [c.output("output_tensor")], axes=axes, keepdims=keep)
    return convert


# ------------------------------------------------------------------ helpers

_INT64_MIN = np.iinfo(np.int64).min


def _np(desc):
    return np.dtype(desc.dtype.np)


def _ints(values):
    return np.array(list(values), dtype=np.int64)


def _nonzero(c, name):
    """A bool tensor: ``name != 0`` (the condition convention of where / masked_fill)."""
    return c.node("Cast", [name], to=9)  # TensorProto.BOOL: nonzero -> true


def _slice(c, x, out, starts, ends, steps, axes):
    c.node("Slice", [x, c.const(_ints(starts)), c.const(_ints(ends)), c.const(_ints(axes)), c.const(_ints(steps))],
           [out])


def _ranges_slice(c, x, out, ranges):
    """``Slice`` selecting one Python ``range`` per dim (the ranges a slice op resolved)."""
    starts, ends, steps = [], [], []
    for r in ranges:
        if len(r) == 0:
            starts.append(0), ends.append(0), steps.append(1)
        else:
            starts.append(r.start), steps.append(r.step)
            ends.append(r.stop if r.stop >= 0 else _INT64_MIN)   # a negative step through index 0
    _slice(c, x, out, starts, ends, steps, range(len(ranges)))


# ------------------------------------------------------------------ shape and identity ops

def identity_each(c):
    """``Identity`` from each input to the output of the same position (tuple_identity)."""
    for i, o in zip(c.all_inputs(), c.all_outputs()):
        c.node("Identity", [i], [o])


def constant_output(value_of):
    """Ops whose output does not depend on input values: ``value_of(c)`` (a numpy array
    of the output's shape and dtype) as an initializer, copied to the output."""
    def convert(c):
        out = c.all_outputs()[0]
        c.node("Identity", [c.const(value_of(c))], [out])
    return convert


def full_like_output(value, out_arg):
    """zero_like / ones_like: ``value`` in the output's shape and dtype."""
    def value_of(c):
        d = c.output_desc(out_arg)
        return np.full(d.shape, value, dtype=_np(d))
    return constant_output(value_of)


def cast_to_output(in_arg, out_arg):
    """``Cast`` to the output's inferred dtype (cast_like)."""
    return lambda c: c.node("Cast", [c.input(in_arg)], [c.output(out_arg)],
                            to=c.dtype_code(c.output_desc(out_arg).dtype))


def expand_to_output(in_arg, out_arg, keep_shape=None):
    """``Expand`` to the output's shape; ``keep_shape(c)``, when given, first reshapes the input."""
    def convert(c):
        x = c.input(in_arg)
        if keep_shape is not None:
            x = c.node("Reshape", [x, c.const(_ints(keep_shape(c)))])
        c.node("Expand", [x, c.const(_ints(c.output_desc(out_arg).shape))], [c.output(out_arg)])
    return convert


def broadcast_like_keep_shape(c):
    """broadcast_like: ``like``'s shape with 1 on ``broadcast_axes`` (``x`` reshaped to it)."""
    shape = c.input_desc("like").shape
    axes = {a % len(shape) for a in c.attr("broadcast_axes")}
    return [1 if i in axes else s for i, s in enumerate(shape)]


def slice_op(c):
    """slice: start/stop/step per dim with Python's semantics, resolved to ranges as the kernel does."""
    from graphfront.ops.array_ops import slice_ranges
    ranges = slice_ranges(c.input_desc("x").shape, c.attr("start"), c.attr("stop"), c.attr("step"))
    _ranges_slice(c, c.input("x"), c.output("y"), ranges)


def narrow(c):
    shape = c.input_desc("in").shape
    dim = c.attr("dim") % len(shape)
    start = c.attr("start") % max(shape[dim], 1)
    _slice(c, c.input("in"), c.output("out"), [start], [start + c.attr("length")], [1], [dim])


def flip(c):
    n = len(c.input_desc("x").shape)
    dims = sorted({d % n for d in c.attr("dims")})
    if not dims:
        c.node("Identity", [c.input("x")], [c.output("y")])
        return
    _slice(c, c.input("x"), c.output("y"), [-1] * len(dims), [_INT64_MIN] * len(dims), [-1] * len(dims), dims)


def split_like(c):
    axis = c.attr("axis") % len(c.input_desc("in").shape)
    outs = c.all_outputs()
    sizes = [c.output_desc("out", i).shape[axis] for i in range(len(outs))]
    c.node("Split", [c.input("in"), c.const(_ints(sizes))], outs, axis=axis)


def _pad_node(c, x, out, before, after, mode="constant", value=None):
    ins = [x, c.const(_ints(list(before) + list(after)))]
    if value is not None:
        ins.append(c.const(np.array(value, dtype=_np(c.input_desc("x")))))
    c.node("Pad", ins, [out], mode=mode)


def _pad_value(c, floating, integral):
    return c.attr(floating) if c.input_desc("x").dtype.is_floating_point else c.attr(integral)


def pad(c):
    """pad: per-dim padding_before / padding_after, constant value of the input's kind."""
    _pad_node(c, c.input("x"), c.output("y"), c.attr("padding_before"), c.attr("padding_after"),
              value=_pad_value(c, "floating_constant_value", "integral_constant_value"))


def padnd(mode):
    """constant_padNd / reflection_pad2d / replication_pad2d: ``padding`` in
    torch.nn.functional.pad's order (last dim first, (before, after) pairs);
    ONNX Pad modes ``constant`` / ``reflect`` / ``edge``."""
    def convert(c):
        n = len(c.input_desc("x").shape)
        p = list(c.attr("padding"))
        k = len(p) // 2
        before = [0] * (n - k) + [p[2 * (k - 1 - i)] for i in range(k)]
        after = [0] * (n - k) + [p[2 * (k - 1 - i) + 1] for i in range(k)]
        value = _pad_value(c, "floating_value", "integral_value") if mode == "constant" else None
        _pad_node(c, c.input("x"), c.output("y"), before, after, mode=mode, value=value)
    return convert


# ------------------------------------------------------------------ gather family

def _valid_ids(c, idx, size):
    """``(in-range mask, ids with out-of-range entries set to 0)`` of an index tensor, as int64."""
    ids = c.node("Cast", [idx], to=7)  # INT64
    valid = c.node("And", [c.node("GreaterOrEqual", [ids, c.const(np.int64(0))]),
                           c.node("Less", [ids, c.const(np.asarray(size, dtype=np.int64))])])
    return valid, c.node("Where", [valid, ids, c.const(np.int64(0))])


def _zero_invalid(c, out_value, valid, valid_shape, out_desc, out):
    """``Where(valid reshaped to valid_shape, value, 0)``: zeros where an index was out of range."""
    mask = c.node("Reshape", [valid, c.const(_ints(valid_shape))])
    c.node("Where", [mask, out_value, c.const(np.zeros((), dtype=_np(out_desc)))], [out])


def gather(c):
    """gather: out-of-range indices give zero slices (as the kernel), not an error."""
    shape = c.input_desc("in").shape
    axis = c.attr("axis") % len(shape)
    idx_shape = c.input_desc("indices").shape
    valid, ids = _valid_ids(c, c.input("indices"), shape[axis])
    g = c.node("Gather", [c.input("in"), ids], axis=axis)
    _zero_invalid(c, g, valid, [1] * axis + list(idx_shape) + [1] * (len(shape) - axis - 1),
                  c.output_desc("out"), c.output("out"))


def batch_gather(c):
    """batch_gather: ``GatherND`` with the leading dims of ``indices`` as batch dims."""
    shape, idx_shape = c.input_desc("in").shape, c.input_desc("indices").shape
    b = len(idx_shape) - 1
    valid, ids = _valid_ids(c, c.input("indices"), shape[b])
    ids = c.node("Unsqueeze", [ids, c.const(_ints([-1]))])
    g = c.node("GatherND", [c.input("in"), ids], batch_dims=b)
    _zero_invalid(c, g, valid, list(idx_shape) + [1] * (len(shape) - b - 1), c.output_desc("out"), c.output("out"))


def gather_nd(c):
    """gather_nd: rows whose index tuple is out of range give zeros (as the kernel)."""
    shape, idx_shape = c.input_desc("params").shape, c.input_desc("indices").shape
    k = idx_shape[-1]
    valid, ids = _valid_ids(c, c.input("indices"), np.array(shape[:k], dtype=np.int64))
    # a row is valid when all its k entries are: min over the last axis of the int mask
    as_int = c.node("Cast", [valid], to=6)  # INT32
    if c.opset >= 18:
        row = c.node("ReduceMin", [as_int, c.const(_ints([-1]))], keepdims=0)
    else:
        row = c.node("ReduceMin", [as_int], axes=[-1], keepdims=0)
    row = c.node("Cast", [row], to=9)
    g = c.node("GatherND", [c.input("params"), ids])
    _zero_invalid(c, g, row, list(idx_shape[:-1]) + [1] * (len(shape) - k), c.output_desc("out"), c.output("out"))


def one_hot(c):
    """one_hot: ``on`` where index == position along the new last axis, ``off`` elsewhere
    (all ``off`` for out-of-range indices, as the kernel)."""
    d = c.output_desc("out")
    floating = d.dtype.is_floating_point
    on = c.attr("floating_on_value") if floating else c.attr("integer_on_value")
    off = c.attr("floating_off_value") if floating else c.attr("integer_off_value")
    ids = c.node("Unsqueeze", [c.node("Cast", [c.input("indices")], to=7), c.const(_ints([-1]))])
    hot = c.node("Equal", [ids, c.const(np.arange(c.attr("depth"), dtype=np.int64))])
    c.node("Where", [hot, c.const(np.array(on, dtype=_np(d))), c.const(np.array(off, dtype=_np(d)))],
           [c.output("out")])


# ------------------------------------------------------------------ where family

def _operand(c, prefix, dtype):
    v = c.attr(f"{prefix}int_operand") if c.attr(f"has_{prefix}int_operand") else c.attr(f"{prefix}float_operand")
    return np.array(v if dtype.is_floating_point else int(v), dtype=np.dtype(dtype.np))


def where(c):
    c.node("Where", [_nonzero(c, c.input("condition")), c.input("x"), c.input("y")], [c.output("out")])


def where_scalar(scalar_is_x):
    def convert(c):
        blob = "y" if scalar_is_x else "x"
        s = c.const(_operand(c, "", c.input_desc(blob).dtype))
        t = c.input(blob)
        c.node("Where", [_nonzero(c, c.input("condition"))] + ([s, t] if scalar_is_x else [t, s]),
               [c.output("out")])
    return convert


def where_scalar_xy(c):
    dtype = c.output_desc("out").dtype
    c.node("Where", [_nonzero(c, c.input("condition")), c.const(_operand(c, "x_", dtype)),
                     c.const(_operand(c, "y_", dtype))], [c.output("out")])


def masked_fill(c):
    s = c.const(_operand(c, "", c.input_desc("x").dtype))
    c.node("Where", [_nonzero(c, c.input("mask")), s, c.input("x")], [c.output("out")])


def triangle(lower):
    """tril / triu: a constant mask of the last two dims; tril's fill value above it, 0 below triu's."""
    def convert(c):
        d = c.input_desc("in")
        rows, cols = d.shape[-2:]
        mask = (np.tril if lower else np.triu)(np.ones((rows, cols), dtype=bool), c.attr("diagonal"))
        fill = 0
        if lower:
            fill = c.attr("floating_fill_value") if c.attr("is_floating_fill_value") else c.attr("integer_fill_value")
            fill = fill if d.dtype.is_floating_point else int(fill)
        c.node("Where", [c.const(mask), c.input("in"), c.const(np.array(fill, dtype=_np(d)))], [c.output("out")])
    return convert


# ------------------------------------------------------------------ argmax, top_k, sort

def argmax(c):
    """argmax over the last axis, the first of equal maxima (int64)."""
    c.node("ArgMax", [c.input("in")], [c.output("out")], axis=-1, keepdims=0, select_last_index=0)


def _top_k(c, k, largest, values):
    """``TopK`` over the last axis, sorted; equal values keep their index order (a stable sort)."""
    outs = [c.output("out"), c.tmp("indices")] if values else [c.tmp("values"), c.tmp("indices")]
    c.node("TopK", [c.input("in"), c.const(_ints([k]))], outs, axis=-1, largest=int(largest), sorted=1)
    if not values:
        c.node("Cast", [outs[1]], [c.output("out")], to=6)  # INT32


def sort(values):
    """sort (values) / arg_sort (int32 indices): a stable sort of the last axis as TopK of all entries."""
    def convert(c):
        _top_k(c, c.input_desc("in").shape[-1], c.attr("direction") == "DESCENDING", values)
    return convert


def folded_constant(c):
    from graphfront.ops.fused_ops import decode_constant
    value = decode_constant(c.attr("data"), c.attr("shape"), c.attr("dtype")).numpy()
    c.node("Identity", [c.const(value)], [c.output("out")])


def constant(c):
    d = c.output_desc("out")
    value = c.attr("floating_value") if c.attr("is_floating_value") else c.attr("integer_value")
    c.node("Identity", [c.const(np.full(d.shape, value, dtype=_np(d)))], [c.output("out")])
