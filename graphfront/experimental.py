"""``flow.experimental``: graphfront's experimental entry points.

* ``save_job(job, path, format="binary"|"text", completed=True)`` and
  ``load_job(path)``: a ``Job`` proto as a file, binary or protobuf text format with
  OneFlow's field names (:mod:`graphfront.framework.job_io`). A loaded job is served
  with ``flow.serving.InferenceSession().load_job(job)``.
* ``get_interface_blob_value(name)`` / ``set_interface_blob_value(name, value)``: read or
  write a variable of the session by name, whole on any number of devices
  (:mod:`graphfront.checkpoint`).
* ``logical_slice(x, slice_tup_list)`` / ``logical_slice_assign(ref, value, slice_tup_list)``:
  slicing of the whole (logical) blob however it is split over devices.
* OneFlow's ``flow.experimental`` ops: ``unique_with_counts``, ``indexed_slices_reduce_sum``,
  ``square_sum``, ``ssp_variable_proxy``.
* ``get_job_set()``: the compiled jobs as a ``JobSet`` proto; ``enable_typing_check(val)``:
  annotations required on global functions and watch handlers; ``eager_assign_121(ref,
  value)``: an assign run at once in eager execution.
* ``name_scope(name)``: the deprecated spelling of ``flow.scope.namespace`` (as
  ``flow.deprecated.variable_scope``).
* ``custom_op_module(op_module_name, module_path)``: OneFlow's user-op modules with Python
  kernels (:mod:`graphfront.custom_op_module`).
* ``unittest``: the same module as ``flow.unittest`` (:mod:`graphfront.unittest`).
* ``scope.config(**attrs)``: a ``with`` block whose ops carry the scope attributes
  ``attrs`` (OneFlow's ``ScopeProto.attr_name2attr_value``): ``quantization_aware_training``
  (bool, default True; False keeps the block's convolutions and matmuls out of
  quantization-aware training), ``ssp_num_stages`` / ``ssp_stage_id`` (int, default -1),
  ``pipeline_stage_id_hint`` (int, default 0), ``checkpointing`` (bool, default False).
  graphfront's passes read ``quantization_aware_training``; the others are recorded in the
  scope symbols (graphfront runs no SSP pipeline stages and no activation checkpointing).
"""
import contextlib as _contextlib
import types as _types

from graphfront.array import assign as _assign
from graphfront.array import slice_update as _slice_update
from graphfront.array import slice_v2 as _slice_v2
from graphfront.array import check_assign
from graphfront.checkpoint import get_interface_blob_value, set_interface_blob_value
from graphfront import unittest
from graphfront.custom_op_module import CustomOpModule as custom_op_module
from graphfront.deprecated import variable_scope as name_scope
from graphfront.dynamic import indexed_slices_reduce_sum, unique_with_counts
from graphfront.framework import job_builder as _jb
from graphfront.framework.blob_desc import BlobDesc, is_int
from graphfront.framework.job_io import JobFileError, load_job, save_job
from graphfront.framework.errors import ArgumentError, format_location, user_frame
from graphfront.framework.scope_symbols import device_count
from graphfront.math import square_sum
from graphfront.ops.builder import build_op as _build_op
from graphfront.toplevel import eager_execution_enabled, enable_typing_check, get_job_set


def eager_assign_121(ref, value):
    """Write ``value`` into the variable ``ref`` at once, device by device (each device's
    part of ``value`` into the same device's part of ``ref``), in a job function running
    eagerly (``flow.enable_eager_execution()``). Returns ``ref``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/assign_op.py``
    (``api_one_to_one_assign``).

    Raises:
        RuntimeError: eager execution is off (a lazy job uses ``flow.assign``).
        ArgumentError: ``ref`` is not a variable (or its alias) or ``value`` not a blob, or
            their placements hold different numbers of devices.
        JobBuildError: ``value``'s shape or dtype differs from ``ref``'s.
    """
    if not eager_execution_enabled():
        raise RuntimeError("flow.experimental.eager_assign_121 runs only in eager execution "
                           "(flow.enable_eager_execution()); a lazy job assigns with flow.assign"
                           + format_location(user_frame()))
    check_assign(ref, value, "experimental.eager_assign_121")
    if device_count(ref.parallel_conf.device_name) != device_count(value.parallel_conf.device_name):
        raise ArgumentError(f"flow.experimental.eager_assign_121: 'ref' and 'value' must be placed on as many "
                            f"devices (one to one), received {list(ref.parallel_conf.device_name)} and "
                            f"{list(value.parallel_conf.device_name)}")
    _assign(ref, value)
    return ref


