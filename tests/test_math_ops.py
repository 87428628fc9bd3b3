"""Numeric and build-time tests of the math op family (graphfront/ops/math_ops.py,
graphfront/math.py) against PyTorch eager autograd."""
import inspect
import re
import typing

import types

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.ops import registry

RTOL, ATOL = 1e-4, 1e-5
_rng = np.random.RandomState(0)


def _placeholder_sig(arrays, dtypes):
    params = [inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=tp.Numpy.Placeholder(a.shape, dtype=d))
              for i, (a, d) in enumerate(zip(arrays, dtypes))]
    return params


def _flow_dtype(a):
    return {np.dtype(np.float32): flow.float32, np.dtype(np.float64): flow.float64,
            np.dtype(np.int32): flow.int32, np.dtype(np.int64): flow.int64,
            np.dtype(np.int8): flow.int8}[a.dtype]


def _ret_annotation(n):
    return tp.Numpy if n == 1 else typing.Tuple[tuple([tp.Numpy] * n)]


def predict(build, *arrays, n_out=1):
    """Run ``build(*blobs)`` in a predict job fed with ``arrays``; returns the numpy result(s)."""
    def job(*blobs):
        with flow.scope.placement("cpu", "0:0"):
            return build(*blobs)
    params = _placeholder_sig(arrays, [_flow_dtype(a) for a in arrays])
    job.__signature__ = inspect.Signature(params, return_annotation=_ret_annotation(n_out))
    job.__name__ = "predict_job"
    f = flow.global_function(type="predict")(job)
    return f(*arrays)


def _saver(store, key):
    def handler(d: tp.Numpy):
        store[key] = d
    return handler


def train(build, variables, feeds=()):
    """Train job: ``variables`` (float arrays) become trainable variables, ``feeds`` placeholders;
    the loss is ``build(*vars, *feeds)``. Returns (loss value, [d sum(loss) / d var], job).

    The cleanup passes are off so that the backward ops autograd emitted stay in the job
    (constant folding would evaluate those fed only by the constant loss seed at compile
    time) and the op-wiring assertions below see them."""
    grads = {}
    names = [f"v{i}" for i in range(len(variables))]

    def job(*blobs):
        with flow.scope.placement("cpu", "0:0"):
            vs = []
            for n, a in zip(names, variables):
                v = flow.get_variable(n, a.shape, dtype=_flow_dtype(a), initializer=flow.zeros_initializer())

                flow.watch_diff(v, _saver(grads, n))
                vs.append(v)
            y = build(*vs, *blobs)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(y)
        return y
    params = _placeholder_sig(feeds, [_flow_dtype(a) for a in feeds])
    job.__signature__ = inspect.Signature(params, return_annotation=tp.Numpy)
    job.__name__ = "train_job"
    config = flow.FunctionConfig()
    config.enable_passes(False)
    f = flow.global_function(type="train", function_config=config)(job)
    flow.load_variables(dict(zip(names, variables)))
    out = f(*feeds)
    return out, [grads.get(n) for n in names], f


def torch_ref(fn, *arrays, grad=True):
    ts = [torch.tensor(a.astype(np.float64), requires_grad=grad) for a in arrays]
    y = fn(*ts)
    if not grad:
        return y.detach().numpy(), None
    gs = torch.autograd.grad(y.sum(), ts, allow_unused=True)
    return y.detach().numpy(), [None if g is None else g.numpy() for g in gs]


def close(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol,
                               atol=atol)


def check_grad(build, ref, *arrays, rtol=RTOL, atol=ATOL):
    out, grads, f = train(build, list(arrays))
    r_out, r_grads = torch_ref(ref, *arrays)
    close(out, r_out, rtol, atol)
    for g, rg in zip(grads, r_grads):
        close(g, rg, rtol, atol)
    return f


def op_types(f, completed=True):
    job = f.compiled_job.job if completed else f.compiled_job.user_job
    return [op.user_conf.op_type_name for op in job.net.op if op.WhichOneof("op_type") == "user_conf"]


def ops_named(f):
    return {op.name: op.user_conf.op_type_name for op in f.compiled_job.job.net.op
            if op.WhichOneof("op_type") == "user_conf"}


def rand(*shape, low=-1.0, high=1.0):
    return _rng.uniform(low, high, size=shape).astype(np.float32)


# ----------------------------------------------------------------- unary family

