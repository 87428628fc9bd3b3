"""The models of the benchmarks (examples/resnet50, examples/bert) against their hand-written
PyTorch twins (benchmarks/torch_models.py): one train step of a tiny configuration gives
the same loss and gradients in float32 on the CPU (and on CUDA where present), and BERT's
loss falls on a fixed batch as PyTorch's does, with and without AMP.

Gradients are read as the change of each variable after one SGD step with learning rate 1
and momentum 0 (``w0 - w1``). Tolerances: float32 (eps 1.2e-7) sums of up to ~10^3 terms
in a different order on each side, through a few dozen layers, agree to ~1e-5 relative;
the checks allow 2e-4 of the largest value (loss: 1e-5 relative).
"""
import argparse
import copy
import importlib.util
import os
import sys

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.session import default_session, trace
from graphfront.parallel import sbp as _sbp
from graphfront.passes import complete, rewrite
from graphfront.passes.boxing import boxing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("examples/bert", "examples/resnet50", "benchmarks"):
    sys.path.insert(0, os.path.join(ROOT, sub))

import pretrain  # noqa: E402
import resnet_model  # noqa: E402
import torch_models as tm  # noqa: E402

_spec = importlib.util.spec_from_file_location("resnet50_train", os.path.join(ROOT, "examples/resnet50/train.py"))
r50 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(r50)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("gpu", marks=[pytest.mark.cuda, cuda])]


@pytest.fixture(autouse=True)
def no_tf32():
    """float32 on CUDA means float32 here: no TF32 matmuls or convolutions on either side."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _variables():
    return {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}


def _close(got, want, rel=2e-4, weights=()):
    """``got`` within ``rel`` of the largest ``want``, plus the rounding of ``w0 - w1`` when
    ``got`` is the difference of the float32 ``weights`` (w0, w1): 1 ulp of each."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    ulp = sum(float(np.abs(w).max()) for w in weights) * np.finfo(np.float32).eps
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * max(np.abs(want).max(), 1e-12) + ulp)


def _grad_close(before, after, name, grad):
    """The gradient read from one SGD step with learning rate 1 equals ``grad``."""
    _close(before[name] - after[name], grad.detach().cpu().numpy(), weights=(before[name], after[name]))


def _sgd1():
    return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1.0]), momentum=0)


# ----------------------------------------------------------------------------- ResNet-50

def _resnet_args(**kw):
    args = r50.add_arguments(argparse.ArgumentParser()).parse_args([])
    args.__dict__.update(dict(block_counts=[1, 1, 1, 1], width=0.125, num_classes=10, image_size=64, wd=0.0,
                              batch_size_per_device=4, use_fp16=False))
    args.__dict__.update(kw)
    return args


@pytest.mark.parametrize("channel_last", [False, True], ids=["NCHW", "NHWC"])
@pytest.mark.parametrize("device,fused", [("cpu", False), ("cpu", True),
                                          pytest.param("gpu", True, marks=[pytest.mark.cuda, cuda])])
