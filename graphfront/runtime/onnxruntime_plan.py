"""The onnxruntime lowering of predict jobs: ``compile_mode("onnxruntime")``.

A predict job is converted by the ``onnx`` converters beside the ops' kernels in the
registry — the same conversion as ``flow.onnx.export``
(:func:`graphfront.runtime.onnx_export.job_to_onnx` on the job completed without the
cleanup and fusion passes, see :func:`graphfront.runtime.onnx_export.export_job`) — into an in-memory ONNX model whose initializers
hold the session's current variable values, and that model is run by an
``onnxruntime.InferenceSession`` on the CPU. Feeds and results are numpy arrays handed
to onnxruntime directly (no torch tensors on the way). onnxruntime then plays the role
OneFlow's TensorRT/OpenVINO sub-graph engines played for inference (``oneflow/xrt/``):
one native runtime for the whole graph, with its own fusions (conv + activation,
batch-norm folding) and pre-packed weights.

Variables are constants of the model. Before a call, when the variable store's
``generation`` moved since the last call (anything read or wrote the session's
variables, or a job that may write them ran: a train job of the same session,
``flow.load_variables``, ``flow.checkpoint`` loads, ``assign``), the variables' torch
version counters (``Tensor._version``, moved by any in-place write) are compared with
those the model was built from, and the model and the onnxruntime session are rebuilt
when one moved. A call following calls of onnxruntime jobs only costs one integer
comparison (reading 32 version counters costs about 3 us of a 175 us ResNet call).

Session options, chosen by measurement (LeNet and the ResNet-style network of
``examples/resnet_bn`` at batch 1, 2-core CPU, median of 7 x 100 calls): onnxruntime's
defaults win — all graph optimizations (``ORT_ENABLE_ALL``), sequential execution, one
intra-op thread per physical core with spinning. One intra-op thread was 1.5-1.6x
slower (LeNet 389 vs 242 us, ResNet 272 vs 176 us), parallel execution 1.7-2.4x slower,
and disabling spinning or the memory arena made no difference beyond noise; so the
session is created with default options. One exception: when creating it fails with
NOT_IMPLEMENTED, the session is created again with basic graph optimizations only
(``ORT_ENABLE_BASIC``, ONNX-standard rewrites), which runs the converted graph's own
standard ops (:func:`inference_session`). The extended levels rewrite the graph into
onnxruntime's contrib (``com.microsoft``) ops, and an onnxruntime build can fuse
``Sigmoid * Mul`` (silu) into a ``QuickGelu`` that it has no CPU kernel for (session
creation then fails). A model that fails at basic level too raises that error.

Calls go through an ``IOBinding`` (onnxruntime's documented API for binding inputs and
outputs to memory the caller owns): every graph input and output is bound once, when
the session is created, to a preallocated numpy buffer of its static shape and dtype;
a call copies the feeds into the input buffers, runs ``run_with_iobinding`` and returns
copies of the output buffers. That skips what ``InferenceSession.run`` does on every call
— checking the feed names, converting each feed to an ``OrtValue`` and each result back
to a new array — about 8 us of the 230 us of LeNet at batch 1 (same process, 2,000 calls).
The buffers are per plan, so calls are serialized by the session lock, as every plan's.

Refused (``JobBuildError``, raised when the job is compiled): train jobs (they update
variables in place, which a constant-folded model cannot), ops without an ``onnx``
converter (the message names them), ``flow.watch`` ops, ops placed on a GPU (the CPU
execution provider runs the model), dynamic (``ListNumpy``) inputs, and a missing
``onnxruntime`` package (``pip install graphfront[onnx]``).
"""
from __future__ import annotations

import logging
import re

import numpy as np

from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError, OpRunError
from graphfront.runtime.lowering import Lowering
from graphfront.runtime.onnx_export import OnnxExportError, job_to_onnx, missing_converters
from graphfront.runtime.walk import ScheduleWalk

__all__ = ["OrtPlan", "fastest_providers", "inference_session", "refusal"]

PIP_HINT = "pip install graphfront[onnx]"

logger = logging.getLogger(__name__)


# the execution providers ``use_tensorrt(True)`` asks for, fastest first
FASTEST_FIRST = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