UNARY = {
    # name: (torch reference, low, high)
    "abs": (torch.abs, -2, 2), "acos": (torch.acos, -0.9, 0.9), "acosh": (torch.acosh, 1.2, 3),
    "asin": (torch.asin, -0.9, 0.9), "asinh": (torch.asinh, -2, 2), "atan": (torch.atan, -2, 2),
    "atanh": (torch.atanh, -0.9, 0.9), "ceil": (torch.ceil, -2, 2), "cos": (torch.cos, -2, 2),
    "cosh": (torch.cosh, -2, 2), "erf": (torch.erf, -2, 2), "erfc": (torch.erfc, -2, 2), "exp": (torch.exp, -2, 2),
    "expm1": (torch.expm1, -2, 2), "floor": (torch.floor, -2, 2), "lgamma": (torch.lgamma, 0.5, 3),
    "log": (torch.log, 0.2, 3), "log1p": (torch.log1p, -0.5, 2), "log2": (torch.log2, 0.2, 3),
    "log_sigmoid": (torch.nn.functional.logsigmoid, -3, 3), "negative": (torch.neg, -2, 2),
    "reciprocal": (torch.reciprocal, 0.5, 2), "reciprocal_no_nan": (torch.reciprocal, 0.5, 2),
    "rint": (torch.round, -3, 3), "round": (torch.round, -3, 3), "rsqrt": (torch.rsqrt, 0.3, 3),
    "sigmoid_v2": (torch.sigmoid, -3, 3), "sign": (torch.sign, -2, 2), "sin": (torch.sin, -2, 2),
    "sinh": (torch.sinh, -2, 2), "softplus": (torch.nn.functional.softplus, -3, 3),
    "sqrt": (torch.sqrt, 0.2, 3), "square": (torch.square, -2, 2), "tan": (torch.tan, -1.2, 1.2),
    "tanh": (torch.tanh, -2, 2),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_forward_backward(name):
    ref, low, high = UNARY[name]
    x = rand(3, 4, low=low, high=high)
    f = check_grad(getattr(flow.math, name), ref, x)
    assert name in op_types(f) and f"{name}_grad" in op_types(f)


def test_unary_family_is_complete():
    for name in UNARY:
        opdef = registry.lookup(name)
        assert [a.name for a in opdef.inputs] == ["x"] and [a.name for a in opdef.outputs] == ["y"]
        grad = registry.lookup(f"{name}_grad")
        assert [a.name for a in grad.inputs] == ["x", "dy"] and [a.name for a in grad.outputs] == ["dx"]


def test_reciprocal_no_nan_and_rounding_edges():
    x = np.array([0.0, 2.0, -0.5, 0.5, 1.5, 2.5], np.float32)
    close(predict(flow.math.reciprocal_no_nan, x), [0.0, 0.5, -2.0, 2.0, 1 / 1.5, 0.4])
    # halves round to even (rint / nearbyint)
    close(predict(flow.math.round, x), [0.0, 2.0, -0.0, 0.0, 2.0, 2.0])
    close(predict(flow.math.rint, x), [0.0, 2.0, -0.0, 0.0, 2.0, 2.0])


def test_sigmoid_gelu_tanh_v2():
    x = rand(2, 5, low=-3, high=3)
    f = check_grad(flow.math.sigmoid, torch.sigmoid, x)
    assert "sigmoid_grad" in op_types(f)
    sig_grad = [op for op in f.compiled_job.job.net.op if op.user_conf.op_type_name == "sigmoid_grad"][0]
    sig = [op for op in f.compiled_job.job.net.op if op.user_conf.op_type_name == "sigmoid"][0]
    assert sig_grad.user_conf.input["y"].s[0] == sig.user_conf.output["out"].s[0]  # grad reads y = out
    flow.clear_default_session()
    f = check_grad(flow.math.gelu, torch.nn.functional.gelu, x)
    assert "gelu_grad" in op_types(f)
    flow.clear_default_session()
    check_grad(flow.math.tanh_v2, torch.tanh, x)


def test_explicit_grad_wrappers():
    x, dy = rand(6), rand(6)
    y = 1 / (1 + np.exp(-x))
    close(predict(flow.math.sigmoid_grad, y, dy), dy * y * (1 - y))
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    (ref,) = torch.autograd.grad(torch.nn.functional.gelu(xt), xt, torch.tensor(dy.astype(np.float64)))
    flow.clear_default_session()
    close(predict(flow.math.gelu_grad, x, dy), ref.numpy())


def test_half_gelu_grad_is_one_kernel_in_float32_rounded_once():
    """gelu_grad of float16 blobs: one pass (no float32 copies of x and dy), the float64
    gradient rounded to float16 within one float16 ulp."""
    from test_plan import _AtenCalls
    kernel = registry.lookup("gelu_grad").kernel(None)
    rng = np.random.default_rng(4)
    x, dy = (torch.from_numpy(rng.uniform(-4, 4, 4096).astype(np.float16)) for _ in range(2))
    with _AtenCalls() as calls:
        dx = kernel(x, dy)
    assert dict(calls.count) == {"gelu_backward": 1} and dx.dtype == torch.float16
    xd = x.double().requires_grad_()
    (ref,) = torch.autograd.grad(torch.nn.functional.gelu(xd), xd, dy.double())
    ulp = torch.finfo(torch.float16).eps * ref.abs().clamp(min=2.0 ** -14)
    assert ((dx.double() - ref).abs() <= ulp).all()


# ----------------------------------------------------------------- binary family (§4.2)

def test_pow_atan2_xlogy_xdivy_floordiv():
    x, y = rand(3, 4, low=0.5, high=2), rand(3, 4, low=0.5, high=2)
    f = check_grad(flow.math.pow, torch.pow, x, y)
    assert {"pow", "pow_x_grad", "pow_y_grad"} <= set(op_types(f))
    for name, ref in (("atan2", torch.atan2), ("xlogy", torch.xlogy), ("xdivy", torch.div),
                      ("floordiv", lambda a, b: torch.div(a, b, rounding_mode="floor"))):
        flow.clear_default_session()
        a, b = (rand(3, 4, low=0.5, high=3), rand(3, 4, low=0.5, high=2))
        f = check_grad(getattr(flow.math, name), ref, a, b)
        assert {name, f"{name}_x_grad", f"{name}_y_grad"} <= set(op_types(f))


def test_xlogy_xdivy_zero_x():
    x = np.array([0.0, 1.0, 0.0], np.float32)
    y = np.array([0.0, 2.0, 5.0], np.float32)
    close(predict(flow.math.xlogy, x, y), [0.0, np.log(2.0), 0.0])
    flow.clear_default_session()
    close(predict(flow.math.xdivy, x, y), [0.0, 0.5, 0.0])


def test_binary_family_shape_mismatch_is_a_build_error():
    with pytest.raises(flow.JobBuildError, match=r"atan2.*input 'y' expected shape \(2, 3\).*received \(3,\)"):
        predict(flow.math.atan2, rand(2, 3), rand(3))


def test_scalar_pow():
    x = rand(2, 3, low=0.5, high=2)
    f = check_grad(lambda v: flow.math.pow(v, 3), lambda t: t ** 3, x)
    assert {"scalar_pow", "scalar_pow_grad"} <= set(op_types(f))
    flow.clear_default_session()
    check_grad(lambda v: flow.math.pow(v, 0.5), lambda t: t ** 0.5, x)


# ----------------------------------------------------------------- broadcast ops

def test_broadcast_pow_grads_reduce_to_input_shapes():
    x, y = rand(3, 1, low=0.5, high=2), rand(1, 4, low=0.5, high=2)
    f = check_grad(flow.math.pow, torch.pow, x, y)
    names = ops_named(f)
    assert "broadcast_pow" in names.values()
    assert any(n.endswith("_x_grad") and t == "broadcast_pow_x_grad" for n, t in names.items())
    assert any(n.endswith("_y_grad") and t == "broadcast_pow_y_grad" for n, t in names.items())


def test_broadcast_maximum_minimum_forward_and_no_grad():
    x, y = rand(2, 3), rand(3)
    close(predict(flow.math.maximum, x, y), np.maximum(x, y))
    flow.clear_default_session()
    close(predict(flow.math.minimum, x, y), np.minimum(x, y))
    flow.clear_default_session()
    with pytest.raises(flow.JobBuildError, match="broadcast_maximum.*no grad function"):
        train(flow.math.maximum, [x], feeds=[y])


def test_elementwise_maximum_minimum_grads():
    x, y = rand(4, 5), rand(4, 5)
    f = check_grad(flow.math.maximum, torch.maximum, x, y)
    assert {"elementwise_maximum", "elementwise_maximum_backward"} <= set(op_types(f))
    flow.clear_default_session()
    f = check_grad(flow.math.minimum, torch.minimum, x, y)
    assert "elementwise_minimum_backward" in op_types(f)


def test_elementwise_maximum_backward_declares_only_needed_outputs():
    x, y = rand(4), rand(4)
    out, grads, f = train(flow.math.maximum, [x], feeds=[y])
    (bw,) = [op for op in f.compiled_job.job.net.op if op.user_conf.op_type_name == "elementwise_maximum_backward"]
    assert list(bw.user_conf.output) == ["dx"]
    close(grads[0], (x >= y).astype(np.float32))


def test_mod_and_fmod():
    x = np.array([[-3.5, 2.0, 7.0], [5.5, -1.0, 0.5]], np.float32)
    y = np.array([2.0, -1.5, 3.0], np.float32)
    close(predict(flow.math.mod, x, y), np.mod(x, y))
    flow.clear_default_session()

    def fmod(a, b):
        return flow.user_op_builder("fm").Op("broadcast_fmod").Input("x", [a]).Input("y", [b]).Output("z") \
            .Build().InferAndTryRun().RemoteBlobList()[0]
    close(predict(fmod, x, y), np.fmod(x, y))
    flow.clear_default_session()
    # gradient passes to x only, reduced to x's shape
    out, grads, _ = train(flow.math.mod, [x[:1]], feeds=[x])
    close(grads[0], np.full((1, 3), 2.0))
    flow.clear_default_session()
    with pytest.raises(TypeError, match="flow.math.mod: argument 'y' expects a blob, received int 2"):
        predict(lambda a: flow.math.mod(a, 2), x)


@pytest.mark.parametrize("name,ref", [("equal", np.equal), ("not_equal", np.not_equal), ("greater", np.greater),
                                      ("greater_equal", np.greater_equal), ("less", np.less),
                                      ("less_equal", np.less_equal), ("logical_and", np.logical_and),
                                      ("logical_or", np.logical_or), ("logical_xor", np.logical_xor)])
def test_comparisons_broadcast_and_scalar(name, ref):
    x = np.array([[0, 1, 2], [2, 0, -1]], np.int32)
    y = np.array([2, 1, 0], np.int32)
    out = predict(getattr(flow.math, name), x, y)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, ref(x, y).astype(np.int8))
    flow.clear_default_session()
    out = predict(lambda a: getattr(flow.math, name)(a, 1), x)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, ref(x, 1).astype(np.int8))


