"""The ``fuse_bias_add_sparse_softmax_cross_entropy`` pass and its fused ops.

References: the same job with the pass disabled (OneFlow's unfused ops: bias_add, then
sparse_softmax_cross_entropy, under AMP with the cast between them), and the float64
formulas of the unfused ops in the AutoTest (tests/autotest/test_core_autotest.py). The pass
rewrites GPU placements only; the jobs here are placed on the CPU, whose tag they take for a
GPU one (``rewrite.GPU_TAGS``). On the CPU the fused kernels make the unfused ops' own torch
calls, so the two jobs train bit for bit alike; the GPU's TorchInductor-compiled kernels are
checked here on the CPU too (``common.INDUCTOR_DEVICES``: C++ instead of Triton).
"""
import numpy as np
import pytest

import graphfront as flow
from graphfront import passes
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import OpRunError
from graphfront.ops import common
from graphfront.passes import rewrite
from graphfront.testing.compare import assert_close_at_scale

N, T, D, C = 4, 3, 8, 11
RNG = np.random.default_rng(0)
X = RNG.standard_normal((N, T, D)).astype(np.float32)
Y = RNG.integers(0, C, (N, T)).astype(np.int32)
FUSED = "fused_bias_add_sparse_softmax_cross_entropy"


@pytest.fixture(autouse=True)
def cpu_placement_counts_as_gpu(monkeypatch):
    monkeypatch.setattr(rewrite, "GPU_TAGS", rewrite.GPU_TAGS + ("cpu",))


def _train(disabled=(), amp=False, steps=3, read_prob=False, labels=Y, mean=True, device="cpu", ndev=1):
    """A classifier over the last axis of (N, T, D) features (a broadcast matmul, the bias
    added by ``bias_add`` on the last axis), the mean softmax cross entropy; SGD. Returns the losses,
    the variables and the job's op types."""
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.cpu_device_num(ndev)
    config = flow.FunctionConfig()
    config.enable_auto_mixed_precision(amp)
    if disabled:
        passes.disable_passes(config, *disabled)

    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((N, T, D)), y: tp.Numpy.Placeholder((N, T), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement(device, f"0:0-{ndev - 1}"):
            w = flow.get_variable("w", (D, C), initializer=flow.random_normal_initializer(stddev=0.5))
            b = flow.get_variable("b", (C,), initializer=flow.random_normal_initializer(stddev=0.5))
            logits = flow.nn.bias_add(flow.matmul(x, w), b, data_format="channels_last")
            if read_prob:
                prob, loss = flow.user_op_builder("sce").Op("sparse_softmax_cross_entropy") \
                    .Input("prediction", [logits]).Input("label", [y]).Output("prob").Output("out") \
                    .Attr("depth", C).Build().InferAndTryRun().RemoteBlobList()
                loss = loss + flow.math.reduce_sum(prob, axis=[2]) * 0.0
            else:
                loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            if mean:
                loss = flow.math.reduce_mean(loss)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss
    losses = [job(X, labels).reshape(-1)[0].item() for _ in range(steps)]
    return losses, {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}, \
        [jb.op_type_name(op) for op in job.graph.proto.net.op]


@pytest.mark.parametrize("amp", [False, True])
def test_fused_job_trains_bit_for_bit_as_the_unfused_ops(amp):
    """bfloat16 AMP on the CPU: the matmul's low-precision logits enter the fused op uncast
    (no cast between them, none on their gradient), which computes in the bias's float32
    exactly as the unfused cast, add and loss did."""
    fused = _train(amp=amp)
    unfused = _train(amp=amp, disabled=["fuse_bias_add_sparse_softmax_cross_entropy"])
    assert fused[2].count(FUSED) == 1 and fused[2].count(FUSED + "_grad") == 1
    assert "sparse_softmax_cross_entropy" not in fused[2] and "bias_add" not in fused[2]
    assert "sparse_softmax_cross_entropy" in unfused[2]
    if amp:   # (the features' and the weight's casts, the weight gradient's; not the logits')
        assert fused[2].count("cast") == 3 and unfused[2].count("cast") == 5, (fused[2], unfused[2])
    assert fused[0] == unfused[0]
    for name, value in unfused[1].items():
        np.testing.assert_array_equal(fused[1][name], value, err_msg=name)


def test_two_devices_train_bit_for_bit_as_the_unfused_ops():
    """Data parallel: the fused op splits along the batch as the unfused ops do, its bias
    broadcast and the bias's gradient a partial sum, all-reduced as bias_add's was."""
    fused = _train(ndev=2)
    unfused = _train(ndev=2, disabled=["fuse_bias_add_sparse_softmax_cross_entropy"])
    assert FUSED in fused[2] and FUSED not in unfused[2]
    assert fused[0] == unfused[0]
    for name, value in unfused[1].items():
        np.testing.assert_array_equal(fused[1][name], value, err_msg=name)


def test_kernels_compiled_by_inductor_train_as_the_unfused_ops(monkeypatch):
    """The GPU's path: forward and gradient each one TorchInductor-compiled function (C++
    here); the softmax's reductions round in another order: float32 ulps, three steps deep."""
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(common, "_INDUCTOR", {})
    fused = _train()
    compiled = [fn for (key, _), fn in common._INDUCTOR.items() if key[0].startswith(FUSED)]
    assert len(compiled) == 2 and None not in compiled
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda",))
    unfused = _train(disabled=["fuse_bias_add_sparse_softmax_cross_entropy"])
    assert_close_at_scale(fused[0], unfused[0], rtol=1e-6)
    for name, value in unfused[1].items():
        assert_close_at_scale(fused[1][name], value, rtol=1e-6, err_msg=name)


def test_pass_leaves_cpu_jobs_a_read_prob_and_a_named_loss_alone(monkeypatch):
    assert FUSED not in _train(steps=1, read_prob=True)[2]
    assert FUSED not in _train(steps=1, mean=False)[2]   # (the train config names the loss op's output)
    monkeypatch.setattr(rewrite, "GPU_TAGS", ("gpu", "cuda"))
    assert FUSED not in _train(steps=1)[2]
    assert "fuse_bias_add_sparse_softmax_cross_entropy" in passes.pass_names()


def test_a_bad_label_raises_naming_the_fused_op_and_the_session_stays_usable():
    bad = Y.copy()
    bad[1, 2] = C
    with pytest.raises(OpRunError, match=rf"\({FUSED}\): input 'label' expects class ids in \[0, {C}\), received "
                                         rf"{C} at index \(1, 2\)"):
        _train(labels=bad, steps=1)
    good = _train(steps=1)
    assert np.isfinite(good[0]).all()
