"""compile_mode("xla"): whole jobs lowered to JAX through the ops' ``xla`` rules and
compiled by XLA, checked against the per-op plan (torch kernels, an independent
reference) on the same seeds: losses and every variable after training, predictions,
variables shared with plan-mode jobs and checkpoints, the missing-rule error and the
on-disk compile cache."""
import importlib.util
import os
import subprocess
import sys

import jax  # noqa: F401 - a hard requirement of the `test` extra: its absence fails, never skips
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import JobBuildError
from graphfront.framework.session import default_session
from graphfront.testing.compare import assert_close_at_scale
from lenet import lenet


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("resnet_bn_train_xla", os.path.join(ROOT, "examples", "resnet_bn",
                                                                                   "train.py"))
_resnet_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_resnet_module)
resnet = _resnet_module.resnet

RTOL, ATOL = 1e-5, 1e-6


def _config(mode):
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    return cfg


def _mlp(x):
    h = x
    for i in range(4):
        h = flow.layers.dense(h, 16, activation=flow.nn.relu if i < 3 else None, name=f"fc{i}",
                              kernel_initializer=flow.random_normal_initializer(stddev=0.3))
    return h


def _optimizer(kind, rate=0.1):
    lr = flow.optimizer.PiecewiseConstantScheduler([2], [rate, rate / 2])
    if kind == "sgd":
        return flow.optimizer.SGD(lr, momentum=0)
    if kind == "momentum":
        return flow.optimizer.SGD(lr, momentum=0.9)
    if kind == "warmup_cosine":
        return flow.optimizer.SGD(flow.optimizer.CosineScheduler(rate, 4, warmup=flow.optimizer.warmup.linear(2, 0.1)),
                                  momentum=0.9)
    return flow.optimizer.Adam(lr)


def _train_job(mode, net, shape, n_classes, opt="sgd", rate=0.1, name="train", dtype=flow.float):
    def train(x: tp.Numpy.Placeholder(shape, dtype=dtype),
              labels: tp.Numpy.Placeholder((shape[0],), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, net(x), name="loss")
        _optimizer(opt, rate).minimize(loss)
        return loss
    train.__name__ = name
    return flow.global_function(type="train", function_config=_config(mode))(train)


def _run_train(mode, net, shape, n_classes, opt="sgd", steps=5, rate=0.1, dtype=flow.float):
    flow.clear_default_session()
    flow.manual_seed(0)
    job = _train_job(mode, net, shape, n_classes, opt, rate, dtype=dtype)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        x = rng.standard_normal(shape).astype(np.float32).astype(dtype.np)
        y = rng.integers(0, n_classes, shape[0]).astype(np.int32)
        losses.append(job(x, y))
    variables = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    return losses, variables


def _assert_same_training(got, want):
    for step, (a, b) in enumerate(zip(got[0], want[0])):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"loss of step {step}")
    assert sorted(got[1]) == sorted(want[1])
    for name in want[1]:
        assert got[1][name].dtype == want[1][name].dtype, name
        np.testing.assert_allclose(got[1][name], want[1][name], rtol=RTOL, atol=ATOL, err_msg=name)


# Adam divides each gradient element by its running RMS, so it turns the rounding error of
# an element whose gradient nearly cancels (a relative error up to ~1 in float32) into a
# weight change of order lr: plan and XLA, which sum in different orders, then differ by
# far more than float32's unit roundoff (2.3e-5 seen on fc3-weight). In float64 the same
# cancellation leaves ~2**-29 of that difference (measured: at most 1.5e-14), so the Adam
# comparison runs in float64, where rtol 1e-5 / atol 1e-6 hold with a margin of 1e8; SGD and
# momentum, linear in the gradient, stay in float32.
@pytest.mark.parametrize("opt,dtype", [("sgd", flow.float), ("momentum", flow.float), ("adam", flow.double),
                                       ("warmup_cosine", flow.float)])
def test_mlp_training_matches_the_plan(opt, dtype):
    want = _run_train("plan", _mlp, (8, 12), 16, opt, dtype=dtype)
    got = _run_train("xla", _mlp, (8, 12), 16, opt, dtype=dtype)
    _assert_same_training(got, want)
    assert any(name.endswith(("-momentum", "-m", "-v")) for name in got[1]) == (opt != "sgd")


