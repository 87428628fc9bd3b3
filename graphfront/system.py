"""``flow.system``: OneFlow v0.6.0's legacy system-op wrappers
(``python/oneflow/compatible/single_client/ops/assign_op.py``)."""
from __future__ import annotations

from graphfront.array import _is_variable_or_alias
from graphfront.core import op_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc, expect_blob
from graphfront.framework.errors import ArgumentError
from graphfront.ops.builder import unique_str

__all__ = ["assign"]


def assign(ref, value, validate_shape=None, use_locking=None, name=None) -> BlobDesc:
    """Write ``value`` into the variable ``ref`` when the job runs: the legacy system op
    ``assign_conf`` (``ref``, ``value``), as ``flow.assign``'s user op ``assign`` does.

    Args:
        ref: variable blob of the job (``flow.get_variable``) or an alias of one.
        value: blob of ``ref``'s shape and dtype.
        validate_shape, use_locking: accepted and unused, as in OneFlow.
        name: op name; default ``Assign_<n>``.

    Returns:
        BlobDesc: ``ref`` (as OneFlow's wrapper returns it).

    Raises:
        ArgumentError: ``ref``/``value`` is not a blob, or ``ref`` is not a variable or its alias.
        JobBuildError: ``value``'s shape or dtype differs from ``ref``'s.
    """
    expect_blob(ref, "flow.system.assign", "ref")
    expect_blob(value, "flow.system.assign", "value")
    builder = jb.current()
    if not _is_variable_or_alias(builder, ref.op_name):
        raise ArgumentError(f"flow.system.assign: argument 'ref' must be a variable blob (flow.get_variable) or its "
                            f"alias, received '{ref.lbn}'")
    conf = op_conf_pb2.OperatorConf(name=builder.scope.prefix + (name or unique_str("Assign_")))
    conf.assign_conf.ref, conf.assign_conf.value = ref.lbn, value.lbn
    builder.add_op(conf)
    return ref
