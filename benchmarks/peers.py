"""graphfront against the frameworks a user would pick instead, each in its own process.

    python benchmarks/peers.py [--workloads mlp_train,lenet_train,lenet_predict,resnet_predict]
                               [--rounds 7] [--steps 30] [--threads 2]
    python benchmarks/peers.py --device gpu --workloads mlp_train,lenet_train [--lenet-batch 1000] [--cudnn-benchmark]

Workloads (numpy in, numpy out on every side, as a user's loop sees it):

* ``mlp_train``: 10 dense layers of width 64 (relu between), batch 16, softmax cross
  entropy, SGD lr 0.1 — peers: torch eager, torch.compile, jax.jit.
* ``lenet_train``: ``examples/lenet/lenet.py`` batch 100 (``--lenet-batch``) with dropout
  0.5, SGD lr 0.1 — peers: torch eager, torch.compile, jax.jit.
* ``lenet_predict`` / ``resnet_predict``: softmax(LeNet) and the ResNet-style network of
  ``examples/resnet_bn`` at batch 1, served by ``flow.serving.InferenceSession`` from a
  saved model — peers: torch eager, onnxruntime running graphfront's own
  ``flow.onnx.export`` of that saved model.

With ``--device gpu`` the train workloads run on the GPU (graphfront's job placed on
``"gpu"``, the torch models and tensors on CUDA, jax on its default GPU backend) and
``torch-compile-ro`` (``torch.compile(mode="reduce-overhead")``: CUDA graphs) joins the
peers; every step still takes numpy feeds and returns the losses as numpy. The predict
workloads run on the CPU only. ``--cudnn-benchmark`` has cuDNN time its convolution
algorithms at the first call on every side (graphfront's
``cudnn_conv_heuristic_search_algo(False)``, as OneFlow-Benchmark's train jobs set it, and
torch's ``cudnn.benchmark``; XLA autotunes its GPU convolutions either way); without it
each picks by cuDNN's heuristics, OneFlow's and torch's default.

graphfront runs in each of its lowerings (``compile_mode``): ``plan`` (per-op plan, the
default), ``native`` (TorchInductor), ``onnxruntime`` (predict jobs converted to ONNX and
run by onnxruntime) and ``xla``; a lowering this checkout lacks (the worker's job
refuses the mode) is skipped with a printed note. Every (framework, workload) pair is a
separate worker process; the parent asks the workers in turn for ``--steps`` timed steps
per round, rotating the order each round, so that load from other processes hits every
side alike. Printed: per framework the median step time over all rounds, its ratio to
the fastest peer and to graphfront, and each worker's first-call time (compile included;
for ``native`` the Inductor cache directory is a fresh temporary one, so it is cold).

A graphfront worker's CPU plan has glibc's ``malloc`` keep the host memory a step frees
(``graphfront.runtime.plan.keep_freed_host_memory``); the other workers run with glibc's
defaults. ``MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824`` in the
environment gives every side the same settings (graphfront then leaves them as they are).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = {
    "mlp_train": ["graphfront-plan", "graphfront-native", "graphfront-xla", "torch-eager", "torch-compile",
                  "torch-compile-ro", "jax-jit"],
    "lenet_train": ["graphfront-plan", "graphfront-native", "graphfront-xla", "torch-eager", "torch-compile",
                    "torch-compile-ro", "jax-jit"],
    "lenet_predict": ["graphfront-plan", "graphfront-native", "graphfront-onnxruntime", "graphfront-xla",
                      "torch-eager", "onnxruntime"],
    "resnet_predict": ["graphfront-plan", "graphfront-native", "graphfront-onnxruntime", "graphfront-xla",
                       "torch-eager", "onnxruntime"],
}
GPU_ONLY = {"torch-compile-ro"}
MLP_B, MLP_W, MLP_L = 16, 64, 10
LENET_B = 100  # set by --lenet-batch (in the workers too)
DEVICE = "cpu"  # set by --device


# ============================================================================ workers

def _feeds(workload):
    import numpy as np
    rng = np.random.default_rng(0)
    if workload == "mlp_train":
        return rng.standard_normal((MLP_B, MLP_W)).astype(np.float32), rng.integers(0, MLP_W, MLP_B).astype(np.int32)
    if workload == "lenet_train":
        return (rng.random((LENET_B, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, LENET_B).astype(np.int32))
    return (rng.random((1, 1, 28, 28), dtype=np.float32),)


def _graphfront_train(workload, mode, cudnn_benchmark=False):
    import graphfront as flow
    from graphfront import typing as tp
    sys.path.insert(0, os.path.join(ROOT, "examples", "lenet"))
    from lenet import lenet
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    if cudnn_benchmark:
        cfg.cudnn_conv_heuristic_search_algo(False)
    if workload == "mlp_train":
        shapes = ((MLP_B, MLP_W), (MLP_B,))
    else:
        shapes = ((LENET_B, 1, 28, 28), (LENET_B,))

    @flow.global_function(type="train", function_config=cfg)
    def train_job(x: tp.Numpy.Placeholder(shapes[0], dtype=flow.float),
                  labels: tp.Numpy.Placeholder(shapes[1], dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement(DEVICE, "0:0"):
            if workload == "mlp_train":
                h = x
                for i in range(MLP_L):
                    h = flow.layers.dense(h, MLP_W, activation=flow.nn.relu if i < MLP_L - 1 else None,
                                          name=f"fc{i}", kernel_initializer=flow.random_normal_initializer(stddev=0.1))
            else:
                h = lenet(x, train=True)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, h, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    x, y = _feeds(workload)
    return lambda: train_job(x, y)


def _graphfront_serve(workload, mode, model_dir):
    import graphfront as flow
    option = flow.serving.SessionOption()
    option.device_tag = "cpu"
    option.compile_mode = mode
    sess = flow.serving.InferenceSession(option)
    sess.load_saved_model(os.path.join(model_dir, workload))
    sess.launch()
    (x,) = _feeds(workload)
    name = sess.list_jobs()[0]
    return lambda: sess.run(name, image=x)


def _torch_resnet():
    import torch.nn as nn
    import torch.nn.functional as F

    def conv_bn(cin, cout, k, s):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, padding=k // 2, bias=False), nn.BatchNorm2d(cout))

    class Block(nn.Module):
        def __init__(self, cin, cout, s):
            super().__init__()
            self.a, self.b = conv_bn(cin, cout, 3, s), conv_bn(cout, cout, 3, 1)
            self.proj = conv_bn(cin, cout, 1, s) if s != 1 or cin != cout else None

        def forward(self, x):
            short = x if self.proj is None else self.proj(x)
            return F.relu(self.b(F.relu(self.a(x))) + short)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.b1, self.b2 = conv_bn(1, 16, 3, 1), Block(16, 16, 1), Block(16, 32, 2)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.b2(self.b1(F.relu(self.stem(x))))
            return self.fc(x.mean((2, 3)))
    return ResNet().eval()


def _torch(workload, compiled):
    """The torch model's step; ``compiled``: False (eager), True (torch.compile) or a
    torch.compile mode name."""
    import torch
    from lenet_step import TorchLeNet  # the LeNet baseline every benchmark shares
    import torch.nn as nn
    import torch.nn.functional as F
    feeds = _feeds(workload)
    if workload.endswith("predict"):
        model = TorchLeNet().eval() if workload == "lenet_predict" else _torch_resnet()
        (x,) = feeds

        def predict():
            with torch.no_grad():
                out = model(torch.from_numpy(x))
                return (F.softmax(out, 1) if workload == "lenet_predict" else out).numpy()
        return predict
    if workload == "mlp_train":
        layers = []
        for i in range(MLP_L):
            layers += [nn.Linear(MLP_W, MLP_W)] + ([nn.ReLU()] if i < MLP_L - 1 else [])
        model = nn.Sequential(*layers)
    else:
        model = TorchLeNet()  # train mode: dropout 0.5 after dense1
    dev = torch.device("cuda" if DEVICE == "gpu" else "cpu")
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0)
    forward = model if not compiled else torch.compile(model, mode=None if compiled is True else compiled)
    x, y = feeds

    def step():
        opt.zero_grad()
        xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev).long()
        loss = F.cross_entropy(forward(xt), yt, reduction="none")
        loss.mean().backward()
        opt.step()
        return loss.detach().cpu().numpy()
    return step


def _jax(workload):
    import jax
    import jax.numpy as jnp
    import numpy as np
    x, y = _feeds(workload)
    key = jax.random.PRNGKey(0)

    def dense(k, cin, cout):
        return [jax.random.normal(k, (cin, cout), jnp.float32) * 0.1, jnp.zeros((cout,), jnp.float32)]

    def conv(k, cin, cout):
        return [jax.random.normal(k, (cout, cin, 5, 5), jnp.float32) * 0.1, jnp.zeros((cout,), jnp.float32)]

    keys = jax.random.split(key, 16)
    if workload == "mlp_train":
        params = [dense(keys[i], MLP_W, MLP_W) for i in range(MLP_L)]

        def logits(p, xb, _):
            h = xb
            for i, (w, b) in enumerate(p):
                h = h @ w + b
                h = jax.nn.relu(h) if i < MLP_L - 1 else h
            return h
    else:
        params = [conv(keys[0], 1, 32), conv(keys[1], 32, 64), dense(keys[2], 7 * 7 * 64, 512), dense(keys[3], 512, 10)]

        def pool(h):
            return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        def logits(p, xb, k):
            h = xb
            for w, b in p[:2]:
                h = jax.lax.conv_general_dilated(h, w, (1, 1), ((2, 2), (2, 2)),
                                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
                h = pool(jax.nn.relu(h + b[None, :, None, None]))
            h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p[2][0] + p[2][1])
            keep = jax.random.bernoulli(k, 0.5, h.shape)
            h = jnp.where(keep, h / 0.5, 0.0)
            return h @ p[3][0] + p[3][1]

    def losses(p, xb, yb, k):
        lg = logits(p, xb, k)
        return -jnp.take_along_axis(jax.nn.log_softmax(lg), yb[:, None].astype(jnp.int32), 1)[:, 0]

    def train_step(p, xb, yb, k):
        k, sub = jax.random.split(k)

        def mean_loss(q):
            per_example = losses(q, xb, yb, sub)
            return per_example.mean(), per_example
        (_, per_example), g = jax.value_and_grad(mean_loss, has_aux=True)(p)
        return jax.tree_util.tree_map(lambda a, d: a - 0.1 * d, p, g), per_example, k
    train_step = jax.jit(train_step, donate_argnums=(0,))

    state = {"p": params, "k": key}

    def step():
        state["p"], loss, state["k"] = train_step(state["p"], x, y, state["k"])
        return np.asarray(loss)
    return step


def _onnxruntime(workload, model_dir):
    import onnxruntime as ort
    sess = ort.InferenceSession(os.path.join(model_dir, f"{workload}.onnx"), providers=["CPUExecutionProvider"])
    (x,) = _feeds(workload)
    name = sess.get_inputs()[0].name
    return lambda: sess.run(None, {name: x})


def worker(framework, workload, threads, model_dir, cache_dir, device, lenet_batch, cudnn_benchmark):
    """Serve timing requests on stdin ("N" -> JSON list of N step times in seconds)."""
    global DEVICE, LENET_B
    DEVICE, LENET_B = device, lenet_batch
    if cache_dir:
        os.environ["GRAPHFRONT_CACHE_DIR"] = cache_dir
    import torch
    if threads:
        torch.set_num_threads(threads)
    if cudnn_benchmark and framework.startswith("torch"):
        torch.backends.cudnn.benchmark = True
    start = time.perf_counter()
    if framework.startswith("graphfront"):
        mode = framework.split("-")[1]
        try:
            from graphfront.runtime.lowering import LOWERINGS as COMPILE_MODES
        except ImportError:  # (a checkout from before runtime/lowering.py)
            from graphfront.runtime.native import COMPILE_MODES
        if mode not in COMPILE_MODES:
            print("@@" + json.dumps({"skip": f"compile_mode {mode!r} is not in this checkout ({COMPILE_MODES})"}),
                  flush=True)
            return
        step = (_graphfront_serve(workload, mode, model_dir) if workload.endswith("predict")
                else _graphfront_train(workload, mode, cudnn_benchmark))
    elif framework.startswith("torch"):
        step = _torch(workload, {"torch-eager": False, "torch-compile": True}.get(framework, "reduce-overhead"))
    elif framework == "jax-jit":
        import jax
        if device == "gpu" and jax.default_backend() != "gpu":
            print("@@" + json.dumps({"skip": f"jax has no GPU backend here ({jax.default_backend()})"}), flush=True)
            return
        step = _jax(workload)
    else:
        step = _onnxruntime(workload, model_dir)
    step()
    first = time.perf_counter() - start
    print("@@" + json.dumps({"first_call_s": first}), flush=True)
    for line in sys.stdin:
        n = int(line)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        print("@@" + json.dumps(times), flush=True)


# ============================================================================ models for serving

def prepare(model_dir):
    """Save the LeNet and ResNet-style predict jobs as saved models and as ONNX files."""
    import numpy as np
    import graphfront as flow
    from graphfront import typing as tp
    sys.path.insert(0, os.path.join(ROOT, "examples", "lenet"))
    sys.path.insert(0, os.path.join(ROOT, "examples", "resnet_bn"))
    from lenet import lenet
    from train import resnet
    for workload, net in (("lenet_predict", lambda x: flow.nn.softmax(lenet(x))),
                          ("resnet_predict", lambda x: resnet(x, train=False))):
        flow.clear_default_session()
        lbns = {}

        @flow.global_function(type="predict")
        def predict(image: tp.Numpy.Placeholder((1, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                out = net(image)
            lbns.update(image=image.logical_blob_name, out=out.logical_blob_name)
            return out
        predict(np.zeros((1, 1, 28, 28), np.float32))
        b = flow.saved_model.ModelBuilder(os.path.join(model_dir, workload)).ModelName(workload).Version(1)
        b.AddFunction(predict).AddSignature("serve").Input("image", lbns["image"]).Output("out", lbns["out"])
        b.Save()
        flow.onnx.export(os.path.join(model_dir, workload), os.path.join(model_dir, f"{workload}.onnx"))


# ============================================================================ parent

def _reply(proc, name):
    """The worker's next protocol line ("@@" + JSON); other output lines are skipped."""
    for line in proc.stdout:
        if line.startswith("@@"):
            return json.loads(line[2:])
    raise RuntimeError(f"worker {name} exited with status {proc.wait()} (its error is printed above)")


