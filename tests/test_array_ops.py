"""Array ops (graphfront.ops.array_ops) and their flow.* wrappers (graphfront.array).

Forward values and generated gradients are checked against PyTorch eager autograd or
numpy; build-time errors are matched by message.
"""
import inspect
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import dtypes
from graphfront.ops import registry

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _keeper(store, key):
    def keep(g: tp.Numpy):
        store[key] = g
    return keep


def run(fn, *arrays, train=True, const=()):
    """Run ``fn(*blobs)`` in a fresh session, in a job whose inputs are placeholders fed with ``arrays``.

    In a train job each float input (except the indices in ``const``) is made trainable
    (placeholder + zero variable) and the loss is the sum of every float output, so the
    returned grads are d sum(outputs) / d input, as torch's ``sum(outputs).backward()``.
    Returns ``(outputs, grads)``: lists of ndarrays (grads None for untracked inputs).
    """
    flow.clear_default_session()
    grads = {}
    floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f" and i not in const]

    def body(*blobs):
        with flow.scope.placement("cpu", "0:0"):
            ins = list(blobs)
            if train:
                for i in floats:
                    w = flow.get_variable(f"w{i}", blobs[i].shape, initializer=flow.zeros_initializer())
                    ins[i] = blobs[i] + w

                    flow.watch_diff(ins[i], _keeper(grads, i))
            outs = fn(*ins)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if train:
                loss = flow.math.add_n([flow.math.reduce_sum(o) for o in outs if o.dtype.is_floating_point])
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return outs

    params = [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=tp.Numpy.Placeholder(a.shape, dtype=dtypes.from_numpy(a.dtype)))
              for i, a in enumerate(arrays)]
    body.__signature__ = inspect.Signature(params, return_annotation=tp.Bundle[tp.Numpy])
    body.__name__ = f"job_{fn.__name__ if hasattr(fn, '__name__') else 'fn'}"
    job = flow.global_function(type="train" if train else "predict")(body)
    outs = job(*arrays)
    return outs, [grads.get(i) for i in range(len(arrays))]


def torch_ref(fn, *arrays):
    """``fn(*tensors)`` in torch eager; returns (outputs, grads of sum(float outputs))."""
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    outs = fn(*ts)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    total = sum(o.sum() for o in outs if o.is_floating_point())
    if isinstance(total, torch.Tensor) and total.requires_grad:
        total.backward()
    return [o.detach().numpy() for o in outs], [t.grad.numpy() if t.grad is not None else None for t in ts]


def check(fn, ref, *arrays, rtol=1e-5, atol=1e-6, const=()):
    """Forward outputs and input gradients of ``fn`` (graphfront) equal those of ``ref`` (torch)."""
    outs, grads = run(fn, *arrays, const=const)
    routs, rgrads = torch_ref(ref, *arrays)
    assert len(outs) == len(routs)
    for o, r in zip(outs, routs):
        assert o.shape == r.shape and o.dtype == r.dtype
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
    for i, a in enumerate(arrays):
        if a.dtype.kind == "f" and i not in const:
            np.testing.assert_allclose(grads[i], rgrads[i], rtol=rtol, atol=atol)


def op_types(job_fn):
    return [op.user_conf.op_type_name if op.WhichOneof("op_type") == "user_conf" else op.WhichOneof("op_type")
            for op in job_fn.compiled_job.job.net.op]


# ------------------------------------------------------------------ schema facts (OneFlow v0.6.0)

@pytest.mark.parametrize("op_type, attr, type_", [
    ("concat", "axis", "int64"), ("concat", "max_dim_size", "int64"), ("split_like", "axis", "int64"),
    ("gather", "axis", "int64"), ("unsorted_segment_sum", "axis", "int64"), ("slice", "start", "list_int64"),
    ("slice_grad", "like_shape", "shape"), ("pad", "padding_before", "list_int64"),
    ("pad", "floating_constant_value", "double"), ("pad", "integral_constant_value", "int64"),
    ("constant", "floating_value", "double"), ("constant", "shape", "shape"), ("expand_dims", "axis", "int32"),
    ("squeeze", "axes", "list_int32"), ("transpose", "perm", "list_int32"), ("one_hot", "depth", "int64"),
    ("expand", "logical_expand_shape", "list_int32"), ("dim_gather", "dim", "int32"),
    ("constant_pad2d", "padding", "list_int64"), ("constant_pad2d", "floating_value", "double"),
    ("narrow", "start", "int64"), ("diag", "diagonal", "int32"), ("roll", "shifts", "list_int32"),
    ("arange", "float_delta", "double"), ("eye", "rows", "int64"),
])
def test_attr_types_are_oneflows(op_type, attr, type_):
    assert registry.lookup(op_type).attrs[attr].type == type_


