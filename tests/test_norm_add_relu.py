"""Fused batch norm + residual add + relu: the ``fuse_normalization_add_relu`` pass and the
``normalization_add_relu`` ops.

References: the same job with the pass disabled (OneFlow's unfused ops: normalization, add_n,
relu), numpy's ``packbits`` for the relu mask's bit layout, and the float64 formulas of the
unfused ops in the AutoTest (tests/autotest/test_nn_autotest.py). The pass rewrites GPU
placements only; the jobs here are placed on the CPU, whose tag they take for a GPU one
(``rewrite.GPU_TAGS``), so they run on any machine (tests/test_cuda.py runs them on a GPU). The kernels compiled by TorchInductor,
which a GPU runs, are checked here on the CPU too (``common.INDUCTOR_DEVICES``): Inductor
traces the same formulas there and generates C++ instead of Triton.
"""
import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import passes
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.ops import common, norm_ops
from graphfront.parallel import sbp as _sbp
from graphfront.passes import rewrite
from graphfront.testing.compare import assert_close_at_scale

N, HW, C = 4, 4, 8
RNG = np.random.default_rng(0)
X = RNG.standard_normal((N, HW, HW, C)).astype(np.float32)


@pytest.fixture(autouse=True)
def cpu_placement_counts_as_gpu(monkeypatch):
    monkeypatch.setattr(rewrite, "GPU_TAGS", rewrite.GPU_TAGS + ("cpu",))


def _conv(x, name, c_in, c_out):
    w = flow.get_variable(f"{name}-weight", (c_out, 3, 3, c_in), initializer=flow.random_normal_initializer(stddev=0.3))
    return flow.nn.conv2d(x, w, 1, "SAME", data_format="NHWC", name=name)


def _residual_train(disabled=(), mode=None, ndev=1, separate_ops=False, amp=False, blocks=1):
    """``blocks`` residual blocks in NHWC after a stem convolution, each: conv, batch norm + relu,
    conv, batch norm + the block's input + relu, built by ``flow.layers.batch_normalization_*relu``
    or (``separate_ops``) by the batch norm, ``+`` and ``flow.nn.relu``."""
    config = flow.FunctionConfig()
    if disabled:
        passes.disable_passes(config, *disabled)
    if mode:
        config.compile_mode(mode)
    config.enable_auto_mixed_precision(amp)

    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((N, HW, HW, C))) -> tp.Numpy:
        with flow.scope.placement("cpu", f"0:0-{ndev - 1}"):
            out = _conv(x, "stem", C, C)
            for i in range(blocks):
                block_in, p = out, f"block{i}-" if i else ""
                a = _conv(block_in, f"{p}conv1", C, C)
                if separate_ops:
                    a = flow.nn.relu(flow.layers.batch_normalization(a, axis=3, name=f"{p}bn1"))
                else:
                    a = flow.layers.batch_normalization_relu(a, axis=3, name=f"{p}bn1")
                b = _conv(a, f"{p}conv2", C, C)
                if separate_ops:
                    out = flow.nn.relu(flow.layers.batch_normalization(b, axis=3, name=f"{p}bn2") + block_in)
                else:
                    out = flow.layers.batch_normalization_add_relu(b, block_in, axis=3, name=f"{p}bn2")
            loss = flow.math.reduce_mean(flow.math.square(out - 0.5))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def _train(steps=3, ndev=1, **kwargs):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)
    job = _residual_train(ndev=ndev, **kwargs)
    losses = [job(X).item() for _ in range(steps)]
    variables = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    proto = job.graph.proto
    sbp = {op.name: {k: _sbp.from_proto(v) for k, v in
                     proto.job_parallel_view_conf.op_name2sbp_signature_conf[op.name].bn_in_op2sbp_parallel.items()}
           for op in proto.net.op if jb.op_type_name(op).startswith("normalization_add_relu")}
    return losses, variables, [jb.op_type_name(op) for op in proto.net.op], sbp, proto


def _assert_same_training(got, want, rtol=1e-5):
    assert_close_at_scale(got[0], want[0], rtol=rtol)
    assert set(got[1]) == set(want[1])
    for name in want[1]:  # the weights, gamma, beta and the moving statistics
        assert_close_at_scale(got[1][name], want[1][name], rtol=rtol, err_msg=name)


