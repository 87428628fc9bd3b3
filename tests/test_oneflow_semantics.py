"""Results that must equal OneFlow's (checked against numpy / PyTorch eager / TensorFlow's
rules computed by hand): integer division, dynamic (``ListNumpy``) inputs, transposed
convolution with SAME padding, softmax cross-entropy gradient, float16 accumulation,
layer weight names, grouped NHWC convolution backward, seeded dropout masks."""
import random

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import OpRunError
from graphfront.framework.session import default_session

RNG = np.random.RandomState(11)


def _sgd(lr=1.0):
    return flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0)


# ------------------------------------------------------------------ 1. integer divide

@pytest.mark.parametrize("dtype", [flow.int32, flow.int64])
def test_integer_divide_truncates_to_an_integer_result(dtype):
    x = np.array([-7, 7, 5, -8], dtype.np)
    y = np.array([2, 2, -3, 3], dtype.np)

    @flow.global_function(type="predict")
    def job(a: tp.Numpy.Placeholder((4,), dtype=dtype), b: tp.Numpy.Placeholder((4,), dtype=dtype),
            c: tp.Numpy.Placeholder((1,), dtype=dtype)) -> tp.Bundle[tp.Numpy]:
        out = (flow.math.divide(a, b), flow.math.divide(a, c), flow.math.divide(a, flow.reshape(b, (4, 1))))
        assert all(o.dtype == dtype for o in out)
        return out

    same, by_tensor, broadcast = job(x, y, np.array([2], dtype.np))
    # OneFlow's kernels divide integers as C++ does: truncation toward zero
    expected = np.trunc(x / y).astype(dtype.np)
    assert same.dtype == dtype.np and by_tensor.dtype == dtype.np
    np.testing.assert_array_equal(same, expected)
    np.testing.assert_array_equal(by_tensor, np.array([-3, 3, 2, -4], dtype.np))
    np.testing.assert_array_equal(broadcast, np.trunc(x[None, :] / y[:, None]).astype(dtype.np))


# ------------------------------------------------------------------ 2. dynamic inputs

def _dyn(build, shapes_dtypes, feeds, n_out=1):
    """Predict job over ListNumpy placeholders; returns one result list per feed tuple."""
    import inspect
    import typing
    params = [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=tp.ListNumpy.Placeholder(s, dtype=d))
              for i, (s, d) in enumerate(shapes_dtypes)]
    ret = tp.ListNumpy if n_out == 1 else typing.Tuple[tuple([tp.ListNumpy] * n_out)]

    def job(*blobs):
        return build(*blobs)
    job.__signature__ = inspect.Signature(params, return_annotation=ret)
    job.__name__ = "dyn_job"
    f = flow.global_function(type="predict")(job)
    return [f(*[[a] for a in feed]) for feed in feeds]


def test_slice_v2_of_a_dynamic_blob_resolves_against_the_runtime_shape():
    part = RNG.standard_normal((2, 5)).astype(np.float32)
    (out,) = _dyn(lambda x: flow.slice_v2(x, [(None, None, None), (-3, None, None)]), [((2, 8), flow.float32)],
                  [(part,)])
    np.testing.assert_array_equal(out[0], part[:, -3:])
    (out,) = _dyn(lambda x: flow.slice_v2(x, [(None, None, None), (1, -1, 2)]), [((2, 8), flow.float32)],
                  [(part,)])
    np.testing.assert_array_equal(out[0], part[:, 1:-1:2])
    (out,) = _dyn(lambda x: flow.slice_v2(x, [(None, None, None), (None, None, -1)]), [((2, 8), flow.float32)],
                  [(part,)])
    np.testing.assert_array_equal(out[0], part[:, ::-1])


def test_reshape_and_reduce_mean_of_a_dynamic_blob_follow_its_runtime_rows():
    # flow.reshape resolved the -1 against the static shape ((10, 4) -> (20, 2): torch's
    # RuntimeError for 3 run-time rows), and reduce_mean divided by the static count (10 rows)
    part = RNG.standard_normal((3, 4)).astype(np.float32)
    outs = _dyn(lambda x: (flow.reshape(x, (-1, 2)), flow.math.reduce_mean(x, axis=0), flow.math.reduce_mean(x),
                           flow.elem_cnt(x), flow.math.reduced_shape_elem_cnt(x, [0], dtype=flow.int64)),
                [((10, 4), flow.float32)], [(part,), (part[:1],)], n_out=5)
    for out, rows in zip(outs, (part, part[:1])):
        np.testing.assert_array_equal(out[0][0], rows.reshape(-1, 2))
        np.testing.assert_allclose(out[1][0], rows.mean(0), rtol=1e-6)
        np.testing.assert_allclose(out[2][0], [rows.mean()], rtol=1e-6)
        assert out[3][0].tolist() == [rows.size] and out[3][0].dtype == np.int32
        assert out[4][0].tolist() == [len(rows)] and out[4][0].dtype == np.int64
    kinds = [op.WhichOneof("op_type") for op in default_session().jobs["dyn_job"].job.net.op]
    assert kinds.count("dynamic_reshape_conf") == 1  # (OneFlow's ops: elem_cnt, reduced_shape_elem_cnt, the means)
    assert kinds.count("shape_elem_cnt_conf") == 4


