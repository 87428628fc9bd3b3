"""The OFRecord file format.

An OFRecord file (OneFlow v0.6.0 ``oneflow/core/record/record_io.cpp``) is a plain
sequence of records; each record is

* its byte count ``n`` as a little-endian signed 64-bit integer, then
* ``n`` bytes: one serialized ``oneflow.OFRecord`` protobuf
  (``oneflow/core/record/record.proto``: a map from feature name to ``Feature``, a
  oneof of ``bytes_list``, ``float_list``, ``double_list``, ``int32_list``,
  ``int64_list``).

There is no file header, no checksum and no padding. A data set is a directory of
shards ``<prefix><i>`` for ``i`` in ``range(data_part_num)``; with
``part_name_suffix_length = k > 0`` the index is left-padded with zeros to ``k``
digits (``part-00000``), with ``-1`` it is written as is (``part-0``).
"""
from __future__ import annotations

import os
import struct

import numpy as np

from graphfront.core.record_pb2 import BytesList, DoubleList, Feature, FloatList, Int32List, Int64List, OFRecord
from graphfront.framework.errors import GraphfrontError

_LENGTH = struct.Struct("<q")
_READ_BUFFER = 1 << 22


class OFRecordFileError(GraphfrontError, ValueError):
    """A file is not a well-formed OFRecord file (truncated record, negative length, a
    record that is no ``OFRecord``)."""


def _values(value):
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist()
    return list(value) if isinstance(value, (list, tuple)) else [value]


def bytes_feature(value) -> Feature:
    """A ``Feature`` holding ``bytes_list``: ``value`` is bytes or a list of bytes."""
    return Feature(bytes_list=BytesList(value=[value] if isinstance(value, bytes) else list(value)))


def int32_feature(value) -> Feature:
    """A ``Feature`` holding ``int32_list`` (a number, a list or an integer array)."""
    return Feature(int32_list=Int32List(value=_values(value)))


def int64_feature(value) -> Feature:
    """A ``Feature`` holding ``int64_list``."""
    return Feature(int64_list=Int64List(value=_values(value)))


def float_feature(value) -> Feature:
    """A ``Feature`` holding ``float_list`` (float32 values)."""
    return Feature(float_list=FloatList(value=_values(value)))


def double_feature(value) -> Feature:
    """A ``Feature`` holding ``double_list``."""
    return Feature(double_list=DoubleList(value=_values(value)))


def shard_name(index: int, part_name_prefix="part-", part_name_suffix_length=-1) -> str:
    """``part-0`` (suffix length -1) or ``part-00000`` (suffix length 5) for shard ``index``."""
    digits = str(index)
    if part_name_suffix_length != -1:
        if len(digits) > part_name_suffix_length:
            raise ValueError(f"shard index {index} has more than part_name_suffix_length="
                             f"{part_name_suffix_length} digits")
        digits = digits.zfill(part_name_suffix_length)
    return part_name_prefix + digits


def shard_paths(data_dir, data_part_num, part_name_prefix="part-", part_name_suffix_length=-1) -> list:
    """Paths of the ``data_part_num`` shards of a data set, as OneFlow's ``OFRecordReader``
    names them. Raises FileNotFoundError naming the first missing shard."""
    if data_part_num < 1:
        raise ValueError(f"data_part_num must be >= 1, received {data_part_num}")
    paths = [os.path.join(data_dir, shard_name(i, part_name_prefix, part_name_suffix_length))
             for i in range(data_part_num)]
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"OFRecord shard {path} does not exist (data_dir={data_dir!r}, "
                                    f"data_part_num={data_part_num}, part_name_prefix={part_name_prefix!r}, "
                                    f"part_name_suffix_length={part_name_suffix_length})")
    return paths