def test_comparison_broadcast_error_names_both_shapes():
    with pytest.raises(flow.JobBuildError, match=r"broadcast_greater.*shapes \(2, 3\) and \(2,\) cannot be "
                                                 r"broadcast together"):
        predict(flow.math.greater, rand(2, 3), rand(2))


def test_broadcast_dtype_mismatch_is_a_build_error():
    with pytest.raises(flow.JobBuildError, match="input 'y' expected dtype float32.*received int32"):
        predict(flow.math.greater, rand(2, 3), np.zeros(3, np.int32))


# ----------------------------------------------------------------- arithmetic dispatch

@pytest.mark.parametrize("fn,kind,ref", [(flow.math.add, "add", torch.add), (flow.math.subtract, "sub", torch.sub),
                                         (flow.math.multiply, "mul", torch.mul),
                                         (flow.math.divide, "div", torch.div)])
def test_scalar_by_tensor_dispatch_and_grads(fn, kind, ref):
    x, s = rand(3, 4, low=0.5, high=2), rand(1, low=0.5, high=2)
    f = check_grad(fn, ref, x, s)
    assert f"scalar_{kind}_by_tensor" in op_types(f, completed=False)


def test_add_by_tensor_scalar_first():
    s, x = rand(1), rand(2, 3)
    f = check_grad(flow.math.add, torch.add, s, x)
    assert op_types(f, completed=False) == ["scalar_add_by_tensor"]


def test_dispatch_op_choice():
    x, y, c = rand(2, 3), rand(2, 3), rand(3)
    seen = {}

    def build(a, b, cc):
        seen["add"] = flow.math.add(a, b)
        seen["add_b"] = flow.math.add(a, cc)
        seen["sub"] = flow.math.subtract(a, b)
        seen["mul"] = flow.math.multiply(a, b)
        seen["div"] = flow.math.divide(a, b)
        seen["rdiv"] = flow.math.divide(2.0, a)
        return seen["rdiv"]
    out = predict(build, x, y, c)
    close(out, 2.0 / x)
    types = {k: v.op_name for k, v in seen.items()}
    assert types["add"].startswith("AddN_") and types["add_b"].startswith("broadcast_add_")
    assert types["sub"].startswith("broadcast_sub_") and types["mul"].startswith("ElementWiseMul_")
    assert types["div"].startswith("broadcast_div_")


