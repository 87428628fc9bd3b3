"""OneFlow single-client functions that run over several job runs or fail on bad input:
ssp_variable_proxy's ring of snapshots (OneFlow's own test expectations), the
categorical ordinal encoder's persistent table, dynamic blobs fed as ListNumpy,
framework test ops inside flow.unittest.TestCase, blob.parallel_conf.device_tag(),
ops.transpose_util, the build-time errors of the new wrappers, flow.sbp, the Resource and
JobSet protos (current_resource, get_job_set), the typing check and eager_assign_121."""
import typing

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.ops import transpose_util


def _ssp_job(assign_from_value):
    @flow.global_function()
    def foo() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", shape=(10,), dtype=flow.float, initializer=flow.constant_initializer(0))
            ones = flow.constant_like(w, value=1.0, dtype=flow.float)
            ref, value = flow.experimental.ssp_variable_proxy(w, buffer_size=4)
            flow.assign(ref, (value if assign_from_value else ref) + ones)
            return value
    return foo


def test_ssp_variable_proxy_value_lags_buffer_size_runs_w_mutable_is_w_constant_plus_1():
    foo = _ssp_job(assign_from_value=True)
    got = [float(foo()[0]) for _ in range(12)]
    assert got == [0.0] * 4 + [1.0] * 4 + [2.0] * 4


def test_ssp_variable_proxy_w_mutable_is_w_mutable_plus_1():
    foo = _ssp_job(assign_from_value=False)
    got = [float(foo()[0]) for _ in range(8)]
    assert got == [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]


def test_assign_rejects_a_blob_that_is_not_a_variable_or_its_alias():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        flow.assign(flow.math.relu(x), x)
        return x

    with pytest.raises(TypeError, match="must be a variable blob"):
        job(np.zeros(3, np.float32))


def test_categorical_ordinal_encoder_table_persists_across_runs_and_fills_up():
    @flow.global_function()
    def encode(x: tp.Numpy.Placeholder((4,), dtype=flow.int64)) -> tp.Numpy:
        return flow.layers.categorical_ordinal_encoder(x, capacity=3)

    np.testing.assert_array_equal(encode(np.array([9, 4, 9, 0])), [1, 2, 1, 0])
    np.testing.assert_array_equal(encode(np.array([4, 12, 9, 12])), [2, 3, 1, 3])
    variables = flow.get_all_variables()
    assert int(variables["CategoricalOrdinalEncoder-Size"].numpy()[0]) == 3
    with pytest.raises(Exception, match="hash table of capacity 3 is full"):
        encode(np.array([5, 5, 5, 5]))


def test_argwhere_and_unique_on_dynamic_list_numpy_inputs():
    @flow.global_function()
    def job(x: tp.ListNumpy.Placeholder((6,), dtype=flow.int32)) -> typing.Tuple[tp.ListNumpy, tp.ListNumpy]:
        y, idx, count, n = flow.experimental.unique_with_counts(x)
        return flow.argwhere(x), flow.sync_dynamic_resize(y, n)

    x = np.array([3, 0, 3, 7], np.int32)
    where, uniq = job([x])
    np.testing.assert_array_equal(where[0], np.argwhere(x))
    np.testing.assert_array_equal(uniq[0], [0, 3, 7])


