"""The values of ``flow.scope.placement`` and the logical views, which a ``FunctionConfig`` accepts.

:class:`PlacementScope` is what ``flow.scope.placement(...)`` returns: a context manager
placing the ops built inside it, and the value of
``FunctionConfig().default_placement_scope``. :class:`LogicalView` is what
``flow.scope.consistent_view()`` and ``mirrored_view()`` return.
"""
from __future__ import annotations

import math

import torch

from graphfront.framework import job_builder as jb
from graphfront.framework import scope_symbols as _scope
from graphfront.framework.blob_desc import is_int
from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.parallel.placement import resolve_device_tag


def _hierarchy(hierarchy, ids, loc) -> tuple:
    """``hierarchy`` (the placement's devices as a grid, OneFlow's ``ParallelConf.hierarchy``)
    as a tuple of ints, () when None; JobBuildError unless its product is the device count."""
    if hierarchy is None:
        return ()
    n = _scope.device_count(ids)
    dims = tuple(hierarchy) if isinstance(hierarchy, (tuple, list)) else None
    if not dims or not all(is_int(d) and d > 0 for d in dims) \
            or math.prod(dims) != n:
        raise JobBuildError(f"flow.scope.placement: hierarchy must be a tuple of positive ints whose product is the "
                            f"number of devices ({n}), received {hierarchy!r}{format_location(loc)}")
    return tuple(int(d) for d in dims)


class PlacementScope:
    """Context manager returned by ``flow.scope.placement``; also a FunctionConfig value."""

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
        self.hierarchy = _hierarchy(hierarchy, ids, loc)
        self._ctx = None

    def __enter__(self):
        if not jb.is_building():
            return self
        tag = self.resolved_device_tag()
        builder = jb.current()
        self._ctx = builder.scope_as(builder.scope.derive(device_tag=tag, device_ids=self.device_ids,
                                                          hierarchy=self.hierarchy))
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


class LogicalView:
    """A logical view (``kind``: ``"consistent"`` or ``"mirrored"``), for
    ``FunctionConfig().default_logical_view``."""

    def __init__(self, kind):
        self.kind = kind

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __repr__(self):
        return f"flow.scope.{self.kind}_view()"
