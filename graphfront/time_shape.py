"""``flow.repeat``, ``flow.acc``, ``flow.unpack``, ``flow.pack``: OneFlow's time-shape
functions (``python/oneflow/compatible/single_client/ops/`` at v0.6.0). A region opened
by ``repeat``/``unpack`` and closed by ``acc``/``pack`` is computed once per micro-step;
graphfront unrolls it (see :mod:`graphfront.ops.time_shape_ops`), e.g.
``flow.acc(f(flow.repeat(x, 4)), 4) == 4 * f(x)`` and
``flow.pack(f(flow.unpack(x, 4)), 4)`` applies ``f`` to four dim-0 quarters of ``x``.
"""
from __future__ import annotations

from graphfront.framework.blob_desc import BlobDesc, is_int
from graphfront.ops.builder import build_op

__all__ = ["acc", "pack", "repeat", "unpack"]


def _build(op_type, attr, x, num, name, prefix):
    if not isinstance(x, BlobDesc):
        raise TypeError(f"flow.{op_type}: expects a blob, received {type(x).__name__} {x!r}")
    if not is_int(num) or num < 1:
        raise ValueError(f"flow.{op_type}: {attr} must be an int >= 1, received {num!r}")
    return build_op(op_type, {"in": x}, {attr: int(num)}, name=name, prefix=prefix)


def repeat(input, repeat_num, name=None):  # noqa: A002 - OneFlow's signature
    """``input`` produced ``repeat_num`` times (once per micro-step of the region it opens)."""
    return _build("repeat", "repeat_num", input, repeat_num, name, "Repeat_")


def acc(one, max_acc_num, name=None):
    """Sum of ``one`` over ``max_acc_num`` micro-steps (closes a repeat/unpack region)."""
    return _build("acc", "max_acc_num", one, max_acc_num, name, "Acc_")


def unpack(input, unpack_num, name=None):  # noqa: A002
    """``input`` split along dim 0 into ``unpack_num`` pieces, one per micro-step."""
    return _build("unpack", "unpack_num", input, unpack_num, name, "Unpack_")


def pack(input, pack_num, name=None):  # noqa: A002
    """``pack_num`` micro-step pieces of ``input`` concatenated along dim 0."""
    return _build("pack", "pack_num", input, pack_num, name, "Pack_")
