"""The OFRecord data pipeline: file format, shards, shuffling, readers in jobs, the
shard-writing tool and error messages."""
import io
import os
import re
import struct

import numpy as np
import pytest
from PIL import Image

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import OpRunError
from graphfront.ofrecord import OFRecord, ShardWriter, bytes_feature, float_feature, int32_feature, int64_feature
from graphfront.ofrecord.reader import record_stream
from graphfront.ofrecord.records import OFRecordFileError, iter_raw_records, read_records, shard_paths, write_records
from graphfront.tools import ofrecord as tool


def _records(n, offset=0):
    return [OFRecord(feature={"id": int64_feature(i + offset), "x": float_feature([i * 0.5, -i]),
                              "b": bytes_feature(bytes([i % 256]) * 3)}) for i in range(n)]


def test_file_layout_is_int64_length_then_serialized_record(tmp_path):
    recs = _records(3)
    path = str(tmp_path / "part-0")
    assert write_records(path, recs) == 3
    data = open(path, "rb").read()
    expected = b"".join(struct.pack("<q", len(r.SerializeToString())) + r.SerializeToString() for r in recs)
    assert data == expected
    assert read_records(path) == recs


def test_shards_round_trip_bit_identical(tmp_path):
    recs = _records(10)
    with ShardWriter(str(tmp_path), 10, data_part_num=3, part_name_suffix_length=5) as w:
        for r in recs:
            w.write(r)
    paths = shard_paths(str(tmp_path), 3, "part-", 5)
    assert [os.path.basename(p) for p in paths] == ["part-00000", "part-00001", "part-00002"]
    raws = [raw for p in paths for raw in iter_raw_records(p)]
    assert raws == [r.SerializeToString() for r in recs]
    # rewriting what was read gives the same bytes
    write_records(str(tmp_path / "copy"), raws)
    assert open(tmp_path / "copy", "rb").read() == b"".join(open(p, "rb").read() for p in paths)


@pytest.mark.parametrize("n, parts", [(4, 3), (9, 4), (5, 5), (10, 3)])
def test_every_shard_is_written_with_balanced_sizes(tmp_path, n, parts):
    recs = _records(n)
    with ShardWriter(str(tmp_path), n, data_part_num=parts) as w:
        for r in recs:
            w.write(r)
    sizes = [len(list(iter_raw_records(p))) for p in shard_paths(str(tmp_path), parts)]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True), sizes
    raws = [raw for p in shard_paths(str(tmp_path), parts) for raw in iter_raw_records(p)]
    assert raws == [r.SerializeToString() for r in recs]


def test_unpadded_shard_names_and_missing_shard(tmp_path):
    write_records(str(tmp_path / "part-0"), _records(1))
    assert shard_paths(str(tmp_path), 1) == [str(tmp_path / "part-0")]
    with pytest.raises(FileNotFoundError, match="part-1 does not exist"):
        shard_paths(str(tmp_path), 2)


def test_truncated_file_is_an_error_naming_the_record(tmp_path):
    path = str(tmp_path / "part-0")
    write_records(path, _records(2))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 2)
    with pytest.raises(OFRecordFileError, match="record 1 is truncated"):
        list(iter_raw_records(path))


def _ids(raws):
    return [OFRecord.FromString(r).feature["id"].int64_list.value[0] for r in raws]


def _take(stream, n):
    return [next(stream) for _ in range(n)]


def test_stream_order_epochs_and_seeded_shuffle(tmp_path):
    for i in range(3):
        write_records(str(tmp_path / f"part-{i}"), _records(4, offset=4 * i))
    paths = shard_paths(str(tmp_path), 3)
    assert _ids(_take(record_stream(paths), 14)) == list(range(12)) + [0, 1]
    a = _ids(_take(record_stream(paths, random_shuffle=True, shuffle_buffer_size=5, seed=7), 24))
    b = _ids(_take(record_stream(paths, random_shuffle=True, shuffle_buffer_size=5, seed=7), 24))
    c = _ids(_take(record_stream(paths, random_shuffle=True, shuffle_buffer_size=5, seed=8), 24))
    assert a == b and a != c
    assert a[:12] != list(range(12))
    assert set(a) == set(range(12))
    e = _ids(_take(record_stream(paths, shuffle_after_epoch=True, seed=3), 36))
    epochs = [e[i:i + 12] for i in (0, 12, 24)]
    for ep in epochs:   # shard order permuted, records inside a shard in order
        blocks = [ep[j:j + 4] for j in (0, 4, 8)]
        assert sorted(b[0] for b in blocks) == [0, 4, 8] and all(b == list(range(b[0], b[0] + 4)) for b in blocks)
    assert len({tuple(ep) for ep in epochs}) > 1


