"""Fused multi-head attention: the ``fuse_attention`` pass and ``fused_multi_head_attention``.

References: the same job with the pass disabled (the unfused ops; no dropout, so both draw
nothing), torch float64 autograd of the attention formula with the dropout mask computed by a
numpy implementation of the lowbias32 hash, and the op's declared shapes for the GPU branch,
run on the ``meta`` device. The pass rewrites GPU placements only; the jobs here are placed on
the CPU, whose tag they take for a GPU one (``rewrite.GPU_TAGS``), so the fused job runs on
the CPU's kernels on any machine (tests/test_cuda.py runs it on a GPU).
"""
import math

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import passes
from graphfront import typing as tp
from graphfront.framework import dtypes as dt
from graphfront.framework import job_builder as jb
from graphfront.ops import attention_ops, registry
from graphfront.ops.builder import UserOpConfBuilder
from graphfront.parallel import sbp as _sbp
from graphfront.passes import rewrite
from graphfront.runtime.plan import KernelCtx
from graphfront.testing.compare import assert_close_at_scale, fraction_tolerance
from test_plan import _AtenCalls

B, S, H, D = 2, 8, 2, 8
W = H * D
RNG = np.random.default_rng(0)
X = RNG.standard_normal((B * S, W)).astype(np.float32)
MASK = (RNG.random((B, 1, S, S)) > 0.2).astype(np.float32)


@pytest.fixture(autouse=True)
def cpu_placement_counts_as_gpu(monkeypatch):
    monkeypatch.setattr(rewrite, "GPU_TAGS", rewrite.GPU_TAGS + ("cpu",))


def _dense(x, name, n_in, n_out):
    w = flow.get_variable(f"{name}-weight", (n_in, n_out), initializer=flow.random_normal_initializer(stddev=0.3))
    return flow.matmul(x, w)


def _attention_train(rate, disabled=(), mode=None, devices="0:0"):
    """One BERT attention layer (OneFlow-Benchmark's layout) with a squared-output loss."""
    config = flow.FunctionConfig()
    if disabled:
        passes.disable_passes(config, *disabled)
    if mode:
        config.compile_mode(mode)

    @flow.global_function(type="train", function_config=config)
    def job(x: tp.Numpy.Placeholder((B * S, W)), mask: tp.Numpy.Placeholder((B, 1, S, S))) -> tp.Numpy:
        with flow.scope.placement("cpu", devices):
            def heads(t):
                return flow.transpose(flow.reshape(t, (B, S, H, D)), perm=[0, 2, 1, 3])
            q, k, v = (heads(_dense(x, n, W, W)) for n in ("query", "key", "value"))
            scores = flow.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(D))
            scores = scores + (mask - 1.0) * 10000.0
            probs = flow.nn.softmax(scores)
            if rate:
                probs = flow.nn.dropout(probs, rate=rate)
            ctx = flow.reshape(flow.transpose(flow.matmul(probs, v), perm=[0, 2, 1, 3]), (B * S, W))
            out = _dense(ctx, "output", W, W)
            loss = flow.math.reduce_mean(flow.math.square(out))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return job


def _train(rate, steps=3, disabled=(), mode=None, ndev=1):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)
    job = _attention_train(rate, disabled, mode, devices=f"0:0-{ndev - 1}")
    losses = [job(X, MASK).item() for _ in range(steps)]
    variables = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    assert job.compiled_job.compile_mode == (mode or "plan")
    proto = job.graph.proto
    sbp = {jb.op_type_name(op): {k: _sbp.from_proto(v) for k, v in
                                 proto.job_parallel_view_conf.op_name2sbp_signature_conf[op.name].bn_in_op2sbp_parallel.items()}
           for op in proto.net.op if jb.op_type_name(op).startswith("fused_multi_head_attention")}
    return losses, variables, [jb.op_type_name(op) for op in proto.net.op], sbp


def test_fused_attention_trains_as_the_unfused_ops():
    fused, unfused = _train(0.0), _train(0.0, disabled=["fuse_attention"])
    assert "fused_multi_head_attention" in fused[2] and "fused_multi_head_attention_grad" in fused[2]
    for gone in ("softmax", "softmax_grad", "batch_matmul", "transpose"):
        assert gone not in fused[2], gone
    assert "softmax" in unfused[2] and "fused_multi_head_attention" not in unfused[2]
    assert_close_at_scale(fused[0], unfused[0], rtol=1e-5)
    for name in unfused[1]:
        assert_close_at_scale(fused[1][name], unfused[1][name], rtol=1e-5, err_msg=name)


@pytest.mark.parametrize("mode", [None, "xla", pytest.param("native", marks=pytest.mark.slow)])
def test_fused_attention_with_dropout_trains(mode):
    losses, _, types, _ = _train(0.3, steps=30, mode=mode)
    assert types.count("fused_multi_head_attention") == 1 and "random_mask_like" not in types
    assert np.all(np.isfinite(losses)) and np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


