"""Random argument generators of the op AutoTest.

A generator describes how one argument of an autotest is drawn; ``check(...)``
resolves every generator keyword argument once per draw (see
:mod:`graphfront.testing.autotest`). All randomness comes from the draw's numpy
``Generator``, so a (seed, draw index) pair reproduces every value.

* ``random(low, high)``: a number in ``[low, high)``; ``.to(int)`` draws an integer
  (``high`` exclusive, ``numpy.random.Generator.integers``), ``.to(float)`` a float
  (the default), ``.to(bool)`` a bool. Untyped ``random`` used as a tensor dim or
  ``ndim`` is drawn as an int.
* ``random_bool()``: True or False.
* ``oneof(a, b, ...)``: one of the values, uniformly; values may be generators.
* ``nothing()``: the argument is omitted (a keyword is dropped on both sides; inside
  a list or tuple the element is dropped).
* ``constant(v)``: always ``v`` (a numpy array becomes a tensor input).
* ``random_tensor(ndim, dim0, ..., dim4, low, high, dtype)``: a tensor input.
* ``random_device()``: ``"cpu"``, or ``"cuda"`` when CUDA is available.
* ``a | b``: one of the alternatives, uniformly (``a | b | c`` picks each with 1/3).

Within one draw, one generator *object* resolves to one value wherever it is used
(``d = random(1, 5).to(int)`` used as ``dim1`` of two tensors gives them the same
dim) and ``gen.value()`` inside an autotest body returns that same value.
"""
from __future__ import annotations

import builtins

import numpy as np

from graphfront.framework import dtypes as _dt

__all__ = ["Generator", "random", "random_bool", "oneof", "nothing", "constant", "random_tensor",
           "random_device", "TensorValue", "Device", "NOTHING", "DrawContext"]

MAX_RANDOM_DIM = 6        # unspecified dims of random_tensor are drawn from 1..MAX_RANDOM_DIM
MAX_RANDOM_NDIM = 4       # an unspecified ndim is drawn from 1..MAX_RANDOM_NDIM


