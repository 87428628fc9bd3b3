"""flow.optimizer end to end: every optimizer trains a small job step by step against an
independent reference on identical weights and data.

References: torch.optim (SGD, Adam, AdamW, RMSprop, Adagrad) where OneFlow's update equals
torch's, otherwise a float64 numpy implementation of the published formula written in
this file (Adam without bias correction, OneFlow's momentum form under a changing LR,
RMSProp's epsilon inside the square root, SGDW's decoupled decay, LARS, LAMB). Gradients
for the numpy references come from torch autograd, not from graphfront.
"""
import copy
import math

import numpy as np
import pytest
import torch
from google.protobuf import text_format

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import JobBuildError
from graphfront.passes.autograd import autograd as autograd_pass
from graphfront.passes.optimizer import optimizer as optimizer_pass

RTOL, ATOL = 1e-5, 1e-6
STEPS = 5


def f32(v):
    """A Python float as OneFlow stores it in a float proto field/attr."""
    return float(np.float32(v))


@pytest.fixture
def data():
    rng = np.random.RandomState(7)
    w0 = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    b0 = rng.uniform(-1, 1, (3,)).astype(np.float32)
    xs = [rng.normal(0, 1, (2, 3)).astype(np.float32) for _ in range(STEPS)]
    return w0, b0, xs


def torch_loss(x, w, b):
    return torch.tanh(x * w + b).pow(2).sum()


def make_train_job(make_optimizer, w_regularizer=None, x_scale=1.0):
    """Train job: loss = sum(tanh(x * w + b)^2) with w (2, 3), b (3,)."""
    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3), initializer=flow.zeros_initializer(), regularizer=w_regularizer)
            b = flow.get_variable("b", (3,), initializer=flow.zeros_initializer())
            y = flow.math.tanh(x * x_scale * w + b)
            loss = flow.math.reduce_sum(flow.math.square(y))
        make_optimizer().minimize(loss)
        return loss
    return train


def run_graphfront(job, data):
    w0, b0, xs = data
    flow.load_variables({"w": w0, "b": b0})
    history = []
    for x in xs:
        job(x)
        v = flow.get_all_variables()
        history.append((v["w"].numpy(), v["b"].numpy()))
    return history


def run_torch(data, make_optimizer, lrs=None, clip=None, penalty=None, x_scale=1.0):
    """torch eager training of the same model; ``make_optimizer(w, b)``."""
    w0, b0, xs = data
    w = torch.tensor(w0, requires_grad=True)
    b = torch.tensor(b0, requires_grad=True)
    opt = make_optimizer(w, b)
    history = []
    for i, x in enumerate(xs):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[i]
        opt.zero_grad()
        loss = torch_loss(torch.tensor(x) * x_scale, w, b)
        if penalty is not None:
            loss = loss + penalty(w)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_([w, b], clip)
        opt.step()
        history.append((w.detach().numpy().copy(), b.detach().numpy().copy()))
    return history


def grads64(x, w, b):
    """d loss / d(w, b) in float64 by torch autograd."""
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    torch_loss(torch.tensor(x, dtype=torch.float64), tw, tb).backward()
    return [tw.grad.numpy(), tb.grad.numpy()]


def run_numpy(data, step, lrs):
    """float64 reference: ``step(i, params, grads, lr, state)`` updates params (list) in place."""
    w0, b0, xs = data
    params = [w0.astype(np.float64), b0.astype(np.float64)]
    state = {}
    history = []
    for i, x in enumerate(xs):
        step(i, params, grads64(x, *params), lrs[i], state)
        history.append((params[0].copy(), params[1].copy()))
    return history


def assert_same_trajectory(got, want, rtol=RTOL, atol=ATOL):
    for i, ((gw, gb), (ww, wb)) in enumerate(zip(got, want)):
        np.testing.assert_allclose(gw, ww, rtol=rtol, atol=atol, err_msg=f"w after step {i}")
        np.testing.assert_allclose(gb, wb, rtol=rtol, atol=atol, err_msg=f"b after step {i}")
    assert len(got) == len(want) == STEPS


def assert_moved(data, history, at_least=1e-2):
    """The test is meaningful: the weights moved by far more than the tolerance."""
    w0, b0, _ = data
    assert np.abs(history[-1][0] - w0).max() > at_least
    assert np.abs(history[-1][1] - b0).max() > at_least


def pass_output(job):
    """The job as the autograd and optimizer passes leave it (before the cleanup passes,
    which may fuse regularizers into update ops and group updates into multi-tensor ops)."""
    return optimizer_pass(autograd_pass(copy.deepcopy(job.compiled_job.user_job)))


