"""The op AutoTest: random draws, a graphfront job and PyTorch eager, compared.

Usage (in ``tests/autotest/test_<area>_autotest.py``)::

    from graphfront.testing import autotest, random, random_tensor

    @autotest(n=20, auto_backward=True, rtol=1e-4, atol=1e-5)
    def test_leaky_relu(check):
        check(graphfront=lambda flow, x, alpha: flow.nn.leaky_relu(x, alpha=alpha),
              torch=lambda torch, x, alpha: torch.nn.functional.leaky_relu(x, alpha),
              x=random_tensor(ndim=4, dim0=random(1, 4), low=-2, high=2),
              alpha=random(0.0, 1.0).to(float))

``@autotest`` turns the body into a zero-argument pytest test that calls it ``n``
times (one *draw* each) with a ``check`` callable. ``check(graphfront=f, torch=g,
compare="values", **kwargs)``:

1. resolves every generator keyword (:mod:`graphfront.testing.generators`); a
   ``nothing()`` keyword is dropped on both sides. The draw's *device* is the value of
   a ``random_device()`` keyword, else drawn (from a generator of its own) among cpu
   and, where present, cuda (``@autotest(devices=("cpu",))`` for host-only ops): the
   graphfront job is placed on it, and the torch side runs under ``with device:`` so
   the tensors its function creates land there too;
2. builds a fresh graphfront job (``flow.clear_default_session()`` first). When
   ``auto_backward`` and some floating tensor input requires grad it is a *train* job:
   those inputs are trainable ``flow.get_variable`` s holding the drawn values
   (``flow.load_variables`` after compilation), the loss is ``sum_i(out_i * v_i)`` over
   the floating outputs, where ``v_i`` is a random *cotangent* (float32, random sign,
   magnitude in [0.5, 1.5), drawn per draw and output, the same array on both sides),
   plus ``0 * sum`` of each trainable input so that every input receives a gradient.
   Input gradients are thus vector-Jacobian products, as ``torch.autograd.gradcheck``
   checks them: a normalising op's gradient is not identically zero and a routing
   error (a permuted, mirrored or transposed gradient) shows. The optimizer is SGD
   with learning rate 0, and each input's gradient is fetched with
   ``flow.watch_diff``. All other tensors are placeholders (0-d ones non-trainable
   variables). Otherwise a *predict* job. A job without random ops runs *twice* on
   the same inputs (variables reloaded): any output or gradient that differs between
   the two runs fails the draw as nondeterministic (bitwise on the CPU; on CUDA, where
   kernels that add with atomics sum in another order each run, beyond the tolerances);
3. runs ``g(torch, **kwargs)`` with the same values (leaf tensors requiring grad) and
   ``backward()`` of the same loss (the same cotangents);
4. compares outputs and gradients (:mod:`graphfront.testing.compare`): each output's
   and gradient's shape and dtype must equal torch's exactly, then the values. When
   both sides raise, the draw is *skipped* (counted); when only one raises, or results
   differ, an AssertionError carries a self-contained reproducer: the seed and draw,
   every resolved argument, the path of an ``.npz`` with the arrays (and the
   cotangents), and runnable graphfront and PyTorch snippets.
5. *float64 arbitration* (``compare="values"`` with some float32 input, on every
   draw): torch runs again with those inputs in float64 and the same cotangents, and a
   draw passes only if graphfront's results are within the tolerances of that
   reference. graphfront's kernels are torch's kernels, so agreeing with torch float32
   is not enough: a float32 bug both sides share fails. When graphfront matches float64
   but torch float32 does not, the draw is an *upstream torch bug*: it is printed and
   counted apart (``RunStats.torch_bugs``, the record's ``torch_bugs``, the pytest
   summary) with a reproducer script of the torch side, and graphfront passes. Two
   float32 results that are each within tolerance of float64 but not of each other
   fail. Random ops' comparers (``"statistics"``, a callable) get no second torch
   sample: their verdict is final.

Even draws compile the job with graphfront's cleanup passes (constant folding,
fusions), odd draws without them (``FunctionConfig.enable_passes(False)``), so both the
fused and the plain kernels are checked and counted.

``check_graph=True`` also verifies, op by op while the job runs, that every user op's
kernel returns tensors with exactly the shape and dtype that shape inference put in
the Job (and on the placed device).

Randomness: draw ``i`` of a test uses ``numpy.random.default_rng([seed, i])``; the seed
is a hash of the test's file name and qualified name, or ``GRAPHFRONT_AUTOTEST_SEED``.
``GRAPHFRONT_AUTOTEST_DRAW=i`` runs only draw ``i``; ``GRAPHFRONT_AUTOTEST_N`` overrides
``n``. torch's and Python's global RNGs are seeded per draw and restored afterwards.

Each run prints ``autotest test_relu: 20 draws (cpu 20), 0 skipped, ops: relu, relu_grad``
and adds to :mod:`graphfront.testing.records` (draws per device and per op type); the
mutation score of :mod:`graphfront.testing.mutation` is kept there too.
"""
import contextlib
import inspect
import math
import os
import random as _pyrandom
import re
import traceback
import zlib

