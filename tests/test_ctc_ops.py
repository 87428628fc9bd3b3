"""The CTC ops' torch kernels (graphfront/ops/ctc_ops.py) make the tensors they create on
their inputs' device: checked on the ``meta`` device, which, like a CUDA device, refuses
to meet a CPU tensor in one operation (the AutoTest's CUDA draws run the kernels on a GPU)."""
import torch

from graphfront.ops.ctc_ops import _reached


def test_the_reached_mask_is_made_on_the_lengths_device():
    il, tl = torch.tensor([3, 1]), torch.tensor([1, 0])
    want = _reached(il, tl, 4, 5, torch)
    assert want.device.type == "cpu" and want.shape == (2, 4, 5)
    assert want.sum(dim=(1, 2)).tolist() == [3 * 3, 1 * 1]  # steps before the length x states 2 * s + 1
    mask = _reached(il.to("meta"), tl.to("meta"), 4, 5, torch)
    assert mask.device.type == "meta" and mask.shape == want.shape and mask.dtype == want.dtype
