"""On-disk checkpoints in the OneFlow single-client layout (files only, no session logic).

Format (OneFlow v0.6.0 single-client checkpoint layout,
``python/oneflow/compatible/single_client/framework/check_point_v2.py``; ``VariableMetaInfo`` from
``oneflow/core/framework/variable_meta_info.proto``)::

    <path>/
      <variable_op_name>/out    raw tensor bytes: C order, native (little-endian) byte
                                order, no header -- exactly ``ndarray.tobytes()``
      <variable_op_name>/meta   protobuf TEXT format of ``oneflow.VariableMetaInfo``
                                (``text_format.MessageToString``), e.g.
                                ``shape {\\n  dim: 10\\n  dim: 5\\n}\\ndata_type: kFloat\\n``
      snapshot_done             empty file, written last

``VariableMetaInfo { required ShapeProto shape = 2; required DataType data_type = 3; }``
with ``ShapeProto { repeated int64 dim = 1; }``.  A scalar is written with an empty
``shape {\\n}`` and one element in ``out``.

Writing (:func:`save_checkpoint`) is atomic with respect to crashes:

1. everything is written into a hidden temporary sibling of ``path``
   (``.<name>.ckpt-tmp-<host>-<pid>-<token>``, same parent so the final rename does not
   cross file systems), each file in slices of at most 32 MiB and fsync'd, the variable
   directories fsync'd, ``snapshot_done`` written (and fsync'd) last, then the temporary
   directory itself fsync'd;
2. if ``path`` does not exist (or is an empty directory) the temporary directory is
   renamed to ``path``;
3. if ``path`` is an existing *complete* checkpoint (it has ``snapshot_done``) it is
   replaced: the old checkpoint is renamed aside to a hidden backup sibling
   (``.<name>.ckpt-backup-<pid>-<token>``), the new one is renamed in, and the backup is
   deleted.  A crash between those two renames leaves no directory at ``path`` and the
   old, complete checkpoint at the backup name; the next :func:`load_checkpoint` (or
   :func:`save_checkpoint`) of ``path`` notices this and renames the backup back to
   ``path``.  A crash after the second rename merely leaves a stale backup, which the
   next successful save removes.

``save_checkpoint`` never deletes user data: a ``path`` that is a file, or a non-empty
directory that is not a complete checkpoint, is refused.  A crash before step 2 leaves
``path`` untouched and an incomplete hidden temporary directory, which a later save from
the same host removes once its process is gone.  Concurrent saves to the same ``path``
are not supported.

Reading (:func:`load_checkpoint`) returns :class:`FileBackendVariableBlob` objects whose
data is read lazily by :meth:`FileBackendVariableBlob.numpy`.

Every problem with the files is reported as :class:`CheckpointError` (a ``ValueError``)
whose message names the variable (where there is one) and the path; a missing
checkpoint is a ``FileNotFoundError``.
"""
from __future__ import annotations

import errno
import hashlib
import math
import os
import shutil
import time
import warnings
from typing import Dict, Mapping, Optional, Tuple, Union

import numpy as np
from google.protobuf import text_format

from graphfront.framework import dtypes as _dtypes
from graphfront.framework import tempfiles
from graphfront.framework.blob_desc import expect_path
from graphfront.framework.errors import GraphfrontError, printable
from graphfront.core import variable_meta_info_pb2

__all__ = [
    "CheckpointError",
    "FileBackendVariableBlob",
    "load_checkpoint",
    "save_checkpoint",
    "SNAPSHOT_DONE",
    "DATA_FILE",
    "META_FILE",
]

DATA_FILE = "out"
META_FILE = "meta"
SNAPSHOT_DONE = "snapshot_done"

# Largest single write() issued for a tensor's bytes.  Module-level (not a constant
# argument) so tests can lower it to make a save take many small steps.
_slice_bytes = 32 * 1024 * 1024

# How long load/save wait for a concurrent saver to finish its replace before
# concluding that it crashed between its two renames and restoring the backup.
_recover_grace_s = 1.0

_TMP_TAG = "ckpt-tmp"
_BACKUP_TAG = "ckpt-backup"


class CheckpointError(GraphfrontError, ValueError):
    """A checkpoint on disk (or a request to write one) is invalid."""


