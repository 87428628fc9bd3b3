"""Kernels per steady train step of the ResNet-50, BERT-base and LeNet GPU configurations,
counted on a CPU: graphfront's plan against the PyTorch eager step of the same benchmark.

    python benchmarks/step_kernels.py                  # all three models, a table
    python benchmarks/step_kernels.py --models bert --top 15

A GPU kernel costs a few microseconds however small it is (inside a CUDA graph too), so the
number of kernels a step launches bounds how fast a short step can be. Each side runs one
steady step under a ``TorchDispatchMode`` that counts the aten calls other than views and
allocations (``view``, ``permute``, ``empty``, ...), a close proxy for kernel launches:

* graphfront: the job of ``benchmarks/resnet50.py`` / ``benchmarks/bert_pretrain.py`` in their
  GPU configuration (AMP float16 with dynamic loss scaling; ResNet-50 NHWC, batch 128 at
  224x224; BERT-base batch 64, sequence 128), compiled for a GPU placement whose device is
  torch's ``meta`` device: the plan takes its GPU branches (nothing read on the host) and no
  memory is used. LeNet is ``benchmarks/lenet_step.py``'s job at batch 1000, float32.
* PyTorch: the benchmark's eager step (``torch_step``) on the CPU with autocast bfloat16, at
  batch 2 and 32x32 images (ResNet-50) or sequence 32 (BERT): the count does not depend on the
  sizes. ``GradScaler`` is off on the CPU, so its unscale and inf-check kernels (a few
  multi-tensor launches on a GPU) are not counted: the PyTorch figure is a lower bound.

Printed: kernels per step of each side, their ratio (lower is better for graphfront), the
calls of graphfront's step that made a tensor on the host or copied one in (none expected: on
a GPU they would be host work inside the step and would break its CUDA-graph capture),
graphfront's memory traffic per step (GB: the bytes of every kernel call's tensor inputs and
outputs at the GPU sizes, matrix products included, and the copy CUDA's ``addmm`` makes of a
whole-matrix addend before its GEMM; an estimate of the HBM traffic that bounds
a step made of memory-bound kernels, whatever the caches save) and graphfront's aten calls
that move the most memory: GB, number of calls, and the graphfront source line making them
(``plan``: a torch function the generated step calls directly, such as ``torch.relu``).

A kernel that graphfront compiles with TorchInductor on a GPU (``normalization_add_relu``,
the fused max pool, the fused softmax cross entropy and their gradients, the finiteness
count of loss scaling) cannot be
compiled for the meta device; each of its calls counts as the kernels Inductor makes of it
(:data:`INDUCTOR_KERNELS`: a batch norm's split statistics reduction and its pointwise pass,
3; a count's split sum, 2; the fused softmax cross entropy's and its gradient's, 2; a
pool's, 1), moving the inputs its
formula reads once per pass over them (the batch norm's two: an upper bound, its statistics
pass reads only some of them) and its outputs once, listed as ``inductor:<op type>``. An op
whose kernels a GPU times at the first call (``common.tuned_kernel``) is counted as its first
candidate: the fused batch norm as its compiled op, dropout as PyTorch's ``addcmul``.
"""
import argparse
import collections
import contextlib
import os
import sys
import traceback
import types

import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_pretrain  # noqa: E402
import lenet_step  # noqa: E402
import resnet50  # noqa: E402
from _common import torch_train_step  # noqa: E402

import graphfront as flow  # noqa: E402
from graphfront.framework import session as session_mod  # noqa: E402
from graphfront.ops import common  # noqa: E402
from graphfront.passes import fold, rewrite  # noqa: E402
from graphfront.runtime import plan as plan_mod, walk as walk_mod  # noqa: E402

META = torch.device("meta")
NOT_KERNELS = {"view", "_unsafe_view", "permute", "transpose", "t", "expand", "unsqueeze", "squeeze", "slice",
               "select", "as_strided", "alias", "detach", "_reshape_alias", "reshape", "split", "split_with_sizes",
               "unbind", "narrow", "empty", "empty_like", "empty_strided", "_local_scalar_dense"}


