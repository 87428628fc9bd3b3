"""Data-parallel scaling: LeNet train-step throughput (samples/s) on 1 and on 2 devices.

    python benchmarks/data_parallel_scaling.py [--batch 64] [--steps 30] [--device cpu|gpu]

graphfront runs the same LeNet train job (``examples/lenet/lenet.py``, SGD lr 0.1, global
batch ``--batch``) with ``flow.config.cpu_device_num(n)`` (``gpu_device_num(n)`` with
``--device gpu``) for n = 1 and 2: on 2 devices each worker process computes half the
batch and the gradients are all-reduced (gloo on CPU, NCCL on GPU). The baseline is a
hand-written PyTorch eager step of the same model on the whole batch in this process,
timed in the same run. Printed: samples/s of each, the 2-vs-1 scaling of graphfront and
each graphfront figure as a ratio to the baseline. On CPU, 2 devices share the machine's
cores (each worker gets cores / 2 threads), so the scaling shows the runtime's overhead
rather than extra compute.

    python benchmarks/data_parallel_scaling.py --model resnet50 [--batch 16]

runs the ResNet-50 example (``examples/resnet50``, OneFlow-Benchmark's synthetic data
made in the job, momentum SGD; 3,4,6,3 blocks at a quarter of the channels, 64x64
images, 100 classes) with ``--gpu_num_per_node`` 1 and 2, on 2
devices also with all-reduce fusion off (``collective_boxing.nccl_fusion_threshold_mb(0)``),
against a hand-written PyTorch ResNet-50 of the same shape (``torch_models.py``) in eager
mode in this process.
"""
import statistics
import time

import numpy as np
import torch
import torch.nn as nn

from _common import machine, parser, resnet50_example, setup_threads, sync, torch_train_step

import graphfront as flow
from graphfront import typing as tp
from lenet import lenet


def graphfront_step(n, batch, device):
    flow.clear_default_session()
    flow.manual_seed(0)
    if device == "gpu":
        flow.config.gpu_device_num(n)
    else:
        flow.config.gpu_device_num(0)
        flow.config.cpu_device_num(n)

    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((batch, 1, 28, 28)),
                  y: tp.Numpy.Placeholder((batch,), dtype=flow.int32)) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, lenet(x))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return train_job


def resnet_args(n, batch, device):
    import argparse
    r50 = resnet50_example()
    args = r50.add_arguments(argparse.ArgumentParser()).parse_args([
        "--device", device, "--gpu_num_per_node", str(n), "--batch_size_per_device", str(batch // n),
        "--image_size", "64", "--width", "0.25", "--num_classes", "100", "--label_smoothing", "0"])
    return r50, args


def graphfront_resnet_step(n, batch, device, fuse=True):
    """The ResNet-50 example's train job on ``n`` devices (its batch made in the job)."""
    flow.clear_default_session()
    flow.manual_seed(0)
    if device == "cpu":
        flow.config.gpu_device_num(0)
    if not fuse:
        flow.config.collective_boxing.nccl_fusion_threshold_mb(0)
    r50, args = resnet_args(n, batch, device)
    job = r50.make_train_job(args)
    return job


def torch_resnet_step(batch, device):
    """PyTorch eager: the same ResNet-50 from the example's initial variables."""
    import torch_models as tm
    job = graphfront_resnet_step(1, batch, device)
    job.compiled_job
    values = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    model = tm.TorchResNet50(values, tm.RESNET50_BLOCKS).to("cuda" if device == "gpu" else "cpu").train()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)
    y = rng.integers(0, 100, batch).astype(np.int32)
    return torch_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), x, y)


def main_resnet(args):
    baseline = median_time(torch_resnet_step(args.batch, args.device), args.steps, args.warmup, args.device)
    results = {}
    sides = (("1 device", 1, True), ("2 devices", 2, True), ("2 devices, all-reduce fusion off", 2, False))
    for label, n, fuse in sides:
        job = graphfront_resnet_step(n, args.batch, args.device, fuse)
        results[label] = median_time(job, args.steps, args.warmup, args.device)
    flow.clear_default_session()
    print(f"machine: {machine(args.device)}; ResNet-50 (blocks 3,4,6,3, width 1/4, 64x64), global batch "
          f"{args.batch}; median of {args.steps} steps")
    print(f"PyTorch eager, 1 process: {args.batch / baseline:.1f} samples/s ({baseline * 1e3:.1f} ms/step)")
    for label, t in results.items():
        print(f"graphfront, {label}: {args.batch / t:.1f} samples/s ({t * 1e3:.1f} ms/step), "
              f"ratio time graphfront/PyTorch = {t / baseline:.3f}")


def torch_lenet():
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5, padding=2),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def median_time(fn, steps, warmup, device):
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=None, help="global batch, split over the devices (64; 16 for resnet50)")
    p.add_argument("--model", choices=["lenet", "resnet50"], default="lenet")
    args = p.parse_args(argv)
    threads = setup_threads(args)
    if args.model == "resnet50":
        args.batch = args.batch or 16
        return main_resnet(args)
    args.batch = args.batch or 64
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, args.batch).astype(np.int32)
    dev = "cuda" if args.device == "gpu" else "cpu"
    model = torch_lenet().to(dev)
    baseline = median_time(torch_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), x, y), args.steps,
                           args.warmup, args.device)
    results = {}
    for n in (1, 2):
        job = graphfront_step(n, args.batch, args.device)
        results[n] = median_time(lambda: job(x, y), args.steps, args.warmup, args.device)
    flow.clear_default_session()
    print(f"machine: {machine(args.device)}; client threads {threads}; global batch {args.batch}; "
          f"median of {args.steps} steps")
    print(f"PyTorch eager, 1 process: {args.batch / baseline:.1f} samples/s ({baseline * 1e3:.1f} ms/step)")
    for n, t in results.items():
        print(f"graphfront, {n} device(s): {args.batch / t:.1f} samples/s ({t * 1e3:.1f} ms/step), "
              f"ratio time graphfront/PyTorch = {t / baseline:.3f}")
    print(f"graphfront scaling 2 vs 1 device(s): {results[1] / results[2]:.2f}x")


if __name__ == "__main__":
    main()
