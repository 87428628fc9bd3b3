"""Session, ``global_function`` and ``FunctionConfig``.

``@flow.global_function(type="train"|"predict")`` registers a job with the default
Session. The first call of any job starts the session (TryInit): every registered job
is compiled — its body runs once inside a ``JobBuildAndInferCtx``, the Job is completed
by the passes and lowered to a plan — and the variables are initialized. Each call
then is a ``LazyRun``: feeds are checked against the placeholders, the plan runs, and
results come back as the return annotation asks. Unlike OneFlow, a job decorated
after the session started is compiled on its first call.
"""
from __future__ import annotations

import builtins
import copy
import functools
from typing import Callable
import inspect
import itertools
import math
import numbers
import re
import threading
import typing
import warnings

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework import annotations as tp
from graphfront.core import job_conf_pb2, job_pb2, job_set_pb2, op_conf_pb2
from graphfront.core.descriptor_compat import is_repeated
from graphfront.framework import eager
from graphfront.framework import job_builder as jb
from graphfront.framework import scope_symbols as scope_mod
from graphfront.framework.blob_desc import BlobDesc, is_int
from graphfront.framework.function_desc import StaticMemAllocPolicies, message_arg, record_setting
from graphfront.framework.placement_scope import LogicalView, PlacementScope
from graphfront.framework.errors import (ArgumentError, DeviceMemoryError, FeedError, GraphfrontError, JobBuildError,
                                        format_location, user_frame)
from graphfront.ops.builder import unique_str
from graphfront.passes import complete
from graphfront.passes.boxing import parallel_num
from graphfront.runtime.choice import LoweringRequest, choose
from graphfront.runtime.distributed import release_group
from graphfront.runtime.grad_accumulation import micro_batch_placeholders
from graphfront.runtime.lowering import check_mode
from graphfront.runtime.walk import device_of
from graphfront.runtime.variable_store import VariableStore, cpu_memory_formats, default_initializer

_session_ids = itertools.count()


