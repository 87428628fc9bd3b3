"""``flow.distribute``: distribute policies (SBP hints) of OneFlow's single-client API.

A distribute policy says how a consistent blob is laid out over the devices of its
placement: ``split(axis)`` (each device holds a slice along ``axis``), ``broadcast()``
(each device holds the whole blob) or ``auto()`` (let the compiler choose). In a job on
several devices, ``flow.get_variable(..., distribute=split(k))`` and
``layers.dense(..., model_distribute=split(0))`` split variables, and
:func:`parallel_cast` / :func:`hierarchical_parallel_cast` lay out any blob (see
:mod:`graphfront.parallel.sbp`); ``blob.with_distribute(...)`` lays a blob out as
:func:`parallel_cast` does (on one device it only records the policy). On one device
every layout holds the same values (OneFlow v0.6.0
``python/oneflow/compatible/single_client/framework/distribute.py``).
"""
from __future__ import annotations

import numbers
import warnings

from graphfront import scope as _scope
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.errors import ArgumentError, JobBuildError, format_location, user_frame
from graphfront.framework.renamed_args import PARALLEL_DISTRIBUTION, renamed_keywords
from graphfront.framework.scope_symbols import device_count
from graphfront.ops.builder import build_op
from graphfront.parallel import sbp as _sbp

__all__ = ["Distribute", "assert_is_valid_distribute", "auto", "broadcast", "consistent_strategy",
           "consistent_strategy_enabled", "mirrored_strategy", "mirrored_strategy_enabled", "split"]


class Distribute:
    """A distribute policy: ``kind`` is "auto", "broadcast", "split" (then ``axis`` is set)
    or "partial_sum" (``flow.sbp.partial_sum``, taken only as a layout of
    :func:`hierarchical_parallel_cast`).

    Policies compare equal by kind and axis; ``str()`` gives OneFlow's SBP spelling
    ("S(0)", "B", "P") used in ``unique_name`` suffixes and SBP strings.
    """

    __slots__ = ("kind", "axis")

    def __init__(self, kind, axis=None):
        self.kind = kind
        self.axis = axis

    def __eq__(self, other):
        return isinstance(other, Distribute) and (self.kind, self.axis) == (other.kind, other.axis)

    def __hash__(self):
        return hash((self.kind, self.axis))

    def __repr__(self):
        if self.kind == "partial_sum":
            return "flow.sbp.partial_sum"
        return f"flow.distribute.split({self.axis})" if self.kind == "split" else f"flow.distribute.{self.kind}()"

    def __str__(self):
        return {"auto": "A", "broadcast": "B", "partial_sum": "P"}.get(self.kind, f"S({self.axis})")


_AUTO = Distribute("auto")
_BROADCAST = Distribute("broadcast")
PARTIAL_SUM = Distribute("partial_sum")  # flow.sbp.partial_sum


def auto() -> Distribute:
    """Let the compiler choose the layout (the default of every blob)."""
    return _AUTO


def broadcast() -> Distribute:
    """Every device holds the whole blob."""
    return _BROADCAST


def split(axis) -> Distribute:
    """Each device holds one slice of the blob along ``axis`` (an int >= 0).

    Raises ArgumentError (a TypeError and a ValueError) for an ``axis`` that is not an int >= 0.
    """
    return split_policy(axis, "flow.distribute.split")


