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
INT8, INT32, INT64, BOOL = 3, 6, 7, 9


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


def bias_add_then(onnx_type):
    """fused_bias_add_relu / fused_bias_add_gelu: ``b`` along attr axis of ``a``, then the activation."""
    def convert(c):
        d = c.input_desc("a")
        ndim, axis = len(d.shape), c.attr("axis")
        shape = [1] * ndim
        shape[axis] = -1
        s = c.node("Add", [c.input("a"), c.node("Reshape", [c.input("b"), c.const(int64s(shape))])])
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
