"""The multi-device runtime: one worker process per device, one torch.distributed group.

The client process (the user's ``python train.py``) starts and owns the workers of its
machine (``torch.multiprocessing`` "spawn", one per device), as OneFlow's single-client
runtime did. Every worker joins one ``torch.distributed`` process group (gloo on CPU,
NCCL on GPU) with a timeout on collectives. Per job the client ships the completed Job
(serialized proto bytes) once, with shared-memory buffers for the feeds, the results and
the variables; each worker lowers the job over its *local* shapes (split axes divided by
the device count) with the same :class:`graphfront.runtime.plan.Plan` as one device, the
boxing ops running their collectives as kernels. A call copies the feeds into the shared
buffers, sends a one-line "run" message and waits; each worker reads its slice of the
feeds, runs its plan and writes its slice of the results. No tensor is pickled per call.

A job whose ops sit on placements of different devices of one machine (``"0:0-1"`` and
``"0:0-3"``, or pipeline stages on ``"0:0-1"`` and ``"0:2-3"``) runs on one worker per
device of the union of its placements, ranked by device index
(:func:`graphfront.passes.boxing.op_ranks`); each worker keeps only the ops placed on its
device (their ``KernelCtx.parallel_id``: its index among the placement's devices) and the
``_boxing_across_placements`` ops that move blobs from or to its placements
(:mod:`graphfront.ops.boxing_ops`; the workers of both placements run one, over a process
group of theirs made by every worker when it receives the job), in the job's order. Feeds,
results and variables are split over the devices of the placement of the op that makes
them. On GPUs worker ``r`` uses the GPU of the job's ``r``-th device
(:func:`graphfront.passes.boxing.job_devices`: a job on ``"0:2-3"`` alone runs on GPUs 2
and 3; on several machines each machine's first GPUs).

A job on a device grid (:func:`graphfront.parallel.sbp.job_grid`) divides each blob's
shape, takes feeds and writes results and variables axis by axis of its layout
(:func:`shard`, :func:`write_shard`); every worker makes the grid's line groups
(:func:`graphfront.ops.boxing_ops.grid_groups`) when it receives the job.

Variables live on the workers (split ones as slices). The client's variable store holds
shared-memory tensors in the single-device layout: the workers write them back when the
client reads them (checkpoints, ``flow.get_all_variables``) and read them again after the
client changed them (``flow.load_variables``), so checkpoints keep the single-device
layout and load on any device count.

Several machines: the same script runs on each machine; the workers of all machines join
one group, rendezvousing at ``MASTER_ADDR``/``MASTER_PORT`` (set by ``torchrun``, or from
``flow.env.machine`` and ``flow.env.ctrl_port``); the machine's index comes from
``RANK`` (``torchrun --nproc_per_node 1``) or ``GRAPHFRONT_MACHINE_RANK``.

The workers outlive the session that started them, as OneFlow's environment does: when
a session ends (``flow.clear_default_session()``) they forget its jobs and variables and
the next session on the same devices of one machine uses them, without starting
processes again (seconds per session on a loaded CPU); they stop when the client exits.

An op that raises on one device leaves the session usable: that worker skips its step's
later ops but still runs the collectives (on zeros), so that the others complete theirs,
and before the variable updates of a train job all workers agree, over a gloo group,
whether every device's step went well; if one did not, no device updates a variable
(batch norm's moving statistics, updated in the forward, excepted) and the call raises
that op's error naming its device. (A pipelined micro-batch job's worker runs only the
collectives of its plans after the one that failed, and raises the error at the end of
the call, whose accumulated gradients the client then zeroes; an op that raises in an
update still ends the session as a dying worker does.) A worker that dies ends the call
with :class:`WorkerError` naming its device within the collective timeout; the client
process survives (the session's workers are stopped and later calls raise the same
error).
"""
from __future__ import annotations

import atexit
import contextlib
import copy
import datetime
import math
import os
import sys
import time
import traceback
import zlib

import torch
import torch.multiprocessing as mp

from graphfront.core import job_pb2, op_conf_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.env_settings import current_env
from graphfront.framework.errors import JobBuildError, OpRunError
from graphfront.framework.scope_symbols import calculation_pass_of
from graphfront.parallel import sbp as _sbp
from graphfront.parallel.placement import machine_count, machine_rank
from graphfront.ops.boxing_ops import grid_groups
from graphfront.ops.registry import load_origin, op_def
from graphfront.ops.boxing_ops import involved_ranks, placement_ranks, subgroup
from graphfront.passes.boxing import blob_ranks, job_devices, op_ranks
from graphfront.passes.mirrored import is_mirrored
from graphfront.runtime.lowering import Lowering
from graphfront.runtime.plan import Plan
from graphfront.runtime.variable_store import VariableStore
from graphfront.runtime.walk import INTERFACE_KINDS, ScheduleWalk, schedule, update_ops

DEFAULT_TIMEOUT_S = 60.0


class WorkerError(RuntimeError):
    """A worker process died or failed; the message names its device."""


# ----------------------------------------------------------------------------- layouts

def shard(t, sbp, n, rank):
    """The part of logical tensor ``t`` that device ``rank`` of ``n`` holds under ``sbp``;
    on a device grid ``sbp`` is a tuple (one SBP string per axis) and ``n`` the grid: the
    part is taken axis by axis (:func:`graphfront.parallel.sbp.job_grid`)."""
    if isinstance(sbp, tuple):
        for s, d, c in zip(sbp, n, _sbp.grid_coords(rank, n)):
            t = shard(t, s, d, c)
        return t
    axis = _sbp.split_axis(sbp)
    return t.tensor_split(n, axis)[rank] if axis is not None else t


