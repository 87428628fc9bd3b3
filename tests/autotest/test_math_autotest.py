"""AutoTest of the math ops (graphfront.ops.math_ops, graphfront.math) against PyTorch eager.

Every op type math_ops registers is exercised: forward ops directly (through their
flow.math wrapper or flow.user_op_builder), grad ops through auto_backward. Ops with
no grad function (broadcast_maximum/minimum, reduce_prod, scalar_floordiv/fmod,
square_sum, triu, masked_fill, where_scalar_x/y ...) and integer/bool-output ops run in
forward-only autotests. Shapes, axes and modes are drawn from the draw's rng
(``check.rng``) so that they fit together.
"""
import numpy as np
import pytest

from graphfront.ops.builder import build_op
from graphfront.testing import autotest, constant, random_tensor

N = 20


def dims(check, ndim, low=1, high=5):
    return [int(d) for d in check.rng.integers(low, high, size=ndim)]


def rank(check, low=1, high=4):
    return int(check.rng.integers(low, high + 1))


def tensor(shape, low=-1.0, high=1.0, requires_grad=True, dtype=float):
    """A tensor generator of exactly ``shape`` (rank 1..5)."""
    names = {f"dim{i}": d for i, d in enumerate(shape)}
    return random_tensor(ndim=len(shape), low=low, high=high, requires_grad=requires_grad, dtype=dtype, **names)


def build(flow, op_type, inputs, outputs, attrs=None):
    """One user op through flow.user_op_builder; returns its output blobs."""
    out = build_op(op_type, inputs, attrs, outputs, name=flow.util.unique_str(op_type + "_"))
    return out if isinstance(out, tuple) else (out,)


def scalar_attrs(value):
    if isinstance(value, float):
        return {"has_float_operand": True, "float_operand": value}
    return {"has_int_operand": True, "int_operand": value}


def broadcast_shapes(check):
    """(x shape, y shape): equal, one side (1,), numpy-broadcastable, or missing leading dims."""
    shape = dims(check, rank(check))
    mode = check.rng.choice(["same", "one", "broadcast", "suffix"])
    if mode == "same":
        other = list(shape)
    elif mode == "one":
        other = [1]
    elif mode == "broadcast":
        other = [d if check.rng.random() < 0.5 else 1 for d in shape]
    else:
        other = shape[int(check.rng.integers(0, len(shape))):]
    return (shape, other) if check.rng.random() < 0.5 else (other, shape)


def axes_of(check, ndim):
    """A reduction axis argument: None, an int or a list (negatives allowed) + keepdims."""
    kind = check.rng.choice(["none", "int", "list"])
    if kind == "none":
        axis, dims_ = None, list(range(ndim))
    elif kind == "int":
        a = int(check.rng.integers(-ndim, ndim))
        axis, dims_ = a, [a % ndim]
    else:
        dims_ = sorted(int(a) for a in check.rng.choice(ndim, size=int(check.rng.integers(1, ndim + 1)),
                                                         replace=False))
        axis = [a - ndim if check.rng.random() < 0.5 else a for a in dims_]
    return axis, tuple(dims_), bool(check.rng.random() < 0.5)


def int8(t):
    import torch
    return t.to(torch.int8)


# ------------------------------------------------------------------ unary family, sigmoid, gelu, relu

# name -> (argument: general x in (-2, 2) / unit u in (-0.9, 0.9) / positive p in (0.2, 3) / big b in (1.2, 3),
#          torch function)
UNARY = {
    "abs": ("x", "abs"), "acos": ("u", "acos"), "acosh": ("b", "acosh"), "asin": ("u", "asin"),
    "asinh": ("x", "asinh"), "atan": ("x", "atan"), "atanh": ("u", "atanh"), "ceil": ("x", "ceil"),
    "cos": ("x", "cos"), "cosh": ("x", "cosh"), "erf": ("x", "erf"), "erfc": ("x", "erfc"), "exp": ("x", "exp"),
    "expm1": ("x", "expm1"), "floor": ("x", "floor"), "lgamma": ("p", "lgamma"), "log": ("p", "log"),
    "log1p": ("p", "log1p"), "log2": ("p", "log2"), "log_sigmoid": ("x", "nn.functional.logsigmoid"),
    "negative": ("x", "neg"), "reciprocal": ("p", "reciprocal"), "reciprocal_no_nan": ("p", "reciprocal"),
    "rint": ("x", "round"), "round": ("x", "round"), "rsqrt": ("p", "rsqrt"), "sigmoid_v2": ("x", "sigmoid"),
    "sign": ("x", "sign"), "sin": ("x", "sin"), "sinh": ("x", "sinh"), "softplus": ("x", "nn.functional.softplus"),
    "sqrt": ("p", "sqrt"), "square": ("x", "square"), "tan": ("u", "tan"), "tanh": ("x", "tanh"),
    "sigmoid": ("x", "sigmoid"), "gelu": ("x", "nn.functional.gelu"), "relu": ("x", "relu"),
    "tanh_v2": ("x", "tanh"),
}


