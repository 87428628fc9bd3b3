"""Activation ops: leaky_relu, elu, celu, hard*, mish, silu, selu, softsign, prelu, tf_prelu.

(``gelu`` lives with the math family in ``math_ops.py``.)

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/``: ``prelu_op.cpp``, ``hardtanh_op.cpp`` and the unary
activation ``*_op.cpp`` files). Every activation here is ``in -> out`` except ``leaky_relu`` (``x -> y``);
its grad op ``<op>_grad`` takes the forward input ``x`` and ``dy`` (``hardtanh_grad``
takes the forward output ``y``) and copies the forward attrs. Formulas are the usual
definitions (PyTorch's ``torch.nn.functional`` documents the same ones); each grad
kernel is the closed-form derivative, with PyTorch's choice at the kinks (the
derivative at ``x == 0`` of leaky_relu/elu/celu is the left one, hardswish uses
``x <= 3`` for the middle piece).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from graphfront.ops.common import float_input, same_dtype
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import const_as, int64s
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def grad_like(src):
    """Inference of a ``(src, dy) -> dx`` grad op: dy must match ``src``; dx = src."""
    def infer(ctx):
        s, dy = ctx.input(src), ctx.input("dy")
        ctx.check(dy.shape == s.shape, f"input 'dy' expected shape {s.shape} (as '{src}'), received {dy.shape}")
        same_dtype(ctx, src, "dy")
        ctx.set_output("dx", s.shape, s.dtype)
    return infer


def activation(name, fwd, bwd, *, args=("in", "out"), attrs=None, grad_src="x", doc="", onnx=None, xla=None,
               grad_onnx=None):
    """Register an elementwise activation ``name`` and its ``name_grad`` (on several devices
    split along any axis, as their input arrives).

    ``fwd(attrs) -> callable(x)`` and ``bwd(attrs) -> callable(src, dy)`` are built once
    per op at lowering time from the op's attr dict. ``grad_src`` is ``"x"`` (the grad
    op gets the forward input) or ``"y"`` (the forward output). ``onnx(c, x, out, desc)``
    writes the op's ONNX nodes (see :func:`onnx_rules.unary`), ``grad_onnx(c, src, dy, out, desc)``
    the grad op's (see :func:`onnx_rules.grad`). ``xla`` is ``(fwd, bwd)``
    of the same form over ``jax.Array`` values (``jnp`` below): the two ops' ``xla`` rules.
    """
    i, o = args
    attr_names = list(attrs or {})

    def infer(ctx):
        d = float_input(ctx, i)
        ctx.set_output(o, d.shape, d.dtype)

    def grad(g):
        if not g.needs(i) or g.dout(o) is None:
            return
        src = g.input(i) if grad_src == "x" else g.output(o)
        g.set_grad(i, g.emit(f"{name}_grad", {grad_src: src, "dy": g.dout(o)},
                             {a: g.attr(a) for a in attr_names}))

    xla_fwd, xla_bwd = xla or (None, None)
    op(name, inputs=[i], outputs=[o], attrs=attrs, infer=infer, kernel=lambda k: fwd(k.attrs), grad=grad,
       doc=doc, onnx=onnx and onnx_rules.unary(onnx, i, o), xla=xla_fwd and (lambda k: xla_fwd(k.attrs)),
       sbp=_sbp.elementwise())
    op(f"{name}_grad", inputs=[grad_src, "dy"], outputs=["dx"], attrs=attrs, infer=grad_like(grad_src),
       kernel=lambda k: bwd(k.attrs), doc=f"gradient of {name}", xla=xla_bwd and (lambda k: xla_bwd(k.attrs)),
       onnx=grad_onnx and onnx_rules.grad(grad_onnx, grad_src), sbp=_sbp.elementwise())


def jnp():
    """``jax.numpy`` (imported when an ``xla`` rule is made)."""
    return xla_rules.jnp()


def _jnn():
    import jax.nn
    return jax.nn


def _zero(t):
    return torch.zeros((), dtype=t.dtype, device=t.device)


def _nonzero_alpha(v):
    return None if v != 0 else "must be non-zero (celu divides by alpha)"


def _positive(c, x, d):
    return c.node("Greater", [x, const_as(c, 0, d)])


def _between(c, x, lo, hi, d):
    """lo < x < hi (bool)."""
    return c.node("And", [c.node("Greater", [x, const_as(c, lo, d)]), c.node("Less", [x, const_as(c, hi, d)])])


def _dy_where_positive(negative):
    """Grads of the activations that are x for x > 0: dy where x > 0, else ``negative(c, x, dy, d)``."""
    return lambda c, x, dy, out, d: c.node("Where", [_positive(c, x, d), dy, negative(c, x, dy, d)], [out])


# ------------------------------------------------------------------ piecewise-linear family

def _leaky_relu_onnx(c, x, out, d):
    """x if x > 0 else alpha * x (spelled out: onnxruntime's LeakyRelu is float-only)."""
    negative = c.node("Mul", [x, const_as(c, c.attr("alpha"), d)])
    c.node("Where", [c.node("Greater", [x, const_as(c, 0, d)]), x, negative], [out])


activation(
    "leaky_relu",
    lambda a: (lambda x, s=a["alpha"]: F.leaky_relu(x, s)),
    lambda a: (lambda x, dy, s=a["alpha"]: torch.where(x > 0, dy, dy * s)),
    args=("x", "y"), attrs={"alpha": ("float", 0.0)},
    doc="y = x if x > 0 else alpha * x", onnx=_leaky_relu_onnx,
    grad_onnx=_dy_where_positive(lambda c, x, dy, d: c.node("Mul", [dy, const_as(c, c.attr("alpha"), d)])),
    xla=(lambda a: (lambda x, s=a["alpha"]: jnp().where(x > 0, x, x * s)),
         lambda a: (lambda x, dy, s=a["alpha"]: jnp().where(x > 0, dy, dy * s))))

def _hardtanh_onnx(c, x, out, d):
    c.node("Clip", [x, const_as(c, c.attr("min_val"), d), const_as(c, c.attr("max_val"), d)], [out])


activation(
    "hardtanh",
    lambda a: (lambda x, lo=a["min_val"], hi=a["max_val"]: F.hardtanh(x, lo, hi)),
    lambda a: (lambda y, dy, lo=a["min_val"], hi=a["max_val"]:
               torch.where((y > lo) & (y < hi), dy, _zero(dy))),
    attrs={"min_val": ("double", 0.0), "max_val": ("double", 0.0)}, grad_src="y",
    doc="out = clamp(in, min_val, max_val); the grad passes dy where min_val < y < max_val", onnx=_hardtanh_onnx,
    grad_onnx=lambda c, y, dy, out, d: onnx_rules.where_zero(
        c, _between(c, y, c.attr("min_val"), c.attr("max_val"), d), dy, d, out, zero_if=False),
    xla=(lambda a: (lambda x, lo=a["min_val"], hi=a["max_val"]: jnp().clip(x, lo, hi).astype(x.dtype)),
         lambda a: (lambda y, dy, lo=a["min_val"], hi=a["max_val"]: jnp().where((y > lo) & (y < hi), dy, 0))))

def _relu6_plus_3_onnx(c, x, d):
    """min(max(x + 3, 0), 6), the core of hardsigmoid / hardswish in the kernels' order of operations."""
    return c.node("Clip", [c.node("Add", [x, const_as(c, 3, d)]), const_as(c, 0, d), const_as(c, 6, d)])


def _hardsigmoid_onnx(c, x, out, d):
    """relu6(x + 3) / 6."""
    c.node("Div", [_relu6_plus_3_onnx(c, x, d), const_as(c, 6, d)], [out])


activation(
    "hardsigmoid",
    lambda a: F.hardsigmoid,
    lambda a: (lambda x, dy: torch.where((x > -3) & (x < 3), dy / 6, _zero(dy))),
    doc="out = relu6(in + 3) / 6", onnx=_hardsigmoid_onnx,
    grad_onnx=lambda c, x, dy, out, d: onnx_rules.where_zero(
        c, _between(c, x, -3, 3, d), c.node("Div", [dy, const_as(c, 6, d)]), d, out, zero_if=False),
    xla=(lambda a: (lambda x: jnp().clip(x + 3, 0, 6) / 6),
         lambda a: (lambda x, dy: jnp().where((x > -3) & (x < 3), dy / 6, 0))))


def _hardswish_grad(x, dy):
    mid = dy * (x / 3 + 0.5)
    return torch.where(x < -3, _zero(dy), torch.where(x <= 3, mid, dy))


def _hardswish_onnx(c, x, out, d):
    """x * relu6(x + 3) / 6."""
    c.node("Div", [c.node("Mul", [x, _relu6_plus_3_onnx(c, x, d)]), const_as(c, 6, d)], [out])


def _hardswish_grad_onnx(c, x, dy, out, d):
    """0 for x < -3, dy * (x / 3 + 0.5) for x <= 3, dy above."""
    mid = c.node("Mul", [dy, c.node("Add", [c.node("Div", [x, const_as(c, 3, d)]), const_as(c, 0.5, d)])])
    upper = c.node("Where", [c.node("LessOrEqual", [x, const_as(c, 3, d)]), mid, dy])
    onnx_rules.where_zero(c, c.node("Less", [x, const_as(c, -3, d)]), upper, d, out)


activation("hardswish", lambda a: F.hardswish, lambda a: _hardswish_grad, doc="out = in * relu6(in + 3) / 6",
           onnx=_hardswish_onnx, grad_onnx=_hardswish_grad_onnx,
           xla=(lambda a: (lambda x: x * jnp().clip(x + 3, 0, 6) / 6),
                lambda a: (lambda x, dy: jnp().where(x < -3, 0, jnp().where(x <= 3, dy * (x / 3 + 0.5), dy)))))

# ------------------------------------------------------------------ exponential family

def _exp_branch_onnx(c, x, d, alpha, inner_scale):
    """min(0, alpha * (exp(x * inner_scale) - 1)) (the negative branch of elu / celu / selu)."""
    e = c.node("Sub", [c.node("Exp", [c.node("Mul", [x, const_as(c, inner_scale, d)])]), const_as(c, 1, d)])
    return c.node("Min", [const_as(c, 0, d), c.node("Mul", [e, const_as(c, alpha, d)])])


def _elu_family_onnx(c, x, out, d, alpha, inner_scale=1.0, scale=None):
    """max(0, x) + min(0, alpha * (exp(x * inner_scale) - 1)), times ``scale`` if given."""
    y = c.node("Add", [c.node("Max", [const_as(c, 0, d), x]), _exp_branch_onnx(c, x, d, alpha, inner_scale)],
               None if scale is not None else [out])
    if scale is not None:
        c.node("Mul", [y, const_as(c, scale, d)], [out])


def _elu_onnx(c, x, out, d):
    _elu_family_onnx(c, x, out, d, c.attr("alpha"))


activation(
    "elu",
    lambda a: (lambda x, al=a["alpha"]: F.elu(x, al)),
    lambda a: (lambda x, dy, al=a["alpha"]: torch.where(x > 0, dy, dy * al * torch.exp(x))),
    attrs={"alpha": ("double", 0.0)},
    doc="out = in if in > 0 else alpha * (exp(in) - 1)", onnx=_elu_onnx,
    grad_onnx=_dy_where_positive(lambda c, x, dy, d: onnx_rules.mul(
        c, dy, const_as(c, c.attr("alpha"), d), c.node("Exp", [x]))),
    xla=(lambda a: (lambda x, al=a["alpha"]: jnp().where(x > 0, x, al * jnp().expm1(x))),
         lambda a: (lambda x, dy, al=a["alpha"]: jnp().where(x > 0, dy, dy * al * jnp().exp(x)))))

def _celu_onnx(c, x, out, d):
    _elu_family_onnx(c, x, out, d, c.attr("alpha"), 1.0 / c.attr("alpha"))


activation(
    "celu",
    lambda a: (lambda x, al=a["alpha"]: F.celu(x, al)),
    lambda a: (lambda x, dy, al=a["alpha"]: torch.where(x > 0, dy, dy * torch.exp(x / al))),
    attrs={"alpha": ("double", 0.0, _nonzero_alpha)},
    doc="out = max(0, in) + min(0, alpha * (exp(in / alpha) - 1))", onnx=_celu_onnx,
    grad_onnx=_dy_where_positive(lambda c, x, dy, d: c.node("Mul", [
        dy, c.node("Exp", [c.node("Div", [x, const_as(c, c.attr("alpha"), d)])])])),
    xla=(lambda a: (lambda x, al=a["alpha"]: jnp().where(x > 0, x, al * jnp().expm1(x / al))),
         lambda a: (lambda x, dy, al=a["alpha"]: jnp().where(x > 0, dy, dy * jnp().exp(x / al)))))

def _selu_onnx(c, x, out, d):
    _elu_family_onnx(c, x, out, d, SELU_ALPHA, scale=SELU_SCALE)


activation(
    "selu",
    lambda a: F.selu,
    lambda a: (lambda x, dy: torch.where(x > 0, dy * SELU_SCALE, dy * (SELU_SCALE * SELU_ALPHA) * torch.exp(x))),
    doc=f"out = scale * (max(0, in) + min(0, alpha * (exp(in) - 1))), alpha={SELU_ALPHA}, scale={SELU_SCALE}",
    onnx=_selu_onnx,
    grad_onnx=lambda c, x, dy, out, d: c.node("Where", [
        _positive(c, x, d), c.node("Mul", [dy, const_as(c, SELU_SCALE, d)]),
        onnx_rules.mul(c, dy, const_as(c, SELU_SCALE * SELU_ALPHA, d), c.node("Exp", [x]))], [out]),
    xla=(lambda a: (lambda x: SELU_SCALE * jnp().where(x > 0, x, SELU_ALPHA * jnp().expm1(x))),
         lambda a: (lambda x, dy: jnp().where(x > 0, dy * SELU_SCALE, dy * (SELU_SCALE * SELU_ALPHA) * jnp().exp(x)))))


def _silu_grad(x, dy):
    s = torch.sigmoid(x)
    return dy * s * (1 + x * (1 - s))


def _silu_onnx(c, x, out, d):
    c.node("Mul", [x, c.node("Sigmoid", [x])], [out])


def _silu_grad_xla(x, dy):
    s = _jnn().sigmoid(x)
    return dy * s * (1 + x * (1 - s))


def _silu_grad_onnx(c, x, dy, out, d):
    """dy * s * (1 + x * (1 - s)), s = sigmoid(x)."""
    s = c.node("Sigmoid", [x])
    one = const_as(c, 1, d)
    onnx_rules.mul(c, dy, s, c.node("Add", [one, c.node("Mul", [x, c.node("Sub", [one, s])])]), out=out)


activation("silu", lambda a: F.silu, lambda a: _silu_grad, doc="out = in * sigmoid(in)", onnx=_silu_onnx,
           grad_onnx=_silu_grad_onnx,
           xla=(lambda a: (lambda x: x * _jnn().sigmoid(x)), lambda a: _silu_grad_xla))


def _mish_grad(x, dy):
    t = torch.tanh(F.softplus(x))
    return dy * (t + x * (1 - t * t) * torch.sigmoid(x))


def _mish_onnx(c, x, out, d):
    if c.opset >= 18:
        c.node("Mish", [x], [out])
    else:
        c.node("Mul", [x, c.node("Tanh", [c.node("Softplus", [x])])], [out])


def _mish_grad_xla(x, dy):
    t = jnp().tanh(_jnn().softplus(x))
    return dy * (t + x * (1 - t * t) * _jnn().sigmoid(x))


def _mish_grad_onnx(c, x, dy, out, d):
    """dy * (t + x * (1 - t * t) * sigmoid(x)), t = tanh(softplus(x))."""
    t = c.node("Tanh", [c.node("Softplus", [x])])
    one_minus = c.node("Sub", [const_as(c, 1, d), c.node("Mul", [t, t])])
    c.node("Mul", [dy, c.node("Add", [t, onnx_rules.mul(c, x, one_minus, c.node("Sigmoid", [x]))])], [out])


activation("mish", lambda a: F.mish, lambda a: _mish_grad, doc="out = in * tanh(softplus(in))", onnx=_mish_onnx,
           grad_onnx=_mish_grad_onnx,
           xla=(lambda a: (lambda x: x * jnp().tanh(_jnn().softplus(x))), lambda a: _mish_grad_xla))

def _softsign_onnx(c, x, out, d):
    """x / (1 + |x|) (spelled out: onnxruntime's Softsign is float-only)."""
    c.node("Div", [x, c.node("Add", [const_as(c, 1, d), c.node("Abs", [x])])], [out])


activation(
    "softsign",
    lambda a: F.softsign,
    lambda a: (lambda x, dy: dy / torch.square(1 + torch.abs(x))),
    doc="out = in / (1 + |in|)", onnx=_softsign_onnx,
    grad_onnx=lambda c, x, dy, out, d: c.node("Div", [dy, onnx_rules.mul(c, *[c.node(
        "Add", [const_as(c, 1, d), c.node("Abs", [x])])] * 2)], [out]),
    xla=(lambda a: (lambda x: x / (1 + jnp().abs(x))), lambda a: (lambda x, dy: dy / jnp().square(1 + jnp().abs(x)))))


# ------------------------------------------------------------------ prelu / tf_prelu

def _prelu_infer(ctx):
    x, alpha = float_input(ctx, "x"), ctx.input("alpha")
    same_dtype(ctx, "x", "alpha")
    c = x.shape[1] if len(x.shape) >= 2 else 1
    ctx.check(len(alpha.shape) == 1 and alpha.shape[0] in (1, c),
              f"input 'alpha' expected shape (1,) or ({c},) (dim 1 of input 'x' {x.shape}), received {alpha.shape}")
    ctx.set_output("y", x.shape, x.dtype)


def _prelu_view(x, alpha):
    """alpha (C,) viewed to broadcast along dim 1 of x."""
    if x.dim() < 2 or alpha.numel() == 1:
        return alpha.reshape(())
    return alpha.reshape((1, -1) + (1,) * (x.dim() - 2))


def _prelu_kernel(k):
    return lambda x, alpha: torch.where(x > 0, x, x * _prelu_view(x, alpha))


def _prelu_grad_kernel(k):
    def prelu_grad(x, dy, alpha):
        a = _prelu_view(x, alpha)
        dx = torch.where(x > 0, dy, dy * a)
        da = torch.where(x > 0, _zero(dy), dy * x)
        if alpha.numel() == 1 or x.dim() < 2:
            return dx, da.sum().reshape(alpha.shape)
        return dx, da.sum(dim=[d for d in range(x.dim()) if d != 1])
    return prelu_grad


def _prelu_view_xla(x, alpha):
    """:func:`_prelu_view` of jax arrays."""
    if x.ndim < 2 or alpha.size == 1:
        return alpha.reshape(())
    return alpha.reshape((1, -1) + (1,) * (x.ndim - 2))


def _prelu_grad_xla(k):
    def prelu_grad(x, dy, alpha):
        dx = jnp().where(x > 0, dy, dy * _prelu_view_xla(x, alpha))
        da = jnp().where(x > 0, 0, dy * x)
        if alpha.size == 1 or x.ndim < 2:
            return dx, da.sum().reshape(alpha.shape)
        return dx, da.sum(axis=tuple(d for d in range(x.ndim) if d != 1))
    return prelu_grad


def _tf_prelu_grad_xla(k):
    ashape = tuple(k.input("alpha").shape)

    def tf_prelu_grad(x, dy, alpha):
        dx = jnp().where(x > 0, dy, dy * alpha)
        da = jnp().where(x > 0, 0, dy * x)
        axes = (0,) + tuple(i + 1 for i, a in enumerate(ashape) if a == 1 and x.shape[i + 1] != 1)
        return dx, da.sum(axis=axes, keepdims=True).reshape(ashape)
    return tf_prelu_grad


def _tf_prelu_infer(ctx):
    x, alpha = float_input(ctx, "x"), ctx.input("alpha")
    same_dtype(ctx, "x", "alpha")
    ok = len(alpha.shape) == len(x.shape) - 1 and all(a in (1, s) for a, s in zip(alpha.shape, x.shape[1:]))
    ctx.check(ok, f"input 'alpha' expected shape {x.shape[1:]} (input 'x' {x.shape} without its batch dim; "
                  f"shared axes may be 1), received {alpha.shape}")
    ctx.set_output("y", x.shape, x.dtype)


def _tf_prelu_kernel(k):
    return lambda x, alpha: torch.where(x > 0, x, x * alpha)


def _tf_prelu_grad_kernel(k):
    ashape = tuple(k.input("alpha").shape)

    def tf_prelu_grad(x, dy, alpha):
        dx = torch.where(x > 0, dy, dy * alpha)
        da = torch.where(x > 0, _zero(dy), dy * x)
        axes = [0] + [i + 1 for i, a in enumerate(ashape) if a == 1 and x.shape[i + 1] != 1]
        return dx, da.sum(dim=axes, keepdim=True).reshape(ashape)
    return tf_prelu_grad


def _prelu_grad_infer(ctx):
    x, dy, alpha = ctx.input("x"), ctx.input("dy"), ctx.input("alpha")
    ctx.check(dy.shape == x.shape, f"input 'dy' expected shape {x.shape} (as 'x'), received {dy.shape}")
    ctx.set_output("dx", x.shape, x.dtype)
    ctx.set_output("alpha_diff", alpha.shape, alpha.dtype)


def _prelu_family_grad(op_type):
    def grad(g):
        if g.dout("y") is None or not (g.needs("x") or g.needs("alpha")):
            return
        outs = g.emit(f"{op_type}_grad", {"x": g.input("x"), "dy": g.dout("y"), "alpha": g.input("alpha")},
                      outputs=["dx", "alpha_diff"])
        if g.needs("x"):
            g.set_grad("x", outs["dx"])
        if g.needs("alpha"):
            g.set_grad("alpha", g.emit("identity", {"in": outs["alpha_diff"]},
                                       name=f"{g.op_name}_alpha_grad_identity"))
    return grad


def _prelu_onnx_rule(channel_view):
    def convert(c):
        x, d = c.input("x"), c.input_desc("x")
        alpha = c.input("alpha")
        if channel_view:   # alpha (C,) along dim 1 of x, or one value
            n = len(d.shape)
            shape = [] if n < 2 or int(np.prod(c.input_desc("alpha").shape)) == 1 else [1, -1] + [1] * (n - 2)
            alpha = c.node("Reshape", [alpha, c.const(int64s(shape))])
        c.node("Where", [c.node("Greater", [x, const_as(c, 0, d)]), x, c.node("Mul", [x, alpha])], [c.output("y")])
    return convert


_prelu_onnx = _prelu_onnx_rule(True)


def _prelu_sbp(ctx):
    """x, y and their gradients split along the batch, alpha broadcast, its gradient a
    partial sum (OneFlow's ``prelu_op.cpp``)."""
    return [{a: _sbp.B if a == "alpha" else _sbp.P if a == "alpha_diff" else _sbp.split(0) for a in ctx.args}]


op("prelu", inputs=["x", "alpha"], outputs=["y"], infer=_prelu_infer, kernel=_prelu_kernel, sbp=_prelu_sbp,
   grad=_prelu_family_grad("prelu"), doc="y = x if x > 0 else alpha[c] * x, c = dim 1 of x", onnx=_prelu_onnx,
   amp="white", xla=lambda k: (lambda x, alpha: jnp().where(x > 0, x, x * _prelu_view_xla(x, alpha))))
def _prelu_grad_onnx_rule(channel_view):
    """dx = dy where x > 0 else dy * alpha; alpha_diff = the sum of (0 where x > 0 else dy * x) over
    the axes alpha is broadcast along."""
    def convert(c):
        x, dy, d = c.input("x"), c.input("dy"), c.input_desc("x")
        alpha, ashape, n = c.input("alpha"), tuple(c.input_desc("alpha").shape), len(d.shape)
        if channel_view:
            one = n < 2 or int(np.prod(ashape)) == 1
            view = [] if one else [1, -1] + [1] * (n - 2)
            axes = list(range(n)) if one else [i for i in range(n) if i != 1]
        else:
            view = list(ashape)
            axes = [0] + [i + 1 for i, a in enumerate(ashape) if a == 1 and d.shape[i + 1] != 1]
        a = c.node("Reshape", [alpha, c.const(int64s(view))])
        positive = c.node("Greater", [x, const_as(c, 0, d)])
        c.node("Where", [positive, dy, c.node("Mul", [dy, a])], [c.output("dx")])
        da = onnx_rules.where_zero(c, positive, c.node("Mul", [dy, x]), d)
        if axes:
            da = onnx_rules.reduce_node(c, "ReduceSum", da, axes, 1)
        c.node("Reshape", [da, c.const(int64s(ashape))], [c.output("alpha_diff")])
    return convert


op("prelu_grad", inputs=["x", "dy", "alpha"], outputs=["dx", "alpha_diff"], infer=_prelu_grad_infer,
   kernel=_prelu_grad_kernel, xla=_prelu_grad_xla, onnx=_prelu_grad_onnx_rule(True), sbp=_prelu_sbp)
_tf_prelu_onnx = _prelu_onnx_rule(False)


op("tf_prelu", inputs=["x", "alpha"], outputs=["y"], infer=_tf_prelu_infer, kernel=_tf_prelu_kernel, sbp=_prelu_sbp,
   grad=_prelu_family_grad("tf_prelu"), doc="y = x if x > 0 else alpha * x, alpha broadcast over x.shape[1:]",
   onnx=_tf_prelu_onnx, amp="white", xla=lambda k: (lambda x, alpha: jnp().where(x > 0, x, x * alpha)))
op("tf_prelu_grad", inputs=["x", "dy", "alpha"], outputs=["dx", "alpha_diff"], infer=_prelu_grad_infer,
   kernel=_tf_prelu_grad_kernel, xla=_tf_prelu_grad_xla, onnx=_prelu_grad_onnx_rule(False), sbp=_prelu_sbp)
