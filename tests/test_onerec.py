"""OneFlow's OneRec data path: the file format (frames, XXH64 digests), the FlatBuffers
records, ``flow.data.onerec_reader`` / ``onerec_decoder`` in jobs against numpy, on two
devices, with corrupted files, and a small Wide&Deep-like model trained from OneRec files."""
import filecmp
import itertools
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

import graphfront as flow
from graphfront import typing as tp
from graphfront.framework.errors import OpRunError
from graphfront.ofrecord import onerec
from graphfront.ofrecord.reader import record_batches, shuffle_buffer
from test_ofrecord import job_sbp  # the layout of each op's first output

xxhash = pytest.importorskip("xxhash")
pytest.importorskip("flatbuffers")

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.join(os.path.dirname(HERE), "graphfront", "ofrecord")


def _write(path, examples):
    onerec.write_examples(str(path), examples)
    return str(path)


def _ids_file(path, ids):
    return _write(path, [{"id": np.array([i], np.int32)} for i in ids])


def _job(fn):
    return flow.global_function(type="predict")(fn)


# ---------------------------------------------------------------- file format

def test_frame_layout_is_onerec_dataset_h():
    payload = b"0123456789"   # 10 bytes: 6 bytes of zero padding
    data = onerec.frame(payload)
    assert len(data) == 24 + 16 + 8 and len(data) % 8 == 0
    assert data[:8] == b"^ONEREC$"
    magic, reserved, size = struct.unpack_from("<Qii", data)
    assert (magic, reserved, size) == (0x24434552454E4F5E, 0, 10)
    # OneFlow: ByteSwap(little-endian uint64 read from the digest) == XXH64(first 16 header bytes, seed 0)
    (stored,) = struct.unpack_from("<Q", data, 16)
    assert int.from_bytes(stored.to_bytes(8, "little"), "big") == xxhash.xxh64_intdigest(data[:16], seed=0)
    assert data[24:34] == payload and data[34:40] == bytes(6)
    (stored,) = struct.unpack_from("<Q", data, 40)
    assert int.from_bytes(stored.to_bytes(8, "little"), "big") == xxhash.xxh64_intdigest(payload, seed=0)


def test_frames_round_trip_including_empty_and_aligned_payloads(tmp_path):
    payloads = [b"", b"x" * 8, b"abc", bytes(range(256))]
    path = str(tmp_path / "f.onerec")
    assert onerec.write_frames(path, payloads) == 4
    assert list(onerec.iter_frames(path)) == payloads


def test_example_is_a_1rec_flatbuffer_of_sorted_features():
    values = {"f64": np.linspace(0, 1, 4).reshape(2, 2), "i8": np.array([-3, 7], np.int8),
              "i16": np.array([[1, -2, 3]], np.int16), "b_i32": np.arange(6, dtype=np.int32).reshape(2, 3),
              "a_i64": np.array(2 ** 40, np.int64), "f32": np.array([0.5, -1.5], np.float32)}
    buf = onerec.encode_example(values)
    assert buf[4:8] == b"1REC"
    onerec.verify_example_buffer(buf)
    assert onerec.feature_names(buf) == sorted(values)
    for name, v in values.items():
        t = onerec.feature_tensor(np.frombuffer(buf, np.uint8), name)   # as a tensor_buffer element holds it
        assert t.shape == v.shape
        assert onerec.TENSOR_DATA[t.data_type] == {"f64": "Float64List", "i8": "Int8List", "i16": "Int16List",
                                                   "b_i32": "Int32List", "a_i64": "Int64List",
                                                   "f32": "Float32List"}[name]
        np.testing.assert_array_equal(t.values, v.reshape(-1))
    assert onerec.feature_tensor(buf, "missing") is None
    lists = onerec.encode_example({"words": ["ab", "\u00e7d"], "blobs": [b"\x00\x01", b""]})
    onerec.verify_example_buffer(lists)
    assert onerec.feature_tensor(lists, "words") == (((2,), onerec.TENSOR_DATA.index("StringList"),
                                                      [b"ab", "\u00e7d".encode()]))
    assert onerec.feature_tensor(lists, "blobs") == (((2,), onerec.TENSOR_DATA.index("BinaryList"),
                                                      [b"\x00\x01", b""]))
    with pytest.raises(TypeError, match="feature 'u': OneRec lists hold .* received uint8"):
        onerec.encode_example({"u": np.zeros(2, np.uint8)})


