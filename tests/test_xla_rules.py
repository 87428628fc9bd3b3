"""Every op's ``xla`` rule against its torch kernel.

Each op type with an ``xla`` rule has a case below (the first test fails when a rule is
added without one): a job of that one op, fed random arrays, runs in compile_mode("xla")
and in the per-op plan (the torch kernels), and every output, and every variable an op
updates in place, must agree. Inputs that must come from another op (the argmax indices
of a max pool) are computed by that op's torch kernel first (``FED_BY``).
"""
import collections
import inspect
import typing

import jax  # noqa: F401 - a hard requirement of the `test` extra: its absence fails, never skips
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.ops import registry
from graphfront.ops.builder import build_op
from graphfront.ops.fused_ops import encode_constant


import torch  # noqa: E402

# ops whose inputs must come from another op: name -> (op computing them from the
# case's inputs with the torch kernel, its attrs, the args it feeds)
FED_BY = {}


def _pos(shape):
    return lambda r: r.uniform(0.5, 2.0, shape).astype(np.float32)


def _unit(shape):
    return lambda r: r.uniform(-0.9, 0.9, shape).astype(np.float32)


def _any(shape, dtype=np.float32):
    return lambda r: r.uniform(-2.0, 2.0, shape).astype(dtype)


def _labels(shape, depth):
    return lambda r: r.integers(0, depth, shape).astype(np.int32)


_DOMAIN = {"log": _pos, "sqrt": _pos, "rsqrt": _pos, "reciprocal": _pos, "log2": _pos, "log1p": _pos,
           "lgamma": _pos, "acos": _unit, "asin": _unit, "atanh": _unit,
           "acosh": lambda s: (lambda r: r.uniform(1.5, 3.0, s).astype(np.float32))}
_SCALAR = {"has_float_operand": True, "float_operand": 1.5}
_CONV = {"padding_before": [1, 1], "data_format": "channels_first", "kernel_size": [3, 3], "strides": [2, 2],
         "dilation_rate": [1, 1]}
_POOL = {"padding": "same_upper", "padding_before": [0, 0], "padding_after": [0, 0], "data_format": "channels_first",
         "pool_size": [3, 3], "strides": [2, 2], "ceil_mode": False}


def _pool(n, kind, grad=False, last=False):
    attrs = {**_POOL, "padding_before": [0] * n, "padding_after": [0] * n, "pool_size": [3] * n,
             "strides": [2] * n, "padding": "same_lower" if n == 3 else "same_upper"}
    if kind == "avg" and n == 1:  # (a window without pads: the divisor is the window size)
        attrs["padding"] = "valid"
    shape = (2, 3) + (5,) * n
    if last:
        attrs["data_format"] = "channels_last"
        shape = (2,) + (5,) * n + (3,)
    if kind == "max":  # ReLU outputs: windows with tied zeros check the first-maximum rule
        x = lambda r: np.maximum(r.uniform(-1.0, 1.0, shape), 0).astype(np.float32)  # noqa: E731
    else:
        x = _any(shape)
    if not grad:
        return {"x": x}, attrs
    out = [2 if attrs["padding"] == "valid" else 3] * n
    yshape = (2, 3) + tuple(out) if not last else (2,) + tuple(out) + (3,)
    return {"x": x, "y": _any(yshape), "dy": _any(yshape)}, attrs


