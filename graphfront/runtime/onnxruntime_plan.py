"""The onnxruntime lowering of predict jobs: ``compile_mode("onnxruntime")``.

A predict job is converted by the ``onnx`` converters beside the ops' kernels in the
registry — the same conversion as ``flow.onnx.export`` (:func:`graphfront.onnx.job_to_onnx`
on the job completed without the cleanup and fusion passes, see
:func:`graphfront.onnx.export_job`) — into an in-memory ONNX model whose initializers
hold the session's current variable values, and that model is run by an
``onnxruntime.InferenceSession`` on the CPU. Feeds and results are numpy arrays handed
to onnxruntime directly (no torch tensors on the way). onnxruntime then plays the role
OneFlow's TensorRT/OpenVINO sub-graph engines played for inference (``oneflow/xrt/``):
one native runtime for the whole graph, with its own fusions (conv + activation,
batch-norm folding) and pre-packed weights.

Variables are constants of the model: before each call the variables' torch version
counters (``Tensor._version``, moved by any in-place write: a train job of the same
session, ``flow.load_variables``, ``flow.checkpoint`` loads, ``assign``) are compared
with those the model was built from, and the model and the onnxruntime session are
rebuilt when one moved.

Session options, chosen by measurement (LeNet and the ResNet-style network of
``examples/resnet_bn`` at batch 1, 2-core CPU, median of 7 x 100 calls): onnxruntime's
defaults win — all graph optimizations (``ORT_ENABLE_ALL``), sequential execution, one
intra-op thread per physical core with spinning. One intra-op thread was 1.5-1.6x
slower (LeNet 389 vs 242 us, ResNet 272 vs 176 us), parallel execution 1.7-2.4x slower,
and disabling spinning, the memory arena or binding outputs to preallocated buffers
made no difference beyond noise; so the session is created with default options.

Refused (``JobBuildError``, raised when the job is compiled): train jobs (they update
variables in place, which a constant-folded model cannot), ops without an ``onnx``
converter (the message names them), ``flow.watch`` ops, ops placed on a GPU (the CPU
execution provider runs the model), dynamic (``ListNumpy``) inputs, and a missing
``onnxruntime`` package (``pip install graphfront[onnx]``).
"""
from __future__ import annotations

from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError

__all__ = ["OrtPlan", "refusal"]

PIP_HINT = "pip install graphfront[onnx]"


def refusal(job) -> str | None:
    """Why ``job`` (completed) cannot run in onnxruntime, or None when it can."""
    if job.job_conf.HasField("train_conf"):
        return "it is a train job (it updates variables); the onnxruntime lowering runs predict jobs only"
    try:
        import onnxruntime  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        return f"it needs the packages onnx and onnxruntime ({e}); install them with `{PIP_HINT}`"
    from graphfront.onnx import missing_converters
    missing = missing_converters(job.net.op)
    watches, gpu, dynamic = [], [], []
    for op in job.net.op:
        kind = jb.op_kind(op)
        if kind == "foreign_watch_conf":
            watches.append(op.name)
        elif kind == "input_conf" and op.input_conf.blob_conf.is_dynamic:
            dynamic.append(op.name)
        if kind not in ("return_conf", "foreign_watch_conf") and op.device_tag not in ("", "cpu"):
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


class OrtPlan:
    """A predict job run by onnxruntime (see module docstring); the Plan interface.

    Args:
        job: the completed predict Job (``graphfront.onnx.export_job(user_job)``: no
            fusion passes, so every op has its registered ONNX converter).
        variables: the session's VariableStore; the job's variables must exist in it.

    Attributes:
        input_names: input op names, in feed order.
        output_names: return op names, in result order.
        order: the job's op confs in schedule order.
        devices: ``{"cpu"}``.
        model: the current ``onnx.ModelProto`` (variables as initializers).
        builds: how many onnxruntime sessions were created (the first call creates one;
            a call after a variable was written converts the job again and creates another).
        takes_numpy: True: ``__call__`` takes and returns numpy arrays.

    Raises:
        JobBuildError: the job cannot run in onnxruntime (see :func:`refusal`), or a
            converter cannot express an attr value (names the op).
    """

    compile_mode = "onnxruntime"
    takes_numpy = True

    def __init__(self, job, variables):
        why = refusal(job)
        if why:
            raise JobBuildError(f"job '{job.job_conf.job_name}' cannot use compile_mode('onnxruntime'): {why}; "
                                "use compile_mode('plan')")
        from graphfront.runtime.plan import schedule
        self.job = job
        self.order, _ = schedule(job)
        self.input_names = [op.name for op in job.net.op if jb.op_kind(op) == "input_conf"]
        self.output_names = [op.name for op in job.net.op if jb.op_kind(op) == "return_conf"]
        self.devices = {"cpu"}
        self._store = variables
        self._var_names = [op.name for op in job.net.op if jb.op_kind(op) == "variable_conf"]
        self.builds = 0
        self._convert()

    def _convert(self):
        """The ONNX model of the job with the variables' current values (raises conversion errors)."""
        from graphfront.onnx import OnnxExportError, job_to_onnx
        tensors = [self._store.tensors[n] for n in self._var_names]
        values = {n: t.detach().cpu().numpy() for n, t in zip(self._var_names, tensors)}
        try:
            self.model = job_to_onnx(self.job, values, check=False)
        except OnnxExportError as e:
            raise JobBuildError(f"job '{self.job.job_conf.job_name}' cannot use compile_mode('onnxruntime'): "
                                f"{e}") from None
        self._tensors = tensors
        self._versions = [t._version for t in tensors]
        self._run = None  # the onnxruntime session is created by the next call

    def _start(self):
        import onnxruntime as ort
        session = ort.InferenceSession(self.model.SerializeToString(), ort.SessionOptions(),
                                       providers=["CPUExecutionProvider"])
        self._run = session.run  # graph inputs and outputs are named after the input and return ops
        self.builds += 1

    @property
    def source(self) -> str:
        """The ONNX graph as text (``onnx.printer.to_text``)."""
        from onnx import printer
        return printer.to_text(self.model.graph)

    @property
    def uses_cuda_graph(self) -> bool:
        return False

    def __call__(self, feeds):
        """Run on numpy ``feeds`` (input order); returns a tuple of numpy results."""
        if [t._version for t in self._tensors] != self._versions:  # a variable was written
            self._convert()
        if self._run is None:
            self._start()
        return tuple(self._run(self.output_names, dict(zip(self.input_names, feeds))))
