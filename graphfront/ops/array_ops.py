"""Array ops: reshape family, transpose, concat/split, slicing, padding, constant sources and
small helpers (gather and scatter are in :mod:`graphfront.ops.gather_ops`).

Op type, argument and attr names, attr types and grad wiring follow OneFlow v0.6.0
(``oneflow/user/ops/``: the reshape family, ``constant_op.cpp``, the gather / scatter /
index ops, padding and the other array ``*_op.cpp`` files).
Kernels are PyTorch's; where OneFlow leaves a behaviour open the docstring of the
family says what graphfront does.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from graphfront.framework.errors import OpRunError
from graphfront.ops.common import at_least_1d, fill_fits, integer_input, like, norm_axis, numel, same_dtype
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.onnx_rules import int64s, np_dtype
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

# ============================================================== shared helpers


def _reshape_kernel(out_arg="out"):
    """Kernel factory: reshape the sole input to the inferred shape of ``out_arg``."""
    def make(k):
        shape = tuple(k.output(out_arg).shape)
        return lambda x, *rest: x.reshape(shape)
    return make


def _grad_reshape_like(in_arg="in", out_arg="out"):
    """Grad maker: ``reshape_like`` of dy back to the forward input (``<op>_grad``)."""
    def grad(g):
        if g.needs(in_arg):
            g.set_grad(in_arg, g.emit("reshape_like", {"in": g.dout(out_arg), "like": g.input(in_arg)}))
    return grad


def _vjp(fwd):
    """``dx = vjp(fwd)(dy)`` for a forward that is linear in x; x is a zero tensor of ``x_shape``."""
    def grad(dy, x_shape):
        with torch.enable_grad():
            x = torch.zeros(x_shape, dtype=dy.dtype, device=dy.device, requires_grad=True)
            return torch.autograd.grad(fwd(x), x, dy)[0]
    return grad


def _partials(ctx):
    """Partial sums through an op linear in its input (a ``like`` input, read for its shape
    only, broadcast), and a partial ``like`` with the rest broadcast."""
    partial_like = [_sbp.signature(ctx, _sbp.B, like=_sbp.P)] if ctx.has("like") else []
    return [_sbp.signature(ctx, _sbp.P, like=_sbp.B)] + partial_like


def _split_or_partial(axes):
    """SBP rule of an op linear in its input that computes along some axes: every arg split
    on each axis of ``axes(ctx)`` (those it leaves whole), or :func:`_partials`."""
    return lambda ctx: _sbp.independent(axes)(ctx) + _partials(ctx)


def _axes_besides(arg, dims):
    """``axes`` of :func:`_split_or_partial`: the axes of ``arg`` not in ``dims(ctx)``."""
    def axes(ctx):
        n = ctx.ndim(arg)
        skip = {d % n for d in dims(ctx)}
        return [k for k in range(n) if k not in skip]
    return axes


# ============================================================== reshape family

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
    """``reshape`` back to the input's static shape; ``reshape_like`` for a dynamic input."""
    d = g.desc(g.input("in"))
    if d.is_dynamic:
        g.set_grad("in", g.emit("reshape_like", {"in": g.dout("out"), "like": g.input("in")}))
    else:
        g.set_grad("in", g.emit("reshape", {"in": g.dout("out")}, {"shape": d.shape}))


def _reshape_to_output_onnx(in_arg, out_arg):
    """Ops that only change the shape (static shapes): ``Reshape`` to the inferred output shape."""
    def convert(c):
        shape = c.const(np.array(c.output_desc(out_arg).shape, dtype=np.int64))
        c.node("Reshape", [c.input(in_arg), shape], [c.output(out_arg)])
    return convert


op("reshape", inputs=["in"], outputs=["out"], attrs={"shape": "shape"}, infer=_reshape_infer,
   kernel=_reshape_kernel(), grad=_reshape_back, view=True, sbp=_sbp.reshape, onnx=_reshape_to_output_onnx("in", "out"),
   xla=_reshape_kernel(), amp="clear", qat="transparent")  # (x.reshape(shape) is also jax.Array's method)


def _reshape_like_infer(ctx):
    d, like_ = ctx.input("in"), ctx.input("like")
    ctx.check(numel(d.shape) == numel(like_.shape),
              f"input 'in' of shape {d.shape} cannot take the shape {like_.shape} of input 'like'")
    ctx.set_output("out", like_.shape, d.dtype)


op("reshape_like", inputs=["in", "like"], outputs=["out"], infer=_reshape_like_infer,
   kernel=_reshape_kernel(), grad=_grad_reshape_like(), view=True, onnx=_reshape_to_output_onnx("in", "out"),
   xla=_reshape_kernel(), sbp=_sbp.reshape)


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
   infer=_flatten_infer, kernel=_reshape_kernel(), grad=_grad_reshape_like(), view=True,
   onnx=_reshape_to_output_onnx("in", "out"), xla=_reshape_kernel(), amp="clear", sbp=_sbp.reshape)


def _squeeze_infer(ctx):
    d = ctx.input("in")
    n = len(d.shape)
    axes = set()
    for a in ctx.attr("axes"):
        ctx.check(-n <= a < n, f"attr 'axes' entry {a} is out of range for input 'in' of shape {d.shape}")
        a %= n
        ctx.check(d.shape[a] == 1, f"attr 'axes' entry {a}: dim {a} of input 'in' {d.shape} is "
                                   f"{d.shape[a]}, only size-1 dims can be squeezed")
        axes.add(a)
    ctx.set_output("out", at_least_1d(s for i, s in enumerate(d.shape) if i not in axes), d.dtype)


op("squeeze", inputs=["in"], outputs=["out"], attrs={"axes": "list_int32"}, infer=_squeeze_infer,
   kernel=_reshape_kernel(), grad=_grad_reshape_like(), view=True, onnx=_reshape_to_output_onnx("in", "out"),
   xla=_reshape_kernel(), amp="clear", sbp=_sbp.reshape)


def _expand_dims_infer(ctx):
    d = ctx.input("in")
    n = len(d.shape)
    axis = ctx.attr("axis")
    ctx.check(-(n + 1) <= axis <= n, f"attr 'axis' {axis} is out of range [{-(n + 1)}, {n}] for input "
                                     f"'in' of shape {d.shape}")
    axis = axis + n + 1 if axis < 0 else axis
    ctx.set_output("out", d.shape[:axis] + (1,) + d.shape[axis:], d.dtype)


op("expand_dims", inputs=["in"], outputs=["out"], attrs={"axis": ("int32", 0)}, infer=_expand_dims_infer,
   kernel=_reshape_kernel(), grad=_grad_reshape_like(), view=True, onnx=_reshape_to_output_onnx("in", "out"),
   xla=_reshape_kernel(), amp="clear", sbp=_sbp.reshape)


# ============================================================== transpose

def _transpose_infer(ctx):
    d = ctx.input("input")
    perm = ctx.attr("perm")
    n = len(d.shape)
    ctx.check(sorted(perm) == list(range(n)),
              f"attr 'perm' {perm} must be a permutation of 0..{n - 1} (input 'input' has shape {d.shape})")
    ctx.set_output("output", tuple(d.shape[p] for p in perm), d.dtype)


def _transpose_grad(g):
    if g.needs("input"):
        perm = g.attr("perm")
        inverse = [0] * len(perm)
        for i, p in enumerate(perm):
            inverse[p] = i
        g.set_grad("input", g.emit("transpose", {"input": g.dout("output")}, {"perm": inverse}))


def _transpose_sbp(ctx):
    """A split of input axis ``perm[k]`` is a split of output axis ``k``; partial sums pass."""
    return [{"input": _sbp.split(a), "output": _sbp.split(k)} for k, a in enumerate(ctx.attr("perm"))] + \
        [{"input": _sbp.P, "output": _sbp.P}]


def _transpose_kernel(k):
    """A matrix's transpose, or a batch of matrices' (the last two axes swapped), is a view:
    GEMMs read it as it is. Any other permutation is written out contiguous once, as
    OneFlow's transpose kernel does (``oneflow/user/kernels/transpose_kernel.cpp`` at v0.6.0;
    the attention heads' ``[0, 2, 1, 3]``, say): its readers
    (batched GEMMs, reshapes) would otherwise each copy it, elementwise ones read it strided."""
    perm = tuple(k.attr("perm"))
    n = len(perm)
    if perm[:n - 2] == tuple(range(n - 2)):
        return lambda x: x.permute(perm)
    return lambda x: x.permute(perm).contiguous()


op("transpose", inputs=["input"], outputs=["output"], attrs={"perm": "list_int32"}, infer=_transpose_infer,
   kernel=_transpose_kernel, grad=_transpose_grad, view=True,
   sbp=_transpose_sbp,
   xla=lambda k: (lambda x, p=tuple(k.attr("perm")): x.transpose(p)),
   onnx=lambda c: c.node("Transpose", [c.input("input")], [c.output("output")], perm=list(c.attr("perm"))), amp="clear")


# ============================================================== concat / split_like

def _concat_infer(ctx):
    ins = ctx.inputs("in")
    first = ins[0]
    n = len(first.shape)
    ctx.check(n > 0, "input 'in_0' is rank 0; concat needs rank >= 1")
    axis = norm_axis(ctx.attr("axis"), n, "attr 'axis'")
    total = 0
    for i, d in enumerate(ins):
        ctx.check(d.dtype is first.dtype,
                  f"input 'in_{i}' expected dtype {first.dtype.name} (as 'in_0'), received {d.dtype.name}")
        ctx.check(len(d.shape) == n and all(a == b for j, (a, b) in enumerate(zip(d.shape, first.shape))
                                            if j != axis),
                  f"input 'in_{i}' of shape {d.shape} does not match input 'in_0' of shape {first.shape} "
                  f"outside axis {axis}")
        total += d.shape[axis]
    dynamic = any(d.is_dynamic for d in ins)
    if dynamic:
        # a dynamic input's static size is only a bound: OneFlow checks the static inputs' sum
        # here, the kernel the run-time size
        static = sum(d.shape[axis] for d in ins if not d.is_dynamic)
        max_dim = ctx.attr("max_dim_size")
        ctx.check(max_dim >= static, f"attr 'max_dim_size' {max_dim} is smaller than the static inputs' "
                                     f"concatenated size {static}")
        total = max_dim
    shape = first.shape[:axis] + (total,) + first.shape[axis + 1:]
    ctx.set_output("out", shape, first.dtype, is_dynamic=dynamic)


