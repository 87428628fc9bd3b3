"""Math ops: elementwise unary/binary/scalar families, add_n, cast, reductions.

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``shared/reference/user_ops.md`` §1.15-1.21, §4.1).
"""
from __future__ import annotations

import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import broadcast_shape, like, norm_axis, reduce_to, same_dtype, same_shape
from graphfront.ops.registry import op

# ----------------------------------------------------------------- relu / identity

op("relu", inputs=["x"], outputs=["y"], infer=like("x"),
   kernel=lambda k: torch.relu,
   grad=lambda g: g.needs("x") and g.set_grad(
       "x", g.emit("relu_grad", {"y": g.output("y"), "dy": g.dout("y")})))


def _relu_grad_infer(ctx):
    ctx.check(ctx.input("dy").shape == ctx.input("y").shape,
              f"input 'dy' expected shape {ctx.input('y').shape}, received {ctx.input('dy').shape}")
    same_dtype(ctx, "y", "dy")
    ctx.set_output("dx", ctx.input("dy").shape, ctx.input("y").dtype)


op("relu_grad", inputs=["y", "dy"], outputs=["dx"], infer=_relu_grad_infer,
   kernel=lambda k: lambda y, dy: torch.where(y > 0, dy, torch.zeros((), dtype=dy.dtype, device=dy.device)))

op("identity", inputs=["in"], outputs=["out"], infer=like("in"),
   kernel=lambda k: lambda x: x,
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit("identity", {"in": g.dout("out")})), view=True)


# ----------------------------------------------------------------- cast

def _cast_infer(ctx):
    dtype = ctx.attr("dtype")
    ctx.check(dtype is not None, "attr 'dtype' must be set")
    ctx.set_output("out", ctx.input("in").shape, dtype)


op("cast", inputs=["in"], outputs=["out"], attrs={"dtype": "dtype"}, infer=_cast_infer,
   kernel=lambda k: (lambda x, t=k.attr("dtype").torch: x.to(t)),
   grad=lambda g: g.needs("in") and g.set_grad(
       "in", g.emit("cast", {"in": g.dout("out")}, {"dtype": g.desc(g.input("in")).dtype})))


# ----------------------------------------------------------------- scalar ops

SCALAR_ATTRS = {"has_int_operand": ("bool", False), "has_float_operand": ("bool", False),
                "int_operand": ("int64", 0), "float_operand": ("double", 0.0)}


def scalar_operand(k):
    """The scalar of a ``scalar_*`` op's attrs (int when ``has_int_operand``)."""
    return k.attr("int_operand") if k.attr("has_int_operand") else k.attr("float_operand")


def _scalar_kernel(fn):
    def make(k):
        s = scalar_operand(k)
        return lambda x: fn(x, s)
    return make


op("scalar_add", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=like("in"),
   kernel=_scalar_kernel(torch.add),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.dout("out")))
op("scalar_mul", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=like("in"),
   kernel=_scalar_kernel(torch.mul),
   grad=lambda g: g.needs("in") and g.set_grad(
       "in", g.emit("scalar_mul", {"in": g.dout("out")}, {k: g.attr(k) for k in SCALAR_ATTRS})))


# ----------------------------------------------------------------- add_n

def _add_n_infer(ctx):
    ins = ctx.inputs("in")
    ctx.check(len(ins) >= 2, f"input 'in' needs at least 2 blobs, received {len(ins)}")
    for i, d in enumerate(ins[1:], 1):
        ctx.check(d.shape == ins[0].shape, f"input 'in_{i}' expected shape {ins[0].shape}, received {d.shape}")
        ctx.check(d.dtype is ins[0].dtype,
                  f"input 'in_{i}' expected dtype {ins[0].dtype.name}, received {d.dtype.name}")
    ctx.set_output("out", ins[0].shape, ins[0].dtype)


def _add_n_kernel(k):
    def add_n(xs):
        out = xs[0] + xs[1]
        for x in xs[2:]:
            out += x
        return out
    return add_n


def _add_n_grad(g):
    for i in range(len(g.inputs("in"))):
        if g.needs("in", i):
            g.set_grad("in", g.dout("out"), i)


op("add_n", inputs=["in*"], outputs=["out"], infer=_add_n_infer, kernel=_add_n_kernel, grad=_add_n_grad)


# ----------------------------------------------------------------- broadcast binary

def _binary_infer(ctx, out_dtype=None):
    x, y = ctx.input("x"), ctx.input("y")
    dtype = same_dtype(ctx, "x", "y")
    if x.shape in ((), (1,)) and y.shape not in ((), (1,)):
        shape = y.shape
    elif y.shape in ((), (1,)):
        shape = x.shape
    else:
        shape = broadcast_shape(x.shape, y.shape, "input 'x' and 'y'")
    ctx.set_output("z", shape, out_dtype or dtype)


def _bgrad_add(g):
    for side in ("x", "y"):
        if g.needs(side):
            g.set_grad(side, reduce_to(g, g.dout("z"), g.input(side), f"{g.op_name}_{side}_grad"))


