"""Optimizer pass (``Job -> Job``): train step, learning rate and model-update ops.

Mirrors OneFlow's ``AutoTrainStep``, ``AutoLearningRate`` and the optimizer half of
``GenerateBackwardAndOptimizerOpConfs`` (``shared/reference/user_ops.md`` §2.2-2.4):

* the int64 ``[1]`` variable ``System-Train-TrainStep-<job>`` with its ``-Identity``,
  ``-ScalarAdd`` and ``-Assign`` ops;
* per ``OptimizerConf``: a ``learning_rate_schedule_conf`` op
  ``System-Train-LearningRate-Scheduler_<uid>``, optional clipping by global norm,
  per-variable L1/L2 regularization, then one update op ``<V>_optimizer`` per
  trainable variable with its state variables (``<V>-momentum``, ``<V>-m`` ...).

Each optimizer kind is one entry of :data:`UPDATE_RULES`: which state variables it
needs, which op type it emits and which attrs it sets.
"""
from __future__ import annotations

import re

from graphfront.framework import dtypes as _dt
from graphfront.core import op_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError
from graphfront.ops import registry
from graphfront.ops.builder import UserOpConfBuilder, unique_str
from graphfront.passes.autograd import VARIABLE_GRAD_TAG


def _state(suffix, init=0.0, shape=None, arg=None):
    return {"suffix": suffix, "init": init, "shape": shape, "arg": arg or suffix}


def _momentum_rule(conf):
    return "momentum_update", [_state("momentum")], {"beta": conf.momentum_conf.beta}


def _adam_rule(conf, kind="adam_conf"):
    c = getattr(conf, kind)
    states = [_state("m"), _state("v"), _state("max_v")]
    return "adam_update", states, {"beta1": c.beta1, "beta2": c.beta2, "epsilon": c.epsilon,
                                   "amsgrad": c.amsgrad, "do_bias_correction": c.do_bias_correction}


def _rmsprop_rule(conf):
    c = conf.rmsprop_conf
    states = [_state("mean_square")] + ([_state("mean_gradient")] if c.centered else [])
    return "rmsprop_update", states, {"centered": c.centered, "epsilon": c.epsilon, "decay_rate": c.decay_rate}


def _lars_rule(conf):
    c = conf.lars_conf
    return "lars_update", [_state("momentum")], {"momentum_beta": c.momentum_beta, "epsilon": c.epsilon,
                                                 "lars_coefficient": c.lars_coefficient}


def _lamb_rule(conf):
    c = conf.lamb_conf
    states = [_state("m"), _state("v"), _state("beta1_t", c.beta1, (1,)), _state("beta2_t", c.beta2, (1,))]
    return "lamb_update", states, {"beta1": c.beta1, "beta2": c.beta2, "epsilon": c.epsilon}


UPDATE_RULES = {
    "naive_conf": lambda conf: ("sgd_update", [], {}),
    "momentum_conf": _momentum_rule,
    "adam_conf": _adam_rule,
    "lazy_adam_conf": lambda conf: _adam_rule(conf, "lazy_adam_conf"),
    "rmsprop_conf": _rmsprop_rule,
    "lars_conf": _lars_rule,
    "lamb_conf": _lamb_rule,
}


def _user_op(b, name, op_type, inputs, attrs=None, outputs=("out",)):
    builder = UserOpConfBuilder(name, prefix=False).Op(op_type)
    for arg, lbns in inputs.items():
        builder.Input(arg, lbns if isinstance(lbns, list) else [lbns])
    for arg in outputs:
        builder.Output(arg)
    for k, v in (attrs or {}).items():
        builder.Attr(k, v)
    added = b.add_op(builder.CheckAndComplete().op_conf)
    return [added.user_conf.output[a].s[0] for a in outputs]


