"""The custom-op example: its forward and generated gradient pass AutoTest against torch."""
import os
import sys

from graphfront.testing import autotest, random, random_tensor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "custom_op"))
from scaled_tanh import scaled_tanh  # noqa: E402


@autotest(n=20, auto_backward=True)
def test_scaled_tanh(check):
    check(graphfront=lambda flow, x, a, b: scaled_tanh(x, a=a, b=b),
          torch=lambda torch, x, a, b: a * torch.tanh(b * x),
          x=random_tensor(ndim=random(1, 4).to(int), low=-3, high=3),
          a=random(0.5, 2.0).to(float), b=random(0.1, 1.5).to(float))