def test_divide_number_by_blob_uses_reciprocal_no_nan():
    x = np.array([0.0, 2.0, 4.0], np.float32)
    close(predict(lambda a: flow.math.divide(2.0, a), x), [0.0, 1.0, 0.5])


def test_by_tensor_scalar_must_have_one_element():
    def build(a, b):
        return flow.user_op_builder("bt").Op("scalar_mul_by_tensor").Input("x", [a]).Input("scalar", [b]) \
            .Output("y").Build().InferAndTryRun().RemoteBlobList()[0]
    with pytest.raises(flow.JobBuildError, match=r"input 'scalar' must have exactly one element, received "
                                                 r"shape \(2,\)"):
        predict(build, rand(3), rand(2))


def test_scalar_floordiv_fmod_and_logical_ops():
    x = np.array([-3.5, 2.0, 7.0, 0.0], np.float32)

    def scalar(op_type, value):
        def build(a):
            attrs = {"has_float_operand": True, "float_operand": value} if isinstance(value, float) else \
                {"has_int_operand": True, "int_operand": value}
            b = flow.user_op_builder(op_type).Op(op_type).Input("in", [a]).Output("out")
            for k, v in attrs.items():
                b = b.Attr(k, v)
            return b.Build().InferAndTryRun().RemoteBlobList()[0]
        return build
    close(predict(scalar("scalar_floordiv", 2.0), x), np.floor_divide(x, 2.0))
    flow.clear_default_session()
    close(predict(scalar("scalar_fmod", 2.0), x), np.fmod(x, 2.0))
    flow.clear_default_session()
    out = predict(scalar("scalar_logical_and", 1), x)
    np.testing.assert_array_equal(out, (x != 0).astype(np.int8))
    flow.clear_default_session()
    xi = np.array([-3, 2, 7, 0], np.int32)
    # a float operand applied to an integer input is truncated to the element type, as OneFlow
    np.testing.assert_array_equal(predict(scalar("scalar_logical_greater", 1.9), xi), (xi > 1).astype(np.int8))


# ----------------------------------------------------------------- reductions

@pytest.mark.parametrize("name,axis,keepdims", [("reduce_max", 1, False), ("reduce_min", [0, 2], True),
                                                ("reduce_max", None, False), ("reduce_min", -1, False)])
def test_reduce_max_min_grads(name, axis, keepdims):
    x = rand(3, 4, 5)
    x[0, 1, :] = x[0, 1, 0]  # ties share the gradient equally
    x[1, :, 2] = x[1, 0, 2]
    dims = tuple(range(3)) if axis is None else (axis if isinstance(axis, list) else [axis])
    fn = torch.amax if name == "reduce_max" else torch.amin
    f = check_grad(lambda v: getattr(flow.math, name)(v, axis, keepdims),
                   lambda t: fn(t, dim=dims, keepdim=keepdims), x)
    names = ops_named(f)
    for suffix in ("_grad_broadcast_out", "_grad_broadcast_eq", "_grad_cast_mask", "_grad_reduce_sum_mask",
                   "_grad_divide_count", "_grad_broadcast_divided_dy", "_grad_multiply_mask"):
        assert any(n.endswith(suffix) for n in names), suffix


def test_reduce_prod_any_all():
    x = rand(2, 3, 4)
    close(predict(lambda v: flow.math.reduce_prod(v, [0, 2]), x), np.prod(x, axis=(0, 2)))
    flow.clear_default_session()
    b = np.array([[0, 1, 0], [0, 0, 0]], np.int32)
    out = predict(lambda v: flow.math.reduce_any(v, 1), b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, [True, False])
    flow.clear_default_session()
    np.testing.assert_array_equal(predict(lambda v: flow.math.reduce_all(v, 0, keepdims=True), b),
                                  [[False, False, False]])
    flow.clear_default_session()
    with pytest.raises(flow.JobBuildError, match="reduce_prod.*no grad function"):
        train(lambda v: flow.math.reduce_prod(v, 1), [x])


@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, True), ([0, 2], False)])
def test_composite_reductions(axis, keepdims):
    x = rand(3, 4, 5)
    dims = (0, 1, 2) if axis is None else tuple(axis) if isinstance(axis, list) else (axis,)
    cases = [
        (flow.math.reduce_mean, lambda t: t.mean(dims, keepdim=keepdims)),
        (flow.math.reduce_variance, lambda t: t.var(dims, unbiased=False, keepdim=keepdims)),
        (flow.math.reduce_std, lambda t: t.std(dims, unbiased=False, keepdim=keepdims)),
        (flow.math.reduce_logsumexp, lambda t: torch.logsumexp(t, dims, keepdim=keepdims)),
        (flow.math.reduce_euclidean_norm, lambda t: torch.linalg.vector_norm(t, dim=dims, keepdim=keepdims)),
    ]
    for fn, ref in cases:
        flow.clear_default_session()
        check_grad(lambda v: fn(v, axis, keepdims), ref, x)


def test_reduce_empty_axis_returns_input_and_bad_axis():
    x = rand(2, 3)
    close(predict(lambda v: flow.math.reduce_max(v, []), x), x)
    flow.clear_default_session()
    with pytest.raises(ValueError, match=r"reduce_sum: axis 2 is out of range for input of shape \(2, 3\)"):
        predict(lambda v: flow.math.reduce_sum(v, 2), x)


def test_squared_difference_polyval():
    x, y = rand(3, 4), rand(3, 4)
    check_grad(flow.math.squared_difference, lambda a, b: (a - b) ** 2, x, y)
    flow.clear_default_session()
    check_grad(lambda v: flow.math.polyval([2.0, -1.0, 0.5], v), lambda t: 2 * t * t - t + 0.5, x)
    flow.clear_default_session()
    close(predict(lambda v: flow.math.polyval([], v), x), np.zeros_like(x))
    with pytest.raises(ValueError, match="coeffs must be a list or tuple"):
        flow.math.polyval(3.0, None)


