"""ResNet-50 v1.5 train step: graphfront in each lowering against a hand-written PyTorch
ResNet-50 in eager mode and under torch.compile, all in one run.

    python benchmarks/resnet50.py                       # on a GPU: AMP fp16, batch 128, 224x224
    python benchmarks/resnet50.py --device cpu          # float32, batch 8, a small network (see below)
    python benchmarks/resnet50.py --modes plan --only graphfront-plan,torch-eager --rounds 3

graphfront runs ``examples/resnet50`` as OneFlow-Benchmark's synthetic mode does
(``decode_random`` labels and images made inside the job, softmax cross entropy against
labels smoothed by 0.1, SGD momentum 0.9 with L2 weight decay 1/32768, ``--use_fp16`` AMP
with dynamic loss scaling), one job per lowering (``--modes``: ``plan``, ``native``,
``xla``; one that fails to compile or run is reported and skipped). The PyTorch side
(``benchmarks/torch_models.py``, starting from the same weights) makes its random batch on
the device each step as well, and on a GPU runs channels-last with ``cudnn.benchmark``,
``torch.autocast`` float16 and a ``GradScaler``; ``torch-compile`` is the same model
under ``torch.compile``. On a GPU graphfront fuses each batch norm with its relu (and the
residual add before it) into OneFlow's ``normalization_add_relu``; ``--no-fused-bn`` runs the
unfused job for the comparison. Printed: median step time, samples/s and the ratio of each
side's samples/s to the best PyTorch side (higher is better).

CPU defaults (so the script runs everywhere): float32, batch 8, 64x64 images, one block
per stage (``--block-counts 1,1,1,1``) and a quarter of the channels (``--width 0.25``);
``--block-counts 3,4,6,3 --width 1 --image-size 224`` is the real network.
"""
import argparse
import collections
import sys
import time

import torch

from _common import add_torch_peers, machine, profile_sides, resnet50_example, rotated, sync, throughput_table
import torch_models as tm

import graphfront as flow
from graphfront import typing as tp
from graphfront.ops import common

r50 = resnet50_example()
PEERS = ("torch-eager", "torch-compile")


def parse(argv=None):
    gpu = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu" if gpu else "cpu")
    p.add_argument("--batch-size", type=int, default=None, help="default 128 on a GPU, 8 on a CPU")
    p.add_argument("--image-size", type=int, default=None, help="default 224 on a GPU, 64 on a CPU")
    p.add_argument("--block-counts", default=None, help="blocks per stage; default 3,4,6,3 (GPU), 1,1,1,1 (CPU)")
    p.add_argument("--width", type=float, default=None, help="channel multiplier; default 1 (GPU), 0.25 (CPU)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=None,
                   help="AMP (float16 on a GPU); default on for a GPU, off for a CPU")
    p.add_argument("--channel-last", action=argparse.BooleanOptionalAction, default=None,
                   help="graphfront's model in NHWC (OneFlow-Benchmark's --channel_last, which its float16 runs "
                        "use); default on with AMP on a GPU, as the PyTorch side runs channels_last there")
    p.add_argument("--fused-bn", action=argparse.BooleanOptionalAction, default=True,
                   help="graphfront's batch norm + (add +) relu fused on a GPU (the fuse_normalization_add_relu "
                        "pass; --no-fused-bn disables it: PyTorch's batch-norm kernels, then the add and the relu)")
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
    a.batch_size = a.batch_size or (128 if gpu else 8)
    a.image_size = a.image_size or (224 if gpu else 64)
    a.block_counts = [int(x) for x in (a.block_counts or ("3,4,6,3" if gpu else "1,1,1,1")).split(",")]
    a.width = a.width if a.width is not None else (1.0 if gpu else 0.25)
    a.amp = gpu if a.amp is None else a.amp
    a.channel_last = (gpu and a.amp) if a.channel_last is None else a.channel_last
    return a


