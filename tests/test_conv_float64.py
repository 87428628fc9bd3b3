"""graphfront's convolutions (forward, data grad, filter grad, fused grad; NCHW and NHWC;
1-D, 2-D, 3-D) against a float64 reference computed on contiguous channels_first tensors.

torch 2.13's CPU convolution corrupts memory and returns wrong, run-to-run different
gradients for channels_last-strided inputs with 1x1 kernels and strides > 1; graphfront's
kernels give torch stride 1 along such unpadded kernel dims, reading every s-th input
position (``nn_ops.ConvRoute``), else contiguous tensors, and dilation 1 on
size-1 kernel dims. Each autotest runs several times within its test so that run-to-run
variance shows.
"""
import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.ops.nn_ops import channels_last, dense
from graphfront.testing import autotest, oneof, random, random_bool, random_tensor

FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
REPEATS = 3


def float64_conv(torch, x, w, strides, pads, dilations, groups, channels_last):
    """The reference: contiguous channels_first float64, explicit (before, after) pads."""
    F = torch.nn.functional
    n = x.dim() - 2
    x, w = x.double(), w.double()
    if channels_last:
        x, w = x.movedim(-1, 1), w.movedim(-1, 1)
    x = F.pad(x.contiguous(), [p for pair in reversed(pads) for p in pair])
    y = getattr(F, f"conv{n}d")(x, w.contiguous(), stride=strides, dilation=dilations, groups=groups)
    return (y.movedim(1, -1) if channels_last else y).float()


def _tensor(shape):
    return random_tensor(len(shape), *(list(shape) + [None] * (5 - len(shape))), low=-1, high=1)


