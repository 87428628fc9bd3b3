"""SBP layouts of multi-device jobs and their inference (OneFlow's consistent view).

A blob of a job placed on ``n`` devices is laid out in one of three ways (OneFlow's SBP
strings, ``oneflow/core/job/sbp_parallel.cpp``):

* ``"S(k)"`` split: device ``r`` holds the ``r``-th of ``n`` slices along axis ``k``, the
  first ``dim % n`` one longer (OneFlow's ``BalancedSplitter``; :func:`local_shape`);
* ``"B"`` broadcast: every device holds the whole blob;
* ``"P"`` partial sum: the logical blob is the elementwise sum of the devices' tensors.

An op's rule (the ``sbp=`` field of :func:`graphfront.ops.registry.op`, written with the
family helpers below) receives an :class:`SbpCtx` and returns candidate signatures: dicts
from an argument name (or ``"<arg>_<index>"`` for one blob of a repeated argument) to an
SBP string, covering the op's inputs and outputs. All-broadcast is always a candidate
(every op runs, replicated) unless the rule returns :class:`Only`, and except for ops
that update an input in place: those keep the
layout of the updated blob (their rule's candidates that do, else :func:`_update_rule`). :func:`infer_job_sbp` walks the job in
topological order and, per op, takes the valid candidate with the least boxing cost
(:func:`boxing_cost`, ties go to the rule's order), as OneFlow's greedy SBP inference does
(``oneflow/core/operator/operator.cpp``, ``InferSbpSignature``). A candidate is valid
when each axis it splits holds at least ``n`` elements; one splitting an axis that ``n``
does not divide also needs every axis it splits to be of that one length (:func:`_valid`).

The chosen signatures are written to ``job.job_parallel_view_conf.op_name2sbp_signature_conf``
and, as one-element ``NdSbp`` lists, to ``op_name2nd_sbp_signature_conf`` (bn names
``<arg>_<index>`` for user ops, the field name for system ops).

Device grids (OneFlow's 2-D SBP, ``oneflow/core/job/nd_sbp_util.cpp``): a placement with
a ``hierarchy`` of two or more axes of several devices, such as ``(2, 2)``, lays each
blob out as a tuple of SBP strings, one per grid axis (``("S(0)", "B")``): device ``r``
sits at ``grid_coords(r, grid)`` (row-major), and the blob is laid out by axis 0's SBP
over the groups of devices of equal first coordinate, each group's part by axis 1's SBP
over its devices, and so on. A job on such a grid (:func:`job_grid`) infers every op's
signature axis by axis with the same 1-D rules (``InferNdSbpSignature``), each axis on
the shapes the axes before it leave; the signatures are written to
``op_name2nd_sbp_signature_conf`` only (one ``SbpParallel`` per grid axis). Its other
placements of as many devices lay their blobs out on the same grid (a 1-D layout ``s``
of the line is ``(s, s)`` there); grid axes of one device are dropped. A line of devices
keeps the one-string layouts above.
"""
from __future__ import annotations

import math
import re

from graphfront.core import sbp_parallel_pb2
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError
from graphfront.ops import registry
from graphfront.ops.common import balanced_range
from graphfront.runtime.plan import schedule

B, P = "B", "P"
_SPLIT = re.compile(r"^S\((\d+)\)$")


def split(axis: int) -> str:
    return f"S({axis})"


def split_axis(sbp: str):
    """The axis of a split SBP string, None for B and P."""
    m = _SPLIT.match(sbp)
    return int(m.group(1)) if m else None


def parse(text: str) -> str:
    """Validate an SBP string ("B", "P", "S(k)"); ValueError otherwise."""
    if text in (B, P) or _SPLIT.match(text):
        return text
    raise ValueError(f'expected an SBP string "B", "P" or "S(<axis>)", received {text!r}')


def to_proto(sbp: str, msg=None):
    msg = msg if msg is not None else sbp_parallel_pb2.SbpParallel()
    axis = split_axis(sbp)
    if axis is not None:
        msg.split_parallel.axis = axis
    elif sbp == B:
        msg.broadcast_parallel.SetInParent()
    else:
        msg.partial_sum_parallel.SetInParent()
    return msg


def from_proto(msg) -> str:
    kind = msg.WhichOneof("parallel_type")
    if kind == "split_parallel":
        return split(msg.split_parallel.axis)
    return P if kind == "partial_sum_parallel" else B


