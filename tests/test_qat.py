"""Quantization-aware training: FunctionConfig.enable_qat(True) and config.qat.* make the
qat pass insert OneFlow's observers and fake_quantization ops on the inputs and outputs of
the int8 ops (matmul, conv2d, ...); the quantized forward equals a numpy fake-quantization
reference, and training still reduces the loss (straight-through gradient)."""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp


def fake_quant_symmetric(x, scale, bit=8):
    upper = 2.0 ** (bit - 1) - 1
    return (np.clip(np.round(x / scale), -upper - 1, upper) * scale).astype(x.dtype)


def fake_quant_affine(x, scale, zero_point, bit=8):
    z = np.float32(np.uint8(np.round(zero_point)))
    return ((np.clip(np.round(x / scale + z), 0, 2.0 ** bit - 1) - z) * scale).astype(x.dtype)


def _config(symmetric=True, per_channel=False):
    config = flow.FunctionConfig()
    config.enable_qat(True)
    config.qat.symmetric(symmetric)
    config.qat.per_channel_weight_quantization(per_channel)
    config.qat.moving_min_max_momentum(0.95)
    config.qat.moving_min_max_stop_update_after_iters(10)
    config.qat.target_backend("")
    return config


def _job(config, lr=0.0):
    @flow.global_function(type="train", function_config=config)
    def train(x: tp.Numpy.Placeholder((4, 3)), t: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), initializer=flow.random_uniform_initializer(-1, 1))
        y = flow.matmul(x, w)
        loss = flow.math.reduce_mean(flow.math.square(y - t))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr])).minimize(loss)
        return y
    return train


X = np.random.default_rng(0).uniform(-2, 3, (4, 3)).astype(np.float32)
T = np.random.default_rng(1).uniform(-1, 1, (4, 2)).astype(np.float32)
W = np.random.default_rng(2).uniform(-1, 1, (3, 2)).astype(np.float32)


def sym_first_step(x):
    """``x`` fake-quantized symmetric per layer as on the first step of a moving-average
    observer (its moving max is then the batch's max |x|)."""
    return fake_quant_symmetric(x, np.abs(x).max() / np.float32(127))


def _first_forward(config):
    job = _job(config)
    flow.load_variables({"w": W})
    return job, job(X, T)


def test_symmetric_per_layer_forward_matches_numpy_fake_quantization():
    job, y = _first_forward(_config(symmetric=True))
    xq = sym_first_step(X)  # first step: moving max = max|x|
    wq = fake_quant_symmetric(W, np.abs(W).max() / np.float32(127))
    np.testing.assert_allclose(y, sym_first_step(xq @ wq), rtol=1e-6, atol=1e-6)  # the matmul's output too
    assert np.abs(y - X @ W).max() > 1e-4  # the quantization is visible
    types = [op.user_conf.op_type_name for op in job.graph.proto.net.op if op.HasField("user_conf")]
    assert {"min_max_observer", "moving_average_min_max_observer", "fake_quantization"} <= set(types)
    names = {op.name for op in job.graph.proto.net.op}
    x_input = next(op.name for op in job.graph.proto.net.op  # the input op of x (4, 3); t is (4, 2)
                   if op.HasField("input_conf") and list(op.input_conf.blob_conf.shape.dim) == [4, 3])
    # OneFlow's names (quantization_aware_training.cpp): observers, fake quantizations, moving variables
    assert {f"{x_input}-out-fake-quant-observer-fake-quant-moving-max",
            f"{x_input}-out-fake-quant-observer-fake-quant-moving-min",
            "w-out-fake-quant-observer", "w-out-fake-quant"} <= names


def test_affine_per_channel_forward_matches_numpy_fake_quantization():
    _, y = _first_forward(_config(symmetric=False, per_channel=True))
    s_x = (X.max() - X.min()) / np.float32(255)
    xq = fake_quant_affine(X, s_x, -X.min() / s_x)
    wq = np.stack([fake_quant_affine(row, s, -np.round(row.min() / s))
                   for row, s in ((r, (r.max() - r.min()) / np.float32(255)) for r in W)])
    yq = xq @ wq
    s_y = (yq.max() - yq.min()) / np.float32(255)
    np.testing.assert_allclose(y, fake_quant_affine(yq, s_y, -yq.min() / s_y), rtol=1e-5, atol=1e-5)


