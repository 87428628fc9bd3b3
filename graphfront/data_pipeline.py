"""``flow.data`` OFRecord and OneRec readers and decoders, ``flow.image`` preprocessing and
``flow.random.CoinFlip``: OneFlow's data-pipeline API (v0.6.0
``python/oneflow/compatible/single_client/ops/user_data_ops.py`` and ``data_ops.py``).

Each function adds one op to the job being built (the ops are in
:mod:`graphfront.ops.data_ops`); all of them run on the host (CPU), as OneFlow's CPU-only
user ops: they are placed on the CPU devices of the enclosing placement (``"gpu", "0:0-1"``
puts them on ``"cpu", "0:0-1"``), and consumers on a GPU receive their outputs copied. On
several devices the readers split the batch (each device reads its part from its own
shards) and the decoders and image ops work on each device's part. Readers are source ops:
every LazyRun of the job takes the next batch. The Megatron GPT loader stays on ``cpu:0``.

Typical use (OneFlow's ResNet data loader)::

    with flow.scope.placement("cpu", "0:0"):
        ofrecord = flow.data.ofrecord_reader(data_dir, batch_size=32, data_part_num=4,
                                             part_name_suffix_length=5, random_shuffle=True)
        label = flow.data.OFRecordRawDecoder(ofrecord, "class/label", shape=(), dtype=flow.int32)
        image = flow.data.OFRecordImageDecoderRandomCrop(ofrecord, "encoded", color_space="RGB")
        image, _, _ = flow.image.Resize(image, target_size=[224, 224])
        rng = flow.random.CoinFlip(batch_size=32)
        image = flow.image.CropMirrorNormalize(image, mirror_blob=rng, color_space="RGB",
                                               mean=[123.68, 116.78, 103.94], std=[58.4, 57.1, 57.4])
"""
from __future__ import annotations

import contextlib
import warnings

from graphfront import scope as _scope
from graphfront.array import reshape as _reshape
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as _jb
from graphfront.framework import session as _session
from graphfront.framework.blob_desc import BlobDesc, expect_blob, expect_dtype, expect_int, expect_ints, is_int
from graphfront.framework.errors import ArgumentError, JobBuildError, format_location, user_frame
from graphfront.framework.renamed_args import PARALLEL_DISTRIBUTION, renamed_keywords
from graphfront.ops.builder import build_op, new_system_op, unique_str
from graphfront.tensor_buffer import tensor_buffer_to_tensor
from graphfront.initializers import InitializerConf, constant_initializer, random_uniform_initializer

__all__ = ["ofrecord_reader", "ofrecord_loader", "OFRecordRawDecoder", "ofrecord_raw_decoder", "OFRecordBytesDecoder",
           "ofrecord_bytes_decoder", "OFRecordImageDecoder", "ofrecord_image_decoder",
           "OFRecordImageDecoderRandomCrop", "ofrecord_image_decoder_random_crop",
           "ofrecord_image_classification_reader", "decode_random", "image_resize", "Resize", "image_target_resize",
           "crop_mirror_normalize", "CropMirrorNormalize", "coin_flip", "CoinFlip", "tensor_buffer_to_tensor",
           "megatron_gpt_mmap_data_loader", "MegatronGPTMMapDataLoader", "image_decoder_random_crop_resize",
           "ImageDecoderRandomCropResize", "BlobConf", "ImageCodec", "ImagePreprocessor", "ImageResizePreprocessor",
           "NormByChannelPreprocessor", "RawCodec", "decode_ofrecord", "onerec_reader", "onerec_decoder",
           "OneRecDecoder"]


@contextlib.contextmanager
def _on_host():
    with _scope.placement("cpu", "0:0"):
        yield


def _fail(fn, msg):
    raise JobBuildError(f"flow.{fn}: {msg}" + format_location(user_frame()))


def _blob(fn, arg, x):
    return expect_blob(x, f"flow.{fn}", arg)


def _seed(seed, fn):
    return (-1, False) if seed is None else (expect_int(seed, f"flow.{fn}", "seed"), True)


# ------------------------------------------------------------------ readers

def ofrecord_reader(ofrecord_dir, batch_size=1, data_part_num=1, part_name_prefix="part-",
                    part_name_suffix_length=-1, random_shuffle=False, shuffle_buffer_size=1024,
                    shuffle_after_epoch=False, name=None, seed=None):
    """Read batches of ``OFRecord`` s from the shards ``<ofrecord_dir>/<part_name_prefix><i>``,
    ``i < data_part_num`` (``i`` zero-padded to ``part_name_suffix_length`` digits unless -1).

    Returns a ``flow.record`` blob of shape ``(batch_size,)``; decode its features with
    :func:`OFRecordRawDecoder`, :func:`OFRecordImageDecoder` … The data set repeats
    forever; ``random_shuffle`` draws records from a buffer of ``shuffle_buffer_size``,
    ``shuffle_after_epoch`` permutes the shards every epoch, ``seed`` (graphfront's
    addition; None: a fresh random seed) makes both reproducible.
    Raises JobBuildError when a shard is missing. OneFlow: ``OFRecordReader`` op.
    """
    seed_value, _ = _seed(seed, "data.ofrecord_reader")
    return build_op("OFRecordReader", attrs={
        "data_dir": str(ofrecord_dir), "data_part_num": data_part_num, "batch_size": batch_size,
        "part_name_prefix": part_name_prefix, "part_name_suffix_length": part_name_suffix_length,
        "random_shuffle": random_shuffle, "shuffle_buffer_size": shuffle_buffer_size,
        "shuffle_after_epoch": shuffle_after_epoch, "seed": seed_value},
        name=name or unique_str("OFRecord_Reader_"))


