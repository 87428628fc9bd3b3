"""Optimizer pass (``Job -> Job``): train step, learning rate and model-update ops.

Mirrors OneFlow's ``AutoTrainStep``, ``AutoLearningRate`` and the optimizer half of
``GenerateBackwardAndOptimizerOpConfs`` (v0.6.0 ``oneflow/core/job_rewriter/auto_train_step.cpp``,
``auto_learning_rate.cpp``, ``generate_backward_and_optimizer_op_confs.cpp``):

* the int64 ``[1]`` variable ``System-Train-TrainStep-<job>`` with its ``-Identity``,
  ``-ScalarAdd`` and ``-Assign`` ops (skipped when ``train_conf.train_step_lbn`` is set);
* per ``OptimizerConf``: a ``learning_rate_schedule_conf`` op
  ``System-Train-LearningRate-Scheduler_<uid>`` (unless the conf names its own
  ``learning_rate_lbn``, see below), optional clipping by global norm, per-variable
  L1/L2 regularization (``l1_l2_regularize_gradient``), then one update op
  ``<V>_optimizer`` per trainable variable with its state variables (``<V>-momentum``,
  ``<V>-m`` ...) and attr ``weight_decay`` from ``weight_decay_conf``.

Under dynamic loss scaling (``train_conf.dynamic_loss_scale_policy``) the pass also adds
the overflow count, the ``dynamic_loss_scale_schedule`` op and the ``skip_if`` input of
every update op, and the train step advances through ``assign_if_not``
(:mod:`graphfront.passes.loss_scale`).

Each optimizer kind is one :class:`UpdateRule` of :data:`UPDATE_RULES`: the op type,
its state variables and the attrs read from the ``*ModelUpdateConf``.

Deliberate difference from OneFlow v0.6.0: OneFlow's ``AutoLearningRate`` overwrites a
user-supplied ``learning_rate_lbn`` (``oneflow/core/job_rewriter/auto_learning_rate.cpp``), which breaks
``CustomScheduler``; here an ``OptimizerConf`` that sets ``learning_rate_lbn`` and no
``base_learning_rate`` uses that blob directly.
"""
from __future__ import annotations

import dataclasses
import re

from graphfront.core import job_conf_pb2, op_conf_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError
from graphfront.ops.builder import add_user_op, unique_str
from graphfront.passes import loss_scale
from graphfront.passes.autograd import VARIABLE_GRAD_TAG


@dataclasses.dataclass
class State:
    """A state variable ``<V>-<suffix>`` feeding input ``arg`` (default: the suffix)."""

    suffix: str
    init: float = 0.0
    scalar: bool = False  # shape [1] with broadcast nd_sbp (LAMB's beta*_t) instead of V's shape
    arg: str = ""

    def __post_init__(self):
        self.arg = self.arg or self.suffix


@dataclasses.dataclass
class UpdateRule:
    op_type: str
    states: list
    attrs: dict
    train_step: bool = False        # feed the train step to input 'train_step' (adagrad)
    bias_correction: bool = False   # feed adam_bias_correction_factor ops (adam with do_bias_correction)


def _adam_rule(c):
    return UpdateRule("adam_update", [State("m"), State("v"), State("max_v")],
                      {"beta1": c.beta1, "beta2": c.beta2, "epsilon": c.epsilon, "amsgrad": c.amsgrad,
                       "do_bias_correction": c.do_bias_correction},
                      bias_correction=c.do_bias_correction)


def _rmsprop_rule(c):
    states = [State("mean_square")] + ([State("mean_gradient")] if c.centered else [])
    return UpdateRule("rmsprop_update", states,
                      {"centered": c.centered, "epsilon": c.epsilon, "decay_rate": c.decay_rate})


