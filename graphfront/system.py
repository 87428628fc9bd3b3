"""``flow.system``: OneFlow v0.6.0's legacy system-op wrappers
(``python/oneflow/compatible/single_client/ops/assign_op.py``)."""
from __future__ import annotations

from graphfront.array import check_assign
from graphfront.framework.blob_desc import BlobDesc
from graphfront.ops.builder import add_system_op, new_system_op

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
    check_assign(ref, value, "system.assign")
    conf, c = new_system_op("assign_conf", name, "Assign_")
    c.ref, c.value = ref.lbn, value.lbn
    add_system_op(conf)
    return ref
