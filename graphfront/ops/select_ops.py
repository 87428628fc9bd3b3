"""Selection ops: ``where`` and its scalar forms, ``masked_fill``, ``tril`` / ``triu`` and
``fused_scale_tril``.

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0 (``oneflow/user/ops/``:
``where_op.cpp``, ``masked_fill_op.cpp``, ``tril_op.cpp``, ``triu_op.cpp``).
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import broadcast_shape, fill_fits, reduce_to, same_dtype
from graphfront.ops import xla_rules
from graphfront.ops.math_ops import SCALAR_ATTRS
from graphfront.ops.onnx_rules import const_as, nonzero, np_dtype
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


# ----------------------------------------------------------------- where, masked_fill

def _condition(ctx, arg="condition"):
    c = ctx.input(arg)
    ctx.check(c.dtype.is_integer or c.dtype is _dt.bool,
              f"input '{arg}' expected an integer or bool dtype, received {c.dtype.name}")
    return c


def _where_infer(ctx):
    c = _condition(ctx)
    x, y = ctx.input("x"), ctx.input("y")
    dtype = same_dtype(ctx, "x", "y")
    shape = broadcast_shape(broadcast_shape(c.shape, x.shape, "input 'condition' and 'x'"), y.shape,
                            "inputs 'condition', 'x' and 'y'")
    ctx.set_output("out", shape, dtype)


def _where_grad(g):
    """`zero_like` + two `where` ops, each reduced back to its input's shape."""
    c, dz = g.input("condition"), g.dout("out")
    if not (g.needs("x") or g.needs("y")):
        return
    zero = g.emit("zero_like", {"like": dz}, name=f"{g.op_name}_zero_grad")
    if g.needs("x"):
        t = g.emit("where", {"condition": c, "x": dz, "y": zero}, name=f"{g.op_name}_x_grad")
        g.set_grad("x", reduce_to(g, t, g.input("x"), f"{g.op_name}_x_grad"))
    if g.needs("y"):
        t = g.emit("where", {"condition": c, "x": zero, "y": dz}, name=f"{g.op_name}_y_grad")
        g.set_grad("y", reduce_to(g, t, g.input("y"), f"{g.op_name}_y_grad"))


def _where_onnx(c):
    c.node("Where", [nonzero(c, c.input("condition")), c.input("x"), c.input("y")], [c.output("out")])


def _where_sbp(ctx):
    """Numpy-style broadcast splits; x and y partial together (``where`` is linear in the pair)."""
    partial = [_sbp.signature(ctx, _sbp.P, condition=_sbp.B)] if ctx.dtype("out") is not _dt.bool else []
    return _sbp.elementwise()(ctx) + partial


op("where", inputs=["condition", "x", "y"], outputs=["out"], infer=_where_infer,
   kernel=lambda k: (lambda c, x, y: torch.where(c != 0, x, y)), grad=_where_grad, onnx=_where_onnx, sbp=_where_sbp,
   xla=lambda k: (lambda c, x, y: xla_rules.jnp().where(c != 0, x, y)))


def _where_scalar_infer(blob):
    def infer(ctx):
        c = _condition(ctx)
        d = ctx.input(blob)
        _operand_fits(ctx, "", d.dtype)
        ctx.set_output("out", broadcast_shape(c.shape, d.shape, f"input 'condition' and '{blob}'"), d.dtype)
    return infer


def _operand(attrs, prefix, dtype):
    has_int = attrs[f"has_{prefix}int_operand"]
    value = attrs[f"{prefix}int_operand"] if has_int else attrs[f"{prefix}float_operand"]
    if dtype is not None and not dtype.is_floating_point:
        value = int(value)
    return value


def _where_scalar_kernel(scalar_is_x):
    def make(k):
        blob = "y" if scalar_is_x else "x"
        s = _operand(k.attrs, "", k.input(blob).dtype)

        def where(c, t):
            st = torch.full((), s, dtype=t.dtype, device=t.device)
            return torch.where(c != 0, st, t) if scalar_is_x else torch.where(c != 0, t, st)
        return where
    return make


