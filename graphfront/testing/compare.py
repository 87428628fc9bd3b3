"""How the AutoTest compares a draw's graphfront results with the PyTorch ones.

``check(..., compare=...)`` selects the comparison:

* ``"values"`` (default): every output and every input gradient must have the same
  shape and the same dtype on both sides and equal values:
  ``|graphfront - torch| <= atol + rtol * |torch|`` elementwise (numpy ``isclose``,
  NaN equal to NaN); integer and bool results must be equal.
* ``"statistics"``: for ops whose kernels draw random numbers (the two sides cannot
  draw the same numbers). Shapes and kinds must agree; floating results must agree in
  the fraction of exact zeros (binomial tolerance), the mean and the variance (within
  ``sigmas`` standard errors); integer and bool results in the frequency of every
  value.
* a callable ``compare(case) -> None | list of problems`` (raise AssertionError or
  return problem strings), e.g. :func:`dropout_statistics` and
  :func:`mask_statistics`; the shape/dtype agreement is checked first.

A :class:`Case` carries the resolved arguments and both sides' results as numpy arrays.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

SIGMAS = 5.0  # standard errors allowed by the statistical comparisons


@dataclasses.dataclass
class Case:
    """One draw's inputs and results, as numpy arrays.

    Attributes:
        kwargs: the resolved keyword arguments (tensors as arrays).
        inputs: tensor leaf name -> array (``x``; ``xs_0``, ``xs_1`` for lists).
        outputs / torch_outputs: the flattened outputs of each side.
        grads / torch_grads: leaf name -> gradient of ``sum_i(out_i * cotangents[i])``
            (a vector-Jacobian product), for trainable inputs of train draws (empty
            otherwise).
        train: whether gradients were computed.
        rtol, atol: the autotest's tolerances.
        cotangents: output index -> the random float32 upstream gradient of that
            floating output (train draws; the same array on both sides).
        dtypes / torch_dtypes: the outputs' dtype names on each side (graphfront's
            declared blob dtypes, torch's tensor dtypes: ``bfloat16`` is not lost in the
            numpy conversion); empty lists fall back to the arrays' dtypes.
        history: a dict shared by the draws of one run, where a comparer keeps the
            evidence that only the draws together can give (see
            :func:`permutation_problems`).
    """

    kwargs: dict
    inputs: dict
    outputs: list
    grads: dict
    torch_outputs: list
    torch_grads: dict
    train: bool
    rtol: float
    atol: float
    cotangents: dict = dataclasses.field(default_factory=dict)
    dtypes: list = dataclasses.field(default_factory=list)
    torch_dtypes: list = dataclasses.field(default_factory=list)
    history: dict = dataclasses.field(default_factory=dict)


def kind(a: np.ndarray) -> str:
    """``floating``, ``integer``, ``bool`` or ``complex``: what the sides must agree on."""
    k = a.dtype.kind
    return {"f": "floating", "i": "integer", "u": "integer", "b": "bool", "c": "complex"}.get(k, a.dtype.name)


def _pairs(case):
    for i, (a, b) in enumerate(zip(case.outputs, case.torch_outputs)):
        yield f"output[{i}]", a, b
    for name in sorted(case.torch_grads):
        if name in case.grads:
            yield f"gradient of '{name}'", case.grads[name], case.torch_grads[name]


def structure_problems(case: Case) -> list:
    """Output count, and the exact shape and dtype of every output and gradient."""
    problems = []
    if len(case.outputs) != len(case.torch_outputs):
        return [f"graphfront returned {len(case.outputs)} output(s), torch {len(case.torch_outputs)}"]
    missing = sorted(set(case.torch_grads) - set(case.grads))
    if missing:
        problems.append(f"graphfront computed no gradient for {missing}")
    dtypes = dict(zip((f"output[{i}]" for i in range(len(case.outputs))), zip(case.dtypes, case.torch_dtypes)))
    for what, a, b in _pairs(case):
        if a.shape != b.shape:
            problems.append(f"{what}: shape {a.shape} (graphfront) vs {b.shape} (torch)")
        da, db = dtypes.get(what, (a.dtype.name, b.dtype.name))
        if da != db:
            problems.append(f"{what}: dtype {da} (graphfront) vs {db} (torch)")
    return problems


def _value_problem(what, a, b, rtol, atol):
    if kind(a) in ("integer", "bool"):
        bad = a != b
        if not bad.any():
            return None
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return (f"{what}: {int(bad.sum())} of {bad.size} elements differ; first at index {idx}: "
                f"graphfront {a[idx]!r} vs torch {b[idx]!r}")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    close = np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    diff = np.where(close, 0.0, np.nan_to_num(np.abs(a64 - b64), nan=np.inf, posinf=np.inf))
    idx = np.unravel_index(int(np.argmax(diff)), a.shape) if a.ndim else ()
    idx = tuple(int(i) for i in idx)
    return (f"{what}: {int((~close).sum())} of {close.size} elements differ beyond rtol={rtol}, atol={atol}; "
            f"worst at index {idx}: graphfront {float(a64[idx])!r} vs torch {float(b64[idx])!r} "
            f"(abs diff {abs(a64[idx] - b64[idx]):.3g})")


def value_problems(case: Case) -> list:
    """Elementwise comparison of every output and gradient (see module docstring)."""
    out = []
    for what, a, b in _pairs(case):
        p = _value_problem(what, a, b, case.rtol, case.atol)
        if p:
            out.append(p)
    return out


def assert_close_at_scale(actual, desired, rtol=1e-5, err_msg=""):
    """Assert ``|actual - desired| <= rtol * max|desired|`` elementwise: float32 results
    of two runs of one computation that sum its terms in different orders (devices,
    lowerings, kernels). A result such as a logit or a per-sample cross entropy is a sum
    of terms about as large as the array's largest magnitude, so its rounding error
    scales with that magnitude, not with its own (a small result after cancellation
    carries the absolute error of the large ones).

    Raises AssertionError (numpy's, naming the worst element) otherwise."""
    desired = np.asarray(desired)
    scale = float(np.abs(desired).max()) if desired.size else 0.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale, err_msg=err_msg)