def _concat_kernel(k):
    axis = norm_axis(k.attr("axis"), len(k.input("in").shape))
    if not k.output("out").is_dynamic:
        return lambda xs: torch.cat(xs, dim=axis)
    max_dim = k.attr("max_dim_size")

    def bounded_cat(xs):
        out = torch.cat(xs, dim=axis)
        if out.shape[axis] > max_dim:
            raise OpRunError(f"op '{k.op_name}' (concat): the inputs concatenate to size {out.shape[axis]} "
                             f"on axis {axis}, more than attr 'max_dim_size' {max_dim}")
        return out
    return bounded_cat


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _concat_grad(g):
    ins = g.inputs("in")
    if not any(g.needs("in", i) for i in range(len(ins))):
        return
    outs = g.emit("split_like", {"in": g.dout("out"), "like": ins}, {"axis": g.attr("axis")},
                  outputs=["out"], num={"out": len(ins)})
    outs = _as_list(outs["out"] if isinstance(outs, dict) else outs)
    for i, lbn in enumerate(outs):
        if g.needs("in", i):
            g.set_grad("in", lbn, i)


def _concat_sbp(ctx):
    """Every blob split along one axis other than the concatenated one."""
    rank = ctx.ndim("out")
    axis = ctx.attr("axis") % rank
    return [{a: _sbp.split(k) for a in ctx.args} for k in range(rank) if k != axis]


op("concat", inputs=["in*"], outputs=["out"], attrs={"axis": ("int64", 0), "max_dim_size": ("int64", 0)},
   infer=_concat_infer, kernel=_concat_kernel, grad=_concat_grad, sbp=_concat_sbp,
   xla=lambda k: (lambda xs, axis=norm_axis(k.attr("axis"), len(k.input("in").shape)):
                  xla_rules.jnp().concatenate(xs, axis=axis)),
   onnx=lambda c: c.node("Concat", c.inputs("in"), [c.output("out")], axis=c.attr("axis")), amp="clear")


def _split_like_infer(ctx):
    x = ctx.input("in")
    likes = ctx.inputs("like")
    n = len(x.shape)
    axis = norm_axis(ctx.attr("axis"), n, "attr 'axis'")
    ctx.check(ctx.output_count("out") == len(likes),
              f"output 'out' needs one blob per 'like' input ({len(likes)}), received {ctx.output_count('out')}")
    total = 0
    for i, d in enumerate(likes):
        ctx.check(axis < len(d.shape) <= n and all(d.shape[j] == x.shape[j] for j in range(len(d.shape))
                                                    if j != axis),
                  f"input 'like_{i}' of shape {d.shape} does not match input 'in' of shape {x.shape} "
                  f"outside axis {axis}")
        total += 0 if d.is_dynamic else d.shape[axis]
        ctx.set_output("out", x.shape[:axis] + (d.shape[axis],) + x.shape[axis + 1:], x.dtype, i=i)
    if any(d.is_dynamic for d in likes):  # (a dynamic like's static size is only a bound)
        ctx.check(total <= x.shape[axis], f"the static 'like' inputs add up to {total} along axis {axis}, more "
                                          f"than input 'in' of shape {x.shape} has ({x.shape[axis]})")
    else:
        ctx.check(total == x.shape[axis], f"'like' inputs add up to {total} along axis {axis}, input 'in' of "
                                          f"shape {x.shape} has {x.shape[axis]}")


def _split_like_kernel(k):
    axis = norm_axis(k.attr("axis"), len(k.input("in").shape))
    sizes = [k.output("out", i).shape[axis] for i in range(k.output_count("out"))]
    if k.input("in").is_dynamic or any(k.input("like", i).is_dynamic for i in range(len(sizes))):
        # run-time sizes of the likes (the gradient of a concat of dynamic blobs)
        return lambda x, likes: list(torch.split(x, [like_.shape[axis] for like_ in likes], dim=axis))
    return lambda x, likes: list(torch.split(x, sizes, dim=axis))


def _split_like_grad(g):
    if not g.needs("in"):
        return
    parts = []
    for i, lbn in enumerate(g.outputs("out")):
        d = g.dout("out", i)
        if d is None:
            d = g.emit("zero_like", {"like": lbn}, name=f"{g.op_name}_zero_like_{i}")
        parts.append(d)
    axis = g.attr("axis")
    in_shape = g.desc(g.input("in")).shape
    g.set_grad("in", g.emit("concat", {"in": parts},
                            {"axis": axis, "max_dim_size": in_shape[norm_axis(axis, len(in_shape))]}))


def _split_like_onnx(c):
    axis = c.attr("axis") % len(c.input_desc("in").shape)
    outs = c.all_outputs()
    sizes = [c.output_desc("out", i).shape[axis] for i in range(len(outs))]
    c.node("Split", [c.input("in"), c.const(int64s(sizes))], outs, axis=axis)


def _split_like_xla(k):
    axis = norm_axis(k.attr("axis"), len(k.input("in").shape))
    bounds = np.cumsum([k.output("out", i).shape[axis] for i in range(k.output_count("out"))])[:-1].tolist()
    return lambda x, likes: list(xla_rules.jnp().split(x, bounds, axis=axis))


def _split_like_sbp(ctx):
    """Every blob split on an axis other than ``axis`` (a like lacking that axis broadcast);
    partial sums pass (the likes, read for their shapes only, broadcast)."""
    axis, S = ctx.attr("axis") % ctx.ndim("in"), _sbp.split
    ranks = [ctx.ndim("like", i) for i in range(ctx.count("like"))]
    return [{"in": S(k), "out": S(k), **{f"like_{i}": S(k) if k < r else _sbp.B for i, r in enumerate(ranks)}}
            for k in range(ctx.ndim("in")) if k != axis] + _partials(ctx)


op("split_like", inputs=["in", "like*"], outputs=["out*"], attrs={"axis": ("int64", 0)},
   infer=_split_like_infer, kernel=_split_like_kernel, grad=_split_like_grad, view=True, onnx=_split_like_onnx,
   xla=_split_like_xla, sbp=_split_like_sbp)


# ============================================================== slice family
#
# start/stop/step have one entry per dim and Python's slice semantics: negative start
# and stop count from the end, both are clipped to the dim, a negative step walks
# backwards (stop = -(dim + 1) means "through index 0").

SLICE_ATTRS = {"start": "list_int64", "stop": "list_int64", "step": "list_int64"}


def slice_ranges(shape, start, stop, step):
    """One Python ``range`` of selected indices per dim (shared by the slice ops)."""
    return [range(*slice(b, e, s).indices(n)) for n, b, e, s in zip(shape, start, stop, step)]


def _whole_axes(shape_of):
    """``axes`` of :func:`_split_or_partial` for the slice ops: those the slice takes whole
    (start 0, stop past the end, step 1: OneFlow's IsFullSlice) of the shape ``shape_of(ctx)``."""
    def axes(ctx):
        shape = shape_of(ctx)
        ranges = slice_ranges(shape, ctx.attr("start"), ctx.attr("stop"), ctx.attr("step"))
        return [d for d, (n, r, s) in enumerate(zip(shape, ranges, ctx.attr("step"))) if s == 1 and r == range(n)]
    return axes


def _check_slice_attrs(ctx, shape, what):
    start, stop, step = ctx.attr("start"), ctx.attr("stop"), ctx.attr("step")
    n = len(shape)
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        ctx.check(len(v) == n, f"attr '{name}' needs {n} entries (one per dim of {what} {shape}), received {v}")
    ctx.check(all(s != 0 for s in step), f"attr 'step' {step} must not contain 0")
    return slice_ranges(shape, start, stop, step)


def _positive_index(ranges):
    """Basic-slicing index over the selected elements, and the dims a negative step flips."""
    index, flips = [], []
    for d, r in enumerate(ranges):
        if r.step > 0 or len(r) == 0:
            index.append(slice(r.start, r.stop, r.step) if r.step > 0 else slice(0, 0))
        else:
            index.append(slice(r[-1], r[0] + 1, -r.step))
            flips.append(d)
    return tuple(index), flips


def _slice_fn(ranges):
    index, flips = _positive_index(ranges)
    if flips:
        return lambda x: x[index].flip(flips)
    return lambda x: x[index]


def _slice_write_fn(ranges):
    """``(dst, src) -> None`` writing ``src`` into the sliced region of ``dst`` in place."""
    index, flips = _positive_index(ranges)
    if flips:
        def write(dst, src):
            dst[index] = src.flip(flips)
    else:
        def write(dst, src):
            dst[index] = src
    return write


def _slice_infer(ctx):
    x = ctx.input("x")
    ranges = _check_slice_attrs(ctx, x.shape, "input 'x'")
    ctx.set_output("y", tuple(len(r) for r in ranges), x.dtype)


def _kernel_ranges(k, shape):
    return slice_ranges(shape, k.attr("start"), k.attr("stop"), k.attr("step"))


def _slice_kernel(k):
    if not k.input("x").is_dynamic:
        return _slice_fn(_kernel_ranges(k, k.input("x").shape))
    # a dynamic blob: start/stop resolve against the shape it has at run time (as
    # OneFlow's RegulateSliceStart/Stop in oneflow/user/kernels/slice_util.h)
    return lambda x: _slice_fn(_kernel_ranges(k, x.shape))(x)


