"""``flow.image``: image preprocessing ops of OneFlow's data pipeline (see
:mod:`graphfront.data_pipeline`), and OneFlow's preprocessing of ``tensor_buffer`` images
and their boxes and segmentation polygons: ``flow.image_flip``, ``flow.image_normalize``,
``flow.image_decode``, ``flow.image_batch_align``, ``flow.image_random_crop`` and
``flow.object_bbox_flip`` / ``object_bbox_scale`` / ``object_segmentation_polygon_flip`` /
``object_segmentation_polygon_scale`` / ``object_segmentation_polygon_to_mask`` (OneFlow
v0.6.0 ``python/oneflow/compatible/single_client/ops/user_data_ops.py``; the ops are in
:mod:`graphfront.ops.image_ops`).

All of them run on the host (CPU-only ops, as in OneFlow). A ``tensor_buffer`` input is a
1-D blob of one variable-size array per batch element (``flow.image_decode``'s output,
``flow.tensor_to_tensor_buffer``'s ...). Flip codes are OneFlow's: 0 none, 1 (``0x01``)
left-right, 16 (``0x10``) upside down, 17 (``0x11``) both; ``flow.random.CoinFlip`` gives
0/1 codes. Every function raises ArgumentError for an argument of the wrong kind (naming
the function and the argument) and JobBuildError, at your line, for blobs or attrs the op
refuses; bad run-time data (an image of another channel count ...) raises OpRunError
naming the op.
"""
from graphfront import random as _random
from graphfront import toplevel as _toplevel
from graphfront.data_pipeline import CropMirrorNormalize, Resize, crop_mirror_normalize, image_resize, image_target_resize
from graphfront.framework import dtypes as _dt
from graphfront.framework.blob_desc import expect_blob, expect_dtype, expect_int, expect_ints, expect_number
from graphfront.framework.errors import ArgumentError
from graphfront.ops import image_ops as _image_ops  # noqa: F401 - registers the op types
from graphfront.ops.builder import build_op, unique_str

__all__ = ["CropMirrorNormalize", "Resize", "crop_mirror_normalize", "resize", "target_resize", "random_crop",
           "batch_align", "decode", "flip", "normalize", "image_flip", "image_normalize", "image_decode",
           "image_batch_align", "image_random_crop", "object_bbox_flip", "object_bbox_scale",
           "object_segmentation_polygon_flip", "object_segmentation_polygon_scale",
           "object_segmentation_polygon_to_mask"]

def _blob(fn, arg, x):
    return expect_blob(x, f"flow.{fn}", arg)


def _name(fn, name, prefix):
    if name is None:
        return unique_str(prefix)
    if not isinstance(name, str):
        raise ArgumentError(f"flow.{fn}: argument 'name' expects a str or None, received {type(name).__name__} "
                            f"{name!r}")
    return name


def _floats(fn, arg, values):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ArgumentError(f"flow.{fn}: argument '{arg}' expects a sequence of numbers (one per channel), "
                            f"received {type(values).__name__} {values!r}")
    return [expect_number(v, f"flow.{fn}", arg) for v in values]


def _float_pair(fn, arg, values):
    pair = _floats(fn, arg, values)
    if len(pair) != 2:
        raise ArgumentError(f"flow.{fn}: argument '{arg}' expects [min, max], received {values!r}")
    return pair


def image_flip(image, flip_code, name=None):
    """Mirror each image of a ``tensor_buffer`` blob by its flip code.

    Args:
        image: 1-D ``tensor_buffer`` blob ``(N,)`` of ``(H, W, C)`` images (any dtype).
        flip_code: int8 blob of ``N`` codes: 0 keeps the image, 1 (``0x01``) mirrors it
            left-right, 16 (``0x10``) upside down, 17 (``0x11``) both.
        name: op name (default ``ImageFlip_<n>``).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of the flipped images (same shapes and dtypes).

    Raises:
        ArgumentError: ``image`` or ``flip_code`` not a blob, ``name`` not a str.
        JobBuildError: ``image`` not a 1-D tensor_buffer, ``flip_code`` not int8 of N elements.
        OpRunError (run time): an image not of rank 3, a flip code other than 0, 1, 16, 17.

    OneFlow v0.6.0: op ``image_flip`` (``oneflow/user/ops/image_object_preprocess_ops.cpp``,
    kernel ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``); wrapper in
    ``python/oneflow/compatible/single_client/ops/user_data_ops.py``.
    """
    fn = "image_flip"
    return build_op("image_flip", {"in": _blob(fn, "image", image), "flip_code": _blob(fn, "flip_code", flip_code)},
                    name=_name(fn, name, "ImageFlip_"))


