"""Boxing ops: the collectives that change a blob's SBP layout between devices.

The boxing pass (:mod:`graphfront.passes.boxing`) inserts them, named
``System-Boxing-<Kind>-<k>``, wherever a producer's layout differs from what a consumer
needs. Their logical shape is their input's; each device's kernel runs one
``torch.distributed`` collective of the job's process group (gloo on CPU, NCCL on GPU)
over its local tensor. Op types follow OneFlow's NCCL logical ops
(``oneflow/user/ops/nccl_logical_ops.cpp``, ``oneflow/user/kernels/nccl_logical_kernels.cpp``);
the two that need no communication (slicing a broadcast blob, making it a partial sum)
are graphfront's ``_logical_b_to_s`` / ``_logical_b_to_p``.

=====================================  ==============  =====================================
op type                                layouts         kernel on device r of n
=====================================  ==============  =====================================
``_nccl_logical_all_reduce``           P -> B          ``all_reduce`` (sum)
``_nccl_logical_reduce_scatter``       P -> S(0)       ``reduce_scatter`` (NCCL) or
                                                       ``all_reduce`` + slice r (gloo)
``_nccl_logical_all_gather``           S(0) -> B       ``all_gather``, concatenated on axis 0
``_nccl_logical_all_gather_noncontinuous``  S(k) -> B  ``all_gather``, concatenated on axis k
``_nccl_logical_s2s``                  S(a) -> S(b)    ``all_gather`` on a, slice r on b
``_logical_b_to_s``                    B -> S(k)       slice r along k (no communication)
``_logical_b_to_p``                    B -> P          device 0 keeps the blob, others zeros
``_boxing_across_placements``          any -> any      ``all_gather``; the logical blob from
                                       between         the first ``in_parallel_num`` parts,
                                       placements      laid out over ``out_parallel_num``
                                                       (same layout and count: part ``i``
                                                       sent from source device ``i``)
=====================================  ==============  =====================================

``_boxing_across_placements`` moves a blob between placements of different devices of
one job (``"0:0-1"`` to ``"0:0-3"``, ``"0:0-1"`` to ``"0:2-3"``) or changes its layout on
a placement of fewer devices than the job's. An op placed on ``m`` of the job's ``n``
devices runs on their workers only: attrs ``in_ranks`` / ``out_ranks`` list the ranks of
the source and destination placements' devices (empty: the first ``in_parallel_num`` /
``out_parallel_num`` ranks). Between placements of as many devices in one layout (the
stages of a pipeline, :func:`is_pairwise`) each part goes from the source's device ``i``
to the destination's device ``i`` (``isend`` / ``irecv``). Otherwise the devices of both placements run the op, one
``all_gather`` over the job's group, or over a group of those devices
(:func:`subgroup`) when they are fewer (a device outside the source placement has no
input and sends zeros of the source part's shape): each device rebuilds the logical blob from the parts of ranks ``in_ranks`` under
``in_sbp`` (split: concatenated in that order; broadcast: the first; partial sum: summed)
and the device of ``out_ranks[i]`` keeps part ``i`` under ``out_sbp`` (partial sum: the
first keeps the blob, the others zeros); a device outside the destination placement
drops what it computed.

On a device grid (:func:`graphfront.parallel.sbp.job_grid`) the boxing pass gives each
collective attrs ``grid_axis`` (>= 0) and ``hierarchy`` (the grid): the kernel runs over
the line of devices along that axis through its device (one ``torch.distributed`` group
per line, :func:`grid_groups`), "device r of n" above meaning its coordinate on the axis
and the axis's length. ``grid_axis`` -1 (the default) runs over the job's whole group.

A split axis that the device count does not divide is cut as OneFlow's
``BalancedSplitter`` cuts it (the first ``length % n`` parts one longer,
``torch.tensor_split``'s parts); the all-gathers then pad the shorter parts with zeros to
the longest for the collective and cut them back (NCCL and gloo gather equal tensors), and
the reduce-scatter is an all-reduce and a slice. On a device grid splits are even.

A blob of host values (records, tensor buffers: a list per device) is split along axis 0
only; the all-gather, the slice and the move between placements take it as objects
(``all_gather_object``, a list sliced or concatenated); a split along another axis is
refused, naming the op.

Outside a process group (one device) every kernel is the identity. The ops have no grad
(they are inserted after autograd).
"""
from __future__ import annotations