def iter_raw_records(path):
    """Yield the serialized ``OFRecord`` bytes of each record of one file, in order.

    Raises OFRecordFileError for a truncated record or a negative length; a length beyond
    the end of the file is refused before anything is read (a corrupted length field never
    allocates its size)."""
    # a large buffer: few reads that release the GIL (each costs a thread switch when the
    # reader runs beside the training step)
    with open(path, "rb", buffering=_READ_BUFFER) as f:
        left = os.fstat(f.fileno()).st_size
        index = 0
        while True:
            head = f.read(_LENGTH.size)
            if not head:
                return
            if len(head) < _LENGTH.size:
                raise OFRecordFileError(f"{path}: record {index} has a truncated length field "
                                        f"({len(head)} of 8 bytes)")
            (n,) = _LENGTH.unpack(head)
            left -= _LENGTH.size
            if n < 0:
                raise OFRecordFileError(f"{path}: record {index} has a negative length {n}")
            body = f.read(n) if n <= left else b""
            if len(body) != n:
                raise OFRecordFileError(f"{path}: record {index} is truncated ({min(left, n)} of {n} bytes)")
            left -= n
            yield body
            index += 1


def parse_record(raw, where="") -> OFRecord:
    """The ``OFRecord`` serialized in ``raw``; raises OFRecordFileError (naming ``where``)
    for bytes that are no ``OFRecord``."""
    try:
        return OFRecord.FromString(raw)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, by runtime
        raise OFRecordFileError(f"{where or 'record'}: not a serialized OFRecord ({e})") from None


def read_records(path) -> list:
    """Every ``OFRecord`` of one file, parsed."""
    return [parse_record(raw, f"{path}: record {i}") for i, raw in enumerate(iter_raw_records(path))]


def write_records(path, records) -> int:
    """Write ``records`` (``OFRecord`` messages or their serialized bytes) to one file;
    returns the number written."""
    count = 0
    with open(path, "wb") as f:
        for record in records:
            raw = record if isinstance(record, bytes) else record.SerializeToString()
            f.write(_LENGTH.pack(len(raw)))
            f.write(raw)
            count += 1
    return count


class ShardWriter:
    """Write a data set of ``num_records`` records as ``data_part_num`` shards.

    Records ``0 .. n-1`` of a data set of ``n`` records go to the shards in order, each
    shard receiving ``n // data_part_num`` consecutive records and the first ``n %
    data_part_num`` shards one more, so that every shard file exists and holds at least one
    record. Use as a context manager::

        with ShardWriter(out_dir, num_records=60000, data_part_num=4, part_name_suffix_length=5) as w:
            for image, label in data:
                w.write(OFRecord(feature={...}))
    """

    def __init__(self, data_dir, num_records, data_part_num=1, part_name_prefix="part-",
                 part_name_suffix_length=-1):
        if data_part_num < 1 or num_records < data_part_num:
            raise ValueError(f"need 1 <= data_part_num <= num_records, received data_part_num={data_part_num}, "
                             f"num_records={num_records}")
        os.makedirs(data_dir, exist_ok=True)
        self.paths = [os.path.join(data_dir, shard_name(i, part_name_prefix, part_name_suffix_length))
                      for i in range(data_part_num)]
        per, extra = divmod(num_records, data_part_num)
        self._bounds = [per * (i + 1) + min(i + 1, extra) for i in range(data_part_num)]
        self._num_records = num_records
        self._written = 0
        self._shard = -1
        self._file = None

    def write(self, record) -> None:
        if self._written >= self._num_records:
            raise ValueError(f"ShardWriter: more than the announced {self._num_records} records")
        while self._shard < 0 or self._written >= self._bounds[self._shard]:
            self._open_next()
        raw = record if isinstance(record, bytes) else record.SerializeToString()
        self._file.write(_LENGTH.pack(len(raw)))
        self._file.write(raw)
        self._written += 1

    def _open_next(self):
        if self._file is not None:
            self._file.close()
        self._shard += 1
        self._file = open(self.paths[self._shard], "wb")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._written != self._num_records:
            raise ValueError(f"ShardWriter: {self._written} records written, {self._num_records} announced")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        elif self._file is not None:
            self._file.close()
