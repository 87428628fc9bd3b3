"""``flow.config``: session resources (set before the session starts).

``gpu_device_num(n)`` / ``cpu_device_num(n)`` / ``machine_num(m)`` give the default
placement of jobs: ``n`` devices per machine on ``m`` machines (see :mod:`graphfront.parallel`).

OneFlow's other resource settings (thread pools, reserved memory, NCCL and collective
boxing knobs, ``flow.config.collective_boxing.*``) tune its multi-device runtime; here
they are checked for their type and recorded in the default session's resource dict
(:func:`resource`) but change nothing. As in OneFlow, a setter called once the session
runs (a job was compiled) gives OneFlow's notice ``Nothing happened because environment
has been initialized`` (a ``UserWarning`` naming the setter; OneFlow prints it) and does
nothing; the deprecated settings only raise a
``DeprecationWarning`` (OneFlow v0.6.0:
``python/oneflow/compatible/single_client/framework/config_util.py``).
"""
from __future__ import annotations

import numbers
import warnings

from graphfront.framework import session as _session
from graphfront.framework.errors import ArgumentError
from graphfront.parallel import placement



def _check_open(name, stacklevel=3):
    s = _session.default_session()
    if s.status != s.OPEN:
        warnings.warn(f"flow.config.{name}: Nothing happened because environment has been initialized",
                      UserWarning, stacklevel=stacklevel)
        return None
    return s


def _count(name, val, least):
    if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < least:
        raise ArgumentError(f"flow.config.{name}: expected an int >= {least}, received {val!r}")
    return int(val)


def gpu_device_num(val) -> None:
    """Set the GPUs per machine of the default placement (0 runs on the CPU).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Without CUDA, n GPUs become n CPU devices with one warning (see :func:`allow_gpu_fallback_to_cpu`). Called
    while the default session is running, it logs a warning and changes nothing.

    Args:
        val: int >= 0.

    Raises:
        ValueError: ``val`` is not an int >= 0.
    """
    val = _count("gpu_device_num", val, 0)
    s = _check_open("gpu_device_num")
    if s is not None:
        s.gpu_device_num = val
        s.gpu_device_num_set = True


def cpu_device_num(val) -> None:
    """Set the CPU devices per machine; each runs in its own worker process when > 1.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Called while the default session is running, it logs a warning and changes nothing.

    Args:
        val: int >= 1.

    Raises:
        ValueError: ``val`` is not an int >= 1.
    """
    val = _count("cpu_device_num", val, 1)
    s = _check_open("cpu_device_num")
    if s is not None:
        s.cpu_device_num = val


def machine_num(val) -> None:
    """Set the number of machines running the job; each runs the same script.

    See ``flow.env.machine``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Called while the default session is running, it logs a warning and changes nothing.

    Args:
        val: int >= 1.

    Raises:
        ValueError: ``val`` is not an int >= 1.
    """
    val = _count("machine_num", val, 1)
    s = _check_open("machine_num")
    if s is not None:
        s.machine_num = val


def collective_timeout_seconds(val) -> None:
    """Set how long a collective of a multi-device job may wait (graphfront setting; default 60 s).

    A call whose worker died or hung fails with an error naming the device within about
    this time. Called while the default session is running, it logs a warning and changes nothing.

    Args:
        val: seconds, an int or float > 0.

    Raises:
        ArgumentError: (a ValueError) ``val`` is not a number > 0 (NaN is not).
    """
    if isinstance(val, bool) or not isinstance(val, numbers.Real) or not val > 0:
        raise ArgumentError(f"flow.config.collective_timeout_seconds: expected seconds > 0, received {val!r}")
    s = _check_open("collective_timeout_seconds")
    if s is not None:
        s.collective_timeout_s = float(val)


def allow_gpu_fallback_to_cpu(val=True) -> None:
    """Set whether ``"gpu"`` placements run on the CPU on a machine without CUDA (graphfront setting).

    Default True (with one warning), as OneFlow's CPU-only builds; False makes such a
    placement a build-time error. Takes effect at once, process-wide.

    Args:
        val: bool.
    """
    placement.GPU_FALLBACK[0] = bool(val)


