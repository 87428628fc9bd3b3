"""AutoTest of the OneRec ops (``OneRecReader``, ``onerec_decoder``) against the numpy arrays
the records were written from.

Each draw writes a small OneRec data set in ``check.rng``-drawn files: a dense float feature,
an int label, an int64 feature of drawn row counts (read padded to the batch's longest and
dynamic) and an int8 feature stored flat (read reshaped).
"""
import os
import tempfile

import numpy as np
import pytest

from graphfront.testing import autotest

pytest.importorskip("flatbuffers")
pytest.importorskip("xxhash")

N = 3
CPU_ONLY = ("cpu",)  # the OneRec reader and decoder run on the host (CPU kernels only, as in OneFlow)
_TMP = tempfile.TemporaryDirectory(prefix="graphfront-onerec-autotest-")


def _dataset(check):
    from graphfront.ofrecord import onerec
    rng = check.rng
    n = int(rng.integers(2, 7))
    width, rows_max = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    dense = rng.standard_normal((n, width)).astype(np.float32)
    labels = rng.integers(0, 10, (n, 1)).astype(np.int32)
    rows = [rng.integers(-2 ** 40, 2 ** 40, (int(rng.integers(1, rows_max + 1)), 2)) for _ in range(n)]
    grid = rng.integers(-128, 128, (n, 2, 3)).astype(np.int8)
    directory = tempfile.mkdtemp(dir=_TMP.name)
    files = []
    for part in range(int(rng.integers(1, min(n, 3) + 1))):
        files.append(os.path.join(directory, f"part-{part}.onerec"))
    bounds = np.linspace(0, n, len(files) + 1).astype(int)
    for path, lo, hi in zip(files, bounds[:-1], bounds[1:]):
        onerec.write_examples(path, [{"dense": dense[i], "label": labels[i], "rows": rows[i],
                                      "grid": grid[i].reshape(-1)} for i in range(lo, hi)])
    return files, dense, labels, rows, grid


@autotest(n=N, auto_backward=False, devices=CPU_ONLY)
def test_onerec_reader_and_decoder(check):
    files, dense, labels, rows, grid = _dataset(check)
    n, width = dense.shape
    longest = max(len(r) for r in rows)
    padded = np.stack([np.concatenate([r, np.zeros((longest - len(r), 2), np.int64)]) for r in rows])

    def gf(flow):
        rec = flow.data.onerec_reader(files, batch_size=n)
        return [flow.data.onerec_decoder(rec, "dense", flow.float, (width,)),
                flow.data.onerec_decoder(rec, "label", flow.int32, (1,)),
                flow.data.onerec_decoder(rec, "rows", flow.int64, (longest, 2), batch_padding=(-1, 0)),
                flow.data.onerec_decoder(rec, "grid", flow.int8, (2, 3), reshape=(-1, 3))]

    check(graphfront=gf,
          torch=lambda torch: [torch.from_numpy(dense), torch.from_numpy(labels), torch.from_numpy(padded),
                               torch.from_numpy(grid)])
