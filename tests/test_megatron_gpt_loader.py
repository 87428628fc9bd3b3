"""flow.data.megatron_gpt_mmap_data_loader reads Megatron-LM's indexed token files
(written here by a writer that follows Megatron's documented MMIDIDX layout) and yields the
samples of OneFlow's GPT data set; the reference is the plain token stream cut by numpy."""
import struct

import numpy as np
import pytest

import graphfront as flow

_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.uint16: 8}


def write_megatron(prefix, docs, dtype=np.uint16):
    """Megatron's MMapIndexedDataset files: one sentence per document."""
    dtype = np.dtype(dtype)
    sizes = np.array([len(d) for d in docs], np.int32)
    pointers = np.concatenate([[0], np.cumsum(sizes.astype(np.int64) * dtype.itemsize)[:-1]]).astype(np.int64)
    with open(f"{prefix}.bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype).tobytes())
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", _CODES[dtype.type]))
        f.write(struct.pack("<Q", len(docs)))
        f.write(struct.pack("<Q", len(docs) + 1))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(len(docs) + 1, dtype=np.int64).tobytes())


def _docs(seed=0, n=7):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 50000, size=int(rng.integers(3, 15))) for _ in range(n)]


def _loader_job(prefix, seq_length, num_samples, batch_size, dtype=flow.int64, **kw):
    @flow.global_function(type="predict")
    def load() -> flow.typing.Numpy:
        return flow.data.megatron_gpt_mmap_data_loader(prefix, seq_length=seq_length, num_samples=num_samples,
                                                       batch_size=batch_size, dtype=dtype, **kw)
    return load


def _reference_samples(docs, seq_length, num_samples, count):
    """Samples i = tokens [i * seq_length, i * seq_length + seq_length + 1) of the documents
    repeated for as many epochs as num_samples * seq_length + 1 tokens need."""
    epoch = np.concatenate(docs).astype(np.int64)
    epochs = -(-(num_samples * seq_length + 1) // len(epoch))
    stream = np.tile(epoch, epochs)
    return np.stack([stream[i * seq_length: i * seq_length + seq_length + 1] for i in range(count)])


def test_unshuffled_batches_are_the_token_stream_cut_into_overlapping_samples(tmp_path):
    docs = _docs()
    prefix = str(tmp_path / "corpus_text_document")
    write_megatron(prefix, docs)
    seq_length, num_samples, batch = 10, 12, 3  # 12 samples of 10 need more than one epoch of the ~60 tokens
    load = _loader_job(prefix, seq_length, num_samples, batch, shuffle=False)
    got = np.concatenate([load() for _ in range(4)])
    assert got.dtype == np.int64 and got.shape == (12, seq_length + 1)
    np.testing.assert_array_equal(got, _reference_samples(docs, seq_length, num_samples, 12))


def test_a_split_reads_only_its_documents_and_int32_output(tmp_path):
    docs = _docs(1, n=10)
    prefix = str(tmp_path / "corpus")
    write_megatron(prefix, docs, np.int32)
    # split [8, 2] of 10 documents: split 1 is documents 8 and 9
    load = _loader_job(prefix, 4, 2, 2, dtype=flow.int32, shuffle=False, split_sizes=[8, 2], split_index=1)
    got = load()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _reference_samples(docs[8:], 4, 2, 2))


def test_shuffled_samples_are_a_seeded_permutation_of_the_samples(tmp_path):
    docs = _docs(2, n=6)
    prefix = str(tmp_path / "corpus")
    write_megatron(prefix, docs)
    seq_length = 5
    total = (len(np.concatenate(docs)) - 1) // seq_length  # one epoch's samples
    runs = {}
    for seed in (123, 123, 7):
        flow.clear_default_session()
        load = _loader_job(prefix, seq_length, total, 1, shuffle=True, random_seed=seed)
        runs.setdefault(seed, []).append(np.concatenate([load() for _ in range(total)]))
    np.testing.assert_array_equal(runs[123][0], runs[123][1])  # deterministic for a seed
    assert not np.array_equal(runs[123][0], runs[7][0])
    got = runs[123][0]
    assert got.shape == (total, seq_length + 1)
    assert not np.array_equal(got, _reference_samples(docs, seq_length, total, total))
    # the samples' first seq_length tokens tile the start of the (shuffled) one-epoch stream:
    # together they are total * seq_length tokens taken from the epoch's tokens
    epoch = np.concatenate(docs).astype(np.int64)
    taken = np.sort(got[:, :seq_length].ravel())
    values, counts = np.unique(epoch, return_counts=True)
    t_values, t_counts = np.unique(taken, return_counts=True)
    assert taken.size == total * seq_length and np.isin(t_values, values).all()
    assert (t_counts <= counts[np.searchsorted(values, t_values)]).all()


