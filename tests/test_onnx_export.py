"""ONNX export (``flow.onnx.export``) checked by running the files in onnxruntime.

Every op type with an ``onnx`` converter has a case below (the first test fails when a
converter is added without one): each draw builds a one-op predict job from the AutoTest
generators, exports it and compares onnxruntime's result with graphfront's. LeNet and a
ResNet-style job (convolutions, inference batch norm, residual adds, a mean) are checked
whole, from a job function and from a saved model.
"""
import base64
import importlib.util
import inspect
import os
import typing

import numpy as np
import pytest

import onnx
import onnxruntime as ort

import graphfront as flow
from graphfront import typing as tp
from graphfront.onnx import OnnxExportError, convertible_op_types
from graphfront.ops import registry
from graphfront.ops.builder import build_op
from graphfront.ops.nn_ops import pool_geometry
from graphfront.ops.pool_ops import pool_out_size
from graphfront.testing.generators import (NOTHING, DrawContext, TensorValue, nothing, oneof, random, random_bool,
                                           random_tensor)
from lenet import lenet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the ResNet-style network of examples/resnet_bn/train.py, loaded under its own name
_spec = importlib.util.spec_from_file_location("resnet_bn_train", os.path.join(ROOT, "examples", "resnet_bn", "train.py"))
_resnet_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_resnet_module)
resnet = _resnet_module.resnet

DRAWS = 3


def t(*dims, low=-1.0, high=1.0, dtype=float):
    return random_tensor(len(dims), *dims, low=low, high=high, dtype=dtype, requires_grad=False)


def _unary(low=-1.0, high=1.0, arg="x"):
    return lambda: ({arg: t(2, random(1, 5).to(int), 3, low=low, high=high)}, {})


_POSITIVE = dict(low=0.5, high=2.0)
_UNIT = dict(low=-0.9, high=0.9)
_SCALAR = {"has_float_operand": True, "float_operand": random(-2.0, 2.0)}


def _binary():
    return lambda: ({"x": t(2, 3, 4), "y": oneof(t(3, 1), t(1, 4), t(2, 3, 4))}, {})


def _conv(n, data_format="channels_first"):
    """channels_last: input (N, *spatial, C), weight (O, *kernel, I / groups), grouped and dilated."""
    def case():
        spatial = [random(5, 8).to(int) for _ in range(n)]
        if data_format == "channels_first":
            return ({"in": t(2, 3, *spatial), "weight": t(4, 3, *[3] * n), "bias": t(4)},
                    {"filters": 4, "padding_before": [random(0, 2).to(int)] * n, "data_format": data_format,
                     "kernel_size": [3] * n, "strides": [random(1, 3).to(int)] * n, "dilation_rate": [1] * n,
                     "groups": 1})
        return ({"in": t(2, *spatial, 4), "weight": t(6, *[2] * n, 2), "bias": t(6)},
                {"filters": 6, "padding_before": [random(0, 2).to(int)] * n, "data_format": data_format,
                 "kernel_size": [2] * n, "strides": [random(1, 3).to(int)] * n, "dilation_rate": [2] * n,
                 "groups": 2})
    return case


def _int(*dims, low, high, dtype=int):
    return t(*dims, low=low, high=high, dtype=dtype)


def _cond(*dims):
    return _int(*dims, low=0, high=2, dtype=flow.int8)


_TIES = np.random.default_rng(0).integers(0, 3, (2, 3, 4)).astype(np.float32)
_FOLDED = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1
# fixed inputs for the special cases of an op (zeros, halves, the axes of atan2)
_ZEROS = np.array([[0.0, 2.0, -0.5], [0.0, 0.0, 4.0]], dtype=np.float32)
_HALVES = np.array([[0.5, 1.5, 2.5], [-0.5, -1.5, -2.5]], dtype=np.float32)
_ATAN2_X = np.array([[1.0, -1.0, 0.0, 0.0], [0.0, 0.0, 2.0, -3.0]], dtype=np.float32)
_ATAN2_Y = np.array([[0.0, 0.0, 0.0, -1.0], [1.0, -1.0, 0.0, 2.0]], dtype=np.float32)
_TIED_SCORES = np.array([[0.5, 0.5, 0.1, 0.5], [0.2, 0.1, 0.2, 0.3], [1.0, 1.0, 1.0, 1.0], [0.0, 0.3, 0.3, 0.1],
                         [0.4, 0.1, 0.4, 0.1]], dtype=np.float32)
_ZEROS_34 = np.array([[0.0, 0.5, 0.0, 1.0], [0.0, 0.0, 0.25, 0.0], [0.7, 0.0, 0.0, 0.0]], dtype=np.float32)
_NONFINITE_SCORES = np.array([[0.5, np.inf, 0.1, 0.5], [0.2, 0.1, 0.2, 0.3], [np.nan, 1.0, 1.0, 1.0],
                              [0.0, 0.3, -np.inf, 0.1], [0.4, 0.1, 0.4, 0.1]], dtype=np.float32)  # rows 0, 2, 3 -> 0
_NONFINITE = np.array([[np.inf, 1.0, np.nan], [-np.inf, 0.0, np.nan]], dtype=np.float32)
_REDUCE_ATTRS = {"axis": oneof([0], [1, 2], [-1], [0, 1, 2]), "keepdims": random_bool()}


def _act(arg="in", low=-3.0, high=3.0, **attrs):
    return lambda: ({arg: oneof(t(2, random(1, 5).to(int), 3, low=low, high=high),
                                t(2, 3, low=low, high=high, dtype=flow.double))}, attrs)


def _compare():
    """Integer operands (so that equal values occur), then float ones."""
    return (lambda: ({"x": _int(2, 3, 4, low=0, high=3),
                      "y": oneof(_int(3, 1, low=0, high=3), _int(2, 3, 4, low=0, high=3))}, {}),
            lambda: ({"x": t(2, 3, 4, low=-1.0, high=1.0), "y": oneof(t(3, 1), t(2, 3, 4, low=0.0, high=0.0))}, {}))


def _scalar_compare():
    return lambda: ({"in": oneof(t(2, 3, low=-2, high=2), _int(2, 3, low=-2, high=3))},
                    {"has_int_operand": random_bool(), "has_float_operand": True, "int_operand": oneof(0, 1),
                     "float_operand": oneof(0.0, 0.5, 1.0)})


def _torch_pool(n, kind):
    def case():
        k = random(2, 4).to(int)
        attrs = {"data_format": oneof("channels_first", "channels_last"), "kernel_size": [k] * n,
                 "stride": [random(1, 3).to(int)] * n, "padding": [oneof(0, 1)] * n, "ceil_mode": random_bool()}
        if kind == "max":
            attrs.update(dilation=[oneof(1, 2)] * n, return_indices=False)
        else:
            attrs.update(count_include_pad=random_bool(), divisor_override=oneof(0, 0, 3))
        # every dim but the batch is >= 5, so that either data_format fits a dilated window
        return {"x": t(2, *[random(5, 8).to(int) for _ in range(n + 1)])}, attrs
    return case