def _where_scalar_xla(scalar_is_x):
    def make(k):
        blob = "y" if scalar_is_x else "x"
        d = k.input(blob).dtype
        s = _operand(k.attrs, "", d)

        def where(c, t):
            jnp = xla_rules.jnp()
            st = jnp.asarray(s, d.np)
            return jnp.where(c != 0, st, t) if scalar_is_x else jnp.where(c != 0, t, st)
        return where
    return make


def _operand_onnx(c, prefix, dtype):
    v = c.attr(f"{prefix}int_operand") if c.attr(f"has_{prefix}int_operand") else c.attr(f"{prefix}float_operand")
    return np.array(v if dtype.is_floating_point else int(v), dtype=np.dtype(dtype.np))


def _where_scalar_onnx(scalar_is_x):
    def convert(c):
        blob = "y" if scalar_is_x else "x"
        s = c.const(_operand_onnx(c, "", c.input_desc(blob).dtype))
        t = c.input(blob)
        c.node("Where", [nonzero(c, c.input("condition"))] + ([s, t] if scalar_is_x else [t, s]),
               [c.output("out")])
    return convert


# where_scalar_x / where_scalar_y: no grad function (as OneFlow)
op("where_scalar_x", inputs=["condition", "y"], outputs=["out"], attrs=SCALAR_ATTRS,
   infer=_where_scalar_infer("y"), kernel=_where_scalar_kernel(True), onnx=_where_scalar_onnx(True),
   xla=_where_scalar_xla(True), sbp=_sbp.elementwise())
op("where_scalar_y", inputs=["condition", "x"], outputs=["out"], attrs=SCALAR_ATTRS,
   infer=_where_scalar_infer("x"), kernel=_where_scalar_kernel(False), onnx=_where_scalar_onnx(False),
   xla=_where_scalar_xla(False), sbp=_sbp.elementwise())

WHERE_XY_ATTRS = {"has_x_int_operand": ("bool", False), "has_x_float_operand": ("bool", False),
                  "has_y_int_operand": ("bool", False), "has_y_float_operand": ("bool", False),
                  "x_int_operand": ("int64", 0), "x_float_operand": ("double", 0.0),
                  "y_int_operand": ("int64", 0), "y_float_operand": ("double", 0.0)}


def _where_xy_dtype(attrs):
    """int64 when both operands are ints, else float32."""
    return _dt.int64 if attrs["has_x_int_operand"] and attrs["has_y_int_operand"] else _dt.float32


def _where_xy_infer(ctx):
    c = _condition(ctx)
    for side in ("x", "y"):
        ctx.check(ctx.attr(f"has_{side}_int_operand") or ctx.attr(f"has_{side}_float_operand"),
                  f"one of attrs 'has_{side}_int_operand' / 'has_{side}_float_operand' must be true")
    ctx.set_output("out", c.shape, _where_xy_dtype(ctx.attrs))


def _where_xy_kernel(k):
    dtype = _where_xy_dtype(k.attrs)
    xs, ys = _operand(k.attrs, "x_", dtype), _operand(k.attrs, "y_", dtype)

    def where(c):
        opts = dict(dtype=dtype.torch, device=c.device)
        return torch.where(c != 0, torch.full((), xs, **opts), torch.full((), ys, **opts))
    return where


def _where_xy_xla(k):
    dtype = _where_xy_dtype(k.attrs)
    xs, ys = _operand(k.attrs, "x_", dtype), _operand(k.attrs, "y_", dtype)
    return lambda c: xla_rules.jnp().where(c != 0, xla_rules.jnp().asarray(xs, dtype.np),
                                           xla_rules.jnp().asarray(ys, dtype.np))


def _where_scalar_xy_onnx(c):
    dtype = c.output_desc("out").dtype
    c.node("Where", [nonzero(c, c.input("condition")), c.const(_operand_onnx(c, "x_", dtype)),
                     c.const(_operand_onnx(c, "y_", dtype))], [c.output("out")])


