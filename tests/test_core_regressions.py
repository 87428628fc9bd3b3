"""Regression tests for correctness bugs found in the compiler core (framework, passes,
runtime). Each test states the symptom it guards against; references are numpy or
PyTorch eager, or the same job compiled with the cleanup passes off."""
import numpy as np
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb

RNG = np.random.default_rng(0)


def _config(passes=True):
    config = flow.FunctionConfig()
    config.enable_passes(passes)
    return config


def _sgd(lr=0.1):
    return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0)


def _types(job_func):
    return [jb.op_type_name(op) for op in job_func.graph.proto.net.op]


# ------------------------------------------------------------------ fusion: relu -> max pool

X_POOL = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)


def _conv_relu_pool(passes, observe):
    """Train job conv -> relu -> max pool whose relu output is also returned or watched."""
    flow.clear_default_session()
    flow.manual_seed(0)
    seen = []

    def keep(value: tp.Numpy):
        seen.append(value.copy())

    @flow.global_function(type="train", function_config=_config(passes))
    def job(x: tp.Numpy.Placeholder((2, 3, 6, 6), dtype=flow.float32)):
        w = flow.get_variable("w", (4, 3, 3, 3), initializer=flow.random_normal_initializer())
        r = flow.nn.relu(flow.nn.conv2d(x, w, 1, "SAME"))
        loss = flow.math.reduce_mean(flow.nn.max_pool2d(r, 2, 2, "VALID"))
        if observe == "watch":
            flow.watch(r, keep)
        _sgd().minimize(loss)
        return (loss, r) if observe == "return" else (loss,)

    results = [[o.numpy() for o in job(X_POOL).get()] for _ in range(2)]
    return results, seen, flow.get_all_variables()["w"].numpy(), _types(job)


def test_max_pool_fusion_keeps_a_returned_or_watched_relu():
    # was: AttributeError ('NoneType' has no 'startswith') in fuse_max_pool_grad when the
    # relu output before a fused max pool is also read by a return or watch op
    for observe in ("return", "watch"):
        on = _conv_relu_pool(True, observe)
        off = _conv_relu_pool(False, observe)
        assert "fused_tf_max_pool_2d" in on[3] and "relu" in on[3]
        for a, b in zip(on[0], off[0]):
            for x, y in zip(a, b):
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        for x, y in zip(on[1], off[1]):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(on[2], off[2], rtol=1e-5, atol=1e-6)
        relu = on[0][0][1] if observe == "return" else on[1][0]
        assert relu.min() == 0.0 and relu.max() > 0.0


# ------------------------------------------------------------------ lazy results alias storage

def test_future_of_a_variable_keeps_the_value_of_its_run():
    # was: a predict job returning a variable (or a view of it) without a numpy annotation
    # handed out the live variable: a later train step changed the future's value
    @flow.global_function(type="predict")
    def read():
        w = flow.get_variable("w", (2, 3), initializer=flow.constant_initializer(1.0))
        return w, flow.reshape(w, (6,)), flow.identity(w)

    @flow.global_function(type="predict")
    def read_cb() -> tp.Callback[tp.Numpy]:
        w = flow.get_variable("w", (2, 3), initializer=flow.constant_initializer(1.0))
        return flow.transpose(w, perm=[1, 0])

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float32)) -> tp.Numpy:
        w = flow.get_variable("w", (2, 3), initializer=flow.constant_initializer(1.0))
        loss = flow.math.reduce_sum(x * w)
        _sgd().minimize(loss)
        return loss

    x = np.ones((2, 3), np.float32)
    future = read()
    callback = read_cb()
    train(x)
    for value, shape in zip(future.get(), [(2, 3), (6,), (2, 3)]):
        np.testing.assert_array_equal(value.numpy(), np.ones(shape, np.float32))
    got = []
    callback(got.append)
    np.testing.assert_array_equal(got[0], np.ones((3, 2), np.float32))
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), np.full((2, 3), 0.9, np.float32))
    future = read()
    flow.load_variables({"w": np.full((2, 3), 5.0, np.float32)})
    np.testing.assert_allclose(future.get()[1].numpy(), np.full(6, 0.9, np.float32))


def test_future_of_a_feed_keeps_the_fed_value():
    # was: returning a placeholder (or a view of it) lazily aliased the caller's array
    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float32)):
        return x, flow.reshape(x, (3, 2))

    fed = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = fed.copy()
    future = job(fed)
    fed[:] = -1.0
    a, b = future.get()
    np.testing.assert_array_equal(a.numpy(), expected)
    np.testing.assert_array_equal(b.numpy(), expected.reshape(3, 2))


# ------------------------------------------------------------------ dynamic (ListNumpy) inputs

DYN_FEEDS = [RNG.standard_normal((n, 3)).astype(np.float32) for n in (4, 2, 1)]


