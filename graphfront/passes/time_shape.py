"""Unroll the time-shape ops ``repeat``/``unpack`` ... ``acc``/``pack`` (see
:mod:`graphfront.ops.time_shape_ops`) into plain ops: ``Job -> Job``, run before autograd.

The *region* is every op reachable from the outputs of the ``repeat``/``unpack`` ops
without passing an ``acc``/``pack``. With ``n`` the ops' common count, each region op is
replaced by ``n`` copies named ``<op>-t<i>``; copy ``i`` reads copy ``i`` of its region
inputs, the ``repeat`` input itself for a ``repeat`` output, piece ``i`` (a ``narrow``
of dim 0 named ``<unpack>-t<i>``) for an ``unpack`` output, and every other blob
unchanged (variables are shared by all copies). An ``acc`` becomes ``add_n`` of its
input's copies (``identity`` for n = 1), a ``pack`` becomes ``concat`` along dim 0; both
keep their op names and output blob names, so the rest of the job is untouched. This is
what OneFlow computes over ``n`` micro-steps, done in one pass; autograd then
differentiates the unrolled ops.

Raises JobBuildError (naming the op) when the counts differ, when a region blob is used
outside the region other than through ``acc``/``pack`` (a job output, a loss, a plain op),
or for a ``repeat``/``unpack`` inside a region (nesting is not supported).
"""
from __future__ import annotations

import copy

from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError
from graphfront.ops.builder import UserOpConfBuilder
from graphfront.ops.time_shape_ops import SINKS, SOURCES, TIME_SHAPE_OPS
from graphfront.passes.rewrite import set_op_input


def _type(op):
    return op.user_conf.op_type_name if jb.op_kind(op) == "user_conf" else None


def _fail(op, msg):
    raise JobBuildError(f"op '{op.name}' ({_type(op) or jb.op_kind(op)}): {msg}")


def _count(op):
    return jb.user_attrs(op)[TIME_SHAPE_OPS[_type(op)]]


def _renamed(op, i):
    """A copy of ``op`` named ``<name>-t<i>`` whose output lbns follow the new name."""
    clone = copy.deepcopy(op)
    clone.name = f"{op.name}-t{i}"
    if jb.op_kind(op) == "user_conf":
        for lst in clone.user_conf.output.values():
            for j, lbn in enumerate(lst.s):
                lst.s[j] = clone.name + lbn[len(op.name):]
    return clone


def _user_op(name, op_type, inputs, attrs, template):
    b = UserOpConfBuilder(name, prefix=False).Op(op_type)
    for arg, lbns in inputs.items():
        b.Input(arg, lbns)
    b.Output("out")
    for k, v in attrs.items():
        b.Attr(k, v)
    conf = b.op_conf
    jb.check_and_complete(conf)
    conf.device_tag = template.device_tag
    conf.scope_symbol_id = template.scope_symbol_id
    return conf


def has_time_shape_ops(job) -> bool:
    """Whether ``job`` holds a repeat/acc/unpack/pack op (so :func:`unroll_time_shape` must run)."""
    return any(_type(op) in TIME_SHAPE_OPS for op in job.net.op)