class Kernels(TorchDispatchMode):
    """Counts the aten calls that launch kernels, by op name and by (op, graphfront source
    line); ``host`` lists the calls (op, graphfront source) that made a tensor off the
    ``meta`` device or copied a CPU tensor in, which on a GPU would be host work inside the
    step (and would break a CUDA-graph capture)."""

    def __init__(self):
        super().__init__()
        self.count, self.where, self.host = collections.Counter(), collections.Counter(), []
        self.bytes = 0   # of the kernel calls' tensor inputs and outputs
        self.where_bytes = collections.Counter()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        if name in ("convolution", "convolution_backward"):
            out = _as_cudnn_lays_out(args, out)
        kernel = name not in NOT_KERNELS
        made = {t.device.type for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)}
        read = {t.device.type for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        host = bool(made - {"meta"}) or (name in ("_to_copy", "copy_", "copy") and "cpu" in read)
        if kernel:
            self.count[name] += 1
            moved = sum(t.numel() * t.element_size() for t in pytree.tree_leaves((args, kwargs, out))
                        if isinstance(t, torch.Tensor)) + _addend_copy(name, args, kwargs or {}, out)
            self.bytes += moved
        if kernel or host:  # (the stack is walked only for the calls it is recorded for)
            source = _graphfront_source()
            if kernel:
                self.where[(name, source or "plan")] += 1
                self.where_bytes[(name, source or "plan")] += moved
            if host:
                self.host.append((name, source or "?"))
        return out

    def inductor(self, op_type, read, out):
        """One call of a kernel that TorchInductor compiles on a GPU, which reads the tensors
        ``read`` and returns ``out`` (module docstring)."""
        size = [sum(t.numel() * t.element_size() for t in pytree.tree_leaves(v) if isinstance(t, torch.Tensor))
                for v in (read, out)]
        kernels, passes = INDUCTOR_KERNELS.get(op_type, (1, 1))
        key = (f"inductor:{op_type}", "ops/common.py (TorchInductor)")
        self.count[key[0]] += kernels
        self.where[key] += kernels
        self.bytes += passes * size[0] + size[1]
        self.where_bytes[key] += passes * size[0] + size[1]


#: the counter of the step being counted (a kernel compiled by TorchInductor reports to it)
_ACTIVE = []
#: op type -> (kernels, passes over the inputs) of its TorchInductor-compiled kernel; others (1, 1)
INDUCTOR_KERNELS = {"normalization_add_relu": (3, 2), "normalization_add_relu_grad": (3, 2),
                    "count_not_finite": (2, 1),   # (a large sum is split in two reductions)
                    "fused_bias_add_sparse_softmax_cross_entropy": (2, 2),        # (the softmax's sums, then prob)
                    "fused_bias_add_sparse_softmax_cross_entropy_grad": (2, 2)}   # (the gradient, then the bias's sum)


def _counted_inductor_kernel(make):
    """``common.inductor_kernel`` whose runners, on the meta device, run their formula
    uncounted and report one Inductor-compiled call instead (see the module docstring)."""
    def inductor_kernel(key, formula, eager=None, dynamic=False):
        real = make(key, formula, eager, dynamic)

        def run(*args):
            if not _ACTIVE or all(a is None or a.device.type != "meta" for a in args):
                return real(*args)
            with _disable_current_modes(), _Reads() as reads:
                out = formula(*args)
            _ACTIVE[-1].inductor(key[0], [a for a in args if a is not None and id(a) in reads.ids], out)
            return out
        return run
    return inductor_kernel


def _addend_copy(name, args, kwargs, out):
    """The bytes a CUDA ``addmm`` / ``baddbmm`` moves besides its operands and result when its
    addend is a whole matrix (not a bias row, which cuBLASLt's epilogue reads): PyTorch first
    copies the addend into the result (read and write), then runs the GEMM with ``beta = 1``
    over it; the dispatcher never sees that copy."""
    if name not in ("addmm", "baddbmm") or kwargs.get("beta", 1) == 0:
        return 0
    addend = args[0]
    if addend.dim() < 2 or addend.numel() != out.numel():
        return 0
    return 2 * out.numel() * out.element_size()


def _as_cudnn_lays_out(args, out):
    """A convolution's outputs (``out``) laid out as cuDNN lays them out: channels-last where
    an input is (torch's meta kernels return them contiguous whatever the inputs, which would
    make the step look as if it converted layouts that on a GPU it never converts)."""
    if not any(isinstance(a, torch.Tensor) and a.dim() == 4 and not a.is_contiguous()
               and a.is_contiguous(memory_format=torch.channels_last) for a in args):
        return out
    return pytree.tree_map(lambda t: t.contiguous(memory_format=torch.channels_last)
                           if isinstance(t, torch.Tensor) and t.dim() == 4 else t, out)


class _Reads(TorchDispatchMode):
    """The ids of the tensors the aten calls inside the block take."""

    def __init__(self):
        super().__init__()
        self.ids = set()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        self.ids.update(id(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
        return func(*args, **(kwargs or {}))


def _graphfront_source():
    """``"<path under graphfront/>:<line>"`` of the innermost graphfront frame of the current
    call, or None (12 frames up from the dispatch, this function's own frame aside)."""
    frames = [f for f in traceback.extract_stack(limit=13) if f"{os.sep}graphfront{os.sep}" in f.filename]
    if not frames:
        return None
    return f"{frames[-1].filename.rsplit('graphfront' + os.sep, 1)[-1]}:{frames[-1].lineno}"


@contextlib.contextmanager
def gpu_as_meta():
    """Jobs compiled inside the block place their GPU (any non-CPU) ops on the meta device,
    the passes that rewrite GPU placements only (``fuse_attention``,
    ``fuse_normalization_add_relu``) take their ops (placed on the CPU where CUDA is missing)
    for GPU ones, and kernels compiled by TorchInductor on a GPU are counted as such (module
    docstring); constant folding still computes on the CPU."""
    saved = [(m, m.device_of) for m in (plan_mod, walk_mod, session_mod)]
    folding, gpu_tags, make = fold.rt, rewrite.GPU_TAGS, common.inductor_kernel
    for m, _ in saved:
        m.device_of = lambda op_conf, ids: META
    fold.rt = types.SimpleNamespace(device_of=saved[0][1], is_pure=plan_mod.is_pure,
                                    placements_of=plan_mod.placements_of, run_op=plan_mod.run_op)
    rewrite.GPU_TAGS = gpu_tags + ("cpu",)
    common.inductor_kernel = _counted_inductor_kernel(make)
    try:
        yield
    finally:
        for m, f in saved:
            m.device_of = f
        fold.rt, rewrite.GPU_TAGS, common.inductor_kernel = folding, gpu_tags, make


@contextlib.contextmanager
def amp_float16(module, name):
    """Inside the block ``module.<name>`` (a job's FunctionConfig factory) sets float16 AMP,
    the GPU's AMP type (a CPU's is bfloat16)."""
    make_config = getattr(module, name)

    def config(*args):
        c = make_config(*args)
        c.mixed_precision_data_type(flow.float16)
        return c
    setattr(module, name, config)
    try:
        yield
    finally:
        setattr(module, name, make_config)


def _meta_feed(array):
    return torch.empty(array.shape, dtype=torch.from_numpy(array[:0]).dtype, device=META)


def resnet(o):
    a = resnet50.parse(["--device", "cpu", "--amp", "--channel-last", "--batch-size", "128", "--image-size", "224",
                        "--block-counts", o.block_counts, "--width", "1"])
    flow.clear_default_session()
    with gpu_as_meta(), amp_float16(resnet50.r50, "function_config"):
        plan = resnet50.graphfront_job(resnet50.example_args(a, "plan"), "ResNet50Kernels").compiled_job.plan
        gf = _steady(lambda: plan._fn([]))
    small = resnet50.parse(["--device", "cpu", "--amp", "--batch-size", "2", "--image-size", "32",
                            "--block-counts", o.block_counts, "--width", "1"])
    flow.clear_default_session()
    resnet50.graphfront_job(resnet50.example_args(small, "plan"), "Init").compiled_job   # (the weights, NCHW)
    return gf, _steady(resnet50.torch_step(_weights(), small, False))


def bert(o):
    pretrain = bert_pretrain.pretrain
    a = bert_pretrain.parse(["--device", "cpu", "--amp", "--batch-size", "64", "--layers", str(o.layers),
                             "--heads", "12"])
    args = bert_pretrain.example_args(a, "plan")
    flow.clear_default_session()
    with gpu_as_meta(), amp_float16(pretrain, "GetFunctionConfig"):
        plan = pretrain.make_pretrain_job(args, "BertKernels").compiled_job.plan
        feeds = [_meta_feed(f) for f in pretrain.feeds(pretrain.synthetic_batch(args))]
        gf = _steady(lambda: plan._fn(feeds))
    small = bert_pretrain.parse(["--device", "cpu", "--amp", "--batch-size", "2", "--seq-length", "32",
                                 "--layers", str(o.layers), "--heads", "12"])
    small_args = bert_pretrain.example_args(small, "plan")
    flow.clear_default_session()
    pretrain.make_pretrain_job(small_args, "Init").compiled_job   # (the weights)
    return gf, _steady(bert_pretrain.torch_step(_weights(), small, pretrain.synthetic_batch(small_args), False))


def lenet(o):
    rng = np.random.default_rng(0)
    x = rng.random((o.lenet_batch, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, o.lenet_batch).astype(np.int32)
    lenet_step.B = o.lenet_batch
    flow.clear_default_session()
    with gpu_as_meta():
        plan = lenet_step.build("gpu").compiled_job.plan
        feeds = [_meta_feed(x), _meta_feed(y)]
        gf = _steady(lambda: plan._fn(feeds))
    flow.clear_default_session()
    lenet_step.build("cpu").compiled_job   # (the weights)
    model = lenet_step.torch_model("cpu")
    return gf, _steady(torch_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), x[:4], y[:4]))


def _weights():
    return {k: v.numpy().copy() for k, v in flow.get_all_variables().items()}


def _steady(step, warmup=2):
    for _ in range(warmup):
        step()
    counter = Kernels()
    _ACTIVE.append(counter)
    try:
        with counter:
            step()
    finally:
        _ACTIVE.pop()
    return counter


def main(argv=None):
    """Print the table; returns ``{model: (graphfront's kernels, PyTorch's kernels, graphfront's
    host calls)}`` (host calls: see :class:`Kernels`; none is expected)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,bert,lenet")
    p.add_argument("--block-counts", default="3,4,6,3", help="ResNet-50's blocks per stage")
    p.add_argument("--layers", type=int, default=12, help="BERT's layers")
    p.add_argument("--lenet-batch", type=int, default=1000)
    p.add_argument("--top", type=int, default=10, help="graphfront's heaviest calls to list per model")
    o = p.parse_args(argv)
    from tabulate import tabulate
    counts, rows, details = {}, [], []
    for model in o.models.split(","):
        gf, pt = {"resnet50": resnet, "bert": bert, "lenet": lenet}[model](o)
        n_gf, n_pt = sum(gf.count.values()), sum(pt.count.values())
        counts[model] = n_gf, n_pt, gf.host
        rows.append([model, n_gf, n_pt, f"{n_gf / n_pt:.2f}", len(gf.host), f"{gf.bytes / 1e9:.2f}"])
        details.append((model, gf.where_bytes.most_common(o.top), gf.where))
    print(f"torch {torch.__version__}; aten calls per steady train step other than views (a proxy for GPU kernels)")
    print(tabulate(rows, headers=["model", "graphfront plan (meta device)", "PyTorch eager (CPU)", "ratio",
                                  "graphfront host calls", "graphfront GB moved"], disable_numparse=True))
    for model, (_, _, host) in counts.items():
        if host:
            print(f"{model}: graphfront's step made or copied in host tensors: {host[:10]}")
    for model, heaviest, calls in details:
        print(f"\n{model}: graphfront's calls moving the most memory")
        print(tabulate([[f"{b / 1e9:.2f}", calls[key], *key] for key, b in heaviest],
                       headers=["GB", "calls", "aten op", "graphfront source"], disable_numparse=True))
    return counts


if __name__ == "__main__":
    main()
