"""Math ops: elementwise unary/binary/scalar families, add_n, cast, comparisons, clipping
(reductions are in :mod:`graphfront.ops.reduce_ops`, selection in :mod:`graphfront.ops.select_ops`).

Names, arguments, attrs and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/``: ``math_unary_elementwise_op.cpp``, ``math_binary_elementwise_ops.cpp``,
``math_binary_broadcast_ops.cpp``, ``scalar_*_op.cpp``, ``clip_by_value_op.cpp``
and the other math ``*_op.cpp`` files). Derivative formulas are the
textbook ones; where a formula is a convention (ties of max/min, ``x == 0`` of
``pow``/``xlogy``/``xdivy``) the op's docstring says which.

Sections: relu/identity/cast · scalar ops · add_n · broadcast binary (arithmetic,
comparison, logical) · same-shape binary (multiply, elementwise max/min and their
grads) · unary family · clipping.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import (broadcast_shape, fill_fits, float_input, gelu_grad, like, nonzero_divisor_native,
                                   numel, raising_zero_divisor, reduce_to, same_dtype, same_shape, vjp)
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import const_as, int64s, nonzero
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


def _sum_to_shape_xla(t, shape):
    """:func:`sum_to_shape` over a jax array."""
    shape = tuple(shape)
    extra = t.ndim - len(shape)
    if tuple(t.shape) == shape or extra < 0:
        return t.reshape(shape)
    axes = tuple(i for i in range(t.ndim) if i < extra or (shape[i - extra] == 1 and t.shape[i] != 1))
    return (t.sum(axis=axes, keepdims=True) if axes else t).reshape(shape)


def _zero(t):
    return torch.zeros((), dtype=t.dtype, device=t.device)


# ----------------------------------------------------------------- relu / identity

def _same_xla(name):
    """The op is the named jax function of its inputs, in declaration order."""
    return lambda k: xla_rules.jnp_fn(name)


op("relu", inputs=["x"], outputs=["y"], infer=like("x"),
   kernel=lambda k: torch.relu, sbp=_sbp.elementwise(), onnx=onnx_rules.same("Relu"), xla=_same_xla("nn.relu"),
   grad=lambda g: g.needs("x") and g.set_grad(
       "x", g.emit("relu_grad", {"y": g.output("y"), "dy": g.dout("y")})), amp="clear")


def _relu_grad_infer(ctx):
    ctx.check(ctx.input("dy").shape == ctx.input("y").shape,
              f"input 'dy' expected shape {ctx.input('y').shape}, received {ctx.input('dy').shape}")
    same_dtype(ctx, "y", "dy")
    ctx.set_output("dx", ctx.input("dy").shape, ctx.input("y").dtype)


op("relu_grad", inputs=["y", "dy"], outputs=["dx"], infer=_relu_grad_infer, sbp=_sbp.elementwise(p_each=("dy",)),
   kernel=lambda k: lambda y, dy: torch.ops.aten.threshold_backward(dy, y, 0),  # dy where y > 0 (one kernel)
   xla=lambda k: lambda y, dy: xla_rules.jnp().where(y > 0, dy, 0),
   onnx=onnx_rules.grad(lambda c, y, dy, out, d: onnx_rules.where_zero(
       c, c.node("Greater", [y, const_as(c, 0, d)]), dy, d, out, zero_if=False), "y"))

op("identity", inputs=["in"], outputs=["out"], infer=like("in"), sbp=_sbp.elementwise(p_all=True),
   kernel=lambda k: lambda x: x, xla=lambda k: lambda x: x,
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit("identity", {"in": g.dout("out")})), view=True,
   onnx=onnx_rules.same("Identity"), amp="clear")


# ----------------------------------------------------------------- cast, cast_like

def _cast_infer(ctx):
    dtype = ctx.attr("dtype")
    ctx.check(dtype is not None, "attr 'dtype' must be set")
    ctx.set_output("out", ctx.input("in").shape, dtype)


op("cast", inputs=["in"], outputs=["out"], attrs={"dtype": "dtype"}, infer=_cast_infer,
   sbp=_sbp.elementwise(p_all=True, p_int=False),
   kernel=lambda k: (lambda x, t=k.attr("dtype").torch: x.to(t)),
   xla=lambda k: (lambda x, t=k.attr("dtype").np: x.astype(t)),
   onnx=lambda c: c.node("Cast", [c.input("in")], [c.output("out")], to=c.dtype_code(c.attr("dtype"))),
   grad=lambda g: g.needs("in") and g.set_grad(
       "in", g.emit("cast", {"in": g.dout("out")}, {"dtype": g.desc(g.input("in")).dtype})))

def _cast_to_output_onnx(in_arg, out_arg):
    """``Cast`` to the output's inferred dtype (cast_like)."""
    return lambda c: c.node("Cast", [c.input(in_arg)], [c.output(out_arg)],
                            to=c.dtype_code(c.output_desc(out_arg).dtype))


# cast_like: `in` converted to the dtype of `dtype_like` (used by reduce_max/min grads)
op("cast_like", inputs=["in", "dtype_like"], outputs=["out"],
   infer=lambda ctx: ctx.set_output("out", ctx.input("in").shape, ctx.input("dtype_like").dtype),
   kernel=lambda k: (lambda x, like_, t=k.input("dtype_like").dtype.torch: x.to(t)), no_grad=True,
   sbp=_sbp.elementwise(p_each=("in",), p_int=False),
   onnx=_cast_to_output_onnx("in", "out"), xla=lambda k: (lambda x, like_, t=k.input("dtype_like").dtype.np: x.astype(t)))

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


def _scalar_infer(out_dtype=None, float_only=False, divides=False):
    """Shape inference of a ``scalar_*`` op; ``divides``: the scalar is a divisor, which an
    integer input refuses to be 0 (torch raises on the CPU; the quotient is undefined on a GPU)."""
    def infer(ctx):
        d = float_input(ctx, "in") if float_only else ctx.input("in")
        ctx.check(ctx.attr("has_int_operand") or ctx.attr("has_float_operand"),
                  "one of attrs 'has_int_operand' / 'has_float_operand' must be true")
        if ctx.attr("has_float_operand") and not ctx.attr("has_int_operand"):
            fill_fits(ctx, ctx.attr("float_operand"), d.dtype, "attr 'float_operand'", wraps=True)
        if divides and not d.dtype.is_floating_point:
            ctx.check(scalar_operand(ctx) != 0, f"the scalar divisor is 0 for the integer input 'in' ({d.dtype.name})")
        ctx.set_output("out", d.shape, out_dtype or d.dtype)
    return infer


def _scalar_onnx(onnx_type):
    """``scalar_*`` ops (input ``in``, attr operand): ``onnx_type(in, const)``."""
    def convert(c):
        s = c.attr("int_operand") if c.attr("has_int_operand") else c.attr("float_operand")
        c.node(onnx_type, [c.input("in"), c.const(np.array(s, dtype=c.input_desc("in").dtype.np))],
               [c.output("out")])
    return convert


