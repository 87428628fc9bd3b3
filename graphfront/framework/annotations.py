"""The annotations of global functions and the conversion of results they ask for.

Public as ``flow.typing`` (alias ``tp``; :mod:`graphfront.typing` describes the
annotations); the session checks feeds against the placeholders and converts a job's
results with :func:`convert`, :func:`rebuild` and :class:`Future` from here.
"""
from __future__ import annotations

import typing as _t

import numpy as np

from graphfront.framework.blob_desc import is_int
from graphfront.framework.errors import ArgumentError
from graphfront.framework import dtypes as _dt


class TypingCheck:
    """``flow.experimental.enable_typing_check``'s switch (process-wide, as OneFlow's
    ``typing_check_enabled``): when on, every parameter and the return value of a global
    function, and the parameter of a ``flow.watch`` handler, must be annotated."""

    enabled = False


class PlaceholderDef:
    """A parameter annotation of a global function: the shape and dtype of one input.

    Base of ``Numpy.Placeholder`` and ``ListNumpy.Placeholder`` (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/framework/typing.py``).

    Args:
        shape: non-empty tuple of positive ints, e.g. ``(N, C, H, W)`` = ``(32, 1, 28, 28)``.
        dtype: graphfront dtype; default ``flow.float32``.

    Raises:
        ArgumentError: ``shape`` is not a non-empty tuple of positive ints, or ``dtype`` is
            not a graphfront dtype.
    """

    list_input = False

    def __init__(self, shape, dtype=_dt.float32):
        if not isinstance(shape, tuple) or not shape or not all(
                is_int(d) and d > 0 for d in shape):
            raise ArgumentError(f"{type(self).__qualname__}: shape must be a non-empty tuple of positive ints, "
                                f"received {shape!r}")
        if not isinstance(dtype, _dt.dtype):
            raise ArgumentError(f"{type(self).__qualname__}: dtype must be a graphfront dtype such as flow.float32, "
                                f"received {dtype!r}")
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype

    def __repr__(self):
        return f"{type(self).__qualname__}({self.shape}, dtype={self.dtype!r})"


class Numpy:
    """Return annotation: the blob's value as an ``np.ndarray``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/typing.py``.

    ``Numpy.Placeholder(shape, dtype)`` annotates a parameter fed an ndarray of exactly that
    shape and dtype (a static input op).
    """

    class Placeholder(PlaceholderDef):
        """Static input: the call takes an ``np.ndarray`` of exactly this shape and dtype.

        Args:
            shape: non-empty tuple of positive ints.
            dtype: graphfront dtype; default ``flow.float32``.

        Raises:
            ArgumentError: as :class:`PlaceholderDef`.
        """
        pass


class ListNumpy:
    """Return annotation: the blob's value as ``[np.ndarray]``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/typing.py``.

    A mirrored blob's parts come back concatenated along axis 0, as OneFlow returns them.
    ``ListNumpy.Placeholder(shape, dtype)`` annotates a dynamic input.
    """

    class Placeholder(PlaceholderDef):
        """Dynamic input: the call takes a list of ndarrays.

        One ndarray of the placeholder's rank and at most its element count, or, for a job
        in the mirrored view on ``n`` devices, ``n`` such ndarrays (one per device).

        Args:
            shape: non-empty tuple of positive ints, the maximum shape: its element count
                bounds a fed array's (any dim of which may exceed ``shape``'s).
            dtype: graphfront dtype; default ``flow.float32``.

        Raises:
            ArgumentError: as :class:`PlaceholderDef`.
        """
        list_input = True


class _TensorDef:
    """OneFlow's ``*TensorDef(shape, dtype, name)`` signature over a placeholder class (the
    name is accepted; the input op is named after the parameter)."""

    def __init__(self, shape, dtype=_dt.float32, name=None):
        super().__init__(tuple(shape) if isinstance(shape, (list, tuple)) else shape, dtype)
        self.name = name


class FixedTensorDef(_TensorDef, Numpy.Placeholder):
    """The older way to declare a static input: a parameter default, ``x=flow.FixedTensorDef(shape)``.

    Equivalent to annotating the parameter with ``tp.Numpy.Placeholder(shape, dtype)``: the call
    takes an ``np.ndarray`` of exactly this shape and dtype (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/framework/input_blob_def.py``).

    Args:
        shape: non-empty sequence of positive ints.
        dtype: graphfront dtype; default ``flow.float32``.
        name: accepted for OneFlow's signature; the input op is named after the parameter.

    Raises:
        ArgumentError: as :class:`PlaceholderDef`.
    """


