"""Eager execution (``flow.enable_eager_execution(True)``): job functions run op by op when
called, and give what the same function gives in lazy mode."""
import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import OpRunError
from graphfront.framework.session import default_session

B = 4
EPS32 = np.finfo(np.float32).eps


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, 1, 8, 8)).astype(np.float32),
            rng.integers(0, 5, size=(B,)).astype(np.int32))


def _net(x, bn=True):
    """A small LeNet: conv 3x3x4 relu -> batch norm (unless ``bn`` is False) -> max pool -> dense 5."""
    init = flow.truncated_normal(0.1)
    h = flow.layers.conv2d(x, 4, 3, padding="SAME", activation=flow.nn.relu, name="conv1",
                           kernel_initializer=init)
    if bn:
        h = flow.layers.batch_normalization(h, axis=1, name="bn1")
    h = flow.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID", name="pool1")
    h = flow.reshape(h, [h.shape[0], -1])
    return flow.layers.dense(h, 5, kernel_initializer=init, name="dense1")


def _config(device="cpu"):
    """The jobs compared between the modes run on one device type (the CPU unless asked):
    cuDNN's reductions need not give the same roundings from one call to the next."""
    config = flow.FunctionConfig()
    config.default_placement_scope(flow.scope.placement(device, "0:0"))
    return config


def _train_job(device="cpu"):
    @flow.global_function(type="train", function_config=_config(device))
    def train(x: tp.Numpy.Placeholder((B, 1, 8, 8)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, _net(x), name="xent"))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss
    return train


def _predict_job():
    @flow.global_function(type="predict", function_config=_config())
    def predict(x: tp.Numpy.Placeholder((B, 1, 8, 8))) -> tp.Numpy:
        return flow.nn.softmax(_net(x))
    return predict


def _run_train(eager, steps=3, device="cpu"):
    flow.clear_default_session()
    flow.enable_eager_execution(eager)
    flow.manual_seed(7)
    train = _train_job(device)
    losses = [train(*_data(0)) for _ in range(steps)]  # (one batch: the loss falls)
    return losses, {k: v.numpy() for k, v in flow.get_all_variables().items()}