def test_lenet_training_without_dropout_matches_the_plan():
    want = _run_train("plan", lambda x: lenet(x, train=False), (4, 1, 28, 28), 10, "momentum", steps=3, rate=0.01)
    got = _run_train("xla", lambda x: lenet(x, train=False), (4, 1, 28, 28), 10, "momentum", steps=3, rate=0.01)
    _assert_same_training(got, want)


def test_lenet_nhwc_training_matches_the_plan():
    def net(x):
        return lenet(x, train=False, data_format="NHWC")
    want = _run_train("plan", net, (2, 28, 28, 1), 10, "sgd", steps=2, rate=0.01)
    got = _run_train("xla", net, (2, 28, 28, 1), 10, "sgd", steps=2, rate=0.01)
    _assert_same_training(got, want)


def test_resnet_bn_training_matches_the_plan():
    def net(x):
        return resnet(x, train=True)
    want = _run_train("plan", net, (4, 1, 28, 28), 10, "momentum", steps=3, rate=0.01)
    got = _run_train("xla", net, (4, 1, 28, 28), 10, "momentum", steps=3, rate=0.01)
    _assert_same_training(got, want)
    assert any("moving_mean" in name for name in got[1])


@pytest.mark.parametrize("net_name", ["lenet", "resnet"])
def test_predict_matches_the_plan(net_name):
    net = (lambda x: lenet(x)) if net_name == "lenet" else (lambda x: resnet(x, train=False))
    outs = {}
    for mode in ("plan", "xla"):
        flow.clear_default_session()
        flow.manual_seed(0)

        @flow.global_function(type="predict", function_config=_config(mode))
        def predict(x: tp.Numpy.Placeholder((3, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                return net(x)
        x = np.random.default_rng(2).random((3, 1, 28, 28), dtype=np.float32)
        outs[mode] = (predict(x), predict(x))
    assert_close_at_scale(outs["xla"][0], outs["plan"][0], RTOL)  # (logits: sums of 500 terms)
    np.testing.assert_array_equal(outs["xla"][0], outs["xla"][1])


def test_dropout_draws_a_fresh_mask_each_step():
    @flow.global_function(type="train", function_config=_config("xla"))
    def drop(x: tp.Numpy.Placeholder((64, 64), dtype=flow.float)) -> tp.Numpy:
        w = flow.get_variable("w", shape=(64,), initializer=flow.ones_initializer())
        y = flow.nn.dropout(x * w, rate=0.5)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(
            flow.math.reduce_sum(y))
        return y
    x = np.ones((64, 64), np.float32)
    a, b = drop(x), drop(x)
    assert set(np.unique(a)) == {0.0, 2.0}
    assert 0.4 < (a == 0).mean() < 0.6
    assert not np.array_equal(a, b)


def _mlp_session():
    """An xla train job and a plan-mode eval job over the same variables."""
    flow.manual_seed(0)
    train = _train_job("xla", _mlp, (8, 12), 16, "momentum")

    @flow.global_function(type="predict", function_config=_config("plan"))
    def evaluate(x: tp.Numpy.Placeholder((8, 12), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return _mlp(x)
    return train, evaluate


def _numpy_mlp(variables, x):
    h = x
    for i in range(4):
        h = h @ variables[f"fc{i}-weight"].T + variables[f"fc{i}-bias"]
        h = np.maximum(h, 0) if i < 3 else h
    return h


def test_xla_train_and_plan_eval_share_variables():
    train, evaluate = _mlp_session()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 12)).astype(np.float32)
    y = rng.integers(0, 16, 8).astype(np.int32)
    for _ in range(3):
        train(x, y)
        variables = {k: v.numpy() for k, v in flow.get_all_variables().items()}
        np.testing.assert_allclose(evaluate(x), _numpy_mlp(variables, x), rtol=1e-5, atol=1e-5)
    # a write from outside (load_variables) reaches the next xla step
    zeros = {k: np.zeros_like(v) for k, v in variables.items() if k.startswith("fc")}
    flow.load_variables(zeros)
    loss = train(x, y)
    np.testing.assert_allclose(loss, np.full(8, np.log(16.0), np.float32), rtol=1e-6)


def test_xla_and_plan_train_jobs_alternate_on_the_same_variables():
    """Steps alternating between an xla and a plan-mode train job equal plan-only steps."""
    rng = np.random.default_rng(6)
    batches = [(rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 16, 8).astype(np.int32))
               for _ in range(4)]
    runs = {}
    for modes in (("plan", "plan"), ("xla", "plan")):
        flow.clear_default_session()
        flow.manual_seed(0)
        jobs = [_train_job(mode, _mlp, (8, 12), 16, "adam", name=f"train_{i}") for i, mode in enumerate(modes)]
        losses = [jobs[step % 2](*batches[step]) for step in range(4)]
        kinds = sorted(type(job.plan).__name__ for job in default_session().jobs.values())
        assert kinds == (["Plan", "Plan"] if modes[0] == "plan" else ["Plan", "XlaPlan"])
        runs[modes] = losses, {k: v.numpy() for k, v in flow.get_all_variables().items()}
    _assert_same_training(runs[("xla", "plan")], runs[("plan", "plan")])


def test_checkpoint_round_trip_while_training(tmp_path):
    train, _ = _mlp_session()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 12)).astype(np.float32)
    y = rng.integers(0, 16, 8).astype(np.int32)
    train(x, y)
    flow.checkpoint.save(str(tmp_path / "ckpt"))
    saved = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    after_save = [train(x, y) for _ in range(2)]
    flow.load_variables(flow.checkpoint.get(str(tmp_path / "ckpt")))
    restored = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    for name, value in saved.items():
        np.testing.assert_array_equal(restored[name], value, err_msg=name)
    again = [train(x, y) for _ in range(2)]
    np.testing.assert_allclose(again, after_save, rtol=1e-6)


