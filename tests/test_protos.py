"""Checks for the vendored OneFlow protobuf schema (protos/ -> graphfront/core)."""
import ast
import filecmp
import glob
import importlib
import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
from google.protobuf import descriptor_pb2, text_format

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(REPO, "protos", "graphfront", "core")
CORE_DIR = os.path.join(REPO, "graphfront", "core")

from graphfront.core import (  # noqa: E402
    data_type_pb2,
    initializer_conf_pb2,
    job_conf_pb2,
    job_pb2,
    job_set_pb2,
    op_conf_pb2,
    resource_pb2,
    user_op_attr_pb2,
    variable_meta_info_pb2,
)
from graphfront.core.descriptor_compat import is_repeated, is_required  # noqa: E402

EXPECTED_MODULES = [
    "blob_desc", "data_type", "initializer_conf", "interface_blob_conf",
    "job", "job_conf", "job_set", "learning_rate_schedule_conf", "logical_blob_id",
    "op_conf", "placement", "record", "regularizer_conf", "resource", "saved_model",
    "sbp_parallel", "scope", "shape", "user_op_attr", "user_op_conf",
    "variable_meta_info",
]


def _stems(directory, suffix):
    return sorted(os.path.basename(p)[: -len(suffix)]
                  for p in glob.glob(os.path.join(directory, "*" + suffix)))


# ---------------------------------------------------------------------------
# (a) generated code is in sync with the sources


def test_sources_and_modules_match_expected_set():
    assert _stems(PROTO_DIR, ".proto") == EXPECTED_MODULES
    assert _stems(CORE_DIR, "_pb2.py") == EXPECTED_MODULES


#: The generator of the shipped modules: grpcio-tools 1.64 (protoc for protobuf 5.26) writes
#: code without a runtime-version check, which runs on protobuf 5, 6 and 7 (the `dev` extra
#: pins it; .ci/run installs it and runs these tests).
GENERATOR = "1.64."
GENCODE_HEADER = "# Protobuf Python Version: 5.26.1\n"


def _serialized_descriptor(path):
    """The FileDescriptorProto bytes a generated module registers (read, never executed)."""
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile"):
            return ast.literal_eval(node.args[0])
    raise AssertionError(f"{path}: no AddSerializedFile call")


def test_shipped_code_has_no_runtime_version_check():
    for stem in EXPECTED_MODULES:
        text = open(os.path.join(CORE_DIR, stem + "_pb2.py")).read()
        assert GENCODE_HEADER in text, stem
        assert "_runtime_version" not in text, stem


def test_regenerated_code_matches_shipped(tmp_path):
    pytest.importorskip("grpc_tools", reason="regenerating needs the dev extra: pip install -e '.[dev]'")
    subprocess.run(
        [sys.executable, os.path.join(REPO, "protos", "generate.py"),
         "--out", str(tmp_path)],
        check=True, capture_output=True,
    )
    gen_dir = tmp_path / "graphfront" / "core"
    generated = _stems(str(gen_dir), "_pb2.py")
    shipped = _stems(CORE_DIR, "_pb2.py")
    # every source produces a shipped module, and no shipped module is orphaned
    assert generated == shipped
    same_generator = version("grpcio-tools").startswith(GENERATOR)
    for stem in generated:
        name = stem + "_pb2.py"
        if same_generator:  # the pinned generator reproduces the files byte for byte
            assert filecmp.cmp(str(gen_dir / name), os.path.join(CORE_DIR, name),
                               shallow=False), name + " is stale; run protos/generate.py"
        else:  # another protoc writes other code, but the same schema
            new = descriptor_pb2.FileDescriptorProto.FromString(_serialized_descriptor(gen_dir / name))
            old = descriptor_pb2.FileDescriptorProto.FromString(
                _serialized_descriptor(os.path.join(CORE_DIR, name)))
            assert new == old, name + " is stale; run protos/generate.py"


