"""``compile_mode("onnxruntime")`` when onnxruntime's graph optimizations make an op its
build has no kernel for (graphfront/runtime/onnxruntime_plan.py, ``inference_session``):
some builds fuse silu's ``Sigmoid * Mul`` into a ``com.microsoft`` ``QuickGelu`` and then
find no CPU kernel for it, so creating the session fails with NOT_IMPLEMENTED. Such a
build is simulated here: a session whose optimized graph holds a ``com.microsoft`` node
is refused as that build refuses it; the job then runs at basic graph optimizations (no
contrib ops), with the per-op plan's results."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.session import default_session


def _silu_job(mode, dtype, name):
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    cfg.default_placement_scope(flow.scope.placement("cpu", "0:0"))  # onnxruntime runs on the CPU

    def silu(x: tp.Numpy.Placeholder((2, 5), dtype=dtype)) -> tp.Numpy:
        return flow.nn.silu(x)
    silu.__name__ = name
    return flow.global_function(type="predict", function_config=cfg)(silu)


@pytest.fixture
def without_contrib_kernels(monkeypatch, tmp_path):
    """onnxruntime.InferenceSession as in a build without kernels for the contrib ops its
    optimizers make: refused (NOT_IMPLEMENTED, naming the op) when the optimized graph has one.
    Yields ``(graph optimization level, refused)`` of each session asked for."""
    real, sessions = ort.InferenceSession, []

    def session(model, options=None, **kwargs):
        options = options or ort.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / f"optimized_{len(sessions)}.onnx")
        sess = real(model, options, **kwargs)
        contrib = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node
                   if n.domain == "com.microsoft"]
        sessions.append((options.graph_optimization_level, bool(contrib)))
        if contrib:
            raise OrtNotImplemented(f"[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation "
                                    f"for {contrib[0]}(1) node")
        return sess
    monkeypatch.setattr(ort, "InferenceSession", session)
    yield sessions


@pytest.mark.parametrize("dtype", [flow.float, flow.double], ids=["float32", "float64"])
def test_a_silu_job_runs_at_basic_optimizations_where_the_fused_op_has_no_kernel(without_contrib_kernels, dtype):
    x = np.random.default_rng(0).uniform(-3, 3, (2, 5)).astype(flow.convert_oneflow_dtype_to_numpy_dtype(dtype))
    want = _silu_job("plan", dtype, "silu_plan")(x)
    got = _silu_job("onnxruntime", dtype, "silu_ort")(x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    plan = default_session().jobs["silu_ort"].plan
    levels = ort.GraphOptimizationLevel
    (first, refused), *retry = without_contrib_kernels
    assert first == levels.ORT_ENABLE_ALL  # onnxruntime's default first
    if dtype == flow.float:  # (onnxruntime >= 1.17 fuses a float32 Sigmoid * Mul into QuickGelu)
        assert refused
    if refused:  # then once more, at basic level, where no contrib op is made
        assert retry == [(levels.ORT_ENABLE_BASIC, False)] and plan.optimization_level == "basic"
    else:
        assert retry == [] and plan.optimization_level == "all"


def test_the_default_level_is_kept_where_it_works():
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    got = _silu_job("onnxruntime", flow.float, "silu_ort")(x)
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)), rtol=1e-6, atol=1e-7)
    assert default_session().jobs["silu_ort"].plan.optimization_level == "all"


def test_a_model_refused_at_basic_optimizations_too_raises_that_error(monkeypatch):
    def refuse(model, options=None, **kwargs):
        raise OrtNotImplemented("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
                                "Sigmoid(13) node")
    monkeypatch.setattr(ort, "InferenceSession", refuse)
    job = _silu_job("onnxruntime", flow.float, "silu_ort")
    with pytest.raises(Exception, match=r"NOT_IMPLEMENTED : Could not find an implementation for Sigmoid"):
        job(np.zeros((2, 5), np.float32))
