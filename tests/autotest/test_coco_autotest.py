"""AutoTest of ``COCOReader`` (flow.data.coco_reader) against the arrays a drawn COCO data set
was written from: each draw writes PNG images of one drawn size, one annotation per image
(a box inside the image and a 4-point polygon, a drawn category of non-contiguous ids), and
reads the whole set as one batch in id order (no shuffle, no grouping)."""
import io
import json
import os
import tempfile

import numpy as np
from PIL import Image

from graphfront.testing import autotest

N = 3
CPU_ONLY = ("cpu",)  # COCOReader runs on the host (a CPU-only op, as in OneFlow)
_TMP = tempfile.TemporaryDirectory(prefix="graphfront-coco-autotest-")


def dataset(check):
    rng = check.rng
    n = int(rng.integers(2, 6))
    h, w = int(rng.integers(4, 12)), int(rng.integers(4, 12))
    images = rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    ids = np.sort(rng.choice(1000, size=n, replace=False)).astype(np.int64)
    cats = sorted(int(c) for c in rng.choice(100, size=3, replace=False))
    directory = tempfile.mkdtemp(dir=_TMP.name)
    os.mkdir(os.path.join(directory, "images"))
    entries, annotations, boxes, labels, polys = [], [], [], [], []
    for k, image_id in enumerate(ids[::-1]):          # written in reverse: the reader sorts by id
        buf = io.BytesIO()
        Image.fromarray(images[n - 1 - k]).save(buf, format="PNG")
        with open(os.path.join(directory, "images", f"{image_id}.png"), "wb") as f:
            f.write(buf.getvalue())
        entries.append({"id": int(image_id), "file_name": f"{image_id}.png", "height": h, "width": w})
    for image_id in ids:
        x, y = int(rng.integers(0, w - 3)), int(rng.integers(0, h - 3))
        bw, bh = int(rng.integers(2, w - x + 1)), int(rng.integers(2, h - y + 1))
        cat = int(rng.integers(3))
        poly = [x, y, x + bw, y, x + bw, y + bh, x, y + bh]
        annotations.append({"id": int(image_id) + 1, "image_id": int(image_id), "iscrowd": 0, "bbox": [x, y, bw, bh],
                            "category_id": cats[cat], "segmentation": [poly]})
        boxes.append([[x, y, x + bw - 1, y + bh - 1]])
        labels.append([cat + 1])
        polys.append(np.asarray(poly, np.float32).reshape(4, 2))
    ann = os.path.join(directory, "instances.json")
    with open(ann, "w") as f:
        json.dump({"images": entries, "annotations": annotations, "categories": [{"id": c} for c in cats[::-1]]}, f)
    return ann, os.path.join(directory, "images"), images, ids, np.asarray(boxes, np.float32), \
        np.asarray(labels, np.int32), np.stack(polys)


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_coco_reader(check):
    ann, image_dir, images, ids, boxes, labels, polys = dataset(check)
    n, h, w, _ = images.shape
    index = np.asarray([[k, 0, 0] for k in range(4)] * n, np.int32).reshape(n, 4, 3)

    def gf(flow):
        image, image_id, image_size, bbox, label, segm, segm_index = flow.data.coco_reader(
            ann, image_dir, n, shuffle=False, group_by_aspect_ratio=False, name="coco_reader")
        decoded = flow.image_decode(image, color_space="RGB")
        return [flow.tensor_buffer_to_tensor(decoded, dtype=flow.uint8, instance_shape=(h, w, 3)), image_id,
                image_size, flow.tensor_buffer_to_tensor(bbox, dtype=flow.float32, instance_shape=(1, 4)),
                flow.tensor_buffer_to_tensor(label, dtype=flow.int32, instance_shape=(1,)),
                flow.tensor_buffer_to_tensor(segm, dtype=flow.float32, instance_shape=(4, 2)),
                flow.tensor_buffer_to_tensor(segm_index, dtype=flow.int32, instance_shape=(4, 3))]

    check(graphfront=gf, torch=lambda torch: [
        torch.from_numpy(images), torch.from_numpy(ids), torch.tensor([[h, w]] * n, dtype=torch.int32),
        torch.from_numpy(boxes), torch.from_numpy(labels), torch.from_numpy(polys), torch.from_numpy(index)])
