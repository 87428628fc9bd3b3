"""AutoTest of the nn op families (activation_ops, loss_ops, norm_ops, pool_ops) against
PyTorch eager.

Every op type those modules register is exercised: forward ops through their flow.nn /
flow.layers wrapper or flow.user_op_builder (ops without a single-client wrapper), grad
ops through auto_backward. Labels, targets, weights and statistics that OneFlow does not
differentiate are drawn with ``requires_grad=False``; shapes, axes and attrs come from the
draw's rng (``check.rng``) so that they fit together.
"""
import numpy as np
import pytest

from graphfront.ops.builder import build_op
from graphfront.testing import autotest, constant, nothing, random_tensor

N = 20
EPS = 1e-3


def dims(check, ndim, low=1, high=5):
    return [int(d) for d in check.rng.integers(low, high, size=ndim)]


def tensor(shape, low=-2.0, high=2.0, requires_grad=True):
    """A float32 tensor generator of exactly ``shape`` (rank 0..5)."""
    names = {f"dim{i}": d for i, d in enumerate(shape)}
    return random_tensor(ndim=len(shape), low=low, high=high, requires_grad=requires_grad, **names)


def ints(check, shape, high, low=0, dtype=np.int64):
    return constant(check.rng.integers(low, high, size=shape).astype(dtype))


def uniform(check, low, high):
    return float(check.rng.uniform(low, high))


def spatial_ranks(check):
    """Spatial ranks to test in this draw: all of 1, 2, 3 in draw 0 (so that a short run still
    exercises every op type), then one rank per draw in turn."""
    return (1, 2, 3) if check.draw == 0 else (1 + check.draw % 3,)


def build(flow, op_type, inputs, outputs, attrs=None):
    """One user op through flow.user_op_builder; returns its output blobs (a tuple)."""
    out = build_op(op_type, inputs, attrs, outputs, name=flow.util.unique_str(op_type + "_"))
    return out if isinstance(out, tuple) else (out,)


# ================================================================== activations

@autotest(n=N)
def test_leaky_relu(check):
    alpha = uniform(check, 0.0, 1.0)
    check(graphfront=lambda flow, x: flow.nn.leaky_relu(x, alpha=alpha),
          torch=lambda torch, x: torch.nn.functional.leaky_relu(x, alpha),
          x=random_tensor(ndim=4, dim0=int(check.rng.integers(1, 4)), low=-2, high=2))


@autotest(n=N)
def test_elu_celu(check):
    alpha, calpha = uniform(check, 0.1, 2.0), uniform(check, 0.2, 2.0)
    check(graphfront=lambda flow, x: [flow.nn.elu(x, alpha), flow.nn.celu(x, calpha)],
          torch=lambda torch, x: [torch.nn.functional.elu(x, alpha), torch.nn.functional.celu(x, calpha)],
          x=tensor(dims(check, int(check.rng.integers(1, 5))), -3, 3))


@autotest(n=N)
def test_smooth_activations(check):
    """selu, silu, softsign, mish."""
    check(graphfront=lambda flow, x: [flow.nn.selu(x), flow.nn.silu(x), flow.nn.softsign(x), flow.nn.mish(x)],
          torch=lambda torch, x: [torch.nn.functional.selu(x), torch.nn.functional.silu(x),
                                  torch.nn.functional.softsign(x), torch.nn.functional.mish(x)],
          x=tensor(dims(check, int(check.rng.integers(1, 5))), -4, 4))


@autotest(n=N)
def test_hard_activations(check):
    """hardsigmoid, hardswish, hardtanh (random bounds), relu6."""
    lo = uniform(check, -2.0, 0.5)
    hi = lo + uniform(check, 0.1, 3.0)
    check(graphfront=lambda flow, x: [flow.nn.hardsigmoid(x), flow.nn.hardswish(x), flow.nn.hardtanh(x, lo, hi),
                                      flow.nn.relu6(x)],
          torch=lambda torch, x: [torch.nn.functional.hardsigmoid(x), torch.nn.functional.hardswish(x),
                                  torch.nn.functional.hardtanh(x, lo, hi), torch.nn.functional.relu6(x)],
          x=tensor(dims(check, int(check.rng.integers(1, 5))), -5, 8))


@autotest(n=N)
def test_swish(check):
    beta = float(check.rng.choice([1.0, uniform(check, 0.2, 2.0)]))
    check(graphfront=lambda flow, x: flow.nn.swish(x, beta),
          torch=lambda torch, x: x * torch.sigmoid(beta * x),
          x=tensor(dims(check, 3)))