@pytest.mark.parametrize("stem", EXPECTED_MODULES)
def test_module_imports_with_oneflow_package(stem):
    mod = importlib.import_module("graphfront.core.%s_pb2" % stem)
    assert mod.DESCRIPTOR.package == "oneflow"
    assert mod.DESCRIPTOR.name == "graphfront/core/%s.proto" % stem
    with open(os.path.join(PROTO_DIR, stem + ".proto")) as f:
        source = f.read()
    assert 'syntax = "proto2";' in source
    assert "package oneflow;" in source
    # proto2 default (one tag per element), except OneFlow's record.proto, whose numeric
    # lists are declared [packed = true] (the wire layout of OFRecord files)
    assert ("packed" in source) == (stem == "record")


#: OneFlow v0.6.0's source paths of these protos (oneflow/core/<dir>/<name>.proto), the names
#: OneFlow programs import them by (``from oneflow.core.job import job_conf_pb2``).
ONEFLOW_PATHS = [
    "common/data_type", "common/shape",
    "framework/user_op_attr", "framework/user_op_conf", "framework/variable_meta_info",
    "job/initializer_conf", "job/job", "job/job_conf", "job/job_set", "job/learning_rate_schedule_conf",
    "job/placement", "job/regularizer_conf", "job/resource", "job/sbp_parallel", "job/scope",
    "operator/interface_blob_conf", "operator/op_conf",
    "record/record",
    "register/blob_desc", "register/logical_blob_id",
    "serving/saved_model",
]


def test_oneflow_layout_names_every_module_once():
    assert sorted(p.split("/")[1] for p in ONEFLOW_PATHS) == EXPECTED_MODULES


@pytest.mark.parametrize("path", ONEFLOW_PATHS)
def test_oneflow_layout_path_is_the_flat_module(path):
    directory, stem = path.split("/")
    flat = importlib.import_module("graphfront.core.%s_pb2" % stem)
    by_path = importlib.import_module("graphfront.core.%s.%s_pb2" % (directory, stem))
    assert by_path is flat
    package = importlib.import_module("graphfront.core." + directory)
    assert getattr(package, stem + "_pb2") is flat