class FunctionConfig:
    """Per-job configuration (``flow.FunctionConfig()``); setters are methods.

    Supported: ``default_data_type(dtype)``, ``default_logical_view(view)``,
    ``default_placement_scope(flow.scope.placement(...))``,
    ``default_initializer_conf(dict or InitializerConf)``, ``allow_cpu_return_op(bool)``,
    ``enable_cuda_graph(bool)`` (graphfront's switch for CUDA-graph replay on GPU) and
    ``enable_passes(bool)`` (cleanup/fusion passes; autograd and optimizer always run) and
    ``compile_mode("plan" | "native" | "xla" | "onnxruntime" | "auto")`` (graphfront's switch:
    the lowering of the job, see :mod:`graphfront.runtime.lowering`), OneFlow's
    ``use_xla_jit(bool)`` and ``use_tensorrt(bool)`` with ``tensorrt.*`` (recorded), ``enable_qat(bool)`` with ``qat.*``
    (quantization-aware training) and ``enable_ssp(bool)`` (stale variable reads, one stage).
    """

    def __init__(self):
        self.job_config_proto = job_conf_pb2.JobConfigProto(job_name="")
        self._placement_scope = None
        self._allow_cpu_return_op = True
        self._logical_view = "consistent"
        self._cuda_graph = True
        self._passes = True
        self._compile_mode = None  # (unset: "plan", unless an xrt switch chooses)

    def default_data_type(self, value) -> None:
        """Set the job's default data type (``JobConfigProto.default_data_type``).

        Variables and placeholders without a dtype use it (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``).

        Args:
            value: graphfront dtype, e.g. ``flow.float32``.

        Raises:
            TypeError: ``value`` is not a graphfront dtype.
        """
        if not isinstance(value, _dt.dtype):
            raise ArgumentError(f"FunctionConfig.default_data_type expects a graphfront dtype, received {value!r}")
        self.job_config_proto.default_data_type = value.proto

    def default_logical_view(self, value) -> None:
        """Set the job's logical view: consistent (default) or mirrored.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``.

        Args:
            value: ``flow.scope.consistent_view()`` or ``flow.scope.mirrored_view()``.

        Raises:
            TypeError: ``value`` is neither.
        """
        if not isinstance(value, LogicalView):
            raise ArgumentError("FunctionConfig.default_logical_view expects flow.scope.consistent_view() or "
                                f"flow.scope.mirrored_view(), received {value!r}")
        self._logical_view = value.kind

    def default_distribute_strategy(self, value) -> None:
        """Deprecated alias of :meth:`default_logical_view` (OneFlow v0.6.0
        ``function_util.py`` keeps the old name: it warns and sets the logical view).

        Args:
            value: ``flow.scope.consistent_view()`` or ``flow.scope.mirrored_view()`` (the
                deprecated ``flow.distribute.consistent_strategy()`` /
                ``mirrored_strategy()`` return the same).

        Raises:
            TypeError: ``value`` is neither.
        """
        warnings.warn("FunctionConfig.default_distribute_strategy is deprecated, use default_logical_view instead",
                      DeprecationWarning, stacklevel=2)
        self.default_logical_view(value)

    def default_placement_scope(self, value) -> None:
        """Set the placement the job's ops default to.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``.

        Args:
            value: ``flow.scope.placement(device_tag, machine_device_ids)``.

        Raises:
            TypeError: ``value`` is not a placement scope.
        """
        if not isinstance(value, PlacementScope):
            raise ArgumentError("FunctionConfig.default_placement_scope expects flow.scope.placement(tag, ids), "
                                f"received {value!r}")
        self._placement_scope = value

    def default_initializer_conf(self, value) -> None:
        """Set the initializer of variables created without one.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``.

        Args:
            value: ``InitializerConf`` or its dict form, e.g. ``{"constant_conf": {"value": 0.0}}``.

        Raises:
            ArgumentError: (a TypeError and a ValueError) ``value`` is neither an
                ``InitializerConf`` nor a dict of one (protobuf's ParseError quoted).
        """
        from graphfront.core import initializer_conf_pb2
        self.job_config_proto.default_initializer_conf.CopyFrom(
            message_arg(value, initializer_conf_pb2.InitializerConf, "default_initializer_conf"))

    def allow_cpu_return_op(self, value) -> None:
        """Record whether the job's return ops may run on the CPU (default True).

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``.

        Args:
            value: bool (truthiness is used).
        """
        self._allow_cpu_return_op = bool(value)

    def enable_cuda_graph(self, value=True) -> None:
        """Switch CUDA-graph replay of the plan on GPU (graphfront setting; default on).

        Args:
            value: bool (truthiness is used); default True.
        """
        self._cuda_graph = bool(value)

    def cudnn_conv_heuristic_search_algo(self, value=True) -> None:
        """Whether cuDNN picks each convolution's algorithm by its heuristics (True, OneFlow's
        default) or by timing every algorithm on the first run (False; torch's
        ``cudnn.benchmark``, set while the job's steps run).

        OneFlow v0.6.0 ``JobConfigProto.cudnn_conv_heuristic_search_algo``.

        Args:
            value: bool (truthiness is used); default True.
        """
        self.job_config_proto.cudnn_conv_heuristic_search_algo = bool(value)

    def cudnn_conv_use_deterministic_algo_only(self, value=True) -> None:
        """Whether cuDNN convolutions use deterministic algorithms only (torch's
        ``cudnn.deterministic``, set while the job's steps run; OneFlow's default False).

        OneFlow v0.6.0 ``JobConfigProto.cudnn_conv_use_deterministic_algo_only``.

        Args:
            value: bool (truthiness is used); default True.
        """
        self.job_config_proto.cudnn_conv_use_deterministic_algo_only = bool(value)

    def enable_passes(self, value=True) -> None:
        """Switch the cleanup and fusion passes (graphfront setting; default on).

        Autograd and the optimizer passes always run.

        Args:
            value: bool (truthiness is used); default True.
        """
        self._passes = bool(value)

    def enable_fuse_add_to_output(self, value=True) -> None:
        """Whether the add-to-output fusion runs for the job (``JobConfigProto.enable_fuse_add_to_output``,
        OneFlow's ``FuseAddToOutputPass``): an ``add_n`` of two blobs, one of them made by an op
        taking an ``_add_to_output`` input (matmuls, dropout, normalization, the layer-norm
        and conv data gradients) and read by nothing else, becomes that op adding the other
        blob in its own kernel. Unset, graphfront runs it as its other fusions (OneFlow's
        default is off; OneFlow-Benchmark's ResNet-50 and BERT jobs turn it on); ``False``
        keeps every ``add_n``. Results differ from the unfused job by float rounding at most.

        Args:
            value: bool; default True.

        Raises:
            TypeError: ``value`` is not a bool.
        """
        if not isinstance(value, bool):
            raise ArgumentError(f"FunctionConfig.enable_fuse_add_to_output expects a bool, received {value!r}")
        self.job_config_proto.enable_fuse_add_to_output = value

    @property
    def train(self):
        """Training settings of the job.

        ``config.train.primary_lr(...)``, ``.model_update_conf(...)``,
        ``.num_gradient_accumulation_steps(k)`` ...

        Setting any of them makes the job a train job (``JobConfigProto.train_conf``; OneFlow
        v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``).

        Returns:
            TrainConfig: setters writing this config's ``train_conf`` (see
            :mod:`graphfront.framework.function_desc`).
        """
        from graphfront.framework.function_desc import TrainConfig
        return TrainConfig(self.job_config_proto)

    @property
    def function_desc(self):
        """The recorded settings, read back by name (``config.function_desc.enable_inplace``).

        Returns:
            FunctionDescView: a read-only view of this config.
        """
        from graphfront.framework.function_desc import FunctionDescView
        return FunctionDescView(self)

    def indexed_slices_optimizer_conf(self, value) -> None:
        """Update only the gathered rows of the variables read through ``gather`` by the listed ops.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``.

        The ops are named in ``value["include_op_names"]["op_name"]``; see
        :mod:`graphfront.passes.indexed_slices`.

        Args:
            value: ``IndexedSlicesOptimizerConf`` or its dict form.

        Raises:
            ArgumentError: (a TypeError and a ValueError) ``value`` is neither an
                ``IndexedSlicesOptimizerConf`` nor a dict of one (protobuf's ParseError quoted).
        """
        self.job_config_proto.indexed_slices_optimizer_conf.CopyFrom(
            message_arg(value, job_conf_pb2.IndexedSlicesOptimizerConf, "indexed_slices_optimizer_conf"))

    def enable_auto_mixed_precision(self, value=True) -> None:
        """Run the job's white-listed ops (matmul, conv2d ...) in float16/bfloat16 with float32 master weights.

        The ``auto_mixed_precision`` pass (:mod:`graphfront.passes.amp`), after OneFlow's
        (``JobConfigProto.enable_auto_mixed_precision``; OneFlow v0.6.0
        ``python/oneflow/compatible/single_client/framework/function_util.py``).

        Args:
            value: bool (truthiness is used); default True.
        """
        self.job_config_proto.enable_auto_mixed_precision = bool(value)

    def mixed_precision_data_type(self, value) -> None:
        """Set the low-precision type of auto mixed precision (job flag ``mixed_precision_data_type``).

        Default: float16 for jobs with CUDA ops, else bfloat16.

        Args:
            value: ``flow.float16`` or ``flow.bfloat16``.

        Raises:
            TypeError: ``value`` is another value.
        """
        if value not in (_dt.float16, _dt.bfloat16):
            raise ArgumentError("FunctionConfig.mixed_precision_data_type expects flow.float16 or flow.bfloat16, "
                                f"received {value!r}")
        self.job_config_proto.flag_name2flag_value["mixed_precision_data_type"].at_data_type = value.proto

    def compile_mode(self, mode) -> None:
        """Set how the job is lowered (graphfront setting).

        ``"plan"`` (default): generated Python calling one PyTorch kernel per op; ``"native"``:
        the whole step compiled by TorchInductor into fused C++/Triton code on its first call,
        cached on disk by job digest (see :mod:`graphfront.runtime.native`); ``"xla"``: the
        whole step lowered to JAX through the ops' ``xla`` rules and compiled by XLA, cached
        on disk (see :mod:`graphfront.runtime.xla`; needs ``pip install graphfront[xla]``);
        ``"onnxruntime"``: a CPU predict job converted to ONNX and run by onnxruntime (numpy
        in and out; see :mod:`graphfront.runtime.onnxruntime_plan`; the job's first call
        raises JobBuildError for a train job or an op without an ONNX converter); ``"auto"``:
        ``"onnxruntime"`` where onnxruntime can run the job, else ``"plan"`` (the compiled
        job's ``fallback_reason`` says why), as ``SessionOption.compile_mode``. Only
        ``"plan"`` (and ``"auto"``, which then runs the plan) composes with several devices
        and with gradient accumulation (see :mod:`graphfront.runtime.choice`).

        Args:
            mode: one of :data:`graphfront.runtime.lowering.LOWERINGS`: ``"plan"``,
                ``"native"``, ``"xla"``, ``"onnxruntime"`` or ``"auto"``.

        Raises:
            ValueError: ``mode`` is another value.
            JobBuildError: at the job's first call, when the mode cannot run the job, e.g.
                ``"xla"`` on several devices or with gradient accumulation (the message names both).
        """
        self._compile_mode = check_mode(mode, "FunctionConfig.compile_mode")

    def enable_ssp(self, value=True) -> None:
        """Stale-synchronous (SSP) training of the job (job flag ``enable_ssp``, bool).

        OneFlow v0.6.0 partitions a train job into pipeline stages run stale-synchronously
        across devices: a stage's forward and backward read its variables as the step
        ``ssp_num_stages - ssp_stage_id`` steps earlier left them (scope attributes set with
        ``flow.experimental.scope.config``; the last stage reads current ones). graphfront keeps that arithmetic: the
        :mod:`graphfront.passes.ssp` pass gives every variable with a gradient an
        ``ssp_variable_proxy`` of that buffer size. It runs the job as one stage, though, with
        nothing overlapped (one UserWarning per process says so). Building a train job with
        ``enable_ssp(True)`` whose variables lack those attributes raises ``JobBuildError``.

        Args:
            value: bool; default True.

        Raises:
            TypeError: ``value`` is not a bool.
        """
        if not isinstance(value, bool):
            raise ArgumentError(f"FunctionConfig.enable_ssp expects a bool, received {value!r}")
        self.job_config_proto.flag_name2flag_value["enable_ssp"].at_bool = value
        if value:
            _warn_once("enable_ssp", "FunctionConfig.enable_ssp(True): variables are read through SSP proxies "
                       "(stale by ssp_num_stages - ssp_stage_id steps) but graphfront runs the job as one stage, "
                       "without overlapping stages")

    def ssp_partition_strategy(self, value) -> None:
        """Record the SSP stage partition strategy (job flag ``ssp_partition_strategy``, str;
        OneFlow's default ``"naive_sequential"``). Recorded only, as :meth:`enable_ssp`.

        Raises:
            TypeError: ``value`` is not a str.
        """
        if not isinstance(value, str):
            raise ArgumentError(f"FunctionConfig.ssp_partition_strategy expects a str, received {value!r}")
        self.job_config_proto.flag_name2flag_value["ssp_partition_strategy"].at_string = value

    def enable_qat(self, value=True) -> None:
        """Train with quantization-aware training (``JobConfigProto.enable_quantization_aware_training``).

        The ``quantization_aware_training`` pass (:mod:`graphfront.passes.qat`) inserts
        fake-quantization ops on the weights and inputs of conv and matmul ops, configured by
        ``config.qat.*`` (:class:`QatSettings`).

        Args:
            value: bool; default True.

        Raises:
            TypeError: ``value`` is not a bool.
        """
        if not isinstance(value, bool):
            raise ArgumentError(f"FunctionConfig.enable_qat expects a bool, received {value!r}")
        self.job_config_proto.enable_quantization_aware_training = value

    @property
    def qat(self) -> "QatSettings":
        """The quantization-aware training settings: ``config.qat.symmetric(False)`` ... (:class:`QatSettings`)."""
        return QatSettings(self.job_config_proto.qat_config)

    @property
    def tensorrt(self) -> "TensorRTSettings":
        """The TensorRT settings: ``config.tensorrt.use_int8()`` ... (:class:`TensorRTSettings`)."""
        return TensorRTSettings(self.job_config_proto.xrt_config.tensorrt_config)

    def use_xla_jit(self, value=True) -> None:
        """Run the job through the XLA lowering (``JobConfigProto.xrt_config.use_xla_jit``).

        Where every op of the job has an ``xla`` rule the compiled job runs in
        ``compile_mode("xla")`` (its ``compile_mode`` attribute says ``"xla"``); otherwise,
        as OneFlow ran the ops XLA could not take on its own kernels, it runs the plan and
        says why in ``fallback_reason`` and a UserWarning (see :mod:`graphfront.runtime.choice`).

        Args:
            value: bool.

        Raises:
            TypeError: ``value`` is not a bool.
            JobBuildError: at the job's first call, when ``use_tensorrt(True)`` or
                ``compile_mode`` is set as well (the message names both).
        """
        self._xrt_switch("use_xla_jit", value)

    def use_tensorrt(self, value=True) -> None:
        """Run the job through the fastest inference lowering installed
        (``JobConfigProto.xrt_config.use_tensorrt``).

        That is onnxruntime (``compile_mode("onnxruntime")``) with its TensorRT execution
        provider, else its CUDA one, else its CPU one; the compiled job's ``compile_mode``
        and ``provider`` say which ran, and a UserWarning does when it is not TensorRT. A job
        onnxruntime cannot run (a train job: OneFlow's TensorRT engine ran inference only;
        an op without an ONNX converter; a ``flow.watch``) runs the plan, with the reason in
        ``fallback_reason`` and a UserWarning.

        Args:
            value: bool.

        Raises:
            TypeError: ``value`` is not a bool.
            JobBuildError: at the job's first call, when ``use_xla_jit(True)`` or
                ``compile_mode`` is set as well (the message names both).
        """
        self._xrt_switch("use_tensorrt", value)

    def use_openvino(self, value=True) -> None:
        """Recorded in ``JobConfigProto.xrt_config.use_openvino`` (OneFlow's OpenVINO inference
        engine). graphfront has no OpenVINO lowering: the job runs as it would without the
        setting, and a UserWarning says so (on a CPU OpenVINO measured no faster than
        onnxruntime, which ``use_tensorrt`` runs).

        Raises:
            ArgumentError: ``value`` is not a bool.
        """
        if not isinstance(value, bool):
            raise ArgumentError(f"FunctionConfig.use_openvino expects a bool, received {value!r}")
        record_setting(self.job_config_proto.xrt_config, "use_openvino", "use_openvino", value)

    def enable_non_distributed_optimizer(self, value=True) -> None:
        """Older switch of the optimizer placement: ``True`` sets
        ``JobConfigProto.optimizer_placement_optimization_mode`` to ``"non_distributed"``,
        ``False`` leaves the config as it is (OneFlow v0.6.0
        ``python/oneflow/compatible/single_client/framework/function_util.py``,
        ``set_enable_non_distributed_optimizer``).

        Recorded only, as the other optimizer-placement settings: graphfront updates every
        variable where it lives (a UserWarning says so when ``value`` is true).

        Args:
            value: bool (truthiness is used); default True.
        """
        if value:
            self.optimizer_placement_optimization_mode("non_distributed")

    def cudnn_conv_enable_true_half(self, value=True) -> None:
        """OneFlow's inverse name of ``cudnn_conv_enable_pseudo_half``: records
        ``cudnn_conv_enable_pseudo_half = not value`` (also spelled
        ``enable_true_half_config_when_conv``). Recorded only (a UserWarning says so).

        Raises:
            ArgumentError: ``value`` is not a bool.
        """
        if not isinstance(value, bool):
            raise ArgumentError(f"FunctionConfig.cudnn_conv_enable_true_half expects a bool, received {value!r}")
        record_setting(self.job_config_proto, "cudnn_conv_enable_true_half", "cudnn_conv_enable_pseudo_half", not value)

    enable_true_half_config_when_conv = cudnn_conv_enable_true_half

    @property
    def static_mem_alloc_policy_white_list(self) -> StaticMemAllocPolicies:
        """The memory planner's policies, recorded only (:class:`~graphfront.framework.function_desc.StaticMemAllocPolicies`)."""
        return StaticMemAllocPolicies(self.job_config_proto)

    static_mem_alloc_algo_white_list = static_mem_alloc_policy_white_list

    def _xrt_switch(self, name, value):
        if not isinstance(value, bool):
            raise ArgumentError(f"FunctionConfig.{name} expects a bool, received {value!r}")
        setattr(self.job_config_proto.xrt_config, name, value)

    # OneFlow setter names that differ from their JobConfigProto field
    _FIELD_ALIASES = {"enable_reused_mem": "enable_reuse_mem",
                      "enable_cudnn_conv_pseudo_half": "cudnn_conv_enable_pseudo_half"}

    def __getattr__(self, name):
        """Any other OneFlow setter named after a scalar ``JobConfigProto`` field writes that
        field (so it shows in the Job proto); graphfront's runtime does not act on those
        settings, which a UserWarning says when a setter is used."""
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _DEPRECATED_NO_OPS:
            def deprecated(value=True):
                warnings.warn(f"FunctionConfig.{name} has been deprecated and has no effect (as in OneFlow v0.6.0)",
                              DeprecationWarning, stacklevel=2)
            return deprecated
        field = self._FIELD_ALIASES.get(name, name)
        desc = job_conf_pb2.JobConfigProto.DESCRIPTOR.fields_by_name.get(field)
        if desc is None or desc.message_type is not None or is_repeated(desc):
            raise AttributeError(f"FunctionConfig has no setting {name!r} in graphfront; supported: "
                                 "default_data_type, default_logical_view, default_placement_scope, "
                                 "default_initializer_conf, allow_cpu_return_op, enable_cuda_graph, enable_passes, "
                                 "and the scalar JobConfigProto fields (recorded only)")

        def setter(value=True):
            record_setting(self.job_config_proto, name, field, value)
        return setter


