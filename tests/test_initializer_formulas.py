"""Every initializer draws the distribution OneFlow v0.6.0 documents.

Each test draws one large variable through a job (fixed seed) and compares its empirical
mean and standard deviation with the formula, within 5 standard errors of the sampling
distribution (the std's standard error from the distribution's kurtosis), and checks the
support (uniform bounds, the two-sigma truncation).

The formulas (OneFlow's ``initializer_util.py`` docs): uniform ``U(min, max)``; normal
``N(mean, std)``; truncated normal = ``N(mean, std)`` redrawn beyond two std (so its std
is ``0.8796 std``); variance scaling: variance ``scale / n`` with ``n`` the fan_in,
fan_out or their mean, drawn as a uniform ``U(-sqrt(3 scale/n), +)``, a normal, or a
truncated normal whose std is corrected to ``sqrt(scale/n)``; for a weight
``[out, in, *k]`` (channels first) or ``[out, *k, in]`` (channels last)
fan_in = in * prod(k), fan_out = out * prod(k); a 2-D weight ``[out, in]`` has
fan_in = in, fan_out = out. Xavier = variance scaling 1.0 with fan_avg; Kaiming:
``std = gain / sqrt(n)`` with gain sqrt(2 / (1 + slope^2)) for leaky_relu.
"""
import math

import numpy as np
import pytest

import graphfront as flow
from graphfront.framework.errors import ArgumentError

SIGMAS = 5.0


def _phi(x):
    return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _truncated_moments(a=2.0):
    """(variance, kurtosis) of a standard normal truncated to [-a, a]."""
    z = math.erf(a / math.sqrt(2))
    m2 = 1 - 2 * a * _phi(a) / z
    m4 = 3 - (2 * a ** 3 + 6 * a) * _phi(a) / z
    return m2, m4 / m2 ** 2


TRUNC_VAR, TRUNC_KURT = _truncated_moments()
KURTOSIS = {"uniform": 1.8, "normal": 3.0, "truncated": TRUNC_KURT}


def _draw(initializer, shape, dtype=flow.float32, seed=0):
    flow.clear_default_session()
    flow.manual_seed(seed)

    @flow.global_function(type="predict")
    def job() -> None:
        flow.get_variable("v", shape, dtype=dtype, initializer=initializer)

    return flow.get_all_variables()["v"].numpy().astype(np.float64)


def _check_moments(x, mean, std, kind):
    n = x.size
    mean_se = std / math.sqrt(n)
    std_se = std * math.sqrt((KURTOSIS[kind] - 1) / (4 * n))
    assert abs(x.mean() - mean) < SIGMAS * mean_se + 1e-7 * abs(mean), (x.mean(), mean, mean_se)
    assert abs(x.std() - std) < SIGMAS * std_se, (x.std(), std, std_se)


def test_truncated_moments_match_a_numerical_integral():
    z = np.linspace(-2, 2, 400001)
    w = np.exp(-z * z / 2)
    var = np.trapezoid(z * z * w, z) / np.trapezoid(w, z)
    kurt = np.trapezoid(z ** 4 * w, z) / np.trapezoid(w, z) / var ** 2
    assert abs(var - TRUNC_VAR) < 1e-8 and abs(kurt - TRUNC_KURT) < 1e-6
    assert abs(math.sqrt(TRUNC_VAR) - 0.87962566103423978) < 1e-12  # the constant OneFlow divides by


def test_constant_zeros_ones():
    assert (_draw(flow.constant_initializer(2.5), (7, 3)) == 2.5).all()
    assert (_draw(flow.zeros_initializer(), (4,)) == 0).all()
    assert (_draw(flow.ones_initializer(), (4,)) == 1).all()
    x = _draw(flow.constant_initializer(7, dtype=flow.int32), (5,), dtype=flow.int32)
    assert (x == 7).all()


def test_random_uniform_default_is_zero_to_one():
    x = _draw(flow.random_uniform_initializer(), (512, 512))
    assert x.min() >= 0 and x.max() <= 1
    _check_moments(x, 0.5, 1 / math.sqrt(12), "uniform")


def test_random_uniform_bounds():
    x = _draw(flow.random_uniform_initializer(-0.3, 0.7), (512, 512))
    assert x.min() >= -0.3 and x.max() <= 0.7
    _check_moments(x, 0.2, 1 / math.sqrt(12), "uniform")


def test_random_uniform_int():
    x = _draw(flow.random_uniform_initializer(-3, 5, dtype=flow.int32), (512, 512), dtype=flow.int32)
    assert set(np.unique(x)) == set(range(-3, 5))  # [min, max)
    values = np.arange(-3, 5)
    _check_moments(x, values.mean(), values.std(), "uniform")


def test_random_normal():
    x = _draw(flow.random_normal_initializer(1.0, 2.0), (512, 512))
    _check_moments(x, 1.0, 2.0, "normal")


@pytest.mark.parametrize("make", [lambda: flow.truncated_normal_initializer(0.5, 0.3),
                                  lambda: flow.truncated_normal(0.816496580927726)])
def test_truncated_normal(make):
    conf = make().truncated_normal_conf
    x = _draw(make(), (512, 512))
    assert np.abs(x - conf.mean).max() <= 2 * conf.std * (1 + 1e-6)
    _check_moments(x, conf.mean, conf.std * math.sqrt(TRUNC_VAR), "truncated")