op("where_scalar_xy", inputs=["condition"], outputs=["out"], attrs=WHERE_XY_ATTRS, infer=_where_xy_infer,
   kernel=_where_xy_kernel, no_grad=True, onnx=_where_scalar_xy_onnx, xla=_where_xy_xla, sbp=_sbp.elementwise())


def _operand_fits(ctx, prefix, dtype):
    """The scalar operand ``<prefix>int_operand`` / ``<prefix>float_operand`` fits ``dtype``."""
    kind = "int" if ctx.attr(f"has_{prefix}int_operand") else "float"
    fill_fits(ctx, ctx.attr(f"{prefix}{kind}_operand"), dtype, f"attr '{prefix}{kind}_operand'")


def _masked_fill_infer(ctx):
    x = ctx.input("x")
    _operand_fits(ctx, "", x.dtype)
    m = _condition(ctx, "mask")
    ctx.set_output("out", broadcast_shape(x.shape, m.shape, "input 'x' and 'mask'"), x.dtype)


def _masked_fill_kernel(k):
    s = _operand(k.attrs, "", k.input("x").dtype)
    return lambda x, m: torch.where(m != 0, torch.full((), s, dtype=x.dtype, device=x.device), x)


def _masked_fill_onnx(c):
    s = c.const(_operand_onnx(c, "", c.input_desc("x").dtype))
    c.node("Where", [nonzero(c, c.input("mask")), s, c.input("x")], [c.output("out")])


