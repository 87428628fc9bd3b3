"""Which lowering runs a completed Job: two table lookups.

:func:`choose` first finds the job's mode in :data:`MODES` from ``compile_mode`` and the
Job's ``job_conf.xrt_config`` (OneFlow's ``use_xla_jit`` / ``use_tensorrt`` switches), then
looks up ``(mode, several devices, gradient accumulation)`` in :data:`CHOICES`. The table holds every combination that composes; the others are
refused with a JobBuildError naming the mode and the setting it cannot compose with,
never dropped. Composition rules:

* ``"plan"`` composes with everything: on several devices each worker runs a Plan
  (:class:`~graphfront.runtime.distributed.DistributedPlan`, after the boxing or mirror
  pass), with accumulation a micro-batch and an update lowering run in turn
  (:class:`~graphfront.runtime.grad_accumulation.AccumulatingPlan`), on one device or on
  several;
* ``"native"``, ``"xla"`` and ``"onnxruntime"`` lower one device's whole step at once:
  they compose with neither; ``"native"`` is refused for a job on a GPU, where it
  measured slower than the plan on every benchmark (the environment variable
  ``GRAPHFRONT_NATIVE_ON_GPU=1``, which the benchmarks set, lifts the refusal to measure it);
* ``"auto"`` is ``"onnxruntime"`` where onnxruntime can run the job, else ``"plan"``
  (with the reason in :attr:`LoweringRequest.fallback_reason`); on several devices or
  with accumulation that is always ``"plan"``;
* ``use_xla_jit(True)`` is ``"xla"`` where every op of the job has an ``xla`` rule but those
  of its host data prologue (the readers and decoders, run before the compiled step:
  :func:`graphfront.runtime.xla.host_prologue`) and jax can place it, else ``"plan"``;
  ``use_tensorrt(True)`` is ``"onnxruntime"`` on its fastest execution provider installed
  (TensorRT, then CUDA, then the CPU;
  :attr:`~graphfront.runtime.onnxruntime_plan.OrtPlan.provider` says which ran) where
  onnxruntime can run the job, else ``"plan"``. As OneFlow's XRT ran what its engine could not
  take on its own kernels, a switch that cannot be honoured runs the plan with the reason in
  ``fallback_reason`` and a UserWarning (a train job with ``use_tensorrt``: OneFlow's
  TensorRT engine ran inference only); on several devices or with accumulation that is
  always ``"plan"``. Both switches at once, or a switch with ``compile_mode``, is refused
  (JobBuildError naming both): they choose different lowerings.
"""
from __future__ import annotations

import logging
import os
import warnings

import torch

from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.passes.boxing import boxing
from graphfront.passes.mirrored import mirror
from graphfront.runtime.distributed import DistributedPlan, has_stages, kernel_seed
from graphfront.runtime.grad_accumulation import AccumulatingPlan
from graphfront.runtime.lowering import LOWERINGS, Lowering, check_mode
from graphfront.runtime.native import NativePlan
from graphfront.runtime.onnx_export import export_job
from graphfront.runtime.onnxruntime_plan import OrtPlan, fastest_providers, refusal
from graphfront.runtime.plan import Plan
from graphfront.runtime.xla import XlaPlan, xla_refusal

logger = logging.getLogger(__name__)


class LoweringRequest:
    """What the choice of a lowering reads, and what it leaves for the compiled job.

    Args:
        session: the Session (variables, watch handlers, workers).
        user_job: the Job as built (the onnxruntime lowering completes it without the
            cleanup and fusion passes).
        job: the completed Job.
        mode: the ``compile_mode`` (:data:`graphfront.runtime.lowering.LOWERINGS`), or None
            when none was set (then ``"plan"`` unless the Job's ``xrt_config`` sets a switch).
        devices: how many devices the job is placed on.
        accumulation: gradient accumulation steps (1: none).
        logical_view: ``"consistent"`` or ``"mirrored"`` (several devices).
        cuda_graph: allow CUDA-graph replay.

    Attributes set by :func:`choose`:
        job: the Job that runs (on several devices: after the boxing or mirror pass).
        fallback_reason: ``"auto"``, ``use_xla_jit`` or ``use_tensorrt`` ran ``"plan"``: why
            not the lowering asked for (else None).
    """

    def __init__(self, session, user_job, job, mode=None, devices=1, accumulation=1, logical_view="consistent",
                 cuda_graph=True):
        self.session, self.user_job, self.job = session, user_job, job
        self.mode, self.devices, self.accumulation = mode, devices, accumulation
        self.logical_view, self.cuda_graph = logical_view, cuda_graph
        self.fallback_reason = None

    @property
    def name(self) -> str:
        return self.job.job_conf.job_name


def _plan(r):
    return Plan(r.job, r.session.variables, r.session.watchers, cuda_graph=r.cuda_graph)


