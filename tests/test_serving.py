"""flow.serving.InferenceSession: serving saved models next to a training session."""
import os
import re
import shutil

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront.testing.files import tree_digest
from graphfront import typing as tp
from graphfront.checkpoint import CheckpointError
from graphfront.framework import session as session_mod
from graphfront.framework.errors import FeedError, JobBuildError
from lenet import lenet  # examples/lenet (on sys.path via conftest)

BATCH = 8


def _cpu_option():
    option = flow.serving.SessionOption()
    option.device_tag = "cpu"
    return option


def _serve(path, **kwargs):
    sess = flow.serving.InferenceSession(_cpu_option())
    sess.load_saved_model(str(path), **kwargs)
    sess.launch()
    return sess


def _lenet_jobs(lbns):
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28)),
                  labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            logits = lenet(images, train=True)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), momentum=0.9).minimize(loss)
        return loss

    @flow.global_function(type="predict")
    def eval_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            logits = lenet(images, train=False)
        lbns.update(image=images.logical_blob_name, logits=logits.logical_blob_name)
        return logits

    return train_job, eval_job


def _save(path, job, lbns, version, inputs=(("image", "image"),), outputs=(("logits", "logits"),)):
    b = flow.saved_model.ModelBuilder(str(path)).ModelName("lenet").Version(version)
    sig = b.AddFunction(job).AddSignature("classify")
    for name, key in inputs:
        sig.Input(name, lbns[key])
    for name, key in outputs:
        sig.Output(name, lbns[key])
    b.Save()