def job_text(job):
    return text_format.MessageToString(pass_output(job))


def update_op(job, var):
    return next(op for op in pass_output(job).net.op if op.name == f"{var}_optimizer")


def torch_lrs(base, make_scheduler, n=STEPS):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    sched = make_scheduler(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


# ------------------------------------------------------------------------- SGD

def test_sgd_naive_with_cosine_schedule_matches_torch_sgd(data):
    job = make_train_job(lambda: flow.optimizer.SGD(flow.optimizer.CosineScheduler(0.5, 4), momentum=0))
    got = run_graphfront(job, data)
    lrs = torch_lrs(0.5, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4))
    want = run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.5), lrs=lrs)
    assert_same_trajectory(got, want)
    assert_moved(data, got)
    text = job_text(job)
    assert 'op_type_name: "sgd_update"' in text and 'name: "w_optimizer"' in text
    assert "System-Train-LearningRate-Scheduler_" in text and "System-Train-TrainStep-train-Assign" in text
    assert "cosine_conf" in text


def test_sgd_default_momentum_is_0_9_and_matches_torch_momentum_at_constant_lr(data):
    job = make_train_job(lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.2])))
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.2, momentum=f32(0.9)))
    assert_same_trajectory(got, want)
    assert_moved(data, got)
    op = update_op(job, "w")
    assert op.user_conf.op_type_name == "momentum_update"
    assert op.user_conf.attr["beta"].at_float == pytest.approx(0.9)
    assert list(op.user_conf.input["momentum"].s) == ["w-momentum/out"]


def test_momentum_under_a_changing_lr_follows_oneflows_form_not_torchs(data):
    sched = flow.optimizer.ExponentialScheduler(0.3, 2, 0.5)
    job = make_train_job(lambda: flow.optimizer.SGD(sched, momentum=0.8))
    got = run_graphfront(job, data)
    lrs = [0.3 * 0.5 ** (i / 2) for i in range(STEPS)]

    def step(i, params, grads, lr, state):
        for k, (p, g) in enumerate(zip(params, grads)):
            mom = state.get(k, 0.0) * f32(0.8) - lr * g      # OneFlow: momentum holds -lr * buffer
            state[k] = mom
            p += mom
    assert_same_trajectory(got, run_numpy(data, step, lrs))
    # torch's buffer form differs once the LR changes
    torch_hist = run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.3, momentum=0.8), lrs=lrs)
    assert not np.allclose(got[-1][0], torch_hist[-1][0], rtol=1e-4)


def test_sgdw_momentum_uses_decoupled_weight_decay_with_includes(data):
    wd = 0.1
    job = make_train_job(lambda: flow.optimizer.SGDW(flow.optimizer.PiecewiseConstantScheduler([], [0.2]),
                                                     momentum=0.9, weight_decay=wd, weight_decay_includes="^w$"))
    got = run_graphfront(job, data)

    def step(i, params, grads, lr, state):
        for k, (p, g) in enumerate(zip(params, grads)):
            mom = state.get(k, 0.0) * f32(0.9) - lr * g
            state[k] = mom
            decay = lr * f32(wd) * p if k == 0 else 0.0
            p += mom - decay
    assert_same_trajectory(got, run_numpy(data, step, [0.2] * STEPS))
    assert update_op(job, "w").user_conf.attr["weight_decay"].at_float == pytest.approx(wd)
    assert update_op(job, "b").user_conf.attr["weight_decay"].at_float == 0.0


def test_sgdw_without_momentum_matches_torch_sgd_weight_decay(data):
    job = make_train_job(lambda: flow.optimizer.SGDW(flow.optimizer.PiecewiseConstantScheduler([], [0.3]),
                                                     momentum=0, weight_decay=0.05))
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.3, weight_decay=f32(0.05)))
    assert_same_trajectory(got, want)


# ------------------------------------------------------------------------- Adam family

def test_adam_with_bias_correction_and_polynomial_schedule_matches_torch_adam(data):
    sched = flow.optimizer.PolynomialScheduler(0.1, 4, end_learning_rate=0.0, power=2.0)
    job = make_train_job(lambda: flow.optimizer.Adam(sched, do_bias_correction=True))
    got = run_graphfront(job, data)
    lrs = torch_lrs(0.1, lambda o: torch.optim.lr_scheduler.PolynomialLR(o, total_iters=4, power=2.0))
    want = run_torch(data, lambda w, b: torch.optim.Adam([w, b], lr=0.1, betas=(f32(0.9), f32(0.999)),
                                                         eps=f32(1e-8)), lrs=lrs)
    assert_same_trajectory(got, want)
    assert_moved(data, got)
    text = job_text(job)
    for name in ("w-m", "w-v", "w-max_v", "b-m", "wadam_bias_correction_factor1", "wadam_bias_correction_factor2"):
        assert f'name: "{name}"' in text
    # one factor op per beta, shared by both variables
    assert "badam_bias_correction_factor" not in text
    assert list(update_op(job, "b").user_conf.input["bias_correction1"].s) == \
        ["wadam_bias_correction_factor1/out_0"]


