"""Lowering: a completed Job becomes a plan, generated straight-line Python.

``Plan(job, ...)`` walks the ops in schedule order (:class:`~graphfront.runtime.walk.ScheduleWalk`:
data edges, ``ctrl_in_op_name``, and in-place updates after every reader of the updated
blob or of a view of it), emitting one line per op: it asks each op's registered kernel
factory for a callable once, and generates one Python function
that calls one kernel per op and ``del``s each buffer right after its last use. The
source of that function is ``plan.source``; it is exactly what runs on each LazyRun.

Interface ops are bound, not computed: ``input_conf`` reads the feed list,
``variable_conf`` the session's variable tensors, ``return_conf`` produces the
function's results and ``foreign_watch_conf`` calls a watch handler.

Two lowering steps go beyond one call per op:

* **Variable-only subgraphs are hoisted.** Deterministic ops whose inputs all come from
  variables that no op of this job updates (for example the batch-norm folding of a
  predict job, or a reshape of a weight) run in a separate ``hoisted()`` function. The
  plan calls it only when one of those variables changed since the last call (it
  compares the tensors' in-place version counters), so their results are computed once
  per variable state, not once per step.
* **CUDA graphs.** For a job wholly on CUDA with ``cuda_graph=True`` and static shapes,
  the first call runs eagerly (warm-up), the second captures the whole step once into a
  ``torch.cuda.CUDAGraph`` and every call then copies the feeds into static buffers and
  replays it (see :class:`CudaGraphRunner`). The kernels' own generators
  (:meth:`KernelCtx.generator`) are registered with the graph, so replays draw the
  random numbers that uncaptured calls would. Jobs with watch handlers, with ops on
  the CPU or with kernels that read device values on the host (``host_reads``) are not
  captured; a failed capture falls back to eager execution for good. This path needs a
  GPU and is exercised only where one is.
* **Host memory kept for the next step.** A plan with ops on the CPU has glibc's
  ``malloc`` keep what a step frees for the next one (:func:`keep_freed_host_memory`), as
  OneFlow's runtime allocates a job's memory once and reuses it every step.
* **Index checks.** An op's ``checks`` rule names integer inputs that must lie in
  ``[0, size)`` (class labels). Fed values, and views holding every value of a fed blob (a
  reshape or squeeze of fed labels), are checked on the host before the step
  (:meth:`Plan.check_feeds`, by the session before it copies them to the device, or by
  the call for CPU tensors). A computed value on a GPU is clamped into range on the
  device, its first bad element flagged, and the flags, returned as one more result of
  the plan function, are read after the step to raise the op's error (a bad index never
  trips a device-side assert, which would end every later CUDA call of the process). The
  variable updates of such a step are skipped on the device, with no read on the host:
  the update ops take the flags as their ``skip_if`` (as dynamic loss scaling skips an
  overflowing step), and another op that writes a variable after the forward pass (the
  train step's counter) has its old values put back; the step's outputs are those of the
  clamped values. On the CPU the kernel raises the error itself, except on the workers of
  a multi-device job (``checks_in_step``), which check as on a GPU so that every worker
  completes the step's collectives, and agree on the flags before the updates (``agree``:
  then no device updates a variable).

Hooks: ``kernel_wrapper(op_conf, fn) -> fn`` wraps every kernel (profiling, debugging).

The generated source holds only identifiers the lowering makes itself (``v3``, ``K7``,
``feeds[0]``); kernels, variables and devices are bound through the function's globals,
and op names (which may come from a job file) appear only in comments, through ``repr``.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import linecache
import os
import platform
import warnings
import weakref

import torch

from graphfront.framework import job_builder as jb
from graphfront.framework.job_builder import TensorDesc
from graphfront.ops import registry
from graphfront.ops.common import keep_unless_skipped
from graphfront.ops.xla_rules import StepChecks
from graphfront.runtime.lowering import Lowering
from graphfront.runtime.walk import (INTERFACE_KINDS, ScheduleWalk, call_layout, device_of, is_view, mutated_lbns,
                                     placements_of, schedule, update_ops, watcher)

__all__ = ["INTERFACE_KINDS", "KernelCtx", "Plan", "CudaGraphRunner", "call_layout", "device_of", "is_pure",
           "make_kernel", "placements_of", "run_op", "schedule"]


class KernelCtx:
    """What a kernel factory sees: attrs (a system op: its ``conf``), input/output descs and
    the device; in a multi-device job, the layout of each of its blobs (:meth:`sbp`) and
    this device's index among the op's devices (:attr:`parallel_id`), OneFlow's
    ``ParallelContext`` and ``SbpSignature`` of a kernel.

    ``generators``: a list collecting the generators that :meth:`generator` makes (the
    plan registers them with a captured CUDA graph); None outside a plan.
    ``signature``: the op's SBP signature in a multi-device job (bn -> SBP string, as
    ``graphfront.parallel.sbp.op_signatures`` reads it from ``job_parallel_view_conf``), or
    None (one device: every blob whole).
    ``parallel_ctx``: ``(parallel_id, parallel_num)``, this device's index among the op's
    devices and their number, or None (its rank in the job's process group and the
    group's size; 0 and 1 outside one).
    ``logical_descs``: lbn -> the logical TensorDesc of a blob whose parts the devices hold
    (:meth:`logical`), or None (one device: the descs are the logical ones).
    """

    def __init__(self, op_conf, descs, device, generators=None, signature=None, parallel_ctx=None,
                 logical_descs=None):
        self.op_name = op_conf.name
        self._parallel_ctx = parallel_ctx
        self._logical_descs = logical_descs
        self.device = device
        self.conf = getattr(op_conf, jb.op_kind(op_conf))
        self._ins, self._outs = jb.op_args(op_conf)
        self._descs = descs
        self.attrs = jb.user_attrs(op_conf)
        self._generators = generators
        self._signature = signature
        self._user = jb.op_kind(op_conf) == "user_conf"

    def sbp(self, name, i=0):
        """The layout (``"B"``, ``"P"``, ``"S(k)"``) of the op's blob ``name[i]`` on its
        devices; on a device grid a tuple of them, one per grid axis
        (:func:`graphfront.parallel.sbp.job_grid`); ``"B"`` on one device. The descs this
        kernel sees are the local parts."""
        if self._signature is None:
            return "B"
        return self._signature.get(f"{name}_{i}" if self._user else name, "B")

    @property
    def parallel_id(self) -> int:
        """This device's index among the devices the op runs on (OneFlow's
        ``ParallelContext.parallel_id``): given by the plan of a job whose ops sit on some
        of its devices (an op on ``"0:2-3"`` has ids 0 and 1 on the workers of devices 2
        and 3), else the rank in the job's process group; 0 on one device."""
        if self._parallel_ctx is not None:
            return self._parallel_ctx[0]
        dist = torch.distributed
        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    @property
    def parallel_num(self) -> int:
        """The number of devices the op runs on (OneFlow's ``ParallelContext.parallel_num``);
        1 on one device."""
        if self._parallel_ctx is not None:
            return self._parallel_ctx[1]
        dist = torch.distributed
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1

    def logical(self, name, i=0) -> TensorDesc:
        """The logical TensorDesc of the op's input or output blob ``name[i]`` (OneFlow's
        ``LogicalTensorDesc4ArgNameAndIndex``): the whole blob whose part this device's
        :meth:`input` / :meth:`output` describe (a split axis cut as
        :func:`graphfront.parallel.sbp.local_shape` cuts it)."""
        lbn = (self._ins.get(name) or self._outs[name])[i]
        return (self._logical_descs or self._descs)[lbn]

    def generator(self, seed=None):
        """A ``torch.Generator`` on the op's device for the kernel's own random stream,
        seeded with ``seed`` (an int), or when None with a seed drawn from torch's global
        CPU generator (so ``flow.manual_seed`` / ``torch.manual_seed`` reproduce it).
        Draws on a GPU stay on the GPU, and replays of a captured CUDA graph continue the
        same stream. None on the ``meta`` device (whose tensors hold no values)."""
        if self.device.type == "meta":
            return None
        if seed is None:
            seed = int(torch.randint(0, 2 ** 62, (1,)))
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)
        if self._generators is not None:
            self._generators.append(gen)
        return gen

    def attr(self, name):
        return self.attrs[name]

    def has_input(self, name) -> bool:
        return len(self._ins.get(name, ())) > 0

    def input(self, name, i=0) -> TensorDesc:
        return self._descs[self._ins[name][i]] if self.has_input(name) else None

    def has_output(self, name) -> bool:
        return name in self._outs

    def output(self, name, i=0) -> TensorDesc:
        return self._descs[self._outs[name][i]] if self.has_output(name) else None

    def output_count(self, name) -> int:
        return len(self._outs.get(name, ()))