def test_arguments_and_grad_flags_are_oneflows():
    sig = {t: ([a.name + ("*" if a.repeated else "") for a in registry.lookup(t).inputs],
               [a.name + ("*" if a.repeated else "") for a in registry.lookup(t).outputs])
           for t in ("transpose", "concat", "split_like", "tensor_scatter_nd_add", "dim_scatter_add_like",
                     "ones_like", "zero_like", "tuple_identity", "narrow_grad", "diag_grad")}
    assert sig["transpose"] == (["input"], ["output"])
    assert sig["concat"] == (["in*"], ["out"])
    assert sig["split_like"] == (["in", "like*"], ["out*"])
    assert sig["tensor_scatter_nd_add"] == (["params", "updates", "indices"], ["out"])
    assert sig["dim_scatter_add_like"] == (["like", "index", "src"], ["output"])
    assert sig["ones_like"] == (["x"], ["y"])  # v0.6.0's declared signature (see array_ops)
    assert sig["zero_like"] == (["like"], ["out"])
    assert sig["tuple_identity"] == (["in*"], ["out*"])
    assert sig["narrow_grad"] == (["dy", "like"], ["dx"])
    assert sig["diag_grad"] == (["dy", "in"], ["dx"])
    for t in ("one_hot", "constant", "zero_like", "ones_like", "arange", "eye"):
        assert registry.lookup(t).no_grad, t
    for t in ("flip", "slice_grad", "unsorted_segment_sum_like", "scatter_nd_like", "expand_grad"):
        assert not registry.lookup(t).has_grad and not registry.lookup(t).no_grad, t
    assert registry.lookup("pad_grad").has_grad  # pad_grad's grad is pad


# ------------------------------------------------------------------ reshape family, transpose, concat, split

def test_transpose_forward_and_grad():
    check(lambda x: flow.transpose(x, perm=[2, 0, 1]), lambda x: x.permute(2, 0, 1) * 1, rand(2, 3, 4))


@pytest.mark.parametrize("perm, view", [((1, 0), True), ((0, 2, 1), True), ((0, 1, 3, 2), True),
                                        ((0, 2, 1, 3), False), ((2, 0, 1), False)])
def test_transpose_writes_out_a_permutation_its_gemm_readers_cannot_take(perm, view):
    """transpose's kernel: a (batch of) matrix transpose stays a view of its input; any other
    permutation is one contiguous copy (its readers then copy nothing)."""
    from graphfront.framework import job_builder as jb
    from graphfront.ops.builder import UserOpConfBuilder
    from graphfront.runtime.plan import KernelCtx
    shape = (2, 3, 4, 5)[:len(perm)]
    x = torch.arange(float(np.prod(shape))).reshape(shape)
    b = UserOpConfBuilder("t", prefix=False).Op("transpose").Input("input", ["x/0"]).Output("output") \
        .Attr("perm", list(perm))
    b.CheckAndComplete()
    kernel = registry.lookup("transpose").kernel(KernelCtx(b.op_conf, {"x/0": jb.TensorDesc(tuple(x.shape), flow.float32)},
                                                         torch.device("cpu")))
    out = kernel(x)
    assert torch.equal(out, x.permute(perm))
    assert (out.data_ptr() == x.data_ptr()) is view and out.is_contiguous() is not view


def test_concat_split_stack_forward_and_grad():
    a, b, c = rand(2, 3), rand(2, 1), rand(2, 4)
    check(lambda a, b, c: flow.concat([a, b, c], axis=-1) * flow.concat([c, a, b], axis=1),
          lambda a, b, c: torch.cat([a, b, c], -1) * torch.cat([c, a, b], 1), a, b, c)
    x = rand(6, 2)
    check(lambda x: [p * (i + 1.0) for i, p in enumerate(flow.split(x, [1, -1, 2], axis=0))],
          lambda x: [p * (i + 1.0) for i, p in enumerate(torch.split(x, [1, 3, 2], 0))], x)
    check(lambda x: flow.split(x, 3)[1] * 2.0, lambda x: torch.split(x, 2)[1] * 2.0, x)
    check(lambda a, b: flow.stack([a, b], axis=1) * 3.0, lambda a, b: torch.stack([a, b], 1) * 3.0,
          rand(2, 3), rand(2, 3))


