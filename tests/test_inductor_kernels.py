"""Kernels that TorchInductor compiles on a GPU (``graphfront.ops.common.inductor_kernel``):
the fused max pool and its gradient here, the fused batch norm in tests/test_norm_add_relu.py.

Inductor compiles for the CPU too (C++ instead of Triton, from the same traced formulas), so
these tests add the CPU to ``common.INDUCTOR_DEVICES`` and compare the compiled kernels with
the same kernels run op by op.
"""
import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import passes
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.ops import common, norm_ops
from graphfront.testing.compare import assert_close_at_scale

N, HW, C = 4, 10, 8


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(common, "_INDUCTOR", {})


def test_inductor_kernel_falls_back_with_a_warning_where_compiling_fails(monkeypatch, fresh_cache):
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))

    def formula(x):
        return torch.tensor(x.tolist())   # a host read: fullgraph tracing refuses it

    run = common.inductor_kernel(("probe",), formula, eager=lambda x: x * 2)
    x = torch.arange(3.0)
    with pytest.warns(UserWarning, match="TorchInductor could not compile graphfront_probe_0 for cpu"):
        assert run(x).tolist() == [0.0, 2.0, 4.0]
    assert run(x).tolist() == [0.0, 2.0, 4.0]          # (remembered: no second attempt, no second warning)
    assert list(common._INDUCTOR.values()) == [None]


def test_a_dynamic_inductor_kernel_compiles_once_for_every_shape(monkeypatch, fresh_cache):
    """``dynamic=True`` (a pointwise formula: the fused batch norm's add, relu and mask bits):
    the ops of one key, whatever their shapes of one rank (the mask's 32-bit words included, a last word
    padded or not), share one compiled function and one TorchDynamo graph, and each result
    equals the formula run op by op; a shape-specialized kernel compiles once per shape."""
    from torch._dynamo.utils import counters
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    shapes = [(2, 8, 8, 64), (2, 7, 7, 20), (3, 3, 5, 3)]
    rng = np.random.default_rng(2)
    for dynamic, compiles in ((True, 1), (False, len(shapes))):
        common._INDUCTOR.clear()
        graphs = counters["stats"]["unique_graphs"]
        for shape in shapes:   # (each shape another op: its own callable)
            run = common.inductor_kernel(("add_relu_and_bits", dynamic), norm_ops._add_relu_and_bits, dynamic=dynamic)
            y, addend = (torch.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(2))
            got, want = run(y, addend), norm_ops._add_relu_and_bits(y, addend)
            assert all(torch.equal(g, w) for g, w in zip(got, want)), shape
        assert len(common._INDUCTOR) == compiles and None not in common._INDUCTOR.values()
        assert counters["stats"]["unique_graphs"] - graphs == compiles


def test_tuned_kernel_times_its_candidates_once_per_signature(monkeypatch):
    """``tuned_kernel`` on a device it times on: each candidate is called on copies of the
    inputs it updates in place, the faster one runs, and a second op of the same key and
    signature takes the choice without timing; the clock is the host's on the CPU (a
    candidate sleeping 50 ms measures at least that, far above the other's median even on a
    loaded machine); where it does not time (another device,
    or deterministic algorithms asked for) the first candidate runs untimed."""
    import time
    monkeypatch.setattr(common, "_TUNED", {})
    calls = []

    def slow(x, acc):
        calls.append("slow")
        time.sleep(0.05)
        acc.add_(1)
        return x + 1

    def fast(x, acc):
        calls.append("fast")
        acc.add_(1)
        return x + 1
    x, acc = torch.zeros(2), torch.zeros(1)
    assert common.tuned_kernel(("t",), [slow, fast], mutated=(1,))(x, acc).tolist() == [1.0, 1.0]
    assert calls == ["slow"] and acc.item() == 1        # (the CPU is not timed on)
    monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda", "cpu"))
    calls.clear()
    torch.use_deterministic_algorithms(True)
    try:
        common.tuned_kernel(("t",), [slow, fast], mutated=(1,))(x, acc)
    finally:
        torch.use_deterministic_algorithms(False)
    assert calls == ["slow"] and not common._TUNED
    calls.clear()
    run = common.tuned_kernel(("t",), [slow, fast], mutated=(1,))
    assert run(x, acc).tolist() == [1.0, 1.0] and run(x, acc).tolist() == [1.0, 1.0]
    assert calls == ["slow"] * 6 + ["fast"] * 8 and acc.item() == 4   # (1 + 5 timed trials each on copies, 2 runs)
    assert common._TUNED == {(("t",), common._signature((x, acc))): 1}
    calls.clear()
    common.tuned_kernel(("t",), [slow, fast], mutated=(1,))(x, acc)
    assert calls == ["fast"]
    assert common._timed(slow, (x, torch.zeros(1)), torch.device("cpu"), 3) >= 0.01


def test_tuned_kernel_runs_its_first_candidate_where_the_trials_run_out_of_memory(monkeypatch):
    monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(common, "_TUNED", {})

    def timed(fn, args, device, reps):
        raise torch.OutOfMemoryError("CUDA out of memory")
    monkeypatch.setattr(common, "_timed", timed)
    run = common.tuned_kernel(("t",), [lambda x: x + 1, lambda x: x + 2])
    assert run(torch.zeros(1)).item() == 1.0 and list(common._TUNED.values()) == [0]


