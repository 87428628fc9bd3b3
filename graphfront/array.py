"""Array wrappers, star-exported as ``flow.*`` (``flow.reshape``, ``flow.concat``, ``flow.gather`` ...).

Thin wrappers in OneFlow v0.6.0's single-client signatures
(``python/oneflow/compatible/single_client/ops/array_ops.py``): they check the user's arguments,
turn them into the attrs of the op named in each docstring and return its output
blob(s). Shapes, dtypes and grads are defined once in :mod:`graphfront.ops.array_ops`;
build-time errors of those ops name the op, the argument, what was expected and what
was received.

graphfront additions beyond single-client's names: ``split`` (TF-style, built from
``slice``), ``batch_gather``, ``constant_pad1d``/``constant_pad3d``, ``roll``, ``flip``,
``narrow`` and ``eye`` (the ops exist in v0.6.0; their wrappers follow OneFlow's later
``flow.*`` signatures).
"""
from __future__ import annotations

import builtins
import math
import numbers

from graphfront.framework.errors import ArgumentError
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import (BlobDesc, expect_blob, expect_dtype, expect_int, expect_ints,
                                             expect_number)
from graphfront.dynamic import argwhere, dynamic_reshape
from graphfront.ops.builder import add_system_op, build_op, new_system_op, unique_str
from graphfront.ops import registry
from graphfront.ops.common import balanced_range

__all__ = [
    "reshape", "reshape_like", "nonzero", "flatten", "identity", "identity_n", "cast", "transpose", "concat", "split",
    "stack", "slice", "slice_v2", "slice_update", "reverse", "gather", "batch_gather", "gather_nd", "scatter_nd",
    "tensor_scatter_nd_add", "tensor_scatter_nd_update", "unsorted_segment_sum", "unsorted_segment_sum_like",
    "unsorted_batch_segment_sum", "dim_gather", "dim_scatter_add", "dim_scatter_update", "dim_scatter_add_like", "squeeze", "expand_dims", "expand", "broadcast_like", "pad",
    "pad_grad", "same_padding", "constant_pad1d", "constant_pad2d", "constant_pad3d", "zero_pad2d", "reflection_pad2d",
    "replication_pad2d", "one_hot", "constant", "zeros", "ones", "constant_like", "ones_like", "zeros_like",
    "range", "eye", "diag", "roll", "flip", "narrow", "assign", "constant_scalar",
    "broadcast_to_compatible_with",
]

_range = builtins.range


def _blob(x, fn, arg="x"):
    return expect_blob(x, f"flow.{fn}", arg)


def _blobs(xs, fn, arg):
    if isinstance(xs, BlobDesc) or not isinstance(xs, (list, tuple)) or not xs:
        raise ArgumentError(f"flow.{fn}: argument '{arg}' expects a non-empty list of blobs, received {xs!r}")
    for i, x in enumerate(xs):
        _blob(x, fn, f"{arg}[{i}]")
    return list(xs)


def _int(v, fn, arg):
    return expect_int(v, f"flow.{fn}", arg)


def _ints(v, fn, arg):
    return expect_ints(v, f"flow.{fn}", arg)


def _axis(axis, ndim, fn, arg="axis"):
    """Normalize a possibly negative axis of a rank-``ndim`` blob (ValueError when out of range)."""
    axis = _int(axis, fn, arg)
    if not -ndim <= axis < ndim:
        raise ArgumentError(f"flow.{fn}: {arg} {axis} is out of range for a rank-{ndim} blob")
    return axis % ndim


def _dtype(dtype, fn, arg="dtype"):
    return expect_dtype(dtype, f"flow.{fn}", arg)


def _number(v, fn, arg):
    """``v`` itself (an int stays an int) once it is known to be a real number."""
    expect_number(v, f"flow.{fn}", arg)
    return v


def _integral(v, fn, arg, dtype):
    """A number ``v`` given for an element of an integer ``dtype`` blob, truncated to an int as
    OneFlow's wrappers do; ArgumentError for NaN or an infinity, which no int is."""
    if not math.isfinite(v):
        raise ArgumentError(f"flow.{fn}: argument '{arg}' {v!r} cannot be an element of the {dtype.name} blob")
    return int(v)


def _sub_name(name, suffix):
    return None if name is None else f"{name}{suffix}"


# ------------------------------------------------------------------ reshape family

def reshape(x, shape, name=None) -> BlobDesc:
    """Reshape ``x`` to ``shape``.

    Op ``reshape``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    One -1 is resolved here, so the op gets a full shape.

    Args:
        x: blob, any shape and dtype.
        shape: list/tuple of ints with the element count of ``x``; at most one -1.
        name: op name; default ``Reshape_<n>``.

    Returns:
        BlobDesc: ``shape`` (with -1 resolved), the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob, ``shape`` is not a list or tuple of ints, has
            several -1, or no size fits the -1.
        JobBuildError: the element counts differ.
    """
    _blob(x, "reshape")
    shape = expect_ints(shape, "flow.reshape", "shape", scalar=False)
    if x.is_dynamic:  # (as OneFlow: the -1 is resolved at run time)
        return dynamic_reshape(x, shape, name=name)
    if shape.count(-1) > 1:
        raise ArgumentError(f"flow.reshape: shape {tuple(shape)} may contain at most one -1")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        total = math.prod(x.shape)
        if rest == 0 or total % rest:
            raise ArgumentError(f"flow.reshape: cannot reshape {x.shape} into {tuple(shape)}")
        shape[shape.index(-1)] = total // rest
    return build_op("reshape", {"in": x}, {"shape": tuple(shape)}, name=name, prefix="Reshape_")


def nonzero(a, name=None):
    """Coordinates of the non-zero elements of ``a``, one column per element: ``argwhere``
    then ``transpose`` (perm (1, 0)), as OneFlow v0.6.0's ``flow.nonzero``
    (``python/oneflow/compatible/single_client/ops/array_ops.py``).

    Args:
        a: blob of any shape and numeric or bool dtype.
        name: op-name stem: ops ``<name>_ArgWhere`` and ``<name>_Transpose``; default
            ``Nonzero_ArgWhere_<n>`` and ``Nonzero_Transpose_<n>``.

    Returns:
        BlobDesc: int32 (rank of ``a``, number of non-zeros), dynamic in its second dim.

    Raises:
        ArgumentError: ``a`` is not a blob.
    """
    _blob(a, "nonzero", "a")
    where, turn = ((f"{name}_ArgWhere", f"{name}_Transpose") if name is not None else
                   (unique_str("Nonzero_ArgWhere_"), unique_str("Nonzero_Transpose_")))
    return transpose(argwhere(a, name=where), perm=(1, 0), name=turn)


def reshape_like(x, like, name=None) -> BlobDesc:
    """``x`` reshaped to ``like``'s shape.

    Op ``reshape_like``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        x: blob, any shape and dtype.
        like: blob whose shape is taken; same element count as ``x``.
        name: op name; default ``ReshapeLike_<n>``.

    Returns:
        BlobDesc: ``like.shape``, the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``like`` is not a blob.
        JobBuildError: the element counts differ.
    """
    return build_op("reshape_like", {"in": _blob(x, "reshape_like"), "like": _blob(like, "reshape_like", "like")},
                    name=name, prefix="ReshapeLike_")


def flatten(input, start_dim=0, end_dim=-1, name=None) -> BlobDesc:  # noqa: A002 - OneFlow's name
    """Merge dims ``start_dim..end_dim`` (inclusive) into one.

    Op ``flatten``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        input: blob, any shape and dtype.
        start_dim: int >= 0, first merged dim.
        end_dim: int, last merged dim; negative counts from the end.
        name: op name; default ``Flatten_<n>``.

    Returns:
        BlobDesc: ``input.shape[:start_dim] + (prod of the merged dims,) + input.shape[end_dim+1:]``,
        the dtype of ``input``.

    Raises:
        ArgumentError: ``input`` is not a blob.
        JobBuildError: ``start_dim``/``end_dim`` are out of range or out of order.
    """
    return build_op("flatten", {"in": _blob(input, "flatten", "input")}, {"start_dim": start_dim, "end_dim": end_dim},
                    name=name, prefix="Flatten_")


def squeeze(input, axis=None, name=None) -> BlobDesc:  # noqa: A002
    """Remove size-1 dims.

    Op ``squeeze``, attr ``axes``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        input: blob, any shape and dtype.
        axis: None (every size-1 dim), an int or a list of ints in [-rank, rank).
        name: op name; default ``Squeeze_<n>``.

    Returns:
        BlobDesc: ``input.shape`` without the listed dims ((1,) when none is left), the dtype of ``input``.

    Raises:
        ArgumentError: ``input`` is not a blob or an axis is not an int in range.
        JobBuildError: a listed dim does not have size 1.
    """
    _blob(input, "squeeze", "input")
    if axis is None:
        axes = [i for i, s in enumerate(input.shape) if s == 1]
    else:
        axes = [_axis(a, len(input.shape), "squeeze") for a in _ints(axis, "squeeze", "axis")]
    return build_op("squeeze", {"in": input}, {"axes": axes}, name=name, prefix="Squeeze_")