def test_moving_min_max_follows_the_momentum_until_stop_update_after_iters():
    config = _config(symmetric=True)
    config.qat.moving_min_max_stop_update_after_iters(1)  # steps 0 and 1 update
    job = _job(config)
    flow.load_variables({"w": W})
    x_input = next(op.name for op in job.graph.proto.net.op
                   if op.HasField("input_conf") and list(op.input_conf.blob_conf.shape.dim) == [4, 3])
    scales = []
    expected = 0.0
    for step in range(4):
        x = X * (step + 1)
        job(x, T)
        moving = [v.numpy()[0] for k, v in flow.get_all_variables().items()
                  if k.startswith(x_input) and k.endswith("fake-quant-moving-max")]
        if step <= 1:
            absmax = np.abs(x).max()
            expected = absmax if expected == 0 else expected * np.float32(0.95) + absmax * np.float32(0.05)
        scales.append((moving[0], expected))
    for got, want in scales:
        assert got == pytest.approx(want, rel=1e-6)


def test_qat_training_still_reduces_the_loss():
    config = _config(symmetric=True)

    @flow.global_function(type="train", function_config=config)
    def train(x: tp.Numpy.Placeholder((4, 3)), t: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), initializer=flow.random_uniform_initializer(-1, 1))
        loss = flow.math.reduce_mean(flow.math.square(flow.matmul(x, w) - t))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.05])).minimize(loss)
        return loss

    flow.load_variables({"w": W})
    target = X @ np.array([[0.5, -0.25], [0.1, 0.3], [-0.4, 0.2]], np.float32)
    losses = [train(X, target).item() for _ in range(30)]
    assert losses[-1] < 0.2 * losses[0]


def test_qat_settings_are_checked():
    config = flow.FunctionConfig()
    with pytest.raises(TypeError, match="symmetric"):
        config.qat.symmetric("yes")
    with pytest.raises(ValueError, match="target_backend expects one of .*'cambricon'.*received 'tpu'"):
        config.qat.target_backend("tpu")
    with pytest.raises(TypeError, match="enable_qat"):
        config.enable_qat(1)
    config.qat.target_backend("cambricon")
    config.qat.per_channel_weight_quantization(True)
    config.enable_qat(True)
    job = _job(config)
    with pytest.raises(flow.JobBuildError, match="per_channel_weight_quantization"):
        job(X, T)


def test_ops_built_with_quantization_aware_training_false_keep_float_inputs():
    """OneFlow skips a consumer whose scope sets quantization_aware_training=False: the
    second matmul's weight stays float and its output is not quantized; its input is the
    first matmul's output, which that (enabled) matmul quantizes."""
    flow.clear_default_session()

    @flow.global_function(type="train", function_config=_config(symmetric=True))
    def train(x: tp.Numpy.Placeholder((4, 3)), t: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), initializer=flow.random_uniform_initializer(-1, 1))
        v = flow.get_variable("v", (2, 2), initializer=flow.random_uniform_initializer(-1, 1))
        y = flow.matmul(x, w, name="quantized")
        with flow.experimental.scope.config(quantization_aware_training=False):
            z = flow.matmul(y, v, name="float")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0])).minimize(
            flow.math.reduce_mean(flow.math.square(z - t)))
        return z

    V = np.random.default_rng(3).uniform(-1, 1, (2, 2)).astype(np.float32)
    flow.load_variables({"w": W, "v": V})
    z = train(X, T)
    yq = sym_first_step(sym_first_step(X) @ fake_quant_symmetric(W, np.abs(W).max() / np.float32(127)))
    np.testing.assert_allclose(z, yq @ V, rtol=1e-5, atol=1e-6)
    ops = {op.name: op for op in train.graph.proto.net.op}
    assert ops["quantized"].user_conf.input["b"].s[0] == "w-out-fake-quant/out_0"
    assert list(ops["float"].user_conf.input["a"].s) == ["quantized-out_0-fake-quant/out_0"]
    assert list(ops["float"].user_conf.input["b"].s) == ["v/out"]
    assert not any(n.startswith(("v-out-fake-quant", "float-out_0-fake-quant")) for n in ops)


