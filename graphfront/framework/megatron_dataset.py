"""Megatron-LM's indexed token data set, read as OneFlow's GPT data loader reads it.

A data set is two files with a common prefix. ``<prefix>.idx`` (all little-endian):

* the magic ``b"MMIDIDX\\x00\\x00"`` (9 bytes), the version (uint64, 1) and the token dtype
  code (uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float32, 7 float64, 8 uint16);
* ``n`` (uint64), the number of documents, and ``n + 1`` (uint64), the length of the
  document index;
* ``sizes`` (int32[n], tokens per document), ``pointers`` (int64[n], byte offset of each
  document in ``<prefix>.bin``) and the document index (int64[n + 1]);

and nothing after. ``<prefix>.bin`` holds the tokens. Both files are data: the header,
counts, sizes and byte ranges are checked against the files' sizes, and the tokens are
read through ``numpy.memmap`` (nothing is loaded whole).

Samples (:class:`GPTSamples`) follow OneFlow v0.6.0's ``MegatronGPTMMapDataset``: the
documents of split ``split_index`` of ``split_sizes`` are repeated for as many epochs as
``num_samples`` samples of ``seq_length`` tokens need; sample ``i`` is the
``seq_length + 1`` tokens starting at token ``i * seq_length`` of that document stream
(a sample's last token is the next sample's first). With ``shuffle``, the documents of the
complete epochs and the samples are permuted with a generator seeded by ``random_seed``
(numpy's, so the permutation differs from OneFlow's ``std::mt19937`` one); without it the
order is the files' order.
"""
from __future__ import annotations

import math
import os

import numpy as np

__all__ = ["DTYPE_CODES", "MAGIC", "GPTSamples", "MegatronIndex"]

MAGIC = b"MMIDIDX\x00\x00"
DTYPE_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float32, 7: np.float64,
               8: np.uint16}
_HEADER = len(MAGIC) + 8 + 1 + 8 + 8


class MegatronIndex:
    """The checked contents of ``<prefix>.idx`` and the token array of ``<prefix>.bin``.

    Args:
        prefix: the path of the two files without ``.idx`` / ``.bin``.

    Attributes:
        sizes: int64[n], tokens per document.
        pointers: int64[n], each document's offset in ``tokens`` (in tokens).
        tokens: the ``.bin`` file as a read-only ``numpy.memmap`` of the token dtype.

    Raises:
        ValueError: a file is missing or does not hold what the format says; the message
            names the file and what was expected.
    """

    def __init__(self, prefix):
        idx_path, bin_path = f"{prefix}.idx", f"{prefix}.bin"
        for path in (idx_path, bin_path):
            if not os.path.isfile(path):
                raise ValueError(f"Megatron data set {prefix!r}: {path} does not exist")
        idx_size = os.path.getsize(idx_path)
        if idx_size < _HEADER:
            raise ValueError(f"{idx_path}: {idx_size} bytes, shorter than the {_HEADER}-byte index header")
        with open(idx_path, "rb") as f:
            header = f.read(_HEADER)
        if header[:len(MAGIC)] != MAGIC:
            raise ValueError(f"{idx_path}: expected the magic {MAGIC!r}, found {header[:len(MAGIC)]!r}")
        version = int.from_bytes(header[9:17], "little")
        if version != 1:
            raise ValueError(f"{idx_path}: expected index version 1, found {version}")
        code = header[17]
        if code not in DTYPE_CODES:
            raise ValueError(f"{idx_path}: unknown token dtype code {code} (expected one of {sorted(DTYPE_CODES)})")
        n = int.from_bytes(header[18:26], "little")
        n_doc_idx = int.from_bytes(header[26:34], "little")
        if n_doc_idx != n + 1:
            raise ValueError(f"{idx_path}: expected a document index of {n} + 1 entries for {n} documents, "
                             f"found {n_doc_idx}")
        expected = _HEADER + 4 * n + 8 * n + 8 * n_doc_idx
        if idx_size != expected:
            raise ValueError(f"{idx_path}: {n} documents need a {expected}-byte index file, found {idx_size} bytes")
        self.path = prefix
        self.dtype = np.dtype(DTYPE_CODES[code])
        self.sizes = np.fromfile(idx_path, np.dtype("<i4"), n, offset=_HEADER).astype(np.int64)
        byte_pointers = np.fromfile(idx_path, np.dtype("<i8"), n, offset=_HEADER + 4 * n)
        item = self.dtype.itemsize
        bin_size = os.path.getsize(bin_path)
        if n and (self.sizes.min() <= 0):
            bad = int(np.argmax(self.sizes <= 0))
            raise ValueError(f"{idx_path}: document {bad} has {self.sizes[bad]} tokens (expected at least 1)")
        ends = byte_pointers + self.sizes * item
        bad = np.flatnonzero((byte_pointers < 0) | (byte_pointers % item != 0) | (ends > bin_size))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{idx_path}: document {i} spans bytes [{byte_pointers[i]}, {ends[i]}) of {bin_path}, "
                             f"expected a range inside its {bin_size} bytes aligned to the {item}-byte tokens")
        self.pointers = byte_pointers // item
        self.tokens = (np.memmap(bin_path, dtype=self.dtype.newbyteorder("<"), mode="r") if bin_size
                       else np.zeros(0, self.dtype))

    @property
    def num_docs(self) -> int:
        return int(self.sizes.size)


