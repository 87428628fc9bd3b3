"""Splits that the device count does not divide: OneFlow's ``BalancedSplitter`` layout.

A blob split along an axis of length ``L`` over ``n`` devices gives device ``i`` the
``i``-th of ``n`` consecutive parts, the first ``L % n`` one longer (numpy's
``array_split`` cuts the same parts). Every multi-device run is compared with the same
job on one device: same seeds, same data.
"""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.ops.boxing_ops import BOXING_OP_TYPES
from graphfront.ops.common import balanced_range
from graphfront.parallel import sbp as _sbp
from graphfront.testing.compare import assert_close_at_scale

CLASSES = 21


def _session(ndev):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)


@pytest.mark.parametrize("length,n", [(10, 4), (7, 3), (5, 2), (8, 2), (3, 3)])
def test_local_shapes_are_numpy_array_split_parts(length, n):
    want = [len(p) for p in np.array_split(np.arange(length), n)]
    assert [_sbp.local_shape((2, length), "S(1)", n, i) for i in range(n)] == [(2, w) for w in want]
    assert [len(balanced_range(length, n, i)) for i in range(n)] == want
    assert _sbp.local_shape((2, length), "B", n, n - 1) == (2, length)


def test_local_shape_on_a_grid_takes_the_devices_coordinates():
    # device 3 of a (2, 2) grid sits at (1, 1): the second half of each split axis
    assert _sbp.local_shape((4, 6), ("S(0)", "S(1)"), (2, 2), 3) == (2, 3)


def _train_job(batch, split_logits):
    """A two-layer classifier over CLASSES classes; ``split_logits``: the output layer's
    weight split along its CLASSES rows and the logits along the classes (model parallel)."""
    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((batch, 12)),
                  y: tp.Numpy.Placeholder((batch,), dtype=flow.int32)) -> tp.Numpy:
        h = flow.layers.dense(x, 16, activation=flow.nn.relu, kernel_initializer=flow.random_normal_initializer(),
                              name="fc1")
        logits = flow.layers.dense(h, CLASSES, kernel_initializer=flow.random_normal_initializer(), name="fc2",
                                   model_distribute=flow.distribute.split(0) if split_logits
                                   else flow.distribute.broadcast())
        if split_logits:
            logits = logits.with_distribute(flow.distribute.split(1))
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-2])).minimize(loss)
        return loss
    return train_job


def _train(ndev, batch, split_logits, steps=4):
    _session(ndev)
    job = _train_job(batch, split_logits)
    rng = np.random.default_rng(0)
    losses = [job(rng.standard_normal((batch, 12)).astype(np.float32),
                  rng.integers(0, CLASSES, batch).astype(np.int32)) for _ in range(steps)]
    return np.array(losses), {k: v.numpy() for k, v in flow.get_all_variables().items()}, job


def _assert_same_training(got, want):
    """Losses and variables of two runs of one model: equal up to float32 rounding."""
    (losses, variables), (want_losses, want_variables) = got, want
    assert_close_at_scale(losses, want_losses, 1e-5)
    assert variables.keys() == want_variables.keys()
    for k in want_variables:  # split variables come back whole, in the single-device layout
        np.testing.assert_allclose(variables[k], want_variables[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.slow  # spawns worker processes
@pytest.mark.parametrize("ndev,batch", [(2, 5), (3, 7)])
def test_data_parallel_batch_the_devices_do_not_divide_matches_one_device(ndev, batch):
    one = _train(1, batch, False)
    many = _train(ndev, batch, False)
    _assert_same_training(many[:2], one[:2])
    sbps = _sbp.blob_sbps(many[2].graph.proto)
    inputs = [lbn for lbn in sbps if lbn.startswith("Input_")]
    assert inputs and all(sbps[lbn] == "S(0)" for lbn in inputs)  # the batch is split, not replicated


@pytest.mark.slow  # spawns worker processes
def test_logits_of_21_classes_split_over_two_devices_match_one_device(tmp_path):
    one = _train(1, 6, True)
    two = _train(2, 6, True)
    _assert_same_training(two[:2], one[:2])
    sbps = _sbp.blob_sbps(two[2].graph.proto)
    assert sbps["fc2-weight/out"] == "S(0)" and sbps["fc2-weight-m/out"] == "S(0)"
    # a checkpoint of the split weight (11 + 10 rows) loads whole on one device and on three
    flow.checkpoint.save(tmp_path / "two")
    saved = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    for ndev in (1, 3):
        _session(ndev)
        _train_job(6, True)
        flow.load_variables(flow.checkpoint.get(tmp_path / "two"))
        for k, v in flow.get_all_variables().items():
            np.testing.assert_array_equal(v.numpy(), saved[k], err_msg=f"{k} on {ndev} devices")


@pytest.mark.slow  # spawns worker processes
def test_every_boxing_conversion_of_uneven_parts_keeps_the_values():
    _session(3)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((5, 7))) -> tp.Numpy:
        for sbp in ("S(1)", "B", "S(1)", "P", "S(0)", "P", "B", "S(1)", "S(0)", "S(1)", "P"):
            x = flow.hierarchical_parallel_cast(x, [sbp])
        return x
    x = np.arange(35, dtype=np.float32).reshape(5, 7)
    np.testing.assert_array_equal(job_fn(x), x)
    assert set(BOXING_OP_TYPES) <= {jb.op_type_name(op) for op in job_fn.graph.proto.net.op}


@pytest.mark.slow  # spawns worker processes
def test_a_blob_moving_between_placements_of_two_and_three_devices_keeps_its_uneven_parts():
    def run(ndev):
        _session(ndev)
        cpus = ("0:0-1", "0:0-2") if ndev > 1 else ("0:0", "0:0")

        @flow.global_function()
        def job_fn(x: tp.Numpy.Placeholder((7, 4))) -> tp.Numpy:
            with flow.scope.placement("cpu", cpus[0]):
                y = flow.math.relu(flow.hierarchical_parallel_cast(x, ["S(0)"]))
            with flow.scope.placement("cpu", cpus[1]):
                return flow.math.reduce_sum(flow.hierarchical_parallel_cast(y * 2.0, ["S(1)"]), axis=[1])
        return job_fn(np.arange(-14, 14, dtype=np.float32).reshape(7, 4))
    want = np.maximum(np.arange(-14, 14, dtype=np.float32).reshape(7, 4), 0).sum(1) * 2.0
    np.testing.assert_array_equal(run(1), want)
    np.testing.assert_array_equal(run(3), want)


def test_a_split_shorter_than_the_device_count_is_refused_naming_the_op():
    _session(2)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((4, 1))) -> tp.Numpy:
        return flow.hierarchical_parallel_cast(x, ["S(1)"], name="narrow_cast")
    with pytest.raises(flow.JobBuildError, match=r"op 'narrow_cast'.*no SBP signature fits"):
        job_fn(np.zeros((4, 1), np.float32))
