"""``flow.data.coco_reader``: OneFlow v0.6.0's reader of a COCO detection data set
(``python/oneflow/compatible/single_client/ops/user_data_ops.py``, ``api_coco_reader`` and
its ``COCOReader`` module; the op is in :mod:`graphfront.ops.coco_ops`, which documents
what each output holds and the order the images come in).

Typical use (OneFlow's Mask R-CNN data loader)::

    image, image_id, image_size, bbox, label, segm, segm_index = flow.data.coco_reader(
        "annotations/instances_train2017.json", "train2017", batch_size=2, name="coco_reader")
    image = flow.image_decode(image, dtype=flow.float)
"""
from __future__ import annotations

import os
import random
import sys

from graphfront import toplevel as _toplevel
from graphfront.framework.blob_desc import expect_int
from graphfront.framework.errors import ArgumentError
from graphfront.ops import coco_ops as _coco_ops  # noqa: F401 - registers COCOReader
from graphfront.ops.builder import build_op, unique_str

__all__ = ["coco_reader"]

_FN = "flow.data.coco_reader"


def _path(value, arg):
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentError(f"{_FN}: argument '{arg}' expects a path (str), received {type(value).__name__} "
                            f"{value!r}")
    return os.fspath(value)


def _flag(value, arg):
    if not isinstance(value, bool):
        raise ArgumentError(f"{_FN}: argument '{arg}' expects a bool, received {type(value).__name__} {value!r}")
    return value


def coco_reader(annotation_file, image_dir, batch_size, shuffle=True, random_seed=None, group_by_aspect_ratio=True,
                stride_partition=True, remove_images_without_annotations=True, name=None):
    """Read batches of a COCO data set: ``annotation_file`` (COCO's instances JSON) and the
    image files it names under ``image_dir``.

    Args:
        annotation_file: the annotation JSON (``images``, ``annotations``, ``categories``).
        image_dir: the directory the ``file_name`` of every image is relative to; a name that
            leads outside it is refused.
        batch_size: images per step (the devices of a placement share it; they must divide it).
        shuffle: a new order every epoch (OneFlow's ``shuffle_after_epoch``).
        random_seed: the seed of the orders (None: a random one, drawn here, as OneFlow).
        group_by_aspect_ratio: batches of images of one ``height // width`` group.
        stride_partition: devices read interleaved positions instead of contiguous ranges.
        remove_images_without_annotations: skip the images without a usable annotation.
        name: required (OneFlow's module op): names the op on its first use in a job; later
            calls with the same name build another op of the first call's reader (named
            ``COCOReader<n>``) and ignore their other arguments, as OneFlow's module does.

    Returns:
        list of 7 BlobDescs ``[image, image_id, image_size, gt_bbox, gt_label, gt_segm,
        gt_segm_index]``: ``image`` a tensor_buffer ``(batch_size,)`` of the encoded files
        (int8 bytes, for ``flow.image_decode``), ``image_id`` int64 ``(batch_size,)``,
        ``image_size`` int32 ``(batch_size, 2)`` as ``(height, width)``, and tensor_buffers
        ``(batch_size,)`` of float32 ``(n, 4)`` xyxy boxes, int32 ``(m,)`` contiguous labels
        (from 1), float32 ``(p, 2)`` polygon points and int32 ``(p, 3)`` polygon indices.

    Raises:
        ArgumentError: an argument of the wrong kind, or no ``name``.
        JobBuildError: a missing or malformed annotation file (naming the file, the entry
            and the field), an image file outside ``image_dir`` or missing, no image left
            to read, ``batch_size < 1``.

    OneFlow: op ``COCOReader`` (``oneflow/user/ops/coco_reader_op.cpp``).
    """
    if name is None:
        raise ArgumentError(f"{_FN}: argument 'name' is required (OneFlow's COCO reader is a module op named by "
                            "it), e.g. name='coco_reader'")
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"{_FN}: argument 'name' expects a non-empty str, received {name!r}")

    def attrs():
        seed = random.randrange(sys.maxsize) if random_seed is None else expect_int(random_seed, _FN, "random_seed")
        return {
            "session_id": 0, "annotation_file": _path(annotation_file, "annotation_file"),
            "image_dir": _path(image_dir, "image_dir"), "batch_size": expect_int(batch_size, _FN, "batch_size"),
            "shuffle_after_epoch": _flag(shuffle, "shuffle"), "random_seed": seed,
            "group_by_ratio": _flag(group_by_aspect_ratio, "group_by_aspect_ratio"),
            "remove_images_without_annotations": _flag(remove_images_without_annotations,
                                                       "remove_images_without_annotations"),
            "stride_partition": _flag(stride_partition, "stride_partition"),
        }

    module = _toplevel.find_or_create_module(name, lambda: {"attrs": attrs(), "calls": 0}, reuse=True)
    op_name = name if module["calls"] == 0 else unique_str("COCOReader")
    module["calls"] += 1
    return list(build_op("COCOReader", attrs=module["attrs"], outputs=_coco_ops.OUTPUTS, name=op_name))
