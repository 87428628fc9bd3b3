"""flow.math.two_stage_reduce_max / two_stage_reduce_min: values and gradients against numpy.

The gradient reference is OneFlow's documented convention: ``dy`` shared equally by every
element equal to the result (ties on a coarse integer grid make that matter), whichever
device part the ties fall in.
"""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import ArgumentError

SHAPE = (2, 8, 3, 4)


def _run(kind, axis, split_axis, keepdims, x, ndev=1):
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)
    seen = {}

    @flow.global_function(type="train")
    def job(x_in: tp.Numpy.Placeholder(SHAPE)) -> tp.Numpy:
        v = flow.get_variable("v", shape=(1,), dtype=flow.float, initializer=flow.zeros_initializer())
        y = x_in + v
        fn = getattr(flow.math, f"two_stage_reduce_{kind}")
        out = fn(y.with_distribute(flow.distribute.split(split_axis)), axis=axis, keepdims=keepdims)
        loss = flow.math.reduce_sum(out * out)  # dy = 2 out: each element's share is checked, not only the count
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        flow.watch_diff(y, lambda d: seen.__setitem__("dx", d.numpy()))
        return out

    out = job(x)
    return out, seen["dx"]


def _reference(kind, x, axis, keepdims):
    red = np.max if kind == "max" else np.min
    kept = red(x, axis=axis, keepdims=True)
    hit = x == kept
    dy = 2.0 * kept
    dx = np.where(hit, dy / hit.sum(axis=axis, keepdims=True), 0.0)
    out = kept if keepdims else np.atleast_1d(np.squeeze(kept, axis=axis))  # all axes removed: shape (1,)
    return out, dx


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("axis,split_axis,keepdims", [((1,), 1, True), ((1, 2), 1, False), ((1, 2, 3), 2, True),
                                                     ((0, 1, 2, 3), 1, False)])
def test_values_and_gradient_against_numpy(kind, axis, split_axis, keepdims):
    x = np.random.default_rng(0).integers(0, 4, size=SHAPE).astype(np.float32)
    out, dx = _run(kind, list(axis), split_axis, keepdims, x)
    ref_out, ref_dx = _reference(kind, x, axis, keepdims)
    assert out.shape == ref_out.shape
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_allclose(dx, ref_dx, rtol=1e-6, atol=0)


def test_job_holds_a_device_stage_per_part_and_a_global_stage():
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(1)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        return flow.math.two_stage_reduce_max(x.with_distribute(flow.distribute.split(1)), axis=1, name="r")

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(job(x), x.max(axis=1))
    types = [op.user_conf.op_type_name for op in job.graph.proto.net.op if op.HasField("user_conf")]
    assert types.count("reduce_max_device_stage") == 1 and types.count("reduce_max_global_stage") == 1


def test_blob_without_split_layout_on_a_reduced_axis_is_refused():
    flow.clear_default_session()

    with pytest.raises(ArgumentError, match=r"two_stage_reduce_min: argument 'x' must be laid out as "
                                            r"flow.distribute.split\(k\) on a reduced axis"):
        @flow.global_function()
        def job(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
            return flow.math.two_stage_reduce_min(x.with_distribute(flow.distribute.split(0)), axis=1)
        job(np.zeros((4, 6), np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["max", "min"])
def test_two_devices_match_numpy(kind):
    x = np.random.default_rng(1).integers(0, 3, size=SHAPE).astype(np.float32)
    out, dx = _run(kind, [1, 3], 1, True, x, ndev=2)
    ref_out, ref_dx = _reference(kind, x, (1, 3), True)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_allclose(dx, ref_dx, rtol=1e-6, atol=0)
