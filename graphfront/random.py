"""``flow.random``: OneFlow's random functions (``python/oneflow/compatible/single_client/
ops/random_ops.py`` and ``random_util.py`` at v0.6.0); the ops are in
:mod:`graphfront.ops.random_ops`.
"""
from __future__ import annotations

import random as _random
import sys

from graphfront import toplevel as _toplevel
from graphfront.array import gather as _gather
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as _jb
from graphfront.framework.blob_desc import expect_blob, is_int
from graphfront.framework.errors import ArgumentError
from graphfront.ops.builder import build_op, unique_str

from graphfront.data_pipeline import CoinFlip, coin_flip  # noqa: F401 - flow.random.CoinFlip

__all__ = ["CoinFlip", "bernoulli", "coin_flip", "gen_seed", "generate_random_batch_permutation_indices", "shuffle"]


def _blob(x, fn, arg):
    expect_blob(x, f"flow.random.{fn}", arg)


def _seed(seed, fn):
    if seed is None:
        return _random.randint(-2 ** 63 + 1, 2 ** 63 - 1)
    if not is_int(seed):
        raise ArgumentError(f"flow.random.{fn}: seed expects an int or None, received {seed!r}")
    return int(seed)


def gen_seed(seed=None) -> tuple:
    """``(seed, has_seed)`` for a random op's attrs, as OneFlow v0.6.0's ``flow.random.gen_seed``
    (``python/oneflow/compatible/single_client/ops/random_util.py``): in the consistent view
    (the default) a None ``seed`` becomes a random int and ``has_seed`` True, so every device
    draws the same; in the mirrored view it stays -1 with ``has_seed`` False (each device draws
    its own). A given ``seed`` is returned with True.

    Raises:
        ArgumentError: ``seed`` is neither None nor an int.
    """
    if seed is not None:
        return _seed(seed, "gen_seed"), True
    if _jb.is_building() and _jb.current().scope.is_mirrored:
        return -1, False
    return _random.randint(-sys.maxsize, sys.maxsize), True


def bernoulli(x, seed=None, dtype=None, name="Bernoulli"):
    """0/1 samples: each element is 1 with probability ``x`` (floating, values in [0, 1]).

    Returns a blob shaped like ``x`` in ``dtype`` (default ``x.dtype``) (op ``bernoulli``).
    As OneFlow's module op, ``name`` names the op and may be used once per job
    (ValueError on a second use). A ``seed`` makes the sample sequence reproducible.
    """
    _blob(x, "bernoulli", "x")
    if dtype is not None and not isinstance(dtype, _dt.dtype):
        raise ArgumentError(f"flow.random.bernoulli: dtype expects a graphfront dtype, received {dtype!r}")
    _toplevel.find_or_create_module(name, lambda: name)
    attrs = {"dtype": dtype or x.dtype, "has_seed": seed is not None, "seed": -1 if seed is None else
             _seed(seed, "bernoulli")}
    return build_op("bernoulli", {"in": x}, attrs, name=name)


def generate_random_batch_permutation_indices(value, seed=None, name=None):
    """A random permutation of ``0 .. value.shape[0]-1`` as an int32 (value.shape[0],) blob
    (op ``generate_random_batch_permutation_indices``)."""
    _blob(value, "generate_random_batch_permutation_indices", "value")
    name = name or unique_str(value.op_name + "_random_batch_permutation_indices")
    return build_op("generate_random_batch_permutation_indices", {"x": value},
                    {"seed": _seed(seed, "generate_random_batch_permutation_indices")}, outputs=("y",), name=name)


def shuffle(value, seed=None, name=None):
    """``value`` with its dim-0 slices in a random order (a random permutation, then
    ``gather``; the gradient flows back through the gather)."""
    _blob(value, "shuffle", "value")
    return _gather(value, generate_random_batch_permutation_indices(value, seed), name=name)
