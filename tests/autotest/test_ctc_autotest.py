"""AutoTest of the CTC ops (graphfront/ops/ctc_ops.py): ctc_loss (and its gradient) against
torch.nn.functional.ctc_loss, ctc_greedy_decoder against a plain-Python greedy decoder."""
import numpy as np

from graphfront.testing import autotest, constant, random_tensor


def _ctc_case(check):
    t, n, c = int(check.rng.integers(3, 12)), int(check.rng.integers(1, 5)), int(check.rng.integers(2, 7))
    s = int(check.rng.integers(1, max(2, t // 2 + 1)))
    blank = int(check.rng.integers(0, c))
    labels = [x for x in range(c) if x != blank]
    targets = check.rng.choice(labels, size=(n, s)).astype(check.rng.choice([np.int32, np.int64]))
    target_lengths = check.rng.integers(1, s + 1, size=n).astype(np.int64)
    input_lengths = check.rng.integers(max(1, t // 2), t + 1, size=n).astype(np.int64)
    return t, n, c, blank, targets, input_lengths, target_lengths


@autotest(n=12)
def test_ctc_loss(check):
    t, n, c, blank, targets, il, tl = _ctc_case(check)
    reduction = str(check.rng.choice(["none", "mean", "sum"]))
    zero_inf = bool(check.rng.random() < 0.3)

    def gf(flow, x, tg, il, tl):
        return flow.ctc_loss(flow.nn.logsoftmax(x, axis=-1), tg, il, tl, blank=blank, reduction=reduction,
                             zero_infinity=zero_inf)

    def th(torch, x, tg, il, tl):
        return torch.atleast_1d(torch.nn.functional.ctc_loss(torch.log_softmax(x, -1), tg.long(), il, tl, blank=blank,
                                                             reduction=reduction, zero_infinity=zero_inf))

    check(graphfront=gf, torch=th, x=random_tensor(ndim=3, dim0=t, dim1=n, dim2=c, low=-2, high=2),
          tg=constant(targets), il=constant(il), tl=constant(tl))


def _greedy_ref(lp, lengths, merge):
    t, n, c = lp.shape
    decoded = np.zeros((n, t), np.int64)
    neg = np.zeros((n, 1), lp.dtype)
    for b in range(n):
        prev, k = -1, 0
        for i in range(int(lengths[b])):
            m = int(np.argmax(lp[i, b]))
            neg[b, 0] -= lp[i, b, m]
            if m != c - 1 and not (merge and m == prev):
                decoded[b, k] = m
                k += 1
            prev = m
    return decoded, neg


@autotest(n=12, auto_backward=False)
def test_ctc_greedy_decoder(check):
    t, n, c = int(check.rng.integers(1, 10)), int(check.rng.integers(1, 5)), int(check.rng.integers(2, 6))
    # few distinct values so repeats and blanks are frequent
    lp = check.rng.integers(-3, 1, size=(t, n, c)).astype(np.float32) + check.rng.random((t, n, c)).astype(
        np.float32) * 0.5
    lengths = check.rng.integers(0, t + 1, size=n).astype(np.int64)
    merge = bool(check.rng.random() < 0.5)

    def th(torch, lp, il):  # (a CUDA draw's tensors are copied to the host for the reference)
        d, s = _greedy_ref(lp.cpu().numpy(), il.cpu().numpy(), merge)
        return [torch.from_numpy(d).to(lp.device), torch.from_numpy(s).to(lp.device)]

    check(graphfront=lambda flow, lp, il: list(flow.nn.ctc_greedy_decoder(lp, il, merge_repeated=merge)),
          torch=th, lp=constant(lp), il=constant(lengths))
