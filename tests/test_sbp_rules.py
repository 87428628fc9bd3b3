"""Every op's SBP rule against its own kernel, device by device.

For each op type with an ``sbp`` rule and a case in ``test_xla_rules.CASES`` (random
inputs and attrs for a job of that one op), on 2 and on 3 devices: every candidate
signature the rule offers that is valid for the case's shapes (``sbp._valid``, uneven
splits included) runs as the devices of a multi-device job run it. Each device's kernel
gets its part of every input (``S(k)``: its balanced slice along ``k``; ``B``: the whole
blob; ``P``: one of ``n`` random tensors summing to the blob), its local descs,
``parallel_id`` / ``parallel_num`` and the signature. The logical outputs rebuilt from
the parts (``S(k)``: concatenated; ``P``: summed; ``B``: each part whole), and every blob
the op updates in place, must equal one device's kernel on the whole inputs, within the
rounding of the partial sums (``assert_close_at_scale``).
"""
import inspect

import numpy as np
import pytest
import torch

from graphfront.core.op_conf_pb2 import OperatorConf
from graphfront.framework import job_builder as jb
from graphfront.framework.session import default_session
from graphfront.ops import registry
from graphfront.parallel import sbp as S
from graphfront.runtime.plan import make_kernel, run_op
from graphfront.testing.compare import assert_close_at_scale
from test_xla_rules import CASES, _run, case_arrays

CPU = torch.device("cpu")


def _has_rule(op_type):
    """An ``sbp`` rule, or an in-place update (which keeps each updated blob's layout)."""
    opdef = registry.lookup(op_type)
    return (opdef.sbp is not None or opdef.may_mutate) and not opdef.random


# ops whose logical result depends on the device count by definition
PER_DEVICE = {
    "TestSourceMultiGpuFixedOutNum": "OneFlow's test source: each device's part is its own [0 .. m - 1]",
    # (test_distributed checks it against PyTorch's batch norm applied to each device's part)
    "normalization_grad": "OneFlow's batch norm on a split batch: each device's part with its own statistics",
}
RULED = sorted(t for t in CASES if _has_rule(t) and t not in PER_DEVICE)

# signatures whose kernels run collectives over the job's process group, which this
# harness (the devices' kernels one after another in one process) has not: op type -> the
# input whose split on its last (class) axis marks them. test_combined_margin_loss runs
# them on two devices.
COLLECTIVE = {"sparse_softmax_cross_entropy_ms": "prediction"}


def _runs_collectives(ctx, op_type, sig):
    arg = COLLECTIVE.get(op_type)
    return arg is not None and sig.get(arg) == S.split(ctx.ndim(arg) - 1)


# Op types without an SBP rule, each with its reason: they run replicated (every device
# computes the whole blob), which is correct but not parallel.
_BOXING = "a boxing op: the boxing pass inserts it with the layouts it converts between"
_WHOLE = "builds its whole output from its attrs on each device (a split would need a kernel building its part)"
_FOLDED = "its output depends only on its input's shape: the cleanup passes fold it into a folded_constant"
_RANDOM = "draws random numbers from the whole of a per-device input or stream: only broadcast repeats one device"
_DYNAMIC = "its output's shape depends on the values (a dynamic blob), so no device can know its part"
_HOST = "works on the host (files, summaries, profiler ranges, tensor buffers), once per job"
_TIME = "a time-shape op (one call spans several runs); the time-shape pass unrolls it first"
NO_RULE = {
    **dict.fromkeys(["_boxing_across_placements", "_logical_b_to_p", "_logical_b_to_s", "_nccl_logical_all_gather",
                     "_nccl_logical_all_gather_noncontinuous", "_nccl_logical_all_reduce",
                     "_nccl_logical_reduce_scatter", "_nccl_logical_s2s"], _BOXING),
    **dict.fromkeys(["arange", "constant", "eye", "constant_like_conf", "folded_constant", "TestSource",
                     "adam_bias_correction_factor", "learning_rate_schedule_conf",
                     "TestListDataTypeAndListShapeAndListStringAttr"], _WHOLE),
    **dict.fromkeys(["zero_like", "ones_like"], _FOLDED),
    **dict.fromkeys(["TestRandomSource", "bernoulli", "coin_flip", "generate_random_batch_permutation_indices"],
                    _RANDOM),
    **dict.fromkeys(["TestDynamicSource", "argwhere", "unique_with_counts", "indexed_slices_reduce_sum",
                     "sync_dynamic_resize_conf", "broadcast_to_compatible_with_conf", "dynamic_reshape_conf",
                     "dynamic_reshape_like_conf"], _DYNAMIC),
    "shape_elem_cnt_conf": "counts the whole blob's run-time elements, which no device's part holds",
    **dict.fromkeys(["create_summary_writer", "flush_summary_writer", "summary_write_histogram",
                     "summary_write_image", "summary_write_pb", "summary_write_scalar", "foreign_watch_conf",
                     "nvtx_start", "nvtx_end", "gen_tensor_buffer", "tensor_buffer_to_list_of_tensors",
                     "tensor_buffer_to_list_of_tensors_v2"], _HOST),
    **dict.fromkeys(["acc", "pack", "unpack", "repeat"], _TIME),
    "TestReshape": "OneFlow's test op reshapes to its logical 'shape' attr, which no device's part has",
    "ssp_variable_proxy": "keeps a ring of the variable's values from earlier runs",
    "distributed_partial_fc_sample": "samples per class shard itself (its attr parallel_num), the weight broadcast",
}


