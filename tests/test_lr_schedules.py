"""Learning-rate schedules: every flow.optimizer scheduler and warmup over a range of
steps, against torch.optim.lr_scheduler where it computes the same curve and a closed-form
numpy/TensorFlow-formula reference otherwise; plus the LR a train job actually applies.

OneFlow's semantics (documented in graphfront.ops.lr_schedule.learning_rate_at): during warmup
(step < warmup steps) the LR is base LR * warmup multiplier; afterwards the decay is
evaluated at the raw train step (not step - warmup steps).
"""
import math
import warnings

import numpy as np
import pytest
import torch
from torch.optim import lr_scheduler as tls

import graphfront as flow
from graphfront import typing as tp
from graphfront.core import job_conf_pb2, op_conf_pb2
from graphfront.framework.errors import JobBuildError
from graphfront.ops.lr_schedule import PlainConf, learning_rate_at

N = 25
opt = flow.optimizer


def f32(v):
    return float(np.float32(v))


def schedule_conf(scheduler):
    """The LearningRateScheduleOpConf the optimizer pass builds from a scheduler."""
    oc = job_conf_pb2.OptimizerConf()
    scheduler.SetLrFieldsInOptimizerConf(oc)
    conf = op_conf_pb2.LearningRateScheduleOpConf(train_step="step/out", out="out",
                                                  learning_rate=oc.base_learning_rate)
    if oc.HasField("learning_rate_decay"):
        conf.learning_rate_decay.CopyFrom(oc.learning_rate_decay)
    if oc.HasField("warmup_conf"):
        conf.warmup_conf.CopyFrom(oc.warmup_conf)
    return conf


def graphfront_lrs(scheduler, n=N):
    """The schedule's rate at steps 0..n-1 read on the host; checked equal to the rates the
    device computes from a tensor of steps out of the conf's plain copy (``PlainConf``: a
    step traced by the native lowering), so every schedule test covers both."""
    conf = schedule_conf(scheduler)
    host = np.array([learning_rate_at(conf, s) for s in range(n)])
    on_device = learning_rate_at(PlainConf(conf), torch.arange(n))
    np.testing.assert_allclose(on_device.numpy(), host, rtol=1e-12, atol=0)
    return host


def torch_lrs(base, make, n=N):
    """LR of each step 0..n-1 from a torch scheduler (closed form via .step())."""
    p = torch.nn.Parameter(torch.zeros(1))
    o = torch.optim.SGD([p], lr=base)
    sched = make(o)
    out = []
    for _ in range(n):
        out.append(o.param_groups[0]["lr"])
        o.step()
        sched.step()
    return np.array(out)


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)


STEPS = np.arange(N, dtype=np.float64)
BASE = f32(0.1)   # base_learning_rate is a float proto field


# ------------------------------------------------------------------ decays vs torch

def test_cosine_matches_torch_cosine_annealing_then_stays_at_alpha():
    got = graphfront_lrs(opt.CosineScheduler(0.1, 10, alpha=0.2))
    want = torch_lrs(BASE, lambda o: tls.CosineAnnealingLR(o, T_max=10, eta_min=0.2 * BASE), n=11)
    close(got[:11], want)
    close(got[10:], np.full(N - 10, 0.2 * BASE))


@pytest.mark.parametrize("power", [1.0, 2.0, 0.5])
def test_polynomial_to_zero_matches_torch_polynomial_lr(power):
    got = graphfront_lrs(opt.PolynomialScheduler(0.1, 12, end_learning_rate=0.0, power=power))
    close(got, torch_lrs(BASE, lambda o: tls.PolynomialLR(o, total_iters=12, power=power)))


