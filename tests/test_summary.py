"""flow.summary writes TensorBoard event files that TensorBoard's own loader reads back."""
import glob
import io

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import graphfront as flow
from graphfront import typing as tp


def _tag(text):
    return np.frombuffer(text.encode(), np.int8).copy()


@pytest.fixture
def logdir(tmp_path):
    flow.clear_default_session()
    yield str(tmp_path / "logs")
    flow.summary.close_summary_writer()
    flow.clear_default_session()


def test_scalar_histogram_image_written_and_loaded_back(logdir):
    @flow.global_function()
    def create_job() -> None:
        flow.summary.create_summary_writer(logdir)

    @flow.global_function()
    def write_job(value: tp.Numpy.Placeholder((1,), dtype=flow.float),
                  hist: tp.Numpy.Placeholder((50,), dtype=flow.float),
                  img: tp.Numpy.Placeholder((2, 6, 5, 3), dtype=flow.uint8),
                  step: tp.Numpy.Placeholder((1,), dtype=flow.int64),
                  loss_tag: tp.Numpy.Placeholder((4,), dtype=flow.int8),
                  hist_tag: tp.Numpy.Placeholder((7,), dtype=flow.int8),
                  img_tag: tp.Numpy.Placeholder((6,), dtype=flow.int8)) -> None:
        flow.summary.scalar(value, step, loss_tag)
        flow.summary.histogram(hist, step, hist_tag)
        flow.summary.image(img, step, img_tag)

    @flow.global_function()
    def flush_job() -> None:
        flow.summary.flush_summary_writer()

    rng = np.random.default_rng(0)
    hists, images = [], []
    create_job()
    for step in range(3):
        hists.append(rng.standard_normal(50).astype(np.float32))
        images.append(rng.integers(0, 256, (2, 6, 5, 3), dtype=np.uint8))
        write_job(np.array([0.5 * step + 0.25], np.float32), hists[-1], images[-1], np.array([step], np.int64),
                  _tag("loss"), _tag("weights"), _tag("images"))
    flush_job()

    files = glob.glob(f"{logdir}/events.out.tfevents.*")
    assert len(files) == 1
    acc = EventAccumulator(logdir, size_guidance={"images": 0, "histograms": 0, "scalars": 0})
    acc.Reload()
    scalars = acc.Scalars("loss")
    assert [s.step for s in scalars] == [0, 1, 2]
    np.testing.assert_allclose([s.value for s in scalars], [0.25, 0.75, 1.25])
    histograms = acc.Histograms("weights")
    assert [h.step for h in histograms] == [0, 1, 2]
    for h, values in zip(histograms, hists):
        assert h.histogram_value.num == 50
        np.testing.assert_allclose([h.histogram_value.min, h.histogram_value.max, h.histogram_value.sum],
                                   [values.min(), values.max(), values.astype(np.float64).sum()], rtol=1e-5)
    assert sorted(acc.Tags()["images"]) == ["images/image/0", "images/image/1"]
    for i in range(2):
        written = acc.Images(f"images/image/{i}")
        assert [im.step for im in written] == [0, 1, 2]
        for im, batch in zip(written, images):
            pixels = np.asarray(Image.open(io.BytesIO(im.encoded_image_string)))
            np.testing.assert_array_equal(pixels, batch[i])   # PNG: lossless


def test_summary_pb_writes_a_serialized_summary(logdir):
    from tensorboard.compat.proto.summary_pb2 import Summary
    raw = Summary(value=[Summary.Value(tag="acc", simple_value=0.875)]).SerializeToString()

    @flow.global_function()
    def pb_job(value: tp.Numpy.Placeholder((len(raw),), dtype=flow.int8),
               step: tp.Numpy.Placeholder((1,), dtype=flow.int64)) -> None:
        flow.summary.create_summary_writer(logdir)
        flow.summary.pb(value, step)
        flow.summary.flush_summary_writer()

    pb_job(np.frombuffer(raw, np.int8).copy(), np.array([7], np.int64))
    acc = EventAccumulator(logdir)
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("acc")] == [(7, 0.875)]


