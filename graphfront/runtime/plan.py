"""Lowering: a completed Job becomes a plan, generated straight-line Python.

``Plan(job, ...)`` orders the ops topologically (data edges, ``ctrl_in_op_name``, and
in-place updates after every reader of the updated blob or of a view of it), asks each
op's registered kernel factory for a callable once, and generates one Python function
that calls one kernel per op and ``del``s each buffer right after its last use. The
source of that function is ``plan.source``; it is exactly what runs on each LazyRun.

Interface ops are bound, not computed: ``input_conf`` reads the feed list,
``variable_conf`` the session's variable tensors, ``return_conf`` produces the
function's results and ``foreign_watch_conf`` calls a watch handler.
"""
from __future__ import annotations

import heapq

import torch

from graphfront.framework import job_builder as jb
from graphfront.framework.job_builder import TensorDesc
from graphfront.ops import registry
from graphfront.ops.system import lookup_system


def device_of(op_conf, device_ids) -> torch.device:
    """torch device for an op: ``"gpu"`` -> ``cuda:<first device id>``, else cpu."""
    if op_conf.device_tag == "gpu":
        first = int(device_ids[0].split(":")[1].split("-")[0]) if device_ids else 0
        return torch.device("cuda", first)
    return torch.device("cpu")


class KernelCtx:
    """What a kernel factory sees: attrs, input/output descs and the device."""

    def __init__(self, op_conf, descs, device):
        self.op_name = op_conf.name
        self.device = device
        self._uc = op_conf.user_conf
        self._descs = descs
        self.attrs = jb.user_attrs(op_conf)

    def attr(self, name):
        return self.attrs[name]

    def has_input(self, name) -> bool:
        return name in self._uc.input and len(self._uc.input[name].s) > 0

    def input(self, name, i=0) -> TensorDesc:
        return self._descs[self._uc.input[name].s[i]] if self.has_input(name) else None

    def has_output(self, name) -> bool:
        return name in self._uc.output

    def output(self, name, i=0) -> TensorDesc:
        return self._descs[self._uc.output[name].s[i]] if self.has_output(name) else None

    def output_count(self, name) -> int:
        return len(self._uc.output[name].s) if name in self._uc.output else 0


def _is_view(op_conf) -> bool:
    kind = jb.op_kind(op_conf)
    if kind == "user_conf":
        return registry.lookup(op_conf.user_conf.op_type_name).view
    return lookup_system(kind).view


def _mutated_lbns(op_conf):
    if jb.op_kind(op_conf) != "user_conf":
        return []
    opdef = registry.lookup(op_conf.user_conf.op_type_name)
    uc = op_conf.user_conf
    return [lbn for arg in opdef.mutates if arg in uc.input for lbn in uc.input[arg].s]


def schedule(job):
    """Topological order of ``job.net.op`` (stable: ties keep the job's order).

    Returns ``(ops, aliased)`` where ``aliased`` is the set of lbns that may alias a
    blob updated in place (their readers run before the update).
    """
    ops = list(job.net.op)
    index = {op.name: i for i, op in enumerate(ops)}
    producer, consumers = {}, {}
    for op in ops:
        for _, _, lbn in jb.op_outputs(op):
            producer[lbn] = op.name
        for _, _, lbn in jb.op_inputs(op):
            consumers.setdefault(lbn, []).append(op.name)
    preds = {op.name: set() for op in ops}
    for op in ops:
        for _, _, lbn in jb.op_inputs(op):
            if lbn in producer:
                preds[op.name].add(producer[lbn])
        preds[op.name].update(n for n in op.ctrl_in_op_name if n in preds)
    aliased = set()
    by_name = {op.name: op for op in ops}
    for op in ops:
        for lbn in _mutated_lbns(op):
            stack = [lbn]
            while stack:
                cur = stack.pop()
                if cur in aliased:
                    continue
                aliased.add(cur)
                for reader in consumers.get(cur, []):
                    if reader != op.name:
                        preds[op.name].add(reader)
                        if _is_view(by_name[reader]):
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