def _deconv(n, data_format="channels_first", groups=1):
    def case():
        spatial = [random(2, 5).to(int) for _ in range(n)]
        k = [oneof(2, 3)] * n
        first = data_format == "channels_first"
        return ({"in": t(2, 4, *spatial) if first else t(2, *spatial, 4),
                 "weight": t(4, 6 // groups, *k) if first else t(4, *k, 6 // groups)},
                {"filters": 6, "padding_before": [oneof(0, 1)] * n, "data_format": data_format,
                 "kernel_size": k, "strides": [2] * n, "output_padding": [oneof(0, 1)] * n,
                 "dilation_rate": [oneof(1, 2)] * n, "groups": groups})
    return case


def _pool(n, data_format="channels_first"):
    def case():
        spatial = [random(4, 9).to(int) for _ in range(n)]
        return ({"x": t(1, 2, *spatial) if data_format == "channels_first" else t(1, *spatial, 3)},
                {"padding": oneof("valid", "same_lower", "same_upper"), "padding_before": [0] * n,
                 "padding_after": [0] * n, "data_format": data_format,
                 "pool_size": [random(2, 4).to(int)] * n, "strides": [random(1, 3).to(int)] * n, "ceil_mode": False})
    return case


def _fused_pool(n):
    def case():
        inputs, attrs = _pool(n)()
        return ({"x": t(2, *[random(4, 9).to(int) for _ in range(n + 1)])},
                dict(attrs, data_format=oneof("channels_first", "channels_last"), relu=random_bool(),
                     padding=oneof("valid", "same_lower", "same_upper", "customized"),
                     padding_before=[oneof(0, 1)] * n, padding_after=[oneof(0, 1)] * n, ceil_mode=random_bool()))
    return case


CASES = {
    "relu": _unary(), "sigmoid": _unary(arg="in"), "sigmoid_v2": _unary(), "tanh": _unary(), "exp": _unary(),
    "abs": _unary(), "negative": _unary(), "ceil": _unary(low=-3, high=3), "floor": _unary(low=-3, high=3),
    "sign": _unary(), "sin": _unary(), "cos": _unary(), "tan": _unary(), "sinh": _unary(), "cosh": _unary(),
    "atan": _unary(), "asinh": _unary(), "erf": _unary(), "softplus": _unary(),
    "log": _unary(**_POSITIVE), "sqrt": _unary(**_POSITIVE), "reciprocal": _unary(**_POSITIVE),
    "asin": _unary(**_UNIT), "acos": _unary(**_UNIT),
    "scalar_add": lambda: ({"in": t(2, 3)}, _SCALAR), "scalar_mul": lambda: ({"in": t(2, 3)}, _SCALAR),
    "add_n": lambda: ({"in": [t(2, 3), t(2, 3), t(2, 3)]}, {}),
    "broadcast_add": _binary(), "broadcast_sub": _binary(), "broadcast_mul": _binary(),
    "broadcast_maximum": _binary(), "broadcast_minimum": _binary(),
    "broadcast_div": lambda: ({"x": t(2, 3, 4), "y": t(3, 1, **_POSITIVE)}, {}),
    "broadcast_pow": lambda: ({"x": t(2, 3, 4, **_POSITIVE), "y": t(1, 4)}, {}),
    "reduce_sum": lambda: ({"input_tensor": t(2, 3, 4)},
                           {"axis": oneof([0], [1, 2], [-1], [0, 1, 2]), "keepdims": random_bool()}),
    "cast": lambda: ({"in": t(2, 3, low=-5, high=5)}, {"dtype": oneof(flow.double, flow.int32)}),
    "concat": lambda: ({"in": [t(2, 3, 4), t(2, 3, 4)]}, {"axis": oneof(0, 1, 2, -1), "max_dim_size": 8}),
    "reshape": lambda: ({"in": t(2, 3, 4)}, {"shape": oneof((4, 6), (24,), (2, 12))}),
    "flatten": lambda: ({"in": t(2, 3, 4)}, {"start_dim": oneof(0, 1), "end_dim": -1}),
    "transpose": lambda: ({"input": t(2, 3, 4)}, {"perm": oneof([2, 0, 1], [1, 0, 2], [0, 2, 1])}),
    "softmax": lambda: ({"in": t(3, 5, low=-3, high=3)}, {}),
    "bias_add": lambda: ({"a": t(2, 3, 4, 5), "b": t(3)}, {"axis": 1}),
    "matmul": lambda: ({"a": t(3, 4), "b": t(4, 5)}, {"transpose_a": False, "transpose_b": False,
                                                      "alpha": oneof(1.0, 0.5)}),
    "batch_matmul": lambda: ({"a": t(2, 4, 3), "b": t(2, 5, 4)}, {"transpose_a": True, "transpose_b": True,
                                                                  "alpha": 1.0}),
    "broadcast_matmul": lambda: ({"a": t(2, 3, 4), "b": t(5, 4)}, {"transpose_b": True}),
    # the channels_last cases: between Transposes to and from NCHW (ONNX Conv / pooling are NCHW)
    **{f"conv{n}d": (_conv(n), _conv(n, "channels_last")) for n in (1, 2, 3)},
    **{f"tf_{kind}_pool_{n}d": (_pool(n), _pool(n, "channels_last")) for kind in ("max", "avg") for n in (1, 2, 3)},
    # identities, constants and shape ops
    "identity": _unary(arg="in"), "amp_white_identity": _unary(arg="in"), "parallel_cast": _unary(arg="in"),
    "tuple_identity": lambda: ({"in": [t(2, 3), _int(4, low=-3, high=3)]}, {}),
    "folded_constant": lambda: ({}, {"shape": (2, 3), "dtype": flow.float,
                                     "data": base64.b64encode(_FOLDED.tobytes()).decode("ascii")}),
    "constant": lambda: ({}, {"floating_value": random(-2.0, 2.0), "integer_value": random(-5, 5).to(int),
                              "is_floating_value": random_bool(), "dtype": oneof(flow.float, flow.double),
                              "shape": (2, 3)}),
    "arange": (lambda: ({}, {"float_start": random(-2.0, 2.0), "float_delta": oneof(0.1, 0.3, 0.7), "float_limit": 2.5,
                             "dtype": oneof(flow.float, flow.double)}),
               lambda: ({}, {"integer_start": -3, "integer_delta": oneof(1, 2), "integer_limit": 7,
                             "dtype": oneof(flow.int32, flow.int64)})),
    "eye": lambda: ({}, {"rows": oneof(2, 3), "cols": oneof(3, 4), "dtype": oneof(flow.float, flow.int64)}),
    "zero_like": lambda: ({"like": t(2, 3)}, {}), "ones_like": lambda: ({"x": _int(2, 3, low=-3, high=3)}, {}),
    "cast_like": lambda: ({"in": t(2, 3, low=-5, high=5),
                           "dtype_like": oneof(_int(1, low=0, high=2, dtype=flow.int32), t(1, dtype=flow.double))}, {}),
    "reshape_like": lambda: ({"in": t(2, 3, 4), "like": oneof(t(4, 6), t(24))}, {}),
    "squeeze": lambda: ({"in": t(2, 1, 3, 1)}, {"axes": oneof([1], [3], [1, -1])}),
    "expand_dims": lambda: ({"in": t(2, 3)}, {"axis": oneof(0, 1, 2, -1, -3)}),
    "expand": lambda: ({"in": t(3, 1)}, {"logical_in_shape": [3, 1],
                                         "logical_expand_shape": oneof([3, 4], [2, 3, 4], [2, -1, 5])}),
    "broadcast_like": lambda: ({"x": oneof(t(3), t(1, 3, 1)), "like": t(2, 3, 4)}, {"broadcast_axes": [0, 2]}),
    "narrow": lambda: ({"in": t(4, 5)}, {"dim": oneof(0, 1, -1), "start": oneof(0, 1, -2), "length": oneof(1, 2)}),
    "slice": lambda: ({"x": t(5, 6)}, {"start": oneof([0, 1], [-1, 5], [4, 0]), "stop": oneof([5, 6], [-6, -7], [0, 3]),
                                       "step": oneof([1, 2], [-1, 1], [-2, -1])}),
    "roll": (lambda: ({"in": t(3, 4, 5)}, {"shifts": oneof([1], [-13], [61]), "dims": []}),
             lambda: ({"in": t(3, 4, 5)}, {"shifts": oneof([-2, 7], [5, 0]), "dims": oneof([1, 2], [-1, 0])})),
    "slice_update": (lambda: ({"x": t(5, 6), "update": t(3, 3)}, {"start": [0, 1], "stop": [5, 6], "step": [2, 2]}),
                     lambda: ({"x": _int(5, 6, low=-3, high=3), "update": _int(2, 6, low=-3, high=3)},
                              {"start": [-1, 5], "stop": [-4, -7], "step": [-2, -1]})),
    "flip": lambda: ({"x": t(2, 3, 4)}, {"dims": oneof([0], [1, 2], [-1])}),
    "split_like": lambda: ({"in": t(2, 7), "like": [t(2, 3), t(2, 4)]}, {"axis": oneof(1, -1)}),
    "pad": lambda: ({"x": oneof(t(2, 3), _int(2, 3, low=-3, high=3))},
                    {"padding_before": oneof([0, 1], [2, 0]), "padding_after": oneof([1, 1], [0, 2]),
                     "floating_constant_value": random(-1.0, 1.0), "integral_constant_value": random(-3, 3).to(int)}),
    "constant_pad1d": lambda: ({"x": t(2, 3, 5)}, {"padding": oneof([1, 2], [0, 3]), "floating_value": random(-1.0, 1.0)}),
    "constant_pad2d": lambda: ({"x": oneof(t(1, 2, 4, 5), _int(1, 2, 4, 5, low=-3, high=3))},
                               {"padding": oneof([1, 0, 2, 1], [0, 2, 0, 0]), "floating_value": random(-1.0, 1.0),
                                "integral_value": random(-3, 3).to(int)}),
    "constant_pad3d": lambda: ({"x": t(1, 2, 3, 4, 5)}, {"padding": [1, 0, 2, 1, 0, 1], "floating_value": 0.5}),
    "reflection_pad2d": lambda: ({"x": t(1, 2, 4, 5)}, {"padding": oneof([1, 2, 3, 0], [0, 4, 1, 1])}),
    "replication_pad2d": lambda: ({"x": t(1, 2, 4, 5)}, {"padding": oneof([1, 2, 3, 0], [0, 6, 1, 1])}),
    # gathers: some indices out of range (zeros, as the kernels)
    "gather": lambda: ({"in": t(4, 5), "indices": oneof(_int(3, low=-2, high=6), _int(2, 2, low=0, high=4, dtype=flow.int32))},
                       {"axis": oneof(0, 1, -1)}),
    "batch_gather": lambda: ({"in": t(2, 5, 3), "indices": _int(2, 4, low=-1, high=6)}, {}),
    "gather_nd": lambda: ({"params": t(4, 5, 3), "indices": oneof(_int(6, 2, low=-1, high=6), _int(2, 3, 1, low=0, high=4))},
                          {}),
    "dim_gather": lambda: ({"input": t(3, 4), "index": oneof(_int(3, 2, low=0, high=3), _int(2, 4, low=0, high=3))},
                           {"dim": oneof(0, 1, -1)}),
    "one_hot": lambda: ({"indices": _int(5, low=-1, high=5)},
                        {"depth": 4, "floating_on_value": random(0.5, 2.0), "floating_off_value": random(-1.0, 0.0),
                         "integer_on_value": 7, "integer_off_value": -1, "dtype": oneof(flow.float, flow.int32)}),
    "where": lambda: ({"condition": _cond(2, 3), "x": t(2, 3), "y": oneof(t(1, 3), t(2, 3))}, {}),
    "where_scalar_x": lambda: ({"condition": _cond(2, 3), "y": t(2, 3)}, _SCALAR),
    "where_scalar_y": lambda: ({"condition": _cond(2, 3), "x": oneof(t(2, 3), _int(2, 3, low=-3, high=3))}, _SCALAR),
    "where_scalar_xy": lambda: ({"condition": _cond(2, 3)},
                                {"has_x_float_operand": True, "x_float_operand": random(-2.0, 2.0),
                                 "has_y_int_operand": True, "y_int_operand": 3}),
    "masked_fill": lambda: ({"x": t(2, 3), "mask": oneof(_cond(2, 3), _cond(1, 3))}, _SCALAR),
    "tril": lambda: ({"in": t(2, 4, 5)}, {"diagonal": oneof(-1, 0, 2), "floating_fill_value": random(-1.0, 1.0),
                                           "is_floating_fill_value": True}),
    "fused_scale_tril": lambda: ({"in": oneof(t(2, 4, 5), _int(3, 3, low=-3, high=3))},
                                 {"diagonal": oneof(-1, 0, 2), "floating_fill_value": random(-1.0, 1.0),
                                  "is_floating_fill_value": random_bool(), "integer_fill_value": -2,
                                  "floating_scale_value": random(-2.0, 2.0), "is_floating_scale_value": random_bool(),
                                  "integer_scale_value": 3}),
    "triu": lambda: ({"in": oneof(t(4, 5), _int(2, 3, 3, low=-3, high=3))}, {"diagonal": oneof(-1, 0, 2)}),
    # ties (integer inputs) check that equal values keep their index order
    "argmax": lambda: ({"in": oneof(t(3, 5), _int(2, 3, 5, low=0, high=3), t(5))}, {}),
    "sort": lambda: ({"in": oneof(t(3, 6), _int(3, 6, low=0, high=3))}, {"direction": oneof("ASCENDING", "DESCENDING")}),
    "arg_sort": lambda: ({"in": oneof(t(3, 6), _int(3, 6, low=0, high=3))}, {"direction": oneof("ASCENDING", "DESCENDING")}),
    # unary math and activations
    "acosh": _unary(low=1.1, high=3.0), "atanh": _unary(**_UNIT), "rsqrt": _unary(**_POSITIVE), "square": _unary(),
    "erfc": _unary(low=-3.0, high=3.0), "expm1": _unary(), "log1p": _unary(low=-0.5, high=2.0),
    "log2": _unary(**_POSITIVE), "log_sigmoid": _unary(low=-5.0, high=5.0),
    "rint": lambda: ({"x": oneof(t(2, 3, low=-3, high=3), _HALVES)}, {}),
    "round": lambda: ({"x": oneof(t(2, 3, low=-3, high=3), _HALVES)}, {}),
    "reciprocal_no_nan": lambda: ({"x": oneof(t(2, 3), _ZEROS)}, {}),
    # onnxruntime has no double kernel of Erf and Softplus: gelu and mish are run in float only
    "gelu": _unary(low=-3.0, high=3.0, arg="in"), "mish": _unary(low=-3.0, high=3.0, arg="in"),
    "log_softmax": _act(), "hardsigmoid": _act(low=-5.0, high=5.0), "hardswish": _act(low=-5.0, high=5.0),
    "silu": _act(), "softsign": _act(), "selu": _act(),
    "leaky_relu": _act("x", alpha=random(0.0, 0.5)), "elu": _act(alpha=random(0.1, 2.0)),
    "celu": _act(alpha=oneof(0.5, 1.0, 2.0)),
    "hardtanh": _act(min_val=random(-2.0, -0.5), max_val=random(0.5, 2.0)),
    "prelu": lambda: ({"x": t(2, 3, 4), "alpha": oneof(t(3), t(1))}, {}),
    "tf_prelu": lambda: ({"x": t(2, 3, 4), "alpha": oneof(t(3, 4), t(1, 4))}, {}),
    "fused_bias_add_gelu": lambda: ({"a": t(2, 3, 4), "b": t(3)}, {"axis": 1}),
    "fused_bias_add_relu": lambda: ({"a": t(2, 3, 4), "b": t(4)}, {"axis": 2}),
    "fused_matmul_bias": lambda: ({"x": t(3, 4), "weight": t(5, 4), "bias": t(5), "_add_to_output": oneof(t(3, 5), nothing())},
                                  {}),
    "fused_scalar_mul_add": lambda: ({"in": t(2, 3)}, {"scale": random(-2.0, 2.0), "shift": random(-2.0, 2.0)}),
    # binary math
    "multiply": lambda: ({"x": t(2, 3), "y": t(2, 3)}, {}),
    "elementwise_maximum": lambda: ({"x": t(2, 3), "y": t(2, 3)}, {}),
    "elementwise_minimum": lambda: ({"x": t(2, 3), "y": t(2, 3)}, {}),
    "pow": lambda: ({"x": t(2, 3, **_POSITIVE), "y": t(2, 3, low=-2.0, high=2.0)}, {}),
    "atan2": lambda: ({"x": oneof(t(2, 4), _ATAN2_X), "y": oneof(t(2, 4), _ATAN2_Y)}, {}),
    "floordiv": lambda: ({"x": t(2, 3, low=-5.0, high=5.0), "y": oneof(t(2, 3, **_POSITIVE), t(2, 3, low=-2.0, high=-0.5))},
                         {}),
    "xdivy": lambda: ({"x": oneof(t(2, 3), _ZEROS), "y": t(2, 3, **_POSITIVE)}, {}),
    "xlogy": lambda: ({"x": oneof(t(2, 3), _ZEROS), "y": t(2, 3, **_POSITIVE)}, {}),
    "scalar_pow": lambda: ({"in": t(2, 3, **_POSITIVE)}, _SCALAR),
    "scalar_floordiv": lambda: ({"in": oneof(t(2, 3, low=-5.0, high=5.0), _int(2, 3, low=-7, high=8))},
                                {"has_int_operand": random_bool(), "has_float_operand": True, "int_operand": oneof(3, -2),
                                 "float_operand": oneof(2.5, -1.5)}),
    "clip_by_scalar": lambda: ({"x": oneof(t(2, 3), _int(2, 3, low=-5, high=5))},
                               {"floating_min": -0.5, "floating_max": 0.5, "integral_min": -2, "integral_max": 3}),
    "clip_by_scalar_min": lambda: ({"x": oneof(t(2, 3), _int(2, 3, low=-5, high=5))},
                                   {"floating_min": random(-1.0, 1.0), "integral_min": -2}),
    "clip_by_scalar_max": lambda: ({"x": oneof(t(2, 3), _int(2, 3, low=-5, high=5))},
                                   {"floating_max": random(-1.0, 1.0), "integral_max": 3}),
    **{f"broadcast_{k}": _compare() for k in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                                              "logical_and", "logical_or", "logical_xor")},
    **{f"scalar_logical_{k}": _scalar_compare() for k in ("equal", "not_equal", "greater", "greater_equal", "less",
                                                          "less_equal", "and", "or", "xor")},
    "broadcast_floor_mod": (lambda: ({"x": t(2, 3, 4, low=-5.0, high=5.0),
                                      "y": oneof(t(3, 1, **_POSITIVE), t(1, 4, low=-2.0, high=-0.5))}, {}),
                            lambda: ({"x": _int(2, 3, 4, low=-7, high=8), "y": oneof(_int(3, 1, low=1, high=4),
                                                                                     _int(1, 4, low=-3, high=0))}, {})),
    "broadcast_fmod": lambda: ({"x": t(2, 3, 4, low=-5.0, high=5.0),
                                "y": oneof(t(3, 1, **_POSITIVE), t(1, 4, low=-2.0, high=-0.5))}, {}),
    "scalar_fmod": lambda: ({"in": oneof(t(2, 3, low=-5.0, high=5.0), _int(2, 3, low=-7, high=8))},
                            {"has_int_operand": random_bool(), "has_float_operand": True, "int_operand": oneof(3, -2),
                             "float_operand": oneof(2.5, -1.5)}),
    **{f"scalar_{k}_by_tensor": lambda: ({"x": t(2, 3), "scalar": oneof(t(1), t(1, 1, low=0.5, high=2.0))}, {})
       for k in ("add", "sub", "mul", "div")},
    "hierarchical_parallel_cast": _unary(arg="in"),
    # reductions
    "reduce_max": lambda: ({"input_tensor": t(2, 3, 4)}, _REDUCE_ATTRS),
    "reduce_min": lambda: ({"input_tensor": t(2, 3, 4)}, _REDUCE_ATTRS),
    "reduce_prod": lambda: ({"input_tensor": t(2, 3, 4, low=0.5, high=1.5)}, _REDUCE_ATTRS),
    "combined_margin_loss": lambda: ({"x": t(4, 5, low=-0.95, high=0.95), "label": np.array([0, 4, -1, 5], np.int32)},
                                     {"m1": oneof(1.0, 0.3), "m2": oneof(0.0, 0.5), "m3": oneof(0.0, 0.4), "depth": 5}),
    "combined_margin_loss_grad": lambda: ({"dy": t(4, 5), "label": np.array([2, -1, 4, 0], np.int32),
                                           "theta": t(4, low=0.3, high=2.8)},
                                          {"m1": oneof(1.0, 1.35), "m2": oneof(0.0, 0.5), "m3": 0.0, "depth": 5}),
    # two-stage reductions: ties on an integer grid; counts >= 1
    **{f"reduce_{k}_device_stage": lambda: ({"in": _TIES}, {"axis": oneof([0], [1, 2], [0, 1, 2])})
       for k in ("max", "min")},
    **{f"reduce_{k}_global_stage": lambda: ({"in": _TIES, "device_count": _int(2, 3, 4, low=1, high=4, dtype=flow.int32)},
                                            _REDUCE_ATTRS) for k in ("max", "min")},
    **{f"reduce_{k}_device_stage_grad": lambda: ({"out_diff": t(2, 1, 1), "mask": _cond(2, 3, 4),
                                                  "count": _int(2, 1, 1, low=1, high=4, dtype=flow.int32)}, {"axis": [1, 2]})
       for k in ("max", "min")},
    **{f"reduce_{k}_global_stage_grad": lambda: (
        {"out_diff": t(3), "mask": np.ones((2, 3, 4), np.int8), "device_count": _int(2, 3, 4, low=1, high=4, dtype=flow.int32)},
        {"axis": [0, 2], "keepdims": False}) for k in ("max", "min")},
    "reduce_any": lambda: ({"input_tensor": oneof(_int(2, 3, 4, low=0, high=2), t(2, 3, 4))}, _REDUCE_ATTRS),
    "reduce_all": lambda: ({"input_tensor": oneof(_int(2, 3, 4, low=0, high=2), _int(2, 3, 4, low=1, high=3))},
                           _REDUCE_ATTRS),
    "reduce_sum_like": lambda: ({"x": t(2, 3, 4), "like": t(1, 3, 1)}, {"axis": oneof([0, 2], [-1, 0])}),
    "in_top_k": lambda: ({"targets": oneof(_int(5, low=0, high=4, dtype=flow.int32), _int(5, low=0, high=4)),
                          "predictions": oneof(t(5, 4), _TIED_SCORES, _NONFINITE_SCORES)}, {"k": oneof(1, 2, 3)}),
    "fused_cast_scale": lambda: ({"x": oneof(t(2, 3), _int(2, 3, low=-3, high=3)), "scale_by_tensor": t(1)},
                                 {"scale": random(-2.0, 2.0)}),
    "square_sum": lambda: ({"x": t(2, 3, 4)}, {}),
    "l2_normalize": lambda: ({"x": t(2, 3, 4)}, {"axis": oneof(0, 1, -1), "epsilon": oneof(1e-12, 1.0)}),
    # nn
    "layer_norm": (lambda: ({"x": t(2, 3, 4), "beta": t(4), "gamma": t(4)},
                            {"center": True, "scale": True, "begin_norm_axis": oneof(1, 2, -1), "begin_params_axis": 2,
                             "epsilon": oneof(1e-5, 0.1)}),
                   lambda: ({"x": t(2, 3, 4)}, {"begin_norm_axis": oneof(1, -1), "epsilon": 1e-5}),
                   lambda: ({"x": t(2, 3, 4), "gamma": t(3, 4)}, {"scale": True, "begin_norm_axis": 1,
                                                                  "begin_params_axis": 1, "epsilon": 1e-5})),
    **{f"maxpool_{n}d": _torch_pool(n, "max") for n in (1, 2, 3)},
    **{f"avgpool_{n}d": _torch_pool(n, "avg") for n in (1, 2, 3)},
    "adaptive_avg_pool1d": lambda: ({"x": t(2, 3, 6)}, {"output_size": oneof([3], [1], [6])}),
    "adaptive_avg_pool2d": lambda: ({"x": t(2, 3, 4, 6)}, {"output_size": oneof([2, 3], [1], [4, 2])}),
    "adaptive_avg_pool3d": lambda: ({"x": t(1, 2, 2, 4, 6)}, {"output_size": oneof([1, 2, 3], [1])}),
    "upsample": lambda: ({"x": t(1, 2, 3, 4)},
                         {"height_scale": oneof(2.0, 3.0, 1.5), "width_scale": oneof(2.0, 1.5),
                          "align_corners": random_bool(), "data_format": oneof("channels_first", "channels_last"),
                          "interpolation": oneof("nearest", "bilinear")}),
    **{f"deconv{n}d": (_deconv(n), _deconv(n, "channels_last"), _deconv(n, groups=2)) for n in (1, 2, 3)},
    **{f"fused_tf_max_pool_{n}d": _fused_pool(n) for n in (1, 2, 3)},
    "normalization": lambda: ({"x": t(2, 3, 4, 4), "moving_mean": t(3), "moving_variance": t(3, **_POSITIVE),
                               "gamma": t(3), "beta": t(3)}, {"axis": 1, "epsilon": 1e-5, "training": False}),
    # scatter-adds and segment sums: duplicate ids, some out of range (dropped, as the kernels)
    "scatter_nd": (lambda: ({"indices": _int(6, 2, low=-1, high=5), "updates": t(6, 3)}, {"shape": (4, 5, 3)}),
                   lambda: ({"indices": _int(2, 3, 1, low=0, high=4, dtype=flow.int32), "updates": t(2, 3, 5, 3)},
                            {"shape": (4, 5, 3)})),
    "scatter_nd_like": lambda: ({"like": t(4, 5), "indices": _int(7, 1, low=-1, high=5), "updates": t(7, 5)}, {}),
    "tensor_scatter_nd_add": (lambda: ({"params": t(4, 5), "updates": t(6), "indices": _int(6, 2, low=-1, high=5)}, {}),
                              lambda: ({"params": _int(4, 5, low=-3, high=3), "updates": _int(3, 5, low=-3, high=3),
                                        "indices": _int(3, 1, low=0, high=4, dtype=flow.int32)}, {})),
    # distinct in-range rows (which of duplicates wins is unspecified), plus out-of-range ones (skipped)
    "tensor_scatter_nd_update": (
        lambda: ({"params": t(4, 5), "updates": t(4, 5),
                  "indices": np.array([[3], [-1], [0], [4]], dtype=np.int64)}, {}),
        lambda: ({"params": _int(4, 5, low=-3, high=3), "updates": _int(3, low=-3, high=3),
                  "indices": np.array([[1, 4], [2, 0], [0, 5]], dtype=np.int32)}, {})),
    "unsorted_segment_sum": lambda: ({"data": oneof(t(2, 6, 3), _int(2, 6, 3, low=-3, high=3)),
                                      "segment_ids": _int(6, low=-1, high=5)},
                                     {"axis": oneof(1, -2), "num_segments": 4}),
    "unsorted_segment_sum_like": (lambda: ({"data": t(6, 2, 3), "segment_ids": _int(6, low=0, high=5),
                                            "like": t(4, 2, 3)}, {"axis": 0}),
                                  lambda: ({"data": t(2, 6, 2, 3), "segment_ids": _int(6, 2, low=-1, high=4),
                                            "like": t(2, 3, 3)}, {"axis": 1})),
    "unsorted_batch_segment_sum": lambda: ({"data": t(2, 3, 5, 4), "segment_ids": _int(2, 3, 5, low=-1, high=4)},
                                           {"num_segments": 3}),
    # in-range ids only (the kernel raises on others); an index smaller than like outside dim
    "dim_scatter_add_like": (lambda: ({"like": t(3, 4, 2), "index": _int(5, 3, 2, low=0, high=3), "src": t(5, 3, 2)},
                                      {"dim": 0}),
                             lambda: ({"like": t(3, 4, 2), "index": _int(2, 6, 2, low=0, high=4), "src": t(2, 6, 2)},
                                      {"dim": 1}),
                             lambda: ({"like": t(3, 4, 2), "index": _int(3, 4, 3, low=0, high=2), "src": t(3, 4, 3)},
                                      {"dim": -1})),
    "dim_scatter_add": (lambda: ({"input": t(3, 4, 2), "index": _int(5, 3, 2, low=0, high=3), "src": t(5, 3, 2)},
                                 {"dim": 0}),
                        lambda: ({"input": _int(3, 4, 2, low=-3, high=3), "index": _int(3, 2, 2, low=0, high=2),
                                  "src": _int(3, 2, 2, low=-3, high=3)}, {"dim": -1})),
    # ids distinct along dim (which of duplicates wins is unspecified)
    "dim_scatter_update": (lambda: ({"input": t(3, 4), "index": np.array([[2, 0, 3], [1, 3, 0]], dtype=np.int64),
                                     "src": t(2, 3)}, {"dim": 1}),
                           lambda: ({"input": _int(3, 2, low=-3, high=3), "src": _int(2, 2, low=-3, high=3),
                                     "index": np.array([[2, 0], [0, 1]], dtype=np.int32)}, {"dim": 0})),
    "diag": (lambda: ({"in": oneof(t(4), _int(3, low=-3, high=3))}, {"diagonal": oneof(0, 2, -1)}),
             lambda: ({"in": oneof(t(4, 5), _int(5, 3, low=-3, high=3))}, {"diagonal": oneof(0, 1, -2)})),
    # distinct random floats: on equal values ONNX TopK takes the lower index first, torch.topk has no fixed order
    "top_k": lambda: ({"in": oneof(t(3, 7), t(2, 2, 6, dtype=flow.double))},
                      {"k": oneof(1, 3, 9), "sorted": random_bool()}),
    "count_not_finite": lambda: ({"x": oneof(_NONFINITE, t(2, 3), _int(2, 3, low=-3, high=3))}, {}),
    "multi_count_not_finite": lambda: ({"x": [_NONFINITE, t(2, 3), _NONFINITE[::-1].copy()]}, {}),
    "multi_square_sum": (lambda: ({"x": [t(2, 3), t(4)]}, {}), lambda: ({"x": [t(5)]}, {})),
    "fused_bias_add_mask_scale": lambda: ({"a": t(2, 3, 4), "b": t(3), "mask": _cond(2, 3, 4),
                                           "_add_to_output": oneof(t(2, 3, 4), nothing())},
                                          {"axis": 1, "scale": random(0.5, 2.0)}),
    "fused_tril_scale_softmax_mask_scale": lambda: ({"x": t(2, 4, 5, low=-3, high=3), "mask": _cond(2, 4, 5)},
                                                    {"diagonal": oneof(-1, 0, 2), "tril_fill_value": oneof(0.0, -1e4),
                                                     "tril_scale_value": random(0.5, 2.0),
                                                     "mask_scale_value": random(1.0, 2.0)}),
    "fused_self_attention_query_mul_key_and_value": lambda: ({"hidden_states": t(4, 2, 18)},
                                                             {"head_size": oneof(3, 6), "alpha": random(0.1, 1.0)}),
    "argwhere": lambda: ({"input": oneof(_cond(3, 4), t(2, 3, low=0, high=0), _int(5, low=0, high=2))},
                         {"dtype": oneof(flow.int32, flow.int64)}),
    "unique_with_counts": lambda: ({"x": oneof(_int(8, low=0, high=4), _int(6, low=-2, high=2, dtype=flow.int32),
                                               np.array([0.5, -1.0, 0.5, 2.0, -1.0], dtype=np.float32))},
                                   {"out_idx": oneof(flow.int32, flow.int64)}),
    "cast_to_static_shape": lambda: ({"input": oneof(t(2, 3), _int(4, low=-3, high=3))}, {}),
    # losses (class ids in range: the kernels raise on others, onnxruntime fails on them)
    "softmax_cross_entropy": (lambda: ({"prediction": t(4, 5, low=-3, high=3), "label": t(4, 5, low=0, high=1)}, {}),
                              lambda: ({"prediction": t(2, 3, 5, dtype=flow.double),
                                        "label": t(2, 3, 5, low=0, high=1, dtype=flow.double)}, {})),
    **{k: lambda: ({"prediction": t(4, 5, low=-3, high=3),
                    "label": oneof(_int(4, low=0, high=5), _int(4, low=0, high=5, dtype=flow.int32))}, {"depth": 5})
       for k in ("sparse_softmax_cross_entropy", "sparse_softmax_cross_entropy_ms")},
    "fused_bias_add_sparse_softmax_cross_entropy": lambda: (
        {"prediction": t(4, 5, low=-3, high=3), "bias": t(5), "label": _int(4, low=0, high=5)}, {"depth": 5}),
    **{k: lambda: ({"prediction": t(2, 3, 5, low=0.05, high=1.0), "label": _int(2, 3, low=0, high=5)}, {"depth": 5})
       for k in ("sparse_cross_entropy", "sparse_cross_entropy_ms")},
    "sigmoid_cross_entropy": lambda: ({"prediction": oneof(t(3, 4, low=-30, high=30), t(3, 4, low=-3, high=3)),
                                       "label": oneof(t(3, 4, low=0, high=1), _int(3, 4, low=0, high=2))}, {}),
    "binary_cross_entropy": (
        lambda: ({"input": t(3, 4, low=0.01, high=0.99), "target": t(3, 4, low=0, high=1),
                  "weight": oneof(t(3, 4, **_POSITIVE), nothing())}, {}),
        lambda: ({"input": np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 1e-30]], dtype=np.float32),
                  "target": np.array([[0.0, 1.0, 0.5], [0.0, 1.0, 0.5]], dtype=np.float32)}, {})),
    "binary_cross_entropy_with_logits": (
        lambda: ({"input": t(3, 4, low=-20, high=20), "target": t(3, 4, low=0, high=1),
                  "weight": oneof(t(3, 4, **_POSITIVE), nothing())}, {}),
        lambda: ({"input": t(2, 3, 4, low=-5, high=5), "target": t(2, 3, 4, low=0, high=1),
                  "pos_weight": t(4, **_POSITIVE)}, {"has_pos_weight": True})),
    "kl_div_loss": (lambda: ({"input": t(3, 4), "target": oneof(t(3, 4, low=0, high=1), _ZEROS_34)},
                             {"log_target": False}),
                    lambda: ({"input": t(3, 4), "target": t(3, 4, low=-3, high=1)}, {"log_target": True})),
    "smooth_l1_loss": lambda: ({"input": t(3, 4, low=-2, high=2), "target": t(3, 4, low=-2, high=2)},
                               {"beta": oneof(0.0, 0.5, 1.0)}),
    "nll": (lambda: ({"input": t(5, 4), "target": _int(5, low=0, high=4),
                      "weight": oneof(nothing(), t(4, **_POSITIVE))}, {"ignore_index": oneof(-100, 1, 3)}),
            lambda: ({"input": t(5, 4, dtype=flow.double), "target": _int(5, low=0, high=4, dtype=flow.int32),
                      "weight": t(4, low=0.5, high=2.0, dtype=flow.double)}, {"ignore_index": 2})),
}