def image_normalize(image, std, mean, name=None):
    """``(x - mean[c]) / std[c]`` for every channel ``c`` of each image.

    Args:
        image: 1-D ``tensor_buffer`` blob ``(N,)`` of float32 or float64 ``(H, W, C)`` images
            (decode with ``flow.image_decode(..., dtype=flow.float32)``).
        std: a sequence of ``C`` numbers (a float32 attr; none of them 0).
        mean: a sequence of ``C`` numbers (a float32 attr).
        name: op name (default ``ImageNormalize_<n>``).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of the normalized images (the images' dtype).

    Raises:
        ArgumentError: ``image`` not a blob, ``std`` / ``mean`` not sequences of numbers.
        JobBuildError: ``image`` not a 1-D tensor_buffer; ``std`` and ``mean`` of other
            lengths or empty, a 0 in ``std``.
        OpRunError (run time): an image that is not float32/float64 or has another channel
            count than ``std``.

    OneFlow v0.6.0: op ``image_normalize`` (``oneflow/user/ops/image_object_preprocess_ops.cpp``,
    kernel ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``).
    """
    fn = "image_normalize"
    x = _blob(fn, "image", image)
    return build_op("image_normalize", {"in": x}, {"std": _floats(fn, "std", std), "mean": _floats(fn, "mean", mean)},
                    name=_name(fn, name, "ImageNormalize_"))


def image_decode(images_bytes_buffer, dtype=_dt.uint8, color_space="BGR", name=None):
    """Decode encoded images (JPEG, PNG …) held as bytes in a ``tensor_buffer`` blob.

    Args:
        images_bytes_buffer: 1-D ``tensor_buffer`` blob ``(N,)``, N >= 1, of int8 or uint8
            arrays of encoded bytes (``flow.data.OFRecordBytesDecoder``'s output).
        dtype: ``flow.uint8`` (default) or ``flow.float32`` (values 0 .. 255).
        color_space: ``"BGR"`` (OneFlow's default, OpenCV's order), ``"RGB"`` or ``"GRAY"``.
        name: op name (default ``ImageDecode_<n>``).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of ``(H, W, 3)`` images (``(H, W, 1)`` for GRAY).

    Raises:
        ArgumentError: ``images_bytes_buffer`` not a blob, ``dtype`` not a dtype.
        JobBuildError: not a 1-D tensor_buffer of at least one element, a ``color_space``
            or ``dtype`` the op does not take.
        OpRunError (run time): bytes that are not an image, a buffer that is not int8/uint8.

    Decoding uses Pillow (graphfront's image decoder: PNG exact; a JPEG may differ from
    OpenCV's by a unit in a few pixels, GRAY from a colour image likewise). OneFlow v0.6.0:
    op ``image_decode`` (``oneflow/user/ops/image_decode_op.cpp``, kernel
    ``oneflow/user/kernels/image_decode_kernel.cpp``).
    """
    fn = "image_decode"
    x = _blob(fn, "images_bytes_buffer", images_bytes_buffer)
    return build_op("image_decode", {"in": x}, {"color_space": color_space, "data_type": expect_dtype(
        dtype, f"flow.{fn}", "dtype")}, name=_name(fn, name, "ImageDecode_"))


