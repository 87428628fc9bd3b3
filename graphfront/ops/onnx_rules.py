"""Builders of ONNX converters shared by several op families (the ``onnx=`` rule of an op,
see the registry).

A converter is ``convert(c)`` with ``c`` an :class:`graphfront.onnx.OnnxCtx`. An op's own
converter sits beside its kernel in its family file; this module keeps only what several
families build on, and imports no family. Nothing here imports the ``onnx`` package:
``c.node`` builds the nodes.
"""
from __future__ import annotations

import numpy as np


def same(onnx_type, **attrs):
    """One ONNX node of ``onnx_type``: the op's inputs in declaration order (absent optional
    inputs dropped, repeated inputs flattened) to its outputs in declaration order."""
    def convert(c):
        c.node(onnx_type, c.all_inputs(), c.all_outputs(), **attrs)
    return convert


# ------------------------------------------------------------------ helpers

# ONNX TensorProto element types (this module does not import the onnx package)
FLOAT, INT8, INT32, INT64, BOOL = 1, 3, 6, 7, 9


def np_dtype(desc):
    return np.dtype(desc.dtype.np)


def int64s(values):
    return np.array(list(values), dtype=np.int64)


def nonzero(c, name):
    """A bool tensor: ``name != 0`` (the condition convention of where / masked_fill)."""
    return c.node("Cast", [name], to=BOOL)  # nonzero -> true


# ------------------------------------------------------------------ shape and identity ops

def constant_output(value_of):
    """Ops whose output does not depend on input values: ``value_of(c)`` (a numpy array
    of the output's shape and dtype) as an initializer, copied to the output."""
    def convert(c):
        out = c.all_outputs()[0]
        c.node("Identity", [c.const(value_of(c))], [out])
    return convert


def expand_to_output(in_arg, out_arg, keep_shape=None):
    """``Expand`` to the output's shape; ``keep_shape(c)``, when given, first reshapes the input."""
    def convert(c):
        x = c.input(in_arg)
        if keep_shape is not None:
            x = c.node("Reshape", [x, c.const(int64s(keep_shape(c)))])
        c.node("Expand", [x, c.const(int64s(c.output_desc(out_arg).shape))], [c.output(out_arg)])
    return convert


# ------------------------------------------------------------------ elementwise compositions
#
# ``fn(c, x, out, desc)`` writes ``out`` from the ONNX value ``x`` of desc ``desc``; the
# last node of each writes the op's output. Where ONNX has no operator (or only in a later
# opset than the export's), the kernel's formula is spelled out with the ONNX operators.

def const_as(c, value, desc):
    """A scalar constant of ``desc``'s dtype."""
    return c.const(np.array(value, dtype=np_dtype(desc)))


def unary(fn, in_arg="x", out_arg="y"):
    """A converter applying ``fn(c, x, out, desc)`` to input ``in_arg``."""
    return lambda c: fn(c, c.input(in_arg), c.output(out_arg), c.input_desc(in_arg))