def is_pure(op_conf) -> bool:
    """Whether an op (not an interface op) computes the same outputs from the same inputs
    without side effects: it has outputs and a kernel, updates nothing in place and draws
    no random numbers (the learning rate follows the train step, a variable)."""
    opdef = registry.op_def(op_conf)
    return not (opdef.interface or mutated_lbns(op_conf) or opdef.kernel is None or not opdef.outputs
                or opdef.random or opdef.op_type == "learning_rate_schedule_conf")


def make_kernel(op_conf, descs, device, native=False, generators=None, signature=None, parallel_ctx=None,
                logical_descs=None):
    """The callable computing one (non-interface) op, from its registered kernel factory
    (with ``native=True``: the op's ``native`` lowering rule where it has one);
    ``generators`` collects the generators its kernel draws from (:meth:`KernelCtx.generator`);
    ``signature``: the op's SBP signature in a multi-device job (:meth:`KernelCtx.sbp`);
    ``parallel_ctx``, ``logical_descs``: see :class:`KernelCtx`."""
    opdef = registry.op_def(op_conf)
    if opdef.kernel is None:
        raise RuntimeError(f"op '{op_conf.name}' ({opdef.op_type}) has no kernel")
    factory = opdef.native if native and opdef.native is not None else opdef.kernel
    return factory(KernelCtx(op_conf, descs, device, generators, signature, parallel_ctx, logical_descs))


def run_op(op_conf, descs, device, values, fn=None):
    """Run one op eagerly on ``values`` (lbn -> tensor); returns {lbn: tensor} of its outputs.
    ``fn``: the op's kernel (made from its factory when None)."""
    fn = fn or make_kernel(op_conf, descs, device)
    ins, outs = call_layout(op_conf)
    args = [[values[l] for l in lbns] if rep else (values[lbns[0]] if lbns else None) for lbns, rep in ins]
    with torch.no_grad():
        res = fn(*args)
    if not outs:  # (an op updating inputs in place only)
        return {}
    if len(outs) == 1:
        res = (res,)
    result = {}
    for (lbns, rep), value in zip(outs, res):
        if rep:
            result.update(zip(lbns, value))
        elif lbns:
            result[lbns[0]] = value
    return result


def _outliving(order):
    """Lbns that may alias storage outliving one call: the feeds and the variables, and
    the outputs of view ops reading them. A result that may alias them is returned as a
    copy, since futures and callbacks read their tensors only when asked, after later
    calls or ``flow.load_variables`` may have changed the variables (or the caller the
    fed array)."""
    found = set()
    for op in order:
        kind = jb.op_kind(op)
        outs = [lbn for _, _, lbn in jb.op_outputs(op)]
        if kind in ("input_conf", "variable_conf"):
            found.update(outs)
        elif kind not in INTERFACE_KINDS and is_view(op) and any(l in found for _, _, l in jb.op_inputs(op)):
            found.update(outs)
    return found


def _device_checked(order, placements):
    """Names of the ops off the CPU whose index inputs are checked in the step."""
    return {op.name for op in order if registry.op_def(op).checks is not None
            and device_of(op, placements.get(op.name, ("0:0",))).type != "cpu"}