def _slice_grad(g):
    if not g.needs("x"):
        return
    attrs = {a: g.attr(a) for a in SLICE_ATTRS}
    x = g.input("x")
    if g.desc(x).is_dynamic:  # dx has the run-time shape of x: dy written into zeros like x
        zeros = g.emit("zero_like", {"like": x}, name=f"{g.op_name}_grad_zero_like")
        g.set_grad("x", g.emit("slice_update", {"x": zeros, "update": g.dout("y")}, attrs,
                               name=f"{g.op_name}_grad"))
    else:
        g.set_grad("x", g.emit("slice_grad", {"dy": g.dout("y")}, {"like_shape": g.desc(x).shape, **attrs}))


_INT64_MIN_onnx = np.iinfo(np.int64).min


def _slice_onnx(c, x, out, starts, ends, steps, axes):
    c.node("Slice", [x, c.const(int64s(starts)), c.const(int64s(ends)), c.const(int64s(axes)), c.const(int64s(steps))],
           [out])


def _ranges_slice_onnx(c, x, out, ranges):
    """``Slice`` selecting one Python ``range`` per dim (the ranges a slice op resolved)."""
    starts, ends, steps = [], [], []
    for r in ranges:
        if len(r) == 0:
            starts.append(0), ends.append(0), steps.append(1)
        else:
            starts.append(r.start), steps.append(r.step)
            ends.append(r.stop if r.stop >= 0 else _INT64_MIN_onnx)   # a negative step through index 0
    _slice_onnx(c, x, out, starts, ends, steps, range(len(ranges)))


def _slice_op_onnx(c):
    """slice: start/stop/step per dim with Python's semantics, resolved to ranges as the kernel does."""
    ranges = slice_ranges(c.input_desc("x").shape, c.attr("start"), c.attr("stop"), c.attr("step"))
    _ranges_slice_onnx(c, c.input("x"), c.output("y"), ranges)


def _ranges_index(ranges):
    """The numpy index (``np.ix_``) selecting one Python ``range`` per dim: for jax arrays."""
    return np.ix_(*[np.asarray(list(r), dtype=np.int64) for r in ranges])


def _slice_xla(k):
    index = _ranges_index(_kernel_ranges(k, k.input("x").shape))
    return lambda x: x[index]


op("slice", inputs=["x"], outputs=["y"], attrs=SLICE_ATTRS, infer=_slice_infer,
   kernel=_slice_kernel, grad=_slice_grad, view=True, onnx=_slice_op_onnx, xla=_slice_xla, amp="clear",
   sbp=_split_or_partial(_whole_axes(lambda ctx: ctx.shape("x"))))


def _slice_grad_infer(ctx):
    dy = ctx.input("dy")
    shape = ctx.attr("like_shape")
    ranges = _check_slice_attrs(ctx, shape, "attr 'like_shape'")
    expected = tuple(len(r) for r in ranges)
    ctx.check(dy.shape == expected, f"input 'dy' expected shape {expected} (the slice of like_shape "
                                    f"{shape}), received {dy.shape}")
    ctx.set_output("dx", shape, dy.dtype)


def _slice_grad_kernel(k):
    shape = tuple(k.output("dx").shape)  # (this device's part: like_shape cut along the whole axes)
    write = _slice_write_fn(_kernel_ranges(k, shape))

    def slice_grad(dy):
        dx = torch.zeros(shape, dtype=dy.dtype, device=dy.device)
        write(dx, dy)
        return dx
    return slice_grad


def _scatter_into_zeros_onnx(c, coords, update, out):
    """Zeros of the output's shape with ``update`` written at the constant ``coords`` (ScatterND)."""
    desc = c.output_desc("dx")
    zeros = c.const(np.zeros(desc.shape, dtype=np_dtype(desc)))
    c.node("ScatterND", [zeros, c.const(coords), update], [out])


def _range_coords(ranges):
    """The coordinates (shape ``lens + (ndim,)``) of the elements one Python ``range`` per dim selects."""
    return np.stack(np.meshgrid(*[np.array(r, dtype=np.int64) for r in ranges], indexing="ij"), axis=-1)


def _slice_grad_onnx(c):
    """dy written into zeros of like_shape at the slice's elements."""
    shape = tuple(c.attr("like_shape"))
    ranges = slice_ranges(shape, c.attr("start"), c.attr("stop"), c.attr("step"))
    _scatter_into_zeros_onnx(c, _range_coords(ranges), c.input("dy"), c.output("dx"))


op("slice_grad", inputs=["dy"], outputs=["dx"], attrs={"like_shape": "shape", **SLICE_ATTRS},
   infer=_slice_grad_infer, kernel=_slice_grad_kernel, onnx=_slice_grad_onnx,
   sbp=_split_or_partial(_whole_axes(lambda ctx: ctx.attr("like_shape"))),
   xla=lambda k: (lambda dy, shape=tuple(k.output("dx").shape): xla_rules.jnp().zeros(shape, dy.dtype).at[
       _ranges_index(_kernel_ranges(k, shape))].set(dy)))


def _slice_update_infer(ctx):
    x, u = ctx.input("x"), ctx.input("update")
    ranges = _check_slice_attrs(ctx, x.shape, "input 'x'")
    expected = tuple(len(r) for r in ranges)
    ctx.check(u.shape == expected, f"input 'update' expected shape {expected} (the slice of input 'x' "
                                   f"{x.shape}), received {u.shape}")
    same_dtype(ctx, "x", "update")
    ctx.set_output("y", x.shape, x.dtype)


def _slice_update_kernel(k):
    dynamic = k.input("x").is_dynamic
    write = _slice_write_fn(_kernel_ranges(k, k.input("x").shape))

    def slice_update(x, update):
        y = x.clone()
        (_slice_write_fn(_kernel_ranges(k, x.shape)) if dynamic else write)(y, update)
        return y
    return slice_update


def _slice_update_grad(g):
    attrs = {a: g.attr(a) for a in SLICE_ATTRS}
    dy = g.dout("y")
    if g.needs("update"):
        g.set_grad("update", g.emit("slice", {"x": dy}, attrs, name=f"{g.op_name}_update_grad"))
    if g.needs("x"):
        zeros = g.emit("zero_like", {"like": g.input("update")}, name=f"{g.op_name}_zero_like")
        g.set_grad("x", g.emit("slice_update", {"x": dy, "update": zeros}, attrs, name=f"{g.op_name}_x_grad"))


def _slice_update_onnx(c):
    """slice_update: ``x`` with the slice (as ``slice`` resolves it) replaced by ``update``:
    ScatterND at the constant coordinates of the slice's elements."""
    ranges = slice_ranges(c.input_desc("x").shape, c.attr("start"), c.attr("stop"), c.attr("step"))
    c.node("ScatterND", [c.input("x"), c.const(_range_coords(ranges)), c.input("update")], [c.output("y")])


op("slice_update", inputs=["x", "update"], outputs=["y"], attrs=SLICE_ATTRS, infer=_slice_update_infer,
   kernel=_slice_update_kernel, grad=_slice_update_grad, onnx=_slice_update_onnx,
   sbp=_split_or_partial(_whole_axes(lambda ctx: ctx.shape("x"))),
   xla=lambda k: (lambda x, update, index=_ranges_index(_kernel_ranges(k, k.input("x").shape)):
                  x.at[index].set(update)))


# ============================================================== narrow (+ narrow_grad)

NARROW_ATTRS = {"dim": ("int64", 0), "start": ("int64", 0), "length": ("int64", 0)}


def _narrow_range(ctx, shape, what):
    n = len(shape)
    dim = norm_axis(ctx.attr("dim"), n, "attr 'dim'")
    start, length = ctx.attr("start"), ctx.attr("length")
    size = shape[dim]
    ctx.check(-size <= start < size or (start == 0 and size == 0),
              f"attr 'start' {start} is out of range for dim {dim} of {what} {shape}")
    start %= max(size, 1)
    ctx.check(0 <= length <= size - start,
              f"attr 'length' {length} must be in [0, {size - start}] (dim {dim} of {what} {shape} from start "
              f"{start})")
    return dim, start, length


def _narrow_infer(ctx):
    x = ctx.input("in")
    dim, start, length = _narrow_range(ctx, x.shape, "input 'in'")
    ctx.set_output("out", x.shape[:dim] + (length,) + x.shape[dim + 1:], x.dtype)


def _narrow_kernel(k):
    shape = k.input("in").shape
    dim = k.attr("dim") % len(shape)
    start = k.attr("start") % max(shape[dim], 1)
    return lambda x: x.narrow(dim, start, k.attr("length"))


def _narrow_index(k, shape):
    dim = k.attr("dim") % len(shape)
    start = k.attr("start") % max(shape[dim], 1)
    return (slice(None),) * dim + (slice(start, start + k.attr("length")),)


def _narrow_xla(k):
    index = _narrow_index(k, k.input("in").shape)
    return lambda x: x[index]


def _narrow_onnx(c):
    shape = c.input_desc("in").shape
    dim = c.attr("dim") % len(shape)
    start = c.attr("start") % max(shape[dim], 1)
    _slice_onnx(c, c.input("in"), c.output("out"), [start], [start + c.attr("length")], [1], [dim])


op("narrow", inputs=["in"], outputs=["out"], attrs=NARROW_ATTRS, infer=_narrow_infer, kernel=_narrow_kernel,
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit(
       "narrow_grad", {"dy": g.dout("out"), "like": g.input("in")}, {a: g.attr(a) for a in NARROW_ATTRS})),
   view=True, onnx=_narrow_onnx, xla=_narrow_xla,
   sbp=_split_or_partial(_axes_besides("in", lambda ctx: [ctx.attr("dim")])))


def _narrow_grad_infer(ctx):
    dy, like_ = ctx.input("dy"), ctx.input("like")
    dim, start, length = _narrow_range(ctx, like_.shape, "input 'like'")
    expected = like_.shape[:dim] + (length,) + like_.shape[dim + 1:]
    ctx.check(dy.shape == expected, f"input 'dy' expected shape {expected}, received {dy.shape}")
    ctx.set_output("dx", like_.shape, dy.dtype)


