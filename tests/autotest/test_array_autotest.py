"""AutoTest of the array ops (graphfront.ops.array_ops) against PyTorch eager.

Every op type array_ops registers is exercised: forward ops directly (through their
flow.* wrapper or flow.user_op_builder), grad-only ops through auto_backward. Shapes,
axes and index tensors are drawn from the draw's rng (``check.rng``) so that they fit
together; ``constant(array)`` passes a drawn index array as a tensor input.
"""
import numpy as np
import pytest

from graphfront.ops.builder import build_op
from graphfront.testing import autotest, constant, random_tensor

N = 20


def dims(check, ndim, low=1, high=5):
    return [int(d) for d in check.rng.integers(low, high, size=ndim)]


def tensor(shape, low=-1.0, high=1.0, requires_grad=True):
    """A float32 tensor generator of exactly ``shape`` (rank 1..5)."""
    names = {f"dim{i}": d for i, d in enumerate(shape)}
    return random_tensor(ndim=len(shape), low=low, high=high, requires_grad=requires_grad, **names)


def ints(check, shape, high, low=0, dtype=np.int64):
    return constant(check.rng.integers(low, high, size=shape).astype(dtype))


def gf_sq(flow, *outs):
    """``outs`` plus the square of each. The loss then has dy = 1 + 2 * out, which depends on
    the trainable inputs, so constant folding cannot replace the backward ops under test."""
    return list(outs) + [flow.math.square(o) for o in outs]


def th_sq(torch, *outs):
    return list(outs) + [torch.square(o) for o in outs]


def build(flow, op_type, inputs, outputs, attrs=None, num=None):
    """One user op through flow.user_op_builder; returns its output blobs."""
    out = build_op(op_type, inputs, attrs, outputs, name=flow.util.unique_str(op_type + "_"), num=num)
    return out if isinstance(out, tuple) else (out,)


# ------------------------------------------------------------------ reshape family, transpose

@autotest(n=N)
def test_reshape_family(check):
    shape = dims(check, int(check.rng.integers(2, 5)))
    n = len(shape)
    start = int(check.rng.integers(0, n))
    end = int(check.rng.integers(start, n)) - (n if check.rng.random() < 0.5 else 0)
    target = [int(np.prod(shape[:1])), -1]
    check(graphfront=lambda flow, x, like: gf_sq(flow, flow.reshape(x, target), flow.reshape_like(x, like),
                                                 flow.flatten(x, start, end)),
          torch=lambda torch, x, like: th_sq(torch, x.reshape(target), x.reshape(like.shape), x.flatten(start, end)),
          x=tensor(shape), like=tensor(shape[::-1], requires_grad=False))


@autotest(n=N)
def test_squeeze_expand_dims(check):
    shape = [int(d) if check.rng.random() < 0.6 else 1 for d in dims(check, int(check.rng.integers(1, 5)), 2)]
    ones = [i for i, d in enumerate(shape) if d == 1]
    axes = [a - len(shape) if check.rng.random() < 0.5 else a for a in ones if check.rng.random() < 0.7]
    axis = int(check.rng.integers(-len(shape) - 1, len(shape) + 1))

    def th_squeeze(x):
        for a in sorted({a % len(shape) for a in axes}, reverse=True):
            x = x.squeeze(a)
        return x.reshape(1) if x.dim() == 0 else x  # OneFlow: squeezing every axis away leaves (1,)

    check(graphfront=lambda flow, x: gf_sq(flow, flow.squeeze(x, axes), flow.squeeze(x), flow.expand_dims(x, axis)),
          torch=lambda torch, x: th_sq(torch, th_squeeze(x), x.reshape([d for d in shape if d != 1] or [1]),
                                       x.unsqueeze(axis)),
          x=tensor(shape))


@autotest(n=N)
def test_transpose(check):
    shape = dims(check, int(check.rng.integers(1, 6)))
    perm = [int(p) for p in check.rng.permutation(len(shape))]
    check(graphfront=lambda flow, x: gf_sq(flow, flow.transpose(x, perm=perm)),
          torch=lambda torch, x: th_sq(torch, x.permute(perm)),
          x=tensor(shape))


# ------------------------------------------------------------------ concat / split / stack

