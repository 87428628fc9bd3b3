"""AutoTests of the optimizer helper ops with outputs (the in-place ``*_update`` ops are
exempt and checked by tests/test_optimizers.py). Both are NoGrad: forward only.

References: ``l1_l2_regularize_gradient`` is the gradient torch autograd gives for
``l1 * |w|.sum() + l2 / 2 * (w * w).sum()`` added to ``model_diff``;
``adam_bias_correction_factor`` is torch's Adam bias correction ``1 - beta ** step`` at
the 1-based step ``train_step + 1``.
"""
from graphfront.ops.builder import build_op
from graphfront.testing import autotest, random, random_tensor


def _build(flow, op_type, inputs, attrs, outputs):
    """One single-output user op (through the user-op builder)."""
    return build_op(op_type, inputs, attrs, outputs, name=op_type + "_under_test")


def _regularized(torch, model, diff, l1, l2):
    with torch.enable_grad():   # forward-only autotests run the reference without grad
        w = model.detach().clone().requires_grad_(True)
        (l1 * w.abs().sum() + 0.5 * l2 * (w * w).sum()).backward()
    return diff + w.grad


@autotest(auto_backward=False)
def test_l1_l2_regularize_gradient(check):
    ndim = random(1, 5).to(int).value()
    dims = [random(1, 5).to(int).value() for _ in range(ndim)] + [None] * (5 - ndim)
    check(graphfront=lambda flow, model, diff, l1, l2: _build(
              flow, "l1_l2_regularize_gradient", {"model": model, "model_diff": diff}, {"l1": l1, "l2": l2}, ["out"]),
          torch=lambda torch, model, diff, l1, l2: _regularized(torch, model, diff, l1, l2),
          model=random_tensor(ndim, *dims[:5], low=-1, high=1, requires_grad=False),
          diff=random_tensor(ndim, *dims[:5], low=-1, high=1, requires_grad=False),
          l1=random(0.0, 0.5).to(float), l2=random(0.0, 0.5).to(float))


@autotest(auto_backward=False)
def test_adam_bias_correction_factor(check):
    def reference(torch, step, beta):
        b = torch.tensor(beta, dtype=torch.float32).double()   # the attr is a float
        return (1.0 - b ** (step.double() + 1)).float()

    check(graphfront=lambda flow, step, beta: _build(
              flow, "adam_bias_correction_factor", {"train_step": step}, {"beta": beta}, ["out"]),
          torch=reference,
          step=random_tensor(1, 1, low=0, high=200, dtype=int), beta=random(0.5, 0.999).to(float))