def test_split_like_grad_fills_missing_output_grads_with_zero_like():
    # only the second piece reaches the loss: split_like's grad concats zero_like + dy
    x = rand(5, 3)
    seen = {}

    def fn(x):
        like0, like1 = flow.zeros((2, 3)), flow.zeros((3, 3))
        out = flow.user_op_builder("sl").Op("split_like").Input("in", [x]).Input("like", [like0, like1]) \
            .Output("out", 2).Attr("axis", 0).Build().InferAndTryRun().RemoteBlobList()
        seen["shapes"] = [o.shape for o in out]
        return out[1] * 2.0

    outs, grads = run(fn, x)
    assert seen["shapes"] == [(2, 3), (3, 3)]
    np.testing.assert_allclose(outs[0], x[2:] * 2)
    np.testing.assert_allclose(grads[0], np.concatenate([np.zeros((2, 3)), np.full((3, 3), 2.0)]))


def test_squeeze_expand_dims_expand_reshape_like_flatten():
    x = rand(2, 1, 3, 1)
    check(lambda x: flow.squeeze(x, axis=[1, -1]) * 2.0, lambda x: x.squeeze(3).squeeze(1) * 2.0, x)
    check(lambda x: flow.squeeze(x) * 2.0, lambda x: x.squeeze() * 2.0, x)
    check(lambda x: flow.expand_dims(x, -1) * 2.0, lambda x: x.unsqueeze(-1) * 2.0, rand(2, 3))
    y = rand(3, 1)
    check(lambda y: flow.expand(y, [2, -1, 4]) * flow.constant(2.0, flow.float32, (2, 3, 4)),
          lambda y: y.expand(2, 3, 4) * 2.0, y)
    check(lambda x, y: flow.reshape_like(x, y) * 2.0, lambda x, y: x.reshape(3, 2) * 2.0,
          rand(2, 3), rand(3, 2), const=(1,))
    check(lambda x: flow.flatten(x, 1) * 2.0, lambda x: x.flatten(1) * 2.0, x)


def test_identity_n_and_broadcast_like():
    a, b = rand(2, 3), rand(4)
    check(lambda a, b: [t * 2.0 for t in flow.identity_n([a, b])], lambda a, b: [a * 2.0, b * 2.0], a, b)
    check(lambda b: flow.broadcast_like(b, flow.zeros((3, 4))) * 2.0, lambda b: b.expand(3, 4) * 2.0, b)
    check(lambda b, c: flow.broadcast_like(b, c, broadcast_axes=[1]) * 2.0, lambda b, c: b.expand(3, 4) * 2.0,
          rand(3, 1), rand(3, 4), const=(1,))


@pytest.mark.parametrize("x_shape, x_dtype, axes, expected", [
    ((2, 3), flow.float32, None, r"input 'x' must have shape \(1, 1\) or \(1,\).*received \(2, 3\)"),
    ((2, 5), flow.float32, [1], r"input 'x' must have shape \(2, 1\) or \(2,\).*received \(2, 5\)"),
    ((2, 1), flow.float32, [2], r"attr 'broadcast_axes' \[2\] has an axis out of range"),
    ((2, 1), flow.int32, [1], r"input 'x' must have the dtype of input 'like', .*float32, received .*int32"),
])
def test_broadcast_like_refuses_x_that_does_not_fit_like_at_build_time(x_shape, x_dtype, axes, expected):
    """OneFlow's y is like's BlobDesc: x must be like's shape with the broadcast axes set to 1 or
    removed, and of like's dtype (a same-shape x with every axis broadcast used to reach the
    kernel and fail there with torch's RuntimeError)."""
    flow.clear_default_session()

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder(x_shape, dtype=x_dtype), like: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.broadcast_like(x, like, broadcast_axes=axes, name="bl")

    with pytest.raises(flow.JobBuildError, match=r"op 'bl' \(broadcast_like\): " + expected):
        job(np.zeros(x_shape, x_dtype.np), np.zeros((2, 3), np.float32))


# ------------------------------------------------------------------ slicing

def _indicator(shape, index):
    g = np.zeros(shape, np.float32)
    np.add.at(g, index, 1.0)
    return g


@pytest.mark.parametrize("tups, index", [
    ([(None, None, -1), (1, None, 2)], np.s_[::-1, 1::2]),
    ([(-3, -1, None), (4, 0, -2)], np.s_[-3:-1, 4:0:-2]),
    ([(5, 1, -3)], np.s_[5:1:-3]),
    ([(100, -100, -1), (-100, 100, 3)], np.s_[100:-100:-1, -100:100:3]),
])
def test_slice_v2_matches_python_slicing(tups, index):
    x = rand(6, 5)
    outs, grads = run(lambda x: flow.slice_v2(x, tups) * 1.0, x)
    np.testing.assert_allclose(outs[0], x[index])
    np.testing.assert_allclose(grads[0], _indicator(x.shape, index))