import numpy as np

from graphfront.testing import compare as _compare
from graphfront.testing import records as _records
from graphfront.testing import reproducer as _repro
from graphfront.testing.generators import NOTHING, Device, DrawContext, TensorValue
import graphfront as flow
from graphfront import typing as tp
from graphfront.framework import dtypes as _dt
from graphfront.framework.blob_desc import BlobDesc
from graphfront.framework import session as _session
from graphfront.runtime.plan import Plan
from graphfront.ops.builder import build_op
from graphfront.framework import scope_symbols as _scope
from graphfront.framework.job_builder import TensorDesc
from graphfront.ops import registry
from graphfront.runtime.plan import device_of

__all__ = ["autotest", "AutoTest", "Checker", "HARNESS_PREFIX"]

HARNESS_PREFIX = "AutoTest-"   # names of the harness's own ops (not counted as exercised)
SEED_ENV = "GRAPHFRONT_AUTOTEST_SEED"
DRAW_ENV = "GRAPHFRONT_AUTOTEST_DRAW"
N_ENV = "GRAPHFRONT_AUTOTEST_N"


def autotest(n=20, auto_backward=True, rtol=1e-4, atol=1e-5, check_graph=True, devices=None):
    """Decorator: run the body ``def test_x(check)`` once per draw (see module docstring).

    Args:
        n: number of draws.
        auto_backward: compare input gradients (train job) when some floating tensor
            input requires grad; False -> forward only (predict job).
        rtol, atol: tolerances of the value comparison.
        check_graph: check every kernel's outputs against the inferred BlobDescs.
        devices: the devices a draw may run on (``("cpu",)`` for ops that have only
            a CPU kernel, with the reason beside the test); None: every device present.
    Returns a zero-argument test function with the :class:`AutoTest` as ``.autotest``.
    Also usable bare (``@autotest``).
    """
    if callable(n) and not isinstance(n, int):
        return autotest()(n)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"autotest: n must be a positive int, received {n!r}")

    def decorator(body):
        at = AutoTest(body, n=n, auto_backward=auto_backward, rtol=rtol, atol=atol, check_graph=check_graph,
                      devices=devices)

        def test():
            at.run()

        test.__name__ = body.__name__
        test.__qualname__ = body.__qualname__
        test.__module__ = body.__module__
        test.__doc__ = body.__doc__
        test.autotest = at
        return test
    return decorator


class RunStats:
    """Counters of one run of an autotest: ``draws`` (check calls), ``skipped`` (both sides
    raised), the op types exercised (``forward_ops``, ``backward_ops``, ``ops``) and the
    ``skip_reasons`` (draw, graphfront error, torch error)."""

    def __init__(self):
        self.draws = 0
        self.skipped = 0
        self.forward_ops = set()
        self.backward_ops = set()
        self.skip_reasons = []
        self.torch_bugs = []       # notes of draws where torch float32 was wrong and graphfront right
        self.history = {}          # comparer evidence across the draws (compare.Case.history)
        self.devices = {}          # device -> check calls run on it
        self.op_draws = {}         # op type -> check calls that exercised it

    @property
    def ops(self):
        return sorted(self.forward_ops | self.backward_ops)


