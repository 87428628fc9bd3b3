"""Numeric and build-time tests of the nn op families (activation_ops, loss_ops, norm_ops,
pool_ops) and their wrappers in flow.nn / flow.layers / flow.losses, against PyTorch
eager autograd (float64 references)."""
import inspect
import typing

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import graphfront as flow
from graphfront import losses
from graphfront import typing as tp
from graphfront.framework.errors import JobBuildError
from graphfront.ops import registry

RTOL, ATOL = 1e-4, 1e-5
_rng = np.random.RandomState(1)


def rand(*shape, low=-2.0, high=2.0):
    return _rng.uniform(low, high, size=shape).astype(np.float32)


def _flow_dtype(a):
    return {np.dtype(np.float32): flow.float32, np.dtype(np.int32): flow.int32,
            np.dtype(np.int64): flow.int64}[a.dtype]


def _saver(store, key):
    def handler(d: tp.Numpy):
        store[key] = d
    return handler


def user_op(op_type, inputs, outputs, attrs=None):
    """Build one user op with flow.user_op_builder (for ops without a single-client wrapper)."""
    b = flow.user_op_builder(flow.util.unique_str(op_type + "_")).Op(op_type)
    for k, v in inputs.items():
        if v is not None:
            b.Input(k, [v])
    for o in outputs:
        b.Output(o)
    for k, v in (attrs or {}).items():
        b.Attr(k, v)
    blobs = b.Build().InferAndTryRun().RemoteBlobList()
    return blobs[0] if len(blobs) == 1 else blobs


def run(build, variables=(), feeds=(), train=True, name="job"):
    """Run ``build(*var_blobs, *feed_blobs)`` once. Float ``variables`` become trainable
    variables; ``feeds`` placeholders. In a train job the loss is the sum of every float output,
    so the returned grads are d sum(outputs) / d variable. Runs in a fresh default session.
    Returns (outputs list, grads list, f)."""
    flow.clear_default_session()
    grads, names = {}, [f"v{i}" for i in range(len(variables))]
    n_out = []

    def job(*blobs):
        with flow.scope.placement("cpu", "0:0"):
            vs = []
            for n, a in zip(names, variables):
                v = flow.get_variable(n, a.shape, dtype=_flow_dtype(a), initializer=flow.zeros_initializer())
                if train:
                    flow.watch_diff(v, _saver(grads, n))
                vs.append(v)
            outs = build(*vs, *blobs)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            n_out.append(len(outs))
            if train:
                total = flow.math.add_n([flow.math.reduce_sum(o) for o in outs if o.dtype.is_floating_point])
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(total)
            return tuple(outs)

    params = [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=tp.Numpy.Placeholder(a.shape, dtype=_flow_dtype(a)))
              for i, a in enumerate(feeds)]
    job.__signature__ = inspect.Signature(params, return_annotation=tp.Bundle[tp.Numpy])
    job.__name__ = name
    f = flow.global_function(type="train" if train else "predict")(job)
    if variables:
        flow.load_variables(dict(zip(names, variables)))
    outs = f(*feeds)
    return list(outs), [grads.get(n) for n in names], f


