"""Variable initializers: functions returning OneFlow ``InitializerConf`` protos.

Each returns the proto that ``flow.get_variable(..., initializer=...)`` stores in
``variable_conf.initializer`` (fields per OneFlow v0.6.0 ``oneflow/core/job/initializer_conf.proto``); the
values are drawn when the session initializes its variables
(:mod:`graphfront.runtime.variable_store`).
"""
from __future__ import annotations

import math
import numbers

from graphfront.framework.blob_desc import expect_dtype, expect_number, is_int
from graphfront.framework.errors import ArgumentError
from graphfront.framework import dtypes as _dt
from graphfront.core import initializer_conf_pb2 as _pb
from graphfront.runtime.variable_store import fans

InitializerConf = _pb.InitializerConf


def _finite(value, fn, arg, low=None):
    """``value`` as a float when it is a finite real number (>= ``low`` when given)."""
    value = expect_number(value, fn, arg)
    if not math.isfinite(value) or low is not None and value < low:
        raise ArgumentError(f"{fn}: argument '{arg}' expects a finite number{f' >= {low}' if low is not None else ''}, "
                            f"received {value!r}")
    return value


def _data_format(fmt: str) -> str:
    if fmt in ("", None):
        return ""
    if not isinstance(fmt, str):
        raise ArgumentError(f"data_format must be '', NC..., N...C, channels_first or channels_last, received {fmt!r}")
    if fmt.startswith("NC") or fmt == "channels_first":
        return "channels_first"
    if fmt.startswith("N") or fmt == "channels_last":
        return "channels_last"
    raise ArgumentError(f"data_format must be '', NC..., N...C, channels_first or channels_last, received {fmt!r}")


def constant_initializer(value=0, dtype=_dt.float32) -> InitializerConf:
    """Fill the variable with ``value``.

    Args:
        value: the fill value (a Python number).
        dtype: a graphfront dtype (``flow.float32`` etc.); floating dtypes give
            ``constant_conf`` (``float(value)``), others ``constant_int_conf`` (``int(value)``).

    Returns:
        An ``InitializerConf`` proto.

    Raises:
        ArgumentError: ``value`` is not a finite number, or ``dtype`` not a graphfront dtype.
    """
    value = _finite(value, "constant_initializer", "value")
    init = InitializerConf()
    if expect_dtype(dtype, "constant_initializer").is_floating_point:
        init.constant_conf.value = value
    else:
        init.constant_int_conf.value = int(value)
    return init


def zeros_initializer(dtype=_dt.float32) -> InitializerConf:
    """Fill with 0: ``constant_initializer(0.0, dtype)``.

    Args:
        dtype: a graphfront dtype; selects the float or int constant conf.

    Returns:
        An ``InitializerConf`` proto.
    """
    return constant_initializer(0.0, dtype)


def ones_initializer(dtype=_dt.float32) -> InitializerConf:
    """Fill with 1: ``constant_initializer(1.0, dtype)``.

    Args:
        dtype: a graphfront dtype; selects the float or int constant conf.

    Returns:
        An ``InitializerConf`` proto.
    """
    return constant_initializer(1.0, dtype)


def empty_initializer(dtype=_dt.float32) -> InitializerConf:
    """Leave the variable uninitialized (``empty_conf``), e.g. when a checkpoint fills it.

    Args:
        dtype: accepted for OneFlow compatibility; unused.

    Returns:
        An ``InitializerConf`` proto with ``empty_conf`` set.
    """
    init = InitializerConf()
    init.empty_conf.SetInParent()
    return init


def random_uniform_initializer(minval=0, maxval=1, dtype=_dt.float32) -> InitializerConf:
    """Draw uniformly from ``[minval, maxval)``.

    Args:
        minval: lower bound (inclusive), a Python number.
        maxval: upper bound (exclusive), a Python number.
        dtype: a graphfront dtype; floating dtypes give ``random_uniform_conf``,
            others ``random_uniform_int_conf`` (bounds converted with ``int``).

    Returns:
        An ``InitializerConf`` proto.

    Raises:
        ArgumentError: a bound is not a finite number, ``minval > maxval`` (``>=`` for an
            integer dtype, whose range is empty then), or ``dtype`` is not a graphfront dtype.
    """
    fn = "random_uniform_initializer"
    minval, maxval = _finite(minval, fn, "minval"), _finite(maxval, fn, "maxval")
    floating = expect_dtype(dtype, fn).is_floating_point
    if minval > maxval or not floating and int(minval) >= int(maxval):
        raise ArgumentError(f"{fn}: minval must be below maxval, received minval={minval} and maxval={maxval}")
    init = InitializerConf()
    if floating:
        init.random_uniform_conf.min = minval
        init.random_uniform_conf.max = maxval
    else:
        init.random_uniform_int_conf.min = int(minval)
        init.random_uniform_int_conf.max = int(maxval)
    return init