def image_batch_align(images, shape, dtype, alignment, dynamic_out=True, name=None):
    """Pad a batch of ``tensor_buffer`` images into one dense ``(N, H, W, C)`` blob.

    Each image lies at the top-left of its slot, zeros elsewhere, cast to ``dtype`` (C++
    ``static_cast``). With ``dynamic_out`` (default) the blob is dynamic: at run time H and W
    are the batch's largest height and width rounded up to a multiple of ``alignment``
    (``(x + alignment - 1) // alignment * alignment``; 0: not rounded); without it they are
    ``shape``'s.

    Args:
        images: 1-D ``tensor_buffer`` blob ``(N,)`` of uint8 or float32 ``(h, w, C)`` images.
        shape: ``(H, W, C)``, the largest (aligned) batch the blob holds.
        dtype: ``flow.uint8`` or ``flow.float32``.
        alignment: 0 or a power of 2.
        dynamic_out: bool.
        name: op name (default ``ImageBatchAlign_<n>``).

    Returns:
        BlobDesc: ``dtype`` ``(N,) + shape``, dynamic when ``dynamic_out``.

    Raises:
        ArgumentError: ``images`` not a blob, ``shape`` not ints, ``dtype`` not a dtype,
            ``alignment`` not an int, ``dynamic_out`` not a bool.
        JobBuildError: ``images`` not a 1-D tensor_buffer; ``shape`` not 3 positive dims,
            ``dtype`` not uint8/float32, ``alignment`` not 0 or a power of 2.
        OpRunError (run time): an image of another rank, channel count or dtype, or one
            whose aligned size exceeds ``shape``.

    OneFlow v0.6.0: op ``image_batch_align`` (``oneflow/user/ops/image_batch_align_op.cpp``,
    kernel ``oneflow/user/kernels/image_batch_align_kernel.cpp``).
    """
    fn = "image_batch_align"
    x = _blob(fn, "images", images)
    if not isinstance(dynamic_out, bool):
        raise ArgumentError(f"flow.{fn}: argument 'dynamic_out' expects a bool, received {dynamic_out!r}")
    return build_op("image_batch_align", {"in": x}, {
        "shape": expect_ints(shape, f"flow.{fn}", "shape", scalar=False),
        "data_type": expect_dtype(dtype, f"flow.{fn}", "dtype"),
        "alignment": expect_int(alignment, f"flow.{fn}", "alignment"), "dynamic_out": dynamic_out},
        name=_name(fn, name, "ImageBatchAlign_"))


def image_random_crop(input_blob, num_attempts=10, seed=None, random_area=None, random_aspect_ratio=None,
                      name="ImageRandomCrop"):
    """Keep a random window of each image of a ``tensor_buffer`` blob.

    The window's area is a fraction of the image's drawn uniformly from ``random_area``
    (default ``[0.08, 1.0]``), its width/height ratio log-uniformly from
    ``random_aspect_ratio`` (default ``[0.75, 1.333333]``), its place uniformly; after
    ``num_attempts`` windows that do not fit, the whole image
    (:func:`graphfront.ofrecord.images.random_crop_window`). New windows every run; a
    ``seed`` makes the sequence reproducible (the windows ``OFRecordImageDecoderRandomCrop``
    draws with that seed). Without one, the seed follows OneFlow's ``flow.random.gen_seed``.

    Args:
        input_blob: ``tensor_buffer`` blob of ``(H, W, C)`` images (any shape of buffers).
        num_attempts: tries per image, >= 1.
        seed: int or None.
        random_area: the crop's area as a fraction of the image's, a ``[min, max]`` pair, or
            None (the default range).
        random_aspect_ratio: the crop's width / height, a ``[min, max]`` pair, or None (the
            default range).
        name: the op's name on its first use in a job (as OneFlow's module op); later calls
            name theirs ``ImageRandomCrop_<n>``.

    Returns:
        BlobDesc: ``tensor_buffer`` of ``input_blob``'s shape, the cropped images.

    Raises:
        ArgumentError: ``input_blob`` not a blob, ``num_attempts`` / ``seed`` not ints, a
            range not a pair of numbers, ``name`` not a str.
        JobBuildError: ``input_blob`` not a tensor_buffer, ``random_area`` not within
            ``0 < min <= max <= 1``, ``random_aspect_ratio`` not ``0 < min <= max``,
            ``num_attempts < 1``.
        OpRunError (run time): an image not of rank 3.

    OneFlow v0.6.0: op ``image_random_crop`` (``oneflow/user/ops/image_preprocess_ops.cpp``,
    kernel ``oneflow/user/kernels/image_preprocess_kernels.cpp``).
    """
    fn = "image_random_crop"
    x = _blob(fn, "input_blob", input_blob)
    if not isinstance(name, str):
        raise ArgumentError(f"flow.{fn}: argument 'name' expects a str, received {type(name).__name__} {name!r}")
    attempts = expect_int(num_attempts, f"flow.{fn}", "num_attempts")
    area = _float_pair(fn, "random_area", [0.08, 1.0] if random_area is None else random_area)
    ratio = _float_pair(fn, "random_aspect_ratio", [0.75, 1.333333] if random_aspect_ratio is None
                        else random_aspect_ratio)
    if seed is not None:
        expect_int(seed, f"flow.{fn}", "seed")
    seed_value, has_seed = _random.gen_seed(seed)
    calls = _toplevel.find_or_create_module(name, lambda: [0], reuse=True)
    op_name = name if calls[0] == 0 else unique_str("ImageRandomCrop_")
    calls[0] += 1
    return build_op("image_random_crop", {"in": x}, {
        "num_attempts": attempts, "seed": seed_value, "has_seed": has_seed, "random_area": area,
        "random_aspect_ratio": ratio}, name=op_name)


