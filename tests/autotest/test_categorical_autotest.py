"""AutoTest of CategoricalOrdinalEncode (graphfront/ops/categorical_ops.py) through
flow.layers.categorical_ordinal_encoder: ordinals 1, 2, ... in order of first appearance
(0 for hash 0), checked against a dictionary-based reference."""
import numpy as np

from graphfront.testing import autotest, constant


def _ordinals(x):
    codes = {0: 0}
    out = []
    for h in x.reshape(-1).tolist():
        if h not in codes:
            codes[h] = len(codes)  # the first new key gets 1 (0 is pre-seeded)
        out.append(codes[h])
    return np.array(out, dtype=x.dtype).reshape(x.shape)


@autotest(n=12, auto_backward=False)
def test_categorical_ordinal_encoder(check):
    shape = [int(d) for d in check.rng.integers(1, 6, size=int(check.rng.integers(1, 3)))]
    dtype = check.rng.choice([np.int32, np.int64])
    x = check.rng.integers(0, 40, size=shape).astype(dtype) * int(check.rng.choice([1, 7, 1000003]))
    capacity = len(np.unique(x)) + int(check.rng.integers(0, 4))
    check(graphfront=lambda flow, x: flow.layers.categorical_ordinal_encoder(x, capacity),
          torch=lambda torch, x: torch.from_numpy(_ordinals(x.cpu().numpy())).to(x.device), x=constant(x))
