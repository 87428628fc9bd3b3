"""Reading and writing ``Job`` protos as files: binary wire format or protobuf text format.

The Job message is OneFlow's (``graphfront/core/job.proto``, package ``oneflow``), so
the text format uses OneFlow's field names only, e.g.::

    net {
      op {
        name: "x"
        input_conf { out: "out" blob_conf { shape { dim: 2 dim: 3 } data_type: kFloat } }
      }
      op { name: "Return_0" return_conf { in: "x/out" out: "out" } }
    }
    job_conf { job_name: "identity" predict_conf {} }

and a OneFlow job text that uses only the fields and ops graphfront supports loads
as is. Both completed jobs (``job.graph``/``CompiledJob.job``) and jobs as built
(``CompiledJob.user_job``) can be written; a loaded job runs through
``flow.serving.InferenceSession.load_job``.

Public as ``flow.experimental.save_job`` / ``flow.experimental.load_job``.

Writes are atomic: the bytes go to a hidden temporary file beside ``path``, which is
fsync'd and renamed over ``path``; a crash leaves the old file (or nothing) there, and
the next successful save removes the temporary files of crashed ones.

Every name in a loaded job (job, op, blob, signature) is checked against the naming
rules of :mod:`graphfront.framework.names` before anything else reads it.

Format detection in :func:`load_job`: a file that decodes as UTF-8 and contains no
control characters except tab, CR and LF is text; anything else is binary. (A binary
Job always holds the byte ``0x1a``, the tag of its required ``job_conf`` field.)
"""
from __future__ import annotations

import os

from google.protobuf import message as _message
from google.protobuf import text_format

from graphfront.core import job_pb2
from graphfront.framework import tempfiles
from graphfront.framework.checkpoint_io import _fsync_dir
from graphfront.framework.blob_desc import expect_path
from graphfront.framework.errors import ArgumentError, GraphfrontError, printable
from graphfront.framework.names import InvalidNameError, check_job_names, check_strings

__all__ = ["JobFileError", "load_job", "save_job", "job_from_bytes", "job_to_bytes"]

FORMATS = ("binary", "text")
_TMP_TAG = "job-tmp"


class JobFileError(GraphfrontError, ValueError):
    """A job file cannot be written or read (names the path and the reason)."""


def _as_job(job, completed=True) -> job_pb2.Job:
    from graphfront.framework.session import CompiledJob, GlobalFunction
    if isinstance(job, job_pb2.Job):
        return job
    if isinstance(job, GlobalFunction):
        job = job.compiled_job
    if isinstance(job, CompiledJob):
        return job.job if completed else job.user_job
    proto = getattr(job, "proto", None)  # a job graph view (``job_fn.graph``)
    if isinstance(proto, job_pb2.Job):
        return proto
    raise ArgumentError(f"save_job expects a Job proto, a @flow.global_function or a CompiledJob, "
                        f"received {type(job).__name__}")


def job_to_bytes(job, format="binary") -> bytes:  # noqa: A002 - mirrors save_job
    """Serialize ``job`` (a Job proto) as ``format`` ("binary" or "text")."""
    if format not in FORMATS:
        raise ArgumentError(f"save_job: format must be 'binary' or 'text', received {format!r}")
    if not job.IsInitialized():
        raise JobFileError(f"job '{job.job_conf.job_name}' misses required fields: "
                           f"{', '.join(job.FindInitializationErrors())}")
    if format == "text":
        return text_format.MessageToString(job).encode("utf-8")
    return job.SerializeToString(deterministic=True)


def save_job(job, path: str | os.PathLike, format: str = "binary", completed: bool = True):  # noqa: A002
    """Write ``job`` to ``path`` atomically.

    Args:
        job: a ``Job`` proto, a ``@flow.global_function`` (compiled first) or a
            ``CompiledJob``.
        path: file path (parent directories are created; an existing file is replaced).
        format: ``"binary"`` (``Job.SerializeToString``) or ``"text"`` (protobuf text
            format with OneFlow's field names).
        completed: for functions/compiled jobs, write the completed job (True) or the
            job as built, before the completion passes (False).
    Raises:
        ArgumentError: (a TypeError and a ValueError) unknown ``format``, a ``job`` or ``path``
            of another type; JobFileError: the job misses required fields.
    """
    data = job_to_bytes(_as_job(job, completed), format)
    path = os.path.abspath(expect_path(path, "save_job", "path"))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if os.path.isdir(path):
        raise JobFileError(f"save_job: {path!r} is a directory")
    prefix = f".{os.path.basename(path)}."
    with tempfiles.temp_sibling(parent, prefix, _TMP_TAG) as tmp:
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise JobFileError(f"save_job: writing {path!r} failed: {e}") from e
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    _fsync_dir(parent)
    tempfiles.remove_stale(parent, prefix, _TMP_TAG)


def _looks_like_text(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any((ord(c) < 0x20 and c not in "\t\n\r") or c == "\x7f" for c in text)


def job_from_bytes(data: bytes, source="<bytes>", allow_unknown_field=False) -> job_pb2.Job:
    """Parse a Job from binary or text bytes (detected as the module docstring says)."""
    job = job_pb2.Job()
    if _looks_like_text(data):
        kind = "text"
        try:
            text_format.Parse(data.decode("utf-8"), job, allow_unknown_field=allow_unknown_field)
        except text_format.ParseError as e:
            raise JobFileError(f"job file {source}: not a valid Job in protobuf text format: {printable(e)}") from None
    else:
        kind = "binary"
        try:
            job.ParseFromString(data)
        except _message.DecodeError as e:
            raise JobFileError(f"job file {source}: not a valid binary Job proto: {e}") from None
    if not job.IsInitialized():
        raise JobFileError(f"job file {source} ({kind}): the Job misses required fields: "
                           f"{', '.join(job.FindInitializationErrors())}")
    try:
        check_strings(job, f"job file {source}")
        check_job_names(job, f"job file {source}")
    except InvalidNameError as e:
        raise JobFileError(str(e)) from None
    return job


def load_job(path: str | os.PathLike, allow_unknown_field: bool = False) -> job_pb2.Job:
    """Read a Job written by :func:`save_job` (or by OneFlow), binary or text.

    Args:
        path: the job file.
        allow_unknown_field: text format only: skip fields graphfront's Job proto does
            not have (default: error naming the field).
    Raises:
        FileNotFoundError: no file; JobFileError: neither a valid binary nor text Job.
    """
    path = expect_path(path, "load_job", "path")
    with open(path, "rb") as f:
        data = f.read()
    return job_from_bytes(data, repr(path), allow_unknown_field=allow_unknown_field)