def _narrow_grad_kernel(k):
    shape = k.input("like").shape
    dim = k.attr("dim") % len(shape)
    start = k.attr("start") % max(shape[dim], 1)

    def narrow_grad(dy, like_):
        dx = torch.zeros(shape, dtype=dy.dtype, device=dy.device)
        dx.narrow(dim, start, k.attr("length")).copy_(dy)
        return dx
    return narrow_grad


def _narrow_grad_onnx(c):
    """dy padded with zeros to the shape of ``like`` along dim."""
    shape = c.input_desc("like").shape
    dim = c.attr("dim") % len(shape)
    start = c.attr("start") % max(shape[dim], 1)
    before, after = [0] * len(shape), [0] * len(shape)
    before[dim], after[dim] = start, shape[dim] - start - c.attr("length")
    _pad_node_onnx(c, c.input("dy"), c.output("dx"), before, after, value=0, desc=c.input_desc("dy"))


op("narrow_grad", inputs=["dy", "like"], outputs=["dx"], attrs=NARROW_ATTRS, infer=_narrow_grad_infer,
   kernel=_narrow_grad_kernel, onnx=_narrow_grad_onnx,
   sbp=_split_or_partial(_axes_besides("like", lambda ctx: [ctx.attr("dim")])),
   xla=lambda k: (lambda dy, like_, index=_narrow_index(k, k.input("like").shape):
                  xla_rules.jnp().zeros(like_.shape, dy.dtype).at[index].set(dy)))


# ============================================================== expand (+ expand_grad)
#
# ``logical_in_shape`` is the input shape, ``logical_expand_shape`` the output shape
# (torch.expand rules: new leading dims, size-1 dims broadcast; -1 keeps a dim).

EXPAND_ATTRS = {"logical_in_shape": "list_int32", "logical_expand_shape": "list_int32"}


def _expand_shape(ctx, in_shape, expand, what):
    offset = len(expand) - len(in_shape)
    ctx.check(offset >= 0, f"attr 'logical_expand_shape' {expand} has fewer dims than {what} {in_shape}")
    out = []
    for i, e in enumerate(expand):
        if i < offset:
            ctx.check(e >= 1, f"attr 'logical_expand_shape' {expand}: new leading dim {i} must be >= 1")
            out.append(e)
            continue
        s = in_shape[i - offset]
        if e == -1:
            e = s
        ctx.check(e == s or s == 1, f"attr 'logical_expand_shape' {expand}: dim {i} of size {s} in {what} "
                                    f"{in_shape} can only expand from 1")
        out.append(e)
    return tuple(out)


def _expand_infer(ctx):
    x = ctx.input("in")
    logical_in = tuple(ctx.attr("logical_in_shape"))
    ctx.check(logical_in == x.shape, f"attr 'logical_in_shape' {logical_in} differs from the shape {x.shape} of "
                                     f"input 'in'")
    ctx.set_output("out", _expand_shape(ctx, x.shape, ctx.attr("logical_expand_shape"), "input 'in'"), x.dtype)


def _expand_kernel(k):
    out = tuple(k.output("out").shape)
    if not k.input("in").is_dynamic:
        return lambda x: x.expand(out)
    # a dynamic input keeps its run-time size in the dims that are not broadcast
    logical_in = tuple(k.attr("logical_in_shape"))
    offset = len(out) - len(logical_in)
    kept = [i for i in range(offset, len(out)) if logical_in[i - offset] == out[i]]

    def expand(x):
        size = list(out)
        for i in kept:
            size[i] = x.shape[i - offset]
        return x.expand(size)
    return expand


def _expand_kept(ctx, big, small):
    """Per axis of the expanded blob ``big``: the axis of ``small`` it keeps, or None (a new
    axis or one expanded from 1)."""
    ys, xs = ctx.shape(big), ctx.shape(small)
    off = len(ys) - len(xs)
    return [k - off if k >= off and xs[k - off] == ys[k] else None for k in range(len(ys))]


def _expand_sbp(ctx):
    """``in`` split on an axis it keeps gives ``out`` split there; ``in`` broadcast gives ``out``
    split on an axis it expands (each device expands to its part); partial sums pass."""
    S = _sbp.split
    return [{"in": _sbp.B if j is None else S(j), "out": S(k)} for k, j in enumerate(_expand_kept(ctx, "out", "in"))] \
        + _partials(ctx)


def _expand_grad_sbp(ctx):
    """dy (``in``) split on a kept axis gives dx split there, on an expanded axis (summed) a
    partial sum; partial sums pass."""
    S = _sbp.split
    return [{"in": S(k), "out": _sbp.P if j is None else S(j)} for k, j in enumerate(_expand_kept(ctx, "in", "out"))] \
        + _partials(ctx)


op("expand", inputs=["in"], outputs=["out"], attrs=EXPAND_ATTRS, infer=_expand_infer, kernel=_expand_kernel,
   onnx=onnx_rules.expand_to_output("in", "out"),
   xla=lambda k: (lambda x, out=tuple(k.output("out").shape): xla_rules.jnp().broadcast_to(x, out)),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit(
       "expand_grad", {"in": g.dout("out")},
       {"logical_out_shape": list(g.desc(g.input("in")).shape),
        "logical_expand_shape": g.attr("logical_expand_shape")})),
   view=True, sbp=_expand_sbp)


def _expand_grad_infer(ctx):
    dy = ctx.input("in")
    out_shape = tuple(ctx.attr("logical_out_shape"))
    expected = _expand_shape(ctx, out_shape, ctx.attr("logical_expand_shape"), "attr 'logical_out_shape'")
    ctx.check(dy.shape == expected, f"input 'in' expected shape {expected}, received {dy.shape}")
    ctx.set_output("out", out_shape, dy.dtype)


def _expand_grad_xla(k):
    out_shape = tuple(k.attr("logical_out_shape"))
    in_shape = k.input("in").shape
    offset = len(in_shape) - len(out_shape)
    axes = tuple(i for i in range(len(in_shape)) if i < offset or (out_shape[i - offset] == 1 and in_shape[i] != 1))
    local = tuple(k.output("out").shape)  # (this device's part)
    return lambda dy: (dy.sum(axis=axes, keepdims=True) if axes else dy).reshape(local)


def _expand_grad_kernel(k):
    out_shape = tuple(k.attr("logical_out_shape"))
    in_shape = k.input("in").shape
    offset = len(in_shape) - len(out_shape)
    axes = tuple(i for i in range(len(in_shape)) if i < offset or (out_shape[i - offset] == 1 and in_shape[i] != 1))
    if k.input("in").is_dynamic:  # the kept dims have their run-time sizes
        def expand_grad(dy):
            summed = dy.sum(dim=axes, keepdim=True) if axes else dy
            return summed.reshape(summed.shape[offset:])
        return expand_grad
    local = tuple(k.output("out").shape)  # (this device's part)
    if not axes:
        return lambda dy: dy.reshape(local)
    return lambda dy: dy.sum(dim=axes, keepdim=True).reshape(local)


op("expand_grad", inputs=["in"], outputs=["out"],
   attrs={"logical_out_shape": "list_int32", "logical_expand_shape": "list_int32"},
   infer=_expand_grad_infer, kernel=_expand_grad_kernel, xla=_expand_grad_xla, sbp=_expand_grad_sbp,
   onnx=lambda c: onnx_rules.sum_to_shape(c, c.input("in"), c.input_desc("in").shape, c.attr("logical_out_shape"),
                                          c.output("out")))


# ============================================================== padding

def _pad_value(dtype, floating, integral):
    return floating if dtype.is_floating_point else integral


PAD_ATTRS = {"padding_before": "list_int64", "padding_after": "list_int64",
             "floating_constant_value": ("double", 0.0), "integral_constant_value": ("int64", 0)}


def _pad_lists(ctx, n, what):
    before, after = ctx.attr("padding_before"), ctx.attr("padding_after")
    for name, v in (("padding_before", before), ("padding_after", after)):
        ctx.check(len(v) == n, f"attr '{name}' needs {n} entries (one per dim of {what}), received {v}")
        ctx.check(all(p >= 0 for p in v), f"attr '{name}' {v} must not be negative")
    return before, after


def _torch_pads(before, after):
    """Per-dim (before, after) lists -> F.pad's flat list, last dim first."""
    return [p for b, a in zip(reversed(before), reversed(after)) for p in (b, a)]


def _pad_sbp(pads, linear):
    """Padding ops: every arg split on each axis left unpadded (``pads(ctx)``: the per-axis
    ``(before, after)`` lists), as OneFlow's pad; partial sums pass where ``linear(ctx)`` (a
    crop, a reflection or replication, a pad with zeros)."""
    def rule(ctx):
        before, after = pads(ctx)
        return [_sbp.signature(ctx, _sbp.split(k)) for k, (b, a) in enumerate(zip(before, after)) if b == a == 0] + \
            ([_sbp.signature(ctx, _sbp.P)] if linear(ctx) else [])
    return rule


def _zero_fill(floating, integral):
    """``linear`` of :func:`_pad_sbp` for a constant pad: the pad value (attr ``floating`` or
    ``integral`` by the input's dtype) is zero."""
    return lambda ctx: _pad_value(ctx.dtype(ctx.input_args[0]), ctx.attr(floating), ctx.attr(integral)) == 0


def _pad_lists_of(ctx):
    """``pads`` of :func:`_pad_sbp` for pad / pad_grad."""
    return ctx.attr("padding_before"), ctx.attr("padding_after")


def _pad_infer(ctx):
    x = ctx.input("x")
    before, after = _pad_lists(ctx, len(x.shape), f"input 'x' {x.shape}")
    fill_fits(ctx, ctx.attr("integral_constant_value"), x.dtype, "attr 'integral_constant_value'")
    ctx.set_output("y", tuple(s + b + a for s, b, a in zip(x.shape, before, after)), x.dtype)


