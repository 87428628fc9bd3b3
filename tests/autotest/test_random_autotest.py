"""AutoTest of flow.random's ops (graphfront/ops/random_ops.py) against PyTorch eager:
bernoulli statistically (value frequencies), shuffle and the permutation indices by
content (a permutation of the rows / of range(n), not the identity more often than
chance over the draws), with the gradient of shuffle routed back through its own
permutation."""
import numpy as np

from graphfront.testing import autotest, constant, random_tensor
from graphfront.testing.compare import permutation_problems


def _rows_permuted(case):
    """Output 0 holds the rows of input 'x' in some order (a permutation that is not the
    identity more often than chance); the gradient of 'x' is the cotangent of output 0
    sent back through that same permutation: ``dx[p[i]] = v[i]``."""
    x, out = case.inputs["x"], case.outputs[0]
    rows = x.reshape(x.shape[0], -1)
    where = {r.tobytes(): i for i, r in enumerate(rows)}
    if len(where) != len(rows):
        return ["the drawn rows of 'x' are not distinct, the permutation cannot be recovered"]
    perm = [where.get(r.tobytes(), -1) for r in out.reshape(out.shape[0], -1)]
    problems = permutation_problems(case, perm, "the row order of output[0]")
    if problems or not case.train:
        return problems
    expected = np.empty_like(case.cotangents[0])
    expected[perm] = case.cotangents[0]
    if not np.array_equal(case.grads["x"], expected):
        problems.append("gradient of 'x' is not the cotangent of output[0] routed back through the permutation")
    return problems


def _is_permutation(case):
    return permutation_problems(case, case.outputs[0])


@autotest(n=10, auto_backward=False)
def test_bernoulli(check):
    shape = [int(check.rng.integers(20, 40)), int(check.rng.integers(20, 40))]
    p = float(check.rng.uniform(0.1, 0.9))
    seed = int(check.rng.integers(0, 2 ** 31)) if check.rng.random() < 0.5 else None
    int_out = bool(check.rng.random() < 0.5)

    def gf(flow, x):
        return flow.random.bernoulli(x, seed=seed, dtype=flow.int32 if int_out else None)

    def th(torch, x):
        y = torch.bernoulli(x)
        return y.int() if int_out else y

    check(graphfront=gf, torch=th, compare="statistics", x=constant(np.full(shape, p, np.float32)))


@autotest(n=10)
def test_shuffle(check):
    n = int(check.rng.integers(1, 12))
    rest = [int(d) for d in check.rng.integers(1, 4, size=int(check.rng.integers(0, 3)))]
    seed = int(check.rng.integers(0, 1000)) if check.rng.random() < 0.5 else None
    check(graphfront=lambda flow, x: flow.random.shuffle(x, seed=seed),
          torch=lambda torch, x: x[torch.randperm(x.shape[0])],
          compare=_rows_permuted,
          x=random_tensor(ndim=1 + len(rest), low=-5, high=5, **{f"dim{i}": d for i, d in enumerate([n] + rest)}))


@autotest(n=10, auto_backward=False)
def test_generate_random_batch_permutation_indices(check):
    n = int(check.rng.integers(1, 30))
    check(graphfront=lambda flow, x: flow.random.generate_random_batch_permutation_indices(x),
          torch=lambda torch, x: torch.randperm(x.shape[0], dtype=torch.int32),
          compare=_is_permutation, x=random_tensor(ndim=2, dim0=n, dim1=2, requires_grad=False))
