"""``flow.optimizer``: optimizers and learning-rate schedulers.

An optimizer's ``minimize(loss)`` only records an ``OptimizerConf`` in the current
job's ``train_conf`` and adds the loss to ``train_conf.loss_lbn`` (OneFlow's
single-client behaviour, ``shared/reference/user_ops.md`` §2.1); the optimizer pass
turns it into learning-rate and update ops when the job is completed.
"""
from __future__ import annotations

from graphfront.core import job_conf_pb2, learning_rate_schedule_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.errors import JobBuildError, format_location, user_frame


# ------------------------------------------------------------------ schedulers

class LrScheduler:
    """Base learning-rate scheduler: fills the LR fields of an ``OptimizerConf``."""

    def __init__(self, base_lr, warmup=None):
        self.base_lr = float(base_lr)
        self.warmup = warmup

    @property
    def learning_rate_decay_conf(self):
        return None

    def SetLrFieldsInOptimizerConf(self, optimizer_conf):  # noqa: N802 - OneFlow's name
        optimizer_conf.base_learning_rate = self.base_lr
        decay = self.learning_rate_decay_conf
        if decay is not None:
            optimizer_conf.learning_rate_decay.CopyFrom(decay)
        if self.warmup is not None:
            optimizer_conf.warmup_conf.CopyFrom(self.warmup)


class PiecewiseConstantScheduler(LrScheduler):
    """``values[i]`` while ``boundaries[i-1] <= step < boundaries[i]``; base LR = values[0]."""

    def __init__(self, boundaries, values, warmup=None):
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"PiecewiseConstantScheduler: len(values) must be len(boundaries) + 1, received "
                             f"{len(values)} values for {len(boundaries)} boundaries")
        super().__init__(values[0], warmup)
        self.boundaries = list(boundaries)
        self.values = list(values)

    @property
    def learning_rate_decay_conf(self):
        conf = learning_rate_schedule_conf_pb2.LearningRateDecayConf()
        conf.piecewise_constant_conf.boundaries.extend(self.boundaries)
        conf.piecewise_constant_conf.values.extend(self.values)
        return conf


# ------------------------------------------------------------------ optimizers

def _variables_of_current_job():
    builder = jb.current()
    return [op.name for op in builder.job.net.op if jb.op_kind(op) == "variable_conf"]


GetVariablesForCurrentJob = _variables_of_current_job


class Optimizer:
    """Base optimizer: ``minimize(loss)`` records this optimizer in the train job."""

    def __init__(self, lr_scheduler, loss_scale_factor=None, grad_clipping=None, train_step_lbn=None,
                 loss_scale_policy=None, variables=GetVariablesForCurrentJob):
        if not isinstance(lr_scheduler, LrScheduler):
            raise TypeError(f"{type(self).__name__}: lr_scheduler must be a flow.optimizer scheduler such as "
                            f"PiecewiseConstantScheduler([], [0.1]), received {lr_scheduler!r}")
        self.lr_scheduler = lr_scheduler
        self.loss_scale_factor = loss_scale_factor
        self.grad_clipping = grad_clipping
        self.train_step_lbn = train_step_lbn
        self.loss_scale_policy = loss_scale_policy
        self.variables = variables

    def Variables(self):  # noqa: N802
        v = self.variables
        return list(v()) if callable(v) else list(v)

    def _fill(self, conf):
        """Set the algorithm's oneof case of ``conf`` (subclasses)."""
        raise NotImplementedError

    def optimizer_conf(self) -> job_conf_pb2.OptimizerConf:
        conf = job_conf_pb2.OptimizerConf()
        conf.variable_op_names.extend(self.Variables())
        self.lr_scheduler.SetLrFieldsInOptimizerConf(conf)
        if self.grad_clipping is not None:
            conf.clip_conf.CopyFrom(self.grad_clipping)
        self._fill(conf)
        return conf

    def minimize(self, loss):
        """Record this optimizer and ``loss`` (a blob or a list of blobs) in the train job."""
        loc = user_frame()
        builder = jb.current()
        if not builder.is_train:
            raise JobBuildError(f"{type(self).__name__}.minimize: job '{builder.job_name}' is a predict job; use "
                                f'@flow.global_function(type="train"){format_location(loc)}')
        losses = list(loss) if isinstance(loss, (list, tuple)) else [loss]
        for blob in losses:
            if not isinstance(blob, BlobDesc):
                raise JobBuildError(f"{type(self).__name__}.minimize expects a loss blob, received "
                                    f"{type(blob).__name__}{format_location(loc)}")
            if not blob.dtype.is_floating_point:
                raise JobBuildError(f"{type(self).__name__}.minimize: loss '{blob.lbn}' must be floating point, "
                                    f"received {blob.dtype.name}{format_location(loc)}")
        tc = builder.job.job_conf.train_conf
        tc.optimizer_conf.add().CopyFrom(self.optimizer_conf())
        tc.loss_lbn.extend(b.lbn for b in losses)
        if self.train_step_lbn:
            tc.train_step_lbn = self.train_step_lbn
        if self.loss_scale_factor is not None:
            tc.loss_scale_factor = float(self.loss_scale_factor)


class SGD(Optimizer):
    """Stochastic gradient descent; ``momentum=0`` -> ``sgd_update``, else ``momentum_update``
    with ``beta = momentum`` (OneFlow's default momentum is 0.9)."""

    def __init__(self, lr_scheduler, loss_scale_factor=None, momentum=0.9, grad_clipping=None,
                 train_step_lbn=None, loss_scale_policy=None, variables=GetVariablesForCurrentJob):
        super().__init__(lr_scheduler, loss_scale_factor, grad_clipping, train_step_lbn, loss_scale_policy,
                         variables)
        self.momentum = momentum

    def _fill(self, conf):
        if self.momentum == 0:
            conf.naive_conf.SetInParent()
        else:
            conf.momentum_conf.beta = float(self.momentum)