def _draw_conv(check, n, kernel=None):
    channels_last = random_bool().value()
    groups = 1 if channels_last else oneof(1, 2).value()
    cin, cout = groups * random(1, 4).to(int).value(), groups * random(1, 4).to(int).value()
    k = [kernel if kernel else random(1, 4).to(int).value() for _ in range(n)]
    s = [random(1, 3).to(int).value() for _ in range(n)]
    d = [random(1, 3).to(int).value() for _ in range(n)]
    size = [random((ki - 1) * di + 1, (9 if n < 3 else 6) + 1).to(int).value() for ki, di in zip(k, d)]
    pads = [(p, p) for p in (random(0, 3).to(int).value() for _ in range(n))]
    batch = random(1, 4).to(int).value()
    x_shape = [batch] + (size + [cin] if channels_last else [cin] + size)
    w_shape = [cout] + (k + [cin // groups] if channels_last else [cin // groups] + k)
    fmt = FORMATS[n][1 if channels_last else 0]
    check(graphfront=lambda flow, x, w: getattr(flow.nn, f"conv{n}d")(x, w, s, pads, data_format=fmt,
                                                                      dilations=d, groups=groups),
          torch=lambda torch, x, w: float64_conv(torch, x, w, s, pads, d, groups, channels_last),
          x=_tensor(x_shape), w=_tensor(w_shape))


@autotest(n=10)
def conv1d_vs_float64(check):
    _draw_conv(check, 1)


@autotest(n=12)
def conv2d_vs_float64(check):
    _draw_conv(check, 2)


@autotest(n=12)
def conv2d_1x1_vs_float64(check):
    """1x1 kernels: strides and dilations drawn as for any kernel (the broken torch path)."""
    _draw_conv(check, 2, kernel=1)


@autotest(n=6)
def conv3d_vs_float64(check):
    _draw_conv(check, 3)


def _repeat(at):
    for _ in range(REPEATS):
        stats = at.autotest.run()
        assert stats.draws == at.autotest.n and not stats.torch_bugs


def test_conv1d_matches_float64():
    _repeat(conv1d_vs_float64)


def test_conv2d_matches_float64():
    _repeat(conv2d_vs_float64)


def test_conv2d_1x1_matches_float64():
    _repeat(conv2d_1x1_vs_float64)


def test_conv3d_matches_float64():
    _repeat(conv3d_vs_float64)


SWEEP_DRAWS = 200


@pytest.mark.slow
@pytest.mark.parametrize("family", [conv1d_vs_float64, conv2d_vs_float64, conv2d_1x1_vs_float64, conv3d_vs_float64],
                         ids=lambda f: f.autotest.name)
def test_convolution_family_sweep(family):
    """Far more draws than the default over the whole family (grouped, dilated, strided,
    padded; NCHW and NHWC; 1-D, 2-D, 3-D), from a seed of its own (not the default one)."""
    stats = family.autotest.run(n=SWEEP_DRAWS, seed=family.autotest.default_seed() + 1)
    assert stats.draws == SWEEP_DRAWS and not stats.torch_bugs


def _train_1x1(channels_last, cin=3, device_tag=None, pads=((0, 0), (0, 0))):
    """Gradients of sum(conv2d) with a 1x1 kernel, strides (2, 1), dilations (2, 1), padding
    ``pads`` (VALID), on the session's default device or on ``device_tag`` ("cpu" / "gpu")."""
    flow.clear_default_session()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 7, 5, cin) if channels_last else (2, cin, 7, 5)).astype(np.float32)
    w0 = rng.standard_normal((4, 1, 1, cin) if channels_last else (4, cin, 1, 1)).astype(np.float32)
    grads = {}
    cfg = flow.FunctionConfig()
    if device_tag is not None:
        cfg.default_placement_scope(flow.scope.placement(device_tag, "0:0"))

    @flow.global_function(type="train", function_config=cfg)
    def job(x: tp.Numpy.Placeholder(x.shape)) -> tp.Numpy:
        w = flow.get_variable("w", w0.shape, initializer=flow.zeros_initializer())
        y = flow.nn.conv2d(x, w, [2, 1], [list(p) for p in pads], data_format="NHWC" if channels_last else "NCHW",
                           dilations=[2, 1])
        loss = flow.math.reduce_sum(y * y)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0])).minimize(loss)
        flow.watch_diff(w, lambda g: grads.__setitem__("w", np.array(g)))
        return y

    flow.load_variables({"w": w0})
    y = job(x)
    xt, wt = torch.from_numpy(x).double(), torch.from_numpy(w0).double().requires_grad_()
    ref = float64_conv(torch, xt, wt, [2, 1], pads, [2, 1], 1, channels_last).double()
    (ref * ref).sum().backward()
    return y, grads["w"], ref.detach().numpy(), wt.grad.numpy()


def test_strided_1x1_weight_gradient_is_right_every_time():
    for channels_last in (False, True):
        for cin in (3, 1):
            for _ in range(10):
                y, gw, ref_y, ref_gw = _train_1x1(channels_last, cin)
                np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(gw, ref_gw, rtol=1e-4, atol=1e-4)


def test_dense_copies_only_strided_cpu_tensors():
    t = torch.randn(2, 3, 4, 5)
    assert dense(t) is t
    last = t.permute(0, 2, 3, 1)
    assert not last.is_contiguous() and dense(last).is_contiguous()
    np.testing.assert_array_equal(dense(last).numpy(), last.numpy())
    # One channel: the permuted tensor counts as contiguous but keeps channels_last strides;
    # dense gives it the channels_first ones as a view of the same memory.
    one = torch.randn(2, 6, 4, 1).permute(0, 3, 1, 2)
    assert one.is_contiguous() and one.stride() == (24, 1, 4, 1)
    assert dense(one).stride() == (24, 24, 4, 1) and dense(one).data_ptr() == one.data_ptr()
    assert torch.equal(dense(one), one)


