"""Build-time and run-time errors name the op/argument, expected vs received, and the user's line."""
import inspect
import warnings

import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import dtypes


def _line_of(marker):
    """Line number of the source line in this file containing ``marker``."""
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i + 1 for i, ln in enumerate(lines) if marker in ln and "_line_of" not in ln)


def _points_here(message, marker):
    return f"{__file__}:{_line_of(marker)}" in message


def test_dense_on_wrong_rank_input_names_layer_and_line():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        return flow.layers.dense(x, 3, name="fc")  # MARK-dense

    with pytest.raises(flow.JobBuildError) as e:
        job(np.zeros(4, np.float32))
    msg = str(e.value)
    assert "layers.dense 'fc'" in msg and "rank >= 2" in msg and "(4,)" in msg
    assert _points_here(msg, "MARK-dense")


def test_matmul_inner_dim_mismatch_names_input_b():
    @flow.global_function()
    def job(a: tp.Numpy.Placeholder((2, 3)), b: tp.Numpy.Placeholder((4, 5))) -> tp.Numpy:
        return flow.matmul(a, b, name="mm")  # MARK-mm

    with pytest.raises(flow.JobBuildError) as e:
        job(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))
    msg = str(e.value)
    assert "op 'mm' (matmul)" in msg and "input 'b'" in msg and "3" in msg and "(4, 5)" in msg
    assert _points_here(msg, "MARK-mm")


def test_conv2d_weight_shape_mismatch_expected_vs_received():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((1, 3, 8, 8))) -> tp.Numpy:
        w = flow.get_variable("w", (4, 2, 3, 3), initializer=flow.zeros_initializer())
        return flow.nn.conv2d(x, w, strides=1, padding="VALID", name="conv")  # MARK-conv

    with pytest.raises(flow.JobBuildError) as e:
        job(np.zeros((1, 3, 8, 8), np.float32))
    msg = str(e.value)
    assert "op 'conv' (conv2d)" in msg
    assert "input 'weight' expected shape (4, 3, 3, 3)" in msg and "received (4, 2, 3, 3)" in msg
    assert _points_here(msg, "MARK-conv")


def test_wrong_attr_type_is_rejected_by_the_builder():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        b = flow.get_variable("b", (3,), initializer=flow.zeros_initializer())
        return (flow.user_op_builder("ba").Op("bias_add").Input("a", [x]).Input("b", [b]).Output("out")
                .Attr("axis", 1.5)  # MARK-attr
                .Build().InferAndTryRun().RemoteBlobList()[0])

    with pytest.raises(flow.JobBuildError) as e:
        job(np.zeros((2, 3), np.float32))
    msg = str(e.value)
    assert "attr 'axis' expects int32, received 1.5 (float)" in msg
    assert _points_here(msg, "MARK-attr")


def test_unknown_op_type_suggests_close_names():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.user_op_builder("r").Op("reluu").Input("x", [x]).Output("y").Build() \
            .InferAndTryRun().RemoteBlobList()[0]  # MARK-unknown

    with pytest.raises(flow.JobBuildError) as e:
        job(np.zeros((2, 3), np.float32))
    msg = str(e.value)
    assert "unknown op type 'reluu'" in msg and "did you mean" in msg and "relu" in msg


