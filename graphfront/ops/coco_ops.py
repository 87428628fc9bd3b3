"""``COCOReader``: OneFlow v0.6.0's reader of a COCO detection data set (an annotation JSON
file and a directory of encoded images), for Mask R-CNN style pipelines.

OneFlow registers it in ``oneflow/user/ops/coco_reader_op.cpp`` (CPU only, no gradient) with
its kernel in ``oneflow/user/kernels/coco_reader_kernel.cpp`` and the data pipeline in
``oneflow/user/data/coco_data_reader.{h,cpp}`` (the annotation index, ``COCOMeta``),
``coco_dataset.cpp`` (one image read from disk), ``coco_parser.cpp`` (a batch into the
outputs), ``distributed_training_dataset.h`` (order, shuffling, partition over devices) and
``group_batch_dataset.h`` (batches of one aspect-ratio group).

Outputs, ``B`` the batch (``batch_size``, or its part on one of several devices):

=================  ===========================  ================================================
output             blob                         each element ``i`` (one image)
=================  ===========================  ================================================
``image``          tensor_buffer ``(B,)``       the image file's bytes as a 1-D int8 array
                                                (OneFlow's ``kChar``): decode with
                                                ``flow.image_decode``
``image_id``       int64 ``(B,)``               the image's ``id``
``image_size``     int32 ``(B, 2)``             ``(height, width)`` from the JSON (note: the
                                                object ops read ``(width, height)``)
``gt_bbox``        tensor_buffer ``(B,)``       float32 ``(n, 4)`` boxes ``(xmin, ymin, xmax,
                                                ymax)``: COCO's ``[x, y, w, h]`` becomes
                                                ``(x, y, x + max(w - 1, 0), y + max(h - 1, 0))``,
                                                each coordinate clipped to ``[0, W - 1]`` /
                                                ``[0, H - 1]``; boxes left empty
                                                (``xmax <= xmin`` or ``ymax <= ymin``) dropped
``gt_label``       tensor_buffer ``(B,)``       int32 ``(m,)``: each annotation's category as
                                                a contiguous id (the sorted category ids
                                                numbered 1, 2, ...); one per annotation, also
                                                for a box that was dropped (OneFlow's rule)
``gt_segm``        tensor_buffer ``(B,)``       float32 ``(p, 2)``: the ``(x, y)`` points of
                                                every polygon of every annotation, in order
``gt_segm_index``  tensor_buffer ``(B,)``       int32 ``(p, 3)``: per point ``(point, polygon,
                                                segmentation)``: its index in its polygon, its
                                                polygon's in the annotation, the annotation's
                                                among the image's
=================  ===========================  ================================================

The annotations of an image are its non-crowd ones (``iscrowd`` 1 are skipped), in the
file's order. ``remove_images_without_annotations`` keeps only the images with at least one
such annotation, of which at least one box is wider and taller than 1 (and, when the
image's first annotation has ``keypoints``, with at least 10 visible keypoints in all). The
images kept are ordered by id. Every epoch visits each once: in that order, or with
``shuffle_after_epoch`` in a permutation drawn from seed ``random_seed + epoch`` (epoch 0,
1, ...: the same seed gives the same sequence of epochs, every epoch another order). A
device ``d`` of ``n`` (outputs split along the batch) reads positions ``d, d + n, ...`` of
the epoch's sequence with ``stride_partition``, else the ``d``-th contiguous range of
``ceil(size / n)`` positions, continuing into the next epoch's sequence as OneFlow's
``DistributedTrainingDataset`` does. With ``group_by_ratio`` a batch holds only images of
one group ``height // width`` (0: wider than tall; 1: up to twice as tall as wide, ...):
images of another group wait in a batch of their own group, and the earliest such waiting
batch is completed and returned first (OneFlow's ``GroupBatchDataset``).

The annotation file is parsed at build time (the standard :mod:`json` module; only data is
read from it) and every field the reader uses is checked: a malformed file raises
JobBuildError naming the file, the entry and the field. ``file_name`` must name a file
inside ``image_dir`` (after resolving ``..`` and links): no entry can make the reader open
a file elsewhere. The kernel reads the images in a worker process ahead of the step, as
the other readers (:class:`graphfront.ops.data_ops.SourceKernel`).
"""
from __future__ import annotations