def test_writing_before_a_writer_exists_is_an_error_naming_the_op(logdir):
    @flow.global_function()
    def write_job(value: tp.Numpy.Placeholder((1,), dtype=flow.float),
                  step: tp.Numpy.Placeholder((1,), dtype=flow.int64),
                  tag: tp.Numpy.Placeholder((4,), dtype=flow.int8)) -> None:
        flow.summary.scalar(value, step, tag, name="my_scalar")

    with pytest.raises(Exception, match="my_scalar.*no summary writer"):
        write_job(np.ones(1, np.float32), np.zeros(1, np.int64), _tag("loss"))


def test_bad_step_dtype_is_a_build_error(logdir):
    @flow.global_function()
    def write_job(value: tp.Numpy.Placeholder((1,), dtype=flow.float),
                  step: tp.Numpy.Placeholder((1,), dtype=flow.int32),
                  tag: tp.Numpy.Placeholder((4,), dtype=flow.int8)) -> None:
        flow.summary.scalar(value, step, tag)

    with pytest.raises(flow.JobBuildError, match="input 'step' must be int64, received int32"):
        write_job(np.ones(1, np.float32), np.zeros(1, np.int32), _tag("loss"))


def _pb_job(logdir, size):
    @flow.global_function()
    def pb_job(value: tp.ListNumpy.Placeholder((size,), dtype=flow.int8),
               step: tp.ListNumpy.Placeholder((1,), dtype=flow.int64)) -> None:
        flow.summary.create_summary_writer(logdir)
        flow.summary.pb(value, step)
        flow.summary.flush_summary_writer()
    return lambda text, step: pb_job([np.frombuffer(text.encode(), np.int8).copy()], [np.array([step], np.int64)])


def test_summary_pb_parses_the_text_format_and_text_is_read_by_the_text_plugin(logdir):
    from google.protobuf import text_format
    from tensorboard.util import tensor_util
    write = _pb_job(logdir, 2000)
    write(text_format.MessageToString(flow.summary.text(["vgg16", "résnet50"], tag="models")), 3)
    write(text_format.MessageToString(flow.summary.text(("a",))), 4)
    acc = EventAccumulator(logdir, size_guidance={"tensors": 0})
    acc.Reload()
    assert acc.SummaryMetadata("models").plugin_data.plugin_name == "text"
    [event] = acc.Tensors("models")
    assert event.step == 3
    assert [s.decode() for s in tensor_util.make_ndarray(event.tensor_proto)] == ["vgg16", "résnet50"]
    assert [tensor_util.make_ndarray(e.tensor_proto).tolist() for e in acc.Tensors("text")] == [[b"a"]]


def test_summary_pb_rejects_bytes_that_are_no_summary(logdir):
    write = _pb_job(logdir, 100)
    with pytest.raises(Exception, match="neither a Summary proto's text format"):
        write("value { tag: ", 0)


def _test_hparams():
    s = flow.summary
    return {s.HParam("learning_rate", s.RealRange(0.01, 0.1)): 0.02,
            s.HParam("dense_layers", s.IntegerRange(2, 7)): np.int64(5),
            s.HParam("optimizer", s.ValueSet(["sgd", "adam"])): "adam",
            s.HParam("magic", s.ValueSet([False, True])): True,
            s.Metric("loss", float): 0.25,
            "dropout": 0.6}