def _pad_kernel(k):
    pads = _torch_pads(k.attr("padding_before"), k.attr("padding_after"))
    value = _pad_value(k.input("x").dtype, k.attr("floating_constant_value"), k.attr("integral_constant_value"))
    return lambda x: F.pad(x, pads, value=value)


def _pad_attrs(g):
    return {a: g.attr(a) for a in PAD_ATTRS}


def _pad_node_onnx(c, x, out, before, after, mode="constant", value=None, desc=None):
    """``Pad`` of ``x`` (of ``desc``, default input x's) by per-dim ``before`` / ``after``."""
    ins = [x, c.const(int64s(list(before) + list(after)))]
    if value is not None:
        ins.append(c.const(np.array(value, dtype=np_dtype(desc or c.input_desc("x")))))
    c.node("Pad", ins, [out], mode=mode)


def _pad_value_onnx(c, floating, integral):
    return c.attr(floating) if c.input_desc("x").dtype.is_floating_point else c.attr(integral)


def _pad_onnx(c):
    """pad: per-dim padding_before / padding_after, constant value of the input's kind."""
    _pad_node_onnx(c, c.input("x"), c.output("y"), c.attr("padding_before"), c.attr("padding_after"),
              value=_pad_value_onnx(c, "floating_constant_value", "integral_constant_value"))


def _pad_xla(k):
    widths = list(zip(k.attr("padding_before"), k.attr("padding_after")))
    value = _pad_value(k.input("x").dtype, k.attr("floating_constant_value"), k.attr("integral_constant_value"))
    return lambda x: xla_rules.jnp().pad(x, widths, constant_values=value)


op("pad", inputs=["x"], outputs=["y"], attrs=PAD_ATTRS, infer=_pad_infer, kernel=_pad_kernel, onnx=_pad_onnx,
   xla=_pad_xla, sbp=_pad_sbp(_pad_lists_of, _zero_fill("floating_constant_value", "integral_constant_value")),
   grad=lambda g: g.needs("x") and g.set_grad("x", g.emit("pad_grad", {"dy": g.dout("y")}, _pad_attrs(g))), amp="clear")


def _pad_grad_infer(ctx):
    dy = ctx.input("dy")
    before, after = _pad_lists(ctx, len(dy.shape), f"input 'dy' {dy.shape}")
    shape = tuple(s - b - a for s, b, a in zip(dy.shape, before, after))
    ctx.check(all(s >= 0 for s in shape), f"paddings {before}/{after} are larger than input 'dy' {dy.shape}")
    ctx.set_output("dx", shape, dy.dtype)


def _pad_grad_kernel(k):
    index = tuple(slice(b, s - a) for s, b, a in zip(k.input("dy").shape, k.attr("padding_before"),
                                                     k.attr("padding_after")))
    return lambda dy: dy[index]


def _crop_onnx(c, before, after):
    """dy without ``before`` / ``after`` elements per dim (a ``Slice``)."""
    shape = c.input_desc("dy").shape
    _slice_onnx(c, c.input("dy"), c.output("dx"), list(before), [s - a for s, a in zip(shape, after)],
                [1] * len(shape), range(len(shape)))


op("pad_grad", inputs=["dy"], outputs=["dx"], attrs=PAD_ATTRS, infer=_pad_grad_infer, kernel=_pad_grad_kernel,
   onnx=lambda c: _crop_onnx(c, c.attr("padding_before"), c.attr("padding_after")),
   xla=_pad_grad_kernel,  # (basic slicing: the same on jax arrays)
   sbp=_pad_sbp(_pad_lists_of, lambda ctx: True),
   grad=lambda g: g.needs("dy") and g.set_grad("dy", g.emit("pad", {"x": g.dout("dx")}, _pad_attrs(g))),
   view=True)


# ---------------------------------------------------------------- same_padding (OneFlow's same_padding_op.cpp)
#
# The zero padding that makes a window op of ``kernel_size`` / ``strides`` / ``dilation_rate``
# give ceil(size / stride) outputs per spatial dim: total = max((out - 1) * stride +
# (kernel - 1) * dilation + 1 - size, 0), the odd element before ("same_lower") or after
# ("same_upper"). Computed from the run-time shape, so it pads dynamic blobs right.

SAME_PADDING_ATTRS = {"padding": "string", "data_format": "string", "kernel_size": "list_int32",
                      "strides": "list_int32", "dilation_rate": "list_int32"}


def same_padding_pairs(attr, shape):
    """Per-dim (before, after) zero pads of a blob of ``shape`` (``attr``: the op's attr getter)."""
    first = attr("data_format") == "channels_first"
    spatial = shape[2:] if first else shape[1:-1]
    pairs = []
    for size, k, s, d in zip(spatial, attr("kernel_size"), attr("strides"), attr("dilation_rate")):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        before = (total + 1) // 2 if attr("padding") == "same_lower" else total // 2
        pairs.append((before, total - before))
    return [(0, 0), (0, 0)] + pairs if first else [(0, 0)] + pairs + [(0, 0)]


def _same_padding_check(ctx, x):
    n = len(ctx.attr("kernel_size"))
    ctx.check(ctx.attr("padding") in ("same_lower", "same_upper"),
              f"attr 'padding' expects 'same_lower' or 'same_upper', received {ctx.attr('padding')!r}")
    ctx.check(ctx.attr("data_format") in ("channels_first", "channels_last"),
              f"attr 'data_format' expects 'channels_first' or 'channels_last', received {ctx.attr('data_format')!r}")
    ctx.check(n >= 1 and len(x.shape) == n + 2,
              f"input of shape {x.shape} expects rank len(kernel_size) + 2 = {n + 2}")
    ctx.check(len(ctx.attr("strides")) == n and len(ctx.attr("dilation_rate")) == n,
              f"attrs 'strides' {ctx.attr('strides')} and 'dilation_rate' {ctx.attr('dilation_rate')} expect "
              f"{n} entries, as 'kernel_size'")
    ctx.check(all(v >= 1 for v in list(ctx.attr("kernel_size")) + list(ctx.attr("strides"))
                  + list(ctx.attr("dilation_rate"))), "attrs 'kernel_size', 'strides', 'dilation_rate' expect values >= 1")


def _same_padding_infer(ctx):
    x = ctx.input("x")
    _same_padding_check(ctx, x)
    pairs = same_padding_pairs(ctx.attr, x.shape)
    ctx.set_output("y", tuple(s + b + a for s, (b, a) in zip(x.shape, pairs)), x.dtype, is_dynamic=x.is_dynamic)


def _same_padding_kernel(k):
    def same_padding(x):
        pairs = same_padding_pairs(k.attr, x.shape)
        return F.pad(x, _torch_pads([b for b, _ in pairs], [a for _, a in pairs]))
    return same_padding


def _same_padding_xla(k):
    return lambda x: xla_rules.jnp().pad(x, same_padding_pairs(k.attr, x.shape))


def _same_padding_sbp(linear_in):
    """Split on the batch or the channel axis, which are not padded (OneFlow's rule); the zero
    padding is linear in ``linear_in``, so a partial sum passes through it."""
    def rule(ctx):
        axes = (0, 1) if ctx.attr("data_format") == "channels_first" else (0, ctx.ndim(ctx.args[0]) - 1)
        return [_sbp.signature(ctx, _sbp.split(k)) for k in axes] + [_sbp.partial_in(ctx, linear_in)]
    return rule


def _same_padding_onnx(c):
    pairs = same_padding_pairs(c.attr, c.input_desc("x").shape)
    _pad_node_onnx(c, c.input("x"), c.output("y"), [b for b, _ in pairs], [a for _, a in pairs])


def _same_padding_grad_onnx(c):
    pairs = same_padding_pairs(c.attr, c.input_desc("x_like").shape)
    _crop_onnx(c, [b for b, _ in pairs], [a for _, a in pairs])


def _same_padding_grad_infer(ctx):
    x, dy = ctx.input("x_like"), ctx.input("dy")
    _same_padding_check(ctx, x)
    pairs = same_padding_pairs(ctx.attr, x.shape)
    ctx.check(tuple(dy.shape) == tuple(s + b + a for s, (b, a) in zip(x.shape, pairs)),
              f"input 'dy' of shape {dy.shape} is not input 'x_like' {x.shape} padded")
    ctx.set_output("dx", x.shape, dy.dtype, is_dynamic=x.is_dynamic)


def _same_padding_grad_kernel(k):
    def same_padding_grad(x_like, dy):
        pairs = same_padding_pairs(k.attr, x_like.shape)
        return dy[tuple(slice(b, b + s) for s, (b, _) in zip(x_like.shape, pairs))]
    return same_padding_grad


op("same_padding", inputs=["x"], outputs=["y"], attrs=SAME_PADDING_ATTRS, infer=_same_padding_infer,
   kernel=_same_padding_kernel, xla=_same_padding_xla, onnx=_same_padding_onnx, sbp=_same_padding_sbp("x"), amp="clear",
   grad=lambda g: g.needs("x") and g.set_grad("x", g.emit("same_padding_grad", {"x_like": g.input("x"),
                                                                                "dy": g.dout("y")},
                                                             {a: g.attr(a) for a in SAME_PADDING_ATTRS})))
op("same_padding_grad", inputs=["x_like", "dy"], outputs=["dx"], attrs=SAME_PADDING_ATTRS,
   infer=_same_padding_grad_infer, kernel=_same_padding_grad_kernel, xla=_same_padding_grad_kernel,
   onnx=_same_padding_grad_onnx, sbp=_same_padding_sbp("dy"), view=True)


# ---------------------------------------------------------------- constant/reflection/replication padNd
#
# ``padding`` follows torch.nn.functional.pad: [left, right] for 1d (N, C, W);
# [left, right, top, bottom] for 2d (N, C, H, W); + [front, back] for 3d.

