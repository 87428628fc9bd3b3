"""The one walk over a completed Job that every lowering shares.

:func:`schedule` orders the ops of a completed Job (data edges, ``ctrl_in_op_name``, and
each in-place update after every reader of the updated blob or of a view of it).
:class:`ScheduleWalk` walks that order the way ``torch.fx.Interpreter`` walks a graph:
it binds the four interface ops — ``input_conf`` (feed ``i``), ``variable_conf``,
``return_conf`` (result ``i``, in the job's order of return ops) and
``foreign_watch_conf`` — and hands every other op to :meth:`ScheduleWalk.compute`. A
lowering subclasses it and overrides only what it emits per op: the per-op plan
(:mod:`graphfront.runtime.plan`) emits lines of Python, the XLA lowering
(:mod:`graphfront.runtime.xla`) steps of a jax function, the ONNX exporter
(:mod:`graphfront.runtime.onnx_export`) ONNX nodes; the onnxruntime and multi-device
lowerings read the schedule and the interface (``order``, ``input_names``,
``output_names``) without emitting per op.
"""
from __future__ import annotations

import heapq

import torch

from graphfront.framework import job_builder as jb
from graphfront.framework.job_builder import TensorDesc
from graphfront.framework.scope_symbols import calculation_pass_of
from graphfront.ops import registry

INTERFACE_KINDS = ("input_conf", "variable_conf", "return_conf", "foreign_watch_conf")


def device_of(op_conf, device_ids) -> torch.device:
    """torch device for an op: ``"gpu"`` -> ``cuda:<first device id>``, else cpu."""
    if op_conf.device_tag == "gpu":
        first = int(device_ids[0].split(":")[1].split("-")[0]) if device_ids else 0
        if torch.cuda.is_available() and first >= torch.cuda.device_count():
            raise RuntimeError(f"op '{op_conf.name}' is placed on gpu {first}, but this machine has "
                               f"{torch.cuda.device_count()} GPU(s) (torch.cuda.device_count())")
        return torch.device("cuda", first)
    return torch.device("cpu")


def placements_of(job) -> dict:
    """op name -> its device names (``("0:0", ...)``) from the Job's placement groups."""
    placements = {}
    for group in job.placement.placement_group:
        for name in group.op_set.op_name:
            placements[name] = tuple(group.parallel_conf.device_name)
    return placements


def is_view(op_conf) -> bool:
    """Whether an (non-interface) op's outputs may share storage with its inputs."""
    return registry.op_def(op_conf).view


def mutated_args(op_conf) -> tuple:
    """The input args an op updates in place."""
    opdef = registry.op_def(op_conf)
    return tuple(opdef.mutated_args(jb.user_attrs(op_conf))) if opdef.may_mutate else ()


def update_ops(job) -> list:
    """Names of the ops of ``job`` that update a variable in place after the forward pass
    (the optimizer's, gradient accumulation's: not batch norm's moving statistics). The
    calculation passes are read from the scope symbols of this process (the client's)."""
    variables = {f"{op.name}/out" for op in job.net.op if jb.op_kind(op) == "variable_conf"}
    return [op.name for op in job.net.op if calculation_pass_of(op.scope_symbol_id) != "forward_pass"
            and any(lbn in variables for lbn in mutated_lbns(op))]


def mutated_lbns(op_conf) -> list:
    """The lbns an op updates in place."""
    ins = jb.op_args(op_conf)[0]
    return [lbn for arg in mutated_args(op_conf) for lbn in ins.get(arg, ())]


def schedule(job):
    """Topological order of ``job.net.op`` (stable: ties keep the job's order).

    Returns ``(ops, aliased)`` where ``aliased`` is the set of lbns that may alias a
    blob updated in place (their readers run before the update).
    """
    ops = list(job.net.op)
    index = {op.name: i for i, op in enumerate(ops)}
    producer, consumers = {}, {}
    ins = {}
    for op in ops:
        for _, _, lbn in jb.op_outputs(op):
            producer[lbn] = op.name
        ins[op.name] = [lbn for _, _, lbn in jb.op_inputs(op)]
        for lbn in ins[op.name]:
            consumers.setdefault(lbn, []).append(op.name)
    preds = {op.name: set() for op in ops}
    for op in ops:
        p = preds[op.name]
        for lbn in ins[op.name]:
            if lbn in producer:
                p.add(producer[lbn])
        p.update(n for n in op.ctrl_in_op_name if n in preds)
    aliased = set()
    by_name = {op.name: op for op in ops}
    for op in ops:
        for lbn in mutated_lbns(op):
            stack = [lbn]
            while stack:
                cur = stack.pop()
                if cur in aliased:
                    continue
                aliased.add(cur)
                for reader in consumers.get(cur, []):
                    if reader != op.name:
                        preds[op.name].add(reader)
                        if is_view(by_name[reader]):
                            stack.extend(l for _, _, l in jb.op_outputs(by_name[reader]))
    succs = {name: [] for name in preds}
    indeg = {name: len(p) for name, p in preds.items()}
    for name, p in preds.items():
        for q in p:
            succs[q].append(name)
    ready = [(index[n], n) for n, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(by_name[name])
        for s in succs[name]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, (index[s], s))
    if len(order) != len(ops):
        stuck = sorted(n for n, d in indeg.items() if d > 0)
        raise RuntimeError(f"job '{job.job_conf.job_name}' has a dependency cycle among ops {stuck[:8]}")
    return order, aliased


