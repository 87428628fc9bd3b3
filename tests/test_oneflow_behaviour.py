"""OneFlow programs that graphfront used to refuse: each behaves as in OneFlow, checked
against numpy / PyTorch references."""
import typing

import numpy as np
import pytest
import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import FeedError

RNG = np.random.RandomState(5)


def _sgd(lr=0.1):
    return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0)


def test_a_job_without_return_annotation_that_returns_nothing_returns_none():
    seen = []

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3,))):
        flow.watch(x * 2.0, lambda v: seen.append(v))

    assert job(np.arange(3, dtype=np.float32)) is None
    np.testing.assert_array_equal(seen[0], [0, 2, 4])


def test_tuple_of_placeholders_is_one_argument():
    @flow.global_function()
    def job(pair: typing.Tuple[tp.Numpy.Placeholder((2,)), tp.Numpy.Placeholder((3,), dtype=flow.int32)],
            z: tp.Numpy.Placeholder((1,))) -> tp.Numpy:
        a, b = pair
        return flow.concat([a, flow.cast(b, flow.float32), z], axis=0)

    a, b, z = np.array([1, 2], np.float32), np.array([3, 4, 5], np.int32), np.array([6], np.float32)
    np.testing.assert_array_equal(job((a, b), z), [1, 2, 3, 4, 5, 6])
    with pytest.raises(FeedError, match="argument 'pair' expects a tuple of 2 arrays"):
        job(a, z)


def test_gradient_flows_through_integer_casts_and_an_integer_loss():
    x = np.array([1.5, -2.0, 3.0], np.float32)

    @flow.global_function(type="train")
    def job(a: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        w = flow.get_variable("w", (3,), initializer=flow.constant_initializer(2.0))
        as_int = flow.cast(a * w, flow.int32)          # forward truncates ...
        loss = flow.math.reduce_sum(as_int)            # ... an int32 loss
        _sgd(0.5).minimize(loss)
        return loss

    loss = job(x)
    assert loss.dtype == np.int32 and loss == int(np.sum(np.trunc(x * 2)))
    # OneFlow's cast grad casts dy back: d loss / d w = x, seeded with 1 / 1 element
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), 2.0 - 0.5 * x)


def test_minimize_in_a_predict_job_makes_it_train():
    x = np.array([1.0, 2.0], np.float32)

    @flow.global_function(type="predict")
    def job(a: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        w = flow.get_variable("w", (2,), initializer=flow.ones_initializer())
        loss = flow.math.reduce_sum(a * w)
        _sgd(0.1).minimize(loss)
        return loss

    job(x)
    assert job.graph.proto.job_conf.HasField("train_conf")
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), 1.0 - 0.1 * x)


def test_gather_with_batch_dims_routes_to_batch_gather():
    params = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    idx = RNG.randint(0, 4, (2, 3, 2)).astype(np.int32)

    @flow.global_function()
    def job(p: tp.Numpy.Placeholder((2, 3, 4, 5)), i: tp.Numpy.Placeholder((2, 3, 2), dtype=flow.int32)) -> tp.Numpy:
        return flow.gather(p, i, axis=2, batch_dims=2)

    out = job(params, idx)
    ref = np.take_along_axis(params, idx[..., None].astype(np.int64), axis=2)  # tf.gather(batch_dims=2)
    np.testing.assert_array_equal(out, ref)
    assert [op.user_conf.op_type_name for op in job.graph.proto.net.op
            if op.HasField("user_conf")] == ["batch_gather"]