def test_every_op_type_has_a_rule_or_a_reason():
    """Every user op type and system op (by conf field) graphfront defines has an SBP rule,
    updates inputs in place (keeping their layouts), or is listed in NO_RULE with its
    reason (a user's custom op, registered by another test, may have none)."""
    defs = [registry.lookup(t) for t in registry.registered_op_types()]
    defs += [registry.op_def(OperatorConf(**{kind: {}})) for kind in registry.system_kinds()]
    defs = [d for d in defs if inspect.getmodule(d.kernel or d.infer).__name__.startswith("graphfront.")]
    without = sorted(d.op_type for d in defs if d.sbp is None and not d.may_mutate)
    assert without == sorted(NO_RULE), (f"without a rule and unlisted: {sorted(set(without) - set(NO_RULE))}; "
                                        f"listed but ruled or unknown: {sorted(set(NO_RULE) - set(without))}")


def _op_and_descs(op_type, arrays, attrs, outputs, variables):
    """The op's conf in the compiled one-op job of the case, and the job's logical descs."""
    _run(op_type, "plan", arrays, attrs, outputs, variables)
    job = default_session().jobs[f"xla_case_{op_type}"].job
    ops = [op for op in job.net.op if jb.op_type_name(op) == op_type]
    assert len(ops) == 1, f"{op_type}: the compiled job holds {len(ops)} such ops"
    descs = {lbn: jb.TensorDesc.from_proto(p) for lbn, p in job.helper.lbn2logical_blob_desc.items()}
    return ops[0], descs


def _parts(full, sbp, n, rng):
    """The devices' parts of the whole tensor ``full`` laid out as ``sbp``."""
    axis = S.split_axis(sbp)
    if axis is not None:
        return [p.clone() for p in torch.tensor_split(full, n, dim=axis)]
    if sbp == S.P:
        assert full.dtype != torch.bool, "a partial-sum bool blob"
        if full.dtype.is_floating_point:
            scale = float(full.abs().max()) if full.numel() else 1.0
            others = [torch.from_numpy(rng.uniform(-scale, scale, full.shape)).to(full.dtype) for _ in range(n - 1)]
        else:
            others = [torch.from_numpy(rng.integers(-3, 4, full.shape)).to(full.dtype) for _ in range(n - 1)]
        return others + [full - sum(others)]
    return [full.clone() for _ in range(n)]


def _whole(parts, sbp):
    axis = S.split_axis(sbp)
    if axis is not None:
        return torch.cat(parts, dim=axis)
    if sbp == S.P:
        return sum(parts[1:], parts[0].clone())
    return parts


# the rounding of float parts summed in another order (the partial-sum parts, kernels on
# shorter axes): a few units in the last place of the least precise float blob of the op
RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 4e-2}


def _expect_equal(got, want, what, rtol):
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    if not want.dtype.is_floating_point:
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=what)
        return
    got, want = got.double().numpy(), want.double().numpy()
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaNs")
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)], err_msg=what)
    assert_close_at_scale(got[finite], want[finite], rtol=rtol, err_msg=what)


