"""OneFlow's API on 2 CPU devices: variables read and written by name, logical slices of
split variables, a variable trained as its own loss, and worker processes that outlive
their session.

References are numpy on the whole (logical) arrays, or the same job on one device.
"""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.session import default_session

pytestmark = pytest.mark.slow  # spawns worker processes

SHAPE = (6, 4)
SLICES = [(1, 6, 2), (-3, None, 1)]  # rows 1, 3, 5; the last three columns
NP_SLICES = tuple(slice(*s) for s in SLICES)


def _session(ndev):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)


def _variable(split_axis, dtype=flow.float32):
    return flow.get_variable("var", SHAPE, dtype=dtype, initializer=flow.random_uniform_initializer(-10, 10),
                             distribute=flow.distribute.split(split_axis))


@pytest.mark.parametrize("split_axis", [0, 1])
def test_interface_blob_values_of_a_split_variable_are_whole(split_axis):
    _session(2)

    @flow.global_function()
    def double() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            return _variable(split_axis) * 2.0
    value = np.arange(24, dtype=np.float32).reshape(SHAPE)
    flow.experimental.set_interface_blob_value("var", value)
    np.testing.assert_array_equal(flow.experimental.get_interface_blob_value("var"), value)
    np.testing.assert_array_equal(double(), value * 2)  # the devices hold their parts of the written value
    with pytest.raises(RuntimeError, match=r"'nope' is not a variable of the session; .*\['var'\]"):
        flow.experimental.get_interface_blob_value("nope")
    with pytest.raises(flow.checkpoint.CheckpointError, match=r"variable 'var': the job expects float32 \(6, 4\), "
                                                              r"received float32 \(4, 6\)"):
        flow.experimental.set_interface_blob_value("var", value.T.copy())


@pytest.mark.parametrize("split_axis", [0, 1])
def test_logical_slice_of_a_split_variable_is_the_slice_of_the_whole(split_axis):
    _session(2)
    watched = []

    @flow.global_function()
    def slice_fn() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            var = _variable(split_axis)
            flow.watch(var, lambda v: watched.append(v.numpy().copy()))
            return flow.experimental.logical_slice(var, SLICES)
    got = slice_fn()
    assert watched[0].shape == SHAPE  # the watch handler sees the whole variable
    np.testing.assert_array_equal(got, watched[0][NP_SLICES])
    np.testing.assert_array_equal(watched[0], flow.experimental.get_interface_blob_value("var"))


@pytest.mark.parametrize("split_axis", [0, 1])
def test_logical_slice_assign_writes_the_region_of_a_split_variable(split_axis):
    _session(2)
    region = np.zeros(SHAPE, np.float32)[NP_SLICES].shape

    @flow.global_function()
    def assign_fn(value: tp.Numpy.Placeholder(region)):
        with flow.scope.placement("cpu", "0:0-1"):
            flow.experimental.logical_slice_assign(_variable(split_axis), value, SLICES)

    @flow.global_function()
    def read_fn() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            return flow.identity(_variable(split_axis))
    before = read_fn()
    value = np.arange(np.prod(region), dtype=np.float32).reshape(region) + 100
    assign_fn(value)
    expected = before.copy()
    expected[NP_SLICES] = value
    np.testing.assert_array_equal(read_fn(), expected)


@pytest.mark.parametrize("mirrored", [False, True], ids=["consistent", "mirrored"])
def test_a_variable_minimized_as_its_own_loss_on_two_devices(mirrored):
    """d(mean of w)/dw = 1/10 on every element (a gradient the constant folding computes
    at compile time; the mirrored view all-reduces it and divides by the loss elements of
    both devices): lr 5 takes w from 1 to 0.5, as on one device."""
    _session(2)
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.mirrored_view() if mirrored else flow.scope.consistent_view())

    @flow.global_function(type="train", function_config=config)
    def minimize_w() -> tp.Numpy:
        w = flow.get_variable("w", (10,), initializer=flow.constant_initializer(1))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [5]), momentum=0).minimize(w)
        return w
    copies = 2 if mirrored else 1  # a mirrored blob returns the devices' parts concatenated
    np.testing.assert_array_equal(minimize_w(), np.ones(10 * copies, np.float32))
    np.testing.assert_array_equal(minimize_w(), np.full(10 * copies, 0.5, np.float32))


def _two_device_job(scale):
    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            w = flow.get_variable("w", (4, 2), initializer=flow.constant_initializer(scale))
            return x * w
    return job_fn


def test_a_new_session_reuses_the_workers_from_a_fresh_state():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    _session(2)
    np.testing.assert_array_equal(_two_device_job(2.0)(x), x * 2)
    first = [p.pid for p in default_session().worker_group.procs]
    _session(2)  # the same names: the new session's job and variable, not the old ones
    np.testing.assert_array_equal(_two_device_job(3.0)(x), x * 3)
    group = default_session().worker_group
    assert [p.pid for p in group.procs] == first
    flow.clear_default_session()  # the workers wait, idle
    group.procs[0].kill()  # an idle worker that died is not reused
    group.procs[0].join(5)
    _session(2)
    np.testing.assert_array_equal(_two_device_job(4.0)(x), x * 4)
    assert not {p.pid for p in default_session().worker_group.procs} & set(first)


def test_advanced_distribute_helpers_on_two_devices():
    _session(2)
    got = {}

    @flow.global_function()
    def distribute_fn(x: tp.Numpy.Placeholder((5, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3), initializer=flow.constant_initializer(10))
            a, b = w + 1.0, w * 2.0
        parts = flow.advanced.distribute_split(x, axis=0)
        got["shapes"] = [p.shape for p in parts]
        with pytest.raises(ValueError, match=r"distribute_concat: expects one blob per device of the current "
                                             r"placement \(2\), received 3"):
            flow.advanced.distribute_concat([a, b, a])
        clones = flow.advanced.distribute_clone(parts[1])
        return flow.concat([flow.advanced.distribute_concat([a, b], axis=0),
                            flow.advanced.distribute_concat([parts[1], flow.advanced.distribute_add(clones)], axis=0),
                            parts[0]], axis=0)
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    w = np.full((2, 3), 10, np.float32)
    expected = np.concatenate([w + 1, w * 2, x[3:], 2 * x[3:], x[:3]])
    np.testing.assert_array_equal(distribute_fn(x), expected)
    assert got["shapes"] == [(3, 3), (2, 3)]  # the balanced split: the first part one longer
