"""Results that OneFlow's own op tests assert, computed by graphfront: OneFlow's framework
test ops, broadcasting to dynamic blobs, half-precision GELU gradients, empty gather_nd
indices, dynamic feeds, gradient watchers and the ordinal encoder, each checked against
numpy / PyTorch eager or OneFlow's documented values."""
import typing

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import FeedError, JobBuildError


def _config(view=None, data_type=flow.float):
    config = flow.FunctionConfig()
    config.default_data_type(data_type)
    if view is not None:
        config.default_logical_view(view)
    return config


def _sgd():
    return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.001]), momentum=0)


def _source(op_type, **attrs):
    b = flow.user_op_builder(flow.util.unique_str(op_type + "_")).Op(op_type).Output("out")
    for name, value in attrs.items():
        b = b.Attr(name, value)
    return b.Build().InferAndTryRun().RemoteBlobList()[0]


# ------------------------------------------------------------------ framework test source ops

def _source_job(op_type, devices="0:0", **attrs):
    @flow.global_function(function_config=_config(flow.scope.consistent_view()))
    def source_job():
        with flow.scope.placement("cpu", devices):
            return _source(op_type, **attrs)
    return source_job


def _mt19937_uniform(seed, n):
    """std::uniform_real_distribution<float> over std::mt19937(seed) (libstdc++): one
    32-bit word / 2**32 per sample, in float32."""
    words = np.random.RandomState(seed).randint(0, 2 ** 32, size=n, dtype=np.uint32)
    return words.astype(np.float32) / np.float32(2 ** 32)


def test_random_source_draws_oneflows_mt19937_stream_across_runs():
    job = _source_job("TestRandomSource", seed=0)
    first, second = job().get().numpy(), job().get().numpy()
    stream = _mt19937_uniform(0, 10)
    np.testing.assert_allclose(first, stream[:5], rtol=1e-6)
    np.testing.assert_allclose(second, stream[5:], rtol=1e-6)
    # the values OneFlow's own test states for seed 0
    np.testing.assert_allclose(first, [0.5488136, 0.59284467, 0.7151894, 0.8442659, 0.6027634], atol=1e-5)


@pytest.mark.parametrize("eager", [False, True])
def test_fixed_out_num_source_gives_each_device_its_share(eager):
    """OneFlow's test_TestSourceMultiGpuFixedOutNum, which OneFlow's CI ran in both modes:
    in an eager call too each device makes its own part, and the blob is the two parts."""
    flow.enable_eager_execution(eager)
    flow.config.cpu_device_num(2)
    y = _source_job("TestSourceMultiGpuFixedOutNum", devices="0:0-1", out_num=10)().get().numpy()
    np.testing.assert_array_equal(y, np.append(np.arange(5.0), np.arange(5.0)))


def test_static_and_dynamic_sources():
    np.testing.assert_array_equal(_source_job("TestSource")().get().numpy(), np.arange(5.0))
    np.testing.assert_array_equal(_source_job("TestDynamicSource")().get().numpy_list()[0], np.arange(3.0))


# ------------------------------------------------------------------ broadcast_to_compatible_with

def test_broadcast_to_compatible_with_follows_the_run_time_shapes_of_dynamic_blobs():
    rng = np.random.RandomState(1)
    x = rng.standard_normal((20, 1, 1)).astype(np.float32)
    a = rng.standard_normal((11, 1)).astype(np.float32)
    b = rng.standard_normal((7,)).astype(np.float32)

    @flow.global_function(function_config=_config(flow.scope.mirrored_view()))
    def job(x_def: tp.ListNumpy.Placeholder((23, 1, 1)), a_def: tp.ListNumpy.Placeholder((15, 1)),
            b_def: tp.ListNumpy.Placeholder((8,))):
        y = flow.broadcast_to_compatible_with(x_def, [flow.identity(a_def), flow.identity(b_def)])
        assert y.is_dynamic and y.shape == (23, 15, 8)
        return y

    y = job([x], [a], [b]).get().numpy_list()[0]
    np.testing.assert_array_equal(y, np.broadcast_to(x, (20, 11, 7)))