def fraction_tolerance(p: float, n: int, sigmas: float = SIGMAS, samples: int = 1) -> float:
    """Allowed deviation of an observed frequency from ``p`` over ``n`` Bernoulli trials.

    ``samples=2`` for the difference of two independent frequencies. The variance is
    floored at ``1/n`` so that a rare event still gets a tolerance; plus ``1/n`` for
    the discreteness of a count.
    """
    if n == 0:
        return 1.0
    var = max(p * (1 - p), 1.0 / n)
    return sigmas * math.sqrt(samples * var / n) + 1.0 / n


def _moments(a):
    a = a.astype(np.float64).ravel()
    a = a[np.isfinite(a)]
    if a.size == 0:
        return 0, 0.0, 0.0, 0.0
    m = a.mean()
    c = a - m
    return a.size, m, (c ** 2).mean(), (c ** 4).mean()


def _statistics_problem(what, a, b, rtol, atol, sigmas):
    n = a.size
    if n == 0:
        return None
    if kind(a) in ("integer", "bool"):
        for v in np.union1d(np.unique(a), np.unique(b)):
            pa, pb = float((a == v).mean()), float((b == v).mean())
            tol = fraction_tolerance((pa + pb) / 2, n, sigmas, samples=2)
            if abs(pa - pb) > tol:
                return (f"{what}: frequency of value {v!r} is {pa:.4f} (graphfront) vs {pb:.4f} (torch), "
                        f"tolerance {tol:.4f} over {n} elements")
        return None
    za, zb = float((a == 0).mean()), float((b == 0).mean())
    tol = fraction_tolerance((za + zb) / 2, n, sigmas, samples=2)
    if abs(za - zb) > tol:
        return (f"{what}: fraction of zeros {za:.4f} (graphfront) vs {zb:.4f} (torch), tolerance {tol:.4f} "
                f"over {n} elements")
    na, ma, va, m4a = _moments(a)
    nb, mb, vb, m4b = _moments(b)
    if na != nb:
        return f"{what}: {n - na} non-finite elements (graphfront) vs {n - nb} (torch)"
    if na == 0:
        return None
    tol_m = sigmas * math.sqrt((va + vb) / na) + atol + rtol * max(abs(ma), abs(mb))
    if abs(ma - mb) > tol_m:
        return f"{what}: mean {ma:.6g} (graphfront) vs {mb:.6g} (torch), tolerance {tol_m:.3g} over {na} elements"
    tol_v = sigmas * math.sqrt(max(m4a - va ** 2, 0) / na + max(m4b - vb ** 2, 0) / na) + atol + \
        rtol * max(va, vb)
    if abs(va - vb) > tol_v:
        return (f"{what}: variance {va:.6g} (graphfront) vs {vb:.6g} (torch), tolerance {tol_v:.3g} over "
                f"{na} elements")
    return None