# gradient ops: the forward input (or output) and dy, of one shape


def _float_grad(src="x", low=-1.0, high=1.0, special=None):
    """``src`` drawn in [low, high) (or ``special``, fixed values of shape (2, 3)), and ``dy`` (float32)."""
    def case():
        x = t(2, 3, low=low, high=high)
        return {src: x if special is None else oneof(x, special), "dy": t(2, 3, low=-2.0, high=2.0)}, {}
    return case


# ties at every other element
_TIES_X = np.array([[0.0, 1.0, 2.0], [1.0, -1.0, 0.5]], dtype=np.float32)
_TIES_Y = np.array([[0.0, 2.0, 2.0], [0.0, -1.0, 0.25]], dtype=np.float32)


CASES.update({
    # unary math grads (x, dy -> dx); float only where onnxruntime has no double kernel
    **{f"{k}_grad": _float_grad() for k in ("exp", "tanh", "sigmoid_v2", "cos", "cosh", "erf", "erfc", "expm1",
                                            "sin", "sinh", "softplus", "tan", "log_sigmoid", "square", "negative",
                                            "atan", "asinh")},
    "log_grad": _float_grad(**_POSITIVE), "sqrt_grad": _float_grad(**_POSITIVE),
    "rsqrt_grad": _float_grad(**_POSITIVE), "reciprocal_grad": _float_grad(**_POSITIVE),
    "log1p_grad": _float_grad(low=-0.5, high=2.0), "log2_grad": _float_grad(**_POSITIVE),
    "acos_grad": _float_grad(**_UNIT), "asin_grad": _float_grad(**_UNIT), "atanh_grad": _float_grad(**_UNIT),
    "acosh_grad": _float_grad(low=1.1, high=3.0),
    "reciprocal_no_nan_grad": _float_grad(special=_ZEROS),
    # sign(0) == 0: abs_grad is 0 at x == 0
    "abs_grad": (_float_grad(special=_ZEROS),
                 lambda: ({"x": _int(2, 3, low=-2, high=3), "dy": _int(2, 3, low=-3, high=3)}, {})),
    **{f"{k}_grad": _float_grad(low=-3.0, high=3.0, special=_HALVES) for k in ("ceil", "floor", "rint", "round",
                                                                               "sign")},
    "relu_grad": _float_grad(src="y", special=_ZEROS),
    "sigmoid_grad": _float_grad(src="y", low=0.0, high=1.0),
    "gelu_grad": _float_grad(low=-3.0, high=3.0),
    "scalar_pow_grad": lambda: ({"x": t(2, 3, **_POSITIVE), "dy": t(2, 3)},
                                {"has_int_operand": random_bool(), "has_float_operand": True,
                                 "int_operand": oneof(0, 2, 3), "float_operand": oneof(0.0, 0.5, -1.5)}),
    # binary grads (x, y, dz -> dx / dy)
    **{f"pow_{s}_grad": lambda: ({"x": oneof(t(2, 3, **_POSITIVE), _ZEROS), "y": oneof(t(2, 3, low=-2.0, high=2.0),
                                                                                      _ZEROS),
                                  "dz": t(2, 3)}, {}) for s in ("x", "y")},
    **{f"atan2_{s}_grad": lambda: ({"x": t(2, 3), "y": t(2, 3), "dz": t(2, 3)}, {}) for s in ("x", "y")},
    **{f"floordiv_{s}_grad": lambda: ({"x": t(2, 3), "y": t(2, 3, **_POSITIVE), "dz": t(2, 3)}, {})
       for s in ("x", "y")},
    **{f"{k}_{s}_grad": lambda: ({"x": oneof(t(2, 3), _ZEROS), "y": t(2, 3, **_POSITIVE), "dz": t(2, 3)}, {})
       for k in ("xdivy", "xlogy") for s in ("x", "y")},
    "broadcast_div_grad": lambda: ({"y": oneof(t(3, 1, **_POSITIVE), t(2, 3, 4, **_POSITIVE)), "z": t(2, 3, 4),
                                    "dz": t(2, 3, 4)}, {}),
    **{f"broadcast_pow_{s}_grad": lambda: ({"x": oneof(t(2, 3, 4, **_POSITIVE), t(3, 1, **_POSITIVE)),
                                            "y": oneof(t(1, 4), t(2, 3, 4, low=-2.0, high=2.0)),
                                            "z": t(2, 3, 4), "dz": t(2, 3, 4)}, {}) for s in ("x", "y")},
    # ties (integer-valued floats) go to x
    **{f"elementwise_{k}_backward": (lambda: ({"dz": t(2, 3), "x": _TIES_X, "y": _TIES_Y}, {}),
                                     lambda: ({"dz": t(2, 3), "x": t(2, 3), "y": t(2, 3)}, {}))
       for k in ("maximum", "minimum")},
    **{f"{k}_grad": lambda a=a: ({"dy": t(2, 3), "x": oneof(t(2, 3), _TIES_X)}, a)
       for k, a in (("clip_by_scalar", {"floating_min": -0.5, "floating_max": 1.0}),
                    ("clip_by_scalar_min", {"floating_min": oneof(-0.5, 1.0)}),
                    ("clip_by_scalar_max", {"floating_max": oneof(0.5, 1.0)}))},
})


