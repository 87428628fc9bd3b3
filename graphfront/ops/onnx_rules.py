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
    """``reduce_*`` ops (``input_tensor`` -> ``output_tensor``, attrs axis, keepdims)."""
    def convert(c):
        ndim = len(c.input_desc("input_tensor").shape)
        axes = sorted({a % ndim for a in c.attr("axis")})
        _reduce_node(c, onnx_type, c.input("input_tensor"), axes, int(c.attr("keepdims")), c.output("output_tensor"))
    return convert


# ------------------------------------------------------------------ helpers

_INT64_MIN = np.iinfo(np.int64).min
# ONNX TensorProto element types (this module does not import the onnx package)
_INT8, _INT32, _INT64, _BOOL = 3, 6, 7, 9


def _np(desc):
    return np.dtype(desc.dtype.np)


def _ints(values):
    return np.array(list(values), dtype=np.int64)


def _nonzero(c, name):
    """A bool tensor: ``name != 0`` (the condition convention of where / masked_fill)."""
    return c.node("Cast", [name], to=_BOOL)  # nonzero -> true


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


def slice_update(c):
    """slice_update: ``x`` with the slice (as ``slice`` resolves it) replaced by ``update``:
    ScatterND at the constant coordinates of the slice's elements."""
    from graphfront.ops.array_ops import slice_ranges
    ranges = slice_ranges(c.input_desc("x").shape, c.attr("start"), c.attr("stop"), c.attr("step"))
    grid = np.stack(np.meshgrid(*[np.array(r, dtype=np.int64) for r in ranges], indexing="ij"), axis=-1)
    c.node("ScatterND", [c.input("x"), c.const(grid), c.input("update")], [c.output("y")])


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
    ids = c.node("Cast", [idx], to=_INT64)
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
    row = _reduce_node(c, "ReduceMin", c.node("Cast", [valid], to=_INT32), [-1], 0)
    row = c.node("Cast", [row], to=_BOOL)
    g = c.node("GatherND", [c.input("params"), ids])
    _zero_invalid(c, g, row, list(idx_shape[:-1]) + [1] * (len(shape) - k), c.output_desc("out"), c.output("out"))


def one_hot(c):
    """one_hot: ``on`` where index == position along the new last axis, ``off`` elsewhere
    (all ``off`` for out-of-range indices, as the kernel)."""
    d = c.output_desc("out")
    floating = d.dtype.is_floating_point
    on = c.attr("floating_on_value") if floating else c.attr("integer_on_value")
    off = c.attr("floating_off_value") if floating else c.attr("integer_off_value")
    ids = c.node("Unsqueeze", [c.node("Cast", [c.input("indices")], to=_INT64), c.const(_ints([-1]))])
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
        c.node("Cast", [outs[1]], [c.output("out")], to=_INT32)


def sort(values):
    """sort (values) / arg_sort (int32 indices): a stable sort of the last axis as TopK of all entries."""
    def convert(c):
        _top_k(c, c.input_desc("in").shape[-1], c.attr("direction") == "DESCENDING", values)
    return convert


def _folded_value(c):
    from graphfront.ops.fused_ops import decode_constant
    return decode_constant(c.attr("data"), c.attr("shape"), c.attr("dtype")).numpy()


def _constant_value(c):
    d = c.output_desc("out")
    value = c.attr("floating_value") if c.attr("is_floating_value") else c.attr("integer_value")
    return np.full(d.shape, value, dtype=_np(d))


folded_constant = constant_output(_folded_value)
constant = constant_output(_constant_value)


# ------------------------------------------------------------------ elementwise compositions
#
# ``fn(c, x, out, desc)`` writes ``out`` from the ONNX value ``x`` of desc ``desc``; the
# last node of each writes the op's output. Where ONNX has no operator (or only in a later
# opset than the export's), the kernel's formula is spelled out with the ONNX operators.

def _k(c, value, desc):
    """A scalar constant of ``desc``'s dtype."""
    return c.const(np.array(value, dtype=_np(desc)))


def unary(fn, in_arg="x", out_arg="y"):
    """A converter applying ``fn(c, x, out, desc)`` to input ``in_arg``."""
    return lambda c: fn(c, c.input(in_arg), c.output(out_arg), c.input_desc(in_arg))


def rsqrt(c, x, out, d):
    c.node("Reciprocal", [c.node("Sqrt", [x])], [out])


def square(c, x, out, d):
    c.node("Mul", [x, x], [out])


def log1p(c, x, out, d):
    c.node("Log", [c.node("Add", [x, _k(c, 1, d)])], [out])


def expm1(c, x, out, d):
    c.node("Sub", [c.node("Exp", [x]), _k(c, 1, d)], [out])


def log2(c, x, out, d):
    c.node("Div", [c.node("Log", [x]), _k(c, np.log(2.0), d)], [out])


def erfc(c, x, out, d):
    c.node("Sub", [_k(c, 1, d), c.node("Erf", [x])], [out])


def log_sigmoid(c, x, out, d):
    """log(sigmoid(x)) = -softplus(-x)."""
    c.node("Neg", [c.node("Softplus", [c.node("Neg", [x])])], [out])


def reciprocal_no_nan(c, x, out, d):
    zero = _k(c, 0, d)
    c.node("Where", [c.node("Equal", [x, zero]), zero, c.node("Reciprocal", [x])], [out])


def gelu(c, x, out, d):
    """The exact erf form: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    cdf = c.node("Add", [_k(c, 1, d), c.node("Erf", [c.node("Mul", [x, _k(c, np.sqrt(0.5), d)])])])
    c.node("Mul", [c.node("Mul", [x, _k(c, 0.5, d)]), cdf], [out])


def silu(c, x, out, d):
    c.node("Mul", [x, c.node("Sigmoid", [x])], [out])


def mish(c, x, out, d):
    if c.opset >= 18:
        c.node("Mish", [x], [out])
    else:
        c.node("Mul", [x, c.node("Tanh", [c.node("Softplus", [x])])], [out])


def _relu6_plus_3(c, x, d):
    """min(max(x + 3, 0), 6), the core of hardsigmoid / hardswish in the kernels' order of operations."""
    return c.node("Clip", [c.node("Add", [x, _k(c, 3, d)]), _k(c, 0, d), _k(c, 6, d)])


def hardsigmoid(c, x, out, d):
    """relu6(x + 3) / 6."""
    c.node("Div", [_relu6_plus_3(c, x, d), _k(c, 6, d)], [out])


def hardswish(c, x, out, d):
    """x * relu6(x + 3) / 6."""
    c.node("Div", [c.node("Mul", [x, _relu6_plus_3(c, x, d)]), _k(c, 6, d)], [out])


def hardtanh(c, x, out, d):
    c.node("Clip", [x, _k(c, c.attr("min_val"), d), _k(c, c.attr("max_val"), d)], [out])


def leaky_relu(c, x, out, d):
    """x if x > 0 else alpha * x (spelled out: onnxruntime's LeakyRelu is float-only)."""
    c.node("Where", [c.node("Greater", [x, _k(c, 0, d)]), x, c.node("Mul", [x, _k(c, c.attr("alpha"), d)])], [out])