#: OneFlow v0.6.0's settings that only say they are deprecated and do nothing
_DEPRECATED_NO_OPS = frozenset({
    "enable_nccl", "use_nccl_inter_node_communication", "use_boxing_v2", "enable_all_reduce_group",
    "all_reduce_group_num", "all_reduce_lazy_ratio", "all_reduce_group_min_mbyte", "all_reduce_group_size_warmup",
    "all_reduce_fp16", "disable_all_reduce_sequence", "non_distributed_optimizer_group_size_mbyte",
    "enable_keep_header_only", "enable_float_compute_for_half_gemm", "enable_inplace_in_reduce_struct"})

_WARNED = set()


def _warn_once(key, message):
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


#: the values ``config.qat.target_backend`` accepts (all but "cambricon" use Google's formula)
QAT_TARGET_BACKENDS = ("", "cambricon", "tensorrt7", "tensorrt")


class QatSettings:
    """``config.qat``: setters of the job's ``QatConfig`` (OneFlow v0.6.0 ``function_util.py``).

    * ``per_channel_weight_quantization(bool)``: one scale per output channel of a weight
      (default False: one per tensor);
    * ``symmetric(bool)``: symmetric quantization (zero point 0, default True) or affine;
    * ``moving_min_max_momentum(float)``: momentum of the activations' moving min/max (0.95);
    * ``moving_min_max_stop_update_after_iters(int)``: train steps after which the moving
      min/max stops updating;
    * ``target_backend(str)``: ``""`` (Google's formula), ``"cambricon"`` (the cambricon
      power-of-two formula), or ``"tensorrt7"`` / ``"tensorrt"`` (OneFlow's names for QAT
      exported to TensorRT through ONNX: Google's formula, as ``""``).

    Each raises TypeError for a value of another type (ValueError for an unknown backend).
    """

    def __init__(self, conf):
        self._conf = conf

    def _set(self, field, value, types):
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise ArgumentError(f"FunctionConfig.qat.{field} expects {' or '.join(t.__name__ for t in types)}, "
                                f"received {value!r}")
        setattr(self._conf, field, value)

    def per_channel_weight_quantization(self, value=True) -> None:
        self._set("per_channel_weight_quantization", value, (bool,))

    def symmetric(self, value=True) -> None:
        self._set("symmetric", value, (bool,))

    def moving_min_max_momentum(self, value) -> None:
        self._set("moving_min_max_momentum", float(value) if isinstance(value, numbers.Real) and not
                  isinstance(value, bool) else value, (float,))

    def moving_min_max_stop_update_after_iters(self, value) -> None:
        self._set("moving_min_max_stop_update_after_iters", int(value) if is_int(value) else value, (int,))

    def target_backend(self, value) -> None:
        self._set("target_backend", value, (str,))
        if value not in QAT_TARGET_BACKENDS:
            self._conf.target_backend = ""
            raise ArgumentError(f"FunctionConfig.qat.target_backend expects one of {QAT_TARGET_BACKENDS}, "
                                f"received {value!r}")