@pytest.mark.parametrize("separate_ops", [False, True])
def test_fused_job_trains_as_the_unfused_ops(separate_ops):
    fused = _train(separate_ops=separate_ops)
    unfused = _train(disabled=["fuse_normalization_add_relu"], separate_ops=separate_ops)
    assert fused[2].count("normalization_add_relu") == 2 and fused[2].count("normalization_add_relu_grad") == 2
    for gone in ("normalization", "normalization_grad", "relu", "relu_grad", "add_n"):
        assert gone not in fused[2], gone
    assert "normalization" in unfused[2] and "normalization_add_relu" not in unfused[2]
    _assert_same_training(fused, unfused)


def test_fused_job_with_amp_trains_as_the_unfused_ops():
    """bfloat16 on the CPU: the batch norm's statistics and parameters stay float32 (OneFlow's
    no-cast arguments of normalization_add_relu), the activations are bfloat16."""
    fused = _train(amp=True)
    unfused = _train(amp=True, disabled=["fuse_normalization_add_relu"])
    assert fused[2].count("normalization_add_relu") == 2 and "cast" in fused[2]
    _assert_same_training(fused, unfused)


def test_pass_leaves_cpu_jobs_and_other_patterns_alone(monkeypatch):
    monkeypatch.setattr(rewrite, "GPU_TAGS", ("gpu", "cuda"))
    assert "normalization_add_relu" not in _train(steps=1)[2]
    assert "fuse_normalization_add_relu" in passes.pass_names()


def test_a_batch_norm_read_twice_is_left_unfused():
    flow.clear_default_session()
    flow.config.cpu_device_num(1)

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((N, C))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (N, C), initializer=flow.random_normal_initializer())
            y = flow.layers.batch_normalization(x * w, axis=1, name="bn")
            loss = flow.math.reduce_mean(flow.nn.relu(y) + y)   # y is read by the relu and by the add
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    job(X[:, 0, 0, :])
    types = [jb.op_type_name(op) for op in job.graph.proto.net.op]
    assert "normalization" in types and "normalization_add_relu" not in types


def test_kernels_compiled_by_inductor_train_as_the_unfused_ops(monkeypatch):
    """The GPU's path: forward and backward each compiled by TorchInductor (C++ here, Triton on
    a GPU), one compile per distinct signature."""
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(common, "_INDUCTOR", {})
    fused = _train()
    compiled = {sig: fn for sig, fn in common._INDUCTOR.items() if sig[0][0].startswith("normalization_add_relu")}
    assert len(compiled) == 4 and None not in compiled.values()   # 2 batch norms (with/without addend) x fwd/bwd
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda",))
    _assert_same_training(fused, _train(disabled=["fuse_normalization_add_relu"]))


@pytest.mark.parametrize("fastest", [0, 1])
def test_the_tuned_choice_of_kernels_trains_as_the_unfused_ops(monkeypatch, tuned_fastest, fastest):
    """On a GPU each fused batch norm and its gradient run the faster, for its inputs, of the
    whole op compiled by TorchInductor (0) and PyTorch's batch-norm kernels with a compiled
    add and relu (1). Either trains as the unfused ops; the timed trial calls (a clock that
    always finds ``fastest`` faster here) update copies of the moving statistics, not the
    variables."""
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(common, "_INDUCTOR", {})
    trials = tuned_fastest(fastest)
    fused = _train()
    tuned = {sig[0][0]: choice for sig, choice in common._TUNED.items()}
    assert set(tuned) == {"normalization_add_relu", "normalization_add_relu_grad"} and len(common._TUNED) == 4
    assert set(tuned.values()) == {fastest} and len(trials) == 8   # (each signature timed once, 2 candidates)
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda",))
    monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda",))
    _assert_same_training(fused, _train(disabled=["fuse_normalization_add_relu"]))


def test_the_choice_timed_by_the_real_clock_trains_as_the_unfused_ops(monkeypatch):
    """The timing as a GPU does it, on the CPU's clock (compiled C++ against PyTorch's CPU
    kernels): whichever each signature chooses, the job trains as the unfused ops."""
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(common, "_INDUCTOR", {})
    monkeypatch.setattr(common, "_TUNED", {})
    fused = _train()
    assert len(common._TUNED) == 4 and set(common._TUNED.values()) <= {0, 1}
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda",))
    monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda",))
    _assert_same_training(fused, _train(disabled=["fuse_normalization_add_relu"]))


