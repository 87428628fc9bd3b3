"""Annotations of global functions (``flow.typing``, alias ``tp``).

Parameters are annotated with placeholders:

* ``tp.Numpy.Placeholder(shape, dtype=flow.float)``: the call takes an
  ``np.ndarray`` of exactly this shape and dtype (a static input op);
* ``tp.ListNumpy.Placeholder(shape, dtype=flow.float)``: the call takes a list with
  one ndarray of the placeholder's rank and at most its element count (dynamic), or,
  for a job in the mirrored view on ``n`` devices, ``n`` such ndarrays (one per device).

The older spelling, a parameter default ``x=flow.FixedTensorDef(shape, dtype)`` (or
``flow.MirroredTensorDef``), declares the same static (or list) input.

Return annotations say how results come back: ``tp.Numpy`` (an ndarray),
``tp.ListNumpy`` (a one-element list of ndarrays), ``typing.Tuple/List/Dict`` of
those, ``tp.Bundle[T]`` (any nesting of list/tuple/dict), ``tp.Callback[T]`` (the
call returns ``f(callback)`` and the callback receives the value), or no annotation
(a future whose ``get()`` returns :class:`LocalBlob` objects).

Defined in :mod:`graphfront.framework.annotations`, where the session converts results.
"""
from graphfront.framework.annotations import (Bundle, Callback, FixedTensorDef, Future, ListNumpy, LocalBlob,
                                              MirroredTensorDef, Numpy, PlaceholderDef, check_structure, convert,
                                              leaves, rebuild)

__all__ = ["Bundle", "Callback", "FixedTensorDef", "Future", "ListNumpy", "LocalBlob", "MirroredTensorDef", "Numpy",
           "PlaceholderDef", "check_structure",
           "convert", "leaves", "rebuild"]