def expand_dims(input, axis, name=None) -> BlobDesc:  # noqa: A002
    """Insert a size-1 dim at ``axis``.

    Op ``expand_dims``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        input: blob of rank r, any dtype.
        axis: int in [-r-1, r].
        name: op name; default ``ExpandDims_<n>``.

    Returns:
        BlobDesc: rank r + 1 with a 1 at ``axis``, the dtype of ``input``.

    Raises:
        ArgumentError: ``input`` is not a blob or ``axis`` is not an int in range.
    """
    _blob(input, "expand_dims", "input")
    n = len(input.shape)
    axis = _int(axis, "expand_dims", "axis")
    if not -(n + 1) <= axis <= n:
        raise ArgumentError(f"flow.expand_dims: axis {axis} is out of range [{-(n + 1)}, {n}] for a rank-{n} blob")
    return build_op("expand_dims", {"in": input}, {"axis": axis % (n + 1)}, name=name, prefix="ExpandDims_")


def expand(x, expand_size, name=None) -> BlobDesc:
    """Broadcast ``x`` to ``expand_size`` (op ``expand``, as ``torch.Tensor.expand``).

    -1 keeps a dim; new dims lead. The op gets ``logical_in_shape`` = x.shape and
    ``logical_expand_shape`` = the resolved output shape; its gradient ``expand_grad`` sums
    dy over the expanded dims (OneFlow v0.6.0 ``oneflow/user/ops/expand_op.cpp``).

    Args:
        x: blob, any shape and dtype.
        expand_size: int or list of ints, at least ``x``'s rank; each dim equals ``x``'s, or
            ``x``'s is 1, or -1.
        name: op name; default ``Expand_<n>``.

    Returns:
        BlobDesc: ``expand_size`` with -1 resolved, the dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob, ``expand_size`` is not ints or has fewer dims than ``x``.
        JobBuildError: a dim of ``x`` other than 1 differs from the target.
    """
    _blob(x, "expand")
    size = _ints(expand_size, "expand", "expand_size")
    offset = len(size) - len(x.shape)
    if offset < 0:
        raise ArgumentError(f"flow.expand: expand_size {size} has fewer dims than x {x.shape}")
    resolved = [x.shape[i - offset] if e == -1 and i >= offset else e for i, e in enumerate(size)]
    return build_op("expand", {"in": x}, {"logical_in_shape": list(x.shape), "logical_expand_shape": resolved},
                    name=name, prefix="Expand_")


def broadcast_to_compatible_with(x, compatible, name=None) -> BlobDesc:
    """Broadcast ``x`` to the numpy-broadcast shape of ``x`` and the blobs in ``compatible``.

    The shapes joined are the run-time ones: with a dynamic blob among ``compatible`` the
    result follows that blob's actual size, not its maximum shape. OneFlow emits its legacy
    ``broadcast_to_compatible_with`` system op (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/array_ops.py``); graphfront emits that op
    when a ``compatible`` blob is dynamic, else the ``expand`` op to the (then fixed)
    broadcast shape. Gradient (``x`` only): summed over the broadcast dims.

    Args:
        x: blob, any shape and dtype.
        compatible: list/tuple of blobs whose shapes join the broadcast.
        name: op name; default ``BroadcastToCompatibleWith_<n>``.

    Returns:
        BlobDesc: the broadcast shape (of the maximum shapes), the dtype of ``x``; dynamic
        when ``x`` or a ``compatible`` blob is.

    Raises:
        ArgumentError: ``x`` or an item of ``compatible`` is not a blob, ``compatible`` is not
            a list/tuple, or the shapes do not broadcast.
    """
    _blob(x, "broadcast_to_compatible_with")
    if isinstance(compatible, BlobDesc) or not isinstance(compatible, (list, tuple)):
        raise ArgumentError(f"flow.broadcast_to_compatible_with: argument 'compatible' expects a list of blobs, "
                            f"received {compatible!r}")
    blobs = [_blob(c, "broadcast_to_compatible_with", f"compatible[{i}]") for i, c in enumerate(compatible)]
    shapes = [x.shape] + [c.shape for c in blobs]
    rank = builtins.max(len(sh) for sh in shapes)
    out = []
    for d in _range(rank):
        dims = {sh[d - rank + len(sh)] for sh in shapes if d - rank + len(sh) >= 0} - {1}
        if len(dims) > 1:
            raise ArgumentError(f"flow.broadcast_to_compatible_with: shapes {shapes} do not broadcast together")
        out.append(dims.pop() if dims else 1)
    if not builtins.any(c.is_dynamic for c in blobs):
        return build_op("expand", {"in": x}, {"logical_in_shape": list(x.shape), "logical_expand_shape": out},
                        name=name, prefix="BroadcastToCompatibleWith_")
    conf, c = new_system_op("broadcast_to_compatible_with_conf", name, "BroadcastToCompatibleWith_")
    c.x = x.lbn
    c.compatible.extend(b.lbn for b in blobs)
    c.y = "y"
    return add_system_op(conf, "y")


def broadcast_like(x, like, broadcast_axes=None, name=None) -> BlobDesc:
    """Broadcast ``x`` to ``like``'s shape along ``broadcast_axes``.

    Op ``broadcast_like``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        x: blob; its shape is ``like``'s with the broadcast axes removed or set to 1 ((1,) where
            every axis is broadcast), its dtype ``like``'s.
        like: blob whose shape and dtype are taken.
        broadcast_axes: int or list of ints of ``like``'s dims; None: every axis where ``x``
            (left-padded with 1s to ``like``'s rank) differs from ``like`` (for a one-element
            ``x``, every axis, OneFlow's default).
        name: op name; default ``BroadcastLike_<n>``.

    Returns:
        BlobDesc: ``like.shape``, the dtype of ``x`` (and ``like``).

    Raises:
        ArgumentError: ``x`` or ``like`` is not a blob, or ``broadcast_axes`` is not ints.
        JobBuildError: the shapes do not fit the axes, or the dtypes differ.
    """
    _blob(x, "broadcast_like")
    _blob(like, "broadcast_like", "like")
    if broadcast_axes is None:
        padded = (1,) * (len(like.shape) - len(x.shape)) + tuple(x.shape)
        broadcast_axes = [i for i, (a, b) in enumerate(zip(padded, like.shape)) if a != b] or \
            list(_range(len(like.shape)))
    return build_op("broadcast_like", {"x": x, "like": like}, {"broadcast_axes": _ints(broadcast_axes, "broadcast_like",
                                                                                      "broadcast_axes")},
                    outputs=("y",), name=name, prefix="BroadcastLike_")


def identity(x, name=None) -> BlobDesc:
    """A new blob equal to ``x``.

    Op ``identity``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        x: blob, any shape and dtype.
        name: op name; default ``Identity_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob.
    """
    return build_op("identity", {"in": _blob(x, "identity")}, name=name, prefix="Identity_")


def identity_n(inputs, name=None) -> tuple:
    """Identity over a list of blobs.

    Op ``tuple_identity``, one ``out`` per input; OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        inputs: non-empty list/tuple of blobs.
        name: op name; default ``IdentityN_<n>``.

    Returns:
        tuple of BlobDesc: one per input, of its shape and dtype.

    Raises:
        ArgumentError: ``inputs`` is not a non-empty list of blobs.
    """
    inputs = _blobs(inputs, "identity_n", "inputs")
    outs = build_op("tuple_identity", {"in": inputs}, name=name, prefix="IdentityN_", num={"out": len(inputs)})
    return outs if isinstance(outs, tuple) else (outs,)


def cast(x, dtype, name=None) -> BlobDesc:
    """Convert ``x`` to ``dtype``.

    Op ``cast``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        x: blob, any shape and dtype.
        dtype: graphfront dtype (``flow.float32``, ``flow.int64`` ...).
        name: op name; default ``Cast_<n>``.

    Returns:
        BlobDesc: the shape of ``x`` in ``dtype``; ``x`` itself when it already has that dtype.

    Raises:
        ArgumentError: ``x`` is not a blob or ``dtype`` is not a graphfront dtype.
    """
    _blob(x, "cast")
    _dtype(dtype, "cast")
    if x.dtype is dtype:
        return x
    return build_op("cast", {"in": x}, {"dtype": dtype}, name=name, prefix="Cast_")


# ------------------------------------------------------------------ transpose / concat / split / stack

def transpose(a, perm=None, conjugate=False, batch_axis_non_change=False, name=None) -> BlobDesc:
    """Permute the dims of ``a``: output dim i = input dim ``perm[i]``.

    Op ``transpose``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        a: blob, any shape and dtype.
        perm: list/tuple of ints, a permutation of 0..rank-1 (required).
        conjugate: must be False (complex dtypes are not supported).
        batch_axis_non_change: accepted for OneFlow compatibility, unused.
        name: op name; default ``Transpose_<n>``.

    Returns:
        BlobDesc: ``tuple(a.shape[p] for p in perm)``, the dtype of ``a``.

    Raises:
        ArgumentError: ``a`` is not a blob, ``perm`` is None or not ints.
        NotImplementedError: ``conjugate`` is True.
        JobBuildError: ``perm`` is not a permutation of the dims.
    """
    _blob(a, "transpose", "a")
    if perm is None:
        raise ArgumentError("flow.transpose: perm is required (a permutation of the dims of a)")
    if conjugate:
        raise NotImplementedError("flow.transpose: conjugate=True is not supported")
    return build_op("transpose", {"input": a}, {"perm": _ints(perm, "transpose", "perm")}, outputs=("output",),
                    name=name, prefix="Transpose_")


