"""The XLA lowering: a whole completed Job compiled by XLA through JAX.

``FunctionConfig().compile_mode("xla")`` lowers a job to one pure function

    step(mutable_vars, const_vars, feeds, learning_rates, key_data)
        -> (results, new_mutable_vars, key_data, watched, checks)

built by walking the scheduled ops (:class:`graphfront.runtime.walk.ScheduleWalk`) and calling
each op's ``xla`` rule (see :mod:`graphfront.ops.registry`) on ``jax.Array`` values: an
in-place update becomes a rebinding of the updated blob to the op's new value, and a
variable's final value is returned as its new state. ``jax.jit`` compiles that function
(the variables updated by the job are donated, so XLA updates their buffers in place);
the result is the fused native code of the whole step, as OneFlow's XRT handed sub-graphs
to XLA (``use_xla_jit``, ``oneflow/xrt/xla/``). ``key_data`` (jobs with random ops only)
holds the raw bits of a ``jax.random`` key, first drawn on the host from torch's generator.

Host data prologue. A job's data pipeline (the OFRecord readers, their decoders and the
image ops: host work with no ``xla`` rule) stays outside the compiled step, as OneFlow's
XRT clustered only the ops its engine could take and ran the others on their own kernels:
the ops at the job's sources that have no ``xla`` rule, read no variable, update nothing
and depend only on each other (:func:`host_prologue`) run each call as a per-op
:class:`~graphfront.runtime.plan.Plan` of their own before the step, and the blobs the
step reads from them (dense, numpy-typed) are fed to it after the job's own feeds. A job
whose other ops lack a rule is still refused (named).

Watches. ``flow.watch`` and ``flow.watch_diff`` (``foreign_watch_conf`` ops; a watched
gradient is the blob the autograd pass computed for it) make the watched blobs extra
outputs of the step (``watched``, empty in jobs without watches); after the step the
handlers are called on the host, in the job's op order, with host copies of those
values, as the per-op plan passes them.

Run-time checks. A compiled step cannot raise. Rules whose kernel raises on bad values
(class labels outside ``[0, depth)`` of ``sparse_softmax_cross_entropy*``) report a check
while the step is traced (:func:`graphfront.ops.xla_rules.check_ids`, collected in a
:class:`~graphfront.ops.xla_rules.StepChecks`). A check of a value fed to the job as it
is (the usual label placeholder) is made with numpy on the feed before the step is
launched: no cost in the step. A check of a value computed in the job is made in the
step, which then returns the checks' results (``checks``; None in jobs without such
checks) and, when one failed, the old value of every mutable variable in place of its
new one (a select that XLA fuses into the update, so the donated buffers end up holding
the values they had before the call). Either way the caller raises the rule's error
(OpRunError naming the op, the expected range, the bad value and its index, as the
kernel does), calls no watch handler, and the session's variables are unchanged.

A learning-rate schedule reading the train-step variable is evaluated on the host before
each call (:func:`graphfront.ops.lr_schedule.learning_rate_at` on the variable's value) and fed
to the step, rather than through its ``xla`` rule's host callback inside the step (which
costs a round trip from compiled code to Python on every step).

Variables. The session's :class:`~graphfront.runtime.variable_store.VariableStore` holds
torch tensors that plan-mode jobs, checkpoints and ``flow.load_variables`` read and
write. An XLA job keeps its variables as jax arrays between calls (a
:class:`JaxVariables` per store, shared by the session's XLA jobs): before a run it
imports every torch tensor whose in-place version counter moved since the last sync;
after a run the torch tensors are stale until read: the store's pending flush copies the
new values into them on the next access of ``store.tensors`` (and before a plan-mode job
runs).

Compile cache. XLA executables are cached on disk by JAX's persistent compilation cache
under ``<cache root>/xla`` (``$GRAPHFRONT_CACHE_DIR``, see
:func:`graphfront.runtime.native.cache_root`, read when a job is lowered), so a second
process compiling the same job loads the executable instead of running XLA's optimizer
again. An entry's key is JAX's hash of the lowered module with the compile options, the
jax and jaxlib versions, the backend and the XLA flags: a job that lowers to another
module (other shapes, attributes or folded constants) never loads another job's
executable. A cached first call still traces the step (with nested jits disabled, so the
jnp functions the rules call add their operations straight to one flat jaxpr) and lowers
it, since the key is computed from the lowered module; then it loads the executable,
and the first run of an executable (loaded or compiled) takes XLA:CPU longer than the
next ones. For LeNet's train step (batch 100) on a 2-core CPU these are about 25-30 ms
(trace), 50-65 ms (lower), 20-30 ms (load) and 40-55 ms (first run beyond a steady one).
Serializing the step with ``jax.export`` would skip the trace and most of the lowering
(its flatbuffer deserializes in 2 ms), but calling an exported function on the CPU initializes jaxlib's
LAPACK bindings, which imports scipy (about 185 ms), more than it saves. JAX loads the
cached executables, native code, from that directory: it must be as trusted as the
installed packages (as TorchInductor's cache of ``compile_mode("native")``); graphfront
itself reads nothing from it.

Float32 precision. The step is traced under ``jax.default_matmul_precision`` set from
torch's float32 matmul precision, read when the job is lowered (:func:`float32_precision`):
full float32 (``"highest"``, torch's default and so graphfront's) makes every matmul and
convolution of the step carry ``precision=HIGHEST``, so on a GPU, where XLA's default
rounds float32 operands to TF32, the step computes what the per-op plan's torch kernels
compute (TF32 stays off there unless asked). ``flow.config.enable_tensor_float_32_compute()``
(torch's ``"high"``) gives TF32, torch's ``"medium"`` bfloat16, as in torch's matmuls; the
convolutions follow the same setting (torch's cuDNN ones follow
``torch.backends.cudnn.allow_tf32`` instead). XLA:CPU computes float32 in full either way.

Dtypes: jax runs with 64-bit types enabled (``jax_enable_x64``), so int64 and float64
blobs keep their dtypes, as in the other lowerings. That setting is global to the process.

Raises (at build): JobBuildError naming every op type without an ``xla`` rule (outside the
host data prologue), and for
jobs placed on a GPU when jax has no GPU backend; ImportError naming ``pip install
graphfront[xla]`` when jax is not installed. Raises (at run): the OpRunError of a failed
run-time check (above).
"""
from __future__ import annotations