def _zeros_like_dynamic(passes, through_relu):
    flow.clear_default_session()

    @flow.global_function(type="predict", function_config=_config(passes))
    def job(x: tp.ListNumpy.Placeholder((4, 3), dtype=flow.float32)) -> tp.ListNumpy:
        like = flow.math.relu(x) if through_relu else x
        return x * 2.0 + (flow.zeros_like(like) + 1.0)

    return job, [job([f])[0] for f in DYN_FEEDS]


def test_shape_only_constants_of_dynamic_blobs_are_not_folded():
    # was: constant folding turned zeros_like(x) of a ListNumpy placeholder into a constant
    # of the placeholder's maximum shape (a crash or wrong shape for smaller feeds): the
    # input's BlobDesc in the job lost is_dynamic, and ops do not carry the flag onwards
    for through_relu in (False, True):
        for passes in (True, False):
            job, outs = _zeros_like_dynamic(passes, through_relu)
            for f, out in zip(DYN_FEEDS, outs):
                np.testing.assert_allclose(out, f * 2.0 + 1.0, rtol=1e-6)
    job, _ = _zeros_like_dynamic(True, False)
    proto = job.graph.proto
    (inp,) = [op for op in proto.net.op if jb.op_kind(op) == "input_conf"]
    assert proto.helper.lbn2logical_blob_desc[f"{inp.name}/out"].is_dynamic


# ------------------------------------------------------------------ result order

def test_results_follow_the_returned_structure_when_a_forward_op_updates_a_variable():
    # was: results came back in schedule order; the return of a moving mean (updated in
    # place by a training batch norm) is scheduled before that batch norm, so
    # `return loss, moving_mean` came back as (moving_mean, loss)
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)

    @flow.global_function(type="train")
    def job(images: tp.Numpy.Placeholder((4, 3, 2, 2), dtype=flow.float32)) -> tp.Bundle[tp.Numpy]:
        w = flow.get_variable("w", (1, 3, 1, 1), initializer=flow.ones_initializer())
        y = flow.layers.batch_normalization(images * w, axis=1, momentum=0.9, epsilon=1e-5, name="bn")
        loss = flow.math.reduce_mean(y * images)
        _sgd().minimize(loss)
        mean = flow.get_variable("bn-moving_mean", (3,), initializer=flow.zeros_initializer(), trainable=False)
        return {"loss": loss, "mean": mean, "y": y}

    first, second = job(x), job(x)
    t = torch.tensor(x)
    y_ref = torch.nn.functional.batch_norm(t, torch.zeros(3), torch.ones(3), training=True, eps=1e-5)
    np.testing.assert_allclose(first["y"], y_ref.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(first["loss"], (y_ref * t).mean().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(first["mean"], np.zeros(3, np.float32))  # before the update
    np.testing.assert_allclose(second["mean"], 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ autograd: integer variables

def test_trainable_integer_variable_gets_no_gradient():
    # was: an int32 variable (trainable by default) that reaches the loss through a cast got
    # a "gradient" and an sgd_update, which failed to build (model must be floating point)
    x = RNG.standard_normal((5, 3)).astype(np.float32)

    @flow.global_function(type="train")
    def job(feed: tp.Numpy.Placeholder((5, 3), dtype=flow.float32)) -> tp.Numpy:
        w = flow.get_variable("w", (5, 3), initializer=flow.ones_initializer())
        k = flow.get_variable("k", (3,), dtype=flow.int32, initializer=flow.constant_initializer(2, dtype=flow.int32))
        loss = flow.math.reduce_sum(feed * w * flow.cast(k, flow.float32))
        _sgd(0.5).minimize(loss)
        return loss

    np.testing.assert_allclose(job(x), (x * 2).sum(), rtol=1e-5)
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), 1 - 0.5 * 2 * x, rtol=1e-5)
    np.testing.assert_array_equal(flow.get_all_variables()["k"].numpy(), np.full(3, 2, np.int32))
    assert not any(op.name.startswith("k_") or op.name.startswith("k-") for op in job.graph.proto.net.op)


# ------------------------------------------------------------------ pruning and random streams

def _two_dropouts(passes):
    flow.clear_default_session()
    flow.manual_seed(3)
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)

    @flow.global_function(type="train", function_config=_config(passes))
    def job(feed: tp.Numpy.Placeholder((4, 6), dtype=flow.float32)) -> tp.Numpy:
        w = flow.get_variable("w", (4, 6), initializer=flow.ones_initializer())
        h = feed * w
        flow.nn.dropout(h, rate=0.5)  # result unused
        loss = flow.math.reduce_mean(flow.nn.dropout(h, rate=0.5))
        _sgd().minimize(loss)
        return loss

    return [job(x) for _ in range(3)], flow.get_all_variables()["w"].numpy()


def test_dead_random_op_does_not_shift_the_other_random_draws():
    # was: prune_dead_ops removed the unused dropout, so with passes on the used dropout
    # drew the first mask from the shared random stream: other numbers than passes off
    on, off = _two_dropouts(True), _two_dropouts(False)
    np.testing.assert_allclose(on[0], off[0], rtol=1e-6)
    np.testing.assert_allclose(on[1], off[1], rtol=1e-6)
