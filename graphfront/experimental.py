"""``flow.experimental``: graphfront's experimental entry points.

* ``save_job(job, path, format="binary"|"text", completed=True)`` and
  ``load_job(path)``: a ``Job`` proto as a file, binary or protobuf text format with
  OneFlow's field names (:mod:`graphfront.framework.job_io`). A loaded job is served
  with ``flow.serving.InferenceSession().load_job(job)``.
* OneFlow's ``flow.experimental`` ops: ``unique_with_counts``, ``indexed_slices_reduce_sum``,
  ``square_sum``, ``ssp_variable_proxy``.
* ``name_scope(name)``: the deprecated spelling of ``flow.scope.namespace`` (as
  ``flow.deprecated.variable_scope``).
* ``custom_op_module(op_module_name, module_path)``: OneFlow's user-op modules with Python
  kernels (:mod:`graphfront.custom_op_module`).
* ``unittest``: the same module as ``flow.unittest`` (:mod:`graphfront.unittest`).
"""
from graphfront import unittest
from graphfront.custom_op_module import CustomOpModule as custom_op_module
from graphfront.deprecated import variable_scope as name_scope
from graphfront.dynamic import indexed_slices_reduce_sum, unique_with_counts
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.job_io import JobFileError, load_job, save_job
from graphfront.math import square_sum
from graphfront.ops.builder import build_op as _build_op


def ssp_variable_proxy(var, buffer_size=1, name=None):
    """``(ref, value)`` of variable ``var`` (op ``ssp_variable_proxy``): ``ref`` is the
    variable (assign to it), ``value`` its value ``buffer_size`` runs ago (a ring of
    snapshots; the first ``buffer_size`` runs read the initial value)."""
    if not isinstance(var, BlobDesc):
        raise TypeError(f"flow.experimental.ssp_variable_proxy: argument 'var' expects a blob, received {var!r}")
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
        raise ValueError(f"flow.experimental.ssp_variable_proxy: buffer_size must be an int >= 1, received "
                         f"{buffer_size!r}")
    return _build_op("ssp_variable_proxy", {"var": var}, {"buffer_size": int(buffer_size)}, outputs=("ref", "value"),
                     name=name, prefix="SspVariableProxy_")


__all__ = ["JobFileError", "custom_op_module", "indexed_slices_reduce_sum", "load_job", "name_scope", "save_job", "square_sum",
           "ssp_variable_proxy", "unique_with_counts", "unittest"]