def test_train_job_eager_equals_lazy_over_three_steps():
    lazy_losses, lazy_vars = _run_train(False)
    eager_losses, eager_vars = _run_train(True)
    assert flow.eager_execution_enabled()
    # the same kernels on the same values: equal up to a few float32 roundings
    np.testing.assert_allclose(eager_losses, lazy_losses, rtol=8 * EPS32, atol=0)
    assert sorted(eager_vars) == sorted(lazy_vars)
    assert any("momentum" in k.lower() for k in eager_vars)  # the optimizer's state, created on first use
    for k in lazy_vars:
        np.testing.assert_allclose(eager_vars[k], lazy_vars[k], rtol=1e-6, atol=1e-7, err_msg=k)
    assert lazy_losses[2] < lazy_losses[0]  # (it trains)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_train_job_eager_equals_lazy_on_a_gpu():
    lazy_losses, lazy_vars = _run_train(False, device="gpu")
    eager_losses, eager_vars = _run_train(True, device="gpu")
    assert default_session().variables.tensors["conv1-weight"].device.type == "cuda"
    # cuDNN's convolution gradients may sum in another order from call to call
    np.testing.assert_allclose(eager_losses, lazy_losses, rtol=1e-5, atol=0)
    assert sorted(eager_vars) == sorted(lazy_vars)
    for k in lazy_vars:
        np.testing.assert_allclose(eager_vars[k], lazy_vars[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_predict_job_eager_equals_lazy_and_variables_persist():
    x, _ = _data(3)
    flow.manual_seed(11)
    lazy = _predict_job()(x)
    lazy_vars = {k: v.numpy() for k, v in flow.get_all_variables().items()}

    flow.clear_default_session()
    flow.enable_eager_execution(True)
    flow.manual_seed(11)
    predict = _predict_job()
    assert flow.get_all_variables() == {}  # nothing exists before the first call
    first = predict(x)
    eager_vars = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    second = predict(x)  # variables are not initialized again
    assert sorted(eager_vars) == sorted(lazy_vars)
    for k in lazy_vars:
        np.testing.assert_array_equal(eager_vars[k], lazy_vars[k], err_msg=k)
    # lazy mode folds the batch norm into the convolution: a few roundings apart
    np.testing.assert_allclose(first, lazy, rtol=0, atol=64 * EPS32)
    np.testing.assert_array_equal(second, first)


def test_blob_numpy_and_watch_inside_the_running_job():
    flow.enable_eager_execution(True)
    seen, order = {}, []

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        y = flow.math.exp(x)
        seen["y"] = y.numpy()  # the value, while the function runs
        seen["y0"] = y.numpy(0)  # OneFlow's rank argument: device 0 holds the whole blob
        with pytest.raises(ValueError, match=r"numpy\(rank=1\).*must be None or 0"):
            y.numpy(1)
        flow.watch(y, lambda v: order.append(("watch", v)))
        order.append(("after watch", None))
        w = flow.get_variable("w", shape=(3,), initializer=flow.constant_initializer(2.0))
        seen["w"] = w.numpy()
        return y * w

    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    out = job(x)
    np.testing.assert_allclose(seen["y"], np.exp(x), rtol=4 * EPS32)
    np.testing.assert_array_equal(seen["y0"], seen["y"])
    np.testing.assert_array_equal(seen["w"], np.full(3, 2.0, np.float32))
    assert [tag for tag, _ in order] == ["watch", "after watch"]  # the handler ran at once
    np.testing.assert_array_equal(order[0][1], seen["y"])
    np.testing.assert_allclose(out, np.exp(x) * 2.0, rtol=4 * EPS32)
    job(x)
    assert len(order) == 4  # once per call


def _sgd_step_job():
    """A train job: loss = sum(w * x) for a variable w (initially ones), plain SGD at lr 0.5."""
    @flow.global_function(type="train")
    def step(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        w = flow.get_variable("w", shape=(3,), initializer=flow.constant_initializer(1.0))
        loss = flow.math.reduce_sum(w * x)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss
    return step


def test_variables_keep_their_values_across_eager_calls():
    flow.enable_eager_execution(True)
    step = _sgd_step_job()
    x = np.array([1.0, 2.0, 3.0], np.float32)
    w = np.ones(3, np.float32)
    for _ in range(3):  # d loss / d w = x: plain SGD, w -= 0.5 x
        np.testing.assert_allclose(step(x), np.sum(w * x), rtol=4 * EPS32)
        w = w - 0.5 * x
        np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), w, rtol=4 * EPS32)


def test_checkpoint_init_before_any_job_and_a_job_defined_anew_on_each_call():
    # OneFlow's eager CheckPoint().init() is a no-op (eager_checkpoint_init), so it may
    # come first; a job function defined again on each call keeps the variables.
    flow.enable_eager_execution(True)
    with pytest.warns(DeprecationWarning):
        ckpt = flow.train.CheckPoint()
    ckpt.init()
    assert flow.get_all_variables() == {}

    def call(x):
        return _sgd_step_job()(x)

    x = np.array([1.0, 2.0, 3.0], np.float32)
    w = np.ones(3, np.float32)
    for _ in range(2):
        np.testing.assert_allclose(call(x), np.sum(w * x), rtol=4 * EPS32)
        w = w - 0.5 * x
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), w, rtol=4 * EPS32)


def test_checkpoint_init_before_any_job_is_refused_in_lazy_mode():
    with pytest.warns(DeprecationWarning):
        ckpt = flow.train.CheckPoint()
    with pytest.raises(RuntimeError, match="no job is defined"):
        ckpt.init()


def test_blob_numpy_in_a_lazy_job_is_refused():
    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        x.numpy()
        return x

    with pytest.raises(Exception, match=r"holds a value only in eager execution"):
        job(np.zeros(2, np.float32))