def object_bbox_flip(bbox, image_size, flip_code, name=None):
    """Flip each image's boxes as :func:`image_flip` flips the image.

    Box ``(xmin, ymin, xmax, ymax)`` becomes ``(W - xmax - 1, ymin, W - xmin - 1, ymax)``
    for code bit ``0x01`` and likewise in y (``H - ymax - 1``, ``H - ymin - 1``) for bit
    ``0x10``, in the boxes' dtype.

    Args:
        bbox: 1-D ``tensor_buffer`` blob ``(N,)`` of float32/float64 ``(n, 4)`` boxes.
        image_size: int32 blob of ``N`` ``(width, height)`` pairs (``2 N`` elements).
        flip_code: int8 blob of ``N`` codes (0, 1, 16, 17).
        name: op name (default ``ObjectBboxFlip_<n>``).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of the flipped boxes.

    Raises:
        ArgumentError: an input not a blob, ``name`` not a str.
        JobBuildError: ``bbox`` not a 1-D tensor_buffer, ``image_size`` / ``flip_code`` of
            another dtype or size.
        OpRunError (run time): boxes not ``(n, 4)`` float32/float64, a flip code OneFlow
            does not define.

    OneFlow v0.6.0: op ``object_bbox_flip`` (``oneflow/user/ops/image_object_preprocess_ops.cpp``,
    kernel ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``).
    """
    fn = "object_bbox_flip"
    return build_op("object_bbox_flip", {"bbox": _blob(fn, "bbox", bbox),
                                         "image_size": _blob(fn, "image_size", image_size),
                                         "flip_code": _blob(fn, "flip_code", flip_code)},
                    name=_name(fn, name, "ObjectBboxFlip_"))


def object_bbox_scale(bbox, scale, name=None):
    """Scale each image's boxes: x by ``scale_w``, y by ``scale_h``, in the boxes' dtype.

    Args:
        bbox: 1-D ``tensor_buffer`` blob ``(N,)`` of float32/float64 ``(n, 4)`` boxes.
        scale: float32 blob of ``N`` ``(scale_w, scale_h)`` pairs (``flow.image.Resize``'s
            ``scale``).
        name: op name (default ``ObjectBboxScale_<n>``).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of the scaled boxes.

    Raises:
        ArgumentError: an input not a blob, ``name`` not a str.
        JobBuildError: ``bbox`` not a 1-D tensor_buffer, ``scale`` not float32 of ``2 N``.
        OpRunError (run time): boxes not ``(n, 4)`` float32/float64.

    OneFlow v0.6.0: op ``object_bbox_scale`` (``oneflow/user/ops/image_object_preprocess_ops.cpp``,
    kernel ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``).
    """
    fn = "object_bbox_scale"
    return build_op("object_bbox_scale", {"bbox": _blob(fn, "bbox", bbox), "scale": _blob(fn, "scale", scale)},
                    name=_name(fn, name, "ObjectBboxScale_"))