def torch_run(fn, variables=(), feeds=()):
    vs = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in variables]
    fs = [torch.tensor(a.astype(np.float64) if a.dtype == np.float32 else a) for a in feeds]
    outs = fn(*vs, *fs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    total = sum(o.sum() for o in outs if o.is_floating_point())
    grads = torch.autograd.grad(total, vs, allow_unused=True) if vs else []
    return [o.detach().numpy() for o in outs], [None if g is None else g.numpy() for g in grads]


def close(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol, atol=atol)


def check(build, ref, variables=(), feeds=(), rtol=RTOL, atol=ATOL):
    outs, grads, f = run(build, variables, feeds)
    r_outs, r_grads = torch_run(ref, variables, feeds)
    assert len(outs) == len(r_outs)
    for o, r in zip(outs, r_outs):
        close(o, r, rtol, atol)
    for g, r in zip(grads, r_grads):
        assert g is not None and r is not None
        close(g, r, rtol, atol)
    return f


def op_types(f):
    return [op.user_conf.op_type_name for op in f.compiled_job.job.net.op if op.WhichOneof("op_type") == "user_conf"]


# ================================================================== activations

ACTIVATIONS = {
    "leaky_relu": (lambda x: flow.nn.leaky_relu(x, 0.15), lambda x: F.leaky_relu(x, 0.15), "leaky_relu_grad"),
    "elu": (lambda x: flow.nn.elu(x, 0.7), lambda x: F.elu(x, 0.7), "elu_grad"),
    "celu": (lambda x: flow.nn.celu(x, 1.3), lambda x: F.celu(x, 1.3), "celu_grad"),
    "selu": (flow.nn.selu, F.selu, "selu_grad"),
    "silu": (flow.nn.silu, F.silu, "silu_grad"),
    "softsign": (flow.nn.softsign, F.softsign, "softsign_grad"),
    "mish": (flow.nn.mish, F.mish, "mish_grad"),
    "hardsigmoid": (flow.nn.hardsigmoid, F.hardsigmoid, "hardsigmoid_grad"),
    "hardswish": (flow.nn.hardswish, F.hardswish, "hardswish_grad"),
    "hardtanh": (lambda x: flow.nn.hardtanh(x, -0.5, 1.2), lambda x: F.hardtanh(x, -0.5, 1.2), "hardtanh_grad"),
    "relu6": (flow.nn.relu6, F.relu6, "hardtanh_grad"),
    "swish": (lambda x: flow.nn.swish(x, 0.8), lambda x: x * torch.sigmoid(0.8 * x), "sigmoid_grad"),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_forward_backward(name):
    fn, ref, grad_op = ACTIVATIONS[name]
    x = rand(3, 4, 5, low=-5 if name in ("hardswish", "hardsigmoid", "relu6") else -2,
             high=8 if name == "relu6" else 2)
    f = check(fn, ref, [x])
    assert grad_op in op_types(f)


def test_activation_op_signatures():
    d = registry.lookup("leaky_relu")
    assert [a.name for a in d.inputs] == ["x"] and d.attrs["alpha"].type == "float"
    for t in ("elu", "celu"):
        assert registry.lookup(t).attrs["alpha"].type == "double"
        assert [a.name for a in registry.lookup(t).inputs] == ["in"]
    h = registry.lookup("hardtanh")
    assert (h.attrs["min_val"].type, h.attrs["max_val"].type) == ("double", "double")
    assert [a.name for a in registry.lookup("hardtanh_grad").inputs] == ["y", "dy"]
    for t in ("elu", "celu", "hardsigmoid", "hardswish", "mish", "selu", "silu", "softsign"):
        assert [a.name for a in registry.lookup(t + "_grad").inputs] == ["x", "dy"]


def test_relu6_emits_hardtanh_0_6():
    outs, _, f = run(flow.nn.relu6, feeds=[np.array([-1.0, 3.0, 9.0], np.float32)], train=False)
    close(outs[0], [0.0, 3.0, 6.0])
    (op,) = [op for op in f.compiled_job.job.net.op if op.WhichOneof("op_type") == "user_conf"]
    attrs = registry.from_attr_value
    assert op.user_conf.op_type_name == "hardtanh"
    assert (attrs(op.user_conf.attr["min_val"]), attrs(op.user_conf.attr["max_val"])) == (0.0, 6.0)


def test_nn_prelu_per_channel_and_grad():
    x, alpha = rand(2, 3, 4), rand(3, low=0.05, high=0.5)
    f = check(lambda x, a: flow.nn.prelu(x, a), lambda x, a: F.prelu(x, a), [x, alpha])
    assert {"prelu_grad", "identity"} <= set(op_types(f))
    x1, a1 = rand(4, 5), rand(1, low=0.1, high=0.3)
    check(lambda x, a: flow.nn.prelu(x, a), lambda x, a: F.prelu(x, a), [x1, a1])


def test_layers_prelu_shared_axes_trains_alpha():
    x = rand(2, 3, 4, 4)
    grads = {}

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((2, 3, 4, 4))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            y = flow.layers.prelu(x, alpha_initializer=flow.constant_initializer(0.25), shared_axes=[2, 3], name="p1")
            flow.watch_diff(flow.get_variable("p1-alpha", (3, 1, 1)), _saver(grads, "alpha"))
            loss = flow.math.reduce_sum(y)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return y

    y = job(x)
    tx = torch.tensor(x.astype(np.float64))
    ta = torch.full((3, 1, 1), 0.25, dtype=torch.float64, requires_grad=True)
    ty = torch.where(tx > 0, tx, ta * tx)
    close(y, ty.detach().numpy())
    close(grads["alpha"], torch.autograd.grad(ty.sum(), ta)[0].numpy())
    assert "tf_prelu_grad" in op_types(job)
    assert flow.get_all_variables()["p1-alpha"].numpy().shape == (3, 1, 1)


def test_activation_errors():
    with pytest.raises(ValueError, match=r"hardtanh: min_val \(2.0\) must be <= max_val \(1.0\)"):
        run(lambda x: flow.nn.hardtanh(x, 2.0, 1.0), feeds=[rand(2)], train=False)
    with pytest.raises(JobBuildError, match=r"input 'alpha' expected shape \(1,\) or \(3,\).*received \(4,\)"):
        run(lambda x: flow.nn.prelu(x, flow.constant(0.1, flow.float32, [4])), feeds=[rand(2, 3)], train=False)
    with pytest.raises(JobBuildError, match=r"input 'in' expected a floating dtype, received int32"):
        run(lambda x: flow.nn.elu(x), feeds=[np.ones((2,), np.int32)], train=False)
    with pytest.raises(TypeError, match=r"leaky_relu: argument 'alpha' expects a number"):
        run(lambda x: flow.nn.leaky_relu(x, "0.2"), feeds=[rand(2)], train=False)
    with pytest.raises(JobBuildError, match=r"attr 'alpha': must be non-zero"):
        run(lambda x: user_op("celu", {"in": x}, ["out"], {"alpha": 0.0}), feeds=[rand(2)], train=False)


# ================================================================== softmax family and losses

def test_logsoftmax_last_and_inner_axis():
    x = rand(3, 4, 5)
    f = check(lambda x: flow.nn.logsoftmax(x), lambda x: torch.log_softmax(x, -1), [x])
    assert "log_softmax_grad" in op_types(f)
    check(lambda x: flow.nn.logsoftmax(x, axis=1), lambda x: torch.log_softmax(x, 1), [x])


def test_softmax_cross_entropy_with_logits_dense_labels():
    logits = rand(4, 6)
    labels = torch.softmax(torch.tensor(rand(4, 6)), -1).numpy()
    f = check(lambda x, t: flow.nn.softmax_cross_entropy_with_logits(t, x),
              lambda x, t: -(t * torch.log_softmax(x, -1)).sum(-1), [logits], [labels])
    assert "softmax_cross_entropy_grad" in op_types(f)


def test_softmax_cross_entropy_with_distribution_labels():
    # OneFlow's gradient is dy * (prob - label): exact for label rows that sum to 1
    logits, labels = rand(2, 3, 5), rand(2, 3, 5, low=0.1, high=1)
    labels = labels / labels.sum(-1, keepdims=True)
    check(lambda x, t: user_op("softmax_cross_entropy", {"prediction": x, "label": t}, ["prob", "out"]),
          lambda x, t: (torch.softmax(x, -1), -(t * torch.log_softmax(x, -1)).sum(-1)), [logits], [labels])


def test_sigmoid_cross_entropy_with_logits():
    logits, labels = rand(3, 5, low=-4, high=4), rand(3, 5, low=0, high=1)
    f = check(lambda x, t: flow.nn.sigmoid_cross_entropy_with_logits(t, x),
              lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none"), [logits], [labels])
    assert "sigmoid_cross_entropy_grad" in op_types(f)


@pytest.mark.parametrize("op_type", ["sparse_cross_entropy", "sparse_cross_entropy_ms"])
def test_sparse_cross_entropy_on_probabilities(op_type):
    prob = torch.softmax(torch.tensor(rand(5, 4)), -1).numpy()
    label = _rng.randint(0, 4, size=(5, 1)).astype(np.int32)
    ref = lambda p, t: -torch.log(p.gather(1, t.long()).squeeze(1))  # noqa: E731
    if op_type == "sparse_cross_entropy":
        build = lambda p, t: flow.nn.sparse_cross_entropy(t, p)  # noqa: E731
    else:
        build = lambda p, t: user_op(op_type, {"prediction": p, "label": flow.reshape(t, (5,))}, ["out"],  # noqa
                                     {"depth": 4})
    f = check(build, ref, [prob], [label])
    assert f"{op_type}_grad" in op_types(f)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_bce_loss(reduction):
    x, t, w = rand(3, 4, low=0.05, high=0.95), rand(3, 4, low=0, high=1), rand(3, 4, low=0.5, high=2)
    f = check(lambda x, t, w: flow.nn.BCELoss(x, t, w, reduction=reduction),
              lambda x, t, w: F.binary_cross_entropy(x, t, w, reduction=reduction), [x], [t, w])
    assert "binary_cross_entropy_grad" in op_types(f)
    wb = rand(4, low=0.5, high=2)   # broadcast weight: multiplies the unweighted op output
    check(lambda x, t, w: flow.nn.BCELoss(x, t, w, reduction=reduction),
          lambda x, t, w: F.binary_cross_entropy(x, t, w.expand(3, 4), reduction=reduction), [x], [t, wb])


def test_bce_loss_is_finite_at_0_and_1():
    x = np.array([0.0, 1.0, 0.5], np.float32)
    t = np.array([1.0, 0.0, 1.0], np.float32)
    outs, _, _ = run(lambda x, t: flow.nn.BCELoss(x, t, reduction="none"), feeds=[x, t], train=False)
    close(outs[0], F.binary_cross_entropy(torch.tensor(x), torch.tensor(t), reduction="none").numpy())
    assert np.isfinite(outs[0]).all()


def test_bce_loss_of_an_input_outside_0_1_is_nan_as_in_oneflow():
    # torch's kernel refused it (a RuntimeError on the CPU, a device-side assert on a GPU that leaves
    # the process unusable); OneFlow's formula gives NaN where a log's argument is negative
    x = np.array([-0.5, 1.5, np.nan, 0.25], np.float32)
    t = np.array([1.0, 0.0, 1.0, 1.0], np.float32)
    outs, _, _ = run(lambda x, t: flow.nn.BCELoss(x, t, reduction="none"), feeds=[x, t], train=False)
    with np.errstate(invalid="ignore"):
        want = -(t * np.maximum(np.log(x.astype(np.float64)), -100)
                 + (1 - t) * np.maximum(np.log(1 - x.astype(np.float64)), -100))
    np.testing.assert_array_equal(np.isnan(outs[0]), [True, True, True, False])
    close(outs[0][3:], want[3:])


def test_bernoulli_of_a_probability_outside_0_1_is_0_or_1_as_in_oneflow():
    # OneFlow's kernel draws u < p; torch.bernoulli asserted 0 <= p <= 1 (on a GPU a device-side assert)
    p = np.array([-1.0, 0.0, 1.0, 2.0, np.nan], np.float32)
    outs, _, _ = run(lambda p: flow.random.bernoulli(p, seed=3), feeds=[p], train=False)
    np.testing.assert_array_equal(outs[0], [0, 0, 1, 1, 0])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_bce_with_logits_loss(reduction):
    x, t = rand(3, 4, low=-4, high=4), rand(3, 4, low=0, high=1)
    w, pw = rand(3, 4, low=0.5, high=2), rand(4, low=0.5, high=3)
    f = check(lambda x, t, w, pw: flow.nn.BCEWithLogitsLoss(x, t, w, pw, reduction=reduction),
              lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, w, reduction=reduction, pos_weight=pw),
              [x], [t, w, pw])
    assert "binary_cross_entropy_with_logits_grad" in op_types(f)
    check(lambda x, t: flow.nn.BCEWithLogitsLoss(x, t, reduction=reduction),
          lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction), [x], [t])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_mse_l1_margin_losses(reduction):
    x, t = rand(3, 4), rand(3, 4)
    check(lambda x, t: flow.nn.MSELoss(x, t, reduction), lambda x, t: F.mse_loss(x, t, reduction=reduction), [x, t])
    check(lambda x, t: flow.nn.L1Loss(x, t, reduction), lambda x, t: F.l1_loss(x, t, reduction=reduction), [x, t])
    sign = np.sign(rand(3, 4)).astype(np.float32)
    check(lambda a, b, s: flow.nn.MarginRankingLoss(a, b, s, margin=0.3, reduction=reduction),
          lambda a, b, s: F.margin_ranking_loss(a, b, s, margin=0.3, reduction=reduction), [x, t], [sign])


@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_kl_div_loss(log_target, reduction):
    x = torch.log_softmax(torch.tensor(rand(3, 5)), -1).numpy()
    t = torch.softmax(torch.tensor(rand(3, 5)), -1).numpy()
    if log_target:
        t = np.log(t)
    else:
        t[0, 0] = 0.0      # a zero target contributes 0, not nan
    f = check(lambda x, t: flow.nn.KLDivLoss(x, t, log_target=log_target, reduction=reduction),
              lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=log_target), [x], [t])
    assert "kl_div_loss_grad" in op_types(f)


