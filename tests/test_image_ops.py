"""flow.image_flip / image_normalize / image_decode / image_batch_align / image_random_crop
and flow.object_bbox_* / object_segmentation_polygon_*: OneFlow v0.6.0's preprocessing of
tensor-buffer images, boxes and polygons, against references computed here with numpy and
Pillow (and OpenCV when it is installed), with hand-computed cases, names and errors."""
import io

import numpy as np
import pytest
from PIL import Image

import graphfront as flow
from graphfront import typing as tp
from graphfront.ofrecord import OFRecord, ShardWriter, bytes_feature
from graphfront.ops.image_ops import fill_polygons


def _png(image):
    buf = io.BytesIO()
    Image.fromarray(image if image.shape[2] == 3 else image[:, :, 0]).save(buf, format="PNG")
    return buf.getvalue()


def _records(tmp_path, payloads):
    with ShardWriter(str(tmp_path), len(payloads), 1) as writer:
        for p in payloads:
            writer.write(OFRecord(feature={"encoded": bytes_feature(p)}))
    return str(tmp_path)


def _encoded(flow_, directory, n):
    rec = flow_.data.ofrecord_reader(directory, batch_size=n, data_part_num=1)
    return flow_.data.OFRecordBytesDecoder(rec, "encoded")


def _images(rng, sizes, channels=3):
    return [rng.integers(0, 256, size=(h, w, channels), dtype=np.uint8) for h, w in sizes]


SIZES = [(5, 7), (9, 4), (6, 6)]


# ------------------------------------------------------------------ image_decode, image_flip


@pytest.mark.parametrize("color", ["RGB", "BGR", "GRAY"])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_decode_gives_pillow_decoded_pngs_in_the_color_space(tmp_path, color, dtype):
    flow.clear_default_session()
    rng = np.random.default_rng(0)
    images = _images(rng, SIZES, 1 if color == "GRAY" else 3)
    directory = _records(tmp_path, [_png(im) for im in images])

    @flow.global_function()
    def job() -> tp.Bundle[tp.ListNumpy]:
        decoded = flow.image_decode(_encoded(flow, directory, 3), dtype=getattr(flow, dtype), color_space=color)
        return flow.tensor_buffer_to_list_of_tensors(decoded, (9, 7, 1 if color == "GRAY" else 3),
                                                     getattr(flow, dtype), dynamic_out=True)

    outs = [o[0] for o in job()]
    for im, out, raw in zip(images, outs, [_png(i) for i in images]):
        want = np.asarray(Image.open(io.BytesIO(raw)))      # Pillow's own decode of the bytes
        want = want[:, :, None] if color == "GRAY" else (want[:, :, ::-1] if color == "BGR" else want)
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, want.astype(dtype))
        np.testing.assert_array_equal(want if color != "BGR" else want[:, :, ::-1], im)


def test_decode_of_bytes_that_are_no_image_raises_op_run_error(tmp_path):
    flow.clear_default_session()
    directory = _records(tmp_path, [b"not an image at all"])

    @flow.global_function()
    def job() -> tp.Numpy:
        decoded = flow.image_decode(_encoded(flow, directory, 1))
        return flow.tensor_buffer_to_tensor(decoded, flow.uint8, (1, 1, 3))

    with pytest.raises(flow.OpRunError, match=r"ImageDecode_\d+.*element 0.*cannot decode image"):
        job()


def test_flip_codes_are_oneflows_bits_and_np_flip(tmp_path):
    flow.clear_default_session()
    rng = np.random.default_rng(1)
    images = _images(rng, SIZES + [(3, 8)])
    directory = _records(tmp_path, [_png(im) for im in images])
    seen = {}

    @flow.global_function()
    def job(codes: tp.Numpy.Placeholder((4,), dtype=flow.int8)) -> tp.Bundle[tp.ListNumpy]:
        flipped = flow.image_flip(flow.image_decode(_encoded(flow, directory, 4), color_space="RGB"), codes)
        seen["name"] = flipped.op_name
        return flow.tensor_buffer_to_list_of_tensors(flipped, (9, 8, 3), flow.uint8, dynamic_out=True)

    outs = [o[0] for o in job(np.array([0, 1, 16, 17], np.int8))]
    np.testing.assert_array_equal(outs[0], images[0])
    np.testing.assert_array_equal(outs[1], np.flip(images[1], 1))          # 0x01: left-right
    np.testing.assert_array_equal(outs[2], np.flip(images[2], 0))          # 0x10: upside down
    np.testing.assert_array_equal(outs[3], np.flip(images[3], (0, 1)))     # 0x11: both
    assert seen["name"].startswith("ImageFlip_")
    with pytest.raises(flow.OpRunError, match=r"flip_code\[1\] is 2.*0 \(none\), 1 .* 16 .* 17"):
        job(np.array([0, 2, 0, 0], np.int8))
    # the session stays usable
    np.testing.assert_array_equal(job(np.zeros(4, np.int8))[3][0], images[3])


