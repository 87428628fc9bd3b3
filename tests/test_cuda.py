"""graphfront on a CUDA GPU: CUDA-graph replay against the plain plan, random ops inside
captured graphs, float16 AMP with dynamic loss scaling, bad labels and out-of-memory
errors that leave the session usable, steady steps that never wait on the host, and the
guard on GPU counts. Every test here needs CUDA and is skipped without it.

References: the same job run with CUDA graphs switched off (same seeds), the float32
run of the same job, torch eager on the same values, and numpy models of OneFlow's
dynamic loss-scale rule.
"""
import re
import warnings

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import passes
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import OpRunError

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")]

B, D, H, C = 32, 20, 64, 10
LS = "System-Train-DynamicLossScale-train-LossScale"


def _gpu_config(cuda_graph=True, amp=False, mode=None):
    cfg = flow.FunctionConfig()
    cfg.enable_cuda_graph(cuda_graph)
    if mode:
        cfg.compile_mode(mode)
    cfg.default_placement_scope(flow.scope.placement("gpu", "0:0"))
    if amp:
        cfg.enable_auto_mixed_precision(True)  # the GPU's default type: float16
    return cfg


def _data(seed=0, n=1):
    rng = np.random.RandomState(seed)
    return [(rng.randn(B, D).astype(np.float32), rng.randint(0, C, B).astype(np.int32)) for _ in range(n)]


def _mlp_train(cuda_graph=True, amp=False, policy=None, dropout=0.0, lr=(0.1, 0.05), mode=None):
    """An MLP train job on the GPU: momentum SGD with a piecewise learning rate."""
    flow.clear_default_session()
    flow.manual_seed(1)

    @flow.global_function(type="train", function_config=_gpu_config(cuda_graph, amp, mode))
    def train(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)):
        init = flow.random_normal_initializer(stddev=0.1)
        h = flow.layers.dense(x, H, activation=flow.nn.relu, kernel_initializer=init, name="fc1")
        if dropout:
            h = flow.nn.dropout(h, rate=dropout)
        logits = flow.layers.dense(h, C, kernel_initializer=init, name="fc2")
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([3], list(lr)), momentum=0.9,
                           loss_scale_policy=policy).minimize(loss)
        return loss
    return train


def _run(job, batches):
    """Losses of one call per batch (futures read after every call was launched)."""
    futures = [job(x, y) for x, y in batches]
    return np.array([f.get() for f in futures])


def _variables():
    return {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}


# ------------------------------------------------------------------ CUDA graphs

def test_cuda_graph_replay_equals_the_plain_plan():
    batches = _data(n=1) * 6
    eager_job = _mlp_train(cuda_graph=False)
    eager = _run(eager_job, batches)
    eager_vars = _variables()
    assert not eager_job.compiled_job.plan.uses_cuda_graph
    graph_job = _mlp_train(cuda_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed capture warns: no capture may fail here
        replayed = _run(graph_job, batches)
    assert graph_job.compiled_job.plan.uses_cuda_graph and graph_job.compiled_job.plan._graph.graph is not None
    np.testing.assert_allclose(replayed, eager, rtol=1e-6, atol=1e-7)
    for k, v in _variables().items():
        np.testing.assert_allclose(v, eager_vars[k], rtol=1e-6, atol=1e-7, err_msg=k)
    assert eager[-1] < eager[0]


def test_native_step_replays_as_a_cuda_graph_and_trains_as_the_plan(monkeypatch, tmp_path):
    """compile_mode("native") on a GPU (offered there to be measured:
    GRAPHFRONT_NATIVE_ON_GPU=1): its step updates the variables in place, which Inductor's
    CUDA-graph trees replay only for static inputs; none of its graphs is skipped, and it
    trains as the plan does."""
    from torch._dynamo.utils import counters
    monkeypatch.setenv("GRAPHFRONT_NATIVE_ON_GPU", "1")
    monkeypatch.setenv("GRAPHFRONT_CACHE_DIR", str(tmp_path))
    batches = _data(n=1) * 6
    want = _run(_mlp_train(), batches)
    want_vars = _variables()
    job = _mlp_train(mode="native")
    counters.clear()
    got = _run(job, batches)
    assert job.compiled_job.plan.uses_cuda_graph
    assert not counters["inductor"]["cudagraph_skips"]
    # Inductor's fused kernels sum in another order than the plan's: float32 roundings apart
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for k, v in _variables().items():
        np.testing.assert_allclose(v, want_vars[k], rtol=1e-4, atol=1e-5, err_msg=k)


def _random_job(cuda_graph):
    """Every kind of random draw a job makes: the global generator (dropout, unseeded
    bernoulli) and the ops' own (seeded bernoulli, random_mask_like, a permutation,
    decode_random)."""
    flow.clear_default_session()
    flow.manual_seed(7)

    @flow.global_function(type="train", function_config=_gpu_config(cuda_graph))
    def train(x: tp.Numpy.Placeholder((B, D))):
        w = flow.get_variable("w", (D,), initializer=flow.ones_initializer())
        h = flow.nn.dropout(x * w, rate=0.5)
        p = flow.constant(0.3, flow.float, (B, D))
        seeded = flow.random.bernoulli(p, seed=11, name="seeded")
        unseeded = flow.random.bernoulli(p, name="unseeded")
        mask = flow.nn.random_mask_like(x, 0.25, seed=5)
        perm = flow.random.generate_random_batch_permutation_indices(x, seed=3)
        noise = flow.data.decode_random((D,), flow.float, batch_size=B, initializer=flow.truncated_normal(1.0))
        loss = flow.math.reduce_mean(h)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.01]), momentum=0).minimize(loss)
        return h, seeded, unseeded, mask, perm, noise
    return train