def test_tensor_vtable_slots_are_onerecs():
    # Tensor: shape slot 4, the union's type byte slot 6, data slot 8 (OneFlow's example_generated.h)
    from graphfront.ofrecord import onerec_example_generated as gen
    buf = onerec.encode_example({"x": np.array([1, 2, 3], np.int32)})
    tensor = gen.Example.GetRootAs(buf, 0).Features(0).Tensor()
    assert tensor._tab.Offset(4) and tensor._tab.Offset(6) and tensor._tab.Offset(8)
    assert tensor._tab.Get(gen.flatbuffers.number_types.Uint8Flags, tensor._tab.Pos + tensor._tab.Offset(6)) == 3


def test_generated_accessors_are_what_flatc_writes(tmp_path):
    flatc = shutil.which("flatc")
    if flatc is None:
        pytest.skip("flatc is not installed (Debian: flatbuffers-compiler)")
    version = subprocess.run([flatc, "--version"], capture_output=True, text=True).stdout.strip()
    if version != "flatc version 2.0.8":
        pytest.skip(f"the committed module was generated by flatc 2.0.8, this is {version!r}")
    subprocess.run([flatc, "--python", "--gen-onefile", "-o", str(tmp_path),
                    os.path.join(PACKAGE_DIR, "onerec_example.fbs")], check=True)
    assert filecmp.cmp(tmp_path / "onerec_example_generated.py",
                       os.path.join(PACKAGE_DIR, "onerec_example_generated.py"), shallow=False)


# ---------------------------------------------------------------- malformed files

def _corrupt(tmp_path, name, edit):
    path = _ids_file(tmp_path / "good.onerec", range(3))
    data = bytearray(open(path, "rb").read())
    edit(data)
    bad = tmp_path / name
    bad.write_bytes(bytes(data))
    return str(bad), len(onerec.frame(onerec.encode_example({"id": np.array([0], np.int32)})))


def _set(data, at, value):
    data[at:at + len(value)] = value


@pytest.mark.parametrize("name, edit_at_frame_1, message", [
    ("magic", lambda d, f: _set(d, f, b"^ONEREX$"), r"bad magic b'\^ONEREX\$'"),
    ("reserved", lambda d, f: _set(d, f + 8, struct.pack("<i", 5)), "reserved header field is 5, expected 0"),
    ("header", lambda d, f: _set(d, f + 16, bytes(8)), "header digest mismatch: stored 0000000000000000"),
    ("payload", lambda d, f: d.__setitem__(f + 40, d[f + 40] ^ 1), "payload digest mismatch"),
    ("truncated", lambda d, f: d.__delitem__(slice(f + 30, None)), "truncated frame"),
    ("short_header", lambda d, f: d.__delitem__(slice(f + 10, None)), "truncated header: 10 of 24 bytes"),
])
def test_malformed_frames_name_the_file_the_offset_and_the_problem(tmp_path, name, edit_at_frame_1, message):
    holder = {}

    def edit(data):
        size = len(data) // 3
        holder["size"] = size
        edit_at_frame_1(data, size)

    path, size = _corrupt(tmp_path, f"{name}.onerec", edit)
    frames = onerec.iter_frames(path)
    assert next(frames)   # frame 0 is intact
    with pytest.raises(onerec.OneRecFileError, match=rf"OneRec file {path}: frame at byte offset {size}: {message}"):
        next(frames)