UPDATE_RULES = {
    "naive_conf": lambda c: UpdateRule("sgd_update", [], {}),
    "momentum_conf": lambda c: UpdateRule("momentum_update", [State("momentum")], {"beta": c.beta}),
    "adam_conf": _adam_rule,
    "lazy_adam_conf": _adam_rule,
    "rmsprop_conf": _rmsprop_rule,
    "lars_conf": lambda c: UpdateRule("lars_update", [State("momentum")],
                                      {"momentum_beta": c.momentum_beta, "epsilon": c.epsilon,
                                       "lars_coefficient": c.lars_coefficient}),
    "lamb_conf": lambda c: UpdateRule("lamb_update",
                                      [State("m"), State("v"), State("beta1_t", c.beta1, scalar=True),
                                       State("beta2_t", c.beta2, scalar=True)],
                                      {"beta1": c.beta1, "beta2": c.beta2, "epsilon": c.epsilon}),
    "adagrad_conf": lambda c: UpdateRule("adagrad_update", [State("sum", c.initial_accumulator_value)],
                                         {"epsilon": c.epsilon, "lr_decay": c.lr_decay}, train_step=True),
}


def _new_variable(b, name, shape, dtype, value):
    conf = op_conf_pb2.OperatorConf(name=name)
    vc = conf.variable_conf
    vc.out = "out"
    vc.shape.dim.extend(shape)
    vc.data_type = dtype.proto
    if dtype.is_floating_point:
        vc.initializer.constant_conf.value = value
    else:
        vc.initializer.constant_int_conf.value = int(value)
    b.add_op(conf)
    return f"{name}/out"


def _state_variable(b, var, state, desc):
    """``<V>-<suffix>``: a copy of V's variable conf with a constant initializer."""
    conf = op_conf_pb2.OperatorConf()
    conf.CopyFrom(b.ops[var])
    conf.name = f"{var}-{state.suffix}"
    conf.ClearField("scope_symbol_id")
    conf.ClearField("device_tag")
    vc = conf.variable_conf
    vc.out = "out"
    vc.data_type = desc.dtype.proto
    vc.initializer.constant_conf.value = state.init
    if state.scalar:
        vc.shape.ClearField("dim")
        vc.shape.dim.append(1)
        n = len(vc.nd_sbp)
        vc.ClearField("nd_sbp")
        vc.nd_sbp.extend(["B"] * n)
    b.add_op(conf)
    return f"{conf.name}/out"


def _train_step(b, skip=None):
    tc = b.job.job_conf.train_conf
    if tc.train_step_lbn:
        if not b.has_blob(tc.train_step_lbn):
            raise JobBuildError(f"train_step_lbn '{tc.train_step_lbn}' of job '{b.job_name}' is not a blob of "
                                "the job")
        return tc.train_step_lbn
    base = f"System-Train-TrainStep-{b.job_name}"
    var = _new_variable(b, base, (1,), _dt.int64, 0)
    ident = op_conf_pb2.OperatorConf(name=f"{base}-Identity")
    setattr(ident.identity_conf, "in", var)
    ident.identity_conf.out = "out"
    b.add_op(ident)
    step = f"{ident.name}/out"
    (inc,) = add_user_op(b, f"{base}-ScalarAdd", "scalar_add", {"in": step},
                      {"has_int_operand": True, "int_operand": 1, "has_float_operand": False, "float_operand": 0.0})
    if skip is None:
        add_user_op(b, f"{base}-Assign", "assign", {"ref": var, "value": inc}, outputs=())
    else:  # dynamic loss scaling: a skipped step does not count
        add_user_op(b, f"{base}-AssignIfNot", "assign_if_not", {"ref": var, "value": inc, "condition": skip},
                 outputs=())
    tc.train_step_lbn = step
    return step


def train_step_lbn(b) -> str:
    """The train step blob of the job ``b`` builds (int64 ``(1,)``, 0 at the first step): the
    configured ``train_conf.train_step_lbn``, else ``System-Train-TrainStep-<job>``, created
    and recorded in ``train_conf`` (the optimizer pass then reuses it)."""
    return _train_step(b)