def statistics_problems(case: Case, sigmas: float = SIGMAS) -> list:
    """Statistical comparison of every output and gradient (see module docstring)."""
    out = []
    for what, a, b in _pairs(case):
        p = _statistics_problem(what, a, b, case.rtol, case.atol, sigmas)
        if p:
            out.append(p)
    return out


def dropout_statistics(x="x", rate="rate", output=0, sigmas: float = SIGMAS):
    """Comparer for dropout-like ops: ``out = x * mask / (1 - rate)``, ``dx = v * mask / (1 - rate)``.

    ``x`` and ``rate`` name the keyword arguments holding the input tensor and the drop
    rate; ``output`` indexes the dropped-out output (``v`` is its cotangent). Checks, on
    the graphfront side: the gradient of ``x`` (train draws) divided by ``v`` only takes
    the values 0 and ``1/(1-rate)``, and defines the keep-mask (else the mask is
    ``out != 0``); ``out == x * mask / (1-rate)``;
    the kept fraction is ``1 - rate`` within ``sigmas`` binomial standard errors; and
    the zero fraction of the output agrees with torch's statistically.
    """
    def compare(case: Case):
        xv = np.asarray(case.kwargs[x], dtype=np.float64)
        r = float(case.kwargs[rate])
        scale = 1.0 / (1.0 - r)
        out = case.outputs[output].astype(np.float64)
        problems = []
        if out.shape != xv.shape:
            return [f"output[{output}] has shape {out.shape}, input '{x}' {xv.shape}"]
        if case.train and x in case.grads:
            g = case.grads[x].astype(np.float64) / case.cotangents[output].astype(np.float64)
            mask = g != 0
            if not np.allclose(g[mask], scale, rtol=case.rtol, atol=case.atol):
                bad = g[mask][~np.isclose(g[mask], scale, rtol=case.rtol, atol=case.atol)]
                problems.append(f"gradient of '{x}' takes values other than 0 and 1/(1-rate) = {scale:.6g}: "
                                f"e.g. {bad[:3].tolist()}")
        else:
            mask = out != 0
        expected = xv * mask * scale
        if not np.allclose(out, expected, rtol=case.rtol, atol=case.atol):
            worst = np.unravel_index(int(np.argmax(np.abs(out - expected))), out.shape)
            problems.append(f"output[{output}] != {x} * mask / (1 - rate): at index {tuple(map(int, worst))} "
                            f"{out[worst]!r} vs {expected[worst]!r}")
        n = mask.size
        keep = float(mask.mean()) if n else 1.0
        tol = fraction_tolerance(1 - r, n, sigmas)
        if abs(keep - (1 - r)) > tol:
            problems.append(f"kept fraction {keep:.4f} differs from 1 - rate = {1 - r:.4f} by more than {tol:.4f} "
                            f"over {n} elements")
        p = _statistics_problem(f"output[{output}]", case.outputs[output], case.torch_outputs[output],
                                case.rtol, case.atol, sigmas)
        if p:
            problems.append(p)
        return problems
    compare.__qualname__ = f"dropout_statistics(x={x!r}, rate={rate!r}, output={output})"
    return compare