def local_shape(shape, sbp, n, index=0):
    """The shape device ``index`` holds of a blob of logical ``shape`` laid out as ``sbp``
    over ``n`` devices, or on a device grid as the tuple ``sbp`` (one SBP string per axis)
    over the grid ``n`` (``index``: the device's rank on the grid). A split axis is cut as
    OneFlow's ``BalancedSplitter`` cuts it (:func:`graphfront.ops.common.balanced_range`:
    the first ``dim % n`` devices one longer)."""
    layouts, counts = (sbp, n) if isinstance(sbp, tuple) else ((sbp,), (n,))
    coords = grid_coords(index, counts)
    shape = list(shape)
    for s, d, c in zip(layouts, counts, coords):
        axis = split_axis(s)
        if axis is not None:
            shape[axis] = len(balanced_range(shape[axis], d, c))
    return tuple(shape)


def local_part(whole, sbp, n, index=0):
    """Device ``index``'s part of the tensor ``whole`` (the logical blob) laid out as
    ``sbp`` over ``n`` devices (a tuple over the grid ``n``): the slices
    :func:`local_shape` describes (a view; ``whole`` itself when nothing is split)."""
    layouts, counts = (sbp, n) if isinstance(sbp, tuple) else ((sbp,), (n,))
    for s, d, c in zip(layouts, counts, grid_coords(index, counts)):
        axis = split_axis(s)
        if axis is not None:
            part = balanced_range(whole.shape[axis], d, c)
            whole = whole.narrow(axis, part.start, len(part))
    return whole


def bn_in_op(op_conf, arg, index) -> str:
    """OneFlow's blob name in op: ``<arg>_<index>`` for user ops, the field for system ops."""
    return f"{arg}_{index}" if jb.op_kind(op_conf) == "user_conf" else arg


# ---------------------------------------------------------------------------- rule context

class SbpCtx:
    """What an SBP rule sees: the op's args with their logical shapes and attrs (a system
    op: its ``conf``), the layouts its inputs arrive in, the number of devices and the
    layouts chosen for the job's variables (``variable_sbp``: op name -> SBP). In a job laid
    out over a device grid the rule is asked once per grid axis: ``grid_axis`` is that
    axis (None on a line of devices), ``parallel_num`` its device count, the shapes those
    of the parts the axes before it leave, and the layouts those on that axis."""

    def __init__(self, op_conf, descs, blob_sbp, parallel_num, variable_sbp=None, grid_axis=None):
        self.op_conf = op_conf
        self.grid_axis = grid_axis
        self.op_name = op_conf.name
        self.conf = getattr(op_conf, jb.op_kind(op_conf))
        self.parallel_num = parallel_num
        self.variable_sbp = variable_sbp or {}
        self._ins = jb.op_inputs(op_conf)
        self._outs = jb.op_outputs(op_conf)
        self._descs = descs
        self._blob_sbp = blob_sbp
        self.attrs = jb.user_attrs(op_conf)
        self.input_args = list(dict.fromkeys(a for a, _, _ in self._ins))
        self.output_args = list(dict.fromkeys(a for a, _, _ in self._outs))

    def attr(self, name):
        return self.attrs[name]

    def axis_entry(self, layouts):
        """The entry of an N-D layout list (one per grid axis, e.g. an ``nd_sbp`` attr)
        that applies to this rule's grid axis; a one-entry list applies to every axis."""
        return layouts[self.grid_axis] if self.grid_axis is not None and len(layouts) > 1 else layouts[0]

    def has(self, arg) -> bool:
        return arg in self.input_args or arg in self.output_args

    def _lbn(self, arg, index=0):
        for a, i, lbn in self._ins + self._outs:
            if a == arg and i == index:
                return lbn
        raise KeyError(arg)

    def shape(self, arg, index=0) -> tuple:
        return tuple(self._descs[self._lbn(arg, index)].shape)

    def ndim(self, arg, index=0) -> int:
        return len(self.shape(arg, index))

    def dtype(self, arg, index=0):
        return self._descs[self._lbn(arg, index)].dtype

    def count(self, arg) -> int:
        """The number of blobs of the (repeated) input or output ``arg``."""
        return sum(a == arg for a, _, _ in self._ins + self._outs)

    def sbp(self, arg, index=0) -> str:
        """The layout input ``arg[index]`` arrives in."""
        return self._blob_sbp[self._lbn(arg, index)]

    @property
    def args(self):
        return self.input_args + self.output_args


# ---------------------------------------------------------------------------- family helpers

class Only(list):
    """Candidates a rule returns when the all-broadcast fallback must not be added (an
    explicit layout such as ``parallel_cast``'s)."""


