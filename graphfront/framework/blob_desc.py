"""``BlobDesc``: the lazy handle of a logical blob while a job is being built.

A BlobDesc names a blob by its logical blob name (lbn, ``"op_name/blob_name"``) and
carries what shape inference found: shape, dtype and placement. It holds no data;
``+ - * / ** %``, unary minus, ``abs()`` and the comparisons build ops through
``flow.math`` (comparisons give int8 blobs, as in OneFlow).
"""
from __future__ import annotations

import numbers
import os

from graphfront.core import logical_blob_id_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import ArgumentError

INVALID_SPLIT_AXIS = -22


class _CallableStr(str):
    """A str that also answers when called: OneFlow's ``blob.parallel_conf.device_tag()``
    is a method, graphfront code and tests read ``device_tag`` as a value."""

    def __call__(self) -> str:
        return str(self)


class _CallableTuple(tuple):
    def __call__(self) -> tuple:
        return tuple(self)


class BlobParallelConf:
    """The placement of a blob as OneFlow's ``blob.parallel_conf`` shows it.

    ``device_tag`` ("cpu" / "gpu") and ``device_name`` (e.g. ``("0:0",)``) read as values
    and, as in OneFlow, as methods (``device_tag()``); ``proto`` is the ``ParallelConf``
    message; other attributes are the message's fields.
    """

    __slots__ = ("proto",)

    def __init__(self, proto):
        self.proto = proto.proto if isinstance(proto, BlobParallelConf) else proto

    @property
    def device_tag(self) -> _CallableStr:
        return _CallableStr(self.proto.device_tag)

    @property
    def device_name(self) -> _CallableTuple:
        return _CallableTuple(self.proto.device_name)

    def __getattr__(self, name):
        return getattr(self.proto, name)

    def __repr__(self):
        return f"BlobParallelConf(device_tag={self.proto.device_tag!r}, device_name={list(self.proto.device_name)})"


#: The open ``flow.watch_scope`` scopes (:mod:`graphfront.watch`), innermost last: every
#: BlobDesc made while one is open is handed to its ``watch_once`` (OneFlow's
#: ``LazyConsistentBlob.__init__`` calls ``watch_scope_util.TryWatchOnce``).
WATCH_SCOPES: list = []


class BlobDesc:
    """A logical blob of the job being built (OneFlow's ``LazyConsistentBlob``).

    Attributes:
        logical_blob_name / lbn: ``"op_name/blob_name"``, e.g. ``"conv1/out_0"``.
        shape: tuple of ints (static logical shape).
        dtype: graphfront dtype.
        parallel_conf: :class:`BlobParallelConf` of the producing op (``device_tag()``,
            ``device_name()``; the ``ParallelConf`` message as ``.proto``).
        job_name: the job the blob belongs to.
    """

    __slots__ = ("lbn", "shape", "dtype", "parallel_conf", "job_name", "is_dynamic", "distribute")

    def __init__(self, lbn, shape, dtype, parallel_conf, job_name, is_dynamic=False):
        self.lbn = lbn
        self.shape = tuple(shape)
        self.dtype = dtype
        self.parallel_conf = BlobParallelConf(parallel_conf)
        self.job_name = job_name
        self.is_dynamic = is_dynamic
        self.distribute = None
        for scope in WATCH_SCOPES:
            scope.watch_once(self)

    @property
    def logical_blob_name(self) -> str:
        return self.lbn

    @property
    def unique_name(self) -> str:
        return self.lbn

    @property
    def op_name(self) -> str:
        return self.lbn.split("/", 1)[0]

    @property
    def blob_name(self) -> str:
        return self.lbn.split("/", 1)[1]

    @property
    def lbi(self):
        return logical_blob_id_pb2.LogicalBlobId(op_name=self.op_name, blob_name=self.blob_name)

    @property
    def split_axis(self) -> int:
        return INVALID_SPLIT_AXIS

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def get_dtype(self):
        return self.dtype

    def IdenticalTo(self, other) -> bool:  # noqa: N802 - OneFlow's name
        return isinstance(other, BlobDesc) and other.lbn == self.lbn

    def __repr__(self):
        return (f"BlobDesc(lbn={self.lbn!r}, shape={self.shape}, dtype={self.dtype!r}, "
                f"device={self.parallel_conf.device_tag!r})")

    # Python operators (``+``, ``-``, ``*``, ``/``, ``**``, ``%``, unary ``-``, ``abs``, and the
    # comparisons, which build int8 blobs as OneFlow's do; compare handles with ``is``) and
    # ``with_distribute`` build ops: the API layer attaches them (graphfront.math,
    # graphfront.distribute), so this engine class imports nothing from it.

    # hashable by identity so blobs can key dicts
    __hash__ = object.__hash__


def expect_blob(x, api: str, arg: str = "x") -> "BlobDesc":
    """``x`` when it is a blob of the job being built.

    Args:
        x: the argument's value.
        api: the public function's name, e.g. ``"flow.math.add"``.
        arg: the argument's name.

    Raises:
        ArgumentError: ``x`` is not a BlobDesc (the message names ``api``, ``arg`` and what
            was received, and ends with the user's line).
    """
    if not isinstance(x, BlobDesc):
        raise ArgumentError(f"{api}: argument '{arg}' expects a blob, received {type(x).__name__} {x!r}")
    return x


def is_int(v) -> bool:
    """Whether ``v`` is a Python or numpy integer (a bool is not)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def expect_int(v, api: str, arg: str) -> int:
    """``v`` as an int when it is a Python or numpy integer (not a bool).

    Raises:
        ArgumentError: naming ``api`` and ``arg``, with what was received.
    """
    if not is_int(v):
        raise ArgumentError(f"{api}: argument '{arg}' expects an int, received {type(v).__name__} {v!r}")
    return int(v)


def expect_ints(v, api: str, arg: str, scalar: bool = True) -> list:
    """``v`` (a list or tuple of ints, or when ``scalar`` one int) as a list of ints.

    Raises:
        ArgumentError: naming ``api`` and ``arg``, with what was received.
    """
    if scalar and isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return [int(v)]
    if not isinstance(v, (list, tuple)):
        raise ArgumentError(f"{api}: argument '{arg}' expects {'an int or a list' if scalar else 'a list or tuple'} "
                            f"of ints, received {type(v).__name__} {v!r}")
    return [expect_int(e, api, arg) for e in v]


def expect_number(v, api: str, arg: str) -> float:
    """``v`` as a float when it is a real Python or numpy number (not a bool).

    Raises:
        ArgumentError: naming ``api`` and ``arg``, with what was received.
    """
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ArgumentError(f"{api}: argument '{arg}' expects a number, received {type(v).__name__} {v!r}")
    return float(v)


def expect_dtype(v, api: str, arg: str = "dtype"):
    """``v`` when it is a graphfront dtype (``flow.float32`` ...).

    Raises:
        ArgumentError: naming ``api`` and ``arg``, with what was received.
    """
    if not isinstance(v, _dt.dtype):
        raise ArgumentError(f"{api}: argument '{arg}' expects a graphfront dtype such as flow.float32, received {v!r}")
    return v


def expect_path(v, api: str, arg: str) -> str:
    """``v`` (a str, bytes or os.PathLike) as a str path, ``os.fspath`` and ``os.fsdecode``.

    Raises:
        ArgumentError: naming ``api`` and ``arg``, with what was received.
    """
    if not isinstance(v, (str, bytes, os.PathLike)):
        raise ArgumentError(f"{api}: argument '{arg}' expects a str or an os.PathLike path, "
                            f"received {type(v).__name__} {v!r}")
    return os.fsdecode(os.fspath(v))