def write_shard(dst, local, sbp, n, rank, local_rank):
    """Write device ``rank``'s ``local`` part into logical tensor ``dst`` (broadcast: the
    first device of each machine; on a device grid, see :func:`shard`, the device of
    coordinate 0 on each broadcast axis)."""
    if isinstance(sbp, tuple):
        coords = _sbp.grid_coords(rank, n)
        if all(c == 0 for c, s in zip(coords, sbp) if _sbp.split_axis(s) is None):
            shard(dst, sbp, n, rank).copy_(local)
        return
    axis = _sbp.split_axis(sbp)
    if axis is not None:
        dst.tensor_split(n, axis)[rank].copy_(local)
    elif local_rank == 0:
        dst.copy_(local)


def blob_layouts(job, n) -> dict:
    """lbn -> ``(sbp, devices, ranks)`` of every blob of a consistent-view job on ``n``
    devices: ``sbp`` and ``devices`` as :func:`shard` takes them (``devices`` the number of
    devices whose parts make up the blob, or on a device grid,
    ``sbp`` a tuple, the grid), ``ranks`` the workers holding those parts
    (:func:`graphfront.passes.boxing.blob_ranks`; part ``i`` on ``ranks[i]``)."""
    grid = _sbp.job_grid(job)
    ranks = blob_ranks(job, n)
    everyone = tuple(range(n))
    return {lbn: (s, grid if isinstance(s, tuple) else len(ranks.get(lbn, everyone)), ranks.get(lbn, everyone))
            for lbn, s in _sbp.blob_sbps(job).items()}


def local_job(job, n, rank, own_ops_only=False, device_index=None):
    """A copy of ``job`` whose blob descs hold the shapes of the parts the worker of
    ``rank`` holds (a blob split over its producer's devices, :func:`blob_layouts`; an
    axis cut unevenly gives the first devices the longer parts) and whose ops are placed
    on device ``device_index`` (default: ``rank``) of this machine. ``own_ops_only`` (a
    consistent-view job with ops placed on some of its devices, on one machine): see
    :func:`_own_ops`."""
    lj = copy.deepcopy(job)
    layouts = blob_layouts(job, n)
    for lbn, d in lj.helper.lbn2logical_blob_desc.items():
        sbp, devices, ranks = layouts.get(lbn, (_sbp.B, n, tuple(range(n))))
        shape = _sbp.local_shape(d.shape.dim, sbp, devices, _part_of(rank, ranks))
        del d.shape.dim[:]
        d.shape.dim.extend(shape)
    if own_ops_only:
        _own_ops(lj, n, rank)
    for group in lj.placement.placement_group:
        del group.parallel_conf.device_name[:]
        group.parallel_conf.device_name.append(f"0:{rank if device_index is None else device_index}")
    return lj


def _own_ops(lj, n, rank):
    """Keep in ``lj`` only the ops that device ``rank`` runs: those whose placement holds
    it (:func:`graphfront.passes.boxing.op_ranks`), and the ``_boxing_across_placements``
    ops whose source or destination placement holds it (each such device takes part in
    its ``all_gather``; one outside the source placement has no input and sends zeros).
    Every collective it keeps gets a control edge from the one before it in the job's
    schedule, so all devices run the collectives they share in the same order."""
    ranks = op_ranks(lj, n)
    kept = []
    for op in lj.net.op:
        if jb.op_type_name(op) == "_boxing_across_placements":
            attrs = jb.user_attrs(op)
            if rank not in involved_ranks(attrs):
                continue
            if rank not in placement_ranks(attrs, "in"):
                del op.user_conf.input["in"]
        elif rank not in ranks.get(op.name, (rank,)):
            continue
        kept.append(op)
    by_name = {op.name: op for op in kept}
    collectives = [op.name for op in schedule(lj)[0] if op_def(op).boxing and op.name in by_name]
    for before, name in zip(collectives, collectives[1:]):
        by_name[name].ctrl_in_op_name.append(before)
    del lj.net.op[:]
    lj.net.op.extend(kept)
    for group in lj.placement.placement_group:
        names = [name for name in group.op_set.op_name if name in by_name]
        del group.op_set.op_name[:]
        group.op_set.op_name.extend(names)


def watches_as_returns(job):
    """``(worker job, handler uuids)``: a copy of ``job`` whose ``foreign_watch_conf`` ops
    are return ops appended after the job's own, so the workers hand the watched blobs
    (broadcast by the boxing pass: the logical values) back with the results and the
    client calls the handlers, which live in its process."""
    if not any(jb.op_kind(op) == "foreign_watch_conf" for op in job.net.op):
        return job, []
    wj = copy.deepcopy(job)
    kept, returns, uuids = [], [], []
    for op in wj.net.op:
        if jb.op_kind(op) != "foreign_watch_conf":
            kept.append(op)
            continue
        ret = op_conf_pb2.OperatorConf(name=op.name, device_tag="cpu", scope_symbol_id=op.scope_symbol_id)
        setattr(ret.return_conf, "in", getattr(op.foreign_watch_conf, "in"))
        ret.return_conf.out = "out"
        returns.append(ret)
        uuids.append(op.foreign_watch_conf.handler_uuid)
        sig = _sbp.op_signatures(wj).get(op.name)
        if sig is not None and "in" in sig:
            _sbp.write_signature(wj, op.name, {"out": sig["in"]})
    del wj.net.op[:]
    wj.net.op.extend(kept + returns)
    return wj, uuids


