"""Write OFRecord shards that ``flow.data.ofrecord_reader`` reads.

::

    # MNIST / Fashion-MNIST (graphfront.data.load_mnist finds the files) -> <out>/train, <out>/test
    python -m graphfront.tools.ofrecord mnist --dataset fashion --out fashion_ofrecord --data-part-num 4
    # the same images PNG-encoded, in OneFlow's ImageNet feature names (encoded, class/label)
    python -m graphfront.tools.ofrecord mnist --dataset fashion --image-format png --out fashion_png

    # an image folder: <src>/<class name>/<image>.{jpg,jpeg,png}, classes numbered in sorted order
    python -m graphfront.tools.ofrecord folder --src images/train --out images_ofrecord/train

MNIST records hold ``images``: one bytes value, the 28*28 uint8 pixels row by row (decode
with ``OFRecordRawDecoder(rec, "images", shape=(1, 28, 28), dtype=flow.uint8)``) and
``labels``: int32 list of one value. Image-folder records hold OneFlow's ImageNet feature
names: ``encoded`` (the file's bytes, as stored) and ``class/label`` (int32), decoded by
``OFRecordImageDecoder(rec, "encoded")`` and ``OFRecordRawDecoder(rec, "class/label",
shape=(), dtype=flow.int32)``. Shards are ``part-00000`` … (``--part-name-suffix-length``).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from tqdm import tqdm

from graphfront.ofrecord.records import OFRecord, ShardWriter, bytes_feature, int32_feature
from graphfront.data import load_mnist

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


IMAGE_FORMATS = ("raw", "png", "jpeg")


def mnist_record(image: np.ndarray, label: int, image_format="raw") -> OFRecord:
    """One MNIST record. ``raw``: ``images`` (the uint8 pixels as bytes) and ``labels``
    (int32); ``png`` / ``jpeg``: ``encoded`` (the encoded image) and ``class/label`` (int32),
    the feature names of OneFlow's ImageNet shards."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if image_format == "raw":
        return OFRecord(feature={"images": bytes_feature(image.tobytes()), "labels": int32_feature(int(label))})
    import io
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format=image_format.upper(), **({"quality": 95} if image_format == "jpeg" else {}))
    return OFRecord(feature={"encoded": bytes_feature(buf.getvalue()), "class/label": int32_feature(int(label))})


def write_arrays(out_dir, images, labels, data_part_num=1, part_name_suffix_length=5, progress=False,
                 image_format="raw") -> int:
    """Write uint8 ``images`` (N, H, W) and integer ``labels`` (N,) as MNIST-style shards."""
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"image_format must be one of {IMAGE_FORMATS}, received {image_format!r}")
    with ShardWriter(out_dir, len(images), data_part_num, part_name_suffix_length=part_name_suffix_length) as w:
        for image, label in tqdm(zip(images, labels), total=len(images), disable=not progress, desc=out_dir):
            w.write(mnist_record(image, label, image_format))
    return len(images)


def write_mnist(out_dir, dataset="mnist", data_dir=None, data_part_num=1, part_name_suffix_length=5,
                progress=False, image_format="raw") -> dict:
    """Write the train and test splits of MNIST / Fashion-MNIST under ``out_dir/train`` and
    ``out_dir/test`` (see :func:`mnist_record` for ``image_format``); returns
    ``{split: number of records}``."""
    (tx, ty), (ex, ey) = load_mnist(1, 1, dataset=dataset, data_dir=data_dir, verbose=False)
    counts = {}
    for split, x, y in (("train", tx, ty), ("test", ex, ey)):
        pixels = np.rint(np.concatenate(x).reshape(-1, 28, 28) * 255.0).astype(np.uint8)
        counts[split] = write_arrays(os.path.join(out_dir, split), pixels, np.concatenate(y), data_part_num,
                                     part_name_suffix_length, progress, image_format)
    return counts


def folder_items(src):
    """``[(path, label)]`` of the images under ``src/<class>/``, classes numbered in sorted
    order, and the class names. Raises ValueError when ``src`` holds no image."""
    classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    items = []
    for label, name in enumerate(classes):
        folder = os.path.join(src, name)
        for f in sorted(os.listdir(folder)):
            if f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(folder, f)):
                items.append((os.path.join(folder, f), label))
    if not items:
        raise ValueError(f"{src} holds no class folder with {'/'.join(IMAGE_EXTENSIONS)} images")
    return items, classes


def write_folder(src, out_dir, data_part_num=1, part_name_suffix_length=5, shuffle_seed=0, progress=False):
    """Write the images of ``src/<class>/*`` as shards of ``encoded`` + ``class/label``
    records, in an order shuffled with ``shuffle_seed`` (None: sorted order). Returns
    ``(number of records, class names)``."""
    items, classes = folder_items(src)
    if shuffle_seed is not None:
        items = [items[i] for i in np.random.default_rng(shuffle_seed).permutation(len(items))]
    with ShardWriter(out_dir, len(items), data_part_num, part_name_suffix_length=part_name_suffix_length) as w:
        for path, label in tqdm(items, disable=not progress, desc=out_dir):
            with open(path, "rb") as f:
                encoded = f.read()
            w.write(OFRecord(feature={"encoded": bytes_feature(encoded), "class/label": int32_feature(label)}))
    return len(items), classes


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m graphfront.tools.ofrecord", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mnist", help="MNIST / Fashion-MNIST -> <out>/train, <out>/test")
    m.add_argument("--dataset", choices=("mnist", "fashion"), default="mnist")
    m.add_argument("--data-dir", default=None, help="directory of the IDX files (see graphfront.data.load_mnist)")
    m.add_argument("--image-format", choices=IMAGE_FORMATS, default="raw",
                   help="raw: images/labels features; png, jpeg: encoded/class/label, as ImageNet shards")
    f = sub.add_parser("folder", help="<src>/<class>/<image> -> <out>")
    f.add_argument("--src", required=True)
    f.add_argument("--shuffle-seed", type=int, default=0)
    for s in (m, f):
        s.add_argument("--out", required=True)
        s.add_argument("--data-part-num", type=int, default=1)
        s.add_argument("--part-name-suffix-length", type=int, default=5)
    args = p.parse_args(argv)
    if args.command == "mnist":
        counts = write_mnist(args.out, args.dataset, args.data_dir, args.data_part_num, args.part_name_suffix_length,
                             progress=True, image_format=args.image_format)
        print(f"wrote {counts['train']} train and {counts['test']} test records under {args.out}")
    else:
        n, classes = write_folder(args.src, args.out, args.data_part_num, args.part_name_suffix_length,
                                  args.shuffle_seed, progress=True)
        print(f"wrote {n} records of {len(classes)} classes to {args.out}: " +
              ", ".join(f"{i}={c}" for i, c in enumerate(classes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
