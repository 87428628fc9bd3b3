"""AutoTest of the tensor-buffer image and object ops (graphfront/ops/image_ops.py) against
numpy references computed from the arrays the inputs were made from.

Images of drawn, different sizes are written as PNG into an OFRecord data set (decoding is
exact), read back as bytes and decoded by ``image_decode``; the references flip with
``np.flip``, normalize with ``(x - mean) / std`` and pad with ``np.pad``. Boxes and
polygons are packed with ``tensor_to_tensor_buffer``; their references are OneFlow's
formulas written out by hand, and the masks of axis-aligned rectangles are the filled
rectangles, edges included.
"""
import io
import tempfile

import numpy as np
from PIL import Image

from graphfront.ofrecord import OFRecord, ShardWriter, bytes_feature
from graphfront.testing import autotest, constant

N = 4
CPU_ONLY = ("cpu",)  # tensor-buffer images are host objects: CPU kernels only, as in OneFlow
FLIP_CODES = np.array([0, 1, 16, 17], np.int8)   # OneFlow's FlipCode: 0x01 left-right, 0x10 upside down
_TMP = tempfile.TemporaryDirectory(prefix="graphfront-image-autotest-")


def _png(image):
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def image_dataset(check):
    """A drawn OFRecord data set of RGB images of different sizes: (dir, images)."""
    rng = check.rng
    n = int(rng.integers(2, 6))
    images = [rng.integers(0, 256, size=(int(rng.integers(2, 12)), int(rng.integers(2, 12)), 3), dtype=np.uint8)
              for _ in range(n)]
    directory = tempfile.mkdtemp(dir=_TMP.name)
    with ShardWriter(directory, n, 1) as writer:
        for im in images:
            writer.write(OFRecord(feature={"encoded": bytes_feature(_png(im))}))
    return directory, images


def _flip(image, code):
    if code & 0x01:
        image = np.flip(image, 1)
    if code & 0x10:
        image = np.flip(image, 0)
    return image


