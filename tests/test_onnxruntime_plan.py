"""``compile_mode("onnxruntime")``: predict jobs run by onnxruntime (graphfront/runtime/onnxruntime_plan.py).

Each result is compared with the per-op plan's (PyTorch kernels) on the same variables:
LeNet and the ResNet-style network of ``examples/resnet_bn`` from job functions and from
saved models served by ``InferenceSession``; a variable written by a train job,
``flow.load_variables`` or ``flow.load`` rebuilds the onnxruntime session before the next
call; train jobs, ops without an ONNX converter and a missing onnxruntime are refused
with errors naming them; ``SessionOption.compile_mode = "auto"`` records its choice.
"""
import importlib.util
import os
import re
import sys

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import FeedError, JobBuildError
from graphfront.runtime.onnxruntime_plan import OrtPlan
from lenet import lenet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("resnet_bn_train", os.path.join(ROOT, "examples", "resnet_bn", "train.py"))
_resnet_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_resnet_module)
resnet = _resnet_module.resnet

TOL = dict(rtol=1e-5, atol=1e-6)
NETS = {"lenet": lambda x: flow.nn.softmax(lenet(x)), "resnet": lambda x: resnet(x, train=False)}


def _config(mode):
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    cfg.default_placement_scope(flow.scope.placement("cpu", "0:0"))  # onnxruntime runs on the CPU
    return cfg