def call_layout(op_conf):
    """How an op's kernel (or lowering rule) is called: ``(inputs, outputs)``.

    Each is a list of ``(lbns, repeated)`` groups in declaration order: one positional
    argument per input group (a tensor, None when absent, a list when repeated); the
    kernel returns one value per output group (a single value when there is one group).
    """
    opdef = registry.op_def(op_conf)
    ins, outs = jb.op_args(op_conf)
    return ([(ins.get(a.name, []), a.repeated) for a in opdef.inputs],
            [(outs.get(a.name, []), a.repeated) for a in opdef.outputs])


def watcher(watchers, uuid):
    """The watch handler registered under ``uuid``, or one raising that none is."""
    handler = (watchers or {}).get(uuid)
    if handler is not None:
        return handler

    def missing(x):
        raise RuntimeError(f"no watch handler registered under uuid {uuid}")
    return missing


class ScheduleWalk:
    """A walk over a completed Job's scheduled ops (see module docstring).

    Args:
        job: the completed Job.

    Attributes:
        job: the Job.
        order: the scheduled op confs (:func:`schedule`).
        aliased: lbns that may alias a blob updated in place (:func:`schedule`).
        descs: lbn -> TensorDesc of every blob.
        input_names: input op names, in feed order (the job's order).
        output_names: return op names, in result order (the job's order: the order of
            the returned structure's leaves, not the schedule's).
        input_lbns: the blob each input op feeds, in feed order.
        result_lbns: the blob each return op returns, in result order.
    """

    def __init__(self, job):
        self.job = job
        self.order, self.aliased = schedule(job)
        self.descs = {lbn: TensorDesc.from_proto(p) for lbn, p in job.helper.lbn2logical_blob_desc.items()}
        self.placements = placements_of(job)
        inputs = [op for op in job.net.op if jb.op_kind(op) == "input_conf"]
        returns = [op for op in job.net.op if jb.op_kind(op) == "return_conf"]
        self.input_names = [op.name for op in inputs]
        self.output_names = [op.name for op in returns]
        self.input_lbns = [jb.op_outputs(op)[0][2] for op in inputs]
        self.result_lbns = [getattr(op.return_conf, "in") for op in returns]
        self._feed_index = {n: i for i, n in enumerate(self.input_names)}
        self._result_index = {n: i for i, n in enumerate(self.output_names)}

    def device(self, op_conf) -> torch.device:
        """The torch device an op is placed on."""
        return device_of(op_conf, self.placements.get(op_conf.name, ("0:0",)))

    def walk(self):
        """Call :meth:`run_op` on every op in schedule order; returns self."""
        for i, op in enumerate(self.order):
            self.run_op(i, op)
        return self

    def run_op(self, i, op):
        """Emit op ``i`` of the schedule: one of the interface emitters, else :meth:`compute`."""
        kind = jb.op_kind(op)
        if kind == "input_conf":
            return self.input(i, op, jb.op_outputs(op)[0][2], self._feed_index[op.name])
        if kind == "variable_conf":
            return self.variable(i, op, jb.op_outputs(op)[0][2])
        if kind == "return_conf":
            return self.output(i, op, getattr(op.return_conf, "in"), self._result_index[op.name])
        if kind == "foreign_watch_conf":
            return self.watch(i, op, getattr(op.foreign_watch_conf, "in"))
        return self.compute(i, op)

    # ------------------------------------------------------------------ per-op emitters
    def input(self, i, op, lbn, feed_index):
        """An ``input_conf`` op: blob ``lbn`` is feed ``feed_index``."""
        raise NotImplementedError

    def variable(self, i, op, lbn):
        """A ``variable_conf`` op: blob ``lbn`` is the variable ``op.name``."""
        raise NotImplementedError

    def output(self, i, op, src, result_index):
        """A ``return_conf`` op: result ``result_index`` is blob ``src``."""
        raise NotImplementedError

    def watch(self, i, op, src):
        """A ``foreign_watch_conf`` op: blob ``src`` goes to the handler ``op.foreign_watch_conf.handler_uuid``."""
        raise NotImplementedError

    def compute(self, i, op):
        """Any other op (a user op or a system op)."""
        raise NotImplementedError