def test_flip_code_must_be_int8_of_one_code_per_image():
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3, 2, 2, 3), dtype=flow.uint8),
            codes: tp.Numpy.Placeholder((2,), dtype=flow.int8)) -> tp.Numpy:
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=3)
        return flow.tensor_buffer_to_tensor(flow.image_flip(buf, codes), flow.uint8, (2, 2, 3))

    with pytest.raises(flow.JobBuildError, match="input 'flip_code' must be a int8 blob of 3 elements"):
        job(np.zeros((3, 2, 2, 3), np.uint8), np.zeros(2, np.int8))


# ------------------------------------------------------------------ image_normalize


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normalize_is_x_minus_mean_over_std_per_channel(dtype):
    flow.clear_default_session()
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 255, (3, 4, 5, 3)).astype(dtype)
    std, mean = [58.4, 57.1, 57.4], [123.68, 116.78, 103.94]

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3, 4, 5, 3), dtype=getattr(flow, dtype))) -> tp.Numpy:
        buf = flow.image.normalize(flow.tensor_to_tensor_buffer(x, instance_dims=3), std, mean)
        return flow.tensor_buffer_to_tensor(buf, getattr(flow, dtype), (4, 5, 3))

    got = job(x)
    want = (x - np.float32(mean).astype(dtype)) / np.float32(std).astype(dtype)   # float32 attrs, widened
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, (x - np.array(mean)) / np.array(std), rtol=1e-5)


def test_normalize_refuses_uint8_images_and_other_channel_counts():
    flow.clear_default_session()

    def build(dtype, std, mean):
        @flow.global_function()
        def job(x: tp.Numpy.Placeholder((2, 3, 3, 3), dtype=dtype)) -> tp.Numpy:
            buf = flow.image_normalize(flow.tensor_to_tensor_buffer(x, instance_dims=3), std, mean)
            return flow.tensor_buffer_to_tensor(buf, flow.float32, (3, 3, 3))
        return job

    with pytest.raises(flow.OpRunError, match=r"image 0 is uint8; image_normalize takes float32 or float64"):
        build(flow.uint8, [1.0] * 3, [0.0] * 3)(np.zeros((2, 3, 3, 3), np.uint8))
    flow.clear_default_session()
    with pytest.raises(flow.OpRunError, match="image 0 has 3 channels, attrs 'std' and 'mean' hold 1"):
        build(flow.float32, [1.0], [0.0])(np.zeros((2, 3, 3, 3), np.float32))
    flow.clear_default_session()
    with pytest.raises(flow.JobBuildError, match="attrs 'std' and 'mean' must hold one value per channel"):
        build(flow.float32, [1.0, 2.0], [0.0])(np.zeros((2, 3, 3, 3), np.float32))
    flow.clear_default_session()
    with pytest.raises(flow.JobBuildError, match="attr 'std' must not contain 0"):
        build(flow.float32, [1.0, 0.0, 1.0], [0.0] * 3)(np.zeros((2, 3, 3, 3), np.float32))


# ------------------------------------------------------------------ image_batch_align


