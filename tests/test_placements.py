"""Jobs whose ops sit on placements of different devices of one machine.

The job runs on one worker per device of the union of its placements (gloo on CPU); a
blob that moves between placements ("0:0" -> "0:0-1", "0:0-1" -> "0:0-3", "0:0-3" ->
"0:0-1", "0:0-1" -> "0:2-3") is laid out by a ``System-Boxing-Placement`` op (a
``System-Boxing-Copy`` op, part by part, between placements of as many devices in one
layout). Every
(source layout, destination layout) pair must give the logical values numpy computes on
one device; pipeline stages on disjoint devices train as on one device.
"""
import copy

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError, OpRunError
from graphfront.framework.session import default_session, trace
from graphfront.parallel import sbp as _sbp
from graphfront.passes import complete
from graphfront.passes.boxing import boxing, device_counts, job_devices, op_ranks, parallel_num
from graphfront.runtime.distributed import local_job

slow = pytest.mark.slow  # spawns four worker processes

SRC = ("S(0)", "S(1)", "B", "P")
DST = ("S(0)", "S(1)", "B")
MOVES = ((1, 2), (2, 4), (4, 2))


def _distribute(sbp):
    return flow.distribute.broadcast() if sbp == "B" else flow.distribute.split(int(sbp[2]))


def _devices(k):
    return "0:0" if k == 1 else f"0:0-{k - 1}"


def _move(x, src, dst, src_k, dst_k):
    """``x`` laid out as ``src`` on ``src_k`` devices (P: the partial sums of a reduce over
    split axis 0), then as ``dst`` on ``dst_k`` devices; returns (blob, numpy reference)."""
    with flow.scope.placement("cpu", _devices(src_k)):
        if src == "P":
            y = flow.math.reduce_sum(flow.identity(x.with_distribute(flow.distribute.split(0))), axis=0)
        else:
            y = flow.identity(x.with_distribute(_distribute(src)))
    with flow.scope.placement("cpu", _devices(dst_k)):
        y = flow.identity(y.with_distribute(_distribute(dst)))
    return y


def _on_devices(src, dst, shape=(8, 6)):
    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder(shape)):
        with flow.scope.placement("cpu", src):
            y = flow.identity(x.with_distribute(flow.distribute.split(1)))
        with flow.scope.placement("cpu", dst):
            return flow.identity(y.with_distribute(flow.distribute.broadcast()))
    return job_fn


def test_boxing_pass_moves_a_blob_between_placements():
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(4)
    builder, _ = trace(default_session(), _on_devices("0:0-1", "0:0-3"))
    job = boxing(complete(copy.deepcopy(builder.job)))
    counts = device_counts(job)
    moves = [op for op in job.net.op if jb.op_type_name(op) == "_boxing_across_placements"]
    # the placeholder (4 devices, S(0)) -> identity on 2 devices (S(1)) -> identity on 4 devices (B)
    attrs = [{k: jb.user_attrs(op)[k] for k in ("in_sbp", "in_parallel_num", "out_sbp", "out_parallel_num")}
             for op in moves]
    assert attrs == [{"in_sbp": "S(0)", "in_parallel_num": 4, "out_sbp": "S(1)", "out_parallel_num": 2},
                     {"in_sbp": "S(1)", "in_parallel_num": 2, "out_sbp": "B", "out_parallel_num": 4}]
    assert [counts[op.name] for op in moves] == [2, 4]  # each sits on its consumer's placement
    assert all(op.name.startswith("System-Boxing-Placement-") for op in moves)
    sig = job.job_parallel_view_conf.op_name2sbp_signature_conf[moves[1].name].bn_in_op2sbp_parallel
    assert (_sbp.from_proto(sig["in_0"]), _sbp.from_proto(sig["out_0"])) == ("S(1)", "B")
    # device 3 runs neither op of the 2-device placement; it joins both boxing ops, sending
    # zeros (no input) to the second one, in the job's order
    on_two = {name for name, c in counts.items() if c == 2}
    mine = local_job(job, 4, 3, own_ops_only=True)
    assert {op.name for op in mine.net.op}.isdisjoint(on_two - {moves[0].name})
    kept = {op.name: op for op in mine.net.op}
    assert jb.op_inputs(kept[moves[0].name]) and not jb.op_inputs(kept[moves[1].name])
    assert list(kept[moves[1].name].ctrl_in_op_name) == [moves[0].name]
    assert len(local_job(job, 4, 1, own_ops_only=True).net.op) == len(job.net.op)


