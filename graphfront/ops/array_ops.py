"""Array ops: reshape family (``shared/reference/user_ops.md`` §1.11)."""
from __future__ import annotations

from graphfront.ops.common import numel
from graphfront.ops.registry import op


def _reshape_infer(ctx):
    d = ctx.input("in")
    shape = list(ctx.attr("shape"))
    ctx.check(shape.count(-1) <= 1, f"attr 'shape' {tuple(shape)} may contain at most one -1")
    ctx.check(all(s >= -1 for s in shape), f"attr 'shape' {tuple(shape)} has a negative dim other than -1")
    if -1 in shape:
        rest = numel(s for s in shape if s != -1)
        ctx.check(rest > 0 and numel(d.shape) % rest == 0,
                  f"cannot reshape input of shape {d.shape} into {tuple(shape)}")
        shape[shape.index(-1)] = numel(d.shape) // rest
    ctx.check(numel(shape) == numel(d.shape),
              f"attr 'shape' {tuple(shape)} has {numel(shape)} elements, input 'in' of shape {d.shape} "
              f"has {numel(d.shape)}")
    ctx.set_output("out", shape, d.dtype)


def _reshape_back(g):
    g.set_grad("in", g.emit("reshape", {"in": g.dout("out")}, {"shape": g.desc(g.input("in")).shape}))


op("reshape", inputs=["in"], outputs=["out"], attrs={"shape": "shape"}, infer=_reshape_infer,
   kernel=lambda k: (lambda x, s=tuple(k.output("out").shape): x.reshape(s)), grad=_reshape_back, view=True)


def _reshape_like_infer(ctx):
    d, like_ = ctx.input("in"), ctx.input("like")
    ctx.check(numel(d.shape) == numel(like_.shape),
              f"input 'in' of shape {d.shape} cannot take the shape {like_.shape} of input 'like'")
    ctx.set_output("out", like_.shape, d.dtype)


op("reshape_like", inputs=["in", "like"], outputs=["out"], infer=_reshape_like_infer,
   kernel=lambda k: (lambda x, like_, s=tuple(k.input("like").shape): x.reshape(s)),
   grad=lambda g: g.needs("in") and g.set_grad(
       "in", g.emit("reshape_like", {"in": g.dout("out"), "like": g.input("in")})), view=True)


def _flatten_infer(ctx):
    d = ctx.input("in")
    n = len(d.shape)
    start, end = ctx.attr("start_dim"), ctx.attr("end_dim")
    ctx.check(start >= 0, f"attr 'start_dim' must be >= 0, received {start}")
    end = end + n if end < 0 else end
    ctx.check(start < max(n, 1) and start <= end < max(n, 1),
              f"attrs start_dim={ctx.attr('start_dim')}, end_dim={ctx.attr('end_dim')} are out of range "
              f"for a rank-{n} input")
    shape = d.shape[:start] + (numel(d.shape[start:end + 1]),) + d.shape[end + 1:]
    ctx.set_output("out", shape, d.dtype)


op("flatten", inputs=["in"], outputs=["out"], attrs={"start_dim": ("int32", 0), "end_dim": ("int32", -1)},
   infer=_flatten_infer,
   kernel=lambda k: (lambda x, s=tuple(k.output("out").shape): x.reshape(s)),
   grad=lambda g: g.set_grad("in", g.emit("reshape_like", {"in": g.dout("out"), "like": g.input("in")})),
   view=True)
