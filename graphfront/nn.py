"""``flow.nn``: convolution, pooling, activations, dropout, softmax, losses and normalization.

Thin wrappers in OneFlow's signatures (v0.6.0 ``python/oneflow/compatible/single_client/ops/nn_ops.py``;
``oneflow/user/ops/`` for the op each emits).
"""
from __future__ import annotations

import numbers
import re

from graphfront.framework.errors import ArgumentError
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc, expect_blob, expect_number, is_int
from graphfront.framework.scope_symbols import device_count
from graphfront.math import fused_scale_tril, relu, tril  # noqa: F401 - flow.nn.* aliases (same objects)
from graphfront.ctc import ctc_greedy_decoder  # noqa: F401 - flow.nn.ctc_greedy_decoder
from graphfront.fused import check_rate, dropout_mask, mask_seed
from graphfront.fused import (fused_bias_add_dropout, fused_bias_add_gelu,  # noqa: F401 - flow.nn.fused_*
                              fused_scale_tril_softmax_dropout, fused_self_attention_query_mul_key_and_value)
from graphfront.ops.builder import build_op, unique_str
from graphfront.ops.nn_ops import conv_out_size
from graphfront import array
from graphfront import math as _math
from graphfront import scope as _scope
from graphfront import initializers
from graphfront.variables import get_variable