def _bgrad_sub(g):
    if g.needs("x"):
        g.set_grad("x", reduce_to(g, g.dout("z"), g.input("x"), f"{g.op_name}_x_grad"))
    if g.needs("y"):
        neg = g.emit("scalar_mul", {"in": g.dout("z")}, {"has_float_operand": True, "float_operand": -1.0},
                     name=f"{g.op_name}_grad_y_mul")
        g.set_grad("y", reduce_to(g, neg, g.input("y"), f"{g.op_name}_y_grad"))


def _bgrad_mul(g):
    if g.needs("x"):
        t = g.emit("broadcast_mul", {"x": g.dout("z"), "y": g.input("y")}, name=f"{g.op_name}_grad_x_mul")
        g.set_grad("x", reduce_to(g, t, g.input("x"), f"{g.op_name}_x_grad"))
    if g.needs("y"):
        t = g.emit("broadcast_mul", {"x": g.dout("z"), "y": g.input("x")}, name=f"{g.op_name}_grad_y_mul")
        g.set_grad("y", reduce_to(g, t, g.input("y"), f"{g.op_name}_y_grad"))


def _bgrad_div(g):
    if g.needs("x"):
        t = g.emit("broadcast_div", {"x": g.dout("z"), "y": g.input("y")}, name=f"{g.op_name}_grad_x_div")
        g.set_grad("x", reduce_to(g, t, g.input("x"), f"{g.op_name}_x_grad"))
    if g.needs("y"):
        g.set_grad("y", g.emit("broadcast_div_grad", {"y": g.input("y"), "z": g.output("z"), "dz": g.dout("z")},
                               name=f"{g.op_name}_y_grad"))


for _name, _fn, _grad in (("broadcast_add", torch.add, _bgrad_add), ("broadcast_sub", torch.sub, _bgrad_sub),
                          ("broadcast_mul", torch.mul, _bgrad_mul), ("broadcast_div", torch.div, _bgrad_div)):
    op(_name, inputs=["x", "y"], outputs=["z"], infer=_binary_infer,
       kernel=lambda k, f=_fn: f, grad=_grad)


def _div_grad_kernel(k):
    def div_grad(y, z, dz):
        t = -(dz * z / y)
        if t.shape != y.shape:
            extra = t.dim() - y.dim()
            axes = [i for i in range(t.dim()) if i < extra or y.shape[i - extra] == 1 and t.shape[i] != 1]
            t = t.sum(dim=axes, keepdim=True).reshape(y.shape)
        return t
    return div_grad


op("broadcast_div_grad", inputs=["y", "z", "dz"], outputs=["dy"],
   infer=lambda ctx: ctx.set_output("dy", ctx.input("y").shape, ctx.input("y").dtype),
   kernel=_div_grad_kernel)


def _multiply_infer(ctx):
    same_shape(ctx, "x", "y")
    ctx.set_output("out", ctx.input("x").shape, same_dtype(ctx, "x", "y"))


def _multiply_grad(g):
    if g.needs("x"):
        g.set_grad("x", g.emit("multiply", {"x": g.dout("out"), "y": g.input("y")}, name=f"{g.op_name}_x_grad"))
    if g.needs("y"):
        g.set_grad("y", g.emit("multiply", {"x": g.dout("out"), "y": g.input("x")}, name=f"{g.op_name}_y_grad"))


op("multiply", inputs=["x", "y"], outputs=["out"], infer=_multiply_infer,
   kernel=lambda k: torch.mul, grad=_multiply_grad)


# ----------------------------------------------------------------- reductions

def _reduce_axes(ctx):
    d = ctx.input("input_tensor")
    axes = ctx.attr("axis")
    ctx.check(len(axes) > 0, "attr 'axis' must not be empty")
    return d, sorted({norm_axis(a, len(d.shape)) for a in axes})


def _reduce_infer(out_dtype=None):
    def infer(ctx):
        d, axes = _reduce_axes(ctx)
        if ctx.attr("keepdims"):
            shape = tuple(1 if i in axes else s for i, s in enumerate(d.shape))
        else:
            shape = tuple(s for i, s in enumerate(d.shape) if i not in axes)
        ctx.set_output("output_tensor", shape, out_dtype or d.dtype)
    return infer


def _reduce_kernel(fn):
    def make(k):
        ndim = len(k.input("input_tensor").shape)
        axes = tuple(sorted({a % ndim for a in k.attr("axis")}))
        keep = k.attr("keepdims")
        return lambda x: fn(x, axes, keep)
    return make


REDUCE_ATTRS = {"axis": "list_int32", "keepdims": ("bool", False)}

op("reduce_sum", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(lambda x, a, keep: torch.sum(x, dim=a, keepdim=keep)),
   grad=lambda g: g.needs("input_tensor") and g.set_grad("input_tensor", g.emit(
       "broadcast_like", {"x": g.dout("output_tensor"), "like": g.input("input_tensor")},
       {"broadcast_axes": g.attr("axis")})))