import functools
import json
import math
import os

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.blob_desc import is_int
from graphfront.framework.errors import JobBuildError
from graphfront.ops.data_ops import SourceKernel
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp

OUTPUTS = ("image", "image_id", "image_size", "gt_bbox", "gt_label", "gt_segm", "gt_segm_index")
#: OneFlow's kMinKeypointsPerImage: a keypoint image needs this many visible keypoints
MIN_KEYPOINTS_PER_IMAGE = 10


# ============================================================== the annotation index

class COCOError(ValueError):
    """A malformed annotation file (the message names the file, the entry and the field)."""


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class COCOIndex:
    """The images a COCO annotation file describes and their annotations, checked.

    Attributes:
        image_ids: the ids of the images kept, ascending (int64 array).
        heights, widths: per kept image (int32 arrays).
        paths: per kept image, the resolved path of its file inside ``image_dir``.
        boxes, labels, segm, segm_index: per kept image, the arrays of the outputs of the
            same names (module docstring).
    """

    def __init__(self, annotation_file, image_dir, remove_images_without_annotations):
        self.file = annotation_file
        try:
            with open(annotation_file, "rb") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise COCOError(f"COCO annotation file {annotation_file!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as e:
            raise COCOError(f"COCO annotation file {annotation_file!r} cannot be read: {e}") from None
        except json.JSONDecodeError as e:
            raise COCOError(f"COCO annotation file {annotation_file!r} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise self._error("the file", f"must hold a JSON object, received {type(data).__name__}")
        images = self._list(data, "images", required=True)
        annotations = self._list(data, "annotations")
        categories = self._list(data, "categories")
        root = os.path.realpath(image_dir)
        if not os.path.isdir(root):
            raise COCOError(f"COCO image_dir {image_dir!r} is not a directory")

        by_id = {}
        for i, image in enumerate(images):
            where = f"images[{i}]"
            self._entry(image, where)
            image_id = self._int(image, "id", where)
            if image_id in by_id:
                raise self._error(where, f"field 'id': image id {image_id} is given twice")
            height, width = self._int(image, "height", where), self._int(image, "width", where)
            if height <= 0 or width <= 0 or height >= 2 ** 31 or width >= 2 ** 31:
                raise self._error(where, f"fields 'height', 'width' must be in [1, 2**31), received "
                                         f"{height}, {width}")
            name = image.get("file_name")
            if not isinstance(name, str) or not name:
                raise self._error(where, f"field 'file_name' must be a non-empty string, received {name!r}")
            path = None if "\x00" in name else os.path.realpath(os.path.join(root, name))  # (a NUL: ValueError)
            if path is None or os.path.commonpath([root, path]) != root or path == root:
                raise self._error(where, f"field 'file_name' {name!r} names a file outside image_dir "
                                         f"{image_dir!r}; the reader opens files inside image_dir only")
            by_id[image_id] = (height, width, path, name, where)

        contiguous = {}
        for i, cat in enumerate(categories):
            self._entry(cat, f"categories[{i}]")
            cat_id = self._int(cat, "id", f"categories[{i}]")
            if not -2 ** 31 <= cat_id < 2 ** 31:
                raise self._error(f"categories[{i}]", f"field 'id' must fit int32, received {cat_id}")
            if cat_id in contiguous:
                raise self._error(f"categories[{i}]", f"field 'id': category id {cat_id} is given twice")
            contiguous[cat_id] = None
        for n, cat_id in enumerate(sorted(contiguous), start=1):
            contiguous[cat_id] = n

        annos_of = {image_id: [] for image_id in by_id}
        anno_ids = set()
        for i, anno in enumerate(annotations):
            where = f"annotations[{i}]"
            self._entry(anno, where)
            crowd = self._int(anno, "iscrowd", where)
            if crowd == 1:      # OneFlow skips crowd (RLE) objects
                continue
            anno_id = self._int(anno, "id", where)
            if anno_id in anno_ids:
                raise self._error(where, f"field 'id': annotation id {anno_id} is given twice")
            anno_ids.add(anno_id)
            image_id = self._int(anno, "image_id", where)
            if image_id not in annos_of:
                raise self._error(where, f"field 'image_id': no image has id {image_id}")
            annos_of[image_id].append(self._annotation(anno, where, contiguous))

        kept = sorted(i for i in by_id if not remove_images_without_annotations or _has_valid(annos_of[i]))
        if not kept:
            raise self._error("the file", "leaves no image to read" + (
                " (remove_images_without_annotations=True removed every image: none has a non-crowd annotation "
                "with a box wider and taller than 1)" if by_id else ": 'images' is empty"))
        self.image_ids = np.asarray(kept, np.int64)
        self.heights = np.asarray([by_id[i][0] for i in kept], np.int32)
        self.widths = np.asarray([by_id[i][1] for i in kept], np.int32)
        self.paths = []
        for image_id in kept:
            _, _, path, name, where = by_id[image_id]
            if not os.path.isfile(path):
                raise self._error(where, f"field 'file_name': image file {name!r} does not exist in image_dir "
                                         f"{image_dir!r}")
            self.paths.append(path)
        self.boxes, self.labels, self.segm, self.segm_index = [], [], [], []
        for image_id, h, w in zip(kept, self.heights, self.widths):
            annos = annos_of[image_id]
            self.boxes.append(_boxes([a[0] for a in annos], int(h), int(w)))
            self.labels.append(np.asarray([a[1] for a in annos], np.int32))
            points, index = _polygons([a[2] for a in annos])
            self.segm.append(points)
            self.segm_index.append(index)

    def __len__(self):
        return len(self.image_ids)

    # ---- checks of the file's fields
    def _error(self, where, what):
        return COCOError(f"COCO annotation file {self.file!r}, {where}: {what}")

    def _list(self, data, key, required=False):
        if key not in data:
            if required:
                raise self._error("the file", f"has no field {key!r} (a COCO file has 'images', 'annotations', "
                                              "'categories')")
            return []
        value = data[key]
        if not isinstance(value, list):
            raise self._error("the file", f"field {key!r} must be a list, received {type(value).__name__}")
        return value

    def _entry(self, entry, where):
        if not isinstance(entry, dict):
            raise self._error(where, f"must be a JSON object, received {type(entry).__name__}")

    def _int(self, entry, key, where):
        v = entry.get(key)
        if not is_int(v):
            raise self._error(where, f"field {key!r} must be an integer, received {v!r}")
        return v

    def _annotation(self, anno, where, contiguous):
        """(bbox [x, y, w, h], contiguous label, polygons) of a non-crowd annotation."""
        bbox = anno.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(_is_number(v) for v in bbox):
            raise self._error(where, f"field 'bbox' must be a list of 4 numbers [x, y, width, height], "
                                     f"received {bbox!r}")
        cat = self._int(anno, "category_id", where)
        if cat not in contiguous:
            raise self._error(where, f"field 'category_id': no category has id {cat} (ids: "
                                     f"{sorted(contiguous)})")
        segm = anno.get("segmentation")
        if not isinstance(segm, list):
            raise self._error(where, f"field 'segmentation' of a non-crowd annotation must be a list of polygons, "
                                     f"received {type(segm).__name__} (OneFlow reads polygons only; run-length "
                                     "encoded masks need iscrowd 1)")
        for j, poly in enumerate(segm):
            if not isinstance(poly, list) or not all(_is_number(v) for v in poly):
                raise self._error(where, f"field 'segmentation'[{j}] must be a list of numbers x0, y0, x1, y1, ...")
            if len(poly) <= 6 or len(poly) % 2:
                raise self._error(where, f"field 'segmentation'[{j}] must hold an even count of more than 6 "
                                         f"numbers (OneFlow's check), received {len(poly)}")
        if "keypoints" in anno:
            kp = anno["keypoints"]
            if not isinstance(kp, list) or len(kp) % 3 or not all(is_int(v) for v in kp[2::3]):
                raise self._error(where, "field 'keypoints' must be a list of (x, y, visibility) triples, "
                                         "visibility an integer")
        return [float(v) for v in bbox], contiguous[cat], segm, anno.get("keypoints")


def _has_valid(annos) -> bool:
    """OneFlow's ``ImageHasValidAnnotations`` over an image's non-crowd annotations."""
    if not annos:
        return False
    if all(not (bbox[2] > 1 and bbox[3] > 1) for bbox, _, _, _ in annos):
        return False
    if annos[0][3] is None:
        return True
    visible = sum(sum(1 for v in kp[2::3] if v > 0) for _, _, _, kp in annos if kp is not None)
    return visible >= MIN_KEYPOINTS_PER_IMAGE


def _boxes(bboxes, height, width) -> np.ndarray:
    """float32 (n, 4) xyxy boxes from COCO [x, y, w, h], in float32 arithmetic (OneFlow's
    ``GetBboxVec<float>``)."""
    if not bboxes:
        return np.zeros((0, 4), np.float32)
    b = np.asarray(bboxes, np.float32)
    one, zero = np.float32(1), np.float32(0)
    left, top = b[:, 0], b[:, 1]
    right = left + np.maximum(b[:, 2] - one, zero)
    bottom = top + np.maximum(b[:, 3] - one, zero)
    xmax, ymax = np.float32(width) - one, np.float32(height) - one
    left, right = np.minimum(np.maximum(left, zero), xmax), np.minimum(np.maximum(right, zero), xmax)
    top, bottom = np.minimum(np.maximum(top, zero), ymax), np.minimum(np.maximum(bottom, zero), ymax)
    out = np.stack([left, top, right, bottom], axis=1).astype(np.float32)
    return np.ascontiguousarray(out[(right > left) & (bottom > top)])


def _polygons(segms):
    """float32 (p, 2) points and int32 (p, 3) (point, polygon, segmentation) indices."""
    points, index = [], []
    for s, polys in enumerate(segms):
        for j, poly in enumerate(polys):
            for k in range(len(poly) // 2):
                points.append((poly[2 * k], poly[2 * k + 1]))
                index.append((k, j, s))
    return (np.asarray(points, np.float32).reshape(-1, 2), np.asarray(index, np.int32).reshape(-1, 3))


@functools.lru_cache(maxsize=8)
def _cached_index(annotation_file, image_dir, remove, stamp):
    return COCOIndex(annotation_file, image_dir, remove)


def load_index(annotation_file, image_dir, remove_images_without_annotations=True) -> COCOIndex:
    """The :class:`COCOIndex` of an annotation file (cached while the file is unchanged).

    Raises:
        COCOError (a ValueError): the file is missing, no JSON, or a field the reader uses is
            malformed; a ``file_name`` escapes ``image_dir`` or names no file.
    """
    try:
        st = os.stat(annotation_file)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        stamp = None
    return _cached_index(str(annotation_file), str(image_dir), bool(remove_images_without_annotations), stamp)


# ============================================================== order, partition, batches

def _epoch_order(size, shuffle, seed, epoch) -> np.ndarray:
    """The dataset positions of one epoch: 0..size-1, or a permutation drawn from
    ``seed + epoch`` (wrapped to 64 bits)."""
    if not shuffle:
        return np.arange(size)
    return np.random.Generator(np.random.PCG64((seed + epoch) % 2 ** 64)).permutation(size)


def sample_stream(size, part=(0, 1), stride_partition=False, shuffle=True, seed=0):
    """Endless dataset positions that device ``part[0]`` of ``part[1]`` reads, in order
    (OneFlow's ``DistributedTrainingDataset``: with ``stride_partition`` positions
    ``d, d + n, ...`` of the epochs' sequences; else ranges of ``ceil(size / n)``)."""
    d, n = part
    epoch = 0
    order = _epoch_order(size, shuffle, seed, epoch)
    shard = math.ceil(size / n)
    pos, in_shard = (d if stride_partition else d * shard), 0
    while True:
        if pos >= size:      # OneFlow draws the next epoch's order, then wraps
            epoch += 1
            order = _epoch_order(size, shuffle, seed, epoch)
            pos %= size
        yield int(order[pos])
        if stride_partition:
            pos += n
        else:
            pos, in_shard = pos + 1, in_shard + 1
            if in_shard == shard:
                pos, in_shard = pos + (n - 1) * shard, 0
        if pos >= size:
            epoch += 1
            order = _epoch_order(size, shuffle, seed, epoch)
            pos %= size


def grouped_batches(samples, batch_size, group_of):
    """Batches of ``batch_size`` samples of one group (OneFlow's ``GroupBatchDataset``): a
    sample of another group than the batch being filled waits in the last batch of its
    group (a new one when that is full); each batch starts from the earliest waiting one."""
    waiting = {}    # group -> list of [order, samples]
    order = 0
    while True:
        group, batch = None, []
        started = [(q[0][0], g) for g, q in waiting.items() if q]
        if started:
            group = min(started)[1]
            batch = waiting[group].pop(0)[1]
        while len(batch) < batch_size:
            s = next(samples)
            g = group_of(s)
            if group is None:
                group = g
            if g == group:
                batch.append(s)
                continue
            queue = waiting.setdefault(g, [])
            if not queue or len(queue[-1][1]) == batch_size:
                queue.append([order, [s]])
                order += 1
            else:
                queue[-1][1].append(s)
        yield batch


def plain_batches(samples, batch_size):
    while True:
        yield [next(samples) for _ in range(batch_size)]


def position_batches(index_size, heights, widths, batch_size, part=(0, 1), stride_partition=False, shuffle=True,
                     seed=0, group_by_ratio=True):
    """Endless batches of dataset positions (no file is read): the reader's order."""
    samples = sample_stream(index_size, part, stride_partition, shuffle, seed)
    if group_by_ratio:
        return grouped_batches(samples, batch_size, lambda i: int(heights[i]) // int(widths[i]))
    return plain_batches(samples, batch_size)


# ============================================================== the op

ATTRS = {
    "session_id": ("int64", 0), "annotation_file": "string", "image_dir": "string", "batch_size": ("int64", 0),
    "shuffle_after_epoch": ("bool", True), "random_seed": ("int64", -1), "group_by_ratio": ("bool", True),
    "remove_images_without_annotations": ("bool", True), "stride_partition": ("bool", False),
    "nd_sbp": "list_string",
}


def _index_of(attrs):
    return load_index(attrs["annotation_file"], attrs["image_dir"], attrs["remove_images_without_annotations"])


def _coco_infer(ctx):
    n = ctx.attr("batch_size")
    ctx.check(n >= 1, f"attr 'batch_size' must be >= 1, received {n}")
    try:
        _index_of(ctx.attrs)
    except COCOError as e:
        ctx.fail(str(e))
    for name in OUTPUTS:
        if name == "image_id":
            ctx.set_output(name, (n,), _dt.int64)
        elif name == "image_size":
            ctx.set_output(name, (n, 2), _dt.int32)
        else:
            ctx.set_output(name, (n,), _dt.tensor_buffer)


def _coco_sbp(ctx):
    """Every output split along the batch (OneFlow's only signature); the devices must
    divide ``batch_size`` (OneFlow's CHECK)."""
    if ctx.parallel_num > 1 and ctx.attr("batch_size") % ctx.parallel_num:
        raise JobBuildError(f"op '{ctx.op_name}' (COCOReader): batch_size {ctx.attr('batch_size')} must be "
                            f"divisible by the {ctx.parallel_num} devices of its placement (OneFlow: each reads "
                            "batch_size / parallel_num images)")
    return _sbp.Only([{a: _sbp.split(0) for a in ctx.output_args}])


def _read_file(path):
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), np.int8)


def _coco_items(attrs, batch, part):
    index = _index_of(attrs)
    for positions in position_batches(len(index), index.heights, index.widths, batch, part,
                                      attrs["stride_partition"], attrs["shuffle_after_epoch"], attrs["random_seed"],
                                      attrs["group_by_ratio"]):
        yield ([_read_file(index.paths[i]) for i in positions], index.image_ids[positions],
               np.stack([index.heights[positions], index.widths[positions]], axis=1),
               [index.boxes[i] for i in positions], [index.labels[i] for i in positions],
               [index.segm[i] for i in positions], [index.segm_index[i] for i in positions])


def _finish(item):
    image, image_id, image_size, *rest = item
    return (image, torch.from_numpy(np.ascontiguousarray(image_id, np.int64)),
            torch.from_numpy(np.ascontiguousarray(image_size, np.int32)), *rest)


def _coco_kernel(k):
    attrs = k.attrs
    batch = k.output("image").shape[0]
    n = k.parallel_num if k.sbp("image") == _sbp.split(0) else attrs["batch_size"] // batch
    part = (0, 1) if n == 1 else (k.parallel_id % n, n)
    _index_of(attrs)   # parsed here, before the worker forks
    return SourceKernel(lambda: _coco_items(attrs, batch, part), k.op_name, _finish)


op("COCOReader", outputs=list(OUTPUTS), attrs=ATTRS, infer=_coco_infer, kernel=_coco_kernel, sbp=_coco_sbp,
   no_grad=True, random=True, keeps_state=True, cpu_only=True,
   doc="batches of a COCO data set: encoded images, ids, sizes, boxes, labels and polygons")