def fastest_providers() -> list:
    """The providers of :data:`FASTEST_FIRST` this onnxruntime has, fastest first (the CPU's
    alone when onnxruntime is not installed: :func:`refusal` then says so)."""
    try:
        import onnxruntime
    except ImportError:
        return ["CPUExecutionProvider"]
    available = set(onnxruntime.get_available_providers())
    return [p for p in FASTEST_FIRST if p in available or p == "CPUExecutionProvider"]


def inference_session(model: bytes, providers) -> tuple:
    """``(onnxruntime.InferenceSession, level)`` of a serialized ONNX model: created with
    onnxruntime's default options (all graph optimizations, ``level`` ``"all"``), or, when
    that fails with NOT_IMPLEMENTED (a kernel missing for an op an optimizer fusion made,
    see the module docstring), with basic graph optimizations only (``level`` ``"basic"``).
    Raises onnxruntime's error when the basic level fails too."""
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
    try:
        return ort.InferenceSession(model, ort.SessionOptions(), providers=providers), "all"
    except OrtNotImplemented as e:
        first = str(e)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(model, options, providers=providers)
    logger.info("onnxruntime session created with basic graph optimizations: at the default level %s", first)
    return session, "basic"


def refusal(job, gpu=False) -> str | None:
    """Why ``job`` (completed) cannot run in onnxruntime, or None when it can; ``gpu``: a GPU
    execution provider will run it (ops placed on a GPU are then accepted)."""
    if job.job_conf.HasField("train_conf"):
        return ("it is a train job (it updates variables); the onnxruntime lowering runs predict jobs only, "
                "as OneFlow's TensorRT engine ran inference only")
    try:
        import onnxruntime  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        return f"it needs the packages onnx and onnxruntime ({e}); install them with `{PIP_HINT}`"
    missing = missing_converters(job.net.op)
    watches, gpu, dynamic = [], [], []
    for op in job.net.op:
        kind = jb.op_kind(op)
        if kind == "foreign_watch_conf":
            watches.append(op.name)
        elif kind == "input_conf" and op.input_conf.blob_conf.is_dynamic:
            dynamic.append(op.name)
        if not gpu and kind not in ("return_conf", "foreign_watch_conf") and op.device_tag not in ("", "cpu"):
            gpu.append(op.name)
    if missing:
        return f"op type(s) without an ONNX converter: {missing}"
    if watches:
        return f"flow.watch op(s) {watches} have no ONNX form"
    if gpu:
        return f"op(s) {gpu[:5]} are placed on a GPU; onnxruntime runs the job on the CPU"
    if dynamic:
        return f"input(s) {dynamic} are dynamic (ListNumpy); the ONNX model has static shapes"
    return None


