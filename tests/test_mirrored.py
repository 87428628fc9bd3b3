"""The mirrored view on 2 CPU devices: one part per device, local ops, all-reduced gradients.

Every mirrored run is compared with the same job on one device (same seeds): each part
run alone for predict jobs, the concatenated batch for train jobs.
"""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import FeedError, JobBuildError, OpRunError
from graphfront.parallel import sbp as _sbp

D_IN, HIDDEN, CLASSES = 6, 8, 3


def _config(mirrored):
    config = flow.FunctionConfig()
    if mirrored:
        config.default_logical_view(flow.scope.mirrored_view())
    return config


def _predict_job(b, mirrored):
    @flow.global_function(function_config=_config(mirrored))
    def predict(x: tp.ListNumpy.Placeholder((b, D_IN))) -> tp.ListNumpy:
        w = flow.get_variable("w", (D_IN, HIDDEN), initializer=flow.random_normal_initializer())
        h = flow.math.relu(flow.matmul(x, w))
        return flow.math.reduce_sum(h, axis=[1], keepdims=True) - flow.math.reduce_mean(h)
    return predict


def _train_job(b, mirrored):
    placeholder = tp.ListNumpy.Placeholder if mirrored else tp.Numpy.Placeholder

    @flow.global_function(type="train", function_config=_config(mirrored))
    def train(x: placeholder((b, D_IN)), y: placeholder((b,), dtype=flow.int32)) -> tp.ListNumpy:
        h = flow.layers.dense(x, HIDDEN, activation=flow.nn.relu, kernel_initializer=flow.random_normal_initializer(),
                              name="fc1")
        logits = flow.layers.dense(h, CLASSES, kernel_initializer=flow.random_normal_initializer(), name="fc2")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss
    return train


def _session(ndev):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)


@pytest.mark.slow  # spawns worker processes
def test_mirrored_predict_runs_each_part_locally():
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((4, D_IN)).astype(np.float32), rng.standard_normal((3, D_IN)).astype(np.float32)]
    _session(1)
    one = _predict_job(4, mirrored=False)
    expected = [one([p])[0] for p in parts]  # each part alone (reduce_mean over that part only)
    _session(2)
    two = _predict_job(4, mirrored=True)
    (out,) = two(parts)
    # the devices' parts come back concatenated along axis 0, as OneFlow returns mirrored blobs
    np.testing.assert_allclose(out, np.concatenate(expected), rtol=1e-5, atol=1e-6)
    job = two.graph.proto
    assert all(job.job_parallel_view_conf.op_name2is_mirrored_parallel_view[op.name] for op in job.net.op)
    assert not any(jb.op_type_name(op).startswith("_nccl") for op in job.net.op)  # no boxing in forward ops
    with pytest.raises(FeedError, match=r"argument 'x' \(ListNumpy.Placeholder\) expects a list with 2 ndarray"):
        two(parts[:1])
    (again,) = two(parts[::-1])  # the session stays usable
    np.testing.assert_allclose(again, np.concatenate(expected[::-1]), rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # spawns worker processes
def test_mirrored_train_matches_one_device_on_the_concatenated_batch():
    rng = np.random.default_rng(1)
    sizes = [(4, 4), (4, 2), (3, 4), (4, 4), (1, 4)]  # per device and step: full and partial parts
    steps = [[(rng.standard_normal((s, D_IN)).astype(np.float32), rng.integers(0, CLASSES, s).astype(np.int32))
              for s in pair] for pair in sizes]
    one_losses, one_vars = [], []
    for step in steps:  # one device on each step's concatenated batch (its own static size)
        x = np.concatenate([p[0] for p in step])
        y = np.concatenate([p[1] for p in step])
        _session(1)
        one = _train_job(len(x), mirrored=False)
        if one_vars:
            flow.load_variables(one_vars[-1])
        one_losses.append(one(x, y)[0])
        one_vars.append({k: v.numpy().copy() for k, v in flow.get_all_variables().items()})
    _session(2)
    train = _train_job(4, mirrored=True)
    for step, expected in zip(steps, one_losses):
        (loss,) = train([p[0] for p in step], [p[1] for p in step])
        np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)
    got = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    for k in ("fc1-weight", "fc1-bias", "fc2-weight", "fc2-bias"):
        np.testing.assert_allclose(got[k], one_vars[-1][k], rtol=1e-5, atol=1e-6, err_msg=k)
    job = train.graph.proto
    sigs = job.job_parallel_view_conf.op_name2sbp_signature_conf
    reduces = [op.name for op in job.net.op if jb.op_type_name(op) == "_nccl_logical_all_reduce"]
    assert len(reduces) == 5  # one per variable gradient, one for the total loss instance count
    assert all(n.startswith("System-Boxing-AllReduce-") for n in reduces)
    assert {(_sbp.from_proto(sigs[n].bn_in_op2sbp_parallel["in_0"]),
             _sbp.from_proto(sigs[n].bn_in_op2sbp_parallel["out_0"])) for n in reduces} == {("P", "B")}


