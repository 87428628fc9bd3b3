"""``flow.profiler``: NVTX range markers around parts of a job (OneFlow's
``python/oneflow/compatible/single_client/ops/nvtx_ops.py`` at v0.6.0; ops in
:mod:`graphfront.ops.nvtx_ops`). For per-op timings of a compiled job see
``flow.profile``.
"""
from __future__ import annotations

import torch

from graphfront.framework.blob_desc import BlobDesc
from graphfront.ops.builder import build_op

__all__ = ["nvtx_end", "nvtx_start", "range_pop", "range_push"]


def _check(x, mark_prefix, fn):
    if not isinstance(x, BlobDesc):
        raise TypeError(f"flow.profiler.{fn}: argument 'x' expects a blob, received {type(x).__name__} {x!r}")
    if not isinstance(mark_prefix, str):
        raise TypeError(f"flow.profiler.{fn}: mark_prefix expects a str, received {mark_prefix!r}")


def range_push(range_name) -> None:
    """Open the NVTX range ``range_name`` now, on the host (``torch.cuda.nvtx.range_push``);
    nothing where CUDA is not available. Closed by :func:`range_pop`.

    Raises:
        TypeError: ``range_name`` is not a str.
    """
    if not isinstance(range_name, str):
        raise TypeError(f"flow.profiler.range_push: range_name expects a str, received {range_name!r}")
    if torch.cuda.is_available():
        torch.cuda.nvtx.range_push(range_name)


def range_pop() -> None:
    """Close the innermost NVTX range :func:`range_push` opened; nothing without CUDA."""
    if torch.cuda.is_available():
        torch.cuda.nvtx.range_pop()


def nvtx_start(x, mark_prefix, name=None):
    """``x`` unchanged; on CUDA opens the NVTX range ``mark_prefix`` when the op runs."""
    _check(x, mark_prefix, "nvtx_start")
    return build_op("nvtx_start", {"in": x}, {"mark_prefix": mark_prefix}, name=name, prefix="NvtxStart_")


def nvtx_end(x, mark_prefix, name=None):
    """``x`` unchanged; on CUDA closes the innermost open NVTX range when the op runs."""
    _check(x, mark_prefix, "nvtx_end")
    return build_op("nvtx_end", {"in": x}, {"mark_prefix": mark_prefix}, name=name, prefix="NvtxEnd_")
