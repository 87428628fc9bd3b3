"""``flow.scope``: placement, name scopes and logical views.

``flow.scope.placement(device_tag, machine_device_ids)`` places the ops created inside
it: ``device_tag`` is ``"cpu"`` or ``"gpu"`` and ``machine_device_ids`` is ``"0:0"``
(machine 0, device 0), ``"0:0-3"`` or a list of such strings (one per machine); a job
on several devices runs on one worker per device (:mod:`graphfront.parallel`).
``"gpu"`` without CUDA runs on the CPU with one warning, as OneFlow's CPU-only builds
did (``flow.config.allow_gpu_fallback_to_cpu(False)`` makes it a build-time error).
"""
from __future__ import annotations

import contextlib

from graphfront.framework import job_builder as jb
from graphfront.framework.errors import ArgumentError
from graphfront.framework.placement_scope import LogicalView, PlacementScope

__all__ = ["LogicalView", "PlacementScope", "consistent_view", "consistent_view_enabled", "current_scope",
           "mirrored_view", "mirrored_view_enabled", "namespace", "placement", "scope_context"]


def placement(device_tag, machine_device_ids, hierarchy=None) -> PlacementScope:
    """Place the ops built inside the ``with`` block on ``device_tag`` / ``machine_device_ids``."""
    return PlacementScope(device_tag, machine_device_ids, hierarchy)


@contextlib.contextmanager
def namespace(name):
    """Prefix the names of ops and variables created inside with ``name + "-"``."""
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"flow.scope.namespace expects a non-empty str, received {name!r}")
    builder = jb.current()
    with builder.scope_as(builder.scope.derive(namespace=builder.scope.namespace + (name,))) as s:
        yield s


def consistent_view() -> LogicalView:
    """The consistent (one logical blob) view; the only one a single device needs."""
    return LogicalView("consistent")


def mirrored_view() -> LogicalView:
    """The mirrored view, for ``FunctionConfig().default_logical_view``: on ``n > 1``
    devices each ``tp.ListNumpy.Placeholder`` argument takes one array per device, every
    op runs on each device's part, and variable gradients are all-reduced (see
    :mod:`graphfront.passes.mirrored`); on one device it behaves like the consistent view."""
    return LogicalView("mirrored")


def consistent_view_enabled() -> bool:
    """True unless the job being built selects the mirrored view."""
    return not mirrored_view_enabled()


def mirrored_view_enabled() -> bool:
    """True while building a job whose ``FunctionConfig`` selects ``mirrored_view()``."""
    return jb.is_building() and getattr(jb.current(), "logical_view", "consistent") == "mirrored"


def current_scope():
    """The Scope ops are built under right now (device_tag, device_ids, namespace).

    It carries OneFlow's scope symbol API (``device_parallel_desc_symbol``, ``symbol_id``,
    ``job_desc_symbol``, ``BuildWithNewParallelDesc`` ...:
    :class:`graphfront.framework.scope_symbols.Scope`).
    """
    return jb.current().scope


@contextlib.contextmanager
def scope_context(scope):
    """Build the ops inside the ``with`` block in ``scope``, a Scope made from
    ``flow.current_scope()`` by its ``BuildWith...`` methods (OneFlow's ``ScopeContext``).

    A "gpu" scope without CUDA runs on the CPU as ``flow.scope.placement`` does. The logical
    view stays the job's (``FunctionConfig.default_logical_view``); the scope's mirrored flag
    is recorded in its ``ScopeProto``.

    Raises:
        TypeError: ``scope`` is not a Scope.
        JobBuildError: outside a job function, or a GPU placement that cannot run.
    """
    from graphfront.framework.scope_symbols import Scope
    if not isinstance(scope, Scope):
        raise TypeError(f"flow.scope.scope_context expects a Scope (flow.current_scope().BuildWith...), "
                        f"received {scope!r}")
    builder = jb.current()
    tag = PlacementScope(scope.device_tag, scope.device_ids).resolved_device_tag()
    with builder.scope_as(scope if tag == scope.device_tag else scope.derive(device_tag=tag)) as s:
        yield s