@pytest.mark.parametrize("beta", [0.5, 1.0, 0.0])
def test_smooth_l1_loss(beta):
    x, t = rand(4, 5), rand(4, 5)
    f = check(lambda x, t: flow.nn.smooth_l1_loss(x, t, beta=beta),
              lambda x, t: F.smooth_l1_loss(x, t, reduction="none", beta=beta), [x], [t])
    assert "smooth_l1_loss_grad" in op_types(f)


@pytest.mark.parametrize("with_weight", [False, True])
def test_nll_op_with_ignore_index(with_weight):
    x = torch.log_softmax(torch.tensor(rand(6, 4)), -1).numpy()
    t = np.array([0, 3, 2, 1, 3, 2], np.int64)
    w = rand(4, low=0.5, high=2)

    def build(x, t, w):
        out, total = user_op("nll", {"input": x, "target": t, "weight": w if with_weight else None},
                             ["out", "total_weight"], {"ignore_index": 3})
        return out, total

    def ref(x, t, w):
        out = F.nll_loss(x, t, w if with_weight else None, ignore_index=3, reduction="none")
        per = (w[t] if with_weight else torch.ones(6, dtype=torch.float64)) * (t != 3)
        return out, per.sum().reshape(1)

    f = check(build, ref, [x], [t, w])
    assert "nll_grad" in op_types(f)


def test_loss_op_signatures():
    assert registry.lookup("smooth_l1_loss").attrs["beta"].type == "float"
    assert registry.lookup("nll").attrs["ignore_index"].type == "int64"
    assert registry.lookup("sparse_cross_entropy").attrs["depth"].type == "int64"
    assert [a.name for a in registry.lookup("binary_cross_entropy_with_logits_grad").inputs] == \
        ["input", "target", "weight", "pos_weight", "dy"]
    assert [a.name for a in registry.lookup("nll_grad").inputs] == \
        ["input", "target", "total_weight", "weight", "dy"]
    assert [a.name for a in registry.lookup("log_softmax").outputs] == ["prob"]


def test_loss_errors():
    cases = [
        (lambda x, t: flow.nn.BCELoss(x, t, reduction="avg"), ValueError,
         r"BCELoss: reduction must be one of \('none', 'mean', 'sum'\), received 'avg'", [rand(2, 3), rand(2, 3)]),
        (lambda x, t: flow.nn.MSELoss(x, t), ValueError,
         r"MSELoss: 'target' must have the shape of 'input' \(2, 3\), received \(3, 2\)", [rand(2, 3), rand(3, 2)]),
        (lambda p, t: flow.nn.sparse_cross_entropy(t, p), JobBuildError,
         r"input 'label' expected an integer dtype, received float32", [rand(2, 3), rand(2)]),
        (lambda x, t: flow.nn.BCEWithLogitsLoss(x, t, pos_weight=flow.constant(1.0, flow.float32, [2])), ValueError,
         r"pos_weight must have shape \(3,\) \(the last dim of input\), received \(2,\)", [rand(2, 3), rand(2, 3)]),
        (lambda x, t: flow.nn.smooth_l1_loss(x, t, beta=-1.0), ValueError, r"beta must be >= 0, received -1.0",
         [rand(2), rand(2)]),
        (lambda x, t: user_op("nll", {"input": x, "target": t}, ["out", "total_weight"]), JobBuildError,
         r"op 'nll_\d+' \(nll\): input 'target' expected shape \(2,\), received \(3,\)",
         [rand(2, 4), np.zeros(3, np.int64)]),
        (lambda x, t: user_op("binary_cross_entropy_with_logits", {"input": x, "target": t}, ["out"],
                              {"has_pos_weight": True}), JobBuildError,
         r"attr 'has_pos_weight' is True but input 'pos_weight' is absent", [rand(2), rand(2)]),
    ]
    for build, exc, msg, feeds in cases:
        with pytest.raises(exc, match=msg):
            run(build, feeds=feeds, train=False)


# ================================================================== batch normalization