# (shape, data_format, fan_in, fan_out)
FANS = [((256, 128, 3, 3), "NCHW", 128 * 9, 256 * 9),
        ((256, 3, 3, 128), "NHWC", 128 * 9, 256 * 9),
        ((96, 48, 5), "NCW", 48 * 5, 96 * 5),
        ((600, 400), "", 400, 600)]
DISTRIBUTIONS = {"random_uniform": "uniform", "random_normal": "normal", "truncated_normal": "truncated"}


@pytest.mark.parametrize("shape,fmt,fan_in,fan_out", FANS)
@pytest.mark.parametrize("mode", ["fan_in", "fan_out", "fan_avg"])
@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
def test_variance_scaling(shape, fmt, fan_in, fan_out, mode, distribution):
    scale = 2.0
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    std = math.sqrt(scale / n)
    x = _draw(flow.variance_scaling_initializer(scale, mode, distribution, fmt), shape)
    if distribution == "random_uniform":
        assert np.abs(x).max() <= math.sqrt(3) * std
    if distribution == "truncated_normal":
        assert np.abs(x).max() <= 2 * std / math.sqrt(TRUNC_VAR) * (1 + 1e-6)
    _check_moments(x, 0.0, std, DISTRIBUTIONS[distribution])


def test_variance_scaling_of_a_vector_has_fan_in_one():
    """OneFlow's fans for a 1-D variable: fan_in = prod(shape[1:]) = 1, fan_out = shape[0]."""
    x = _draw(flow.variance_scaling_initializer(1.0, "fan_in", "random_normal"), (100000,))
    _check_moments(x, 0.0, 1.0, "normal")
    x = _draw(flow.variance_scaling_initializer(1.0, "fan_avg", "random_normal"), (99999,))
    _check_moments(x, 0.0, math.sqrt(2 / 100000), "normal")


@pytest.mark.parametrize("shape,fmt,fan_in,fan_out", FANS[:2])
def test_xavier(shape, fmt, fan_in, fan_out):
    std = math.sqrt(2 / (fan_in + fan_out))
    x = _draw(flow.xavier_uniform_initializer(fmt), shape)
    assert np.abs(x).max() <= math.sqrt(6 / (fan_in + fan_out))
    _check_moments(x, 0.0, std, "uniform")
    _check_moments(_draw(flow.xavier_normal_initializer(fmt), shape), 0.0, std, "normal")
    _check_moments(_draw(flow.glorot_uniform_initializer(fmt), shape), 0.0, std, "uniform")


@pytest.mark.parametrize("shape,fmt,fan_in,fan_out", FANS[:2])
@pytest.mark.parametrize("mode", ["fan_in", "fan_out", "fan_avg"])
@pytest.mark.parametrize("nonlinearity,slope,gain", [("relu", 0.0, math.sqrt(2)), ("tanh", 0.0, 5 / 3),
                                                     ("leaky_relu", 0.2, math.sqrt(2 / 1.04)),
                                                     ("leaky_relu", None, math.sqrt(2 / 1.0001)),
                                                     ("sigmoid", 0.0, 1.0)])
def test_kaiming(shape, fmt, fan_in, fan_out, mode, nonlinearity, slope, gain):
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    std = gain / math.sqrt(n)
    x = _draw(flow.kaiming_initializer(shape, "random_normal", mode, nonlinearity, slope, fmt), shape)
    _check_moments(x, 0.0, std, "normal")
    x = _draw(flow.kaiming_initializer(shape, "random_uniform", mode, nonlinearity, slope, fmt), shape)
    assert np.abs(x).max() <= math.sqrt(3) * std
    _check_moments(x, 0.0, std, "uniform")


def test_kaiming_refuses_what_oneflow_refuses():
    with pytest.raises(ArgumentError, match="mode"):
        flow.kaiming_initializer((4, 4), mode="fan_sum")
    with pytest.raises(ArgumentError, match="nonlinearity"):
        flow.kaiming_initializer((4, 4), nonlinearity=None)
    with pytest.raises(ArgumentError, match="distribution"):
        flow.kaiming_initializer((4, 4), distribution="truncated_normal")


@pytest.mark.parametrize("make, message", [
    # float()'s ValueError, a missing attribute, torch's RuntimeError at the first run, or NaN weights, before
    (lambda: flow.constant_initializer("1"), "constant_initializer: argument 'value' expects a number"),
    (lambda: flow.constant_initializer(float("nan")), "constant_initializer: argument 'value' expects a finite number"),
    (lambda: flow.zeros_initializer("float32"), "constant_initializer: argument 'dtype' expects a graphfront dtype"),
    (lambda: flow.random_uniform_initializer(1, 0), "minval must be below maxval, received minval=1.0 and maxval=0.0"),
    (lambda: flow.random_uniform_initializer(2, 2.5, dtype=flow.int32), "minval must be below maxval"),
    (lambda: flow.random_normal_initializer(0, -1), "argument 'stddev' expects a finite number >= 0.0, received -1.0"),
    (lambda: flow.truncated_normal_initializer(float("inf")), "argument 'mean' expects a finite number"),
    (lambda: flow.xavier_uniform_initializer(data_format=1), "data_format must be '', NC..., N...C"),
    (lambda: flow.kaiming_initializer(64), "kaiming_initializer: argument 'shape' expects a non-empty list or tuple"),
    (lambda: flow.kaiming_initializer((4, 4), negative_slope="0.1"), "argument 'negative_slope' expects a number"),
])
def test_initializer_arguments_are_checked_when_the_conf_is_made(make, message):
    with pytest.raises(ArgumentError) as e:
        make()
    assert message in str(e.value) and f"\n  at {__file__}:" in str(e.value)
