"""Fused and folded ops that graphfront's completion passes write into a Job.

Passes run after autograd, so these ops appear only in *completed* jobs (see
``graphfront/passes/fusion.py``, ``fold.py`` and ``update_group.py``); users do not
build them. Names follow OneFlow where OneFlow has such an op; ops that exist only in
graphfront are named ``fused_*`` (or ``folded_constant``) and say so below.

=================================  =======  ================================================
op type                            origin   computes
=================================  =======  ================================================
``fused_matmul_bias``              OneFlow  ``out = x @ weight^T + bias (+ _add_to_output)``
                                            (``F.linear``; weight is ``(N, K)``)
``fused_bias_add_relu``            gf       ``out = relu(a + b)``, ``b`` along ``axis``
``fused_scalar_mul_add``           gf       ``out = in * scale + shift`` (floating ``in``)
``fused_conv_grad``                gf       ``dx``, ``filter_diff``, ``bias_diff`` of one
                                            convolution from the same ``dy`` in one
                                            ``convolution_backward`` call (the outputs
                                            present choose what is computed)
``fused_layer_norm_grad``          gf       a layer norm's ``dx``, ``gamma_diff`` and
                                            ``beta_diff`` in one
                                            ``native_layer_norm_backward`` (defined with
                                            the layer norm ops, ``norm_ops.py``)
``fused_tf_max_pool_{1,2,3}d``     gf       ``tf_max_pool_*`` that also returns the int64
                                            argmax ``indices`` (on a CPU computed in
                                            channels-last memory layout, much faster
                                            there)
``fused_tf_max_pool_{1,2,3}d_grad`` gf      scatters ``dy`` (+ ``dy_addend``, where
                                            ``fuse_add_to_output`` gives one) through
                                            ``indices``; with attr
                                            ``relu_grad`` it also applies ``relu_grad``
                                            with ``y`` = the pool's input: the argmax of
                                            a window is > 0 exactly when the window's max
                                            (input ``y``) is, so ``dy`` is masked before
                                            the scatter, on the 4x smaller blob
``folded_constant``                gf       a constant tensor: the value of a folded
                                            subgraph (see below)
``multi_tensor_sgd_update``        OneFlow  ``sgd_update`` over lists of models/grads in
                                            PyTorch's fused SGD kernel (a
                                            ``torch._foreach_*`` sequence with decoupled
                                            ``weight_decay``)
``multi_tensor_momentum_update``   OneFlow  ``momentum_update`` likewise
``multi_scalar_mul_by_tensor``     gf       ``y_i = x_i * scalar`` for every ``x_i``, each
                                            cast to the scalar's dtype first where
                                            narrower (one ``scalar_mul_by_tensor`` or
                                            ``fused_cast_scale`` each) in a few
                                            multi-tensor kernels: the loss-scale undo of
                                            a job's gradients
``multi_cast``                     gf       ``out_i = cast(in_i)`` for every ``in_i`` (one
                                            source and one target dtype) in a few
                                            multi-tensor kernels: the float32 variables'
                                            casts of a mixed-precision step
``multi_tensor_adam_update``       gf       ``adam_update`` (Adam / AdamW) over lists of
                                            models, grads, ``m``, ``v``, ``max_v`` in one
                                            fused kernel; bias correction from input
                                            ``train_step`` (see below)
=================================  =======  ================================================

``folded_constant`` (graphfront only; OneFlow's ``constant`` holds a scalar fill only):
attrs ``shape`` (Shape), ``dtype`` (DataType) and ``data`` (string): the base64 text of
the value's C-contiguous little-endian bytes. This is exact for every dtype (float64 and
bfloat16 included) and survives text-proto round trips.

The update formulas of the ``multi_tensor_*`` ops are those of ``sgd_update`` and
``momentum_update`` (``graphfront/ops/optimizer_ops.py``): ``g = scale * model_diff
(* scale_by_tensor) + l1 * sign(w) + l2 * w``; SGD ``w -= lr * (g + wd * w)``; momentum
``m = beta * m - lr * g; w += m - lr * wd * w``. Their arguments mirror the single-tensor
ops with repeated ``model``/``model_diff``/``momentum``.

``multi_tensor_adam_update`` (graphfront only: OneFlow's later op of that role takes the
``bias_correction1/2`` blobs; this one takes ``train_step`` and computes
``bc = 1 - beta ** (train_step + 1)`` itself, ``bc = 1`` without ``do_bias_correction``)
runs PyTorch's fused AdamW kernel (``torch._fused_adamw_``, the kernel of
``torch.optim.AdamW(fused=True)``): ``w -= lr * wd * w``; ``m = b1 m + (1-b1) g``;
``v = b2 v + (1-b2) g^2``; ``w -= lr/bc1 * m / (sqrt(v or max_v)/sqrt(bc2) + eps)`` with
``g = model_diff * scale * scale_by_tensor``. That is ``adam_update``'s formula with the
decay taken before the step, so results agree with it to float rounding (a few ulps a
step), not bitwise. A non-zero ``skip_if`` skips the whole update inside the kernel,
without a host read. No ``l1`` / ``l2`` (such updates are not grouped).
"""
from __future__ import annotations

import base64
import math
import types

import numpy as np
import torch
import torch.nn.functional as F

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import host_skipped, in_layout_of, keep_unless_skipped, like, reads_host, same_dtype
from graphfront.ops.nn_ops import (CONV_GRAD_ATTRS, POOL_ATTRS, ConvRoute, _pool_infer, bias_add_infer,
                                   conv_data_grad_onnx, conv_filter_grad_onnx, conv_xla_fn, pool_geometry,
                                   torch_dilation)
from graphfront.ops import common, onnx_rules, optimizer_ops, xla_rules
from graphfront.ops.onnx_rules import channels_first_io, const_as, int64s, np_dtype
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

_aten = torch.ops.aten


def _to_first(t, n):
    return t.permute(0, n + 1, *range(1, n + 1))


def _to_last(t, n):
    return t.permute(0, *range(2, n + 2), 1)


# ------------------------------------------------------------------ fused_matmul_bias

def _matmul_bias_infer(ctx):
    x, w, b = ctx.input("x"), ctx.input("weight"), ctx.input("bias")
    ctx.check(len(x.shape) == 2, f"input 'x' expected rank 2, received shape {x.shape}")
    ctx.check(len(w.shape) == 2 and w.shape[1] == x.shape[1],
              f"input 'weight' expected shape (N, {x.shape[1]}), received {w.shape}")
    ctx.check(b.shape == (w.shape[0],), f"input 'bias' expected shape {(w.shape[0],)}, received {b.shape}")
    same_dtype(ctx, "x", "weight", "bias")
    ctx.set_output("out", (x.shape[0], w.shape[0]), x.dtype)


def _matmul_bias_kernel(k):
    def fused_matmul_bias(x, w, b, add_to):
        out = F.linear(x, w, b)
        return out if add_to is None else out.add_(add_to)
    return fused_matmul_bias