def test_the_switch_is_set_before_jobs_are_defined_and_outlives_the_session():
    assert flow.eager_execution_enabled() is False
    flow.enable_eager_execution(True)
    assert flow.eager_execution_enabled() is True

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.relu(x)

    np.testing.assert_array_equal(job(np.array([-1.0, 2.0], np.float32)), [0.0, 2.0])
    with pytest.raises(RuntimeError, match=r"flow.enable_eager_execution\(False\) must be called before any "
                                           r"global function is defined.*\['job'\]"):
        flow.enable_eager_execution(False)
    flow.enable_eager_execution(True)  # (no change: accepted)

    flow.clear_default_session()  # the mode is the environment's (OneFlow's EnableEagerEnvironment)
    assert flow.eager_execution_enabled() is True
    flow.enable_eager_execution(False)  # (a new session, no job yet: accepted)

    @flow.global_function(type="predict")
    def lazy_job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.relu(x)

    np.testing.assert_array_equal(lazy_job(np.array([-1.0, 2.0], np.float32)), [0.0, 2.0])
    assert lazy_job.compiled_job.plan is not None  # compiled, as a lazy job is
    with pytest.raises(RuntimeError, match=r"flow.enable_eager_execution\(True\) must be called before"):
        flow.enable_eager_execution(True)


def test_eager_feeds_are_checked_as_in_lazy_mode():
    flow.enable_eager_execution(True)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x

    with pytest.raises(flow.FeedError,
                       match=r"argument 'x': expected shape \(2,\), received \(3,\)"):
        job(np.zeros(3, np.float32))


def test_a_train_step_differentiates_the_forward_values_the_call_saw():
    """The backward of an eager train step uses the call's own random draws: the dropout
    mask read with ``.numpy()`` inside the function gives the SGD update."""
    flow.enable_eager_execution(True)
    flow.manual_seed(3)
    seen = {}

    @flow.global_function(type="train")
    def step(x: tp.Numpy.Placeholder((4, 6)), c: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        w = flow.get_variable("w", shape=(6, 3), initializer=flow.random_normal_initializer())
        seen["w"] = w.numpy()
        d = flow.nn.dropout(flow.matmul(x, w), rate=0.5)
        seen["kept"] = d.numpy() != 0
        loss = flow.math.reduce_sum(d * c)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1.0]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    c = rng.standard_normal((4, 3)).astype(np.float32)
    for _ in range(2):
        loss = step(x, c)
        w, kept = seen["w"].astype(np.float64), seen["kept"]
        assert 0 < kept.sum() < kept.size  # (some dropped, some kept)
        scale = kept * 2.0  # dropout 0.5 keeps with 1 / (1 - 0.5)
        np.testing.assert_allclose(loss, np.sum((x @ w) * scale * c), rtol=1e-5)
        np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), w - x.T @ (scale * c), rtol=1e-5,
                                   atol=1e-6)


def _bernoulli_draws(eager):
    flow.clear_default_session()
    flow.enable_eager_execution(eager)

    @flow.global_function(type="predict")
    def draw(p: tp.Numpy.Placeholder((64,))) -> tp.Numpy:
        return flow.random.bernoulli(p, seed=5)

    p = np.full(64, 0.5, np.float32)
    return [draw(p) for _ in range(3)]


