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

import copy
import functools
from typing import Callable
import inspect
import itertools
import math
import re
import threading
import typing
import warnings

import numpy as np
import torch

from graphfront.framework import dtypes as _dt
from graphfront.framework import annotations as tp
from graphfront.core import job_conf_pb2, job_pb2, op_conf_pb2
from graphfront.core.descriptor_compat import is_repeated
from graphfront.framework import job_builder as jb
from graphfront.framework import scope_symbols as scope_mod
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework.placement_scope import LogicalView, PlacementScope
from graphfront.framework.errors import (DeviceMemoryError, FeedError, GraphfrontError, JobBuildError, format_location,
                                        user_frame)
from graphfront.ops.builder import unique_str
from graphfront.passes import complete
from graphfront.passes.boxing import parallel_num
from graphfront.runtime.choice import LoweringRequest, choose
from graphfront.runtime.grad_accumulation import micro_batch_placeholders
from graphfront.runtime.lowering import check_mode
from graphfront.runtime.walk import device_of
from graphfront.runtime.variable_store import VariableStore

_session_ids = itertools.count()


class FunctionConfig:
    """Per-job configuration (``flow.FunctionConfig()``); setters are methods.

    Supported: ``default_data_type(dtype)``, ``default_logical_view(view)``,
    ``default_placement_scope(flow.scope.placement(...))``,
    ``default_initializer_conf(dict or InitializerConf)``, ``allow_cpu_return_op(bool)``,
    ``enable_cuda_graph(bool)`` (graphfront's switch for CUDA-graph replay on GPU) and
    ``enable_passes(bool)`` (cleanup/fusion passes; autograd and optimizer always run) and
    ``compile_mode("plan" | "native" | "xla" | "onnxruntime" | "auto")`` (graphfront's switch:
    the lowering of the job, see :mod:`graphfront.runtime.lowering`).
    """

    def __init__(self):
        self.job_config_proto = job_conf_pb2.JobConfigProto(job_name="")
        self._placement_scope = None
        self._allow_cpu_return_op = True
        self._logical_view = "consistent"
        self._cuda_graph = True
        self._passes = True
        self._compile_mode = "plan"

    def default_data_type(self, value) -> None:
        """Set the job's default data type (``JobConfigProto.default_data_type``).

        Variables and placeholders without a dtype use it (OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``).

        Args:
            value: graphfront dtype, e.g. ``flow.float32``.

        Raises:
            TypeError: ``value`` is not a graphfront dtype.
        """
        if not isinstance(value, _dt.dtype):
            raise TypeError(f"FunctionConfig.default_data_type expects a graphfront dtype, received {value!r}")
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
            raise TypeError("FunctionConfig.default_logical_view expects flow.scope.consistent_view() or "
                            f"flow.scope.mirrored_view(), received {value!r}")
        self._logical_view = value.kind

    def default_placement_scope(self, value) -> None:
        """Set the placement the job's ops default to.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``.

        Args:
            value: ``flow.scope.placement(device_tag, machine_device_ids)``.

        Raises:
            TypeError: ``value`` is not a placement scope.
        """
        if not isinstance(value, PlacementScope):
            raise TypeError("FunctionConfig.default_placement_scope expects flow.scope.placement(tag, ids), "
                            f"received {value!r}")
        self._placement_scope = value

    def default_initializer_conf(self, value) -> None:
        """Set the initializer of variables created without one.

        OneFlow v0.6.0 ``python/oneflow/compatible/single_client/framework/function_util.py``.

        Args:
            value: ``InitializerConf`` or its dict form, e.g. ``{"constant_conf": {"value": 0.0}}``.

        Raises:
            google.protobuf.json_format.ParseError: the dict is not an ``InitializerConf``.
            TypeError: ``value`` is neither a dict nor an ``InitializerConf``.
        """
        from graphfront.core import initializer_conf_pb2
        from google.protobuf import json_format
        if isinstance(value, dict):
            value = json_format.ParseDict(value, initializer_conf_pb2.InitializerConf())
        self.job_config_proto.default_initializer_conf.CopyFrom(value)

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

    def enable_passes(self, value=True) -> None:
        """Switch the cleanup and fusion passes (graphfront setting; default on).

        Autograd and the optimizer passes always run.

        Args:
            value: bool (truthiness is used); default True.
        """
        self._passes = bool(value)

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
            TypeError: ``value`` is neither a dict nor an ``IndexedSlicesOptimizerConf``.
            google.protobuf.json_format.ParseError: the dict does not fit the message.
        """
        from google.protobuf import json_format
        conf = job_conf_pb2.IndexedSlicesOptimizerConf()
        if isinstance(value, dict):
            json_format.ParseDict(value, conf)
        elif isinstance(value, job_conf_pb2.IndexedSlicesOptimizerConf):
            conf.CopyFrom(value)
        else:
            raise TypeError("FunctionConfig.indexed_slices_optimizer_conf expects a dict or an "
                            f"IndexedSlicesOptimizerConf, received {value!r}")
        self.job_config_proto.indexed_slices_optimizer_conf.CopyFrom(conf)

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
            raise TypeError("FunctionConfig.mixed_precision_data_type expects flow.float16 or flow.bfloat16, "
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

    # OneFlow setter names that differ from their JobConfigProto field
    _FIELD_ALIASES = {"enable_reused_mem": "enable_reuse_mem", "enable_qat": "enable_quantization_aware_training",
                      "enable_cudnn_conv_pseudo_half": "cudnn_conv_enable_pseudo_half"}

    def __getattr__(self, name):
        """Any other OneFlow setter named after a scalar ``JobConfigProto`` field writes that
        field (so it shows in the Job proto); graphfront's runtime does not act on those
        settings, which a UserWarning says when a setter is used."""
        if name.startswith("__"):
            raise AttributeError(name)
        field = self._FIELD_ALIASES.get(name, name)
        desc = job_conf_pb2.JobConfigProto.DESCRIPTOR.fields_by_name.get(field)
        if desc is None or desc.message_type is not None or is_repeated(desc):
            raise AttributeError(f"FunctionConfig has no setting {name!r} in graphfront; supported: "
                                 "default_data_type, default_logical_view, default_placement_scope, "
                                 "default_initializer_conf, allow_cpu_return_op, enable_cuda_graph, enable_passes, "
                                 "and the scalar JobConfigProto fields (recorded only)")

        def setter(value=True):
            try:
                setattr(self.job_config_proto, field, value)
            except (TypeError, ValueError) as e:
                raise TypeError(f"FunctionConfig.{name}: {e}") from None
            warnings.warn(f"FunctionConfig.{name}({value!r}) is recorded in the job config; graphfront's "
                          "runtime does not act on it", UserWarning, stacklevel=2)
        return setter


def trace(session, gf, placeholders=None):
    """Run a job function once inside a JobBuildAndInferCtx; return ``(builder, returned)``.

    Placeholders (``gf.placeholders`` unless given) become ``input_conf`` ops and every
    returned blob a ``return_conf`` op.
    """
    job = job_pb2.Job()
    job.job_conf.CopyFrom(gf.config.job_config_proto)
    job.job_conf.job_name = gf.name
    train = gf.type == "train" if gf.type is not None else gf.config.job_config_proto.HasField("train_conf")
    if train:
        job.job_conf.train_conf.SetInParent()
    else:  # (the oneof drops any train settings: they do nothing in a predict job)
        job.job_conf.predict_conf.SetInParent()
    builder = jb.JobBuilder(job, session.default_scope(gf.config), session)
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
    """

    def __init__(self, session, user_job, placeholders, return_structure, return_annotation,
                 enable_passes=True, locations=None, cuda_graph=True, accumulation_steps=1, compile_mode="plan",
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
                                          accumulation_steps, logical_view, cuda_graph,
                                          [ph.param_name for ph in placeholders])
                self.plan = choose(request)
        except GraphfrontError:
            raise
        except Exception as e:  # a pass, initializer or kernel refused what the job holds
            raise JobBuildError(f"job '{self.name}' could not be compiled: {type(e).__name__}: {e}") from e
        self.job = request.job  # (on several devices: after the boxing or mirror pass)
        self.fallback_reason = request.fallback_reason  # compile_mode "auto" ran the plan: why not onnxruntime
        self.compile_mode = self.plan.compile_mode  # the lowering that runs this job
        by_name = {op.name: op for op in self.job.net.op}
        ids = {n: tuple(g.parallel_conf.device_name) for g in self.job.placement.placement_group
               for n in g.op_set.op_name}
        self.input_devices = [device_of(by_name[n], ids.get(n, ("0:0",))) if self.parallel_num == 1
                              else torch.device("cpu") for n in self.plan.input_names]

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
        if kwargs:
            raise FeedError(f"job '{self.name}' takes positional arguments only, received keywords "
                            f"{sorted(kwargs)}{format_location(user_frame())}")
        if len(args) != len(self.placeholders):
            raise FeedError(f"job '{self.name}' expects {len(self.placeholders)} argument(s), received {len(args)}"
                            f"{format_location(user_frame())}")
        feeds = [self._feed(i, ph, a) for i, (ph, a) in enumerate(zip(self.placeholders, args))]
        outs = self._run(feeds)
        ann = self.return_annotation
        if self.return_structure is None and ann is inspect.Signature.empty:
            return None  # the job returns nothing (as OneFlow, the call returns None)

        def value(wrap=lambda a: a):
            return tp.rebuild(self.return_structure, [wrap(_to_numpy(t)) for t in outs])
        if ann is inspect.Signature.empty:
            return tp.Future(value)
        if isinstance(ann, tp._Alias) and ann.origin is tp.Callback:
            return lambda callback: callback(tp.convert(ann.arg, value()))
        return tp.convert(ann, value())

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
        name = ph.param_name
        if not isinstance(value, np.ndarray):
            raise FeedError(f"job '{self.name}' argument '{name}' expects a numpy.ndarray of shape {ph.shape} and "
                            f"dtype {ph.dtype.np}, received {type(value).__name__}{format_location(user_frame())}")
        if ph.list_input:  # a dynamic blob: its rank, at most the elements of its maximum shape (as OneFlow)
            ok = value.ndim == len(ph.shape) and value.size <= math.prod(ph.shape)
        else:
            ok = tuple(value.shape) == ph.shape
        if not ok:
            expected = (f"rank {len(ph.shape)} and at most {math.prod(ph.shape)} elements (maximum shape "
                        f"{ph.shape})") if ph.list_input else ph.shape
            raise FeedError(f"job '{self.name}' argument '{name}': expected shape {expected}, received "
                            f"{tuple(value.shape)}{format_location(user_frame())}")
        if value.dtype != ph.dtype.np:
            raise FeedError(f"job '{self.name}' argument '{name}': expected dtype {ph.dtype.np} ({ph.dtype.name}), "
                            f"received {value.dtype}; convert with .astype(np.{ph.dtype.np}){format_location(user_frame())}")
        return self._to_feed(i, value)

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
    conf = op_conf_pb2.OperatorConf(name=unique_str("Input_"))
    ic = conf.input_conf
    ic.out = "out"
    ic.blob_conf.shape.dim.extend(ph.shape)
    ic.blob_conf.data_type = ph.dtype.proto
    ic.blob_conf.is_dynamic = ph.list_input
    ic.blob_conf.nd_sbp.sbp_parallel.add().split_parallel.axis = 0
    builder.add_op(conf)
    lbn = f"{conf.name}/out"
    return BlobDesc(lbn, ph.shape, ph.dtype, builder.scope.parallel_conf, builder.job_name, ph.list_input)


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
        # Held while a job is compiled, a plan runs, or variables are read or written as a
        # whole (checkpoint save/load), so none of these sees another half done.
        self.lock = threading.RLock()
        self.build_errors = {}  # job name -> the exception its last compile raised

    def default_scope(self, config) -> scope_mod.Scope:
        if config._placement_scope is not None:
            ps = config._placement_scope
            return scope_mod.make_scope(ps.resolved_device_tag(), ps.device_ids)
        from graphfront.parallel.placement import default_devices
        return scope_mod.make_scope(*default_devices(self))

    def register(self, gf):
        self._check_open()
        with self.lock:
            self.job_funcs[gf.name] = gf
            self.jobs.pop(gf.name, None)
            self.build_errors.pop(gf.name, None)

    def _check_open(self):
        if self.status == self.CLOSED:
            raise RuntimeError(f"session {self.id} is closed (flow.clear_default_session() was called); decorate the "
                               "job functions again to use them in the new default session")

    def try_init(self):
        """Compile every registered job not compiled yet; then the session is RUNNING.

        Jobs compile independently: a job that fails to build does not stop the others.
        Its error is kept and raised when that job is called (or compiled) next.
        """
        self._check_open()
        with self.lock:
            for name in list(self.job_funcs):
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
        default_init = job.job_conf.default_initializer_conf if job.job_conf.HasField(
            "default_initializer_conf") else None
        ids = {}
        for group in job.placement.placement_group:
            for n in group.op_set.op_name:
                ids[n] = tuple(group.parallel_conf.device_name)
        for op in job.net.op:
            if jb.op_kind(op) == "variable_conf":
                d = jb.TensorDesc.from_proto(job.helper.lbn2logical_blob_desc[f"{op.name}/out"])
                self.variables.ensure(op, d.shape, d.dtype, device_of(op, ids.get(op.name, ("0:0",))), default_init)

    def close(self):
        self.status = self.CLOSED
        self.jobs.clear()
        self.build_errors.clear()
        if getattr(self, "worker_group", None) is not None:
            self.worker_group.close()