def test_random_ops_in_a_captured_graph_follow_the_uncaptured_draws():
    x = np.ones((B, D), np.float32)
    plain = _random_job(cuda_graph=False)
    want = [[np.asarray(t) for t in plain(x).get()] for _ in range(4)]
    job = _random_job(cuda_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [[np.asarray(t) for t in job(x).get()] for _ in range(4)]
    assert job.compiled_job.plan.uses_cuda_graph
    for step, (g, w) in enumerate(zip(got, want)):
        for i, (a, b) in enumerate(zip(g, w)):
            np.testing.assert_array_equal(a, b, err_msg=f"step {step}, output {i}")
    assert not np.array_equal(got[2][0], got[3][0])     # new draws every replay
    assert not np.array_equal(got[2][5], got[3][5])
    assert np.abs(got[3][5]).max() <= 2.0               # truncated at two standard deviations


# ------------------------------------------------------------------ AMP

def test_amp_on_gpu_is_float16_and_tracks_float32():
    batches = _data(n=12)
    ref = _run(_mlp_train(), batches)
    amp_job = _mlp_train(amp=True, policy=flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=1024.0))
    amp = _run(amp_job, batches)
    casts = {jb.user_attrs(op)["dtype"] for op in amp_job.graph.proto.net.op
             if op.HasField("user_conf") and op.user_conf.op_type_name == "cast"}
    assert flow.float16 in casts and flow.bfloat16 not in casts
    np.testing.assert_allclose(amp, ref, rtol=5e-3)
    assert not np.array_equal(amp, ref)


def test_dynamic_loss_scale_skips_overflowing_steps_on_the_device():
    """float16 gradients of a loss scaled by 2**30 overflow: those steps change no variable
    and halve the scale (decided on the device: the update is computed, then discarded)."""
    policy = flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=2.0 ** 30, increment_period=1000)
    train = _mlp_train(amp=True, policy=policy)
    (x, y), = _data()
    train.compiled_job
    before = _variables()
    for _ in range(3):
        train(x, y).get()
    after = _variables()
    assert after[LS][0] == 2.0 ** 27
    for k in before:
        if "-momentum" in k or k.startswith("fc"):
            np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    assert after["System-Train-TrainStep-train"][0] == 0   # a skipped step does not count
    for _ in range(30):   # the scale halves until the gradients fit float16: training resumes
        train(x, y).get()
        if _variables()["System-Train-TrainStep-train"][0] > 0:
            break
    resumed = _variables()
    assert resumed["System-Train-TrainStep-train"][0] == 1 and resumed[LS][0] < 2.0 ** 27
    assert not np.array_equal(resumed["fc1-weight"], before["fc1-weight"])


# ------------------------------------------------------------------ batch norm kernels