def _tuple(v, n, what, minimum=1):
    """``v`` (an int, or 1 or ``n`` ints, each >= ``minimum``) as a list of ``n`` ints.

    ``what`` names the function and argument for the ArgumentError raised otherwise.
    """
    vals = [v] if isinstance(v, numbers.Integral) else list(v) if isinstance(v, (list, tuple)) else None
    if vals is None or len(vals) not in (1, n) or not all(
            isinstance(e, numbers.Integral) and not isinstance(e, bool) and e >= minimum for e in vals):
        raise ArgumentError(f"{what} expects an int >= {minimum} or {n} such ints, received {v!r}")
    return [int(e) for e in vals] * (n // len(vals))


def _who(fn, name):
    """``fn`` and, when the user named the op, its name: ``max_pool2d 'mp0'`` (for error messages)."""
    return f"{fn} '{name}'" if name else fn


def _channels_first(data_format, fn):
    """Whether ``data_format`` ("NCHW"-like or "channels_first" vs "NHWC"-like or "channels_last")
    puts channels first; ``fn`` names the caller in the ArgumentError raised for any other value."""
    if data_format in ("channels_first", "channels_last"):
        return data_format == "channels_first"
    if not (isinstance(data_format, str) and re.fullmatch(r"N(C[DHW]*|[DHW]*C)", data_format)):
        raise ArgumentError(f"{fn}: argument 'data_format' expects 'channels_first', 'channels_last' or a layout "
                            f"such as 'NCHW' or 'NHWC', received {data_format!r}")
    return data_format[1] == "C"


def _pad_pairs(padding, who):
    """A padding list's entries as (before, after) pairs of ints >= 0 (an int entry ``p`` is
    ``(p, p)``); ``who`` names the caller in the ArgumentError raised for anything else."""
    if not isinstance(padding, (list, tuple)):
        raise ArgumentError(f"{who}: argument 'padding' expects a string or a list, received "
                            f"{type(padding).__name__} {padding!r}")
    pairs = []
    for p in padding:
        pair = (p, p) if isinstance(p, numbers.Integral) else tuple(p) if isinstance(p, (list, tuple)) else ()
        if len(pair) != 2 or not all(isinstance(e, numbers.Integral) and not isinstance(e, bool) and e >= 0
                                     for e in pair):
            raise ArgumentError(f"{who}: each entry of argument 'padding' must be an int >= 0 or a (before, "
                                f"after) pair of them, received {p!r} in {padding!r}")
        pairs.append((int(pair[0]), int(pair[1])))
    return pairs


def _same_pads(size, k, s, d, lower=True):
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    before = (total + 1) // 2 if lower else total // 2
    return before, total - before


def conv_nd(n, input, filters, strides, padding, data_format, dilations, groups, name, bias=None):
    """Shared body of conv1d/2d/3d: resolves padding into OneFlow's symmetric form.

    Emits op ``conv{n}d``; asymmetric paddings (explicit or from SAME on odd totals that the
    symmetric form cannot express) first become a :func:`pad` op.

    Args:
        n: number of spatial dims, 1, 2 or 3.
        input: float blob of rank ``n + 2``: (N, C, *spatial) channels-first or
            (N, *spatial, C) channels-last.
        filters: weight blob (out, C/groups, *k) channels-first or (out, *k, C/groups)
            channels-last, of ``input``'s dtype.
        strides: int or ``n`` ints, each >= 1.
        padding: ``"VALID"``, ``"SAME"`` / ``"SAME_LOWER"``, ``"SAME_UPPER"`` (case-insensitive),
            or a list of ``n`` (or ``n + 2``) ints or (before, after) pairs.
        data_format: ``"channels_first"``, ``"channels_last"`` or a layout such as ``"NCHW"``.
        dilations: int or ``n`` ints, each >= 1; None means 1.
        groups: int dividing C and out.
        name: op name; default ``Conv{n}d_<k>``.
        bias: optional (out,) blob.

    Returns:
        BlobDesc: (N, out, *spatial') channels-first or (N, *spatial', out), ``input``'s dtype.

    Raises:
        ArgumentError: ``input`` or ``filters`` not a blob; bad ``data_format``, ``strides`` or
            ``dilations``; ``input`` not of rank ``n + 2``; an unknown padding string, or a
            padding list of the wrong length or with entries other than ints >= 0 and pairs of them.
        JobBuildError: the op's shape checks fail (e.g. channels not matching ``groups``).
    """
    who = _who(f"conv{n}d", name)
    expect_blob(input, f"flow.nn.{who}", "input")
    expect_blob(filters, f"flow.nn.{who}", "filters")
    first = _channels_first(data_format, who)
    kernel = list(filters.shape[2:]) if first else list(filters.shape[1:-1])
    strides = _tuple(strides, n, f"{who}: argument 'strides'")
    dilations = _tuple(dilations if dilations is not None else 1, n, f"{who}: argument 'dilations'")
    spatial = input.shape[2:] if first else input.shape[1:-1]
    if len(input.shape) != n + 2:
        raise ArgumentError(f"{who}: input expects rank {n + 2}, received shape {input.shape}")
    pads_before, explicit = [], None
    if isinstance(padding, str):
        p = padding.upper()
        if p == "VALID":
            pads_before = [0] * n
        elif p in ("SAME", "SAME_LOWER", "SAME_UPPER"):
            pairs = [_same_pads(spatial[i], kernel[i], strides[i], dilations[i], p != "SAME_UPPER") for i in range(n)]
            for i, (b, a) in enumerate(pairs):
                out = -(-spatial[i] // strides[i])
                if b == a or (b - a == 1 and conv_out_size(spatial[i], kernel[i], b, strides[i], dilations[i]) == out):
                    pads_before.append(b)
                else:
                    explicit = pairs
                    break
        else:
            raise ArgumentError(f'conv{n}d: padding must be "VALID", "SAME", "SAME_LOWER", "SAME_UPPER" or a list, '
                                f"received {padding!r}")
    else:
        pairs = _pad_pairs(padding, who)
        if len(pairs) == n + 2:
            pairs = pairs[2:] if first else pairs[1:-1]
        if len(pairs) != n:
            raise ArgumentError(f"{who}: padding list needs {n} (or {n + 2}) entries, received {padding!r}")
        if all(b == a for b, a in pairs):
            pads_before = [b for b, _ in pairs]
        else:
            explicit = pairs
    if explicit is not None:
        full = [(0, 0), (0, 0)] + explicit if first else [(0, 0)] + explicit + [(0, 0)]
        input = pad(input, full)
        pads_before = [0] * n
    attrs = {"filters": filters.shape[0], "padding_before": pads_before,
             "data_format": "channels_first" if first else "channels_last", "kernel_size": kernel,
             "strides": strides, "dilation_rate": dilations, "groups": groups}
    return build_op(f"conv{n}d", {"in": input, "weight": filters, "bias": bias}, attrs, name=name,
                    prefix=f"Conv{n}d_")


def conv1d(input, filters, strides, padding, data_format="NCW", dilations=None, groups=1, name=None):
    """1-D convolution of ``input`` with weight blob ``filters`` ([out, in/groups, k] for NCW).

    Op ``conv1d`` (OneFlow v0.6.0 ``oneflow/user/ops/conv_op.cpp``).

    Args:
        input: float blob (N, C, W) for NCW, (N, W, C) for NWC.
        filters: weight blob (out, C/groups, kw) (NCW) or (out, kw, C/groups) (NWC), of
            ``input``'s dtype.
        strides: int or (sw,), >= 1.
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or a per-dim list of
            ints or (before, after) pairs; asymmetric pads become a ``pad`` op.
        data_format: ``"NCW"`` or ``"NWC"`` (or ``"channels_first"`` / ``"channels_last"``).
        dilations: int or (dw,); default 1.
        groups: int dividing C and out.
        name: op name; default ``Conv1d_<n>``.

    Returns:
        BlobDesc: (N, out, W') (NCW), ``W' = (W + 2p - ((kw-1)dw+1) + sw) // sw``; ``input``'s dtype.

    Raises:
        ArgumentError: ``input`` not of rank 3, bad ``padding``, ``data_format``, ``strides``
            or ``dilations``.
        JobBuildError: channel counts that do not match ``groups`` or other op shape checks.
    """
    return conv_nd(1, input, filters, strides, padding, data_format, dilations, groups, name)


def conv2d(input, filters, strides, padding, bias=None, data_format="NCHW", dilations=None, groups=1, name=None):
    """2-D convolution (op ``conv2d``, OneFlow v0.6.0 ``oneflow/user/ops/conv_op.cpp``).

    Args:
        input: float blob (N, C, H, W) for NCHW, (N, H, W, C) for NHWC.
        filters: weight blob (out, C/groups, kh, kw) (NCHW) of ``input``'s dtype.
        strides: int or (sh, sw).
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER: the larger half of an odd total pad
            goes before), ``"SAME_UPPER"`` or per-dim (before, after) pairs; asymmetric pads
            become a ``pad`` op.
        bias: optional (out,) blob added with ``bias_add``.
        data_format: ``"NCHW"`` or ``"NHWC"``.
        dilations: int or (dh, dw); default 1.
        groups: int dividing C and out.
        name: op name; default ``Conv2d_<n>``.

    OneFlow up to v0.5 (``oneflow/python/ops/nn_ops.py``) had no ``bias`` parameter: its order
    was ``conv2d(input, filters, strides, padding, data_format, dilations, groups, name)``, and
    programs written for it pass the layout string fifth. A string in the ``bias`` slot can
    only come from such a call (a bias is a blob), so it is read in that older order:
    ``bias`` is the data_format, ``data_format`` the dilations and ``dilations`` the groups.

    Returns:
        BlobDesc: (N, out, H', W') (NCHW), ``H' = (H + 2p - ((kh-1)dh+1) + sh) // sh``.

    Raises:
        ArgumentError: a v0.5-order call (string fifth) that also passes ``data_format`` as
            another string, or gives the groups both seventh and as ``groups=``.
        JobBuildError: wrong ranks, channel counts that do not match ``groups``, or bad
            ``padding`` / ``data_format`` (the message names the op and your line).
    """
    if isinstance(bias, str):
        bias, data_format, dilations, groups = _conv2d_v05_order(bias, data_format, dilations, groups, name)
    return conv_nd(2, input, filters, strides, padding, data_format, dilations, groups, name, bias)


def _conv2d_v05_order(layout, data_format, dilations, groups, name):
    """(bias, data_format, dilations, groups) of a ``conv2d`` call written in OneFlow v0.5's
    order ``(input, filters, strides, padding, data_format, dilations, groups, name)``, where
    v0.6's slots received ``bias=layout``, ``data_format=<dilations or the default>``,
    ``dilations=<groups or None>``."""
    who = _who("conv2d", name)
    if isinstance(data_format, str):
        if data_format != "NCHW":
            raise ArgumentError(f"{who}: the layout {layout!r} was passed fifth (OneFlow v0.5's data_format "
                                f"position) and data_format={data_format!r} too; pass it once")
        data_format = None  # v0.6's default: no sixth positional (the v0.5 dilations) was given
    if dilations is not None and groups != 1:
        raise ArgumentError(f"{who}: in OneFlow v0.5's argument order the seventh positional is groups; "
                            f"received {dilations!r} there and groups={groups!r}")
    return None, layout, data_format, groups if dilations is None else dilations


def conv3d(input, filters, strides, padding, data_format="NCDHW", dilations=None, groups=1, name=None):
    """3-D convolution with weight blob ``filters``.

    Op ``conv3d`` (OneFlow v0.6.0 ``oneflow/user/ops/conv_op.cpp``).

    Args:
        input: float blob (N, C, D, H, W) for NCDHW, (N, D, H, W, C) for NDHWC.
        filters: weight blob (out, C/groups, kd, kh, kw) (NCDHW) of ``input``'s dtype.
        strides: int or (sd, sh, sw), >= 1.
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or per-dim ints or
            (before, after) pairs; asymmetric pads become a ``pad`` op.
        data_format: ``"NCDHW"`` or ``"NDHWC"`` (or ``"channels_first"`` / ``"channels_last"``).
        dilations: int or (dd, dh, dw); default 1.
        groups: int dividing C and out.
        name: op name; default ``Conv3d_<n>``.

    Returns:
        BlobDesc: (N, out, D', H', W') (NCDHW), each spatial size as in :func:`conv2d`;
        ``input``'s dtype.

    Raises:
        ArgumentError: ``input`` not of rank 5, bad ``padding``, ``data_format``, ``strides``
            or ``dilations``.
        JobBuildError: channel counts that do not match ``groups`` or other op shape checks.
    """
    return conv_nd(3, input, filters, strides, padding, data_format, dilations, groups, name)


def compat_conv2d(input, filters, strides, padding, data_format="NCHW", dilations=None, groups=1,  # noqa: A002
                  name=None):
    """TensorFlow-compatible :func:`conv2d`: padding "SAME" means "SAME_UPPER" (the larger
    half of an odd total pad goes after, as tf.nn.conv2d), other paddings are passed on.
    No bias argument; op ``conv2d``.

    Args:
        input: float blob (N, C, H, W) for NCHW, (N, H, W, C) for NHWC.
        filters: weight blob (out, C/groups, kh, kw) (NCHW) of ``input``'s dtype.
        strides: int or (sh, sw).
        padding: ``"SAME"`` (treated as ``"SAME_UPPER"``), ``"VALID"``, ``"SAME_LOWER"``,
            ``"SAME_UPPER"`` or per-dim (before, after) pairs.
        data_format: ``"NCHW"`` or ``"NHWC"``.
        dilations: int or (dh, dw); default 1.
        groups: int dividing C and out.
        name: op name; default ``Conv2d_<n>``.

    Returns:
        BlobDesc: as :func:`conv2d`, (N, out, H', W') for NCHW, ``input``'s dtype.

    Raises:
        ArgumentError: as :func:`conv2d` (bad rank, ``padding``, ``data_format``, ``strides``).
        JobBuildError: channel counts that do not match ``groups`` or other op shape checks.
    """
    if isinstance(padding, str) and padding.upper() == "SAME":
        padding = "SAME_UPPER"
    return conv2d(input, filters, strides, padding, None, data_format, dilations, groups, name)


def pad(x, paddings, constant_value=0, name=None):
    """``flow.pad`` under ``flow.nn``: constant padding with one (before, after) pair per dim
    (op ``pad``); see :func:`graphfront.array.pad` for the arguments, result and errors."""
    return array.pad(x, paddings, constant_value, name)


def bias_add(value, bias, data_format=None, name=None):
    """Add 1-D ``bias`` along the channel axis (1 for None/NC..., last for N...C).

    Op ``bias_add``.

    Args:
        value: blob of rank >= 2, e.g. (N, C, ...) or (N, ..., C).
        bias: 1-D blob (C,) of ``value``'s dtype.
        data_format: None (channel axis 1), ``"channels_first"`` / ``"channels_last"`` or a
            layout such as ``"NCHW"`` / ``"NHWC"``.
        name: op name; default ``BiasAdd_<n>``.

    Returns:
        BlobDesc: ``value``'s shape and dtype.

    Raises:
        ArgumentError: ``data_format`` is not one of the accepted values.
        JobBuildError: ``bias`` length differs from the channel dim.
    """
    axis = 1 if data_format is None or _channels_first(data_format, "bias_add") else len(value.shape) - 1
    return build_op("bias_add", {"a": value, "b": bias}, {"axis": axis}, name=name, prefix="BiasAdd_")


def _pool(kind, n, input, ksize, strides, padding, data_format, ceil_mode, name):
    """Shared body of the ``flow.nn`` pooling functions.

    ``ksize`` and ``strides`` are read as OneFlow's ``_GetSequence`` reads them
    (``python/oneflow/compatible/single_client/ops/nn_ops.py``, v0.6.0): an int or 1
    or ``n`` ints, and None stands for 1 in every spatial dim (so ``strides=None``
    slides the window by one element).
    """
    who = _who(f"{kind}_pool{n}d", name)
    first = _channels_first(data_format, who)
    attrs = {"data_format": "channels_first" if first else "channels_last",
             "pool_size": _tuple(ksize if ksize is not None else 1, n, f"{who}: argument 'ksize'"),
             "strides": _tuple(strides if strides is not None else 1, n, f"{who}: argument 'strides'"),
             "ceil_mode": bool(ceil_mode), "padding_before": [0] * n, "padding_after": [0] * n}
    if isinstance(padding, str):
        modes = {"SAME": "same_lower", "SAME_LOWER": "same_lower", "SAME_UPPER": "same_upper", "VALID": "valid"}
        if padding.upper() not in modes:
            raise ArgumentError(f"{who}: padding must be VALID, SAME, SAME_LOWER, SAME_UPPER or a list, "
                                f"received {padding!r}")
        attrs["padding"] = modes[padding.upper()]
    else:
        pairs = _pad_pairs(padding, who)
        if len(pairs) != n + 2:
            raise ArgumentError(f"{who}: padding list needs {n + 2} (before, after) pairs, "
                                f"received {padding!r}")
        spatial = pairs[2:] if first else pairs[1:-1]
        other = pairs[:2] if first else [pairs[0], pairs[-1]]
        if any(p != (0, 0) for p in other):
            raise ArgumentError(f"{who}: non-spatial padding must be 0, received {padding!r}")
        attrs.update(padding="customized", padding_before=[p[0] for p in spatial], padding_after=[p[1] for p in spatial])
    return build_op(f"tf_{kind}_pool_{n}d", {"x": input}, attrs, outputs=("y",), name=name,
                    prefix=f"{kind.capitalize()}Pool{n}D_")


def max_pool2d(input, ksize, strides, padding, data_format="NCHW", ceil_mode=False, name=None):
    """2-D max pooling (op ``tf_max_pool_2d``, OneFlow v0.6.0 ``oneflow/user/ops/pool_op.cpp``).

    Args:
        input: float blob (N, C, H, W) for NCHW, (N, H, W, C) for NHWC.
        ksize: int or (kh, kw); None means 1.
        strides: int or (sh, sw); None means 1 (OneFlow's ``_GetSequence``).
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or (before, after) pairs.
        data_format: ``"NCHW"`` or ``"NHWC"``.
        ceil_mode: round the output size up instead of down.
        name: op name.

    Returns:
        BlobDesc: (N, C, H', W') (NCHW), ``input``'s dtype.

    Raises:
        JobBuildError: ``input`` is not rank 4 or an argument is malformed.
    """
    return _pool("max", 2, input, ksize, strides, padding, data_format, ceil_mode, name)


def avg_pool2d(input, ksize, strides, padding, data_format="NCHW", ceil_mode=False, name=None):
    """2-D average pooling (op ``tf_avg_pool_2d``) over the unpadded elements of each window.

    Args:
        input: float blob (N, C, H, W) for NCHW, (N, H, W, C) for NHWC.
        ksize: int or (kh, kw); None means 1.
        strides: int or (sh, sw); None means 1 (OneFlow's ``_GetSequence``).
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or (before, after) pairs.
        data_format: ``"NCHW"`` or ``"NHWC"``.
        ceil_mode: round the output size up instead of down.
        name: op name.

    Returns:
        BlobDesc: (N, C, H', W') (NCHW), ``input``'s dtype.

    Raises:
        JobBuildError: ``input`` is not rank 4 or an argument is malformed.
    """
    return _pool("avg", 2, input, ksize, strides, padding, data_format, ceil_mode, name)


def max_pool1d(input, ksize, strides, padding, data_format="NCW", name=None) -> BlobDesc:
    """1-D max pooling (op ``tf_max_pool_1d``, OneFlow v0.6.0 ``oneflow/user/ops/pool_op.cpp``).

    Args:
        input: floating blob (N, C, W) for NCW, (N, W, C) for NWC.
        ksize: int or a 1-tuple of window sizes; None means 1.
        strides: int or a 1-tuple of strides; None means 1 (OneFlow's ``_GetSequence``).
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or (before, after) pairs.
        data_format: ``"NCW"`` or ``"NWC"``.
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: (N, C, W') (NCW), ``input``'s dtype.

    Raises:
        JobBuildError: ``input`` is not rank 3 or an argument is malformed.
    """
    return _pool("max", 1, input, ksize, strides, padding, data_format, False, name)


def avg_pool1d(input, ksize, strides, padding, data_format="NCW", name=None) -> BlobDesc:
    """1-D average pooling (op ``tf_avg_pool_1d``, OneFlow v0.6.0 ``oneflow/user/ops/pool_op.cpp``).

    Args:
        input: floating blob (N, C, W) for NCW, (N, W, C) for NWC.
        ksize: int or a 1-tuple of window sizes; None means 1.
        strides: int or a 1-tuple of strides; None means 1 (OneFlow's ``_GetSequence``).
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or (before, after) pairs.
        data_format: ``"NCW"`` or ``"NWC"``.
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: (N, C, W') (NCW), ``input``'s dtype.

    Raises:
        JobBuildError: ``input`` is not rank 3 or an argument is malformed.
    """
    return _pool("avg", 1, input, ksize, strides, padding, data_format, False, name)


def max_pool3d(input, ksize, strides, padding, data_format="NCDHW", ceil_mode=False, name=None) -> BlobDesc:
    """3-D max pooling (op ``tf_max_pool_3d``, OneFlow v0.6.0 ``oneflow/user/ops/pool_op.cpp``).

    Args:
        input: floating blob (N, C, D, H, W) for NCDHW, (N, D, H, W, C) for NDHWC.
        ksize: int or a 3-tuple of window sizes; None means 1.
        strides: int or a 3-tuple of strides; None means 1 (OneFlow's ``_GetSequence``).
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or (before, after) pairs.
        data_format: ``"NCDHW"`` or ``"NDHWC"``.
        ceil_mode: round the output size up instead of down.
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: (N, C, D', H', W') (NCDHW), ``input``'s dtype.

    Raises:
        JobBuildError: ``input`` is not rank 5 or an argument is malformed.
    """
    return _pool("max", 3, input, ksize, strides, padding, data_format, ceil_mode, name)


def avg_pool3d(input, ksize, strides, padding, data_format="NCDHW", ceil_mode=False, name=None) -> BlobDesc:
    """3-D average pooling (op ``tf_avg_pool_3d``, OneFlow v0.6.0 ``oneflow/user/ops/pool_op.cpp``).

    Args:
        input: floating blob (N, C, D, H, W) for NCDHW, (N, D, H, W, C) for NDHWC.
        ksize: int or a 3-tuple of window sizes; None means 1.
        strides: int or a 3-tuple of strides; None means 1 (OneFlow's ``_GetSequence``).
        padding: ``"VALID"``, ``"SAME"`` (= SAME_LOWER), ``"SAME_UPPER"`` or (before, after) pairs.
        data_format: ``"NCDHW"`` or ``"NDHWC"``.
        ceil_mode: round the output size up instead of down.
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: (N, C, D', H', W') (NCDHW), ``input``'s dtype.

    Raises:
        JobBuildError: ``input`` is not rank 5 or an argument is malformed.
    """
    return _pool("avg", 3, input, ksize, strides, padding, data_format, ceil_mode, name)


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """Zero each element with probability ``rate`` and scale the rest by 1/(1-rate).

    As OneFlow: a ``random_mask_like`` op named ``<name>-dropout_random_mask_like`` draws the
    int8 keep-mask (from ``seed``), then op ``dropout`` computes ``x * mask * scale`` with
    ``scale = 1 / (1 - rate)``; its gradient is ``dropout_grad(dy, mask)``.

    Args:
        x: float blob of any shape.
        rate: float in [0, 1).
        noise_shape: accepted for OneFlow compatibility and ignored (one mask element per
            element of ``x``).
        seed: int seed of the mask's random stream (the same seed draws the same masks, run
            after run); None draws one from torch's global generator (``flow.manual_seed``).
        name: op name; default ``Dropout_<n>``.

    Returns:
        BlobDesc: ``x``'s shape and dtype; ``x`` itself (no op) in predict jobs or when
        ``rate == 0`` (as OneFlow).

    Raises:
        ArgumentError: ``rate`` is not a number in [0, 1), or ``seed`` not None or an int.
    """
    rate = check_rate(rate, "flow.nn.dropout")
    if rate == 0 or not jb.current().is_train:
        return x
    name = name or unique_str("Dropout_")
    mask = dropout_mask(x, rate, seed, name, "flow.nn.dropout")
    return build_op("dropout", {"in": x, "mask": mask}, {"scale": 1.0 / (1.0 - rate)}, name=name)


def random_mask_like(like, rate, seed=None, noise_shape=None, name=None):
    """int8 keep-mask shaped like ``like`` (1 with probability 1 - rate).

    Op ``random_mask_like``.

    Args:
        like: blob whose shape the mask takes.
        rate: float in [0, 1), probability of a 0.
        seed: int seed; None draws one from torch's global generator (``flow.manual_seed``).
        noise_shape: accepted for OneFlow compatibility and ignored.
        name: op name; default ``RandomMaskLike_<n>``.

    Returns:
        BlobDesc: int8 blob of ``like``'s shape.

    Raises:
        ArgumentError: ``rate`` is not a number in [0, 1), or ``seed`` not None or an int.
    """
    api = "flow.nn.random_mask_like"
    return build_op("random_mask_like", {"like": like}, {"rate": check_rate(rate, api), "seed": mask_seed(seed, api)},
                    name=name, prefix="RandomMaskLike_")


def softmax(logits, axis=None, name=None):
    """Softmax over ``axis`` (op ``softmax``; other axes are transposed to the last one).

    Args:
        logits: float blob of rank >= 1.
        axis: int, default the last axis.
        name: op name.

    Returns:
        BlobDesc: ``logits``' shape and dtype; each slice along ``axis`` sums to 1.

    Raises:
        ArgumentError: ``logits`` is not a blob, or ``axis`` is not an int in ``[-rank, rank)``.
    """
    _check_blob(logits, "softmax", "logits")
    return _last_axis("softmax", logits, axis,
                      lambda t: build_op("softmax", {"in": t}, name=name, prefix="Softmax_"), name)


def softmax_grad(y, dy, axis=None, name=None):
    """Softmax backward: dx = (dy - sum(dy * y, axis)) * y, with ``y`` the softmax output
    along ``axis`` (default last; another axis is transposed to the end and back) and
    ``dy`` of its shape (op ``softmax_grad``: y, dy -> dx).

    Args:
        y: float blob, the softmax output, rank >= 1.
        dy: float blob of ``y``'s shape and dtype, the gradient w.r.t. ``y``.
        axis: int in ``[-rank, rank)``; default the last axis.
        name: op name; default ``Softmax_<n>``.

    Returns:
        BlobDesc: dx, ``y``'s shape and dtype.

    Raises:
        ArgumentError: ``y`` or ``dy`` is not a blob, shapes differ, or ``axis`` is out of range.
    """
    _check_blob(y, "softmax_grad", "y")
    _check_blob(dy, "softmax_grad", "dy")
    if dy.shape != y.shape:
        raise ArgumentError(f"flow.nn.softmax_grad: dy must have the shape of y {y.shape}, received {dy.shape}")
    ndim = len(y.shape)
    if axis is None or axis in (-1, ndim - 1):
        return build_op("softmax_grad", {"y": y, "dy": dy}, outputs=("dx",), name=name, prefix="Softmax_")
    if not is_int(axis) or not -ndim <= axis < ndim:
        raise ArgumentError(f"flow.nn.softmax_grad: axis {axis!r} is out of range for a rank-{ndim} input")
    axis = int(axis)
    perm = list(range(ndim))
    perm[axis % ndim], perm[-1] = perm[-1], perm[axis % ndim]
    sub = (lambda s: None) if name is None else (lambda s: f"{name}_{s}")
    ty = array.transpose(y, perm, name=sub("transpose_y"))
    tdy = array.transpose(dy, perm, name=sub("transpose_dy"))
    dx = build_op("softmax_grad", {"y": ty, "dy": tdy}, outputs=("dx",), name=name, prefix="Softmax_")
    return array.transpose(dx, perm, name=sub("transpose_dx"))


def _sparse_labels(fn, labels, logits):
    if not isinstance(labels, BlobDesc) or not isinstance(logits, BlobDesc):
        raise ArgumentError(f"{fn}(labels, logits) expects two blobs (note: labels come first)")
    if len(labels.shape) == len(logits.shape):
        if labels.shape[-1] != 1:
            raise ArgumentError(f"{fn}: labels of the logits' rank need a last dim of 1, received {labels.shape}")
        labels = array.squeeze(labels, [-1])
    return labels


def distributed_sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example softmax cross entropy with integer labels for logits split over devices on
    the class axis (op ``sparse_softmax_cross_entropy_ms``), the values of
    :func:`sparse_softmax_cross_entropy_with_logits`: ``logits`` (N, C) float, ``labels``
    (N,) integer (or (N, 1)); returns the (N,) losses. On several devices of one line, logits
    split by classes (a matmul with a class weight distributed ``split(0)``) stay split:
    each device computes the softmax of its classes, the rows' maximum, normalizer and logit
    at the label all-reduced over the devices (OneFlow v0.6.0
    ``oneflow/core/job_rewriter/split_sparse_softmax_cross_entropy_op_pass.cpp`` computes the
    same with reduce ops), and the gradient comes out split as the logits.

    Args:
        labels: integer blob (N,) or (N, 1) of class indices in [0, C).
        logits: float blob (N, C).
        name: op name; default ``DistributedSparseSoftmaxCrossEntropy_<n>``.

    Returns:
        BlobDesc: (N,) losses, ``logits``' dtype.

    Raises:
        ArgumentError: ``labels`` or ``logits`` is not a blob, or labels of the logits' rank
            whose last dim is not 1.
        JobBuildError: the op's shape or dtype checks fail.
    """
    labels = _sparse_labels("distributed_sparse_softmax_cross_entropy_with_logits", labels, logits)
    _prob, out = build_op("sparse_softmax_cross_entropy_ms", {"prediction": logits, "label": labels},
                          {"depth": logits.shape[-1]}, outputs=("prob", "out"), name=name,
                          prefix="DistributedSparseSoftmaxCrossEntropy_")
    return out


def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example softmax cross entropy with integer class labels (labels first).

    Op ``sparse_softmax_cross_entropy`` (OneFlow v0.6.0
    ``oneflow/user/ops/sparse_softmax_cross_entropy_op.cpp``); its ``prob`` output is dropped.

    Args:
        labels: integer blob (N,) (or (N, 1), squeezed) of class ids in [0, C).
        logits: float blob (N, C).
        name: op name.

    Returns:
        BlobDesc: (N,) per-example losses ``-log softmax(logits)[label]``, ``logits``' dtype.
        Training divides gradients by N, so minimizing it minimizes the mean.

    Raises:
        JobBuildError: shapes that do not match, or non-integer labels.
    """
    if not isinstance(labels, BlobDesc) or not isinstance(logits, BlobDesc):
        raise ArgumentError("sparse_softmax_cross_entropy_with_logits(labels, logits) expects two blobs "
                            "(note: labels come first)")
    if len(labels.shape) == len(logits.shape):
        if labels.shape[-1] != 1:
            raise ArgumentError(f"sparse_softmax_cross_entropy_with_logits: labels of the logits' rank need a last "
                                f"dim of 1, received {labels.shape}")
        labels = array.squeeze(labels, [-1])
    _prob, out = build_op("sparse_softmax_cross_entropy", {"prediction": logits, "label": labels},
                          {"depth": logits.shape[-1]}, outputs=("prob", "out"), name=name,
                          prefix="SparseSoftmaxCrossEntropy_")
    return out


# ================================================================== activations
# Ops in graphfront/ops/activation_ops.py.

def _check_blob(x, fn, arg="x"):
    expect_blob(x, f"flow.nn.{fn}", arg)


def _number(v, fn, arg):
    return expect_number(v, f"flow.nn.{fn}", arg)


def _activation(op_type, fn, x, attrs, name, prefix, args=("in", "out")):
    _check_blob(x, fn)
    return build_op(op_type, {args[0]: x}, attrs, outputs=(args[1],), name=name, prefix=prefix)


def leaky_relu(x, alpha=0.2, name=None) -> BlobDesc:
    """max(x, alpha * x) elementwise (op ``leaky_relu``: x -> y, attr ``alpha`` float).
    Same shape and dtype as ``x`` (floating). Grad: ``leaky_relu_grad``.

    Args:
        x: floating blob of any shape, e.g. (N, *).
        alpha: slope for x < 0 (a Python number).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("leaky_relu", "leaky_relu", x, {"alpha": _number(alpha, "leaky_relu", "alpha")}, name,
                       "LeakyRelu_", args=("x", "y"))


def elu(x, alpha=1.0, name=None) -> BlobDesc:
    """x if x > 0 else alpha * (exp(x) - 1) (op ``elu``: in -> out, attr ``alpha`` double).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        alpha: scale of the negative part (a Python number).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("elu", "elu", x, {"alpha": _number(alpha, "elu", "alpha")}, name, "Elu_")


def celu(x, alpha=1.0, name=None) -> BlobDesc:
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) (op ``celu``, attr ``alpha`` double, non-zero).

    graphfront extension: OneFlow 0.6.0 has the op but no single-client wrapper.

    Args:
        x: floating blob of any shape, e.g. (N, *).
        alpha: non-zero Python number.
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number,
            or when ``alpha`` is 0.
    """
    alpha = _number(alpha, "celu", "alpha")
    if alpha == 0:
        raise ArgumentError("flow.nn.celu: alpha must be non-zero, received 0")
    return _activation("celu", "celu", x, {"alpha": alpha}, name, "Celu_")


def selu(x, name=None) -> BlobDesc:
    """scale * (max(0, x) + min(0, alpha * (exp(x) - 1))) with the SELU constants (op ``selu``).
    graphfront extension (op without a single-client wrapper in OneFlow 0.6.0).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("selu", "selu", x, {}, name, "Selu_")


def silu(x, name=None) -> BlobDesc:
    """x * sigmoid(x) (op ``silu``). graphfront extension (op without a single-client wrapper).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("silu", "silu", x, {}, name, "Silu_")


def softsign(x, name=None) -> BlobDesc:
    """x / (1 + |x|) (op ``softsign``). graphfront extension (op without a single-client wrapper).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("softsign", "softsign", x, {}, name, "Softsign_")


def hardsigmoid(x, name=None) -> BlobDesc:
    """relu6(x + 3) / 6 (op ``hardsigmoid``: in -> out).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("hardsigmoid", "hardsigmoid", x, {}, name, "HardSigmoid_")


def hardswish(x, name=None) -> BlobDesc:
    """x * relu6(x + 3) / 6 (op ``hardswish``: in -> out).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("hardswish", "hardswish", x, {}, name, "HardSwish_")


def hardtanh(x, min_val=-1.0, max_val=1.0, name=None) -> BlobDesc:
    """clamp(x, min_val, max_val) (op ``hardtanh``: in -> out, attrs ``min_val``/``max_val`` double).

    Grad: ``hardtanh_grad`` from the output ``y``.

    Args:
        x: floating blob of any shape, e.g. (N, *).
        min_val: lower clamp bound (a Python number).
        max_val: upper clamp bound (a Python number), >= min_val.
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number,
            or when ``min_val > max_val``.
    """
    lo, hi = _number(min_val, "hardtanh", "min_val"), _number(max_val, "hardtanh", "max_val")
    if lo > hi:
        raise ArgumentError(f"flow.nn.hardtanh: min_val ({lo}) must be <= max_val ({hi})")
    return _activation("hardtanh", "hardtanh", x, {"min_val": lo, "max_val": hi}, name, "Hardtanh_")


def relu6(x, name=None) -> BlobDesc:
    """min(max(x, 0), 6): ``hardtanh`` with min_val=0, max_val=6 (as OneFlow).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("hardtanh", "relu6", x, {"min_val": 0.0, "max_val": 6.0}, name, "Relu6_")


def mish(x, name=None) -> BlobDesc:
    """x * tanh(softplus(x)) (op ``mish``). OneFlow's single-client wrapper composes softplus,
    tanh and multiply; graphfront emits the v0.6.0 ``mish`` op (same values).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        name: op name (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or a numeric argument is not a Python number.
    """
    return _activation("mish", "mish", x, {}, name, "Mish_")


def swish(x, beta=1.0, name=None):
    """x * sigmoid(beta * x), composed as OneFlow does: ``scalar_mul`` (beta != 1),
    ``sigmoid``, then ``multiply``; ops named ``<name>_*`` (default name ``Swish_<uid>``).

    Args:
        x: floating blob of any shape, e.g. (N, *).
        beta: a Python number; default 1.0 (no ``scalar_mul``).
        name: prefix of the emitted op names (a str; generated when None).

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` is not a blob or ``beta`` is not a Python number.
    """
    _check_blob(x, "swish")
    beta = _number(beta, "swish", "beta")
    name = name or unique_str("Swish_")
    t = x if beta == 1.0 else _math.multiply(x, beta, name=f"{name}_beta_mul")
    return _math.multiply(x, _math.sigmoid(t, name=f"{name}_sigmoid"), name=f"{name}_mul")


def prelu(x, alpha, name=None):
    """x if x > 0 else alpha[c] * x with ``alpha`` of shape (C,) (C = dim 1 of ``x``) or (1,)
    (op ``prelu``). graphfront extension: the op's single-client users are eager modules;
    ``flow.layers.prelu`` (op ``tf_prelu``) is the lazy layer.

    Args:
        x: floating blob (N, C, *).
        alpha: blob (C,) or (1,) of ``x``'s dtype.
        name: op name; default ``PRelu_<n>``.

    Returns:
        BlobDesc: same shape and dtype as ``x``.

    Raises:
        ArgumentError: when ``x`` or ``alpha`` is not a blob.
        JobBuildError: ``alpha``'s shape does not match C (or 1).
    """
    _check_blob(x, "prelu")
    _check_blob(alpha, "prelu", "alpha")
    return build_op("prelu", {"x": x, "alpha": alpha}, outputs=("y",), name=name, prefix="PRelu_")


# ================================================================== softmax family and losses
# Ops in graphfront/ops/loss_ops.py.

def _last_axis(fn, x, axis, body, name):
    """Apply ``body`` (a last-axis op) along ``axis``, with ``transpose`` pairs for other axes."""
    ndim = len(x.shape)
    if axis is None or axis in (-1, ndim - 1):
        return body(x)
    if not is_int(axis) or not -ndim <= axis < ndim:
        raise ArgumentError(f"flow.nn.{fn}: axis expects an int in [{-ndim}, {ndim}) for a rank-{ndim} input, "
                            f"received {axis!r}")
    axis = int(axis)
    perm = list(range(ndim))
    perm[axis % ndim], perm[-1] = perm[-1], perm[axis % ndim]
    t = array.transpose(x, perm, name=None if name is None else f"{name}_transpose_in")
    return array.transpose(body(t), perm, name=None if name is None else f"{name}_transpose_out")


def logsoftmax(logits, axis=None, name=None):
    """log(softmax(logits)) along ``axis`` (default last).

    OneFlow's single-client wrapper composes ``log(softmax(x))``; graphfront emits the
    v0.6.0 ``log_softmax`` op (in -> prob; stable x - logsumexp(x)), with ``transpose``
    pairs for a non-last axis as ``flow.nn.softmax`` does.

    Args:
        logits: float blob of rank >= 1.
        axis: int in ``[-rank, rank)``; default the last axis.
        name: op name; default ``logsoftmax<n>``.

    Returns:
        BlobDesc: ``logits``' shape and dtype.

    Raises:
        ArgumentError: ``logits`` is not a blob, or ``axis`` is not an int in ``[-rank, rank)``.
    """
    _check_blob(logits, "logsoftmax", "logits")
    return _last_axis("logsoftmax", logits, axis,
                      lambda t: build_op("log_softmax", {"in": t}, outputs=("prob",), name=name,
                                         prefix="logsoftmax"), name)


def _check_same(fn, a, b, an, bn, dtype=True):
    if a.shape != b.shape:
        raise ArgumentError(f"flow.nn.{fn}: '{bn}' must have the shape of '{an}' {a.shape}, received {b.shape}")
    if dtype and a.dtype is not b.dtype:
        raise ArgumentError(f"flow.nn.{fn}: '{bn}' must have the dtype of '{an}' ({a.dtype.name}), "
                            f"received {b.dtype.name}")


def softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example softmax cross entropy with dense ``labels`` (a distribution per row).

    ``logits``/``labels``: same shape (N, ..., C) and dtype. Returns shape (N, ...)
    ``-sum(labels * log_softmax(logits), -1)`` (op ``softmax_cross_entropy``; its ``prob``
    output is dropped).

    Args:
        labels: float blob (N, ..., C), a distribution per row, ``logits``' dtype.
        logits: float blob (N, ..., C).
        name: op name; default ``SoftmaxCrossEntropy_<n>``.

    Returns:
        BlobDesc: (N, ...) losses, ``logits``' dtype.

    Raises:
        ArgumentError: either argument is not a blob, or their shapes or dtypes differ.
    """
    _check_blob(labels, "softmax_cross_entropy_with_logits", "labels")
    _check_blob(logits, "softmax_cross_entropy_with_logits", "logits")
    _check_same("softmax_cross_entropy_with_logits", logits, labels, "logits", "labels")
    _prob, out = build_op("softmax_cross_entropy", {"prediction": logits, "label": labels},
                          outputs=("prob", "out"), name=name, prefix="SoftmaxCrossEntropy_")
    return out


def sigmoid_cross_entropy_with_logits(labels, logits, name=None):
    """Elementwise ``max(x, 0) - x * z + log(1 + exp(-|x|))`` for logits x and labels z of the
    same shape (op ``sigmoid_cross_entropy``: prediction, label -> loss).

    Args:
        labels: blob z of ``logits``' shape (values in [0, 1]; dtype may differ).
        logits: float blob x of any shape, e.g. (N, C).
        name: op name; default ``SigmoidCrossEntropy_<n>``.

    Returns:
        BlobDesc: elementwise loss, ``logits``' shape and dtype.

    Raises:
        ArgumentError: either argument is not a blob, or their shapes differ.
        JobBuildError: the op rejects the dtypes.
    """
    _check_blob(labels, "sigmoid_cross_entropy_with_logits", "labels")
    _check_blob(logits, "sigmoid_cross_entropy_with_logits", "logits")
    _check_same("sigmoid_cross_entropy_with_logits", logits, labels, "logits", "labels", dtype=False)
    return build_op("sigmoid_cross_entropy", {"prediction": logits, "label": labels}, outputs=("loss",),
                    name=name, prefix="SigmoidCrossEntropy_")


def sparse_cross_entropy(labels, prediction, name=None):
    """Per-example ``-log(prediction[..., label])`` on *probabilities* (no softmax).

    ``prediction``: (N, ..., C) float; ``labels``: integer of shape (N, ...) or (N, ..., 1)
    (trailing 1 dropped with a ``reshape``). Op ``sparse_cross_entropy`` (depth = C).

    Args:
        labels: integer blob (N, ...) or (N, ..., 1) of class indices in [0, C).
        prediction: float blob (N, ..., C) of probabilities.
        name: op name; default ``SparseCrossEntropy_<n>``.

    Returns:
        BlobDesc: (N, ...) losses, ``prediction``'s dtype.

    Raises:
        ArgumentError: either argument is not a blob.
        JobBuildError: ``labels``' shape does not match ``prediction``'s leading dims, or a
            non-integer ``labels`` dtype.
    """
    _check_blob(labels, "sparse_cross_entropy", "labels")
    _check_blob(prediction, "sparse_cross_entropy", "prediction")
    if len(labels.shape) == len(prediction.shape) and labels.shape[-1] == 1:
        labels = array.reshape(labels, labels.shape[:-1])
    return build_op("sparse_cross_entropy", {"prediction": prediction, "label": labels},
                    {"depth": prediction.shape[-1]}, name=name, prefix="SparseCrossEntropy_")


_REDUCTIONS = ("none", "mean", "sum")


def _reduction(fn, reduction):
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"flow.nn.{fn}: reduction must be one of {_REDUCTIONS}, received {reduction!r}")


def _reduce_loss(loss, reduction, name):
    """``none`` -> as is; ``mean``/``sum`` over every element -> shape (1,)."""
    if reduction == "mean":
        return _math.reduce_mean(loss, name=f"{name}_reduce_mean")
    if reduction == "sum":
        return _math.reduce_sum(loss, name=f"{name}_reduce_sum")
    return loss


def _weighted(loss, weight, name, fn):
    if weight is None:
        return loss
    _check_blob(weight, fn, "weight")
    return _math.multiply(loss, weight, name=f"{name}_weight_mul")


def BCELoss(input, target, weight=None, reduction="mean", name=None):  # noqa: N802,A002 - OneFlow's names
    """Binary cross entropy on probabilities: ``-w (t log x + (1 - t) log(1 - x))``, logs
    clamped at -100, then ``reduction`` ("none" | "mean" | "sum" over all elements).

    ``input``/``target``: same shape; ``weight`` of that shape goes into the op, any other
    broadcastable shape multiplies the unweighted loss. OneFlow's single-client wrapper
    composes log/multiply ops; graphfront emits the v0.6.0 ``binary_cross_entropy`` op
    (same values, finite at 0 and 1). Ops are named ``<name>*`` (default ``BCELoss<uid>``, OneFlow's prefix).

    Args:
        input: floating blob of probabilities in [0, 1], any shape, e.g. (N, *).
        target: blob of the same shape and dtype as ``input``.
        weight: optional blob; of ``input``'s shape it goes into the op, otherwise it must
            broadcast against ``input`` and multiplies the loss.
        reduction: ``"none"``, ``"mean"`` (over every element) or ``"sum"``.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``input``'s dtype; ``input``'s shape for ``"none"``, else shape (1,).

    Raises:
        ArgumentError: ``input``, ``target`` or ``weight`` is not a blob, ``input`` and
            ``target`` shapes or dtypes differ, or ``reduction`` is unknown.
        JobBuildError: ``weight`` does not broadcast against ``input``.
    """
    fn = "BCELoss"
    _check_blob(input, fn, "input")
    _check_blob(target, fn, "target")
    _check_same(fn, input, target, "input", "target")
    _reduction(fn, reduction)
    name = name or unique_str("BCELoss")
    into_op = weight is not None and isinstance(weight, BlobDesc) and weight.shape == input.shape
    loss = build_op("binary_cross_entropy", {"input": input, "target": target, "weight": weight if into_op else None},
                    name=name)
    if not into_op:
        loss = _weighted(loss, weight, name, fn)
    return _reduce_loss(loss, reduction, name)


def BCEWithLogitsLoss(input, target, weight=None, pos_weight=None, reduction="mean", name=None):  # noqa: N802,A002
    """Binary cross entropy on logits x: ``w ((1 - t) x + (1 + (p - 1) t) log(1 + exp(-x)))``
    (stable form), ``p`` = ``pos_weight`` of shape (C,) along the last axis, then ``reduction``.

    OneFlow's single-client wrapper composes it from elementwise math; graphfront emits the
    v0.6.0 ``binary_cross_entropy_with_logits`` op (same values; attr ``has_pos_weight``).

    Args:
        input: floating blob of logits, shape (N, *, C).
        target: blob of the same shape and dtype as ``input``, values in [0, 1].
        weight: optional blob; of ``input``'s shape it goes into the op, otherwise it must
            broadcast against ``input`` and multiplies the loss.
        pos_weight: optional blob (C,) (C = last dim of ``input``) weighting positives.
        reduction: ``"none"``, ``"mean"`` (over every element) or ``"sum"``.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``input``'s dtype; ``input``'s shape for ``"none"``, else shape (1,).

    Raises:
        ArgumentError: an argument is not a blob, ``input`` and ``target`` shapes or dtypes
            differ, ``pos_weight`` is not of shape (C,), or ``reduction`` is unknown.
        JobBuildError: ``weight`` does not broadcast against ``input``.
    """
    fn = "BCEWithLogitsLoss"
    _check_blob(input, fn, "input")
    _check_blob(target, fn, "target")
    _check_same(fn, input, target, "input", "target")
    _reduction(fn, reduction)
    if pos_weight is not None:
        _check_blob(pos_weight, fn, "pos_weight")
        if pos_weight.shape != (input.shape[-1],):
            raise ArgumentError(f"flow.nn.{fn}: pos_weight must have shape {(input.shape[-1],)} (the last dim of "
                                f"input), received {pos_weight.shape}")
    name = name or unique_str("BCEWithLogitsLoss")
    into_op = weight is not None and isinstance(weight, BlobDesc) and weight.shape == input.shape
    loss = build_op("binary_cross_entropy_with_logits",
                    {"input": input, "target": target, "weight": weight if into_op else None,
                     "pos_weight": pos_weight}, {"has_pos_weight": pos_weight is not None}, name=name)
    if not into_op:
        loss = _weighted(loss, weight, name, fn)
    return _reduce_loss(loss, reduction, name)


def _difference_loss(fn, elementwise, suffix, input, target, reduction, name):  # noqa: A002
    """``elementwise(target - input)`` then ``reduction`` (composed as OneFlow composes it)."""
    _check_blob(input, fn, "input")
    _check_blob(target, fn, "target")
    _check_same(fn, input, target, "input", "target")
    _reduction(fn, reduction)
    name = name or unique_str(fn)
    diff = _math.subtract(target, input, name=f"{name}_sub")
    return _reduce_loss(elementwise(diff, name=f"{name}_{suffix}"), reduction, name)


def MSELoss(input, target, reduction="mean", name=None) -> BlobDesc:  # noqa: N802,A002 - OneFlow's names
    """(target - input)^2 elementwise, then ``reduction``; composed (as OneFlow) of
    ``broadcast_sub`` + ``square`` (+ reduce).

    Wrapper as in OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/nn_ops.py``.

    Args:
        input: floating blob of any shape, e.g. (N, *).
        target: blob of the same shape and dtype as ``input``.
        reduction: ``"none"``, ``"mean"`` (over every element) or ``"sum"``.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``input``'s dtype; ``input``'s shape for ``"none"``, else shape (1,).

    Raises:
        ArgumentError: ``input`` or ``target`` is not a blob, their shapes or dtypes differ,
            or ``reduction`` is unknown.
    """
    return _difference_loss("MSELoss", _math.square, "square", input, target, reduction, name)


def L1Loss(input, target, reduction="mean", name=None) -> BlobDesc:  # noqa: N802,A002 - OneFlow's names
    """|target - input| elementwise, then ``reduction``; composed (as OneFlow) of
    ``broadcast_sub`` + ``abs`` (+ reduce).

    Wrapper as in OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/nn_ops.py``.

    Args:
        input: floating blob of any shape, e.g. (N, *).
        target: blob of the same shape and dtype as ``input``.
        reduction: ``"none"``, ``"mean"`` (over every element) or ``"sum"``.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``input``'s dtype; ``input``'s shape for ``"none"``, else shape (1,).

    Raises:
        ArgumentError: ``input`` or ``target`` is not a blob, their shapes or dtypes differ,
            or ``reduction`` is unknown.
    """
    return _difference_loss("L1Loss", _math.abs, "abs", input, target, reduction, name)


def KLDivLoss(input, target, log_target=False, reduction="mean", name=None) -> BlobDesc:  # noqa: N802,A002
    """Pointwise KL divergence with ``input`` = log-probabilities: ``t (log t - input)``
    (0 where t == 0), or ``exp(t) (t - input)`` with ``log_target``; then ``reduction``
    ("mean" averages over every element, as PyTorch's default).

    OneFlow's single-client wrapper composes log/where ops; graphfront emits the v0.6.0
    ``kl_div_loss`` op (same values).

    Wrapper as in OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/nn_ops.py``.

    Args:
        input: floating blob of any shape, e.g. (N, *).
        target: blob of the same shape and dtype as ``input``.
        log_target: bool; ``target`` holds log-probabilities when True.
        reduction: ``"none"``, ``"mean"`` (over every element) or ``"sum"``.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``input``'s dtype; ``input``'s shape for ``"none"``, else shape (1,).

    Raises:
        ArgumentError: ``input`` or ``target`` is not a blob, their shapes or dtypes differ,
            or ``reduction`` is unknown, or ``log_target`` is not a bool.
    """
    fn = "KLDivLoss"
    _check_blob(input, fn, "input")
    _check_blob(target, fn, "target")
    _check_same(fn, input, target, "input", "target")
    _reduction(fn, reduction)
    if not isinstance(log_target, bool):
        raise ArgumentError(f"flow.nn.{fn}: log_target expects a bool, received {log_target!r}")
    name = name or unique_str("KLDivLoss_")
    loss = build_op("kl_div_loss", {"input": input, "target": target}, {"log_target": log_target}, name=name)
    return _reduce_loss(loss, reduction, name)


def MarginRankingLoss(input1, input2, target, margin=0.0, reduction="mean", name=None):  # noqa: N802
    """max(0, -target * (input1 - input2) + margin) elementwise, then ``reduction``; composed of
    ``broadcast_sub``, ``multiply``/``broadcast_mul``, ``negative``, ``scalar_add`` and ``relu``.

    Args:
        input1: floating blob of any shape, e.g. (N,) or (N, *).
        input2: blob of ``input1``'s shape and dtype.
        target: blob of 1 / -1 values, broadcastable against ``input1``.
        margin: a Python number; default 0.0.
        reduction: ``"none"``, ``"mean"`` (over every element) or ``"sum"``.
        name: op name prefix (a str; default ``MarginRankingLoss<uid>``).

    Returns:
        BlobDesc: ``input1``'s dtype; the broadcast shape for ``"none"``, else shape (1,).

    Raises:
        ArgumentError: an argument is not a blob, ``input1``/``input2`` shapes or dtypes
            differ, ``margin`` is not a Python number, or ``reduction`` is unknown.
        JobBuildError: ``target`` does not broadcast against ``input1``.
    """
    fn = "MarginRankingLoss"
    for arg, v in (("input1", input1), ("input2", input2), ("target", target)):
        _check_blob(v, fn, arg)
    _check_same(fn, input1, input2, "input1", "input2")
    margin = _number(margin, fn, "margin")
    _reduction(fn, reduction)
    name = name or unique_str("MarginRankingLoss")
    diff = _math.subtract(input1, input2, name=f"{name}_sub")
    neg = _math.negative(_math.multiply(target, diff, name=f"{name}_mul"), name=f"{name}_neg")
    loss = relu(_math.add(neg, margin, name=f"{name}_add_margin") if margin else neg, name=f"{name}_relu")
    return _reduce_loss(loss, reduction, name)


def TripletMarginLoss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-06, swap=False,  # noqa: N802
                      reduction="mean", name=None):
    """Triplet margin loss ``max(d(a, p) - d(a, n) + margin, 0)`` per example, then ``reduction``,
    with ``d(x, y) = ||x - y + eps||_p`` over the last axis (PyTorch's
    ``triplet_margin_loss`` formula). ``swap=True`` uses ``min(d(a, n), d(p, n))`` as the
    negative distance (the distance swap of Balntas et al., 2016); OneFlow 0.6.0 only
    accepts ``swap=False``.

    Composed of ``broadcast_sub``, ``scalar_add``, ``abs``/``square``, ``scalar_pow``,
    ``reduce_sum``, ``sqrt`` and ``clip_by_scalar_min`` ops named ``<name>_*`` (default
    ``TripletMarginLoss<uid>``). ``anchor``/``positive``/``negative``: same shape (N, D).

    Args:
        anchor: floating blob (N, D).
        positive: blob of ``anchor``'s shape and dtype.
        negative: blob of ``anchor``'s shape and dtype.
        margin: a Python number; default 1.0.
        p: norm degree, a Python number > 0; default 2.0.
        eps: a Python number added to each difference; default 1e-6.
        swap: bool; use the distance swap.
        reduction: ``"none"``, ``"mean"`` or ``"sum"``.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``anchor``'s dtype; (N,) for ``"none"``, else shape (1,).

    Raises:
        ArgumentError: (a ValueError) an argument is not a blob, shapes or dtypes differ,
            ``margin``/``p``/``eps`` is not a Python number, ``p <= 0``, or ``reduction``
            is unknown.
    """
    fn = "TripletMarginLoss"
    for arg, v in (("anchor", anchor), ("positive", positive), ("negative", negative)):
        _check_blob(v, fn, arg)
    _check_same(fn, anchor, positive, "anchor", "positive")
    _check_same(fn, anchor, negative, "anchor", "negative")
    margin, p, eps = _number(margin, fn, "margin"), _number(p, fn, "p"), _number(eps, fn, "eps")
    if p <= 0:
        raise ArgumentError(f"flow.nn.{fn}: p must be > 0, received {p}")
    _reduction(fn, reduction)
    name = name or unique_str("TripletMarginLoss")

    def distance(x, y, tag):
        d = _math.add(_math.subtract(x, y, name=f"{name}_{tag}_sub"), eps, name=f"{name}_{tag}_add_eps")
        if p == 2.0:
            return _math.sqrt(_math.reduce_sum(_math.square(d, name=f"{name}_{tag}_square"), -1,
                                               name=f"{name}_{tag}_reduce_sum"), name=f"{name}_{tag}_sqrt")
        a = _math.abs(d, name=f"{name}_{tag}_abs")
        if p == 1.0:
            return _math.reduce_sum(a, -1, name=f"{name}_{tag}_reduce_sum")
        total = _math.reduce_sum(_math.pow(a, p, name=f"{name}_{tag}_pow"), -1, name=f"{name}_{tag}_reduce_sum")
        return _math.pow(total, 1.0 / p, name=f"{name}_{tag}_root")

    d_pos = distance(anchor, positive, "distance_1")
    d_neg = distance(anchor, negative, "distance_2")
    if swap:
        d_neg = _math.minimum(d_neg, distance(positive, negative, "distance_swap"), name=f"{name}_swap_min")
    diff = _math.add(_math.subtract(d_pos, d_neg, name=f"{name}_sub"), margin, name=f"{name}_add_margin")
    loss = _math.clip_by_value(diff, min_value=0.0, name=f"{name}_clip")
    return _reduce_loss(loss, reduction, name)


def smooth_l1_loss(prediction, label, beta=1.0, name=None):
    """Elementwise smooth L1 (Huber) loss: with d = |prediction - label|,
    ``0.5 d^2 / beta`` if d < beta else ``d - 0.5 beta`` (op ``smooth_l1_loss``, attr ``beta``
    float >= 0; beta = 0 is plain L1). Unreduced, same shape as ``prediction``.

    Args:
        prediction: floating blob of any shape, e.g. (N, *).
        label: blob of the same shape and dtype as ``prediction``.
        beta: a Python number >= 0; default 1.0.
        name: op name; default ``SmoothL1Loss_<n>``.

    Returns:
        BlobDesc: ``prediction``'s shape and dtype.

    Raises:
        ArgumentError: ``prediction`` or ``label`` is not a blob, their shapes or dtypes
            differ, or ``beta`` is not a Python number >= 0.
    """
    fn = "smooth_l1_loss"
    _check_blob(prediction, fn, "prediction")
    _check_blob(label, fn, "label")
    _check_same(fn, prediction, label, "prediction", "label")
    beta = _number(beta, fn, "beta")
    if beta < 0:
        raise ArgumentError(f"flow.smooth_l1_loss: beta must be >= 0, received {beta}")
    return build_op("smooth_l1_loss", {"input": prediction, "target": label}, {"beta": beta}, name=name,
                    prefix="SmoothL1Loss_")


def combined_margin_loss(x, label, m1=1, m2=0, m3=0, name=None):
    """The combined angular margin (ArcFace m2, SphereFace m1, CosFace m3) applied to the
    label's class of each row of ``x``: ``cos(m1 * acos(x) + m2) - m3`` there, ``x`` elsewhere
    (op ``combined_margin_loss``, attrs m1, m2, m3 and depth = ``x.shape[1]``). Multiply by
    the scale ``s`` and apply softmax cross entropy to get the loss. A label outside
    ``[0, depth)`` leaves its row unchanged. Gradient: ``dy`` except at the label,
    ``dy * sin(m1 * theta + m2) * m1 / sin(theta)`` with ``theta = acos(x)`` there. On
    several devices a 2-D ``x`` split on its class axis (a class weight distributed with
    ``split(0)``, as in InsightFace) stays split: each device applies the margin to the
    labels of its classes.
    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/combined_margin_loss.py``,
    ``oneflow/user/ops/combined_margin_loss_op.cpp``.

    Args:
        x: floating blob (N, C, ...): cosines in [-1, 1], the classes over the axes after the first.
        label: integer blob (N,): one class id per row.
        m1: Python number, the angle's multiplier (default 1).
        m2: Python number, the angle's additive margin in radians (default 0).
        m3: Python number, the cosine's additive margin (default 0); with the defaults ``x`` is unchanged.
        name: op name; default ``CombinedMarginLoss_<n>``.

    Returns:
        BlobDesc: ``x``'s shape and dtype.

    Raises:
        ArgumentError: ``x`` or ``label`` is not a blob, or m1/m2/m3 is not a number.
        JobBuildError: ``x`` has rank < 2 or is not floating, or ``label`` is not an
            integer blob with one element per row of ``x``.
    """
    fn = "combined_margin_loss"
    _check_blob(x, fn, "x")
    _check_blob(label, fn, "label")
    margins = {k: _number(v, fn, k) for k, v in (("m1", m1), ("m2", m2), ("m3", m3))}
    if len(x.shape) < 2:
        raise ArgumentError(f"flow.combined_margin_loss: argument 'x' expects rank >= 2, received shape {x.shape}")
    return build_op(fn, {"x": x, "label": label}, {**margins, "depth": int(x.shape[1])}, outputs=("y", "theta"),
                    name=name, prefix="CombinedMarginLoss_")[0]


def distributed_partial_fc_sample(weight, label, num_sample, name=None):
    """A sample of ``num_sample`` classes (rows of ``weight``) holding every class in ``label``
    (Partial FC; op ``distributed_partial_fc_sample``).

    The classes are cut into one shard per device of the current placement, as OneFlow splits
    ``weight`` over them (the first ``classes % devices`` shards one class longer); shard ``p``
    gives ``num_sample / devices`` entries of ``sampled_label``, from position
    ``p * num_sample / devices``: its classes that occur in ``label`` (ascending), then other
    classes of the shard in a random order (torch's generator, seeded once per op: OneFlow's
    curand draws cannot be reproduced, so the random part differs from OneFlow's). A shard
    with more label classes than its share is refused (OneFlow maps the extra labels onto other
    classes' columns). The weight gradient is the rows' gradient summed back at
    ``sampled_label``. OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/partial_fc_sample.py``,
    ``oneflow/user/ops/partial_fc_sample_op.cpp``.

    Args:
        weight: blob (classes, ...), at least one class per device.
        label: integer blob (batch,), class ids in [0, classes).
        num_sample: int, divisible by the device count, its share per device at most the
            smallest shard (``classes // devices``).
        name: op name; default ``DistributedPartialFcSample_<n>``.

    Returns:
        tuple: ``(mapped_label, sampled_label, sampled_weight)``: ``label``'s shape and dtype
        (each label's position in ``sampled_label``), ``(num_sample,)`` of ``label``'s dtype,
        ``(num_sample, ...)`` of ``weight``'s dtype.

    Raises:
        ArgumentError: ``weight`` or ``label`` is not a blob, or ``num_sample`` is not an int.
        JobBuildError: the shapes, dtypes or divisibility above do not hold.
        OpRunError: a label outside ``[0, classes)``, or a shard holding more label classes
            than ``num_sample / devices`` (at run time).
    """
    fn = "distributed_partial_fc_sample"
    _check_blob(weight, fn, "weight")
    _check_blob(label, fn, "label")
    if isinstance(num_sample, bool) or not isinstance(num_sample, numbers.Integral):
        raise ArgumentError(f"flow.{fn}: argument 'num_sample' expects an int, received {num_sample!r}")
    parts = device_count(jb.current().scope.parallel_conf.device_name)
    return build_op(fn, {"weight": weight, "label": label}, {"num_sample": int(num_sample), "parallel_num": parts},
                    outputs=("mapped_label", "sampled_label", "sampled_weight"), name=name,
                    prefix="DistributedPartialFcSample_")


# ================================================================== normalization
# Ops in graphfront/ops/norm_ops.py.

def moments(x, axes, keepdims=False, name=None):
    """(mean, variance) of ``x`` over ``axes`` (a list of ints), variance = mean((x - mean)^2)
    (population variance). Composite of ``flow.math.reduce_mean`` / ``reduce_variance``
    built inside ``flow.scope.namespace(name)`` (default ``Moments_<uid>``).

    Args:
        x: floating blob of any shape, e.g. (N, C, H, W).
        axes: list of ints, the axes reduced (e.g. [0, 2, 3] for per-channel statistics).
        keepdims: bool; keep reduced axes as size 1.
        name: namespace for the two ops (a str; generated when None).

    Returns:
        tuple of BlobDesc: (mean, variance), ``x``'s dtype, ``x``'s shape without ``axes``
        (or with them as 1 when ``keepdims``).

    Raises:
        ArgumentError: ``x`` is not a blob, ``axes`` is not a list of ints, or an axis is
            out of range.
    """
    _check_blob(x, "moments")
    if not isinstance(axes, (list, tuple)) or not all(is_int(a) for a in axes):
        raise ArgumentError(f"flow.nn.moments: axes expects a list of ints, received {axes!r}")
    with _scope.namespace(name or unique_str("Moments_")):
        mean = _math.reduce_mean(x, list(axes), keepdims, name="mean")
        variance = _math.reduce_variance(x, list(axes), keepdims, name="variance")
    return mean, variance


def batch_normalization(x, mean, variance, offset=None, scale=None, variance_epsilon=1e-05, axis=1, name=None):
    """(x - mean) * rsqrt(variance + variance_epsilon) * scale + offset with (C,) statistics
    along ``axis`` (C = x.shape[axis]); ``offset``/``scale`` optional.

    Composed of ``reshape``, ``broadcast_sub``, ``scalar_add``, ``rsqrt`` and
    ``broadcast_mul``/``broadcast_add`` ops, as OneFlow's CPU path (its GPU path emits a
    ``normalization`` op with training=False, which gives no gradient to ``mean`` and
    ``variance``; the composite differentiates every input).

    Args:
        x: floating blob, e.g. (N, C, H, W) with ``axis=1``.
        mean: blob (C,) (or ``x``'s rank with C at ``axis`` and 1 elsewhere).
        variance: blob of ``mean``'s shape.
        offset: optional blob of ``mean``'s shape (beta).
        scale: optional blob of ``mean``'s shape (gamma).
        variance_epsilon: a Python number; default 1e-5.
        axis: int in ``[-rank, rank)``, the channel axis; default 1.
        name: op name prefix (a str; default ``BatchNorm_<uid>``).

    Returns:
        BlobDesc: ``x``'s shape and dtype.

    Raises:
        ArgumentError: (a ValueError) an argument is not a blob, ``axis`` is out of range,
            a statistic has the wrong shape, or ``variance_epsilon`` is not a Python number.
    """
    fn = "batch_normalization"
    _check_blob(x, fn)
    ndim = len(x.shape)
    if not is_int(axis) or not -ndim <= axis < ndim:
        raise ArgumentError(f"flow.nn.{fn}: axis {axis!r} is out of range for x of shape {x.shape}")
    axis = int(axis) % ndim
    c = x.shape[axis]
    name = name or unique_str("BatchNorm_")
    view = [1] * ndim
    view[axis] = c

    def param(blob, arg):
        _check_blob(blob, fn, arg)
        if blob.shape not in ((c,), tuple(view)):
            raise ArgumentError(f"flow.nn.{fn}: '{arg}' must have shape {(c,)} (dim {axis} of x {x.shape}), "
                                f"received {blob.shape}")
        return blob if blob.shape == tuple(view) else array.reshape(blob, view, name=f"{name}_{arg}_reshape")

    inv = _math.rsqrt(_math.add(param(variance, "variance"), _number(variance_epsilon, fn, "variance_epsilon"),
                                name=f"{name}_add_epsilon"), name=f"{name}_rsqrt")
    y = _math.multiply(_math.subtract(x, param(mean, "mean"), name=f"{name}_sub_mean"), inv, name=f"{name}_mul_inv")
    if scale is not None:
        y = _math.multiply(y, param(scale, "scale"), name=f"{name}_mul_scale")
    if offset is not None:
        y = _math.add(y, param(offset, "offset"), name=f"{name}_add_offset")
    return y


def layer_norm(inputs, gamma=None, beta=None, begin_norm_axis=1, begin_params_axis=-1, epsilon=1e-05, name=None):
    """Layer normalization with caller-supplied ``gamma``/``beta`` (op ``layer_norm``).

    Normalizes over axes >= ``begin_norm_axis`` with the biased variance; ``gamma``/``beta``
    (optional) have shape ``inputs.shape[begin_params_axis:]``. graphfront emits the
    ``layer_norm`` op on CPU and GPU (OneFlow's CPU path composes moments and arithmetic).
    Returns y, same shape as ``inputs``.

    Args:
        inputs: floating blob, e.g. (N, C, H, W).
        gamma: optional scale blob of shape ``inputs.shape[begin_params_axis:]``.
        beta: optional shift blob of that shape.
        begin_norm_axis: int, first normalized axis; default 1.
        begin_params_axis: int, first axis of ``gamma``/``beta``; default -1.
        epsilon: a Python number added to the variance; default 1e-5.
        name: op name; default ``LayerNorm_<n>``.

    Returns:
        BlobDesc: y, ``inputs``' shape and dtype.

    Raises:
        ArgumentError: ``inputs``, ``gamma`` or ``beta`` is not a blob, or ``epsilon`` is not
            a Python number.
        JobBuildError: an axis is out of range or ``gamma``/``beta`` has the wrong shape.
    """
    fn = "layer_norm"
    _check_blob(inputs, fn, "inputs")
    for arg, v in (("gamma", gamma), ("beta", beta)):
        if v is not None:
            _check_blob(v, fn, arg)
    outputs = ("y", "mean", "inv_variance") + (("normalized",) if gamma is not None else ())
    attrs = {"center": beta is not None, "scale": gamma is not None, "begin_norm_axis": begin_norm_axis,
             "begin_params_axis": begin_params_axis, "epsilon": _number(epsilon, fn, "epsilon")}
    outs = build_op("layer_norm", {"x": inputs, "beta": beta, "gamma": gamma}, attrs, outputs=outputs, name=name,
                    prefix="LayerNorm_")
    return outs[0]


def _affine_vars(name, x, shape):
    gamma = get_variable(f"{name}_gamma", list(shape), x.dtype, initializers.ones_initializer(x.dtype), trainable=True)
    beta = get_variable(f"{name}_beta", list(shape), x.dtype, initializers.zeros_initializer(x.dtype), trainable=True)
    return gamma, beta


def _normalize_last(x, eps, name, fn):
    """(x - mean) / sqrt(var + eps) over the last axis (population variance), via ``moments``."""
    mean, variance = moments(x, [len(x.shape) - 1], keepdims=True, name=f"{name}_moments")
    std = _math.sqrt(_math.add(variance, _number(eps, fn, "eps"), name=f"{name}_add_eps"), name=f"{name}_sqrt")
    return _math.divide(_math.subtract(x, mean, name=f"{name}_sub_mean"), std, name=f"{name}_div_std")


def GroupNorm(x, num_groups=32, eps=1e-05, affine=True, name=None):  # noqa: N802 - OneFlow's name
    """Group normalization of ``x`` (N, C, ...): the C channels are split into ``num_groups``
    groups and each (example, group) is normalized over its channels and spatial elements
    with the population variance: (x - mean) / sqrt(var + eps) (Wu & He, 2018). With
    ``affine``, multiplied by variable ``<name>_gamma`` (ones) and plus ``<name>_beta``
    (zeros), both of shape (1, C, 1), created in the current name scope.

    Composite (as OneFlow): ``reshape`` to (N, num_groups, -1), ``moments``, arithmetic,
    ``reshape`` back; default name ``GroupNorm_<uid>``.

    Args:
        x: floating blob (N, C, *) of rank >= 3.
        num_groups: positive int dividing C; default 32.
        eps: a Python number added to the variance; default 1e-5.
        affine: bool; add the trainable ``<name>_gamma``/``<name>_beta`` variables.
        name: op and variable name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``x``'s shape and dtype.

    Raises:
        ArgumentError: (a ValueError) ``x`` is not a blob or has rank < 3, ``num_groups`` is
            not a positive int dividing C, or ``eps`` is not a Python number.
    """
    fn = "GroupNorm"
    _check_blob(x, fn)
    if len(x.shape) < 3:
        raise ArgumentError(f"flow.nn.{fn}: x must have rank >= 3 (N, C, ...), received shape {x.shape}")
    c = x.shape[1]
    if not is_int(num_groups) or num_groups <= 0 or c % num_groups:
        raise ArgumentError(f"flow.nn.{fn}: the {c} channels of x {x.shape} must divide into num_groups groups, "
                            f"received num_groups={num_groups!r}")
    name = name or unique_str("GroupNorm_")
    grouped = array.reshape(x, [x.shape[0], num_groups, -1], name=f"{name}_reshape_groups")
    y = array.reshape(_normalize_last(grouped, eps, name, fn), [x.shape[0], c, -1], name=f"{name}_reshape_channels")
    if affine:
        gamma, beta = _affine_vars(name, x, (1, c, 1))
        y = _math.add(_math.multiply(y, gamma, name=f"{name}_mul_gamma"), beta, name=f"{name}_add_beta")
    return array.reshape_like(y, x, name=f"{name}_reshape_back")


def InstanceNorm1d(x, eps=1e-05, affine=True, name=None):  # noqa: N802 - OneFlow's name
    """Instance normalization of ``x`` (N, C, L): each (example, channel) row is normalized
    over L with the population variance, (x - mean) / sqrt(var + eps); with ``affine``,
    times variable ``<name>_gamma`` (ones) plus ``<name>_beta`` (zeros), shape (1, C, 1).
    Composite of ``moments`` and arithmetic; default name ``InstanceNorm1D_<uid>``.

    Args:
        x: floating blob (N, C, L).
        eps: a Python number added to the variance; default 1e-5.
        affine: bool; add the trainable ``<name>_gamma``/``<name>_beta`` variables.
        name: op and variable name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``x``'s shape and dtype.

    Raises:
        ArgumentError: (a ValueError) ``x`` is not a blob or not of rank 3, or ``eps`` is
            not a Python number.
    """
    fn = "InstanceNorm1d"
    _check_blob(x, fn)
    if len(x.shape) != 3:
        raise ArgumentError(f"flow.nn.{fn}: x must have rank 3 (N, C, L), received shape {x.shape}")
    name = name or unique_str("InstanceNorm1D_")
    y = _normalize_last(x, eps, name, fn)
    if affine:
        gamma, beta = _affine_vars(name, x, (1, x.shape[1], 1))
        y = _math.add(_math.multiply(y, gamma, name=f"{name}_mul_gamma"), beta, name=f"{name}_add_beta")
    return y


def _instance_norm_nd(n, x, eps, affine, name):
    fn = f"InstanceNorm{n}d"
    _check_blob(x, fn)
    if len(x.shape) != n + 2:
        raise ArgumentError(f"flow.nn.{fn}: x must have rank {n + 2} (N, C, spatial...), received shape {x.shape}")
    name = name or unique_str(f"InstanceNorm{n}D_")
    flat = array.reshape(x, [x.shape[0], x.shape[1], -1], name=f"{name}_reshape")
    return array.reshape_like(InstanceNorm1d(flat, eps, affine, name=name), x, name=f"{name}_reshape_back")


def InstanceNorm2d(x, eps=1e-05, affine=True, name=None):  # noqa: N802 - OneFlow's name
    """:func:`InstanceNorm1d` of ``x`` (N, C, H, W) viewed as (N, C, H*W); default name
    ``InstanceNorm2D_<uid>``; variables ``<name>_gamma``/``<name>_beta`` (1, C, 1).

    Args:
        x: floating blob (N, C, H, W).
        eps: a Python number added to the variance; default 1e-5.
        affine: bool; add the trainable ``<name>_gamma``/``<name>_beta`` variables.
        name: op and variable name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``x``'s shape and dtype.

    Raises:
        ArgumentError: ``x`` is not a blob or not of rank 4, or ``eps`` is not a Python number.
    """
    return _instance_norm_nd(2, x, eps, affine, name)


def InstanceNorm3d(x, eps=1e-05, affine=True, name=None):  # noqa: N802 - OneFlow's name
    """:func:`InstanceNorm1d` of ``x`` (N, C, D, H, W) viewed as (N, C, D*H*W); default name
    ``InstanceNorm3D_<uid>``.

    Args:
        x: floating blob (N, C, D, H, W).
        eps: a Python number added to the variance; default 1e-5.
        affine: bool; add the trainable ``<name>_gamma``/``<name>_beta`` variables.
        name: op and variable name prefix (a str; generated when None).

    Returns:
        BlobDesc: ``x``'s shape and dtype.

    Raises:
        ArgumentError: ``x`` is not a blob or not of rank 5, or ``eps`` is not a Python number.
    """
    return _instance_norm_nd(3, x, eps, affine, name)


# ================================================================== pixel shuffle

def PixelShufflev2(input, h_upscale_factor, w_upscale_factor, name=None):  # noqa: N802,A002 - OneFlow's names
    """Rearrange (N, C*h*w, H, W) into (N, C, H*h, W*w) with h, w = the upscale factors:
    out[n, c, y*h + i, x*w + j] = in[n, c*h*w + i*w + j, y, x] (PyTorch's pixel_shuffle
    order). Composite of ``reshape`` -> ``transpose`` -> ``reshape`` named ``<name>_*``
    (default ``PixelShufflev2<uid>``).

    Args:
        input: blob (N, C*h*w, H, W) of any dtype.
        h_upscale_factor: positive int h.
        w_upscale_factor: positive int w.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: (N, C, H*h, W*w), ``input``'s dtype.

    Raises:
        ArgumentError: (a ValueError) ``input`` is not a blob, not of rank 4 or its channels
            are not divisible by h*w, or a factor is not a positive int.
    """
    fn = "PixelShufflev2"
    _check_blob(input, fn, "input")
    for arg, f in (("h_upscale_factor", h_upscale_factor), ("w_upscale_factor", w_upscale_factor)):
        if not is_int(f) or f <= 0:
            raise ArgumentError(f"flow.nn.{fn}: {arg} must be a positive int, received {f!r}")
    if len(input.shape) != 4 or input.shape[1] % (h_upscale_factor * w_upscale_factor):
        raise ArgumentError(f"flow.nn.{fn}: input must be (N, C*{h_upscale_factor}*{w_upscale_factor}, H, W), "
                            f"received shape {input.shape}")
    n, c, h, w = input.shape
    out_c = c // (h_upscale_factor * w_upscale_factor)
    name = name or unique_str("PixelShufflev2")
    x = array.reshape(input, [n, out_c, h_upscale_factor, w_upscale_factor, h, w], name=f"{name}_reshape_in")
    x = array.transpose(x, [0, 1, 4, 2, 5, 3], name=f"{name}_transpose")
    return array.reshape(x, [n, out_c, h * h_upscale_factor, w * w_upscale_factor], name=f"{name}_reshape_out")


def PixelShuffle(input, upscale_factor, name=None):  # noqa: N802,A002 - OneFlow's names
    """:func:`PixelShufflev2` with the same factor for height and width.

    Args:
        input: blob (N, C*r*r, H, W) of any dtype.
        upscale_factor: positive int r.
        name: op name prefix (a str; generated when None).

    Returns:
        BlobDesc: (N, C, H*r, W*r), ``input``'s dtype.

    Raises:
        ArgumentError: as :func:`PixelShufflev2`.
    """
    return PixelShufflev2(input, upscale_factor, upscale_factor, name=name)


# ================================================================== transposed convolution
# Ops in graphfront/ops/deconv_ops.py.

def _deconv(fn, value, filter, input, filters, strides, dilations, data_format, name):  # noqa: A002
    x = value if value is not None else input
    w = filter if filter is not None else filters
    _check_blob(x, fn, "value/input")
    _check_blob(w, fn, "filter/filters")
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ArgumentError(f"flow.nn.{fn}: input and filter must be rank 4, received {x.shape} and {w.shape}")
    first = _channels_first(data_format, f"flow.nn.{fn}")
    cin = x.shape[1] if first else x.shape[-1]
    if cin != w.shape[0]:
        raise ArgumentError(f"flow.nn.{fn}: filter {w.shape} must have the input's {cin} "
                            f"channels as its first dim (in_channels, out_channels, kh, kw)")
    kernel = list(w.shape[2:]) if first else list(w.shape[1:-1])
    strides = _tuple(strides if strides is not None else 1, 2, f"flow.nn.{fn}: argument 'strides'")
    dilations = _tuple(dilations if dilations is not None else 1, 2, f"flow.nn.{fn}: argument 'dilations'")
    spatial = list(x.shape[2:]) if first else list(x.shape[1:-1])
    filters_ = w.shape[1] if first else w.shape[-1]
    return x, w, first, kernel, strides, dilations, spatial, filters_


def _build_deconv(x, w, first, kernel, strides, dilations, pads, output_padding, filters_, name):
    attrs = {"filters": filters_, "padding_before": pads, "data_format": "channels_first" if first else "channels_last",
             "kernel_size": kernel, "output_padding": output_padding, "strides": strides, "dilation_rate": dilations}
    return build_op("deconv2d", {"in": x, "weight": w}, attrs, name=name, prefix="Deconv2d_")


def conv2d_transpose(value=None, filter=None, output_shape=None, strides=None, padding="VALID",  # noqa: A002
                     data_format="NCHW", name=None, input=None, filters=None, dilations=None):  # noqa: A002
    """Transposed 2-D convolution (op ``deconv2d``) of ``value`` (alias ``input``) with ``filter``
    (alias ``filters``) of shape (in_channels, out_channels, kh, kw) for NCHW
    ((in_channels, kh, kw, out_channels) for NHWC), producing exactly ``output_shape``.

    Per spatial dim, with total = (n - 1) * s + dilation * (k - 1) + 1 - out: "VALID" uses no
    padding and output_padding = -total; "SAME" removes floor(total / 2) before and the rest
    after (TensorFlow's and OneFlow's split: the gradient of a SAME convolution, whose odd
    extra pad goes after): padding floor(total / 2) on each side and output_padding
    2 * padding - total, or, when total is odd, one trailing row/column more that a
    ``slice`` drops. output_padding must end up in [0, stride).

    Args:
        value: float blob (N, in_channels, H, W) (NCHW) or (N, H, W, in_channels) (NHWC).
        filter: weight blob (in_channels, out_channels, kh, kw) (NCHW) of ``value``'s dtype.
        output_shape: the full rank-4 output shape, e.g. (N, out_channels, H', W').
        strides: int or (sh, sw); default 1.
        padding: ``"VALID"`` or ``"SAME"`` (case-insensitive).
        data_format: ``"NCHW"`` or ``"NHWC"``.
        name: op name; default ``Deconv2d_<n>``.
        input: alias of ``value``.
        filters: alias of ``filter``.
        dilations: int or (dh, dw); default 1.

    Returns:
        BlobDesc: blob of ``output_shape``, ``value``'s dtype.

    Raises:
        ArgumentError: (a ValueError) ``value``/``filter`` missing or not rank-4 blobs, the
            filter's first dim is not the input channels, bad ``data_format``, ``strides``
            or ``dilations``, ``output_shape`` not rank 4 or with another batch size or
            channel count, ``padding`` not VALID/SAME, or an output size that cannot be
            produced.
    """
    fn = "conv2d_transpose"
    x, w, first, kernel, strides, dilations, spatial, filters_ = _deconv(
        fn, value, filter, input, filters, strides, dilations, data_format, name)
    if output_shape is None or len(output_shape) != 4:
        raise ArgumentError(f"flow.nn.{fn}: output_shape must be the full rank-4 output shape, "
                            f"received {output_shape!r}")
    out_channels = output_shape[1] if first else output_shape[-1]
    if output_shape[0] != x.shape[0] or out_channels != filters_:
        raise ArgumentError(f"flow.nn.{fn}: output_shape {tuple(output_shape)} must keep the batch size "
                            f"{x.shape[0]} and have the filter's {filters_} output channels")
    out = list(output_shape[2:]) if first else list(output_shape[1:-1])
    mode = padding.upper() if isinstance(padding, str) else None
    if mode not in ("VALID", "SAME"):
        raise ArgumentError(f'flow.nn.{fn}: padding must be "VALID" or "SAME", received {padding!r}')
    pads, ops, trim = [], [], False
    for i in range(2):
        total = (spatial[i] - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - out[i]
        p = 0 if mode == "VALID" else max(0, total // 2)
        o = 2 * p - total
        if o == -1:  # SAME with an odd total: one more row/column than `out`, dropped below
            o, trim = 0, True
        if not 0 <= o < strides[i]:
            raise ArgumentError(f"flow.nn.{fn}: output size {out[i]} of spatial dim {i} cannot be produced from input "
                                f"size {spatial[i]} with kernel {kernel[i]}, stride {strides[i]}, dilation "
                                f"{dilations[i]} and padding {mode}")
        pads.append(p)
        ops.append(o)
    if not trim:
        return _build_deconv(x, w, first, kernel, strides, dilations, pads, ops, filters_, name)
    name = name or unique_str("Deconv2d_")
    y = _build_deconv(x, w, first, kernel, strides, dilations, pads, ops, filters_, name)
    tups = [(None, None, None)] * 4
    for i in range(2):
        tups[2 + i if first else 1 + i] = (0, out[i], 1)
    return array.slice_v2(y, tups, name=f"{name}-trim")


def torch_conv2d_transpose(value=None, filter=None, output_padding=None, strides=None, padding_needed=None,  # noqa
                           data_format="NCHW", name=None, input=None, filters=None, dilations=None):  # noqa: A002
    """Transposed 2-D convolution parameterized like PyTorch's ``conv_transpose2d``:
    ``padding_needed`` is the padding removed on each side (PyTorch's ``padding``) and
    ``output_padding`` the extra size added at the end (both int or 2 ints, default 0).
    Op ``deconv2d``; filter layout as :func:`conv2d_transpose`.

    Args:
        value: float blob (N, in_channels, H, W) (NCHW) or (N, H, W, in_channels) (NHWC).
        filter: weight blob (in_channels, out_channels, kh, kw) (NCHW) of ``value``'s dtype.
        output_padding: int or 2 ints >= 0, each < the stride; default 0.
        strides: int or (sh, sw); default 1.
        padding_needed: int or 2 ints >= 0; default 0.
        data_format: ``"NCHW"`` or ``"NHWC"``.
        name: op name; default ``Deconv2d_<n>``.
        input: alias of ``value``.
        filters: alias of ``filter``.
        dilations: int or (dh, dw); default 1.

    Returns:
        BlobDesc: (N, out_channels, H', W') (NCHW), ``H' = (H - 1) sh - 2 p + dh (kh - 1)
        + output_padding + 1``; ``value``'s dtype.

    Raises:
        ArgumentError: ``value``/``filter`` missing or not rank-4 blobs, the filter's first
            dim is not the input channels, or bad ``data_format``, ``strides``,
            ``dilations``, ``padding_needed`` or ``output_padding``.
        JobBuildError: the op rejects the sizes (e.g. output_padding >= stride).
    """
    fn = "torch_conv2d_transpose"
    x, w, first, kernel, strides, dilations, _spatial, filters_ = _deconv(
        fn, value, filter, input, filters, strides, dilations, data_format, name)
    pads = _tuple(padding_needed if padding_needed is not None else 0, 2, f"flow.nn.{fn}: argument 'padding_needed'", 0)
    ops = _tuple(output_padding if output_padding is not None else 0, 2, f"flow.nn.{fn}: argument 'output_padding'", 0)
    return _build_deconv(x, w, first, kernel, strides, dilations, pads, ops, filters_, name)