def _write_mnist_like(tmp_path, n=12, parts=2):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    tool.write_arrays(str(tmp_path), images, labels, data_part_num=parts)
    return images, labels


def test_reader_in_a_job_yields_consecutive_batches_across_epochs(tmp_path):
    images, labels = _write_mnist_like(tmp_path, n=12, parts=2)

    @flow.global_function(type="predict")
    def read_job() -> tp.Bundle[tp.Numpy]:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=5, data_part_num=2, part_name_suffix_length=5)
        image = flow.data.OFRecordRawDecoder(rec, "images", shape=(1, 28, 28), dtype=flow.uint8)
        label = flow.data.OFRecordRawDecoder(rec, "labels", shape=(), dtype=flow.int32)
        return image, label

    order = [i % 12 for i in range(15)]
    for k in range(3):
        image, label = read_job()
        idx = order[5 * k:5 * k + 5]
        np.testing.assert_array_equal(image[:, 0], images[idx])
        np.testing.assert_array_equal(label, labels[idx])


def test_seeded_shuffled_reader_is_reproducible_across_sessions(tmp_path):
    _write_mnist_like(tmp_path, n=20, parts=3)

    def run():
        flow.clear_default_session()

        @flow.global_function(type="predict")
        def read_job() -> tp.Numpy:
            rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=4, data_part_num=3, part_name_suffix_length=5,
                                            random_shuffle=True, shuffle_buffer_size=8, seed=11)
            return flow.data.OFRecordRawDecoder(rec, "images", shape=(784,), dtype=flow.uint8)
        return np.concatenate([read_job() for _ in range(6)])

    first, second = run(), run()
    np.testing.assert_array_equal(first, second)


def test_decoder_errors_name_the_op_and_the_feature(tmp_path):
    _write_mnist_like(tmp_path, n=4, parts=1)

    @flow.global_function(type="predict")
    def bad_shape() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=2, part_name_suffix_length=5)
        return flow.data.OFRecordRawDecoder(rec, "images", shape=(10,), dtype=flow.uint8, name="pixels")

    # a record that does not fit is an OpRunError at the user's call (was a bare ValueError)
    with pytest.raises(OpRunError, match=r"op 'pixels': feature 'images' has 784 values, shape \(10,\) needs 10"):
        bad_shape()
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def missing() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=2, part_name_suffix_length=5)
        return flow.data.OFRecordRawDecoder(rec, "image", shape=(784,), dtype=flow.uint8, name="pixels")

    with pytest.raises(OpRunError, match=r"op 'pixels': the OFRecord has no feature 'image' \(it has \['images', "
                                        r"'labels'\]\)"):
        missing()


@pytest.mark.parametrize("reader_kw, decoder_kw, message", [
    ({"seed": "7"}, {}, "flow.data.ofrecord_reader: argument 'seed' expects an int, received str '7'"),
    ({}, {"shape": 784}, "flow.data.OFRecordRawDecoder: argument 'shape' expects a list or tuple of ints"),
])
def test_reader_and_decoder_arguments_of_the_wrong_type(tmp_path, reader_kw, decoder_kw, message):
    # int() and tuple() raised bare errors inside graphfront
    _write_mnist_like(tmp_path, n=4, parts=1)

    @flow.global_function(type="predict")
    def read_job() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=2, part_name_suffix_length=5, **reader_kw)
        return flow.data.OFRecordRawDecoder(rec, "images", **{"shape": (784,), "dtype": flow.uint8, **decoder_kw})

    with pytest.raises(flow.JobBuildError, match=re.escape(message)):
        read_job()


def test_missing_shard_is_a_build_error(tmp_path):
    @flow.global_function(type="predict")
    def read_job() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=2, data_part_num=2)
        return flow.data.OFRecordRawDecoder(rec, "labels", shape=(), dtype=flow.int32)

    with pytest.raises(flow.JobBuildError, match="OFRecordReader.*part-0 does not exist"):
        read_job()


def test_raw_decoder_truncate_and_zero_padding(tmp_path):
    write_records(str(tmp_path / "part-0"), [OFRecord(feature={"v": int32_feature([1, 2, 3])}),
                                             OFRecord(feature={"v": int32_feature([4])})])

    @flow.global_function(type="predict")
    def read_job() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=2)
        return flow.data.OFRecordRawDecoder(rec, "v", shape=(2,), dtype=flow.int64, truncate=True,
                                            dim1_varying_length=True)

    np.testing.assert_array_equal(read_job(), [[1, 2], [4, 0]])


