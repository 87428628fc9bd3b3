"""Math ops: elementwise unary/binary/scalar families, add_n, cast, comparisons,
reductions, clipping, sorting/top-k, where/tril selection.

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/``: ``math_unary_elementwise_op.cpp``, ``math_binary_elementwise_ops.cpp``,
``math_binary_broadcast_ops.cpp``, ``reduce_ops.cpp``, ``scalar_*_op.cpp``, ``clip_by_value_op.cpp``
and the other math ``*_op.cpp`` files). Derivative formulas are the
textbook ones; where a formula is a convention (ties of max/min, ``x == 0`` of
``pow``/``xlogy``/``xdivy``) the op's docstring says which.

Sections: relu/identity/cast · scalar ops · add_n · broadcast binary (arithmetic,
comparison, logical) · same-shape binary (multiply, elementwise max/min and their
grads) · reductions · arg/sort/top-k · unary family · clipping and norms ·
selection (where, masked_fill, tril/triu).
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import (broadcast_shape, index_checks, like, norm_axis, numel, raising_bad_ids, reduce_to,
                                   same_dtype, same_shape)
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


def sum_to_shape(t, shape):
    """Sum a broadcast-shaped tensor back to ``shape`` (numpy broadcasting in reverse)."""
    shape = tuple(shape)
    if tuple(t.shape) == shape:
        return t
    extra = t.dim() - len(shape)
    if extra < 0:
        return t.reshape(shape)
    axes = [i for i in range(t.dim()) if i < extra or (shape[i - extra] == 1 and t.shape[i] != 1)]
    return (t.sum(dim=axes, keepdim=True) if axes else t).reshape(shape)


def _zero(t):
    return torch.zeros((), dtype=t.dtype, device=t.device)


def _float_input(ctx, arg):
    d = ctx.input(arg)
    ctx.check(d.dtype.is_floating_point, f"input '{arg}' expected a floating dtype, received {d.dtype.name}")
    return d


# ----------------------------------------------------------------- relu / identity

op("relu", inputs=["x"], outputs=["y"], infer=like("x"),
   kernel=lambda k: torch.relu, sbp=_sbp.elementwise(), onnx=onnx_rules.same("Relu"), xla=xla_rules.same("nn.relu"),
   grad=lambda g: g.needs("x") and g.set_grad(
       "x", g.emit("relu_grad", {"y": g.output("y"), "dy": g.dout("y")})))


def _relu_grad_infer(ctx):
    ctx.check(ctx.input("dy").shape == ctx.input("y").shape,
              f"input 'dy' expected shape {ctx.input('y').shape}, received {ctx.input('dy').shape}")
    same_dtype(ctx, "y", "dy")
    ctx.set_output("dx", ctx.input("dy").shape, ctx.input("y").dtype)


op("relu_grad", inputs=["y", "dy"], outputs=["dx"], infer=_relu_grad_infer, sbp=_sbp.elementwise(p_each=("dy",)),
   kernel=lambda k: lambda y, dy: torch.ops.aten.threshold_backward(dy, y, 0),  # dy where y > 0 (one kernel)
   xla=lambda k: lambda y, dy: xla_rules.jnp().where(y > 0, dy, 0))

op("identity", inputs=["in"], outputs=["out"], infer=like("in"), sbp=_sbp.elementwise(p_all=True),
   kernel=lambda k: lambda x: x, xla=lambda k: lambda x: x,
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit("identity", {"in": g.dout("out")})), view=True,
   onnx=onnx_rules.same("Identity"))


# ----------------------------------------------------------------- cast, cast_like

def _cast_infer(ctx):
    dtype = ctx.attr("dtype")
    ctx.check(dtype is not None, "attr 'dtype' must be set")
    ctx.set_output("out", ctx.input("in").shape, dtype)


op("cast", inputs=["in"], outputs=["out"], attrs={"dtype": "dtype"}, infer=_cast_infer, sbp=_sbp.elementwise(p_all=True),
   kernel=lambda k: (lambda x, t=k.attr("dtype").torch: x.to(t)),
   xla=lambda k: (lambda x, t=k.attr("dtype").np: x.astype(t)),
   onnx=lambda c: c.node("Cast", [c.input("in")], [c.output("out")], to=c.dtype_code(c.attr("dtype"))),
   grad=lambda g: g.needs("in") and g.set_grad(
       "in", g.emit("cast", {"in": g.dout("out")}, {"dtype": g.desc(g.input("in")).dtype})))

# cast_like: `in` converted to the dtype of `dtype_like` (used by reduce_max/min grads)
op("cast_like", inputs=["in", "dtype_like"], outputs=["out"],
   infer=lambda ctx: ctx.set_output("out", ctx.input("in").shape, ctx.input("dtype_like").dtype),
   kernel=lambda k: (lambda x, like_, t=k.input("dtype_like").dtype.torch: x.to(t)), no_grad=True,
   onnx=onnx_rules.cast_to_output("in", "out"))

# (zero_like, used by the `where` grad, is defined with the array ops)


# ----------------------------------------------------------------- scalar ops

SCALAR_ATTRS = {"has_int_operand": ("bool", False), "has_float_operand": ("bool", False),
                "int_operand": ("int64", 0), "float_operand": ("double", 0.0)}


def scalar_operand(k):
    """The scalar of a ``scalar_*`` op's attrs (int when ``has_int_operand``).

    As OneFlow's kernels convert the operand to the input's element type, a float
    operand applied to an integer input is truncated to an int.
    """
    s = k.attr("int_operand") if k.attr("has_int_operand") else k.attr("float_operand")
    d = k.input("in") if k.has_input("in") else None
    if d is not None and not d.dtype.is_floating_point and isinstance(s, float):
        s = int(s)
    return s


def _scalar_kernel(fn):
    def make(k):
        s = scalar_operand(k)
        return lambda x: fn(x, s)
    return make


def _scalar_attrs_of(g):
    return {k: g.attr(k) for k in SCALAR_ATTRS}


def _scalar_infer(out_dtype=None, float_only=False):
    def infer(ctx):
        d = _float_input(ctx, "in") if float_only else ctx.input("in")
        ctx.check(ctx.attr("has_int_operand") or ctx.attr("has_float_operand"),
                  "one of attrs 'has_int_operand' / 'has_float_operand' must be true")
        ctx.set_output("out", d.shape, out_dtype or d.dtype)
    return infer


op("scalar_add", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=like("in"),
   kernel=_scalar_kernel(torch.add), sbp=_sbp.elementwise(), onnx=onnx_rules.scalar("Add"), xla=xla_rules.scalar("add"),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.dout("out")))
op("scalar_mul", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=like("in"),
   kernel=_scalar_kernel(torch.mul), sbp=_sbp.elementwise(p_all=True), onnx=onnx_rules.scalar("Mul"),
   xla=xla_rules.scalar("multiply"),
   grad=lambda g: g.needs("in") and g.set_grad(
       "in", g.emit("scalar_mul", {"in": g.dout("out")}, _scalar_attrs_of(g))))


def _pow_x_grad(x, y, dz):
    """d(x**y)/dx * dz, 0 where y == 0 (also at x == 0)."""
    return torch.where(y == 0, _zero(dz), dz * y * torch.pow(x, y - 1))


def _pow_y_grad(x, y, z, dz):
    """d(x**y)/dy * dz = dz * x**y * log(x); 0 where x == 0 and y >= 0 (torch's convention)."""
    return torch.where((x == 0) & (y >= 0), _zero(dz), dz * z * torch.log(x))


def _scalar_pow_grad_kernel(k):
    s = scalar_operand(k)
    if s == 0:
        return lambda x, dy: torch.zeros_like(dy)
    return lambda x, dy: dy * s * torch.pow(x, s - 1)


op("scalar_pow", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(float_only=True),
   kernel=_scalar_kernel(torch.pow), onnx=onnx_rules.scalar_binary(onnx_rules.power),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit(
       "scalar_pow_grad", {"x": g.input("in"), "dy": g.dout("out")}, _scalar_attrs_of(g))))
