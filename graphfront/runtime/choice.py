"""Which lowering runs a completed Job: one table lookup.

:func:`choose` looks up ``(compile_mode, several devices, gradient accumulation)`` in
:data:`CHOICES`. The table holds every combination that composes; the others are
refused with a JobBuildError naming the mode and the setting it cannot compose with,
never dropped. Composition rules:

* ``"plan"`` composes with everything: on several devices each worker runs a Plan
  (:class:`~graphfront.runtime.distributed.DistributedPlan`, after the boxing or mirror
  pass), with accumulation a micro-batch and an update lowering run in turn
  (:class:`~graphfront.runtime.grad_accumulation.AccumulatingPlan`), on one device or on
  several;
* ``"native"``, ``"xla"`` and ``"onnxruntime"`` lower one device's whole step at once:
  they compose with neither; ``"native"`` is refused for a job on a GPU, where it
  measured slower than the plan on every benchmark;
* ``"auto"`` is ``"onnxruntime"`` where onnxruntime can run the job, else ``"plan"``
  (with the reason in :attr:`LoweringRequest.fallback_reason`); on several devices or
  with accumulation that is always ``"plan"``.
"""
from __future__ import annotations

import torch

from graphfront.framework.errors import JobBuildError, format_location, user_frame
from graphfront.passes.boxing import boxing
from graphfront.passes.mirrored import mirror
from graphfront.runtime.distributed import DistributedPlan
from graphfront.runtime.grad_accumulation import AccumulatingPlan
from graphfront.runtime.lowering import Lowering, check_mode
from graphfront.runtime.native import NativePlan
from graphfront.runtime.onnx_export import export_job
from graphfront.runtime.onnxruntime_plan import OrtPlan, refusal
from graphfront.runtime.plan import Plan
from graphfront.runtime.xla import XlaPlan


class LoweringRequest:
    """What the choice of a lowering reads, and what it leaves for the compiled job.

    Args:
        session: the Session (variables, watch handlers, workers).
        user_job: the Job as built (the onnxruntime lowering completes it without the
            cleanup and fusion passes).
        job: the completed Job.
        mode: the ``compile_mode`` (:data:`graphfront.runtime.lowering.LOWERINGS`).
        devices: how many devices the job is placed on.
        accumulation: gradient accumulation steps (1: none).
        logical_view: ``"consistent"`` or ``"mirrored"`` (several devices).
        cuda_graph: allow CUDA-graph replay.

    Attributes set by :func:`choose`:
        job: the Job that runs (on several devices: after the boxing or mirror pass).
        fallback_reason: ``"auto"`` ran ``"plan"``: why not onnxruntime (else None).
    """

    def __init__(self, session, user_job, job, mode="plan", devices=1, accumulation=1, logical_view="consistent",
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
    if torch.cuda.is_available() and any(op.device_tag == "gpu" for op in r.job.net.op):
        raise JobBuildError(f"job '{r.name}': compile_mode('native') is not offered for a job on a GPU: on one it "
                            "measured slower than the default 'plan' (per-op kernels replayed as a CUDA graph) on "
                            "every benchmark; use compile_mode('plan')" + format_location(user_frame()))
    return NativePlan(r.job, r.session.variables, r.session.watchers, cuda_graph=r.cuda_graph)


def _xla(r):
    return XlaPlan(r.job, r.session.variables, r.session.watchers)


def _onnxruntime(r):
    return _ort_plan(r, export_job(r.user_job))


def _ort_plan(r, job):
    r.session.init_variables(job)  # the same variables as the completed job, unless a pass dropped one
    return OrtPlan(job, r.session)  # (raises JobBuildError when onnxruntime cannot run the job)


def _auto(r):
    job = export_job(r.user_job)
    r.fallback_reason = refusal(job)
    return _plan(r) if r.fallback_reason else _ort_plan(r, job)


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
    return AccumulatingPlan(r.job, r.accumulation, r.session,
                            make_plan=lambda j, part: DistributedPlan(r.session, j, r.devices, part))


def _auto_as_plan(make, why):
    """``"auto"`` where only the plan composes: ``make``, with the reason recorded."""
    def auto(r):
        r.fallback_reason = why
        return make(r)
    return auto


_ONE_CPU = "onnxruntime runs a whole job on one CPU"

# (compile_mode, several devices, gradient accumulation) -> how its lowering is made
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
}


def choose(request: LoweringRequest) -> Lowering:
    """The lowering that runs ``request.job`` (module docstring).

    Raises:
        ValueError: ``request.mode`` is not a lowering name.
        JobBuildError: the mode does not compose with several devices or with gradient
            accumulation (names both), or the lowering refuses the job.
    """
    r = request
    check_mode(r.mode, "compile_mode")
    make = CHOICES.get((r.mode, r.devices > 1, r.accumulation > 1))
    if make is None:
        raise JobBuildError(_not_composable(r) + format_location(user_frame()))
    return make(r)


def _not_composable(r) -> str:
    settings = [f"{r.devices} devices"] if r.devices > 1 else []
    if r.accumulation > 1:
        settings.append(f"gradient accumulation (num_gradient_accumulation_steps({r.accumulation}))")
    return (f"job '{r.name}': compile_mode('{r.mode}') cannot run with {' and '.join(settings)}: it lowers one "
            "device's whole step at once; use compile_mode('plan'), which runs on several devices and "
            "accumulates gradients")
