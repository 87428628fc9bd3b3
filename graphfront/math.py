"""``flow.math``: elementwise math, comparisons, reductions, clipping, top-k and selection.

Thin wrappers in OneFlow's signatures: they validate the user's arguments, build the
op (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py`` for the op chosen by each
wrapper, ``oneflow/user/ops/`` for the op itself) and return its output BlobDesc. Semantics
live in the op registry (``graphfront/ops/math_ops.py``, ``reduce_ops.py``, ``select_ops.py``).

Default op names are ``UniqueStr(prefix)`` with OneFlow's prefixes (``ScalarAdd_``,
``broadcast_add_``, ``ReduceMax_`` ...). A few wrappers go beyond the 0.6.0 API and
say so in their docstrings (a Python number as the second operand of a comparison,
``pow`` of two blobs of different shapes, ``logical_or``/``logical_xor``).
"""
from __future__ import annotations

import builtins
import math as _pymath
import numbers

from graphfront.framework.errors import ArgumentError
from graphfront import array as _array
from graphfront.array import (broadcast_to_compatible_with, unsorted_batch_segment_sum,  # noqa: F401 - aliases
                              unsorted_segment_sum, unsorted_segment_sum_like)
from graphfront.framework import job_builder as jb
from graphfront.fused import fused_scale_tril_softmax_dropout  # noqa: F401 - alias of flow.nn's
from graphfront.framework.blob_desc import BlobDesc, expect_blob, expect_int, expect_ints, expect_number, is_int
from graphfront.framework.scope_symbols import device_count
from graphfront.ops.builder import build_op, unique_str
from graphfront.dynamic import argwhere, shape_elem_cnt


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def _scalar_attrs(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        raise ArgumentError(f"expected a Python int or float scalar, received {value!r}")
    if isinstance(value, numbers.Integral):
        return {"has_int_operand": True, "int_operand": int(value), "has_float_operand": False, "float_operand": 0.0}
    return {"has_int_operand": False, "int_operand": 0, "has_float_operand": True, "float_operand": float(value)}


def _scalar_op(op_type, x, value, name, prefix):
    return build_op(op_type, {"in": x}, _scalar_attrs(value), name=name, prefix=prefix)


def _check_blob(x, fn, arg):
    expect_blob(x, f"flow.math.{fn}", arg)


def _check_blob_or_number(x, fn, arg):
    if not isinstance(x, BlobDesc) and not _is_number(x):
        raise ArgumentError(f"flow.math.{fn}: argument '{arg}' expects a blob or a Python number, received "
                            f"{type(x).__name__} {x!r}")


def _binary(op_type, x, y, name, prefix=None):
    return build_op(op_type, {"x": x, "y": y}, outputs=("z",), name=name, prefix=prefix or f"{op_type}_")


def _by_tensor(kind, x, scalar, name):
    return build_op(f"scalar_{kind}_by_tensor", {"x": x, "scalar": scalar}, outputs=("y",), name=name,
                    prefix=f"Scalar{kind.capitalize()}ByTensor_")


# ----------------------------------------------------------------- arithmetic dispatch

def add(x, y, name=None) -> BlobDesc:
    """x + y, elementwise; either operand may be a Python number.

    Op by operands, as OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``: a number ->
    ``scalar_add``; equal shapes and dynamism -> ``add_n``; a ``(1,)``-shaped blob -> ``scalar_add_by_tensor``;
    else ``broadcast_add`` (numpy broadcasting).

    Args:
        x: blob of any shape and dtype, or a Python int/float.
        y: blob or Python int/float; at least one of ``x``, ``y`` is a blob.
        name: op name; default from the op's prefix (``ScalarAdd_``, ``AddN_``, ``broadcast_add_`` ...).

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)`` (the blob's shape for a number), the blob's dtype.

    Raises:
        ArgumentError: an operand is neither a blob nor a number, or both are numbers.
        JobBuildError: the shapes do not broadcast (the message names both) or the dtypes differ.
    """
    _check_blob_or_number(x, "add", "x")
    _check_blob_or_number(y, "add", "y")
    if not isinstance(x, BlobDesc):
        x, y = y, x
    _check_blob(x, "add", "x")
    if not isinstance(y, BlobDesc):
        return _scalar_op("scalar_add", x, y, name, "ScalarAdd_")
    if x.shape == y.shape and x.is_dynamic == y.is_dynamic:
        return build_op("add_n", {"in": [x, y]}, name=name, prefix="AddN_")
    if x.shape == (1,):
        return _by_tensor("add", y, x, name)
    if y.shape == (1,):
        return _by_tensor("add", x, y, name)
    return _binary("broadcast_add", x, y, name)


def subtract(x, y, name=None) -> BlobDesc:
    """x - y, elementwise; either operand may be a Python number.

    Op by operands, as OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``: a number ``y``
    -> ``scalar_add`` of -y; a number ``x`` -> ``negative(y)`` + x; equal shapes -> ``broadcast_sub``; a
    ``(1,)``-shaped ``y`` -> ``scalar_sub_by_tensor``; else ``broadcast_sub``.

    Args:
        x: blob of any shape and dtype, or a Python int/float.
        y: blob or Python int/float; at least one of ``x``, ``y`` is a blob.
        name: op name; default from the op's prefix.

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the blob's dtype.

    Raises:
        ArgumentError: an operand is neither a blob nor a number, or both are numbers.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    _check_blob_or_number(x, "subtract", "x")
    _check_blob_or_number(y, "subtract", "y")
    if not isinstance(y, BlobDesc):
        _check_blob(x, "subtract", "x")
        return _scalar_op("scalar_add", x, -y, name, "ScalarAdd_")
    if not isinstance(x, BlobDesc):
        return _scalar_op("scalar_add", negative(y), x, name, "ScalarAdd_")
    if x.shape == y.shape:
        return _binary("broadcast_sub", x, y, name)
    if y.shape == (1,):
        return _by_tensor("sub", x, y, name)
    return _binary("broadcast_sub", x, y, name)


def multiply(x, y, name=None) -> BlobDesc:
    """x * y, elementwise; either operand may be a Python number.

    Op by operands, as OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``: a number ->
    ``scalar_mul``; equal shapes -> ``multiply``; a ``(1,)``-shaped blob -> ``scalar_mul_by_tensor``; else
    ``broadcast_mul``.

    Args:
        x: blob of any shape and dtype, or a Python int/float.
        y: blob or Python int/float; at least one of ``x``, ``y`` is a blob.
        name: op name; default from the op's prefix (``ScalarMul_``, ``ElementWiseMul_`` ...).

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the blob's dtype.

    Raises:
        ArgumentError: an operand is neither a blob nor a number, or both are numbers.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    _check_blob_or_number(x, "multiply", "x")
    _check_blob_or_number(y, "multiply", "y")
    if not isinstance(x, BlobDesc):
        x, y = y, x
    _check_blob(x, "multiply", "x")
    if not isinstance(y, BlobDesc):
        return _scalar_op("scalar_mul", x, y, name, "ScalarMul_")
    if x.shape == y.shape:
        return build_op("multiply", {"x": x, "y": y}, name=name, prefix="ElementWiseMul_")
    if x.shape == (1,):
        return _by_tensor("mul", y, x, name)
    if y.shape == (1,):
        return _by_tensor("mul", x, y, name)
    return _binary("broadcast_mul", x, y, name)


def divide(x, y, name=None) -> BlobDesc:
    """x / y, elementwise; either operand may be a Python number.

    Op by operands, as OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``: a number ``y``
    -> ``scalar_mul`` by float 1/y (0 when y == 0); a number ``x`` -> ``reciprocal_no_nan(y)`` then ``scalar_mul``
    by x; equal shapes -> ``broadcast_div``; a ``(1,)``-shaped ``y`` -> ``scalar_div_by_tensor``; else
    ``broadcast_div``.

    Args:
        x: blob of any shape (floating dtype for a number ``x``), or a Python int/float.
        y: blob or Python int/float; at least one of ``x``, ``y`` is a blob.
        name: op name; default from the op's prefix.

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the blob's dtype.

    Raises:
        ArgumentError: an operand is neither a blob nor a number, or both are numbers.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    _check_blob_or_number(x, "divide", "x")
    _check_blob_or_number(y, "divide", "y")
    if not isinstance(y, BlobDesc):
        _check_blob(x, "divide", "x")
        return _scalar_op("scalar_mul", x, 0.0 if y == 0 else 1.0 / y, name, "ScalarMul_")
    if not isinstance(x, BlobDesc):
        return _scalar_op("scalar_mul", reciprocal_no_nan(y), x, name, "ScalarMul_")
    if x.shape == y.shape:
        return _binary("broadcast_div", x, y, name)
    if y.shape == (1,):
        return _by_tensor("div", x, y, name)
    return _binary("broadcast_div", x, y, name)


def add_n(inputs, name=None) -> BlobDesc:
    """Sum of a list of blobs of one shape and dtype.

    Op ``add_n``, OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        inputs: non-empty list/tuple of blobs; a one-element list is returned as is.
        name: op name; default ``AddN_<n>``.

    Returns:
        BlobDesc: the shape and dtype of the inputs.

    Raises:
        JobBuildError: the inputs differ in shape or dtype, or an item is not a blob.
    """
    inputs = list(inputs)
    if len(inputs) == 1:
        return inputs[0]
    return build_op("add_n", {"in": inputs}, name=name, prefix="AddN_")


def pow(x, y, name=None) -> BlobDesc:  # noqa: A001 - OneFlow's name
    """x ** y, elementwise.

    A number ``y`` -> ``scalar_pow`` (floating ``x`` only); a blob ``y`` of ``x``'s shape ->
    ``pow``; a blob ``y`` of another, broadcastable shape -> ``broadcast_pow`` (beyond
    v0.6.0, whose wrapper in ``python/oneflow/compatible/single_client/ops/math_ops.py``
    always emits ``pow``). Gradients: d/dx = y x^(y-1), d/dy = x^y log x.

    Args:
        x: blob of a floating dtype, any shape.
        y: blob broadcastable with ``x`` (same dtype), or a Python int/float.
        name: op name; default ``Pow_<n>`` / ``pow_<n>`` / ``broadcast_pow_<n>``.

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob, or ``y`` is neither a blob nor a number.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    _check_blob(x, "pow", "x")
    _check_blob_or_number(y, "pow", "y")
    if not isinstance(y, BlobDesc):
        return _scalar_op("scalar_pow", x, y, name, "Pow_")
    if x.shape == y.shape:
        return _binary("pow", x, y, name, "pow_")
    return _binary("broadcast_pow", x, y, name)


def _blob_pair(fn, x, y):
    _check_blob(x, fn, "x")
    _check_blob(y, fn, "y")


def maximum(x, y, name=None) -> BlobDesc:
    """Elementwise max(x, y).

    Equal shapes -> ``elementwise_maximum`` (differentiable: dz goes to x where x >= y, else to y); other shapes ->
    ``broadcast_maximum`` (numpy broadcasting, no gradient, as OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/math_ops.py``).

    Args:
        x: blob, any shape.
        y: blob broadcastable with ``x``, same dtype.
        name: op name; default ``ElementWiseMaximum_<n>`` / ``broadcast_maximum_<n>``.

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``y`` is not a blob.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    _blob_pair("maximum", x, y)
    if x.shape == y.shape:
        return _binary("elementwise_maximum", x, y, name, "ElementWiseMaximum_")
    return _binary("broadcast_maximum", x, y, name)


def minimum(x, y, name=None) -> BlobDesc:
    """Elementwise min(x, y).

    Equal shapes -> ``elementwise_minimum`` (differentiable: dz goes to x where x <= y, else to y); other shapes ->
    ``broadcast_minimum`` (numpy broadcasting, no gradient, as OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/math_ops.py``).

    Args:
        x: blob, any shape.
        y: blob broadcastable with ``x``, same dtype.
        name: op name; default ``ElementWiseMinimum_<n>`` / ``broadcast_minimum_<n>``.

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``y`` is not a blob.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    _blob_pair("minimum", x, y)
    if x.shape == y.shape:
        return _binary("elementwise_minimum", x, y, name, "ElementWiseMinimum_")
    return _binary("broadcast_minimum", x, y, name)


def mod(x, y, name=None) -> BlobDesc:
    """Floor modulo x - floor(x / y) * y, with the sign of y (op ``broadcast_floor_mod``).

    Gradient: dz to x only. Both operands must be blobs, as OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        x: blob, any shape.
        y: blob broadcastable with ``x``, same dtype.
        name: op name; default ``broadcast_floor_mod_<n>``.

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``y`` is not a blob.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    _blob_pair("mod", x, y)
    return _binary("broadcast_floor_mod", x, y, name)


def _same_shape_binary(op_type):
    def fn(x, y, name=None):
        _blob_pair(op_type, x, y)
        return _binary(op_type, x, y, name)
    fn.__name__ = op_type
    return fn


def _binary_doc(formula, op_type, note=""):
    return f"""{formula}, elementwise (op ``{op_type}``: x, y -> z{note}).

    Defined in OneFlow v0.6.0 ``oneflow/user/ops/math_binary_elementwise_ops.cpp``.

    Args:
        x: blob of a floating dtype, any shape.
        y: blob of the same shape and dtype as ``x``.
        name: op name; default ``{op_type}_<n>``.

    Returns:
        BlobDesc: z, the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``y`` is not a blob.
        JobBuildError: the shapes or dtypes of ``x`` and ``y`` differ.
    """


atan2 = _same_shape_binary("atan2")
atan2.__doc__ = _binary_doc("atan2(x, y) in radians", "atan2")
floordiv = _same_shape_binary("floordiv")
floordiv.__doc__ = _binary_doc("floor(x / y)", "floordiv", "; zero gradients")
xdivy = _same_shape_binary("xdivy")
xdivy.__doc__ = _binary_doc("x / y, 0 where x == 0", "xdivy")
xlogy = _same_shape_binary("xlogy")
xlogy.__doc__ = _binary_doc("x * log(y), 0 where x == 0", "xlogy")


def squared_difference(x, y, name=None) -> BlobDesc:
    """(x - y) ** 2, elementwise, as ``subtract`` then ``square``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        x: blob of a floating dtype (or a Python number, as for ``subtract``).
        y: blob broadcastable with ``x``, or a Python number.
        name: prefix of the two ops (``<name>_subtract``, ``<name>_square``); default unique names.

    Returns:
        BlobDesc: shape ``broadcast(x.shape, y.shape)``, the blob's dtype.

    Raises:
        ArgumentError: an operand is neither a blob nor a number.
        JobBuildError: the shapes do not broadcast or the dtypes differ.
    """
    diff = subtract(x, y, name=None if name is None else name + "_subtract")
    return square(diff, name=None if name is None else name + "_square")


def polyval(coeffs, x, name=None) -> BlobDesc:
    """Evaluate the polynomial ``coeffs[0] * x**(n-1) + ... + coeffs[-1]`` at x, elementwise.

    Horner's rule ``p = p * x + c`` starting from ``constant_like(x, 0)`` (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/math_ops.py``).

    Args:
        coeffs: list/tuple of Python numbers, highest degree first; empty gives zeros like ``x``.
        x: blob, any shape.
        name: prefix of the zeros op (``<name>_zeros_like``); default ``Polyval_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``coeffs`` is not a list/tuple, a coefficient is not a number, or
            ``x`` is not a blob.
    """
    if not isinstance(coeffs, (list, tuple)):
        raise ArgumentError(f"flow.math.polyval: coeffs must be a list or tuple of numbers, received "
                            f"{type(coeffs).__name__}")
    _check_blob(x, "polyval", "x")
    p = _array.constant_like(x, 0, name=(name or unique_str("Polyval_")) + "_zeros_like")
    for c in coeffs:
        if not _is_number(c):
            raise ArgumentError(f"flow.math.polyval: every coefficient must be a Python number, received {c!r}")
        p = add(c, multiply(p, x))
    return p


# ----------------------------------------------------------------- comparisons and logic

def _comparison(kind, doc):
    broadcast_type = f"broadcast_{kind}"
    scalar_type = "scalar_logical_" + kind.replace("logical_", "")

    def fn(x, y, name=None):
        _check_blob(x, kind, "x")
        _check_blob_or_number(y, kind, "y")
        if isinstance(y, BlobDesc):
            return _binary(broadcast_type, x, y, name)
        prefix = "".join(p.capitalize() for p in scalar_type.split("_")) + "_"
        return _scalar_op(scalar_type, x, y, name, prefix)
    fn.__name__ = kind
    fn.__doc__ = f"""{doc}, elementwise with numpy broadcasting (op ``{broadcast_type}``, no gradient).

    A Python number ``y`` uses op ``{scalar_type}`` instead (beyond the v0.6.0 API, whose
    wrapper in ``python/oneflow/compatible/single_client/ops/math_ops.py`` takes two blobs).
    Ops defined in OneFlow v0.6.0 ``oneflow/user/ops/math_binary_broadcast_ops.cpp``.

    Args:
        x: blob, any shape and dtype.
        y: blob broadcastable with ``x`` (numpy rules), or a Python int/float.
        name: op name; default ``{broadcast_type}_<n>`` (blob ``y``).

    Returns:
        BlobDesc: int8 blob of 1 (true) / 0 (false), shape ``broadcast(x.shape, y.shape)``
        (``x.shape`` for a number ``y``).

    Raises:
        ArgumentError: ``x`` is not a blob, or ``y`` is neither a blob nor a number.
        JobBuildError: the shapes of ``x`` and ``y`` do not broadcast.
    """
    return fn


equal = _comparison("equal", "x == y")
not_equal = _comparison("not_equal", "x != y")
greater = _comparison("greater", "x > y")
greater_equal = _comparison("greater_equal", "x >= y")
less = _comparison("less", "x < y")
less_equal = _comparison("less_equal", "x <= y")
logical_and = _comparison("logical_and", "(x != 0) and (y != 0)")
logical_or = _comparison("logical_or", "(x != 0) or (y != 0)")
logical_xor = _comparison("logical_xor", "(x != 0) xor (y != 0)")


# ----------------------------------------------------------------- unary family

def _unary(op_type, doc):
    def fn(x, name=None):
        _check_blob(x, op_type, "x")
        return build_op(op_type, {"x": x}, outputs=("y",), name=name, prefix=f"{op_type}_")
    fn.__name__ = op_type
    fn.__doc__ = f"""{doc}, elementwise (op ``{op_type}``: x -> y; gradient op ``{op_type}_grad``).

    Defined in OneFlow v0.6.0 ``oneflow/user/ops/math_unary_elementwise_op.cpp`` (formulas in
    ``oneflow/user/ops/math_unary_elementwise_func.h``).

    Args:
        x: blob of a floating dtype (float32/float64), any shape.
        name: op name; default ``{op_type}_<n>``.

    Returns:
        BlobDesc: y, the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob.
        JobBuildError: the op rejects the dtype of ``x``.
    """
    return fn


abs = _unary("abs", "|x|")  # noqa: A001 - OneFlow's name
acos = _unary("acos", "arccos(x)")
acosh = _unary("acosh", "arcosh(x)")
asin = _unary("asin", "arcsin(x)")
asinh = _unary("asinh", "arsinh(x)")
atan = _unary("atan", "arctan(x)")
atanh = _unary("atanh", "artanh(x)")
ceil = _unary("ceil", "ceil(x) (zero gradient)")
cos = _unary("cos", "cos(x)")
cosh = _unary("cosh", "cosh(x)")
erf = _unary("erf", "erf(x)")
erfc = _unary("erfc", "1 - erf(x)")
exp = _unary("exp", "e ** x")
expm1 = _unary("expm1", "e ** x - 1")
floor = _unary("floor", "floor(x) (zero gradient)")
lgamma = _unary("lgamma", "log|Gamma(x)|")
log = _unary("log", "natural log of x")
log1p = _unary("log1p", "log(1 + x)")
log2 = _unary("log2", "log2(x)")
log_sigmoid = _unary("log_sigmoid", "log(sigmoid(x))")
negative = _unary("negative", "-x (integer dtypes too)")
reciprocal = _unary("reciprocal", "1 / x")
reciprocal_no_nan = _unary("reciprocal_no_nan", "1 / x, 0 where x == 0")
rint = _unary("rint", "x rounded to the nearest integer, halves to even (zero gradient)")
round = _unary("round", "x rounded to the nearest integer, halves to even (zero gradient)")  # noqa: A001
rsqrt = _unary("rsqrt", "1 / sqrt(x)")
sigmoid_v2 = _unary("sigmoid_v2", "1 / (1 + e ** -x)")
sign = _unary("sign", "sign(x) in {-1, 0, 1} (zero gradient)")
sin = _unary("sin", "sin(x)")
sinh = _unary("sinh", "sinh(x)")
softplus = _unary("softplus", "log(1 + e ** x)")
sqrt = _unary("sqrt", "sqrt(x)")
square = _unary("square", "x ** 2")
tan = _unary("tan", "tan(x)")
tanh = _unary("tanh", "tanh(x)")


def relu(x, name=None) -> BlobDesc:
    """max(x, 0), elementwise.

    Op ``relu``: x -> y; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        x: blob of a floating dtype, any shape.
        name: op name; default ``Relu_<n>``.

    Returns:
        BlobDesc: y, the shape and dtype of ``x``.

    Raises:
        JobBuildError: ``x`` is not a blob or its dtype is not supported.
    """
    return build_op("relu", {"x": x}, outputs=("y",), name=name, prefix="Relu_")


def sigmoid(x, name=None) -> BlobDesc:
    """1 / (1 + e ** -x), elementwise.

    Op ``sigmoid``: in -> out; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    The gradient op ``sigmoid_grad`` reads the output and dy.

    Args:
        x: blob of a floating dtype, any shape.
        name: op name; default ``Sigmoid_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob.
    """
    _check_blob(x, "sigmoid", "x")
    return build_op("sigmoid", {"in": x}, name=name, prefix="Sigmoid_")


def sigmoid_grad(y, dy, name=None) -> BlobDesc:
    """dy * y * (1 - y), the gradient of ``sigmoid`` (op ``sigmoid_grad``: y, dy -> dx).

    Args:
        y: blob, the output of ``sigmoid``, floating dtype.
        dy: blob of ``y``'s shape and dtype, the gradient of the loss with respect to ``y``.
        name: op name; default ``SigmoidGrad_<n>``.

    Returns:
        BlobDesc: dx, the shape and dtype of ``y``.

    Raises:
        ArgumentError: ``y`` or ``dy`` is not a blob.
        JobBuildError: their shapes or dtypes differ.
    """
    _blob_pair("sigmoid_grad", y, dy)
    return build_op("sigmoid_grad", {"y": y, "dy": dy}, outputs=("dx",), name=name, prefix="SigmoidGrad_")


def gelu(x, name=None) -> BlobDesc:
    """x * Phi(x), Phi the standard normal CDF (exact erf form; op ``gelu``: in -> out).

    Formula of Hendrycks and Gimpel, "Gaussian Error Linear Units" (2016); op defined in
    OneFlow v0.6.0 ``oneflow/user/ops/gelu_op.cpp``.

    Args:
        x: blob of a floating dtype, any shape.
        name: op name; default ``Gelu_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob.
    """
    _check_blob(x, "gelu", "x")
    return build_op("gelu", {"in": x}, name=name, prefix="Gelu_")


def gelu_grad(x, dy, name=None) -> BlobDesc:
    """dy * (Phi(x) + x * phi(x)), the gradient of ``gelu`` (op ``gelu_grad``: x, dy -> dx).

    Phi is the standard normal CDF, phi its density.

    Args:
        x: blob, the input of ``gelu``, floating dtype.
        dy: blob of ``x``'s shape and dtype.
        name: op name; default ``GeluGrad_<n>``.

    Returns:
        BlobDesc: dx, the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``dy`` is not a blob.
        JobBuildError: their shapes or dtypes differ.
    """
    _blob_pair("gelu_grad", x, dy)
    return build_op("gelu_grad", {"x": x, "dy": dy}, outputs=("dx",), name=name, prefix="GeluGrad_")


def tanh_v2(x, name=None) -> BlobDesc:
    """tanh(x) composed as (e^x - e^-x) / (e^x + e^-x).

    Built from ``exp``, ``negative``, ``subtract``, ``add`` and ``divide`` (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/math_ops.py``).

    Args:
        x: blob of a floating dtype, any shape.
        name: name of the final ``divide`` op; default a unique name.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob.
    """
    _check_blob(x, "tanh_v2", "x")
    ex, enx = exp(x), exp(negative(x))
    return divide(subtract(ex, enx), add(ex, enx), name=name)


# ----------------------------------------------------------------- reductions

def _axes(x, axis, fn="reduce"):
    """Normalize ``axis`` (None = all dims, int, or list/tuple; negatives allowed)."""
    ndim = len(x.shape)
    if axis is None:
        return list(range(ndim))
    axes = expect_ints(axis, f"flow.math.{fn}", "axis")
    for a in axes:
        if not -ndim <= a < builtins.max(ndim, 1):
            raise ArgumentError(f"flow.math.{fn}: axis {a!r} is out of range for input of shape {x.shape}")
    return [a % ndim if ndim else 0 for a in axes]


def _reduce(op_type, prefix):
    def fn(input_tensor, axis=None, keepdims=False, name=None):
        _check_blob(input_tensor, op_type, "input_tensor")
        axes = _axes(input_tensor, axis, op_type)
        if not axes:
            return input_tensor
        return build_op(op_type, {"input_tensor": input_tensor}, {"axis": axes, "keepdims": bool(keepdims)},
                        outputs=("output_tensor",), name=name, prefix=prefix)
    fn.__name__ = op_type
    return fn


def _reduce_doc(summary, op_type, out_dtype="the dtype of ``input_tensor``"):
    return f"""{summary}

    Op ``{op_type}`` (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/reduce_ops.py``,
    ``oneflow/user/ops/reduce_ops.cpp``).

    Args:
        input_tensor: blob, any shape.
        axis: None (all dims), an int or a list/tuple of ints in [-rank, rank); an empty
            list returns ``input_tensor`` itself.
        keepdims: keep the reduced dims with size 1.
        name: op name; default ``{_reduce_prefix(op_type)}<n>``.

    Returns:
        BlobDesc: the input's shape without the reduced dims (size 1 with ``keepdims``; (1,) when
        every dim is removed),
        {out_dtype}.

    Raises:
        ArgumentError: ``input_tensor`` is not a blob or an axis is out of range.
    """


def _reduce_prefix(op_type):
    return "".join(p.capitalize() for p in op_type.split("_")) + "_"


reduce_sum = _reduce("reduce_sum", "ReduceSum_")
reduce_sum.__doc__ = _reduce_doc("Sum over ``axis``.", "reduce_sum")
reduce_max = _reduce("reduce_max", "ReduceMax_")
reduce_max.__doc__ = _reduce_doc("Max over ``axis``; the gradient is shared equally by the elements equal to "
                                 "the max (OneFlow's seven-op wiring).", "reduce_max")
reduce_min = _reduce("reduce_min", "ReduceMin_")
reduce_min.__doc__ = _reduce_doc("Min over ``axis``; gradient as ``reduce_max``.", "reduce_min")
reduce_prod = _reduce("reduce_prod", "ReduceProd_")
reduce_prod.__doc__ = _reduce_doc("Product over ``axis`` (no gradient function, as OneFlow).", "reduce_prod")
reduce_any = _reduce("reduce_any", "ReduceAny_")
reduce_any.__doc__ = _reduce_doc("Whether any element over ``axis`` is non-zero.", "reduce_any", "a bool blob")
reduce_all = _reduce("reduce_all", "ReduceAll_")
reduce_all.__doc__ = _reduce_doc("Whether all elements over ``axis`` are non-zero.", "reduce_all", "a bool blob")


def _two_stage_reduce(kind):
    op_type, fn_name = f"reduce_{kind}", f"two_stage_reduce_{kind}"

    def fn(x, axis=None, keepdims=False, name=None):
        _check_blob(x, fn_name, "x")
        axes = _axes(x, axis, fn_name)
        policy = x.distribute
        if policy is None or policy.kind != "split" or policy.axis % len(x.shape) not in axes:
            raise ArgumentError(f"flow.math.{fn_name}: argument 'x' must be laid out as flow.distribute.split(k) "
                                f"on a reduced axis k in {axes} (blob.with_distribute), received "
                                f"{'no layout' if policy is None else repr(policy)}")
        split_axis = policy.axis % len(x.shape)
        name = name or unique_str(_reduce_prefix(op_type))
        outs, counts = [], []
        parts = _array.balanced_parts(x, split_axis, device_count(jb.current().scope.parallel_conf.device_name))
        for i, part in enumerate(parts):
            out, _, count = build_op(f"{op_type}_device_stage", {"in": part}, {"axis": axes},
                                     outputs=("out", "mask", "count"), name=f"{name}_device_stage{i}")
            outs.append(out)
            counts.append(count)
        return build_op(f"{op_type}_global_stage",
                        {"in": _array.concat(outs, axis=split_axis), "device_count": _array.concat(counts, axis=split_axis)},
                        {"axis": axes, "keepdims": bool(keepdims)}, outputs=("out", "mask"),
                        name=f"{name}_global_stage")[0]
    fn.__name__ = fn_name
    fn.__doc__ = f"""{kind.capitalize()} over ``axis`` in two stages: each device's part of ``x``, then the parts' results.

    ``x`` is cut into one part per device of the current placement along its split axis
    (``flow.advanced.distribute_split``); op ``{op_type}_device_stage`` gives each part's
    {kind} over ``axis`` (kept dims) and how many of its elements equal it, op
    ``{op_type}_global_stage`` the {kind} of the concatenated part results. The values are
    ``flow.math.reduce_{kind}``'s; the gradient is shared equally by every element of ``x``
    equal to the result (each part gets ``dy`` times its count over the total count, split
    equally inside the part). OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/two_stage_reduce.py``,
    ``oneflow/user/ops/two_stage_reduce_ops.cpp``.

    Args:
        x: blob of any shape and a float or integer dtype, laid out as
            ``flow.distribute.split(k)`` (``x.with_distribute``) with ``k`` a reduced axis.
        axis: None (all dims), an int or a list/tuple of ints in [-rank, rank).
        keepdims: keep the reduced dims with size 1.
        name: op name prefix; default ``{_reduce_prefix(op_type)}<n>``.

    Returns:
        BlobDesc: ``x``'s shape without the reduced dims (size 1 with ``keepdims``; (1,) when
        every dim is removed), ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, an axis is out of range, or ``x`` is not laid
            out as a split on a reduced axis.
    """
    return fn


two_stage_reduce_max = _two_stage_reduce("max")
two_stage_reduce_min = _two_stage_reduce("min")


def _count(x, axes):
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _sub_name(name, suffix):
    return None if name is None else f"{name}_{suffix}"


def reduce_mean(input_blob, axis=None, keepdims=False, name=None) -> BlobDesc:
    """Mean over ``axis``: ``reduce_sum`` (given ``name``) then ``scalar_mul`` by 1/count.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/reduce_mean.py``.

    Args:
        input_blob: blob of a floating dtype, any shape.
        axis: None (all dims), an int or a list/tuple of ints in [-rank, rank); an empty
            list returns ``input_blob`` itself.
        keepdims: keep the reduced dims with size 1.
        name: name of the ``reduce_sum`` op (the ``scalar_mul`` is ``<name>_mean``); default unique names.

    Returns:
        BlobDesc: the input's shape without the reduced dims (size 1 with ``keepdims``; (1,) when
        every dim is removed), its dtype.

    Raises:
        ArgumentError: ``input_blob`` is not a blob or an axis is out of range.
    """
    _check_blob(input_blob, "reduce_mean", "input_blob")
    axes = _axes(input_blob, axis, "reduce_mean")
    if not axes:
        return input_blob
    total = reduce_sum(input_blob, axes, keepdims, name=name)
    if input_blob.is_dynamic:  # (as OneFlow: divided by the run-time count)
        return divide(total, reduced_shape_elem_cnt(input_blob, axes, dtype=input_blob.dtype))
    count = _count(input_blob, axes)
    return _scalar_op("scalar_mul", total, 1.0 / count if count else 0.0, _sub_name(name, "mean"), "ScalarMul_")


def reduced_shape_elem_cnt(input_blob, axis=None, dtype=None, name=None) -> BlobDesc:
    """The number of elements of ``input_blob`` over ``axis`` at run time, as a (1,) blob: the
    system op ``shape_elem_cnt_conf`` (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/reduce_ops.py``).

    Args:
        input_blob: blob of any shape and dtype; for a dynamic blob the count is of its
            run-time shape.
        axis: None (every axis) or a list/tuple of axes in [-rank, rank).
        dtype: flow.int32 (default), flow.int64, flow.float32 or flow.float64.
        name: op name; default ``ShapeElemCnt_<n>``.

    Returns:
        BlobDesc: (1,) in ``dtype``.

    Raises:
        ArgumentError: ``input_blob`` is not a blob, ``axis`` not a list of ints or ``dtype``
            not a graphfront dtype.
        JobBuildError: an axis out of range, or another ``dtype``.
    """
    return shape_elem_cnt(input_blob, "math.reduced_shape_elem_cnt", "ShapeElemCnt_", axis, dtype, name)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None) -> BlobDesc:
    """Population variance over ``axis``: mean((x - mean(x)) ** 2).

    Two passes, the inner mean with keepdims (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/reduce_ops.py``). An empty axis list gives zeros like the input.

    Args:
        input_tensor: blob of a floating dtype, any shape.
        axis: None (all dims), an int or a list/tuple of ints in [-rank, rank).
        keepdims: keep the reduced dims with size 1.
        name: prefix of the ops built; default ``ReduceVariance_<n>``.

    Returns:
        BlobDesc: the input's shape without the reduced dims (size 1 with ``keepdims``; (1,) when
        every dim is removed), its dtype.

    Raises:
        ArgumentError: ``input_tensor`` is not a blob or an axis is out of range.
    """
    _check_blob(input_tensor, "reduce_variance", "input_tensor")
    name = name or unique_str("ReduceVariance_")
    axes = _axes(input_tensor, axis, "reduce_variance")
    if not axes:
        return _array.constant_like(input_tensor, 0.0, name=name + "_zeros_like")
    mean = reduce_mean(input_tensor, axes, True, name=name + "_reduce_mean_inner")
    dev = square(subtract(input_tensor, mean, name=name + "_subtract"), name=name + "_square")
    return reduce_mean(dev, axes, keepdims, name=name + "_reduce_mean")


def reduce_std(input_tensor, axis=None, keepdims=False, name=None) -> BlobDesc:
    """Population standard deviation over ``axis``: sqrt(reduce_variance(x)).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/reduce_ops.py``.

    Args:
        input_tensor: blob of a floating dtype, any shape.
        axis: None (all dims), an int or a list/tuple of ints in [-rank, rank).
        keepdims: keep the reduced dims with size 1.
        name: prefix of the ops built; default ``ReduceStd_<n>``.

    Returns:
        BlobDesc: the input's shape without the reduced dims (size 1 with ``keepdims``; (1,) when
        every dim is removed), its dtype.

    Raises:
        ArgumentError: ``input_tensor`` is not a blob or an axis is out of range.
    """
    name = name or unique_str("ReduceStd_")
    return sqrt(reduce_variance(input_tensor, axis, keepdims, name=name + "_variance"), name=name + "_sqrt")


def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None) -> BlobDesc:
    """log(sum(exp(x))) over ``axis``, computed stably.

    As m + log(sum(exp(x - m))) with m = reduce_max(x) (the max's gradient cancels analytically); OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/reduce_ops.py``. An empty axis list returns the input.

    Args:
        input_tensor: blob of a floating dtype, any shape.
        axis: None (all dims), an int or a list/tuple of ints in [-rank, rank).
        keepdims: keep the reduced dims with size 1.
        name: prefix of the ops built; default ``ReduceLogSumExp_<n>``.

    Returns:
        BlobDesc: the input's shape without the reduced dims (size 1 with ``keepdims``; (1,) when
        every dim is removed), its dtype.

    Raises:
        ArgumentError: ``input_tensor`` is not a blob or an axis is out of range.
    """
    _check_blob(input_tensor, "reduce_logsumexp", "input_tensor")
    name = name or unique_str("ReduceLogSumExp_")
    axes = _axes(input_tensor, axis, "reduce_logsumexp")
    if not axes:
        return input_tensor
    m = reduce_max(input_tensor, axes, True, name=name + "_reduce_max")
    shifted = exp(subtract(input_tensor, m, name=name + "_subtract"), name=name + "_exp")
    lse = log(reduce_sum(shifted, axes, keepdims, name=name + "_reduce_sum"), name=name + "_log")
    if not keepdims:
        m = _array.reshape(m, lse.shape, name=name + "_reshape")
    return add(lse, m, name=name + "_add")


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None) -> BlobDesc:
    """sqrt(sum(x ** 2)) over ``axis``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/reduce_ops.py``.

    Args:
        input_tensor: blob of a floating dtype, any shape.
        axis: None (all dims), an int or a list/tuple of ints in [-rank, rank).
        keepdims: keep the reduced dims with size 1.
        name: prefix of the ops built; default ``ReduceEuclideanNorm_<n>``.

    Returns:
        BlobDesc: the input's shape without the reduced dims (size 1 with ``keepdims``; (1,) when
        every dim is removed), its dtype.

    Raises:
        ArgumentError: ``input_tensor`` is not a blob or an axis is out of range.
    """
    _check_blob(input_tensor, "reduce_euclidean_norm", "input_tensor")
    name = name or unique_str("ReduceEuclideanNorm_")
    sq = square(input_tensor, name=name + "_square")
    return sqrt(reduce_sum(sq, axis, keepdims, name=name + "_reduce_sum"), name=name + "_sqrt")


# ----------------------------------------------------------------- argmax, top_k, sort

def _to_last(x, axis, fn, name):
    """(blob with ``axis`` moved last, perm used or None)."""
    ndim = len(x.shape)
    if not is_int(axis) or not -ndim <= axis < ndim:
        raise ArgumentError(f"flow.math.{fn}: axis {axis!r} is out of range for input of shape {x.shape}")
    axis = int(axis) % ndim
    if axis == ndim - 1:
        return x, None
    perm = [i for i in range(ndim) if i != axis] + [axis]
    return _array.transpose(x, perm, name=_sub_name(name, "transpose")), perm


def _from_last(y, perm, name):
    if perm is None:
        return y
    inverse = [perm.index(i) for i in range(len(perm))]
    return _array.transpose(y, inverse, name=_sub_name(name, "transpose_back"))


def argmax(input, axis=-1, name=None) -> BlobDesc:  # noqa: A002 - OneFlow's name
    """Index of the max along ``axis``.

    Op ``argmax``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    The op works on the last axis; another ``axis`` is first transposed to the end.

    Args:
        input: blob, any shape of rank >= 1.
        axis: int in [-rank, rank).
        name: op name; default ``ArgMax_<n>``.

    Returns:
        BlobDesc: int64 blob, the input's shape without ``axis`` ((1,) for a 1-D input).

    Raises:
        ArgumentError: ``input`` is not a blob or ``axis`` is out of range.
    """
    _check_blob(input, "argmax", "input")
    x, _ = _to_last(input, axis, "argmax", name)
    return build_op("argmax", {"in": x}, name=name, prefix="ArgMax_")


def top_k(input, axis=-1, k=1, sorted=True, name=None) -> BlobDesc:  # noqa: A002 - OneFlow's names
    """Indices of the ``k`` largest values along ``axis``.

    Op ``top_k``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Values are not returned (gather them with ``flow.gather``). An ``axis`` other than the
    last is transposed to the end and the result back.

    Args:
        input: blob, any shape of rank >= 1.
        axis: int in [-rank, rank).
        k: positive int; min(k, size of ``axis``) indices come back.
        sorted: largest first when True.
        name: op name; default ``TopK_<n>``.

    Returns:
        BlobDesc: int32 blob, the input's shape with ``axis`` of size min(k, size).

    Raises:
        ArgumentError: ``input`` is not a blob, ``k`` is not a positive int or ``axis`` is out of range.
    """
    _check_blob(input, "top_k", "input")
    if not is_int(k) or k < 1:
        raise ArgumentError(f"flow.math.top_k: k must be a positive int, received {k!r}")
    x, perm = _to_last(input, axis, "top_k", name)
    out = build_op("top_k", {"in": x}, {"k": int(k), "sorted": bool(sorted)}, name=name, prefix="TopK_")
    return _from_last(out, perm, name)


def in_top_k(targets, predictions, k, name=None) -> BlobDesc:
    """Whether each target class is among the top ``k`` predictions.

    Op ``in_top_k``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Row i is 1 when fewer than ``k`` classes of ``predictions[i]`` score strictly higher than
    class ``targets[i]``.

    Args:
        targets: int32/int64 blob (N,), class ids in [0, C).
        predictions: float blob (N, C), scores.
        k: int.
        name: op name; default ``InTopK_<n>``.

    Returns:
        BlobDesc: int8 blob (N,) of 1/0.

    Raises:
        ArgumentError: ``targets`` or ``predictions`` is not a blob, or ``k`` is not an int.
        JobBuildError: the shapes or dtypes do not fit.
    """
    _blob_pair("in_top_k", targets, predictions)
    if not is_int(k):
        raise ArgumentError(f"flow.math.in_top_k: k must be an int, received {k!r}")
    return build_op("in_top_k", {"targets": targets, "predictions": predictions}, {"k": int(k)}, name=name,
                    prefix="InTopK_")


def _sort_like(op_type, prefix, fn):
    def wrapper(input, axis=-1, direction="ASCENDING", name=None):  # noqa: A002
        _check_blob(input, fn, "input")
        if direction not in ("ASCENDING", "DESCENDING"):
            raise ArgumentError(f"flow.{fn}: direction must be 'ASCENDING' or 'DESCENDING', received {direction!r}")
        x, perm = _to_last(input, axis, fn, name)
        out = build_op(op_type, {"in": x}, {"direction": direction}, name=name, prefix=prefix)
        return _from_last(out, perm, name)
    wrapper.__name__ = fn
    return wrapper


argsort = _sort_like("arg_sort", "ArgSort_", "argsort")
argsort.__doc__ = """Indices that sort ``input`` along ``axis`` (op ``arg_sort``, stable).

    An ``axis`` other than the last is transposed to the end and the result back
    (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/sort_ops.py``).

    Args:
        input: blob, any shape.
        axis: int in [-rank, rank).
        direction: ``"ASCENDING"`` or ``"DESCENDING"``.
        name: op name; default ``ArgSort_<n>``.

    Returns:
        BlobDesc: int32 blob of the shape of ``input``.

    Raises:
        ArgumentError: ``input`` is not a blob, ``axis`` is out of range or ``direction``
            is not one of the two strings.
    """
sort = _sort_like("sort", "Sort_", "sort")
sort.__doc__ = """``input`` sorted along ``axis`` (op ``sort``; no gradient).

    An ``axis`` other than the last is transposed to the end and the result back
    (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/sort_ops.py``).

    Args:
        input: blob, any shape.
        axis: int in [-rank, rank).
        direction: ``"ASCENDING"`` or ``"DESCENDING"``.
        name: op name; default ``Sort_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``input``.

    Raises:
        ArgumentError: ``input`` is not a blob, ``axis`` is out of range or ``direction``
            is not one of the two strings.
    """


# ----------------------------------------------------------------- clipping, norms, counts

def _integral_bound(v) -> int:
    """A clip bound as the int64 attr of an integer blob's clip: an infinite bound is int64's extreme."""
    return int(v) if _pymath.isfinite(v) else -2 ** 63 if v < 0 else 2 ** 63 - 1


def clip_by_value(values, min_value=None, max_value=None, name=None) -> BlobDesc:
    """Clamp ``values`` to [min_value, max_value]; either bound may be None.

    Op ``clip_by_scalar`` / ``clip_by_scalar_min`` / ``clip_by_scalar_max`` (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/math_ops.py``, ``oneflow/user/ops/clip_by_value_op.cpp``);
    floating dtypes use the ``floating_*`` attrs, integer dtypes the ``integral_*`` ones. Gradient: dy where the
    input lies within the bounds, else 0. Aliases: ``clamp``, ``clip``, ``clip_by_scalar``.

    Args:
        values: blob, any shape and numeric dtype.
        min_value: Python number or None.
        max_value: Python number or None.
        name: op name; default ``ClipByValue_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``values``.

    Raises:
        ArgumentError: ``values`` is not a blob, a bound is neither a number nor None, both
            bounds are None, or ``min_value > max_value``.
    """
    _check_blob(values, "clip_by_value", "values")
    for arg, v in (("min_value", min_value), ("max_value", max_value)):
        if v is not None and (not _is_number(v) or _pymath.isnan(v)):
            raise ArgumentError(f"flow.math.clip_by_value: {arg} expects a Python number (not NaN) or None, "
                                f"received {v!r}")
    if min_value is None and max_value is None:
        raise ArgumentError("flow.math.clip_by_value: min_value and max_value cannot both be None")
    attrs = {}
    if min_value is not None:
        attrs.update(floating_min=float(min_value), integral_min=_integral_bound(min_value))
    if max_value is not None:
        attrs.update(floating_max=float(max_value), integral_max=_integral_bound(max_value))
    if min_value is not None and max_value is not None:
        if min_value > max_value:
            raise ArgumentError(f"flow.math.clip_by_value: min_value {min_value} > max_value {max_value}")
        op_type = "clip_by_scalar"
    else:
        op_type = "clip_by_scalar_min" if min_value is not None else "clip_by_scalar_max"
    return build_op(op_type, {"x": values}, attrs, outputs=("y",), name=name, prefix="ClipByValue_")


clamp = clip = clip_by_scalar = clip_by_value


def l2_normalize(input, axis=None, epsilon=1e-12, name=None) -> BlobDesc:  # noqa: A002
    """x / sqrt(max(sum(x ** 2, axis), epsilon)).

    Op ``l2_normalize``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        input: blob of a floating dtype, any shape of rank >= 1.
        axis: int in [-rank, rank), the dim normalized (None is rejected).
        epsilon: float, lower bound of the squared norm.
        name: op name; default ``L2Normalize_<n>``.

    Returns:
        BlobDesc: y, the shape and dtype of ``input`` (the op's ``square_x_sum`` output is not returned).

    Raises:
        ArgumentError: ``input`` is not a blob or ``axis`` is not an int in range.
    """
    _check_blob(input, "l2_normalize", "input")
    ndim = len(input.shape)
    if not is_int(axis) or not -ndim <= axis < ndim:
        raise ArgumentError(f"flow.math.l2_normalize: axis must be an int in [{-ndim}, {ndim}), received {axis!r}")
    epsilon = expect_number(epsilon, "flow.math.l2_normalize", "epsilon")
    y, _square_x_sum = build_op("l2_normalize", {"x": input}, {"axis": int(axis) % ndim, "epsilon": epsilon},
                                outputs=("y", "square_x_sum"), name=name, prefix="L2Normalize_")
    return y


def square_sum(x, name=None) -> BlobDesc:
    """sum(x ** 2) over all elements.

    Op ``square_sum``; no gradient function; OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        x: blob of a floating dtype, any shape.
        name: op name; default ``SquareSum_<n>``.

    Returns:
        BlobDesc: shape (1,), the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob.
    """
    _check_blob(x, "square_sum", "x")
    return build_op("square_sum", {"x": x}, outputs=("y",), name=name, prefix="SquareSum_")


def count_not_finite(x, name=None) -> BlobDesc:
    """Number of NaN/Inf elements of ``x``.

    Op ``count_not_finite``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        x: blob of a floating dtype, any shape.
        name: op name; default ``CountNotFinite_<n>``.

    Returns:
        BlobDesc: int64, shape (1,).

    Raises:
        ArgumentError: ``x`` is not a blob.
    """
    _check_blob(x, "count_not_finite", "x")
    return build_op("count_not_finite", {"x": x}, outputs=("y",), name=name, prefix="CountNotFinite_")


def multi_count_not_finite(x=None, name=None) -> BlobDesc:
    """Number of NaN/Inf elements over a list of blobs.

    Op ``multi_count_not_finite``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/math_ops.py``.

    Args:
        x: non-empty list of blobs of floating dtypes, any shapes.
        name: op name; default ``MultiCountNotFinite_<n>``.

    Returns:
        BlobDesc: int64, shape (1,).

    Raises:
        ArgumentError: ``x`` is None/empty or an item is not a blob.
    """
    blobs = list(x or [])
    if not blobs:
        raise ArgumentError("flow.multi_count_not_finite: x must be a non-empty list of blobs")
    for i, b in enumerate(blobs):
        _check_blob(b, "multi_count_not_finite", f"x[{i}]")
    return build_op("multi_count_not_finite", {"x": blobs}, outputs=("y",), name=name,
                    prefix="MultiCountNotFinite_")


# ----------------------------------------------------------------- selection

def _scalar_side(value, prefix=""):
    a = _scalar_attrs(value)
    return {f"has_{prefix}int_operand": a["has_int_operand"], f"has_{prefix}float_operand": a["has_float_operand"],
            f"{prefix}int_operand": a["int_operand"], f"{prefix}float_operand": a["float_operand"]}


def where(condition, x=None, y=None, name=None) -> BlobDesc:
    """Select ``x`` where ``condition`` is non-zero, else ``y``; with neither, the non-zero indices.

    Op ``where`` (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``,
    ``oneflow/user/ops/where_op.cpp``); gradients through ``zero_like`` + ``where``. A Python
    number for ``x`` and/or ``y`` uses ``where_scalar_x`` / ``where_scalar_y`` /
    ``where_scalar_xy`` (no gradient for the blob side). With ``x`` and ``y`` both None it
    returns ``flow.argwhere(condition)``.

    Args:
        condition: integer or bool blob, broadcastable with ``x`` and ``y``.
        x: blob or Python number, the value where ``condition`` is non-zero.
        y: blob or Python number (same dtype as ``x``), the value elsewhere.
        name: op name; default ``Where_<n>`` (``WhereScalarX_<n>`` ...).

    Returns:
        BlobDesc: shape ``broadcast(condition, x, y)``, the dtype of ``x``/``y``; or, with
        neither given, ``argwhere``'s int32 (num_nonzero, rank) dynamic blob.

    Raises:
        ArgumentError: ``condition`` is not a blob, only one of ``x``/``y`` is given, or
            ``x``/``y`` is neither a blob nor a number.
        JobBuildError: the shapes do not broadcast or the dtypes of ``x`` and ``y`` differ.
    """
    _check_blob(condition, "where", "condition")
    if x is None and y is None:
        return argwhere(condition, name=name)
    if x is None or y is None:
        raise ArgumentError("flow.where: x and y must both be given, or both be None")
    _check_blob_or_number(x, "where", "x")
    _check_blob_or_number(y, "where", "y")
    if isinstance(x, BlobDesc) and isinstance(y, BlobDesc):
        return build_op("where", {"condition": condition, "x": x, "y": y}, name=name, prefix="Where_")
    if isinstance(y, BlobDesc):
        return build_op("where_scalar_x", {"condition": condition, "y": y}, _scalar_attrs(x), name=name,
                        prefix="WhereScalarX_")
    if isinstance(x, BlobDesc):
        return build_op("where_scalar_y", {"condition": condition, "x": x}, _scalar_attrs(y), name=name,
                        prefix="WhereScalarY_")
    return build_op("where_scalar_xy", {"condition": condition}, {**_scalar_side(x, "x_"), **_scalar_side(y, "y_")},
                    name=name, prefix="WhereScalarXY_")


def masked_fill(x, mask, value, name=None) -> BlobDesc:
    """``x`` with ``value`` where ``mask`` is non-zero.

    A ``constant_like`` of x (``<name>_ConstantLike``) selected by ``where``
    (``<name>_Where``), so the gradient reaches x where the mask is 0 (as
    ``torch.Tensor.masked_fill``).

    Args:
        x: blob, any shape.
        mask: integer or bool blob broadcastable to ``x``.
        value: Python number.
        name: prefix of the two ops; default ``MaskedFill_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``mask`` is not a blob, or ``value`` is not a number.
    """
    _blob_pair("masked_fill", x, mask)
    if not _is_number(value):
        raise ArgumentError(f"flow.masked_fill: value expects a Python number, received {value!r}")
    name = name or unique_str("MaskedFill_")
    filled = _array.constant_like(x, value, name=name + "_ConstantLike")
    return where(mask, filled, x, name=name + "_Where")


def _fill_attrs(value, kind, attrs):
    if not _is_number(value):
        raise ArgumentError(f"{kind}_value expects a Python number, received {value!r}")
    is_float = not is_int(value)  # (numpy floats too: they are not Python floats)
    attrs.update({f"is_floating_{kind}_value": is_float,
                  f"floating_{kind}_value": float(value) if is_float else 0.0,
                  f"integer_{kind}_value": 0 if is_float else int(value)})
    return attrs


def tril(x, diagonal=0, fill_value=0, name=None) -> BlobDesc:
    """Lower triangle of the last two dims of ``x`` (op ``tril``; gradient ``tril`` of dy).

    Elements with column - row <= ``diagonal`` are kept, the others become ``fill_value``
    (as ``torch.tril``; OneFlow v0.6.0 ``oneflow/user/ops/tril_op.cpp``).

    Args:
        x: blob of rank >= 2, (..., M, N).
        diagonal: int; 0 the main diagonal, > 0 above it, < 0 below.
        fill_value: Python int or float put above the diagonal.
        name: op name; default ``Tril_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob, ``diagonal`` not an int or ``fill_value`` not a number.
    """
    _check_blob(x, "tril", "x")
    attrs = _fill_attrs(fill_value, "fill", {"diagonal": expect_int(diagonal, "flow.math.tril", "diagonal")})
    return build_op("tril", {"in": x}, attrs, name=name, prefix="Tril_")


def fused_scale_tril(x, diagonal=0, fill_value=0, scale=1, name=None) -> BlobDesc:
    """``scale * x`` on and below ``diagonal`` of the last two dims, ``fill_value`` above.

    Op ``fused_scale_tril`` (OneFlow v0.6.0 ``oneflow/user/ops/tril_op.cpp``).

    Args:
        x: blob of rank >= 2, (..., M, N).
        diagonal: int; 0 the main diagonal, > 0 above it, < 0 below.
        fill_value: Python int or float put above the diagonal.
        scale: Python int or float multiplying the kept elements.
        name: op name; default ``FusedScaleTril_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob, ``diagonal`` not an int, or ``fill_value``/``scale``
            not a number.
    """
    _check_blob(x, "fused_scale_tril", "x")
    attrs = _fill_attrs(fill_value, "fill", {"diagonal": expect_int(diagonal, "flow.math.fused_scale_tril",
                                                                    "diagonal")})
    _fill_attrs(scale, "scale", attrs)
    return build_op("fused_scale_tril", {"in": x}, attrs, name=name, prefix="FusedScaleTril_")


def _attach_blob_operators():
    """Give ``BlobDesc`` its Python operators: each builds the ``flow.math`` op of the same
    meaning (comparisons give int8 blobs, as OneFlow's blobs do; compare handles with ``is``)."""
    binary = {"__add__": add, "__sub__": subtract, "__mul__": multiply, "__truediv__": divide, "__pow__": pow,
              "__mod__": mod, "__eq__": equal, "__ne__": not_equal, "__lt__": less, "__le__": less_equal,
              "__gt__": greater, "__ge__": greater_equal}
    reflected = {"__radd__": add, "__rsub__": subtract, "__rmul__": multiply, "__rtruediv__": divide}
    for name, fn in binary.items():
        setattr(BlobDesc, name, lambda self, other, fn=fn: fn(self, other))
    for name, fn in reflected.items():
        setattr(BlobDesc, name, lambda self, other, fn=fn: fn(other, self))
    BlobDesc.__neg__ = lambda self: negative(self)
    BlobDesc.__abs__ = lambda self: abs(self)


_attach_blob_operators()