def _scalar_xla(name):
    """``scalar_*`` ops: ``name(x, operand)`` with the operand of the kernel's
    ``scalar_operand`` (an int for integer inputs)."""
    def make(k):
        fn, s = xla_rules.jnp_fn(name), scalar_operand(k)
        dtype = k.input("in").dtype.np
        return lambda x: fn(x, xla_rules.jnp().asarray(s, dtype=dtype))
    return make


op("scalar_add", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(),
   kernel=_scalar_kernel(torch.add), sbp=_sbp.elementwise(), onnx=_scalar_onnx("Add"), xla=_scalar_xla("add"),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.dout("out")), amp="gray")
op("scalar_mul", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(),
   kernel=_scalar_kernel(torch.mul), sbp=_sbp.elementwise(p_all=True), onnx=_scalar_onnx("Mul"),
   xla=_scalar_xla("multiply"),
   grad=lambda g: g.needs("in") and g.set_grad(
       "in", g.emit("scalar_mul", {"in": g.dout("out")}, _scalar_attrs_of(g))), amp="gray")


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


def _scalar_pow_grad_xla(k):
    s, jnp = scalar_operand(k), xla_rules.jnp()
    if s == 0:
        return lambda x, dy: jnp.zeros_like(dy)
    return lambda x, dy: dy * s * jnp.power(x, s - 1)


def _scalar_operand_onnx(c):
    """The scalar of a ``scalar_*`` op in the input's dtype (a float operand truncated for integer inputs)."""
    d = c.input_desc("in")
    s = c.attr("int_operand") if c.attr("has_int_operand") else c.attr("float_operand")
    return const_as(c, s if d.dtype.is_floating_point else int(s), d)


def _scalar_binary_onnx(fn):
    """scalar_pow / scalar_floordiv: ``fn(c, in, operand, out, desc)``."""
    return lambda c: fn(c, c.input("in"), _scalar_operand_onnx(c), c.output("out"), c.input_desc("in"))


def _power_onnx(c, x, y, out, d):
    c.node("Pow", [x, y], [out])


op("scalar_pow", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(float_only=True),
   kernel=_scalar_kernel(torch.pow), onnx=_scalar_binary_onnx(_power_onnx), xla=_scalar_xla("power"),
   sbp=_sbp.elementwise(),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit(
       "scalar_pow_grad", {"x": g.input("in"), "dy": g.dout("out")}, _scalar_attrs_of(g))))
def _scalar_pow_grad_onnx(c):
    """dy * s * x ** (s - 1); zeros for s == 0."""
    s = scalar_operand(c)
    if s == 0:
        return onnx_rules.zeros_output()(c)
    x, d = c.input("x"), c.input_desc("x")
    onnx_rules.mul(c, c.input("dy"), const_as(c, s, d), c.node("Pow", [x, const_as(c, s - 1, d)]), out=c.output("dx"))


op("scalar_pow_grad", inputs=["x", "dy"], outputs=["dx"], attrs=SCALAR_ATTRS, infer=like("x"),
   kernel=_scalar_pow_grad_kernel, xla=_scalar_pow_grad_xla, onnx=_scalar_pow_grad_onnx,
   sbp=_sbp.elementwise(p_each=("dy",)))

def _floor_div_onnx(c, x, y, out, d):
    """floor(x / y); for integers the truncating ``Div`` moved down by one where the
    remainder's sign differs from y's."""
    if d.dtype.is_floating_point:
        c.node("Floor", [c.node("Div", [x, y])], [out])
        return
    q = c.node("Div", [x, y])
    r = c.node("Sub", [x, c.node("Mul", [q, y])])
    zero = const_as(c, 0, d)
    off = c.node("And", [c.node("Not", [c.node("Equal", [r, zero])]),
                         c.node("Xor", [c.node("Less", [r, zero]), c.node("Less", [y, zero])])])
    c.node("Sub", [q, c.node("Cast", [off], to=c.dtype_code(d.dtype))], [out])


# no grad function (as OneFlow): autograd fails if it reaches them
op("scalar_floordiv", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(divides=True),
   kernel=_scalar_kernel(lambda x, s: torch.div(x, s, rounding_mode="floor").to(x.dtype)),
   onnx=_scalar_binary_onnx(_floor_div_onnx), xla=_scalar_xla("floor_divide"), sbp=_sbp.elementwise())


def _fmod_onnx(c, x, y, out, d):
    """C ``fmod`` (the sign of x)."""
    c.node("Mod", [x, y], [out], fmod=1)


op("scalar_fmod", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS, infer=_scalar_infer(divides=True),
   kernel=_scalar_kernel(torch.fmod), onnx=_scalar_binary_onnx(_fmod_onnx), xla=_scalar_xla("fmod"),
   sbp=_sbp.elementwise())

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


_COMPARE_onnx = {"equal": "Equal", "greater": "Greater", "greater_equal": "GreaterOrEqual", "less": "Less",
            "less_equal": "LessOrEqual"}


def _compare_onnx_node(c, kind, x, y, out):
    """x <kind> y as int8 1/0; the logical kinds compare ``x != 0`` with ``y != 0``."""
    if kind in ("and", "or", "xor"):
        z = c.node(kind.capitalize(), [nonzero(c, x), nonzero(c, y)])
    elif kind == "not_equal":
        z = c.node("Not", [c.node("Equal", [x, y])])
    else:
        z = c.node(_COMPARE_onnx[kind], [x, y])
    c.node("Cast", [z], [out], to=onnx_rules.INT8)


def _scalar_compare_onnx(kind):
    """scalar_logical_<kind>: ``in <kind> operand`` as int8."""
    return lambda c: _compare_onnx_node(c, kind, c.input("in"), _scalar_operand_onnx(c), c.output("out"))


for _name, _fn in _LOGICAL.items():
    op(f"scalar_logical_{_name}", inputs=["in"], outputs=["out"], attrs=SCALAR_ATTRS,
       infer=_scalar_infer(_dt.int8), kernel=_scalar_logical_kernel(_fn), no_grad=True,
       xla=_logical_xla(_name, scalar=True), onnx=_scalar_compare_onnx(_name), sbp=_sbp.elementwise())


# scalar_{add,sub,mul,div}_by_tensor: the scalar is a one-element blob

def _by_tensor_infer(ctx):
    x, s = ctx.input("x"), ctx.input("scalar")
    ctx.check(numel(s.shape) == 1, f"input 'scalar' must have exactly one element, received shape {s.shape}")
    same_dtype(ctx, "x", "scalar")
    ctx.set_output("y", x.shape, x.dtype)


def _by_tensor_run(fn):
    def run(x, s):
        return fn(x, s.reshape(()))
    return run