def _learning_rate(b, opt_conf, step):
    """The LR blob of one optimizer conf: a schedule op, or the conf's own ``learning_rate_lbn``."""
    if opt_conf.learning_rate_lbn and not opt_conf.HasField("base_learning_rate"):
        lbn = opt_conf.learning_rate_lbn
        if not b.has_blob(lbn):
            raise JobBuildError(f"learning_rate_lbn '{lbn}' (CustomScheduler) is not a blob of job '{b.job_name}'")
        d = b.desc(lbn)
        if d.shape != (1,) or d.dtype is not _dt.float32:
            raise JobBuildError(f"learning_rate_lbn '{lbn}' (CustomScheduler) must be a float32 blob of shape "
                                f"(1,), received {d.dtype.name} {d.shape}")
        return lbn
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
    """Scale every grad by ``min(1, clip_norm / global_norm)``, ``global_norm = sqrt(sum_v sum(g_v^2))``.

    Same factor as ``torch.nn.utils.clip_grad_norm_`` (which adds 1e-6 to the norm;
    OneFlow does not). Emitted as OneFlow does: ``multi_square_sum`` over the grads of one
    dtype (``square_sum`` for a single grad), ``add_n`` of those, ``rsqrt``, ``scalar_mul``
    by clip_norm, ``clip_by_scalar_max`` at 1 and ``scalar_mul_by_tensor`` per grad (a
    zero global norm gives rsqrt = inf, clipped to a factor of 1).
    """
    if not clip.clip_norm > 0:
        raise JobBuildError(f"grad_clipping.by_global_norm: clip_norm must be > 0, received {clip.clip_norm}")
    prefix = "System-ClipGradient-GlobalNorm-"
    sums = [add_user_op(b, unique_str(prefix + "SquareSum-"), "square_sum", {"x": gs[0]}, outputs=("y",))[0]
            if len(gs) == 1 else
            add_user_op(b, unique_str(prefix + "MultiSquareSum-"), "multi_square_sum", {"x": gs}, outputs=("y",))[0]
            for gs in loss_scale.grads_by_dtype(b, grads.values())]
    total = sums[0] if len(sums) == 1 else add_user_op(b, unique_str(prefix + "AddN-"), "add_n", {"in": sums})[0]
    (inv_norm,) = add_user_op(b, unique_str(prefix + "Rsqrt-"), "rsqrt", {"x": total}, outputs=("y",))
    (scaled,) = add_user_op(b, unique_str(prefix + "ScalarMul-"), "scalar_mul", {"in": inv_norm},
                         {"has_float_operand": True, "float_operand": float(clip.clip_norm)})
    (factor,) = add_user_op(b, unique_str(prefix + "ClipByScalarMax-"), "clip_by_scalar_max", {"x": scaled},
                         {"floating_max": 1.0}, outputs=("y",))
    return {v: add_user_op(b, unique_str(prefix + "ScalarMulByTensor-"), "scalar_mul_by_tensor",
                        {"x": g, "scalar": factor}, outputs=("y",))[0] for v, g in grads.items()}


