"""AutoTest of the data-pipeline ops (graphfront.ops.data_ops) against numpy, Pillow and
torch references computed from the arrays the records were written from.

Each draw writes a small OFRecord data set (drawn images stored as PNG, so decoding is
exact, plus labels, float features and raw pixel bytes) in ``check.rng``-drawn shards,
reads it back in a job and compares with the source arrays.
"""
import io
import tempfile

import numpy as np
from PIL import Image

from graphfront.ofrecord import OFRecord, ShardWriter, bytes_feature, float_feature, int32_feature
from graphfront.testing import autotest

N = 3
CPU_ONLY = ("cpu",)  # the OFRecord readers and decoders run on the host (CPU kernels only, as in OneFlow)
_TMP = tempfile.TemporaryDirectory(prefix="graphfront-data-autotest-")


def _png(image):
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def dataset(check, n=None, size=None):
    """Write a drawn data set; returns (dir, data_part_num, images (RGB), labels, feats)."""
    rng = check.rng
    n = n or int(rng.integers(3, 9))
    h, w = size or (int(rng.integers(5, 14)), int(rng.integers(5, 14)))
    images = rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n).astype(np.int32)
    feats = rng.standard_normal((n, 3)).astype(np.float32)
    parts = int(rng.integers(1, min(n, 3) + 1))
    directory = tempfile.mkdtemp(dir=_TMP.name)
    with ShardWriter(directory, n, parts, part_name_suffix_length=5) as writer:
        for i in range(n):
            writer.write(OFRecord(feature={"encoded": bytes_feature(_png(images[i])),
                                           "class/label": int32_feature(labels[i]),
                                           "feat": float_feature(feats[i]),
                                           "raw": bytes_feature(images[i].tobytes())}))
    return directory, parts, images, labels, feats


def reader(flow, directory, parts, n):
    return flow.data.ofrecord_reader(directory, batch_size=n, data_part_num=parts, part_name_suffix_length=5)


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_ofrecord_reader_and_raw_decoders(check):
    d, parts, images, labels, feats = dataset(check)
    n, h, w, _ = images.shape

    def gf(flow):
        rec = reader(flow, d, parts, n)
        raw = flow.data.OFRecordBytesDecoder(rec, "raw")
        return [flow.data.OFRecordRawDecoder(rec, "class/label", shape=(), dtype=flow.int32),
                flow.data.OFRecordRawDecoder(rec, "feat", shape=(3,), dtype=flow.float),
                flow.data.OFRecordRawDecoder(rec, "raw", shape=(h, w, 3), dtype=flow.uint8),
                flow.tensor_buffer_to_tensor(raw, dtype=flow.uint8, instance_shape=(h * w * 3,))]

    check(graphfront=gf,
          torch=lambda torch: [torch.from_numpy(labels), torch.from_numpy(feats), torch.from_numpy(images),
                               torch.from_numpy(images).reshape(n, -1)])


def _resize_reference(images, tw, th):
    """Pillow's "auto" choice: area averaging (BOX) to shrink, bilinear to enlarge."""
    h, w = images.shape[1:3]
    method = Image.BOX if tw * th < w * h else Image.BILINEAR
    return np.stack([np.asarray(Image.fromarray(im).resize((tw, th), method)) for im in images])


def _cmn_reference(torch, images, flips, ch, cw, mean, std, layout):
    """Centered crop (floor of half the slack), mirror, normalize, layout, with torch ops."""
    x = torch.from_numpy(images).float()
    h, w = x.shape[1:3]
    y0, x0 = (h - ch) // 2, (w - cw) // 2
    x = x[:, y0:y0 + ch, x0:x0 + cw]
    x = torch.where(flips.bool().view(-1, 1, 1, 1), x.flip(2), x)
    x = (x - torch.tensor(mean)) / torch.tensor(std)
    return x.permute(0, 3, 1, 2) if layout == "NCHW" else x


