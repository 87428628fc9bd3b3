"""flow.combined_margin_loss: values and gradient against torch autograd of the margin formula.

Reference: at each row's label class, cos(m1 * acos(x) + m2) - m3; elsewhere x; a label outside
[0, classes) leaves its row unchanged (OneFlow's kernel). The gradient is torch's autograd of
that formula.
"""
import numpy as np
import pytest
import torch

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import ArgumentError, JobBuildError, OpRunError

N, C = 6, 5


def _torch_reference(x, labels, m1, m2, m3, dy):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    rows = torch.arange(N)
    valid = torch.tensor((labels >= 0) & (labels < C))
    col = torch.tensor(np.where((labels >= 0) & (labels < C), labels, 0)).long()
    picked = xt[rows, col]
    margin = torch.cos(torch.acos(picked) * m1 + m2) - m3
    onehot = torch.nn.functional.one_hot(col, C).bool() & valid[:, None]
    y = torch.where(onehot, margin[:, None].expand(N, C), xt)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), xt.grad.numpy()


def _run(x, labels, m1, m2, m3, dy):
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(1)
    seen = {}

    @flow.global_function(type="train")
    def job(x_in: tp.Numpy.Placeholder((N, C)), label: tp.Numpy.Placeholder((N,), dtype=flow.int32),
            w: tp.Numpy.Placeholder((N, C))) -> tp.Numpy:
        v = flow.get_variable("v", shape=(1,), dtype=flow.float, initializer=flow.zeros_initializer())
        xv = x_in + v
        flow.watch_diff(xv, lambda d: seen.__setitem__("dx", d.numpy()))
        y = flow.combined_margin_loss(xv, label, m1, m2, m3)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(
            flow.math.reduce_sum(y * w))  # dy = w
        return y

    return job(x, labels, dy), seen["dx"]


@pytest.mark.parametrize("m1,m2,m3", [(1.0, 0.5, 0.0), (0.3, 0.5, 0.4), (1.35, 0.0, 0.0), (1.0, 0.0, 0.35)])
def test_values_and_gradient_against_torch(m1, m2, m3):
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.95, 0.95, (N, C)).astype(np.float32)
    labels = np.array([0, 4, 2, -1, C, 3], np.int32)  # two rows out of range: unchanged
    dy = rng.uniform(0.5, 1.5, (N, C)).astype(np.float32)
    y, dx = _run(x, labels, m1, m2, m3, dy)
    ref_y, ref_dx = _torch_reference(x.astype(np.float64), labels, m1, m2, m3, dy)
    tol = 8 * np.finfo(np.float32).eps / np.sqrt(1 - 0.95 ** 2)  # acos' slope at |x| = 0.95 bounds the error
    np.testing.assert_allclose(y, ref_y, rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, ref_dx, rtol=tol, atol=tol)
    np.testing.assert_array_equal(y[3], x[3])
    np.testing.assert_array_equal(dx[4], dy[4])


def test_bad_inputs_are_refused():
    flow.clear_default_session()
    with pytest.raises(JobBuildError, match=r"combined_margin_loss.*input 'label' expected one label per row"):
        @flow.global_function()
        def job(x: tp.Numpy.Placeholder((N, C)), label: tp.Numpy.Placeholder((N + 1,), dtype=flow.int32)) -> tp.Numpy:
            return flow.combined_margin_loss(x, label, 1.0, 0.5)
        job(np.zeros((N, C), np.float32), np.zeros(N + 1, np.int32))
    flow.clear_default_session()
    with pytest.raises(ArgumentError, match="argument 'm2' expects a number"):
        @flow.global_function()
        def job2(x: tp.Numpy.Placeholder((N, C)), label: tp.Numpy.Placeholder((N,), dtype=flow.int32)) -> tp.Numpy:
            return flow.combined_margin_loss(x, label, 1.0, "0.5")
        job2(np.zeros((N, C), np.float32), np.zeros(N, np.int32))