class AutoTest:
    """One autotest: its body, settings and :meth:`run`."""

    def __init__(self, body, n=20, auto_backward=True, rtol=1e-4, atol=1e-5, check_graph=True, devices=None):
        params = list(inspect.signature(body).parameters)
        if len(params) != 1:
            raise TypeError(f"@autotest body {body.__qualname__} must take exactly one parameter (check), "
                            f"it takes {params}")
        self.body = body
        self.name = body.__name__
        self.qualname = body.__qualname__
        self.file = os.path.realpath(inspect.getsourcefile(body) or body.__code__.co_filename)
        self.n = n
        self.auto_backward = auto_backward
        self.rtol = rtol
        self.atol = atol
        self.check_graph = check_graph
        if devices is not None and (not devices or set(devices) - {"cpu", "cuda"}):
            raise ValueError(f"@autotest {body.__qualname__}: devices must be a non-empty subset of ('cpu', 'cuda'), "
                             f"received {devices!r}")
        self.devices = tuple(devices) if devices is not None else None
        self.last_run = None

    @property
    def record(self) -> _records.AutotestRecord:
        """This autotest's cumulative :class:`~graphfront.testing.records.AutotestRecord`."""
        return _records.record_for(self.file, self.qualname, self.name)

    def default_seed(self) -> int:
        """crc32 of ``<file name>::<qualified name>``: stable across runs and machines."""
        return zlib.crc32(f"{os.path.basename(self.file)}::{self.qualname}".encode())

    def seed(self) -> int:
        """``GRAPHFRONT_AUTOTEST_SEED`` when set, else :meth:`default_seed`."""
        env = os.environ.get(SEED_ENV)
        return int(env) if env not in (None, "") else self.default_seed()

    def run(self, n=None, seed=None, draws=None) -> RunStats:
        """Run the draws; raise AssertionError on the first failing one.

        ``n`` overrides the number of draws, ``seed`` the seed, ``draws`` selects draw
        indices. Returns the run's :class:`RunStats` (also kept as ``last_run``).
        """
        seed = self.seed() if seed is None else int(seed)
        env_n = os.environ.get(N_ENV)
        total = n if n is not None else (int(env_n) if env_n else self.n)
        if draws is None:
            env_draw = os.environ.get(DRAW_ENV)
            draws = [int(env_draw)] if env_draw not in (None, "") else range(total)
        stats = RunStats()
        self.last_run = stats
        rec = self.record
        failed = True
        try:
            for i in draws:
                ctx = DrawContext(np.random.default_rng([seed, i]))
                checker = Checker(self, ctx, seed, i, total, stats)
                with ctx, _seeded_global_rngs(seed, i):
                    self.body(checker)
                if checker.calls == 0:
                    raise AssertionError(f"autotest {self.name}: the body never called check(...)")
            if stats.draws and stats.skipped == stats.draws:
                reasons = "\n".join(f"  draw {i}: graphfront: {a}\n          torch: {b}"
                                    for i, a, b in stats.skip_reasons[:3])
                raise AssertionError(f"autotest {self.name}: all {stats.draws} draws were rejected by both graphfront "
                                     f"and torch (seed {seed}), so nothing was compared; first reasons:\n{reasons}")
            failed = False
        finally:
            rec.runs += 1
            rec.failed_runs += int(failed)
            rec.draws += stats.draws
            rec.skipped += stats.skipped
            rec.torch_bugs += stats.torch_bugs
            rec.forward_ops |= stats.forward_ops
            rec.backward_ops |= stats.backward_ops
            for into, counts in ((rec.devices, stats.devices), (rec.op_draws, stats.op_draws)):
                for key, count in counts.items():
                    into[key] = into.get(key, 0) + count
        print(_records.summary_line(self.name, stats.draws, stats.skipped, stats.ops, stats.devices))
        return stats


@contextlib.contextmanager
def _seeded_global_rngs(seed, draw):
    """Seed torch's and Python's global RNGs for one draw; restore them afterwards."""
    import torch
    value = int(np.random.SeedSequence([seed, draw]).generate_state(1)[0])
    py_state = _pyrandom.getstate()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(value)
        _pyrandom.seed(value)
        try:
            yield
        finally:
            _pyrandom.setstate(py_state)


# ------------------------------------------------------------------ one check

class _SideResult:
    def __init__(self):
        self.outputs = None
        self.grads = {}
        self.error = None          # formatted traceback
        self.error_line = None     # "ExcType: message" (first line)
        self.graph_problems = []
        self.cotangents = {}       # output index -> the float32 upstream gradient of a train draw
        self.dtypes = []           # output dtype names (graphfront: declared blob dtypes)
        self.nondeterministic = []  # graphfront: what a second run of the same job computed differently
        self.forward_ops = None    # op types exercised (graphfront side, once compiled)
        self.backward_ops = None


def _format_error(exc) -> tuple:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    first = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return tb, first


def _leaves(resolved):
    """[(leaf name, TensorValue)] in kwarg order; lists/tuples give ``name_0``, ``name_1``."""
    out = []

    def walk(value, name):
        if isinstance(value, TensorValue):
            out.append((name, value))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{name}_{i}")
    for k, v in resolved.items():
        walk(v, k)
    return out


def _substitute(value, by_id):
    if isinstance(value, TensorValue):
        return by_id[id(value)]
    if isinstance(value, list):
        return [_substitute(v, by_id) for v in value]
    if isinstance(value, tuple):
        return tuple(_substitute(v, by_id) for v in value)
    return value


def _flatten(value, leaf_type, side):
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _flatten(v, leaf_type, side)]
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in _flatten(value[k], leaf_type, side)]
    if not isinstance(value, leaf_type):
        raise TypeError(f"the {side} function must return a tensor or a (nested) tuple/list of tensors, "
                        f"returned {type(value).__name__} {value!r}")
    return [value]


