"""``flow.checkpoint``: save and load the session's variables in OneFlow's layout.

Layout (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/check_point_v2.py``): ``<path>/<variable>/out``
raw C-order bytes, ``<path>/<variable>/meta`` a text ``VariableMetaInfo``, and
``<path>/snapshot_done``; written atomically by
:mod:`graphfront.framework.checkpoint_io` (a crash leaves either the previous state of
``path`` or the complete new checkpoint, never a half-written one).

Typical use::

    flow.checkpoint.save("ckpt")                       # every variable of the session
    flow.load_variables(flow.checkpoint.get("ckpt"))   # resume

Loading is checked variable by variable (:func:`load_variables`): a file that is
missing, truncated or unparseable, and a shape or dtype that differs from the job's
variable, raise :class:`CheckpointError` naming the variable, what the job expects
and what the file holds; nothing is copied unless every value is good. Variables of
the session that a *checkpoint* does not contain are always reported: a
``MissingVariablesWarning`` listing them, or a :class:`CheckpointError` with
``strict=True``; no variable is left at its random initial value silently.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Mapping

import numpy as np

from graphfront.framework import dtypes as _dt
from graphfront.framework import checkpoint_io
from graphfront.framework import session as _session
from graphfront.framework.checkpoint_io import CheckpointError, FileBackendVariableBlob
from graphfront.framework.errors import ArgumentError
from graphfront.typing import LocalBlob

__all__ = ["CheckpointError", "FileBackendVariableBlob", "MissingVariablesWarning", "get", "get_all_variables",
           "load", "load_variables", "save", "save_dict"]


class MissingVariablesWarning(UserWarning):
    """Some variables of the session were not in the checkpoint being loaded (they keep their values)."""


class Checkpoint(dict):
    """``{variable name: FileBackendVariableBlob}`` read from the checkpoint at ``path``.

    A plain dict with one more attribute, ``path``: :func:`load_variables` uses it to
    report the session's variables that the checkpoint lacks.
    """

    def __init__(self, path, blobs):
        super().__init__(blobs)
        self.path = path


def _started_session():
    """The default session, started. In lazy mode that compiles its jobs, so at least
    one must be defined (RuntimeError otherwise); in eager execution the variables are
    created on first use, so there may be none yet (OneFlow's eager checkpoint
    functions need no job either)."""
    s = _session.default_session()
    if not s.job_funcs and not s.eager:
        raise RuntimeError("no job is defined: define the @flow.global_function jobs before saving or loading "
                           "variables")
    s.try_init()
    return s


def get_all_variables() -> dict:
    """{variable name: LocalBlob} with a copy of every variable of the default session.

    Starts (compiles) the default session first. Optimizer state (``<V>-momentum``
    ...) and the train step counter ``System-Train-TrainStep-<job>`` are variables too.
    """
    s = _started_session()
    return {name: LocalBlob(arr) for name, arr in variable_arrays(s).items()}


def variable_arrays(session) -> dict:
    """{name: ndarray} with a host copy of every variable of ``session``, taken under the
    session lock, so no LazyRun of another thread updates them half-way through."""
    with session.lock:
        return {name: _dt.tensor_to_numpy(t) for name, t in session.variables.tensors.items()}


def save(path: str | os.PathLike, var_dict: Mapping[str, Any] | None = None) -> None:
    """Save ``var_dict`` (default: every variable of the default session) to ``path``.

    Args:
        path: a directory that does not exist, is empty, or is an earlier complete
            checkpoint (which is replaced atomically).
        var_dict: ``{name: ndarray | LocalBlob | FileBackendVariableBlob}``; None saves
            all variables of the default session (starting it first).
    Raises:
        CheckpointError: ``path`` is a file or a non-empty directory that is not a
            checkpoint, or a name is not a single path component.
    """
    if var_dict is None:
        arrays = variable_arrays(_started_session())
    else:
        arrays = {name: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for name, v in var_dict.items()}
    checkpoint_io.save_checkpoint(path, arrays)


def save_dict(obj, save_dir):
    """``flow.save(obj, save_dir)``: write the dict ``obj`` ``{name: ndarray | LocalBlob |
    FileBackendVariableBlob}`` to ``save_dir`` in the checkpoint layout, without touching
    the session (OneFlow's ``flow.save``). Same rules for ``save_dir`` as :func:`save`;
    ArgumentError (a TypeError) when ``obj`` is not a dict."""
    if not isinstance(obj, dict):
        raise ArgumentError(f"flow.save expects a dict {{name: array}} as obj, received {type(obj).__name__}")
    save(save_dir, obj)


def get(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint lazily.

    Returns a :class:`Checkpoint` ``{name: FileBackendVariableBlob}`` (data is read by
    ``blob.numpy()``), or one ``FileBackendVariableBlob`` when ``path`` is a variable
    directory (it holds an ``out`` file).

    Raises:
        FileNotFoundError: nothing at ``path``.
        CheckpointError: no ``snapshot_done`` (half-written), or a variable's ``out``
            file is missing or its size disagrees with its ``meta``.
    """
    result = checkpoint_io.load_checkpoint(path)
    if isinstance(result, FileBackendVariableBlob):
        return result
    return Checkpoint(str(path), result)


def load(path: str | os.PathLike) -> Checkpoint:
    """``flow.load``: same as :func:`get`."""
    return get(path)


def stage_values(store, value_dict, *, ignore_mismatch=True, what="load_variables") -> dict:
    """Check ``value_dict`` against the variables of ``store``; return ``{name: ndarray}``.

    Nothing is modified. Every value must have exactly the variable's shape and dtype.

    Raises:
        CheckpointError: a shape or dtype differs (names the variable, the expected and
            the found shape/dtype), or a file is missing/truncated.
        RuntimeError: a name that is not a variable, with ``ignore_mismatch=False``.
        ArgumentError: (a TypeError) ``value_dict`` is not a mapping.
    """
    if not isinstance(value_dict, Mapping):
        raise ArgumentError(f"{what}: value_dict expects a mapping {{name: array}}, received "
                            f"{type(value_dict).__name__}")
    staged = {}
    for name, value in value_dict.items():
        if name not in store:
            if not ignore_mismatch:
                raise RuntimeError(f"{what}: '{name}' is not a variable of the session; its variables are "
                                   f"{sorted(store.names())}")
            continue
        t = store.tensors[name]
        dtype = _dt.from_torch(t.dtype)
        shape = tuple(t.shape)
        if isinstance(value, FileBackendVariableBlob):
            if value.has_meta_info and (value.shape != shape or value.dtype is not dtype):
                raise CheckpointError(f"variable '{name}': the job expects {dtype.name} {shape}, the checkpoint "
                                      f"file {value.file_path} holds {value.dtype.name} {value.shape}")
            arr = value.numpy_as(shape, dtype)
        else:
            arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
            if tuple(arr.shape) != shape or arr.dtype != dtype.np:
                try:
                    found = _dt.from_numpy(arr.dtype).name
                except ValueError:
                    found = str(arr.dtype)
                raise CheckpointError(f"variable '{name}': the job expects {dtype.name} {shape}, received "
                                      f"{found} {tuple(arr.shape)}")
        staged[name] = arr
    return staged


def report_missing(store, value_dict, *, strict, source, stacklevel=3):
    """Warn about (or with ``strict`` raise for) variables of ``store`` absent from ``value_dict``."""
    missing = sorted(n for n in store.names() if n not in value_dict)
    if not missing:
        return missing
    head = f"{len(missing)} variable(s) of the session are not in {source}"
    if strict:
        raise CheckpointError(f"{head} (strict=True, nothing was loaded): {', '.join(missing)}")
    warnings.warn(f"{head} and keep their current (initial) values: {', '.join(missing)}",
                  MissingVariablesWarning, stacklevel=stacklevel)
    return missing


def load_variables(value_dict: Mapping[str, Any], ignore_mismatch: bool = True, strict: bool = False) -> list:
    """Copy values into the default session's variables of the same names.

    Args:
        value_dict: ``{name: ndarray | FileBackendVariableBlob | LocalBlob}``, typically
            ``flow.checkpoint.get(path)``.
        ignore_mismatch: skip names that are not variables (False: RuntimeError).
        strict: every variable of the session must be in ``value_dict``
            (CheckpointError listing the missing ones otherwise).

    Every value is checked (shape and dtype must equal the variable's) before any is
    copied, so a bad value leaves the session unchanged. When the values come from
    disk (a checkpoint from :func:`get`, or any ``FileBackendVariableBlob`` value), the
    session's variables that ``value_dict`` does not contain are listed in a
    :class:`MissingVariablesWarning` (an error with ``strict=True``).

    Returns:
        sorted names of the variables that were set.
    Raises:
        CheckpointError: a shape or dtype differs (names the variable, expected and
            found), a checkpoint file is missing or truncated, or ``strict`` and a
            variable is missing.
        RuntimeError: an unknown name with ``ignore_mismatch=False``.
        ArgumentError: (a TypeError) ``value_dict`` is not a mapping.
    """
    s = _started_session()
    staged = stage_values(s.variables, value_dict, ignore_mismatch=ignore_mismatch)
    from_disk = isinstance(value_dict, Checkpoint) or any(
        isinstance(v, FileBackendVariableBlob) for v in value_dict.values())
    if strict or from_disk:
        source = f"checkpoint {value_dict.path!r}" if isinstance(value_dict, Checkpoint) else "the loaded values"
        report_missing(s.variables, value_dict, strict=strict, source=source)
    with s.lock:
        for name, arr in staged.items():
            s.variables.assign(name, arr)
    return sorted(staged)


def get_interface_blob_value(op_name: str) -> np.ndarray:
    """``flow.experimental.get_interface_blob_value``: a copy of variable ``op_name`` of
    the default session (starting it first), its whole (logical) value on any number of
    devices, as a numpy array of the variable's shape and dtype.

    Raises:
        RuntimeError: ``op_name`` is not a variable of the session (graphfront reads and
            writes variables; jobs' input and return blobs are their arguments and results).
    """
    s = _started_session()
    _check_interface_op(s, op_name, "get_interface_blob_value")
    with s.lock:
        return _dt.tensor_to_numpy(s.variables.tensors[op_name]).copy()


def set_interface_blob_value(op_name: str, ndarray) -> None:
    """``flow.experimental.set_interface_blob_value``: write ``ndarray`` (a numpy array of
    the variable's whole shape and dtype) into variable ``op_name`` of the default session
    (starting it first); on several devices each device receives its part.

    Raises:
        RuntimeError: ``op_name`` is not a variable of the session.
        CheckpointError: the shape or dtype differs from the variable's.
    """
    s = _started_session()
    _check_interface_op(s, op_name, "set_interface_blob_value")
    staged = stage_values(s.variables, {op_name: ndarray}, ignore_mismatch=False,
                          what="flow.experimental.set_interface_blob_value")
    with s.lock:
        s.variables.assign(op_name, staged[op_name])


def _check_interface_op(session, op_name, what):
    if not isinstance(op_name, str) or op_name not in session.variables:
        raise RuntimeError(f"flow.experimental.{what}: {op_name!r} is not a variable of the session; graphfront "
                           f"reads and writes the variables: {sorted(session.variables.names())}")


def restore(path, strict=False):
    """Load the checkpoint at ``path`` into the default session (``load_variables(get(path))``).

    Returns the sorted names of the variables that were set; see :func:`load_variables`.
    """
    return load_variables(get(path), strict=strict)
