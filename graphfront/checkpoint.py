"""``flow.checkpoint``: save and load the session's variables in OneFlow's layout.

Layout (``shared/reference/single_client_api.md`` §4.3): ``<path>/<variable>/out``
raw C-order bytes, ``<path>/<variable>/meta`` a text ``VariableMetaInfo``, and
``<path>/snapshot_done``; written atomically by
:mod:`graphfront.framework.checkpoint_io`.
"""
from __future__ import annotations

import numpy as np

from graphfront.framework import dtypes as _dt
from graphfront.framework import checkpoint_io
from graphfront.framework import session as _session
from graphfront.framework.checkpoint_io import CheckpointError, FileBackendVariableBlob
from graphfront.typing import LocalBlob


def _started_session():
    s = _session.default_session()
    if not s.job_funcs:
        raise RuntimeError("no job is defined: define the @flow.global_function jobs before saving or loading "
                           "variables")
    s.try_init()
    return s


def get_all_variables() -> dict:
    """{variable name: LocalBlob} with a copy of every variable of the default session."""
    s = _started_session()
    return {name: LocalBlob(t.detach().cpu().numpy().copy()) for name, t in s.variables.tensors.items()}


def save(path, var_dict=None):
    """Save ``var_dict`` (default: every variable of the session) to ``path``.

    ``path`` must not exist, be an empty directory, or be an earlier complete
    checkpoint (which is replaced atomically). Raises CheckpointError otherwise.
    """
    if var_dict is None:
        s = _started_session()
        arrays = {name: t.detach().cpu().numpy() for name, t in s.variables.tensors.items()}
    else:
        arrays = {name: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for name, v in var_dict.items()}
    checkpoint_io.save_checkpoint(path, arrays)


def get(path):
    """Read a checkpoint: {name: FileBackendVariableBlob} (or one blob for a variable dir)."""
    return checkpoint_io.load_checkpoint(path)


def load_variables(value_dict, ignore_mismatch=True):
    """Copy values into the session's variables of the same names.

    Accepts ndarrays, FileBackendVariableBlob and LocalBlob values. Every value is
    checked (shape and dtype must equal the variable's) before any is copied, so a bad
    value leaves the session unchanged. Names that are not variables are skipped, or
    raise when ``ignore_mismatch=False``.

    Raises:
        CheckpointError: a shape or dtype differs (names the variable, expected and found).
        RuntimeError: an unknown name with ``ignore_mismatch=False``.
    """
    s = _started_session()
    staged = {}
    for name, value in value_dict.items():
        if name not in s.variables:
            if not ignore_mismatch:
                raise RuntimeError(f"load_variables: '{name}' is not a variable of the session")
            continue
        t = s.variables.tensors[name]
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
                raise CheckpointError(f"variable '{name}': the job expects {dtype.name} {shape}, received "
                                      f"{arr.dtype} {tuple(arr.shape)}")
        staged[name] = arr
    for name, arr in staged.items():
        s.variables.assign(name, arr)
    return sorted(staged)


def load(path):
    """``flow.load``: same as :func:`get`."""
    return get(path)
