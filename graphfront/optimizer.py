"""``flow.optimizer``: optimizers, learning-rate schedulers, warmup, clipping, loss scale.

Signatures and defaults are OneFlow v0.6.0 single-client's
(``python/oneflow/compatible/single_client/ops/optimizer.py``). An optimizer's
``minimize(loss)`` only records an ``OptimizerConf`` in the current job's
``train_conf`` and adds the loss to ``train_conf.loss_lbn`` (``oneflow/core/job/job_conf.proto``);
the optimizer pass (:mod:`graphfront.passes.optimizer`) turns it into learning-rate
and update ops when the job is completed. The update formulas are documented in
:mod:`graphfront.ops.optimizer_ops`, the learning-rate formulas in
:func:`graphfront.ops.lr_schedule.learning_rate_at`.

Schedulers fill ``base_learning_rate``, one ``learning_rate_decay`` case and an optional
``warmup_conf`` (``warmup.constant(steps, multiplier)`` / ``warmup.linear(steps,
start_multiplier)``). ``CustomScheduler(lbn)`` names a float32 ``(1,)`` blob of the
job that holds the learning rate of every step instead.
"""
from __future__ import annotations

import collections.abc
import math
import numbers
import re
import warnings

from graphfront import losses as _losses
from graphfront.core import job_conf_pb2, learning_rate_schedule_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.errors import ArgumentError, JobBuildError, format_location, user_frame

_lr_pb = learning_rate_schedule_conf_pb2


# ------------------------------------------------------------------ argument checks

# Each check raises ArgumentError: a JobBuildError that is also a TypeError and a ValueError,
# whose message ends with the user's line.