def _batch_norm_kernels(step):
    """Names of the CUDA kernels of ``step()`` that belong to batch norm (cuDNN's ``bn_*``,
    PyTorch's ``batch_norm_*``), from torch.profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return {e.name for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and re.search(r"(?i)bn_|batch_?norm", e.name)}


def test_batch_norm_takes_the_kernels_pytorch_eager_takes_and_matches_it():
    """A float16 NHWC batch norm's train step runs the same batch-norm kernels as PyTorch
    eager's ``F.batch_norm`` forward and backward on the same channels-last input (cuDNN's
    where PyTorch takes cuDNN), with its values: the loss, the moving statistics and one SGD
    step of gamma and beta. Tolerance: float16's 2**-10 (both sides' kernels read the same
    float16 values; only float32 reduction order may differ)."""
    n, hw, ch, momentum, eps, lr = 16, 8, 32, 0.9, 1e-3, 1e-3
    flow.clear_default_session()

    @flow.global_function(type="train", function_config=_gpu_config(cuda_graph=False))
    def train(x: tp.Numpy.Placeholder((n, hw, hw, ch)), w: tp.Numpy.Placeholder((n, hw, hw, ch))):
        y = flow.layers.batch_normalization(flow.cast(x, flow.float16), axis=3, momentum=momentum, epsilon=eps,
                                            name="bn")
        loss = flow.math.reduce_sum(flow.cast(y, flow.float) * w)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr])).minimize(loss)
        return loss

    rng = np.random.RandomState(0)
    x = (rng.randn(n, hw, hw, ch) * 2 + 1).astype(np.float32)
    w = rng.randn(n, hw, hw, ch).astype(np.float32)
    losses = []   # (one step from the initial variables: the first call, compilation included)
    kernels = _batch_norm_kernels(lambda: losses.append(train(x, w).get().numpy()))
    got = {k: v.numpy() for k, v in flow.get_all_variables().items() if k.startswith("bn-")}

    def eager():
        dev = torch.device("cuda")
        x16 = torch.from_numpy(x).to(dev, torch.float16).permute(0, 3, 1, 2)   # channels-last NCHW
        gamma = torch.ones(ch, device=dev, requires_grad=True)
        beta = torch.zeros(ch, device=dev, requires_grad=True)
        stats = torch.zeros(ch, device=dev), torch.ones(ch, device=dev)
        y = torch.nn.functional.batch_norm(x16, *stats, gamma, beta, training=True, momentum=1 - momentum, eps=eps)
        loss = (y.float() * torch.from_numpy(w).to(dev).permute(0, 3, 1, 2)).sum()
        loss.backward()
        return {"loss": loss.detach(), "bn-gamma": (gamma - lr * gamma.grad).detach(),
                "bn-beta": (beta - lr * beta.grad).detach(), "bn-moving_mean": stats[0],
                "bn-moving_variance": stats[1]}
    ref = {}
    eager_kernels = _batch_norm_kernels(lambda: ref.update(eager()))
    assert kernels == eager_kernels and kernels
    np.testing.assert_allclose(losses[0], ref["loss"].cpu().numpy(), rtol=2 ** -10)
    for k in ("bn-gamma", "bn-beta", "bn-moving_mean", "bn-moving_variance"):
        np.testing.assert_allclose(got[k], ref[k].cpu().numpy(), rtol=2 ** -10, atol=lr * 2 ** -10, err_msg=k)


# ------------------------------------------------------------------ no host sync

def _steady_losses_without_sync(train, batches, warmup=3):
    """``(losses of the first warmup calls, losses of the later ones)``: the later calls run
    under torch's sync debug mode "error", which raises on any call that synchronizes with the
    host; their results are read afterwards."""
    warm = _run(train, batches[:warmup])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        futures = [train(x, y) for x, y in batches[warmup:]]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return warm, np.array([f.get() for f in futures])


@pytest.mark.parametrize("cuda_graph", [True, False])
def test_a_steady_train_step_never_waits_on_the_host(cuda_graph):
    """After the first calls, a train step (momentum SGD, piecewise learning rate,
    float16 AMP with dynamic loss scaling, dropout) only copies its feeds in: torch's sync
    debug mode raises on any synchronizing call. The results are read afterwards."""
    policy = flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=1024.0, increment_period=2)
    train = _mlp_train(cuda_graph=cuda_graph, amp=True, policy=policy, dropout=0.1)
    warm, losses = _steady_losses_without_sync(train, _data(n=8))
    assert train.compiled_job.plan.uses_cuda_graph is cuda_graph
    assert np.isfinite(losses).all() and np.isfinite(warm).all()
    assert _variables()["System-Train-TrainStep-train"][0] > 3   # the steady steps trained


def _transformer_block_train(cuda_graph=True):
    """A BERT-like train job on the GPU: dense + gelu, dropout, a layer norm, AdamW with
    clipping by global norm and a warmup schedule, float16 AMP with dynamic loss scaling."""
    flow.clear_default_session()
    flow.manual_seed(2)

    @flow.global_function(type="train", function_config=_gpu_config(cuda_graph, amp=True))
    def train(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)):
        init = flow.random_normal_initializer(stddev=0.1)
        h = flow.layers.dense(x, H, activation=flow.math.gelu, kernel_initializer=init, name="fc1")
        h = flow.layers.layer_norm(flow.nn.dropout(h, rate=0.1), begin_norm_axis=-1, begin_params_axis=-1, name="ln")
        logits = flow.layers.dense(h, C, kernel_initializer=init, name="fc2")
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        lr = flow.optimizer.PolynomialScheduler(1e-3, 100, 0.0, warmup=flow.optimizer.warmup.linear(3, 0.1))
        flow.optimizer.AdamW(lr, weight_decay=0.01, grad_clipping=flow.optimizer.grad_clipping.by_global_norm(1.0),
                             loss_scale_policy=flow.optimizer.loss_scale.dynamic_loss_scale(
                                 initial_loss_scale=1024.0, increment_period=2)).minimize(loss)
        return loss
    return train


def test_a_steady_transformer_block_step_never_waits_on_the_host():
    """The BERT-style step's GPU paths: the fused layer-norm gradient, gelu_backward, the
    concatenated non-finite count and square sum, the grouped loss-scale undo, the fused
    AdamW skip; after the first calls a step synchronizes with nothing (torch's sync debug
    mode raises), and the CUDA-graph replay gives the plain plan's losses."""
    batches = _data(seed=3, n=8)
    losses = {}
    for graph in (True, False):
        train = _transformer_block_train(cuda_graph=graph)
        losses[graph] = np.concatenate(_steady_losses_without_sync(train, batches))
        assert train.compiled_job.plan.uses_cuda_graph is graph
        types = {jb.op_type_name(op) for op in train.compiled_job.plan.order}
        assert {"fused_layer_norm_grad", "multi_count_not_finite", "multi_scalar_mul_by_tensor",
                "multi_tensor_adam_update"} <= types, types
    assert np.isfinite(losses[True]).all()
    # (one seed: the captured graph replays the plain plan's dropout draws)
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-3, atol=1e-4)


