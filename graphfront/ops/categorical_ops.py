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
        codes = _lookup_or_insert(uniq, first, table.view(-1, 2), size)
        return codes[inverse].reshape(x.shape)
    return categorical_ordinal_encode


def _lookup_or_insert(keys, first, pairs, size):
    """Ordinals of the distinct ``keys`` (``first``: the position of each one's first
    appearance) through the linear-probing table ``pairs`` (capacity, 2), inserting the new
    keys; ``size`` (1,) counts the keys stored. Updates ``pairs`` and ``size`` in place.

    All keys probe together, one slot per round: a key finds itself, or claims an empty
    slot (the first-appearing of the keys reaching it that round wins; the others probe
    on), or moves to the next slot. A slot never empties, so every stored key stays
    reachable from its home slot. The new keys then take ordinals ``size + 1, ...`` in
    order of first appearance, as OneFlow's sequential CPU kernel numbers them.
    """
    capacity = pairs.shape[0]
    codes = torch.zeros_like(keys)
    pending = (keys != 0).nonzero().reshape(-1)         # hash 0 encodes to 0
    slot = torch.remainder(keys[pending].long(), capacity)
    stored = int(size.reshape(-1)[0])
    inserted, inserted_slots = [keys.new_zeros(0, dtype=torch.int64)], [keys.new_zeros(0, dtype=torch.int64)]
    for _ in range(capacity):
        if pending.numel() == 0:
            break
        want = keys[pending]
        if stored == capacity and not torch.isin(want, pairs[:, 0]).all():
            break   # a new key and no empty slot left
        held = pairs[slot, 0]
        found = held == want
        codes[pending[found]] = pairs[slot[found], 1]
        # an empty slot reached this round goes to the first-appearing key reaching it
        claims = (held == 0).nonzero().reshape(-1)
        claims = claims[torch.argsort(first[pending[claims]])]
        claims = claims[torch.argsort(slot[claims], stable=True)]
        slots = slot[claims]
        leads = torch.ones_like(slots, dtype=torch.bool)
        leads[1:] = slots[1:] != slots[:-1]
        won = torch.zeros_like(found)
        won[claims[leads]] = True
        pairs[slot[won], 0] = want[won]
        inserted.append(pending[won])
        inserted_slots.append(slot[won])
        stored += int(won.sum())
        done = found | won
        pending, slot = pending[~done], torch.remainder(slot[~done] + 1, capacity)
    if pending.numel():
        raise ValueError(f"CategoricalOrdinalEncode: the hash table of capacity {capacity} is full")
    new, new_slots = torch.cat(inserted), torch.cat(inserted_slots)
    by_first = torch.argsort(first[new])
    n = stored - new.numel()
    ordinals = torch.arange(n + 1, stored + 1, dtype=keys.dtype, device=keys.device)
    pairs[new_slots[by_first], 1] = ordinals
    codes[new[by_first]] = ordinals
    size.fill_(stored)
    return codes


op("CategoricalOrdinalEncode", inputs=["in", "table", "size"], outputs=["out"],
   attrs={"hash_precomputed": ("bool", True)}, infer=_encode_infer, kernel=_encode_kernel, no_grad=True,
   mutates=("table", "size"), host_reads=True, doc="hash values -> dense ordinals (1, 2, ...) through a variable hash table")