# ----------------------------------------------------------------- argmax / top_k / sort

def test_argmax_any_axis():
    x = rand(3, 4, 5)
    for axis in (-1, 0, 1):
        flow.clear_default_session()
        out = predict(lambda v: flow.math.argmax(v, axis), x)
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, np.argmax(x, axis=axis))


@pytest.mark.parametrize("axis,k", [(-1, 3), (0, 2), (1, 9)])
def test_top_k(axis, k):
    x = rand(4, 6)
    out = predict(lambda v: flow.math.top_k(v, axis=axis, k=k), x)
    assert out.dtype == np.int32
    ref = torch.topk(torch.tensor(x), min(k, x.shape[axis]), dim=axis).indices.numpy()
    np.testing.assert_array_equal(out, ref)


def test_top_k_bad_k():
    with pytest.raises(ValueError, match="top_k: k must be a positive int, received 0"):
        predict(lambda v: flow.math.top_k(v, k=0), rand(3))


def test_in_top_k():
    pred = np.array([[0.1, 0.5, 0.4], [0.3, 0.2, 0.5], [0.2, 0.2, 0.6]], np.float32)
    t = np.array([2, 0, 1], np.int32)
    out = predict(lambda a, b: flow.math.in_top_k(a, b, 2), t, pred)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, [1, 1, 1])
    flow.clear_default_session()
    np.testing.assert_array_equal(predict(lambda a, b: flow.math.in_top_k(a, b, 1), t, pred), [0, 0, 0])
    flow.clear_default_session()
    with pytest.raises(flow.JobBuildError, match="input 'targets' expected an integer dtype, received float32"):
        predict(lambda a, b: flow.math.in_top_k(a, b, 1), t.astype(np.float32), pred)


@pytest.mark.parametrize("axis,direction", [(-1, "ASCENDING"), (0, "DESCENDING")])
def test_sort_argsort(axis, direction):
    x = rand(4, 5)
    out = predict(lambda v: flow.math.argsort(v, axis, direction), x)
    assert out.dtype == np.int32
    ref = torch.sort(torch.tensor(x), dim=axis, descending=direction == "DESCENDING")
    np.testing.assert_array_equal(out, ref.indices.numpy())
    flow.clear_default_session()
    close(predict(lambda v: flow.math.sort(v, axis, direction), x), ref.values.numpy())
    flow.clear_default_session()
    with pytest.raises(ValueError, match="flow.sort: direction must be 'ASCENDING' or 'DESCENDING', received 'UP'"):
        predict(lambda v: flow.math.sort(v, -1, "UP"), rand(3))


# ----------------------------------------------------------------- clipping and sums

@pytest.mark.parametrize("lo,hi,op_type", [(-0.3, 0.4, "clip_by_scalar"), (-0.3, None, "clip_by_scalar_min"),
                                           (None, 0.4, "clip_by_scalar_max")])
def test_clip_by_value(lo, hi, op_type):
    x = rand(4, 5)
    f = check_grad(lambda v: flow.math.clip_by_value(v, lo, hi), lambda t: torch.clamp(t, lo, hi), x)
    assert {op_type, f"{op_type}_grad"} <= set(op_types(f))


def test_clip_integer_and_errors():
    x = np.array([-5, 0, 3, 9], np.int32)
    out = predict(lambda v: flow.math.clip_by_value(v, -1, 4), x)
    np.testing.assert_array_equal(out, [-1, 0, 3, 4])
    with pytest.raises(ValueError, match="min_value and max_value cannot both be None"):
        predict(lambda v: flow.math.clip_by_value(v), x)


@pytest.mark.parametrize("dtype, lo, hi", [
    (np.int32, -np.inf, 2 ** 40),  # int(-inf) raised OverflowError; 2**40 overflowed torch.clamp on int32
    (np.int8, -1000, 1),
    (np.float32, -np.inf, 0.5),
    (np.float32, -0.5, np.inf),
])
def test_clip_bounds_beyond_the_dtype_or_infinite_clip_as_numpy(dtype, lo, hi):
    x = np.array([-100, -5, 0, 3, 100], dtype)
    out = predict(lambda v: flow.math.clip_by_value(v, lo, hi), x)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, np.clip(x.astype(np.float64), lo, hi).astype(dtype))


@pytest.mark.parametrize("build, message", [
    # torch refused these at the first run (or while the plan folded constants) with its own RuntimeError
    (lambda v: flow.pad(v, [(1, 1)], constant_value=1000), "(pad): attr 'integral_constant_value' 1000 does not fit"),
    (lambda v: flow.one_hot(flow.cast(v, flow.int32), depth=3, on_value=1000, dtype=flow.int8),
     "(one_hot): attr 'integer_on_value' 1000 does not fit"),
    (lambda v: flow.math.tril(flow.reshape(flow.concat([v, v, v], 0), (3, 3)), fill_value=1000),
     "(tril): attr 'integer_fill_value' 1000 does not fit"),
    (lambda v: flow.masked_fill(v, v > 0, 1000), "the int_operand 1000 does not fit"),
    (lambda v: v + flow.constant(2 ** 40, dtype=flow.int8, shape=(3,)),
     "(constant): attr 'integer_value' 1099511627776"),
    (lambda v: v + float("inf"), "(scalar_add): attr 'float_operand' inf does not fit"),
])
def test_a_fill_value_outside_an_integer_dtype_is_a_build_error(build, message):
    with pytest.raises(flow.JobBuildError) as e:
        predict(build, np.array([-3, 0, 5], np.int8))
    assert message in str(e.value) and "int8 output (range [-128, 127])" in str(e.value)