def test_unknown_attr_and_missing_input_are_named():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.user_op_builder("r").Op("relu").Input("x", [x]).Output("y").Attr("alpha", 1.0).Build() \
            .InferAndTryRun().RemoteBlobList()[0]

    with pytest.raises(flow.JobBuildError, match=r"op 'r' \(relu\): no attr named 'alpha'"):
        job(np.zeros((2, 3), np.float32))
    flow.clear_default_session()

    @flow.global_function()
    def job2(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.user_op_builder("m").Op("matmul").Input("a", [x]).Output("out").Build() \
            .InferAndTryRun().RemoteBlobList()[0]

    with pytest.raises(flow.JobBuildError, match="requires input 'b', which is missing"):
        job2(np.zeros((2, 3), np.float32))


def test_a_feed_of_another_numeric_dtype_is_cast_as_oneflow_casts_it_or_refused_where_inexact():
    # OneFlow's feed copy force-casts (pybind11 array_t of the blob's type): np.random.randint's
    # int64 labels into an int32 placeholder, float64 into float32, uint8 pixels into float32
    @flow.global_function()
    def job(labels: tp.Numpy.Placeholder((4,), dtype=flow.int32), x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        return flow.cast(labels, flow.float) + x

    labels = np.array([0, 3, -2, 2 ** 31 - 1])
    want = labels.astype(np.float32) + np.float32(0.25)
    np.testing.assert_array_equal(job(labels, np.full(4, 0.25)), want)
    np.testing.assert_array_equal(job(np.arange(4, dtype=np.uint8), np.full(4, 0.25, np.float16)),
                                  np.arange(4) + np.float32(0.25))
    # values an int32 cannot hold exactly: OneFlow would wrap or truncate them; refused, naming the first
    for bad, shown in ((np.array([0, 1, 2 ** 31, 3]), r"int64 value 2147483648 at index \(2,\)"),
                       (np.array([0, 1.5, 2, 3]), r"float64 value 1.5 at index \(1,\)"),
                       (np.array([0, 1, 2, np.nan]), r"float64 value nan at index \(3,\)")):
        with pytest.raises(flow.FeedError, match=r"argument 'labels': expected dtype int32 \(int32\); the " + shown +
                           r" has no equal in int32\n  at "):
            job(bad, np.zeros(4, np.float32))
    np.testing.assert_array_equal(job(labels, np.full(4, 0.25, np.float32)), want)


def test_a_read_only_feed_runs_without_torchs_warning():
    # torch.from_numpy of a read-only array (np.frombuffer, a memory-mapped data set) warned
    # "The given NumPy array is not writable" from inside graphfront
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.math.relu(x)

    x = np.frombuffer(np.arange(-3, 3, dtype=np.float32).tobytes(), np.float32).reshape(2, 3)
    assert not x.flags.writeable
    assert dtypes.numpy_to_tensor(x).numpy().flags.writeable  # (a copy: torch warns only once a process)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(job(x), np.maximum(x, 0))


def test_feed_errors_name_argument_and_keep_the_session_usable():
    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        w = flow.get_variable("w", (2, 3), initializer=flow.ones_initializer())
        loss = flow.math.reduce_sum(x * w)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss

    good = np.ones((2, 3), np.float32)
    assert job(good) == pytest.approx(6.0)
    with pytest.raises(flow.FeedError) as e:
        job(np.ones((3, 3), np.float32))  # MARK-feed
    msg = str(e.value)
    assert "argument 'x': expected shape (2, 3), received (3, 3)" in msg
    assert _points_here(msg, "MARK-feed")
    with pytest.raises(flow.FeedError, match=r"expected dtype float32 \(float32\), received <U1"):
        job(np.full((2, 3), "1"))
    with pytest.raises(flow.FeedError, match="expects a numpy.ndarray"):
        job([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(flow.FeedError, match="expects 1 argument"):
        job(good, good)
    # the failed calls neither ran the job nor corrupted the variables: one more step
    # continues from the state after the first step (w = 1 - 0.5 * x = 0.5)
    assert job(good) == pytest.approx(3.0)
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), np.zeros((2, 3)))


def test_gpu_placement_without_cuda_fails_at_build_time_with_advice(monkeypatch):
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.scope.placement("gpu", "0:0"):  # MARK-gpu
            return flow.math.relu(x)
    monkeypatch.setattr(flow.parallel.placement, "GPU_FALLBACK", [False])  # (by default "gpu" runs on the CPU)
    x = np.array([-1.0, 2.0], np.float32)
    if torch.cuda.is_available():
        np.testing.assert_array_equal(job(x), [0.0, 2.0])
        return
    with pytest.raises(flow.JobBuildError) as e:
        job(x)
    msg = str(e.value)
    assert "CUDA is not available" in msg and 'flow.scope.placement("cpu", ...)' in msg
    assert _points_here(msg, "MARK-gpu")


def test_build_error_leaves_other_jobs_working():
    @flow.global_function()
    def bad(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.reshape(x, (3,))  # MARK-reshape

    @flow.global_function()
    def good(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.relu(x)

    # jobs compile independently: the broken one does not stop the good one ...
    np.testing.assert_array_equal(good(np.array([-1, 1], np.float32)), [0, 1])
    # ... and reports its own error when it is called, every time
    for _ in range(2):
        with pytest.raises(flow.JobBuildError, match=r"attr .shape. \(3,\) has 3 elements, input .in. of shape "
                                                     r"\(2,\) has 2") as e:
            bad(np.zeros(2, np.float32))
        assert _points_here(str(e.value), "MARK-reshape")
    np.testing.assert_array_equal(good(np.array([1, -1], np.float32)), [1, 0])
    # fix the broken job by redefining it
    @flow.global_function()
    def bad(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:  # noqa: F811
        return flow.reshape(x, (2, 1))

    np.testing.assert_array_equal(good(np.array([-1, 1], np.float32)), [0, 1])
    assert bad(np.zeros(2, np.float32)).shape == (2, 1)


def test_duplicate_op_name_and_return_type_errors():
    @flow.global_function()
    def dup(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        flow.math.relu(x, name="same")
        return flow.math.relu(x, name="same")

    with pytest.raises(flow.JobBuildError, match="an op named 'same' already exists"):
        dup(np.zeros(2, np.float32))
    flow.clear_default_session()

    @flow.global_function()
    def wrong_return(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return (x, x)

    with pytest.raises(flow.JobBuildError, match="annotated Numpy expects a blob, received tuple"):
        wrong_return(np.zeros(2, np.float32))


def test_unannotated_parameter_and_bad_type_are_rejected_at_decoration():
    with pytest.raises(TypeError, match="parameter 'x' must be annotated"):
        @flow.global_function()
        def job(x):
            return x
    with pytest.raises(ValueError, match='type must be "train" or "predict"'):
        flow.global_function(type="training")
    with pytest.raises(ValueError, match="shape must be a non-empty tuple of positive ints"):
        tp.Numpy.Placeholder([2, 3])


def test_ops_outside_jobs():
    # (minimize in a predict job makes it a train job, as OneFlow: tests/test_oneflow_behaviour.py)
    with pytest.raises(flow.JobBuildError, match="no job is being built"):
        flow.get_variable("v", (1,))