def ofrecord_loader(ofrecord_dir, batch_size=1, data_part_num=1, part_name_prefix="part-",
                    part_name_suffix_length=-1, shuffle=False, shuffle_buffer_size=1024, name=None):
    """Deprecated OneFlow spelling of :func:`ofrecord_reader` (``shuffle`` is ``random_shuffle``)."""
    return ofrecord_reader(ofrecord_dir, batch_size, data_part_num, part_name_prefix, part_name_suffix_length,
                           shuffle, shuffle_buffer_size, name=name)


def ofrecord_image_classification_reader(ofrecord_dir, image_feature_name, label_feature_name, batch_size=1,
                                         data_part_num=1, part_name_prefix="part-", part_name_suffix_length=-1,
                                         random_shuffle=False, shuffle_buffer_size=1024, shuffle_after_epoch=False,
                                         color_space="BGR", decode_buffer_size_per_thread=32,
                                         num_decode_threads_per_machine=None, name=None, seed=None):
    """Reader and image decoder in one op, decoding on the background thread.

    Returns ``(image, label)``: ``image`` a ``tensor_buffer`` blob of ``batch_size``
    (H, W, C) uint8 images in ``color_space``, ``label`` an int32 blob ``(batch_size,)``
    (the first value of ``label_feature_name``). OneFlow:
    ``ofrecord_image_classification_reader`` op, then ``tensor_buffer_to_tensor``."""
    seed_value, _ = _seed(seed, "data.ofrecord_image_classification_reader")
    image, label = build_op("ofrecord_image_classification_reader", outputs=("image", "label"), attrs={
        "data_dir": str(ofrecord_dir), "data_part_num": data_part_num, "batch_size": batch_size,
        "part_name_prefix": part_name_prefix, "part_name_suffix_length": part_name_suffix_length,
        "random_shuffle": random_shuffle, "shuffle_buffer_size": shuffle_buffer_size,
        "shuffle_after_epoch": shuffle_after_epoch, "seed": seed_value, "color_space": color_space,
        "image_feature_name": image_feature_name, "label_feature_name": label_feature_name,
        "decode_buffer_size_per_thread": decode_buffer_size_per_thread,
        "num_decode_threads_per_machine": num_decode_threads_per_machine or 0},
        name=name or unique_str("OFRecordImageClassificationReader_"))
    label = tensor_buffer_to_tensor(label, _dt.int32, (1,))
    return image, _reshape(label, (batch_size,))


def onerec_reader(files, batch_size=1, random_shuffle=False, shuffle_mode="instance", shuffle_buffer_size=1024,
                  shuffle_after_epoch=False, verify_example=True, name=None, seed=None) -> BlobDesc:
    """Read batches of OneRec records from the OneRec files ``files`` (OneFlow v0.6.0
    ``flow.data.onerec_reader``, op ``OneRecReader``; the file format of
    ``oneflow/user/data/onerec_dataset.h``, see :mod:`graphfront.ofrecord.onerec`).

    The files are read in order as one stream of frames, ``batch_size`` frames a step,
    starting again from the first file at the end of the last (epochs). On several devices
    the batch is split (device ``i`` of ``n`` reads its part of ``batch_size``, the first
    ``batch_size % n`` devices one more) and so are the files: OneFlow's
    ``BalancedSplitter(len(files), n)``, device ``i`` reads only the files of its range.
    Decode the records with :func:`onerec_decoder`. Needs the ``onerec`` extra
    (``pip install 'graphfront[onerec]'``: flatbuffers, xxhash).

    Args:
        files: list or tuple of paths of OneRec files.
        batch_size: records per step (all devices together).
        random_shuffle: shuffle the stream through a buffer, ``seed`` making it reproducible.
        shuffle_mode: ``"instance"``: records one at a time through a buffer of
            ``shuffle_buffer_size`` records, then batched; ``"batch"``: whole batches
            through a buffer of ``shuffle_buffer_size`` batches.
        shuffle_buffer_size: the shuffle buffer's size, in records or batches.
        shuffle_after_epoch: permute the order of the files before every epoch (all
            devices alike; the permutations are numpy draws from ``seed``'s stream, not
            OneFlow's ``std::mt19937`` ones).
        verify_example: check each record's FlatBuffers structure as it is read
            (:func:`graphfront.ofrecord.onerec.verify_example_buffer`: identifier ``1REC``,
            every offset inside the record, required names, known union types); the frame
            checks (magic, reserved field, both XXH64 digests) run always.
        seed: graphfront's addition (OneFlow's Python function has none; its op has the
            attr): seeds the shuffles; None draws one from torch's generator when the job
            is compiled (``flow.manual_seed`` repeats it).
        name: the op's name (default ``OneRecReader_<n>``).

    Returns:
        BlobDesc: a ``tensor_buffer`` blob of shape ``(batch_size,)``, one record (the
        frame's payload as a 1-D uint8 array) per element.

    Raises:
        ArgumentError: ``files`` is not a list or tuple.
        JobBuildError: a file does not exist, no file, a bad ``shuffle_mode`` or size,
            the ``onerec`` extra is missing, or more devices than files.
        OneRecFileError: at run time, a malformed frame or (``verify_example``) record,
            naming the file, the frame's byte offset and the problem.
    """
    if not isinstance(files, (list, tuple)):
        raise ArgumentError(f"flow.data.onerec_reader: argument 'files' expects a list or tuple of paths, received "
                            f"{type(files).__name__} {files!r}")
    seed_value, _ = _seed(seed, "data.onerec_reader")
    return build_op("OneRecReader", attrs={
        "files": [str(f) for f in files], "batch_size": batch_size, "random_shuffle": bool(random_shuffle),
        "shuffle_mode": shuffle_mode, "seed": seed_value, "shuffle_buffer_size": shuffle_buffer_size,
        "shuffle_after_epoch": bool(shuffle_after_epoch), "verify_example": bool(verify_example)},
        name=name or unique_str("OneRecReader_"))