def pool_train(fmt, device="cpu", residual=False, disabled=()):
    """conv + relu + a 3x3 stride-2 SAME max pool (padded after, not before: ResNet's stem pool)
    whose relu moves into the fused pool, then (``residual``) the pool's output plus a
    convolution of it, then a dense layer; three SGD steps (``disabled``: passes skipped)."""
    flow.clear_default_session()
    flow.manual_seed(0)
    shape = (N, C, HW, HW) if fmt == "NCHW" else (N, HW, HW, C)
    config = flow.FunctionConfig()
    if disabled:
        passes.disable_passes(config, *disabled)

    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder(shape)) -> tp.Numpy:
        with flow.scope.placement(device, "0:0"):
            h = flow.layers.conv2d(x, C, 3, padding="SAME", data_format=fmt, activation=flow.nn.relu, name="conv",
                                   kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            h = flow.nn.max_pool2d(h, ksize=3, strides=2, padding="SAME", data_format=fmt, name="pool")
            if residual:
                h = h + flow.layers.conv2d(h, C, 3, padding="SAME", data_format=fmt, name="conv2",
                                           kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            out = flow.layers.dense(flow.reshape(h, (N, -1)), 3, name="fc",
                                    kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            loss = flow.math.reduce_mean(flow.math.square(out))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    losses = [float(job(x).mean()) for _ in range(3)]
    ops = job.graph.proto.net.op
    return losses, {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}, \
        [jb.op_type_name(op) for op in ops], ops


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_fused_max_pool_compiled_trains_as_its_kernels_op_by_op(fmt, monkeypatch, fresh_cache):
    """The pool's argmax indices are the same (its gradient reaches the same elements); the
    gradients of overlapping windows may be summed in another order: float32 rounding."""
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    compiled = pool_train(fmt)
    assert {"fused_tf_max_pool_2d", "fused_tf_max_pool_2d_grad"} <= set(compiled[2]) and "relu" not in compiled[2]
    pools = [fn for (key, _), fn in common._INDUCTOR.items() if key[0].startswith("fused_tf_max_pool")]
    assert len(pools) == 2 and None not in pools
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda",))
    eager = pool_train(fmt)
    assert_close_at_scale(compiled[0], eager[0], rtol=1e-6)
    for name, value in eager[1].items():
        assert_close_at_scale(compiled[1][name], value, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("inductor", [False, True])
def test_the_gradient_at_a_pools_output_is_summed_in_the_pools_gradient(inductor, monkeypatch, fresh_cache):
    """The pool's output read twice (a residual add and a convolution): its gradient's two
    parts reach ``fused_tf_max_pool_2d_grad`` as ``dy`` and ``dy_addend`` (fuse_add_to_output),
    which adds them in its kernel (compiled, or op by op), and trains as the job whose
    ``add_n`` sums them."""
    if inductor:
        monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    got = pool_train("NHWC", residual=True)
    grads = [op for op in got[3] if jb.op_type_name(op) == "fused_tf_max_pool_2d_grad"]
    assert len(grads) == 1 and "dy_addend" in grads[0].user_conf.input
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda",))
    want = pool_train("NHWC", residual=True, disabled=["fuse_add_to_output"])
    assert got[2].count("add_n") == 1 and want[2].count("add_n") == 2   # (the forward's residual add, and its gradient's)
    assert_close_at_scale(got[0], want[0], rtol=1e-6)
    for name, value in want[1].items():
        assert_close_at_scale(got[1][name], value, rtol=1e-6, err_msg=name)


def _dropout_train(dtype):
    """A dense layer, dropout 0.3 onto a residual (``_add_to_output``, by the add-to-output
    fusion) and dropout without one, in ``dtype`` AMP or float32; three SGD steps."""
    flow.clear_default_session()
    flow.manual_seed(2)
    cfg = flow.FunctionConfig()
    if dtype is not None:
        cfg.enable_auto_mixed_precision(True)
        cfg.mixed_precision_data_type(dtype)

    @flow.global_function(type="train", function_config=cfg)
    def job(x: tp.Numpy.Placeholder((8, 16))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.dense(x, 16, name="fc1", kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            h = flow.nn.dropout(h, rate=0.3) + x
            h = flow.nn.dropout(flow.layers.dense(h, 16, name="fc2"), rate=0.3)
            loss = flow.math.reduce_mean(flow.math.square(h))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    losses = [float(job(x).mean()) for _ in range(3)]
    adds = [op.name for op in job.graph.proto.net.op if jb.op_type_name(op) == "dropout"
            and "_add_to_output" in op.user_conf.input]
    types = [jb.op_type_name(op) for op in job.graph.proto.net.op]
    return losses, {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}, types, adds


@pytest.mark.parametrize("dtype", [None, flow.bfloat16])
def test_dropout_compiled_by_inductor_gives_the_same_bits(monkeypatch, fresh_cache, tuned_fastest, dtype):
    """Where a GPU times TorchInductor's dropout faster than PyTorch's ``addcmul`` (a clock
    that always does so here, on the CPU), the job trains bit for bit as with ``addcmul``,
    the residual taken into the dropout included."""
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    tuned_fastest(1)
    compiled = _dropout_train(dtype)
    assert {"dropout", "dropout_grad"} <= set(compiled[2]) and len(compiled[3]) == 1
    assert {key[0][0] for key in common._TUNED} == {"dropout", "dropout_grad"} and set(common._TUNED.values()) == {1}
    assert any(key[0] == "dropout" and fn is not None for (key, _), fn in common._INDUCTOR.items())
    monkeypatch.setattr(common, "TUNED_DEVICES", ("cuda",))
    eager = _dropout_train(dtype)
    assert compiled[0] == eager[0]
    for name, value in eager[1].items():
        np.testing.assert_array_equal(compiled[1][name], value, err_msg=name)