def test_a_dynamic_reshape_that_does_not_fit_the_runtime_rows_is_the_ops_error():
    with pytest.raises(OpRunError, match=r"op 'DynamicReshape_\d+' \(dynamic_reshape_conf\): input 'in' of run-time "
                                         r"shape \(3, 4\) cannot take the shape \(-1, 8\)"):
        _dyn(lambda x: flow.reshape(x, (-1, 8)), [((10, 4), flow.float32)],
             [(np.zeros((3, 4), np.float32),)])
    with pytest.raises(flow.JobBuildError, match=r"input 'in' of shape \(10, 4\) cannot take the shape \(-1, 3\)"):
        _dyn(lambda x: flow.reshape(x, (-1, 3)), [((10, 4), flow.float32)], [(np.zeros((3, 4), np.float32),)])


def test_nonzero_is_argwhere_transposed():
    a = np.array([[0, 1.5, 0], [2, 0, -3]], np.float32)
    (out,) = _dyn(lambda x: flow.nonzero(x), [((2, 3), flow.float32)], [(a,)])
    np.testing.assert_array_equal(out[0], np.array(np.nonzero(a)))


def test_dynamic_gather_nd_scatter_nd_expand_in_top_k_use_runtime_shapes():
    params = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[2], [0]], np.int32)
    outs = _dyn(lambda p, i: flow.gather_nd(p, i), [((5, 4), flow.float32), ((4, 1), flow.int32)],
                [(params, idx)])
    np.testing.assert_array_equal(outs[0][0], params[[2, 0]])

    updates = RNG.standard_normal((2, 3)).astype(np.float32)
    outs = _dyn(lambda i, u: flow.scatter_nd(i, u, (4, 3)), [((4, 1), flow.int32), ((4, 3), flow.float32)],
                [(idx, updates)])
    ref = np.zeros((4, 3), np.float32)
    ref[2] += updates[0]
    ref[0] += updates[1]
    np.testing.assert_array_equal(outs[0][0], ref)

    x = RNG.standard_normal((2, 1)).astype(np.float32)
    outs = _dyn(lambda a: flow.expand(a, (2, -1, 3)), [((4, 1), flow.float32)], [(x,)])
    np.testing.assert_array_equal(outs[0][0], np.broadcast_to(x, (2, 2, 3)))

    pred = RNG.standard_normal((3, 6)).astype(np.float32)
    targets = np.array([1, 4, 0], np.int32)
    outs = _dyn(lambda t, p: flow.math.in_top_k(t, p, 2), [((8,), flow.int32), ((8, 6), flow.float32)],
                [(targets, pred)])
    ref = (np.sum(pred > pred[np.arange(3), targets][:, None], axis=1) < 2).astype(np.int8)
    np.testing.assert_array_equal(outs[0][0], ref)


def test_concat_max_dim_size_bounds_the_static_inputs_and_the_runtime_size():
    # OneFlow counts only the static inputs against max_dim_size (8 >= 3), the dynamic (6, 2)
    # one is a bound; the run-time size (3 + 4 rows) is checked by the kernel
    s = RNG.standard_normal((3, 2)).astype(np.float32)
    d = RNG.standard_normal((4, 2)).astype(np.float32)
    outs = _dyn(lambda a: flow.concat([a, flow.constant(1.0, dtype=flow.float32, shape=(3, 2))], axis=0, max_dim_size=8),
                [((6, 2), flow.float32)], [(d,)])
    np.testing.assert_array_equal(outs[0][0], np.concatenate([d, np.ones((3, 2), np.float32)]))
    with pytest.raises(OpRunError, match="concatenate to size 9 on axis 0, more than attr 'max_dim_size' 8"):
        _dyn(lambda a: flow.concat([a, flow.constant(1.0, dtype=flow.float32, shape=(3, 2))], axis=0, max_dim_size=8),
             [((6, 2), flow.float32)], [(np.concatenate([d, s[:2]]),)])


