"""System ops: the ``OperatorConf`` oneof members that are not ``user_conf``.

These are OneFlow's legacy ops that a single-client job contains besides user ops
(``shared/reference/user_ops.md`` §3): interface ops (``input_conf``,
``variable_conf``, ``return_conf``, ``foreign_watch_conf``) and the helpers that job
completion adds (``identity_conf``, ``constant_like_conf``,
``learning_rate_schedule_conf``). Each is defined once here, keyed by its conf field
name: which conf fields hold input lbns, which field names the output, how the output
BlobDesc is inferred and which torch kernel computes it. Interface ops have no kernel:
the runtime binds them to feeds, the variable store, fetches and watch handlers.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework.errors import OpCheckError


@dataclasses.dataclass
class SystemOpDef:
    conf_name: str
    input_fields: tuple          # conf fields holding input lbns (string or repeated string)
    output_field: Optional[str]  # conf field naming the single output blob, or None
    infer: Callable              # (conf, {field: TensorDesc}, job_conf) -> (shape, dtype) or None
    kernel: Optional[Callable] = None   # (conf) -> callable(*inputs) -> tensor
    interface: bool = False
    grad_pass_through: Optional[str] = None  # input field whose grad is the output grad
    view: bool = False           # output may alias the input


SYSTEM_OPS: dict = {}


def system_op(conf_name, input_fields=(), output_field="out", *, infer, kernel=None,
              interface=False, grad_pass_through=None, view=False):
    SYSTEM_OPS[conf_name] = SystemOpDef(conf_name, tuple(input_fields), output_field, infer,
                                        kernel, interface, grad_pass_through, view)


def _like(field):
    return lambda conf, ins, job_conf: (ins[field].shape, ins[field].dtype)


def _shape_of(proto_shape):
    return tuple(int(d) for d in proto_shape.dim)


def _input_infer(conf, ins, job_conf):
    bc = conf.blob_conf
    if not (bc.HasField("shape") and bc.HasField("data_type")):
        raise OpCheckError("input_conf.blob_conf needs shape and data_type")
    return _shape_of(bc.shape), _dt.from_proto(bc.data_type)


def _variable_infer(conf, ins, job_conf):
    data_type = conf.data_type if conf.HasField("data_type") else job_conf.default_data_type
    return _shape_of(conf.shape), _dt.from_proto(data_type)


system_op("input_conf", (), infer=_input_infer, interface=True)
system_op("variable_conf", (), infer=_variable_infer, interface=True)
system_op("return_conf", ("in",), infer=_like("in"), interface=True)
system_op("foreign_watch_conf", ("in",), None, infer=lambda conf, ins, jc: None, interface=True)
system_op("identity_conf", ("in",), infer=_like("in"), kernel=lambda conf: (lambda x: x),
          grad_pass_through="in", view=True)


def _constant_like_infer(conf, ins, job_conf):
    dtype = _dt.from_proto(conf.data_type) if conf.HasField("data_type") else ins["like"].dtype
    return ins["like"].shape, dtype


def _constant_like_kernel(conf):
    value = conf.int_operand if conf.WhichOneof("scalar_operand") == "int_operand" else conf.float_operand
    dtype = _dt.from_proto(conf.data_type).torch if conf.HasField("data_type") else None
    return lambda like: torch.full_like(like, value, dtype=dtype)


system_op("constant_like_conf", ("like",), infer=_constant_like_infer, kernel=_constant_like_kernel)


# ---------------------------------------------------------------- learning-rate schedule

def learning_rate_at(conf, step: int) -> float:
    """Learning rate of a ``LearningRateScheduleOpConf`` at train step ``step``.

    Formulas follow the meaning of OneFlow's ``LearningRateDecayConf`` and
    ``WarmupConf`` fields (``shared/reference/protos.md`` §4); warmup applies while
    ``step < warmup_batches`` and the decay is evaluated on the post-warmup step count.
    """
    base = conf.learning_rate
    lr = base
    decay = conf.learning_rate_decay if conf.HasField("learning_rate_decay") else None
    warm = conf.warmup_conf if conf.HasField("warmup_conf") else None
    warm_steps = 0
    if warm is not None:
        kind = warm.WhichOneof("type")
        w = getattr(warm, kind)
        warm_steps = w.warmup_batches
        if step < warm_steps:
            if kind == "constant_conf":
                return base * w.multiplier
            frac = step / warm_steps
            return base * (w.start_multiplier + (1.0 - w.start_multiplier) * frac)
    s = step - warm_steps if warm is not None else step
    if decay is not None:
        kind = decay.WhichOneof("type")
        d = getattr(decay, kind)
        if kind == "piecewise_constant_conf":
            idx = sum(1 for b in d.boundaries if s >= b)
            lr = d.values[idx] if d.values else base
        elif kind == "piecewise_scaling_conf":
            idx = sum(1 for b in d.boundaries if s >= b)
            lr = base * (d.scales[idx - 1] if idx > 0 else 1.0)
        elif kind == "cosine_conf":
            t = min(s, d.decay_batches)
            cosine = 0.5 * (1 + math.cos(math.pi * t / d.decay_batches))
            lr = base * ((1 - d.alpha) * cosine + d.alpha)
        elif kind == "cosine_annealing_conf":
            t = s % (2 * d.t_max) if d.t_max else 0
            lr = d.eta_min + (base - d.eta_min) * (1 + math.cos(math.pi * t / d.t_max)) / 2
        elif kind == "polynomial_conf":
            steps = d.decay_batches
            t = s
            if d.cycle:
                steps = steps * max(1.0, math.ceil(s / steps)) if s > 0 else steps
            else:
                t = min(s, steps)
            lr = (base - d.end_learning_rate) * (1 - t / steps) ** d.power + d.end_learning_rate
        elif kind in ("exponential_conf", "inverse_time_conf", "natural_exp_conf"):
            p = s / d.decay_batches
            if d.staircase:
                p = math.floor(p)
            if kind == "exponential_conf":
                lr = base * d.decay_rate ** p
            elif kind == "inverse_time_conf":
                lr = base / (1 + d.decay_rate * p)
            else:
                lr = base * math.exp(-d.decay_rate * p)
        elif kind == "linear_cosine_conf":
            t = min(s, d.decay_batches)
            linear = (d.decay_batches - t) / d.decay_batches
            cosine = 0.5 * (1 + math.cos(math.pi * 2 * d.num_periods * t / d.decay_batches))
            lr = base * ((d.alpha + linear) * cosine + d.beta)
        elif kind == "step_conf":
            lr = base * d.gamma ** (s // d.step_size)
        elif kind == "multi_step_conf":
            lr = base * d.gamma ** sum(1 for m in d.milestones if s >= m)
    return lr


def _lr_kernel(conf):
    def schedule(train_step):
        lr = learning_rate_at(conf, int(train_step.reshape(-1)[0]))
        return torch.tensor([lr], dtype=torch.float32, device=train_step.device)
    return schedule


system_op("learning_rate_schedule_conf", ("train_step",),
          infer=lambda conf, ins, jc: ((1,), _dt.float32), kernel=_lr_kernel)


def lookup_system(conf_name: str) -> SystemOpDef:
    try:
        return SYSTEM_OPS[conf_name]
    except KeyError:
        raise KeyError(f"unsupported system op kind {conf_name!r}; supported: "
                       f"{', '.join(sorted(SYSTEM_OPS))}") from None