def concat(inputs=None, axis=0, max_dim_size=None, name=None, values=None) -> BlobDesc:
    """Concatenate blobs along ``axis``.

    Op ``concat``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        inputs: non-empty list/tuple of blobs of one dtype and rank, equal in every dim but
            ``axis``; a one-element list is returned as is.
        axis: int in [-rank, rank).
        max_dim_size: int bounding the output dim for dynamic inputs; default the
            concatenated size.
        name: op name; default ``Concat_<n>``.
        values: alias of ``inputs``.

    Returns:
        BlobDesc: the inputs' shape with dim ``axis`` summed, their dtype.

    Raises:
        ArgumentError: ``inputs`` is not a non-empty list of blobs or ``axis`` is not an int.
        JobBuildError: dtypes, ranks or the other dims differ, or ``axis`` is out of range.
    """
    if inputs is None:
        inputs = values
    inputs = _blobs(inputs, "concat", "inputs")
    if len(inputs) == 1:
        return inputs[0]
    axis = _int(axis, "concat", "axis")
    if max_dim_size is None:
        n = len(inputs[0].shape)
        ax = axis % n if n and -n <= axis < n else None
        max_dim_size = 0 if ax is None else builtins.sum(
            x.shape[ax] if len(x.shape) > ax else 0 for x in inputs)
    return build_op("concat", {"in": inputs}, {"axis": axis, "max_dim_size": max_dim_size}, name=name,
                    prefix="Concat_")


def split(x, num_or_size_splits, axis=0, name=None) -> list:
    """Split ``x`` along ``axis`` into a list of blobs (one ``slice`` op each, as ``tf.split``).

    Args:
        x: blob, any shape and dtype.
        num_or_size_splits: an int n (the dim must divide evenly into n parts) or a list of
            sizes summing to the dim (one entry may be -1: the rest).
        axis: int in [-rank, rank).
        name: prefix of the slice ops (``<name>_<i>``); default unique names.

    Returns:
        list of BlobDesc: the parts in order, ``x``'s shape with dim ``axis`` of each size,
        ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``axis`` is out of range, n does not divide the
            dim, or the sizes do not add up to it.
    """
    _blob(x, "split")
    axis = _axis(axis, len(x.shape), "split")
    dim = x.shape[axis]
    if isinstance(num_or_size_splits, numbers.Integral) and not isinstance(num_or_size_splits, bool):
        n = int(num_or_size_splits)
        if n < 1 or dim % n:
            raise ArgumentError(f"flow.split: dim {axis} of x {x.shape} ({dim}) cannot be split into {n} equal parts")
        sizes = [dim // n] * n
    else:
        sizes = _ints(num_or_size_splits, "split", "num_or_size_splits")
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = dim - builtins.sum(s for s in sizes if s != -1)
        if any(s < 0 for s in sizes) or builtins.sum(sizes) != dim:
            raise ArgumentError(f"flow.split: sizes {num_or_size_splits} do not add up to dim {axis} of x {x.shape} "
                                f"({dim})")
    outs, begin = [], 0
    for i, s in enumerate(sizes):
        tup = [(None, None, None)] * len(x.shape)
        tup[axis] = (begin, begin + s, 1)
        outs.append(slice_v2(x, tup, name=_sub_name(name, f"_{i}")))
        begin += s
    return outs


def stack(inputs, axis=0, name=None) -> BlobDesc:
    """Stack blobs of one shape along a new dim ``axis``.

    ``expand_dims`` + ``concat``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        inputs: non-empty list/tuple of blobs of one shape (rank r) and dtype.
        axis: int in [-r-1, r].
        name: name of the ``concat`` op (the ``expand_dims`` ops are ``<name>-expand_dims_<i>``);
            default ``Stack_<n>``.

    Returns:
        BlobDesc: rank r + 1 with ``len(inputs)`` at ``axis``, the inputs' dtype.

    Raises:
        ArgumentError: ``inputs`` is not a non-empty list of blobs, the shapes differ, or
            ``axis`` is out of range.
    """
    inputs = _blobs(inputs, "stack", "inputs")
    n = len(inputs[0].shape)
    axis = _int(axis, "stack", "axis")
    if not -(n + 1) <= axis <= n:
        raise ArgumentError(f"flow.stack: axis {axis} is out of range [{-(n + 1)}, {n}] for rank-{n} inputs")
    axis %= n + 1
    for i, x in enumerate(inputs):
        if x.shape != inputs[0].shape:
            raise ArgumentError(f"flow.stack: inputs[{i}] has shape {x.shape}, inputs[0] has {inputs[0].shape}")
    name = name or unique_str("Stack_")
    expanded = [expand_dims(x, axis, name=f"{name}-expand_dims_{i}") for i, x in enumerate(inputs)]
    if len(expanded) == 1:
        return expanded[0]
    return concat(expanded, axis=axis, name=name)


# ------------------------------------------------------------------ slicing

_INT64_MAX = 2 ** 63 - 1

def _slice_attrs(x, slice_tup_list, fn):
    """(start, stop, step) lists of the ``slice`` op from per-dim tuples (None = default)."""
    tups = list(slice_tup_list)
    n = len(x.shape)
    if len(tups) > n:
        raise ArgumentError(f"flow.{fn}: {len(tups)} slice tuples for a rank-{n} blob {x.shape}")
    tups += [(None, None, None)] * (n - len(tups))
    start, stop, step = [], [], []
    for d, (tup, size) in enumerate(zip(tups, x.shape)):
        if tup is None:
            tup = (None, None, None)
        if not isinstance(tup, (list, tuple)) or len(tup) != 3:
            raise ArgumentError(f"flow.{fn}: entry {d} must be a (start, stop, step) tuple, received {tup!r}")
        b, e, s = tup
        s = 1 if s is None else _int(s, fn, "step")
        if s == 0:
            raise ArgumentError(f"flow.{fn}: step of dim {d} must not be 0")
        b = (0 if s > 0 else -1) if b is None else _int(b, fn, "start")
        if e is None:  # the end of the dim: of its run-time size when x is dynamic
            e = (size if s > 0 else -(size + 1)) if not x.is_dynamic else (_INT64_MAX if s > 0 else -_INT64_MAX - 1)
        else:
            e = _int(e, fn, "stop")
        start.append(b)
        stop.append(e)
        step.append(s)
    return {"start": start, "stop": stop, "step": step}


def slice_v2(x, slice_tup_list, name=None) -> BlobDesc:
    """Python-style slicing with one (start, stop, step) tuple per dim.

    Op ``slice``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Entries may be None (whole range, or a tuple holding None for a default); missing
    trailing dims are taken whole; negative start/stop count from the end; a negative step
    walks backwards. Gradient: ``slice_grad``.

    Args:
        x: blob, any shape and dtype.
        slice_tup_list: list of at most rank (start, stop, step) tuples of ints or None.
        name: op name; default ``Slice_<n>``.

    Returns:
        BlobDesc: per dim, the length of ``range(start, stop, step)`` clipped to the dim, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, there are more tuples than dims, an entry is not a
            3-tuple of ints/None, or a step is 0.
    """
    _blob(x, "slice_v2")
    return build_op("slice", {"x": x}, _slice_attrs(x, slice_tup_list, "slice_v2"), outputs=("y",), name=name,
                    prefix="Slice_")



def balanced_parts(x, axis, n, name=None) -> tuple:
    """``x`` cut along ``axis`` (non-negative) into ``n`` slices, the first ``len % n`` one
    longer (OneFlow's balanced split of a blob over ``n`` devices); ops ``slice`` named
    ``<name>_<i>`` when ``name`` is given."""
    parts = []
    for i in builtins.range(n):
        r = balanced_range(x.shape[axis], n, i)
        tups = [(None, None, None)] * len(x.shape)
        tups[axis] = (r.start, r.stop, 1)
        parts.append(slice_v2(x, tups, name=None if name is None else f"{name}_{i}"))
    return tuple(parts)

def slice(x, begin, size, name=None) -> BlobDesc:  # noqa: A001 - OneFlow's name
    """TF-style slice: ``size[d]`` elements from ``begin[d]`` per dim.

    Op ``slice``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        x: blob, any shape and dtype.
        begin: list of rank ints (None means 0), each in [-dim, dim).
        size: list of rank ints, each in [1, dim]; None or -1 means "to the end of the dim";
            begin + size past the end of the dim stops at the end (as OneFlow's does).
        name: op name; default ``Slice_<n>``.

    Returns:
        BlobDesc: ``size`` with None/-1 resolved (clipped to the dims), ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``begin``/``size`` do not have rank entries, a
            begin is out of range, or a size is 0, below -1 or larger than its dim (OneFlow
            raises ``ValueError("element of size is invalid")`` there).
    """
    _blob(x, "slice")
    n = len(x.shape)
    if not isinstance(begin, (list, tuple)) or not isinstance(size, (list, tuple)) or len(begin) != n or \
            len(size) != n:
        raise ArgumentError(f"flow.slice: begin {begin} and size {size} need {n} entries (x has shape {x.shape})")
    tups = []
    for d, (b, s, dim) in enumerate(zip(begin, size, x.shape)):
        b = 0 if b is None else _int(b, "slice", "begin")
        if not -dim <= b < max(dim, 1):
            raise ArgumentError(f"flow.slice: begin[{d}] = {b} is out of range for dim {d} of x {x.shape}")
        b %= max(dim, 1)
        if s is None or s == -1:
            e = dim
        else:
            s = _int(s, "slice", "size")
            if not 0 < s <= dim:
                raise ArgumentError(f"flow.slice: size[{d}] = {s} is invalid for dim {d} of x {x.shape}: expected "
                                    f"None, -1 or an int in [1, {dim}]")
            e = min(b + s, dim)
        tups.append((b, e, 1))
    return slice_v2(x, tups, name=name)


def reverse(input, axis, name=None) -> BlobDesc:  # noqa: A002
    """Reverse ``input`` along ``axis``.

    Op ``slice`` with step -1, differentiable; OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        input: blob, any shape and dtype.
        axis: int or list of ints in [-rank, rank).
        name: op name; default ``Reverse_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``input``.

    Raises:
        ArgumentError: ``input`` is not a blob or an axis is not an int in range.
    """
    _blob(input, "reverse", "input")
    axes = {_axis(a, len(input.shape), "reverse") for a in _ints(axis, "reverse", "axis")}
    tups = [(None, None, -1) if d in axes else (None, None, None) for d in _range(len(input.shape))]
    return build_op("slice", {"x": input}, _slice_attrs(input, tups, "reverse"), outputs=("y",), name=name,
                    prefix="Reverse_")


def slice_update(x, update, slice_tup_list, name=None) -> BlobDesc:
    """``x`` with the region given by ``slice_tup_list`` replaced by ``update``.

    Op ``slice_update``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        x: blob, any shape and dtype.
        update: blob of the region's shape and ``x``'s dtype.
        slice_tup_list: per-dim (start, stop, step) tuples, as for ``slice_v2``.
        name: op name; default ``SliceUpdate_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` or ``update`` is not a blob, or a tuple is malformed.
        JobBuildError: ``update``'s shape or dtype does not match the region.
    """
    _blob(x, "slice_update")
    _blob(update, "slice_update", "update")
    return build_op("slice_update", {"x": x, "update": update}, _slice_attrs(x, slice_tup_list, "slice_update"),
                    outputs=("y",), name=name, prefix="SliceUpdate_")


def narrow(x, dim, start, length, name=None) -> BlobDesc:
    """``length`` elements of dim ``dim`` from ``start`` (op ``narrow``; gradient ``narrow_grad``).

    As ``torch.narrow`` (OneFlow v0.6.0 ``oneflow/user/ops/narrow_op.cpp``).

    Args:
        x: blob, any shape and dtype.
        dim: int, the dim narrowed.
        start: int >= 0, first element kept.
        length: int >= 0, with start + length <= the dim.
        name: op name; default ``Narrow_<n>``.

    Returns:
        BlobDesc: ``x``'s shape with dim ``dim`` = ``length``, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob or an argument is not an int.
        JobBuildError: ``dim``/``start``/``length`` are out of range.
    """
    _blob(x, "narrow")
    return build_op("narrow", {"in": x}, {"dim": _int(dim, "narrow", "dim"), "start": _int(start, "narrow", "start"),
                                          "length": _int(length, "narrow", "length")}, name=name, prefix="Narrow_")


# ------------------------------------------------------------------ gather / scatter

def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None) -> BlobDesc:
    """Gather slices of ``params`` along ``axis`` at integer ``indices``.

    Op ``gather``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    With ``batch_dims`` > 0 (and ``axis == batch_dims``) the op is ``batch_gather``
    whatever the rank of ``indices``, as in OneFlow: its batch dims are all dims of
    ``indices`` but the last (OneFlow-Benchmark's BERT gathers ``(B, S, H)`` hidden states
    at ``(B, P)`` positions with ``axis=2, batch_dims=2``).

    Args:
        params: blob, any shape and dtype.
        indices: int32/int64 blob of any shape, values in [0, params.shape[axis]).
        validate_indices: accepted for OneFlow compatibility, unused.
        axis: int (negative counts from the end); default ``batch_dims``.
        batch_dims: int >= 0.
        name: op name; default ``Gather_<n>``.

    Returns:
        BlobDesc: ``params.shape[:axis] + indices.shape + params.shape[axis+1:]``;
        with ``batch_dims`` > 0 ``indices.shape + params.shape[rank(indices):]``
        (``batch_gather``), ``params``' dtype.

    Raises:
        ArgumentError: ``params``/``indices`` is not a blob or an argument is not an int.
        JobBuildError: with ``batch_dims`` > 0, the leading dims of ``indices`` differ
            from those of ``params`` (``batch_gather``'s check).
        NotImplementedError: ``batch_dims`` > 0 with ``axis != batch_dims``.
    """
    _blob(params, "gather", "params")
    _blob(indices, "gather", "indices")
    batch_dims = _int(batch_dims, "gather", "batch_dims")
    axis = batch_dims if axis is None else _int(axis, "gather", "axis")
    if axis < 0:
        axis += len(params.shape)
    if batch_dims > 0:
        if axis != batch_dims:
            raise NotImplementedError(f"flow.gather: with batch_dims={batch_dims} only axis={batch_dims} is "
                                      f"supported, received {axis}")
        return batch_gather(params, indices, name=name)
    return build_op("gather", {"in": params, "indices": indices}, {"axis": axis}, name=name, prefix="Gather_")


