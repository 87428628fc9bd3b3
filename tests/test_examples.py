"""The example scripts run end to end (short runs; the README and notes give full-length figures).

Each run writes into its ``--run-dir`` (a temporary directory here): checkpoint, TensorBoard
event files, a loss/accuracy plot; LeNet also a picture of its train job.
"""
import importlib.util
import os
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")

pytestmark = pytest.mark.slow


def _example(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_run_dir(run_dir, graph=False):
    """Checkpoint, plot, and TensorBoard scalars (and, with ``graph``, the train job's graph)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    assert (run_dir / "checkpoint" / "snapshot_done").exists()
    png = (run_dir / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert "train/loss" in acc.Tags()["scalars"] and acc.Tags()["graph"] == graph
    if graph:
        assert "forward/conv1" in {n.name for n in acc.Graph().node}


def test_lenet_train_save_model_and_serve(tmp_path, capsys):
    train = _example("lenet/train.py", "lenet_train_example")
    acc = train.main(["--epochs", "1", "--run-dir", str(tmp_path / "run"),
                      "--save-model", str(tmp_path / "model")])
    assert acc > 0.6
    run = tmp_path / "run"
    _check_run_dir(run, graph=True)
    assert (run / "checkpoint" / "conv1-weight" / "out").stat().st_size == 32 * 1 * 5 * 5 * 4
    if shutil.which("dot"):
        svg = ET.parse(run / "train_job.svg").getroot()
        titles = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")}
        texts = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")}
        assert {"conv1", "conv1-weight"} <= titles
        assert {"variable_conf", "forward", "backward", "optimizer"} <= texts
    else:  # without Graphviz's dot the picture's DOT source is written instead
        assert not (run / "train_job.svg").exists()
        source = (run / "train_job.gv").read_text()
        assert source.startswith("digraph train_job {") and '"conv1-weight" [label="conv1-weight\nvariable_conf' in source
    serve = _example("lenet/serve.py", "lenet_serve_example")
    served = serve.main(["--model-dir", str(tmp_path / "model"), "--device", "cpu"])
    assert served == pytest.approx(acc)
    serve.main(["--model-dir", str(tmp_path / "model"), "--device", "cpu", "--image", "7"])
    assert "test image 7: predicted" in capsys.readouterr().out


def test_lenet_default_run_saves_a_model_that_serve_finds(tmp_path, monkeypatch, capsys):
    """Without --run-dir / --save-model: each run gets runs/lenet/<name>, with its model,
    and serve.py with no arguments serves the newest run's model."""
    monkeypatch.chdir(tmp_path)
    train = _example("lenet/train.py", "lenet_train_default_example")
    acc = train.main(["--epochs", "1", "--run-name", "first"])
    assert (tmp_path / "runs" / "lenet" / "first" / "model" / "1" / "saved_model.pb").exists()
    assert (tmp_path / "runs" / "lenet" / "first" / "checkpoint" / "snapshot_done").exists()
    serve = _example("lenet/serve.py", "lenet_serve_default_example")
    assert serve.main(["--device", "cpu"]) == pytest.approx(acc)
    assert "serving runs/lenet/first/model" in capsys.readouterr().out
    args = train.parse_args([])
    assert args.run_dir.startswith(os.path.join("runs", "lenet", "2")) and args.run_dir != train.parse_args(
        ["--run-name", "x"]).run_dir


def test_mlp_with_adam_cosine_warmup_and_clipping_trains(tmp_path):
    mlp = _example("mlp_adam/train.py", "mlp_adam_example")
    assert mlp.main(["--dataset", "mnist", "--epochs", "2", "--run-dir", str(tmp_path)]) > 0.85
    _check_run_dir(tmp_path)


def test_resnet_with_batch_norm_trains(tmp_path):
    resnet = _example("resnet_bn/train.py", "resnet_bn_example")
    assert resnet.main(["--dataset", "mnist", "--epochs", "3", "--lr", "0.05", "--run-dir", str(tmp_path)]) > 0.5
    _check_run_dir(tmp_path)


def test_lenet_trains_from_ofrecord_shards_read_inside_the_jobs(tmp_path):
    from graphfront.tools import ofrecord as tool
    counts = tool.write_mnist(str(tmp_path / "shards"), "mnist", data_part_num=3)   # the bundled 4,000 + 1,000 digits
    assert counts["train"] >= 4000
    train = _example("lenet/train.py", "lenet_train_ofrecord_example")
    acc = train.main(["--ofrecord", str(tmp_path / "shards"), "--epochs", "1", "--run-dir", str(tmp_path / "run")])
    assert acc > 0.6
    _check_run_dir(tmp_path / "run")



def test_resnet50_trains_from_imagenet_style_ofrecord_shards(tmp_path):
    from PIL import Image
    from graphfront.tools import ofrecord as tool
    rng = np.random.default_rng(0)
    for c in range(3):   # three classes of RGB JPEGs of differing sizes, one colour each
        (tmp_path / "images" / f"class{c}").mkdir(parents=True)
        for i in range(8):
            h, w = rng.integers(40, 80, 2)
            pixels = np.clip(rng.normal(60 + 70 * c, 20, (h, w, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / f"class{c}" / f"{i}.jpg")
    count, classes = tool.write_folder(str(tmp_path / "images"), str(tmp_path / "shards" / "train"), data_part_num=2)
    assert count == 24 and len(classes) == 3
    train = _example("resnet50/train.py", "resnet50_train_example")
    losses = train.main(["--ofrecord", str(tmp_path / "shards"), "--device", "cpu", "--batch_size", "8",
                         "--image_size", "32", "--block_counts", "1,1,1,1", "--width", "0.125", "--num_classes", "3",
                         "--steps", "12", "--learning_rate", "0.05", "--loss_print_every_n_iter", "4",
                         "--model_save_dir", str(tmp_path / "ckpt")])
    # Twelve momentum steps on batches of 8 through batch norm are noisy: a single late loss can
    # spike past the first ones, and float rounding (thread count, kernel order) moves the spikes.
    # Every trajectory measured (1 and 2 threads) reached under a third of its first loss within
    # the second half, so the check asks for half: a model that does not learn never gets there.
    assert min(losses[6:]) < 0.5 * losses[0]
    assert (tmp_path / "ckpt" / "res4_0_branch2b_bn-moving_variance" / "out").exists()


def test_bert_pretraining_example_loss_falls(tmp_path, capsys):
    train = _example("bert/train.py", "bert_train_example")
    history = train.main(["--device", "cpu", "--layers", "2", "--num_attention_heads", "2", "--batch-size", "8",
                          "--vocab_size", "1000", "--iter_num", "20", "--warmup_proportion", "0",
                          "--loss_print_every_n_iter", "10", "--model_save_dir", str(tmp_path / "ckpt")])
    assert history[-1, 0] < history[0, 0] - 1.0          # total loss of the fixed batch
    assert "updates applied 20" in capsys.readouterr().out
    names = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"bert-embeddings-word_embeddings", "bert-encoder-layer_1-attention-self-query-weight",
            "bert-encoder-layer_0-attention-output-LayerNorm-gamma", "cls-predictions-output_bias",
            "cls-seq_relationship-output_weights"} <= names