@pytest.mark.parametrize("build, message", [
    (lambda v: flow.pad(v, [(1, 1)], constant_value=float("inf")), "flow.pad: argument 'constant_value' inf"),
    (lambda v: flow.one_hot(flow.cast(v, flow.int32), depth=3, on_value=float("nan"), dtype=flow.int32),
     "flow.one_hot: argument 'on_value' nan"),
])
def test_a_non_finite_fill_for_an_integer_blob_is_an_argument_error(build, message):
    # int(inf) raised OverflowError inside graphfront
    with pytest.raises(flow.ArgumentError, match=re.escape(message) + " cannot be an element of the int"):
        predict(build, np.array([-3, 0, 5], np.int8))


@pytest.mark.parametrize("build, op_type", [(lambda x, y: flow.math.divide(x, y), "broadcast_div"),
                                            (lambda x, y: flow.math.mod(x, y), "broadcast_floor_mod")])
def test_an_integer_division_by_zero_names_the_op_and_index_and_the_session_goes_on(build, op_type):
    # torch's bare "RuntimeError: ZeroDivisionError" on the CPU
    x, y = np.array([7, -7, 9], np.int32), np.array([2, 0, 4], np.int32)
    with pytest.raises(flow.OpRunError, match=rf"\({op_type}\): input 'y' holds 0 at index \(1,\), an integer"):
        predict(build, x, y)
    flow.clear_default_session()
    y[1] = 3
    want = np.trunc(x / y) if op_type == "broadcast_div" else np.mod(x, y)
    np.testing.assert_array_equal(predict(build, x, y), want.astype(np.int32))


def test_the_integer_minimum_divided_by_minus_one_wraps_and_the_process_lives():
    # torch's truncating division of an int32 minimum by -1 traps: SIGFPE ended the process
    x, y = np.array([-2 ** 31, 7, -7, 9], np.int32), np.array([-1, -1, 2, -4], np.int32)
    out = predict(lambda a, b: flow.math.divide(a, b), x, y)
    np.testing.assert_array_equal(out, [-2 ** 31, -7, -3, -2])


def test_clip_refuses_a_nan_bound():
    with pytest.raises(flow.ArgumentError, match="min_value expects a Python number \\(not NaN\\) or None"):
        predict(lambda v: flow.math.clip_by_value(v, float("nan"), 1.0), rand(3))


def test_square_sum_and_count_not_finite():
    x = rand(3, 4)
    out = predict(flow.math.square_sum, x)
    assert out.shape == (1,)
    close(out, [np.sum(x.astype(np.float64) ** 2)])
    flow.clear_default_session()
    y = np.array([1.0, np.inf, np.nan, -np.inf, 0.0], np.float32)
    out = predict(flow.math.count_not_finite, y)
    assert out.dtype == np.int64 and out.tolist() == [3]
    flow.clear_default_session()
    out = predict(lambda a, b: flow.math.multi_count_not_finite([a, b]), y, x)
    assert out.tolist() == [3]
    flow.clear_default_session()

    def mss(a, b):
        return flow.user_op_builder("mss").Op("multi_square_sum").Input("x", [a, b]).Output("y") \
            .Build().InferAndTryRun().RemoteBlobList()[0]
    close(predict(mss, x, x[0]), [np.sum(x.astype(np.float64) ** 2) + np.sum(x[0].astype(np.float64) ** 2)])


@pytest.mark.parametrize("chunk", [None, 1 << 26, 7])
def test_multi_tensor_reductions_over_layouts_and_chunks(monkeypatch, chunk):
    """multi_count_not_finite and multi_square_sum read many tensors in a few large kernels
    (as on a GPU): the count concatenated in memory order (contiguous, channels-last,
    transposed and strided views) in bounded chunks (7 elements forces one chunk per tensor
    and splits), the square sum from one multi-tensor norm with no concatenation; or one
    tensor at a time (``None``, as on the CPU), against numpy."""
    from graphfront.ops import common, reduce_ops
    from test_plan import _AtenCalls
    if chunk is not None:
        monkeypatch.setattr(common, "multi_tensor_kernels", lambda device: True)
        monkeypatch.setattr(reduce_ops, "_CHUNK", chunk)
    rng = np.random.default_rng(3)
    base = torch.from_numpy(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    xs = [base.clone(), base.clone().contiguous(memory_format=torch.channels_last), base.clone().transpose(1, 3),
          base.clone()[:, ::2, 1:], torch.tensor(2.5), torch.zeros(0, 3), torch.from_numpy(rand(11))]
    xs[0][0, 1, 2, 3], xs[1][1, 2, 0, 4], xs[2][0, 4, 1, 2] = np.inf, np.nan, -np.inf
    xs[3][1, 0, 1, 1], xs[6][5] = np.nan, np.inf   # (the strided view writes through to its base)
    count = registry.lookup("multi_count_not_finite").kernel(None)
    square_sum = registry.lookup("multi_square_sum").kernel(None)
    arrays = [x.numpy() for x in xs]
    assert count(xs).tolist() == [sum(int((~np.isfinite(a)).sum()) for a in arrays)] == [5]
    finite = [torch.nan_to_num(x, nan=0.5, posinf=1.5, neginf=-1.5) for x in xs]
    want = sum(float((x.numpy().astype(np.float64) ** 2).sum()) for x in finite)
    with _AtenCalls() as calls:
        got = square_sum(finite)
    assert got.shape == (1,) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), [want], rtol=1e-6)
    if chunk is not None:   # each element read once, by one multi-tensor kernel
        assert calls.count["_foreach_norm"] == 1 and not calls.count["cat"], calls.count
    # float16 tensors: float32 accumulation, a float16 result; at most two float16 roundings
    # (of each product where the squares are float16, of the result), 2 ** -11 each
    half = [x.half() for x in finite]
    got = square_sum(half)
    want = sum(float((x.numpy().astype(np.float64) ** 2).sum()) for x in half)
    assert got.dtype == torch.float16
    np.testing.assert_allclose(got.float().numpy(), [want], rtol=2 * 2 ** -11)
    half = [x.half() for x in xs]
    assert count(half).tolist() == [5]
    assert count([torch.arange(6), torch.ones(2, dtype=torch.int64)]).tolist() == [0]