def run(workload, args, model_dir):
    frameworks = [f for f in WORKLOADS[workload] if (not args.only or f in args.only)
                  and (args.device == "gpu" or f not in GPU_ONLY)]
    procs, firsts, times = {}, {}, {f: [] for f in frameworks}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cache = tempfile.mkdtemp(prefix="graphfront-cache-")
    for f in list(frameworks):  # started one after the other: each compiles alone
        procs[f] = subprocess.Popen([sys.executable, __file__, "--worker", f, workload, str(args.threads), model_dir,
                                     cache, args.device, str(args.lenet_batch), str(int(args.cudnn_benchmark))],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        first = _reply(procs[f], f)
        if "skip" in first:
            print(f"{workload}: skipping {f}: {first['skip']}")
            proc = procs.pop(f)
            proc.stdin.close()
            proc.wait()
            frameworks.remove(f)
            del times[f]
            continue
        firsts[f] = first["first_call_s"]
    for r in range(args.warmup_rounds + args.rounds):
        order = frameworks[r % len(frameworks):] + frameworks[:r % len(frameworks)]
        for f in order:
            procs[f].stdin.write(f"{args.steps}\n")
            procs[f].stdin.flush()
            got = _reply(procs[f], f)
            if r >= args.warmup_rounds:
                times[f].extend(got)
    for p in procs.values():
        p.stdin.close()
        p.wait()
    shutil.rmtree(cache, ignore_errors=True)
    med = {f: statistics.median(t) for f, t in times.items()}
    peers = [f for f in frameworks if not f.startswith("graphfront")]
    best = min(peers, key=med.get) if peers else None
    batch = {"mlp_train": MLP_B, "lenet_train": args.lenet_batch}.get(workload, 1)
    print(f"\n{workload} (batch {batch}, {args.device}): median step time over {args.rounds} rounds x "
          f"{args.steps} steps")
    for f in frameworks:
        ratio = f"{med[f] / med[best]:.3f}" if best else "-"
        print(f"  {f:22s} {med[f] * 1e6:10.1f} us   ratio to best peer ({best}) {ratio:>6s}   "
              f"first call {firsts[f]:.2f} s")
    return med


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, framework, workload, threads, model_dir, cache, device, lenet_batch, cudnn_benchmark = sys.argv
        return worker(framework, workload, int(threads), model_dir, cache, device, int(lenet_batch),
                      cudnn_benchmark == "1")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--only", default="", help="comma-separated frameworks to run (default: all)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--warmup-rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=30, help="timed steps per worker per round")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads of the torch-based workers")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu", help="where the train workloads run")
    p.add_argument("--lenet-batch", type=int, default=LENET_B, help="lenet_train's batch size")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="cuDNN times its convolution algorithms at the first call, on every side")
    args = p.parse_args(argv)
    args.only = [f for f in args.only.split(",") if f]
    if args.device == "gpu" and any(w.endswith("predict") for w in args.workloads.split(",")):
        p.error("the predict workloads run on the CPU only; pass --workloads mlp_train,lenet_train with --device gpu")
    sys.path.insert(0, HERE)
    from _common import machine
    print(f"machine: {machine(args.device)}")
    with tempfile.TemporaryDirectory(prefix="graphfront-peers-") as model_dir:
        workloads = args.workloads.split(",")
        if any(w.endswith("predict") for w in workloads):
            env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
            subprocess.run([sys.executable, __file__, "--prepare", model_dir], check=True, env=env)
        for w in workloads:
            run(w, args, model_dir)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--prepare":
        prepare(sys.argv[2])
    else:
        main()
