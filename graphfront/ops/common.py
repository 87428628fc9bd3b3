"""Small helpers shared by op families: inference rules, broadcasting, grad wiring."""
from __future__ import annotations

import torch

from graphfront.framework.errors import OpCheckError


def vjp(fn, x, dy):
    """``dy`` pulled back through ``fn`` at ``x`` with torch autograd: the gradient of a
    kernel's input ``x`` for the gradient ``dy`` of its output ``fn(x)``."""
    with torch.enable_grad():
        xr = x.detach().requires_grad_(True)
        return torch.autograd.grad(fn(xr), xr, dy)[0]


def like(arg, dtype=None):
    """Infer every output with the shape, dynamic flag (and dtype, unless given) of input ``arg``."""
    def infer(ctx):
        d = ctx.input(arg)
        for out in ctx.output_names():
            ctx.set_output(out, d.shape, dtype or d.dtype, is_dynamic=d.is_dynamic)
    return infer


def float_input(ctx, arg):
    """The desc of input ``arg``, checked to have a floating dtype."""
    d = ctx.input(arg)
    ctx.check(d.dtype.is_floating_point, f"input '{arg}' expected a floating dtype, received {d.dtype.name}")
    return d


def integer_input(ctx, arg):
    """The desc of input ``arg``, checked to have an integer (index) dtype."""
    d = ctx.input(arg)
    ctx.check(d.dtype.is_integer, f"input '{arg}' expected an integer (index) dtype, received {d.dtype.name}")
    return d


def same_dtype(ctx, *args):
    """Check that the given inputs share one dtype; returns it."""
    descs = [(a, ctx.input(a)) for a in args if ctx.has_input(a)]
    first_arg, first = descs[0]
    for a, d in descs[1:]:
        ctx.check(d.dtype is first.dtype,
                  f"input '{a}' expected dtype {first.dtype.name} (as '{first_arg}'), received {d.dtype.name}")
    return first.dtype


def same_shape(ctx, *args):
    descs = [(a, ctx.input(a)) for a in args if ctx.has_input(a)]
    first_arg, first = descs[0]
    for a, d in descs[1:]:
        ctx.check(d.shape == first.shape,
                  f"input '{a}' expected shape {first.shape} (as '{first_arg}'), received {d.shape}")
    return first.shape


def broadcast_shape(a, b, what="inputs"):
    """Numpy broadcasting of two shapes; OpCheckError naming both when incompatible."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise OpCheckError(f"{what} shapes {tuple(a)} and {tuple(b)} cannot be broadcast together")
        out.append(0 if 0 in (x, y) else max(x, y))
    return tuple(out)


def norm_axis(axis, ndim, what="axis"):
    if not -ndim <= axis < max(ndim, 1):
        raise OpCheckError(f"{what} {axis} is out of range for a rank-{ndim} input")
    return axis % ndim if ndim else 0


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def reduce_to(g, grad_lbn, target_lbn, name):
    """Bring a broadcast-shaped gradient back to ``target_lbn``'s shape (OneFlow's rule).

    Nothing when shapes agree; ``reshape_like`` when they differ only by leading 1s;
    otherwise ``reduce_sum_like`` over the broadcast axes.
    """
    gshape = g.desc(grad_lbn).shape
    tshape = g.desc(target_lbn).shape
    if gshape == tshape:
        return grad_lbn
    offset = len(gshape) - len(tshape)
    if numel(gshape) == numel(tshape):  # same elements, e.g. leading 1s or () vs (1,)
        return g.emit("reshape_like", {"in": grad_lbn, "like": target_lbn}, name=f"{name}_reshape_like")
    axes = [i for i in range(len(gshape)) if i < offset or (tshape[i - offset] == 1 and gshape[i] != 1)]
    return g.emit("reduce_sum_like", {"x": grad_lbn, "like": target_lbn}, {"axis": axes},
                  name=f"{name}_reduce_sum_like")