class TensorRTSettings:
    """``config.tensorrt``: setters of the job's ``xrt_config.tensorrt_config`` (OneFlow v0.6.0
    ``function_util.py``): ``use_fp16(bool)``, ``use_int8(bool)`` (default True when called
    without a value) and ``int8_calibration(str)``, the path of an INT8 calibration table.

    They are recorded in the Job proto. graphfront's TensorRT lowering
    (``use_tensorrt(True)``: onnxruntime with its TensorRT execution provider where
    installed) runs the job in float32 all the same: it builds no FP16 or INT8 engine and
    reads no calibration table; one UserWarning per process says so when FP16 or INT8 is
    asked for. Each setter raises TypeError for a value of another type.
    """

    def __init__(self, conf):
        self._conf = conf

    def _set(self, field, value, kind):
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
            raise ArgumentError(f"FunctionConfig.tensorrt.{field} expects a {kind.__name__}, received {value!r}")
        setattr(self._conf, field, value)
        if value and kind is bool:
            _warn_once(f"tensorrt.{field}", f"FunctionConfig.tensorrt.{field}(True) is recorded in "
                       "xrt_config.tensorrt_config; graphfront's TensorRT lowering runs the job in float32")

    def use_fp16(self, value=True) -> None:
        self._set("use_fp16", value, bool)

    def use_int8(self, value=True) -> None:
        self._set("use_int8", value, bool)

    def int8_calibration(self, value) -> None:
        self._set("int8_calibration", value, str)


def trace(session, gf, placeholders=None, make_builder=jb.JobBuilder):
    """Run a job function once inside a JobBuildAndInferCtx; return ``(builder, returned)``.

    Placeholders (``gf.placeholders`` unless given) become ``input_conf`` ops and every
    returned blob a ``return_conf`` op. ``make_builder(job, scope, session)`` makes the
    builder (an eager call's runs every op it adds).
    """
    job = job_pb2.Job()
    job.job_conf.CopyFrom(gf.config.job_config_proto)
    job.job_conf.job_name = gf.name
    train = gf.type == "train" if gf.type is not None else gf.config.job_config_proto.HasField("train_conf")
    if train:
        job.job_conf.train_conf.SetInParent()
    else:  # (the oneof drops any train settings: they do nothing in a predict job)
        job.job_conf.predict_conf.SetInParent()
    builder = make_builder(job, session.default_scope(gf.config), session)
    builder.logical_view = gf.config._logical_view  # (flow.scope.mirrored_view_enabled())
    with jb.activate(builder):
        inputs = [_input_blob(builder, ph) for ph in placeholders or gf.placeholders]
        ret = gf.func(*gf.group_args(inputs))
        try:
            if not (ret is None and gf.return_annotation is inspect.Signature.empty):  # returns nothing
                tp.check_structure(_strip_callback(gf.return_annotation), ret, f"job '{gf.name}' return value")
        except TypeError as e:
            raise JobBuildError(e.args[0] + format_location(user_frame())) from None
        for leaf in tp.leaves(ret):
            _return_op(builder, leaf, gf.config)
    if builder.diff_watch_locations and not builder.is_train:
        raise JobBuildError(f"flow.watch_diff: job '{gf.name}' is a predict job (no optimizer.minimize in its body), "
                            f"so no gradient is computed"
                            f"{format_location(next(iter(builder.diff_watch_locations.values())))}")
    return builder, ret