@autotest(n=N)
def test_prelu(check):
    shape = dims(check, int(check.rng.integers(2, 5)))
    a_shape = [shape[1] if check.rng.random() < 0.7 else 1]
    check(graphfront=lambda flow, x, alpha: flow.nn.prelu(x, alpha),
          torch=lambda torch, x, alpha: torch.nn.functional.prelu(x, alpha),
          x=tensor(shape), alpha=tensor(a_shape, 0.0, 0.5))


@autotest(n=N)
def test_tf_prelu(check):
    shape = dims(check, int(check.rng.integers(2, 5)))
    a_shape = [d if check.rng.random() < 0.6 else 1 for d in shape[1:]]
    check(graphfront=lambda flow, x, alpha: build(flow, "tf_prelu", {"x": x, "alpha": alpha}, ["y"]),
          torch=lambda torch, x, alpha: torch.where(x > 0, x, x * alpha),
          x=tensor(shape), alpha=tensor(a_shape, 0.0, 0.5))


# ================================================================== softmax family and losses

@autotest(n=N)
def test_logsoftmax(check):
    shape = dims(check, int(check.rng.integers(1, 5)), high=6)
    axis = int(check.rng.integers(-len(shape), len(shape))) if check.rng.random() < 0.5 else None
    check(graphfront=lambda flow, x: flow.nn.logsoftmax(x, axis),
          torch=lambda torch, x: torch.log_softmax(x, -1 if axis is None else axis),
          x=tensor(shape, -3, 3))


@autotest(n=N)
def test_softmax_cross_entropy_with_logits(check):
    shape = dims(check, int(check.rng.integers(2, 4)), high=6)
    # label rows are distributions (OneFlow's gradient prob - label assumes so)
    check(graphfront=lambda flow, x, t: flow.nn.softmax_cross_entropy_with_logits(
              t / flow.math.reduce_sum(t, axis=-1, keepdims=True), x),
          torch=lambda torch, x, t: -(t / t.sum(-1, keepdim=True) * torch.log_softmax(x, -1)).sum(-1),
          x=tensor(shape, -3, 3), t=tensor(shape, 0.1, 1, requires_grad=False))


@autotest(n=N)
def test_sigmoid_cross_entropy_with_logits(check):
    shape = dims(check, int(check.rng.integers(1, 5)))
    check(graphfront=lambda flow, x, t: flow.nn.sigmoid_cross_entropy_with_logits(t, x),
          torch=lambda torch, x, t: torch.nn.functional.binary_cross_entropy_with_logits(x, t, reduction="none"),
          x=tensor(shape, -4, 4), t=tensor(shape, 0, 1, requires_grad=False))


@autotest(n=N)
def test_sparse_cross_entropy(check):
    """sparse_cross_entropy (flow.nn wrapper) and sparse_cross_entropy_ms (builder) on probabilities."""
    shape = dims(check, int(check.rng.integers(2, 4)), high=6)
    depth = shape[-1]
    label = ints(check, shape[:-1], depth, dtype=np.int32 if check.rng.random() < 0.5 else np.int64)

    def gf(flow, p, label):
        ms = build(flow, "sparse_cross_entropy_ms", {"prediction": p, "label": label}, ["out"], {"depth": depth})
        return [flow.nn.sparse_cross_entropy(label, p), ms[0]]

    def th(torch, p, label):
        out = -torch.log(p.gather(-1, label.long().unsqueeze(-1)).squeeze(-1))
        return [out, out]
    check(graphfront=gf, torch=th, p=tensor(shape, 0.05, 1.0), label=label)


