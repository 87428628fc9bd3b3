"""Data-pipeline ops: OFRecord and OneRec readers and decoders, image preprocessing, coin flip.

OneFlow v0.6.0 registers these in ``oneflow/user/ops/ofrecord_reader_op.cpp``,
``ofrecord_decoder_ops.cpp``, ``ofrecord_image_classification_reader_op.cpp``,
``onerec_reader_op.cpp``, ``onerec_decoder_op.cpp`` (OneFlow's OneRec format:
:mod:`graphfront.ofrecord.onerec`),
``image_preprocess_ops.cpp``, ``image_resize_ops.cpp``, ``coin_flip_op.cpp`` and
``gpt_data_loader_op.cpp`` (``megatron_gpt_mmap_data_loader``, reading Megatron-LM's indexed
token files: :mod:`graphfront.framework.megatron_dataset`); all are CPU-only and have no gradient.

Blobs of host objects carry the dtypes ``record`` (``kOFRecord``: one ``OFRecord``
message per batch element) and ``tensor_buffer`` (``kTensorBuffer``: one variable-size
numpy array per element, for example a decoded (H, W, C) uint8 image). Their logical
shape is ``(batch_size,)`` and their runtime value is a Python list of that length.

A reader op is a source op: it has no inputs, its kernel owns the record stream of its
compiled job (:mod:`graphfront.ofrecord.reader`) and every LazyRun takes the next batch
from a worker process that reads ``PREFETCH_DEPTH`` batches ahead
(``ofrecord_image_classification_reader`` also decodes the images there; the records
themselves cross as bytes and are parsed by the kernel). Image decoders
decode the images of a batch on a small thread pool (Pillow releases the GIL).

On several devices the readers' outputs are split along the batch (OneFlow's
only SBP signature for them, ``Split(outputs, 0)``): device ``i`` of ``n`` reads its
part of ``batch_size`` records per step (the first ``batch_size % n`` devices one more)
from its own balanced range of the shards (a OneRec reader: of its ``files``;
:func:`graphfront.ofrecord.reader.shard_range`), and the decoders and the image and
buffer ops after them work on each device's part (split along axis 0, as OneFlow's). A
reader placed on one device of a job on several runs on each of them, reading the same
records. ``seed=-1`` (no seed) draws the stream's seed from torch's generator when the
kernel is made: ``flow.manual_seed`` reproduces it, and every device draws the same one.
"""
from __future__ import annotations

import concurrent.futures
import functools
import math
import os

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import JobBuildError, OpRunError
from graphfront.framework.megatron_dataset import GPTSamples, MegatronIndex
from graphfront.ofrecord import images as _img
from graphfront.ofrecord import onerec as _onerec
from graphfront.ofrecord.reader import SHUFFLE_MODES, Prefetcher, record_batches
from graphfront.ofrecord.records import parse_record, shard_paths
from graphfront.ops import tensor_buffer_ops  # noqa: F401  (tensor_buffer_to_tensor and the other buffer ops)
from graphfront.ops import onnx_rules, xla_rules
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

#: batches a reader prepares ahead of the step
PREFETCH_DEPTH = 4

_POOL = {}
_DECODE_THREADS = max(1, min(4, os.cpu_count() or 1))


def _pool():
    """The decode thread pool of this process (a forked reader process makes its own)."""
    pool = _POOL.get(os.getpid())
    if pool is None:
        pool = _POOL[os.getpid()] = concurrent.futures.ThreadPoolExecutor(
            max_workers=_DECODE_THREADS, thread_name_prefix="graphfront-decode")
    return pool


#: the mean bytes an item of a batch carries (encoded, or a decoded image) from which the
#: decode threads share the batch: below it, Python's per-image work holding the GIL costs
#: more than the threads gain (on 2 cores: 28x28 images 1.1x slower on 2 threads, 256x256
#: JPEGs of 32 KB 1.6x faster)
THREADED_ITEM_BYTES = 8 << 10


def _nbytes(item) -> int:
    """The bytes a decode item carries: encoded bytes, an image, or a job whose first
    element is one of these."""
    item = item[0] if isinstance(item, tuple) else item
    if isinstance(item, np.ndarray):
        return item.nbytes
    return len(item) if isinstance(item, (bytes, bytearray, memoryview)) else 0


