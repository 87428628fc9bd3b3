"""Dynamic-shape functions of OneFlow's single-client API: ``flow.argwhere``,
``flow.cast_to_static_shape``, ``flow.sync_dynamic_resize`` and
``flow.experimental.unique_with_counts`` / ``indexed_slices_reduce_sum`` (OneFlow's
``python/oneflow/compatible/single_client/ops/array_ops.py`` and
``experimental/*`` at v0.6.0). The ops are in :mod:`graphfront.ops.dynamic_ops`.
"""
from __future__ import annotations

from graphfront.framework import dtypes as _dt
from graphfront.framework.blob_desc import expect_blob, expect_dtype, expect_ints
from graphfront.framework.errors import ArgumentError
from graphfront.ops.builder import add_system_op, build_op, new_system_op, unique_str

__all__ = ["argwhere", "cast_to_static_shape", "dynamic_reshape", "elem_cnt", "sync_dynamic_resize"]


def _blob(x, fn, arg):
    expect_blob(x, f"flow.{fn}", arg)


def _index_dtype(dtype, fn, arg):
    if dtype not in (_dt.int32, _dt.int64):
        raise ArgumentError(f"flow.{fn}: argument '{arg}' expects flow.int32 or flow.int64, received {dtype!r}")
    return dtype


def sync_dynamic_resize(inputs, size, name=None):
    """``inputs`` narrowed along axis 0 to ``size[0]`` rows, as a dynamic blob.

    ``size``: int32/int64 blob of one element, at most ``inputs.shape[0]`` at run time
    (ValueError otherwise). Built as OneFlow builds it: the system op
    ``sync_dynamic_resize_conf`` (``in``, ``size``, ``out``, ``axis = 0``).
    """
    _blob(inputs, "sync_dynamic_resize", "inputs")
    _blob(size, "sync_dynamic_resize", "size")
    conf, c = new_system_op("sync_dynamic_resize_conf", name, "SyncDynamicResize_")
    setattr(c, "in", inputs.lbn)  # "in" is a Python keyword
    c.size = size.lbn
    c.out = "out"
    c.axis = 0
    return add_system_op(conf, "out")


def dynamic_reshape(x, shape, name=None):
    """``x`` reshaped at run time: the system op ``dynamic_reshape_conf`` (``in``, ``out``,
    ``shape``), as OneFlow v0.6.0's ``flow.dynamic_reshape`` and ``flow.reshape`` of a dynamic
    blob build it (``python/oneflow/compatible/single_client/ops/array_ops.py``).

    The -1 of ``shape`` (at most one) is resolved at run time from the blob's actual element
    count, so a dynamic blob keeps its run-time rows: (N, 4) to (-1, 2) gives (2N, 2).

    Args:
        x: blob of any shape and dtype, static or dynamic.
        shape: list or tuple of ints > 0 and at most one -1.
        name: op name; default ``DynamicReshape_<n>``.

    Returns:
        BlobDesc: ``shape`` with the -1 resolved against ``x``'s static (maximum) shape,
        dynamic when ``x`` is.

    Raises:
        ArgumentError: ``x`` is not a blob, or ``shape`` is not such a list.
        JobBuildError: ``x``'s static shape cannot take ``shape``.
        OpRunError: at run time, the blob's actual element count cannot take ``shape``.
    """
    _blob(x, "dynamic_reshape", "x")
    shape = expect_ints(shape, "flow.dynamic_reshape", "shape", scalar=False)
    if shape.count(-1) > 1 or any(d == 0 or d < -1 for d in shape):
        raise ArgumentError(f"flow.dynamic_reshape: shape expects dims > 0 and at most one -1, received {shape}")
    conf, c = new_system_op("dynamic_reshape_conf", name, "DynamicReshape_")
    setattr(c, "in", x.lbn)  # "in" is a Python keyword
    c.shape.dim.extend(shape)
    c.out = "out"
    return add_system_op(conf, "out")


