"""OneFlow's XRT switches: ``FunctionConfig().use_xla_jit(True)`` and ``use_tensorrt(True)``.

As OneFlow's own xrt tests do, each job with a switch is compared with the same job
without one (the per-op plan on PyTorch's kernels, the reference): the same results, the
same variables after training. The compiled job says which lowering ran
(``compile_mode``, ``provider``) and why it fell back to the plan (``fallback_reason``,
and a UserWarning); the settings that choose two lowerings at once are refused.
"""
import warnings

import numpy as np
import onnxruntime
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import JobBuildError
from graphfront.framework.session import default_session

RTOL, ATOL = 1e-5, 1e-6  # float32 kernels of two implementations, a few ops deep


@pytest.fixture(autouse=True)
def cpu_by_default():
    """Jobs here run on the CPU unless a test places them on a GPU: where CUDA is present
    the default placement (feeds, returns) would otherwise be a GPU."""
    flow.config.gpu_device_num(0)


def _config(**switches):
    cfg = flow.FunctionConfig()
    for name, value in switches.items():
        getattr(cfg, name)(value)
    return cfg


def _block(x, vocab_ids):
    """A small BERT-style block: embedding gather, layer norm, self-attention (transpose,
    batch matmul, softmax), a GELU feed-forward, a classifier."""
    emb = flow.get_variable("emb", (11, 8), initializer=flow.random_normal_initializer(stddev=0.5))
    h = flow.gather(emb, vocab_ids) + x  # (2, 5, 8)
    h = flow.layers.layer_norm(h, begin_norm_axis=-1, begin_params_axis=-1, name="ln0")
    q = flow.reshape(flow.layers.dense(h, 8, name="q"), (2, 5, 2, 4))
    k = flow.reshape(flow.layers.dense(h, 8, name="k"), (2, 5, 2, 4))
    v = flow.reshape(flow.layers.dense(h, 8, name="v"), (2, 5, 2, 4))
    q, k, v = (flow.transpose(t, perm=[0, 2, 1, 3]) for t in (q, k, v))
    scores = flow.nn.softmax(flow.matmul(q, k, transpose_b=True) * 0.5)
    ctx = flow.reshape(flow.transpose(flow.matmul(scores, v), perm=[0, 2, 1, 3]), (2, 5, 8))
    h = flow.layers.layer_norm(h + ctx, begin_norm_axis=-1, begin_params_axis=-1, name="ln1")
    ff = flow.layers.dense(flow.math.gelu(flow.layers.dense(h, 16, name="ff0")), 8, name="ff1")
    return flow.layers.dense(flow.reshape(h + ff, (2, 40)), 3, name="cls")


def _feeds(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((2, 5, 8)).astype(np.float32), rng.integers(0, 11, (2, 5)).astype(np.int32),
            rng.integers(0, 3, (2,)).astype(np.int32))


def _train(config, name="train"):
    def train(x: tp.Numpy.Placeholder((2, 5, 8)), ids: tp.Numpy.Placeholder((2, 5), dtype=flow.int32),
              labels: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _block(x, ids)))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss
    train.__name__ = name
    return flow.global_function(type="train", function_config=config)(train)


def _predict(config, name="predict"):
    def predict(x: tp.Numpy.Placeholder((2, 5, 8)), ids: tp.Numpy.Placeholder((2, 5), dtype=flow.int32)
                ) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.nn.softmax(_block(x, ids))
    predict.__name__ = name
    return flow.global_function(type="predict", function_config=config)(predict)


def _trained(config, steps=3):
    """Losses of ``steps`` train steps from fixed initial values, and the variables after."""
    flow.clear_default_session()
    flow.config.gpu_device_num(0)  # (CPU jobs: see cpu_by_default)
    flow.manual_seed(7)
    job = _train(config)
    losses = [job(*_feeds(i)) for i in range(steps)]
    return losses, {k: v.numpy() for k, v in flow.get_all_variables().items()}, default_session().jobs["train"]


