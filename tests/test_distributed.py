"""Many devices: SBP in the Job, boxing ops, and jobs on worker processes (gloo on CPU).

Every multi-device run is compared with the same job on one device (same seeds, same
data: the full batch on one device, half of it on each of two): loss trajectories,
variables and checkpoints must agree.
"""
import copy
import os
import signal
import warnings

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import job_builder as jb
from graphfront.framework.errors import JobBuildError, OpRunError
from graphfront.framework.session import default_session, trace
from graphfront.parallel import sbp as _sbp
from graphfront.passes import complete
from graphfront.testing.compare import assert_close_at_scale
from graphfront.passes.boxing import boxing
from graphfront.runtime.distributed import WorkerError

pytestmark = pytest.mark.slow  # spawns worker processes: about a minute on a small CPU

B = 8
RTOL = 1e-5


def _mlp_train_job(b=B, model_distribute=None):
    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((b, 20)), y: tp.Numpy.Placeholder((b,), dtype=flow.int32)) -> tp.Numpy:
        kw = {} if model_distribute is None else {"model_distribute": model_distribute}
        h = flow.layers.dense(x, 16, activation=flow.nn.relu, kernel_initializer=flow.random_normal_initializer(),
                              name="fc1", **kw)
        logits = flow.layers.dense(h, 5, kernel_initializer=flow.random_normal_initializer(), name="fc2")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-2]), do_bias_correction=True,
                            grad_clipping=flow.optimizer.grad_clipping.by_global_norm(1.0)).minimize(loss)
        return loss
    return train_job


def _batches(steps, shape, classes, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]).astype(np.int32))
            for _ in range(steps)]


def _losses(ndev, make_job, batches):
    flow.clear_default_session()
    flow.manual_seed(0)
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)
    job = make_job()
    losses = np.array([job(x, y) for x, y in batches])
    return losses, job


def _trains_as_on_one_device(make_job, batches):
    """Train ``make_job()``'s job on ``batches`` ((x, y) pairs) on one device and on two, from
    the same seed; assert equal losses and variables up to float32 rounding and return the
    two-device Job."""
    one, _ = _losses(1, make_job, batches)
    one_vars = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    two, job = _losses(2, make_job, batches)
    two_vars = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    assert_close_at_scale(two, one, RTOL)
    assert two_vars.keys() == one_vars.keys()
    for k in one_vars:
        np.testing.assert_allclose(two_vars[k], one_vars[k], rtol=1e-4, atol=1e-6, err_msg=k)
    return job.graph.proto


def _completed(gf):
    builder, _ = trace(default_session(), gf)
    return boxing(complete(copy.deepcopy(builder.job)))


def _types(job):
    return [jb.op_type_name(op) for op in job.net.op]


def test_data_parallel_job_has_sbp_signatures_and_all_reduce_ops():
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)
    job = _completed(_mlp_train_job())
    sbps = _sbp.blob_sbps(job)
    by_type = {}
    for op in job.net.op:
        by_type.setdefault(jb.op_type_name(op), []).append(op)
    assert all(sbps[f"{op.name}/out"] == "S(0)" for op in by_type["input_conf"])
    assert sbps["fc1-weight/out"] == "B"
    # one all-reduce (P -> B) per trainable variable's gradient, visible as a named op
    reduces = by_type["_nccl_logical_all_reduce"]
    assert len(reduces) == 4 and all(op.name.startswith("System-Boxing-AllReduce-") for op in reduces)
    sig = job.job_parallel_view_conf.op_name2sbp_signature_conf[reduces[0].name].bn_in_op2sbp_parallel
    assert (_sbp.from_proto(sig["in_0"]), _sbp.from_proto(sig["out_0"])) == ("P", "B")
    # every blob of the job has a layout
    assert set(job.helper.lbn2logical_blob_desc) <= set(sbps)


def test_sbp_rules_of_op_families():
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        w = flow.get_variable("w", (6, 8), initializer=flow.random_normal_initializer(),
                              distribute=flow.distribute.split(1))
        return flow.nn.softmax(flow.matmul(x, w))
    job = _completed(job_fn)
    sigs = {op.name: {k: _sbp.from_proto(v) for k, v in
                      job.job_parallel_view_conf.op_name2sbp_signature_conf[op.name].bn_in_op2sbp_parallel.items()}
            for op in job.net.op}
    mm = next(op.name for op in job.net.op if jb.op_type_name(op) == "matmul")
    assert sigs[mm] == {"a_0": "B", "b_0": "S(1)", "out_0": "S(1)"}  # model parallel: the weight stays split
    assert "_nccl_logical_all_gather" in _types(job)