def test_saved_progress_counter_is_a_variable_that_advances(tmp_path):
    docs = _docs(3)
    prefix = str(tmp_path / "corpus")
    write_megatron(prefix, docs)
    load = _loader_job(prefix, 6, 4, 2, shuffle=False, start_from_saved_progress=True)
    first, second = load(), load()
    ref = _reference_samples(docs, 6, 4, 4)
    np.testing.assert_array_equal(np.concatenate([first, second]), ref)
    assert int(flow.get_all_variables()["gpt_data_loader-iteration"].numpy()[0]) == 2
    with pytest.raises(RuntimeError, match="past its"):
        for _ in range(100):
            load()


@pytest.mark.parametrize("corrupt, message", [
    (lambda idx, b: idx.write_bytes(b"XXIDIDX\x00\x00" + idx.read_bytes()[9:]), "expected the magic"),
    (lambda idx, b: idx.write_bytes(idx.read_bytes()[:9] + struct.pack("<Q", 2) + idx.read_bytes()[17:]),
     "expected index version 1"),
    (lambda idx, b: idx.write_bytes(idx.read_bytes()[:17] + b"\x09" + idx.read_bytes()[18:]), "dtype code 9"),
    (lambda idx, b: idx.write_bytes(idx.read_bytes()[:-8]), "need a"),
    (lambda idx, b: b.write_bytes(b.read_bytes()[:10]), "spans bytes"),
    (lambda idx, b: b.unlink(), "does not exist"),
])
def test_malformed_files_are_refused_naming_the_file_and_what_was_expected(tmp_path, corrupt, message):
    prefix = tmp_path / "corpus"
    write_megatron(str(prefix), _docs())
    corrupt(tmp_path / "corpus.idx", tmp_path / "corpus.bin")
    load = _loader_job(str(prefix), 4, 2, 1, shuffle=False)
    with pytest.raises(flow.JobBuildError, match=message) as e:
        load()
    assert "corpus" in str(e.value)


def test_gradient_accumulation_reads_k_loader_batches_per_call(tmp_path):
    """A train job fed by the loader (no placeholder) with num_gradient_accumulation_steps(2):
    as OneFlow, each call runs forward and backward on 2 loader batches and makes one SGD
    step on their mean gradient (reference: torch on the numpy-cut samples)."""
    import torch
    docs = _docs(4, n=9)
    prefix = str(tmp_path / "corpus")
    write_megatron(prefix, docs)
    seq_length, batch, k, vocab, lr = 5, 2, 2, 50000, 0.5
    cfg = flow.FunctionConfig()
    cfg.train.num_gradient_accumulation_steps(k)

    @flow.global_function(type="train", function_config=cfg)
    def train() -> flow.typing.Numpy:
        tokens = flow.data.megatron_gpt_mmap_data_loader(prefix, seq_length=seq_length, num_samples=8,
                                                         batch_size=batch, shuffle=False)
        w = flow.get_variable("w", (vocab,), initializer=flow.constant_initializer(0.5))
        x = flow.gather(w, tokens)
        loss = flow.math.reduce_mean(flow.math.square(x - flow.cast(tokens, flow.float32) * 1e-4))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0).minimize(loss)
        return loss

    samples = torch.from_numpy(_reference_samples(docs, seq_length, 8, 8))
    w = torch.full((vocab,), 0.5, requires_grad=True)
    for call in range(2):
        got = train()
        micro = [samples[(call * k + i) * batch:(call * k + i + 1) * batch] for i in range(k)]
        ref = torch.stack([((w[t] - t.float() * 1e-4) ** 2).mean() for t in micro])
        np.testing.assert_allclose(got.reshape(-1), ref.detach().numpy(), rtol=1e-6)
        w.grad = None
        ref.mean().backward()
        with torch.no_grad():
            w -= lr * w.grad
    np.testing.assert_allclose(flow.get_all_variables()["w"].numpy(), w.detach().numpy(), rtol=1e-6, atol=1e-7)