def test_adam_default_has_no_bias_correction_and_matches_the_numpy_reference(data):
    job = make_train_job(lambda: flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.05])))
    got = run_graphfront(job, data)
    b1, b2, eps = f32(0.9), f32(0.999), f32(1e-8)

    def step(i, params, grads, lr, state):
        for k, (p, g) in enumerate(zip(params, grads)):
            m, v = state.get(k, (0.0, 0.0))
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            state[k] = (m, v)
            p -= lr * m / (np.sqrt(v) + eps)
    assert_same_trajectory(got, run_numpy(data, step, [0.05] * STEPS))
    conf = job.compiled_job.user_job.job_conf.train_conf.optimizer_conf[0]
    assert conf.HasField("adam_conf") and conf.adam_conf.do_bias_correction is False
    assert "adam_bias_correction_factor" not in job_text(job)
    assert update_op(job, "w").user_conf.attr["do_bias_correction"].at_bool is False


def test_adamw_decoupled_weight_decay_with_excludes_matches_torch_adamw(data):
    job = make_train_job(lambda: flow.optimizer.AdamW(
        flow.optimizer.PiecewiseConstantScheduler([2], [0.1, 0.05]), do_bias_correction=True, weight_decay=0.5,
        weight_decay_excludes=["b"]))
    got = run_graphfront(job, data)
    lrs = [0.1, 0.1, 0.1, 0.05, 0.05]   # boundaries are inclusive: step 2 still has values[0]

    def make(w, b):
        return torch.optim.AdamW([{"params": [w], "weight_decay": f32(0.5)}, {"params": [b], "weight_decay": 0.0}],
                                 lr=0.1, betas=(f32(0.9), f32(0.999)), eps=f32(1e-8))
    assert_same_trajectory(got, run_torch(data, make, lrs=lrs))
    assert update_op(job, "b").user_conf.attr["weight_decay"].at_float == 0.0
    conf = job.compiled_job.user_job.job_conf.train_conf.optimizer_conf[0]
    assert list(conf.weight_decay_conf.excludes.pattern) == ["b"]


def test_adam_amsgrad_matches_torch_amsgrad(data):
    class AmsGradAdam(flow.optimizer.Adam):
        def _SetSpecificFieldsInOptimizerConf(self, conf):
            super()._SetSpecificFieldsInOptimizerConf(conf)
            conf.adam_conf.amsgrad = True

    job = make_train_job(lambda: AmsGradAdam(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), beta2=0.5,
                                             do_bias_correction=True))
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.Adam([w, b], lr=0.1, betas=(f32(0.9), f32(0.5)),
                                                         eps=f32(1e-8), amsgrad=True))
    assert_same_trajectory(got, want)
    v = flow.get_all_variables()
    assert not np.allclose(v["w-max_v"].numpy(), v["w-v"].numpy())   # the max actually mattered


def test_lazy_adam_uses_bias_correction_and_matches_torch_adam(data):
    job = make_train_job(lambda: flow.optimizer.LazyAdam(flow.optimizer.PiecewiseConstantScheduler([], [0.1]),
                                                         beta1=0.8))
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.Adam([w, b], lr=0.1, betas=(f32(0.8), f32(0.999)),
                                                         eps=f32(1e-8)))
    assert_same_trajectory(got, want)
    conf = job.compiled_job.user_job.job_conf.train_conf.optimizer_conf[0]
    assert conf.HasField("lazy_adam_conf")
    assert update_op(job, "w").user_conf.op_type_name == "adam_update"


# ------------------------------------------------------------------------- RMSProp / Adagrad

@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop_matches_torch_rmsprop(data, centered):
    # epsilon 0: torch adds eps outside the square root, OneFlow inside (checked below)
    job = make_train_job(lambda: flow.optimizer.RMSProp(flow.optimizer.PiecewiseConstantScheduler([], [0.01]),
                                                        decay_rate=0.9, epsilon=0.0, centered=centered))
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.RMSprop([w, b], lr=0.01, alpha=f32(0.9), eps=0.0,
                                                            centered=centered))
    assert_same_trajectory(got, want)
    assert_moved(data, got)
    text = job_text(job)
    assert 'name: "w-mean_square"' in text
    assert ('name: "w-mean_gradient"' in text) == centered