@autotest(n=N)
def test_concat(check):
    shape = dims(check, int(check.rng.integers(1, 5)))
    axis = int(check.rng.integers(-len(shape), len(shape)))
    k = int(check.rng.integers(2, 5))
    xs = []
    for _ in range(k):
        s = list(shape)
        s[axis] = int(check.rng.integers(1, 4))
        xs.append(tensor(s))
    check(graphfront=lambda flow, xs: gf_sq(flow, flow.concat(xs, axis=axis)),
          torch=lambda torch, xs: th_sq(torch, torch.cat(xs, axis)),
          xs=xs)


@autotest(n=N)
def test_split_and_split_like(check):
    shape = dims(check, int(check.rng.integers(1, 4)), 2, 6)
    axis = int(check.rng.integers(0, len(shape)))
    size = shape[axis]
    cuts = sorted(int(c) for c in check.rng.choice(np.arange(1, size), size=int(check.rng.integers(0, size)),
                                                   replace=False)) if size > 1 else []
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [size])]
    keep = [i for i in range(len(sizes)) if check.rng.random() < 0.7] or [0]
    likes = []
    for s in sizes:
        like_shape = list(shape)
        like_shape[axis] = s
        likes.append(tensor(like_shape[:axis + 1], requires_grad=False))

    def gf(flow, x, likes):
        pieces = flow.split(x, sizes, axis=axis)
        outs = build(flow, "split_like", {"in": x, "like": likes}, ["out"], {"axis": axis}, num={"out": len(likes)})
        return gf_sq(flow, *[pieces[i] for i in keep], *[outs[i] for i in keep])

    def th(torch, x, likes):
        pieces = torch.split(x, sizes, axis)
        return th_sq(torch, *[pieces[i] for i in keep] * 2)

    check(graphfront=gf, torch=th, x=tensor(shape), likes=likes)