# ------------------------------------------------------------------ decoders

def ofrecord_raw_decoder(input_blob, blob_name, shape, dtype, dim1_varying_length=False, truncate=False,
                         auto_zero_padding=False, name=None):
    """Decode feature ``blob_name`` of every record into a dense blob ``(N, *shape)`` of
    ``dtype``. Each record's feature must hold ``prod(shape)`` values (``truncate``: more
    are cut; ``dim1_varying_length``: fewer are zero-padded); a ``bytes_list`` feature is
    read as raw bytes for int8/uint8. Raises at run time naming the op and the feature
    when a record does not fit. OneFlow: ``ofrecord_raw_decoder`` op."""
    shape = expect_ints(shape, "flow.data.OFRecordRawDecoder", "shape", scalar=False)
    return build_op("ofrecord_raw_decoder", {"in": _blob("data.OFRecordRawDecoder", "input_blob", input_blob)},
                    {"name": blob_name, "shape": tuple(shape), "data_type": dtype,
                     "dim1_varying_length": bool(dim1_varying_length or auto_zero_padding), "truncate": truncate},
                    name=name or unique_str("OFRecordRawDecoder_"))


def ofrecord_bytes_decoder(input_blob, blob_name, name=None):
    """Feature ``blob_name`` (one bytes value per record) as a ``tensor_buffer`` of 1-D uint8
    arrays. OneFlow: ``ofrecord_bytes_decoder`` op."""
    return build_op("ofrecord_bytes_decoder", {"in": _blob("data.OFRecordBytesDecoder", "input_blob", input_blob)},
                    {"name": blob_name}, name=name or unique_str("OFRecordBytesDecoder_"))


def ofrecord_image_decoder(input_blob, blob_name, color_space="BGR", name=None):
    """Decode the encoded image (JPEG, PNG …) in feature ``blob_name`` of every record: a
    ``tensor_buffer`` of (H, W, C) uint8 images, C = 3 (``"BGR"``, ``"RGB"``) or 1
    (``"GRAY"``). OneFlow: ``ofrecord_image_decoder`` op."""
    return build_op("ofrecord_image_decoder", {"in": _blob("data.OFRecordImageDecoder", "input_blob", input_blob)},
                    {"name": blob_name, "color_space": color_space}, name=name or unique_str("OFRecordImageDecoder_"))


def ofrecord_image_decoder_random_crop(input_blob, blob_name, color_space="BGR", num_attempts=10, seed=None,
                                       random_area=(0.08, 1.0), random_aspect_ratio=(0.75, 1.333333),
                                       name="OFRecordImageDecoderRandomCrop"):
    """Decode as :func:`ofrecord_image_decoder`, keeping a random window of each image: its
    area a fraction of the image drawn from ``random_area``, its aspect ratio (w/h) from
    ``random_aspect_ratio``; after ``num_attempts`` windows that do not fit, the whole image.
    OneFlow: ``ofrecord_image_decoder_random_crop`` op."""
    seed_value, has_seed = _seed(seed, "data.ofrecord_image_decoder_random_crop")
    return build_op("ofrecord_image_decoder_random_crop",
                    {"in": _blob("data.OFRecordImageDecoderRandomCrop", "input_blob", input_blob)},
                    {"name": blob_name, "color_space": color_space, "num_attempts": num_attempts,
                     "seed": seed_value, "has_seed": has_seed, "random_area": list(random_area),
                     "random_aspect_ratio": list(random_aspect_ratio)},
                    name=unique_str(name + "_"))


def image_decoder_random_crop_resize(input_blob, target_width, target_height, num_attempts=None, seed=None,
                                     random_area=None, random_aspect_ratio=None, num_workers=None, warmup_size=None,
                                     max_num_pixels=None, name=None):
    """Decode, randomly crop and resize encoded images in one op (OneFlow v0.6.0
    ``image_decoder_random_crop_resize``, the ``image_decoder_random_crop_resize_conf`` system
    op; OneFlow decodes on the GPU with nvJPEG where it can, graphfront on the host).

    Args:
        input_blob: ``tensor_buffer`` blob of encoded images (JPEG, PNG …), as from
            :func:`OFRecordBytesDecoder`.
        target_width, target_height: the output size.
        num_attempts: tries for a crop window that fits (default 10), then the whole image.
        seed: makes the crops reproducible (None: fresh draws).
        random_area: ``[min, max]`` fraction of the image's area (default ``[0.08, 1.0]``).
        random_aspect_ratio: ``[min, max]`` window width/height (default ``[0.75, 1.333333]``).
        num_workers, warmup_size, max_num_pixels: decoder tuning, recorded in the op conf.

    Returns:
        BlobDesc: uint8 ``input_blob.shape + (target_height, target_width, 3)``, RGB.

    Raises:
        JobBuildError: ``input_blob`` not a tensor_buffer blob, a 2-list argument of another
            length, or a non-positive size.
    """
    fn = "data.ImageDecoderRandomCropResize"
    x = _blob(fn, "input_blob", input_blob)
    builder = _jb.current()
    conf, c = new_system_op("image_decoder_random_crop_resize_conf", name, "ImageDecoderRandomCropResize_")
    setattr(c, "in", x.lbn)
    c.out = "out"
    c.target_width, c.target_height = int(target_width), int(target_height)
    for field, value in (("num_attempts", num_attempts), ("seed", seed), ("num_workers", num_workers),
                         ("warmup_size", warmup_size), ("max_num_pixels", max_num_pixels)):
        if value is not None:
            setattr(c, field, int(value))
    for prefix, pair in (("random_area", random_area), ("random_aspect_ratio", random_aspect_ratio)):
        if pair is not None:
            if len(pair) != 2:
                _fail(fn, f"{prefix} must be [min, max], received {pair!r}")
            setattr(c, prefix + "_min", float(pair[0]))
            setattr(c, prefix + "_max", float(pair[1]))
    builder.add_op(conf)
    d = builder.desc(f"{conf.name}/out")
    return BlobDesc(f"{conf.name}/out", d.shape, d.dtype, builder.scope.parallel_conf, builder.job_name)