@pytest.mark.parametrize("mode", ["xla", pytest.param("native", marks=pytest.mark.slow)])
def test_fused_attention_in_other_lowerings_trains_as_the_plan(mode):
    fused, plan = _train(0.0, mode=mode), _train(0.0)
    assert "fused_multi_head_attention" in fused[2]
    assert_close_at_scale(fused[0], plan[0], rtol=1e-5)
    for name in plan[1]:
        assert_close_at_scale(fused[1][name], plan[1][name], rtol=1e-5, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_fused_attention_on_two_devices_trains_as_on_one(rate):
    """Data parallel over 2 CPU devices (the batch split): SBP splits the fused op and its
    gradient on the batch axis; the same losses and weights as on one device, dropout
    included (each device hashes its elements' indices in the whole scores)."""
    two, one = _train(rate, ndev=2), _train(rate)
    assert "fused_multi_head_attention" in two[2]
    for op_type, sig in two[3].items():
        assert sig["query_0"] == sig["out_0" if op_type == "fused_multi_head_attention" else "dy_0"] == "S(0)"
        assert sig["philox_seed_0"] == "B", (op_type, sig)
    assert_close_at_scale(two[0], one[0], rtol=1e-5)
    for name in one[1]:
        assert_close_at_scale(two[1][name], one[1][name], rtol=1e-5, err_msg=name)


def test_pass_leaves_other_jobs_alone(monkeypatch):
    assert "fused_multi_head_attention" not in _train(0.1, steps=1, disabled=["fuse_attention"])[2]
    monkeypatch.setattr(rewrite, "GPU_TAGS", ("gpu", "cuda"))   # (on the CPU OneFlow's own dropout masks stay)
    assert "fused_multi_head_attention" not in _train(0.1, steps=1)[2]
    assert "fuse_attention" in passes.pass_names()


# ------------------------------------------------------------------ the op against float64 autograd

def _lowbias32(seed, n):
    """The hash of the CPU kernels' mask, in numpy uint32 arithmetic (wrapping)."""
    with np.errstate(over="ignore"):
        x = (np.arange(n, dtype=np.uint64) + np.uint64(seed)).astype(np.uint32)
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def _conf(op_type, inputs, outputs, attrs):
    b = UserOpConfBuilder(op_type, prefix=False).Op(op_type)
    for arg in inputs:
        b.Input(arg, [f"{arg}/0"])
    for arg in outputs:
        b.Output(arg)
    for name, value in attrs.items():
        b.Attr(name, value)
    b.CheckAndComplete()
    return b.op_conf


def _kernels(shapes, dtype, device, rate, bias_grad=True):
    """The op's forward and grad kernels for inputs of ``shapes`` (name -> shape)."""
    fdt = dt.float64 if dtype == torch.float64 else dt.float16 if dtype == torch.float16 else dt.float32
    ins = list(shapes)
    attrs = {"scale": 0.35, "dropout_rate": rate, "seed": 7}
    descs = {f"{a}/0": jb.TensorDesc(s, fdt) for a, s in shapes.items()}
    b, sq, h, _ = shapes["query"]
    out_shape = (b, sq, h, shapes["value"][3])
    descs.update({"dy/0": jb.TensorDesc(out_shape, fdt), "out/0": jb.TensorDesc(out_shape, fdt),
                  "softmax_lse/0": jb.TensorDesc((b, h, attention_ops.lse_length(sq)), dt.float32),
                  "philox_seed/0": jb.TensorDesc((), dt.int64), "philox_offset/0": jb.TensorDesc((), dt.int64)})
    fwd = _conf("fused_multi_head_attention", ins, ["out", "softmax_lse", "philox_seed", "philox_offset"], attrs)
    grad_outs = ["query_grad", "key_grad", "value_grad"] + (["attn_bias_grad"] if bias_grad else [])
    bwd = _conf("fused_multi_head_attention_grad",
                ["dy"] + ins + ["out", "softmax_lse", "philox_seed", "philox_offset"], grad_outs,
                {a: attrs[a] for a in ("scale", "dropout_rate")})
    make = lambda conf: registry.lookup(conf.user_conf.op_type_name).kernel(KernelCtx(conf, descs, device))  # noqa: E731
    return make(fwd), make(bwd)


@pytest.mark.parametrize("rate", [0.0, 0.4])
@pytest.mark.parametrize("bias_shape", [(B, 1, S, S), (S,), None])
def test_op_matches_float64_autograd_with_the_hashed_mask(rate, bias_shape):
    sk = S + 3
    shapes = {"query": (B, S, H, D), "key": (B, sk, H, D), "value": (B, sk, H, 4)}
    if bias_shape is not None:
        bias_shape = bias_shape[:-1] + (sk,)
        shapes["attn_bias"] = bias_shape
    fwd, bwd = _kernels(shapes, torch.float64, torch.device("cpu"), rate, bias_grad=bias_shape is not None)
    g = torch.Generator().manual_seed(3)
    vals = {a: torch.randn(s, dtype=torch.float64, generator=g) for a, s in shapes.items()}
    bias = vals.get("attn_bias")
    out, lse, seed, offset = fwd(vals["query"], vals["key"], vals["value"], bias)
    # reference: the formula in float64 autograd, the mask from the numpy hash of the drawn seed
    leaves = {a: t.clone().requires_grad_() for a, t in vals.items()}
    q, k, v = (leaves[a].transpose(1, 2) for a in ("query", "key", "value"))
    s = q @ k.transpose(-1, -2) * 0.35 + (leaves["attn_bias"] if bias is not None else 0.0)
    p = torch.softmax(s, dim=-1)
    if rate:
        rate = float(np.float32(rate))  # (the attr is a float32)
        keep = _lowbias32(int(seed), p.numel()) >= np.uint32(int(rate * 2 ** 32))
        p = p * torch.from_numpy(keep.reshape(p.shape)) / (1 - rate)
    ref = (p @ v).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse[..., :S], torch.logsumexp(s, -1).detach(), rtol=1e-12, atol=1e-12)
    assert lse.shape == (B, H, 32) and not lse[..., S:].any() and int(offset) == 0
    dy = torch.randn(ref.shape, dtype=torch.float64, generator=g)
    ref.backward(dy)
    grads = bwd(dy, vals["query"], vals["key"], vals["value"], bias, out, lse, seed, offset)
    for name, got in zip(("query", "key", "value", "attn_bias"), grads):
        if name in leaves:
            torch.testing.assert_close(got, leaves[name].grad, rtol=1e-10, atol=1e-12, msg=name)
    if bias is None:
        assert grads[3] is None


