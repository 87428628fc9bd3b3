"""Fuzzing the loaders: job files and saved models from anywhere are data, never code.

Seeded mutants of a job (text and binary) and of a ``saved_model.pb`` are loaded; each
load must either succeed or raise a graphfront error (``flow.GraphfrontError``), never a
raw KeyError/IndexError/UnicodeDecodeError ..., and no payload hidden in a name may ever
run. Mutants are structured (a field of the proto set to a hostile value: names with line
breaks and code, path escapes, extreme numbers, other enum values) and raw (bytes flipped,
inserted, deleted, lines dropped or repeated).
"""
import os
import random
import shutil

import numpy as np
import pytest
from google.protobuf import descriptor, text_format

import graphfront as flow
from graphfront import typing as tp
from graphfront.core import job_pb2, saved_model_pb2
from graphfront.core.descriptor_compat import is_repeated

JOB_MUTANTS = 240
MODEL_MUTANTS = 160
INTS = [0, 1, 2, 3, -1, -7, 7, 64, 2 ** 31 - 1, -2 ** 31, 2 ** 40]
FLOATS = [0.0, -1.0, 1e30, float("inf"), float("nan"), 1e-30]


def _payloads(marker):
    code = f"open({str(marker)!r}, 'w').write('pwned')"
    return ["", "/", ".", "..", "a/b", "../../etc/passwd", "/tmp/abs", "x\n" + code, "x\r" + code,
            "x\n" + code + "\n#", "\u2028" + code, "\x00", "out", "x" * 5000, "conv1-weight/out", "Input_0",
            "variables/../..", "'''\n" + code + "\n'''"]


def _leaves(msg):
    """Every (message, field descriptor, index or None) under ``msg``."""
    for field, value in msg.ListFields():
        if field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                for key in sorted(value):  # (a protobuf map's own order changes from process to process)
                    entry = value[key]
                    if hasattr(entry, "ListFields"):
                        yield from _leaves(entry)
            elif is_repeated(field):
                for item in value:
                    yield from _leaves(item)
            else:
                yield from _leaves(value)
        elif is_repeated(field):
            for i in range(len(value)):
                yield msg, field, i
        else:
            yield msg, field, None


def _serialized(msg, text=False):
    """``msg`` in text format, or binary with its maps' entries in a fixed order (protobuf's
    own map order changes from process to process, and with it the bytes a seed mutates)."""
    return text_format.MessageToString(msg).encode() if text else msg.SerializePartialToString(deterministic=True)


def _hostile_value(rng, field, payloads):
    t = field.type
    if t == descriptor.FieldDescriptor.TYPE_STRING:
        return rng.choice(payloads)
    if t == descriptor.FieldDescriptor.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
    if t == descriptor.FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if t in (descriptor.FieldDescriptor.TYPE_FLOAT, descriptor.FieldDescriptor.TYPE_DOUBLE):
        return rng.choice(FLOATS)
    if t == descriptor.FieldDescriptor.TYPE_ENUM:
        return rng.choice(field.enum_type.values).number
    value = rng.choice(INTS)
    if t in (descriptor.FieldDescriptor.TYPE_UINT32, descriptor.FieldDescriptor.TYPE_UINT64,
             descriptor.FieldDescriptor.TYPE_FIXED32, descriptor.FieldDescriptor.TYPE_FIXED64):
        value = abs(value)
    if t in (descriptor.FieldDescriptor.TYPE_INT32, descriptor.FieldDescriptor.TYPE_SINT32,
             descriptor.FieldDescriptor.TYPE_SFIXED32, descriptor.FieldDescriptor.TYPE_UINT32,
             descriptor.FieldDescriptor.TYPE_FIXED32):
        value = max(min(value, 2 ** 31 - 1), -2 ** 31) if t != descriptor.FieldDescriptor.TYPE_UINT32 else \
            min(value, 2 ** 32 - 1)
    return value


def _mutate_proto(rng, proto, payloads):
    mutant = type(proto)()
    mutant.CopyFrom(proto)
    for _ in range(rng.randint(1, 3)):
        leaves = list(_leaves(mutant))
        msg, field, index = rng.choice(leaves)
        value = _hostile_value(rng, field, payloads)
        try:
            if index is None:
                setattr(msg, field.name, value)
            elif rng.random() < 0.3:
                del getattr(msg, field.name)[index]
            else:
                getattr(msg, field.name)[index] = value
        except (TypeError, ValueError):
            pass  # a value protobuf itself refuses to hold
    return mutant