def split_policy(axis, fn) -> Distribute:
    """The split policy of ``axis``; errors name ``fn`` (``flow.distribute.split``, ``flow.sbp.split``)."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise ArgumentError(f"{fn}: axis expects an int, received {axis!r}")
    if axis < 0:
        raise ArgumentError(f"{fn}: axis must be >= 0, received {axis}")
    return Distribute("split", int(axis))


def assert_is_valid_distribute(distribute):
    """Raise ArgumentError (a TypeError) unless ``distribute`` is a policy from this module."""
    _check_distribute(distribute, "argument 'distribute'")


def _check_distribute(distribute, what):
    partial = distribute is PARTIAL_SUM
    if partial or not isinstance(distribute, Distribute):
        raise ArgumentError(f"{what} expects a distribute policy (flow.distribute.split(axis), broadcast() or "
                            f"auto()), received {type(distribute).__name__} {distribute!r}"
                            + (" (a partial sum is a layout of flow.hierarchical_parallel_cast only)" if partial else ""))


def _deprecated(old, new):
    warnings.warn(f"flow.distribute.{old} is deprecated, use flow.scope.{new} instead", DeprecationWarning,
                  stacklevel=3)


def consistent_strategy():
    """Deprecated alias of ``flow.scope.consistent_view()``."""
    _deprecated("consistent_strategy", "consistent_view")
    return _scope.consistent_view()


def mirrored_strategy():
    """Deprecated alias of ``flow.scope.mirrored_view()``."""
    _deprecated("mirrored_strategy", "mirrored_view")
    return _scope.mirrored_view()


def consistent_strategy_enabled() -> bool:
    """Deprecated alias of ``flow.scope.consistent_view_enabled()``."""
    _deprecated("consistent_strategy_enabled", "consistent_view_enabled")
    return _scope.consistent_view_enabled()


def mirrored_strategy_enabled() -> bool:
    """Deprecated alias of ``flow.scope.mirrored_view_enabled()``."""
    _deprecated("mirrored_strategy_enabled", "mirrored_view_enabled")
    return _scope.mirrored_view_enabled()


def _sbp_string(distribute, where):
    if distribute is None:
        return ""
    _check_distribute(distribute, f"flow.parallel_cast: argument '{where}'")
    return {"auto": "", "broadcast": "B"}.get(distribute.kind, f"S({distribute.axis})")


def parallel_cast(input, name=None, distribute=None, gradient_distribute=None):  # noqa: A002 - OneFlow's name
    """``flow.parallel_cast``: the same values, laid out as ``distribute`` over the devices of
    a multi-device job (its gradient as ``gradient_distribute``); op ``parallel_cast``
    (``oneflow/user/ops/parallel_cast_op.cpp``). On one device it is an identity.

    Raises TypeError when a policy is not a ``flow.distribute`` policy."""
    return build_op("parallel_cast", {"in": input},
                    {"sbp_parallel": _sbp_string(distribute, "distribute"),
                     "grad_sbp_parallel": _sbp_string(gradient_distribute, "gradient_distribute")},
                    name=name, prefix="ParallelCast_")


def sbp_strings(nd_sbp) -> list:
    """``nd_sbp`` (an SBP string, a ``flow.sbp`` / ``flow.distribute`` policy, or a list of
    them) as a list of SBP strings ("S(0)", "B", "P")."""
    items = [nd_sbp] if isinstance(nd_sbp, (str, Distribute)) else list(nd_sbp)
    return [str(s) if isinstance(s, Distribute) else s for s in items]


@renamed_keywords(PARALLEL_DISTRIBUTION)
def hierarchical_parallel_cast(input, nd_sbp, grad_mode=None, grad_nd_sbp=None, name=None):  # noqa: A002
    """``flow.hierarchical_parallel_cast``: the same values laid out as ``nd_sbp`` (a list of
    SBP strings such as ``["S(0)"]``, ``["B"]``, ``["P"]``, or of ``flow.sbp`` objects such as
    ``[flow.sbp.split(0)]``, ``[flow.sbp.partial_sum]``, one per axis of the placement's
    hierarchy; on a grid with one axis of several devices recorded as that axis's layout,
    on a grid of two or more such axes as one string per such axis, see
    :func:`graphfront.parallel.sbp.flatten_nd_sbp`);
    ``grad_mode`` "identity" (default), "manual" (the gradient laid out as ``grad_nd_sbp``)
    or "restore" (the gradient laid out as the input). Op ``hierarchical_parallel_cast``.
    OneFlow v0.5's keywords ``parallel_distribution`` / ``grad_parallel_distribution`` are
    accepted for ``nd_sbp`` / ``grad_nd_sbp``.

    Raises ValueError for a malformed SBP string or an unknown ``grad_mode``, JobBuildError (a
    ValueError naming the user's line) for a list whose length is not the hierarchy's."""
    nd_sbp = sbp_strings(nd_sbp)
    grad_mode = grad_mode or "identity"
    if grad_mode not in ("identity", "manual", "restore"):
        raise ValueError(f'hierarchical_parallel_cast: grad_mode expects "identity", "manual" or "restore", '
                         f"received {grad_mode!r}")
    grid = jb.current().scope.hierarchy if jb.is_building() else ()

    def one_axis(layout):  # the layout over the grid's axes of several devices
        try:
            flat = _sbp.flatten_nd_sbp(layout, grid) if len(layout) > 1 else layout
            return list(flat) if isinstance(flat, (tuple, list)) else [flat]
        except ValueError as e:
            raise JobBuildError(f"hierarchical_parallel_cast: {e}{format_location(user_frame())}") from None
    return build_op("hierarchical_parallel_cast", {"in": input},
                    {"nd_sbp": one_axis(nd_sbp), "grad_mode": grad_mode,
                     "grad_nd_sbp": one_axis(sbp_strings(grad_nd_sbp or []))},
                    name=name, prefix="HierarchicalParallelCast_")


def _with_distribute(self, distribute):
    """The blob laid out as ``distribute`` for the ops that read the returned handle.

    OneFlow (v0.6.0 ``python/oneflow/compatible/single_client/framework/remote_blob.py``,
    ``with_distribute``) keeps the blob name and hands the policy to the SBP inference
    of the ops reading the handle. graphfront makes that layout an op: in a job being
    built on several devices, a ``flow.distribute.split(axis)`` or ``broadcast()``
    policy builds a ``parallel_cast`` op (as ``flow.parallel_cast``), so the readers
    get the blob in that layout and the boxing pass inserts the collective that makes
    it. On one device, or for ``auto()``, the handle only carries the policy
    (``.distribute``); the values are the same either way.

    Args:
        distribute: a ``flow.distribute`` policy.

    Returns:
        BlobDesc: the handle, ``.distribute`` set to ``distribute``.

    Raises:
        ArgumentError: (a TypeError) ``distribute`` is not a ``flow.distribute`` policy.
    """
    _check_distribute(distribute, "BlobDesc.with_distribute: argument 'distribute'")
    names = self.parallel_conf.device_name
    if distribute.kind != "auto" and jb.is_building() and jb.current().job_name == self.job_name and \
            len(names) and device_count(names) > 1:
        cast = parallel_cast(self, distribute=distribute)
        cast.distribute = distribute
        return cast
    other = BlobDesc(self.lbn, self.shape, self.dtype, self.parallel_conf, self.job_name, self.is_dynamic)
    other.distribute = distribute
    return other


BlobDesc.with_distribute = _with_distribute
