"""``python -m graphfront``: report the installation, describe job files and saved models.

    python -m graphfront --doctor                  # versions, devices, CUDA, data found
    python -m graphfront info job.pb               # a Job file (binary or text proto)
    python -m graphfront info runs/lenet/model     # a saved model (latest version) ...
    python -m graphfront info runs/lenet/model/1   # ... or one version directory
    python -m graphfront info job.pb --render job.svg

``info`` only reads and infers: job files through :func:`graphfront.framework.job_io.load_job`,
saved models through ``flow.serving.InferenceSession`` on the CPU (its shape inference gives
every output's shape and dtype; nothing runs), so it also describes files from another
machine. Each job's variables are summed up as a parameter count and a size in bytes.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
from importlib import metadata

import numpy as np
from tabulate import tabulate

from graphfront.core import data_type_pb2
from graphfront.framework import dtypes
from graphfront.framework import job_builder as jb
import graphfront
from graphfront import data
from graphfront import serving
from graphfront.core import job_pb2
from graphfront.framework import job_io
from graphfront.framework.job_picture import render_job
from graphfront.framework.served_jobs import ModelVersionPolicy, pick_version, read_saved_model

#: Distributions reported by ``--doctor``: required ones, then the optional extras.
REQUIRED = ("numpy", "torch", "protobuf", "tabulate", "ml_dtypes", "psutil")
OPTIONAL = ("tqdm", "matplotlib", "graphviz", "mlxtend", "pillow", "onnx", "onnxruntime", "jax", "flatbuffers",
            "xxhash", "pytest", "grpcio-tools", "tensorboard")


#: Distributions whose import name is not their name with ``-`` as ``_``.
MODULES = {"protobuf": "google.protobuf", "pillow": "PIL", "grpcio-tools": "grpc_tools"}


def _version(dist):
    """The version of ``dist`` as Python runs it: the ``__version__`` of its module when that
    module is imported and has one (torch's carries its build, e.g. ``2.11.0+cu130``, which
    the distribution's metadata leaves out), else the installed distribution's metadata;
    None when neither is there. (A module not imported yet is not imported for this.)"""
    module = sys.modules.get(MODULES.get(dist, dist.replace("-", "_")))
    version = getattr(module, "__version__", None)
    if isinstance(version, str) and version:
        return version
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _dtype(code) -> str:
    return data_type_pb2.DataType.Name(code)


# ------------------------------------------------------------------ doctor


def doctor_rows() -> list:
    """``(section, item, value)`` rows of the ``--doctor`` report."""
    import torch
    from google.protobuf.internal import api_implementation

    rows = [("graphfront", "version", graphfront.__version__),
            ("graphfront", "location", os.path.dirname(graphfront.__file__)),
            ("python", "version", f"{platform.python_version()} ({sys.executable})"),
            ("python", "platform", platform.platform())]
    for dist in REQUIRED + OPTIONAL:
        v = _version(dist)
        section = "required" if dist in REQUIRED else "optional"
        rows.append((section, dist, v or "not installed"))
    rows.append(("required", "protobuf backend", api_implementation.Type()))
    rows.append(("tools", "Graphviz dot", shutil.which("dot") or "not found (apt-get install graphviz)"))
    rows.append(("devices", "cpu", f"{os.cpu_count()} cores, torch uses {torch.get_num_threads()} threads"))
    rows.append(("devices", "torch CUDA build", torch.version.cuda or "none (CPU-only torch)"))
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            rows.append(("devices", f"cuda:{i}", f"{p.name}, {p.total_memory / 2**30:.1f} GiB, "
                                                 f"compute capability {p.major}.{p.minor}"))
        rows.append(("devices", "cuDNN", str(torch.backends.cudnn.version())))
    else:
        rows.append(("devices", "CUDA available", "no: jobs run on the CPU"))
    rows.extend(_data_rows())
    return rows


def _data_rows() -> list:

    rows = []
    for dataset in ("mnist", "fashion"):
        try:
            (train, test), info = data.find_dataset(dataset)
        except (FileNotFoundError, ValueError) as e:
            rows.append(("data", dataset, "not found: " + str(e).removeprefix("graphfront.data: ")))
            continue
        rows.append(("data", dataset, f"{info} ({len(train[1])} train / {len(test[1])} test samples)"))
    return rows


def doctor() -> str:
    """The ``--doctor`` report as text."""
    return tabulate(doctor_rows(), tablefmt="plain")


# ------------------------------------------------------------------ info


def _blob(job, lbn) -> tuple:
    descs = job.helper.lbn2logical_blob_desc
    if lbn in descs:
        return tuple(descs[lbn].shape.dim), _dtype(descs[lbn].data_type)
    return "", ""


def job_tables(job) -> str:
    """Ops, inputs, outputs and variables of a Job, as text tables."""
    conf = job.job_conf
    kind = conf.WhichOneof("job_type")
    ops = [(i, op.name, jb.op_type_name(op), "\n".join(lbn for _, _, lbn in jb.op_inputs(op)),
            "\n".join(lbn for _, _, lbn in jb.op_outputs(op))) for i, op in enumerate(job.net.op)]
    inputs, outputs, variables = [], [], []
    for op in job.net.op:
        which = jb.op_kind(op)
        if which == "input_conf":
            bc = op.input_conf.blob_conf
            inputs.append((op.name, tuple(bc.shape.dim), _dtype(bc.data_type)))
        elif which == "return_conf":
            src = getattr(op.return_conf, "in")
            outputs.append((op.name, src) + _blob(job, src))
        elif which == "variable_conf":
            vc = op.variable_conf
            init = vc.initializer.WhichOneof("type") if vc.HasField("initializer") else ""
            variables.append((op.name, tuple(vc.shape.dim), vc.data_type, init or "",
                              "yes" if vc.trainable else "no"))
    parts = [f"job '{conf.job_name}'{f' ({kind})' if kind else ''}: {len(job.net.op)} ops, {len(inputs)} inputs, "
             f"{len(outputs)} outputs, {len(variables)} variables ({_parameters(variables)})",
             "", "inputs:", tabulate(inputs, headers=("op", "shape", "dtype")) if inputs else "  none",
             "", "outputs:", tabulate(outputs, headers=("op", "blob", "shape", "dtype")) if outputs else "  none",
             "", "variables:",
             tabulate([(n, shape, _dtype(code), *rest) for n, shape, code, *rest in variables],
                      headers=("name", "shape", "dtype", "initializer", "trainable"))
             if variables else "  none",
             "", "ops:", tabulate(ops, headers=("#", "op", "type", "inputs", "outputs"))]
    return "\n".join(parts)


def _signature_rows(graph, output_descs) -> list:
    """Rows of a graph's signatures; ``output_descs`` maps an output lbn to (shape, dtype name)."""
    rows = []
    for sig_name, sig in sorted(graph.signatures.items()):
        for name, d in sorted(sig.inputs.items()):
            rows.append((sig_name, "input", name, f"{d.lbi.op_name}/{d.lbi.blob_name}",
                         tuple(d.blob_conf.shape.dim), _dtype(d.blob_conf.data_type)))
        for name, d in sorted(sig.outputs.items()):
            lbn = f"{d.lbi.op_name}/{d.lbi.blob_name}"
            rows.append((sig_name, "output", name, lbn) + output_descs.get(lbn, ("", "")))
    return rows


def _output_descs(version_dir, graph_names) -> dict:
    """``{graph name: {lbn: (shape, dtype name)}}`` by building the saved model's jobs on the CPU."""
    option = serving.SessionOption()
    option.device_tag = "cpu"
    with serving.InferenceSession(option) as sess:
        sess.load_saved_model(os.path.dirname(version_dir), model_version=int(os.path.basename(version_dir)))
        return {name: {lbn: (tuple(d.shape.dim), _dtype(d.data_type))
                       for lbn, d in sess.job(name).job.helper.lbn2logical_blob_desc.items()}
                for name in graph_names}


def _parameters(variables) -> str:
    """Trainable floating-point elements (the parameters), and the bytes of every variable
    (optimizer state and the train-step counter too)."""
    count = sum(int(np.prod(shape, dtype=np.int64)) for _, shape, code, _, trainable in variables
                if trainable == "yes" and dtypes.from_proto(code).is_floating_point)
    size = sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtypes.from_proto(code).np).itemsize
               for _, shape, code, *_ in variables)
    return f"{count:,} trainable parameters, {size:,} bytes"


