"""Fused kernels of transformer layers that user code builds explicitly (OneFlow's
``flow.nn.fused_bias_add_gelu``, ``fused_bias_add_dropout``,
``fused_scale_tril_softmax_dropout``, ``fused_self_attention_query_mul_key_and_value``)
and the AMP helper ``fused_cast_scale``.

=============================================  ==============================================
op type                                        computes
=============================================  ==============================================
``fused_bias_add_gelu`` (a, b -> out)          ``gelu(a + b)``, ``b`` 1-D along attr ``axis``;
                                               exact (erf) GELU. Grad
                                               ``fused_bias_add_gelu_grad`` (a, b, dy -> dx)
                                               and ``reduce_sum`` for ``b``.
                                               (``oneflow/user/ops/fused_bias_add_op.cpp``)
``fused_bias_add_mask_scale``                  ``(a + b) * mask * scale`` (+ ``_add_to_output``),
(a, b, mask, _add_to_output? -> out)           ``mask`` int8 0/1; grad ``dropout_grad`` for
                                               ``a`` and ``reduce_sum`` for ``b``.
``fused_tril_scale_softmax_mask_scale``        ``softmax_y = softmax(t)`` over the last axis with
(x, mask -> y, softmax_y)                      ``t[.., i, j] = x * tril_scale_value`` where
                                               ``j <= i + diagonal``, else ``tril_fill_value``;
                                               ``y = softmax_y * mask * mask_scale_value``.
                                               Grad ``..._grad`` (softmax_y, dy, mask -> dx).
                                               (``oneflow/user/ops/fused_scale_tril_softmax_mask_scale_op.cpp``)
``fused_self_attention_query_mul_key_and_      ``hidden_states`` (seq, batch, heads*3*head_size)
value`` (hidden_states -> query_mul_key,       laid out as (seq, batch, heads, 3, head_size):
value)                                         ``query_mul_key = alpha * q @ k^T`` of shape
                                               (batch, heads, seq, seq) and ``value`` (batch,
                                               heads, seq, head_size). Grad ``..._grad``
                                               (query_mul_key_grad, value_grad, hidden_states ->
                                               hidden_states_grad).
``fused_cast_scale`` (x, scale_by_tensor -> y) ``y = cast(x) * scale * scale_by_tensor[0]`` in
                                               the dtype of ``scale_by_tensor`` (no grad fn).
=============================================  ==============================================
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import gelu_grad, same_dtype
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import const_as, int64s
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp



def _bias_view(k, arg="a"):
    ndim, axis = len(k.input(arg).shape), k.attr("axis")
    view = [1] * ndim
    view[axis] = -1
    return view


def _bias_add_infer(*extra):
    """Check ``a``, 1-D ``b`` along ``axis`` (and each extra input shaped like ``a``)."""
    def infer(ctx):
        a, b = ctx.input("a"), ctx.input("b")
        axis = ctx.attr("axis")
        ctx.check(0 <= axis < len(a.shape), f"attr 'axis' {axis} is out of range for input 'a' of shape {a.shape}")
        ctx.check(b.shape == (a.shape[axis],), f"input 'b' expected shape {(a.shape[axis],)}, received {b.shape}")
        same_dtype(ctx, "a", "b")
        for arg in extra:
            if ctx.has_input(arg):
                d = ctx.input(arg)
                ctx.check(d.shape == a.shape, f"input '{arg}' expected shape {a.shape}, received {d.shape}")
        if ctx.has_input("mask"):
            ctx.check(ctx.input("mask").dtype is _dt.int8,
                      f"input 'mask' expected dtype int8, received {ctx.input('mask').dtype.name}")
        for out in ctx.output_names():
            ctx.set_output(out, a.shape, a.dtype)
    return infer


def _reduce_bias(g, dy):
    axis = g.attr("axis")
    ndim = len(g.desc(g.input("a")).shape)
    return g.emit("reduce_sum", {"input_tensor": dy}, {"axis": [i for i in range(ndim) if i != axis],
                                                       "keepdims": False}, name=f"{g.op_name}_grad_b")


# ------------------------------------------------------------------ fused_bias_add_gelu

def _bias_add_gelu_kernel(k):
    view = _bias_view(k)
    return lambda a, b: torch.nn.functional.gelu(a + b.view(view))


def _bias_add_gelu_grad_kernel(k):
    view = _bias_view(k)

    return lambda a, b, dy: gelu_grad(a + b.view(view), dy)


def _bias_add_gelu_xla(k):
    import jax.nn
    view = tuple(_bias_view(k))
    return lambda a, b: jax.nn.gelu(a + b.reshape(view), approximate=False)


def _bias_add_gelu_grad_xla(k):
    view = tuple(_bias_view(k))

    def fused_bias_add_gelu_grad(a, b, dy):
        return xla_rules.gelu_grad(a + b.reshape(view), dy)
    return fused_bias_add_gelu_grad


def _bias_add_gelu_grad(g):
    dx = g.emit("fused_bias_add_gelu_grad", {"a": g.input("a"), "b": g.input("b"), "dy": g.dout("out")},
                {"axis": g.attr("axis")}, name=f"{g.op_name}_grad")
    if g.needs("a"):
        g.set_grad("a", dx)
    if g.needs("b"):
        g.set_grad("b", _reduce_bias(g, dx))


op("fused_bias_add_gelu", inputs=["a", "b"], outputs=["out"], attrs={"axis": ("int32", 0)},
   infer=_bias_add_infer(), kernel=_bias_add_gelu_kernel, grad=_bias_add_gelu_grad, onnx=onnx_rules.bias_add_then("Gelu"),
   xla=_bias_add_gelu_xla, sbp=_sbp.bias_add,
   doc="gelu(a + b) with b along attr axis (exact erf GELU)", amp="gray")
op("fused_bias_add_gelu_grad", inputs=["a", "b", "dy"], outputs=["dx"], attrs={"axis": ("int32", 0)},
   infer=_bias_add_infer("dy"), kernel=_bias_add_gelu_grad_kernel, xla=_bias_add_gelu_grad_xla,
   sbp=lambda ctx: _sbp.bias_add(ctx) + [_sbp.partial_in(ctx, "dy")],
   onnx=lambda c: onnx_rules.gelu_grad(c, onnx_rules.bias_added(c), c.input("dy"), c.output("dx"), c.input_desc("a")),
   doc="dy * gelu'(a + b): the gradient of fused_bias_add_gelu with respect to a")


# ------------------------------------------------------------------ fused_bias_add_mask_scale

def _bias_add_mask_scale_kernel(k):
    view, scale = _bias_view(k), k.attr("scale")

    def fused_bias_add_mask_scale(a, b, mask, add_to):
        out = (a + b.view(view)) * mask * scale
        return out if add_to is None else out.add_(add_to)
    return fused_bias_add_mask_scale


def _bias_add_mask_scale_xla(k):
    view, scale = tuple(_bias_view(k)), k.attr("scale")

    def fused_bias_add_mask_scale(a, b, mask, add_to):
        out = ((a + b.reshape(view)) * mask * scale).astype(a.dtype)
        return out if add_to is None else out + add_to
    return fused_bias_add_mask_scale


def _bias_add_mask_scale_grad(g):
    dy = g.dout("out")
    dx = g.emit("dropout_grad", {"dy": dy, "mask": g.input("mask")}, {"scale": g.attr("scale")},
                name=f"{g.op_name}_grad")
    if g.needs("a"):
        g.set_grad("a", dx)
    if g.needs("b"):
        g.set_grad("b", _reduce_bias(g, dx))
    if g.needs("_add_to_output"):
        g.set_grad("_add_to_output", dy)


def _bias_added_onnx(c):
    d = c.input_desc("a")
    shape = [1] * len(d.shape)
    shape[c.attr("axis")] = -1
    return c.node("Add", [c.input("a"), c.node("Reshape", [c.input("b"), c.const(int64s(shape))])])


def _fused_bias_add_mask_scale_onnx(c):
    """(a + b along axis) * mask * scale (+ _add_to_output)."""
    d = c.input_desc("a")
    mask = c.node("Cast", [c.input("mask")], to=c.dtype_code(d.dtype))
    y = c.node("Mul", [c.node("Mul", [_bias_added_onnx(c), mask]), const_as(c, c.attr("scale"), d)])
    if c.has_input("_add_to_output"):
        c.node("Add", [y, c.input("_add_to_output")], [c.output("out")])
    else:
        c.node("Identity", [y], [c.output("out")])


op("fused_bias_add_mask_scale", inputs=["a", "b", "mask", "_add_to_output?"], outputs=["out"],
   attrs={"axis": ("int32", 0), "scale": ("float", 1.0)},
   infer=_bias_add_infer("mask", "_add_to_output"), kernel=_bias_add_mask_scale_kernel,
   grad=_bias_add_mask_scale_grad, onnx=_fused_bias_add_mask_scale_onnx, xla=_bias_add_mask_scale_xla,
   sbp=lambda ctx: _sbp.bias_add(ctx) + [_sbp.signature(ctx, _sbp.P, mask=_sbp.B)],  # (linear in a, b, _add_to_output)
   doc="(a + b) * mask * scale: bias_add followed by dropout with a given mask", amp="gray")


# ------------------------------------------------------------------ fused_tril_scale_softmax_mask_scale

# OneFlow's rule: independent along the axes before the (rows, cols) of the triangle
_BATCH_AXES = _sbp.leading("mask", 2)


def _tril_keep(shape, diagonal, device):
    """Bool (rows, cols) mask of the kept (lower-triangular) elements: col <= row + diagonal."""
    rows, cols = shape[-2], shape[-1]
    return torch.ones(rows, cols, dtype=torch.bool, device=device).tril(diagonal)


def _tril_softmax_infer(ctx):
    x, mask = ctx.input("x"), ctx.input("mask")
    ctx.check(len(x.shape) >= 2, f"input 'x' expected rank >= 2, received shape {x.shape}")
    ctx.check(mask.shape == x.shape and mask.dtype is _dt.int8,
              f"input 'mask' expected int8 of shape {x.shape}, received {mask.dtype.name} {mask.shape}")
    ctx.set_output("y", x.shape, x.dtype)
    ctx.set_output("softmax_y", x.shape, x.dtype)


def _tril_softmax_kernel(k):
    diagonal, fill = k.attr("diagonal"), k.attr("tril_fill_value")
    scale, mask_scale = k.attr("tril_scale_value"), k.attr("mask_scale_value")
    keep = _tril_keep(k.input("x").shape, diagonal, k.device)

    def fused_tril_scale_softmax_mask_scale(x, mask):
        t = torch.where(keep, x * scale, torch.full((), fill, dtype=x.dtype, device=x.device))
        softmax_y = torch.softmax(t, dim=-1)
        return softmax_y * mask * mask_scale, softmax_y
    return fused_tril_scale_softmax_mask_scale


def _tril_softmax_grad_kernel(k):
    diagonal, scale, mask_scale = k.attr("diagonal"), k.attr("tril_scale_value"), k.attr("mask_scale_value")
    keep = _tril_keep(k.input("dy").shape, diagonal, k.device)

    def fused_tril_scale_softmax_mask_scale_grad(softmax_y, dy, mask):
        d_soft = dy * mask * mask_scale
        d_t = softmax_y * (d_soft - (d_soft * softmax_y).sum(dim=-1, keepdim=True))
        return torch.where(keep, d_t * scale, torch.zeros((), dtype=dy.dtype, device=dy.device))
    return fused_tril_scale_softmax_mask_scale_grad


def _tril_softmax_xla(k):
    jnp = xla_rules.jnp()
    diagonal, fill = k.attr("diagonal"), k.attr("tril_fill_value")
    scale, mask_scale = k.attr("tril_scale_value"), k.attr("mask_scale_value")
    keep = np.tril(np.ones(tuple(k.input("x").shape[-2:]), dtype=bool), diagonal)

    def fused_tril_scale_softmax_mask_scale(x, mask):
        t = jnp.where(keep, x * scale, jnp.array(fill, x.dtype))
        softmax_y = xla_rules.jnp_fn("nn.softmax")(t.astype(xla_rules.opmath(x.dtype)), axis=-1).astype(x.dtype)
        return softmax_y * mask.astype(x.dtype) * mask_scale, softmax_y
    return fused_tril_scale_softmax_mask_scale


def _tril_softmax_grad_xla(k):
    jnp = xla_rules.jnp()
    diagonal, scale, mask_scale = k.attr("diagonal"), k.attr("tril_scale_value"), k.attr("mask_scale_value")
    keep = np.tril(np.ones(tuple(k.input("dy").shape[-2:]), dtype=bool), diagonal)

    def fused_tril_scale_softmax_mask_scale_grad(softmax_y, dy, mask):
        d_soft = dy * mask.astype(dy.dtype) * mask_scale
        d_t = softmax_y * (d_soft - (d_soft * softmax_y).sum(axis=-1, keepdims=True))
        return jnp.where(keep, d_t * scale, jnp.zeros((), dy.dtype))
    return fused_tril_scale_softmax_mask_scale_grad


def _tril_softmax_grad(g):
    if g.needs("x"):
        g.set_grad("x", g.emit("fused_tril_scale_softmax_mask_scale_grad",
                               {"softmax_y": g.output("softmax_y"), "dy": g.dout("y"), "mask": g.input("mask")},
                               {k: g.attr(k) for k in ("diagonal", "tril_scale_value", "mask_scale_value")}))


def _tril_softmax_grad_infer(ctx):
    dy = ctx.input("dy")
    same_dtype(ctx, "softmax_y", "dy")
    ctx.check(ctx.input("softmax_y").shape == dy.shape and ctx.input("mask").shape == dy.shape,
              f"inputs 'softmax_y' and 'mask' expected shape {dy.shape}")
    ctx.set_output("dx", dy.shape, dy.dtype)


def _fused_tril_scale_softmax_mask_scale_onnx(c):
    """softmax_y = softmax(where(tril(diagonal), x * tril_scale_value, tril_fill_value)) over the
    last axis; y = softmax_y * mask * mask_scale_value."""
    d = c.input_desc("x")
    rows, cols = d.shape[-2:]
    keep = np.tril(np.ones((rows, cols), dtype=bool), c.attr("diagonal"))
    t = c.node("Where", [c.const(keep), c.node("Mul", [c.input("x"), const_as(c, c.attr("tril_scale_value"), d)]),
                         const_as(c, c.attr("tril_fill_value"), d)])
    soft = c.node("Softmax", [t], [c.output("softmax_y")], axis=-1)
    mask = c.node("Cast", [c.input("mask")], to=c.dtype_code(d.dtype))
    c.node("Mul", [c.node("Mul", [soft, mask]), const_as(c, c.attr("mask_scale_value"), d)], [c.output("y")])


def _tril_softmax_grad_onnx(c):
    """d = dy * mask * mask_scale_value; softmax_y * (d - sum(d * softmax_y)) * tril_scale_value inside the
    lower triangle, 0 above it."""
    d = c.input_desc("dy")
    y = c.input("softmax_y")
    rows, cols = d.shape[-2:]
    keep = np.tril(np.ones((rows, cols), dtype=bool), c.attr("diagonal"))
    mask = c.node("Cast", [c.input("mask")], to=c.dtype_code(d.dtype))
    d_soft = onnx_rules.mul(c, c.input("dy"), mask, const_as(c, c.attr("mask_scale_value"), d))
    dot = onnx_rules.reduce_node(c, "ReduceSum", c.node("Mul", [d_soft, y]), [-1], 1)
    d_t = c.node("Mul", [y, c.node("Sub", [d_soft, dot])])
    onnx_rules.where_zero(c, c.const(keep), c.node("Mul", [d_t, const_as(c, c.attr("tril_scale_value"), d)]), d,
                          c.output("dx"), zero_if=False)


op("fused_tril_scale_softmax_mask_scale", inputs=["x", "mask"], outputs=["y", "softmax_y"],
   attrs={"diagonal": ("int64", 0), "tril_fill_value": ("float", 0.0), "tril_scale_value": ("float", 1.0),
          "mask_scale_value": ("float", 1.0)},
   infer=_tril_softmax_infer, kernel=_tril_softmax_kernel, grad=_tril_softmax_grad,
   onnx=_fused_tril_scale_softmax_mask_scale_onnx, xla=_tril_softmax_xla, sbp=_BATCH_AXES,
   doc="softmax over the last axis of tril(x * scale, fill), then * mask * mask_scale_value", amp="gray")
op("fused_tril_scale_softmax_mask_scale_grad", inputs=["softmax_y", "dy", "mask"], outputs=["dx"],
   attrs={"diagonal": ("int64", 0), "tril_scale_value": ("float", 1.0), "mask_scale_value": ("float", 1.0)},
   infer=_tril_softmax_grad_infer, kernel=_tril_softmax_grad_kernel, xla=_tril_softmax_grad_xla,
   onnx=_tril_softmax_grad_onnx, sbp=lambda ctx: _BATCH_AXES(ctx) + [_sbp.partial_in(ctx, "dy")],
   doc="gradient of fused_tril_scale_softmax_mask_scale with respect to x")


# ------------------------------------------------------------------ fused_self_attention_query_mul_key_and_value

def _qkv_heads(shape, head_size):
    seq, batch, hidden = shape
    return seq, batch, hidden // (3 * head_size)


def _self_attention_infer(ctx):
    h = ctx.input("hidden_states")
    head_size = ctx.attr("head_size")
    ctx.check(not h.is_dynamic, "input 'hidden_states' must have a static shape")
    ctx.check(len(h.shape) == 3, f"input 'hidden_states' expected rank 3 (seq_len, batch, hidden), received {h.shape}")
    ctx.check(head_size > 0 and h.shape[2] % (3 * head_size) == 0,
              f"hidden size {h.shape[2]} of input 'hidden_states' must be a multiple of 3 * head_size "
              f"(head_size = {head_size})")
    seq, batch, heads = _qkv_heads(h.shape, head_size)
    ctx.set_output("query_mul_key", (batch, heads, seq, seq), h.dtype)
    ctx.set_output("value", (batch, heads, seq, head_size), h.dtype)


def _split_qkv(h, head_size):
    """(seq, batch, heads*3*hs) -> q, k, v each (batch, heads, seq, hs) views."""
    seq, batch, heads = _qkv_heads(h.shape, head_size)
    parts = h.view(seq, batch, heads, 3, head_size).permute(3, 1, 2, 0, 4)
    return parts[0], parts[1], parts[2]


def _self_attention_kernel(k):
    head_size, alpha = k.attr("head_size"), k.attr("alpha")

    def fused_self_attention_query_mul_key_and_value(h):
        q, key, v = _split_qkv(h, head_size)
        return torch.matmul(q, key.transpose(-1, -2)).mul_(alpha), v.contiguous()
    return fused_self_attention_query_mul_key_and_value


def _self_attention_grad_kernel(k):
    alpha = k.attr("alpha")
    seq, batch, hidden = k.input("hidden_states").shape
    head_size = k.input("value_grad").shape[-1]
    heads = hidden // (3 * head_size)

    def fused_self_attention_query_mul_key_and_value_grad(dqk, dv, h):
        q, key, _ = _split_qkv(h, head_size)
        dq = torch.matmul(dqk, key) * alpha
        dk = torch.matmul(dqk.transpose(-1, -2), q) * alpha
        grads = torch.stack([dq, dk, dv], dim=0)  # (3, batch, heads, seq, hs)
        return grads.permute(3, 1, 2, 0, 4).reshape(seq, batch, heads * 3 * head_size)
    return fused_self_attention_query_mul_key_and_value_grad


def _split_qkv_xla(h, head_size):
    seq, batch, heads = _qkv_heads(h.shape, head_size)
    parts = xla_rules.jnp().transpose(h.reshape(seq, batch, heads, 3, head_size), (3, 1, 2, 0, 4))
    return parts[0], parts[1], parts[2]


def _self_attention_xla(k):
    jnp, highest = xla_rules.jnp(), xla_rules.lax().Precision.HIGHEST
    head_size, alpha = k.attr("head_size"), k.attr("alpha")

    def fused_self_attention_query_mul_key_and_value(h):
        q, key, v = _split_qkv_xla(h, head_size)
        return jnp.matmul(q, jnp.swapaxes(key, -1, -2), precision=highest) * alpha, v
    return fused_self_attention_query_mul_key_and_value


def _self_attention_grad_xla(k):
    jnp, highest = xla_rules.jnp(), xla_rules.lax().Precision.HIGHEST
    alpha = k.attr("alpha")
    seq, batch, hidden = k.input("hidden_states").shape
    head_size = k.input("value_grad").shape[-1]
    heads = hidden // (3 * head_size)

    def fused_self_attention_query_mul_key_and_value_grad(dqk, dv, h):
        q, key, _ = _split_qkv_xla(h, head_size)
        dq = jnp.matmul(dqk, key, precision=highest) * alpha
        dk = jnp.matmul(jnp.swapaxes(dqk, -1, -2), q, precision=highest) * alpha
        grads = jnp.stack([dq, dk, dv], axis=0)  # (3, batch, heads, seq, hs)
        return jnp.transpose(grads, (3, 1, 2, 0, 4)).reshape(seq, batch, heads * 3 * head_size)
    return fused_self_attention_query_mul_key_and_value_grad


def _self_attention_grad(g):
    if not g.needs("hidden_states"):
        return
    qk_lbn, v_lbn = g.output("query_mul_key"), g.output("value")
    dqk, dv = g.dout("query_mul_key"), g.dout("value")
    if dqk is None:
        dqk = g.emit("zero_like", {"like": qk_lbn}, name=f"{g.op_name}_grad_qk_zero")
    if dv is None:
        dv = g.emit("zero_like", {"like": v_lbn}, name=f"{g.op_name}_grad_v_zero")
    g.set_grad("hidden_states", g.emit(
        "fused_self_attention_query_mul_key_and_value_grad",
        {"query_mul_key_grad": dqk, "value_grad": dv, "hidden_states": g.input("hidden_states")},
        {"alpha": g.attr("alpha")}))


def _self_attention_grad_infer(ctx):
    h = ctx.input("hidden_states")
    same_dtype(ctx, "query_mul_key_grad", "value_grad", "hidden_states")
    ctx.set_output("hidden_states_grad", h.shape, h.dtype)


def _split_qkv_onnx(c, head_size, value_out=None):
    """hidden_states (seq, batch, heads * 3 * head_size) -> the names of q, k, v (batch, heads, seq,
    head_size); v written to ``value_out`` when given."""
    seq, batch, hidden = c.input_desc("hidden_states").shape
    heads = hidden // (3 * head_size)
    h = c.node("Reshape", [c.input("hidden_states"), c.const(int64s([seq, batch, heads, 3, head_size]))])
    h = c.node("Transpose", [h], perm=[3, 1, 2, 0, 4])
    return [c.node("Gather", [h, c.const(np.int64(i))], [value_out] if i == 2 and value_out else None, axis=0)
            for i in range(3)]


def _fused_self_attention_query_mul_key_and_value_onnx(c):
    """query_mul_key = alpha * q @ k^T, value = v (of :func:`_split_qkv_onnx`)."""
    q, k, _ = _split_qkv_onnx(c, c.attr("head_size"), c.output("value"))
    qk = c.node("MatMul", [q, c.node("Transpose", [k], perm=[0, 1, 3, 2])])
    c.node("Mul", [qk, const_as(c, c.attr("alpha"), c.input_desc("hidden_states"))], [c.output("query_mul_key")])


def _self_attention_grad_onnx(c):
    """dq = alpha * dqk @ k, dk = alpha * dqk^T @ q, and dv packed back as the kernel:
    (3, batch, heads, seq, hs) -> (seq, batch, heads * 3 * hs)."""
    d = c.input_desc("hidden_states")
    q, k, _ = _split_qkv_onnx(c, c.input_desc("value_grad").shape[-1])
    dqk, alpha = c.input("query_mul_key_grad"), const_as(c, c.attr("alpha"), d)
    dq = c.node("Mul", [c.node("MatMul", [dqk, k]), alpha])
    dk = c.node("Mul", [c.node("MatMul", [c.node("Transpose", [dqk], perm=[0, 1, 3, 2]), q]), alpha])
    axis0 = c.const(int64s([0]))
    grads = c.node("Concat", [c.node("Unsqueeze", [g, axis0]) for g in (dq, dk, c.input("value_grad"))], axis=0)
    c.node("Reshape", [c.node("Transpose", [grads], perm=[3, 1, 2, 0, 4]), c.const(int64s(d.shape))],
           [c.output("hidden_states_grad")])


def _self_attention_sbp(ctx):
    """OneFlow's: hidden_states (seq, batch, heads * 3 * head_size) split on the batch (its
    axis 1) or on the heads (its axis 2) splits the (batch, heads, ...) outputs and grads on
    axis 0 or 1 (a split of the hidden axis must fall between heads: each device's part of
    it is whole heads where the heads divide evenly, ``sbp._valid``). The grad is linear in
    the output grads (hidden_states broadcast)."""
    cands = [_sbp.signature(ctx, _sbp.split(k - 1), hidden_states=_sbp.split(k), hidden_states_grad=_sbp.split(k))
             for k in (1, 2)]
    if ctx.has("hidden_states_grad"):
        cands.append(_sbp.signature(ctx, _sbp.P, hidden_states=_sbp.B))
    return cands


op("fused_self_attention_query_mul_key_and_value", inputs=["hidden_states"], outputs=["query_mul_key", "value"],
   attrs={"head_size": ("int64", 0), "alpha": ("float", 1.0)}, infer=_self_attention_infer,
   kernel=_self_attention_kernel, grad=_self_attention_grad,
   onnx=_fused_self_attention_query_mul_key_and_value_onnx, xla=_self_attention_xla, sbp=_self_attention_sbp,
   doc="alpha * q @ k^T and v of packed (seq, batch, heads*3*head_size) hidden states", amp="white")
op("fused_self_attention_query_mul_key_and_value_grad",
   inputs=["query_mul_key_grad", "value_grad", "hidden_states"], outputs=["hidden_states_grad"],
   attrs={"alpha": ("float", 1.0)}, infer=_self_attention_grad_infer, kernel=_self_attention_grad_kernel,
   xla=_self_attention_grad_xla, onnx=_self_attention_grad_onnx, sbp=_self_attention_sbp,
   doc="gradient of fused_self_attention_query_mul_key_and_value with respect to hidden_states")


# ------------------------------------------------------------------ fused_cast_scale

def _cast_scale_infer(ctx):
    s = ctx.input("scale_by_tensor")
    ctx.check(s.shape in ((1,), ()), f"input 'scale_by_tensor' expected shape (1,), received {s.shape}")
    ctx.check(s.dtype.is_floating_point, f"input 'scale_by_tensor' expected a floating dtype, received {s.dtype.name}")
    ctx.set_output("y", ctx.input("x").shape, s.dtype, is_dynamic=ctx.input("x").is_dynamic)


def _cast_scale_kernel(k):
    """One kernel where ``x``'s dtype promotes to the factor's (float16 to float32): a
    one-element 1-D factor takes part in type promotion, so the product is computed and
    written in the factor's dtype straight from ``x``, with no cast copy of ``x``."""
    scale = k.attr("scale")
    x_dtype, s_dtype = k.input("x").dtype.torch, k.input("scale_by_tensor").dtype.torch
    promotes = torch.promote_types(x_dtype, s_dtype) == s_dtype

    def fused_cast_scale(x, s):
        factor = s.reshape(1) if scale == 1.0 else s.reshape(1) * scale
        return torch.mul(x if promotes else x.to(s.dtype), factor).reshape(x.shape)
    return fused_cast_scale


def _fused_cast_scale_onnx(c):
    """cast(x, dtype of scale_by_tensor) * (scale_by_tensor * scale)."""
    d = c.input_desc("scale_by_tensor")
    x = c.node("Cast", [c.input("x")], to=c.dtype_code(d.dtype))
    scale = c.node("Reshape", [c.input("scale_by_tensor"), c.const(int64s([]))])
    s = c.node("Mul", [scale, const_as(c, c.attr("scale"), d)])
    c.node("Mul", [x, s], [c.output("y")])


op("fused_cast_scale", inputs=["x", "scale_by_tensor"], outputs=["y"], attrs={"scale": ("double", 1.0)},
   infer=_cast_scale_infer, kernel=_cast_scale_kernel, onnx=_fused_cast_scale_onnx,
   sbp=lambda ctx: _sbp.elementwise(p_each=("x",))(ctx) + [_sbp.partial_in(ctx, "scale_by_tensor")],
   xla=lambda k: (lambda x, s, c=k.attr("scale"): x.astype(s.dtype) * (s.reshape(()) * c)),
   doc="cast(x, dtype of scale_by_tensor) * scale * scale_by_tensor")