class OrtPlan(Lowering):
    """A predict job run by onnxruntime (see module docstring); the Plan interface.

    Args:
        job: the completed predict Job (``onnx_export.export_job(user_job)``: no
            fusion passes, so every op has its registered ONNX converter).
        session: the Session whose variables (``session.variables``, a VariableStore)
            the job reads; they must exist.
        providers: onnxruntime execution providers, in order of preference (default the
            CPU's; ``use_tensorrt(True)`` passes :func:`fastest_providers`).

    Attributes:
        input_names: input op names, in feed order.
        output_names: return op names, in result order.
        order: the job's op confs in schedule order.
        devices: ``{"cpu"}`` (the feeds and results are host arrays).
        provider: the execution provider that runs the model (the first of the session's
            providers; reading it creates the onnxruntime session if no call did yet), e.g.
            ``"CPUExecutionProvider"``; onnxruntime drops a provider that fails to load.
        model: the current ``onnx.ModelProto`` (variables as initializers).
        builds: how many onnxruntime sessions were created (the first call creates one;
            a call after a variable was written converts the job again and creates another).
        optimization_level: the graph optimizations of the current onnxruntime session,
            ``"all"`` (the default) or ``"basic"`` (see :func:`inference_session`); None
            before the first is created.
        takes_numpy: True: ``__call__`` takes numpy arrays.
        gives_numpy: True: ``__call__`` returns a list of new numpy arrays.

    Raises:
        JobBuildError: the job cannot run in onnxruntime (see :func:`refusal`), or a
            converter cannot express an attr value (names the op).
    """

    compile_mode = "onnxruntime"
    takes_numpy = True
    gives_numpy = True
    writes_variables = False

    def __init__(self, job, session, providers=("CPUExecutionProvider",)):
        self.providers = list(providers)
        why = refusal(job, gpu=self.providers[0] != "CPUExecutionProvider")
        if why:
            raise JobBuildError(f"job '{job.job_conf.job_name}' cannot use compile_mode('onnxruntime'): {why}; "
                                "use compile_mode('plan')")
        self.job = job
        walk = ScheduleWalk(job)
        self.order, self.input_names, self.output_names = walk.order, walk.input_names, walk.output_names
        self.devices = {"cpu"}
        self._graphfront_session = session
        self._var_names = [op.name for op in job.net.op if jb.op_kind(op) == "variable_conf"]
        self.builds = 0
        self._convert()

    def _convert(self):
        """The ONNX model of the job with the variables' current values (raises conversion errors)."""
        store = self._graphfront_session.variables
        tensors = [store.tensors[n] for n in self._var_names]
        values = {n: t.detach().cpu().numpy() for n, t in zip(self._var_names, tensors)}
        try:
            self.model = job_to_onnx(self.job, values, check=False)
        except OnnxExportError as e:
            raise JobBuildError(f"job '{self.job.job_conf.job_name}' cannot use compile_mode('onnxruntime'): "
                                f"{e}") from None
        self._tensors = tensors
        self._versions = [t._version for t in tensors]
        self._generation = store.generation
        self._session = None  # the onnxruntime session is created by the next call
        self.optimization_level = None

    def _start(self):
        """Create the onnxruntime session and bind every graph input and output to a buffer."""
        from onnx.helper import tensor_dtype_to_np_dtype

        def buffer(value_info):
            t = value_info.type.tensor_type
            return np.empty([d.dim_value for d in t.shape.dim], tensor_dtype_to_np_dtype(t.elem_type))
        try:
            session, self.optimization_level = inference_session(self.model.SerializeToString(), self.providers)
        except Exception as e:  # noqa: BLE001 - onnxruntime's own error classes (a kernel it lacks for a type)
            if not type(e).__module__.startswith("onnxruntime"):
                raise
            raise JobBuildError(f"job '{self.job.job_conf.job_name}' cannot use compile_mode('onnxruntime'): "
                                f"onnxruntime cannot load the converted job ({type(e).__name__}: {e}); "
                                "use compile_mode('plan')") from None
        binding = session.io_binding()
        graph = self.model.graph  # its inputs and outputs are named after the input and return ops
        graph_values = {v.name: v for v in (*graph.input, *graph.output)}
        self._inputs = [buffer(graph_values[n]) for n in self.input_names]
        self._outputs = [buffer(graph_values[n]) for n in self.output_names]
        for name, a in zip(self.input_names, self._inputs):
            binding.bind_input(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)
        for name, a in zip(self.output_names, self._outputs):
            binding.bind_output(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)
        self._session, self._binding = session, binding
        self.builds += 1

    @property
    def provider(self) -> str:
        if self._session is None:
            self._start()
        return self._session.get_providers()[0]

    @property
    def source(self) -> str:
        """The ONNX graph as text (``onnx.printer.to_text``)."""
        from onnx import printer
        return printer.to_text(self.model.graph)

    def before_call(self, variables):
        """Nothing: a call itself rebuilds the model when a variable moved (module docstring)."""

    def __call__(self, feeds):
        """Run on numpy ``feeds`` (input order, the placeholders' shapes and dtypes);
        returns a list of new numpy arrays, one per return op."""
        store = self._graphfront_session.variables
        if store.generation != self._generation:  # a variable may have been written: was one?
            store.flush()  # (values an XLA job holds reach the tensors first)
            if [t._version for t in self._tensors] != self._versions:
                self._convert()
            self._generation = store.generation
        if self._session is None:
            self._start()
        for buf, a in zip(self._inputs, feeds):
            np.copyto(buf, a)
        try:
            self._session.run_with_iobinding(self._binding)
        except RuntimeError as e:  # a kernel refusing the values fed (an integer division by zero ...)
            node = re.search(r"Name:'([^'/]+)", str(e))
            raise OpRunError(f"op '{node.group(1) if node else '?'}' (onnxruntime lowering): "
                             f"{str(e).splitlines()[0]}") from e
        return [a.copy() for a in self._outputs]