ImageDecoderRandomCropResize = image_decoder_random_crop_resize
def _shape_arg(fn, arg, value):
    if isinstance(value, bool) or not isinstance(value, (list, tuple)) or \
            not all(is_int(d) for d in value):
        raise ArgumentError(f"flow.{fn}: argument '{arg}' expects a list or tuple of ints, received {value!r}")
    return tuple(int(d) for d in value)


def onerec_decoder(input_blob, key, dtype, shape, is_dynamic=False, reshape=None, batch_padding=None,
                   name=None) -> BlobDesc:
    """The tensor of feature ``key`` of every record of ``input_blob`` as one dense blob
    (OneFlow v0.6.0 ``flow.data.onerec_decoder``, op ``onerec_decoder``, kernel
    ``oneflow/user/kernels/onerec_decoder_kernels.cpp``).

    Each record's feature holds a tensor: a shape (int32 dims) and a value list, which must
    be the list of ``dtype`` (int8: ``Int8List``, int32: ``Int32List``, int64:
    ``Int64List``, float32: ``Float32List``, float64: ``Float64List``). Its shape has the
    rank of ``shape``; with ``reshape`` (same rank, at most one -1, other dims > 0) the
    tensor is read in that shape instead, -1 taking what its element count leaves. Dims
    after the first must agree across the batch; dim 0 must too unless ``batch_padding``
    pads it: ``batch_padding[0]`` 0: equal dims 0, -1: each record padded to the batch's
    largest, ``k > 0``: each padded to ``k`` (at most ``k``); padding is zeros. A record's
    value count must be its shape's element count (with batch padding: at most the padded
    count, the rest zeros). Not dynamic, each record's (padded) shape must be ``shape``;
    ``is_dynamic``, at most ``shape`` in every dim, and the output takes the batch's shape.

    Args:
        input_blob: the ``tensor_buffer`` blob of :func:`onerec_reader`.
        key: the feature's name.
        dtype: int8, int32, int64, float32 or float64 (OneFlow reads no other).
        shape: list or tuple, the shape of one record's tensor (its maximum when dynamic).
        is_dynamic: the output is a dynamic blob of the records' own shape.
        reshape: list or tuple, the shape to read each record's values in.
        batch_padding: list or tuple of ``len(shape)`` dims: dim 0 as above, the others 0.
        name: the op's name (default ``OneRecDecoder_<n>``).

    Returns:
        BlobDesc: ``(batch,) + shape`` of ``dtype`` (dynamic with ``is_dynamic``: at run
        time ``(batch,)`` + the batch's instance shape).

    Raises:
        ArgumentError: ``input_blob`` is not a blob, or ``shape``, ``reshape`` or
            ``batch_padding`` is not a list or tuple of ints.
        JobBuildError: ``input_blob`` not a 1-D tensor_buffer, an unsupported ``dtype``, a
            bad ``reshape`` or ``batch_padding``, or the ``onerec`` extra missing.
        OpRunError: at run time, a record without the feature ``key``, of another list
            type, rank, shape or value count; the message names the op, the key, the
            record's index in the batch and what was expected and received.
    """
    fn = "data.onerec_decoder"
    x = _blob(fn, "input_blob", input_blob)
    shape = _shape_arg(fn, "shape", shape)
    has_reshape, has_batch_padding = reshape is not None, batch_padding is not None
    reshape = _shape_arg(fn, "reshape", reshape) if has_reshape else shape
    batch_padding = _shape_arg(fn, "batch_padding", batch_padding) if has_batch_padding else shape
    return build_op("onerec_decoder", {"in": x}, {
        "key": key, "data_type": dtype, "static_shape": shape, "is_dynamic": bool(is_dynamic),
        "has_reshape": has_reshape, "reshape": reshape, "has_batch_padding": has_batch_padding,
        "batch_padding": batch_padding}, name=name or unique_str("OneRecDecoder_"))


OneRecDecoder = onerec_decoder
OFRecordRawDecoder = ofrecord_raw_decoder
OFRecordBytesDecoder = ofrecord_bytes_decoder
OFRecordImageDecoder = ofrecord_image_decoder
OFRecordImageDecoderRandomCrop = ofrecord_image_decoder_random_crop


