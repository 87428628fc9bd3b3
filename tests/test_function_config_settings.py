"""FunctionConfig settings that act as in OneFlow: the old-style optimizer
(``train.primary_lr`` + ``train.model_update_conf`` + ``flow.losses.add_loss``), gradient
accumulation, sparse (indexed-slices) embedding updates and ``function_desc`` — each
checked against torch.optim / numpy."""
import warnings

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import JobBuildError, OpRunError

RNG = np.random.RandomState(3)


def _var(name):
    return flow.get_all_variables()[name].numpy()


def test_model_update_conf_builds_the_optimizer_when_no_minimize_is_called():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    cfg = flow.FunctionConfig()
    cfg.train.primary_lr(0.05)
    cfg.train.model_update_conf({"momentum_conf": {"beta": 0.8}})

    @flow.global_function(function_config=cfg)   # no type: the train settings make it train
    def job(a: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 2), initializer=flow.constant_initializer(0.5))
        loss = flow.math.reduce_mean(flow.math.square(flow.matmul(a, w)))
        flow.losses.add_loss(loss)
        return loss

    w = torch.full((3, 2), 0.5, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.05, momentum=0.8)
    for _ in range(3):
        job(x)
        opt.zero_grad()
        (torch.tensor(x) @ w).square().mean().backward()
        opt.step()
    np.testing.assert_allclose(_var("w"), w.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert cfg.function_desc.IsTrainable()
    assert cfg.function_desc.job_config_proto.train_conf.primary_lr == pytest.approx(0.05)


def test_function_desc_reads_settings_back():
    cfg = flow.FunctionConfig()
    with pytest.warns(UserWarning):
        cfg.enable_inplace(False)
    cfg.train.num_gradient_accumulation_steps(4)
    assert cfg.function_desc.enable_inplace is False
    assert cfg.function_desc.num_gradient_accumulation_steps == 4
    with pytest.raises(AttributeError, match="no setting 'no_such_flag'"):
        cfg.function_desc.no_such_flag
    with pytest.raises(ValueError, match="positive int"):
        cfg.train.num_gradient_accumulation_steps(0)


def _accumulating_job(k, batch=8):
    cfg = flow.FunctionConfig()
    cfg.train.num_gradient_accumulation_steps(k)

    @flow.global_function(type="train", function_config=cfg)
    def job(x: tp.Numpy.Placeholder((batch, 3)), y: tp.Numpy.Placeholder((batch, 1))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 1), initializer=flow.constant_initializer(0.3))
        loss = flow.math.reduce_mean(flow.math.square(flow.matmul(x, w) - y), axis=1)  # per sample
        adam = flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), do_bias_correction=True)
        adam.minimize(loss)
        return loss
    return job


