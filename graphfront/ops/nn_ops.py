"""Neural-network ops: convolution, bias_add, TF-style pooling, dropout, matmul,
softmax and sparse softmax cross entropy (OneFlow v0.6.0 ``oneflow/user/ops/conv_op.cpp``,
``bias_add_op.cpp``, ``pool_op.cpp``, ``dropout_op.cpp``, ``matmul_op.cpp``, ``softmax_op.cpp``,
``sparse_softmax_cross_entropy_op.cpp``).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import (bad_labels, label_checks, label_error, like, norm_axis, raising_bad_ids, same_dtype,
                                   vjp)
from graphfront.ops import common, onnx_rules, xla_rules
from graphfront.ops.onnx_rules import int64s, neg, pick_last
from graphfront.ops.loss_ops import at_local_class, class_offset, local_class_ids
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

_aten = torch.ops.aten

# ------------------------------------------------------------------ convolution

CONV_ATTRS = {"filters": ("int32", 0), "padding_before": "list_int32", "data_format": "string",
              "kernel_size": "list_int32", "strides": "list_int32", "dilation_rate": "list_int32",
              "groups": ("int32", 1)}
CONV_GRAD_ATTRS = {"num_spatial_dims": ("int32", 0), "padding_before": "list_int32", "data_format": "string",
                   "kernel_size": "list_int32", "strides": "list_int32", "dilation_rate": "list_int32",
                   "groups": ("int32", 0)}


def _check_conv_attrs(ctx, n):
    fmt = ctx.attr("data_format")
    ctx.check(fmt in ("channels_first", "channels_last"),
              f"attr 'data_format' must be 'channels_first' or 'channels_last', received {fmt!r}")
    for a in ("padding_before", "kernel_size", "strides", "dilation_rate"):
        ctx.check(len(ctx.attr(a)) == n, f"attr '{a}' needs {n} entries, received {ctx.attr(a)}")
    for a in ("kernel_size", "strides", "dilation_rate"):
        ctx.check(all(v >= 1 for v in ctx.attr(a)), f"attr '{a}' entries must be >= 1, received {ctx.attr(a)}")
    return fmt == "channels_first"


def conv_out_size(size, k, pad, stride, dilation):
    return (size + 2 * pad - ((k - 1) * dilation + 1) + stride) // stride


def _conv_infer(n):
    def infer(ctx):
        first = _check_conv_attrs(ctx, n)
        x, w = ctx.input("in"), ctx.input("weight")
        ctx.check(len(x.shape) == n + 2, f"input 'in' expected rank {n + 2}, received shape {x.shape}")
        filters, groups = ctx.attr("filters"), ctx.attr("groups")
        ctx.check(groups > 0 and filters % groups == 0 and groups <= filters,
                  f"attrs filters={filters}, groups={groups}: groups must be > 0 and divide filters")
        cin = x.shape[1] if first else x.shape[-1]
        ctx.check(cin % groups == 0, f"input 'in' has {cin} channels, not divisible by groups={groups}")
        k = tuple(ctx.attr("kernel_size"))
        expected = (filters, cin // groups) + k if first else (filters,) + k + (cin // groups,)
        ctx.check(w.shape == expected, f"input 'weight' expected shape {expected} for input 'in' of shape "
                                       f"{x.shape}, received {w.shape}")
        same_dtype(ctx, "in", "weight")
        if ctx.has_input("bias"):
            ctx.check(ctx.input("bias").shape == (filters,),
                      f"input 'bias' expected shape {(filters,)}, received {ctx.input('bias').shape}")
        spatial = x.shape[2:] if first else x.shape[1:-1]
        out = tuple(conv_out_size(s, kk, p, st, d) for s, kk, p, st, d in
                    zip(spatial, k, ctx.attr("padding_before"), ctx.attr("strides"), ctx.attr("dilation_rate")))
        ctx.check(all(o > 0 for o in out), f"output spatial size {out} is not positive for input 'in' of "
                                           f"shape {x.shape} and kernel_size {k}")
        shape = (x.shape[0], filters) + out if first else (x.shape[0],) + out + (filters,)
        ctx.set_output("out", shape, x.dtype)
    return infer


def _to_first(t, n):
    """channels_last -> channels_first (for tensors of rank n + 2)."""
    return t.permute(0, n + 1, *range(1, n + 1))


def _to_last(t, n):
    return t.permute(0, *range(2, n + 2), 1)


def torch_dilation(k):
    """The conv's ``dilation_rate`` with 1 on kernel dims of size 1, where dilation changes
    nothing (so torch never takes a dilated path for them)."""
    return [1 if size == 1 else d for size, d in zip(k.attr("kernel_size"), k.attr("dilation_rate"))]


def dense(t):
    """``t`` with the standard strides of a contiguous channels_first tensor, on the CPU.

    torch 2.13's CPU ``convolution`` / ``convolution_backward`` read and write out of
    bounds for channels_last-strided inputs with 1x1 kernels and strides > 1 (heap
    corruption, wrong and run-to-run different gradients). graphfront's channels_last
    layout produces such strides by permuting, and ``Tensor.contiguous()`` is not enough:
    a permuted tensor whose channel (or any other) dim has size 1 already counts as
    contiguous and keeps its channels_last strides, which torch then reads as
    channels_last (an NHWC input with one channel is the common case). A contiguous
    tensor gets the standard strides as a view (no copy: a size-1 dim's stride addresses
    nothing); any other is copied. CUDA tensors are left alone. Kernels apply it through
    :func:`layout_for`.
    """
    if t.device.type != "cpu":
        return t
    if not t.is_contiguous():
        return t.contiguous()
    standard = _standard_strides(t.shape)
    return t if t.stride() == standard else t.as_strided(t.shape, standard)  # (its storage offset kept)


def _standard_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _as_is(t):
    return t


def channels_last(t):
    """``t`` (rank 4 or 5) with channels-last strides: a view where it is contiguous in that
    layout already (a size-1 dim's stride addresses nothing), else a copy."""
    fmt = common.CHANNELS_LAST[t.dim()]
    if not t.is_contiguous(memory_format=fmt):
        return t.contiguous(memory_format=fmt)
    shape = (t.shape[0],) + tuple(t.shape[2:]) + (t.shape[1],)
    perm = _standard_strides(shape)
    strides = (perm[0], perm[-1]) + perm[1:-1]
    return t if t.stride() == strides else t.as_strided(t.shape, strides)


def layout_for(k):
    """:func:`dense` for convolutions with a size-1 kernel dim of stride > 1 (torch's broken
    path), else the identity (other convolutions keep torch's own layout choice)."""
    risky = any(size == 1 and s > 1 for size, s in zip(k.attr("kernel_size"), k.attr("strides")))
    return dense if risky else _as_is


class ConvRoute:
    """How conv op ``k``'s kernels hand its tensors to torch's convolution.

    On the CPU, along each kernel dim of size 1 with stride ``s > 1`` and no padding (a
    ResNet's strided 1x1 shortcut), output position ``o`` reads input position ``o * s``
    alone: the convolution of ``x`` is the one of :meth:`view` (every ``s``-th position
    there, a strided view) with stride 1 there (:attr:`stride`). That keeps torch off its
    broken path (:func:`dense`) with the input in its own layout: torch copies only the
    positions read (channels-last stays channels-last) instead of all of ``x`` to
    channels-first, several times faster for ResNet-50's shortcuts. A one-channel input
    whose output has a size-1 dim with stride > 1 gets :func:`dense` (torch's channels-last
    path computes garbage there). Elsewhere the convolution is called as it is, through
    :func:`layout_for`'s :attr:`dense`.

    A channels_first float32 2-D convolution on the CPU of an input with one channel
    (LeNet's first layer on its images) runs channels-last (:attr:`last`) where oneDNN runs
    it (not a single small image): such an input and its filter are contiguous in both
    layouts, and torch would pick its channels_first path. Their channels-last strides are
    views, no copy; the output comes out channels-last, the layout of the CPU max pool and
    convolutions after it. LeNet's first layer (5x5 SAME over 100x1x28x28 images, a 2-core
    x86-64 VM): the filter gradient 2.8 -> 1.6 ms and the 2.4 ms copy of the output into
    the max pool's layout gone, for a forward 2.5 -> 3.0 ms.

    Attributes:
        stride: the strides to call torch with (a list of ints).
        dense: :func:`dense`, :func:`channels_last` or the identity, for every tensor handed
            to torch.
        last: whether :attr:`dense` is :func:`channels_last`.
    """

    def __init__(self, k, x):
        """``k``: the conv op's kernel context; ``x``: the TensorDesc of its input (or of the
        input whose gradient it computes)."""
        sizes, strides, pads = k.attr("kernel_size"), k.attr("strides"), k.attr("padding_before")
        steps = [s if size == 1 and s > 1 else 1 for size, s in zip(sizes, strides)]
        routed = k.device.type == "cpu" and any(step > 1 for step in steps) and \
            not any(p and step > 1 for p, step in zip(pads, steps))
        self.stride = [1 if step > 1 else s for s, step in zip(strides, steps)] if routed else list(strides)
        self._index = (slice(None), slice(None)) + tuple(slice(None, None, step) for step in steps) if routed \
            else None
        first = k.attr("data_format") == "channels_first"
        cin, spatial = (x.shape[1], x.shape[2:]) if first else (x.shape[-1], x.shape[1:-1])
        # torch 2.13's channels-last CPU convolution of a one-channel input writes garbage
        # where an output dim of size 1 has stride > 1 (an NHWC input with one channel)
        single = cin == 1 and any(st > 1 and conv_out_size(size, kk, p, st, d) == 1 for size, kk, p, st, d in
                                  zip(spatial, sizes, pads, self.stride, k.attr("dilation_rate")))
        self.dense = dense if single else _as_is if routed else layout_for(k)
        # (torch's rule for oneDNN over its direct kernel, faster for a single small image:
        # ConvParams::use_mkldnn in aten/src/ATen/native/Convolution.cpp)
        onednn = x.shape[0] > 1 or min(sizes) > 3 or math.prod(x.shape) > 20480
        self.last = k.device.type == "cpu" and not routed and self.dense is _as_is and len(sizes) == 2 and \
            first and cin == 1 and x.dtype.torch == torch.float32 and onednn
        if self.last:
            self.dense = channels_last

    def view(self, x):
        """The positions of ``x`` (channels_first, rank n + 2) the convolution reads."""
        return x if self._index is None else x[self._index]

    def scatter(self, dx_read, x_like):
        """The data gradient shaped (and laid out) as ``x_like`` from ``dx_read``, the one of
        :meth:`view`'s positions: zero at the positions never read."""
        if self._index is None:
            return dx_read
        dx = torch.zeros_like(x_like)
        dx[self._index] = dx_read
        return dx


def _conv_kernel(n):
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]

    def make(k):
        route = ConvRoute(k, k.input("in"))
        args = dict(stride=route.stride, padding=k.attr("padding_before"), dilation=torch_dilation(k),
                    groups=k.attr("groups"))
        dense, read = route.dense, route.view
        if k.attr("data_format") == "channels_first":
            return lambda x, w, b, bm: conv(dense(read(x)), dense(w), b, **args)
        return lambda x, w, b, bm: _to_last(conv(dense(read(_to_first(x, n))), dense(_to_first(w, n)), b, **args), n)
    return make