CASES = {
    "identity": ({"in": _any((2, 3))}, {}),
    "relu": ({"x": _any((2, 3, 4))}, {}),
    "relu_grad": ({"y": _any((2, 3)), "dy": _any((2, 3))}, {}),
    "cast": ({"in": _any((2, 3))}, {"dtype": flow.int32}),
    "scalar_add": ({"in": _any((2, 3))}, _SCALAR),
    "scalar_mul": ({"in": _any((2, 3), np.int32)}, {"has_int_operand": True, "int_operand": 3}),
    "add_n": ({"in": [_any((2, 3)), _any((2, 3)), _any((2, 3))]}, {}),
    "broadcast_add": ({"x": _any((2, 3, 4)), "y": _any((3, 1))}, {}),
    "broadcast_sub": ({"x": _any((2, 3, 4)), "y": _any((1, 4))}, {}),
    "broadcast_mul": ({"x": _any((2, 3, 4)), "y": _any((2, 3, 4))}, {}),
    "broadcast_div": ({"x": _any((2, 3, 4)), "y": _pos((3, 1))}, {}),
    "broadcast_pow": ({"x": _pos((2, 3, 4)), "y": _any((1, 4))}, {}),
    "broadcast_floor_mod": ({"x": _any((2, 3)), "y": _pos((2, 3))}, {}),
    "broadcast_fmod": ({"x": _any((2, 3)), "y": _pos((2, 3))}, {}),
    "broadcast_maximum": ({"x": _any((2, 3)), "y": _any((1, 3))}, {}),
    "broadcast_minimum": ({"x": _any((2, 3)), "y": _any((1, 3))}, {}),
    "reduce_sum": ({"input_tensor": _any((2, 3, 4))}, {"axis": [0, 2], "keepdims": True}),
    "reduce_max": ({"input_tensor": _any((2, 3, 4))}, {"axis": [1], "keepdims": False}),
    "reduce_min": ({"input_tensor": _any((2, 3, 4), np.int32)}, {"axis": [-1, 0], "keepdims": True}),
    "reduce_prod": ({"input_tensor": _pos((2, 3, 4))}, {"axis": [2, 0, 1], "keepdims": False}),  # -> (1,)
    **{f"reduce_{k}_device_stage": ({"in": lambda r: r.integers(0, 3, (2, 3, 4)).astype(np.float32)},
                                     {"axis": [0, 2]}, ["out", "mask", "count"]) for k in ("max", "min")},
    **{f"reduce_{k}_global_stage": ({"in": lambda r: r.integers(0, 3, (2, 3, 4)).astype(np.float32),
                                     "device_count": lambda r: r.integers(1, 4, (2, 3, 4)).astype(np.int32)},
                                    {"axis": [1], "keepdims": False}, ["out", "mask"]) for k in ("max", "min")},
    **{f"reduce_{k}_device_stage_grad": ({"out_diff": _any((2, 1, 4)),
                                          "mask": lambda r: r.integers(0, 2, (2, 3, 4)).astype(np.int8),
                                          "count": lambda r: r.integers(1, 4, (2, 1, 4)).astype(np.int32)},
                                         {"axis": [1]}) for k in ("max", "min")},
    **{f"reduce_{k}_global_stage_grad": ({"out_diff": _any((2, 4)), "mask": lambda r: np.ones((2, 3, 4), np.int8),
                                          "device_count": lambda r: r.integers(1, 4, (2, 3, 4)).astype(np.int32)},
                                         {"axis": [1], "keepdims": False}) for k in ("max", "min")},
    "combined_margin_loss": ({"x": _unit((4, 5)), "label": lambda r: np.array([0, 4, -1, 5], np.int32)},
                             {"m1": 0.3, "m2": 0.5, "m3": 0.4, "depth": 5}, ["y", "theta"]),
    "combined_margin_loss_grad": ({"dy": _any((4, 5)), "label": lambda r: np.array([2, -1, 4, 0], np.int32),
                                   "theta": lambda r: r.uniform(0.3, 2.8, (4,)).astype(np.float32)},
                                  {"m1": 1.35, "m2": 0.5, "m3": 0.0, "depth": 5}),
    "reduce_sum_like": ({"x": _any((2, 3, 4)), "like": _any((2, 1, 4))}, {"axis": [1]}),
    "broadcast_like": ({"x": _any((2, 4)), "like": _any((2, 3, 4))}, {"broadcast_axes": [1]}),
    "reshape": ({"in": _any((2, 3, 4))}, {"shape": (4, -1)}),
    "bias_add": ({"a": _any((2, 3, 4)), "b": _any((3,))}, {"axis": 1}),
    "matmul": ({"a": _any((4, 3)), "b": _any((5, 4))}, {"transpose_a": True, "transpose_b": True, "alpha": 0.5}),
    "batch_matmul": ({"a": _any((2, 3, 4)), "b": _any((2, 4, 5))}, {}),
    "broadcast_matmul": ({"a": _any((2, 3, 4)), "b": _any((5, 4))}, {"transpose_b": True}),
    "softmax": ({"in": _any((3, 5))}, {}),
    "softmax_grad": ({"y": _pos((3, 5)), "dy": _any((3, 5))}, {}),
    "sparse_softmax_cross_entropy": ({"prediction": _any((4, 6)), "label": _labels((4,), 6)}, {"depth": 6}),
    "sparse_softmax_cross_entropy_ms": ({"prediction": _any((4, 6)), "label": _labels((4,), 6)}, {"depth": 6}),
    "sparse_softmax_cross_entropy_grad": ({"label": _labels((4,), 6), "dy": _any((4,)), "prob": _pos((4, 6))},
                                          {"depth": 6}),
    "sparse_softmax_cross_entropy_ms_grad": ({"label": _labels((4,), 6), "dy": _any((4,)), "prob": _pos((4, 6))},
                                             {"depth": 6}),
    "fused_bias_add_sparse_softmax_cross_entropy": ({"prediction": _any((4, 6), np.float16), "bias": _any((6,)),
                                                     "label": _labels((4,), 6)}, {"depth": 6}),
    "fused_bias_add_sparse_softmax_cross_entropy_grad": ({"label": _labels((4,), 6), "dy": _any((4,)),
                                                          "prob": _pos((4, 6))}, {"depth": 6, "dtype": flow.float16}),
    "conv1d": ({"in": _any((2, 3, 9)), "weight": _any((4, 3, 3)), "bias": _any((4,))},
               {**_CONV, "filters": 4, "padding_before": [1], "kernel_size": [3], "strides": [2],
                "dilation_rate": [1]}),
    "conv2d": ({"in": _any((2, 9, 9, 4)), "weight": _any((6, 3, 3, 2))},
               {**_CONV, "filters": 6, "groups": 2, "data_format": "channels_last", "dilation_rate": [2, 1]}),
    "conv3d": ({"in": _any((1, 2, 5, 6, 5)), "weight": _any((3, 2, 3, 3, 3)), "bias": _any((3,))},
               {**_CONV, "filters": 3, "padding_before": [1, 0, 1], "kernel_size": [3, 3, 3], "strides": [1, 2, 1],
                "dilation_rate": [1, 1, 1]}),
    "conv_data_grad": ({"dy": _any((2, 4, 5, 5)), "filter": _any((4, 3, 3, 3)), "x_like": _any((2, 3, 9, 9))},
                       {**_CONV, "num_spatial_dims": 2, "groups": 1}),
    "conv_filter_grad": ({"dy": _any((2, 5, 5, 4)), "x": _any((2, 9, 9, 3))},
                         {**_CONV, "num_spatial_dims": 2, "groups": 1, "data_format": "channels_last"}),
    "conv_bias_grad": ({"dy": _any((2, 4, 5, 5))}, {"data_format": "channels_first", "num_spatial_dims": 2}),
    "fused_conv_grad": ({"dy": _any((2, 4, 5, 5)), "filter": _any((4, 3, 3, 3)), "x": _any((2, 3, 9, 9))},
                        {**_CONV, "num_spatial_dims": 2, "groups": 1}, ["dx", "filter_diff", "bias_diff"]),
    "fused_matmul_bias": ({"x": _any((3, 4)), "weight": _any((5, 4)), "bias": _any((5,))}, {}),
    "fused_bias_add_relu": ({"a": _any((2, 3, 4)), "b": _any((3,))}, {"axis": 1}),
    "fused_scalar_mul_add": ({"in": _any((2, 3))}, {"scale": 0.5, "shift": -1.25}),
    "folded_constant": ({}, {"shape": (2, 3), "dtype": flow.float,
                             "data": encode_constant(torch.arange(6, dtype=torch.float32))}),
    "normalization": ({"x": _any((2, 3, 4, 4)), "moving_mean": _any((3,)), "moving_variance": _pos((3,)),
                       "gamma": _any((3,)), "beta": _any((3,))}, {"axis": 1, "epsilon": 1e-5, "training": False},
                      ["y"]),
    "normalization_grad": ({"x": _any((2, 3, 4)), "dy": _any((2, 3, 4)), "mean": _any((3,)),
                            "inv_variance": _pos((3,)), "gamma": _any((3,))}, {"axis": 1, "epsilon": 1e-5},
                           ["gamma_diff", "beta_diff", "dx"]),
    "normalization_add_relu": ({"x": _any((2, 3, 4, 4)), "addend": _any((2, 3, 4, 4)), "moving_mean": _any((3,)),
                                "moving_variance": _pos((3,)), "gamma": _any((3,)), "beta": _any((3,))},
                               {"axis": 1, "epsilon": 1e-5, "training": False}, ["y", "reserve_space"]),
    "normalization_add_relu_grad": ({"x": _any((2, 3, 5)), "dy": _any((2, 3, 5)), "mean": _any((3,)),
                                     "inv_variance": _pos((3,)), "gamma": _any((3,)), "beta": _any((3,)),
                                     "reserve_space": lambda r: r.integers(-2 ** 31, 2 ** 31, (1,)).astype(np.int32),
                                     "y": _any((2, 3, 5))}, {"axis": 1, "epsilon": 1e-5},
                                    ["gamma_diff", "beta_diff", "dx", "addend_diff"]),
    "dropout": ({"in": _any((3, 4)), "mask": lambda r: r.integers(0, 2, (3, 4)).astype(np.int8)},
                {"scale": 4.0}),
    "random_mask_like": ({"like": _any((3, 4))}, {"rate": 0.0, "seed": 1}),  # rate 0: the draws cannot differ
    "dropout_grad": ({"dy": _any((3, 4)), "mask": lambda r: r.integers(0, 2, (3, 4)).astype(np.int8)},
                     {"scale": 2.0}),
    "adam_bias_correction_factor": ({"train_step": lambda r: np.array([3], np.int64)}, {"beta": 0.9}),
    # ops updating inputs in place: those inputs are variables (the names in the 4th item)
    "assign": ({"ref": _any((2, 3)), "value": _any((2, 3))}, {}, [], {"ref"}),
    "sgd_update": ({"model": _any((2, 3)), "model_diff": _any((2, 3)), "learning_rate": _pos((1,))},
                   {"weight_decay": 0.1, "l2": 0.01, "scale": 0.5}, [], {"model"}),
    "momentum_update": ({"model": _any((2, 3)), "model_diff": _any((2, 3)), "momentum": _any((2, 3)),
                         "skip_if": lambda r: np.array([0], np.int64)},
                        {"learning_rate_val": 0.1, "beta": 0.8, "l1": 0.01}, [], {"model", "momentum"}),
    "adam_update": ({"model": _any((2, 3)), "model_diff": _any((2, 3)), "learning_rate": _pos((1,)),
                     "bias_correction1": _pos((1,)), "bias_correction2": _pos((1,)), "m": _any((2, 3)),
                     "v": _pos((2, 3)), "max_v": _pos((2, 3))},
                    {"amsgrad": True, "epsilon": 1e-8, "weight_decay": 0.01}, [], {"model", "m", "v", "max_v"}),
    "multi_scalar_mul_by_tensor": ({"x": [_any((2, 3)), _any((4,), np.float16), _any((5,))], "scalar": _any((1,))},
                                   {}, ["y", "y", "y"]),
    "multi_cast": ({"in": [_any((2, 3)), _any((4,)), _any((5,))]}, {"dtype": flow.float16}, ["out", "out", "out"]),
    "multi_tensor_sgd_update": ({"model": [_any((2, 3)), _any((4,))], "model_diff": [_any((2, 3)), _any((4,))],
                                 "learning_rate": _pos((1,))}, {"weight_decay": 0.1}, [], {"model"}),
    "multi_tensor_momentum_update": ({"model": [_any((2, 3)), _any((4,))], "model_diff": [_any((2, 3)), _any((4,))],
                                      "momentum": [_any((2, 3)), _any((4,))], "learning_rate": _pos((1,))},
                                     {"beta": 0.9, "scale": 2.0}, [], {"model", "momentum"}),
    "multi_tensor_adam_update": ({"model": [_any((2, 3)), _any((4,))], "model_diff": [_any((2, 3)), _any((4,))],
                                  "m": [_any((2, 3)), _any((4,))], "v": [_pos((2, 3)), _pos((4,))],
                                  "max_v": [_pos((2, 3)), _pos((4,))], "learning_rate": _pos((1,)),
                                  "train_step": lambda r: np.array([3], np.int64)},
                                 {"amsgrad": True, "epsilon": 1e-8, "weight_decay": 0.01, "scale": 0.5}, [],
                                 {"model", "m", "v", "max_v"}),
}
_F64 = np.float64  # float64 cases: the two implementations agree to rounding (tolerance of _tolerance)
CASES.update({
    "gather": ({"in": _any((5, 3, 2), _F64), "indices": lambda r: r.integers(-1, 6, (2, 4)).astype(np.int32)},
               {"axis": 0}),  # -1 and 5 are out of range: zero slices
    "unsorted_segment_sum": ({"data": _any((2, 3, 4), _F64), "segment_ids": lambda r: r.integers(-1, 6, (3,))
                              .astype(np.int64)}, {"axis": 1, "num_segments": 5}),
    "unsorted_segment_sum_like": ({"data": _any((6, 4), _F64), "segment_ids": _labels((6,), 3),
                                   "like": _any((3, 4), _F64)}, {"axis": 0}),
    "transpose": ({"input": _any((2, 3, 4))}, {"perm": [2, 0, 1]}),
    "reshape_like": ({"in": _any((2, 6)), "like": _any((3, 4))}, {}),
    "flatten": ({"in": _any((2, 3, 4))}, {"start_dim": 1, "end_dim": -1}),
    "squeeze": ({"in": _any((2, 1, 4, 1))}, {"axes": [1, 3]}),
    "expand_dims": ({"in": _any((2, 4))}, {"axis": -1}),
    "concat": ({"in": [_any((2, 3)), _any((2, 1)), _any((2, 2))]}, {"axis": 1}),
    "one_hot": ({"indices": lambda r: r.integers(-1, 5, (3, 2)).astype(np.int32)},
                {"depth": 4, "floating_on_value": 2.5, "floating_off_value": -1.0, "dtype": flow.float}),
    "constant": ({}, {"shape": (2, 3), "dtype": flow.int64, "integer_value": 7}),
    "zero_like": ({"like": _any((2, 3))}, {}),
    "ones_like": ({"x": _any((2, 3), np.int32)}, {}),
    "gelu": ({"in": _any((3, 5), _F64)}, {}),
    "gelu_grad": ({"x": _any((3, 5), _F64), "dy": _any((3, 5), _F64)}, {}),
    "layer_norm": ({"x": _any((2, 3, 4), _F64), "beta": _any((3, 4), _F64), "gamma": _any((3, 4), _F64)},
                   {"center": True, "scale": True, "begin_norm_axis": 1, "begin_params_axis": 1, "epsilon": 1e-5},
                   ["y", "mean", "inv_variance", "normalized"]),
    "layer_norm_grad": ({"dy": _any((2, 3, 4), _F64), "x": _any((2, 3, 4), _F64), "mean": _any((2, 3), _F64),
                         "inv_variance": lambda r: r.uniform(0.5, 2.0, (2, 3)), "_add_to_output": _any((2, 3, 4), _F64)},
                        {"begin_norm_axis": -1, "epsilon": 1e-5}),
    "layer_norm_param_grad": ({"dy": _any((2, 3, 4), _F64), "normalized": _any((2, 3, 4), _F64),
                               "gamma": _any((4,), _F64)}, {"begin_params_axis": 2},
                              ["normalized_diff", "beta_diff", "gamma_diff", "reduce_buf"]),
    "fused_layer_norm_grad": ({"dy": _any((2, 3, 4), _F64), "x": _any((2, 3, 4), _F64), "mean": _any((2, 3), _F64),
                               "inv_variance": lambda r: r.uniform(0.5, 2.0, (2, 3)), "gamma": _any((4,), _F64),
                               "_add_to_output": _any((2, 3, 4), _F64)}, {"begin_norm_axis": -1, "epsilon": 1e-5},
                              ["dx", "gamma_diff", "beta_diff"]),
})
CASES.update({
    "broadcast_div_grad": ({"y": _pos((1, 4)), "z": _any((3, 4)), "dz": _any((3, 4))}, {}),
    "broadcast_pow_x_grad": ({"x": _pos((3, 4)), "y": _any((1, 4)), "z": _any((3, 4)), "dz": _any((3, 4))}, {}),
    "broadcast_pow_y_grad": ({"x": _pos((3, 4)), "y": _any((4,)), "z": _any((3, 4)), "dz": _any((3, 4))}, {}),
    "multiply": ({"x": _any((2, 3), _F64), "y": _any((2, 3), _F64)}, {}),
    "cast_like": ({"in": _any((2, 3)), "dtype_like": _any((1,), np.int32)}, {}),
    "scalar_pow": ({"in": _pos((2, 3))}, _SCALAR),
    "scalar_pow_grad": ({"x": _pos((2, 3)), "dy": _any((2, 3))}, _SCALAR),
})
CASES.update({
    "log_softmax": ({"in": _any((3, 5), _F64)}, {}),
    "log_softmax_grad": ({"prob": lambda r: np.log(r.dirichlet(np.ones(5), 3)), "dy": _any((3, 5), _F64)}, {}),
    "softmax_cross_entropy": ({"prediction": _any((3, 5), _F64), "label": lambda r: r.dirichlet(np.ones(5), 3)}, {}),
    "softmax_cross_entropy_grad": ({"prob": lambda r: r.dirichlet(np.ones(5), 3),
                                    "label": lambda r: r.dirichlet(np.ones(5), 3), "dy": _any((3,), _F64)}, {}),
    "sigmoid_cross_entropy": ({"prediction": lambda r: r.uniform(-30, 30, (3, 4)), "label": _any((3, 4), _F64)},
                              {}),
    "sigmoid_cross_entropy_grad": ({"prediction": _any((3, 4), _F64), "label": _any((3, 4), _F64),
                                    "loss_diff": _any((3, 4), _F64)}, {}),
})
_COND = lambda shape: (lambda r: r.integers(0, 2, shape).astype(np.int8))  # noqa: E731
_TRIL = {"diagonal": -1, "floating_fill_value": -2.5, "integer_fill_value": 0, "is_floating_fill_value": True}
CASES.update({
    "where": ({"condition": _COND((2, 1, 4)), "x": _any((3, 4)), "y": _any((2, 3, 1))}, {}),
    "where_scalar_x": ({"condition": _COND((2, 3)), "y": _any((2, 3))}, _SCALAR),
    "where_scalar_y": ({"condition": _COND((2, 3)), "x": _any((3,), np.int32)},
                       {"has_int_operand": True, "int_operand": -4}),
    "where_scalar_xy": ({"condition": _COND((2, 3))}, {"has_x_float_operand": True, "x_float_operand": 1.5,
                                                      "has_y_int_operand": True, "y_int_operand": 3}),
    "masked_fill": ({"x": _any((2, 3)), "mask": _COND((1, 3))}, _SCALAR),
    "tril": ({"in": _any((2, 3, 4))}, _TRIL),
    "triu": ({"in": _any((3, 4), np.int32)}, {"diagonal": 1}),
    "fused_scale_tril": ({"in": _any((3, 4))}, {**_TRIL, "floating_scale_value": 0.5, "is_floating_scale_value": True}),
})
_CLIP = {"clip_by_scalar": {"floating_min": -0.5, "floating_max": 1.0},
         "clip_by_scalar_min": {"floating_min": -0.5}, "clip_by_scalar_max": {"floating_max": 1.0}}