def softsign(c, x, out, d):
    """x / (1 + |x|) (spelled out: onnxruntime's Softsign is float-only)."""
    c.node("Div", [x, c.node("Add", [_k(c, 1, d), c.node("Abs", [x])])], [out])


def _exp_branch(c, x, d, alpha, inner_scale):
    """min(0, alpha * (exp(x * inner_scale) - 1)) (the negative branch of elu / celu / selu)."""
    e = c.node("Sub", [c.node("Exp", [c.node("Mul", [x, _k(c, inner_scale, d)])]), _k(c, 1, d)])
    return c.node("Min", [_k(c, 0, d), c.node("Mul", [e, _k(c, alpha, d)])])


def _elu_family(c, x, out, d, alpha, inner_scale=1.0, scale=None):
    """max(0, x) + min(0, alpha * (exp(x * inner_scale) - 1)), times ``scale`` if given."""
    y = c.node("Add", [c.node("Max", [_k(c, 0, d), x]), _exp_branch(c, x, d, alpha, inner_scale)],
               None if scale is not None else [out])
    if scale is not None:
        c.node("Mul", [y, _k(c, scale, d)], [out])


def elu(c, x, out, d):
    _elu_family(c, x, out, d, c.attr("alpha"))


def celu(c, x, out, d):
    _elu_family(c, x, out, d, c.attr("alpha"), 1.0 / c.attr("alpha"))


def selu(c, x, out, d):
    from graphfront.ops.activation_ops import SELU_ALPHA, SELU_SCALE
    _elu_family(c, x, out, d, SELU_ALPHA, scale=SELU_SCALE)


def _prelu(channel_view):
    def convert(c):
        x, d = c.input("x"), c.input_desc("x")
        alpha = c.input("alpha")
        if channel_view:   # alpha (C,) along dim 1 of x, or one value
            n = len(d.shape)
            shape = [] if n < 2 or int(np.prod(c.input_desc("alpha").shape)) == 1 else [1, -1] + [1] * (n - 2)
            alpha = c.node("Reshape", [alpha, c.const(_ints(shape))])
        c.node("Where", [c.node("Greater", [x, _k(c, 0, d)]), x, c.node("Mul", [x, alpha])], [c.output("y")])
    return convert


prelu = _prelu(True)
tf_prelu = _prelu(False)


def bias_add_then(onnx_type):
    """fused_bias_add_relu / fused_bias_add_gelu: ``b`` along attr axis of ``a``, then the activation."""
    def convert(c):
        d = c.input_desc("a")
        ndim, axis = len(d.shape), c.attr("axis")
        shape = [1] * ndim
        shape[axis] = -1
        s = c.node("Add", [c.input("a"), c.node("Reshape", [c.input("b"), c.const(_ints(shape))])])
        if onnx_type == "Gelu":
            gelu(c, s, c.output("out"), d)
        else:
            c.node(onnx_type, [s], [c.output("out")])
    return convert


def fused_matmul_bias(c):
    """x @ weight^T + bias (+ _add_to_output)."""
    add_to = c.input("_add_to_output")
    y = c.node("Gemm", [c.input("x"), c.input("weight"), c.input("bias")], None if add_to else [c.output("out")],
               transB=1)
    if add_to:
        c.node("Add", [y, add_to], [c.output("out")])


def fused_scalar_mul_add(c):
    d = c.input_desc("in")
    c.node("Add", [c.node("Mul", [c.input("in"), _k(c, c.attr("scale"), d)]), _k(c, c.attr("shift"), d)],
           [c.output("out")])


# ------------------------------------------------------------------ binary ops

def binary(fn, out_arg="z"):
    """A converter applying ``fn(c, x, y, out, desc of x)``."""
    return lambda c: fn(c, c.input("x"), c.input("y"), c.output(out_arg), c.input_desc("x"))


def floor_div(c, x, y, out, d):
    """floor(x / y); for integers the truncating ``Div`` moved down by one where the
    remainder's sign differs from y's."""
    if d.dtype.is_floating_point:
        c.node("Floor", [c.node("Div", [x, y])], [out])
        return
    q = c.node("Div", [x, y])
    r = c.node("Sub", [x, c.node("Mul", [q, y])])
    zero = _k(c, 0, d)
    off = c.node("And", [c.node("Not", [c.node("Equal", [r, zero])]),
                         c.node("Xor", [c.node("Less", [r, zero]), c.node("Less", [y, zero])])])
    c.node("Sub", [q, c.node("Cast", [off], to=c.dtype_code(d.dtype))], [out])


def xdivy(c, x, y, out, d):
    zero = _k(c, 0, d)
    c.node("Where", [c.node("Equal", [x, zero]), zero, c.node("Div", [x, y])], [out])


def xlogy(c, x, y, out, d):
    zero = _k(c, 0, d)
    c.node("Where", [c.node("Equal", [x, zero]), zero, c.node("Mul", [x, c.node("Log", [y])])], [out])


def atan2(c, x, y, out, d):
    """atan2(x, y), the angle of the point (y, x): atan(x / y) moved by +-pi when y < 0,
    +-pi/2 (0 at the origin) when y == 0."""
    zero = _k(c, 0, d)
    base = c.node("Atan", [c.node("Div", [x, y])])
    # y < 0: + pi where x >= 0, - pi where x < 0
    shift = c.node("Where", [c.node("Less", [x, zero]), _k(c, -np.pi, d), _k(c, np.pi, d)])
    left = c.node("Add", [base, shift])
    on_axis = c.node("Mul", [c.node("Sign", [x]), _k(c, np.pi / 2, d)])
    y_neg, y_zero = c.node("Less", [y, zero]), c.node("Equal", [y, zero])
    c.node("Where", [y_zero, on_axis, c.node("Where", [y_neg, left, base])], [out])


_COMPARE = {"equal": "Equal", "greater": "Greater", "greater_equal": "GreaterOrEqual", "less": "Less",
            "less_equal": "LessOrEqual"}


def _compare(c, kind, x, y, out):
    """x <kind> y as int8 1/0; the logical kinds compare ``x != 0`` with ``y != 0``."""
    if kind in ("and", "or", "xor"):
        z = c.node(kind.capitalize(), [_nonzero(c, x), _nonzero(c, y)])
    elif kind == "not_equal":
        z = c.node("Not", [c.node("Equal", [x, y])])
    else:
        z = c.node(_COMPARE[kind], [x, y])
    c.node("Cast", [z], [out], to=_INT8)


def compare(kind):
    """broadcast_<comparison> / broadcast_logical_<and|or|xor>: int8 1 where true."""
    return lambda c: _compare(c, kind, c.input("x"), c.input("y"), c.output("z"))


def _scalar_operand(c):
    """The scalar of a ``scalar_*`` op in the input's dtype (a float operand truncated for integer inputs)."""
    d = c.input_desc("in")
    s = c.attr("int_operand") if c.attr("has_int_operand") else c.attr("float_operand")
    return _k(c, s if d.dtype.is_floating_point else int(s), d)