def _native(r):
    if torch.cuda.is_available() and any(op.device_tag == "gpu" for op in r.job.net.op) \
            and os.environ.get("GRAPHFRONT_NATIVE_ON_GPU") != "1":
        raise JobBuildError(f"job '{r.name}': compile_mode('native') is not offered for a job on a GPU: on one it "
                            "measured slower than the default 'plan' (per-op kernels replayed as a CUDA graph) on "
                            "every benchmark; use compile_mode('plan')" + format_location(user_frame()))
    return NativePlan(r.job, r.session.variables, r.session.watchers, cuda_graph=r.cuda_graph)


def _xla(r):
    return XlaPlan(r.job, r.session.variables, r.session.watchers)


def _onnxruntime(r):
    return _ort_plan(r, export_job(r.user_job))


def _ort_plan(r, job, providers=("CPUExecutionProvider",)):
    r.session.init_variables(job)  # the same variables as the completed job, unless a pass dropped one
    return OrtPlan(job, r.session, providers)  # (raises JobBuildError when onnxruntime cannot run the job)


def _auto(r):
    job = export_job(r.user_job)
    r.fallback_reason = refusal(job)
    plan = None if r.fallback_reason else _converted(r, job)
    return _plan(r) if plan is None else plan


def _converted(r, job, providers=("CPUExecutionProvider",)):
    """The OrtPlan of ``job`` with its onnxruntime session, or None with
    ``r.fallback_reason`` set where a converter cannot express an op's attribute values (an
    NHWC batch norm) or onnxruntime has no kernel for an op's types."""
    try:
        plan = _ort_plan(r, job, providers)
        plan.provider  # noqa: B018 - creates the onnxruntime session now, not at the first run
        return plan
    except JobBuildError as e:
        r.fallback_reason = str(e)
        return None


def _xla_jit(r):
    """``use_xla_jit(True)``: the XLA lowering where it can run the job, else the plan."""
    r.fallback_reason = xla_refusal(r.job)
    return _fell_back(r, "use_xla_jit") if r.fallback_reason else _xla(r)


def _tensorrt(r):
    """``use_tensorrt(True)``: onnxruntime on its fastest provider where it can run the job,
    else the plan."""
    job = export_job(r.user_job)
    providers = fastest_providers()
    r.fallback_reason = refusal(job, gpu="CPUExecutionProvider" not in providers[:1])
    plan = None if r.fallback_reason else _converted(r, job, providers)
    if plan is None:
        return _fell_back(r, "use_tensorrt")
    logger.info("job '%s': use_tensorrt(True) runs onnxruntime on %s", r.name, plan.provider)
    if plan.provider != "TensorrtExecutionProvider":
        _warn(f"job '{r.name}': use_tensorrt(True) runs onnxruntime on {plan.provider}: the "
              f"TensorrtExecutionProvider is not available here (installed: {providers})")
    return plan


def _fell_back(r, switch):
    """The plan for a job whose ``switch`` could not be honoured (``r.fallback_reason``), with a warning."""
    _warn(f"job '{r.name}': {switch}(True) runs the plan (PyTorch kernels): {r.fallback_reason}")
    return _plan(r)


def _warn(message):
    """A UserWarning that points at the user's line, and the same line in the log."""
    logger.warning(message)
    warnings.warn(message + format_location(user_frame()), UserWarning, stacklevel=3)


def _several_devices(r):
    if r.logical_view == "mirrored":  # one part per device, gradients all-reduced
        r.job = mirror(r.job, r.devices)
    else:  # SBP signatures and boxing ops
        r.job = boxing(r.job, r.devices)
    return DistributedPlan(r.session, r.job, r.devices)


def _accumulating(r):
    return AccumulatingPlan(r.job, r.accumulation, r.session, cuda_graph=r.cuda_graph)


def _accumulating_on_several_devices(r):
    """Data-parallel micro-batches whose all-reduced gradients are accumulated."""
    if r.logical_view == "mirrored":
        raise JobBuildError(f"job '{r.name}': gradient accumulation on several devices runs in the consistent view; "
                            "this job uses the mirrored view")
    r.job = boxing(r.job, r.devices)
    k = r.accumulation  # (a job of pipeline stages runs its micro-batches pipelined on the workers)
    return AccumulatingPlan(r.job, k, r.session, make_plan=lambda j, part: DistributedPlan(
        r.session, j, r.devices, part, micro_batches=k if part == "micro" and has_stages(j, r.devices) else 1))


def _auto_as_plan(make, why, switch=None):
    """``"auto"`` (or the xrt ``switch``) where only the plan composes: ``make``, with the
    reason recorded (and, for a switch, a warning)."""
    def auto(r):
        r.fallback_reason = why
        if switch:
            _warn(f"job '{r.name}': {switch}(True) runs the plan (PyTorch kernels): {why}")
        return make(r)
    return auto


_ONE_CPU = "onnxruntime runs a whole job on one CPU"
_ONE_DEVICE = "the XLA lowering compiles one device's whole step"
_ACCUMULATES = "the job accumulates gradients (a train job)"
_INFERENCE = "the onnxruntime lowering runs predict jobs only, as OneFlow's TensorRT engine ran inference only"