def _by_tensor_kernel(kind, fn):
    run = _by_tensor_run(fn)
    return raising_zero_divisor(f"scalar_{kind}_by_tensor", "scalar", run) if kind == "div" else (lambda k: run)


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
    OneFlow's ``BinaryFuncDiv`` in ``oneflow/core/ndarray/binary_func.h``). A division by
    -1 is a negation, which wraps the dtype's minimum onto itself: torch's truncating
    division of an int32 or int64 minimum by -1 traps (SIGFPE ends the process)."""
    if x.dtype.is_floating_point:
        return torch.div(x, y)
    minus_one = y == -1
    quotient = torch.div(x, torch.where(minus_one, torch.ones_like(y), y), rounding_mode="trunc")
    return torch.where(minus_one, -x, quotient)


def _by_tensor_xla(kind):
    def make(k):
        fn = _divide_xla(k) if kind == "div" else xla_rules.jnp_fn({"add": "add", "sub": "subtract",
                                                                     "mul": "multiply"}[kind])
        return lambda x, s: fn(x, s.reshape(()))
    return make


def _by_tensor_onnx(onnx_type):
    """scalar_{add,sub,mul,div}_by_tensor: ``onnx_type(x, scalar as a 0-d tensor)`` (integer
    ``Div`` truncates toward zero, as the kernel)."""
    return lambda c: c.node(onnx_type, [c.input("x"), c.node("Reshape", [c.input("scalar"), c.const(int64s([]))])],
                            [c.output("y")])


for _kind, _fn in (("add", torch.add), ("sub", torch.sub), ("mul", torch.mul), ("div", divide)):
    op(f"scalar_{_kind}_by_tensor", inputs=["x", "scalar"], outputs=["y"], infer=_by_tensor_infer,
       kernel=_by_tensor_kernel(_kind, _fn), grad=_by_tensor_grad(_kind), onnx=_by_tensor_onnx(_kind.capitalize()),
       native=nonzero_divisor_native(_by_tensor_run(_fn)) if _kind == "div" else None,
       xla=_by_tensor_xla(_kind),
       sbp=_sbp.elementwise(p_each=("x",) if _kind in ("mul", "div") else (), p_int=_kind != "div"))


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
   xla=lambda k: lambda xs: functools.reduce(lambda a, b: a + b, xs), amp="gray",  # in the kernel's order
   qat="int8_google")


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


def _binary_onnx(fn, out_arg="z"):
    """A converter applying ``fn(c, x, y, out, desc of x)``."""
    return lambda c: fn(c, c.input("x"), c.input("y"), c.output(out_arg), c.input_desc("x"))


def _floor_mod_onnx(c, x, y, out, d):
    """x mod y with the sign of y (torch.remainder): integers by ``Mod``; floats by the
    C ``fmod`` moved by y where its sign differs from y's, as PyTorch's kernel."""
    if not d.dtype.is_floating_point:
        c.node("Mod", [x, y], [out])
        return
    r = c.node("Mod", [x, y], fmod=1)
    zero = const_as(c, 0, d)
    off = c.node("And", [c.node("Not", [c.node("Equal", [r, zero])]),
                         c.node("Xor", [c.node("Less", [r, zero]), c.node("Less", [y, zero])])])
    c.node("Where", [off, c.node("Add", [r, y]), r], [out])


_DIVIDING = ("broadcast_div", "broadcast_floor_mod", "broadcast_fmod")  # (an integer 0 in y raises)

for _name, _fn, _grad, _onnx, _xla in (
        ("broadcast_add", torch.add, _bgrad_add, "Add", "add"),
        ("broadcast_sub", torch.sub, _bgrad_sub, "Sub", "subtract"),
        ("broadcast_mul", torch.mul, _bgrad_mul, "Mul", "multiply"), ("broadcast_div", divide, _bgrad_div, "Div", None),
        ("broadcast_pow", torch.pow, _bgrad_pow, "Pow", "power"),
        ("broadcast_floor_mod", _floor_mod, _bgrad_x_only, _binary_onnx(_floor_mod_onnx), "remainder"),
        ("broadcast_fmod", torch.fmod, _bgrad_x_only, _binary_onnx(_fmod_onnx), "fmod"),
        # no grad function (as OneFlow): use elementwise_maximum/minimum to differentiate
        ("broadcast_maximum", torch.maximum, None, "Max", "maximum"),
        ("broadcast_minimum", torch.minimum, None, "Min", "minimum")):
    op(_name, inputs=["x", "y"], outputs=["z"], infer=_binary_infer,
       kernel=raising_zero_divisor(_name, "y", _fn) if _name in _DIVIDING else (lambda k, f=_fn: f), grad=_grad,
       native=nonzero_divisor_native(_fn) if _name in _DIVIDING else None,
       onnx=onnx_rules.same(_onnx) if isinstance(_onnx, str) else _onnx,
       xla=_same_xla(_xla) if _xla else _divide_xla,
       sbp=_sbp.elementwise(p_all=_name in ("broadcast_add", "broadcast_sub"),
                            p_each={"broadcast_mul": ("x", "y"), "broadcast_div": ("x",)}.get(_name, ()),
                            p_int=_name != "broadcast_div"),
       amp="gray" if _name in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div") else None)


def _reduced_grad_sbp(*p_each):
    """Grads of broadcast binary ops (inputs broadcast numpy-style onto dz, the output summed
    back to one input's shape): on each axis of dz, the args of its full length split along
    it and the others broadcast, the output a partial sum where the axis is reduced;
    ``p_each``: inputs the grad is linear in, each alone partial (float outputs)."""
    def rule(ctx):
        out, ref = ctx.output_args[0], ctx.shape("dz")
        cands = []
        for k in range(len(ref)):
            sig = {}
            for a in ctx.args:
                s = ctx.shape(a)
                ka = k - (len(ref) - len(s))
                sig[a] = _sbp.split(ka) if ka >= 0 and s[ka] == ref[k] else _sbp.P if a == out else _sbp.B
            cands.append(sig)
        if ctx.dtype(out).is_floating_point:
            cands += [_sbp.signature(ctx, _sbp.B, **{a: _sbp.P, out: _sbp.P}) for a in p_each]
        return cands
    return rule


def _div_grad_kernel(k):
    def div_grad(y, z, dz):
        return sum_to_shape(-(dz * z / y), y.shape)
    return div_grad


op("broadcast_div_grad", inputs=["y", "z", "dz"], outputs=["dy"],
   infer=lambda ctx: ctx.set_output("dy", ctx.input("y").shape, ctx.input("y").dtype),
   kernel=_div_grad_kernel, xla=lambda k: (lambda y, z, dz: _sum_to_shape_xla(-(dz * z / y), y.shape)),
   sbp=_reduced_grad_sbp("z", "dz"),
   onnx=lambda c: onnx_rules.sum_to_shape(
       c, c.node("Neg", [c.node("Div", [c.node("Mul", [c.input("dz"), c.input("z")]), c.input("y")])]),
       c.input_desc("dz").shape, c.output_desc("dy").shape, c.output("dy")))


def _pow_grad_infer(side):
    def infer(ctx):
        same_dtype(ctx, "x", "y", "dz")
        d = ctx.input(side)
        ctx.set_output(f"d{side}", d.shape, d.dtype)
    return infer


def _pow_x_grad_onnx(c, x, y, dz, d):
    """0 where y == 0, else dz * y * x ** (y - 1) (the shape of the broadcast)."""
    one_less = c.node("Sub", [y, const_as(c, 1, d)])
    value = onnx_rules.mul(c, dz, y, c.node("Pow", [x, one_less]))
    return onnx_rules.where_zero(c, c.node("Equal", [y, const_as(c, 0, d)]), value, d)


def _pow_y_grad_onnx(c, x, y, z, dz, d):
    """0 where x == 0 and y >= 0, else dz * z * log(x)."""
    zero = const_as(c, 0, d)
    cond = c.node("And", [c.node("Equal", [x, zero]), c.node("GreaterOrEqual", [y, zero])])
    return onnx_rules.where_zero(c, cond, onnx_rules.mul(c, dz, z, c.node("Log", [x])), d)


def _broadcast_pow_grad_onnx(side):
    def convert(c):
        x, y, z, dz, d = c.input("x"), c.input("y"), c.input("z"), c.input("dz"), c.input_desc("x")
        t = _pow_x_grad_onnx(c, x, y, dz, d) if side == "x" else _pow_y_grad_onnx(c, x, y, z, dz, d)
        onnx_rules.sum_to_shape(c, t, c.input_desc("dz").shape, c.input_desc(side).shape, c.output(f"d{side}"))
    return convert


op("broadcast_pow_x_grad", inputs=["x", "y", "z", "dz"], outputs=["dx"], infer=_pow_grad_infer("x"),
   onnx=_broadcast_pow_grad_onnx("x"), sbp=_reduced_grad_sbp("dz"),
   kernel=lambda k: (lambda x, y, z, dz: sum_to_shape(_pow_x_grad(x, y, dz), x.shape)),
   xla=lambda k: (lambda x, y, z, dz: _sum_to_shape_xla(
       xla_rules.jnp().where(y == 0, 0, dz * y * xla_rules.jnp().power(x, y - 1)), x.shape)))
op("broadcast_pow_y_grad", inputs=["x", "y", "z", "dz"], outputs=["dy"], infer=_pow_grad_infer("y"),
   onnx=_broadcast_pow_grad_onnx("y"), sbp=_reduced_grad_sbp("z", "dz"),
   kernel=lambda k: (lambda x, y, z, dz: sum_to_shape(_pow_y_grad(x, y, z, dz), y.shape)),
   xla=lambda k: (lambda x, y, z, dz: _sum_to_shape_xla(
       xla_rules.jnp().where((x == 0) & (y >= 0), 0, dz * z * xla_rules.jnp().log(x)), y.shape)))

def _compare_onnx(kind):
    """broadcast_<comparison> / broadcast_logical_<and|or|xor>: int8 1 where true."""
    return lambda c: _compare_onnx_node(c, kind, c.input("x"), c.input("y"), c.output("z"))


# comparisons and logical ops: int8 output (1 true, 0 false), NoGrad
for _name, _fn in _LOGICAL.items():
    _type = f"broadcast_{'logical_' + _name if _name in ('and', 'or', 'xor') else _name}"
    op(_type, inputs=["x", "y"], outputs=["z"], infer=functools.partial(_binary_infer, out_dtype=_dt.int8),
       kernel=lambda k, f=_fn: (lambda x, y: f(x, y).to(torch.int8)), no_grad=True, xla=_logical_xla(_name),
       onnx=_compare_onnx(_name), sbp=_sbp.elementwise())


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
   kernel=lambda k: torch.mul, grad=_multiply_grad, onnx=onnx_rules.same("Mul"), xla=_same_xla("multiply"),
   amp="gray", sbp=_sbp.elementwise(p_each=("x", "y")))


def _same_shape_infer(out="z", float_only=False):
    def infer(ctx):
        same_shape(ctx, "x", "y")
        dtype = same_dtype(ctx, "x", "y")
        if float_only:
            float_input(ctx, "x")
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

    def backward_xla(k):
        want_x, want_y = k.has_output("dx"), k.has_output("dy")
        jnp = xla_rules.jnp()
        x_wins_xla = jnp.greater_equal if kind == "maximum" else jnp.less_equal

        def backward(dz, x, y):
            mask = x_wins_xla(x, y)
            return jnp.where(mask, dz, 0) if want_x else None, jnp.where(mask, 0, dz) if want_y else None
        return backward

    def backward_infer(ctx):
        same_shape(ctx, "dz", "x", "y")
        d = ctx.input("dz")
        for a in ("dx", "dy"):
            ctx.set_output(a, d.shape, d.dtype)

    op(f"elementwise_{kind}", inputs=["x", "y"], outputs=["z"], infer=_same_shape_infer(),
       kernel=lambda k: fwd, grad=grad, onnx=onnx_rules.same("Max" if kind == "maximum" else "Min"),
       xla=_same_xla(kind), sbp=_sbp.elementwise())
    def backward_onnx(c):
        d = c.input_desc("dz")
        mask = c.node("GreaterOrEqual" if kind == "maximum" else "LessOrEqual", [c.input("x"), c.input("y")])
        for a, zero_if in (("dx", False), ("dy", True)):
            if c.output(a) is not None:
                onnx_rules.where_zero(c, mask, c.input("dz"), d, c.output(a), zero_if=zero_if)

    op(f"elementwise_{kind}_backward", inputs=["dz", "x", "y"], outputs=["dx?", "dy?"],
       infer=backward_infer, kernel=backward_kernel, xla=backward_xla, onnx=backward_onnx,
       sbp=_sbp.elementwise(p_each=("dz",)))


_elementwise_extremum("maximum")
_elementwise_extremum("minimum")


def _binary_grad_onnx(fn, out):
    """A ``(x, y, dz) -> out`` grad op's converter: ``fn(c, x, y, dz, desc)`` copied to ``out``."""
    return lambda c: c.node("Identity", [fn(c, c.input("x"), c.input("y"), c.input("dz"), c.input_desc("x"))],
                            [c.output(out)])


def binary_family(name, fwd, dx_fn, dy_fn, xla=None, onnx=None, grad_onnx=None):
    """Register ``name`` (x, y -> z, same shapes, float) and ``name_x_grad``/``name_y_grad``
    (x, y, dz -> dx / dy), OneFlow's wiring (``oneflow/user/ops/elementwise_maximum_minimum_ops.cpp``).
    ``xla`` names (:func:`~graphfront.ops.xla_rules.jnp_fn`) or is the jax function computing ``fwd`` (the grads' rules are its
    vector-Jacobian products); ``onnx(c, x, y, out, desc)`` writes its ONNX nodes (see
    :func:`_binary_onnx`); ``grad_onnx`` the pair ``(dx, dy)`` of ``fn(c, x, y, dz, d)``
    returning the grads' ONNX values."""
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
       kernel=lambda k: fwd, grad=grad, xla=xla and _same_xla(xla), onnx=onnx and _binary_onnx(onnx),
       sbp=_sbp.elementwise())
    op(f"{name}_x_grad", inputs=["x", "y", "dz"], outputs=["dx"], infer=grad_infer("x"),
       kernel=lambda k: dx_fn, xla=xla and vjp("x"), onnx=grad_onnx and _binary_grad_onnx(grad_onnx[0], "dx"),
       sbp=_sbp.elementwise(p_each=("dz",)))
    op(f"{name}_y_grad", inputs=["x", "y", "dz"], outputs=["dy"], infer=grad_infer("y"),
       kernel=lambda k: dy_fn, xla=xla and vjp("y"), onnx=grad_onnx and _binary_grad_onnx(grad_onnx[1], "dy"),
       sbp=_sbp.elementwise(p_each=("dz",)))