def signature(ctx, default, **fixed):
    """A candidate laying every arg of the op out as ``default`` except those ``fixed``
    names (``signature(ctx, B, x=split(0), y=split(0))``; names the op lacks are ignored)."""
    sig = {a: default for a in ctx.args}
    sig.update({a: s for a, s in fixed.items() if ctx.has(a)})
    return sig


def partial_in(ctx, arg):
    """The candidate of an op linear in input ``arg``: ``arg`` partial with the other
    inputs broadcast gives partial outputs (a grad's ``dy``)."""
    return signature(ctx, B, **{arg: P}, **{o: P for o in ctx.output_args})


def elementwise(p_all=False, p_each=(), p_int=True):
    """Inputs broadcast numpy-style onto the (first) output: for each output axis ``k``,
    every arg whose aligned dim is the full dim splits along it, the others are broadcast.
    ``p_all``: partial sums in give a partial sum out (sums: add, add_n, identity, scaling).
    ``p_each``: args that may alone be partial with the others broadcast (products:
    ``multiply``'s x or y, ``relu_grad``'s dy). ``p_int=False``: no partial candidate when
    the output is an integer (division and casts to integers truncate each part)."""
    def rule(ctx):
        if not p_int and not ctx.dtype(ctx.output_args[0]).is_floating_point:
            return elementwise()(ctx)
        out_shape = ctx.shape(ctx.output_args[0])
        r = len(out_shape)
        cands = []
        for k in range(r):
            sig = {}
            for a in ctx.args:
                s = ctx.shape(a)
                ka = k - (r - len(s))
                sig[a] = split(ka) if ka >= 0 and s[ka] == out_shape[k] else B
            cands.append(sig)
        if p_all and all(ctx.shape(a) == out_shape for a in ctx.args):
            cands.append(signature(ctx, P))
        for a in p_each:
            if ctx.has(a) and ctx.shape(a) == out_shape:
                cands.append(partial_in(ctx, a))
        return cands
    return rule


def batch(min_ndim_arg=None):
    """Independent per sample along axis 0: every arg split on axis 0 (pooling, losses per
    sample, softmax over the last axis when ``min_ndim_arg`` has rank >= 2)."""
    def rule(ctx):
        if min_ndim_arg is not None and ctx.has(min_ndim_arg) and ctx.ndim(min_ndim_arg) < 2:
            return []
        if any(ctx.ndim(a) == 0 for a in ctx.args):
            return []
        return [signature(ctx, split(0))]
    return rule


def replicated(ctx):
    """Ops needing every blob whole on every device (LAMB's and LARS's norms of the whole
    model): all broadcast only, so an in-place update of a split blob is refused."""
    return Only([signature(ctx, B)])


def drawn_whole(axes):
    """Random ops whose kernel draws the whole logical blob from the op's stream and keeps
    this device's part (:func:`local_part`): split on each axis ``axes(ctx)`` returns, on
    a line of devices. Their values then do not depend on the device count (OneFlow's
    kernels draw each part from the device's own stream instead)."""
    along = independent(axes)
    return lambda ctx: along(ctx) if ctx.grid_axis is None else []


def independent(axes):
    """Ops computing along some axes and independently along the others (slicing, padding,
    flipping or sorting along given axes, a softmax over the last one): for each axis
    ``k`` that ``axes(ctx)`` returns, every arg split on ``k`` (a candidate is valid only
    where every arg has that axis, :func:`_valid`)."""
    def rule(ctx):
        return [signature(ctx, split(k)) for k in axes(ctx)]
    return rule


def leading(arg, n):
    """:func:`independent` along the axes of ``arg`` before its last ``n`` (softmaxes, sorts
    and losses along the last axis, triangle masks over the last two)."""
    return independent(lambda ctx: range(ctx.ndim(arg) - n))


def conv(data, weight, out, weight_grads=()):
    """Convolutions and their grads: the data and output split on the batch axis with the
    weight broadcast; ``weight_grads`` outputs (filter and bias diffs) are partial sums."""
    def rule(ctx):
        fixed = {a: split(0) for a in (data, out, "x_like", "_add_to_output", "dy", "x") if a}
        fixed.update({g: P for g in weight_grads})
        return [signature(ctx, B, **fixed)]
    return rule


