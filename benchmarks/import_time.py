"""What ``import graphfront`` adds to ``import torch``, in fresh interpreters.

    python benchmarks/import_time.py [--runs 15]

Alternates ``python -c "import torch"`` and ``python -c "import torch; import graphfront"``
(each a new process, timed inside it with ``time.perf_counter``), reports the medians and
their difference, and lists the optional heavy packages (jax, onnx, onnxruntime,
matplotlib, tensorboard ...) that ``import graphfront`` pulled in: there should be none,
they are imported when first used.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from tabulate import tabulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("jax", "jaxlib", "onnx", "onnxruntime", "matplotlib", "tensorboard", "tensorboardX", "graphviz", "PIL",
         "scipy", "pandas")
TIMED = ("import time; t = time.perf_counter(); import torch; a = time.perf_counter(); {extra}"
         "b = time.perf_counter(); print(a - t, b - a)")


def _run(extra):
    out = subprocess.run([sys.executable, "-c", TIMED.format(extra=extra)], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    return float(out[0]), float(out[1])


def heavy_modules_imported() -> list:
    """Optional heavy top-level packages present in sys.modules after ``import graphfront``."""
    code = f"import sys, graphfront; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.split()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args(argv)
    torch_alone, torch_then, graphfront_after = [], [], []
    for _ in range(args.runs):
        torch_alone.append(_run("")[0])
        t, g = _run("import graphfront; ")
        torch_then.append(t)
        graphfront_after.append(g)
    med = statistics.median
    print(tabulate([("import torch (alone)", f"{med(torch_alone):.3f}"),
                    ("import torch (before graphfront)", f"{med(torch_then):.3f}"),
                    ("import graphfront, after torch", f"{med(graphfront_after):.3f}")],
                   headers=("median of %d fresh processes" % args.runs, "seconds")))
    print(f"\nimport graphfront adds {med(graphfront_after):.3f} s to import torch "
          f"({med(graphfront_after) / med(torch_alone):.2f}x torch's own import); target <= 0.3 s")
    heavy = heavy_modules_imported()
    print("optional heavy packages imported by `import graphfront`:", ", ".join(heavy) or "none")
    return med(graphfront_after), heavy


if __name__ == "__main__":
    main()
