"""LeNet train step, batch 100: graphfront vs hand-written PyTorch eager (same run).

    python benchmarks/lenet_step.py [--steps 30] [--threads N] [--device cpu|gpu] [--batch 100] [--profile 5]
                                    [--channel-last]

graphfront runs ``examples/lenet/lenet.py`` as a train job (SGD lr 0.1, momentum 0,
dropout 0.5, sparse softmax cross entropy); the baseline is an ``nn.Module`` with the
same layers and initial weights, stepped by ``torch.optim.SGD``. Steps alternate between
the two; the medians and their ratio are printed. ``--channel-last`` builds graphfront's job
in NHWC (the example's ``data_format="NHWC"``, images fed transposed; PyTorch's model keeps
NCHW, the same function), to measure what channels-last convolutions and pools give.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from _common import interleaved, machine, parser, profile_sides, report, setup_threads, torch_train_step

import graphfront as flow
from graphfront import typing as tp
from lenet import lenet

B = 100


class TorchLeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.dense1 = nn.Linear(7 * 7 * 64, 512)
        self.dense2 = nn.Linear(512, 10)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = self.dropout(F.relu(self.dense1(x.flatten(1))))
        return self.dense2(x)


def build(device, channel_last=False):
    tag = "gpu" if device == "gpu" else "cpu"
    shape, fmt = ((B, 28, 28, 1), "NHWC") if channel_last else ((B, 1, 28, 28), "NCHW")

    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder(shape, dtype=flow.float),
                  labels: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement(tag, "0:0"):
            logits = lenet(images, train=True, data_format=fmt)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return train_job


def torch_model(device):
    model = TorchLeNet()
    values = {k: torch.from_numpy(v.numpy()) for k, v in flow.get_all_variables().items()}
    if values["conv1-weight"].shape[1] != 1:   # an NHWC job's: (out, k, k, in) filters, dense1 reading (h, w, c)
        for layer in ("conv1", "conv2"):
            values[f"{layer}-weight"] = values[f"{layer}-weight"].permute(0, 3, 1, 2)
        values["dense1-weight"] = values["dense1-weight"].reshape(512, 7, 7, 64).permute(0, 3, 1, 2).reshape(512, -1)
    with torch.no_grad():
        for layer in ("conv1", "conv2", "dense1", "dense2"):
            getattr(model, layer).weight.copy_(values[f"{layer}-weight"])
            getattr(model, layer).bias.copy_(values[f"{layer}-bias"])
    return model.to("cuda" if device == "gpu" else "cpu")


def main(argv=None):
    global B
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=B)
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="after timing, print the top kernels of graphfront, PyTorch eager and torch.compile "
                        "(reduce-overhead) over STEPS steps (torch.profiler)")
    p.add_argument("--channel-last", action="store_true", help="graphfront's job in NHWC (see above)")
    args = p.parse_args(argv)
    B = args.batch
    threads = setup_threads(args)
    rng = np.random.default_rng(0)
    x = rng.random((B, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, B).astype(np.int32)
    train_job = build(args.device, args.channel_last)
    xg = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if args.channel_last else x
    train_job(xg, y)  # compile
    model = torch_model(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)

    torch_step = torch_train_step(model, opt, x, y)

    gf, pt = interleaved(args.steps, args.warmup, lambda: train_job(xg, y), torch_step, args.device)
    print(f"machine: {machine(args.device)}; torch threads: {threads}")
    report(f"LeNet train step (batch {B}, median of {args.steps}{', graphfront NHWC' if args.channel_last else ''})",
           gf, pt)
    if args.profile:
        compiled = torch_model(args.device)
        step = torch_train_step(torch.compile(compiled, mode="reduce-overhead"),
                                torch.optim.SGD(compiled.parameters(), lr=0.1, momentum=0), x, y)
        for _ in range(3):  # (compiles, records its CUDA graphs)
            step()
        profile_sides({"graphfront-plan": lambda: train_job(xg, y), "torch-eager": torch_step,
                       "torch-compile-ro": step}, args.profile, args.device)


if __name__ == "__main__":
    main()
