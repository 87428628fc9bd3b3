"""The lazy pipeline: global_function, Session lifecycle, user_op_builder, BlobDesc, Job contents."""
import copy
import typing

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.passes import complete

DEFAULT_TAG = "cpu"  # a job's default placement in this suite, also where CUDA is (tests/conftest.py)


def test_user_op_builder_fluent_api_builds_a_completed_op_conf():
    captured = {}

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        op = (flow.user_op_builder("my_relu").Op("relu").Input("x", [x]).Output("y").Build())
        y = op.InferAndTryRun().RemoteBlobList()[0]
        captured["conf"] = op.op_conf
        captured["blob"] = y
        b = flow.get_variable("b", (3,), initializer=flow.zeros_initializer())
        z = flow.user_op_builder("ba").Op("bias_add").Input("a", [y]).Input("b", [b]).Output("out") \
            .Attr("axis", 1).Build().InferAndTryRun().SoleOutputBlob()
        return z

    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(job(x), np.maximum(x, 0))
    conf = captured["conf"]
    assert conf.user_conf.op_type_name == "relu"
    (x_lbn,) = conf.user_conf.input["x"].s
    assert x_lbn.startswith("Input_") and x_lbn.endswith("/out")
    assert list(conf.user_conf.output["y"].s) == ["my_relu/y_0"]
    assert list(conf.user_conf.input_order) == ["x"] and list(conf.user_conf.output_order) == ["y"]
    blob = captured["blob"]
    assert blob.lbn == blob.logical_blob_name == "my_relu/y_0"
    assert (blob.op_name, blob.blob_name, blob.shape, blob.dtype) == ("my_relu", "y_0", (2, 3), flow.float32)
    assert blob.parallel_conf.device_tag == DEFAULT_TAG
    assert blob.split_axis == flow.INVALID_SPLIT_AXIS


def test_completed_attrs_are_filled_with_declared_defaults_and_types():
    @flow.global_function()
    def job(a: tp.Numpy.Placeholder((2, 3)), b: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        return flow.matmul(a, b, transpose_b=True, name="mm")

    a, b = np.ones((2, 3), np.float32), np.ones((4, 3), np.float32)
    np.testing.assert_allclose(job(a, b), a @ b.T)
    op = next(o for o in job.compiled_job.job.net.op if o.name == "mm")
    attrs = op.user_conf.attr
    assert attrs["transpose_b"].at_bool is True and attrs["transpose_a"].WhichOneof("value") == "at_bool"
    assert attrs["alpha"].WhichOneof("value") == "at_double" and attrs["alpha"].at_double == 1.0
    assert op.device_tag == DEFAULT_TAG and op.HasField("scope_symbol_id")


def test_blob_operators_build_ops_and_compute_like_numpy():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3)), y: tp.Numpy.Placeholder((2, 3)),
            r: tp.Numpy.Placeholder((3,))) -> typing.Tuple[tp.Numpy, tp.Numpy, tp.Numpy, tp.Numpy, tp.Numpy]:
        return x + y, x - r, 2 * x / y, -x + 1.5, 3 - x * r

    rng = np.random.default_rng(0)
    x = rng.random((2, 3), dtype=np.float32)
    y = rng.random((2, 3), dtype=np.float32) + 1
    r = rng.random(3, dtype=np.float32)
    outs = job(x, y, r)
    for got, want in zip(outs, (x + y, x - r, 2 * x / y, -x + 1.5, 3 - x * r)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    ops = {jb.op_type_name(o) for o in job.compiled_job.job.net.op}
    assert {"add_n", "broadcast_sub", "broadcast_div", "scalar_mul", "negative", "scalar_add",
            "broadcast_mul"} <= ops


def test_train_job_is_completed_with_oneflow_system_ops():
    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((4, 3)), y: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            logits = flow.layers.dense(x, 5, kernel_initializer=flow.random_uniform_initializer(), name="fc")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    # the job after the required passes (autograd, optimizer), before cleanup/fusion rewrites it
    job = complete(copy.deepcopy(train_job.compiled_job.user_job), enable_passes=False)
    names = {o.name: o for o in job.net.op}
    tc = job.job_conf.train_conf
    assert list(tc.loss_lbn) == ["loss/out_0"]
    assert tc.train_step_lbn == "System-Train-TrainStep-train_job-Identity/out"
    assert tc.optimizer_conf[0].momentum_conf.beta == pytest.approx(0.9)  # OneFlow's default momentum
    assert set(tc.optimizer_conf[0].variable_op_names) == {"fc-weight", "fc-bias"}
    for name in ("loss_out_0_grad_ConstantLike", "System-Train-TrainStep-train_job",
                 "System-Train-TrainStep-train_job-ScalarAdd", "System-Train-TrainStep-train_job-Assign",
                 "fc-weight_optimizer", "fc-weight-momentum", "loss_grad", "fc-matmul_grad_b"):
        assert name in names, name
    assert jb.op_type_name(names["fc-weight_optimizer"]) == "momentum_update"
    assert any(n.startswith("System-Train-LearningRate-Scheduler_") for n in names)
    assert any(n.startswith("System-ModelDiffScale-ScalarMul_") for n in names)
    log = train_job.compiled_job.job.job_conf.flag_name2flag_value["__completion_log__"].at_list_string.val
    assert list(log)[:2] == ["autograd", "optimizer"] and "prune_dead_ops" in log
    # every blob has a BlobDesc in the Job proto
    for op in job.net.op:
        for _, _, lbn in jb.op_outputs(op):
            assert lbn in job.helper.lbn2logical_blob_desc
    # the user job is kept as built, before completion
    assert not any(o.name.endswith("_optimizer") for o in train_job.compiled_job.user_job.net.op)


def test_session_lifecycle_and_jobs_defined_after_start():
    @flow.global_function()
    def first(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.relu(x)

    x = np.array([-1, 1], np.float32)
    np.testing.assert_array_equal(first(x), [0, 1])

    @flow.global_function()
    def later(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.square(x)

    np.testing.assert_array_equal(later(x), [1, 1])
    flow.clear_default_session()
    with pytest.raises(RuntimeError, match="session .* is closed"):
        first(x)


def test_variables_are_shared_by_name_across_jobs():
    def model(x):
        w = flow.get_variable("w", (3,), initializer=flow.constant_initializer(2.0))
        return x * w

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        loss = flow.math.reduce_sum(model(x))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1.0]), momentum=0).minimize(loss)
        return loss

    @flow.global_function()
    def predict(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return model(x)

    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_allclose(predict(x), 2 * x)
    train(x)  # w <- 2 - 1 * x
    np.testing.assert_allclose(predict(x), (2 - x) * x)


def test_return_annotations_numpy_list_tuple_dict_future_callback():
    @flow.global_function()
    def listy(x: tp.Numpy.Placeholder((2,))) -> tp.ListNumpy:
        return x

    @flow.global_function()
    def structured(x: tp.Numpy.Placeholder((2,))) -> typing.Dict[str, typing.Tuple[tp.Numpy, tp.Numpy]]:
        return {"pair": (x, x + 1)}

    @flow.global_function()
    def future(x: tp.Numpy.Placeholder((2,))):
        return x * 2

    @flow.global_function()
    def callback(x: tp.Numpy.Placeholder((2,))) -> tp.Callback[tp.Numpy]:
        return x * 3

    @flow.global_function()
    def list_input(x: tp.ListNumpy.Placeholder((4,))) -> tp.Numpy:
        return x + 0

    x = np.array([1, 2], np.float32)
    out = listy(x)
    assert isinstance(out, list) and len(out) == 1
    np.testing.assert_array_equal(out[0], x)
    s = structured(x)
    np.testing.assert_array_equal(s["pair"][1], x + 1)
    f = future(x)
    np.testing.assert_array_equal(f.get().numpy(), 2 * x)
    with pytest.raises(RuntimeError, match="only once"):
        f.get()
    got = []
    callback(x)(got.append)
    np.testing.assert_array_equal(got[0], 3 * x)
    np.testing.assert_array_equal(list_input([np.arange(4, dtype=np.float32)]), np.arange(4))


def test_function_config_default_data_type_and_placement():
    config = flow.FunctionConfig()
    config.default_data_type(flow.double)
    config.default_logical_view(flow.scope.consistent_view())
    config.default_placement_scope(flow.scope.placement("cpu", "0:0"))

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((2,), dtype=flow.double)) -> tp.Numpy:
        return x * 2

    assert job(np.ones(2)).dtype == np.float64
    assert job.compiled_job.job.job_conf.default_data_type == flow.double.proto
    with pytest.raises(AttributeError, match="FunctionConfig has no setting"):
        config.no_such_setting(True)
    flow.config.gpu_device_num(1)
    flow.config.gpu_device_num(0)  # CPU devices, also where CUDA is present
    flow.config.cpu_device_num(1)
    with pytest.raises(ValueError, match="gpu_device_num: expected an int >= 0, received -1"):
        flow.config.gpu_device_num(-1)