import os
import time

import numpy as np

import torch

from graphfront.core import job_pb2, op_conf_pb2
from graphfront.framework import dtypes as _dt
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError
from graphfront.ofrecord.reader import prefetch_on_threads
from graphfront.ops import registry, xla_rules
from graphfront.ops.lr_schedule import learning_rate_at
from graphfront.runtime.native import cache_root, job_digest
from graphfront.runtime.lowering import Lowering
from graphfront.runtime.plan import KernelCtx, Plan
from graphfront.runtime.walk import (INTERFACE_KINDS, ScheduleWalk, call_layout, mutated_args, mutated_lbns, schedule,
                                     watcher)

_CACHE_EVENTS = {"hits": 0}


def import_jax():
    """jax, configured for graphfront (64-bit types; the persistent compilation cache under
    ``<cache root>/xla``). Raises ImportError naming the extra to install."""
    try:
        import jax
    except ImportError as e:
        raise ImportError("compile_mode('xla') needs jax: pip install graphfront[xla]") from e
    if not getattr(import_jax, "configured", False):
        # (JAX's runtime threads make forking this process unsafe: readers prefetch on threads)
        prefetch_on_threads("the XLA lowering runs JAX in this process")
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        jax.monitoring.register_event_listener(_on_event)
        import_jax.configured = True
    path = os.path.join(cache_root(), "xla")
    if jax.config.jax_compilation_cache_dir != path:  # ($GRAPHFRONT_CACHE_DIR changed, or first use)
        from jax.experimental.compilation_cache import compilation_cache
        jax.config.update("jax_compilation_cache_dir", path)
        compilation_cache.reset_cache()
    return jax