def test_decode_random_draws_new_batches_of_the_initializer(tmp_path):
    @flow.global_function(type="predict")
    def random_job() -> tp.Numpy:
        return flow.data.decode_random((3, 4), flow.float, batch_size=5,
                                       initializer=flow.random_uniform_initializer(2.0, 3.0))

    a, b = random_job(), random_job()
    assert a.shape == (5, 3, 4) and a.dtype == np.float32
    assert (a >= 2).all() and (a < 3).all() and not np.array_equal(a, b)


def test_tool_writes_an_image_folder(tmp_path):
    src = tmp_path / "src"
    rng = np.random.default_rng(1)
    written = {}
    for cls in ("cat", "dog"):
        (src / cls).mkdir(parents=True)
        for i in range(3):
            im = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(im).save(buf, format="PNG")
            (src / cls / f"{i}.png").write_bytes(buf.getvalue())
            written[buf.getvalue()] = (im, cls)
    (src / "dog" / "notes.txt").write_text("not an image")
    out = tmp_path / "out"
    assert tool.main(["folder", "--src", str(src), "--out", str(out), "--data-part-num", "2"]) == 0
    recs = [r for p in shard_paths(str(out), 2, "part-", 5) for r in read_records(p)]
    assert len(recs) == 6
    for r in recs:
        im, cls = written[r.feature["encoded"].bytes_list.value[0]]   # the file's bytes, as stored
        assert r.feature["class/label"].int32_list.value[0] == ("cat", "dog").index(cls)

    @flow.global_function(type="predict")
    def read_job() -> tp.Bundle[tp.Numpy]:
        image, label = flow.data.ofrecord_image_classification_reader(
            str(out), "encoded", "class/label", batch_size=6, data_part_num=2, part_name_suffix_length=5,
            color_space="RGB")
        return flow.tensor_buffer_to_tensor(image, dtype=flow.uint8, instance_shape=(6, 7, 3)), label

    images, labels = read_job()
    for r, im, label in zip(recs, images, labels):
        expected, cls = written[r.feature["encoded"].bytes_list.value[0]]
        np.testing.assert_array_equal(im, expected)
        assert label == ("cat", "dog").index(cls)


def test_image_buffer_crop_needs_a_crop_size(tmp_path):
    _write_mnist_like(tmp_path, n=2, parts=1)

    @flow.global_function(type="predict")
    def job() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=2, part_name_suffix_length=5)
        image = flow.data.OFRecordImageDecoder(rec, "images")
        return flow.image.CropMirrorNormalize(image)

    with pytest.raises(flow.JobBuildError, match="attrs 'crop_h', 'crop_w' must be > 0"):
        job()


def test_decode_batches_share_the_threads_only_for_large_items():
    """The decode ops map a batch on the caller's thread when its items are small (Python's
    per-image work holds the GIL), on the decode threads in runs of consecutive items when
    they are large; either way the results keep the batch's order."""
    import threading
    from graphfront.ops import data_ops

    def where(item):
        return threading.current_thread().name, item[0]

    small = [bytes([i]) * 100 for i in range(8)]
    large = [bytes([i]) * data_ops.THREADED_ITEM_BYTES for i in range(8)]
    caller = threading.current_thread().name
    assert data_ops._map(where, small) == [(caller, i) for i in range(8)]
    names, firsts = zip(*data_ops._map(where, large))
    assert list(firsts) == list(range(8))
    assert all(n.startswith("graphfront-decode") for n in names) == (data_ops._DECODE_THREADS > 1)


def test_prefetcher_hands_items_in_order_and_stops_its_process():
    from graphfront.ofrecord.reader import Prefetcher
    pf = Prefetcher(lambda: iter(range(100)), depth=2)
    assert [next(pf) for _ in range(5)] == [0, 1, 2, 3, 4]
    pf.close()
    assert not pf._process.is_alive()


def test_prefetcher_is_stopped_only_by_the_process_that_started_it():
    """A forked process (another reader's worker) that collects a prefetcher it inherited
    must not stop that prefetcher's worker, nor try to join a process not its child."""
    from graphfront.ofrecord.reader import Prefetcher
    pf = Prefetcher(lambda: iter(range(100)), depth=2)
    assert next(pf) == 0
    child = os.fork()
    if child == 0:  # (the child's finalizer is its copy of the parent's)
        try:
            pf.close()
        finally:
            os._exit(0 if not pf._stop.is_set() else 3)
    assert os.waitpid(child, 0)[1] == 0
    assert not pf._stop.is_set() and [next(pf) for _ in range(3)] == [1, 2, 3]
    pf.close()
    assert not pf._process.is_alive()