def test_polynomial_with_end_lr_and_cycle_follow_tensorflows_formula():
    end, steps = f32(0.01), 6
    got = graphfront_lrs(opt.PolynomialScheduler(0.1, steps, end_learning_rate=0.01, power=2.0))
    t = np.minimum(STEPS, steps)
    close(got, (BASE - end) * (1 - t / steps) ** 2 + end)
    got = graphfront_lrs(opt.PolynomialScheduler(0.1, steps, end_learning_rate=0.01, power=2.0, cycle=True))
    period = steps * np.maximum(np.ceil(STEPS / steps), 1.0)
    close(got, (BASE - end) * (1 - STEPS / period) ** 2 + end)
    assert got[6] == pytest.approx(end) and got[7] > got[6]   # restarts after each period


def test_exponential_matches_torch_exponential_and_step_lr():
    close(graphfront_lrs(opt.ExponentialScheduler(0.1, 1, 0.9)),
          torch_lrs(BASE, lambda o: tls.ExponentialLR(o, gamma=0.9)))
    close(graphfront_lrs(opt.ExponentialScheduler(0.1, 4, 0.5)),
          torch_lrs(BASE, lambda o: tls.ExponentialLR(o, gamma=0.5 ** 0.25)))
    close(graphfront_lrs(opt.ExponentialScheduler(0.1, 4, 0.5, staircase=True)),
          torch_lrs(BASE, lambda o: tls.StepLR(o, step_size=4, gamma=0.5)))


def test_natural_exp_works_and_matches_torch_exponential():
    close(graphfront_lrs(opt.NaturalExpScheduler(0.1, 1, 0.3)),
          torch_lrs(BASE, lambda o: tls.ExponentialLR(o, gamma=math.exp(-0.3))))
    close(graphfront_lrs(opt.NaturalExpScheduler(0.1, 5, 0.3, staircase=True)),
          torch_lrs(BASE, lambda o: tls.StepLR(o, step_size=5, gamma=math.exp(-0.3))))


def test_inverse_time_closed_form():
    close(graphfront_lrs(opt.InverseTimeScheduler(0.1, 3, 0.5)), BASE / (1 + 0.5 * STEPS / 3))
    close(graphfront_lrs(opt.InverseTimeScheduler(0.1, 3, 0.5, staircase=True)),
          BASE / (1 + 0.5 * np.floor(STEPS / 3)))


def test_linear_cosine_closed_form():
    steps, periods, alpha, beta = 20, 1.5, 0.1, 0.01
    got = graphfront_lrs(opt.LinearCosineScheduler(0.1, steps, num_periods=periods, alpha=alpha, beta=beta))
    t = np.minimum(STEPS, steps)
    want = BASE * ((alpha + (steps - t) / steps) * 0.5 * (1 + np.cos(2 * np.pi * periods * t / steps)) + beta)
    close(got, want)


def test_piecewise_constant_boundaries_are_inclusive_like_tensorflow():
    got = graphfront_lrs(opt.PiecewiseConstantScheduler([3, 10], [0.3, 0.2, 0.05]))
    close(got, np.array([0.3] * 4 + [0.2] * 7 + [0.05] * (N - 11)))   # values are double fields
    assert got[3] == 0.3 and got[4] == 0.2 and got[10] == 0.2 and got[11] == 0.05
    # torch's MultiStepLR switches one step earlier: milestones + 1 give the same curve
    close(graphfront_lrs(opt.PiecewiseConstantScheduler([3, 10], [0.1, 0.01, 0.001])),
          torch_lrs(0.1, lambda o: tls.MultiStepLR(o, milestones=[4, 11], gamma=0.1)))


def test_piecewise_scaling_scales_the_base_lr():
    got = graphfront_lrs(opt.PiecewiseScalingScheduler(0.1, [4, 9], [0.5, 0.1]))
    idx = np.searchsorted([4, 9], STEPS, side="left")
    close(got, BASE * np.array([1.0, 0.5, 0.1])[idx])
    got = graphfront_lrs(opt.PiecewiseScalingScheduler(0.1, [4, 9], 0.3))   # scalar scale after every boundary
    close(got, BASE * np.array([1.0, 0.3, 0.3])[idx])
    conf = schedule_conf(opt.PiecewiseScalingScheduler(0.1, [4, 9], 0.3)).learning_rate_decay.piecewise_scaling_conf
    assert list(conf.scales) == pytest.approx([1.0, 0.3, 0.3])