def gelu(c, x, out, d):
    """The exact erf form: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    cdf = c.node("Add", [const_as(c, 1, d), c.node("Erf", [c.node("Mul", [x, const_as(c, np.sqrt(0.5), d)])])])
    c.node("Mul", [c.node("Mul", [x, const_as(c, 0.5, d)]), cdf], [out])


def gelu_grad(c, x, dy, out, d):
    """dy * (Phi(x) + x * phi(x)), the erf GELU's derivative; half types computed in float32
    and rounded once, as the kernels."""
    half = np_dtype(d).itemsize < 4
    if half:
        x, dy = (c.node("Cast", [v], to=FLOAT) for v in (x, dy))
    f = np.float32 if half else np_dtype(d)
    k = lambda v: c.const(np.array(v, dtype=f))  # noqa: E731
    cdf = c.node("Mul", [k(0.5), c.node("Add", [k(1.0), c.node("Erf", [c.node("Mul", [x, k(1.0 / np.sqrt(2.0))])])])])
    pdf = c.node("Mul", [c.node("Exp", [mul(c, k(-0.5), x, x)]), k(1.0 / np.sqrt(2.0 * np.pi))])
    r = c.node("Mul", [dy, c.node("Add", [cdf, c.node("Mul", [x, pdf])])], None if half else [out])
    if half:
        c.node("Cast", [r], [out], to=c.dtype_code(d.dtype))


def bias_added(c):
    """``a + b`` with the 1-D ``b`` along attr axis of ``a`` (the fused_bias_add_* ops)."""
    shape = [1] * len(c.input_desc("a").shape)
    shape[c.attr("axis")] = -1
    return c.node("Add", [c.input("a"), c.node("Reshape", [c.input("b"), c.const(int64s(shape))])])


def bias_add_then(onnx_type):
    """fused_bias_add_relu / fused_bias_add_gelu: ``b`` along attr axis of ``a``, then the activation."""
    def convert(c):
        d = c.input_desc("a")
        s = bias_added(c)
        if onnx_type == "Gelu":
            gelu(c, s, c.output("out"), d)
        else:
            c.node(onnx_type, [s], [c.output("out")])
    return convert


# ------------------------------------------------------------------ reductions

def reduce_node(c, onnx_type, x, axes, keep, out=None):
    """One ``Reduce*`` node over ``axes`` (an input from opset 18, or 13 for ReduceSum; an attr before)."""
    if c.opset >= (13 if onnx_type == "ReduceSum" else 18):
        return c.node(onnx_type, [x, c.const(int64s(axes))], None if out is None else [out], keepdims=keep)
    return c.node(onnx_type, [x], None if out is None else [out], axes=list(axes), keepdims=keep)


# ------------------------------------------------------------------ channels_last layouts

def to_channels_first(c, x, n):
    return c.node("Transpose", [x], perm=[0, n + 1] + list(range(1, n + 1)))


def channels_first_io(c, n, in_arg, out_args, build):
    """Run ``build(c, x, outs)`` on channels_first data; for ``channels_last`` the input is
    transposed to channels_first and each output back."""
    x = c.input(in_arg)
    outs = [c.output(a) for a in out_args]
    if c.attr("data_format") == "channels_first":
        build(c, x, outs)
        return
    tmp = [c.tmp(f"{a}_channels_first") for a in out_args]
    build(c, to_channels_first(c, x, n), tmp)
    for t, o in zip(tmp, outs):
        c.node("Transpose", [t], [o], perm=[0] + list(range(2, n + 2)) + [1])


# ------------------------------------------------------------------ losses (loss_ops, nn_ops)

def neg(c, x, out=None):
    return c.node("Neg", [x], None if out is None else [out])


def pick_last(c, x, ids):
    """``x[..., ids]`` over the last axis (``ids`` shaped x.shape[:-1]), as int64 GatherElements."""
    idx = c.node("Unsqueeze", [c.node("Cast", [ids], to=INT64), c.const(int64s([-1]))])
    picked = c.node("GatherElements", [x, idx], axis=-1)
    return c.node("Squeeze", [picked, c.const(int64s([-1]))])


# ------------------------------------------------------------------ gradient ops

def grad(fn, src="x", dy="dy", out="dx"):
    """A ``(src, dy) -> dx`` grad op's converter: ``fn(c, src, dy, out, desc of src)``."""
    return lambda c: fn(c, c.input(src), c.input(dy), c.output(out), c.input_desc(src))


def zeros_output(out="dx"):
    """A grad op whose output is zeros (a piecewise-constant forward): zeros of the output's
    shape and dtype."""
    return constant_output(lambda c: np.zeros(c.output_desc(out).shape, dtype=np_dtype(c.output_desc(out))))


def mul(c, *names, out=None):
    """The product of ``names``, left to right (the kernels' order of operations)."""
    acc = names[0]
    if len(names) == 1 and out is not None:
        return c.node("Identity", [acc], [out])
    for i, n in enumerate(names[1:], 2):
        acc = c.node("Mul", [acc, n], [out] if out is not None and i == len(names) else None)
    return acc


def where_zero(c, cond, value, d, out=None, zero_if=True):
    """``0 if cond else value`` (``zero_if=True``) or ``value if cond else 0``."""
    zero = const_as(c, 0, d)
    args = [cond, zero, value] if zero_if else [cond, value, zero]
    return c.node("Where", args, None if out is None else [out])


def sum_to_shape(c, t, shape, to_shape, out=None):
    """``t`` (of ``shape``) summed back to ``to_shape`` (numpy broadcasting in reverse), then reshaped."""
    shape, to_shape = tuple(shape), tuple(to_shape)
    extra = len(shape) - len(to_shape)
    if shape != to_shape and extra >= 0:
        axes = [i for i in range(len(shape)) if i < extra or (to_shape[i - extra] == 1 and shape[i] != 1)]
        if axes:
            t = reduce_node(c, "ReduceSum", t, axes, 1)
    return c.node("Reshape", [t, c.const(int64s(to_shape))], None if out is None else [out])


def last_axis_is(c, ids, depth):
    """A bool tensor of ``ids.shape + (depth,)``: true at ``[..., ids]`` (the one-hot of ``ids``)."""
    idx = c.node("Unsqueeze", [c.node("Cast", [ids], to=INT64), c.const(int64s([-1]))])
    return c.node("Equal", [idx, c.const(np.arange(depth, dtype=np.int64))])


def put_last(c, ids, value, depth, d, out=None):
    """Zeros of ``ids.shape + (depth,)`` holding ``value`` (shaped like ids) at ``[..., ids]``, as a
    torch ``scatter`` of it into zeros over the last axis."""
    v = c.node("Unsqueeze", [value, c.const(int64s([-1]))])
    return where_zero(c, last_axis_is(c, ids, depth), v, d, out, zero_if=False)