def test_non_finite_count_runs_an_inductor_kernel():
    """multi_count_not_finite on the GPU: TorchInductor's Triton reduction over the
    concatenated float32 and float16 gradients counts their inf and NaN as numpy does."""
    from graphfront.ops import common, registry
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((64, 33), (1000,), (3, 5, 7))]
    xs[0][3, 4], xs[1][999], xs[2][1, 2, 3], xs[2][0, 0, 0] = np.inf, np.nan, -np.inf, np.nan
    count = registry.lookup("multi_count_not_finite").kernel(None)
    for dtype in (torch.float32, torch.float16):
        got = count([torch.from_numpy(x).to("cuda", dtype) for x in xs])
        assert got.device.type == "cuda" and got.tolist() == [4]
    assert any(key == ("count_not_finite",) and sig[0][3].type == "cuda" and fn is not None
               for (key, sig), fn in common._INDUCTOR.items())


def _attention_train(rate=0.0, cuda_graph=True, amp=False, fuse=True, seq=16, heads=2, head=64):
    """One BERT attention layer on the GPU (heads of 64: the memory-efficient kernel's
    case), a padding mask fed as (B, 1, S, S), SGD on a squared-output loss; the labels
    feed is unused."""
    flow.clear_default_session()
    flow.manual_seed(4)
    cfg = _gpu_config(cuda_graph, amp)
    if not fuse:
        passes.disable_passes(cfg, "fuse_attention")
    width, b = heads * head, 4

    @flow.global_function(type="train", function_config=cfg)
    def train(x: tp.Numpy.Placeholder((b * seq, width)), mask: tp.Numpy.Placeholder((b, 1, seq, seq))):
        init = flow.random_normal_initializer(stddev=0.05)

        def dense(t, name):
            return flow.matmul(t, flow.get_variable(name, (width, width), initializer=init))

        def split_heads(t):
            return flow.transpose(flow.reshape(t, (b, seq, heads, head)), perm=[0, 2, 1, 3])
        q, k, v = (split_heads(dense(x, n)) for n in ("q", "k", "v"))
        scores = flow.matmul(q, k, transpose_b=True) * (1.0 / np.sqrt(head)) + (mask - 1.0) * 10000.0
        probs = flow.nn.softmax(scores)
        if rate:
            probs = flow.nn.dropout(probs, rate=rate)
        ctx = flow.reshape(flow.transpose(flow.matmul(probs, v), perm=[0, 2, 1, 3]), (b * seq, width))
        loss = flow.math.reduce_mean(flow.math.square(dense(ctx, "o")))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss
    rng = np.random.RandomState(5)
    feeds = [(rng.randn(b * seq, width).astype(np.float32), (rng.rand(b, 1, seq, seq) > 0.2).astype(np.float32))
             for _ in range(6)]
    return train, feeds