def decode_random(shape, dtype, batch_size=1, initializer=None, tick=None, name=None):
    """A blob ``(batch_size, *shape)`` of ``dtype`` drawn anew from ``initializer`` (default
    uniform in [0, 1)) on every run. OneFlow: the ``decode_random_conf`` system op. Unlike
    the readers it runs on the current placement (a job's GPU), drawing there.

    Raises ArgumentError for a ``shape`` that is not a list or tuple of ints >= 0, a
    ``batch_size`` that is not an int >= 1, a ``dtype`` or ``initializer`` of another type."""
    api = "flow.data.decode_random"
    shape = expect_ints(shape, api, "shape", scalar=False)
    batch_size = expect_int(batch_size, api, "batch_size")
    if batch_size < 1 or any(d < 0 for d in shape):
        raise ArgumentError(f"{api}: batch_size must be >= 1 and shape's dims >= 0, received batch_size={batch_size}"
                            f", shape={shape}")
    expect_dtype(dtype, api)
    if initializer is not None and not isinstance(initializer, InitializerConf):
        raise ArgumentError(f"{api}: argument 'initializer' expects an InitializerConf, received {initializer!r}")
    builder = _jb.current()
    conf, dr = new_system_op("decode_random_conf", name, "DecodeRandom_")
    dr.out = "out"
    dr.shape.dim.extend(shape)
    dr.data_type = dtype.proto
    dr.batch_size = batch_size
    dr.data_initializer.CopyFrom(initializer if initializer is not None else random_uniform_initializer())
    if tick is not None:
        dr.tick = _blob("data.decode_random", "tick", tick).lbn
        conf.ctrl_in_op_name.append(dr.tick.split("/")[0])
    builder.add_op(conf)
    lbn = f"{conf.name}/out"
    d = builder.desc(lbn)
    return BlobDesc(lbn, d.shape, d.dtype, builder.scope.parallel_conf, builder.job_name)


# ------------------------------------------------------------------ image preprocessing

_INTERP_TYPES = {"Linear": "bilinear", "NN": "nearest_neighbor", "Cubic": "bicubic", "Area": "area"}


def image_resize(image, target_size=None, min_size=None, max_size=None, keep_aspect_ratio=False,
                 resize_side="shorter", channels=3, dtype=None, interpolation_type="auto", name=None,
                 color_space=None, interp_type=None, resize_shorter=0, resize_x=0, resize_y=0):
    """Resize a ``tensor_buffer`` of (H, W, C) images (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/user_data_ops.py``, ``image_resize``).

    Two modes:

    * fixed size (``keep_aspect_ratio=False``): ``target_size`` is ``(width, height)`` (an
      int: square). Returns ``(image, scale, None)``: ``image`` a dense
      ``(N, height, width, channels)`` blob of ``dtype`` (default uint8), ``scale`` ``(N, 2)``
      float32 (width and height factors). Op ``image_resize_to_fixed``.
    * keeping the aspect ratio (``keep_aspect_ratio=True``): ``target_size`` is an int, the
      new length of the ``resize_side`` (``"shorter"`` or ``"longer"``) side of each image;
      ``max_size`` bounds the other side of a shorter-side resize, ``min_size`` that of a
      longer-side one (sizes: :func:`graphfront.ops.data_ops.keep_aspect_ratio_size`).
      Returns ``(image, scale, new_size)``: ``image`` a ``tensor_buffer`` of the resized
      uint8 images, ``scale`` ``(N, 2)`` float32 (width, height factors), ``new_size``
      ``(N, 2)`` int32 (new width, height). ``channels`` and ``dtype`` do not apply. Op
      ``image_resize_keep_aspect_ratio``, then ``tensor_buffer_to_tensor`` on scale and size.

    OneFlow's deprecated arguments return only the image: ``resize_x`` / ``resize_y`` (both
    > 0) set a fixed ``(resize_x, resize_y)``; ``resize_shorter > 0`` means
    ``keep_aspect_ratio=True, target_size=resize_shorter, resize_side="shorter"``;
    ``color_space`` sets ``channels`` (GRAY: 1) and ``interp_type`` (``"Linear"``, ``"NN"``,
    ``"Cubic"``, ``"Area"``) the interpolation.

    Raises:
        JobBuildError: ``target_size`` missing, not an int when keeping the aspect ratio or
            not ``(width, height)`` otherwise; ``resize_side`` not ``"shorter"``/``"longer"``;
            a bad ``color_space``, ``interp_type`` or op attr (``max_size`` below
            ``target_size`` …), naming the argument and your line.
    """
    fn = "image.Resize"
    deprecated = bool(color_space or interp_type or resize_shorter or resize_x or resize_y)
    if deprecated:
        if resize_x > 0 and resize_y > 0:  # else target_size stands, as in OneFlow
            target_size = (resize_x, resize_y)
            keep_aspect_ratio = False
        if resize_shorter > 0:
            target_size, keep_aspect_ratio, resize_side = resize_shorter, True, "shorter"
        if color_space is not None:
            if str(color_space).upper() not in ("RGB", "BGR", "GRAY"):
                _fail(fn, f"color_space must be 'RGB', 'BGR' or 'GRAY', received {color_space!r}")
            channels = 1 if str(color_space).upper() == "GRAY" else 3
        if interp_type is not None:
            if interp_type not in _INTERP_TYPES:
                _fail(fn, f"interp_type must be one of {sorted(_INTERP_TYPES)}, received {interp_type!r}")
            interpolation_type = _INTERP_TYPES[interp_type]
    if target_size is None:
        _fail(fn, "target_size is required: an int with keep_aspect_ratio=True, else (width, height)")
    name = name or unique_str("ImageResize_")
    if keep_aspect_ratio:
        if not is_int(target_size):
            _fail(fn, f"target_size must be an int when keep_aspect_ratio is True, received {target_size!r}")
        if resize_side not in ("shorter", "longer"):
            _fail(fn, f"resize_side must be 'shorter' or 'longer', received {resize_side!r}")
        out, size, scale = build_op("image_resize_keep_aspect_ratio", {"in": _blob(fn, "image", image)}, {
            "target_size": target_size, "min_size": min_size or 0, "max_size": max_size or 0,
            "resize_longer": resize_side == "longer", "interpolation_type": interpolation_type},
            outputs=("out", "size", "scale"), name=name)
        scale = tensor_buffer_to_tensor(scale, _dt.float32, (2,))
        new_size = tensor_buffer_to_tensor(size, _dt.int32, (2,))
        return out if deprecated else (out, scale, new_size)
    if is_int(target_size):
        target_size = (target_size, target_size)
    if len(target_size) != 2:
        _fail(fn, f"target_size must be (width, height), received {target_size!r}")
    out, scale = build_op("image_resize_to_fixed", {"in": _blob(fn, "image", image)}, {
        "target_width": int(target_size[0]), "target_height": int(target_size[1]), "channels": channels,
        "data_type": dtype or _dt.uint8, "interpolation_type": interpolation_type},
        outputs=("out", "scale"), name=name)
    return out if deprecated else (out, scale, None)