def test_slice_reverse_and_tf_slice():
    x = rand(4, 5, 3)
    outs, grads = run(lambda x: [flow.reverse(x, [0, -1]) * 1.0, flow.slice(x, [1, None, -2], [2, -1, 1]) * 1.0], x)
    np.testing.assert_allclose(outs[0], x[::-1, :, ::-1])
    np.testing.assert_allclose(outs[1], x[1:3, :, 1:2])
    np.testing.assert_allclose(grads[0], 1.0 + _indicator(x.shape, np.s_[1:3, :, 1:2]))


def test_tf_slice_size_must_fit_the_dim():
    """flow.slice takes each size as None, -1 or 1..dim, as OneFlow's does
    (single_client/ops/array_ops.py, v0.6.0: ``ValueError("element of size is invalid")``);
    begin + size past the end stops at the end of the dim."""
    x = rand(4, 5, 3)
    outs, _ = run(lambda x: flow.slice(x, [2, 0, 1], [4, 5, 3]) * 1.0, x, train=False)
    np.testing.assert_allclose(outs[0], x[2:, :, 1:])
    for size, bad in (([2, 6, 1], "size[1] = 6"), ([0, -1, 1], "size[0] = 0"), ([2, -1, -3], "size[2] = -3")):
        with pytest.raises(ValueError, match=r"flow.slice: %s is invalid for dim \d of x \(4, 5, 3\)" % re.escape(bad)):
            run(lambda x: flow.slice(x, [0, 0, 0], size) * 1.0, x, train=False)


def test_slice_update_forward_and_grads():
    x, u = rand(4, 6), rand(2, 3)
    outs, grads = run(lambda x, u: flow.slice_update(x, u, [(1, 3, 1), (5, 0, -2)]) * 2.0, x, u)
    expected = x.copy()
    expected[1:3, 5:0:-2] = u
    np.testing.assert_allclose(outs[0], expected * 2)
    gx = np.full(x.shape, 2.0, np.float32)
    gx[1:3, 5:0:-2] = 0
    np.testing.assert_allclose(grads[0], gx)
    np.testing.assert_allclose(grads[1], np.full(u.shape, 2.0))


def test_narrow_roll_flip_diag():
    x = rand(4, 5)
    check(lambda x: flow.narrow(x, 1, -4, 3) * 2.0, lambda x: x.narrow(1, 1, 3) * 2.0, x)
    check(lambda x: flow.roll(x, [2, -1], [0, 1]) * flow.constant(1.0, flow.float32, (4, 5)) * 3.0,
          lambda x: torch.roll(x, (2, -1), (0, 1)) * 3.0, x)
    check(lambda x: flow.roll(x, 3) * 3.0, lambda x: torch.roll(x, 3) * 3.0, x)
    check(lambda x: flow.diag(x, 1) * 2.0, lambda x: torch.diag(x, 1) * 2.0, x)
    check(lambda v: flow.diag(v, -2) * 2.0, lambda v: torch.diag(v, -2) * 2.0, rand(3))
    outs, _ = run(lambda x: flow.flip(x, [0, -1]), x, train=False)
    np.testing.assert_allclose(outs[0], x[::-1, ::-1])


# ------------------------------------------------------------------ gather / scatter

def test_gather_with_repeated_indices_and_axis():
    x = rand(3, 5, 2)
    idx = np.array([[4, 0], [4, 4]], np.int32)
    check(lambda x, i: flow.gather(x, i, axis=1) * 2.0,
          lambda x, i: x.index_select(1, i.reshape(-1).long()).reshape(3, 2, 2, 2) * 2.0, x, idx)
    check(lambda x, i: flow.gather(x, i, axis=-3) * 2.0,
          lambda x, i: x.index_select(0, i.reshape(-1).long() % 3).reshape(2, 2, 5, 2) * 2.0,
          x, np.array([[2, 0], [1, 1]], np.int64))


def test_batch_gather_and_unsorted_batch_segment_sum():
    x = rand(2, 4, 3)
    idx = np.array([[3, 3, 0], [1, 2, 1]], np.int64)
    check(lambda x, i: flow.gather(x, i, batch_dims=1) * 2.0,
          lambda x, i: torch.gather(x, 1, i.unsqueeze(-1).expand(2, 3, 3)) * 2.0, x, idx)
    d = rand(2, 3, 2)
    ref = np.zeros((2, 5, 2), np.float32)
    for b in range(2):
        for k in range(3):
            ref[b, idx[b, k]] += d[b, k]
    outs, grads = run(lambda d, i: flow.unsorted_batch_segment_sum(d, i, 5) * 2.0, d, idx)
    np.testing.assert_allclose(outs[0], ref * 2, rtol=1e-6)
    np.testing.assert_allclose(grads[0], np.full(d.shape, 2.0))


