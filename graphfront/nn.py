"""``flow.nn``: convolution, pooling, activations, dropout, softmax and losses.

Thin wrappers in OneFlow's signatures (``shared/reference/single_client_api.md``
§flow.nn, ``user_ops.md`` §1 for the op each emits).
"""
from __future__ import annotations

import random

from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc
from graphfront.ops.builder import build_op
from graphfront.ops.nn_ops import conv_out_size


def _tuple(v, n, what):
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"{what} expects an int or {n} ints, received {v}")
    return v


def _channels_first(data_format):
    return data_format.startswith("NC") or data_format == "channels_first"


def _same_pads(size, k, s, d, lower=True):
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    before = (total + 1) // 2 if lower else total // 2
    return before, total - before


def conv_nd(n, input, filters, strides, padding, data_format, dilations, groups, name, bias=None):
    """Shared body of conv1d/2d/3d: resolves padding into OneFlow's symmetric form."""
    first = _channels_first(data_format)
    kernel = list(filters.shape[2:]) if first else list(filters.shape[1:-1])
    strides = _tuple(strides, n, "strides")
    dilations = _tuple(dilations if dilations is not None else 1, n, "dilations")
    spatial = input.shape[2:] if first else input.shape[1:-1]
    if len(input.shape) != n + 2:
        raise ValueError(f"conv{n}d: input expects rank {n + 2}, received shape {input.shape}")
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
            raise ValueError(f'conv{n}d: padding must be "VALID", "SAME", "SAME_LOWER", "SAME_UPPER" or a list, '
                             f"received {padding!r}")
    else:
        pairs = [tuple(p) if isinstance(p, (list, tuple)) else (p, p) for p in padding]
        if len(pairs) == n + 2:
            pairs = pairs[2:] if first else pairs[1:-1]
        if len(pairs) != n:
            raise ValueError(f"conv{n}d: padding list needs {n} (or {n + 2}) entries, received {padding!r}")
        if all(b == a for b, a in pairs):
            pads_before = [b for b, _ in pairs]
        else:
            explicit = pairs
    if explicit is not None:
        full = [(0, 0)] + explicit + [(0, 0)] if first else [(0, 0)] + explicit + [(0, 0)]
        input = pad(input, full)
        pads_before = [0] * n
    attrs = {"filters": filters.shape[0], "padding_before": pads_before,
             "data_format": "channels_first" if first else "channels_last", "kernel_size": kernel,
             "strides": strides, "dilation_rate": dilations, "groups": groups}
    return build_op(f"conv{n}d", {"in": input, "weight": filters, "bias": bias}, attrs, name=name,
                    prefix=f"Conv{n}d_")


def conv1d(input, filters, strides, padding, data_format="NCW", dilations=None, groups=1, name=None):
    """1-D convolution of ``input`` with weight blob ``filters`` ([out, in/groups, k] for NCW)."""
    return conv_nd(1, input, filters, strides, padding, data_format, dilations, groups, name)


def conv2d(input, filters, strides, padding, bias=None, data_format="NCHW", dilations=None, groups=1, name=None):
    """2-D convolution (op ``conv2d``) of ``input`` (N, C, H, W for NCHW) with weight blob ``filters``
    (out, C/groups, kh, kw). ``padding``: "VALID", "SAME" (= SAME_LOWER: the larger half of an odd
    total pad goes before), "SAME_UPPER" or per-dim (before, after) pairs; asymmetric pads become
    a ``pad`` op. Returns (N, out, H', W'), H' = (H + 2p - ((k-1)d+1) + s) // s."""
    return conv_nd(2, input, filters, strides, padding, data_format, dilations, groups, name, bias)


def conv3d(input, filters, strides, padding, data_format="NCDHW", dilations=None, groups=1, name=None):
    """3-D convolution with weight blob ``filters``."""
    return conv_nd(3, input, filters, strides, padding, data_format, dilations, groups, name)


def pad(x, paddings, constant_value=0, name=None):
    """Constant padding with per-dimension (before, after) pairs (op ``pad``)."""
    from graphfront.ops import registry
    if not registry.has_op("pad"):
        raise NotImplementedError("asymmetric padding needs the 'pad' op")
    before = [int(p[0]) for p in paddings]
    after = [int(p[1]) for p in paddings]
    attrs = {"padding_before": before, "padding_after": after}
    if isinstance(constant_value, float):
        attrs["floating_constant_value"] = constant_value
    else:
        attrs["integral_constant_value"] = int(constant_value)
    return build_op("pad", {"x": x}, attrs, outputs=("y",), name=name, prefix="Pad_")


def bias_add(value, bias, data_format=None, name=None):
    """Add 1-D ``bias`` along the channel axis (1 for None/NC..., last for N...C)."""
    axis = 1 if data_format is None or _channels_first(data_format) else len(value.shape) - 1
    return build_op("bias_add", {"a": value, "b": bias}, {"axis": axis}, name=name, prefix="BiasAdd_")


def relu(x, name=None):
    """max(x, 0) (op ``relu``)."""
    return build_op("relu", {"x": x}, outputs=("y",), name=name, prefix="Relu_")