def test_rmsprop_adds_epsilon_inside_the_square_root(data):
    eps, decay = 0.1, 0.9
    job = make_train_job(lambda: flow.optimizer.RMSProp(flow.optimizer.PiecewiseConstantScheduler([], [0.05]),
                                                        decay_rate=decay, epsilon=eps, centered=True))
    got = run_graphfront(job, data)

    def step(i, params, grads, lr, state):
        for k, (p, g) in enumerate(zip(params, grads)):
            ms, mg = state.get(k, (0.0, 0.0))
            ms = f32(decay) * ms + (1 - f32(decay)) * g * g
            mg = f32(decay) * mg + (1 - f32(decay)) * g
            state[k] = (ms, mg)
            p -= lr * g / np.sqrt(ms - mg * mg + f32(eps))
    assert_same_trajectory(got, run_numpy(data, step, [0.05] * STEPS))


def test_adagrad_matches_torch_adagrad(data):
    job = make_train_job(lambda: flow.optimizer.Adagrad(flow.optimizer.PiecewiseConstantScheduler([], [0.3]),
                                                        lr_decay=0.2, initial_accumulator_value=0.1, epsilon=1e-10))
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.Adagrad([w, b], lr=0.3, lr_decay=f32(0.2),
                                                            initial_accumulator_value=f32(0.1), eps=f32(1e-10)))
    assert_same_trajectory(got, want)
    assert_moved(data, got)
    op = update_op(job, "w")
    assert op.user_conf.op_type_name == "adagrad_update"
    assert list(op.user_conf.input["sum"].s) == ["w-sum/out"]
    assert list(op.user_conf.input["train_step"].s) == ["System-Train-TrainStep-train-Identity/out"]
    np.testing.assert_allclose(flow.get_all_variables()["System-Train-TrainStep-train"].numpy(), [STEPS])


# ------------------------------------------------------------------------- LARS / LAMB

def test_lars_matches_oneflows_kernel_formula(data):
    beta, eps, coeff, wd = 0.9, 1e-9, 0.1, 0.01
    job = make_train_job(lambda: flow.optimizer.LARS(flow.optimizer.PiecewiseConstantScheduler([], [1.0]),
                                                     momentum_beta=beta, epsilon=eps, lars_coefficient=coeff,
                                                     weight_decay=wd))
    got = run_graphfront(job, data)

    def step(i, params, grads, lr, state):
        # the trust ratio of You et al. 2017 (Alg. 1); the update of OneFlow's LarsUpdateFunctor
        # (oneflow/user/kernels/model_update_kernel_util.h): the decay outside the momentum, as
        # OneFlow's own test_optimizers.py (compare_with_numpy_lars) checks it
        for k, (p, g) in enumerate(zip(params, grads)):
            w_norm, g_norm = np.linalg.norm(p), np.linalg.norm(g)
            trust = f32(coeff) * w_norm / (f32(eps) + g_norm + f32(wd) * w_norm) if w_norm > 0 and g_norm > 0 else 1
            mom = state.get(k, 0.0) * f32(beta) - lr * trust * g
            state[k] = mom
            p += mom - lr * trust * f32(wd) * p
    assert_same_trajectory(got, run_numpy(data, step, [1.0] * STEPS))
    assert_moved(data, got)
    assert 'name: "w-momentum"' in job_text(job)


def test_lamb_matches_the_paper_formula(data):
    b1, b2, eps, wd = 0.9, 0.999, 1e-6, 0.1
    job = make_train_job(lambda: flow.optimizer.LAMB(flow.optimizer.PiecewiseConstantScheduler([], [0.1]),
                                                     weight_decay=wd))
    got = run_graphfront(job, data)

    def step(i, params, grads, lr, state):   # You et al. 2019, Alg. 2 (phi = identity)
        t = i + 1
        for k, (p, g) in enumerate(zip(params, grads)):
            m, v = state.get(k, (0.0, 0.0))
            m = f32(b1) * m + (1 - f32(b1)) * g
            v = f32(b2) * v + (1 - f32(b2)) * g * g
            state[k] = (m, v)
            r = (m / (1 - f32(b1) ** t)) / (np.sqrt(v / (1 - f32(b2) ** t)) + f32(eps))
            u = r + f32(wd) * p
            p -= lr * np.linalg.norm(p) / np.linalg.norm(u) * u
    assert_same_trajectory(got, run_numpy(data, step, [0.1] * STEPS))
    assert_moved(data, got)
    v = flow.get_all_variables()
    np.testing.assert_allclose(v["w-beta1_t"].numpy(), [f32(b1) ** (STEPS + 1)], rtol=1e-6)
    np.testing.assert_allclose(v["w-beta2_t"].numpy(), [f32(b2) ** (STEPS + 1)], rtol=1e-6)
    text = job_text(job)
    for name in ("w-m", "w-v", "w-beta1_t", "w-beta2_t"):
        assert f'name: "{name}"' in text