def _hoistable(order, aliased, exclude=()):
    """Names of ops computed from variables only (that no op of the job updates), but
    those in ``exclude``."""
    mutated = set()
    for op in order:
        mutated.update(mutated_lbns(op))
    ready = set()  # lbns available before the step: un-mutated variables and hoisted outputs
    hoisted = []
    for op in order:
        kind = jb.op_kind(op)
        outs = [lbn for _, _, lbn in jb.op_outputs(op)]
        if kind == "variable_conf":
            if outs[0] not in mutated and outs[0] not in aliased:
                ready.update(outs)
            continue
        ins = [lbn for _, _, lbn in jb.op_inputs(op)]
        if ins and not op.ctrl_in_op_name and all(l in ready for l in ins) and is_pure(op) and \
                op.name not in exclude and not any(l in aliased for l in outs):
            ready.update(outs)
            hoisted.append(op.name)
    return set(hoisted)


_source_ids = itertools.count(1)


def _register_source(owner, what: str, source: str) -> str:
    """A file name for generated ``source``, its lines kept in :mod:`linecache` while ``owner`` lives.

    Tracebacks, debuggers and ``inspect.getsource`` then show the generated lines, and
    ``torch.compile`` traces the generated function itself: torch releases before 2.13 wrap a
    function without a source file in one shared frame, whose recompile limit (8) a process then
    reaches at its ninth compiled job.
    """
    filename = f"<{what} #{next(_source_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    weakref.finalize(owner, linecache.cache.pop, filename, None)
    return filename


