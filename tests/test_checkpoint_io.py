"""Tests of graphfront.framework.checkpoint_io: the OneFlow checkpoint file layout."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from graphfront.framework import dtypes as gdt
from graphfront.framework import checkpoint_io as cio
from graphfront.framework.checkpoint_io import (
    CheckpointError,
    FileBackendVariableBlob,
    load_checkpoint,
    save_checkpoint,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _random(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind == "f":
        a = rng.standard_normal(size=shape).astype(dtype)
        if a.size:
            a.reshape(-1)[0] = -0.0  # sign of zero must survive too
        return a
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def _assert_identical(got, want):
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def _siblings(path):
    parent = os.path.dirname(str(path))
    return sorted(n for n in os.listdir(parent) if n != os.path.basename(str(path)))


def _tree(root):
    """{relative path: bytes or None for dirs} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


# ----------------------------------------------------------------------------- round trip

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.bool_]
SHAPES = [(), (1,), (7,), (3, 4), (2, 3, 5), (0, 3)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_bit_identical(tmp_path, dtype):
    path = tmp_path / "ckpt"
    arrays = {f"var_{i}": _random(shape, dtype, seed=i) for i, shape in enumerate(SHAPES)}
    save_checkpoint(path, arrays)

    assert os.path.isfile(path / "snapshot_done")
    assert os.path.getsize(path / "snapshot_done") == 0
    assert _siblings(path) == []  # no temporary or backup directory left behind

    loaded = load_checkpoint(path)
    assert list(loaded) == sorted(arrays)
    for name, want in arrays.items():
        blob = loaded[name]
        assert isinstance(blob, FileBackendVariableBlob)
        assert blob.name == name
        assert blob.file_path == str(path / name / "out")
        assert blob.shape == want.shape
        assert blob.dtype is gdt.from_numpy(want.dtype)
        with open(blob.file_path, "rb") as f:
            assert f.read() == want.tobytes()  # raw C-order bytes, no header
        _assert_identical(blob.numpy(), want)


def test_non_contiguous_and_big_endian_inputs(tmp_path):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    arrays = {
        "transposed": base.T,
        "strided": base[:, ::2],
        "big_endian": np.arange(5, dtype=">i4"),
    }
    save_checkpoint(tmp_path / "c", arrays)
    loaded = load_checkpoint(tmp_path / "c")
    _assert_identical(loaded["transposed"].numpy(), np.ascontiguousarray(base.T))
    _assert_identical(loaded["strided"].numpy(), np.ascontiguousarray(base[:, ::2]))
    _assert_identical(loaded["big_endian"].numpy(), np.arange(5, dtype=np.int32))


def test_small_slices_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(cio, "_slice_bytes", 1000)
    seen = []
    monkeypatch.setattr(cio, "_test_hook", lambda stage, **info: seen.append((stage, info)))
    a = _random((123, 77), np.float64)
    save_checkpoint(tmp_path / "c", {"w": a})
    _assert_identical(load_checkpoint(tmp_path / "c")["w"].numpy(), a)
    slices = [info["nbytes"] for stage, info in seen if stage == "slice_written" and info["name"] == "w"]
    assert max(slices) <= 1000 and sum(slices) >= a.nbytes
    assert len(slices) >= a.nbytes // 1000


def test_default_slice_is_32_mib():
    assert cio._slice_bytes == 32 * 1024 * 1024


def test_accepts_blob_values_and_saves_empty_mapping(tmp_path):
    a = _random((3, 3), np.int64)
    save_checkpoint(tmp_path / "a", {"x": a})
    save_checkpoint(tmp_path / "b", load_checkpoint(tmp_path / "a"))
    _assert_identical(load_checkpoint(tmp_path / "b")["x"].numpy(), a)

    save_checkpoint(tmp_path / "empty", {})
    assert load_checkpoint(tmp_path / "empty") == {}


def test_meta_text_format(tmp_path):
    save_checkpoint(tmp_path / "c", {"w": np.zeros((10, 5), np.float32), "s": np.int64(3)})
    with open(tmp_path / "c" / "w" / "meta") as f:
        assert f.read() == "shape {\n  dim: 10\n  dim: 5\n}\ndata_type: kFloat\n"
    with open(tmp_path / "c" / "s" / "meta") as f:
        assert f.read() == "shape {\n}\ndata_type: kInt64\n"


def test_reads_hand_written_checkpoint(tmp_path):
    # A checkpoint as OneFlow writes it, built by hand.
    v = tmp_path / "ck" / "dense1-weight"
    os.makedirs(v)
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    (v / "out").write_bytes(a.tobytes())
    (v / "meta").write_text("shape {\n  dim: 2\n  dim: 3\n}\ndata_type: kDouble\n")
    (tmp_path / "ck" / "snapshot_done").write_bytes(b"")
    os.makedirs(tmp_path / "ck" / "not_a_variable")  # subdirs without out/meta are ignored
    loaded = load_checkpoint(tmp_path / "ck")
    assert list(loaded) == ["dense1-weight"]
    _assert_identical(loaded["dense1-weight"].numpy(), a)


def test_load_variable_dir_returns_single_blob(tmp_path):
    a = _random((4,), np.int32)
    save_checkpoint(tmp_path / "c", {"v": a})
    blob = load_checkpoint(tmp_path / "c" / "v")
    assert isinstance(blob, FileBackendVariableBlob)
    assert blob.name == "v"
    _assert_identical(blob.numpy(), a)


def test_blob_without_meta(tmp_path):
    a = _random((2, 6), np.float32)
    save_checkpoint(tmp_path / "c", {"v": a})
    os.remove(tmp_path / "c" / "v" / "meta")
    blob = load_checkpoint(tmp_path / "c")["v"]
    assert blob.shape is None and blob.dtype is None
    with pytest.raises(CheckpointError, match=r"'v'.*no meta file"):
        blob.numpy()
    _assert_identical(blob.numpy_as((2, 6), gdt.float32), a)
    _assert_identical(blob.numpy_as([12], np.float32), a.reshape(12))
    with pytest.raises(CheckpointError) as ei:
        blob.numpy_as((3, 6), gdt.float32)
    msg = str(ei.value)
    assert "'v'" in msg and "72 bytes" in msg and "48 bytes" in msg and blob.file_path in msg


def test_numpy_as_must_agree_with_meta(tmp_path):
    save_checkpoint(tmp_path / "c", {"v": np.zeros((2, 2), np.float32)})
    blob = load_checkpoint(tmp_path / "c")["v"]
    _assert_identical(blob.numpy_as((2, 2), gdt.float32), np.zeros((2, 2), np.float32))
    with pytest.raises(CheckpointError, match="'v'"):
        blob.numpy_as((4,), gdt.float32)


# ----------------------------------------------------------------------------- corrupted files


def test_truncated_out_file(tmp_path):
    save_checkpoint(tmp_path / "c", {"w": np.ones((10, 5), np.float32)})
    out = tmp_path / "c" / "w" / "out"
    with open(out, "r+b") as f:
        f.truncate(100)
    with pytest.raises(CheckpointError) as ei:
        load_checkpoint(tmp_path / "c")
    msg = str(ei.value)
    assert "'w'" in msg and str(out) in msg
    assert "200 bytes" in msg and "(10, 5)" in msg and "float32" in msg
    assert "100 bytes" in msg and "truncated or corrupted" in msg


def test_out_file_truncated_after_open(tmp_path):
    save_checkpoint(tmp_path / "c", {"w": np.ones((8,), np.int64)})
    blob = load_checkpoint(tmp_path / "c")["w"]
    with open(blob.file_path, "r+b") as f:
        f.truncate(8)
    with pytest.raises(CheckpointError, match=r"'w'.*64 bytes.*truncated or corrupted"):
        blob.numpy()


def test_missing_out_file(tmp_path):
    save_checkpoint(tmp_path / "c", {"w": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    os.remove(tmp_path / "c" / "w" / "out")
    with pytest.raises(CheckpointError) as ei:
        load_checkpoint(tmp_path / "c")
    assert "'w'" in str(ei.value) and str(tmp_path / "c" / "w" / "out") in str(ei.value)
    with pytest.raises(CheckpointError, match="'w'.*missing"):
        FileBackendVariableBlob(tmp_path / "c" / "w")


@pytest.mark.parametrize(
    "meta_text",
    [
        "this is not a proto",
        "shape {\n  dim: 3\n}\n",  # data_type missing
        "shape {\n  dim: 3\n}\ndata_type: kNotAType\n",
        "shape {\n  dim: 3\n}\ndata_type: kOFRecord\n",  # no numpy equivalent
        "shape {\n  dim: -3\n}\ndata_type: kFloat\n",
        b"\xff\xfe garbage",
        "shape {\n  dim: 3\r\x00% }\n",  # control characters, quoted by the parser's error
    ],
)
def test_corrupted_meta(tmp_path, meta_text):
    save_checkpoint(tmp_path / "c", {"w": np.ones(3, np.float32)})
    meta = tmp_path / "c" / "w" / "meta"
    if isinstance(meta_text, bytes):
        meta.write_bytes(meta_text)
    else:
        meta.write_text(meta_text)
    with pytest.raises(CheckpointError) as ei:
        load_checkpoint(tmp_path / "c")
    assert "'w'" in str(ei.value) and str(meta) in str(ei.value)
    assert str(ei.value).isprintable(), str(ei.value)  # (a file's bytes never reach a message raw)


def test_incomplete_checkpoint_without_snapshot_done(tmp_path):
    save_checkpoint(tmp_path / "c", {"w": np.ones(3, np.float32)})
    os.remove(tmp_path / "c" / "snapshot_done")
    with pytest.raises(CheckpointError, match="incomplete.*half-written") as ei:
        load_checkpoint(tmp_path / "c")
    assert str(tmp_path / "c") in str(ei.value)


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        load_checkpoint(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(ei.value)


def test_path_is_a_file_on_load(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        load_checkpoint(tmp_path / "f")


# ----------------------------------------------------------------------------- save refusals


def test_refuses_non_empty_non_checkpoint_dir(tmp_path):
    path = tmp_path / "mine"
    os.makedirs(path / "sub")
    (path / "notes.txt").write_text("precious")
    (path / "sub" / "out").write_bytes(b"\x01\x02")
    before = _tree(path)
    with pytest.raises((ValueError, FileExistsError)) as ei:
        save_checkpoint(path, {"w": np.ones(3, np.float32)})
    assert isinstance(ei.value, CheckpointError)
    assert str(path) in str(ei.value) and "not empty" in str(ei.value)
    assert _tree(path) == before
    assert _siblings(path) == []


def test_refuses_variable_dir_path(tmp_path):
    # A single-variable directory has `out` but no snapshot_done: not replaceable.
    save_checkpoint(tmp_path / "c", {"w": np.ones(3, np.float32)})
    before = _tree(tmp_path / "c" / "w")
    with pytest.raises(CheckpointError):
        save_checkpoint(tmp_path / "c" / "w", {"z": np.zeros(2, np.int8)})
    assert _tree(tmp_path / "c" / "w") == before


def test_refuses_file_path(tmp_path):
    f = tmp_path / "file"
    f.write_text("keep me")
    with pytest.raises(CheckpointError, match="not a directory") as ei:
        save_checkpoint(f, {"w": np.ones(3, np.float32)})
    assert str(f) in str(ei.value)
    assert f.read_text() == "keep me"


def test_writes_into_empty_dir_and_creates_parents(tmp_path):
    os.makedirs(tmp_path / "empty")
    save_checkpoint(tmp_path / "empty", {"w": np.ones(3, np.float32)})
    assert list(load_checkpoint(tmp_path / "empty")) == ["w"]
    save_checkpoint(tmp_path / "a" / "b" / "c", {"w": np.ones(3, np.float32)})
    assert list(load_checkpoint(tmp_path / "a" / "b" / "c")) == ["w"]


def test_overwrite_existing_checkpoint(tmp_path):
    path = tmp_path / "c"
    old = {"a": _random((3,), np.float32, 1), "b": _random((2, 2), np.int32, 2)}
    new = {"b": _random((5,), np.int64, 3), "c": _random((), np.bool_, 4)}
    save_checkpoint(path, old)
    save_checkpoint(path, new)
    loaded = load_checkpoint(path)
    assert list(loaded) == ["b", "c"]  # nothing of the old checkpoint survives
    for k, v in new.items():
        _assert_identical(loaded[k].numpy(), v)
    assert _siblings(path) == []


@pytest.mark.parametrize("bad", ["", "a/b", "/abs", "..", ".", "snapshot_done", "x\0y", 3])
def test_bad_variable_names(tmp_path, bad):
    with pytest.raises(CheckpointError) as ei:
        save_checkpoint(tmp_path / "c", {"ok": np.ones(1, np.float32), bad: np.ones(1, np.float32)})
    assert repr(bad) in str(ei.value) and str(tmp_path / "c") in str(ei.value)
    assert not os.path.exists(tmp_path / "c")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value", [np.array([1 + 2j]), np.array(["s"]), np.array([object()])])
def test_unsupported_dtype(tmp_path, value):
    with pytest.raises(CheckpointError, match="'weird'") as ei:
        save_checkpoint(tmp_path / "c", {"weird": value})
    assert str(tmp_path / "c") in str(ei.value)
    assert os.listdir(tmp_path) == []


def test_failed_write_leaves_old_checkpoint_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "c"
    old = {"a": _random((100,), np.float64)}
    save_checkpoint(path, old)

    def boom(stage, **info):
        if stage == "slice_written":
            raise OSError("disk full")

    monkeypatch.setattr(cio, "_test_hook", boom)
    with pytest.raises(CheckpointError, match=f"checkpoint {re.escape(repr(str(path)))}: writing failed: disk full"):
        save_checkpoint(path, {"a": np.zeros(10, np.float32)})
    assert _siblings(path) == []
    _assert_identical(load_checkpoint(path)["a"].numpy(), old["a"])


# ----------------------------------------------------------------------------- crashes


def _spawn_child(body: str, path, extra=""):
    code = textwrap.dedent(
        f"""
        import os, signal, sys, time
        sys.path.insert(0, {REPO_ROOT!r})
        import numpy as np
        from graphfront.framework import checkpoint_io as cio
        path = {str(path)!r}
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(pred, proc, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"child exited ({proc.returncode}) before {what}:\n{err.decode()}")
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.slow
def test_sigkill_during_save_keeps_old_checkpoint(tmp_path):
    path = tmp_path / "ckpt"
    old = {f"old_{i}": _random((1000 + i, 17), dt, seed=i) for i, dt in enumerate(DTYPES)}
    save_checkpoint(path, old)
    old_tree = _tree(path)

    ready = tmp_path / "ready"
    # The child writes 160 MiB over 40 variables in 1 MiB slices. After 50 slices (well
    # inside the temporary directory, long before snapshot_done) it signals the parent
    # and stalls, so the SIGKILL deterministically lands in the middle of the write.
    proc = _spawn_child(
        f"""
        cio._slice_bytes = 1 << 20
        n = [0]
        def hook(stage, **info):
            if stage == "slice_written":
                n[0] += 1
                if n[0] == 50:
                    open({str(ready)!r}, "w").close()
                    time.sleep(600)
            elif stage == "tmp_complete":
                raise SystemExit("reached tmp_complete; the kill came too late")
        cio._test_hook = hook
        arrays = {{"new_%03d" % i: np.full((1 << 20,), i, np.float32) for i in range(40)}}
        assert sum(a.nbytes for a in arrays.values()) >= 100 << 20
        cio.save_checkpoint(path, arrays)
        """,
        path,
    )
    try:
        _wait_for(lambda: any(".ckpt-tmp-" in n for n in os.listdir(tmp_path)), proc, "the temporary sibling")
        _wait_for(ready.exists, proc, "50 slices written")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    tmps = [n for n in os.listdir(tmp_path) if ".ckpt-tmp-" in n]
    assert len(tmps) == 1 and tmps[0].startswith(".ckpt.")
    tmp = tmp_path / tmps[0]
    assert not os.path.exists(tmp / "snapshot_done")  # killed mid-write
    partial = sorted(n for n in os.listdir(tmp) if n.startswith("new_"))
    assert 1 <= len(partial) < 40
    assert not any(".ckpt-backup-" in n for n in os.listdir(tmp_path))

    # The old checkpoint is untouched and loads bit-identical.
    assert _tree(path) == old_tree
    loaded = load_checkpoint(path)
    assert list(loaded) == sorted(old)
    for k, v in old.items():
        _assert_identical(loaded[k].numpy(), v)

    # A later save still works and sweeps the dead child's temporary directory.
    new = {"w": _random((64, 64), np.float32, 99)}
    save_checkpoint(path, new)
    loaded = load_checkpoint(path)
    assert list(loaded) == ["w"]
    _assert_identical(loaded["w"].numpy(), new["w"])
    assert _siblings(path) == ["ready"]


@pytest.mark.slow
def test_crash_between_renames_is_recovered_by_load(tmp_path, monkeypatch):
    monkeypatch.setattr(cio, "_recover_grace_s", 0.05)
    path = tmp_path / "ckpt"
    old = {"a": _random((50, 3), np.float32, 7), "b": _random((9,), np.uint8, 8)}
    save_checkpoint(path, old)

    proc = _spawn_child(
        """
        def hook(stage, **info):
            if stage == "old_moved_aside":
                os.kill(os.getpid(), signal.SIGKILL)
        cio._test_hook = hook
        cio.save_checkpoint(path, {"new": np.ones((10,), np.float64)})
        """,
        path,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err.decode()

    # Crashed after moving the old checkpoint aside, before moving the new one in.
    assert not os.path.exists(path)
    names = os.listdir(tmp_path)
    assert any(n.startswith(".ckpt.ckpt-backup-") for n in names)
    assert any(n.startswith(".ckpt.ckpt-tmp-") for n in names)

    with pytest.warns(RuntimeWarning, match="interrupted"):
        loaded = load_checkpoint(path)
    assert list(loaded) == ["a", "b"]
    for k, v in old.items():
        _assert_identical(loaded[k].numpy(), v)
    assert not any(".ckpt-backup-" in n for n in os.listdir(tmp_path))

    save_checkpoint(path, {"c": np.arange(4, dtype=np.int32)})
    _assert_identical(load_checkpoint(path)["c"].numpy(), np.arange(4, dtype=np.int32))
    assert _siblings(path) == []


def test_crash_between_renames_is_recovered_by_save(tmp_path, monkeypatch):
    monkeypatch.setattr(cio, "_recover_grace_s", 0.05)
    path = tmp_path / "ckpt"
    save_checkpoint(path, {"a": np.ones(3, np.float32)})
    # Simulate the state left by a crash between the two renames.
    backup = tmp_path / ".ckpt.ckpt-backup-999999-deadbeef0000"
    os.rename(path, backup)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        save_checkpoint(path, {"b": np.zeros(2, np.int8)})
    assert list(load_checkpoint(path)) == ["b"]
    assert _siblings(path) == []


def test_stale_backup_after_second_rename_is_removed(tmp_path):
    path = tmp_path / "ckpt"
    save_checkpoint(path, {"a": np.ones(3, np.float32)})
    stale = tmp_path / ".ckpt.ckpt-backup-999999-deadbeef0000"
    save_checkpoint(stale, {"old": np.ones(3, np.float32)})  # a complete old checkpoint
    assert list(load_checkpoint(path)) == ["a"]  # load leaves it alone
    assert stale.exists()
    save_checkpoint(path, {"b": np.zeros(2, np.int8)})
    assert _siblings(path) == []