def _xdivy(x, y):
    return torch.where(x == 0, _zero(x), x / y)


def _xlogy(x, y):
    return torch.where(x == 0, _zero(x), x * torch.log(y))


def _zeros_like_onnx(c, x, y, dz, d):
    return c.const(np.zeros(c.input_desc("dz").shape, dtype=onnx_rules.np_dtype(c.input_desc("dz"))))


binary_family("pow", torch.pow, _pow_x_grad, lambda x, y, dz: _pow_y_grad(x, y, torch.pow(x, y), dz), xla="power",
              onnx=_power_onnx, grad_onnx=(_pow_x_grad_onnx, lambda c, x, y, dz, d: _pow_y_grad_onnx(
                  c, x, y, c.node("Pow", [x, y]), dz, d)))


def _atan2_onnx(c, x, y, out, d):
    """atan2(x, y), the angle of the point (y, x): atan(x / y) moved by +-pi when y < 0,
    +-pi/2 (0 at the origin) when y == 0."""
    zero = const_as(c, 0, d)
    base = c.node("Atan", [c.node("Div", [x, y])])
    # y < 0: + pi where x >= 0, - pi where x < 0
    shift = c.node("Where", [c.node("Less", [x, zero]), const_as(c, -np.pi, d), const_as(c, np.pi, d)])
    left = c.node("Add", [base, shift])
    on_axis = c.node("Mul", [c.node("Sign", [x]), const_as(c, np.pi / 2, d)])
    y_neg, y_zero = c.node("Less", [y, zero]), c.node("Equal", [y, zero])
    c.node("Where", [y_zero, on_axis, c.node("Where", [y_neg, left, base])], [out])


