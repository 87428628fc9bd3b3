"""Op coverage: every registered op type must be exercised by some autotest.

An op type counts as exercised when it appears in the completed Job of some draw of
an autotest in ``tests/autotest/`` — forward ops directly, backward ops through
``auto_backward`` (see :mod:`graphfront.testing.records`). :func:`collect` reuses the
records of autotests already run in this process and runs the others with a few
draws, so the check works alone and inside the whole suite.

Ops that cannot be autotested are listed in :data:`EXEMPT`, the one place for
exemptions, each with the reason and where it is checked instead.
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
import sys

from graphfront.testing import records as _records
from graphfront.ops.registry import registered_op_types

#: op type -> why no autotest can exercise it (and which tests check it instead).
_UPDATE = ("in-place optimizer update of a variable and its state (no outputs to compare); emitted by the "
           "optimizer pass and checked by tests/test_optimizers.py against torch.optim and numpy references")
EXEMPT = {
    "moving_average_min_max_observer": "updates its moving_max / moving_min variables in place across train steps; "
                                       "emitted by the qat pass and checked by tests/test_qat.py against numpy "
                                       "fake quantization and OneFlow's momentum rule",
    "megatron_gpt_mmap_data_loader": "source op reading Megatron-LM data set files from disk; checked by "
                                     "tests/test_megatron_gpt_loader.py against the token stream cut by numpy",
    "sgd_update": _UPDATE,
    "momentum_update": _UPDATE,
    "adam_update": _UPDATE,
    "adagrad_update": _UPDATE,
    "rmsprop_update": _UPDATE,
    "lars_update": _UPDATE,
    "lamb_update": _UPDATE,
    "indexed_slices_sgd_update": _UPDATE + " (sparse rows; emitted by the indexed-slices optimizer pass)",
    "indexed_slices_momentum_update": _UPDATE + " (sparse rows; emitted by the indexed-slices optimizer pass)",
    "indexed_slices_adam_update": _UPDATE + " (sparse rows; emitted by the indexed-slices optimizer pass)",
    "multi_tensor_sgd_update": _UPDATE + " (the update-grouping pass merges sgd_update ops into it)",
    "multi_tensor_momentum_update": _UPDATE + " (the update-grouping pass merges momentum_update ops into it)",
    "multi_tensor_adam_update": _UPDATE + " (the update-grouping pass merges adam_update ops into it)",
    "multi_scalar_mul_by_tensor": "made only by the group_scalar_mul_by_tensor pass, from the loss-scale undo of the "
                                  "float32 gradients of a dynamic-loss-scale train job; checked by tests/test_passes.py "
                                  "(bit for bit against one scalar_mul_by_tensor each) and its xla and onnx rules by "
                                  "tests/test_xla_rules.py and tests/test_onnx_export.py",
    "multi_cast": "made only by the group_variable_casts pass, from the casts of a mixed-precision job's float32 "
                  "variables; checked by tests/test_passes.py (bit for bit against one cast each) and its xla and onnx "
                  "rules by tests/test_xla_rules.py and tests/test_onnx_export.py",
    "dynamic_loss_scale_schedule": "in-place update of the loss-scale and good-step-counter variables (no outputs); "
                                   "checked by tests/test_amp.py against a numpy model of OneFlow's rule",
    "assign_if": "conditional in-place write of a variable (no outputs); checked by tests/test_amp.py",
    "assign_if_not": "conditional in-place write of a variable (no outputs); advances the train step under dynamic "
                     "loss scaling; checked by tests/test_amp.py",
    **{t: "collective between the devices of a multi-device job (identity on one device); inserted by the "
          "boxing pass and checked by tests/test_distributed.py against the same job on one device"
       for t in ("_nccl_logical_all_reduce", "_nccl_logical_reduce_scatter", "_nccl_logical_all_gather",
                 "_nccl_logical_all_gather_noncontinuous", "_nccl_logical_s2s", "_logical_b_to_s", "_logical_b_to_p")},
    "_boxing_across_placements": "collective moving a blob between placements of different device counts of a "
                                 "multi-device job; inserted by the boxing pass and checked by "
                                 "tests/test_placements.py against numpy and the same training job on one device",
    **{t: "TensorBoard summary op: writes an event file, no outputs to compare; checked by tests/test_summary.py, "
          "which loads the events back with tensorboard's event_processing"
       for t in ("create_summary_writer", "flush_summary_writer", "summary_write_scalar", "summary_write_histogram",
                 "summary_write_image", "summary_write_pb")},
    **{t: "time-shape op: the unroll pass (graphfront/passes/time_shape.py) rewrites it into narrow/concat/add_n "
          "before autograd, so it never reaches a completed Job; checked through flow.repeat/acc/unpack/pack by "
          "tests/autotest/test_time_shape_autotest.py" for t in ("repeat", "acc", "unpack", "pack")},
    "assign": "in-place write of a variable (no outputs to compare); used by the train-step counter of every "
              "train job and checked by the optimizer/train-step tests",
}


@dataclasses.dataclass
class CoverageResult:
    """What :func:`collect` found.

    Attributes:
        exercised: op type -> sorted names of the autotests exercising it.
        autotests: number of autotests found.
        ran: names of the autotests run by ``collect`` (the others had records).
        errors: autotest or file -> first line of the error it raised.
    """

    exercised: dict
    autotests: int
    ran: list
    errors: dict


def autotest_files(directory) -> list:
    """Sorted ``test_*.py`` files of ``directory``."""
    return sorted(glob.glob(os.path.join(directory, "test_*.py")))


def load_module(path):
    """The module of ``path``: the one already imported (by pytest) or a fresh import."""
    path = os.path.realpath(path)
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and os.path.realpath(f) == path:
            return mod
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem not in sys.modules else f"_graphfront_autotest_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    directory = os.path.dirname(path)
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added:
            sys.path.remove(directory)
    return mod


def autotests_in(module) -> list:
    """The :class:`~graphfront.testing.autotest.AutoTest` objects defined in ``module``."""
    found = []
    path = os.path.realpath(getattr(module, "__file__", "") or "")
    for value in vars(module).values():
        at = getattr(value, "autotest", None)
        if at is not None and hasattr(at, "run") and getattr(at, "file", None) == path:
            found.append(at)
    return sorted(found, key=lambda a: a.qualname)


def collect(directory, n=2) -> CoverageResult:
    """Op types exercised by the autotests of ``directory``.

    Autotests with a record from this process are not run again; the others run with
    ``n`` draws. Import errors and failing autotests are reported in ``errors`` (their
    op types still count when their jobs were completed).
    """
    errors, ran, count = {}, [], 0
    for path in autotest_files(directory):
        try:
            module = load_module(path)
        except Exception as e:  # noqa: BLE001 - reported, not fatal to the coverage check
            errors[os.path.basename(path)] = f"import failed: {type(e).__name__}: {e}".splitlines()[0]
            continue
        for at in autotests_in(module):
            count += 1
            rec = _records.RECORDS.get((at.file, at.qualname))
            if rec is not None and rec.runs > 0:
                continue
            ran.append(at.name)
            try:
                at.run(n=n)
            except Exception as e:  # noqa: BLE001 - AssertionError of a failing autotest included
                errors[f"{os.path.basename(at.file)}::{at.name}"] = \
                    f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return CoverageResult(_records.exercised_op_types(directory), count, ran, errors)


def all_registered_op_types() -> list:
    """Every registered op type, including the fused ops that only the passes emit."""
    return registered_op_types()


def uncovered(exercised, registered=None) -> list:
    """Registered op types neither exercised nor exempt, sorted."""
    if registered is None:
        registered = all_registered_op_types()
    return sorted(t for t in registered if t not in exercised and t not in EXEMPT)


def invalid_exemptions(registered=None) -> list:
    """Problems with :data:`EXEMPT`: unregistered op types and empty reasons."""
    if registered is None:
        registered = all_registered_op_types()
    registered = set(registered)
    problems = []
    for op_type, reason in sorted(EXEMPT.items()):
        if op_type not in registered:
            problems.append(f"exempt op type '{op_type}' is not registered")
        if not isinstance(reason, str) or len(reason.strip()) < 10:
            problems.append(f"exempt op type '{op_type}' gives no reason: {reason!r}")
    return problems


def format_report(missing, result: CoverageResult, directory="tests/autotest", n=2) -> str:
    """The failure message of the coverage test: every uncovered op type, one per line."""
    lines = [f"{len(missing)} registered op type(s) are exercised by no autotest in {directory} "
             f"({result.autotests} autotests found, {len(result.exercised)} op types exercised):"]
    if result.ran:
        lines[0] += (f"\n  ({len(result.ran)} of them had not run in this process and ran now with {n} draws: "
                     "draw 0 with the cleanup passes, draw 1 without; an op that only later draws reach shows "
                     "up here, so make each autotest reach its ops in its first draws)")
    lines += [f"  - {t}" for t in missing]
    lines.append("Add an autotest that emits each of them (backward ops through auto_backward), or, when an op "
                 "cannot be autotested, an entry with the reason in graphfront/testing/coverage.py EXEMPT.")
    if result.errors:
        lines.append("autotest errors seen while collecting (their ops may be missing because of them):")
        lines += [f"  - {k}: {v}" for k, v in sorted(result.errors.items())]
    return "\n".join(lines)