def batch_gather(params, indices, name=None) -> BlobDesc:
    """Per-batch gather along the first non-batch dim.

    Op ``batch_gather``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        params: blob (B..., N, ...), any dtype.
        indices: int32/int64 blob (B..., K), values in [0, N).
        name: op name; default ``BatchGather_<n>``.

    Returns:
        BlobDesc: (B..., K, ...), ``params``' dtype.

    Raises:
        ArgumentError: ``params`` or ``indices`` is not a blob.
        JobBuildError: the batch dims differ or ``indices`` is not integer.
    """
    _blob(params, "batch_gather", "params")
    _blob(indices, "batch_gather", "indices")
    return build_op("batch_gather", {"in": params, "indices": indices}, name=name, prefix="BatchGather_")


def gather_nd(params, indices, name=None) -> BlobDesc:
    """Rows of ``params`` indexed by the last dim k of ``indices``.

    Op ``gather_nd``, as ``tf.gather_nd``; OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        params: blob, any shape and dtype.
        indices: int32/int64 blob (..., k), k <= rank of ``params``.
        name: op name; default ``GatherNd_<n>``.

    Returns:
        BlobDesc: ``indices.shape[:-1] + params.shape[k:]``, ``params``' dtype.

    Raises:
        ArgumentError: ``params`` or ``indices`` is not a blob.
        JobBuildError: k exceeds the rank of ``params`` or ``indices`` is not integer.
    """
    return build_op("gather_nd", {"params": _blob(params, "gather_nd", "params"),
                                  "indices": _blob(indices, "gather_nd", "indices")}, name=name,
                                  prefix="GatherNd_")


def scatter_nd(indices, updates, shape, name=None) -> BlobDesc:
    """Zeros of ``shape`` with ``updates`` added at ``indices``.

    Op ``scatter_nd``; duplicates add up; OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        indices: int32/int64 blob (..., k).
        updates: blob ``indices.shape[:-1] + shape[k:]``.
        shape: list of ints, the output shape.
        name: op name; default ``ScatterNd_<n>``.

    Returns:
        BlobDesc: ``shape``, ``updates``' dtype.

    Raises:
        ArgumentError: ``indices``/``updates`` is not a blob or ``shape`` is not ints.
        JobBuildError: the shapes do not fit.
    """
    _blob(indices, "scatter_nd", "indices")
    _blob(updates, "scatter_nd", "updates")
    return build_op("scatter_nd", {"indices": indices, "updates": updates},
                    {"shape": tuple(_ints(shape, "scatter_nd", "shape"))}, name=name, prefix="ScatterNd_")


def tensor_scatter_nd_add(params, indices, updates, name=None) -> BlobDesc:
    """Copy of ``params`` with ``updates`` added at ``indices``.

    Op ``tensor_scatter_nd_add``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        params: blob, any shape and dtype.
        indices: int32/int64 blob (..., k).
        updates: blob ``indices.shape[:-1] + params.shape[k:]``, ``params``' dtype.
        name: op name; default ``TensorScatterNdAdd_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``params``.

    Raises:
        ArgumentError: ``params``, ``indices`` or ``updates`` is not a blob.
        JobBuildError: the shapes or dtypes do not fit.
    """
    _blob(params, "tensor_scatter_nd_add", "params")
    return build_op("tensor_scatter_nd_add", {"params": params,
                                              "updates": _blob(updates, "tensor_scatter_nd_add", "updates"),
                                              "indices": _blob(indices, "tensor_scatter_nd_add", "indices")},
                    name=name, prefix="TensorScatterNdAdd_")


