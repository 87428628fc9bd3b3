"""Out-of-range class labels in compile_mode("xla"): the job raises the OpRunError the
per-op plan's kernel raises (naming the op, the range, the bad value and its index, and
the caller's line), every variable keeps its value, and the next good call trains on as
the plan does. Labels fed as they are get checked on the host before the step; labels
computed in the job are checked inside the compiled step."""
import jax  # noqa: F401 - a hard requirement of the `test` extra: its absence fails, never skips
import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import OpRunError
from graphfront.framework.session import default_session


RTOL, ATOL = 1e-5, 1e-6
B, D, C = 6, 10, 5


def _config(mode):
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    return cfg


def _train_job(mode, labels_in_job, op_type):
    """Two dense layers, SGD with momentum (so optimizer state is checked too). With
    ``labels_in_job`` the labels are fed as int64 of shape (B, 1) and reshaped and cast in
    the job, so the label check runs inside the compiled step."""
    shape, dtype = ((B, 1), flow.int64) if labels_in_job else ((B,), flow.int32)

    @flow.global_function(type="train", function_config=_config(mode))
    def train(x: tp.Numpy.Placeholder((B, D)), y: tp.Numpy.Placeholder(shape, dtype=dtype)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            if labels_in_job:
                y = flow.cast(flow.reshape(y, (B,)), flow.int32)
            h = flow.layers.dense(x, 8, activation=flow.nn.relu, name="fc0",
                                  kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            logits = flow.layers.dense(h, C, name="fc1", kernel_initializer=flow.random_normal_initializer(stddev=0.3))
            if op_type == "sparse_softmax_cross_entropy":
                loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits, name="loss")
            else:
                loss = (flow.user_op_builder("loss").Op(op_type).Input("prediction", [logits]).Input("label", [y])
                        .Output("prob").Output("out").Attr("depth", C).Build().InferAndTryRun().RemoteBlobList()[1])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss
    return train


def _variables():
    return {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}


def _labels(values, labels_in_job):
    y = np.asarray(values)
    return y.astype(np.int64).reshape(B, 1) if labels_in_job else y.astype(np.int32)


GOOD = [0, 1, 2, 3, 4, 0]


def _run(mode, labels_in_job, bad, op_type="sparse_softmax_cross_entropy", bad_first=False):
    """A good step (unless ``bad_first``), a step with labels ``bad`` (must raise), two
    good steps: ``(losses, error, variables before the bad step, variables after it)``."""
    flow.clear_default_session()
    flow.manual_seed(0)
    job = _train_job(mode, labels_in_job, op_type)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((B, D)).astype(np.float32) for _ in range(4)]
    losses = []
    if not bad_first:
        losses.append(job(xs[0], _labels(GOOD, labels_in_job)))
    else:
        flow.get_all_variables()  # (initializes the variables without running the job)
    before = _variables()
    with pytest.raises(OpRunError) as error:
        job(xs[1], _labels(bad, labels_in_job))  # MARK-bad-call
    after = _variables()
    losses += [job(x, _labels(GOOD[::-1], labels_in_job)) for x in xs[2:]]
    return losses, error.value, before, after


@pytest.mark.parametrize("labels_in_job", [False, True], ids=["fed", "computed"])
@pytest.mark.parametrize("op_type", ["sparse_softmax_cross_entropy", "sparse_softmax_cross_entropy_ms"])
@pytest.mark.parametrize("bad, value, at", [([0, 1, 2, 3, 7, 0], 7, 4), ([-1, 1, 2, 3, 4, 9], -1, 0)])
def test_bad_label_raises_and_leaves_every_variable_unchanged(labels_in_job, op_type, bad, value, at):
    got_losses, error, before, after = _run("xla", labels_in_job, bad, op_type)
    assert default_session().jobs["train"].compile_mode == "xla"
    plan = default_session().jobs["train"].plan
    # one check (the loss op's and its grad op's checks of the same labels are one), on the host for fed labels
    assert (len(plan.checks.on_feeds), len(plan.checks.in_step)) == ((0, 1) if labels_in_job else (1, 0))
    msg = str(error)
    for part in (f"op 'loss' ({op_type})", "input 'label'", f"class ids in [0, {C})",
                 f"received {value} at index {(at,)}", "MARK-bad-call"):
        assert part in msg, (part, msg)
    assert sorted(after) == sorted(before) and any(k.endswith("-momentum") for k in after)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    want_losses, want_error, want_before, _ = _run("plan", labels_in_job, bad, op_type)
    assert str(want_error).split("\n")[0] == msg.split("\n")[0]  # the plan's kernel raises the same error
    for name in before:
        np.testing.assert_allclose(before[name], want_before[name], rtol=RTOL, atol=ATOL, err_msg=name)
    for step, (a, b) in enumerate(zip(got_losses, want_losses)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"loss of step {step}")
    assert np.isfinite(got_losses).all()


@pytest.mark.parametrize("labels_in_job", [False, True], ids=["fed", "computed"])
def test_bad_label_on_the_first_call(labels_in_job):
    got_losses, error, before, after = _run("xla", labels_in_job, [9] * B, bad_first=True)
    assert "received 9 at index (0,)" in str(error)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    want_losses, _, _, _ = _run("plan", labels_in_job, [9] * B, bad_first=True)
    np.testing.assert_allclose(got_losses, want_losses, rtol=RTOL, atol=ATOL)


def test_bad_label_in_a_predict_job():
    flow.clear_default_session()

    @flow.global_function(function_config=_config("xla"))
    def job(x: tp.Numpy.Placeholder((2, 10)), y: tp.Numpy.Placeholder((2, 1), dtype=flow.int32)) -> tp.Numpy:
        return flow.nn.sparse_softmax_cross_entropy_with_logits(flow.reshape(y, (2,)), x, name="sce")

    x = np.zeros((2, 10), np.float32)
    np.testing.assert_allclose(job(x, np.array([[1], [9]], np.int32)), np.log(10.0), rtol=1e-6)
    with pytest.raises(OpRunError, match=r"op 'sce' \(sparse_softmax_cross_entropy\): input 'label' expects class "
                                         r"ids in \[0, 10\), received 10 at index \(1,\)"):
        job(x, np.array([[0], [10]], np.int32))
    np.testing.assert_allclose(job(x, np.array([[3], [0]], np.int32)), np.log(10.0), rtol=1e-6)
