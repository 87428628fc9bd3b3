"""Peak memory of the LeNet train step: graphfront vs PyTorch eager, in separate processes.

    python benchmarks/memory.py [--steps 10] [--device cpu|gpu]

Each side runs in its own subprocess: after imports and data preparation it reads its
resident set size (RSS), then builds the model and runs ``--steps`` train steps (batch
100); the peak RSS (``ru_maxrss``) minus that baseline is the side's memory. On CUDA
the figure is ``torch.cuda.max_memory_allocated()`` instead. Prints both and the ratio.
"""
import json
import os
import resource
import subprocess
import sys

import numpy as np

from _common import machine, parser


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(side, steps, device, threads):
    import torch
    if threads:
        torch.set_num_threads(threads)
    import graphfront  # noqa: F401  (both sides pay for the same imports)
    import lenet_step
    rng = np.random.default_rng(0)
    x = rng.random((lenet_step.B, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, lenet_step.B).astype(np.int32)
    base = rss_bytes()
    if side == "graphfront":
        job = lenet_step.build(device)
        for _ in range(steps):
            job(x, y)
    else:
        import torch.nn.functional as F
        dev = "cuda" if device == "gpu" else "cpu"
        model = lenet_step.TorchLeNet().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(torch.from_numpy(x).to(dev)), torch.from_numpy(y).long().to(dev),
                                   reduction="none")
            loss.mean().backward()
            opt.step()
            loss.detach().cpu().numpy()
    if device == "gpu":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    print(json.dumps({"side": side, "bytes": peak}))


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(steps=10)
    p.add_argument("--side", choices=["graphfront", "torch"], default=None, help=argparse_hidden())
    args = p.parse_args(argv)
    if args.side:
        return child(args.side, args.steps, args.device, args.threads)
    out = {}
    for side in ("graphfront", "torch"):
        cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--steps", str(args.steps),
               "--device", args.device, "--threads", str(args.threads)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=os.path.dirname(__file__))
        out[side] = json.loads(res.stdout.strip().splitlines()[-1])["bytes"]
    what = "torch.cuda.max_memory_allocated" if args.device == "gpu" else "peak RSS delta"
    print(f"machine: {machine(args.device)}")
    print(f"LeNet train step peak memory ({what}): graphfront {out['graphfront'] / 2**20:.1f} MiB, PyTorch eager "
          f"{out['torch'] / 2**20:.1f} MiB, ratio graphfront/PyTorch = {out['graphfront'] / out['torch']:.3f}")


def argparse_hidden():
    return "internal: run one side"


if __name__ == "__main__":
    main()