# ------------------------------------------------------------------------- combined, clipping, regularizers

def test_combined_optimizer_updates_each_variable_with_its_own_optimizer(data):
    def make():
        return flow.optimizer.CombinedOptimizer([
            flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), do_bias_correction=True,
                                variables=["w"]),
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0, variables=["b"]),
        ])
    job = make_train_job(make)
    got = run_graphfront(job, data)
    w0, b0, xs = data
    w = torch.tensor(w0, requires_grad=True)
    b = torch.tensor(b0, requires_grad=True)
    adam = torch.optim.Adam([w], lr=0.1, betas=(f32(0.9), f32(0.999)), eps=f32(1e-8))
    sgd = torch.optim.SGD([b], lr=0.5)
    want = []
    for x in xs:
        adam.zero_grad()
        sgd.zero_grad()
        torch_loss(torch.tensor(x), w, b).backward()
        adam.step()
        sgd.step()
        want.append((w.detach().numpy().copy(), b.detach().numpy().copy()))
    assert_same_trajectory(got, want)
    schedulers = [op for op in pass_output(job).net.op if op.HasField("learning_rate_schedule_conf")]
    assert len(schedulers) == 2 and all(op.name.startswith("System-Train-LearningRate-Scheduler_") for op in schedulers)
    assert update_op(job, "b").user_conf.op_type_name == "sgd_update"


@pytest.mark.parametrize("clip_norm", [0.5, 1e3])
def test_clipping_by_global_norm_matches_torch_clip_grad_norm(data, clip_norm):
    job = make_train_job(lambda: flow.optimizer.SGD(
        flow.optimizer.PiecewiseConstantScheduler([], [0.2]), momentum=0,
        grad_clipping=flow.optimizer.grad_clipping.by_global_norm(clip_norm)), x_scale=3.0)
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.2), clip=clip_norm, x_scale=3.0)
    assert_same_trajectory(got, want)
    unclipped = run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.2), x_scale=3.0)
    # the small clip norm is active (trajectory differs from unclipped), the large one is not
    assert np.allclose(got[-1][0], unclipped[-1][0], rtol=RTOL, atol=ATOL) == (clip_norm > 1)
    text = job_text(job)
    for op_type in ("multi_square_sum", "rsqrt", "clip_by_scalar_max", "scalar_mul_by_tensor"):
        assert f'op_type_name: "{op_type}"' in text
    assert "System-ClipGradient-GlobalNorm-" in text


def test_l1_l2_regularizer_adds_to_the_gradient(data):
    l1, l2 = 0.05, 0.2
    job = make_train_job(lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.3]),
                                                    momentum=0), w_regularizer=flow.regularizers.l1_l2(l1, l2))
    got = run_graphfront(job, data)
    want = run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.3),
                     penalty=lambda w: f32(l1) * w.abs().sum() + 0.5 * f32(l2) * (w * w).sum())
    assert_same_trajectory(got, want)
    net = pass_output(job).net.op
    (op,) = [o for o in net if o.name.startswith("System-RegularizeGradient-L1L2-")]   # w only, not b
    assert op.user_conf.op_type_name == "l1_l2_regularize_gradient"
    assert list(op.user_conf.input["model"].s) == ["w/out"]
    w_update = next(o for o in net if o.name == "w_optimizer")
    assert list(w_update.user_conf.input["model_diff"].s) == [f"{op.name}/out_0"]


@pytest.mark.parametrize("how", ["factor", "policy"])
def test_static_loss_scale_leaves_the_update_unchanged(data, how):
    def make():
        lr = flow.optimizer.PiecewiseConstantScheduler([], [0.3])
        if how == "factor":
            return flow.optimizer.SGD(lr, momentum=0, loss_scale_factor=1024.0)
        return flow.optimizer.SGD(lr, momentum=0, loss_scale_policy=flow.optimizer.loss_scale.static_loss_scale(64))
    job = make_train_job(make)
    got = run_graphfront(job, data)
    assert_same_trajectory(got, run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=0.3)))
    assert job.compiled_job.user_job.job_conf.train_conf.loss_scale_factor == (1024.0 if how == "factor" else 64.0)