def _face_head(devices, steps=3):
    """InsightFace's model-parallel head (OneFlow's ``insightface`` training): normalized
    embeddings times the normalized class weights, split by classes over ``devices``
    (``distribute=split(0)``), the margin, the scale 64 and the distributed softmax cross
    entropy."""
    flow.clear_default_session()
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(devices)
    config = flow.FunctionConfig()
    config.default_logical_view(flow.scope.consistent_view())
    config.default_placement_scope(flow.scope.placement("cpu", f"0:0-{devices - 1}"))
    flow.manual_seed(1)

    @flow.global_function(type="train", function_config=config)
    def job(emb: tp.Numpy.Placeholder((N, 4)), label: tp.Numpy.Placeholder((N,), dtype=flow.int32)) -> tp.Numpy:
        w = flow.get_variable("fc7-weight", shape=(C + 2, 4), dtype=flow.float,
                              initializer=flow.random_normal_initializer(),
                              distribute=flow.distribute.split(0))
        cos = flow.matmul(flow.math.l2_normalize(emb, axis=1), flow.math.l2_normalize(w, axis=1), transpose_b=True)
        logits = flow.combined_margin_loss(cos, label, 1.0, 0.5, 0.0) * 64.0
        loss = flow.nn.distributed_sparse_softmax_cross_entropy_with_logits(label, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.01]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(3)
    emb = rng.standard_normal((N, 4)).astype(np.float32)
    label = np.array([0, 6, 3, 1, 5, 2], np.int32)  # the classes of both halves (0-3 and 4-6)
    losses = [job(emb, label) for _ in range(steps)]
    return losses, flow.get_all_variables()["fc7-weight"].numpy(), job, emb


def test_model_parallel_head_on_two_devices_equals_one_device():
    """On two devices the head runs model parallel, as in OneFlow: the logits stay split by
    classes (S(1)) through the margin (the labels whole, theta a partial sum) and the
    distributed softmax cross entropy (the rows' maximum, normalizer and logit at the label
    all-reduced), and so do their gradients; losses and the class weights after three
    steps equal the one-device job's. A label out of range is refused naming the op, and
    the job goes on."""
    from graphfront.parallel.sbp import op_signatures
    one_losses, one_w, _, _ = _face_head(1)
    two_losses, two_w, job, emb = _face_head(2)
    signatures = op_signatures(job.compiled_job.job)
    layouts = {name.split("_")[0] + ("_grad" if name.endswith("_grad") else ""): sig
               for name, sig in signatures.items() if name.startswith(("CombinedMargin", "DistributedSparse"))}
    assert layouts == {
        "CombinedMarginLoss": {"x_0": "S(1)", "label_0": "B", "y_0": "S(1)", "theta_0": "P"},
        "CombinedMarginLoss_grad": {"dy_0": "S(1)", "label_0": "B", "theta_0": "B", "dx_0": "S(1)"},
        "DistributedSparseSoftmaxCrossEntropy": {"prediction_0": "S(1)", "label_0": "B", "prob_0": "S(1)",
                                                 "out_0": "B"},
        "DistributedSparseSoftmaxCrossEntropy_grad": {"prob_0": "S(1)", "label_0": "B", "dy_0": "B",
                                                      "prediction_diff_0": "S(1)"}}
    assert two_losses[-1].mean() < two_losses[0].mean()
    # (the devices' partial sums of the softmax's normalizer and the weight's norms: float32 roundings)
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(two_w, one_w, rtol=1e-5, atol=1e-6)
    with pytest.raises(OpRunError, match=r"DistributedSparseSoftmaxCrossEntropy.*7"):
        job(emb, np.array([0, 6, 3, 1, 5, 7], np.int32))  # (7 classes: 0 .. 6)
    assert np.isfinite(job(emb, np.array([0, 6, 3, 1, 5, 2], np.int32))).all()