@pytest.mark.parametrize("alignment", [0, 1, 4, 16])
def test_batch_align_pads_to_the_aligned_largest_image(tmp_path, alignment):
    flow.clear_default_session()
    rng = np.random.default_rng(3)
    images = _images(rng, SIZES)
    directory = _records(tmp_path, [_png(im) for im in images])
    seen = {}

    @flow.global_function()
    def job() -> tp.Numpy:
        decoded = flow.image_decode(_encoded(flow, directory, 3), color_space="RGB")
        out = flow.image_batch_align(decoded, shape=(16, 16, 3), dtype=flow.float32, alignment=alignment)
        seen.update(shape=out.shape, dynamic=out.is_dynamic, name=out.op_name, dtype=out.dtype)
        return out

    got = job()
    up = (lambda v: -(-v // alignment) * alignment) if alignment else (lambda v: v)
    h, w = up(9), up(7)
    want = np.stack([np.pad(im, ((0, h - im.shape[0]), (0, w - im.shape[1]), (0, 0))) for im in images])
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert seen == dict(shape=(3, 16, 16, 3), dynamic=True, name=seen["name"], dtype=flow.float32)
    assert seen["name"].startswith("ImageBatchAlign_")


def test_batch_align_static_output_pads_to_its_shape_and_refuses_a_larger_image(tmp_path):
    flow.clear_default_session()
    rng = np.random.default_rng(4)
    images = _images(rng, SIZES)
    directory = _records(tmp_path, [_png(im) for im in images])

    def build(shape):
        @flow.global_function()
        def job() -> tp.Numpy:
            decoded = flow.image_decode(_encoded(flow, directory, 3), color_space="RGB")
            return flow.image.batch_align(decoded, shape, flow.uint8, 8, dynamic_out=False)
        return job

    got = build((16, 8, 3))()
    assert got.shape == (3, 16, 8, 3)
    for im, g in zip(images, got):
        np.testing.assert_array_equal(g, np.pad(im, ((0, 16 - im.shape[0]), (0, 8 - im.shape[1]), (0, 0))))
    flow.clear_default_session()
    with pytest.raises(flow.OpRunError, match=r"aligned to 8, is 16 x 8; attr 'shape' \(12, 8, 3\) holds at most"):
        build((12, 8, 3))()


@pytest.mark.parametrize("kwargs, message", [
    ({"alignment": 3}, "attr 'alignment' must be 0 or a power of 2, received 3"),
    ({"shape": (8, 8)}, r"attr 'shape' must be the \(H, W, C\)"),
    ({"dtype": flow.int32}, "attr 'data_type' must be uint8 or float32"),
])
def test_batch_align_build_errors(kwargs, message):
    flow.clear_default_session()
    args = {**dict(shape=(8, 8, 3), dtype=flow.uint8, alignment=4), **kwargs}

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3, 3, 3), dtype=flow.uint8)) -> tp.Numpy:
        return flow.image_batch_align(flow.tensor_to_tensor_buffer(x, instance_dims=3), **args)

    with pytest.raises(flow.JobBuildError, match=message):
        job(np.zeros((2, 3, 3, 3), np.uint8))


# ------------------------------------------------------------------ image_random_crop


def _coordinates(h, w):
    """A float32 image whose pixel (y, x) holds (y, x, y * w + x): a crop shows where it was cut."""
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([yy, xx, yy * w + xx], 2).astype(np.float32)


def _crop_job(seed, area, ratio, n=6, h=20, w=30):
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((n, h, w, 3))) -> tp.Bundle[tp.ListNumpy]:
        crops = flow.image_random_crop(flow.tensor_to_tensor_buffer(x, instance_dims=3), seed=seed,
                                       random_area=area, random_aspect_ratio=ratio)
        return flow.tensor_buffer_to_list_of_tensors(crops, (h, w, 3), flow.float32, dynamic_out=True)

    x = np.stack([_coordinates(h, w)] * n)
    return [[o[0] for o in job(x)] for _ in range(3)]


def test_random_crop_keeps_windows_whose_area_and_aspect_ratio_lie_in_the_ranges():
    area, ratio = [0.2, 0.6], [0.5, 2.0]
    runs = _crop_job(5, area, ratio)
    h, w = 20, 30
    windows = set()
    for run in runs:
        for crop in run:
            ch, cw = crop.shape[:2]
            y0, x0 = int(crop[0, 0, 0]), int(crop[0, 0, 1])
            np.testing.assert_array_equal(crop, _coordinates(h, w)[y0:y0 + ch, x0:x0 + cw])  # a window of the input
            # the drawn area and ratio, before the sides are rounded to whole pixels
            assert area[0] * h * w * 0.8 <= ch * cw <= area[1] * h * w * 1.2, (ch, cw)
            assert ratio[0] * 0.8 <= cw / ch <= ratio[1] * 1.25, (ch, cw)
            windows.add((y0, x0, ch, cw))
    assert len(windows) > 6   # new windows per image and per run
    again = _crop_job(5, area, ratio)
    for a, b in zip(runs, again):      # a fixed seed repeats the sequence
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    other = _crop_job(6, area, ratio)
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(runs[0], other[0]))