def matmul(ctx):
    """``out = a @ b`` (with transposes): a split on its rows gives out split on rows; b
    split on its columns gives out split on columns (model parallel); both split on the
    contracted axis give a partial sum; a partial operand with a broadcast one stays partial."""
    ta, tb = ctx.attrs.get("transpose_a", False), ctx.attrs.get("transpose_b", False)
    ra, rb, ro = ctx.ndim("a"), ctx.ndim("b"), ctx.ndim("out")
    a_m, a_k = (ra - 1, ra - 2) if ta else (ra - 2, ra - 1)
    b_k, b_n = (rb - 1, rb - 2) if tb else (rb - 2, rb - 1)
    add = "_add_to_output"
    cands = [signature(ctx, B, a=split(a_m), out=split(ro - 2), **{add: split(ro - 2)}),
             signature(ctx, B, b=split(b_n), out=split(ro - 1), **{add: split(ro - 1)}),
             signature(ctx, P, a=split(a_k), b=split(b_k)),
             signature(ctx, P, b=B), signature(ctx, P, a=B)]
    for i in range(ra - 2):  # batch axes of a (b 2-D, or b with the same batch axes)
        if rb == 2:
            cands.append(signature(ctx, B, a=split(i), out=split(i), **{add: split(i)}))
        elif rb == ra and ctx.shape("a")[i] == ctx.shape("b")[i]:
            cands.append(signature(ctx, split(i)))
    return cands


def linear_bias(ctx):
    """``fused_matmul_bias``: out = x @ weight^T + bias."""
    return [signature(ctx, B, x=split(0), out=split(0), _add_to_output=split(0)),
            signature(ctx, B, weight=split(0), bias=split(0), out=split(1), _add_to_output=split(1))]


def bias_add(ctx):
    """``a + b`` broadcast along ``axis``: a split elsewhere keeps b broadcast; a split on
    ``axis`` needs b split too."""
    axis = ctx.attr("axis")
    cands = []
    for k in range(ctx.ndim("a")):
        other = split(0) if k == axis else B
        cands.append({a: split(k) for a in ctx.args} | {"b": other})
    return cands


def reduce(split_to_partial, partial_in=False):
    """Reductions over ``axis`` (``keepdims``; no ``axis`` attr: all axes). A split on a
    reduced axis gives a partial sum when the reduction is a sum of per-element terms
    (``split_to_partial``: sum, square_sum); other splits move to the output axis; a
    partial input stays partial when the reduction is linear (``partial_in``: sum)."""
    def rule(ctx):
        x, y = ctx.input_args[0], ctx.output_args[0]
        rank = ctx.ndim(x)
        axes = ctx.attrs.get("axis", None)
        axes = set(range(rank)) if not axes else {a % rank for a in axes}
        keep = ctx.attrs.get("keepdims", False)
        cands = []
        for k in range(rank):
            if k in axes:
                if split_to_partial:
                    cands.append({x: split(k), y: P})
            else:
                cands.append({x: split(k), y: split(k if keep else k - sum(1 for a in axes if a < k))})
        if partial_in:
            cands.append({x: P, y: P})
        return cands
    return rule


