"""The native lowering: a whole completed Job compiled to fused native code.

``FunctionConfig().compile_mode("native")`` (the per-op plan, ``"plan"``, stays the
default) lowers a job the same way as :class:`~graphfront.runtime.plan.Plan` — one
generated Python function over the ops' registered kernels, forward, backward and
in-place variable updates included — and hands that function to ``torch.compile``
(TorchInductor, ``fullgraph=True``): on the CPU it becomes C++ loops behind a C++
wrapper (``cpp_wrapper``), on CUDA Triton kernels replayed as a CUDA graph
(``mode="reduce-overhead"``). This is the role OneFlow's XRT played for its jobs
(``use_xla_jit``: a sub-graph handed to XLA, ``oneflow/xrt/``), here for the whole step.

Ops whose kernel callable cannot be traced declare a ``native`` rule beside their kernel
in the registry; the lowering never copies an op's semantics. The random ops' rules
(``decode_random``, ``random_mask_like``) draw from torch's default generator, which a
traced step can take (an op's own ``torch.Generator`` and numpy's mt19937 it cannot): the
plan's distributions, another stream, repeated by ``flow.manual_seed``. A kernel that reads
a CPU value on the host in the plan (the learning rate, a loss-scale skip flag) takes its
device branch in the traced step (:func:`graphfront.ops.common.reads_host`), and
``multi_tensor_adam_update`` its formula in torch ops, which Inductor fuses (PyTorch's
fused AdamW kernel cannot be functionalized). ResNet-50 and BERT pretraining steps trace
whole (no graph break).

The job's variables are static inputs of the compiled step
(``torch._dynamo.mark_static_address``): their storage never moves (a load copies into
it), so on CUDA Inductor's CUDA-graph trees replay a step that updates them in place,
where they skip any graph that mutates an ordinary input.

Compilation happens on the first call (it needs real feeds; a train step's first call
is a real step). Its results are cached on disk, under
``$GRAPHFRONT_CACHE_DIR`` (default ``~/.cache/graphfront``) ``/inductor/<job digest>``,
where the digest is the SHA-256 of the completed Job proto: a second process compiling
the same job reads Inductor's FX-graph and AOTAutograd caches from there instead of
generating and building C++ again (Dynamo still traces the function in each process).

Raises (first call): ``torch._dynamo.exc.Unsupported`` naming the untraceable code when
an op's kernel cannot be traced and the op has no ``native`` rule.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import time

import torch

from graphfront.runtime.plan import Plan

CACHE_ENV = "GRAPHFRONT_CACHE_DIR"


def cache_root() -> str:
    """The on-disk cache directory: ``$GRAPHFRONT_CACHE_DIR`` or ``~/.cache/graphfront``."""
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "graphfront")


def job_digest(job) -> str:
    """SHA-256 (hex) of a Job proto's deterministic serialization."""
    return hashlib.sha256(job.SerializeToString(deterministic=True)).hexdigest()


@contextlib.contextmanager
def _inductor_cache_dir(path):
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


class NativePlan(Plan):
    """A Plan whose function runs compiled by TorchInductor (see module docstring).

    Args: as :class:`~graphfront.runtime.plan.Plan` (``cuda_graph`` selects Inductor's
    CUDA-graph mode on CUDA placements).

    Attributes (besides Plan's):
        digest: the completed Job's SHA-256.
        cache_dir: where this job's compile results are cached.
        compile_seconds: wall time of the first (compiling) call, None before it.
        cache_hits: Inductor FX-graph cache hits during that compile (0: compiled cold).
    """

    compile_mode = "native"

    def __init__(self, job, variables, watchers=None, kernel_wrapper=None, cuda_graph=True):
        super().__init__(job, variables, watchers, kernel_wrapper, cuda_graph=False, native=True)
        self.digest = job_digest(job)
        self.cache_dir = os.path.join(cache_root(), "inductor", self.digest[:32])
        self.compile_seconds = None
        self.cache_hits = 0
        gpu = "cuda" in self.devices and torch.cuda.is_available()
        self._graphs = gpu and bool(cuda_graph)
        for key in self._var_keys.values():  # (static inputs: see the module docstring)
            torch._dynamo.mark_static_address(self.env[key])
        options = {"triton.cudagraphs": self._graphs} if gpu else {"cpp_wrapper": True}
        self._compiled = torch.compile(self._fn, fullgraph=True, backend="inductor", options=options)

    @property
    def uses_cuda_graph(self) -> bool:
        """Whether the compiled step is replayed as a CUDA graph (Inductor's CUDA-graph trees)."""
        return self._graphs

    def _run(self, feeds):
        if self._graphs:  # (each call is a new step: the previous one's outputs were copied out)
            torch.compiler.cudagraph_mark_step_begin()
        if self.compile_seconds is None:
            out = self._first_call(feeds)
        else:
            with torch.no_grad():
                out = self._compiled(feeds)
        # a CUDA graph's outputs live in its memory pool, which the next replay overwrites
        return tuple(o.clone() for o in out) if self._graphs else out

    def _first_call(self, feeds):
        from torch._dynamo.utils import counters
        before = counters["inductor"]["fxgraph_cache_hit"]
        start = time.perf_counter()
        with _inductor_cache_dir(self.cache_dir), torch.no_grad():
            out = self._compiled(feeds)
        self.compile_seconds = time.perf_counter() - start
        self.cache_hits = counters["inductor"]["fxgraph_cache_hit"] - before
        return out