# ----------------------------------------------------------------------------- worker side

def part(buf, shape):
    """The leading ``prod(shape)`` elements of ``buf`` viewed as ``shape`` (one device's
    dynamic part of a mirrored blob)."""
    return buf.view(-1)[:math.prod(shape)].view(shape)


def has_stages(job, n) -> bool:
    """Whether ``job`` places ops on disjoint sets of its ``n`` devices (pipeline stages)."""
    sets = {frozenset(r) for r in op_ranks(job, n).values()}
    return any(not a & b for a in sets for b in sets)


def op_origins(job) -> list:
    """The origins (:attr:`OpDef.origin`) of the op types of ``job``, which a worker loads
    before it compiles the job (custom ops registered by the user's modules).

    Raises:
        JobBuildError: an op type was registered by code no worker can run again.
    """
    origins = {}
    for op in job.net.op:
        origin = op_def(op).origin
        if origin is not None and origin[0] == "unloadable":
            raise JobBuildError(f"job '{job.job_conf.job_name}': op '{op.name}' is of type "
                                f"'{jb.op_type_name(op)}', registered by {origin[1]}, which the worker processes "
                                "of a job on several devices cannot run again: register it at the top level of an "
                                "importable module (or in a custom op module's <name>_py_def.py)")
        if origin is not None:
            origins.setdefault(origin, None)
    return list(origins)


def forward_ops(job) -> set:
    """Names of the forward ops of a micro-batch job: the non-interface ops that read
    (through data or control edges) no output of an op of the backward pass."""
    producer = {lbn: op.name for op in job.net.op for _, _, lbn in jb.op_outputs(op)}
    backward, forward = set(), set()
    for op in schedule(job)[0]:
        if jb.op_kind(op) in INTERFACE_KINDS:
            continue
        reads = [producer.get(lbn) for _, _, lbn in jb.op_inputs(op)] + list(op.ctrl_in_op_name)
        if calculation_pass_of(op.scope_symbol_id) != "forward_pass" or any(name in backward for name in reads):
            backward.add(op.name)
        else:
            forward.add(op.name)
    return forward


def forward_part(lj, forward):
    """``(forward job, bound lbns)`` of a worker's local micro-batch job ``lj``: the job of
    its ``forward`` ops alone (with the inputs and variables), and the outputs of those ops
    that the rest of ``lj`` reads (what the forward run hands the backward run)."""
    made = {lbn for op in lj.net.op if op.name in forward for _, _, lbn in jb.op_outputs(op)}
    later = [op for op in lj.net.op if op.name not in forward and jb.op_kind(op) not in ("input_conf", "variable_conf")]
    bound = list(dict.fromkeys(lbn for op in later for _, _, lbn in jb.op_inputs(op) if lbn in made))
    fwd = copy.deepcopy(lj)
    dropped = {op.name for op in later}
    jb.JobBuilder(fwd).remove_ops(dropped)
    for op in fwd.net.op:
        kept = [name for name in op.ctrl_in_op_name if name not in dropped]
        del op.ctrl_in_op_name[:]
        op.ctrl_in_op_name.extend(kept)
    return fwd, bound