for _name, _attrs in _CLIP.items():
    CASES[_name] = ({"x": _any((3, 4))}, _attrs)
    CASES[f"{_name}_grad"] = ({"dy": _any((3, 4)), "x": _any((3, 4))}, _attrs)
CASES["clip_by_scalar"] = ({"x": _any((3, 4), np.int32)}, {"integral_min": -1, "integral_max": 1})  # (integers)


def _with_inf(shape):
    def draw(r):
        a = r.uniform(-2.0, 2.0, shape).astype(np.float32)
        a.flat[r.integers(0, a.size, 3)] = [np.inf, -np.inf, np.nan]
        return a
    return draw


CASES.update({
    "argmax": ({"in": lambda r: r.integers(0, 3, (4, 5)).astype(np.float32)}, {}),  # ties: the first maximum
    "reduce_any": ({"input_tensor": lambda r: r.integers(0, 2, (2, 3, 4)).astype(np.int8)},
                   {"axis": [0, 1, 2], "keepdims": False}),  # -> (1,)
    "reduce_all": ({"input_tensor": lambda r: r.integers(0, 3, (2, 3, 4)).astype(np.int32)},
                   {"axis": [0], "keepdims": True}),
    "square_sum": ({"x": _any((3, 4), _F64)}, {}),
    "multi_square_sum": ({"x": [_any((3, 4), _F64), _any((5,), _F64)]}, {}),
    "count_not_finite": ({"x": _with_inf((3, 4))}, {}),
    "multi_count_not_finite": ({"x": [_with_inf((3, 4)), _with_inf((6,))]}, {}),
})
_MASK = lambda shape: (lambda r: r.integers(0, 2, shape).astype(np.int8))  # noqa: E731
CASES.update({
    "amp_white_identity": ({"in": _any((2, 3))}, {}),
    "parallel_cast": ({"in": _any((2, 3))}, {"sbp_parallel": "B"}),
    "hierarchical_parallel_cast": ({"in": _any((2, 3))}, {"nd_sbp": ["B"]}),
    "tuple_identity": ({"in": [_any((2, 3)), _any((4,), np.int32)]}, {}, ["out", "out"]),
    "broadcast_matmul_grad_b": ({"a": _any((2, 3, 4), _F64), "b": _any((2, 3, 5), _F64),
                                 "_add_to_output": _any((4, 5), _F64)}, {"alpha": 0.5}),
    "fused_bias_add_gelu": ({"a": _any((2, 3, 4), _F64), "b": _any((3,), _F64)}, {"axis": 1}),
    "fused_bias_add_gelu_grad": ({"a": _any((2, 3, 4), _F64), "b": _any((4,), _F64), "dy": _any((2, 3, 4), _F64)},
                                 {"axis": 2}),
    "fused_bias_add_mask_scale": ({"a": _any((2, 3, 4)), "b": _any((3,)), "mask": _MASK((2, 3, 4)),
                                   "_add_to_output": _any((2, 3, 4))}, {"axis": 1, "scale": 2.0}),
    "fused_cast_scale": ({"x": _any((2, 3), np.int32), "scale_by_tensor": _any((1,), _F64)}, {"scale": 0.25}),
})
_SLICE = {"start": [1, -1, 0], "stop": [3, -5, 4], "step": [1, -2, 3]}  # negative steps and strides
_NARROW = {"dim": 1, "start": -3, "length": 2}
_SAME = {"padding": "same_lower", "data_format": "channels_first", "kernel_size": [3, 3], "strides": [2, 2],
         "dilation_rate": [1, 1]}
