"""AutoTests of the core ops (math_ops, nn_ops, array_ops) against PyTorch eager.

Every test draws its arguments 20 times; forward outputs and the gradients of
sum(outputs) w.r.t. every float input are compared (see graphfront.testing). The
references are written from PyTorch's own functions, except where OneFlow's semantics
differ from any single torch function (TF-style pooling padding): there the reference
is built from F.pad + Tensor.unfold by the documented rule (oneflow/user/ops/pool_op.cpp).
"""
import math

import numpy as np
import pytest

from graphfront.ops.builder import build_op
from graphfront.testing import (autotest, constant, dropout_statistics, mask_statistics, nothing, oneof, random,
                                random_bool, random_tensor)


def _dims(ndim, low=1, high=6):
    """``ndim`` sizes drawn from low..high (inclusive) in the current draw."""
    return [random(low, high + 1).to(int).value() for _ in range(ndim)]


def _tensor(shape, low=-1, high=1, **kw):
    """A random_tensor of exactly ``shape`` (rank <= 5)."""
    if len(shape) > 5:
        raise ValueError("_tensor supports rank <= 5")
    dims = list(shape) + [None] * (5 - len(shape))
    return random_tensor(len(shape), *dims, low=low, high=high, **kw)


# ------------------------------------------------------------------ relu / identity / cast

@autotest()
def test_relu(check):
    check(graphfront=lambda flow, x, api: getattr(flow, api).relu(x),
          torch=lambda torch, x, api: torch.relu(x),
          x=random_tensor(low=-1, high=1), api=oneof("math", "nn"))


@autotest()
def test_identity(check):
    check(graphfront=lambda flow, x: flow.identity(x),
          torch=lambda torch, x: x,
          x=random_tensor(low=-1, high=1))


@autotest()
def test_cast_from_float(check):
    check(graphfront=lambda flow, x, dtype: flow.cast(x, getattr(flow, dtype)),
          torch=lambda torch, x, dtype: x.to(getattr(torch, dtype)),
          x=random_tensor(low=-5, high=5),
          dtype=oneof("float64", "float16", "int32", "int64", "int8"))


@autotest()
def test_cast_from_int(check):
    check(graphfront=lambda flow, x, dtype: flow.cast(x, getattr(flow, dtype)),
          torch=lambda torch, x, dtype: x.to(getattr(torch, dtype)),
          x=random_tensor(low=-100, high=100, dtype=int), dtype=oneof("float32", "float64", "int32"))


# ------------------------------------------------------------------ scalar ops

def _scalar_add(x, s, form):
    """x + s in one of the forms the API offers (works for blobs and tensors alike)."""
    if form == "x+s":
        return x + s
    if form == "s+x":
        return s + x
    if form == "x-s":
        return x - s
    return s - x


@autotest()
def test_scalar_add(check):
    check(graphfront=lambda flow, x, s, form: _scalar_add(x, s, form),
          torch=lambda torch, x, s, form: _scalar_add(x, s, form),
          x=random_tensor(low=-2, high=2),
          s=random(-3, 3).to(float) | random(-3, 3).to(int),
          form=oneof("x+s", "s+x", "x-s", "s-x"))


@autotest()
def test_scalar_add_int_tensor(check):
    check(graphfront=lambda flow, x, s: flow.math.add(x, s),
          torch=lambda torch, x, s: x + s,
          x=random_tensor(low=-10, high=10, dtype=int), s=random(-3, 4).to(int))


@autotest()
def test_scalar_mul(check):
    check(graphfront=lambda flow, x, s, form: {"x*s": lambda: x * s, "s*x": lambda: s * x,
                                                "x/s": lambda: x / s}[form](),
          torch=lambda torch, x, s, form: {"x*s": lambda: x * s, "s*x": lambda: s * x,
                                           "x/s": lambda: x / s}[form](),
          x=random_tensor(low=-2, high=2),
          s=random(0.5, 3).to(float) | random(-3, -0.5).to(float) | random(1, 4).to(int),
          form=oneof("x*s", "s*x", "x/s"))


# ------------------------------------------------------------------ add_n / binary

@autotest()
def test_add_n(check):
    shape = _dims(random(1, 5).to(int).value())
    count = random(2, 5).to(int).value()
    check(graphfront=lambda flow, xs, api: flow.math.add_n(xs) if api == "add_n" else xs[0] + xs[1],
          torch=lambda torch, xs, api: sum(xs[1:], xs[0]) if api == "add_n" else xs[0] + xs[1],
          xs=[_tensor(shape) for _ in range(count)], api=oneof("add_n", "operator"))