def test_random_crop_names_the_first_op_name_and_later_ones_by_prefix():
    flow.clear_default_session()
    names = []

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 4, 4, 3))) -> tp.Numpy:
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=3)
        a = flow.image.random_crop(buf, random_area=[1.0, 1.0], random_aspect_ratio=[1.0, 1.0])
        b = flow.image_random_crop(a, random_area=[1.0, 1.0], random_aspect_ratio=[1.0, 1.0])
        names.extend([a.op_name, b.op_name])
        return flow.tensor_buffer_to_tensor(b, flow.float32, (4, 4, 3))

    x = np.random.default_rng(0).random((2, 4, 4, 3), np.float32)
    np.testing.assert_array_equal(job(x), x)     # the whole area at the image's own ratio: the whole image
    assert names[0] == "ImageRandomCrop" and names[1].startswith("ImageRandomCrop_")


def test_random_crop_build_errors():
    for kwargs, message in [({"random_area": [0.5, 0.2]}, "attr 'random_area' must be"),
                            ({"random_aspect_ratio": [0.0, 1.0]}, "attr 'random_aspect_ratio' must be"),
                            ({"num_attempts": 0}, "attr 'num_attempts' must be >= 1")]:
        flow.clear_default_session()

        @flow.global_function()
        def job(x: tp.Numpy.Placeholder((2, 4, 4, 3))) -> tp.Numpy:
            crops = flow.image_random_crop(flow.tensor_to_tensor_buffer(x, instance_dims=3), **kwargs)
            return flow.tensor_buffer_to_tensor(crops, flow.float32, (4, 4, 3))

        with pytest.raises(flow.JobBuildError, match=message):
            job(np.zeros((2, 4, 4, 3), np.float32))


# ------------------------------------------------------------------ boxes and polygons


