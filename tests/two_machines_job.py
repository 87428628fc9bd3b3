"""One "machine" of the two-machine test (tests/test_distributed.py): run twice, with
GRAPHFRONT_MACHINE_RANK 0 and 1 and one MASTER_PORT; prints the loss trajectory as JSON."""
import json
import sys

import numpy as np

import graphfront as flow
from graphfront import typing as tp


def losses(steps, machines):
    flow.manual_seed(0)
    flow.config.machine_num(machines)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(1)
    devices = [f"{m}:0" for m in range(machines)]

    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((8, 20)), y: tp.Numpy.Placeholder((8,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", devices):
            h = flow.layers.dense(x, 16, activation=flow.nn.relu, kernel_initializer=flow.random_normal_initializer(),
                                  name="fc1")
            logits = flow.layers.dense(h, 5, kernel_initializer=flow.random_normal_initializer(), name="fc2")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-2])).minimize(loss)
        return loss
    rng = np.random.default_rng(0)
    result = []
    for _ in range(steps):
        x = rng.standard_normal((8, 20)).astype(np.float32)
        y = rng.integers(0, 5, 8).astype(np.int32)
        result.append(train_job(x, y).tolist())
    return result


if __name__ == "__main__":
    print(json.dumps(losses(int(sys.argv[1]), 2)))