def test_resnet50_train_step_matches_pytorch(device, fused, channel_last, monkeypatch):
    """One step against PyTorch's model; on a GPU graphfront's batch norms with their relu (and
    residual add) are normalization_add_relu ops, as ``fused`` makes them on the CPU."""
    if fused and device == "cpu":  # (fuse_normalization_add_relu rewrites GPU placements only)
        monkeypatch.setattr(rewrite, "GPU_TAGS", rewrite.GPU_TAGS + ("cpu",))
    args = _resnet_args(device=device, channel_last=channel_last)
    rng = np.random.default_rng(0)
    images = rng.standard_normal((4, 3, 64, 64)).astype(np.float32)
    labels = rng.integers(0, 10, 4).astype(np.int32)
    fed = np.ascontiguousarray(images.transpose(0, 2, 3, 1)) if channel_last else images

    @flow.global_function(type="train")
    def step(x: tp.Numpy.Placeholder(fed.shape), y: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement(device, "0:0"):
            logits = resnet_model.resnet50(x, args)
            loss = flow.math.reduce_mean(flow.nn.softmax_cross_entropy_with_logits(
                r50.label_smoothing(y, 10, 0.1, logits.dtype), logits))
        _sgd1().minimize(loss)
        return loss

    types = [jb.op_type_name(op) for op in step.compiled_job.job.net.op]  # (compiles, initializes the variables)
    fusable = 1 + 3 * sum(args.block_counts)   # (the stem's, and each block's but its shortcut's)
    assert types.count("normalization_add_relu") == (fusable if fused else 0) and ("relu" in types) is not fused
    before = _variables()
    loss = step(fed, labels)
    after = _variables()
    convs, bns = tm.resnet_variable_names(args.block_counts)
    assert {c + "-weight" for c in convs} | {b + "-gamma" for b in bns} | {"fc1001-weight"} <= set(before)
    if channel_last:   # (out, k, k, in) convolution weights, as OneFlow-Benchmark's NHWC model
        assert before["conv1-weight"].shape == (8, 7, 7, 3)
        before, after = (tm.oihw_weights(d, args.block_counts) for d in (before, after))

    dev = "cuda" if device == "gpu" else "cpu"
    model = tm.TorchResNet50(before, args.block_counts).to(dev).train()
    ref = tm.smoothed_cross_entropy(model(torch.from_numpy(images).to(dev)), torch.from_numpy(labels).to(dev), 10, 0.1)
    ref.backward()
    np.testing.assert_allclose(float(np.asarray(loss).reshape(-1)[0]), ref.item(), rtol=1e-5)
    for name in ("conv1-weight", "res2_0_branch2b-weight", "res5_0_branch1-weight", "res3_0_branch2c_bn-gamma",
                 "conv1_bn-beta", "fc1001-weight", "fc1001-bias"):
        _grad_close(before, after, name, model.v[name].grad)
    # batch norm's moving statistics moved as torch's running statistics (momentum 0.1)
    _close(after["conv1_bn-moving_mean"], model.v["conv1_bn-moving_mean"].cpu().numpy())


def test_resnet50_example_checkpoint_keeps_oneflow_names(tmp_path):
    losses = r50.main(["--device", "cpu", "--batch_size", "2", "--image_size", "32", "--block_counts", "1,1,1,1",
                       "--width", "0.125", "--num_classes", "10", "--steps", "2", "--loss_print_every_n_iter", "1",
                       "--model_save_dir", str(tmp_path / "ckpt")])
    assert len(losses) == 2 and all(np.isfinite(losses))
    saved = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"conv1-weight", "conv1_bn-gamma", "conv1_bn-beta", "conv1_bn-moving_mean", "conv1_bn-moving_variance",
            "res2_0_branch1-weight", "res2_0_branch2a-weight", "res5_0_branch2c_bn-gamma", "fc1001-weight",
            "fc1001-bias"} <= saved
    w = np.fromfile(tmp_path / "ckpt" / "res2_0_branch2b-weight" / "out", np.float32)
    assert w.size == 8 * 8 * 3 * 3   # (inner 64 * 0.125)^2 * 3 * 3


# ----------------------------------------------------------------------------- BERT

def _bert_args(**kw):
    args = pretrain.add_arguments(argparse.ArgumentParser()).parse_args([])
    args.__dict__.update(dict(batch_size_per_device=4, seq_length=16, max_predictions_per_seq=4,
                              num_hidden_layers=2, num_attention_heads=2, hidden_size_per_head=8, vocab_size=50,
                              max_position_embeddings=32, hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0, device="cpu", iter_num=10 ** 6,
                              warmup_proportion=0.0, learning_rate=1e-3))
    args.__dict__.update(kw)
    return args