class Checker:
    """The ``check`` callable an autotest body receives (one per draw).

    Attributes: ``draw`` (index), ``seed``, ``rng`` (the draw's numpy Generator).
    """

    def __init__(self, test: AutoTest, ctx: DrawContext, seed, draw, total, stats):
        self.test = test
        self.ctx = ctx
        self.seed = seed
        self.draw = draw
        self.total = total
        self.stats = stats
        self.calls = 0

    @property
    def rng(self):
        """The draw's ``numpy.random.Generator`` (for values the generators cannot express)."""
        return self.ctx.rng

    def _draw_device(self) -> Device:
        """cpu or cuda (where present and allowed by the autotest's ``devices``), from a
        generator of its own: the other values of a draw do not depend on the devices."""
        import torch
        present = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
        choices = [d for d in present if self.test.devices is None or d in self.test.devices]
        if not choices:
            raise RuntimeError(f"autotest {self.test.name}: none of its devices {self.test.devices} is present")
        rng = np.random.default_rng([self.seed, self.draw, self.calls, 0xDE7])
        return Device(choices[int(rng.integers(0, len(choices)))])

    def __call__(self, graphfront, torch, compare="values", **kwargs):
        """Run one dual check (see module docstring). Returns the :class:`Case`, or None when skipped."""
        if not callable(graphfront) or not callable(torch):
            raise TypeError("check(graphfront=f, torch=g, ...) needs two callables f(flow, **kw) and g(torch, **kw)")
        self.calls += 1
        self.stats.draws += 1
        t = self.test
        resolved = {}
        for k, v in kwargs.items():
            r = self.ctx.resolve(v)
            if r is not NOTHING:
                resolved[k] = r
        leaves = _leaves(resolved)
        device = next((v for v in resolved.values() if isinstance(v, Device)), None) or self._draw_device()
        self.stats.devices[device] = self.stats.devices.get(device, 0) + 1
        train = bool(t.auto_backward and any(tv.requires_grad for _, tv in leaves))
        passes = self.draw % 2 == 0
        cotangent = _cotangents(self.seed, self.draw, self.calls)
        # a rerun is bitwise on the CPU; CUDA kernels that add with atomics (scatter-add gradients,
        # pooling and upsampling backward) sum in another order each run: there, within tolerance
        rerun = (True if device == "cpu" else (t.rtol, t.atol)) if compare == "values" else False
        gf = _run_graphfront(graphfront, resolved, leaves, train, device, t.check_graph, passes, cotangent,
                             rerun=rerun)
        th = _run_torch(torch, resolved, leaves, train, device, cotangent)
        if gf.forward_ops is not None:
            self.stats.forward_ops |= gf.forward_ops
            self.stats.backward_ops |= gf.backward_ops
            for op_type in gf.forward_ops | gf.backward_ops:
                self.stats.op_draws[op_type] = self.stats.op_draws.get(op_type, 0) + 1
        report = dict(f=graphfront, g=torch, resolved=resolved, leaves=leaves, train=train, device=device,
                      gf=gf, th=th, compare=compare, passes=passes)
        if gf.error and th.error:
            self.stats.skipped += 1
            self.stats.skip_reasons.append((self.draw, gf.error_line, th.error_line))
            return None
        if gf.error:
            self._fail([f"graphfront raised {gf.error_line}\n  while torch ran; graphfront traceback:\n"
                        + _indent(_tail(gf.error))], report)
        if th.error:
            self._fail([f"torch raised {th.error_line}\n  while graphfront ran; torch traceback:\n"
                        + _indent(_tail(th.error))], report)
        case = _compare.Case(kwargs=_arrays(resolved), inputs={leaf: tv.array for leaf, tv in leaves},
                             outputs=gf.outputs, grads=gf.grads, torch_outputs=th.outputs, torch_grads=th.grads,
                             train=train, rtol=t.rtol, atol=t.atol, cotangents=th.cotangents,
                             history=self.stats.history, dtypes=gf.dtypes, torch_dtypes=th.dtypes)
        problems = list(gf.graph_problems) + list(gf.nondeterministic) + _compare.structure_problems(case)
        if not problems:
            problems = _compare.run_comparer(compare, case)
            if compare == "values":  # a random op's comparer gets no second torch sample
                problems = self._arbitrate(problems, case, report, cotangent)
        if problems:
            self._fail(problems, report)
        return case

    def _arbitrate(self, problems, case, r, cotangent) -> list:
        """The float64 verdict on a draw whose inputs include float32 tensors (see module
        docstring); returns the draw's problems (empty: it passes)."""
        ref, why = _float64_reference(r["g"], r["resolved"], r["leaves"], r["train"], r["device"], case, cotangent)
        if ref is None:
            return problems + ([f"float64 arbitration: {why}"] if problems else [])
        gf_ref = _against(case, case.outputs, case.grads, ref, "graphfront")
        th_ref = _against(case, case.torch_outputs, case.torch_grads, ref, "torch float32")
        if gf_ref:
            other = ("torch float32 agrees with float64" if not th_ref else
                     "torch float32 differs from float64 as well: " + "; ".join(th_ref))
            return problems + [f"float64 arbitration: {GRAPHFRONT_WRONG}: graphfront differs from the float64 "
                               f"reference ({'; '.join(gf_ref)}); {other}"]
        if problems and th_ref:
            self._torch_bug(th_ref, r)
            return []
        if problems:
            return problems + ["float64 arbitration: both float32 results are within tolerance of the float64 "
                               "reference but not of each other"]
        return []

    def _torch_bug(self, th_ref, r):
        """Count and print an upstream torch bug (graphfront right, torch float32 wrong) with its reproducer."""
        t = self.test
        npz = self._save(r)
        script = npz[:-len(".npz")] + "_torch.py"
        with open(script, "w") as fh:
            fh.write(_repro.torch_snippet(g=r["g"], kwargs=r["resolved"], leaves=r["leaves"], train=r["train"],
                                          device=r["device"], npz=npz, rtol=t.rtol, atol=t.atol,
                                          header=f"upstream torch bug: autotest {t.name}, draw {self.draw}, "
                                                 f"seed {self.seed}"))
        note = (f"draw {self.draw} (seed {self.seed}, {r['device']}): {TORCH_BUG}: graphfront matches the float64 "
                f"reference, torch float32 does not ({'; '.join(th_ref)}); reproducer: {script}")
        self.stats.torch_bugs.append(note)
        print(f"autotest {t.name}: {note}")

    def _save(self, r) -> str:
        """The .npz of a draw: inputs, cotangents and both sides' results."""
        arrays = {leaf: tv.array for leaf, tv in r["leaves"]}
        for i, v in r["th"].cotangents.items():
            arrays[f"cotangent_{i}"] = v
        for side, res in (("graphfront", r["gf"]), ("torch", r["th"])):
            for i, o in enumerate(res.outputs or []):
                arrays[f"{side}_out_{i}"] = o
            for name, g in res.grads.items():
                arrays[f"{side}_grad_{name}"] = g
        return _repro.save_arrays(f"{self.test.name}_seed{self.seed}_draw{self.draw}", arrays)

    def _fail(self, problems, r):
        t = self.test
        leaves = r["leaves"]
        leaf_of = {id(tv): leaf for leaf, tv in leaves}
        npz = self._save(r)
        rel = os.path.relpath(t.file) if not os.path.relpath(t.file).startswith("..") else t.file
        header = f"autotest {t.name} ({rel}), draw {self.draw}, seed {self.seed}"
        mode = r["compare"] if isinstance(r["compare"], str) else getattr(r["compare"], "__qualname__", "custom")
        common = dict(kwargs=r["resolved"], leaves=leaves, train=r["train"], device=r["device"], npz=npz,
                      rtol=t.rtol, atol=t.atol, header=header)
        gf_src = _repro.graphfront_snippet(f=r["f"], passes=r["passes"], **common)
        th_src = _repro.torch_snippet(g=r["g"], **common)
        kw_lines = "\n".join(f"  {k} = {_repro.describe(v, leaf_of)}" for k, v in r["resolved"].items()) or "  (none)"
        lines = [
            f"AutoTest failure: {header} ({self.total} draws per run)",
            f"  rerun this draw only: {SEED_ENV}={self.seed} {DRAW_ENV}={self.draw} python -m pytest {rel} -k {t.name}",
            f"  job: {'train (outputs and input gradients compared)' if r['train'] else 'predict (forward only)'}, "
            f"cleanup passes {'on' if r['passes'] else 'off'}, compare={mode}, rtol={t.rtol}, atol={t.atol}, "
            f"device={r['device']}",
            "problems:",
            *("  - " + p.replace("\n", "\n    ") for p in problems),
            "arguments:",
            kw_lines,
            f"arrays saved to: {npz}",
            "  (inputs under their names; results as graphfront_out_<i>, torch_out_<i>, graphfront_grad_<name>, "
            "torch_grad_<name>; the upstream gradient of output <i> as cotangent_<i>)",
            "---------------- graphfront reproducer ----------------",
            gf_src.rstrip(),
            "---------------- torch reproducer ----------------",
            th_src.rstrip(),
            "----------------------------------------------------",
        ]
        raise AssertionError("\n".join(lines))


