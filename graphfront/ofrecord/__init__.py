"""OneFlow's OFRecord and OneRec data formats and the host-side data pipeline behind ``flow.data``.

* :mod:`graphfront.ofrecord.records`: the file format (length-prefixed ``OFRecord``
  protobufs in ``part-XXXXX`` shards), feature helpers, a shard writer and reader.
* :mod:`graphfront.ofrecord.onerec`: OneFlow's OneRec files (checksummed frames of
  FlatBuffers ``Example`` records; the ``onerec`` extra), a writer and a reader.
* :mod:`graphfront.ofrecord.reader`: the record stream of a reader op (epochs, shuffle
  buffer, seeds) and the background prefetching process.
* :mod:`graphfront.ofrecord.images`: image decoding (Pillow), random crop, resize,
  crop-mirror-normalize on numpy arrays.
"""
from graphfront.ofrecord.records import (BytesList, DoubleList, Feature, FloatList, Int32List, Int64List,
                                         OFRecord, ShardWriter, bytes_feature, double_feature, float_feature,
                                         int32_feature, int64_feature, read_records, shard_paths,
                                         write_records)

__all__ = ["BytesList", "DoubleList", "Feature", "FloatList", "Int32List", "Int64List", "OFRecord",
           "ShardWriter", "bytes_feature", "double_feature", "float_feature", "int32_feature",
           "int64_feature", "read_records", "shard_paths", "write_records"]