def _torch_fn(torch, path):
    fn = torch
    for part in path.split("."):
        fn = getattr(fn, part)
    return fn


@pytest.mark.slow
@autotest(n=N)
def test_unary_family(check):
    """Every unary op (and sigmoid, gelu, relu, tanh_v2) in one job: all forward and grad ops on each draw."""
    shape = dims(check, rank(check, 1, 2))
    names = sorted(UNARY)
    check(graphfront=lambda flow, **t: [getattr(flow.math, n)(t[UNARY[n][0]]) for n in names],
          torch=lambda torch, **t: [_torch_fn(torch, UNARY[n][1])(t[UNARY[n][0]]) for n in names],
          x=tensor(shape, -2, 2), u=tensor(shape, -0.9, 0.9), p=tensor(shape, 0.2, 3), b=tensor(shape, 1.2, 3))


@autotest(n=N, auto_backward=False)
def test_explicit_grad_ops(check):
    """sigmoid_grad / gelu_grad / relu_grad called directly (they have no grad function): forward only."""
    shape = dims(check, rank(check))

    def gf(flow, x, dy):
        return [flow.math.sigmoid_grad(flow.math.sigmoid(x), dy), flow.math.gelu_grad(x, dy),
                build(flow, "relu_grad", {"y": flow.math.relu(x), "dy": dy}, ["dx"])[0]]

    def th(torch, x, dy):
        y = torch.sigmoid(x)
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            (gelu_dx,) = torch.autograd.grad(torch.nn.functional.gelu(xg), xg, dy)
        return [dy * y * (1 - y), gelu_dx, torch.where(x > 0, dy, torch.zeros_like(dy))]

    check(graphfront=gf, torch=th, x=tensor(shape, -3, 3), dy=tensor(shape))


# ------------------------------------------------------------------ same-shape binary family (§4.2)

@autotest(n=N)
def test_binary_family(check):
    shape = dims(check, rank(check))

    def gf(flow, x, y, a, b):
        return [flow.math.pow(x, y), flow.math.atan2(a, b), flow.math.floordiv(a, y), flow.math.xdivy(a, y),
                flow.math.xlogy(a, y)]

    def th(torch, x, y, a, b):
        return [torch.pow(x, y), torch.atan2(a, b), torch.div(a, y, rounding_mode="floor"), a / y,
                torch.xlogy(a, y)]

    check(graphfront=gf, torch=th, x=tensor(shape, 0.5, 2), y=tensor(shape, 0.5, 2), a=tensor(shape, -3, 3),
          b=tensor(shape, -3, 3))


@autotest(n=N)
def test_elementwise_maximum_minimum(check):
    shape = dims(check, rank(check))
    which = check.rng.choice(["both", "x", "y"])  # which inputs are trainable: optional dx?/dy? outputs
    check(graphfront=lambda flow, x, y: [flow.math.maximum(x, y), flow.math.minimum(x, y)],
          torch=lambda torch, x, y: [torch.maximum(x, y), torch.minimum(x, y)],
          x=tensor(shape, requires_grad=which != "y"), y=tensor(shape, requires_grad=which != "x"))


# ------------------------------------------------------------------ arithmetic dispatch, broadcast ops

def strict_broadcast_shape(check, shape):
    """A shape that broadcasts to ``shape`` (all dims >= 2) but differs from it: one dim set to 1,
    maybe more, maybe leading dims dropped."""
    other = list(shape)
    other[int(check.rng.integers(0, len(shape)))] = 1
    other = [1 if check.rng.random() < 0.3 else d for d in other]
    return other[int(check.rng.integers(0, len(other))):] if check.rng.random() < 0.3 else other