class CheckpointNotFoundError(GraphfrontError, FileNotFoundError):
    """Nothing exists at a checkpoint path."""


def _test_hook(stage: str, **info) -> None:
    """No-op called at points of :func:`save_checkpoint`; tests replace it to inject crashes.

    Stages: ``"slice_written"`` (name, offset, nbytes), ``"tmp_complete"`` (tmp),
    ``"old_moved_aside"`` (backup), ``"new_in_place"`` (path).
    """


# --------------------------------------------------------------------------- names


def _check_variable_name(name, path: str) -> str:
    if not isinstance(name, str):
        raise CheckpointError(
            f"variable {name!r} (checkpoint {path!r}): variable name must be a str, got {type(name).__name__}"
        )
    bad = None
    if name == "":
        bad = "it is empty"
    elif name in (".", ".."):
        bad = f"{name!r} is not a directory name"
    elif "/" in name or (os.sep and os.sep in name) or (os.altsep and os.altsep in name):
        bad = "it contains a path separator"
    elif "\0" in name:
        bad = "it contains a NUL character"
    elif name == SNAPSHOT_DONE:
        bad = f"{SNAPSHOT_DONE!r} is the checkpoint's completion marker"
    if bad is not None:
        raise CheckpointError(
            f"variable {name!r} (checkpoint {path!r}): invalid variable name "
            f"(it must be a single path component): {bad}"
        )
    return name


def _sibling_prefix(path: str) -> Tuple[str, str]:
    """Return ``(parent_dir, hidden_prefix)`` used for the temporary and backup siblings."""
    parent, base = os.path.split(path)
    if len(base) > 100:  # keep sibling names well below NAME_MAX
        base = base[:60] + "-" + hashlib.sha1(base.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return parent, "." + base + "."


def _normalize_path(path) -> str:
    path = expect_path(path, "checkpoint", "path")
    if path == "":
        raise CheckpointError("checkpoint path is empty")
    return os.path.abspath(path)


# --------------------------------------------------------------------------- fs helpers


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot fsync directories
        pass
    finally:
        os.close(fd)


def _is_complete_checkpoint(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, SNAPSHOT_DONE))


def _list_backups(path: str):
    parent, prefix = _sibling_prefix(path)
    start = prefix + _BACKUP_TAG + "-"
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    return [os.path.join(parent, n) for n in names if n.startswith(start)]


def _recover_interrupted_replace(path: str) -> bool:
    """If ``path`` is missing but a complete backup sibling exists, rename it back.

    Returns True when a backup was restored.  Waits up to ``_recover_grace_s`` first, in
    case a live saver is between its two renames right now.
    """
    if os.path.lexists(path):
        return False
    backups = [b for b in _list_backups(path) if _is_complete_checkpoint(b)]
    if not backups:
        return False
    deadline = time.monotonic() + _recover_grace_s
    while time.monotonic() < deadline:
        if os.path.lexists(path):
            return False
        time.sleep(0.01)

    def _mtime(b):
        try:
            return os.stat(os.path.join(b, SNAPSHOT_DONE)).st_mtime_ns
        except OSError:
            return -1

    for backup in sorted(backups, key=_mtime, reverse=True):
        try:
            os.rename(backup, path)
        except OSError:
            if os.path.lexists(path):  # someone else restored or saved meanwhile
                return False
            continue
        _fsync_dir(os.path.dirname(path))
        warnings.warn(
            f"checkpoint {path!r}: a previous save was interrupted while replacing it; "
            f"restored the previous checkpoint from {backup!r}",
            RuntimeWarning,
            stacklevel=3,
        )
        return True
    return False


def _remove_stale_siblings(path: str) -> None:
    """Delete leftovers of earlier saves of ``path``: backups once ``path`` is complete, and
    temporary directories of dead processes of this host."""
    parent, prefix = _sibling_prefix(path)
    if _is_complete_checkpoint(path):
        for backup in _list_backups(path):
            shutil.rmtree(backup, ignore_errors=True)
    tempfiles.remove_stale(parent, prefix, _TMP_TAG)


# --------------------------------------------------------------------------- writing