class GPTSamples:
    """The samples OneFlow's ``megatron_gpt_mmap_data_loader`` reads (see module docstring).

    Args:
        index: a :class:`MegatronIndex`.
        seq_length: tokens a sample advances (>= 1); a sample holds ``seq_length + label_length``.
        num_samples: samples wanted (>= 1); the data set holds at least that many.
        split_sizes: the documents are cut in proportion to these sizes (rounded to nearest,
            as OneFlow).
        split_index: the part of that cut whose documents are used.
        shuffle: permute documents and samples (see module docstring).
        random_seed: the seed of that permutation.
        label_length: tokens a sample holds beyond ``seq_length`` (1).

    Raises:
        ValueError: bad arguments, or a split without tokens.
    """

    def __init__(self, index, seq_length, num_samples, split_sizes=(1,), split_index=0, shuffle=False,
                 random_seed=0, label_length=1):
        where = f"Megatron data set {index.path!r}"
        if seq_length < 1 or num_samples < 1:
            raise ValueError(f"{where}: seq_length and num_samples must be >= 1, received {seq_length}, {num_samples}")
        if not split_sizes or any(s < 0 for s in split_sizes) or sum(split_sizes) <= 0:
            raise ValueError(f"{where}: split_sizes must be non-negative with a positive sum, received {split_sizes}")
        if not 0 <= split_index < len(split_sizes):
            raise ValueError(f"{where}: split_index must lie in [0, {len(split_sizes)}), received {split_index}")
        self.index = index
        self.seq_length = int(seq_length)
        self.sample_length = int(seq_length) + int(label_length)
        total = np.float32(sum(split_sizes))
        counts = [int(np.rint(np.float32(s) / total * np.float32(index.num_docs))) for s in split_sizes]
        start = sum(counts[:split_index])
        epoch_docs = np.arange(start, start + counts[split_index], dtype=np.int64)
        epoch_docs = epoch_docs[epoch_docs < index.num_docs]
        tokens_per_epoch = int(index.sizes[epoch_docs].sum())
        if tokens_per_epoch == 0:
            raise ValueError(f"{where}: split {split_index} of {list(split_sizes)} holds no tokens "
                             f"({index.num_docs} documents)")
        num_epochs = math.ceil((num_samples * self.seq_length + 1) / tokens_per_epoch)
        complete = num_epochs
        if num_epochs > 1:
            per_epoch = (tokens_per_epoch - 1) // self.seq_length
            before_last = ((num_epochs - 1) * tokens_per_epoch - 1) // self.seq_length
            last = num_samples - before_last
            if last < int(np.float32(0.8) * np.float32(per_epoch)):
                complete = num_epochs - 1
        rng = np.random.RandomState(random_seed & 0xFFFF_FFFF)
        docs = np.tile(epoch_docs, complete)
        if shuffle:
            rng.shuffle(docs)
        if complete != num_epochs:
            tail = epoch_docs.copy()
            if shuffle:
                rng.shuffle(tail)
            docs = np.concatenate([docs, tail])
        self.doc_indices = docs
        self.doc_starts = np.concatenate([[0], np.cumsum(index.sizes[docs])])  # stream position of each doc
        self.total = (num_epochs * tokens_per_epoch - 1) // self.seq_length  # samples held
        order = np.arange(self.total, dtype=np.int64)
        if shuffle:
            first = (complete * tokens_per_epoch - 1) // self.seq_length
            head = order[:first]
            rng.shuffle(head)
            if complete != num_epochs:
                rest = order[first:]
                rng.shuffle(rest)
        self.order = order

    def __len__(self) -> int:
        return int(self.total)

    def sample(self, i) -> np.ndarray:
        """Sample ``i`` (``0 <= i < len(self)``): ``seq_length + 1`` tokens, the file's dtype.

        Raises:
            IndexError: ``i`` is outside the data set.
        """
        if not 0 <= i < self.total:
            raise IndexError(f"Megatron data set {self.index.path!r}: sample {i} is past its {self.total} samples "
                             f"(num_samples and the epochs it needs)")
        positions = int(self.order[i]) * self.seq_length + np.arange(self.sample_length)
        k = np.searchsorted(self.doc_starts, positions, side="right") - 1
        docs = self.doc_indices[k]
        return np.asarray(self.index.tokens[self.index.pointers[docs] + positions - self.doc_starts[k]])