def mask_statistics(rate="rate", output=0, sigmas: float = SIGMAS):
    """Comparer for random keep-masks (``random_mask_like``): values in {0, 1}, kept fraction ``1 - rate``.

    ``rate`` names the keyword argument holding the drop rate; ``output`` indexes the
    mask output. The value frequencies are also compared with torch's statistically.
    """
    def compare(case: Case):
        r = float(case.kwargs[rate])
        m = case.outputs[output]
        problems = []
        values = np.unique(m)
        if not set(values.tolist()) <= {0, 1}:
            problems.append(f"output[{output}] takes values {values[:6].tolist()}, expected only 0 and 1")
        n = m.size
        keep = float((m == 1).mean()) if n else 1.0
        tol = fraction_tolerance(1 - r, n, sigmas)
        if abs(keep - (1 - r)) > tol:
            problems.append(f"kept fraction {keep:.4f} differs from 1 - rate = {1 - r:.4f} by more than {tol:.4f} "
                            f"over {n} elements")
        p = _statistics_problem(f"output[{output}]", m, case.torch_outputs[output], case.rtol, case.atol, sigmas)
        if p:
            problems.append(p)
        return problems
    compare.__qualname__ = f"mask_statistics(rate={rate!r}, output={output})"
    return compare


IDENTITY_ALPHA = 1e-6  # a true random permutation fails the identity test of a run with at most this probability


def permutation_problems(case: Case, perm, what="output[0]") -> list:
    """``perm`` must be a permutation of ``range(len(perm))`` that is not the identity more
    often than chance over the draws of the run.

    A uniform permutation of ``n`` elements is the identity with probability ``1/n!``;
    the draws' identities are counted in ``case.history`` and the run fails at the first
    draw where the probability of seeing at least that many identities (Poisson-binomial
    tail over the draws so far) falls below :data:`IDENTITY_ALPHA`.
    """
    perm = np.asarray(perm).ravel()
    n = perm.size
    if not np.array_equal(np.sort(perm), np.arange(n)):
        return [f"{what} {perm[:12].tolist()} is not a permutation of range({n})"]
    draws = case.history.setdefault("identity_draws", [])
    draws.append((n, bool(np.array_equal(perm, np.arange(n)))))
    k = sum(ident for _, ident in draws)
    if k == 0:
        return []
    dist = np.zeros(len(draws) + 1)  # distribution of the number of identities under uniform permutations
    dist[0] = 1.0
    for size, _ in draws:
        p = 1.0 / math.factorial(size) if size < 171 else 0.0
        dist[1:] = dist[1:] * (1 - p) + dist[:-1] * p
        dist[0] *= 1 - p
    tail = float(dist[k:].sum())
    if tail < IDENTITY_ALPHA:
        sizes = [size for size, ident in draws if ident]
        return [f"{what} is the identity permutation in {k} of {len(draws)} draws so far (of sizes {sizes}); "
                f"a uniform random permutation does that with probability {tail:.3g} < {IDENTITY_ALPHA}"]
    return []


def run_comparer(compare, case: Case) -> list:
    """Apply a ``compare`` mode (string or callable) to ``case``; returns problem strings."""
    if compare == "values":
        return value_problems(case)
    if compare == "statistics":
        return statistics_problems(case)
    if callable(compare):
        try:
            result = compare(case)
        except AssertionError as e:
            return [str(e) or "the comparer raised AssertionError"]
        if result is None:
            return []
        return [result] if isinstance(result, str) else list(result)
    raise ValueError(f"check(compare=...) expects 'values', 'statistics' or a callable, received {compare!r}")