_PAD = {"padding_before": [1, 0, 2], "padding_after": [0, 2, 1], "floating_constant_value": -1.5,
        "integral_constant_value": 0}
CASES.update({
    "split_like": ({"in": _any((2, 6)), "like": [_any((2, 1)), _any((2, 3)), _any((2, 2))]}, {"axis": 1},
                   ["out", "out", "out"]),
    "slice": ({"x": _any((4, 5, 4))}, _SLICE),
    "slice_grad": ({"dy": _any((2, 2, 2))}, {"like_shape": (4, 5, 4), **_SLICE}),
    "slice_update": ({"x": _any((4, 5, 4)), "update": _any((2, 2, 2))}, _SLICE),
    "narrow": ({"in": _any((2, 5, 3))}, _NARROW),
    "narrow_grad": ({"dy": _any((2, 2, 3)), "like": _any((2, 5, 3))}, _NARROW),
    "expand": ({"in": _any((3, 1))}, {"logical_in_shape": [3, 1], "logical_expand_shape": [2, 3, 4]}),
    "expand_grad": ({"in": _any((2, 3, 4))}, {"logical_out_shape": [3, 1], "logical_expand_shape": [2, 3, 4]}),
    "pad": ({"x": _any((2, 3, 4))}, _PAD),
    "pad_grad": ({"dy": _any((3, 5, 7))}, _PAD),
    # (5 and 6 by a 3-window of stride 2: totals 2 and 1, to 7 and 7)
    "same_padding": ({"x": _any((2, 5, 6, 3))}, {**_SAME, "data_format": "channels_last"}),
    "same_padding_grad": ({"x_like": _any((2, 3, 5, 6)), "dy": _any((2, 3, 7, 7))}, _SAME),
})
def _with_zeros(shape):
    return lambda r: (r.uniform(-2.0, 2.0, shape) * r.integers(0, 2, shape)).astype(np.float64)  # half zeros


for _name in ("xdivy", "xlogy", "floordiv"):
    _y = _pos((3, 4)) if _name == "xlogy" else _any((3, 4), _F64)
    _y = (lambda r: r.uniform(0.5, 2.0, (3, 4))) if _name == "xlogy" else _y
    CASES[_name] = ({"x": _with_zeros((3, 4)), "y": _y}, {})
    for _side in ("x", "y"):
        CASES[f"{_name}_{_side}_grad"] = ({"x": _with_zeros((3, 4)), "y": _y, "dz": _any((3, 4), _F64)}, {})
CASES["reciprocal_no_nan"] = ({"x": _with_zeros((3, 4))}, {})
CASES["reciprocal_no_nan_grad"] = ({"x": _with_zeros((3, 4)), "dy": _any((3, 4), _F64)}, {})
for _kind in ("maximum", "minimum"):
    _ties = lambda r: r.integers(-1, 2, (3, 4)).astype(np.float32)  # noqa: E731 - ties go to x
    CASES[f"elementwise_{_kind}"] = ({"x": _ties, "y": _ties}, {})
    CASES[f"elementwise_{_kind}_backward"] = ({"dz": _any((3, 4)), "x": _ties, "y": _ties}, {}, ["dx", "dy"])
for _kind in ("add", "sub", "mul", "div"):
    CASES[f"scalar_{_kind}_by_tensor"] = ({"x": _any((2, 3)), "scalar": _pos((1,))}, {})
CASES["scalar_div_by_tensor"] = ({"x": lambda r: r.integers(-9, 10, (2, 3)).astype(np.int32),
                                  "scalar": lambda r: np.array([-4], np.int32)}, {})  # truncates toward zero
CASES["scalar_floordiv"] = ({"in": lambda r: r.integers(-9, 10, (2, 3)).astype(np.int64)},
                            {"has_int_operand": True, "int_operand": -4})
CASES["scalar_fmod"] = ({"in": _any((2, 3), _F64)}, {"has_float_operand": True, "float_operand": -0.75})
_PROB = lambda shape: (lambda r: r.uniform(0.05, 0.95, shape))  # noqa: E731 - (float64) in (0, 1)
CASES.update({
    "binary_cross_entropy": ({"input": _PROB((3, 4)), "target": _PROB((3, 4)), "weight": _PROB((3, 4))}, {}),
    "binary_cross_entropy_grad": ({"input": _PROB((3, 4)), "target": _PROB((3, 4)), "dy": _any((3, 4), _F64)}, {}),
    "binary_cross_entropy_with_logits": ({"input": lambda r: r.uniform(-30, 30, (3, 4)), "target": _PROB((3, 4)),
                                          "weight": _PROB((3, 4)), "pos_weight": _PROB((4,))},
                                         {"has_pos_weight": True}),
    "binary_cross_entropy_with_logits_grad": ({"input": _any((3, 4), _F64), "target": _PROB((3, 4)),
                                               "dy": _any((3, 4), _F64)}, {"has_pos_weight": False}),
    "kl_div_loss": ({"input": _any((3, 4), _F64), "target": lambda r: np.abs(_with_zeros((3, 4))(r))},
                    {"log_target": False}),  # (probabilities, zeros among them)
    "kl_div_loss_grad": ({"input": _any((3, 4), _F64), "target": _any((3, 4), _F64), "dy": _any((3, 4), _F64)},
                         {"log_target": True}),
    "smooth_l1_loss": ({"input": _any((3, 4), _F64), "target": _any((3, 4), _F64)}, {"beta": 0.5}),
    "smooth_l1_loss_grad": ({"input": _any((3, 4), _F64), "target": _any((3, 4), _F64), "dy": _any((3, 4), _F64)},
                            {"beta": 0.5}),
})
CASES.update({
    "prelu": ({"x": _any((2, 3, 4), _F64), "alpha": _any((3,), _F64)}, {}),
    "prelu_grad": ({"x": _any((2, 3, 4), _F64), "dy": _any((2, 3, 4), _F64), "alpha": _any((3,), _F64)}, {},
                   ["dx", "alpha_diff"]),
    "tf_prelu": ({"x": _any((2, 3, 4), _F64), "alpha": _any((1, 4), _F64)}, {}),
    "tf_prelu_grad": ({"x": _any((2, 3, 4), _F64), "dy": _any((2, 3, 4), _F64), "alpha": _any((1, 4), _F64)}, {},
                      ["dx", "alpha_diff"]),
    "l2_normalize": ({"x": _any((3, 4), _F64)}, {"axis": -1, "epsilon": 1.0}, ["y", "square_x_sum"]),  # rows both
    "l2_normalize_grad": ({"dy": _any((3, 4), _F64), "y": _any((3, 4), _F64),  # sides of epsilon
                           "square_x_sum": lambda r: r.uniform(0.5, 1.5, (3, 1))}, {"axis": 1, "epsilon": 1.0}),
})
CASES.update({
    "roll": ({"in": _any((3, 4, 5))}, {"shifts": [2, -1], "dims": [0, 2]}),
    "flip": ({"x": _any((3, 4, 5))}, {"dims": [0, -1]}),
    "flip_grad": ({"dy": _any((3, 4))}, {"dims": [1]}),
    "diag": ({"in": _any((4,))}, {"diagonal": -1}),
    "diag_grad": ({"dy": _any((3,)), "in": _any((3, 4))}, {"diagonal": 1}),
    "arange": ({}, {"float_start": 0.5, "float_delta": 0.1, "float_limit": 2.0, "dtype": flow.float}),
    "eye": ({}, {"rows": 3, "cols": 4, "dtype": flow.int32}),
    "hierarchical_parallel_cast_like": ({"in": _any((2, 3)), "like": _any((2, 3))}, {}),
})
CASES.update({  # ids -1 and 4 out of range: zero rows, nothing added
    "batch_gather": ({"in": _any((2, 4, 3), _F64), "indices": lambda r: r.integers(-1, 5, (2, 5)).astype(np.int32)},
                     {}),
    "unsorted_batch_segment_sum": ({"data": _any((2, 5, 3), _F64),
                                    "segment_ids": lambda r: r.integers(-1, 5, (2, 5)).astype(np.int64)},
                                   {"num_segments": 4}),
})
# the activation family (graphfront/ops/activation_ops.py): forward on its input, grad on x or y and dy
for _name, _attrs, _x in (("leaky_relu", {"alpha": 0.2}, "x"), ("hardtanh", {"min_val": -0.5, "max_val": 1.0}, "in"),
                          ("hardsigmoid", {}, "in"), ("hardswish", {}, "in"), ("elu", {"alpha": 1.5}, "in"),
                          ("celu", {"alpha": 0.7}, "in"), ("selu", {}, "in"), ("silu", {}, "in"),
                          ("mish", {}, "in"), ("softsign", {}, "in")):
    _wide = lambda r: r.uniform(-5.0, 5.0, (3, 4))  # noqa: E731 - (float64) both sides of each break point
    CASES[_name] = ({_x: _wide}, _attrs)
    _src = "y" if _name == "hardtanh" else "x"
    CASES[f"{_name}_grad"] = ({_src: _wide, "dy": _any((3, 4), _F64)}, _attrs)
