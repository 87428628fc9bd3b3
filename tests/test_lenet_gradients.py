"""The LeNet train job's generated gradients and SGD step against PyTorch eager autograd."""
import numpy as np
import torch
import torch.nn.functional as F

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc
from lenet import lenet

B = 8
LR = 0.1
VARIABLES = ["conv1-weight", "conv1-bias", "conv2-weight", "conv2-bias",
             "dense1-weight", "dense1-bias", "dense2-weight", "dense2-bias"]


def _torch_lenet(p, x, mask):
    h = F.max_pool2d(F.relu(F.conv2d(x, p["conv1-weight"], p["conv1-bias"], padding=2)), 2, 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, p["conv2-weight"], p["conv2-bias"], padding=2)), 2, 2)
    h = F.relu(F.linear(h.reshape(h.shape[0], -1), p["dense1-weight"], p["dense1-bias"]))
    h = h * mask * 2.0  # dropout 0.5 with graphfront's mask
    return F.linear(h, p["dense2-weight"], p["dense2-bias"])


def test_lenet_gradients_and_sgd_step_match_torch():
    flow.manual_seed(1)
    grads, seen = {}, {}

    def keep(name, store):
        def handler(value: tp.Numpy):
            store[name] = value
        return handler

    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((B, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            logits = lenet(images, train=True)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
            builder = jb.current()
            mask_lbn = "dropout-dropout_random_mask_like/out_0"
            mask_desc = builder.desc(mask_lbn)
            mask = BlobDesc(mask_lbn, mask_desc.shape, mask_desc.dtype, builder.scope.parallel_conf,
                            builder.job_name)
            flow.watch(mask, keep("mask", seen))
            flow.watch_diff(logits, keep("logits", grads))
            for name in VARIABLES:
                var = BlobDesc(f"{name}/out", builder.desc(f"{name}/out").shape, flow.float32,
                               builder.scope.parallel_conf, builder.job_name)
                flow.watch_diff(var, keep(name, grads))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(0)
    x = rng.random((B, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=(B,)).astype(np.int32)
    train_job.compiled_job  # compile + initialize variables
    before = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    loss = train_job(x, y)
    after = {k: v.numpy() for k, v in flow.get_all_variables().items()}

    params = {k: torch.tensor(before[k], requires_grad=True) for k in VARIABLES}
    mask = torch.tensor(seen["mask"].astype(np.float32))
    logits = _torch_lenet(params, torch.tensor(x), mask)
    logits.retain_grad()
    ref_loss = F.cross_entropy(logits, torch.tensor(y).long(), reduction="none")
    ref_loss.sum().backward()

    np.testing.assert_allclose(loss, ref_loss.detach().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["logits"], logits.grad.numpy(), rtol=1e-4, atol=1e-6)
    for name in VARIABLES:
        np.testing.assert_allclose(grads[name], params[name].grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"gradient of {name}")

    # one SGD step on the mean loss, as torch.optim.SGD takes it
    ref = {k: torch.tensor(before[k], requires_grad=True) for k in VARIABLES}
    opt = torch.optim.SGD(ref.values(), lr=LR, momentum=0)
    opt.zero_grad()
    F.cross_entropy(_torch_lenet(ref, torch.tensor(x), mask), torch.tensor(y).long()).backward()
    opt.step()
    for name in VARIABLES:
        np.testing.assert_allclose(after[name], ref[name].detach().numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=f"SGD update of {name}")
    assert after["System-Train-TrainStep-train_job"].tolist() == [1]