@pytest.mark.parametrize("kind", ["step_conf", "multi_step_conf", "cosine_annealing_conf"])
def test_proto_only_decays_match_torch(kind):
    conf = op_conf_pb2.LearningRateScheduleOpConf(train_step="s/out", out="out", learning_rate=0.1)
    d = getattr(conf.learning_rate_decay, kind)
    if kind == "step_conf":
        d.step_size, d.gamma = 3, 0.5
        want = torch_lrs(BASE, lambda o: tls.StepLR(o, step_size=3, gamma=0.5))
    elif kind == "multi_step_conf":
        d.milestones.extend([2, 5, 11])
        d.gamma = 0.3
        want = torch_lrs(BASE, lambda o: tls.MultiStepLR(o, milestones=[2, 5, 11], gamma=0.3))
    else:
        d.t_max, d.eta_min = 8, 0.01
        want = torch_lrs(BASE, lambda o: tls.CosineAnnealingLR(o, T_max=8, eta_min=0.01))
    close([learning_rate_at(conf, s) for s in range(N)], want)


# ------------------------------------------------------------------ warmup

def test_linear_warmup_without_decay_matches_torch_linear_lr():
    got = graphfront_lrs(opt.PiecewiseConstantScheduler([], [0.1], warmup=opt.warmup.linear(6, 0.2)))
    close(got, torch_lrs(BASE, lambda o: tls.LinearLR(o, start_factor=0.2, end_factor=1.0, total_iters=6)))


def test_constant_warmup_without_decay_matches_torch_constant_lr():
    got = graphfront_lrs(opt.PiecewiseConstantScheduler([], [0.1], warmup=opt.warmup.constant(5, 0.1)))
    close(got, torch_lrs(BASE, lambda o: tls.ConstantLR(o, factor=0.1, total_iters=5)))


@pytest.mark.parametrize("warm", ["linear", "constant"])
def test_warmup_then_decay_at_the_raw_train_step(warm):
    w = opt.warmup.linear(5, 0.0) if warm == "linear" else opt.warmup.constant(5, 0.25)
    got = graphfront_lrs(opt.CosineScheduler(0.1, 20, warmup=w))
    warm_ref = torch_lrs(BASE, lambda o: tls.LinearLR(o, start_factor=1e-12, end_factor=1.0, total_iters=5)) \
        if warm == "linear" else torch_lrs(BASE, lambda o: tls.ConstantLR(o, factor=0.25, total_iters=5))
    decay_ref = torch_lrs(BASE, lambda o: tls.CosineAnnealingLR(o, T_max=20), n=21)
    decay_ref = np.concatenate([decay_ref, np.zeros(N - 21)])
    want = np.where(STEPS < 5, warm_ref, decay_ref)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    # the decay is not shifted by the warmup: step 5 is already cos(pi * 5 / 20)
    assert got[5] == pytest.approx(BASE * 0.5 * (1 + math.cos(math.pi * 5 / 20)))


def test_exponential_with_linear_warmup():
    got = graphfront_lrs(opt.ExponentialScheduler(0.1, 2, 0.5, warmup=opt.warmup.linear(4, 0.5)))
    want = np.where(STEPS < 4, BASE * (0.5 + 0.5 * STEPS / 4), BASE * 0.5 ** (STEPS / 2))
    close(got, want)


# ------------------------------------------------------------------ what a train job applies

