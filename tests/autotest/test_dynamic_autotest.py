"""AutoTest of the dynamic-shape ops (graphfront/ops/dynamic_ops.py) against PyTorch eager:
argwhere (+ the sync_dynamic_resize system op), unique_with_counts,
indexed_slices_reduce_sum, cast_to_static_shape, and the broadcast_to_compatible_with,
dynamic_reshape (+ dynamic_reshape_like) and shape_elem_cnt system ops."""
import numpy as np

from graphfront.testing import autotest, constant, random_tensor

N = 12


def dims(check, ndim, low=1, high=6):
    return [int(d) for d in check.rng.integers(low, high, size=ndim)]


def sparse(check, shape, dtype=np.float32):
    """Values with about half of the elements exactly zero (sometimes all of them)."""
    x = check.rng.integers(-3, 4, size=shape).astype(dtype)
    if check.rng.random() < 0.1:
        x[...] = 0
    return constant(x)


@autotest(n=N, auto_backward=False)
def test_argwhere(check):
    shape = dims(check, int(check.rng.integers(1, 5)))
    dtype = check.rng.choice(["int32", "int64"])

    def gf(flow, x):
        return flow.argwhere(x, dtype=getattr(flow, dtype))

    check(graphfront=gf, torch=lambda torch, x: torch.nonzero(x).to(getattr(torch, dtype)),
          x=sparse(check, shape, np.float32 if check.rng.random() < 0.5 else np.int32))


@autotest(n=N, auto_backward=False)
def test_argwhere_size_and_static_cast(check):
    """output_size of the raw op, and cast_to_static_shape zero-padding the dynamic rows."""
    shape = dims(check, int(check.rng.integers(1, 4)))
    total = int(np.prod(shape))

    def gf(flow, x):
        indices = flow.argwhere(x, dtype=flow.int64)
        _, size = flow.user_op_builder("argwhere_raw").Op("argwhere").Input("input", [x]).Attr(
            "dtype", flow.int64).Output("output").Output("output_size").Build().InferAndTryRun().RemoteBlobList()
        return [flow.cast_to_static_shape(indices), size]

    def th(torch, x):
        nz = torch.nonzero(x)
        static = torch.zeros(total, len(shape), dtype=torch.int64)
        static[:nz.shape[0]] = nz
        return [static, torch.tensor([nz.shape[0]])]

    check(graphfront=gf, torch=th, x=sparse(check, shape))


@autotest(n=N, auto_backward=False)
def test_unique_with_counts(check):
    n = int(check.rng.integers(1, 20))
    x = check.rng.integers(-4, 5, size=n).astype(check.rng.choice([np.int32, np.int64, np.float32]))
    out_idx = check.rng.choice(["int32", "int64"])

    def th(torch, x):
        y, idx, count = torch.unique(x, sorted=True, return_inverse=True, return_counts=True)
        k = y.shape[0]
        it = getattr(torch, out_idx)
        pad = torch.zeros(n - k, dtype=x.dtype)
        return [torch.cat([y, pad]), idx.to(it), torch.cat([count, torch.zeros(n - k, dtype=count.dtype)]).to(it),
                torch.tensor([k], dtype=it)]

    check(graphfront=lambda flow, x: list(flow.experimental.unique_with_counts(x, out_idx=getattr(flow, out_idx))),
          torch=th, x=constant(x))


@autotest(n=N, auto_backward=False)
def test_indexed_slices_reduce_sum(check):
    ishape = dims(check, int(check.rng.integers(1, 3)), 1, 5)
    vshape = dims(check, int(check.rng.integers(0, 3)), 1, 4)
    indices = check.rng.integers(0, 5, size=ishape).astype(check.rng.choice([np.int32, np.int64]))

    def th(torch, ind, val):
        flat = ind.reshape(-1)
        rows = val.reshape(flat.shape[0], *vshape)
        uniq, inv = torch.unique(flat, sorted=True, return_inverse=True)
        sums = torch.zeros_like(rows).index_add_(0, inv, rows)
        return [torch.cat([uniq, torch.zeros(flat.shape[0] - uniq.shape[0], dtype=uniq.dtype)]), sums,
                torch.tensor([uniq.shape[0]])]

    check(graphfront=lambda flow, ind, val: list(flow.experimental.indexed_slices_reduce_sum(ind, val)),
          torch=th, ind=constant(indices),
          val=random_tensor(ndim=len(ishape) + len(vshape), requires_grad=False,
                            **{f"dim{i}": d for i, d in enumerate(ishape + vshape)}))


