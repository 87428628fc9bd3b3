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

import torch

from graphfront.framework import job_builder as jb
from graphfront.framework import scope as _scope
from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.parallel.placement import resolve_device_tag


class PlacementScope:
    """Context manager returned by :func:`placement`; also a FunctionConfig value."""

    def __init__(self, device_tag, machine_device_ids, hierarchy=None):
        loc = user_frame()
        if device_tag not in ("cpu", "gpu", "cuda"):
            raise JobBuildError(f'flow.scope.placement: device_tag must be "cpu" or "gpu", received '
                                f'{device_tag!r}{format_location(loc)}')
        try:
            ids = _scope.parse_device_ids(machine_device_ids)
        except ValueError as e:
            raise JobBuildError(e.args[0] + format_location(loc)) from None
        self.device_tag = "gpu" if device_tag == "cuda" else device_tag
        self.device_ids = ids
        self._ctx = None

    def __enter__(self):
        if not jb.is_building():
            return self
        tag = self.resolved_device_tag()
        builder = jb.current()
        self._ctx = builder.scope_as(builder.scope.derive(device_tag=tag, device_ids=self.device_ids))
        return self._ctx.__enter__()

    def resolved_device_tag(self):
        """The tag the placed ops run on ("cpu" for "gpu" without CUDA while the fallback is on).

        Raises JobBuildError at the user's line when CUDA is missing and the fallback is off,
        or when the placed GPU does not exist. Used by ``with placement(...)`` and by
        ``FunctionConfig.default_placement_scope``, so both report alike.
        """
        try:
            tag = resolve_device_tag(self.device_tag)
        except RuntimeError as e:
            raise JobBuildError(e.args[0] + format_location(user_frame())) from None
        if tag == "gpu":
            last = _scope.first_device_index(self.device_ids) + _scope.device_count(self.device_ids[:1]) - 1
            if last >= torch.cuda.device_count():
                raise JobBuildError(f"flow.scope.placement: GPU {last} does not exist (this machine has "
                                    f"{torch.cuda.device_count()}){format_location(user_frame())}")
        return tag

    def __exit__(self, *exc):
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            return ctx.__exit__(*exc)
        return False


def placement(device_tag, machine_device_ids, hierarchy=None) -> PlacementScope:
    """Place the ops built inside the ``with`` block on ``device_tag`` / ``machine_device_ids``."""
    return PlacementScope(device_tag, machine_device_ids, hierarchy)


@contextlib.contextmanager
def namespace(name):
    """Prefix the names of ops and variables created inside with ``name + "-"``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"flow.scope.namespace expects a non-empty str, received {name!r}")
    builder = jb.current()
    with builder.scope_as(builder.scope.derive(namespace=builder.scope.namespace + (name,))) as s:
        yield s


class LogicalView:
    def __init__(self, kind):
        self.kind = kind

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __repr__(self):
        return f"flow.scope.{self.kind}_view()"


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
    """The Scope ops are built under right now (device_tag, device_ids, namespace)."""
    return jb.current().scope