def test_use_xla_jit_trains_as_the_job_without_it():
    want_losses, want_vars, reference = _trained(flow.FunctionConfig())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every op has an xla rule: no fallback warning
        got_losses, got_vars, compiled = _trained(_config(use_xla_jit=True))
    assert reference.compile_mode == "plan"
    assert compiled.compile_mode == "xla" and compiled.fallback_reason is None and compiled.provider is None
    assert compiled.job.job_conf.xrt_config.use_xla_jit  # the setting travels in the Job proto
    np.testing.assert_allclose(got_losses, want_losses, rtol=RTOL, atol=ATOL)
    assert sorted(got_vars) == sorted(want_vars)
    for name in want_vars:
        np.testing.assert_allclose(got_vars[name], want_vars[name], rtol=RTOL, atol=ATOL, err_msg=name)
    assert not np.allclose(got_vars["emb"], _trained(flow.FunctionConfig(), steps=0)[1]["emb"])  # it trained


def test_use_xla_jit_predicts_as_the_job_without_it():
    flow.manual_seed(3)
    plain, xla = _predict(flow.FunctionConfig(), "plain"), _predict(_config(use_xla_jit=True), "xla")
    x, ids, _ = _feeds()
    np.testing.assert_allclose(xla(x, ids), plain(x, ids), rtol=RTOL, atol=ATOL)
    assert default_session().jobs["xla"].compile_mode == "xla"


def test_use_xla_jit_false_leaves_the_plan():
    flow.manual_seed(3)
    job = _predict(_config(use_xla_jit=False), "off")
    job(*_feeds()[:2])
    compiled = default_session().jobs["off"]
    assert compiled.compile_mode == "plan" and compiled.fallback_reason is None
    assert compiled.job.job_conf.HasField("xrt_config") and not compiled.job.job_conf.xrt_config.use_xla_jit


def _expected_provider():
    """The fastest of TensorRT, CUDA and CPU that this onnxruntime offers."""
    available = onnxruntime.get_available_providers()
    return next(p for p in ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
                if p in available)