def _cotangents(seed, draw, call):
    """``cotangent(i, shape)``: the upstream gradient of output ``i`` in check call ``call`` of a draw.

    float32 values of random sign and magnitude in [0.5, 1.5), drawn from their own
    generator (``[seed, draw, call, i]``), so both sides (and the float64 reference)
    receive the same array whatever else the draw consumed, and no element is close to 0
    (a comparer may divide a gradient by it).
    """
    def cotangent(i, shape):
        rng = np.random.default_rng([seed, draw, call, i, 0xC07])
        magnitude = rng.uniform(0.5, 1.5, size=shape)
        return np.where(rng.random(size=shape) < 0.5, -magnitude, magnitude).astype(np.float32)
    return cotangent


def _indent(text):
    return "\n".join("  " + ln for ln in text.splitlines())


def _tail(tb, n=24):
    lines = tb.rstrip().splitlines()
    return "\n".join(lines if len(lines) <= n else ["..."] + lines[-n:])


def _arrays(value):
    if isinstance(value, TensorValue):
        return value.array
    if isinstance(value, dict):
        return {k: _arrays(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_arrays(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_arrays(v) for v in value)
    return value


# ------------------------------------------------------------------ float64 arbitration

TORCH_BUG = "upstream torch bug"
GRAPHFRONT_WRONG = "graphfront is wrong here"


def _float64_reference(g, resolved, leaves, train, device, case, cotangent) -> tuple:
    """torch's results with the float32 inputs widened to float64 (the same cotangents),
    narrowed back to torch float32's output and gradient dtypes: ``((outputs, grads), None)``,
    or ``(None, why)`` when there is no float32 input or torch cannot run in float64."""
    wide = {id(tv): TensorValue(tv.array.astype(np.float64), tv.requires_grad)
            for _, tv in leaves if tv.dtype == np.float32}
    if not wide:
        return None, "no float32 input, nothing to widen"
    by_id = {id(tv): wide.get(id(tv), tv) for _, tv in leaves}
    resolved64 = {k: _substitute(v, by_id) for k, v in resolved.items()}
    ref = _run_torch(g, resolved64, _leaves(resolved64), train, device, cotangent)
    if ref.error:
        return None, f"impossible: torch raised {ref.error_line} on float64 inputs"
    outputs = [np.asarray(v).astype(like.dtype) if like.dtype.kind == "f" else np.asarray(v)
               for v, like in zip(ref.outputs, case.torch_outputs)]
    grads = {k: v.astype(case.torch_grads[k].dtype) if k in case.torch_grads else v for k, v in ref.grads.items()}
    return (outputs, grads), None


def _against(case, outputs, grads, ref, side) -> list:
    """Problems of one side's results (``side`` names it) against the float64 reference."""
    ref_outputs, ref_grads = ref
    c = _compare.Case(kwargs=case.kwargs, inputs=case.inputs, outputs=outputs, grads=grads,
                      torch_outputs=ref_outputs, torch_grads=ref_grads, train=case.train, rtol=case.rtol,
                      atol=case.atol, cotangents=case.cotangents)
    found = _compare.structure_problems(c) or _compare.value_problems(c)
    # the comparer calls its sides "graphfront" and "torch": here they are `side` and float64
    return [re.sub(r"\b(graphfront|torch)\b", lambda m: side if m.group(1) == "graphfront" else "float64", p)
            for p in found]


# ------------------------------------------------------------------ graphfront side

def _run_graphfront(f, resolved, leaves, train, device, check_graph, passes=True, cotangent=None, rerun=False):

    res = _SideResult()
    try:
        flow.clear_default_session()
        trainable = [(leaf, tv) for leaf, tv in leaves if train and tv.requires_grad]
        variables = [(leaf, tv) for leaf, tv in leaves if (train and tv.requires_grad) or tv.array.ndim == 0]
        var_ids = {id(tv) for _, tv in variables}
        fed = [(leaf, tv) for leaf, tv in leaves if id(tv) not in var_ids]
        tag = "gpu" if device == "cuda" else "cpu"
        grads = res.grads

        def keep_grad(leaf):
            def handler(g):
                grads[leaf] = np.array(g, copy=True)
            handler.__annotations__ = {"g": tp.Numpy}
            return handler

        def job_fn(*feeds):
            blobs = {}
            with flow.scope.placement(tag, "0:0"):
                for (leaf, tv), blob in zip(fed, feeds):
                    blobs[id(tv)] = blob
                for leaf, tv in variables:
                    dtype = _dt.from_numpy(tv.dtype)
                    blobs[id(tv)] = flow.get_variable(
                        HARNESS_PREFIX + "Var-" + leaf, shape=tuple(tv.shape), dtype=dtype,
                        initializer=flow.zeros_initializer(dtype), trainable=train and tv.requires_grad)
                kwargs = {k: _substitute(v, blobs) for k, v in resolved.items()}
                outs = _flatten(f(flow, **kwargs), BlobDesc, "graphfront")
                res.dtypes = [_dtype_name(o.dtype.torch) if o.dtype.torch is not None else o.dtype.name for o in outs]
                if train:
                    loss = _harness_loss(outs, [(leaf, blobs[id(tv)]) for leaf, tv in trainable], cotangent,
                                         res.cotangents)
                    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]),
                                       momentum=0).minimize(loss)
                    for leaf, tv in trainable:
                        flow.watch_diff(blobs[id(tv)], keep_grad(leaf))
            return tuple(outs)

        params = [inspect.Parameter(f"in_{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                     annotation=tp.Numpy.Placeholder(tuple(tv.shape), dtype=_dt.from_numpy(tv.dtype)))
                  for i, (_, tv) in enumerate(fed)]
        job_fn.__signature__ = inspect.Signature(params, return_annotation=tp.Bundle[tp.Numpy])
        job_fn.__name__ = job_fn.__qualname__ = "autotest_job"
        config = flow.FunctionConfig()
        config.default_placement_scope(flow.scope.placement(tag, "0:0"))
        config.enable_passes(passes)
        gfn = flow.global_function(type="train" if train else "predict", function_config=config)(job_fn)
        compiled = gfn.compiled_job
        res.forward_ops, res.backward_ops = exercised_ops(compiled.job)
        if check_graph:
            session = _session.default_session()
            compiled.plan = Plan(compiled.job, session.variables, session.watchers,
                                 kernel_wrapper=_graph_checker(compiled.job, res.graph_problems))
        values = {HARNESS_PREFIX + "Var-" + leaf: tv.array for leaf, tv in variables}
        values.update({f"{HARNESS_PREFIX}Cotangent-{i}": v for i, v in res.cotangents.items()})
        if values:
            flow.load_variables(values)
        outs = gfn(*[tv.array for _, tv in fed])
        res.outputs = [np.array(o, copy=True) for o in outs]
        if rerun and not any(registry.lookup(t).random for t in res.forward_ops | res.backward_ops):
            first = dict(grads)
            if values:  # the same variable values again (a NaN gradient times learning rate 0 is NaN)
                flow.load_variables(values)
            again = [np.asarray(o) for o in gfn(*[tv.array for _, tv in fed])]
            res.nondeterministic = _differences(res.outputs, first, again, grads,
                                                None if rerun is True else rerun)
            grads.clear()
            grads.update(first)
    except Exception as e:  # noqa: BLE001 - a raising side is a result, compared with the other side
        res.error, res.error_line = _format_error(e)
    return res


def _differences(outputs, grads, outputs2, grads2, tolerance=None) -> list:
    """Problems naming each output or gradient that two runs of the same job computed
    differently: bitwise, or within ``tolerance`` ``(rtol, atol)`` for floating values."""
    def same(a, b):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if tolerance is not None and a.dtype.kind in "fc":
            return np.allclose(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), b, rtol=tolerance[0],
                               atol=tolerance[1], equal_nan=True)
        return (np.array_equal(a, b, equal_nan=a.dtype.kind in "fc") if a.dtype.kind in "fciub" else
                a.tolist() == b.tolist())
    found = [f"output[{i}]" for i, (a, b) in enumerate(zip(outputs, outputs2)) if not same(a, np.asarray(b))]
    found += [f"gradient of '{k}'" for k in sorted(grads) if k not in grads2 or not same(grads[k], grads2[k])]
    return [f"nondeterministic: a second run of the same job on the same inputs gave another {what}"
            for what in found]


