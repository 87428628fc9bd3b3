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

A job on one machine may place ops on any devices of it (``"0:0-1"``, ``"0:0-3"``,
pipeline stages on ``"0:0-1"`` and ``"0:2-3"``, a list ``["0:1", "0:3"]``): it runs on
one worker per device of the union of its placements of more than one device, ranked by
device index (:func:`parallel_num`, :func:`op_ranks`), and each op's signature is
inferred over its own placement's devices. Wherever a blob crosses from one placement to
another (or changes layout on a placement of fewer devices than the job's), one
``_boxing_across_placements`` op named ``System-Boxing-Placement-<k>`` (attrs
``in_ranks`` / ``out_ranks``: the workers of each side) rebuilds the logical blob from the
source devices' parts and lays it out over the destination's; between placements of as
many devices in one layout (pipeline stages) it is named ``System-Boxing-Copy-<k>`` and
sends each part from the source's device ``i`` to the destination's device ``i``
(:func:`graphfront.ops.boxing_ops.is_pairwise`). Ops placed on one device
run replicated on every worker, as before; a job whose placements all hold one device
runs in one process (one device per op). A job on several machines places its ops on
prefixes ``"0:0-k"`` of the devices (or on all of them).

A job on a device grid (:func:`graphfront.parallel.sbp.job_grid`, layouts one SBP string
per grid axis) turns a layout into another one grid axis at a time with the conversions
above, each collective running over the devices that differ only in that axis (attrs
``grid_axis`` and ``hierarchy`` of the boxing op; -1 and [] elsewhere), outer axes
first; an inner axis splitting a dim that an outer conversion splits or gathers is made
broadcast first (:func:`_nd_steps`). All its ops sit on the grid's devices of one machine
(or on one device, run replicated), as OneFlow's hierarchical boxing
(``oneflow/core/graph/boxing/hierarchical_sub_task_graph_builder_impl.cpp``) converts
one axis at a time.
"""
from __future__ import annotations

import itertools

from graphfront.framework import job_builder as jb
from graphfront.framework.scope_symbols import device_count, device_pairs, first_device_index
from graphfront.framework.errors import JobBuildError
from graphfront.ops.boxing_ops import is_pairwise
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


def _spread_devices(job):
    """The sorted device indices of machine 0 that a job whose ops sit on 1-D placements
    of machine 0 runs on: the union of its placements of more than one device. None for
    a job on several machines or on a device grid (its placements share their first
    devices, see :func:`parallel_num`)."""
    devices, machines = set(), set()
    for group in job.placement.placement_group:
        pairs = device_pairs(group.parallel_conf.device_name)
        machines.update(m for m, _ in pairs)
        if len(pairs) > 1:
            devices.update(d for _, d in pairs)
    if machines - {0} or _sbp.job_grid(job):
        return None
    return sorted(devices)


def parallel_num(job) -> int:
    """Number of devices (worker processes) a job runs on (1 for a single-device job).

    A job on one machine whose ops sit on 1-D placements runs on one worker per device of
    the union of its placements of more than one device (``"0:0-1"`` and ``"0:2-3"``: 4
    workers, ranked by device index); an op runs on its placement's workers only. Ops
    placed on one device (the train-step counter the optimizer adds, or every op of a job
    whose placements all hold one device) run replicated on every worker.

    Raises JobBuildError when a job on several machines or on a device grid places ops on
    different numbers (> 1) of devices and one of them is not a prefix ``"0:0-k"`` of
    machine 0's devices (the placements of such a job must share their first devices)."""
    counts = device_counts(job)
    sizes = set(counts.values()) - {1}
    spread = _spread_devices(job)
    if spread is not None:
        return len(spread) if sizes else 1
    if len(sizes) > 1:
        for group in job.placement.placement_group:
            names = list(group.parallel_conf.device_name)
            if names and (len(names) > 1 or not names[0].startswith("0:") or first_device_index(names)):
                op_name = group.op_set.op_name[0] if len(group.op_set.op_name) else "?"
                raise JobBuildError(f"job '{job.job_conf.job_name}' places ops on different numbers of devices "
                                    f"({sorted(sizes)}) of several machines or on a device grid; op '{op_name}' is "
                                    f"placed on {names}, expected devices '0:0-k' of machine 0 (graphfront runs such "
                                    "a job on the first devices of each machine)")
    return max(sizes) if sizes else 1


def job_devices(job, n) -> list:
    """The device indices of its machine that the ``n`` workers of a job run on, in rank
    order: the union of its placements (:func:`parallel_num`) for a job on one machine
    that places ops on 1-D placements, else ``0 .. n-1``."""
    spread = _spread_devices(job)
    return spread if spread is not None and len(spread) == n else list(range(n))


def op_parallel_nums(job, n) -> dict:
    """op name -> number of devices the op runs on in a job on ``n`` devices: its
    placement's count, ``n`` for an op on one device (run replicated)."""
    return {name: c if c > 1 else n for name, c in device_counts(job).items()}


def op_ranks(job, n) -> dict:
    """op name -> the ranks (in the job's process group of ``n`` workers, ascending) of
    the workers the op runs on: its placement's devices among the job's
    (:func:`parallel_num`), every rank for an op on one device (run replicated), the
    first ``k`` ranks for an op on ``k`` devices of a job on several machines or on a
    device grid."""
    spread = _spread_devices(job)
    ranks = {}
    for group in job.placement.placement_group:
        pairs = device_pairs(group.parallel_conf.device_name) if len(group.parallel_conf.device_name) else []
        if len(pairs) <= 1:
            mine = tuple(range(n))
        elif spread is None or len(spread) != n:
            mine = tuple(range(len(pairs)))
        else:
            mine = tuple(spread.index(d) for _, d in pairs)
        ranks.update((name, mine) for name in group.op_set.op_name)
    return ranks


def blob_ranks(job, n) -> dict:
    """lbn -> the ranks of the workers whose parts make up the blob (its producer's, see
    :func:`op_ranks`) in a job on ``n`` devices."""
    ops = op_ranks(job, n)
    everyone = tuple(range(n))
    return {lbn: ops.get(op.name, everyone) for op in job.net.op for _, _, lbn in jb.op_outputs(op)}


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


def _conflicts(inner, src, dst):
    """Whether an inner grid axis laid out as ``inner`` keeps an outer axis from turning
    ``src`` into ``dst`` with 1-D collectives: it splits a dim the outer conversion
    splits or gathers."""
    k = _sbp.split_axis(inner)
    return k is not None and k in (_sbp.split_axis(src), _sbp.split_axis(dst))


def _nd_steps(src, dst):
    """The boxing chain ``[(grid axis, kind, op type, attrs, out layout)]`` turning the
    grid layout ``src`` into ``dst`` (tuples, one SBP string per grid axis), one axis at a
    time with :func:`_steps`, outer axes first. Converting an inner axis acts within each
    part the outer axes leave, so it is always exact; converting an outer axis acts on the
    same piece of every part, which commutes with the inner axes' layouts unless an inner
    axis splits a dim the conversion splits or gathers: such an inner axis is made
    broadcast first (and converted to its target afterwards)."""
    cur, steps = list(src), []

    def convert(axis, to):
        for inner in range(axis + 1, len(cur)):
            if _conflicts(cur[inner], cur[axis], to):
                convert(inner, _sbp.B)
        for kind, op_type, attrs, out in _steps(cur[axis], to):
            cur[axis] = out
            steps.append((axis, kind, op_type, attrs, tuple(cur)))

    for axis in range(len(cur)):
        if cur[axis] != dst[axis]:
            convert(axis, dst[axis])
    return steps


def boxing(job, n=None):
    """Infer SBP signatures and insert boxing ops (see module docstring); returns the job.

    Raises JobBuildError for a job on a device grid whose ops sit on placements of other
    device counts than the grid's (besides one device) or on several machines."""
    n = parallel_num(job) if n is None else n
    if n <= 1:
        return job
    counts = device_counts(job)
    machines = {d.split(":")[0] for g in job.placement.placement_group for d in g.parallel_conf.device_name}
    grid = _sbp.job_grid(job)
    if grid:
        other = {name: c for name, c in counts.items() if c not in (1, n)}
        if other or len(machines) > 1:
            name = next(iter(other), job.net.op[0].name)
            raise JobBuildError(f"job '{job.job_conf.job_name}' is laid out over the device grid {grid} ({n} devices); "
                                f"op '{name}' is placed on {counts.get(name)} device(s) of machines {sorted(machines)}: "
                                f"graphfront runs a job on a device grid with all its ops on the grid's {n} devices "
                                "of one machine (or on one device)")

    def steps(src, dst):
        """The collectives turning layout ``src`` into ``dst``: on a grid one axis at a time
        (:func:`_nd_steps`), each over the devices that differ only in that axis (attrs
        ``grid_axis`` and ``hierarchy``, :mod:`graphfront.ops.boxing_ops`)."""
        if not grid:
            return _steps(src, dst)
        return [(kind, op_type, {**attrs, "grid_axis": axis, "hierarchy": list(grid)}, out)
                for axis, kind, op_type, attrs, out in _nd_steps(src, dst)]

    single = {name for name, c in counts.items() if c == 1}
    ranks = op_ranks(job, n)   # (on a grid: every op on every rank)
    everyone = tuple(range(n))
    sigs = _sbp.infer_job_sbp(job, n, replicated=single, gather_returns=len(machines) > 1,
                              counts=op_parallel_nums(job, n))
    have = _sbp.blob_sbps(job)
    net = Net(job)
    made = {}
    counter = itertools.count()
    for op in list(job.net.op):
        for arg, i, lbn in jb.op_inputs(op):
            need = sigs[op.name][_sbp.bn_in_op(op, arg, i)]
            producer = net.producer[lbn]
            src, dst = ranks.get(producer, everyone), ranks.get(op.name, everyone)
            if need == have[lbn] and src == dst:
                continue
            key = (lbn, need, dst)
            if key not in made:
                if src == dst == everyone:
                    made[key] = _chain(job, net, counter, lbn, have[lbn], steps(have[lbn], need), producer)
                else:
                    attrs = {"in_sbp": have[lbn], "out_sbp": need, "in_parallel_num": len(src),
                             "out_parallel_num": len(dst), "in_ranks": list(src), "out_ranks": list(dst)}
                    kind = "Copy" if is_pairwise(attrs) else "Placement"
                    added = net.add_user_op(f"System-Boxing-{kind}-{next(counter)}", "_boxing_across_placements",
                                            {"in": lbn}, attrs, like_op=op.name)
                    _sbp.write_signature(job, added.name, {"in_0": have[lbn], "out_0": need})
                    made[key] = f"{added.name}/out_0"
            net.set_input(op, arg, i, made[key])
    return net.finish()


def _chain(job, net, counter, lbn, src, steps, producer):
    """Insert the collectives ``steps`` (``[(kind, op type, attrs, out layout)]``, from
    :func:`_steps` or :func:`_nd_steps`) turning ``lbn``, laid out as ``src`` on all the
    job's devices, into the last step's layout; returns the converted blob's lbn."""
    cur, cur_sbp = lbn, src
    for kind, op_type, attrs, out_sbp in steps:
        added = net.add_user_op(f"System-Boxing-{kind}-{next(counter)}", op_type, {"in": cur}, attrs,
                                like_op=producer)
        _sbp.write_signature(job, added.name, {"in_0": cur_sbp, "out_0": out_sbp})
        cur, cur_sbp, producer = f"{added.name}/out_0", out_sbp, added.name
    return cur