def test_fused_attention_runs_memory_efficient_attention_and_trains_as_the_unfused_ops():
    """float32, no dropout: the fused job (PyTorch's memory-efficient attention forward and
    backward) gives the unfused job's losses and weights, up to float32 rounding of sums over
    the key length and the head size, a few steps deep."""
    runs = {}
    for fuse in (True, False):
        train, feeds = _attention_train(fuse=fuse)
        types = {jb.op_type_name(op) for op in train.compiled_job.plan.order} if fuse else None
        runs[fuse] = _run(train, feeds), _variables()
        if fuse:
            assert "fused_multi_head_attention_grad" in types and "softmax" not in types, types
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-4)
    for name in ("q", "k", "v", "o"):
        np.testing.assert_allclose(runs[True][1][name], runs[False][1][name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_fused_attention_dropout_in_a_captured_graph_follows_the_uncaptured_draws():
    """float16 AMP and dropout 0.1: the memory-efficient kernel's Philox draws replay inside
    the CUDA graph as uncaptured (same seed), the steady steps never wait on the host."""
    losses = {}
    for graph in (True, False):
        train, feeds = _attention_train(rate=0.1, cuda_graph=graph, amp=True)
        warm, steady = _steady_losses_without_sync(train, feeds)
        assert train.compiled_job.plan.uses_cuda_graph is graph
        losses[graph] = np.concatenate([warm, steady])
    assert np.isfinite(losses[True]).all()
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-3, atol=1e-5)


def _residual_train(fuse=True, cuda_graph=True, amp=False):
    """Two residual blocks in NHWC on the GPU, each: convolution, batch norm + relu,
    convolution, batch norm + the block's input + relu (the gradient at the first block's
    output reaches its fused batch norm in two parts: ``dy`` and ``dy_addend``); a dense
    classifier; SGD."""
    flow.clear_default_session()
    flow.manual_seed(3)
    cfg = _gpu_config(cuda_graph, amp)
    if not fuse:
        passes.disable_passes(cfg, "fuse_normalization_add_relu")
    hw, ch = 8, 32

    @flow.global_function(type="train", function_config=cfg)
    def train(x: tp.Numpy.Placeholder((B, hw, hw, ch)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)):
        def conv(t, name):
            w = flow.get_variable(f"{name}-weight", (ch, 3, 3, ch), initializer=flow.random_normal_initializer(stddev=0.1))
            return flow.nn.conv2d(t, w, 1, "SAME", data_format="NHWC", name=name)
        out = x
        for i in (1, 3):
            a = flow.layers.batch_normalization_relu(conv(out, f"conv{i}"), axis=3, name=f"bn{i}")
            out = flow.layers.batch_normalization_add_relu(conv(a, f"conv{i + 1}"), out, axis=3, name=f"bn{i + 1}")
        logits = flow.layers.dense(flow.math.reduce_mean(out, axis=[1, 2]), C, name="fc",
                                   kernel_initializer=flow.random_normal_initializer(stddev=0.1))
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss
    rng = np.random.RandomState(0)
    batches = [(rng.randn(B, hw, hw, ch).astype(np.float32), rng.randint(0, C, B).astype(np.int32)) for _ in range(6)]
    return train, batches


def test_batch_norm_add_relu_runs_inductor_kernels_and_trains_as_the_unfused_ops(monkeypatch):
    """float32 (no TF32 convolutions, which would round the two jobs' inputs apart): the fused
    job (TorchInductor's Triton kernels for normalization_add_relu and its gradient) gives the
    unfused job's losses and weights, up to float32 rounding of the per-channel sums (another
    reduction order), a few steps deep."""
    from graphfront.ops import common
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    runs = {}
    for fuse in (True, False):
        train, batches = _residual_train(fuse=fuse, cuda_graph=False)
        types = {jb.op_type_name(op) for op in train.compiled_job.plan.order}
        runs[fuse] = _run(train, batches), _variables()
        assert ("normalization_add_relu_grad" in types) is fuse and ("relu" in types) is not fuse, types
        assert any("dy_addend" in op.user_conf.input for op in train.compiled_job.plan.order) is fuse
    compiled = [fn for (key, sig), fn in common._INDUCTOR.items() if key[0].startswith("normalization_add_relu")
                and sig[0][3].type == "cuda"]
    assert compiled and None not in compiled   # (compiled: no fallback warning)
    tuned = {key[0] for key, sig in common._TUNED if sig[0][3].type == "cuda"}
    assert tuned == {"normalization_add_relu", "normalization_add_relu_grad"}, tuned
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-4)
    for name, value in runs[False][1].items():
        np.testing.assert_allclose(runs[True][1][name], value, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("fastest", [0, 1])
def test_each_batch_norm_add_relu_kernel_choice_trains_as_the_unfused_ops(fastest, monkeypatch, tuned_fastest):
    """Both kernels a fused batch norm may be timed to (a clock that finds ``fastest``
    faster): the whole op in TorchInductor's Triton kernels (0), cuDNN's batch norm, then a
    Triton add and relu writing the mask (1); float32 without TF32, as above."""
    from graphfront.ops import common
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    tuned_fastest(fastest)
    runs = {}
    for fuse in (True, False):
        train, batches = _residual_train(fuse=fuse, cuda_graph=False)
        runs[fuse] = _run(train, batches), _variables()
    assert set(common._TUNED.values()) == {fastest}
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-4)
    for name, value in runs[False][1].items():
        np.testing.assert_allclose(runs[True][1][name], value, rtol=1e-4, atol=1e-6, err_msg=name)


