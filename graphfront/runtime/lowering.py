"""The lowering contract: the lowering names, and what a session may expect of a lowering.

A completed Job runs through one *lowering*, an object made once per compiled job and
called on every LazyRun. Its name is the job's ``compile_mode``, set through
``FunctionConfig().compile_mode(name)`` or ``SessionOption.compile_mode`` and checked
by :func:`check_mode` for both:

* ``"plan"`` (default): generated Python calling one PyTorch kernel per op
  (:mod:`graphfront.runtime.plan`); composes with several devices
  (:mod:`graphfront.runtime.distributed`) and with gradient accumulation
  (:mod:`graphfront.runtime.grad_accumulation`);
* ``"native"``: the plan's function compiled by TorchInductor (:mod:`graphfront.runtime.native`);
* ``"xla"``: one jax function compiled by XLA (:mod:`graphfront.runtime.xla`);
* ``"onnxruntime"``: a predict job converted to ONNX and run by onnxruntime
  (:mod:`graphfront.runtime.onnxruntime_plan`);
* ``"auto"``: ``"onnxruntime"`` where onnxruntime can run the job, else ``"plan"``, the
  reason kept as the compiled job's ``fallback_reason``.

OneFlow's switches ``FunctionConfig().use_xla_jit(True)`` and ``use_tensorrt(True)``, kept
in the Job's ``job_conf.xrt_config``, choose ``"xla"`` and ``"onnxruntime"`` on its fastest
execution provider where those can run the job (else ``"plan"``, with a ``fallback_reason``);
the choice is made in :mod:`graphfront.runtime.choice`.

Which object runs a job is chosen in :mod:`graphfront.runtime.choice`. Every lowering
derives from :class:`Lowering`, whose declared attributes tell the session how to call
it, so the session never asks which lowering it holds.
"""
from __future__ import annotations

from graphfront.framework.errors import ArgumentError

LOWERINGS = ("plan", "native", "xla", "onnxruntime", "auto")


def check_mode(mode, where: str) -> str:
    """``mode`` when it names a lowering; raises ArgumentError (a ValueError) naming ``where``
    (the setting) otherwise."""
    if mode not in LOWERINGS:
        raise ArgumentError(f"{where} must be one of {LOWERINGS}, received {mode!r}")
    return mode


class Lowering:
    """What a compiled job calls on every LazyRun: ``lowering(feeds) -> results``.

    Attributes (class-level defaults; a lowering overrides those that differ):
        compile_mode: the lowering's name (one of :data:`LOWERINGS` but ``"auto"``).
        takes_numpy: feeds are numpy arrays (else torch tensors on the inputs' devices).
        gives_numpy: results are new numpy arrays (else tensors or arrays the session copies).
        writes_variables: a call may write the session's variable tensors (the session then
            moves ``VariableStore.generation`` before the call).
        parts: arrays per ``ListNumpy`` argument (the mirrored view on several devices).
        uses_cuda_graph: calls replay a captured CUDA graph.
        provider: the onnxruntime execution provider that runs the job (None: not onnxruntime).

    Each instance also sets the annotated attributes below (``job`` ... ``source``).
    """

    job: object  # the Job it runs (a job_pb2.Job)
    order: list  # its scheduled op confs
    input_names: list  # input op names, in feed order
    output_names: list  # return op names, in result order
    devices: set  # device types ("cpu", "cuda")
    source: str  # the lowered form as text

    compile_mode = "plan"
    takes_numpy = False
    gives_numpy = False
    writes_variables = True
    parts = 1
    uses_cuda_graph = False
    provider = None

    def before_call(self, variables) -> None:
        """Run before each call with the session's VariableStore held locked. Default: bring
        the variable tensors up to date (values another lowering, e.g. XLA, holds)."""
        variables.flush()

    def check_feeds(self, arrays) -> None:
        """Check fed values on the host before they are copied to a device: ``arrays`` the
        feeds as numpy arrays in feed order (None: a feed not checked here). Raises the
        error of an op's index check (OpRunError) on a bad value. Default: nothing to check."""

    def __call__(self, feeds):
        raise NotImplementedError