def test_placements_on_any_devices_of_one_machine_get_their_workers_ranks():
    """"0:2-3" in a job on "0:0-1" and "0:2-3" sits on ranks 2 and 3, a non-contiguous
    list ["0:1", "0:3"] on ranks 1 and 3 (the placeholders sit on "0:0-3"); a worker
    keeps only the ops of its placements and the boxing ops from or to them."""
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(4)
    for src, dst, n, src_ranks, dst_ranks in (("0:0-1", "0:2-3", 4, [0, 1], [2, 3]),
                                              (["0:1", "0:3"], "0:0-1", 4, [1, 3], [0, 1])):
        builder, _ = trace(default_session(), _on_devices(src, dst))
        job = complete(copy.deepcopy(builder.job))
        assert parallel_num(job) == n and job_devices(job, n) == [0, 1, 2, 3]
        job = boxing(job, n)
        moves = [jb.user_attrs(op) for op in job.net.op if jb.op_type_name(op) == "_boxing_across_placements"]
        assert (src_ranks, dst_ranks) in [(list(m["in_ranks"]), list(m["out_ranks"])) for m in moves]
        ranks = op_ranks(job, n)
        outside = next(r for r in range(n) if r not in src_ranks)
        mine = local_job(job, n, outside, own_ops_only=True)
        others = {name for name, r in ranks.items() if outside not in r and not name.startswith("System-Boxing")}
        assert others and {op.name for op in mine.net.op}.isdisjoint(others)
        # a boxing op runs on the devices of its two placements only (over their own group)
        for r in range(n):
            kept = {op.name for op in local_job(job, n, r, own_ops_only=True).net.op}
            for op in job.net.op:
                if jb.op_type_name(op) == "_boxing_across_placements":
                    attrs = jb.user_attrs(op)
                    assert (op.name in kept) == (r in list(attrs["in_ranks"]) + list(attrs["out_ranks"]))


def test_placements_of_several_counts_on_a_device_grid_must_start_at_device_0():
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(4)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((8, 6))):
        with flow.scope.placement("cpu", "0:2-3"):
            y = flow.identity(x)
        with flow.scope.placement("cpu", "0:0-3", (2, 2)):
            return flow.identity(y)
    with pytest.raises(JobBuildError, match=r"op '.*' is placed on \['0:2-3'\], expected devices '0:0-k'"):
        job_fn(np.zeros((8, 6), np.float32))


@slow
def test_every_layout_pair_across_device_counts():
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(4)
    cases = [(s, d, a, b) for s in SRC for d in DST for a, b in MOVES if not (s == "P" and a == 1)]

    @flow.global_function()
    def move_job(x: tp.Numpy.Placeholder((8, 8, 4))):
        return tuple(_move(x, *case) for case in cases)

    x = np.random.default_rng(0).standard_normal((8, 8, 4)).astype(np.float32)
    outs = move_job(x).get()
    for case, out in zip(cases, outs):
        want = x.sum(0) if case[0] == "P" else x
        # a partial sum adds src_k parts of 8 / src_k rows each: float32 rounding of 8 terms
        tol = 8 * np.finfo(np.float32).eps * np.abs(x).sum(0).max()
        np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=tol if case[0] == "P" else 0, err_msg=str(case))
    names = [op.name for op in move_job.graph.proto.net.op]
    assert any(n.startswith("System-Boxing-Placement-") for n in names)


