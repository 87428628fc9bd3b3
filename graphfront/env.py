"""``flow.env``: the process environment of OneFlow's single-client API.

OneFlow sets up its machines (addresses, control/data ports, log directory) with
``flow.env.*`` before ``flow.env.init()``; the session calls ``init()`` itself when the
first job runs. The setters record their value (for ``current_env()``) and check it;
``machine`` and ``ctrl_port`` give the rendezvous of multi-machine jobs
(:mod:`graphfront.runtime.distributed`). After initialization a setter logs OneFlow's
notice (a warning on the ``graphfront`` logger) and does nothing, as in OneFlow (v0.6.0:
``python/oneflow/compatible/single_client/framework/env_util.py``).
"""
from __future__ import annotations

import logging
import numbers
import warnings

from graphfront.core import placement_pb2
from graphfront.framework import env_settings as _settings
from graphfront.framework.env_settings import current_env
from graphfront.framework.errors import ArgumentError
from graphfront.toplevel import current_resource

__all__ = ["all_device_placement", "ctrl_port", "current_env", "current_resource", "data_port", "grpc_use_no_signal",
           "init", "log_dir", "logbuflevel", "logtostderr", "machine"]

logger = logging.getLogger(__name__)
_NOTICE = "Environment has been initialized, this env init will do nothing."


def init():
    """Initialize the environment once: True the first time, then a logged notice and False."""
    if _settings.STATE["initialized"]:
        logger.warning(_NOTICE)
        return False
    _settings.STATE["initialized"] = True
    return True


def _set(key, value):
    if _settings.STATE["initialized"]:
        logger.warning(_NOTICE)
        return
    _settings.STATE["conf"][key] = value


def _int(fn, val):
    if isinstance(val, bool) or not isinstance(val, numbers.Integral):
        raise TypeError(f"flow.env.{fn} expects an int, received {val!r}")
    return int(val)


def ctrl_port(val):
    """Control port of the (single) machine."""
    _set("ctrl_port", _int("ctrl_port", val))


def data_port(val):
    """Data port of the (single) machine."""
    _set("data_port", _int("data_port", val))


def log_dir(val):
    """Directory for the runtime's logs."""
    if not isinstance(val, str):
        raise TypeError(f"flow.env.log_dir expects a str, received {val!r}")
    _set("log_dir", val)


def logbuflevel(val):
    _set("logbuflevel", _int("logbuflevel", val))


def logtostderr(val):
    _set("logtostderr", _int("logtostderr", val))


def machine(*val):
    """The machine list: an address string or a dict with ``addr`` (and port agents), or a
    list of those. With several machines (and ``flow.config.machine_num``), the workers of
    all machines rendezvous at the first machine's address on ``ctrl_port`` (unless
    ``MASTER_ADDR``/``MASTER_PORT`` are set, as ``torchrun`` does)."""
    machines = list(val[0]) if len(val) == 1 and isinstance(val[0], (list, tuple)) else list(val)
    for m in machines:
        if not isinstance(m, (str, dict)) or (isinstance(m, dict) and "addr" not in m):
            raise TypeError(f"flow.env.machine: each machine is an address string or a dict with 'addr', "
                            f"received {m!r}")
    _set("machine", machines)


def grpc_use_no_signal(val=True):
    """Deprecated no-op (as in OneFlow)."""
    warnings.warn("flow.env.grpc_use_no_signal is deprecated and does nothing", DeprecationWarning, stacklevel=2)


def all_device_placement(device_type) -> placement_pb2.ParallelConf:
    """A ``ParallelConf`` of every ``device_type`` device of every machine: ``device_name``
    ``"m:0-(n-1)"`` (``"m:0"`` for one device) for machines ``m`` of
    :func:`current_resource`'s ``machine_num``, ``n`` its ``gpu_device_num`` (``"gpu"``)
    or ``cpu_device_num`` (``"cpu"``). ``flow.scope.placement(conf.device_tag,
    list(conf.device_name))`` places ops on them.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/placement_util.py``
    (``api_all_device_placement``).

    Raises:
        ArgumentError: ``device_type`` is not "gpu" or "cpu", or the resource has no
            such device.
    """
    if device_type not in ("gpu", "cpu"):
        raise ArgumentError(f"flow.env.all_device_placement: device_type expects 'gpu' or 'cpu', received "
                            f"{device_type!r}")
    res = current_resource()
    n = res.gpu_device_num if device_type == "gpu" else res.cpu_device_num
    if n < 1:
        raise ArgumentError(f"flow.env.all_device_placement: the resource has no {device_type} device "
                            f"({device_type}_device_num is {n})")
    names = [f"{m}:0-{n - 1}" if n > 1 else f"{m}:0" for m in range(res.machine_num)]
    return placement_pb2.ParallelConf(device_tag=device_type, device_name=names)