@pytest.mark.parametrize("chunk", [1 << 26, 7])
def test_count_not_finite_compiled_by_inductor(monkeypatch, chunk):
    """On a GPU each chunk's count is compiled by TorchInductor into one reduction (the CPU,
    added to ``INDUCTOR_DEVICES``, compiles the same formula to C++): the counts of float32 and
    float16 tensors against numpy, one compiled function per chunk size, and a later call of
    the same kernel with other tensors still right."""
    from graphfront.ops import common, reduce_ops
    monkeypatch.setattr(common, "_INDUCTOR", {})
    monkeypatch.setattr(common, "INDUCTOR_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(common, "multi_tensor_kernels", lambda device: True)
    monkeypatch.setattr(reduce_ops, "_CHUNK", chunk)
    rng = np.random.default_rng(5)
    xs = [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ((3, 4), (5,), (2, 3))]
    xs[0][1, 2], xs[1][4], xs[2][0, 0], xs[2][1, 1] = np.inf, np.nan, -np.inf, np.nan
    count = registry.lookup("multi_count_not_finite").kernel(None)
    want = sum(int((~np.isfinite(x.numpy())).sum()) for x in xs)
    assert count(xs).tolist() == [want] == [4]
    compiled = [fn for (key, _), fn in common._INDUCTOR.items() if key == ("count_not_finite",)]
    assert compiled and None not in compiled
    assert len(compiled) == (1 if chunk > 100 else 3)   # (7 elements: one chunk per tensor)
    assert count([x.half() for x in xs]).tolist() == [4]
    xs[1][0] = np.inf
    assert count(xs).tolist() == [5]


def test_unscaled_gradients_packed_in_one_buffer_are_counted_in_place(monkeypatch):
    """As on a GPU, multi_scalar_mul_by_tensor writes its outputs side by side in one buffer
    (each laid out as its input: contiguous, channels-last, transposed, a scalar, an empty
    one), bit for bit the per-tensor results, and multi_count_not_finite over them reads that
    buffer in place: no concatenation, one count (numpy's)."""
    from graphfront.ops import common
    from test_plan import _AtenCalls
    rng = np.random.default_rng(7)
    base = torch.from_numpy(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    xs = [base.half(), base.clone().contiguous(memory_format=torch.channels_last), base.clone().transpose(1, 3),
          torch.tensor(2.5, dtype=torch.float16), torch.zeros(0, 3), base[:, ::2, 1:]]
    xs[0][0, 1, 2, 3], xs[1][1, 2, 0, 4] = np.inf, np.nan
    scalar = torch.tensor([2.0 ** -4])
    scale = registry.lookup("multi_scalar_mul_by_tensor").kernel(types.SimpleNamespace(
        input=lambda arg, i=0: types.SimpleNamespace(dtype=flow.float32 if arg == "scalar" else
                                                     {torch.float16: flow.float16}.get(xs[i].dtype, flow.float32)),
        output_count=lambda arg: len(xs)))
    count = registry.lookup("multi_count_not_finite").kernel(None)
    separate = scale(xs, scalar)
    monkeypatch.setattr(common, "multi_tensor_kernels", lambda device: True)
    packed = scale(xs, scalar)
    storage = packed[0].untyped_storage()._cdata
    assert all(y.untyped_storage()._cdata == storage for y in packed)
    for x, y, want in zip(xs, packed, separate):
        assert y.dtype == torch.float32 and y.shape == x.shape
        assert torch.equal(y.isnan(), want.isnan()) and torch.equal(y.nan_to_num(0.5), want.nan_to_num(0.5))
        if x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last) or x.dim() < 2:
            assert y.stride() == want.stride(), (x.stride(), y.stride(), want.stride())
    with _AtenCalls() as calls:
        got = count(packed)
    assert got.tolist() == [sum(int((~np.isfinite(y.numpy())).sum()) for y in separate)] == [2]
    assert not calls.count["cat"] and calls.count["sub"] == 1, calls.count
    with _AtenCalls() as calls:
        assert count(separate).tolist() == [2]
    assert calls.count["cat"] == 1


def test_l2_normalize():
    x = rand(3, 4)
    check_grad(lambda v: flow.math.l2_normalize(v, axis=1),
               lambda t: t / torch.sqrt(torch.clamp((t * t).sum(1, keepdim=True), min=1e-12)), x)
    flow.clear_default_session()
    # below epsilon the normalizer is sqrt(epsilon)
    small = np.full((1, 2), 1e-3, np.float32)
    check_grad(lambda v: flow.math.l2_normalize(v, axis=1, epsilon=0.1),
               lambda t: t / torch.sqrt(torch.clamp((t * t).sum(1, keepdim=True), min=0.1)), small)


def test_l2_normalize_of_a_lone_element_is_its_sign_with_a_zero_gradient():
    """Along an axis of size 1, y = x / |x| is exactly +-1 and dx exactly 0 (as in float64):
    OneFlow's kernel divides by the rounded square root. Multiplying by ``rsqrt`` instead
    rounds twice, and at small |x| its gradient's cancellation error (about
    ``float32 eps * |dy| / |x|``) exceeds any fixed tolerance."""
    x = np.array([[[8.496549e-3]], [[-3e-4]], [[0.7]], [[-1.9]]], np.float32) * np.ones((1, 1, 4), np.float32)
    out, (dx,), _ = train(lambda v: flow.math.l2_normalize(v, axis=1), [x])
    np.testing.assert_array_equal(out, np.sign(x))
    np.testing.assert_array_equal(dx, np.zeros_like(x))


# ----------------------------------------------------------------- where / masked_fill / tril

def test_where_grads_with_broadcast():
    c = np.array([[1, 0, 1]], np.int8)
    x, y = rand(2, 3), rand(3)
    out, grads, f = train(lambda a, b, cc: flow.math.where(cc, a, b), [x, y], feeds=[c])
    close(out, np.where(c != 0, x, y))
    close(grads[0], np.broadcast_to(c != 0, (2, 3)).astype(np.float32))
    close(grads[1], np.sum(np.broadcast_to(c == 0, (2, 3)), axis=0).astype(np.float32))
    assert {"where", "zero_like"} <= set(op_types(f))


def test_where_scalar_variants():
    c = np.array([1, 0, 2], np.int32)
    x = rand(3)
    close(predict(lambda cc, a: flow.math.where(cc, 5.0, a), c, x), np.where(c != 0, 5.0, x))
    flow.clear_default_session()
    close(predict(lambda cc, a: flow.math.where(cc, a, -1), c, x), np.where(c != 0, x, -1))
    flow.clear_default_session()
    out = predict(lambda cc: flow.math.where(cc, 1, 2), c)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [1, 2, 1])
    flow.clear_default_session()
    with pytest.raises(ValueError, match="x and y must both be given"):
        predict(lambda cc: flow.math.where(cc, 1), c)