def _object_job(fn, arrays, width, dtype):
    """``fn(flow, buffers, *dense)`` on the tensor buffers of ``arrays[0]`` (instance (n, width))."""
    flow.clear_default_session()
    first, rest = arrays[0], arrays[1:]
    n = first.shape[1]

    @flow.global_function()
    def job(a: tp.Numpy.Placeholder(first.shape, dtype=getattr(flow, dtype)),
            b: tp.Numpy.Placeholder(rest[0].shape, dtype=flow.int32 if rest[0].dtype == np.int32 else flow.float32),
            c: tp.Numpy.Placeholder(rest[-1].shape, dtype=flow.int8 if rest[-1].dtype == np.int8 else
                                    flow.float32)) -> tp.Numpy:
        out = fn(flow, flow.tensor_to_tensor_buffer(a, instance_dims=2), b, c)
        return flow.tensor_buffer_to_tensor(out, getattr(flow, dtype), (n, width))

    return job(*arrays) if len(arrays) == 3 else job(*arrays, arrays[-1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bbox_flip_and_scale_by_hand(dtype):
    boxes = np.array([[[1, 2, 5, 7], [0, 0, 9, 4]], [[3, 1, 4, 2], [2.5, 3.5, 6.5, 8.0]]], dtype)
    sizes = np.array([[10, 8], [12, 9]], np.int32)       # (width, height)
    codes = np.array([1, 16], np.int8)
    flipped = _object_job(lambda f, b, s, c: f.object_bbox_flip(b, s, c), [boxes, sizes, codes], 4, dtype)
    # image 0 left-right: (W - xmax - 1, ymin, W - xmin - 1, ymax) with W = 10
    # image 1 upside down: (xmin, H - ymax - 1, xmax, H - ymin - 1) with H = 9
    np.testing.assert_array_equal(flipped, np.array([[[4, 2, 8, 7], [0, 0, 9, 4]],
                                                     [[3, 6, 4, 7], [2.5, 0.0, 6.5, 4.5]]], dtype))
    scale = np.array([[2.0, 0.5], [0.25, 3.0]], np.float32)
    scaled = _object_job(lambda f, b, s, c: f.object_bbox_scale(b, s), [boxes, scale, scale], 4, dtype)
    np.testing.assert_array_equal(scaled, np.array([[[2, 1, 10, 3.5], [0, 0, 18, 2]],
                                                    [[0.75, 3, 1, 6], [0.625, 10.5, 1.625, 24]]], dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_polygon_flip_and_scale_by_hand(dtype):
    points = np.array([[[1, 2], [5, 7], [0, 8]], [[3, 1], [4.5, 2], [12, 0]]], dtype)
    sizes = np.array([[10, 8], [12, 9]], np.int32)
    codes = np.array([17, 1], np.int8)
    flipped = _object_job(lambda f, p, s, c: f.object_segmentation_polygon_flip(p, s, c), [points, sizes, codes],
                          2, dtype)
    # image 0 both ways: (W - x, H - y) = (10 - x, 8 - y); image 1 left-right: 12 - x (no "- 1", unlike boxes)
    np.testing.assert_array_equal(flipped, np.array([[[9, 6], [5, 1], [10, 0]], [[9, 1], [7.5, 2], [0, 0]]], dtype))
    scale = np.array([[2.0, 0.5], [0.25, 3.0]], np.float32)
    scaled = _object_job(lambda f, p, s, c: f.object_segmentation_polygon_scale(p, s), [points, scale, scale],
                         2, dtype)
    np.testing.assert_array_equal(scaled, np.array([[[2, 1], [10, 3.5], [0, 4]], [[0.75, 3], [1.125, 6], [3, 0]]],
                                                   dtype))


def test_object_ops_refuse_boxes_of_another_width_and_undefined_flip_codes():
    boxes = np.zeros((2, 3, 4), np.float32)
    sizes = np.array([[10, 8], [12, 9]], np.int32)
    with pytest.raises(flow.OpRunError, match=r"flip_code\[0\] is 3"):
        _object_job(lambda f, b, s, c: f.object_bbox_flip(b, s, c), [boxes, sizes, np.array([3, 0], np.int8)], 4,
                    "float32")
    with pytest.raises(flow.OpRunError, match=r"box set 0 must have shape \(n, 4\), received \(3, 2\)"):
        _object_job(lambda f, b, s, c: f.object_bbox_flip(b, s, c),
                    [np.zeros((2, 3, 2), np.float32), sizes, np.array([1, 0], np.int8)], 2, "float32")


# ------------------------------------------------------------------ polygons to masks


def _mask_job(points, index, sizes, segms, height, width):
    flow.clear_default_session()

    @flow.global_function()
    def job(p: tp.Numpy.Placeholder(points.shape), i: tp.Numpy.Placeholder(index.shape, dtype=flow.int32),
            s: tp.Numpy.Placeholder(sizes.shape, dtype=flow.int32)) -> tp.Numpy:
        masks = flow.object_segmentation_polygon_to_mask(flow.tensor_to_tensor_buffer(p, instance_dims=2),
                                                         flow.tensor_to_tensor_buffer(i, instance_dims=2), s)
        assert masks.op_name.startswith("ObjectSegmPolyToMask_")
        return flow.tensor_buffer_to_tensor(masks, flow.int8, (segms, height, width))

    return job(points, index, sizes)


# a diamond with corners (3, 0), (6, 3), (3, 6), (0, 3) drawn by hand on an 8 x 7 grid: the
# 8-connected edges are the diagonals (boundary pixels set), the rows between them filled
DIAMOND = np.array([[0, 0, 0, 1, 0, 0, 0],
                    [0, 0, 1, 1, 1, 0, 0],
                    [0, 1, 1, 1, 1, 1, 0],
                    [1, 1, 1, 1, 1, 1, 1],
                    [0, 1, 1, 1, 1, 1, 0],
                    [0, 0, 1, 1, 1, 0, 0],
                    [0, 0, 0, 1, 0, 0, 0],
                    [0, 0, 0, 0, 0, 0, 0]], np.int8)
# a triangle (0, 0), (6, 0), (0, 4): rows 0..3 filled up to x = 6 - 1.5 y (6, 4.5, 3, 1.5: the
# span ends at the floor), plus the hypotenuse's 8-connected line from its left end (0, 4):
# (0, 4) (1, 3) (2, 3) (3, 2) (4, 1) (5, 1) (6, 0), which adds (5, 1) and (2, 3)
TRIANGLE = np.array([[1, 1, 1, 1, 1, 1, 1],
                     [1, 1, 1, 1, 1, 1, 0],
                     [1, 1, 1, 1, 0, 0, 0],
                     [1, 1, 1, 0, 0, 0, 0],
                     [1, 0, 0, 0, 0, 0, 0],
                     [0, 0, 0, 0, 0, 0, 0],
                     [0, 0, 0, 0, 0, 0, 0],
                     [0, 0, 0, 0, 0, 0, 0]], np.int8)


def test_polygon_to_mask_matches_hand_drawn_masks_edges_included():
    # segmentation 0: the diamond; segmentation 1: the triangle, its corners given off the
    # grid by less than a half (rounded half to even: 6.5 -> 6, 0.5 -> 0, 3.5 -> 4)
    points = np.array([[[3, 0], [6, 3], [3, 6], [0, 3], [0.4, -0.2], [6.5, 0.5], [0.0, 3.5]]], np.float32)
    index = np.array([[[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0], [0, 0, 1], [1, 0, 1], [2, 0, 1]]], np.int32)
    got = _mask_job(points, index, np.array([[7, 8]], np.int32), 2, 8, 7)
    np.testing.assert_array_equal(got[0, 0], DIAMOND)
    np.testing.assert_array_equal(got[0, 1], TRIANGLE)


def test_polygons_of_one_segmentation_fill_even_odd_and_index_rows_must_count_in_order():
    # two polygons of one segmentation: a 7 x 7 square and a 3 x 3 square inside it: the
    # inner one's interior is a hole (even-odd), its edges are drawn
    outer, inner = [[0, 0], [6, 0], [6, 6], [0, 6]], [[2, 2], [4, 2], [4, 4], [2, 4]]
    mask = fill_polygons([outer, inner], 7, 7)
    want = np.ones((7, 7), np.int8)
    want[3, 3] = 0
    np.testing.assert_array_equal(mask, want)
    points = np.array([outer + inner], np.float32)
    index = np.array([[[p, q, 0] for q in range(2) for p in range(4)]], np.int32)
    np.testing.assert_array_equal(_mask_job(points, index, np.array([[7, 7]], np.int32), 1, 7, 7)[0, 0], want)
    index[0, 5] = (2, 1, 0)   # point 1 of polygon 1 given as point 2
    with pytest.raises(flow.OpRunError, match=r"poly_index row 5 is \(2, 1, 0\); expected point 1 of polygon 1"):
        _mask_job(points, index, np.array([[7, 7]], np.int32), 1, 7, 7)


def test_polygon_to_mask_clips_polygons_that_leave_the_image():
    # a rectangle from (1, 1) to (20, 3) on a 6 x 5 image: rows 1..3 filled from x = 1 to the
    # right border (its right edge lies outside, so the spans alone reach column 5)
    points = np.array([[[1, 1], [20, 1], [20, 3], [1, 3]]], np.float64)
    index = np.array([[[p, 0, 0] for p in range(4)]], np.int32)
    want = np.zeros((5, 6), np.int8)
    want[1:4, 1:] = 1
    np.testing.assert_array_equal(_mask_job(points.astype(np.float32), index, np.array([[6, 5]], np.int32), 1, 5,
                                            6)[0, 0], want)
    np.testing.assert_array_equal(fill_polygons([[(x - 30, y) for x, y in points[0]]], 5, 6), np.zeros((5, 6)))


def test_fill_polygons_matches_opencv_fillpoly_when_installed():
    cv2 = pytest.importorskip("cv2", reason="OpenCV (opencv-python-headless) is not installed")
    rng = np.random.default_rng(7)
    for _ in range(300):
        h, w = int(rng.integers(1, 24)), int(rng.integers(1, 24))
        polys = [np.stack([rng.integers(0, w, k), rng.integers(0, h, k)], 1).astype(np.int32)
                 for k in rng.integers(1, 7, size=int(rng.integers(1, 4)))]
        want = np.zeros((h, w), np.int8)
        cv2.fillPoly(want, polys, 1, cv2.LINE_8)
        np.testing.assert_array_equal(fill_polygons([p.tolist() for p in polys], h, w), want)


# ------------------------------------------------------------------ the API


def test_flow_image_aliases_are_the_same_functions():
    assert flow.image.random_crop is flow.image_random_crop
    assert flow.image.batch_align is flow.image_batch_align
    assert flow.image.decode is flow.image_decode
    assert flow.image.flip is flow.image_flip
    assert flow.image.normalize is flow.image_normalize


@pytest.mark.parametrize("call, message", [
    (lambda: flow.image_flip("x", None), r"flow.image_flip: argument 'image'"),
    (lambda: flow.image_normalize(None, [1.0], [0.0]), r"flow.image_normalize: argument 'image'"),
    (lambda b: flow.image_normalize(b, 1.0, [0.0]), r"flow.image_normalize: argument 'std'"),
    (lambda b: flow.image_normalize(b, ["a"], [0.0]), r"flow.image_normalize: argument 'std'"),
    (lambda: flow.image_decode(3), r"flow.image_decode: argument 'images_bytes_buffer'"),
    (lambda b: flow.image_decode(b, dtype="uint8"), r"flow.image_decode: argument 'dtype'"),
    (lambda b: flow.image_batch_align(b, 8, flow.uint8, 4), r"flow.image_batch_align: argument 'shape'"),
    (lambda b: flow.image_batch_align(b, (8, 8, 3), flow.uint8, 2.5), r"flow.image_batch_align: argument 'alignment'"),
    (lambda b: flow.image_batch_align(b, (8, 8, 3), flow.uint8, 4, dynamic_out=1),
     r"flow.image_batch_align: argument 'dynamic_out'"),
    (lambda b: flow.image_random_crop(b, seed=1.5), r"flow.image_random_crop: argument 'seed'"),
    (lambda b: flow.image_random_crop(b, random_area=[0.5]), r"flow.image_random_crop: argument 'random_area'"),
    (lambda b: flow.image_random_crop(b, num_attempts="3"), r"flow.image_random_crop: argument 'num_attempts'"),
    (lambda b: flow.image_random_crop(b, name=None), r"flow.image_random_crop: argument 'name'"),
    (lambda b: flow.object_bbox_flip(b, None, None), r"flow.object_bbox_flip: argument 'image_size'"),
    (lambda b: flow.object_bbox_scale(b, [1.0, 1.0]), r"flow.object_bbox_scale: argument 'scale'"),
    (lambda b: flow.object_segmentation_polygon_flip(b, b, 1), r"argument 'flip_code'"),
    (lambda b: flow.object_segmentation_polygon_scale(None, b), r"argument 'poly'"),
    (lambda b: flow.object_segmentation_polygon_to_mask(b, (1,), b), r"argument 'poly_index'"),
    (lambda b: flow.image_flip(b, b, name=5), r"flow.image_flip: argument 'name'"),
])
def test_bad_arguments_raise_argument_errors_naming_the_function_and_argument(call, message):
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3, 3, 3))) -> tp.Numpy:
        buf = flow.tensor_to_tensor_buffer(x, instance_dims=3)
        call(buf) if call.__code__.co_argcount else call()
        return x

    with pytest.raises(flow.ArgumentError, match=message):
        job(np.zeros((2, 3, 3, 3), np.float32))


def _flip_and_scale_op_names(last_dim, flip, scale):
    """The default op names of ``flip(b, size, code)`` and ``scale(b, factors)`` applied to a
    tensor_buffer of (3, last_dim) elements (boxes: 4, polygon points: 2)."""
    flow.clear_default_session()
    names = []

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3, last_dim), dtype=flow.float32),
            s: tp.Numpy.Placeholder((2, 2), dtype=flow.int32),
            c: tp.Numpy.Placeholder((2,), dtype=flow.int8),
            k: tp.Numpy.Placeholder((2, 2), dtype=flow.float32)) -> tp.Numpy:
        b = flow.tensor_to_tensor_buffer(x, instance_dims=2)
        names.extend([flip(b, s, c).op_name, scale(b, k).op_name])
        return x

    job(np.zeros((2, 3, last_dim), np.float32), np.ones((2, 2), np.int32), np.zeros(2, np.int8),
        np.ones((2, 2), np.float32))
    return names


def test_default_op_name_prefixes_are_oneflows():
    bbox_flip, bbox_scale = _flip_and_scale_op_names(4, flow.object_bbox_flip, flow.object_bbox_scale)
    assert bbox_flip.startswith("ObjectBboxFlip_") and bbox_scale.startswith("ObjectBboxScale_")
    # OneFlow names both polygon ops with the flip op's (misspelt) prefix
    poly_flip, poly_scale = _flip_and_scale_op_names(2, flow.object_segmentation_polygon_flip,
                                                     flow.object_segmentation_polygon_scale)
    assert poly_flip.startswith("ObjectSegmPolyFilp_") and poly_scale.startswith("ObjectSegmPolyFilp_")