def test_gather_with_dynamic_indices_trains_a_split_vocabulary_embedding():
    """Wide & Deep's hybrid embedding: the unique ids below / above a split point picked with
    argwhere + gather_nd (dynamic blobs) gather rows of two tables, scattered back and
    gathered per position; forward and the SGD update of both tables against numpy."""
    V, H, D = 10, 6, 3
    rng = np.random.default_rng(0)
    init = rng.standard_normal((V, D)).astype(np.float32)
    coeff = rng.standard_normal((4 * 3, D)).astype(np.float32)

    @flow.global_function(type="train")
    def job(ids: tp.Numpy.Placeholder((4, 3), dtype=flow.int32)) -> tp.Numpy:
        uniq, idx, _, _ = flow.experimental.unique_with_counts(flow.flatten(ids))
        split = flow.constant(H, dtype=flow.int32)
        lo_at = flow.argwhere(flow.math.less(uniq, split))
        hi_at = flow.argwhere(flow.math.greater_equal(uniq, split))
        lo = flow.get_variable("lo", shape=(H, D), initializer=flow.constant_initializer(0))
        hi = flow.get_variable("hi", shape=(V - H, D), initializer=flow.constant_initializer(0))
        lo_rows = flow.gather(lo, flow.gather_nd(uniq, lo_at))
        hi_rows = flow.gather(hi, flow.gather_nd(uniq, hi_at) - split)
        rows = flow.reshape(flow.zeros_like(uniq, dtype=flow.float), (-1, 1)) * \
            flow.constant(0.0, dtype=flow.float, shape=(1, D))
        rows = flow.tensor_scatter_nd_update(rows, lo_at, lo_rows)
        rows = flow.tensor_scatter_nd_update(rows, hi_at, hi_rows)
        emb = flow.cast_to_static_shape(flow.gather(rows, idx))
        c = flow.get_variable("coeff", shape=(4 * 3, D), initializer=flow.constant_initializer(0), trainable=False)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1.0]), momentum=0).minimize(
            flow.math.reduce_sum(emb * c))
        return emb

    flow.load_variables({"lo": init[:H], "hi": init[H:], "coeff": coeff})
    ids = np.array([[0, 7, 3], [7, 9, 0], [5, 6, 2], [1, 8, 8]], np.int32)
    np.testing.assert_allclose(job(ids), init[ids.reshape(-1)], rtol=1e-6)
    grad = np.zeros_like(init)
    np.add.at(grad, ids.reshape(-1), coeff)
    variables = flow.get_all_variables()
    np.testing.assert_allclose(variables["lo"].numpy(), (init - grad)[:H], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variables["hi"].numpy(), (init - grad)[H:], rtol=1e-5, atol=1e-6)


def test_sync_dynamic_resize_rejects_a_size_larger_than_the_blob():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((3, 2)), n: tp.Numpy.Placeholder((1,), dtype=flow.int32)) -> tp.ListNumpy:
        return flow.sync_dynamic_resize(x, n)

    np.testing.assert_array_equal(job(np.ones((3, 2), np.float32), np.array([2], np.int32))[0], np.ones((2, 2)))
    with pytest.raises(Exception, match="size 5 is out of range"):
        job(np.ones((3, 2), np.float32), np.array([5], np.int32))


class CcreluTest(flow.unittest.TestCase):
    """OneFlow's framework-test style: ccrelu forward and its ccrelu_grad through watch_diff."""

    def test_ccrelu_forward_and_backward(self):
        grads = {}

        @flow.global_function(type="train")
        def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
            w = flow.get_variable("w", shape=(2, 3), initializer=flow.zeros_initializer())
            y = flow.user_op_builder("cc").Op("ccrelu").Input("in", [x + w]).Output("out").Build() \
                .InferAndTryRun().RemoteBlobList()[0]
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(y)
            flow.watch_diff(w, lambda g: grads.setdefault("w", np.array(g)))
            return y

        x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
        np.testing.assert_array_equal(job(x), np.maximum(x, 0))
        np.testing.assert_array_equal(grads["w"], (x > 0).astype(np.float32))


def test_blob_parallel_conf_device_tag_is_a_method_and_a_value():
    seen = {}

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            y = flow.math.relu(x)
        seen["tag"], seen["names"] = y.parallel_conf.device_tag(), y.parallel_conf.device_name()
        seen["eq"] = y.parallel_conf.device_tag == "cpu"
        return y

    job(np.zeros(2, np.float32))
    assert seen == {"tag": "cpu", "names": ("0:0",), "eq": True}


def test_transpose_util_perms():
    perm = transpose_util.get_perm_when_transpose_axis_to_last_dim(4, 1)
    assert perm == (0, 2, 3, 1)
    assert transpose_util.get_perm_when_transpose_axis_to_last_dim(3, -1) == (0, 1, 2)
    x = np.arange(24).reshape(2, 3, 4)
    p = (2, 0, 1)
    np.testing.assert_array_equal(x.transpose(p).transpose(transpose_util.get_inversed_perm(p)), x)
    assert transpose_util.is_perm([1, 0]) and not transpose_util.is_perm([1, 1])
    with pytest.raises(ValueError, match="out of range"):
        transpose_util.get_perm_when_transpose_axis_to_last_dim(2, 2)
    with pytest.raises(ValueError, match="not a permutation"):
        transpose_util.get_inversed_perm((0, 2))