Resize = image_resize


def image_target_resize(images, target_size, min_size=None, max_size=None, resize_side="shorter",
                        interpolation_type="auto", name=None):
    """Resize keeping the aspect ratio (OneFlow v0.6.0 ``image_target_resize``):
    :func:`image_resize` with ``keep_aspect_ratio=True``, returning
    ``(image, new_size, scale)`` in that order (``new_size`` ``(N, 2)`` int32 width, height;
    ``scale`` ``(N, 2)`` float32). Default op name ``ImageTargetResize_<n>``."""
    out, scale, new_size = image_resize(images, target_size=target_size, min_size=min_size, max_size=max_size,
                                        keep_aspect_ratio=True, resize_side=resize_side,
                                        interpolation_type=interpolation_type,
                                        name=name or unique_str("ImageTargetResize_"))
    return out, new_size, scale


def crop_mirror_normalize(input_blob, mirror_blob=None, color_space="BGR", output_layout="NCHW", crop_h=0, crop_w=0,
                          crop_pos_y=0.5, crop_pos_x=0.5, mean=(0.0,), std=(1.0,), output_dtype=_dt.float32,
                          name=None):
    """Crop each image to ``(crop_h, crop_w)`` (0: whole dimension) starting at
    ``floor((H - crop_h) * crop_pos_y)``, ``floor((W - crop_w) * crop_pos_x)``, mirror it
    left-right where ``mirror_blob`` (int8 ``(N,)``, :func:`CoinFlip`) is 1, normalize to
    ``(x - mean) / std`` per channel and lay out as ``output_layout`` (NCHW or NHWC) in
    ``output_dtype``. ``input_blob``: dense ``(N, H, W, C)`` uint8 or a ``tensor_buffer``
    of images (crop size then required). OneFlow: ``crop_mirror_normalize_from_uint8`` /
    ``crop_mirror_normalize_from_tensorbuffer`` ops."""
    fn = "image.CropMirrorNormalize"
    x = _blob(fn, "input_blob", input_blob)
    op_type = "crop_mirror_normalize_from_tensorbuffer" if x.dtype is _dt.tensor_buffer else \
        "crop_mirror_normalize_from_uint8"
    inputs = {"in": x, "mirror": None if mirror_blob is None else _blob(fn, "mirror_blob", mirror_blob)}
    return build_op(op_type, inputs, {
        "color_space": color_space, "output_layout": output_layout, "mean": [float(m) for m in mean],
        "std": [float(s) for s in std], "crop_h": crop_h, "crop_w": crop_w, "crop_pos_x": float(crop_pos_x),
        "crop_pos_y": float(crop_pos_y), "output_dtype": output_dtype},
        name=name or unique_str("CropMirrorNormalize_"))


CropMirrorNormalize = crop_mirror_normalize


def coin_flip(batch_size=1, seed=None, probability=0.5, name="CoinFlip"):
    """An int8 blob ``(batch_size,)`` of independent draws, 1 with ``probability``, new on
    every run (``seed``: reproducible draws). OneFlow: ``coin_flip`` op."""
    seed_value, has_seed = _seed(seed, "random.coin_flip")
    return build_op("coin_flip", attrs={"probability": float(probability), "batch_size": batch_size,
                                        "seed": seed_value, "has_seed": has_seed},
                    name=unique_str(name + "_"))


CoinFlip = coin_flip


# ------------------------------------------------------------------ legacy decode_ofrecord

class ImagePreprocessor:
    """Legacy image preprocessing step of an :class:`ImageCodec`: ``"bgr2rgb"`` (decode
    to RGB instead of BGR) or ``"mirror"`` (mirror each image left-right with probability
    1/2). The name is matched case-insensitively.

    Raises:
        TypeError: ``preprocessor`` is not a str.
        ValueError: it is neither ``"bgr2rgb"`` nor ``"mirror"``.
    """

    def __init__(self, preprocessor):
        if not isinstance(preprocessor, str):
            raise TypeError(f"flow.data.ImagePreprocessor: preprocessor must be a str, received "
                            f"{type(preprocessor).__name__}")
        if preprocessor.lower() not in ("bgr2rgb", "mirror"):
            raise ValueError(f'flow.data.ImagePreprocessor: preprocessor must be "bgr2rgb" or "mirror", received '
                             f'{preprocessor!r}')
        self.preprocessor = preprocessor

    def is_rgb(self) -> bool:
        return self.preprocessor.lower() == "bgr2rgb"

    def is_mirror(self) -> bool:
        return self.preprocessor.lower() == "mirror"


class ImageResizePreprocessor:
    """Legacy resize step of an :class:`ImageCodec`: every image to ``width`` x ``height``.

    Raises:
        TypeError: ``width`` or ``height`` is not an int.
    """

    def __init__(self, width, height):
        for arg, value in (("width", width), ("height", height)):
            if not is_int(value):
                raise TypeError(f"flow.data.ImageResizePreprocessor: {arg} must be an int, received {value!r}")
        self.width = int(width)
        self.height = int(height)