#: torch's float32 matmul precision (``torch.get_float32_matmul_precision()``) -> the name
#: ``jax.default_matmul_precision`` takes for the same arithmetic
_FLOAT32_PRECISION = {"highest": "float32", "high": "tensorfloat32", "medium": "bfloat16"}


def float32_precision() -> str:
    """The ``jax.default_matmul_precision`` an XLA step is traced with (module docstring):
    ``"float32"`` (full precision) unless torch's float32 matmul precision was lowered
    (``"tensorfloat32"`` for ``"high"``, ``"bfloat16"`` for ``"medium"``)."""
    return _FLOAT32_PRECISION.get(torch.get_float32_matmul_precision(), "float32")


def _on_event(event, **kwargs):
    if event == "/jax/compilation_cache/cache_hits":
        _CACHE_EVENTS["hits"] += 1


def missing_rules(order) -> list:
    """Sorted op types (or system op kinds) of ``order`` that have no ``xla`` rule."""
    return sorted({jb.op_type_name(op) for op in order
                   if not registry.op_def(op).interface and registry.op_def(op).xla is None})


def host_prologue(job, order=None) -> tuple:
    """``(op names, boundary lbns)``: the job's host data prologue (module docstring) and,
    in schedule order, the blobs of it that ops outside it read.

    An op belongs to it when it has no ``xla`` rule, is not an interface op, updates no
    input in place, and its inputs and control inputs all come from ops of the prologue
    (a source op, or one fed by sources only). A prologue that would hand the step a blob
    numpy cannot hold (records, tensor buffers) is none: ``(set(), [])``."""
    order = schedule(job)[0] if order is None else order
    names, producer = set(), {}
    for op in order:
        for _, _, lbn in jb.op_outputs(op):
            producer[lbn] = op.name
        if jb.op_kind(op) in INTERFACE_KINDS or registry.op_def(op).xla is not None or mutated_args(op):
            continue
        if all(producer.get(lbn) in names for _, _, lbn in jb.op_inputs(op)) and \
                all(name in names for name in op.ctrl_in_op_name):
            names.add(op.name)
    boundary = list(dict.fromkeys(lbn for op in order if op.name not in names
                                  for _, _, lbn in jb.op_inputs(op) if producer.get(lbn) in names))
    descs = job.helper.lbn2logical_blob_desc
    if any(_dt.from_proto(descs[lbn].data_type).np is None for lbn in boundary):
        return set(), []
    return names, boundary


def _prologue_job(job, names, boundary):
    """A Job of the prologue's ops alone, returning the ``boundary`` blobs in order."""
    pj = job_pb2.Job()
    pj.CopyFrom(job)
    del pj.net.op[:]
    pj.net.op.extend(op for op in job.net.op if op.name in names)
    device_tag = {op.name: op.device_tag for op in job.net.op}
    for k, lbn in enumerate(boundary):
        ret = op_conf_pb2.OperatorConf(name=f"System-XlaHostPrologue-Return_{k}",
                                       device_tag=device_tag[lbn.split("/")[0]])
        setattr(ret.return_conf, "in", lbn)
        ret.return_conf.out = "out"
        pj.net.op.append(ret)
        pj.helper.lbn2logical_blob_desc[f"{ret.name}/out"].CopyFrom(job.helper.lbn2logical_blob_desc[lbn])
    for group in pj.placement.placement_group:
        kept = [name for name in group.op_set.op_name if name in names]
        del group.op_set.op_name[:]
        group.op_set.op_name.extend(kept)
    return pj