def _map(fn, items):
    """``[fn(x) for x in items]``; for items of :data:`THREADED_ITEM_BYTES` or more on
    average, on the decode threads, one run of consecutive items each."""
    items = list(items)
    runs = min(_DECODE_THREADS, len(items))
    if runs <= 1 or sum(map(_nbytes, items)) < THREADED_ITEM_BYTES * len(items):
        return [fn(x) for x in items]
    cuts = [len(items) * k // runs for k in range(runs + 1)]
    parts = _pool().map(lambda k: [fn(x) for x in items[cuts[k]:cuts[k + 1]]], range(runs))
    return [y for part in parts for y in part]


def _rng(seed, has_seed=True):
    return np.random.default_rng(seed if has_seed and seed >= 0 else None)


# ============================================================== readers

READER_ATTRS = {
    "data_dir": "string", "data_part_num": ("int32", 0), "batch_size": ("int32", 0),
    "part_name_prefix": ("string", "part-"), "part_name_suffix_length": ("int32", -1),
    "random_shuffle": ("bool", False), "seed": ("int64", -1), "shuffle_buffer_size": ("int32", 1024),
    "shuffle_after_epoch": ("bool", False),
}


def _check_reader_attrs(ctx):
    ctx.check(ctx.attr("batch_size") >= 1, f"attr 'batch_size' must be >= 1, received {ctx.attr('batch_size')}")
    ctx.check(ctx.attr("data_part_num") >= 1,
              f"attr 'data_part_num' must be >= 1, received {ctx.attr('data_part_num')}")
    ctx.check(not ctx.attr("random_shuffle") or ctx.attr("shuffle_buffer_size") >= 1,
              f"attr 'shuffle_buffer_size' must be >= 1, received {ctx.attr('shuffle_buffer_size')}")
    try:
        shard_paths(ctx.attr("data_dir"), ctx.attr("data_part_num"), ctx.attr("part_name_prefix"),
                    ctx.attr("part_name_suffix_length"))
    except (FileNotFoundError, ValueError) as e:
        ctx.fail(str(e))


class ReaderPart:
    """What one device's reader kernel reads: ``batch`` records per step from its range
    of the files (``part = (parallel_id, parallel_num)``), with the stream's ``seed``.
    ``files`` names the attr that gives the files the devices share: ``data_part_num``
    (OFRecord's shards) or ``files`` (OneRec's list).

    A device's plan sees its local shapes: a reader split over ``n`` devices outputs its
    part of ``batch_size`` records (the first ``batch_size % n`` devices one more), ``n``
    the devices of its placement (on a device grid or in the mirrored view: the logical
    batch over the local one) and the device its index among them; a reader on one
    device has ``n = 1``. A
    ``seed`` of -1 is drawn from torch's generator (module docstring).

    Raises ValueError (when the kernel is made, naming the op) when the devices outnumber
    the files."""

    def __init__(self, k, out="out", files="data_part_num"):
        attrs = k.attrs
        self.batch = k.output(out).shape[0]
        sbp = k.sbp(out)
        n = k.parallel_num if sbp == _sbp.split(0) else attrs["batch_size"] // self.batch
        self.part = (0, 1) if n == 1 else (k.parallel_id % n, n)
        if n > _file_count(attrs[files]):
            raise ValueError(_devices_per_shard_message(k.op_name, n, files, attrs[files]))
        self.seed = attrs["seed"] if attrs["seed"] >= 0 else int(torch.randint(0, 2 ** 62, (1,)))


def _batches(attrs, parse=True, part=None):
    paths = shard_paths(attrs["data_dir"], attrs["data_part_num"], attrs["part_name_prefix"],
                        attrs["part_name_suffix_length"])
    batch, where, seed = ((attrs["batch_size"], (0, 1), attrs["seed"]) if part is None
                          else (part.batch, part.part, part.seed))
    return record_batches(paths, batch, parse, random_shuffle=attrs["random_shuffle"],
                          shuffle_buffer_size=attrs["shuffle_buffer_size"],
                          shuffle_after_epoch=attrs["shuffle_after_epoch"], seed=seed, part=where)


class SourceKernel:
    """A reader's kernel: returns ``finish(next item of make_items())`` on each call; the
    items are produced in a worker process (started on the first call) ahead of the step."""

    def __init__(self, make_items, name, finish=lambda item: item):
        self._make_items = make_items
        self._finish = finish
        self._name = name
        self._items = None

    def __call__(self):
        if self._items is None:
            self._items = Prefetcher(self._make_items, PREFETCH_DEPTH, name=f"graphfront-reader-{self._name}")
        try:
            return self._finish(next(self._items))
        except StopIteration:
            raise RuntimeError(f"reader op '{self._name}': the record stream ended") from None


def _parse(raw_batch, op_name):
    return [parse_record(r, f"reader op '{op_name}': record {i} of the batch") for i, r in enumerate(raw_batch)]


def _reader_infer(ctx):
    _check_reader_attrs(ctx)
    ctx.set_output("out", (ctx.attr("batch_size"),), _dt.record)


def _reader_kernel(k):
    part = ReaderPart(k)
    return SourceKernel(lambda: _batches(k.attrs, parse=False, part=part), k.op_name,
                        lambda batch: _parse(batch, k.op_name))


def _file_count(value) -> int:
    """The number of files a reader's attr gives: a count (``data_part_num``) or a list."""
    return value if isinstance(value, int) else len(value)


def _devices_per_shard_message(op_name, devices, files, value):
    if files == "data_part_num":
        return (f"op '{op_name}': {devices} devices cannot share data_part_num={value} shard(s): each device "
                "reads whole shards (OneFlow: parallel_num <= data_part_num; place the reader on fewer devices, "
                "e.g. flow.scope.placement('cpu', '0:0'), or write more shards)")
    return (f"op '{op_name}': {devices} devices cannot share the {_file_count(value)} file(s) of attr '{files}': "
            f"each device reads whole files (OneFlow: parallel_num <= len({files}); place the reader on fewer "
            "devices, e.g. flow.scope.placement('cpu', '0:0'), or write the records to more files)")


def _split_over(files):
    """The SBP rule of a reader whose devices share the files of attr ``files``: every
    output split along the batch, its only layout on several devices. The rule raises
    JobBuildError when the devices outnumber the files."""
    def split_outputs(ctx):
        if ctx.parallel_num > _file_count(ctx.attr(files)):
            raise JobBuildError(_devices_per_shard_message(ctx.op_name, ctx.parallel_num, files, ctx.attr(files)))
        return _sbp.Only([{a: _sbp.split(0) for a in ctx.output_args}])
    return split_outputs


_split_outputs = _split_over("data_part_num")


op("OFRecordReader", outputs=["out"], attrs=dict(READER_ATTRS, nd_sbp="list_string"),
   infer=_reader_infer, kernel=_reader_kernel, sbp=_split_outputs, no_grad=True, random=True, keeps_state=True,
   cpu_only=True)


def _check_color_space(ctx):
    ctx.check(ctx.attr("color_space") in _img.COLOR_SPACES,
              f"attr 'color_space' must be one of {_img.COLOR_SPACES}, received {ctx.attr('color_space')!r}")
    return _img.channels_of(ctx.attr("color_space"))


def _classification_infer(ctx):
    _check_reader_attrs(ctx)
    _check_color_space(ctx)
    n = ctx.attr("batch_size")
    ctx.set_output("image", (n,), _dt.tensor_buffer)
    ctx.set_output("label", (n,), _dt.tensor_buffer)


def _classification_items(attrs, op_name, part=None):
    color, image_key, label_key = attrs["color_space"], attrs["image_feature_name"], attrs["label_feature_name"]
    for batch in _batches(attrs, part=part):
        encoded = [_bytes_of(r, image_key, op_name) for r in batch]
        labels = [_values_of(r, label_key, np.int32, op_name) for r in batch]
        yield _map(lambda b: _img.decode(b, color), encoded), labels


def _classification_kernel(k):
    part = ReaderPart(k, "image")
    return SourceKernel(lambda: _classification_items(k.attrs, k.op_name, part), k.op_name)


op("ofrecord_image_classification_reader", outputs=["image", "label"],
   attrs=dict(READER_ATTRS, color_space=("string", "BGR"), image_feature_name=("string", "encoded"),
              label_feature_name=("string", "class/label"), decode_buffer_size_per_thread=("int32", 8),
              num_decode_threads_per_machine=("int32", 0)),
   infer=_classification_infer, kernel=_classification_kernel, sbp=_split_outputs,
   no_grad=True, random=True, keeps_state=True, cpu_only=True)


# ============================================================== decoders

def _feature(record, name, op_name):
    if name not in record.feature:
        raise OpRunError(f"op '{op_name}': the OFRecord has no feature {name!r} "
                         f"(it has {sorted(record.feature)})")
    return record.feature[name]


def _bytes_of(record, name, op_name) -> bytes:
    f = _feature(record, name, op_name)
    if f.WhichOneof("kind") != "bytes_list" or len(f.bytes_list.value) != 1:
        raise OpRunError(f"op '{op_name}': feature {name!r} must hold a bytes_list of one value, it holds "
                         f"{f.WhichOneof('kind')} of {len(getattr(f, f.WhichOneof('kind') or 'bytes_list').value)}")
    return f.bytes_list.value[0]


def _values_of(record, name, np_dtype, op_name) -> np.ndarray:
    """The values of a feature as a 1-D array of ``np_dtype``; a bytes_list (one value) is
    read as raw bytes, for int8/uint8 only."""
    f = _feature(record, name, op_name)
    kind = f.WhichOneof("kind")
    if kind is None:
        return np.zeros(0, np_dtype)
    values = getattr(f, kind).value
    if kind == "bytes_list":
        if np.dtype(np_dtype).itemsize != 1 or len(values) != 1:
            raise OpRunError(f"op '{op_name}': feature {name!r} holds bytes; decode it as int8/uint8/char "
                             f"(one bytes value), not {np.dtype(np_dtype)} of {len(values)} values")
        return np.frombuffer(values[0], dtype=np_dtype)
    return np.fromiter(values, np_dtype, len(values))


def _raw_decoder_infer(ctx):
    _in_records(ctx)
    dtype = ctx.attr("data_type")
    ctx.check(dtype is not None and dtype.torch is not None, f"attr 'data_type' must be a numeric dtype, "
              f"received {dtype}")
    ctx.set_output("out", (ctx.input("in").shape[0],) + tuple(ctx.attr("shape")), dtype)


def _raw_decoder_kernel(k):
    name, shape, dtype = k.attr("name"), tuple(k.attr("shape")), k.attr("data_type")
    count = math.prod(shape)
    truncate, varying = k.attr("truncate"), k.attr("dim1_varying_length")

    def decode_one(record):
        v = _values_of(record, name, dtype.np, k.op_name)
        if v.size > count and truncate:
            v = v[:count]
        elif v.size < count and varying:
            v = np.concatenate([v, np.zeros(count - v.size, v.dtype)])
        if v.size != count:
            raise OpRunError(f"op '{k.op_name}': feature {name!r} has {v.size} values, shape {shape} needs "
                             f"{count} (set truncate=True to cut longer features)")
        return v

    return lambda records: torch.from_numpy(np.stack([decode_one(r) for r in records]).reshape((-1,) + shape))


def _in_records(ctx):
    desc = ctx.input("in")
    ctx.check(desc.dtype is _dt.record, f"input 'in' must be a record blob (from flow.data.ofrecord_reader), "
              f"received {desc.dtype.name}")
    return desc


op("ofrecord_raw_decoder", inputs=["in"], outputs=["out"],
   attrs={"name": "string", "shape": "shape", "data_type": "dtype", "dim1_varying_length": ("bool", False),
          "truncate": ("bool", False)},
   infer=_raw_decoder_infer, kernel=_raw_decoder_kernel, no_grad=True, random=True, sbp=_sbp.batch(),
   cpu_only=True)


def _buffer_like_records(ctx):
    ctx.set_output("out", (_in_records(ctx).shape[0],), _dt.tensor_buffer)


op("ofrecord_bytes_decoder", inputs=["in"], outputs=["out"], attrs={"name": "string"},
   infer=_buffer_like_records,
   kernel=lambda k: (lambda records: [np.frombuffer(_bytes_of(r, k.attr("name"), k.op_name), np.uint8)
                                      for r in records]),
   no_grad=True, random=True, sbp=_sbp.batch(), cpu_only=True)


def _image_decoder_infer(ctx):
    _check_color_space(ctx)
    _buffer_like_records(ctx)


def _image_decoder_kernel(k):
    name, color = k.attr("name"), k.attr("color_space")
    return lambda records: _map(lambda b: _img.decode(b, color), [_bytes_of(r, name, k.op_name) for r in records])


op("ofrecord_image_decoder", inputs=["in"], outputs=["out"], attrs={"name": "string", "color_space": ("string", "BGR")},
   infer=_image_decoder_infer, kernel=_image_decoder_kernel, no_grad=True, random=True, sbp=_sbp.batch(),
   cpu_only=True)


def _random_crop_infer(ctx):
    area, ratio = ctx.attr("random_area"), ctx.attr("random_aspect_ratio")
    ctx.check(len(area) == 2 and 0 < area[0] <= area[1] <= 1,
              f"attr 'random_area' must be [min, max] with 0 < min <= max <= 1, received {list(area)}")
    ctx.check(len(ratio) == 2 and 0 < ratio[0] <= ratio[1],
              f"attr 'random_aspect_ratio' must be [min, max] with 0 < min <= max, received {list(ratio)}")
    ctx.check(ctx.attr("num_attempts") >= 1, f"attr 'num_attempts' must be >= 1, received {ctx.attr('num_attempts')}")
    _image_decoder_infer(ctx)


def _random_crop_kernel(k):
    name, color = k.attr("name"), k.attr("color_space")
    area, ratio, attempts = tuple(k.attr("random_area")), tuple(k.attr("random_aspect_ratio")), k.attr("num_attempts")
    rng = _rng(k.attr("seed"), k.attr("has_seed"))

    def decode_batch(records):
        # the crop windows are drawn on this thread, in batch order: equal seeds, equal crops
        jobs = []
        for r in records:
            encoded = _bytes_of(r, name, k.op_name)
            seed = int(rng.integers(2 ** 63))
            jobs.append((encoded, seed))

        def one(job):
            encoded, seed = job
            crop_rng = np.random.default_rng(seed)
            return _img.decode(encoded, color, crop=lambda w, h: _img.random_crop_window(w, h, crop_rng, area, ratio,
                                                                                           attempts))
        return _map(one, jobs)
    return decode_batch


op("ofrecord_image_decoder_random_crop", inputs=["in"], outputs=["out"],
   attrs={"name": "string", "color_space": ("string", "BGR"), "num_attempts": ("int32", 10), "seed": ("int64", -1),
          "has_seed": ("bool", False), "random_area": ("list_float", [0.08, 1.0]),
          "random_aspect_ratio": ("list_float", [0.75, 1.333333])},
   infer=_random_crop_infer, kernel=_random_crop_kernel, no_grad=True, random=True, sbp=_sbp.batch(),
   cpu_only=True)


def _decoder_crop_resize_infer(ctx):
    conf = ctx.conf
    desc = ctx.input("in")
    ctx.check(desc.dtype is _dt.tensor_buffer,
              f"input 'in' must be a tensor_buffer blob of encoded images (flow.data.OFRecordBytesDecoder), "
              f"received {desc.dtype.name} {tuple(desc.shape)}")
    ctx.check(conf.target_width > 0 and conf.target_height > 0,
              f"target_width, target_height must be > 0, received {conf.target_width}, {conf.target_height}")
    ctx.check(0 < conf.random_area_min <= conf.random_area_max <= 1,
              f"random_area must be [min, max] with 0 < min <= max <= 1, received "
              f"[{conf.random_area_min}, {conf.random_area_max}]")
    ctx.check(0 < conf.random_aspect_ratio_min <= conf.random_aspect_ratio_max,
              f"random_aspect_ratio must be [min, max] with 0 < min <= max, received "
              f"[{conf.random_aspect_ratio_min}, {conf.random_aspect_ratio_max}]")
    ctx.check(conf.num_attempts >= 1, f"num_attempts must be >= 1, received {conf.num_attempts}")
    ctx.set_output("out", tuple(desc.shape) + (int(conf.target_height), int(conf.target_width), 3), _dt.uint8)


def _decoder_crop_resize_kernel(k):
    """Decode each encoded image to RGB, keep a random window
    (:func:`graphfront.ofrecord.images.random_crop_window`) and resize it bilinearly to
    (target_height, target_width): a dense uint8 (N, H, W, 3) array (OneFlow v0.6.0
    ``oneflow/core/kernel/image_decoder_random_crop_resize_kernel.cpp``, CPU path)."""
    conf = k.conf
    w, h = int(conf.target_width), int(conf.target_height)
    area = (conf.random_area_min, conf.random_area_max)
    ratio = (conf.random_aspect_ratio_min, conf.random_aspect_ratio_max)
    attempts = int(conf.num_attempts)
    rng = _rng(int(conf.seed), conf.HasField("seed"))

    def one(job):
        encoded, seed = job
        crop_rng = np.random.default_rng(seed)
        image = _img.decode(bytes(encoded), "RGB",
                            crop=lambda iw, ih: _img.random_crop_window(iw, ih, crop_rng, area, ratio, attempts))
        return _img.resize(image, w, h, "bilinear")

    def decode(buffers):
        jobs = [(b, int(rng.integers(2 ** 63))) for b in buffers]  # drawn in batch order: equal seeds, equal crops
        out = np.stack(_map(one, jobs)) if jobs else np.zeros((0, h, w, 3), np.uint8)
        return torch.from_numpy(out)
    return decode


op("image_decoder_random_crop_resize_conf", conf="image_decoder_random_crop_resize_conf", inputs=["in"],
   outputs=["out"], infer=_decoder_crop_resize_infer, kernel=_decoder_crop_resize_kernel, no_grad=True, random=True,
   sbp=_sbp.batch(), cpu_only=True)


# ============================================================== image preprocessing

def _image_buffer_input(ctx):
    desc = ctx.input("in")
    ctx.check(desc.dtype is _dt.tensor_buffer and len(desc.shape) == 1,
              f"input 'in' must be a 1-D tensor_buffer blob of images, received {desc.dtype.name} {tuple(desc.shape)}")
    return desc


def _resize_fixed_infer(ctx):
    n = _image_buffer_input(ctx).shape[0]
    w, h, c = ctx.attr("target_width"), ctx.attr("target_height"), ctx.attr("channels")
    ctx.check(w > 0 and h > 0, f"attrs 'target_width', 'target_height' must be > 0, received {w}, {h}")
    ctx.check(c in (1, 3), f"attr 'channels' must be 1 or 3, received {c}")
    dtype = ctx.attr("data_type")
    ctx.check(dtype in (_dt.uint8, _dt.float32), f"attr 'data_type' must be uint8 or float32, received {dtype}")
    ctx.check(ctx.attr("interpolation_type") in _img.INTERPOLATION_TYPES,
              f"attr 'interpolation_type' must be one of {_img.INTERPOLATION_TYPES}, "
              f"received {ctx.attr('interpolation_type')!r}")
    ctx.set_output("out", (n, h, w, c), dtype)
    ctx.set_output("scale", (n, 2), _dt.float32)


def _resize_fixed_kernel(k):
    w, h, c, dtype = k.attr("target_width"), k.attr("target_height"), k.attr("channels"), k.attr("data_type")
    interp = k.attr("interpolation_type")

    def resize(images):
        for im in images:
            if im.ndim != 3 or im.shape[2] != c:
                raise OpRunError(f"op '{k.op_name}': attr channels={c}, received an image of shape {im.shape}")
        out = np.stack(_map(lambda im: _img.resize(im, w, h, interp), images)).astype(dtype.np, copy=False)
        scale = np.asarray([[w / im.shape[1], h / im.shape[0]] for im in images], np.float32)
        return torch.from_numpy(out), torch.from_numpy(scale)
    return resize


op("image_resize_to_fixed", inputs=["in"], outputs=["out", "scale"],
   attrs={"target_width": ("int64", 0), "target_height": ("int64", 0), "channels": ("int64", 3),
          "data_type": ("dtype", _dt.uint8), "interpolation_type": ("string", "bilinear")},
   infer=_resize_fixed_infer, kernel=_resize_fixed_kernel, no_grad=True, random=True, sbp=_sbp.batch(),
   cpu_only=True)


def keep_aspect_ratio_size(height, width, target_size, min_size=0, max_size=0, resize_longer=False):
    """(width, height) that ``image_resize_keep_aspect_ratio`` resizes an image of
    ``(height, width)`` to (OneFlow v0.6.0 ``oneflow/user/kernels/image_resize_kernels.cpp``).

    The shorter side becomes ``target_size`` and the longer one ``round(target_size / r)``,
    ``r = shorter / longer``; with ``max_size > 0`` a longer side above it is set to
    ``max_size`` and the shorter recomputed as ``round(max_size * r)``. ``resize_longer``
    swaps the roles: the longer side becomes ``target_size`` and ``min_size`` bounds the
    shorter from below. Rounding is half-to-even (the kernel rounds with
    ``std::nearbyint`` under ``FE_TONEAREST``). When ``width < height`` the shorter side is
    the width, otherwise the height (a square image: both sides ``target_size``).
    """
    short, long_ = min(height, width), max(height, width)
    ratio = short / long_
    if resize_longer:
        res_long = float(target_size)
        res_short = float(round(res_long * ratio))
        if min_size > 0 and res_short < min_size:
            res_short = float(min_size)
            res_long = float(round(res_short / ratio))
    else:
        res_short = float(target_size)
        res_long = float(round(res_short / ratio))
        if max_size > 0 and res_long > max_size:
            res_long = float(max_size)
            res_short = float(round(res_long * ratio))
    return (int(res_short), int(res_long)) if width < height else (int(res_long), int(res_short))


def _resize_keep_infer(ctx):
    n = _image_buffer_input(ctx).shape[0]
    target, lo, hi = ctx.attr("target_size"), ctx.attr("min_size"), ctx.attr("max_size")
    ctx.check(target > 0, f"attr 'target_size' must be > 0, received {target}")
    ctx.check(hi <= 0 or hi >= target, f"attr 'max_size' must be >= target_size ({target}) or 0, received {hi}")
    ctx.check(lo <= 0 or lo <= target, f"attr 'min_size' must be <= target_size ({target}) or 0, received {lo}")
    ctx.check(ctx.attr("interpolation_type") in _img.INTERPOLATION_TYPES,
              f"attr 'interpolation_type' must be one of {_img.INTERPOLATION_TYPES}, "
              f"received {ctx.attr('interpolation_type')!r}")
    for name in ("out", "size", "scale"):
        ctx.set_output(name, (n,), _dt.tensor_buffer)


def _resize_keep_kernel(k):
    a = k.attrs
    interp = a["interpolation_type"]

    def one(im):
        if im.ndim != 3:
            raise OpRunError(f"op '{k.op_name}': images must be (H, W, C), received shape {im.shape}")
        h, w = im.shape[:2]
        rw, rh = keep_aspect_ratio_size(h, w, a["target_size"], a["min_size"], a["max_size"], a["resize_longer"])
        return (_img.resize(im, rw, rh, interp), np.asarray([rw, rh], np.int32),
                np.asarray([rw / w, rh / h], np.float32))

    def resize(images):
        done = _map(one, images)
        return [d[0] for d in done], [d[1] for d in done], [d[2] for d in done]
    return resize


op("image_resize_keep_aspect_ratio", inputs=["in"], outputs=["out", "size", "scale"],
   attrs={"target_size": "int32", "min_size": ("int32", 0), "max_size": ("int32", 0),
          "resize_longer": ("bool", False), "interpolation_type": ("string", "bilinear")},
   infer=_resize_keep_infer, kernel=_resize_keep_kernel, no_grad=True, random=True, sbp=_sbp.batch(),
   cpu_only=True)


CMN_ATTRS = {"color_space": ("string", "BGR"), "output_layout": ("string", "NCHW"), "mean": ("list_float", [0.0]),
             "std": ("list_float", [1.0]), "crop_h": ("int64", 0), "crop_w": ("int64", 0),
             "crop_pos_x": ("float", 0.5), "crop_pos_y": ("float", 0.5), "output_dtype": ("dtype", _dt.float32)}


def _cmn_check(ctx, channels):
    ctx.check(ctx.attr("output_layout") in ("NCHW", "NHWC"),
              f"attr 'output_layout' must be NCHW or NHWC, received {ctx.attr('output_layout')!r}")
    for key in ("mean", "std"):
        ctx.check(len(ctx.attr(key)) in (1, channels),
                  f"attr '{key}' must hold 1 or {channels} values, received {list(ctx.attr(key))}")
    ctx.check(all(s != 0 for s in ctx.attr("std")), f"attr 'std' must not contain 0, received {list(ctx.attr('std'))}")
    for key in ("crop_pos_x", "crop_pos_y"):
        ctx.check(0.0 <= ctx.attr(key) <= 1.0, f"attr '{key}' must be in [0, 1], received {ctx.attr(key)}")
    ctx.check(ctx.attr("output_dtype") in (_dt.float32, _dt.float16),
              f"attr 'output_dtype' must be float32 or float16, received {ctx.attr('output_dtype')}")
    if ctx.has_input("mirror"):
        m = ctx.input("mirror")
        ctx.check(m.dtype is _dt.int8 and len(m.shape) == 1,
                  f"input 'mirror' must be a 1-D int8 blob (flow.random.CoinFlip), received {m.dtype.name} "
                  f"{tuple(m.shape)}")


def _cmn_set_output(ctx, n, h, w, c):
    shape = (n, c, h, w) if ctx.attr("output_layout") == "NCHW" else (n, h, w, c)
    ctx.set_output("out", shape, ctx.attr("output_dtype"))


def _cmn_uint8_infer(ctx):
    desc = ctx.input("in")
    ctx.check(desc.dtype is _dt.uint8 and len(desc.shape) == 4,
              f"input 'in' must be a (N, H, W, C) uint8 blob, received {desc.dtype.name} {tuple(desc.shape)}")
    n, h, w, c = desc.shape
    ch, cw = ctx.attr("crop_h") or h, ctx.attr("crop_w") or w
    ctx.check(0 < ch <= h and 0 < cw <= w, f"crop ({ch}, {cw}) must fit the images ({h}, {w})")
    _cmn_check(ctx, c)
    _cmn_set_output(ctx, n, ch, cw, c)


def _cmn_buffer_infer(ctx):
    n = _image_buffer_input(ctx).shape[0]
    ch, cw = ctx.attr("crop_h"), ctx.attr("crop_w")
    ctx.check(ch > 0 and cw > 0, f"images of a tensor_buffer vary in size: attrs 'crop_h', 'crop_w' must be > 0, "
              f"received {ch}, {cw}")
    c = _check_color_space(ctx)
    _cmn_check(ctx, c)
    _cmn_set_output(ctx, n, ch, cw, c)


def _cmn_kernel(k):
    a = k.attrs
    nchw = a["output_layout"] == "NCHW"
    dtype = a["output_dtype"].torch

    def cmn(images, mirror):
        flags = mirror.numpy() if mirror is not None else np.zeros(len(images), np.int8)
        if isinstance(images, torch.Tensor):
            images = images.numpy()
        out = np.stack([_img.crop_mirror_normalize(im, bool(f), a["crop_h"], a["crop_w"], a["crop_pos_y"],
                                                   a["crop_pos_x"], a["mean"], a["std"])
                        for im, f in zip(images, flags)])
        t = torch.from_numpy(out)
        return (t.permute(0, 3, 1, 2) if nchw else t).contiguous().to(dtype)
    return cmn


def _cmn_uint8_xla(k):
    """The kernel's crop (a static window), left-right flip of the images whose ``mirror``
    flag is set, and ``(x - mean) / std`` in float32, over a (N, H, W, C) uint8 array."""
    jnp = xla_rules.jnp()
    a = k.attrs
    _, h, w, _ = k.input("in").shape
    ch, cw = a["crop_h"] or h, a["crop_w"] or w
    y0, x0 = int((h - ch) * a["crop_pos_y"]), int((w - cw) * a["crop_pos_x"])
    mean, std = np.asarray(a["mean"], np.float32), np.asarray(a["std"], np.float32)
    dtype = a["output_dtype"].np

    def cmn(images, mirror):
        out = images[:, y0:y0 + ch, x0:x0 + cw].astype(jnp.float32)
        if mirror is not None:
            out = jnp.where(mirror.reshape(-1, 1, 1, 1) != 0, out[:, :, ::-1], out)
        out = (out - mean) / std
        return (jnp.transpose(out, (0, 3, 1, 2)) if a["output_layout"] == "NCHW" else out).astype(dtype)
    return cmn


def _cmn_uint8_onnx(c):
    """The XLA rule's steps as ONNX nodes: a static crop window, a reversed slice along W where
    ``mirror`` is set, ``(x - mean) / std`` in float32, then the layout and output dtype."""
    a = c.attrs
    _, h, w, _ = c.input_desc("in").shape
    ch, cw = a["crop_h"] or h, a["crop_w"] or w
    y0, x0 = int((h - ch) * a["crop_pos_y"]), int((w - cw) * a["crop_pos_x"])
    ints = onnx_rules.int64s
    out = c.node("Cast", [c.node("Slice", [c.input("in"), c.const(ints([y0, x0])), c.const(ints([y0 + ch, x0 + cw])),
                                           c.const(ints([1, 2]))])], to=onnx_rules.FLOAT)
    if c.has_input("mirror"):
        flipped = c.node("Slice", [out, c.const(ints([-1])), c.const(ints([np.iinfo(np.int64).min])),
                                   c.const(ints([2])), c.const(ints([-1]))])
        flag = c.node("Reshape", [onnx_rules.nonzero(c, c.input("mirror")), c.const(ints([-1, 1, 1, 1]))])
        out = c.node("Where", [flag, flipped, out])
    out = c.node("Div", [c.node("Sub", [out, c.const(np.asarray(a["mean"], np.float32))]),
                         c.const(np.asarray(a["std"], np.float32))])
    if a["output_layout"] == "NCHW":
        out = c.node("Transpose", [out], perm=[0, 3, 1, 2])
    c.node("Cast", [out], [c.output("out")], to=c.dtype_code(a["output_dtype"]))


op("crop_mirror_normalize_from_uint8", inputs=["in", "mirror?"], outputs=["out"], attrs=CMN_ATTRS,
   infer=_cmn_uint8_infer, kernel=_cmn_kernel, no_grad=True, xla=_cmn_uint8_xla, onnx=_cmn_uint8_onnx,
   sbp=_sbp.batch(), cpu_only=True)
op("crop_mirror_normalize_from_tensorbuffer", inputs=["in", "mirror?"], outputs=["out"], attrs=CMN_ATTRS,
   infer=_cmn_buffer_infer, kernel=_cmn_kernel, no_grad=True, random=True, sbp=_sbp.batch(),
   cpu_only=True)


# ============================================================== OneRec
# OneFlow v0.6.0 oneflow/user/ops/onerec_reader_op.cpp, onerec_decoder_op.cpp and the kernels
# oneflow/user/kernels/onerec_reader_kernel.cpp, onerec_decoder_kernels.cpp. The reader's worker
# process reads and checks the frames (graphfront.ofrecord.onerec.iter_frames) and hands their
# payloads over as bytes; the step's value is a tensor_buffer of 1-D uint8 arrays, one record each.
# The decoder parses each record's FlatBuffers Example in the step, finds the feature ``key`` and
# stacks its tensors: shape rules (reshape, batch padding, dynamic) as documented on
# flow.data.onerec_decoder; every violation is an OpRunError naming the op, the key and the
# record's index in the batch. A batch whose records all store the key alike in the static
# shape (no reshape, padding or dynamic shape) is read at once with numpy
# (graphfront.ofrecord.onerec.numeric_feature: 2,048 records of four features decode in 11 ms
# where the FlatBuffers runtime record by record took 270 ms); any other batch, or a record
# laid out otherwise, is read record by record, which names what is wrong.

ONEREC_READER_ATTRS = {
    "files": "list_string", "batch_size": ("int32", 0), "random_shuffle": ("bool", False),
    "shuffle_mode": ("string", "instance"), "seed": ("int64", -1), "shuffle_buffer_size": ("int32", 1024),
    "shuffle_after_epoch": ("bool", False), "verify_example": ("bool", True),
}


def _check_onerec_extra(ctx):
    message = _onerec.dependency_message()
    ctx.check(message is None, message or "")


def _onerec_reader_infer(ctx):
    files = list(ctx.attr("files"))
    ctx.check(ctx.attr("batch_size") >= 1, f"attr 'batch_size' must be >= 1, received {ctx.attr('batch_size')}")
    ctx.check(len(files) >= 1, "attr 'files' must name at least one OneRec file, received []")
    ctx.check(ctx.attr("shuffle_mode") in SHUFFLE_MODES,
              f"attr 'shuffle_mode' must be one of {SHUFFLE_MODES}, received {ctx.attr('shuffle_mode')!r}")
    ctx.check(not ctx.attr("random_shuffle") or ctx.attr("shuffle_buffer_size") >= 1,
              f"attr 'shuffle_buffer_size' must be >= 1, received {ctx.attr('shuffle_buffer_size')}")
    for i, path in enumerate(files):
        ctx.check(os.path.isfile(path), f"OneRec file {path!r} (attr 'files'[{i}]) does not exist")
    _check_onerec_extra(ctx)
    ctx.set_output("out", (ctx.attr("batch_size"),), _dt.tensor_buffer)


def _onerec_batches(attrs, part):
    return record_batches(list(attrs["files"]), part.batch, parse=False, shuffle_mode=attrs["shuffle_mode"],
                          random_shuffle=attrs["random_shuffle"], shuffle_buffer_size=attrs["shuffle_buffer_size"],
                          shuffle_after_epoch=attrs["shuffle_after_epoch"], seed=part.seed, part=part.part,
                          read_file=functools.partial(_onerec.iter_frames, verify_example=attrs["verify_example"]),
                          what="OneRec files")


def _as_buffers(payloads):
    return [np.frombuffer(p, np.uint8) for p in payloads]


def _onerec_reader_kernel(k):
    part = ReaderPart(k, files="files")
    return SourceKernel(lambda: _onerec_batches(k.attrs, part), k.op_name, _as_buffers)


op("OneRecReader", outputs=["out"], attrs=ONEREC_READER_ATTRS, infer=_onerec_reader_infer,
   kernel=_onerec_reader_kernel, sbp=_split_over("files"), no_grad=True, random=True, keeps_state=True,
   cpu_only=True,
   doc="batches of OneRec records (frame payloads) from a list of files, as a tensor_buffer")

#: the dtypes onerec_decoder reads and the OneRec list each is stored as (OneFlow's kernel has no others)
ONEREC_LISTS = {"int8": "Int8List", "int32": "Int32List", "int64": "Int64List", "float32": "Float32List",
                "float64": "Float64List"}


def _onerec_decoder_infer(ctx):
    desc = ctx.input("in")
    ctx.check(desc.dtype is _dt.tensor_buffer and len(desc.shape) == 1,
              f"input 'in' must be a 1-D tensor_buffer blob of OneRec records (flow.data.onerec_reader), "
              f"received {desc.dtype.name} {tuple(desc.shape)}")
    dtype = ctx.attr("data_type")
    ctx.check(dtype is not None and dtype.name in ONEREC_LISTS,
              f"attr 'data_type' must be one of {', '.join(ONEREC_LISTS)} (OneFlow's onerec_decoder reads no "
              f"other), received {dtype.name if dtype is not None else None}")
    ctx.check(ctx.attr("key") != "", "attr 'key' must name a feature, received ''")
    static = tuple(ctx.attr("static_shape"))
    ctx.check(all(d >= 0 for d in static), f"attr 'static_shape' must not have negative dims, received {static}")
    if ctx.attr("has_reshape"):
        reshape = tuple(ctx.attr("reshape"))
        ctx.check(len(reshape) == len(static) and reshape.count(-1) <= 1 and all(d > 0 or d == -1 for d in reshape),
                  f"attr 'reshape' must have the {len(static)} dims of static_shape {static}, each > 0 but at "
                  f"most one -1, received {reshape}")
    if ctx.attr("has_batch_padding"):
        pad = tuple(ctx.attr("batch_padding"))
        ctx.check(len(static) >= 1 and len(pad) == len(static) and pad[0] >= -1 and all(d == 0 for d in pad[1:]),
                  f"attr 'batch_padding' must have the {len(static)} dims of static_shape {static} (at least one), "
                  f"dim 0 -1, 0 or the padded size and the others 0, received {pad}")
        if pad[0] > 0:
            fits = pad[0] <= static[0] if ctx.attr("is_dynamic") else pad[0] == static[0]
            ctx.check(fits, f"attr 'batch_padding' pads dim 0 to {pad[0]}, static_shape {static} "
                            f"{'holds at most' if ctx.attr('is_dynamic') else 'needs'} {static[0]}")
    _check_onerec_extra(ctx)
    ctx.set_output("out", (desc.shape[0],) + static, dtype, is_dynamic=ctx.attr("is_dynamic"))


def _onerec_decoder_kernel(k):
    key, dtype, static = k.attr("key"), k.attr("data_type"), tuple(k.attr("static_shape"))
    dynamic = k.attr("is_dynamic")
    reshape = tuple(k.attr("reshape")) if k.attr("has_reshape") else None
    padding = k.attr("batch_padding")[0] if k.attr("has_batch_padding") else None
    kind = ONEREC_LISTS[dtype.name]
    code = _onerec.TENSOR_DATA.index(kind)
    where = f"op '{k.op_name}' (onerec_decoder): key {key!r}"

    def fail(i, what):
        return OpRunError(f"{where}, record {i}: {what}")

    def tensor_of(i, buf):
        try:
            tensor = _onerec.feature_tensor(buf, key)
            names = _onerec.feature_names(buf) if tensor is None else None
        except Exception as e:  # noqa: BLE001 - a malformed record, read unverified
            raise fail(i, f"the record is no readable OneRec Example ({type(e).__name__}: {e}); "
                          "flow.data.onerec_reader(..., verify_example=True) checks each record as it is "
                          "read") from None
        if tensor is None:
            raise fail(i, f"the record has no feature {key!r} (it has {names})")
        if tensor.shape is None:
            raise fail(i, "the feature's tensor has no shape")
        if tensor.data_type != code:
            got = _onerec.TENSOR_DATA[tensor.data_type] if tensor.data_type < len(_onerec.TENSOR_DATA) else \
                f"unknown type {tensor.data_type}"
            raise fail(i, f"data_type {dtype.name} reads a {kind}, the record's tensor holds {got}")
        return tensor

    def instance_shape(i, shape):
        if reshape is None:
            if len(shape) != len(static):
                raise fail(i, f"expected a tensor of {len(static)} dims (static_shape {static}), "
                              f"received shape {shape}")
            return shape
        count, fixed = math.prod(shape), math.prod(d for d in reshape if d != -1)
        if -1 not in reshape:
            if count != fixed:
                raise fail(i, f"reshape {reshape} needs {fixed} elements, the tensor has {count} (shape {shape})")
            return reshape
        if fixed == 0 or count % fixed:
            raise fail(i, f"reshape {reshape}: the tensor's {count} elements (shape {shape}) do not divide into "
                          f"rows of {fixed}")
        return tuple(count // fixed if d == -1 else d for d in reshape)

    def check_batch(shapes):
        """The instance shape of the batch (dim 0 padded): checks every record against it."""
        first = shapes[0]
        fixed_from = 0 if padding is None else 1   # a padded dim 0 is checked below
        for i, s in enumerate(shapes):
            if (any(a > b for a, b in zip(s, static)) if dynamic else s[fixed_from:] != static[fixed_from:]):
                raise fail(i, f"expected instance shape {'at most ' if dynamic else ''}{static} (static_shape), "
                              f"received {s}")
            if s[1:] != first[1:]:
                raise fail(i, f"dims after the first must agree across the batch: record 0 has {first}, "
                              f"received {s}")
        if not static:
            return ()
        dims = [s[0] for s in shapes]
        if padding is None or padding == 0:
            for i, d in enumerate(dims):
                if d != dims[0]:
                    raise fail(i, f"dim 0 must be equal across the batch (without batch_padding, or 0), record 0 "
                                  f"has {dims[0]}, received {d}")
            top = dims[0]
        elif padding == -1:
            top = max(dims)
        else:
            for i, d in enumerate(dims):
                if d > padding:
                    raise fail(i, f"dim 0 is {d}, batch_padding pads to {padding}: expected at most {padding}")
            top = padding
        if not dynamic and top != static[0]:
            i = dims.index(max(dims)) if padding == -1 else 0
            raise fail(i, f"expected dim 0 {static[0]} (static_shape {static}), received {top}"
                          f"{' (the largest of the batch, batch_padding -1)' if padding == -1 else ''}")
        return (top,) + first[1:]

    def onerec_decoder(buffers):
        if reshape is None and padding is None and not dynamic:  # the usual batch: read at once
            batch = _onerec.numeric_feature(buffers, key, code)
            if batch is not None and batch.shapes.shape[1] == len(static) and (batch.shapes == static).all() \
                    and (batch.counts == math.prod(static)).all():
                return torch.from_numpy(batch.values(dtype.np, math.prod(static)).reshape((len(buffers),) + static))
        tensors = [tensor_of(i, b) for i, b in enumerate(buffers)]
        shapes = [instance_shape(i, t.shape) for i, t in enumerate(tensors)]
        inst = check_batch(shapes)
        count = math.prod(inst)
        out = np.zeros((len(tensors),) + inst, dtype.np)
        flat = out.reshape(len(tensors), -1)
        for i, (t, s) in enumerate(zip(tensors, shapes)):
            n = len(t.values)
            if padding is None and n != count:
                raise fail(i, f"the {kind} holds {n} values, instance shape {s} needs {count}")
            if padding is not None and n > count:
                raise fail(i, f"the {kind} holds {n} values, the padded instance shape {inst} holds at most {count}")
            flat[i, :n] = t.values
        return torch.from_numpy(out)
    return onerec_decoder


op("onerec_decoder", inputs=["in"], outputs=["out"],
   attrs={"key": "string", "data_type": "dtype", "static_shape": "shape", "is_dynamic": ("bool", False),
          "has_reshape": ("bool", False), "reshape": "shape", "has_batch_padding": ("bool", False),
          "batch_padding": "shape"},
   infer=_onerec_decoder_infer, kernel=_onerec_decoder_kernel, no_grad=True, random=True, sbp=_sbp.batch(),
   cpu_only=True, doc="one feature of every OneRec record of a batch as a dense blob")


# ============================================================== coin flip

def _coin_flip_infer(ctx):
    p, n = ctx.attr("probability"), ctx.attr("batch_size")
    ctx.check(0.0 <= p <= 1.0, f"attr 'probability' must be in [0, 1], received {p}")
    ctx.check(n >= 1, f"attr 'batch_size' must be >= 1, received {n}")
    ctx.set_output("out", (n,), _dt.int8)


def _coin_flip_kernel(k):
    p, n = k.attr("probability"), k.attr("batch_size")
    gen = torch.Generator()
    if k.attr("has_seed") and k.attr("seed") >= 0:
        gen.manual_seed(k.attr("seed"))
    else:
        gen.seed()
    return lambda: (torch.rand(n, generator=gen) < p).to(torch.int8)


op("coin_flip", outputs=["out"],
   attrs={"probability": ("float", 0.5), "batch_size": ("int64", 0), "seed": ("int64", -1),
          "has_seed": ("bool", False), "nd_sbp": "list_string"},
   infer=_coin_flip_infer, kernel=_coin_flip_kernel, no_grad=True, random=True, cpu_only=True)


# ============================================================== Megatron GPT data loader

GPT_LOADER_ATTRS = {
    "data_file_prefix": "string", "seq_length": ("int64", 0), "label_length": ("int64", 1),
    "num_samples": ("int64", 0), "batch_size": ("int64", 0), "dtype": ("dtype", _dt.int64),
    "split_sizes": "list_int64", "split_index": ("int64", 0), "shuffle": ("bool", False),
    "random_seed": ("int64", 0), "nd_sbp": "list_string",
}


def _gpt_samples(attrs) -> GPTSamples:
    return GPTSamples(MegatronIndex(attrs["data_file_prefix"]), attrs["seq_length"], attrs["num_samples"],
                      list(attrs["split_sizes"]) or [1], attrs["split_index"], attrs["shuffle"],
                      attrs["random_seed"], attrs["label_length"])


def _gpt_loader_infer(ctx):
    n, dtype = ctx.attr("batch_size"), ctx.attr("dtype")
    ctx.check(n >= 1, f"attr 'batch_size' must be >= 1, received {n}")
    ctx.check(ctx.attr("label_length") == 1, f"attr 'label_length' must be 1, received {ctx.attr('label_length')}")
    ctx.check(dtype in (_dt.int32, _dt.int64), f"attr 'dtype' must be int32 or int64, received {dtype.name}")
    if ctx.has_input("iteration"):
        it = ctx.input("iteration")
        ctx.check(it.shape == (1,) and it.dtype == _dt.int64,
                  f"input 'iteration' expected shape (1,) int64, received {it.shape} {it.dtype.name}")
    try:
        _gpt_samples(ctx.attrs)
    except ValueError as e:
        ctx.fail(str(e))
    ctx.set_output("out", (n, ctx.attr("seq_length") + ctx.attr("label_length")), dtype)


def _gpt_loader_kernel(k):
    samples, batch = [], k.attr("batch_size")
    counter = [0]
    torch_dtype = k.attr("dtype").torch

    def megatron_gpt_mmap_data_loader(iteration=None):
        if not samples:
            samples.append(_gpt_samples(k.attrs))
        step = counter[0] if iteration is None else int(iteration.reshape(-1)[0])
        try:
            out = np.stack([samples[0].sample(step * batch + i) for i in range(batch)])
        except IndexError as e:
            raise RuntimeError(f"op {k.op_name} (megatron_gpt_mmap_data_loader): batch {step}: {e}") from None
        if iteration is None:
            counter[0] += 1
        else:
            iteration.add_(1)
        return torch.from_numpy(out).to(torch_dtype)
    return megatron_gpt_mmap_data_loader


op("megatron_gpt_mmap_data_loader", inputs=["iteration?"], outputs=["out"], attrs=GPT_LOADER_ATTRS,
   infer=_gpt_loader_infer, kernel=_gpt_loader_kernel, no_grad=True, random=True, keeps_state=True,
   mutates=("iteration",),
   host_reads=True, doc="batches of seq_length + 1 tokens from a Megatron-LM indexed data set")