def test_in_top_k_of_dynamic_blobs_checks_the_runtime_rows_and_a_non_finite_row_is_0():
    # the static shapes of dynamic blobs are bounds: (10,) targets with (7, 6) predictions
    pred = RNG.standard_normal((3, 6)).astype(np.float32)
    pred[1, 2] = np.inf  # OneFlow's (and TensorFlow's) kernel: a row with a non-finite score gives 0
    pred[2, 0] = np.nan
    targets = np.array([1, 4, 0], np.int32)
    outs = _dyn(lambda t, p: flow.math.in_top_k(t, p, 6), [((10,), flow.int32), ((7, 6), flow.float32)],
                [(targets, pred)])
    np.testing.assert_array_equal(outs[0][0], [1, 0, 0])
    with pytest.raises(OpRunError, match="'targets' has 2 rows, 'predictions' 3"):
        _dyn(lambda t, p: flow.math.in_top_k(t, p, 6), [((10,), flow.int32), ((7, 6), flow.float32)],
             [(targets[:2], pred)])


def test_dim_gather_and_concat_gradients_of_dynamic_blobs_have_the_runtime_shape():
    part = RNG.standard_normal((3, 4)).astype(np.float32)
    index = np.array([[1, 0], [2, 2], [0, 1]], np.int64)

    # dim_gather over a dynamic blob, with a dynamic index
    grads = {}

    def keep(d: tp.Numpy):
        grads["w"] = d

    @flow.global_function(type="train")
    def job(x: tp.ListNumpy.Placeholder((5, 4), dtype=flow.float32),
            i: tp.ListNumpy.Placeholder((5, 2), dtype=flow.int64)) -> tp.ListNumpy:
        w = flow.get_variable("w", (4,), initializer=flow.ones_initializer())
        y = flow.dim_gather(x * w, 1, i)
        flow.watch_diff(w, keep)
        _sgd(0.0).minimize(flow.math.reduce_sum(y * y))
        return y

    (y,) = job([part], [index])
    t, w = torch.tensor(part), torch.ones(4, requires_grad=True)
    y_ref = torch.gather(t * w, 1, torch.tensor(index))
    (y_ref * y_ref).sum().backward()
    np.testing.assert_allclose(y, y_ref.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(grads["w"], w.grad.numpy(), rtol=1e-5)

    flow.clear_default_session()
    grads.clear()

    @flow.global_function(type="train")
    def cat(x: tp.ListNumpy.Placeholder((5, 4), dtype=flow.float32)) -> tp.ListNumpy:
        w = flow.get_variable("w", (4,), initializer=flow.ones_initializer())
        xw = x * w
        y = flow.concat([xw, xw * 2.0], axis=0)
        flow.watch_diff(w, keep)
        _sgd(0.0).minimize(flow.math.reduce_sum(y * y))
        return y

    (y,) = cat([part])
    w = torch.ones(4, requires_grad=True)
    xw = torch.tensor(part) * w
    y_ref = torch.cat([xw, xw * 2.0], 0)
    (y_ref * y_ref).sum().backward()
    np.testing.assert_allclose(y, y_ref.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(grads["w"], w.grad.numpy(), rtol=1e-5)


# ------------------------------------------------------------------ 3. conv2d_transpose SAME

def _tf_same_transpose(x, w, out_hw, stride):
    """TensorFlow's conv2d_transpose with SAME padding (NCHW, filter (in, out, kh, kw)): the
    full transposed convolution cropped by floor(total / 2) before (the forward conv's
    SAME split puts the larger half after)."""
    full = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), stride=stride)
    crops = []
    for i in range(2):
        total = full.shape[2 + i] - out_hw[i]
        crops.append(total // 2)
    return full[:, :, crops[0]:crops[0] + out_hw[0], crops[1]:crops[1] + out_hw[1]].numpy()


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_conv2d_transpose_same_with_odd_total_padding_matches_tensorflow(data_format):
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 5, 5)).astype(np.float32)
    ref = _tf_same_transpose(x, w, (8, 8), 2)  # total = (4-1)*2 + 5 - 8 = 3: odd
    first = data_format == "NCHW"
    xin = x if first else x.transpose(0, 2, 3, 1).copy()
    win = w if first else w.transpose(0, 2, 3, 1).copy()
    oshape = (2, 2, 8, 8) if first else (2, 8, 8, 2)

    @flow.global_function(type="predict")
    def job(a: tp.Numpy.Placeholder(xin.shape), f: tp.Numpy.Placeholder(win.shape)) -> tp.Numpy:
        return flow.nn.conv2d_transpose(a, f, output_shape=oshape, strides=2, padding="SAME",
                                        data_format=data_format)

    out = job(xin, win)
    if not first:
        out = out.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ 4. softmax_cross_entropy grad

