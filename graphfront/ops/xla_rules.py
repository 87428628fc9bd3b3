"""Builders of XLA lowering rules shared by several op families (the ``xla=`` rule of an op, see
the registry), and the run-time checks rules report.

A rule is ``make(k) -> callable`` over ``jax.Array`` values (contract in
:mod:`graphfront.ops.registry`); these helpers build the common shapes of rule, the way
``unary_family`` builds kernels; an op's own rule sits beside its kernel. jax is imported
when a rule is made, never when graphfront is imported (it is an optional dependency:
``pip install graphfront[xla]``).
"""
from __future__ import annotations

import contextlib

import numpy as np


def jnp():
    """``jax.numpy``."""
    import jax.numpy
    return jax.numpy


def lax():
    """``jax.lax``."""
    import jax.lax
    return jax.lax


def gelu_grad(x, dy):
    """``dy * gelu'(x)`` (exact erf GELU) over jax arrays, as :func:`graphfront.ops.common.gelu_grad`
    over torch tensors: float16 / bfloat16 computed in float32 and rounded once."""
    import math
    np_ = jnp()
    dtype = x.dtype
    if dtype in (np_.float16, np_.bfloat16):
        x, dy = x.astype(np_.float32), dy.astype(np_.float32)
    cdf = 0.5 * (1.0 + lax().erf(x * (1.0 / math.sqrt(2.0))))
    pdf = np_.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
    return (dy * (cdf + x * pdf)).astype(dtype)