@autotest(n=N, auto_backward=False, rtol=1e-5, atol=1e-4, devices=CPU_ONLY)
def test_image_decode_resize_crop_mirror_normalize(check):
    rng = check.rng
    d, parts, images, _, _ = dataset(check)
    n, h, w, _ = images.shape
    color = str(rng.choice(["RGB", "BGR"]))
    decoded = images if color == "RGB" else images[..., ::-1].copy()
    tw, th = int(rng.integers(4, 20)), int(rng.integers(4, 20))
    ch, cw = int(rng.integers(1, th + 1)), int(rng.integers(1, tw + 1))
    ch2, cw2 = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
    mean = [float(v) for v in rng.uniform(0, 255, 3)]
    std = [float(v) for v in rng.uniform(1, 80, 3)]
    layout = str(rng.choice(["NCHW", "NHWC"]))
    seed, p = int(rng.integers(1000)), float(rng.uniform(0.2, 0.8))

    def gf(flow):
        rec = reader(flow, d, parts, n)
        img = flow.data.OFRecordImageDecoder(rec, "encoded", color_space=color)
        rsz, scale, _ = flow.image.Resize(img, target_size=(tw, th))
        flips = flow.random.CoinFlip(batch_size=n, seed=seed, probability=p)
        out = flow.image.CropMirrorNormalize(rsz, mirror_blob=flips, color_space=color, crop_h=ch, crop_w=cw,
                                             mean=mean, std=std, output_layout=layout)
        out_tb = flow.image.CropMirrorNormalize(img, crop_h=ch2, crop_w=cw2, mean=mean, std=std,
                                                output_layout=layout)
        return [rsz, scale, flips, out, out_tb]

    def th_(torch):
        gen = torch.Generator()
        gen.manual_seed(seed)
        flips = (torch.rand(n, generator=gen) < p).to(torch.int8)
        resized = _resize_reference(decoded, tw, th)
        scale = torch.tensor([[tw / w, th / h]] * n, dtype=torch.float32)
        return [torch.from_numpy(resized), scale, flips,
                _cmn_reference(torch, resized, flips, ch, cw, mean, std, layout),
                _cmn_reference(torch, decoded, torch.zeros(n, dtype=torch.int8), ch2, cw2, mean, std, layout)]

    check(graphfront=gf, torch=th_)


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_random_crop_decoder_and_classification_reader(check):
    d, parts, images, labels, _ = dataset(check)
    n, h, w, _ = images.shape
    gray = np.asarray([np.asarray(Image.fromarray(im).convert("L")) for im in images])[..., None]

    def gf(flow):
        rec = reader(flow, d, parts, n)
        # a window of the whole area with the image's own aspect ratio is the whole image
        crop = flow.data.OFRecordImageDecoderRandomCrop(rec, "encoded", color_space="RGB", seed=3,
                                                        random_area=[1.0, 1.0], random_aspect_ratio=[w / h, w / h])
        image, label = flow.data.ofrecord_image_classification_reader(
            d, "encoded", "class/label", batch_size=n, data_part_num=parts, part_name_suffix_length=5,
            color_space="GRAY")
        return [flow.tensor_buffer_to_tensor(crop, dtype=flow.uint8, instance_shape=(h, w, 3)),
                flow.tensor_buffer_to_tensor(image, dtype=flow.uint8, instance_shape=(h, w, 1)), label]

    check(graphfront=gf, torch=lambda torch: [torch.from_numpy(images), torch.from_numpy(gray),
                                              torch.from_numpy(labels)])


def _keep_aspect_size(h, w, target, side, bound):
    """(width, height) keeping h:w: the ``side`` side becomes ``target`` and the other is
    rounded half to even (np.rint), then bounded by ``bound`` (max for the other side when
    resizing the shorter, min for it when resizing the longer)."""
    short, long_ = min(h, w), max(h, w)
    if side == "shorter":
        s, lo = target, int(np.rint(target * long_ / short))
        if bound and lo > bound:
            lo, s = bound, int(np.rint(bound * short / long_))
    else:
        lo, s = target, int(np.rint(target * short / long_))
        if bound and s < bound:
            s, lo = bound, int(np.rint(bound * long_ / short))
    return (s, lo) if w < h else (lo, s)


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_image_resize_keep_aspect_ratio_and_decoder_random_crop_resize(check):
    rng = check.rng
    d, parts, images, _, _ = dataset(check)
    n, h, w, _ = images.shape
    side = str(rng.choice(["shorter", "longer"]))
    target = int(rng.integers(4, 20))
    bound = int(rng.choice([0, target + int(rng.integers(0, 6))])) if side == "shorter" else \
        int(rng.choice([0, int(rng.integers(1, target + 1))]))
    rw, rh = _keep_aspect_size(h, w, target, side, bound)
    tw, th = int(rng.integers(4, 20)), int(rng.integers(4, 20))

    def gf(flow):
        rec = reader(flow, d, parts, n)
        img = flow.data.OFRecordImageDecoder(rec, "encoded", color_space="RGB")
        bounds = {"max_size": bound} if side == "shorter" else {"min_size": bound}
        rsz, scale, size = flow.image.Resize(img, target_size=target, keep_aspect_ratio=True, resize_side=side,
                                             **bounds)
        # a window of the whole area with a ratio no image has: after num_attempts misses, the whole image
        dec = flow.data.ImageDecoderRandomCropResize(flow.data.OFRecordBytesDecoder(rec, "encoded"), tw, th,
                                                     num_attempts=1, random_area=[1.0, 1.0],
                                                     random_aspect_ratio=[100.0, 100.0])
        return [flow.tensor_buffer_to_tensor(rsz, dtype=flow.uint8, instance_shape=(rh, rw, 3)), scale, size, dec]

    def th_(torch):
        resized = _resize_reference(images, rw, rh)
        bilinear = np.stack([np.asarray(Image.fromarray(im).resize((tw, th), Image.BILINEAR)) for im in images])
        return [torch.from_numpy(resized), torch.tensor([[rw / w, rh / h]] * n, dtype=torch.float32),
                torch.tensor([[rw, rh]] * n, dtype=torch.int32), torch.from_numpy(bilinear)]

    check(graphfront=gf, torch=th_)