@autotest(n=N)
def test_arithmetic_dispatch(check):
    """add/subtract/multiply/divide/pow over equal, (1,)-shaped and broadcast operands: add_n, multiply,
    broadcast_{add,sub,mul,div,pow}, scalar_{add,sub,mul,div}_by_tensor and their grad ops. x and y have
    a drawn relation (equal, (1,), broadcast, suffix); z always broadcasts against x, so every draw
    emits every broadcast op and its grads (reduce_sum_like included)."""
    xs, ys = broadcast_shapes(check)
    full = dims(check, rank(check), 2, 5)
    zs = strict_broadcast_shape(check, full)

    def gf(flow, x, y, w, z):
        return [flow.math.add(x, y), flow.math.subtract(x, y), flow.math.multiply(x, y), flow.math.divide(x, y),
                flow.math.pow(x, y), x + y, y - x, x * y, y / x,
                flow.math.add(w, z), flow.math.subtract(z, w), flow.math.multiply(w, z), flow.math.divide(z, w),
                flow.math.pow(w, z)]

    def th(torch, x, y, w, z):
        return [x + y, x - y, x * y, x / y, torch.pow(x, y), x + y, y - x, x * y, y / x,
                w + z, z - w, w * z, z / w, torch.pow(w, z)]

    check(graphfront=gf, torch=th, x=tensor(xs, 0.5, 2), y=tensor(ys, 0.5, 2), w=tensor(full, 0.5, 2),
          z=tensor(zs, 0.5, 2))


@autotest(n=N)
def test_scalar_by_tensor(check):
    """scalar_*_by_tensor ops with the one-element blob first or second."""
    shape = dims(check, rank(check))

    def gf(flow, x, s):
        return [flow.math.add(s, x), flow.math.subtract(x, s), flow.math.multiply(s, x), flow.math.divide(x, s)]

    check(graphfront=gf, torch=lambda torch, x, s: [s + x, x - s, s * x, x / s],
          x=tensor(shape), s=tensor([1], 0.5, 2))


@autotest(n=N)
def test_mod_fmod(check):
    """broadcast_floor_mod / broadcast_fmod: dz passes to x only (y enters torch detached)."""
    xs, ys = broadcast_shapes(check)

    def gf(flow, x, y):
        return [flow.math.mod(x, y), build(flow, "broadcast_fmod", {"x": x, "y": y}, ["z"])[0]]

    def th(torch, x, y):
        return [torch.remainder(x, y.detach()), torch.fmod(x, y.detach())]

    low, high = (-2.0, -0.6) if check.rng.random() < 0.3 else (0.6, 2.0)
    check(graphfront=gf, torch=th, x=tensor(xs, -4, 4), y=tensor(ys, low, high))


@autotest(n=N, auto_backward=False)
def test_broadcast_maximum_minimum(check):
    """No grad function (as OneFlow): forward only."""
    xs, ys = broadcast_shapes(check)
    if xs == ys:
        ys = [1] + ys
    check(graphfront=lambda flow, x, y: [flow.math.maximum(x, y), flow.math.minimum(x, y)],
          torch=lambda torch, x, y: [torch.maximum(x, y), torch.minimum(x, y)],
          x=tensor(xs), y=tensor(ys))


COMPARISONS = {"equal": "eq", "not_equal": "ne", "greater": "gt", "greater_equal": "ge", "less": "lt",
               "less_equal": "le", "logical_and": "logical_and", "logical_or": "logical_or",
               "logical_xor": "logical_xor"}


def _th_compare(torch, name, x, y):
    if name.startswith("logical_"):
        y = torch.as_tensor(y)
        return int8(getattr(torch, COMPARISONS[name])(x != 0, y != 0))
    return int8(getattr(torch, COMPARISONS[name])(x, y))


@autotest(n=N, auto_backward=False)
def test_comparisons(check):
    """broadcast_<cmp> (int8) for blob operands, scalar_logical_<cmp> for a number operand."""
    xs, ys = broadcast_shapes(check)
    integer = check.rng.random() < 0.6
    dtype = int if integer else float
    s = int(check.rng.integers(-1, 2)) if integer else float(np.round(check.rng.uniform(-1, 1), 1))
    names = sorted(COMPARISONS)
    check(graphfront=lambda flow, x, y: [getattr(flow.math, n)(x, y) for n in names]
          + [getattr(flow.math, n)(x, s) for n in names],
          torch=lambda torch, x, y: [_th_compare(torch, n, x, y) for n in names]
          + [_th_compare(torch, n, x, s) for n in names],
          x=tensor(xs, -2, 2, dtype=dtype), y=tensor(ys, -2, 2, dtype=dtype))