def _harness_loss(outs, trainable, cotangent, cotangents):
    """sum_i(out_i * v_i) over the floating outputs + 0 * sum of each trainable input, as one float32 scalar.

    ``v_i = cotangent(i, shape)`` is a non-trainable float32 variable (recorded in
    ``cotangents[i]``, loaded after compilation; the float operand of a ``scalar_mul`` for
    a 0-d output), so input gradients are the vector-Jacobian products with those random
    upstream gradients.
    """

    def f32(blob, tag):
        if blob.dtype is _dt.float32:
            return blob
        return build_op("cast", {"in": blob}, {"dtype": _dt.float32}, name=f"{HARNESS_PREFIX}{tag}-Cast")

    def total(blob, tag):
        if not len(blob.shape):
            return blob
        return build_op("reduce_sum", {"input_tensor": blob}, {"axis": list(range(len(blob.shape))),
                                                               "keepdims": False},
                        outputs=("output_tensor",), name=f"{HARNESS_PREFIX}{tag}-ReduceSum")

    terms = []
    for i, o in enumerate(outs):
        if not o.dtype.is_floating_point:
            continue
        if o.is_dynamic:
            raise NotImplementedError(f"AutoTest: output {i} has a dynamic shape; its cotangent cannot be drawn "
                                      f"before the job runs")
        v = cotangent(i, tuple(o.shape))
        if not v.ndim:  # a 0-d output: the cotangent is the float operand of a scalar_mul
            terms.append(build_op("scalar_mul", {"in": f32(o, f"Loss-{i}")},
                                  {"has_float_operand": True, "float_operand": float(v)},
                                  name=f"{HARNESS_PREFIX}Loss-{i}-ScalarMul"))
            continue
        cotangents[i] = v
        var = flow.get_variable(f"{HARNESS_PREFIX}Cotangent-{i}", shape=v.shape, dtype=_dt.float32,
                                initializer=flow.zeros_initializer(_dt.float32), trainable=False)
        prod = build_op("multiply", {"x": f32(o, f"Loss-{i}"), "y": var}, name=f"{HARNESS_PREFIX}Loss-{i}-Multiply")
        terms.append(total(prod, f"Loss-{i}"))
    for leaf, blob in trainable:
        s = f32(total(blob, f"Zero-{leaf}"), f"Zero-{leaf}")
        terms.append(build_op("scalar_mul", {"in": s}, {"has_float_operand": True, "float_operand": 0.0},
                              name=f"{HARNESS_PREFIX}Zero-{leaf}-ScalarMul"))
    if len(terms) == 1:
        return terms[0]
    return build_op("add_n", {"in": terms}, name=f"{HARNESS_PREFIX}Loss-AddN")


