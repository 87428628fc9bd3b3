"""Shared helpers of the benchmarks: interleaved timing and the machine's name.

Every benchmark measures graphfront and its hand-written PyTorch-eager baseline in the
same process, alternating one step of each, so that load from other processes on a
shared machine hits both alike; it reports the median of each and their ratio.
"""
from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The benchmarks measure compile_mode("native") on a GPU too, where graphfront does not offer
# it to users until it measures at least as fast as the plan (graphfront.runtime.choice).
os.environ.setdefault("GRAPHFRONT_NATIVE_ON_GPU", "1")
sys.path.insert(0, os.path.join(ROOT, "examples", "lenet"))


@functools.cache
def resnet50_example():
    """The ResNet-50 example's training script (``examples/resnet50/train.py``) as a module
    (loaded once)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("resnet50_train", os.path.join(ROOT, "examples", "resnet50",
                                                                                 "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=30, help="measured steps per side (>= 20)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    return p


def setup_threads(args):
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    return torch.get_num_threads()


def machine(device="cpu"):
    import torch
    if device == "gpu" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}"


def sync(device):
    if device == "gpu":
        import torch
        torch.cuda.synchronize()


def interleaved(steps, warmup, a, b, device="cpu"):
    """Medians (seconds) of ``a()`` and ``b()`` timed alternately after ``warmup`` rounds."""
    for _ in range(warmup):
        a()
        b()
    sync(device)
    ta, tb = [], []
    for i in range(steps):
        for fn, out in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            t = time.perf_counter()
            fn()
            sync(device)
            out.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


def torch_train_step(model, opt, x, y):
    """One hand-written PyTorch eager step: cross entropy (mean of per-example losses),
    backward, optimizer step; returns the per-example losses as numpy (as graphfront's job)."""
    import torch
    import torch.nn.functional as F
    dev = next(model.parameters()).device

    def step():
        xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).long().to(dev)
        opt.zero_grad()
        loss = F.cross_entropy(model(xt), yt, reduction="none")
        loss.mean().backward()
        opt.step()
        return loss.detach().cpu().numpy()
    return step


def report(title, gf, pt, unit="ms", scale=1e3, extra=""):
    print(f"{title}: graphfront {gf * scale:.3f} {unit}, PyTorch eager {pt * scale:.3f} {unit}, "
          f"ratio graphfront/PyTorch = {gf / pt:.3f}{extra}")
    return gf / pt


def add_torch_peers(sides, notes, make_step, want, device):
    """Add the PyTorch sides ``torch-eager`` and ``torch-compile`` (those ``want(side)``
    accepts) to ``sides``: ``make_step(compiled)`` builds each step, whose first call (its
    compilation, for torch.compile) is run and timed here into ``notes``."""
    for side, compiled in (("torch-eager", False), ("torch-compile", True)):
        if want(side):
            step = make_step(compiled)
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                step()
            sync(device)
            notes[side] = f"first call {time.perf_counter() - t:.1f} s"
            print(f"{side}: {notes[side]}", flush=True)
            sides[side] = step


def rotated(sides, rounds, steps, warmup, device="cpu"):
    """Median seconds per step of each ``sides[name]()`` (a dict), measured in ``rounds``
    rounds of ``steps`` timed steps per side after ``warmup`` untimed ones; the order of
    the sides rotates every round so that load from other processes hits each alike."""
    names = list(sides)
    for name in names:
        for _ in range(warmup):
            sides[name]()
    sync(device)
    times = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(steps):
                t = time.perf_counter()
                sides[name]()
                sync(device)
                times[name].append(time.perf_counter() - t)
        # (printed as it goes: a run cut off by a time limit still shows what it measured)
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {statistics.median(t) * 1e3:.2f} ms"
                                                       for n, t in times.items()), flush=True)
    return {n: statistics.median(t) for n, t in times.items()}


def profile_sides(sides, steps, device="cpu", limit=25):
    """Print, for each ``sides[name]()``, the ``limit`` kernels that took the most time
    over ``steps`` steps under ``torch.profiler`` (device time on a GPU, where the kernels
    inside a replayed CUDA graph are listed too; CPU time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile
    gpu = device == "gpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    key = "self_device_time_total" if gpu else "self_cpu_time_total"
    for name, step in sides.items():
        step()
        sync(device)
        with profile(activities=activities) as prof:
            for _ in range(steps):
                step()
            sync(device)
        print(f"\n{name}: the top {limit} kernels of {steps} steps")
        print(prof.key_averages().table(sort_by=key, row_limit=limit, max_name_column_width=60))


def throughput_table(medians, samples, peers, notes=None):
    """A ``tabulate`` table: per side its median step, samples/s and the ratio of its
    samples/s to the best of ``peers`` (higher is better for graphfront)."""
    from tabulate import tabulate
    best = max((samples / medians[p], p) for p in peers if p in medians) if any(p in medians for p in peers) else None
    rows = []
    for name, t in medians.items():
        rate = samples / t
        rows.append([name, f"{t * 1e3:.2f}", f"{rate:.1f}", f"{rate / best[0]:.3f}" if best else "-",
                     (notes or {}).get(name, "")])
    head = ["side", "median step (ms)", "samples/s", f"ratio to best peer ({best[1] if best else '-'})", "note"]
    return tabulate(rows, headers=head)