@pytest.mark.parametrize("kernels", ["unfused", 0, 1])
def test_the_gradient_at_a_blocks_output_is_summed_in_its_batch_norms_gradient(monkeypatch, tuned_fastest, kernels):
    """Two blocks: the gradient at the first block's output is the sum of the second block's
    first convolution's data gradient and its residual add's. fuse_add_to_output hands both
    to the first block's ``normalization_add_relu_grad`` (``dy`` and ``dy_addend``), which adds
    them in its pass over ``dy``: no ``add_n``, no ``_add_to_output`` of that convolution. It
    trains as the unfused ops, with PyTorch's kernels (``unfused``: the add, the relu mask,
    the batch-norm gradient) and with each of the GPU's two kernel choices (compiled C++
    here)."""
    if kernels != "unfused":
        monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
        monkeypatch.setattr(common, "_INDUCTOR", {})
        tuned_fastest(kernels)
    fused = _train(blocks=2)
    grads = {op.name: op.user_conf for op in fused[4].net.op if jb.op_type_name(op) == "normalization_add_relu_grad"}
    taking = {name for name, uc in grads.items() if "dy_addend" in uc.input}
    assert len(grads) == 4 and taking == {next(n for n in grads if n.startswith("bn2"))}, sorted(grads)
    types = {op.name: jb.op_type_name(op) for op in fused[4].net.op}
    made_by = sorted(types[grads[n].input[a].s[0].split("/")[0]] for n in taking for a in ("dy", "dy_addend"))
    assert made_by == ["conv_data_grad", "normalization_add_relu_grad"], made_by
    assert "add_n" not in fused[2]
    conv1_grads = [op for op in fused[4].net.op if "block1-conv1" in op.name and types[op.name] == "conv_data_grad"]
    assert len(conv1_grads) == 1 and "_add_to_output" not in conv1_grads[0].user_conf.input
    if kernels != "unfused":
        assert {sig[0][0] for sig in common._TUNED} == {"normalization_add_relu", "normalization_add_relu_grad"}
        monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda",))
        monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda",))
    _assert_same_training(fused, _train(blocks=2, disabled=["fuse_normalization_add_relu"]))
    _assert_same_training(fused, _train(blocks=2, disabled=["fuse_add_to_output"]))


@pytest.mark.parametrize("mode", ["xla", pytest.param("native", marks=pytest.mark.slow)])
def test_fused_job_in_other_lowerings_trains_as_the_plan(mode):
    """Two blocks, so a gradient takes ``dy_addend`` too."""
    got, plan = _train(mode=mode, blocks=2), _train(blocks=2)
    assert "normalization_add_relu" in got[2]
    assert any("dy_addend" in op.user_conf.input for op in got[4].net.op)
    _assert_same_training(got, plan)


def test_a_device_part_of_no_whole_number_of_words_is_left_unfused():
    """4 x 6 float32 on 2 devices: 12 elements a device, no whole 32-bit word of the relu mask,
    so the batch norms keep their per-device statistics unfused; on one device they fuse."""
    for ndev, fused in ((2, False), (1, True)):
        flow.clear_default_session()
        flow.config.cpu_device_num(ndev)

        @flow.global_function(type="train")
        def job(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
            with flow.scope.placement("cpu", f"0:0-{ndev - 1}"):
                w = flow.get_variable("w", (4, 6), initializer=flow.random_normal_initializer())
                loss = flow.math.reduce_mean(flow.layers.batch_normalization_relu(x * w, axis=1, name="bn"))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
            return loss
        job(X[:, 0, 0, :6].copy())
        types = [jb.op_type_name(op) for op in job.graph.proto.net.op]
        assert ("normalization_add_relu" in types) is fused and ("normalization" in types) is not fused, (ndev, types)


def test_two_devices_train_as_one():
    """Each device normalizes its half of the batch with that half's statistics (OneFlow's
    unsynchronized batch norm), so the reference is the unfused job on two devices."""
    two = _train(ndev=2)
    assert two[3] and all(sig["x_0"] == sig.get("reserve_space_0", "S(0)") == "S(0)" for sig in two[3].values()), two[3]
    _assert_same_training(two, _train(ndev=2, disabled=["fuse_normalization_add_relu"]))


# ------------------------------------------------------------------ the relu mask's bit words

@pytest.mark.parametrize("n", [1, 31, 32, 33, 100])
def test_relu_bits_follow_oneflows_layout(n):
    mask = RNG.random((n,)) < 0.5
    mask[-1] = True  # (a set top bit in the last full word when n % 32 == 0)
    want = np.packbits(np.pad(mask, (0, -n % 32)), bitorder="little").view("<i4")
    got = norm_ops.relu_bits(torch.from_numpy(mask).reshape(1, n))
    assert got.dtype == torch.int32 and got.tolist() == want.tolist()
    assert torch.equal(norm_ops.relu_mask(got, (n,)), torch.from_numpy(mask))