@pytest.mark.slow  # spawns worker processes
def test_mirrored_numpy_placeholder_is_split_into_one_part_per_device():
    """A tp.Numpy.Placeholder in the mirrored view: each device's blob is its part of axis 0
    (blob.shape says so), a call feeds the whole array, and the results and watched blobs
    come back as the parts concatenated."""
    _session(2)
    seen, watched = [], []

    @flow.global_function(function_config=_config(True))
    def job_fn(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        seen.append((flow.scope.mirrored_view_enabled(), flow.scope.consistent_view_enabled()))
        y = flow.math.relu(x) - flow.math.reduce_sum(x, axis=[0], keepdims=True)  # a per-part sum
        seen.append(y.shape)
        flow.watch(y, lambda v: watched.append(v.numpy().copy()))
        return y * 2.0
    x = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    parts = np.split(x, 2)
    expected = np.concatenate([np.maximum(p, 0) - p.sum(0, keepdims=True) for p in parts])
    np.testing.assert_allclose(job_fn(x), expected * 2, rtol=0, atol=0)
    assert seen == [(True, False), (2, 3)] and not flow.scope.mirrored_view_enabled()
    assert len(watched) == 1
    np.testing.assert_array_equal(watched[0], expected)


def test_mirrored_numpy_placeholder_must_split_evenly():
    _session(2)

    @flow.global_function(function_config=_config(True))
    def job_fn(x: tp.Numpy.Placeholder((3, 2))) -> tp.Numpy:
        return x * 2.0
    with pytest.raises(JobBuildError, match=r"mirrored view on 2 devices: argument 'x' \(tp.Numpy.Placeholder\(3, 2\)\) "
                                            r"is split along axis 0 .* multiple of 2, received 3"):
        job_fn(np.ones((3, 2), np.float32))


@pytest.mark.slow  # spawns worker processes
def test_mirrored_train_on_devices_not_starting_at_0_matches_devices_0_and_1():
    """The mirrored view on the placement "0:2-3" of 4 CPU devices: the same losses and
    variables as on "0:0-1" (one worker per device of the placement)."""
    rng = np.random.default_rng(2)
    steps = [([rng.standard_normal((4, D_IN)).astype(np.float32) for _ in range(2)],
              [rng.integers(0, CLASSES, 4).astype(np.int32) for _ in range(2)]) for _ in range(2)]

    def run(devices, placement):
        _session(devices)
        config = _config(mirrored=True)
        config.default_placement_scope(flow.scope.placement("cpu", placement))

        @flow.global_function(type="train", function_config=config)
        def train(x: tp.ListNumpy.Placeholder((4, D_IN)), y: tp.ListNumpy.Placeholder((4,), dtype=flow.int32)) \
                -> tp.ListNumpy:
            h = flow.layers.dense(x, HIDDEN, activation=flow.nn.relu,
                                  kernel_initializer=flow.random_normal_initializer(), name="fc1")
            logits = flow.layers.dense(h, CLASSES, kernel_initializer=flow.random_normal_initializer(), name="fc2")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
            return loss
        losses = [train(xs, ys)[0] for xs, ys in steps]
        return losses, {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}

    first, moved = run(2, "0:0-1"), run(4, "0:2-3")
    for a, b in zip(first[0], moved[0]):
        np.testing.assert_allclose(b, a, rtol=1e-6)
    assert first[1].keys() == moved[1].keys()
    for k in first[1]:
        np.testing.assert_allclose(moved[1][k], first[1][k], rtol=1e-6, err_msg=k)


@pytest.mark.slow  # spawns worker processes
def test_an_op_failing_on_one_device_raises_its_error_and_no_device_updates_a_variable():
    """An op that raises on one device only (here a size out of range in that device's
    part): that device skips its later ops but still runs the step's collectives on zeros,
    the devices agree before the variable updates, and none updates a variable; the call
    raises the op's error naming the device, and the session goes on: the next step is the
    step the failed call would have been (before, the other device waited in its all-reduce
    until the collective timeout, and the session's workers were stopped)."""
    def job():
        @flow.global_function(type="train", function_config=_config(True))
        def train(x: tp.ListNumpy.Placeholder((4, D_IN)), y: tp.ListNumpy.Placeholder((4,), dtype=flow.int32),
                  n: tp.ListNumpy.Placeholder((1,), dtype=flow.int32)) -> tp.Bundle[tp.ListNumpy]:
            h = flow.layers.dense(x, HIDDEN, activation=flow.nn.relu,
                                  kernel_initializer=flow.random_normal_initializer(), name="fc1")
            logits = flow.layers.dense(h, CLASSES, kernel_initializer=flow.random_normal_initializer(), name="fc2")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
            return loss, flow.sync_dynamic_resize(h, n)
        return train

    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((4, D_IN)).astype(np.float32) for _ in range(2)]
    ys = [rng.integers(0, CLASSES, 4).astype(np.int32) for _ in range(2)]
    good, bad = [np.array([2], np.int32), np.array([3], np.int32)], [np.array([2], np.int32), np.array([9], np.int32)]
    _session(2)
    reference = job()
    reference(xs, ys, good)
    want_loss, _ = reference(xs, ys, good)
    want = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}

    _session(2)
    train = job()
    train(xs, ys, good)
    before = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    with pytest.raises(OpRunError, match=r"sync_dynamic_resize: size 9 is out of range .* device cpu:1"):
        train(xs, ys, bad)
    for k, v in flow.get_all_variables().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    loss, kept = train(xs, ys, good)
    np.testing.assert_array_equal(loss, want_loss)
    assert kept[0].shape == (5, HIDDEN)  # 2 + 3 rows: the devices' parts, concatenated
    for k, v in flow.get_all_variables().items():
        np.testing.assert_array_equal(v.numpy(), want[k], err_msg=k)


@pytest.mark.slow  # spawns worker processes
def test_a_predict_op_failing_on_one_device_raises_its_error_and_the_session_goes_on():
    """The same in a predict job (no variable updates, nothing to agree on): the device
    that failed raises its op's error after its step, the call raises it naming the device,
    and the next call runs (before, the workers were stopped)."""
    _session(2)

    @flow.global_function(function_config=_config(True))
    def predict(x: tp.ListNumpy.Placeholder((4, D_IN)), n: tp.ListNumpy.Placeholder((1,), dtype=flow.int32)
                ) -> tp.ListNumpy:
        return flow.sync_dynamic_resize(flow.math.relu(x), n)

    x = [np.linspace(-1, 1, 4 * D_IN, dtype=np.float32).reshape(4, D_IN)] * 2
    with pytest.raises(OpRunError, match=r"sync_dynamic_resize: size 5 is out of range .* device cpu:1"):
        predict(x, [np.array([1], np.int32), np.array([5], np.int32)])
    (out,) = predict(x, [np.array([1], np.int32), np.array([2], np.int32)])
    np.testing.assert_array_equal(out, np.maximum(np.concatenate([x[0][:1], x[1][:2]]), 0))