def test_an_op_without_a_rule_is_named():
    @flow.global_function(type="predict", function_config=_config("xla"))
    def job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        y, idx, _, _ = flow.experimental.unique_with_counts(flow.reshape(x, [6]))
        return flow.math.reduce_sum(flow.cast(flow.argwhere(x), flow.float)) + flow.math.reduce_sum(y)
    with pytest.raises(JobBuildError, match=r"these op types have none: argwhere, sync_dynamic_resize_conf, "
                                            r"unique_with_counts \(use compile_mode"):
        job(np.zeros((2, 3), np.float32))


def test_serving_a_saved_model_with_xla(tmp_path, serve_saved_model):
    flow.manual_seed(0)
    lbns = {}

    @flow.global_function(type="predict")
    def predict(images: tp.Numpy.Placeholder((1, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            prob = flow.nn.softmax(lenet(images))
        lbns.update(image=images.logical_blob_name, prob=prob.logical_blob_name)
        return prob
    img = np.random.default_rng(5).random((1, 1, 28, 28), dtype=np.float32)
    want = predict(img)
    builder = flow.saved_model.ModelBuilder(str(tmp_path / "saved")).ModelName("lenet").Version(1)
    builder.AddFunction(predict).AddSignature("serve").Input("image", lbns["image"]).Output("prob", lbns["prob"])
    builder.Save()
    sess = serve_saved_model(tmp_path / "saved", "xla")
    got = [sess.run(sess.list_jobs()[0], image=img)[0] for _ in range(2)]
    assert type(sess.job().plan).__name__ == "XlaPlan"
    for g in got:
        np.testing.assert_allclose(g, want, rtol=RTOL, atol=ATOL)


def test_missing_jax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # (import jax raises ImportError)

    @flow.global_function(type="predict", function_config=_config("xla"))
    def job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        return flow.math.relu(x)
    with pytest.raises(JobBuildError, match=r"needs jax: pip install graphfront\[xla\]"):
        job(np.zeros((2, 3), np.float32))


def test_compile_mode_rejects_unknown_modes():
    with pytest.raises(ValueError, match="'plan', 'native', 'xla'"):
        flow.FunctionConfig().compile_mode("tvm")
    option = flow.serving.SessionOption()
    option.compile_mode = "tvm"
    with pytest.raises(ValueError, match=r"must be one of \('plan', 'native', 'xla', 'onnxruntime', 'auto'\), received 'tvm'"):
        flow.serving.InferenceSession(option)


_CACHE_SCRIPT = """
import sys, numpy as np
sys.path.insert(0, {lenet_dir!r})
import graphfront as flow
from graphfront import typing as tp
from lenet import lenet
flow.manual_seed(0)
cfg = flow.FunctionConfig()
cfg.compile_mode("xla")
@flow.global_function(type="predict", function_config=cfg)
def predict(x: tp.Numpy.Placeholder((2, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
    return lenet(x)
out = predict(np.zeros((2, 1, 28, 28), np.float32))
from graphfront.framework.session import default_session
plan = default_session().jobs["predict"].plan
print("HITS", plan.cache_hits, plan.digest[:12], float(out.sum()))
"""


def test_second_process_loads_the_compiled_job_from_the_disk_cache(tmp_path):
    script = _CACHE_SCRIPT.format(lenet_dir=os.path.join(ROOT, "examples", "lenet"))
    env = dict(os.environ, GRAPHFRONT_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
            for _ in range(2)]
    lines = []
    for r in runs:
        assert r.returncode == 0, r.stderr
        lines.append(next(ln.split() for ln in r.stdout.splitlines() if ln.startswith("HITS")))
    assert lines[0][1] == "0" and int(lines[1][1]) > 0, lines
    assert lines[0][2:] == lines[1][2:]  # same job digest, same result
    assert os.listdir(tmp_path / "xla")


_CHANGED_JOB_SCRIPT = """
import sys, numpy as np
import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.session import default_session
lr, batch = float(sys.argv[1]), int(sys.argv[2])

def run(mode):
    flow.clear_default_session()
    flow.manual_seed(0)
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)

    @flow.global_function(type="train", function_config=cfg)
    def train(x: tp.Numpy.Placeholder((batch, 12), dtype=flow.float),
              labels: tp.Numpy.Placeholder((batch,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            init = flow.random_normal_initializer(stddev=0.3)
            h = flow.layers.dense(x, 16, activation=flow.nn.relu, name="fc0", kernel_initializer=init)
            logits = flow.layers.dense(h, 5, name="fc1", kernel_initializer=init)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0).minimize(loss)
        return loss
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((batch, 12)).astype(np.float32), rng.integers(0, 5, batch).astype(np.int32)
    losses = np.stack([train(x, y) for _ in range(3)])
    return losses, default_session().jobs["train"].plan

xla, plan = run("xla")
ref, _ = run("plan")
print("RESULT", plan.cache_hits, plan.digest, xla.tobytes().hex(), float(np.abs(xla - ref).max()))
"""


def test_disk_cache_serves_the_same_job_only(tmp_path):
    """Processes sharing a cache directory: the same job is loaded from the cache with
    bit-identical results; a job with another learning rate or another batch size gets
    its own results (checked against the plan, not against the cached job's), and the
    new shape is compiled, not loaded."""
    env = dict(os.environ, GRAPHFRONT_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)

    def run(lr, batch):
        r = subprocess.run([sys.executable, "-c", _CHANGED_JOB_SCRIPT, str(lr), str(batch)], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        hits, digest, losses, diff = next(ln.split()[1:] for ln in r.stdout.splitlines() if ln.startswith("RESULT"))
        assert float(diff) < 1e-5, (lr, batch, diff)  # the job's own results
        return int(hits), digest, losses

    cold, again, other_lr, other_batch = run(0.1, 8), run(0.1, 8), run(0.2, 8), run(0.1, 4)
    assert cold[0] == 0 and again[0] > 0
    assert again[1:] == cold[1:]  # same job digest, bit-identical losses
    assert other_lr[1] != cold[1] and other_lr[2] != cold[2]
    assert other_batch[0] == 0 and other_batch[1] != cold[1]


def _conv_dense_step():
    """A one-step train job of a convolution and a dense layer, on the CPU, compiled by XLA: its plan."""
    flow.clear_default_session()
    cfg = _config("xla")
    cfg.default_placement_scope(flow.scope.placement("cpu", "0:0"))

    @flow.global_function(type="train", function_config=cfg)
    def conv_dense(x: tp.Numpy.Placeholder((2, 1, 6, 6))) -> tp.Numpy:
        h = flow.layers.conv2d(x, 2, 3, name="conv")
        h = flow.layers.dense(flow.reshape(h, (2, -1)), 3, name="fc")
        loss = flow.math.reduce_mean(h * h)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    conv_dense(np.ones((2, 1, 6, 6), np.float32))
    return default_session().jobs["conv_dense"].plan


def _operand_precisions(plan):
    """``{(HLO instruction, operand_precision)}`` of the compiled step's matmuls and convolutions."""
    import re
    text = plan._step.as_text()  # (the compiled executable's HLO: the step ran once)
    found = set(re.findall(r"\b(dot|convolution)\(.*?operand_precision=\{(\w+),\w+\}", text))
    assert {kind for kind, _ in found} == {"dot", "convolution"}, text
    return found


def test_float32_matmuls_and_convolutions_run_in_full_precision():
    """The step's matmuls and convolutions (forward and gradients) carry precision=HIGHEST,
    which XLA on a GPU needs to compute float32 as the plan's torch kernels do (its default
    rounds the operands to TF32); TF32 asked of torch (``enable_tensor_float_32_compute``)
    lowers it to XLA's TF32 setting for jobs lowered afterwards. (XLA:CPU computes float32 in
    full either way: this checks the module it is handed.)"""
    import torch
    from graphfront.runtime.xla import float32_precision
    assert torch.get_float32_matmul_precision() == "highest" and float32_precision() == "float32"
    plan = _conv_dense_step()
    assert plan.precision == "float32"
    assert {p for _, p in _operand_precisions(plan)} == {"highest"}
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        flow.config.enable_tensor_float_32_compute(True)
        plan = _conv_dense_step()
        assert plan.precision == "tensorfloat32"
        assert {p for _, p in _operand_precisions(plan)} == {"high"}
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    assert float32_precision() == "float32"


# ---------------------------------------------------------------- the host data prologue

def _write_text_shards(path, parts=2, per_part=12):
    from graphfront.ofrecord import OFRecord, int32_feature
    from graphfront.ofrecord.records import write_records
    rng = np.random.default_rng(0)
    for i in range(parts):
        records = []
        for _ in range(per_part):
            label = int(rng.integers(0, 2))
            ids = rng.integers(10, 50, 6)
            ids[0] = label  # the label is learnable from the first token
            records.append(OFRecord(feature={"ids": int32_feature(ids), "label": int32_feature([label])}))
        write_records(str(path / f"part-{i}"), records)


def _reader_train_losses(path, config, steps=8):
    flow.clear_default_session()
    flow.manual_seed(0)

    @flow.global_function(type="train", function_config=config)
    def reader_train() -> tp.Numpy:
        rec = flow.data.ofrecord_reader(str(path), batch_size=4, data_part_num=2, random_shuffle=True,
                                        shuffle_buffer_size=6, shuffle_after_epoch=True)
        ids = flow.data.OFRecordRawDecoder(rec, "ids", shape=(6,), dtype=flow.int32)
        label = flow.data.OFRecordRawDecoder(rec, "label", shape=(1,), dtype=flow.int32)
        table = flow.get_variable("emb", shape=(50, 8), initializer=flow.random_normal_initializer(stddev=0.3))
        h = flow.math.reduce_mean(flow.gather(table, ids), axis=1)
        logits = flow.layers.dense(h, 2, name="fc", kernel_initializer=flow.random_normal_initializer(stddev=0.3))
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(label, logits))
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.05])).minimize(loss)
        return loss
    losses = [float(np.asarray(reader_train()).reshape(-1)[0]) for _ in range(steps)]
    return losses, default_session().jobs["reader_train"]


