"""``CategoricalOrdinalEncode``: map precomputed hash values to dense ordinals with a
hash table kept in variables (OneFlow's ``oneflow/user/ops/categorical_ordinal_encode_op.cpp``
and ``kernels/categorical_ordinal_encode_kernel_util.cpp`` at v0.6.0).

Inputs ``in`` (int32/int64 hashes, any shape), ``table`` (same dtype, ``(2 * capacity,)``:
(key, ordinal) pairs, key 0 = empty slot) and ``size`` (same dtype, ``(1,)``: the number
of keys stored); output ``out`` shaped like ``in``. Each hash ``h`` is looked up by
linear probing from slot ``h mod capacity``; a new key takes the first empty slot and
ordinal ``size + 1`` (ordinals start at 1, in order of first appearance); hash 0 maps to
0. ``table`` and ``size`` are updated in place. Raises ValueError at run time when the
table is full. NoGrad. Attr ``hash_precomputed`` must be true (as OneFlow).
"""
from __future__ import annotations

import torch

from graphfront.framework import dtypes as _dt
from graphfront.ops.registry import op


def _encode_infer(ctx):
    x, table, size = ctx.input("in"), ctx.input("table"), ctx.input("size")
    ctx.check(ctx.attr("hash_precomputed"), "attr 'hash_precomputed' must be true")
    ctx.check(x.dtype in (_dt.int32, _dt.int64), f"input 'in' expected int32 or int64, received {x.dtype.name}")
    ctx.check(table.dtype is x.dtype and size.dtype is x.dtype,
              f"inputs 'table' and 'size' expected dtype {x.dtype.name}, received {table.dtype.name} and "
              f"{size.dtype.name}")
    ctx.check(len(table.shape) == 1 and table.shape[0] > 0 and table.shape[0] % 2 == 0,
              f"input 'table' expected shape (2 * capacity,), received {table.shape}")
    ctx.check(size.shape == (1,), f"input 'size' expected shape (1,), received {size.shape}")
    ctx.set_output("out", x.shape, x.dtype, is_dynamic=x.is_dynamic)


def _encode_kernel(k):
    def categorical_ordinal_encode(x, table, size):
        flat = x.reshape(-1)
        uniq, inverse = torch.unique(flat, return_inverse=True)
        first = torch.full((uniq.shape[0],), flat.shape[0], dtype=torch.int64, device=x.device)
        first.scatter_reduce_(0, inverse, torch.arange(flat.shape[0], device=x.device), reduce="amin")
        keys = uniq[torch.argsort(first)].cpu().numpy()    # distinct hashes in order of first appearance
        pairs = table.detach().cpu().numpy().reshape(-1, 2).copy()
        n = int(size.reshape(-1)[0])
        capacity = pairs.shape[0]
        codes = {}
        for h in keys.tolist():
            if h == 0:
                codes[h] = 0
                continue
            start = h % capacity
            for probe in range(capacity):
                slot = (start + probe) % capacity
                if pairs[slot, 0] == h:
                    codes[h] = int(pairs[slot, 1])
                    break
                if pairs[slot, 0] == 0:
                    n += 1
                    pairs[slot] = (h, n)
                    codes[h] = n
                    break
            else:
                raise ValueError(f"CategoricalOrdinalEncode: the hash table of capacity {capacity} is full")
        table.copy_(torch.from_numpy(pairs.reshape(-1)))
        size.fill_(n)
        lut = torch.tensor([codes[h] for h in uniq.cpu().tolist()], dtype=x.dtype, device=x.device)
        return lut[inverse].reshape(x.shape)
    return categorical_ordinal_encode


op("CategoricalOrdinalEncode", inputs=["in", "table", "size"], outputs=["out"],
   attrs={"hash_precomputed": ("bool", True)}, infer=_encode_infer, kernel=_encode_kernel, no_grad=True,
   mutates=("table", "size"), host_reads=True, doc="hash values -> dense ordinals (1, 2, ...) through a variable hash table")