class Plan(ScheduleWalk, Lowering):
    """The executable form of a completed Job (see module docstring).

    Args:
        job: the completed Job.
        variables: the session's VariableStore.
        watchers: uuid -> handler for ``foreign_watch_conf`` ops.
        kernel_wrapper: optional ``(op_conf, fn) -> fn`` applied to every kernel.
        cuda_graph: allow CUDA-graph capture and replay (effective on CUDA placements only).
        native: generate the function for a whole-job compiler (see
            :mod:`graphfront.runtime.native`): ops' ``native`` lowering rules replace their
            kernels, nothing is hoisted and no CUDA graph is captured here.
        bound: lbns whose values every call passes after the inputs' feeds, in this order
            (the forward values an eager step computed already): an op all of whose
            outputs are bound does not run, its outputs are read from the feeds.
        ran: names of ops that do not run either (they ran in an earlier call, as the
            forward ops of a pipelined micro-batch): those of their outputs in ``bound``
            are read from the feeds, the others are never read.
        returning: lbns the plan returns after the return ops' results, in this order
            (the forward values a later call binds).
        checks_in_step: check computed index values in the step on the CPU too (as on a
            GPU: clamped, flagged, raised after the step) instead of the kernel raising
            mid-step: a worker of a multi-device job, whose collectives every worker must
            complete.
        fuse_bytes: fuse ops with a ``fused`` kernel (the all-reduces of gradients) into
            buckets of up to this many bytes of their logical inputs (0: each op alone):
            an op joins its bucket instead of running at once, and the bucket runs as one
            call before anything reads one of its outputs, before any other collective
            (every worker keeps one order of collectives) or when it is full.
        agree: ``agree(error or None)``, called once per call at the agreement point
            with the exception the ops before it raised, or None: the workers of a
            multi-device job settle there whether every device's step went well (it
            raises on all of them when one failed), so that none waits in a collective
            for a device that stopped and none updates its variables when another could
            not. An op before that point that raises stops the ops after it but the
            collectives, which still run (on zeros), so that the other devices complete
            theirs.
        agree_before: op names: the agreement point is before the first of them (a train
            job's variable updates), at the plan's end when none is in it. The index
            checks made in the step before that point are part of the agreement (a bad
            index is the device's error). With ``agree``, :meth:`drain` runs the plan's
            collectives alone, on zeros (a worker whose step failed, on its later plans).
        updates: names of the ops that update a variable after the forward pass, which a
            failed in-step index check skips (default: those of ``job``, from the scope
            symbols of this process, :func:`graphfront.runtime.walk.update_ops`).
        signatures: op name -> its SBP signature (bn -> SBP string), for the plan of one
            device of a multi-device job: its kernels see their layouts and device index
            (:class:`KernelCtx`).
        parallel_ctxs: op name -> ``(parallel_id, parallel_num)``, this device's index among
            the op's devices and their number (:attr:`KernelCtx.parallel_id`).
        logical_descs: lbn -> logical TensorDesc of every blob of a multi-device job, whose
            parts ``job`` describes (:meth:`KernelCtx.logical`).

    Attributes:
        source: the generated Python source of the plan function (and ``hoisted()``).
        input_names: input op names, in feed order.
        output_names: return op names, in result order.
        order: the scheduled op confs.
        cuda_graph: whether CUDA-graph replay was allowed (``FunctionConfig().enable_cuda_graph``).
        cudnn_flags: the ``torch.backends.cudnn`` flags set while a step runs
            (:func:`cudnn_flags`; empty: torch's flags as they are).
        hoisted: names of the ops computed once per variable state.
    """

    def __init__(self, job, variables, watchers=None, kernel_wrapper=None, cuda_graph=True, native=False,
                 bound=(), signatures=None, parallel_ctxs=None, logical_descs=None, ran=(), returning=(),
                 checks_in_step=False, fuse_bytes=0, agree=None, agree_before=(), updates=None):
        super().__init__(job)
        self._signatures = signatures or {}
        self._parallel_ctxs = parallel_ctxs or {}
        self._logical_descs = logical_descs
        self._checks_in_step = checks_in_step
        self._fuse_bytes = fuse_bytes
        self._buckets = {}  # key -> [(op, input lbn, output lbn)]; the ops' deferred ``del`` names
        self._bucket_dead = {}
        self._in_flight = {}  # handle name -> output lbns of a bucket whose collective may still run
        self._agree, self._agree_at = agree, None  # (the line before which the workers agree)
        self._agree_before = agree_before
        self._agree_rows = None  # the check rows made before the agreement point
        self._collective_lines = {}  # line index -> the line on zero inputs (None: no zero variant)
        self._updates = set(update_ops(job) if updates is None else updates)
        self._skip_flags = {}  # device -> the name of the in-step checks' skip flag there
        self.cuda_graph = bool(cuda_graph)
        self._variables, self._watchers = variables, watchers
        self._kernel_wrapper, self._native = kernel_wrapper, native
        self._bound = {lbn: len(self.input_names) + k for k, lbn in enumerate(bound)}  # lbn -> feed index
        self._bound_ops = {op.name for op in self.order if jb.op_kind(op) not in INTERFACE_KINDS and (
            op.name in ran or jb.op_outputs(op) and all(l in self._bound for _, _, l in jb.op_outputs(op)))}
        self.hoisted = set() if native else _hoistable(self.order, self.aliased,
                                                       _device_checked(self.order, self.placements) | self._bound_ops)
        self._outliving = _outliving(self.order)
        self.env = {"torch": torch}
        self._names = {}  # lbn -> local variable name
        self._lbn_device = {}
        self._last_use = {}
        for i, op in enumerate(self.order):
            if op.name in self.hoisted or op.name in self._bound_ops:
                continue
            for _, _, lbn in jb.op_inputs(op):
                self._last_use[lbn] = i
        self._last_use.update(dict.fromkeys(returning, len(self.order)))
        self._lines, self._hoist_lines, self._hoist_outs = [], [], []
        self._results = []
        self._device_keys = {}
        self._var_keys = {}
        self.devices = set()
        self.has_watchers = False
        self.host_reads = False
        self.generators = []  # the kernels' own generators (registered with a captured CUDA graph)
        self.checks = StepChecks()  # index checks: of fed values on the host, of computed ones in the step
        self._feed_of = {}     # lbn -> feed index
        self._check_rows = []  # names of the in-step check rows, in schedule order
        self.walk()
        for key in list(self._buckets):
            self._flush(key)
        for handle in list(self._in_flight):
            self._wait(handle)
        if agree is not None:
            drain = [self._collective_lines[i] or self._lines[i] for i in sorted(self._collective_lines)]
            rows = self._check_rows if self._agree_rows is None else self._agree_rows
            if rows:
                self.env["CHECK_ERROR"] = lambda rows: self.checks.error(_check_flags(rows).cpu().numpy())
            self._lines = _agreeing(self._lines, len(self._lines) if self._agree_at is None else self._agree_at,
                                    self._collective_lines, rows)
            self.env["AGREE"] = agree
        names, lines, var_keys = self._names, self._lines, self._var_keys
        src = []
        if agree is not None:
            src.append("def drain():\n" + "\n".join("    " + line for line in drain or ["pass"]) + "\n")
        if self._hoist_lines and self._hoist_outs:
            hoisted_inputs = {l for op in self.order if op.name in self.hoisted for _, _, l in jb.op_inputs(op)}
            hoist_vars = [(n, k) for n, k in var_keys.items() if f"{n}/out" in hoisted_inputs]
            var_lines = [f"{names[f'{n}/out']} = {k}" for n, k in hoist_vars]
            body = "\n".join("    " + ln for ln in var_lines + self._hoist_lines)
            outs_tuple = "(" + "".join(o + ", " for o in self._hoist_outs) + ")"
            src.append(f"def hoisted():\n{body}\n    return {outs_tuple}\n")
            key_expr = "(" + "".join(f"{k}._version, " for _, k in hoist_vars) + ")"
            src.append(f"def hoist_key():\n    return {key_expr}\n")
            self.env["HOISTED"] = [None, None]
            lines = ["if HOISTED[0] != hoist_key():  # variable-only ops: once per variable state",
                     "    HOISTED[1] = hoisted()",
                     "    HOISTED[0] = hoist_key()",
                     f"{outs_tuple[1:-1]}= HOISTED[1]"] + lines
        else:  # (hoisted ops whose results nobody reads need not run at all)
            self.hoisted = set()
        returned = sorted(self._results, key=lambda r: int(r[1:]))
        for k, lbn in enumerate(returning):
            copy = ".clone()" if lbn in self.aliased or lbn in self._outliving else ""
            lines.append(f"f{k} = {names[lbn]}{copy}  # returned for a later call")
            returned.append(f"f{k}")
        if self._check_rows:  # the rows of the in-step checks: one more result, read after the step
            self.env["CHECK_FLAGS"] = _check_flags
            lines.append(f"checks = CHECK_FLAGS([{', '.join(self._check_rows)}])")
            returned.append("checks")
        body = "\n".join("    " + ln for ln in lines) or "    pass"
        ret = "(" + "".join(r + ", " for r in returned) + ")"
        src.append(f"def plan(feeds):\n{body}\n    return {ret}\n")
        self.source = "\n".join(src)
        filename = _register_source(self, f"graphfront plan {job.job_conf.job_name!r}", self.source)
        exec(compile(self.source, filename, "exec"), self.env)
        self._fn = self.env["plan"]
        self._drain = self.env.get("drain")
        self.cudnn_flags = cudnn_flags(job.job_conf)
        self._graph = None
        if "cpu" in self.devices:
            keep_freed_host_memory()
        # (only a job wholly on the GPU: a graph replays device work only, never the host's ops)
        if cuda_graph and not native and self.devices == {"cuda"} and torch.cuda.is_available():
            self._graph = CudaGraphRunner.maybe(self, self.descs)

    # ------------------------------------------------------------------ the walk: one line per op
    def run_op(self, i, op):
        device = self.device(op)
        if jb.op_kind(op) != "return_conf":  # a return op (on the CPU by allow_cpu_return_op) copies
            self.devices.add(device.type)     # nothing in the step: its blob is read after it
        outs = jb.op_outputs(op)
        for _, _, lbn in outs:
            self._names[lbn] = f"v{len(self._names)}"
            self._lbn_device[lbn] = device
        self._device = device
        reads = {lbn for _, _, lbn in jb.op_inputs(op)}
        collective = registry.op_def(op).boxing
        if self._agree is not None and self._agree_at is None and op.name in self._agree_before:
            self._agree_at, self._agree_rows = len(self._lines), list(self._check_rows)
        for key, members in list(self._buckets.items()):  # a bucket runs before its outputs are read
            if collective and not self._joins(op) or any(out in reads for _, _, out in members):
                self._flush(key)
        for handle, results in list(self._in_flight.items()):
            if results & reads:
                self._wait(handle)
        super().run_op(i, op)
        if op.name in self.hoisted:
            return
        last_use = self._last_use
        dead = [lbn for _, _, lbn in jb.op_inputs(op) if last_use.get(lbn) == i]
        if jb.op_kind(op) != "return_conf":
            made = [lbn for _, _, lbn in outs if op.name not in self._bound_ops or lbn in self._bound]
            dead += [lbn for lbn in made if lbn not in last_use]
        key = self._bucket_of(op)
        if key is not None:  # (deleted after the bucket runs)
            self._bucket_dead[key] += dead
            if sum(self._bytes(lbn) for _, lbn, _ in self._buckets[key]) >= self._fuse_bytes:
                self._flush(key)
            return
        for key, members in list(self._buckets.items()):  # (a bucket's inputs live until it runs)
            if any(lbn == src for _, src, _ in members for lbn in dead):
                self._flush(key)
        self._delete(dead)

    def _delete(self, lbns):
        if lbns:
            self._lines.append(f"del {', '.join(sorted({self._names[l] for l in lbns}, key=lambda s: int(s[1:])))}")

    def _joins(self, op) -> bool:
        """Whether ``op`` runs in a bucket of its op type's ``fused`` kernel."""
        return bool(self._fuse_bytes) and registry.op_def(op).fused is not None and op.name not in self.hoisted \
            and op.name not in self._bound_ops and not op.ctrl_in_op_name

    def _bucket_of(self, op):
        """The key of the bucket ``op`` joined (:meth:`compute`), or None."""
        return next((key for key, members in self._buckets.items() if members and members[-1][0] is op), None)

    def _bytes(self, lbn) -> int:
        d = (self._logical_descs or self.descs)[lbn]  # (logical: every worker fills its buckets alike)
        return d.numel * d.dtype.itemsize

    def _flush(self, key):
        """Run bucket ``key``: one call of its op type's ``fused`` kernel."""
        members = self._buckets.pop(key)
        op, _, first = members[0]
        fn = registry.op_def(op).fused(KernelCtx(op, self.descs, self._lbn_device[first],
                                                 signature=self._signatures.get(op.name),
                                                 parallel_ctx=self._parallel_ctxs.get(op.name),
                                                 logical_descs=self._logical_descs))
        k = f"B{len(self.env)}"
        self.env[k] = fn if self._kernel_wrapper is None else self._kernel_wrapper(op, fn)
        ins = ", ".join(self._names[src] for _, src, _ in members)
        outs = "".join(self._names[out] + ", " for _, _, out in members)
        names = ", ".join(repr(m[0].name) for m in members)
        handle = f"w{k[1:]}"
        line = f"({outs}), {handle} = {k}([{ins}])  # {len(members)} fused ({jb.op_type_name(op)}): {names}"
        if self._agree is None:
            self._lines.append(line)
        else:
            zeros = ", ".join(self._zeros(src, self._lbn_device[first]) for _, src, _ in members)
            self._collective(line, f"({outs}), {handle} = {k}([{zeros}])")
        self._in_flight[handle] = {out for _, _, out in members}
        self._delete(self._bucket_dead.pop(key))

    def _wait(self, handle):
        """Wait for the collective of a bucket (:meth:`_flush`) before its outputs are read."""
        del self._in_flight[handle]
        self._collective(f"{handle}.wait()")
        self._collective(f"del {handle}")

    def _skip_flag(self, device) -> str:
        """The name of the int64 ``(1,)`` flag on ``device``, nonzero when an index check made
        in the step so far failed (the ``skip_if`` of the variable updates)."""
        if device not in self._skip_flags:
            name = f"skip{len(self._skip_flags)}"
            self.env["SKIP_FLAG"], self.env["SKIP_EITHER"] = _skip_flag, _skip_either
            self._lines.append(f"{name} = SKIP_FLAG([{', '.join(self._check_rows)}], {self._device_key(device)})")
            self._skip_flags[device] = name
        return self._skip_flags[device]

    def _collective(self, line, on_zeros=None):
        """Append a line of a collective, which runs also after an op before the agreement
        point raised (``agree``): then as ``on_zeros``, the line on zero inputs."""
        self._collective_lines[len(self._lines)] = on_zeros
        self._lines.append(line)

    def _zeros(self, lbn, device) -> str:
        """The expression of zeros of blob ``lbn``'s local shape and dtype on ``device``."""
        d = self.descs[lbn]
        key = f"Z{len(self.env)}"
        self.env[key] = functools.partial(torch.zeros, tuple(d.shape), dtype=d.dtype.torch, device=device)
        return f"{key}()"

    def input(self, i, op, lbn, feed_index):
        self._feed_of[lbn] = feed_index
        self._lines.append(f"{self._names[lbn]} = feeds[{feed_index}]  # {_comment(op)}")

    def variable(self, i, op, lbn):
        key = f"V{i}"
        self._var_keys[op.name] = key
        self.env[key] = self._variables.tensors[op.name]
        self._lines.append(f"{self._names[lbn]} = {key}  # {_comment(op)}")

    def output(self, i, op, src, result_index):
        r = f"r{result_index}"
        copy = ".clone()" if src in self.aliased or src in self._outliving else ""
        self._lines.append(f"{r} = {self._names[src]}{copy}  # {_comment(op)}")
        self._results.append(r)

    def watch(self, i, op, src):
        key = f"W{i}"
        self.env[key] = watcher(self._watchers, op.foreign_watch_conf.handler_uuid)
        copy = ".clone()" if src in self.aliased else ""
        self._lines.append(f"{key}({self._names[src]}{copy})  # {_comment(op)}")
        self.has_watchers = True

    def compute(self, i, op):
        device, names = self._device, self._names
        if self._joins(op):  # (runs later, in its bucket: :meth:`_flush`)
            (_, _, src), = jb.op_inputs(op)
            (_, _, out), = jb.op_outputs(op)
            key = (jb.op_type_name(op), str(device), repr(sorted(jb.user_attrs(op).items())), self.descs[src].dtype,
                   self._parallel_ctxs.get(op.name), self.placements.get(op.name))
            self._buckets.setdefault(key, []).append((op, src, out))
            self._bucket_dead.setdefault(key, [])
            return
        if op.name in self._bound_ops:
            for lbn in (lbn for _, _, lbn in jb.op_outputs(op) if lbn in self._bound):
                self._lines.append(f"{names[lbn]} = feeds[{self._bound[lbn]}]  # {_comment(op)}, computed already")
            return
        key = f"K{i}"
        fn = make_kernel(op, self.descs, device, self._native, self.generators, self._signatures.get(op.name),
                         self._parallel_ctxs.get(op.name), self._logical_descs)
        opdef = registry.op_def(op)
        self.host_reads |= opdef.host_reads
        self._follow_feed(op, opdef)
        guarded, guard_lines = self._index_checks(i, op, opdef, device)
        ins, out_groups = call_layout(op)
        args = []
        for lbns, rep in ins:
            if rep:
                args.append("[" + ", ".join(guarded.get(l) or self._arg(l, device) for l in lbns) + "]")
            else:
                args.append((guarded.get(lbns[0]) or self._arg(lbns[0], device)) if lbns else "None")
        targets = []
        for lbns, rep in out_groups:
            if rep:
                targets.append("(" + "".join(names[l] + ", " for l in lbns) + ")" if lbns else "_")
            else:
                targets.append(names[lbns[0]] if lbns else "_")
        if self._kernel_wrapper is not None:
            fn = self._kernel_wrapper(op, fn)
        self.env[key] = fn
        skip = self._skip_flag(device) if op.name in self._updates and self._check_rows \
            and self._agree is None else None
        arg_names = [a.name for a in opdef.inputs]
        if skip is not None and "skip_if" in arg_names:
            at = arg_names.index("skip_if")
            args[at] = skip if args[at] == "None" else f"SKIP_EITHER({args[at]}, {skip})"
            skip = None  # (the update op skips itself)
        assign = "" if not targets else f"{', '.join(targets)} = "
        line = f"{assign}{key}({', '.join(args)})  # {_comment(op)}"
        if skip is not None:  # another op writing variables: their old values put back
            written = "".join(names[lbn] + ", " for lbn in mutated_lbns(op))
            self.env["KEEP_UNLESS_SKIPPED"] = keep_unless_skipped
            self._lines += [f"kept = [t.clone() for t in ({written})]", line,
                            f"KEEP_UNLESS_SKIPPED({skip}, ({written}), ({written}), kept)", "del kept"]
            return
        if opdef.boxing and self._agree is not None and op.name not in self.hoisted:
            zeros = [("[" + ", ".join(self._zeros(l, device) for l in lbns) + "]") if rep else
                     (self._zeros(lbns[0], device) if lbns else "None") for lbns, rep in ins]
            self._lines.extend(guard_lines)  # (a collective's checked inputs: computed before it)
            self._collective(line, f"{assign}{key}({', '.join(zeros)})")
            return
        if op.name in self.hoisted:
            self._hoist_lines.append(line)
            used = [lbn for _, _, lbn in jb.op_outputs(op) if lbn in self._last_use]
            self._hoist_outs.extend(names[l] for l in used)
            return
        self._lines.extend(guard_lines)
        self._lines.append(line)
        if guarded:
            self._lines.append(f"del {', '.join(guarded.values())}")

    def _follow_feed(self, op, opdef):
        """A view op of one fed blob whose one output holds every element of it, of its dtype
        (a reshape, squeeze, transpose, a whole slice...): its output's values are the feed's,
        so an index check of them is made on the host, on the feed, like the feed's own."""
        ins, outs = jb.op_inputs(op), jb.op_outputs(op)
        if opdef.view and len(ins) == 1 and len(outs) == 1 and ins[0][2] in self._feed_of:
            src, out = self.descs[ins[0][2]], self.descs[outs[0][2]]
            if src.numel == out.numel and src.dtype is out.dtype:
                self._feed_of[outs[0][2]] = self._feed_of[ins[0][2]]

    def _index_checks(self, i, op, opdef, device):
        """The index checks of op ``i`` (its ``checks`` rule): each fed value is added to the
        checks of the feeds; each computed one on a device other than the CPU is guarded in
        the step. Returns ``(guarded, lines)``: lbn -> the name of its clamped value, and
        the lines computing them (the CPU kernel raises the op's error itself)."""
        guarded, lines = {}, []
        if opdef.checks is None:
            return guarded, lines
        ins = jb.op_args(op)[0]
        for a, size, error in opdef.checks(KernelCtx(op, self.descs, device)):
            for lbn in ins.get(a, ()):
                if lbn in self._feed_of:  # a fed value: checked on the host before the step
                    self.checks.add_feed(self._feed_of[lbn], size, error)
                elif (device.type != "cpu" or self._checks_in_step) and self.descs[lbn].shape and \
                        0 not in self.descs[lbn].shape:
                    row, gkey = f"c{len(self._check_rows)}", f"G{i}_{len(guarded)}"
                    self.env[gkey] = _index_guard(size)
                    guarded[lbn] = f"{self._names[lbn]}g"
                    lines.append(f"{row}, {guarded[lbn]} = {gkey}({self._arg(lbn, device)})")
                    self.checks.in_step.append((row, tuple(self.descs[lbn].shape), error))
                    self._check_rows.append(row)
        return guarded, lines

    def _arg(self, lbn, device):
        """The expression reading blob ``lbn`` on ``device`` (a copy when it lives elsewhere)."""
        expr = self._names[lbn]
        if self._lbn_device.get(lbn) != device:
            expr = f"{expr}.to({self._device_key(device)}, non_blocking=True)"
        return expr

    def _device_key(self, device) -> str:
        """The name that binds ``device`` in the plan's globals."""
        key = str(device)
        if key not in self._device_keys:
            self._device_keys[key] = f"D{len(self._device_keys)}"
            self.env[self._device_keys[key]] = device
        return self._device_keys[key]

    def drain(self):
        """Run the plan's collectives alone, each on zeros (made with ``agree``): the part a
        worker whose step failed still takes in a call, so that the others complete theirs."""
        self._drain()

    @property
    def uses_cuda_graph(self) -> bool:
        """Whether calls replay a captured CUDA graph (after the warm-up call)."""
        return self._graph is not None and not self._graph.failed

    def check_feeds(self, arrays):
        """Raise the error of the first bad fed index value (of an op's ``checks``), given
        the feeds as numpy arrays in feed order (None: not checked here): the caller's
        check before it copies the feeds to the device. Feeds that are CPU tensors are
        checked by the call itself."""
        self.checks.check_feeds(arrays)

    def __call__(self, feeds):
        checked = {i for i, _, _ in self.checks.on_feeds}
        if checked and all(isinstance(feeds[i], torch.Tensor) and feeds[i].device.type == "cpu" for i in checked):
            self.checks.check_feeds([f.numpy() if i in checked else None for i, f in enumerate(feeds)])
        if self.cudnn_flags:
            with cudnn_flags_set(self.cudnn_flags):
                outs = self._run(feeds)
        else:
            outs = self._run(feeds)
        if self.checks.in_step:  # (jobs whose checked indices are computed on a GPU: one small read)
            *outs, flags = outs
            self.checks.raise_failed(flags.cpu().numpy())
            outs = tuple(outs)
        return outs

    def _run(self, feeds):
        """The plan function's results on ``feeds`` (the in-step check flags last, if any)."""
        if self._graph is not None and not self._graph.failed:
            return self._graph(feeds)
        with torch.no_grad():
            return self._fn(feeds)


