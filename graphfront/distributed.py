"""``flow.distributed``: where this process stands among the processes of a run (OneFlow
v0.6.0 ``python/oneflow/compatible/single_client/framework/distribute.py``'s
``get_rank`` / ``get_world_size`` / ``get_local_rank`` / ``is_multi_client``).

graphfront's single-client process is the only client of its machine: the workers it
starts for several devices (``flow.config.gpu_device_num``) are its own, not clients.
"""
from __future__ import annotations

from graphfront.framework import session as _session
from graphfront.parallel.placement import machine_count
from graphfront.toplevel import current_machine_id

__all__ = ["get_local_rank", "get_rank", "get_world_size", "is_multi_client"]


def get_rank() -> int:
    """This client's rank among the machines of the run: ``flow.current_machine_id()``."""
    return current_machine_id()


def get_world_size() -> int:
    """The number of machines of the run, as the runtime counts them:
    ``flow.config.machine_num``, else ``WORLD_SIZE`` (``torchrun``), else 1."""
    return machine_count(_session.default_session())


def get_local_rank() -> int:
    """This client's rank among the clients of its machine: 0 (one client a machine)."""
    return 0


def is_multi_client() -> bool:
    """False: this is OneFlow's single-client interface."""
    return False