@autotest(n=N)
def test_bce_loss(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    reduction = str(check.rng.choice(["none", "mean", "sum"]))
    weight = tensor(shape, 0.2, 2.0, requires_grad=False) if check.rng.random() < 0.6 else nothing()
    check(graphfront=lambda flow, x, t, w=None: flow.nn.BCELoss(x, t, w, reduction=reduction),
          torch=lambda torch, x, t, w=None: torch.atleast_1d(
              torch.nn.functional.binary_cross_entropy(x, t, w, reduction=reduction)),
          x=tensor(shape, 0.02, 0.98), t=tensor(shape, 0, 1, requires_grad=False), w=weight)


@autotest(n=N)
def test_bce_with_logits_loss(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    reduction = str(check.rng.choice(["none", "mean", "sum"]))
    weight = tensor(shape, 0.2, 2.0, requires_grad=False) if check.rng.random() < 0.5 else nothing()
    pos_weight = tensor(shape[-1:], 0.2, 3.0, requires_grad=False) if check.rng.random() < 0.6 else nothing()
    check(graphfront=lambda flow, x, t, w=None, pw=None: flow.nn.BCEWithLogitsLoss(x, t, w, pw, reduction=reduction),
          torch=lambda torch, x, t, w=None, pw=None: torch.atleast_1d(torch.nn.functional.binary_cross_entropy_with_logits(
              x, t, w, reduction=reduction, pos_weight=pw)),
          x=tensor(shape, -4, 4), t=tensor(shape, 0, 1, requires_grad=False), w=weight, pw=pos_weight)


@autotest(n=N)
def test_kl_div_loss(check):
    shape = dims(check, int(check.rng.integers(1, 4)))
    log_target = bool(check.rng.random() < 0.5)
    reduction = str(check.rng.choice(["none", "mean", "sum"]))
    target = tensor(shape, -3, 0, requires_grad=False) if log_target else tensor(shape, 0.01, 1, requires_grad=False)

    def th(torch, x, t):
        loss = t.exp() * (t - x) if log_target else t * (t.log() - x)
        return {"none": loss, "mean": loss.mean().reshape(1), "sum": loss.sum().reshape(1)}[reduction]
    check(graphfront=lambda flow, x, t: flow.nn.KLDivLoss(x, t, log_target, reduction),
          torch=th, x=tensor(shape, -3, 0), t=target)


@autotest(n=N)
def test_smooth_l1_loss(check):
    shape = dims(check, int(check.rng.integers(1, 5)))
    beta = float(check.rng.choice([0.0, uniform(check, 0.1, 2.0)]))
    check(graphfront=lambda flow, x, t: flow.nn.smooth_l1_loss(x, t, beta=beta),
          torch=lambda torch, x, t: torch.nn.functional.smooth_l1_loss(x, t, reduction="none", beta=beta),
          x=tensor(shape), t=tensor(shape, requires_grad=False))


@autotest(n=N)
def test_nll(check):
    n, c = dims(check, 2, high=7)
    ignore = int(check.rng.integers(-1, c))
    target = ints(check, (n,), c)
    weight = tensor([c], 0.2, 2.0, requires_grad=False) if check.rng.random() < 0.5 else nothing()

    def gf(flow, x, t, w=None):
        return list(build(flow, "nll", {"input": x, "target": t, "weight": w}, ["out", "total_weight"],
                          {"ignore_index": ignore}))

    def th(torch, x, t, w=None):
        out = torch.nn.functional.nll_loss(x, t, w, ignore_index=ignore, reduction="none")
        per = (torch.ones(n, dtype=x.dtype) if w is None else w[t]) * (t != ignore)
        return [out, per.sum().reshape(1)]
    check(graphfront=gf, torch=th, x=tensor([n, c], -3, 0), t=target, w=weight)


# ================================================================== normalization

def _bn_case(check):
    shape = dims(check, int(check.rng.integers(2, 5)), 2, 5)
    axis = int(check.rng.choice([1, len(shape) - 1]))
    view = [1] * len(shape)
    view[axis] = shape[axis]
    perm = [i for i in range(len(shape)) if i != axis]
    return shape, axis, view, perm


@autotest(n=N)
def test_normalization_training(check):
    """Training batch norm (no moving statistics): y * c and its gradients to x, gamma, beta."""
    shape, axis, view, axes = _bn_case(check)
    c = shape[axis]

    def gf(flow, x, gamma, beta, k):
        y, _mean, _inv = build(flow, "normalization", {"x": x, "gamma": gamma, "beta": beta},
                               ["y", "mean", "inv_variance"], {"axis": axis, "epsilon": EPS, "training": True})
        return flow.math.multiply(y, k)

    def th(torch, x, gamma, beta, k):
        var, mean = torch.var_mean(x, dim=axes, unbiased=False, keepdim=True)
        y = (x - mean) / torch.sqrt(var + EPS) * gamma.reshape(view) + beta.reshape(view)
        return y * k
    check(graphfront=gf, torch=th, x=tensor(shape, -3, 3), gamma=tensor([c], 0.5, 2), beta=tensor([c], -1, 1),
          k=tensor(shape, requires_grad=False))


@autotest(n=N, auto_backward=False)
def test_normalization_statistics_outputs(check):
    """Forward outputs of a training batch norm: y, mean and inv_variance = rsqrt(var + eps)."""
    shape, axis, view, axes = _bn_case(check)
    c = shape[axis]

    def th(torch, x, gamma, beta):
        var, mean = torch.var_mean(x, dim=axes, unbiased=False)
        inv = torch.rsqrt(var + EPS)
        y = (x - mean.reshape(view)) * (inv * gamma).reshape(view) + beta.reshape(view)
        return [y, mean, inv]
    check(graphfront=lambda flow, x, gamma, beta: list(build(
              flow, "normalization", {"x": x, "gamma": gamma, "beta": beta}, ["y", "mean", "inv_variance"],
              {"axis": axis, "epsilon": EPS, "training": True, "momentum": 0.9})),
          torch=th, x=tensor(shape, -3, 3), gamma=tensor([c], 0.5, 2), beta=tensor([c], -1, 1))


@autotest(n=N)
def test_normalization_inference(check):
    """training=False with given moving statistics: OneFlow's inference grad wiring (scalar_add,
    rsqrt, normalization_grad for gamma/beta, reshape + broadcast_mul for x)."""
    shape, axis, view, axes = _bn_case(check)
    c = shape[axis]

    def gf(flow, x, gamma, beta, mm, mv):
        return build(flow, "normalization", {"x": x, "moving_mean": mm, "moving_variance": mv, "gamma": gamma,
                                             "beta": beta}, ["y"], {"axis": axis, "epsilon": EPS})[0]

    def th(torch, x, gamma, beta, mm, mv):
        return (x - mm.reshape(view)) / torch.sqrt(mv.reshape(view) + EPS) * gamma.reshape(view) + beta.reshape(view)
    check(graphfront=gf, torch=th, x=tensor(shape, -3, 3), gamma=tensor([c], 0.5, 2), beta=tensor([c], -1, 1),
          mm=tensor([c], -1, 1, requires_grad=False), mv=tensor([c], 0.5, 2, requires_grad=False))


@autotest(n=N)
def test_normalization_add_relu(check):
    """relu(training batch norm + addend) with or without the addend, OneFlow's fused op: y * c
    and the gradients to x, gamma, beta and the addend (normalization_add_relu_grad). (Its
    update of the moving statistics, in place, is compared with the unfused ops' in
    tests/test_norm_add_relu.py.)"""
    shape, axis, view, axes = _bn_case(check)
    c = shape[axis]
    with_addend = check.draw == 0 or bool(check.rng.random() < 0.7)

    def gf(flow, x, gamma, beta, k, mm, mv, addend=None):
        ins = {"x": x, "moving_mean": mm, "moving_variance": mv, "gamma": gamma, "beta": beta}
        if addend is not None:
            ins["addend"] = addend
        y, reserve, _mean, _inv = build(flow, "normalization_add_relu", ins, ["y", "reserve_space", "mean", "inv_variance"],
                                        {"axis": axis, "epsilon": EPS, "training": True, "momentum": 0.9})
        return flow.math.multiply(y, k)

    def th(torch, x, gamma, beta, k, mm, mv, addend=None):
        var, mean = torch.var_mean(x, dim=axes, unbiased=False, keepdim=True)
        y = (x - mean) / torch.sqrt(var + EPS) * gamma.reshape(view) + beta.reshape(view)
        return torch.relu(y if addend is None else y + addend) * k
    check(graphfront=gf, torch=th, x=tensor(shape, -3, 3), gamma=tensor([c], 0.5, 2), beta=tensor([c], -1, 1),
          k=tensor(shape, requires_grad=False), mm=tensor([c], -1, 1, requires_grad=False),
          mv=tensor([c], 0.5, 2, requires_grad=False), addend=tensor(shape) if with_addend else nothing())


@autotest(n=N)
def test_layer_norm(check):
    shape = dims(check, int(check.rng.integers(2, 5)), 2, 5)
    ndim = len(shape)
    bna = int(check.rng.integers(1, ndim))
    bpa = int(check.rng.integers(bna, ndim))
    pshape = shape[bpa:]
    gamma = tensor(pshape, 0.5, 2) if check.rng.random() < 0.7 or check.draw == 0 else nothing()
    beta = tensor(pshape, -1, 1) if check.rng.random() < 0.7 or check.draw == 0 else nothing()
    neg = bool(check.rng.random() < 0.3)

    def gf(flow, x, k, g=None, b=None):
        y = flow.nn.layer_norm(x, g, b, begin_norm_axis=bna - ndim if neg else bna,
                               begin_params_axis=bpa - ndim if neg else bpa, epsilon=EPS)
        return flow.math.multiply(y, k)

    def th(torch, x, k, g=None, b=None):
        axes = tuple(range(bna, ndim))
        var, mean = torch.var_mean(x, dim=axes, unbiased=False, keepdim=True)
        y = (x - mean) / torch.sqrt(var + EPS)
        y = y * g if g is not None else y
        y = y + b if b is not None else y
        return y * k
    check(graphfront=gf, torch=th, x=tensor(shape, -3, 3), k=tensor(shape, requires_grad=False), g=gamma, b=beta)


@autotest(n=N, auto_backward=False)
def test_layer_norm_statistics_outputs(check):
    shape = dims(check, int(check.rng.integers(2, 5)), 2, 5)
    bna = int(check.rng.integers(1, len(shape)))

    def th(torch, x, g):
        axes = tuple(range(bna, len(shape)))
        var, mean = torch.var_mean(x, dim=axes, unbiased=False)
        inv = torch.rsqrt(var + EPS)
        normalized = (x - mean.reshape(mean.shape + (1,) * len(axes))) * inv.reshape(inv.shape + (1,) * len(axes))
        return [normalized * g, mean, inv, normalized]
    check(graphfront=lambda flow, x, g: list(build(
              flow, "layer_norm", {"x": x, "gamma": g}, ["y", "mean", "inv_variance", "normalized"],
              {"scale": True, "begin_norm_axis": bna, "begin_params_axis": bna, "epsilon": EPS})),
          torch=th, x=tensor(shape, -3, 3), g=tensor(shape[bna:], 0.5, 2))


# ================================================================== pooling and upsampling

def _window(check, n, spatial, with_dilation):
    k = [int(check.rng.integers(1, min(4, s) + 1)) for s in spatial]
    s = [int(check.rng.integers(1, 3)) for _ in range(n)]
    p = [int(check.rng.integers(0, kk // 2 + 1)) for kk in k]
    d = [int(check.rng.integers(1, 3)) if with_dilation and spatial[i] >= (k[i] - 1) * 2 + 1 else 1
         for i in range(n)]
    return k, s, p, d


def _layout(check, n, shape):
    last = bool(check.rng.random() < 0.3)
    perm = [0] + list(range(2, n + 2)) + [1]
    inv = [0, n + 1] + list(range(1, n + 1))
    feed_shape = [shape[i] for i in perm] if last else shape
    return last, perm, inv, feed_shape


@autotest(n=N)
def test_maxpool(check):
    for n in spatial_ranks(check):
        _maxpool(check, n)


def _maxpool(check, n):
    shape = dims(check, 2, 1, 3) + dims(check, n, 3, 8)
    k, s, p, d = _window(check, n, shape[2:], True)
    ceil = bool(check.rng.random() < 0.4)
    last, perm, inv, feed_shape = _layout(check, n, shape)
    attrs = {"kernel_size": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": ceil,
             "data_format": "channels_last" if last else "channels_first"}
    pool = f"max_pool{n}d"

    def gf(flow, x):
        return list(build(flow, f"maxpool_{n}d", {"x": x}, ["y", "indice"], attrs))

    def th(torch, x):
        t = x.permute(*inv) if last else x
        y, idx = getattr(torch.nn.functional, pool)(t, k, s, p, d, ceil_mode=ceil, return_indices=True)
        return [y.permute(*perm), idx.permute(*perm)] if last else [y, idx]
    check(graphfront=gf, torch=th, x=tensor(feed_shape))


@autotest(n=N)
def test_avgpool(check):
    for n in spatial_ranks(check):
        _avgpool(check, n)


def _avgpool(check, n):
    shape = dims(check, 2, 1, 3) + dims(check, n, 3, 8)
    k, s, p, _ = _window(check, n, shape[2:], False)
    ceil, cip = bool(check.rng.random() < 0.4), bool(check.rng.random() < 0.5)
    div = int(check.rng.integers(1, 6)) if check.rng.random() < 0.3 else 0
    last, perm, inv, feed_shape = _layout(check, n, shape)
    attrs = {"kernel_size": k, "stride": s, "padding": p, "ceil_mode": ceil, "count_include_pad": cip,
             "divisor_override": div, "data_format": "channels_last" if last else "channels_first"}

    def th(torch, x):
        F = torch.nn.functional
        t = x.permute(*inv) if last else x
        extra = {"divisor_override": div} if div else {}
        if n == 1:   # torch's avg_pool1d has no divisor_override: pool the (N, C, L, 1) view
            y = F.avg_pool2d(t.unsqueeze(-1), (k[0], 1), (s[0], 1), (p[0], 0), ceil, cip, **extra).squeeze(-1)
        else:
            y = getattr(F, f"avg_pool{n}d")(t, k, s, p, ceil, cip, **extra)
        return y.permute(*perm) if last else y
    check(graphfront=lambda flow, x: build(flow, f"avgpool_{n}d", {"x": x}, ["y"], attrs)[0], torch=th,
          x=tensor(feed_shape))


@autotest(n=N)
def test_adaptive_avg_pool(check):
    for n in spatial_ranks(check):
        _adaptive_avg_pool(check, n)


def _adaptive_avg_pool(check, n):
    shape = dims(check, 2, 1, 3) + dims(check, n, 2, 9)
    size = [int(check.rng.integers(1, d + 2)) for d in shape[2:]]
    check(graphfront=lambda flow, x: build(flow, f"adaptive_avg_pool{n}d", {"x": x}, ["y"],
                                           {"output_size": size})[0],
          torch=lambda torch, x: getattr(torch.nn.functional, f"adaptive_avg_pool{n}d")(x, size),
          x=tensor(shape))


@autotest(n=N)
def test_upsample_2d(check):
    shape = dims(check, 4, 1, 5)
    size = (int(check.rng.integers(1, 4)), int(check.rng.integers(1, 4)))
    mode = str(check.rng.choice(["nearest", "bilinear"]))
    align = bool(check.rng.random() < 0.5)
    fmt = str(check.rng.choice(["NCHW", "NHWC"]))

    def th(torch, x):
        t = x if fmt == "NCHW" else x.permute(0, 3, 1, 2)
        extra = {"align_corners": align} if mode == "bilinear" else {}
        y = torch.nn.functional.interpolate(t, scale_factor=size, mode=mode, **extra)
        return y if fmt == "NCHW" else y.permute(0, 2, 3, 1)
    check(graphfront=lambda flow, x: flow.layers.upsample_2d(x, size, align, fmt, mode),
          torch=th, x=tensor(shape))


# ================================================================== transposed convolution

@pytest.mark.slow
@autotest(n=N)
def test_deconv(check):
    """deconv1d/2d/3d through flow.user_op_builder: groups, dilation, output_padding, both layouts."""
    for n in spatial_ranks(check):
        _deconv(check, n)


def _deconv(check, n):
    groups = int(check.rng.choice([1, 2]))
    last = bool(groups == 1 and check.rng.random() < 0.3)
    cin, cout = groups * int(check.rng.integers(1, 3)), groups * int(check.rng.integers(1, 3))
    spatial = dims(check, n, 2, 5)
    k = dims(check, n, 1, 4)
    s = dims(check, n, 1, 3)
    d = dims(check, n, 1, 3)
    p = [int(check.rng.integers(0, (kk - 1) * dd // 2 + 1)) for kk, dd in zip(k, d)]
    op_ = [int(check.rng.integers(0, ss)) for ss in s]
    shape = [2, cin] + spatial
    wshape = [cin, cout // groups] + k
    perm = [0] + list(range(2, n + 2)) + [1]
    inv = [0, n + 1] + list(range(1, n + 1))
    attrs = {"filters": cout, "padding_before": p, "kernel_size": k, "strides": s, "dilation_rate": d,
             "output_padding": op_, "groups": groups, "data_format": "channels_last" if last else "channels_first"}

    def th(torch, x, w):
        if last:  # contiguous: torch 2.13's CPU channels_last conv paths are broken (see test_conv_float64.py)
            x, w = x.permute(*inv).contiguous(), w.permute(*inv).contiguous()
        y = getattr(torch.nn.functional, f"conv_transpose{n}d")(x, w, None, s, p, op_, groups, d)
        return y.permute(*perm) if last else y
    check(graphfront=lambda flow, x, w: build(flow, f"deconv{n}d", {"in": x, "weight": w}, ["out"], attrs)[0],
          torch=th, x=tensor([shape[i] for i in perm] if last else shape),
          w=tensor([wshape[i] for i in perm] if last else wshape))