def test_softmax_cross_entropy_gradient_is_prob_minus_label():
    logits = RNG.standard_normal((3, 5)).astype(np.float32)
    labels = RNG.uniform(0, 1, (3, 5)).astype(np.float32)  # rows do not sum to 1
    grads = {}

    def keep(d: tp.Numpy):
        grads["w"] = d

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((3, 5)), y: tp.Numpy.Placeholder((3, 5))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 5), initializer=flow.zeros_initializer())
        loss = flow.nn.softmax_cross_entropy_with_logits(y, x + w)
        flow.watch_diff(w, keep)
        _sgd(0.0).minimize(loss)
        return loss

    job(logits, labels)
    prob = torch.softmax(torch.tensor(logits), -1).numpy()
    np.testing.assert_allclose(grads["w"], prob - labels, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ 5. float16

def test_float16_unsorted_segment_sum_accumulates_in_float32():
    data = np.full((4096, 1), 0.1, np.float16)
    ids = np.zeros((4096,), np.int32)

    @flow.global_function(type="predict")
    def job(d: tp.Numpy.Placeholder((4096, 1), dtype=flow.float16),
            i: tp.Numpy.Placeholder((4096,), dtype=flow.int32)) -> tp.Numpy:
        return flow.math.unsorted_segment_sum(d, i, 2)

    out = job(data, ids)
    assert out.dtype == np.float16
    ref = np.float16(data.astype(np.float32).sum())
    np.testing.assert_array_equal(out[:, 0], np.array([ref, 0], np.float16))


def test_float16_batch_norm_with_moving_statistics_differentiates():
    # float16 x with float32 gamma / moving statistics (as OneFlow's layers create them)
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float16)
    grads = {}

    def keep(d: tp.Numpy):
        grads["w"] = d

    @flow.global_function(type="train")
    def job(images: tp.Numpy.Placeholder((4, 3, 2, 2), dtype=flow.float16)) -> tp.Numpy:
        w = flow.get_variable("w", (1, 3, 1, 1), dtype=flow.float16, initializer=flow.ones_initializer())
        y = flow.layers.batch_normalization(images * w, axis=1, name="bn", training=False,
                                            gamma_initializer=flow.constant_initializer(2.0),
                                            moving_variance_initializer=flow.constant_initializer(4.0))
        flow.watch_diff(w, keep)
        _sgd(0.0).minimize(flow.math.reduce_sum(y))
        return y

    y = job(x)
    assert y.dtype == np.float16 and grads["w"].dtype == np.float16
    # y = 2 * x * w / sqrt(4 + eps): d sum(y) / dw_c = sum over (n, h, w) of x / sqrt(4 + eps)
    np.testing.assert_allclose(y.astype(np.float32), x.astype(np.float32) * 2 / np.sqrt(4 + 1e-5),
                               rtol=2e-3, atol=2e-3)
    ref = x.astype(np.float32).sum(axis=(0, 2, 3)) * 2 / np.sqrt(4 + 1e-5)
    np.testing.assert_allclose(grads["w"].reshape(3).astype(np.float32), ref, rtol=5e-3, atol=5e-3)


# ------------------------------------------------------------------ 6. layers weight_name

def test_layer_weight_name_is_a_top_level_variable_name():
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)

    @flow.global_function(type="predict")
    def job(a: tp.Numpy.Placeholder((1, 2, 5, 5))) -> tp.Numpy:
        return flow.layers.conv2d(a, 3, 3, name="conv", weight_name="my_conv_weight", bias_name="my_bias")

    out = job(x)
    variables = flow.get_all_variables()
    w, b = variables["my_conv_weight"].numpy(), variables["my_bias"].numpy()
    assert w.shape == (3, 2, 3, 3) and b.shape == (3,)
    assert not any(k.startswith("conv-") for k in variables)
    ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ 7. grouped conv NHWC backward

