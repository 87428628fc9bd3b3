"""flow.data.coco_reader (op ``COCOReader``): a tiny COCO data set written here (PNG images
made with Pillow, an annotation JSON with boxes, polygons, a crowd annotation, an image
without annotations, non-contiguous category ids), read back in jobs and checked against
values worked out by hand from OneFlow v0.6.0's rules (``oneflow/user/data/coco_data_reader``,
``distributed_training_dataset.h``, ``group_batch_dataset.h``)."""
import io
import json
import os

import numpy as np
import pytest
from PIL import Image

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import ArgumentError, JobBuildError
from graphfront.ops.coco_ops import sample_stream

# (id, file_name, height, width); group h // w: id 5 -> 0, id 2 -> 1, id 9 -> 1, id 3 -> 0
IMAGES = [(5, "a.png", 4, 6), (2, "sub/b.png", 8, 5), (9, "c.png", 6, 6), (3, "d.png", 3, 7)]
CATEGORIES = [20, 3, 7]          # contiguous: 3 -> 1, 7 -> 2, 20 -> 3
ANNOTATIONS = [
    # image 5: a box, a box reaching past the image (clipped), a crowd object, a box left empty by clipping
    {"id": 1, "image_id": 5, "iscrowd": 0, "bbox": [1, 1, 3, 2], "category_id": 20,
     "segmentation": [[1, 1, 3, 1, 3, 2, 1, 2]]},
    {"id": 2, "image_id": 5, "iscrowd": 0, "bbox": [4.5, 0, 5, 10], "category_id": 7,
     "segmentation": [[4, 0, 5, 0, 5, 3, 4, 3], [4.5, 1, 5, 1, 5, 2, 4.5, 2]]},
    {"id": 3, "image_id": 5, "iscrowd": 1, "bbox": [0, 0, 6, 4], "category_id": 7,
     "segmentation": {"counts": [0, 24], "size": [4, 6]}},
    {"id": 4, "image_id": 5, "iscrowd": 0, "bbox": [10, 1, 2, 2], "category_id": 3,
     "segmentation": [[5, 1, 5, 2, 5, 3, 5, 1]]},
    # image 2: one box covering the image
    {"id": 5, "image_id": 2, "iscrowd": 0, "bbox": [0, 0, 5, 8], "category_id": 3,
     "segmentation": [[0, 0, 4, 0, 4, 7, 0, 7]]},
    # image 3: only a box 1 wide (no valid annotation); image 9: none at all
    {"id": 6, "image_id": 3, "iscrowd": 0, "bbox": [0, 0, 1, 5], "category_id": 7,
     "segmentation": [[0, 0, 0, 2, 0, 2, 0, 0]]},
]