def scalar_compare(kind):
    """scalar_logical_<kind>: ``in <kind> operand`` as int8."""
    return lambda c: _compare(c, kind, c.input("in"), _scalar_operand(c), c.output("out"))


def scalar_binary(fn):
    """scalar_pow / scalar_floordiv: ``fn(c, in, operand, out, desc)``."""
    return lambda c: fn(c, c.input("in"), _scalar_operand(c), c.output("out"), c.input_desc("in"))


def power(c, x, y, out, d):
    c.node("Pow", [x, y], [out])


def clip(c):
    """clip_by_scalar(_min/_max): bounds of the input's kind (floating_* or integral_*)."""
    d = c.input_desc("x")
    prefix = "floating_" if d.dtype.is_floating_point else "integral_"
    bounds = [_k(c, c.attrs[prefix + b], d) if prefix + b in c.attrs else None for b in ("min", "max")]
    c.node("Clip", [c.input("x")] + bounds, [c.output("y")])


# ------------------------------------------------------------------ reductions

def _reduce_node(c, onnx_type, x, axes, keep, out=None):
    """One ``Reduce*`` node over ``axes`` (an input from opset 18, or 13 for ReduceSum; an attr before)."""
    if c.opset >= (13 if onnx_type == "ReduceSum" else 18):
        return c.node(onnx_type, [x, c.const(_ints(axes))], None if out is None else [out], keepdims=keep)
    return c.node(onnx_type, [x], None if out is None else [out], axes=list(axes), keepdims=keep)


def reduce_logical(onnx_type):
    """reduce_any (ReduceMax) / reduce_all (ReduceMin) of ``x != 0``, bool."""
    def convert(c):
        ndim = len(c.input_desc("input_tensor").shape)
        axes = sorted({a % ndim for a in c.attr("axis")})
        flags = c.node("Cast", [_nonzero(c, c.input("input_tensor"))], to=_INT32)
        r = _reduce_node(c, onnx_type, flags, axes, int(c.attr("keepdims")))
        c.node("Cast", [r], [c.output("output_tensor")], to=_BOOL)
    return convert


def square_sum(c):
    """sum(x * x) over all elements, shape (1,)."""
    x = c.input("x")
    s = c.node("ReduceSum", [c.node("Mul", [x, x])], keepdims=0)
    c.node("Reshape", [s, c.const(_ints([1]))], [c.output("y")])


def l2_normalize(c):
    """y = x / sqrt(max(sum(x^2, axis), epsilon)); square_x_sum = sum(x^2, axis) (kept dims)."""
    x, d = c.input("x"), c.input_desc("x")
    axis = c.attr("axis") % len(d.shape)
    ss = _reduce_node(c, "ReduceSum", c.node("Mul", [x, x]), [axis], 1, c.output("square_x_sum"))
    inv = c.node("Reciprocal", [c.node("Sqrt", [c.node("Max", [ss, _k(c, c.attr("epsilon"), d)])])])
    c.node("Mul", [x, inv], [c.output("y")])


# ------------------------------------------------------------------ layer_norm, torch-style pools, upsample, deconv

def layer_norm(c):
    """(x - mean) / sqrt(biased var + epsilon) over the axes from begin_norm_axis, then
    ``* gamma`` and ``+ beta`` when given; ``mean`` / ``inv_variance`` shaped x.shape[:begin_norm_axis]."""
    x, d = c.input("x"), c.input_desc("x")
    n = len(d.shape)
    bna = c.attr("begin_norm_axis") % n
    axes = list(range(bna, n))
    mean = _reduce_node(c, "ReduceMean", x, axes, 1)
    centered = c.node("Sub", [x, mean])
    var = _reduce_node(c, "ReduceMean", c.node("Mul", [centered, centered]), axes, 1)
    inv = c.node("Reciprocal", [c.node("Sqrt", [c.node("Add", [var, _k(c, c.attr("epsilon"), d)])])])
    gamma, beta = c.input("gamma"), c.input("beta")
    normalized = c.node("Mul", [centered, inv], [c.output("normalized")] if c.output("normalized") else None)
    y = normalized
    if gamma:
        y = c.node("Mul", [y, gamma], None if beta else [c.output("y")])
    if beta:
        y = c.node("Add", [y, beta], [c.output("y")])
    if not (gamma or beta):
        c.node("Identity", [y], [c.output("y")])
    stat_shape = c.const(_ints(d.shape[:bna]))
    for stat, arg in ((mean, "mean"), (inv, "inv_variance")):
        if c.output(arg):
            c.node("Reshape", [stat, stat_shape], [c.output(arg)])


def _to_channels_first(c, x, n):
    return c.node("Transpose", [x], perm=[0, n + 1] + list(range(1, n + 1)))


def _channels_first_io(c, n, in_arg, out_args, build):
    """Run ``build(c, x, outs)`` on channels_first data; for ``channels_last`` the input is
    transposed to channels_first and each output back."""
    x = c.input(in_arg)
    outs = [c.output(a) for a in out_args]
    if c.attr("data_format") == "channels_first":
        build(c, x, outs)
        return
    tmp = [c.tmp(f"{a}_channels_first") for a in out_args]
    build(c, _to_channels_first(c, x, n), tmp)
    for t, o in zip(tmp, outs):
        c.node("Transpose", [t], [o], perm=[0] + list(range(2, n + 2)) + [1])


def _pool_geometry(c, n, dilation):
    """(input spatial sizes, output spatial sizes, begin pads, end pads) of a PyTorch-style pool.

    ceil_mode is spelled as extra end padding up to the last window PyTorch keeps (one that
    starts inside the input or its begin padding), so ONNX's own ceil rule is not used."""
    d, out = c.input_desc("x"), c.output_desc("y")
    first = c.attr("data_format") == "channels_first"
    size, osize = (d.shape[2:], out.shape[2:]) if first else (d.shape[1:-1], out.shape[1:-1])
    k, s, p = c.attr("kernel_size"), c.attr("stride"), list(c.attr("padding"))
    end = [p[i] + max(0, (osize[i] - 1) * s[i] + dilation[i] * (k[i] - 1) + 1 - size[i] - 2 * p[i]) for i in range(n)]
    return list(size), list(osize), p, end