def tensor_scatter_nd_update(params, indices, updates, name=None) -> BlobDesc:
    """Copy of ``params`` with ``updates`` written at ``indices``.

    Op ``tensor_scatter_nd_update``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        params: blob, any shape and dtype.
        indices: int32/int64 blob (..., k).
        updates: blob ``indices.shape[:-1] + params.shape[k:]``, ``params``' dtype.
        name: op name; default ``TensorScatterNdUpdate_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``params``.

    Raises:
        ArgumentError: ``params``, ``indices`` or ``updates`` is not a blob.
        JobBuildError: the shapes or dtypes do not fit.
    """
    _blob(params, "tensor_scatter_nd_update", "params")
    return build_op("tensor_scatter_nd_update", {"params": params,
                                                 "updates": _blob(updates, "tensor_scatter_nd_update", "updates"),
                                                 "indices": _blob(indices, "tensor_scatter_nd_update", "indices")},
                    name=name, prefix="TensorScatterNdUpdate_")


def unsorted_segment_sum(data, segment_ids, num_segments, axis=0, name=None) -> BlobDesc:
    """Sum slices of ``data`` into ``num_segments`` rows by ``segment_ids`` along ``axis``.

    Op ``unsorted_segment_sum`` (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``); ids
    outside [0, num_segments) are dropped.

    Args:
        data: blob of a numeric dtype, any shape.
        segment_ids: int32/int64 blob, the shape of ``data``'s dims from ``axis`` on (its leading part).
        num_segments: positive int.
        axis: int >= 0.
        name: op name; default ``UnsortedSegmentSum_<n>``.

    Returns:
        BlobDesc: ``data.shape[:axis] + (num_segments,) + data.shape[axis + segment_ids.ndim:]``,
        ``data``'s dtype.

    Raises:
        ArgumentError: ``data``/``segment_ids`` is not a blob or an int argument is not an int.
        JobBuildError: the shapes do not fit.
    """
    _blob(data, "unsorted_segment_sum", "data")
    _blob(segment_ids, "unsorted_segment_sum", "segment_ids")
    return build_op("unsorted_segment_sum", {"data": data, "segment_ids": segment_ids},
                    {"axis": _int(axis, "unsorted_segment_sum", "axis"),
                     "num_segments": _int(num_segments, "unsorted_segment_sum", "num_segments")},
                    name=name, prefix="UnsortedSegmentSum_")


def unsorted_segment_sum_like(data, segment_ids, like, axis=0, name=None) -> BlobDesc:
    """``unsorted_segment_sum`` whose output shape is ``like``'s.

    Op ``unsorted_segment_sum_like``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        data: blob of a numeric dtype.
        segment_ids: int32/int64 blob, as for ``unsorted_segment_sum``.
        like: blob giving the output shape (``num_segments`` = ``like.shape[axis]``).
        axis: int >= 0.
        name: op name; default ``UnsortedSegmentSumLike_<n>``.

    Returns:
        BlobDesc: ``like.shape``, ``data``'s dtype.

    Raises:
        ArgumentError: ``data``, ``segment_ids`` or ``like`` is not a blob, or ``axis`` is not an int.
        JobBuildError: the shapes do not fit.
    """
    _blob(data, "unsorted_segment_sum_like", "data")
    _blob(segment_ids, "unsorted_segment_sum_like", "segment_ids")
    _blob(like, "unsorted_segment_sum_like", "like")
    return build_op("unsorted_segment_sum_like", {"data": data, "segment_ids": segment_ids, "like": like},
                    {"axis": _int(axis, "unsorted_segment_sum_like", "axis")}, name=name,
                    prefix="UnsortedSegmentSumLike_")


def unsorted_batch_segment_sum(data, segment_ids, num_segments, name=None) -> BlobDesc:
    """Per-batch segment sum.

    Op ``unsorted_batch_segment_sum``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        data: blob (B..., K, ...), numeric dtype.
        segment_ids: int32/int64 blob (B..., K).
        num_segments: positive int.
        name: op name; default ``UnsortedBatchSegmentSum_<n>``.

    Returns:
        BlobDesc: (B..., num_segments, ...), ``data``'s dtype.

    Raises:
        ArgumentError: ``data``/``segment_ids`` is not a blob or ``num_segments`` is not an int.
        JobBuildError: the shapes do not fit.
    """
    _blob(data, "unsorted_batch_segment_sum", "data")
    _blob(segment_ids, "unsorted_batch_segment_sum", "segment_ids")
    return build_op("unsorted_batch_segment_sum", {"data": data, "segment_ids": segment_ids},
                    {"num_segments": _int(num_segments, "unsorted_batch_segment_sum", "num_segments")},
                    name=name, prefix="UnsortedBatchSegmentSum_")


def dim_gather(input, dim, index, name=None) -> BlobDesc:  # noqa: A002
    """``torch.gather``: ``output[i][j] = input[index[i][j]][j]`` for dim 0, etc..

    Op ``dim_gather``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/array_ops.py``.

    Args:
        input: blob, any shape and dtype.
        dim: int, the dim indexed.
        index: int32/int64 blob of ``input``'s rank, at most its size outside ``dim``.
        name: op name; default ``DimGather_<n>``.

    Returns:
        BlobDesc: ``index.shape``, ``input``'s dtype.

    Raises:
        ArgumentError: ``input``/``index`` is not a blob or ``dim`` is not an int.
        JobBuildError: the ranks or sizes do not fit.
    """
    _blob(input, "dim_gather", "input")
    _blob(index, "dim_gather", "index")
    return build_op("dim_gather", {"input": input, "index": index}, {"dim": _int(dim, "dim_gather", "dim")},
                    outputs=("output",), name=name, prefix="DimGather_")


def _dim_scatter(op_type, base_arg, base, dim, index, src, name, prefix):
    _blob(base, op_type, base_arg)
    _blob(index, op_type, "index")
    _blob(src, op_type, "src")
    return build_op(op_type, {base_arg: base, "index": index, "src": src}, {"dim": _int(dim, op_type, "dim")},
                    outputs=("output",), name=name, prefix=prefix)


def dim_scatter_add(input, dim, index, src, name=None) -> BlobDesc:  # noqa: A002
    """``input`` with ``src[i][j]`` added at ``[index[i][j]][j]`` for dim 0, etc.
    (``torch.Tensor.scatter_add``); op ``dim_scatter_add``.

    Args:
        input: blob, any shape, a numeric dtype.
        dim: int, the dim indexed (negative counts from the end).
        index: int32/int64 blob of ``input``'s rank, at most ``input``'s size outside ``dim``,
            ids in ``[0, input.shape[dim])``.
        src: blob of ``index``'s shape and ``input``'s dtype.
        name: op name; default ``DimScatterAdd_<n>``.

    Returns:
        BlobDesc: ``input``'s shape and dtype. Gradients: ``input`` gets dy, ``src`` gets
        ``dim_gather(dy, dim, index)``.

    Raises:
        ArgumentError: an argument is not a blob or ``dim`` is not an int.
        JobBuildError: the ranks, shapes or dtypes do not fit.
        OpRunError: an id out of range (when the job runs).
    """
    return _dim_scatter("dim_scatter_add", "input", input, dim, index, src, name, "DimScatterAdd_")


def dim_scatter_update(input, dim, index, src, name=None) -> BlobDesc:  # noqa: A002
    """``input`` with ``src[i][j]`` written at ``[index[i][j]][j]`` for dim 0, etc.
    (``torch.Tensor.scatter``); op ``dim_scatter_update``. Where ``index`` repeats a place,
    which write wins is unspecified (as in OneFlow and torch).

    Args, Raises: as :func:`dim_scatter_add`; default name ``DimScatterUpdate_<n>``.

    Returns:
        BlobDesc: ``input``'s shape and dtype. Gradients: ``src`` gets
        ``dim_gather(dy, dim, index)``, ``input`` gets dy with the written places zeroed.
    """
    return _dim_scatter("dim_scatter_update", "input", input, dim, index, src, name, "DimScatterUpdate_")


def dim_scatter_add_like(like, dim, index, src, name=None) -> BlobDesc:
    """Zeros of ``like``'s shape with ``src`` added at ``index`` along ``dim`` (the gradient of
    :func:`dim_gather`); op ``dim_scatter_add_like``. ``like``'s values are not read.

    Returns:
        BlobDesc: ``like``'s shape, ``src``'s dtype.

    Raises: as :func:`dim_scatter_add` (``like`` for ``input``); default name ``DimScatterAddLike_<n>``.
    """
    return _dim_scatter("dim_scatter_add_like", "like", like, dim, index, src, name, "DimScatterAddLike_")


# ------------------------------------------------------------------ padding

def _pad_value_attrs(x, value, floating, integral, fn):
    _number(value, fn, "constant_value")
    if x.dtype.is_floating_point:
        return {floating: float(value), integral: 0}
    return {floating: 0.0, integral: _integral(value, fn, "constant_value", x.dtype)}