def _norm_sq(c, x, y):
    return c.node("Add", [c.node("Mul", [x, x]), c.node("Mul", [y, y])])


binary_family("atan2", torch.atan2,
              lambda x, y, dz: dz * y / (x * x + y * y),
              lambda x, y, dz: -dz * x / (x * x + y * y), xla="arctan2", onnx=_atan2_onnx,
              grad_onnx=(lambda c, x, y, dz, d: c.node("Div", [c.node("Mul", [dz, y]), _norm_sq(c, x, y)]),
                         lambda c, x, y, dz, d: c.node("Div", [c.node("Mul", [c.node("Neg", [dz]), x]),
                                                               _norm_sq(c, x, y)])))
# floor(x / y): piecewise constant, zero gradients
binary_family("floordiv", lambda x, y: torch.div(x, y, rounding_mode="floor"),
              lambda x, y, dz: torch.zeros_like(dz), lambda x, y, dz: torch.zeros_like(dz), onnx=_floor_div_onnx,
              xla="floor_divide", grad_onnx=(_zeros_like_onnx, _zeros_like_onnx))


def _where_x_zero_xla(fn):
    """``0 where x == 0, else fn(x, y)`` over jax arrays, with ``y`` replaced by 1 where x == 0
    so that the gradients there are 0 (as the kernels'), not 0 * inf."""
    def f(x, y):
        jnp = xla_rules.jnp()
        zero = x == 0
        return jnp.where(zero, 0, fn(x, jnp.where(zero, 1, y))).astype(x.dtype)
    return f


def _where_x_zero_onnx(fn):
    """The xdivy / xlogy grads: 0 where x == 0, else ``fn(c, x, y, dz, d)``."""
    return lambda c, x, y, dz, d: onnx_rules.where_zero(c, c.node("Equal", [x, const_as(c, 0, d)]),
                                                        fn(c, x, y, dz, d), d)


def _xdivy_onnx(c, x, y, out, d):
    zero = const_as(c, 0, d)
    c.node("Where", [c.node("Equal", [x, zero]), zero, c.node("Div", [x, y])], [out])


# x / y, defined as 0 where x == 0 (TensorFlow's xdivy)
binary_family("xdivy", _xdivy,
              lambda x, y, dz: torch.where(x == 0, _zero(dz), dz / y),
              lambda x, y, dz: torch.where(x == 0, _zero(dz), -dz * x / (y * y)), onnx=_xdivy_onnx,
              grad_onnx=(_where_x_zero_onnx(lambda c, x, y, dz, d: c.node("Div", [dz, y])),
                         _where_x_zero_onnx(lambda c, x, y, dz, d: c.node("Div", [
                             c.node("Mul", [c.node("Neg", [dz]), x]), c.node("Mul", [y, y])]))),
              xla=_where_x_zero_xla(lambda x, y: x / y))


def _xlogy_onnx(c, x, y, out, d):
    zero = const_as(c, 0, d)
    c.node("Where", [c.node("Equal", [x, zero]), zero, c.node("Mul", [x, c.node("Log", [y])])], [out])


# x * log(y), defined as 0 where x == 0 (TensorFlow's xlogy)
binary_family("xlogy", _xlogy,
              lambda x, y, dz: torch.where(x == 0, _zero(dz), dz * torch.log(y)),
              lambda x, y, dz: torch.where(x == 0, _zero(dz), dz * x / y), onnx=_xlogy_onnx,
              grad_onnx=(_where_x_zero_onnx(lambda c, x, y, dz, d: c.node("Mul", [dz, c.node("Log", [y])])),
                         _where_x_zero_onnx(lambda c, x, y, dz, d: c.node("Div", [c.node("Mul", [dz, x]), y]))),
              xla=_where_x_zero_xla(lambda x, y: x * xla_rules.jnp().log(y)))


# ----------------------------------------------------------------- unary math family

def vjp_kernel(fwd):
    """Kernel factory of a ``*_grad`` op computing ``dx = dy * d fwd(x) / dx`` with torch autograd."""
    def make(k):
        return lambda x, dy: vjp(fwd, x, dy)
    return make