def opmath(dtype):
    """The type torch's kernels compute a ``dtype`` array in: float32 for float16 and
    bfloat16 (rounded once at the end), else ``dtype`` itself."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.name in ("float16", "bfloat16") else dtype


def jnp_fn(name):
    """A ``jax.numpy`` (or, as ``"lax.<name>"``, ``jax.lax``; as ``"nn.<name>"``, ``jax.nn``)
    function by name; a callable ``name`` is that function itself."""
    if callable(name):
        return name
    if name.startswith("lax."):
        return getattr(lax(), name[4:])
    if name.startswith("nn."):
        import jax.nn
        return getattr(jax.nn, name[3:])
    return getattr(jnp(), name)


# ---------------------------------------------------------------- run-time checks

class StepChecks:
    """The run-time checks the rules of one lowered step reported (:func:`check_ids`).

    A compiled step cannot raise, so a rule whose kernel raises on bad values (a class
    label outside ``[0, depth)``) reports a check while the step is traced, and the
    lowering (:mod:`graphfront.runtime.xla`) makes it:

    * ``on_feeds``: ``(feed index, size, error)``, checks of a value fed to the job as
      it is: made on the host (numpy) before the step is launched, at no cost in it;
    * ``in_step``: ``(row, shape, error)``, checks of values computed in the job:
      ``row`` the int64 vector ``[failed, flat index, value]`` of the first bad element
      of an array of ``shape``; the step returns the rows (:meth:`flags`) and keeps its
      variables' old values when one failed, and :meth:`raise_failed` raises on the host.

    ``error(value, at) -> Exception`` builds the error of bad ``value`` at index tuple ``at``.
    A check of the same array and bound as an earlier one is dropped (the earlier op's
    error is the one raised, as the per-op plan raises at the first op that fails).
    """

    def __init__(self):
        self.reset(())

    def reset(self, feeds):
        """Start collecting for a step (being traced) whose feed values are ``feeds``."""
        self.on_feeds, self.in_step = [], []
        self._feeds, self._seen = {id(f): i for i, f in enumerate(feeds)}, {}

    def add(self, ids, size, error):
        key = (id(ids), size)
        if key in self._seen:
            return
        self._seen[key] = ids  # (kept alive while tracing: ids are compared by identity)
        if id(ids) in self._feeds:
            self.on_feeds.append((self._feeds[id(ids)], size, error))
            return
        jnp_ = jnp()
        flat = ids.reshape(-1)
        bound, ignored = size if isinstance(size, tuple) else (size, None)
        bad = (flat < 0) | (flat >= bound)
        if ignored is not None:
            bad = bad & (flat != ignored)
        first = jnp_.argmax(bad)  # (0 when none is bad)
        row = jnp_.stack([bad[first], first, flat[first]]).astype("int64")  # [failed, flat index, value]
        self.in_step.append((row, tuple(ids.shape), error))

    def add_feed(self, index, size, error):
        """Report a check of feed ``index`` directly (for a lowering that knows which of an
        op's inputs are fed); a second check of the same feed and bound is dropped."""
        if not any(i == index and s == size for i, s, _ in self.on_feeds):
            self.on_feeds.append((index, size, error))

    def flags(self):
        """``(all ok, flags)`` of the in-step checks, inside the step being traced:
        ``flags`` the int64 vector ``[any failed]`` + ``[failed, flat index, value]`` per check."""
        jnp_ = jnp()
        rows = jnp_.stack([row for row, _, _ in self.in_step])
        failed = rows[:, 0].any()
        return ~failed, jnp_.concatenate([failed[None].astype("int64"), rows.reshape(-1)])

    def check_feeds(self, feeds):
        """Raise the error of the first bad feed value (numpy feeds, before the step runs;
        a feed given as None is not checked here). A ``size`` may be ``(size, ignored)``:
        the value ``ignored`` is allowed besides ``[0, size)`` (an ``ignore_index``)."""
        for index, size, error in self.on_feeds:
            if feeds[index] is None:
                continue
            ids = np.asarray(feeds[index])
            if isinstance(size, tuple):
                size, ignored = size
                ids = np.where(ids == ignored, 0, ids)
            if ids.size <= 256:  # (a batch of labels: cheaper as a list than by numpy's reductions)
                values = ids.ravel().tolist()
                lo, hi = (min(values), max(values)) if values else (0, 0)
            else:
                lo, hi = ids.min(), ids.max()
            if lo < 0 or hi >= size:
                at = tuple(int(i) for i in np.argwhere((ids < 0) | (ids >= size))[0])
                raise error(int(ids[at]), at)

    def raise_failed(self, flags):
        """Raise the error of the first failed in-step check, given the step's ``flags``."""
        error = self.error(flags)
        if error is not None:
            raise error

    def error(self, flags):
        """The error of the first failed in-step check, or None, given ``flags`` (the step's,
        or those of its first checks only)."""
        flags = np.asarray(flags)
        if not flags.item(0):  # (the common case, kept cheap: this runs after every step)
            return None
        for (failed, index, value), (_, shape, error) in zip(flags[1:].reshape(-1, 3), self.in_step):
            if failed:
                return error(int(value), tuple(int(i) for i in np.unravel_index(int(index), shape)))
        return None


_CHECKS = []  # the StepChecks of the steps being traced, innermost last


@contextlib.contextmanager
def collecting_checks(checks, feeds):
    """Collect into ``checks`` (reset) the :func:`check_ids` reports of the rules called
    inside: the body of a step being traced, whose feed values are ``feeds``."""
    checks.reset(feeds)
    _CHECKS.append(checks)
    try:
        yield checks
    finally:
        _CHECKS.pop()


def check_ids(ids, size, error):
    """Report that every element of the integer array ``ids`` must lie in ``[0, size)``
    (``size`` may be ``(size, ignored)``: the value ``ignored`` is allowed too, an
    ``ignore_index``); ``error(value, at) -> Exception`` is raised for the first one that
    does not (value and index tuple). Called by an ``xla`` rule on its inputs, inside a step being
    lowered (:class:`StepChecks`); outside one (a rule run on its own) it does nothing."""
    if _CHECKS and ids.size:
        _CHECKS[-1].add(ids, size, error)


# ---------------------------------------------------------------- pooling helpers

def first_max(a, b):
    """Reducer of (value, position) pairs for ``lax.reduce_window``, as torch's max pools
    (``val > max || isnan(val)`` in row-major order): a NaN wins, the last NaN among NaNs;
    else the larger value, on a tie the lower position. (A module-level function, so jax
    traces it once, not once per pool.)"""
    jnp_ = jnp()
    a_nan, b_nan = jnp_.isnan(a[0]), jnp_.isnan(b[0])
    take_b = jnp_.where(a_nan | b_nan, b_nan & (~a_nan | (b[1] > a[1])),
                        (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1])))
    return jnp_.where(take_b, b[0], a[0]), jnp_.where(take_b, b[1], a[1])


def to_channels_first(x, n):
    """channels_last -> channels_first for a rank ``n + 2`` array."""
    return jnp().transpose(x, (0, n + 1) + tuple(range(1, n + 1)))


def to_channels_last(x, n):
    """channels_first -> channels_last for a rank ``n + 2`` array."""
    return jnp().transpose(x, (0,) + tuple(range(2, n + 2)) + (1,))


def scatter_add_planes(dy, indices, shape):
    """``dx`` of channels_first ``shape`` (N, C, spatial...): each ``dy`` element added at its
    ``indices`` entry, a flat row-major position inside its own (N, C) plane (max-pool
    gradients); one scatter-add over all planes."""
    import math
    lax_, jnp_ = lax(), jnp()
    planes, plane = shape[0] * shape[1], math.prod(shape[2:])
    dims = lax_.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                        scatter_dims_to_operand_dims=(0,))
    at = indices.reshape(planes, -1) + lax_.broadcasted_iota(indices.dtype, (planes, 1), 0) * plane
    flat = lax_.scatter_add(jnp_.zeros((planes * plane,), dy.dtype), at.reshape(-1, 1), dy.reshape(-1), dims,
                            mode=lax_.GatherScatterMode.PROMISE_IN_BOUNDS)
    return flat.reshape(shape)