def maxpool(n):
    """maxpool_Nd (PyTorch semantics): MaxPool; ``indice`` is the position inside each (N, C)
    plane: ONNX's indices (flat over the whole tensor) modulo the plane size."""
    def convert(c):
        dilation = list(c.attr("dilation"))
        size, _, begin, end = _pool_geometry(c, n, dilation)

        k = list(c.attr("kernel_size"))
        # onnxruntime wants pads smaller than the kernel: larger ones are padded with -inf
        # beforehand, and each index of the padded plane mapped back to the input's plane
        explicit = any(b >= k[i] or e >= k[i] for i, (b, e) in enumerate(zip(begin, end)))

        def build(c, x, outs):
            idx = c.tmp("indices")
            plane = size
            if explicit:
                low = np.array(-np.inf, dtype=_np(c.input_desc("x")))
                x = c.node("Pad", [x, c.const(_ints([0, 0] + begin + [0, 0] + end)), c.const(low)])
                plane = [b + sz + e for b, sz, e in zip(begin, size, end)]
            c.node("MaxPool", [x], [outs[0], idx], kernel_shape=k, strides=list(c.attr("stride")),
                   pads=[0] * 2 * n if explicit else begin + end, dilations=dilation)
            if not explicit:
                c.node("Mod", [idx, c.const(np.int64(np.prod(size)))], [outs[1]])
                return
            # padded position -> input position (pad positions are never a window's maximum)
            inner = np.arange(int(np.prod(size)), dtype=np.int64).reshape(size)
            back = np.zeros(plane, dtype=np.int64)
            back[tuple(slice(b, b + sz) for b, sz in zip(begin, size))] = inner
            pos = c.node("Mod", [idx, c.const(np.int64(np.prod(plane)))])
            c.node("Gather", [c.const(back.reshape(-1)), pos], [outs[1]])
        _channels_first_io(c, n, "x", ["y", "indice"], build)
    return convert


def _avg_divisors(size, osize, k, s, p, include_pad):
    """PyTorch's divisor of each output position along one dim: the window clipped to the
    padded input (include_pad) or to the input."""
    out = []
    for o in range(osize):
        start = o * s - p
        stop = min(start + k, size + p)
        out.append(stop - start if include_pad else min(stop, size) - max(start, 0))
    return np.array(out, dtype=np.float64)


def avgpool(n):
    """avgpool_Nd (PyTorch semantics): AveragePool when no window hangs past the padding and
    there is no ``divisor_override``; otherwise the window sums (a depthwise convolution with
    ones over zero padding) divided by PyTorch's divisor of each position."""
    def convert(c):
        k, s = list(c.attr("kernel_size")), list(c.attr("stride"))
        size, osize, begin, end = _pool_geometry(c, n, [1] * n)
        dv, include_pad = c.attr("divisor_override"), c.attr("count_include_pad")
        d = c.input_desc("x")

        def build(c, x, outs):
            if not dv and end == begin:
                c.node("AveragePool", [x], outs, kernel_shape=k, strides=s, pads=begin + end,
                       count_include_pad=int(include_pad))
                return
            channels = d.shape[1] if c.attr("data_format") == "channels_first" else d.shape[-1]
            ones = c.const(np.ones([channels, 1] + k, dtype=_np(d)))
            sums = c.node("Conv", [x, ones], kernel_shape=k, strides=s, pads=begin + end, group=channels)
            if dv:
                divisor = np.array(dv, dtype=_np(d))
            else:
                divisor = np.ones([1, 1] + osize)
                for i in range(n):
                    shape = [1] * (n + 2)
                    shape[i + 2] = osize[i]
                    per_dim = _avg_divisors(size[i], osize[i], k[i], s[i], begin[i], include_pad)
                    divisor = divisor * per_dim.reshape(shape)
                divisor = divisor.astype(_np(d))
            c.node("Div", [sums, c.const(divisor)], outs)
        _channels_first_io(c, n, "x", ["y"], build)
    return convert