def _align(images, alignment, dtype):
    """The images zero-padded to the largest height and width rounded up to ``alignment``."""
    up = (lambda v: -(-v // alignment) * alignment) if alignment else (lambda v: v)
    h, w = up(max(im.shape[0] for im in images)), up(max(im.shape[1] for im in images))
    return np.stack([np.pad(im, ((0, h - im.shape[0]), (0, w - im.shape[1]), (0, 0))) for im in images]).astype(dtype)


@autotest(n=N, auto_backward=False, rtol=1e-6, atol=1e-5, devices=CPU_ONLY)
def test_image_decode_flip_normalize_batch_align(check):
    rng = check.rng
    directory, images = image_dataset(check)
    n = len(images)
    color = str(rng.choice(["RGB", "BGR"]))
    codes = rng.choice(FLIP_CODES, size=n).astype(np.int8)
    mean = [float(v) for v in rng.uniform(0, 255, 3)]
    std = [float(v) for v in rng.uniform(1, 80, 3)]
    alignment = int(rng.choice([0, 1, 2, 4, 8, 16]))
    static = (32, 32, 3)

    def gf(flow, codes):
        rec = flow.data.ofrecord_reader(directory, batch_size=n, data_part_num=1)
        encoded = flow.data.OFRecordBytesDecoder(rec, "encoded")
        as_uint8 = flow.image_decode(encoded, color_space=color)
        as_float = flow.image.decode(encoded, dtype=flow.float32, color_space=color)
        flipped = flow.image_flip(as_uint8, codes)
        normalized = flow.image.normalize(flow.image.flip(as_float, codes), std, mean)
        # a window of the whole area with a ratio no image has: after num_attempts misses, the whole image
        whole = flow.image.random_crop(flipped, num_attempts=1, seed=7, random_area=[1.0, 1.0],
                                       random_aspect_ratio=[100.0, 100.0])
        return [flow.image_batch_align(whole, static, flow.uint8, alignment),
                flow.image.batch_align(normalized, static, flow.float32, alignment, dynamic_out=False)]

    def th(torch, codes):
        decoded = [im if color == "RGB" else im[..., ::-1] for im in images]
        flipped = [_flip(im, int(c)) for im, c in zip(decoded, codes.numpy())]
        normalized = [(im.astype(np.float32) - np.float32(mean)) / np.float32(std) for im in flipped]
        padded = np.zeros((n,) + static, np.float32)
        for i, im in enumerate(normalized):
            padded[i, :im.shape[0], :im.shape[1]] = im
        return [torch.from_numpy(_align(flipped, alignment, np.uint8)), torch.from_numpy(padded)]

    check(graphfront=gf, torch=th, codes=constant(codes))


@autotest(n=N, auto_backward=False, rtol=1e-6, atol=1e-5, devices=CPU_ONLY)
def test_object_bbox_and_polygon_flip_scale(check):
    rng = check.rng
    n, boxes_per, points_per = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 7))
    dtype = str(rng.choice(["float32", "float64"]))
    sizes = rng.integers(8, 64, size=(n, 2)).astype(np.int32)           # (width, height)
    boxes = (rng.uniform(0, 1, (n, boxes_per, 4)) * np.tile(sizes, 2)[:, None, :]).astype(dtype)
    points = (rng.uniform(0, 1, (n, points_per, 2)) * sizes[:, None, :]).astype(dtype)
    codes = rng.choice(FLIP_CODES, size=n).astype(np.int8)
    scale = rng.uniform(0.25, 3.0, (n, 2)).astype(np.float32)

    def gf(flow, boxes, points, sizes, codes, scale):
        b = flow.tensor_to_tensor_buffer(boxes, instance_dims=2)
        p = flow.tensor_to_tensor_buffer(points, instance_dims=2)
        kind = getattr(flow, dtype)
        flipped_b = flow.object_bbox_flip(b, sizes, codes)
        flipped_p = flow.object_segmentation_polygon_flip(p, sizes, codes)
        return [flow.tensor_buffer_to_tensor(flipped_b, kind, (boxes_per, 4)),
                flow.tensor_buffer_to_tensor(flow.object_bbox_scale(flipped_b, scale), kind, (boxes_per, 4)),
                flow.tensor_buffer_to_tensor(flipped_p, kind, (points_per, 2)),
                flow.tensor_buffer_to_tensor(flow.object_segmentation_polygon_scale(flipped_p, scale), kind,
                                             (points_per, 2))]

    def th(torch, boxes, points, sizes, codes, scale):
        b, p = boxes.numpy().copy(), points.numpy().copy()
        one = b.dtype.type(1)
        for i, code in enumerate(codes.numpy()):
            w, h = b.dtype.type(sizes[i, 0].item()), b.dtype.type(sizes[i, 1].item())
            if code & 0x01:   # boxes: x' = W - x - 1 with xmin and xmax swapped; points: x' = W - x
                b[i, :, 0], b[i, :, 2] = w - boxes[i, :, 2].numpy() - one, w - boxes[i, :, 0].numpy() - one
                p[i, :, 0] = w - points[i, :, 0].numpy()
            if code & 0x10:
                b[i, :, 1], b[i, :, 3] = h - boxes[i, :, 3].numpy() - one, h - boxes[i, :, 1].numpy() - one
                p[i, :, 1] = h - points[i, :, 1].numpy()
        s = scale.numpy().astype(b.dtype)
        return [torch.from_numpy(b), torch.from_numpy(b * np.tile(s, 2)[:, None, :]), torch.from_numpy(p),
                torch.from_numpy(p * s[:, None, :])]

    check(graphfront=gf, torch=th, boxes=constant(boxes), points=constant(points), sizes=constant(sizes),
          codes=constant(codes), scale=constant(scale))


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_object_segmentation_polygon_to_mask_of_rectangles(check):
    """Each segmentation is one axis-aligned rectangle with integer corners: its mask is the
    rectangle filled, edges included (OpenCV's fillPoly draws the edges too)."""
    rng = check.rng
    n, segms = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    width, height = int(rng.integers(3, 16)), int(rng.integers(3, 16))
    dtype = str(rng.choice(["float32", "float64"]))
    index_dtype = str(rng.choice(["int32", "int64"]))
    corners = np.empty((n, segms, 4), np.int64)
    for i in range(n):
        for s in range(segms):
            x0, x1 = sorted(rng.integers(0, width, 2))
            y0, y1 = sorted(rng.integers(0, height, 2))
            corners[i, s] = (x0, y0, x1, y1)
    # four points per rectangle, clockwise; jitter below a half keeps the rounded corners
    rect = np.stack([corners[..., [0, 1]], corners[..., [2, 1]], corners[..., [2, 3]], corners[..., [0, 3]]], 2)
    points = (rect + rng.uniform(-0.45, 0.45, rect.shape)).reshape(n, segms * 4, 2).astype(dtype)
    index = np.array([[p, 0, s] for s in range(segms) for p in range(4)], index_dtype)
    index = np.broadcast_to(index, (n, segms * 4, 3)).copy()
    sizes = np.tile(np.array([[width, height]], np.int32), (n, 1))

    def gf(flow, points, index, sizes):
        masks = flow.object_segmentation_polygon_to_mask(flow.tensor_to_tensor_buffer(points, instance_dims=2),
                                                         flow.tensor_to_tensor_buffer(index, instance_dims=2), sizes)
        return flow.tensor_buffer_to_tensor(masks, flow.int8, (segms, height, width))

    def th(torch, points, index, sizes):
        want = np.zeros((n, segms, height, width), np.int8)
        for i in range(n):
            for s in range(segms):
                x0, y0, x1, y1 = corners[i, s]
                want[i, s, y0:y1 + 1, x0:x1 + 1] = 1
        return torch.from_numpy(want)

    check(graphfront=gf, torch=th, points=constant(points), index=constant(index), sizes=constant(sizes))