def unroll_time_shape(job):
    ops = list(job.net.op)
    sources = [op for op in ops if _type(op) in SOURCES]
    if not sources:
        return job
    n = _count(sources[0])
    for op in ops:
        if _type(op) in TIME_SHAPE_OPS and _count(op) != n:
            _fail(op, f"all repeat/unpack/acc/pack ops of a job must have the same count; {_count(sources[0])} "
                      f"(op '{sources[0].name}') and {_count(op)} differ")
    consumers = {}
    for op in ops:
        for _, _, lbn in jb.op_inputs(op):
            consumers.setdefault(lbn, []).append(op)
    # the region: ops reachable from the sources' outputs, stopping at sinks
    region, sinks, frontier = {}, {}, [f"{s.name}/out_0" for s in sources]
    while frontier:
        lbn = frontier.pop()
        for op in consumers.get(lbn, ()):
            kind = _type(op)
            if kind in SINKS:
                sinks[op.name] = op
            elif kind in SOURCES:
                _fail(op, "a repeat/unpack inside a repeat/unpack ... acc/pack region is not supported")
            elif op.name not in region:
                if jb.op_kind(op) == "return_conf":
                    _fail(op, f"returns '{lbn}', a blob of a repeat/unpack region: close the region with acc or pack")
                region[op.name] = op
                frontier.extend(out for _, _, out in jb.op_outputs(op))
    region_lbns = {lbn for op in region.values() for _, _, lbn in jb.op_outputs(op)}
    region_lbns |= {f"{s.name}/out_0" for s in sources}
    for lbn in region_lbns:
        for reader in consumers.get(lbn, ()):
            if reader.name not in region and reader.name not in sinks:
                _fail(reader, f"reads '{lbn}' of a repeat/unpack region outside it; use acc or pack first")
    protected = set(job.job_conf.train_conf.loss_lbn)
    if protected & region_lbns:
        raise JobBuildError(f"loss {sorted(protected & region_lbns)} lies inside a repeat/unpack region: reduce it "
                            f"with acc (or pack) before minimize()")

    descs = job.helper.lbn2logical_blob_desc
    source_of = {f"{s.name}/out_0": s for s in sources}

    def piece(lbn, i):
        """The lbn copy ``i`` reads for input ``lbn``."""
        if lbn in source_of:
            s = source_of[lbn]
            return s.user_conf.input["in"].s[0] if _type(s) == "repeat" else f"{s.name}-t{i}/out_0"
        if lbn in region_lbns:
            name, blob = lbn.split("/", 1)
            return f"{name}-t{i}/{blob}"
        return lbn

    new_ops, new_names = [], {}
    for op in ops:
        if _type(op) == "repeat":
            continue
        if _type(op) == "unpack":
            x = op.user_conf.input["in"].s[0]
            length = descs[f"{op.name}/out_0"].shape.dim[0]
            for i in range(n):
                conf = _user_op(f"{op.name}-t{i}", "narrow", {"in": [x]},
                                {"dim": 0, "start": i * length, "length": length}, op)
                descs[f"{conf.name}/out_0"].CopyFrom(descs[f"{op.name}/out_0"])
                new_ops.append(conf)
                new_names[conf.name] = op.name
            continue
        if op.name in sinks:
            inputs = [piece(op.user_conf.input["in"].s[0], i) for i in range(n)]
            if _type(op) == "pack":
                conf = _user_op(op.name, "concat", {"in": inputs}, {"axis": 0, "max_dim_size": 0}, op)
            else:
                conf = _user_op(op.name, "add_n" if n > 1 else "identity", {"in": inputs}, {}, op)
            new_ops.append(conf)
            continue
        if op.name in region:
            for i in range(n):
                clone = _renamed(op, i)
                for arg, index, lbn in jb.op_inputs(op):
                    set_op_input(clone, arg, index, piece(lbn, i))
                for (_, _, old), (_, _, new) in zip(jb.op_outputs(op), jb.op_outputs(clone)):
                    descs[new].CopyFrom(descs[old])
                new_ops.append(clone)
                new_names[clone.name] = op.name
            continue
        new_ops.append(op)
    removed = {s.name for s in sources} | set(region)
    for name in removed:
        for _, _, lbn in jb.op_outputs(next(op for op in ops if op.name == name)):
            descs.pop(lbn, None)
    del job.net.op[:]
    job.net.op.extend(new_ops)
    for group in job.placement.placement_group:
        names = list(group.op_set.op_name)
        added = [new for new, old in new_names.items() if old in names]
        del group.op_set.op_name[:]
        group.op_set.op_name.extend([x for x in names if x not in removed] + added)
    return job


unroll_time_shape.is_enabled = has_time_shape_ops  # runs (and is logged) only for jobs with time-shape ops

__all__ = ["has_time_shape_ops", "unroll_time_shape"]