def test_gradient_accumulation_updates_once_per_call_with_the_full_batch_gradient():
    # OneFlow: the fed batch is split into k micro-batches, gradients are accumulated and
    # scaled by the loss instance count of all micro-batches: one Adam step per call on
    # the gradient of the whole batch; returns are the micro-batch results concatenated
    x = RNG.standard_normal((8, 3)).astype(np.float32)
    y = RNG.standard_normal((8, 1)).astype(np.float32)
    job = _accumulating_job(4)
    w = torch.full((3, 1), 0.3, requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.05, eps=1e-8)
    for _ in range(3):
        loss = job(x, y)
        opt.zero_grad()
        ref = ((torch.tensor(x) @ w - torch.tensor(y)) ** 2).mean(1)
        np.testing.assert_allclose(loss, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
        ref.mean().backward()
        opt.step()
    np.testing.assert_allclose(_var("w"), w.detach().numpy(), rtol=1e-4, atol=1e-6)
    assert _var("System-Train-TrainStep-job")[0] == 3  # one train step per call


def test_gradient_accumulation_needs_a_divisible_batch():
    job = _accumulating_job(3)
    with pytest.raises(JobBuildError, match="num_gradient_accumulation_steps.3. splits every input into 3"):
        job(np.zeros((8, 3), np.float32), np.zeros((8, 1), np.float32))


def test_a_failed_accumulating_call_leaves_no_gradient_in_the_buffers():
    """A call whose second micro-batch raises (a label computed out of range) had added the
    first micro-batch's gradients into the accumulation buffers: they are zeroed, so the
    next call updates with its own gradients only, as in a session without the failed call."""
    def session(with_failure):
        flow.clear_default_session()
        cfg = flow.FunctionConfig()
        cfg.train.num_gradient_accumulation_steps(2)

        @flow.global_function(type="train", function_config=cfg)
        def job(x: tp.Numpy.Placeholder((4, 3)), ids: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
            labels = flow.math.add(ids, flow.constant(1, dtype=flow.int32, shape=(2,)))  # (computed in the job)
            logits = flow.layers.dense(x, 3, kernel_initializer=flow.constant_initializer(0.1), name="fc")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
            return loss
        x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
        good = np.array([0, 1, 0, 1], np.int32)
        job(x, good)
        if with_failure:
            with pytest.raises(OpRunError, match="received 3"):
                job(x, np.array([0, 1, 0, 2], np.int32))   # the second micro-batch's label 3 of 3 classes
        job(x, good)
        return {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}

    want, got = session(False), session(True)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def _embedding_job(optimizer, sparse):
    cfg = flow.FunctionConfig()
    if sparse:
        cfg.indexed_slices_optimizer_conf({"include_op_names": {"op_name": ["embedding"]}})

    @flow.global_function(type="train", function_config=cfg)
    def job(ids: tp.Numpy.Placeholder((3,), dtype=flow.int32)) -> tp.Numpy:
        table = flow.get_variable("embedding", (5, 2), initializer=flow.constant_initializer(1.0))
        dense = flow.get_variable("dense", (2,), initializer=flow.constant_initializer(1.0))
        loss = flow.math.reduce_sum(flow.gather(table, ids) * dense)
        optimizer().minimize(loss)
        return loss
    return job


STEPS = [np.array([0, 3, 3], np.int32), np.array([1, 1, 4], np.int32), np.array([0, 2, 4], np.int32)]


def test_indexed_slices_momentum_updates_only_the_gathered_rows():
    def sgd():
        return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9)

    job = _embedding_job(sgd, sparse=True)
    for ids in STEPS:
        job(ids)
    assert any(op.user_conf.op_type_name == "indexed_slices_momentum_update"
               for op in job.graph.proto.net.op if op.HasField("user_conf"))
    # numpy reference of OneFlow's lazy momentum: rows not gathered keep weight and momentum;
    # the gradient of a row gathered n times is n * dense (= n while dense stays 1 ... )
    table, mom = np.ones((5, 2)), np.zeros((5, 2))
    dense, dmom = np.ones(2), np.zeros(2)
    for ids in STEPS:
        rows, counts = np.unique(ids, return_counts=True)
        g_rows = counts[:, None] * dense[None, :]
        g_dense = table[ids].sum(0)
        mom[rows] = 0.9 * mom[rows] - 0.1 * g_rows
        table[rows] += mom[rows]
        dmom = 0.9 * dmom - 0.1 * g_dense
        dense = dense + dmom
    np.testing.assert_allclose(_var("embedding"), table, rtol=1e-5)
    np.testing.assert_allclose(_var("embedding-momentum"), mom, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(_var("dense"), dense, rtol=1e-5)
    # dense momentum would have moved row 3 again at steps 2 and 3
    flow.clear_default_session()
    job = _embedding_job(sgd, sparse=False)
    for ids in STEPS:
        job(ids)
    assert not np.allclose(_var("embedding")[3], table[3])


def test_indexed_slices_adam_is_torch_sparse_adam():
    job = _embedding_job(lambda: flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.1]),
                                                       do_bias_correction=True),
                         sparse=True)
    for ids in STEPS:
        job(ids)
    emb = torch.nn.Embedding(5, 2, sparse=True)
    torch.nn.init.ones_(emb.weight)
    dense = torch.ones(2, requires_grad=True)
    sparse_opt = torch.optim.SparseAdam([emb.weight], lr=0.1, eps=1e-8)
    dense_opt = torch.optim.Adam([dense], lr=0.1, eps=1e-8)
    for ids in STEPS:
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        (emb(torch.tensor(ids, dtype=torch.long)) * dense).sum().backward()
        sparse_opt.step()
        dense_opt.step()
    np.testing.assert_allclose(_var("embedding"), emb.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_var("dense"), dense.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("heuristic", [False, True])
def test_cudnn_settings_hold_while_the_jobs_steps_run(heuristic):
    """``cudnn_conv_heuristic_search_algo(False)`` (cuDNN times the algorithms: torch's
    ``cudnn.benchmark``) and ``cudnn_conv_use_deterministic_algo_only`` are torch's cuDNN
    flags while the job's steps run, read here by a watch inside the step; torch's flags are
    as before outside it, and a job that sets neither leaves them as they are."""
    cudnn = torch.backends.cudnn
    seen = []

    def flags(_):
        seen.append((cudnn.benchmark, cudnn.deterministic))

    cfg = flow.FunctionConfig()
    cfg.cudnn_conv_heuristic_search_algo(heuristic)
    cfg.cudnn_conv_use_deterministic_algo_only(True)

    @flow.global_function(function_config=cfg)
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        flow.watch(x, flags)
        return flow.math.relu(x)

    @flow.global_function()
    def plain(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        flow.watch(x, flags)
        return flow.math.relu(x)

    before = (cudnn.benchmark, cudnn.deterministic)
    assert before == (False, False)  # (torch's defaults)
    x = np.zeros((2, 3), np.float32)
    job(x)
    assert seen == [(not heuristic, True)]
    assert (cudnn.benchmark, cudnn.deterministic) == before
    plain(x)
    assert seen[1] == before
    conf = job.compiled_job.job.job_conf
    assert conf.cudnn_conv_heuristic_search_algo is heuristic and conf.cudnn_conv_use_deterministic_algo_only


def test_enable_non_distributed_optimizer_is_the_older_spelling_of_the_placement_mode():
    """OneFlow v0.6.0 function_util.py: True sets optimizer_placement_optimization_mode to
    "non_distributed"; False leaves the proto untouched (no field set, no warning)."""
    cfg = flow.FunctionConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg.enable_non_distributed_optimizer(False)
    assert not cfg.job_config_proto.HasField("optimizer_placement_optimization_mode")
    with pytest.warns(UserWarning, match="optimizer_placement_optimization_mode"):
        cfg.enable_non_distributed_optimizer(True)
    assert cfg.job_config_proto.optimizer_placement_optimization_mode == "non_distributed"


@pytest.mark.parametrize("setting, message", [
    (lambda fc: fc.default_initializer_conf("zeros"),
     "FunctionConfig.default_initializer_conf expects InitializerConf (or its dict form), received str 'zeros'"),
    (lambda fc: fc.default_initializer_conf({"zero_conf": {}}),
     "FunctionConfig.default_initializer_conf: the dict does not fit InitializerConf"),
    (lambda fc: fc.indexed_slices_optimizer_conf(3),
     "FunctionConfig.indexed_slices_optimizer_conf expects IndexedSlicesOptimizerConf (or its dict form)"),
    (lambda fc: fc.train.model_update_conf({"sgd_conf": {}}),
     "FunctionConfig.train.model_update_conf: the dict does not fit NormalModelUpdateOpUserConf"),
    (lambda fc: fc.train.primary_lr(float("nan")), "FunctionConfig.train.primary_lr expects a finite number"),
    (lambda fc: fc.compile_mode("fast"), "FunctionConfig.compile_mode must be one of"),
    (lambda fc: fc.default_data_type("float32"), "FunctionConfig.default_data_type expects a graphfront dtype"),
])
def test_a_bad_setting_raises_argument_error_at_the_user_line(setting, message):
    # protobuf's CopyFrom TypeError and ParseError, and a NaN learning rate, once passed through
    with pytest.raises(JobBuildError) as e:
        setting(flow.FunctionConfig())
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)  # (ArgumentError: both)
    assert message in str(e.value)
    assert f"\n  at {__file__}:" in str(e.value)


#: every setting of OneFlow v0.6.0's FunctionConfig (``python/oneflow/compatible/single_client/
#: framework/function_util.py``), dotted for the attribute chains, with a value it takes
_ONEFLOW_SETTINGS = {
    "default_data_type": flow.float, "default_initializer_conf": {"constant_conf": {"value": 0.0}},
    "enable_cudnn": True, "cudnn_buf_limit_mbyte": 1024, "cudnn_conv_force_fwd_algo": 0,
    "cudnn_conv_force_bwd_data_algo": 0, "cudnn_conv_force_bwd_filter_algo": 0,
    "cudnn_conv_heuristic_search_algo": True, "enable_cudnn_fused_normalization_add_relu": True,
    "enable_fuse_add_to_output": True, "enable_fuse_cast_scale": True, "cudnn_conv_use_deterministic_algo_only": True,
    "enable_reused_mem": True, "enable_inplace": True, "do_parallel_cast_before_widening_type_cast": True,
    "optimizer_placement_optimization_mode": "distributed_split",
    "train.optimizer_placement_optimization_mode": "distributed_split",
    "optimizer_placement_optimization_threshold": 2048, "train.optimizer_placement_optimization_threshold": 2048,
    "enable_non_distributed_optimizer": True, "prune_parallel_cast_ops": True,
    "prune_cast_to_static_shape_ops": True, "prune_amp_white_identity_ops": True,
    "enable_true_half_config_when_conv": True, "cudnn_conv_enable_true_half": True,
    "cudnn_conv_enable_pseudo_half": False, "enable_cudnn_conv_pseudo_half": False,
    "enable_quantization_aware_training": True, "enable_qat": True, "qat.per_channel_weight_quantization": True,
    "qat.symmetric": True, "qat.moving_min_max_momentum": 0.9, "qat.moving_min_max_stop_update_after_iters": 10,
    "qat.target_backend": "cambricon", "enable_auto_mixed_precision": True, "concurrency_width": 64,
    "train.model_update_conf": {"naive_conf": {}}, "enable_fuse_model_update_ops": True,
    "enable_gradients_stats_aggregation": True, "train.loss_scale_factor": 2.0, "train.primary_lr": 0.1,
    "train.secondary_lr": 0.1, "train.num_gradient_accumulation_steps": 2, "use_xla_jit": False,
    "use_tensorrt": False, "use_openvino": True, "tensorrt.int8_calibration": "table", "default_logical_view": flow.scope.consistent_view(),
    "default_distribute_strategy": flow.scope.consistent_view(), "allow_cpu_return_op": True,
    "enable_ssp": False,
}
_DEPRECATED_NO_OPS = ["enable_inplace_in_reduce_struct", "enable_nccl", "use_nccl_inter_node_communication",
                      "use_boxing_v2", "enable_all_reduce_group", "all_reduce_group_num", "all_reduce_lazy_ratio",
                      "all_reduce_group_min_mbyte", "all_reduce_group_size_warmup", "all_reduce_fp16",
                      "disable_all_reduce_sequence", "non_distributed_optimizer_group_size_mbyte",
                      "enable_keep_header_only", "enable_float_compute_for_half_gemm"]


def _setting(cfg, dotted):
    target = cfg
    for part in dotted.split("."):
        target = getattr(target, part)
    return target


def test_every_oneflow_setting_is_there():
    # fourteen deprecated no-ops, the true-half switches, train.optimizer_placement_* and the
    # memory planner's policy lists were AttributeErrors
    cfg = flow.FunctionConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, value in _ONEFLOW_SETTINGS.items():
            _setting(cfg, name)(value)
        before = cfg.job_config_proto.SerializeToString()
        for name in _DEPRECATED_NO_OPS:
            with pytest.warns(DeprecationWarning, match=f"FunctionConfig.{name} has been deprecated"):
                _setting(cfg, name)(True)
    assert cfg.job_config_proto.SerializeToString() == before  # (the no-ops record nothing)
    conf = cfg.job_config_proto
    assert conf.optimizer_placement_optimization_threshold == 2048 and conf.concurrency_width == 64


def test_true_half_is_the_inverse_of_pseudo_half_and_train_placement_settings_are_not_a_train_conf():
    cfg = flow.FunctionConfig()
    with pytest.warns(UserWarning, match=r"cudnn_conv_enable_pseudo_half = False\); graphfront's runtime"):
        cfg.cudnn_conv_enable_true_half()
    assert cfg.job_config_proto.cudnn_conv_enable_pseudo_half is False
    with pytest.warns(UserWarning):
        cfg.enable_true_half_config_when_conv(False)
    assert cfg.job_config_proto.cudnn_conv_enable_pseudo_half is True
    with pytest.raises(flow.ArgumentError, match="cudnn_conv_enable_true_half expects a bool, received 'yes'"):
        cfg.cudnn_conv_enable_true_half("yes")
    with pytest.warns(UserWarning):
        cfg.train.optimizer_placement_optimization_mode("non_distributed")
    assert cfg.job_config_proto.optimizer_placement_optimization_mode == "non_distributed"
    assert not cfg.job_config_proto.HasField("train_conf")  # (OneFlow sets only the field)


def test_memory_allocation_policies_are_recorded_in_the_job_config():
    cfg = flow.FunctionConfig()
    policies = cfg.static_mem_alloc_policy_white_list
    assert cfg.static_mem_alloc_algo_white_list.show() == [policies.policy_mem_size_first(),
                                                          policies.policy_mutual_exclusion_first(),
                                                          policies.policy_time_line()]
    # the proto's defaults: the first two policies on, the time line off
    assert [policies.has(p) for p in policies.show()] == [True, True, False]
    with pytest.warns(UserWarning, match="recorded in the job config"):
        policies.add(policies.policy_time_line())
        policies.remove(policies.policy_mem_size_first())
    assert [policies.has(p) for p in policies.show()] == [False, True, True]
    assert cfg.job_config_proto.memory_allocation_algorithm_conf.use_time_line_algo
    with pytest.raises(flow.ArgumentError, match="expects one of .*, received 'fastest'"):
        policies.add("fastest")