def test_fused_self_attention_rejects_a_hidden_size_not_a_multiple_of_three_heads():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 2, 10))) -> tp.Numpy:
        return flow.nn.fused_self_attention_query_mul_key_and_value(x, head_size=4)[0]

    with pytest.raises(flow.JobBuildError, match=r"hidden size 10 .* multiple of 3 \* head_size"):
        job(np.zeros((4, 2, 10), np.float32))


def test_fused_bias_add_dropout_is_bias_add_in_predict_jobs_and_checks_rate():
    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2, 3)), b: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return flow.nn.fused_bias_add_dropout(x, b, rate=0.5)

    x, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(job(x, b), x + b)
    flow.clear_default_session()

    @flow.global_function()
    def bad(x: tp.Numpy.Placeholder((2, 3)), b: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return flow.nn.fused_bias_add_dropout(x, b, rate=1.0)

    with pytest.raises(flow.JobBuildError, match=r"fused_bias_add_dropout: argument 'rate' must be in \[0, 1\)"):
        bad(x, b)


def test_bernoulli_name_is_used_once_per_job_and_argwhere_checks_dtype():
    @flow.global_function()
    def twice(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        flow.random.bernoulli(x)
        return flow.random.bernoulli(x)

    with pytest.raises(ValueError, match="'Bernoulli' is already used"):
        twice(np.zeros(3, np.float32))
    flow.clear_default_session()

    @flow.global_function()
    def where(x: tp.Numpy.Placeholder((3,))) -> tp.ListNumpy:
        return flow.argwhere(x, dtype=flow.float32)

    with pytest.raises(TypeError, match="expects flow.int32 or flow.int64"):
        where(np.zeros(3, np.float32))


def test_ctc_loss_rejects_an_unknown_reduction():
    @flow.global_function()
    def job(lp: tp.Numpy.Placeholder((5, 2, 4)), t: tp.Numpy.Placeholder((2, 3), dtype=flow.int64),
            il: tp.Numpy.Placeholder((2,), dtype=flow.int64),
            tl: tp.Numpy.Placeholder((2,), dtype=flow.int64)) -> tp.Numpy:
        return flow.ctc_loss(lp, t, il, tl, reduction="avg")

    with pytest.raises(ValueError, match="reduction must be 'none', 'mean' or 'sum'"):
        job(np.zeros((5, 2, 4), np.float32), np.ones((2, 3), np.int64), np.full(2, 5), np.full(2, 3))


def test_time_shape_region_errors_name_the_op():
    @flow.global_function()
    def returns_region(x: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        return flow.math.relu(flow.unpack(x, 2))

    with pytest.raises(flow.JobBuildError, match="blob of a repeat/unpack region: close the region with acc or pack"):
        returns_region(np.zeros((4, 2), np.float32))
    flow.clear_default_session()

    @flow.global_function()
    def mixed_counts(x: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        return flow.pack(flow.unpack(x, 2), 4)

    with pytest.raises(flow.JobBuildError, match="must have the same count"):
        mixed_counts(np.zeros((4, 2), np.float32))
    flow.clear_default_session()

    @flow.global_function()
    def uneven(x: tp.Numpy.Placeholder((5, 2))) -> tp.Numpy:
        return flow.pack(flow.unpack(x, 2), 2)

    with pytest.raises(flow.JobBuildError, match=r"dim 0 of input 'in' \(5, 2\) must be divisible by unpack_num = 2"):
        uneven(np.zeros((5, 2), np.float32))


def test_gradient_accumulation_with_unpack_acc_matches_the_full_batch_gradient():
    """A micro-batched loss (unpack -> per-piece mean loss -> acc) trains a shared weight:
    its gradient is the sum of the per-piece gradients (numpy reference)."""
    grads = {}
    x = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)

    @flow.global_function(type="train")
    def job(a: tp.Numpy.Placeholder((6, 3))) -> tp.Numpy:
        w = flow.get_variable("w", shape=(3, 1), initializer=flow.ones_initializer())
        piece_loss = flow.math.reduce_mean(flow.math.square(flow.matmul(flow.unpack(a, 3), w)))
        loss = flow.acc(piece_loss, 3)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        flow.watch_diff(w, lambda g: grads.setdefault("w", np.array(g)))
        return loss

    loss = job(x)
    pieces = np.split(x, 3)
    np.testing.assert_allclose(loss, sum(np.mean((p @ np.ones((3, 1))) ** 2) for p in pieces), rtol=1e-5)
    expected = sum(2 * p.T @ (p @ np.ones((3, 1))) / p.shape[0] for p in pieces)
    np.testing.assert_allclose(grads["w"], expected, rtol=1e-5)


def test_distributed_ranks_gen_seed_and_host_nvtx_ranges(monkeypatch):
    # flow.distributed, flow.random.gen_seed and flow.profiler.range_push / range_pop were missing
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("RANK", "1")  # (a rank of one machine is no machine rank)
    assert (flow.distributed.get_rank(), flow.distributed.get_local_rank()) == (0, 0)
    assert flow.distributed.get_world_size() == 1 and flow.distributed.is_multi_client() is False
    # one process a machine under torchrun: the machine rank and count the runtime rendezvouses with
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (flow.current_machine_id(), flow.distributed.get_rank(), flow.distributed.get_world_size()) == (1, 1, 2)
    monkeypatch.setenv("GRAPHFRONT_MACHINE_RANK", "0")
    flow.config.machine_num(3)
    assert (flow.current_machine_id(), flow.distributed.get_world_size()) == (0, 3)
    monkeypatch.delenv("WORLD_SIZE")
    flow.clear_default_session()
    # OneFlow's random_util: consistent view, a random seed that every device shares; mirrored
    # view, -1 and has_seed False (each device draws its own); a given seed as it is
    seed, has_seed = flow.random.gen_seed()
    assert isinstance(seed, int) and has_seed is True and flow.random.gen_seed(7) == (7, True)
    cfg = flow.FunctionConfig()
    cfg.default_logical_view(flow.scope.mirrored_view())
    seen = []

    @flow.global_function(function_config=cfg)
    def job(x: tp.ListNumpy.Placeholder((2,))) -> tp.ListNumpy:
        seen.append((flow.random.gen_seed(), flow.random.gen_seed(np.int64(3))))
        return x

    job([np.zeros(2, np.float32)])
    assert seen == [((-1, False), (3, True))]
    with pytest.raises(flow.ArgumentError, match="seed expects an int or None, received 'x'"):
        flow.random.gen_seed("x")
    flow.profiler.range_push("step")  # (NVTX on CUDA; nothing here)
    flow.profiler.range_pop()
    with pytest.raises(TypeError, match="range_name expects a str, received 3"):
        flow.profiler.range_push(3)


@pytest.mark.parametrize("mode", ["plan", "xla"])
def test_system_assign_is_the_legacy_assign_conf_op(mode):
    # flow.system.assign was missing: OneFlow's legacy system op assign_conf, returning ref
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)

    @flow.global_function(function_config=cfg)
    def job(x: tp.Numpy.Placeholder((3,))):
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3,), initializer=flow.zeros_initializer())
            assert flow.system.assign(w, x * 2 + w) is w

    for _ in range(2):
        job(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(flow.get_all_variables()["w"].numpy(), [0.0, 4.0, 8.0])
    kinds = [op.WhichOneof("op_type") for op in job.compiled_job.job.net.op]
    assert "assign_conf" in kinds and job.compiled_job.compile_mode == mode

    @flow.global_function()
    def bad(x: tp.Numpy.Placeholder((3,))):
        flow.system.assign(flow.math.relu(x), x)

    with pytest.raises(flow.ArgumentError, match="argument 'ref' must be a variable blob"):
        bad(np.zeros(3, np.float32))


def test_sbp_objects_are_the_distribute_policies_and_lay_out_hierarchical_parallel_cast():
    assert flow.sbp.split(1) == flow.distribute.split(1) and flow.sbp.broadcast == flow.distribute.broadcast()
    assert [str(s) for s in (flow.sbp.split(1), flow.sbp.broadcast, flow.sbp.partial_sum)] == ["S(1)", "B", "P"]
    with pytest.raises(flow.ArgumentError, match=r"flow.sbp.split: axis must be >= 0, received -1"):
        flow.sbp.split(-1)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        y = flow.hierarchical_parallel_cast(x, [flow.sbp.split(1)], grad_mode="manual",
                                            grad_nd_sbp=flow.sbp.partial_sum, name="cast")
        return flow.hierarchical_parallel_cast(y, nd_sbp=["B"], name="cast_b")
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(job(x), x)
    ops = {op.name: op for op in job.graph.proto.net.op}
    attrs = ops["cast"].user_conf.attr
    assert list(attrs["nd_sbp"].at_list_string.val) == ["S(1)"]
    assert list(attrs["grad_nd_sbp"].at_list_string.val) == ["P"]


def test_partial_sum_is_refused_where_a_distribute_policy_is_taken():
    @flow.global_function()
    def cast(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        return flow.parallel_cast(x, distribute=flow.sbp.partial_sum)
    with pytest.raises(flow.ArgumentError, match=r"flow.parallel_cast: argument 'distribute' expects a distribute "
                                                 r"policy .* received Distribute flow.sbp.partial_sum \(a partial"):
        cast(np.zeros((4, 6), np.float32))

    @flow.global_function()
    def var() -> tp.Numpy:
        return flow.get_variable("w", shape=(2,), distribute=flow.sbp.partial_sum)
    with pytest.raises(flow.ArgumentError, match=r"get_variable 'w': distribute cannot be a partial sum"):
        var()

    @flow.global_function()
    def dense(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        return flow.layers.dense(x, 3, model_distribute=flow.sbp.partial_sum, name="fc")
    with pytest.raises(flow.JobBuildError, match=r"layers.dense 'fc': model_distribute expects a flow.distribute"):
        dense(np.zeros((4, 6), np.float32))


def test_current_resource_and_all_device_placement_follow_flow_config():
    from graphfront.core import resource_pb2
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(3)
    flow.config.comm_net_worker_num(8)
    flow.config.collective_boxing.nccl_fusion_threshold_mb(32)
    res = flow.current_resource()
    assert isinstance(res, resource_pb2.Resource) and res is not flow.current_resource()
    assert (res.machine_num, res.gpu_device_num, res.cpu_device_num, res.comm_net_worker_num) == (1, 0, 3, 8)
    assert res.collective_boxing_conf.nccl_fusion_threshold_mb == 32
    assert not res.HasField("max_mdsave_worker_num") and res.max_mdsave_worker_num == 64  # OneFlow's default
    assert flow.env.current_resource is flow.current_resource
    conf = flow.env.all_device_placement("cpu")
    assert (conf.device_tag, list(conf.device_name)) == ("cpu", ["0:0-2"])
    with pytest.raises(flow.ArgumentError, match=r"all_device_placement: the resource has no gpu device "
                                                 r"\(gpu_device_num is 0\)"):
        flow.env.all_device_placement("gpu")
    with pytest.raises(flow.ArgumentError, match=r"device_type expects 'gpu' or 'cpu', received 'tpu'"):
        flow.env.all_device_placement("tpu")


def test_get_job_set_holds_the_compiled_jobs_and_the_memory_strategy():
    from graphfront.core import job_set_pb2

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        loss = flow.math.reduce_mean(flow.layers.dense(x, 1, name="fc"))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    @flow.global_function()
    def predict(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.layers.dense(x, 1, name="fc")
    assert len(flow.experimental.get_job_set().job) == 0  # nothing compiled yet
    flow.inter_job_reuse_mem_strategy("custom_parallelism", job_name_groups=[["train", "predict"]])
    predict(np.ones((2, 3), np.float32))  # the first call compiles both jobs
    job_set = flow.experimental.get_job_set()
    assert isinstance(job_set, job_set_pb2.JobSet)
    assert sorted(j.job_conf.job_name for j in job_set.job) == ["predict", "train"]
    train_job = next(j for j in job_set.job if j.job_conf.job_name == "train")
    assert any(op.user_conf.op_type_name.endswith("_update") for op in train_job.net.op)  # completed: the optimizer
    assert list(job_set.inter_job_reuse_mem_strategy.custom_parallelism.nonparallel_group[0].job_name) == \
        ["train", "predict"]
    job_set.job[0].job_conf.job_name = "changed"  # a copy
    assert "changed" not in [j.job_conf.job_name for j in flow.experimental.get_job_set().job]

    other = job_set_pb2.JobSet()
    flow.inter_job_reuse_mem_strategy("parallelism_priority", job_set=other)
    assert other.inter_job_reuse_mem_strategy.WhichOneof("strategy_case") == "parallelism_priority"
    for args, kwargs, match in [(("mem_sharing_priority",), {}, r"strategy_str expects one of 'reuse_mem_priority'"),
                                (("custom_parallelism",), {}, r"needs job_name_groups, a list of lists of job names"),
                                (("custom_parallelism",), {"job_name_groups": ["ab"]}, r"received \['ab'\]"),
                                (("reuse_mem_priority",), {"job_name_groups": []}, r"unexpected keyword"),
                                (("reuse_mem_priority", {}), {}, r"job_set expects a JobSet proto")]:
        with pytest.raises(flow.ArgumentError, match=match):
            flow.inter_job_reuse_mem_strategy(*args, **kwargs)


@pytest.fixture
def typing_check():
    from graphfront.framework.annotations import TypingCheck
    flow.experimental.enable_typing_check()
    yield
    TypingCheck.enabled = False


def test_typing_check_requires_annotated_global_functions_and_watch_handlers(typing_check):
    with pytest.raises(flow.ArgumentError, match=r"global function 'job': parameter 'x' is not annotated"):
        @flow.global_function()
        def job(x=flow.FixedTensorDef((2,))) -> tp.Numpy:
            return x
    with pytest.raises(flow.ArgumentError, match=r"global function 'unreturned': no return annotation"):
        @flow.global_function()
        def unreturned(x: tp.Numpy.Placeholder((2,))):
            return x

    @flow.global_function()
    def watched(x: tp.Numpy.Placeholder((2,))) -> None:
        flow.watch(x, lambda value: None)
    with pytest.raises(flow.JobBuildError, match=r"flow.watch: the parameter of handler <lambda> is not annotated"):
        watched(np.zeros(2, np.float32))
    with pytest.raises(RuntimeError, match=r"enable_typing_check must be called before any global function is "
                                           r"defined; the default session already has \['watched'\]"):
        flow.experimental.enable_typing_check(False)

    flow.clear_default_session()  # a process-wide switch: still on in the next session
    seen = []

    @flow.global_function()
    def annotated(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        flow.watch(x, lambda value: seen.append(value))
        return x + 1
    with pytest.raises(flow.JobBuildError, match=r"not annotated"):
        annotated(np.zeros(2, np.float32))


def test_unittest_testcase_sets_the_typing_check_from_the_environment(monkeypatch):
    from graphfront.framework.annotations import TypingCheck
    monkeypatch.setenv("ONEFLOW_TEST_ENABLE_TYPING_CHECK", "1")
    try:
        flow.unittest.TestCase("run").setUp()
        assert TypingCheck.enabled
        monkeypatch.setenv("ONEFLOW_TEST_ENABLE_TYPING_CHECK", "0")
        flow.unittest.TestCase("run").setUp()
        assert not TypingCheck.enabled
    finally:
        TypingCheck.enabled = False


def test_eager_assign_121_writes_the_variable_at_once_in_eager_execution():
    @flow.global_function()
    def lazy(value: tp.Numpy.Placeholder((3, 4))) -> None:
        var = flow.get_variable("var", shape=(3, 4), initializer=flow.constant_initializer(0))
        flow.experimental.eager_assign_121(var, value)
    with pytest.raises(RuntimeError, match=r"eager_assign_121 runs only in eager execution"):
        lazy(np.zeros((3, 4), np.float32))

    flow.clear_default_session()
    flow.enable_eager_execution(True)

    @flow.global_function()
    def assign(value: tp.Numpy.Placeholder((3, 4))) -> tp.Numpy:
        var = flow.get_variable("var", shape=(3, 4), initializer=flow.constant_initializer(0))
        before = var.numpy()
        ref = flow.experimental.eager_assign_121(var, value)
        assert ref is var and np.array_equal(before, np.zeros((3, 4), np.float32))
        return flow.nn.relu(var)

    @flow.global_function()
    def read() -> tp.Numpy:
        return flow.get_variable("var", shape=(3, 4), initializer=flow.constant_initializer(0))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_array_equal(assign(x), np.maximum(x, 0))  # read after the assign in the same call
    np.testing.assert_array_equal(read(), x)

    @flow.global_function()
    def bad(value: tp.Numpy.Placeholder((3, 4))) -> None:
        flow.experimental.eager_assign_121(value, value)
    with pytest.raises(flow.ArgumentError, match=r"experimental.eager_assign_121: argument 'ref' must be a variable"):
        bad(x)