def test_unsorted_segment_sum_drops_out_of_range_ids():
    d = rand(3, 4, 2)
    ids = np.array([1, -1, 1, 7], np.int32)
    outs, grads = run(lambda d, i: flow.unsorted_segment_sum(d, i, 3, axis=1) * 2.0, d, ids)
    ref = np.zeros((3, 3, 2), np.float32)
    ref[:, 1] = d[:, 0] + d[:, 2]
    np.testing.assert_allclose(outs[0], ref * 2, rtol=1e-6)
    # the grad is gather(dy, ids): segment rows that exist get dy, out-of-range ids are not
    # representable by gather, so use in-range ids for the gradient check
    ids2 = np.array([[2, 0], [0, 1]], np.int64)
    check(lambda d, i: flow.unsorted_segment_sum(d, i, 4, axis=0) * flow.constant(2.0, flow.float32, (4, 3)),
          lambda d, i: torch.zeros(4, 3).index_add(0, i.reshape(-1), d.reshape(4, 3)) * 2.0, rand(2, 2, 3), ids2)


def test_unsorted_segment_sum_like():
    d, like = rand(4, 2), rand(3, 2)
    ids = np.array([2, 0, 2, 1], np.int32)
    outs, _ = run(lambda d, i, l: flow.unsorted_segment_sum_like(d, i, l), d, ids, like, train=False)
    ref = np.zeros((3, 2), np.float32)
    np.add.at(ref, ids, d)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-6)


def test_gather_nd_scatter_nd_and_tensor_scatter():
    p = rand(3, 4, 2)
    idx = np.array([[0, 1], [2, 3], [0, 1]], np.int32)
    outs, grads = run(lambda p, i: flow.gather_nd(p, i) * 2.0, p, idx)
    np.testing.assert_allclose(outs[0], p[idx[:, 0], idx[:, 1]] * 2)
    g = np.zeros_like(p)
    np.add.at(g, (idx[:, 0], idx[:, 1]), 2.0)
    np.testing.assert_allclose(grads[0], g)

    u = rand(3, 2)
    outs, grads = run(lambda u, i: flow.scatter_nd(i, u, (3, 4, 2)) * flow.constant(2.0, flow.float32, (3, 4, 2)),
                      u, idx)
    ref = np.zeros((3, 4, 2), np.float32)
    np.add.at(ref, (idx[:, 0], idx[:, 1]), u)
    np.testing.assert_allclose(outs[0], ref * 2, rtol=1e-6)
    np.testing.assert_allclose(grads[0], np.full(u.shape, 2.0))

    uniq = np.array([[2, 0], [0, 1]], np.int64)
    u2 = rand(2, 2)
    outs, grads = run(lambda p, u, i: [flow.tensor_scatter_nd_add(p, i, u) * 2.0,
                                       flow.tensor_scatter_nd_update(p, i, u) * 3.0], p, u2, uniq)
    added, updated = p.copy(), p.copy()
    added[uniq[:, 0], uniq[:, 1]] += u2
    updated[uniq[:, 0], uniq[:, 1]] = u2
    np.testing.assert_allclose(outs[0], added * 2, rtol=1e-6)
    np.testing.assert_allclose(outs[1], updated * 3, rtol=1e-6)
    gp = np.full(p.shape, 5.0, np.float32)
    gp[uniq[:, 0], uniq[:, 1]] = 2.0  # update overwrote those rows
    np.testing.assert_allclose(grads[0], gp)
    np.testing.assert_allclose(grads[1], np.full(u2.shape, 5.0))


def test_dim_gather_forward_and_grad():
    x = rand(3, 4)
    idx = np.array([[0, 3], [1, 1], [3, 0]], np.int64)
    check(lambda x, i: flow.dim_gather(x, 1, i) * 2.0, lambda x, i: torch.gather(x, 1, i) * 2.0, x, idx)