def _number(where, name, value, low=None, high=None, low_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ArgumentError(f"{where}: {name} expects a finite number, received {value!r} "
                            f"({type(value).__name__})")
    value = float(value)
    if low is not None and (value < low or (low_open and value == low)):
        raise ArgumentError(f"{where}: {name} must be {'>' if low_open else '>='} {low}, received {value}")
    if high is not None and value > high:
        raise ArgumentError(f"{where}: {name} must be <= {high}, received {value}")
    return value


def _positive_int(where, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ArgumentError(f"{where}: {name} expects a positive int, received {value!r}")
    return int(value)


def _steps(where, value):
    """A warmup length: an int >= 0 (0 means no warmup, as OneFlow's schedule kernel)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ArgumentError(f"{where}: steps expects an int >= 0, received {value!r}")
    return int(value)


def _int_list(where, name, values):
    if not isinstance(values, (list, tuple)) or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
        raise ArgumentError(f"{where}: {name} expects a list of ints, received {values!r}")
    values = [int(v) for v in values]
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ArgumentError(f"{where}: {name} must be strictly increasing, received {values}")
    return values


# ------------------------------------------------------------------ warmup

class warmup:  # noqa: N801 - OneFlow's submodule name
    """``flow.optimizer.warmup``: ``WarmupConf`` builders for a scheduler's ``warmup=``.

    During the first ``steps`` train steps the LR is the scheduler's base LR times the
    warmup multiplier; the decay takes over at step ``steps`` (evaluated at the raw step,
    see :func:`graphfront.ops.lr_schedule.learning_rate_at`).
    """

    @staticmethod
    def constant(steps: int, multiplier: float) -> _lr_pb.WarmupConf:
        """LR = base LR * ``multiplier`` while ``step < steps``.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
        (``warmup.constant``) and ``oneflow/core/job/learning_rate_schedule_conf.proto``.

        Args:
            steps: warmup length in train steps, an int >= 0 (0 = no warmup).
            multiplier: a number > 0.

        Returns:
            A ``WarmupConf`` proto with ``constant_conf`` set.

        Raises:
            ValueError: ``steps`` is not an int >= 0, or ``multiplier`` <= 0.
            TypeError: ``multiplier`` is not a number.
        """
        conf = _lr_pb.WarmupConf()
        conf.constant_conf.warmup_batches = _steps("warmup.constant", steps)
        conf.constant_conf.multiplier = _number("warmup.constant", "multiplier", multiplier, 0.0, low_open=True)
        return conf

    @staticmethod
    def linear(steps: int, start_multiplier: float) -> _lr_pb.WarmupConf:
        """LR = base LR * (start + (1 - start) * step / steps) while ``step < steps``.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
        (``warmup.linear``) and ``oneflow/core/job/learning_rate_schedule_conf.proto``.

        Args:
            steps: warmup length in train steps, an int >= 0 (0 = no warmup).
            start_multiplier: the multiplier at step 0, a number in [0, 1].

        Returns:
            A ``WarmupConf`` proto with ``linear_conf`` set.

        Raises:
            ValueError: ``steps`` is not an int >= 0, or ``start_multiplier`` outside [0, 1].
            TypeError: ``start_multiplier`` is not a number.
        """
        conf = _lr_pb.WarmupConf()
        conf.linear_conf.warmup_batches = _steps("warmup.linear", steps)
        conf.linear_conf.start_multiplier = _number("warmup.linear", "start_multiplier", start_multiplier, 0.0, 1.0)
        return conf


# ------------------------------------------------------------------ schedulers

class LrScheduler:
    """Base learning-rate scheduler: fills the LR fields of an ``OptimizerConf``.

    Attributes: ``base_lr`` (float or None), ``lr_lbn`` (a blob name or None),
    ``warmup`` (a ``WarmupConf`` or None). Subclasses override
    ``learning_rate_decay_conf``.

    Args:
        base_lr: base learning rate, a number (required unless ``lr_lbn`` is given; a
            negative one ascends the gradient, as OneFlow allows).
        lr_lbn: optional logical blob name holding the LR of every step; when given,
            ``base_lr`` is not checked and ``warmup`` is not written.
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        TypeError: ``base_lr`` is not a number (when ``lr_lbn`` is None), or ``warmup`` is
            not a ``WarmupConf``.
    """

    def __init__(self, base_lr=None, lr_lbn=None, warmup=None):
        where = type(self).__name__
        if lr_lbn is None:
            base_lr = _number(where, "base_lr", base_lr)
        if warmup is not None and not isinstance(warmup, _lr_pb.WarmupConf):
            raise ArgumentError(f"{where}: warmup expects flow.optimizer.warmup.constant(...) or .linear(...), "
                                f"received {warmup!r}")
        self.base_lr = base_lr
        self.lr_lbn = lr_lbn
        self.warmup = warmup

    @property
    def warmup_conf(self):
        """The ``WarmupConf`` given as ``warmup=``, or None."""
        return self.warmup

    @property
    def learning_rate_decay_conf(self):
        """The ``LearningRateDecayConf`` of this schedule; None for a constant LR."""
        return None

    def SetLrFieldsInOptimizerConf(self, optimizer_conf):  # noqa: N802 - OneFlow's name
        """Write the LR fields into ``optimizer_conf`` (an ``OptimizerConf`` proto, changed in place).

        Sets ``learning_rate_lbn`` when the LR comes from a blob, otherwise
        ``base_learning_rate`` and, when present, ``warmup_conf`` and ``learning_rate_decay``.

        Args:
            optimizer_conf: the ``OptimizerConf`` proto to fill.
        """
        if self.lr_lbn is not None:
            optimizer_conf.learning_rate_lbn = self.lr_lbn
            return
        optimizer_conf.base_learning_rate = self.base_lr
        if self.warmup_conf is not None:
            optimizer_conf.warmup_conf.CopyFrom(self.warmup_conf)
        decay = self.learning_rate_decay_conf
        if decay is not None:
            optimizer_conf.learning_rate_decay.CopyFrom(decay)


class CosineScheduler(LrScheduler):
    """``base_lr * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, steps) / steps)) + alpha)``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``CosineScheduler``).

    Args:
        base_lr: base learning rate, a number >= 0.
        steps: decay length in train steps, a positive int.
        alpha: final LR as a fraction of ``base_lr`` (any number; usually in [0, 1]).
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        TypeError: ``base_lr`` or ``alpha`` is not a number, or ``warmup`` is not a ``WarmupConf``.
        ValueError: ``steps`` is not a positive int.
    """

    def __init__(self, base_lr, steps, alpha=0.0, warmup=None):
        super().__init__(base_lr=base_lr, warmup=warmup)
        self.steps = _positive_int("CosineScheduler", "steps", steps)
        self.alpha = _number("CosineScheduler", "alpha", alpha)

    @property
    def learning_rate_decay_conf(self):
        """The ``LearningRateDecayConf`` of this schedule.

        Returns:
            A new ``LearningRateDecayConf`` proto with this scheduler's case set.
        """
        conf = _lr_pb.LearningRateDecayConf()
        conf.cosine_conf.decay_batches = self.steps
        conf.cosine_conf.alpha = self.alpha
        return conf


class CustomScheduler(LrScheduler):
    """The learning rate of every step is read from blob ``lbn`` (a name or a BlobDesc).

    Limits: the blob must belong to the train job being built, be float32 of shape
    ``(1,)`` (checked when the job is completed) and is not differentiated (compute it
    from placeholders or non-trainable blobs). No warmup or decay is applied on top.
    OneFlow v0.6.0's job completion overwrote this blob with a schedule of base LR 0;
    graphfront uses it as documented.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``CustomScheduler``).

    Args:
        lbn: the learning-rate blob: a BlobDesc of the train job, or its logical blob
            name ``"op_name/blob_name"`` (a str containing ``/``).

    Raises:
        TypeError: ``lbn`` is neither a BlobDesc nor a str containing ``/``.
    """

    def __init__(self, lbn):
        if isinstance(lbn, BlobDesc):
            lbn = lbn.lbn
        if not isinstance(lbn, str) or "/" not in lbn:
            raise ArgumentError(f"CustomScheduler: lbn expects a blob or a logical blob name 'op/blob', "
                                f"received {lbn!r}")
        super().__init__(lr_lbn=lbn)


class PiecewiseConstantScheduler(LrScheduler):
    """``values[i]`` for ``boundaries[i-1] < step <= boundaries[i]`` (``values[0]`` up to and
    including ``boundaries[0]``, TF's convention); base LR = ``values[0]``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``PiecewiseConstantScheduler``).

    Args:
        boundaries: train steps where the LR changes, a strictly increasing list/tuple of
            ints (may be empty for a constant LR).
        values: learning rates, a list/tuple of ``len(boundaries) + 1`` numbers.
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        TypeError: ``boundaries`` is not a list/tuple of ints, an item of ``values`` is not
            a number, or ``warmup`` is not a ``WarmupConf``.
        ValueError: ``boundaries`` is not strictly increasing, ``values`` is not a
            list/tuple of length ``len(boundaries) + 1``.
    """

    def __init__(self, boundaries, values, warmup=None):
        where = "PiecewiseConstantScheduler"
        boundaries = _int_list(where, "boundaries", boundaries)
        if not isinstance(values, (list, tuple)) or len(values) != len(boundaries) + 1:
            raise ArgumentError(f"{where}: len(values) must be len(boundaries) + 1 = {len(boundaries) + 1}, received "
                                f"{values!r}")
        values = [_number(where, "values[]", v) for v in values]
        super().__init__(base_lr=values[0], warmup=warmup)
        self.boundaries = boundaries
        self.values = values

    @property
    def learning_rate_decay_conf(self):
        """The ``LearningRateDecayConf`` of this schedule.

        Returns:
            A new ``LearningRateDecayConf`` proto with this scheduler's case set.
        """
        conf = _lr_pb.LearningRateDecayConf()
        conf.piecewise_constant_conf.boundaries.extend(self.boundaries)
        conf.piecewise_constant_conf.values.extend(self.values)
        return conf


class PiecewiseScalingScheduler(LrScheduler):
    """``base_lr * scale[i-1]`` for ``boundaries[i-1] < step <= boundaries[i]`` (``base_lr``
    up to and including ``boundaries[0]``). A scalar ``scale`` is used after every boundary.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``PiecewiseScalingScheduler``).

    Args:
        base_lr: base learning rate, a number >= 0.
        boundaries: train steps where the scale changes, a strictly increasing list/tuple
            of ints.
        scale: a number, or a list/tuple of ``len(boundaries)`` numbers; ``scale[i]``
            multiplies ``base_lr`` after ``boundaries[i]``.
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        TypeError: ``base_lr``, ``boundaries`` or an item of ``scale`` has the wrong type,
            or ``warmup`` is not a ``WarmupConf``.
        ValueError: ``boundaries`` not strictly increasing, or
            ``len(scale) != len(boundaries)``.
    """

    def __init__(self, base_lr, boundaries, scale, warmup=None):
        where = "PiecewiseScalingScheduler"
        super().__init__(base_lr=base_lr, warmup=warmup)
        self.boundaries = _int_list(where, "boundaries", boundaries)
        if not isinstance(scale, (list, tuple)):
            scale = [scale] * len(self.boundaries)
        if len(scale) != len(self.boundaries):
            raise ArgumentError(f"{where}: len(scale) must equal len(boundaries) = {len(self.boundaries)}, received "
                                f"{list(scale)!r}")
        self.scale = [1.0] + [_number(where, "scale[]", s) for s in scale]

    @property
    def learning_rate_decay_conf(self):
        """The ``LearningRateDecayConf`` of this schedule.

        Returns:
            A new ``LearningRateDecayConf`` proto with this scheduler's case set.
        """
        conf = _lr_pb.LearningRateDecayConf()
        conf.piecewise_scaling_conf.boundaries.extend(self.boundaries)
        conf.piecewise_scaling_conf.scales.extend(self.scale)
        return conf


class PolynomialScheduler(LrScheduler):
    """``(base_lr - end) * (1 - t / steps') ** power + end``: ``t = min(step, steps)``; with
    ``cycle`` the decay restarts: ``steps' = steps * ceil(step / steps)``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``PolynomialScheduler``).

    Args:
        base_lr: base learning rate, a number >= 0.
        steps: decay length in train steps, a positive int.
        end_learning_rate: the LR reached at ``steps``, a number (default 0.0001).
        power: exponent of the polynomial, a number (default 1.0 = linear decay).
        cycle: restart the decay every ``steps`` steps (truthy/falsy).
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        TypeError: ``base_lr``, ``end_learning_rate`` or ``power`` is not a number, or
            ``warmup`` is not a ``WarmupConf``.
        ValueError: ``steps`` is not a positive int.
    """

    def __init__(self, base_lr, steps, end_learning_rate=0.0001, power=1.0, cycle=False, warmup=None):
        where = type(self).__name__
        super().__init__(base_lr=base_lr, warmup=warmup)
        self.steps = _positive_int(where, "steps", steps)
        self.end_learning_rate = _number(where, "end_learning_rate", end_learning_rate)
        self.power = _number(where, "power", power)
        self.cycle = bool(cycle)

    @property
    def learning_rate_decay_conf(self):
        """The ``LearningRateDecayConf`` of this schedule.

        Returns:
            A new ``LearningRateDecayConf`` proto with this scheduler's case set.
        """
        conf = _lr_pb.LearningRateDecayConf()
        c = conf.polynomial_conf
        c.decay_batches = self.steps
        c.end_learning_rate = self.end_learning_rate
        c.power = self.power
        c.cycle = self.cycle
        return conf


class PolynomialSchduler(PolynomialScheduler):
    """Deprecated misspelled alias of :class:`PolynomialScheduler` (warns).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``PolynomialSchduler``).

    Args:
        base_lr: as :class:`PolynomialScheduler`.
        steps: as :class:`PolynomialScheduler`.
        end_learning_rate: as :class:`PolynomialScheduler`.
        power: as :class:`PolynomialScheduler`.
        cycle: as :class:`PolynomialScheduler`.
        warmup: as :class:`PolynomialScheduler`.

    Raises:
        TypeError: as :class:`PolynomialScheduler`.
        ValueError: as :class:`PolynomialScheduler`.
    """

    def __init__(self, base_lr, steps, end_learning_rate=0.0001, power=1.0, cycle=False, warmup=None):
        warnings.warn("flow.optimizer.PolynomialSchduler is deprecated, use flow.optimizer.PolynomialScheduler",
                      DeprecationWarning, stacklevel=2)
        super().__init__(base_lr, steps, end_learning_rate, power, cycle, warmup)


class LinearCosineScheduler(LrScheduler):
    """``base_lr * ((alpha + (steps - t) / steps) * 0.5 * (1 + cos(2 pi num_periods t / steps)) + beta)``,
    ``t = min(step, steps)``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``LinearCosineScheduler``).

    Args:
        base_lr: base learning rate, a number >= 0.
        steps: decay length in train steps, a positive int.
        num_periods: number of cosine periods over ``steps``, a number (default 0.5).
        alpha: offset of the linear factor, a number (default 0.0).
        beta: constant floor added to the factor, a number (default 0.001).
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        TypeError: a numeric argument is not a number, or ``warmup`` is not a ``WarmupConf``.
        ValueError: ``steps`` is not a positive int.
    """

    def __init__(self, base_lr, steps, num_periods=0.5, alpha=0.0, beta=0.001, warmup=None):
        where = "LinearCosineScheduler"
        super().__init__(base_lr=base_lr, warmup=warmup)
        self.steps = _positive_int(where, "steps", steps)
        self.num_periods = _number(where, "num_periods", num_periods)
        self.alpha = _number(where, "alpha", alpha)
        self.beta = _number(where, "beta", beta)

    @property
    def learning_rate_decay_conf(self):
        """The ``LearningRateDecayConf`` of this schedule.

        Returns:
            A new ``LearningRateDecayConf`` proto with this scheduler's case set.
        """
        conf = _lr_pb.LearningRateDecayConf()
        c = conf.linear_cosine_conf
        c.decay_batches = self.steps
        c.num_periods = self.num_periods
        c.alpha = self.alpha
        c.beta = self.beta
        return conf


class _RateDecayScheduler(LrScheduler):
    _field = ""
    _decay_rate_low = (None, False)  # (low, low_open) of decay_rate

    def __init__(self, base_lr, steps, decay_rate, staircase=False, warmup=None):
        where = type(self).__name__
        super().__init__(base_lr=base_lr, warmup=warmup)
        self.steps = _positive_int(where, "steps", steps)
        low, low_open = self._decay_rate_low
        self.decay_rate = _number(where, "decay_rate", decay_rate, low, low_open=low_open)
        self.staircase = bool(staircase)

    @property
    def learning_rate_decay_conf(self):
        """The ``LearningRateDecayConf`` of this schedule.

        Returns:
            A new ``LearningRateDecayConf`` proto with this scheduler's case set.
        """
        conf = _lr_pb.LearningRateDecayConf()
        c = getattr(conf, self._field)
        c.decay_batches = self.steps
        c.decay_rate = self.decay_rate
        c.staircase = self.staircase
        return conf


class ExponentialScheduler(_RateDecayScheduler):
    """``base_lr * decay_rate ** p``, ``p = step / steps`` (``floor`` when ``staircase``).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``ExponentialScheduler``).

    Args:
        base_lr: base learning rate, a number >= 0.
        steps: decay period in train steps, a positive int.
        decay_rate: the decay rate, a number > 0 (a negative base has no real power).
        staircase: use ``floor(step / steps)`` (decay in discrete stages) instead of
            ``step / steps`` (truthy/falsy, default False).
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        ArgumentError: (a TypeError and a ValueError) ``base_lr`` or ``decay_rate`` is not a
            finite number or out of range, ``warmup`` is not a ``WarmupConf``, or ``steps`` is
            not a positive int.
    """
    _field = "exponential_conf"
    _decay_rate_low = (0.0, True)


class InverseTimeScheduler(_RateDecayScheduler):
    """``base_lr / (1 + decay_rate * p)``, ``p = step / steps`` (``floor`` when ``staircase``).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``InverseTimeScheduler``).

    Args:
        base_lr: base learning rate, a number >= 0.
        steps: decay period in train steps, a positive int.
        decay_rate: the decay rate, a number >= 0 (a negative one makes ``1 + decay_rate * p``
            reach 0).
        staircase: use ``floor(step / steps)`` (decay in discrete stages) instead of
            ``step / steps`` (truthy/falsy, default False).
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        ArgumentError: (a TypeError and a ValueError) ``base_lr`` or ``decay_rate`` is not a
            finite number or out of range, ``warmup`` is not a ``WarmupConf``, or ``steps`` is
            not a positive int.
    """
    _field = "inverse_time_conf"
    _decay_rate_low = (0.0, False)


class NaturalExpScheduler(_RateDecayScheduler):
    """``base_lr * exp(-decay_rate * p)``, ``p = step / steps`` (``floor`` when ``staircase``).

    (OneFlow v0.6.0's class fails when used; graphfront's works.)

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``NaturalExpScheduler``).

    Args:
        base_lr: base learning rate, a number >= 0.
        steps: decay period in train steps, a positive int.
        decay_rate: the decay rate, a finite number.
        staircase: use ``floor(step / steps)`` (decay in discrete stages) instead of
            ``step / steps`` (truthy/falsy, default False).
        warmup: optional ``flow.optimizer.warmup.constant(...)`` or
            ``warmup.linear(...)`` (a ``WarmupConf``); None = no warmup.

    Raises:
        ArgumentError: (a TypeError and a ValueError) ``base_lr`` or ``decay_rate`` is not a
            finite number, ``warmup`` is not a ``WarmupConf``, or ``steps`` is not a positive int.
    """
    _field = "natural_exp_conf"


# ------------------------------------------------------------------ clipping and loss scale

class grad_clipping:  # noqa: N801 - OneFlow's submodule name
    """``flow.optimizer.grad_clipping``."""

    class by_global_norm:  # noqa: N801
        """Scale all gradients of an optimizer by ``min(1, clip_norm / global_norm)`` where
        ``global_norm`` is the L2 norm of all of them together (the factor of
        ``torch.nn.utils.clip_grad_norm_``). Pass as ``grad_clipping=``.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
        (``grad_clipping.by_global_norm``).

        Args:
            clip_norm: maximum global L2 norm, a number > 0.

        Raises:
            TypeError: ``clip_norm`` is not a number.
            ValueError: ``clip_norm`` <= 0.
        """

        def __init__(self, clip_norm):
            self.clip_norm = _number("grad_clipping.by_global_norm", "clip_norm", clip_norm, 0.0, low_open=True)

        @property
        def clip_conf(self):
            """The ``ClipConf`` proto (``clip_by_global_norm.clip_norm`` set); a new one each call."""
            conf = job_conf_pb2.ClipConf()
            conf.clip_by_global_norm.clip_norm = self.clip_norm
            return conf


class loss_scale:  # noqa: N801 - OneFlow's submodule name
    """``flow.optimizer.loss_scale``: loss-scale policies for ``loss_scale_policy=``."""

    class LossScalePolicy:
        """Base of the loss-scale policies accepted by ``loss_scale_policy=``."""

        def SetLossScaleFieldsInTrainConf(self, train_conf):  # noqa: N802
            """Write this policy into ``train_conf`` (a ``TrainConf`` proto, changed in place).

            Args:
                train_conf: the ``TrainConf`` proto to fill.

            Raises:
                NotImplementedError: always, on the base class.
            """
            raise NotImplementedError

    class static_loss_scale(LossScalePolicy):  # noqa: N801
        """The loss gradient is seeded with ``loss_scale_factor`` and every variable
        gradient divided by it (same as ``loss_scale_factor=``).

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
        (``loss_scale.static_loss_scale``).

        Args:
            loss_scale_factor: the loss scale, a number > 0.

        Raises:
            TypeError: ``loss_scale_factor`` is not a number.
            ValueError: ``loss_scale_factor`` <= 0.
        """

        def __init__(self, loss_scale_factor):
            self.loss_scale_factor = _number("loss_scale.static_loss_scale", "loss_scale_factor",
                                             loss_scale_factor, 0.0, low_open=True)

        def SetLossScaleFieldsInTrainConf(self, train_conf):  # noqa: N802
            """Write this policy into ``train_conf`` (a ``TrainConf`` proto, changed in place).

            Args:
                train_conf: the ``TrainConf`` proto to fill.
            """
            train_conf.loss_scale_factor = self.loss_scale_factor

    class dynamic_loss_scale(LossScalePolicy):  # noqa: N801
        """Dynamic loss scaling, recorded in ``TrainConf.dynamic_loss_scale_policy``: the loss
        gradient is multiplied by a float32 loss-scale variable (``initial_loss_scale``,
        default 2**30) and the variable gradients divided by it; a step whose gradients
        hold an inf/NaN updates no variable and divides the scale by ``multiplier``;
        after ``increment_period`` finite steps the scale is multiplied by ``multiplier``
        (capped at 65536). See ``graphfront.passes.loss_scale`` and OneFlow's
        ``oneflow/user/kernels/dynamic_loss_scale_schedule_kernel.cpp`` and
        ``python/oneflow/compatible/single_client/ops/optimizer.py`` (``loss_scale.dynamic_loss_scale``).

        Args:
            initial_loss_scale: starting loss scale, a number > 0 (default 2**30).
            increment_period: number of consecutive finite train steps before the scale
                grows, a positive int (default 2000).
            multiplier: growth / shrink factor, a number > 1 (default 2.0).

        Raises:
            TypeError: ``initial_loss_scale`` or ``multiplier`` is not a number.
            ValueError: ``initial_loss_scale`` <= 0, ``increment_period`` is not a positive
                int, or ``multiplier`` <= 1.
        """

        def __init__(self, initial_loss_scale=2 ** 30, increment_period=2000, multiplier=2.0):
            self.initial_loss_scale = _number("dynamic_loss_scale", "initial_loss_scale", initial_loss_scale, 0.0,
                                              low_open=True)
            self.increment_period = _positive_int("dynamic_loss_scale", "increment_period", increment_period)
            self.multiplier = _number("dynamic_loss_scale", "multiplier", multiplier, 1.0, low_open=True)

        def SetLossScaleFieldsInTrainConf(self, train_conf):  # noqa: N802
            """Write this policy into ``train_conf`` (a ``TrainConf`` proto, changed in place).

            Args:
                train_conf: the ``TrainConf`` proto to fill.
            """
            p = train_conf.dynamic_loss_scale_policy
            p.initial_loss_scale = self.initial_loss_scale
            p.increment_period = self.increment_period
            p.multiplier = self.multiplier


# ------------------------------------------------------------------ optimizers

_ClipByGlobalNorm = grad_clipping.by_global_norm

def _variables_of_current_job():
    builder = jb.current()
    return [op.name for op in builder.job.net.op if jb.op_kind(op) == "variable_conf"]


GetVariablesForCurrentJob = _variables_of_current_job


class Optimizer:
    """Base of every optimizer: ``minimize(loss)`` records ``train_conf`` in the train job.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``Optimizer``).

    Args:
        loss_scale_factor: optional static loss scale, a number > 0 (shorthand for
            ``loss_scale.static_loss_scale(loss_scale_factor)``).
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.

    Raises:
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0.
        TypeError: ``loss_scale_factor`` is not a number, or ``loss_scale_policy`` is not
            a ``loss_scale.LossScalePolicy``.
    """

    def __init__(self, loss_scale_factor=None, train_step_lbn=None, loss_scale_policy=None):
        where = type(self).__name__
        if loss_scale_factor is not None:
            if loss_scale_policy is not None:
                raise ArgumentError(f"{where}: give loss_scale_factor or loss_scale_policy, not both")
            loss_scale_policy = loss_scale.static_loss_scale(loss_scale_factor)
        if loss_scale_policy is not None and not isinstance(loss_scale_policy, loss_scale.LossScalePolicy):
            raise ArgumentError(f"{where}: loss_scale_policy expects flow.optimizer.loss_scale.static_loss_scale(...) "
                                f"or dynamic_loss_scale(...), received {loss_scale_policy!r}")
        if isinstance(train_step_lbn, BlobDesc):
            train_step_lbn = train_step_lbn.lbn
        if train_step_lbn is not None and not isinstance(train_step_lbn, str):
            raise ArgumentError(f"{where}: train_step_lbn expects a blob or its logical blob name, received "
                                f"{type(train_step_lbn).__name__} {train_step_lbn!r}")
        self.train_step_lbn = train_step_lbn
        self.loss_scale_policy = loss_scale_policy

    def _AddOptimizerConfInTrainConf(self, train_conf):  # noqa: N802
        raise NotImplementedError

    @property
    def train_conf(self) -> job_conf_pb2.TrainConf:
        """The ``TrainConf`` this optimizer contributes (evaluates ``Variables()`` now).

        Returns:
            A new ``TrainConf`` proto with ``optimizer_conf`` entries and, when set,
            ``train_step_lbn`` and the loss-scale fields; the job is not changed.
        """
        conf = job_conf_pb2.TrainConf()
        if self.train_step_lbn is not None:
            conf.train_step_lbn = self.train_step_lbn
        if self.loss_scale_policy is not None:
            self.loss_scale_policy.SetLossScaleFieldsInTrainConf(conf)
        self._AddOptimizerConfInTrainConf(conf)
        return conf

    def minimize(self, loss) -> None:
        """Record this optimizer and ``loss`` (a blob or a list of blobs) in the train job.

        As OneFlow v0.6.0 (``python/oneflow/compatible/single_client/ops/optimizer.py``),
        calling it in a predict job turns the job into a train job. Each loss is registered
        with :func:`graphfront.losses.add_loss`.

        Args:
            loss: a BlobDesc of the job being built (any shape, usually a scalar or (N,)),
                or a list/tuple of them.

        Returns:
            None; ``job_conf.train_conf`` gains this optimizer's ``optimizer_conf``, the
            loss lbns, and the train-step / loss-scale fields when set.

        Raises:
            JobBuildError: outside a job, a loss that is not a blob, unknown variable
                names, or variables already given to another optimizer.
        """
        loc = user_frame()
        where = f"{type(self).__name__}.minimize"
        if not jb.is_building():
            raise JobBuildError(f"{where} must be called inside a @flow.global_function(type=\"train\") job body"
                                f"{format_location(loc)}")
        builder = jb.current()
        if not builder.is_train:  # as OneFlow: minimize makes the job a train job
            builder.job.job_conf.train_conf.SetInParent()
        losses = list(loss) if isinstance(loss, (list, tuple)) else [loss]
        for blob in losses:
            if not isinstance(blob, BlobDesc):
                raise JobBuildError(f"{where} expects a loss blob, received {type(blob).__name__}"
                                    f"{format_location(loc)}")
        new = self.train_conf
        tc = builder.job.job_conf.train_conf
        variables = {op.name for op in builder.job.net.op if jb.op_kind(op) == "variable_conf"}
        taken = {v for c in tc.optimizer_conf for v in c.variable_op_names}
        for conf in new.optimizer_conf:
            unknown = [v for v in conf.variable_op_names if v not in variables]
            if unknown:
                raise JobBuildError(f"{where}: {unknown} are not variables of job '{builder.job_name}' (create them "
                                    f"with flow.get_variable before minimize){format_location(loc)}")
            twice = sorted(taken.intersection(conf.variable_op_names))
            if twice:
                raise JobBuildError(f"{where}: variables {twice} are already updated by another optimizer of job "
                                    f"'{builder.job_name}'; give each optimizer its own variables= or use "
                                    f"flow.optimizer.CombinedOptimizer{format_location(loc)}")
        tc.optimizer_conf.extend(new.optimizer_conf)
        for blob in losses:
            _losses.add_loss(blob)
        if new.train_step_lbn:
            tc.train_step_lbn = new.train_step_lbn
        if new.HasField("loss_scale_factor"):
            tc.loss_scale_factor = new.loss_scale_factor
        if new.HasField("dynamic_loss_scale_policy"):
            tc.dynamic_loss_scale_policy.CopyFrom(new.dynamic_loss_scale_policy)


class _SingleOptimizer(Optimizer):
    """One ``OptimizerConf``: LR scheduler, clipping, variables, algorithm fields."""

    def __init__(self, lr_scheduler, loss_scale_factor=None, grad_clipping=None, train_step_lbn=None,
                 loss_scale_policy=None, variables=GetVariablesForCurrentJob):
        super().__init__(loss_scale_factor, train_step_lbn, loss_scale_policy)
        where = type(self).__name__
        if not isinstance(lr_scheduler, LrScheduler):
            raise ArgumentError(f"{where}: lr_scheduler must be a flow.optimizer scheduler such as "
                                f"PiecewiseConstantScheduler([], [0.1]), received {lr_scheduler!r}")
        if grad_clipping is not None and not isinstance(grad_clipping, (_ClipByGlobalNorm, job_conf_pb2.ClipConf)):
            raise ArgumentError(f"{where}: grad_clipping expects "
                                f"flow.optimizer.grad_clipping.by_global_norm(clip_norm), received {grad_clipping!r}")
        if not callable(variables):
            names = ([variables] if isinstance(variables, str)
                     else list(variables) if isinstance(variables, collections.abc.Iterable) else [None])
            if not all(isinstance(v, str) for v in names):
                raise ArgumentError(f"{where}: variables expects variable names (a str or an iterable of str) or a "
                                    f"function returning them, received {variables!r}")
            variables = names
        self.lr_scheduler = lr_scheduler
        self.grad_clipping = grad_clipping
        self.variables = variables

    def Variables(self):  # noqa: N802
        """Variable op names this optimizer updates (a callable is evaluated now).

        Returns:
            A list of str: ``variables`` as given, or the result of calling it (by
            default every variable op of the job being built).
        """
        v = self.variables
        names = v() if callable(v) else v
        if isinstance(names, str):
            names = [names]
        return list(names)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        raise NotImplementedError

    def _AddOptimizerConfInTrainConf(self, train_conf):  # noqa: N802
        conf = train_conf.optimizer_conf.add()
        self.lr_scheduler.SetLrFieldsInOptimizerConf(conf)
        if self.grad_clipping is not None:
            clip = self.grad_clipping
            conf.clip_conf.CopyFrom(clip if isinstance(clip, job_conf_pb2.ClipConf) else clip.clip_conf)
        conf.variable_op_names.extend(self.Variables())
        self._SetSpecificFieldsInOptimizerConf(conf)


class _WeightDecayMixin:
    """``weight_decay`` with ``weight_decay_includes`` / ``weight_decay_excludes`` (a regex
    or a list of regexes matched anywhere in the variable name; not both)."""

    def _init_weight_decay(self, weight_decay, includes, excludes):
        where = type(self).__name__
        if includes is not None and excludes is not None:
            raise ArgumentError(f"{where}: weight_decay_includes and weight_decay_excludes are mutually exclusive")

        def patterns(name, value):
            if value is None:
                return None
            listed = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
            if listed is None or not all(isinstance(p, str) for p in listed):
                raise ArgumentError(f"{where}: {name} expects a str or a list of str, received {value!r}")
            for p in listed:
                try:
                    re.compile(p)
                except re.error as e:
                    raise ArgumentError(f"{where}: {name} entry {p!r} is not a regular expression: {e}") from None
            return listed
        self.weight_decay = None if weight_decay is None else _number(where, "weight_decay", weight_decay, 0.0)
        self.weight_decay_includes = patterns("weight_decay_includes", includes)
        self.weight_decay_excludes = patterns("weight_decay_excludes", excludes)

    def _AddWeightDecayConf(self, conf):  # noqa: N802
        if self.weight_decay is None:
            return
        wd = conf.weight_decay_conf
        wd.weight_decay_rate = self.weight_decay
        if self.weight_decay_includes is not None:
            wd.includes.pattern.extend(self.weight_decay_includes)
        elif self.weight_decay_excludes is not None:
            wd.excludes.pattern.extend(self.weight_decay_excludes)


class SGD(_SingleOptimizer):
    """SGD: ``momentum == 0`` -> ``naive_conf`` (``sgd_update``), else ``momentum_conf``
    with ``beta = momentum`` (``momentum_update``). OneFlow's default momentum is 0.9.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``SGD``).

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        momentum: momentum factor, a number in [0, 1]; 0 = plain SGD (default 0.9).
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, or ``momentum`` outside [0, 1].
    """

    def __init__(self, lr_scheduler, loss_scale_factor=None, momentum=0.9, grad_clipping=None,
                 train_step_lbn=None, loss_scale_policy=None, variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        self.momentum = _number(type(self).__name__, "momentum", momentum, 0.0, 1.0)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        if self.momentum == 0:
            conf.naive_conf.SetInParent()
        else:
            conf.momentum_conf.beta = self.momentum


class SGDW(SGD, _WeightDecayMixin):
    """SGD / momentum SGD with decoupled weight decay ``w -= lr * weight_decay * w``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``SGDW``); Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        momentum: momentum factor, a number in [0, 1]; 0 = plain SGD (default 0.9).
        weight_decay: optional decoupled weight-decay rate, a number >= 0; None = none.
        weight_decay_includes: a regex or list of regexes; decay only variables whose name
            matches one (searched anywhere in the name).
        weight_decay_excludes: a regex or list of regexes; decay every variable except
            those matching. Exclusive with ``weight_decay_includes``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, or ``momentum`` outside [0, 1].
            Also: ``weight_decay`` < 0, or both ``weight_decay_includes`` and
            ``weight_decay_excludes`` are given (a weight-decay pattern that is not a
            str raises TypeError).
    """

    def __init__(self, lr_scheduler, loss_scale_factor=None, momentum=0.9, weight_decay=None,
                 weight_decay_includes=None, weight_decay_excludes=None, grad_clipping=None, train_step_lbn=None,
                 loss_scale_policy=None, variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, momentum, grad_clipping, train_step_lbn,
                         loss_scale_policy, variables)
        self._init_weight_decay(weight_decay, weight_decay_includes, weight_decay_excludes)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        super()._SetSpecificFieldsInOptimizerConf(conf)
        self._AddWeightDecayConf(conf)


class Adam(_SingleOptimizer):
    """Adam (``adam_conf``). Note OneFlow's default ``do_bias_correction=False``.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``Adam``); Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        beta1: first-moment decay, a number in [0, 1] (default 0.9).
        beta2: second-moment decay, a number in [0, 1] (default 0.999).
        epsilon: a number >= 0 added to the denominator (default 1e-08).
        do_bias_correction: divide the moments by ``1 - beta ** t`` (default False, as
            OneFlow; set True for the paper's / torch's Adam).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, ``beta1``/``beta2`` outside [0, 1], or ``epsilon`` < 0.
    """

    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-08, do_bias_correction=False,
                 loss_scale_factor=None, grad_clipping=None, train_step_lbn=None, loss_scale_policy=None,
                 variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        where = type(self).__name__
        self.beta1 = _number(where, "beta1", beta1, 0.0, 1.0)
        self.beta2 = _number(where, "beta2", beta2, 0.0, 1.0)
        self.epsilon = _number(where, "epsilon", epsilon, 0.0)
        self.do_bias_correction = bool(do_bias_correction)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        c = conf.adam_conf
        c.beta1, c.beta2, c.epsilon = self.beta1, self.beta2, self.epsilon
        c.do_bias_correction = self.do_bias_correction


class AdamW(Adam, _WeightDecayMixin):
    """Adam with decoupled weight decay (``torch.optim.AdamW`` when ``do_bias_correction``).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``AdamW``); Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        beta1: first-moment decay, a number in [0, 1] (default 0.9).
        beta2: second-moment decay, a number in [0, 1] (default 0.999).
        epsilon: a number >= 0 added to the denominator (default 1e-08).
        do_bias_correction: divide the moments by ``1 - beta ** t`` (default False, as
            OneFlow; set True for the paper's / torch's Adam).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        weight_decay: optional decoupled weight-decay rate, a number >= 0; None = none.
        weight_decay_includes: a regex or list of regexes; decay only variables whose name
            matches one (searched anywhere in the name).
        weight_decay_excludes: a regex or list of regexes; decay every variable except
            those matching. Exclusive with ``weight_decay_includes``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, ``beta1``/``beta2`` outside [0, 1], or ``epsilon`` < 0.
            Also: ``weight_decay`` < 0, or both ``weight_decay_includes`` and
            ``weight_decay_excludes`` are given (a weight-decay pattern that is not a
            str raises TypeError).
    """

    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-08, do_bias_correction=False,
                 loss_scale_factor=None, weight_decay=None, weight_decay_includes=None, weight_decay_excludes=None,
                 grad_clipping=None, train_step_lbn=None, loss_scale_policy=None,
                 variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, beta1, beta2, epsilon, do_bias_correction, loss_scale_factor,
                         grad_clipping, train_step_lbn, loss_scale_policy, variables)
        self._init_weight_decay(weight_decay, weight_decay_includes, weight_decay_excludes)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        super()._SetSpecificFieldsInOptimizerConf(conf)
        self._AddWeightDecayConf(conf)


class LazyAdam(_SingleOptimizer):
    """Lazy Adam (``lazy_adam_conf``; bias correction on, the proto default). graphfront
    applies it as dense Adam (``adam_update``); there is no sparse gradient path.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``LazyAdam``); Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        beta1: first-moment decay, a number in [0, 1] (default 0.9).
        beta2: second-moment decay, a number in [0, 1] (default 0.999).
        epsilon: a number >= 0 added to the denominator (default 1e-08).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, ``beta1``/``beta2`` outside [0, 1], or ``epsilon`` < 0.
    """

    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-08, loss_scale_factor=None,
                 grad_clipping=None, train_step_lbn=None, loss_scale_policy=None,
                 variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        where = type(self).__name__
        self.beta1 = _number(where, "beta1", beta1, 0.0, 1.0)
        self.beta2 = _number(where, "beta2", beta2, 0.0, 1.0)
        self.epsilon = _number(where, "epsilon", epsilon, 0.0)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        c = conf.lazy_adam_conf
        c.beta1, c.beta2, c.epsilon = self.beta1, self.beta2, self.epsilon


class RMSProp(_SingleOptimizer):
    """RMSProp (``rmsprop_conf``): ``decay_rate`` is torch's ``alpha``; epsilon is added
    inside the square root (OneFlow).

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``RMSProp``).

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        decay_rate: smoothing constant of the squared-gradient average, a number in
            [0, 1] (default 0.99).
        epsilon: a number >= 0 added inside the square root (default 1e-08).
        centered: subtract the squared mean gradient (centered RMSProp), truthy/falsy.
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, ``decay_rate`` outside [0, 1], or ``epsilon`` < 0.
    """

    def __init__(self, lr_scheduler, decay_rate=0.99, epsilon=1e-08, centered=False, loss_scale_factor=None,
                 grad_clipping=None, train_step_lbn=None, loss_scale_policy=None,
                 variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        where = type(self).__name__
        self.decay_rate = _number(where, "decay_rate", decay_rate, 0.0, 1.0)
        self.epsilon = _number(where, "epsilon", epsilon, 0.0)
        self.centered = bool(centered)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        c = conf.rmsprop_conf
        c.decay_rate, c.epsilon, c.centered = self.decay_rate, self.epsilon, self.centered


class LARS(_SingleOptimizer, _WeightDecayMixin):
    """LARS (``lars_conf``): layer-wise trust ratio with momentum.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``LARS``); You, Gitman & Ginsburg, "Large Batch Training of Convolutional Networks", 2017.

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        momentum_beta: momentum factor, a number in [0, 1] (default 0.9).
        epsilon: a number >= 0 added to the trust-ratio denominator (default 1e-09).
        lars_coefficient: trust coefficient, a number >= 0 (default 0.0001).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        weight_decay: optional decoupled weight-decay rate, a number >= 0; None = none.
        weight_decay_includes: a regex or list of regexes; decay only variables whose name
            matches one (searched anywhere in the name).
        weight_decay_excludes: a regex or list of regexes; decay every variable except
            those matching. Exclusive with ``weight_decay_includes``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, ``momentum_beta`` outside [0, 1], or ``epsilon`` / ``lars_coefficient`` < 0.
            Also: ``weight_decay`` < 0, or both ``weight_decay_includes`` and
            ``weight_decay_excludes`` are given (a weight-decay pattern that is not a
            str raises TypeError).
    """

    def __init__(self, lr_scheduler, momentum_beta=0.9, epsilon=1e-09, lars_coefficient=0.0001,
                 loss_scale_factor=None, weight_decay=None, weight_decay_includes=None, weight_decay_excludes=None,
                 grad_clipping=None, train_step_lbn=None, loss_scale_policy=None,
                 variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        where = type(self).__name__
        self.momentum_beta = _number(where, "momentum_beta", momentum_beta, 0.0, 1.0)
        self.epsilon = _number(where, "epsilon", epsilon, 0.0)
        self.lars_coefficient = _number(where, "lars_coefficient", lars_coefficient, 0.0)
        self._init_weight_decay(weight_decay, weight_decay_includes, weight_decay_excludes)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        c = conf.lars_conf
        c.momentum_beta, c.epsilon, c.lars_coefficient = self.momentum_beta, self.epsilon, self.lars_coefficient
        self._AddWeightDecayConf(conf)


class LAMB(_SingleOptimizer, _WeightDecayMixin):
    """LAMB (``lamb_conf``): Adam direction scaled by the layer-wise trust ratio.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``LAMB``); You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", ICLR 2020.

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        beta1: first-moment decay, a number in [0, 1] (default 0.9).
        beta2: second-moment decay, a number in [0, 1] (default 0.999).
        epsilon: a number >= 0 added to the denominator (default 1e-06).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        weight_decay: optional decoupled weight-decay rate, a number >= 0; None = none.
        weight_decay_includes: a regex or list of regexes; decay only variables whose name
            matches one (searched anywhere in the name).
        weight_decay_excludes: a regex or list of regexes; decay every variable except
            those matching. Exclusive with ``weight_decay_includes``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, ``beta1``/``beta2`` outside [0, 1], or ``epsilon`` < 0.
            Also: ``weight_decay`` < 0, or both ``weight_decay_includes`` and
            ``weight_decay_excludes`` are given (a weight-decay pattern that is not a
            str raises TypeError).
    """

    def __init__(self, lr_scheduler, beta1=0.9, beta2=0.999, epsilon=1e-06, loss_scale_factor=None,
                 weight_decay=None, weight_decay_includes=None, weight_decay_excludes=None, grad_clipping=None,
                 train_step_lbn=None, loss_scale_policy=None, variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        where = type(self).__name__
        self.beta1 = _number(where, "beta1", beta1, 0.0, 1.0)
        self.beta2 = _number(where, "beta2", beta2, 0.0, 1.0)
        self.epsilon = _number(where, "epsilon", epsilon, 0.0)
        self._init_weight_decay(weight_decay, weight_decay_includes, weight_decay_excludes)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        c = conf.lamb_conf
        c.beta1, c.beta2, c.epsilon = self.beta1, self.beta2, self.epsilon
        self._AddWeightDecayConf(conf)


class Adagrad(_SingleOptimizer, _WeightDecayMixin):
    """Adagrad (``adagrad_conf``; ``torch.optim.Adagrad``'s ``lr_decay``,
    ``initial_accumulator_value``, ``eps``). A graphfront extension: OneFlow v0.6.0 has the
    conf and the ``adagrad_update`` op but no single-client class; defaults are the
    ``AdagradModelUpdateConf`` defaults. ``weight_decay`` is decoupled.

    The conf is ``AdagradModelUpdateConf`` of OneFlow v0.6.0's
    ``oneflow/core/job/job_conf.proto``; the argument style follows
    ``python/oneflow/compatible/single_client/ops/optimizer.py``.

    Args:
        lr_scheduler: a ``flow.optimizer`` scheduler (an ``LrScheduler``, e.g.
            ``PiecewiseConstantScheduler([], [0.1])``).
        lr_decay: LR decay per step as ``torch.optim.Adagrad``'s, a number >= 0 (default 0).
        initial_accumulator_value: starting value of the squared-gradient sum, a number >= 0.
        epsilon: a number >= 0 added to the denominator (default 1e-10).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        weight_decay: optional decoupled weight-decay rate, a number >= 0; None = none.
        weight_decay_includes: a regex or list of regexes; decay only variables whose name
            matches one (searched anywhere in the name).
        weight_decay_excludes: a regex or list of regexes; decay every variable except
            those matching. Exclusive with ``weight_decay_includes``.
        grad_clipping: optional ``flow.optimizer.grad_clipping.by_global_norm(clip_norm)``
            (or a ``ClipConf`` proto); None = no clipping.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.
        variables: variable op names to update: a list of str, a str, or a callable
            returning them, evaluated at ``minimize`` (default: every variable of the job).

    Raises:
        TypeError: ``lr_scheduler`` is not an ``LrScheduler``, ``grad_clipping`` or
            ``loss_scale_policy`` has the wrong type, or a numeric argument is not a number.
        ValueError: both ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0, or ``lr_decay`` / ``initial_accumulator_value`` / ``epsilon`` < 0.
            Also: ``weight_decay`` < 0, or both ``weight_decay_includes`` and
            ``weight_decay_excludes`` are given (a weight-decay pattern that is not a
            str raises TypeError).
    """

    def __init__(self, lr_scheduler, lr_decay=0.0, initial_accumulator_value=0.0, epsilon=1e-10,
                 loss_scale_factor=None, weight_decay=None, weight_decay_includes=None, weight_decay_excludes=None,
                 grad_clipping=None, train_step_lbn=None, loss_scale_policy=None,
                 variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        where = type(self).__name__
        self.lr_decay = _number(where, "lr_decay", lr_decay, 0.0)
        self.initial_accumulator_value = _number(where, "initial_accumulator_value", initial_accumulator_value, 0.0)
        self.epsilon = _number(where, "epsilon", epsilon, 0.0)
        self._init_weight_decay(weight_decay, weight_decay_includes, weight_decay_excludes)

    def _SetSpecificFieldsInOptimizerConf(self, conf):  # noqa: N802
        c = conf.adagrad_conf
        c.lr_decay, c.initial_accumulator_value, c.epsilon = (self.lr_decay, self.initial_accumulator_value,
                                                              self.epsilon)
        self._AddWeightDecayConf(conf)


class CombinedOptimizer(Optimizer):
    """Several optimizers in one train job, each over its own (disjoint) ``variables``.

    Loss scale and train step are set on the combined optimizer only.

    OneFlow v0.6.0 ``python/oneflow/compatible/single_client/ops/optimizer.py``
    (``CombinedOptimizer``).

    Args:
        optimizers: an iterable of single optimizers (SGD, Adam, ...), each without
            ``train_step_lbn`` or a loss scale; their ``variables`` must be disjoint
            (checked when ``minimize`` records them, raising ``JobBuildError``).
        loss_scale_factor: optional static loss scale, a number > 0; exclusive with
            ``loss_scale_policy``.
        train_step_lbn: optional train-step counter blob (a BlobDesc or its lbn).
        loss_scale_policy: optional ``loss_scale.static_loss_scale(...)`` or
            ``loss_scale.dynamic_loss_scale(...)``.

    Raises:
        TypeError: an item of ``optimizers`` is not a single optimizer, or
            ``loss_scale_policy`` has the wrong type.
        ValueError: an item sets ``train_step_lbn`` or a loss scale, both
            ``loss_scale_factor`` and ``loss_scale_policy`` are given, or
            ``loss_scale_factor`` <= 0.
    """

    def __init__(self, optimizers, loss_scale_factor=None, train_step_lbn=None, loss_scale_policy=None):
        super().__init__(loss_scale_factor, train_step_lbn, loss_scale_policy)
        if not isinstance(optimizers, (list, tuple)):
            raise ArgumentError(f"CombinedOptimizer: optimizers expects a list of optimizers, received "
                                f"{type(optimizers).__name__} {optimizers!r}")
        optimizers = list(optimizers)
        for i, o in enumerate(optimizers):
            if not isinstance(o, _SingleOptimizer):
                raise ArgumentError(f"CombinedOptimizer: optimizers[{i}] expects a single optimizer (SGD, Adam, ...), "
                                    f"received {o!r}")
            if o.train_step_lbn is not None or o.loss_scale_policy is not None:
                raise ArgumentError(f"CombinedOptimizer: optimizers[{i}] ({type(o).__name__}) sets train_step_lbn or a "
                                    "loss scale; set them on the CombinedOptimizer instead")
        self.optimizers = optimizers

    def Variables(self):  # noqa: N802
        """Variable op names of all the combined optimizers, in order.

        Returns:
            A list of str (may hold duplicates; disjointness is checked at ``minimize``).
        """
        return [v for o in self.optimizers for v in o.Variables()]

    def _AddOptimizerConfInTrainConf(self, train_conf):  # noqa: N802
        seen = {}
        for i, o in enumerate(self.optimizers):
            o._AddOptimizerConfInTrainConf(train_conf)
            for v in train_conf.optimizer_conf[-1].variable_op_names:
                if v in seen:
                    raise JobBuildError(f"CombinedOptimizer: variable '{v}' is given to optimizers[{seen[v]}] and "
                                        f"optimizers[{i}]; the variable lists must be disjoint")
                seen[v] = i