# by hand: [x, y, w, h] -> (x, y, x + max(w - 1, 0), y + max(h - 1, 0)) clipped to [0, W-1] x [0, H-1]
EXPECTED = {
    5: dict(size=(4, 6), boxes=[[1, 1, 3, 2], [4.5, 0, 5, 3]],        # anno 4: left 5, right 5 -> dropped
            labels=[3, 2, 1],                                          # one per non-crowd annotation
            segm=[[1, 1], [3, 1], [3, 2], [1, 2], [4, 0], [5, 0], [5, 3], [4, 3], [4.5, 1], [5, 1], [5, 2],
                  [4.5, 2], [5, 1], [5, 2], [5, 3], [5, 1]],
            index=[[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0], [0, 0, 1], [1, 0, 1], [2, 0, 1], [3, 0, 1],
                   [0, 1, 1], [1, 1, 1], [2, 1, 1], [3, 1, 1], [0, 0, 2], [1, 0, 2], [2, 0, 2], [3, 0, 2]]),
    2: dict(size=(8, 5), boxes=[[0, 0, 4, 7]], labels=[1], segm=[[0, 0], [4, 0], [4, 7], [0, 7]],
            index=[[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]),
    9: dict(size=(6, 6), boxes=np.zeros((0, 4)), labels=[], segm=np.zeros((0, 2)), index=np.zeros((0, 3))),
    3: dict(size=(3, 7), boxes=np.zeros((0, 4)), labels=[2], segm=[[0, 0], [0, 2], [0, 2], [0, 0]],
            index=[[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]),
}


def _png(h, w, value):
    image = np.zeros((h, w, 3), np.uint8)
    image[..., 0] = value
    image[..., 1] = np.arange(w, dtype=np.uint8)[None, :] * 10
    image[..., 2] = np.arange(h, dtype=np.uint8)[:, None] * 20
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return image, buf.getvalue()


def write_dataset(tmp_path, images=IMAGES, annotations=ANNOTATIONS, categories=CATEGORIES):
    """Writes the PNGs and the JSON; returns (annotation file, image dir, {id: (pixels, bytes)})."""
    image_dir = tmp_path / "images"
    files = {}
    for i, (image_id, name, h, w) in enumerate(images):
        path = image_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels, encoded = _png(h, w, (30 * i + 1) % 256)
        path.write_bytes(encoded)
        files[image_id] = (pixels, encoded)
    ann = {"images": [{"id": i, "file_name": n, "height": h, "width": w} for i, n, h, w in images],
           "annotations": annotations, "categories": [{"id": c, "name": f"c{c}"} for c in categories]}
    ann_file = tmp_path / "instances.json"
    ann_file.write_text(json.dumps(ann))
    return str(ann_file), str(image_dir), files


BUFFERS = [("image", (4096,), "int8"), ("gt_bbox", (8, 4), "float32"), ("gt_label", (8,), "int32"),
           ("gt_segm", (32, 2), "float32"), ("gt_segm_index", (32, 3), "int32")]


def reader_job(ann, image_dir, batch_size, name="coco", **kw):
    """A job returning every output of the reader, the buffers one blob per element."""
    flow.clear_default_session()

    @flow.global_function()
    def job() -> tp.Bundle[tp.ListNumpy]:
        image, image_id, image_size, bbox, label, segm, segm_index = flow.data.coco_reader(
            ann, image_dir, batch_size, name=name, **kw)
        out = {"image_id": image_id, "image_size": image_size}
        for key, blob in zip(["image", "gt_bbox", "gt_label", "gt_segm", "gt_segm_index"],
                             [image, bbox, label, segm, segm_index]):
            shape, dtype = next((s, d) for k, s, d in BUFFERS if k == key)
            out[key] = flow.tensor_buffer_to_list_of_tensors(blob, shape, getattr(flow, dtype), dynamic_out=True)
        return out

    def step():
        r = job()
        return {k: (v[0] if k in ("image_id", "image_size") else [x[0] for x in v]) for k, v in r.items()}
    return step


def _check_batch(batch, ids, files):
    np.testing.assert_array_equal(batch["image_id"], np.asarray(ids, np.int64))
    assert batch["image_id"].dtype == np.int64
    np.testing.assert_array_equal(batch["image_size"], np.asarray([EXPECTED[i]["size"] for i in ids], np.int32))
    assert batch["image_size"].dtype == np.int32
    for k, image_id in enumerate(ids):
        e = EXPECTED[image_id]
        assert batch["image"][k].dtype == np.int8
        assert batch["image"][k].tobytes() == files[image_id][1]
        for key, want, dtype in [("gt_bbox", e["boxes"], np.float32), ("gt_label", e["labels"], np.int32),
                                 ("gt_segm", e["segm"], np.float32), ("gt_segm_index", e["index"], np.int32)]:
            got = batch[key][k]
            assert got.dtype == dtype, (key, image_id)
            np.testing.assert_array_equal(got, np.asarray(want, dtype).reshape(got.shape), err_msg=f"{key} {image_id}")
            assert got.shape == np.asarray(want).reshape((-1,) + got.shape[1:]).shape


def test_every_output_against_hand_computed_values(tmp_path):
    ann, image_dir, files = write_dataset(tmp_path)
    step = reader_job(ann, image_dir, 2, shuffle=False, group_by_aspect_ratio=False)
    # images 9 (no annotation) and 3 (only a box 1 wide) removed; the rest ordered by id
    for _ in range(3):
        _check_batch(step(), [2, 5], files)


def test_keeping_images_without_annotations(tmp_path):
    ann, image_dir, files = write_dataset(tmp_path)
    step = reader_job(ann, image_dir, 2, shuffle=False, group_by_aspect_ratio=False,
                      remove_images_without_annotations=False)
    _check_batch(step(), [2, 3], files)
    _check_batch(step(), [5, 9], files)
    _check_batch(step(), [2, 3], files)


def test_group_by_aspect_ratio_batches(tmp_path):
    # groups h // w: id 1 -> 0, 2 -> 1, 3 -> 0, 4 -> 0, 5 -> 1, 6 -> 1
    sizes = {1: (4, 6), 2: (6, 5), 3: (3, 7), 4: (4, 5), 5: (7, 4), 6: (7, 6)}
    images = [(i, f"{i}.png", h, w) for i, (h, w) in sizes.items()]
    annotations = [{"id": i, "image_id": i, "iscrowd": 0, "bbox": [0, 0, 3, 3], "category_id": 1,
                    "segmentation": []} for i in sizes]
    ann, image_dir, _ = write_dataset(tmp_path, images, annotations, [1])
    step = reader_job(ann, image_dir, 2, shuffle=False)
    got = [list(step()["image_id"]) for _ in range(7)]
    # stream 1 2 3 4 5 6 1 2 3 ...: 2 waits, [1, 3]; [2] + 4 waits + 5; [4] + 6 waits + 1; [6] + 2; ...
    assert got == [[1, 3], [2, 5], [4, 1], [6, 2], [3, 4], [5, 6], [1, 3]]
    for batch in got:
        assert len({sizes[i][0] // sizes[i][1] for i in batch}) == 1
    step = reader_job(ann, image_dir, 2, shuffle=False, group_by_aspect_ratio=False, name="plain")
    assert [list(step()["image_id"]) for _ in range(3)] == [[1, 2], [3, 4], [5, 6]]


def _shuffle_set(tmp_path, n=12):
    images = [(i, f"{i}.png", 4, 4) for i in range(1, n + 1)]
    annotations = [{"id": i, "image_id": i, "iscrowd": 0, "bbox": [0, 0, 3, 3], "category_id": 1,
                    "segmentation": []} for i in range(1, n + 1)]
    return write_dataset(tmp_path, images, annotations, [1])


def _epochs(step, n, batch, epochs):
    ids = [i for _ in range(epochs * n // batch) for i in step()["image_id"]]
    return [ids[e * n:(e + 1) * n] for e in range(epochs)]


def test_shuffle_repeats_with_a_seed_and_differs_across_epochs(tmp_path):
    ann, image_dir, _ = _shuffle_set(tmp_path)
    a = _epochs(reader_job(ann, image_dir, 4, random_seed=7, group_by_aspect_ratio=False), 12, 4, 3)
    b = _epochs(reader_job(ann, image_dir, 4, random_seed=7, group_by_aspect_ratio=False), 12, 4, 3)
    assert a == b                                            # the same seed, the same epochs
    for epoch in a:
        assert sorted(epoch) == list(range(1, 13))           # each epoch visits every image once
    assert a[0] != a[1] and a[1] != a[2]                     # a new order every epoch
    assert a[0] != list(range(1, 13))                        # the first epoch is shuffled too
    # OneFlow seeds epoch e with random_seed + e: seed 8's first epoch is seed 7's second
    c = _epochs(reader_job(ann, image_dir, 4, random_seed=8, group_by_aspect_ratio=False), 12, 4, 1)
    assert c[0] == a[1]
    plain = _epochs(reader_job(ann, image_dir, 4, shuffle=False, random_seed=7, group_by_aspect_ratio=False),
                    12, 4, 2)
    assert plain == [list(range(1, 13))] * 2


def test_partition_over_devices_follows_oneflows_table():
    # OneFlow's comment in distributed_training_dataset.h: 10 samples, 4 parts, 3 per step, no shuffle
    def take(part, stride):
        stream = sample_stream(10, (part, 4), stride_partition=stride, shuffle=False)
        return [next(stream) for _ in range(6)]
    assert [take(p, True) for p in range(4)] == [[0, 4, 8, 2, 6, 0], [1, 5, 9, 3, 7, 1], [2, 6, 0, 4, 8, 2],
                                                 [3, 7, 1, 5, 9, 3]]
    assert [take(p, False) for p in range(4)] == [[0, 1, 2, 2, 3, 4], [3, 4, 5, 5, 6, 7], [6, 7, 8, 8, 9, 0],
                                                  [9, 0, 1, 1, 2, 3]]


def _build(ann, image_dir, **kw):
    flow.clear_default_session()

    @flow.global_function()
    def job() -> tp.Numpy:
        return flow.data.coco_reader(ann, image_dir, 2, name="coco", **kw)[1]
    return job()


@pytest.mark.parametrize("name", ["../outside.png", "sub/../../outside.png", "/etc/hostname", "a\x00b.png"])
def test_a_file_name_escaping_image_dir_is_refused(tmp_path, name):
    ann, image_dir, _ = write_dataset(tmp_path)
    doc = json.loads(open(ann).read())
    doc["images"][0]["file_name"] = name
    with open(ann, "w") as f:
        json.dump(doc, f)
    (tmp_path / "outside.png").write_bytes(b"x")
    with pytest.raises(JobBuildError) as e:
        _build(ann, image_dir)
    msg = str(e.value)
    assert ann in msg and "images[0]" in msg and "file_name" in msg and "outside image_dir" in msg


@pytest.mark.parametrize("mutate, where", [
    (lambda d: "{not json", "is not valid JSON"),
    (lambda d: {**d, "images": {}}, "field 'images' must be a list"),
    (lambda d: {k: v for k, v in d.items() if k != "images"}, "has no field 'images'"),
    (lambda d: {**d, "annotations": [{**d["annotations"][0], "bbox": [1, 2, 3]}]}, "annotations[0]: field 'bbox'"),
    (lambda d: {**d, "annotations": [{**d["annotations"][0], "category_id": 99}]},
     "annotations[0]: field 'category_id'"),
    (lambda d: {**d, "annotations": [{**d["annotations"][0], "segmentation": [[1, 2, 3, 4, 5, 6]]}]},
     "annotations[0]: field 'segmentation'[0]"),
    (lambda d: {**d, "images": [{**d["images"][0], "height": "4"}]}, "images[0]: field 'height'"),
])
def test_a_malformed_annotation_file_names_the_file_and_the_field(tmp_path, mutate, where):
    ann, image_dir, _ = write_dataset(tmp_path)
    doc = mutate(json.loads(open(ann).read()))
    with open(ann, "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(JobBuildError) as e:
        _build(ann, image_dir)
    assert ann in str(e.value) and where in str(e.value)


def test_missing_files_and_arguments(tmp_path):
    ann, image_dir, _ = write_dataset(tmp_path)
    with pytest.raises(JobBuildError, match="does not exist"):
        _build(str(tmp_path / "none.json"), image_dir)
    os.remove(os.path.join(image_dir, "a.png"))
    with pytest.raises(JobBuildError, match=r"images\[0\]: field 'file_name': image file 'a.png' does not exist"):
        _build(ann, image_dir)
    flow.clear_default_session()

    @flow.global_function()
    def job() -> tp.Numpy:
        return flow.data.coco_reader(ann, image_dir, 2)[1]
    with pytest.raises(ArgumentError, match="'name' is required"):
        job()


def test_decode_and_flip_compose_with_the_reader(tmp_path):
    ann, image_dir, files = write_dataset(tmp_path)
    flow.clear_default_session()

    @flow.global_function()
    def job() -> tp.Bundle[tp.ListNumpy]:
        image, _, image_size, bbox, _, _, _ = flow.data.coco_reader(ann, image_dir, 2, shuffle=False,
                                                                     group_by_aspect_ratio=False, name="coco")
        decoded = flow.image_decode(image, color_space="RGB")
        flip = flow.random.CoinFlip(batch_size=2, probability=1.0)       # every code 1: left-right
        width_height = flow.reverse(image_size, axis=1)                  # the object ops read (width, height)
        flipped = flow.object_bbox_flip(bbox, width_height, flip)
        return {"image": flow.tensor_buffer_to_list_of_tensors(decoded, (8, 6, 3), flow.uint8, dynamic_out=True),
                "bbox": flow.tensor_buffer_to_list_of_tensors(flipped, (4, 4), flow.float32, dynamic_out=True)}

    r = job()
    for k, image_id in enumerate([2, 5]):
        np.testing.assert_array_equal(r["image"][k][0], files[image_id][0])
        w = EXPECTED[image_id]["size"][1]
        boxes = np.asarray(EXPECTED[image_id]["boxes"], np.float32)
        want = np.stack([w - boxes[:, 2] - 1, boxes[:, 1], w - boxes[:, 0] - 1, boxes[:, 3]], axis=1)
        np.testing.assert_array_equal(r["bbox"][k][0], want)