def _bert_step(args):
    """A train job of the example's model with SGD lr 1 (gradients = weight deltas)."""
    b, s, p = args.batch_size_per_device, args.seq_length, args.max_predictions_per_seq
    i32 = flow.int32

    @flow.global_function(type="train")
    def step(ids: tp.Numpy.Placeholder((b, s), dtype=i32), nsl: tp.Numpy.Placeholder((b, 1), dtype=i32),
             mask: tp.Numpy.Placeholder((b, s), dtype=i32), seg: tp.Numpy.Placeholder((b, s), dtype=i32),
             mids: tp.Numpy.Placeholder((b, p), dtype=i32), mpos: tp.Numpy.Placeholder((b, p), dtype=i32),
             mw: tp.Numpy.Placeholder((b, p))) -> tp.Numpy:
        with flow.scope.placement(args.device, "0:0"):
            total, _, _ = pretrain.PreTrain(ids, mask, seg, mpos, mids, mw, nsl, args.vocab_size, s,
                                            args.hidden_size_per_head * args.num_attention_heads,
                                            args.num_hidden_layers, args.num_attention_heads,
                                            4 * args.hidden_size_per_head * args.num_attention_heads,
                                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                            max_position_embeddings=args.max_position_embeddings,
                                            type_vocab_size=args.type_vocab_size, max_predictions_per_seq=p)
        _sgd1().minimize(total)
        return total
    return step


def _torch_bert(values, args, dev="cpu"):
    return tm.TorchBertPretrain(values, args.num_hidden_layers, args.num_attention_heads, dropout=0.0).to(dev)


def _torch_batch(batch, dev="cpu"):
    return [torch.from_numpy(v).to(dev) for v in pretrain.feeds(batch)]


@pytest.mark.parametrize("device,fused", [("cpu", False), ("cpu", True),
                                          pytest.param("gpu", True, marks=[pytest.mark.cuda, cuda])])
def test_bert_pretrain_step_matches_pytorch(device, fused, monkeypatch):
    """One step against PyTorch's model (its attention F.scaled_dot_product_attention); on a
    GPU graphfront's attention is fused_multi_head_attention, as ``fused`` makes it on the CPU."""
    if fused and device == "cpu":  # (fuse_attention rewrites GPU placements only)
        monkeypatch.setattr(rewrite, "GPU_TAGS", rewrite.GPU_TAGS + ("cpu",))
    args = _bert_args(device=device)
    batch = pretrain.synthetic_batch(args, seed=1)
    batch["masked_lm_weights"][0, -1] = 0.0          # a padded prediction slot
    step = _bert_step(args)
    types = {jb.op_type_name(op) for op in step.compiled_job.job.net.op}
    assert ("fused_multi_head_attention_grad" in types) is fused and ("softmax" in types) is not fused
    before = _variables()
    loss = step(*pretrain.feeds(batch))
    after = _variables()
    assert {"bert-embeddings-word_embeddings", "bert-encoder-layer_0-attention-self-query-weight",
            "bert-encoder-layer_1-output-LayerNorm-gamma", "cls-predictions-output_bias",
            "cls-seq_relationship-output_weights", "bert-pooler-dense-weight"} <= set(before)

    dev = "cuda" if device == "gpu" else "cpu"
    model = _torch_bert(before, args, dev)
    total, _, _ = model(*_torch_batch(batch, dev))
    total.backward()
    np.testing.assert_allclose(float(np.asarray(loss).reshape(-1)[0]), total.item(), rtol=1e-5)
    for name in ("bert-embeddings-word_embeddings",          # gather + the tied decoder
                 "bert-embeddings-position_embeddings", "bert-encoder-layer_0-attention-self-query-weight",
                 "bert-encoder-layer_1-intermediate-dense-bias", "bert-encoder-layer_0-output-LayerNorm-gamma",
                 "cls-predictions-transform-dense-weight", "cls-seq_relationship-output_weights"):
        _grad_close(before, after, name, model.v[name].grad)


def _bert_losses(job, steps, batch):
    return np.array([float(np.asarray(job(*pretrain.feeds(batch))["total_loss"]).reshape(-1)[0])
                     for _ in range(steps)])


