"""``flow.config``: session resources (set before the session starts).

graphfront runs every job on one device, so ``gpu_device_num`` accepts 0 or 1 and
``cpu_device_num`` accepts 1; other values raise ValueError.
"""
from __future__ import annotations

from graphfront.framework import session as _session


def _check_open(name):
    s = _session.default_session()
    if s.status != s.OPEN:
        print(f"flow.config.{name}: Nothing happened because the session is running")
        return None
    return s


def gpu_device_num(val):
    """GPUs per machine: 1 (default when CUDA is available) or 0 (run on the CPU)."""
    if val not in (0, 1):
        raise ValueError(f"flow.config.gpu_device_num: graphfront runs on one device; expected 0 or 1, received {val}")
    s = _check_open("gpu_device_num")
    if s is not None:
        s.gpu_device_num = val


def cpu_device_num(val):
    """CPU 'devices' per machine: 1."""
    if val != 1:
        raise ValueError(f"flow.config.cpu_device_num: graphfront runs on one device; expected 1, received {val}")
    s = _check_open("cpu_device_num")
    if s is not None:
        s.cpu_device_num = val


def machine_num(val):
    if val not in (0, 1):
        raise ValueError(f"flow.config.machine_num: graphfront runs on one machine; expected 1, received {val}")


def enable_debug_mode(val):
    """Accepted for compatibility; graphfront's plans are always inspectable."""


def enable_legacy_model_io(val=True):
    """Accepted for compatibility; checkpoints always use the directory layout."""


def enable_tensor_float_32_compute(val=True):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = bool(val)
    torch.backends.cudnn.allow_tf32 = bool(val)