class ImageCodec:
    """Legacy codec of a :class:`BlobConf` holding encoded images (JPEG, PNG ...).

    Args:
        image_preprocessors: a list / tuple of :class:`ImagePreprocessor` and
            :class:`ImageResizePreprocessor` (anything else: none).
    """

    def __init__(self, image_preprocessors=None):
        self.image_preprocessors = list(image_preprocessors) if isinstance(image_preprocessors, (list, tuple)) \
            else []

    def color_space(self) -> str:
        """``"RGB"`` when a ``"bgr2rgb"`` preprocessor is given, else ``"BGR"``."""
        rgb = any(isinstance(p, ImagePreprocessor) and p.is_rgb() for p in self.image_preprocessors)
        return "RGB" if rgb else "BGR"

    def do_mirror(self) -> bool:
        return any(isinstance(p, ImagePreprocessor) and p.is_mirror() for p in self.image_preprocessors)

    def do_resize(self):
        """``(True, width, height)`` of the first :class:`ImageResizePreprocessor`, else
        ``(False, -1, -1)``."""
        for p in self.image_preprocessors:
            if isinstance(p, ImageResizePreprocessor):
                return True, p.width, p.height
        return False, -1, -1


class RawCodec:
    """Legacy codec of a :class:`BlobConf` holding numbers (or raw bytes for int8/uint8).

    Args:
        truncate: a record with more values than the blob's shape holds is cut instead
            of being an error.
        auto_zero_padding: deprecated spelling of ``truncate`` (a DeprecationWarning).
    """

    def __init__(self, truncate=False, auto_zero_padding=False):
        if auto_zero_padding:
            warnings.warn("flow.data.RawCodec: auto_zero_padding has been deprecated, please use truncate instead",
                          DeprecationWarning, stacklevel=2)
        self.truncate = bool(truncate or auto_zero_padding)


class NormByChannelPreprocessor:
    """Legacy normalization of an image :class:`BlobConf`: ``(x - mean) / std`` per channel,
    laid out NHWC (``data_format="channels_last"``) or NCHW (anything else).

    Raises:
        TypeError: ``mean_values`` or ``std_values`` is not a list / tuple, or
            ``data_format`` is not a str.
    """

    def __init__(self, mean_values, std_values=(1.0, 1.0, 1.0), data_format="channels_last"):
        for arg, value in (("mean_values", mean_values), ("std_values", std_values)):
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"flow.data.NormByChannelPreprocessor: {arg} must be a list or tuple, received "
                                f"{type(value).__name__}")
        if not isinstance(data_format, str):
            raise TypeError(f"flow.data.NormByChannelPreprocessor: data_format must be a str, received "
                            f"{type(data_format).__name__}")
        self.mean_values = mean_values
        self.std_values = std_values
        self.data_format = data_format

    def output_layout(self) -> str:
        return "NHWC" if self.data_format == "channels_last" else "NCHW"


class BlobConf:
    """One feature to decode with :func:`decode_ofrecord` (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/data_ops.py``).

    Args:
        name: the feature's key in each OFRecord.
        shape: list / tuple, the shape of one record's value (without the batch axis).
        dtype: the blob's data type.
        codec: :class:`RawCodec` (numbers: :func:`ofrecord_raw_decoder` gives
            ``(batch, *shape)`` of ``dtype``) or :class:`ImageCodec` (encoded images:
            decoded, resized to the :class:`ImageResizePreprocessor`'s size or else to
            ``(shape[0], shape[1])`` as width and height, giving uint8
            ``(batch, height, width, 3)``; then each preprocessor in turn).
        preprocessors: list / tuple of :class:`NormByChannelPreprocessor`, applied to an
            image blob by :func:`crop_mirror_normalize` (``dtype`` out, mirrored where an
            ``ImagePreprocessor("mirror")`` coin flip says so).

    Raises:
        TypeError: ``name`` is not a str or ``shape`` not a list / tuple.
    """

    def __init__(self, name, shape, dtype, codec, preprocessors=None):
        if not isinstance(name, str):
            raise TypeError(f"flow.data.BlobConf: name must be a str, received {type(name).__name__}")
        if not isinstance(shape, (list, tuple)):
            raise TypeError(f"flow.data.BlobConf({name!r}): shape must be a list or tuple, received "
                            f"{type(shape).__name__}")
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.codec = codec
        self.preprocessors = list(preprocessors) if isinstance(preprocessors, (list, tuple)) else []

    def decode_blob(self, input_blob, batch_size):
        """The decoded blob of this feature from the OFRecord blob ``input_blob``.

        Raises:
            JobBuildError: the codec is neither a RawCodec nor an ImageCodec, or an
                ImageCodec without a resize preprocessor has a ``shape`` of fewer than 2
                dimensions.
        """
        if isinstance(self.codec, ImageCodec):
            color_space = self.codec.color_space()
            image = ofrecord_image_decoder(input_blob, self.name, color_space=color_space)
            coin = coin_flip(batch_size) if self.codec.do_mirror() else None
            do_resize, width, height = self.codec.do_resize()
            if not do_resize:
                if len(self.shape) < 2:
                    _fail("data.BlobConf", f"feature {self.name!r}: an ImageCodec without an "
                          f"ImageResizePreprocessor takes the image size from shape, which needs 2 dimensions "
                          f"(width, height), received shape {tuple(self.shape)}")
                width, height = self.shape[0], self.shape[1]
            image, _, _ = image_resize(image, target_size=(width, height))
            for p in self.preprocessors:
                image = crop_mirror_normalize(image, mirror_blob=coin, color_space=color_space,
                                              output_layout=p.output_layout(), mean=p.mean_values, std=p.std_values,
                                              output_dtype=self.dtype)
            return image
        if isinstance(self.codec, RawCodec):
            return ofrecord_raw_decoder(input_blob, self.name, shape=self.shape, dtype=self.dtype,
                                        truncate=self.codec.truncate)
        _fail("data.BlobConf", f"feature {self.name!r}: codec must be a flow.data.RawCodec or flow.data.ImageCodec, "
              f"received {type(self.codec).__name__}")