class CompiledJob:
    """A compiled job: the user Job, the completed Job, its plan and I/O signature.

    Args:
        session: the Session owning variables and watch handlers.
        user_job: the Job as built (before completion); it is not modified.
        placeholders: one PlaceholderDef (with ``param_name``) per input op, in job order.
        return_structure: the returned structure whose leaves map to the return ops in order.
        return_annotation: how results are converted (see :mod:`graphfront.typing`).
        enable_passes: run the cleanup/fusion passes.
        compile_mode: the lowering (:data:`graphfront.runtime.lowering.LOWERINGS`); None: the
            Job's ``xrt_config`` switches choose, else ``"plan"`` (:mod:`graphfront.runtime.choice`).

    Attributes (besides the arguments):
        compile_mode: the lowering that runs the job (``"plan"``, ``"xla"``, ``"onnxruntime"`` ...).
        fallback_reason: why ``"auto"``, ``use_xla_jit`` or ``use_tensorrt`` ran the plan (else None).
        provider: the onnxruntime execution provider that runs the job (None for other lowerings).
    """

    def __init__(self, session, user_job, placeholders, return_structure, return_annotation,
                 enable_passes=True, locations=None, cuda_graph=True, accumulation_steps=1, compile_mode=None,
                 logical_view="consistent"):
        self.session = session
        self.name = user_job.job_conf.job_name
        self.placeholders = placeholders
        self.return_structure = return_structure
        self.return_annotation = return_annotation
        self.locations = locations or {}
        self.user_job = user_job
        self.plan = None
        try:
            self.job = complete(copy.deepcopy(user_job), enable_passes=enable_passes)
            with session.variables.rollback_on_error():  # a job that fails to compile leaves no variables
                session.init_variables(self.job)
                self.parallel_num = parallel_num(self.job)
                request = LoweringRequest(session, user_job, self.job, compile_mode, self.parallel_num,
                                          accumulation_steps, logical_view, cuda_graph)
                self.plan = choose(request)
        except GraphfrontError:
            raise
        except Exception as e:  # a pass, initializer or kernel refused what the job holds
            raise JobBuildError(f"job '{self.name}' could not be compiled: {type(e).__name__}: {e}") from e
        self.job = request.job  # (on several devices: after the boxing or mirror pass)
        self.fallback_reason = request.fallback_reason  # "auto" or an xrt switch ran the plan: why
        self.compile_mode = self.plan.compile_mode  # the lowering that runs this job
        by_name = {op.name: op for op in self.job.net.op}
        ids = {n: tuple(g.parallel_conf.device_name) for g in self.job.placement.placement_group
               for n in g.op_set.op_name}
        self.input_devices = [device_of(by_name[n], ids.get(n, ("0:0",))) if self.parallel_num == 1
                              else torch.device("cpu") for n in self.plan.input_names]

    @property
    def provider(self):
        """The onnxruntime execution provider that runs the job (None: another lowering)."""
        return self.plan.provider

    @classmethod
    def from_function(cls, session, gf) -> "CompiledJob":
        k = gf.config.job_config_proto.num_gradient_accumulation_steps
        micro = None
        if k > 1:
            micro = micro_batch_placeholders(gf.placeholders, k, gf.name)
        builder, ret = trace(session, gf, micro)
        k = k if builder.is_train else 1  # (OneFlow accumulates in train jobs only)
        return cls(session, builder.job, gf.placeholders, ret, gf.return_annotation,
                   enable_passes=gf.config._passes, locations=builder.locations, cuda_graph=gf.config._cuda_graph,
                   accumulation_steps=k, compile_mode=gf.config._compile_mode, logical_view=gf.config._logical_view)

    # ------------------------------------------------------------------ LazyRun
    def launch(self, args, kwargs):
        """LazyRun: check the feeds, run the plan, convert the results per the annotation.

        Futures and callbacks keep the result tensors and copy them to numpy only when
        the value is asked for, so a launch on GPU does not wait for the previous one.
        Raises FeedError (naming the argument and the caller's line) on a bad feed.
        """
        check_arguments(self.name, self.placeholders, args, kwargs)
        feeds = [self._feed(i, ph, a) for i, (ph, a) in enumerate(zip(self.placeholders, args))]
        return results(self.return_structure, self.return_annotation, self._run(feeds))

    def _feed(self, i, ph, value):
        name = ph.param_name
        if ph.list_input:
            parts = self.plan.parts  # mirrored view: one array per device
            if not isinstance(value, (list, tuple)) or len(value) != parts:
                got = f"a list of {len(value)}" if isinstance(value, (list, tuple)) else type(value).__name__
                raise FeedError(f"job '{self.name}' argument '{name}' (ListNumpy.Placeholder) expects a list with "
                                f"{parts} ndarray(s), one per device, received {got}{format_location(user_frame())}")
            if parts > 1:
                return [self._feed_array(i, ph, v) for v in value]
            value = value[0]
        return self._feed_array(i, ph, value)

    def _feed_array(self, i, ph, value):
        return self._to_feed(i, checked_array(self.name, ph, value))

    def _to_feed(self, i, value):
        """A checked ndarray as the plan's feed ``i``: the array itself for a numpy plan
        (made contiguous), else a tensor sharing its memory on the input's device."""
        if self.plan.takes_numpy:
            return np.ascontiguousarray(value)
        t = _dt.numpy_to_tensor(value)
        device = self.input_devices[i]
        if device.type == "cpu":
            return t
        # index values checked on the host: a bad one never reaches the device
        self.plan.check_feeds([value if j == i else None for j in range(len(self.input_devices))])
        return t.to(device, non_blocking=True)

    def run_arrays(self, arrays) -> list:
        """LazyRun on ndarrays already checked against the placeholders (shape, dtype; one
        per placeholder, no list inputs): the results as numpy arrays in return-op order,
        without the return annotation's conversion (the serving path)."""
        feeds = arrays if self.plan.takes_numpy else [self._to_feed(i, a) for i, a in enumerate(arrays)]
        outs = self._run(feeds)
        return outs if self.plan.gives_numpy else [_to_numpy(t) for t in outs]

    def _run(self, feeds):
        """One call of the lowering, after what it runs before a call, under the session lock;
        running out of device memory raises DeviceMemoryError."""
        plan, variables = self.plan, self.session.variables
        with self.session.lock:
            plan.before_call(variables)
            if plan.writes_variables:
                variables.generation += 1
            try:
                return plan(feeds)
            except torch.cuda.OutOfMemoryError as e:
                error = _memory_error(self.name, e)
            torch.cuda.empty_cache()  # (after the except clause let go of the error and its frames' tensors)
            raise error from None


def check_arguments(job_name, placeholders, args, kwargs):
    """Raise FeedError (at the caller's line) unless ``args`` has one value per placeholder
    and ``kwargs`` is empty."""
    if kwargs:
        raise FeedError(f"job '{job_name}' takes positional arguments only, received keywords "
                        f"{sorted(kwargs)}{format_location(user_frame())}")
    if len(args) != len(placeholders):
        raise FeedError(f"job '{job_name}' expects {len(placeholders)} argument(s), received {len(args)}"
                        f"{format_location(user_frame())}")


