"""Cleanup passes (``Job -> Job``): dead-op pruning and common-subexpression elimination."""
from __future__ import annotations

from graphfront.framework import job_builder as jb
from graphfront.ops import registry
from graphfront.passes.rewrite import Net
from graphfront.runtime import plan as rt, walk

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


def merge_duplicate_ops(job):
    """Common-subexpression elimination: of the pure user ops (:func:`graphfront.runtime.plan.is_pure`,
    no ``ctrl_in_op_name``) with the same type, inputs, attrs and placement, the first in job
    order stays and the readers of the others read its outputs; the others go. Chains merge
    too (ops are visited in job order, so a duplicate's readers already read the first's
    outputs when they are visited). A duplicate an output of which the job names elsewhere
    (a loss, a watched blob) stays. Example: OneFlow-Benchmark's BERT makes its attention mask
    ``(mask - 1) * 10000`` in every layer; it is then computed once."""
    net = Net(job)
    mutated = {lbn for op in job.net.op for lbn in walk.mutated_lbns(op)}  # (an op's own outputs stay its own)
    first = {}
    changed = False
    for op in list(job.net.op):
        if jb.op_kind(op) != "user_conf" or op.ctrl_in_op_name or not rt.is_pure(op) or \
                any(lbn in mutated for _, _, lbn in jb.op_outputs(op)):
            continue
        uc = op.user_conf
        key = (uc.op_type_name, net.placement(op),
               tuple((arg, tuple(uc.input[arg].s)) for arg in uc.input_order),
               tuple(sorted((k, v.SerializeToString(deterministic=True)) for k, v in uc.attr.items())),
               tuple((arg, len(uc.output[arg].s)) for arg in uc.output_order))
        kept = first.setdefault(key, op)
        outs = [lbn for _, _, lbn in jb.op_outputs(op)]
        if kept is op or any(lbn in net.protected for lbn in outs):
            continue
        for lbn, kept_lbn in zip(outs, (lbn for _, _, lbn in jb.op_outputs(kept))):
            net.redirect(lbn, kept_lbn)
        net.remove(op.name)
        changed = True
    return net.finish() if changed else job