#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HOST_MEMORY_KEPT = []   # (the outcome of the first call, per process)


def keep_freed_host_memory(limit: int = 1 << 30) -> bool:
    """Have glibc's ``malloc`` keep the memory that CPU tensors free, for the next step.

    By default glibc gives each block above a threshold (128 KiB at first, rising with the
    blocks freed, up to 32 MiB) its own ``mmap`` and unmaps it when freed, and trims the
    free top of its heap beyond twice that threshold: so each train step of a CPU job maps
    its large activations and gradients afresh, and the kernels writing them first take a
    page fault for every 4 KiB page (a LeNet batch-100 CPU step: about 36 ms instead of
    27). This sets
    ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` to ``limit`` bytes (``mallopt(3)``):
    blocks below it come from the heap, and up to ``limit`` free bytes at its top stay
    mapped, so a step reuses the pages the previous one freed, as OneFlow's runtime
    reuses the memory it allocates once per job. The process then keeps its peak host
    memory mapped, as a caching allocator does.

    Once per process; nothing is changed where the C library is not glibc, or where the
    environment already tunes glibc's ``malloc`` (``MALLOC_*`` variables or
    ``glibc.malloc`` in ``GLIBC_TUNABLES``: the user's settings stand).

    Returns:
        bool: whether glibc took the settings (in this call or an earlier one).
    """
    if not _HOST_MEMORY_KEPT:
        tuned = any(k.startswith("MALLOC_") for k in os.environ) or "glibc.malloc" in os.environ.get(
            "GLIBC_TUNABLES", "")
        ok = False
        if not tuned and platform.libc_ver()[0] == "glibc":
            mallopt = ctypes.CDLL("libc.so.6").mallopt
            ok = bool(mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(limit))) and bool(
                mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(limit)))
        _HOST_MEMORY_KEPT.append(ok)
    return _HOST_MEMORY_KEPT[0]