# ------------------------------------------------------------------ scalar ops

@autotest(n=N)
def test_scalar_arithmetic_and_pow(check):
    shape = dims(check, rank(check))
    e = float(np.round(check.rng.uniform(-2, 3), 2)) if check.rng.random() < 0.5 else int(check.rng.integers(-2, 4))
    c = float(np.round(check.rng.uniform(-2, 2), 2)) if check.rng.random() < 0.5 else int(check.rng.integers(-3, 4))
    check(graphfront=lambda flow, x: [flow.math.pow(x, e), x + c, x - c, x * c, c - x],
          torch=lambda torch, x: [torch.pow(x, e), x + c, x - c, x * c, c - x],
          x=tensor(shape, 0.5, 2))


@autotest(n=N, auto_backward=False)
def test_scalar_floordiv_fmod(check):
    """No grad function: forward only, float and integer inputs."""
    shape = dims(check, rank(check))
    integer = check.rng.random() < 0.5
    s = int(check.rng.choice([-3, -2, 2, 3])) if integer else float(check.rng.choice([-1.5, 0.7, 2.0]))
    dtype = int if integer else float

    def gf(flow, x):
        return [build(flow, "scalar_floordiv", {"in": x}, ["out"], scalar_attrs(s))[0],
                build(flow, "scalar_fmod", {"in": x}, ["out"], scalar_attrs(s))[0]]

    check(graphfront=gf, torch=lambda torch, x: [torch.div(x, s, rounding_mode="floor"), torch.fmod(x, s)],
          x=tensor(shape, -9, 9, dtype=dtype))


# ------------------------------------------------------------------ reductions
# (a reduction over every axis, and the argmax of a vector, have shape (1,) in OneFlow's
# single-client API, not torch's 0-d: torch.atleast_1d)

def _quantized(check, shape):
    """A float tensor with values on a coarse grid, so that maxima and minima tie often."""
    return constant(np.round(check.rng.uniform(-2, 2, size=shape) * 2).astype(np.float32) / 2)


@autotest(n=N)
def test_reduce_sum_max_min(check):
    shape = dims(check, rank(check))
    axis, ds, keep = axes_of(check, len(shape))
    check(graphfront=lambda flow, x: [flow.math.reduce_sum(x, axis, keep), flow.math.reduce_max(x, axis, keep),
                                      flow.math.reduce_min(x, axis, keep)],
          torch=lambda torch, x: list(torch.atleast_1d(torch.sum(x, ds, keepdim=keep), torch.amax(x, ds, keepdim=keep),
                                                       torch.amin(x, ds, keepdim=keep))),
          x=_quantized(check, shape))


@autotest(n=N)
def test_two_stage_reduce_max_min(check):
    shape = dims(check, rank(check))
    axis, ds, keep = axes_of(check, len(shape))
    split_axis = int(check.rng.choice(ds))

    def gf(flow, x):
        x = x.with_distribute(flow.distribute.split(split_axis))
        return [flow.math.two_stage_reduce_max(x, axis, keep), flow.math.two_stage_reduce_min(x, axis, keep)]

    check(graphfront=gf,
          torch=lambda torch, x: list(torch.atleast_1d(torch.amax(x, ds, keepdim=keep), torch.amin(x, ds, keepdim=keep))),
          x=_quantized(check, shape))


@autotest(n=N)
def test_composite_reductions(check):
    shape = dims(check, rank(check), 2, 5)
    axis, ds, keep = axes_of(check, len(shape))

    def gf(flow, x):
        m = flow.math
        return [m.reduce_mean(x, axis, keep), m.reduce_variance(x, axis, keep), m.reduce_std(x, axis, keep),
                m.reduce_logsumexp(x, axis, keep), m.reduce_euclidean_norm(x, axis, keep)]

    def th(torch, x):
        return list(torch.atleast_1d(x.mean(ds, keepdim=keep), x.var(ds, unbiased=False, keepdim=keep),
                                     x.std(ds, unbiased=False, keepdim=keep), torch.logsumexp(x, ds, keepdim=keep),
                                     torch.linalg.vector_norm(x, dim=ds, keepdim=keep)))

    check(graphfront=gf, torch=th, x=tensor(shape, -2, 2))