def test_a_seeded_random_op_draws_the_same_numbers_at_every_eager_call():
    """OneFlow's eager mode runs each op as a stateless call (a new kernel): a seeded op
    draws the first numbers of its stream at every call, where a lazy job's kernel goes on
    (OneFlow v0.6.0's test_TestRandomSource expects both, with its literal values)."""
    lazy, eager = _bernoulli_draws(False), _bernoulli_draws(True)
    assert not np.array_equal(lazy[0], lazy[1])
    for e in eager:
        np.testing.assert_array_equal(e, lazy[0])

    def source_draws(eager):
        flow.clear_default_session()
        flow.enable_eager_execution(eager)

        @flow.global_function()
        def job() -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                return (flow.user_op_builder("src").Op("TestRandomSource").Output("out").Attr("seed", 0).Build()
                        .InferAndTryRun().RemoteBlobList()[0])
        return [job(), job()]
    rand_0_4 = [0.5488136, 0.59284467, 0.7151894, 0.8442659, 0.6027634]  # OneFlow's test values
    rand_5_9 = [0.85794574, 0.54488325, 0.84725183, 0.42365485, 0.62356377]
    np.testing.assert_allclose(source_draws(False), [rand_0_4, rand_5_9], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(source_draws(True), [rand_0_4, rand_0_4], rtol=1e-5, atol=1e-5)


def _write_ids(path, ids):
    """Records of an int32 feature ``id`` and a 2x2 PNG ``encoded``, one per id."""
    import io
    from PIL import Image
    from graphfront.ofrecord import OFRecord, bytes_feature, int32_feature, write_records
    png = io.BytesIO()
    Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(png, format="PNG")
    write_records(str(path), [OFRecord(feature={"id": int32_feature(i), "encoded": bytes_feature(png.getvalue())})
                              for i in ids])


def _read_ids(reader, path, batch_size, data_part_num):
    """The ``id`` (OFRecordReader: an int32 feature) or ``class/label``
    (ofrecord_image_classification_reader) of a batch of records at ``path``."""
    if reader == "OFRecordReader":
        rec = flow.data.ofrecord_reader(path, batch_size=batch_size, data_part_num=data_part_num)
        return flow.data.OFRecordRawDecoder(rec, "id", shape=(), dtype=flow.int32)
    return flow.data.ofrecord_image_classification_reader(path, "encoded", "id", batch_size=batch_size,
                                                          data_part_num=data_part_num)[1]


@pytest.mark.parametrize("reader", ["OFRecordReader", "ofrecord_image_classification_reader"])
def test_a_data_reader_goes_on_across_eager_calls(tmp_path, reader):
    """A reader's kernel keeps its place in the files from one eager call to the next, as
    in a lazy job (graphfront's choice: OneFlow's single-client eager mode had no readers)."""
    _write_ids(tmp_path / "part-0", range(6))

    def read(eager):
        flow.clear_default_session()
        flow.enable_eager_execution(eager)

        @flow.global_function(type="predict")
        def job() -> tp.Numpy:
            return _read_ids(reader, str(tmp_path), 2, 1)
        return np.concatenate([job() for _ in range(4)])
    np.testing.assert_array_equal(read(True), read(False))
    np.testing.assert_array_equal(read(True), [0, 1, 2, 3, 4, 5, 0, 1])


@pytest.mark.parametrize("reader", ["OFRecordReader", "ofrecord_image_classification_reader"])
def test_a_data_reader_on_two_devices_reads_each_devices_shards_in_eager_calls(tmp_path, reader):
    """A reader placed on two devices: in an eager call too each device reads its own shard
    (OneFlow's split of ``data_part_num`` over the devices), and the blob is the two
    parts, as the lazy job's two workers give it."""
    for part in range(2):
        _write_ids(tmp_path / f"part-{part}", range(100 * part, 100 * part + 4))

    def read(eager):
        flow.clear_default_session()
        flow.enable_eager_execution(eager)
        flow.config.cpu_device_num(2)
        config = flow.FunctionConfig()
        config.default_logical_view(flow.scope.consistent_view())

        @flow.global_function(type="predict", function_config=config)
        def job() -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0-1"):
                return _read_ids(reader, str(tmp_path), 4, 2)
        return np.stack([job() for _ in range(3)])
    expected = [[0, 1, 100, 101], [2, 3, 102, 103], [0, 1, 100, 101]]
    np.testing.assert_array_equal(read(False), expected)
    np.testing.assert_array_equal(read(True), expected)


def test_watch_diff_and_callback_results_in_eager_calls_equal_lazy():
    def run(eager):
        flow.clear_default_session()
        flow.enable_eager_execution(eager)
        flow.manual_seed(2)
        grads, losses = [], []

        @flow.global_function(type="train", function_config=_config())
        def train(x: tp.Numpy.Placeholder((B, 1, 8, 8)),
                  y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Callback[tp.Numpy]:
            logits = _net(x)
            flow.watch_diff(logits, grads.append)
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.01])).minimize(loss)
            return loss

        for step in range(2):
            train(*_data(step))(losses.append)
        return grads, losses

    (lazy_grads, lazy_losses), (eager_grads, eager_losses) = run(False), run(True)
    assert len(eager_grads) == len(eager_losses) == 2
    np.testing.assert_allclose(eager_losses, lazy_losses, rtol=8 * EPS32)
    for e, l in zip(eager_grads, lazy_grads):
        np.testing.assert_allclose(e, l, rtol=1e-5, atol=1e-7)