def enable_debug_mode(val) -> None:
    """Accepted for compatibility and recorded; graphfront's plans are always inspectable.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Args:
        val: bool (or 0/1).

    Raises:
        TypeError: ``val`` is not a bool.
    """
    _record("enable_debug_mode", val, bool)


def enable_legacy_model_io(val=True) -> None:
    """Record the legacy model-io switch, read by :func:`legacy_model_io_enabled`.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Checkpoints always use the directory layout.

    Args:
        val: bool (or 0/1); default True.

    Raises:
        TypeError: ``val`` is not a bool.
    """
    _record("enable_legacy_model_io", val, bool)


def legacy_model_io_enabled() -> bool:
    """Whether ``enable_legacy_model_io(True)`` was called for the default session.

    Returns:
        bool: the recorded value, default False.
    """
    return bool(resource().get("enable_legacy_model_io", False))


def enable_tensor_float_32_compute(val=True) -> None:
    """Allow TensorFloat-32 in CUDA matmuls and cuDNN convolutions.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Sets ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``
    (process-wide, at once; no effect on CPU).

    Args:
        val: truthy to allow TF32; default True.
    """
    import torch
    torch.backends.cuda.matmul.allow_tf32 = bool(val)
    torch.backends.cudnn.allow_tf32 = bool(val)


# ------------------------------------------------------------------ recorded resource settings

def resource() -> dict:
    """The resource settings recorded for the default session (graphfront helper).

    A fresh session, e.g. after ``flow.clear_default_session()``, starts empty.

    Returns:
        dict: setting name -> recorded value (the live dict, not a copy).
    """
    return _session.default_session().resource


def _record(name, val, kind):
    where = f"flow.config.{name}"
    if kind is bool:
        if not isinstance(val, (bool, int)) or isinstance(val, numbers.Integral) and val not in (0, 1):
            raise ArgumentError(f"{where} expects a bool, received {val!r}")
        val = bool(val)
    elif kind is int:
        if isinstance(val, bool) or not isinstance(val, numbers.Integral):
            raise ArgumentError(f"{where} expects an int, received {val!r}")
        val = int(val)
    elif kind is str:
        if not isinstance(val, str):
            raise ArgumentError(f"{where} expects a str, received {val!r}")
    if _check_open(name, stacklevel=4) is not None:
        resource()[name] = val


def _setting(name, kind, default=None, doc=""):
    if default is None:
        def setter(val):
            _record(name, val, kind)
    else:
        def setter(val=default):
            _record(name, val, kind)
    setter.__name__ = name
    setter.__qualname__ = name
    setter.__doc__ = f"""{doc or f"Resource setting ``{name}`` ({kind.__name__})."}

    Recorded in :func:`resource` only: graphfront's runtime has no such knob (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/framework/config_util.py``). Called while the
    default session is running, it logs a warning and records nothing.

    Args:
        val: {kind.__name__}{"" if default is None else f"; default {default!r}"}.

    Raises:
        TypeError: ``val`` is not {"an int" if kind is int else f"a {kind.__name__}"}.
    """
    return setter


def _deprecated(name, default=None):
    if default is None:
        def setter(val):
            warnings.warn(f"flow.config.{name} is deprecated and does nothing", DeprecationWarning, stacklevel=2)
    else:
        def setter(val=default):
            warnings.warn(f"flow.config.{name} is deprecated and does nothing", DeprecationWarning, stacklevel=2)
    setter.__name__ = name
    setter.__qualname__ = name
    setter.__doc__ = f"""Deprecated no-op: issues a DeprecationWarning, as in OneFlow.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Args:
        val: ignored{"" if default is None else f"; default {default!r}"}.
    """
    return setter


