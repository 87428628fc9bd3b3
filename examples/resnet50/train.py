"""Train ResNet-50 v1.5 as OneFlow-Benchmark's ``of_cnn_train_val.py`` does: synthetic data
made inside the job, or ImageNet-style OFRecord shards read by the job.

    python examples/resnet50/train.py --use_fp16 --batch_size 128            # synthetic, on the GPU
    python examples/resnet50/train.py --device cpu --batch_size 4 --image_size 64 \\
        --block_counts 1,1,1,1 --width 0.25 --num_classes 10 --steps 5      # a small one on the CPU
    python examples/resnet50/train.py --ofrecord DIR                        # DIR/train/part-00000 ...

Synthetic mode (no ``--ofrecord``): labels and images come from ``flow.data.decode_random``
inside the job, as OneFlow-Benchmark's no-data mode (labels all 0, images random).
OFRecord mode: ``ofrecord_reader`` (shuffled) -> ``OFRecordRawDecoder("class/label")`` and
``OFRecordImageDecoderRandomCrop("encoded")`` -> ``image.Resize`` to ``image_size`` ->
``image.CropMirrorNormalize`` (random mirror, ImageNet mean/std, NCHW or NHWC float), the
records of OneFlow's ImageNet shards (``python -m graphfront.tools.ofrecord folder`` writes
them from an image folder).

Loss: softmax cross entropy against one-hot labels smoothed by ``--label_smoothing`` (0.1),
averaged over the batch; SGD with momentum ``--momentum`` (0.9), L2 weight decay ``--wd``,
cosine decay over ``--steps`` after ``--warmup_steps`` of linear warmup; ``--use_fp16``:
auto mixed precision (float16 on a GPU, bfloat16 on a CPU) with dynamic loss scaling.
The checkpoint (``--model_save_dir``) keeps OneFlow-Benchmark's variable names.
"""
import argparse
import os
import sys
import time
import typing

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import graphfront as flow  # noqa: E402
from graphfront import typing as tp  # noqa: E402
from resnet_model import resnet50  # noqa: E402

RGB_MEAN = [123.68, 116.779, 103.939]
RGB_STD = [58.393, 57.12, 57.375]


def add_arguments(p):
    """OneFlow-Benchmark's flags (``Classification/cnns/config.py``) that this example uses."""
    a = p.add_argument
    a("--batch_size_per_device", "--batch_size", "--batch-size", type=int, default=32)
    a("--learning_rate", type=float, default=0.256)
    a("--momentum", type=float, default=0.9)
    a("--wd", type=float, default=1.0 / 32768, help="L2 weight decay of every weight (0 = none)")
    a("--label_smoothing", type=float, default=0.1)
    a("--use_fp16", action="store_true", help="auto mixed precision with dynamic loss scaling")
    a("--channel_last", action="store_true", help="NHWC images and convolutions")
    a("--fuse_bn_relu", type=int, default=1)
    a("--fuse_bn_add_relu", type=int, default=1)
    a("--num_classes", type=int, default=1000)
    a("--image_size", type=int, default=224)
    a("--ofrecord", "--train_data_dir", dest="ofrecord", metavar="DIR", default=None,
      help="ImageNet-style OFRecord shards DIR/train/part-*; default: synthetic data")
    a("--data_part_num", type=int, default=0, help="shards in DIR/train (0: count them)")
    a("--steps", type=int, default=100, help="train steps (the length of the cosine decay)")
    a("--warmup_steps", type=int, default=0)
    a("--loss_print_every_n_iter", type=int, default=10)
    a("--block_counts", type=lambda s: [int(x) for x in s.split(",")], default=None,
      help="blocks per stage, e.g. 1,1,1,1 (default 3,4,6,3: ResNet-50)")
    a("--width", type=float, default=1.0, help="channel multiplier (1.0: ResNet-50)")
    a("--device", choices=["cpu", "gpu"], default="gpu")
    a("--gpu_num_per_node", type=int, default=1,
      help="devices the job runs on, data parallel (with --device cpu: CPU devices)")
    a("--compile_mode", default=None, help="graphfront lowering (plan, native, xla)")
    a("--model_save_dir", default=None, help="save the variables here after training")
    return p


def devices(args):
    """The placement's device ids on this machine, ``"0:0-<n-1>"``."""
    return f"0:0-{args.gpu_num_per_node - 1}"


def batch_size(args):
    """The job's batch: ``batch_size_per_device`` on each of its devices."""
    return args.batch_size_per_device * args.gpu_num_per_node


def label_smoothing(labels, classes, eta, dtype):
    return flow.one_hot(labels, depth=classes, dtype=dtype, on_value=1 - eta + eta / classes,
                        off_value=eta / classes)