def checked_array(job_name, ph, value) -> np.ndarray:
    """``value``, the ndarray fed to placeholder ``ph``, after checking its type and shape (a
    ``ListNumpy`` placeholder: its rank, and at most the elements of the declared shape), in
    the placeholder's dtype.

    A numeric or bool array of another dtype is cast, as OneFlow's feed copy casts it
    (``OfBlob_CopyFromBuffer`` takes a pybind11 ``array_t`` of the blob's type, which
    force-casts): int64 labels fit an int32 placeholder, float64 images a float32 one. Where
    an integer or bool placeholder cannot hold a value exactly (a fraction, NaN, a value out
    of its range), which OneFlow would truncate or wrap silently, the feed is refused.

    Raises:
        FeedError: naming the argument, expected vs received (the first value that does not
            fit, with its index), and the caller's line.
    """
    name = ph.param_name
    if not isinstance(value, np.ndarray):
        raise FeedError(f"job '{job_name}' argument '{name}' expects a numpy.ndarray of shape {ph.shape} and "
                        f"dtype {ph.dtype.np}, received {type(value).__name__}{format_location(user_frame())}")
    if ph.list_input:  # a dynamic blob: its rank, at most the elements of its maximum shape (as OneFlow)
        ok = value.ndim == len(ph.shape) and value.size <= math.prod(ph.shape)
    else:
        ok = tuple(value.shape) == ph.shape
    if not ok:
        expected = (f"rank {len(ph.shape)} and at most {math.prod(ph.shape)} elements (maximum shape "
                    f"{ph.shape})") if ph.list_input else ph.shape
        raise FeedError(f"job '{job_name}' argument '{name}': expected shape {expected}, received "
                        f"{tuple(value.shape)}{format_location(user_frame())}")
    if value.dtype == ph.dtype.np:
        return value
    target = np.dtype(ph.dtype.np)
    if value.dtype.kind not in "biuf" or target.kind not in "biuf":
        raise FeedError(f"job '{job_name}' argument '{name}': expected dtype {target} ({ph.dtype.name}), "
                        f"received {value.dtype}; convert with .astype(np.{target}){format_location(user_frame())}")
    with np.errstate(all="ignore"):  # (a float64 beyond float32's range becomes inf, as OneFlow's cast)
        cast = value.astype(target)
    if target.kind in "biu":
        inexact = cast != value  # (NaN differs from every integer)
        if inexact.any():
            at = tuple(int(i) for i in np.argwhere(inexact)[0])
            raise FeedError(f"job '{job_name}' argument '{name}': expected dtype {target} ({ph.dtype.name}); the "
                            f"{value.dtype} value {value[at].item()!r} at index {at} has no equal in {target}"
                            f"{format_location(user_frame())}")
    return cast


def results(return_structure, ann, outs):
    """What a job call returns: the result tensors ``outs`` (in return-op order) rebuilt
    into the returned structure and converted as the return annotation ``ann`` asks
    (None when the job returns nothing). Futures and callbacks copy to numpy only when
    the value is asked for."""
    if return_structure is None and ann is inspect.Signature.empty:
        return None  # the job returns nothing (as OneFlow, the call returns None)

    def value(wrap=lambda a: a):
        return tp.rebuild(return_structure, [wrap(_to_numpy(t)) for t in outs])
    if ann is inspect.Signature.empty:
        return tp.Future(value)
    if isinstance(ann, tp._Alias) and ann.origin is tp.Callback:
        return lambda callback: callback(tp.convert(ann.arg, value()))
    return tp.convert(ann, value())


def _eager_feed(job_name, ph, value, parts):
    """The tensors an eager call feeds placeholder ``ph`` on ``parts`` devices (more than one
    in the mirrored view): a ``ListNumpy`` argument is a list of one array per device, a
    ``Numpy`` argument one array split along axis 0 into ``parts`` (as a lazy call does).

    Raises FeedError naming the argument for a list of another length or a bad array."""
    if not ph.list_input:
        t = _dt.numpy_to_tensor(checked_array(job_name, ph, value))
        return list(t.tensor_split(parts)) if parts > 1 else [t]
    if not isinstance(value, (list, tuple)) or len(value) != parts:
        got = f"a list of {len(value)}" if isinstance(value, (list, tuple)) else type(value).__name__
        raise FeedError(f"job '{job_name}' argument '{ph.param_name}' (ListNumpy.Placeholder) expects a list with "
                        f"{parts} ndarray(s), one per device, received {got}{format_location(user_frame())}")
    return [_dt.numpy_to_tensor(checked_array(job_name, ph, v)) for v in value]


def _returned_lbns(job):
    return [getattr(op.return_conf, "in") for op in job.net.op if jb.op_kind(op) == "return_conf"]


def _memory_error(job_name, e):
    """The DeviceMemoryError of job ``job_name`` for torch's CUDA out-of-memory error ``e``
    (naming the size asked for)."""
    asked = re.search(r"[Tt]ried to allocate ([0-9.]+ [KMGT]?i?B)", str(e))
    asked = f"an allocation of {asked.group(1)}" if asked else "an allocation"
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    return DeviceMemoryError(f"job '{job_name}' ran out of GPU memory: {asked} failed ({first}); "
                             "use a smaller batch or free other jobs' memory")


def _to_numpy(t):
    if isinstance(t, torch.Tensor):
        return _dt.tensor_to_numpy(t)
    if isinstance(t, np.ndarray):  # compile_mode "onnxruntime": a fresh array per run
        return t
    return np.array(t)  # a jax.Array (compile_mode "xla"): a host copy


def _strip_callback(ann):
    if ann is inspect.Signature.empty:
        return tp.Bundle[tp.Numpy]
    return ann