def _matmul_bias_grad(g):
    dy = g.dout("out")
    if g.needs("x"):
        g.set_grad("x", g.emit("matmul", {"a": dy, "b": g.input("weight")}, name=f"{g.op_name}_grad_x"))
    if g.needs("weight"):
        g.set_grad("weight", g.emit("matmul", {"a": dy, "b": g.input("x")}, {"transpose_a": True},
                                    name=f"{g.op_name}_grad_weight"))
    if g.needs("bias"):
        g.set_grad("bias", g.emit("reduce_sum", {"input_tensor": dy}, {"axis": [0], "keepdims": False},
                                  name=f"{g.op_name}_grad_bias"))
    if g.needs("_add_to_output"):
        g.set_grad("_add_to_output", dy)


def _fused_matmul_bias_onnx(c):
    """x @ weight^T + bias (+ _add_to_output)."""
    add_to = c.input("_add_to_output")
    y = c.node("Gemm", [c.input("x"), c.input("weight"), c.input("bias")], None if add_to else [c.output("out")],
               transB=1)
    if add_to:
        c.node("Add", [y, add_to], [c.output("out")])


op("fused_matmul_bias", inputs=["x", "weight", "bias", "_add_to_output?"], outputs=["out"],
   infer=_matmul_bias_infer, kernel=_matmul_bias_kernel, grad=_matmul_bias_grad, sbp=_sbp.linear_bias,
   xla=lambda k: (lambda x, w, b, add_to: x @ w.T + b if add_to is None else x @ w.T + b + add_to),
   onnx=_fused_matmul_bias_onnx,
   doc="out = x @ weight^T + bias (F.linear); written by the fusion pass for matmul + bias_add")


# ------------------------------------------------------------------ fused_bias_add_relu

def _bias_add_relu_kernel(k):
    ndim, axis = len(k.input("a").shape), k.attr("axis")
    view = [1] * ndim
    view[axis] = -1

    def fused_bias_add_relu(a, b):
        return torch.relu_(a + b.view(view))
    return fused_bias_add_relu


def _bias_add_relu_xla(k):
    view = [-1 if i == k.attr("axis") else 1 for i in range(len(k.input("a").shape))]
    return lambda a, b: xla_rules.jnp().maximum(a + b.reshape(view), 0)


op("fused_bias_add_relu", inputs=["a", "b"], outputs=["out"], attrs={"axis": ("int32", 0)},
   infer=bias_add_infer, kernel=_bias_add_relu_kernel, sbp=_sbp.bias_add, onnx=onnx_rules.bias_add_then("Relu"),
   xla=_bias_add_relu_xla,
   doc="graphfront-only: relu(bias_add(a, b, axis)); written by the fusion pass")


# ------------------------------------------------------------------ fused_scalar_mul_add

def _scalar_mul_add_infer(ctx):
    x = ctx.input("in")
    ctx.check(x.dtype.is_floating_point, f"input 'in' expected a floating dtype, received {x.dtype.name}")
    ctx.set_output("out", x.shape, x.dtype)


def _scalar_mul_add_kernel(k):
    scale, shift = k.attr("scale"), k.attr("shift")

    def fused_scalar_mul_add(x):
        return torch.mul(x, scale).add_(shift)
    return fused_scalar_mul_add


def _fused_scalar_mul_add_onnx(c):
    d = c.input_desc("in")
    c.node("Add", [c.node("Mul", [c.input("in"), const_as(c, c.attr("scale"), d)]), const_as(c, c.attr("shift"), d)],
           [c.output("out")])


op("fused_scalar_mul_add", inputs=["in"], outputs=["out"],
   attrs={"scale": ("double", 1.0), "shift": ("double", 0.0)}, infer=_scalar_mul_add_infer,
   kernel=_scalar_mul_add_kernel, onnx=_fused_scalar_mul_add_onnx, sbp=_sbp.elementwise(),
   xla=lambda k: (lambda x: x * k.attr("scale") + k.attr("shift")),
   doc="graphfront-only: out = in * scale + shift; written by the fusion pass for scalar_mul + scalar_add")


# ------------------------------------------------------------------ fused_conv_grad

