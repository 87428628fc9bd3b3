"""``flow.profile(job_func, *feeds, runs=10)``: per-op time of a compiled job.

(``flow.profiler``, :mod:`graphfront.profiler`, is another thing: OneFlow's NVTX range ops.)

The job is run ``warmup + runs`` times through a :class:`ProfilingPlan`: the job's own
plan rebuilt with a kernel wrapper that times every kernel call (on CUDA it
synchronizes the device around each call, so the times are the kernels' own). The
printed table lists every op that ran, sorted by total time, with its mean time per run
and its share of the summed op time. Every run is a real run of the job: a train job
updates its variables and watch handlers are called.
"""
from __future__ import annotations

import time

import torch
from tabulate import tabulate

from graphfront.framework import job_builder as jb
from graphfront.framework.blob_desc import is_int
from graphfront.framework.errors import FeedError
from graphfront.runtime.plan import Plan


class OpTimer:
    """The kernel wrapper: accumulates seconds and calls per op name."""

    def __init__(self, sync_cuda=False):
        self.seconds = {}
        self.calls = {}
        self.types = {}
        self.enabled = True
        self.sync_cuda = sync_cuda

    def __call__(self, op_conf, fn):
        name, t = op_conf.name, jb.op_type_name(op_conf)
        self.types[name] = t
        seconds, calls, clock = self.seconds, self.calls, time.perf_counter
        sync = torch.cuda.synchronize if self.sync_cuda else None

        def timed(*args):
            if not self.enabled:
                return fn(*args)
            if sync is not None:
                sync()
            start = clock()
            out = fn(*args)
            if sync is not None:
                sync()
            seconds[name] = seconds.get(name, 0.0) + clock() - start
            calls[name] = calls.get(name, 0) + 1
            return out
        return timed

    def reset(self):
        self.seconds.clear()
        self.calls.clear()


class ProfilingPlan(Plan):
    """A :class:`Plan` whose kernels are timed by an :class:`OpTimer` (``.timer``)."""

    def __init__(self, job, variables, watchers=None):
        self.timer = OpTimer()
        super().__init__(job, variables, watchers, kernel_wrapper=self.timer, cuda_graph=False)
        self.timer.sync_cuda = "cuda" in self.devices and torch.cuda.is_available()


class ProfileResult:
    """Per-op times of a profile: ``rows`` are ``(op name, op type, calls, total s, mean ms
    per run, share)`` sorted by total time; ``total`` is the summed op time (s)."""

    def __init__(self, job_name, timer, runs):
        self.job_name = job_name
        self.runs = runs
        self.total = sum(timer.seconds.values())
        self.rows = sorted(((n, timer.types[n], timer.calls[n], s, s / runs * 1e3,
                             s / self.total if self.total else 0.0) for n, s in timer.seconds.items()),
                           key=lambda r: -r[3])

    def by_type(self) -> dict:
        """Total seconds per op type."""
        out = {}
        for _, t, _, s, _, _ in self.rows:
            out[t] = out.get(t, 0.0) + s
        return out

    def table(self, limit=None, tablefmt="simple") -> str:
        rows = [(n, t, c, f"{ms:.3f}", f"{share * 100:.1f}%") for n, t, c, _, ms, share in self.rows[:limit]]
        return tabulate(rows, headers=("op name", "op type", "calls", "ms / run", "share"), tablefmt=tablefmt)

    def __str__(self):
        return (f"profile of job '{self.job_name}': {self.runs} runs, op time {self.total / self.runs * 1e3:.3f} "
                f"ms per run\n" + self.table())


def profile(job_func, *feeds, runs=10, warmup=1, print_table=True, limit=None):
    """Run ``job_func(*feeds)`` ``warmup + runs`` times and time every op (see module doc).

    Args:
        job_func: a ``@flow.global_function`` (compiled on first use).
        feeds: the job's arguments, as for a normal call.
        runs: timed runs (>= 1); warmup: untimed runs first.
        print_table: print the table (sorted by time, with each op's share).
        limit: print only the first ``limit`` rows.
    Returns:
        a :class:`ProfileResult`.
    Raises:
        ValueError: ``runs`` < 1; FeedError: feeds that do not match the placeholders.
    """
    if not is_int(runs) or runs < 1:
        raise ValueError(f"flow.profile: runs must be an int >= 1, received {runs!r}")
    compiled = job_func.compiled_job
    session = compiled.session
    if len(feeds) != len(compiled.placeholders):
        raise FeedError(f"flow.profile: job '{compiled.name}' expects {len(compiled.placeholders)} argument(s), "
                        f"received {len(feeds)}")
    tensors = [compiled._feed(i, ph, a) for i, (ph, a) in enumerate(zip(compiled.placeholders, feeds))]
    plan = ProfilingPlan(compiled.job, session.variables, session.watchers)
    with session.lock:
        for _ in range(warmup):
            plan(tensors)
        plan.timer.reset()
        for _ in range(runs):
            plan(tensors)
    result = ProfileResult(compiled.name, plan.timer, runs)
    if print_table:
        print(result if limit is None else f"{result.job_name}: top {limit}\n{result.table(limit)}")
    return result