def test_gather_with_batch_dims_takes_indices_of_any_rank_as_oneflow_benchmark_bert():
    # OneFlow-Benchmark's BERT: (B, S, H) hidden states at (B, P) positions, axis=2, batch_dims=2
    hidden = RNG.standard_normal((3, 7, 4)).astype(np.float32)
    pos = RNG.randint(0, 7, (3, 5)).astype(np.int32)

    @flow.global_function(type="train")
    def job(h: tp.Numpy.Placeholder((3, 7, 4)), p: tp.Numpy.Placeholder((3, 5), dtype=flow.int32)) -> tp.Numpy:
        w = flow.get_variable("w", (3, 7, 4), initializer=flow.ones_initializer())
        out = flow.gather(params=h * w, indices=p, axis=2, batch_dims=2)
        _sgd(1.0).minimize(flow.math.reduce_sum(out))
        return out

    out = job(hidden, pos)
    np.testing.assert_array_equal(out, np.take_along_axis(hidden, pos[..., None].astype(np.int64), axis=1))
    grad = np.zeros((3, 7, 4), np.float32)   # d sum / d w: hidden at each gathered row, counted per use
    for b in range(3):
        for p in pos[b]:
            grad[b, p] += hidden[b, p]
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), 1.0 - grad, rtol=1e-6)
    with pytest.raises(flow.JobBuildError, match="must share the leading"):
        @flow.global_function()
        def bad(h: tp.Numpy.Placeholder((3, 7, 4)), p: tp.Numpy.Placeholder((2, 5), dtype=flow.int32)) -> tp.Numpy:
            return flow.gather(h, p, axis=2, batch_dims=2)
        bad(hidden, pos[:2])


def _train_settings():
    cfg = flow.FunctionConfig()
    cfg.train.primary_lr(0.1)
    cfg.train.model_update_conf({"momentum_conf": {"beta": 0.9}})
    cfg.train.num_gradient_accumulation_steps(2)
    return cfg


def test_a_predict_job_ignores_the_train_settings_of_its_config():
    # OneFlow-Benchmark's BERT classifier builds its train and eval configs with one helper
    x = RNG.standard_normal((4, 3)).astype(np.float32)

    @flow.global_function(type="predict", function_config=_train_settings())
    def job(a: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), initializer=flow.constant_initializer(0.5))
        return flow.matmul(a, w)

    np.testing.assert_allclose(job(x), x @ np.full((3, 2), 0.5, np.float32), rtol=1e-6)
    np.testing.assert_allclose(job(x), x @ np.full((3, 2), 0.5, np.float32), rtol=1e-6)  # no update happened
    conf = job.graph.proto.job_conf
    assert conf.WhichOneof("job_type") == "predict_conf"
    assert not any(op.name.startswith("System-Train") for op in job.graph.proto.net.op)


def test_without_a_type_the_train_settings_make_a_train_job():
    @flow.global_function(function_config=_train_settings())
    def job(a: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), initializer=flow.constant_initializer(0.5))
        loss = flow.math.reduce_sum(flow.matmul(a, w))
        flow.losses.add_loss(loss)
        return loss

    job(np.ones((4, 3), np.float32))
    assert job.graph.proto.job_conf.WhichOneof("job_type") == "train_conf"


def test_linear_warmup_of_zero_steps_is_no_warmup():
    @flow.global_function(type="train")
    def job(a: tp.Numpy.Placeholder((1,))) -> tp.Numpy:
        w = flow.get_variable("w", (1,), initializer=flow.ones_initializer())
        sched = flow.optimizer.PiecewiseConstantScheduler([], [0.25], warmup=flow.optimizer.warmup.linear(0, 0))
        flow.optimizer.SGD(sched, momentum=0).minimize(flow.math.reduce_sum(a * w))
        return w

    job(np.ones(1, np.float32))
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), [0.75])  # full LR at step 0


def test_cpu_device_num_with_every_placement_on_one_device():
    flow.config.cpu_device_num(4)
    flow.config.gpu_device_num(0)

    @flow.global_function()
    def job(a: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return a + 1.0

    np.testing.assert_array_equal(job(np.zeros(2, np.float32)), [1, 1])
    with pytest.raises(ValueError, match="expected an int >= 1, received 0"):
        flow.config.cpu_device_num(0)
