"""``flow.advanced``: OneFlow's ``distribute_*`` helpers between one blob and one blob per device.

OneFlow v0.6.0 (``python/oneflow/compatible/single_client/ops/distribute_ops.py``) builds
them as system ops that place part ``i`` on device ``i`` of the current placement.
graphfront's ops see logical (whole) blobs and a job runs on one placement, so each
helper is the logical computation it stands for, built from ordinary ops: the values are
OneFlow's, the boxing pass moves the bytes. Every helper takes or returns one blob per
device of the current placement (``flow.scope.placement``; the session's devices by
default).
"""
from __future__ import annotations

from graphfront import scope as _scope
from graphfront.array import balanced_parts, concat, identity
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.scope_symbols import device_count
from graphfront.math import add_n

__all__ = ["distribute_add", "distribute_clone", "distribute_concat", "distribute_split"]


def _parallel_num() -> int:
    return device_count(_scope.current_scope().parallel_conf.device_name)


def _per_device(xs, fn) -> list:
    xs = list(xs) if isinstance(xs, (list, tuple)) else xs
    if not isinstance(xs, list) or not all(isinstance(x, BlobDesc) for x in xs):
        raise TypeError(f"flow.advanced.{fn}: argument 'xs' expects a list of blobs, received {xs!r}")
    n = _parallel_num()
    if len(xs) != n:
        raise ValueError(f"flow.advanced.{fn}: expects one blob per device of the current placement ({n}), "
                         f"received {len(xs)}")
    return xs


def distribute_concat(xs, axis=0, name=None) -> BlobDesc:
    """The blobs ``xs`` (one per device of the current placement) concatenated along
    ``axis`` into one blob (op ``concat``).

    Raises:
        TypeError: ``xs`` is not a list of blobs.
        ValueError: ``len(xs)`` differs from the placement's device count.
    """
    return concat(_per_device(xs, "distribute_concat"), axis=axis, name=name)


def distribute_add(xs, name=None) -> BlobDesc:
    """The elementwise sum of ``xs`` (one blob per device of the current placement; op ``add_n``).

    Raises:
        TypeError: ``xs`` is not a list of blobs.
        ValueError: ``len(xs)`` differs from the placement's device count.
    """
    return add_n(_per_device(xs, "distribute_add"), name=name)


def distribute_clone(x, name=None) -> tuple:
    """One copy of ``x`` per device of the current placement (ops ``identity``)."""
    return tuple(identity(x, name=None if name is None else f"{name}_{i}") for i in range(_parallel_num()))


def distribute_split(x, axis=0, name=None) -> tuple:
    """``x`` cut along ``axis`` into one part per device of the current placement, the
    first ``len % n`` parts one longer (OneFlow's balanced split; ops ``slice``).

    Raises:
        ValueError: ``axis`` is out of range for ``x``.
    """
    if not -len(x.shape) <= axis < len(x.shape):
        raise ValueError(f"flow.advanced.distribute_split: axis {axis} is out of range for a blob of shape {x.shape}")
    return balanced_parts(x, axis % len(x.shape), _parallel_num(), name)
