"""``flow.nn`` fused transformer-layer functions (OneFlow's
``python/oneflow/compatible/single_client/ops/nn_ops.py`` at v0.6.0).

Each builds one fused op of :mod:`graphfront.ops.fused_attention_ops` (the dropout
variants first build a ``random_mask_like`` keep-mask named ``<name>-dropout_random_mask_like``).
Re-exported by :mod:`graphfront.nn`.
"""
from __future__ import annotations

import torch

from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import expect_blob, expect_int, expect_number
from graphfront.framework.errors import ArgumentError
from graphfront.ops.builder import build_op, unique_str

__all__ = ["fused_bias_add_dropout", "fused_bias_add_gelu", "fused_scale_tril_softmax_dropout",
           "fused_self_attention_query_mul_key_and_value"]


def _check_blob(x, fn, arg):
    expect_blob(x, f"flow.nn.{fn}", arg)


def _bias_axis(value, data_format, fn):
    """1 for None / "NC..." / "channels_first", the last axis for "N...C" / "channels_last"."""
    if data_format is None or data_format.startswith("NC") or data_format == "channels_first":
        return 1
    if data_format == "channels_last" or (data_format.startswith("N") and data_format.endswith("C")):
        return len(value.shape) - 1
    raise ValueError(f"flow.nn.{fn}: data_format must be None, 'NC...', 'N...C', 'channels_first' or "
                     f"'channels_last', received {data_format!r}")


def check_rate(rate, api: str) -> float:
    """A dropout ``rate`` as a float in [0, 1); ArgumentError naming ``api`` otherwise."""
    rate = expect_number(rate, api, "rate")
    if not 0.0 <= rate < 1.0:
        raise ArgumentError(f"{api}: argument 'rate' must be in [0, 1), received {rate!r}")
    return rate


def mask_seed(seed, api: str) -> int:
    """``seed`` as an int (ArgumentError naming ``api`` otherwise), or when None one drawn
    from torch's global generator (so ``flow.manual_seed`` reproduces the masks)."""
    return int(torch.randint(0, 2 ** 31, ())) if seed is None else expect_int(seed, api, "seed")


def dropout_mask(x, rate, seed, name, api):
    """The ``random_mask_like`` keep-mask of the dropout op ``name``, named as OneFlow names it."""
    return build_op("random_mask_like", {"like": x}, {"rate": rate, "seed": mask_seed(seed, api)},
                    name=f"{name}-dropout_random_mask_like")


def fused_bias_add_gelu(value, bias, data_format=None, name=None):
    """``gelu(bias_add(value, bias))`` in one op (``fused_bias_add_gelu``).

    ``bias`` is 1-D of the channel size (axis 1 for None/"NC...", the last for "N...C");
    same dtype as ``value``. Returns a blob shaped like ``value``. GELU is the exact
    erf form. Cf. ``oneflow/user/kernels/fused_bias_add_kernel.cu``.
    """
    _check_blob(value, "fused_bias_add_gelu", "value")
    _check_blob(bias, "fused_bias_add_gelu", "bias")
    axis = _bias_axis(value, data_format, "fused_bias_add_gelu")
    return build_op("fused_bias_add_gelu", {"a": value, "b": bias}, {"axis": axis}, name=name,
                    prefix="FusedBiasAddGelu_")


def fused_bias_add_dropout(value, bias, data_format=None, rate=0.0, noise_shape=None, seed=None, name=None):
    """``dropout(bias_add(value, bias), rate)`` in one op (``fused_bias_add_mask_scale``).

    Kept elements are scaled by ``1 / (1 - rate)``. In predict jobs and for ``rate == 0``
    this is a plain ``bias_add`` (as OneFlow). Raises ArgumentError (a ValueError) unless
    ``rate`` is a number in [0, 1) and ``seed`` None or an int.
    """
    _check_blob(value, "fused_bias_add_dropout", "value")
    _check_blob(bias, "fused_bias_add_dropout", "bias")
    rate = check_rate(rate, "flow.nn.fused_bias_add_dropout")
    axis = _bias_axis(value, data_format, "fused_bias_add_dropout")
    if rate == 0.0 or not jb.current().is_train:
        return build_op("bias_add", {"a": value, "b": bias}, {"axis": axis}, name=name, prefix="BiasAdd_")
    name = name or unique_str("BiasAddDropout_")
    mask = dropout_mask(value, rate, seed, name, "flow.nn.fused_bias_add_dropout")
    return build_op("fused_bias_add_mask_scale", {"a": value, "b": bias, "mask": mask},
                    {"axis": axis, "scale": 1.0 / (1.0 - rate)}, name=name)


def fused_scale_tril_softmax_dropout(x, diagonal=0, fill_value=0, scale=1, rate=0.0, noise_shape=None, seed=None,
                                     name=None):
    """``dropout(softmax(fused_scale_tril(x, diagonal, fill_value, scale)), rate)`` in one op
    (``fused_tril_scale_softmax_mask_scale``); softmax over the last axis of a rank >= 2 ``x``.

    Elements above the ``diagonal``-th diagonal of the last two axes become ``fill_value``
    before the softmax, the others ``x * scale``. Returns ``y`` shaped like ``x``.
    """
    _check_blob(x, "fused_scale_tril_softmax_dropout", "x")
    api = "flow.nn.fused_scale_tril_softmax_dropout"
    rate = check_rate(rate, api)
    name = name or unique_str("FusedTrilScaleSoftmaxMaskScale_")
    mask = dropout_mask(x, rate, seed, name, api)
    y, _softmax_y = build_op("fused_tril_scale_softmax_mask_scale", {"x": x, "mask": mask},
                             {"diagonal": expect_int(diagonal, api, "diagonal"),
                              "tril_fill_value": expect_number(fill_value, api, "fill_value"),
                              "tril_scale_value": expect_number(scale, api, "scale"),
                              "mask_scale_value": 1.0 / (1.0 - rate)},
                             outputs=("y", "softmax_y"), name=name)
    return y


def fused_self_attention_query_mul_key_and_value(x, head_size, alpha=1.0, name=None):
    """Query-key scores and values of packed self-attention hidden states.

    ``x``: (seq_len, batch, num_heads * 3 * head_size), laid out (seq_len, batch,
    num_heads, [q|k|v], head_size) as Megatron-style fused QKV projections produce it.
    Returns ``(alpha * q @ k^T, v)`` of shapes (batch, num_heads, seq_len, seq_len) and
    (batch, num_heads, seq_len, head_size) (op ``fused_self_attention_query_mul_key_and_value``).
    """
    _check_blob(x, "fused_self_attention_query_mul_key_and_value", "x")
    return build_op("fused_self_attention_query_mul_key_and_value", {"hidden_states": x},
                    {"head_size": expect_int(head_size, "flow.nn.fused_self_attention_query_mul_key_and_value",
                                             "head_size"),
                     "alpha": expect_number(alpha, "flow.nn.fused_self_attention_query_mul_key_and_value", "alpha")},
                    outputs=("query_mul_key", "value"),
                    name=name, prefix="FusedSelfAttentionQueryMulKeyAndValue_")
