"""``flow.tensorrt``: OneFlow's INT8 calibration controls of its TensorRT engine.

OneFlow v0.6.0 collected INT8 calibration data while jobs with
``config.tensorrt.use_int8()`` ran, ``cache_int8_calibration()`` built the calibration
tables from it (later runs then used INT8 engines) and ``write_int8_calibration(path)``
wrote the tables to ``path``. graphfront's TensorRT lowering runs jobs in float32 and
collects no calibration data (``FunctionConfig.tensorrt`` records the settings only), so:

* ``cache_int8_calibration()`` changes nothing: the jobs keep running in float32, which a
  UserWarning says each time;
* ``write_int8_calibration(path)`` raises :class:`NoInt8CalibrationError` rather than write
  a file that would hold no table.
"""
from __future__ import annotations

import warnings

from graphfront.framework.errors import GraphfrontError

__all__ = ["NoInt8CalibrationError", "cache_int8_calibration", "write_int8_calibration"]


class NoInt8CalibrationError(GraphfrontError, NotImplementedError):
    """graphfront collects no INT8 calibration data, so it has no table to write."""


def cache_int8_calibration() -> None:
    """Nothing to cache: graphfront runs TensorRT jobs in float32 (warns; returns None)."""
    warnings.warn("flow.tensorrt.cache_int8_calibration(): graphfront collects no INT8 calibration data; "
                  "jobs with config.tensorrt.use_int8() keep running in float32", UserWarning, stacklevel=2)


def write_int8_calibration(path) -> None:
    """Raises NoInt8CalibrationError: there is no calibration table to write to ``path``."""
    raise NoInt8CalibrationError(
        f"flow.tensorrt.write_int8_calibration({path!r}): graphfront collects no INT8 calibration data (its "
        f"TensorRT lowering runs in float32), so there is no table to write")