op("scalar_pow_grad", inputs=["x", "dy"], outputs=["dx"], attrs=SCALAR_ATTRS, infer=like("x"),
   kernel=_scalar_pow_grad_kernel)

# no grad function (as OneFlow): autograd fails if it reaches them
op("scalar_floordiv", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(),
   kernel=_scalar_kernel(lambda x, s: torch.div(x, s, rounding_mode="floor").to(x.dtype)),
   onnx=onnx_rules.scalar_binary(onnx_rules.floor_div))
op("scalar_fmod", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(),
   kernel=_scalar_kernel(torch.fmod), onnx=onnx_rules.scalar_binary(onnx_rules.fmod))

_LOGICAL = {
    "equal": torch.eq, "not_equal": torch.ne, "greater": torch.gt, "greater_equal": torch.ge,
    "less": torch.lt, "less_equal": torch.le,
    "and": lambda x, y: torch.logical_and(x != 0, y != 0),
    "or": lambda x, y: torch.logical_or(x != 0, y != 0),
    "xor": lambda x, y: torch.logical_xor(x != 0, y != 0),
}


_LOGICAL_XLA = {"equal": "equal", "not_equal": "not_equal", "greater": "greater", "greater_equal": "greater_equal",
                "less": "less", "less_equal": "less_equal", "and": "logical_and", "or": "logical_or",
                "xor": "logical_xor"}


def _logical_xla(name, scalar=False):
    """The ``_LOGICAL`` function ``name`` over jax arrays, int8 (and/or/xor: of ``!= 0``)."""
    def make(k):
        jnp = xla_rules.jnp()
        fn = getattr(jnp, _LOGICAL_XLA[name])
        if name in ("and", "or", "xor"):
            f = lambda x, y: fn(x != 0, y != 0).astype(jnp.int8)  # noqa: E731
        else:
            f = lambda x, y: fn(x, y).astype(jnp.int8)  # noqa: E731
        if scalar:
            s = scalar_operand(k)
            return lambda x: f(x, jnp.asarray(s, dtype=x.dtype))
        return f
    return make


def _scalar_logical_kernel(fn):
    def make(k):
        s = scalar_operand(k)
        return lambda x: fn(x, torch.full((), s, dtype=x.dtype, device=x.device)).to(torch.int8)
    return make


for _name, _fn in _LOGICAL.items():
    op(f"scalar_logical_{_name}", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS,
       infer=_scalar_infer(_dt.int8), kernel=_scalar_logical_kernel(_fn), no_grad=True,
       xla=_logical_xla(_name, scalar=True), onnx=onnx_rules.scalar_compare(_name))


# scalar_{add,sub,mul,div}_by_tensor: the scalar is a one-element blob

def _by_tensor_infer(ctx):
    x, s = ctx.input("x"), ctx.input("scalar")
    ctx.check(numel(s.shape) == 1, f"input 'scalar' must have exactly one element, received shape {s.shape}")
    same_dtype(ctx, "x", "scalar")
    ctx.set_output("y", x.shape, x.dtype)


def _by_tensor_kernel(fn):
    return lambda k: (lambda x, s: fn(x, s.reshape(())))


def _sum_all_like(g, t, like_lbn, name):
    """reduce_sum of ``t`` over all axes, reshaped like the (one-element) ``like_lbn``."""
    ndim = len(g.desc(t).shape)
    if ndim:
        t = g.emit("reduce_sum", {"input_tensor": t}, {"axis": list(range(ndim)), "keepdims": False},
                   name=f"{name}_reduce_sum")
    if g.desc(t).shape != g.desc(like_lbn).shape:
        t = g.emit("reshape_like", {"in": t, "like": like_lbn}, name=f"{name}_reshape_like")
    return t


def _by_tensor_grad(kind):
    def grad(g):
        dy, x, s = g.dout("y"), g.input("x"), g.input("scalar")
        if g.needs("x"):
            if kind in ("add", "sub"):
                g.set_grad("x", dy)
            else:
                g.set_grad("x", g.emit(f"scalar_{kind}_by_tensor", {"x": dy, "scalar": s},
                                       name=f"{g.op_name}_x_grad"))
        if g.needs("scalar"):
            name = f"{g.op_name}_scalar_grad"
            if kind == "add":
                ds = _sum_all_like(g, dy, s, name)
            elif kind == "sub":
                ds = g.emit("scalar_mul", {"in": _sum_all_like(g, dy, s, name)},
                            {"has_float_operand": True, "float_operand": -1.0}, name=f"{name}_scalar_mul")
            elif kind == "mul":
                ds = _sum_all_like(g, g.emit("multiply", {"x": dy, "y": x}, name=f"{name}_multiply"), s, name)
            else:
                ds = g.emit("broadcast_div_grad", {"y": s, "z": g.output("y"), "dz": dy}, name=name)
            g.set_grad("scalar", ds)
    return grad


def divide(x, y):
    """x / y; integers divide to an integer truncated toward zero (C++ division, as
    OneFlow's ``BinaryFuncDiv`` in ``oneflow/core/ndarray/binary_func.h``)."""
    if x.dtype.is_floating_point:
        return torch.div(x, y)
    return torch.div(x, y, rounding_mode="trunc")


for _kind, _fn in (("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", divide)):
    op(f"scalar_{_kind}_by_tensor", inputs=["x", "scalar"], outputs=["y"], infer=_by_tensor_infer,
       kernel=_by_tensor_kernel(_fn), grad=_by_tensor_grad(_kind), onnx=onnx_rules.by_tensor(_kind.capitalize()),
       sbp=_sbp.elementwise(p_each=("x",) if _kind in ("mul", "div") else ()))


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


op("add_n", inputs=["in*"], outputs=["out"], infer=_add_n_infer, kernel=_add_n_kernel, grad=_add_n_grad,
   sbp=_sbp.elementwise(p_all=True), onnx=onnx_rules.same("Sum"),
   xla=lambda k: lambda xs: functools.reduce(lambda a, b: a + b, xs))  # in the kernel's order


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
    ctx.set_output("z", shape, out_dtype or dtype, is_dynamic=x.is_dynamic or y.is_dynamic)


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