def example_args(a, mode):
    args = r50.add_arguments(argparse.ArgumentParser()).parse_args([
        "--batch_size", str(a.batch_size), "--image_size", str(a.image_size), "--num_classes", str(a.classes),
        "--block_counts", ",".join(map(str, a.block_counts)), "--width", str(a.width), "--device", a.device,
        "--compile_mode", mode, "--steps", "1000000"] + (["--use_fp16"] if a.amp else [])
        + (["--channel_last"] if a.channel_last else []))
    args.disabled_passes = () if a.fused_bn else ("fuse_normalization_add_relu",)
    return args


def graphfront_job(args, name):
    def job() -> tp.Numpy:
        with flow.scope.placement(args.device, "0:0"):
            labels, images = r50.load_synthetic(args)
            logits = r50.resnet50(images, args)
            loss = flow.math.reduce_mean(flow.nn.softmax_cross_entropy_with_logits(
                r50.label_smoothing(labels, args.num_classes, args.label_smoothing, logits.dtype), logits))
        r50.optimizer(args).minimize(loss)
        return loss
    job.__name__ = name
    return flow.global_function(type="train", function_config=r50.function_config(args))(job)


def torch_step(values, a, compiled):
    dev = torch.device("cuda" if a.device == "gpu" else "cpu")
    if a.channel_last:
        values = tm.oihw_weights(values, a.block_counts)
    model = tm.TorchResNet50(values, a.block_counts).to(dev).train()
    fmt = torch.channels_last if dev.type == "cuda" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.256, momentum=0.9, weight_decay=1.0 / 32768, foreach=True)
    scaler = torch.amp.GradScaler(dev.type, enabled=a.amp and dev.type == "cuda")
    shape = (a.batch_size, 3, a.image_size, a.image_size)
    amp_dtype = torch.float16 if dev.type == "cuda" else torch.bfloat16

    def step():
        x = torch.rand(shape, device=dev).contiguous(memory_format=fmt)   # as decode_random, on the device
        y = torch.zeros(a.batch_size, dtype=torch.long, device=dev)
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=a.amp):
            loss = tm.smoothed_cross_entropy(forward(x), y, a.classes, 0.1)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach().cpu()
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
    jobs = {f"graphfront-{m}": graphfront_job(example_args(a, m), f"TrainNet_{m}")
            for m in filter(None, a.modes.split(",")) if want(f"graphfront-{m}")}
    sides, notes = {}, {}
    values = None
    for side, job in jobs.items():
        t = time.perf_counter()
        try:
            job.compiled_job
            if values is None:   # the initial weights, for the PyTorch sides
                values = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
            job()
        except Exception as e:  # noqa: BLE001 - a lowering that cannot run this job is reported, not fatal
            print(f"{side}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
            continue
        sync(a.device)
        notes[side] = f"first call {time.perf_counter() - t:.1f} s"
        print(f"{side}: {notes[side]}", flush=True)
        sides[side] = job
    if values is None:
        graphfront_job(example_args(a, "plan"), "Init").compiled_job
        values = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    add_torch_peers(sides, notes, lambda compiled: torch_step(values, a, compiled), want, a.device)
    medians = rotated(sides, a.rounds, a.steps, a.warmup, a.device)
    amp = "AMP float16" if a.amp and a.device == "gpu" else ("AMP bfloat16" if a.amp else "float32")
    print(f"machine: {machine(a.device)}; torch threads {torch.get_num_threads()}")
    print(f"ResNet-50 v1.5 train step, batch {a.batch_size}, {a.image_size}x{a.image_size}, blocks "
          f"{a.block_counts}, width {a.width}, {amp}, graphfront in {'NHWC' if a.channel_last else 'NCHW'}"
          f"{'' if a.fused_bn else ', batch norms unfused'}; "
          f"median of {a.rounds} rounds x {a.steps} steps")
    print(throughput_table(medians, a.batch_size, PEERS, notes))
    choices = collections.Counter((key[0], ("TorchInductor", "PyTorch's batch norm + compiled add-relu")[i])
                                  for (key, _), i in common._TUNED.items())
    if choices:   # (the kernels that graphfront's fused batch norms timed fastest at their first call)
        print("fused batch norms' kernels:", ", ".join(f"{op} {how}: {n}" for (op, how), n in sorted(choices.items())))
    if a.profile:
        profile_sides(sides, a.profile, a.device)
    return medians


if __name__ == "__main__":
    sys.exit(main() and 0)