def test_reader_and_decoders_run_before_the_compiled_step(tmp_path):
    # OneFlow's XRT compiled the ops its engine took and ran the data pipeline on its own
    # kernels: the readers and decoders (no xla rule) feed the XLA step, same values as the plan
    _write_text_shards(tmp_path)
    want, planned = _reader_train_losses(tmp_path, _config("plan"))
    got, compiled = _reader_train_losses(tmp_path, _config("xla"))
    assert planned.compile_mode == "plan" and compiled.compile_mode == "xla"
    assert compiled.plan.prologue is not None
    assert sorted(op.user_conf.op_type_name for op in compiled.plan.prologue.order
                  if op.HasField("user_conf")) == ["OFRecordReader", "ofrecord_raw_decoder", "ofrecord_raw_decoder"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert want[-1] < want[0]


def test_use_xla_jit_with_a_reader_compiles_the_rest(tmp_path):
    import warnings
    _write_text_shards(tmp_path)
    cfg = flow.FunctionConfig()
    cfg.use_xla_jit(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "runs the plan" fallback
        _, compiled = _reader_train_losses(tmp_path, cfg, steps=2)
    assert compiled.compile_mode == "xla" and compiled.fallback_reason is None


def test_readers_prefetch_on_threads_once_jax_runs_in_the_process():
    # a forked child of a process running JAX's threads may deadlock (JAX warns on os.fork)
    from graphfront.ofrecord.reader import Prefetcher
    from graphfront.runtime.xla import import_jax
    import_jax()
    pf = Prefetcher(lambda: iter(range(5)), depth=2)
    assert [next(pf) for _ in range(3)] == [0, 1, 2] and type(pf._process).__name__ == "Thread"
    pf.close()