def _vjp_xla(name):
    """``<op>_grad`` rule (x, dy -> dx): the vector-Jacobian product of the named forward
    function, as the torch kernels' ``vjp_kernel`` uses torch autograd."""
    def make(k):
        import jax
        fwd = xla_rules.jnp_fn(name)

        def grad(x, dy):
            return jax.vjp(fwd, x)[1](dy)[0]
        return grad
    return make


def unary_family(name, fwd, grad_fn=None, differentiable=True, float_only=True, onnx=None, xla=None, amp=None,
                 grad_onnx=None):
    """Register ``name`` (x -> y) and, if differentiable, ``name_grad`` (x, dy -> dx).

    ``grad_fn(x, dy)`` is the explicit derivative; without it the grad op's kernel
    uses torch autograd on ``fwd`` (OneFlow's wiring: grad op ``<op>_grad`` with the
    forward input ``x`` and ``dy``, ``oneflow/user/ops/math_unary_elementwise_op.cpp``).
    ``onnx`` names the ONNX operator computing ``fwd``, or is the op's ONNX converter, if there is one;
    ``xla`` the jax function computing it (see :func:`graphfront.ops.xla_rules.jnp_fn`; the
    grad op's rule is its vector-Jacobian product); ``amp`` the forward op's AMP list;
    ``grad_onnx`` the grad op's converter (see :func:`onnx_rules.grad`).
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
           xla=xla and _same_xla(xla), amp=amp)
        op(f"{name}_grad", inputs=["x", "dy"], outputs=["dx"], infer=like("x"), sbp=_sbp.elementwise(p_each=("dy",)),
           kernel=(lambda k: grad_fn) if grad_fn else vjp_kernel(fwd), xla=xla and _vjp_xla(xla), onnx=grad_onnx)
    else:
        op(name, inputs=["x"], outputs=["y"], infer=infer, kernel=lambda k: fwd, no_grad=True, sbp=_sbp.elementwise(),
           onnx=convert, xla=xla and _same_xla(xla), amp=amp)


def _zero_grad(x, dy):
    """Gradient of a piecewise-constant function (ceil, floor, rint, round, sign)."""
    return torch.zeros_like(dy)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _reciprocal_no_nan(x):
    return torch.where(x == 0, _zero(x), torch.reciprocal(x))


# ONNX compositions of the unary ops without an ONNX operator of their own:
# ``fn(c, x, out, desc)`` (see ``onnx_rules.unary``).
def _rsqrt_onnx(c, x, out, d):
    c.node("Reciprocal", [c.node("Sqrt", [x])], [out])


def _square_onnx(c, x, out, d):
    c.node("Mul", [x, x], [out])


def _erfc_onnx(c, x, out, d):
    c.node("Sub", [const_as(c, 1, d), c.node("Erf", [x])], [out])


def _expm1_onnx(c, x, out, d):
    c.node("Sub", [c.node("Exp", [x]), const_as(c, 1, d)], [out])


def _log1p_onnx(c, x, out, d):
    c.node("Log", [c.node("Add", [x, const_as(c, 1, d)])], [out])


def _log2_onnx(c, x, out, d):
    c.node("Div", [c.node("Log", [x]), const_as(c, np.log(2.0), d)], [out])


def _log_sigmoid_onnx(c, x, out, d):
    """log(sigmoid(x)) = -softplus(-x)."""
    c.node("Neg", [c.node("Softplus", [c.node("Neg", [x])])], [out])


def _reciprocal_no_nan_node(c, x, d, out=None):
    return onnx_rules.where_zero(c, c.node("Equal", [x, const_as(c, 0, d)]), c.node("Reciprocal", [x]), d, out)


def _reciprocal_no_nan_onnx(c, x, out, d):
    _reciprocal_no_nan_node(c, x, d, out)


# ONNX forms of the grad kernels: ``fn(c, x, dy, out, desc)`` (see ``onnx_rules.grad``), in
# the kernels' order of operations.
def _rsqrt_node(c, x):
    return c.node("Reciprocal", [c.node("Sqrt", [x])])


def _x_sq(c, x):
    return c.node("Mul", [x, x])


def _times(factor):
    """dy * factor(c, x, d)."""
    return onnx_rules.grad(lambda c, x, dy, out, d: onnx_rules.mul(c, dy, factor(c, x, d), out=out))


def _divided(divisor):
    """dy / divisor(c, x, d)."""
    return onnx_rules.grad(lambda c, x, dy, out, d: c.node("Div", [dy, divisor(c, x, d)], [out]))


def _neg_times(factor):
    """-dy * factor(c, x, d)."""
    return onnx_rules.grad(lambda c, x, dy, out, d: onnx_rules.mul(c, c.node("Neg", [dy]), factor(c, x, d), out=out))


def _one_minus_x_sq(c, x, d):
    return c.node("Sub", [const_as(c, 1, d), _x_sq(c, x)])


def _erf_grad_onnx(sign):
    def fn(c, x, dy, out, d):
        dy = c.node("Neg", [dy]) if sign < 0 else dy
        e = c.node("Exp", [c.node("Mul", [c.node("Neg", [x]), x])])
        onnx_rules.mul(c, dy, const_as(c, _TWO_OVER_SQRT_PI, d), e, out=out)
    return onnx_rules.grad(fn)


def _rsqrt_grad_onnx(c, x, dy, out, d):
    r = _rsqrt_node(c, x)
    onnx_rules.mul(c, dy, const_as(c, -0.5, d), onnx_rules.mul(c, r, r, r), out=out)


def _tanh_grad_onnx(c, x, dy, out, d):
    t = c.node("Tanh", [x])
    c.node("Mul", [dy, c.node("Sub", [const_as(c, 1, d), c.node("Mul", [t, t])])], [out])


def _sigmoid_grad_onnx(c, y, dy, out, d):
    """dy * y * (1 - y) of the sigmoid ``y``."""
    onnx_rules.mul(c, dy, y, c.node("Sub", [const_as(c, 1, d), y]), out=out)


_ZERO_GRAD_ONNX = onnx_rules.zeros_output()


unary_family("negative", torch.neg, lambda x, dy: -dy, float_only=False, onnx="Neg", xla="negative",
             grad_onnx=onnx_rules.grad(lambda c, x, dy, out, d: c.node("Neg", [dy], [out])))
unary_family("exp", torch.exp, lambda x, dy: dy * torch.exp(x), onnx="Exp", xla="exp",
             grad_onnx=_times(lambda c, x, d: c.node("Exp", [x])))
unary_family("log", torch.log, lambda x, dy: dy / x, onnx="Log", xla="log",
             grad_onnx=_divided(lambda c, x, d: x))
unary_family("sqrt", torch.sqrt, lambda x, dy: dy * 0.5 * torch.rsqrt(x), onnx="Sqrt", xla="sqrt", amp="gray",
             grad_onnx=onnx_rules.grad(lambda c, x, dy, out, d: onnx_rules.mul(
                 c, dy, const_as(c, 0.5, d), _rsqrt_node(c, x), out=out)))
unary_family("rsqrt", torch.rsqrt, lambda x, dy: dy * -0.5 * torch.rsqrt(x) ** 3, onnx=onnx_rules.unary(_rsqrt_onnx),
             xla="lax.rsqrt",
             grad_onnx=onnx_rules.grad(_rsqrt_grad_onnx))
unary_family("square", torch.square, lambda x, dy: dy * 2 * x, onnx=onnx_rules.unary(_square_onnx), xla="square",
             grad_onnx=onnx_rules.grad(lambda c, x, dy, out, d: onnx_rules.mul(c, dy, const_as(c, 2, d), x, out=out)))
unary_family("abs", torch.abs, lambda x, dy: dy * torch.sign(x), float_only=False, onnx="Abs", xla="abs",
             grad_onnx=_times(lambda c, x, d: c.node("Sign", [x])))
unary_family("tanh", torch.tanh, lambda x, dy: dy * (1 - torch.tanh(x) ** 2), onnx="Tanh", xla="tanh", amp="gray",
             grad_onnx=onnx_rules.grad(_tanh_grad_onnx))
unary_family("sigmoid_v2", torch.sigmoid, lambda x, dy: dy * torch.sigmoid(x) * (1 - torch.sigmoid(x)), onnx="Sigmoid",
             xla="nn.sigmoid",
             grad_onnx=onnx_rules.grad(lambda c, x, dy, out, d: _sigmoid_grad_onnx(c, c.node("Sigmoid", [x]), dy, out, d)))
unary_family("reciprocal", torch.reciprocal, lambda x, dy: -dy / (x * x), onnx="Reciprocal", xla="reciprocal",
             grad_onnx=onnx_rules.grad(lambda c, x, dy, out, d: c.node("Div", [c.node("Neg", [dy]), _x_sq(c, x)], [out])))
unary_family("acos", torch.acos, lambda x, dy: -dy * torch.rsqrt(1 - x * x), onnx="Acos", xla="arccos",
             grad_onnx=_neg_times(lambda c, x, d: _rsqrt_node(c, _one_minus_x_sq(c, x, d))))
unary_family("acosh", torch.acosh, lambda x, dy: dy * torch.rsqrt(x * x - 1), onnx="Acosh", xla="arccosh",
             grad_onnx=_times(lambda c, x, d: _rsqrt_node(c, c.node("Sub", [_x_sq(c, x), const_as(c, 1, d)]))))
unary_family("asin", torch.asin, lambda x, dy: dy * torch.rsqrt(1 - x * x), onnx="Asin", xla="arcsin",
             grad_onnx=_times(lambda c, x, d: _rsqrt_node(c, _one_minus_x_sq(c, x, d))))
unary_family("asinh", torch.asinh, lambda x, dy: dy * torch.rsqrt(x * x + 1), onnx="Asinh", xla="arcsinh",
             grad_onnx=_times(lambda c, x, d: _rsqrt_node(c, c.node("Add", [_x_sq(c, x), const_as(c, 1, d)]))))
unary_family("atan", torch.atan, lambda x, dy: dy / (1 + x * x), onnx="Atan", xla="arctan",
             grad_onnx=_divided(lambda c, x, d: c.node("Add", [const_as(c, 1, d), _x_sq(c, x)])))
unary_family("atanh", torch.atanh, lambda x, dy: dy / (1 - x * x), onnx="Atanh", xla="arctanh",
             grad_onnx=_divided(_one_minus_x_sq))
unary_family("ceil", torch.ceil, _zero_grad, onnx="Ceil", xla="ceil",
             grad_onnx=_ZERO_GRAD_ONNX)
unary_family("cos", torch.cos, lambda x, dy: -dy * torch.sin(x), onnx="Cos", xla="cos",
             grad_onnx=_neg_times(lambda c, x, d: c.node("Sin", [x])))
unary_family("cosh", torch.cosh, lambda x, dy: dy * torch.sinh(x), onnx="Cosh", xla="cosh",
             grad_onnx=_times(lambda c, x, d: c.node("Sinh", [x])))
unary_family("erf", torch.erf, lambda x, dy: dy * _TWO_OVER_SQRT_PI * torch.exp(-x * x), onnx="Erf", xla="lax.erf",
             grad_onnx=_erf_grad_onnx(1))
unary_family("erfc", torch.erfc, lambda x, dy: -dy * _TWO_OVER_SQRT_PI * torch.exp(-x * x),
             onnx=onnx_rules.unary(_erfc_onnx), xla="lax.erfc",
             grad_onnx=_erf_grad_onnx(-1))
unary_family("expm1", torch.expm1, lambda x, dy: dy * torch.exp(x), onnx=onnx_rules.unary(_expm1_onnx), xla="expm1",
             grad_onnx=_times(lambda c, x, d: c.node("Exp", [x])))
unary_family("floor", torch.floor, _zero_grad, onnx="Floor", xla="floor",
             grad_onnx=_ZERO_GRAD_ONNX)
unary_family("lgamma", torch.lgamma, lambda x, dy: dy * torch.digamma(x), xla="lax.lgamma")
unary_family("log1p", torch.log1p, lambda x, dy: dy / (1 + x), onnx=onnx_rules.unary(_log1p_onnx), xla="log1p",
             grad_onnx=_divided(lambda c, x, d: c.node("Add", [const_as(c, 1, d), x])))
unary_family("log2", torch.log2, lambda x, dy: dy / (x * math.log(2.0)), onnx=onnx_rules.unary(_log2_onnx),
             xla="log2",
             grad_onnx=_divided(lambda c, x, d: c.node("Mul", [x, const_as(c, math.log(2.0), d)])))
unary_family("log_sigmoid", F.logsigmoid, lambda x, dy: dy * torch.sigmoid(-x),
             onnx=onnx_rules.unary(_log_sigmoid_onnx), xla="nn.log_sigmoid",
             grad_onnx=_times(lambda c, x, d: c.node("Sigmoid", [c.node("Neg", [x])])))
unary_family("reciprocal_no_nan", _reciprocal_no_nan, lambda x, dy: -dy * _reciprocal_no_nan(x * x),
             onnx=onnx_rules.unary(_reciprocal_no_nan_onnx),
             xla=lambda x: _where_x_zero_xla(lambda x, safe: 1 / safe)(x, x),
             grad_onnx=_neg_times(lambda c, x, d: _reciprocal_no_nan_node(c, _x_sq(c, x), d)))
unary_family("rint", torch.round, _zero_grad, onnx="Round", xla="round",
             grad_onnx=_ZERO_GRAD_ONNX)  # round half to even
unary_family("round", torch.round, _zero_grad, onnx="Round", xla="round",
             grad_onnx=_ZERO_GRAD_ONNX)  # round half to even (nearbyint)
unary_family("sign", torch.sign, _zero_grad, onnx="Sign", xla="sign",
             grad_onnx=_ZERO_GRAD_ONNX)
unary_family("sin", torch.sin, lambda x, dy: dy * torch.cos(x), onnx="Sin", xla="sin",
             grad_onnx=_times(lambda c, x, d: c.node("Cos", [x])))
unary_family("sinh", torch.sinh, lambda x, dy: dy * torch.cosh(x), onnx="Sinh", xla="sinh",
             grad_onnx=_times(lambda c, x, d: c.node("Cosh", [x])))
unary_family("softplus", F.softplus, lambda x, dy: dy * torch.sigmoid(x), onnx="Softplus", xla="nn.softplus",
             grad_onnx=_times(lambda c, x, d: c.node("Sigmoid", [x])))  # log(1 + exp(x))
unary_family("tan", torch.tan, lambda x, dy: dy / torch.cos(x) ** 2, onnx="Tan", xla="tan",
             grad_onnx=_divided(lambda c, x, d: _x_sq(c, c.node("Cos", [x]))))


# sigmoid (in -> out) with grad sigmoid_grad (y = out, dy -> dx)

def _y_dy_infer(ctx):
    y, dy = ctx.input("y"), ctx.input("dy")
    ctx.check(y.shape == dy.shape, f"input 'dy' expected shape {y.shape}, received {dy.shape}")
    same_dtype(ctx, "y", "dy")
    ctx.set_output("dx", y.shape, y.dtype)


def _float_like(arg):
    def infer(ctx):
        d = float_input(ctx, arg)
        for out in ctx.output_names():
            ctx.set_output(out, d.shape, d.dtype)
    return infer


op("sigmoid", inputs=["in"], outputs=["out"], infer=_float_like("in"), kernel=lambda k: torch.sigmoid,
   onnx=onnx_rules.same("Sigmoid"), xla=_same_xla("nn.sigmoid"),
   grad=lambda g: g.set_grad("in", g.emit("sigmoid_grad", {"y": g.output("out"), "dy": g.dout("out")})), amp="gray",
   sbp=_sbp.elementwise())
op("sigmoid_grad", inputs=["y", "dy"], outputs=["dx"], infer=_y_dy_infer,
   kernel=lambda k: (lambda y, dy: dy * y * (1 - y)), onnx=onnx_rules.grad(_sigmoid_grad_onnx, "y"),
   xla=lambda k: (lambda y, dy: dy * y * (1 - y)), sbp=_sbp.elementwise())  # (the same arithmetic on jax arrays)


# gelu (in -> out) with grad gelu_grad (x = in, dy -> dx): the exact erf form
# gelu(x) = x * Phi(x), gelu'(x) = Phi(x) + x * phi(x)

def _gelu_xla(k):
    import jax.nn
    return lambda x: jax.nn.gelu(x, approximate=False)


op("gelu", inputs=["in"], outputs=["out"], infer=_float_like("in"), kernel=lambda k: F.gelu,
   onnx=onnx_rules.unary(onnx_rules.gelu, "in", "out"), xla=_gelu_xla,
   grad=lambda g: g.set_grad("in", g.emit("gelu_grad", {"x": g.input("in"), "dy": g.dout("out")})), amp="gray",
   sbp=_sbp.elementwise())
op("gelu_grad", inputs=["x", "dy"], outputs=["dx"], infer=like("x"), kernel=lambda k: gelu_grad,
   xla=lambda k: xla_rules.gelu_grad, onnx=onnx_rules.grad(onnx_rules.gelu_grad), sbp=_sbp.elementwise())


# ----------------------------------------------------------------- clipping

CLIP_ATTRS = {
    "clip_by_scalar": {"floating_min": ("double", 0.0), "integral_min": ("int64", 0),
                       "floating_max": ("double", 0.0), "integral_max": ("int64", 0)},
    "clip_by_scalar_min": {"floating_min": ("double", 0.0), "integral_min": ("int64", 0)},
    "clip_by_scalar_max": {"floating_max": ("double", 0.0), "integral_max": ("int64", 0)},
}


def _clip_bounds(k, dtype):
    """(min, max) of a clip op for inputs of ``dtype``: floating_* for float dtypes, integral_*
    else, brought into the integer dtype's range (a bound beyond it clips nothing there)."""
    prefix = "floating_" if dtype.is_floating_point else "integral_"
    lo = k.attrs.get(prefix + "min")
    hi = k.attrs.get(prefix + "max")
    if not dtype.is_floating_point and dtype.torch is not torch.bool:
        info = torch.iinfo(dtype.torch)
        lo, hi = (None if b is None else min(max(b, info.min), info.max) for b in (lo, hi))
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


