"""graphfront dtype objects (``flow.float32``, ``flow.int32`` ...).

Each dtype ties together the three names one element type has across the system:
the OneFlow ``DataType`` enum value written into protos (see
OneFlow v0.6.0 ``oneflow/core/common/data_type.proto``), the numpy dtype used for feeds and fetches, and
the torch dtype used by the kernels.
"""
from __future__ import annotations

import ml_dtypes  # numpy has no bfloat16; ml_dtypes (the JAX project's numpy extension types) adds one
import numpy as np
import torch

from graphfront.core import data_type_pb2

DataType = data_type_pb2.DataType


class dtype:
    """A graphfront element type.

    Attributes:
        name: the single-client name (``"float32"``).
        proto: the ``oneflow.DataType`` enum value (``DataType.kFloat`` = 2).
        np: the numpy dtype, or None for types numpy cannot hold.
        torch: the torch dtype, or None for types torch cannot hold.
    """

    __slots__ = ("name", "proto", "np", "torch")

    def __init__(self, name, proto, np_dtype, torch_dtype):
        self.name = name
        self.proto = proto
        self.np = None if np_dtype is None else np.dtype(np_dtype)
        self.torch = torch_dtype

    @property
    def itemsize(self) -> int:
        """Bytes of one element: the torch dtype's size; for the host-object types
        (``record``, ``tensor_buffer``) the 8 bytes of a reference to the object, as those
        blobs hold one object per element (OneFlow v0.6.0 ``GetSizeOfDataType`` counts a
        ``kOFRecord`` / ``kTensorBuffer`` element as one C++ object of fixed size)."""
        return self.torch.itemsize if self.torch is not None else 8

    @property
    def is_floating_point(self) -> bool:
        return self.torch is not None and self.torch.is_floating_point

    @property
    def is_integer(self) -> bool:
        return self.torch is not None and not self.torch.is_floating_point and self.torch is not torch.bool

    def __repr__(self):
        return f"graphfront.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))


bool = dtype("bool", DataType.kBool, np.bool_, torch.bool)  # noqa: A001 - OneFlow's name
char = dtype("char", DataType.kChar, np.int8, torch.int8)
float16 = half = dtype("float16", DataType.kFloat16, np.float16, torch.float16)
bfloat16 = dtype("bfloat16", DataType.kBFloat16, ml_dtypes.bfloat16, torch.bfloat16)
float32 = float = dtype("float32", DataType.kFloat, np.float32, torch.float32)  # noqa: A001
float64 = double = dtype("float64", DataType.kDouble, np.float64, torch.float64)
int8 = dtype("int8", DataType.kInt8, np.int8, torch.int8)
int16 = dtype("int16", DataType.kInt16, np.int16, torch.int16)
int32 = int = dtype("int32", DataType.kInt32, np.int32, torch.int32)  # noqa: A001
int64 = long = dtype("int64", DataType.kInt64, np.int64, torch.int64)
uint8 = dtype("uint8", DataType.kUInt8, np.uint8, torch.uint8)

_ALL = [bool, char, float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8]
_BY_PROTO = {d.proto: d for d in _ALL if d is not char}
_BY_NAME = {d.name: d for d in _ALL}
_BY_NP = {d.np: d for d in _ALL if d.np is not None and d is not char}
_BY_TORCH = {d.torch: d for d in _ALL if d is not char}

# Blobs of host objects, produced and consumed by the data-pipeline ops only: a batch of
# ``OFRecord`` messages, or of variable-size tensors (TensorBuffer). Neither numpy nor torch
# holds them, so they stay out of dtypes().
record = dtype("record", DataType.kOFRecord, None, None)
tensor_buffer = dtype("tensor_buffer", DataType.kTensorBuffer, None, None)
for _d in (record, tensor_buffer):
    _BY_PROTO[_d.proto] = _BY_NAME[_d.name] = _d


def dtypes():
    """Return the list of all graphfront dtype objects."""
    return list(_ALL)


def from_name(name: str) -> dtype:
    return _BY_NAME[name]


def from_proto(value) -> dtype:
    """Map a ``oneflow.DataType`` enum value to its dtype; ValueError if unsupported."""
    try:
        return _BY_PROTO[value]
    except KeyError:
        raise ValueError(f"unsupported DataType {DataType.Name(value) if value in DataType.values() else value}") from None


def from_numpy(np_dtype) -> dtype:
    """Map a numpy dtype to its graphfront dtype; ValueError if unsupported."""
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except KeyError:
        raise ValueError(f"numpy dtype {np.dtype(np_dtype)} has no graphfront dtype") from None


def from_torch(torch_dtype) -> dtype:
    return _BY_TORCH[torch_dtype]


def convert_oneflow_dtype_to_numpy_dtype(oneflow_dtype: dtype):
    """Return the numpy dtype of a graphfront dtype; NotImplementedError if unmapped."""
    if oneflow_dtype.np is None:
        raise NotImplementedError(f"{oneflow_dtype} has no numpy dtype")
    return oneflow_dtype.np


def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A host numpy copy of tensor ``t``; bfloat16 comes back as ``ml_dtypes.bfloat16``
    (bit-exact: the 16-bit patterns are reinterpreted, not converted)."""
    t = t.detach()
    if t.dtype is torch.bfloat16:
        return t.cpu().contiguous().view(torch.int16).numpy().copy().view(bfloat16.np)
    return t.cpu().numpy().copy() if t.device.type == "cpu" else t.cpu().numpy()


def numpy_to_tensor(arr: np.ndarray) -> torch.Tensor:
    """A CPU tensor sharing ``arr``'s memory (made contiguous; a read-only array, such as a
    memory-mapped data set, is copied: torch warns of tensors over memory it cannot write);
    ``ml_dtypes.bfloat16`` arrays become ``torch.bfloat16`` bit-exactly."""
    if not arr.flags.c_contiguous or not arr.flags.writeable:  # (np.ascontiguousarray makes a 0-d array 1-d)
        arr = arr.copy(order="C")
    if arr.dtype == bfloat16.np:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def proto_name(value) -> str:
    """``DataType.kFloat`` -> ``"kFloat"`` (for error messages)."""
    return DataType.Name(value)