@autotest(n=N, auto_backward=False)
def test_reduce_prod_any_all(check):
    """reduce_prod (no grad function), reduce_any / reduce_all (bool outputs): forward only."""
    shape = dims(check, rank(check))
    axis, ds, keep = axes_of(check, len(shape))

    def prod(x):
        for d in sorted(ds, reverse=True):
            x = x.prod(d, keepdim=keep)
        return x

    def th(torch, x, b):
        return list(torch.atleast_1d(prod(x), torch.any(b != 0, dim=ds, keepdim=keep),
                                     torch.all(b != 0, dim=ds, keepdim=keep)))

    check(graphfront=lambda flow, x, b: [flow.math.reduce_prod(x, axis, keep), flow.math.reduce_any(b, axis, keep),
                                         flow.math.reduce_all(b, axis, keep)],
          torch=th, x=tensor(shape, 0.5, 1.5), b=tensor(shape, 0, 2, dtype=int))


@autotest(n=N)
def test_squared_difference_polyval(check):
    xs, ys = broadcast_shapes(check)
    coeffs = [float(np.round(c, 2)) for c in check.rng.uniform(-2, 2, size=int(check.rng.integers(1, 5)))]

    def horner(x):
        p = x * 0
        for c in coeffs:
            p = p * x + c
        return p

    check(graphfront=lambda flow, x, y: [flow.math.squared_difference(x, y), flow.math.polyval(coeffs, x)],
          torch=lambda torch, x, y: [(x - y) ** 2, horner(x)],
          x=tensor(xs), y=tensor(ys))


# ------------------------------------------------------------------ argmax, top_k, in_top_k, sort

@autotest(n=N, auto_backward=False)
def test_argmax_top_k_sort(check):
    shape = dims(check, rank(check), 1, 6)
    axis = int(check.rng.integers(-len(shape), len(shape)))
    k = int(check.rng.integers(1, shape[axis] + 2))
    direction = str(check.rng.choice(["ASCENDING", "DESCENDING"]))
    descending = direction == "DESCENDING"

    def gf(flow, x):
        return [flow.math.argmax(x, axis), flow.math.top_k(x, axis=axis, k=k),
                flow.math.argsort(x, axis, direction), flow.math.sort(x, axis, direction)]

    def th(torch, x):
        # OneFlow's top_k and arg_sort return int32 indices (argmax int64, as torch)
        s = torch.sort(x, dim=axis, descending=descending, stable=True)
        return [torch.atleast_1d(torch.argmax(x, dim=axis)), torch.topk(x, min(k, shape[axis]), dim=axis).indices.int(),
                s.indices.int(), s.values]

    check(graphfront=gf, torch=th, x=tensor(shape))


@autotest(n=N, auto_backward=False)
def test_top_k_unsorted(check):
    """sorted=False: compared as sets of indices per row (ordering is unspecified)."""
    shape = dims(check, rank(check), 1, 7)
    k = int(check.rng.integers(1, shape[-1] + 1))
    check(graphfront=lambda flow, x: flow.math.top_k(x, k=k, sorted=False),
          torch=lambda torch, x: torch.topk(x, k, dim=-1, sorted=True).indices.int(),  # OneFlow: int32
          compare=_same_index_sets, x=tensor(shape))


def _same_index_sets(case):
    a, b = np.sort(case.outputs[0], axis=-1), np.sort(case.torch_outputs[0], axis=-1)
    return [] if np.array_equal(a, b) else [f"top_k(sorted=False) index sets differ: {a} vs {b}"]


@autotest(n=N, auto_backward=False)
def test_in_top_k(check):
    n, c = int(check.rng.integers(1, 6)), int(check.rng.integers(1, 7))
    k = int(check.rng.integers(0, c + 2))

    def th(torch, targets, predictions):
        score = predictions.gather(1, targets.long().unsqueeze(1))
        return int8((predictions > score).sum(1) < k)

    check(graphfront=lambda flow, targets, predictions: flow.math.in_top_k(targets, predictions, k), torch=th,
          targets=tensor([n], 0, c, dtype=check.rng.choice([np.int32, np.int64])), predictions=tensor([n, c]))


# ------------------------------------------------------------------ clipping, l2_normalize