class _WorkerJob:
    """One job on one worker. With ``forward`` (the names of the forward ops of a
    micro-batch job, :func:`forward_ops`), a call runs ``micro_batches`` micro-batches as
    GPipe schedules a pipeline: the forward ops of every micro-batch first (a stage hands a
    micro-batch on and starts the next while the following stage works), then the rest
    of each, the forward values a micro-batch's backward reads kept in between."""

    def __init__(self, job, n, rank, local_rank, device, store, feeds, outs, forward=None, micro_batches=1,
                 fuse_bytes=0, updates=()):
        self.n, self.rank, self.local_rank, self.device = n, rank, local_rank, device
        self.micro_batches = micro_batches
        self.mirrored = is_mirrored(job)
        ranks = {} if self.mirrored else op_ranks(job, n)
        own = any(r != tuple(range(n)) for r in ranks.values())
        lj = local_job(job, n, rank, own_ops_only=own, device_index=device.index)
        kw = dict(checks_in_step=True, fuse_bytes=fuse_bytes, updates=updates,
                  signatures=None if self.mirrored else _sbp.op_signatures(job),
                  parallel_ctxs={name: (r.index(rank), len(r)) for name, r in ranks.items() if rank in r},
                  logical_descs=None if self.mirrored else
                  {lbn: jb.TensorDesc.from_proto(d) for lbn, d in job.helper.lbn2logical_blob_desc.items()})
        self.forward = None
        if forward is None:  # (the devices agree before the variable updates: see module docstring)
            self.plan = Plan(lj, store, {}, cuda_graph=False, agree=_agreement() if updates else _raise_agreed,
                             agree_before=set(updates), **kw)
        else:  # (a device whose micro-batch failed drains the rest: :meth:`_run_micro_batches`)
            kw.update(agree=_raise_agreed, updates=())  # (a failed call's accumulation is zeroed by the client)
            forward = {op.name for op in lj.net.op if op.name in forward}
            fwd_job, bound = forward_part(lj, forward)
            self.forward = Plan(fwd_job, store, {}, cuda_graph=False, returning=bound, **kw)
            self.plan = Plan(lj, store, {}, cuda_graph=False, bound=bound, ran=forward, **kw)
            self.forward_feeds = [self.plan.input_names.index(name) for name in self.forward.input_names]
        # the buffers of the feeds and results this device's plan reads and writes (all of
        # them unless it runs only its own ops)
        names = ([op.name for op in job.net.op if jb.op_kind(op) == kind] for kind in ("input_conf", "return_conf"))
        feed_index, out_index = ({name: i for i, name in enumerate(group)} for group in names)
        self.feeds = [feeds[feed_index[name]] for name in self.plan.input_names]
        self.outs = [outs[out_index[name]] for name in self.plan.output_names]
        if not self.mirrored:  # (layout, devices) of each feed and result
            layouts = blob_layouts(job, n)
            self.feed_sbps = [layouts[lbn] for lbn in self.plan.input_lbns]
            self.out_sbps = [layouts[lbn] for lbn in self.plan.result_lbns]

    def run(self, feed_shapes):
        """Run one step; a mirrored job reads its part of each feed (``feed_shapes[f][local
        rank]``) and returns the shapes of the parts it wrote."""
        if self.forward is not None:
            return self._run_micro_batches()
        if self.mirrored:
            feeds = [part(buf[self.local_rank], shapes[self.local_rank]).to(self.device)
                     for buf, shapes in zip(self.feeds, feed_shapes)]
            results = self.plan(feeds)
            for buf, local in zip(self.outs, results):
                part(buf[self.local_rank], tuple(local.shape)).copy_(local.detach())
            return [tuple(local.shape) for local in results]
        feeds = [shard(f, s, m, _part_of(self.rank, r)).to(self.device)
                 for f, (s, m, r) in zip(self.feeds, self.feed_sbps)]
        results = self.plan(feeds)
        for buf, local, (s, m, r) in zip(self.outs, results, self.out_sbps):
            _write_part(buf, local.detach().to("cpu"), s, m, r, self.rank, self.local_rank)
        return None

    def _run_micro_batches(self):
        """Every micro-batch's forward ops, then the rest of each (see class docstring):
        feed and result buffers hold one slice per micro-batch along a leading axis. After
        an op failed here, the later plans of the call run their collectives alone (the
        other devices complete theirs) and the error is raised at the end."""
        feeds = [[shard(f[i], s, m, _part_of(self.rank, r)).to(self.device)
                  for f, (s, m, r) in zip(self.feeds, self.feed_sbps)] for i in range(self.micro_batches)]
        failed = []

        def run(plan, plan_feeds):
            if failed:
                return plan.drain()
            try:
                return plan(plan_feeds)
            except Exception as e:  # noqa: BLE001 - an op's error (drained: see Plan's agree) is raised at the end
                if not getattr(e, "agreed", False):
                    raise
                failed.append(e)
        saved = [run(self.forward, [fed[j] for j in self.forward_feeds]) for fed in feeds]
        for i, fed in enumerate(feeds):
            results = run(self.plan, fed + list(saved[i] or ()))
            saved[i] = None
            for buf, local, (s, m, r) in zip(self.outs, results or (), self.out_sbps):
                _write_part(buf[i], local.detach().to("cpu"), s, m, r, self.rank, self.local_rank)
        if failed:
            raise failed[0]


class _PeerFailed(RuntimeError):
    """Another worker's step failed (see :func:`_agreement`)."""


_AGREEMENT_GROUP = []


def _agreement():
    """The ``agree`` function of a train job's plan (:class:`Plan`): every worker tells the
    others, over a gloo group of them all (so that a GPU job waits on no device), whether
    its ops before the variable updates failed; the one that failed raises its exception
    (marked ``agreed``), the others :class:`_PeerFailed`, and none updates a variable."""
    import torch.distributed as dist
    if not _AGREEMENT_GROUP:  # (made by every worker as it compiles the first such job, in order)
        _AGREEMENT_GROUP.append(dist.new_group(backend="gloo"))

    def agree(failed):
        flag = torch.tensor([0 if failed is None else 1])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=_AGREEMENT_GROUP[0])
        _raise_agreed(failed)
        if flag.item():
            raise _PeerFailed("another device's step failed")
    return agree


def _raise_agreed(failed):
    """The ``agree`` function of a plan without variable updates: a device whose step failed
    raises the error once its collectives ran (the others completed theirs)."""
    if failed is not None:
        failed.agreed = True
        raise failed


def _part_of(rank, ranks):
    """The index of the part the worker of ``rank`` holds of a blob or variable whose parts
    sit on the workers ``ranks`` (a worker outside them holds a copy of part 0)."""
    return ranks.index(rank) if rank in ranks else 0


def _write_part(dst, local, sbp, devices, ranks, rank, local_rank):
    """:func:`write_shard` of the part the worker of ``rank`` holds, if it holds one of
    ``ranks`` (a broadcast blob: written by the first of ``ranks`` and the first device
    of each machine)."""
    if rank in ranks:
        i = ranks.index(rank)
        write_shard(dst, local, sbp, devices, i, 0 if i == 0 else local_rank)


