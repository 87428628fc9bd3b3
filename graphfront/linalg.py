"""``flow.matmul`` (also ``flow.linalg.matmul``)."""
from __future__ import annotations

from graphfront.framework.errors import ArgumentError
from graphfront.framework.blob_desc import BlobDesc, expect_number
from graphfront.ops.builder import build_op


def matmul(a, b, transpose_a=False, transpose_b=False, alpha=1.0, name=None):
    """Matrix product ``alpha * op(a) @ op(b)``.

    Equal ranks == 2 -> op ``matmul``; equal ranks > 2 -> ``batch_matmul`` (batch dims
    must agree); rank(b) == 2 < rank(a) -> ``broadcast_matmul`` (``transpose_a`` must be
    False). Raises ArgumentError (a TypeError and a ValueError) for non-blob operands, an
    ``alpha`` that is not a number and other rank combinations; shape mismatches are
    reported by the op's inference (naming input 'b' and the expected inner dim).
    """
    for arg, v in (("a", a), ("b", b)):
        if not isinstance(v, BlobDesc):
            raise ArgumentError(f"flow.matmul: argument '{arg}' expects a blob, received {type(v).__name__} {v!r}")
    attrs = {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b),
             "alpha": expect_number(alpha, "flow.matmul", "alpha")}
    if len(a.shape) == len(b.shape) and len(a.shape) >= 2:
        op_type = "matmul" if len(a.shape) == 2 else "batch_matmul"
    elif len(b.shape) == 2 and len(a.shape) > 2 and not transpose_a:
        op_type = "broadcast_matmul"
    else:
        raise ArgumentError(f"flow.matmul: unsupported ranks a {a.shape}, b {b.shape} (transpose_a={transpose_a})")
    return build_op(op_type, {"a": a, "b": b}, attrs, name=name, prefix="Matmul_")
