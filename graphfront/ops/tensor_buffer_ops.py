"""TensorBuffer ops: dense blobs packed into and unpacked from ``tensor_buffer`` blobs.

A ``tensor_buffer`` blob (OneFlow's ``kTensorBuffer``) holds one variable-size tensor
per element. Its BlobDesc has the shape of the *array of buffers* (for example
``(batch_size,)`` for a decoded image batch); at run time its value is a Python list of
numpy arrays, one per element in row-major order (``len == prod(shape)``); the ops here
return a :class:`BufferList`, which also carries the run-time shape (needed for a dynamic
blob of more than one axis).

=============================================  ============================================
op (args -> outputs) {attrs}                   computes
=============================================  ============================================
``tensor_to_tensor_buffer`` (in -> out)        ``out[i...]`` = ``in[i..., *]``: the last
{instance_dims: int32}                         ``instance_dims`` axes of every element form
                                               one buffer; ``out`` shape ``in.shape[:-k]``
                                               (``0 <= k < in.ndim``), dynamic if ``in`` is.
``tensor_buffer_to_tensor`` (in -> out)        the buffers stacked: ``out`` shape
{instance_shape: shape, dtype}                 ``in.shape + instance_shape``; every buffer
                                               must have exactly ``instance_shape`` and
                                               ``dtype``.
``gen_tensor_buffer`` (-> out) {shape,         ``out`` of ``shape`` whose i-th buffer is a
shape_list: list_shape, value_list:            ``shape_list[i]`` tensor of ``data_type``
list_float, data_type, dynamic_out: bool}      (int32, int64, float32, float64) filled with
                                               ``value_list[i]`` (a float32 attr, cast as
                                               C++ ``static_cast``: toward zero).
``tensor_buffer_to_list_of_tensors``           one output per buffer of a static, non-empty
(in -> out*) {out_shape: shape, out_dtype,     ``in``: buffer i as ``out_i`` of ``out_dtype``
dynamic_out: bool}                             (must equal the buffer's dtype) and shape
                                               ``out_shape`` (the buffer reshaped: equal
                                               element counts) or, with ``dynamic_out``, a
                                               dynamic blob of the buffer's own shape (same
                                               rank as ``out_shape``, no axis longer).
``tensor_buffer_to_list_of_tensors_v2``        the same with a shape and dtype per output:
(in -> out*) {out_shapes: list_shape,          ``out_shapes[i]``, ``out_dtypes[i]``.
out_dtypes: list_dtype, dynamic_out: bool}
=============================================  ============================================

All are CPU-only and NoGrad (OneFlow v0.6.0 ``oneflow/user/ops/tensor_buffer_ops.cpp``,
kernels in ``oneflow/user/kernels/tensor_buffer_kernels.cpp``). Kernels raise ValueError naming the
op when a buffer does not fit the declared shape or dtype.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops.common import BufferList
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

GEN_DTYPES = (_dt.int32, _dt.int64, _dt.float32, _dt.float64)


def runtime_shape(buffers, desc):
    """The run-time shape of a ``tensor_buffer`` value whose BlobDesc is ``desc``."""
    if isinstance(buffers, BufferList):
        return buffers.shape
    if not desc.is_dynamic:
        return tuple(desc.shape)
    if len(desc.shape) == 1:
        return (len(buffers),)
    raise ValueError(f"a dynamic tensor_buffer value of shape {tuple(desc.shape)} must carry its run-time shape")


def _pod(dtype):
    return dtype is not None and dtype.torch is not None


def _buffer_input(ctx):
    desc = ctx.input("in")
    ctx.check(desc.dtype is _dt.tensor_buffer, f"input 'in' must be a tensor_buffer blob, received {desc.dtype.name}")
    return desc


def _fits(op_name, i, buf, shape, dtype, dynamic):
    """Buffer ``i`` as an array of ``shape`` (or its own shape when ``dynamic``), checked."""
    buf = np.asarray(buf)
    if buf.dtype != dtype.np:
        raise ValueError(f"op '{op_name}': tensor buffer {i} holds {buf.dtype}, expected {dtype.name}")
    if dynamic:
        if buf.ndim != len(shape) or any(a > b for a, b in zip(buf.shape, shape)):
            raise ValueError(f"op '{op_name}': tensor buffer {i} has shape {buf.shape}, which does not fit the "
                             f"maximum shape {tuple(shape)} (same rank, no longer axis)")
        return buf
    if buf.size != math.prod(shape):
        raise ValueError(f"op '{op_name}': tensor buffer {i} has shape {buf.shape} ({buf.size} elements), "
                         f"expected {tuple(shape)} ({math.prod(shape)} elements)")
    return buf.reshape(shape)


# ------------------------------------------------------------------ tensor_to_tensor_buffer

def _to_buffer_infer(ctx):
    x = ctx.input("in")
    k = ctx.attr("instance_dims")
    ctx.check(0 <= k < len(x.shape), f"attr 'instance_dims' must be in [0, {len(x.shape)}) for input 'in' of shape "
              f"{tuple(x.shape)}, received {k}")
    ctx.check(_pod(x.dtype), f"input 'in' must hold numbers, received {x.dtype.name}")
    ctx.set_output("out", tuple(x.shape)[:len(x.shape) - k], _dt.tensor_buffer)


def _to_buffer_kernel(k):
    dims = k.attr("instance_dims")

    def tensor_to_tensor_buffer(x):
        arr = x.detach().cpu().numpy()
        flat = arr.reshape((-1,) + arr.shape[arr.ndim - dims:])
        return BufferList([flat[i].copy() for i in range(flat.shape[0])], arr.shape[:arr.ndim - dims])
    return tensor_to_tensor_buffer


op("tensor_to_tensor_buffer", inputs=["in"], outputs=["out"], attrs={"instance_dims": "int32"},
   infer=_to_buffer_infer, kernel=_to_buffer_kernel, no_grad=True, sbp=_sbp.batch(), cpu_only=True,
   doc="pack the last instance_dims axes of every element into a tensor_buffer")


# ------------------------------------------------------------------ tensor_buffer_to_tensor

def _to_tensor_infer(ctx):
    desc = _buffer_input(ctx)
    ctx.check(_pod(ctx.attr("dtype")), f"attr 'dtype' must be a numeric dtype, received {ctx.attr('dtype')}")
    ctx.set_output("out", tuple(desc.shape) + tuple(ctx.attr("instance_shape")), ctx.attr("dtype"))


def _to_tensor_kernel(k):
    shape, dtype, desc = tuple(k.attr("instance_shape")), k.attr("dtype"), k.input("in")

    def tensor_buffer_to_tensor(buffers):
        outer = runtime_shape(buffers, desc)
        out = np.empty((len(buffers),) + shape, dtype.np)
        for i, b in enumerate(buffers):
            b = np.asarray(b)
            if b.shape != shape or b.dtype != dtype.np:
                raise ValueError(f"op '{k.op_name}': tensor buffer {i} is {b.dtype} {b.shape}, expected "
                                 f"{dtype.name} {shape} (attrs dtype, instance_shape)")
            out[i] = b
        return torch.from_numpy(out.reshape(outer + shape))
    return tensor_buffer_to_tensor


op("tensor_buffer_to_tensor", inputs=["in"], outputs=["out"], attrs={"instance_shape": "shape", "dtype": "dtype"},
   infer=_to_tensor_infer, kernel=_to_tensor_kernel, no_grad=True, sbp=_sbp.batch(), cpu_only=True,
   doc="stack the buffers of a tensor_buffer blob into one dense blob")


# ------------------------------------------------------------------ gen_tensor_buffer

def _gen_infer(ctx):
    shape, shapes, values = tuple(ctx.attr("shape")), ctx.attr("shape_list"), ctx.attr("value_list")
    n = math.prod(shape)
    ctx.check(len(shapes) == n and len(values) == n,
              f"attrs 'shape_list' and 'value_list' must hold one entry per element of shape {shape} ({n}), "
              f"received {len(shapes)} and {len(values)}")
    ctx.check(all(d >= 0 for s in shapes for d in s), f"attr 'shape_list' has a negative dimension: {shapes}")
    dtype = ctx.attr("data_type")
    ctx.check(dtype in GEN_DTYPES, f"attr 'data_type' must be one of {[d.name for d in GEN_DTYPES]}, "
              f"received {dtype.name if dtype else dtype}")
    ctx.set_output("out", shape, _dt.tensor_buffer, is_dynamic=ctx.attr("dynamic_out"))


def _gen_kernel(k):
    dtype = k.attr("data_type").np
    # value_list is a float32 attr: round each value to float32 first, as OneFlow stores it
    buffers = [np.full(s, np.float32(v)).astype(dtype) for s, v in zip(k.attr("shape_list"), k.attr("value_list"))]
    shape = tuple(k.attr("shape"))
    return lambda: BufferList([b.copy() for b in buffers], shape)


op("gen_tensor_buffer", outputs=["out"],
   attrs={"shape": "shape", "shape_list": "list_shape", "value_list": "list_float",
          "data_type": ("dtype", _dt.float32), "dynamic_out": ("bool", False)},
   infer=_gen_infer, kernel=_gen_kernel, no_grad=True, cpu_only=True,
   doc="a tensor_buffer blob of constant-filled tensors of given shapes")


# ------------------------------------------------------------------ tensor_buffer_to_list_of_tensors(_v2)

def _list_infer(ctx, shapes, dtypes):
    desc = _buffer_input(ctx)
    n = math.prod(desc.shape)
    ctx.check(n > 0 and not desc.is_dynamic,
              f"input 'in' must be a static tensor_buffer blob of at least one element, received "
              f"{'dynamic ' if desc.is_dynamic else ''}shape {tuple(desc.shape)}")
    ctx.check(ctx.output_count("out") == n, f"output 'out' must have one blob per element of 'in' ({n}), "
              f"received {ctx.output_count('out')}")
    ctx.check(len(shapes) == n and len(dtypes) == n,
              f"one output shape and dtype per element of 'in' ({n}) expected, received {len(shapes)} and "
              f"{len(dtypes)}")
    for i, (s, d) in enumerate(zip(shapes, dtypes)):
        ctx.check(_pod(d), f"output dtype {i} must be a numeric dtype, received {d}")
        ctx.set_output("out", s, d, i=i, is_dynamic=ctx.attr("dynamic_out"))


def _list_kernel(k, shapes, dtypes):
    dynamic = k.attr("dynamic_out")

    def tensor_buffer_to_list_of_tensors(buffers):
        return [torch.from_numpy(np.array(_fits(k.op_name, i, b, s, d, dynamic)))  # a copy: buffers may be read-only
                for i, (b, s, d) in enumerate(zip(buffers, shapes, dtypes))]
    return tensor_buffer_to_list_of_tensors


def _v1_lists(attrs, n):
    return [tuple(attrs["out_shape"])] * n, [attrs["out_dtype"]] * n


op("tensor_buffer_to_list_of_tensors", inputs=["in"], outputs=["out*"],
   attrs={"out_shape": "shape", "out_dtype": "dtype", "dynamic_out": ("bool", False)},
   infer=lambda ctx: _list_infer(ctx, *_v1_lists(ctx.attrs, ctx.output_count("out"))),
   kernel=lambda k: _list_kernel(k, *_v1_lists(k.attrs, k.output_count("out"))), no_grad=True, cpu_only=True,
   doc="one blob per buffer of a tensor_buffer blob (one shape and dtype for all)")

op("tensor_buffer_to_list_of_tensors_v2", inputs=["in"], outputs=["out*"],
   attrs={"out_shapes": "list_shape", "out_dtypes": "list_dtype", "dynamic_out": ("bool", False)},
   infer=lambda ctx: _list_infer(ctx, ctx.attr("out_shapes"), ctx.attr("out_dtypes")),
   kernel=lambda k: _list_kernel(k, k.attr("out_shapes"), k.attr("out_dtypes")), no_grad=True, cpu_only=True,
   doc="one blob per buffer of a tensor_buffer blob (a shape and dtype per output)")