def saved_model_tables(path) -> str:
    """Model name, version, signatures and each graph's tables for a saved model directory."""

    path = os.fspath(path)
    version_dir = path
    if not any(os.path.isfile(os.path.join(path, "saved_model" + ext)) for ext in (".pb", ".prototxt")):
        version_dir = os.path.join(path, str(pick_version(path, ModelVersionPolicy.LATEST)))
    model = read_saved_model(version_dir, "saved_model")
    parts = [f"saved model '{model.name}' version {model.version} in {version_dir} "
             f"(variables in {model.checkpoint_dir!r}, default graph {model.default_graph_name!r})"]
    descs = _output_descs(version_dir, sorted(model.graphs))
    for graph_name, graph in sorted(model.graphs.items()):
        parts += ["", f"graph '{graph_name}' signatures (default {graph.default_signature_name!r}):",
                  tabulate(_signature_rows(graph, descs[graph_name]),
                           headers=("signature", "", "name", "blob", "shape", "dtype")),
                  ""]
        job = job_pb2.Job()
        job.job_conf.job_name = graph_name
        job.net.op.extend(graph.op_list)
        parts.append(job_tables(job))
    return "\n".join(parts)


def info(path, render=None) -> str:
    """Describe a Job file or a saved model directory (see module docstring)."""

    path = os.fspath(path)
    if os.path.isdir(path):
        if render:
            raise ValueError("--render draws job files; a saved model holds several graphs")
        return saved_model_tables(path)
    job = job_io.load_job(path)
    text = job_tables(job)
    if render:
        text += f"\n\ndrawn to {render_job(job, render)}"
    return text


# ------------------------------------------------------------------ main


def main(argv=None) -> int:
    """Entry point of ``python -m graphfront``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m graphfront", description=__doc__.splitlines()[0])
    parser.add_argument("--doctor", action="store_true", help="report versions, devices, CUDA and data found")
    parser.add_argument("--version", action="store_true", help="print graphfront's version")
    sub = parser.add_subparsers(dest="command")
    p_info = sub.add_parser("info", help="describe a Job file or a saved model directory")
    p_info.add_argument("path", help="JOB_FILE (binary or text Job proto) or SAVED_MODEL directory")
    p_info.add_argument("--render", metavar="PICTURE", help="also draw a job file with Graphviz (.svg, .png ...)")
    args = parser.parse_args(argv)
    if args.version:
        print(graphfront.__version__)
    elif args.doctor:
        print(doctor())
    elif args.command == "info":
        try:
            print(info(args.path, args.render))
        except (OSError, ValueError) as e:
            print(f"python -m graphfront info: {e}", file=sys.stderr)
            return 1
    else:
        parser.print_help()
    return 0