def test_namespace_prefixes_ops_and_variables():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((1, 1, 4, 4))) -> tp.Numpy:
        with flow.scope.namespace("block"):
            return flow.layers.conv2d(x, 2, 3, padding="SAME", name="conv", activation=flow.nn.relu)

    job(np.ones((1, 1, 4, 4), np.float32))
    names = {o.name for o in job.compiled_job.user_job.net.op}
    assert {"block-conv-weight", "block-conv-bias", "block-conv", "block-conv-bias_add",
            "block-conv-activation"} <= names


def test_watch_delivers_values_each_run():
    seen = []

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        y = flow.math.relu(x)

        def handler(v: tp.Numpy):
            seen.append(v)
        flow.watch(y, handler)
        return y * 2

    job(np.array([-1, 0, 1], np.float32))
    job(np.array([3, -3, 1], np.float32))
    np.testing.assert_array_equal(seen[0], [0, 0, 1])
    np.testing.assert_array_equal(seen[1], [3, 0, 1])


def test_blob_used_twice_by_one_op_gets_both_gradients():
    grads = {}

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        w = flow.get_variable("w", (3,), initializer=flow.constant_initializer(2.0))

        def keep(g: tp.Numpy):
            grads["w"] = g
        flow.watch_diff(w, keep)
        loss = flow.math.reduce_sum(w * w + x * w)   # d/dw = 2w + x
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return loss

    x = np.array([1, 2, 3], np.float32)
    job(x)
    np.testing.assert_allclose(grads["w"], 2 * 2.0 + x)


def test_function_config_records_other_oneflow_settings_with_a_warning():
    config = flow.FunctionConfig()
    with pytest.warns(UserWarning, match="recorded in the job config"):
        config.enable_inplace(False)
    with pytest.warns(UserWarning):
        config.cudnn_conv_force_fwd_algo(1)
    with pytest.raises(TypeError, match="FunctionConfig.concurrency_width"):
        config.concurrency_width("wide")

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x * 2

    job(np.ones(2, np.float32))
    conf = job.compiled_job.job.job_conf
    assert conf.enable_inplace is False and conf.cudnn_conv_force_fwd_algo == 1
