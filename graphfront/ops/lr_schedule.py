"""The learning rate of a ``LearningRateScheduleOpConf`` at a train step: the kernel of the
``learning_rate_schedule_conf`` system op (:mod:`graphfront.ops.system`), also evaluated on
the host by the lowerings."""
from __future__ import annotations

import math

import torch

from graphfront.core.descriptor_compat import is_repeated


def learning_rate_at(conf, step):
    """Learning rate of a ``LearningRateScheduleOpConf`` at train step ``step`` (0-based).

    ``step``: an int (the rate is returned as a float), or a tensor of steps on any device
    (returned as a float64 tensor of its shape, computed there by torch ops only: a GPU
    evaluates the schedule without the host reading the step, in a CUDA graph too).

    OneFlow's schedule semantics (v0.6.0 ``oneflow/core/job/learning_rate_schedule_conf.proto``
    and ``oneflow/core/kernel/learning_rate_schedule_kernel.cpp``; the kinds are
    TensorFlow's ``tf.compat.v1.train.*_decay`` family, which OneFlow's conf mirrors):

    * **warmup first**: while ``step < warmup_batches`` the LR is the *base* LR times the
      warmup multiplier (constant: ``multiplier``; linear: ``start_multiplier + (1 -
      start_multiplier) * step / warmup_batches``) and the decay is ignored;
    * **then decay on the raw step**: from ``warmup_batches`` on, the decay is evaluated
      at ``step`` itself, not at ``step - warmup_batches`` (OneFlow's schedule kernel
      picks warmup *or* decay for a step, both on the same train step, as the BERT
      recipe it follows: warmup over the first N steps of a decay that started at 0).

    With ``b`` = base LR, ``s`` = step, ``D`` = ``decay_batches``:

    ========================  ===================================================================
    kind                      learning rate
    ========================  ===================================================================
    exponential               ``b * rate ** p``, ``p = s / D`` (``floor`` if staircase)
    inverse_time              ``b / (1 + rate * p)``
    natural_exp               ``b * exp(-rate * p)``
    piecewise_constant        ``values[i]``, ``i`` = number of boundaries ``< s`` (``s <=
                              boundaries[0]`` -> ``values[0]``; TF's convention)
    piecewise_scaling         ``b * scales[i]``, same ``i`` (``scales`` has one entry more than
                              ``boundaries``; single-client prepends 1)
    polynomial                ``(b - end) * (1 - t / D') ** power + end``; ``t = min(s, D)``,
                              ``D' = D``; with cycle ``t = s``, ``D' = D * ceil(s / D)`` (1 at s = 0)
    cosine                    ``b * ((1 - alpha) * 0.5 * (1 + cos(pi * t / D)) + alpha)``, ``t = min(s, D)``
    linear_cosine             ``b * ((alpha + (D - t) / D) * 0.5 * (1 + cos(2 pi num_periods t / D)) + beta)``
    cosine_annealing          ``eta_min + (b - eta_min) * (1 + cos(pi * s / t_max)) / 2`` (torch's
                              ``CosineAnnealingLR`` closed form)
    step                      ``b * gamma ** floor(s / step_size)``
    multi_step                ``b * gamma ** (number of milestones <= s)``
    ========================  ===================================================================

    Raises:
        ValueError: a conf that OneFlow's kernel rejects (``decay_batches``/``t_max``/
            ``step_size`` <= 0, ``warmup_batches`` < 0, list lengths that do not match).
    """
    if isinstance(step, torch.Tensor):
        return _schedule(conf, step.to(torch.float64), _ON_DEVICE)
    return float(_schedule(conf, float(step), _ON_HOST))


class PlainConf:
    """A protobuf message's fields as plain Python values, with the message's ``HasField``
    and ``WhichOneof``: :func:`learning_rate_at` reads it as it reads the message, and
    TorchDynamo traces those reads (it cannot trace protobuf's objects)."""

    def __init__(self, msg):
        self._present = {f.name for f, _ in msg.ListFields()}
        self._oneofs = {o.name: msg.WhichOneof(o.name) for o in msg.DESCRIPTOR.oneofs}
        for f in msg.DESCRIPTOR.fields:
            value = getattr(msg, f.name)
            if f.message_type is None:
                value = list(value) if is_repeated(f) else value
            else:
                value = [PlainConf(v) for v in value] if is_repeated(f) else PlainConf(value)
            setattr(self, f.name, value)

    def HasField(self, name):  # noqa: N802 - the protobuf method's name
        return name in self._present

    def WhichOneof(self, name):  # noqa: N802 - the protobuf method's name
        return self._oneofs[name]


class _OnHost:
    """The operations of :func:`_schedule` on Python floats (the host's step)."""
    floor, ceil, cos, exp = math.floor, math.ceil, math.cos, math.exp
    pow = staticmethod(lambda a, b: a ** b)
    where = staticmethod(lambda cond, a, b: a if cond else b)
    at_most = staticmethod(min)
    full_like = staticmethod(lambda s, value: value)
    number = staticmethod(float)