def _torch_losses(values, args, steps, batch, autocast=None, lr_at=None):
    """The example's optimizer in PyTorch: AdamW without bias correction, epsilon 1e-6,
    weight decay except biases and LayerNorm, clipping at global norm 1, polynomial decay."""
    model = _torch_bert(values, args)
    params = dict(model.v.p.items())
    state, losses = {}, []
    excluded = ("bias", "LayerNorm", "layer_norm")
    for k in range(steps):
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            total, _, _ = model(*_torch_batch(batch))
        model.zero_grad()
        total.backward()
        losses.append(total.item())
        lr = lr_at(k) if lr_at else args.learning_rate * (1 - k / args.iter_num)
        tm.oneflow_adamw_step(params, {n: p.grad for n, p in params.items()}, state, lr, eps=1e-6,
                              weight_decay=lambda n: 0.0 if any(e in n for e in excluded) else args.weight_decay_rate,
                              clip_norm=1.0)
    return np.array(losses)


def _run_both(args, steps, seed=2, autocast=None, lr_at=None, each_step=None):
    """graphfront's and PyTorch's losses over ``steps`` steps on one fixed batch, from the
    same initial values (drawn from a fixed seed); ``each_step()`` is called after each
    graphfront step."""
    flow.manual_seed(seed)
    batch = pretrain.synthetic_batch(args, seed=seed)
    job = pretrain.make_pretrain_job(args)
    job.compiled_job
    ref = _torch_losses(_variables(), args, steps, batch, autocast, lr_at)
    got = []
    for _ in range(steps):
        got.append(_bert_losses(job, 1, batch)[0])
        if each_step:
            each_step()
    return np.array(got), ref


def test_bert_loss_falls_as_pytorch_in_float32():
    got, ref = _run_both(_bert_args(), 8)
    np.testing.assert_allclose(got, ref, rtol=1e-4)
    assert got[-1] < got[0] - 0.5


def test_bert_loss_falls_with_amp_as_pytorch_autocast():
    # AMP on a CPU runs in bfloat16 (8 significant bits): losses agree to a few 1e-2
    got, ref = _run_both(_bert_args(use_fp16=True), 8, autocast=torch.bfloat16)
    np.testing.assert_allclose(got, ref, rtol=0, atol=0.05 * ref[0])
    assert got[-1] < got[0] - 0.5