def test_verify_example_checks_the_flatbuffer(tmp_path):
    good = onerec.encode_example({"id": np.array([1], np.int32)})
    wrong_id = good[:4] + b"XXXX" + good[8:]
    broken_root = struct.pack("<I", 10 ** 6) + good[4:]
    path = str(tmp_path / "f.onerec")
    for payload, message in ((wrong_id, r"file identifier b'XXXX', expected b'1REC'"),
                             (broken_root, "outside the"), (b"1REC", "too few")):
        onerec.write_frames(path, [good, payload])
        assert len(list(itertools.islice(onerec.iter_frames(path), 2))) == 2   # unverified, frames are sound
        with pytest.raises(onerec.OneRecFileError, match=rf"frame at byte offset {len(onerec.frame(good))}: the "
                                                         rf"payload is no valid OneRec Example \(verify_example\): "
                                                         rf".*{message}"):
            list(onerec.iter_frames(path, verify_example=True))


def test_verify_example_never_raises_anything_but_value_error_on_garbled_records():
    good = onerec.encode_example({"a": np.arange(4, dtype=np.float32), "b": np.array([[1, 2]], np.int64),
                                  "c": ["xy", "z"], "d": [b"\x01\x02", b"\x03"]})
    rng = np.random.default_rng(0)
    passed = 0
    for _ in range(2000):
        buf = bytearray(good)
        for i in rng.integers(len(buf), size=int(rng.integers(1, 4))):
            buf[i] = int(rng.integers(256))
        buf = bytes(buf[:int(rng.integers(len(buf) // 2, len(buf) + 1))])
        try:
            onerec.verify_example_buffer(buf)
        except ValueError:
            continue
        passed += 1
        for key in "abcd":
            onerec.feature_tensor(buf, key)   # a verified record reads without an exception
    assert passed > 0


def test_bad_file_in_a_job_raises_and_the_session_stays_usable(tmp_path):
    bad, size = _corrupt(tmp_path, "bad.onerec", lambda d: _set(d, len(d) // 3 * 2 + 16, bytes(8)))
    good = _ids_file(tmp_path / "ok.onerec", range(4))

    @_job
    def bad_job() -> tp.Numpy:
        rec = flow.data.onerec_reader([bad], batch_size=3)
        return flow.data.onerec_decoder(rec, "id", flow.int32, (1,))

    @_job
    def good_job() -> tp.Numpy:
        rec = flow.data.onerec_reader([good], batch_size=2)
        return flow.data.onerec_decoder(rec, "id", flow.int32, (1,))

    with pytest.raises(flow.GraphfrontError, match=rf"OneRec file {bad}: frame at byte offset {2 * size}: header "
                                                   "digest mismatch"):
        bad_job()
    np.testing.assert_array_equal(good_job(), [[0], [1]])
    with pytest.raises(onerec.OneRecFileError, match="header digest mismatch"):   # the same error again
        bad_job()
    np.testing.assert_array_equal(good_job(), [[2], [3]])


# ---------------------------------------------------------------- decoder

def test_decoder_reads_every_dtype_and_shape(tmp_path):
    rng = np.random.default_rng(1)
    n = 4
    data = {"i8": rng.integers(-128, 128, (n, 3), dtype=np.int8),
            "i32": rng.integers(-10 ** 6, 10 ** 6, (n,), dtype=np.int32).reshape(n, 1),
            "i64": rng.integers(-2 ** 40, 2 ** 40, (n, 2, 3), dtype=np.int64),
            "f32": rng.standard_normal((n, 2, 2)).astype(np.float32),
            "f64": rng.standard_normal((n, 5)),
            "scalar": rng.standard_normal(n).astype(np.float32)}
    path = _write(tmp_path / "a.onerec", [{k: v[i] for k, v in data.items()} for i in range(n)])

    @_job
    def read() -> tp.Bundle[tp.Numpy]:
        rec = flow.data.onerec_reader([path], batch_size=n)
        return (flow.data.onerec_decoder(rec, "i8", flow.int8, (3,)),
                flow.data.onerec_decoder(rec, "i32", flow.int32, (1,)),
                flow.data.onerec_decoder(rec, "i64", flow.int64, (2, 3)),
                flow.data.OneRecDecoder(rec, "f32", flow.float32, [2, 2]),
                flow.data.onerec_decoder(rec, "f64", flow.float64, (5,)),
                flow.data.onerec_decoder(rec, "scalar", flow.float, ()))

    for got, (key, want) in zip(read(), data.items()):
        assert got.dtype == want.dtype and got.shape == want.shape, key
        np.testing.assert_array_equal(got, want)


def test_batch_read_equals_the_record_by_record_read_or_declines():
    """The decoder reads a batch at once (onerec.numeric_feature) where every record stores
    the key alike; a record laid out otherwise (the key at another index, another type) or a
    garbled one makes it decline (None), never read outside a record or raise."""
    rng = np.random.default_rng(7)
    records = [onerec.encode_example({"a": rng.integers(0, 9, 2, dtype=np.int64),
                                      "dense": rng.random(5, dtype=np.float32),
                                      "ids": rng.integers(0, 10 ** 6, 26, dtype=np.int32)}) for _ in range(64)]
    buffers = [np.frombuffer(r, np.uint8) for r in records]
    f32, i32 = onerec.TENSOR_DATA.index("Float32List"), onerec.TENSOR_DATA.index("Int32List")
    for key, code, count, dtype in (("dense", f32, 5, np.float32), ("ids", i32, 26, np.int32)):
        batch = onerec.numeric_feature(buffers, key, code)
        assert batch.shapes.tolist() == [[count]] * 64 and batch.counts.tolist() == [count] * 64
        np.testing.assert_array_equal(batch.values(dtype, count),
                                      np.stack([onerec.feature_tensor(r, key).values for r in records]))
    assert onerec.numeric_feature(buffers, "dense", i32) is None  # another list type
    shifted = onerec.encode_example({"0": np.zeros(1, np.int8), "a": np.zeros(2, np.int64),  # "dense" third
                                     "dense": np.ones(5, np.float32)})
    assert onerec.numeric_feature(buffers[:3] + [np.frombuffer(shifted, np.uint8)], "dense", f32) is None
    for trial in range(300):  # garbled records: declined or read inside the records, never raising
        garbled = [b.copy() for b in buffers[:4]]
        for b in garbled:
            b[rng.integers(0, b.size, 3)] = rng.integers(0, 256, 3, dtype=np.uint8)
        batch = onerec.numeric_feature(garbled, "ids", i32)
        if batch is not None:
            ends = np.cumsum([b.size for b in garbled])
            assert (batch.starts + 4 * batch.counts <= ends).all()


def test_reshape_reads_the_values_in_another_shape(tmp_path):
    flat = np.arange(24, dtype=np.float32).reshape(4, 6)
    path = _write(tmp_path / "a.onerec", [{"x": flat[i]} for i in range(4)])

    @_job
    def read() -> tp.Bundle[tp.Numpy]:
        rec = flow.data.onerec_reader([path], batch_size=4)
        return (flow.data.onerec_decoder(rec, "x", flow.float, (2, 3), reshape=(2, 3)),
                flow.data.onerec_decoder(rec, "x", flow.float, (3, 2), reshape=(-1, 2)),
                flow.data.onerec_decoder(rec, "x", flow.float, (6,), reshape=(-1,)))

    a, b, c = read()
    np.testing.assert_array_equal(a, flat.reshape(4, 2, 3))
    np.testing.assert_array_equal(b, flat.reshape(4, 3, 2))
    np.testing.assert_array_equal(c, flat)


def _ragged_file(tmp_path, lengths):
    rows = [np.arange(10 * i, 10 * i + 2 * n, dtype=np.int64).reshape(n, 2) for i, n in enumerate(lengths)]
    return _write(tmp_path / "ragged.onerec", [{"v": r} for r in rows]), rows


def _padded(rows, size):
    return np.stack([np.concatenate([r, np.zeros((size - len(r), 2), r.dtype)]) for r in rows])


def test_batch_padding_pads_dim_0_with_zeros(tmp_path):
    path, rows = _ragged_file(tmp_path, [1, 3, 2, 3])

    @_job
    def read() -> tp.Bundle[tp.Numpy]:
        rec = flow.data.onerec_reader([path], batch_size=4)
        return (flow.data.onerec_decoder(rec, "v", flow.int64, (3, 2), batch_padding=(-1, 0)),
                flow.data.onerec_decoder(rec, "v", flow.int64, (5, 2), batch_padding=(5, 0)))

    to_max, to_five = read()
    np.testing.assert_array_equal(to_max, _padded(rows, 3))
    np.testing.assert_array_equal(to_five, _padded(rows, 5))


def test_batch_padding_zero_and_none_need_equal_dims_0(tmp_path):
    path, _ = _ragged_file(tmp_path, [2, 3])

    @_job
    def zero() -> tp.Numpy:
        rec = flow.data.onerec_reader([path], batch_size=2)
        return flow.data.onerec_decoder(rec, "v", flow.int64, (2, 2), batch_padding=(0, 0), name="zero")

    with pytest.raises(OpRunError, match=r"op 'zero' \(onerec_decoder\): key 'v', record 1: dim 0 must be equal "
                                              r"across the batch .* record 0 has 2, received 3"):
        zero()

    @_job
    def unpadded() -> tp.Numpy:
        rec = flow.data.onerec_reader([path], batch_size=2)
        return flow.data.onerec_decoder(rec, "v", flow.int64, (2, 2), name="plain")

    with pytest.raises(OpRunError, match=r"op 'plain' .* key 'v', record 1: expected instance shape \(2, 2\) "
                                         r"\(static_shape\), received \(3, 2\)"):
        unpadded()

    @_job
    def dynamic() -> tp.Numpy:
        rec = flow.data.onerec_reader([path], batch_size=2)
        return flow.data.onerec_decoder(rec, "v", flow.int64, (4, 2), is_dynamic=True, name="dyn")

    with pytest.raises(OpRunError, match=r"op 'dyn' .* key 'v', record 1: dim 0 must be equal across the batch"):
        dynamic()

    @_job
    def too_small() -> tp.Numpy:
        rec = flow.data.onerec_reader([path], batch_size=2)
        return flow.data.onerec_decoder(rec, "v", flow.int64, (2, 2), batch_padding=(2, 0), name="small")

    with pytest.raises(OpRunError, match=r"key 'v', record 1: dim 0 is 3, batch_padding pads to 2"):
        too_small()


def test_dynamic_output_takes_the_batchs_shape(tmp_path):
    path, rows = _ragged_file(tmp_path, [1, 2, 3, 3, 1, 1])

    @_job
    def read() -> tp.Numpy:
        rec = flow.data.onerec_reader([path], batch_size=2)
        return flow.data.onerec_decoder(rec, "v", flow.int64, (4, 2), is_dynamic=True, batch_padding=(-1, 0))

    for step, size in enumerate([2, 3, 1]):
        got = read()
        assert got.shape == (2, size, 2)
        np.testing.assert_array_equal(got, _padded(rows[2 * step:2 * step + 2], size))


def test_decoder_errors_name_the_op_the_key_the_record_and_the_values(tmp_path):
    path = _write(tmp_path / "a.onerec", [{"x": np.arange(3, dtype=np.float32), "y": ["a", "b"]},
                                          {"x": np.arange(4, dtype=np.float32), "y": ["c", "d"]}])
    miscounted = _write(tmp_path / "b.onerec", [onerec.encode_example({"x": np.arange(3, dtype=np.float32)},
                                                                      shapes={"x": (4,)})])
    cases = [
        ([path], "nope", flow.float, (3,), r"key 'nope', record 0: the record has no feature 'nope' \(it has "
                                           r"\['x', 'y'\]\)"),
        ([path], "x", flow.int32, (3,), r"key 'x', record 0: data_type int32 reads a Int32List, the record's tensor "
                                        r"holds Float32List"),
        ([path], "y", flow.int8, (2,), r"key 'y', record 0: data_type int8 reads a Int8List, the record's tensor "
                                       r"holds StringList"),
        ([path], "x", flow.float, (3,), r"key 'x', record 1: expected instance shape \(3,\) \(static_shape\), "
                                        r"received \(4,\)"),
        ([path], "x", flow.float, (3, 1), r"key 'x', record 0: expected a tensor of 2 dims \(static_shape \(3, 1\)\), "
                                          r"received shape \(3,\)"),
        ([miscounted], "x", flow.float, (4,), r"key 'x', record 0: the Float32List holds 3 values, instance shape "
                                              r"\(4,\) needs 4"),
    ]
    for files, key, dtype, shape, message in cases:
        flow.clear_default_session()

        @_job
        def read() -> tp.Numpy:
            rec = flow.data.onerec_reader(files, batch_size=2 if files == [path] else 1)
            return flow.data.onerec_decoder(rec, key, dtype, shape, name="dec")

        with pytest.raises(OpRunError, match=r"op 'dec' \(onerec_decoder\): " + message):
            read()


def test_build_time_errors(tmp_path):
    path = _ids_file(tmp_path / "a.onerec", range(2))
    with pytest.raises(flow.JobBuildError, match="onerec_reader: argument 'files' expects a list or tuple"):
        _job(lambda: flow.data.onerec_reader(path))()
    cases = [
        (lambda: flow.data.onerec_reader([path, str(tmp_path / "nope")]), r"OneRec file '.*nope' \(attr "
                                                                          r"'files'\[1\]\) does not exist"),
        (lambda: flow.data.onerec_reader([]), "attr 'files' must name at least one OneRec file"),
        (lambda: flow.data.onerec_reader([path], shuffle_mode="epoch"), "attr 'shuffle_mode' must be one of"),
        (lambda: flow.data.onerec_decoder(flow.data.onerec_reader([path]), "id", flow.float16, (1,)),
         "attr 'data_type' must be one of int8, int32, int64, float32, float64"),
        (lambda: flow.data.onerec_decoder(flow.data.onerec_reader([path]), "id", flow.int32, (1, 2),
                                          reshape=(-1, -1)), "attr 'reshape' must have the 2 dims"),
        (lambda: flow.data.onerec_decoder(flow.data.onerec_reader([path]), "id", flow.int32, (2, 2),
                                          batch_padding=(-1, 1)), "attr 'batch_padding' must have the 2 dims"),
        (lambda: flow.data.onerec_decoder(flow.data.onerec_reader([path]), "id", flow.int32, (2,),
                                          batch_padding=(3,)), r"pads dim 0 to 3, static_shape \(2,\) needs 2"),
    ]
    for build, message in cases:
        flow.clear_default_session()
        with pytest.raises(flow.JobBuildError, match=message):
            _job(build)()


def test_a_missing_extra_is_named_when_the_job_is_built(tmp_path, monkeypatch):
    path = _ids_file(tmp_path / "a.onerec", range(2))
    monkeypatch.setattr(onerec, "missing_dependencies", lambda: ["xxhash"])
    with pytest.raises(flow.JobBuildError, match=r"OneRec files need the Python package\(s\) xxhash: "
                                                 r"pip install 'graphfront\[onerec\]'"):
        _job(lambda: flow.data.onerec_reader([path]))()


# ---------------------------------------------------------------- reader streams

def test_files_are_one_stream_that_wraps_around_at_the_end(tmp_path):
    a = _ids_file(tmp_path / "a.onerec", range(3))
    b = _ids_file(tmp_path / "b.onerec", range(100, 102))

    @_job
    def read() -> tp.Numpy:
        rec = flow.data.onerec_reader([a, b], batch_size=3)
        return flow.data.onerec_decoder(rec, "id", flow.int32, (1,))

    stream = [0, 1, 2, 100, 101] * 3
    for step in range(4):
        np.testing.assert_array_equal(read()[:, 0], stream[3 * step:3 * step + 3])


def _read_ids(files, steps, batch=4, **kw):
    flow.clear_default_session()

    @_job
    def read() -> tp.Numpy:
        rec = flow.data.onerec_reader(files, batch_size=batch, **kw)
        return flow.data.onerec_decoder(rec, "id", flow.int32, (1,))

    return [read()[:, 0].tolist() for _ in range(steps)]


def test_shuffle_modes_are_seeded_permutations_of_the_stream(tmp_path):
    files = [_ids_file(tmp_path / "a.onerec", range(12)), _ids_file(tmp_path / "b.onerec", range(12, 24))]
    plain = _read_ids(files, 12)
    assert sum(plain, []) == list(range(24)) * 2
    for mode in ("instance", "batch"):
        kw = dict(random_shuffle=True, shuffle_mode=mode, shuffle_buffer_size=4, seed=7)
        first, again = _read_ids(files, 12, **kw), _read_ids(files, 12, **kw)
        other = _read_ids(files, 12, **dict(kw, seed=8))
        assert first == again and first != other and first != plain
        ids = sum(first, [])
        assert set(ids) == set(range(24)) and all(ids.count(i) <= 3 for i in range(24))
        if mode == "batch":   # whole batches of the unshuffled stream, moved as units
            assert all(b in plain[:6] for b in first)
        else:
            assert any(b not in plain for b in first)


def test_shuffle_buffer_emits_each_item_once():
    rng = np.random.default_rng(3)
    out = shuffle_buffer(itertools.chain(range(50), itertools.repeat(-1)), 8, rng)
    seen = list(itertools.islice(out, 200))
    real = [x for x in seen if x >= 0]
    assert sorted(real) == list(range(50)) and real != list(range(50))


def test_shuffle_after_epoch_permutes_the_files_every_epoch(tmp_path):
    files = [_ids_file(tmp_path / f"{i}.onerec", range(10 * i, 10 * i + 2)) for i in range(4)]
    batches = record_batches(files, 8, parse=False, shuffle_after_epoch=True, seed=5, read_file=onerec.iter_frames)
    epochs = [[int(onerec.feature_tensor(r, "id").values[0]) for r in next(batches)] for _ in range(4)]
    for ep in epochs:
        blocks = [ep[j:j + 2] for j in range(0, 8, 2)]
        assert sorted(b[0] for b in blocks) == [0, 10, 20, 30] and all(b[1] == b[0] + 1 for b in blocks)
    assert len({tuple(ep) for ep in epochs}) > 1


# ---------------------------------------------------------------- several devices

@pytest.mark.slow  # spawns two worker processes
def test_two_devices_read_their_balanced_ranges_of_the_files(tmp_path):
    files = [_ids_file(tmp_path / f"{i}.onerec", range(100 * i, 100 * i + 3)) for i in range(3)]
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @_job
    def read() -> tp.Numpy:
        rec = flow.data.onerec_reader(files, batch_size=4)
        return flow.data.onerec_decoder(rec, "id", flow.int32, (1,)) * 1

    device0 = [0, 1, 2, 100, 101, 102] * 2   # BalancedSplitter(3, 2): files 0 and 1
    device1 = [200, 201, 202] * 4            # and file 2
    for step in range(3):
        np.testing.assert_array_equal(read()[:, 0], device0[2 * step:2 * step + 2] + device1[2 * step:2 * step + 2])
    assert job_sbp(read)["OneRecReader"] == "S(0)"


@pytest.mark.slow  # spawns two worker processes
def test_two_devices_need_two_files(tmp_path):
    files = [_ids_file(tmp_path / "a.onerec", range(4))]
    flow.config.gpu_device_num(0)
    flow.config.cpu_device_num(2)

    @_job
    def read() -> tp.Numpy:
        rec = flow.data.onerec_reader(files, batch_size=4)
        return flow.data.onerec_decoder(rec, "id", flow.int32, (1,))

    with pytest.raises(flow.JobBuildError, match=r"2 devices cannot share the 1 file\(s\) of attr 'files'"):
        read()


# ---------------------------------------------------------------- end to end

DENSE, WIDE, DEEP, VOCAB = 4, 3, 2, 32


def _wide_and_deep_files(tmp_path, n=256):
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((n, DENSE)).astype(np.float32)
    wide = rng.integers(0, VOCAB, (n, WIDE), dtype=np.int32)
    deep = rng.integers(0, VOCAB, (n, DEEP), dtype=np.int32)
    score = dense @ np.array([1.5, -2.0, 1.0, 0.5], np.float32) + (wide[:, 0] % 2) * 2.0 - 1.0
    labels = (score > 0).astype(np.int32).reshape(n, 1)
    files = []
    for part in range(2):
        rows = range(part * n // 2, (part + 1) * n // 2)
        files.append(_write(tmp_path / f"part-{part}.onerec",
                            [{"labels": labels[i], "dense_fields": dense[i], "wide_sparse_fields": wide[i],
                              "deep_sparse_fields": deep[i]} for i in rows]))
    return files


def test_wide_and_deep_like_model_trains_from_onerec_files(tmp_path):
    files = _wide_and_deep_files(tmp_path)
    flow.manual_seed(0)

    def _data_loader_onerec(batch_size):   # OneFlow-Benchmark's Wide&Deep loader, imports changed only
        with flow.scope.placement("cpu", "0:0"):
            readdata = flow.data.onerec_reader(files=files, batch_size=batch_size, random_shuffle=True,
                                               verify_example=False, shuffle_mode="batch", shuffle_buffer_size=64,
                                               shuffle_after_epoch=True)

            def _blob_decoder(bn, shape, dtype=flow.int32):
                return flow.data.onerec_decoder(readdata, key=bn, shape=shape, dtype=dtype)

            labels = _blob_decoder("labels", (1,))
            dense_fields = _blob_decoder("dense_fields", (DENSE,), flow.float)
            wide_sparse_fields = _blob_decoder("wide_sparse_fields", (WIDE,))
            deep_sparse_fields = _blob_decoder("deep_sparse_fields", (DEEP,))
        return [labels, dense_fields, wide_sparse_fields, deep_sparse_fields]

    @flow.global_function(type="train")
    def train_job() -> tp.Numpy:
        labels, dense, wide_ids, deep_ids = _data_loader_onerec(32)
        init = flow.random_normal_initializer(stddev=0.1)
        wide_table = flow.get_variable("wide_embedding", shape=(VOCAB, 1), initializer=init)
        deep_table = flow.get_variable("deep_embedding", shape=(VOCAB, 8), initializer=init)
        wide_logits = flow.math.reduce_sum(flow.reshape(flow.gather(wide_table, wide_ids), (-1, WIDE)), axis=1,
                                           keepdims=True)
        deep = flow.concat([flow.reshape(flow.gather(deep_table, deep_ids), (-1, DEEP * 8)), dense], axis=1)
        for i, units in enumerate((16, 16)):
            deep = flow.layers.dense(deep, units, activation=flow.math.relu, kernel_initializer=init,
                                     name=f"fc{i}")
        logits = wide_logits + flow.layers.dense(deep, 1, kernel_initializer=init, name="out")
        loss = flow.math.reduce_mean(flow.nn.sigmoid_cross_entropy_with_logits(flow.cast(labels, flow.float),
                                                                                logits))
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.02])).minimize(loss)
        return loss

    losses = [float(train_job().reshape(())) for _ in range(60)]
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10]), losses