def test_dim_scatter_add_and_update_match_numpy_and_check_their_arguments():
    """OneFlow's dim_scatter_add / dim_scatter_update: input with src added at / written to
    index along dim, against a numpy loop; wrong shapes, dtypes and ids are named."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    src = np.array([[10.0, 20.0], [30.0, 40.0]], np.float32)
    idx = np.array([[2, 0], [2, 1]], np.int64)
    added, written = x.copy(), x.copy()
    for r in range(2):
        for c in range(2):
            added[r, idx[r, c]] += src[r, c]
            written[r, idx[r, c]] = src[r, c]
    outs, _ = run(lambda x, s, i: [flow.dim_scatter_add(x, 1, i, s), flow.dim_scatter_update(x, -1, i, s)],
                  x, src, idx, train=False)
    np.testing.assert_array_equal(outs[0], added)
    np.testing.assert_array_equal(outs[1], written)
    with pytest.raises(flow.JobBuildError, match=r"dim_scatter_add.*input 'src' expected shape \(2, 2\)"):
        run(lambda x, s, i: flow.dim_scatter_add(x, 1, i, s), x, src[:, :1], idx, train=False)
    with pytest.raises(flow.JobBuildError, match=r"dim_scatter_update.*input 'src' expected dtype float32"):
        run(lambda x, s, i: flow.dim_scatter_update(x, 1, i, s), x, src.astype(np.float64), idx, train=False)
    with pytest.raises(flow.GraphfrontError, match=r"dim_scatter_add.*input 'index' expects indices in \[0, 4\)"):
        run(lambda x, s, i: flow.dim_scatter_add(x, 1, i, s), x, src, idx + 3, train=False)


# ------------------------------------------------------------------ padding

def test_pad_float_and_int_constant_and_grad():
    x = rand(2, 3, 4)
    check(lambda x: flow.pad(x, [(0, 1), (2, 0), (1, 3)], constant_value=1.5) * 2.0,
          lambda x: F.pad(x, [1, 3, 2, 0, 0, 1], value=1.5) * 2.0, x)
    i = np.arange(6, dtype=np.int32).reshape(2, 3)
    outs, _ = run(lambda i: flow.pad(i, [(1, 0), (0, 2)], constant_value=-7), i, train=False)
    np.testing.assert_array_equal(outs[0], np.pad(i, [(1, 0), (0, 2)], constant_values=-7))
    dy = rand(4, 9)
    outs, _ = run(lambda d: flow.pad_grad(d, [(1, 1), (3, 2)]), dy, train=False)
    np.testing.assert_allclose(outs[0], dy[1:3, 3:7])


def test_pad_grad_is_differentiable_through_pad():
    dy = rand(4, 6)
    check(lambda d: flow.pad_grad(d, [(1, 1), (2, 1)]) * 2.0, lambda d: d[1:3, 2:5] * 2.0, dy)


def test_flow_nn_pad_as_conv_same_padding_uses_it():
    # conv SAME with an asymmetric total pad inserts flow.nn.pad with (before, after) pairs
    # for every dim and an int constant 0 (integral_constant_value) on a float input
    x, w = rand(1, 2, 5, 5), rand(3, 2, 4, 4)
    check(lambda x, w: flow.nn.conv2d(flow.nn.pad(x, [(0, 0), (0, 0), (2, 1), (2, 1)]), w, strides=1,
                                      padding="VALID"),
          lambda x, w: F.conv2d(F.pad(x, [2, 1, 2, 1]), w), x, w, rtol=1e-4, atol=1e-5)


def test_same_padding_pads_a_dynamic_blob_for_its_runtime_size():
    # OneFlow's reason for the op: a window op's SAME padding of a blob whose size is known at run time
    cfg = flow.FunctionConfig()
    cfg.default_logical_view(flow.scope.mirrored_view())

    @flow.global_function(function_config=cfg)
    def job(x: tp.ListNumpy.Placeholder((1, 8, 2))) -> tp.ListNumpy:
        return flow.same_padding(x, "SAME_UPPER", "NWC", 3, 2, 1)

    for width in (8, 5):  # a 3-window of stride 2: totals 1 (8) and 2 (5), the odd one after
        x = np.arange(width * 2, dtype=np.float32).reshape(1, width, 2)
        pads = {8: (0, 1), 5: (1, 1)}[width]
        np.testing.assert_array_equal(job([x])[0], np.pad(x, [(0, 0), pads, (0, 0)]))
    for args, message in ((("SAME", "NCHW", 3, 1, 1), "padding expects 'SAME_LOWER' or 'SAME_UPPER', received 'SAME'"),
                          (("SAME_LOWER", "HWC", 3, 1, 1), "data_format expects 'NCHW'- or 'NHWC'-style"),
                          (("SAME_LOWER", "NCHW", [3, 3, 3], 1, 1), "kernel_size expects 2 ints for the 2 spatial")):
        with pytest.raises(flow.ArgumentError, match=re.escape(message)):
            run(lambda v: flow.same_padding(v, *args), np.zeros((1, 1, 4, 4), np.float32), train=False)


def test_flow_nn_pad_is_flow_pad_an_int_constant_fills_a_float_blob():
    # flow.nn.pad once put an int constant in integral_constant_value, which a float blob ignores: it padded with 0
    x = rand(2, 3)
    outs, _ = run(lambda x: flow.nn.pad(x, [(1, 0), (0, 2)], constant_value=5), x, train=False)
    np.testing.assert_array_equal(outs[0], np.pad(x, [(1, 0), (0, 2)], constant_values=5))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_constant_padnd(n):
    x = rand(*([2, 2] + [3] * n))
    padding = [1, 0, 2, 1, 0, 3][:2 * n]
    fn = {1: flow.constant_pad1d, 2: flow.constant_pad2d, 3: flow.constant_pad3d}[n]
    check(lambda x: fn(x, padding, constant_value=0.5) * 2.0, lambda x: F.pad(x, padding, value=0.5) * 2.0, x)


@pytest.mark.parametrize("fn, mode", [(flow.reflection_pad2d, "reflect"), (flow.replication_pad2d, "replicate"),
                                      (flow.zero_pad2d, "constant")])
def test_pad2d_modes(fn, mode):
    x = rand(1, 2, 3, 4)
    check(lambda x: fn(x, [2, 1, 0, 2]) * flow.constant(2.0, flow.float32, (1, 2, 5, 7)),
          lambda x: F.pad(x, [2, 1, 0, 2], mode=mode) * 2.0, x)
    check(lambda x: fn(x, 1) * 2.0, lambda x: F.pad(x, [1, 1, 1, 1], mode=mode) * 2.0, x)


# ------------------------------------------------------------------ sources and *_like

def test_one_hot_axis_and_dtypes():
    idx = np.array([[0, 3], [2, 9]], np.int32)
    outs, _ = run(lambda i: [flow.one_hot(i, 4, on_value=2.5, off_value=-1.0, dtype=flow.float32),
                             flow.one_hot(i, 4, axis=0, dtype=flow.int64)], idx, train=False)
    ref = np.where(np.arange(4) == idx[..., None], 2.5, -1.0).astype(np.float32)
    np.testing.assert_array_equal(outs[0], ref)  # index 9 >= depth: a row of off_value
    assert outs[1].dtype == np.int64
    np.testing.assert_array_equal(outs[1], np.moveaxis((np.arange(4) == idx[..., None]).astype(np.int64), -1, 0))


def test_constants_ranges_and_like_ops():
    x = rand(2, 3)

    def fn(x):
        return [flow.constant(3, flow.int32, (2,)), flow.zeros((2, 2)), flow.ones((3,), flow.int8),
                flow.range(5), flow.range(1.0, 2.0, 0.25), flow.range(10, 2, -3, dtype=flow.float64),
                flow.eye(2, 3), flow.ones_like(x), flow.zeros_like(x, dtype=flow.int32),
                flow.constant_like(x, 2.5)]

    outs, _ = run(fn, x, train=False)
    expected = [np.full(2, 3, np.int32), np.zeros((2, 2), np.float32), np.ones(3, np.int8),
                np.arange(5, dtype=np.int64), np.arange(1.0, 2.0, 0.25, dtype=np.float32),
                np.array([10, 7, 4], np.float64), np.eye(2, 3, dtype=np.float32), np.ones((2, 3), np.float32),
                np.zeros((2, 3), np.int32), np.full((2, 3), 2.5, np.float32)]
    for o, e in zip(outs, expected):
        assert o.dtype == e.dtype
        np.testing.assert_array_equal(o, e)


def test_constant_like_wrappers_build_the_system_op_and_have_no_grad():
    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (2, 3), initializer=flow.ones_initializer())
        y = w * flow.ones_like(w) + flow.zeros_like(w, name="zl")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(y)
        return y

    np.testing.assert_array_equal(job(np.zeros((2, 3), np.float32)), np.ones((2, 3), np.float32))
    user_job = job.compiled_job.user_job
    kinds = {op.name: op.WhichOneof("op_type") for op in user_job.net.op}
    assert kinds["zl"] == "constant_like_conf"
    assert list(kinds.values()).count("constant_like_conf") == 2


def test_ones_like_zero_like_and_tuple_identity_ops_via_builder():
    x = rand(2, 3)

    def fn(x):
        ones = flow.user_op_builder("ol").Op("ones_like").Input("x", [x]).Output("y").Build() \
            .InferAndTryRun().RemoteBlobList()[0]
        zeros = flow.user_op_builder("zl").Op("zero_like").Input("like", [x]).Output("out").Build() \
            .InferAndTryRun().RemoteBlobList()[0]
        return [ones, zeros]

    outs, _ = run(fn, x, train=False)
    np.testing.assert_array_equal(outs[0], np.ones_like(x))
    np.testing.assert_array_equal(outs[1], np.zeros_like(x))


def test_second_unnamed_range_gets_a_unique_name():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((1,))) -> tp.Bundle[tp.Numpy]:
        return [flow.range(3), flow.range(2)]

    a, b = job(np.zeros(1, np.float32))
    np.testing.assert_array_equal(a, [0, 1, 2])
    np.testing.assert_array_equal(b, [0, 1])
    assert "range" in [op.name for op in job.compiled_job.user_job.net.op]


# ------------------------------------------------------------------ build-time errors

def build_error(fn, *arrays):
    with pytest.raises(flow.JobBuildError) as e:
        run(fn, *arrays, train=False)
    return str(e.value)


def test_bad_perm_names_op_and_attr():
    msg = build_error(lambda x: flow.transpose(x, perm=[0, 0, 1], name="tp"), rand(2, 3, 4))
    assert "op 'tp' (transpose)" in msg and "attr 'perm' [0, 0, 1] must be a permutation of 0..2" in msg
    assert "(2, 3, 4)" in msg and "test_array_ops.py" in msg


def test_out_of_range_axis():
    msg = build_error(lambda x, i: flow.gather(x, i, axis=3, name="g"), rand(2, 3), np.zeros(2, np.int32))
    assert "op 'g' (gather)" in msg and "attr 'axis' 3 is out of range for a rank-2 input" in msg
    msg = build_error(lambda x: flow.concat([x, x], axis=2, name="c"), rand(2, 3))
    assert "op 'c' (concat)" in msg and "attr 'axis' 2 is out of range" in msg
    with pytest.raises(ValueError, match=r"flow.expand_dims: axis 3 is out of range \[-3, 2\]"):
        run(lambda x: flow.expand_dims(x, 3), rand(2, 3), train=False)


def test_concat_shape_and_dtype_mismatch():
    msg = build_error(lambda a, b: flow.concat([a, b], axis=1, name="cat"), rand(2, 3), rand(3, 3))
    assert "op 'cat' (concat)" in msg
    assert "input 'in_1' of shape (3, 3) does not match input 'in_0' of shape (2, 3) outside axis 1" in msg
    msg = build_error(lambda a, b: flow.concat([a, b], name="cat"), rand(2, 3), np.zeros((2, 3), np.int32))
    assert "input 'in_1' expected dtype float32 (as 'in_0'), received int32" in msg


def test_gather_index_dtype_must_be_integer():
    msg = build_error(lambda x, i: flow.gather(x, i, name="g"), rand(4, 3), rand(2))
    assert "op 'g' (gather)" in msg and "input 'indices' expected an integer (index) dtype, received float32" in msg
    msg = build_error(lambda x, i: flow.dim_gather(x, 0, i, name="dg"), rand(4, 3), rand(4, 3))
    assert "op 'dg' (dim_gather)" in msg and "input 'index' expected an integer" in msg


def test_more_shape_errors():
    msg = build_error(lambda x, u: flow.slice_update(x, u, [(0, 2, 1)], name="su"), rand(4, 3), rand(3, 3))
    assert "op 'su' (slice_update)" in msg and "input 'update' expected shape (2, 3)" in msg and "(3, 3)" in msg
    msg = build_error(lambda x: flow.squeeze(x, [0], name="sq"), rand(2, 3))
    assert "op 'sq' (squeeze)" in msg and "dim 0 of input 'in' (2, 3) is 2" in msg
    msg = build_error(lambda x: flow.expand(x, [4, 3], name="ex"), rand(2, 3))
    assert "op 'ex' (expand)" in msg and "dim 0 of size 2" in msg
    msg = build_error(lambda x: flow.reflection_pad2d(x, [3, 0, 0, 0], name="rp"), rand(1, 1, 2, 3))
    assert "op 'rp' (reflection_pad2d)" in msg and "smaller than the padded dim (3)" in msg
    msg = build_error(lambda p, i: flow.gather_nd(p, i, name="gn"), rand(2, 3), np.zeros((2, 3), np.int32))
    assert "op 'gn' (gather_nd)" in msg and "last dim of input 'indices' (2, 3) is 3" in msg


def test_wrapper_argument_errors():
    with pytest.raises(ValueError, match="flow.one_hot: dtype is required"):
        run(lambda i: flow.one_hot(i, 3), np.zeros(2, np.int32), train=False)
    with pytest.raises(ValueError, match="flow.constant: dtype is required"):
        run(lambda x: flow.constant(1.0), rand(2), train=False)
    with pytest.raises(ValueError, match=r"flow.split: dim 0 of x \(5, 2\) \(5\) cannot be split into 2"):
        run(lambda x: flow.split(x, 2), rand(5, 2), train=False)
    with pytest.raises(ValueError, match=r"flow.pad: paddings needs 2 \(before, after\) pairs"):
        run(lambda x: flow.pad(x, [(1, 1)]), rand(2, 3), train=False)
    with pytest.raises(ValueError, match="flow.slice_v2: step of dim 0 must not be 0"):
        run(lambda x: flow.slice_v2(x, [(0, 2, 0)]), rand(4), train=False)
    with pytest.raises(TypeError, match="flow.transpose: argument 'a' expects a blob"):
        run(lambda x: flow.transpose(np.zeros(3), [0]), rand(2), train=False)