def test_oneflow_layout_in_a_fresh_interpreter():
    # imported by OneFlow's path first (before graphfront is loaded), in both statement forms;
    # each descriptor file exists once in the pool, under its flat name
    code = (
        "import sys\n"
        "import graphfront.core.job.job_conf_pb2 as a\n"
        "from graphfront.core.operator import op_conf_pb2 as b\n"
        "from graphfront.core import job_conf_pb2, op_conf_pb2\n"
        "assert a is job_conf_pb2 and b is op_conf_pb2\n"
        "assert a.JobConfigProto.DESCRIPTOR is job_conf_pb2.JobConfigProto.DESCRIPTOR\n"
        "mods = {id(m) for n, m in sys.modules.items() if n.startswith('graphfront.core.')"
        " and n.endswith('_pb2')}\n"
        "print(len(mods))\n"
        "try:\n"
        "    import graphfront.core.job.no_such_pb2\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == [str(len(EXPECTED_MODULES)), "graphfront.core.job.no_such_pb2"]


# ---------------------------------------------------------------------------
# (b) spot checks against OneFlow v0.6.0 oneflow/core/**/*.proto field numbers and defaults


def _field(msg_cls, name):
    return msg_cls.DESCRIPTOR.fields_by_name[name]


def test_operator_conf_numbers():
    OperatorConf = op_conf_pb2.OperatorConf
    expected = {
        "name": 1, "device_tag": 4, "ctrl_in_op_name": 7, "scope_symbol_id": 8,
        "user_conf": 199, "variable_conf": 122, "input_conf": 137,
        "return_conf": 146, "output_conf": 138, "identity_conf": 290,
        "learning_rate_schedule_conf": 298, "constant_like_conf": 339,
        "shape_elem_cnt_conf": 132, "total_loss_instance_num_conf": 131,
        "broadcast_to_compatible_with_conf": 525,
    }
    for name, number in expected.items():
        assert _field(OperatorConf, name).number == number, name
    oneof = OperatorConf.DESCRIPTOR.oneofs_by_name["op_type"]
    assert _field(OperatorConf, "user_conf") in oneof.fields
    assert len(oneof.fields) == 30
    assert OperatorConf().device_tag == "invalid_device"
    assert is_required(_field(OperatorConf, "name"))
    assert is_repeated(_field(OperatorConf, "ctrl_in_op_name"))


def test_attr_value_oneof_matches_attr_type():
    AttrValue = user_op_attr_pb2.AttrValue
    AttrType = user_op_attr_pb2.AttrType
    oneof = AttrValue.DESCRIPTOR.oneofs_by_name["value"]
    numbers = sorted(f.number for f in oneof.fields)
    assert numbers == list(range(1, 15))
    for f in oneof.fields:
        # at_list_int32 <-> kAtListInt32, etc.
        camel = "".join(part.capitalize() for part in f.name[3:].split("_"))
        assert AttrType.Value("kAt" + camel) == f.number, f.name
    for nested in ("ListInt32", "ListInt64", "ListFloat", "ListDataType",
                   "ListShape", "ListString"):
        val = AttrValue.DESCRIPTOR.nested_types_by_name[nested].fields_by_name["val"]
        assert val.number == 1 and is_repeated(val)


def test_data_type_values():
    DataType = data_type_pb2.DataType
    assert DataType.Value("kInvalidDataType") == 0
    assert DataType.Value("kFloat") == 2
    assert DataType.Value("kInt64") == 6
    assert DataType.Value("kBool") == 12
    assert DataType.Value("kComplex128") == 21
    assert len(DataType.keys()) == 22
    assert data_type_pb2.OptInt64().value == -1


def test_misc_numbers_and_defaults():
    VMI = variable_meta_info_pb2.VariableMetaInfo
    assert _field(VMI, "shape").number == 2
    assert _field(VMI, "data_type").number == 3
    assert 1 not in VMI.DESCRIPTOR.fields_by_number

    JCP = job_conf_pb2.JobConfigProto
    assert _field(JCP, "signature").number == 4000
    assert _field(JCP, "flag_name2flag_value").number == 2000
    assert JCP().default_data_type == data_type_pb2.kFloat
    assert JCP().concurrency_width == 128
    assert set(JCP.DESCRIPTOR.oneofs_by_name) == {"job_type", "default_initialize_conf"}

    assert initializer_conf_pb2.TruncatedNormalInitializerConf().std == pytest.approx(0.05)
    assert initializer_conf_pb2.RandomNormalInitializerConf().std == 1.0
    assert op_conf_pb2.VariableOpConf().model_name == "weight"
    assert op_conf_pb2.VariableOpConf().trainable is True
    assert 8 not in op_conf_pb2.VariableOpConf.DESCRIPTOR.fields_by_number
    assert op_conf_pb2.ShapeElemCntOpConf().data_type == data_type_pb2.kInt32
    assert job_conf_pb2.TrainConf().loss_scale_factor == 1.0
    assert job_conf_pb2.AdamModelUpdateConf().do_bias_correction is True
    assert _field(job_conf_pb2.OptimizerConf, "adam_conf").number == 1004

    R = resource_pb2.Resource
    assert [_field(R, n).number for n in ("machine_num", "gpu_device_num", "cpu_device_num",
                                          "reserved_device_mem_mbyte", "collective_boxing_conf")] == [1, 4, 5, 13, 19]
    assert R().comm_net_worker_num == 4 and R().max_mdsave_worker_num == 64
    assert resource_pb2.CollectiveBoxingConf().nccl_fusion_threshold_mb == 16
    assert _field(resource_pb2.CollectiveBoxingConf, "nccl_fusion_all_reduce_use_buffer").number == 108
    assert _field(job_set_pb2.JobSet, "inter_job_reuse_mem_strategy").number == 5
    assert _field(job_set_pb2.InterJobReuseMemStrategy, "custom_parallelism").number == 3


def test_unknown_fields_survive_round_trip():
    # A trimmed-away op_type member (case_conf = 291) must be preserved.
    op = op_conf_pb2.OperatorConf(name="x")
    raw = op.SerializeToString() + bytes([0x9A, 0x12, 0x00])  # field 291, LEN, 0 bytes
    parsed = op_conf_pb2.OperatorConf.FromString(raw)
    assert parsed.SerializeToString() == raw


# ---------------------------------------------------------------------------
# (c) text-format round trip of a small job


def _small_job():
    job = job_pb2.Job()
    job.job_conf.job_name = "train_job"
    job.job_conf.predict_conf.SetInParent()
    op = job.net.op.add()
    op.name = "Conv_0"
    op.device_tag = "gpu"
    op.scope_symbol_id = 4
    conf = op.user_conf
    conf.op_type_name = "conv2d"
    conf.input["in"].s.append("Input_0/out")
    conf.input["weight"].s.append("Conv_0-weight/out")
    conf.output["out"].s.append("Conv_0/out_0")
    conf.input_order.extend(["in", "weight"])
    conf.output_order.append("out")
    conf.attr["kernel_size"].at_list_int32.val.extend([3, 3])
    conf.attr["data_format"].at_string = "channels_first"
    conf.attr["alpha"].at_double = 1
    conf.attr["dtype"].at_data_type = data_type_pb2.kInt32
    conf.attr["shape"].at_shape.dim.extend([-1, 784])
    conf.attr["empty"].at_list_int64.SetInParent()

    var = job.net.op.add()
    var.name = "Conv_0-weight"
    var.variable_conf.out = "out"
    var.variable_conf.shape.dim.extend([8, 1, 3, 3])
    var.variable_conf.data_type = data_type_pb2.kFloat
    var.variable_conf.initializer.truncated_normal_conf.std = 0.1
    return job


def test_text_format_round_trip():
    job = _small_job()
    assert job.IsInitialized()
    text = text_format.MessageToString(job, as_one_line=True)
    assert 'op_type_name: "conv2d"' in text
    assert 'attr { key: "kernel_size" value { at_list_int32 { val: 3 val: 3 } } }' in text
    assert 'value { at_shape { dim: -1 dim: 784 } }' in text
    assert 'value { at_data_type: kInt32 }' in text
    # C++ prints "1", the Python printer "1.0"; both parse back the same.
    assert re.search(r'key: "alpha" value \{ at_double: 1(\.0)? \}', text)
    assert 'value { at_list_int64 { } }' in text
    assert 'input { key: "in" value { s: "Input_0/out" } }' in text
    assert text.index('key: "alpha"') < text.index('key: "shape"')  # maps sorted by key

    back = text_format.Parse(text, job_pb2.Job())
    assert back == job
    multi = text_format.MessageToString(job)
    assert text_format.Parse(multi, job_pb2.Job()) == job
    assert job_pb2.Job.FromString(job.SerializeToString()) == job
    assert back.net.op[0].user_conf.attr["empty"].WhichOneof("value") == "at_list_int64"
    assert back.net.op[1].WhichOneof("op_type") == "variable_conf"


def test_repeated_scalars_are_unpacked():
    shape = job_pb2.Job().job_conf.signature.inputs["x"].blob_conf.shape
    shape.dim.extend([2, 3])
    # one tag (field 1, varint) per element rather than a packed run
    assert shape.SerializeToString() == b"\x08\x02\x08\x03"


def test_variable_meta_info_text():
    meta = variable_meta_info_pb2.VariableMetaInfo()
    meta.shape.dim.extend([10, 5])
    meta.data_type = data_type_pb2.kFloat
    assert text_format.MessageToString(meta) == (
        "shape {\n  dim: 10\n  dim: 5\n}\ndata_type: kFloat\n")