def _as_array(name: str, value) -> np.ndarray:
    if not isinstance(value, np.ndarray) and callable(getattr(value, "numpy", None)):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype.byteorder not in ("=", "|") and arr.dtype.byteorder != _native_byteorder():
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _native_byteorder() -> str:
    return "<" if np.little_endian else ">"


def _meta_text(shape, dt) -> str:
    meta = variable_meta_info_pb2.VariableMetaInfo()
    meta.shape.SetInParent()
    meta.shape.dim.extend(int(d) for d in shape)
    meta.data_type = dt.proto
    return text_format.MessageToString(meta)


def _write_file(file_path: str, data: Union[bytes, memoryview], name: str) -> None:
    step = max(1, int(_slice_bytes))
    view = memoryview(data)
    with open(file_path, "xb") as f:
        for off in range(0, len(view), step):
            f.write(view[off:off + step])
            _test_hook("slice_written", name=name, offset=off, nbytes=min(step, len(view) - off))
        f.flush()
        os.fsync(f.fileno())


def _write_variable(root: str, name: str, arr: np.ndarray, dt) -> None:
    var_dir = os.path.join(root, name)
    os.mkdir(var_dir)
    flat = arr.reshape(-1).view(np.uint8)
    _write_file(os.path.join(var_dir, DATA_FILE), flat.data, name)
    _write_file(os.path.join(var_dir, META_FILE), _meta_text(arr.shape, dt).encode("utf-8"), name)
    _fsync_dir(var_dir)


