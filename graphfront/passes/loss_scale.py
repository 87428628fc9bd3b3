"""Dynamic loss scaling, the ops the autograd and optimizer passes add for
``train_conf.dynamic_loss_scale_policy`` (``flow.optimizer.loss_scale.dynamic_loss_scale``).

As OneFlow's ``DynamicLossScaleSchedulePass`` and ``GenerateBackwardAndOptimizerOpConfs``
(``oneflow/core/job_rewriter/dynamic_loss_scale_schedule_pass.cpp``, ``autograd.cpp``):

* variables ``System-Train-DynamicLossScale-<job>-LossScale`` (float32 ``(1,)``, initial
  value ``initial_loss_scale``) and ``…-GoodStepCounter`` (int64 ``(1,)``, 0);
* autograd multiplies each loss's seed gradient by the scale (``scalar_mul_by_tensor``)
  and every variable gradient by ``reciprocal(scale)``;
* the optimizer pass counts the non-finite elements of all variable gradients
  (``multi_count_not_finite``), feeds that count to every update op as ``skip_if`` (a
  step with an overflow changes no variable), advances the train step with
  ``assign_if_not`` (skipped steps do not count), and updates the scale with
  ``dynamic_loss_scale_schedule`` (halve on overflow, multiply by ``multiplier`` after
  ``increment_period`` finite steps; see ``graphfront.ops.amp_ops``).
"""
from __future__ import annotations

from graphfront.core import op_conf_pb2
from graphfront.framework import dtypes as _dt
from graphfront.ops.builder import add_user_op


def is_dynamic(job) -> bool:
    tc = job.job_conf.train_conf
    return job.job_conf.HasField("train_conf") and tc.HasField("dynamic_loss_scale_policy")


def _prefix(b) -> str:
    return f"System-Train-DynamicLossScale-{b.job_name}"


def _user_op(b, name, op_type, inputs, attrs=None, outputs=("out",)):
    lbns = add_user_op(b, b.unique_op_name(name), op_type, inputs, attrs, outputs)
    return lbns[0] if lbns else None


def _variable(b, name, dtype, value):
    if name not in b.ops:
        conf = op_conf_pb2.OperatorConf(name=name)
        vc = conf.variable_conf
        vc.out = "out"
        vc.shape.dim.append(1)
        vc.data_type = dtype.proto
        vc.trainable = False
        if dtype.is_floating_point:
            vc.initializer.constant_conf.value = value
        else:
            vc.initializer.constant_int_conf.value = int(value)
        b.add_op(conf)
    return f"{name}/out"


def loss_scale_variable(b) -> str:
    """The lbn of the loss-scale variable (created on first use)."""
    policy = b.job.job_conf.train_conf.dynamic_loss_scale_policy
    return _variable(b, f"{_prefix(b)}-LossScale", _dt.float32, policy.initial_loss_scale)


def _as(b, lbn, dtype):
    if b.desc(lbn).dtype is dtype:
        return lbn
    return _user_op(b, f"{lbn.split('/')[0]}-Cast-{dtype.name}", "cast", {"in": lbn}, {"dtype": dtype})


def scale_seed(b, seed, scale) -> str:
    """``seed * scale`` (the loss gradient seed under dynamic loss scaling)."""
    return _user_op(b, f"{seed.split('/')[0]}-LossScale", "scalar_mul_by_tensor",
                    {"x": seed, "scalar": _as(b, scale, b.desc(seed).dtype)}, outputs=("y",))


def unscale(b, grad, inv_scale) -> str:
    """``grad * (1 / scale)`` for one variable gradient."""
    return _user_op(b, f"{_prefix(b)}-Unscale", "scalar_mul_by_tensor",
                    {"x": grad, "scalar": _as(b, inv_scale, b.desc(grad).dtype)}, outputs=("y",))


def inverse_scale(b, scale) -> str:
    return _user_op(b, f"{_prefix(b)}-Reciprocal", "reciprocal", {"x": scale}, outputs=("y",))


def grads_by_dtype(b, grads) -> list:
    """The gradient lbns ``grads`` in lists of one dtype each (a multi-tensor op's inputs
    share one), in first-seen order."""
    groups = {}
    for g in grads:
        groups.setdefault(b.desc(g).dtype.name, []).append(g)
    return list(groups.values())


def schedule(b, grads) -> str:
    """Count the non-finite elements of ``grads`` (lbns), add the schedule op; return the
    int64 ``(1,)`` count (the ``skip_if`` of the update ops)."""
    policy = b.job.job_conf.train_conf.dynamic_loss_scale_policy
    prefix = _prefix(b)
    counts = [_user_op(b, f"{prefix}-CountNotFinite", "multi_count_not_finite", {"x": gs}, outputs=("y",))
              for gs in grads_by_dtype(b, grads)]
    count = counts[0] if len(counts) == 1 else _user_op(b, f"{prefix}-CountNotFinite-AddN", "add_n", {"in": counts})
    counter = _variable(b, f"{prefix}-GoodStepCounter", _dt.int64, 0)
    _user_op(b, f"{prefix}-Schedule", "dynamic_loss_scale_schedule",
             {"count_not_finite": count, "loss_scale": loss_scale_variable(b), "good_step_counter": counter},
             {"increment_period": int(policy.increment_period), "multiplier": float(policy.multiplier)},
             outputs=())
    return count


__all__ = ["is_dynamic", "loss_scale_variable", "scale_seed", "unscale", "inverse_scale", "grads_by_dtype",
           "schedule"]