def test_fused_bias_add_cross_entropy_in_triton_trains_as_the_unfused_ops():
    """float16 AMP: the fused classifier loss (TorchInductor's Triton kernels, forward and
    gradient) reads the matmul's float16 logits uncast and trains as the unfused cast,
    bias_add and loss; the softmax's sums round in another order (float32), which the float16
    gradients of the weights may round apart by one float16 ulp (2**-11) a step."""
    from graphfront.ops import common
    from test_fused_cross_entropy import FUSED, _train
    fused = _train(amp=True, device="gpu")
    unfused = _train(amp=True, device="gpu", disabled=["fuse_bias_add_sparse_softmax_cross_entropy"])
    assert FUSED in fused[2] and FUSED not in unfused[2]
    assert any(key[0].startswith(FUSED) and sig[0][3].type == "cuda" and fn is not None
               for (key, sig), fn in common._INDUCTOR.items())
    np.testing.assert_allclose(fused[0], unfused[0], rtol=1e-3)
    for name, value in unfused[1].items():
        np.testing.assert_allclose(fused[1][name], value, rtol=1e-3, atol=1e-4, err_msg=name)


def test_batch_norm_add_relu_with_amp_replays_in_a_captured_graph_without_host_sync():
    """float16 AMP: the Inductor kernels are captured into the step's CUDA graph; the steady
    steps never wait on the host and give the uncaptured steps' losses (the same kernels; cuDNN's
    weight-gradient algorithms may sum in another order: float16's 2**-10)."""
    losses = {}
    for graph in (True, False):
        train, batches = _residual_train(cuda_graph=graph, amp=True)
        warm, steady = _steady_losses_without_sync(train, batches)
        assert train.compiled_job.plan.uses_cuda_graph is graph
        losses[graph] = np.concatenate([warm, steady])
    assert np.isfinite(losses[True]).all()
    np.testing.assert_allclose(losses[True], losses[False], rtol=2 ** -10)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_fused_max_pool_runs_inductor_kernels_and_trains_as_its_kernels_op_by_op(fmt, monkeypatch):
    """The fused max pool (its SAME padding, relu and crop) and its gradient as TorchInductor's
    Triton kernels against the same kernels op by op, float32 without TF32: the same argmax,
    overlapping windows' gradients summed in another order, and cuDNN's weight gradients
    possibly too: float32 rounding, a few ulps a step over three steps."""
    from graphfront.ops import common
    from test_inductor_kernels import pool_train
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    compiled = pool_train(fmt, "gpu")
    assert any(key[0].startswith("fused_tf_max_pool") and sig[0][3].type == "cuda" and fn is not None
               for (key, sig), fn in common._INDUCTOR.items())
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ())
    eager = pool_train(fmt, "gpu")
    np.testing.assert_allclose(compiled[0], eager[0], rtol=1e-5)
    for name, value in eager[1].items():
        np.testing.assert_allclose(compiled[1][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


# ------------------------------------------------------------------ bad values

def test_bad_fed_label_raises_the_ops_error_and_the_next_call_is_right():
    batches = _data(n=4)
    ref = _run(_mlp_train(), batches)
    train = _mlp_train()
    x, y = batches[0]
    got = [train(x, y).get()]
    bad = y.copy()
    bad[5] = C + 3
    for _ in range(2):  # (eagerly, then once the graph is captured)
        with pytest.raises(OpRunError, match=rf"sparse_softmax_cross_entropy.*\[0, {C}\), received {C + 3} "
                                             r"at index \(5,\)"):
            train(x, bad)
        got += [train(*batches[len(got)]).get()]
    got += [train(*batches[3]).get()]
    torch.cuda.synchronize()   # no device-side assert happened
    np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("cuda_graph", [True, False])
def test_bad_computed_label_raises_after_the_step_without_a_device_assert(cuda_graph):
    """Labels held in a variable (computed, not fed) are checked on the device: the step
    runs on labels clamped into range, then raises the op's error with the bad value and
    its index; the process has no device-side assert and the next good call is right."""
    flow.clear_default_session()

    @flow.global_function(function_config=_gpu_config(cuda_graph))
    def loss_job(logits: tp.Numpy.Placeholder((4, C))) -> tp.Numpy:
        labels = flow.get_variable("labels", (4,), dtype=flow.int32, initializer=flow.zeros_initializer(flow.int32),
                                   trainable=False)
        return flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)

    logits = np.random.RandomState(0).randn(4, C).astype(np.float32)

    def reference(labels):
        return torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels).long(),
                                                 reduction="none").numpy()
    good = np.array([1, 0, 9, 3], np.int32)
    flow.load_variables({"labels": good})
    for _ in range(2):  # (eagerly, then captured)
        np.testing.assert_allclose(loss_job(logits), reference(good), rtol=1e-5)
    flow.load_variables({"labels": np.array([1, 0, -2, 3], np.int32)})
    with pytest.raises(OpRunError, match=r"\[0, 10\), received -2 at index \(2,\)"):
        loss_job(logits)
    torch.cuda.synchronize()
    good2 = np.array([2, 5, 7, 9], np.int32)
    flow.load_variables({"labels": good2})
    np.testing.assert_allclose(loss_job(logits), reference(good2), rtol=1e-5)