@pytest.fixture
def lenet_model(tmp_path):
    """A LeNet trained 2 steps, saved as version 1; returns (path, jobs, lbns, images)."""
    flow.manual_seed(0)
    rng = np.random.default_rng(0)
    images = rng.random((3, BATCH, 1, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, (2, BATCH)).astype(np.int32)
    lbns = {}
    train_job, eval_job = _lenet_jobs(lbns)
    for x, y in zip(images, labels):
        train_job(x, y)
    _save(tmp_path / "lenet", eval_job, lbns, 1)
    return tmp_path / "lenet", train_job, eval_job, lbns, images


def test_served_outputs_are_bit_identical_to_the_training_process(lenet_model):
    path, train_job, eval_job, lbns, images = lenet_model
    want = [eval_job(x) for x in images]
    sess = _serve(path)
    assert sess.status is flow.serving.InferenceSession.SessionStatus.RUNNING
    assert sess.list_jobs() == ["eval_job"]
    assert sess.list_inputs() == ("image",) and sess.list_outputs() == ("logits",)
    assert sess.input_info("image") == dict(shape=(BATCH, 1, 28, 28), dtype=flow.float32)
    assert sess.output_info("logits", "eval_job") == dict(shape=(BATCH, 10), dtype=flow.float32)
    for x, w in zip(images, want):
        (got,) = sess.run("eval_job", image=x)
        assert got.dtype == w.dtype and got.shape == w.shape
        assert got.tobytes() == w.tobytes()
    # the served job was rebuilt op by op: same op types, interface ops named by the signature
    served = sess.job("eval_job")
    assert [op.name for op in served.job.net.op if op.HasField("input_conf")] == ["image"]
    assert [op.name for op in served.job.net.op if op.HasField("return_conf")] == ["logits"]
    types = lambda job: [op.user_conf.op_type_name for op in job.net.op if op.HasField("user_conf")]  # noqa: E731
    assert types(served.job) == types(eval_job.compiled_job.job)
    sess.close()
    assert sess.status is flow.serving.InferenceSession.SessionStatus.CLOSED


def test_sessions_do_not_share_variables(lenet_model):
    path, train_job, eval_job, lbns, images = lenet_model
    default = session_mod.default_session()
    v1_out = eval_job(images[0])
    labels = np.zeros(BATCH, np.int32)
    train_job(images[2], labels)  # the training session moves on
    _save(path, eval_job, lbns, 2)
    v2_out = eval_job(images[0])
    assert v1_out.tobytes() != v2_out.tobytes()

    s1 = _serve(path, model_version=1)
    s_latest = _serve(path)  # ModelVersionPolicy.LATEST -> 2
    s1b = _serve(path, model_version=1)
    assert session_mod.default_session() is default
    before_training = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    for _ in range(2):
        train_job(images[1], labels)
    assert s1.run("eval_job", image=images[0])[0].tobytes() == v1_out.tobytes()
    assert s_latest.run("eval_job", image=images[0])[0].tobytes() == v2_out.tobytes()
    # changing one inference session's variable leaves the others and the training session alone
    s1.session.variables.assign("conv1-weight", np.zeros((32, 1, 5, 5), np.float32))
    assert s1.run("eval_job", image=images[0])[0].tobytes() != v1_out.tobytes()
    assert s1b.run("eval_job", image=images[0])[0].tobytes() == v1_out.tobytes()
    after = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    assert after["conv1-weight"].any()
    assert after["conv1-weight"].tobytes() != before_training["conv1-weight"].tobytes()  # trained on
    # the served model holds only the predict job's variables (no optimizer state)
    assert sorted(s1.session.variables.names()) == sorted(
        n for n in before_training if not n.endswith("-momentum") and not n.startswith("System-"))
    for s in (s1, s_latest, s1b):
        s.close()


def test_prototxt_fallback_and_version_errors(lenet_model):
    path, train_job, eval_job, lbns, images = lenet_model
    want = eval_job(images[0])
    os.remove(path / "1" / "saved_model.pb")
    sess = _serve(path, model_version=1)
    assert sess.run("eval_job", image=images[0])[0].tobytes() == want.tobytes()
    with pytest.raises(FileNotFoundError, match=r"has no version 7; versions: \[1\]"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(str(path), model_version=7)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(str(path / "nope"))
    os.remove(path / "1" / "saved_model.prototxt")
    with pytest.raises(FileNotFoundError, match="has neither saved_model.pb nor saved_model.prototxt"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(str(path))
    (path / "1" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(ValueError, match=r"saved_model.pb' misses required fields: name, version, checkpoint_dir"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(str(path))
    (path / "1" / "saved_model.pb").write_bytes(b"\x0a\xff\xff")
    with pytest.raises(ValueError, match=r"saved_model.pb' is not a valid binary SavedModel"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(str(path))


# ------------------------------------------------------------------ bad models and feeds

@pytest.fixture
def small_model(tmp_path):
    lbns = {}

    @flow.global_function(type="predict")
    def predict(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.dense(x, 5, activation=flow.nn.relu, name="fc1",
                                  kernel_initializer=flow.random_normal_initializer())
            flow.watch(h, lambda v: None)
            y = flow.layers.dense(h, 2, name="fc2", kernel_initializer=flow.random_normal_initializer())
        lbns.update(x=x.logical_blob_name, h=h.logical_blob_name, y=y.logical_blob_name)
        return y

    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    want = predict(x)
    b = flow.saved_model.ModelBuilder(str(tmp_path / "m")).ModelName("mlp").Version(1)
    b.AddFunction(predict).AddSignature("s").Input("x", lbns["x"]).Output("y", lbns["y"])
    b.Save()
    return tmp_path / "m", x, want, predict, lbns


def _edit_model(path, edit):
    """Rewrite the text model with ``edit(text)`` and drop the binary one."""
    txt = path / "1" / "saved_model.prototxt"
    txt.write_text(edit(txt.read_text()))
    os.remove(path / "1" / "saved_model.pb")


def test_unknown_op_type_names_the_op(small_model):
    path, x, want, *_ = small_model
    _edit_model(path, lambda t: t.replace('op_type_name: "relu"', 'op_type_name: "fancy_relu"'))
    digest = tree_digest(path)
    with pytest.raises(JobBuildError, match=r"saved model .*/1' graph 'predict': op 'fc1-activation' "
                                            r"\(fancy_relu\): unknown op type 'fancy_relu'"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(str(path))
    assert tree_digest(path) == digest


def test_bad_attr_is_checked_again(small_model):
    path, *_ = small_model
    _edit_model(path, lambda t: re.sub(r'(key: "transpose_b"\s*value \{\s*)at_bool: true', r"\1at_int32: 1", t))
    with pytest.raises(JobBuildError, match=r"op 'fc1-matmul' \(matmul\): attr 'transpose_b' expects type bool"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(str(path))


def test_missing_variable_names_it(small_model):
    path, *_ = small_model
    shutil.rmtree(path / "1" / "variables" / "fc2-bias")
    digest = tree_digest(path)
    sess = flow.serving.InferenceSession(_cpu_option())
    sess.load_saved_model(str(path))
    with pytest.raises(CheckpointError, match=r"checkpoint .*/1/variables' lacks variable\(s\) 'fc2-bias' "
                                              r"\(used by job predict\)"):
        sess.launch()
    with pytest.raises(RuntimeError, match=r"run\(\) needs status RUNNING; the session is OPEN"):
        sess.run("predict", x=np.zeros((4, 3), np.float32))
    assert tree_digest(path) == digest


def test_truncated_or_mismatched_variable_names_it(small_model):
    path, *_ = small_model
    with open(path / "1" / "variables" / "fc1-weight" / "out", "r+b") as f:
        f.truncate(8)
    digest = tree_digest(path)
    sess = flow.serving.InferenceSession(_cpu_option())
    sess.load_saved_model(str(path))
    with pytest.raises(CheckpointError, match=r"variable 'fc1-weight': data file .* has 8 bytes, expected 60 bytes"):
        sess.launch()
    assert tree_digest(path) == digest
    shutil.rmtree(path / "1" / "variables" / "fc1-weight")
    flow.checkpoint.save(path / "other", {"fc1-weight": np.zeros((3, 5), np.float32)})
    shutil.move(str(path / "other" / "fc1-weight"), str(path / "1" / "variables" / "fc1-weight"))
    sess = flow.serving.InferenceSession(_cpu_option())
    sess.load_saved_model(str(path))
    with pytest.raises(CheckpointError, match=r"variable 'fc1-weight': the job expects float32 \(5, 3\), the "
                                              r"checkpoint file .* holds float32 \(3, 5\)"):
        sess.launch()


def test_bad_feeds_name_the_input_and_keep_the_session_usable(small_model):
    path, x, want, *_ = small_model
    sess = _serve(path)
    # every bad feed is a FeedError, as a job's call raises (was a bare ValueError for these three)
    with pytest.raises(FeedError, match=r"job 'predict' has no input\(s\) \['images'\]; its inputs are \['x'\]"):
        sess.run("predict", images=x)
    with pytest.raises(FeedError, match=r'input "x" is absent; pass x=ndarray'):
        sess.run("predict")
    with pytest.raises(FeedError, match=r'input "x" must be a numpy.ndarray, received list'):
        sess.run("predict", x=x.tolist())
    with pytest.raises(FeedError, match=r"job 'predict' argument 'x': expected shape \(4, 3\), received \(2, 3\)"):
        sess.run("predict", x=x[:2])
    with pytest.raises(FeedError, match=r"argument 'x': expected dtype float32 \(float32\), received <U"):
        sess.run("predict", x=x.astype(str))
    (cast,) = sess.run("predict", x=x.astype(np.float64))  # (cast to float32, as OneFlow's feed copy)
    assert cast.tobytes() == want.tobytes()
    with pytest.raises(flow.JobBuildError, match=r"no job named 'nope'; jobs: \['predict'\]"):
        sess.run("nope", x=x)
    (got,) = sess.run("predict", x=x)
    assert got.tobytes() == want.tobytes()
    with pytest.raises(ValueError, match=r"has no input 'y'; inputs: \['x'\]"):
        sess.input_info("y")


def test_lifecycle_and_options(small_model, monkeypatch, tmp_path):
    path, x, want, *_ = small_model
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    option = flow.serving.SessionOption()
    assert option.device_tag == "cpu"  # default without CUDA
    option.device_tag = "gpu"
    with pytest.raises(ValueError, match=r"device_tag is 'gpu' but CUDA is not available .* set "
                                         r"option.device_tag = 'cpu'"):
        flow.serving.InferenceSession(option)
    option.device_tag = "tpu"
    with pytest.raises(ValueError, match="device_tag must be 'cpu' or 'gpu', received 'tpu'"):
        flow.serving.InferenceSession(option)
    option = _cpu_option()
    option.device_num = 2
    with pytest.raises(ValueError, match="device_num: graphfront serves on one device"):
        flow.serving.InferenceSession(option)
    sess = flow.serving.InferenceSession(_cpu_option())
    with pytest.raises(ValueError, match="no job is compiled"):
        sess.launch()
    with pytest.raises(RuntimeError, match=r"compile\(\) must be called inside"):
        sess.compile([])
    with pytest.raises(ValueError, match=r"has no graph 'other'; graphs: \['predict'\]"):
        sess.load_saved_model(str(path), graph_name="other")
    with pytest.raises(ValueError, match=r"graph 'predict' .* has no signature 'nope'; signatures: \['s'\]"):
        sess.load_saved_model(str(path), signature_name="nope")
    sess.load_saved_model(str(path))
    with pytest.raises(ValueError, match="a job named 'predict' is already compiled"):
        sess.load_saved_model(str(path))
    with pytest.raises(flow.JobBuildError, match="set_checkpoint_path: argument 'checkpoint_path' expects a str or an "
                                                 "os.PathLike path, received int 7"):
        sess.set_checkpoint_path(7)  # (was os.fspath's TypeError)
    with pytest.raises(flow.JobBuildError, match="load_saved_model: argument 'saved_model_dir' expects a str"):
        flow.serving.InferenceSession(_cpu_option()).load_saved_model(None)
    sess.set_checkpoint_path(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        sess.launch()
    sess.set_checkpoint_path(path / "1" / "variables")
    sess.launch()
    with pytest.raises(RuntimeError, match=r"launch\(\) needs status OPEN; the session is RUNNING"):
        sess.launch()
    assert sess.run("predict", x=x)[0].tobytes() == want.tobytes()
    sess.close()
    sess.close()
    with pytest.raises(RuntimeError, match="the session is CLOSED"):
        sess.run("predict", x=x)
    fresh = flow.serving.InferenceSession(_cpu_option())
    with fresh.open("j"):
        fresh.compile([])
    fresh.launch()  # no variables: no checkpoint needed
    assert fresh.run("j") == []


def test_signature_on_an_intermediate_blob_and_batch_size(small_model):
    path, x, want, predict, lbns = small_model
    b = flow.saved_model.ModelBuilder(str(path)).ModelName("mlp").Version(2)
    b.AddFunction(predict).AddSignature("head").Input("hidden", lbns["h"]).Output("y", lbns["y"])
    b.Save()
    sess = flow.serving.InferenceSession(_cpu_option())
    sess.set_job_batch_size("predict", 2)
    sess.load_saved_model(str(path))
    sess.launch()
    assert sess.input_info("hidden") == dict(shape=(2, 5), dtype=flow.float32)
    # only the ops after the hidden layer are left: fc1 and its variables are pruned
    assert sorted(sess.session.variables.names()) == ["fc2-bias", "fc2-weight"]
    hidden = np.abs(np.random.default_rng(1).standard_normal((2, 5))).astype(np.float32)
    w = flow.checkpoint.get(path / "2" / "variables")
    (y,) = sess.run("predict", hidden=hidden)
    np.testing.assert_allclose(y, hidden @ w["fc2-weight"].numpy().T + w["fc2-bias"].numpy(), rtol=1e-5)


def test_model_without_signature_uses_op_names(small_model):
    path, x, want, predict, lbns = small_model
    b = flow.saved_model.ModelBuilder(str(path)).ModelName("mlp").Version(5)
    b.AddFunction(predict)
    b.Save()
    sess = _serve(path, model_version=5)
    user_job = predict.compiled_job.user_job
    in_name = [op.name for op in user_job.net.op if op.HasField("input_conf")]
    out_name = [op.name for op in user_job.net.op if op.HasField("return_conf")]
    assert list(sess.list_inputs()) == in_name and list(sess.list_outputs()) == out_name
    assert not any(op.HasField("foreign_watch_conf") for op in sess.job().job.net.op)
    (got,) = sess.run("predict", **{in_name[0]: x})
    assert got.tobytes() == want.tobytes()