def _pool(kind, n, input, ksize, strides, padding, data_format, ceil_mode, name):
    first = _channels_first(data_format)
    attrs = {"data_format": "channels_first" if first else "channels_last",
             "pool_size": _tuple(ksize, n, "ksize"), "strides": _tuple(strides, n, "strides"),
             "ceil_mode": bool(ceil_mode), "padding_before": [0] * n, "padding_after": [0] * n}
    if isinstance(padding, str):
        modes = {"SAME": "same_lower", "SAME_LOWER": "same_lower", "SAME_UPPER": "same_upper", "VALID": "valid"}
        if padding.upper() not in modes:
            raise ValueError(f"{kind}_pool{n}d: padding must be VALID, SAME, SAME_LOWER, SAME_UPPER or a list, "
                             f"received {padding!r}")
        attrs["padding"] = modes[padding.upper()]
    else:
        pairs = [tuple(p) for p in padding]
        if len(pairs) != n + 2:
            raise ValueError(f"{kind}_pool{n}d: padding list needs {n + 2} (before, after) pairs, received {padding!r}")
        spatial = pairs[2:] if first else pairs[1:-1]
        other = pairs[:2] if first else [pairs[0], pairs[-1]]
        if any(p != (0, 0) for p in other):
            raise ValueError(f"{kind}_pool{n}d: non-spatial padding must be 0, received {padding!r}")
        attrs.update(padding="customized", padding_before=[p[0] for p in spatial], padding_after=[p[1] for p in spatial])
    return build_op(f"tf_{kind}_pool_{n}d", {"x": input}, attrs, outputs=("y",), name=name,
                    prefix=f"{kind.capitalize()}Pool{n}D_")


def max_pool2d(input, ksize, strides, padding, data_format="NCHW", ceil_mode=False, name=None):
    """2-D max pooling (op ``tf_max_pool_2d``); padding VALID, SAME (= SAME_LOWER), SAME_UPPER or pairs."""
    return _pool("max", 2, input, ksize, strides, padding, data_format, ceil_mode, name)


def avg_pool2d(input, ksize, strides, padding, data_format="NCHW", ceil_mode=False, name=None):
    """2-D average pooling (op ``tf_avg_pool_2d``) over the unpadded elements of each window."""
    return _pool("avg", 2, input, ksize, strides, padding, data_format, ceil_mode, name)


def max_pool1d(input, ksize, strides, padding, data_format="NCW", name=None):
    return _pool("max", 1, input, ksize, strides, padding, data_format, False, name)


def avg_pool1d(input, ksize, strides, padding, data_format="NCW", name=None):
    return _pool("avg", 1, input, ksize, strides, padding, data_format, False, name)


def max_pool3d(input, ksize, strides, padding, data_format="NCDHW", ceil_mode=False, name=None):
    return _pool("max", 3, input, ksize, strides, padding, data_format, ceil_mode, name)


def avg_pool3d(input, ksize, strides, padding, data_format="NCDHW", ceil_mode=False, name=None):
    return _pool("avg", 3, input, ksize, strides, padding, data_format, ceil_mode, name)


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """Zero each element with probability ``rate`` and scale the rest by 1/(1-rate).

    Returns ``x`` unchanged (no op) in predict jobs or when rate == 0 (as OneFlow).
    """
    if not 0 <= rate < 1:
        raise ValueError(f"dropout: rate must be in [0, 1), received {rate}")
    if rate == 0 or not jb.current().is_train:
        return x
    out, _mask = build_op("dropout", {"in": x}, {"rate": float(rate)}, outputs=("out", "mask"), name=name,
                          prefix="Dropout_")
    return out


def random_mask_like(like, rate, seed=None, noise_shape=None, name=None):
    """int8 keep-mask shaped like ``like`` (1 with probability 1 - rate)."""
    seed = random.randrange(2 ** 31) if seed is None else seed
    return build_op("random_mask_like", {"like": like}, {"rate": float(rate), "seed": int(seed)}, name=name,
                    prefix="RandomMaskLike_")


def softmax(logits, axis=None, name=None):
    """Softmax over the last axis (op ``softmax``)."""
    if axis not in (None, -1, len(logits.shape) - 1):
        from graphfront import array
        perm = list(range(len(logits.shape)))
        perm[axis], perm[-1] = perm[-1], perm[axis]
        t = array.transpose(logits, perm)
        return array.transpose(build_op("softmax", {"in": t}, name=name, prefix="Softmax_"), perm)
    return build_op("softmax", {"in": logits}, name=name, prefix="Softmax_")


def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example softmax cross entropy with integer class labels (labels first).

    ``logits``: (N, C) float; ``labels``: (N,) integer (or (N, 1), squeezed). Returns
    the (N,) per-example losses (op ``sparse_softmax_cross_entropy``; its ``prob``
    output is dropped). Training divides gradients by N, so this acts as a mean.
    """
    if not isinstance(labels, BlobDesc) or not isinstance(logits, BlobDesc):
        raise TypeError("sparse_softmax_cross_entropy_with_logits(labels, logits) expects two blobs "
                        "(note: labels come first)")
    if len(labels.shape) == len(logits.shape):
        if labels.shape[-1] != 1:
            raise ValueError(f"sparse_softmax_cross_entropy_with_logits: labels of the logits' rank need a last "
                             f"dim of 1, received {labels.shape}")
        from graphfront import array
        labels = array.squeeze(labels, [-1])
    _prob, out = build_op("sparse_softmax_cross_entropy", {"prediction": logits, "label": labels},
                          {"depth": logits.shape[-1]}, outputs=("prob", "out"), name=name,
                          prefix="SparseSoftmaxCrossEntropy_")
    return out