def test_custom_scheduler_reads_the_learning_rate_from_a_blob(data):
    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2, 3)), lr: tp.Numpy.Placeholder((1,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (2, 3), initializer=flow.zeros_initializer())
            b = flow.get_variable("b", (3,), initializer=flow.zeros_initializer())
            y = flow.math.tanh(x * w + b)
            loss = flow.math.reduce_sum(flow.math.square(y))
        flow.optimizer.SGD(flow.optimizer.CustomScheduler(lr), momentum=0).minimize(loss)
        return loss

    w0, b0, xs = data
    lrs = [0.5, 0.1, 0.0, 0.7, 0.3]
    flow.load_variables({"w": w0, "b": b0})
    got = []
    for x, lr in zip(xs, lrs):
        train(x, np.array([lr], np.float32))
        v = flow.get_all_variables()
        got.append((v["w"].numpy(), v["b"].numpy()))
    assert_same_trajectory(got, run_torch(data, lambda w, b: torch.optim.SGD([w, b], lr=1.0), lrs=lrs))
    assert "System-Train-LearningRate-Scheduler_" not in job_text(train)


# ------------------------------------------------------------------------- op-level semantics

def _single_update_job(op_type, state_args=(), attrs=None, shape=(2, 3), extra_inputs=None):
    """Predict job applying one update op to variable 'w' with placeholder diff/skip/scale."""
    @flow.global_function()
    def step(diff: tp.Numpy.Placeholder(shape), skip: tp.Numpy.Placeholder((1,), dtype=flow.int64),
             sbt: tp.Numpy.Placeholder((1,))) -> None:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", shape, initializer=flow.zeros_initializer())
            builder = flow.user_op_builder("upd").Op(op_type).Input("model", [w]).Input("model_diff", [diff]) \
                .Input("skip_if", [skip]).Input("scale_by_tensor", [sbt])
            for arg in state_args:
                builder.Input(arg, [flow.get_variable(f"w-{arg}", shape, initializer=flow.zeros_initializer())])
            for arg, blob in (extra_inputs or {}).items():
                builder.Input(arg, [blob()])
            for k, v in (attrs or {}).items():
                builder.Attr(k, v)
            builder.Build().InferAndTryRun()
    return step


def test_sgd_update_op_scale_regularization_skip_if_and_learning_rate_val():
    job = _single_update_job("sgd_update", attrs={"learning_rate_val": 0.5, "scale": 2.0, "l1": 0.1, "l2": 0.2,
                                                  "weight_decay": 0.3})
    w0 = np.array([[1.0, -2.0, 0.0], [0.5, -0.5, 3.0]], np.float32)
    d = np.array([[0.1, 0.2, 0.3], [-0.4, 0.5, -0.6]], np.float32)
    flow.load_variables({"w": w0})
    job(d, np.array([0], np.int64), np.array([1.5], np.float32))
    g = 2.0 * 1.5 * d + f32(0.1) * np.sign(w0) + f32(0.2) * w0
    expected = w0 - 0.5 * (g + f32(0.3) * w0)
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), expected, rtol=1e-6)
    job(d, np.array([1], np.int64), np.array([1.5], np.float32))   # skip_if != 0: no change
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), expected, rtol=1e-6)


def test_adagrad_update_op_uses_train_step_val_without_the_input():
    job = _single_update_job("adagrad_update", state_args=("sum",),
                             attrs={"learning_rate_val": 0.1, "train_step_val": 3, "lr_decay": 0.5, "epsilon": 0.0})
    w0 = np.full((2, 3), 1.0, np.float32)
    d = np.array([[0.1, 0.2, 0.3], [-0.4, 0.5, -0.6]], np.float32)
    flow.load_variables({"w": w0})
    job(d, np.array([0], np.int64), np.array([1.0], np.float32))
    lr_t = 0.1 / (1 + 2 * 0.5)
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), w0 - lr_t * d / np.abs(d), rtol=1e-6)
    np.testing.assert_allclose(flow.get_all_variables()["w-sum"].numpy(), d * d, rtol=1e-6)


def test_adam_bias_correction_factor_op():
    @flow.global_function()
    def factor(step: tp.Numpy.Placeholder((1,), dtype=flow.int64)) -> tp.Numpy:
        return flow.user_op_builder("bc").Op("adam_bias_correction_factor").Input("train_step", [step]) \
            .Output("out").Attr("beta", 0.9).Build().InferAndTryRun().SoleOutputBlob()

    for t in (0, 1, 9, 1000):
        out = factor(np.array([t], np.int64))
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, [1 - f32(0.9) ** (t + 1)], rtol=1e-6)