def adaptive_avg_pool(n):
    """adaptive_avg_poolNd when each input size is a multiple of its output size (the windows
    are then the AveragePool windows of kernel = stride = input / output)."""
    def convert(c):
        size, out = c.input_desc("x").shape[2:], c.output_desc("y").shape[2:]
        if any(i % o for i, o in zip(size, out)):
            c.fail(f"output_size {tuple(out)} does not divide the input size {tuple(size)}; ONNX pooling has "
                   f"no windows of varying size")
        if all(o == 1 for o in out):
            c.node("GlobalAveragePool", [c.input("x")], [c.output("y")])
            return
        k = [i // o for i, o in zip(size, out)]
        c.node("AveragePool", [c.input("x")], [c.output("y")], kernel_shape=k, strides=k)
    return convert


def upsample(c):
    """upsample by the attr scales: Resize nearest (floor of dst / scale, the "asymmetric"
    transform) or linear ("half_pixel", or "align_corners" with align_corners)."""
    first = c.attr("data_format") == "channels_first"
    scales = np.ones(4, dtype=np.float32)
    scales[[2, 3] if first else [1, 2]] = [c.attr("height_scale"), c.attr("width_scale")]
    if c.attr("interpolation") == "nearest":
        mode = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    else:
        mode = dict(mode="linear", coordinate_transformation_mode="align_corners" if c.attr("align_corners")
                    else "half_pixel")
    c.node("Resize", [c.input("x"), "", c.const(scales)], [c.output("y")], **mode)


def deconv(n):
    """deconvNd: ConvTranspose (symmetric padding_before, output_padding); channels_last
    input and weight are transposed to channels_first and the output back."""
    def convert(c):
        w = c.input("weight")
        if c.attr("data_format") != "channels_first":
            w = _to_channels_first(c, w, n)

        def build(c, x, outs):
            p = list(c.attr("padding_before"))
            c.node("ConvTranspose", [x, w], outs, kernel_shape=list(c.attr("kernel_size")),
                   strides=list(c.attr("strides")), pads=p + p, dilations=list(c.attr("dilation_rate")),
                   output_padding=list(c.attr("output_padding")), group=c.attr("groups"))
        _channels_first_io(c, n, "in", ["out"], build)
    return convert


def fused_tf_max_pool(n):
    """fused_tf_max_pool_Nd: the input padded with -inf (as the kernel), MaxPool, Relu with
    attr relu; ``indices`` is the position inside each padded (N, C) plane, as the kernel's."""
    def convert(c):
        from graphfront.ops.nn_ops import pool_geometry
        d = c.input_desc("x")
        spatial = d.shape[2:] if c.attr("data_format") == "channels_first" else d.shape[1:-1]
        _, pads = pool_geometry(spatial, c.attrs)
        begin, end = [p[0] for p in pads], [p[1] for p in pads]

        def build(c, x, outs):
            if any(begin + end):
                x = c.node("Pad", [x, c.const(_ints([0, 0] + begin + [0, 0] + end)),
                                   c.const(np.array(-np.inf, dtype=_np(d)))])
            y, idx = c.tmp("y") if c.attr("relu") else outs[0], c.tmp("indices")
            c.node("MaxPool", [x], [y, idx], kernel_shape=list(c.attr("pool_size")), strides=list(c.attr("strides")))
            if c.attr("relu"):
                c.node("Relu", [y], [outs[0]])
            plane = int(np.prod([b + s + e for b, s, e in zip(begin, spatial, end)]))
            c.node("Mod", [idx, c.const(np.int64(plane))], [outs[1]])
        _channels_first_io(c, n, "x", ["y", "indices"], build)
    return convert


def floor_mod(c, x, y, out, d):
    """x mod y with the sign of y (torch.remainder): integers by ``Mod``; floats by the
    C ``fmod`` moved by y where its sign differs from y's, as PyTorch's kernel."""
    if not d.dtype.is_floating_point:
        c.node("Mod", [x, y], [out])
        return
    r = c.node("Mod", [x, y], fmod=1)
    zero = _k(c, 0, d)
    off = c.node("And", [c.node("Not", [c.node("Equal", [r, zero])]),
                         c.node("Xor", [c.node("Less", [r, zero]), c.node("Less", [y, zero])])])
    c.node("Where", [off, c.node("Add", [r, y]), r], [out])


def fmod(c, x, y, out, d):
    """C ``fmod`` (the sign of x)."""
    c.node("Mod", [x, y], [out], fmod=1)


def by_tensor(onnx_type):
    """scalar_{add,sub,mul,div}_by_tensor: ``onnx_type(x, scalar as a 0-d tensor)`` (integer
    ``Div`` truncates toward zero, as the kernel)."""
    return lambda c: c.node(onnx_type, [c.input("x"), c.node("Reshape", [c.input("scalar"), c.const(_ints([]))])],
                            [c.output("y")])


def _arange_value(c):
    """start + i * delta computed in float64 (int64 for integer dtypes), then cast: the kernel's arithmetic."""
    d = c.output_desc("out")
    prefix = "float" if d.dtype.is_floating_point else "integer"
    start, delta = c.attr(f"{prefix}_start"), c.attr(f"{prefix}_delta")
    steps = np.arange(d.shape[0], dtype=np.float64 if d.dtype.is_floating_point else np.int64)
    return (start + steps * delta).astype(_np(d))


arange = constant_output(_arange_value)
eye = constant_output(lambda c: np.eye(c.attr("rows"), c.attr("cols"), dtype=_np(c.output_desc("out"))))


def roll(c):
    """roll: per dim, the last ``shift`` entries moved to the front (Slice + Concat); with no
    dims, the flattened input rolled and reshaped back."""
    d = c.input_desc("in")
    x, out = c.input("in"), c.output("out")
    shifts, dims = list(c.attr("shifts")), [a % len(d.shape) for a in c.attr("dims")]
    shape = list(d.shape)
    if not dims:
        x = c.node("Reshape", [x, c.const(_ints([-1]))])
        shape, dims = [int(np.prod(d.shape))], [0]
    for shift, dim in zip(shifts, dims):
        s = shift % shape[dim] if shape[dim] else 0
        if s:
            tail, head = c.tmp("tail"), c.tmp("head")
            _slice(c, x, tail, [shape[dim] - s], [shape[dim]], [1], [dim])
            _slice(c, x, head, [0], [shape[dim] - s], [1], [dim])
            x = c.node("Concat", [tail, head], axis=dim)
    if len(shape) != len(d.shape):
        x = c.node("Reshape", [x, c.const(_ints(d.shape))])
    c.node("Identity", [x], [out])


def fused_scale_tril(c):
    """scale * x on and below the diagonal, the fill value above it."""
    d = c.input_desc("in")

    def pick(kind):
        if c.attr(f"is_floating_{kind}_value"):
            v = c.attr(f"floating_{kind}_value")
            return v if d.dtype.is_floating_point else int(v)
        return c.attr(f"integer_{kind}_value")
    rows, cols = d.shape[-2:]
    mask = np.tril(np.ones((rows, cols), dtype=bool), c.attr("diagonal"))
    scaled = c.node("Mul", [c.input("in"), _k(c, pick("scale"), d)])
    c.node("Where", [c.const(mask), scaled, _k(c, pick("fill"), d)], [c.output("out")])


def fused_cast_scale(c):
    """cast(x, dtype of scale_by_tensor) * (scale_by_tensor * scale)."""
    d = c.input_desc("scale_by_tensor")
    x = c.node("Cast", [c.input("x")], to=c.dtype_code(d.dtype))
    s = c.node("Mul", [c.node("Reshape", [c.input("scale_by_tensor"), c.const(_ints([]))]), _k(c, c.attr("scale"), d)])
    c.node("Mul", [x, s], [c.output("y")])


def reduce_sum_like(c):
    """sum of x over attr axis (kept), reshaped to like's shape."""
    axes = list(c.attr("axis"))
    if not axes:
        c.node("Identity", [c.input("x")], [c.output("y")])
        return
    s = _reduce_node(c, "ReduceSum", c.input("x"), axes, 1)
    c.node("Reshape", [s, c.const(_ints(c.input_desc("like").shape))], [c.output("y")])


def in_top_k(c):
    """int8 1 where fewer than k classes score strictly higher than the target's class."""
    p = c.input("predictions")
    target = c.node("Unsqueeze", [c.node("Cast", [c.input("targets")], to=_INT64), c.const(_ints([1]))])
    score = c.node("GatherElements", [p, target], axis=1)
    higher = c.node("Cast", [c.node("Greater", [p, score])], to=_INT64)
    count = _reduce_node(c, "ReduceSum", higher, [1], 0)
    c.node("Cast", [c.node("Less", [count, c.const(np.int64(c.attr("k")))])], [c.output("out")], to=_INT8)


# ------------------------------------------------------------------ losses
#
# The formulas of the kernels in graphfront/ops/loss_ops.py and nn_ops.py (unreduced losses).
# Class ids outside [0, depth) make the graphfront kernels raise (sparse losses) or pick
# garbage; in ONNX, GatherElements fails at run time on them: only in-range ids are defined.

def _neg(c, x, out=None):
    return c.node("Neg", [x], None if out is None else [out])


def _pick_last(c, x, ids):
    """``x[..., ids]`` over the last axis (``ids`` shaped x.shape[:-1]), as int64 GatherElements."""
    idx = c.node("Unsqueeze", [c.node("Cast", [ids], to=_INT64), c.const(_ints([-1]))])
    picked = c.node("GatherElements", [x, idx], axis=-1)
    return c.node("Squeeze", [picked, c.const(_ints([-1]))])


def softmax_cross_entropy(c):
    """prob = softmax(prediction); out = -sum(label * log_softmax(prediction)) over the last axis."""
    logp = c.node("LogSoftmax", [c.input("prediction")], axis=-1)
    c.node("Exp", [logp], [c.output("prob")])
    s = _reduce_node(c, "ReduceSum", c.node("Mul", [c.input("label"), logp]), [-1], 0)
    _neg(c, s, c.output("out"))


def sparse_softmax_cross_entropy(c):
    """prob = softmax(prediction); out = -log_softmax(prediction)[..., label]."""
    logp = c.node("LogSoftmax", [c.input("prediction")], axis=-1)
    c.node("Exp", [logp], [c.output("prob")])
    _neg(c, _pick_last(c, logp, c.input("label")), c.output("out"))


def sparse_cross_entropy(c):
    """out = -log(prediction[..., label]) (prediction holds probabilities)."""
    _neg(c, c.node("Log", [_pick_last(c, c.input("prediction"), c.input("label"))]), c.output("out"))


def _softplus_neg_abs(c, x, d):
    """log(1 + exp(-|x|)), finite for every x (onnxruntime's Softplus has no double kernel)."""
    return c.node("Log", [c.node("Add", [_k(c, 1.0, d), c.node("Exp", [_neg(c, c.node("Abs", [x]))])])])


def sigmoid_cross_entropy(c):
    """loss = max(x, 0) - x * z + log(1 + exp(-|x|)), z cast to x's dtype."""
    x, d = c.input("prediction"), c.input_desc("prediction")
    z = c.node("Cast", [c.input("label")], to=c.dtype_code(d.dtype))
    t = c.node("Sub", [c.node("Max", [x, _k(c, 0.0, d)]), c.node("Mul", [x, z])])
    c.node("Add", [t, _softplus_neg_abs(c, x, d)], [c.output("loss")])


def _times_weight(c, x, out):
    if c.has_input("weight"):
        c.node("Mul", [x, c.input("weight")], [out])
    else:
        c.node("Identity", [x], [out])


def binary_cross_entropy(c):
    """out = -weight * (t * log(x) + (1 - t) * log(1 - x)), each log clamped at -100 (as torch)."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    one, low = _k(c, 1.0, d), _k(c, -100.0, d)
    log_x = c.node("Max", [c.node("Log", [x]), low])
    log_1mx = c.node("Max", [c.node("Log", [c.node("Sub", [one, x])]), low])
    s = c.node("Add", [c.node("Mul", [t, log_x]), c.node("Mul", [c.node("Sub", [one, t]), log_1mx])])
    _times_weight(c, _neg(c, s), c.output("out"))


def binary_cross_entropy_with_logits(c):
    """out = weight * ((1 - t) x + (1 + (pos_weight - 1) t) (log(1 + exp(-|x|)) + max(-x, 0)))."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    one = _k(c, 1.0, d)
    sp = c.node("Add", [_softplus_neg_abs(c, x, d), c.node("Max", [_neg(c, x), _k(c, 0.0, d)])])
    if c.has_input("pos_weight"):
        coef = c.node("Add", [one, c.node("Mul", [c.node("Sub", [c.input("pos_weight"), one]), t])])
        sp = c.node("Mul", [coef, sp])
    s = c.node("Add", [c.node("Mul", [c.node("Sub", [one, t]), x]), sp])
    _times_weight(c, s, c.output("out"))


def kl_div_loss(c):
    """out = xlogy(t, t) - t * x (0 where t == 0); with log_target: exp(t) * (t - x)."""
    x, t, d = c.input("input"), c.input("target"), c.input_desc("input")
    if c.attr("log_target"):
        c.node("Mul", [c.node("Exp", [t]), c.node("Sub", [t, x])], [c.output("out")])
        return
    zero = _k(c, 0.0, d)
    tlogt = c.node("Where", [c.node("Equal", [t, zero]), zero, c.node("Mul", [t, c.node("Log", [t])])])
    c.node("Sub", [tlogt, c.node("Mul", [t, x])], [c.output("out")])


def smooth_l1_loss(c):
    """d = |x - t|; out = 0.5 d^2 / beta where d < beta, else d - 0.5 beta (d when beta == 0)."""
    d_ = c.input_desc("input")
    diff = c.node("Abs", [c.node("Sub", [c.input("input"), c.input("target")])])
    beta = c.attr("beta")
    if beta == 0:
        c.node("Identity", [diff], [c.output("out")])
        return
    quad = c.node("Mul", [c.node("Mul", [diff, diff]), _k(c, 0.5 / beta, d_)])
    lin = c.node("Sub", [diff, _k(c, 0.5 * beta, d_)])
    c.node("Where", [c.node("Less", [diff, _k(c, beta, d_)]), quad, lin], [c.output("out")])


def nll(c):
    """out[n] = -w[t] * input[n, t], t = target[n], 0 where t == ignore_index; total_weight = sum of w[t]."""
    x, d = c.input("input"), c.input_desc("input")
    t = c.node("Cast", [c.input("target")], to=_INT64)
    valid = c.node("Not", [c.node("Equal", [t, c.const(np.int64(c.attr("ignore_index")))])])
    safe = c.node("Where", [valid, t, c.const(np.int64(0))])
    per = c.node("Cast", [valid], to=c.dtype_code(d.dtype))
    if c.has_input("weight"):
        per = c.node("Mul", [c.node("Gather", [c.input("weight"), safe], axis=0), per])
    picked = _pick_last(c, x, safe)
    c.node("Mul", [_neg(c, picked), per], [c.output("out")])
    total = _reduce_node(c, "ReduceSum", per, [0], 1)
    c.node("Identity", [total], [c.output("total_weight")])


# ------------------------------------------------------------------ scatter-add family
#
# Every scatter-add op is written as one shape: ``out[b, ids[b, n, i], i] += src[b, n, i]``
# over a (B, S, inner) output, ids shaped (B, N, inner) or (B, N, 1). Ids outside [0, S)
# add nothing (as the kernels of scatter_nd, the segment sums and tensor_scatter_nd_add;
# dim_scatter_add_like's kernel raises on them instead).

def _scatter_add(c, base, ids3, src3, src_shape, segments, dtype, out):
    """``out`` (B, S, inner) = ``base`` (or zeros) plus ``src3`` (shaped ``src_shape`` = (B, N, inner))
    added at ``ids3`` (B, N, inner or 1) along axis 1; ids outside [0, segments) add nothing.

    ScatterElements with ``reduction="add"`` from opset 16; before it, the sum over N of a
    one-hot ``Where`` (B, N, S, inner): the same sums, inf and NaN entries included."""
    b, _, inner = src_shape
    zero = c.const(np.zeros((), dtype=dtype))
    valid, ids = _valid_ids(c, ids3, segments)
    if c.opset >= 16:
        src = c.node("Where", [valid, src3, zero])
        ids = c.node("Expand", [ids, c.const(_ints(src_shape))])
        if base is None:
            base = c.node("Expand", [zero, c.const(_ints([b, segments, inner]))])
        c.node("ScatterElements", [base, ids, src], [out], axis=1, reduction="add")
        return
    two = c.const(_ints([2]))
    hot = c.node("Equal", [c.node("Unsqueeze", [ids, two]),
                           c.const(np.arange(segments, dtype=np.int64).reshape(1, 1, segments, 1))])
    hot = c.node("And", [hot, c.node("Unsqueeze", [valid, two])])
    spread = c.node("Where", [hot, c.node("Unsqueeze", [src3, two]), zero])
    if base is None:
        _reduce_node(c, "ReduceSum", spread, [1], 0, out)
    else:
        c.node("Add", [base, _reduce_node(c, "ReduceSum", spread, [1], 0)], [out])


def _prod(dims):
    return int(np.prod(dims, dtype=np.int64))


def _nd_rows(c, shape):
    """``(n, k, rows, inner, ids)``: the row-major row id (int64, (n, 1)) that each index tuple of
    ``indices`` (..., k) picks in the first k dims of ``shape``; -1 for a tuple out of range."""
    idx_shape = c.input_desc("indices").shape
    k, n = idx_shape[-1], _prod(idx_shape[:-1])
    ids = c.node("Reshape", [c.node("Cast", [c.input("indices")], to=_INT64), c.const(_ints([n, k]))])
    valid, ids = _valid_ids(c, ids, np.array(shape[:k], dtype=np.int64))
    strides = np.cumprod([1] + shape[:k][::-1][:-1])[::-1] if k else np.zeros(0)
    linear = c.node("MatMul", [ids, c.const(np.array(strides, dtype=np.int64).reshape(k, 1))])
    row_ok = c.node("Cast", [_reduce_node(c, "ReduceMin", c.node("Cast", [valid], to=_INT32), [1], 1)], to=_BOOL)
    return n, k, _prod(shape[:k]), _prod(shape[k:]), c.node("Where", [row_ok, linear, c.const(np.int64(-1))])


def _scatter_nd_add(base_arg, shape_of):
    """scatter_nd / scatter_nd_like (into zeros) and tensor_scatter_nd_add (into ``params``):
    ``indices`` (..., k) pick rows of the first k dims of the output (row-major ids)."""
    def convert(c):
        shape = list(shape_of(c))
        n, k, rows, inner, linear = _nd_rows(c, shape)
        base = None
        if base_arg is not None:
            base = c.node("Reshape", [c.input(base_arg), c.const(_ints([1, rows, inner]))])
        src = c.node("Reshape", [c.input("updates"), c.const(_ints([1, n, inner]))])
        res = c.tmp("scattered")
        _scatter_add(c, base, c.node("Reshape", [linear, c.const(_ints([1, n, 1]))]), src, [1, n, inner], rows,
                     _np(c.output_desc("out")), res)
        c.node("Reshape", [res, c.const(_ints(shape))], [c.output("out")])
    return convert


def tensor_scatter_nd_update(c):
    """params with the rows picked by ``indices`` replaced by ``updates`` (ScatterND); a row whose
    index is out of range is written to a scratch row past the end, dropped after (as the kernel
    skips it). Among duplicate indices which update wins is unspecified, in ONNX as in the kernel."""
    shape = list(c.input_desc("params").shape)
    n, k, rows, inner, linear = _nd_rows(c, shape)
    linear = c.node("Where", [c.node("Less", [linear, c.const(np.int64(0))]), c.const(np.int64(rows)), linear])
    base = c.node("Reshape", [c.input("params"), c.const(_ints([rows, inner]))])
    base = c.node("Concat", [base, c.const(np.zeros((1, inner), dtype=_np(c.input_desc("params"))))], axis=0)
    src = c.node("Reshape", [c.input("updates"), c.const(_ints([n, inner]))])
    res = c.node("ScatterND", [base, linear, src])
    res = c.node("Slice", [res, c.const(_ints([0])), c.const(_ints([rows])), c.const(_ints([0]))])
    c.node("Reshape", [res, c.const(_ints(shape))], [c.output("out")])


scatter_nd = _scatter_nd_add(None, lambda c: c.attr("shape"))
scatter_nd_like = _scatter_nd_add(None, lambda c: c.input_desc("like").shape)
tensor_scatter_nd_add = _scatter_nd_add("params", lambda c: c.input_desc("params").shape)


def _segment_sum(segments_of):
    """unsorted_segment_sum(_like): ``data`` slices summed into rows ``segment_ids`` of axis ``axis``."""
    def convert(c):
        shape, ids_shape = c.input_desc("data").shape, c.input_desc("segment_ids").shape
        axis = c.attr("axis") % len(shape)
        segments = segments_of(c, axis)
        outer, n, inner = _prod(shape[:axis]), _prod(ids_shape), _prod(shape[axis + len(ids_shape):])
        ids = c.node("Reshape", [c.input("segment_ids"), c.const(_ints([1, n, 1]))])
        ids = c.node("Expand", [ids, c.const(_ints([outer, n, 1]))])
        src = c.node("Reshape", [c.input("data"), c.const(_ints([outer, n, inner]))])
        res = c.tmp("summed")
        _scatter_add(c, None, ids, src, [outer, n, inner], segments, _np(c.output_desc("out")), res)
        c.node("Reshape", [res, c.const(_ints(c.output_desc("out").shape))], [c.output("out")])
    return convert


unsorted_segment_sum = _segment_sum(lambda c, axis: c.attr("num_segments"))
unsorted_segment_sum_like = _segment_sum(lambda c, axis: c.input_desc("like").shape[axis])


def unsorted_batch_segment_sum(c):
    """Per batch row (the leading dims of ``segment_ids``), ``data`` rows summed into ``num_segments``."""
    shape, ids_shape = c.input_desc("data").shape, c.input_desc("segment_ids").shape
    b = len(ids_shape) - 1
    batch, n, inner = _prod(ids_shape[:-1]), ids_shape[-1], _prod(shape[b + 1:])
    ids = c.node("Reshape", [c.input("segment_ids"), c.const(_ints([batch, n, 1]))])
    src = c.node("Reshape", [c.input("data"), c.const(_ints([batch, n, inner]))])
    res = c.tmp("summed")
    _scatter_add(c, None, ids, src, [batch, n, inner], c.attr("num_segments"), _np(c.output_desc("out")), res)
    c.node("Reshape", [res, c.const(_ints(c.output_desc("out").shape))], [c.output("out")])


def dim_scatter_add_like(c):
    """zeros of like's shape, ``src[i]`` added at ``index[i]`` along ``dim`` (torch.scatter_add); an
    index smaller than ``like`` outside ``dim`` is zero-padded (padding adds 0). Out-of-range ids add
    nothing here, where the kernel raises."""
    like = list(c.input_desc("like").shape)
    ishape = list(c.input_desc("index").shape)
    dim = c.attr("dim") % len(like)
    target = [ishape[i] if i == dim else like[i] for i in range(len(like))]
    index, src = c.input("index"), c.input("src")
    if target != ishape:
        after = [t - s for t, s in zip(target, ishape)]
        pads = c.const(_ints([0] * len(like) + after))
        index = c.node("Pad", [index, pads, c.const(np.zeros((), dtype=_np(c.input_desc("index"))))])
        src = c.node("Pad", [src, pads, c.const(np.zeros((), dtype=_np(c.input_desc("src"))))])
    b, n, inner = _prod(like[:dim]), ishape[dim], _prod(like[dim + 1:])
    three = c.const(_ints([b, n, inner]))
    res = c.tmp("summed")
    _scatter_add(c, None, c.node("Reshape", [index, three]), c.node("Reshape", [src, three]), [b, n, inner],
                 like[dim], _np(c.output_desc("output")), res)
    c.node("Reshape", [res, c.const(_ints(like))], [c.output("output")])


# ------------------------------------------------------------------ diag, top_k, finite counts, square sums

def diag(c):
    """1-D ``in`` (n,): the (n + |d|)^2 matrix with ``in`` on diagonal d, zeros elsewhere;
    2-D ``in``: its diagonal d as a vector (torch.diag)."""
    d, desc = c.attr("diagonal"), c.input_desc("in")
    if len(desc.shape) == 2:
        size = c.output_desc("out").shape[0]
        i = np.arange(size, dtype=np.int64)
        rows, cols = (i, i + d) if d >= 0 else (i - d, i)
        c.node("GatherND", [c.input("in"), c.const(np.stack([rows, cols], axis=1))], [c.output("out")])
        return
    m = c.output_desc("out").shape[0]
    r, k = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    on = (k - r) == d
    src = np.where(on, np.minimum(r, k), 0).astype(np.int64)   # row r, column r + d holds in[min(r, col)]
    c.node("Where", [c.const(on), c.node("Gather", [c.input("in"), c.const(src)], axis=0),
                     c.const(np.zeros((), dtype=_np(desc)))], [c.output("out")])


def top_k(c):
    """int32 indices of the k largest entries of the last axis, largest first. On equal values
    ONNX TopK puts the lower index first; torch.topk (the graphfront kernel) has no fixed order."""
    k = c.output_desc("out").shape[-1]
    _top_k(c, k, True, False)


def _count_not_finite(c, x, desc):
    """int64 scalar: the number of inf and NaN entries (0 for integer dtypes)."""
    if not desc.dtype.is_floating_point:
        return c.const(np.int64(0))
    bad = c.node("Or", [c.node("IsInf", [x]), c.node("IsNaN", [x])])
    return c.node("ReduceSum", [c.node("Cast", [bad], to=_INT64)], keepdims=0)


def _sum_to_one(c, parts, out):
    total = parts[0]
    for p in parts[1:]:
        total = c.node("Add", [total, p])
    c.node("Reshape", [total, c.const(_ints([1]))], [out])


def count_not_finite(c):
    """count_not_finite / multi_count_not_finite: int64 (1,) count of inf and NaN in every ``x``."""
    parts = [_count_not_finite(c, x, c.input_desc("x", i)) for i, x in enumerate(c.inputs("x"))]
    _sum_to_one(c, parts, c.output("y"))


def multi_square_sum(c):
    """sum of x * x over every element of every ``x``, shape (1,)."""
    parts = [c.node("ReduceSum", [c.node("Mul", [x, x])], keepdims=0) for x in c.inputs("x")]
    _sum_to_one(c, parts, c.output("y"))


# ------------------------------------------------------------------ fused attention ops

def _bias_added(c):
    d = c.input_desc("a")
    shape = [1] * len(d.shape)
    shape[c.attr("axis")] = -1
    return c.node("Add", [c.input("a"), c.node("Reshape", [c.input("b"), c.const(_ints(shape))])])


def fused_bias_add_mask_scale(c):
    """(a + b along axis) * mask * scale (+ _add_to_output)."""
    d = c.input_desc("a")
    mask = c.node("Cast", [c.input("mask")], to=c.dtype_code(d.dtype))
    y = c.node("Mul", [c.node("Mul", [_bias_added(c), mask]), _k(c, c.attr("scale"), d)])
    if c.has_input("_add_to_output"):
        c.node("Add", [y, c.input("_add_to_output")], [c.output("out")])
    else:
        c.node("Identity", [y], [c.output("out")])


def fused_tril_scale_softmax_mask_scale(c):
    """softmax_y = softmax(where(tril(diagonal), x * tril_scale_value, tril_fill_value)) over the
    last axis; y = softmax_y * mask * mask_scale_value."""
    d = c.input_desc("x")
    rows, cols = d.shape[-2:]
    keep = np.tril(np.ones((rows, cols), dtype=bool), c.attr("diagonal"))
    t = c.node("Where", [c.const(keep), c.node("Mul", [c.input("x"), _k(c, c.attr("tril_scale_value"), d)]),
                         _k(c, c.attr("tril_fill_value"), d)])
    soft = c.node("Softmax", [t], [c.output("softmax_y")], axis=-1)
    mask = c.node("Cast", [c.input("mask")], to=c.dtype_code(d.dtype))
    c.node("Mul", [c.node("Mul", [soft, mask]), _k(c, c.attr("mask_scale_value"), d)], [c.output("y")])


def fused_self_attention_query_mul_key_and_value(c):
    """hidden_states (seq, batch, heads * 3 * head_size) -> q, k, v (batch, heads, seq, head_size);
    query_mul_key = alpha * q @ k^T, value = v."""
    d = c.input_desc("hidden_states")
    seq, batch, hidden = d.shape
    hs = c.attr("head_size")
    heads = hidden // (3 * hs)
    h = c.node("Reshape", [c.input("hidden_states"), c.const(_ints([seq, batch, heads, 3, hs]))])
    h = c.node("Transpose", [h], perm=[3, 1, 2, 0, 4])
    q, k = (c.node("Gather", [h, c.const(np.int64(i))], axis=0) for i in (0, 1))
    c.node("Gather", [h, c.const(np.int64(2))], [c.output("value")], axis=0)
    qk = c.node("MatMul", [q, c.node("Transpose", [k], perm=[0, 1, 3, 2])])
    c.node("Mul", [qk, _k(c, c.attr("alpha"), d)], [c.output("query_mul_key")])


# ------------------------------------------------------------------ argwhere, unique_with_counts, cast_to_static_shape

def argwhere(c):
    """output: the (count, ndim) coordinates of the non-zero entries in row-major order (NonZero,
    transposed), the dynamic blob of the kernel; output_size: (1,) count. Both of attr dtype."""
    to = c.dtype_code(c.attr("dtype"))
    nz = c.node("NonZero", [_nonzero(c, c.input("input"))])
    c.node("Cast", [c.node("Transpose", [nz], perm=[1, 0])], [c.output("output")], to=to)
    count = c.node("Slice", [c.node("Shape", [nz]), c.const(_ints([1])), c.const(_ints([2])), c.const(_ints([0]))])
    c.node("Cast", [count], [c.output("output_size")], to=to)


def _pad_end(c, x, n, length):
    """``x`` (length,) zero-padded at the end to ``n`` entries."""
    pads = c.node("Concat", [c.const(_ints([0])), c.node("Sub", [c.const(_ints([n])), length])], axis=0)
    return c.node("Pad", [x, pads])


def unique_with_counts(c):
    """Unique (sorted): y the distinct values ascending and count their counts, both zero-padded
    to x's length; idx the position of each x in y; num_unique (1,). Indices of attr out_idx."""
    n = c.input_desc("x").shape[0]
    to = c.dtype_code(c.attr("out_idx"))
    y, inverse, counts = c.tmp("y"), c.tmp("inverse"), c.tmp("counts")
    c.node("Unique", [c.input("x")], [y, "", inverse, counts], sorted=1)
    length = c.node("Shape", [y])
    c.node("Identity", [_pad_end(c, y, n, length)], [c.output("y")])
    c.node("Cast", [inverse], [c.output("idx")], to=to)
    c.node("Cast", [_pad_end(c, counts, n, length)], [c.output("count")], to=to)
    c.node("Cast", [length], [c.output("num_unique")], to=to)


def cast_to_static_shape(c):
    """The input zero-padded at the end of each dim to its static shape (a no-op unless the
    input is a dynamic blob holding fewer entries, e.g. argwhere's output)."""
    shape = c.output_desc("output").shape
    grow = c.node("Sub", [c.const(_ints(shape)), c.node("Shape", [c.input("input")])])
    pads = c.node("Concat", [c.const(_ints([0] * len(shape))), grow], axis=0)
    c.node("Pad", [c.input("input"), pads], [c.output("output")])
