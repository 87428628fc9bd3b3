"""``flow.math``: elementwise math, reductions and arithmetic dispatch.

Thin wrappers in OneFlow's signatures: they validate the user's arguments, build the
op (``shared/reference/single_client_api.md`` §flow.math for the op chosen by each
wrapper) and return its output BlobDesc. Semantics live in the op registry.
"""
from __future__ import annotations

import numbers

from graphfront.framework.blob_desc import BlobDesc
from graphfront.ops.builder import build_op


def _scalar_attrs(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        raise TypeError(f"expected a Python int or float scalar, received {value!r}")
    if isinstance(value, numbers.Integral):
        return {"has_int_operand": True, "int_operand": int(value), "has_float_operand": False, "float_operand": 0.0}
    return {"has_int_operand": False, "int_operand": 0, "has_float_operand": True, "float_operand": float(value)}


def _scalar_op(op_type, x, value, name, prefix):
    return build_op(op_type, {"in": x}, _scalar_attrs(value), name=name, prefix=prefix)


def _check_blob(x, fn, arg):
    if not isinstance(x, BlobDesc):
        raise TypeError(f"flow.math.{fn}: argument '{arg}' expects a blob, received {type(x).__name__}")


def add(x, y, name=None):
    """x + y. A number operand -> ``scalar_add``; equal shapes -> ``add_n``; else ``broadcast_add``."""
    if not isinstance(x, BlobDesc):
        x, y = y, x
    _check_blob(x, "add", "x")
    if not isinstance(y, BlobDesc):
        return _scalar_op("scalar_add", x, y, name, "ScalarAdd_")
    if x.shape == y.shape and x.is_dynamic == y.is_dynamic:
        return build_op("add_n", {"in": [x, y]}, name=name, prefix="AddN_")
    return build_op("broadcast_add", {"x": x, "y": y}, outputs=("z",), name=name, prefix="broadcast_add_")


def subtract(x, y, name=None):
    """x - y. A number y -> ``scalar_add`` of -y; a number x -> ``-(y) + x``; else ``broadcast_sub``."""
    if not isinstance(y, BlobDesc):
        _check_blob(x, "subtract", "x")
        return _scalar_op("scalar_add", x, -y, name, "ScalarAdd_")
    if not isinstance(x, BlobDesc):
        return _scalar_op("scalar_add", negative(y), x, name, "ScalarAdd_")
    return build_op("broadcast_sub", {"x": x, "y": y}, outputs=("z",), name=name, prefix="broadcast_sub_")


def multiply(x, y, name=None):
    """x * y. A number -> ``scalar_mul``; equal shapes -> ``multiply``; else ``broadcast_mul``."""
    if not isinstance(x, BlobDesc):
        x, y = y, x
    _check_blob(x, "multiply", "x")
    if not isinstance(y, BlobDesc):
        return _scalar_op("scalar_mul", x, y, name, "ScalarMul_")
    if x.shape == y.shape:
        return build_op("multiply", {"x": x, "y": y}, name=name, prefix="ElementWiseMul_")
    return build_op("broadcast_mul", {"x": x, "y": y}, outputs=("z",), name=name, prefix="broadcast_mul_")


def divide(x, y, name=None):
    """x / y. A number y -> ``scalar_mul`` by 1/y; a number x -> ``reciprocal(y) * x``; else ``broadcast_div``."""
    if not isinstance(y, BlobDesc):
        _check_blob(x, "divide", "x")
        return _scalar_op("scalar_mul", x, 0.0 if y == 0 else 1.0 / y, name, "ScalarMul_")
    if not isinstance(x, BlobDesc):
        return _scalar_op("scalar_mul", reciprocal(y), x, name, "ScalarMul_")
    return build_op("broadcast_div", {"x": x, "y": y}, outputs=("z",), name=name, prefix="broadcast_div_")


def add_n(inputs, name=None):
    """Sum of a list of same-shape blobs (a one-element list is returned as is)."""
    inputs = list(inputs)
    if len(inputs) == 1:
        return inputs[0]
    return build_op("add_n", {"in": inputs}, name=name, prefix="AddN_")


def _unary(op_type):
    def fn(x, name=None):
        _check_blob(x, op_type, "x")
        return build_op(op_type, {"x": x}, outputs=("y",), name=name, prefix=f"{op_type}_")
    fn.__name__ = op_type
    fn.__doc__ = f"Elementwise ``{op_type}`` (op ``{op_type}``: x -> y, same shape and dtype)."
    return fn


negative = _unary("negative")
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
square = _unary("square")
abs = _unary("abs")  # noqa: A001 - OneFlow's name
tanh = _unary("tanh")
sigmoid_v2 = _unary("sigmoid_v2")
reciprocal = _unary("reciprocal")


def relu(x, name=None):
    """max(x, 0) (op ``relu``: x -> y)."""
    return build_op("relu", {"x": x}, outputs=("y",), name=name, prefix="Relu_")


def _axes(x, axis):
    if axis is None:
        return list(range(len(x.shape)))
    if isinstance(axis, int):
        return [axis]
    return list(axis)


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None):
    """Sum over ``axis`` (None = all, int or list); an empty axis list returns the input."""
    axes = _axes(input_tensor, axis)
    if not axes:
        return input_tensor
    return build_op("reduce_sum", {"input_tensor": input_tensor}, {"axis": axes, "keepdims": keepdims},
                    outputs=("output_tensor",), name=name, prefix="ReduceSum_")


def reduce_mean(input_blob, axis=None, keepdims=False, name=None):
    """Mean over ``axis``: ``reduce_sum`` then ``scalar_mul`` by 1/count."""
    axes = _axes(input_blob, axis)
    if not axes:
        return input_blob
    total = reduce_sum(input_blob, axes, keepdims, name=name)
    count = 1
    for a in axes:
        count *= input_blob.shape[a]
    return _scalar_op("scalar_mul", total, 1.0 / count, None if name is None else name + "_mean", "ScalarMul_")


def argmax(input, axis=-1, name=None):  # noqa: A002 - OneFlow's name
    """Index (int64) of the max along the last axis."""
    if axis not in (-1, len(input.shape) - 1):
        raise NotImplementedError("flow.math.argmax: only the last axis is supported")
    return build_op("argmax", {"in": input}, name=name, prefix="ArgMax_")
