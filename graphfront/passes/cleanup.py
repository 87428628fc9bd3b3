"""Cleanup passes (``Job -> Job``)."""
from __future__ import annotations

from graphfront.framework import job_builder as jb
from graphfront.ops import registry

# ops kept even when nothing reads their outputs: interface ops, in-place updates and random
# ops (they draw from a shared random stream: dropping one would change the others' draws)


def _is_sink(op) -> bool:
    opdef = registry.op_def(op)
    return opdef.interface or opdef.random or (opdef.may_mutate and bool(opdef.mutated_args(jb.user_attrs(op))))


def prune_dead_ops(job):
    """Remove ops none of whose outputs reach a return, watch, in-place update or random op."""
    producer = {}
    for op in job.net.op:
        for _, _, lbn in jb.op_outputs(op):
            producer[lbn] = op.name
    by_name = {op.name: op for op in job.net.op}
    live = set()
    stack = [op.name for op in job.net.op if _is_sink(op)]
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        op = by_name[name]
        stack.extend(producer[lbn] for _, _, lbn in jb.op_inputs(op) if lbn in producer)
        stack.extend(n for n in op.ctrl_in_op_name if n in by_name)
    dead = [name for name in by_name if name not in live]
    if dead:
        b = jb.JobBuilder(job)
        b.remove_ops(dead)
        return b.job
    return job