# the kinks of the activations (0, -3, 3) among other values
_KINKS = np.array([-5.0, -3.0, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, -2.0] * 2, dtype=np.float32).reshape(2, 4, 3)


def _act_grad(src="x", low=-3.0, high=3.0, double=True, **attrs):
    """An activation grad's alternative cases: ``src`` (or the kinks) and ``dy`` in float32, then (unless not
    ``double``) both in float64."""
    cases = [lambda: ({src: oneof(t(2, 4, 3, low=low, high=high), _KINKS), "dy": t(2, 4, 3)}, attrs)]
    if double:
        cases.append(lambda: ({src: t(2, 4, 3, low=low, high=high, dtype=flow.double),
                               "dy": t(2, 4, 3, dtype=flow.double)}, attrs))
    return tuple(cases)


CASES.update({
    # activation grads
    "leaky_relu_grad": _act_grad(alpha=random(0.0, 0.5)), "elu_grad": _act_grad(alpha=random(0.1, 2.0)),
    "celu_grad": _act_grad(alpha=oneof(0.5, 1.0, 2.0)), "selu_grad": _act_grad(), "silu_grad": _act_grad(),
    "softsign_grad": _act_grad(), "mish_grad": _act_grad(double=False),
    "hardsigmoid_grad": _act_grad(low=-5.0, high=5.0), "hardswish_grad": _act_grad(low=-5.0, high=5.0),
    "hardtanh_grad": _act_grad("y", min_val=random(-2.0, -0.5), max_val=random(0.5, 2.0)),
    "prelu_grad": lambda: ({"x": oneof(t(2, 4, 3), _KINKS), "dy": t(2, 4, 3), "alpha": oneof(t(4), t(1))}, {}),
    "tf_prelu_grad": lambda: ({"x": t(2, 3, 4), "dy": t(2, 3, 4), "alpha": oneof(t(3, 4), t(1, 4), t(3, 1))}, {}),
})