def _variable(b, name, like_conf, shape, dtype, value, trainable=False):
    conf = op_conf_pb2.OperatorConf(name=name)
    vc = conf.variable_conf
    vc.out = "out"
    vc.shape.dim.extend(shape)
    vc.data_type = dtype.proto
    if dtype.is_floating_point:
        vc.initializer.constant_conf.value = value
    else:
        vc.initializer.constant_int_conf.value = int(value)
    vc.trainable = trainable
    if like_conf is not None:
        vc.nd_sbp.extend(like_conf.variable_conf.nd_sbp)
    b.add_op(conf)
    return f"{name}/out"


def _train_step(b):
    tc = b.job.job_conf.train_conf
    if tc.train_step_lbn:
        return tc.train_step_lbn
    base = f"System-Train-TrainStep-{b.job_name}"
    var = _variable(b, base, None, (1,), _dt.int64, 0)
    ident = op_conf_pb2.OperatorConf(name=f"{base}-Identity")
    setattr(ident.identity_conf, "in", var)
    ident.identity_conf.out = "out"
    b.add_op(ident)
    step = f"{ident.name}/out"
    (inc,) = _user_op(b, f"{base}-ScalarAdd", "scalar_add", {"in": step},
                      {"has_int_operand": True, "int_operand": 1})
    _user_op(b, f"{base}-Assign", "assign", {"ref": var, "value": inc}, outputs=())
    tc.train_step_lbn = step
    return step


def _learning_rate(b, opt_conf, step):
    conf = op_conf_pb2.OperatorConf(name=unique_str("System-Train-LearningRate-Scheduler_"))
    lr = conf.learning_rate_schedule_conf
    lr.train_step = step
    lr.out = "out"
    lr.learning_rate = opt_conf.base_learning_rate
    if opt_conf.HasField("learning_rate_decay"):
        lr.learning_rate_decay.CopyFrom(opt_conf.learning_rate_decay)
    if opt_conf.HasField("warmup_conf"):
        lr.warmup_conf.CopyFrom(opt_conf.warmup_conf)
    b.add_op(conf)
    opt_conf.learning_rate_lbn = f"{conf.name}/out"
    return opt_conf.learning_rate_lbn


def _clip_by_global_norm(b, grads, clip):
    """Scale every grad by ``min(1, clip_norm / global_norm)`` (OneFlow's clip_conf).

    ``global_norm = sqrt(sum_v sum(g_v ** 2))``; emitted as square_sum per grad,
    add_n, rsqrt, a constant_like holding clip_norm, multiply and clip to at most 1.
    """
    prefix = "System-ClipGradient-GlobalNorm-"
    sums = [_user_op(b, unique_str(prefix + "SquareSum-"), "square_sum", {"x": g}, outputs=("y",))[0]
            for g in grads.values()]
    total = sums[0] if len(sums) == 1 else _user_op(b, unique_str(prefix + "AddN-"), "add_n", {"in": sums})[0]
    (inv_norm,) = _user_op(b, unique_str(prefix + "Rsqrt-"), "rsqrt", {"x": total}, outputs=("y",))
    (scaled,) = _user_op(b, unique_str(prefix + "ScalarMul-"), "scalar_mul", {"in": inv_norm},
                         {"has_float_operand": True, "float_operand": float(clip.clip_norm)})
    (factor,) = _user_op(b, unique_str(prefix + "ClipByScalarMax-"), "clip_by_scalar_max", {"x": scaled},
                         {"floating_max": 1.0}, outputs=("y",))
    return {v: _user_op(b, unique_str(prefix + "ScalarMulByTensor-"), "scalar_mul_by_tensor",
                        {"x": g, "scalar": factor}, outputs=("y",))[0] for v, g in grads.items()}


def _weight_decay(opt_conf, var_name):
    if not opt_conf.HasField("weight_decay_conf"):
        return 0.0
    wd = opt_conf.weight_decay_conf
    kind = wd.WhichOneof("weight_decay_filter_type")
    if kind == "includes":
        hit = any(re.search(p, var_name) for p in wd.includes.pattern)
    elif kind == "excludes":
        hit = not any(re.search(p, var_name) for p in wd.excludes.pattern)
    else:
        hit = True
    return wd.weight_decay_rate if hit else 0.0