def _pairs(paddings, n, fn):
    if not isinstance(paddings, (list, tuple)):
        raise ArgumentError(f"flow.{fn}: paddings expects a list of {n} (before, after) pairs, "
                            f"received {type(paddings).__name__} {paddings!r}")
    pairs = list(paddings)
    if len(pairs) != n:
        raise ArgumentError(f"flow.{fn}: paddings needs {n} (before, after) pairs, received {paddings!r}")
    out = []
    for p in pairs:
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise ArgumentError(f"flow.{fn}: each padding must be a (before, after) pair, received {p!r}")
        out.append((_int(p[0], fn, "paddings"), _int(p[1], fn, "paddings")))
    return out


def same_padding(x, padding, data_format, kernel_size, strides, dilation_rate, name=None) -> BlobDesc:
    """Zero-pad the spatial dims of ``x`` so that a window op (convolution, pooling) of
    ``kernel_size`` / ``strides`` / ``dilation_rate`` gives ceil(size / stride) outputs: op
    ``same_padding`` (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``,
    ``oneflow/user/ops/same_padding_op.cpp``). The pads come from the run-time shape, so a
    dynamic blob is padded for its actual size.

    Per spatial dim: total = max((ceil(size / stride) - 1) * stride + (kernel - 1) * dilation
    + 1 - size, 0); ``"SAME_LOWER"`` puts the odd element before, ``"SAME_UPPER"`` after.

    Args:
        x: blob (N, C, *spatial) or (N, *spatial, C), any dtype.
        padding: ``"SAME_LOWER"`` or ``"SAME_UPPER"`` (any case).
        data_format: ``"NCHW"``-style (channels first, ``NCW``/``NCDHW`` too) or ``"NHWC"``-style.
        kernel_size: the window's size, an int for every spatial dim (or one int for all).
        strides: the window's strides, the same way.
        dilation_rate: the window's dilations, the same way.
        name: op name; default ``SamePadding_<n>``.

    Returns:
        BlobDesc: ``x`` with the pads added to its spatial dims, its dtype, dynamic when ``x`` is.

    Raises:
        ArgumentError: ``x`` is not a blob, a rank below 3, an unknown ``padding`` or
            ``data_format``, or a size list of the wrong length.
        JobBuildError: a size below 1.
    """
    _blob(x, "same_padding")
    n = len(x.shape) - 2
    if n < 1:
        raise ArgumentError(f"flow.same_padding: x expects rank >= 3 (N, C, *spatial), received shape {x.shape}")
    if not isinstance(padding, str) or padding.upper() not in ("SAME_LOWER", "SAME_UPPER"):
        raise ArgumentError(f"flow.same_padding: padding expects 'SAME_LOWER' or 'SAME_UPPER', received {padding!r}")
    fmt = data_format.upper() if isinstance(data_format, str) else None
    if fmt not in ("NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC", "CHANNELS_FIRST", "CHANNELS_LAST"):
        raise ArgumentError(f"flow.same_padding: data_format expects 'NCHW'- or 'NHWC'-style, received {data_format!r}")
    sizes = {}
    for arg, v in (("kernel_size", kernel_size), ("strides", strides), ("dilation_rate", dilation_rate)):
        v = expect_ints(v, "flow.same_padding", arg)
        sizes[arg] = v * n if len(v) == 1 else v
        if len(sizes[arg]) != n:
            raise ArgumentError(f"flow.same_padding: {arg} expects {n} ints for the {n} spatial dims of x "
                                f"{x.shape}, received {v}")
    channels = "channels_first" if fmt.startswith("NC") or fmt == "CHANNELS_FIRST" else "channels_last"
    return build_op("same_padding", {"x": x}, {"padding": padding.lower(), "data_format": channels, **sizes},
                    outputs=("y",), name=name, prefix="SamePadding_")


def pad(x, paddings, constant_value=0, name=None) -> BlobDesc:
    """Constant padding with one (before, after) pair per dim.

    Op ``pad``; gradient ``pad_grad``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``.

    ``constant_value`` goes to ``floating_constant_value`` for a floating ``x`` and to
    ``integral_constant_value`` otherwise.

    Args:
        x: blob of rank r, any dtype.
        paddings: r (before, after) pairs of ints >= 0.
        constant_value: Python int or float.
        name: op name; default ``Pad_<n>``.

    Returns:
        BlobDesc: dim d = ``x.shape[d] + before[d] + after[d]``, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``paddings`` is not r pairs of ints, or
            ``constant_value`` is not a number.
    """
    _blob(x, "pad")
    pairs = _pairs(paddings, len(x.shape), "pad")
    attrs = {"padding_before": [b for b, _ in pairs], "padding_after": [a for _, a in pairs]}
    attrs.update(_pad_value_attrs(x, constant_value, "floating_constant_value", "integral_constant_value", "pad"))
    return build_op("pad", {"x": x}, attrs, outputs=("y",), name=name, prefix="Pad_")


def pad_grad(x, paddings, constant_value=0, name=None) -> BlobDesc:
    """Crop the (before, after) border off each dim of ``x``.

    Op ``pad_grad``, the gradient of ``pad``; OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/pad.py``.

    Args:
        x: blob of rank r (dy of ``pad``), any dtype.
        paddings: r (before, after) pairs of ints >= 0.
        constant_value: Python int or float (stored in the op's attrs, as ``pad``).
        name: op name; default ``PadGrad_<n>``.

    Returns:
        BlobDesc: dim d = ``x.shape[d] - before[d] - after[d]``, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``paddings`` is not r pairs of ints, or
            ``constant_value`` is not a number.
    """
    _blob(x, "pad_grad")
    pairs = _pairs(paddings, len(x.shape), "pad_grad")
    attrs = {"padding_before": [b for b, _ in pairs], "padding_after": [a for _, a in pairs]}
    attrs.update(_pad_value_attrs(x, constant_value, "floating_constant_value", "integral_constant_value",
                                  "pad_grad"))
    return build_op("pad_grad", {"dy": x}, attrs, outputs=("dx",), name=name, prefix="PadGrad_")


def _padding_list(padding, n, fn):
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
        return [int(padding)] * (2 * n)
    padding = _ints(padding, fn, "padding")
    if len(padding) != 2 * n:
        raise ArgumentError(f"flow.{fn}: padding needs an int or {2 * n} ints, received {padding}")
    return padding


def _constant_padnd(n, x, padding, constant_value, name, fn, prefix):
    _blob(x, fn)
    attrs = {"padding": _padding_list(padding, n, fn)}
    attrs.update(_pad_value_attrs(x, constant_value, "floating_value", "integral_value", fn))
    return build_op(f"constant_pad{n}d", {"x": x}, attrs, outputs=("y",), name=name, prefix=prefix)


def constant_pad1d(x, padding, constant_value=0, name=None) -> BlobDesc:
    """Constant-pad the (N, C, W) blob ``x``.

    Op ``constant_pad1d``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``.

    Args:
        x: (N, C, W) blob, any numeric dtype.
        padding: an int for every side, or 2 ints [left, right].
        constant_value: Python int or float.
        name: op name; default ``Constant_Pad1d_<n>``.

    Returns:
        BlobDesc: each padded dim grown by its two paddings, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``padding`` is not an int or 2 ints, or ``constant_value`` is not a
            number.
    """
    return _constant_padnd(1, x, padding, constant_value, name, "constant_pad1d", "Constant_Pad1d_")


def constant_pad2d(x, padding, constant_value=0, name=None) -> BlobDesc:
    """Constant-pad the (N, C, H, W) blob ``x``.

    Op ``constant_pad2d``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``.

    Args:
        x: (N, C, H, W) blob, any numeric dtype.
        padding: an int for every side, or 4 ints [left, right, top, bottom].
        constant_value: Python int or float.
        name: op name; default ``Constant_Pad2d_<n>``.

    Returns:
        BlobDesc: each padded dim grown by its two paddings, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``padding`` is not an int or 4 ints, or ``constant_value`` is not a
            number.
    """
    return _constant_padnd(2, x, padding, constant_value, name, "constant_pad2d", "Constant_Pad2d_")


def constant_pad3d(x, padding, constant_value=0, name=None) -> BlobDesc:
    """Constant-pad the (N, C, D, H, W) blob ``x``.

    Op ``constant_pad3d``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``.

    Args:
        x: (N, C, D, H, W) blob, any numeric dtype.
        padding: an int for every side, or 6 ints [left, right, top, bottom, front, back].
        constant_value: Python int or float.
        name: op name; default ``Constant_Pad3d_<n>``.

    Returns:
        BlobDesc: each padded dim grown by its two paddings, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``padding`` is not an int or 6 ints, or ``constant_value`` is not a
            number.
    """
    return _constant_padnd(3, x, padding, constant_value, name, "constant_pad3d", "Constant_Pad3d_")