def test_data_parallel_mlp_adam_matches_one_device():
    batches = _batches(20, (B, 20), 5)
    one, _ = _losses(1, _mlp_train_job, batches)
    two, job = _losses(2, _mlp_train_job, batches)
    assert_close_at_scale(two, one, RTOL)
    text = str(job.graph)
    assert "_nccl_logical_all_reduce" in text and "S(0)" in text
    assert "over its local shapes" in job.graph.code()


def test_data_parallel_lenet_matches_one_device():
    from lenet import lenet

    def make():
        @flow.global_function(type="train")
        def train_job(x: tp.Numpy.Placeholder((B, 1, 28, 28)),
                      y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, lenet(x))
            flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-3])).minimize(loss)
            return loss
        return train_job
    batches = _batches(20, (B, 1, 28, 28), 10, seed=1)
    one, _ = _losses(1, make, batches)
    two, job = _losses(2, make, batches)
    assert_close_at_scale(two, one, RTOL)
    assert _types(job.graph.proto).count("_nccl_logical_all_reduce") == 8


def test_model_parallel_in_out_dense_with_its_bias_in_the_gemm_matches_one_device():
    """OneFlow-Benchmark BERT's dense layer (an ``(in, out)`` weight, ``matmul`` then
    ``bias_add``) split over its output units: the fusion's transposed weight view and
    ``fused_matmul_bias`` take the split layouts, and training matches one device."""
    def make():
        @flow.global_function(type="train")
        def train_job(x: tp.Numpy.Placeholder((B, 20)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
            w = flow.get_variable("fc-weight", (20, 6), initializer=flow.random_normal_initializer(),
                                  distribute=flow.distribute.split(1))
            b = flow.get_variable("fc-bias", (6,), initializer=flow.random_normal_initializer(),
                                  distribute=flow.distribute.split(0))
            x = flow.parallel_cast(x, distribute=flow.distribute.broadcast())
            logits = flow.nn.bias_add(flow.matmul(x, w), b)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
            return loss
        return train_job
    job = _trains_as_on_one_device(make, _batches(5, (B, 20), 6, seed=3))
    fused = [op for op in job.net.op if jb.op_type_name(op) == "fused_matmul_bias"]
    assert len(fused) == 1 and "bias_add" not in _types(job)
    sig = job.job_parallel_view_conf.op_name2sbp_signature_conf[fused[0].name].bn_in_op2sbp_parallel
    assert {k: _sbp.from_proto(v) for k, v in sig.items()} == {"x_0": "B", "weight_0": "S(0)", "bias_0": "S(0)",
                                                                "out_0": "S(1)"}


def test_model_parallel_dense_matches_one_device():
    batches = _batches(5, (B, 20), 5, seed=2)
    make = lambda: _mlp_train_job(model_distribute=flow.distribute.split(0))  # noqa: E731
    one, _ = _losses(1, make, batches)
    one_vars = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    two, job = _losses(2, make, batches)
    assert_close_at_scale(two, one, RTOL)
    sbps = _sbp.blob_sbps(job.graph.proto)
    assert sbps["fc1-weight/out"] == "S(0)" and sbps["fc1-weight-m/out"] == "S(0)"
    assert "_nccl_logical_all_gather" in _types(job.graph.proto) or \
        "_nccl_logical_all_gather_noncontinuous" in _types(job.graph.proto)
    two_vars = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    assert two_vars.keys() == one_vars.keys()
    for k in one_vars:  # split variables come back in the single-device layout
        np.testing.assert_allclose(two_vars[k], one_vars[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without CUDA")
def test_gpu_placement_runs_on_cpu_with_one_warning(monkeypatch):
    from graphfront.parallel import placement
    monkeypatch.setattr(placement, "_warned", [False])
    flow.config.gpu_device_num(2)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("gpu", "0:0-1"):
            return flow.math.relu(x) * 2.0
    x = np.arange(-6, 6, dtype=np.float32).reshape(4, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = job_fn(x)
        job_fn(x)
    assert sum("CUDA is not available" in str(w.message) for w in caught) == 1
    np.testing.assert_array_equal(out, np.maximum(x, 0) * 2)
    assert job_fn.compiled_job.parallel_num == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without CUDA")
def test_gpu_fallback_can_be_an_error(monkeypatch):
    from graphfront.parallel import placement
    monkeypatch.setattr(placement, "GPU_FALLBACK", [True])
    flow.config.allow_gpu_fallback_to_cpu(False)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        with flow.scope.placement("gpu", "0:0-1"):
            return flow.math.relu(x)
    with pytest.raises(JobBuildError, match=r"CUDA is not available.*allow_gpu_fallback_to_cpu\(False\)"):
        job_fn(np.zeros((4, 3), np.float32))


def test_checkpoints_move_between_device_counts(tmp_path):
    batches = _batches(4, (B, 20), 5, seed=3)
    make = lambda: _mlp_train_job(model_distribute=flow.distribute.split(0))  # noqa: E731
    # 2 devices -> checkpoint -> 1 device
    _losses(2, make, batches[:2])
    flow.checkpoint.save(tmp_path / "two")
    saved = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(1)
    job = make()
    flow.load_variables(flow.checkpoint.get(tmp_path / "two"))
    loaded = {k: v.numpy() for k, v in flow.get_all_variables().items()}
    for k in saved:
        np.testing.assert_array_equal(loaded[k], saved[k], err_msg=k)
    one_next = job(*batches[2])
    flow.checkpoint.save(tmp_path / "one")
    # 1 device -> checkpoint -> 2 devices: the next step agrees
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)
    job = make()
    flow.load_variables(flow.checkpoint.get(tmp_path / "two"))
    np.testing.assert_allclose(job(*batches[2]), one_next, rtol=RTOL)
    np.testing.assert_allclose(flow.get_all_variables()["fc1-weight"].numpy(),
                               flow.checkpoint.get(tmp_path / "one")["fc1-weight"].numpy(), rtol=1e-5, atol=1e-7)


def test_killed_worker_ends_the_call_with_an_error_naming_its_device():
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)
    flow.config.collective_timeout_seconds(20)
    job = _mlp_train_job()
    x, y = _batches(1, (B, 20), 5)[0]
    job(x, y)
    victim = default_session().worker_group.procs[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join()
    # the next call reports the death (not the collective timeout of the surviving worker)
    with pytest.raises(WorkerError, match=r"device cpu:1 \(rank 1\) (died|is gone)"):
        job(x, y)
    with pytest.raises(WorkerError, match="cpu:1"):  # the session stays failed, the process lives on
        job(x, y)
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(1)
    assert np.isfinite(_mlp_train_job()(x, y)).all()


def test_every_boxing_conversion_keeps_the_values():
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def job_fn(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        for sbp in ("S(1)", "B", "S(1)", "P", "S(0)", "P", "B", "S(1)", "P"):
            x = flow.hierarchical_parallel_cast(x, [sbp])
        return x  # a partial sum is all-reduced for the client
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(job_fn(x), x)
    from graphfront.ops.boxing_ops import BOXING_OP_TYPES
    assert set(BOXING_OP_TYPES) <= set(_types(job_fn.graph.proto))


def test_two_machines_on_localhost_match_one_device():
    """The same script on two "machines" (two client processes, one device each, machine
    ranks 0 and 1, one MASTER_PORT) joins one group; both get the one-device trajectory."""
    import json
    import subprocess
    import sys
    from two_machines_job import losses
    steps = 5
    # The rendezvous store is hosted here, on a port the OS picks and this test holds until it
    # ends (no port is probed, released and reused): both machines' workers join it as clients,
    # as they join a torchrun agent's store.
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), GRAPHFRONT_MACHINE_RANK=str(rank),
                   TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0",
                   PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        procs.append(subprocess.Popen([sys.executable, os.path.join(here, "two_machines_job.py"), str(steps)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    expected = np.array(losses(steps, 1))
    for out, _ in outs:
        np.testing.assert_allclose(np.array(json.loads(out.strip().splitlines()[-1])), expected, rtol=RTOL)


def _signature_of(job, op_type):
    op = next(op for op in job.net.op if jb.op_type_name(op) == op_type)
    return _sbp.op_signatures(job)[op.name]


def test_data_parallel_batch_norm_normalizes_each_devices_part_as_oneflow_does():
    """OneFlow's batch norm on several devices (normalization_op.cpp): x split along the
    batch, each device normalizing its part with that part's statistics and updating its
    copy of the moving statistics (a checkpoint keeps the first device's), gamma and beta
    gradients summed over the devices. Checked against PyTorch's batch norm applied to each
    half of the batch."""
    x = np.random.default_rng(5).standard_normal((B, 3, 4, 4)).astype(np.float32)
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @flow.global_function(type="train")
    def job(x_: tp.Numpy.Placeholder((B, 3, 4, 4))) -> tp.Numpy:
        y = flow.layers.batch_normalization(x_, axis=1, momentum=0.9, epsilon=1e-5, name="bn",
                                            gamma_initializer=flow.constant_initializer(1.5),
                                            beta_initializer=flow.constant_initializer(0.25))
        loss = flow.math.reduce_mean(flow.math.square(y) * flow.math.sigmoid(y))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return y

    y = job(x)
    sig = _signature_of(job.graph.proto, "normalization")
    assert sig["x_0"] == sig["y_0"] == "S(0)" and sig["gamma_0"] == sig["moving_mean_0"] == "B"
    assert _signature_of(job.graph.proto, "normalization_grad")["gamma_diff_0"] == "P"
    got = {k: v.numpy() for k, v in flow.get_all_variables().items()}

    xt = torch.from_numpy(x)
    gamma = torch.full((3,), 1.5, requires_grad=True)
    beta = torch.full((3,), 0.25, requires_grad=True)
    mean0, var0 = torch.zeros(3), torch.ones(3)
    halves = []
    for i, part in enumerate(xt.chunk(2)):
        running_mean, running_var = torch.zeros(3), torch.ones(3)
        halves.append(torch.nn.functional.batch_norm(part, running_mean, running_var, gamma, beta, training=True,
                                                     momentum=0.1, eps=1e-5))
        if i == 0:
            mean0, var0 = running_mean, running_var
    want_y = torch.cat(halves)
    loss = (want_y.square() * torch.sigmoid(want_y)).mean()
    loss.backward()
    np.testing.assert_allclose(y, want_y.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["bn-gamma"], (1.5 - 0.5 * gamma.grad).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["bn-beta"], (0.25 - 0.5 * beta.grad).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["bn-moving_mean"], mean0.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["bn-moving_variance"], var0.numpy(), rtol=1e-5, atol=1e-6)


def test_data_parallel_transformer_block_matches_one_device():
    """Layer norm and its gradient, gelu, transpose and softmax cross entropy split along the
    batch on two devices (OneFlow's layouts), so a transformer-style block trains data
    parallel and equals one device (layer norm normalizes each sample)."""
    rng = np.random.default_rng(6)
    batches = [(rng.standard_normal((B, 4, 6)).astype(np.float32),
                np.eye(3, dtype=np.float32)[rng.integers(0, 3, B)]) for _ in range(4)]

    def make():
        @flow.global_function(type="train")
        def job(x: tp.Numpy.Placeholder((B, 4, 6)), label: tp.Numpy.Placeholder((B, 3))) -> tp.Numpy:
            w = flow.get_variable("w", (6,), initializer=flow.random_uniform_initializer(0.5, 1.5))
            h = flow.layers.layer_norm(x * w, begin_norm_axis=-1, begin_params_axis=-1, name="ln")
            h = flow.math.gelu(flow.transpose(h, perm=[0, 2, 1]))
            h = flow.reshape(h, (B, 24))
            logits = flow.layers.dense(h, 3, kernel_initializer=flow.random_normal_initializer(stddev=0.3),
                                       name="fc")
            loss = flow.math.reduce_mean(flow.nn.softmax_cross_entropy_with_logits(label, logits))
            flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [1e-2])).minimize(loss)
            return loss
        return job

    proto = _trains_as_on_one_device(make, batches)
    for op_type, arg in (("layer_norm", "x_0"), ("transpose", "input_0"), ("gelu", "in_0"), ("gelu_grad", "x_0"),
                         ("softmax_cross_entropy", "prediction_0"), ("fused_layer_norm_grad", "dy_0")):
        assert _signature_of(proto, op_type)[arg] == "S(0)", op_type
    assert _signature_of(proto, "fused_layer_norm_grad")["gamma_diff_0"] == "P"


def test_data_parallel_prelu_concat_l2_normalize_match_one_device():
    """PReLU (``flow.nn.prelu`` and ``flow.layers.prelu``'s ``tf_prelu``), concat and
    l2_normalize (an InsightFace-style embedding head) split along the batch on two devices
    and train as on one device."""
    rng = np.random.default_rng(8)
    batches = [(rng.standard_normal((B, 6)).astype(np.float32), rng.integers(0, 4, B).astype(np.int32))
               for _ in range(4)]

    def make():
        @flow.global_function(type="train")
        def job(x: tp.Numpy.Placeholder((B, 6)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
            init = flow.random_normal_initializer(stddev=0.5)
            a = flow.layers.dense(x, 5, kernel_initializer=init, name="a")
            alpha = flow.get_variable("alpha", (5,), initializer=flow.constant_initializer(0.25))
            a = flow.nn.prelu(a, alpha)
            b = flow.layers.prelu(flow.layers.dense(x, 3, kernel_initializer=init, name="b"),
                                  alpha_initializer=flow.constant_initializer(0.1), name="b-prelu")  # tf_prelu
            e = flow.math.l2_normalize(flow.concat([a, b], axis=1), axis=1)
            logits = flow.layers.dense(e, 4, kernel_initializer=init, name="fc")
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0.9).minimize(loss)
            return loss
        return job

    proto = _trains_as_on_one_device(make, batches)
    for op_type, arg in (("prelu", "x_0"), ("prelu_grad", "dy_0"), ("tf_prelu", "x_0"), ("tf_prelu_grad", "dy_0"),
                         ("concat", "in_0"), ("l2_normalize", "x_0"), ("l2_normalize_grad", "dy_0")):
        assert _signature_of(proto, op_type)[arg] == "S(0)", op_type


def test_data_parallel_activations_match_one_device():
    """The elementwise activations (one family, split along the axis their input arrives
    split on) in a data-parallel MLP on two devices: equal to one device."""
    rng = np.random.default_rng(9)
    batches = [(rng.standard_normal((B, 6)).astype(np.float32), rng.integers(0, 4, B).astype(np.int32))
               for _ in range(3)]
    acts = [("elu", flow.nn.elu), ("leaky_relu", lambda h: flow.nn.leaky_relu(h, alpha=0.1)),
            ("silu", flow.nn.silu), ("mish", flow.nn.mish), ("hardswish", flow.nn.hardswish)]

    def make():
        @flow.global_function(type="train")
        def job(x: tp.Numpy.Placeholder((B, 6)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
            h = x
            for i, (_, act) in enumerate(acts):
                h = act(flow.layers.dense(h, 6, kernel_initializer=flow.random_normal_initializer(stddev=0.6),
                                          name=f"fc{i}"))
            logits = flow.layers.dense(h, 4, name="out")
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.3])).minimize(loss)
            return loss
        return job

    proto = _trains_as_on_one_device(make, batches)
    for op_type, _ in acts:
        sig = _signature_of(proto, op_type)
        assert set(sig.values()) == {"S(0)"}, (op_type, sig)
        assert set(_signature_of(proto, f"{op_type}_grad").values()) == {"S(0)"}, op_type


def test_data_parallel_embedding_lookup_matches_one_device():
    """A gather with its ids split along the batch reads the broadcast table on each device
    (OneFlow's gather layout) and the table's gradient is each device's partial sum: an
    embedding model trains data parallel, equal to one device."""
    rng = np.random.default_rng(10)
    batches = [(rng.integers(0, 20, (B, 5)).astype(np.int32), rng.integers(0, 3, B).astype(np.int32))
               for _ in range(3)]

    def make():
        @flow.global_function(type="train")
        def job(ids: tp.Numpy.Placeholder((B, 5), dtype=flow.int32),
                y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
            table = flow.get_variable("emb", (20, 4), initializer=flow.random_normal_initializer())
            e = flow.reshape(flow.gather(table, ids), (B, 20))
            logits = flow.layers.dense(e, 3, name="fc")
            loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5])).minimize(loss)
            return loss
        return job

    proto = _trains_as_on_one_device(make, batches)
    assert _signature_of(proto, "gather") == {"in_0": "B", "indices_0": "S(0)", "out_0": "S(0)"}
    assert _signature_of(proto, "unsorted_segment_sum_like")["out_0"] == "P"


def test_decode_random_splits_one_draw_over_the_devices():
    """OneFlow-Benchmark's synthetic data (``decode_random``) on 2 devices: split along the
    batch (each device draws the whole batch from the op's stream and keeps its part, so 3
    devices, and one, hold the same batch), the halves differ, and one seed repeats the batch."""
    def batch(seed, n=2):
        flow.clear_default_session()
        flow.manual_seed(seed)
        flow.config.gpu_device_num(0)
        flow.config.cpu_device_num(n)

        @flow.global_function(type="predict")
        def job() -> tp.Numpy:
            return flow.data.decode_random(shape=(3,), dtype=flow.float, batch_size=6,
                                           initializer=flow.random_uniform_initializer())
        return job(), _sbp.blob_sbps(job.graph.proto)

    first, sbps = batch(1)
    assert {s for lbn, s in sbps.items() if lbn.startswith("DecodeRandom")} == {"S(0)"}
    assert first.shape == (6, 3) and not np.allclose(first[:3], first[3:])
    np.testing.assert_array_equal(batch(1)[0], first)
    np.testing.assert_array_equal(batch(1, n=3)[0], first)
    np.testing.assert_array_equal(batch(1, n=1)[0], first)
    assert not np.array_equal(batch(2)[0], first)


def test_bad_computed_label_on_one_device_raises_and_the_session_goes_on():
    """A label computed in the job outside [0, depth) on one of 2 devices: every worker
    completes the step's collectives (the label checked in the step, clamped, as on a
    GPU), the workers agree before the updates that one check failed and none updates a
    variable, the call raises the op's OpRunError naming the value and the device, and the
    next call runs (before, the other worker waited in the gradients' all-reduce until the
    collective timeout and the session's workers were stopped)."""
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((4, 3)), ids: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
        labels = flow.math.add(ids, flow.constant(1, dtype=flow.int32, shape=(4,)))  # (computed: checked in the step)
        logits = flow.layers.dense(x, 5, name="fc")
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    x = np.ones((4, 3), np.float32)
    good = np.array([0, 1, 2, 3], np.int32)
    job(x, good)
    before = {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}
    with pytest.raises(OpRunError, match=r"received 5 at index \(1,\) \(in the part of device cpu:1"):
        job(x, np.array([0, 1, 2, 4], np.int32))
    for k, v in flow.get_all_variables().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    assert np.isfinite(job(x, good)).all()


@pytest.mark.parametrize("threshold_mb, fused", [(None, 4), (0, 0)])
def test_gradient_all_reduces_run_fused_as_oneflow_fuses_them(threshold_mb, fused):
    """The workers run the all-reduces of the gradients in buckets of up to
    ``nccl_fusion_threshold_mb`` (16 MB by default, OneFlow's collective-boxing fusion),
    one collective per bucket: the MLP's 4 gradients in one; 0 turns it off. Either way
    the job trains as on one device."""
    batches = _batches(3, (B, 20), 5)

    def make():
        if threshold_mb is not None:
            flow.config.collective_boxing.nccl_fusion_threshold_mb(threshold_mb)
        return _mlp_train_job()

    one, _ = _losses(1, make, batches)
    two, job = _losses(2, make, batches)
    assert_close_at_scale(two, one, RTOL)
    lines = [line for line in job.compiled_job.plan.source.splitlines() if "_nccl_logical_all_reduce" in line]
    assert sum(f"{fused} fused (_nccl_logical_all_reduce)" in line for line in lines) == (1 if fused else 0)
    assert len(lines) == (1 if fused else 4)


def test_a_data_source_on_one_device_keeps_the_job_data_parallel():
    """A batch made on one device (OneFlow-Benchmark BERT's reader on "0:0" with one data
    part) is held whole by every worker; the layers after it still split the batch (each
    worker slices its part) and the gradients are all-reduced, and under one seed the 2
    devices train as one device does (one device draws the batch the workers draw)."""
    def run(n):
        flow.clear_default_session()
        flow.manual_seed(0)
        flow.config.gpu_device_num(0)
        flow.config.cpu_device_num(n)

        @flow.global_function(type="train")
        def job() -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                x = flow.data.decode_random(shape=(16,), dtype=flow.float, batch_size=8,
                                            initializer=flow.random_normal_initializer())
            h = flow.layers.dense(x, 32, activation=flow.nn.relu, name="d1")
            loss = flow.math.reduce_mean(flow.layers.dense(h, 1, name="d2"))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
            return loss
        return [float(job().reshape(-1)[0]) for _ in range(3)], job

    one, _ = run(1)
    two, job = run(2)
    np.testing.assert_allclose(two, one, rtol=RTOL)
    proto = job.graph.proto
    sigs = _sbp.op_signatures(proto)
    assert sigs["d1-bias_add-fused"]["out_0"] == sigs["d2-bias_add-fused"]["out_0"] == "S(0)"
    # (the gradient of d2's input, from the folded constant gradient of the mean, splits too)
    assert sigs["d2-matmul_grad_a"]["out_0"] == "S(0)"
    assert "_nccl_logical_all_reduce" in _types(proto)
