"""flow.distributed_partial_fc_sample: the sample's structure, mapped labels, gathered rows and
the weight gradient, checked with numpy (the random part of the sample is checked for what
OneFlow guarantees: distinct classes of the right shard, label classes first and ascending).
"""
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import JobBuildError, OpRunError

CLASSES, DIM, BATCH = 40, 3, 12


def _job(num_sample, ndev=1, classes=CLASSES):
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(ndev)
    seen = {}

    @flow.global_function(type="train")
    def job(label: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)):
        w = flow.get_variable("w", shape=(classes, DIM), dtype=flow.float,
                              initializer=flow.random_uniform_initializer(minval=-1, maxval=1))
        mapped, sampled, rows = flow.distributed_partial_fc_sample(w, label, num_sample)
        loss = flow.math.square(rows)  # d loss / d rows = 2 rows
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        flow.watch(w, lambda v: seen.__setitem__("w", v.numpy()))
        flow.watch_diff(w, lambda d: seen.__setitem__("dw", d.numpy()))
        return mapped, sampled, rows
    return job, seen


def _check(labels, num_sample, ndev, mapped, sampled, rows, w, dw):
    # OneFlow's BalancedSplitter of the classes: the first classes % ndev shards one longer
    bounds = np.cumsum([0] + [len(a) for a in np.array_split(np.arange(len(w)), ndev)])
    per_sample = num_sample // ndev
    assert sampled.shape == (num_sample,) and rows.shape == (num_sample, DIM)
    for p in range(ndev):
        part = sampled[p * per_sample:(p + 1) * per_sample]
        assert np.all((part >= bounds[p]) & (part < bounds[p + 1]))
        assert len(np.unique(part)) == per_sample
        positives = np.unique(labels[(labels >= bounds[p]) & (labels < bounds[p + 1])])
        np.testing.assert_array_equal(part[:len(positives)], positives)
    np.testing.assert_array_equal(sampled[mapped], labels)
    np.testing.assert_array_equal(rows, w[sampled])
    ref_dw = np.zeros_like(w)
    ref_dw[sampled] = 2 * w[sampled]
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-6, atol=0)


@pytest.mark.parametrize("num_sample", [16, CLASSES])
def test_sample_structure_and_weight_gradient(num_sample):
    job, seen = _job(num_sample)
    labels = np.random.default_rng(0).integers(0, CLASSES, BATCH).astype(np.int32)
    mapped, sampled, rows = (r.numpy() for r in job(labels).get())
    _check(labels, num_sample, 1, mapped, sampled, rows, seen["w"], seen["dw"])
    positives = len(np.unique(labels))
    others = sampled[positives:]
    assert not np.all(np.diff(others) > 0), "the classes after the label classes should be in a random order"


@pytest.mark.slow
def test_two_devices_sample_one_shard_each():
    job, seen = _job(16, ndev=2)
    labels = np.array([3, 25, 3, 39, 0, 21, 19, 20, 25, 7, 7, 30], np.int32)
    mapped, sampled, rows = (r.numpy() for r in job(labels).get())
    _check(labels, 16, 2, mapped, sampled, rows, seen["w"], seen["dw"])


def test_label_out_of_range_and_indivisible_sample_are_refused():
    job, _ = _job(16)
    with pytest.raises(OpRunError, match=r"distributed_partial_fc_sample.*input 'label' expects indices in \[0, 40\)"):
        job(np.full(BATCH, CLASSES, np.int32)).get()
    with pytest.raises(JobBuildError, match="must divide by 'parallel_num'"):
        _job(15, ndev=2)[0](np.zeros(BATCH, np.int32)).get()


@pytest.mark.slow
def test_classes_not_divisible_by_devices_are_split_as_oneflow_splits_weight():
    # 41 classes on 2 devices: shards [0, 21) and [21, 41), as OneFlow's split(0) of weight
    job, seen = _job(16, ndev=2, classes=41)
    labels = np.array([20, 21, 0, 40, 20, 5, 33, 21, 11, 2, 39, 22], np.int32)
    mapped, sampled, rows = (r.numpy() for r in job(labels).get())
    _check(labels, 16, 2, mapped, sampled, rows, seen["w"], seen["dw"])
    np.testing.assert_array_equal(sampled[:5], [0, 2, 5, 11, 20])
    np.testing.assert_array_equal(sampled[8:13], [21, 22, 33, 39, 40])
    np.testing.assert_array_equal(mapped[:4], [4, 8, 0, 12])


def test_shard_with_more_label_classes_than_its_share_is_refused():
    # 12 distinct classes, a sample of 8: OneFlow would map 4 labels onto other classes' columns
    job, _ = _job(8)
    with pytest.raises(OpRunError, match=r"distributed_partial_fc_sample.*12 distinct classes of shard 0 "
                                         r"\(classes \[0, 40\)\).*num_sample / parallel_num = 8"):
        job(np.arange(BATCH, dtype=np.int32)).get()


def test_sample_larger_than_a_shard_is_refused():
    with pytest.raises(JobBuildError, match=r"attr 'num_sample' must lie in \[1, 40\].*received 41"):
        _job(41)[0](np.zeros(BATCH, np.int32)).get()