CASES.update({
    # softmax and dropout grads
    "softmax_grad": lambda: ({"y": t(3, 5, low=0.0, high=1.0), "dy": t(3, 5)}, {}),
    "log_softmax_grad": (lambda: ({"prob": t(3, 5, low=-3.0, high=0.0), "dy": t(3, 5)}, {}),
                         lambda: ({"prob": t(2, 3, 5, low=-3.0, high=0.0, dtype=flow.double),
                                   "dy": t(2, 3, 5, dtype=flow.double)}, {})),
    "dropout": lambda: ({"in": oneof(t(2, 3, 4), t(2, 3, 4, dtype=flow.double)), "mask": _cond(2, 3, 4)},
                        {"scale": random(1.1, 3.0)}),
    "dropout_grad": lambda: ({"dy": oneof(t(2, 3, 4), t(2, 3, 4, dtype=flow.double)), "mask": _cond(2, 3, 4)},
                             {"scale": random(1.1, 3.0)}),
    "fused_bias_add_gelu_grad": lambda: ({"a": t(2, 3, 4, low=-3.0, high=3.0), "b": t(3), "dy": t(2, 3, 4)},
                                         {"axis": 1}),
})

CASES.update({
    # loss grads (class ids in range, as the forward cases)
    "softmax_cross_entropy_grad": (lambda: ({"prob": t(4, 5, low=0, high=1), "label": t(4, 5, low=0, high=1),
                                             "dy": t(4)}, {}),
                                   lambda: ({"prob": t(2, 3, 5, low=0, high=1, dtype=flow.double),
                                             "label": t(2, 3, 5, low=0, high=1, dtype=flow.double),
                                             "dy": t(2, 3, dtype=flow.double)}, {})),
    **{f"{k}_grad": lambda: ({"label": oneof(_int(4, low=0, high=5), _int(4, low=0, high=5, dtype=flow.int32)),
                              "dy": t(4), "prob": t(4, 5, low=0, high=1)}, {"depth": 5})
       for k in ("sparse_softmax_cross_entropy", "sparse_softmax_cross_entropy_ms")},
    "fused_bias_add_sparse_softmax_cross_entropy_grad": lambda: (
        {"label": _int(4, low=0, high=5), "dy": t(4), "prob": t(4, 5, low=0, high=1)},
        {"depth": 5, "dtype": oneof(flow.float32, flow.double)}),
    **{f"{k}_grad": lambda: ({"prediction": t(2, 3, 5, low=0.05, high=1.0), "label": _int(2, 3, low=0, high=5),
                              "dy": t(2, 3)}, {"depth": 5})
       for k in ("sparse_cross_entropy", "sparse_cross_entropy_ms")},
    "sigmoid_cross_entropy_grad": lambda: ({"prediction": t(3, 4, low=-5, high=5),
                                            "label": oneof(t(3, 4, low=0, high=1), _int(3, 4, low=0, high=2)),
                                            "loss_diff": t(3, 4)}, {}),
    "binary_cross_entropy_grad": (
        lambda: ({"input": t(3, 4, low=0.01, high=0.99), "target": t(3, 4, low=0, high=1),
                  "weight": oneof(t(3, 4, **_POSITIVE), nothing()), "dy": t(3, 4)}, {}),
        lambda: ({"input": np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 1e-30]], dtype=np.float32),
                  "target": np.array([[0.0, 1.0, 0.5], [0.0, 1.0, 0.5]], dtype=np.float32), "dy": t(2, 3)}, {})),
    "binary_cross_entropy_with_logits_grad": (
        lambda: ({"input": t(3, 4, low=-20, high=20), "target": t(3, 4, low=0, high=1),
                  "weight": oneof(t(3, 4, **_POSITIVE), nothing()), "dy": t(3, 4)}, {}),
        lambda: ({"input": t(2, 3, 4, low=-5, high=5), "target": t(2, 3, 4, low=0, high=1),
                  "pos_weight": t(4, **_POSITIVE), "dy": t(2, 3, 4)}, {"has_pos_weight": True})),
    "kl_div_loss_grad": lambda: ({"input": t(3, 4), "target": t(3, 4, low=-1, high=1), "dy": t(3, 4)},
                                 {"log_target": random_bool()}),
    # input == target (sign 0) and |input - target| == beta in the fixed values
    "smooth_l1_loss_grad": (lambda: ({"input": t(2, 3, low=-2, high=2), "target": t(2, 3, low=-2, high=2),
                                      "dy": t(2, 3)}, {"beta": oneof(0.0, 0.5, 1.0)}),
                            lambda: ({"input": _TIES_X, "target": _TIES_Y, "dy": t(2, 3)}, {"beta": oneof(0.0, 1.0)})),
    "nll_grad": (lambda: ({"input": t(5, 4), "target": _int(5, low=0, high=4), "total_weight": t(1),
                           "weight": oneof(nothing(), t(4, **_POSITIVE)), "dy": t(5)},
                          {"ignore_index": oneof(-100, 1, 3)}),
                 lambda: ({"input": t(5, 4, dtype=flow.double), "target": _int(5, low=0, high=4, dtype=flow.int32),
                           "total_weight": t(1, dtype=flow.double), "weight": t(4, low=0.5, high=2.0, dtype=flow.double),
                           "dy": t(5, dtype=flow.double)}, {"ignore_index": 2})),
})

CASES.update({
    # normalization grads (statistics and parameters drawn: the grads are formulas of them)
    "layer_norm_grad": (lambda: ({"dy": t(2, 3, 4), "x": t(2, 3, 4), "mean": t(2, 3), "inv_variance": t(2, 3, **_POSITIVE),
                                  "_add_to_output": oneof(t(2, 3, 4), nothing())}, {"begin_norm_axis": -1, "epsilon": 1e-5}),
                        lambda: ({"dy": t(2, 3, 4), "x": t(2, 3, 4), "mean": t(2), "inv_variance": t(2, **_POSITIVE)},
                                 {"begin_norm_axis": 1, "epsilon": 1e-5})),
    "multi_scalar_mul_by_tensor": lambda: ({"x": [t(2, 3), t(4, dtype=flow.float16), t(5)], "scalar": t(1)}, {}),
    "multi_cast": lambda: ({"in": [t(2, 3), t(4), t(5)]}, {"dtype": flow.float16}),
    "fused_layer_norm_grad": (lambda: ({"dy": t(2, 3, 4), "x": t(2, 3, 4), "mean": t(2, 3),
                                        "inv_variance": t(2, 3, **_POSITIVE), "gamma": t(4),
                                        "_add_to_output": oneof(t(2, 3, 4), nothing())},
                                       {"begin_norm_axis": -1, "epsilon": 1e-5}),
                              lambda: ({"dy": t(2, 3, 4), "x": t(2, 3, 4), "mean": t(2), "inv_variance": t(2, **_POSITIVE),
                                        "gamma": t(3, 4)}, {"begin_norm_axis": 1, "epsilon": 1e-5})),
    "layer_norm_param_grad": (lambda: ({"dy": t(2, 3, 4), "normalized": t(2, 3, 4), "gamma": t(3, 4)},
                                       {"begin_params_axis": 1}),
                              lambda: ({"dy": t(2, 3, 4), "normalized": t(2, 3, 4), "gamma": t(4)},
                                       {"begin_params_axis": -1})),
    "normalization_grad": (lambda: ({"x": t(2, 3, 4, 4), "dy": t(2, 3, 4, 4), "mean": t(3), "inv_variance": t(3, **_POSITIVE),
                                     "gamma": t(3)}, {"axis": 1, "epsilon": 1e-5}),
                           lambda: ({"x": t(4, 5, dtype=flow.double), "dy": t(4, 5, dtype=flow.double),
                                     "mean": t(5, dtype=flow.double), "inv_variance": t(5, low=0.5, high=2.0, dtype=flow.double),
                                     "gamma": t(5, dtype=flow.double)}, {"axis": 1, "epsilon": 1e-5})),
    # square sums below epsilon (the zeros) take the linear branch
    "l2_normalize_grad": lambda: ({"dy": t(2, 3), "y": t(2, 3), "square_x_sum": oneof(t(2, 1, **_POSITIVE),
                                                                                      np.zeros((2, 1), np.float32))},
                                  {"axis": oneof(1, -1), "epsilon": oneof(1e-12, 1.0)}),
})

