"""OneFlow's API on 2 CPU devices: variables read and written by name, logical slices of
split variables, a variable trained as its own loss, and worker processes that outlive
their session.

References are numpy on the whole (logical) arrays, or the same job on one device.
"""
import gc

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.session import default_session
from graphfront.parallel import sbp as _sbp

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
    old = default_session()
    _session(2)  # the same names: the new session's job and variable, not the old ones
    job = _two_device_job(3.0)
    np.testing.assert_array_equal(job(x), x * 3)
    del old
    gc.collect()  # the closed session's finalizer leaves the workers to the new session
    np.testing.assert_array_equal(job(x), x * 3)
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


def _grid_train_job(hierarchy, nd_sbp):
    @flow.global_function(type="train")
    def train_fn(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1", hierarchy):
            w = flow.get_variable("w", (6, 4), initializer=flow.random_normal_initializer(), nd_sbp=nd_sbp)
            loss = flow.math.reduce_mean(flow.math.square(flow.matmul(x, w)))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return train_fn


@pytest.mark.parametrize("hierarchy, nd_sbp, layout", [((2, 1), ["S(0)", "B"], "S(0)"),
                                                       ((1, 2), ["B", "S(1)"], "S(1)")])
def test_a_variable_over_a_device_grid_trains_as_on_one_device(hierarchy, nd_sbp, layout):
    """A 2-D layout over a grid with one axis of two devices is the 1-D layout of that axis."""
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    _session(1)

    @flow.global_function(type="train")
    def one_fn(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        w = flow.get_variable("w", (6, 4), initializer=flow.random_normal_initializer())
        loss = flow.math.reduce_mean(flow.math.square(flow.matmul(x, w)))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    expected = [one_fn(x) for _ in range(3)]
    _session(2)
    grid_fn = _grid_train_job(hierarchy, nd_sbp)
    for want in expected:
        np.testing.assert_allclose(grid_fn(x), want, rtol=1e-5)
    job = grid_fn.graph.proto
    sig = job.job_parallel_view_conf.op_name2sbp_signature_conf["w"].bn_in_op2sbp_parallel["out"]
    assert _sbp.from_proto(sig) == layout
    grids = {tuple(g.parallel_conf.hierarchy.dim) for g in job.placement.placement_group if "w" in g.op_set.op_name}
    assert grids == {hierarchy}


def test_device_grids_that_do_not_fit_are_refused():
    _session(2)
    with pytest.raises(flow.JobBuildError, match=r"hierarchy must be a tuple of positive ints whose product is the "
                                                 r"number of devices \(2\), received \(3, 1\)"):
        flow.scope.placement("cpu", "0:0-1", (3, 1))
    assert _sbp.flatten_nd_sbp(["S(0)", "S(1)"], (2, 2)) == ("S(0)", "S(1)")  # a layout over the grid
    assert _sbp.flatten_nd_sbp(["B", "B"], (2, 2)) == "B"


def test_a_cast_whose_layout_does_not_fit_the_grid_is_refused_naming_the_users_line():
    """OneFlow's GPT lays activations out as [S(0), B] over a (2, 2) grid; a list of
    another length than the hierarchy's is refused at the cast, with the user's line."""
    _session(4)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-3", (2, 2)):
            return flow.hierarchical_parallel_cast(x, parallel_distribution=["S(0)", "B", "B"])

    with pytest.raises(flow.JobBuildError, match=r"hierarchical_parallel_cast: nd_sbp \['S\(0\)', 'B', 'B'\] needs "
                                                 r"one entry per axis of the placement's hierarchy \(2, 2\)"
                                                 r"(?s:.*)test_distributed_api.py:\d+ in job"):
        job(np.zeros((4, 3), np.float32))


def test_a_split_beyond_the_blobs_rank_is_refused_naming_the_axis():
    # "no SBP signature fits its inputs' layouts {'in': 'S(0)'}" did not say what was asked for
    _session(2)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            return flow.parallel_cast(x, distribute=flow.distribute.split(5), name="cast")

    with pytest.raises(flow.JobBuildError, match=r"op 'cast' \(parallel_cast\): attr 'sbp_parallel' S\(5\) splits "
                                                 r"axis 5, which input 'in' of shape \(4, 3\) does not have"):
        job(np.zeros((4, 3), np.float32))
    with pytest.raises(flow.ArgumentError, match="flow.distribute.split: axis must be >= 0, received -1"):
        flow.distribute.split(-1)