def test_batch_norm_train_steps_match_torch_and_predict_uses_moving_stats():
    steps = [rand(4, 3, 5, 5) * (i + 1) + i for i in range(4)]
    target = rand(4, 3, 5, 5)
    keep, eps, lr = 0.9, 1e-3, 0.1

    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((4, 3, 5, 5)), t: tp.Numpy.Placeholder((4, 3, 5, 5))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            y = flow.layers.batch_normalization(x, axis=1, momentum=keep, epsilon=eps, name="bn")
            loss = flow.nn.MSELoss(y, t)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0).minimize(loss)
        return y

    @flow.global_function(type="predict")
    def eval_job(x: tp.Numpy.Placeholder((4, 3, 5, 5))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.layers.batch_normalization(x, axis=1, momentum=keep, epsilon=eps, name="bn")

    bn = torch.nn.BatchNorm2d(3, eps=eps, momentum=1 - keep).double()
    opt = torch.optim.SGD(bn.parameters(), lr=lr)
    tt = torch.tensor(target.astype(np.float64))
    for x in steps:
        y = train_job(x, target)
        opt.zero_grad()
        ty = bn(torch.tensor(x.astype(np.float64)))
        F.mse_loss(ty, tt).backward()
        opt.step()
        close(y, ty.detach().numpy())
    v = {k: b.numpy() for k, b in flow.get_all_variables().items()}
    close(v["bn-moving_mean"], bn.running_mean.numpy())
    close(v["bn-moving_variance"], bn.running_var.numpy())   # unbiased batch variance, as torch
    close(v["bn-gamma"], bn.weight.detach().numpy())
    close(v["bn-beta"], bn.bias.detach().numpy())
    assert not np.allclose(v["bn-gamma"], 1.0)

    bn.eval()
    x = rand(4, 3, 5, 5)
    close(eval_job(x), bn(torch.tensor(x.astype(np.float64))).detach().numpy())
    # predict does not touch the moving statistics
    close(flow.get_all_variables()["bn-moving_mean"].numpy(), bn.running_mean.numpy())

    train_ops = {op.name: op for op in train_job.compiled_job.job.net.op}
    bn_op = train_ops["bn"].user_conf
    assert bn_op.op_type_name == "normalization"
    assert list(bn_op.input_order) == ["x", "moving_mean", "moving_variance", "gamma", "beta"]
    assert list(bn_op.output_order) == ["y", "mean", "inv_variance"]
    assert registry.from_attr_value(bn_op.attr["training"]) is True
    assert train_ops["bn_grad"].user_conf.op_type_name == "normalization_grad"
    eval_op = {op.name: op for op in eval_job.compiled_job.job.net.op}["bn"].user_conf
    assert registry.from_attr_value(eval_op.attr["training"]) is False
    assert list(eval_op.output_order) == ["y"]


@pytest.mark.parametrize("reserve_bytes", [0, 16])
def test_batch_norm_cudnn_reserve_space_reaches_its_backward_through_the_plan(monkeypatch, reserve_bytes):
    """Where cuDNN takes a batch norm (on a GPU), its training kernel's reserve space goes
    from the forward to ``normalization_grad``'s ``cudnn_batch_norm_backward`` with the
    ``mean`` blob (an empty one where cuDNN needs none). Here cuDNN's two ops are stood in
    for on the CPU by PyTorch's native kernels plus a marked reserve tensor; the train steps
    must still match torch's."""
    from graphfront.ops import norm_ops
    reserves, backward_reserves = [], []

    def fake_forward(x, gamma, beta, rm, rv, training, factor, eps):
        y, mean, inv = torch.native_batch_norm(x, gamma, beta, rm, rv, training, factor, eps)
        reserves.append(torch.full((reserve_bytes,), len(reserves), dtype=torch.uint8))
        return y, mean, inv, reserves[-1]

    def fake_backward(x, dy, gamma, rm, rv, mean, inv, eps, reserve):
        backward_reserves.append(reserve)
        return torch.ops.aten.native_batch_norm_backward(dy, x, gamma, rm, rv, mean, inv, True, eps,
                                                         [True, True, True])
    monkeypatch.setattr(norm_ops, "_cudnn_fits", lambda x, *args: x.dim() == 4)
    monkeypatch.setattr(torch._C, "_get_cudnn_batch_norm_reserve_space_size", lambda x, training: reserve_bytes)
    monkeypatch.setattr(torch.ops.aten, "cudnn_batch_norm", fake_forward)
    monkeypatch.setattr(torch.ops.aten, "cudnn_batch_norm_backward", fake_backward)
    x, c = rand(4, 3, 5, 2), rand(4, 3, 5, 2)

    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder(x.shape), c: tp.Numpy.Placeholder(c.shape)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            y = flow.layers.batch_normalization(x, axis=3, momentum=0.9, epsilon=1e-3, name="bnr")
            loss = flow.math.reduce_sum(y * c)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return y

    bn = torch.nn.BatchNorm2d(2, eps=1e-3, momentum=0.1).double()
    opt = torch.optim.SGD(bn.parameters(), lr=0.1)
    for _ in range(2):
        y = train_job(x, c)
        opt.zero_grad()
        ty = bn(torch.tensor(x.astype(np.float64)).permute(0, 3, 1, 2))
        (ty * torch.tensor(c.astype(np.float64)).permute(0, 3, 1, 2)).sum().backward()
        opt.step()
        close(y, ty.detach().permute(0, 2, 3, 1).numpy())
    close(flow.get_all_variables()["bnr-gamma"].numpy(), bn.weight.detach().numpy())
    assert len(reserves) == len(backward_reserves) == 2
    if reserve_bytes:
        assert [r is s for r, s in zip(reserves, backward_reserves)] == [True, True]
    else:
        assert [(r.dtype, r.numel()) for r in backward_reserves] == [(torch.uint8, 0)] * 2


def test_batch_norm_training_grads_channels_last():
    x = rand(3, 4, 2, 5)

    def build(x):
        return flow.layers.batch_normalization(x, axis=-1, gamma_initializer=flow.constant_initializer(1.5),
                                               beta_initializer=flow.constant_initializer(0.2), name="bnl")

    def ref(x):
        y = F.batch_norm(x.permute(0, 3, 1, 2), None, None, torch.full((5,), 1.5, dtype=torch.float64),
                         torch.full((5,), 0.2, dtype=torch.float64), training=True, eps=1e-3)
        return y.permute(0, 2, 3, 1)
    # sum(y) has zero gradient in x for batch norm; weight the output to get a non-trivial one
    c = rand(3, 4, 2, 5)
    check(lambda x, c: flow.math.multiply(build(x), c), lambda x, c: ref(x) * c, [x], [c])


def test_batch_norm_inference_grad_in_train_job():
    """training=False inside a train job: dx = dy * gamma * rsqrt(moving_var + eps), and gamma/beta
    grads from normalization_grad fed the moving statistics (OneFlow's wiring)."""
    x, c = rand(4, 3, 2), rand(4, 3, 2)
    grads = {}

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((4, 3, 2)), c: tp.Numpy.Placeholder((4, 3, 2))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (4, 3, 2), initializer=flow.zeros_initializer())
            h = x + w
            y = flow.layers.batch_normalization(h, axis=1, training=False, name="bni",
                                                moving_mean_initializer=flow.constant_initializer(0.3),
                                                moving_variance_initializer=flow.constant_initializer(2.0),
                                                gamma_initializer=flow.constant_initializer(1.7))
            flow.watch_diff(h, _saver(grads, "x"))
            flow.watch_diff(flow.get_variable("bni-gamma", (3,)), _saver(grads, "gamma"))
            flow.watch_diff(flow.get_variable("bni-beta", (3,)), _saver(grads, "beta"))
            # dy depends on y: the backward ops reading the moving statistics run after `bni`
            loss = flow.math.reduce_sum(flow.math.multiply(flow.math.square(y), c))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return y

    y = job(x, c)
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    g = torch.full((3,), 1.7, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    ty = F.batch_norm(tx, torch.full((3,), 0.3, dtype=torch.float64), torch.full((3,), 2.0, dtype=torch.float64),
                      g, b, training=False, eps=1e-3)
    gx, gg, gb = torch.autograd.grad((ty ** 2 * torch.tensor(c.astype(np.float64))).sum(), [tx, g, b])
    close(y, ty.detach().numpy())
    close(grads["x"], gx.numpy())
    close(grads["gamma"], gg.numpy())
    close(grads["beta"], gb.numpy())
    names = {op.name: op.user_conf.op_type_name for op in job.compiled_job.job.net.op
             if op.WhichOneof("op_type") == "user_conf"}
    assert names["System-AutoGrad-bni-VarianceAddEpsilon"] == "scalar_add"
    assert names["System-AutoGrad-bni-VarianceRsqrt"] == "rsqrt"
    assert names["System-AutoGrad-bni_out_grad_mul_gamma-BroadcastMul"] == "broadcast_mul"
    assert names["System-AutoGrad-bni_out_grad_mul_inv_var-Reshape"] == "reshape"
    assert names["bni_grad"] == "normalization_grad"


def test_batch_norm_center_scale_false_and_trainable_false():
    x = rand(2, 3, 4)

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((2, 3, 4))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3, 4), initializer=flow.zeros_initializer())
            y1 = flow.layers.batch_normalization(x + w, axis=1, center=False, scale=False, name="a")
            y2 = flow.layers.batch_normalization(x + w, axis=1, trainable=False, name="b")
            loss = flow.math.reduce_sum(flow.math.square(y1 + y2))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return y1

    y1 = job(x)
    close(y1, F.batch_norm(torch.tensor(x), None, None, training=True, eps=1e-3).numpy())
    v = flow.get_all_variables()
    assert "a-gamma" not in v and "a-beta" not in v
    close(v["a-moving_mean"].numpy(), 0.01 * x.mean(axis=(0, 2)), atol=1e-6)
    close(v["b-moving_mean"].numpy(), np.zeros(3))     # trainable=False: inference mode, no update
    close(v["b-gamma"].numpy(), np.ones(3))            # not trained
    ops = {op.name: op for op in job.compiled_job.job.net.op}
    assert registry.from_attr_value(ops["b"].user_conf.attr["training"]) is False
    assert ops["a-gamma"].user_conf.op_type_name == "constant"


