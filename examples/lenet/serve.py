"""Serve the LeNet model that ``train.py`` exported, with an InferenceSession.

    python examples/lenet/train.py --epochs 5 --run-name short     # saves runs/lenet/short/model
    python examples/lenet/serve.py                                  # the newest run's model: test-set accuracy
    python examples/lenet/serve.py --image 7                        # predicted digit of test image 7
    python examples/lenet/serve.py --model-dir runs/lenet/short/model

The model directory holds ``<version>/saved_model.pb`` (the predict job's ops and its
signature: input ``image``, output ``logits``) and ``<version>/variables`` (checkpoint
layout). The job is rebuilt op by op in a private session, so this script needs only
graphfront, not the code that defined the model.
"""
import argparse
import glob
import os
import sys

import graphfront as flow

JOB_NAME = "eval_job"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=None,
                   help="a saved model directory (train.py writes RUN_DIR/model; default: the newest "
                        "runs/lenet/*/model)")
    p.add_argument("--version", type=int, default=None, help="model version (default: the latest)")
    p.add_argument("--image", type=int, default=None, metavar="N",
                   help="print the predicted digit of test image N instead of the accuracy")
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    p.add_argument("--dataset", choices=["mnist", "fashion"], default="mnist")
    p.add_argument("--data-dir", default=None, help="directory with IDX files or mnist.npz")
    return p.parse_args(argv)


def newest_model(runs=os.path.join("runs", "lenet")):
    """The ``model`` directory of the most recently written run under ``runs``."""
    models = glob.glob(os.path.join(runs, "*", "model"))
    if not models:
        sys.exit(f"no saved model under {runs}/*/model: train one with python examples/lenet/train.py, "
                 "or pass --model-dir")
    return max(models, key=os.path.getmtime)


def open_session(model_dir, version=None, device="auto"):
    """An InferenceSession with the LeNet model loaded and launched."""
    option = flow.serving.SessionOption()
    if device != "auto":
        option.device_tag = device
    sess = flow.serving.InferenceSession(option)
    policy = flow.serving.ModelVersionPolicy.LATEST if version is None else version
    sess.load_saved_model(model_dir, model_version=policy)
    sess.launch()
    return sess


def classify(sess, images):
    """Predicted class per image of one batch (shape = the model's input shape)."""
    (logits,) = sess.run(JOB_NAME, image=images)
    return logits.argmax(axis=1)


def main(argv=None):
    args = parse_args(argv)
    model_dir = args.model_dir or newest_model()
    print(f"serving {model_dir}")
    sess = open_session(model_dir, args.version, args.device)
    batch = sess.input_info("image", JOB_NAME)["shape"][0]
    _, (test_x, test_y) = flow.data.load_mnist(batch, batch, data_dir=args.data_dir, dataset=args.dataset,
                                               verbose=False)
    n = sum(len(y) for y in test_y)
    if args.image is not None:
        if not 0 <= args.image < n:
            sys.exit(f"--image must be in [0, {n - 1}], received {args.image}")
        b, i = divmod(args.image, batch)
        # the model takes whole batches; every image is classified independently
        digit = int(classify(sess, test_x[b])[i])
        print(f"test image {args.image}: predicted {digit} (label {int(test_y[b][i])})")
        sess.close()
        return digit
    correct = sum(int((classify(sess, x) == y).sum()) for x, y in zip(test_x, test_y))
    acc = correct / n
    print(f"test accuracy {acc:.4f} ({correct}/{n}) with model {args.model_dir}")
    sess.close()
    return acc


if __name__ == "__main__":
    main()
