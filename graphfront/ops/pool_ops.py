"""PyTorch-style pooling and upsampling ops: ``maxpool_{1,2,3}d``, ``avgpool_{1,2,3}d``,
``adaptive_avg_pool{1,2,3}d``, ``upsample`` and their grads.

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/pool_op.cpp`` for the TF-style pools, ``pooling_op.cpp`` and
``avg_pooling_op.cpp`` for the PyTorch-style ones). The window arithmetic is
PyTorch's (OneFlow copied it): per spatial dim
``out = (n + 2p - dilation (k - 1) - 1 + s + (ceil_mode ? s - 1 : 0)) // s``, minus one
with ``ceil_mode`` when the last window would start at or beyond ``n + p``. ``padding``
is symmetric and at most half the kernel. ``maxpool`` also returns ``indice`` (int64,
shaped like ``y``): the flat position of each maximum inside its (N, C) plane, which
``maxpool_*_grad`` scatters ``dy`` back to.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F

from graphfront.framework import dtypes as _dt
from graphfront.ops import xla_rules
from graphfront.ops.common import vjp
from graphfront.ops.onnx_rules import channels_first_io, int64s, np_dtype
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

_aten = torch.ops.aten


def _to_first(t, n):
    return t.permute(0, n + 1, *range(1, n + 1))


def _to_last(t, n):
    return t.permute(0, *range(2, n + 2), 1)


def _layout(fn, n, first):
    """Run channels_first ``fn`` on a tensor of the op's ``data_format``."""
    if first:
        return fn
    return lambda x, *rest: _to_last(fn(_to_first(x, n), *rest), n)


def pool_out_size(size, k, pad, stride, dilation, ceil_mode):
    out = (size + 2 * pad - dilation * (k - 1) - 1 + stride + (stride - 1 if ceil_mode else 0)) // stride
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _check_data_format(ctx):
    fmt = ctx.attr("data_format")
    ctx.check(fmt in ("channels_first", "channels_last"),
              f"attr 'data_format' must be 'channels_first' or 'channels_last', received {fmt!r}")
    return fmt == "channels_first"


def _spatial(shape, first):
    return tuple(shape[2:]) if first else tuple(shape[1:-1])


def _with_spatial(shape, spatial, first):
    return tuple(shape[:2]) + tuple(spatial) if first else (shape[0],) + tuple(spatial) + (shape[-1],)


# ------------------------------------------------------------------ maxpool / avgpool