def _worker_main(conn, rank, world, local_rank, device_tag, addr, port, timeout_s, client_store=False, gpu=None):
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, world)))
        use_cuda = device_tag == "gpu" and torch.cuda.is_available()
        device = torch.device("cuda", local_rank if gpu is None else gpu) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(device)
        # the client's store (one machine), else the env:// rendezvous at rank 0's port
        store = dist.TCPStore(addr, port, is_master=False, timeout=timeout) if client_store else None
        dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world, timeout=timeout,
                                store=store)
    except Exception as e:  # noqa: BLE001 - reported to the client
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ok", None))
    n = world
    store = VariableStore()
    logical_vars, var_sbps, jobs = {}, {}, {}
    while True:
        try:
            cmd, payload = conn.recv()
        except EOFError:
            break
        try:
            result = None
            if cmd == "stop":
                conn.send(("ok", None))
                break
            if cmd == "reset":  # the session ended: the next one starts from a fresh state
                store = VariableStore()
                logical_vars, var_sbps, jobs = {}, {}, {}
                torch.manual_seed(torch.initial_seed())
            if cmd == "compile":
                (name, job_bytes, feeds, outs, new_vars, seed, forward, micro_batches, fuse_bytes, updates,
                 origins) = payload
                for origin in origins:  # (op types registered outside graphfront: custom ops)
                    load_origin(origin)
                torch.manual_seed(seed)  # (the kernels draw their streams' seeds as they are made)
                job = job_pb2.Job.FromString(job_bytes)
                layouts = blob_layouts(job, n)
                if not is_mirrored(job) and _sbp.job_grid(job):  # its collectives' groups (made by all, in order)
                    grid_groups(_sbp.job_grid(job))
                for op in job.net.op:  # the groups of the boxing ops between placements (made by all, in order)
                    if jb.op_type_name(op) == "_boxing_across_placements" and \
                            len(involved_ranks(jb.user_attrs(op))) < n:
                        subgroup(involved_ranks(jb.user_attrs(op)))
                for var_name, t in new_vars.items():
                    logical_vars[var_name] = t
                    var_sbps[var_name] = s, m, r = layouts[f"{var_name}/out"]
                    store.tensors[var_name] = shard(t, s, m, _part_of(rank, r)).to(device, copy=True).contiguous()
                jobs[name] = _WorkerJob(job, n, rank, local_rank, device, store, feeds, outs, forward, micro_batches,
                                        fuse_bytes, updates)
                result = jobs[name].plan.source
            elif cmd == "run":
                name, feed_shapes = payload
                try:
                    result = jobs[name].run(feed_shapes)
                except OpRunError as e:  # a bad value, found after the step every worker completed
                    conn.send(("op_error", e.message))
                    continue
                except _PeerFailed:  # (another worker's step failed: it names the error)
                    conn.send(("op_error", None))
                    continue
                except Exception as e:  # noqa: BLE001 - an op's error, which every worker settled on
                    if not getattr(e, "agreed", False):
                        raise
                    conn.send(("op_error", f"{type(e).__name__}: {e}"))
                    continue
            elif cmd == "pull":
                for var_name in payload:
                    s, m, r = var_sbps[var_name]
                    _write_part(logical_vars[var_name], store.tensors[var_name].to("cpu"), s, m, r, rank, local_rank)
            elif cmd == "push":
                for var_name in payload:
                    s, m, r = var_sbps[var_name]
                    store.tensors[var_name].copy_(shard(logical_vars[var_name], s, m, _part_of(rank, r)))
            conn.send(("ok", result))
        except Exception as e:  # noqa: BLE001 - reported to the client, naming the device
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


# ----------------------------------------------------------------------------- client side

def rendezvous(session):
    """``(master address, port, machine rank, machine count)`` for the session's workers;
    the port is None on one machine where none was set (the client then hosts the store)."""
    machines = machine_count(session)
    rank = machine_rank(session)
    addr = os.environ.get("MASTER_ADDR")
    port = os.environ.get("MASTER_PORT")
    conf = current_env()
    if not addr:
        listed = conf.get("machine") if isinstance(conf, dict) else None
        if listed:
            first = listed[0]
            addr = first if isinstance(first, str) else first.get("addr", "127.0.0.1")
        else:
            addr = "127.0.0.1"
    if not port:
        port = conf.get("ctrl_port") if isinstance(conf, dict) and conf.get("ctrl_port") else None
    if not port:
        if machines > 1:
            raise RuntimeError("several machines need a rendezvous port: set MASTER_PORT (torchrun does) or "
                               "flow.env.ctrl_port(port)")
    return addr, (int(port) if port else None), rank, machines