def xla_refusal(job) -> str | None:
    """Why the XLA lowering cannot run ``job`` (completed), or None when it can: jax is not
    installed, an op type outside the host data prologue has no ``xla`` rule (named), or
    the job is placed on a GPU and jax has no GPU backend."""
    try:
        jax = import_jax()
    except ImportError as e:
        return str(e)
    prologue, _ = host_prologue(job)
    missing = missing_rules(op for op in job.net.op if op.name not in prologue)
    if missing:
        return f"op type(s) without an xla rule: {', '.join(missing)}"
    if any(op.device_tag == "gpu" for op in job.net.op):
        try:
            jax.devices("gpu")
        except RuntimeError:
            return "the job is placed on a GPU and jax has no GPU backend here"
    return None


class JaxVariables:
    """The jax copies of a VariableStore's variables, kept in sync lazily (module doc)."""

    def __init__(self, store):
        self.store = store
        self.arrays = {}     # name -> jax.Array
        self.versions = {}   # name -> torch _version when the two last agreed
        self.dirty = set()   # names whose jax value is newer than the torch tensor
        self.generation = None  # store.generation when ``arrays`` were last known current

    @classmethod
    def of(cls, store) -> "JaxVariables":
        holder = getattr(store, "jax_variables", None)
        if holder is None:
            holder = store.jax_variables = cls(store)
        return holder

    def get(self, names, device):
        """The current jax values of ``names`` (re-imported where torch wrote since)."""
        if self.store.generation == self.generation:  # no tensor can have been written since
            try:
                return [self.arrays[name] for name in names]
            except KeyError:  # a variable this holder has not imported yet
                pass
        tensors = self.store._tensors  # (not the pending flush: writers of the tensors ran it first)
        arrays, versions = self.arrays, self.versions
        out = []
        for name in names:
            t = tensors[name]
            if name not in arrays or t._version != versions[name]:
                arrays[name] = import_jax().device_put(_dt.tensor_to_numpy(t), device)  # (a copy)
                versions[name] = t._version
            out.append(arrays[name])
        self.generation = self.store.generation
        return out

    def set(self, names, values):
        """Record new jax values; the torch tensors are written when next read."""
        self.arrays.update(zip(names, values))
        self.dirty.update(names)
        store = self.store
        store.pending_flush = self.flush
        store.generation += 1  # (readers holding copies look again; these arrays are current)
        if self.generation == store.generation - 1:  # current before this run: current after it
            self.generation = store.generation

    def flush(self):
        """Copy the newer jax values into the store's torch tensors, in place."""
        tensors = self.store._tensors
        for name in sorted(self.dirty):
            t = tensors[name]
            t.copy_(_dt.numpy_to_tensor(np.array(self.arrays[name])))
            self.versions[name] = t._version
        self.dirty.clear()