def _pool_infer(n, kind):
    def infer(ctx):
        first = _check_data_format(ctx)
        x = ctx.input("x")
        ctx.check(x.dtype.is_floating_point, f"input 'x' expected a floating dtype, received {x.dtype.name}")
        ctx.check(len(x.shape) == n + 2, f"input 'x' expected rank {n + 2}, received shape {x.shape}")
        lists = ("kernel_size", "stride", "padding") + (("dilation",) if kind == "max" else ())
        for a in lists:
            ctx.check(len(ctx.attr(a)) == n, f"attr '{a}' needs {n} entries, received {ctx.attr(a)}")
        k, s, p = ctx.attr("kernel_size"), ctx.attr("stride"), ctx.attr("padding")
        d = ctx.attr("dilation") if kind == "max" else [1] * n
        ctx.check(all(v > 0 for v in k) and all(v > 0 for v in s) and all(v > 0 for v in d),
                  f"attrs kernel_size {k}, stride {s}" + (f", dilation {d}" if kind == "max" else "")
                  + " must be positive")
        ctx.check(all(0 <= p[i] <= k[i] // 2 for i in range(n)),
                  f"attr 'padding' {p} must be >= 0 and at most half of kernel_size {k}")
        spatial = _spatial(x.shape, first)
        outs = [pool_out_size(spatial[i], k[i], p[i], s[i], d[i], ctx.attr("ceil_mode")) for i in range(n)]
        ctx.check(all(o > 0 for o in outs), f"pooling window {k} does not fit input 'x' of shape {x.shape} "
                                            f"(output size {outs})")
        shape = _with_spatial(x.shape, outs, first)
        ctx.set_output("y", shape, x.dtype)
        ctx.set_output("indice", shape, _dt.int64)
    return infer


_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _maxpool_fn(n, k):
    pool = _MAX[n]
    args = dict(kernel_size=k.attr("kernel_size"), stride=k.attr("stride"), padding=k.attr("padding"),
                dilation=k.attr("dilation"), ceil_mode=k.attr("ceil_mode"))

    def fn(x):
        return pool(x, return_indices=True, **args)
    return fn


def _maxpool_kernel(n):
    def make(k):
        first = k.attr("data_format") == "channels_first"
        fn = _maxpool_fn(n, k)
        if first:
            return fn

        def maxpool_last(x):
            y, idx = fn(_to_first(x, n))
            return _to_last(y, n), _to_last(idx, n)
        return maxpool_last
    return make


def _maxpool_grad_kernel(n):
    def make(k):
        first = k.attr("data_format") == "channels_first"

        def maxpool_grad(x, y, indice, dy):
            if not first:
                x, indice, dy = _to_first(x, n), _to_first(indice, n), _to_first(dy, n)
            dx = torch.zeros(x.shape[:2] + (x[0, 0].numel(),), dtype=dy.dtype, device=dy.device)
            dx.scatter_add_(2, indice.reshape(indice.shape[:2] + (-1,)), dy.reshape(dy.shape[:2] + (-1,)))
            dx = dx.reshape(x.shape)
            return dx if first else _to_last(dx, n)
        return maxpool_grad
    return make


def _avgpool_fn(n, k):
    pool = _AVG[n]
    args = dict(kernel_size=k.attr("kernel_size"), stride=k.attr("stride"), padding=k.attr("padding"),
                ceil_mode=k.attr("ceil_mode"), count_include_pad=k.attr("count_include_pad"))
    dv = k.attr("divisor_override")
    if dv and n == 1:
        # avg_pool1d has no divisor_override: pool the (N, C, L, 1) view in 2-D
        args2 = dict(kernel_size=(args["kernel_size"][0], 1), stride=(args["stride"][0], 1),
                     padding=(args["padding"][0], 0), ceil_mode=args["ceil_mode"],
                     count_include_pad=args["count_include_pad"], divisor_override=dv)
        return lambda x: F.avg_pool2d(x.unsqueeze(-1), **args2).squeeze(-1)
    if dv:
        args["divisor_override"] = dv
    return lambda x: pool(x, **args)


def _avgpool_kernel(n):
    def make(k):
        return _layout(_avgpool_fn(n, k), n, k.attr("data_format") == "channels_first")
    return make


def _avgpool_grad_kernel(n):
    def make(k):
        fn = _layout(_avgpool_fn(n, k), n, k.attr("data_format") == "channels_first")

        return lambda x, y, dy: vjp(fn, x, dy)
    return make


def _grad_like_x(ctx):
    x, dy = ctx.input("x"), ctx.input("dy")
    if ctx.has_input("y"):
        y = ctx.input("y")
        ctx.check(dy.shape == y.shape, f"input 'dy' expected shape {y.shape} (as 'y'), received {dy.shape}")
    ctx.set_output("dx", x.shape, x.dtype)


MAXPOOL_ATTRS = {"padding": "list_int32", "data_format": "string", "kernel_size": "list_int32",
                 "stride": "list_int32", "dilation": "list_int32", "return_indices": ("bool", False),
                 "ceil_mode": ("bool", False)}
AVGPOOL_ATTRS = {"padding": "list_int32", "data_format": "string", "kernel_size": "list_int32",
                 "stride": "list_int32", "ceil_mode": ("bool", False), "count_include_pad": ("bool", False),
                 "divisor_override": ("int64", 0)}


def _maxpool_grad_maker(t):
    def grad(g):
        if g.needs("x") and g.dout("y") is not None:
            g.set_grad("x", g.emit(f"{t}_grad", {"x": g.input("x"), "y": g.output("y"), "indice": g.output("indice"),
                                                 "dy": g.dout("y")}, g.attrs))
    return grad


def _avgpool_grad_maker(t):
    def grad(g):
        if g.needs("x") and g.dout("y") is not None:
            g.set_grad("x", g.emit(f"{t}_grad", {"x": g.input("x"), "y": g.output("y"), "dy": g.dout("y")}, g.attrs))
    return grad


def _pool_geometry_onnx(c, n, dilation):
    """(input spatial sizes, output spatial sizes, begin pads, end pads) of a PyTorch-style pool.

    ceil_mode is spelled as extra end padding up to the last window PyTorch keeps (one that
    starts inside the input or its begin padding), so ONNX's own ceil rule is not used."""
    d, out = c.input_desc("x"), c.output_desc("y")
    first = c.attr("data_format") == "channels_first"
    size, osize = (d.shape[2:], out.shape[2:]) if first else (d.shape[1:-1], out.shape[1:-1])
    k, s, p = c.attr("kernel_size"), c.attr("stride"), list(c.attr("padding"))
    end = [p[i] + max(0, (osize[i] - 1) * s[i] + dilation[i] * (k[i] - 1) + 1 - size[i] - 2 * p[i]) for i in range(n)]
    return list(size), list(osize), p, end


def _maxpool_onnx(n):
    """maxpool_Nd (PyTorch semantics): MaxPool; ``indice`` is the position inside each (N, C)
    plane: ONNX's indices (flat over the whole tensor) modulo the plane size."""
    def convert(c):
        dilation = list(c.attr("dilation"))
        size, _, begin, end = _pool_geometry_onnx(c, n, dilation)

        k = list(c.attr("kernel_size"))
        # onnxruntime wants pads smaller than the kernel: larger ones are padded with -inf
        # beforehand, and each index of the padded plane mapped back to the input's plane
        explicit = any(b >= k[i] or e >= k[i] for i, (b, e) in enumerate(zip(begin, end)))

        def build(c, x, outs):
            idx = c.tmp("indices")
            plane = size
            if explicit:
                low = np.array(-np.inf, dtype=np_dtype(c.input_desc("x")))
                x = c.node("Pad", [x, c.const(int64s([0, 0] + begin + [0, 0] + end)), c.const(low)])
                plane = [b + sz + e for b, sz, e in zip(begin, size, end)]
            c.node("MaxPool", [x], [outs[0], idx], kernel_shape=k, strides=list(c.attr("stride")),
                   pads=[0] * 2 * n if explicit else begin + end, dilations=dilation)
            if not explicit:
                c.node("Mod", [idx, c.const(np.int64(np.prod(size)))], [outs[1]])
                return
            # padded position -> input position (pad positions are never a window's maximum)
            inner = np.arange(int(np.prod(size)), dtype=np.int64).reshape(size)
            back = np.zeros(plane, dtype=np.int64)
            back[tuple(slice(b, b + sz) for b, sz in zip(begin, size))] = inner
            pos = c.node("Mod", [idx, c.const(np.int64(np.prod(plane)))])
            c.node("Gather", [c.const(back.reshape(-1)), pos], [outs[1]])
        channels_first_io(c, n, "x", ["y", "indice"], build)
    return convert


def _avg_divisors_onnx(size, osize, k, s, p, include_pad):
    """PyTorch's divisor of each output position along one dim: the window clipped to the
    padded input (include_pad) or to the input."""
    out = []
    for o in range(osize):
        start = o * s - p
        stop = min(start + k, size + p)
        out.append(stop - start if include_pad else min(stop, size) - max(start, 0))
    return np.array(out, dtype=np.float64)


def _avgpool_onnx(n):
    """avgpool_Nd (PyTorch semantics): AveragePool when no window hangs past the padding and
    there is no ``divisor_override``; otherwise the window sums (a depthwise convolution with
    ones over zero padding) divided by PyTorch's divisor of each position."""
    def convert(c):
        k, s = list(c.attr("kernel_size")), list(c.attr("stride"))
        size, osize, begin, end = _pool_geometry_onnx(c, n, [1] * n)
        dv, include_pad = c.attr("divisor_override"), c.attr("count_include_pad")
        d = c.input_desc("x")

        def build(c, x, outs):
            if not dv and end == begin:
                c.node("AveragePool", [x], outs, kernel_shape=k, strides=s, pads=begin + end,
                       count_include_pad=int(include_pad))
                return
            channels = d.shape[1] if c.attr("data_format") == "channels_first" else d.shape[-1]
            ones = c.const(np.ones([channels, 1] + k, dtype=np_dtype(d)))
            sums = c.node("Conv", [x, ones], kernel_shape=k, strides=s, pads=begin + end, group=channels)
            if dv:
                divisor = np.array(dv, dtype=np_dtype(d))
            else:
                divisor = np.ones([1, 1] + osize)
                for i in range(n):
                    shape = [1] * (n + 2)
                    shape[i + 2] = osize[i]
                    per_dim = _avg_divisors_onnx(size[i], osize[i], k[i], s[i], begin[i], include_pad)
                    divisor = divisor * per_dim.reshape(shape)
                divisor = divisor.astype(np_dtype(d))
            c.node("Div", [sums, c.const(divisor)], outs)
        channels_first_io(c, n, "x", ["y"], build)
    return convert


def _along_axes_onnx(c, x, rank, mats, out=None):
    """``x`` with each spatial axis ``2 + i`` mapped by the matrix ``mats[i]`` (from that axis's
    size to another): moved last, multiplied on the right, moved back. The adjoint of a separable
    pool or resize is its per-axis matrices transposed."""
    for i, m in enumerate(mats):
        axis = 2 + i
        perm = [a for a in range(rank) if a != axis] + [axis]
        back = list(np.argsort(perm))
        moved = c.node("MatMul", [c.node("Transpose", [x], perm=perm), c.const(m)])
        x = c.node("Transpose", [moved], None if out is None or i < len(mats) - 1 else [out], perm=back)
    return x


def _avgpool_grad_onnx(n):
    """avgpool_Nd_grad (PyTorch semantics): ``dy`` divided by the forward's divisor of each
    position (divisor_override, or the window clipped as ``count_include_pad`` says), then added
    back to each input of its window: per spatial dim, a 0/1 (output, input) window matrix."""
    def convert(c):
        d = c.input_desc("x")
        first = c.attr("data_format") == "channels_first"
        size = d.shape[2:] if first else d.shape[1:-1]
        dy = c.input_desc("dy").shape
        osize = dy[2:] if first else dy[1:-1]
        k, s, p = c.attr("kernel_size"), c.attr("stride"), c.attr("padding")
        dv, include_pad = c.attr("divisor_override"), c.attr("count_include_pad")
        mats, divisor = [], np.ones([1, 1] + list(osize))
        for i in range(n):
            m = np.zeros((osize[i], size[i]), dtype=np_dtype(d))
            for o in range(osize[i]):
                start = o * s[i] - p[i]
                m[o, max(start, 0):min(start + k[i], size[i])] = 1
            mats.append(m)
            view = [1] * (n + 2)
            view[i + 2] = osize[i]
            divisor = divisor * _avg_divisors_onnx(size[i], osize[i], k[i], s[i], p[i], include_pad).reshape(view)
        divisor = np.array(dv if dv else divisor, dtype=np_dtype(d))

        def build(c, dy, outs):
            _along_axes_onnx(c, c.node("Div", [dy, c.const(divisor)]), n + 2, mats, outs[0])
        channels_first_io(c, n, "dy", ["dx"], build)
    return convert


# ------------------------------------------------------------------ xla rules of maxpool / avgpool

def _pool_geometry_xla(k, n):
    """(channels_first shape of x, output spatial sizes, (begin, end) pads per spatial dim)
    of a PyTorch-style pool: ``end`` pads (or, negative, crops) up to the last window kept."""
    first = k.attr("data_format") == "channels_first"
    shape = tuple(k.input("x").shape)
    cf = shape if first else (shape[0], shape[-1]) + shape[1:-1]
    ks, s, p = k.attr("kernel_size"), k.attr("stride"), k.attr("padding")
    d = k.attrs.get("dilation") or [1] * n
    out = [pool_out_size(cf[2 + i], ks[i], p[i], s[i], d[i], k.attr("ceil_mode")) for i in range(n)]
    pads = [(p[i], (out[i] - 1) * s[i] + d[i] * (ks[i] - 1) + 1 - cf[2 + i] - p[i]) for i in range(n)]
    return cf, out, pads


def _maxpool_xla(n):
    """``(y, indice)``: each window's maximum and the flat position of its first maximum
    (row-major) in the input's (N, C) plane; pads hold -inf at a position past the plane,
    so an input element wins every tie with them (as torch's kernel)."""
    def make(k):
        import math
        jnp, lax = xla_rules.jnp(), xla_rules.lax()
        first = k.attr("data_format") == "channels_first"
        cf, _, pads = _pool_geometry_xla(k, n)
        plane = math.prod(cf[2:])
        window = (1, 1) + tuple(k.attr("kernel_size"))
        strides = (1, 1) + tuple(k.attr("stride"))
        dilation = (1, 1) + tuple(k.attr("dilation"))
        padding = [(0, 0), (0, 0)] + pads

        def maxpool(x):
            xf = x if first else xla_rules.to_channels_first(x, n)
            pos = jnp.broadcast_to(jnp.arange(plane, dtype=jnp.int64).reshape(cf[2:]), xf.shape)
            xf = lax.pad(xf, jnp.array(-jnp.inf, xf.dtype), [(b, e, 0) for b, e in padding])
            pos = lax.pad(pos, jnp.array(plane, jnp.int64), [(b, e, 0) for b, e in padding])
            y, idx = lax.reduce_window((xf, pos), (jnp.array(-jnp.inf, xf.dtype), jnp.array(plane, jnp.int64)),
                                       xla_rules.first_max, window, strides, "VALID", window_dilation=dilation)
            if not first:
                y, idx = xla_rules.to_channels_last(y, n), xla_rules.to_channels_last(idx, n)
            return y, idx
        return maxpool
    return make


def _maxpool_grad_xla(n):
    """``dy`` added at ``indice`` of each (N, C) plane of ``x``."""
    def make(k):
        first = k.attr("data_format") == "channels_first"
        x_shape = tuple(k.input("x").shape)
        cf = x_shape if first else (x_shape[0], x_shape[-1]) + x_shape[1:-1]

        def maxpool_grad(x, y, indice, dy):
            if not first:
                dy, indice = xla_rules.to_channels_first(dy, n), xla_rules.to_channels_first(indice, n)
            dx = xla_rules.scatter_add_planes(dy, indice, cf)
            return dx if first else xla_rules.to_channels_last(dx, n)
        return maxpool_grad
    return make


def _avgpool_xla_fn(n, k):
    """avgpool over a jax array in the op's data_format: window sums over zero padding
    divided by PyTorch's divisor of each position (divisor_override, or the window clipped
    to the padded input with count_include_pad, else to the input)."""
    jnp, lax = xla_rules.jnp(), xla_rules.lax()
    first = k.attr("data_format") == "channels_first"
    cf, out, pads = _pool_geometry_xla(k, n)
    ks, s, p = k.attr("kernel_size"), k.attr("stride"), k.attr("padding")
    dv, include_pad = k.attr("divisor_override"), k.attr("count_include_pad")
    dtype = xla_rules.opmath(k.input("x").dtype.np)
    if dv:
        divisor = np.array(dv, dtype=dtype)
    else:
        divisor = np.ones([1, 1] + list(out))
        for i in range(n):
            view = [1] * (n + 2)
            view[i + 2] = out[i]
            divisor = divisor * _avg_divisors_onnx(cf[2 + i], out[i], ks[i], s[i], p[i], include_pad).reshape(view)
        divisor = divisor.astype(dtype)
    window, strides = (1, 1) + tuple(ks), (1, 1) + tuple(s)
    padding = [(0, 0, 0), (0, 0, 0)] + [(b, e, 0) for b, e in pads]

    def avgpool(x):
        xf = (x if first else xla_rules.to_channels_first(x, n)).astype(dtype)
        total = lax.reduce_window(lax.pad(xf, jnp.array(0, xf.dtype), padding), 0.0, lax.add, window, strides,
                                  "VALID")
        y = (total / divisor).astype(x.dtype)
        return y if first else xla_rules.to_channels_last(y, n)
    return avgpool


def _avgpool_xla(n):
    return lambda k: _avgpool_xla_fn(n, k)


def _avgpool_grad_xla(n):
    def make(k):
        import jax
        fn = _avgpool_xla_fn(n, k)
        return lambda x, y, dy: jax.vjp(fn, x)[1](dy)[0]
    return make


for _n in (1, 2, 3):
    _t = f"maxpool_{_n}d"
    op(_t, inputs=["x"], outputs=["y", "indice"], attrs=MAXPOOL_ATTRS, infer=_pool_infer(_n, "max"),
       kernel=_maxpool_kernel(_n), grad=_maxpool_grad_maker(_t), sbp=_sbp.batch(), onnx=_maxpool_onnx(_n),
       xla=_maxpool_xla(_n),
       doc=f"{_n}-D max pooling (PyTorch semantics) with the int64 argmax 'indice'")
    op(f"{_t}_grad", inputs=["x", "y", "indice", "dy"], outputs=["dx"], attrs=MAXPOOL_ATTRS,
       infer=_grad_like_x, kernel=_maxpool_grad_kernel(_n), sbp=_sbp.batch(), xla=_maxpool_grad_xla(_n))
    _t = f"avgpool_{_n}d"
    op(_t, inputs=["x"], outputs=["y"], attrs=AVGPOOL_ATTRS, infer=_pool_infer(_n, "avg"),
       kernel=_avgpool_kernel(_n), grad=_avgpool_grad_maker(_t), sbp=_sbp.batch(), onnx=_avgpool_onnx(_n),
       xla=_avgpool_xla(_n),
       doc=f"{_n}-D average pooling (PyTorch semantics: count_include_pad, divisor_override)")
    op(f"{_t}_grad", inputs=["x", "y", "dy"], outputs=["dx"], attrs=AVGPOOL_ATTRS, infer=_grad_like_x,
       kernel=_avgpool_grad_kernel(_n), sbp=_sbp.batch(), xla=_avgpool_grad_xla(_n), onnx=_avgpool_grad_onnx(_n))


# ------------------------------------------------------------------ adaptive_avg_pool

def _adaptive_infer(n):
    def infer(ctx):
        x = ctx.input("x")
        ctx.check(x.dtype.is_floating_point, f"input 'x' expected a floating dtype, received {x.dtype.name}")
        ctx.check(len(x.shape) == n + 2, f"input 'x' expected rank {n + 2} (N, C, spatial...), received "
                                         f"shape {x.shape}")
        size = ctx.attr("output_size")
        ctx.check(len(size) in (1, n) and all(s > 0 for s in size),
                  f"attr 'output_size' needs 1 or {n} positive entries, received {size}")
        size = list(size) * n if len(size) == 1 else list(size)
        ctx.set_output("y", tuple(x.shape[:2]) + tuple(size), x.dtype)
    return infer


_ADAPTIVE = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


def _adaptive_fn(n, k):
    size = list(k.attr("output_size"))
    size = size * n if len(size) == 1 else size
    pool = _ADAPTIVE[n]
    return lambda x: pool(x, size)


def _adaptive_xla_fn(n, k):
    """adaptive_avg_pool over a jax array: per spatial dim, a 0/1 matrix sums each window
    [floor(i n / out), ceil((i + 1) n / out)); the sums are divided by the window sizes."""
    jnp, lax = xla_rules.jnp(), xla_rules.lax()
    shape, out = tuple(k.input("x").shape), list(k.attr("output_size"))
    out = out * n if len(out) == 1 else out
    acc = xla_rules.opmath(k.input("x").dtype.np)
    sums, counts = [], np.ones(out)
    for i, (size, o) in enumerate(zip(shape[2:], out)):
        starts = [j * size // o for j in range(o)]
        stops = [-(-(j + 1) * size // o) for j in range(o)]
        m = np.zeros((size, o))
        for j, (a, b) in enumerate(zip(starts, stops)):
            m[a:b, j] = 1.0
        sums.append(m.astype(acc))
        view = [1] * n
        view[i] = o
        counts = counts * np.array([b - a for a, b in zip(starts, stops)], dtype=np.float64).reshape(view)
    counts = counts.astype(acc)

    def adaptive_avg_pool(x):
        y = x.astype(acc)
        for i, m in enumerate(sums):  # sum along spatial dim i, kept in place
            y = jnp.moveaxis(jnp.tensordot(y, m, axes=[[2 + i], [0]], precision=lax.Precision.HIGHEST), -1, 2 + i)
        return (y / counts).astype(x.dtype)
    return adaptive_avg_pool


def _adaptive_grad_xla(n):
    def make(k):
        import jax
        fn = _adaptive_xla_fn(n, k)
        return lambda x, dy: jax.vjp(fn, x)[1](dy)[0]
    return make


def _adaptive_grad_kernel(n):
    def make(k):
        fn = _adaptive_fn(n, k)

        return lambda x, dy: vjp(fn, x, dy)
    return make


def _adaptive_avg_pool_onnx(n):
    """adaptive_avg_poolNd when each input size is a multiple of its output size (the windows
    are then the AveragePool windows of kernel = stride = input / output)."""
    def convert(c):
        size, out = c.input_desc("x").shape[2:], c.output_desc("y").shape[2:]
        if any(i % o for i, o in zip(size, out)):
            c.fail(f"output_size {tuple(out)} does not divide the input size {tuple(size)}; ONNX pooling has "
                   f"no windows of varying size")
        if all(o == 1 for o in out):
            c.node("GlobalAveragePool", [c.input("x")], [c.output("y")])
            return
        k = [i // o for i, o in zip(size, out)]
        c.node("AveragePool", [c.input("x")], [c.output("y")], kernel_shape=k, strides=k)
    return convert


def _adaptive_avg_pool_grad_onnx(c):
    """adaptive_avg_poolNd_grad: ``dy`` divided by each window's size, added back to the inputs
    of its window [floor(i n / out), ceil((i + 1) n / out)) through per-dim 0/1 matrices."""
    d = c.input_desc("x")
    size, out = d.shape[2:], c.input_desc("dy").shape[2:]
    mats, counts = [], np.ones([1, 1] + list(out))
    for i, (n, o) in enumerate(zip(size, out)):
        m = np.zeros((o, n), dtype=np_dtype(d))
        for j in range(o):
            m[j, j * n // o:-(-(j + 1) * n // o)] = 1
        mats.append(m)
        view = [1] * len(d.shape)
        view[i + 2] = o
        counts = counts * m.sum(axis=1, dtype=np.float64).reshape(view)
    scaled = c.node("Div", [c.input("dy"), c.const(counts.astype(np_dtype(d)))])
    _along_axes_onnx(c, scaled, len(d.shape), mats, c.output("dx"))


def _per_channel_sbp(linear):
    """adaptive_avg_pool, upsample and their grads: independent per sample and per channel
    (OneFlow declares the batch split only); linear in input ``linear`` (x, a grad's dy),
    whose partial sums give partial sums (the other inputs, read for their shapes, broadcast)."""
    def rule(ctx):
        channel = 3 if ctx.attrs.get("data_format") == "channels_last" else 1
        return [_sbp.signature(ctx, _sbp.split(k)) for k in (0, channel)] + [
            _sbp.partial_in(ctx, linear)]
    return rule


for _n in (1, 2, 3):
    _t = f"adaptive_avg_pool{_n}d"
    op(_t, inputs=["x"], outputs=["y"], attrs={"output_size": "list_int64"}, infer=_adaptive_infer(_n),
       kernel=lambda k, n=_n: _adaptive_fn(n, k), onnx=_adaptive_avg_pool_onnx(_n),
       xla=lambda k, n=_n: _adaptive_xla_fn(n, k), sbp=_per_channel_sbp("x"),
       grad=lambda g, t=_t: g.needs("x") and g.dout("y") is not None and g.set_grad("x", g.emit(
           f"{t}_grad", {"x": g.input("x"), "dy": g.dout("y")}, {"output_size": g.attr("output_size")})),
       doc=f"{_n}-D adaptive average pooling of channels_first input to 'output_size' "
           "(window i spans [floor(i n / out), ceil((i + 1) n / out)))")
    op(f"{_t}_grad", inputs=["x", "dy"], outputs=["dx"], attrs={"output_size": "list_int64"},
       infer=_grad_like_x, kernel=_adaptive_grad_kernel(_n), xla=_adaptive_grad_xla(_n),
       onnx=_adaptive_avg_pool_grad_onnx, sbp=_per_channel_sbp("dy"))


# ------------------------------------------------------------------ upsample

UPSAMPLE_ATTRS = {"height_scale": ("float", 0.0), "width_scale": ("float", 0.0), "align_corners": ("bool", False),
                  "data_format": "string", "interpolation": "string"}


def _upsample_infer(ctx):
    x = ctx.input("x")
    ctx.check(x.dtype.is_floating_point, f"input 'x' expected a floating dtype, received {x.dtype.name}")
    ctx.check(len(x.shape) == 4, f"input 'x' expected rank 4, received shape {x.shape}")
    first = _check_data_format(ctx)
    mode = ctx.attr("interpolation")
    ctx.check(mode in ("nearest", "bilinear"), f"attr 'interpolation' must be 'nearest' or 'bilinear', "
                                               f"received {mode!r}")
    hs, ws = ctx.attr("height_scale"), ctx.attr("width_scale")
    ctx.check(hs > 0 and ws > 0, f"attrs 'height_scale' {hs} and 'width_scale' {ws} must be > 0")
    h, w = _spatial(x.shape, first)
    out = (int(h * hs), int(w * ws))
    ctx.check(out[0] > 0 and out[1] > 0, f"output size {out} is empty for input 'x' of shape {x.shape}")
    ctx.set_output("y", _with_spatial(x.shape, out, first), x.dtype)


def _upsample_fn(k):
    mode = k.attr("interpolation")
    scale = (k.attr("height_scale"), k.attr("width_scale"))
    extra = {"align_corners": k.attr("align_corners")} if mode == "bilinear" else {}

    def fn(x):
        # the attr scales (not the size ratio) map output to source indices, as OneFlow
        return F.interpolate(x, scale_factor=scale, mode=mode, recompute_scale_factor=False, **extra)
    return _layout(fn, 2, k.attr("data_format") == "channels_first")


def _upsample_sources(k, size, out, scale):
    """Static source positions of an upsample along one spatial dim, in the CPU kernel's
    arithmetic (float32 for float32/float16 inputs, float64 for float64); a dim whose size
    does not change is copied. Nearest: ``min(floor(dst * (1 / scale)), size - 1)``;
    bilinear: ``(lo, hi, w_lo, w_hi)`` of the source ``dst * (size - 1) / (out - 1)``
    (align_corners) or ``max((dst + 0.5) / scale - 0.5, 0)``, ``lo`` its floor (at most
    ``size - 1``), ``hi`` the next position inside the input, ``w_hi`` in [0, 1]."""
    acc = xla_rules.opmath(k.input("x").dtype.np).type
    dst = np.arange(out).astype(acc)
    nearest = k.attr("interpolation") == "nearest"
    if out == size:
        same = np.arange(out, dtype=np.int64)
        return same if nearest else (same, same, np.ones(out, acc), np.zeros(out, acc))
    if nearest:
        return np.minimum(np.floor(dst * acc(1.0 / scale)).astype(np.int64), size - 1)
    if k.attr("align_corners"):
        src = dst * (acc(size - 1) / acc(out - 1)) if out > 1 else np.zeros(out, acc)
    else:
        src = np.maximum(acc(1.0 / scale) * (dst + acc(0.5)) - acc(0.5), acc(0))
    lo = np.minimum(np.floor(src).astype(np.int64), size - 1)
    hi = lo + (lo < size - 1)
    w_hi = np.clip(src - lo.astype(acc), acc(0), acc(1)).astype(acc)
    return lo, hi, (acc(1) - w_hi).astype(acc), w_hi


def _upsample_xla(k):
    """upsample by gathers at the static source positions (:func:`_upsample_sources`);
    bilinear as the kernel: ``w_lo_h (w_lo_w x00 + w_hi_w x01) + w_hi_h (w_lo_w x10 + w_hi_w x11)``."""
    jnp = xla_rules.jnp()
    first = k.attr("data_format") == "channels_first"
    shape = tuple(k.input("x").shape)
    h, w = _spatial(shape, first)
    oh, ow = int(h * k.attr("height_scale")), int(w * k.attr("width_scale"))
    ha, wa = (2, 3) if first else (1, 2)
    dtype = xla_rules.opmath(k.input("x").dtype.np)
    rows = _upsample_sources(k, h, oh, k.attr("height_scale"))
    cols = _upsample_sources(k, w, ow, k.attr("width_scale"))
    if k.attr("interpolation") == "nearest":
        return lambda x: jnp.take(jnp.take(x, rows, axis=ha), cols, axis=wa)
    hview, wview = [1] * 4, [1] * 4
    hview[ha], wview[wa] = oh, ow
    h_lo, h_hi = (wt.reshape(hview).astype(dtype) for wt in rows[2:])
    w_lo, w_hi = (wt.reshape(wview).astype(dtype) for wt in cols[2:])

    def upsample(x):
        xa = x.astype(dtype)
        top, bottom = jnp.take(xa, rows[0], axis=ha), jnp.take(xa, rows[1], axis=ha)
        row = lambda t: w_lo * jnp.take(t, cols[0], axis=wa) + w_hi * jnp.take(t, cols[1], axis=wa)  # noqa: E731
        return (h_lo * row(top) + h_hi * row(bottom)).astype(x.dtype)
    return upsample


def _upsample_grad_xla(k):
    import jax
    fn = _upsample_xla(k)
    return lambda dy, x: jax.vjp(fn, x)[1](dy)[0]


def _upsample_grad_kernel(k):
    fn = _upsample_fn(k)

    return lambda dy, x: vjp(fn, x, dy)


def _upsample_grad_infer(ctx):
    ctx.set_output("dx", ctx.input("x").shape, ctx.input("x").dtype)


def _upsample_onnx(c):
    """upsample by the attr scales: Resize nearest (floor of dst / scale, the "asymmetric"
    transform) or linear ("half_pixel", or "align_corners" with align_corners)."""
    first = c.attr("data_format") == "channels_first"
    scales = np.ones(4, dtype=np.float32)
    scales[[2, 3] if first else [1, 2]] = [c.attr("height_scale"), c.attr("width_scale")]
    if c.attr("interpolation") == "nearest":
        mode = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    else:
        mode = dict(mode="linear", coordinate_transformation_mode="align_corners" if c.attr("align_corners")
                    else "half_pixel")
    c.node("Resize", [c.input("x"), "", c.const(scales)], [c.output("y")], **mode)


def _upsample_grad_onnx(c):
    """upsample_grad: per spatial dim, the (output, input) matrix of the forward's static sources
    (:func:`_upsample_sources`: a one per row for nearest, the two bilinear weights) applied
    transposed to ``dy``."""
    d = c.input_desc("x")
    first = c.attr("data_format") == "channels_first"
    h, w = _spatial(d.shape, first)
    oh, ow = _spatial(c.input_desc("dy").shape, first)
    sources = SimpleNamespace(input=c.input_desc, attr=c.attr)  # what _upsample_sources reads of a kernel
    mats = []
    for size, out, scale in ((h, oh, c.attr("height_scale")), (w, ow, c.attr("width_scale"))):
        src = _upsample_sources(sources, size, out, scale)
        m = np.zeros((out, size), dtype=np.float64)
        if c.attr("interpolation") == "nearest":
            m[np.arange(out), src] = 1
        else:
            lo, hi, w_lo, w_hi = src
            np.add.at(m, (np.arange(out), lo), w_lo)
            np.add.at(m, (np.arange(out), hi), w_hi)
        mats.append(m.astype(np_dtype(d)))
    channels_first_io(c, 2, "dy", ["dx"], lambda c, dy, outs: _along_axes_onnx(c, dy, 4, mats, outs[0]))


op("upsample", inputs=["x"], outputs=["y"], attrs=UPSAMPLE_ATTRS, infer=_upsample_infer, kernel=_upsample_fn,
   onnx=_upsample_onnx, xla=_upsample_xla, sbp=_per_channel_sbp("x"),
   grad=lambda g: g.needs("x") and g.dout("y") is not None and g.set_grad("x", g.emit(
       "upsample_grad", {"dy": g.dout("y"), "x": g.input("x")}, g.attrs)),
   doc="2-D nearest/bilinear upsampling by (height_scale, width_scale); output size int(n * scale)")
op("upsample_grad", inputs=["dy", "x"], outputs=["dx"], attrs=UPSAMPLE_ATTRS, infer=_upsample_grad_infer,
   kernel=_upsample_grad_kernel, xla=_upsample_grad_xla, onnx=_upsample_grad_onnx, sbp=_per_channel_sbp("dy"))