def _computed_label_train(cuda_graph, amp):
    """An MLP train job on the GPU whose labels are computed in the job (checked in the
    step), momentum SGD, with float16 AMP and dynamic loss scaling when ``amp``."""
    flow.clear_default_session()
    flow.manual_seed(1)
    policy = flow.optimizer.loss_scale.dynamic_loss_scale(initial_loss_scale=1024.0) if amp else None

    @flow.global_function(type="train", function_config=_gpu_config(cuda_graph, amp))
    def train(x: tp.Numpy.Placeholder((B, D)), ids: tp.Numpy.Placeholder((B,), dtype=flow.int32)):
        labels = flow.math.add(ids, flow.constant(0, dtype=flow.int32, shape=(B,)))  # (computed in the job)
        init = flow.random_normal_initializer(stddev=0.1)
        h = flow.layers.dense(x, H, activation=flow.nn.relu, kernel_initializer=init, name="fc1")
        logits = flow.layers.dense(h, C, kernel_initializer=init, name="fc2")
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9,
                           loss_scale_policy=policy).minimize(loss)
        return loss
    return train


@pytest.mark.parametrize("cuda_graph, amp", [(True, False), (False, False), (True, True)])
def test_a_train_step_on_a_bad_computed_label_changes_no_variable(cuda_graph, amp):
    """A label computed in the job out of range: the step runs on the clamped label without
    a device-side assert, its variable updates are skipped on the device (the update ops'
    skip_if, the train step put back: no read on the host), and the call raises the op's
    error; the run then goes on as a run without that call (same losses and variables)."""
    batches = _data(n=3)
    reference = _computed_label_train(cuda_graph, amp)
    want = _run(reference, batches)
    want_vars = _variables()
    train = _computed_label_train(cuda_graph, amp)
    got = [train(*batches[0]).get()]
    x, y = batches[1]
    bad = y.copy()
    bad[5] = C + 3
    for _ in range(2):  # (eagerly, then once the graph is captured)
        with pytest.raises(OpRunError, match=rf"\[0, {C}\), received {C + 3} at index \(5,\)"):
            train(x, bad)
    got += [train(*b).get() for b in batches[1:]]
    torch.cuda.synchronize()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for k, v in _variables().items():
        np.testing.assert_allclose(v, want_vars[k], rtol=1e-6, err_msg=k)


