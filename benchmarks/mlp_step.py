"""Overhead-bound MLP train step: 10 dense layers of width 64, batch 16 (same run).

    python benchmarks/mlp_step.py [--steps 200] [--threads N]

graphfront: ``flow.layers.dense`` x10 (relu between), sparse softmax cross entropy over
the 64 outputs, SGD lr 0.1 momentum 0. Baseline: the same ``nn.Sequential`` stepped by
``torch.optim.SGD``. Steps alternate between the two; medians and ratio are printed.
"""
import numpy as np
import torch
import torch.nn as nn

from _common import interleaved, machine, parser, report, setup_threads, torch_train_step

import graphfront as flow
from graphfront import typing as tp

B, W, L = 16, 64, 10


def build(device, function_config=None):
    tag = "gpu" if device == "gpu" else "cpu"

    @flow.global_function(type="train", function_config=function_config)
    def mlp_job(x: tp.Numpy.Placeholder((B, W), dtype=flow.float),
                labels: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement(tag, "0:0"):
            h = x
            for i in range(L):
                h = flow.layers.dense(h, W, activation=flow.nn.relu if i < L - 1 else None, name=f"fc{i}",
                                      kernel_initializer=flow.random_normal_initializer(stddev=0.1))
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, h, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return mlp_job


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(steps=200, warmup=20)
    args = p.parse_args(argv)
    threads = setup_threads(args)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, W)).astype(np.float32)
    y = rng.integers(0, W, B).astype(np.int32)
    job = build(args.device)
    job(x, y)
    dev = "cuda" if args.device == "gpu" else "cpu"
    layers = []
    for i in range(L):
        layers.append(nn.Linear(W, W))
        if i < L - 1:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)

    torch_step = torch_train_step(model, opt, x, y)

    gf, pt = interleaved(args.steps, args.warmup, lambda: job(x, y), torch_step, args.device)
    print(f"machine: {machine(args.device)}; torch threads: {threads}")
    report(f"MLP train step ({L}x dense {W}, batch {B}, median of {args.steps})", gf, pt, unit="us", scale=1e6)


if __name__ == "__main__":
    main()
