"""Image and object preprocessing ops on ``tensor_buffer`` images (OneFlow v0.6.0).

OneFlow registers them in ``oneflow/user/ops/image_object_preprocess_ops.cpp``
(``image_flip``, ``image_normalize``, ``object_*``), ``image_decode_op.cpp``,
``image_batch_align_op.cpp`` and ``image_preprocess_ops.cpp`` (``image_random_crop``), with
kernels in ``oneflow/user/kernels/image_object_preprocess_kernels.cpp``,
``image_decode_kernel.cpp``, ``image_batch_align_kernel.cpp`` and
``image_preprocess_kernels.cpp``. All are CPU-only and have no gradient; every one splits
along the batch on several devices (OneFlow's only SBP signature for them).

A ``tensor_buffer`` blob's run-time value is a list of numpy arrays
(:mod:`graphfront.ops.tensor_buffer_ops`): here an image is ``(H, W, C)``, a set of boxes
``(n, 4)`` as ``(xmin, ymin, xmax, ymax)``, a set of polygon points ``(n, 2)`` as
``(x, y)``, and a polygon index ``(n, 3)`` as ``(point, polygon, segmentation)`` per point.
``image_size`` is an int32 ``(N, 2)`` blob of ``(width, height)``, ``scale`` a float32
``(N, 2)`` blob of ``(scale_w, scale_h)`` and ``flip_code`` an int8 ``(N,)`` blob.

==================================================  ==============================================
op (args -> outputs) {attrs}                        computes, per element ``i``
==================================================  ==============================================
``image_flip`` (in, flip_code -> out)               the image mirrored: bit ``0x01`` of
                                                    ``flip_code[i]`` left-right (``cv::flip`` 1),
                                                    bit ``0x10`` upside down (0); codes 0, 1, 16,
                                                    17 only (OneFlow's ``FlipCode``).
``image_normalize`` (in -> out) {std, mean}         ``(x - mean[c]) / std[c]`` per channel, in
                                                    the image's float dtype (float32, float64).
``image_decode`` (in -> out) {color_space,          encoded bytes (int8/uint8 buffers) decoded to
data_type}                                          ``(H, W, 3)`` BGR/RGB or ``(H, W, 1)`` GRAY,
                                                    as uint8 or float32 (values 0..255).
``image_batch_align`` (in -> out) {shape,           one dense ``(N, H, W, C)`` blob: each image
data_type, alignment, dynamic_out}                  at the top-left of its slot, zeros elsewhere,
                                                    cast to ``data_type``; with ``dynamic_out`` H
                                                    and W are the batch's largest rounded up to a
                                                    multiple of ``alignment``, else ``shape``'s.
``image_random_crop`` (in -> out) {num_attempts,    a random window of the image (area fraction
seed, has_seed, random_area, random_aspect_ratio}   and w/h ratio drawn from the ranges).
``object_bbox_flip`` (bbox, image_size, flip_code   ``x' = W - x - 1`` (xmin, xmax swapped) for
-> out)                                             bit 0x01, ``y' = H - y - 1`` for bit 0x10.
``object_bbox_scale`` (bbox, scale -> out)          ``x * scale_w``, ``y * scale_h``.
``object_segmentation_polygon_flip`` (poly,         ``x' = W - x`` for bit 0x01, ``y' = H - y``
image_size, flip_code -> out)                       for bit 0x10 (no ``- 1``: OneFlow's rule).
``object_segmentation_polygon_scale`` (poly, scale  ``x * scale_w``, ``y * scale_h``.
-> out)
``object_segmentation_polygon_to_mask`` (poly,      one int8 ``(S, H, W)`` mask per image, one
poly_index, image_size -> out)                      plane per segmentation: its polygons filled
                                                    with 1 by OpenCV's ``fillPoly`` rule
                                                    (:func:`fill_polygons`).
==================================================  ==============================================

Boxes and polygons are float32 or float64 (OneFlow: ``FLOATING_DATA_TYPE_SEQ``) and keep
their dtype; arithmetic is done in that dtype, the float32 attrs and scales widened to it
as C++ does. A kernel given run-time data that does not fit (an image of another rank or
channel count, a box set that is not ``(n, 4)``, a flip code OneFlow does not define, a
polygon index out of order) raises :class:`~graphfront.framework.errors.OpRunError`
naming the op and the element.
"""
from __future__ import annotations

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import OpRunError
from graphfront.ofrecord import images as _img
from graphfront.ops.registry import op
from graphfront.ops.common import BufferList
from graphfront.ops.tensor_buffer_ops import runtime_shape
from graphfront.parallel import sbp as _sbp