def _padnd_check(ctx, x_arg, n):
    x = ctx.input(x_arg)
    ctx.check(len(x.shape) == n + 2, f"input '{x_arg}' expected rank {n + 2} (N, C + {n} spatial dims), "
                                     f"received shape {x.shape}")
    padding = ctx.attr("padding")
    ctx.check(len(padding) == 2 * n and all(p >= 0 for p in padding),
              f"attr 'padding' needs {2 * n} non-negative entries, received {padding}")
    return x, padding


def _padded_shape(shape, padding, sign=1):
    shape = list(shape)
    for i in range(len(padding) // 2):
        shape[-1 - i] += sign * (padding[2 * i] + padding[2 * i + 1])
    return tuple(shape)


def _padnd_infer(n, mode):
    def infer(ctx):
        x, padding = _padnd_check(ctx, "x", n)
        for i in range(n):
            size = x.shape[-1 - i]
            lo, hi = padding[2 * i], padding[2 * i + 1]
            if mode == "reflect":
                ctx.check(lo < size and hi < size, f"attr 'padding' {padding}: reflection pads must be smaller "
                                                   f"than the padded dim ({size}) of input 'x' {x.shape}")
            elif mode == "replicate":
                ctx.check(size > 0 or lo + hi == 0, f"input 'x' {x.shape} has an empty dim to replicate")
        ctx.set_output("y", _padded_shape(x.shape, padding), x.dtype)
    return infer


def _padnd_grad_infer(n):
    def infer(ctx):
        dy, padding = _padnd_check(ctx, "dy", n)
        shape = _padded_shape(dy.shape, padding, -1)
        ctx.check(all(s >= 0 for s in shape), f"attr 'padding' {padding} is larger than input 'dy' {dy.shape}")
        ctx.set_output("dx", shape, dy.dtype)
    return infer


def _padnd_kernel(mode):
    def make(k):
        padding = list(k.attr("padding"))
        if mode == "constant":
            value = _pad_value(k.input("x").dtype, k.attr("floating_value"), k.attr("integral_value"))
            return lambda x: F.pad(x, padding, value=value)
        return lambda x: F.pad(x, padding, mode=mode)
    return make


def _padnd_grad_kernel(mode):
    def make(k):
        padding = list(k.attr("padding"))
        if mode == "constant":
            crop = [-p for p in padding]
            return lambda dy: F.pad(dy, crop)
        shape = tuple(k.output("dx").shape)
        vjp = _vjp(lambda x: F.pad(x, padding, mode=mode))
        return lambda dy: vjp(dy, shape)
    return make


CONSTANT_PAD_ATTRS = {"padding": "list_int64", "floating_value": ("double", 0.0), "integral_value": ("int64", 0)}


def _padnd_xla_fn(k, mode, rank, value=0):
    """``x -> jnp.pad(x)`` for attr ``padding`` (torch's order) on an input of ``rank``; torch's
    "reflect" is numpy's, its "replicate" numpy's "edge"."""
    p = list(k.attr("padding"))
    n = len(p) // 2
    widths = [(0, 0)] * (rank - n) + [(p[2 * (n - 1 - i)], p[2 * (n - 1 - i) + 1]) for i in range(n)]
    if mode == "constant":
        return lambda x: xla_rules.jnp().pad(x, widths, constant_values=value)
    return lambda x: xla_rules.jnp().pad(x, widths, mode={"reflect": "reflect", "replicate": "edge"}[mode])


def _padnd_xla(mode):
    def make(k):
        x = k.input("x")
        value = _pad_value(x.dtype, k.attr("floating_value"), k.attr("integral_value")) if mode == "constant" else 0
        return _padnd_xla_fn(k, mode, len(x.shape), value)
    return make


def _padnd_grad_xla(mode):
    def make(k):
        pad = _padnd_xla_fn(k, mode, len(k.input("dy").shape))
        shape = tuple(k.output("dx").shape)

        def padnd_grad(dy):  # (the pad is linear: its vjp at zeros)
            import jax
            return jax.vjp(pad, xla_rules.jnp().zeros(shape, dy.dtype))[1](dy)[0]
        return padnd_grad
    return make


def _padnd_before_after(c, n):
    """Per-dim (before, after) lists of attr ``padding`` (torch.nn.functional.pad's order: last dim first,
    (before, after) pairs) for a rank-n blob."""
    p = list(c.attr("padding"))
    k = len(p) // 2
    return ([0] * (n - k) + [p[2 * (k - 1 - i)] for i in range(k)],
            [0] * (n - k) + [p[2 * (k - 1 - i) + 1] for i in range(k)])


def _padnd_onnx(mode):
    """constant_padNd / reflection_pad2d / replication_pad2d: ONNX Pad modes ``constant`` /
    ``reflect`` / ``edge``."""
    def convert(c):
        before, after = _padnd_before_after(c, len(c.input_desc("x").shape))
        value = _pad_value_onnx(c, "floating_value", "integral_value") if mode == "constant" else None
        _pad_node_onnx(c, c.input("x"), c.output("y"), before, after, mode=mode, value=value)
    return convert


def _pad_source(o, lo, size, mode):
    """The input index that padded index ``o`` copies (reflect / replicate, ``lo`` elements padded before)."""
    p = o - lo
    if mode == "reflect":
        p = -p if p < 0 else p
        return 2 * (size - 1) - p if p >= size else p
    return min(max(p, 0), size - 1)


def _padnd_adjoint_onnx(mode):
    """reflection_pad2d_grad / replication_pad2d_grad: per padded dim, each input position sums the dy
    elements copied from it (Gathers at constant indices, in increasing output order; Where drops the
    missing terms), the dims one after the other."""
    def convert(c):
        dy, d = c.input("dy"), c.input_desc("dy")
        rank = len(d.shape)
        before, after = _padnd_before_after(c, rank)
        dims = [i for i in range(rank) if before[i] or after[i]]
        for i, axis in enumerate(dims):
            size = d.shape[axis] - before[axis] - after[axis]
            sources = [[o for o in range(d.shape[axis]) if _pad_source(o, before[axis], size, mode) == j]
                       for j in range(size)]
            total = None
            for k in range(max(len(s) for s in sources)):
                idx = np.array([s[k] if k < len(s) else 0 for s in sources], dtype=np.int64)
                term = c.node("Gather", [dy, c.const(idx)], axis=axis)
                valid = np.array([k < len(s) for s in sources])
                if not valid.all():
                    view = [1] * rank
                    view[axis] = size
                    term = c.node("Where", [c.const(valid.reshape(view)), term,
                                            c.const(np.zeros((), dtype=np_dtype(d)))])
                total = term if total is None else c.node("Add", [total, term])
            dy = c.node("Identity", [total], [c.output("dx")] if i == len(dims) - 1 else None)
        if not dims:
            c.node("Identity", [dy], [c.output("dx")])
    return convert


def _padnd_family(name, n, mode, attrs):
    pads = lambda ctx: _padnd_before_after(ctx, ctx.ndim(ctx.input_args[0]))  # noqa: E731
    linear = _zero_fill("floating_value", "integral_value") if mode == "constant" else (lambda ctx: True)
    op(name, inputs=["x"], outputs=["y"], attrs=attrs, infer=_padnd_infer(n, mode), kernel=_padnd_kernel(mode),
       sbp=_pad_sbp(pads, linear),
       onnx=_padnd_onnx({"reflect": "reflect", "replicate": "edge"}.get(mode, mode)),
       xla=_padnd_xla(mode),
       grad=lambda g: g.needs("x") and g.set_grad("x", g.emit(
           f"{name}_grad", {"dy": g.dout("y")}, {a: g.attr(a) for a in attrs})))
    op(f"{name}_grad", inputs=["dy"], outputs=["dx"], attrs=attrs, infer=_padnd_grad_infer(n),
       sbp=_pad_sbp(pads, lambda ctx: True),
       kernel=_padnd_grad_kernel(mode), xla=_padnd_grad_xla(mode),
       onnx=(lambda c: _crop_onnx(c, *_padnd_before_after(c, len(c.input_desc("dy").shape)))) if mode == "constant"
       else _padnd_adjoint_onnx(mode))


for _n in (1, 2, 3):
    _padnd_family(f"constant_pad{_n}d", _n, "constant", CONSTANT_PAD_ATTRS)
_padnd_family("reflection_pad2d", 2, "reflect", {"padding": "list_int64"})
_padnd_family("replication_pad2d", 2, "replicate", {"padding": "list_int64"})


# ============================================================== roll / flip / diag

def _roll_infer(ctx):
    x = ctx.input("in")
    shifts, dims = ctx.attr("shifts"), ctx.attr("dims")
    if dims:
        ctx.check(len(shifts) == len(dims), f"attrs 'shifts' {shifts} and 'dims' {dims} need the same length")
        for d in dims:
            norm_axis(d, len(x.shape), "attr 'dims' entry")
    else:
        ctx.check(len(shifts) == 1, f"with empty 'dims', attr 'shifts' needs one entry (roll of the flattened "
                                    f"input), received {shifts}")
    ctx.set_output("out", x.shape, x.dtype)


def _roll_kernel(k):
    shifts, dims = tuple(k.attr("shifts")), tuple(k.attr("dims"))
    if not dims:
        return lambda x: torch.roll(x, shifts[0])
    return lambda x: torch.roll(x, shifts, dims)


def _roll_onnx(c):
    """roll: per dim, the last ``shift`` entries moved to the front (Slice + Concat); with no
    dims, the flattened input rolled and reshaped back."""
    d = c.input_desc("in")
    x, out = c.input("in"), c.output("out")
    shifts, dims = list(c.attr("shifts")), [a % len(d.shape) for a in c.attr("dims")]
    shape = list(d.shape)
    if not dims:
        x = c.node("Reshape", [x, c.const(int64s([-1]))])
        shape, dims = [int(np.prod(d.shape))], [0]
    for shift, dim in zip(shifts, dims):
        s = shift % shape[dim] if shape[dim] else 0
        if s:
            tail, head = c.tmp("tail"), c.tmp("head")
            _slice_onnx(c, x, tail, [shape[dim] - s], [shape[dim]], [1], [dim])
            _slice_onnx(c, x, head, [0], [shape[dim] - s], [1], [dim])
            x = c.node("Concat", [tail, head], axis=dim)
    if len(shape) != len(d.shape):
        x = c.node("Reshape", [x, c.const(int64s(d.shape))])
    c.node("Identity", [x], [out])


op("roll", inputs=["in"], outputs=["out"], attrs={"shifts": "list_int32", "dims": "list_int32"},
   infer=_roll_infer, kernel=_roll_kernel, onnx=_roll_onnx,  # (no dims: the flattened blob rolls, no split)
   sbp=_split_or_partial(_axes_besides("in", lambda ctx: ctx.attr("dims") or range(ctx.ndim("in")))),
   xla=lambda k: (lambda x, s=tuple(k.attr("shifts")), d=tuple(k.attr("dims")):
                  xla_rules.jnp().roll(x, s if d else s[0], d if d else None)),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit(
       "roll", {"in": g.dout("out")}, {"shifts": [-s for s in g.attr("shifts")], "dims": g.attr("dims")})))