def test_use_tensorrt_predicts_through_onnxruntime_on_its_fastest_provider():
    flow.manual_seed(3)
    plain, trt = _predict(flow.FunctionConfig(), "plain"), _predict(_config(use_tensorrt=True), "trt")
    x, ids, _ = _feeds()
    provider = _expected_provider()
    with warnings.catch_warnings(record=True) as caught:  # (the first call compiles both jobs)
        warnings.simplefilter("always")
        want, got = plain(x, ids), trt(x, ids)
    compiled = default_session().jobs["trt"]
    assert compiled.compile_mode == "onnxruntime" and compiled.provider == provider
    assert compiled.fallback_reason is None and compiled.job.job_conf.xrt_config.use_tensorrt
    messages = [str(w.message) for w in caught]
    if provider != "TensorrtExecutionProvider":  # said plainly that TensorRT did not run
        assert any(f"use_tensorrt(True) runs onnxruntime on {provider}" in m for m in messages), messages
    tol = dict(rtol=RTOL, atol=ATOL) if provider == "CPUExecutionProvider" else dict(rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(got, want, **tol)


def test_use_tensorrt_on_a_train_job_runs_the_plan_and_says_why():
    want_losses, want_vars, _ = _trained(flow.FunctionConfig())
    with pytest.warns(UserWarning, match=r"job 'train': use_tensorrt\(True\) runs the plan .*predict jobs only.*"
                                         r"TensorRT engine ran inference only"):
        got_losses, got_vars, compiled = _trained(_config(use_tensorrt=True))
    assert compiled.compile_mode == "plan" and "inference only" in compiled.fallback_reason
    np.testing.assert_array_equal(got_losses, want_losses)


def test_use_xla_jit_with_an_op_without_an_xla_rule_runs_the_plan_and_names_the_op():
    @flow.global_function(type="predict", function_config=_config(use_xla_jit=True))
    def unique_job(x: tp.Numpy.Placeholder((6,), dtype=flow.int32)) -> tp.Numpy:
        _, idx, _, _ = flow.experimental.unique_with_counts(x)
        return idx * 2
    x = np.array([3, 1, 3, 2, 1, 5], np.int32)
    with pytest.warns(UserWarning, match=r"job 'unique_job': use_xla_jit\(True\) runs the plan .*"
                                         r"op type\(s\) without an xla rule: unique_with_counts"):
        got = unique_job(x)
    compiled = default_session().jobs["unique_job"]
    assert compiled.compile_mode == "plan" and "unique_with_counts" in compiled.fallback_reason
    np.testing.assert_array_equal(got, np.unique(x, return_inverse=True)[1] * 2)


def test_use_xla_jit_on_two_devices_runs_the_plan_and_says_why():
    flow.config.cpu_device_num(2)

    @flow.global_function(type="predict", function_config=_config(use_xla_jit=True))
    def two(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            return flow.math.tanh(x)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
    with pytest.warns(UserWarning, match=r"use_xla_jit\(True\) runs the plan .*several devices"):
        got = two(x)
    assert default_session().jobs["two"].compile_mode == "plan"
    np.testing.assert_allclose(got, np.tanh(x), rtol=1e-6)


@pytest.mark.parametrize("settings, named", [
    ({"use_xla_jit": True, "use_tensorrt": True}, r"use_xla_jit\(True\) and use_tensorrt\(True\)"),
    ({"compile_mode": "native", "use_xla_jit": True}, r"compile_mode\('native'\) and use_xla_jit\(True\)"),
    ({"compile_mode": "plan", "use_tensorrt": True}, r"compile_mode\('plan'\) and use_tensorrt\(True\)"),
])
def test_two_lowerings_at_once_are_refused_naming_both(settings, named):
    job = _predict(_config(**settings), "both")
    with pytest.raises(JobBuildError, match=rf"job 'both': its FunctionConfig sets {named}, which choose "
                                            r"different lowerings; set only one of them\n  at .*test_xrt.py"):
        job(*_feeds()[:2])


def test_a_switch_takes_a_bool_only():
    with pytest.raises(TypeError, match=r"FunctionConfig.use_xla_jit expects a bool, received 1"):
        flow.FunctionConfig().use_xla_jit(1)
    with pytest.raises(TypeError, match=r"FunctionConfig.use_tensorrt expects a bool, received 'yes'"):
        flow.FunctionConfig().use_tensorrt("yes")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_use_tensorrt_on_a_gpu_placed_job():
    """On a GPU: onnxruntime's GPU provider where installed (the job placed on the GPU
    runs there), else the plan on the GPU with the reason."""
    def predict(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("gpu", "0:0"):
            return flow.math.tanh(flow.layers.dense(x, 5, name="d",
                                                    kernel_initializer=flow.random_normal_initializer()))
    flow.manual_seed(2)
    plain = flow.global_function(type="predict")(predict)
    predict.__name__ = "trt_gpu"
    trt = flow.global_function(type="predict", function_config=_config(use_tensorrt=True))(predict)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    want = plain(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = trt(x)
    compiled = default_session().jobs["trt_gpu"]
    if _expected_provider() == "CPUExecutionProvider":
        assert compiled.compile_mode == "plan" and "GPU" in compiled.fallback_reason
    else:
        assert compiled.compile_mode == "onnxruntime" and compiled.provider == _expected_provider()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_one_config_flipped_between_jobs_gives_each_job_its_own_lowering():
    """OneFlow's xrt tests share one FunctionConfig and flip the switches before each
    decoration: each job keeps the switches it was decorated with."""
    config = flow.FunctionConfig()
    jobs = {}
    for name, xla, trt in (("plain_bn", False, False), ("xla_bn", True, False), ("trt_bn", False, True)):
        config.use_xla_jit(xla)
        config.use_tensorrt(trt)

        def bn(x: tp.Numpy.Placeholder((2, 5, 2, 2))) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                return flow.layers.batch_normalization(x, axis=1, training=False)
        bn.__name__ = name
        jobs[name] = flow.global_function(type="predict", function_config=config)(bn)
    x = np.random.default_rng(0).random((2, 5, 2, 2)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the provider notice)
        results = {name: job(x) for name, job in jobs.items()}
    modes = {name: default_session().jobs[name].compile_mode for name in jobs}
    assert modes == {"plain_bn": "plan", "xla_bn": "xla", "trt_bn": "onnxruntime"}
    # moving mean 0, variance 1, gamma 1, beta 0: x / sqrt(1 + epsilon)
    for name, got in results.items():
        np.testing.assert_allclose(got, x / np.sqrt(1 + 0.001), rtol=RTOL, atol=ATOL, err_msg=name)


def test_use_xla_jit_draws_the_plans_decode_random_batches():
    """decode_random (the examples' data source) runs inside the XLA step: its rule draws
    on the host with the kernel's own generator, so the batches are the plan's."""
    def run(config):
        flow.clear_default_session()
        flow.config.gpu_device_num(0)  # (CPU jobs: see cpu_by_default)
        flow.manual_seed(5)

        @flow.global_function(type="predict", function_config=config)
        def batches() -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                x = flow.data.decode_random((3,), dtype=flow.float, batch_size=2,
                                            initializer=flow.random_uniform_initializer())
                return flow.math.tanh(x)
        got = [batches() for _ in range(3)]
        return got, default_session().jobs["batches"].compile_mode
    want, plan = run(flow.FunctionConfig())
    got, xla = run(_config(use_xla_jit=True))
    assert (plan, xla) == ("plan", "xla")
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert not np.allclose(got[0], got[1])  # a new batch each run


def _amp_trained(config, steps=8):
    """Per step: the loss and the dynamic loss-scaling state (scale, good-step counter,
    train step) of the BERT-style block trained with float16 AMP, AdamW and dynamic loss
    scaling (a scale of 2**18 overflows float16: the first steps are skipped)."""
    flow.clear_default_session()
    flow.config.gpu_device_num(0)  # (CPU jobs: see cpu_by_default)
    flow.manual_seed(7)
    config.enable_auto_mixed_precision(True)
    config.mixed_precision_data_type(flow.float16)

    @flow.global_function(type="train", function_config=config)
    def amp_train(x: tp.Numpy.Placeholder((2, 5, 8)), ids: tp.Numpy.Placeholder((2, 5), dtype=flow.int32),
                  labels: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _block(x, ids)))
            policy = flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=2.0 ** 18, increment_period=2)
            flow.optimizer.AdamW(flow.optimizer.PiecewiseConstantScheduler([], [0.01]), weight_decay=0.01,
                                 loss_scale_policy=policy).minimize(loss)
        return loss
    losses, states = [], []
    for i in range(steps):
        losses.append(amp_train(*_feeds(i)).item())
        states.append({k: v.numpy().item() for k, v in flow.get_all_variables().items() if v.numpy().size == 1})
    return losses, states, default_session().jobs["amp_train"]


def test_use_xla_jit_trains_an_amp_job_with_dynamic_loss_scaling_as_without_it():
    want_losses, want_states, _ = _amp_trained(flow.FunctionConfig())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the loss-scale schedule and assign_if_not have xla rules: no fallback
        got_losses, got_states, compiled = _amp_trained(_config(use_xla_jit=True))
    assert compiled.compile_mode == "xla" and compiled.fallback_reason is None
    assert got_states == want_states  # the same steps skipped, the same scales: exactly
    steps = [s for s in want_states[-1] if s.startswith("System-Train-TrainStep")]
    assert 0 < want_states[-1][steps[0]] < len(want_states)  # some steps were skipped, some taken
    # float16 kernels of two implementations: a few float16 roundings (2**-10) apart per step
    np.testing.assert_allclose(got_losses, want_losses, rtol=16 * 2.0 ** -10)


def test_tensorrt_settings_are_recorded_in_the_job_and_the_job_still_runs_float32(monkeypatch):
    from graphfront.framework import session as session_mod
    monkeypatch.setattr(session_mod, "_WARNED", set())
    flow.manual_seed(3)
    plain = _predict(flow.FunctionConfig(), "plain")
    cfg = _config(use_tensorrt=True)
    with pytest.warns(UserWarning, match=r"tensorrt.use_int8\(True\) is recorded .* runs the job in float32"):
        cfg.tensorrt.use_int8()
    cfg.tensorrt.int8_calibration("/tmp/calibration")
    trt = _predict(cfg, "trt")
    x, ids, _ = _feeds()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, got = plain(x, ids), trt(x, ids)
        with pytest.warns(UserWarning, match="collects no INT8 calibration data"):
            flow.tensorrt.cache_int8_calibration()
        again = trt(x, ids)
    conf = default_session().jobs["trt"].job.job_conf.xrt_config.tensorrt_config
    assert conf.use_int8 and not conf.use_fp16 and conf.int8_calibration == "/tmp/calibration"
    tol = dict(rtol=RTOL, atol=ATOL) if _expected_provider() == "CPUExecutionProvider" else dict(rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(got, want, **tol)
    np.testing.assert_array_equal(again, got)
    with pytest.raises(flow.tensorrt.NoInt8CalibrationError, match="no table to write"):
        flow.tensorrt.write_int8_calibration("/tmp/table")
    with pytest.raises(TypeError, match="tensorrt.use_fp16 expects a bool"):
        cfg.tensorrt.use_fp16(1)
    with pytest.raises(TypeError, match="tensorrt.int8_calibration expects a str"):
        cfg.tensorrt.int8_calibration(3)