def test_channels_last_restrides_one_channel_tensors_and_copies_the_others():
    one = torch.randn(2, 1, 4, 5)
    assert channels_last(one).stride() == (20, 1, 5, 1) and channels_last(one).data_ptr() == one.data_ptr()
    assert torch.equal(channels_last(one), one)
    many = torch.randn(2, 3, 4, 5, 6)
    last = channels_last(many)
    assert last.stride() == (360, 1, 90, 18, 3) and torch.equal(last, many)
    assert channels_last(last) is last


def _conv_train_job(x, w0, v, conv, device_tag=None):
    """A train job returning ``y = conv(xv + x, w)`` and minimizing ``sum(y * v)`` (SGD,
    learning rate 0) over variables ``xv`` (zeros) and ``w`` (``w0``), on the default
    device or on ``device_tag``; the dict it returns beside the job receives the gradients
    of ``w`` ("w") and ``xv`` ("x") at each call."""
    grads = {}
    flow.clear_default_session()
    cfg = flow.FunctionConfig()
    if device_tag is not None:
        cfg.default_placement_scope(flow.scope.placement(device_tag, "0:0"))

    @flow.global_function(type="train", function_config=cfg)
    def job(x: tp.Numpy.Placeholder(x.shape), v: tp.Numpy.Placeholder(v.shape)) -> tp.Numpy:
        xv = flow.get_variable("x", x.shape, initializer=flow.zeros_initializer())
        w = flow.get_variable("w", w0.shape, initializer=flow.zeros_initializer())
        y = conv(xv + x, w)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0])).minimize(
            flow.math.reduce_sum(y * v))
        flow.watch_diff(w, lambda g: grads.__setitem__("w", np.array(g)))
        flow.watch_diff(xv, lambda g: grads.__setitem__("x", np.array(g)))
        return y

    flow.load_variables({"w": w0})
    return job, grads


def test_nhwc_one_channel_strided_filter_gradient():
    """The AutoTest draw that found torch's channels_last path through an NHWC input with
    one channel: x (2, 6, 4, 1), w (2, 1, 1, 1), strides (2, 2), dilations (2, 1), VALID;
    every gradient of sum(y * v) against float64, over repeated runs in one process."""
    rng = np.random.default_rng(1874964862)
    x = rng.uniform(-1, 1, (2, 6, 4, 1)).astype(np.float32)
    w0 = rng.uniform(-1, 1, (2, 1, 1, 1)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, 3, 2, 2)).astype(np.float32)
    job, grads = _conv_train_job(x, w0, v, lambda x, w: flow.nn.conv2d(x, w, [2, 2], "VALID", data_format="NHWC",
                                                                       dilations=[2, 1]))
    xt = torch.from_numpy(x).double().requires_grad_()
    wt = torch.from_numpy(w0).double().requires_grad_()
    ref = float64_conv(torch, xt, wt, [2, 2], [(0, 0), (0, 0)], [2, 1], 1, True).double()
    (ref * torch.from_numpy(v).double()).sum().backward()
    # float32 error bound: each gradient element sums at most 12 products of values in
    # [-1, 1], so |error| <= 12 * 12 * 2**-24 ~ 8.6e-6 (forward: one product, ~1e-7)
    for _ in range(20):
        y = job(x, v)
        np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads["w"], wt.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def _spy_convolution_backward(monkeypatch):
    """The (dy, x, w, stride, dilation) of every convolution_backward call graphfront's
    convolution kernels make from here on."""
    from graphfront.ops import fused_ops, nn_ops
    real = torch.ops.aten.convolution_backward
    seen = []

    class Spy:
        def __getattr__(self, name):
            return getattr(torch.ops.aten, name)

        @staticmethod
        def convolution_backward(dy, x, w, bias_sizes, stride, padding, dilation, *rest):
            seen.append((dy, x, w, list(stride), list(dilation)))
            return real(dy, x, w, bias_sizes, stride, padding, dilation, *rest)

    monkeypatch.setattr(nn_ops, "_aten", Spy())
    monkeypatch.setattr(fused_ops, "_aten", Spy())
    return seen