def _two_placement_train_job(ndev):
    """fc1 (weight split along its output axis) on the first half of the devices, fc2 and
    the loss on all of them; Adam on every variable."""
    small, large = ("0:0", "0:0") if ndev == 1 else (_devices(ndev // 2), _devices(ndev))

    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((8, 12)), y: tp.Numpy.Placeholder((8,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", small):
            h = flow.layers.dense(x, 8, activation=flow.nn.relu, kernel_initializer=flow.random_normal_initializer(),
                                  model_distribute=flow.distribute.split(0), name="fc1")
        with flow.scope.placement("cpu", large):
            logits = flow.layers.dense(h, 5, kernel_initializer=flow.random_normal_initializer(), name="fc2")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-2])).minimize(loss)
        return loss
    return train_job


def _train(ndev, batches):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)
    job = _two_placement_train_job(ndev)
    losses = np.array([job(x, y) for x, y in batches])
    return losses, flow.get_all_variables()["fc1-weight"].numpy(), job


@slow
def test_training_across_placements_matches_one_device():
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 5, 8).astype(np.int32))
               for _ in range(8)]
    one, w_one, _ = _train(1, batches)
    four, w_four, job = _train(4, batches)
    np.testing.assert_allclose(four, one, rtol=1e-5)
    np.testing.assert_allclose(w_four, w_one, rtol=1e-5, atol=1e-6)  # fc1 lived on 2 of the 4 devices
    assert "_boxing_across_placements" in str(job.graph)


def _stages_train_job(stages, split_axis, accumulation=1, dropout=0.0, computed_labels=False):
    """A two-stage train job as OneFlow-Benchmark places pipeline stages: the placeholders
    and fc1 (data parallel: weight broadcast, rows split) on ``stages[0]``, fc2 (weight
    split along ``split_axis``, None: broadcast, data parallel too) and the loss on
    ``stages[1]``; SGD with momentum; ``accumulation`` micro-batches per call, ``dropout``
    after fc1; with ``computed_labels`` the labels pass through an op (checked in the step)."""
    cfg = flow.FunctionConfig()
    cfg.default_placement_scope(flow.scope.placement("cpu", stages[0]))
    cfg.train.num_gradient_accumulation_steps(accumulation)

    @flow.global_function(type="train", function_config=cfg)
    def train_job(x: tp.Numpy.Placeholder((8, 12)), y: tp.Numpy.Placeholder((8,), dtype=flow.int32)) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.5)
        with flow.scope.placement("cpu", stages[0]):
            h = flow.layers.dense(x.with_distribute(flow.distribute.split(0)), 8, activation=flow.math.tanh,
                                  kernel_initializer=init, name="fc1")
            if dropout:
                h = flow.nn.dropout(h, rate=dropout)
        with flow.scope.placement("cpu", stages[1]):
            if computed_labels:
                y = flow.math.add(y, flow.constant(0, dtype=flow.int32, shape=y.shape))
            logits = flow.layers.dense(h, 6, kernel_initializer=init, name="fc2",
                                       model_distribute=flow.distribute.broadcast() if split_axis is None
                                       else flow.distribute.split(split_axis))
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss
    return train_job


def _stage_session(ndev, stages, split_axis=0, accumulation=1, dropout=0.0, computed_labels=False):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)
    return _stages_train_job(stages if ndev > 1 else ("0:0", "0:0"), split_axis, accumulation, dropout,
                             computed_labels)


def _stage_batches(steps):
    rng = np.random.default_rng(2)
    return [(rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 6, 8).astype(np.int32))
            for _ in range(steps)]


def _all_variables():
    return {k: v.numpy() for k, v in flow.get_all_variables().items()}


# float32 matmuls and reductions summed in another order on several devices than on one:
# a few ulps per step, grown by the momentum over the steps
RTOL, ATOL = 1e-5, 1e-6
STEPS = 3