def test_corrupted_records_are_ofrecord_file_errors_without_reading_a_bogus_length(tmp_path):
    path = tmp_path / "part-0"
    good = _records(1)[0].SerializeToString()
    path.write_bytes(struct.pack("<q", len(good)) + good + struct.pack("<q", 2 ** 62) + b"\0" * 16)
    with pytest.raises(OFRecordFileError, match=r"record 1 is truncated \(16 of 4611686018427387904 bytes\)"):
        list(iter_raw_records(str(path)))
    path.write_bytes(struct.pack("<q", 3) + b"\xff\xff\xff")
    with pytest.raises(flow.GraphfrontError, match=r"part-0: record 0: not a serialized OFRecord"):
        read_records(str(path))


def test_prefetcher_raises_the_producers_error():
    from graphfront.ofrecord.reader import Prefetcher

    def items():
        yield 1
        raise ValueError("bad shard")

    pf = Prefetcher(items, depth=2)
    assert next(pf) == 1
    with pytest.raises(ValueError, match="bad shard"):
        next(pf)


def test_image_resize_with_only_the_deprecated_color_space_uses_target_size(tmp_path):
    # OneFlow: a deprecated argument alone (color_space) keeps target_size and makes Resize
    # return the image blob only; resize_x/resize_y replace target_size only when both are > 0
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    for i in range(2):
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (7, 6), dtype=np.uint8)).save(src / f"{i}.png")
    assert tool.main(["folder", "--src", str(tmp_path / "src"), "--out", str(tmp_path / "out"),
                      "--data-part-num", "1"]) == 0
    size = (5, 4)  # (width, height)

    @flow.global_function(type="predict")
    def job() -> tp.Bundle[tp.Numpy]:
        rec = flow.data.ofrecord_reader(str(tmp_path / "out"), batch_size=2, part_name_suffix_length=5)
        image = flow.data.OFRecordImageDecoder(rec, "encoded", color_space="GRAY")
        new_api, _, _ = flow.image.Resize(image, target_size=size, channels=1)
        only_image = flow.image.resize(image, target_size=list(size), color_space="GRAY")
        by_xy = flow.image.resize(image, target_size=(9, 9), resize_x=size[0], resize_y=size[1],
                                  color_space="GRAY")
        return new_api, only_image, by_xy

    new_api, only_image, by_xy = job()
    assert new_api.shape == (2, size[1], size[0], 1)
    np.testing.assert_array_equal(only_image, new_api)
    np.testing.assert_array_equal(by_xy, new_api)


def _write_images(tmp_path, shapes, fmt="PNG"):
    """One shard of records {"encoded": image bytes, "class/label": i}; returns the RGB arrays."""
    rng = np.random.default_rng(3)
    arrays, recs = [], []
    for i, (h, w) in enumerate(shapes):
        im = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(im).save(buf, format=fmt)
        arrays.append(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))
        recs.append(OFRecord(feature={"encoded": bytes_feature(buf.getvalue()), "class/label": int32_feature(i)}))
    write_records(os.path.join(tmp_path, "part-00000"), recs)
    return arrays


# (H, W), target_size, min_size, max_size, resize_side -> expected (new width, new height), worked out by
# hand from OneFlow's rule (image_resize_kernels.cpp): the chosen side becomes target_size, the other
# round-half-even(target / aspect), bounded by max_size (shorter-side mode) or min_size (longer-side mode)
KEEP_ASPECT_CASES = [
    ((40, 30), 24, None, None, "shorter", (24, 32)),   # 24 * 40 / 30 = 32
    ((30, 50), 24, None, None, "shorter", (40, 24)),   # 24 * 50 / 30 = 40
    ((16, 20), 10, None, None, "shorter", (12, 10)),   # 10 * 20 / 16 = 12.5 -> 12 (half to even)
    ((20, 61), 24, None, 60, "shorter", (60, 20)),     # 73.2 > 60: longer 60, shorter 60 * 20 / 61 = 19.7 -> 20
    ((40, 30), 20, None, None, "longer", (15, 20)),    # shorter 20 * 30 / 40 = 15
    ((40, 30), 20, 18, None, "longer", (18, 24)),      # 15 < 18: shorter 18, longer 18 * 40 / 30 = 24
    ((33, 33), 17, None, None, "shorter", (17, 17)),
]


@pytest.mark.parametrize("hw,target,min_size,max_size,side,expected", KEEP_ASPECT_CASES)
def test_image_resize_keep_aspect_ratio_sizes_and_pixels(tmp_path, hw, target, min_size, max_size, side, expected):
    (src,) = _write_images(tmp_path, [hw])
    w, h = expected

    @flow.global_function(type="predict")
    def job() -> tp.Bundle[tp.Numpy]:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=1, part_name_suffix_length=5)
        image = flow.data.OFRecordImageDecoder(rec, "encoded", color_space="RGB")
        out, scale, new_size = flow.image.Resize(image, target_size=target, min_size=min_size, max_size=max_size,
                                                 keep_aspect_ratio=True, resize_side=side,
                                                 interpolation_type="bilinear")
        return flow.tensor_buffer_to_tensor(out, dtype=flow.uint8, instance_shape=(h, w, 3)), scale, new_size

    out, scale, new_size = job()
    assert new_size.dtype == np.int32 and new_size.tolist() == [[w, h]]
    np.testing.assert_allclose(scale, [[w / hw[1], h / hw[0]]], rtol=1e-6)
    np.testing.assert_array_equal(out[0], np.asarray(Image.fromarray(src).resize((w, h), Image.BILINEAR)))