def test_where_condition_dtype_error():
    with pytest.raises(flow.JobBuildError, match="input 'condition' expected an integer or bool dtype, received "
                                                 "float32"):
        predict(lambda cc, a, b: flow.math.where(cc, a, b), rand(3), rand(3), rand(3))


def test_masked_fill():
    x = rand(2, 3)
    m = np.array([[1, 0, 0], [0, 1, 1]], np.int8)
    out, grads, f = train(lambda a, mm: flow.math.masked_fill(a, mm, 9.0), [x], feeds=[m])
    close(out, np.where(m != 0, 9.0, x))
    close(grads[0], (m == 0).astype(np.float32))
    flow.clear_default_session()

    def raw(a, mm):
        return flow.user_op_builder("mf").Op("masked_fill").Input("x", [a]).Input("mask", [mm]).Output("out") \
            .Attr("has_float_operand", True).Attr("float_operand", -2.0).Build().InferAndTryRun() \
            .RemoteBlobList()[0]
    close(predict(raw, x, m), np.where(m != 0, -2.0, x))


@pytest.mark.parametrize("diagonal", [0, -1, 1])
def test_tril_triu_fused_scale_tril(diagonal):
    x = rand(2, 4, 5)
    f = check_grad(lambda v: flow.math.tril(v, diagonal), lambda t: torch.tril(t, diagonal), x)
    assert op_types(f).count("tril") == 2
    flow.clear_default_session()
    mask = torch.ones(4, 5, dtype=torch.bool).tril(diagonal)
    check_grad(lambda v: flow.math.fused_scale_tril(v, diagonal, fill_value=-1.5, scale=2.0),
               lambda t: torch.where(mask, 2 * t, torch.tensor(-1.5, dtype=t.dtype)), x)
    flow.clear_default_session()

    def triu(v):
        return flow.user_op_builder("tu").Op("triu").Input("in", [v]).Output("out").Attr("diagonal", diagonal) \
            .Build().InferAndTryRun().RemoteBlobList()[0]
    close(predict(triu, x), np.triu(x, diagonal))
    flow.clear_default_session()
    close(predict(lambda v: flow.math.tril(v, diagonal, fill_value=7), x),
          np.where(np.tril(np.ones((4, 5)), diagonal) != 0, x, 7))


def test_tril_fill_and_scale_given_as_numpy_floats_are_not_truncated():
    # a np.float32 fill value was taken as an integer fill: 0.5 filled 0
    x = rand(4, 5)
    keep = np.tril(np.ones((4, 5))) != 0
    close(predict(lambda v: flow.math.tril(v, fill_value=np.float32(0.5)), x), np.where(keep, x, 0.5))
    flow.clear_default_session()
    close(predict(lambda v: flow.math.fused_scale_tril(v, fill_value=np.float32(-1.5), scale=np.float32(2.5)), x),
          np.where(keep, 2.5 * x, -1.5))


def test_tril_rank_error():
    with pytest.raises(flow.JobBuildError, match=r"input 'in' must have rank >= 2, received shape \(3,\)"):
        predict(lambda v: flow.math.tril(v), rand(3))


# ----------------------------------------------------------------- attr types on the wire

def test_attr_types_follow_oneflow():
    expect = {
        ("scalar_pow", "float_operand"): "double", ("scalar_pow", "int_operand"): "int64",
        ("top_k", "k"): "int32", ("top_k", "sorted"): "bool", ("in_top_k", "k"): "int32",
        ("clip_by_scalar", "floating_min"): "double", ("clip_by_scalar", "integral_max"): "int64",
        ("clip_by_scalar_max", "floating_max"): "double", ("tril", "diagonal"): "int64",
        ("tril", "floating_fill_value"): "double", ("triu", "diagonal"): "int64",
        ("reduce_max", "axis"): "list_int32", ("arg_sort", "direction"): "string",
        ("where_scalar_xy", "x_float_operand"): "double", ("l2_normalize", "epsilon"): "float",
        ("l2_normalize", "axis"): "int32",
    }
    for (t, a), ty in expect.items():
        assert registry.lookup(t).attrs[a].type == ty, (t, a)
    for t in ("broadcast_equal", "broadcast_logical_xor", "scalar_logical_less", "top_k", "arg_sort", "sort",
              "in_top_k", "count_not_finite", "multi_count_not_finite", "cast_like", "where_scalar_xy"):
        assert registry.lookup(t).no_grad, t
    for t in ("broadcast_maximum", "broadcast_minimum", "reduce_prod", "scalar_floordiv", "scalar_fmod", "triu",
              "masked_fill", "square_sum", "multi_square_sum", "where_scalar_x", "where_scalar_y"):
        opdef = registry.lookup(t)
        assert not opdef.no_grad and not opdef.has_grad, t