SWITCHES = ("use_xla_jit", "use_tensorrt")  # OneFlow's xrt_config switches: the modes of CHOICES besides LOWERINGS

# (compile_mode or None, xrt_config.use_xla_jit, xrt_config.use_tensorrt) -> the mode looked up in CHOICES;
# the combinations not here set two lowerings at once and are refused
MODES = {(None, False, False): "plan", (None, True, False): "use_xla_jit", (None, False, True): "use_tensorrt",
         **{(mode, False, False): mode for mode in LOWERINGS}}

# (mode, several devices, gradient accumulation) -> how its lowering is made
CHOICES = {
    ("plan", False, False): _plan,
    ("native", False, False): _native,
    ("xla", False, False): _xla,
    ("onnxruntime", False, False): _onnxruntime,
    ("auto", False, False): _auto,
    ("plan", True, False): _several_devices,
    ("plan", False, True): _accumulating,
    ("plan", True, True): _accumulating_on_several_devices,
    ("auto", True, False): _auto_as_plan(_several_devices, f"the job runs on several devices; {_ONE_CPU}"),
    ("auto", False, True): _auto_as_plan(_accumulating, "the job accumulates gradients (a train job); "
                                                        "the onnxruntime lowering runs predict jobs only"),
    ("auto", True, True): _auto_as_plan(_accumulating_on_several_devices,
                                        f"the job runs on several devices and accumulates gradients; {_ONE_CPU}"),
    ("use_xla_jit", False, False): _xla_jit,
    ("use_xla_jit", True, False): _auto_as_plan(_several_devices, f"the job runs on several devices; {_ONE_DEVICE}",
                                                "use_xla_jit"),
    ("use_xla_jit", False, True): _auto_as_plan(_accumulating, f"{_ACCUMULATES}; {_ONE_DEVICE} at once",
                                                "use_xla_jit"),
    ("use_xla_jit", True, True): _auto_as_plan(_accumulating_on_several_devices,
                                               f"the job runs on several devices and accumulates gradients; "
                                               f"{_ONE_DEVICE} at once", "use_xla_jit"),
    ("use_tensorrt", False, False): _tensorrt,
    ("use_tensorrt", True, False): _auto_as_plan(_several_devices, f"the job runs on several devices; {_ONE_CPU}",
                                                 "use_tensorrt"),
    ("use_tensorrt", False, True): _auto_as_plan(_accumulating, f"{_ACCUMULATES}; {_INFERENCE}", "use_tensorrt"),
    ("use_tensorrt", True, True): _auto_as_plan(_accumulating_on_several_devices,
                                                f"the job runs on several devices and accumulates gradients; "
                                                f"{_INFERENCE}", "use_tensorrt"),
}


def choose(request: LoweringRequest) -> Lowering:
    """The lowering that runs ``request.job`` (module docstring).

    Raises:
        ValueError: ``request.mode`` is not a lowering name.
        JobBuildError: the mode does not compose with several devices or with gradient
            accumulation (names both), the job's config sets two lowerings (``compile_mode``,
            ``use_xla_jit``, ``use_tensorrt``: names both), or the lowering refuses the job.
    """
    r = request
    if r.mode is not None:
        check_mode(r.mode, "compile_mode")
    xrt = r.job.job_conf.xrt_config
    mode = MODES.get((r.mode, xrt.use_xla_jit, xrt.use_tensorrt))
    if mode is None:
        raise JobBuildError(_two_lowerings(r, xrt) + format_location(user_frame()))
    r.mode = mode
    make = CHOICES.get((r.mode, r.devices > 1, r.accumulation > 1))
    if make is None:
        raise JobBuildError(_not_composable(r) + format_location(user_frame()))
    if r.devices > 1:
        return make(r)
    with torch.random.fork_rng(devices=[]):  # (the kernels made here draw what the workers' would)
        torch.manual_seed(kernel_seed(r.name))
        return make(r)


def _two_lowerings(r, xrt) -> str:
    asked = [f"compile_mode('{r.mode}')"] * (r.mode is not None) + ["use_xla_jit(True)"] * xrt.use_xla_jit + \
        ["use_tensorrt(True)"] * xrt.use_tensorrt
    return (f"job '{r.name}': its FunctionConfig sets {' and '.join(asked)}, which choose different lowerings; "
            "set only one of them")


def _not_composable(r) -> str:
    settings = [f"{r.devices} devices"] if r.devices > 1 else []
    if r.accumulation > 1:
        settings.append(f"gradient accumulation (num_gradient_accumulation_steps({r.accumulation}))")
    return (f"job '{r.name}': compile_mode('{r.mode}') cannot run with {' and '.join(settings)}: it lowers one "
            "device's whole step at once; use compile_mode('plan'), which runs on several devices and "
            "accumulates gradients")