def test_normalization_attr_types_and_errors():
    d = registry.lookup("normalization")
    assert {k: a.type for k, a in d.attrs.items()} == {"axis": "int32", "epsilon": "float", "training": "bool",
                                                       "momentum": "float"}
    assert d.mutated_args({"training": True}) == ("moving_mean", "moving_variance")
    assert d.mutated_args({"training": False}) == ()
    with pytest.raises(JobBuildError, match=r"batch_normalization 'bn': axis 3 is out of range"):
        run(lambda x: flow.layers.batch_normalization(x, axis=3, name="bn"), feeds=[rand(2, 3)], train=False)
    with pytest.raises(JobBuildError, match=r"momentum must be in \[0, 1\].*received 1.5"):
        run(lambda x: flow.layers.batch_normalization(x, momentum=1.5), feeds=[rand(2, 3)], train=False)
    with pytest.raises(JobBuildError, match=r"attr 'training' is false, so inputs 'moving_mean' and "
                                            r"'moving_variance' are required"):
        run(lambda x: user_op("normalization", {"x": x, "gamma": flow.constant(1.0, flow.float32, [3]),
                                                "beta": flow.constant(0.0, flow.float32, [3])}, ["y"], {"axis": 1}),
            feeds=[rand(2, 3)], train=False)
    with pytest.raises(JobBuildError, match=r"input 'gamma' expected shape \(3,\) \(dim 1 of input 'x' \(2, 3\)\), "
                                            r"received \(2,\)"):
        run(lambda x: user_op("normalization", {"x": x, "gamma": flow.constant(1.0, flow.float32, [2]),
                                                "beta": flow.constant(0.0, flow.float32, [3])}, ["y"],
                              {"axis": 1, "training": True}),
            feeds=[rand(2, 3)], train=False)


def test_nn_batch_normalization_and_moments():
    x = rand(4, 3, 5)

    def build(x):
        mean, var = flow.nn.moments(x, [0, 2])
        y = flow.nn.batch_normalization(x, mean, var, offset=flow.constant(0.5, flow.float32, [3]),
                                        scale=flow.constant(2.0, flow.float32, [3]), variance_epsilon=1e-3, axis=1)
        return y, mean, var

    def ref(x):
        mean, var = x.mean((0, 2)), x.var((0, 2), unbiased=False)
        y = (x - mean[None, :, None]) / torch.sqrt(var[None, :, None] + 1e-3) * 2.0 + 0.5
        return y * torch.tensor(c), mean, var
    c = rand(4, 3, 5)
    check(lambda x, c: (lambda y, m, v: (flow.math.multiply(y, c), m, v))(*build(x)), lambda x, c: ref(x), [x], [c])
    outs, _, _ = run(lambda x: flow.nn.moments(x, [1], keepdims=True), feeds=[x], train=False)
    close(outs[0], x.mean(1, keepdims=True))
    close(outs[1], x.var(1, keepdims=True))


# ================================================================== layer norm