def _input_blob(builder, ph):
    """The ``input_conf`` op of placeholder ``ph`` and its blob. In the mirrored view on
    ``n > 1`` devices a ``Numpy.Placeholder(shape)`` is split along axis 0 (OneFlow's
    consistent input read by mirrored ops): the blob is one device's part,
    ``(shape[0] // n,) + shape[1:]``, and a call feeds the whole array.

    Raises JobBuildError naming the argument when ``shape[0]`` is not a multiple of ``n``."""
    shape = ph.shape
    n = scope_mod.device_count(builder.scope.parallel_conf.device_name)
    if builder.logical_view == "mirrored" and n > 1 and not ph.list_input:
        if shape[0] % n:
            raise JobBuildError(f"job '{builder.job_name}' runs in the mirrored view on {n} devices: argument "
                                f"'{ph.param_name}' (tp.Numpy.Placeholder{shape}) is split along axis 0 into one part "
                                f"per device, so its first dim must be a multiple of {n}, received {shape[0]}; "
                                "use tp.ListNumpy.Placeholder for parts of different sizes")
        shape = (shape[0] // n,) + tuple(shape[1:])
    conf = op_conf_pb2.OperatorConf(name=unique_str("Input_"))
    ic = conf.input_conf
    ic.out = "out"
    ic.blob_conf.shape.dim.extend(shape)
    ic.blob_conf.data_type = ph.dtype.proto
    ic.blob_conf.is_dynamic = ph.list_input
    ic.blob_conf.nd_sbp.sbp_parallel.add().split_parallel.axis = 0
    builder.add_op(conf)
    lbn = f"{conf.name}/out"
    return BlobDesc(lbn, shape, ph.dtype, builder.scope.parallel_conf, builder.job_name, ph.list_input)


def _return_op(builder, blob, config):
    if not isinstance(blob, BlobDesc):
        raise JobBuildError(f"job '{builder.job_name}' returns {type(blob).__name__}; only blobs (BlobDesc) can "
                            "be returned")
    conf = op_conf_pb2.OperatorConf(name=unique_str("Return_"))
    setattr(conf.return_conf, "in", blob.lbn)
    conf.return_conf.out = "out"
    if config._allow_cpu_return_op:
        conf.device_tag = "cpu"
    builder.add_op(conf)


class Session:
    """Holds registered jobs, compiled jobs, variables and watch handlers."""

    OPEN, RUNNING, CLOSED = "OPEN", "RUNNING", "CLOSED"

    def __init__(self):
        self.id = next(_session_ids)
        self.status = self.OPEN
        self.job_funcs = {}
        self.jobs = {}
        self.variables = VariableStore()
        self.watchers = {}
        self.gpu_device_num = 1
        self.cpu_device_num = 1
        self.resource = {}  # the resource settings flow.config.* recorded: name -> value
        # flow.inter_job_reuse_mem_strategy's choice, returned in flow.experimental.get_job_set()
        self.inter_job_reuse_mem_strategy = job_set_pb2.InterJobReuseMemStrategy()
        # Held while a job is compiled, a plan runs, or variables are read or written as a
        # whole (checkpoint save/load), so none of these sees another half done.
        self.lock = threading.RLock()
        self.build_errors = {}  # job name -> the exception its last compile raised
        self.eager = False  # flow.enable_eager_execution: job functions run op by op when called
        self.eager_kernels = {}  # job name -> the kernels its eager calls keep (see framework.eager)

    def default_scope(self, config) -> scope_mod.Scope:
        """The scope a job of ``config`` is built in: its default placement and logical view,
        its ``JobConfigProto`` registered as the job desc symbol, this session's id."""
        fields = dict(is_mirrored=config._logical_view == "mirrored", session_id=self.id,
                      job_desc_symbol_id=scope_mod.register_job_desc(config.job_config_proto))
        if config._placement_scope is not None:
            ps = config._placement_scope
            return scope_mod.make_scope(ps.resolved_device_tag(), ps.device_ids, **fields)
        from graphfront.parallel.placement import default_devices
        return scope_mod.make_scope(*default_devices(self), **fields)

    def register(self, gf):
        self._check_open()
        with self.lock:
            self.job_funcs[gf.name] = gf
            self.jobs.pop(gf.name, None)
            self.build_errors.pop(gf.name, None)
            self.eager_kernels.pop(gf.name, None)

    def _check_open(self):
        if self.status == self.CLOSED:
            raise RuntimeError(f"session {self.id} is closed (flow.clear_default_session() was called); decorate the "
                               "job functions again to use them in the new default session")

    def try_init(self):
        """Compile every registered job not compiled yet; then the session is RUNNING.

        Jobs compile independently: a job that fails to build does not stop the others.
        Its error is kept and raised when that job is called (or compiled) next. In eager
        execution nothing is compiled: each call builds and runs its job.
        """
        self._check_open()
        with self.lock:
            for name in list(self.job_funcs) if not self.eager else ():
                if name in self.jobs or name in self.build_errors:
                    continue
                try:
                    self.compiled(name)
                except Exception as e:  # noqa: BLE001 - reported when this job is called
                    self.build_errors[name] = e
            self.status = self.RUNNING

    def compiled(self, name) -> CompiledJob:
        """The compiled job ``name``, compiling it now if needed.

        Raises the job's build error (JobBuildError ...) if it does not compile; a failure
        kept by :meth:`try_init` is raised once, and the next call compiles again.
        """
        self._check_open()
        job = self.jobs.get(name)
        if job is not None:
            return job
        with self.lock:
            job = self.jobs.get(name)
            if job is None:
                error = self.build_errors.pop(name, None)
                if error is not None:
                    raise error
                job = CompiledJob.from_function(self, self.job_funcs[name])
                self.jobs[name] = job
            return job

    def init_variables(self, job):
        """Create (and initialize) every variable of a completed job in the store."""
        default_init = default_initializer(job.job_conf)
        formats = cpu_memory_formats(job)
        ids = {}
        for group in job.placement.placement_group:
            for n in group.op_set.op_name:
                ids[n] = tuple(group.parallel_conf.device_name)
        for op in job.net.op:
            if jb.op_kind(op) == "variable_conf":
                d = jb.TensorDesc.from_proto(job.helper.lbn2logical_blob_desc[f"{op.name}/out"])
                self.variables.ensure(op, d.shape, d.dtype, device_of(op, ids.get(op.name, ("0:0",))), default_init,
                                      formats.get(op.name))

    def close(self):
        self.status = self.CLOSED
        self.jobs.clear()
        self.build_errors.clear()
        if getattr(self, "worker_group", None) is not None:
            release_group(self.worker_group, self.id)  # (the workers may serve the next session)
            self.variables.group = None


_default_session = Session()


def default_session() -> Session:
    return _default_session


def clear_default_session():
    """Close the default session (drop jobs and variables) and open a fresh one. The eager
    or lazy mode (``flow.enable_eager_execution``) carries over: OneFlow keeps it in the
    environment (``EnableEagerEnvironment``), which outlives its sessions."""
    global _default_session
    if jb.is_building():
        raise RuntimeError("flow.clear_default_session() cannot be called inside a job function")
    _default_session.close()
    eager = _default_session.eager
    _default_session = Session()
    _default_session.eager = eager


def _check_annotated(name, sig):
    """Under ``flow.experimental.enable_typing_check()``: ArgumentError for a parameter or a
    return of global function ``name`` without an annotation."""
    for p in sig.parameters.values():
        if p.annotation is p.empty:
            raise ArgumentError(f"global function '{name}': parameter '{p.name}' is not annotated; with "
                                f"flow.experimental.enable_typing_check() every parameter needs an annotation such "
                                f"as tp.Numpy.Placeholder(shape, dtype)")
    if sig.return_annotation is sig.empty:
        raise ArgumentError(f"global function '{name}': no return annotation; with "
                            f"flow.experimental.enable_typing_check() the return needs one (tp.Numpy, tp.ListNumpy, "
                            f"tp.Callback[...], None ...)")


class GlobalFunction:
    """The callable that ``@flow.global_function`` returns (see module docstring)."""

    def __init__(self, func, type, config):
        functools.update_wrapper(self, func)
        self.func = func
        self.name = func.__name__
        self.type = type
        self.config = copy.deepcopy(config)
        self.session = default_session()
        sig = inspect.signature(func)
        self.placeholders = []
        self.arity = []  # per parameter: None (one placeholder) or n (a tuple of n placeholders)
        if tp.TypingCheck.enabled:
            _check_annotated(self.name, sig)
        for p in sig.parameters.values():
            ann = p.annotation
            if ann is p.empty and isinstance(p.default, tp.PlaceholderDef):
                ann = p.default  # x=flow.FixedTensorDef(shape) / flow.MirroredTensorDef(shape)
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ArgumentError(f"global function '{self.name}': *args/**kwargs are not supported")
            members = typing.get_args(ann) if typing.get_origin(ann) is tuple else None
            if members and all(isinstance(m, tp.PlaceholderDef) for m in members):
                # typing.Tuple[tp.Numpy.Placeholder, ...]: the job receives a tuple of blobs
                # and the call takes a tuple of arrays (as OneFlow)
                self.arity.append(len(members))
                for i, m in enumerate(members):
                    ph = copy.copy(m)
                    ph.param_name = f"{p.name}[{i}]"
                    self.placeholders.append(ph)
                continue
            if not isinstance(ann, tp.PlaceholderDef):
                raise ArgumentError(f"global function '{self.name}': parameter '{p.name}' must be annotated with "
                                    f"tp.Numpy.Placeholder(shape, dtype), tp.ListNumpy.Placeholder or a typing.Tuple "
                                    f"of them (or default to flow.FixedTensorDef / flow.MirroredTensorDef), "
                                    f"received {ann!r}")
            ph = copy.copy(ann)
            ph.param_name = p.name
            self.arity.append(None)
            self.placeholders.append(ph)
        self.return_annotation = sig.return_annotation
        self.session.register(self)

    def __call__(self, *args, **kwargs):
        session = self.session
        session._check_open()
        if jb.is_building():
            raise RuntimeError(f"job '{self.name}' cannot be called while another job is being built")
        if session.eager:
            return self._call_eagerly(self.flatten_args(args), kwargs)
        job = session.jobs.get(self.name) if session.status == session.RUNNING else None
        if job is None:  # first call of the session or of this job: compile
            session.try_init()
            job = session.compiled(self.name)
        return job.launch(self.flatten_args(args), kwargs)

    def _call_eagerly(self, args, kwargs):
        """One call in eager execution (see :mod:`graphfront.framework.eager`): the job
        function runs op by op on the checked feeds; a train job then runs its backward
        and update part. Returns what a lazy call returns."""
        session = self.session
        check_arguments(self.name, self.placeholders, args, kwargs)
        conf = self.config.job_config_proto
        if conf.num_gradient_accumulation_steps > 1:
            raise JobBuildError(f"job '{self.name}': FunctionConfig().num_gradient_accumulation_steps is not supported "
                                f"in eager execution{format_location(user_frame())}")
        if conf.enable_auto_mixed_precision:  # a job pass, which OneFlow's eager calls do not run either
            warnings.warn(f"job '{self.name}': FunctionConfig().enable_auto_mixed_precision does not apply in eager "
                          f"execution (as in OneFlow): the job runs in the dtypes it was written with",
                          UserWarning, stacklevel=3)
        feeds = [functools.partial(_eager_feed, self.name, ph, a) for ph, a in zip(self.placeholders, args)]
        with session.lock:
            session.try_init()
            session.variables.flush()
            session.variables.generation += 1
            watchers = set(session.watchers)
            try:
                kernels = session.eager_kernels.setdefault(self.name, {})
                builder, ret = trace(session, self, make_builder=lambda job, scope, s: eager.EagerJobBuilder(
                    job, scope, s, feeds, kernels))
                if builder.is_train:
                    outs = eager.train_step(builder)
                else:
                    outs = [eager.copied(eager.whole(builder.values[lbn])) for lbn in _returned_lbns(builder.job)]
                return results(ret, self.return_annotation, outs)
            except torch.cuda.OutOfMemoryError as e:
                error = _memory_error(self.name, e)
            finally:  # (each call registers its watch handlers again)
                for key in set(session.watchers) - watchers:
                    del session.watchers[key]
        torch.cuda.empty_cache()  # (after the except clause let go of the error and its frames' tensors)
        raise error from None

    def group_args(self, flat):
        """Per-placeholder values -> the job function's arguments (tuples where annotated so)."""
        out, i = [], 0
        for n in self.arity:
            out.append(flat[i] if n is None else tuple(flat[i:i + n]))
            i += 1 if n is None else n
        return out

    def flatten_args(self, args):
        """The call's arguments -> one value per placeholder (tuple arguments unpacked)."""
        if len(args) != len(self.arity) or all(n is None for n in self.arity):
            return args  # (the launch names a count mismatch)
        flat = []
        for a, n, name in zip(args, self.arity, inspect.signature(self.func).parameters):
            if n is None:
                flat.append(a)
            elif not isinstance(a, (tuple, list)) or len(a) != n:
                raise FeedError(f"job '{self.name}' argument '{name}' expects a tuple of {n} arrays, received "
                                f"{type(a).__name__}{format_location(user_frame())}")
            else:
                flat.extend(a)
        return flat

    @property
    def graph(self):
        """The completed job for inspection: ``print(job.graph)``, ``.table()``, ``.code()``, ``.proto``."""
        from graphfront.framework.inspect import JobGraph
        return JobGraph(self.compiled_job)

    @property
    def compiled_job(self) -> CompiledJob:
        """The compiled job (compiles the session first if needed)."""
        self.session.try_init()
        return self.session.compiled(self.name)


def global_function(type: str | None = None,  # noqa: A002 - OneFlow's name
                    function_config: FunctionConfig | None = None) -> Callable[[Callable], GlobalFunction]:
    """Decorator turning a Python function into a lazily compiled job.

    Args:
        type: ``"train"`` (autograd and optimizer passes run) or ``"predict"``. A given
            type decides, as in OneFlow: a predict job ignores the config's
            ``config.train.*`` settings. Without a type (or in the deprecated form
            ``global_function(config)``) the config decides: a train job if it sets any
            ``config.train.*``, else a predict job.
        function_config: a ``flow.FunctionConfig`` (deep-copied at decoration time).

    Returns:
        A decorator; the decorated function becomes a :class:`GlobalFunction` whose calls
        take numpy arrays matching the placeholders (shape and dtype checked) and return
        what the return annotation asks for (``tp.Numpy``: an ndarray of the blob's
        shape and dtype).

    Raises:
        ArgumentError: (a TypeError and a ValueError) for any other ``type``, a
            ``function_config`` that is not a FunctionConfig, a decorated object that is not a
            function, or unannotated parameters.
    """
    if isinstance(type, FunctionConfig):
        type, function_config = None, type
    if type not in ("train", "predict", None):
        raise ArgumentError(f'global_function: type must be "train" or "predict", received {type!r}')
    if function_config is not None and not isinstance(function_config, FunctionConfig):
        raise ArgumentError(f"global_function: function_config must be a flow.FunctionConfig, received "
                            f"{builtins.type(function_config).__name__} {function_config!r}")
    config = function_config or FunctionConfig()

    def decorator(func):
        if not callable(func) or not hasattr(func, "__name__"):
            raise ArgumentError(f"global_function decorates a function, received {builtins.type(func).__name__} "
                                f"{func!r}")
        return GlobalFunction(func, type, config)
    return decorator