comm_net_worker_num = _setting("comm_net_worker_num", int)
compute_thread_pool_size = _setting("compute_thread_pool_size", int)
max_mdsave_worker_num = _setting("max_mdsave_worker_num", int)
reserved_device_mem_mbyte = _setting("reserved_device_mem_mbyte", int)
reserved_host_mem_mbyte = _setting("reserved_host_mem_mbyte", int)
disable_group_boxing_by_dst_parallel = _setting("disable_group_boxing_by_dst_parallel", bool, False)
enable_mem_chain_merge = _setting("enable_mem_chain_merge", bool, True)
enable_model_io_v2 = _setting("enable_model_io_v2", bool)
nccl_use_compute_stream = _setting("nccl_use_compute_stream", bool, False)

collect_act_event = _deprecated("collect_act_event", True)
enable_numa_aware_cuda_malloc_host = _deprecated("enable_numa_aware_cuda_malloc_host", True)
rdma_mem_block_mbyte = _deprecated("rdma_mem_block_mbyte")
rdma_recv_msg_buf_mbyte = _deprecated("rdma_recv_msg_buf_mbyte")
thread_enable_local_message_queue = _deprecated("thread_enable_local_message_queue")
use_rdma = _deprecated("use_rdma", True)


def load_library(val) -> None:
    """Load a OneFlow custom-op shared library: not supported.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    graphfront's custom ops are Python (``graphfront.ops.registry.op``).

    Args:
        val: path of the library.

    Raises:
        NotImplementedError: always.
    """
    raise NotImplementedError(f"flow.config.load_library({val!r}): graphfront cannot load OneFlow custom-op "
                              "libraries; define the op in Python with graphfront.ops.registry.op")


def load_library_now(val) -> None:
    """Load a OneFlow custom-op shared library at once: not supported (see :func:`load_library`).

    Args:
        val: path of the library.

    Raises:
        NotImplementedError: always.
    """
    raise NotImplementedError(f"flow.config.load_library_now({val!r}): graphfront cannot load OneFlow custom-op "
                              "libraries; define the op in Python with graphfront.ops.registry.op")


class collective_boxing:  # noqa: N801 - OneFlow's submodule name
    """``flow.config.collective_boxing.*``: collective-boxing settings.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/config_util.py``.

    Each setter takes one value (bool or int, as its name says), raises TypeError for
    another type, and records it in :func:`resource` under ``collective_boxing.<name>``.
    Three act: the workers of a multi-device job run the all-reduces of a step in buckets
    of up to ``nccl_fusion_threshold_mb`` MiB (default 16), one collective each, unless
    ``enable_fusion`` or ``nccl_fusion_all_reduce`` is False (both True by default, as in
    OneFlow's ``CollectiveBoxingConf``). The others are recorded only.
    """

    enable_fusion = staticmethod(_setting("collective_boxing.enable_fusion", bool, True))
    num_callback_threads = staticmethod(_setting("collective_boxing.num_callback_threads", int))
    nccl_num_streams = staticmethod(_setting("collective_boxing.nccl_num_streams", int))
    nccl_fusion_threshold_mb = staticmethod(_setting("collective_boxing.nccl_fusion_threshold_mb", int))
    nccl_fusion_all_reduce_use_buffer = staticmethod(_setting("collective_boxing.nccl_fusion_all_reduce_use_buffer",
                                                              bool))
    nccl_fusion_all_reduce = staticmethod(_setting("collective_boxing.nccl_fusion_all_reduce", bool))
    nccl_fusion_reduce_scatter = staticmethod(_setting("collective_boxing.nccl_fusion_reduce_scatter", bool))
    nccl_fusion_all_gather = staticmethod(_setting("collective_boxing.nccl_fusion_all_gather", bool))
    nccl_fusion_reduce = staticmethod(_setting("collective_boxing.nccl_fusion_reduce", bool))
    nccl_fusion_broadcast = staticmethod(_setting("collective_boxing.nccl_fusion_broadcast", bool))
    nccl_fusion_max_ops = staticmethod(_setting("collective_boxing.nccl_fusion_max_ops", int))
    nccl_enable_all_to_all = staticmethod(_setting("collective_boxing.nccl_enable_all_to_all", bool))
    nccl_enable_mixed_fusion = staticmethod(_setting("collective_boxing.nccl_enable_mixed_fusion", bool))