import itertools

import torch

from graphfront.ops.common import balanced_range, host_concat, host_part, like
from graphfront.ops import onnx_rules
from graphfront.ops.registry import op
from graphfront.parallel import sbp as _sbp


def group():
    """``(torch.distributed, rank, world size)`` of the current process group, or
    ``(None, 0, 1)`` when none is initialized."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist, dist.get_rank(), dist.get_world_size()
    return None, 0, 1


_SUBGROUPS = {}  # ranks -> process group


def subgroup(ranks):
    """The process group of the workers ``ranks`` (a tuple of some of the job's ranks),
    made once per process; every process of the job must ask for the same groups in the
    same order (each ``torch.distributed.new_group`` is a collective of the whole group)."""
    import torch.distributed as dist
    ranks = tuple(ranks)
    if ranks not in _SUBGROUPS:
        _SUBGROUPS[ranks] = dist.new_group(list(ranks))
    return _SUBGROUPS[ranks]


def grid_groups(grid):
    """The process groups of the device ``grid`` (a tuple of ints whose product is the
    world size): for every axis, one group per line of devices along it (the devices whose
    other coordinates are equal), keyed ``(axis, other coordinates)``, each a
    :func:`subgroup` (so every process must ask for them in the same order, as it does
    when it receives the job)."""
    grid = tuple(grid)
    groups = {}
    for axis in range(len(grid)):
        for rest in itertools.product(*(range(d) for j, d in enumerate(grid) if j != axis)):
            groups[(axis, rest)] = subgroup(_sbp.grid_rank(rest[:axis] + (c,) + rest[axis:], grid)
                                            for c in range(grid[axis]))
    return groups


def _collective_group(k):
    """``(torch.distributed, rank, size, process group)`` a boxing kernel runs its
    collective over: the job's group (process group None), or with attr ``grid_axis`` >= 0
    the line of devices along that axis of the grid ``hierarchy`` through this device
    (rank: this device's coordinate on the axis). ``(None, 0, 1, None)`` on one device."""
    dist, rank, n = group()
    axis = k.attrs.get("grid_axis", -1)
    if dist is None or axis < 0:
        return dist, rank, n, None
    grid = tuple(k.attr("hierarchy"))
    coords = _sbp.grid_coords(rank, grid)
    return dist, coords[axis], grid[axis], grid_groups(grid)[(axis, coords[:axis] + coords[axis + 1:])]


def _part_lengths(k, axis, n):
    """The lengths of the ``n`` parts along ``axis`` of the blob a boxing kernel ``k``
    converts (OneFlow's ``BalancedSplitter``: the first ``length % n`` one longer), from
    its logical shape; None when they are equal (always on a device grid, whose splits
    are even)."""
    if k.attrs.get("grid_axis", -1) >= 0:
        return None
    length = k.logical("out").shape[axis]
    return None if length % n == 0 else [len(balanced_range(length, n, i)) for i in range(n)]


def _all_gather_parts(dist, x, axis, lengths, count, pg=None):
    """The ``count`` devices' parts of a blob split along ``axis`` (this device's is
    ``x``), all-gathered: equal ones as they are; parts of ``lengths`` (one per device)
    padded with zeros to the longest for the collective and cut back."""
    if lengths is not None and x.shape[axis] < max(lengths):
        pad = list(x.shape)
        pad[axis] = max(lengths) - x.shape[axis]
        x = torch.cat([x, x.new_zeros(pad)], axis)
    parts = [torch.empty_like(x) for _ in range(count)]
    dist.all_gather(parts, x.contiguous(), group=pg)
    if lengths is not None:
        parts = [p.narrow(axis, 0, length) for p, length in zip(parts, lengths)]
    return parts


def _all_reduce_kernel(k):
    dist, _, _, pg = _collective_group(k)

    def all_reduce(x):
        if dist is None:
            return x.clone()
        y = x.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(y, group=pg)
        return y
    return all_reduce


class _Done:
    """The handle of a collective that has completed."""

    @staticmethod
    def wait():
        return True


def _fused_all_reduce_kernel(k):
    """Several all-reduces over one group at once (OneFlow's collective-boxing fusion,
    ``nccl_fusion_all_reduce``): the tensors, of one dtype, are summed as one flat buffer
    by one collective, started without waiting for it; returns the outputs (views of the
    buffer) and the collective's handle, whose ``wait()`` comes before they are read."""
    dist, _, _, pg = _collective_group(k)

    def fused_all_reduce(xs):
        if dist is None:
            return [x.clone() for x in xs], _Done
        flat = torch.cat([x.reshape(-1) for x in xs])
        work = dist.all_reduce(flat, group=pg, async_op=True)
        return [part.view(x.shape) for part, x in zip(flat.split([x.numel() for x in xs]), xs)], work
    return fused_all_reduce


def _reduce_scatter_kernel(k):
    dist, rank, n, pg = _collective_group(k)
    even = dist is None or _part_lengths(k, 0, n) is None

    def reduce_scatter(x):
        if dist is None:
            return x.clone()
        x = x.contiguous()
        if even and dist.get_backend() == "nccl":
            out = torch.empty((x.shape[0] // n,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
            dist.reduce_scatter_tensor(out, x, group=pg)
            return out
        y = x.clone()
        dist.all_reduce(y, group=pg)  # gloo has no reduce_scatter, NCCL's takes equal parts
        return y.tensor_split(n, 0)[rank].contiguous()
    return reduce_scatter


def _on_host(k, arg="in", *axes):
    """Whether the blob a boxing kernel ``k`` converts holds host values (records, tensor
    buffers: a list per device), moved with the object collectives (``all_gather_object``)
    instead of the tensor ones. Raises ValueError naming the op when such a blob is split
    along another axis than 0 (one of ``axes``)."""
    host = (k.input(arg) or k.output("out")).dtype.torch is None
    if host and any(axes):
        raise ValueError(f"boxing op '{k.op_name}': a blob of host values ({k.output('out').dtype.name}) is split "
                         f"along axis 0 only, received the split axes {[a for a in axes if a is not None]}")
    return host


def _gathered_objects(dist, x, count, pg=None):
    parts = [None] * count
    dist.all_gather_object(parts, x, group=pg)
    return parts


def _all_gather_kernel(axis_attr=None):
    def make(k):
        dist, _, n, pg = _collective_group(k)
        axis = k.attr(axis_attr) if axis_attr else 0
        if _on_host(k, "in", axis):
            return lambda x: x if dist is None else host_concat(_gathered_objects(dist, x, n, pg))
        lengths = None if dist is None else _part_lengths(k, axis, n)

        def all_gather(x):
            return x.clone() if dist is None else torch.cat(_all_gather_parts(dist, x, axis, lengths, n, pg), axis)
        return all_gather
    return make


def _s2s_kernel(k):
    dist, rank, n, pg = _collective_group(k)
    a, b = k.attr("in_split_axis"), k.attr("out_split_axis")
    _on_host(k, "in", a, b)
    lengths = None if dist is None else _part_lengths(k, a, n)

    def s2s(x):
        if dist is None:
            return x.clone()
        return torch.cat(_all_gather_parts(dist, x, a, lengths, n, pg), a).tensor_split(n, b)[rank].contiguous()
    return s2s


def _b_to_s_kernel(k):
    _, rank, n, _ = _collective_group(k)
    axis = k.attr("out_split_axis")
    if _on_host(k, "in", axis):
        return lambda x: host_part(x, n, rank)
    return lambda x: x.tensor_split(n, axis)[rank].contiguous()


def _b_to_p_kernel(k):
    _, rank, _, _ = _collective_group(k)
    return lambda x: x.clone() if rank == 0 else torch.zeros_like(x)


def _across_placements_kernel(k):
    dist, rank, n = group()
    src, dst = _sbp.parse(k.attr("in_sbp")), _sbp.parse(k.attr("out_sbp"))
    src_n, dst_n = k.attr("in_parallel_num"), k.attr("out_parallel_num")
    src_ranks, dst_ranks = placement_ranks(k.attrs, "in"), placement_ranks(k.attrs, "out")
    src_axis, dst_axis = _sbp.split_axis(src), _sbp.split_axis(dst)
    members, pg = list(range(n)), None
    if dist is not None and len(involved_ranks(k.attrs)) < n:  # a group of the devices of both placements
        members = involved_ranks(k.attrs)
        pg = subgroup(members)
    out = k.output("out")
    if _on_host(k, "out", src_axis, dst_axis):
        return _host_across_placements(dist, rank, src, dst, src_ranks, dst_ranks, members, pg)
    if dist is not None and is_pairwise(k.attrs):
        return _copy_parts_kernel(dist, rank, src_ranks, dst_ranks, tuple(out.shape), out.dtype.torch, k.device)
    logical = tuple(k.logical("out").shape)
    lengths = None  # of the members' parts along the source's split axis (a device outside it sends part 0's)
    if src_axis is not None and logical[src_axis] % src_n:
        lengths = [len(balanced_range(logical[src_axis], src_n, src_ranks.index(r) if r in src_ranks else 0))
                   for r in members]

    def across_placements(x=None):
        if x is None:  # this device is outside the source placement: it sends zeros of part 0's shape
            x = torch.zeros(_sbp.local_shape(logical, src, src_n), dtype=out.dtype.torch, device=k.device)
        parts = [x]
        if dist is not None:
            gathered = _all_gather_parts(dist, x, src_axis or 0, lengths, len(members), pg)
            parts = [gathered[members.index(r)] for r in src_ranks]
        if src_axis is not None:
            whole = torch.cat(parts, src_axis)
        elif src == _sbp.P:
            whole = torch.stack(parts).sum(0)
        else:
            whole = parts[0].clone()
        r = dst_ranks.index(rank) if rank in dst_ranks else 0  # (outside the destination: dropped)
        if dst_axis is not None:
            return whole.tensor_split(dst_n, dst_axis)[r].contiguous()
        if dst == _sbp.P and r:
            return torch.zeros_like(whole)
        return whole
    return across_placements


def _host_across_placements(dist, rank, src, dst, src_ranks, dst_ranks, members, pg):
    """``_boxing_across_placements`` of a blob of host values (:func:`_on_host`): every
    device of both placements gathers the source parts as objects (a device outside the
    source sends None) and keeps its part of the logical blob."""
    def across_placements(x=None):
        parts = [x] if dist is None else _gathered_objects(dist, x, len(members), pg)
        parts = parts if dist is None else [parts[members.index(r)] for r in src_ranks]
        whole = host_concat(parts) if _sbp.split_axis(src) is not None else parts[0]
        if _sbp.split_axis(dst) is None:
            return whole
        return host_part(whole, len(dst_ranks), dst_ranks.index(rank) if rank in dst_ranks else 0)
    return across_placements


def is_pairwise(attrs) -> bool:
    """Whether a ``_boxing_across_placements`` op (``attrs``: name -> value) moves a blob
    between placements of as many devices in the same layout: the destination's device
    ``i`` then takes the source's part ``i`` as it is (OneFlow's point-to-point copy
    between the stages of a pipeline)."""
    return attrs["in_sbp"] == attrs["out_sbp"] and attrs["in_parallel_num"] == attrs["out_parallel_num"]


def _copy_parts_kernel(dist, rank, src_ranks, dst_ranks, shape, dtype, device):
    """The kernel of a pairwise ``_boxing_across_placements`` (:func:`is_pairwise`): the
    source's device ``i`` sends its part to the destination's device ``i`` (a device in
    both places keeps it; one that sends and receives posts both before waiting, and each
    pair of devices has its own NCCL communicator, so the moves never wait on each other),
    ``shape`` the part this device holds after the move; a device outside the destination
    returns zeros of that shape."""
    def copy_parts(x=None):
        requests, part = [], None
        if rank in src_ranks and dst_ranks[src_ranks.index(rank)] != rank:
            x = x.contiguous()
            requests.append(dist.isend(x, dst_ranks[src_ranks.index(rank)]))
        if rank in dst_ranks:
            peer = src_ranks[dst_ranks.index(rank)]
            if peer == rank:
                part = x.clone()
            else:
                part = torch.empty(shape, dtype=dtype, device=device)
                requests.append(dist.irecv(part, peer))
        for request in requests:
            request.wait()
        return part if part is not None else torch.zeros(shape, dtype=dtype, device=device)
    return copy_parts


def placement_ranks(attrs, side):
    """The ranks of the devices of ``_boxing_across_placements``'s source (``side``
    ``"in"``) or destination (``"out"``) placement, from its ``attrs`` (name -> value):
    ``<side>_ranks``, or when empty the first ``<side>_parallel_num`` ranks."""
    listed = list(attrs.get(f"{side}_ranks", []))
    return listed or list(range(attrs[f"{side}_parallel_num"]))


def involved_ranks(attrs) -> list:
    """The ranks of the devices that take part in a ``_boxing_across_placements`` op
    (``attrs``: name -> value): those of its source and destination placements, ascending."""
    return sorted(set(placement_ranks(attrs, "in")) | set(placement_ranks(attrs, "out")))


def _across_placements_infer(ctx):
    ctx.check(ctx.attr("in_parallel_num") >= 1 and ctx.attr("out_parallel_num") >= 1,
              f"in_parallel_num and out_parallel_num must be >= 1, received {ctx.attr('in_parallel_num')} and "
              f"{ctx.attr('out_parallel_num')}")
    for side in ("in", "out"):
        listed = list(ctx.attr(f"{side}_ranks"))
        ctx.check(not listed or len(listed) == ctx.attr(f"{side}_parallel_num"),
                  f"{side}_ranks {listed} must list {side}_parallel_num ({ctx.attr(f'{side}_parallel_num')}) ranks")
    like("in")(ctx)


_AXIS = ("int64", 0, lambda v: None if v >= 0 else f"expected an axis >= 0, received {v}")
# the grid line a collective runs over (-1: every device of the job)
_GRID = {"grid_axis": ("int64", -1), "hierarchy": ("list_int64", [])}

op("_nccl_logical_all_reduce", inputs=["in"], outputs=["out"], attrs=_GRID, infer=like("in"),
   kernel=_all_reduce_kernel, fused=_fused_all_reduce_kernel,
   no_grad=True, boxing=True, doc="P -> B: sum of the devices' tensors on every device")
op("_nccl_logical_reduce_scatter", inputs=["in"], outputs=["out"], attrs=_GRID, infer=like("in"),
   kernel=_reduce_scatter_kernel, no_grad=True, boxing=True, doc="P -> S(0)")
op("_nccl_logical_all_gather", inputs=["in"], outputs=["out"], attrs=_GRID, infer=like("in"),
   kernel=_all_gather_kernel(),
   no_grad=True, boxing=True, doc="S(0) -> B")
op("_nccl_logical_all_gather_noncontinuous", inputs=["in"], outputs=["out"], attrs={"in_split_axis": _AXIS, **_GRID},
   infer=like("in"), kernel=_all_gather_kernel("in_split_axis"), no_grad=True, boxing=True, doc="S(k) -> B")
op("_nccl_logical_s2s", inputs=["in"], outputs=["out"],
   attrs={"in_split_axis": _AXIS, "out_split_axis": _AXIS, **_GRID},
   infer=like("in"), kernel=_s2s_kernel, no_grad=True, boxing=True, doc="S(a) -> S(b)")
op("_logical_b_to_s", inputs=["in"], outputs=["out"], attrs={"out_split_axis": _AXIS, **_GRID}, infer=like("in"),
   kernel=_b_to_s_kernel, no_grad=True, boxing=True, doc="graphfront-only: B -> S(k), each device keeps its slice")
op("_logical_b_to_p", inputs=["in"], outputs=["out"], attrs=_GRID, infer=like("in"), kernel=_b_to_p_kernel,
   no_grad=True, boxing=True,
   doc="graphfront-only: B -> P, device 0 keeps the blob and the others hold zeros")

op("_boxing_across_placements", inputs=["in"], outputs=["out"],
   attrs={"in_sbp": ("string", "B", lambda v: _check_sbp(v)), "out_sbp": ("string", "B", lambda v: _check_sbp(v)),
          "in_parallel_num": ("int64", 1), "out_parallel_num": ("int64", 1),
          "in_ranks": ("list_int64", []), "out_ranks": ("list_int64", [])},
   infer=_across_placements_infer, kernel=_across_placements_kernel, no_grad=True, boxing=True,
   doc="graphfront-only: a blob laid out as in_sbp over in_parallel_num devices (ranks in_ranks; empty: the "
       "first ones), laid out as out_sbp over out_parallel_num devices (ranks out_ranks) of the same job")

BOXING_OP_TYPES = ("_nccl_logical_all_reduce", "_nccl_logical_reduce_scatter", "_nccl_logical_all_gather",
                   "_nccl_logical_all_gather_noncontinuous", "_nccl_logical_s2s", "_logical_b_to_s",
                   "_logical_b_to_p")


# --------------------------------------------------------------------------- layout hints
# parallel_cast / hierarchical_parallel_cast (oneflow/user/ops/parallel_cast_op.cpp,
# hierarchical_parallel_cast_op.cpp): identity on values; in a multi-device job the input
# is boxed to the SBP named by the attr (an empty string leaves the layout to inference).

def _cast_rule(attr):
    def rule(ctx):
        value = ctx.attr(attr)
        value = ctx.axis_entry(value) if isinstance(value, list) and value else value
        return _sbp.Only([{"in": _sbp.parse(value), "out": _sbp.parse(value)}]) if value else \
            [{"in": s, "out": s} for s in (ctx.sbp("in"), _sbp.B)]
    return rule


def _check_sbp(value):
    for v in ([value] if isinstance(value, str) else value):
        if v:
            try:
                _sbp.parse(v)
            except ValueError as e:
                return str(e)
    return None


def _parallel_cast_infer(ctx):
    x = ctx.input("in")
    for attr in ("sbp_parallel", "grad_sbp_parallel"):
        axis = _sbp.split_axis(ctx.attr(attr)) if ctx.attr(attr) else None
        ctx.check(axis is None or axis < len(x.shape), f"attr '{attr}' {ctx.attr(attr)} splits axis {axis}, "
                                                      f"which input 'in' of shape {x.shape} does not have")
    ctx.set_output("out", x.shape, x.dtype)


def _parallel_cast_grad(g):
    if not g.needs("in"):
        return
    grad_sbp = g.attr("grad_sbp_parallel")
    dy = g.dout("out")
    g.set_grad("in", g.emit("parallel_cast", {"in": dy}, {"sbp_parallel": grad_sbp}) if grad_sbp else dy)


def _hierarchical_cast_grad(g):
    if not g.needs("in"):
        return
    mode, dy = g.attr("grad_mode"), g.dout("out")
    if mode == "manual":
        dy = g.emit("hierarchical_parallel_cast", {"in": dy}, {"nd_sbp": g.attr("grad_nd_sbp"), "grad_mode": "",
                                                              "grad_nd_sbp": []})
    elif mode == "restore":
        dy = g.emit("hierarchical_parallel_cast_like", {"in": dy, "like": g.input("in")})
    g.set_grad("in", dy)


def _like_rule(ctx):
    s = ctx.sbp("like")
    return _sbp.Only([{"in": s, "like": s, "out": s}])


_identity = lambda k: (lambda x, *like: x)  # noqa: E731

op("parallel_cast", inputs=["in"], outputs=["out"],
   attrs={"sbp_parallel": ("string", "", _check_sbp), "grad_sbp_parallel": ("string", "", _check_sbp)},
   infer=_parallel_cast_infer, kernel=_identity, grad=_parallel_cast_grad, sbp=_cast_rule("sbp_parallel"),
   view=True,
   xla=_identity,
   onnx=onnx_rules.same("Identity"),
   doc="identity; lays its output out as sbp_parallel ('B', 'S(k)', 'P'; '' = inferred) and its gradient "
       "as grad_sbp_parallel", amp="clear")
op("hierarchical_parallel_cast", inputs=["in"], outputs=["out"],
   attrs={"nd_sbp": ("list_string", [], _check_sbp), "grad_mode": ("string", ""),
          "grad_nd_sbp": ("list_string", [], _check_sbp)},
   infer=like("in"), kernel=_identity, grad=_hierarchical_cast_grad, sbp=_cast_rule("nd_sbp"), view=True,
   xla=_identity,
   onnx=onnx_rules.same("Identity"),
   doc="identity; lays its output out as nd_sbp (one SBP string per axis of the placement's device grid, "
       "or one for a line of devices); grad_mode 'identity', 'manual' (grad laid out as grad_nd_sbp) or "
       "'restore' (grad laid out as the input)", amp="clear")
op("hierarchical_parallel_cast_like", inputs=["in", "like"], outputs=["out"], infer=like("in"), kernel=_identity,
   xla=_identity, onnx=lambda c: c.node("Identity", [c.input("in")], [c.output("out")]),
   no_grad=True, sbp=_like_rule, view=True, doc="identity; lays its output out as input 'like'", amp="clear")