@autotest(n=N)
def test_cast_to_static_shape_grad(check):
    """A dynamic blob (argwhere rows) cast to static and multiplied by a trainable blob: the
    gradient flows through cast_to_static_shape's identity grad."""
    n = int(check.rng.integers(2, 8))

    def gf(flow, c, w):
        idx = flow.cast(flow.cast_to_static_shape(flow.argwhere(c)), flow.float32)
        return flow.math.multiply(idx, w)

    def th(torch, c, w):
        nz = torch.nonzero(c).float()
        static = torch.zeros(n, 1)
        static[:nz.shape[0]] = nz
        return static * w

    check(graphfront=gf, torch=th, c=sparse(check, [n]), w=random_tensor(ndim=2, dim0=n, dim1=1, low=-2, high=2))


@autotest(n=N, auto_backward=False)
def test_broadcast_to_compatible_with_dynamic(check):
    """The broadcast follows the run-time rows of a dynamic compatible blob (argwhere's)."""
    shape = dims(check, int(check.rng.integers(1, 4)))

    def gf(flow, x, v):
        return flow.broadcast_to_compatible_with(v, [flow.argwhere(x, dtype=flow.int32)])

    check(graphfront=gf, torch=lambda torch, x, v: v.expand(torch.nonzero(x).shape[0], len(shape)),
          x=sparse(check, shape), v=random_tensor(ndim=2, dim0=1, dim1=len(shape), low=-2, high=2))


def nonempty(check, n):
    """A 1-D int32 condition with at least one non-zero element."""
    x = check.rng.integers(-2, 3, size=n).astype(np.int32)
    x[int(check.rng.integers(0, n))] = 1
    return constant(x)


@autotest(n=N)
def test_dynamic_reshape_takes_its_minus_one_at_run_time(check):
    """flow.reshape of a dynamic blob is dynamic_reshape_conf: (k, 1) rows of argwhere to (-1,)
    keeps the k run-time rows; its gradient (dynamic_reshape_like_conf) reaches w through a sum
    (AutoTest draws cotangents of static outputs only)."""
    n = int(check.rng.integers(2, 8))
    shape = [-1] if check.rng.random() < 0.5 else [-1, 1, 1]

    def gf(flow, c, w):
        flat = flow.reshape(flow.cast(flow.argwhere(c), flow.float32) * w, shape)
        return flow.cast_to_static_shape(flow.math.reduce_sum(flat * flat, axis=list(range(len(shape)))))

    def th(torch, c, w):
        flat = (torch.nonzero(c).float() * w).reshape(shape)
        return (flat * flat).sum().reshape(1)

    check(graphfront=gf, torch=th, c=nonempty(check, n), w=random_tensor(ndim=2, dim0=1, dim1=1, low=-2, high=2))


@autotest(n=N, auto_backward=False)
def test_run_time_element_counts(check):
    """elem_cnt / reduced_shape_elem_cnt (shape_elem_cnt_conf) count a dynamic blob's run-time
    elements, reduce_mean of a dynamic blob divides by them (as OneFlow), and nonzero is
    argwhere transposed."""
    n = int(check.rng.integers(2, 8))
    dtype = check.rng.choice(["int32", "int64", "float32"])

    def gf(flow, c, v):
        rows = flow.cast(flow.argwhere(c), flow.float32) * v
        return [flow.elem_cnt(rows, dtype=getattr(flow, dtype)), flow.math.reduced_shape_elem_cnt(rows, [0]),
                flow.math.reduce_mean(rows, axis=0), flow.math.reduce_mean(rows), flow.nonzero(c),
                flow.reshape(rows, (-1, 1))]

    def th(torch, c, v):
        rows = torch.nonzero(c).float() * v
        return [torch.tensor([rows.numel()], dtype=getattr(torch, dtype)), torch.tensor([rows.shape[0]], dtype=torch.int32),
                rows.mean(0), rows.mean().reshape(1), torch.nonzero(c).T.to(torch.int32), rows.reshape(-1, 1)]

    check(graphfront=gf, torch=th, c=nonempty(check, n), v=random_tensor(ndim=2, dim0=1, dim1=3, low=-2, high=2))
