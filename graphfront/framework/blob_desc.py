"""``BlobDesc``: the lazy handle of a logical blob while a job is being built.

A BlobDesc names a blob by its logical blob name (lbn, ``"op_name/blob_name"``) and
carries what shape inference found: shape, dtype and placement. It holds no data;
``+ - * / ** %``, unary minus, ``abs()`` and the comparisons build ops through
``flow.math`` (comparisons give int8 blobs, as in OneFlow).
"""
from __future__ import annotations

from graphfront.core import logical_blob_id_pb2

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

    def with_distribute(self, distribute):
        """The blob laid out as ``distribute`` for the ops that read the returned handle.

        OneFlow (v0.6.0 ``python/oneflow/compatible/single_client/framework/remote_blob.py``,
        ``with_distribute``) keeps the blob name and hands the policy to the SBP inference
        of the ops reading the handle. graphfront makes that layout an op: in a job being
        built on several devices, a ``flow.distribute.split(axis)`` or ``broadcast()``
        policy builds a ``parallel_cast`` op (as ``flow.parallel_cast``), so the readers
        get the blob in that layout and the boxing pass inserts the collective that makes
        it. On one device, or for ``auto()``, the handle only carries the policy
        (``.distribute``); the values are the same either way.

        Args:
            distribute: a ``flow.distribute`` policy.

        Returns:
            BlobDesc: the handle, ``.distribute`` set to ``distribute``.

        Raises:
            TypeError: ``distribute`` is not a ``flow.distribute`` policy.
        """
        from graphfront.distribute import assert_is_valid_distribute
        from graphfront.framework import job_builder as jb
        from graphfront.framework.scope_symbols import device_count
        assert_is_valid_distribute(distribute)
        names = self.parallel_conf.device_name
        if distribute.kind != "auto" and jb.is_building() and jb.current().job_name == self.job_name and \
                len(names) and device_count(names) > 1:
            from graphfront.distribute import parallel_cast
            cast = parallel_cast(self, distribute=distribute)
            cast.distribute = distribute
            return cast
        other = BlobDesc(self.lbn, self.shape, self.dtype, self.parallel_conf, self.job_name, self.is_dynamic)
        other.distribute = distribute
        return other

    def IdenticalTo(self, other) -> bool:  # noqa: N802 - OneFlow's name
        return isinstance(other, BlobDesc) and other.lbn == self.lbn

    def __repr__(self):
        return (f"BlobDesc(lbn={self.lbn!r}, shape={self.shape}, dtype={self.dtype!r}, "
                f"device={self.parallel_conf.device_tag!r})")

    # -- operators build ops -------------------------------------------------
    def __add__(self, other):
        from graphfront import math
        return math.add(self, other)

    def __radd__(self, other):
        from graphfront import math
        return math.add(other, self)

    def __sub__(self, other):
        from graphfront import math
        return math.subtract(self, other)

    def __rsub__(self, other):
        from graphfront import math
        return math.subtract(other, self)

    def __mul__(self, other):
        from graphfront import math
        return math.multiply(self, other)

    def __rmul__(self, other):
        from graphfront import math
        return math.multiply(other, self)

    def __truediv__(self, other):
        from graphfront import math
        return math.divide(self, other)

    def __rtruediv__(self, other):
        from graphfront import math
        return math.divide(other, self)

    def __neg__(self):
        from graphfront import math
        return math.negative(self)

    def __pow__(self, other):
        from graphfront import math
        return math.pow(self, other)

    def __mod__(self, other):
        from graphfront import math
        return math.mod(self, other)

    def __abs__(self):
        from graphfront import math
        return math.abs(self)

    # comparisons build int8 blobs, as OneFlow's blobs do; compare handles with `is`
    def __eq__(self, other):
        from graphfront import math
        return math.equal(self, other)

    def __ne__(self, other):
        from graphfront import math
        return math.not_equal(self, other)

    def __lt__(self, other):
        from graphfront import math
        return math.less(self, other)

    def __le__(self, other):
        from graphfront import math
        return math.less_equal(self, other)

    def __gt__(self, other):
        from graphfront import math
        return math.greater(self, other)

    def __ge__(self, other):
        from graphfront import math
        return math.greater_equal(self, other)

    # hashable by identity so blobs can key dicts
    __hash__ = object.__hash__