def _flip_infer(x_arg, y_arg):
    def infer(ctx):
        x = ctx.input(x_arg)
        dims = [norm_axis(d, len(x.shape), "attr 'dims' entry") for d in ctx.attr("dims")]
        ctx.check(len(set(dims)) == len(dims), f"attr 'dims' {ctx.attr('dims')} names a dim twice")
        ctx.set_output(y_arg, x.shape, x.dtype)
    return infer


def _flip_kernel(x_arg):
    return lambda k: (lambda x, d=[norm_axis(a, len(k.input(x_arg).shape)) for a in k.attr("dims")]:
                      torch.flip(x, d))


def _flip_onnx(x_arg, y_arg):
    def convert(c):
        n = len(c.input_desc(x_arg).shape)
        dims = sorted({d % n for d in c.attr("dims")})
        if not dims:
            c.node("Identity", [c.input(x_arg)], [c.output(y_arg)])
            return
        _slice_onnx(c, c.input(x_arg), c.output(y_arg), [-1] * len(dims), [_INT64_MIN_onnx] * len(dims),
                    [-1] * len(dims), dims)
    return convert


# v0.6.0 registers no grad function for ``flip`` (``oneflow/user/ops/flip_op.cpp``); ``flip_grad``
# exists as its own op. flow.reverse uses ``slice`` with step -1, which is differentiable.
def _flip_xla(x_arg):
    return lambda k: (lambda x, d=tuple(norm_axis(a, len(k.input(x_arg).shape)) for a in k.attr("dims")):
                      xla_rules.jnp().flip(x, d))


op("flip", inputs=["x"], outputs=["y"], attrs={"dims": "list_int32"}, infer=_flip_infer("x", "y"),
   kernel=_flip_kernel("x"), onnx=_flip_onnx("x", "y"), xla=_flip_xla("x"),
   sbp=_split_or_partial(_axes_besides("x", lambda ctx: ctx.attr("dims"))))
op("flip_grad", inputs=["dy"], outputs=["dx"], attrs={"dims": "list_int32"}, infer=_flip_infer("dy", "dx"),
   kernel=_flip_kernel("dy"), xla=_flip_xla("dy"), onnx=_flip_onnx("dy", "dx"),
   sbp=_split_or_partial(_axes_besides("dy", lambda ctx: ctx.attr("dims"))))


def _diag_shape(ctx, shape, d):
    if len(shape) == 1:
        n = shape[0] + abs(d)
        return (n, n)
    rows, cols = shape
    size = min(rows, cols - d) if d >= 0 else min(rows + d, cols)
    ctx.check(size > 0, f"attr 'diagonal' {d} is outside the matrix of shape {shape}")
    return (size,)


def _diag_infer(ctx):
    x = ctx.input("in")
    ctx.check(len(x.shape) in (1, 2), f"input 'in' expected rank 1 or 2, received shape {x.shape}")
    ctx.set_output("out", _diag_shape(ctx, x.shape, ctx.attr("diagonal")), x.dtype)


def _diag_grad_infer(ctx):
    dy, x = ctx.input("dy"), ctx.input("in")
    ctx.check(len(x.shape) in (1, 2), f"input 'in' expected rank 1 or 2, received shape {x.shape}")
    expected = _diag_shape(ctx, x.shape, ctx.attr("diagonal"))
    ctx.check(dy.shape == expected, f"input 'dy' expected shape {expected}, received {dy.shape}")
    ctx.set_output("dx", x.shape, dy.dtype)


def _diag_grad_xla(k):
    d = k.attr("diagonal")
    shape = tuple(k.input("in").shape)
    if len(shape) == 1:
        return lambda dy, x: xla_rules.jnp().diagonal(dy, d)
    n = len(np.diagonal(np.empty(shape), d))
    i = np.arange(n)
    rows, cols = (i, i + d) if d >= 0 else (i - d, i)
    return lambda dy, x: xla_rules.jnp().zeros(shape, dy.dtype).at[rows, cols].set(dy)


def _diag_grad_kernel(k):
    d = k.attr("diagonal")
    shape = tuple(k.input("in").shape)
    if len(shape) == 1:
        return lambda dy, x: torch.diagonal(dy, d).clone()

    def diag_grad(dy, x):
        dx = torch.zeros(shape, dtype=dy.dtype, device=dy.device)
        torch.diagonal(dx, d).copy_(dy)
        return dx
    return diag_grad


def _diag_onnx(c):
    """1-D ``in`` (n,): the (n + |d|)^2 matrix with ``in`` on diagonal d, zeros elsewhere;
    2-D ``in``: its diagonal d as a vector (torch.diag)."""
    d, desc = c.attr("diagonal"), c.input_desc("in")
    if len(desc.shape) == 2:
        c.node("GatherND", [c.input("in"), c.const(_diagonal_coords(c.output_desc("out").shape[0], d))],
               [c.output("out")])
        return
    m = c.output_desc("out").shape[0]
    r, k = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    on = (k - r) == d
    src = np.where(on, np.minimum(r, k), 0).astype(np.int64)   # row r, column r + d holds in[min(r, col)]
    c.node("Where", [c.const(on), c.node("Gather", [c.input("in"), c.const(src)], axis=0),
                     c.const(np.zeros((), dtype=np_dtype(desc)))], [c.output("out")])


def _diagonal_coords(size, d):
    """(row, col) of the ``size`` elements of diagonal d, shape (size, 2)."""
    i = np.arange(size, dtype=np.int64)
    rows, cols = (i, i + d) if d >= 0 else (i - d, i)
    return np.stack([rows, cols], axis=1)


def _diag_grad_onnx(c):
    """1-D ``in``: diagonal d of dy; 2-D ``in``: zeros of its shape holding dy on diagonal d."""
    d, shape = c.attr("diagonal"), c.input_desc("in").shape
    if len(shape) == 1:
        c.node("GatherND", [c.input("dy"), c.const(_diagonal_coords(shape[0], d))], [c.output("dx")])
    else:
        _scatter_into_zeros_onnx(c, _diagonal_coords(c.input_desc("dy").shape[0], d), c.input("dy"), c.output("dx"))


op("diag", inputs=["in"], outputs=["out"], attrs={"diagonal": ("int32", 0)}, infer=_diag_infer, onnx=_diag_onnx,
   kernel=lambda k: (lambda x, d=k.attr("diagonal"): torch.diag(x, d)),
   xla=lambda k: (lambda x, d=k.attr("diagonal"): xla_rules.jnp().diag(x, d)),
   grad=lambda g: g.needs("in") and g.set_grad("in", g.emit(
       "diag_grad", {"dy": g.dout("out"), "in": g.input("in")}, {"diagonal": g.attr("diagonal")})),
   sbp=lambda ctx: [_sbp.signature(ctx, _sbp.P)])  # (positions are logical: partial sums only, as OneFlow)
op("diag_grad", inputs=["dy", "in"], outputs=["dx"], attrs={"diagonal": ("int32", 0)}, infer=_diag_grad_infer,
   kernel=_diag_grad_kernel, xla=_diag_grad_xla, onnx=_diag_grad_onnx,
   sbp=lambda ctx: [_sbp.signature(ctx, _sbp.P, **{"in": _sbp.B})])  # ("in": read for its shape)


# ============================================================== identities

def _tuple_identity_infer(ctx):
    ins = ctx.inputs("in")
    ctx.check(ctx.output_count("out") == len(ins),
              f"output 'out' needs one blob per input ({len(ins)}), received {ctx.output_count('out')}")
    for i, d in enumerate(ins):
        ctx.set_output("out", d.shape, d.dtype, i=i, is_dynamic=d.is_dynamic)


def _tuple_identity_grad(g):
    for i in range(len(g.inputs("in"))):
        if g.needs("in", i):
            g.set_grad("in", g.dout("out", i), i)


def _identity_each_onnx(c):
    """``Identity`` from each input to the output of the same position (tuple_identity)."""
    for i, o in zip(c.all_inputs(), c.all_outputs()):
        c.node("Identity", [i], [o])


def _tuple_identity_sbp(ctx):
    """Each blob passes in the layout it arrives in (OneFlow's tuple_identity infers so)."""
    return [{f"{a}_{i}": ctx.sbp("in", i) for i in range(ctx.count("in")) for a in ("in", "out")}]


op("tuple_identity", inputs=["in*"], outputs=["out*"], infer=_tuple_identity_infer,
   kernel=lambda k: (lambda xs: list(xs)), grad=_tuple_identity_grad, view=True, onnx=_identity_each_onnx,
   xla=lambda k: (lambda xs: list(xs)), sbp=_tuple_identity_sbp)


# ============================================================== constant sources and *_like (NoGrad)

