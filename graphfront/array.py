"""Array wrappers (``flow.reshape``, ``flow.flatten``, ``flow.identity``, ``flow.cast`` ...)."""
from __future__ import annotations

import math

from graphfront.ops.builder import build_op

__all__ = ["reshape", "reshape_like", "flatten", "identity", "cast"]


def reshape(x, shape, name=None):
    """Reshape ``x``; one -1 is resolved here so the ``reshape`` op gets a full shape."""
    shape = list(shape)
    if shape.count(-1) > 1:
        raise ValueError(f"flow.reshape: shape {tuple(shape)} may contain at most one -1")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        total = math.prod(x.shape)
        if rest == 0 or total % rest:
            raise ValueError(f"flow.reshape: cannot reshape {x.shape} into {tuple(shape)}")
        shape[shape.index(-1)] = total // rest
    return build_op("reshape", {"in": x}, {"shape": tuple(shape)}, name=name, prefix="Reshape_")


def reshape_like(x, like, name=None):
    return build_op("reshape_like", {"in": x, "like": like}, name=name, prefix="ReshapeLike_")


def flatten(input, start_dim=0, end_dim=-1, name=None):  # noqa: A002 - OneFlow's name
    """Merge dims ``start_dim..end_dim`` (inclusive) into one (op ``flatten``)."""
    return build_op("flatten", {"in": input}, {"start_dim": start_dim, "end_dim": end_dim}, name=name,
                    prefix="Flatten_")


def identity(x, name=None):
    return build_op("identity", {"in": x}, name=name, prefix="Identity_")


def cast(x, dtype, name=None):
    """Convert ``x`` to ``dtype``; returns ``x`` itself when it already has that dtype."""
    if x.dtype is dtype:
        return x
    return build_op("cast", {"in": x}, {"dtype": dtype}, name=name, prefix="Cast_")