def exercised_ops(job) -> tuple:
    """(forward, backward) sets of user op types of a completed Job, without the harness's ops.

    Ops whose names contain ``AutoTest-`` (the harness's loss, its gradients, the
    gradient sums of its variables, constants folded from them) and ops of the
    optimizer pass are left out; the calculation pass of each op's scope tells forward
    from backward.
    """
    forward, backward = set(), set()
    for op in job.net.op:
        if op.WhichOneof("op_type") != "user_conf" or HARNESS_PREFIX in op.name:
            continue
        sym = _scope.SYMBOLS.get(op.scope_symbol_id)
        pass_name = sym.calculation_pass_name if sym is not None else "forward_pass"
        if pass_name == "backward_pass":
            backward.add(op.user_conf.op_type_name)
        elif pass_name != "optimizer_pass":
            forward.add(op.user_conf.op_type_name)
    return forward, backward


def _graph_checker(job, problems):
    """A Plan ``kernel_wrapper`` comparing kernel outputs with the Job's inferred BlobDescs."""

    descs = job.helper.lbn2logical_blob_desc
    ids = {n: tuple(g.parallel_conf.device_name) for g in job.placement.placement_group for n in g.op_set.op_name}

    def wrap(op, fn):
        if op.WhichOneof("op_type") != "user_conf":
            return fn
        opdef = registry.lookup(op.user_conf.op_type_name)
        if not opdef.outputs:
            return fn
        uc = op.user_conf
        device = device_of(op, ids.get(op.name, ("0:0",)))
        declared = [(a, list(uc.output[a.name].s) if a.name in uc.output else []) for a in opdef.outputs]

        def checked(*args):
            result = fn(*args)
            values = [result] if len(opdef.outputs) == 1 else list(result)
            for (adef, lbns), value in zip(declared, values):
                if not lbns:
                    continue
                tensors = list(value) if adef.repeated else [value]
                for lbn, t in zip(lbns, tensors):
                    _check_blob(op, lbn, t, TensorDesc.from_proto(descs[lbn]), device, problems)
            return result
        return checked
    return wrap