def _conv_grad_infer(ctx):
    n = ctx.attr("num_spatial_dims")
    ctx.check(1 <= n <= 3, f"attr 'num_spatial_dims' must be 1..3, received {n}")
    ctx.check(ctx.attr("data_format") == "channels_first",
              f"attr 'data_format' must be 'channels_first', received {ctx.attr('data_format')!r}")
    dy, x = ctx.input("dy"), ctx.input("x")
    ctx.check(len(dy.shape) == n + 2 and len(x.shape) == n + 2, f"inputs 'dy' and 'x' must have rank {n + 2}")
    groups = ctx.attr("groups")
    wshape = (dy.shape[1], x.shape[1] // groups) + tuple(ctx.attr("kernel_size"))
    if ctx.has_input("filter"):
        ctx.check(ctx.input("filter").shape == wshape,
                  f"input 'filter' expected shape {wshape}, received {ctx.input('filter').shape}")
    ctx.check(ctx.has_output("filter_diff") or ctx.has_input("filter"),
              "input 'filter' is required unless output 'filter_diff' is requested")
    ctx.set_output("dx", x.shape, x.dtype)
    ctx.set_output("filter_diff", wshape, x.dtype)
    ctx.set_output("bias_diff", (dy.shape[1],), dy.dtype)


def _conv_grad_kernel(k):
    n = k.attr("num_spatial_dims")
    padding, dilation, groups = k.attr("padding_before"), torch_dilation(k), k.attr("groups")
    dy_shape, x_desc = k.input("dy").shape, k.input("x")
    wshape = (dy_shape[1], x_desc.shape[1] // groups) + tuple(k.attr("kernel_size"))
    mask = [k.has_output("dx"), k.has_output("filter_diff"), k.has_output("bias_diff")]
    bias_sizes = [dy_shape[1]] if mask[2] else None
    route = ConvRoute(k, x_desc)
    dense = route.dense
    placeholder = None if k.has_input("filter") else \
        dense(torch.empty(wshape, dtype=x_desc.dtype.torch, device=k.device))

    def fused_conv_grad(dy, w, x):
        if not route.last:  # (else dense makes every operand channels-last)
            dy = in_layout_of(dy, x)
        dx, dw, db = _aten.convolution_backward(dense(dy), dense(route.view(x)),
                                                placeholder if w is None else dense(w), bias_sizes, route.stride,
                                                padding, dilation, False, [0] * n, groups, mask)
        if mask[0]:
            dx = route.scatter(dx, x)
        return tuple(r if m else None for r, m in zip((dx, dw, db), mask))
    return fused_conv_grad


def _conv_grad_xla(k):
    import jax
    n = k.attr("num_spatial_dims")
    conv = conv_xla_fn(k, n)
    x_desc = k.input("x")
    wshape = (k.input("dy").shape[1], x_desc.shape[1] // k.attr("groups")) + tuple(k.attr("kernel_size"))
    want = [k.has_output("dx"), k.has_output("filter_diff"), k.has_output("bias_diff")]
    axes = (0,) + tuple(range(2, n + 2))

    def fused_conv_grad(dy, w, x):
        if w is None:  # the filter's value does not enter its own gradient
            w = xla_rules.jnp().zeros(wshape, x_desc.dtype.np)
        dx = dw = None
        if want[0] and want[1]:
            dx, dw = jax.vjp(conv, x, w)[1](dy)
        elif want[0]:
            dx = jax.vjp(lambda v: conv(v, w), x)[1](dy)[0]
        elif want[1]:
            dw = jax.vjp(lambda v: conv(x, v), w)[1](dy)[0]
        return dx, dw, dy.sum(axis=axes) if want[2] else None
    return fused_conv_grad


def _conv_grad_onnx(c):
    """The requested ones of conv_data_grad, conv_filter_grad and conv_bias_grad's ONNX forms (channels_first)."""
    dy, x = c.input_desc("dy"), c.input_desc("x")
    if c.output("dx"):
        dx = conv_data_grad_onnx(c, c.input("dy"), c.input("filter"), dy.shape[2:], x.shape[2:])
        c.node("Identity", [dx], [c.output("dx")])
    if c.output("filter_diff"):
        w = conv_filter_grad_onnx(c, c.input("x"), c.input("dy"), x.shape[1], dy.shape[1])
        c.node("Identity", [w], [c.output("filter_diff")])
    if c.output("bias_diff"):
        onnx_rules.reduce_node(c, "ReduceSum", c.input("dy"), [0] + list(range(2, len(dy.shape))), 0,
                               c.output("bias_diff"))


op("fused_conv_grad", inputs=["dy", "filter?", "x"], outputs=["dx?", "filter_diff?", "bias_diff?"],
   attrs=CONV_GRAD_ATTRS, infer=_conv_grad_infer, kernel=_conv_grad_kernel, xla=_conv_grad_xla, onnx=_conv_grad_onnx,
   sbp=_sbp.conv("dy", "filter", "dx", weight_grads=("filter_diff", "bias_diff")),
   doc="graphfront-only: conv_data_grad + conv_filter_grad + conv_bias_grad on one dy in one "
       "convolution_backward call (channels_first)")


# ------------------------------------------------------------------ fused_tf_max_pool_{n}d

def _pool_plan(n, k):
    """Static geometry of a fused pool: pads for F.pad, window, the 2-D/3-D aten ops."""
    first = k.attr("data_format") == "channels_first"
    x_shape = tuple(k.input("x").shape)
    spatial = x_shape[2:] if first else x_shape[1:-1]
    _, pads = pool_geometry(spatial, k.attrs)
    size, stride = list(k.attr("pool_size")), list(k.attr("strides"))
    flat = [p for pair in reversed(pads) for p in pair]
    if n == 1:  # pool (N, C, L) as (N, C, 1, L)
        size, stride, pads = [1] + size, [1] + stride, [(0, 0)] + pads
    dims = len(size)
    return {
        "first": first, "pads": pads, "flat": flat if any(flat) else None, "size": size, "stride": stride,
        "fwd": _aten.max_pool2d_with_indices if dims == 2 else _aten.max_pool3d_with_indices,
        "bwd": _aten.max_pool2d_with_indices_backward if dims == 2 else _aten.max_pool3d_with_indices_backward,
        "fmt": torch.channels_last if dims == 2 else torch.channels_last_3d,
        "zeros": [0] * dims, "ones": [1] * dims,
    }


def _layout(x, channels_last):
    """``channels_last`` (a torch memory format) where ``x`` is laid out so and not also
    contiguous, else ``torch.contiguous_format``."""
    return channels_last if x.is_contiguous(memory_format=channels_last) and not x.is_contiguous() \
        else torch.contiguous_format


def _fused_pool_kernel(n):
    def make(k):
        p = _pool_plan(n, k)
        # the CPU's max pool is several times faster channels-last; a GPU's pools the layout it gets
        # (converting an NCHW activation would copy it, and later its gradient and indices back)
        to_last = k.device.type == "cpu"
        relu = k.attr("relu")

        def fused_tf_max_pool(x):
            xf = x if p["first"] else _to_first(x, n)
            if p["flat"] is not None:
                xf = F.pad(xf, p["flat"], value=-math.inf)
            if n == 1:
                xf = xf.unsqueeze(2)
            xf = xf.contiguous(memory_format=p["fmt"] if to_last else _layout(xf, p["fmt"]))
            y, idx = p["fwd"](xf, p["size"], p["stride"], p["zeros"], p["ones"], False)
            if relu:  # max(relu(window)) == relu(max(window)): relu on the 4x smaller output
                y = y.relu_()
            if n == 1:
                y, idx = y.squeeze(2), idx.squeeze(2)
            if not p["first"]:
                y, idx = _to_last(y, n), _to_last(idx, n)
            return y, idx
        return common.inductor_kernel(common.inductor_key(k), fused_tf_max_pool)
    return make


def _fused_pool_grad_kernel(n):
    def make(k):
        p = _pool_plan(n, k)
        x_shape = tuple(k.input("x").shape)
        cf_shape = x_shape if p["first"] else (x_shape[0], x_shape[-1]) + x_shape[1:-1]
        padded = list(cf_shape[:2]) + [s + b + a for s, (b, a) in zip(cf_shape[2:], p["pads"][-n:])]
        if n == 1:
            padded.insert(2, 1)
        crop = tuple(slice(b, b + s) for s, (b, a) in zip(cf_shape[2:], p["pads"][-n:]))

        relu = k.attr("relu_grad")

        def fused_tf_max_pool_grad(x, y, indices, dy, dy_addend):
            if dy_addend is not None:
                dy = dy + dy_addend
            if relu:  # the argmax of a window is > 0 exactly when the window's max is
                dy = _aten.threshold_backward(dy, y, 0)
            if not p["first"]:
                dy, indices = _to_first(dy, n), _to_first(indices, n)
            if n == 1:
                dy, indices = dy.unsqueeze(2), indices.unsqueeze(2)
            # dx in the memory layout of x (what the op consuming dx next works best on)
            fmt = _layout(x if p["first"] else _to_first(x, n), p["fmt"]) if n > 1 else torch.contiguous_format
            like_ = torch.empty(padded, dtype=dy.dtype, device=dy.device, memory_format=fmt)
            dx = p["bwd"](dy.contiguous(memory_format=fmt), like_, p["size"], p["stride"], p["zeros"],
                          p["ones"], False, indices.contiguous(memory_format=fmt))
            if n == 1:
                dx = dx.squeeze(2)
            if p["flat"] is not None:
                dx = dx[(slice(None), slice(None)) + crop]
            return dx if p["first"] else _to_last(dx, n)
        return common.inductor_kernel(common.inductor_key(k), fused_tf_max_pool_grad)
    return make


def _fused_pool_xla(n):
    """``(y, indices)``: each window's maximum and the flat position of its first maximum
    (row-major) in the padded (N, C) plane, as ``max_pool*_with_indices`` returns them."""
    def make(k):
        jnp, lax = xla_rules.jnp(), xla_rules.lax()
        first = k.attr("data_format") == "channels_first"
        x_shape = tuple(k.input("x").shape)
        spatial = x_shape[2:] if first else x_shape[1:-1]
        _, pads = pool_geometry(spatial, k.attrs)
        padded = tuple(s + b + a for s, (b, a) in zip(spatial, pads))
        window, strides = (1, 1) + tuple(k.attr("pool_size")), (1, 1) + tuple(k.attr("strides"))
        relu = k.attr("relu")

        def fused_tf_max_pool(x):
            xf = x if first else xla_rules.to_channels_first(x, n)
            xf = jnp.pad(xf, [(0, 0), (0, 0)] + list(pads), constant_values=-jnp.inf)
            plane = math.prod(padded)
            pos = jnp.broadcast_to(jnp.arange(plane, dtype=jnp.int64).reshape(padded), xf.shape)
            y, idx = lax.reduce_window((xf, pos), (jnp.array(-jnp.inf, xf.dtype), jnp.array(plane, jnp.int64)),
                                       xla_rules.first_max, window, strides, "VALID")
            if relu:
                y = jnp.maximum(y, 0)
            if not first:
                y, idx = xla_rules.to_channels_last(y, n), xla_rules.to_channels_last(idx, n)
            return y, idx
        return fused_tf_max_pool
    return make


def _fused_pool_grad_xla(n):
    """``dy`` added at the ``indices`` of the padded plane, then the pads cropped."""
    def make(k):
        jnp = xla_rules.jnp()
        first = k.attr("data_format") == "channels_first"
        x_shape = tuple(k.input("x").shape)
        cf = x_shape if first else (x_shape[0], x_shape[-1]) + x_shape[1:-1]
        _, pads = pool_geometry(cf[2:], k.attrs)
        padded = tuple(s + b + a for s, (b, a) in zip(cf[2:], pads))
        crop = tuple(slice(b, b + s) for s, (b, a) in zip(cf[2:], pads))
        relu = k.attr("relu_grad")

        def fused_tf_max_pool_grad(x, y, indices, dy, dy_addend):
            if dy_addend is not None:
                dy = dy + dy_addend
            if relu:
                dy = jnp.where(y > 0, dy, 0)
            if not first:
                dy, indices = xla_rules.to_channels_first(dy, n), xla_rules.to_channels_first(indices, n)
            dx = xla_rules.scatter_add_planes(dy, indices, cf[:2] + padded)[(slice(None), slice(None)) + crop]
            return dx if first else xla_rules.to_channels_last(dx, n)
        return fused_tf_max_pool_grad
    return make


def _fused_pool_infer(n):
    base = _pool_infer(n)

    def infer(ctx):
        base(ctx)
        ctx.set_output("indices", ctx.out[ctx.output_lbn("y")].shape, _dt.int64)
    return infer


def _fused_pool_grad_infer(ctx):
    x, dy, idx = ctx.input("x"), ctx.input("dy"), ctx.input("indices")
    ctx.check(ctx.has_input("y") == ctx.attr("relu_grad"), "input 'y' is required exactly when attr "
                                                           "'relu_grad' is true")
    ctx.check(idx.shape == dy.shape and idx.dtype is _dt.int64,
              f"input 'indices' expected int64 of shape {dy.shape}, received {idx.dtype.name} {idx.shape}")
    common.same_shape(ctx, "dy", "dy_addend")
    same_dtype(ctx, "dy", "dy_addend")
    ctx.set_output("dx", x.shape, x.dtype)


def _fused_tf_max_pool_onnx(n):
    """fused_tf_max_pool_Nd: the input padded with -inf (as the kernel), MaxPool, Relu with
    attr relu; ``indices`` is the position inside each padded (N, C) plane, as the kernel's."""
    def convert(c):
        d = c.input_desc("x")
        spatial = d.shape[2:] if c.attr("data_format") == "channels_first" else d.shape[1:-1]
        _, pads = pool_geometry(spatial, c.attrs)
        begin, end = [p[0] for p in pads], [p[1] for p in pads]

        def build(c, x, outs):
            if any(begin + end):
                x = c.node("Pad", [x, c.const(int64s([0, 0] + begin + [0, 0] + end)),
                                   c.const(np.array(-np.inf, dtype=np_dtype(d)))])
            y, idx = c.tmp("y") if c.attr("relu") else outs[0], c.tmp("indices")
            c.node("MaxPool", [x], [y, idx], kernel_shape=list(c.attr("pool_size")), strides=list(c.attr("strides")))
            if c.attr("relu"):
                c.node("Relu", [y], [outs[0]])
            plane = int(np.prod([b + s + e for b, s, e in zip(begin, spatial, end)]))
            c.node("Mod", [idx, c.const(np.int64(plane))], [outs[1]])
        channels_first_io(c, n, "x", ["y", "indices"], build)
    return convert


for _n in (1, 2, 3):
    op(f"fused_tf_max_pool_{_n}d", inputs=["x"], outputs=["y", "indices"],
       attrs={**POOL_ATTRS, "relu": ("bool", False)},
       infer=_fused_pool_infer(_n), kernel=_fused_pool_kernel(_n), sbp=_sbp.batch(), xla=_fused_pool_xla(_n),
       onnx=_fused_tf_max_pool_onnx(_n),
       doc=f"graphfront-only: tf_max_pool_{_n}d that also returns the argmax indices; with relu, "
           "the pool of relu(x), computed as relu of the pool")
    op(f"fused_tf_max_pool_{_n}d_grad", inputs=["x", "y?", "indices", "dy", "dy_addend?"], outputs=["dx"],
       attrs={**POOL_ATTRS, "relu_grad": ("bool", False)},
       infer=_fused_pool_grad_infer, kernel=_fused_pool_grad_kernel(_n), sbp=_sbp.batch(),
       xla=_fused_pool_grad_xla(_n),
       doc=f"graphfront-only: tf_max_pool_{_n}d_grad of dy (+ dy_addend) through the indices of "
           f"fused_tf_max_pool_{_n}d; with relu_grad, also relu_grad(y=x, dy=dx) (then input 'y' is the pool's output)")


# ------------------------------------------------------------------ folded_constant

def encode_constant(t: torch.Tensor) -> str:
    """base64 text of ``t``'s C-contiguous little-endian bytes (``folded_constant.data``)."""
    raw = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return base64.b64encode(raw).decode("ascii")


def decode_constant(data: str, shape, dtype) -> torch.Tensor:
    raw = bytearray(base64.b64decode(data.encode("ascii")))
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype.torch).reshape(tuple(shape))


def _folded_infer(ctx):
    dtype, shape = ctx.attr("dtype"), ctx.attr("shape")
    ctx.check(dtype is not None, "attr 'dtype' must be set")
    size = dtype.torch.itemsize if dtype.torch is not None else 0
    n = 1
    for d in shape:
        n *= d
    ctx.check(len(base64.b64decode(ctx.attr("data"))) == n * size,
              f"attr 'data' holds {len(base64.b64decode(ctx.attr('data')))} bytes, shape {tuple(shape)} of "
              f"{dtype.name} needs {n * size}")
    ctx.set_output("out", shape, dtype)


def _folded_kernel(k):
    value = decode_constant(k.attr("data"), k.attr("shape"), k.attr("dtype")).to(k.device)
    return lambda: value


def _folded_value_onnx(c):
    return decode_constant(c.attr("data"), c.attr("shape"), c.attr("dtype")).numpy()


_folded_constant_onnx = onnx_rules.constant_output(_folded_value_onnx)


op("folded_constant", inputs=[], outputs=["out"], attrs={"shape": "shape", "dtype": "dtype", "data": "string"},
   infer=_folded_infer, kernel=_folded_kernel, no_grad=True, onnx=_folded_constant_onnx,
   xla=lambda k: (lambda value=_dt.tensor_to_numpy(decode_constant(k.attr("data"), k.attr("shape"), k.attr("dtype"))):
                  xla_rules.jnp().asarray(value)),
   doc="graphfront-only: a constant tensor (the value of a folded subgraph, base64 bytes in 'data')")


# ------------------------------------------------------------------ multi-tensor updates

def _multi_infer(state=()):
    def infer(ctx):
        models = ctx.inputs("model")
        for arg in ("model_diff",) + tuple(state):
            others = ctx.inputs(arg)
            ctx.check(len(others) == len(models),
                      f"input '{arg}' expected {len(models)} blobs (one per model), received {len(others)}")
            for i, (m, d) in enumerate(zip(models, others)):
                ctx.check(d.shape == m.shape, f"input '{arg}_{i}' expected shape {m.shape} (as 'model_{i}'), "
                                              f"received {d.shape}")
        for arg in ("learning_rate", "scale_by_tensor", "skip_if", "train_step"):
            d = ctx.input(arg)
            if d is not None:
                ctx.check(d.shape == (1,), f"input '{arg}' expected shape (1,), received {d.shape}")
        step = ctx.input("train_step")
        if "do_bias_correction" in ctx.attrs:
            ctx.check(step is not None or not ctx.attr("do_bias_correction"),
                      "attr 'do_bias_correction' is true: input 'train_step' expected, received none")
        if step is not None:
            ctx.check(step.dtype.is_integer, f"input 'train_step' expected an integer dtype, received {step.dtype.name}")
    return infer


def _grads(models, diffs, scale, l1, l2, scale_by_tensor, rate=None):
    """The regularized gradients ``diff * scale (* scale_by_tensor) + l1 * sign(w) + l2 * w``
    (times ``rate``, a float or 0-d tensor, where given): the first term that applies makes
    new tensors, the later ones write those (the diffs are never written)."""
    g = [d if d.dtype == m.dtype else d.to(m.dtype) for m, d in zip(models, diffs)]
    fresh = False

    def apply(name, *args, **kwargs):
        nonlocal g, fresh
        if fresh:
            getattr(torch, f"_foreach_{name}_")(g, *args, **kwargs)
        else:
            g, fresh = getattr(torch, f"_foreach_{name}")(g, *args, **kwargs), True
    if scale != 1.0:
        apply("mul", scale)
    if scale_by_tensor is not None:
        apply("mul", scale_by_tensor.reshape(()))
    if l1:
        apply("add", torch._foreach_sign(models), alpha=l1)
    if l2:
        apply("add", models, alpha=l2)
    if rate is not None:
        apply("mul", rate)
    return g


def _host_lr(lr, lr_val):
    """The learning rate as a Python float when the host may read it (:func:`reads_host`),
    else the tensor."""
    if lr is None:
        return lr_val
    return float(lr) if reads_host(lr) else lr.reshape(())


def _selects(skip_if):
    """True when the update must skip by ``skip_if`` on its device (a GPU, or a traced
    step); False when it runs in place (no ``skip_if``, or one that :func:`host_skipped`
    read as zero)."""
    return skip_if is not None and not reads_host(skip_if)


def _strided_like(t, ref):
    """``t``, or a copy of it laid out in memory as ``ref`` when it is not (the strides of
    size-1 dims address nothing and may differ)."""
    same = all(a == b for a, b, n in zip(t.stride(), ref.stride(), ref.shape) if n > 1)
    return t if same else torch.empty_like(ref).copy_(t)


def _meta_kernels():
    """Meta kernels for PyTorch's fused SGD and tensor-learning-rate AdamW kernels, which have
    none: tracing a step (the native lowering's fake tensors, a ``meta``-device plan) needs
    one. They write their inputs in place and return nothing, so the meta kernel does
    nothing. Registered only where PyTorch has none; returns the ``torch.library.Library``
    that keeps them registered."""
    lib = torch.library.Library("aten", "IMPL")
    for aten_op in ("_fused_sgd_", "_fused_sgd_.tensor_lr", "_fused_adamw_.tensor_lr"):
        name, _, overload = aten_op.partition(".")
        if getattr(getattr(torch.ops.aten, name), overload or "default", None) is None:
            continue   # (not in this PyTorch)
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{aten_op}", "Meta"):
            lib.impl(aten_op, lambda *args, **kwargs: None, "Meta")
    return lib


_META_KERNELS = _meta_kernels()


def _fused_sgd(models, diffs, moms, lr, attrs, skip_if, beta=0.0):
    """OneFlow's SGD update (``w -= lr * g``) or, with ``moms``, its momentum update (``mom =
    beta * mom - lr * g; w += mom``), ``g = scale * diff (* scale_by_tensor) + l1 * sign(w) +
    l2 * w``, in PyTorch's fused SGD kernel (``torch._fused_sgd_``, the kernel of
    ``torch.optim.SGD(fused=True)``): one pass reading each diff, model and momentum once
    and writing the model and momentum (separate multi-tensor calls would pass over them
    four times).
    ``attrs``: ``(scale, l1, l2, scale_by_tensor)``. A nonzero ``skip_if`` (the kernel's
    ``found_inf``) leaves every tensor untouched inside the kernel: no host read, no copy or
    select of the variables. The diffs are never written.

    The kernel computes ``g' = grad + weight_decay * w``, ``buf = momentum * buf + (1 -
    dampening) * g'`` and ``w -= lr * buf`` (``w -= lr * g'`` without momentum). With
    ``s = scale`` (1 where it is 0), ``g = s * (d + l2 / s * w)`` where ``d = scale / s *
    diff (* scale_by_tensor) + l1 / s * sign(w)`` is the diff itself when only ``scale``
    and ``l2`` apply. SGD passes ``grad = d``, ``weight_decay = l2 / s`` and the learning
    rate ``lr * s`` (a float, or a tensor on the device); momentum the same with a float
    learning rate (``dampening = 1 + lr * s``, kernel ``lr = -1``). Momentum with a tensor
    learning rate passes the step ``lr * g`` (``dampening = 2``): the kernel's buffer cannot
    take a learning rate that changes. Not in a step traced by the native lowering
    (Inductor cannot call the kernel).
    """
    scale, l1, l2, scale_by_tensor = attrs
    s = scale or 1.0
    rate = lr if s == 1.0 else lr * s
    if isinstance(lr, float) or not moms:
        grads, decay = _grads(models, diffs, scale / s, l1 / s, 0.0, scale_by_tensor), l2 / s
    else:
        grads = _grads(models, diffs, scale / s, l1 / s, l2 / s, scale_by_tensor, rate)
        rate, decay = 1.0, 0.0
    grads = [_strided_like(t, m) for t, m in zip(grads, models)]
    bufs = [_strided_like(b, m) for b, m in zip(moms, models)]
    torch._fused_sgd_(models, grads, bufs, weight_decay=decay, momentum=beta if moms else 0.0,
                      lr=-1.0 if moms else rate, dampening=1.0 + rate if moms else 0.0, nesterov=False,
                      maximize=False, is_first_step=False,
                      found_inf=None if skip_if is None else (skip_if.reshape(()) != 0).float())
    for b, used in zip(moms, bufs):
        if used is not b:
            b.copy_(used)
    torch._C._increment_version([*models, *moms])   # (the fused kernel bumps none)


def _multi_sgd_kernel(k):
    scale, l1, l2, wd, lr_val = (k.attr(a) for a in ("scale", "l1", "l2", "weight_decay", "learning_rate_val"))

    def multi_tensor_sgd_update(models, diffs, lr, scale_by_tensor, skip_if):
        if host_skipped(skip_if):
            return None
        select = _selects(skip_if)
        lr = _host_lr(lr, lr_val)
        plain = not (l1 or l2 or wd) and scale_by_tensor is None and all(
            d.dtype == m.dtype for m, d in zip(models, diffs))
        if plain and isinstance(lr, float) and not select:
            torch._foreach_add_(models, diffs, alpha=-lr * scale)
            return None
        if not wd and not torch.compiler.is_compiling():
            _fused_sgd(models, diffs, [], lr, (scale, l1, l2, scale_by_tensor), skip_if if select else None)
            return None
        g = _grads(models, diffs, scale, l1, l2, scale_by_tensor)
        if wd:
            g = torch._foreach_add(g, models, alpha=wd)
        if isinstance(lr, float):
            new = torch._foreach_add(models, g, alpha=-lr) if select else torch._foreach_add_(models, g, alpha=-lr)
        else:
            step = torch._foreach_mul(g, lr)
            new = torch._foreach_sub(models, step) if select else torch._foreach_sub_(models, step)
        if select:
            keep_unless_skipped(skip_if, models, new)
        return None
    return multi_tensor_sgd_update


def _multi_momentum_kernel(k):
    scale, l1, l2, wd, lr_val, beta = (k.attr(a) for a in ("scale", "l1", "l2", "weight_decay",
                                                            "learning_rate_val", "beta"))

    def multi_tensor_momentum_update(models, diffs, moms, lr, scale_by_tensor, skip_if):
        if host_skipped(skip_if):
            return None
        select = _selects(skip_if)   # (skipped in the fused kernel, or new tensors selected at the end)
        lr = _host_lr(lr, lr_val)
        if not wd and not torch.compiler.is_compiling():
            _fused_sgd(models, diffs, moms, lr, (scale, l1, l2, scale_by_tensor), skip_if if select else None, beta)
            return None
        g = _grads(models, diffs, scale, l1, l2, scale_by_tensor)
        decay = None
        if wd:  # lr * wd * w, from the weights before this step
            decay = torch._foreach_mul(models, wd)
            torch._foreach_mul_(decay, lr)
        new_moms = torch._foreach_mul(moms, beta) if select else moms
        if not select:
            torch._foreach_mul_(moms, beta)
        if isinstance(lr, float):
            torch._foreach_add_(new_moms, g, alpha=-lr)
        else:
            torch._foreach_sub_(new_moms, torch._foreach_mul(g, lr))
        new_models = torch._foreach_add(models, new_moms) if select else models
        if not select:
            torch._foreach_add_(models, moms)
        if decay is not None:
            torch._foreach_sub_(new_models, decay)
        if select:
            keep_unless_skipped(skip_if, moms, new_moms)
            keep_unless_skipped(skip_if, models, new_models)
        return None
    return multi_tensor_momentum_update


def _multi_update_xla(momentum):
    """The ``multi_tensor_*_update`` formulas over jax arrays: ``(None, (models, [moms]))``."""
    def make(k):
        jnp = xla_rules.jnp()
        scale, l1, l2, wd, lr_val = (k.attr(a) for a in ("scale", "l1", "l2", "weight_decay", "learning_rate_val"))
        beta = k.attr("beta") if momentum else None

        def update(models, diffs, *rest):
            moms, (lr, scale_by_tensor, skip_if) = (rest[0], rest[1:]) if momentum else (None, rest)
            lr = lr_val if lr is None else lr.reshape(())
            new_models, new_moms = [], []
            for i, (w, d) in enumerate(zip(models, diffs)):
                g = d.astype(w.dtype) if d.dtype != w.dtype else d
                if scale != 1.0:
                    g = g * scale
                if scale_by_tensor is not None:
                    g = g * scale_by_tensor.reshape(())
                if l1:
                    g = g + l1 * jnp.sign(w)
                if l2:
                    g = g + l2 * w
                if momentum:
                    m = moms[i] * beta - lr * g
                    new_w = w + m - (w * wd * lr if wd else 0.0)
                    new_moms.append(m)
                else:
                    new_w = w - lr * (g + wd * w if wd else g)
                new_models.append(new_w)
            if skip_if is not None:
                skip = skip_if.reshape(()) != 0
                new_models = [jnp.where(skip, w, v) for w, v in zip(models, new_models)]
                new_moms = [jnp.where(skip, m, v) for m, v in zip(moms or (), new_moms)]
            return None, ((new_models, new_moms) if momentum else (new_models,))
        return update
    return make


def _multi_adam_kernel(k):
    b1, b2, eps, wd, amsgrad, scale, lr_val = (k.attr(a) for a in ("beta1", "beta2", "epsilon", "weight_decay",
                                                                    "amsgrad", "scale", "learning_rate_val"))
    # without bias correction the kernel's 1 - beta ** step must be 1: an infinite step
    correct = k.attr("do_bias_correction")
    infinite = torch.full((), math.inf, device=k.device)

    def multi_tensor_adam_update(models, diffs, ms, vs, max_vs, lr, scale_by_tensor, skip_if, train_step):
        grads = [d if d.dtype == m.dtype else d.to(m.dtype) for m, d in zip(models, diffs)]
        if scale != 1.0 or scale_by_tensor is not None:  # new tensors: the diffs are never written
            grads = torch._foreach_mul(grads, scale if scale_by_tensor is None
                                       else scale_by_tensor.reshape(()) * scale)
        # the fused kernel walks every tensor's memory in order: each must have its model's
        # strides (a channels-last weight with a contiguous all-reduced gradient, say)
        grads = [_strided_like(g, m) for g, m in zip(grads, models)]
        states = [[_strided_like(s, m) for s, m in zip(ss, models)] for ss in (ms, vs, max_vs if amsgrad else ())]
        step = (train_step.reshape(()) + 1).float() if correct else infinite
        torch._fused_adamw_(models, grads, *states, [step] * len(models),
                            lr=_host_lr(lr, lr_val), beta1=b1, beta2=b2, weight_decay=wd, eps=eps,
                            amsgrad=amsgrad, maximize=False,
                            found_inf=None if skip_if is None else (skip_if.reshape(()) != 0).float())
        for originals, used in zip((ms, vs, max_vs), states):
            for s, u in zip(originals, used):
                if u is not s:
                    s.copy_(u)
        # the fused kernel does not bump the version counters that in-place ops bump (the xla
        # and onnxruntime lowerings read them to see a variable changed)
        torch._C._increment_version([*models, *ms, *vs, *(max_vs if amsgrad else ())])
        return None
    return multi_tensor_adam_update


def _multi_adam_native(k):
    """The native lowering's ``multi_tensor_adam_update``: the fused AdamW kernel's formula
    in torch ops, which Inductor fuses into its own loops (the fused kernel itself cannot be
    functionalized in a traced step); a nonzero ``skip_if`` selects the old values."""
    b1, b2, eps, wd, amsgrad, scale, lr_val = (k.attr(a) for a in ("beta1", "beta2", "epsilon", "weight_decay",
                                                                    "amsgrad", "scale", "learning_rate_val"))
    correct = k.attr("do_bias_correction")

    def multi_tensor_adam_update(models, diffs, ms, vs, max_vs, lr, scale_by_tensor, skip_if, train_step):
        lr = lr_val if lr is None else lr.reshape(())
        bc1 = bc2 = 1.0
        if correct:
            t = train_step.reshape(()).to(torch.float64) + 1
            bc1, bc2 = (1 - b1 ** t).float(), (1 - b2 ** t).float()
        skip = None if skip_if is None else skip_if.reshape(()) != 0
        for i, (w, d, m, v) in enumerate(zip(models, diffs, ms, vs)):
            g = d.to(w.dtype) * scale
            if scale_by_tensor is not None:
                g = g * scale_by_tensor.reshape(())
            new = {"w": w - lr * wd * w if wd else w, "m": b1 * m + (1 - b1) * g, "v": b2 * v + (1 - b2) * g * g}
            second = new["v"]
            if amsgrad:
                new["max_v"] = second = torch.maximum(max_vs[i], new["v"])
            new["w"] = new["w"] - lr / bc1 * new["m"] / (second.sqrt() / bc2 ** 0.5 + eps)
            old = {"w": w, "m": m, "v": v, "max_v": max_vs[i] if amsgrad else None}
            for key, value in new.items():
                old[key].copy_(value if skip is None else torch.where(skip, old[key], value))
        return None
    return multi_tensor_adam_update


def _multi_adam_xla(k):
    """``adam_update``'s xla rule over each variable: ``(None, (models, ms, vs, max_vs))``."""
    jnp = xla_rules.jnp()
    b1, b2 = k.attr("beta1"), k.attr("beta2")
    scale, lr_val, correct = k.attr("scale"), k.attr("learning_rate_val"), k.attr("do_bias_correction")
    # adam_update's rule; its bias_correction*_val attrs are unused: the factors are passed
    attrs = {**k.attrs, "bias_correction1_val": 1.0, "bias_correction2_val": 1.0}
    apply = optimizer_ops.adam_xla_step(types.SimpleNamespace(attr=attrs.__getitem__))

    def update(models, diffs, ms, vs, max_vs, lr, scale_by_tensor, skip_if, train_step):
        lr = lr_val if lr is None else lr.reshape(())
        args = {}
        if correct and train_step is not None:
            t = (train_step + 1).astype(jnp.float64)
            args = {f"bias_correction{i}": (1.0 - jnp.power(b, t)).astype(jnp.float32) for i, b in ((1, b1), (2, b2))}
        out = {"model": [], "m": [], "v": [], "max_v": []}
        for w, d, m, v, mv in zip(models, diffs, ms, vs, max_vs):
            g = optimizer_ops.regularized_diff_xla(w, d, scale, 0.0, 0.0, scale_by_tensor)
            new = apply(w, g, lr, dict(args, m=m, v=v, max_v=mv))
            old = {"model": w, "m": m, "v": v, "max_v": mv}
            for a in out:
                value = new.get(a, old[a])
                if skip_if is not None:
                    value = jnp.where(skip_if.reshape(()) != 0, old[a], value)
                out[a].append(value)
        return None, (out["model"], out["m"], out["v"], out["max_v"])
    return update


# ------------------------------------------------------------------ multi_scalar_mul_by_tensor

def _multi_scale_infer(ctx):
    xs, scalar = ctx.inputs("x"), ctx.input("scalar")
    ctx.check(len(xs) == ctx.output_count("y"), f"expected one output 'y' per input 'x' ({len(xs)}), received "
                                                f"{ctx.output_count('y')}")
    ctx.check(scalar.shape == (1,), f"input 'scalar' expected shape (1,), received {scalar.shape}")
    ctx.check(scalar.dtype.is_floating_point, f"input 'scalar' expected a floating dtype, received "
                                              f"{scalar.dtype.name}")
    for i, d in enumerate(xs):
        ctx.check(d.dtype.is_floating_point and d.dtype.torch.itemsize <= scalar.dtype.torch.itemsize,
                  f"input 'x_{i}' expected a floating dtype no wider than 'scalar' ({scalar.dtype.name}), received "
                  f"{d.dtype.name}")
        ctx.set_output("y", d.shape, scalar.dtype, i=i)


def _multi_scale_kernel(k):
    """``torch._foreach_mul`` over the inputs of the scalar's dtype; the narrower ones are cast
    into new tensors of that dtype first (``torch._foreach_copy_``), then scaled in place
    (which inputs are which is read from their descs, once). Each result is
    ``fused_cast_scale``'s / ``scalar_mul_by_tensor``'s, bit for bit. Where
    :func:`~graphfront.ops.common.multi_tensor_kernels` (a GPU) every input is copied (cast)
    into :func:`~graphfront.ops.common.packed_empty_like` outputs, then scaled in place: the
    loss scale's finiteness count over the unscaled gradients reads them in place."""
    dtype = k.input("scalar").dtype
    same = [i for i in range(k.output_count("y")) if k.input("x", i).dtype is dtype]
    cast = [i for i in range(k.output_count("y")) if k.input("x", i).dtype is not dtype]

    def multi_scalar_mul_by_tensor(xs, scalar):
        s = scalar.reshape(())
        if common.multi_tensor_kernels(s.device):
            ys = common.packed_empty_like(xs, s.dtype)
            torch._foreach_copy_(ys, xs)
            torch._foreach_mul_(ys, s)
            return ys
        ys = [None] * len(xs)
        if same:
            for i, y in zip(same, torch._foreach_mul([xs[i] for i in same], s)):
                ys[i] = y
        if cast:
            out = _cast_all([xs[i] for i in cast], s.dtype)
            torch._foreach_mul_(out, s)
            for i, y in zip(cast, out):
                ys[i] = y
        return ys
    return multi_scalar_mul_by_tensor


def _multi_scale_onnx(c):
    """A ``Mul`` by the (1,) scalar per input, cast to the scalar's dtype first where narrower."""
    dtype = c.input_desc("scalar").dtype
    for i, x in enumerate(c.inputs("x")):
        if c.input_desc("x", i).dtype is not dtype:
            x = c.node("Cast", [x], to=c.dtype_code(dtype))
        c.node("Mul", [x, c.input("scalar")], [c.output("y", i)])


def _multi_scale_sbp(ctx):
    """As scalar_mul_by_tensor's (OneFlow's), for every x at once: the x split on one axis
    (one each of them has) split the y alike; partial x, or a partial scalar, give partial y."""
    rank = min(len(ctx.shape("x", i)) for i in range(ctx.count("x")))
    return [_sbp.signature(ctx, _sbp.B, x=_sbp.split(k), y=_sbp.split(k)) for k in range(rank)] + [
        _sbp.signature(ctx, _sbp.P, scalar=_sbp.B), _sbp.signature(ctx, _sbp.P, x=_sbp.B)]


op("multi_scalar_mul_by_tensor", inputs=["x*", "scalar"], outputs=["y*"], infer=_multi_scale_infer,
   kernel=_multi_scale_kernel, no_grad=True, sbp=_multi_scale_sbp,
   xla=lambda k: (lambda xs, scalar: [x.astype(scalar.dtype) * scalar.reshape(()) for x in xs]),
   onnx=_multi_scale_onnx,
   doc="graphfront-only: y_i = x_i (cast to the scalar's dtype) * scalar for every x_i: the scalar_mul_by_tensor "
       "and fused_cast_scale ops of one (1,) scalar in a few multi-tensor kernels")


# ------------------------------------------------------------------ multi_cast

def _multi_cast_infer(ctx):
    ins, dtype = ctx.inputs("in"), ctx.attr("dtype")
    ctx.check(dtype is not None, "attr 'dtype' must be set")
    ctx.check(len(ins) == ctx.output_count("out"), f"expected one output 'out' per input 'in' ({len(ins)}), "
                                                   f"received {ctx.output_count('out')}")
    for i, d in enumerate(ins):
        ctx.check(d.dtype is ins[0].dtype, f"input 'in_{i}' expected dtype {ins[0].dtype.name} (as 'in_0'), "
                                           f"received {d.dtype.name}")
        ctx.set_output("out", d.shape, dtype, i=i)


def _cast_all(xs, dtype):
    """``xs`` cast to ``dtype``: new tensors filled by one ``torch._foreach_copy_`` (a
    multi-tensor kernel converting as it copies, on a GPU; one copy each on the CPU)."""
    out = [torch.empty_like(x, dtype=dtype) for x in xs]
    torch._foreach_copy_(out, xs)
    return out


def _multi_cast_kernel(k):
    """Each ``cast``'s result, all in one :func:`_cast_all`."""
    dtype = k.attr("dtype").torch
    return lambda xs: _cast_all(xs, dtype)


def _multi_cast_onnx(c):
    for i, x in enumerate(c.inputs("in")):
        c.node("Cast", [x], [c.output("out", i)], to=c.dtype_code(c.attr("dtype")))


op("multi_cast", inputs=["in*"], outputs=["out*"], attrs={"dtype": "dtype"}, infer=_multi_cast_infer,
   kernel=_multi_cast_kernel, no_grad=True, sbp=lambda ctx: [_sbp.signature(ctx, _sbp.B)],
   xla=lambda k: (lambda xs, t=k.attr("dtype").np: [x.astype(t) for x in xs]), onnx=_multi_cast_onnx,
   doc="graphfront-only: out_i = cast(in_i) for every in_i, in a few multi-tensor kernels: the casts of a "
       "mixed-precision job's float32 variables")


_UPDATE_ATTRS = {"learning_rate_val": ("float", 0.0), "scale": ("double", 1.0), "l1": ("float", 0.0),
                 "l2": ("float", 0.0), "weight_decay": ("float", 0.0)}
_LR = ["learning_rate?", "scale_by_tensor?", "skip_if?"]

op("multi_tensor_sgd_update", inputs=["model*", "model_diff*"] + _LR, outputs=[], attrs=_UPDATE_ATTRS,
   infer=_multi_infer(), kernel=_multi_sgd_kernel, no_grad=True, mutates=("model",), xla=_multi_update_xla(False),
   doc="sgd_update over every (model, model_diff) pair in PyTorch's fused SGD kernel or torch._foreach_* calls")
op("multi_tensor_momentum_update", inputs=["model*", "model_diff*", "momentum*"] + _LR, outputs=[],
   attrs={**_UPDATE_ATTRS, "beta": ("float", 0.9)}, infer=_multi_infer(("momentum",)),
   kernel=_multi_momentum_kernel, no_grad=True, mutates=("model", "momentum"), xla=_multi_update_xla(True),
   doc="momentum_update over every (model, model_diff, momentum) triple in PyTorch's fused SGD kernel or "
       "torch._foreach_* calls")
op("multi_tensor_adam_update", inputs=["model*", "model_diff*", "m*", "v*", "max_v*"] + _LR + ["train_step?"],
   outputs=[], attrs={"learning_rate_val": ("float", 0.0), "scale": ("double", 1.0), "beta1": ("float", 0.9),
                      "beta2": ("float", 0.999), "epsilon": ("float", 0.0), "weight_decay": ("float", 0.0),
                      "amsgrad": ("bool", False), "do_bias_correction": ("bool", True)},
   infer=_multi_infer(("m", "v", "max_v")), kernel=_multi_adam_kernel, no_grad=True,
   mutates=("model", "m", "v", "max_v"), xla=_multi_adam_xla, native=_multi_adam_native,
   doc="graphfront-only: adam_update over every (model, model_diff, m, v, max_v) in torch's fused AdamW kernel, "
       "bias correction from train_step")

__all__ = ["encode_constant", "decode_constant", "like"]