def ssp_variable_proxy(var, buffer_size=1, name=None):
    """``(ref, value)`` of variable ``var`` (op ``ssp_variable_proxy``): ``ref`` is the
    variable (assign to it), ``value`` its value ``buffer_size`` runs ago (a ring of
    snapshots; the first ``buffer_size`` runs read the initial value)."""
    if not isinstance(var, BlobDesc):
        raise TypeError(f"flow.experimental.ssp_variable_proxy: argument 'var' expects a blob, received {var!r}")
    if not is_int(buffer_size) or buffer_size < 1:
        raise ValueError(f"flow.experimental.ssp_variable_proxy: buffer_size must be an int >= 1, received "
                         f"{buffer_size!r}")
    return _build_op("ssp_variable_proxy", {"var": var}, {"buffer_size": int(buffer_size)}, outputs=("ref", "value"),
                     name=name, prefix="SspVariableProxy_")


@_contextlib.contextmanager
def _scope_config(**attrs):
    """Build the ops inside the ``with`` block with scope attributes ``attrs`` set (see the
    module docstring for the names, types and defaults).

    Raises:
        ValueError: an unknown attribute name.
        TypeError: a value of the wrong type (bool for a bool attribute, int for an int one).
        JobBuildError: outside a job function.
    """
    builder = _jb.current()
    with builder.scope_as(builder.scope.with_attrs(**attrs)) as s:
        yield s


_scope_config.__name__ = _scope_config.__qualname__ = "config"
scope = _types.SimpleNamespace(config=_scope_config)
scope.__doc__ = "``flow.experimental.scope``: ``config(**attrs)``, a scope with OneFlow's scope attributes set."


def logical_slice(x, slice_tup_list, name=None) -> BlobDesc:
    """The slice of the logical (whole) blob ``x``, one ``(start, stop, step)`` tuple per
    dim as for ``flow.slice_v2`` (None entries take the default; negative start/stop count
    from the end). ``x`` may be split over several devices: graphfront's ops see the
    logical blob, so this is op ``slice`` (on several devices the boxing pass gathers a
    split ``x`` first).

    Returns:
        BlobDesc: per dim the length of the selected range, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, or a tuple is malformed.
    """
    return _slice_v2(x, slice_tup_list, name=name)


def logical_slice_assign(x, value, slice_tup_list, name=None) -> None:
    """Write ``value`` into the region ``slice_tup_list`` (as :func:`logical_slice`) of the
    logical (whole) variable ``x`` when the job runs; ``x`` may be split over several
    devices, each keeps its part. Built as ``assign(x, slice_update(x, value))``.

    Returns:
        None.

    Raises:
        ArgumentError: ``x`` is not a variable blob, or a tuple is malformed.
        JobBuildError: ``value``'s shape or dtype differs from the region's.
    """
    update = _slice_update(x, value, slice_tup_list, name=None if name is None else f"{name}-SliceUpdate")
    _assign(x, update, name=name)


__all__ = ["JobFileError", "custom_op_module", "eager_assign_121", "enable_typing_check", "get_interface_blob_value",
           "get_job_set", "indexed_slices_reduce_sum", "load_job", "logical_slice", "logical_slice_assign", "name_scope",
           "save_job", "scope", "set_interface_blob_value", "square_sum", "ssp_variable_proxy", "unique_with_counts",
           "unittest"]