def random_normal_initializer(mean=0.0, stddev=1.0, seed=None, dtype=None) -> InitializerConf:
    """Draw from Normal(``mean``, ``stddev``).

    Args:
        mean: mean of the distribution (a Python number).
        stddev: standard deviation (a Python number).
        seed: must be None (as OneFlow); seed the variable with ``random_seed`` instead.
        dtype: must be None (as OneFlow).

    Returns:
        An ``InitializerConf`` proto with ``random_normal_conf`` set.

    Raises:
        ArgumentError: when ``seed`` or ``dtype`` is not None, ``mean`` is not a finite number,
            or ``stddev`` not a finite number >= 0.
    """
    if seed is not None or dtype is not None:
        raise ArgumentError("random_normal_initializer: seed and dtype must be None (set random_seed on the variable)")
    init = InitializerConf()
    init.random_normal_conf.mean = _finite(mean, "random_normal_initializer", "mean")
    init.random_normal_conf.std = _finite(stddev, "random_normal_initializer", "stddev", 0.0)
    return init


def truncated_normal_initializer(mean=0.0, stddev=1.0) -> InitializerConf:
    """Draw from Normal(``mean``, ``stddev``), redrawing values beyond two standard deviations.

    Args:
        mean: mean of the distribution (a Python number).
        stddev: standard deviation (a Python number).

    Returns:
        An ``InitializerConf`` proto with ``truncated_normal_conf`` set.

    Raises:
        ArgumentError: ``mean`` is not a finite number, or ``stddev`` not a finite number >= 0.
    """
    init = InitializerConf()
    init.truncated_normal_conf.mean = _finite(mean, "truncated_normal_initializer", "mean")
    init.truncated_normal_conf.std = _finite(stddev, "truncated_normal_initializer", "stddev", 0.0)
    return init


def truncated_normal(stddev=1.0) -> InitializerConf:
    """Deprecated OneFlow helper: truncated normal with mean 0 and std ``stddev``.

    Args:
        stddev: standard deviation (a Python number).

    Returns:
        An ``InitializerConf`` proto with ``truncated_normal_conf`` set.
    """
    return truncated_normal_initializer(0.0, stddev)


_MODES = {"fan_in": _pb.kFanIn, "fan_out": _pb.kFanOut, "fan_avg": _pb.kAverage}
_DISTRIBUTIONS = {"truncated_normal": _pb.kTruncatedNormal, "random_normal": _pb.kRandomNormal,
                  "random_uniform": _pb.kRandomUniform}


def variance_scaling_initializer(scale=1.0, mode="fan_in", distribution="truncated_normal",
                                 data_format="") -> InitializerConf:
    """Variance scaling: variance ``scale / fan`` with fan from ``mode`` and the variable's shape.

    The fan is resolved when the variable is initialized (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/ops/initializer_util.py``).

    Args:
        scale: a positive finite number (int or float, not bool).
        mode: ``"fan_in"``, ``"fan_out"`` or ``"fan_avg"``.
        distribution: ``"truncated_normal"``, ``"random_normal"`` or ``"random_uniform"``.
        data_format: ``""``, ``"NC..."``/``"channels_first"`` or ``"N...C"``/``"channels_last"``;
            where the channel dimension of the weight lies.

    Returns:
        An ``InitializerConf`` proto with ``variance_scaling_conf`` set.

    Raises:
        ArgumentError: for a ``scale`` that is not a positive finite number, an unknown
            ``mode``, ``distribution`` or ``data_format``.
    """
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < scale < math.inf:
        raise ArgumentError(f"variance_scaling_initializer: scale expects a positive finite number, received {scale!r}")
    if mode not in _MODES:
        raise ArgumentError(f"variance_scaling_initializer: mode must be one of {list(_MODES)}, received {mode!r}")
    if distribution not in _DISTRIBUTIONS:
        raise ArgumentError(f"variance_scaling_initializer: distribution must be one of {list(_DISTRIBUTIONS)}, "
                            f"received {distribution!r}")
    init = InitializerConf()
    vs = init.variance_scaling_conf
    vs.scale = float(scale)
    vs.variance_norm = _MODES[mode]
    vs.distribution = _DISTRIBUTIONS[distribution]
    vs.data_format = _data_format(data_format)
    return init