def _conv_grad(n):
    def grad(g):
        attrs = {a: g.attr(a) for a in ("padding_before", "data_format", "kernel_size", "strides",
                                          "dilation_rate", "groups")}
        attrs["num_spatial_dims"] = n
        dy = g.dout("out")
        if g.has_input("bias") and g.needs("bias"):
            g.set_grad("bias", g.emit("conv_bias_grad", {"dy": dy},
                                      {"data_format": attrs["data_format"], "num_spatial_dims": n},
                                      name=f"System-AutoGrad-{g.op_name}-BiasGrad"))
        if g.needs("weight"):
            g.set_grad("weight", g.emit("conv_filter_grad", {"dy": dy, "x": g.input("in")}, attrs,
                                        name=f"System-AutoGrad-{g.op_name}-FilterGrad"))
        if g.needs("in"):
            g.set_grad("in", g.emit("conv_data_grad", {"dy": dy, "filter": g.input("weight"),
                                                       "x_like": g.input("in")}, attrs,
                                    name=f"System-AutoGrad-{g.op_name}-DataGrad"))
    return grad


def _conv_onnx(c):
    """Conv; a channels_last op (weight (O, *kernel, I)) runs between Transposes to and from
    NCHW, its weight transposed to (O, I, *kernel)."""
    if c.has_input("bias_multiplier"):
        c.fail("input 'bias_multiplier' cannot be exported")
    pads, n = list(c.attr("padding_before")), len(c.attr("kernel_size"))
    w = c.input("weight")
    if c.attr("data_format") != "channels_first":
        w = onnx_rules.to_channels_first(c, w, n)

    def build(c, x, outs):
        c.node("Conv", [x, w, c.input("bias")], outs, kernel_shape=list(c.attr("kernel_size")),
               strides=list(c.attr("strides")), dilations=list(c.attr("dilation_rate")), pads=pads + pads,
               group=c.attr("groups"))
    onnx_rules.channels_first_io(c, n, "in", ["out"], build)


def _conv_dimension_numbers_xla(n, channels_first=True):
    """``lax.conv_general_dilated`` layout names of a rank ``n + 2`` convolution: input,
    weight and output ``NC<spatial>``/``OI<spatial>`` or ``N<spatial>C``/``O<spatial>I``."""
    spatial = "DHW"[3 - n:]
    if channels_first:
        return ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    return ("N" + spatial + "C", "O" + spatial + "I", "N" + spatial + "C")


def conv_xla_fn(k, n):
    """``(x, w) -> out`` of a convolution with this op's attrs, over jax arrays in the
    op's data_format (``lax.conv_general_dilated``; symmetric ``padding_before`` pads as
    the torch kernels). Shared by the conv ops and their grads' XLA rules."""
    lax = xla_rules.lax()
    dn = _conv_dimension_numbers_xla(n, k.attr("data_format") == "channels_first")
    args = dict(window_strides=tuple(k.attr("strides")), padding=[(p, p) for p in k.attr("padding_before")],
                rhs_dilation=tuple(k.attr("dilation_rate")), dimension_numbers=dn,
                feature_group_count=k.attr("groups"))
    return lambda x, w: lax.conv_general_dilated(x, w, **args)


def _channel_view(k, n):
    """Shape viewing a per-channel vector along the channel axis of a rank n + 2 blob."""
    return (1, -1) + (1,) * n if k.attr("data_format") == "channels_first" else (1,) * (n + 1) + (-1,)


def _conv_xla(n):
    def make(k):
        conv, view = conv_xla_fn(k, n), _channel_view(k, n)
        return lambda x, w, b, bm: conv(x, w) if b is None else conv(x, w) + b.reshape(view)
    return make


for _n in (1, 2, 3):
    op(f"conv{_n}d", inputs=["in", "weight", "bias?", "bias_multiplier?"], outputs=["out"], attrs=CONV_ATTRS,
       infer=_conv_infer(_n), kernel=_conv_kernel(_n), grad=_conv_grad(_n), sbp=_sbp.conv("in", "weight", "out"),
       onnx=_conv_onnx, xla=_conv_xla(_n), amp="white" if _n == 2 else None, qat="int8" if _n == 2 else None)


def _conv_backward_args(k):
    n = k.attr("num_spatial_dims")
    return n, dict(padding=k.attr("padding_before"), dilation=torch_dilation(k), transposed=False,
                   output_padding=[0] * n, groups=k.attr("groups"))


def _conv_data_grad_kernel(k):
    n, a = _conv_backward_args(k)
    first = k.attr("data_format") == "channels_first"
    route = ConvRoute(k, k.input("x_like"))
    dense = route.dense

    def data_grad(dy, w, x_like, add_to):
        if not first:
            dy, w, x_like = _to_first(dy, n), _to_first(w, n), _to_first(x_like, n)
        dx = _aten.convolution_backward(dense(dy), dense(route.view(x_like)), dense(w), None, route.stride,
                                        a["padding"], a["dilation"], False, a["output_padding"], a["groups"],
                                        [True, False, False])[0]
        dx = route.scatter(dx, x_like)
        dx = dx if first else _to_last(dx, n)
        return dx if add_to is None else dx + add_to
    return data_grad


def _conv_filter_grad_kernel(k):
    n, a = _conv_backward_args(k)
    first = k.attr("data_format") == "channels_first"
    # (only its shape, dtype and memory layout matter: channels-last, its filter's, for an
    # NHWC job, so the gradient comes out laid out as the variable)
    placeholder = torch.empty(k.output("filter_diff").shape, dtype=k.input("x").dtype.torch, device=k.device)
    route = ConvRoute(k, k.input("x"))
    dense = route.dense
    placeholder = dense(placeholder if first else _to_first(placeholder, n))

    def filter_grad(dy, x):
        if not first:
            dy, x = _to_first(dy, n), _to_first(x, n)
        dw = _aten.convolution_backward(dense(dy), dense(route.view(x)), placeholder, None, route.stride, a["padding"],
                                        a["dilation"], False, a["output_padding"], a["groups"], [False, True, False])[1]
        return dw if first else _to_last(dw, n)
    return filter_grad


def _conv_grad_infer_data(ctx):
    n = ctx.attr("num_spatial_dims")
    ctx.check(1 <= n <= 3, f"attr 'num_spatial_dims' must be 1..3, received {n}")
    x = ctx.input("x_like")
    ctx.check(len(x.shape) == n + 2 and len(ctx.input("dy").shape) == n + 2,
              f"inputs 'dy' and 'x_like' must have rank {n + 2}")
    ctx.set_output("dx", x.shape, x.dtype)