class Plan:
    """The executable form of a completed Job (see module docstring).

    Attributes:
        source: the generated Python source of the plan function.
        input_names: input op names, in feed order.
        output_names: return op names, in result order.
    """

    def __init__(self, job, variables, watchers=None, kernel_wrapper=None):
        self.job = job
        descs = {lbn: TensorDesc.from_proto(p) for lbn, p in job.helper.lbn2logical_blob_desc.items()}
        placements = {}
        for group in job.placement.placement_group:
            for name in group.op_set.op_name:
                placements[name] = tuple(group.parallel_conf.device_name)
        order, aliased = schedule(job)
        self.order = order
        env = {"torch": torch}
        names = {}            # lbn -> local variable name
        lbn_device = {}
        last_use = {}
        for i, op in enumerate(order):
            for _, _, lbn in jb.op_inputs(op):
                last_use[lbn] = i
        lines = []
        self.input_names = [op.name for op in job.net.op if jb.op_kind(op) == "input_conf"]
        self.output_names = []
        results = []
        devices = {}

        def dev_name(device):
            key = str(device)
            if key not in devices:
                devices[key] = f"D{len(devices)}"
                env[devices[key]] = device
            return devices[key]

        def arg(lbn, device):
            expr = names[lbn]
            if lbn_device.get(lbn) != device:
                expr = f"{expr}.to({dev_name(device)}, non_blocking=True)"
            return expr

        for i, op in enumerate(order):
            kind = jb.op_kind(op)
            device = device_of(op, placements.get(op.name, ("0:0",)))
            outs = jb.op_outputs(op)
            for _, _, lbn in outs:
                names[lbn] = f"v{len(names)}"
                lbn_device[lbn] = device
            comment = f"  # {op.name} ({jb.op_type_name(op)})"
            if kind == "input_conf":
                lines.append(f"{names[outs[0][2]]} = feeds[{self.input_names.index(op.name)}]{comment}")
            elif kind == "variable_conf":
                key = f"V{i}"
                env[key] = variables.tensors[op.name]
                lines.append(f"{names[outs[0][2]]} = {key}{comment}")
            elif kind == "return_conf":
                src = getattr(op.return_conf, "in")
                r = f"r{len(self.output_names)}"
                copy = ".clone()" if src in aliased else ""
                lines.append(f"{r} = {names[src]}{copy}{comment}")
                results.append(r)
                self.output_names.append(op.name)
            elif kind == "foreign_watch_conf":
                key = f"W{i}"
                uuid = op.foreign_watch_conf.handler_uuid
                env[key] = (watchers or {}).get(uuid, _missing_watcher(uuid))
                src = getattr(op.foreign_watch_conf, "in")
                copy = ".clone()" if src in aliased else ""
                lines.append(f"{key}({names[src]}{copy}){comment}")
            else:
                key = f"K{i}"
                if kind == "user_conf":
                    opdef = registry.lookup(op.user_conf.op_type_name)
                    fn = opdef.kernel(KernelCtx(op, descs, device))
                    uc = op.user_conf
                    args = []
                    for a in opdef.inputs:
                        lbns = list(uc.input[a.name].s) if a.name in uc.input else []
                        if a.repeated:
                            args.append("[" + ", ".join(arg(l, device) for l in lbns) + "]")
                        else:
                            args.append(arg(lbns[0], device) if lbns else "None")
                    targets = []
                    for a in opdef.outputs:
                        lbns = list(uc.output[a.name].s) if a.name in uc.output else []
                        if a.repeated:
                            targets.append("(" + "".join(names[l] + ", " for l in lbns) + ")" if lbns else "_")
                        else:
                            targets.append(names[lbns[0]] if lbns else "_")
                else:
                    fn = lookup_system(kind).kernel(getattr(op, kind))
                    args = [arg(lbn, device) for _, _, lbn in jb.op_inputs(op)]
                    targets = [names[lbn] for _, _, lbn in outs]
                if kernel_wrapper is not None:
                    fn = kernel_wrapper(op, fn)
                env[key] = fn
                call = f"{key}({', '.join(args)})"
                if not targets:
                    lines.append(f"{call}{comment}")
                elif len(targets) == 1:
                    lines.append(f"{targets[0]} = {call}{comment}")
                else:
                    lines.append(f"{', '.join(targets)} = {call}{comment}")
            dead = [names[lbn] for _, _, lbn in jb.op_inputs(op) if last_use.get(lbn) == i]
            if kind != "return_conf":
                dead += [names[lbn] for _, _, lbn in outs if lbn not in last_use]
            if dead:
                lines.append(f"del {', '.join(sorted(set(dead), key=lambda s: int(s[1:])))}")
        body = "\n".join("    " + ln for ln in lines) or "    pass"
        ret = "(" + "".join(r + ", " for r in results) + ")"
        self.source = f"def plan(feeds):\n{body}\n    return {ret}\n"
        code = compile(self.source, f"<graphfront plan {job.job_conf.job_name}>", "exec")
        exec(code, env)
        self._fn = env["plan"]
        self.env = env

    def __call__(self, feeds):
        with torch.no_grad():
            return self._fn(feeds)


def _missing_watcher(uuid):
    def missing(x):
        raise RuntimeError(f"no watch handler registered under uuid {uuid}")
    return missing