def test_broadcast_to_a_dynamic_blob_sums_the_gradient_over_its_run_time_rows():
    mask = np.array([[1, 0, 2], [0, 0, 3]], np.float32)   # argwhere: 3 rows of 2 coordinates
    got = {}

    @flow.global_function(type="train", function_config=_config(flow.scope.consistent_view()))
    def job(m: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        v = flow.get_variable("v", (1, 2), initializer=flow.constant_initializer(0.5))
        y = flow.broadcast_to_compatible_with(v, [flow.argwhere(m, dtype=flow.int32)])
        flow.watch(y, lambda value: got.setdefault("y", value))
        loss = flow.math.reduce_sum(y)
        _sgd().minimize(loss)
        flow.watch_diff(v, lambda g: got.setdefault("dv", g))
        return loss

    assert job(mask) == pytest.approx(0.5 * 3 * 2)
    np.testing.assert_array_equal(got["y"], np.full((3, 2), 0.5, np.float32))
    np.testing.assert_array_equal(got["dv"], np.full((1, 2), 3.0, np.float32))


# ------------------------------------------------------------------ gelu gradients in half precision

@pytest.mark.parametrize("fused", [False, True])
def test_half_gelu_gradient_is_the_float32_one_rounded_once(fused):
    rng = np.random.RandomState(2)
    x = rng.uniform(0, 10, (2, 10, 4, 4)).astype(np.float32)
    bias = rng.uniform(0, 10, (10,)).astype(np.float32)
    got = {}

    @flow.global_function(type="train", function_config=_config())
    def job(value: tp.Numpy.Placeholder(x.shape), b: tp.Numpy.Placeholder(bias.shape)) -> tp.Numpy:
        value = value + flow.get_variable("v1", (1,), initializer=flow.zeros_initializer())
        b = b + flow.get_variable("v2", (1,), initializer=flow.zeros_initializer())
        flow.watch_diff(value, lambda d: got.setdefault("dx", d))
        h, hb = flow.cast(value, flow.float16), flow.cast(b, flow.float16)
        if fused:
            y = flow.nn.fused_bias_add_gelu(h, hb, data_format="NCHW")
        else:
            y = flow.math.gelu(flow.nn.bias_add(h, hb, data_format="NCHW"))
        loss = flow.math.reduce_sum(flow.cast(y, flow.float))
        _sgd().minimize(loss)
        return loss

    job(x, bias)
    z = (torch.from_numpy(x).half() + torch.from_numpy(bias).half().view(1, -1, 1, 1)).float().requires_grad_()
    torch.nn.functional.gelu(z).sum().backward()  # float32 gradient of the half sum a + b
    np.testing.assert_array_equal(got["dx"], z.grad.half().float().numpy())


# ------------------------------------------------------------------ a CPU-only user op under a GPU placement

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")
def test_cpu_only_user_op_runs_on_the_cpu_inside_a_gpu_job():
    x = np.random.RandomState(3).standard_normal((2, 5)).astype(np.float32)
    config = _config()
    config.default_placement_scope(flow.scope.placement("gpu", "0:0"))
    tags = {}

    @flow.global_function(function_config=config)
    def job(x_def: tp.Numpy.Placeholder((2, 5))) -> tp.Numpy:
        y = (flow.user_op_builder("CpuOnlyRelu").Op("cpu_only_relu_test").Input("in", [x_def]).Output("out")
             .Build().InferAndTryRun().SoleOutputBlob())
        z = y * 2.0
        tags["y"], tags["z"] = y.parallel_conf.device_tag(), z.parallel_conf.device_tag()
        return z

    np.testing.assert_array_equal(job(x), np.maximum(x, 0) * 2)
    assert tags == {"y": "cpu", "z": "gpu"}


# ------------------------------------------------------------------ gather_nd with no index rows

def test_gather_nd_with_an_empty_dynamic_index_gives_an_empty_result_and_a_zero_gradient():
    x = np.random.RandomState(4).random_sample((12, 13, 7)).astype(np.float32)
    got = {}

    @flow.global_function(type="train", function_config=_config(flow.scope.mirrored_view()))
    def job(x_def: tp.ListNumpy.Placeholder((12, 13, 7)),
            index: tp.ListNumpy.Placeholder((5, 10, 2), dtype=flow.int32)) -> tp.ListNumpy:
        x_def = x_def + flow.cast_to_current_logical_view(
            flow.get_variable("params", (1,), initializer=flow.zeros_initializer()))
        y = flow.gather_nd(x_def, index)
        _sgd().minimize(y)
        flow.watch_diff(x_def, lambda d: got.setdefault("dx", d.numpy_list()[0]))
        return y

    index = np.zeros((5, 0, 2), np.int32)
    y = job([x], [index])[0]
    expected = torch.from_numpy(x)[tuple(torch.from_numpy(index).long().unbind(-1))].numpy()
    assert y.shape == expected.shape == (5, 0, 7)
    np.testing.assert_array_equal(got["dx"], np.zeros_like(x))


# ------------------------------------------------------------------ dynamic feeds

def _slice_dynamic_job(max_shape, slices):
    config = _config(flow.scope.mirrored_view())
    config.default_placement_scope(flow.scope.placement("cpu", "0:0"))

    @flow.global_function(type="predict", function_config=config)
    def job(x: tp.ListNumpy.Placeholder(max_shape)) -> tp.ListNumpy:
        return flow.slice_v2(x, slices)
    return job


def test_dynamic_feed_may_exceed_a_dim_of_the_maximum_shape_within_its_element_count():
    x = np.random.RandomState(5).random_sample((3, 6, 3, 3)).astype(np.float32)   # 162 <= 4 * 5 * 5 * 3
    job = _slice_dynamic_job((4, 5, 5, 3), [(1, None, None), (None, None, None), (None, None, None), (1, None, None)])
    np.testing.assert_array_equal(job([x])[0], x[1:, :, :, 1:])


def test_dynamic_feed_larger_than_the_maximum_element_count_or_of_another_rank_is_refused():
    job = _slice_dynamic_job((2, 3), [(None, None, None), (1, None, None)])
    np.testing.assert_array_equal(job([np.ones((1, 6), np.float32)])[0], np.ones((1, 5), np.float32))
    for shape in [(7, 1), (6,)]:
        with pytest.raises(FeedError, match=rf"argument 'x': expected shape rank 2 and at most 6 elements "
                                            rf"\(maximum shape \(2, 3\)\), received \({shape[0]},"):
            job([np.ones(shape, np.float32)])


def test_cast_to_static_shape_of_a_feed_exceeding_a_dim_keeps_its_elements_in_order():
    x = np.arange(8, dtype=np.float32).reshape(1, 8)

    @flow.global_function(function_config=_config(flow.scope.mirrored_view()))
    def job(x_def: tp.ListNumpy.Placeholder((3, 4))) -> tp.ListNumpy:
        return flow.cast_to_static_shape(x_def)

    np.testing.assert_array_equal(job([x])[0], np.append(x.ravel(), np.zeros(4, np.float32)).reshape(3, 4))


# ------------------------------------------------------------------ watch_diff in a job that minimize makes trainable

def test_watch_diff_before_minimize_in_a_predict_job_sees_the_gradient():
    h = np.random.RandomState(6).random_sample((3, 4)).astype(np.float32)
    got = {}

    @flow.global_function(type="predict", function_config=_config())
    def job(h_def: tp.Numpy.Placeholder((3, 4))) -> typing.Tuple[tp.Numpy, tp.Numpy]:
        var = flow.get_variable("var", (1,), initializer=flow.constant_initializer(1.0), trainable=True)
        scaled = h_def * var
        flow.watch_diff(scaled, lambda g: got.setdefault("dh", g))  # before minimize, as OneFlow's test
        y = flow.matmul(scaled, scaled, transpose_b=True)
        _sgd().minimize(flow.math.reduce_sum(y))
        return y, scaled

    y, _ = job(h)
    t = torch.from_numpy(h).requires_grad_()
    (t @ t.T).sum().backward()
    np.testing.assert_allclose(y, h @ h.T, rtol=1e-6)
    np.testing.assert_allclose(got["dh"], t.grad.numpy(), rtol=1e-6)


def test_watch_diff_in_a_predict_job_that_never_minimizes_is_refused_at_its_line():
    @flow.global_function(type="predict", function_config=_config())
    def job(h_def: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        flow.watch_diff(h_def, lambda g: None)  # MARK-watch-diff
        return h_def * 2.0

    with pytest.raises(JobBuildError, match=r"flow.watch_diff: job 'job' is a predict job \(no optimizer.minimize "
                                            r"in its body\)(.|\n)*MARK-watch-diff"):
        job(np.ones(3, np.float32))


# ------------------------------------------------------------------ categorical_ordinal_encoder

def _encoder_job(size, capacity):
    @flow.global_function(function_config=_config(flow.scope.consistent_view()))
    def job(x: tp.Numpy.Placeholder((size,), dtype=flow.int64)) -> typing.Tuple[tp.Numpy, tp.Numpy]:
        with flow.scope.placement("cpu", "0:0"):
            return (flow.layers.categorical_ordinal_encoder(x, capacity=capacity),
                    flow.layers.categorical_ordinal_encoder(x, capacity=capacity, name="encode1"))
    return job


def test_ordinal_encoder_numbers_keys_by_first_appearance_across_runs_of_a_nearly_full_table():
    """OneFlow's numbering (1, 2, ... by first appearance; hash 0 -> 0; the table kept
    between runs) against a dict, with the table filled to 90% of its capacity."""
    rng = np.random.RandomState(7)
    size, capacity, iters = 2000, 10000, 12
    tokens = rng.randint(-2 ** 62, 2 ** 62, size=9000, dtype=np.int64)
    tokens[0] = 0
    job, ordinals = _encoder_job(size, capacity), {0: 0}
    for i in range(iters):
        x = tokens[rng.permutation(9000)[:size]] if i < iters - 1 else tokens[rng.randint(0, 9000, size)]
        y, z = job(x)
        expected = [ordinals.setdefault(k, len(ordinals)) for k in x.tolist()]
        np.testing.assert_array_equal(y, expected)
        np.testing.assert_array_equal(z, expected)
    assert len(ordinals) - 1 == int(flow.get_all_variables()["CategoricalOrdinalEncoder-Size"].numpy()[0])


def test_ordinal_encoder_refuses_a_new_key_when_the_table_is_full():
    job = _encoder_job(4, 4)
    np.testing.assert_array_equal(job(np.array([5, 9, 5, 13], np.int64))[0], [1, 2, 1, 3])
    with pytest.raises(Exception, match="hash table of capacity 4 is full"):
        job(np.array([7, 11, 5, 9], np.int64))


@pytest.mark.slow
def test_ordinal_encoder_runs_oneflows_large_cpu_case():
    """OneFlow's own CPU case: 100 runs of 20000 keys drawn from 200000 into two tables of
    capacity 220000 (which end up about 90% full)."""
    rng = np.random.RandomState(8)
    tokens = rng.randint(-2 ** 62, 2 ** 62, size=200000, dtype=np.int64)
    job = _encoder_job(20000, 220000)
    draws = [tokens[rng.randint(0, 200000, 20000)] for _ in range(100)]
    for x in draws:
        y, z = job(x)
    distinct = np.unique(np.concatenate(draws)).size
    np.testing.assert_array_equal(y, z)
    assert int(flow.get_all_variables()["encode1-Size"].numpy()[0]) == distinct and 1 <= y.min() <= y.max() <= distinct


def test_ctc_loss_zero_infinity_zeros_an_impossible_alignment_as_torch():
    """A target longer than its input has no alignment: its loss is inf, or 0 (and no
    gradient) with zero_infinity, as torch.nn.functional.ctc_loss."""
    import torch
    t, n, c = 4, 2, 5
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((t, n, c)).astype(np.float32)
    targets = np.array([[1, 2, 3, 4, 1, 2], [1, 2, 0, 0, 0, 0]], np.int32)   # the first needs >= 7 steps
    lengths, target_lengths = np.array([4, 4], np.int32), np.array([6, 2], np.int32)
    grads = {}

    @flow.global_function(type="train")
    def job(lp: tp.Numpy.Placeholder((t, n, c)), tg: tp.Numpy.Placeholder((n, 6), dtype=flow.int32),
            il: tp.Numpy.Placeholder((n,), dtype=flow.int32),
            tl: tp.Numpy.Placeholder((n,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (t, n, c), initializer=flow.zeros_initializer())
            x = flow.nn.logsoftmax(lp + w, axis=-1)
            loss = flow.ctc_loss(x, tg, il, tl, reduction="none", zero_infinity=True)
            flow.watch_diff(w, lambda g: grads.setdefault("w", g))
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return loss
    got = job(logits, targets, lengths, target_lengths)
    x = torch.tensor(logits, requires_grad=True)
    want = torch.nn.functional.ctc_loss(torch.log_softmax(x, -1), torch.tensor(targets).long(),
                                        torch.tensor(lengths).long(), torch.tensor(target_lengths).long(),
                                        reduction="none", zero_infinity=True)
    want.sum().backward()
    assert got[0] == 0.0 and np.isfinite(got).all()
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(grads["w"], x.grad.numpy(), rtol=1e-4, atol=1e-6)