def weight_decay_of(opt_conf, var_name) -> float:
    """``weight_decay_rate`` if ``var_name`` is selected by the conf's filter, else 0.

    ``includes``: selected when some pattern matches; ``excludes``: selected when none
    matches; no filter: every variable. Patterns are regular expressions matched
    anywhere in the name (RE2 partial match, as OneFlow).
    """
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
    if not tc.optimizer_conf and tc.HasField("model_update_conf"):
        tc.optimizer_conf.add().CopyFrom(_from_model_update_conf(tc, [v for v in grads]))
    if not tc.optimizer_conf:
        raise JobBuildError(f"train job '{b.job_name}' has no optimizer: call "
                            "flow.optimizer.SGD(...).minimize(loss) in its body (or set "
                            "FunctionConfig().train.model_update_conf)")
    owner = {}
    for i, opt_conf in enumerate(tc.optimizer_conf):
        kind = opt_conf.WhichOneof("normal_mdupdt")
        if kind not in UPDATE_RULES:
            raise JobBuildError(f"optimizer conf {i} of job '{b.job_name}': kind '{kind}' is not supported; "
                                f"supported: {', '.join(UPDATE_RULES)}")
        for v in opt_conf.variable_op_names:
            if v in owner and owner[v] != i:
                raise JobBuildError(f"variable '{v}' of job '{b.job_name}' is updated by two optimizers "
                                    f"(optimizer confs {owner[v]} and {i}); give each optimizer its own variables")
            owner[v] = i
    skip = None
    with b.scope_as(b.scope.derive(device_tag=_job_device(b), calculation_pass="optimizer_pass")):
        if loss_scale.is_dynamic(job) and grads:
            skip = loss_scale.schedule(b, list(grads.values()))
        step = _train_step(b, skip)
    bias_factors = {}
    for opt_conf in tc.optimizer_conf:
        kind = opt_conf.WhichOneof("normal_mdupdt")
        rule = UPDATE_RULES[kind](getattr(opt_conf, kind))
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
            vc = b.ops[var].variable_conf
            desc = b.desc(f"{var}/out")
            with b.scope_of_op(var, "optimizer_pass"):
                diff = var_grads[var]
                if vc.HasField("regularizer") and vc.regularizer.HasField("l1_l2_conf"):
                    reg = vc.regularizer.l1_l2_conf
                    (diff,) = add_user_op(b, unique_str("System-RegularizeGradient-L1L2-"),
                                       "l1_l2_regularize_gradient", {"model": f"{var}/out", "model_diff": diff},
                                       {"l1": reg.l1, "l2": reg.l2})
                inputs = {"model": f"{var}/out", "model_diff": diff, "learning_rate": lr}
                for st in rule.states:
                    inputs[st.arg] = _state_variable(b, var, st, desc)
                if rule.bias_correction:
                    inputs.update(_bias_correction(b, var, step, rule.attrs, bias_factors))
                if rule.train_step:
                    inputs["train_step"] = step
                if skip is not None:
                    inputs["skip_if"] = skip
                add_user_op(b, f"{var}_optimizer", rule.op_type, inputs,
                         {**rule.attrs, "weight_decay": weight_decay_of(opt_conf, var)}, outputs=())
    return b.job


def _from_model_update_conf(tc, variables):
    """The ``OptimizerConf`` of the deprecated ``train_conf.model_update_conf`` (OneFlow's
    ``FunctionConfig().train.model_update_conf``): every variable with a gradient, the
    conf's optimizer kind, LR decay, warmup, clipping and weight decay, ``primary_lr``
    (or ``primary_lr_lbn``) as the learning rate."""
    mu = tc.model_update_conf
    conf = job_conf_pb2.OptimizerConf()
    conf.variable_op_names.extend(variables)
    if tc.primary_lr_lbn:
        conf.learning_rate_lbn = tc.primary_lr_lbn
    else:
        conf.base_learning_rate = tc.primary_lr
    for field in ("learning_rate_decay", "warmup_conf", "clip_conf", "weight_decay_conf"):
        if mu.HasField(field):
            getattr(conf, field).CopyFrom(getattr(mu, field))
    kind = mu.WhichOneof("normal_mdupdt")
    if kind is None:
        raise JobBuildError("FunctionConfig().train.model_update_conf names no optimizer (naive_conf, "
                            "momentum_conf, adam_conf ...)")
    getattr(conf, kind).CopyFrom(getattr(mu, kind))
    return conf


def _bias_correction(b, var, step, attrs, cache):
    """``bias_correction1/2`` inputs: one ``adam_bias_correction_factor`` op per (beta, placement),
    named ``<V>adam_bias_correction_factor<i>`` after the first variable that needs it."""
    placement = (b.ops[var].device_tag, b.device_ids_of(var))
    out = {}
    for idx, beta in ((1, attrs["beta1"]), (2, attrs["beta2"])):
        key = (float(beta), placement)
        if key not in cache:
            (cache[key],) = add_user_op(b, f"{var}adam_bias_correction_factor{idx}", "adam_bias_correction_factor",
                                     {"train_step": step}, {"beta": beta})
        out[f"bias_correction{idx}"] = cache[key]
    return out


def _job_device(b):
    """Device tag for job-level ops (train step, LR): that of the first variable."""
    for op in b.job.net.op:
        if jb.op_kind(op) == "variable_conf":
            return op.device_tag
    return "cpu"