class MirroredTensorDef(_TensorDef, ListNumpy.Placeholder):
    """The older way to declare a dynamic (mirrored) input: ``x=flow.MirroredTensorDef(shape)``.

    Equivalent to annotating the parameter with ``tp.ListNumpy.Placeholder(shape, dtype)``: the
    call takes a list of ndarrays, one per device, each of the placeholder's rank and at most
    its element count (OneFlow v0.6.0 ``input_blob_def.py``).

    Args:
        shape: non-empty sequence of positive ints, the largest shape accepted.
        dtype: graphfront dtype; default ``flow.float32``.
        name: accepted for OneFlow's signature; the input op is named after the parameter.

    Raises:
        ArgumentError: as :class:`PlaceholderDef`.
    """


class _Generic:
    def __class_getitem__(cls, item):
        return _Alias(cls, item)


class _Alias:
    def __init__(self, origin, arg):
        self.origin = origin
        self.arg = arg

    def __repr__(self):
        return f"{self.origin.__name__}[{self.arg!r}]"


class Callback(_Generic):
    """``Callback[T]``: the call returns ``f(callback)``; the callback receives the T value.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/typing.py``.
    """


class Bundle(_Generic):
    """``Bundle[Numpy]`` / ``Bundle[ListNumpy]``: any nesting of list/tuple/dict of blobs.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/typing.py``.
    """


class LocalBlob:
    """A fetched blob value (what a :class:`Future`'s ``get()`` returns).

    ``numpy()`` gives the ndarray; other attributes, indexing, iteration and the numpy
    operators (``+ - * / // % ** @``, comparisons, unary ``- + abs ~``) are forwarded to it,
    as OneFlow v0.6.0's ``python/oneflow/compatible/single_client/framework/local_blob.py``.

    Args:
        array: the value.
        is_dynamic: whether the blob was dynamic (its shape may vary between calls).
    """

    def __init__(self, array: np.ndarray, is_dynamic=False):
        self._array = array
        self.is_dynamic = is_dynamic

    def numpy(self, parallel_id=None) -> np.ndarray:
        """The value as an ndarray.

        Args:
            parallel_id: accepted for OneFlow compatibility and ignored (one part).

        Returns:
            np.ndarray: the fetched value (not a copy).
        """
        return self._array

    def numpy_list(self) -> list:
        """The value as a one-element list (OneFlow's per-device parts).

        Returns:
            list of np.ndarray: ``[self.numpy()]``.
        """
        return [self._array]

    ndarray = numpy
    ndarray_list = numpy_list

    def parallel_num(self) -> int:
        """Number of parts of the value: always 1.

        Returns:
            int: 1.
        """
        return 1

    def __getattr__(self, name):
        return getattr(self._array, name)

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)

    def __repr__(self):
        return f"LocalBlob({self._array!r})"


def _forward(dunder):
    def method(self, *args):
        return getattr(self._array, dunder)(*args)
    method.__name__ = dunder
    return method


for _op in ("add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow matmul rmatmul "
            "and rand or ror xor rxor lshift rlshift rshift rrshift lt le eq ne gt ge neg pos abs invert "
            "getitem len iter contains bool float int index").split():
    setattr(LocalBlob, f"__{_op}__", _forward(f"__{_op}__"))
LocalBlob.__hash__ = None


class Future:
    """Result of a call of a global function without return annotation.

    Take the value once with ``get()`` or ``async_get(callback)``.
    """

    def __init__(self, produce):
        self._produce = produce
        self._taken = False

    def get(self) -> object:
        """Run the pending fetch and return its value.

        Returns:
            object: the job's returned structure with :class:`LocalBlob` leaves.

        Raises:
            RuntimeError: ``get`` (or ``async_get``) was already called on this future.
        """
        if self._taken:
            raise RuntimeError("a job future's get() may be called only once")
        self._taken = True
        return self._produce(LocalBlob)

    def async_get(self, callback) -> None:
        """Pass the value to ``callback`` (``callback(self.get())``).

        Args:
            callback: a function of one argument, the returned structure with :class:`LocalBlob` leaves.

        Raises:
            RuntimeError: the value was already taken.
        """
        callback(self.get())