CASES.update({
    # shape-op grads: dy back to the input's shape (zeros where the forward dropped elements)
    "slice_grad": (lambda: ({"dy": t(5, 3)}, {"like_shape": (5, 6), "start": [0, 1], "stop": [5, 6], "step": [1, 2]}),
                   lambda: ({"dy": t(2, 6)}, {"like_shape": (5, 6), "start": [-1, 5], "stop": [-4, -7],
                                              "step": [-2, -1]})),
    "narrow_grad": lambda: ({"dy": t(4, 2), "like": t(4, 5)}, {"dim": oneof(1, -1), "start": oneof(0, 1, -2),
                                                               "length": 2}),
    "expand_grad": (lambda: ({"in": t(2, 3, 4)}, {"logical_out_shape": [3, 1], "logical_expand_shape": [2, 3, 4]}),
                    lambda: ({"in": t(3, 4)}, {"logical_out_shape": oneof([3, 1], [1, 4]),
                                               "logical_expand_shape": [3, 4]}),
                    lambda: ({"in": t(2, 3, 4)}, {"logical_out_shape": [3, 4], "logical_expand_shape": [2, -1, 4]})),
    # (5 and 6 by a 3-window of stride 2: totals 2 and 1, to 7 and 7)
    "same_padding": lambda: ({"x": t(1, 2, 5, 6)}, {"padding": oneof("same_lower", "same_upper"),
                                                    "data_format": "channels_first", "kernel_size": [3, 3],
                                                    "strides": [2, 2], "dilation_rate": [1, 1]}),
    "same_padding_grad": lambda: ({"x_like": t(1, 5, 6, 2), "dy": t(1, 7, 7, 2)},
                                  {"padding": oneof("same_lower", "same_upper"), "data_format": "channels_last",
                                   "kernel_size": [3, 3], "strides": [2, 2], "dilation_rate": [1, 1]}),
    "pad_grad": lambda: ({"dy": oneof(t(5, 6), _int(5, 6, low=-3, high=3))},
                         {"padding_before": oneof([0, 1], [2, 0]), "padding_after": oneof([1, 1], [0, 2])}),
    "constant_pad1d_grad": lambda: ({"dy": t(2, 3, 8)}, {"padding": oneof([1, 2], [0, 3])}),
    "constant_pad2d_grad": lambda: ({"dy": t(1, 2, 6, 7)}, {"padding": oneof([1, 0, 2, 1], [0, 2, 0, 0])}),
    "constant_pad3d_grad": lambda: ({"dy": t(1, 2, 4, 7, 6)}, {"padding": [1, 0, 2, 1, 0, 1]}),
    "flip_grad": lambda: ({"dy": t(2, 3, 4)}, {"dims": oneof([0], [1, 2], [-1], [])}),
    "diag_grad": (lambda: ({"dy": t(5, 5), "in": oneof(t(4), t(4, dtype=flow.double))}, {"diagonal": oneof(1, -1)}),
                  lambda: ({"dy": t(4), "in": t(4, 5)}, {"diagonal": oneof(0, 1)}),
                  lambda: ({"dy": t(3), "in": t(5, 3)}, {"diagonal": oneof(0, -2)})),
})