def test_grouped_conv_nhwc_backward_matches_torch():
    x = RNG.standard_normal((2, 5, 5, 4)).astype(np.float32)
    grads = {}

    def keep(d: tp.Numpy):
        grads["w"] = d

    @flow.global_function(type="train")
    def job(a: tp.Numpy.Placeholder((2, 5, 5, 4))) -> tp.Numpy:
        w = flow.get_variable("w", (6, 3, 3, 2), initializer=flow.random_normal_initializer())
        y = flow.nn.conv2d(a, w, strides=1, padding="VALID", data_format="NHWC", groups=2)
        flow.watch_diff(w, keep)
        _sgd(0.0).minimize(flow.math.reduce_sum(y * y))
        return y

    y = job(x)
    w_np = flow.get_all_variables()["w"].numpy()
    w = torch.tensor(w_np.transpose(0, 3, 1, 2).copy(), requires_grad=True)
    y_ref = torch.nn.functional.conv2d(torch.tensor(x.transpose(0, 3, 1, 2).copy()), w, groups=2)
    (y_ref * y_ref).sum().backward()
    np.testing.assert_allclose(y, y_ref.detach().numpy().transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["w"], w.grad.numpy().transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------ 8. no rank-0 results

def test_results_that_would_be_rank_0_have_shape_1():
    """OneFlow's single-client API has no rank-0 blobs: a reduction over every axis (and so a
    loss with reduction "mean"/"sum"), the argmax of a vector and a squeeze of every axis give
    shape (1,)."""
    x = RNG.uniform(0.1, 0.9, (2, 3)).astype(np.float32)
    t = RNG.uniform(0, 1, (2, 3)).astype(np.float32)
    v = np.array([0.5, 2.5, -1.0, 2.0], np.float32)

    @flow.global_function(type="predict")
    def job(a: tp.Numpy.Placeholder((2, 3)), b: tp.Numpy.Placeholder((2, 3)),
            c: tp.Numpy.Placeholder((4,))) -> tp.Bundle[tp.Numpy]:
        out = (flow.math.reduce_sum(a), flow.math.reduce_mean(a), flow.math.reduce_max(a, axis=[0, 1]),
               flow.math.reduce_any(a), flow.math.reduce_sum(c), flow.math.reduce_sum(a, keepdims=True),
               flow.nn.BCELoss(a, b, reduction="mean"), flow.nn.L1Loss(a, b, reduction="sum"),
               flow.math.argmax(c), flow.squeeze(flow.reshape(c, (1, 4, 1)), [0, 2]),
               flow.squeeze(flow.reshape(flow.math.reduce_sum(c), (1, 1)), [0, 1]))
        assert [o.shape for o in out] == [(1,)] * 5 + [(1, 1), (1,), (1,), (1,), (4,), (1,)]
        return out

    (total, mean, biggest, some, vsum, kept, bce, l1, amax, sq, sq_all) = job(x, t, v)
    np.testing.assert_allclose(total, [x.sum()], rtol=1e-6)
    np.testing.assert_allclose(mean, [x.mean()], rtol=1e-6)
    np.testing.assert_array_equal(biggest, [x.max()])
    np.testing.assert_array_equal(some, [True])
    np.testing.assert_allclose(vsum, [v.sum()], rtol=1e-6)
    np.testing.assert_allclose(kept, [[x.sum()]], rtol=1e-6)
    np.testing.assert_allclose(bce, [np.mean(-(t * np.log(x) + (1 - t) * np.log(1 - x)))], rtol=1e-5)
    np.testing.assert_allclose(l1, [np.abs(t - x).sum()], rtol=1e-5)
    np.testing.assert_array_equal(amax, [1])
    np.testing.assert_array_equal(sq, v)
    np.testing.assert_allclose(sq_all, [v.sum()], rtol=1e-6)


def test_a_mean_loss_of_shape_1_trains_as_the_mean():
    x = RNG.standard_normal((3, 4)).astype(np.float32)

    @flow.global_function(type="train")
    def job(a: tp.Numpy.Placeholder((3, 4))) -> tp.Numpy:
        w = flow.get_variable("w", (3, 4), initializer=flow.zeros_initializer())
        loss = flow.math.reduce_mean(flow.math.square(a - w))
        _sgd(0.5).minimize(loss)
        return loss

    loss = job(x)
    assert loss.shape == (1,)
    np.testing.assert_allclose(loss, [np.mean(x * x)], rtol=1e-6)
    # d mean((a - w)^2) / dw = -2 (a - w) / 12; one step of lr 0.5 from w = 0
    np.testing.assert_allclose(job(x), [np.mean((x - x / 12) ** 2)], rtol=1e-5)
# ------------------------------------------------------------------ 8. dropout masks

def _mt19937_words(seed, n):
    """The first ``n`` 32-bit outputs of C++'s ``std::mt19937(seed)``: its ``seed()`` state
    (Knuth's initialisation, multiplier 1812433253) loaded into Python's own Mersenne Twister."""
    state = [seed & 0xFFFFFFFF]
    for i in range(1, 624):
        state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & 0xFFFFFFFF)
    gen = random.Random()
    gen.setstate((3, tuple(state) + (624,), None))
    return [gen.getrandbits(32) for _ in range(n)]