def test_hparams_are_read_by_tensorboards_hparams_plugin(logdir):
    from google.protobuf import text_format
    from tensorboard.plugins.hparams import api_pb2
    from tensorboard.plugins.hparams import metadata as hp_metadata
    _pb_job(logdir, 3000)(text_format.MessageToString(flow.summary.hparams(_test_hparams())), 1)
    acc = EventAccumulator(logdir, size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    start = hp_metadata.parse_session_start_info_plugin_data(
        acc.SummaryMetadata("_hparams_/session_start_info").plugin_data.content)
    assert {k: v.WhichOneof("kind") for k, v in start.hparams.items()} == {
        "learning_rate": "number_value", "dense_layers": "number_value", "optimizer": "string_value",
        "magic": "bool_value", "dropout": "number_value"}
    assert (start.hparams["learning_rate"].number_value, start.hparams["dense_layers"].number_value,
            start.hparams["optimizer"].string_value, start.hparams["magic"].bool_value,
            start.hparams["dropout"].number_value) == (0.02, 5, "adam", True, 0.6)
    experiment = hp_metadata.parse_experiment_plugin_data(
        acc.SummaryMetadata("_hparams_/experiment").plugin_data.content)
    infos = {h.name: h for h in experiment.hparam_infos}
    assert (infos["learning_rate"].domain_interval.min_value, infos["learning_rate"].domain_interval.max_value,
            infos["learning_rate"].type) == (0.01, 0.1, api_pb2.DATA_TYPE_FLOAT64)
    assert (infos["dense_layers"].domain_interval.min_value, infos["dense_layers"].domain_interval.max_value) == (2, 7)
    assert [v.string_value for v in infos["optimizer"].domain_discrete.values] == ["adam", "sgd"]
    assert not infos["dropout"].HasField("domain_discrete") and not infos["dropout"].HasField("domain_interval")
    assert [m.name.tag for m in experiment.metric_infos] == ["loss"]
    assert [(s.step, s.value) for s in acc.Scalars("loss")] == [(1, 0.25)]


@pytest.mark.parametrize("build, error, match", [
    (lambda s: s.RealRange(1, 2), TypeError, "RealRange: argument 'min_value' expects float, received int 1"),
    (lambda s: s.IntegerRange(3, 2), ValueError, "IntegerRange: min_value 3 is greater than max_value 2"),
    (lambda s: s.ValueSet(["a", 1]), TypeError, "ValueSet: value 1 is not of type str"),
    (lambda s: s.ValueSet([None]), ValueError, "ValueSet: dtype must be int, float, bool or str"),
    (lambda s: s.HParam("x", [1, 2]), ValueError, "HParam 'x': dtype must be an IntegerRange"),
    (lambda s: s.Metric("m", str), ValueError, "Metric 'm': dtype must be int or float"),
    (lambda s: s.hparams({"x": [1]}), TypeError, "hyperparameter 'x' expects a bool, int, float or str"),
    (lambda s: s.hparams({s.Metric("m"): "high"}), TypeError, "metric 'm' expects an int or float"),
    (lambda s: s.hparams({"x": 1, s.HParam("x"): 2}), ValueError, "the name 'x' appears twice"),
    (lambda s: s.text("not a list"), TypeError, "argument 'text' expects a non-empty list of str"),
])
def test_summary_helpers_reject_bad_arguments(build, error, match):
    with pytest.raises(error, match=match):
        build(flow.summary)


def _projector_plugin_config(logdir):
    """The ProjectorConfig TensorBoard's projector plugin finds for ``logdir``'s root run."""
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.projector import projector_plugin
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    plugin = projector_plugin.ProjectorPlugin(base_plugin.TBContext(
        logdir=logdir, multiplexer=multiplexer,
        data_provider=data_provider.MultiplexerDataProvider(multiplexer, logdir)))
    plugin._update_configs()
    return plugin._configs["."]


def test_projector_writes_what_tensorboards_projector_reads(tmp_path):
    rng = np.random.default_rng(0)
    value = rng.standard_normal((6, 2, 3)).astype(np.float32)
    labels = np.arange(6) * 10
    images = rng.integers(0, 256, (6, 4, 5), dtype=np.uint8)
    projector = flow.summary.Projector(str(tmp_path))
    projector.create_embedding_projector()
    projector.create_exception_projector()
    with pytest.raises(OSError, match="only one embedding projector"):
        projector.create_embedding_projector()
    projector.embedding_projector(value=value + 1, label=labels, tag="emb", step=0)   # replaced below
    projector.embedding_projector(value=value, label=labels, tag="emb", step=1, sample_name="s",
                                  sample_type="image", x=images)
    projector.exception_projector(value=value[:, 0], tag="exc", step=1)

    emb, exc = _projector_plugin_config(str(tmp_path)).embeddings
    assert (emb.tensor_name, list(emb.tensor_shape), exc.tensor_name, list(exc.tensor_shape)) == (
        "emb", [6, 6], "exc", [6, 3])
    np.testing.assert_allclose(np.loadtxt(tmp_path / emb.tensor_path, delimiter="\t"), value.reshape(6, 6),
                               rtol=1e-7)
    np.testing.assert_allclose(np.loadtxt(tmp_path / exc.tensor_path, delimiter="\t"), value[:, 0], rtol=1e-7)
    assert (tmp_path / emb.metadata_path).read_text().split() == [str(v) for v in labels]
    assert not exc.metadata_path and not exc.sprite.image_path
    sprite = np.asarray(Image.open(tmp_path / emb.sprite.image_path))
    assert list(emb.sprite.single_image_dim) == [5, 4] and sprite.shape == (3 * 4, 3 * 5)
    for i in range(6):   # row-major on a 3 x 3 grid
        r, c = divmod(i, 3)
        np.testing.assert_array_equal(sprite[r * 4:(r + 1) * 4, c * 5:(c + 1) * 5], images[i])


def test_projector_leaves_out_labels_that_do_not_match_the_rows_with_a_warning(tmp_path):
    from google.protobuf import text_format
    from tensorboard.plugins.projector import ProjectorConfig
    projector = flow.summary.Projector(str(tmp_path))
    with pytest.raises(RuntimeError, match="call create_embedding_projector"):
        projector.embedding_projector(value=np.ones((3, 2)))
    projector.create_embedding_projector()
    with pytest.warns(UserWarning, match="'label' has 2 entries for 3 rows of 'value'"):
        projector.embedding_projector(value=np.ones((3, 2)), label=np.arange(2))
    [emb] = text_format.Parse((tmp_path / "projector_config.pbtxt").read_text(), ProjectorConfig()).embeddings
    assert (emb.tensor_name, emb.metadata_path) == ("embedding_projector", "")
    with pytest.raises(NotImplementedError, match="sample_type must be image, audio or text, received 'video'"):
        projector.embedding_projector(value=np.ones((3, 2)), sample_type="video", x=np.ones((3, 2, 2)))


def test_graph_writes_the_sessions_jobs_as_one_tensorboard_graph(tmp_path):
    flow.clear_default_session()

    @flow.global_function()
    def double(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.math.multiply(x, 2.0, name="twice")

    @flow.global_function()
    def relu(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        return flow.math.relu(x, name="act")

    double(np.ones((2, 3), np.float32))
    relu(np.ones(4, np.float32))
    graph = flow.summary.Graph(str(tmp_path))
    graph.write_structure_graph()
    with pytest.raises(OSError, match="only one structure graph"):
        graph.write_structure_graph()
    assert graph.structure_graph_filename.startswith(str(tmp_path / "graph"))
    acc = EventAccumulator(str(tmp_path / "graph"))
    acc.Reload()
    nodes = {n.name: n for n in acc.Graph().node}
    assert {name.split("/")[0] for name in nodes} == {"double", "relu"}
    [twice] = [n for name, n in nodes.items() if name.startswith("double/") and name.endswith("/twice")]
    [act] = [n for name, n in nodes.items() if name.startswith("relu/") and name.endswith("/act")]
    assert all(i in nodes and i.startswith("double/") for i in twice.input) and twice.input
    assert act.op == "relu" and all(i.startswith("relu/") for i in act.input)
    flow.clear_default_session()