@pytest.mark.parametrize("device", DEVICES)
def test_bert_fp16_skips_overflowing_steps_then_trains_as_pytorch(device):
    # Dynamic loss scaling starts at OneFlow's 2**30: float16 gradients overflow, the
    # step is skipped (no variable, not the train step, changes) and the scale halves,
    # until it fits; from there the run is PyTorch's float32 run, shifted by the skips (a
    # later overflow is skipped alike). (AMP is float16 by default on a GPU; the CPU is asked for it.)
    args = _bert_args(use_fp16=True, device=device, amp_dtype=flow.float16 if device == "cpu" else None)
    scales, steps = [], []
    prefix = "System-Train-DynamicLossScale-PretrainJob"

    def record():
        v = flow.get_all_variables()
        scales.append(float(v[prefix + "-LossScale"].numpy()[0]))
        steps.append(int(v["System-Train-TrainStep-PretrainJob"].numpy()[0]))
    got, ref = _run_both(args, 24, lr_at=None, each_step=record)
    applied = [0] + steps[:-1]                            # updates applied before each step
    skips = [i for i, (a, s) in enumerate(zip(applied, steps)) if s == a]
    skipped = steps.count(0)                              # the first ones, while the scale comes down
    print(f"{skipped} steps skipped; loss scale then {scales[skipped]}; later skips {skips[skipped:]}")
    assert 1 <= skipped <= 20 and skips[:skipped] == list(range(skipped))
    assert scales[:skipped] == [2.0 ** (30 - i) for i in range(1, skipped + 1)]
    assert all(s == a + 1 for i, (a, s) in enumerate(zip(applied, steps)) if i not in skips)
    assert all(scales[i] == scales[i - 1] / 2 for i in skips[skipped:])  # each overflow halves the scale
    assert len(skips) - skipped <= 2                      # (a rare event once the scale fits)
    assert np.all(got[:skipped + 1] == got[0])           # nothing changed before the first update
    # float16 activations (11 significant bits) against float32: losses agree to 1e-2
    np.testing.assert_allclose(got, ref[applied], rtol=0, atol=0.01 * ref[0])
    assert got[-1] < got[0] - 0.5


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("mode", ["plan", "native"])
@pytest.mark.parametrize("model", ["resnet50", "bert"])
def test_benchmark_models_amp_steps_replay_as_cuda_graphs(model, mode, monkeypatch, tmp_path):
    """The benchmarks' configurations on a GPU (AMP float16 with dynamic loss scaling; the
    ResNet-50 example's synthetic data made in the job, channels-last; BERT fed one batch)
    are captured, by the per-op plan and by the native lowering (Inductor; offered on a GPU
    to be measured there): after the warm-up call each step replays one CUDA graph (a
    capture that fails is reported by ``uses_cuda_graph``; native's step is one Dynamo
    graph), and its losses are finite. (That such steps never wait on the host is checked
    on smaller jobs of the same ops in test_cuda.py.)"""
    from torch._dynamo.utils import counters
    monkeypatch.setenv("GRAPHFRONT_NATIVE_ON_GPU", "1")
    monkeypatch.setenv("GRAPHFRONT_CACHE_DIR", str(tmp_path))
    counters.clear()
    flow.manual_seed(0)
    if model == "resnet50":
        args = _resnet_args(device="gpu", use_fp16=True, channel_last=True, batch_size_per_device=8,
                            compile_mode=mode)
        job, feeds, key = r50.make_train_job(args), (), "loss"
    else:
        args = _bert_args(device="gpu", use_fp16=True, compile_mode=mode)
        job, key = pretrain.make_pretrain_job(args), "total_loss"
        feeds = pretrain.feeds(pretrain.synthetic_batch(args, seed=1))
    losses = [float(job(*feeds)[key].reshape(-1)[0]) for _ in range(5)]
    assert job.compiled_job.plan.uses_cuda_graph
    assert np.isfinite(losses).all()
    if mode == "native":
        assert counters["stats"]["unique_graphs"] == 1


def test_bert_warmup_from_zero_holds_the_loss_as_oneflow_benchmark_defaults_do():
    # OneFlow-Benchmark's schedule: linear warmup from 0 over iter_num * warmup_proportion
    # steps. With its default iter_num (144000) the first steps have a learning rate near 0:
    # the loss of a fixed batch stays put (as in PyTorch with the same schedule), while
    # without warmup it falls.
    args = _bert_args(iter_num=144000, warmup_proportion=0.1)
    warmup = int(args.iter_num * args.warmup_proportion)

    def lr_at(k):
        return args.learning_rate * (k / warmup) * (1 - k / args.iter_num)
    got, ref = _run_both(args, 6, lr_at=lr_at)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    assert got[1] == got[0]                               # step 0 has learning rate 0
    assert abs(got[-1] - got[0]) < 1e-3


# ----------------------------------------------------------------------------- the scripts


# ----------------------------------------------------------------------------- data parallel

_GATHERS = {"_nccl_logical_all_gather", "_nccl_logical_all_gather_noncontinuous", "_nccl_logical_s2s",
            "_nccl_logical_reduce_scatter"}


def _data_parallel_layouts(gf):
    """The collectives of ``gf``'s job as the boxing pass lays it out, and the layouts of
    its feeds and synthetic batches."""
    builder, _ = trace(default_session(), gf)
    job = boxing(complete(copy.deepcopy(builder.job)))
    sbps = _sbp.blob_sbps(job)
    collectives = [(jb.op_type_name(op), op.name) for op in job.net.op if jb.op_type_name(op).startswith("_nccl")]
    sources = {op.name: sbps[jb.op_outputs(op)[0][2]] for op in job.net.op
               if jb.op_kind(op) in ("input_conf", "decode_random_conf")}
    return collectives, sources