for _t in ("max", "avg"):
    for _n in (1, 2, 3):
        CASES[f"tf_{_t}_pool_{_n}d"] = _pool(_n, _t, last=_n == 2)
        CASES[f"tf_{_t}_pool_{_n}d_grad"] = _pool(_n, _t, grad=True, last=_n == 2)
for _n in (1, 2, 3):
    _ins, _attrs = _pool(_n, "max", last=_n == 2)
    CASES[f"fused_tf_max_pool_{_n}d"] = (_ins, {**_attrs, "relu": _n == 1}, ["y", "indices"])
    _yshape = (2, 3) + (3,) * _n if _n != 2 else (2, 3, 3, 3)
    CASES[f"fused_tf_max_pool_{_n}d_grad"] = ({**_ins, "dy": _any(_yshape)}, {**_attrs, "relu_grad": _n == 2})
    FED_BY[f"fused_tf_max_pool_{_n}d_grad"] = (f"fused_tf_max_pool_{_n}d", {**_attrs, "relu": False},
                                               ["y", "indices"] if _n == 2 else ["indices"])
for _name in ("pow", "atan2"):
    _x = _pos((2, 3)) if _name == "pow" else _any((2, 3))
    CASES[_name] = ({"x": _x, "y": _any((2, 3))}, {})
    for _side in ("x", "y"):
        CASES[f"{_name}_{_side}_grad"] = ({"x": _x, "y": _any((2, 3)), "dz": _any((2, 3))}, {})
CASES["sigmoid"] = ({"in": _any((2, 3))}, {})
CASES["sigmoid_grad"] = ({"y": _unit((2, 3)), "dy": _any((2, 3))}, {})
_IDS = lambda lo, hi, shape: (lambda r: r.integers(lo, hi, shape).astype(np.int32))  # noqa: E731
CASES.update({  # index ops: ids outside the range give zeros / add nothing (the dim_* ops check them)
    "gather_nd": ({"params": _any((4, 3, 2), _F64), "indices": _IDS(-1, 5, (5, 2))}, {}),
    "dim_gather": ({"input": _any((3, 4), _F64), "index": _IDS(0, 3, (2, 3))}, {"dim": 0}),
    "dim_scatter_add_like": ({"like": _any((3, 4), _F64), "index": _IDS(0, 4, (2, 3)), "src": _any((2, 3), _F64)},
                             {"dim": 1}),
    "dim_scatter_add": ({"input": _any((3, 4), _F64), "index": _IDS(0, 3, (5, 2)), "src": _any((5, 2), _F64)},
                        {"dim": 0}),
    "dim_scatter_update": ({"input": _any((3, 4), _F64), "src": _any((2, 3), _F64),  # ids distinct along dim 1
                           "index": lambda r: np.stack([r.permutation(4)[:3] for _ in range(2)]).astype(np.int32)},
                           {"dim": 1}),
    "scatter_nd": ({"indices": _IDS(-1, 5, (5, 1)), "updates": _any((5, 3), _F64)}, {"shape": (4, 3)}),
    "scatter_nd_like": ({"like": _any((4, 3, 2), _F64), "indices": _IDS(-1, 4, (3, 2)),
                         "updates": _any((3, 2), _F64)}, {}),
    "tensor_scatter_nd_add": ({"params": _any((4, 3), _F64), "updates": _any((5, 3), _F64),
                               "indices": _IDS(-1, 5, (5, 1))}, {}),
    "tensor_scatter_nd_update": ({"params": _any((4, 3), _F64), "updates": _any((5, 3), _F64),  # (no duplicate)
                                  "indices": lambda r: r.permutation([-1, 0, 2, 3, 5]).reshape(5, 1)}, {}),
})


def _ties(shape):  # (float64) few distinct values, an inf and a NaN: ties and NaN ordering
    def draw(r):
        a = r.integers(-2, 3, shape).astype(np.float64)
        a.flat[r.choice(a.size, 2, replace=False)] = [np.inf, np.nan]
        return a
    return draw


CASES.update({  # ties in index order, NaN the largest (as torch.sort)
    "sort": ({"in": _ties((3, 7))}, {"direction": "DESCENDING"}),
    "arg_sort": ({"in": _ties((3, 7))}, {"direction": "ASCENDING"}),
    "top_k": ({"in": _ties((3, 7))}, {"k": 4}),
    "in_top_k": ({"targets": _IDS(0, 6, (5,)),  # ties, and a row with a non-finite score
                  "predictions": lambda r: np.where(np.arange(30).reshape(5, 6) == 8, np.inf,
                                                    r.integers(0, 3, (5, 6))).astype(np.float32)},
                 {"k": 2}),
})
_NLL_T = lambda r: r.choice([-100, 0, 1, 2, 3, 4], 6).astype(np.int64)  # noqa: E731 - ignore_index -100 among them
_P = lambda shape: (lambda r: r.uniform(0.05, 0.95, shape))  # noqa: E731 - (float64) probabilities
CASES.update({
    "nll": ({"input": _any((6, 5), _F64), "target": _NLL_T, "weight": _P((5,))}, {"ignore_index": -100}),
    "nll_grad": ({"input": _any((6, 5), _F64), "target": _NLL_T, "total_weight": _P((1,)), "dy": _any((6,), _F64)},
                 {"ignore_index": -100}),
})
for _t in ("sparse_cross_entropy", "sparse_cross_entropy_ms"):
    CASES[_t] = ({"prediction": _P((4, 6)), "label": _labels((4,), 6)}, {"depth": 6})
    CASES[f"{_t}_grad"] = ({"prediction": _P((4, 6)), "label": _labels((4,), 6), "dy": _any((4,), _F64)},
                           {"depth": 6})