@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False), (False, False)])
def test_layers_layer_norm(center, scale):
    x, c = rand(2, 3, 4), rand(2, 3, 4)
    grads = {}

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((2, 3, 4)), c: tp.Numpy.Placeholder((2, 3, 4))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3, 4), initializer=flow.zeros_initializer())
            h = x + w
            flow.watch_diff(h, _saver(grads, "x"))
            y = flow.layers.layer_norm(h, center=center, scale=scale, begin_norm_axis=1, begin_params_axis=1,
                                       name="ln")
            if scale:
                flow.watch_diff(flow.get_variable("ln-gamma", (3, 4)), _saver(grads, "gamma"))
            if center:
                flow.watch_diff(flow.get_variable("ln-beta", (3, 4)), _saver(grads, "beta"))
            loss = flow.math.reduce_sum(flow.math.multiply(y, c))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return y

    y = job(x, c)
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    g = torch.ones(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(3, 4, dtype=torch.float64, requires_grad=True)
    ty = F.layer_norm(tx, (3, 4), g if scale else None, b if center else None, eps=1e-5)
    gx, gg, gb = torch.autograd.grad((ty * torch.tensor(c.astype(np.float64))).sum(), [tx, g, b], allow_unused=True)
    close(y, ty.detach().numpy())
    close(grads["x"], gx.numpy())
    if scale:
        close(grads["gamma"], gg.numpy())
    if center:
        close(grads["beta"], gb.numpy())
    types = op_types(job)
    if scale:   # (dy * gamma feeds layer_norm_grad: the two are fused into one backward)
        assert "fused_layer_norm_grad" in types and not {"layer_norm_grad", "layer_norm_param_grad"} & set(types)
    else:
        assert "layer_norm_grad" in types and ("layer_norm_param_grad" in types) == center


def test_nn_layer_norm_params_axis_and_attr_types():
    x, g, b, c = rand(2, 3, 4), rand(4), rand(4), rand(2, 3, 4)
    check(lambda x, g, b, c: flow.math.multiply(flow.nn.layer_norm(x, g, b, begin_norm_axis=2), c),
          lambda x, g, b, c: F.layer_norm(x, (4,), g, b, eps=1e-5) * c, [x, g, b], [c])
    d = registry.lookup("layer_norm")
    assert {k: a.type for k, a in d.attrs.items()} == {"center": "bool", "scale": "bool", "begin_norm_axis": "int64",
                                                       "begin_params_axis": "int64", "epsilon": "double"}
    with pytest.raises(JobBuildError, match=r"input 'gamma' expected shape \(3, 4\).*received \(4,\)"):
        run(lambda x: flow.nn.layer_norm(x, gamma=flow.constant(1.0, flow.float32, [4]), begin_params_axis=1),
            feeds=[x], train=False)


# ================================================================== pooling and upsampling

def _pool_case(n, kind, channels_last=False, **kw):
    shape = (2, 3) + (7, 6, 5)[:n]
    x = rand(*shape)
    attrs = {"kernel_size": kw.get("k", [3] * n), "stride": kw.get("s", [2] * n), "padding": kw.get("p", [1] * n),
             "ceil_mode": kw.get("ceil", False), "data_format": "channels_last" if channels_last else "channels_first"}
    if kind == "max":
        attrs["dilation"] = kw.get("d", [1] * n)
        tfn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
        ref_args = dict(kernel_size=attrs["kernel_size"], stride=attrs["stride"], padding=attrs["padding"],
                        dilation=attrs["dilation"], ceil_mode=attrs["ceil_mode"])
    else:
        attrs["count_include_pad"] = kw.get("cip", False)
        attrs["divisor_override"] = kw.get("div", 0)
        tfn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
        ref_args = dict(kernel_size=attrs["kernel_size"], stride=attrs["stride"], padding=attrs["padding"],
                        ceil_mode=attrs["ceil_mode"], count_include_pad=attrs["count_include_pad"])
        if attrs["divisor_override"]:
            ref_args["divisor_override"] = attrs["divisor_override"]
            if n == 1:
                def tfn(t, kernel_size, stride, padding, **rest):
                    return F.avg_pool2d(t.unsqueeze(-1), (kernel_size[0], 1), (stride[0], 1), (padding[0], 0),
                                        **rest).squeeze(-1)
    op_type = f"{kind}pool_{n}d"
    outputs = ["y", "indice"] if kind == "max" else ["y"]
    perm = (0,) + tuple(range(2, n + 2)) + (1,)
    inv = (0, n + 1) + tuple(range(1, n + 1))
    feed = np.ascontiguousarray(x.transpose(perm)) if channels_last else x

    def build(v, c):
        outs = user_op(op_type, {"x": v}, outputs, attrs)
        y = outs[0] if kind == "max" else outs
        return (flow.math.multiply(y, c),) + ((outs[1],) if kind == "max" else ())

    def ref(v, c):
        t = v.permute(*inv) if channels_last else v
        y = tfn(t, **ref_args)
        y = y.permute(*perm) if channels_last else y
        return y * c
    y_shape = tfn(torch.tensor(x), **ref_args).shape
    c = rand(*(tuple(y_shape[i] for i in perm) if channels_last else tuple(y_shape)))
    return build, ref, feed, c, op_type


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pytorch_style_pooling(n, kind):
    build, ref, x, c, op_type = _pool_case(n, kind)
    outs, grads, f = run(build, [x], [c])
    r_outs, r_grads = torch_run(ref, [x], [c])
    close(outs[0], r_outs[0])
    close(grads[0], r_grads[0])
    assert f"{op_type}_grad" in op_types(f)
    if kind == "max":
        tfn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
        _, idx = tfn(torch.tensor(x), 3, 2, 1, return_indices=True)
        np.testing.assert_array_equal(outs[1], idx.numpy())
        assert outs[1].dtype == np.int64


@pytest.mark.parametrize("kw", [dict(ceil=True), dict(d=[2, 1], p=[1, 0]), dict(k=[2, 3], s=[1, 2], p=[0, 1])])
def test_maxpool_2d_options_and_channels_last(kw):
    for last in (False, True):
        flow.clear_default_session()
        build, ref, x, c, _ = _pool_case(2, "max", channels_last=last, **kw)
        outs, grads, _ = run(lambda v, c: build(v, c)[0], [x], [c])
        r_outs, r_grads = torch_run(ref, [x], [c])
        close(outs[0], r_outs[0])
        close(grads[0], r_grads[0])


@pytest.mark.parametrize("kw", [dict(cip=True), dict(ceil=True), dict(div=4), dict(div=5, cip=True)])
@pytest.mark.parametrize("n", [1, 2])
def test_avgpool_options(kw, n):
    build, ref, x, c, _ = _pool_case(n, "avg", channels_last=(n == 2), **kw)
    outs, grads, _ = run(build, [x], [c])
    r_outs, r_grads = torch_run(ref, [x], [c])
    close(outs[0], r_outs[0])
    close(grads[0], r_grads[0])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_adaptive_avg_pool(n):
    shape = (2, 3) + (7, 5, 6)[:n]
    size = [3, 2, 4][:n]
    x = rand(*shape)
    tfn = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[n]
    c = rand(2, 3, *size)
    f = check(lambda v, c: flow.math.multiply(user_op(f"adaptive_avg_pool{n}d", {"x": v}, ["y"],
                                                      {"output_size": size}), c),
              lambda v, c: tfn(v, size) * c, [x], [c])
    assert f"adaptive_avg_pool{n}d_grad" in op_types(f)


@pytest.mark.parametrize("interpolation,align", [("nearest", False), ("bilinear", False), ("bilinear", True)])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_upsample_2d(interpolation, align, fmt):
    x = rand(2, 3, 4, 5)
    feed = x if fmt == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    c = rand(2, 3, 8, 15)
    c_feed = c if fmt == "NCHW" else np.ascontiguousarray(c.transpose(0, 2, 3, 1))

    def ref(v, c):
        t = v if fmt == "NCHW" else v.permute(0, 3, 1, 2)
        extra = {"align_corners": align} if interpolation == "bilinear" else {}
        y = F.interpolate(t, scale_factor=(2, 3), mode=interpolation, **extra)
        return (y if fmt == "NCHW" else y.permute(0, 2, 3, 1)) * c

    f = check(lambda v, c: flow.math.multiply(flow.layers.upsample_2d(v, (2, 3), align, fmt, interpolation), c),
              ref, [feed], [c_feed])
    assert "upsample_grad" in op_types(f)


def test_pool_strides_none_means_one():
    """OneFlow's pooling functions read ``strides=None`` (and ``ksize=None``) as 1 in every
    spatial dim (``_GetSequence`` in single_client/ops/nn_ops.py, v0.6.0); MobileNetV3 from
    OneFlow's model zoo calls ``flow.nn.avg_pool2d(x, ksize=[H, W], strides=None, padding="SAME")``."""
    x = rand(2, 3, 5, 4)
    (y_avg, y_max, y_avg1, y_max3), _, _ = run(
        lambda v: (flow.nn.avg_pool2d(v, ksize=[2, 3], strides=None, padding="VALID"),
                   flow.nn.max_pool2d(v, ksize=2, strides=None, padding="VALID"),
                   flow.nn.avg_pool1d(flow.reshape(v, (2, 3, 20)), ksize=4, strides=None, padding="VALID"),
                   flow.nn.max_pool3d(flow.reshape(v, (2, 3, 5, 2, 2)), ksize=None, strides=None,
                                      padding="VALID")),
        feeds=[x], train=False)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(y_avg, F.avg_pool2d(t, (2, 3), stride=1).numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y_max, F.max_pool2d(t, 2, stride=1).numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y_avg1, F.avg_pool1d(t.reshape(2, 3, 20), 4, stride=1).numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y_max3, x.reshape(2, 3, 5, 2, 2), rtol=RTOL, atol=ATOL)  # 1x1x1 window
    # SAME with the whole image as the window and stride 1 keeps H x W, each output the mean of
    # the in-image elements of its window (the SE block's use)
    (y_same,), _, _ = run(lambda v: flow.nn.avg_pool2d(v, ksize=[5, 4], strides=None, padding="SAME"),
                          feeds=[x], train=False)
    assert y_same.shape == (2, 3, 5, 4)


def test_pool_errors():
    with pytest.raises(JobBuildError, match=r"attr 'padding' \[2, 2\] must be >= 0 and at most half of kernel_size "
                                            r"\[3, 3\]"):
        run(lambda x: user_op("maxpool_2d", {"x": x}, ["y", "indice"],
                              {"kernel_size": [3, 3], "stride": [1, 1], "padding": [2, 2], "dilation": [1, 1],
                               "data_format": "channels_first"}), feeds=[rand(1, 1, 5, 5)], train=False)
    with pytest.raises(JobBuildError, match=r"input 'x' expected rank 4, received shape \(1, 5, 5\)"):
        run(lambda x: user_op("avgpool_2d", {"x": x}, ["y"], {"kernel_size": [2, 2], "stride": [1, 1],
                                                              "padding": [0, 0], "data_format": "channels_first"}),
            feeds=[rand(1, 5, 5)], train=False)
    with pytest.raises(JobBuildError, match=r"interpolation must be 'nearest' or 'bilinear', received 'bicubic'"):
        run(lambda x: flow.layers.upsample_2d(x, interpolation="bicubic"), feeds=[rand(1, 1, 2, 2)], train=False)
    assert registry.lookup("maxpool_2d").attrs["stride"].type == "list_int32"
    assert registry.lookup("adaptive_avg_pool2d").attrs["output_size"].type == "list_int64"
    assert registry.lookup("upsample").attrs["height_scale"].type == "float"


# ================================================================== flow.losses.add_loss

def test_add_loss_registers_a_second_loss():
    x = rand(3)
    grads = {}

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3,), initializer=flow.constant_initializer(2.0))
            flow.watch_diff(w, _saver(grads, "w"))
            l1 = flow.math.reduce_sum(flow.math.multiply(w, x))
            l2 = flow.math.reduce_sum(flow.math.square(w))
            losses.add_loss(l2)
            losses.add_loss(l2)     # registered once
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(l1)
        return l1

    job(x)
    close(grads["w"], x + 2 * 2.0)
    assert len(job.compiled_job.job.job_conf.train_conf.loss_lbn) == 2