class XlaPlan(Lowering):
    """What :class:`CompiledJob` calls for a job in ``compile_mode("xla")`` (module doc).

    Args:
        job: the completed Job.
        variables: the session's VariableStore.
        watchers: uuid -> handler for ``foreign_watch_conf`` ops (called after each step).

    Attributes:
        input_names, output_names, order, devices: as :class:`~graphfront.runtime.plan.Plan`.
        prologue: the :class:`~graphfront.runtime.plan.Plan` of the host data prologue
            (module docstring), run before each step; None when the job has none.
        source: a listing of the lowered ops, in order.
        digest: the completed Job's SHA-256.
        compile_seconds: wall time of tracing and compiling the step on the first call (or
            loading it from the disk cache), without running it.
        cache_hits: persistent-cache hits during that compile (> 0: loaded from disk).
        precision: the ``jax.default_matmul_precision`` of the step's matmuls and convolutions
            (:func:`float32_precision`, read when the job is lowered): ``"float32"`` unless
            torch's float32 matmul precision was lowered.
        takes_numpy: True: feeds are passed as numpy arrays (no torch conversion).
    """

    compile_mode = "xla"
    takes_numpy = True
    writes_variables = False  # (its new values go through JaxVariables.set, which moves the generation)

    def before_call(self, variables):
        """Nothing: a call reads the jax copies (re-imported where a torch tensor moved)."""

    def __init__(self, job, variables, watchers=None):
        jax = import_jax()
        self.job = job
        self.digest = job_digest(job)
        name = job.job_conf.job_name
        prologue, boundary = host_prologue(job)
        builder = _StepBuilder(job, prologue, boundary)
        order = self.order = builder.order
        missing = missing_rules(op for op in order if op.name not in prologue)
        if missing:
            raise JobBuildError(f"job '{name}': compile_mode('xla') needs an xla rule for every op (but the host "
                                f"data prologue); these op types have none: {', '.join(missing)} "
                                "(use compile_mode('plan') for this job)")
        self.prologue = Plan(_prologue_job(job, prologue, boundary), variables, watchers,
                             cuda_graph=False) if prologue else None
        order = [op for op in order if op.name not in prologue]
        self.devices = {builder.device(op).type for op in order}
        self.device = _jax_device(jax, name, "cuda" in self.devices)
        self.input_names, self.output_names = builder.input_names, builder.output_names
        names = [op.name for op in order if jb.op_kind(op) == "variable_conf"]
        mutated = _mutated_variables(order)
        self.mutable_names = [n for n in names if n in mutated]  # (donated to the step)
        self.const_names = [n for n in names if n not in mutated]
        self.var_names = self.mutable_names + self.const_names
        self.n_mutable = len(self.mutable_names)
        self.variables = JaxVariables.of(variables)
        # (the rules are made first: a rule drawing its kernel's seed from torch's generator, as
        # decode_random's, draws it in the same order as the per-op plan's kernels)
        self.precision = float32_precision()
        step, self.lr_ops, self.checks = builder.build(jax, self.mutable_names, self.const_names, self.precision)
        self.has_random = any(_is_random(op) for op in order)
        self.key = None
        if self.has_random:  # the key's raw bits, drawn on the host (no XLA computation before the step's
            # compile) and committed to the device, as the keys the step returns: one compiled variant
            spec = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))
            bits = torch.randint(0, 2 ** 32, spec.shape, dtype=torch.int64).numpy().astype(spec.dtype)
            self.key = jax.device_put(bits, self.device)
        self.handlers = [watcher(watchers, op.foreign_watch_conf.handler_uuid)
                         for op in order if jb.op_kind(op) == "foreign_watch_conf"]
        self._step = jax.jit(step, donate_argnums=(0,))
        self.source = "\n".join(
            ([f"# host data prologue (per-op plan, fed to the step):\n{self.prologue.source}"] if self.prologue else [])
            + [f"# job {name!r} lowered to one jax function compiled by XLA; its ops in order:"]
            + [f"#   {op.name!r} ({jb.op_type_name(op)})" for op in order])
        self.compile_seconds = None
        self.cache_hits = 0

    def __call__(self, feeds):
        if self.prologue is not None:  # (after the job's own feeds, in the step's order)
            feeds = list(feeds) + [_dt.tensor_to_numpy(t) for t in self.prologue([])]
        values = self.variables.get(self.var_names, self.device)
        mutable, const = values[:self.n_mutable], values[self.n_mutable:]
        lrs = self._learning_rates()
        if self.compile_seconds is None:
            return self._first_call(mutable, const, feeds, lrs)
        self.checks.check_feeds(feeds)
        return self._finish(self._step(mutable, const, feeds, lrs, self.key))

    def _finish(self, outputs):
        """Keep the step's new variables and key, raise a failed check's error (the
        variables then hold their old values), call the watch handlers; the results."""
        results, new, self.key, watched, checks = outputs
        self.variables.set(self.mutable_names, new)
        if checks is not None:
            self.checks.raise_failed(checks)
        for handler, value in zip(self.handlers, watched):
            handler(_dt.numpy_to_tensor(np.array(value)))
        return results

    def _learning_rates(self):
        if not self.lr_ops:
            return ()
        steps = self.variables.get([name for _, name in self.lr_ops], self.device)
        return tuple(np.array([learning_rate_at(conf, int(np.asarray(step).reshape(-1)[0]))], np.float32)
                     for (conf, _), step in zip(self.lr_ops, steps))

    def _first_call(self, mutable, const, feeds, lrs):
        start, hits = time.perf_counter(), _CACHE_EVENTS["hits"]
        self._step = self._step.lower(mutable, const, feeds, lrs, self.key).compile()
        self.compile_seconds = time.perf_counter() - start
        self.cache_hits = _CACHE_EVENTS["hits"] - hits
        self.checks.check_feeds(feeds)
        return self._finish(self._step(mutable, const, feeds, lrs, self.key))