def shape_elem_cnt(x, fn, prefix, axis=None, dtype=None, name=None):
    """The system op ``shape_elem_cnt_conf`` counting ``x``'s run-time elements over ``axis``
    (a list of axes; None: all, as ``exclude_axis_conf`` with none excluded) in ``dtype``
    (default int32); ``fn`` names the calling function in errors."""
    _blob(x, fn, "x")
    conf, c = new_system_op("shape_elem_cnt_conf", name, prefix)
    c.x, c.y = x.lbn, "y"
    if axis is None:
        c.exclude_axis_conf.SetInParent()
    else:
        c.include_axis_conf.axis.extend(expect_ints(axis, f"flow.{fn}", "axis", scalar=False))
    if dtype is not None:
        c.data_type = expect_dtype(dtype, f"flow.{fn}").proto
    return add_system_op(conf, "y")


def elem_cnt(inputs, dtype=None, name=None):
    """The number of elements of ``inputs`` at run time, as a (1,) blob: the system op
    ``shape_elem_cnt_conf`` over all axes, as OneFlow v0.6.0's ``flow.elem_cnt``
    (``python/oneflow/compatible/single_client/ops/array_ops.py``).

    Args:
        inputs: blob of any shape and dtype; for a dynamic blob the count is of its run-time shape.
        dtype: flow.int32 (default), flow.int64, flow.float32 or flow.float64.
        name: op name; default ``ElemCnt_<n>``.

    Returns:
        BlobDesc: (1,) in ``dtype``.

    Raises:
        ArgumentError: ``inputs`` is not a blob or ``dtype`` not a graphfront dtype.
        JobBuildError: another ``dtype``.
    """
    return shape_elem_cnt(inputs, "elem_cnt", "ElemCnt_", None, dtype, name)


def argwhere(condition, dtype=None, name=None):
    """Coordinates of the non-zero elements of ``condition``: a dynamic blob of shape
    (number of non-zeros, rank) in ``dtype`` (flow.int32 default or flow.int64), rows in
    row-major order (op ``argwhere``, then ``sync_dynamic_resize`` to its ``output_size``)."""
    _blob(condition, "argwhere", "condition")
    dtype = _index_dtype(dtype if dtype is not None else _dt.int32, "argwhere", "dtype")
    name = name or unique_str("ArgWhere_")
    indices, size = build_op("argwhere", {"input": condition}, {"dtype": dtype}, outputs=("output", "output_size"),
                             name=name)
    return sync_dynamic_resize(indices, size, name=f"{name}_sync_dynamic_resize")


def cast_to_static_shape(x, name=None):
    """``x`` with a static BlobDesc (op ``cast_to_static_shape``); ``x`` itself when it is
    already static (as OneFlow). A smaller run-time blob is zero-padded to the static shape."""
    _blob(x, "cast_to_static_shape", "x")
    if not x.is_dynamic:
        return x
    return build_op("cast_to_static_shape", {"input": x}, outputs=("output",), name=name,
                    prefix="CastToStaticShape_")


def unique_with_counts(x, out_idx=_dt.int32, name=None):
    """Distinct values of 1-D ``x`` (op ``unique_with_counts``).

    Returns ``(y, idx, count, num_unique)``: ``y`` (shaped like ``x``) holds the
    ``num_unique`` distinct values in ascending order, then zeros; ``idx`` (``out_idx``)
    maps each element to its value (``x == y[idx]``); ``count`` the occurrences of each
    value; ``num_unique`` a (1,) blob.
    """
    _blob(x, "experimental.unique_with_counts", "x")
    _index_dtype(out_idx, "experimental.unique_with_counts", "out_idx")
    return build_op("unique_with_counts", {"x": x}, {"out_idx": out_idx}, outputs=("y", "idx", "count", "num_unique"),
                    name=name, prefix="UniqueWithCounts_")


def indexed_slices_reduce_sum(indices, values, name=None):
    """Sum the rows of ``values`` whose ``indices`` are equal (op ``indexed_slices_reduce_sum``).

    ``values`` has shape ``indices.shape + value_shape``. Returns ``(y_indices, y_values,
    num_unique)``: the ``num_unique`` distinct indices in ascending order, the summed rows
    (``(indices.size,) + value_shape``, zero past ``num_unique``) and an int64 (1,) count.
    """
    _blob(indices, "experimental.indexed_slices_reduce_sum", "indices")
    _blob(values, "experimental.indexed_slices_reduce_sum", "values")
    return build_op("indexed_slices_reduce_sum", {"x_indices": indices, "x_values": values},
                    outputs=("y_indices", "y_values", "num_unique"), name=name, prefix="IndexedSlicesReduceSum_")
