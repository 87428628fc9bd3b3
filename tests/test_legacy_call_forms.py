"""Call forms of OneFlow's older single-client releases that graphfront keeps working
(programs such as the OneFlow-Benchmark CNN scripts still use them), checked against PyTorch."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import ArgumentError

_rng = np.random.default_rng(7)


def _predict(build, *arrays):
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder(arrays[0].shape), w: tp.Numpy.Placeholder(arrays[1].shape)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return build(x, w)
    return job(*arrays)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv2d_v05_positional_order_data_format_dilations_groups(layout):
    # v0.5 order: conv2d(input, filters, strides, padding, data_format, dilations, groups, name)
    x = _rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    w = _rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=2, dilation=2, groups=2).numpy()
    if layout == "NHWC":
        xin, win = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
        ref = ref.transpose(0, 2, 3, 1)
    else:
        xin, win = x, w
    out = _predict(lambda a, b: flow.nn.conv2d(a, b, 2, "SAME", layout, 2, 2, name="c"), xin, win)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    # five positionals (no dilations) and the v0.6 keyword form
    w1 = _rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    ref1 = F.conv2d(torch.from_numpy(x), torch.from_numpy(w1), stride=1).numpy()
    w1in = w1.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else w1
    if layout == "NHWC":
        ref1 = ref1.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(_predict(lambda a, b: flow.nn.conv2d(a, b, 1, "VALID", layout), xin, w1in),
                               ref1, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_predict(lambda a, b: flow.nn.conv2d(a, b, 1, "VALID", data_format=layout), xin, w1in),
                               ref1, rtol=1e-4, atol=1e-4)


def test_conv2d_v05_positional_order_conflicts_are_named():
    x = np.zeros((1, 2, 5, 5), np.float32)
    w = np.zeros((2, 2, 3, 3), np.float32)
    with pytest.raises(ArgumentError, match=r"conv2d 'c'.*passed fifth.*data_format='NHWC'"):
        _predict(lambda a, b: flow.nn.conv2d(a, b, 1, "VALID", "NCHW", data_format="NHWC", name="c"), x, w)
    with pytest.raises(ArgumentError, match=r"conv2d: .*seventh positional is groups.*received 2 there and groups=2"):
        _predict(lambda a, b: flow.nn.conv2d(a, b, 1, "VALID", "NCHW", 1, 2, groups=2), x, w)


def test_v05_parallel_distribution_keywords_are_nd_sbp(tmp_path):
    """OneFlow v0.5 spelled nd_sbp / grad_nd_sbp as parallel_distribution /
    grad_parallel_distribution (get_variable, hierarchical_parallel_cast,
    megatron_gpt_mmap_data_loader): the older keyword records the same attrs and the values
    and gradients are unchanged (reference: torch)."""
    from test_megatron_gpt_loader import write_megatron
    prefix = str(tmp_path / "corpus")
    write_megatron(prefix, [np.arange(1, 12)])
    x = _rng.standard_normal((2, 3)).astype(np.float32)
    flow.clear_default_session()

    @flow.global_function(type="train")
    def job(a: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3), initializer=flow.constant_initializer(2.0),
                                  parallel_distribution=["B"])
            h = flow.hierarchical_parallel_cast(a * w, parallel_distribution=["B"], grad_mode="manual",
                                                grad_parallel_distribution=["B"], name="cast")
            flow.data.megatron_gpt_mmap_data_loader(prefix, seq_length=4, num_samples=2, batch_size=1,
                                                    shuffle=False, parallel_distribution=["S(0)"], name="loader")
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(
                flow.math.reduce_sum(h * h))
            return h

    np.testing.assert_allclose(job(x), x * 2.0, rtol=1e-6)
    ops = {op.name: op for op in job.compiled_job.user_job.net.op}
    assert list(ops["w"].variable_conf.nd_sbp) == ["B"]
    cast = ops["cast"].user_conf.attr
    assert list(cast["nd_sbp"].at_list_string.val) == ["B"] and cast["grad_mode"].at_string == "manual"
    assert list(cast["grad_nd_sbp"].at_list_string.val) == ["B"]
    assert list(ops["loader"].user_conf.attr["nd_sbp"].at_list_string.val) == ["S(0)"]
    w = torch.full((2, 3), 2.0, requires_grad=True)
    ((torch.from_numpy(x) * w) ** 2).sum().backward()
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), (2.0 - 0.5 * w.grad).numpy(), rtol=1e-6)


@pytest.mark.parametrize("call", [
    lambda: flow.get_variable("w", (2,), nd_sbp=["B"], parallel_distribution=["B"]),
    lambda: flow.hierarchical_parallel_cast(flow.constant(1.0, dtype=flow.float32, shape=(2,)), nd_sbp=["B"], parallel_distribution=["B"]),
])
def test_both_spellings_of_nd_sbp_are_refused(call):
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def job():
        call()

    with pytest.raises(ArgumentError, match="passed twice.*'nd_sbp'.*'parallel_distribution'"):
        job()


def test_oneflow_python_framework_distribute_module_path():
    # OneFlow <= 0.4 programs: `import oneflow.python.framework.distribute as distribute_util`,
    # then get_variable(..., distribute=distribute_util.broadcast()); imported first in a fresh
    # interpreter (before `import graphfront`), and in both statement forms
    code = (
        "import graphfront.python.framework.distribute as d\n"
        "from graphfront.python.framework import distribute as e\n"
        "import graphfront as flow\n"
        "print(d is e is flow.distribute, d.broadcast() == flow.distribute.broadcast(), str(d.split(1)))\n"
        "try:\n"
        "    import graphfront.python.framework.id_util\n"
        "except ModuleNotFoundError as err:\n"
        "    print(err.name)\n"
        "import importlib.util\n"  # (an import hook asks; a module without a spec made it raise ValueError)
        "print(importlib.util.find_spec('graphfront.python.nn'), importlib.util.find_spec('graphfront.python'))\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, check=True, capture_output=True, text=True)
    lines = out.stdout.splitlines()
    assert lines[0].split() + lines[1:2] == ["True", "True", "S(1)", "graphfront.python.framework.id_util"]
    assert lines[2].startswith("None ModuleSpec(name='graphfront.python'")
    # a broadcast variable built through the old path holds its initializer's values
    import graphfront.python.framework.distribute as distribute_util
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def job() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.get_variable("v", shape=(2, 3), initializer=flow.constant_initializer(1.5),
                                     distribute=distribute_util.broadcast())
    np.testing.assert_array_equal(job(), np.full((2, 3), 1.5, np.float32))