def _predict(net, mode, batch=2, name="predict"):
    def predict(images: tp.Numpy.Placeholder((batch, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return NETS[net](images)
    predict.__name__ = name  # the job's name: two jobs of one session need two
    return flow.global_function(type="predict", function_config=_config(mode))(predict)



def _lenet_train(mode):
    """LeNet's train job (batch 4, SGD lr 0.1) in lowering ``mode``."""
    @flow.global_function(type="train", function_config=_config(mode))
    def train_job(images: tp.Numpy.Placeholder((4, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, lenet(images), name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return train_job

def _perturb_variables(seed):
    """Non-trivial values for every variable (batch-norm statistics included)."""
    rng = np.random.default_rng(seed)
    values = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    flow.load_variables({k: (rng.uniform(0.5, 1.5, v.shape) if "moving_variance" in k else
                             v + rng.uniform(-0.1, 0.1, v.shape)).astype(v.dtype) for k, v in values.items()})


def _images(seed, batch=2):
    return np.random.default_rng(seed).standard_normal((batch, 1, 28, 28)).astype(np.float32)


@pytest.mark.parametrize("net", ["lenet", "resnet"])
def test_job_function_in_onnxruntime_equals_the_plan(net):
    flow.manual_seed(1)
    plan_job = _predict(net, "plan", name="plan_predict")
    ort_job = _predict(net, "onnxruntime", name="ort_predict")
    x = _images(0)
    plan_job(x)  # creates the variables
    _perturb_variables(3)
    want = plan_job(x)
    got = ort_job(x)
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **TOL)
    compiled = ort_job.compiled_job
    assert compiled.compile_mode == "onnxruntime" and isinstance(compiled.plan, OrtPlan)
    assert "Conv" in compiled.plan.source  # the ONNX graph as text
    x2 = _images(1)
    np.testing.assert_allclose(ort_job(x2), plan_job(x2), **TOL)
    assert compiled.plan.builds == 1


def test_variables_written_after_the_build_rebuild_the_session(tmp_path):
    flow.manual_seed(2)
    train_job = _lenet_train("plan")

    plan_job = _predict("lenet", "plan", name="plan_predict")
    ort_job = _predict("lenet", "onnxruntime", name="ort_predict")
    x = _images(5)
    before = ort_job(x)
    plan = ort_job.compiled_job.plan
    assert plan.builds == 1
    flow.checkpoint.save(str(tmp_path / "ckpt"))

    # a train step of the same session updates the variables in place
    train_job(_images(6, 4), np.array([1, 2, 3, 4], np.int32))
    after_train = ort_job(x)
    assert plan.builds == 2
    assert not np.allclose(after_train, before, **TOL)
    np.testing.assert_allclose(after_train, plan_job(x), **TOL)
    ort_job(x)
    assert plan.builds == 2  # nothing written since: no rebuild

    # a second step: the train job is compiled already, its kernels write the bound tensors
    train_job(_images(12, 4), np.array([4, 3, 2, 1], np.int32))
    after_step = ort_job(x)
    assert plan.builds == 3
    np.testing.assert_allclose(after_step, plan_job(x), **TOL)

    # flow.load_variables
    _perturb_variables(7)
    after_load = ort_job(x)
    assert plan.builds == 4
    np.testing.assert_allclose(after_load, plan_job(x), **TOL)

    # a checkpoint load brings the saved values back
    flow.load_variables(flow.load(str(tmp_path / "ckpt")))
    np.testing.assert_allclose(ort_job(x), before, **TOL)
    assert plan.builds == 5



def test_variables_updated_by_an_xla_train_job_reach_the_onnxruntime_job():
    """The XLA job keeps its new variable values as jax arrays until they are read: the
    onnxruntime job's next call must bring them into the tensors and rebuild."""
    flow.manual_seed(3)
    xla_train = _lenet_train("xla")

    ort_job = _predict("lenet", "onnxruntime", name="ort_predict")
    x = _images(8)
    before = ort_job(x)
    ort_job(x)
    plan = ort_job.compiled_job.plan
    assert plan.builds == 1  # nothing written between the calls: no rebuild
    for step in range(2):
        xla_train(_images(9 + step, 4), np.array([1, 2, 3, 4], np.int32))
    after = ort_job(x)
    assert plan.builds == 2
    assert not np.allclose(after, before, **TOL)
    plan_job = _predict("lenet", "plan", name="plan_predict")
    np.testing.assert_allclose(after, plan_job(x), **TOL)

def _save(net, path, batch=1):
    lbns = {}

    @flow.global_function(type="predict")
    def predict(image: tp.Numpy.Placeholder((batch, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            out = NETS[net](image)
        lbns.update(image=image.logical_blob_name, out=out.logical_blob_name)
        return out
    predict(_images(0, batch))
    _perturb_variables(11)
    builder = flow.saved_model.ModelBuilder(str(path)).ModelName(net).Version(1)
    builder.AddFunction(predict).AddSignature("serve").Input("image", lbns["image"]).Output("out", lbns["out"])
    builder.Save()


@pytest.mark.parametrize("net", ["lenet", "resnet"])
def test_saved_model_served_in_onnxruntime_equals_the_plan(net, tmp_path, serve_saved_model):
    flow.manual_seed(4)
    _save(net, tmp_path / net)
    flow.clear_default_session()
    plan_sess, ort_sess, auto_sess = (serve_saved_model(tmp_path / net, m) for m in ("plan", "onnxruntime", "auto"))
    assert plan_sess.compile_mode() == "plan"
    assert ort_sess.compile_mode() == "onnxruntime" and auto_sess.compile_mode() == "onnxruntime"
    assert auto_sess.job().fallback_reason is None
    for seed in (20, 21):
        x = _images(seed, 1)
        (want,) = plan_sess.run("predict", image=x)
        (got,) = ort_sess.run("predict", image=x)
        assert got.dtype == want.dtype and got.shape == want.shape == (1, 10)
        np.testing.assert_allclose(got, want, **TOL)
        np.testing.assert_allclose(auto_sess.run("predict", image=x)[0], want, **TOL)
    # a bad feed takes the checking path: named error, the session stays usable
    with pytest.raises(FeedError, match=r"argument 'image': expected shape \(1, 1, 28, 28\), received \(2, 1, 28, 28\)"):
        ort_sess.run("predict", image=_images(0, 2))
    with pytest.raises(ValueError, match=r"has no input\(s\) \['images'\]"):
        ort_sess.run("predict", image=x, images=x)
    np.testing.assert_allclose(ort_sess.run("predict", image=x)[0], want, **TOL)
    for s in (plan_sess, ort_sess, auto_sess):
        s.close()


def _lgamma_job(mode):
    @flow.global_function(type="predict", function_config=_config(mode))
    def lgamma_job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.math.lgamma(x) + 1.0
    return lgamma_job


def test_train_job_and_op_without_converter_are_refused():
    @flow.global_function(type="train", function_config=_config("onnxruntime"))
    def train(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3), initializer=flow.ones_initializer())
            loss = flow.math.reduce_sum(x * w)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    x = np.ones((2, 3), np.float32)
    with pytest.raises(JobBuildError, match=r"job 'train' cannot use compile_mode\('onnxruntime'\): it is a train "
                                            r"job .*use compile_mode\('plan'\)"):
        train(x)
    with pytest.raises(JobBuildError, match=r"job 'lgamma_job' cannot use compile_mode\('onnxruntime'\): op type\(s\) "
                                            r"without an ONNX converter: lgamma \(op '.*'\)"):
        _lgamma_job("onnxruntime")(x)


def test_auto_falls_back_to_the_plan_and_says_why(tmp_path, serve_saved_model):
    lbns = {}

    @flow.global_function(type="predict")
    def lgamma_job(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            y = flow.math.lgamma(x)
        lbns.update(x=x.logical_blob_name, y=y.logical_blob_name)
        return y
    x = np.full((2, 3), 4.0, np.float32)
    lgamma_job(x)
    builder = flow.saved_model.ModelBuilder(str(tmp_path / "m")).ModelName("lgamma_job").Version(1)
    builder.AddFunction(lgamma_job).AddSignature("s").Input("x", lbns["x"]).Output("y", lbns["y"])
    builder.Save()
    sess = serve_saved_model(tmp_path / "m", "auto")
    assert sess.compile_mode() == "plan"
    assert "lgamma" in sess.job().fallback_reason
    np.testing.assert_allclose(sess.run("lgamma_job", x=x)[0], np.full((2, 3), np.log(6.0), np.float32), rtol=1e-6)  # lgamma(4) = log(3!)
    sess.close()
    with pytest.raises(ValueError, match=r"SessionOption.compile_mode must be one of .*'onnxruntime'.*'auto'.*"
                                         r"received 'ort'"):
        option = flow.serving.SessionOption()
        option.compile_mode = "ort"
        flow.serving.InferenceSession(option)


def test_auto_falls_back_for_system_ops_and_attrs_a_converter_refuses():
    """"auto" runs the plan, never raises, for a system op without an ONNX form
    (``constant_like_conf``) and for an op whose converter refuses its attrs (an NHWC batch
    norm: ONNX's is NCHW); "onnxruntime" refuses both, naming them."""
    x = np.random.default_rng(3).standard_normal((4, 3, 2, 2)).astype(np.float32)

    def jobs(mode):
        flow.clear_default_session()

        @flow.global_function(type="predict", function_config=_config(mode))
        def ones_like(a: tp.Numpy.Placeholder(x.shape, dtype=flow.float)) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                return flow.ones_like(a) + a

        @flow.global_function(type="predict", function_config=_config(mode))
        def nhwc_norm(a: tp.Numpy.Placeholder(x.shape, dtype=flow.float)) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                return flow.layers.batch_normalization(a, axis=3, name="bn")
        return ones_like, nhwc_norm

    ones_like, nhwc_norm = jobs("auto")
    np.testing.assert_array_equal(ones_like(x), x + 1)
    # the initial moving statistics (mean 0, variance 1) and OneFlow's default epsilon 0.001
    np.testing.assert_allclose(nhwc_norm(x), x / np.sqrt(1.001), rtol=1e-6)
    whys = (r"constant_like_conf \(op '.*'\)", "only axis=1")
    for job, why in zip((ones_like, nhwc_norm), whys):
        assert job.compiled_job.compile_mode == "plan" and re.search(why, job.compiled_job.fallback_reason)
    for job, why in zip(jobs("onnxruntime"), whys):
        with pytest.raises(JobBuildError, match=r"cannot use compile_mode\('onnxruntime'\): .*" + why):
            job(x)


def test_auto_falls_back_where_onnxruntime_has_no_kernel_for_an_op(monkeypatch):
    """A converted job onnxruntime cannot load (it has no kernel for an op's types, as
    onnxruntime 1.32's ``Unique`` for int32): "auto" runs the plan, and "onnxruntime" raises
    JobBuildError quoting onnxruntime, at the first call."""
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
    import graphfront.runtime.onnxruntime_plan as ort_plan

    def no_kernel(model, providers):
        raise OrtNotImplemented("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
                                "Relu(14) node")
    monkeypatch.setattr(ort_plan, "inference_session", no_kernel)
    x = np.array([[-1.0, 2.0]], np.float32)

    def job(mode):
        flow.clear_default_session()

        @flow.global_function(type="predict", function_config=_config(mode))
        def relu(a: tp.Numpy.Placeholder(x.shape, dtype=flow.float)) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                return flow.math.relu(a)
        return relu

    auto = job("auto")
    np.testing.assert_array_equal(auto(x), [[0.0, 2.0]])
    assert auto.compiled_job.compile_mode == "plan"
    assert "onnxruntime cannot load the converted job (NotImplemented" in auto.compiled_job.fallback_reason
    with pytest.raises(JobBuildError, match=r"cannot use compile_mode\('onnxruntime'\): onnxruntime cannot load "
                                            r"the converted job \(NotImplemented: .*Relu"):
        job("onnxruntime")(x)


def test_missing_onnxruntime_names_the_pip_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    job = _predict("lenet", "onnxruntime")
    with pytest.raises(JobBuildError, match=r"needs the packages onnx and onnxruntime .*pip install graphfront\[onnx\]"):
        job(_images(0))


def test_watch_ops_are_refused():
    seen = []

    @flow.global_function(type="predict", function_config=_config("onnxruntime"))
    def watched(x: tp.Numpy.Placeholder((2, 3), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            y = flow.math.relu(x)
            flow.watch(y, seen.append)
            return y
    with pytest.raises(JobBuildError, match=r"job 'watched' cannot use compile_mode\('onnxruntime'\): flow.watch "
                                            r"op\(s\) \['.*'\] have no ONNX form"):
        watched(np.ones((2, 3), np.float32))


def test_a_value_onnxruntime_refuses_at_run_time_is_the_ops_error_and_the_session_goes_on():
    # onnxruntime's bare RuntimeError ("Integer division by zero") before
    config = flow.FunctionConfig()
    config.compile_mode("onnxruntime")

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((3,), dtype=flow.int32), y: tp.Numpy.Placeholder((3,), dtype=flow.int32)) \
            -> tp.Numpy:
        return flow.math.divide(x, y, name="quotient")

    x = np.array([7, -7, 9], np.int32)
    with pytest.raises(flow.OpRunError, match=r"op 'quotient' \(onnxruntime lowering\): .*[Dd]ivision by zero"):
        job(x, np.array([2, 0, 4], np.int32))
    np.testing.assert_array_equal(job(x, np.array([2, 3, 4], np.int32)), [3, -2, 2])