@autotest(n=N)
def test_stack(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    axis = int(check.rng.integers(-len(shape) - 1, len(shape) + 1))
    xs = [tensor(shape) for _ in range(int(check.rng.integers(1, 4)))]
    check(graphfront=lambda flow, xs: gf_sq(flow, flow.stack(xs, axis=axis)),
          torch=lambda torch, xs: th_sq(torch, torch.stack(xs, axis)),
          xs=xs)


@autotest(n=N)
def test_identity_n(check):
    shapes = [dims(check, int(check.rng.integers(1, 4))) for _ in range(int(check.rng.integers(1, 4)))]
    check(graphfront=lambda flow, xs: gf_sq(flow, *flow.identity_n(xs)),
          torch=lambda torch, xs: th_sq(torch, *xs),
          xs=[tensor(s) for s in shapes])


# ------------------------------------------------------------------ slicing

def _draw_slices(check, shape):
    """Per-dim (start, stop, step) with None/negatives, each selecting at least one element."""
    tups = []
    for n in shape:
        while True:
            step = int(check.rng.choice([1, 1, 2, 3, -1, -2]))
            start = None if check.rng.random() < 0.3 else int(check.rng.integers(-n - 1, n + 1))
            stop = None if check.rng.random() < 0.3 else int(check.rng.integers(-n - 1, n + 1))
            if len(range(*slice(start, stop, step).indices(n))):
                tups.append((start, stop, None if step == 1 and check.rng.random() < 0.5 else step))
                break
    return tups


def _index_lists(shape, tups):
    return [list(range(*slice(b, e, 1 if s is None else s).indices(n))) for n, (b, e, s) in zip(shape, tups)]


def _torch_slice(torch, x, lists):
    for d, idx in enumerate(lists):
        x = torch.index_select(x, d, torch.tensor(idx, dtype=torch.long))
    return x


@autotest(n=N)
def test_slice_v2_and_reverse(check):
    shape = dims(check, int(check.rng.integers(1, 4)), 1, 7)
    tups = _draw_slices(check, shape)
    lists = _index_lists(shape, tups)
    axes = [d for d in range(len(shape)) if check.rng.random() < 0.5] or [0]
    rev = [list(range(n))[::-1] if d in axes else list(range(n)) for d, n in enumerate(shape)]
    check(graphfront=lambda flow, x: gf_sq(flow, flow.slice_v2(x, tups), flow.reverse(x, axes)),
          torch=lambda torch, x: th_sq(torch, _torch_slice(torch, x, lists), _torch_slice(torch, x, rev)),
          x=tensor(shape))


@autotest(n=N)
def test_tf_slice(check):
    shape = dims(check, int(check.rng.integers(1, 4)), 1, 7)
    begin = [int(check.rng.integers(0, n)) for n in shape]
    size = [None if check.rng.random() < 0.2 else -1 if check.rng.random() < 0.2 else
            int(check.rng.integers(1, n - b + 1)) for n, b in zip(shape, begin)]
    lists = [list(range(b, n if s in (None, -1) else b + s)) for n, b, s in zip(shape, begin, size)]
    check(graphfront=lambda flow, x: gf_sq(flow, flow.slice(x, begin, size)),
          torch=lambda torch, x: th_sq(torch, _torch_slice(torch, x, lists)),
          x=tensor(shape))


@autotest(n=N)
def test_slice_update(check):
    shape = dims(check, int(check.rng.integers(1, 4)), 1, 6)
    tups = _draw_slices(check, shape)
    lists = _index_lists(shape, tups)

    def th(torch, x, u):
        y = x.clone()
        y[tuple(torch.tensor(i) for i in np.ix_(*lists))] = u
        return th_sq(torch, y)

    check(graphfront=lambda flow, x, u: gf_sq(flow, flow.slice_update(x, u, tups)), torch=th,
          x=tensor(shape), u=tensor([len(i) for i in lists]))


@autotest(n=N)
def test_narrow(check):
    shape = dims(check, int(check.rng.integers(1, 4)), 1, 6)
    dim = int(check.rng.integers(0, len(shape)))
    start = int(check.rng.integers(-shape[dim], shape[dim]))
    length = int(check.rng.integers(1, shape[dim] - start % shape[dim] + 1))
    gdim = dim - len(shape) if check.rng.random() < 0.5 else dim
    check(graphfront=lambda flow, x: gf_sq(flow, flow.narrow(x, gdim, start, length)),
          torch=lambda torch, x: th_sq(torch, x.narrow(dim, start % shape[dim], length)),
          x=tensor(shape))


# ------------------------------------------------------------------ gather family

@autotest(n=N)
def test_gather(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    axis = int(check.rng.integers(-len(shape), len(shape)))
    idx_shape = dims(check, int(check.rng.integers(1, 3)))
    out_shape = shape[:axis % len(shape)] + idx_shape + shape[axis % len(shape) + 1:]
    dtype = np.int32 if check.rng.random() < 0.5 else np.int64
    check(graphfront=lambda flow, x, i: flow.gather(x, i, axis=axis),
          torch=lambda torch, x, i: torch.index_select(x, axis, i.reshape(-1).long()).reshape(out_shape),
          x=tensor(shape), i=ints(check, idx_shape, shape[axis], dtype=dtype))


@autotest(n=N)
def test_batch_gather(check):
    b = int(check.rng.integers(1, 3))
    batch = dims(check, b)
    n, k = int(check.rng.integers(1, 5)), int(check.rng.integers(1, 5))
    rest = dims(check, int(check.rng.integers(0, 3)))
    inner = int(np.prod(rest)) if rest else 1

    def th(torch, x, i):
        src = x.reshape(int(np.prod(batch)), n, inner)
        idx = i.reshape(int(np.prod(batch)), k, 1).expand(-1, -1, inner)
        return torch.gather(src, 1, idx).reshape(batch + [k] + rest)

    check(graphfront=lambda flow, x, i: flow.gather(x, i, batch_dims=b), torch=th,
          x=tensor(batch + [n] + rest), i=ints(check, batch + [k], n))


@autotest(n=N)
def test_unsorted_segment_sum(check):
    pre, post = dims(check, int(check.rng.integers(0, 2))), dims(check, int(check.rng.integers(0, 2)))
    ids_shape = dims(check, int(check.rng.integers(1, 3)))
    segments = int(check.rng.integers(1, 6))
    axis = len(pre)

    def th(torch, data, fixed, ids, like):
        def segment_sum(d):
            return torch.zeros(pre + [segments] + post).index_add(axis, ids.reshape(-1), d.reshape(pre + [-1] + post))
        return [segment_sum(data), segment_sum(fixed)]

    # unsorted_segment_sum_like has no grad function (v0.6.0): its data is not trainable
    check(graphfront=lambda flow, data, fixed, ids, like: [
              flow.unsorted_segment_sum(data, ids, segments, axis=axis),
              flow.unsorted_segment_sum_like(fixed, ids, like, axis=axis)],
          torch=th, data=tensor(pre + ids_shape + post), fixed=tensor(pre + ids_shape + post, requires_grad=False),
          ids=ints(check, ids_shape, segments), like=tensor(pre + [segments] + post, requires_grad=False))


@autotest(n=N)
def test_unsorted_batch_segment_sum(check):
    batch = dims(check, int(check.rng.integers(1, 3)))
    k, segments = int(check.rng.integers(1, 5)), int(check.rng.integers(1, 5))
    rest = dims(check, int(check.rng.integers(0, 2)))
    inner = int(np.prod(rest)) if rest else 1
    bsz = int(np.prod(batch))

    def th(torch, data, ids):
        out = torch.zeros(bsz, segments, inner)
        idx = ids.reshape(bsz, k, 1).expand(-1, -1, inner)
        return out.scatter_add(1, idx, data.reshape(bsz, k, inner)).reshape(batch + [segments] + rest)

    check(graphfront=lambda flow, data, ids: flow.unsorted_batch_segment_sum(data, ids, segments), torch=th,
          data=tensor(batch + [k] + rest), ids=ints(check, batch + [k], segments))


def _nd_cols(torch, idx):
    return tuple(idx[..., j] for j in range(idx.shape[-1]))


@autotest(n=N)
def test_gather_nd(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    k = int(check.rng.integers(1, len(shape) + 1))
    lead = dims(check, int(check.rng.integers(1, 3)))
    idx = np.stack([check.rng.integers(0, shape[j], size=lead) for j in range(k)], -1)
    check(graphfront=lambda flow, p, i: flow.gather_nd(p, i),
          torch=lambda torch, p, i: p[_nd_cols(torch, i)],
          p=tensor(shape), i=constant(idx.astype(np.int64)))


@autotest(n=N)
def test_scatter_nd_and_tensor_scatter_nd(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    k = int(check.rng.integers(1, len(shape) + 1))
    rows = int(np.prod(shape[:k]))
    m = int(check.rng.integers(1, rows + 1))
    unique = check.rng.choice(rows, size=m, replace=False)
    idx = np.stack(np.unravel_index(unique, shape[:k]), -1).astype(np.int64)
    dup = np.concatenate([idx, idx[:1]])  # one repeated row: scatter_nd and *_add accumulate
    upd_shape = [len(dup)] + shape[k:]

    def th(torch, p, u, uu, i, d):
        zeros = torch.zeros(shape)
        return [zeros.index_put(_nd_cols(torch, d), u, accumulate=True),
                p.index_put(_nd_cols(torch, d), u, accumulate=True),
                p.index_put(_nd_cols(torch, i), uu)]

    check(graphfront=lambda flow, p, u, uu, i, d: [flow.scatter_nd(d, u, shape), flow.tensor_scatter_nd_add(p, d, u),
                                                  flow.tensor_scatter_nd_update(p, i, uu)],
          torch=th, p=tensor(shape), u=tensor(upd_shape), uu=tensor([m] + shape[k:]), i=constant(idx),
          d=constant(dup))


@autotest(n=N)
def test_dim_gather(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    dim = int(check.rng.integers(-len(shape), len(shape)))
    idx_shape = [int(check.rng.integers(1, s + 1)) for s in shape]
    idx_shape[dim] = int(check.rng.integers(1, 5))
    check(graphfront=lambda flow, x, i: flow.dim_gather(x, dim, i),
          torch=lambda torch, x, i: torch.gather(x, dim, i),
          x=tensor(shape), i=ints(check, idx_shape, shape[dim]))


@autotest(n=N)
def test_dim_scatter(check):
    """dim_scatter_add / dim_scatter_add_like against torch.scatter_add (ids may repeat) and
    dim_scatter_update against torch.scatter (ids distinct along dim: a unique winner)."""
    shape = dims(check, int(check.rng.integers(1, 4)))
    dim = int(check.rng.integers(-len(shape), len(shape)))
    idx_shape = [int(check.rng.integers(1, s + 1)) for s in shape]
    perm = np.argsort(check.rng.random(idx_shape[:dim % len(shape)] + [shape[dim]] + idx_shape[dim % len(shape) + 1:]),
                      axis=dim)
    unique = np.take(perm, np.arange(idx_shape[dim]), axis=dim).astype(np.int32)

    def th(torch, x, s, su, i, u):
        return th_sq(torch, x.scatter_add(dim, i, s), x.scatter(dim, u, su),
                     torch.zeros_like(x).scatter_add(dim, i, s))

    check(graphfront=lambda flow, x, s, su, i, u: gf_sq(
              flow, flow.dim_scatter_add(x, dim, i, s), flow.dim_scatter_update(x, dim, u, su),
              flow.dim_scatter_add_like(x, dim, i, s)),
          torch=th, x=tensor(shape), s=tensor(idx_shape), su=tensor(idx_shape),
          i=ints(check, idx_shape, shape[dim]), u=constant(unique))


# ------------------------------------------------------------------ expand / broadcast_like

@autotest(n=N)
def test_expand(check):
    shape = [1 if check.rng.random() < 0.5 else int(d) for d in dims(check, int(check.rng.integers(1, 4)))]
    lead = dims(check, int(check.rng.integers(0, 3)))
    target = lead + [int(check.rng.integers(1, 4)) if s == 1 and check.rng.random() < 0.7 else
                     (-1 if check.rng.random() < 0.3 else s) for s in shape]
    check(graphfront=lambda flow, x: gf_sq(flow, flow.expand(x, target)),
          torch=lambda torch, x: th_sq(torch, x.expand(target)),
          x=tensor(shape))


@autotest(n=N)
def test_broadcast_like(check):
    like = dims(check, int(check.rng.integers(1, 4)))
    axes = [a for a in range(len(like)) if check.rng.random() < 0.5] or [0]
    x_shape = [1 if a in axes else d for a, d in enumerate(like)]
    check(graphfront=lambda flow, x, l: gf_sq(flow, flow.broadcast_like(x, l, broadcast_axes=axes)),
          torch=lambda torch, x, l: th_sq(torch, x.expand(like)),
          x=tensor(x_shape), l=tensor(like, requires_grad=False))


# ------------------------------------------------------------------ padding

@autotest(n=N)
def test_pad_and_pad_grad(check):
    shape = dims(check, int(check.rng.integers(1, 5)))
    pads = [(int(check.rng.integers(0, 3)), int(check.rng.integers(0, 3))) for _ in shape]
    value = float(check.rng.choice([0.0, 1.5, -2.0]))
    crop = [(min(b, n // 2), min(a, n - n // 2 - 1) if n > 1 else 0) for (b, a), n in zip(pads, shape)]
    flat = [p for b, a in reversed(pads) for p in (b, a)]
    index = tuple(slice(b, n - a) for (b, a), n in zip(crop, shape))
    check(graphfront=lambda flow, x: gf_sq(flow, flow.pad(x, pads, constant_value=value), flow.pad_grad(x, crop)),
          torch=lambda torch, x: th_sq(torch, torch.nn.functional.pad(x, flat, value=value), x[index]),
          x=tensor(shape))


@autotest(n=N)
def test_same_padding(check):
    """same_padding (and same_padding_grad through auto_backward) against TensorFlow's SAME
    rule written out here: out = ceil(size / stride), the odd pad before for SAME_LOWER."""
    n = int(check.rng.integers(1, 4))
    first = bool(check.rng.random() < 0.5)
    spatial = dims(check, n, 1, 9)
    kernel, strides, dilation = dims(check, n, 1, 4), dims(check, n, 1, 4), dims(check, n, 1, 3)
    mode = str(check.rng.choice(["SAME_LOWER", "SAME_UPPER"]))
    pads = []
    for size, k, s, d in zip(spatial, kernel, strides, dilation):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        pads.append(((total + 1) // 2, total // 2) if mode == "SAME_LOWER" else (total // 2, (total + 1) // 2))
    shape = [2, 3] + spatial if first else [2] + spatial + [3]
    every = [(0, 0)] * 2 + pads if first else [(0, 0)] + pads + [(0, 0)]
    flat = [p for b, a in reversed(every) for p in (b, a)]
    fmt = ("NCW", "NCHW", "NCDHW")[n - 1] if first else ("NWC", "NHWC", "NDHWC")[n - 1]
    check(graphfront=lambda flow, x: flow.same_padding(x, mode, fmt, kernel, strides, dilation),
          torch=lambda torch, x: torch.nn.functional.pad(x, flat), x=tensor(shape))


@autotest(n=N)
def test_constant_padnd(check):
    # every draw exercises constant_pad1d, 2d (+ zero_pad2d) and 3d
    shapes = {n: dims(check, n + 2) for n in (1, 2, 3)}
    paddings = {n: [int(p) for p in check.rng.integers(0, 3, size=2 * n)] for n in (1, 2, 3)}
    value = float(check.rng.choice([0.0, 0.5, -1.0]))

    def gf(flow, x1, x2, x3):
        return gf_sq(flow, flow.constant_pad1d(x1, paddings[1], constant_value=value),
                     flow.constant_pad2d(x2, paddings[2], constant_value=value), flow.zero_pad2d(x2, paddings[2]),
                     flow.constant_pad3d(x3, paddings[3], constant_value=value))

    def th(torch, x1, x2, x3):
        pad = torch.nn.functional.pad
        return th_sq(torch, pad(x1, paddings[1], value=value), pad(x2, paddings[2], value=value),
                     pad(x2, paddings[2]), pad(x3, paddings[3], value=value))

    check(graphfront=gf, torch=th, x1=tensor(shapes[1]), x2=tensor(shapes[2]), x3=tensor(shapes[3]))


@pytest.mark.slow
@autotest(n=N)
def test_reflection_and_replication_pad2d(check):
    shape = dims(check, 2) + dims(check, 2, 2, 6)
    padding = [int(check.rng.integers(0, shape[3])) for _ in range(2)] + \
        [int(check.rng.integers(0, shape[2])) for _ in range(2)]
    check(graphfront=lambda flow, x: gf_sq(flow, flow.reflection_pad2d(x, padding),
                                           flow.replication_pad2d(x, padding)),
          torch=lambda torch, x: th_sq(torch, torch.nn.functional.pad(x, padding, mode="reflect"),
                                       torch.nn.functional.pad(x, padding, mode="replicate")),
          x=tensor(shape))


# ------------------------------------------------------------------ roll / flip / diag

@autotest(n=N)
def test_roll(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    if check.rng.random() < 0.3:
        shifts, dims_ = [int(check.rng.integers(-7, 8))], None
    else:
        dims_ = [int(d) for d in check.rng.permutation(len(shape))[:int(check.rng.integers(1, len(shape) + 1))]]
        shifts = [int(s) for s in check.rng.integers(-7, 8, size=len(dims_))]
    check(graphfront=lambda flow, x: gf_sq(flow, flow.roll(x, shifts, dims_)),
          torch=lambda torch, x: th_sq(torch, torch.roll(x, shifts, dims_) if dims_ else torch.roll(x, shifts[0])),
          x=tensor(shape))


@autotest(n=N, auto_backward=False)
def test_flip_and_flip_grad(check):
    # v0.6.0's flip has no grad function: forward only
    shape = dims(check, int(check.rng.integers(1, 4)))
    dims_ = [int(d) - (len(shape) if check.rng.random() < 0.5 else 0)
             for d in check.rng.permutation(len(shape))[:int(check.rng.integers(1, len(shape) + 1))]]
    check(graphfront=lambda flow, x: [flow.flip(x, dims_), build(flow, "flip_grad", {"dy": x}, ["dx"],
                                                                 {"dims": dims_})[0]],
          torch=lambda torch, x: [torch.flip(x, dims_)] * 2,
          x=tensor(shape))


@autotest(n=N)
def test_diag(check):
    if check.rng.random() < 0.5:
        shape = dims(check, 1)
        d = int(check.rng.integers(-3, 4))
    else:
        shape = dims(check, 2)
        d = int(check.rng.integers(-shape[0] + 1, shape[1]))
    check(graphfront=lambda flow, x: gf_sq(flow, flow.diag(x, d)),
          torch=lambda torch, x: th_sq(torch, torch.diag(x, d)), x=tensor(shape))


# ------------------------------------------------------------------ sources and *_like (forward only)

@autotest(n=N, auto_backward=False)
def test_constant_zeros_ones(check):
    shape = dims(check, int(check.rng.integers(0, 4)))
    dtype_name = str(check.rng.choice(["float32", "float64", "int32", "int64", "int8"]))
    value = float(np.round(check.rng.uniform(-5, 5), 2)) if "float" in dtype_name else int(check.rng.integers(-5, 6))

    def gf(flow, x):
        dtype = getattr(flow, dtype_name)
        return [flow.constant(value, dtype, shape), flow.zeros(shape, dtype), flow.ones(shape, dtype), x]

    def th(torch, x):
        dtype = getattr(torch, dtype_name)
        return [torch.full(shape, value, dtype=dtype), torch.zeros(shape, dtype=dtype),
                torch.ones(shape, dtype=dtype), x]

    check(graphfront=gf, torch=th, x=tensor([1]))


@autotest(n=N, auto_backward=False)
def test_like_ops(check):
    # more than 2**16 elements: the constant-folding pass leaves such blobs to run time,
    # so the shape-only ops stay in the completed job (smaller ones are folded)
    shape = dims(check, int(check.rng.integers(0, 3))) + [(1 << 16) + int(check.rng.integers(1, 100))]
    value = float(check.rng.uniform(-3, 3))

    def gf(flow, x):
        return [build(flow, "ones_like", {"x": x}, ["y"])[0], build(flow, "zero_like", {"like": x}, ["out"])[0],
                flow.ones_like(x), flow.zeros_like(x, dtype=flow.int32), flow.constant_like(x, value)]

    check(graphfront=gf,
          torch=lambda torch, x: [torch.ones_like(x), torch.zeros_like(x), torch.ones_like(x),
                                  torch.zeros_like(x, dtype=torch.int32), torch.full_like(x, value)],
          x=tensor(shape))


@autotest(n=N, auto_backward=False)
def test_one_hot(check):
    shape = dims(check, int(check.rng.integers(1, 3)))
    depth = int(check.rng.integers(1, 6))
    axis = int(check.rng.integers(-1, len(shape) + 1))
    fp = check.rng.random() < 0.5
    on, off = (2.5, -0.5) if fp else (3, 1)
    dtype_name = "float32" if fp else "int32"

    def th(torch, i):
        hot = torch.nn.functional.one_hot(i.long(), depth).bool()
        out = torch.where(hot, torch.tensor(on), torch.tensor(off)).to(getattr(torch, dtype_name))
        return out.movedim(-1, axis)

    check(graphfront=lambda flow, i: flow.one_hot(i, depth, on_value=on, off_value=off, axis=axis,
                                                  dtype=getattr(flow, dtype_name)),
          torch=th, i=ints(check, shape, depth, dtype=np.int32))


@autotest(n=N, auto_backward=False)
def test_range_and_eye(check):
    if check.rng.random() < 0.5:
        start, limit, delta = (int(v) for v in check.rng.integers(-10, 10, size=3))
        delta = delta or 1
        dtype_name = "int64"
    else:
        start, limit = (float(np.round(v, 1)) for v in check.rng.uniform(-5, 5, size=2))
        delta = float(np.round(check.rng.choice([-1, 1]) * check.rng.uniform(0.2, 2), 1))
        dtype_name = str(check.rng.choice(["float32", "float64"]))
    if (limit - start) * delta <= 0:
        limit = start + 5 * delta
    rows, cols = int(check.rng.integers(1, 5)), int(check.rng.integers(1, 5))
    check(graphfront=lambda flow, x: [flow.range(start, limit, delta, dtype=getattr(flow, dtype_name)),
                                      flow.eye(rows, cols), flow.range(rows), x],
          torch=lambda torch, x: [torch.arange(start, limit, delta, dtype=getattr(torch, dtype_name)),
                                  torch.eye(rows, cols), torch.arange(rows), x],
          x=tensor([1]))
