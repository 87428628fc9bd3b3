"""Compile time per lowering, cold and cached, each measurement in a fresh process.

    python benchmarks/compile_time.py [--jobs lenet_train,lenet_predict] [--modes plan,native,onnxruntime,xla]
                                      [--cached-runs 1]

Jobs: ``lenet_train`` (``examples/lenet/lenet.py``, batch 100, SGD), ``lenet_predict``
(softmax of LeNet, batch 1) and, on request, ``mlp_train`` (the train step of
``mlp_step.py``: 10 dense layers of width 64, batch 16, SGD) and ``chain1000`` (a
generated predict job of 1,000 elementwise ops). Lowerings
(``FunctionConfig().compile_mode``): ``plan``, ``native`` (TorchInductor),
``onnxruntime`` (predict jobs only) and ``xla`` (when this checkout has it; otherwise the
row says so).

For each (job, lowering) a fresh Python process imports graphfront, builds the job and
times its first call to first result (trace, completion passes, variable initialization,
lowering and compilation, one run), then the median of 5 steady calls; "compile" is the
first call minus the steady call. For ``xla`` the process imports and configures jax
(:func:`graphfront.runtime.xla.import_jax`) before that first call, so "compile" leaves
out importing jax (which a program using jax pays anyway); that import is timed on its
own and printed in the ``import jax`` column (add it to compare with the other
lowerings, whose imports, e.g. onnxruntime's, stay inside their first call). The first
process of a pair starts with an empty cache directory (``GRAPHFRONT_CACHE_DIR``):
**cold**; the next ``--cached-runs`` processes reuse it: **cached** (the median is
printed). The per-op plan and onnxruntime keep no disk cache, so their cached runs only
show the operating system's warm file cache. The notes give the lowering's own
``compile_seconds`` (native: Inductor's compile; xla: tracing the step, lowering it and
compiling it or loading it from JAX's persistent cache, without running it) and its
disk-cache hits. Printed with ``tabulate``; times in milliseconds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOBS = ("lenet_train", "lenet_predict", "mlp_train", "chain1000")
MODES = ("plan", "native", "onnxruntime", "xla")
TRAIN_B = 100


# ============================================================================ child: one job, one lowering

def _lenet_train(cfg):
    import numpy as np
    import graphfront as flow
    from graphfront import typing as tp
    from lenet import lenet

    @flow.global_function(type="train", function_config=cfg)
    def train_job(images: tp.Numpy.Placeholder((TRAIN_B, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((TRAIN_B,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            logits = lenet(images, train=True)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    rng = np.random.default_rng(0)
    return train_job, (rng.random((TRAIN_B, 1, 28, 28), dtype=np.float32),
                       rng.integers(0, 10, TRAIN_B).astype(np.int32))


def _lenet_predict(cfg):
    import numpy as np
    import graphfront as flow
    from graphfront import typing as tp
    from lenet import lenet

    @flow.global_function(type="predict", function_config=cfg)
    def predict_job(images: tp.Numpy.Placeholder((1, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            return flow.nn.softmax(lenet(images))
    return predict_job, (np.random.default_rng(0).random((1, 1, 28, 28), dtype=np.float32),)


def _mlp_train(cfg):
    import numpy as np
    from mlp_step import B, W, build
    rng = np.random.default_rng(0)
    return build("cpu", cfg), (rng.standard_normal((B, W)).astype(np.float32), rng.integers(0, W, B).astype(np.int32))


def _chain1000(cfg, n_ops=1000):
    """A predict job of ``n_ops`` ops: tanh / scalar mul / add / relu over a (16, 16) input."""
    import numpy as np
    import graphfront as flow
    from graphfront import typing as tp

    @flow.global_function(type="predict", function_config=cfg)
    def chain_job(x: tp.Numpy.Placeholder((16, 16), dtype=flow.float)) -> tp.Numpy:
        with flow.scope.placement("cpu", "0:0"):
            h, prev = x, x
            for count in range(n_ops - 3):  # input and return ops included
                k = count % 4
                nxt = (flow.math.tanh(h) if k == 0 else h * 0.5 if k == 1 else h + prev if k == 2
                       else flow.math.relu(h))
                prev, h = h, nxt
            return h
    return chain_job, (np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32),)


def child(job, mode):
    """Measure one (job, mode) in this process; prints one "@@" JSON line."""
    sys.path[:0] = [os.path.join(ROOT, "examples", "lenet"), HERE]
    import graphfront as flow
    try:
        from graphfront.runtime.lowering import LOWERINGS as COMPILE_MODES
    except ImportError:  # (a checkout from before runtime/lowering.py)
        from graphfront.runtime.native import COMPILE_MODES
    if mode not in COMPILE_MODES:
        print("@@" + json.dumps({"skip": "not in this checkout"}), flush=True)
        return
    jax_seconds = None
    if mode == "xla":  # timed apart from the first call (module docstring)
        t = time.perf_counter()
        from graphfront.runtime.xla import import_jax
        import_jax()
        jax_seconds = time.perf_counter() - t
    cfg = flow.FunctionConfig()
    cfg.compile_mode(mode)
    fn, feeds = {"lenet_train": _lenet_train, "lenet_predict": _lenet_predict, "mlp_train": _mlp_train,
                 "chain1000": _chain1000}[job](cfg)
    t = time.perf_counter()
    fn(*feeds)
    first = time.perf_counter() - t
    steady = []
    for _ in range(5):
        t = time.perf_counter()
        fn(*feeds)
        steady.append(time.perf_counter() - t)
    plan = fn.compiled_job.plan
    print("@@" + json.dumps(dict(first=first, steady=statistics.median(steady), import_jax=jax_seconds,
                                 compile_seconds=getattr(plan, "compile_seconds", None),
                                 hits=getattr(plan, "cache_hits", None))), flush=True)


# ============================================================================ parent

def measure(job, mode, cache):
    env = dict(os.environ, GRAPHFRONT_CACHE_DIR=cache,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, __file__, "--child", job, mode], env=env, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("@@")]
    if out.returncode or not lines:
        err = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": err[:120]}
    return json.loads(lines[-1][2:])


def _ms(v):
    return f"{v * 1e3:.1f}" if v is not None else "-"


def row(job, mode, cached_runs):
    if mode == "onnxruntime" and job.endswith("train"):
        return None  # predict jobs only
    with tempfile.TemporaryDirectory(prefix="graphfront-cache-") as cache:
        cold = measure(job, mode, cache)
        if "skip" in cold or "error" in cold:
            return [job, mode, "-", "-", "-", "-", "-", "-", cold.get("skip") or cold["error"]]
        cached = [measure(job, mode, cache) for _ in range(cached_runs)]
    cached = [c for c in cached if "first" in c]

    def med(key):
        return statistics.median(c[key] for c in cached) if cached else None
    note = ""
    if cold["compile_seconds"] is not None:
        what = {"native": "Inductor compile", "xla": "XLA trace + lower + compile"}.get(mode, "compile")
        note = f"{what} cold {_ms(cold['compile_seconds'])} ms" + (
            f", cached {_ms(med('compile_seconds'))} ms, disk-cache hits {cached[0]['hits']}" if cached else "")
    cached_first = med("first")
    cached_compile = cached_first - med("steady") if cached else None
    jax_import = _ms(statistics.median(c["import_jax"] for c in [cold] + cached)) if cold["import_jax"] else "-"
    return [job, mode, _ms(cold["first"]), _ms(cold["first"] - cold["steady"]), _ms(cached_first),
            _ms(cached_compile), _ms(cold["steady"]), jax_import, note]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", default="lenet_train,lenet_predict", help=f"comma-separated, from {JOBS}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {MODES}")
    p.add_argument("--cached-runs", type=int, default=1, help="processes reusing the cache after the cold one")
    args = p.parse_args(argv)
    from tabulate import tabulate
    sys.path.insert(0, HERE)
    from _common import machine
    print(f"machine: {machine()}")
    rows = []
    for job in args.jobs.split(","):
        for mode in args.modes.split(","):
            r = row(job, mode, args.cached_runs)
            if r is not None:
                rows.append(r)
                print(f"  measured {job} / {mode}", flush=True)
    print(tabulate(rows, headers=["job", "mode", "cold: first call (ms)", "cold: compile (ms)",
                                  "cached: first call (ms)", "cached: compile (ms)", "steady call (ms)",
                                  "import jax (ms)", "notes"]))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