def _check_blob(op, lbn, t, desc, device, problems):
    import torch
    where = f"op '{op.name}' ({op.user_conf.op_type_name}) output '{lbn}'"
    if desc.dtype.torch is None:  # record / tensor_buffer blobs: a list of one host object per element
        n = math.prod(desc.shape)
        if not isinstance(t, list) or not (len(t) <= n if desc.is_dynamic else len(t) == n):
            problems.append(f"check_graph: {where}: inferred {desc.dtype.name} {tuple(desc.shape)}, the kernel "
                            f"returned {type(t).__name__} of {len(t) if isinstance(t, list) else '?'} elements")
        return
    if not isinstance(t, torch.Tensor):
        problems.append(f"check_graph: {where}: the kernel returned {type(t).__name__}, not a tensor")
        return
    shape = tuple(t.shape)
    if desc.is_dynamic:
        ok = len(shape) == len(desc.shape) and all(a <= b for a, b in zip(shape, desc.shape))
    else:
        ok = shape == tuple(desc.shape)
    if not ok:
        problems.append(f"check_graph: {where}: inferred shape {tuple(desc.shape)}, the kernel returned {shape}")
    if desc.dtype.torch is not t.dtype:
        problems.append(f"check_graph: {where}: inferred dtype {desc.dtype.name}, the kernel returned {t.dtype}")
    if t.device.type != device.type:
        problems.append(f"check_graph: {where}: placed on {device}, the kernel returned a tensor on {t.device}")


# ------------------------------------------------------------------ torch side

def _run_torch(g, resolved, leaves, train, device, cotangent=None):
    import torch
    res = _SideResult()
    try:
        dev = torch.device("cuda" if device == "cuda" else "cpu")
        tensors = {}
        trainable = []
        for leaf, tv in leaves:
            t = torch.from_numpy(tv.array.copy()).to(dev)
            if train and tv.requires_grad:
                t.requires_grad_(True)
                trainable.append((leaf, t))
            tensors[id(tv)] = t
        kwargs = {k: _substitute(v, tensors) for k, v in resolved.items()}
        # tensors the reference creates itself (torch.zeros, torch.tensor ...) land on the draw's device
        with dev, torch.enable_grad() if train else torch.no_grad():
            raw = g(torch, **kwargs)
            outs = [o if isinstance(o, torch.Tensor) else torch.as_tensor(o)
                    for o in _flatten(raw, (torch.Tensor, int, float, bool), "torch")]
            if train:
                loss = torch.zeros((), dtype=torch.float32, device=dev)
                for i, o in enumerate(outs):
                    if o.is_floating_point():
                        v = res.cotangents[i] = cotangent(i, tuple(o.shape))
                        loss = loss + (o.float() * torch.from_numpy(v).to(o.device)).sum()
                loss = loss + sum(t.sum().float() * 0.0 for _, t in trainable)
                loss.backward()
        res.outputs = [_to_numpy(o) for o in outs]
        res.dtypes = [_dtype_name(o.dtype) for o in outs]
        for leaf, t in trainable:
            res.grads[leaf] = _to_numpy(t.grad) if t.grad is not None else np.zeros(t.shape, dtype=_to_numpy(t).dtype)
    except Exception as e:  # noqa: BLE001 - a raising side is a result
        res.error, res.error_line = _format_error(e)
    return res


def _dtype_name(torch_dtype) -> str:
    """``float32`` for ``torch.float32``."""
    return str(torch_dtype).replace("torch.", "")


def _to_numpy(t):
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy().copy()