def test_update_op_shape_and_dtype_errors_name_the_argument():
    @flow.global_function()
    def bad_shape(diff: tp.Numpy.Placeholder((3, 2))) -> None:
        w = flow.get_variable("w", (2, 3), initializer=flow.zeros_initializer())
        flow.user_op_builder("upd").Op("sgd_update").Input("model", [w]).Input("model_diff", [diff]) \
            .Build().InferAndTryRun()

    with pytest.raises(JobBuildError, match=r"sgd_update.*input 'model_diff' expected shape \(2, 3\) \(as 'model'\), "
                                            r"received \(3, 2\)"):
        bad_shape(np.zeros((3, 2), np.float32))
    flow.clear_default_session()

    @flow.global_function()
    def bad_lr(diff: tp.Numpy.Placeholder((2, 3)), lr: tp.Numpy.Placeholder((1,), dtype=flow.float64)) -> None:
        w = flow.get_variable("w", (2, 3), initializer=flow.zeros_initializer())
        m = flow.get_variable("w-momentum", (2, 3), initializer=flow.zeros_initializer())
        flow.user_op_builder("upd").Op("momentum_update").Input("model", [w]).Input("model_diff", [diff]) \
            .Input("momentum", [m]).Input("learning_rate", [lr]).Build().InferAndTryRun()

    with pytest.raises(JobBuildError, match="input 'learning_rate' expected dtype float32, received float64"):
        bad_lr(np.zeros((2, 3), np.float32), np.zeros((1,), np.float64))


def test_update_ops_are_nograd_and_mutate_model_and_state():
    from graphfront.ops import registry
    for op_type, state in [("sgd_update", ()), ("momentum_update", ("momentum",)), ("adam_update", ("m", "v", "max_v")),
                           ("rmsprop_update", ("mean_square", "mean_gradient")), ("lars_update", ("momentum",)),
                           ("lamb_update", ("m", "v", "beta1_t", "beta2_t")), ("adagrad_update", ("sum",))]:
        d = registry.lookup(op_type)
        assert d.no_grad and d.outputs == [] and set(d.mutates) == {"model", *state}, op_type
    assert registry.lookup("lars_update").input_def("learning_rate").optional is False
    assert registry.lookup("lamb_update").input_def("learning_rate").optional is False
    assert registry.lookup("adam_update").attrs["do_bias_correction"].default is True
    assert registry.lookup("adam_update").attrs["scale"].type == "double"
    assert registry.lookup("adagrad_update").attrs["train_step_val"].type == "int32"
    assert registry.lookup("l1_l2_regularize_gradient").no_grad


# ------------------------------------------------------------------------- API checks

def test_api_defaults_follow_oneflow():
    lr = flow.optimizer.PiecewiseConstantScheduler([], [0.1])
    assert flow.optimizer.Adam(lr).do_bias_correction is False
    assert flow.optimizer.SGD(lr).momentum == 0.9
    assert flow.optimizer.LAMB(lr).epsilon == 1e-6
    assert flow.optimizer.RMSProp(lr).decay_rate == 0.99
    lars = flow.optimizer.LARS(lr)
    assert (lars.momentum_beta, lars.epsilon, lars.lars_coefficient) == (0.9, 1e-9, 0.0001)
    clip = flow.optimizer.grad_clipping.by_global_norm(2.0).clip_conf
    assert clip.clip_by_global_norm.clip_norm == 2.0


def test_api_errors():
    lr = flow.optimizer.PiecewiseConstantScheduler([], [0.1])
    with pytest.raises(ValueError, match="weight_decay_includes and weight_decay_excludes are mutually exclusive"):
        flow.optimizer.AdamW(lr, weight_decay=0.1, weight_decay_includes=["w"], weight_decay_excludes=["b"])
    with pytest.raises(TypeError, match="lr_scheduler must be a flow.optimizer scheduler"):
        flow.optimizer.Adam(0.1)
    with pytest.raises(ValueError, match="Adam: beta1 must be <= 1.0, received 1.5"):
        flow.optimizer.Adam(lr, beta1=1.5)
    with pytest.raises(ValueError, match="give loss_scale_factor or loss_scale_policy, not both"):
        flow.optimizer.SGD(lr, loss_scale_factor=2.0, loss_scale_policy=flow.optimizer.loss_scale.static_loss_scale(2))
    with pytest.raises(ValueError, match="clip_norm must be > 0.0, received 0.0"):
        flow.optimizer.grad_clipping.by_global_norm(0)
    with pytest.raises(ValueError, match=r"CombinedOptimizer: optimizers\[0\] \(SGD\) sets train_step_lbn or a loss"):
        flow.optimizer.CombinedOptimizer([flow.optimizer.SGD(lr, loss_scale_factor=4.0)])