@slow
@pytest.mark.parametrize("split_axis", [0, 1, None])
def test_pipeline_stages_on_disjoint_devices_train_as_on_one_device(tmp_path, split_axis):
    """fc1 on "0:0-1", fc2 (weight S(0), S(1) or B) on "0:2-3": losses and variables after a
    few steps equal one device's, and the checkpoints of both load on the other. With both
    stages data parallel the activations, the labels and the activations' gradients cross
    in the same layout, part by part (``System-Boxing-Copy``: device 0 to 2, 1 to 3)."""
    stages = ("0:0-1", "0:2-3")
    batches = _stage_batches(STEPS + 1)
    one = _stage_session(1, stages)
    want = [one(x, y) for x, y in batches[:STEPS]]
    want_vars = _all_variables()
    flow.checkpoint.save(tmp_path / "one")
    one_next = one(*batches[STEPS])

    four = _stage_session(4, stages, split_axis)
    got = [four(x, y) for x, y in batches[:STEPS]]
    job = four.graph.proto
    assert parallel_num(job) == 4
    ranks = op_ranks(job, 4)
    assert ranks["fc1-weight"] == (0, 1) and ranks["fc2-weight"] == (2, 3)
    assert _sbp.op_signatures(job)["fc2-weight"]["out"] == ("B" if split_axis is None else f"S({split_axis})")
    moves = {op.name: jb.user_attrs(op) for op in job.net.op if jb.op_type_name(op) == "_boxing_across_placements"}
    sides = {(tuple(m["in_ranks"]), tuple(m["out_ranks"])) for m in moves.values()}
    assert ((0, 1), (2, 3)) in sides and ((2, 3), (0, 1)) in sides  # activations and their gradients
    assert ((2, 3), (2, 3)) in sides  # a layout change within stage 1, over the group of devices 2 and 3
    copies = {(m["in_sbp"], tuple(m["in_ranks"]), tuple(m["out_ranks"]))
              for name, m in moves.items() if name.startswith("System-Boxing-Copy-")}
    if split_axis is None:
        assert {("S(0)", (0, 1), (2, 3)), ("S(0)", (2, 3), (0, 1))} <= copies
    assert all(m["in_sbp"] == m["out_sbp"] and len(m["in_ranks"]) == len(m["out_ranks"])
               for name, m in moves.items() if name.startswith("System-Boxing-Copy-"))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    got_vars = _all_variables()
    assert got_vars.keys() == want_vars.keys()
    for k in want_vars:
        np.testing.assert_allclose(got_vars[k], want_vars[k], rtol=RTOL, atol=ATOL, err_msg=k)
    flow.checkpoint.save(tmp_path / "four")

    one = _stage_session(1, stages)
    flow.load_variables(flow.checkpoint.get(tmp_path / "four"))
    for k, v in _all_variables().items():
        np.testing.assert_array_equal(v, got_vars[k], err_msg=k)
    four = _stage_session(4, stages, split_axis)
    flow.load_variables(flow.checkpoint.get(tmp_path / "one"))
    np.testing.assert_allclose(four(*batches[STEPS]), one_next, rtol=RTOL, atol=ATOL)


@slow
@pytest.mark.parametrize("stages, ndev, pipelined", [(("0:0-1", "0:2-3"), 4, True), (("0:0-1", "0:1-2"), 3, False)])
def test_pipeline_stages_run_micro_batches_pipelined_and_train_as_on_one_device(stages, ndev, pipelined):
    """With 4 micro-batches per call (gradient accumulation) a job of pipeline stages on
    disjoint devices runs them as GPipe does: each worker runs the forward ops of every
    micro-batch, then the rest of each (stage 1 starts micro-batch 2 while stage 2 works
    on micro-batch 1), in one request per call; stages sharing a device run them one
    after the other. Losses (dropout masks included) and variables (fc2's weight split
    over its stage, its gradient accumulated there) equal one device's."""
    batches = _stage_batches(STEPS)
    one = _stage_session(1, stages, accumulation=4, dropout=0.25)
    want = [one(x, y) for x, y in batches]
    want_vars = _all_variables()
    several = _stage_session(ndev, stages, accumulation=4, dropout=0.25)
    got = [several(x, y) for x, y in batches]
    micro = several.compiled_job.plan.micro
    assert micro.micro_batches == (4 if pipelined else 1)
    assert ("computed already" in micro.source) == pipelined  # (forward values handed over by the forward run)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    for k, v in _all_variables().items():
        np.testing.assert_allclose(v, want_vars[k], rtol=RTOL, atol=ATOL, err_msg=k)