def test_unpadded_strided_1x1_kernels_reach_torch_with_stride_1_in_their_layout(monkeypatch):
    """The route around torch's broken path for unpadded size-1 kernel dims: every
    convolution_backward call (data, filter and fused grads) gets stride 1 and dilation 1
    there and reads every second row of x in x's own layout (an NHWC job's x stays
    channels-last: a view, not a channels-first copy). On the CPU, also where CUDA is present."""
    seen = _spy_convolution_backward(monkeypatch)
    for channels_last in (False, True):
        for cin in (3, 1):
            y, gw, ref_y, ref_gw = _train_1x1(channels_last, cin, "cpu")
            np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(gw, ref_gw, rtol=1e-4, atol=1e-4)
            assert seen and all(stride == [1, 1] and dilation == [1, 1] for *_, stride, dilation in seen), seen
            assert all(x.shape[2] == 4 for _, x, *_ in seen)           # (rows 0, 2, 4, 6 of 7)
            if channels_last and cin > 1:
                assert all(x.stride(1) == 1 for _, x, *_ in seen)    # (channels innermost, as the NHWC blob)
            seen.clear()


def test_padded_strided_1x1_kernels_get_contiguous_inputs_and_undilated_kernels(monkeypatch):
    """Where the route cannot go (a padded size-1 kernel dim reads zeros outside x): every
    convolution_backward call receives contiguous channels_first tensors and dilation 1."""
    def standard(t):  # contiguous *and* with channels_first strides, whatever the size-1 dims
        return t.is_contiguous() and t.stride() == torch.empty(t.shape).stride()
    seen = _spy_convolution_backward(monkeypatch)
    for channels_last in (False, True):
        for cin in (3, 1):
            y, gw, ref_y, ref_gw = _train_1x1(channels_last, cin, "cpu", pads=((1, 1), (0, 0)))
            np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(gw, ref_gw, rtol=1e-4, atol=1e-4)
    assert len(seen) >= 2
    assert all((standard(dy), standard(x), standard(w), stride, dilation) == (True, True, True, [2, 1], [1, 1])
               for dy, x, w, stride, dilation in seen), seen


def _cl_strides(t):
    """The strides of a channels-last tensor of ``t``'s shape."""
    return torch.empty(t.shape, memory_format=torch.channels_last).stride()