def test_add_loss_errors():
    @flow.global_function(type="predict")
    def pjob(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        losses.add_loss(x)
        return x

    with pytest.raises(JobBuildError, match=r"add_loss: job 'pjob' is a predict job"):
        pjob(rand(3))
    # (an integer loss is allowed, as OneFlow: tests/test_oneflow_behaviour.py)


def test_registered_op_types_present():
    mine = ["leaky_relu", "elu", "celu", "hardsigmoid", "hardswish", "hardtanh", "mish", "silu", "selu", "softsign",
            "prelu", "tf_prelu", "log_softmax", "softmax_cross_entropy", "sigmoid_cross_entropy",
            "sparse_cross_entropy", "sparse_cross_entropy_ms", "binary_cross_entropy",
            "binary_cross_entropy_with_logits", "kl_div_loss", "smooth_l1_loss", "nll", "normalization",
            "layer_norm", "upsample"] + [f"{k}pool_{n}d" for k in ("max", "avg") for n in (1, 2, 3)] + \
        [f"adaptive_avg_pool{n}d" for n in (1, 2, 3)]
    for t in mine:
        assert registry.has_op(t)
        grad = "layer_norm_grad" if t == "layer_norm" else f"{t}_grad"
        assert registry.has_op(grad), grad
    assert registry.has_op("layer_norm_param_grad")
    assert all(registry.has_op(f"deconv{n}d") for n in (1, 2, 3))
    assert registry.lookup("deconv2d").attrs["output_padding"].type == "list_int32"


# ================================================================== transposed convolution

@pytest.mark.parametrize("padding,out_hw", [("VALID", (9, 11)), ("VALID", (10, 12)), ("SAME", (8, 10))])
def test_conv2d_transpose_output_shape(padding, out_hw):
    x, w, c = rand(2, 3, 4, 5), rand(3, 6, 3, 3), rand(2, 6, *out_hw)
    f = check(lambda x, w, c: flow.math.multiply(
                  flow.nn.conv2d_transpose(x, w, output_shape=(2, 6) + out_hw, strides=2, padding=padding), c),
              lambda x, w, c: _torch_deconv(x, w, out_hw, padding) * c, [x, w], [c])
    types = op_types(f)
    assert "deconv2d" in types and "conv_filter_grad" in types and "conv2d" in types


def _torch_deconv(x, w, out_hw, padding):
    if padding == "SAME":  # TensorFlow's split: the full result cropped by floor(total / 2) before
        full = F.conv_transpose2d(x, w, stride=2)
        (h0, w0) = ((full.shape[2 + i] - out_hw[i]) // 2 for i in range(2))
        return full[:, :, h0:h0 + out_hw[0], w0:w0 + out_hw[1]]
    pads, ops = [], []
    for n, o in zip(x.shape[2:], out_hw):
        total = (n - 1) * 2 + 3 - o
        p = 0 if padding == "VALID" else -(-total // 2)
        pads.append(p)
        ops.append(2 * p - total)
    return F.conv_transpose2d(x, w, stride=2, padding=pads, output_padding=ops)


def test_torch_conv2d_transpose_nhwc_and_errors():
    x, w = rand(2, 4, 5, 3), rand(3, 2, 3, 4)     # NHWC input; filter (in, kh, kw, out)
    c = rand(2, 7, 19, 4)

    def ref(x, w, c):
        y = F.conv_transpose2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), stride=(2, 3), padding=(1, 0),
                               output_padding=(1, 2), dilation=(1, 2))
        return y.permute(0, 2, 3, 1) * c
    check(lambda x, w, c: flow.math.multiply(flow.nn.torch_conv2d_transpose(
        x, w, output_padding=(1, 2), strides=(2, 3), padding_needed=(1, 0), data_format="NHWC", dilations=(1, 2)), c),
        ref, [x, w], [c])
    with pytest.raises(ValueError, match=r"output size 9 of spatial dim 0 cannot be produced"):
        run(lambda x, w: flow.nn.conv2d_transpose(x, w, output_shape=(1, 2, 9, 9), strides=1),
            feeds=[rand(1, 3, 5, 5), rand(3, 2, 3, 3)], train=False)
    with pytest.raises(JobBuildError, match=r"attr 'output_padding' \[2, 0\] must be >= 0 and smaller than attr "
                                            r"'strides' \[2, 2\]"):
        run(lambda x, w: flow.nn.torch_conv2d_transpose(x, w, output_padding=(2, 0), strides=2),
            feeds=[rand(1, 3, 5, 5), rand(3, 2, 3, 3)], train=False)
    with pytest.raises(JobBuildError, match=r"input 'weight' expected shape \(3, 2, 3, 3\)"):
        run(lambda x, w: user_op("deconv2d", {"in": x, "weight": w}, ["out"],
                                 {"filters": 2, "kernel_size": [3, 3], "padding_before": [0, 0], "strides": [1, 1],
                                  "dilation_rate": [1, 1], "output_padding": [0, 0], "groups": 1,
                                  "data_format": "channels_first"}),
            feeds=[rand(1, 3, 5, 5), rand(3, 4, 3, 3)], train=False)


def test_normalization_add_to_output_and_missing_statistics_errors():
    x, gamma, beta, add = rand(4, 3), rand(3, low=0.5, high=2), rand(3), rand(4, 3)

    def build(x, gamma, beta, add):
        return user_op("normalization", {"x": x, "gamma": gamma, "beta": beta, "_add_to_output": add},
                       ["y", "mean", "inv_variance"], {"axis": 1, "epsilon": 1e-3, "training": True})[0]

    def ref(x, gamma, beta, add):
        return F.batch_norm(x, None, None, gamma, beta, training=True, eps=1e-3) + add
    # weight the output: sum(batch norm) has zero gradient in x
    c = rand(4, 3)
    check(lambda x, g, b, a, c: flow.math.multiply(build(x, g, b, a), c),
          lambda x, g, b, a, c: ref(x, g, b, a) * c, [x, gamma, beta, add], [c])
    with pytest.raises(JobBuildError, match=r"a training batch norm needs its outputs 'mean' and 'inv_variance'"):
        run(lambda x, g, b: user_op("normalization", {"x": x, "gamma": g, "beta": b}, ["y"],
                                    {"axis": 1, "training": True}), [x, gamma, beta])
    with pytest.raises(JobBuildError, match=r"with scale=True its output 'normalized' is needed"):
        run(lambda x, g: user_op("layer_norm", {"x": x, "gamma": g}, ["y", "mean", "inv_variance"],
                                 {"scale": True, "begin_norm_axis": 1, "begin_params_axis": 1}), [x, gamma])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("op_type, x_arg", [("dropout", "in"), ("dropout_grad", "dy")])
def test_dropout_masks_and_scales_in_one_kernel(op_type, x_arg, dtype):
    """dropout / dropout_grad: ``x * mask * scale`` in one pass over ``x`` (no intermediate
    ``x * mask``), bit for bit, the signs of the dropped zeros included."""
    from graphfront.framework import job_builder as jb
    from graphfront.ops.builder import UserOpConfBuilder
    from graphfront.runtime.plan import KernelCtx
    from test_plan import _AtenCalls
    b = UserOpConfBuilder("u", prefix=False).Op(op_type).Input(x_arg, ["x/0"]).Input("mask", ["m/0"]) \
        .Output("out" if op_type == "dropout" else "dx").Attr("scale", 1 / 0.7)
    b.CheckAndComplete()
    descs = {"x/0": jb.TensorDesc((64,), flow.float16 if dtype == torch.float16 else flow.float32),
             "m/0": jb.TensorDesc((64,), flow.int8)}
    kernel = registry.lookup(op_type).kernel(KernelCtx(b.op_conf, descs, torch.device("cpu")))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, generator=g).to(dtype)
    mask = (torch.rand(64, generator=g) > 0.3).to(torch.int8)
    with _AtenCalls() as calls:
        out = kernel(x, mask, None) if op_type == "dropout" else kernel(x, mask)
    assert calls.count["addcmul"] == 1 and not calls.count["mul"], calls.count
    want = x * mask * (1 / 0.7)
    assert out.dtype == dtype and torch.equal(out, want) and torch.equal(out.signbit(), want.signbit())
    assert out[mask == 0].signbit().any()   # (negative inputs were dropped)