def _reduce_sum_like_infer(ctx):
    x, like_ = ctx.input("x"), ctx.input("like")
    if not ctx.attr("axis"):
        ctx.check(x.shape == like_.shape, f"with empty 'axis', input 'x' must have shape {like_.shape}, "
                                          f"received {x.shape}")
    ctx.set_output("y", like_.shape, x.dtype)


def _reduce_sum_like_kernel(k):
    axes = tuple(k.attr("axis"))
    shape = k.input("like").shape
    if not axes:
        return lambda x, like_: x
    return lambda x, like_: torch.sum(x, dim=axes, keepdim=True).reshape(shape)


op("reduce_sum_like", inputs=["x", "like"], outputs=["y"], attrs={"axis": "list_int32"},
   infer=_reduce_sum_like_infer, kernel=_reduce_sum_like_kernel, no_grad=True)


def _broadcast_like_infer(ctx):
    ctx.check(len(ctx.attr("broadcast_axes")) > 0, "attr 'broadcast_axes' must not be empty")
    ctx.set_output("y", ctx.input("like").shape, ctx.input("like").dtype)


def _broadcast_like_kernel(k):
    like_shape = k.input("like").shape
    axes = sorted(a % len(like_shape) for a in k.attr("broadcast_axes"))
    x_shape = k.input("x").shape
    keep_shape = tuple(1 if i in axes else s for i, s in enumerate(like_shape))
    needs_view = x_shape != keep_shape
    return lambda x, like_: (x.reshape(keep_shape) if needs_view else x).expand(like_shape)


op("broadcast_like", inputs=["x", "like"], outputs=["y"], attrs={"broadcast_axes": "list_int32"},
   infer=_broadcast_like_infer, kernel=_broadcast_like_kernel,
   grad=lambda g: g.needs("x") and g.set_grad("x", g.emit(
       "reduce_sum_like", {"x": g.dout("y"), "like": g.input("x")}, {"axis": g.attr("broadcast_axes")})),
   view=True)


# ----------------------------------------------------------------- argmax

op("argmax", inputs=["in"], outputs=["out"],
   infer=lambda ctx: ctx.set_output("out", ctx.input("in").shape[:-1], _dt.int64),
   kernel=lambda k: lambda x: torch.argmax(x, dim=-1), no_grad=True)


# ----------------------------------------------------------------- unary math family

def vjp_kernel(fwd):
    """Kernel factory of a ``*_grad`` op computing ``dx = dy * d fwd(x) / dx`` with torch autograd."""
    def make(k):
        def grad(x, dy):
            with torch.enable_grad():
                xr = x.detach().requires_grad_(True)
                return torch.autograd.grad(fwd(xr), xr, dy)[0]
        return grad
    return make


def unary_family(name, fwd, grad_fn=None, differentiable=True, float_only=True):
    """Register ``name`` (x -> y) and, if differentiable, ``name_grad`` (x, dy -> dx).

    ``grad_fn(x, dy)`` is the explicit derivative; without it the grad op's kernel
    uses torch autograd on ``fwd`` (OneFlow's wiring: grad op ``<op>_grad`` with the
    forward input ``x`` and ``dy``, user_ops.md §4.1).
    """
    def infer(ctx):
        x = ctx.input("x")
        if float_only:
            ctx.check(x.dtype.is_floating_point, f"input 'x' expected a floating dtype, received {x.dtype.name}")
        ctx.set_output("y", x.shape, x.dtype)

    if differentiable:
        op(name, inputs=["x"], outputs=["y"], infer=infer, kernel=lambda k: fwd,
           grad=lambda g: g.set_grad("x", g.emit(f"{name}_grad", {"x": g.input("x"), "dy": g.dout("y")})))
        op(f"{name}_grad", inputs=["x", "dy"], outputs=["dx"], infer=like("x"),
           kernel=(lambda k: grad_fn) if grad_fn else vjp_kernel(fwd))
    else:
        op(name, inputs=["x"], outputs=["y"], infer=infer, kernel=lambda k: fwd, no_grad=True)


unary_family("negative", torch.neg, lambda x, dy: -dy, float_only=False)
unary_family("exp", torch.exp, lambda x, dy: dy * torch.exp(x))
unary_family("log", torch.log, lambda x, dy: dy / x)
unary_family("sqrt", torch.sqrt, lambda x, dy: dy * 0.5 * torch.rsqrt(x))
unary_family("rsqrt", torch.rsqrt, lambda x, dy: dy * -0.5 * torch.rsqrt(x) ** 3)
unary_family("square", torch.square, lambda x, dy: dy * 2 * x)
unary_family("abs", torch.abs, lambda x, dy: dy * torch.sign(x), float_only=False)
unary_family("tanh", torch.tanh, lambda x, dy: dy * (1 - torch.tanh(x) ** 2))
unary_family("sigmoid_v2", torch.sigmoid, lambda x, dy: dy * torch.sigmoid(x) * (1 - torch.sigmoid(x)))
unary_family("reciprocal", torch.reciprocal, lambda x, dy: -dy / (x * x))