@pytest.mark.parametrize("model", ["resnet50", "bert"])
def test_data_parallel_examples_exchange_only_gradients(model):
    """OneFlow-Benchmark's data parallelism (``--gpu_num_per_node 2``): every activation
    stays split along the batch, so the only collectives are the all-reduces of partial
    sums (the variables' gradients, the loss); no activation is gathered."""
    if model == "resnet50":
        gf = r50.make_train_job(_resnet_args(device="cpu", gpu_num_per_node=2, batch_size_per_device=2))
    else:
        gf = pretrain.make_pretrain_job(_bert_args(gpu_num_per_node=2, batch_size_per_device=2,
                                                   hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))
    collectives, sources = _data_parallel_layouts(gf)
    assert sources and set(sources.values()) == {"S(0)"}, sources
    assert not [c for c in collectives if c[0] in _GATHERS], collectives
    assert {t for t, _ in collectives} == {"_nccl_logical_all_reduce"}


@pytest.mark.slow  # spawns two worker processes
def test_data_parallel_bert_with_dropout_trains_as_one_device():
    """The BERT example on 2 devices (4 sequences each) against 1 device (8): every dropout
    mask is drawn whole and split, so losses and variables agree up to float32 rounding."""
    def run(n):
        flow.clear_default_session()
        flow.manual_seed(3)
        flow.config.cpu_device_num(1)
        args = _bert_args(gpu_num_per_node=n, batch_size_per_device=8 // n, hidden_dropout_prob=0.1,
                          attention_probs_dropout_prob=0.1)
        job = pretrain.make_pretrain_job(args)
        batch = pretrain.synthetic_batch(args, seed=4)
        losses = _bert_losses(job, 3, batch)
        masks = {sbp for lbn, sbp in _sbp.blob_sbps(job.graph.proto).items() if "random_mask_like" in lbn}
        return losses, _variables(), masks

    (one, one_vars, _), (two, two_vars, masks) = run(1), run(2)
    assert masks == {"S(0)"}
    np.testing.assert_allclose(two, one, rtol=1e-5)
    assert two_vars.keys() == one_vars.keys()
    for name in one_vars:
        if "attention-self-key-bias" not in name:  # (its gradient is 0: a softmax ignores a shift of all keys'
            _close(two_vars[name], one_vars[name], rel=1e-4)  # scores, so it holds rounding noise on both sides)

@pytest.mark.parametrize("script, extra", [
    ("resnet50", ["--batch-size", "2", "--image-size", "32", "--width", "0.125"]),
    ("bert_pretrain", ["--batch-size", "2", "--layers", "1", "--heads", "1", "--vocab-size", "100",
                       "--seq-length", "32"]),
])
def test_benchmark_script_prints_samples_per_second_and_ratios(script, extra, capsys):
    spec = importlib.util.spec_from_file_location(f"bench_{script}", os.path.join(ROOT, "benchmarks", f"{script}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    medians = module.main(["--device", "cpu", "--modes", "plan", "--only", "graphfront-plan,torch-eager",
                           "--rounds", "1", "--steps", "2", "--warmup", "1"] + extra)
    assert set(medians) == {"graphfront-plan", "torch-eager"} and all(t > 0 for t in medians.values())
    out = capsys.readouterr().out
    assert "ratio to best peer (torch-eager)" in out and "samples/s" in out
    assert out.count("\ngraphfront-plan ") == 1


