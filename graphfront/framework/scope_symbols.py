"""The scopes ops are built in, registered as ``ScopeProto`` symbols.

(``flow.scope``, the user's placement and name scopes, is :mod:`graphfront.scope`.) A :class:`Scope` is what OneFlow's ``ScopeProto`` describes for one op: the device
placement (``ParallelConf``), the ``flow.scope.namespace`` prefixes and the
calculation pass. Scopes are registered as ``ScopeProto`` symbols; every op added to a
job carries the ``scope_symbol_id`` of the scope it was built in.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re

from graphfront.core import placement_pb2, scope_pb2

_symbol_ids = itertools.count(1)
SYMBOLS: dict = {}  # scope_symbol_id -> ScopeProto


@dataclasses.dataclass(frozen=True)
class Scope:
    device_tag: str = "cpu"
    device_ids: tuple = ("0:0",)
    namespace: tuple = ()
    calculation_pass: str = "forward_pass"
    symbol_id: int = 0
    hierarchy: tuple = ()  # the devices as a grid (flow.scope.placement's hierarchy); () for a line

    @property
    def parallel_conf(self) -> placement_pb2.ParallelConf:
        conf = placement_pb2.ParallelConf(device_tag=self.device_tag)
        conf.device_name.extend(self.device_ids)
        if self.hierarchy:
            conf.hierarchy.dim.extend(self.hierarchy)
        return conf

    @property
    def prefix(self) -> str:
        return "".join(n + "-" for n in self.namespace)

    def derive(self, **changes) -> "Scope":
        scope = dataclasses.replace(self, **changes)
        return dataclasses.replace(scope, symbol_id=_register(scope))


def _register(scope: Scope) -> int:
    proto = scope_pb2.ScopeProto(job_desc_symbol_id=0, device_parallel_desc_symbol_id=0,
                                 host_parallel_desc_symbol_id=0, session_id=0,
                                 calculation_pass_name=scope.calculation_pass)
    proto.opt_mirrored_parallel_conf.SetInParent()
    proto.scope_op_name_prefixes.extend(scope.namespace)
    symbol_id = next(_symbol_ids)
    SYMBOLS[symbol_id] = proto
    return symbol_id


def make_scope(device_tag="cpu", device_ids=("0:0",)) -> Scope:
    return Scope().derive(device_tag=device_tag, device_ids=tuple(device_ids))


_DEVICE_SPEC = re.compile(r"^(\d+):(\d+)(?:-(\d+))?$")


def parse_device_ids(machine_device_ids) -> tuple:
    """Normalize ``"0:0"``, ``"0:0-3"`` or a list of such strings; ValueError otherwise."""
    ids = [machine_device_ids] if isinstance(machine_device_ids, str) else list(machine_device_ids)
    if not ids:
        raise ValueError("flow.scope.placement: machine_device_ids is empty")
    for spec in ids:
        m = _DEVICE_SPEC.match(spec) if isinstance(spec, str) else None
        if not m:
            raise ValueError(f'flow.scope.placement: machine_device_ids expects strings like "0:0" '
                             f'or "0:0-3", received {spec!r}')
    return tuple(ids)


def device_count(device_ids) -> int:
    n = 0
    for spec in device_ids:
        m = _DEVICE_SPEC.match(spec)
        n += (int(m.group(3)) - int(m.group(2)) + 1) if m.group(3) else 1
    return n


def first_device_index(device_ids) -> int:
    return int(_DEVICE_SPEC.match(device_ids[0]).group(2))


@contextlib.contextmanager
def nothing():
    yield