def cudnn_flags(job_conf) -> dict:
    """The ``torch.backends.cudnn`` flags a job's config sets for its convolutions, from
    OneFlow's settings (``JobConfigProto``): ``cudnn_conv_heuristic_search_algo`` False
    (cuDNN's exhaustive algorithm search) is ``benchmark=True``, and
    ``cudnn_conv_use_deterministic_algo_only`` is ``deterministic``; a setting the config
    leaves unset leaves torch's flag as it is."""
    flags = {}
    if job_conf.HasField("cudnn_conv_heuristic_search_algo"):
        flags["benchmark"] = not job_conf.cudnn_conv_heuristic_search_algo
    if job_conf.HasField("cudnn_conv_use_deterministic_algo_only"):
        flags["deterministic"] = job_conf.cudnn_conv_use_deterministic_algo_only
    return flags


@contextlib.contextmanager
def cudnn_flags_set(flags):
    """``torch.backends.cudnn``'s ``flags`` (name -> bool) while the block runs, the
    previous values restored after it (torch's own ``cudnn.flags`` resets every flag)."""
    cudnn = torch.backends.cudnn
    saved = {name: getattr(cudnn, name) for name in flags}
    for name, value in flags.items():
        setattr(cudnn, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(cudnn, name, value)


def _index_guard(size):
    """``ids -> (row, clamped ids)`` for an index input checked in the step: ``row`` the
    int64 vector ``[failed, flat index, value]`` of the first element outside
    ``[0, size)`` (``failed`` 0 when none is), ``clamped`` the ids clamped into range so
    that the kernel never reads outside its input. Nothing is read on the host. A
    ``size`` of ``(size, ignored)`` also allows (and keeps) the value ``ignored``."""
    size, ignored = size if isinstance(size, tuple) else (size, None)

    def guard(ids):
        flat = ids.reshape(-1)
        bad = (flat < 0) | (flat >= size)
        if ignored is not None:
            bad = bad & (flat != ignored)
        first = torch.argmax(bad.to(torch.int32)).reshape(1)  # (0 when none is bad)
        row = torch.cat([bad.gather(0, first).to(torch.int64), first, flat.gather(0, first).to(torch.int64)])
        clamped = ids.clamp(0, size - 1)
        return row, clamped if ignored is None else torch.where(ids == ignored, ids, clamped)
    return guard


def _agreeing(lines, at, collective, rows=()):
    """``lines`` with those before index ``at`` draining, and the exception they raised (or
    None) handed to ``AGREE`` there (:class:`Plan`'s ``agree``): the runs of lines between
    the collectives' lines (``collective``: line index -> the line on zero inputs, or None
    for a line that runs as it is) each in a ``try`` block; after an exception the later
    runs are skipped and each collective runs on zeros. The index check ``rows`` made
    before ``at`` are read there (``CHECK_ERROR``): a failed one is the exception."""
    out, run = ["failed = None"], []

    def close_run():
        if run:
            out.extend(["if failed is None:", "    try:"] + ["        " + line for line in run] +
                       ["    except Exception as e:  # (handed to the other workers' agreement)",
                        "        failed = e"])
            run.clear()
    for i, line in enumerate(lines[:at]):
        if i not in collective:
            run.append(line)
            continue
        close_run()
        on_zeros = collective[i]
        out.extend([line] if on_zeros is None else ["if failed is None:", "    " + line, "else:", "    " + on_zeros])
    close_run()
    if rows:
        out += ["if failed is None:", f"    failed = CHECK_ERROR([{', '.join(rows)}])"]
    return out + ["AGREE(failed)", "del failed"] + lines[at:]


def _skip_flag(rows, device):
    """The int64 ``(1,)`` flag on ``device``: 1 when one of the check ``rows`` failed."""
    return torch.stack([row[0].to(device) for row in rows]).amax().reshape(1)


def _skip_either(skip_if, flag):
    """``skip_if`` (a one-element count) or ``flag``: nonzero when either is."""
    return ((skip_if.reshape(1) != 0) | (flag != 0)).to(skip_if.dtype)


def _check_flags(rows):
    """The step's check flags: ``[any failed]`` + every row (:class:`StepChecks`' layout)."""
    rows = torch.stack(rows)
    return torch.cat([rows[:, 0].amax().reshape(1), rows.reshape(-1)])


def _comment(op_conf) -> str:
    """The comment naming an op in generated source. Op names may come from job files, so
    they enter the source only through ``repr`` (which escapes line breaks); the op type
    is a registered op type or system op kind (``add_op`` rejected any other)."""
    return f"{op_conf.name!r} ({jb.op_type_name(op_conf)})"


class CudaGraphRunner:
    """Capture a plan once into a CUDA graph and replay it (needs CUDA; see module doc).

    Everything a step computes is on the device (the learning-rate schedule too, from
    the train step there), so a replay needs nothing from the host but the feeds; the
    variable-only (hoisted) results are recomputed into the graph's buffers when a
    variable they read was written from outside (``flow.load_variables``).
    """

    def __init__(self, plan):
        self.plan = plan
        self.failed = False
        self.calls = 0
        self.graph = None
        self.static_feeds = None
        self.static_outs = None

    @classmethod
    def maybe(cls, plan, descs):
        """A runner for ``plan`` (whose blobs ``descs`` describes), or None when the plan
        cannot be captured (watch handlers, host reads, dynamic shapes, a host data pipeline)."""
        if plan.has_watchers or plan.host_reads:
            return None
        if any(d.is_dynamic for d in descs.values()):
            return None
        if any(d.dtype.torch is None for d in descs.values()):  # a host data pipeline (readers) feeds the job
            return None
        return cls(plan)

    def __call__(self, feeds):
        if self.calls == 0:  # warm-up on a side stream (allocator and library handles); its
            stream = torch.cuda.Stream()  # errors are the step's (a bad value, out of memory)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream), torch.no_grad():
                outs = self.plan._fn(feeds)
            torch.cuda.current_stream().wait_stream(stream)
            self.calls += 1
            return outs
        self.calls += 1
        try:
            if self.graph is None:
                self._capture(feeds)
            return self._replay(feeds)
        except Exception as e:  # noqa: BLE001 - any capture problem means: run eagerly
            self.failed = True
            warnings.warn(f"graphfront: CUDA graph capture of job '{self.plan.job.job_conf.job_name}' failed "
                          f"({type(e).__name__}: {e}); running it eagerly")
            with torch.no_grad():
                return self.plan._fn(feeds)

    def _capture(self, feeds):
        self.static_feeds = [f.clone() for f in feeds]
        graph = torch.cuda.CUDAGraph()
        if self.plan.generators and not hasattr(graph, "register_generator_state"):
            raise RuntimeError("this torch cannot register a kernel's own generator with a CUDA graph")
        for gen in self.plan.generators:  # the kernels' own generators: replays continue their streams
            graph.register_generator_state(gen)
        try:
            with torch.cuda.graph(graph), torch.no_grad():
                self.static_outs = self.plan._fn(self.static_feeds)
        except BaseException:
            _release_generators(self.plan.generators)
            raise
        self.graph = graph

    def _refresh_hoisted(self):
        env = self.plan.env
        if "hoisted" not in env:
            return
        key = env["hoist_key"]()
        if env["HOISTED"][0] != key:
            for old, new in zip(env["HOISTED"][1], env["hoisted"]()):
                old.copy_(new)
            env["HOISTED"][0] = key

    def _replay(self, feeds):
        self._refresh_hoisted()
        for s, f in zip(self.static_feeds, feeds):
            s.copy_(f, non_blocking=True)
        self.graph.replay()
        return tuple(o.clone() for o in self.static_outs)


def _release_generators(generators):
    """After a failed capture, give each generator registered with the graph (and the
    device's default one) a fresh copy of its state: a capture that ended in an error
    can leave a state marked as capturing, which makes every later draw outside a
    graph fail ("Offset increment outside graph capture")."""
    gens = list(generators)
    try:
        gens.append(torch.cuda.default_generators[torch.cuda.current_device()])
    except (AttributeError, IndexError, RuntimeError):
        pass
    for gen in gens:
        try:
            gen.graphsafe_set_state(gen.clone_state())
        except (AttributeError, RuntimeError):
            pass