def _padded(shape, padding):
    return shape[:len(shape) - len(padding) // 2] + tuple(
        shape[-1 - i] + padding[2 * i] + padding[2 * i + 1] for i in reversed(range(len(padding) // 2)))


_PADS = {1: [2, 1], 2: [1, 0, 2, 1], 3: [0, 1, 2, 1, 1, 0]}
for _n in (1, 2, 3):
    _shape = (2, 3) + (3,) * _n
    _attrs = {"padding": _PADS[_n], "floating_value": -1.5, "integral_value": 0}
    CASES[f"constant_pad{_n}d"] = ({"x": _any(_shape, _F64)}, _attrs)
    CASES[f"constant_pad{_n}d_grad"] = ({"dy": _any(_padded(_shape, _PADS[_n]), _F64)}, _attrs)
CASES["constant_pad2d"] = ({"x": _any((2, 3, 3, 3), np.int32)}, {"padding": [1, 0, 2, 1], "integral_value": 7})
for _name in ("reflection_pad2d", "replication_pad2d"):  # pads of 2: rows/columns reflected or replicated twice
    CASES[_name] = ({"x": _any((2, 3, 3, 4), _F64)}, {"padding": [2, 1, 2, 0]})
    CASES[f"{_name}_grad"] = ({"dy": _any((2, 3, 5, 7), _F64)}, {"padding": [2, 1, 2, 0]})
CASES.update({  # the framework test ops
    "ccrelu": ({"in": _any((2, 3), _F64)}, {}),
    "ccrelu_grad": ({"y": _any((2, 3), _F64), "dy": _any((2, 3), _F64)}, {}),
    "cpu_only_relu_test": ({"in": _any((2, 3))}, {}),
    "TestReshape": ({"in": _any((2, 6))}, {"shape": (3, 4)}),
    "TestSource": ({}, {}),
    "TestSourceMultiGpuFixedOutNum": ({}, {"out_num": 4}),
    "TestMultiOutputOrder": ({"in": _any((2, 3), np.int32)}, {}),
    "TestMultiInput": ({"x1": _any((2, 3)), "x2": _any((2, 3))}, {}),
    "TestMultiInputGrad": ({"x1": _any((2, 3)), "x2": _any((2, 3), _F64), "y_diff": _any((2, 3))}, {}),
    "TestDataTypeAttr": ({"in": _any((2, 3), _F64)}, {"output_type": flow.int32}),
    "TestListDataTypeAndListShapeAndListStringAttr": ({"in": _any((2,))}, {
        "out_shapes": [(2, 3), (4,)], "out_types": [flow.int32, flow.double], "string_list": ["a"]}, ["out", "out"]),
    "test_user_op_attr_auto_type": ({"in": _any((2, 3))}, {"int1": 1, "int2": 2}),
})
CASES.update({  # (the conditions assign: the harness checks that the variable moved)
    "assign_if": ({"ref": _any((2, 3)), "value": _any((2, 3)), "condition": lambda r: np.array([3], np.int32)}, {},
                  [], {"ref"}),
    "assign_if_not": ({"ref": _any((2, 3)), "value": _any((2, 3)), "condition": lambda r: np.array([0], np.int8)}, {},
                      [], {"ref"}),
    "l1_l2_regularize_gradient": ({"model": _with_zeros((3, 4)), "model_diff": _any((3, 4), _F64)},
                                  {"l1": 0.1, "l2": 0.01}),
})
CASES["cast_to_static_shape"] = ({"input": _any((2, 3), _F64)}, {})


# quantization-aware training: the observers and fake quantization (affine per channel, and
# symmetric per layer with a moving min/max updated in training)
CASES.update({
    "min_max_observer": ({"in": _any((4, 3, 2))}, {"per_layer_quantization": False,
                                                     "quantization_scheme": "affine"}),
    "moving_average_min_max_observer": ({"in": _any((3, 4)), "current_train_step": lambda r: np.array([2], np.int64),
                                         "moving_max": _pos((1,)), "moving_min": _pos((1,))},
                                        {"training": True, "stop_update_after_iters": 5, "momentum": 0.9,
                                         "quantization_scheme": "affine"}, None, {"moving_max", "moving_min"}),
    "fake_quantization": ({"in": _any((3, 4)), "scale": lambda r: np.array([0.05], np.float32),
                           "zero_point": lambda r: np.array([3.0], np.float32)}, {"quantization_scheme": "affine"}),
})
for _name in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "and", "or", "xor"):
    _ints = _any((2, 3), np.int32)  # values in -1..1: ties and zeros
    CASES[f"scalar_logical_{_name}"] = ({"in": _ints}, {"has_int_operand": True, "int_operand": 0})
    CASES[f"broadcast_{'logical_' + _name if _name in ('and', 'or', 'xor') else _name}"] = (
        {"x": _ints, "y": _any((1, 3), np.int32)}, {})
for _t in registry.registered_op_types():
    _rule = registry.lookup(_t).xla
    _base = _t[:-len("_grad")] if _t.endswith("_grad") else _t
    if _rule is not None and _t not in CASES and registry.has_op(_base) and registry.has_op(f"{_base}_grad") and \
            registry.lookup(_base).inputs == [registry.ArgDef("x")] and \
            registry.lookup(f"{_base}_grad").inputs == [registry.ArgDef("x"), registry.ArgDef("dy")]:  # unary family
        _dom = _DOMAIN.get(_base, _any)((2, 3, 4))
        CASES[_t] = ({"x": _dom, "dy": _any((2, 3, 4))}, {}) if _t.endswith("_grad") else ({"x": _dom}, {})

# PyTorch-style pools (ceil_mode, count_include_pad, divisor_override, dilation; ReLU inputs: tied zeros
# check the first-maximum rule, NaNs the NaN rule), adaptive pools, upsample, deconv, and the update ops
def _torch_pool(n, kind, shape, last=False, **attrs):
    from graphfront.ops.pool_ops import pool_out_size
    attrs = {"data_format": "channels_last" if last else "channels_first", **attrs}
    if kind == "max":
        def x(r):  # (float64) a few NaNs too: a NaN is the maximum, the last NaN of a window its argmax
            a = np.maximum(r.uniform(-1.0, 1.0, shape), 0)
            a.flat[r.integers(0, a.size, a.size // 8)] = np.nan
            return a
    else:
        x = _any(shape, _F64)
    spatial = shape[1:-1] if last else shape[2:]
    dil = attrs.get("dilation", [1] * n)
    out = tuple(pool_out_size(spatial[i], attrs["kernel_size"][i], attrs["padding"][i], attrs["stride"][i], dil[i],
                              attrs["ceil_mode"]) for i in range(n))
    yshape = (shape[0],) + out + (shape[-1],) if last else shape[:2] + out
    return x, yshape, attrs


for _name, _n, _kind, _shape, _last, _attrs in (
        ("maxpool_1d", 1, "max", (2, 3, 9), False, dict(kernel_size=[3], stride=[2], padding=[1], dilation=[2],
                                                         ceil_mode=True)),
        ("maxpool_2d", 2, "max", (2, 6, 7, 3), True, dict(kernel_size=[3, 2], stride=[2, 2], padding=[1, 1],
                                                           dilation=[1, 1], ceil_mode=True)),
        ("maxpool_3d", 3, "max", (1, 2, 5, 6, 5), False, dict(kernel_size=[2, 3, 2], stride=[2, 2, 1],
                                                               padding=[1, 1, 0], dilation=[1, 1, 2], ceil_mode=False)),
        ("avgpool_1d", 1, "avg", (2, 3, 9), False, dict(kernel_size=[4], stride=[3], padding=[2], ceil_mode=True,
                                                         count_include_pad=True)),
        ("avgpool_2d", 2, "avg", (2, 7, 6, 3), True, dict(kernel_size=[3, 3], stride=[2, 2], padding=[1, 0],
                                                           ceil_mode=True, count_include_pad=False)),
        ("avgpool_3d", 3, "avg", (1, 2, 5, 6, 5), False, dict(kernel_size=[2, 3, 3], stride=[2, 2, 2],
                                                               padding=[1, 1, 0], ceil_mode=False,
                                                               divisor_override=7))):
    _x, _yshape, _attrs = _torch_pool(_n, _kind, _shape, _last, **_attrs)
    CASES[_name] = ({"x": _x}, _attrs, ["y", "indice"] if _kind == "max" else ["y"])
    CASES[f"{_name}_grad"] = ({"x": _x, "y": _any(_yshape, _F64), "dy": _any(_yshape, _F64)}, _attrs)
    if _kind == "max":
        FED_BY[f"{_name}_grad"] = (_name, _attrs, ["indice"])
_DECONV = {"data_format": "channels_first", "groups": 1}
_UPSAMPLE = {"height_scale": 2.0, "width_scale": 1.5, "data_format": "channels_first"}
CASES.update({
    "dynamic_loss_scale_schedule": ({"count_not_finite": lambda r: np.array([0], np.int64),  # the scale grows
                                     "loss_scale": lambda r: np.array([1024.0], np.float32),
                                     "good_step_counter": lambda r: np.array([4], np.int64)},
                                    {"increment_period": 5, "multiplier": 2.0}, [],
                                    {"loss_scale", "good_step_counter"}),
    "assign_if": ({"ref": _any((2, 3)), "value": _any((2, 3)), "condition": lambda r: np.array([1], np.int32)},
                  {}, [], {"ref"}),
    "assign_if_not": ({"ref": _any((2, 3)), "value": _any((2, 3)), "condition": lambda r: np.array([0], np.int64)},
                      {}, [], {"ref"}),
    "adaptive_avg_pool1d": ({"x": _any((2, 3, 7), _F64)}, {"output_size": [3]}),
    "adaptive_avg_pool1d_grad": ({"x": _any((2, 3, 7), _F64), "dy": _any((2, 3, 3), _F64)}, {"output_size": [3]}),
    "adaptive_avg_pool2d": ({"x": _any((2, 3, 7, 5), _F64)}, {"output_size": [3, 4]}),
    "adaptive_avg_pool2d_grad": ({"x": _any((2, 3, 7, 5), _F64), "dy": _any((2, 3, 3, 4), _F64)},
                                 {"output_size": [3, 4]}),
    "adaptive_avg_pool3d": ({"x": _any((1, 2, 5, 6, 4), _F64)}, {"output_size": [2]}),
    "adaptive_avg_pool3d_grad": ({"x": _any((1, 2, 5, 6, 4), _F64), "dy": _any((1, 2, 2, 2, 2), _F64)},
                                 {"output_size": [2]}),
    "upsample": ({"x": _any((2, 3, 4, 5), _F64)}, {**_UPSAMPLE, "width_scale": 1.1,  # (the width is copied)
                                                   "interpolation": "bilinear", "align_corners": False}),
    "upsample_grad": ({"dy": _any((2, 8, 7, 3), _F64), "x": _any((2, 4, 5, 3), _F64)},
                      {**_UPSAMPLE, "data_format": "channels_last", "interpolation": "nearest"}),
    "deconv1d": ({"in": _any((2, 4, 5), _F64), "weight": _any((4, 3, 3), _F64)},
                 {**_DECONV, "filters": 6, "groups": 2, "padding_before": [1], "kernel_size": [3],
                  "output_padding": [1], "strides": [2], "dilation_rate": [1]}),
    "deconv2d": ({"in": _any((2, 4, 5, 3), _F64), "weight": _any((3, 3, 2, 4), _F64)},
                 {**_DECONV, "data_format": "channels_last", "filters": 4, "padding_before": [1, 0],
                  "kernel_size": [3, 2], "output_padding": [0, 1], "strides": [2, 3], "dilation_rate": [1, 2]}),
    "deconv3d": ({"in": _any((1, 2, 3, 4, 3), _F64), "weight": _any((2, 3, 2, 3, 2), _F64)},
                 {**_DECONV, "filters": 3, "padding_before": [0, 1, 1], "kernel_size": [2, 3, 2],
                  "output_padding": [1, 0, 0], "strides": [2, 1, 2], "dilation_rate": [1, 1, 1]}),
    "rmsprop_update": ({"model": _any((2, 3), _F64), "model_diff": _any((2, 3), _F64), "learning_rate": _pos((1,)),
                        "mean_square": lambda r: r.uniform(0.5, 1.0, (2, 3)),
                        "mean_gradient": lambda r: r.uniform(-0.1, 0.1, (2, 3)),
                        "skip_if": lambda r: np.array([0], np.int64)},
                       {"centered": True, "epsilon": 1e-6, "decay_rate": 0.9, "weight_decay": 0.01, "l2": 0.1},
                       [], {"model", "mean_square", "mean_gradient"}),
    "lars_update": ({"model": _any((2, 3), _F64), "model_diff": _any((2, 3), _F64), "learning_rate": _pos((1,)),
                     "momentum": _any((2, 3), _F64), "scale_by_tensor": lambda r: np.array([1.5])},
                    {"momentum_beta": 0.8, "epsilon": 1e-9, "lars_coefficient": 0.01, "weight_decay": 0.1,
                     "scale": 0.5}, [], {"model", "momentum"}),
    "lamb_update": ({"m": _any((2, 3), _F64), "v": lambda r: r.uniform(0.5, 1.0, (2, 3)),
                     "beta1_t": lambda r: np.array([0.81]), "beta2_t": lambda r: np.array([0.998]),
                     "model": _any((2, 3), _F64), "model_diff": _any((2, 3), _F64), "learning_rate": _pos((1,))},
                    {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "weight_decay": 0.01, "l1": 0.01},
                    [], {"m", "v", "beta1_t", "beta2_t", "model"}),
    "adagrad_update": ({"model": _any((2, 3), _F64), "model_diff": _any((2, 3), _F64), "learning_rate": _pos((1,)),
                        "train_step": lambda r: np.array([3], np.int64), "sum": lambda r: r.uniform(0.5, 2.0, (2, 3))},
                       {"lr_decay": 0.1, "epsilon": 1e-10, "weight_decay": 0.05}, [], {"model", "sum"}),
    "fused_tril_scale_softmax_mask_scale": ({"x": _any((2, 4, 5), _F64), "mask": _MASK((2, 4, 5))},
                                            {"diagonal": 1, "tril_fill_value": -1e4, "tril_scale_value": 0.5,
                                             "mask_scale_value": 2.0}, ["y", "softmax_y"]),
    "fused_tril_scale_softmax_mask_scale_grad": ({"softmax_y": lambda r: r.dirichlet(np.ones(5), (2, 4)),
                                                  "dy": _any((2, 4, 5), _F64), "mask": _MASK((2, 4, 5))},
                                                 {"diagonal": 0, "tril_scale_value": 0.5, "mask_scale_value": 2.0}),
    # without dropout (the draws of the two lowerings differ); the gradient with dropout: both draw the mask again
    # from the seed given, by the same hash
    "fused_multi_head_attention": ({"query": _any((2, 3, 2, 4), _F64), "key": _any((2, 5, 2, 4), _F64),
                                    "value": _any((2, 5, 2, 3), _F64), "attn_bias": _any((2, 1, 3, 5), _F64)},
                                   {"scale": 0.5, "dropout_rate": 0.0},
                                   ["out", "softmax_lse", "philox_seed", "philox_offset"]),
    "fused_multi_head_attention_grad": ({"dy": _any((2, 3, 2, 3), _F64), "query": _any((2, 3, 2, 4), _F64),
                                         "key": _any((2, 5, 2, 4), _F64), "value": _any((2, 5, 2, 3), _F64),
                                         "attn_bias": _any((2, 1, 3, 5), _F64), "out": _any((2, 3, 2, 3), _F64),
                                         "softmax_lse": lambda r: r.uniform(1.0, 2.0, (2, 2, 32)),
                                         "philox_seed": lambda r: np.array(2 ** 31 - 5, np.int64),
                                         "philox_offset": lambda r: np.array(0, np.int64)},
                                        {"scale": 0.5, "dropout_rate": 0.4},
                                        ["query_grad", "key_grad", "value_grad", "attn_bias_grad"]),
    "fused_self_attention_query_mul_key_and_value": ({"hidden_states": _any((4, 2, 12), _F64)},
                                                     {"head_size": 2, "alpha": 0.5}, ["query_mul_key", "value"]),
    "fused_self_attention_query_mul_key_and_value_grad": ({"query_mul_key_grad": _any((2, 2, 4, 4), _F64),
                                                           "value_grad": _any((2, 2, 4, 2), _F64),
                                                           "hidden_states": _any((4, 2, 12), _F64)}, {"alpha": 0.5}),
    # repeated ids add up; -1 and 5 are out of range (dropped); unnamed rows and their state keep their values
    "indexed_slices_sgd_update": ({"model": _any((5, 3), _F64), "learning_rate": _pos((1,)),
                                   "model_diff_indices": lambda r: np.array([[1, 3, 1], [-1, 5, 0]], np.int32),
                                   "model_diff_values": _any((2, 3, 3), _F64)},
                                  {"weight_decay": 0.1}, [], {"model"}),
    "indexed_slices_momentum_update": ({"model": _any((5, 3), _F64), "momentum": _any((5, 3), _F64),
                                        "model_diff_indices": lambda r: np.array([4, 2, 4, 7], np.int64),
                                        "model_diff_values": _any((4, 3), _F64)},
                                       {"learning_rate_val": 0.1, "beta": 0.8, "weight_decay": 0.01}, [],
                                       {"model", "momentum"}),
    "indexed_slices_adam_update": ({"model": _any((5, 2, 2), _F64), "learning_rate": _pos((1,)),
                                    "model_diff_indices": lambda r: np.array([0, 3, 3], np.int32),
                                    "model_diff_values": _any((3, 2, 2), _F64),
                                    "bias_correction1": _pos((1,)), "bias_correction2": _pos((1,)),
                                    "m": _any((5, 2, 2), _F64), "v": lambda r: r.uniform(0.5, 1.0, (5, 2, 2)),
                                    "max_v": lambda r: r.uniform(0.5, 1.0, (5, 2, 2))},
                                   {"amsgrad": True, "epsilon": 1e-8, "weight_decay": 0.01}, [],
                                   {"model", "m", "v", "max_v"}),
    "crop_mirror_normalize_from_uint8": ({"in": lambda r: r.integers(0, 256, (3, 5, 6, 3)).astype(np.uint8),
                                          "mirror": lambda r: np.array([1, 0, 1], np.int8)},
                                         {"mean": [120.0, 110.0, 100.0], "std": [58.0, 57.0, 59.0], "crop_h": 3,
                                          "crop_w": 4, "crop_pos_x": 0.7, "crop_pos_y": 0.4}),
})

def _ctc_log_probs(seed):
    x = np.random.default_rng(seed).normal(size=(7, 5, 5))
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


# a repeated label (no skip between them), an empty target, input lengths T and 0, and an
# impossible alignment (2 steps for 3 labels): infinite losses
_CTC_LENGTHS = {"targets": lambda r: np.array([[2, 2, 3], [1, 4, 4], [3, 1, 2], [4, 3, 1], [2, 1, 1]], np.int32),
                "input_lengths": lambda r: np.array([7, 5, 0, 2, 6], np.int64),
                "target_lengths": lambda r: np.array([3, 2, 1, 3, 0], np.int32)}
_CTC = {"max_target_length": 4, "blank": 0, "zero_infinity": True}


def _ctc_forward(arg):  # (the grad case's loss / alpha: the forward kernel's on its inputs)
    def make(r):
        arrays = {"log_probs": _ctc_log_probs(3), **{k: f(r) for k, f in _CTC_LENGTHS.items()}}
        (loss, alpha), _ = _run("ctc_loss", "plan", arrays, _CTC, ["loss", "alpha"], set())
        return {"loss": loss, "alpha": alpha}[arg]
    return make


CASES.update({
    "ctc_greedy_decoder": ({"log_probs": _any((6, 3, 4), _F64),  # lengths 0 and T included
                            "input_lengths": lambda r: np.array([6, 0, 4], np.int64)}, {"merge_repeated": True}),
    "ctc_loss": ({"log_probs": lambda r: _ctc_log_probs(3), **_CTC_LENGTHS}, _CTC),
    "ctc_loss_grad": ({"grad_out": _any((5,), _F64), "log_probs": lambda r: _ctc_log_probs(3), **_CTC_LENGTHS,
                       "loss": _ctc_forward("loss"), "alpha": _ctc_forward("alpha")}, _CTC),
})


def _case(op_type):
    spec = CASES[op_type]
    inputs, attrs = spec[0], spec[1]
    outputs = spec[2] if len(spec) > 2 and spec[2] is not None else \
        [a.name for a in registry.lookup(op_type).outputs if not a.optional]
    variables = spec[3] if len(spec) > 3 else set()
    return inputs, attrs, outputs, variables


def _run(op_type, mode, arrays, attrs, outputs, variables):
    flow.clear_default_session()
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    feeds = [(arg, i, a) for arg, v in arrays.items() if arg not in variables
             for i, a in enumerate(v if isinstance(v, list) else [v])]

    def job(*blobs):
        with flow.scope.placement("cpu", "0:0"):
            ins = {}
            for (arg, _, a), blob in zip(feeds, blobs):
                ins.setdefault(arg, []).append(blob if a.ndim else flow.reshape(blob, ()))  # (scalars fed as (1,))
            for arg in variables:
                values = arrays[arg] if isinstance(arrays[arg], list) else [arrays[arg]]
                ins[arg] = [flow.get_variable(f"var_{arg}_{i}", shape=a.shape, dtype=_flow_dtype(a.dtype),
                                              initializer=flow.zeros_initializer()) for i, a in enumerate(values)]
            ins = {k: (v if isinstance(arrays[k], list) else v[0]) for k, v in ins.items()}
            counts = collections.Counter(outputs)  # (a repeated output arg: one name per blob)
            out = build_op(op_type, ins, attrs, outputs=list(counts), num=counts)
            return (out if isinstance(out, tuple) else (out,)) if outputs else None

    params = [inspect.Parameter(f"{arg}_{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=tp.Numpy.Placeholder(a.shape or (1,), dtype=_flow_dtype(a.dtype)))
              for arg, i, a in feeds]
    ret = typing.Tuple[tuple(tp.Numpy for _ in outputs)] if outputs else None
    job.__signature__ = inspect.Signature(params, return_annotation=ret)
    job.__name__ = f"xla_case_{op_type}"
    fn = flow.global_function(type="predict", function_config=cfg)(job)
    if variables:
        flow.load_variables({f"var_{arg}_{i}": a for arg in variables for i, a in
                             enumerate(arrays[arg] if isinstance(arrays[arg], list) else [arrays[arg]])})
    results = fn(*[a.reshape(a.shape or (1,)) for _, _, a in feeds])
    after = {k: v.numpy() for k, v in flow.get_all_variables().items()} if variables else {}
    return list(results or ()), after


def _flow_dtype(np_dtype):
    return {np.dtype(np.float32): flow.float, np.dtype(np.float64): flow.double, np.dtype(np.float16): flow.float16,
            np.dtype(np.int8): flow.int8,
            np.dtype(np.uint8): flow.uint8,
            np.dtype(np.int32): flow.int32, np.dtype(np.int64): flow.int64}[np.dtype(np_dtype)]


def _tolerance(dtype):
    """A few ulps of a short chain of ops, 32 or 64 bits (exact for integers)."""
    return {np.dtype(np.float64): dict(rtol=1e-12, atol=1e-13)}.get(np.dtype(dtype), dict(rtol=1e-5, atol=1e-6))


def test_every_xla_rule_has_a_case():
    with_rule = sorted(t for t in registry.registered_op_types() if registry.lookup(t).xla is not None)
    assert sorted(CASES) == with_rule


def case_arrays(op_type):
    """``(arrays, attrs, outputs, variables)`` of the case of ``op_type``: its inputs drawn
    from a seed of the op type's name, those ``FED_BY`` names computed by their op."""
    inputs, attrs, outputs, variables = _case(op_type)
    rng = np.random.default_rng(sum(map(ord, op_type)))
    arrays = {k: ([f(rng) for f in v] if isinstance(v, list) else v(rng)) for k, v in inputs.items()}
    if op_type in FED_BY:
        producer, producer_attrs, fed = FED_BY[op_type]
        made = [a.name for a in registry.lookup(producer).outputs]  # (y and the argmax indices)
        values, _ = _run(producer, "plan", {"x": arrays["x"]}, producer_attrs, made, set())
        arrays.update((arg, value) for arg, value in zip(made, values) if arg in fed)
    return arrays, attrs, outputs, variables


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_xla_rule_matches_the_kernel(op_type):
    arrays, attrs, outputs, variables = case_arrays(op_type)
    want = _run(op_type, "plan", arrays, attrs, outputs, variables)
    got = _run(op_type, "xla", arrays, attrs, outputs, variables)
    for name, w, g in zip(outputs, want[0], got[0]):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, **_tolerance(w.dtype), err_msg=f"{op_type} output {name}")
    assert sorted(got[1]) == sorted(want[1])
    for name in want[1]:
        np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-5, atol=1e-6, err_msg=f"{op_type} {name}")
    for arg in variables:  # each updated variable moved from the value it was loaded with
        for i, before in enumerate(arrays[arg] if isinstance(arrays[arg], list) else [arrays[arg]]):
            assert not np.allclose(got[1][f"var_{arg}_{i}"], before), f"{op_type}: {arg} {i} was not updated"


def test_system_op_rules_match_their_kernels():
    import jax
    from graphfront.runtime.plan import KernelCtx
    from graphfront.runtime.xla import import_jax
    import_jax()  # (64-bit types, as in the XLA lowering)

    def rules(kind, fill=lambda conf: None):
        """The kernel and the xla rule of a system op whose conf ``fill`` sets."""
        op_conf = _system_conf(kind)
        fill(getattr(op_conf, kind))
        opdef, k = registry.op_def(op_conf), KernelCtx(op_conf, {}, torch.device("cpu"))
        return opdef.kernel(k), opdef.xla(k)

    kinds = registry.system_kinds()
    assert sorted(k for k in kinds if registry.op_def(_system_conf(k)).xla) == [
        "assign_conf", "constant_like_conf", "decode_random_conf", "dynamic_reshape_conf", "dynamic_reshape_like_conf",
        "identity_conf", "learning_rate_schedule_conf", "shape_elem_cnt_conf"]
    like = np.arange(6, dtype=np.float32).reshape(2, 3)

    def int_seven(conf):
        conf.int_operand = 7
        conf.data_type = flow.int64.proto
    def rows_of_two(conf):
        conf.shape.dim.extend([-1, 2])

    def first_axis_int64(conf):
        conf.include_axis_conf.axis.append(0)
        conf.data_type = flow.int64.proto
    for kind, fill in (("identity_conf", lambda conf: None), ("constant_like_conf", int_seven),
                       ("dynamic_reshape_conf", rows_of_two), ("shape_elem_cnt_conf", first_axis_int64)):
        kernel, xla = rules(kind, fill)
        want = kernel(torch.from_numpy(like)).numpy()
        got = np.asarray(jax.jit(xla)(like))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    kernel, xla = rules("dynamic_reshape_like_conf")
    flat = like.reshape(-1)
    np.testing.assert_array_equal(np.asarray(jax.jit(xla)(flat, like)), kernel(torch.from_numpy(flat),
                                                                              torch.from_numpy(like)).numpy())

    def schedule(lr):
        lr.learning_rate = 0.5
        lr.learning_rate_decay.cosine_conf.decay_batches = 10
        lr.warmup_conf.linear_conf.warmup_batches = 3
        lr.warmup_conf.linear_conf.start_multiplier = 0.1
    def batch(conf):  # normal draws: the rule calls the kernel back on the host, from the same seed
        conf.batch_size = 3
        conf.shape.dim.extend([2, 2])
        conf.data_type = flow.double.proto
        conf.data_initializer.random_normal_conf.std = 2.0
    op_conf = _system_conf("decode_random_conf")
    batch(op_conf.decode_random_conf)
    opdef = registry.op_def(op_conf)
    torch.manual_seed(11)  # (each maker draws its generator's seed)
    kernel = opdef.kernel(KernelCtx(op_conf, {}, torch.device("cpu")))
    want = [kernel().numpy() for _ in range(2)]
    torch.manual_seed(11)
    fn = jax.jit(opdef.xla(KernelCtx(op_conf, {}, torch.device("cpu"))))
    got = [np.asarray(fn(None)) for _ in range(2)]
    assert got[0].dtype == np.float64 and got[0].shape == (3, 2, 2)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got[0], got[1])  # a new batch on every run

    kernel, xla = rules("learning_rate_schedule_conf", schedule)
    fn = jax.jit(xla)
    for step in (0, 2, 3, 7, 12):
        t = np.array([step], np.int64)
        np.testing.assert_array_equal(np.asarray(fn(t)), kernel(torch.from_numpy(t)).numpy())


def _system_conf(kind):
    from graphfront.core import op_conf_pb2
    op_conf = op_conf_pb2.OperatorConf(name="op")
    getattr(op_conf, kind).SetInParent()
    return op_conf

