"""The first-step loss of OneFlow's AlexNet and VGG16 test models from fresh weights.

OneFlow's model tests (test/models/alexnet.py, vgg16.py) give every conv weight
``flow.random_uniform_initializer()`` (U(0, 1): all positive, mean 0.5) and every dense
weight ``truncated_normal`` with std 0.8165, and feed mean-subtracted pixels; the tests
then load a trained checkpoint over those weights. From the fresh weights the formulas
alone make the logits astronomically large: each conv layer multiplies the mean
activation by about ``0.5 * fan_in`` (800 to 1,700 for AlexNet's), so AlexNet's first
loss is ~1e21 and VGG16's 13 layers overflow float32 (its loss is NaN). These tests show
that graphfront computes exactly what those formulas give (torch eager in float64 on the
same weights, and on weights drawn independently by torch), and that an AlexNet-shaped
net at OneFlow's layer defaults, on normalized images, starts near ln(classes).
"""
import math
from typing import Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import datasets

RGB_MEAN = np.array([123.68, 116.78, 103.94], np.float32)
RGB_STD = np.array([58.393, 57.12, 57.375], np.float32)
STD_0816 = 0.816496580927726


def _images(batch, size):
    """Fashion-MNIST pictures, upscaled by ``size // 28`` and padded to RGB ``size`` x
    ``size``, mean subtracted (what OneFlow's tests feed: crop_mirror_normalize with the
    RGB mean only)."""
    (images, labels), _ = datasets.find_dataset("fashion")[0]
    scale = size // 28
    up = np.kron(images[:batch].astype(np.float32), np.ones((scale, scale), np.float32))
    lo = (size - up.shape[-1]) // 2
    up = np.pad(up, ((0, 0), (lo, size - up.shape[-1] - lo), (lo, size - up.shape[-1] - lo)))
    x = np.repeat(up[:, None], 3, axis=1) - RGB_MEAN[None, :, None, None]
    return np.ascontiguousarray(x, np.float32), labels[:batch].astype(np.int32) * 97 % 1000


def _weights():
    return {k: v.numpy().copy() for k, v in flow.get_all_variables().items() if "System" not in k}


def _train_job(net, shape, classes):
    @flow.global_function(type="train")
    def train(images: tp.Numpy.Placeholder(shape),
              labels: tp.Numpy.Placeholder((shape[0],), dtype=flow.int32)) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, net(images))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1e-5]), momentum=0).minimize(loss)
        return loss
    return train


# ------------------------------------------------------------ OneFlow's AlexNet test model

def _conv(name, x, filters, k, stride=1, padding="SAME"):
    w = flow.get_variable(f"{name}-weight", (filters, x.shape[1], k, k),
                          initializer=flow.random_uniform_initializer())
    return flow.nn.relu(flow.nn.conv2d(x, w, stride, padding, None, "NCHW", 1, name=name))


def _oneflow_test_alexnet(images):
    x = _conv("conv1", images, 64, 11, 4, "VALID")
    x = flow.nn.avg_pool2d(x, 3, 2, "VALID", "NCHW", name="pool1")
    x = flow.nn.avg_pool2d(_conv("conv2", x, 192, 5), 3, 2, "VALID", "NCHW", name="pool2")
    x = _conv("conv5", _conv("conv4", _conv("conv3", x, 384, 3), 384, 3), 256, 3)
    x = flow.nn.avg_pool2d(x, 3, 2, "VALID", "NCHW", name="pool5")
    x = flow.reshape(x, (x.shape[0], -1))
    for name, units in (("fc1", 4096), ("fc2", 4096)):
        x = flow.layers.dense(x, units, activation=flow.math.relu, use_bias=False,
                              kernel_initializer=flow.truncated_normal(STD_0816), name=name)
    return flow.layers.dense(x, 1001, use_bias=False, kernel_initializer=flow.truncated_normal(STD_0816),
                             name="fc3")


def _torch_alexnet(w, x, labels):
    h = torch.from_numpy(x).double()
    h = F.avg_pool2d(F.relu(F.conv2d(h, w["conv1-weight"], stride=4)), 3, 2)
    h = F.avg_pool2d(F.relu(F.conv2d(h, w["conv2-weight"], padding=2)), 3, 2)
    for name in ("conv3", "conv4", "conv5"):
        h = F.relu(F.conv2d(h, w[f"{name}-weight"], padding=1))
    h = F.avg_pool2d(h, 3, 2).flatten(1)
    h = F.relu(h @ w["fc1-weight"].T)
    h = F.relu(h @ w["fc2-weight"].T)
    return F.cross_entropy(h @ w["fc3-weight"].T, torch.from_numpy(labels).long(), reduction="none").numpy()