def _dtype_attr(ctx, default=None):
    dtype = ctx.attr("dtype") or default
    ctx.check(dtype is not None, "attr 'dtype' must be set")
    return dtype


def _constant_infer(ctx):
    dtype = _dtype_attr(ctx)
    shape = ctx.attr("shape")
    ctx.check(all(s >= 0 for s in shape), f"attr 'shape' {tuple(shape)} has a negative dim")
    value_attr = "floating_value" if ctx.attr("is_floating_value") else "integer_value"
    fill_fits(ctx, ctx.attr(value_attr), dtype, f"attr '{value_attr}'")
    ctx.set_output("out", shape, dtype)


def _constant_kernel(k):
    dtype = k.attr("dtype")
    value = k.attr("floating_value") if k.attr("is_floating_value") else k.attr("integer_value")
    shape, device = tuple(k.attr("shape")), k.device
    return lambda: torch.full(shape, value, dtype=dtype.torch, device=device)


def _constant_xla(k):
    dtype = k.attr("dtype")
    value = k.attr("floating_value") if k.attr("is_floating_value") else k.attr("integer_value")
    shape = tuple(k.attr("shape"))
    return lambda: xla_rules.jnp().full(shape, value, dtype.np)


def _constant_value_onnx(c):
    d = c.output_desc("out")
    value = c.attr("floating_value") if c.attr("is_floating_value") else c.attr("integer_value")
    return np.full(d.shape, value, dtype=np_dtype(d))


_constant_onnx = onnx_rules.constant_output(_constant_value_onnx)


op("constant", outputs=["out"],
   attrs={"floating_value": ("double", 0.0), "integer_value": ("int64", 0), "is_floating_value": ("bool", False),
          "dtype": "dtype", "shape": "shape", "nd_sbp": "list_string"},
   infer=_constant_infer, kernel=_constant_kernel, no_grad=True, onnx=_constant_onnx, xla=_constant_xla)

def _full_like_output_onnx(value, out_arg):
    """zero_like / ones_like: ``value`` in the output's shape and dtype."""
    def value_of(c):
        d = c.output_desc(out_arg)
        return np.full(d.shape, value, dtype=np_dtype(d))
    return onnx_rules.constant_output(value_of)


op("zero_like", inputs=["like"], outputs=["out"], infer=like("like"),
   kernel=lambda k: torch.zeros_like, no_grad=True, onnx=_full_like_output_onnx(0, "out"),
   xla=lambda k: xla_rules.jnp().zeros_like)

# v0.6.0 declares ones_like as ``x -> y`` (its C++ inference reads ``like``/``out``,
# a bug). graphfront keeps the declared signature, the one a conf is checked against,
# and infers ``y`` from ``x`` consistently.
op("ones_like", inputs=["x"], outputs=["y"], infer=like("x"), kernel=lambda k: torch.ones_like, no_grad=True,
   onnx=_full_like_output_onnx(1, "y"), xla=lambda k: xla_rules.jnp().ones_like)


def _one_hot_infer(ctx):
    idx = integer_input(ctx, "indices")
    depth = ctx.attr("depth")
    ctx.check(depth >= 1, f"attr 'depth' must be >= 1, received {depth}")
    for value_attr in ("integer_on_value", "integer_off_value"):
        fill_fits(ctx, ctx.attr(value_attr), _dtype_attr(ctx), f"attr '{value_attr}'")
    ctx.set_output("out", idx.shape + (depth,), _dtype_attr(ctx))


def _one_hot_kernel(k):
    """Rows whose index is outside [0, depth) are all ``off_value``."""
    dtype, depth = k.attr("dtype"), k.attr("depth")
    on = k.attr("floating_on_value") if dtype.is_floating_point else k.attr("integer_on_value")
    off = k.attr("floating_off_value") if dtype.is_floating_point else k.attr("integer_off_value")

    # made once, on the op's device (nothing is copied from the host per call or in a CUDA graph)
    classes = torch.arange(depth, device=k.device)
    on_t = torch.full((), on, dtype=dtype.torch, device=k.device)
    off_t = torch.full((), off, dtype=dtype.torch, device=k.device)

    def one_hot(idx):
        return torch.where(idx.long().unsqueeze(-1) == classes, on_t, off_t)
    return one_hot


def _one_hot_xla(k):
    dtype, depth = k.attr("dtype"), k.attr("depth")
    on = k.attr("floating_on_value") if dtype.is_floating_point else k.attr("integer_on_value")
    off = k.attr("floating_off_value") if dtype.is_floating_point else k.attr("integer_off_value")

    def one_hot(idx):
        jnp = xla_rules.jnp()
        hot = idx.astype("int64")[..., None] == jnp.arange(depth, dtype="int64")
        return jnp.where(hot, jnp.asarray(on, dtype.np), jnp.asarray(off, dtype.np))
    return one_hot


def _one_hot_onnx(c):
    """one_hot: ``on`` where index == position along the new last axis, ``off`` elsewhere
    (all ``off`` for out-of-range indices, as the kernel)."""
    d = c.output_desc("out")
    floating = d.dtype.is_floating_point
    on = c.attr("floating_on_value") if floating else c.attr("integer_on_value")
    off = c.attr("floating_off_value") if floating else c.attr("integer_off_value")
    ids = c.node("Unsqueeze", [c.node("Cast", [c.input("indices")], to=onnx_rules.INT64), c.const(int64s([-1]))])
    hot = c.node("Equal", [ids, c.const(np.arange(c.attr("depth"), dtype=np.int64))])
    c.node("Where", [hot, c.const(np.array(on, dtype=np_dtype(d))), c.const(np.array(off, dtype=np_dtype(d)))],
           [c.output("out")])


op("one_hot", inputs=["indices"], outputs=["out"],
   attrs={"depth": ("int64", 0), "floating_on_value": ("double", 0.0), "integer_on_value": ("int64", 0),
          "floating_off_value": ("double", 0.0), "integer_off_value": ("int64", 0), "dtype": "dtype"},
   infer=_one_hot_infer, kernel=_one_hot_kernel, no_grad=True, onnx=_one_hot_onnx, xla=_one_hot_xla, sbp=_sbp.batch())


ARANGE_ATTRS = {"integer_start": ("int64", 0), "integer_delta": ("int64", 0), "integer_limit": ("int64", 0),
                "float_start": ("double", 0.0), "float_delta": ("double", 0.0), "float_limit": ("double", 0.0),
                "dtype": "dtype", "nd_sbp": "list_string"}


def _arange_bounds(attrs, dtype):
    prefix = "float" if dtype.is_floating_point else "integer"
    return attrs[f"{prefix}_start"], attrs[f"{prefix}_limit"], attrs[f"{prefix}_delta"], prefix


def _arange_count(start, limit, delta):
    return max(math.ceil((limit - start) / delta), 0)


def _arange_infer(ctx):
    dtype = _dtype_attr(ctx)
    start, limit, delta, prefix = _arange_bounds(ctx.attrs, dtype)
    ctx.check(delta != 0, f"attr '{prefix}_delta' must not be 0")
    count = _arange_count(start, limit, delta)
    ctx.check(count > 0, f"arange from {start} to {limit} by {delta} produces no elements")
    ctx.set_output("out", (count,), dtype)


def _arange_kernel(k):
    dtype = k.attr("dtype")
    start, limit, delta, _ = _arange_bounds(k.attrs, dtype)
    count, device = k.output("out").shape[0], k.device
    # start + i * delta (not torch.arange's accumulated float steps) so the count matches inference
    return lambda: (start + torch.arange(count, dtype=torch.float64 if dtype.is_floating_point else torch.int64,
                                         device=device) * delta).to(dtype.torch)


def _arange_value_onnx(c):
    """start + i * delta computed in float64 (int64 for integer dtypes), then cast: the kernel's arithmetic."""
    d = c.output_desc("out")
    prefix = "float" if d.dtype.is_floating_point else "integer"
    start, delta = c.attr(f"{prefix}_start"), c.attr(f"{prefix}_delta")
    steps = np.arange(d.shape[0], dtype=np.float64 if d.dtype.is_floating_point else np.int64)
    return (start + steps * delta).astype(np_dtype(d))


_arange_onnx = onnx_rules.constant_output(_arange_value_onnx)


def _arange_xla(k):
    dtype = k.attr("dtype")
    start, _, delta, _ = _arange_bounds(k.attrs, dtype)
    steps = np.arange(k.output("out").shape[0], dtype=np.float64 if dtype.is_floating_point else np.int64)
    value = (start + steps * delta).astype(dtype.np)  # the kernel's arithmetic, once
    return lambda: xla_rules.jnp().asarray(value)


op("arange", outputs=["out"], attrs=ARANGE_ATTRS, infer=_arange_infer, kernel=_arange_kernel, no_grad=True,
   onnx=_arange_onnx, xla=_arange_xla)


def _eye_infer(ctx):
    rows, cols = ctx.attr("rows"), ctx.attr("cols")
    ctx.check(rows >= 0 and cols >= 0, f"attrs rows={rows}, cols={cols} must be >= 0")
    ctx.set_output("out", (rows, cols), _dtype_attr(ctx))


_eye_onnx = onnx_rules.constant_output(
    lambda c: np.eye(c.attr("rows"), c.attr("cols"), dtype=np_dtype(c.output_desc("out"))))


op("eye", outputs=["out"], attrs={"rows": ("int64", 0), "cols": ("int64", 0), "dtype": "dtype",
                                  "nd_sbp": "list_string"},
   infer=_eye_infer,
   kernel=lambda k: (lambda r=k.attr("rows"), c=k.attr("cols"), t=k.attr("dtype").torch, dev=k.device:
                     torch.eye(r, c, dtype=t, device=dev)),
   no_grad=True, onnx=_eye_onnx,
   xla=lambda k: (lambda r=k.attr("rows"), c=k.attr("cols"), t=k.attr("dtype").np: xla_rules.jnp().eye(r, c, dtype=t)))
