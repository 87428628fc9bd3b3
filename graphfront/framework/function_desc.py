"""The parts of ``FunctionConfig`` that OneFlow reaches through attributes:
``config.train.*`` (the old-style optimizer settings and gradient accumulation) and
``config.function_desc`` (the settings as recorded).

OneFlow v0.6.0 (``oneflow/python/framework/function_util.py``): ``config.train`` is a
namespace whose setters write ``JobConfigProto.train_conf`` (``primary_lr``,
``secondary_lr``, ``model_update_conf``, ``loss_scale_factor``) and
``num_gradient_accumulation_steps``; setting any of them makes the job a train job.
``config.function_desc.<setting>`` reads a setting back, ``.job_config_proto`` is the
proto itself.
"""
from __future__ import annotations

import math
import numbers
import warnings

from google.protobuf import json_format

from graphfront.core import job_conf_pb2
from graphfront.framework.errors import ArgumentError


class TrainConfig:
    """``FunctionConfig().train``: setters of the train part of the job config."""

    def __init__(self, proto: job_conf_pb2.JobConfigProto):
        self._proto = proto

    def primary_lr(self, value):
        """Learning rate of the optimizer built from :meth:`model_update_conf`."""
        self._proto.train_conf.primary_lr = _number("train.primary_lr", value)

    def secondary_lr(self, value):
        """Recorded (OneFlow's legacy second learning rate; graphfront's optimizer uses primary_lr)."""
        self._proto.train_conf.secondary_lr = _number("train.secondary_lr", value)

    def model_update_conf(self, value):
        """The optimizer as a ``NormalModelUpdateOpUserConf`` (a dict or the proto):
        ``{"naive_conf": {}}``, ``{"momentum_conf": {"beta": 0.9}, "warmup_conf": ...}`` ...
        Used when the job calls no ``flow.optimizer.*.minimize`` (its losses come from
        ``flow.losses.add_loss``): every trainable variable is updated with it at ``primary_lr``.
        Raises ArgumentError (a TypeError and a ValueError) for a value of another type or a
        dict with unknown fields (protobuf's ParseError quoted)."""
        self._proto.train_conf.model_update_conf.CopyFrom(
            message_arg(value, job_conf_pb2.NormalModelUpdateOpUserConf, "train.model_update_conf"))

    def loss_scale_factor(self, value):
        """Static loss scale: the loss gradient is seeded with ``value`` and the variable
        gradients divided by it."""
        self._proto.train_conf.loss_scale_factor = _number("train.loss_scale_factor", value)

    def optimizer_placement_optimization_mode(self, mode):
        """``FunctionConfig().optimizer_placement_optimization_mode`` under the other name OneFlow
        registers for it; recorded only, and it does not make the job a train job."""
        record_setting(self._proto, "train.optimizer_placement_optimization_mode",
                       "optimizer_placement_optimization_mode", mode)

    def optimizer_placement_optimization_threshold(self, value):
        """``FunctionConfig().optimizer_placement_optimization_threshold`` under the other name
        OneFlow registers for it; recorded only, and it does not make the job a train job."""
        record_setting(self._proto, "train.optimizer_placement_optimization_threshold",
                       "optimizer_placement_optimization_threshold", value)

    def num_gradient_accumulation_steps(self, value):
        """Split every fed batch into ``value`` micro-batches along dim 0: forward and
        backward run per micro-batch, the gradients are summed and one update is applied
        per call with their mean (OneFlow's GradientAccumulationRewritePass,
        ``oneflow/core/job_rewriter/gradient_accumulation_rewrite_pass.cpp``). Returned
        blobs come back concatenated over the micro-batches along dim 0."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ArgumentError(f"FunctionConfig.train.num_gradient_accumulation_steps expects a positive int, "
                                f"received {value!r}")
        self._proto.num_gradient_accumulation_steps = int(value)
        self._proto.train_conf.SetInParent()


class FunctionDescView:
    """``FunctionConfig().function_desc``: the recorded settings, read back by name."""

    def __init__(self, config):
        self._config = config

    @property
    def job_config_proto(self) -> job_conf_pb2.JobConfigProto:
        return self._config.job_config_proto

    def IsTrainable(self) -> bool:  # noqa: N802 - OneFlow's name
        return self.job_config_proto.HasField("train_conf")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        field = self._config._FIELD_ALIASES.get(name, name)
        if field not in job_conf_pb2.JobConfigProto.DESCRIPTOR.fields_by_name:
            raise AttributeError(f"FunctionConfig.function_desc has no setting {name!r}")
        return getattr(self.job_config_proto, field)


class StaticMemAllocPolicies:
    """``FunctionConfig().static_mem_alloc_policy_white_list`` (and ``.static_mem_alloc_algo_white_list``):
    the static memory-allocation policies of OneFlow's memory planner, recorded in
    ``JobConfigProto.memory_allocation_algorithm_conf`` (OneFlow v0.6.0
    ``python/oneflow/compatible/single_client/framework/function_util.py``).

    graphfront's runtime allocates through PyTorch's caching allocator and does not act on
    them (``add`` and ``remove`` warn so). A policy is one of the strings the ``policy_*``
    methods return; another raises ArgumentError.
    """

    POLICIES = ("use_mem_size_first_algo", "use_mutual_exclusion_first_algo", "use_time_line_algo")

    def __init__(self, proto: job_conf_pb2.JobConfigProto):
        self._proto = proto

    def policy_mem_size_first(self) -> str:
        return "use_mem_size_first_algo"

    def policy_mutual_exclusion_first(self) -> str:
        return "use_mutual_exclusion_first_algo"

    def policy_time_line(self) -> str:
        return "use_time_line_algo"

    def show(self) -> list:
        """The three policy names."""
        return list(self.POLICIES)

    def has(self, policy) -> bool:
        """Whether ``policy`` is on (the proto's defaults: the first two)."""
        return getattr(self._proto.memory_allocation_algorithm_conf, self._checked(policy))

    def add(self, policy) -> None:
        record_setting(self._proto.memory_allocation_algorithm_conf, "static_mem_alloc_policy_white_list.add",
                       self._checked(policy), True)

    def remove(self, policy) -> None:
        record_setting(self._proto.memory_allocation_algorithm_conf, "static_mem_alloc_policy_white_list.remove",
                       self._checked(policy), False)

    def _checked(self, policy):
        if policy not in self.POLICIES:
            raise ArgumentError(f"FunctionConfig.static_mem_alloc_policy_white_list expects one of {self.POLICIES}, "
                                f"received {policy!r}")
        return policy


def record_setting(proto, name: str, field: str, value) -> None:
    """Write ``value`` into ``proto``'s field ``field`` for the setting ``FunctionConfig.<name>``,
    which graphfront's runtime does not act on: it shows in the Job proto, and a UserWarning
    (pointing at the caller's caller) says so.

    Raises:
        ArgumentError: ``value`` is of a type the field cannot hold (protobuf's message quoted).
    """
    try:
        setattr(proto, field, value)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"FunctionConfig.{name}: {e}") from None
    warnings.warn(f"FunctionConfig.{name} is recorded in the job config ({field} = {value!r}); graphfront's "
                  "runtime does not act on it", UserWarning, stacklevel=3)


def message_arg(value, message_type, where):
    """A setting's ``value`` as a ``message_type`` protobuf message: the message itself, or
    its dict form (``json_format.ParseDict``).

    Raises:
        ArgumentError: (a TypeError and a ValueError) naming ``FunctionConfig.<where>``: a value
            of another type, or a dict that does not fit the message (protobuf's ParseError quoted).
    """
    if isinstance(value, message_type):
        return value
    if not isinstance(value, dict):
        raise ArgumentError(f"FunctionConfig.{where} expects {message_type.__name__} (or its dict form), received "
                            f"{type(value).__name__} {value!r}")
    try:
        return json_format.ParseDict(value, message_type())
    except json_format.ParseError as e:
        raise ArgumentError(f"FunctionConfig.{where}: the dict does not fit {message_type.__name__}: {e}") from None


def _number(where, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ArgumentError(f"FunctionConfig.{where} expects a finite number, received {value!r}")
    return float(value)