_default_session = Session()


def default_session() -> Session:
    return _default_session


def clear_default_session():
    """Close the default session (drop jobs and variables) and open a fresh one."""
    global _default_session
    if jb.is_building():
        raise RuntimeError("flow.clear_default_session() cannot be called inside a job function")
    _default_session.close()
    _default_session = Session()


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
        for p in sig.parameters.values():
            ann = p.annotation
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"global function '{self.name}': *args/**kwargs are not supported")
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
                raise TypeError(f"global function '{self.name}': parameter '{p.name}' must be annotated with "
                                f"tp.Numpy.Placeholder(shape, dtype), tp.ListNumpy.Placeholder or a typing.Tuple of "
                                f"them, received {ann!r}")
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
        job = session.jobs.get(self.name) if session.status == session.RUNNING else None
        if job is None:  # first call of the session or of this job: compile
            session.try_init()
            job = session.compiled(self.name)
        return job.launch(self.flatten_args(args), kwargs)

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
        ValueError: for any other ``type``; TypeError for unannotated parameters.
    """
    if isinstance(type, FunctionConfig):
        type, function_config = None, type
    if type not in ("train", "predict", None):
        raise ValueError(f'global_function: type must be "train" or "predict", received {type!r}')
    config = function_config or FunctionConfig()

    def decorator(func):
        return GlobalFunction(func, type, config)
    return decorator