@contextlib.contextmanager
def _main_script_hidden():
    """Start workers without re-running the user's script: "spawn" imports the parent's
    ``__main__`` file in each child unless the main module names none (the workers need
    only graphfront, and user scripts need no ``if __name__ == "__main__"`` guard)."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    if "__file__" in saved:
        del main.__file__
    if main is not None:
        main.__spec__ = None
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


class WorkerGroup:
    """The worker processes of this machine (see module docstring).

    Args:
        n: devices of the job over all machines (n / machines workers start here).
        device_tag: "cpu" or "gpu".
        gpu_ids: on one machine, the GPU of each worker in rank order (default ``0 .. n-1``).
        timeout_s: collective timeout; a call fails within about this time when a
            worker dies or hangs.
    """

    def __init__(self, session, n, device_tag, timeout_s=DEFAULT_TIMEOUT_S, gpu_ids=None):
        addr, port, machine_rank, machines = rendezvous(session)
        if n % machines:
            raise RuntimeError(f"a job on {n} devices cannot be spread evenly over {machines} machines")
        self.world, local = n, n // machines
        self.gpu_ids = list(gpu_ids) if gpu_ids is not None and machines == 1 else list(range(local))
        gpus = torch.cuda.device_count() if device_tag == "gpu" and torch.cuda.is_available() else None
        if gpus is not None and max(self.gpu_ids) >= gpus:
            raise RuntimeError(f"a job on {local} gpu devices per machine cannot run here: this machine has "
                               f"{gpus} GPU(s) (torch.cuda.device_count()), the job's are {self.gpu_ids}; place it "
                               f"on at most {gpus} "
                               "(flow.config.gpu_device_num, flow.scope.placement(\"gpu\", ...)), or on the CPU")
        self.n, self.device_tag, self.timeout_s = n, device_tag, timeout_s
        self.ranks = [machine_rank * local + i for i in range(local)]
        self.broken = None
        self.key, self.owner = None, None  # (set for the session using it; see release_group)
        # With no port set, this process hosts the workers' rendezvous store on a port the
        # system picks while binding it (no window in which another process can take it).
        self.store = None
        if port is None:
            self.store = torch.distributed.TCPStore(addr, 0, is_master=True, wait_for_workers=False,
                                                    timeout=datetime.timedelta(seconds=timeout_s))
            port = self.store.port
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        with _main_script_hidden():
            for local, rank in enumerate(self.ranks):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, args=(child, rank, self.world, local, device_tag, addr, port,
                                                           timeout_s, self.store is not None, self.gpu_ids[local]),
                                daemon=True, name=f"graphfront-worker-{rank}")
                p.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(p)
        self._wait_all(startup=True)

    def device_name(self, i):
        return f"{self.device_tag}:{i} (rank {self.ranks[i]})" if self.world == len(self.ranks) else \
            f"{self.device_tag}:{i} of this machine (rank {self.ranks[i]})"

    def request(self, cmd, payload=None):
        """Send one command to every worker and return their replies (in device order)."""
        if self.broken:
            raise WorkerError(self.broken)
        for i, conn in enumerate(self.conns):
            try:
                conn.send((cmd, payload))
            except (BrokenPipeError, OSError):
                self._fail(f"the worker process of device {self.device_name(i)} is gone (exit code "
                           f"{self.procs[i].exitcode})")
        return self._wait_all()

    def _wait_all(self, startup=False):
        deadline = time.monotonic() + self.timeout_s + (120.0 if startup else 10.0)
        replies = [None] * len(self.conns)
        pending = set(range(len(self.conns)))
        errors, op_errors = [], []
        while pending:
            for i in sorted(pending):
                conn, proc = self.conns[i], self.procs[i]
                try:
                    status, value = conn.recv() if conn.poll(0.05) else (None, None)
                except (EOFError, OSError):  # the pipe closed: its process is gone
                    status = "dead"
                if status == "dead" or status is None and not proc.is_alive():
                    self._died(i)
                if status == "error":
                    errors.append(f"worker of device {self.device_name(i)} failed: {value}")
                if status == "op_error" and value is not None:
                    op_errors.append(f"{value} (in the part of device {self.device_name(i)})")
                if status is not None:
                    replies[i] = value
                    pending.discard(i)
            if pending and time.monotonic() > deadline:
                self._fail(f"workers of devices {[self.device_name(i) for i in sorted(pending)]} did not answer "
                           f"within {self.timeout_s:.0f} s (the collective timeout)")
        if errors:  # a worker that died makes the others' collectives fail: name it first
            for i, proc in enumerate(self.procs):
                proc.join(timeout=0.5)
                if not proc.is_alive():
                    self._died(i)
            self._fail("\n".join(errors))
        if op_errors:  # (every worker completed the step, or all stopped before its collectives)
            raise OpRunError(op_errors[0])
        return replies

    def _died(self, i):
        proc = self.procs[i]
        proc.join(timeout=1)
        self._fail(f"the worker process of device {self.device_name(i)} died (exit code {proc.exitcode}); "
                   "the job's collectives cannot complete")

    def _fail(self, message):
        self.broken = message + "; the session's workers were stopped (start a new session)"
        self.close(graceful=False)
        raise WorkerError(self.broken)

    def close(self, graceful=True):
        if graceful and not self.broken:
            try:
                for conn in self.conns:
                    conn.send(("stop", None))
            except (OSError, BrokenPipeError):
                pass
        for p in self.procs:
            p.join(timeout=5 if graceful else 0.1)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        for conn in self.conns:
            conn.close()
        self.procs, self.conns, self.store = [], [], None


class DistributedVariableStore(VariableStore):
    """The session's variables when jobs run on workers: shared-memory tensors in the
    single-device layout, written back by the workers when read after a run and sent to
    them again when changed in place here (see module docstring)."""

    def __init__(self, base: VariableStore):
        self._tensors = base.tensors
        self.confs = base.confs
        self.generation = base.generation + 1  # (a reader that compared the base's sees a move)
        self.group = None
        self.on_workers = set()
        self._versions = {}

    def _pull(self):
        """The pending flush after a run: the workers write their variables back."""
        if self.group is not None and not self.group.broken:
            self.group.request("pull", sorted(self.on_workers))
            self._versions.update((k, self._tensors[k]._version) for k in self.on_workers)

    def share(self, names) -> dict:
        """Move the named variables to shared memory; returns those not on the workers yet."""
        new = {}
        for name in names:
            if name not in self.on_workers:
                t = self._tensors[name]
                if t.device.type != "cpu":
                    raise RuntimeError(f"variable '{name}' lives on {t.device}; a multi-device job needs it on "
                                       "the CPU of the client process")
                t.share_memory_()
                new[name] = t
                self.on_workers.add(name)
                self._versions[name] = t._version
        return new

    def before_run(self):
        """Send the variables changed here since the workers last had them."""
        changed = [k for k in sorted(self.on_workers) if self._tensors[k]._version != self._versions[k]]
        if changed:
            self.group.request("push", changed)
            self._versions.update((k, self._tensors[k]._version) for k in changed)

    def after_run(self):
        self.pending_flush = self._pull


# idle worker groups of ended sessions, by (devices, device tag, collective timeout)
_IDLE_GROUPS = {}


def _session_group(session, n, device_tag, gpu_ids=None):
    """The session's worker group: its own, else an idle one left by an ended session on
    the same devices of this machine (OneFlow's environment outlives its sessions: a new
    session does not start its workers again), else new workers. ``gpu_ids``: the GPUs of
    the workers of a "gpu" job on one machine, in rank order (default ``0 .. n-1``)."""
    group = getattr(session, "worker_group", None)
    one_machine = machine_count(session) == 1
    gpu_ids = list(gpu_ids) if gpu_ids is not None and device_tag == "gpu" and one_machine else None
    if group is not None:
        if (group.n, group.device_tag) != (n, device_tag) or gpu_ids is not None and group.gpu_ids != gpu_ids:
            where = f" (GPUs {gpu_ids}, the session's: {group.gpu_ids})" if gpu_ids is not None else ""
            raise RuntimeError(f"this session's jobs run on {group.n} {group.device_tag} device(s); a job on {n} "
                               f"{device_tag} device(s){where} cannot join them (use one placement per session)")
        return group
    store = session.variables
    if not isinstance(store, DistributedVariableStore):
        store = session.variables = DistributedVariableStore(store)
    timeout_s = getattr(session, "collective_timeout_s", DEFAULT_TIMEOUT_S)
    # several machines: never reused
    key = (n, device_tag, timeout_s, tuple(gpu_ids or ())) if one_machine else None
    group = _IDLE_GROUPS.pop(key, None)
    if group is not None and not all(p.is_alive() for p in group.procs):
        group.close(graceful=False)
        group = None
    if group is None:
        group = WorkerGroup(session, n, device_tag, timeout_s, gpu_ids)
    group.key, group.owner = key, session.id
    session.worker_group = store.group = group
    import weakref
    weakref.finalize(session, release_group, group, session.id)
    return group


def release_group(group, owner):
    """End the use of its workers by session ``owner`` (its id): they forget its jobs and
    variables and wait, idle, for the next session on the same devices (stopped at exit);
    workers of several machines, broken ones, or one more idle group of the same devices
    are stopped now. Nothing happens when another session uses them by now (a closed
    session's late finalizer)."""
    if group.owner != owner:
        return
    group.owner = None
    if group.key is None or group.broken or group.key in _IDLE_GROUPS:
        group.close()
        return
    try:
        group.request("reset")
    except WorkerError:
        return  # (the group stopped its workers)
    _IDLE_GROUPS[group.key] = group


@atexit.register
def _stop_idle_groups():
    while _IDLE_GROUPS:
        _IDLE_GROUPS.popitem()[1].close()


def kernel_seed(key) -> int:
    """The seed of torch's generator while the kernels of job ``key`` are made (they draw
    their streams' seeds from it): ``flow.manual_seed``'s (torch's initial seed) and the
    job's name, so that one seed repeats a job's random streams on any device count."""
    return (torch.initial_seed() + zlib.crc32(key.encode())) % 2 ** 63


def all_reduce_fusion_bytes(settings) -> int:
    """The bucket size of the workers' all-reduce fusion, from OneFlow's resource
    ``settings`` (name -> value, as ``flow.config.collective_boxing.*`` records them):
    ``enable_fusion`` and ``nccl_fusion_all_reduce`` (both True by default) and
    ``nccl_fusion_threshold_mb`` (16 by default; OneFlow v0.6.0
    ``oneflow/core/job/resource.proto``, ``CollectiveBoxingConf``); 0 when off."""
    def get(name, default):
        return settings.get(f"collective_boxing.{name}", default)
    if not (get("enable_fusion", True) and get("nccl_fusion_all_reduce", True)):
        return 0
    return int(get("nccl_fusion_threshold_mb", 16)) << 20


class DistributedPlan(Lowering):
    """What :class:`CompiledJob` calls for a job on ``n > 1`` devices: the same interface
    as :class:`graphfront.runtime.plan.Plan` (``plan(feeds) -> results``, ``input_names``,
    ``output_names``, ``order``, ``source``), running on the session's workers.

    Raises WorkerError (naming the device) when a worker fails or dies during a call, and
    JobBuildError when an op type of the job was registered by code the workers cannot run
    again (the main script, a function: see :func:`graphfront.ops.registry.load_origin`).
    """

    def __init__(self, session, job, n, part="", micro_batches=1):
        self.job = job
        self.micro_batches = micro_batches  # > 1: a call runs so many micro-batches pipelined (_WorkerJob)
        self.name = job.job_conf.job_name
        self.key = f"{self.name}:{part}" if part else self.name  # the workers' name for it (``part``: one of
        # several plans of a job, as gradient accumulation's "micro" and "update")
        walk = ScheduleWalk(job)
        self.order, self.input_names, self.output_names = walk.order, walk.input_names, walk.output_names
        self.devices = set()
        descs = walk.descs
        tags = {op.device_tag for op in job.net.op if jb.op_kind(op) not in ("return_conf",)}
        device_tag = "gpu" if "gpu" in tags else "cpu"
        self.group = _session_group(session, n, device_tag, job_devices(job, n))
        self.store = session.variables
        self.mirrored = is_mirrored(job)
        self.parts = n if self.mirrored else 1  # arrays per ListNumpy argument
        if self.mirrored and len(self.group.ranks) != n:
            raise RuntimeError(f"job '{self.name}': the mirrored view runs on the devices of one machine; this job "
                               f"is placed on {n} devices of several machines (use the consistent view)")
        watches = [op for op in job.net.op if jb.op_kind(op) == "foreign_watch_conf"]
        self.watchers = session.watchers
        worker_job, self.watch_uuids = watches_as_returns(job)

        def buffer(lbn):
            d = descs[lbn]
            if self.mirrored:  # one part per device, each at most the blob's static shape
                return torch.zeros((n,) + tuple(d.shape), dtype=d.dtype.torch).share_memory_()
            if d.is_dynamic:
                raise RuntimeError(f"job '{self.name}': blob '{lbn}' has a dynamic shape, which the consistent view "
                                   "on several devices does not support (use the mirrored view, "
                                   "FunctionConfig().default_logical_view(flow.scope.mirrored_view()), for "
                                   "tp.ListNumpy placeholders: one array per device)")
            lead = (micro_batches,) if micro_batches > 1 else ()
            return torch.zeros(lead + tuple(d.shape), dtype=d.dtype.torch).share_memory_()
        self.feed_bufs = [buffer(lbn) for lbn in walk.input_lbns]
        self.out_bufs = [buffer(lbn) for lbn in walk.result_lbns]
        self.watch_bufs = [buffer(getattr(op.foreign_watch_conf, "in")) for op in watches]
        var_names = [op.name for op in job.net.op if jb.op_kind(op) == "variable_conf"]
        self.store.tensors  # noqa: B018 - bring the shared tensors up to date before sharing more
        new_vars = self.store.share(var_names)
        # one seed for every worker's generator: the replicated random ops draw the same values
        # on every device, and flow.manual_seed (torch's initial seed here) repeats them
        seed = kernel_seed(self.key)
        forward = sorted(forward_ops(job)) if micro_batches > 1 else None
        replies = self.group.request("compile", (self.key, worker_job.SerializeToString(), self.feed_bufs,
                                                 self.out_bufs + self.watch_bufs, new_vars, seed, forward,
                                                 micro_batches, all_reduce_fusion_bytes(session.resource),
                                                 update_ops(worker_job), op_origins(worker_job)))
        self.source = f"# device 0 of {n} (every device runs the same plan over its local shapes)\n" + replies[0]

    def before_call(self, variables):
        """Nothing: a call sends the variables changed here to the workers itself."""

    def __call__(self, feeds):
        """Run one step. ``feeds``: one tensor per argument, or for a mirrored job one list
        of per-device tensors per ``ListNumpy`` argument and one tensor, split along axis 0
        into equal parts, per ``Numpy`` argument; a mirrored job's results are the devices'
        parts concatenated along axis 0 (as OneFlow returns mirrored blobs: ``tp.ListNumpy``
        gives a one-element list holding the concatenation, OneFlow v0.6.0
        ``python/oneflow/compatible/single_client/framework/pull_util.py``,
        ``_MirroredBlobPuller``). Watch handlers are called here, after the run, with the
        whole (logical) watched blobs the workers returned (in the mirrored view the parts
        concatenated along axis 0). A plan of ``micro_batches`` k > 1 takes each feed whole
        (k micro-batches along axis 0) and returns each result of the k micro-batches
        along a new leading axis (watch handlers: once per micro-batch)."""
        self.store.before_run()
        feed_shapes = None
        if self.mirrored:
            n = len(self.group.ranks)
            feeds = [f if isinstance(f, (list, tuple)) else f.tensor_split(n) for f in feeds]
            feed_shapes = [[tuple(t.shape) for t in parts] for parts in feeds]
            for buf, parts in zip(self.feed_bufs, feeds):
                for r, t in enumerate(parts):
                    part(buf[r], tuple(t.shape)).copy_(t)
        else:  # (micro-batches: a whole batch, one slice per micro-batch along a new leading axis)
            for buf, f in zip(self.feed_bufs, feeds):
                buf.copy_(f.reshape(buf.shape))
        try:
            replies = self.group.request("run", (self.key, feed_shapes))
        finally:
            self.store.after_run()
        if self.mirrored:
            values = [torch.cat([part(buf[r], shapes[k] or (1,)) for r, shapes in enumerate(replies)])
                      for k, buf in enumerate(self.out_bufs + self.watch_bufs)]
        else:
            values = [b.clone() for b in self.out_bufs + self.watch_bufs]
        outs = len(self.out_bufs)
        for uuid, value in zip(self.watch_uuids, values[outs:]):
            for part_value in (value if self.micro_batches > 1 else [value]):
                self.watchers[uuid](part_value)
        return tuple(values[:outs])