def decode_ofrecord(ofrecord_dir, blobs, batch_size=1, data_part_num=1, part_name_prefix="part-",
                    part_name_suffix_length=-1, shuffle=False, buffer_size=1024, name=None):
    """Deprecated OneFlow reader: :func:`ofrecord_reader` of ``ofrecord_dir`` (``shuffle``
    is ``random_shuffle``, ``buffer_size`` the shuffle buffer) and one decoded blob per
    :class:`BlobConf` of ``blobs`` (see :meth:`BlobConf.decode_blob`), returned as a tuple
    in the order of ``blobs``. Lazy mode only; a DeprecationWarning, as OneFlow prints one
    (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/data_ops.py``).

    Raises:
        JobBuildError: eager execution is enabled, or an entry of ``blobs`` is not a
            :class:`BlobConf`.
    """
    warnings.warn("flow.data.decode_ofrecord is deprecated and does not work in eager mode; use "
                  "flow.data.ofrecord_reader with flow.data.OFRecordImageDecoder / OFRecordRawDecoder",
                  DeprecationWarning, stacklevel=2)
    if _session.default_session().eager:
        _fail("data.decode_ofrecord", "does not work in eager execution (as OneFlow's); use flow.data.ofrecord_reader "
              "and the OFRecord decoders")
    blobs = list(blobs)
    for i, conf in enumerate(blobs):
        if not isinstance(conf, BlobConf):
            _fail("data.decode_ofrecord", f"blobs[{i}] must be a flow.data.BlobConf, received {type(conf).__name__}")
    ofrecord = ofrecord_reader(ofrecord_dir, batch_size=batch_size, data_part_num=data_part_num,
                               part_name_prefix=part_name_prefix, part_name_suffix_length=part_name_suffix_length,
                               random_shuffle=shuffle, shuffle_buffer_size=buffer_size, name=name)
    return tuple(conf.decode_blob(ofrecord, batch_size) for conf in blobs)


# ------------------------------------------------------------------ Megatron GPT data loader

@renamed_keywords(PARALLEL_DISTRIBUTION)
def megatron_gpt_mmap_data_loader(data_file_prefix, seq_length, num_samples, batch_size, dtype=_dt.int64,
                                  shuffle=True, random_seed=None, split_sizes=None, split_index=None, nd_sbp=None,
                                  start_from_saved_progress=False, name=None) -> BlobDesc:
    """Batches of GPT training samples from a Megatron-LM indexed data set
    (``<data_file_prefix>.idx`` / ``.bin``; format and sample order:
    :mod:`graphfront.framework.megatron_dataset`).

    Each LazyRun returns the next ``batch_size`` samples, ``(batch_size, seq_length + 1)`` in
    ``dtype`` (int64 or int32): sample ``i`` of the data set is ``seq_length + 1`` tokens from
    token ``i * seq_length`` of the (split's, repeated) document stream. ``split_sizes`` /
    ``split_index`` pick a split of the documents (default: all of them); ``shuffle``
    permutes documents and samples with ``random_seed`` (None: drawn from torch's generator,
    so ``flow.manual_seed`` fixes it). With ``start_from_saved_progress`` the batch counter is
    a variable (``<name>-iteration``, int64 ``(1,)``) saved and restored with the checkpoint;
    otherwise it lives in the compiled job. ``nd_sbp`` is recorded (OneFlow v0.5's keyword
    ``parallel_distribution`` is accepted for it). OneFlow: op
    ``megatron_gpt_mmap_data_loader``, on the host.

    Raises:
        JobBuildError: a file is missing or malformed (the message names the file and what
            was expected), a bad argument, or a split without tokens.
        RuntimeError: at run time, when a batch would read past the data set's samples.
    """
    fn = "data.megatron_gpt_mmap_data_loader"
    if not isinstance(data_file_prefix, (str, bytes)) and not hasattr(data_file_prefix, "__fspath__"):
        _fail(fn, f"argument 'data_file_prefix' expects a path, received {data_file_prefix!r}")
    if split_sizes is None:
        split_sizes, split_index = [1], 0
    if random_seed is None:
        import torch
        random_seed = int(torch.randint(0, 2 ** 31 - 1, (1,)))
    if name is None:
        name = "gpt_data_loader" if start_from_saved_progress else unique_str("gpt_data_loader_")
    nd_sbp = [nd_sbp] if isinstance(nd_sbp, str) else list(nd_sbp or [])
    inputs = {}
    with _on_host():
        if start_from_saved_progress:
            from graphfront.variables import get_variable
            inputs["iteration"] = get_variable(f"{name}-iteration", shape=(1,), dtype=_dt.int64,
                                               initializer=constant_initializer(0, dtype=_dt.int64),
                                               trainable=False, reuse=False)
        return build_op("megatron_gpt_mmap_data_loader", inputs, attrs={
            "data_file_prefix": str(data_file_prefix), "seq_length": seq_length, "label_length": 1,
            "num_samples": num_samples, "batch_size": batch_size, "dtype": dtype,
            "split_sizes": list(split_sizes), "split_index": 0 if split_index is None else split_index,
            "shuffle": bool(shuffle), "random_seed": random_seed, "nd_sbp": nd_sbp}, name=name)


MegatronGPTMMapDataLoader = megatron_gpt_mmap_data_loader