def _conv_grad_infer_filter(ctx):
    n = ctx.attr("num_spatial_dims")
    dy, x = ctx.input("dy"), ctx.input("x")
    k, groups = tuple(ctx.attr("kernel_size")), ctx.attr("groups")
    if ctx.attr("data_format") == "channels_first":
        shape = (dy.shape[1], x.shape[1] // groups) + k
    else:
        shape = (dy.shape[-1],) + k + (x.shape[-1] // groups,)
    ctx.check(len(k) == n, f"attr 'kernel_size' needs {n} entries, received {list(k)}")
    ctx.set_output("filter_diff", shape, x.dtype)


def _conv_bias_grad_infer(ctx):
    dy = ctx.input("dy")
    c = dy.shape[1] if ctx.attr("data_format") == "channels_first" else dy.shape[-1]
    ctx.set_output("bias_diff", (c,), dy.dtype)


def _conv_bias_grad_kernel(k):
    n = len(k.input("dy").shape)
    axes = [0] + list(range(2, n)) if k.attr("data_format") == "channels_first" else list(range(n - 1))
    return lambda dy: dy.sum(dim=axes)


def _conv_data_grad_xla(k):
    import jax
    conv = conv_xla_fn(k, k.attr("num_spatial_dims"))

    def data_grad(dy, w, x_like, add_to):
        dx = jax.vjp(lambda x: conv(x, w), x_like)[1](dy)[0]
        return dx if add_to is None else dx + add_to
    return data_grad


def _conv_filter_grad_xla(k):
    import jax
    conv = conv_xla_fn(k, k.attr("num_spatial_dims"))
    wshape, dtype = k.output("filter_diff").shape, k.output("filter_diff").dtype.np

    def filter_grad(dy, x):  # the filter's value does not enter its gradient (conv is linear in it)
        return jax.vjp(lambda w: conv(x, w), xla_rules.jnp().zeros(wshape, dtype))[1](dy)[0]
    return filter_grad


def _conv_bias_grad_xla(k):
    n = len(k.input("dy").shape)
    axes = (0,) + tuple(range(2, n)) if k.attr("data_format") == "channels_first" else tuple(range(n - 1))
    return lambda dy: dy.sum(axis=axes)


def _first_onnx(c, arg, n):
    """Input ``arg`` in channels_first layout (transposed from channels_last when the op's data_format is)."""
    x = c.input(arg)
    return x if c.attr("data_format") == "channels_first" else onnx_rules.to_channels_first(c, x, n)


def _to_data_format_onnx(c, x, n, out):
    """The channels_first ``x`` (a blob, or a filter: the same transposition) written to ``out`` in the op's
    data_format."""
    if c.attr("data_format") == "channels_first":
        c.node("Identity", [x], [out])
    else:
        c.node("Transpose", [x], [out], perm=[0] + list(range(2, n + 2)) + [1])


def _conv_geometry(c):
    return [list(c.attr(a)) for a in ("kernel_size", "strides", "padding_before", "dilation_rate")]


def _spatial(c, desc):
    return desc.shape[2:] if c.attr("data_format") == "channels_first" else desc.shape[1:-1]


def _channels(c, desc):
    return desc.shape[1] if c.attr("data_format") == "channels_first" else desc.shape[-1]


def conv_data_grad_onnx(c, dy, w, dy_spatial, x_spatial):
    """The channels_first dx of a conv (its adjoint in x): ConvTranspose of the channels_first ``dy`` by
    the filter ``w``, with the output padding that gives ``x_spatial``."""
    k, s, p, d = _conv_geometry(c)
    out_pad = [x - ((i - 1) * st - 2 * pp + dd * (kk - 1) + 1)
               for x, i, st, pp, dd, kk in zip(x_spatial, dy_spatial, s, p, d, k)]
    return c.node("ConvTranspose", [dy, w], kernel_shape=k, strides=s, dilations=d, pads=p + p,
                  output_padding=out_pad, group=c.attr("groups"))


def conv_filter_grad_onnx(c, x, dy, cin, cout):
    """The channels_first filter gradient of a conv from channels_first ``x`` (``cin`` channels) and ``dy``
    (``cout``): per group, the correlation of x (channels as the batch) with dy (its batch as input
    channels), a Conv with the forward's dilation as strides and its strides as dilations, cropped to the
    kernel size."""
    k, s, p, d = _conv_geometry(c)
    n, groups = len(k), c.attr("groups")
    swap = [1, 0] + list(range(2, n + 2))

    def channels(t, size, g):
        if groups == 1:
            return t
        return c.node("Slice", [t, c.const(int64s([g * size // groups])), c.const(int64s([(g + 1) * size // groups])),
                                c.const(int64s([1]))])
    parts = []
    for g in range(groups):
        corr = c.node("Conv", [c.node("Transpose", [channels(x, cin, g)], perm=swap),
                               c.node("Transpose", [channels(dy, cout, g)], perm=swap)],
                      strides=d, dilations=s, pads=p + p)
        corr = c.node("Slice", [corr, c.const(int64s([0] * n)), c.const(int64s(k)), c.const(int64s(range(2, n + 2)))])
        parts.append(c.node("Transpose", [corr], perm=swap))   # (out channels, in channels / groups, *k)
    return parts[0] if groups == 1 else c.node("Concat", parts, axis=0)


def _conv_data_grad_onnx(c):
    """:func:`conv_data_grad_onnx` in the op's data_format, then + _add_to_output."""
    n = c.attr("num_spatial_dims")
    dx = conv_data_grad_onnx(c, _first_onnx(c, "dy", n), _first_onnx(c, "filter", n),
                             _spatial(c, c.input_desc("dy")), _spatial(c, c.input_desc("x_like")))
    add_to = c.input("_add_to_output")
    if add_to is None:
        _to_data_format_onnx(c, dx, n, c.output("dx"))
    else:
        tmp = c.tmp("dx")
        _to_data_format_onnx(c, dx, n, tmp)
        c.node("Add", [tmp, add_to], [c.output("dx")])


def _conv_filter_grad_onnx(c):
    """:func:`conv_filter_grad_onnx` in the op's data_format."""
    n = c.attr("num_spatial_dims")
    w = conv_filter_grad_onnx(c, _first_onnx(c, "x", n), _first_onnx(c, "dy", n), _channels(c, c.input_desc("x")),
                              _channels(c, c.input_desc("dy")))
    _to_data_format_onnx(c, w, n, c.output("filter_diff"))


def _conv_bias_grad_onnx(c):
    """The sum of dy over every axis but the channel one."""
    n = len(c.input_desc("dy").shape)
    axes = [0] + list(range(2, n)) if c.attr("data_format") == "channels_first" else list(range(n - 1))
    onnx_rules.reduce_node(c, "ReduceSum", c.input("dy"), axes, 0, c.output("bias_diff"))


op("conv_data_grad", inputs=["dy", "filter", "x_like", "_add_to_output?"], outputs=["dx"], attrs=CONV_GRAD_ATTRS,
   infer=_conv_grad_infer_data, kernel=_conv_data_grad_kernel, sbp=_sbp.conv("dy", "filter", "dx"),
   xla=_conv_data_grad_xla, onnx=_conv_data_grad_onnx)
op("conv_filter_grad", inputs=["dy", "x"], outputs=["filter_diff"], attrs=CONV_GRAD_ATTRS,
   infer=_conv_grad_infer_filter, kernel=_conv_filter_grad_kernel,
   sbp=_sbp.conv("dy", None, None, weight_grads=("filter_diff",)), xla=_conv_filter_grad_xla,
   onnx=_conv_filter_grad_onnx)
op("conv_bias_grad", inputs=["dy"], outputs=["bias_diff"],
   attrs={"data_format": "string", "num_spatial_dims": ("int32", 0)},
   infer=_conv_bias_grad_infer, kernel=_conv_bias_grad_kernel, sbp=_sbp.conv("dy", None, None, weight_grads=("bias_diff",)),
   xla=_conv_bias_grad_xla, onnx=_conv_bias_grad_onnx)


# ------------------------------------------------------------------ bias_add

def bias_add_infer(ctx):
    """Inference of ``bias_add`` (and of the fused ops that add a bias the same way)."""
    a, b = ctx.input("a"), ctx.input("b")
    axis = ctx.attr("axis")
    ctx.check(0 <= axis < len(a.shape), f"attr 'axis' {axis} is out of range for input 'a' of shape {a.shape}")
    ctx.check(len(b.shape) == 1 and b.shape[0] == a.shape[axis],
              f"input 'b' expected shape {(a.shape[axis],)} (dim {axis} of input 'a' {a.shape}), received {b.shape}")
    same_dtype(ctx, "a", "b")
    ctx.set_output("out", a.shape, a.dtype)


def _bias_add_kernel(k):
    ndim = len(k.input("a").shape)
    axis = k.attr("axis")
    if axis == ndim - 1:
        return torch.add
    view = [1] * ndim
    view[axis] = -1
    return lambda a, b: a + b.view(view)


def _bias_add_grad(g):
    if g.needs("a"):
        g.set_grad("a", g.dout("out"))
    if g.needs("b"):
        ndim = len(g.desc(g.input("a")).shape)
        axes = [i for i in range(ndim) if i != g.attr("axis")]
        g.set_grad("b", g.emit("reduce_sum", {"input_tensor": g.dout("out")}, {"axis": axes, "keepdims": False},
                               name=f"{g.op_name}_grad"))


def _bias_add_onnx(c):
    ndim, axis = len(c.input_desc("a").shape), c.attr("axis")
    b = c.input("b")
    if axis != ndim - 1:
        shape = [1] * ndim
        shape[axis] = -1
        b = c.node("Reshape", [b, c.const(shape, "int64")])
    c.node("Add", [c.input("a"), b], [c.output("out")])


def _bias_add_xla(k):
    view = [1] * len(k.input("a").shape)
    view[k.attr("axis")] = -1
    return lambda a, b: a + b.reshape(view)


op("bias_add", inputs=["a", "b"], outputs=["out"], attrs={"axis": ("int32", 0)}, infer=bias_add_infer,
   kernel=_bias_add_kernel, grad=_bias_add_grad, sbp=_sbp.bias_add, onnx=_bias_add_onnx, xla=_bias_add_xla, amp="gray")


# ------------------------------------------------------------------ TF-style pooling

POOL_ATTRS = {"padding": "string", "padding_before": "list_int32", "padding_after": "list_int32",
              "data_format": "string", "pool_size": "list_int32", "strides": "list_int32", "ceil_mode": "bool"}


def pool_geometry(spatial, attrs):
    """Output sizes and (before, after) pads per spatial dim of a ``tf_*_pool`` op.

    Rules of OneFlow's TF-style pooling: ``valid`` -> ``(n - k + s) // s``;
    ``same_lower``/``same_upper`` -> ``ceil(n / s)`` with the needed pad split, the
    larger half before for ``same_lower``; ``customized`` uses the attr pads and
    ``ceil_mode``. Pads returned here make a floor-mode pool give exactly those sizes.
    """
    padding = attrs["padding"]
    outs, pads = [], []
    for i, n in enumerate(spatial):
        k, s = attrs["pool_size"][i], attrs["strides"][i]
        if padding == "valid":
            out, before, after = (n - k + s) // s, 0, 0
        elif padding in ("same_lower", "same_upper"):
            out = -(-n // s)
            total = max((out - 1) * s + k - n, 0)
            before = (total + 1) // 2 if padding == "same_lower" else total // 2
            after = total - before
        elif padding == "customized":
            before, after = attrs["padding_before"][i], attrs["padding_after"][i]
            out = (n + before + after - k + s + (s - 1 if attrs["ceil_mode"] else 0)) // s
        else:
            raise ValueError(f"attr 'padding' must be valid, same_lower, same_upper or customized, "
                             f"received {padding!r}")
        # extend the trailing pad so that a floor-mode window count equals `out`
        after = max(after, (out - 1) * s + k - n - before)
        outs.append(out)
        pads.append((before, after))
    return outs, pads


def _pool_infer(n):
    def infer(ctx):
        x = ctx.input("x")
        fmt = ctx.attr("data_format")
        ctx.check(fmt in ("channels_first", "channels_last"),
                  f"attr 'data_format' must be 'channels_first' or 'channels_last', received {fmt!r}")
        ctx.check(len(x.shape) == n + 2, f"input 'x' expected rank {n + 2}, received shape {x.shape}")
        for a in ("pool_size", "strides"):
            ctx.check(len(ctx.attr(a)) == n and all(v > 0 for v in ctx.attr(a)),
                      f"attr '{a}' needs {n} positive entries, received {ctx.attr(a)}")
        first = fmt == "channels_first"
        spatial = x.shape[2:] if first else x.shape[1:-1]
        outs, _ = pool_geometry(spatial, ctx.attrs)
        ctx.check(all(o > 0 for o in outs), f"pooling window {ctx.attr('pool_size')} does not fit input 'x' "
                                            f"of shape {x.shape}")
        shape = x.shape[:2] + tuple(outs) if first else (x.shape[0],) + tuple(outs) + (x.shape[-1],)
        ctx.set_output("y", shape, x.dtype)
    return infer


def _pool_fn(kind, n, k):
    """A channels_first pooling function with explicit pads, per OneFlow's semantics."""
    first = k.attr("data_format") == "channels_first"
    x_shape = k.input("x").shape
    spatial = x_shape[2:] if first else x_shape[1:-1]
    _, pads = pool_geometry(spatial, k.attrs)
    flat = [p for pair in reversed(pads) for p in pair]
    padded = any(flat)
    size, stride = k.attr("pool_size"), k.attr("strides")
    if kind == "max":
        pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]

        def fn(x):
            if padded:
                x = F.pad(x, flat, value=-math.inf)
            return pool(x, size, stride)
    else:
        pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]

        def fn(x):
            if not padded:
                return pool(x, size, stride)
            # average over the real (unpadded) elements of each window
            ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
            return pool(F.pad(x, flat), size, stride) / pool(F.pad(ones, flat), size, stride)

    if first:
        return fn
    return lambda x: _to_last(fn(_to_first(x, n)), n)


def _pool_kernel(kind, n):
    return lambda k: _pool_fn(kind, n, k)


def _pool_grad_kernel(kind, n):
    def make(k):
        fn = _pool_fn(kind, n, k)

        return lambda x, y, dy: vjp(fn, x, dy)
    return make


def _pool_onnx(onnx_type):
    """MaxPool / AveragePool (padding not counted); channels_last between Transposes."""
    def convert(c):
        shape, n = c.input_desc("x").shape, len(c.attr("pool_size"))
        spatial = shape[2:] if c.attr("data_format") == "channels_first" else shape[1:-1]
        _, pads = pool_geometry(spatial, c.attrs)
        extra = {"count_include_pad": 0} if onnx_type == "AveragePool" else {}

        def build(c, x, outs):
            c.node(onnx_type, [x], outs, kernel_shape=list(c.attr("pool_size")), strides=list(c.attr("strides")),
                   pads=[p[0] for p in pads] + [p[1] for p in pads], **extra)
        onnx_rules.channels_first_io(c, n, "x", ["y"], build)
    return convert


def pool_xla_fn(kind, n, k):
    """The pooling of a ``tf_*_pool`` op over a jax array in the op's data_format
    (``lax.reduce_window`` with the pads of :func:`pool_geometry`; an average counts only
    the unpadded elements of each window, as the torch kernel)."""
    lax, jnp = xla_rules.lax(), xla_rules.jnp()
    first = k.attr("data_format") == "channels_first"
    x_shape = k.input("x").shape
    spatial = x_shape[2:] if first else x_shape[1:-1]
    outs, pads = pool_geometry(spatial, k.attrs)
    size, stride = tuple(k.attr("pool_size")), tuple(k.attr("strides"))
    if first:
        window, strides, padding = (1, 1) + size, (1, 1) + stride, [(0, 0), (0, 0)] + pads
    else:
        window, strides, padding = (1,) + size + (1,), (1,) + stride + (1,), [(0, 0)] + pads + [(0, 0)]
    if kind == "max":
        return lambda x: lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding)
    # each window's count of unpadded elements: a product over the spatial dims, made here with
    # numpy as a constant of shape (1, 1, *out) (a reduce_window over ones the size of x would be
    # constant-folded by XLA at every compile, slowly for large activations)
    counts = np.ones((1,) * len(spatial), np.float64)
    for i, (n, kk, ss, (before, _), out) in enumerate(zip(spatial, size, stride, pads, outs)):
        start = np.arange(out) * ss - before
        per_dim = np.minimum(start + kk, n) - np.maximum(start, 0)
        counts = counts * per_dim.reshape((1,) * i + (out,) + (1,) * (len(spatial) - i - 1))
    counts = counts.reshape((1, 1) + counts.shape if first else (1,) + counts.shape + (1,))

    def avg(x):
        total = lax.reduce_window(x, 0.0, lax.add, window, strides, padding)
        return total / counts.astype(total.dtype)
    return avg


def _pool_xla(kind, n):
    return lambda k: pool_xla_fn(kind, n, k)


def _pool_grad_xla(kind, n):
    def make(k):
        import jax
        fn = pool_xla_fn(kind, n, k)
        # max: dy goes to the first maximum of each window in row-major order, as torch's
        return lambda x, y, dy: jax.vjp(fn, x)[1](dy)[0]
    return make


def _avg_pool_grad_onnx(c):
    """The adjoint of the average over each window's real elements: every input element sums, over the
    windows holding it (constant Gather indices; Where drops the missing terms), dy / (count / size) / size
    (dy / size without pads), as the kernel's autograd through avg_pool(pad(x)) / avg_pool(pad(ones))."""
    xd, d = c.input_desc("x"), c.input_desc("dy")
    n = len(xd.shape) - 2
    first = c.attr("data_format") == "channels_first"
    spatial = list(xd.shape[2:] if first else xd.shape[1:-1])
    outs, pads = pool_geometry(spatial, c.attrs)
    size, stride = list(c.attr("pool_size")), list(c.attr("strides"))
    dtype, window = onnx_rules.np_dtype(d), int(np.prod(size))
    # the windows (flat output index) holding each input element, and each window's count of real elements
    holders = [[] for _ in range(int(np.prod(spatial)))]
    counts = np.zeros(int(np.prod(outs)), dtype=np.int64)
    for w, o in enumerate(np.ndindex(*outs)):
        ranges = [range(max(oi * s - lo, 0), min(oi * s - lo + k, sz))
                  for oi, s, (lo, _), k, sz in zip(o, stride, pads, size, spatial)]
        counts[w] = int(np.prod([len(r) for r in ranges]))
        for i in np.ndindex(*[len(r) for r in ranges]):
            holders[int(np.ravel_multi_index([r[j] for r, j in zip(ranges, i)], spatial))].append(w)
    dy = c.input("dy")
    if not first:
        dy = onnx_rules.to_channels_first(c, dy, n)
    batch, channels = xd.shape[0], (xd.shape[1] if first else xd.shape[-1])
    dy = c.node("Reshape", [dy, c.const(int64s([batch, channels, -1]))])
    if any(lo or hi for lo, hi in pads):
        dy = c.node("Div", [dy, c.const(counts.astype(dtype) / np.array(window, dtype=dtype))])
    dy = c.node("Div", [dy, c.const(np.array(window, dtype=dtype))])
    total = None
    for k in range(max(len(h) for h in holders)):
        term = c.node("Gather", [dy, c.const(np.array([h[k] if k < len(h) else 0 for h in holders], np.int64))],
                      axis=2)
        valid = np.array([k < len(h) for h in holders])
        if not valid.all():
            term = c.node("Where", [c.const(valid), term, c.const(np.zeros((), dtype=dtype))])
        total = term if total is None else c.node("Add", [total, term])
    dx = c.node("Reshape", [total, c.const(int64s([batch, channels] + spatial))])
    if first:
        c.node("Identity", [dx], [c.output("dx")])
    else:
        c.node("Transpose", [dx], [c.output("dx")], perm=[0] + list(range(2, n + 2)) + [1])


for _kind in ("max", "avg"):
    for _n in (1, 2, 3):
        _name = f"tf_{_kind}_pool_{_n}d"
        op(_name, inputs=["x"], outputs=["y"], attrs=POOL_ATTRS, infer=_pool_infer(_n),
           kernel=_pool_kernel(_kind, _n), sbp=_sbp.batch(), onnx=_pool_onnx("MaxPool" if _kind == "max" else "AveragePool"),
           grad=lambda g, t=_name: g.set_grad("x", g.emit(
               f"{t}_grad", {"x": g.input("x"), "y": g.output("y"), "dy": g.dout("y")}, g.attrs)),
           xla=_pool_xla(_kind, _n), amp="clear" if _kind == "max" else "gray", qat="int8_google" if _n == 2 else None)
        op(f"{_name}_grad", inputs=["x", "y", "dy"], outputs=["dx"], attrs=POOL_ATTRS, infer=like("x"),
           kernel=_pool_grad_kernel(_kind, _n), sbp=_sbp.batch(), xla=_pool_grad_xla(_kind, _n),
           onnx=_avg_pool_grad_onnx if _kind == "avg" else None)


# ------------------------------------------------------------------ dropout

def _check_dropout_mask(ctx, x_arg):
    x, mask = ctx.input(x_arg), ctx.input("mask")
    ctx.check(ctx.attr("scale") > 1, f"attr 'scale' must be > 1, received {ctx.attr('scale')}")
    ctx.check(mask.shape == x.shape and mask.dtype is _dt.int8,
              f"input 'mask' expected int8 of shape {x.shape}, received {mask.dtype.name} {mask.shape}")
    return x


def _dropout_infer(ctx):
    x = _check_dropout_mask(ctx, "in")
    if ctx.has_input("_add_to_output"):
        d = ctx.input("_add_to_output")
        ctx.check(d.shape == x.shape and d.dtype is x.dtype,
                  f"input '_add_to_output' expected {x.dtype.name} of shape {x.shape}, received {d.dtype.name} {d.shape}")
    ctx.set_output("out", x.shape, x.dtype)


def _mask_scale(k, x_arg):
    """``x * mask * scale`` in one kernel (``dropout``, ``dropout_grad``): ``addcmul`` into a
    ``-0.0`` broadcast to ``x``'s shape (never materialized), which keeps the sign of every
    zero ``x * 0`` gives; a 0/1 mask gives ``x * mask * scale`` bit for bit."""
    scale = k.attr("scale")
    zero = torch.full((), -0.0, dtype=k.input(x_arg).dtype.torch, device=k.device)
    return lambda x, mask: torch.addcmul(zero.expand(x.shape), x, mask, value=scale)


def _tuned_mask_scale(k, kernel):
    """``kernel`` (a dropout's ``addcmul``) or the same formula compiled by TorchInductor,
    whichever the first call times faster on a GPU (:func:`~graphfront.ops.common.tuned_kernel`):
    PyTorch's kernel reads the int8 mask beside half or float tensors element by element (it
    converts types as it loads, unvectorized); Triton's kernel loads each in its own type.
    The two give the same bits (a 0/1 mask)."""
    key = common.inductor_key(k)
    return common.tuned_kernel(key, [kernel, common.inductor_kernel(key, kernel, dynamic=True)])


def _dropout_kernel(k):
    """``x * mask * scale``, plus ``_add_to_output`` in the same ``addcmul`` where given."""
    mask_scale, scale = _mask_scale(k, "in"), k.attr("scale")

    def dropout(x, mask, add_to):
        return mask_scale(x, mask) if add_to is None else torch.addcmul(add_to, x, mask, value=scale)
    return _tuned_mask_scale(k, dropout)


def _dropout_xla(k):
    scale = k.attr("scale")

    def dropout(x, mask, add_to):
        out = x * mask.astype(x.dtype) * scale
        return out if add_to is None else out + add_to
    return dropout


def _mask_scale_onnx(x, out):
    """ONNX rule of ``x * mask * scale`` (+ ``_add_to_output``), for ``dropout`` and ``dropout_grad``."""
    def rule(c):
        d = c.input_desc(x)
        y = onnx_rules.mul(c, c.input(x), c.node("Cast", [c.input("mask")], to=c.dtype_code(d.dtype)),
                           onnx_rules.const_as(c, c.attr("scale"), d))
        if c.has_input("_add_to_output"):
            c.node("Add", [y, c.input("_add_to_output")], [c.output(out)])
        else:
            c.node("Identity", [y], [c.output(out)])
    return rule


def _dropout_grad(g):
    g.set_grad("in", g.emit("dropout_grad", {"dy": g.dout("out"), "mask": g.input("mask")}, {"scale": g.attr("scale")}))
    if g.needs("_add_to_output"):
        g.set_grad("_add_to_output", g.dout("out"))


op("dropout", inputs=["in", "mask", "_add_to_output?"], outputs=["out"], attrs={"scale": ("float", 0.0)},
   infer=_dropout_infer, kernel=_dropout_kernel, xla=_dropout_xla, onnx=_mask_scale_onnx("in", "out"),
   grad=_dropout_grad, amp="gray", sbp=_sbp.elementwise())


def _dropout_grad_infer(ctx):
    dy = _check_dropout_mask(ctx, "dy")
    ctx.set_output("dx", dy.shape, dy.dtype)


op("dropout_grad", inputs=["dy", "mask"], outputs=["dx"], attrs={"scale": ("float", 0.0)},
   infer=_dropout_grad_infer, kernel=lambda k: _tuned_mask_scale(k, _mask_scale(k, "dy")),
   onnx=_mask_scale_onnx("dy", "dx"),
   xla=lambda k: (lambda dy, mask, s=k.attr("scale"): dy * mask.astype(dy.dtype) * s), sbp=_sbp.elementwise())


def _random_mask_like_kernel(k):
    """Keep where a uniform draw in [0, 1) exceeds ``rate``. On the CPU the draws are OneFlow's
    CPU kernel's: ``std::mt19937`` seeded with ``seed`` (mod 2**32), one 32-bit word per element
    turned into a float by ``std::uniform_real_distribution<float>`` (word / 2**32 in float), so
    a seeded mask, and the masks of the job's successive runs, are the ones OneFlow draws. On a
    GPU they come from a torch generator seeded with ``seed`` (OneFlow's curand stream is not
    reproduced): each element is kept with probability ``1 - rate`` (``Tensor.bernoulli_``, one
    kernel). On several devices each draws the mask of the whole ``like`` and keeps its part, so
    the masks are one device's."""
    rate = k.attr("rate")
    layout, n, index = k.sbp("out"), k.parallel_num, k.parallel_id
    whole = k.logical("like").shape if layout != "B" else None  # (None: like's shape in this run)
    if k.device.type == "cpu":
        words = np.random.RandomState(k.attr("seed") & 0xFFFF_FFFF)  # numpy's legacy seeding is mt19937's
        threshold = np.float32(rate)

        def random_mask_like(like_):
            u = words.randint(0, 2 ** 32, size=whole or like_.shape, dtype=np.uint32).astype(np.float32)
            u *= np.float32(2 ** -32)
            return _sbp.local_part(torch.from_numpy((u > threshold).astype(np.int8)), layout, n, index)
        return random_mask_like
    gen, keep = k.generator(k.attr("seed")), 1.0 - rate
    # one kernel writing the int8 mask (``bernoulli_``), not a float32 draw, a comparison and a cast
    return lambda like_: _sbp.local_part(
        torch.empty(whole or like_.shape, dtype=torch.int8, device=like_.device).bernoulli_(keep, generator=gen),
        layout, n, index)


def _random_mask_like_native(k):
    """The native lowering's mask: uniform draws from torch's default generator (a traced step
    can take it, not numpy's mt19937 nor an op's own generator): the same distribution, another stream."""
    rate = k.attr("rate")
    return lambda like_: (torch.rand(like_.shape, device=like_.device) > rate).to(torch.int8)


def _random_mask_like_xla(k):
    """Keep where ``jax.random.uniform`` exceeds ``rate``; the job's jax key stream replaces ``seed``."""
    import jax
    rate = k.attr("rate")
    return lambda key, like_: (jax.random.uniform(key, like_.shape) > rate).astype("int8")


op("random_mask_like", inputs=["like"], outputs=["out"], attrs={"rate": ("float", 0.0), "seed": ("int64", 0)},
   infer=lambda ctx: (ctx.check(0 <= ctx.attr("rate") < 1, f"attr 'rate' must be in [0, 1), received "
                                                           f"{ctx.attr('rate')}"),
                      ctx.set_output("out", ctx.input("like").shape, _dt.int8)),
   kernel=_random_mask_like_kernel, xla=_random_mask_like_xla, native=_random_mask_like_native, no_grad=True,
   random=True, amp="clear", sbp=_sbp.drawn_whole(lambda ctx: range(ctx.ndim("like"))))


# ------------------------------------------------------------------ matmul

MATMUL_ATTRS = {"transpose_a": ("bool", False), "transpose_b": ("bool", False), "alpha": ("double", 1.0)}


def _matmul_infer(batch):
    def infer(ctx):
        a, b = ctx.input("a"), ctx.input("b")
        ta, tb = ctx.attr("transpose_a"), ctx.attr("transpose_b")
        if batch:
            ctx.check(len(a.shape) == len(b.shape) and len(a.shape) > 2,
                      f"inputs 'a' {a.shape} and 'b' {b.shape} must have the same rank > 2")
            ctx.check(a.shape[:-2] == b.shape[:-2],
                      f"batch dims of input 'a' {a.shape[:-2]} and 'b' {b.shape[:-2]} differ")
        else:
            ctx.check(len(a.shape) == 2, f"input 'a' expected rank 2, received shape {a.shape}")
            ctx.check(len(b.shape) == 2, f"input 'b' expected rank 2, received shape {b.shape}")
        m, ka = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
        kb, nn = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
        ctx.check(ka == kb, f"input 'b' expected {'last' if tb else 'first'} matrix dim {ka} (the inner dim of "
                            f"input 'a' {a.shape}), received shape {b.shape}")
        same_dtype(ctx, "a", "b")
        ctx.set_output("out", a.shape[:-2] + (m, nn), a.dtype)
    return infer


def _matmul_kernel(k):
    """``alpha * a @ b (+ _add_to_output)``. Where ``alpha`` or the addend is set and the
    operands are two matrices or two stacks of matrices with the same batch dims, both go
    into the GEMM's epilogue (``torch.addmm`` / ``torch.baddbmm``: ``beta * add_to + alpha * a @ b``,
    one kernel, as OneFlow's matmul kernels pass ``alpha`` and ``_add_to_output`` to cuBLAS,
    ``oneflow/user/kernels/matmul_kernels.cpp``); otherwise ``torch.matmul`` of the
    (transposed) operands, which on a CPU costs about half the dispatch of an ``addmm``
    with ``beta = 0``."""
    ta, tb, alpha = k.attr("transpose_a"), k.attr("transpose_b"), k.attr("alpha")
    a_desc, b_desc = k.input("a"), k.input("b")
    same_batch = len(a_desc.shape) == len(b_desc.shape) and a_desc.shape[:-2] == b_desc.shape[:-2]
    if alpha == 1.0 and not k.has_input("_add_to_output"):
        return lambda a, b, add_to: torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
    if not same_batch:
        def mm(a, b, add_to):
            out = torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
            if alpha != 1.0:
                out = out * alpha
            return out if add_to is None else out + add_to
        return mm
    out_shape = k.output("out").shape
    # the addend when there is none (beta 0: the GEMM does not read it), made with the kernel
    # (a tensor made in a traced step and kept would be an output of the native lowering's
    # CUDA graph, which its next replay overwrites)
    ignored = torch.empty((), dtype=a_desc.dtype.torch, device=k.device)

    def gemm(a, b, add_to):
        a, b = a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b
        if add_to is None:
            add_to, beta = ignored, 0.0
        else:
            beta = 1.0
        if a.dim() == 2:
            return torch.addmm(add_to, a, b, beta=beta, alpha=alpha)
        m, n = out_shape[-2:]
        out = torch.baddbmm(add_to if add_to.dim() == 0 else add_to.reshape(-1, m, n), a.reshape(-1, *a.shape[-2:]),
                            b.reshape(-1, *b.shape[-2:]), beta=beta, alpha=alpha)
        return out.reshape(out_shape)
    return gemm


def _matmul_xla(k):
    jnp = xla_rules.jnp()
    ta, tb, alpha = k.attr("transpose_a"), k.attr("transpose_b"), k.attr("alpha")

    def mm(a, b, add_to):
        out = jnp.matmul(jnp.swapaxes(a, -1, -2) if ta else a, jnp.swapaxes(b, -1, -2) if tb else b)
        if alpha != 1.0:
            out = out * alpha
        return out if add_to is None else out + add_to
    return mm


def _matmul_grad(op_type):
    def grad(g):
        ta, tb, alpha = g.attr("transpose_a"), g.attr("transpose_b"), g.attr("alpha")
        dy, a, b = g.dout("out"), g.input("a"), g.input("b")
        if g.needs("a"):
            ins, attrs = (({"a": dy, "b": b}, {"transpose_a": False, "transpose_b": not tb}) if not ta else
                          ({"a": b, "b": dy}, {"transpose_a": tb, "transpose_b": True}))
            g.set_grad("a", g.emit(op_type, ins, {**attrs, "alpha": alpha}, name=f"{g.op_name}_grad_a"))
        if g.needs("b"):
            ins, attrs = (({"a": a, "b": dy}, {"transpose_a": not ta, "transpose_b": False}) if not tb else
                          ({"a": dy, "b": a}, {"transpose_a": True, "transpose_b": ta}))
            g.set_grad("b", g.emit(op_type, ins, {**attrs, "alpha": alpha}, name=f"{g.op_name}_grad_b"))
    return grad


def _matmul_onnx(c):
    def side(arg):
        x = c.input(arg)
        if c.attr(f"transpose_{arg}"):
            n = len(c.input_desc(arg).shape)
            x = c.node("Transpose", [x], perm=list(range(n - 2)) + [n - 1, n - 2])
        return x
    out = c.output("out")
    alpha, add_to = c.attr("alpha"), c.input("_add_to_output")
    y = c.node("MatMul", [side("a"), side("b")], None if alpha != 1.0 or add_to else [out])
    if alpha != 1.0:
        dtype = c.output_desc("out").dtype.np
        y = c.node("Mul", [y, c.const(alpha, dtype)], None if add_to else [out])
    if add_to:
        c.node("Add", [y, add_to], [out])


op("matmul", inputs=["a", "b", "_add_to_output?"], outputs=["out"], attrs=MATMUL_ATTRS,
   infer=_matmul_infer(False), kernel=_matmul_kernel, grad=_matmul_grad("matmul"), sbp=_sbp.matmul, onnx=_matmul_onnx,
   xla=_matmul_xla, amp="white", qat="int8")
op("batch_matmul", inputs=["a", "b", "_add_to_output?"], outputs=["out"], attrs=MATMUL_ATTRS,
   infer=_matmul_infer(True), kernel=_matmul_kernel, grad=_matmul_grad("batch_matmul"), sbp=_sbp.matmul,
   onnx=_matmul_onnx, xla=_matmul_xla, amp="white", qat="int8_google")


def _broadcast_matmul_infer(ctx):
    a, b = ctx.input("a"), ctx.input("b")
    ctx.check(len(b.shape) == 2 and len(a.shape) > 2,
              f"input 'a' must have rank > 2 and input 'b' rank 2, received {a.shape} and {b.shape}")
    ctx.check(not ctx.attr("transpose_a"), "attr 'transpose_a' must be false for broadcast_matmul")
    kb, n = (b.shape[1], b.shape[0]) if ctx.attr("transpose_b") else b.shape
    ctx.check(kb == a.shape[-1], f"input 'b' expected inner dim {a.shape[-1]} (last dim of input 'a' {a.shape}), "
                                 f"received shape {b.shape}")
    same_dtype(ctx, "a", "b")
    ctx.set_output("out", a.shape[:-1] + (n,), a.dtype)


def _broadcast_matmul_grad(g):
    tb, alpha, dy = g.attr("transpose_b"), g.attr("alpha"), g.dout("out")
    if g.needs("a"):
        g.set_grad("a", g.emit("broadcast_matmul", {"a": dy, "b": g.input("b")},
                               {"transpose_a": False, "transpose_b": not tb, "alpha": alpha},
                               name=f"{g.op_name}_a_grad"))
    if g.needs("b"):
        ins = {"a": dy, "b": g.input("a")} if tb else {"a": g.input("a"), "b": dy}
        g.set_grad("b", g.emit("broadcast_matmul_grad_b", ins, {"alpha": alpha}, name=f"{g.op_name}_b_grad"))


def _broadcast_matmul_grad_b_infer(ctx):
    a, b = ctx.input("a"), ctx.input("b")
    ctx.check(len(a.shape) == len(b.shape) and a.shape[:-1] == b.shape[:-1],
              f"inputs 'a' {a.shape} and 'b' {b.shape} must agree on every dim but the last")
    ctx.set_output("out", (a.shape[-1], b.shape[-1]), a.dtype)


def _broadcast_matmul_grad_b_kernel(k):
    alpha = k.attr("alpha")

    def grad_b(a, b, add_to):
        out = a.reshape(-1, a.shape[-1]).t() @ b.reshape(-1, b.shape[-1])  # a^T b over flattened leading dims
        out = out * alpha if alpha != 1.0 else out
        return out if add_to is None else out + add_to
    return grad_b


def _broadcast_matmul_grad_b_onnx(c):
    """a^T b over the flattened leading dims, times alpha (when not 1), + _add_to_output."""
    a, b, alpha = c.input_desc("a"), c.input_desc("b"), c.attr("alpha")
    a2 = c.node("Reshape", [c.input("a"), c.const(int64s([-1, a.shape[-1]]))])
    b2 = c.node("Reshape", [c.input("b"), c.const(int64s([-1, b.shape[-1]]))])
    out = c.node("MatMul", [c.node("Transpose", [a2], perm=[1, 0]), b2])
    if alpha != 1.0:
        out = c.node("Mul", [out, onnx_rules.const_as(c, alpha, a)])
    add_to = c.input("_add_to_output")
    c.node("Add" if add_to else "Identity", [out, add_to] if add_to else [out], [c.output("out")])


def _broadcast_matmul_grad_b_xla(k):
    alpha = k.attr("alpha")

    def grad_b(a, b, add_to):
        out = a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1])
        out = out * alpha if alpha != 1.0 else out
        return out if add_to is None else out + add_to
    return grad_b


def _broadcast_matmul_grad_b_sbp(ctx):
    """OneFlow's: a and b split on one leading (flattened, contracted) axis give partial sums;
    a split on its last axis splits out on its rows, b on its last axis out on its columns;
    a partial operand with the other broadcast stays partial (_add_to_output as out)."""
    last = ctx.ndim("a") - 1
    return [_sbp.signature(ctx, _sbp.P, a=_sbp.split(k), b=_sbp.split(k)) for k in range(last)] + [
        _sbp.signature(ctx, _sbp.split(0), a=_sbp.split(last), b=_sbp.B),
        _sbp.signature(ctx, _sbp.split(1), a=_sbp.B, b=_sbp.split(last)),
        _sbp.signature(ctx, _sbp.P, b=_sbp.B), _sbp.signature(ctx, _sbp.P, a=_sbp.B)]


op("broadcast_matmul", inputs=["a", "b", "_add_to_output?"], outputs=["out"], attrs=MATMUL_ATTRS,
   infer=_broadcast_matmul_infer, kernel=_matmul_kernel, grad=_broadcast_matmul_grad, sbp=_sbp.matmul, onnx=_matmul_onnx,
   xla=_matmul_xla, amp="white")
op("broadcast_matmul_grad_b", inputs=["a", "b", "_add_to_output?"], outputs=["out"],
   attrs={"alpha": ("double", 1.0)}, infer=_broadcast_matmul_grad_b_infer, kernel=_broadcast_matmul_grad_b_kernel,
   onnx=_broadcast_matmul_grad_b_onnx, sbp=_broadcast_matmul_grad_b_sbp,
   xla=_broadcast_matmul_grad_b_xla)


# ------------------------------------------------------------------ softmax

op("softmax", inputs=["in"], outputs=["out"], infer=like("in"),
   kernel=lambda k: (lambda x: torch.softmax(x, -1)), sbp=_sbp.batch(min_ndim_arg="in"), onnx=onnx_rules.same("Softmax", axis=-1),
   xla=lambda k: (lambda x: xla_rules.jnp_fn("nn.softmax")(x, axis=-1)),
   grad=lambda g: g.set_grad("in", g.emit("softmax_grad", {"y": g.output("out"), "dy": g.dout("out")})), amp="gray")


def _softmax_grad_infer(ctx):
    y, dy = ctx.input("y"), ctx.input("dy")
    ctx.check(y.shape == dy.shape, f"input 'dy' expected shape {y.shape}, received {dy.shape}")
    same_dtype(ctx, "y", "dy")
    ctx.set_output("dx", y.shape, y.dtype)


op("softmax_grad", inputs=["y", "dy"], outputs=["dx"], infer=_softmax_grad_infer, sbp=_sbp.batch(min_ndim_arg="y"),
   kernel=lambda k: (lambda y, dy: _aten._softmax_backward_data(dy, y, -1, y.dtype)),
   xla=lambda k: (lambda y, dy: y * (dy - (dy * y).sum(axis=-1, keepdims=True))),
   onnx=lambda c: c.node("Mul", [c.node("Sub", [c.input("dy"), onnx_rules.reduce_node(
       c, "ReduceSum", c.node("Mul", [c.input("dy"), c.input("y")]), [-1], 1)]), c.input("y")], [c.output("dx")]))


# ------------------------------------------------------------------ sparse softmax cross entropy

def _sce_infer(ctx):
    pred, label = ctx.input("prediction"), ctx.input("label")
    ctx.check(len(pred.shape) >= 2, f"input 'prediction' expected rank >= 2, received shape {pred.shape}")
    ctx.check(label.shape == pred.shape[:-1],
              f"input 'label' expected shape {pred.shape[:-1]} (prediction {pred.shape} without its last dim), "
              f"received {label.shape}")
    ctx.check(label.dtype.is_integer, f"input 'label' expected an integer dtype, received {label.dtype.name}")
    ctx.check(pred.dtype.is_floating_point,
              f"input 'prediction' expected a floating dtype, received {pred.dtype.name}")
    depth = ctx.attr("depth")
    ctx.check(depth == pred.shape[-1], f"attr 'depth' expected {pred.shape[-1]} (last dim of 'prediction'), "
                                       f"received {depth}")
    ctx.set_output("prob", pred.shape, pred.dtype)
    ctx.set_output("out", label.shape, pred.dtype)


def _sce_model_parallel_kernel(k, first):
    """``sparse_softmax_cross_entropy_ms`` with ``prediction`` split on its class axis (OneFlow's
    ``SplitSparseSoftmaxCrossEntropyOpPass``, v0.6.0
    ``oneflow/core/job_rewriter/split_sparse_softmax_cross_entropy_op_pass.cpp``): each device
    holds the logits of its classes; the rows' maximum and the sum of their exponentials are
    all-reduced (max, then sum) over the job's devices, and so is each row's logit at its
    label, which one device holds. ``prob`` comes out split as the logits, ``out`` whole on
    every device; ``first``: its first class (:func:`~graphfront.ops.loss_ops.class_offset`).
    Raises RuntimeError naming the op when its devices are not all of the job's (the
    collectives run over the job's process group)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != k.parallel_num:
        raise RuntimeError(f"op '{k.op_name}' (sparse_softmax_cross_entropy_ms): its logits split by classes need "
                           f"all of the job's devices, received {k.parallel_num} of them")

    def sce(pred, label):
        m = pred.amax(-1, keepdim=True)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        shifted = pred - m
        e = shifted.exp()
        s = e.sum(-1, keepdim=True)
        dist.all_reduce(s)
        _, hit, at_label = at_local_class(shifted, label, first)
        at_label = torch.where(hit, at_label, torch.zeros((), dtype=pred.dtype, device=pred.device))
        dist.all_reduce(at_label)
        return e / s, s.squeeze(-1).log() - at_label
    return sce


def _sce_kernel(op_type):
    def make(k):
        first = class_offset(k) if op_type.endswith("_ms") else None
        if first is not None:
            return _sce_model_parallel_kernel(k, first)

        def sce(pred, label):
            logp = torch.log_softmax(pred, -1)
            try:
                out = -logp.gather(-1, label.long().unsqueeze(-1)).squeeze(-1)
            except (RuntimeError, IndexError) as e:
                bad_labels(k, op_type, label, e)
            return logp.exp(), out
        return sce
    return make


def _sce_grad_kernel(op_type):
    def make(k):
        first = class_offset(k, "prob") if op_type.endswith("_ms_grad") else None
        if first is not None:
            def class_split_grad(label, dy, prob):  # prob * dy, minus dy at the labels of this part's classes
                ids, hit = local_class_ids(label, first, prob.shape[-1])
                at_label = torch.where(hit, -dy, torch.zeros((), dtype=dy.dtype, device=dy.device))
                return (prob * dy.unsqueeze(-1)).scatter_add_(-1, ids.unsqueeze(-1), at_label.unsqueeze(-1))
            return class_split_grad

        def sce_grad(label, dy, prob):
            d = prob * dy.unsqueeze(-1)
            try:
                return d.scatter_add_(-1, label.long().unsqueeze(-1), -dy.unsqueeze(-1))
            except (RuntimeError, IndexError) as e:
                bad_labels(k, op_type, label, e)
        return sce_grad
    return make


def _sce_grad_infer(ctx):
    label, dy, prob = ctx.input("label"), ctx.input("dy"), ctx.input("prob")
    ctx.check(dy.shape == label.shape, f"input 'dy' expected shape {label.shape}, received {dy.shape}")
    ctx.set_output("prediction_diff", prob.shape, prob.dtype)


def _check_labels(k, op_type, label):
    """The xla rules' form of the kernels' label check (:func:`xla_rules.check_ids`)."""
    xla_rules.check_ids(label, k.attr("depth"), lambda value, at: label_error(k, op_type, value, at))


def _sce_xla(op_type):
    """(prob, out) over jax arrays; labels outside [0, depth) fail the step's check (their
    ``out`` is NaN, never seen: the step's caller raises the kernel's OpRunError)."""
    def make(k):
        jnp = xla_rules.jnp()
        log_softmax = xla_rules.jnp_fn("nn.log_softmax")

        def sce(pred, label):
            _check_labels(k, op_type, label)
            logp = log_softmax(pred, axis=-1)
            picked = jnp.take_along_axis(logp, label.astype("int32")[..., None], axis=-1, mode="fill",
                                         fill_value=jnp.nan)
            return jnp.exp(logp), -picked[..., 0]
        return sce
    return make


def _sce_grad_xla(op_type):
    def make(k):
        depth, one_hot = k.attr("depth"), xla_rules.jnp_fn("nn.one_hot")

        def sce_grad(label, dy, prob):
            _check_labels(k, op_type, label)
            return prob * dy[..., None] - one_hot(label, depth, dtype=prob.dtype) * dy[..., None]
        return sce_grad
    return make


def _sparse_softmax_cross_entropy_onnx(c, logits=None):
    """prob = softmax(logits); out = -log_softmax(logits)[..., label] (``logits``: default the
    input ``prediction``)."""
    logp = c.node("LogSoftmax", [logits or c.input("prediction")], axis=-1)
    c.node("Exp", [logp], [c.output("prob")])
    neg(c, pick_last(c, logp, c.input("label")), c.output("out"))


def _sparse_softmax_cross_entropy_grad_onnx(c, out=None):
    """prob * dy, plus -dy at [..., label] (in-range labels only, as the forward), into ``out``
    (default: the output ``prediction_diff``)."""
    d = c.input_desc("prob")
    dy = c.input("dy")
    scaled = c.node("Mul", [c.input("prob"), c.node("Unsqueeze", [dy, c.const(onnx_rules.int64s([-1]))])])
    at_label = onnx_rules.last_axis_is(c, c.input("label"), d.shape[-1])
    c.node("Where", [at_label, c.node("Add", [scaled, c.node("Unsqueeze", [neg(c, dy), c.const(onnx_rules.int64s([-1]))])]),
                     scaled], [out or c.output("prediction_diff")])


def _sce_sbp(grad, ms):
    """Per sample (split on axis 0); the ``_ms`` ops on a line of devices also split the
    prediction (forward) or ``prob`` (grad) on the class axis with the labels, the losses
    and their gradient whole: :func:`_sce_model_parallel_kernel`."""
    base = _sbp.batch(min_ndim_arg="prob" if grad else "prediction")

    def rule(ctx):
        cands = base(ctx)
        if ms and ctx.grid_axis is None:
            c = _sbp.split(ctx.ndim("prob" if grad else "prediction") - 1)
            cands.append(_sbp.signature(ctx, _sbp.B, prob=c, prediction_diff=c) if grad else
                         _sbp.signature(ctx, _sbp.B, prediction=c, prob=c))
        return cands
    return rule


for _t in ("sparse_softmax_cross_entropy", "sparse_softmax_cross_entropy_ms"):
    op(_t, inputs=["prediction", "label"], outputs=["prob", "out"], attrs={"depth": ("int64", 0)},
       infer=_sce_infer, kernel=_sce_kernel(_t), sbp=_sce_sbp(False, _t.endswith("_ms")), xla=_sce_xla(_t),
       checks=label_checks(_t), boxing=_t.endswith("_ms"),
       onnx=_sparse_softmax_cross_entropy_onnx,
       grad=lambda g, t=_t: g.needs("prediction") and g.set_grad("prediction", g.emit(
           f"{t}_grad", {"label": g.input("label"), "dy": g.dout("out"), "prob": g.output("prob")},
           {"depth": g.attr("depth")})),
       amp="gray" if _t == "sparse_softmax_cross_entropy" else None)
    op(f"{_t}_grad", inputs=["label", "dy", "prob"], outputs=["prediction_diff"], attrs={"depth": ("int64", 0)},
       infer=_sce_grad_infer, kernel=_sce_grad_kernel(f"{_t}_grad"), sbp=_sce_sbp(True, _t.endswith("_ms")),
       checks=label_checks(f"{_t}_grad"),
       xla=_sce_grad_xla(f"{_t}_grad"), onnx=_sparse_softmax_cross_entropy_grad_onnx)


# ------------------------------------------------------------------ fused_bias_add_sparse_softmax_cross_entropy
# graphfront's fusion of ``bias_add`` over the classes and ``sparse_softmax_cross_entropy``
# (``fuse_bias_add_sparse_softmax_cross_entropy``, on GPU placements): under AMP the
# prediction stays in its low-precision type (the float16 logits of BERT's masked-LM
# decoder) and the op computes in the bias's type, so the float32 copy of the logits, the
# float32 sum and their gradients' casts are never written.

_FUSED_SCE = "fused_bias_add_sparse_softmax_cross_entropy"


def _fused_sce_infer(ctx):
    _sce_infer(ctx)
    pred, bias = ctx.input("prediction"), ctx.input("bias")
    ctx.check(bias.shape == pred.shape[-1:],
              f"input 'bias' expected shape {pred.shape[-1:]} (the classes of 'prediction' {pred.shape}), received "
              f"{bias.shape}")
    ctx.check(bias.dtype.is_floating_point and bias.dtype.torch.itemsize >= pred.dtype.torch.itemsize,
              f"input 'bias' expected a floating dtype at least as wide as 'prediction' ({pred.dtype.name}), "
              f"received {bias.dtype.name}")
    ctx.set_output("prob", pred.shape, bias.dtype)
    ctx.set_output("out", ctx.input("label").shape, bias.dtype)


def _fused_sce_formula(pred, bias, label):
    """``(prob, out)`` of ``sparse_softmax_cross_entropy(bias_add(pred cast to bias's dtype, bias))``,
    each step the unfused ops' own torch call."""
    logp = torch.log_softmax(pred.to(bias.dtype) + bias, -1)
    return logp.exp(), -logp.gather(-1, label.long().unsqueeze(-1)).squeeze(-1)


def _fused_sce_kernel(k):
    """On a GPU one TorchInductor-compiled function (the cast, the add, the softmax's
    reductions and the loss in two passes over the logits); elsewhere the unfused ops'
    calls."""
    return common.inductor_kernel(common.inductor_key(k), _fused_sce_formula)


def _fused_sce_grad(g):
    dy = g.dout("out")
    if dy is None or not (g.needs("prediction") or g.needs("bias")):
        return
    outs = g.emit(f"{_FUSED_SCE}_grad", {"label": g.input("label"), "dy": dy, "prob": g.output("prob")},
                  {"depth": g.attr("depth"), "dtype": g.desc(g.input("prediction")).dtype},
                  outputs=["prediction_diff", "bias_diff"])
    for arg, out in (("prediction", "prediction_diff"), ("bias", "bias_diff")):
        if g.needs(arg):
            g.set_grad(arg, outs[out])


def _fused_sce_xla(k):
    sce = _sce_xla(_FUSED_SCE)(k)
    return lambda pred, bias, label: sce(pred.astype(bias.dtype) + bias, label)


def _fused_sce_onnx(c):
    """The prediction cast to the bias's type, plus the bias; then the unfused op's nodes."""
    pred = c.node("Cast", [c.input("prediction")], to=c.dtype_code(c.input_desc("bias").dtype))
    _sparse_softmax_cross_entropy_onnx(c, c.node("Add", [pred, c.input("bias")]))


op(_FUSED_SCE, inputs=["prediction", "bias", "label"], outputs=["prob", "out"], attrs={"depth": ("int64", 0)},
   infer=_fused_sce_infer, kernel=raising_bad_ids(label_checks(_FUSED_SCE), 2, _fused_sce_kernel),
   grad=_fused_sce_grad, checks=label_checks(_FUSED_SCE),
   sbp=lambda ctx: [] if ctx.ndim("prediction") < 2 else [_sbp.signature(ctx, _sbp.split(0), bias=_sbp.B)],
   xla=_fused_sce_xla, onnx=_fused_sce_onnx, amp_no_cast=("prediction",),
   doc="graphfront-only: sparse_softmax_cross_entropy(bias_add(prediction, bias) over the last axis), computed in "
       "bias's dtype (prediction, as narrow or as wide, is not cast first); prob and out of bias's dtype")


def _fused_sce_grad_infer(ctx):
    _sce_grad_infer(ctx)
    prob = ctx.input("prob")
    ctx.check(ctx.attr("dtype") is not None and ctx.attr("dtype").is_floating_point,
              f"attr 'dtype' expected a floating dtype (the prediction's), received {ctx.attr('dtype')}")
    ctx.set_output("prediction_diff", prob.shape, ctx.attr("dtype"))
    ctx.set_output("bias_diff", prob.shape[-1:], prob.dtype)


def _fused_sce_grad_formula(depth, dtype):
    """``(prediction_diff, bias_diff)``: ``prob * dy`` minus ``dy`` at each label, in ``dtype``,
    and its sum over the leading axes in prob's type (``torch.where`` against the class ids
    instead of the unfused kernel's ``scatter_add_``: the same values, and pointwise, so
    TorchInductor fuses it with the cast and the sum)."""
    def fused_sce_grad(label, dy, prob):
        d = prob * dy.unsqueeze(-1)
        hit = torch.arange(depth, device=prob.device) == label.long().unsqueeze(-1)
        d = torch.where(hit, d - dy.unsqueeze(-1), d)
        return d.to(dtype), d.sum(tuple(range(d.dim() - 1)))
    return fused_sce_grad


def _fused_sce_grad_kernel(k):
    """On a GPU :func:`_fused_sce_grad_formula` compiled by TorchInductor; elsewhere the
    unfused kernels' calls (``scatter_add_``, the sum, the cast)."""
    t, dtype = f"{_FUSED_SCE}_grad", k.attr("dtype").torch
    unfused = _sce_grad_kernel(t)(k)

    def eager(label, dy, prob):
        d = unfused(label, dy, prob)
        return d.to(dtype), d.sum(tuple(range(d.dim() - 1)))
    return common.inductor_kernel(common.inductor_key(k), _fused_sce_grad_formula(k.attr("depth"), dtype), eager)


def _fused_sce_grad_xla(k):
    grad, dtype = _sce_grad_xla(f"{_FUSED_SCE}_grad")(k), k.attr("dtype").np

    def fused_sce_grad(label, dy, prob):
        d = grad(label, dy, prob)
        return d.astype(dtype), d.sum(axis=tuple(range(d.ndim - 1)))
    return fused_sce_grad


def _fused_sce_grad_onnx(c):
    """The unfused gradient's nodes, then its cast to ``dtype`` and its sum over the leading axes."""
    d = c.tmp("prediction_diff_wide")
    _sparse_softmax_cross_entropy_grad_onnx(c, out=d)
    c.node("Cast", [d], [c.output("prediction_diff")], to=c.dtype_code(c.attr("dtype")))
    onnx_rules.reduce_node(c, "ReduceSum", d, list(range(len(c.input_desc("prob").shape) - 1)), 0,
                           out=c.output("bias_diff"))


op(f"{_FUSED_SCE}_grad", inputs=["label", "dy", "prob"], outputs=["prediction_diff", "bias_diff"],
   attrs={"depth": ("int64", 0), "dtype": "dtype"}, infer=_fused_sce_grad_infer, kernel=_fused_sce_grad_kernel,
   checks=label_checks(f"{_FUSED_SCE}_grad"),
   sbp=lambda ctx: [] if ctx.ndim("prob") < 2 else [_sbp.signature(ctx, _sbp.split(0), bias_diff=_sbp.P)],
   xla=_fused_sce_grad_xla, onnx=_fused_sce_grad_onnx,
   doc=f"graphfront-only: the gradient of {_FUSED_SCE}: prediction_diff (attr dtype) and bias_diff (prob's dtype)")

__all__ = ["pool_geometry", "conv_out_size", "norm_axis"]