@pytest.mark.parametrize("cin", [1, 3])
def test_one_channel_nchw_convolutions_run_channels_last_on_the_cpu(monkeypatch, cin):
    """An NCHW float32 convolution of a one-channel input (LeNet's first layer) hands torch
    channels-last x, w and dy (oneDNN's fast path; the one-channel x and w as views, no
    copy); with more input channels x keeps its contiguous layout (the CPU stores every
    NCHW convolution's weight channels-last anyway). Every gradient against
    float64, over repeated steps."""
    seen = _spy_convolution_backward(monkeypatch)
    rng = np.random.default_rng(20261128)
    x = rng.uniform(-1, 1, (4, cin, 12, 12)).astype(np.float32)
    w0 = rng.uniform(-1, 1, (6, cin, 5, 5)).astype(np.float32)
    v = rng.uniform(-1, 1, (4, 6, 12, 12)).astype(np.float32)
    job, grads = _conv_train_job(x, w0, v, lambda x, w: flow.nn.conv2d(x, w, [1, 1], "SAME", data_format="NCHW"),
                                 "cpu")
    xt = torch.from_numpy(x).double().requires_grad_()
    wt = torch.from_numpy(w0).double().requires_grad_()
    ref = float64_conv(torch, xt, wt, [1, 1], [(2, 2), (2, 2)], [1, 1], 1, False).double()
    (ref * torch.from_numpy(v).double()).sum().backward()
    # float32 error bound: a gradient element sums at most 4 * 12 * 12 = 576 (w) or
    # 6 * 25 = 150 (x) products of values in [-1, 1]: |error| <= 576**2 * 2**-24 ~ 2e-2 worst
    # case, ~576 * 2**-24 * sqrt(576) ~ 1e-3 for rounding errors that do not all align
    for _ in range(3):
        y = job(x, v)
        np.testing.assert_allclose(y, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(grads["w"], wt.grad.numpy(), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(grads["x"], xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert seen
    for dy, xs, w, *_ in seen:
        if cin == 1:
            assert xs.stride() == _cl_strides(xs) and w.stride() == _cl_strides(w) and dy.stride() == _cl_strides(dy)
        else:
            assert xs.stride() == torch.empty(xs.shape).stride()


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shapes", [((2, 1, 5, 4), (1, 1, 2, 3), [1, 2], (0, 0)),
                                    ((4, 1, 10, 4), (5, 1, 2, 3), [1, 2], (1, 0)),
                                    ((6, 1, 10, 3), (1, 1, 4, 3), [1, 3], (2, 1))],
                         ids=["2x1x5x4", "4x1x10x4-padded", "6x1x10x3"])
def test_one_channel_convolution_with_a_strided_size_1_output_dim(fmt, shapes):
    """torch 2.13's channels-last CPU convolution of a one-channel input writes garbage
    where an output dim of size 1 has stride > 1 (found by the conv2d AutoTest; NHWC
    inputs with one channel reach that path by permuting): such convolutions run on
    channels-first strides. Forward against float64 in both data formats."""
    x_shape, w_shape, strides, pads = shapes
    last = fmt == "NHWC"
    # (values of their own per format: the garbage is whatever the output's memory held,
    # which may be another test's identical result)
    rng = np.random.default_rng(3 + last)
    x = rng.uniform(-1, 1, x_shape).astype(np.float32)
    w = rng.uniform(-1, 1, w_shape).astype(np.float32)
    # (NHWC arrays laid out as a user's are: a transposed view keeps the channel dim's
    # channels-first stride, which numpy's contiguity ignores for a size-1 dim)
    xf, wf = (a.transpose(0, 2, 3, 1).copy() for a in (x, w)) if last else (x, w)
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder(xf.shape), w: tp.Numpy.Placeholder(wf.shape)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.nn.conv2d(x, w, strides, [[p, p] for p in pads], data_format=fmt)

    ref = float64_conv(torch, torch.from_numpy(x), torch.from_numpy(w), strides, [(p, p) for p in pads], [1, 1], 1,
                       False).double().numpy()
    assert ref.shape[3] == 1
    got = job(xf, wf)
    # (each output sums at most 12 products of values in [-1, 1]: float32 error < 12 * 2**-24)
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2) if last else got, ref, rtol=0, atol=1e-6)


def test_one_channel_ndhwc_convolution_with_a_strided_size_1_output_dim():
    """The same torch fault in 3-D: an NDHWC one-channel input, its last output dim of size
    1 with stride 3."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (3, 1, 4, 5, 4)).astype(np.float32)
    w = rng.uniform(-1, 1, (2, 1, 2, 2, 3)).astype(np.float32)
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3, 4, 5, 4, 1)), w: tp.Numpy.Placeholder((2, 2, 2, 3, 1))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.nn.conv3d(x, w, [2, 1, 3], "VALID", data_format="NDHWC")

    ref = float64_conv(torch, torch.from_numpy(x), torch.from_numpy(w), [2, 1, 3], [(0, 0)] * 3, [1, 1, 1], 1,
                       False).double().numpy()
    assert ref.shape[2:] == (2, 4, 1)
    got = job(x.transpose(0, 2, 3, 4, 1).copy(), w.transpose(0, 2, 3, 4, 1).copy())
    # (each output sums 12 products of values in [-1, 1]: float32 error < 12 * 2**-24)
    np.testing.assert_allclose(got.transpose(0, 4, 1, 2, 3), ref, rtol=0, atol=1e-6)