def _clip_xla(k):
    lo, hi = _clip_bounds(k, k.input("x").dtype)
    return lambda x: xla_rules.jnp().clip(x, lo, hi)


def _clip_grad_xla(k):
    lo, hi = _clip_bounds(k, k.input("x").dtype)

    def clip_grad(dy, x):
        keep = xla_rules.jnp().ones(x.shape, bool)
        if lo is not None:
            keep &= x >= lo
        if hi is not None:
            keep &= x <= hi
        return xla_rules.jnp().where(keep, dy, 0)
    return clip_grad


def _clip_onnx(c):
    """clip_by_scalar(_min/_max): bounds of the input's kind (floating_* or integral_*)."""
    d = c.input_desc("x")
    prefix = "floating_" if d.dtype.is_floating_point else "integral_"
    bounds = [const_as(c, c.attrs[prefix + b], d) if prefix + b in c.attrs else None for b in ("min", "max")]
    c.node("Clip", [c.input("x")] + bounds, [c.output("y")])


def _clip_grad_onnx(c):
    """dy where min <= x <= max (bounds of the input's kind), else 0."""
    x, d = c.input("x"), c.input_desc("x")
    lo, hi = _clip_bounds(c, d.dtype)
    keep = [c.node(cmp, [x, const_as(c, b, d)]) for cmp, b in (("GreaterOrEqual", lo), ("LessOrEqual", hi))
            if b is not None]
    keep = keep[0] if len(keep) == 1 else c.node("And", keep)
    onnx_rules.where_zero(c, keep, c.input("dy"), d, c.output("dx"), zero_if=False)


for _name, _attrs in CLIP_ATTRS.items():
    op(_name, inputs=["x"], outputs=["y"], attrs=_attrs, infer=like("x"), kernel=_clip_kernel, sbp=_sbp.elementwise(),
       onnx=_clip_onnx, xla=_clip_xla,
       grad=lambda g, t=_name: g.needs("x") and g.set_grad("x", g.emit(
           f"{t}_grad", {"dy": g.dout("y"), "x": g.input("x")}, g.attrs)))
    op(f"{_name}_grad", inputs=["dy", "x"], outputs=["dx"], attrs=_attrs, infer=like("x"),
       kernel=_clip_grad_kernel, sbp=_sbp.elementwise(p_each=("dy",)), xla=_clip_grad_xla, onnx=_clip_grad_onnx)