#: OneFlow's ``FlipCode``: bit 0x01 flips left-right, bit 0x10 upside down
HORIZONTAL_FLIP, VERTICAL_FLIP = 0x01, 0x10
FLIP_CODES = (0x00, 0x01, 0x10, 0x11)
#: the dtypes of boxes and polygons (OneFlow's FLOATING_DATA_TYPE_SEQ)
BOX_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: the dtypes of a polygon index (OneFlow's INDEX_DATA_TYPE_SEQ)
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: the dtypes image_decode and image_batch_align produce
IMAGE_DTYPES = (_dt.uint8, _dt.float32)


# ============================================================== shared checks

def _buffers(ctx, arg):
    """The BlobDesc of input ``arg``, checked to be a 1-D tensor_buffer blob."""
    desc = ctx.input(arg)
    ctx.check(desc.dtype is _dt.tensor_buffer and len(desc.shape) == 1,
              f"input '{arg}' must be a 1-D tensor_buffer blob, received {desc.dtype.name} {tuple(desc.shape)}")
    return desc


def _per_element(ctx, arg, dtype, n, per):
    """Input ``arg``: a ``dtype`` blob of ``n * per`` elements (one or two values per element)."""
    desc = ctx.input(arg)
    count = int(np.prod(desc.shape))
    ctx.check(desc.dtype is dtype and count == n * per,
              f"input '{arg}' must be a {dtype.name} blob of {n * per} elements ({per} per element of the "
              f"{n} in the batch), received {desc.dtype.name} {tuple(desc.shape)}")


def _like_input(ctx, arg):
    desc = ctx.input(arg)
    ctx.set_output("out", tuple(desc.shape), _dt.tensor_buffer, is_dynamic=desc.is_dynamic)


def _rows(k, arg, value, n, per, np_dtype):
    """The run-time value of a dense per-element input as an ``(n, per)`` numpy array."""
    arr = value.detach().cpu().numpy().astype(np_dtype, copy=False).reshape(-1)
    if arr.size != n * per:
        raise OpRunError(f"op '{k.op_name}': input '{arg}' holds {arr.size} values, the batch of {n} needs "
                         f"{n * per}")
    return arr.reshape(n, per)


def _image(k, i, im):
    im = np.asarray(im)
    if im.ndim != 3:
        raise OpRunError(f"op '{k.op_name}': image {i} must be (H, W, C), received shape {im.shape}")
    return im


def _flip_code(k, i, code):
    code = int(code)
    if code not in FLIP_CODES:
        raise OpRunError(f"op '{k.op_name}': flip_code[{i}] is {code}; OneFlow's flip codes are 0 (none), "
                         f"1 (0x01, left-right), 16 (0x10, upside down) and 17 (0x11, both)")
    return code


def _points(k, i, buf, width, what):
    """Buffer ``i`` as an ``(n, width)`` float32/float64 array (boxes: 4, polygon points: 2)."""
    arr = np.asarray(buf)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise OpRunError(f"op '{k.op_name}': {what} {i} must have shape (n, {width}), received {arr.shape}")
    if arr.dtype not in BOX_DTYPES:
        raise OpRunError(f"op '{k.op_name}': {what} {i} must be float32 or float64, received {arr.dtype}")
    return arr


def _out(buffers, desc, values):
    return BufferList(values, runtime_shape(buffers, desc))


OBJECT_OP = dict(no_grad=True, cpu_only=True, sbp=_sbp.batch())


# ============================================================== image_flip

def _flip_infer(ctx):
    n = _buffers(ctx, "in").shape[0]
    _per_element(ctx, "flip_code", _dt.int8, n, 1)
    _like_input(ctx, "in")


def flip_image(image, code):
    """``image`` (H, W, C) mirrored by OneFlow flip ``code`` (a copy)."""
    if code & HORIZONTAL_FLIP:
        image = image[:, ::-1]
    if code & VERTICAL_FLIP:
        image = image[::-1]
    return np.array(image, copy=True)


def _flip_kernel(k):
    desc = k.input("in")

    def image_flip(images, flip_code):
        codes = _rows(k, "flip_code", flip_code, len(images), 1, np.int8)[:, 0]
        return _out(images, desc, [flip_image(_image(k, i, im), _flip_code(k, i, c))
                                   for i, (im, c) in enumerate(zip(images, codes))])
    return image_flip


op("image_flip", inputs=["in", "flip_code"], outputs=["out"], infer=_flip_infer, kernel=_flip_kernel,
   doc="tensor_buffer images mirrored by an int8 OneFlow flip code each", **OBJECT_OP)


# ============================================================== image_normalize

def _normalize_infer(ctx):
    _buffers(ctx, "in")
    std, mean = list(ctx.attr("std")), list(ctx.attr("mean"))
    ctx.check(len(std) >= 1 and len(std) == len(mean),
              f"attrs 'std' and 'mean' must hold one value per channel, as many of each, received {std} and {mean}")
    ctx.check(all(s != 0 for s in std), f"attr 'std' must not contain 0, received {std}")
    _like_input(ctx, "in")


def _normalize_kernel(k):
    desc = k.input("in")
    std32, mean32 = np.asarray(k.attr("std"), np.float32), np.asarray(k.attr("mean"), np.float32)

    def one(i, im):
        im = _image(k, i, im)
        if im.dtype not in BOX_DTYPES:
            raise OpRunError(f"op '{k.op_name}': image {i} is {im.dtype}; image_normalize takes float32 or float64 "
                             "images (decode with flow.image_decode(..., dtype=flow.float32))")
        if im.shape[2] != std32.size:
            raise OpRunError(f"op '{k.op_name}': image {i} has {im.shape[2]} channels, attrs 'std' and 'mean' "
                             f"hold {std32.size}")
        # in the image's dtype: the float32 attrs widened to float64 for a float64 image, as C++ does
        return (im - mean32.astype(im.dtype)) / std32.astype(im.dtype)

    def image_normalize(images):
        return _out(images, desc, [one(i, im) for i, im in enumerate(images)])
    return image_normalize


op("image_normalize", inputs=["in"], outputs=["out"], attrs={"std": "list_float", "mean": "list_float"},
   infer=_normalize_infer, kernel=_normalize_kernel, doc="(x - mean) / std per channel of tensor_buffer images",
   **OBJECT_OP)


# ============================================================== image_decode

def _decode_infer(ctx):
    desc = _buffers(ctx, "in")
    ctx.check(desc.shape[0] >= 1, f"input 'in' must hold at least one image, received shape {tuple(desc.shape)}")
    ctx.check(ctx.attr("color_space") in _img.COLOR_SPACES,
              f"attr 'color_space' must be one of {_img.COLOR_SPACES}, received {ctx.attr('color_space')!r}")
    ctx.check(ctx.attr("data_type") in IMAGE_DTYPES,
              f"attr 'data_type' must be uint8 or float32, received {ctx.attr('data_type')}")
    _like_input(ctx, "in")


def _decode_kernel(k):
    desc, color, dtype = k.input("in"), k.attr("color_space"), k.attr("data_type").np

    def one(i, buf):
        raw = np.asarray(buf)
        if raw.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise OpRunError(f"op '{k.op_name}': element {i} must hold encoded bytes (int8 or uint8), received "
                             f"{raw.dtype}")
        try:
            image = _img.decode(raw.tobytes(), color)
        except ValueError as e:
            raise OpRunError(f"op '{k.op_name}': element {i}: {e}") from None
        return image.astype(dtype, copy=False)

    def image_decode(buffers):
        return _out(buffers, desc, [one(i, b) for i, b in enumerate(buffers)])
    return image_decode


op("image_decode", inputs=["in"], outputs=["out"],
   attrs={"color_space": ("string", "BGR"), "data_type": ("dtype", _dt.uint8)},
   infer=_decode_infer, kernel=_decode_kernel, doc="encoded images (bytes) decoded to (H, W, C) tensor_buffer images",
   **OBJECT_OP)


# ============================================================== image_batch_align

def round_up(x: int, alignment: int) -> int:
    """``x`` rounded up to a multiple of ``alignment`` (0: ``x`` itself)."""
    return x if alignment <= 0 else (x + alignment - 1) // alignment * alignment


def _align_infer(ctx):
    n = _buffers(ctx, "in").shape[0]
    shape, alignment = tuple(ctx.attr("shape")), ctx.attr("alignment")
    ctx.check(len(shape) == 3 and all(d >= 1 for d in shape),
              f"attr 'shape' must be the (H, W, C) that holds every image, received {shape}")
    ctx.check(ctx.attr("data_type") in IMAGE_DTYPES,
              f"attr 'data_type' must be uint8 or float32, received {ctx.attr('data_type')}")
    ctx.check(alignment >= 0 and (alignment & (alignment - 1)) == 0,
              f"attr 'alignment' must be 0 or a power of 2, received {alignment}")
    ctx.set_output("out", (n,) + shape, ctx.attr("data_type"), is_dynamic=ctx.attr("dynamic_out"))


def _align_kernel(k):
    (sh, sw, c), alignment = tuple(k.attr("shape")), k.attr("alignment")
    dtype, dynamic = k.attr("data_type").np, k.attr("dynamic_out")

    def image_batch_align(images):
        images = [_image(k, i, im) for i, im in enumerate(images)]
        for i, im in enumerate(images):
            if im.shape[2] != c:
                raise OpRunError(f"op '{k.op_name}': image {i} has {im.shape[2]} channels, attr 'shape' "
                                 f"{(sh, sw, c)} has {c}")
            if im.dtype.name not in ("uint8", "float32"):
                raise OpRunError(f"op '{k.op_name}': image {i} is {im.dtype}, expected uint8 or float32")
        mh = round_up(max((im.shape[0] for im in images), default=0), alignment)
        mw = round_up(max((im.shape[1] for im in images), default=0), alignment)
        if mh > sh or mw > sw:
            raise OpRunError(f"op '{k.op_name}': the batch's largest image, aligned to {alignment}, is {mh} x {mw}; "
                             f"attr 'shape' {(sh, sw, c)} holds at most {sh} x {sw}")
        h, w = (mh, mw) if dynamic else (sh, sw)
        out = np.zeros((len(images), h, w, c), dtype)
        for i, im in enumerate(images):
            out[i, :im.shape[0], :im.shape[1]] = im.astype(dtype, copy=False)  # C++ static_cast
        return torch.from_numpy(out)
    return image_batch_align


op("image_batch_align", inputs=["in"], outputs=["out"],
   attrs={"shape": "shape", "data_type": "dtype", "alignment": "int32", "dynamic_out": ("bool", False)},
   infer=_align_infer, kernel=_align_kernel, doc="tensor_buffer images zero-padded into one dense aligned batch",
   **OBJECT_OP)


# ============================================================== image_random_crop

def _random_crop_infer(ctx):
    desc = ctx.input("in")
    ctx.check(desc.dtype is _dt.tensor_buffer,
              f"input 'in' must be a tensor_buffer blob of images, received {desc.dtype.name} {tuple(desc.shape)}")
    area, ratio = list(ctx.attr("random_area")), list(ctx.attr("random_aspect_ratio"))
    ctx.check(len(area) == 2 and 0 < area[0] <= area[1] <= 1,
              f"attr 'random_area' must be [min, max] with 0 < min <= max <= 1, received {area}")
    ctx.check(len(ratio) == 2 and 0 < ratio[0] <= ratio[1],
              f"attr 'random_aspect_ratio' must be [min, max] with 0 < min <= max, received {ratio}")
    ctx.check(ctx.attr("num_attempts") >= 1, f"attr 'num_attempts' must be >= 1, received {ctx.attr('num_attempts')}")
    _like_input(ctx, "in")


def _random_crop_kernel(k):
    """The windows are drawn as ``ofrecord_image_decoder_random_crop`` draws them: one
    generator per kernel, seeded by ``seed`` (or, without one, from torch's generator when
    the kernel is made, so ``flow.manual_seed`` reproduces it), giving each image in batch
    order the seed of its own window generator."""
    desc = k.input("in")
    area, ratio = tuple(k.attr("random_area")), tuple(k.attr("random_aspect_ratio"))
    attempts = k.attr("num_attempts")
    seed = k.attr("seed") % 2 ** 64 if k.attr("has_seed") else int(torch.randint(0, 2 ** 62, (1,)))
    rng = np.random.default_rng(seed)

    def one(i, im):
        im = _image(k, i, im)
        crop_rng = np.random.default_rng(int(rng.integers(2 ** 63)))
        x, y, w, h = _img.random_crop_window(im.shape[1], im.shape[0], crop_rng, area, ratio, attempts)
        return np.array(im[y:y + h, x:x + w], copy=True)

    def image_random_crop(images):
        return _out(images, desc, [one(i, im) for i, im in enumerate(images)])
    return image_random_crop


op("image_random_crop", inputs=["in"], outputs=["out"],
   attrs={"num_attempts": ("int32", 10), "seed": ("int64", -1), "has_seed": ("bool", False),
          "random_area": ("list_float", [0.08, 1.0]), "random_aspect_ratio": ("list_float", [0.75, 1.333333])},
   infer=_random_crop_infer, kernel=_random_crop_kernel, random=True,
   doc="a random window of each tensor_buffer image", **OBJECT_OP)


# ============================================================== boxes and polygons: flip and scale

def _flip_objects_infer(arg):
    def infer(ctx):
        n = _buffers(ctx, arg).shape[0]
        _per_element(ctx, "image_size", _dt.int32, n, 2)
        _per_element(ctx, "flip_code", _dt.int8, n, 1)
        _like_input(ctx, arg)
    return infer


def _scale_objects_infer(arg):
    def infer(ctx):
        n = _buffers(ctx, arg).shape[0]
        _per_element(ctx, "scale", _dt.float32, n, 2)
        _like_input(ctx, arg)
    return infer


def flip_boxes(boxes, width, height, code):
    """``(n, 4)`` boxes of an image ``width`` x ``height`` flipped by OneFlow flip ``code``:
    ``(W - xmax - 1, ymin, W - xmin - 1, ymax)`` left-right, likewise in y upside down."""
    out = boxes.copy()
    one, w, h = boxes.dtype.type(1), boxes.dtype.type(width), boxes.dtype.type(height)
    if code & HORIZONTAL_FLIP:
        out[:, 0], out[:, 2] = w - boxes[:, 2] - one, w - boxes[:, 0] - one
    if code & VERTICAL_FLIP:
        out[:, 1], out[:, 3] = h - boxes[:, 3] - one, h - boxes[:, 1] - one
    return out


def flip_polygons(points, width, height, code):
    """``(n, 2)`` polygon points flipped by OneFlow flip ``code``: ``x' = W - x``
    left-right, ``y' = H - y`` upside down."""
    out = points.copy()
    if code & HORIZONTAL_FLIP:
        out[:, 0] = points.dtype.type(width) - points[:, 0]
    if code & VERTICAL_FLIP:
        out[:, 1] = points.dtype.type(height) - points[:, 1]
    return out


def _flip_objects_kernel(arg, width, what, flip):
    def make(k):
        desc = k.input(arg)

        def kernel(objects, image_size, flip_code):
            n = len(objects)
            sizes = _rows(k, "image_size", image_size, n, 2, np.int32)
            codes = _rows(k, "flip_code", flip_code, n, 1, np.int8)[:, 0]
            return _out(objects, desc, [flip(_points(k, i, b, width, what), int(sizes[i, 0]), int(sizes[i, 1]),
                                             _flip_code(k, i, codes[i])) for i, b in enumerate(objects)])
        return kernel
    return make


def _scale_objects_kernel(arg, width, what):
    def make(k):
        desc = k.input(arg)

        def kernel(objects, scale):
            scales = _rows(k, "scale", scale, len(objects), 2, np.float32)
            out = []
            for i, b in enumerate(objects):
                pts = _points(k, i, b, width, what)
                factor = np.tile(scales[i].astype(pts.dtype), width // 2)   # (sw, sh[, sw, sh])
                out.append(pts * factor)
            return _out(objects, desc, out)
        return kernel
    return make


op("object_bbox_flip", inputs=["bbox", "image_size", "flip_code"], outputs=["out"],
   infer=_flip_objects_infer("bbox"), kernel=_flip_objects_kernel("bbox", 4, "box set", flip_boxes),
   doc="(n, 4) boxes flipped with their images", **OBJECT_OP)
op("object_bbox_scale", inputs=["bbox", "scale"], outputs=["out"], infer=_scale_objects_infer("bbox"),
   kernel=_scale_objects_kernel("bbox", 4, "box set"), doc="(n, 4) boxes scaled with their images", **OBJECT_OP)
op("object_segmentation_polygon_flip", inputs=["poly", "image_size", "flip_code"], outputs=["out"],
   infer=_flip_objects_infer("poly"), kernel=_flip_objects_kernel("poly", 2, "polygon point set", flip_polygons),
   doc="(n, 2) polygon points flipped with their images", **OBJECT_OP)
op("object_segmentation_polygon_scale", inputs=["poly", "scale"], outputs=["out"],
   infer=_scale_objects_infer("poly"), kernel=_scale_objects_kernel("poly", 2, "polygon point set"),
   doc="(n, 2) polygon points scaled with their images", **OBJECT_OP)


# ============================================================== polygons to masks

_XY_SHIFT = 16
_XY_ONE = 1 << _XY_SHIFT


def _clip_line(width, height, x1, y1, x2, y2):
    """The segment clipped to the image as OpenCV's ``clipLine`` clips it (integer
    intersections, truncated), or None when it misses the image."""
    right, bottom = width - 1, height - 1

    def code(x, y):
        return (x < 0) + (x > right) * 2 + (y < 0) * 4 + (y > bottom) * 8
    c1, c2 = code(x1, y1), code(x2, y2)
    if (c1 & c2) == 0 and (c1 | c2) != 0:
        if c1 & 12:
            a = 0 if c1 < 8 else bottom
            x1 += int((a - y1) * (x2 - x1) / (y2 - y1))
            y1, c1 = a, (x1 < 0) + (x1 > right) * 2
        if c2 & 12:
            a = 0 if c2 < 8 else bottom
            x2 += int((a - y2) * (x2 - x1) / (y2 - y1))
            y2, c2 = a, (x2 < 0) + (x2 > right) * 2
        if (c1 & c2) == 0 and (c1 | c2) != 0:
            if c1:
                a = 0 if c1 == 1 else right
                y1 += int((a - x1) * (y2 - y1) / (x2 - x1))
                x1, c1 = a, 0
            if c2:
                a = 0 if c2 == 1 else right
                y2 += int((a - x2) * (y2 - y1) / (x2 - x1))
                x2, c2 = a, 0
    return None if (c1 | c2) else (x1, y1, x2, y2)


def _draw_line(mask, x1, y1, x2, y2):
    """Set the pixels of OpenCV's 8-connected line from (x1, y1) to (x2, y2) (its
    ``LineIterator``, drawn left to right, after clipping to the image)."""
    height, width = mask.shape
    clipped = _clip_line(width, height, x1, y1, x2, y2)
    if clipped is None:
        return
    x1, y1, x2, y2 = clipped
    if x2 < x1:
        x1, y1, x2, y2 = x2, y2, x1, y1
    dx, dy = x2 - x1, abs(y2 - y1)
    ystep = 1 if y2 >= y1 else -1
    x_major = dx >= dy
    major, minor = (dx, dy) if x_major else (dy, dx)
    err = major - 2 * minor
    x, y = x1, y1
    for _ in range(major + 1):
        mask[y, x] = 1
        step_minor = err < 0
        err += -2 * minor + (2 * major if step_minor else 0)
        if x_major:
            x += 1
            y += ystep if step_minor else 0
        else:
            y += ystep
            x += 1 if step_minor else 0


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def fill_polygons(polygons, height, width) -> np.ndarray:
    """An int8 ``(height, width)`` mask, 1 inside ``polygons`` (lists of integer ``(x, y)``
    points) as OpenCV's ``cv::fillPoly(mask, polygons, 1, LINE_8)`` fills them (OneFlow's
    ``object_segmentation_polygon_to_mask`` rule):

    * every edge, horizontal ones too, is drawn as an 8-connected line (Bresenham, from its
      left end), so the boundary pixels are set;
    * the polygons' non-horizontal edges together are filled row by row with the
      even-odd rule: on row ``y`` an edge from ``(xa, ya)`` to ``(xb, yb)``, ``ya < yb``,
      is active for ``ya <= y < yb`` at ``x = xa + (y - ya) * dx`` in 16.16 fixed point
      (``dx`` the slope truncated toward zero); the active edges sorted by ``x`` pair up
      and each pair fills ``ceil(x_left) .. floor(x_right)``.

    Overlapping polygons of one mask cancel where they overlap (even-odd), as in OpenCV.
    """
    mask = np.zeros((height, width), np.int8)
    edges = []
    for poly in polygons:
        pts = [(int(x), int(y)) for x, y in poly]
        if not pts:
            continue
        px, py = pts[-1]
        for x, y in pts:
            _draw_line(mask, px, py, x, y)
            if py != y:
                (xa, ya), (xb, yb) = ((px, py), (x, y)) if py < y else ((x, y), (px, py))
                edges.append((ya, yb, xa << _XY_SHIFT, _trunc_div((x - px) << _XY_SHIFT, y - py)))
            px, py = x, y
    if len(edges) < 2:
        return mask
    y_min, y_max = min(e[0] for e in edges), max(e[1] for e in edges)
    xs = [e[2] for e in edges] + [e[2] + (e[1] - e[0]) * e[3] for e in edges]
    if y_max < 0 or y_min >= height or max(xs) < 0 or min(xs) >= (width << _XY_SHIFT):
        return mask
    for y in range(max(y_min, 0), min(y_max, height)):
        row = sorted(x0 + (y - y0) * dx for y0, y1, x0, dx in edges if y0 <= y < y1)
        for left, right in zip(row[0::2], row[1::2]):
            x1, x2 = (left + _XY_ONE - 1) >> _XY_SHIFT, right >> _XY_SHIFT
            if x1 < width and x2 >= 0:
                mask[y, max(x1, 0):min(x2, width - 1) + 1] = 1
    return mask


def _polygon_masks(k, i, poly, index, width, height):
    """The masks of element ``i``: OneFlow's grouping of the points by ``index`` rows
    ``(point, polygon, segmentation)``, each counting up from 0 in order."""
    where = f"op '{k.op_name}': element {i}"
    poly = _points(k, i, poly, 2, "polygon point set")
    index = np.asarray(index)
    if index.ndim != 2 or index.shape[1] != 3 or index.dtype not in INDEX_DTYPES:
        raise OpRunError(f"{where}: poly_index must be an int32/int64 (n, 3) array of (point, polygon, "
                         f"segmentation) rows, received {index.dtype} {index.shape}")
    if index.shape[0] != poly.shape[0]:
        raise OpRunError(f"{where}: poly has {poly.shape[0]} points, poly_index {index.shape[0]} rows")
    if width < 0 or height < 0:
        raise OpRunError(f"{where}: image_size ({width}, {height}) is negative")
    rounded = np.rint(poly).astype(np.int64)  # std::nearbyint under FE_TONEAREST: half to even
    masks, polygons = [], []
    for row, ((pt, pol, seg), (x, y)) in enumerate(zip(index.tolist(), rounded.tolist())):
        if seg != len(masks) and polygons:
            masks.append(fill_polygons(polygons, height, width))
            polygons = []
        if pol == len(polygons):
            polygons.append([])
        if seg != len(masks) or pol != len(polygons) - 1 or pt != len(polygons[-1]):
            raise OpRunError(f"{where}: poly_index row {row} is ({pt}, {pol}, {seg}); expected point "
                             f"{len(polygons[-1]) if polygons else 0} of polygon {max(len(polygons) - 1, 0)} of "
                             f"segmentation {len(masks)} (or the next polygon or segmentation, each counting from 0)")
        polygons[-1].append((x, y))
    if polygons:
        masks.append(fill_polygons(polygons, height, width))
    return np.stack(masks) if masks else np.zeros((0, height, width), np.int8)


def _to_mask_infer(ctx):
    n = _buffers(ctx, "poly").shape[0]
    index = _buffers(ctx, "poly_index")
    ctx.check(index.shape[0] == n, f"input 'poly_index' must have one element per element of 'poly' ({n}), "
              f"received {tuple(index.shape)}")
    _per_element(ctx, "image_size", _dt.int32, n, 2)
    _like_input(ctx, "poly")


def _to_mask_kernel(k):
    desc = k.input("poly")

    def object_segmentation_polygon_to_mask(poly, poly_index, image_size):
        n = len(poly)
        if len(poly_index) != n:
            raise OpRunError(f"op '{k.op_name}': poly has {n} elements, poly_index {len(poly_index)}")
        sizes = _rows(k, "image_size", image_size, n, 2, np.int32)
        return _out(poly, desc, [_polygon_masks(k, i, p, x, int(sizes[i, 0]), int(sizes[i, 1]))
                                 for i, (p, x) in enumerate(zip(poly, poly_index))])
    return object_segmentation_polygon_to_mask


op("object_segmentation_polygon_to_mask", inputs=["poly", "poly_index", "image_size"], outputs=["out"],
   infer=_to_mask_infer, kernel=_to_mask_kernel, doc="segmentation polygons rasterized to int8 masks", **OBJECT_OP)