def test_image_resize_keep_aspect_ratio_deprecated_forms_and_target_resize(tmp_path):
    srcs = _write_images(tmp_path, [(40, 30), (30, 40)])

    @flow.global_function(type="predict")
    def job() -> tp.Bundle[tp.Numpy]:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=2, part_name_suffix_length=5)
        image = flow.data.OFRecordImageDecoder(rec, "encoded", color_space="RGB")
        only_image = flow.image.Resize(image, resize_shorter=24)          # OneFlow <= 0.5 spelling: image only
        target, new_size, scale = flow.image.target_resize(image, 24)     # (image, new_size, scale) order
        same, _, _ = flow.image_resize(image, target_size=24, keep_aspect_ratio=True)
        # centre crops of the (24, 32) and (32, 24) images, as the validation loader does
        crops = [flow.image.CropMirrorNormalize(b, color_space="RGB", output_layout="NHWC", crop_h=24, crop_w=24)
                 for b in (only_image, target, same)]
        return tuple(crops) + (new_size, scale)

    a, b, c, new_size, scale = job()
    assert new_size.tolist() == [[24, 32], [32, 24]]
    np.testing.assert_allclose(scale, [[24 / 30, 32 / 40], [32 / 40, 24 / 30]], rtol=1e-6)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    for im, got in zip(srcs, a):
        h, w = im.shape[:2]
        r = np.asarray(Image.fromarray(im).resize((24, 32) if w < h else (32, 24), Image.BOX), np.float32)
        y0, x0 = (r.shape[0] - 24) // 2, (r.shape[1] - 24) // 2
        np.testing.assert_array_equal(got, r[y0:y0 + 24, x0:x0 + 24])   # "auto" shrinks by area averaging


def test_image_resize_keep_aspect_ratio_errors(tmp_path):
    _write_images(tmp_path, [(4, 4)])

    def build(**kw):
        flow.clear_default_session()

        @flow.global_function(type="predict")
        def job() -> tp.Numpy:
            rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=1, part_name_suffix_length=5)
            image = flow.data.OFRecordImageDecoder(rec, "encoded")
            out, scale, _ = flow.image.Resize(image, keep_aspect_ratio=True, **kw)
            return scale
        return job()

    with pytest.raises(flow.JobBuildError, match=r"target_size must be an int when keep_aspect_ratio.*\(3, 4\)"):
        build(target_size=(3, 4))
    with pytest.raises(flow.JobBuildError, match=r"resize_side must be 'shorter' or 'longer', received 'wider'"):
        build(target_size=3, resize_side="wider")
    with pytest.raises(flow.JobBuildError, match=r"attr 'max_size' must be >= target_size \(8\) or 0, received 5"):
        build(target_size=8, max_size=5)


def test_image_decoder_random_crop_resize(tmp_path):
    srcs = _write_images(tmp_path, [(20, 28), (31, 17), (16, 16)])

    def job_with(**kw):
        flow.clear_default_session()

        @flow.global_function(type="predict")
        def job() -> tp.Bundle[tp.Numpy]:
            rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=3, part_name_suffix_length=5)
            encoded = flow.data.OFRecordBytesDecoder(rec, "encoded")
            label = flow.data.OFRecordRawDecoder(rec, "class/label", shape=(), dtype=flow.int32)
            return flow.data.ImageDecoderRandomCropResize(encoded, target_width=12, target_height=10, **kw), label
        return job

    # the whole image (area fraction 1, aspect ratio of the image itself is not required: after
    # num_attempts misses the kernel keeps the whole image): RGB, bilinear, (N, H, W, 3) uint8
    out, label = job_with(random_area=[1.0, 1.0], random_aspect_ratio=[0.01, 0.01], num_attempts=1)()
    assert out.shape == (3, 10, 12, 3) and out.dtype == np.uint8 and label.tolist() == [0, 1, 2]
    for im, got in zip(srcs, out):
        np.testing.assert_array_equal(got, np.asarray(Image.fromarray(im).resize((12, 10), Image.BILINEAR)))
    # seeded crops repeat across sessions, and differ from the whole image
    first = job_with(seed=5, random_area=[0.2, 0.5])()[0]
    again = job_with(seed=5, random_area=[0.2, 0.5])()[0]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, out)
    # it feeds CropMirrorNormalize from uint8, as the ResNet loader's GPU-decoder path does
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def normalized() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=3, part_name_suffix_length=5)
        img = flow.data.image_decoder_random_crop_resize(flow.data.OFRecordBytesDecoder(rec, "encoded"), 12, 10,
                                                         random_area=[1.0, 1.0], random_aspect_ratio=[0.01, 0.01],
                                                         num_attempts=1)
        return flow.image.CropMirrorNormalize(img, color_space="RGB", mean=[1.0, 2.0, 3.0], std=[2.0, 2.0, 2.0])

    np.testing.assert_allclose(normalized(), (out.astype(np.float32) - [1, 2, 3]).transpose(0, 3, 1, 2) / 2.0)
    with pytest.raises(flow.JobBuildError, match=r"ImageDecoderRandomCropResize: random_area must be \[min, max\]"):
        job_with(random_area=[0.5])()