def _broadcast_shapes():
    """Two different numpy-broadcastable shapes: dims set to 1 at random, leading dims dropped."""
    ndim = random(1, 5).to(int).value()
    full = _dims(ndim, 2, 4)
    x = [1 if random_bool().value() else d for d in full]
    y = [1 if random_bool().value() else d for d in full]
    y = y[random(0, ndim).to(int).value():]
    if random_bool().value():
        x, y = y, x
    return x, y


def _binary_test(check, op, y_low=-1.0, y_high=1.0):
    xs, ys = _broadcast_shapes()
    check(graphfront=lambda flow, x, y: {"add": flow.math.add, "sub": flow.math.subtract, "mul": flow.math.multiply,
                                         "div": flow.math.divide}[op](x, y),
          torch=lambda torch, x, y: {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[op](x, y),
          x=_tensor(xs), y=_tensor(ys, y_low, y_high))


@autotest()
def test_broadcast_add(check):
    _binary_test(check, "add")


@autotest()
def test_broadcast_sub(check):
    _binary_test(check, "sub")


@autotest()
def test_broadcast_mul(check):
    _binary_test(check, "mul")


@autotest()
def test_broadcast_div(check):
    _binary_test(check, "div", 0.5, 2.0)


@autotest()
def test_multiply(check):
    shape = _dims(random(1, 5).to(int).value())
    check(graphfront=lambda flow, x, y: flow.math.multiply(x, y),
          torch=lambda torch, x, y: x * y,
          x=_tensor(shape), y=_tensor(shape))


# ------------------------------------------------------------------ reductions

def _axes_arg(ndim):
    """None, an int (maybe negative) or a list of distinct axes."""
    kind = oneof("none", "int", "list").value()
    if kind == "none":
        return None
    if kind == "int":
        return random(-ndim, ndim).to(int).value()
    k = random(1, ndim + 1).to(int).value()
    perm = random_axes_permutation(ndim)
    return sorted(perm[:k])


def random_axes_permutation(ndim):
    keys = [random(0, 1).value() for _ in range(ndim)]
    return sorted(range(ndim), key=lambda i: keys[i])


def _torch_dims(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    return (axis,) if isinstance(axis, int) else tuple(axis)


@autotest()
def test_reduce_sum(check):
    ndim = random(1, 5).to(int).value()
    check(graphfront=lambda flow, x, axis, keepdims: flow.math.reduce_sum(x, axis=axis, keepdims=keepdims),
          torch=lambda torch, x, axis, keepdims: torch.atleast_1d(
              x.sum(dim=_torch_dims(axis, x.dim()), keepdim=keepdims)),
          x=random_tensor(ndim, random(1, 6), low=-1, high=1), axis=_axes_arg(ndim), keepdims=random_bool())


@autotest()
def test_reduce_mean(check):
    ndim = random(1, 5).to(int).value()
    check(graphfront=lambda flow, x, axis, keepdims: flow.math.reduce_mean(x, axis=axis, keepdims=keepdims),
          torch=lambda torch, x, axis, keepdims: torch.atleast_1d(
              x.mean(dim=_torch_dims(axis, x.dim()), keepdim=keepdims)),
          x=random_tensor(ndim, random(1, 6), low=-1, high=1), axis=_axes_arg(ndim), keepdims=random_bool())


def _build(flow, op_type, inputs, attrs, outputs):
    """Build one user op through flow.user_op_builder; returns its output blobs."""
    return build_op(op_type, inputs, attrs, outputs, name=op_type + "_under_test")


@autotest(auto_backward=False)
def test_reduce_sum_like(check):
    shape = _dims(random(1, 5).to(int).value())
    axes = sorted(set(random_axes_permutation(len(shape))[:random(1, len(shape) + 1).to(int).value()]))
    like = [1 if i in axes else d for i, d in enumerate(shape)]
    check(graphfront=lambda flow, x, like, axes: _build(flow, "reduce_sum_like", {"x": x, "like": like},
                                                        {"axis": axes}, ["y"]),
          torch=lambda torch, x, like, axes: x.sum(dim=tuple(axes), keepdim=True),
          x=_tensor(shape), like=_tensor(like, requires_grad=False), axes=axes)


@autotest()
def test_broadcast_like(check):
    shape = _dims(random(1, 5).to(int).value())
    axes = sorted(set(random_axes_permutation(len(shape))[:random(1, len(shape) + 1).to(int).value()]))
    small = [1 if i in axes else d for i, d in enumerate(shape)]
    check(graphfront=lambda flow, x, like, axes: _build(flow, "broadcast_like", {"x": x, "like": like},
                                                        {"broadcast_axes": axes}, ["y"]),
          torch=lambda torch, x, like, axes: x.expand(like.shape),
          x=_tensor(small), like=_tensor(shape, requires_grad=False), axes=axes)


@autotest(auto_backward=False)
def test_argmax(check):
    check(graphfront=lambda flow, x: flow.math.argmax(x),
          torch=lambda torch, x: torch.atleast_1d(torch.argmax(x, dim=-1)),
          x=random_tensor(random(1, 4), random(1, 6), low=-1, high=1))


# ------------------------------------------------------------------ unary math family

@autotest()
def test_negative(check):
    check(graphfront=lambda flow, x: flow.math.negative(x), torch=lambda torch, x: torch.neg(x),
          x=random_tensor(low=-2, high=2) | random_tensor(low=-9, high=9, dtype=int))


@autotest()
def test_exp(check):
    check(graphfront=lambda flow, x: flow.math.exp(x), torch=lambda torch, x: torch.exp(x),
          x=random_tensor(low=-2, high=2))


@autotest()
def test_log(check):
    check(graphfront=lambda flow, x: flow.math.log(x), torch=lambda torch, x: torch.log(x),
          x=random_tensor(low=0.1, high=3))


@autotest()
def test_sqrt(check):
    check(graphfront=lambda flow, x: flow.math.sqrt(x), torch=lambda torch, x: torch.sqrt(x),
          x=random_tensor(low=0.1, high=3))


@autotest()
def test_rsqrt(check):
    check(graphfront=lambda flow, x: flow.math.rsqrt(x), torch=lambda torch, x: torch.rsqrt(x),
          x=random_tensor(low=0.1, high=3))


@autotest()
def test_square(check):
    check(graphfront=lambda flow, x: flow.math.square(x), torch=lambda torch, x: torch.square(x),
          x=random_tensor(low=-2, high=2))


@autotest()
def test_abs(check):
    check(graphfront=lambda flow, x: flow.math.abs(x), torch=lambda torch, x: torch.abs(x),
          x=random_tensor(low=-2, high=2) | random_tensor(low=-9, high=9, dtype=int))


@autotest()
def test_tanh(check):
    check(graphfront=lambda flow, x: flow.math.tanh(x), torch=lambda torch, x: torch.tanh(x),
          x=random_tensor(low=-3, high=3))


@autotest()
def test_sigmoid_v2(check):
    check(graphfront=lambda flow, x: flow.math.sigmoid_v2(x), torch=lambda torch, x: torch.sigmoid(x),
          x=random_tensor(low=-4, high=4))


@autotest()
def test_reciprocal(check):
    check(graphfront=lambda flow, x: flow.math.reciprocal(x), torch=lambda torch, x: torch.reciprocal(x),
          x=random_tensor(low=0.5, high=2) | random_tensor(low=-2, high=-0.5))


# ------------------------------------------------------------------ convolution

_CONV_FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def same_lower_pads(size, k, s, d=1):
    """OneFlow's SAME (= SAME_LOWER) pads: output ceil(size / s), the larger half before."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return (total + 1) // 2, total - (total + 1) // 2


def torch_conv(torch, x, w, b, strides, pads, dilations, groups, channels_last):
    """Reference convolution: explicit F.pad with (before, after) pairs, then F.convNd."""
    F = torch.nn.functional
    n = x.dim() - 2
    if channels_last:  # contiguous: torch 2.13's CPU conv backward corrupts memory on channels_last 1x1 strides
        x, w = x.movedim(-1, 1).contiguous(), w.movedim(-1, 1).contiguous()
    x = F.pad(x, [p for pair in reversed(pads) for p in pair])
    y = getattr(F, f"conv{n}d")(x, w, b, stride=strides, dilation=dilations, groups=groups)
    return y.movedim(1, -1) if channels_last else y


def _conv_test(check, n, max_size, with_bias=False):
    channels_last = random_bool().value()
    groups = oneof(1, 2).value()
    cin, cout = groups * random(1, 3).to(int).value(), groups * random(1, 3).to(int).value()
    k, s, d = _dims(n, 1, 3), _dims(n, 1, 2), _dims(n, 1, 2)
    size = [random((ki - 1) * di + 1, max_size + 1).to(int).value() for ki, di in zip(k, d)]
    mode = oneof("VALID", "SAME", "list").value()
    if mode == "VALID":
        padding, pads = "VALID", [(0, 0)] * n
    elif mode == "SAME":
        padding, pads = "SAME", [same_lower_pads(*a) for a in zip(size, k, s, d)]
    else:
        pads = [(random(0, 3).to(int).value(), random(0, 3).to(int).value()) for _ in range(n)]
        padding = pads
    batch = random(1, 3).to(int).value()
    x_shape = [batch] + (size + [cin] if channels_last else [cin] + size)
    w_shape = [cout] + (k + [cin // groups] if channels_last else [cin // groups] + k)
    fmt = _CONV_FORMATS[n][1 if channels_last else 0]
    check(graphfront=lambda flow, x, w, strides, padding, dilations, groups, data_format, bias=None, **_:
          getattr(flow.nn, f"conv{n}d")(x, w, strides, padding, data_format=data_format, dilations=dilations,
                                        groups=groups, **({"bias": bias} if bias is not None else {})),
          torch=lambda torch, x, w, strides, pads, dilations, groups, data_format, bias=None, **_:
          torch_conv(torch, x, w, bias, strides, pads, dilations, groups, data_format.endswith("C")),
          x=_tensor(x_shape), w=_tensor(w_shape), strides=s, padding=padding, pads=pads, dilations=d,
          groups=groups, data_format=fmt,
          bias=(_tensor([cout]) | nothing()) if with_bias and not channels_last else nothing())


@autotest()
def test_conv1d(check):
    _conv_test(check, 1, 10)


@autotest()
def test_conv2d(check):
    _conv_test(check, 2, 8, with_bias=True)


@autotest()
def test_conv3d(check):
    _conv_test(check, 3, 5)


@autotest()
def test_conv2d_with_bias(check):
    """conv2d's own bias input (grad conv_bias_grad; fused into fused_conv_grad by the passes)."""
    cin, cout = random(1, 4).to(int).value(), random(1, 4).to(int).value()
    k, size = _dims(2, 1, 3), _dims(2, 3, 7)
    check(graphfront=lambda flow, x, w, b, strides: flow.nn.conv2d(x, w, strides, "SAME", bias=b),
          torch=lambda torch, x, w, b, strides: torch_conv(torch, x, w, b, strides, [
              same_lower_pads(n, kk, s) for n, kk, s in zip(x.shape[2:], w.shape[2:], strides)], [1, 1], 1, False),
          x=_tensor([random(1, 3).to(int).value(), cin] + size), w=_tensor([cout, cin] + k), b=_tensor([cout]),
          strides=_dims(2, 1, 2))


@autotest()
def test_bias_add(check):
    ndim = random(2, 5).to(int).value()
    shape = _dims(ndim)
    fmt = oneof(None, "NC", "NHWC").value()
    axis = ndim - 1 if fmt == "NHWC" else 1
    check(graphfront=lambda flow, x, b, data_format, axis: flow.nn.bias_add(x, b, data_format=data_format),
          torch=lambda torch, x, b, data_format, axis: x + b.reshape([-1 if i == axis else 1 for i in range(x.dim())]),
          x=_tensor(shape), b=_tensor([shape[axis]]), data_format=fmt, axis=axis)


# ------------------------------------------------------------------ TF-style pooling

def tf_pool_reference(torch, x, kind, ksize, strides, pads, outs, channels_last):
    """Pooling by definition: pad with (before, after) pairs (extended after so that
    ``outs`` windows fit), cut windows with Tensor.unfold, and take their max (pads
    -inf) or the mean of their real elements (pads NaN, nanmean)."""
    F = torch.nn.functional
    if channels_last:
        x = x.movedim(-1, 1)
    n = x.dim() - 2
    full = []
    for i in range(n):
        before, after = pads[i]
        after = max(after, (outs[i] - 1) * strides[i] + ksize[i] - x.shape[2 + i] - before)
        full.append((before, after))
    fill = -math.inf if kind == "max" else math.nan
    w = F.pad(x, [p for pair in reversed(full) for p in pair], value=fill)
    for i in range(n):
        w = w.unfold(2 + i, ksize[i], strides[i]).narrow(2 + i, 0, outs[i])
    dims = tuple(range(-n, 0))
    y = w.amax(dim=dims) if kind == "max" else w.nanmean(dim=dims)
    return y.movedim(1, -1) if channels_last else y


def _pool_test(check, kind, n, max_size):
    channels_last = random_bool().value()
    k, s = _dims(n, 1, 3), _dims(n, 1, 2)
    size = [random(ki, max_size + 1).to(int).value() for ki in k]
    mode = oneof("VALID", "SAME", "SAME_UPPER", "customized").value()
    ceil_mode = False
    if mode == "VALID":
        pads = [(0, 0)] * n
        outs = [(m - ki + si) // si for m, ki, si in zip(size, k, s)]
    elif mode in ("SAME", "SAME_UPPER"):
        outs = [-(-m // si) for m, si in zip(size, s)]
        totals = [max((o - 1) * si + ki - m, 0) for o, si, ki, m in zip(outs, s, k, size)]
        pads = [((t + 1) // 2, t // 2) if mode == "SAME" else (t // 2, (t + 1) // 2) for t in totals]
    else:
        pads = [(random(0, ki).to(int).value(), random(0, ki).to(int).value()) for ki in k]
        ceil_mode = n > 1 and random_bool().value()

        def count(ceil):
            return [(m + b + a - ki + si + (si - 1 if ceil else 0)) // si
                    for m, (b, a), ki, si in zip(size, pads, k, s)]
        outs = count(ceil_mode)
        # every window must hold a real element (else max is -inf and the mean 0/0)
        if ceil_mode and any((o - 1) * si - b >= m for o, si, (b, _), m in zip(outs, s, pads, size)):
            ceil_mode, outs = False, count(False)
    batch, channels = random(1, 3).to(int).value(), random(1, 4).to(int).value()
    x_shape = [batch] + (size + [channels] if channels_last else [channels] + size)
    fmt = _CONV_FORMATS[n][1 if channels_last else 0]
    if mode == "customized":
        padding = [(0, 0)] + list(pads) + [(0, 0)] if channels_last else [(0, 0), (0, 0)] + list(pads)
    else:
        padding = mode
    extra = {"ceil_mode": ceil_mode} if n > 1 else {}
    check(graphfront=lambda flow, x, ksize, strides, padding, data_format, extra, **_:
          getattr(flow.nn, f"{kind}_pool{n}d")(x, ksize, strides, padding, data_format=data_format, **extra),
          torch=lambda torch, x, ksize, strides, pads, outs, data_format, **_:
          tf_pool_reference(torch, x, kind, ksize, strides, pads, outs, data_format.endswith("C")),
          x=_tensor(x_shape, -2, 2), ksize=k, strides=s, padding=padding, pads=pads, outs=outs, data_format=fmt,
          extra=extra)


@autotest()
def test_max_pool1d(check):
    _pool_test(check, "max", 1, 10)


@autotest()
def test_max_pool2d(check):
    _pool_test(check, "max", 2, 8)


@autotest()
def test_max_pool3d(check):
    _pool_test(check, "max", 3, 5)


@autotest()
def test_avg_pool1d(check):
    _pool_test(check, "avg", 1, 10)


@autotest()
def test_avg_pool2d(check):
    _pool_test(check, "avg", 2, 8)


@autotest()
def test_avg_pool3d(check):
    _pool_test(check, "avg", 3, 5)


# ------------------------------------------------------------------ random ops

@autotest()
def test_dropout(check):
    check(graphfront=lambda flow, x, rate: flow.nn.dropout(x, rate=rate),
          torch=lambda torch, x, rate: torch.nn.functional.dropout(x, p=rate, training=True),
          compare=dropout_statistics(x="x", rate="rate"),
          x=random_tensor(ndim=random(2, 4), dim0=random(4, 11), dim1=random(4, 11), dim2=random(4, 11),
                          low=-1, high=1),
          rate=random(0.05, 0.9).to(float))


@autotest()
def test_random_mask_like(check):
    check(graphfront=lambda flow, like, rate, seed: flow.nn.random_mask_like(like, rate, seed=seed),
          torch=lambda torch, like, rate, seed: (torch.rand(like.shape) >= rate).to(torch.int8),
          compare=mask_statistics(rate="rate"),
          like=random_tensor(ndim=random(2, 4), dim0=random(4, 11), dim1=random(4, 11), dim2=random(4, 11),
                             requires_grad=False),
          rate=random(0.0, 0.9).to(float), seed=random(0, 2 ** 31).to(int))


@autotest()
def test_dropout_statistics_generic(check):
    """dropout through the generic statistical comparison (zero fraction, mean, variance)."""
    check(graphfront=lambda flow, x, rate: flow.nn.dropout(x, rate=rate),
          torch=lambda torch, x, rate: torch.nn.functional.dropout(x, p=rate, training=True),
          compare="statistics",
          x=random_tensor(ndim=2, dim0=random(10, 20), dim1=random(10, 20), low=0.5, high=1.5),
          rate=random(0.1, 0.7).to(float))


# ------------------------------------------------------------------ matmul

@autotest()
def test_matmul(check):
    m, k, n = _dims(3)
    ta, tb = random_bool().value(), random_bool().value()
    check(graphfront=lambda flow, a, b, ta, tb, alpha: flow.matmul(a, b, transpose_a=ta, transpose_b=tb, alpha=alpha),
          torch=lambda torch, a, b, ta, tb, alpha: alpha * torch.matmul(a.T if ta else a, b.T if tb else b),
          a=_tensor([k, m] if ta else [m, k]), b=_tensor([n, k] if tb else [k, n]), ta=ta, tb=tb,
          alpha=oneof(1.0, random(-2.0, 2.0)))


@autotest()
def test_batch_matmul(check):
    batch = _dims(random(1, 3).to(int).value(), 1, 3)
    m, k, n = _dims(3, 1, 5)
    ta, tb = random_bool().value(), random_bool().value()
    check(graphfront=lambda flow, a, b, ta, tb, alpha: flow.matmul(a, b, transpose_a=ta, transpose_b=tb, alpha=alpha),
          torch=lambda torch, a, b, ta, tb, alpha: alpha * torch.matmul(a.transpose(-1, -2) if ta else a,
                                                                        b.transpose(-1, -2) if tb else b),
          a=_tensor(batch + ([k, m] if ta else [m, k])), b=_tensor(batch + ([n, k] if tb else [k, n])), ta=ta, tb=tb,
          alpha=oneof(1.0, random(-2.0, 2.0)))


# ------------------------------------------------------------------ softmax / cross entropy

@autotest()
def test_softmax(check):
    check(graphfront=lambda flow, x, axis=None: flow.nn.softmax(x, axis=axis),
          torch=lambda torch, x, axis=None: torch.softmax(x, dim=-1),
          x=random_tensor(low=-3, high=3), axis=oneof(-1, nothing()))


@autotest()
def test_sparse_softmax_cross_entropy(check):
    n, c = random(1, 7).to(int).value(), random(2, 7).to(int).value()
    check(graphfront=lambda flow, labels, logits: flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits),
          torch=lambda torch, labels, logits: torch.nn.functional.cross_entropy(logits, labels.long(),
                                                                                reduction="none"),
          logits=_tensor([n, c], -3, 3), labels=random_tensor(1, n, low=0, high=c, dtype=oneof(int, "int32").value()))


@autotest()
def test_sparse_softmax_cross_entropy_ops(check):
    """Both op types (plain and model-split ``_ms``) through user_op_builder, prob and out.
    As in OneFlow, the gradient flows from ``out`` only: ``prob`` is a by-product whose
    gradient the op's grad function drops (the torch side detaches it)."""
    n, c = random(1, 7).to(int).value(), random(2, 7).to(int).value()
    check(graphfront=lambda flow, op_type, logits, labels: _build(
              flow, op_type, {"prediction": logits, "label": labels}, {"depth": logits.shape[-1]}, ["prob", "out"]),
          torch=lambda torch, op_type, logits, labels: (torch.softmax(logits.detach(), -1),
                                                        torch.nn.functional.cross_entropy(
              logits, labels.long(), reduction="none")),
          op_type=oneof("sparse_softmax_cross_entropy", "sparse_softmax_cross_entropy_ms"),
          logits=_tensor([n, c], -3, 3), labels=random_tensor(1, n, low=0, high=c, dtype=int))


@autotest()
def test_fused_bias_add_sparse_softmax_cross_entropy(check):
    """graphfront's fusion of bias_add over the classes and the softmax cross entropy (its
    gradient op too, through ``out``): prediction of rank 2 or 3, as the unfused ops."""
    lead = _dims(random(1, 3).to(int).value(), 1, 5)
    c = random(2, 7).to(int).value()
    check(graphfront=lambda flow, logits, bias, labels: _build(
              flow, "fused_bias_add_sparse_softmax_cross_entropy",
              {"prediction": logits, "bias": bias, "label": labels}, {"depth": c}, ["prob", "out"]),
          torch=lambda torch, logits, bias, labels: (
              torch.softmax((logits + bias).detach(), -1),
              torch.nn.functional.cross_entropy((logits + bias).reshape(-1, c), labels.long().reshape(-1),
                                                reduction="none").reshape(labels.shape)),
          logits=_tensor(lead + [c], -3, 3), bias=_tensor([c], -1, 1),
          labels=_tensor(lead, low=0, high=c, dtype=int))


def _torch_combined_margin(torch, x, labels, m1, m2, m3):
    """cos(m1 * acos(x) + m2) - m3 at each row's label class, x elsewhere (rows whose label is
    outside [0, classes) unchanged)."""
    c = x.shape[1]
    valid = (labels >= 0) & (labels < c)
    col = torch.where(valid, labels.long(), 0)
    picked = x.gather(1, col[:, None])[:, 0]
    theta = torch.acos(torch.where(valid, picked, 0.0))
    hit = torch.nn.functional.one_hot(col, c).bool() & valid[:, None]
    return torch.where(hit, (torch.cos(theta * m1 + m2) - m3)[:, None], x)


@autotest()
def test_combined_margin_loss(check):
    n, c = random(1, 7).to(int).value(), random(2, 7).to(int).value()
    check(graphfront=lambda flow, x, labels, m1, m2, m3: flow.combined_margin_loss(x, labels, m1, m2, m3),
          torch=_torch_combined_margin,
          x=_tensor([n, c], -0.95, 0.95), labels=random_tensor(1, n, low=-1, high=c + 1, dtype=oneof(int, "int32").value()),
          m1=oneof(1.0, 0.3, 1.35), m2=oneof(0.0, 0.5), m3=oneof(0.0, 0.4))


@autotest()
def test_distributed_partial_fc_sample_of_every_class(check):
    """Every class occurs in the labels and is sampled: no random part is left, so the sample is
    the classes in order, each label maps to itself and the rows are the weight (gradient: the
    rows' gradient). The random part is checked in tests/test_partial_fc_sample.py."""
    c = random(2, 7).to(int).value()
    labels = np.concatenate([check.rng.permutation(c), check.rng.integers(0, c, 3)]).astype(np.int32)
    check(graphfront=lambda flow, w, labels: flow.distributed_partial_fc_sample(w, labels, c),
          torch=lambda torch, w, labels: (labels, torch.arange(c, dtype=labels.dtype), w * 1),
          w=_tensor([c, 3]), labels=constant(labels))


# ------------------------------------------------------------------ reshape family

def _reshaped(shape):
    """Another shape with the same element count (dims shuffled and merged), maybe with a -1."""
    dims = [shape[i] for i in random_axes_permutation(len(shape))]
    out = []
    for d in dims:
        if out and random_bool().value():
            out[-1] *= d
        else:
            out.append(d)
    if random_bool().value():
        out[random(0, len(out)).to(int).value()] = -1
    return out


@autotest()
def test_reshape(check):
    shape = _dims(random(1, 5).to(int).value())
    target = _reshaped(shape)
    check(graphfront=lambda flow, x, shape: flow.reshape(x, shape),
          torch=lambda torch, x, shape: x.reshape(shape),
          x=_tensor(shape), shape=target)


@autotest()
def test_reshape_like(check):
    shape = _dims(random(1, 5).to(int).value())
    target = _reshaped(shape)
    if -1 in target:
        target[target.index(-1)] = math.prod(shape) // -math.prod(target)
    check(graphfront=lambda flow, x, like: flow.reshape_like(x, like),
          torch=lambda torch, x, like: x.reshape(like.shape),
          x=_tensor(shape), like=_tensor(target, requires_grad=False) | _tensor(target))


@autotest()
def test_flatten(check):
    ndim = random(1, 5).to(int).value()
    start = random(0, ndim).to(int).value()
    end = random(start, ndim).to(int).value()
    end_arg = oneof(end, end - ndim).value()
    check(graphfront=lambda flow, x, start_dim, end_dim: flow.flatten(x, start_dim=start_dim, end_dim=end_dim),
          torch=lambda torch, x, start_dim, end_dim: torch.flatten(x, start_dim, end_dim),
          x=random_tensor(ndim, random(1, 6), low=-1, high=1), start_dim=start, end_dim=end_arg)


# ------------------------------------------------------------------ compositions the fusion passes rewrite
# (even draws run with the cleanup passes, odd draws without: both forms are compared with torch)

@autotest()
def test_bias_add_relu(check):
    shape = _dims(random(2, 5).to(int).value())
    check(graphfront=lambda flow, x, b: flow.nn.relu(flow.nn.bias_add(x, b)),
          torch=lambda torch, x, b: torch.relu(x + b.reshape([-1] + [1] * (x.dim() - 2))),
          x=_tensor(shape), b=_tensor([shape[1]]))


@autotest()
def test_broadcast_matmul(check):
    """rank(a) > 2, rank(b) == 2: op broadcast_matmul; grads broadcast_matmul / broadcast_matmul_grad_b."""
    lead = _dims(random(1, 3).to(int).value(), 1, 4)
    k, n = _dims(2, 1, 5)
    tb = random_bool().value()
    check(graphfront=lambda flow, a, b, tb, alpha: flow.matmul(a, b, transpose_b=tb, alpha=alpha),
          torch=lambda torch, a, b, tb, alpha: alpha * torch.matmul(a, b.T if tb else b),
          a=_tensor(lead + [k]), b=_tensor([n, k] if tb else [k, n]), tb=tb,
          alpha=oneof(1.0, random(-2.0, 2.0)))


@autotest()
def test_matmul_bias_add(check):
    m, k, n = _dims(3)
    tb = random_bool().value()
    check(graphfront=lambda flow, a, w, b, tb: flow.nn.bias_add(flow.matmul(a, w, transpose_b=tb), b),
          torch=lambda torch, a, w, b, tb: torch.matmul(a, w.T if tb else w) + b,
          a=_tensor([m, k]), w=_tensor([n, k] if tb else [k, n]), b=_tensor([n]), tb=tb)


@autotest()
def test_scalar_mul_add(check):
    """x * s + t: one fused_scalar_mul_add with the cleanup passes."""
    check(graphfront=lambda flow, x, s, t: x * s + t, torch=lambda torch, x, s, t: x * s + t,
          x=random_tensor(low=-2, high=2), s=random(-2.0, 2.0), t=random(-2.0, 2.0))


@autotest()
def test_scalar_chains(check):
    check(graphfront=lambda flow, x, s, t, form: _scalar_chain(x, s, t, form),
          torch=lambda torch, x, s, t, form: _scalar_chain(x, s, t, form),
          x=random_tensor(low=-2, high=2), s=random(-2.0, 2.0), t=random(-2.0, 2.0) | random(-3, 3).to(int),
          form=oneof("x*s+t", "x*s*t", "x+s+t"))


def _scalar_chain(x, s, t, form):
    if form == "x*s+t":
        return x * s + t
    if form == "x*s*t":
        return x * s * t
    return x + s + t


@pytest.mark.slow
@autotest()
def test_conv_bias_relu_max_pool(check):
    """A LeNet block: conv2d -> bias_add -> relu -> max_pool2d (channels_first, 2x2 windows)."""
    cin, cout = random(1, 4).to(int).value(), random(1, 4).to(int).value()
    k = random(1, 4).to(int).value()
    size = random(k + 1, 9).to(int).value()
    conv = size - k + 1
    padding = oneof("VALID", "SAME").value()
    if padding == "VALID":
        pads, outs = [(0, 0)] * 2, [conv // 2] * 2
    else:
        pads, outs = [(conv % 2, 0)] * 2, [-(-conv // 2)] * 2  # SAME = SAME_LOWER: the odd pad goes before
    check(graphfront=lambda flow, x, w, b, padding, **_: flow.nn.max_pool2d(
              flow.nn.relu(flow.nn.bias_add(flow.nn.conv2d(x, w, 1, "VALID"), b)), 2, 2, padding),
          torch=lambda torch, x, w, b, pads, outs, **_: tf_pool_reference(
              torch, torch.relu(torch.nn.functional.conv2d(x, w, b)), "max", [2, 2], [2, 2], pads, outs, False),
          x=_tensor([random(1, 3).to(int).value(), cin, size, size]), w=_tensor([cout, cin, k, k]),
          b=_tensor([cout]), padding=padding, pads=pads, outs=outs)