@slow
def test_a_micro_batch_failing_on_one_device_of_a_pipeline_stage_raises_and_the_pipeline_goes_on():
    """A label computed out of range in the third of 4 pipelined micro-batches, on one
    device of the second stage: that worker runs only the collectives of its later plans
    (the first stage's workers complete the call), the call raises the op's error naming
    the device, and the gradients the call had accumulated are dropped: the run goes on as
    a run without that call."""
    stages = ("0:0-1", "0:2-3")
    batches = _stage_batches(3)
    reference = _stage_session(4, stages, accumulation=4, computed_labels=True)
    want = [reference(*batches[0]), reference(*batches[2])]
    want_vars = _all_variables()
    several = _stage_session(4, stages, accumulation=4, computed_labels=True)
    assert several.compiled_job.plan.micro.micro_batches == 4
    got = [several(*batches[0])]
    x, y = batches[1]
    bad = y.copy()
    bad[5] = 8  # (micro-batch 3 is rows 4-5: row 5 on the stage's second device)
    with pytest.raises(OpRunError, match=r"received 8 at index \(0,\) \(in the part of device cpu:3"):
        several(x, bad)
    got.append(several(*batches[2]))
    np.testing.assert_array_equal(got, want)
    for k, v in _all_variables().items():
        np.testing.assert_array_equal(v, want_vars[k], err_msg=k)


@slow
@pytest.mark.parametrize("stages, ndev, workers", [(("0:1", "0:0"), 2, 1), ((["0:1", "0:3"], "0:0-1"), 4, 3),
                                                   (("0:1", "0:2-3"), 4, 2)])
def test_stages_on_single_and_non_contiguous_devices_train_as_on_one_device(stages, ndev, workers):
    """A stage on "0:1" alone and one on "0:0" alone (run in one process, as every job
    whose placements each hold one device); fc1 on the non-contiguous devices 1 and 3 with
    fc2 on "0:0-1" (a job on devices 0, 1 and 3); fc1 on "0:1" alone (run replicated on
    every worker of devices 2 and 3) with fc2 on "0:2-3"."""
    batches = _stage_batches(STEPS)
    one = _stage_session(1, stages)
    want = [one(x, y) for x, y in batches]
    want_vars = _all_variables()
    job_fn = _stage_session(ndev, stages)
    got = [job_fn(x, y) for x, y in batches]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    for k, v in _all_variables().items():
        np.testing.assert_allclose(v, want_vars[k], rtol=RTOL, atol=ATOL, err_msg=k)
    job = job_fn.graph.proto
    assert parallel_num(job) == workers
    assert job_devices(job, workers) == {1: [0], 2: [2, 3], 3: [0, 1, 3]}[workers]


@slow
def test_part_by_part_copy_between_overlapping_placements_keeps_the_values():
    """"0:0-1" -> "0:1-2" in layout S(0), 7 rows (4 + 3): device 0 sends its part to device
    1 while device 1 sends its own to device 2 (``System-Boxing-Copy``); the result is
    numpy's."""
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(3)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((7, 4))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0-1"):
            y = flow.math.relu(x.with_distribute(flow.distribute.split(0)))
        with flow.scope.placement("cpu", "0:1-2"):
            return flow.identity(y.with_distribute(flow.distribute.split(0))) * 2.0
    x = np.arange(-14, 14, dtype=np.float32).reshape(7, 4)
    np.testing.assert_array_equal(job_fn(x), np.maximum(x, 0) * 2.0)
    copies = [jb.user_attrs(op) for op in job_fn.graph.proto.net.op if op.name.startswith("System-Boxing-Copy-")]
    assert [(list(c["in_ranks"]), list(c["out_ranks"])) for c in copies] == [([0, 1], [1, 2])]
