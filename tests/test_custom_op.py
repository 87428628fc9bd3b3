"""The custom-op example trains a real job through user_op_builder; custom ops (of an
importable module, of OneFlow's user-op modules) run on several devices as on one."""
import importlib.util
import os
import sys

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import JobBuildError
from graphfront.ops import registry
from graphfront.ops.common import like
from graphfront.testing.compare import assert_close_at_scale
from test_oneflow_job_api import sigmoid_module  # noqa: F401 - a fixture: OneFlow's user-op module, in a folder

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "custom_op", "train.py")


def _load_example():
    spec = importlib.util.spec_from_file_location("custom_op_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_custom_op_example_trains_mnist_mlp(tmp_path):
    accuracy = _load_example().main(["--epochs", "1", "--run-dir", str(tmp_path)])
    assert (tmp_path / "curves.png").exists() and (tmp_path / "checkpoint" / "snapshot_done").exists()
    assert accuracy > 0.8
    d = registry.lookup("scaled_tanh")
    assert [a.name for a in d.inputs] == ["x"] and d.has_grad
    assert d.attrs["a"].type == "float" and registry.has_op("scaled_tanh_grad")


def _session(n):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(n)


def _losses(n, activation, steps=3):
    """Losses and variables of ``steps`` SGD steps of a dense layer through ``activation``
    on ``n`` devices (data parallel: the batch split, the custom op on each part)."""
    _session(n)

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((8, 5))) -> tp.Numpy:
        h = activation(flow.layers.dense(x, 4, kernel_initializer=flow.random_normal_initializer(), name="d"))
        loss = flow.math.reduce_mean(flow.math.square(h))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss

    x = np.random.default_rng(3).standard_normal((8, 5)).astype(np.float32)
    losses = [float(train(x).reshape(-1)[0]) for _ in range(steps)]
    return losses, {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}


@pytest.mark.slow  # spawns worker processes
def test_a_custom_op_of_an_importable_module_trains_on_two_devices_as_on_one():
    """The example's ``scaled_tanh``, registered when its module is imported: each worker
    process of a job on 2 devices imports that module before it compiles the job (before,
    they knew no such op type and the session's workers stopped)."""
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    try:
        from scaled_tanh import scaled_tanh
    finally:
        sys.path.remove(os.path.dirname(EXAMPLE))
    assert registry.lookup("scaled_tanh").origin[:2] == ("module", "scaled_tanh")
    one, one_vars = _losses(1, scaled_tanh)
    two, two_vars = _losses(2, scaled_tanh)
    assert_close_at_scale(two, one, 1e-5)
    assert one[-1] < one[0]
    for k in one_vars:
        assert_close_at_scale(two_vars[k], one_vars[k], 1e-5)


@pytest.mark.slow  # spawns worker processes
def test_a_custom_op_module_trains_on_two_devices_as_on_one(sigmoid_module):
    """OneFlow's user-op module with Python kernels: the workers load the module from its
    folder as the client did."""
    one, one_vars = _losses(1, sigmoid_module.api.my_sigmoid_forward)
    two, two_vars = _losses(2, sigmoid_module.api.my_sigmoid_forward)
    assert_close_at_scale(two, one, 1e-5)
    for k in one_vars:
        assert_close_at_scale(two_vars[k], one_vars[k], 1e-5)


@pytest.mark.slow  # spawns worker processes
def test_an_op_registered_by_a_function_is_refused_on_several_devices_by_name():
    """An op type registered in a function (here this test) runs on one device; a job on
    several devices is refused naming the op, where it was registered and the remedy,
    since no worker process can run that function again."""
    registry.op("function_registered_relu", inputs=["x"], outputs=["y"], infer=like("x"),
                kernel=lambda k: torch.relu)
    x = np.array([[-1, 0, 1], [2, -2, 3]], np.float32)
    try:
        for n in (1, 2):
            _session(n)

            @flow.global_function()
            def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
                return (flow.user_op_builder("FunctionRelu").Op("function_registered_relu").Input("x", [x])
                        .Output("y").Build().InferAndTryRun().RemoteBlobList()[0])
            if n == 1:
                np.testing.assert_array_equal(job(x), np.maximum(x, 0))
        with pytest.raises(JobBuildError, match=r"op 'FunctionRelu' is of type 'function_registered_relu', registered "
                                                r"by test_an_op_registered\w+ in \S+test_custom_op.py, which the worker "
                                                r"processes .* register it at the top level of an importable module"):
            job(x)
    finally:
        registry.unregister("function_registered_relu")