def test_random_mask_like_off_the_cpu_draws_its_int8_mask_in_one_kernel():
    """random_mask_like's GPU branch (taken for any device but the CPU; built here for the
    ``meta`` device, then given a CPU ``like`` so that its draws hold values): one
    ``bernoulli_`` kernel writes the int8 mask, each element kept with probability
    ``1 - rate`` (the kept count within 5 binomial standard deviations)."""
    from graphfront.framework import job_builder as jb
    from graphfront.ops.builder import UserOpConfBuilder
    from graphfront.runtime.plan import KernelCtx
    from test_plan import _AtenCalls
    b = UserOpConfBuilder("m", prefix=False).Op("random_mask_like").Input("like", ["x/0"]).Output("out") \
        .Attr("rate", 0.3).Attr("seed", 4)
    b.CheckAndComplete()
    n = 100_000
    kernel = registry.lookup("random_mask_like").kernel(
        KernelCtx(b.op_conf, {"x/0": jb.TensorDesc((n,), flow.float16)}, torch.device("meta")))
    like = torch.empty(n, dtype=torch.float16)
    torch.manual_seed(0)
    with _AtenCalls() as calls:
        mask = kernel(like)
    assert calls.count["bernoulli_"] == 1 and sum(calls.count.values()) == 2, calls.count   # (empty, bernoulli_)
    assert mask.dtype == torch.int8 and set(mask.unique().tolist()) == {0, 1}
    assert abs(int(mask.sum()) - 0.7 * n) < 5 * (n * 0.7 * 0.3) ** 0.5


def test_half_layer_norm_statistics_are_float32():
    """layer_norm of a float16 blob gives ``mean`` and ``inv_variance`` in float32, as
    OneFlow's InferBnParamDataType, and ``y`` in float16; layer_norm_grad reads them."""
    x = np.random.default_rng(6).standard_normal((4, 16)).astype(np.float32) * 3 + 1
    flow.clear_default_session()

    @flow.global_function()
    def job(v: tp.Numpy.Placeholder((4, 16))) -> typing.Tuple[tp.Numpy, tp.Numpy, tp.Numpy, tp.Numpy]:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.cast(v, flow.float16)
            y, mean, inv = flow.user_op_builder("ln").Op("layer_norm").Input("x", [h]).Output("y") \
                .Output("mean").Output("inv_variance").Attr("begin_norm_axis", 1).Attr("begin_params_axis", -1) \
                .Attr("epsilon", 1e-5).Build().InferAndTryRun().RemoteBlobList()
            dx = flow.layers.layer_norm_grad(h, h, mean, inv, begin_norm_axis=1)
            return y, mean, inv, dx
    y, mean, inv, dx = job(x)
    assert (y.dtype, mean.dtype, inv.dtype, dx.dtype) == (np.float16, np.float32, np.float32, np.float16)
    h = x.astype(np.float16).astype(np.float64)
    # (the CPU kernel keeps half-precision statistics: within float16 rounding)
    np.testing.assert_allclose(mean, h.mean(1), rtol=2 ** -10, atol=2 ** -14)
    np.testing.assert_allclose(inv, 1 / np.sqrt(h.var(1) + 1e-5), rtol=2 ** -10)