def _oneflow_cpu_keep(words, rate):
    """OneFlow's CPU ``random_mask_like``: keep where ``std::uniform_real_distribution<float>``
    (a word / 2**32 in float32) exceeds ``rate``."""
    return np.array(words, np.float32) * np.float32(2.0 ** -32) > np.float32(rate)


def test_reference_generator_is_std_mt19937():
    # the C++ standard fixes the 10000th output of a default-seeded (5489) std::mt19937
    assert _mt19937_words(5489, 10000)[-1] == 4123659995


def test_seeded_dropout_draws_oneflows_cpu_masks_run_after_run():
    rate, seed, shape = 0.75, 12345, (2, 2, 2, 2)

    @flow.global_function(type="train")
    def job() -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            x = flow.get_variable("x", shape, initializer=flow.ones_initializer())
            y = flow.nn.dropout(x, rate=rate, seed=seed, name="dropout")
            _sgd(0.0).minimize(flow.math.square(y))
            return y

    words = _mt19937_words(seed, 32)
    for step in range(2):  # the kernel's stream goes on: the second run draws the next 16 words
        keep = _oneflow_cpu_keep(words[16 * step:16 * (step + 1)], rate).reshape(shape)
        np.testing.assert_array_equal(job(), np.where(keep, np.float32(1 / (1 - rate)), 0))
    # the 16 words of run one with seed 12345 keep elements 0, 1, 7, 11, 12, 15 (OneFlow's own result)
    np.testing.assert_array_equal(np.flatnonzero(_oneflow_cpu_keep(words[:16], rate)), [0, 1, 7, 11, 12, 15])

    ops = {op.name: op for op in job.graph.proto.net.op}
    dropout = ops["dropout"].user_conf
    assert dropout.op_type_name == "dropout"
    assert dropout.input["mask"].s[0] == "dropout-dropout_random_mask_like/out_0"
    assert dropout.attr["scale"].at_float == pytest.approx(1 / (1 - rate))
    mask = ops["dropout-dropout_random_mask_like"].user_conf
    assert mask.op_type_name == "random_mask_like" and mask.attr["seed"].at_int64 == seed


def test_dropout_and_fused_bias_add_dropout_with_one_seed_drop_the_same_elements():
    x = RNG.uniform(0, 10, (4, 6, 3)).astype(np.float32)
    b = RNG.uniform(0, 10, (6,)).astype(np.float32)
    dx = {}

    def keep(name):
        def handler(d: tp.Numpy):
            dx[name] = d
        return handler

    @flow.global_function(type="train")
    def job(v: tp.Numpy.Placeholder((4, 6, 3)), bias: tp.Numpy.Placeholder((6,))) -> tp.Bundle[tp.Numpy]:
        with flow.scope.placement("cpu", "0:0"):
            zero = flow.get_variable("zero", (1,), initializer=flow.zeros_initializer())
            v1, v2 = flow.identity(v + zero), flow.identity(v + zero)
            flow.watch_diff(v1, keep("v1"))
            flow.watch_diff(v2, keep("v2"))
            y1 = flow.nn.dropout(flow.nn.bias_add(v1, bias), rate=0.4, seed=99, name="plain")
            y2 = flow.nn.fused_bias_add_dropout(v2, bias, rate=0.4, seed=99)
            _sgd(0.0).minimize(flow.math.reduce_sum(y1 * y1 + y2))
            return y1, y2

    y1, y2 = job(x, b)
    kept = _oneflow_cpu_keep(_mt19937_words(99, x.size), 0.4).reshape(x.shape)
    np.testing.assert_allclose(y1, np.where(kept, (x + b[:, None]) / np.float32(0.6), 0), rtol=1e-6)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(dx["v1"], np.where(kept, 2 * y1 / np.float32(0.6), 0), rtol=1e-5)
    np.testing.assert_allclose(dx["v2"], np.where(kept, 1 / np.float32(0.6), 0), rtol=1e-6)