def _check_signature(op, descs, sig, n, values, rng, label):
    ins, outs = jb.op_inputs(op), jb.op_outputs(op)
    rtol = max(RTOL.get(descs[lbn].dtype.torch, 0.0) for _, _, lbn in ins + outs)
    layout = {(a, i): sig.get(f"{a}_{i}", sig.get(a, S.B)) for a, i, _ in ins + outs}
    signature = {S.bn_in_op(op, a, i): s for (a, i), s in layout.items()}
    opdef = registry.op_def(op)
    updated = [lbn for a, i, lbn in ins if opdef.may_mutate and a in opdef.mutated_args(jb.user_attrs(op))]
    whole_values = {lbn: v.clone() for lbn, v in values.items()}
    want = run_op(op, descs, CPU, whole_values)  # (updates whole_values[updated] in place)
    parts = {lbn: _parts(values[lbn], layout[(a, i)], n, rng) for a, i, lbn in ins}
    got_parts = {lbn: [] for _, _, lbn in outs}
    for r in range(n):
        local = {lbn: d._replace(shape=S.local_shape(d.shape, layout[(a, i)], n, r))
                 for a, i, lbn in ins + outs for d in [descs[lbn]]}
        fn = make_kernel(op, local, CPU, signature=signature, parallel_ctx=(r, n), logical_descs=descs)
        res = run_op(op, local, CPU, {lbn: p[r] for lbn, p in parts.items()}, fn)
        for lbn in got_parts:
            got_parts[lbn].append(res[lbn])
    for a, i, lbn in outs:
        whole = _whole(got_parts[lbn], layout[(a, i)])
        for w in (whole if isinstance(whole, list) else [whole]):
            _expect_equal(w, want[lbn], f"{label}: output {a}_{i} laid out {layout[(a, i)]}", rtol)
    for a, i, lbn in ins:
        if lbn in updated:
            whole = _whole(parts[lbn], layout[(a, i)])
            for w in (whole if isinstance(whole, list) else [whole]):
                _expect_equal(w, whole_values[lbn], f"{label}: updated input {a}_{i} laid out {layout[(a, i)]}", rtol)


def _arrivals(op, descs):
    """The layouts the op's inputs may arrive in: all broadcast, and for an op updating
    inputs in place also a split of the updated blobs on each axis (the variable, and
    the optimizer state of its shape updated with it, as the job lays them out)."""
    opdef = registry.op_def(op)
    ins = jb.op_inputs(op)
    yield {lbn: S.B for _, _, lbn in ins}
    mutated = opdef.mutated_args(jb.user_attrs(op)) if opdef.may_mutate else ()
    for a, i, lbn in ins:
        if a in mutated:
            shape = descs[lbn].shape
            together = [l for b, j, l in ins if b in mutated and j == i and descs[l].shape == shape]
            for k in range(len(shape)):
                yield {**{l: S.B for _, _, l in ins}, **{l: S.split(k) for l in together}}


def _check_all(op_type, arrays, attrs, outputs, variables):
    """Check every valid candidate on 2 and 3 devices; returns the (n, signature) tried."""
    op, descs = _op_and_descs(op_type, arrays, attrs, outputs, variables)
    values = {}
    for a, i, lbn in jb.op_inputs(op):
        v = arrays[a][i] if isinstance(arrays[a], list) else arrays[a]
        values[lbn] = torch.from_numpy(np.ascontiguousarray(v))
    rng = np.random.default_rng(7)
    tried = set()
    for n in (2, 3):
        for arrival in _arrivals(op, descs):
            ctx = S.SbpCtx(op, descs, arrival, n)
            for sig in S._candidates(ctx, op, (), False):
                key = (n, tuple(sorted(sig.items())))
                if key in tried or not S._valid(ctx, sig, n) or _runs_collectives(ctx, op_type, sig):
                    continue
                tried.add(key)
                _check_signature(op, descs, sig, n, values, rng, f"{op_type} on {n} devices, signature {sig}")
    return tried


@pytest.mark.parametrize("op_type", RULED)
def test_every_signature_of_the_rule_computes_the_ops_result(op_type):
    tried = _check_all(op_type, *case_arrays(op_type))
    assert tried, f"{op_type}: no candidate signature is valid for the case's shapes on 2 or 3 devices"


@pytest.mark.parametrize("x_shape, y_shape, splits", [
    ((6, 4), (24,), {("S(0)", "S(0)")}),                      # flatten: rows stay whole runs
    ((24,), (6, 4), {("S(0)", "S(0)")}),
    ((6, 4, 2), (6, 2, 2, 2), {("S(0)", "S(0)"), ("S(1)", "S(1)"), ("S(2)", "S(3)")}),
    ((6, 1, 4), (6, 4), {("S(0)", "S(0)"), ("S(2)", "S(1)")}),  # squeeze
    ((3, 4), (3, 1, 4), {("S(0)", "S(0)"), ("S(1)", "S(2)")}),  # expand_dims
    ((4, 6), (6, 4), {("S(0)", "S(0)")}),                      # (even halves of both)
    ((2, 3), (3, 2), set()),                                   # 3 rows do not halve; 2 rows not in 3
])
def test_reshape_keeps_splits_of_axes_with_equal_leading_volume(x_shape, y_shape, splits):
    x = np.arange(np.prod(x_shape), dtype=np.float64).reshape(x_shape)
    tried = _check_all("reshape", {"in": x}, {"shape": y_shape}, ["out"], set())
    split = {(dict(sig)["in"], dict(sig)["out"]) for _, sig in tried} - {("B", "B"), ("P", "P")}
    assert split == splits