@autotest(n=N)
def test_clip_by_value(check):
    shape = dims(check, rank(check))
    lo = float(np.round(check.rng.uniform(-1, 0), 2))
    hi = float(np.round(check.rng.uniform(0, 1), 2))
    check(graphfront=lambda flow, x: [flow.math.clip_by_value(x, lo, hi), flow.math.clip_by_value(x, lo),
                                      flow.math.clip_by_value(x, max_value=hi)],
          torch=lambda torch, x: [torch.clamp(x, lo, hi), torch.clamp(x, min=lo), torch.clamp(x, max=hi)],
          x=tensor(shape, -1.5, 1.5))


@autotest(n=N, auto_backward=False)
def test_clip_integer(check):
    shape = dims(check, rank(check))
    lo, hi = int(check.rng.integers(-5, 1)), int(check.rng.integers(0, 6))
    check(graphfront=lambda flow, x: [flow.math.clip_by_value(x, lo, hi), flow.math.clip_by_value(x, lo),
                                      flow.math.clip_by_value(x, max_value=hi)],
          torch=lambda torch, x: [torch.clamp(x, lo, hi), torch.clamp(x, min=lo), torch.clamp(x, max=hi)],
          x=tensor(shape, -9, 9, dtype=check.rng.choice([np.int32, np.int64])))


@autotest(n=N)
def test_l2_normalize(check):
    shape = dims(check, rank(check))
    axis = int(check.rng.integers(-len(shape), len(shape)))
    eps = float(check.rng.choice([1e-12, 1e-3, 0.5]))

    def th(torch, x):
        return x / torch.sqrt(torch.clamp((x * x).sum(axis, keepdim=True), min=eps))

    check(graphfront=lambda flow, x: flow.math.l2_normalize(x, axis=axis, epsilon=eps), torch=th,
          x=tensor(shape))


# ------------------------------------------------------------------ sums and finiteness counts

def _with_non_finite(check, shape):
    a = check.rng.uniform(-2, 2, size=shape).astype(np.float32)
    bad = check.rng.random(size=shape) < 0.2
    a[bad] = check.rng.choice([np.inf, -np.inf, np.nan], size=int(bad.sum()))
    return constant(a)


@autotest(n=N, auto_backward=False)
def test_square_sum_and_counts(check):
    shape, other = dims(check, rank(check)), dims(check, rank(check))

    def gf(flow, x, y, bad):
        return [flow.math.square_sum(x), build(flow, "multi_square_sum", {"x": [x, y]}, ["y"])[0],
                flow.math.count_not_finite(bad), flow.math.multi_count_not_finite([bad, x])]

    def th(torch, x, y, bad):
        def cnt(t):
            return (~torch.isfinite(t)).sum().reshape(1)
        return [(x * x).sum().reshape(1), ((x * x).sum() + (y * y).sum()).reshape(1), cnt(bad), cnt(bad) + cnt(x)]

    check(graphfront=gf, torch=th, x=tensor(shape), y=tensor(other), bad=_with_non_finite(check, shape))


# ------------------------------------------------------------------ where, masked_fill

def _condition(check, shape):
    dtype = check.rng.choice([np.int8, np.int32, np.bool_])
    return constant((check.rng.random(size=shape) < 0.5).astype(dtype))


@autotest(n=N)
def test_where(check):
    """where with broadcasting (grads through zero_like + where) and the masked_fill wrapper."""
    xs, ys = broadcast_shapes(check)
    cs = list(np.broadcast_shapes(tuple(xs), tuple(ys)))
    if check.rng.random() < 0.5:
        cs = [d if check.rng.random() < 0.5 else 1 for d in cs]
    value = float(np.round(check.rng.uniform(-3, 3), 2)) if check.rng.random() < 0.5 else int(check.rng.integers(-3, 4))

    def gf(flow, c, x, y):
        return [flow.math.where(c, x, y), flow.math.masked_fill(x, c, value)]

    def th(torch, c, x, y):
        cond = c != 0
        return [torch.where(cond, x, y), torch.where(cond, torch.tensor(float(value)), x)]

    check(graphfront=gf, torch=th, c=_condition(check, cs), x=tensor(xs), y=tensor(ys))


