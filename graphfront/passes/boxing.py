"""The boxing pass: SBP signatures for a multi-device job and the collectives between them.

:func:`boxing` runs after the completion passes on a job placed on ``n > 1`` devices. It
infers every op's SBP signature (:func:`graphfront.parallel.sbp.infer_job_sbp`) and,
wherever an input's required layout differs from its producer's, inserts boxing ops
(:mod:`graphfront.ops.boxing_ops`) named ``System-Boxing-<Kind>-<k>`` as OneFlow names
its boxing ops, so the completed Job shows every byte that crosses devices. One boxing
chain per (blob, target layout) is shared by all consumers. Conversions:

=============  ===========================================
P -> B         all-reduce
P -> S(0)      reduce-scatter; P -> S(k): all-reduce, slice
S(0) -> B      all-gather; S(k) -> B: all-gather on axis k
S(a) -> S(b)   all-to-all (``_nccl_logical_s2s``)
B -> S(k)      slice (no communication)
B -> P         device 0 keeps the blob (no communication)
S(k) -> P      all-gather, then B -> P
=============  ===========================================
"""
from __future__ import annotations

import itertools

from graphfront.framework import job_builder as jb
from graphfront.framework.scope_symbols import device_count
from graphfront.framework.errors import JobBuildError
from graphfront.parallel import sbp as _sbp
from graphfront.passes.rewrite import Net


def device_counts(job) -> dict:
    """op name -> number of devices of its placement."""
    counts = {}
    for group in job.placement.placement_group:
        n = device_count(group.parallel_conf.device_name) if len(group.parallel_conf.device_name) else 1
        for name in group.op_set.op_name:
            counts[name] = n
    return counts


def parallel_num(job) -> int:
    """Number of devices of the job's placement (1 for a single-device job). Ops placed on
    one device of a multi-device job (the train-step counter the optimizer adds) run
    replicated on every device.

    Raises JobBuildError when ops are placed on two different numbers (> 1) of devices
    (graphfront runs a multi-device job on one placement)."""
    counts = device_counts(job)
    sizes = set(counts.values()) - {1}
    if len(sizes) > 1:
        by_size = {n: sorted(k for k, v in counts.items() if v == n)[:3] for n in sizes}
        raise JobBuildError(f"job '{job.job_conf.job_name}' places ops on different numbers of devices "
                            f"({by_size}); graphfront runs a job on one placement: place every op of the job "
                            "on the same devices")
    return sizes.pop() if sizes else 1


def _steps(src, dst):
    """The boxing op chain ``[(kind, op type, attrs, out sbp)]`` turning ``src`` into ``dst``."""
    a, b = _sbp.split_axis(src), _sbp.split_axis(dst)
    if src == _sbp.P:
        if dst == _sbp.B:
            return [("AllReduce", "_nccl_logical_all_reduce", {}, dst)]
        if b == 0:
            return [("ReduceScatter", "_nccl_logical_reduce_scatter", {}, dst)]
        return _steps(src, _sbp.B) + _steps(_sbp.B, dst)
    if src == _sbp.B:
        if dst == _sbp.P:
            return [("BToP", "_logical_b_to_p", {}, dst)]
        return [("Slice", "_logical_b_to_s", {"out_split_axis": b}, dst)]
    # src split
    if dst == _sbp.B:
        if a == 0:
            return [("AllGather", "_nccl_logical_all_gather", {}, dst)]
        return [("AllGather", "_nccl_logical_all_gather_noncontinuous", {"in_split_axis": a}, dst)]
    if dst == _sbp.P:
        return _steps(src, _sbp.B) + _steps(_sbp.B, dst)
    return [("AllToAll", "_nccl_logical_s2s", {"in_split_axis": a, "out_split_axis": b}, dst)]


def boxing(job, n=None):
    """Infer SBP signatures and insert boxing ops (see module docstring); returns the job."""
    n = parallel_num(job) if n is None else n
    if n <= 1:
        return job
    single = {name for name, c in device_counts(job).items() if c == 1}
    machines = {d.split(":")[0] for g in job.placement.placement_group for d in g.parallel_conf.device_name}
    sigs = _sbp.infer_job_sbp(job, n, replicated=single, gather_returns=len(machines) > 1)
    have = _sbp.blob_sbps(job)
    net = Net(job)
    made = {}
    counter = itertools.count()
    for op in list(job.net.op):
        for arg, i, lbn in jb.op_inputs(op):
            need = sigs[op.name][_sbp.bn_in_op(op, arg, i)]
            if need == have[lbn]:
                continue
            key = (lbn, need)
            if key not in made:
                cur, cur_sbp = lbn, have[lbn]
                producer = net.producer[lbn]
                for kind, op_type, attrs, out_sbp in _steps(cur_sbp, need):
                    added = net.add_user_op(f"System-Boxing-{kind}-{next(counter)}", op_type, {"in": cur}, attrs,
                                            like_op=producer)
                    _sbp.write_signature(job, added.name, {"in_0": cur_sbp, "out_0": out_sbp})
                    cur, cur_sbp, producer = f"{added.name}/out_0", out_sbp, added.name
                made[key] = cur
            net.set_input(op, arg, i, made[key])
    return net.finish()