def test_an_op_error_in_an_eager_call_names_the_op_and_the_users_line():
    flow.enable_eager_execution(True)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2, 3)), y: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> tp.Numpy:
        return flow.nn.sparse_softmax_cross_entropy_with_logits(y, x)  # the line named

    with pytest.raises(OpRunError, match=r"(?s)expects class ids in \[0, 3\), received 7.*the line named"):
        job(np.zeros((2, 3), np.float32), np.array([0, 7], np.int32))


def _run_train_on_two_devices(eager, view, steps=3):
    flow.clear_default_session()
    flow.enable_eager_execution(eager)
    flow.config.cpu_device_num(2)
    flow.manual_seed(7)
    config = flow.FunctionConfig()
    config.default_placement_scope(flow.scope.placement("cpu", "0:0-1"))
    config.default_logical_view(view)
    grads = []

    @flow.global_function(type="train", function_config=config)
    def train(x: tp.Numpy.Placeholder((B, 1, 8, 8)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        # (batch norm in the mirrored view only: on several devices the lazy consistent job
        # normalizes each device's part of the batch with its own statistics, as OneFlow does,
        # where eager computes the logical blob)
        logits = _net(x, bn=view.kind == "mirrored")
        flow.watch_diff(logits, grads.append)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits, name="xent")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss

    losses = [train(*_data(0)) for _ in range(steps)]
    return losses, grads, {k: v.numpy() for k, v in flow.get_all_variables().items()}


@pytest.mark.parametrize("view", ["consistent", "mirrored"])
def test_eager_execution_on_several_devices_equals_the_lazy_job(view):
    """A train job on two devices. Consistent view: eager computes logical blobs (op by op,
    each on the placement's first device). Mirrored view: eager runs each op once per
    device on that device's half of the batch, sums the devices' gradients as the lazy
    job's all-reduce does and updates once; its batch norm's moving statistics are the first
    device's, as the lazy job keeps them. Both give what the lazy job's two workers give:
    losses (per sample, the devices' halves in order), the logits' gradients and the
    variables."""
    view = getattr(flow.scope, f"{view}_view")()
    lazy_losses, lazy_grads, lazy_vars = _run_train_on_two_devices(False, view)
    eager_losses, eager_grads, eager_vars = _run_train_on_two_devices(True, view)
    assert lazy_losses[2].mean() < lazy_losses[0].mean()
    assert [g.shape for g in eager_grads] == [g.shape for g in lazy_grads] == [(B, 5)] * 3
    # the lazy workers sum the batch's halves and all-reduce them: a few float32 roundings apart
    np.testing.assert_allclose(eager_losses, lazy_losses, rtol=64 * EPS32, atol=0)
    np.testing.assert_allclose(eager_grads, lazy_grads, rtol=1e-5, atol=1e-7)
    assert sorted(eager_vars) == sorted(lazy_vars)
    for k in lazy_vars:
        np.testing.assert_allclose(eager_vars[k], lazy_vars[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_blob_numpy_on_several_devices_is_the_logical_blob():
    """OneFlow's eager ``numpy()`` boxes a consistent blob to device 0: the logical value,
    whichever device count its placement has (``rank`` None or 0)."""
    flow.enable_eager_execution(True)
    flow.config.cpu_device_num(2)
    seen = {}

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            y = flow.math.relu(x)
            seen["y"], seen["y0"] = y.numpy(), y.numpy(0)
            return flow.math.reduce_sum(y, axis=0)

    x = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    out = job(x)
    np.testing.assert_array_equal(seen["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(seen["y0"], np.maximum(x, 0))
    np.testing.assert_array_equal(out, np.maximum(x, 0).sum(axis=0))


@pytest.mark.parametrize("eager", [False, True])
def test_the_mirrored_view_on_two_devices_takes_one_array_per_device(eager):
    """A ListNumpy argument takes one array per device (here of different lengths), each
    device's ops see only its own: a per-device sum, returned (as OneFlow returns a
    mirrored blob) as the devices' parts concatenated along axis 0. An op placed on one
    device that reads a mirrored blob runs on each of its devices, in both modes. Inside
    an eager call ``numpy(rank)`` is device ``rank``'s part."""
    flow.clear_default_session()
    flow.enable_eager_execution(eager)
    flow.config.cpu_device_num(2)
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.mirrored_view())
    seen = {}

    @flow.global_function(type="predict", function_config=config)
    def job(x: tp.ListNumpy.Placeholder((4, 3))) -> tp.Bundle[tp.ListNumpy]:
        with flow.scope.placement("cpu", "0:0-1"):
            y = flow.math.relu(x)
        with flow.scope.placement("cpu", "0:0"):  # (reading a mirrored blob: runs on each of its devices)
            total = flow.math.reduce_sum(y, axis=0, keepdims=True)
            if eager:
                seen.update(parts=[total.numpy(0), total.numpy(1)], whole=total.numpy())
                with pytest.raises(ValueError, match=r"rank must be None or a device index in \[0, 2\) \(a "
                                                     r"mirrored blob on 2 devices\)"):
                    total.numpy(2)
        return total, y

    a, b = np.arange(-6, 6, dtype=np.float32).reshape(4, 3), np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,), (y,) = job([a, b])
    np.testing.assert_array_equal(y, np.maximum(np.concatenate([a, b]), 0))
    sums = [np.maximum(a, 0).sum(0, keepdims=True), np.maximum(b, 0).sum(0, keepdims=True)]
    np.testing.assert_array_equal(out, np.concatenate(sums))
    if eager:
        np.testing.assert_array_equal(seen["parts"][0], sums[0])
        np.testing.assert_array_equal(seen["parts"][1], sums[1])
        np.testing.assert_array_equal(seen["whole"], out)
    with pytest.raises(flow.FeedError, match=r"argument 'x' \(ListNumpy.Placeholder\) expects a list with 2 "
                                             r"ndarray\(s\), one per device, received a list of 1"):
        job([a])


def test_auto_mixed_precision_does_not_apply_in_eager_calls_and_accumulation_is_refused():
    """AMP is a job pass, which OneFlow's eager calls do not run: the eager job computes in
    float32 (with a warning) what the lazy job without AMP computes."""
    def job_with(eager, amp=False, accumulate=1):
        flow.clear_default_session()
        flow.enable_eager_execution(eager)
        cfg = _config()
        cfg.enable_auto_mixed_precision(amp)
        if accumulate > 1:
            cfg.train.num_gradient_accumulation_steps(accumulate)

        @flow.global_function(type="predict", function_config=cfg)
        def predict(x: tp.Numpy.Placeholder((B, 1, 8, 8))) -> tp.Numpy:
            flow.manual_seed(3)
            return flow.nn.softmax(_net(x, bn=False))
        return predict
    x = _data(0)[0]
    lazy = job_with(False)(x)
    with pytest.warns(UserWarning, match=r"job 'predict': FunctionConfig\(\).enable_auto_mixed_precision does not "
                                         r"apply in eager execution"):
        eager = job_with(True, amp=True)(x)
    assert eager.dtype == np.float32
    np.testing.assert_allclose(eager, lazy, rtol=1e-6, atol=1e-7)
    with pytest.raises(flow.JobBuildError, match=r"num_gradient_accumulation_steps is not supported in eager"):
        job_with(True, accumulate=2)(x)