# masked_fill: no grad function (as OneFlow); flow.masked_fill builds constant_like + where instead
op("masked_fill", inputs=["x", "mask"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_masked_fill_infer,
   kernel=_masked_fill_kernel, onnx=_masked_fill_onnx, sbp=_sbp.elementwise(),
   xla=lambda k: (lambda x, m, s=_operand(k.attrs, "", k.input("x").dtype), t=k.input("x").dtype.np:
                          xla_rules.jnp().where(m != 0, xla_rules.jnp().asarray(s, t), x)))


# ----------------------------------------------------------------- tril, triu, fused_scale_tril

TRIL_ATTRS = {"diagonal": ("int64", 0), "floating_fill_value": ("double", 0.0),
              "integer_fill_value": ("int64", 0), "is_floating_fill_value": ("bool", False)}
FUSED_SCALE_TRIL_ATTRS = dict(TRIL_ATTRS, floating_scale_value=("double", 1.0), integer_scale_value=("int64", 1),
                              is_floating_scale_value=("bool", False))


def _matrix_infer(ctx):
    d = ctx.input("in")
    ctx.check(len(d.shape) >= 2, f"input 'in' must have rank >= 2, received shape {d.shape}")
    for kind in ("fill", "scale"):  # (tril's fill value, fused_scale_tril's fill and scale)
        if f"is_floating_{kind}_value" in ctx.attrs:
            value_attr = f"floating_{kind}_value" if ctx.attr(f"is_floating_{kind}_value") else f"integer_{kind}_value"
            fill_fits(ctx, ctx.attr(value_attr), d.dtype, f"attr '{value_attr}'", wraps=kind == "scale")
    ctx.set_output("out", d.shape, d.dtype)


def _lower_mask(shape, diagonal, device):
    rows, cols = shape[-2], shape[-1]
    return torch.ones((rows, cols), dtype=torch.bool, device=device).tril(diagonal)


def _pick(attrs, kind, dtype):
    """The fill or scale value of a tril op, as the element type of ``dtype``."""
    if attrs[f"is_floating_{kind}_value"]:
        v = attrs[f"floating_{kind}_value"]
        return v if dtype.is_floating_point else int(v)
    return attrs[f"integer_{kind}_value"]


def _tril_kernel(scaled):
    def make(k):
        d = k.input("in")
        mask = _lower_mask(d.shape, k.attr("diagonal"), k.device)
        fill = torch.tensor(_pick(k.attrs, "fill", d.dtype), dtype=d.dtype.torch, device=k.device)
        scale = _pick(k.attrs, "scale", d.dtype) if scaled else None
        if scale is None:
            return lambda x: torch.where(mask, x, fill)
        return lambda x: torch.where(mask, x * scale, fill)
    return make


def _tril_xla(scaled):
    def make(k):
        d = k.input("in")
        mask = np.tril(np.ones(d.shape[-2:], dtype=bool), k.attr("diagonal"))
        fill = np.asarray(_pick(k.attrs, "fill", d.dtype), d.dtype.np)
        scale = _pick(k.attrs, "scale", d.dtype) if scaled else None
        if scale is None:
            return lambda x: xla_rules.jnp().where(mask, x, fill)
        return lambda x: xla_rules.jnp().where(mask, x * scale, fill)
    return make


def _tril_sbp(ctx):
    """Split on the batch axes (each part's last two axes masked whole); partial sums pass
    when the fill value is 0 (triu's always)."""
    cands = _sbp.leading("in", 2)(ctx)
    if "floating_fill_value" not in ctx.attrs or _pick(ctx.attrs, "fill", ctx.dtype("in")) == 0:
        cands.append(_sbp.signature(ctx, _sbp.P))
    return cands


def _tril_grad(op_type):
    def grad(g):
        if g.needs("in"):
            attrs = dict(g.attrs, floating_fill_value=0.0, integer_fill_value=0, is_floating_fill_value=False)
            g.set_grad("in", g.emit(op_type, {"in": g.dout("out")}, attrs))
    return grad


def _triangle_onnx(lower):
    """tril / triu: a constant mask of the last two dims; tril's fill value above it, 0 below triu's."""
    def convert(c):
        d = c.input_desc("in")
        rows, cols = d.shape[-2:]
        mask = (np.tril if lower else np.triu)(np.ones((rows, cols), dtype=bool), c.attr("diagonal"))
        fill = 0
        if lower:
            fill = c.attr("floating_fill_value") if c.attr("is_floating_fill_value") else c.attr("integer_fill_value")
            fill = fill if d.dtype.is_floating_point else int(fill)
        c.node("Where", [c.const(mask), c.input("in"), c.const(np.array(fill, dtype=np_dtype(d)))], [c.output("out")])
    return convert


op("tril", inputs=["in"], outputs=["out"], attrs=TRIL_ATTRS, infer=_matrix_infer, kernel=_tril_kernel(False),
   grad=_tril_grad("tril"), onnx=_triangle_onnx(True), xla=_tril_xla(False), amp="clear", sbp=_tril_sbp)
# triu: no grad function (as OneFlow)
op("triu", inputs=["in"], outputs=["out"], attrs={"diagonal": ("int64", 0)}, infer=_matrix_infer,
   kernel=lambda k: (lambda x, d=k.attr("diagonal"): torch.triu(x, d)), onnx=_triangle_onnx(False), sbp=_tril_sbp,
   xla=lambda k: (lambda x, d=k.attr("diagonal"): xla_rules.jnp().triu(x, d)))


def _fused_scale_tril_onnx(c):
    """scale * x on and below the diagonal, the fill value above it."""
    d = c.input_desc("in")

    def pick(kind):
        if c.attr(f"is_floating_{kind}_value"):
            v = c.attr(f"floating_{kind}_value")
            return v if d.dtype.is_floating_point else int(v)
        return c.attr(f"integer_{kind}_value")
    rows, cols = d.shape[-2:]
    mask = np.tril(np.ones((rows, cols), dtype=bool), c.attr("diagonal"))
    scaled = c.node("Mul", [c.input("in"), const_as(c, pick("scale"), d)])
    c.node("Where", [c.const(mask), scaled, const_as(c, pick("fill"), d)], [c.output("out")])


# fused_scale_tril: scale * x on and below `diagonal`, fill above; grad = same op on dy with fill 0
op("fused_scale_tril", inputs=["in"], outputs=["out"], attrs=FUSED_SCALE_TRIL_ATTRS, infer=_matrix_infer,
   kernel=_tril_kernel(True), grad=_tril_grad("fused_scale_tril"), onnx=_fused_scale_tril_onnx,
   xla=_tril_xla(True), amp="clear", sbp=_tril_sbp)