def convert(annotation, value) -> object:
    """Turn a structure of fetched ndarrays into what ``annotation`` asks for.

    Logic of OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/typing_util.py``.

    Args:
        annotation: ``Numpy``, ``ListNumpy``, ``Bundle[...]``, ``typing.Tuple/List/Dict`` of
            those, or None.
        value: the fetched structure (ndarray leaves).

    Returns:
        The value shaped as annotated (``ListNumpy`` leaves wrapped in one-element lists), or
        None for a None annotation.

    Raises:
        TypeError: the annotation is not one of those.
    """
    if annotation is None or annotation is type(None):
        return None
    if annotation is Numpy:
        return value
    if annotation is ListNumpy:
        return [value]
    if isinstance(annotation, _Alias) and annotation.origin is Bundle:
        return _map(lambda a: convert(annotation.arg, a), value)
    origin = _t.get_origin(annotation)
    args = _t.get_args(annotation)
    if origin is tuple:
        return tuple(convert(a, v) for a, v in zip(args, value))
    if origin is list:
        return [convert(args[0], v) for v in value]
    if origin is dict:
        return {k: convert(args[1], v) for k, v in value.items()}
    raise TypeError(f"unsupported return annotation {annotation!r}")


def check_structure(annotation, value, path="return value") -> None:
    """Check at compile time that a job's returned structure fits its annotation.

    Args:
        annotation: the job's return annotation (as for :func:`convert`, or ``Callback[...]``).
        value: the returned structure, BlobDesc leaves.
        path: where ``value`` sits, for the message (default ``"return value"``).

    Raises:
        TypeError: naming the first mismatch (a non-blob leaf, a tuple of another length, a
            dict key of another type, an unsupported annotation).
    """
    from graphfront.framework.blob_desc import BlobDesc

    if annotation in (None, type(None)):
        if value is not None:
            raise TypeError(f"{path}: the job is annotated to return None but returned {type(value).__name__}")
        return
    if isinstance(annotation, _Alias) and annotation.origin is Callback:
        return check_structure(annotation.arg, value, path)
    if annotation in (Numpy, ListNumpy):
        if not isinstance(value, BlobDesc):
            raise TypeError(f"{path}: annotated {annotation.__name__} expects a blob, received {type(value).__name__}")
        return
    if isinstance(annotation, _Alias) and annotation.origin is Bundle:
        _map(lambda leaf: check_structure(annotation.arg, leaf, path), value)
        return
    origin, args = _t.get_origin(annotation), _t.get_args(annotation)
    if origin is tuple:
        if not isinstance(value, tuple) or len(value) != len(args):
            raise TypeError(f"{path}: annotated Tuple of {len(args)} expects a tuple of that length, "
                            f"received {type(value).__name__}")
        for i, (a, v) in enumerate(zip(args, value)):
            check_structure(a, v, f"{path}[{i}]")
        return
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"{path}: annotated List expects a list, received {type(value).__name__}")
        for i, v in enumerate(value):
            check_structure(args[0], v, f"{path}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{path}: annotated Dict expects a dict, received {type(value).__name__}")
        for k, v in value.items():
            if type(k) is not args[0]:
                raise TypeError(f"{path}: Dict key {k!r} is not of type {args[0].__name__}")
            check_structure(args[1], v, f"{path}[{k!r}]")
        return
    raise TypeError(f"{path}: unsupported return annotation {annotation!r}")


def _map(fn, value):
    if isinstance(value, (list, tuple)):
        return type(value)(_map(fn, v) for v in value)
    if isinstance(value, dict):
        return {k: _map(fn, v) for k, v in value.items()}
    return fn(value)


def leaves(value) -> list:
    """Blob leaves of a returned (nested list/tuple/dict) structure, in order.

    Args:
        value: the structure, or None.

    Returns:
        list: the leaves, depth first (empty for None).
    """
    out = []
    _map(out.append, value) if value is not None else None
    return out


def rebuild(value, fetched) -> object:
    """Replace the leaves of ``value`` by the ``fetched`` items, in order.

    Args:
        value: the structure whose shape is kept, or None.
        fetched: iterable with one item per leaf.

    Returns:
        The same nesting holding the fetched items, or None for None.
    """
    it = iter(fetched)
    return _map(lambda _: next(it), value) if value is not None else None