@pytest.mark.parametrize("make, message", [
    # a NaN or infinite hyperparameter trained to a NaN loss without a word
    (lambda lr: flow.optimizer.Adam(lr, beta1=float("nan")), "Adam: beta1 expects a finite number, received nan"),
    (lambda lr: flow.optimizer.SGD(lr, momentum=float("inf")), "SGD: momentum expects a finite number, received inf"),
    (lambda lr: flow.optimizer.CosineScheduler(float("nan"), 10), "CosineScheduler: base_lr expects a finite number"),
    # 1 + decay_rate * p reached 0 mid-training: ZeroDivisionError in the schedule
    (lambda lr: flow.optimizer.InverseTimeScheduler(0.1, 10, -5), "InverseTimeScheduler: decay_rate must be >= 0.0"),
    (lambda lr: flow.optimizer.ExponentialScheduler(0.1, 10, -0.5), "ExponentialScheduler: decay_rate must be > 0.0"),
    # an int or a bad regex reached list() or re at build time
    (lambda lr: flow.optimizer.AdamW(lr, weight_decay=0.1, weight_decay_includes=3),
     "AdamW: weight_decay_includes expects a str or a list of str, received 3"),
    (lambda lr: flow.optimizer.AdamW(lr, weight_decay=0.1, weight_decay_excludes=["bias("]),
     "AdamW: weight_decay_excludes entry 'bias(' is not a regular expression"),
    # list() / protobuf's TypeError when the job was built
    (lambda lr: flow.optimizer.SGD(lr, variables=3), "SGD: variables expects variable names"),
    (lambda lr: flow.optimizer.SGD(lr, train_step_lbn=3), "SGD: train_step_lbn expects a blob or its logical blob"),
    (lambda lr: flow.optimizer.CombinedOptimizer(flow.optimizer.SGD(lr)),
     "CombinedOptimizer: optimizers expects a list of optimizers, received SGD"),
])
def test_optimizer_and_scheduler_arguments_are_checked_at_the_user_line(make, message):
    lr = flow.optimizer.PiecewiseConstantScheduler([], [0.1])
    with pytest.raises(flow.JobBuildError) as e:
        make(lr)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)  # (ArgumentError: both)
    assert message in str(e.value)
    assert f"\n  at {__file__}:" in str(e.value)


def test_minimize_errors():
    lr = flow.optimizer.PiecewiseConstantScheduler([], [0.1])

    # (minimize in a predict job makes it a train job, as OneFlow: tests/test_oneflow_behaviour.py)
    def train_with(make):
        @flow.global_function(type="train")
        def train(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
            w = flow.get_variable("w", (2, 3), initializer=flow.zeros_initializer())
            loss = flow.math.reduce_sum(x * w)
            make(loss)
            return loss
        return train

    job = train_with(lambda loss: (flow.optimizer.SGD(lr).minimize(loss), flow.optimizer.Adam(lr).minimize(loss)))
    with pytest.raises(JobBuildError, match=r"Adam.minimize: variables \['w'\] are already updated by another "
                                            r"optimizer.*CombinedOptimizer"):
        job(np.zeros((2, 3), np.float32))
    flow.clear_default_session()

    job = train_with(lambda loss: flow.optimizer.SGD(lr, variables=["nope"]).minimize(loss))
    with pytest.raises(JobBuildError, match=r"\['nope'\] are not variables of job 'train'"):
        job(np.zeros((2, 3), np.float32))
    flow.clear_default_session()

    @flow.global_function(type="train")
    def bad_lr(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (2, 3), initializer=flow.zeros_initializer())
        loss = flow.math.reduce_sum(x * w)
        flow.optimizer.SGD(flow.optimizer.CustomScheduler(x), momentum=0).minimize(loss)
        return loss

    with pytest.raises(JobBuildError, match=r"learning_rate_lbn 'Input_\d+/out' \(CustomScheduler\) must be a float32 "
                                            r"blob of shape \(1,\), received float32 \(2, 3\)"):
        bad_lr(np.zeros((2, 3), np.float32))


def test_every_trainable_variable_gets_one_update_op_and_non_trainable_none(data):
    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (2, 3), initializer=flow.ones_initializer())
        frozen = flow.get_variable("frozen", (2, 3), initializer=flow.ones_initializer(), trainable=False)
        loss = flow.math.reduce_sum(x * w * frozen)
        flow.optimizer.RMSProp(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    train(data[2][0])
    names = [op.name for op in pass_output(train).net.op]
    assert names.count("w_optimizer") == 1 and "frozen_optimizer" not in names and "frozen-mean_square" not in names
    assert math.isclose(float(flow.get_all_variables()["frozen"].numpy().sum()), 6.0)