# ---------------------------------------------------------------- readers on several devices

def test_shard_range_is_oneflows_balanced_splitter():
    # BalancedSplitter(total, n).At(i): the first total % n parts take one more
    from graphfront.ofrecord.reader import shard_range
    assert [list(shard_range(4, (i, 2))) for i in range(2)] == [[0, 1], [2, 3]]
    assert [list(shard_range(5, (i, 3))) for i in range(3)] == [[0, 1], [2, 3], [4]]
    assert [list(shard_range(3, (i, 3))) for i in range(3)] == [[0], [1], [2]]
    assert list(shard_range(3)) == [0, 1, 2]
    with pytest.raises(ValueError, match="2 devices cannot share 1 shard"):
        shard_range(1, (0, 2))


def test_stream_of_one_device_reads_its_shards_in_every_epochs_common_order(tmp_path):
    for i in range(4):
        write_records(str(tmp_path / f"part-{i}"), _records(3, offset=10 * i))
    paths = shard_paths(str(tmp_path), 4)
    assert _ids(_take(record_stream(paths, part=(1, 2)), 7)) == [20, 21, 22, 30, 31, 32, 20]
    # shuffled shard order: each epoch the devices take their halves of one permutation of all the
    # shards (drawn alike from the seed), so together they read every record once an epoch
    parts = [_ids(_take(record_stream(paths, shuffle_after_epoch=True, seed=5, part=(d, 2)), 18)) for d in range(2)]
    full = _ids(_take(record_stream(paths, shuffle_after_epoch=True, seed=5), 36))
    for epoch in range(3):
        mine = [p[6 * epoch:6 * epoch + 6] for p in parts]
        assert mine[0] + mine[1] == full[12 * epoch:12 * epoch + 12]
        assert sorted(mine[0] + mine[1]) == [10 * s + r for s in range(4) for r in range(3)]


def test_prefetcher_in_a_daemonic_process_runs_on_a_thread(monkeypatch):
    # a daemonic process (a device's worker, see the two-device tests below) may not start
    # processes: Python raises "daemonic processes are not allowed to have children"
    import multiprocessing
    from graphfront.ofrecord.reader import Prefetcher
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True)
    pf = Prefetcher(lambda: iter(range(10)), depth=2)
    assert [next(pf) for _ in range(4)] == [0, 1, 2, 3] and type(pf._process).__name__ == "Thread"
    pf.close()
    assert not pf._process.is_alive()


def test_record_blobs_have_an_itemsize_for_layout_costs():
    assert flow.record.itemsize == flow.tensor_buffer.itemsize == 8
    assert flow.float16.itemsize == 2 and flow.int64.itemsize == 8


def test_unseeded_reader_draws_its_seed_from_torchs_generator(tmp_path):
    # every device of a job runs a reader placed on one device: their streams must agree,
    # so a reader without a seed takes one from torch's generator (flow.manual_seed repeats it)
    _write_mnist_like(tmp_path, n=20, parts=2)

    def run():
        flow.clear_default_session()
        flow.manual_seed(3)

        @flow.global_function(type="predict")
        def read_job() -> tp.Numpy:
            rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=4, data_part_num=2, part_name_suffix_length=5,
                                            random_shuffle=True, shuffle_buffer_size=8, shuffle_after_epoch=True)
            return flow.data.OFRecordRawDecoder(rec, "labels", shape=(), dtype=flow.int32)
        return np.concatenate([read_job() for _ in range(10)])

    first, second = run(), run()
    np.testing.assert_array_equal(first, second)