def _applied_lrs(scheduler, n):
    """Run n train steps with loss = sum(w) (gradient 1) and read lr_t = w_t - w_{t+1}."""
    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((1,), dtype=flow.float64)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (1,), dtype=flow.float64, initializer=flow.zeros_initializer())
            loss = flow.math.reduce_sum(w + x)
        flow.optimizer.SGD(scheduler, momentum=0).minimize(loss)
        return loss

    values = [0.0]
    for _ in range(n):
        train(np.zeros((1,), np.float64))
        values.append(float(flow.get_all_variables()["w"].numpy()[0]))
    return -np.diff(values)


@pytest.mark.parametrize("name", ["cosine_linear_warmup", "polynomial_constant_warmup", "natural_exp", "piecewise"])
def test_train_job_applies_the_schedule_step_by_step(name):
    n = 14
    s = np.arange(n, dtype=np.float64)
    if name == "cosine_linear_warmup":
        sched = opt.CosineScheduler(0.1, 10, alpha=0.1, warmup=opt.warmup.linear(3, 0.1))
        cos = BASE * (0.9 * 0.5 * (1 + np.cos(np.pi * np.minimum(s, 10) / 10)) + 0.1)
        want = np.where(s < 3, BASE * (0.1 + 0.9 * s / 3), cos)
    elif name == "polynomial_constant_warmup":
        sched = opt.PolynomialScheduler(0.1, 8, end_learning_rate=0.001, warmup=opt.warmup.constant(2, 0.5))
        end = f32(0.001)
        want = np.where(s < 2, BASE * 0.5, (BASE - end) * (1 - np.minimum(s, 8) / 8) + end)
    elif name == "natural_exp":
        sched = opt.NaturalExpScheduler(0.1, 4, 0.7)
        want = BASE * np.exp(-0.7 * s / 4)
    else:
        sched = opt.PiecewiseConstantScheduler([2, 6], [0.3, 0.1, 0.02])
        want = np.array([0.3] * 3 + [0.1] * 4 + [0.02] * (n - 7))
    got = _applied_lrs(sched, n)
    np.testing.assert_allclose(got, want, rtol=1e-6)   # the LR blob is float32
    np.testing.assert_array_equal(flow.get_all_variables()["System-Train-TrainStep-train"].numpy(), [n])


# ------------------------------------------------------------------ API and errors

def test_deprecated_polynomial_alias_warns_and_builds_the_same_conf():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = opt.PolynomialSchduler(0.1, 10, power=2.0)
    assert any(issubclass(w.category, DeprecationWarning) and "PolynomialScheduler" in str(w.message) for w in caught)
    assert schedule_conf(old) == schedule_conf(opt.PolynomialScheduler(0.1, 10, power=2.0))


def test_scheduler_confs_use_oneflow_fields_and_defaults():
    c = schedule_conf(opt.PolynomialScheduler(0.1, 10)).learning_rate_decay.polynomial_conf
    assert (c.decay_batches, c.end_learning_rate, c.power, c.cycle) == (10, 0.0001, 1.0, False)
    c = schedule_conf(opt.LinearCosineScheduler(0.1, 10)).learning_rate_decay.linear_cosine_conf
    assert (c.num_periods, c.alpha, c.beta) == (0.5, 0.0, 0.001)
    c = schedule_conf(opt.CosineScheduler(0.2, 7, warmup=opt.warmup.linear(3, 0.5)))
    assert c.warmup_conf.linear_conf.warmup_batches == 3 and c.warmup_conf.linear_conf.start_multiplier == 0.5
    assert c.learning_rate == pytest.approx(0.2) and c.learning_rate_decay.cosine_conf.decay_batches == 7
    w = opt.warmup.constant(4, 0.3)
    assert w.constant_conf.warmup_batches == 4 and w.constant_conf.multiplier == pytest.approx(0.3)
    oc = job_conf_pb2.OptimizerConf()
    opt.CustomScheduler("lr_op/out_0").SetLrFieldsInOptimizerConf(oc)
    assert oc.learning_rate_lbn == "lr_op/out_0" and not oc.HasField("base_learning_rate")


