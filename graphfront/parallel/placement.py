"""Placement helpers: the session's default devices and the "gpu" fallback to the CPU.

OneFlow's CPU-only builds ran ``"gpu"`` placements on the CPU; graphfront does the same
on a machine without CUDA, warning once per process, unless
``flow.config.allow_gpu_fallback_to_cpu(False)`` asks for an error instead.
"""
from __future__ import annotations

import warnings

import torch

GPU_FALLBACK = [True]
_warned = [False]


def resolve_device_tag(tag, where="flow.scope.placement"):
    """``tag`` itself, or "cpu" for "gpu" without CUDA (warning once per process).

    Raises RuntimeError for "gpu" without CUDA when the fallback is switched off."""
    if tag != "gpu" or torch.cuda.is_available():
        return tag
    if not GPU_FALLBACK[0]:
        raise RuntimeError(f'{where}("gpu", ...): CUDA is not available on this machine '
                           "(torch.cuda.is_available() is False) and flow.config.allow_gpu_fallback_to_cpu(False) "
                           'was set; place the job on the CPU with flow.scope.placement("cpu", ...)')
    if not _warned[0]:
        _warned[0] = True
        warnings.warn("graphfront: CUDA is not available; \"gpu\" placements run on the CPU, one device per "
                      "worker process (flow.config.allow_gpu_fallback_to_cpu(False) makes this an error)",
                      UserWarning, stacklevel=3)
    return "cpu"


def default_devices(session):
    """``(device_tag, machine_device_ids)`` of jobs without a placement: ``gpu_device_num``
    GPUs per machine when CUDA is available, else ``cpu_device_num`` CPU devices (or the
    GPU count asked for, falling back to the CPU), on ``machine_num`` machines."""
    gpus = session.gpu_device_num
    if gpus > 0 and torch.cuda.is_available():
        tag, n = "gpu", gpus
    else:
        tag, n = "cpu", session.cpu_device_num
        if getattr(session, "gpu_device_num_set", False) and gpus > 0:
            resolve_device_tag("gpu", "flow.config.gpu_device_num")
            n = max(n, gpus)
    machines = machine_count(session)
    ids = tuple(f"{m}:0-{n - 1}" if n > 1 else f"{m}:0" for m in range(machines))
    return tag, ids


def machine_count(session) -> int:
    """``flow.config.machine_num``, else ``WORLD_SIZE`` (one process per machine under
    ``torchrun --nproc_per_node 1``), else 1."""
    import os
    return getattr(session, "machine_num", None) or int(os.environ.get("WORLD_SIZE", 1))


def machine_rank(session) -> int:
    """This process's machine, 0 to ``machine_count(session) - 1``: ``GRAPHFRONT_MACHINE_RANK``,
    else ``RANK`` (``torchrun --nproc_per_node 1``); 0 on one machine."""
    import os
    if machine_count(session) == 1:
        return 0
    return int(os.environ.get("GRAPHFRONT_MACHINE_RANK", os.environ.get("RANK", 0)))