def _mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        pos = rng.randrange(len(data)) if data else 0
        if kind == 0 and data:
            data[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif kind == 2 and data:
            del data[pos:pos + rng.randint(1, 8)]
        else:  # drop or repeat a line (text) / a chunk (binary)
            lines = bytes(data).split(b"\n")
            i = rng.randrange(len(lines))
            if kind == 3:
                del lines[i]
            else:
                lines.insert(i, lines[i])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def _fuzz(count, mutant_bytes, write, load, marker):
    """Write ``count`` mutants and load each; every load succeeds or raises a GraphfrontError
    and no payload runs. Returns ``{"loaded": n, "refused": m}``."""
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(count):
        write(mutant_bytes(i))
        sess = flow.serving.InferenceSession(flow.serving.SessionOption())
        try:
            load(sess)
            outcomes["loaded"] += 1
        except flow.GraphfrontError as e:
            outcomes["refused"] += 1
            # names read from the file are shown with repr: no raw NUL, CR or line separator
            assert not set(str(e)) & {"\x00", "\r", "\u2028"}, f"mutant {i}: raw control character in {str(e)!r}"
        except Exception as e:  # noqa: BLE001 - the assertion below is the test
            pytest.fail(f"mutant {i} escaped as a raw {type(e).__name__}: {e}")
        finally:
            sess.close()
    assert not marker.exists()
    print(f"{count} mutants: {outcomes}")
    assert outcomes["loaded"] > 0 and outcomes["refused"] > count // 3, outcomes
    return outcomes


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small CNN predict job: its Job as built, and a saved model (with signature)."""
    flow.clear_default_session()
    lbns = {}

    @flow.global_function(type="predict")
    def predict(image: tp.Numpy.Placeholder((2, 1, 8, 8))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            x = flow.layers.conv2d(image, 4, 3, padding="SAME", activation=flow.nn.relu, name="conv1")
            x = flow.nn.max_pool2d(x, ksize=2, strides=2, padding="VALID")
            probs = flow.nn.softmax(flow.layers.dense(flow.reshape(x, (2, -1)), 3, name="dense1"))
        lbns.update(image=image.logical_blob_name, probs=probs.logical_blob_name)
        return probs

    predict(np.zeros((2, 1, 8, 8), np.float32))
    root = tmp_path_factory.mktemp("fuzz_model")
    builder = flow.saved_model.ModelBuilder(str(root / "model")).ModelName("m").Version(1)
    builder.AddFunction(predict).AddSignature("sig").Input("image", lbns["image"]).Output("probs", lbns["probs"])
    builder.Save()
    job = predict.compiled_job.user_job
    flow.clear_default_session()
    return root, job


def test_fuzzed_job_files_load_or_raise_graphfront_errors(model, tmp_path):
    root, job = model
    marker = tmp_path / "PWNED"
    payloads = _payloads(marker)
    rng = random.Random(20261124)
    path = tmp_path / "job"

    def mutant(i):
        if i % 3 == 2:
            return _mutate_bytes(rng, _serialized(job, text=i % 2))
        return _serialized(_mutate_proto(rng, job, payloads), text=i % 2)
    _fuzz(JOB_MUTANTS, mutant, path.write_bytes, lambda sess: sess.load_job(str(path)), marker)


def test_fuzzed_saved_models_load_or_raise_graphfront_errors(model, tmp_path):
    root, _ = model
    marker = tmp_path / "PWNED"
    payloads = _payloads(marker)
    src = root / "model" / "1"
    model_proto = saved_model_pb2.SavedModel()
    model_proto.ParseFromString((src / "saved_model.pb").read_bytes())
    work = tmp_path / "model"
    shutil.copytree(src, work / "1")
    os.unlink(work / "1" / "saved_model.prototxt")
    rng = random.Random(1124)

    def mutant(i):
        if i % 3 == 2:
            return _mutate_bytes(rng, _serialized(model_proto))
        return _serialized(_mutate_proto(rng, model_proto, payloads))

    def load(sess):
        sess.load_saved_model(str(work))
        sess.launch()
    _fuzz(MODEL_MUTANTS, mutant, (work / "1" / "saved_model.pb").write_bytes, load, marker)


def test_a_code_payload_in_an_op_name_is_refused_and_never_runs(model, tmp_path):
    _, job = model
    marker = tmp_path / "PWNED"
    evil = job_pb2.Job()
    evil.CopyFrom(job)
    evil.net.op[1].name = f"x\nopen({str(marker)!r}, 'w').write('pwned')\n#"
    for fmt, data in (("text", text_format.MessageToString(evil).encode()), ("binary", evil.SerializeToString())):
        path = tmp_path / f"evil.{fmt}"
        path.write_bytes(data)
        with pytest.raises(flow.GraphfrontError, match=r"invalid op name .x\\nopen\(.*non-printable character '\\n'"):
            flow.serving.InferenceSession(flow.serving.SessionOption()).load_job(str(path))
    assert not marker.exists()


def test_a_checkpoint_dir_outside_the_model_is_refused(model, tmp_path):
    root, _ = model
    src = root / "model" / "1"
    for bad in ("/etc", "../../outside", "variables/../../x", "..", "\x00"):
        work = tmp_path / f"m{abs(hash(bad))}"
        shutil.copytree(src, work / "1")
        os.unlink(work / "1" / "saved_model.prototxt")
        proto = saved_model_pb2.SavedModel()
        proto.ParseFromString((work / "1" / "saved_model.pb").read_bytes())
        proto.checkpoint_dir = bad
        (work / "1" / "saved_model.pb").write_bytes(proto.SerializeToString())
        with pytest.raises(flow.serving.SavedModelError, match="checkpoint_dir"):
            flow.serving.InferenceSession(flow.serving.SessionOption()).load_saved_model(str(work))
    # a symlink leading out is refused too
    work = tmp_path / "linked"
    shutil.copytree(src, work / "1")
    os.unlink(work / "1" / "saved_model.prototxt")
    shutil.move(str(work / "1" / "variables"), str(tmp_path / "elsewhere"))
    os.symlink(tmp_path / "elsewhere", work / "1" / "variables")
    with pytest.raises(flow.serving.SavedModelError, match="leads outside the model directory"):
        flow.serving.InferenceSession(flow.serving.SessionOption()).load_saved_model(str(work))


def test_invalid_utf8_names_and_negative_dims_in_job_files_are_named(model, tmp_path):
    _, job = model
    variable = next(op for op in job.net.op if op.HasField("variable_conf"))
    bad = b"\xff\xfe" + variable.name.encode()[2:]  # same length: the wire format stays valid
    data = job.SerializeToString().replace(variable.name.encode(), bad)
    path = tmp_path / "bad_utf8.pb"
    path.write_bytes(data)
    with pytest.raises(flow.GraphfrontError, match=r"bad_utf8.pb': net\.op\[\d+\]\.name is not valid UTF-8"):
        flow.serving.InferenceSession(flow.serving.SessionOption()).load_job(str(path))
    # a map key (an argument name) of invalid UTF-8 raises UnicodeDecodeError when protobuf first reads it
    keyed = job_pb2.Job()
    keyed.CopyFrom(job)
    user_op = next(op for op in keyed.net.op if op.HasField("user_conf") and op.user_conf.input)
    user_op.user_conf.input["qqzz"].s.extend(next(iter(user_op.user_conf.input.values())).s)
    path.write_bytes(keyed.SerializeToString().replace(b"qqzz", b"\xf4\x80\xff\xfe"))
    with pytest.raises(flow.GraphfrontError, match=rf"net\.op\[\d+\]\.user_conf\.input.* is not valid UTF-8"):
        flow.serving.InferenceSession(flow.serving.SessionOption()).load_job(str(path))

    negative = job_pb2.Job()
    negative.CopyFrom(job)
    var = next(op for op in negative.net.op if op.HasField("variable_conf"))
    var.variable_conf.shape.dim[0] = -4
    path = tmp_path / "negative.txt"
    path.write_bytes(text_format.MessageToString(negative).encode())
    with pytest.raises(flow.JobBuildError, match=rf"op '{var.name}' \(variable_conf\): .*negative dimension"):
        flow.serving.InferenceSession(flow.serving.SessionOption()).load_job(str(path))