def zero_pad2d(x, padding, name=None) -> BlobDesc:
    """Zero-pad the (N, C, H, W) blob ``x``.

    Op ``constant_pad2d``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``.

    Args:
        x: (N, C, H, W) blob, any numeric dtype.
        padding: an int for every side, or 4 ints [left, right, top, bottom].
        name: op name; default ``Zero_Pad2d_<n>``.

    Returns:
        BlobDesc: each padded dim grown by its two paddings, ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob, ``padding`` is not an int or 4 ints.
    """
    return _constant_padnd(2, x, padding, 0, name, "zero_pad2d", "Zero_Pad2d_")


def reflection_pad2d(x, padding, name=None) -> BlobDesc:
    """Reflect-pad H and W of the (N, C, H, W) blob ``x``.

    Op ``reflection_pad2d``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``.

    Args:
        x: (N, C, H, W) blob, floating dtype.
        padding: an int for every side, or 4 ints [left, right, top, bottom], each smaller
            than the dim it pads.
        name: op name; default ``Reflection_Pad2d_<n>``.

    Returns:
        BlobDesc: (N, C, H + top + bottom, W + left + right), ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob or ``padding`` is not an int or 4 ints.
        JobBuildError: a padding is not smaller than its dim.
    """
    _blob(x, "reflection_pad2d")
    return build_op("reflection_pad2d", {"x": x}, {"padding": _padding_list(padding, 2, "reflection_pad2d")},
                    outputs=("y",), name=name, prefix="Reflection_Pad2d_")


def replication_pad2d(x, padding, name=None) -> BlobDesc:
    """Edge-replicate-pad H and W of the (N, C, H, W) blob ``x``.

    Op ``replication_pad2d``; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/pad.py``.

    Args:
        x: (N, C, H, W) blob, floating dtype.
        padding: an int for every side, or 4 ints [left, right, top, bottom].
        name: op name; default ``Replication_Pad2d_<n>``.

    Returns:
        BlobDesc: (N, C, H + top + bottom, W + left + right), ``x``'s dtype.

    Raises:
        ArgumentError: ``x`` is not a blob or ``padding`` is not an int or 4 ints.
    """
    _blob(x, "replication_pad2d")
    return build_op("replication_pad2d", {"x": x}, {"padding": _padding_list(padding, 2, "replication_pad2d")},
                    outputs=("y",), name=name, prefix="Replication_Pad2d_")


# ------------------------------------------------------------------ constants

def _value_attrs(value, float_key, int_key, fn, arg):
    _number(value, fn, arg)
    if isinstance(value, numbers.Integral):
        return {float_key: 0.0, int_key: int(value)}, False
    return {float_key: float(value), int_key: 0}, True


def constant(value, dtype=None, shape=None, name=None) -> BlobDesc:
    """A blob of ``shape`` filled with ``value``.

    Op ``constant``, no gradient; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/constant_op.py``.

    A float ``value`` sets ``is_floating_value``/``floating_value``, an int ``integer_value``.

    Args:
        value: Python int or float.
        dtype: graphfront dtype (required).
        shape: int or list of ints; default () (rank 0).
        name: op name; default ``Constant_<n>``.

    Returns:
        BlobDesc: ``shape`` in ``dtype``.

    Raises:
        ArgumentError: ``dtype`` is None or not a dtype, ``value`` is not a number, or
            ``shape`` is not ints.
    """
    if dtype is None:
        raise ArgumentError("flow.constant: dtype is required (e.g. dtype=flow.float32)")
    _dtype(dtype, "constant")
    attrs, is_float = _value_attrs(value, "floating_value", "integer_value", "constant", "value")
    shape = () if shape is None else tuple(_ints(shape, "constant", "shape"))
    return build_op("constant", {}, {**attrs, "is_floating_value": is_float, "dtype": dtype, "shape": shape},
                    name=name, prefix="Constant_")


def constant_scalar(value, dtype=None, name=None) -> BlobDesc:
    """A shape (1,) blob holding ``value``: ``flow.constant(value, dtype, shape=[1])``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/constant_op.py``.

    Args:
        value: Python int or float.
        dtype: graphfront dtype (required).
        name: op name; default ``Constant_<n>``.

    Returns:
        BlobDesc: shape (1,) in ``dtype``.

    Raises:
        ArgumentError: as ``constant``.
    """
    return constant(value, dtype=dtype, shape=[1], name=name)


def zeros(shape, dtype=None, name=None) -> BlobDesc:
    """Zeros of ``shape``, via ``flow.constant``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/constant_op.py``.

    Args:
        shape: int or list of ints.
        dtype: graphfront dtype; default ``flow.float32``.
        name: op name; default ``Zeros_<n>``.

    Returns:
        BlobDesc: ``shape`` in ``dtype``.

    Raises:
        ArgumentError: ``dtype`` is not a dtype or ``shape`` is not ints.
    """
    dtype = _dt.float32 if dtype is None else _dtype(dtype, "zeros")
    return constant(0.0 if dtype.is_floating_point else 0, dtype, shape, name=name or unique_str("Zeros_"))


def ones(shape, dtype=None, name=None) -> BlobDesc:
    """Ones of ``shape``, via ``flow.constant``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/constant_op.py``.

    Args:
        shape: int or list of ints.
        dtype: graphfront dtype; default ``flow.float32``.
        name: op name; default ``Ones_<n>``.

    Returns:
        BlobDesc: ``shape`` in ``dtype``.

    Raises:
        ArgumentError: ``dtype`` is not a dtype or ``shape`` is not ints.
    """
    dtype = _dt.float32 if dtype is None else _dtype(dtype, "ones")
    return constant(1.0 if dtype.is_floating_point else 1, dtype, shape, name=name or unique_str("Ones_"))


def constant_like(like, value, dtype=None, name=None) -> BlobDesc:
    """A blob shaped like ``like`` filled with ``value``.

    No gradient; OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/constant_op.py``.

    Built as OneFlow builds it: the system op ``constant_like_conf`` (an int ``value`` sets
    ``int_operand``, a float ``float_operand``).

    Args:
        like: blob whose shape (and default dtype) is taken.
        value: Python int or float.
        dtype: graphfront dtype; default ``like``'s.
        name: op name; default ``ConstantLike_<n>``.

    Returns:
        BlobDesc: ``like.shape`` in ``dtype`` (or ``like``'s dtype).

    Raises:
        ArgumentError: ``like`` is not a blob, ``value`` is not a number or ``dtype`` is not a dtype.
    """
    _blob(like, "constant_like", "like")
    _number(value, "constant_like", "value")
    if dtype is not None:
        _dtype(dtype, "constant_like")
    builder = jb.current()
    conf, c = new_system_op("constant_like_conf", name, "ConstantLike_")
    c.like = like.lbn
    c.out = "out"
    if dtype is not None:
        c.data_type = dtype.proto
    if isinstance(value, numbers.Integral):
        c.int_operand = int(value)
    else:
        c.float_operand = float(value)
    added = builder.add_op(conf)
    lbn = f"{added.name}/out"
    d = builder.desc(lbn)
    parallel_conf = builder.scope.parallel_conf
    parallel_conf.device_tag = added.device_tag
    return BlobDesc(lbn, d.shape, d.dtype, parallel_conf, builder.job_name)


def ones_like(like, dtype=None, name=None) -> BlobDesc:
    """``constant_like(like, 1, dtype)``: ones of ``like``'s shape.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/constant_op.py``.

    Args:
        like: blob whose shape (and default dtype) is taken.
        dtype: graphfront dtype; default ``like``'s.
        name: op name; default ``ConstantLike_<n>``.

    Returns:
        BlobDesc: ``like.shape`` in ``dtype`` (or ``like``'s dtype).

    Raises:
        ArgumentError: ``like`` is not a blob or ``dtype`` is not a dtype.
    """
    return constant_like(like, 1, dtype, name=name)


def zeros_like(like, dtype=None, name=None) -> BlobDesc:
    """``constant_like(like, 0, dtype)``: zeros of ``like``'s shape.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/constant_op.py``.

    Args:
        like: blob whose shape (and default dtype) is taken.
        dtype: graphfront dtype; default ``like``'s.
        name: op name; default ``ConstantLike_<n>``.

    Returns:
        BlobDesc: ``like.shape`` in ``dtype`` (or ``like``'s dtype).

    Raises:
        ArgumentError: ``like`` is not a blob or ``dtype`` is not a dtype.
    """
    return constant_like(like, 0, dtype, name=name)


