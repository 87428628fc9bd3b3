"""``flow.categorical_ordinal_encode`` and ``flow.layers.categorical_ordinal_encoder``
(OneFlow's ``python/oneflow/compatible/single_client/ops/categorical_ordinal_encode_op.py``
at v0.6.0); the op is ``CategoricalOrdinalEncode`` in :mod:`graphfront.ops.categorical_ops`.
"""
from __future__ import annotations

from graphfront import initializers, scope
from graphfront.framework.blob_desc import expect_blob, is_int
from graphfront.ops.builder import build_op
from graphfront.variables import get_variable

__all__ = ["categorical_ordinal_encode", "categorical_ordinal_encoder"]


def _blob(x, fn, arg):
    expect_blob(x, f"flow.{fn}", arg)


def categorical_ordinal_encode(table, size, input_tensor, hash_precomputed=True, name=None):
    """Dense ordinals (1, 2, ... by first appearance; 0 for hash 0) of the int32/int64 hashes
    ``input_tensor``, through the hash table held in ``table`` (2 * capacity,) and ``size``
    (1,), which are updated (op ``CategoricalOrdinalEncode``). Only precomputed hashes are
    supported (as OneFlow): ``hash_precomputed=False`` raises ValueError."""
    for arg, x in (("table", table), ("size", size), ("input_tensor", input_tensor)):
        _blob(x, "categorical_ordinal_encode", arg)
    if hash_precomputed is not True:
        raise ValueError("flow.categorical_ordinal_encode: only hash_precomputed=True is supported")
    return build_op("CategoricalOrdinalEncode", {"in": input_tensor, "table": table, "size": size},
                    {"hash_precomputed": True}, name=name, prefix="CategoricalOrdinalEncode_")


def categorical_ordinal_encoder(input_tensor, capacity, hash_precomputed=True, name="CategoricalOrdinalEncoder"):
    """Encode hashes to ordinals with a table of ``capacity`` keys held in the non-trainable
    variables ``<name>-Table`` (2 * capacity,) and ``<name>-Size`` (1,) (dtype of
    ``input_tensor``, zero-initialized); the op is ``<name>-Encode``."""
    _blob(input_tensor, "layers.categorical_ordinal_encoder", "input_tensor")
    if not is_int(capacity) or capacity <= 0:
        raise ValueError(f"flow.layers.categorical_ordinal_encoder: capacity must be a positive int, "
                         f"received {capacity!r}")
    dtype = input_tensor.dtype
    with scope.namespace(name):
        table = get_variable("Table", shape=(capacity * 2,), dtype=dtype,
                             initializer=initializers.constant_initializer(0, dtype=dtype), trainable=False,
                             reuse=False)
        size = get_variable("Size", shape=(1,), dtype=dtype,
                            initializer=initializers.constant_initializer(0, dtype=dtype), trainable=False, reuse=False)
        return categorical_ordinal_encode(table, size, input_tensor, hash_precomputed, name="Encode")