def _torch_draws(like, seed):
    """Weights drawn by torch from the same documented formulas: U(0, 1) convs and a
    normal of std 0.8165 truncated at two std for the dense layers."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, value in like.items():
        t = torch.empty(value.shape, dtype=torch.float64)
        if name.startswith("conv"):
            out[name] = t.uniform_(0, 1, generator=g)
        else:
            out[name] = torch.nn.init.trunc_normal_(t, 0, STD_0816, -2 * STD_0816, 2 * STD_0816, generator=g)
    return out


def test_oneflow_alexnet_test_model_first_loss_is_what_its_initializers_give():
    x, labels = _images(2, 163)  # AlexNet's layers; pool5 gives 256 x 4 x 4
    flow.manual_seed(0)
    train = _train_job(_oneflow_test_alexnet, x.shape, 1001)
    w = {k: torch.from_numpy(v).double() for k, v in _weights().items()}
    loss = train(x, labels)

    same_weights = _torch_alexnet(w, x, labels)
    np.testing.assert_allclose(loss, same_weights, rtol=1e-4)
    assert loss.min() > 1e15  # nowhere near ln(1001) = 6.9

    independent = np.concatenate([_torch_alexnet(_torch_draws(w, seed), x, labels) for seed in (1,)])
    # the magnitude comes from the formulas, not from the draw: another draw gives the same order
    assert abs(math.log10(loss.mean()) - math.log10(independent.mean())) < 1.0, (loss, independent)


# ------------------------------------------------------------ OneFlow's VGG16 test model

VGG_BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


def _oneflow_test_vgg16(images):
    x, index = images, 0
    for block, (filters, times) in enumerate(VGG_BLOCKS):
        for _ in range(times):
            w = flow.get_variable(f"conv{index}-weight", (filters, x.shape[1], 3, 3),
                                  initializer=flow.random_uniform_initializer())
            b = flow.get_variable(f"conv{index}-bias", (filters,), initializer=flow.constant_initializer())
            x = flow.math.relu(flow.nn.bias_add(flow.nn.conv2d(x, w, 1, "SAME", None, "NCHW", 1,
                                                               name=f"conv{index}"), b, "NCHW"))
            index += 1
        x = flow.nn.max_pool2d(x, 2, 2, "VALID", "NCHW", name=f"pool{block + 1}")
    x = flow.reshape(x, (-1, 512))
    for name, units, act in (("fc1", 4096, flow.math.relu), ("fc2", 4096, flow.math.relu),
                             ("fc_final", 1001, None)):
        x = flow.layers.dense(x, units, activation=act, kernel_initializer=flow.truncated_normal(STD_0816),
                              bias_initializer=flow.constant_initializer(0.0), name=name)
    return x


def test_oneflow_vgg16_test_model_overflows_float32_by_its_initializers():
    # 32x32 pictures: five 2x2 pools leave 1x1x512, the shape OneFlow's reshape(-1, 512) expects
    x, labels = _images(2, 32)
    flow.manual_seed(0)
    train = _train_job(_oneflow_test_vgg16, x.shape, 1001)
    w = {k: torch.from_numpy(v).double() for k, v in _weights().items()}
    loss = train(x, labels)
    assert np.isnan(loss).all()

    h = torch.from_numpy(x).double()  # the same net in float64 on the same weights
    index = 0
    for filters, times in VGG_BLOCKS:
        for _ in range(times):
            h = F.relu(F.conv2d(h, w[f"conv{index}-weight"], w[f"conv{index}-bias"], padding=1))
            index += 1
        h = F.max_pool2d(h, 2, 2)
    h = h.reshape(-1, 512)
    for name, act in (("fc1", F.relu), ("fc2", F.relu), ("fc_final", lambda t: t)):
        h = act(h @ w[f"{name}-weight"].T + w[f"{name}-bias"])
    peak = h.abs().max().item()
    # the logits exceed float32's range (float32 gives inf, and inf - inf in the softmax
    # is NaN); in float64 they are finite
    assert float(np.finfo(np.float32).max) < peak < math.inf, peak


# ------------------------------------------------------------ OneFlow's layer defaults

def _alexnet_at_defaults(images):
    """AlexNet's shape with flow.layers' default initializers (conv: Glorot uniform over
    the NCHW fans, zero bias); the dense layers use Glorot uniform too (flow.layers.dense
    defaults to zeros, which would start at ln(classes) trivially)."""
    relu = flow.nn.relu
    x = flow.layers.conv2d(images, 64, 11, 4, "VALID", activation=relu, name="conv1")
    x = flow.nn.max_pool2d(x, 3, 2, "VALID", "NCHW")
    x = flow.layers.conv2d(x, 192, 5, 1, "SAME", activation=relu, name="conv2")
    x = flow.nn.max_pool2d(x, 3, 2, "VALID", "NCHW")
    for i, filters in ((3, 384), (4, 384), (5, 256)):
        x = flow.layers.conv2d(x, filters, 3, 1, "SAME", activation=relu, name=f"conv{i}")
    x = flow.nn.max_pool2d(x, 3, 2, "VALID", "NCHW")
    x = flow.reshape(x, (x.shape[0], -1))
    for i in (6, 7):
        x = flow.layers.dense(x, 4096, activation=relu, kernel_initializer=flow.xavier_uniform_initializer(),
                              name=f"fc{i}")
        x = flow.nn.dropout(x, 0.5)
    return flow.layers.dense(x, 1000, kernel_initializer=flow.xavier_uniform_initializer(), name="fc8")


@pytest.mark.parametrize("seed", [0, 1])
def test_alexnet_at_oneflow_defaults_starts_near_ln_classes(seed):
    x, labels = _images(4, 227)
    x = x / RGB_STD[None, :, None, None]  # normalized as OneFlow-Benchmark's pipeline does
    flow.manual_seed(seed)

    @flow.global_function(type="train")
    def train(images: tp.Numpy.Placeholder(x.shape),
              labels: tp.Numpy.Placeholder((x.shape[0],), dtype=flow.int32)) -> Tuple[tp.Numpy, tp.Numpy]:
        logits = _alexnet_at_defaults(images)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1e-3]), momentum=0.9).minimize(loss)
        return loss, logits

    loss, z = train(x, labels)
    assert np.isfinite(loss).all()
    # |logsumexp(z) - ln C - z_label| <= 2 max|z|, and Glorot's scaling keeps the logits small
    assert np.abs(z).max() < 1.0, np.abs(z).max()
    assert np.abs(loss - math.log(1000)).max() <= 2 * np.abs(z).max(), loss
    reference = F.cross_entropy(torch.from_numpy(z).double(), torch.from_numpy(labels).long(), reduction="none")
    np.testing.assert_allclose(loss, reference.numpy(), rtol=1e-5)
