"""``flow.tensor_to_tensor_buffer``, ``flow.tensor_buffer_to_tensor``,
``flow.gen_tensor_buffer`` and ``flow.tensor_buffer_to_list_of_tensors``: OneFlow's
TensorBuffer API (v0.6.0 ``python/oneflow/compatible/single_client/ops/tensor_buffer_ops.py``).

A ``flow.tensor_buffer`` blob holds one variable-size tensor per element (decoded
images of different sizes, for example); the ops are in
:mod:`graphfront.ops.tensor_buffer_ops`. As in OneFlow they have CPU kernels only: each
op runs on the CPU devices of the enclosing placement (``"gpu", "0:0-1"`` puts it on
``"cpu", "0:0-1"``; consumers on a GPU receive the outputs copied), and on several devices
``tensor_to_tensor_buffer`` and ``tensor_buffer_to_tensor`` work on each device's part of
the batch.

Example (OneFlow's own docstring example)::

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 16, 64, 64))) -> tp.Numpy:
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=2)          # (4, 16) buffers
        return flow.tensor_buffer_to_tensor(buf, dtype=flow.float, instance_shape=(64, 64))
"""
from __future__ import annotations

from graphfront.framework import dtypes as _dt
from graphfront.framework.blob_desc import expect_blob
from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.ops.builder import UserOpConfBuilder, build_op, unique_str

__all__ = ["tensor_to_tensor_buffer", "tensor_buffer_to_tensor", "gen_tensor_buffer",
           "tensor_buffer_to_list_of_tensors"]


def _fail(fn, msg):
    raise JobBuildError(f"flow.{fn}: {msg}" + format_location(user_frame()))


def _blob(fn, x):
    return expect_blob(x, f"flow.{fn}")


def _dtype(fn, arg, d):
    if not isinstance(d, _dt.dtype):
        _fail(fn, f"argument '{arg}' expects a flow dtype, received {type(d).__name__} {d!r}")
    return d


def tensor_to_tensor_buffer(x, instance_dims, name=None):
    """Pack the last ``instance_dims`` axes of ``x`` into one tensor per element.

    ``x``: a numeric blob of rank r; ``0 <= instance_dims < r``. Returns a
    ``flow.tensor_buffer`` blob of shape ``x.shape[:r - instance_dims]`` whose element
    ``i`` holds ``x[i]`` (shape ``x.shape[r - instance_dims:]``, dtype ``x.dtype``);
    dynamic when ``x`` is. Raises JobBuildError otherwise. No gradient.
    OneFlow: ``tensor_to_tensor_buffer`` op (``oneflow/user/ops/tensor_buffer_ops.cpp``).
    """
    return build_op("tensor_to_tensor_buffer", {"in": _blob("tensor_to_tensor_buffer", x)},
                    {"instance_dims": instance_dims}, name=name)


def tensor_buffer_to_tensor(x, dtype, instance_shape, name=None):
    """Stack the tensors of a ``flow.tensor_buffer`` blob into one dense blob.

    Returns a blob of shape ``x.shape + instance_shape`` and ``dtype``; every tensor of
    ``x`` must have exactly ``instance_shape`` and ``dtype`` (ValueError naming the op
    and the element at run time otherwise). No gradient.
    OneFlow: ``tensor_buffer_to_tensor`` op (``oneflow/user/kernels/tensor_buffer_kernels.cpp``).
    """
    return build_op("tensor_buffer_to_tensor", {"in": _blob("tensor_buffer_to_tensor", x)},
                    {"instance_shape": tuple(instance_shape),
                     "dtype": _dtype("tensor_buffer_to_tensor", "dtype", dtype)}, name=name)


def gen_tensor_buffer(shape, shape_list, value_list, data_type=_dt.float32, dynamic_out=False, name=None):
    """A ``flow.tensor_buffer`` blob of ``shape`` whose element ``i`` (row-major) is a
    tensor of shape ``shape_list[i]`` and ``data_type`` (int32, int64, float32 or float64)
    filled with ``value_list[i]`` (a float32 value, converted toward zero for integers).

    ``shape_list`` and ``value_list`` need one entry per element of ``shape``
    (JobBuildError otherwise); ``dynamic_out`` marks the blob dynamic. No gradient.
    OneFlow: ``gen_tensor_buffer`` op.
    """
    return build_op("gen_tensor_buffer", attrs={
        "shape": tuple(shape), "shape_list": [tuple(s) for s in shape_list],
        "value_list": [float(v) for v in value_list],
        "data_type": _dtype("gen_tensor_buffer", "data_type", data_type), "dynamic_out": bool(dynamic_out)},
        name=name)


def tensor_buffer_to_list_of_tensors(x, out_shape, out_dtype, dynamic_out=False, name=None):
    """One blob per element of a static ``flow.tensor_buffer`` blob ``x``, in row-major order.

    Returns a list of ``prod(x.shape)`` blobs of dtype ``out_dtype`` (each tensor of ``x``
    must have it). Without ``dynamic_out`` each is the tensor reshaped to ``out_shape``
    (equal element counts); with it each is a dynamic blob of maximum shape ``out_shape``
    holding the tensor in its own shape (same rank, no longer axis). Mismatches raise
    ValueError naming the op at run time. No gradient.
    OneFlow: ``tensor_buffer_to_list_of_tensors`` op (the ``_v2`` op, with a shape and
    dtype per output, is reachable through ``flow.user_op_builder``).
    """
    _blob("tensor_buffer_to_list_of_tensors", x)
    count = 1
    for d in x.shape:
        count *= d
    return list(UserOpConfBuilder(name or unique_str("TensorBufferToListOfTensors_"))
        .Op("tensor_buffer_to_list_of_tensors").Input("in", [x]).Output("out", count)
        .Attr("out_shape", tuple(out_shape))
        .Attr("out_dtype", _dtype("tensor_buffer_to_list_of_tensors", "out_dtype", out_dtype))
        .Attr("dynamic_out", bool(dynamic_out))
        .Build().InferAndTryRun().RemoteBlobList())