def test_hashed_mask_keeps_one_minus_rate_and_changes_every_run():
    rate, n = 0.3, 200_000
    seed = torch.tensor(12345)
    keep = attention_ops.keep_mask(seed, torch.arange(n), rate)
    np.testing.assert_array_equal(keep.numpy(), _lowbias32(12345, n) >= np.uint32(int(rate * 2 ** 32)))
    assert abs(keep.float().mean().item() - (1 - rate)) <= fraction_tolerance(1 - rate, n)
    fwd, _ = _kernels({"query": (1, 4, 1, 8), "key": (1, 4, 1, 8), "value": (1, 4, 1, 8)}, torch.float32,
                      torch.device("cpu"), 0.5)
    x = torch.ones(1, 4, 1, 8)
    seeds = {int(fwd(x, x, x, None)[2]) for _ in range(5)}
    assert len(seeds) == 5   # a new mask each run (from the op's seeded generator)


def test_gpu_branch_on_the_meta_device_gives_the_declared_blobs():
    """The memory-efficient attention kernels (the GPU branch) with float16 heads of size 64
    and a (B, 1, Sq, Sk) bias: every output has the shape and dtype the op declares, the
    heads are read in place (no copy) and the scores are never made."""
    b, sq, h, d = 4, 40, 3, 64
    shapes = {"query": (b, sq, h, d), "key": (b, sq, h, d), "value": (b, sq, h, d), "attn_bias": (b, 1, sq, sq)}
    meta = torch.device("meta")
    fwd, bwd = _kernels(shapes, torch.float16, meta, 0.1)
    vals = {a: torch.empty(s, dtype=torch.float16, device=meta) for a, s in shapes.items()}
    with _AtenCalls() as calls:
        out, lse, seed, offset = fwd(vals["query"], vals["key"], vals["value"], vals["attn_bias"])
        grads = bwd(torch.empty_like(out), vals["query"], vals["key"], vals["value"], vals["attn_bias"], out, lse,
                    seed, offset)
    assert calls.count["_scaled_dot_product_efficient_attention"] == 1
    assert calls.count["_scaled_dot_product_efficient_attention_backward"] == 1
    assert not {"clone", "copy_", "contiguous", "bmm", "_softmax"} & set(calls.count), calls.count
    assert (out.shape, out.dtype) == ((b, sq, h, d), torch.float16) and out.is_contiguous()
    assert (lse.shape, lse.dtype) == ((b, h, attention_ops.lse_length(sq)), torch.float32)
    assert seed.shape == () and seed.dtype == torch.int64 and offset.shape == ()
    for name, got in zip(("query", "key", "value", "attn_bias"), grads):
        assert (got.shape, got.dtype) == (shapes[name], torch.float16), name


def test_a_device_without_the_memory_efficient_kernels_gets_the_formulas_with_a_warning():
    """The GPU branch probes PyTorch's memory-efficient attention once per device and kind
    before it takes it; where it cannot run (here: the CPU, which has no such kernel) the op
    computes its formulas, with a warning naming the device, instead of failing at the first step."""
    attention_ops._efficient_kernel_runs.cache_clear()
    with pytest.warns(UserWarning, match="memory-efficient attention does not run on cpu"):
        assert not attention_ops._efficient_kernel_runs(torch.device("cpu"), torch.float16, 64, 64, True, True)
    attention_ops._efficient_kernel_runs.cache_clear()