def one_hot(indices, depth, on_value=1, off_value=0, axis=-1, dtype=None, name=None) -> BlobDesc:
    """One-hot encode integer ``indices`` into ``depth`` classes (op ``one_hot``, no gradient).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/one_hot.py``. The new dim goes
    last (``axis`` = -1) or at ``axis`` (a ``transpose`` follows); on/off values go to the
    floating or integer attrs by ``dtype``. Indices outside [0, depth) give rows of ``off_value``.

    Args:
        indices: int32/int64 blob of rank r.
        depth: positive int, number of classes.
        on_value: Python number at the index.
        off_value: Python number elsewhere.
        axis: int in [-r-1, r], position of the new dim.
        dtype: graphfront dtype of the output (required).
        name: op name; default ``OneHot_<n>`` (the transpose is ``<name>_transpose``).

    Returns:
        BlobDesc: ``indices.shape`` with ``depth`` inserted at ``axis``, in ``dtype``.

    Raises:
        ArgumentError: ``indices`` is not a blob, ``dtype`` is missing or not a dtype, ``axis``
            is out of range, or ``depth``/``on_value``/``off_value`` have wrong types.
    """
    _blob(indices, "one_hot", "indices")
    if dtype is None:
        raise ArgumentError("flow.one_hot: dtype is required (e.g. dtype=flow.float32)")
    _dtype(dtype, "one_hot")
    n = len(indices.shape)
    axis = _int(axis, "one_hot", "axis")
    if not -(n + 1) <= axis <= n:
        raise ArgumentError(f"flow.one_hot: axis {axis} is out of range [{-(n + 1)}, {n}] for indices of rank {n}")
    axis %= n + 1
    _number(on_value, "one_hot", "on_value")
    _number(off_value, "one_hot", "off_value")
    fp = dtype.is_floating_point
    attrs = {"depth": _int(depth, "one_hot", "depth"), "dtype": dtype,
             "floating_on_value": float(on_value) if fp else 0.0,
             "integer_on_value": 0 if fp else _integral(on_value, "one_hot", "on_value", dtype),
             "floating_off_value": float(off_value) if fp else 0.0,
             "integer_off_value": 0 if fp else _integral(off_value, "one_hot", "off_value", dtype)}
    out = build_op("one_hot", {"indices": indices}, attrs, name=name, prefix="OneHot_")
    if axis == n:
        return out
    perm = list(_range(n))
    perm.insert(axis, n)
    return transpose(out, perm, name=_sub_name(name, "_transpose"))


def range(start, limit=None, delta=1, dtype=None, name="range") -> BlobDesc:  # noqa: A001 - OneFlow's name
    """1-D [start, limit) in steps of ``delta`` (op ``arange``, no gradient); one argument means [0, start).

    Op defined in OneFlow v0.6.0 ``oneflow/user/ops/arange_op.cpp``. Floating dtypes use the
    ``float_*`` attrs, integer ones the ``integer_*`` attrs. The default op name is OneFlow's
    fixed ``"range"``; a second unnamed range in one job gets a unique name instead of a clash.

    Args:
        start: Python number (the limit when ``limit`` is None).
        limit: Python number, excluded.
        delta: Python number, non-zero step.
        dtype: graphfront dtype; default int64 for int arguments, float32 when any is a float.
        name: op name; default ``"range"``.

    Returns:
        BlobDesc: shape (ceil((limit - start) / delta),) in ``dtype``.

    Raises:
        ArgumentError: an argument is not a number (an int for an integer ``dtype``) or
            ``dtype`` is not a dtype.
        JobBuildError: ``delta`` is 0 or the range is empty.
    """
    if limit is None:
        start, limit = 0, start
    for arg, v in (("start", start), ("limit", limit), ("delta", delta)):
        _number(v, "range", arg)
    if dtype is None:
        dtype = _dt.int64 if all(isinstance(v, numbers.Integral) for v in (start, limit, delta)) else _dt.float32
    _dtype(dtype, "range")
    if dtype.is_floating_point:
        attrs = {"float_start": float(start), "float_limit": float(limit), "float_delta": float(delta)}
    else:
        attrs = {"integer_start": _int(start, "range", "start"), "integer_limit": _int(limit, "range", "limit"),
                 "integer_delta": _int(delta, "range", "delta")}
    if name == "range" and jb.is_building() and jb.current().scope.prefix + name in jb.current().ops:
        name = unique_str("range_")
    return build_op("arange", {}, {**attrs, "dtype": dtype}, name=name)


def eye(rows, cols=None, dtype=None, name=None) -> BlobDesc:
    """Identity matrix of ``rows`` x ``cols``.

    Op ``eye``, as ``torch.eye``; OneFlow v0.6.0 ``oneflow/user/ops/eye_op.cpp``.

    Args:
        rows: int >= 0.
        cols: int >= 0; default ``rows``.
        dtype: graphfront dtype; default ``flow.float32``.
        name: op name; default ``Eye_<n>``.

    Returns:
        BlobDesc: (rows, cols) in ``dtype``.

    Raises:
        ArgumentError: ``rows``/``cols`` is not an int or ``dtype`` is not a dtype.
    """
    rows = _int(rows, "eye", "rows")
    cols = rows if cols is None else _int(cols, "eye", "cols")
    dtype = _dt.float32 if dtype is None else _dtype(dtype, "eye")
    return build_op("eye", {}, {"rows": rows, "cols": cols, "dtype": dtype}, name=name, prefix="Eye_")


# ------------------------------------------------------------------ misc

def _is_variable_or_alias(builder, op_name):
    """Whether ``op_name`` is a variable op, or a view op (its outputs may alias its input)
    applied to one."""
    op = builder.ops.get(op_name)
    if op is None:
        return False
    kind = jb.op_kind(op)
    if kind == "variable_conf":
        return True
    if not registry.op_def(op).view:
        return False
    inputs = jb.op_inputs(op)
    return len(inputs) == 1 and _is_variable_or_alias(builder, inputs[0][2].split("/", 1)[0])


def check_assign(ref, value, fn):
    """The checks of ``flow.<fn>`` (an assign): both blobs, ``ref`` a variable or its alias.

    Raises:
        ArgumentError: naming ``flow.<fn>`` and the argument.
    """
    _blob(ref, fn, "ref")
    _blob(value, fn, "value")
    if not _is_variable_or_alias(jb.current(), ref.op_name):
        raise ArgumentError(f"flow.{fn}: argument 'ref' must be a variable blob (flow.get_variable) or its alias "
                            f"(e.g. the ref of flow.experimental.ssp_variable_proxy), received '{ref.lbn}'")


def assign(ref, value, dtype=None, name=None) -> None:
    """Write ``value`` into the variable ``ref`` when the job runs.

    Op ``assign``: ref, value; no outputs, no gradient.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/assign_op.py``.

    Args:
        ref: variable blob of the job (``flow.get_variable``) or an alias of one (such as
            ``ssp_variable_proxy``'s ``ref``).
        value: blob of ``ref``'s shape and dtype.
        dtype: accepted for OneFlow compatibility and unused, as in OneFlow.
        name: op name; default ``Assign_<n>``.

    Returns:
        None.

    Raises:
        ArgumentError: ``ref``/``value`` is not a blob, or ``ref`` is not a variable or its alias.
        JobBuildError: ``value``'s shape or dtype differs from ``ref``'s.
    """
    check_assign(ref, value, "assign")
    build_op("assign", {"ref": ref, "value": value}, outputs=(), name=name, prefix="Assign_")
    return None


def diag(input, diagonal=0, name=None) -> BlobDesc:  # noqa: A002
    """Diagonal ``diagonal`` of a matrix, or the square matrix with a vector on it (op ``diag``).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/diag_ops.py``.

    Args:
        input: blob (N,) or (M, N), any numeric dtype.
        diagonal: int; 0 the main diagonal, > 0 above it, < 0 below.
        name: op name; default ``Diag_<n>``.

    Returns:
        BlobDesc: for a vector, (N + |diagonal|, N + |diagonal|); for a matrix, the 1-D
        diagonal; ``input``'s dtype.

    Raises:
        ArgumentError: ``input`` is not a blob or ``diagonal`` is not an int.
        JobBuildError: ``input`` is not of rank 1 or 2.
    """
    _blob(input, "diag", "input")
    return build_op("diag", {"in": input}, {"diagonal": _int(diagonal, "diag", "diagonal")}, name=name,
                    prefix="Diag_")


def roll(x, shifts, dims=None, name=None) -> BlobDesc:
    """Roll ``x`` by ``shifts`` along ``dims`` (op ``roll``, as ``torch.roll``).

    Args:
        x: blob, any shape and dtype.
        shifts: int or list of ints, one per dim in ``dims``.
        dims: int or list of ints; None rolls the flattened blob (one shift).
        name: op name; default ``Roll_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob, or ``shifts``/``dims`` are not ints.
        JobBuildError: ``shifts`` and ``dims`` differ in length or a dim is out of range.
    """
    _blob(x, "roll")
    shifts = _ints(shifts, "roll", "shifts")
    dims = [] if dims is None else _ints(dims, "roll", "dims")
    return build_op("roll", {"in": x}, {"shifts": shifts, "dims": dims}, name=name, prefix="Roll_")


def flip(x, dims, name=None) -> BlobDesc:
    """Reverse ``x`` along ``dims`` (op ``flip``, as ``torch.flip``).

    v0.6.0 gives the op no gradient: use ``flow.reverse`` to train through it.

    Args:
        x: blob, any shape and dtype.
        dims: int or list of ints.
        name: op name; default ``Flip_<n>``.

    Returns:
        BlobDesc: the shape and dtype of ``x``.

    Raises:
        ArgumentError: ``x`` is not a blob or ``dims`` is not ints.
    """
    _blob(x, "flip")
    return build_op("flip", {"x": x}, {"dims": _ints(dims, "flip", "dims")}, outputs=("y",), name=name,
                    prefix="Flip_")