class _OnDevice:
    """The same operations on float64 tensors, on their device (nothing read on the host)."""
    floor, ceil, cos, exp, pow, where = torch.floor, torch.ceil, torch.cos, torch.exp, torch.pow, torch.where
    at_most = staticmethod(lambda s, m: torch.clamp(s, max=m))
    full_like = staticmethod(torch.full_like)
    number = staticmethod(lambda cond: cond.to(torch.float64))


_ON_HOST, _ON_DEVICE = _OnHost(), _OnDevice()


def _schedule(conf, s, m):
    """:func:`learning_rate_at` at step ``s`` (a float, or a float64 tensor) with the
    operations ``m`` (:class:`_OnHost` / :class:`_OnDevice`)."""
    base = float(conf.learning_rate)
    lr = _decayed(conf, s, base, m)
    if conf.HasField("warmup_conf"):
        kind = conf.warmup_conf.WhichOneof("type")
        if kind is not None:
            w = getattr(conf.warmup_conf, kind)
            if w.warmup_batches < 0:  # 0: no warmup (no step is below it), as OneFlow's kernel
                raise ValueError(f"warmup {kind}: warmup_batches must be >= 0, received {w.warmup_batches}")
            if w.warmup_batches > 0:
                if kind == "constant_conf":
                    warm = base * w.multiplier
                else:
                    warm = base * (w.start_multiplier + (1.0 - w.start_multiplier) * s / w.warmup_batches)
                lr = m.where(s < w.warmup_batches, warm, lr)
    return lr


def _decayed(conf, s, base, m):
    """The decay of :func:`_schedule` (no warmup)."""
    if not conf.HasField("learning_rate_decay"):
        return m.full_like(s, base)
    decay = conf.learning_rate_decay
    kind = decay.WhichOneof("type")
    if kind is None:
        return m.full_like(s, base)
    d = getattr(decay, kind)

    def positive(field):
        value = getattr(d, field)
        if value <= 0:
            raise ValueError(f"learning-rate decay {kind}: {field} must be > 0, received {value}")
        return float(value)

    def pick(boundaries, values, what):
        """``values[i]``, ``i`` the number of boundaries below the step (exact values)."""
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"learning-rate decay {kind}: expects len(boundaries) + 1 = {len(boundaries) + 1} "
                             f"{what}, received {len(values)}")
        i = m.full_like(s, 0.0)
        for bound in boundaries:
            i = i + m.number(s > bound)
        out = m.full_like(s, float(values[0]))
        for j in range(1, len(values)):
            out = m.where(i == j, float(values[j]), out)
        return out

    if kind in ("exponential_conf", "inverse_time_conf", "natural_exp_conf"):
        p = s / positive("decay_batches")
        if d.staircase:
            p = m.floor(p)
        if kind == "exponential_conf":
            return base * m.pow(float(d.decay_rate), p)
        if kind == "inverse_time_conf":
            return base / (1.0 + d.decay_rate * p)
        return base * m.exp(-d.decay_rate * p)
    if kind == "piecewise_constant_conf":
        return pick(d.boundaries, d.values, "values")
    if kind == "piecewise_scaling_conf":
        return base * pick(d.boundaries, d.scales, "scales")
    if kind == "polynomial_conf":
        total = positive("decay_batches")
        if d.cycle:
            t = s
            total = m.where(s > 0, total * m.ceil(s / total), total)
        else:
            t = m.at_most(s, total)
        return (base - d.end_learning_rate) * (1.0 - t / total) ** d.power + d.end_learning_rate
    if kind == "cosine_conf":
        total = positive("decay_batches")
        t = m.at_most(s, total)
        return base * ((1.0 - d.alpha) * 0.5 * (1.0 + m.cos(math.pi * t / total)) + d.alpha)
    if kind == "linear_cosine_conf":
        total = positive("decay_batches")
        t = m.at_most(s, total)
        linear = (total - t) / total
        cosine = 0.5 * (1.0 + m.cos(math.pi * 2.0 * d.num_periods * t / total))
        return base * ((d.alpha + linear) * cosine + d.beta)
    if kind == "cosine_annealing_conf":
        t_max = positive("t_max")
        return d.eta_min + (base - d.eta_min) * (1.0 + m.cos(math.pi * s / t_max)) / 2.0
    if kind == "step_conf":
        return base * m.pow(float(d.gamma), m.floor(s / positive("step_size")))
    if kind == "multi_step_conf":
        count = m.full_like(s, 0.0)
        for milestone in d.milestones:
            count = count + m.number(s >= milestone)
        return base * m.pow(float(d.gamma), count)
    raise ValueError(f"unsupported learning-rate decay kind {kind!r}")
