"""BERT pretraining train step: graphfront in each lowering against a hand-written PyTorch
BERT in eager mode and under torch.compile, all in one run.

    python benchmarks/bert_pretrain.py                  # on a GPU: BERT-base, seq 128, batch 64, AMP fp16
    python benchmarks/bert_pretrain.py --device cpu     # float32, batch 8, 2 layers of hidden 128
    python benchmarks/bert_pretrain.py --layers 12 --heads 12 --batch-size 2 --device cpu

graphfront runs ``examples/bert`` (OneFlow-Benchmark's BERT: masked-LM head on the gathered
positions with the tied decoder, next-sentence head, AdamW with epsilon 1e-6 and decoupled
weight decay, linear warmup and polynomial decay, clipping at global norm 1, ``--use_fp16``
AMP with dynamic loss scaling), one job per lowering (``--modes``: ``plan``, ``native``,
``xla``; one that fails is reported and skipped), fed one fixed synthetic batch each step.
On a GPU graphfront's attention is one ``fused_multi_head_attention`` (the ``fuse_attention``
pass; ``--no-fused-attention`` disables it). The PyTorch side (``benchmarks/torch_models.py``,
the same weights, its attention by ``F.scaled_dot_product_attention`` as transformers' BERT
runs it) copies the same batch to the device each step and runs ``torch.optim.AdamW``, ``clip_grad_norm_`` and, on a GPU,
``torch.autocast`` float16 with a ``GradScaler``; ``torch-compile`` is the same model under
``torch.compile``. Printed: median step time, samples/s and the ratio of each side's
samples/s to the best PyTorch side (higher is better). Dropout is 0.1 on every side.

CPU defaults (so the script runs everywhere): float32, batch 8, 2 layers, 2 heads
(hidden 128); the vocabulary (30522), sequence (128) and masked positions (20) stay BERT's.
"""
import argparse
import os
import sys
import time

import torch

from _common import ROOT, add_torch_peers, machine, profile_sides, rotated, sync, throughput_table
import torch_models as tm

sys.path.insert(0, os.path.join(ROOT, "examples", "bert"))
import graphfront as flow  # noqa: E402
import pretrain  # noqa: E402

PEERS = ("torch-eager", "torch-compile")


def parse(argv=None):
    gpu = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu" if gpu else "cpu")
    p.add_argument("--batch-size", type=int, default=None, help="default 64 on a GPU, 8 on a CPU")
    p.add_argument("--layers", type=int, default=None, help="default 12 on a GPU, 2 on a CPU")
    p.add_argument("--heads", type=int, default=None, help="attention heads of 64 dims; default 12 (GPU), 2 (CPU)")
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                   help="AMP (float16 on a GPU); default on for a GPU, off for a CPU")
    p.add_argument("--fused-attention", action=argparse.BooleanOptionalAction, default=True,
                   help="graphfront's fuse_attention pass (GPU placements); default on")
    p.add_argument("--modes", default="plan,native,xla", help="graphfront lowerings to run")
    p.add_argument("--only", default="", help="comma-separated sides to run (default: all)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="timed steps per side per round")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="after timing, print each side's top kernels over STEPS steps (torch.profiler)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    a = p.parse_args(argv)
    gpu = a.device == "gpu"
    a.batch_size = a.batch_size or (64 if gpu else 8)
    a.layers = a.layers or (12 if gpu else 2)
    a.heads = a.heads or (12 if gpu else 2)
    a.amp = gpu if a.amp is None else a.amp
    return a


def example_args(a, mode):
    args = pretrain.add_arguments(argparse.ArgumentParser()).parse_args([
        "--batch-size", str(a.batch_size), "--layers", str(a.layers), "--num_attention_heads", str(a.heads),
        "--seq_length", str(a.seq_length), "--vocab_size", str(a.vocab_size), "--device", a.device,
        "--iter_num", "1000000", "--warmup_proportion", "0"] + (["--use_fp16"] if a.amp else []))
    args.compile_mode = mode
    args.disabled_passes = () if a.fused_attention else ("fuse_attention",)
    return args


def torch_step(values, a, batch, compiled):
    dev = torch.device("cuda" if a.device == "gpu" else "cpu")
    model = tm.TorchBertPretrain(values, a.layers, a.heads, dropout=0.1).to(dev).train()
    forward = torch.compile(model) if compiled else model
    params = list(model.parameters())
    decay = [p for n, p in model.v.p.items() if not any(e in n for e in ("bias", "LayerNorm"))]
    rest = [p for n, p in model.v.p.items() if any(e in n for e in ("bias", "LayerNorm"))]
    fused = {"fused": True} if dev.type == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, eps=1e-6, **fused)
    scaler = torch.amp.GradScaler(dev.type, enabled=a.amp and dev.type == "cuda")
    amp_dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16
    feeds = [torch.from_numpy(v) for v in pretrain.feeds(batch)]
    if dev.type == "cuda":
        feeds = [f.pin_memory() for f in feeds]

    def step():
        inputs = [f.to(dev, non_blocking=True) for f in feeds]
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=a.amp):
            total, mlm, nsp = forward(*inputs)
        opt.zero_grad(set_to_none=True)
        scaler.scale(total).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()
        return torch.stack([total, mlm, nsp]).detach().cpu()
    return step


def main(argv=None):
    a = parse(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "gpu":
        torch.backends.cudnn.benchmark = True
    only = set(filter(None, a.only.split(",")))
    want = lambda side: not only or side in only  # noqa: E731
    flow.manual_seed(0)
    modes = [m for m in filter(None, a.modes.split(",")) if want(f"graphfront-{m}")]
    batch = pretrain.synthetic_batch(example_args(a, "plan"))
    feeds = pretrain.feeds(batch)
    jobs = {f"graphfront-{m}": pretrain.make_pretrain_job(example_args(a, m), f"PretrainJob_{m}") for m in modes}
    sides, notes, values = {}, {}, None
    for side, job in jobs.items():
        t = time.perf_counter()
        try:
            job.compiled_job
            if values is None:   # the initial weights, for the PyTorch sides
                values = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
            job(*feeds)
        except Exception as e:  # noqa: BLE001 - a lowering that cannot run this job is reported, not fatal
            print(f"{side}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
            continue
        sync(a.device)
        notes[side] = f"first call {time.perf_counter() - t:.1f} s"
        print(f"{side}: {notes[side]}", flush=True)
        sides[side] = (lambda j: lambda: j(*feeds))(job)
    if values is None:
        pretrain.make_pretrain_job(example_args(a, "plan"), "Init").compiled_job
        values = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    add_torch_peers(sides, notes, lambda compiled: torch_step(values, a, batch, compiled), want, a.device)
    medians = rotated(sides, a.rounds, a.steps, a.warmup, a.device)
    amp = "AMP float16" if a.amp and a.device == "gpu" else ("AMP bfloat16" if a.amp else "float32")
    print(f"machine: {machine(a.device)}; torch threads {torch.get_num_threads()}")
    print(f"BERT pretraining train step, batch {a.batch_size}, seq {a.seq_length}, {a.layers} layers, {a.heads} heads "
          f"(hidden {64 * a.heads}), vocab {a.vocab_size}, {amp}; median of {a.rounds} rounds x {a.steps} steps")
    print(throughput_table(medians, a.batch_size, PEERS, notes))
    if a.profile:
        profile_sides(sides, a.profile, a.device)
    return medians


if __name__ == "__main__":
    sys.exit(main() and 0)