def _write_ids(tmp_path, parts, per_part):
    for i in range(parts):
        write_records(str(tmp_path / f"part-{i}"),
                      [OFRecord(feature={"id": int32_feature(100 * i + r)}) for r in range(per_part)])


@pytest.mark.slow  # spawns two worker processes
@pytest.mark.parametrize("batch_size", [4, 5])
def test_reader_on_two_devices_splits_the_batch_and_the_shards(tmp_path, batch_size):
    # OneFlow: OFRecordReader's outputs are split along the batch; device i of n reads its
    # part of the batch (BalancedSplitter: the first batch_size % n devices one more record)
    # per step from its balanced range of the shards
    _write_ids(tmp_path, parts=3, per_part=3)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @flow.global_function(type="predict")
    def read_job() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=batch_size, data_part_num=3)
        return flow.data.OFRecordRawDecoder(rec, "id", shape=(), dtype=flow.int32) * 1

    first, second = (batch_size + 1) // 2, batch_size // 2
    device0 = [0, 1, 2, 100, 101, 102] * 3   # shards 0 and 1
    device1 = [200, 201, 202] * 4            # shard 2
    for step in range(3):
        np.testing.assert_array_equal(read_job(), device0[first * step:first * (step + 1)]
                                      + device1[second * step:second * (step + 1)])
    assert job_sbp(read_job)["OFRecordReader"] == "S(0)"


def job_sbp(gf):
    from graphfront.framework import job_builder as jb
    from graphfront.parallel import sbp as _sbp
    proto = gf.graph.proto
    sbps = _sbp.blob_sbps(proto)
    return {jb.op_type_name(op): sbps[jb.op_outputs(op)[0][2]] for op in proto.net.op if jb.op_outputs(op)}


@pytest.mark.slow  # spawns two worker processes
def test_reader_with_more_devices_than_shards_is_an_error(tmp_path):
    _write_ids(tmp_path, parts=1, per_part=4)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @flow.global_function(type="predict")
    def read_job() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=4, data_part_num=1)
        return flow.data.OFRecordRawDecoder(rec, "id", shape=(), dtype=flow.int32)

    with pytest.raises(flow.JobBuildError, match="2 devices cannot share data_part_num=1 shard"):
        read_job()


# ------------------------------------------------------------------ legacy decode_ofrecord / BlobConf


def test_decode_ofrecord_raw_codec_decodes_each_blob_conf_in_order(tmp_path):
    # float "images" and int64 "labels" records decoded by RawCodec BlobConfs into
    # (batch, *shape) blobs of the BlobConf dtype (OneFlow's data_ops.decode_ofrecord)
    rng = np.random.default_rng(5)
    images = rng.random((4, 6)).astype(np.float32)
    labels = rng.integers(0, 10, size=4)
    write_records(os.path.join(tmp_path, "part-0"), [
        OFRecord(feature={"images": float_feature(list(map(float, images[i]))),
                          "labels": int64_feature(int(labels[i]))}) for i in range(4)])

    @flow.global_function(type="predict")
    def job() -> tp.Bundle[tp.Numpy]:
        x = flow.data.BlobConf("images", shape=(2, 3, 1), dtype=flow.float, codec=flow.data.RawCodec())
        y = flow.data.BlobConf("labels", shape=(1, 1), dtype=flow.int32, codec=flow.data.RawCodec())
        with pytest.warns(DeprecationWarning, match="decode_ofrecord is deprecated"):
            out = flow.data.decode_ofrecord(str(tmp_path), (x, y), data_part_num=1, batch_size=2)
        assert isinstance(out, tuple) and len(out) == 2
        return out

    for first in (0, 2):  # consecutive batches
        x, y = job()
        assert x.dtype == np.float32 and x.shape == (2, 2, 3, 1)
        assert y.dtype == np.int32 and y.shape == (2, 1, 1)
        np.testing.assert_array_equal(x, images[first:first + 2].reshape(2, 2, 3, 1))
        np.testing.assert_array_equal(y.reshape(-1), labels[first:first + 2])


