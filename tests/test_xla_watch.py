"""``flow.watch`` and ``flow.watch_diff`` in compile_mode("xla"): the watched blobs and
gradients are outputs of the compiled step and the handlers get, on the host, the same
values and value types as in the per-op plan (torch kernels, the reference)."""
import jax  # noqa: F401 - a hard requirement of the `test` extra: its absence fails, never skips
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.session import default_session


RTOL, ATOL = 1e-5, 1e-6
B, D, H, C = 8, 12, 16, 5


def _config(mode):
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    return cfg


def _train_job(mode, seen):
    """Two dense layers, SGD; watches (three handler kinds) and watch_diffs recorded in ``seen``."""
    def keep(name):
        def numpy_handler(v: tp.Numpy):
            seen.setdefault(name, []).append(v)
        return numpy_handler

    def keep_list(v: tp.ListNumpy):
        seen.setdefault("h_list", []).append(v)

    def keep_blob(v):
        seen.setdefault("logits_blob", []).append(v)

    @flow.global_function(type="train", function_config=_config(mode))
    def train(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h = flow.layers.dense(x, H, activation=flow.nn.relu, name="fc0",
                                  kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            logits = flow.layers.dense(h, C, name="fc1", kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            flow.watch(h, keep("h"))
            flow.watch(h, keep_list)
            flow.watch(logits, keep_blob)
            flow.watch_diff(logits, keep("dlogits"))
            flow.watch_diff(h, keep("dh"))
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    return train


def _run_train(mode, steps=3):
    flow.clear_default_session()
    flow.manual_seed(0)
    seen = {}
    job = _train_job(mode, seen)
    rng = np.random.default_rng(1)
    losses = [job(rng.standard_normal((B, D)).astype(np.float32), rng.integers(0, C, B).astype(np.int32))
              for _ in range(steps)]
    return losses, seen


def test_watch_and_watch_diff_in_a_train_job_match_the_plan():
    want_losses, want = _run_train("plan")
    got_losses, got = _run_train("xla")
    assert default_session().jobs["train"].compile_mode == "xla"
    assert sorted(got) == sorted(want) == ["dh", "dlogits", "h", "h_list", "logits_blob"]
    for name in want:
        assert len(got[name]) == len(want[name]) == 3, name
        for step, (a, b) in enumerate(zip(got[name], want[name])):
            assert type(a) is type(b), (name, type(a), type(b))
            if name == "h_list":
                assert len(a) == len(b) == 1
                a, b = a[0], b[0]
            elif name == "logits_blob":
                assert isinstance(a, tp.LocalBlob)
                a, b = a.numpy(), b.numpy()
            else:
                assert isinstance(a, np.ndarray)
            assert a.dtype == b.dtype == np.float32 and a.shape == b.shape, (name, a.shape, b.shape)
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"{name} at step {step}")
    for a, b in zip(got_losses, want_losses):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    # the gradient of the mean loss with respect to the logits: (softmax - one_hot) / B, nonzero
    assert np.abs(got["dlogits"][0]).max() > 1e-3
    np.testing.assert_allclose(got["dlogits"][0].sum(axis=1), 0, atol=1e-6)


def test_watch_in_a_predict_job_matches_the_plan():
    x = np.random.default_rng(2).standard_normal((B, D)).astype(np.float32)
    results = {}
    for mode in ("plan", "xla"):
        flow.clear_default_session()
        flow.manual_seed(0)
        seen = []

        @flow.global_function(function_config=_config(mode))
        def predict(x: tp.Numpy.Placeholder((B, D))) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                h = flow.layers.dense(x, H, activation=flow.nn.relu, name="fc0",
                                      kernel_initializer=flow.random_normal_initializer(stddev=0.3))
                flow.watch(h, lambda v: seen.append(v.numpy()))
                return flow.nn.softmax(flow.layers.dense(h, C, name="fc1"))

        out = [predict(x), predict(2 * x)]
        results[mode] = out, seen
    (got, got_seen), (want, want_seen) = results["xla"], results["plan"]
    assert len(got_seen) == len(want_seen) == 2
    for a, b in zip(got + got_seen, want + want_seen):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got_seen[0] >= 0, True)  # a relu output


def _step_outputs(job_name):
    """``(watched, checks)`` output structure of a compiled xla job's step."""
    plan = default_session().jobs[job_name].plan
    return plan._step.out_info[3], plan._step.out_info[4]


def test_a_job_without_watches_has_no_extra_step_outputs():
    flow.clear_default_session()
    flow.manual_seed(0)

    @flow.global_function(type="train", function_config=_config("xla"))
    def plain(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, flow.layers.dense(x, C, name="fc"))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    plain(np.ones((B, D), np.float32), np.zeros(B, np.int32))
    assert _step_outputs("plain") == ((), None)  # (fed labels are checked on the host, not in the step)
    _run_train("xla", steps=1)
    watched, checks = _step_outputs("train")
    assert sorted(w.shape for w in watched) == sorted([(B, H), (B, H), (B, C), (B, C), (B, H)])
    assert checks is None
