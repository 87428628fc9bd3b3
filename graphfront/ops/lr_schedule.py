"""The learning rate of a ``LearningRateScheduleOpConf`` at a train step: the kernel of the
``learning_rate_schedule_conf`` system op (:mod:`graphfront.ops.system`), also evaluated on
the host by the lowerings."""
from __future__ import annotations

import math


def learning_rate_at(conf, step: int) -> float:
    """Learning rate of a ``LearningRateScheduleOpConf`` at train step ``step`` (0-based).

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
    base = float(conf.learning_rate)
    if conf.HasField("warmup_conf"):
        kind = conf.warmup_conf.WhichOneof("type")
        if kind is not None:
            w = getattr(conf.warmup_conf, kind)
            if w.warmup_batches < 0:  # 0: no warmup (no step is below it), as OneFlow's kernel
                raise ValueError(f"warmup {kind}: warmup_batches must be >= 0, received {w.warmup_batches}")
            if step < w.warmup_batches:
                if kind == "constant_conf":
                    return base * w.multiplier
                return base * (w.start_multiplier + (1.0 - w.start_multiplier) * step / w.warmup_batches)
    if not conf.HasField("learning_rate_decay"):
        return base
    decay = conf.learning_rate_decay
    kind = decay.WhichOneof("type")
    if kind is None:
        return base
    d = getattr(decay, kind)
    s = float(step)

    def positive(field):
        value = getattr(d, field)
        if value <= 0:
            raise ValueError(f"learning-rate decay {kind}: {field} must be > 0, received {value}")
        return float(value)

    def interval(boundaries, n_values, what):
        if n_values != len(boundaries) + 1:
            raise ValueError(f"learning-rate decay {kind}: expects len(boundaries) + 1 = {len(boundaries) + 1} "
                             f"{what}, received {n_values}")
        return sum(1 for bound in boundaries if step > bound)

    if kind in ("exponential_conf", "inverse_time_conf", "natural_exp_conf"):
        p = s / positive("decay_batches")
        if d.staircase:
            p = math.floor(p)
        if kind == "exponential_conf":
            return base * d.decay_rate ** p
        if kind == "inverse_time_conf":
            return base / (1.0 + d.decay_rate * p)
        return base * math.exp(-d.decay_rate * p)
    if kind == "piecewise_constant_conf":
        return float(d.values[interval(d.boundaries, len(d.values), "values")])
    if kind == "piecewise_scaling_conf":
        return base * d.scales[interval(d.boundaries, len(d.scales), "scales")]
    if kind == "polynomial_conf":
        total = positive("decay_batches")
        if d.cycle:
            t = s
            total = total * (math.ceil(s / total) if s > 0 else 1.0)
        else:
            t = min(s, total)
        return (base - d.end_learning_rate) * (1.0 - t / total) ** d.power + d.end_learning_rate
    if kind == "cosine_conf":
        total = positive("decay_batches")
        t = min(s, total)
        return base * ((1.0 - d.alpha) * 0.5 * (1.0 + math.cos(math.pi * t / total)) + d.alpha)
    if kind == "linear_cosine_conf":
        total = positive("decay_batches")
        t = min(s, total)
        linear = (total - t) / total
        cosine = 0.5 * (1.0 + math.cos(math.pi * 2.0 * d.num_periods * t / total))
        return base * ((d.alpha + linear) * cosine + d.beta)
    if kind == "cosine_annealing_conf":
        t_max = positive("t_max")
        return d.eta_min + (base - d.eta_min) * (1.0 + math.cos(math.pi * s / t_max)) / 2.0
    if kind == "step_conf":
        return base * d.gamma ** math.floor(s / positive("step_size"))
    if kind == "multi_step_conf":
        return base * d.gamma ** sum(1 for m in d.milestones if step >= m)
    raise ValueError(f"unsupported learning-rate decay kind {kind!r}")