def test_step_kernels_counts_both_sides_of_each_model(capsys):
    """benchmarks/step_kernels.py (small networks): graphfront's GPU-configured plan runs on
    the meta device, PyTorch's step on the CPU; both counts and the table are printed, and
    graphfront's steps make no tensor off the device."""
    spec = importlib.util.spec_from_file_location("bench_step_kernels", os.path.join(ROOT, "benchmarks",
                                                                                      "step_kernels.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    counts = module.main(["--block-counts", "1,1,1,1", "--layers", "1", "--lenet-batch", "8", "--top", "3"])
    assert set(counts) == {"resnet50", "bert", "lenet"} and all(g > 0 and p > 0 for g, p, _ in counts.values())
    # every tensor of the GPU-configured steps (AMP float16, loss scaling, the data drawn in
    # the job) is made on the placement device, nothing is copied in from the host
    assert {model: host for model, (_, _, host) in counts.items()} == {"resnet50": [], "bert": [], "lenet": []}
    out = capsys.readouterr().out
    for model, (g, p, _) in counts.items():
        assert f"{model} " in out and f"{g / p:.2f}" in out
    assert out.count("graphfront's calls moving the most memory") == 3 and "graphfront GB moved" in out


def test_step_kernels_counts_the_copy_addmm_makes_of_a_whole_matrix_addend():
    """CUDA's addmm copies a whole-matrix addend into its result, then runs the GEMM over it
    (beta = 1): 2 x the result's bytes besides operands and result; a bias row (cuBLASLt's
    epilogue reads it) or beta = 0 (the addend is not read) adds nothing."""
    spec = importlib.util.spec_from_file_location("bench_step_kernels", os.path.join(ROOT, "benchmarks",
                                                                                      "step_kernels.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a, b, out = torch.empty(4, 3, device="meta"), torch.empty(3, 5, device="meta"), torch.empty(4, 5, device="meta")
    assert module._addend_copy("addmm", (torch.empty(4, 5, device="meta"), a, b), {}, out) == 2 * 20 * 4
    assert module._addend_copy("addmm", (torch.empty(4, 5, device="meta"), a, b), {"beta": 0.0}, out) == 0
    assert module._addend_copy("addmm", (torch.empty(5, device="meta"), a, b), {}, out) == 0
    assert module._addend_copy("mm", (a, b), {}, out) == 0


@pytest.mark.parametrize("flag, fused", [([], True), (["--no-fused-bn"], False)])
def test_resnet50_benchmark_fuses_its_batch_norms_unless_told_not_to(flag, fused, monkeypatch):
    """benchmarks/resnet50.py's graphfront job on a GPU placement (the CPU taken for one here)
    has its batch norm + (add +) relu fused; ``--no-fused-bn`` keeps them apart, for the
    comparison."""
    monkeypatch.setattr(rewrite, "GPU_TAGS", rewrite.GPU_TAGS + ("cpu",))
    spec = importlib.util.spec_from_file_location("bench_resnet50", os.path.join(ROOT, "benchmarks", "resnet50.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    a = bench.parse(["--device", "cpu", "--batch-size", "2", "--image-size", "32", "--width", "0.125"] + flag)
    flow.clear_default_session()
    job = bench.graphfront_job(bench.example_args(a, "plan"), "TrainNet_plan")
    types = [jb.op_type_name(op) for op in job.compiled_job.job.net.op]
    assert ("normalization_add_relu" in types) is fused and ("relu" in types) is not fused


def test_resnet50_benchmark_prints_the_kernels_its_batch_norms_chose(monkeypatch, capsys, tuned_fastest):
    """On a GPU each fused batch norm's kernels are timed at the first call; the benchmark
    prints what each op type chose (here the CPU is timed on, by a clock that finds the
    second candidate, cuDNN's batch norm with a compiled add and relu, faster)."""
    from graphfront.ops import common
    monkeypatch.setattr(rewrite, "GPU_TAGS", rewrite.GPU_TAGS + ("cpu",))
    tuned_fastest(1)
    spec = importlib.util.spec_from_file_location("bench_resnet50", os.path.join(ROOT, "benchmarks", "resnet50.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    flow.clear_default_session()
    bench.main(["--device", "cpu", "--modes", "plan", "--only", "graphfront-plan", "--rounds", "1", "--steps", "1",
                "--warmup", "1", "--batch-size", "2", "--image-size", "32", "--width", "0.125"])
    out = capsys.readouterr().out
    fwd, bwd = (sum(key[0] == t for key, _ in common._TUNED)
                for t in ("normalization_add_relu", "normalization_add_relu_grad"))
    assert fwd and bwd and set(common._TUNED.values()) == {1}
    assert (f"fused batch norms' kernels: normalization_add_relu PyTorch's batch norm + compiled add-relu: {fwd}, "
            f"normalization_add_relu_grad PyTorch's batch norm + compiled add-relu: {bwd}") in out
