"""Generated protobuf modules (package ``oneflow``); sources are in protos/.

The modules live flat here (``graphfront.core.job_conf_pb2``). OneFlow programs import the
same messages by OneFlow's source layout (``oneflow/core/job/job_conf.proto`` ->
``...core.job.job_conf_pb2``), so each module is also registered under that name:
``graphfront.core.job.job_conf_pb2`` *is* ``graphfront.core.job_conf_pb2`` (the same module
object, one set of descriptors). The directory names are those of OneFlow's source tree.
"""
import importlib
import sys
import types

#: OneFlow source directory (under ``oneflow/core/``) -> the .proto stems it holds.
ONEFLOW_LAYOUT = {
    "common": ("data_type", "shape"),
    "framework": ("user_op_attr", "user_op_conf", "variable_meta_info"),
    "job": ("initializer_conf", "job", "job_conf", "job_set", "learning_rate_schedule_conf",
            "placement", "regularizer_conf", "resource", "sbp_parallel", "scope"),
    "operator": ("interface_blob_conf", "op_conf"),
    "record": ("record",),
    "register": ("blob_desc", "logical_blob_id"),
    "serving": ("saved_model",),
}


def _register_oneflow_layout():
    for directory, stems in ONEFLOW_LAYOUT.items():
        package_name = "%s.%s" % (__name__, directory)
        package = types.ModuleType(package_name, "OneFlow's oneflow/core/%s/ protobuf modules "
                                   "(aliases of graphfront.core.<name>_pb2)." % directory)
        package.__path__ = []  # a package: an unknown name fails as "No module named ..."
        package.__package__ = package_name
        for stem in stems:
            module = importlib.import_module("%s.%s_pb2" % (__name__, stem))
            setattr(package, stem + "_pb2", module)
            sys.modules["%s.%s_pb2" % (package_name, stem)] = module
        sys.modules[package_name] = package
        globals()[directory] = package


_register_oneflow_layout()