def test_scheduler_argument_errors():
    with pytest.raises(ValueError, match="CosineScheduler: steps expects a positive int, received 0"):
        opt.CosineScheduler(0.1, 0)
    with pytest.raises(ValueError, match=r"len\(values\) must be len\(boundaries\) \+ 1 = 2"):
        opt.PiecewiseConstantScheduler([5], [0.1])
    with pytest.raises(ValueError, match="boundaries must be strictly increasing"):
        opt.PiecewiseConstantScheduler([5, 3], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"len\(scale\) must equal len\(boundaries\) = 2"):
        opt.PiecewiseScalingScheduler(0.1, [2, 4], [0.5])
    with pytest.raises(ValueError, match="warmup.linear: start_multiplier must be <= 1.0, received 1.5"):
        opt.warmup.linear(3, 1.5)
    with pytest.raises(ValueError, match="warmup.constant: steps expects an int >= 0, received -1"):
        opt.warmup.constant(-1, 0.5)
    with pytest.raises(TypeError, match="ExponentialScheduler: base_lr expects a finite number, received '0.1'"):
        opt.ExponentialScheduler("0.1", 3, 0.5)
    with pytest.raises(TypeError, match="warmup expects flow.optimizer.warmup.constant"):
        opt.CosineScheduler(0.1, 3, warmup=0.5)
    with pytest.raises(TypeError, match="CustomScheduler: lbn expects a blob or a logical blob name"):
        opt.CustomScheduler(0.1)


def test_learning_rate_at_rejects_invalid_confs():
    conf = op_conf_pb2.LearningRateScheduleOpConf(train_step="s/out", out="out", learning_rate=0.1)
    conf.learning_rate_decay.exponential_conf.decay_batches = 0
    conf.learning_rate_decay.exponential_conf.decay_rate = 0.5
    with pytest.raises(ValueError, match="exponential_conf: decay_batches must be > 0, received 0"):
        learning_rate_at(conf, 3)
    conf = op_conf_pb2.LearningRateScheduleOpConf(train_step="s/out", out="out", learning_rate=0.1)
    conf.learning_rate_decay.piecewise_constant_conf.boundaries.extend([1, 2])
    conf.learning_rate_decay.piecewise_constant_conf.values.extend([0.1])
    with pytest.raises(ValueError, match=r"expects len\(boundaries\) \+ 1 = 3 values, received 1"):
        learning_rate_at(conf, 0)


def test_a_custom_lr_blob_that_is_missing_from_the_job_is_a_build_error():
    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        w = flow.get_variable("w", (2,), initializer=flow.zeros_initializer())
        loss = flow.math.reduce_sum(x * w)
        flow.optimizer.SGD(flow.optimizer.CustomScheduler("nowhere/out_0"), momentum=0).minimize(loss)
        return loss

    with pytest.raises(JobBuildError, match="learning_rate_lbn 'nowhere/out_0' \\(CustomScheduler\\) is not a blob"):
        train(np.zeros((2,), np.float32))


def test_a_negative_learning_rate_is_accepted_and_ascends_as_oneflow_does():
    """OneFlow puts no sign check on a scheduler's LR (its SSP test trains with -10): the
    SGD step w - lr * grad then moves up the gradient."""
    flow.clear_default_session()

    @flow.global_function(type="train")
    def job() -> tp.Numpy:
        w = flow.get_variable("w", (3,), initializer=flow.constant_initializer(1.0))
        loss = flow.math.reduce_sum(w * w)
        opt.SGD(opt.PiecewiseConstantScheduler([], [-0.5]), momentum=0).minimize(loss)
        return loss

    job()
    np.testing.assert_allclose(flow.experimental.get_interface_blob_value("w"), 1.0 + 0.5 * 2.0 * 1.0)
    with pytest.raises(TypeError):
        opt.PiecewiseConstantScheduler([], ["0.1"])
