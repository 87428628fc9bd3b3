"""``flow.watch_scope`` (OneFlow <= 0.5 ``watch_scope_util.py``): every blob made inside
the ``with`` block is watched once, its value and (train jobs) its gradient."""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp


def test_values_and_gradients_of_the_blobs_made_inside_the_scope():
    values, diffs, calls = {}, {}, []
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    c = rng.standard_normal((3, 2)).astype(np.float32)

    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((3, 4)), c: tp.Numpy.Placeholder((3, 2))) -> tp.Numpy:
        h = flow.math.tanh(x)  # outside: not watched
        with flow.watch_scope(values, diffs):
            with flow.watch_scope(lambda blob, blob_def: calls.append((blob_def.unique_name, blob.numpy()))):
                y = flow.layers.dense(h, 2, kernel_initializer=flow.ones_initializer(), name="fc")
        loss = flow.math.reduce_sum(y * c)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return y

    y = job(x, c)
    names = set(values)
    assert {"fc-weight/out", "fc-bias/out", y_lbn(names)} <= names
    assert not any("tanh" in n.lower() for n in names)
    assert set(diffs) == names
    for entry in values.values():
        assert set(entry) == {"blob", "blob_def"} and entry["blob_def"].unique_name in names
    np.testing.assert_allclose(values[y_lbn(names)]["blob"].numpy(), y, rtol=1e-6)
    np.testing.assert_array_equal(values["fc-weight/out"]["blob"].numpy(), np.ones((2, 4), np.float32))
    # d(sum(y * c)) / dy = c; d/dbias = column sums of c; d/dweight = c^T tanh(x)
    np.testing.assert_allclose(diffs[y_lbn(names)]["blob"].numpy(), c, rtol=1e-6)
    np.testing.assert_allclose(diffs["fc-bias/out"]["blob"].numpy(), c.sum(0), rtol=1e-5)
    np.testing.assert_allclose(diffs["fc-weight/out"]["blob"].numpy(), c.T @ np.tanh(x), rtol=1e-5, atol=1e-6)
    # the nested callable watcher saw the same blobs, once each, with the values
    assert sorted(n for n, _ in calls) == sorted(names)
    np.testing.assert_allclose(dict(calls)[y_lbn(names)], y, rtol=1e-6)


def y_lbn(names):
    (lbn,) = [n for n in names if n.startswith("fc-bias_add/")]
    return lbn


def test_a_watcher_of_the_wrong_type_is_an_error():
    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.watch_scope([]):
            return flow.math.relu(x)

    with pytest.raises(Exception, match="blob_watcher must be a dict or a callable, received list"):
        job(np.zeros(2, np.float32))