def optimizer(job):
    """Add train-step, learning-rate and update ops (see module docstring)."""
    if not job.job_conf.HasField("train_conf"):
        return job
    b = jb.JobBuilder(job)
    tc = job.job_conf.train_conf
    grads = {p.first.op_name: f"{p.second.op_name}/{p.second.blob_name}"
             for p in job.helper.tag2lbi_relations[VARIABLE_GRAD_TAG].pair}
    if not tc.optimizer_conf:
        raise JobBuildError(f"train job '{b.job_name}' has no optimizer: call "
                            "flow.optimizer.SGD(...).minimize(loss) in its body")
    with b.scope_as(b.scope.derive(device_tag=_job_device(b), calculation_pass="optimizer_pass")):
        step = _train_step(b)
    for opt_conf in tc.optimizer_conf:
        kind = opt_conf.WhichOneof("normal_mdupdt")
        if kind not in UPDATE_RULES:
            raise JobBuildError(f"optimizer kind '{kind}' is not supported; supported: {', '.join(UPDATE_RULES)}")
        op_type, states, attrs = UPDATE_RULES[kind](opt_conf)
        if not registry.has_op(op_type):
            raise JobBuildError(f"optimizer '{kind}' needs op type '{op_type}', which is not registered")
        names = [v for v in opt_conf.variable_op_names if v in grads]
        if not names:
            continue
        with b.scope_as(b.scope.derive(device_tag=_job_device(b), calculation_pass="optimizer_pass")):
            lr = _learning_rate(b, opt_conf, step)
        var_grads = {v: grads[v] for v in names}
        if opt_conf.HasField("clip_conf") and opt_conf.clip_conf.HasField("clip_by_global_norm"):
            with b.scope_of_op(names[0], "optimizer_pass"):
                var_grads = _clip_by_global_norm(b, var_grads, opt_conf.clip_conf.clip_by_global_norm)
        for var in names:
            var_conf = b.ops[var]
            desc = b.desc(f"{var}/out")
            with b.scope_of_op(var, "optimizer_pass"):
                diff = var_grads[var]
                reg = var_conf.variable_conf.regularizer
                if var_conf.variable_conf.HasField("regularizer") and reg.HasField("l1_l2_conf"):
                    (diff,) = _user_op(b, unique_str("System-RegularizeGradient-L1L2-"),
                                       "l1_l2_regularize_gradient", {"model": f"{var}/out", "model_diff": diff},
                                       {"l1": reg.l1_l2_conf.l1, "l2": reg.l1_l2_conf.l2})
                inputs = {"model": f"{var}/out", "model_diff": diff, "learning_rate": lr}
                for st in states:
                    shape = st["shape"] or desc.shape
                    inputs[st["arg"]] = _variable(b, f"{var}-{st['suffix']}", var_conf, shape, desc.dtype, st["init"])
                if op_type in ("adam_update",) and attrs.get("do_bias_correction"):
                    inputs.update(_adam_bias_correction(b, var, step, attrs))
                if op_type == "adagrad_update":
                    inputs["train_step"] = step
                _user_op(b, f"{var}_optimizer", op_type, inputs,
                         {**attrs, "weight_decay": _weight_decay(opt_conf, var)}, outputs=())
    return b.job


def _adam_bias_correction(b, var, step, attrs):
    out = {}
    for idx, beta in ((1, attrs["beta1"]), (2, attrs["beta2"])):
        name = f"{var}adam_bias_correction_factor{idx}"
        (lbn,) = _user_op(b, name, "adam_bias_correction_factor", {"train_step": step}, {"beta": beta})
        out[f"bias_correction{idx}"] = lbn
    return out


def _job_device(b):
    """Device tag for job-level ops (train step, LR): that of the first variable."""
    for op in b.job.net.op:
        if jb.op_kind(op) == "variable_conf":
            return op.device_tag
    return "cpu"
