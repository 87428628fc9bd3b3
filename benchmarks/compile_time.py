"""Compile time: LeNet train job and a generated 1,000-op job, first call to first result.

    python benchmarks/compile_time.py [--repeats 5]

Each measurement builds the job in a fresh session and times the first call (trace,
completion passes, variable initialization, plan generation and the first run); the
time of a later, steady call is printed beside it, and "compile" is first call minus
steady call. Medians over ``--repeats`` fresh sessions.
"""
import statistics
import time

import numpy as np

from _common import machine, parser, setup_threads

import graphfront as flow
from graphfront import typing as tp
from lenet import lenet

B = 100


def lenet_job():
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((B, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            logits = lenet(images, train=True)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    rng = np.random.default_rng(0)
    return train_job, (rng.random((B, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, B).astype(np.int32))


def chain_job(n_ops=1000):
    """A predict job of ``n_ops`` ops: scalar/unary/binary elementwise ops over a (16, 16) input."""
    @flow.global_function(type="predict")
    def big_job(x: tp.Numpy.Placeholder((16, 16), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h, prev = x, x
            count = 0
            while count < n_ops - 3:  # input and return ops included
                k = count % 4
                if k == 0:
                    nxt = flow.math.tanh(h)
                elif k == 1:
                    nxt = h * 0.5
                elif k == 2:
                    nxt = h + prev
                else:
                    nxt = flow.math.relu(h)
                prev, h = h, nxt
                count += 1
            return h
    return big_job, (np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32),)


def measure(make, repeats):
    firsts, steadies, ops = [], [], 0
    for _ in range(repeats):
        flow.clear_default_session()
        job, feeds = make()
        t = time.perf_counter()
        job(*feeds)
        firsts.append(time.perf_counter() - t)
        t = time.perf_counter()
        job(*feeds)
        steadies.append(time.perf_counter() - t)
        ops = len(job.graph.user_job.net.op)
    return statistics.median(firsts), statistics.median(steadies), ops


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    threads = setup_threads(args)
    measure(lenet_job, 1)  # imports and one-time torch initialization
    print(f"machine: {machine()}; torch threads: {threads}")
    for title, make in (("LeNet train job", lenet_job), ("1,000-op job", chain_job)):
        first, steady, ops = measure(make, args.repeats)
        print(f"{title} ({ops} ops as built): first call to first result {first * 1e3:.1f} ms; steady call "
              f"{steady * 1e3:.1f} ms; compile (difference) {(first - steady) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