@pytest.mark.parametrize("data_format,layout", [("channels_last", "NHWC"), ("channels_first", "NCHW")])
def test_decode_ofrecord_image_codec_decodes_resizes_and_normalizes(tmp_path, data_format, layout):
    rgb = _write_images(tmp_path, [(4, 5), (4, 5)])  # already at the target size: the resize keeps them
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]

    @flow.global_function(type="predict")
    def job() -> tp.Bundle[tp.Numpy]:
        codec = flow.data.ImageCodec([flow.data.ImagePreprocessor("bgr2rgb"), flow.data.ImageResizePreprocessor(5, 4)])
        norm = flow.data.NormByChannelPreprocessor(mean, std, data_format=data_format)
        image = flow.data.BlobConf("encoded", shape=(5, 4, 3), dtype=flow.float, codec=codec, preprocessors=[norm])
        plain = flow.data.BlobConf("encoded", shape=(5, 4, 3), dtype=flow.uint8, codec=flow.data.ImageCodec())
        label = flow.data.BlobConf("class/label", shape=(), dtype=flow.int32, codec=flow.data.RawCodec())
        with pytest.warns(DeprecationWarning):
            return flow.data.decode_ofrecord(str(tmp_path), [image, plain, label], batch_size=2,
                                             part_name_suffix_length=5)

    image, plain, label = job()
    expect = (np.stack(rgb).astype(np.float32) - np.float32(mean)) / np.float32(std)
    if layout == "NCHW":
        expect = expect.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(image, expect, rtol=1e-6)
    # no bgr2rgb: BGR channel order; no resize preprocessor: (width, height) = shape[:2]
    np.testing.assert_array_equal(plain, np.stack(rgb)[..., ::-1])
    np.testing.assert_array_equal(label, [0, 1])


def test_decode_ofrecord_argument_errors(tmp_path):
    write_records(os.path.join(tmp_path, "part-0"), _records(2))
    with pytest.raises(ValueError, match='"bgr2rgb" or "mirror"'):
        flow.data.ImagePreprocessor("flip")
    with pytest.raises(TypeError, match="shape must be a list or tuple"):
        flow.data.BlobConf("x", 3, flow.float, flow.data.RawCodec())

    @flow.global_function(type="predict")
    def job() -> tp.Numpy:
        with pytest.warns(DeprecationWarning):
            return flow.data.decode_ofrecord(str(tmp_path), ["x"], batch_size=2)[0]

    with pytest.raises(Exception, match=r"blobs\[0\] must be a flow.data.BlobConf, received str"):
        job()

    flow.clear_default_session()
    flow.enable_eager_execution(True)

    @flow.global_function(type="predict")
    def eager_job() -> tp.Numpy:
        conf = flow.data.BlobConf("x", (2,), flow.float, flow.data.RawCodec())
        with pytest.warns(DeprecationWarning):
            return flow.data.decode_ofrecord(str(tmp_path), [conf], batch_size=2)[0]

    with pytest.raises(Exception, match="does not work in eager execution"):
        eager_job()


@pytest.mark.slow  # spawns two worker processes
def test_shuffled_reader_on_two_devices_follows_flow_manual_seed(tmp_path):
    # the workers' generators take one seed from the client, which flow.manual_seed sets: a
    # reader without a seed shuffles alike in two sessions (and differently under another seed)
    _write_ids(tmp_path, parts=2, per_part=8)

    def read(seed):
        flow.clear_default_session()
        flow.manual_seed(seed)
        flow.config.gpu_device_num(0)
        flow.config.cpu_device_num(2)

        @flow.global_function(type="predict")
        def read_job() -> tp.Numpy:
            rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=4, data_part_num=2, random_shuffle=True,
                                            shuffle_buffer_size=8)
            return flow.data.OFRecordRawDecoder(rec, "id", shape=(), dtype=flow.int32) * 1
        return np.concatenate([read_job() for _ in range(4)])

    first, again, other = read(3), read(3), read(4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    for batch in first.reshape(4, 4):  # device 0 shuffles shard 0's records, device 1 shard 1's
        assert (batch[:2] < 100).all() and (batch[2:] >= 100).all(), batch


@pytest.mark.slow  # spawns two worker processes
def test_a_bad_shard_on_one_device_raises_on_all_and_the_session_goes_on(tmp_path):
    """A truncated shard read by one of 2 devices of a train job: the workers settle before
    the step's first collective that one device failed, every worker stops there, and the
    call raises the error naming the file and the device (before: the other worker waited
    in its all-reduce until the collective timeout and the session's workers were stopped).
    A later job of the same session runs."""
    _write_ids(tmp_path, parts=2, per_part=4)
    path = tmp_path / "part-1"
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 2)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @flow.global_function(type="train")
    def train_job() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(tmp_path), batch_size=4, data_part_num=2)
        x = flow.cast(flow.data.OFRecordRawDecoder(rec, "id", shape=(1,), dtype=flow.int32), flow.float)
        loss = flow.math.reduce_mean(flow.layers.dense(x, 1, name="fc"))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.001])).minimize(loss)
        return loss

    train_job()  # (records 0 and 1 of each shard)
    with pytest.raises(OpRunError, match=r"part-1: record 3 is truncated .* \(in the part of device cpu:1"):
        train_job()

    @flow.global_function(type="predict")
    def other_job(x: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        return x * 2

    np.testing.assert_array_equal(other_job(np.ones((4, 2), np.float32)), 2 * np.ones((4, 2), np.float32))