def reshape(ctx):
    """A reshape (flatten, squeeze, expand_dims ...: the input's elements in row-major
    order): a split of input axis ``i`` is a split of output axis ``j`` when the axes before
    them hold as many elements (``prod(x[:i]) == prod(y[:j])``): each device's part is then
    the same runs of elements on both sides (even splits; an uneven one needs the two axes
    of one length, :func:`_valid`). Like OneFlow's ``GetReshapeUserOpSbpSignatures``
    (``oneflow/user/ops/reshape_user_op_util.cpp``). Partial sums pass through; any other
    arg (``reshape_like``'s ``like``) takes the output's layout."""
    x, y = ctx.input_args[0], ctx.output_args[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    cands = []
    for i in range(len(xs)):
        for j in range(len(ys)):
            if math.prod(xs[:i]) == math.prod(ys[:j]) and xs[i] > 1 and ys[j] > 1:
                cands.append(signature(ctx, split(j), **{x: split(i)}))
    return cands + [signature(ctx, B, **{x: P, y: P})]


def _update_rule(ctx, mutated):
    """Ops updating inputs in place keep each updated blob's layout; an input of the same
    index and shape as an updated one takes its layout (gradients, optimizer state);
    everything else is broadcast."""
    sig = {}
    keyed = {}
    for a, i, _ in ctx._ins:
        if a in mutated:
            sig[f"{a}_{i}"] = keyed[(i, ctx.shape(a, i))] = ctx.sbp(a, i)
    for a, i, _ in ctx._ins:
        if a not in mutated:
            sig[f"{a}_{i}"] = keyed.get((i, ctx.shape(a, i)), B)
    return [sig]


def _keeping(ctx, mutated, cands):
    """The candidates of a rule of an op updating ``mutated`` inputs in place that keep
    each updated blob in the layout it arrives in (the in-place update cannot move it)."""
    return [sig for sig in cands
            if all(sig.get(f"{a}_{i}", sig.get(a, B)) == ctx.sbp(a, i) for a, i, _ in ctx._ins if a in mutated)]


# ---------------------------------------------------------------------------- inference

def boxing_cost(src, dst, nbytes) -> float:
    """Bytes a device sends to turn ``src`` into ``dst`` (slicing a broadcast blob is
    nearly free; partial sums are reduced whether to a split or to broadcast)."""
    if src == dst:
        return 0.0
    if src == B:
        return 0.01 * nbytes
    if src == P:  # a reduce-scatter costs an all-reduce under gloo: prefer the all-reduce
        return 2.0 * nbytes + (1.0 if dst != B else 0.0)
    return float(nbytes)


def _valid(ctx, sig, n):
    """Whether every split of ``sig`` fits its blob: each split axis exists and holds at
    least ``n`` elements (OneFlow's ``FilterAndCheckValidSbpSignatureListByLogicalShape``).
    An axis that ``n`` does not divide is cut unevenly (:func:`local_shape`), which keeps
    the devices' parts of the op's blobs matched only when every split axis of the
    signature has that same length; on a device grid every split must be even."""
    lengths = set()
    for a, i, lbn in ctx._ins + ctx._outs:
        axis = split_axis(sig.get(f"{a}_{i}", sig.get(a, B)))
        if axis is not None:
            shape = ctx.shape(a, i)
            if axis >= len(shape) or shape[axis] < n:
                return False
            lengths.add(shape[axis])
    uneven = any(d % n for d in lengths)
    return not uneven or (len(lengths) == 1 and ctx.grid_axis is None)


def flatten_nd_sbp(nd_sbp, hierarchy=()):
    """The layout of a blob laid out as ``nd_sbp`` (one SBP string per axis of the device
    grid ``hierarchy``; one string for a line of devices). Grid axes of one device lay
    nothing out, so on a grid with at most one longer axis the layout is that axis's SBP
    string (``["S(0)", "B"]`` over ``(2, 1)`` is ``"S(0)"``) and all-broadcast is ``"B"``;
    over two or more longer axes it is the tuple of their strings (``["S(0)", "S(1)"]``
    over ``(2, 2)`` is ``("S(0)", "S(1)")``, see :func:`job_grid`).

    Raises ValueError for a malformed string or a length other than the grid's."""
    nd_sbp = [nd_sbp] if isinstance(nd_sbp, str) else [parse(s) for s in nd_sbp]
    if len(nd_sbp) == 1:
        return parse(nd_sbp[0])
    if len(nd_sbp) != len(hierarchy):
        raise ValueError(f"nd_sbp {nd_sbp} needs one entry per axis of the placement's hierarchy "
                         f"{tuple(hierarchy) or '(none)'}")
    kept = tuple(s for s, d in zip(nd_sbp, hierarchy) if d > 1)
    if len(kept) > 1 and set(kept) != {B}:
        return kept
    return kept[0] if kept else nd_sbp[0]


def grid_of(hierarchy) -> tuple:
    """The axes of more than one device of a placement's ``hierarchy``."""
    return tuple(d for d in hierarchy if d > 1)


def job_grid(job) -> tuple:
    """The device grid a job lays its blobs out over: the hierarchy of its placements
    whose grid (:func:`grid_of`) has two or more axes, () when none has (a line of
    devices, the 1-D layouts of the module docstring). In a job on a grid every blob's
    layout is a tuple of SBP strings, one per grid axis (OneFlow's ``NdSbp``): device
    ``r`` sits at ``numpy.unravel_index(r, grid)``, and the blob is laid out by axis 0's
    SBP over the groups of its first coordinate, each part by axis 1's SBP over the
    second, and so on (``oneflow/core/job/nd_sbp_util.cpp``). Ops on another placement of
    as many devices (no hierarchy) lay their blobs out on the same grid; a 1-D layout
    ``s`` of the whole line is ``(s, s, ...)`` on it.

    Raises JobBuildError when two placements have different grids of two or more axes."""
    grids = {}
    for g in job.placement.placement_group:
        grid = grid_of(g.parallel_conf.hierarchy.dim)
        if len(grid) > 1:
            grids.setdefault(grid, g.op_set.op_name[0] if len(g.op_set.op_name) else "?")
    if len(grids) > 1:
        raise JobBuildError(f"job '{job.job_conf.job_name}' places ops on different device grids "
                            f"{ {name: grid for grid, name in grids.items()} } (op name: grid); graphfront lays a job "
                            "out over one grid")
    return next(iter(grids), ())


def grid_coords(rank, grid) -> tuple:
    """The coordinates of device ``rank`` on ``grid`` (row-major, as ``numpy.unravel_index``)."""
    coords = []
    for d in reversed(grid):
        rank, c = divmod(rank, d)
        coords.append(c)
    return tuple(reversed(coords))


def grid_rank(coords, grid) -> int:
    """The rank of the device at ``coords`` on ``grid`` (inverse of :func:`grid_coords`)."""
    rank = 0
    for c, d in zip(coords, grid):
        rank = rank * d + c
    return rank


def as_nd(layout, grid) -> tuple:
    """``layout`` (an SBP string of a line of devices, or a tuple) as a tuple over ``grid``."""
    return layout if isinstance(layout, tuple) else (layout,) * len(grid)


def _hierarchies(job) -> dict:
    """op name -> the device grid of its placement (() for a line of devices)."""
    return {name: tuple(g.parallel_conf.hierarchy.dim) for g in job.placement.placement_group
            for name in g.op_set.op_name}


def _variable_sbp(job, n, grid=()):
    """Variable layouts: their ``nd_sbp`` hint (over the placement's hierarchy; a tuple
    over ``grid`` in a job on a grid), else broadcast; optimizer state updated by the same
    op as a split variable (same shape) takes the variable's split."""
    hints = {}
    grids = _hierarchies(job)
    for op in job.net.op:
        if jb.op_kind(op) == "variable_conf" and len(op.variable_conf.nd_sbp):
            nd, hierarchy = list(op.variable_conf.nd_sbp), grids.get(op.name, ())
            try:
                hints[op.name] = flatten_nd_sbp(nd, hierarchy)
            except ValueError as e:
                raise JobBuildError(f"variable '{op.name}': {e}") from None
            if grid:
                hints[op.name] = as_nd(hints[op.name], grid)
                if len(hints[op.name]) != len(grid):
                    raise JobBuildError(f"variable '{op.name}': nd_sbp {nd} does not fit the job's device grid "
                                        f"{grid}")
            elif isinstance(hints[op.name], tuple):
                raise JobBuildError(f"variable '{op.name}': nd_sbp {nd} over the hierarchy {hierarchy} lays it out "
                                    "over several device axes; the job's other ops are not on that grid")
    producer = {f"{op.name}/out": op.name for op in job.net.op if jb.op_kind(op) == "variable_conf"}
    for op in job.net.op:
        opdef = registry.op_def(op)
        args = opdef.mutated_args(jb.user_attrs(op)) if opdef.may_mutate else ()
        ins = jb.op_args(op)[0]
        for i in range(max((len(ins[a]) for a in args if a in ins), default=0)):
            names = [producer.get(ins[a][i]) for a in args if a in ins and i < len(ins[a])]
            names = [m for m in names if m]
            split_hint = next((hints[m] for m in names if m in hints), None)
            if split_hint:
                for m in names:
                    hints.setdefault(m, split_hint)
    return hints


def _candidates(ctx, op, replicated, gather_returns):
    """The candidate signatures of ``op`` (see module docstring)."""
    kind = jb.op_kind(op)
    opdef = registry.op_def(op)
    mutated = opdef.mutated_args(ctx.attrs) if opdef.may_mutate else ()
    if op.name in replicated and kind != "variable_conf":
        return [signature(ctx, B)]
    if mutated and opdef.sbp is None:
        return _update_rule(ctx, mutated)
    if mutated:
        own = opdef.sbp(ctx)
        return _keeping(ctx, mutated, own if isinstance(own, Only) else own + [signature(ctx, B)])
    cands = opdef.sbp(ctx) if opdef.sbp is not None and not (kind == "return_conf" and gather_returns) else []
    return cands if isinstance(cands, Only) else cands + [signature(ctx, B)]


def _cheapest(ctx, cands, devices, converted, whole=frozenset()):
    """The valid candidate of least boxing cost (ties: the first), or None. An input in
    ``whole`` (made by an op on one device, run replicated, as a data reader placed on
    "0:0", or a constant: every device holds it whole) costs nothing taken broadcast or
    sliced to a split, so the rule's order decides (OneFlow favours no layout of an input
    from a placement of another device count): a job fed by such a reader stays data
    parallel, and so does the gradient computed from a folded constant."""
    best, best_cost = None, None
    for sig in cands:
        if not _valid(ctx, sig, devices):
            continue
        cost = 0.0
        for a, i, lbn in ctx._ins:
            need = sig.get(f"{a}_{i}", sig.get(a, B))
            if lbn in whole and need != P:
                continue
            if (lbn, need) not in converted:
                d = ctx._descs[lbn]
                cost += boxing_cost(ctx._blob_sbp[lbn], need, d.dtype.itemsize * _numel(d.shape))
        # a partial output must be reduced later: prefer a signature without one on a tie
        cost += 1e-3 * sum(1 for a, i, _ in ctx._outs if sig.get(f"{a}_{i}", sig.get(a, B)) == P)
        if best_cost is None or cost < best_cost:
            best, best_cost = sig, cost
    return best


def source_signature(op, descs, parallel_num) -> dict:
    """The SBP signature :func:`infer_job_sbp` chooses for ``op``, an op without inputs
    (a data reader, a source), on ``parallel_num`` devices of a line: ``{bn: sbp}`` of its
    outputs (``bn`` as in :func:`bn_in_op`); ``descs``: lbn -> its logical TensorDesc.
    Raises JobBuildError naming the op when no candidate of its rule is valid."""
    ctx = SbpCtx(op, descs, {}, parallel_num)
    best = _cheapest(ctx, _candidates(ctx, op, (), False), parallel_num, set())
    if best is None:
        raise JobBuildError(f"op '{op.name}' ({jb.op_type_name(op)}): no SBP signature of its rule fits its outputs "
                            f"on {parallel_num} devices")
    return {bn_in_op(op, a, i): best.get(f"{a}_{i}", best.get(a, B)) for a, i, _ in ctx._outs}


def infer_job_sbp(job, parallel_num, replicated=(), gather_returns=False, counts=None) -> dict:
    """Choose an SBP signature for every op of ``job`` (see module docstring).

    Returns ``{op name: {bn: sbp}}`` with ``bn`` as in :func:`bn_in_op`, and writes the
    signatures into ``job.job_parallel_view_conf``. Ops named in ``replicated`` (placed on
    one device) get the all-broadcast signature; ``gather_returns`` (a job over several
    machines, whose every client receives the whole results) broadcasts what the job
    returns; ``counts`` (op name -> devices) gives the ops placed on fewer devices than
    ``parallel_num`` their own count. In a job on a device grid (:func:`job_grid`) the
    layouts are tuples, one SBP string per grid axis, chosen axis by axis
    (:func:`_infer_nd`). Raises JobBuildError naming the op when no candidate of its rule
    is valid (an in-place update of a blob whose layout the rule cannot keep).
    """
    descs = {lbn: jb.TensorDesc.from_proto(p) for lbn, p in job.helper.lbn2logical_blob_desc.items()}
    grid = job_grid(job)
    if grid:
        return _infer_nd(job, grid, descs, replicated, gather_returns)
    variable_sbp = _variable_sbp(job, parallel_num)
    whole = {lbn for op in job.net.op if jb.op_kind(op) != "variable_conf"  # (replicated ops, constants)
             and (op.name in replicated or not jb.op_inputs(op) and registry.op_def(op).sbp is None)
             for _, _, lbn in jb.op_outputs(op)}
    blob_sbp, converted, result = {}, set(), {}
    order, _ = schedule(job)
    counts = counts or {}
    for op in order:
        devices = counts.get(op.name, parallel_num)
        ctx = SbpCtx(op, descs, blob_sbp, devices, variable_sbp)
        best = _cheapest(ctx, _candidates(ctx, op, replicated, gather_returns), devices, converted, whole)
        if best is None:
            raise JobBuildError(f"op '{op.name}' ({jb.op_type_name(op)}): no SBP signature fits its inputs' layouts "
                                f"{ {a: ctx.sbp(a, i) for a, i, _ in ctx._ins} } on {devices} devices")
        chosen = {}
        for a, i, lbn in ctx._ins:
            need = best.get(f"{a}_{i}", best.get(a, B))
            chosen[bn_in_op(op, a, i)] = need
            if need != blob_sbp[lbn]:
                converted.add((lbn, need))
        for a, i, lbn in ctx._outs:
            blob_sbp[lbn] = chosen[bn_in_op(op, a, i)] = best.get(f"{a}_{i}", best.get(a, B))
        result[op.name] = chosen
        write_signature(job, op.name, chosen)
    return result


def _infer_nd(job, grid, descs, replicated, gather_returns):
    """:func:`infer_job_sbp` on a device grid, OneFlow's way
    (``oneflow/core/operator/operator.cpp``, ``InferNdSbpSignature``): per op, for each
    grid axis in order, the op's 1-D rule is asked on the shapes of the parts the axes
    before it leave and the layouts its inputs arrive in on that axis, and the cheapest
    valid candidate (each split dividing its part's axis) is that axis's signature.
    Ops on one device run replicated (all-broadcast)."""
    hints = _variable_sbp(job, math.prod(grid), grid)
    blob_nd, result = {}, {}
    converted = [set() for _ in grid]
    order, _ = schedule(job)
    for op in order:
        args = jb.op_inputs(op) + jb.op_outputs(op)
        local = {lbn: descs[lbn] for _, _, lbn in args}
        picked = {}  # (arg, index) -> [SBP per axis]
        for axis, devices in enumerate(grid):
            variable_sbp = {name: layout[axis] for name, layout in hints.items()}
            ctx = SbpCtx(op, local, {lbn: blob_nd[lbn][axis] for _, _, lbn in jb.op_inputs(op)}, devices,
                         variable_sbp, grid_axis=axis)
            best = _cheapest(ctx, _candidates(ctx, op, replicated, gather_returns), devices, converted[axis])
            if best is None:
                raise JobBuildError(
                    f"op '{op.name}' ({jb.op_type_name(op)}): no SBP signature fits its inputs' layouts "
                    f"{ {a: blob_nd[lbn] for a, i, lbn in ctx._ins} } on axis {axis} of the device grid {grid} "
                    f"(signature of the axes before it: { {a: s for (a, _), s in picked.items()} })")
            divided = set()
            for a, i, lbn in args:
                s = best.get(f"{a}_{i}", best.get(a, B))
                picked.setdefault((a, i), []).append(s)
                if split_axis(s) is not None and lbn not in divided:
                    divided.add(lbn)
                    local[lbn] = local[lbn]._replace(shape=local_shape(local[lbn].shape, s, devices))
            for a, i, lbn in ctx._ins:
                if picked[(a, i)][axis] != blob_nd[lbn][axis]:
                    converted[axis].add((lbn, picked[(a, i)][axis]))
        chosen = {bn_in_op(op, a, i): tuple(picked[(a, i)]) for a, i, _ in args}
        for a, i, lbn in jb.op_outputs(op):
            blob_nd[lbn] = tuple(picked[(a, i)])
        result[op.name] = chosen
        write_signature(job, op.name, chosen)
    return result


def write_signature(job, op_name, sig):
    """Write ``sig`` (bn -> SBP string, or a tuple of them on a device grid) into the two
    fields OneFlow v0.6.0's ``JobParallelViewConf`` (``oneflow/core/job/job.proto``) holds:
    a 1-D layout as the op's ``op_name2sbp_signature_conf`` and, as a one-element
    ``NdSbp``, its ``op_name2nd_sbp_signature_conf``; a grid's layouts in
    ``op_name2nd_sbp_signature_conf`` only (one ``SbpParallel`` per grid axis)."""
    view = job.job_parallel_view_conf
    grid = any(isinstance(s, tuple) for s in sig.values())
    conf = None if grid else view.op_name2sbp_signature_conf[op_name]
    nd_conf = view.op_name2nd_sbp_signature_conf[op_name]
    for bn, s in sig.items():
        if conf is not None:
            to_proto(s, conf.bn_in_op2sbp_parallel[bn])
        nd = nd_conf.bn_in_op2nd_sbp[bn]
        del nd.sbp_parallel[:]
        for one in (s if isinstance(s, tuple) else (s,)):
            to_proto(one, nd.sbp_parallel.add())


def op_signatures(job) -> dict:
    """op name -> {bn: SBP string, or a tuple of them on a device grid}: every op's
    signature, read from the job (empty for a single-device job)."""
    view = job.job_parallel_view_conf
    found = {name: {bn: tuple(from_proto(p) for p in nd.sbp_parallel) for bn, nd in sig.bn_in_op2nd_sbp.items()}
             for name, sig in view.op_name2nd_sbp_signature_conf.items()
             if name not in view.op_name2sbp_signature_conf}
    found.update({name: {bn: from_proto(p) for bn, p in sig.bn_in_op2sbp_parallel.items()}
                  for name, sig in view.op_name2sbp_signature_conf.items()})
    return found


def blob_sbps(job) -> dict:
    """lbn -> SBP string (a tuple of them on a device grid) of every blob, read from the
    job's signatures (empty for a single-device job)."""
    sigs = op_signatures(job)
    found = {}
    for op in job.net.op:
        if op.name in sigs:
            bns = sigs[op.name]
            for a, i, lbn in jb.op_outputs(op):
                bn = bn_in_op(op, a, i)
                if bn in bns:
                    found[lbn] = bns[bn]
    return found


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n
