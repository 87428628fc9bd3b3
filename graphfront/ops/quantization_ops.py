"""Quantization-aware training ops: observers that pick a quantization scale and the
fake-quantization op that rounds a blob to that grid (OneFlow v0.6.0
``oneflow/user/ops/min_max_observer_op.cpp``, ``moving_average_min_max_observer_op.cpp`` and
``fake_quantization_op.cpp``, with the CPU kernels' arithmetic).

Attrs shared by the three: ``quantization_formula`` (``"google"`` or ``"cambricon"``),
``quantization_bit`` (int32, 8) and ``quantization_scheme`` (``"symmetric"`` or ``"affine"``).

* ``min_max_observer`` (in -> scale, zero_point): ``google``/``symmetric``:
  ``scale = max|in| / (2^(bit-1) - 1)``, ``zero_point = 0``; ``google``/``affine``:
  ``scale = (max - min) / (2^bit - 1)``, ``zero_point = -round(min / scale)``; ``cambricon``:
  ``scale = floor(log2(max|in|)) - (bit - 2)`` (a power-of-two shift), ``zero_point = 0``.
  ``per_layer_quantization`` (default True) gives one value; False one per slice along
  axis 0 (``google`` only). Shapes ``(1,)`` or ``(in.shape[0],)``.
* ``moving_average_min_max_observer`` (in, current_train_step, moving_max, moving_min ->
  scale, zero_point): while ``training`` and ``current_train_step <= stop_update_after_iters``
  it updates the variables ``moving_max`` / ``moving_min`` in place
  (``m = in_value`` when ``m == 0``, else ``m * momentum + in_value * (1 - momentum)``;
  symmetric and cambricon track ``max|in|`` in both), then derives the scale as above from
  them (affine: ``zero_point = -moving_min / scale``, not rounded). Per layer only.
* ``fake_quantization`` (in, scale, zero_point -> out): ``google``/``symmetric``:
  ``clamp(round(in / s), -2^(bit-1), 2^(bit-1) - 1) * s``; ``google``/``affine``, with
  ``z = uint8(round(zero_point))``: ``(clamp(round(in / s + z), 0, 2^bit - 1) - z) * s``;
  ``cambricon``: symmetric with ``s = 2^int(shift)``. A scale of one element per slice of
  axis 0 quantizes per channel. Rounding is to nearest, ties to even. Its gradient is the
  straight-through estimator: ``identity`` of the output's gradient.
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import const_as, int64s
from graphfront.ops.common import like
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


def _one_of(values):
    return lambda v: None if v in values else f"expected one of {', '.join(map(repr, values))}, received {v!r}"


QUANT_ATTRS = {
    "quantization_formula": ("string", "google", _one_of(("google", "cambricon"))),
    "quantization_bit": ("int32", 8, lambda v: None if 2 <= v <= 16 else f"expected 2..16, received {v}"),
    "quantization_scheme": ("string", "symmetric", _one_of(("symmetric", "affine"))),
}


def _float_in(ctx):
    d = ctx.input("in")
    ctx.check(d.dtype in (_dt.float32, _dt.float64), f"input 'in' expected float32 or float64, received {d.dtype.name}")
    return d


def _scale_of(lo, hi, absmax, k, xp=torch):
    """(scale, zero_point) from per-slice min, max and max|.| tensors (``xp``: torch, or
    jax.numpy for the ``xla`` rules)."""
    bit, formula = k.attr("quantization_bit"), k.attr("quantization_formula")
    if formula == "cambricon":
        return xp.floor(xp.log2(absmax)) - (bit - 2), xp.zeros_like(absmax)
    if k.attr("quantization_scheme") == "symmetric":
        return absmax / (2.0 ** (bit - 1) - 1), xp.zeros_like(absmax)
    scale = (hi - lo) / (2.0 ** bit - 1)
    return scale, -xp.round(lo / scale)


# ------------------------------------------------------------------ min_max_observer

def _min_max_infer(ctx):
    d = _float_in(ctx)
    per_layer = ctx.attr("per_layer_quantization")
    ctx.check(per_layer or ctx.attr("quantization_formula") == "google",
              "per-channel quantization (per_layer_quantization=False) needs quantization_formula 'google'")
    n = 1 if per_layer else d.shape[0]
    ctx.set_output("scale", (n,), d.dtype)
    ctx.set_output("zero_point", (n,), d.dtype)


def _min_max_kernel(k):
    per_layer = k.attr("per_layer_quantization")

    def min_max_observer(x):
        flat = x.reshape(1, -1) if per_layer else x.reshape(x.shape[0], -1)
        lo, hi = flat.amin(dim=1), flat.amax(dim=1)
        return _scale_of(lo, hi, torch.maximum(hi.abs(), lo.abs()), k)
    return min_max_observer


def _min_max_xla(k):
    jnp = xla_rules.jnp()
    per_layer = k.attr("per_layer_quantization")

    def min_max_observer(x):
        flat = x.reshape(1, -1) if per_layer else x.reshape(x.shape[0], -1)
        lo, hi = flat.min(axis=1), flat.max(axis=1)
        return _scale_of(lo, hi, jnp.maximum(jnp.abs(hi), jnp.abs(lo)), k, jnp)
    return min_max_observer


def _cambricon_shift_onnx(c, absmax, d, out):
    """cambricon's ``floor(log2(absmax)) - (bit - 2)``, exact: Floor(Log(a) / Log(2)) can land one
    off near powers of two, so the estimate k is moved down where 2^k > a and up where
    2^(k+1) <= a (Pow of 2 to an integer is exact). a = 0 gives -inf, as torch.log2."""
    k = c.node("Floor", [c.node("Div", [c.node("Log", [absmax]), const_as(c, np.log(2.0), d)])])
    p = c.node("Pow", [const_as(c, 2.0, d), k])
    down = c.node("Cast", [c.node("Greater", [p, absmax])], to=c.dtype_code(d.dtype))
    up = c.node("Cast", [c.node("LessOrEqual", [c.node("Mul", [p, const_as(c, 2.0, d)]), absmax])],
                to=c.dtype_code(d.dtype))
    k = c.node("Add", [c.node("Sub", [k, down]), up])
    c.node("Sub", [k, const_as(c, c.attr("quantization_bit") - 2.0, d)], [out])
    c.node("Identity", [c.const(np.zeros(c.output_desc("zero_point").shape, dtype=onnx_rules.np_dtype(d)))],
           [c.output("zero_point")])


def _min_max_onnx(c):
    """ReduceMin / ReduceMax of the blob (or of each slice along axis 0), then the google or
    cambricon formulas."""
    d, bit = c.input_desc("in"), c.attr("quantization_bit")
    flat = c.node("Reshape", [c.input("in"), c.const(int64s([1 if c.attr("per_layer_quantization") else d.shape[0], -1]))])
    lo, hi = (onnx_rules.reduce_node(c, t, flat, [1], 0) for t in ("ReduceMin", "ReduceMax"))
    if c.attr("quantization_formula") == "cambricon":
        _cambricon_shift_onnx(c, c.node("Max", [c.node("Abs", [hi]), c.node("Abs", [lo])]), d, c.output("scale"))
        return
    if c.attr("quantization_scheme") == "symmetric":
        absmax = c.node("Max", [c.node("Abs", [hi]), c.node("Abs", [lo])])
        c.node("Div", [absmax, const_as(c, 2.0 ** (bit - 1) - 1, d)], [c.output("scale")])
        c.node("Identity", [c.const(np.zeros(c.output_desc("zero_point").shape, dtype=onnx_rules.np_dtype(d)))],
               [c.output("zero_point")])
        return
    scale = c.node("Div", [c.node("Sub", [hi, lo]), const_as(c, 2.0 ** bit - 1, d)], [c.output("scale")])
    c.node("Neg", [c.node("Round", [c.node("Div", [lo, scale])])], [c.output("zero_point")])


op("min_max_observer", inputs=["in"], outputs=["scale", "zero_point"],
   attrs=dict(QUANT_ATTRS, per_layer_quantization=("bool", True)), infer=_min_max_infer, kernel=_min_max_kernel,
   xla=_min_max_xla, onnx=_min_max_onnx, no_grad=True,
   sbp=lambda ctx: [] if ctx.attr("per_layer_quantization") else _sbp.batch()(ctx),  # (per channel: by axis 0)
   doc="quantization scale and zero point of a blob from its min and max")


# ------------------------------------------------------------------ moving_average_min_max_observer

def _moving_infer(ctx):
    d = _float_in(ctx)
    step = ctx.input("current_train_step")
    ctx.check(step.shape == (1,) and step.dtype == _dt.int64,
              f"input 'current_train_step' expected int64 (1,), received {step.dtype.name} {step.shape}")
    for arg in ("moving_max", "moving_min"):
        m = ctx.input(arg)
        ctx.check(m.shape == (1,) and m.dtype == d.dtype,
                  f"input '{arg}' expected {d.dtype.name} (1,), received {m.dtype.name} {m.shape}")
    ctx.set_output("scale", (1,), d.dtype)
    ctx.set_output("zero_point", (1,), d.dtype)


def _moving_kernel(k):
    momentum, stop = k.attr("momentum"), k.attr("stop_update_after_iters")
    tracks_absmax = k.attr("quantization_formula") == "cambricon" or k.attr("quantization_scheme") == "symmetric"

    def moving_average_min_max_observer(x, step, moving_max, moving_min):
        if k.attr("training"):
            lo, hi = x.amin().reshape(1), x.amax().reshape(1)
            if tracks_absmax:
                hi = torch.maximum(hi.abs(), lo.abs())
            update = step <= stop
            new_max = torch.where(moving_max == 0, hi, moving_max * momentum + hi * (1 - momentum))
            new_min = new_max if tracks_absmax else torch.where(
                moving_min == 0, lo, moving_min * momentum + lo * (1 - momentum))
            moving_max.copy_(torch.where(update, new_max, moving_max))
            moving_min.copy_(torch.where(update, new_min, moving_min))
        if tracks_absmax:
            return _scale_of(None, None, moving_max.clone(), k)
        bit = k.attr("quantization_bit")
        scale = (moving_max - moving_min) / (2.0 ** bit - 1)
        return scale, -moving_min / scale
    return moving_average_min_max_observer


def _moving_xla(k):
    """The kernel's formulas over jax arrays; in training ``((scale, zero_point),
    (new moving_max, new moving_min))`` (the variables it updates)."""
    jnp = xla_rules.jnp()
    momentum, stop, training = k.attr("momentum"), k.attr("stop_update_after_iters"), k.attr("training")
    tracks_absmax = k.attr("quantization_formula") == "cambricon" or k.attr("quantization_scheme") == "symmetric"
    bit = k.attr("quantization_bit")

    def moving_average_min_max_observer(x, step, moving_max, moving_min):
        if training:
            lo, hi = x.min().reshape(1), x.max().reshape(1)
            if tracks_absmax:
                hi = jnp.maximum(jnp.abs(hi), jnp.abs(lo))
            update = step <= stop
            new_max = jnp.where(moving_max == 0, hi, moving_max * momentum + hi * (1 - momentum))
            new_min = new_max if tracks_absmax else jnp.where(
                moving_min == 0, lo, moving_min * momentum + lo * (1 - momentum))
            moving_max = jnp.where(update, new_max, moving_max).astype(x.dtype)
            moving_min = jnp.where(update, new_min, moving_min).astype(x.dtype)
        if tracks_absmax:
            outs = _scale_of(None, None, moving_max, k, jnp)
        else:
            scale = (moving_max - moving_min) / (2.0 ** bit - 1)
            outs = scale, -moving_min / scale
        return (outs, (moving_max, moving_min)) if training else outs
    return moving_average_min_max_observer


def _moving_onnx(c):
    """Inference only (training updates moving_max / moving_min in place): the scale and zero point
    of moving_max / moving_min, as the kernel derives them."""
    if c.attr("training"):
        c.fail("attr 'training' is true: the op updates the variables moving_max / moving_min in place, "
               "which an ONNX graph cannot do")
    d, bit = c.input_desc("in"), c.attr("quantization_bit")
    hi, lo = c.input("moving_max"), c.input("moving_min")
    if c.attr("quantization_formula") == "cambricon":  # (moving_max tracks max|in|)
        _cambricon_shift_onnx(c, hi, d, c.output("scale"))
        return
    if c.attr("quantization_scheme") == "symmetric":
        c.node("Div", [hi, const_as(c, 2.0 ** (bit - 1) - 1, d)], [c.output("scale")])
        c.node("Identity", [c.const(np.zeros((1,), dtype=onnx_rules.np_dtype(d)))], [c.output("zero_point")])
        return
    scale = c.node("Div", [c.node("Sub", [hi, lo]), const_as(c, 2.0 ** bit - 1, d)], [c.output("scale")])
    c.node("Div", [c.node("Neg", [lo]), scale], [c.output("zero_point")])


op("moving_average_min_max_observer", inputs=["in", "current_train_step", "moving_max", "moving_min"],
   outputs=["scale", "zero_point"],
   attrs=dict(QUANT_ATTRS, training=("bool", False), stop_update_after_iters=("int64", 1),
              momentum=("float", 0.95)),
   infer=_moving_infer, kernel=_moving_kernel, xla=_moving_xla, no_grad=True, mutates=("moving_max", "moving_min"),
   onnx=_moving_onnx,
   doc="quantization scale from a moving average of a blob's min and max (variables updated in place)")


# ------------------------------------------------------------------ fake_quantization

def _fake_quant_infer(ctx):
    d = _float_in(ctx)
    s, z = ctx.input("scale"), ctx.input("zero_point")
    ctx.check(s.shape == z.shape and len(s.shape) == 1 and s.shape[0] in (1, d.shape[0] if d.shape else 1),
              f"inputs 'scale' and 'zero_point' expected shape (1,) or ({d.shape[0] if d.shape else 1},), "
              f"received {s.shape} and {z.shape}")
    like("in")(ctx)


def _fake_quant_kernel(k):
    bit, formula = k.attr("quantization_bit"), k.attr("quantization_formula")
    symmetric = formula == "cambricon" or k.attr("quantization_scheme") == "symmetric"

    def fake_quantization(x, scale, zero_point):
        shape = (-1,) + (1,) * (x.dim() - 1) if scale.numel() > 1 else (1,) * max(x.dim(), 1)
        s = scale.reshape(shape)
        if formula == "cambricon":
            s = torch.pow(2.0, torch.trunc(s)).to(x.dtype)
        if symmetric:
            upper = 2.0 ** (bit - 1) - 1
            return torch.clamp(torch.round(x / s), -upper - 1, upper) * s
        z = (torch.round(zero_point).to(torch.int64) % 256).to(x.dtype).reshape(shape)
        return (torch.clamp(torch.round(x / s + z), 0, 2.0 ** bit - 1) - z) * s
    return fake_quantization


def _fake_quant_xla(k):
    jnp = xla_rules.jnp()
    bit, formula = k.attr("quantization_bit"), k.attr("quantization_formula")
    symmetric = formula == "cambricon" or k.attr("quantization_scheme") == "symmetric"

    def fake_quantization(x, scale, zero_point):
        shape = (-1,) + (1,) * (x.ndim - 1) if scale.size > 1 else (1,) * max(x.ndim, 1)
        s = scale.reshape(shape)
        if formula == "cambricon":
            s = jnp.power(2.0, jnp.trunc(s)).astype(x.dtype)
        if symmetric:
            upper = 2.0 ** (bit - 1) - 1
            return (jnp.clip(jnp.round(x / s), -upper - 1, upper) * s).astype(x.dtype)
        z = (jnp.round(zero_point).astype(jnp.int64) % 256).astype(x.dtype).reshape(shape)
        return ((jnp.clip(jnp.round(x / s + z), 0, 2.0 ** bit - 1) - z) * s).astype(x.dtype)
    return fake_quantization


def _fake_quant_sbp(ctx):
    """in and out split alike on any axis; a per-channel scale and zero point (one per slice
    of axis 0) split with axis 0, a per-layer one is broadcast."""
    per_channel = ctx.shape("scale")[0] > 1
    return [_sbp.signature(ctx, _sbp.B, **{"in": _sbp.split(k), "out": _sbp.split(k)},
                       **({"scale": _sbp.split(0), "zero_point": _sbp.split(0)} if k == 0 and per_channel else {}))
            for k in range(ctx.ndim("in"))]


def _fake_quant_grad(g):
    if g.needs("in"):
        g.set_grad("in", g.emit("identity", {"in": g.dout("out")}))


def _fake_quant_onnx(c):
    """Div, Round (ties to even, as torch.round), Clip, Mul; cambricon's 2 ** trunc(shift) as Pow of
    sign(shift) * floor(|shift|); affine's zero point as uint8(round(zero_point)) via an int64 Mod 256."""
    d, bit, formula = c.input_desc("in"), c.attr("quantization_bit"), c.attr("quantization_formula")
    ndim = len(d.shape)
    shape = [-1] + [1] * (ndim - 1) if int(np.prod(c.input_desc("scale").shape)) > 1 else [1] * max(ndim, 1)
    s = c.node("Reshape", [c.input("scale"), c.const(int64s(shape))])
    if formula == "cambricon":
        t = c.node("Mul", [c.node("Sign", [s]), c.node("Floor", [c.node("Abs", [s])])])
        s = c.node("Pow", [const_as(c, 2.0, d), t])
    x = c.input("in")
    if formula == "cambricon" or c.attr("quantization_scheme") == "symmetric":
        upper = 2.0 ** (bit - 1) - 1
        q = c.node("Clip", [c.node("Round", [c.node("Div", [x, s])]), const_as(c, -upper - 1, d), const_as(c, upper, d)])
        c.node("Mul", [q, s], [c.output("out")])
        return
    z = c.node("Cast", [c.node("Round", [c.input("zero_point")])], to=onnx_rules.INT64)
    z = c.node("Cast", [c.node("Mod", [z, c.const(np.int64(256))])], to=c.dtype_code(d.dtype))
    z = c.node("Reshape", [z, c.const(int64s(shape))])
    q = c.node("Clip", [c.node("Round", [c.node("Add", [c.node("Div", [x, s]), z])]), const_as(c, 0, d),
                        const_as(c, 2.0 ** bit - 1, d)])
    c.node("Mul", [c.node("Sub", [q, z]), s], [c.output("out")])


op("fake_quantization", inputs=["in", "scale", "zero_point"], outputs=["out"], attrs=QUANT_ATTRS,
   infer=_fake_quant_infer, kernel=_fake_quant_kernel, xla=_fake_quant_xla, grad=_fake_quant_grad,
   onnx=_fake_quant_onnx, sbp=_fake_quant_sbp,
   doc="round a blob to the quantization grid of (scale, zero_point); straight-through gradient")