class _Nothing:
    """The value of ``nothing()``: the argument is left out."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "nothing()"


NOTHING = _Nothing()


class Device(str):
    """A device drawn by ``random_device()``: ``"cpu"`` or ``"cuda"`` (a ``str``)."""


class TensorValue:
    """A drawn tensor input: a numpy ``array`` and whether its gradient is checked.

    Float tensors with ``requires_grad`` become trainable variables of the graphfront
    train job and leaf tensors requiring grad on the torch side; all other tensors
    become placeholders (graphfront) and plain tensors (torch).
    """

    __slots__ = ("array", "requires_grad")

    def __init__(self, array: np.ndarray, requires_grad: bool = True):
        self.array = array
        self.requires_grad = bool(requires_grad) and array.dtype.kind == "f"

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    def __repr__(self):
        return f"tensor({self.array.dtype}, shape={tuple(self.array.shape)})"


class DrawContext:
    """The state of one draw: its numpy Generator and the values drawn so far.

    ``resolve(value)`` turns generators (also inside lists and tuples) into values;
    each generator object is drawn once per context.
    """

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self._memo = {}

    def resolve(self, value, hint=None):
        """Draw ``value`` if it is a generator; recurse into lists and tuples.

        ``hint`` (int, float or bool) types untyped ``random`` generators when they are
        first drawn (a generator shared between places should be typed with ``.to``).
        """
        if isinstance(value, Generator):
            key = id(value)
            if key not in self._memo:
                self._memo[key] = (value, value._draw(self, hint))
            return self._memo[key][1]
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            items = [self.resolve(v, hint) for v in value]
            items = [v for v in items if v is not NOTHING]
            return items if isinstance(value, list) else tuple(items)
        return value

    def __enter__(self):
        _CONTEXTS.append(self)
        return self

    def __exit__(self, *exc):
        _CONTEXTS.remove(self)
        return False


_CONTEXTS: list = []


def current_context() -> DrawContext:
    """The context of the draw running now (inside an autotest body)."""
    if not _CONTEXTS:
        raise RuntimeError("generator.value() can only be called inside an @autotest body (while a draw runs)")
    return _CONTEXTS[-1]


class Generator:
    """Base class of argument generators (see module docstring)."""

    def _draw(self, ctx: DrawContext, hint):
        raise NotImplementedError

    def value(self):
        """This generator's value in the current draw (the same value ``check`` uses).

        Tensors come back as numpy arrays. Raises RuntimeError outside an autotest body.
        """
        v = current_context().resolve(self)
        return v.array if isinstance(v, TensorValue) else v

    def to(self, type_):
        """The same generator with its values converted to ``type_`` (int, float or bool)."""
        return _Typed(self, _check_type(type_))

    def __or__(self, other):
        return _OneOf(_alternatives(self) + _alternatives(other), from_or=True)

    def __ror__(self, other):
        return _OneOf(_alternatives(other) + _alternatives(self), from_or=True)


def _alternatives(v):
    return list(v.values) if isinstance(v, _OneOf) and v.from_or else [v]


def _check_type(type_):
    if type_ not in (int, float, bool):
        raise TypeError(f"generator.to(type) expects int, float or bool, received {type_!r}")
    return type_


class _Typed(Generator):
    def __init__(self, inner, type_):
        self.inner = inner
        self.type = type_

    def _draw(self, ctx, hint):
        v = ctx.resolve(self.inner, self.type)
        if isinstance(v, (builtins.bool, int, float, np.number, np.bool_)):
            return self.type(v)
        return v

    def __repr__(self):
        return f"{self.inner!r}.to({self.type.__name__})"


class _Random(Generator):
    def __init__(self, low, high, type_=None):
        self.low = low
        self.high = high
        self.type = type_

    def to(self, type_):
        return _Random(self.low, self.high, _check_type(type_))

    def _draw(self, ctx, hint):
        type_ = self.type or hint or float
        low = ctx.resolve(self.low, None)
        high = ctx.resolve(self.high, None)
        if type_ is bool:
            return builtins.bool(ctx.rng.integers(0, 2))
        if type_ is int:
            lo, hi = int(np.ceil(low)), int(np.ceil(high))
            if hi <= lo:
                raise ValueError(f"random({self.low!r}, {self.high!r}).to(int): no integer in [low, high)")
            return int(ctx.rng.integers(lo, hi))
        if high < low:
            raise ValueError(f"random({self.low!r}, {self.high!r}): high < low")
        return float(ctx.rng.uniform(low, high))

    def __repr__(self):
        suffix = f".to({self.type.__name__})" if self.type else ""
        return f"random({self.low!r}, {self.high!r}){suffix}"


def random(low=0, high=1) -> Generator:
    """A number in ``[low, high)``: float unless typed with ``.to(int)`` / ``.to(bool)``.

    Integers are drawn uniformly from ``low, ..., high - 1``; floats uniformly from
    ``[low, high)``. ValueError at draw time when the range is empty.
    """
    return _Random(low, high)


class _RandomBool(Generator):
    def _draw(self, ctx, hint):
        return builtins.bool(ctx.rng.integers(0, 2))

    def __repr__(self):
        return "random_bool()"


def random_bool() -> Generator:
    """True or False with probability 1/2 each."""
    return _RandomBool()


class _OneOf(Generator):
    def __init__(self, values, from_or=False):
        if not values:
            raise ValueError("oneof() needs at least one value")
        self.values = list(values)
        self.from_or = from_or

    def _draw(self, ctx, hint):
        choice = self.values[int(ctx.rng.integers(0, len(self.values)))]
        return ctx.resolve(choice, hint)

    def __repr__(self):
        return " | ".join(repr(v) for v in self.values) if self.from_or else \
            f"oneof({', '.join(repr(v) for v in self.values)})"


def oneof(*values) -> Generator:
    """One of ``values`` with equal probability; generator values are drawn in turn."""
    return _OneOf(values)


class _NothingGen(Generator):
    def _draw(self, ctx, hint):
        return NOTHING

    def __repr__(self):
        return "nothing()"


def nothing() -> Generator:
    """Leave the argument out: the keyword is not passed to either side."""
    return _NothingGen()


class _Constant(Generator):
    def __init__(self, value):
        self.constant = value

    def _draw(self, ctx, hint):
        v = self.constant
        if isinstance(v, np.ndarray):
            return TensorValue(v)
        return v

    def __repr__(self):
        return f"constant({self.constant!r})"


def constant(value) -> Generator:
    """Always ``value``. A numpy array is a tensor input (trainable when floating)."""
    return _Constant(value)


def _np_dtype(dtype):
    if dtype is float:
        return np.dtype(np.float32)
    if dtype is int:
        return np.dtype(np.int64)
    if dtype is builtins.bool:
        return np.dtype(np.bool_)
    if isinstance(dtype, _dt.dtype):
        if dtype.np is None:
            raise TypeError(f"random_tensor: dtype {dtype!r} has no numpy dtype")
        return dtype.np
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"random_tensor: dtype must be float, int, bool, a graphfront dtype or a numpy dtype, "
                        f"received {dtype!r}") from None


class _RandomTensor(Generator):
    def __init__(self, ndim, dims, low, high, dtype, requires_grad):
        self.ndim = ndim
        self.dims = dims
        self.low = low
        self.high = high
        self.np_dtype = _np_dtype(dtype)
        self.requires_grad = requires_grad

    def _draw(self, ctx, hint):
        rng = ctx.rng
        if self.ndim is None:
            ndim = int(rng.integers(1, MAX_RANDOM_NDIM + 1))
        else:
            ndim = ctx.resolve(self.ndim, int)
        if not isinstance(ndim, (int, np.integer)) or isinstance(ndim, builtins.bool) or ndim < 0:
            raise ValueError(f"random_tensor: ndim must be a non-negative int, drew {ndim!r}")
        shape = []
        for i in range(int(ndim)):
            spec = self.dims[i] if i < len(self.dims) else None
            d = int(rng.integers(1, MAX_RANDOM_DIM + 1)) if spec is None else ctx.resolve(spec, int)
            if not isinstance(d, (int, np.integer)) or isinstance(d, builtins.bool) or d < 1:
                raise ValueError(f"random_tensor: dim{i} must be a positive int, drew {d!r}")
            shape.append(int(d))
        low, high = ctx.resolve(self.low, None), ctx.resolve(self.high, None)
        kind = self.np_dtype.kind
        if kind == "f":
            arr = rng.uniform(low, high, size=shape).astype(self.np_dtype)
        elif kind in "iu":
            lo, hi = int(np.ceil(low)), int(np.ceil(high))
            if hi <= lo:
                raise ValueError(f"random_tensor: no integer in [low={low!r}, high={high!r})")
            arr = rng.integers(lo, hi, size=shape).astype(self.np_dtype)
        elif kind == "b":
            arr = rng.integers(0, 2, size=shape).astype(np.bool_)
        else:
            raise TypeError(f"random_tensor: unsupported dtype {self.np_dtype}")
        return TensorValue(np.ascontiguousarray(arr), self.requires_grad)

    def __repr__(self):
        return f"random_tensor(ndim={self.ndim!r}, dims={self.dims!r}, dtype={self.np_dtype})"


def random_tensor(ndim=None, dim0=None, dim1=None, dim2=None, dim3=None, dim4=None, low=0, high=1, dtype=float,
                  requires_grad=True) -> Generator:
    """A random tensor input.

    Args:
        ndim: rank (int or generator); None draws 1..4.
        dim0: size of dim 0 (int or generator); None draws 1..6. ``dim1`` ..
            ``dim4`` likewise; dims beyond dim4 are drawn 1..6.
        low: lower end of the value range ``[low, high)`` (integers
            ``low .. high-1`` for integer dtypes).
        high: upper end of the value range.
        dtype: ``float`` (float32), ``int`` (int64), ``bool``, a graphfront dtype
            (``flow.int32``, ``flow.float64`` ...) or a numpy dtype.
        requires_grad: for floating tensors, whether the input is trainable and its
            gradient compared (False: a placeholder / plain tensor).
    Values are drawn in float64 and rounded to the dtype, so both sides see the same
    numbers.
    """
    return _RandomTensor(ndim, [dim0, dim1, dim2, dim3, dim4], low, high, dtype, requires_grad)


class _RandomDevice(Generator):
    def _draw(self, ctx, hint):
        import torch
        choices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
        return Device(choices[int(ctx.rng.integers(0, len(choices)))])

    def __repr__(self):
        return "random_device()"


def random_device() -> Generator:
    """``"cpu"`` or, when CUDA is available, ``"cuda"`` (uniformly).

    A keyword resolving to a device places the graphfront job (``flow.scope.placement``)
    and the torch tensors on it; the device string is also passed to both functions.
    """
    return _RandomDevice()