def _jax_device(jax, name, gpu):
    if not gpu:
        return jax.devices("cpu")[0]
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        raise JobBuildError(f"job '{name}' is placed on a GPU but jax has no GPU backend here "
                            "(install a CUDA build of jax, or place the job on the CPU)") from None


def _is_random(op):
    return registry.op_def(op).random


def _aliases(order):
    """lbn -> variable name, for each variable's blob and the identity views of it."""
    var_of = {}
    for op in order:
        kind = jb.op_kind(op)
        if kind == "variable_conf":
            var_of[jb.op_outputs(op)[0][2]] = op.name
        elif kind == "identity_conf" or (kind == "user_conf" and op.user_conf.op_type_name == "identity"):
            (_, _, src), = jb.op_inputs(op)
            (_, _, dst), = jb.op_outputs(op)
            if src in var_of:
                var_of[dst] = var_of[src]
    return var_of


def _mutated_variables(order):
    """Names of the variables some op of ``order`` updates in place."""
    var_of = _aliases(order)
    names = set()
    for op in order:
        for lbn in mutated_lbns(op):  # (a user op's or a system op's, as assign_conf)
            if lbn not in var_of:
                raise JobBuildError(f"op '{op.name}' updates blob '{lbn}' in place, which is not a variable "
                                    "(or an identity of one); compile_mode('xla') cannot lower that update")
            names.add(var_of[lbn])
    return names