def _conv_grad(kind, n, data_format="channels_first", groups=1):
    """conv_data_grad / conv_filter_grad / conv_bias_grad / fused_conv_grad of a forward conv with fixed geometry (strides,
    paddings and dilations vary with n so that output paddings and kernel crops occur)."""
    def case():
        spatial, k = [7, 6, 5][:n], [3, 2, 3][:n]
        s, p, d = [2, 1, 3][:n], [1, 0, 1][:n], [1, 2, 1][:n]
        out = [(x + 2 * pp - dd * (kk - 1) - 1) // ss + 1 for x, kk, ss, pp, dd in zip(spatial, k, s, p, d)]
        first = data_format == "channels_first"

        def shape(ch, sp):
            return (2, ch, *sp) if first else (2, *sp, ch)
        x, dy = t(*shape(4, spatial)), t(*shape(6, out))
        w = t(6, 4 // groups, *k) if first else t(6, *k, 4 // groups)
        attrs = {"num_spatial_dims": n, "padding_before": p, "data_format": data_format, "kernel_size": k,
                 "strides": s, "dilation_rate": d, "groups": groups}
        if kind == "data":
            return {"dy": dy, "filter": w, "x_like": x, "_add_to_output": oneof(nothing(), t(*shape(4, spatial)))}, attrs
        if kind == "filter":
            return {"dy": dy, "x": x}, attrs
        if kind == "fused":
            return {"dy": dy, "filter": w, "x": x}, attrs
        return {"dy": dy}, {"data_format": data_format, "num_spatial_dims": n}
    return case


CASES.update({
    **{f"conv_{kind}_grad": tuple(_conv_grad(kind, n, f, g) for n, f, g in ((2, "channels_first", 1), (1, "channels_last", 2),
                                                                          (3, "channels_first", 2)))
       for kind in ("data", "filter", "bias")},
    # every output (the harness asks for all of them when each is optional)
    "fused_conv_grad": tuple(_conv_grad("fused", n, groups=g) for n, g in ((2, 1), (1, 2), (3, 2))),
})

_QUANT = {"quantization_bit": oneof(8, 4), "quantization_scheme": oneof("symmetric", "affine")}
# values on the rounding grid's half-way points (ties to even) for scale 0.5
_QUANT_TIES = np.array([[0.25, 0.75, -0.25], [-0.75, 1.25, 100.0]], dtype=np.float32)

CASES.update({
    "min_max_observer": (lambda: ({"in": oneof(t(2, 3, 4, low=-2, high=3), t(3, 5, low=0.5, high=2.0, dtype=flow.double))},
                                  dict(_QUANT, quantization_formula="google", per_layer_quantization=random_bool())),),
    # per-channel google scales; then ties of the rounding (scale 0.5) and a zero point past 255 (wrapped as
    # uint8); then cambricon's power-of-two shifts (truncated toward zero)
    "fake_quantization": (
        lambda: ({"in": t(2, 3, 4, low=-2, high=2), "scale": t(2, low=0.01, high=0.1), "zero_point": t(2, low=-3, high=3)},
                 dict(_QUANT, quantization_formula="google")),
        lambda: ({"in": _QUANT_TIES, "scale": np.array([0.5], np.float32),
                  "zero_point": oneof(np.array([0.0], np.float32), np.array([300.4], np.float32))},
                 dict(_QUANT, quantization_formula="google")),
        lambda: ({"in": t(2, 3, low=-4, high=4), "scale": t(1, low=-3.9, high=0.9),
                  "zero_point": t(1)}, {"quantization_formula": "cambricon", "quantization_bit": oneof(8, 4)})),
})

CASES.update({
    "broadcast_matmul_grad_b": lambda: ({"a": t(2, 3, 4), "b": t(2, 3, 5), "_add_to_output": oneof(t(4, 5), nothing())},
                                        {"alpha": oneof(1.0, 0.5)}),
    "fused_tril_scale_softmax_mask_scale_grad": lambda: ({"softmax_y": t(2, 4, 5, low=0, high=1), "dy": t(2, 4, 5),
                                                          "mask": _cond(2, 4, 5)},
                                                         {"diagonal": oneof(-1, 0, 2), "tril_scale_value": random(0.5, 2.0),
                                                          "mask_scale_value": random(1.0, 2.0)}),
})

CASES.update({
    # the reflection / replication pads' adjoints: every padded element added back to its source
    "reflection_pad2d_grad": lambda: ({"dy": oneof(t(1, 2, 7, 7), t(2, 1, 7, 7))}, {"padding": oneof([1, 2, 3, 0], [0, 2, 1, 1])}),
    "replication_pad2d_grad": lambda: ({"dy": t(1, 2, 10, 6)}, {"padding": oneof([1, 2, 3, 0], [0, 1, 1, 5])}),
})

CASES.update({
    "ccrelu": _unary(arg="in"), "cpu_only_relu_test": _unary(arg="in"),
    "ccrelu_grad": _float_grad(src="y", special=_ZEROS),
    "hierarchical_parallel_cast_like": lambda: ({"in": t(2, 3), "like": t(2, 3)}, {}),
    "adam_bias_correction_factor": lambda: ({"train_step": oneof(_int(1, low=0, high=100),
                                                                 _int(1, low=0, high=100, dtype=flow.int32))},
                                            {"beta": oneof(0.9, 0.999)}),
    # sign(0) == 0 in the zeros
    "l1_l2_regularize_gradient": lambda: ({"model": oneof(t(2, 3), _ZEROS), "model_diff": t(2, 3)},
                                          {"l1": oneof(0.0, 0.01), "l2": oneof(0.0, 0.1)}),
})

CASES.update({
    # inference only (training updates the moving statistics in place)
    "moving_average_min_max_observer": lambda: ({"in": t(2, 3), "current_train_step": _int(1, low=0, high=5),
                                                 "moving_max": t(1, low=0.5, high=2.0), "moving_min": t(1, low=-2.0, high=-0.5)},
                                                dict(_QUANT, quantization_formula="google", training=False)),
})

def _avg_pool_grad(n, padding, data_format, x_dims, ceil_mode=False):
    """tf_avg_pool_{n}d_grad with fixed geometry: x, y (unused by the gradient) and dy of the forward's shapes."""
    attrs = {"padding": padding, "padding_before": [1] * n, "padding_after": [0] * n, "data_format": data_format,
             "pool_size": [3, 2, 3][:n], "strides": [2, 1, 2][:n], "ceil_mode": ceil_mode}
    outs, _ = pool_geometry(x_dims, attrs)

    def shape(sp):
        return (2, 3, *sp) if data_format == "channels_first" else (2, *sp, 3)
    return lambda: ({"x": t(*shape(x_dims)), "y": t(*shape(outs)), "dy": t(*shape(outs))}, attrs)


CASES.update({
    # each draw another padding rule (pads change the divisors at the borders)
    **{f"tf_avg_pool_{n}d_grad": (_avg_pool_grad(n, "valid", "channels_first", [7, 5, 6][:n]),
                                  _avg_pool_grad(n, "same_lower", "channels_last", [6, 5, 7][:n]),
                                  _avg_pool_grad(n, "customized", "channels_first", [7, 4, 5][:n], ceil_mode=True))
       for n in (1, 2, 3)},
})

def _torch_pool_grad(n, data_format, x_dims, ceil_mode, count_include_pad, divisor_override):
    """avgpool_{n}d_grad with fixed geometry (kernel, stride and padding vary per dim): x, y (unused by the
    gradient) and dy of the forward's shapes."""
    k, s, p = [3, 2, 3][:n], [2, 1, 2][:n], [1, 0, 1][:n]
    attrs = {"data_format": data_format, "kernel_size": k, "stride": s, "padding": p, "ceil_mode": ceil_mode,
             "count_include_pad": count_include_pad, "divisor_override": divisor_override}
    outs = [pool_out_size(x, kk, pp, ss, 1, ceil_mode) for x, kk, ss, pp in zip(x_dims, k, s, p)]

    def shape(sp):
        return (2, 3, *sp) if data_format == "channels_first" else (2, *sp, 3)
    return lambda: ({"x": t(*shape(x_dims)), "y": t(*shape(outs)), "dy": t(*shape(outs))}, attrs)


CASES.update({
    # the framework test ops
    "TestReshape": lambda: ({"in": oneof(t(2, 6), _int(2, 6, low=-3, high=3))}, {"shape": oneof((3, 4), (6, 2))}),
    "TestSource": lambda: ({}, {}),
    "TestSourceMultiGpuFixedOutNum": lambda: ({}, {"out_num": oneof(1, 4, 7)}),
    "TestMultiInput": lambda: ({"x1": t(2, 3), "x2": t(2, 3)}, {}),
    "TestMultiInputGrad": lambda: ({"x1": t(2, 3), "x2": t(2, 3, dtype=flow.double), "y_diff": t(2, 3)}, {}),
    "TestMultiOutputOrder": lambda: ({"in": oneof(t(2, 3), _int(4, low=-3, high=3))}, {}),
    # in-range values: float -> int truncates toward zero in both
    "TestDataTypeAttr": lambda: ({"in": oneof(t(2, 3, low=-5, high=5), _int(2, 3, low=-3, high=3))},
                                 {"output_type": oneof(flow.int32, flow.int8, flow.double, flow.float)}),
    "TestListDataTypeAndListShapeAndListStringAttr": lambda: (
        {"in": t(2, 3)}, {"out_shapes": oneof([(2, 4)], [(3,)]), "out_types": oneof([flow.int32], [flow.double]),
                          "string_list": ["a", "b"]}),
    "test_user_op_attr_auto_type": lambda: ({"in": oneof(t(2, 3), _int(2, 3, low=-3, high=3))},
                                            {"int1": 1, "int2": 2}),
    # crop windows off the corner (crop_pos between 0 and 1), some images mirrored
    "crop_mirror_normalize_from_uint8": lambda: (
        {"in": _int(3, 6, 7, 3, low=0, high=256, dtype=flow.uint8),
         "mirror": oneof(_int(3, low=0, high=2, dtype=flow.int8), nothing())},
        {"crop_h": oneof(0, 4), "crop_w": oneof(0, 5), "crop_pos_x": oneof(0.0, 0.6, 1.0), "crop_pos_y": random(0.0, 1.0),
         "mean": oneof([0.0], [120.0, 110.0, 100.0]), "std": oneof([1.0], [58.0, 57.0, 59.5]),
         "output_layout": oneof("NCHW", "NHWC"), "output_dtype": oneof(flow.float, flow.float16)}),
    # ceil_mode windows past the padding, both divisor rules, a divisor_override, channels_last
    **{f"avgpool_{n}d_grad": (_torch_pool_grad(n, "channels_first", [7, 6, 5][:n], True, True, 0),
                              _torch_pool_grad(n, "channels_last", [6, 5, 7][:n], False, False, 3),
                              _torch_pool_grad(n, "channels_first", [6, 7, 5][:n], True, False, 0))
       for n in (1, 2, 3)},
    # windows of varying size and overlapping ones (output sizes not dividing the input's)
    **{f"adaptive_avg_pool{n}d_grad": (
        lambda n=n: ({"x": t(2, 3, *[7, 6, 5][:n]), "dy": t(2, 3, *[3, 4, 2][:n])}, {"output_size": [3, 4, 2][:n]}),
        lambda n=n: ({"x": t(1, 2, *[5] * n, dtype=flow.double), "dy": t(1, 2, *[2] * n, dtype=flow.double)},
                     {"output_size": [2]}),
        lambda n=n: ({"x": t(2, 2, *[4, 6, 3][:n]), "dy": t(2, 2, *[4, 3, 5][:n])}, {"output_size": [4, 3, 5][:n]}))
       for n in (1, 2, 3)},
    # integer and fractional scales, shrinking ones, a dim left as is; dy of the output size int(n * scale)
    "upsample_grad": tuple(
        (lambda f=f, m=m, ac=ac, hs=hs, ws=ws, dt=dt: (
            {"dy": t(*((2, 3, int(5 * hs), int(4 * ws)) if f == "channels_first" else (2, int(5 * hs), int(4 * ws), 3)),
                     dtype=dt),
             "x": t(*((2, 3, 5, 4) if f == "channels_first" else (2, 5, 4, 3)), dtype=dt)},
            {"data_format": f, "interpolation": m, "align_corners": ac, "height_scale": hs, "width_scale": ws}))
        for f, m, ac, hs, ws, dt in (("channels_first", oneof("nearest", "bilinear"), False, 2.0, 1.5, float),
                                     ("channels_last", oneof("nearest", "bilinear"), oneof(False, True), 0.6, 1.0, float),
                                     ("channels_first", "bilinear", True, 1.7, 2.5, flow.double))),
    # seq 4, batch 2, hidden 18: heads 3 of size 2, or 1 of size 6
    "fused_self_attention_query_mul_key_and_value_grad": tuple(
        (lambda heads=heads, hs=hs, dt=dt: ({"query_mul_key_grad": t(2, heads, 4, 4, dtype=dt),
                                             "value_grad": t(2, heads, 4, hs, dtype=dt),
                                             "hidden_states": t(4, 2, 18, dtype=dt)}, {"alpha": random(0.1, 1.0)}))
        for heads, hs, dt in ((3, 2, float), (1, 6, float), (3, 2, flow.double))),
})


CASES.update({
    # few classes, so that blanks (the last class) and repeats occur; lengths from 0 to T
    "ctc_greedy_decoder": (
        lambda: ({"log_probs": t(6, 3, 4), "input_lengths": _int(3, low=0, high=7)},
                 {"merge_repeated": oneof(True, False)}),
        lambda: ({"log_probs": t(5, 2, 3, dtype=flow.double), "input_lengths": _int(2, low=0, high=6)},
                 {"merge_repeated": True}),
        lambda: ({"log_probs": t(1, 4, 2), "input_lengths": _int(4, low=0, high=2)}, {"merge_repeated": False})),
    # targets of 0 to S labels (blank 0 or the last class), some alignments impossible (inf loss)
    "ctc_loss": (
        lambda: ({"log_probs": t(6, 3, 4, low=-3.0, high=0.0), "targets": _int(3, 3, low=1, high=4),
                  "input_lengths": _int(3, low=1, high=7), "target_lengths": _int(3, low=0, high=4)},
                 {"max_target_length": oneof(3, 5), "blank": 0}),
        lambda: ({"log_probs": t(5, 2, 3, low=-3.0, high=0.0, dtype=flow.double),
                  "targets": _int(2, 2, low=0, high=2, dtype=flow.int32),
                  "input_lengths": _int(2, low=0, high=6, dtype=flow.int32), "target_lengths": _int(2, low=0, high=3)},
                 {"max_target_length": 2, "blank": 2}),
        lambda: ({"log_probs": t(1, 2, 3, low=-3.0, high=0.0), "targets": _int(2, 1, low=1, high=3),
                  "input_lengths": _int(2, low=0, high=2), "target_lengths": _int(2, low=0, high=2)},
                 {"max_target_length": 1, "blank": 0})),
    # loss and alpha drawn (finite), or an infinite loss under zero_infinity
    "ctc_loss_grad": (
        lambda: ({"grad_out": t(3), "log_probs": t(6, 3, 4, low=-3.0, high=0.0), "targets": _int(3, 3, low=1, high=4),
                  "input_lengths": _int(3, low=1, high=7), "target_lengths": _int(3, low=0, high=4),
                  "loss": t(3, low=0.5, high=3.0), "alpha": t(3, 6, 9, low=-3.0, high=0.0)},
                 {"max_target_length": 4, "blank": 0, "zero_infinity": oneof(True, False)}),
        lambda: ({"grad_out": t(2, dtype=flow.double), "log_probs": t(5, 2, 3, low=-3.0, high=0.0, dtype=flow.double),
                  "targets": _int(2, 2, low=0, high=2, dtype=flow.int32),
                  "input_lengths": _int(2, low=0, high=6, dtype=flow.int32), "target_lengths": _int(2, low=0, high=3),
                  "loss": t(2, low=0.5, high=3.0, dtype=flow.double),
                  "alpha": t(2, 5, 5, low=-3.0, high=0.0, dtype=flow.double)},
                 {"max_target_length": 2, "blank": 2}),
        lambda: ({"grad_out": t(2), "log_probs": t(4, 2, 3, low=-3.0, high=0.0), "targets": _int(2, 2, low=1, high=3),
                  "input_lengths": _int(2, low=1, high=5), "target_lengths": _int(2, low=0, high=3),
                  "loss": np.array([1.5, np.inf], np.float32), "alpha": t(2, 4, 5, low=-3.0, high=0.0)},
                 {"max_target_length": 2, "blank": 0, "zero_infinity": True})),
})


def _one_op_job(op_type, inputs, attrs):
    """A predict job feeding every input array through a placeholder into one ``op_type``;
    it returns every blob of the op's required outputs, or of all its outputs when each is optional
    (a repeated output has one blob per blob of the longest repeated input)."""
    flat = [(arg, i, a) for arg, v in inputs.items() for i, a in enumerate(v if isinstance(v, list) else [v])]
    outputs = registry.lookup(op_type).outputs
    declared = [a for a in outputs if not a.optional] or list(outputs)  # (every output, when all are optional)
    first = declared[0]
    count = max([len(v) for v in inputs.values() if isinstance(v, list)], default=1) if first.repeated else 1

    def job(*blobs):
        with flow.scope.placement("cpu", "0:0"):
            ins = {}
            for (arg, _, _), blob in zip(flat, blobs):
                ins.setdefault(arg, []).append(blob)
            ins = {k: (v if isinstance(inputs[k], list) else v[0]) for k, v in ins.items()}
            return build_op(op_type, ins, attrs, outputs=[a.name for a in declared], num={first.name: count})
    params = [inspect.Parameter(f"{arg}_{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=tp.Numpy.Placeholder(a.shape, dtype=_flow_dtype(a.dtype)))
              for arg, i, a in flat]
    n = count + len(declared) - 1
    job.__signature__ = inspect.Signature(
        params, return_annotation=tp.Numpy if n == 1 else typing.Tuple[tuple([tp.Numpy] * n)])
    job.__name__ = f"onnx_{op_type}"
    return flow.global_function(type="predict")(job), [a for _, _, a in flat]


def _flow_dtype(np_dtype):
    return {np.dtype(np.float32): flow.float, np.dtype(np.float64): flow.double, np.dtype(np.float16): flow.float16,
            np.dtype(np.int8): flow.int8, np.dtype(np.uint8): flow.uint8, np.dtype(np.int32): flow.int32, np.dtype(np.int64): flow.int64}[np.dtype(np_dtype)]


def _session(path):
    # Basic graph optimizations only (ONNX-standard rewrites): these tests check the converter's
    # standard graph, which the extended levels rewrite into onnxruntime's contrib ops, whose
    # kernels vary by build and dtype (Sigmoid * Mul became a com.microsoft QuickGelu that a
    # build had no CPU kernel for).
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


def _run_onnx(path, feeds):
    sess = _session(path)
    return sess, sess.run(None, {i.name: f for i, f in zip(sess.get_inputs(), feeds)})


def _array(value):
    return value.array if isinstance(value, TensorValue) else value


def test_every_converter_has_a_case():
    assert sorted(CASES) == convertible_op_types()


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_converter_matches_graphfront(op_type, tmp_path):
    for draw in range(DRAWS):
        flow.clear_default_session()
        ctx = DrawContext(np.random.default_rng([draw, sum(map(ord, op_type))]))
        case = CASES[op_type]
        # a tuple holds alternative cases (inputs and attrs that must agree), taken in turn
        spec_inputs, spec_attrs = (case[draw % len(case)] if isinstance(case, tuple) else case)()
        inputs = {k: ([_array(x) for x in ctx.resolve(v)] if isinstance(v, list) else _array(ctx.resolve(v)))
                  for k, v in spec_inputs.items()}
        inputs = {k: v for k, v in inputs.items() if v is not NOTHING}
        attrs = {k: ctx.resolve(v) for k, v in spec_attrs.items()}
        job, feeds = _one_op_job(op_type, inputs, attrs)
        want = job(*feeds)
        want = list(want) if isinstance(want, tuple) else [want]
        path = tmp_path / f"{op_type}_{draw}.onnx"
        flow.onnx.export(job, path, opset=(13, 17, 18)[draw % 3])
        _, gots = _run_onnx(path, feeds)
        assert len(gots) == len(want)
        for got, w in zip(gots, want):
            assert got.dtype == w.dtype and got.shape == w.shape, (attrs, got.dtype, w.dtype, got.shape, w.shape)
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5, err_msg=f"{op_type} draw {draw}: {attrs}")


def test_argwhere_then_cast_to_static_shape(tmp_path):
    """The dynamic (count, ndim) output of argwhere, padded back to (numel, ndim) with zeros."""
    @flow.global_function(type="predict")
    def coords(x: tp.Numpy.Placeholder((3, 4), dtype=flow.float)) -> typing.Tuple[tp.Numpy, tp.Numpy]:
        with flow.scope.placement("cpu", "0:0"):
            where, size = build_op("argwhere", {"input": x}, {"dtype": flow.int64}, outputs=["output", "output_size"])
            return build_op("cast_to_static_shape", {"input": where}, {}, outputs=["output"]), size

    x = np.array([[0.0, 1.5, 0.0, -2.0], [0.0, 0.0, 0.0, 0.0], [3.0, 0.0, np.nan, 0.0]], dtype=np.float32)
    padded, size = coords(x)
    assert size.tolist() == [4] and padded.shape == (12, 2)
    np.testing.assert_array_equal(padded[:4], np.argwhere(x != 0))
    assert not padded[4:].any()
    flow.onnx.export(coords, tmp_path / "coords.onnx", opset=13)
    _, (got_padded, got_size) = _run_onnx(tmp_path / "coords.onnx", [x])
    np.testing.assert_array_equal(got_padded, padded)
    np.testing.assert_array_equal(got_size, size)


@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_over_every_axis_export_shape_1(tmp_path, opset):
    """A reduction removing every axis of a matrix or a vector, and the argmax of a vector,
    have shape (1,) in the exported model too."""
    @flow.global_function(type="predict")
    def job(a: tp.Numpy.Placeholder((2, 3)), v: tp.Numpy.Placeholder((4,))) -> tp.Bundle[tp.Numpy]:
        return (flow.math.reduce_sum(a), flow.math.reduce_max(v), flow.math.reduce_any(a),
                flow.math.reduce_all(v), flow.math.argmax(v))

    a = np.array([[0.5, -1.0, 2.0], [0.0, 3.0, 1.0]], np.float32)
    v = np.array([1.0, 5.0, 0.0, 2.0], np.float32)
    want = job(a, v)
    assert [w.shape for w in want] == [(1,)] * 5
    flow.onnx.export(job, tmp_path / "reduced.onnx", opset=opset)
    # the lowest IR version that carries the opset (ONNX's release table: opset 13 came with
    # IR 7, opset 18 with IR 8), which onnxruntime builds older than the onnx package load
    ir = {row[2]: row[1] for row in reversed(onnx.helper.VERSION_TABLE)}[opset]
    assert onnx.load(tmp_path / "reduced.onnx").ir_version == ir == {13: 7, 18: 8}[opset]
    _, got = _run_onnx(tmp_path / "reduced.onnx", [a, v])
    for g, w, ref in zip(got, want, [a.sum(), v.max(), True, False, 1]):
        assert g.shape == (1,)
        np.testing.assert_allclose(g, w, rtol=1e-6)
        np.testing.assert_allclose(w, [ref], rtol=1e-6)


def test_source_split_over_devices_exports_its_logical_value(tmp_path):
    """TestSourceMultiGpuFixedOutNum on 2 devices: each holds [0, 1], the logical blob is both."""
    flow.config.cpu_device_num(2)

    @flow.global_function(type="predict")
    def source(x: tp.Numpy.Placeholder((2,), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            return build_op("TestSourceMultiGpuFixedOutNum", {}, {"out_num": 4}, outputs=["out"])

    x = np.zeros(2, np.float32)
    want = source(x)
    np.testing.assert_array_equal(want, [0, 1, 0, 1])
    flow.onnx.export(source, tmp_path / "source.onnx", opset=13)
    _, (got,) = _run_onnx(tmp_path / "source.onnx", [x])
    np.testing.assert_array_equal(got, want)


def _lenet_predict(b):
    @flow.global_function(type="predict")
    def lenet_predict(images: tp.Numpy.Placeholder((b, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.nn.softmax(lenet(images))
    return lenet_predict


def _resnet_predict(b):
    @flow.global_function(type="predict")
    def resnet_predict(images: tp.Numpy.Placeholder((b, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return resnet(images, train=False)
    return resnet_predict


@pytest.mark.parametrize("make", [_lenet_predict, _resnet_predict])
def test_lenet_and_resnet_predict_jobs_run_in_onnxruntime(make, tmp_path):
    flow.manual_seed(1)
    job = make(4)
    x = np.random.default_rng(2).standard_normal((4, 1, 28, 28)).astype(np.float32)
    job(x)
    # non-trivial batch-norm statistics (fresh ones are 0 and 1)
    rng = np.random.default_rng(3)
    values = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    flow.load_variables({k: (rng.uniform(0.5, 1.5, v.shape) if "moving_variance" in k else
                             v + rng.uniform(-0.1, 0.1, v.shape)).astype(v.dtype) for k, v in values.items()})
    want = job(x)
    model = flow.onnx.export(job, tmp_path / "model.onnx")
    assert [i.name for i in model.graph.input] == ["images"]
    sess, (got,) = _run_onnx(tmp_path / "model.onnx", [x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    op_types = {n.op_type for n in model.graph.node}
    assert "Conv" in op_types and ("BatchNormalization" in op_types) == (make is _resnet_predict)


def test_saved_model_exports_with_signature_names(tmp_path):
    lbns = {}

    @flow.global_function(type="predict")
    def lenet_predict(images: tp.Numpy.Placeholder((1, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            prob = flow.nn.softmax(lenet(images))
        lbns.update(image=images.logical_blob_name, prob=prob.logical_blob_name)
        return prob

    x = np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)
    want = lenet_predict(x)
    builder = flow.saved_model.ModelBuilder(str(tmp_path / "saved")).ModelName("lenet").Version(1)
    builder.AddFunction(lenet_predict).AddSignature("serve").Input("image", lbns["image"]).Output(
        "prob", lbns["prob"])
    builder.Save()
    flow.clear_default_session()
    model = flow.onnx.export(str(tmp_path / "saved"), tmp_path / "saved.onnx")
    assert [i.name for i in model.graph.input] == ["image"] and [o.name for o in model.graph.output] == ["prob"]
    _, (got,) = _run_onnx(tmp_path / "saved.onnx", [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_train_job_and_op_without_converter_are_refused(tmp_path):
    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3), initializer=flow.ones_initializer())
            loss = flow.math.reduce_sum(x * w)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    @flow.global_function(type="predict")
    def predict(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            a = flow.math.lgamma(x, name="lg_a")
            b = flow.math.lgamma(flow.math.exp(a), name="lg_b")
            return flow.random.bernoulli(flow.math.sigmoid(b), name="coin")

    with pytest.raises(OnnxExportError, match="job 'train' is a train job; only predict jobs can be exported"):
        flow.onnx.export(train, tmp_path / "t.onnx")
    with pytest.raises(OnnxExportError, match=r"op type\(s\) without an ONNX converter: bernoulli \(op 'coin'\); lgamma "
                                              r"\(op 'lg_a', 'lg_b'\); op types that have one: .*argmax"):
        flow.onnx.export(predict, tmp_path / "p.onnx")
    assert not os.path.exists(tmp_path / "p.onnx")
    with pytest.raises(TypeError, match="expects a predict job function"):
        flow.onnx.export(42, tmp_path / "x.onnx")
    with pytest.raises(flow.ArgumentError, match="flow.onnx.export: argument 'path' expects a str"):
        flow.onnx.export(predict, 3)
    assert issubclass(OnnxExportError, flow.GraphfrontError)


def test_cambricon_min_max_observer_exports_an_exact_floor_log2(tmp_path):
    """cambricon's shift floor(log2(max|x|)) - (bit - 2): onnxruntime's file agrees with numpy's
    float64 log2 of the float32 value at and beside every power of two from 2^-20 to 2^40
    (where Log(x) / Log(2) alone can round across the integer), and at 0 (-inf)."""
    @flow.global_function(type="predict")
    def observe(x: tp.Numpy.Placeholder((1,), dtype=flow.float)) -> typing.Tuple[tp.Numpy, tp.Numpy]:
        with flow.scope.placement("cpu", "0:0"):
            return build_op("min_max_observer", {"in": x}, {"quantization_formula": "cambricon", "quantization_bit": 6},
                            outputs=["scale", "zero_point"], name="obs")

    flow.onnx.export(observe, tmp_path / "obs.onnx")
    sess = _session(tmp_path / "obs.onnx")
    powers = np.float32(2.0) ** np.arange(-20, 41, dtype=np.float32)
    values = np.concatenate([powers, np.nextafter(powers, np.float32(0)), np.nextafter(powers, np.float32(np.inf)),
                             -powers, np.float32([0.0, 3.0, 1e-3, 12345.678])])
    for v in values:
        scale, zero_point = sess.run(None, {sess.get_inputs()[0].name: np.array([v], np.float32)})
        want = np.floor(np.log2(np.float64(abs(v)))) - 4 if v else -np.inf
        assert scale.tolist() == [want], (v, scale, want)
        assert zero_point.tolist() == [0.0]
        if v in (powers[0], np.float32(3.0), np.float32(0.0)):  # graphfront's kernel gives the same
            assert observe(np.array([v], np.float32))[0].tolist() == [want]