def xavier_uniform_initializer(data_format="") -> InitializerConf:
    """Glorot/Xavier uniform (Glorot & Bengio 2010): variance scaling 1.0, fan_avg, uniform.

    Args:
        data_format: as for :func:`variance_scaling_initializer`.

    Returns:
        An ``InitializerConf`` proto.

    Raises:
        ArgumentError: for an unknown ``data_format``.
    """
    return variance_scaling_initializer(1.0, "fan_avg", "random_uniform", data_format)


def xavier_normal_initializer(data_format="") -> InitializerConf:
    """Glorot/Xavier normal (Glorot & Bengio 2010): variance scaling 1.0, fan_avg, normal.

    Args:
        data_format: as for :func:`variance_scaling_initializer`.

    Returns:
        An ``InitializerConf`` proto.

    Raises:
        ArgumentError: for an unknown ``data_format``.
    """
    return variance_scaling_initializer(1.0, "fan_avg", "random_normal", data_format)


glorot_uniform_initializer = xavier_uniform_initializer
glorot_normal_initializer = xavier_normal_initializer


def kaiming_initializer(shape, distribution="random_normal", mode="fan_in", nonlinearity="leaky_relu",
                        negative_slope=0.0, data_format="NCHW") -> InitializerConf:
    """He initialization (He et al. 2015) resolved from ``shape`` into a normal/uniform initializer.

    ``std = gain / sqrt(fan)`` with gain 1 (linear, conv2d, sigmoid), 5/3 (tanh),
    sqrt(2) (relu) or sqrt(2 / (1 + negative_slope**2)) (leaky_relu); the uniform bound is
    ``sqrt(3) * std`` (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/initializer_util.py``).

    Args:
        shape: the weight shape, a sequence of ints, e.g. (C_out, C_in, kH, kW) for NCHW.
        distribution: ``"random_normal"`` or ``"random_uniform"``.
        mode: ``"fan_in"``, ``"fan_out"`` or ``"fan_avg"`` (the mean of the two).
        nonlinearity: ``"linear"``, ``"conv2d"``, ``"sigmoid"``, ``"tanh"``, ``"relu"`` or
            ``"leaky_relu"``.
        negative_slope: slope of leaky_relu (a float; None means 0.01).
        data_format: ``"NC..."``/``"channels_first"`` or ``"N...C"``/``"channels_last"``.

    Returns:
        An ``InitializerConf`` proto (``random_normal_conf`` or ``random_uniform_conf``).

    Raises:
        ArgumentError: for a ``shape`` that is not a sequence of positive ints, a
            ``negative_slope`` that is not a finite number, an unknown ``mode``,
            ``nonlinearity``, ``distribution`` or ``data_format``.
    """
    if not isinstance(shape, (list, tuple)) or not shape or not all(
            is_int(d) and d > 0 for d in shape):
        raise ArgumentError(f"kaiming_initializer: argument 'shape' expects a non-empty list or tuple of positive "
                            f"ints, received {shape!r}")
    if mode not in _MODES:
        raise ArgumentError(f"kaiming_initializer: mode must be one of {list(_MODES)}, received {mode!r}")
    if distribution not in ("random_normal", "random_uniform"):
        raise ArgumentError(f"kaiming_initializer: distribution must be random_normal or random_uniform, "
                            f"received {distribution!r}")
    if negative_slope is None:  # OneFlow's default slope of leaky_relu
        negative_slope = 0.01
    negative_slope = _finite(negative_slope, "kaiming_initializer", "negative_slope")
    gains = {"linear": 1.0, "conv2d": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0),
             "leaky_relu": math.sqrt(2.0 / (1 + negative_slope ** 2))}
    if nonlinearity not in gains:
        raise ArgumentError(f"kaiming_initializer: nonlinearity must be one of {list(gains)}, received "
                            f"{nonlinearity!r}")
    fan_in, fan_out = fans(tuple(shape), _data_format(data_format))
    fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[mode]
    std = gains[nonlinearity] / math.sqrt(fan)
    if distribution == "random_normal":
        return random_normal_initializer(0.0, std)
    bound = math.sqrt(3.0) * std
    return random_uniform_initializer(-bound, bound)