def _bgrad_pow(g):
    ins = {"x": g.input("x"), "y": g.input("y"), "z": g.output("z"), "dz": g.dout("z")}
    for side in ("x", "y"):
        if g.needs(side):
            g.set_grad(side, g.emit(f"broadcast_pow_{side}_grad", ins, name=f"{g.op_name}_{side}_grad"))


def _bgrad_x_only(g):
    """broadcast_floor_mod / broadcast_fmod: dz passes to x (reduced if x was broadcast); y gets none."""
    if g.needs("x"):
        g.set_grad("x", reduce_to(g, g.dout("z"), g.input("x"), f"{g.op_name}_x_grad"))


def _floor_mod(x, y):
    return torch.remainder(x, y)


def _divide_xla(k):
    """``divide`` over jax arrays (integers truncated toward zero)."""
    jnp = xla_rules.jnp()
    if k.input("x").dtype.is_floating_point:
        return jnp.divide
    return lambda x, y: (jnp.sign(x) * jnp.sign(y) * (jnp.abs(x) // jnp.abs(y))).astype(x.dtype)


for _name, _fn, _grad, _onnx, _xla in (
        ("broadcast_add", torch.add, _bgrad_add, "Add", "add"),
        ("broadcast_sub", torch.sub, _bgrad_sub, "Sub", "subtract"),
        ("broadcast_mul", torch.mul, _bgrad_mul, "Mul", "multiply"), ("broadcast_div", divide, _bgrad_div, "Div", None),
        ("broadcast_pow", torch.pow, _bgrad_pow, "Pow", "power"),
        ("broadcast_floor_mod", _floor_mod, _bgrad_x_only, onnx_rules.binary(onnx_rules.floor_mod), "remainder"),
        ("broadcast_fmod", torch.fmod, _bgrad_x_only, onnx_rules.binary(onnx_rules.fmod), "fmod"),
        # no grad function (as OneFlow): use elementwise_maximum/minimum to differentiate
        ("broadcast_maximum", torch.maximum, None, "Max", "maximum"),
        ("broadcast_minimum", torch.minimum, None, "Min", "minimum")):
    op(_name, inputs=["x", "y"], outputs=["z"], infer=_binary_infer,
       kernel=lambda k, f=_fn: f, grad=_grad, onnx=onnx_rules.same(_onnx) if isinstance(_onnx, str) else _onnx,
       xla=xla_rules.same(_xla) if _xla else _divide_xla,
       sbp=_sbp.elementwise(p_all=_name in ("broadcast_add", "broadcast_sub"),
                            p_each={"broadcast_mul": ("x", "y"), "broadcast_div": ("x",)}.get(_name, ())))


def _div_grad_kernel(k):
    def div_grad(y, z, dz):
        return sum_to_shape(-(dz * z / y), y.shape)
    return div_grad


op("broadcast_div_grad", inputs=["y", "z", "dz"], outputs=["dy"],
   infer=lambda ctx: ctx.set_output("dy", ctx.input("y").shape, ctx.input("y").dtype),
   kernel=_div_grad_kernel)


def _pow_grad_infer(side):
    def infer(ctx):
        same_dtype(ctx, "x", "y", "dz")
        d = ctx.input(side)
        ctx.set_output(f"d{side}", d.shape, d.dtype)
    return infer


op("broadcast_pow_x_grad", inputs=["x", "y", "z", "dz"], outputs=["dx"], infer=_pow_grad_infer("x"),
   kernel=lambda k: (lambda x, y, z, dz: sum_to_shape(_pow_x_grad(x, y, dz), x.shape)))
op("broadcast_pow_y_grad", inputs=["x", "y", "z", "dz"], outputs=["dy"], infer=_pow_grad_infer("y"),
   kernel=lambda k: (lambda x, y, z, dz: sum_to_shape(_pow_y_grad(x, y, z, dz), y.shape)))

# comparisons and logical ops: int8 output (1 true, 0 false), NoGrad
for _name, _fn in _LOGICAL.items():
    _type = f"broadcast_{'logical_' + _name if _name in ('and', 'or', 'xor') else _name}"
    op(_type, inputs=["x", "y"], outputs=["z"], infer=functools.partial(_binary_infer, out_dtype=_dt.int8),
       kernel=lambda k, f=_fn: (lambda x, y: f(x, y).to(torch.int8)), no_grad=True, xla=_logical_xla(_name),
       onnx=onnx_rules.compare(_name))


# ----------------------------------------------------------------- same-shape binary

def _multiply_infer(ctx):
    same_shape(ctx, "x", "y")
    ctx.set_output("out", ctx.input("x").shape, same_dtype(ctx, "x", "y"))


def _multiply_grad(g):
    if g.needs("x"):
        g.set_grad("x", g.emit("multiply", {"x": g.dout("out"), "y": g.input("y")}, name=f"{g.op_name}_x_grad"))
    if g.needs("y"):
        g.set_grad("y", g.emit("multiply", {"x": g.dout("out"), "y": g.input("x")}, name=f"{g.op_name}_y_grad"))


op("multiply", inputs=["x", "y"], outputs=["out"], infer=_multiply_infer,
   kernel=lambda k: torch.mul, grad=_multiply_grad, onnx=onnx_rules.same("Mul"))


def _same_shape_infer(out="z", float_only=False):
    def infer(ctx):
        same_shape(ctx, "x", "y")
        dtype = same_dtype(ctx, "x", "y")
        if float_only:
            _float_input(ctx, "x")
        ctx.set_output(out, ctx.input("x").shape, dtype)
    return infer


def _elementwise_extremum(kind):
    """elementwise_maximum/minimum: dz goes to x where x wins or ties, to y where y strictly wins."""
    fwd = torch.maximum if kind == "maximum" else torch.minimum
    x_wins = torch.ge if kind == "maximum" else torch.le

    def grad(g):
        outs = [a for a in ("dx", "dy") if g.needs(a[1])]
        if not outs:
            return
        r = g.emit(f"elementwise_{kind}_backward", {"dz": g.dout("z"), "x": g.input("x"), "y": g.input("y")},
                   name=f"{g.op_name}_grad", outputs=outs)
        if len(outs) == 1:
            r = {outs[0]: r}
        for a, lbn in r.items():
            g.set_grad(a[1], lbn)

    def backward_kernel(k):
        want_x, want_y = k.has_output("dx"), k.has_output("dy")

        def backward(dz, x, y):
            mask = x_wins(x, y)
            zero = _zero(dz)
            return (torch.where(mask, dz, zero) if want_x else None,
                    torch.where(mask, zero, dz) if want_y else None)
        return backward

    def backward_infer(ctx):
        same_shape(ctx, "dz", "x", "y")
        d = ctx.input("dz")
        for a in ("dx", "dy"):
            ctx.set_output(a, d.shape, d.dtype)

    op(f"elementwise_{kind}", inputs=["x", "y"], outputs=["z"], infer=_same_shape_infer(),
       kernel=lambda k: fwd, grad=grad, onnx=onnx_rules.same("Max" if kind == "maximum" else "Min"))
    op(f"elementwise_{kind}_backward", inputs=["dz", "x", "y"], outputs=["dx?", "dy?"],
       infer=backward_infer, kernel=backward_kernel)


_elementwise_extremum("maximum")
_elementwise_extremum("minimum")


def binary_family(name, fwd, dx_fn, dy_fn, xla=None, onnx=None):
    """Register ``name`` (x, y -> z, same shapes, float) and ``name_x_grad``/``name_y_grad``
    (x, y, dz -> dx / dy), OneFlow's wiring (``oneflow/user/ops/elementwise_maximum_minimum_ops.cpp``).
    ``xla`` names the jax function computing ``fwd`` (the grads' rules are its
    vector-Jacobian products); ``onnx(c, x, y, out, desc)`` writes its ONNX nodes (see
    :func:`onnx_rules.binary`)."""
    def grad(g):
        ins = {"x": g.input("x"), "y": g.input("y"), "dz": g.dout("z")}
        for side in ("x", "y"):
            if g.needs(side):
                g.set_grad(side, g.emit(f"{name}_{side}_grad", ins, name=f"{g.op_name}_{side}_grad"))

    def grad_infer(side):
        def infer(ctx):
            same_shape(ctx, "x", "y", "dz")
            same_dtype(ctx, "x", "y", "dz")
            ctx.set_output(f"d{side}", ctx.input(side).shape, ctx.input(side).dtype)
        return infer

    def vjp(side):
        def make(k):
            import jax
            f = xla_rules.jnp_fn(xla)
            if side == "x":
                return lambda x, y, dz: jax.vjp(lambda v: f(v, y), x)[1](dz)[0]
            return lambda x, y, dz: jax.vjp(lambda v: f(x, v), y)[1](dz)[0]
        return make

    op(name, inputs=["x", "y"], outputs=["z"], infer=_same_shape_infer(float_only=True),
       kernel=lambda k: fwd, grad=grad, xla=xla and xla_rules.same(xla), onnx=onnx and onnx_rules.binary(onnx))
    op(f"{name}_x_grad", inputs=["x", "y", "dz"], outputs=["dx"], infer=grad_infer("x"),
       kernel=lambda k: dx_fn, xla=xla and vjp("x"))
    op(f"{name}_y_grad", inputs=["x", "y", "dz"], outputs=["dy"], infer=grad_infer("y"),
       kernel=lambda k: dy_fn, xla=xla and vjp("y"))


def _xdivy(x, y):
    return torch.where(x == 0, _zero(x), x / y)


def _xlogy(x, y):
    return torch.where(x == 0, _zero(x), x * torch.log(y))


binary_family("pow", torch.pow, _pow_x_grad, lambda x, y, dz: _pow_y_grad(x, y, torch.pow(x, y), dz), xla="power",
              onnx=onnx_rules.power)
binary_family("atan2", torch.atan2,
              lambda x, y, dz: dz * y / (x * x + y * y),
              lambda x, y, dz: -dz * x / (x * x + y * y), xla="arctan2", onnx=onnx_rules.atan2)
# floor(x / y): piecewise constant, zero gradients
binary_family("floordiv", lambda x, y: torch.div(x, y, rounding_mode="floor"),
              lambda x, y, dz: torch.zeros_like(dz), lambda x, y, dz: torch.zeros_like(dz), onnx=onnx_rules.floor_div)
# x / y, defined as 0 where x == 0 (TensorFlow's xdivy)
binary_family("xdivy", _xdivy,
              lambda x, y, dz: torch.where(x == 0, _zero(dz), dz / y),
              lambda x, y, dz: torch.where(x == 0, _zero(dz), -dz * x / (y * y)), onnx=onnx_rules.xdivy)
# x * log(y), defined as 0 where x == 0 (TensorFlow's xlogy)
binary_family("xlogy", _xlogy,
              lambda x, y, dz: torch.where(x == 0, _zero(dz), dz * torch.log(y)),
              lambda x, y, dz: torch.where(x == 0, _zero(dz), dz * x / y), onnx=onnx_rules.xlogy)


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


def reduce_axes(k):
    """``(axes, keepdims)`` of a ``reduce_*`` op at run time: its ``axis`` attr as sorted,
    distinct non-negative axes of ``input_tensor`` (shared by the kernels and xla rules)."""
    ndim = len(k.input("input_tensor").shape)
    return tuple(sorted({a % ndim for a in k.attr("axis")})), k.attr("keepdims")


def _reduce_kernel(fn):
    def make(k):
        axes, keep = reduce_axes(k)
        return lambda x: fn(x, axes, keep)
    return make


REDUCE_ATTRS = {"axis": "list_int32", "keepdims": ("bool", False)}

op("reduce_sum", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(lambda x, a, keep: torch.sum(x, dim=a, keepdim=keep, dtype=x.dtype)),
   xla=xla_rules.reduce("sum"),
   sbp=_sbp.reduce(split_to_partial=True, partial_in=True), onnx=onnx_rules.reduce("ReduceSum"),
   grad=lambda g: g.needs("input_tensor") and g.set_grad("input_tensor", g.emit(
       "broadcast_like", {"x": g.dout("output_tensor"), "like": g.input("input_tensor")},
       {"broadcast_axes": g.attr("axis")})))


def _reduce_extremum_grad(g):
    """reduce_max/reduce_min grad: dy shared equally by the input elements equal to the result
    (OneFlow's seven-op wiring, ``oneflow/user/ops/reduce_ops.cpp``)."""
    if not g.needs("input_tensor"):
        return
    x, n = g.input("input_tensor"), g.op_name
    axis, keep = g.attr("axis"), g.attr("keepdims")
    out = g.emit("broadcast_like", {"x": g.output("output_tensor"), "like": x}, {"broadcast_axes": axis},
                 name=f"{n}_grad_broadcast_out")
    eq = g.emit("broadcast_equal", {"x": x, "y": out}, name=f"{n}_grad_broadcast_eq")
    mask = g.emit("cast_like", {"in": eq, "dtype_like": x}, name=f"{n}_grad_cast_mask")
    count = g.emit("reduce_sum", {"input_tensor": mask}, {"axis": axis, "keepdims": keep},
                   name=f"{n}_grad_reduce_sum_mask")
    divided = g.emit("broadcast_div", {"x": g.dout("output_tensor"), "y": count}, name=f"{n}_grad_divide_count")
    spread = g.emit("broadcast_like", {"x": divided, "like": x}, {"broadcast_axes": axis},
                    name=f"{n}_grad_broadcast_divided_dy")
    g.set_grad("input_tensor", g.emit("multiply", {"x": spread, "y": mask}, name=f"{n}_grad_multiply_mask"))


def _prod(x, axes, keep):
    for a in sorted(axes, reverse=True):
        x = torch.prod(x, dim=a, keepdim=keep)
    return x


op("reduce_max", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(lambda x, a, keep: torch.amax(x, dim=a, keepdim=keep)),
   onnx=onnx_rules.reduce("ReduceMax"),
   grad=_reduce_extremum_grad, xla=xla_rules.reduce("max"))
op("reduce_min", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(lambda x, a, keep: torch.amin(x, dim=a, keepdim=keep)),
   onnx=onnx_rules.reduce("ReduceMin"),
   grad=_reduce_extremum_grad, xla=xla_rules.reduce("min"))
# no grad function (as OneFlow)
op("reduce_prod", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(), kernel=_reduce_kernel(_prod), onnx=onnx_rules.reduce("ReduceProd"),
   xla=xla_rules.reduce("prod"))
op("reduce_any", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(_dt.bool), kernel=_reduce_kernel(lambda x, a, keep: torch.any(x != 0, dim=a, keepdim=keep)),
   onnx=onnx_rules.reduce_logical("ReduceMax"))
op("reduce_all", inputs=["input_tensor"], outputs=["output_tensor"], attrs=REDUCE_ATTRS,
   infer=_reduce_infer(_dt.bool), kernel=_reduce_kernel(lambda x, a, keep: torch.all(x != 0, dim=a, keepdim=keep)),
   onnx=onnx_rules.reduce_logical("ReduceMin"))


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
    if k.input("like").is_dynamic:
        return lambda x, like_: torch.sum(x, dim=axes, keepdim=True).reshape(like_.shape)
    return lambda x, like_: torch.sum(x, dim=axes, keepdim=True).reshape(shape)


def _reduce_sum_like_xla(k):
    axes, shape = tuple(k.attr("axis")), k.input("like").shape
    if not axes:
        return lambda x, like_: x
    return lambda x, like_: xla_rules.jnp().sum(x, axis=axes, keepdims=True).reshape(shape)


op("reduce_sum_like", inputs=["x", "like"], outputs=["y"], attrs={"axis": "list_int32"},
   infer=_reduce_sum_like_infer, kernel=_reduce_sum_like_kernel, no_grad=True, onnx=onnx_rules.reduce_sum_like,
   xla=_reduce_sum_like_xla)


def _broadcast_like_infer(ctx):
    ctx.check(len(ctx.attr("broadcast_axes")) > 0, "attr 'broadcast_axes' must not be empty")
    ctx.set_output("y", ctx.input("like").shape, ctx.input("like").dtype)


def _broadcast_like_kernel(k):
    like_shape = k.input("like").shape
    axes = sorted(a % len(like_shape) for a in k.attr("broadcast_axes"))
    x_shape = k.input("x").shape
    keep_shape = tuple(1 if i in axes else s for i, s in enumerate(like_shape))
    needs_view = x_shape != keep_shape
    if k.input("like").is_dynamic:  # the run-time shape of `like`
        return lambda x, like_: x.reshape([1 if i in axes else s for i, s in enumerate(like_.shape)]).expand(
            like_.shape)
    return lambda x, like_: (x.reshape(keep_shape) if needs_view else x).expand(like_shape)


def _broadcast_like_xla(k):
    like_shape = k.input("like").shape
    axes = sorted(a % len(like_shape) for a in k.attr("broadcast_axes"))
    keep_shape = tuple(1 if i in axes else s for i, s in enumerate(like_shape))
    return lambda x, like_: xla_rules.jnp().broadcast_to(x.reshape(keep_shape), like_shape)


op("broadcast_like", inputs=["x", "like"], outputs=["y"], attrs={"broadcast_axes": "list_int32"},
   infer=_broadcast_like_infer, kernel=_broadcast_like_kernel, xla=_broadcast_like_xla,
   onnx=onnx_rules.expand_to_output("x", "y", onnx_rules.broadcast_like_keep_shape),
   grad=lambda g: g.needs("x") and g.set_grad("x", g.emit(
       "reduce_sum_like", {"x": g.dout("y"), "like": g.input("x")}, {"axis": g.attr("broadcast_axes")})),
   view=True)


# ----------------------------------------------------------------- argmax, top_k, sort

op("argmax", inputs=["in"], outputs=["out"],
   infer=lambda ctx: ctx.set_output("out", ctx.input("in").shape[:-1], _dt.int64),
   kernel=lambda k: lambda x: torch.argmax(x, dim=-1), no_grad=True, onnx=onnx_rules.argmax)


def _top_k_infer(ctx):
    d = ctx.input("in")
    k = ctx.attr("k")
    ctx.check(len(d.shape) >= 1, f"input 'in' must have rank >= 1, received shape {d.shape}")
    ctx.check(k >= 1, f"attr 'k' must be >= 1, received {k}")
    ctx.set_output("out", d.shape[:-1] + (min(k, d.shape[-1]),), _dt.int32)


def _top_k_kernel(k):
    # always largest first: with sorted=False the order is unspecified (OneFlow's CPU kernel,
    # oneflow/user/kernels/top_k_kernel.cpp, keeps std::nth_element's order), so the sorted
    # order is one it allows, and the one ONNX TopK (the exported form) gives
    n = min(k.attr("k"), k.input("in").shape[-1])
    return lambda x: torch.topk(x, n, dim=-1, largest=True, sorted=True).indices.to(torch.int32)


# top_k: int32 indices of the k largest entries of the last axis
op("top_k", inputs=["in"], outputs=["out"], attrs={"k": ("int32", 0), "sorted": ("bool", False)},
   infer=_top_k_infer, kernel=_top_k_kernel, no_grad=True, onnx=onnx_rules.top_k)


def _in_top_k_infer(ctx):
    t, p = ctx.input("targets"), ctx.input("predictions")
    ctx.check(len(t.shape) == 1, f"input 'targets' must be 1-D, received shape {t.shape}")
    ctx.check(len(p.shape) == 2, f"input 'predictions' must be 2-D, received shape {p.shape}")
    ctx.check(t.shape[0] == p.shape[0], f"input 'targets' expected shape {(p.shape[0],)} (rows of 'predictions' "
                                        f"{p.shape}), received {t.shape}")
    ctx.check(t.dtype.is_integer, f"input 'targets' expected an integer dtype, received {t.dtype.name}")
    ctx.check(p.dtype.is_floating_point, f"input 'predictions' expected a floating dtype, received {p.dtype.name}")
    ctx.set_output("out", t.shape, _dt.int8)


def _in_top_k_kernel(k):
    kk = k.attr("k")

    def in_top_k(targets, predictions):
        # the target is in the top k when fewer than k classes score strictly higher
        target_score = predictions.gather(1, targets.long().unsqueeze(1))
        return ((predictions > target_score).sum(1) < kk).to(torch.int8)
    return in_top_k


_IN_TOP_K_CHECKS = index_checks("in_top_k", "targets", lambda k: k.input("predictions").shape[1])
op("in_top_k", inputs=["targets", "predictions"], outputs=["out"], attrs={"k": ("int32", 0)},
   infer=_in_top_k_infer, kernel=raising_bad_ids(_IN_TOP_K_CHECKS, 0, _in_top_k_kernel), checks=_IN_TOP_K_CHECKS,
   no_grad=True, onnx=onnx_rules.in_top_k)


def _direction(ctx):
    d = ctx.attr("direction")
    ctx.check(d in ("ASCENDING", "DESCENDING"), f"attr 'direction' must be 'ASCENDING' or 'DESCENDING', "
                                                f"received {d!r}")


def _sort_infer(out_dtype=None):
    def infer(ctx):
        _direction(ctx)
        d = ctx.input("in")
        ctx.check(len(d.shape) >= 1, f"input 'in' must have rank >= 1, received shape {d.shape}")
        ctx.set_output("out", d.shape, out_dtype or d.dtype)
    return infer


def _sort_kernel(indices):
    def make(k):
        desc = k.attr("direction") == "DESCENDING"
        if indices:
            return lambda x: torch.sort(x, dim=-1, descending=desc, stable=True).indices.to(torch.int32)
        return lambda x: torch.sort(x, dim=-1, descending=desc, stable=True).values
    return make


op("arg_sort", inputs=["in"], outputs=["out"], attrs={"direction": "string"}, infer=_sort_infer(_dt.int32),
   kernel=_sort_kernel(True), no_grad=True, onnx=onnx_rules.sort(False))
op("sort", inputs=["in"], outputs=["out"], attrs={"direction": "string"}, infer=_sort_infer(),
   kernel=_sort_kernel(False), no_grad=True, onnx=onnx_rules.sort(True))


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


def unary_family(name, fwd, grad_fn=None, differentiable=True, float_only=True, onnx=None, xla=None):
    """Register ``name`` (x -> y) and, if differentiable, ``name_grad`` (x, dy -> dx).

    ``grad_fn(x, dy)`` is the explicit derivative; without it the grad op's kernel
    uses torch autograd on ``fwd`` (OneFlow's wiring: grad op ``<op>_grad`` with the
    forward input ``x`` and ``dy``, ``oneflow/user/ops/math_unary_elementwise_op.cpp``).
    ``onnx`` names the ONNX operator computing ``fwd``, or is the op's ONNX converter, if there is one;
    ``xla`` the jax function computing it (see :func:`graphfront.ops.xla_rules.jnp_fn`; the
    grad op's rule is its vector-Jacobian product).
    """
    convert = onnx_rules.same(onnx) if isinstance(onnx, str) else onnx
    def infer(ctx):
        x = ctx.input("x")
        if float_only:
            ctx.check(x.dtype.is_floating_point, f"input 'x' expected a floating dtype, received {x.dtype.name}")
        ctx.set_output("y", x.shape, x.dtype)

    if differentiable:
        op(name, inputs=["x"], outputs=["y"], infer=infer, kernel=lambda k: fwd, sbp=_sbp.elementwise(), onnx=convert,
           grad=lambda g: g.set_grad("x", g.emit(f"{name}_grad", {"x": g.input("x"), "dy": g.dout("y")})),
           xla=xla and xla_rules.same(xla))
        op(f"{name}_grad", inputs=["x", "dy"], outputs=["dx"], infer=like("x"), sbp=_sbp.elementwise(p_each=("dy",)),
           kernel=(lambda k: grad_fn) if grad_fn else vjp_kernel(fwd), xla=xla and xla_rules.vjp(xla))
    else:
        op(name, inputs=["x"], outputs=["y"], infer=infer, kernel=lambda k: fwd, no_grad=True, sbp=_sbp.elementwise(),
           onnx=convert, xla=xla and xla_rules.same(xla))


def _zero_grad(x, dy):
    """Gradient of a piecewise-constant function (ceil, floor, rint, round, sign)."""
    return torch.zeros_like(dy)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _reciprocal_no_nan(x):
    return torch.where(x == 0, _zero(x), torch.reciprocal(x))


unary_family("negative", torch.neg, lambda x, dy: -dy, float_only=False, onnx="Neg", xla="negative")
unary_family("exp", torch.exp, lambda x, dy: dy * torch.exp(x), onnx="Exp", xla="exp")
unary_family("log", torch.log, lambda x, dy: dy / x, onnx="Log", xla="log")
unary_family("sqrt", torch.sqrt, lambda x, dy: dy * 0.5 * torch.rsqrt(x), onnx="Sqrt", xla="sqrt")
unary_family("rsqrt", torch.rsqrt, lambda x, dy: dy * -0.5 * torch.rsqrt(x) ** 3, onnx=onnx_rules.unary(onnx_rules.rsqrt), xla="lax.rsqrt")
unary_family("square", torch.square, lambda x, dy: dy * 2 * x, onnx=onnx_rules.unary(onnx_rules.square), xla="square")
unary_family("abs", torch.abs, lambda x, dy: dy * torch.sign(x), float_only=False, onnx="Abs", xla="abs")
unary_family("tanh", torch.tanh, lambda x, dy: dy * (1 - torch.tanh(x) ** 2), onnx="Tanh", xla="tanh")
unary_family("sigmoid_v2", torch.sigmoid, lambda x, dy: dy * torch.sigmoid(x) * (1 - torch.sigmoid(x)), onnx="Sigmoid",
             xla="nn.sigmoid")
unary_family("reciprocal", torch.reciprocal, lambda x, dy: -dy / (x * x), onnx="Reciprocal", xla="reciprocal")
unary_family("acos", torch.acos, lambda x, dy: -dy * torch.rsqrt(1 - x * x), onnx="Acos", xla="arccos")
unary_family("acosh", torch.acosh, lambda x, dy: dy * torch.rsqrt(x * x - 1), onnx="Acosh", xla="arccosh")
unary_family("asin", torch.asin, lambda x, dy: dy * torch.rsqrt(1 - x * x), onnx="Asin", xla="arcsin")
unary_family("asinh", torch.asinh, lambda x, dy: dy * torch.rsqrt(x * x + 1), onnx="Asinh", xla="arcsinh")
unary_family("atan", torch.atan, lambda x, dy: dy / (1 + x * x), onnx="Atan", xla="arctan")
unary_family("atanh", torch.atanh, lambda x, dy: dy / (1 - x * x), onnx="Atanh", xla="arctanh")
unary_family("ceil", torch.ceil, _zero_grad, onnx="Ceil", xla="ceil")
unary_family("cos", torch.cos, lambda x, dy: -dy * torch.sin(x), onnx="Cos", xla="cos")
unary_family("cosh", torch.cosh, lambda x, dy: dy * torch.sinh(x), onnx="Cosh", xla="cosh")
unary_family("erf", torch.erf, lambda x, dy: dy * _TWO_OVER_SQRT_PI * torch.exp(-x * x), onnx="Erf", xla="lax.erf")
unary_family("erfc", torch.erfc, lambda x, dy: -dy * _TWO_OVER_SQRT_PI * torch.exp(-x * x),
             onnx=onnx_rules.unary(onnx_rules.erfc), xla="lax.erfc")
unary_family("expm1", torch.expm1, lambda x, dy: dy * torch.exp(x), onnx=onnx_rules.unary(onnx_rules.expm1), xla="expm1")
unary_family("floor", torch.floor, _zero_grad, onnx="Floor", xla="floor")
unary_family("lgamma", torch.lgamma, lambda x, dy: dy * torch.digamma(x), xla="lax.lgamma")
unary_family("log1p", torch.log1p, lambda x, dy: dy / (1 + x), onnx=onnx_rules.unary(onnx_rules.log1p), xla="log1p")
unary_family("log2", torch.log2, lambda x, dy: dy / (x * math.log(2.0)), onnx=onnx_rules.unary(onnx_rules.log2),
             xla="log2")
unary_family("log_sigmoid", F.logsigmoid, lambda x, dy: dy * torch.sigmoid(-x),
             onnx=onnx_rules.unary(onnx_rules.log_sigmoid), xla="nn.log_sigmoid")
unary_family("reciprocal_no_nan", _reciprocal_no_nan, lambda x, dy: -dy * _reciprocal_no_nan(x * x),
             onnx=onnx_rules.unary(onnx_rules.reciprocal_no_nan))
unary_family("rint", torch.round, _zero_grad, onnx="Round", xla="round")          # round half to even
unary_family("round", torch.round, _zero_grad, onnx="Round", xla="round")         # round half to even (nearbyint)
unary_family("sign", torch.sign, _zero_grad, onnx="Sign", xla="sign")
unary_family("sin", torch.sin, lambda x, dy: dy * torch.cos(x), onnx="Sin", xla="sin")
unary_family("sinh", torch.sinh, lambda x, dy: dy * torch.cosh(x), onnx="Sinh", xla="sinh")
unary_family("softplus", F.softplus, lambda x, dy: dy * torch.sigmoid(x), onnx="Softplus", xla="nn.softplus")  # log(1 + exp(x))
unary_family("tan", torch.tan, lambda x, dy: dy / torch.cos(x) ** 2, onnx="Tan", xla="tan")


# sigmoid (in -> out) with grad sigmoid_grad (y = out, dy -> dx)

def _y_dy_infer(ctx):
    y, dy = ctx.input("y"), ctx.input("dy")
    ctx.check(y.shape == dy.shape, f"input 'dy' expected shape {y.shape}, received {dy.shape}")
    same_dtype(ctx, "y", "dy")
    ctx.set_output("dx", y.shape, y.dtype)


def _float_like(arg):
    def infer(ctx):
        d = _float_input(ctx, arg)
        for out in ctx._uc.output:
            ctx.set_output(out, d.shape, d.dtype)
    return infer


op("sigmoid", inputs=["in"], outputs=["out"], infer=_float_like("in"), kernel=lambda k: torch.sigmoid,
   onnx=onnx_rules.same("Sigmoid"), xla=xla_rules.same("nn.sigmoid"),
   grad=lambda g: g.set_grad("in", g.emit("sigmoid_grad", {"y": g.output("out"), "dy": g.dout("out")})))
op("sigmoid_grad", inputs=["y", "dy"], outputs=["dx"], infer=_y_dy_infer,
   kernel=lambda k: (lambda y, dy: dy * y * (1 - y)),
   xla=lambda k: (lambda y, dy: dy * y * (1 - y)))  # (the same arithmetic on jax arrays)


# gelu (in -> out) with grad gelu_grad (x = in, dy -> dx): the exact erf form
# gelu(x) = x * Phi(x), gelu'(x) = Phi(x) + x * phi(x)

def _gelu_grad(x, dy):
    cdf = 0.5 * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
    pdf = torch.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
    return dy * (cdf + x * pdf)


op("gelu", inputs=["in"], outputs=["out"], infer=_float_like("in"), kernel=lambda k: F.gelu,
   onnx=onnx_rules.unary(onnx_rules.gelu, "in", "out"),
   grad=lambda g: g.set_grad("in", g.emit("gelu_grad", {"x": g.input("in"), "dy": g.dout("out")})))
op("gelu_grad", inputs=["x", "dy"], outputs=["dx"], infer=like("x"), kernel=lambda k: _gelu_grad)


# ----------------------------------------------------------------- clipping

CLIP_ATTRS = {
    "clip_by_scalar": {"floating_min": ("double", 0.0), "integral_min": ("int64", 0),
                       "floating_max": ("double", 0.0), "integral_max": ("int64", 0)},
    "clip_by_scalar_min": {"floating_min": ("double", 0.0), "integral_min": ("int64", 0)},
    "clip_by_scalar_max": {"floating_max": ("double", 0.0), "integral_max": ("int64", 0)},
}


def _clip_bounds(k, dtype):
    """(min, max) of a clip op for inputs of ``dtype``: floating_* for float dtypes, integral_* else."""
    prefix = "floating_" if dtype.is_floating_point else "integral_"
    lo = k.attrs.get(prefix + "min")
    hi = k.attrs.get(prefix + "max")
    return lo, hi


def _clip_kernel(k):
    lo, hi = _clip_bounds(k, k.input("x").dtype)
    return lambda x: torch.clamp(x, lo, hi)


def _clip_grad_kernel(k):
    lo, hi = _clip_bounds(k, k.input("x").dtype)

    def clip_grad(dy, x):
        keep = torch.ones_like(x, dtype=torch.bool)
        if lo is not None:
            keep &= x >= lo
        if hi is not None:
            keep &= x <= hi
        return torch.where(keep, dy, _zero(dy))
    return clip_grad


for _name, _attrs in CLIP_ATTRS.items():
    op(_name, inputs=["x"], outputs=["y"], attrs=_attrs, infer=like("x"), kernel=_clip_kernel, sbp=_sbp.elementwise(),
       onnx=onnx_rules.clip,
       grad=lambda g, t=_name: g.needs("x") and g.set_grad("x", g.emit(
           f"{t}_grad", {"dy": g.dout("y"), "x": g.input("x")}, g.attrs)))
    op(f"{_name}_grad", inputs=["dy", "x"], outputs=["dx"], attrs=_attrs, infer=like("x"),
       kernel=_clip_grad_kernel, sbp=_sbp.elementwise(p_each=("dy",)))


# ----------------------------------------------------------------- square sums, finiteness counts

def _sum_infer(dtype=None, repeated=False):
    def infer(ctx):
        ins = ctx.inputs("x") if repeated else [ctx.input("x")]
        for i, d in enumerate(ins):
            ctx.check(d.dtype is ins[0].dtype,
                      f"input 'x_{i}' expected dtype {ins[0].dtype.name}, received {d.dtype.name}")
        ctx.set_output("y", (1,), dtype or ins[0].dtype)
    return infer


def _square_sum(x):
    return torch.sum(x * x).reshape(1)


def _count_not_finite(x):
    return torch.sum(~torch.isfinite(x)).reshape(1).to(torch.int64)


# square_sum / multi_square_sum: no grad function; count_not_finite*: NoGrad
op("square_sum", inputs=["x"], outputs=["y"], infer=_sum_infer(), kernel=lambda k: _square_sum, onnx=onnx_rules.square_sum,
   sbp=_sbp.reduce(split_to_partial=True))
op("multi_square_sum", inputs=["x*"], outputs=["y"], infer=_sum_infer(repeated=True),
   kernel=lambda k: (lambda xs: functools.reduce(torch.add, [_square_sum(x) for x in xs])),
   onnx=onnx_rules.multi_square_sum)
op("count_not_finite", inputs=["x"], outputs=["y"], infer=_sum_infer(_dt.int64),
   kernel=lambda k: _count_not_finite, no_grad=True, onnx=onnx_rules.count_not_finite)
op("multi_count_not_finite", inputs=["x*"], outputs=["y"], infer=_sum_infer(_dt.int64, repeated=True),
   kernel=lambda k: (lambda xs: functools.reduce(torch.add, [_count_not_finite(x) for x in xs])), no_grad=True,
   onnx=onnx_rules.count_not_finite)


# l2_normalize (x -> y, square_x_sum): y = x / sqrt(max(sum(x^2, axis), epsilon))

def _l2_normalize_infer(ctx):
    x = _float_input(ctx, "x")
    axis = norm_axis(ctx.attr("axis"), len(x.shape), "attr 'axis'")
    ctx.check(ctx.attr("epsilon") > 0, f"attr 'epsilon' must be > 0, received {ctx.attr('epsilon')}")
    ctx.set_output("y", x.shape, x.dtype)
    ctx.set_output("square_x_sum", tuple(1 if i == axis else s for i, s in enumerate(x.shape)), x.dtype)


def _l2_normalize_kernel(k):
    axis, eps = k.attr("axis") % len(k.input("x").shape), k.attr("epsilon")

    def l2_normalize(x):
        ss = torch.sum(x * x, dim=axis, keepdim=True)
        return x * torch.rsqrt(torch.clamp(ss, min=eps)), ss
    return l2_normalize


def _l2_normalize_grad_kernel(k):
    axis, eps = k.attr("axis") % len(k.input("y").shape), k.attr("epsilon")

    def l2_normalize_grad(dy, y, ss):
        inv = torch.rsqrt(torch.clamp(ss, min=eps))
        inner = dy - y * torch.sum(dy * y, dim=axis, keepdim=True)
        # below epsilon the normalizer is the constant sqrt(epsilon): the map is linear
        return torch.where(ss >= eps, inner * inv, dy * inv)
    return l2_normalize_grad


L2_ATTRS = {"axis": ("int32", 0), "epsilon": ("float", 0.0)}
op("l2_normalize", inputs=["x"], outputs=["y", "square_x_sum"], attrs=L2_ATTRS, infer=_l2_normalize_infer,
   kernel=_l2_normalize_kernel, onnx=onnx_rules.l2_normalize,
   grad=lambda g: g.needs("x") and g.set_grad("x", g.emit(
       "l2_normalize_grad", {"dy": g.dout("y"), "y": g.output("y"), "square_x_sum": g.output("square_x_sum")},
       g.attrs)))
op("l2_normalize_grad", inputs=["dy", "y", "square_x_sum"], outputs=["dx"], attrs=L2_ATTRS, infer=like("y"),
   kernel=_l2_normalize_grad_kernel)


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


op("where", inputs=["condition", "x", "y"], outputs=["out"], infer=_where_infer,
   kernel=lambda k: (lambda c, x, y: torch.where(c != 0, x, y)), grad=_where_grad, onnx=onnx_rules.where)


def _where_scalar_infer(blob):
    def infer(ctx):
        c = _condition(ctx)
        d = ctx.input(blob)
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


# where_scalar_x / where_scalar_y: no grad function (as OneFlow)
op("where_scalar_x", inputs=["condition", "y"], outputs=["out"], attrs=SCALAR_ATTRS,
   infer=_where_scalar_infer("y"), kernel=_where_scalar_kernel(True), onnx=onnx_rules.where_scalar(True))
op("where_scalar_y", inputs=["condition", "x"], outputs=["out"], attrs=SCALAR_ATTRS,
   infer=_where_scalar_infer("x"), kernel=_where_scalar_kernel(False), onnx=onnx_rules.where_scalar(False))

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


op("where_scalar_xy", inputs=["condition"], outputs=["out"], attrs=WHERE_XY_ATTRS, infer=_where_xy_infer,
   kernel=_where_xy_kernel, no_grad=True, onnx=onnx_rules.where_scalar_xy)


def _masked_fill_infer(ctx):
    x = ctx.input("x")
    m = _condition(ctx, "mask")
    ctx.set_output("out", broadcast_shape(x.shape, m.shape, "input 'x' and 'mask'"), x.dtype)


def _masked_fill_kernel(k):
    s = _operand(k.attrs, "", k.input("x").dtype)
    return lambda x, m: torch.where(m != 0, torch.full((), s, dtype=x.dtype, device=x.device), x)


# masked_fill: no grad function (as OneFlow); flow.masked_fill builds constant_like + where instead
op("masked_fill", inputs=["x", "mask"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_masked_fill_infer,
   kernel=_masked_fill_kernel, onnx=onnx_rules.masked_fill)


# ----------------------------------------------------------------- tril, triu, fused_scale_tril

TRIL_ATTRS = {"diagonal": ("int64", 0), "floating_fill_value": ("double", 0.0),
              "integer_fill_value": ("int64", 0), "is_floating_fill_value": ("bool", False)}
FUSED_SCALE_TRIL_ATTRS = dict(TRIL_ATTRS, floating_scale_value=("double", 1.0), integer_scale_value=("int64", 1),
                              is_floating_scale_value=("bool", False))


def _matrix_infer(ctx):
    d = ctx.input("in")
    ctx.check(len(d.shape) >= 2, f"input 'in' must have rank >= 2, received shape {d.shape}")
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


def _tril_grad(op_type):
    def grad(g):
        if g.needs("in"):
            attrs = dict(g.attrs, floating_fill_value=0.0, integer_fill_value=0, is_floating_fill_value=False)
            g.set_grad("in", g.emit(op_type, {"in": g.dout("out")}, attrs))
    return grad


op("tril", inputs=["in"], outputs=["out"], attrs=TRIL_ATTRS, infer=_matrix_infer, kernel=_tril_kernel(False),
   grad=_tril_grad("tril"), onnx=onnx_rules.triangle(True))
# triu: no grad function (as OneFlow)
op("triu", inputs=["in"], outputs=["out"], attrs={"diagonal": ("int64", 0)}, infer=_matrix_infer,
   kernel=lambda k: (lambda x, d=k.attr("diagonal"): torch.triu(x, d)), onnx=onnx_rules.triangle(False))
# fused_scale_tril: scale * x on and below `diagonal`, fill above; grad = same op on dy with fill 0
op("fused_scale_tril", inputs=["in"], outputs=["out"], attrs=FUSED_SCALE_TRIL_ATTRS, infer=_matrix_infer,
   kernel=_tril_kernel(True), grad=_tril_grad("fused_scale_tril"), onnx=onnx_rules.fused_scale_tril)