def test_flow_quantization_functions_match_numpy():
    """flow.quantization.min_max_observer / fake_quantization (OneFlow's quantize_ops.py API)
    build the observer and fake-quantization ops: per layer and per channel, symmetric and
    affine, against numpy's min / max formulas."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 5, (3, 4, 2)).astype(np.float32)
    for scheme, per_layer in (("symmetric", True), ("affine", True), ("symmetric", False), ("affine", False)):
        flow.clear_default_session()

        @flow.global_function(type="predict")
        def job(x_: tp.Numpy.Placeholder((3, 4, 2))) -> tp.Numpy:
            scale, zero_point = flow.quantization.min_max_observer(
                x_, quantization_scheme=scheme, per_layer_quantization=per_layer)
            return flow.quantization.fake_quantization(x_, scale, zero_point, quantization_scheme=scheme)

        flat = x.reshape(1, -1) if per_layer else x.reshape(3, -1)
        lo, hi = flat.min(axis=1), flat.max(axis=1)
        bcast = (-1, 1, 1)
        if scheme == "symmetric":
            scale = np.maximum(np.abs(lo), np.abs(hi)) / 127.0
            want = fake_quant_symmetric(x, scale.reshape(bcast))
        else:
            scale = (hi - lo) / 255.0
            want = fake_quant_affine(x, scale.reshape(bcast), (-np.round(lo / scale)).reshape(bcast))
        # one grid step of rounding may differ where x / scale lands on a .5 tie in float32
        np.testing.assert_allclose(job(x), want, rtol=0, atol=float(scale.max()) * 1e-5)


def test_flow_quantization_moving_average_observer_updates_its_variables_in_train_jobs():
    """moving_average_min_max_observer creates <name>-moving_max / -moving_min /
    -current_train_step; a train job sets them from the first batch (symmetric: max|x|),
    a predict job only reads them."""
    x = np.array([[-6.0, 2.0], [1.0, 3.0]], np.float32)

    @flow.global_function(type="train")
    def train(x_: tp.Numpy.Placeholder((2, 2))) -> tp.Numpy:
        w = flow.get_variable("w", (2, 2), initializer=flow.ones_initializer())
        y = x_ * w
        scale, _ = flow.quantization.moving_average_min_max_observer(y, name="obs")
        loss = flow.math.reduce_mean(flow.quantization.fake_quantization(y, scale, _))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0])).minimize(loss)
        return scale

    np.testing.assert_allclose(train(x), [6.0 / 127.0], rtol=1e-6)
    variables = flow.get_all_variables()
    assert variables["obs-moving_max"].numpy().tolist() == [6.0]
    assert variables["obs-moving_min"].numpy().tolist() == [6.0]
    assert variables["obs-current_train_step"].numpy().dtype == np.int64


def test_flow_quantization_refuses_cambricon_per_channel_and_non_blobs():
    @flow.global_function(type="predict")
    def job(x_: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.quantization.min_max_observer(x_, quantization_formula="cambricon",
                                                  per_layer_quantization=False)[0]

    with pytest.raises(NotImplementedError, match="cambricon"):
        job(np.zeros((2, 3), np.float32))
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def job2(x_: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.quantization.fake_quantization(x_, 0.1, 0.0)

    with pytest.raises(TypeError, match="fake_quantization: argument 'scale' expects a blob"):
        job2(np.zeros((2, 3), np.float32))


def test_tensorrt_target_backends_use_the_google_formula():
    """qat.target_backend("tensorrt7") / ("tensorrt") (OneFlow's QAT-to-TensorRT setting, as
    oneflow_onnx's QAT LeNet uses) quantize with Google's formula: the forward equals the
    numpy symmetric per-layer reference, as with target_backend("")."""
    want = sym_first_step(sym_first_step(X) @ fake_quant_symmetric(W, np.abs(W).max() / np.float32(127)))
    for backend in ("tensorrt7", "tensorrt"):
        flow.clear_default_session()
        config = _config()
        config.qat.target_backend(backend)
        _, y = _first_forward(config)
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def _small_lenet(x, train_mode=True):
    """conv2d (bias, relu) -> 2x2 max pool -> reshape (unnamed: an auto-numbered op) -> dense."""
    conv = flow.layers.conv2d(x, 4, 3, padding="SAME", activation=flow.nn.relu, name="conv1",
                              kernel_initializer=flow.random_uniform_initializer(-0.5, 0.5),
                              bias_initializer=flow.constant_initializer(0.001))
    pool = flow.nn.max_pool2d(conv, ksize=2, strides=2, padding="VALID", name="pool1")
    flat = flow.reshape(pool, (pool.shape[0], -1))
    return flow.layers.dense(flat, 3, name="fc", kernel_initializer=flow.random_uniform_initializer(-0.5, 0.5),
                             bias_initializer=flow.constant_initializer(0.25))


IMAGES = np.random.default_rng(4).uniform(-1, 1, (2, 1, 6, 6)).astype(np.float32)


def _lenet_train_job():
    @flow.global_function(type="train", function_config=_config(symmetric=True))
    def train(x: tp.Numpy.Placeholder((2, 1, 6, 6))) -> tp.Numpy:
        y = _small_lenet(x)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0])).minimize(flow.math.reduce_mean(y))
        return y
    return train


def test_conv_chain_pooling_and_reshape_are_quantized_as_oneflow_does():
    """OneFlow's choice (quantization_aware_training.cpp): the conv's input and weight; its
    bias_add -> relu chain computed before quantizing the relu's output; the bias on the
    scale input scale x weight scale with a zero zero-point variable; the max pool's output;
    the reshape passing the pool's scale on (no second quantization); the dense matmul's
    weight and output; the dense bias and the returned blob float. The forward equals
    numpy's fake quantization of each of those blobs."""
    train = _lenet_train_job()
    y = train(IMAGES)
    job = train.graph.proto
    ops = {op.name: op for op in job.net.op}
    x_input = next(op.name for op in job.net.op if op.HasField("input_conf"))
    relu = next(op.name for op in job.net.op if op.HasField("user_conf") and op.user_conf.op_type_name == "relu")
    fakes = {name for name, op in ops.items()
             if op.HasField("user_conf") and op.user_conf.op_type_name == "fake_quantization"}
    assert fakes == {f"{x_input}-out-fake-quant", "conv1-weight-out-fake-quant", "conv1-bias-out-fake-quant",
                     f"{relu}-y_0-fake-quant", "pool1-y_0-fake-quant", "fc-weight-out-fake-quant",
                     "fc-matmul-out_0-fake-quant"}
    mul = ops["conv1-bias-out-fake-quant-mul-bias"].user_conf
    assert (mul.op_type_name, mul.input["x"].s[0], mul.input["y"].s[0]) == (
        "broadcast_mul", f"{x_input}-out-fake-quant-observer/scale_0", "conv1-weight-out-fake-quant-observer/scale_0")
    assert ops["conv1-bias-out-fake-quant"].user_conf.input["zero_point"].s[0] == "conv1-bias-out-fake-quant-zp/out"

    import torch
    variables = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    s_x = np.abs(IMAGES).max() / np.float32(127)
    w1 = variables["conv1-weight"]
    s_w = np.abs(w1).max() / np.float32(127)
    conv = torch.nn.functional.conv2d(torch.from_numpy(sym_first_step(IMAGES)),
                                      torch.from_numpy(fake_quant_symmetric(w1, s_w)), padding=1).numpy()
    bias = fake_quant_symmetric(variables["conv1-bias"], s_x * s_w)  # (0.001 on a grid of s_x * s_w)
    act = sym_first_step(np.maximum(conv + bias.reshape(1, -1, 1, 1), 0))
    pool = sym_first_step(act.reshape(2, 4, 3, 2, 3, 2).max(axis=(3, 5)))
    w2 = variables["fc-weight"]
    logits = sym_first_step(pool.reshape(2, -1) @ fake_quant_symmetric(w2, np.abs(w2).max() / np.float32(127)).T)
    np.testing.assert_allclose(y, logits + variables["fc-bias"], rtol=1e-5, atol=1e-6)


def qat_lenet_process(phase, directory):
    """One process of OneFlow's QAT-then-export workflow (run by the test below in a fresh
    interpreter, as the training and the export are separate programs): ``"train"`` trains
    three steps and saves the checkpoint and the last forward; ``"predict"`` builds the
    predict job (after an unnamed reshape of its own, which shifts the auto-numbered
    reshape's name), loads the checkpoint and saves its forward of the last batch and the
    names of its observer variables the checkpoint lacked."""
    import json
    import os
    import warnings
    flow.config.gpu_device_num(0)  # both processes on the CPU, as the suite's other jobs (tests/conftest.py)
    if phase == "train":
        train = _lenet_train_job()
        for step in range(3):
            y = train(IMAGES * (1.0 + step))
        flow.checkpoint.save(os.path.join(directory, "qat"))
        np.save(os.path.join(directory, "train.npy"), y)
        return

    @flow.global_function(type="predict", function_config=_config(symmetric=True))
    def predict(x: tp.Numpy.Placeholder((2, 1, 6, 6))) -> tp.Numpy:
        flow.reshape(x, (2, -1))
        return _small_lenet(x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flow.load_variables(flow.checkpoint.get(os.path.join(directory, "qat")))
    np.save(os.path.join(directory, "predict.npy"), predict(IMAGES * 3.0))
    observers = sorted(k for k in flow.get_all_variables() if "fake-quant" in k)
    with open(os.path.join(directory, "predict.json"), "w") as f:
        json.dump({"observers": observers, "warnings": [str(w.message) for w in caught]}, f)


@pytest.mark.slow  # two fresh interpreters
def test_qat_checkpoint_serves_a_predict_job_of_another_process(tmp_path):
    """The observers' variables are named after the blobs OneFlow names them after (not
    after an auto-numbered reshape): the predict job finds every one in the training job's
    checkpoint and reproduces the training forward of the last batch."""
    import json
    import os
    import subprocess
    import sys
    for phase in ("train", "predict"):
        code = (f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_qat; "
                f"test_qat.qat_lenet_process({phase!r}, {str(tmp_path)!r})")
        subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    report = json.loads((tmp_path / "predict.json").read_text())
    assert report["observers"] and report["warnings"] == []
    np.testing.assert_allclose(np.load(tmp_path / "predict.npy"), np.load(tmp_path / "train.npy"), rtol=1e-6, atol=1e-6)