def test_out_of_memory_names_the_job_and_the_session_stays_usable():
    flow.clear_default_session()
    free, total = torch.cuda.mem_get_info()
    n = int(0.3 * free) // 4  # float32 elements: each blob fits (the build-time check passes them) ...

    @flow.global_function(function_config=_gpu_config())
    def huge(x: tp.Numpy.Placeholder((1,))) -> tp.Numpy:   # (times a feed: not folded when compiled)
        a = flow.constant(1.0, flow.float, (n,)) * x
        b, c = a + 1.0, a * 3.0
        d = a * b - c                                       # ... but a, b, c and d together do not
        return flow.math.reduce_sum(a + b + c + d)

    @flow.global_function(function_config=_gpu_config())
    def small(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x * 2.0
    with pytest.raises(flow.DeviceMemoryError, match=r"job 'huge' ran out of GPU memory: an allocation of [0-9.]+ "
                                                     r"[KMGT]?i?B failed"):
        huge(np.ones(1, np.float32))
    np.testing.assert_array_equal(small(np.arange(3, dtype=np.float32)), [0.0, 2.0, 4.0])


# ------------------------------------------------------------------ GPU counts

def test_more_gpus_than_the_machine_has_is_a_clear_error():
    n = torch.cuda.device_count() + 1
    flow.config.gpu_device_num(n)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2 * n, 3))) -> tp.Numpy:
        return flow.math.relu(x)
    with pytest.raises(flow.JobBuildError, match=rf"{n} gpu devices per machine cannot run here: this machine has "
                                                 rf"{n - 1} GPU\(s\)"):
        job(np.zeros((2 * n, 3), np.float32))


def test_a_gpu_id_the_machine_lacks_is_a_clear_error():
    n = torch.cuda.device_count()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        with flow.scope.placement("gpu", f"0:{n}"):
            return flow.math.relu(x)
    # refused where the user places it, by flow.scope.placement (measured on a 1-GPU H200)
    with pytest.raises(flow.JobBuildError, match=rf"GPU {n} does not exist \(this machine has {n}\)"):
        job(np.zeros(3, np.float32))


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason="the NCCL path needs two GPUs; it has never run on two (none was available)")
def test_data_parallel_on_two_gpus_matches_one():
    batches = _data(n=4)

    def losses(ngpu):
        flow.clear_default_session()
        flow.manual_seed(0)
        flow.config.gpu_device_num(ngpu)

        @flow.global_function(type="train")
        def train(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
            logits = flow.layers.dense(x, C, kernel_initializer=flow.random_normal_initializer(0.1), name="fc")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
            return loss
        return np.array([train(x, y) for x, y in batches])
    np.testing.assert_allclose(losses(2), losses(1), rtol=1e-5)