def object_segmentation_polygon_flip(poly, image_size, flip_code, name=None):
    """Flip each image's polygon points: ``x' = W - x`` for code bit ``0x01``,
    ``y' = H - y`` for bit ``0x10`` (OneFlow's rule: no ``- 1``, unlike boxes).

    Args:
        poly: 1-D ``tensor_buffer`` blob ``(N,)`` of float32/float64 ``(n, 2)`` points.
        image_size: int32 blob of ``N`` ``(width, height)`` pairs.
        flip_code: int8 blob of ``N`` codes (0, 1, 16, 17).
        name: op name (default ``ObjectSegmPolyFilp_<n>``, OneFlow's spelling).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of the flipped points.

    Raises:
        ArgumentError: an input not a blob, ``name`` not a str.
        JobBuildError: ``poly`` not a 1-D tensor_buffer, ``image_size`` / ``flip_code`` of
            another dtype or size.
        OpRunError (run time): points not ``(n, 2)`` float32/float64, an undefined flip code.

    OneFlow v0.6.0: op ``object_segmentation_polygon_flip``
    (``oneflow/user/ops/image_object_preprocess_ops.cpp``, kernel
    ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``).
    """
    fn = "object_segmentation_polygon_flip"
    return build_op("object_segmentation_polygon_flip", {
        "poly": _blob(fn, "poly", poly), "image_size": _blob(fn, "image_size", image_size),
        "flip_code": _blob(fn, "flip_code", flip_code)}, name=_name(fn, name, "ObjectSegmPolyFilp_"))


def object_segmentation_polygon_scale(poly, scale, name=None):
    """Scale each image's polygon points: x by ``scale_w``, y by ``scale_h``.

    Args:
        poly: 1-D ``tensor_buffer`` blob ``(N,)`` of float32/float64 ``(n, 2)`` points.
        scale: float32 blob of ``N`` ``(scale_w, scale_h)`` pairs.
        name: op name (default ``ObjectSegmPolyFilp_<n>``: OneFlow names the scale op with
            the flip op's prefix).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of the scaled points.

    Raises:
        ArgumentError: an input not a blob, ``name`` not a str.
        JobBuildError: ``poly`` not a 1-D tensor_buffer, ``scale`` not float32 of ``2 N``.
        OpRunError (run time): points not ``(n, 2)`` float32/float64.

    OneFlow v0.6.0: op ``object_segmentation_polygon_scale``
    (``oneflow/user/ops/image_object_preprocess_ops.cpp``, kernel
    ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``).
    """
    fn = "object_segmentation_polygon_scale"
    return build_op("object_segmentation_polygon_scale", {"poly": _blob(fn, "poly", poly),
                                                          "scale": _blob(fn, "scale", scale)},
                    name=_name(fn, name, "ObjectSegmPolyFilp_"))


def object_segmentation_polygon_to_mask(poly, poly_index, image_size, name=None):
    """Rasterize each image's segmentation polygons to int8 masks.

    Row ``j`` of an element's ``poly_index`` is ``(point, polygon, segmentation)`` of point
    ``j``, each counting up from 0 in order. Every segmentation gives one ``(H, W)`` plane,
    1 where its polygons (points rounded half to even) are filled by OpenCV's ``fillPoly``
    (8-connected edges drawn, the inside filled row by row with the even-odd rule, as
    OpenCV 3.4, which OneFlow links, does; :func:`graphfront.ops.image_ops.fill_polygons`).

    Args:
        poly: 1-D ``tensor_buffer`` blob ``(N,)`` of float32/float64 ``(n, 2)`` points.
        poly_index: 1-D ``tensor_buffer`` blob ``(N,)`` of int32/int64 ``(n, 3)`` rows.
        image_size: int32 blob of ``N`` ``(width, height)`` pairs.
        name: op name (default ``ObjectSegmPolyToMask_<n>``).

    Returns:
        BlobDesc: ``tensor_buffer`` ``(N,)`` of int8 ``(S, H, W)`` masks (S segmentations;
        an element without points gives ``(0, H, W)``).

    Raises:
        ArgumentError: an input not a blob, ``name`` not a str.
        JobBuildError: ``poly`` / ``poly_index`` not 1-D tensor_buffers of one size,
            ``image_size`` not int32 of ``2 N``.
        OpRunError (run time): points or index rows of other shapes or dtypes, index rows
            out of order.

    OneFlow v0.6.0: op ``object_segmentation_polygon_to_mask``
    (``oneflow/user/ops/image_object_preprocess_ops.cpp``, kernel
    ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``).
    """
    fn = "object_segmentation_polygon_to_mask"
    return build_op("object_segmentation_polygon_to_mask", {
        "poly": _blob(fn, "poly", poly), "poly_index": _blob(fn, "poly_index", poly_index),
        "image_size": _blob(fn, "image_size", image_size)}, name=_name(fn, name, "ObjectSegmPolyToMask_"))


resize = image_resize
target_resize = image_target_resize
random_crop = image_random_crop
batch_align = image_batch_align
decode = image_decode
flip = image_flip
normalize = image_normalize