def load_synthetic(args):
    b = batch_size(args)
    label = flow.data.decode_random(shape=(), dtype=flow.int32, batch_size=b,
                                    initializer=flow.zeros_initializer(flow.int32))
    shape = (args.image_size, args.image_size, 3) if args.channel_last else (3, args.image_size, args.image_size)
    image = flow.data.decode_random(shape=shape, dtype=flow.float, batch_size=b)
    return label, image


def load_imagenet_for_training(args):
    b = batch_size(args)
    train_dir = os.path.join(args.ofrecord, "train")
    parts = args.data_part_num or len([f for f in os.listdir(train_dir) if f.startswith("part-")])
    if not parts:
        raise SystemExit(f"no OFRecord shards (part-*) in {train_dir}")
    with flow.scope.placement("cpu", devices(args)):
        ofrecord = flow.data.ofrecord_reader(train_dir, batch_size=b, data_part_num=parts,
                                             part_name_suffix_length=5, random_shuffle=True,
                                             shuffle_after_epoch=True)
        label = flow.data.OFRecordRawDecoder(ofrecord, "class/label", shape=(), dtype=flow.int32)
        image = flow.data.OFRecordImageDecoderRandomCrop(ofrecord, "encoded", color_space="RGB")
        image = flow.image.Resize(image, target_size=[args.image_size, args.image_size])[0]
        rng = flow.random.CoinFlip(batch_size=b)
        normal = flow.image.CropMirrorNormalize(image, mirror_blob=rng, color_space="RGB",
                                                output_layout="NHWC" if args.channel_last else "NCHW",
                                                mean=RGB_MEAN, std=RGB_STD, output_dtype=flow.float)
    return label, normal


def function_config(args):
    if args.gpu_num_per_node > 1:
        (flow.config.gpu_device_num if args.device == "gpu" else flow.config.cpu_device_num)(args.gpu_num_per_node)
    config = flow.FunctionConfig()
    config.default_data_type(flow.float)
    config.default_placement_scope(flow.scope.placement(args.device, devices(args)))  # the whole job, its feeds too
    config.enable_auto_mixed_precision(args.use_fp16)
    config.cudnn_conv_heuristic_search_algo(False)  # (cuDNN times the algorithms, as OneFlow-Benchmark's train job)
    if args.compile_mode:
        config.compile_mode(args.compile_mode)
    if getattr(args, "disabled_passes", ()):
        flow.passes.disable_passes(config, *args.disabled_passes)
    return config


def optimizer(args):
    warmup = flow.optimizer.warmup.linear(args.warmup_steps, 0) if args.warmup_steps else None
    schedule = flow.optimizer.CosineScheduler(args.learning_rate, max(args.steps, 1), warmup=warmup)
    policy = flow.optimizer.loss_scale.dynamic_loss_scale(increment_period=2000) if args.use_fp16 else None
    return flow.optimizer.SGD(schedule, momentum=args.momentum, loss_scale_policy=policy)


def make_train_job(args, name="TrainNet"):
    """The train job ``f() -> {"loss": (1,), "predictions": (B, classes)}`` (numpy)."""
    def job() -> typing.Dict[str, tp.Numpy]:
        if args.ofrecord:
            labels, images = load_imagenet_for_training(args)
        else:
            labels, images = None, None
        with flow.scope.placement(args.device, devices(args)):
            if labels is None:
                labels, images = load_synthetic(args)
            logits = resnet50(images, args)
            if args.label_smoothing > 0:
                one_hot = label_smoothing(labels, args.num_classes, args.label_smoothing, logits.dtype)
                loss = flow.nn.softmax_cross_entropy_with_logits(one_hot, logits, name="softmax_loss")
            else:
                loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
            loss = flow.math.reduce_mean(loss)
            predictions = flow.nn.softmax(logits)
        optimizer(args).minimize(loss)
        return {"loss": loss, "predictions": predictions}

    job.__name__ = name
    return flow.global_function(type="train", function_config=function_config(args))(job)


def main(argv=None):
    args = add_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    flow.manual_seed(0)
    train = make_train_job(args)
    losses = []
    t0, seen = time.perf_counter(), 0
    for step in range(1, args.steps + 1):
        out = train()
        losses.append(float(out["loss"].reshape(-1)[0]))
        seen += batch_size(args)
        if step % args.loss_print_every_n_iter == 0 or step == args.steps:
            dt = time.perf_counter() - t0
            print(f"step {step}: loss {np.mean(losses[-args.loss_print_every_n_iter:]):.4f}, "
                  f"{seen / dt:.1f} images/s", flush=True)
            t0, seen = time.perf_counter(), 0
    if args.model_save_dir:
        flow.checkpoint.save(args.model_save_dir)
    return losses


if __name__ == "__main__":
    main()
