"""Transposed convolution: ``deconv1d``, ``deconv2d``, ``deconv3d``.

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/deconv_op.cpp``). ``weight`` is laid out as the *weight of the
convolution this op transposes*: ``[in_channels, filters / groups, k...]`` for
``channels_first`` and ``[in_channels, k..., filters / groups]`` for ``channels_last``
(PyTorch's ``conv_transpose`` layout). Per spatial dim the output size is
``(n - 1) * stride - 2 * padding_before + dilation * (k - 1) + output_padding + 1``.

Grads (OneFlow's wiring): ``weight`` -> ``conv_filter_grad`` with ``dy`` = this op's
input and ``x`` = the output gradient (the deconv is the data gradient of that conv);
``in`` -> the convolution ``conv{N}d`` of the output gradient with ``weight``.
"""
from __future__ import annotations

import torch.nn.functional as F

from graphfront.ops.common import same_dtype
from graphfront.ops import xla_rules
from graphfront.ops.nn_ops import conv_xla_fn, layout_for, torch_dilation
from graphfront.ops.onnx_rules import channels_first_io, to_channels_first
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

DECONV_ATTRS = {"filters": ("int32", 0), "padding_before": "list_int32", "data_format": "string",
                "kernel_size": "list_int32", "output_padding": "list_int32", "strides": "list_int32",
                "dilation_rate": "list_int32", "groups": ("int32", 1)}


def deconv_out_size(n, k, pad, stride, dilation, output_padding):
    return (n - 1) * stride - 2 * pad + dilation * (k - 1) + output_padding + 1


def _deconv_infer(n):
    def infer(ctx):
        fmt = ctx.attr("data_format")
        ctx.check(fmt in ("channels_first", "channels_last"),
                  f"attr 'data_format' must be 'channels_first' or 'channels_last', received {fmt!r}")
        first = fmt == "channels_first"
        for a in ("padding_before", "kernel_size", "output_padding", "strides", "dilation_rate"):
            ctx.check(len(ctx.attr(a)) == n, f"attr '{a}' needs {n} entries, received {ctx.attr(a)}")
        x, w = ctx.input("in"), ctx.input("weight")
        ctx.check(x.dtype.is_floating_point, f"input 'in' expected a floating dtype, received {x.dtype.name}")
        same_dtype(ctx, "in", "weight")
        ctx.check(len(x.shape) == n + 2, f"input 'in' expected rank {n + 2}, received shape {x.shape}")
        filters, groups = ctx.attr("filters"), ctx.attr("groups")
        ctx.check(groups > 0 and filters > 0 and filters % groups == 0,
                  f"attrs filters={filters}, groups={groups}: both must be > 0 and groups must divide filters")
        cin = x.shape[1] if first else x.shape[-1]
        ctx.check(cin % groups == 0, f"input 'in' has {cin} channels, not divisible by groups={groups}")
        k = list(ctx.attr("kernel_size"))
        want = (cin, filters // groups, *k) if first else (cin, *k, filters // groups)
        ctx.check(tuple(w.shape) == want, f"input 'weight' expected shape {want} (in_channels, filters/groups, "
                                          f"kernel_size for {fmt}), received {w.shape}")
        s, d = ctx.attr("strides"), ctx.attr("dilation_rate")
        p, op_ = ctx.attr("padding_before"), ctx.attr("output_padding")
        ctx.check(all(v > 0 for v in list(s) + list(d) + k), f"attrs strides {s}, dilation_rate {d} and "
                                                             f"kernel_size {k} must be positive")
        ctx.check(all(0 <= op_[i] < s[i] for i in range(n)),
                  f"attr 'output_padding' {op_} must be >= 0 and smaller than attr 'strides' {s} per dim")
        spatial = x.shape[2:] if first else x.shape[1:-1]
        out = tuple(deconv_out_size(spatial[i], k[i], p[i], s[i], d[i], op_[i]) for i in range(n))
        ctx.check(all(o > 0 for o in out), f"output spatial size {out} is not positive for input 'in' of shape "
                                           f"{x.shape}")
        shape = (x.shape[0], filters) + out if first else (x.shape[0],) + out + (filters,)
        ctx.set_output("out", shape, x.dtype)
    return infer


_TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _deconv_kernel(n):
    fn = _TRANSPOSED[n]

    def make(k):
        args = dict(stride=k.attr("strides"), padding=k.attr("padding_before"),
                    output_padding=k.attr("output_padding"), groups=k.attr("groups"), dilation=torch_dilation(k))
        dense = layout_for(k)
        if k.attr("data_format") == "channels_first":
            return lambda x, w: fn(dense(x), dense(w), None, **args)
        first = (0, n + 1, *range(1, n + 1))
        last = (0, *range(2, n + 2), 1)
        return lambda x, w: fn(dense(x.permute(first)), dense(w.permute(first)), None, **args).permute(last)
    return make


def _deconv_xla(n):
    """The data gradient of the convolution this op transposes (same attrs, ``weight``
    as its filter), taken at an output-shaped zero input."""
    def make(k):
        import jax
        conv = conv_xla_fn(k, n)
        out = k.output("out")

        def deconv(x, w):
            return jax.vjp(lambda z: conv(z, w), xla_rules.jnp().zeros(out.shape, out.dtype.np))[1](x)[0]
        return deconv
    return make


def _deconv_grad(n):
    def grad(g):
        dy = g.dout("out")
        if dy is None:
            return
        attrs = {a: g.attr(a) for a in ("padding_before", "data_format", "kernel_size", "strides", "dilation_rate",
                                        "groups")}
        if g.needs("weight"):
            g.set_grad("weight", g.emit("conv_filter_grad", {"dy": g.input("in"), "x": dy},
                                        {**attrs, "num_spatial_dims": n},
                                        name=f"System-AutoGrad-{g.op_name}-FilterGrad"))
        if g.needs("in"):
            cin = g.desc(g.input("in")).shape[1 if attrs["data_format"] == "channels_first" else -1]
            g.set_grad("in", g.emit(f"conv{n}d", {"in": dy, "weight": g.input("weight")},
                                    {**attrs, "filters": cin}, name=f"System-AutoGrad-{g.op_name}-DataGrad"))
    return grad


def _deconv_onnx(n):
    """deconvNd: ConvTranspose (symmetric padding_before, output_padding); channels_last
    input and weight are transposed to channels_first and the output back."""
    def convert(c):
        w = c.input("weight")
        if c.attr("data_format") != "channels_first":
            w = to_channels_first(c, w, n)

        def build(c, x, outs):
            p = list(c.attr("padding_before"))
            c.node("ConvTranspose", [x, w], outs, kernel_shape=list(c.attr("kernel_size")),
                   strides=list(c.attr("strides")), pads=p + p, dilations=list(c.attr("dilation_rate")),
                   output_padding=list(c.attr("output_padding")), group=c.attr("groups"))
        channels_first_io(c, n, "in", ["out"], build)
    return convert


for _n in (1, 2, 3):
    op(f"deconv{_n}d", inputs=["in", "weight"], outputs=["out"], attrs=DECONV_ATTRS, infer=_deconv_infer(_n),
       kernel=_deconv_kernel(_n), grad=_deconv_grad(_n), onnx=_deconv_onnx(_n), sbp=_sbp.conv("in", "weight", "out"),
       xla=_deconv_xla(_n),
       doc=f"{_n}-D transposed convolution (the data gradient of conv{_n}d as a forward op)")
