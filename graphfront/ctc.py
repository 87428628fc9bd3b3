"""``flow.ctc_loss`` and ``flow.nn.ctc_greedy_decoder`` (OneFlow's
``python/oneflow/compatible/single_client/ops/loss_ops.py`` and ``nn_ops.py`` at v0.6.0);
the ops are in :mod:`graphfront.ops.ctc_ops`.
"""
from __future__ import annotations

from graphfront.framework.blob_desc import expect_blob
from graphfront.ops.builder import build_op, unique_str
from graphfront import array, math

__all__ = ["ctc_greedy_decoder", "ctc_loss"]


def _blob(x, fn, arg):
    expect_blob(x, f"flow.{fn}", arg)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False,
             name=None):
    """CTC loss of log-probabilities ``log_probs`` (T, N, C) against padded ``targets`` (N, S).

    ``input_lengths`` / ``target_lengths``: int (N,) blobs. ``reduction``: ``"none"`` (the
    (N,) losses), ``"sum"``, or ``"mean"`` (each loss divided by its target length,
    clamped to >= 1, then averaged), as OneFlow. ``zero_infinity`` replaces infinite losses
    (and their gradients) by 0. Raises ValueError for another ``reduction``.
    """
    for arg, x in (("log_probs", log_probs), ("targets", targets), ("input_lengths", input_lengths),
                   ("target_lengths", target_lengths)):
        _blob(x, "ctc_loss", arg)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"flow.ctc_loss: reduction must be 'none', 'mean' or 'sum', received {reduction!r}")
    name = name or unique_str("CTCLoss_")
    loss, _alpha = build_op("ctc_loss", {"log_probs": log_probs, "targets": targets, "input_lengths": input_lengths,
                                         "target_lengths": target_lengths},
                            {"max_target_length": int(targets.shape[1]), "blank": int(blank),
                             "zero_infinity": bool(zero_infinity)}, outputs=("loss", "alpha"), name=name)
    if zero_infinity:  # (the op keeps inf, as ATen's _ctc_loss; its gradient already zeros those rows)
        loss = math.where(math.equal(loss, float("inf"), name=f"{name}_is_inf"),
                          array.zeros_like(loss, name=f"{name}_zeros"), loss, name=f"{name}_zero_inf")
    if reduction == "sum":
        return math.reduce_sum(loss, name=f"{name}_reduce_sum")
    if reduction == "mean":
        lengths = array.cast(math.clip_by_value(target_lengths, min_value=1, name=f"{name}_clip"), log_probs.dtype,
                             name=f"{name}_cast")
        return math.reduce_mean(math.xdivy(loss, lengths, name=f"{name}_xdivy"), name=f"{name}_reduce_mean")
    return loss


def ctc_greedy_decoder(log_probs, input_lengths, merge_repeated=True, name=None):
    """Greedy CTC decoding of ``log_probs`` (T, N, C) with int64 ``input_lengths`` (N,).

    Returns ``(decoded, neg_sum_logits)``: int64 (N, T) labels, left-aligned and
    zero-padded, without the blank (the last class) and, with ``merge_repeated``,
    without repeats; and (N, 1) minus the sum of the per-step maxima (op
    ``ctc_greedy_decoder``).
    """
    _blob(log_probs, "nn.ctc_greedy_decoder", "log_probs")
    _blob(input_lengths, "nn.ctc_greedy_decoder", "input_lengths")
    return build_op("ctc_greedy_decoder", {"log_probs": log_probs, "input_lengths": input_lengths},
                    {"merge_repeated": bool(merge_repeated)}, outputs=("decoded", "neg_sum_logits"), name=name,
                    prefix="CTCGreedyDecode_")