def save_checkpoint(path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` ({variable_op_name: array}) to ``path`` in checkpoint layout.

    The write is atomic (see the module docstring): either the previous state of ``path``
    or the complete new checkpoint is found there after a crash.

    Raises:
        CheckpointError: a variable name is not a single path component, a value has no
            checkpoint dtype, ``path`` is a file, or ``path`` is a non-empty directory that
            is not a complete checkpoint (nothing is deleted in that case).
    """
    path = _normalize_path(path)
    if not isinstance(arrays, Mapping):
        raise CheckpointError(
            f"checkpoint {path!r}: expected a mapping {{variable name: array}}, got {type(arrays).__name__}"
        )

    # Validate everything before touching the disk.
    prepared = []
    for name, value in arrays.items():
        _check_variable_name(name, path)
        try:
            arr = _as_array(name, value)
            dt = _dtypes.from_numpy(arr.dtype)
        except (TypeError, ValueError) as e:
            raise CheckpointError(
                f"variable {name!r} (checkpoint {path!r}): cannot be saved: {e}"
            ) from None
        prepared.append((name, arr, dt))

    _recover_interrupted_replace(path)

    replace = False
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise CheckpointError(f"checkpoint {path!r}: path exists and is not a directory; refusing to overwrite it")
        if _is_complete_checkpoint(path):
            replace = True
        elif os.listdir(path):
            raise CheckpointError(
                f"checkpoint {path!r}: directory is not empty and is not a complete checkpoint "
                f"(no {SNAPSHOT_DONE!r}); refusing to overwrite it"
            )

    parent, prefix = _sibling_prefix(path)
    try:
        os.makedirs(parent, exist_ok=True)
        with tempfiles.temp_sibling(parent, prefix, _TMP_TAG) as tmp:
            _write_and_move_into_place(path, tmp, prepared, replace)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path!r}: writing failed: {e}") from e
    _remove_stale_siblings(path)


def _write_and_move_into_place(path, tmp, prepared, replace) -> None:
    parent, prefix = _sibling_prefix(path)
    token = os.path.basename(tmp).rsplit("-", 1)[-1]
    os.mkdir(tmp)
    try:
        for name, arr, dt in prepared:
            _write_variable(tmp, name, arr, dt)
        _write_file(os.path.join(tmp, SNAPSHOT_DONE), b"", SNAPSHOT_DONE)
        _fsync_dir(tmp)
        _test_hook("tmp_complete", tmp=tmp)

        if not replace:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)  # empty directory; fails (keeps it) if something appeared in it
            os.rename(tmp, path)
            _fsync_dir(parent)
        else:
            backup = os.path.join(parent, f"{prefix}{_BACKUP_TAG}-{os.getpid()}-{token}")
            os.rename(path, backup)
            _fsync_dir(parent)
            _test_hook("old_moved_aside", backup=backup)
            try:
                os.rename(tmp, path)
            except OSError as e:
                try:
                    os.rename(backup, path)
                except OSError:
                    pass
                raise CheckpointError(
                    f"checkpoint {path!r}: could not move the new checkpoint into place ({e}); "
                    f"the previous checkpoint was kept"
                    + ("" if os.path.lexists(path) else f" at {backup!r}")
                ) from e
            _fsync_dir(parent)
            _test_hook("new_in_place", path=path)
            shutil.rmtree(backup, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# --------------------------------------------------------------------------- reading


def _to_np_dtype(dtype) -> np.dtype:
    if isinstance(dtype, _dtypes.dtype):
        if dtype.np is None:
            raise ValueError(f"{dtype} has no numpy dtype")
        return dtype.np
    return np.dtype(dtype)


class FileBackendVariableBlob:
    """One variable of a checkpoint: ``<checkpoint>/<name>/{out,meta}``, read lazily.

    ``shape`` and ``dtype`` come from ``meta``; without a ``meta`` file they are None,
    :meth:`numpy` raises, and :meth:`numpy_as` reads the bytes given a target shape and
    dtype (that is how ``load_variables`` uses meta-less variables).
    """

    def __init__(self, var_dir):
        var_dir = _normalize_path(var_dir)
        self._dir = var_dir
        self._name = os.path.basename(var_dir)
        self._file_path = os.path.join(var_dir, DATA_FILE)
        self._shape: Optional[Tuple[int, ...]] = None
        self._dtype = None
        if not os.path.isfile(self._file_path):
            raise CheckpointError(
                f"variable {self._name!r}: data file {self._file_path!r} is missing "
                f"(the checkpoint is incomplete or corrupted)"
            )
        meta_path = os.path.join(var_dir, META_FILE)
        if os.path.isfile(meta_path):
            self._shape, self._dtype = self._parse_meta(meta_path)
            self._check_size(self._shape, self._dtype.np)

    def _parse_meta(self, meta_path: str):
        try:
            with open(meta_path, "rb") as f:
                text = f.read().decode("utf-8")
            meta = variable_meta_info_pb2.VariableMetaInfo()
            text_format.Parse(text, meta)
            if not meta.IsInitialized():
                raise ValueError("missing required field(s): " + ", ".join(meta.FindInitializationErrors()))
            shape = tuple(int(d) for d in meta.shape.dim)
            if any(d < 0 for d in shape):
                raise ValueError(f"negative dimension in shape {shape}")
            dt = _dtypes.from_proto(meta.data_type)
            if dt.np is None:
                raise ValueError(f"data type {_dtypes.proto_name(meta.data_type)} cannot be read into numpy")
        except (text_format.ParseError, UnicodeDecodeError, ValueError) as e:
            raise CheckpointError(
                f"variable {self._name!r}: cannot parse meta file {meta_path!r}: {printable(e)}"
            ) from None
        return shape, dt

    # -- properties

    @property
    def name(self) -> str:
        return self._name

    @property
    def file_path(self) -> str:
        return self._file_path

    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def has_meta_info(self) -> bool:
        return self._shape is not None

    # -- reading

    def _expected_bytes(self, shape, np_dtype) -> int:
        return int(math.prod(shape)) * np_dtype.itemsize

    def _describe(self, shape, np_dtype) -> str:
        try:
            dt_name = _dtypes.from_numpy(np_dtype).name
        except ValueError:
            dt_name = str(np_dtype)
        return f"shape {tuple(shape)}, dtype {dt_name}"

    def _check_size(self, shape, np_dtype) -> None:
        expected = self._expected_bytes(shape, np_dtype)
        try:
            found = os.stat(self._file_path).st_size
        except FileNotFoundError:
            raise CheckpointError(
                f"variable {self._name!r}: data file {self._file_path!r} is missing"
            ) from None
        if found != expected:
            raise CheckpointError(
                f"variable {self._name!r}: data file {self._file_path!r} has {found} bytes, "
                f"expected {expected} bytes for {self._describe(shape, np_dtype)} "
                f"(truncated or corrupted)"
            )

    def _read(self, shape, np_dtype) -> np.ndarray:
        self._check_size(shape, np_dtype)
        count = int(math.prod(shape))
        data = np.fromfile(self._file_path, dtype=np_dtype, count=count)
        if data.size != count:
            raise CheckpointError(
                f"variable {self._name!r}: data file {self._file_path!r} yielded {data.size} elements, "
                f"expected {count} for {self._describe(shape, np_dtype)} (truncated or corrupted)"
            )
        return data.reshape(shape)

    def numpy(self) -> np.ndarray:
        """Read the variable as an ndarray of its saved shape and dtype."""
        if self._shape is None:
            raise CheckpointError(
                f"variable {self._name!r}: no meta file in {self._dir!r}, so its shape and dtype "
                f"are unknown; use numpy_as(shape, dtype) or load it into a variable with load_variables"
            )
        return self._read(self._shape, self._dtype.np)

    def numpy_as(self, shape, dtype) -> np.ndarray:
        """Read the variable as ``shape``/``dtype`` (graphfront or numpy dtype).

        Meant for variables without ``meta``; when ``meta`` exists it must agree.
        """
        shape = tuple(int(d) for d in shape)
        try:
            np_dtype = _to_np_dtype(dtype)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"variable {self._name!r} ({self._file_path!r}): bad dtype {dtype!r}: {e}") from None
        if self._shape is not None and (self._shape != shape or self._dtype.np != np_dtype):
            raise CheckpointError(
                f"variable {self._name!r}: meta in {self._dir!r} says "
                f"{self._describe(self._shape, self._dtype.np)}, but {self._describe(shape, np_dtype)} was requested"
            )
        return self._read(shape, np_dtype)

    def __repr__(self):
        if self._shape is None:
            return f"FileBackendVariableBlob(name={self._name!r}, file_path={self._file_path!r}, no meta)"
        return (
            f"FileBackendVariableBlob(name={self._name!r}, shape={self._shape}, "
            f"dtype={self._dtype.name}, file_path={self._file_path!r})"
        )


def load_checkpoint(path) -> Union[FileBackendVariableBlob, Dict[str, FileBackendVariableBlob]]:
    """Open the checkpoint at ``path``.

    Returns one :class:`FileBackendVariableBlob` if ``<path>/out`` is a file (``path`` is a
    variable directory), else ``{name: blob}`` for every subdirectory that has an ``out``
    file, sorted by name.  A subdirectory with a ``meta`` but no ``out`` is an error, so is
    a file other than ``snapshot_done``; subdirectories with neither are ignored.  If a save was interrupted between moving the
    old checkpoint aside and moving the new one in, the old one is restored first.

    Raises:
        FileNotFoundError: nothing at ``path`` (and no backup to restore).
        CheckpointError: ``path`` is not a directory, has no ``snapshot_done`` (incomplete,
            half-written), or a variable's files are missing, unparseable or of the wrong size.
    """
    path = _normalize_path(path)
    if not os.path.lexists(path):
        _recover_interrupted_replace(path)
    if not os.path.exists(path):
        raise CheckpointNotFoundError(errno.ENOENT, f"checkpoint {path!r} does not exist", path)
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint {path!r} is not a directory")
    if os.path.isfile(os.path.join(path, DATA_FILE)):
        return FileBackendVariableBlob(path)
    if not os.path.isfile(os.path.join(path, SNAPSHOT_DONE)):
        raise CheckpointError(
            f"checkpoint {path!r} is incomplete: it has no {SNAPSHOT_DONE!r} file "
            f"(half-written, or the save that wrote it was interrupted)"
        )
    blobs: Dict[str, FileBackendVariableBlob] = {}
    for name in sorted(os.listdir(path)):
        var_dir = os.path.join(path, name)
        if name == SNAPSHOT_DONE:
            continue
        if not os.path.isdir(var_dir):
            raise CheckpointError(
                f"checkpoint {path!r}: {name!r} is a file, but every entry of a checkpoint besides "
                f"{SNAPSHOT_DONE!r} must be a variable directory ({name}/{DATA_FILE}, {name}/{META_FILE})"
            )
        if os.path.isfile(os.path.join(var_dir, DATA_FILE)) or os.path.exists(os.path.join(var_dir, META_FILE)):
            blobs[name] = FileBackendVariableBlob(var_dir)
    return blobs