class _StepBuilder(ScheduleWalk):
    """Walks the schedule once (:class:`~graphfront.runtime.walk.ScheduleWalk`) into the
    steps of the job's pure step function (module docstring): one closure per op, run in
    order on a :class:`_Trace` while jax traces the step. An in-place update rebinds the
    updated variable (and its identity views) to the op's new value."""

    def __init__(self, job, prologue=(), boundary=()):
        super().__init__(job)
        self.prologue = set(prologue)
        self.bound = {lbn: len(self.input_names) + k for k, lbn in enumerate(boundary)}  # lbn -> feed index
        self.var_of = _aliases(self.order)
        self.var_lbn = {op.name: jb.op_outputs(op)[0][2] for op in self.order if jb.op_kind(op) == "variable_conf"}
        self.steps = []
        self.lr_ops = []  # (learning_rate_schedule_conf, train-step variable name), fed as learning_rates
        self.checks = xla_rules.StepChecks()

    def build(self, jax, mutable_names, const_names, precision="float32"):
        """``(step, lr_ops, checks)``: the pure step function of the job (module docstring),
        the learning-rate ops fed to it, and the StepChecks its rules report (filled each
        time the step is traced). ``precision``: the ``jax.default_matmul_precision`` the
        step is traced with (:func:`float32_precision`)."""
        self.mutable_index = {n: i for i, n in enumerate(mutable_names)}
        self.const_index = {n: i for i, n in enumerate(const_names)}
        self.walk()
        steps, checks, n_results = self.steps, self.checks, len(self.output_names)

        def step(mutable, const, feeds, learning_rates, key_data):
            key = None if key_data is None else jax.random.wrap_key_data(key_data)
            t = _Trace(jax, mutable, const, feeds, learning_rates, key, n_results)
            with xla_rules.collecting_checks(checks, feeds):
                for run in steps:
                    run(t)
            key_data = None if t.key is None else jax.random.key_data(t.key)
            results, state, watched = tuple(t.results), t.state, tuple(t.watched)
            if not checks.in_step:
                return results, state, key_data, watched, None
            all_ok, flags = checks.flags()
            state = [jax.numpy.where(all_ok, new, old) for new, old in zip(state, mutable)]  # failed: the old values
            return results, state, key_data, watched, flags

        def flat_step(*args):
            # The jnp functions the rules call are jitted functions of their own; with jit disabled
            # while the step is traced they add their operations straight to the step's jaxpr instead
            # of each being traced as a nested jit first: about half the tracing time in a fresh process.
            # The precision is set while tracing: each matmul and convolution records it in the module
            # (whatever context the step is later called in).
            with jax.disable_jit(), jax.default_matmul_precision(precision):
                return step(*args)

        return flat_step, self.lr_ops, checks

    def run_op(self, i, op):
        if op.name in self.prologue:  # computed before the step: its blobs the step reads are feeds
            for _, _, lbn in jb.op_outputs(op):
                if lbn in self.bound:
                    self.input(i, op, lbn, self.bound[lbn])
            return None
        return super().run_op(i, op)

    def input(self, i, op, lbn, feed_index):
        def feed(t):
            t.env[lbn] = t.feeds[feed_index]
        self.steps.append(feed)

    def variable(self, i, op, lbn):
        if op.name in self.mutable_index:
            index = self.mutable_index[op.name]

            def read(t):
                t.env[lbn] = t.state[index]
        else:
            index = self.const_index[op.name]

            def read(t):
                t.env[lbn] = t.const[index]
        self.steps.append(read)

    def output(self, i, op, src, result_index):
        def result(t):
            t.results[result_index] = t.env[src]
        self.steps.append(result)

    def watch(self, i, op, src):
        def watched(t):
            t.watched.append(t.env[src])
        self.steps.append(watched)

    def compute(self, i, op):
        kind = jb.op_kind(op)
        if kind == "learning_rate_schedule_conf" and op.learning_rate_schedule_conf.train_step in self.var_of:
            lbn, index = jb.op_outputs(op)[0][2], len(self.lr_ops)
            self.lr_ops.append((op.learning_rate_schedule_conf, self.var_of[op.learning_rate_schedule_conf.train_step]))

            def fed_rate(t):
                t.env[lbn] = t.learning_rates[index]
            self.steps.append(fed_rate)
            return
        opdef, op_ins = registry.op_def(op), jb.op_args(op)[0]
        fn = opdef.xla(KernelCtx(op, self.descs, torch.device("cpu")))
        mutated = [(op_ins.get(a, []), opdef.input_def(a).repeated) for a in mutated_args(op)]
        random = opdef.random
        ins, outs = call_layout(op)
        var_of, var_lbn, mutable_index = self.var_of, self.var_lbn, self.mutable_index

        def call(t):
            env = t.env
            args = [[env[lbn] for lbn in lbns] if rep else (env[lbns[0]] if lbns else None) for lbns, rep in ins]
            if random:
                t.key, sub = t.jax.random.split(t.key)
                args.insert(0, sub)
            res = fn(*args)
            if mutated:
                res, updates = res
                for (lbns, rep), new in zip(mutated, updates):
                    for lbn, value in zip(lbns, new if rep else [new]):
                        if value is None:
                            continue
                        name = var_of[lbn]
                        env[lbn] = env[var_lbn[name]] = t.state[mutable_index[name]] = value
            if not outs:
                return
            if len(outs) == 1:
                res = (res,)
            for (lbns, rep), value in zip(outs, res):
                if rep:
                    env.update(zip(lbns, value))
                elif lbns:
                    env[lbns[0]] = value
        self.steps.append(call)


class _Trace:
    """The values of one trace of the step: blobs by lbn, the variables' new values, the
    results, the watched values and the random key."""

    def __init__(self, jax, mutable, const, feeds, learning_rates, key, n_results):
        self.jax = jax
        self.env = {}
        self.state = list(mutable)
        self.const, self.feeds, self.learning_rates, self.key = const, feeds, learning_rates, key
        self.results = [None] * n_results
        self.watched = []