@autotest(n=N, auto_backward=False)
def test_where_scalar_and_masked_fill_op(check):
    """where_scalar_x / _y / _xy and the masked_fill op: no gradient, forward only."""
    shape = dims(check, rank(check))
    cshape = [d if check.rng.random() < 0.6 else 1 for d in shape]
    a = float(np.round(check.rng.uniform(-3, 3), 2))
    bi = int(check.rng.integers(-3, 4))
    ints = check.rng.random() < 0.5

    def gf(flow, c, x):
        fill = build(flow, "masked_fill", {"x": x, "mask": c}, ["out"], scalar_attrs(a))[0]
        xy = flow.math.where(c, bi, bi + 1) if ints else flow.math.where(c, a, bi)
        return [flow.math.where(c, a, x), flow.math.where(c, x, bi), xy, fill]

    def th(torch, c, x):
        cond = c != 0
        xy = torch.where(cond, torch.tensor(bi), torch.tensor(bi + 1)) if ints else \
            torch.where(cond, torch.tensor(a), torch.tensor(float(bi)))
        return [torch.where(cond, torch.tensor(a), x), torch.where(cond, x, torch.tensor(float(bi))), xy,
                torch.where(cond, torch.tensor(a), x)]

    check(graphfront=gf, torch=th, c=_condition(check, cshape), x=tensor(shape))


# ------------------------------------------------------------------ tril, triu, fused_scale_tril

@autotest(n=N)
def test_tril_fused_scale_tril(check):
    shape = dims(check, rank(check, 2, 4), 1, 6)
    diagonal = int(check.rng.integers(-3, 4))
    fill = float(np.round(check.rng.uniform(-2, 2), 2)) if check.rng.random() < 0.5 else int(check.rng.integers(-2, 3))
    scale = float(np.round(check.rng.uniform(-2, 2), 2)) if check.rng.random() < 0.5 else int(check.rng.integers(1, 4))

    def th(torch, x):
        mask = torch.ones(shape[-2:], dtype=torch.bool).tril(diagonal)
        f = torch.tensor(float(fill))
        return [torch.where(mask, x, f), torch.where(mask, x * scale, f)]

    check(graphfront=lambda flow, x: [flow.math.tril(x, diagonal, fill),
                                      flow.math.fused_scale_tril(x, diagonal, fill, scale)],
          torch=th, x=tensor(shape))


@autotest(n=N, auto_backward=False)
def test_triu(check):
    """triu has no grad function: forward only (float and integer inputs)."""
    shape = dims(check, rank(check, 2, 4), 1, 6)
    diagonal = int(check.rng.integers(-3, 4))
    dtype = check.rng.choice([float, int])
    check(graphfront=lambda flow, x: build(flow, "triu", {"in": x}, ["out"], {"diagonal": diagonal})[0],
          torch=lambda torch, x: torch.triu(x, diagonal), x=tensor(shape, -5, 5, dtype=dtype))


# ------------------------------------------------------------------ add_n, broadcast_like, identity, cast

@autotest(n=N)
def test_add_n_and_broadcast_like(check):
    shape = dims(check, rank(check))
    k = int(check.rng.integers(2, 5))
    axes = sorted(int(a) for a in check.rng.choice(len(shape), size=int(check.rng.integers(1, len(shape) + 1)),
                                                   replace=False))
    reduced = [d for i, d in enumerate(shape) if i not in axes]

    def gf(flow, xs, r, like):
        return [flow.math.add_n(xs), build(flow, "broadcast_like", {"x": r, "like": like}, ["y"],
                                           {"broadcast_axes": axes})[0],
                flow.identity(xs[0]), flow.cast(xs[0], flow.float64)]

    def th(torch, xs, r, like):
        view = [1 if i in axes else d for i, d in enumerate(shape)]
        return [sum(xs[1:], xs[0]), r.reshape(view).expand(shape), xs[0] * 1, xs[0].double()]

    check(graphfront=gf, torch=th, xs=[tensor(shape) for _ in range(k)], r=tensor(reduced or [1]),
          like=tensor(shape, requires_grad=False))


@autotest(n=N, auto_backward=False)
def test_cast_like(check):
    """cast_like is NoGrad: forward only, every direction between float32, float64, int32, int64, int8."""
    shape = dims(check, rank(check))
    src = check.rng.choice([np.float32, np.float64, np.int32, np.int64, np.int8])
    dst = check.rng.choice([np.float32, np.float64, np.int32, np.int64, np.int8])
    check(graphfront=lambda flow, x, like: build(flow, "cast_like", {"in": x, "dtype_like": like}, ["out"])[0],
          torch=lambda torch, x, like: x.to(like.dtype),
          x=tensor(shape, -5, 5, dtype=src), like=tensor([1], 0, 2, dtype=dst, requires_grad=False))
