"""Statistics of AutoTest runs: draws (per device and per op type), skipped draws, the op
types exercised, upstream torch bugs found, and the mutation score.

Every autotest run adds to one :class:`AutotestRecord` per test function, keyed by
``(source file, qualified name)`` so that a module imported twice (by pytest and by
the coverage test) shares its record. Op types are read from the *completed* Job of
each draw: ``forward`` holds the user ops of the forward pass, ``backward`` those that
autograd emitted; ops of the harness itself (its loss, the optimizer, the train step)
are not counted.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os


@dataclasses.dataclass
class AutotestRecord:
    """What the runs of one autotest did so far (cumulative over runs)."""

    name: str
    file: str
    qualname: str
    draws: int = 0
    skipped: int = 0
    runs: int = 0
    failed_runs: int = 0
    torch_bugs: list = dataclasses.field(default_factory=list)  # notes of draws where torch float32 was wrong
    forward_ops: set = dataclasses.field(default_factory=set)
    backward_ops: set = dataclasses.field(default_factory=set)
    devices: dict = dataclasses.field(default_factory=dict)    # device -> draws run on it
    op_draws: dict = dataclasses.field(default_factory=dict)   # op type -> draws that exercised it

    @property
    def ops(self) -> list:
        """Sorted op types exercised, forward and backward."""
        return sorted(self.forward_ops | self.backward_ops)

    def line(self) -> str:
        """The one-line summary (see :func:`summary_line`)."""
        return summary_line(self.name, self.draws, self.skipped, self.ops, self.devices)


def summary_line(name, draws, skipped, ops, devices=None) -> str:
    """``autotest test_relu: 20 draws (cpu 20), 0 skipped, ops: relu, relu_grad``."""
    on = f" ({', '.join(f'{d} {n}' for d, n in sorted(devices.items()))})" if devices else ""
    return f"autotest {name}: {draws} draws{on}, {skipped} skipped, ops: {', '.join(sorted(ops)) or '(none)'}"


RECORDS: dict = {}
MUTATION: dict = {}  # mutant name -> the failure that caught it, or None (survived); see testing.mutation


@contextlib.contextmanager
def isolated():
    """Runs inside do not count in :data:`RECORDS` (the mutation runs of the AutoTest)."""
    global RECORDS
    saved, RECORDS = RECORDS, {}
    try:
        yield
    finally:
        RECORDS = saved


def record_for(file, qualname, name) -> AutotestRecord:
    """The record of the autotest ``qualname`` defined in ``file`` (created when missing)."""
    key = (os.path.realpath(file), qualname)
    rec = RECORDS.get(key)
    if rec is None:
        rec = RECORDS[key] = AutotestRecord(name, key[0], qualname)
    return rec


def records(directory=None) -> list:
    """All records (or those whose test file lies under ``directory``), sorted by file and name."""
    recs = list(RECORDS.values())
    if directory is not None:
        root = os.path.realpath(directory) + os.sep
        recs = [r for r in recs if r.file.startswith(root)]
    return sorted(recs, key=lambda r: (r.file, r.qualname))


def exercised_op_types(directory=None) -> dict:
    """``{op_type: sorted test names}`` over the records (optionally under ``directory``)."""
    out = {}
    for r in records(directory):
        for t in r.ops:
            out.setdefault(t, set()).add(r.name)
    return {t: sorted(names) for t, names in sorted(out.items())}


def summary(directory=None, per_test=True) -> str:
    """Multi-line summary: per file totals and (optionally) one line per autotest."""
    lines = []
    by_file = {}
    for r in records(directory):
        by_file.setdefault(r.file, []).append(r)
    for file, recs in by_file.items():
        rel = os.path.relpath(file)
        lines.append(f"{rel}: {len(recs)} autotests, {sum(r.draws for r in recs)} draws, "
                     f"{sum(r.skipped for r in recs)} skipped, "
                     f"{sum(len(r.torch_bugs) for r in recs)} upstream torch bugs")
        if per_test:
            lines.extend("  " + r.line() for r in recs)
        lines.extend(f"  {r.name}: {note}" for r in recs for note in r.torch_bugs)
    op_draws = {}
    for r in records(directory):
        for t, n in r.op_draws.items():
            op_draws[t] = op_draws.get(t, 0) + n
    if op_draws:
        lines.append(f"draws per op ({len(op_draws)} op types):")
        line = ""
        for item in (f"{t} {n}" for t, n in sorted(op_draws.items())):
            if line and len(line) + len(item) > 96:
                lines.append(f"  {line},")
                line = ""
            line = f"{line}, {item}" if line else item
        lines.append(f"  {line}")
    lines.extend(mutation_lines())
    return "\n".join(lines)


def mutation_lines() -> list:
    """The mutation score of the mutants run so far (and the survivors), or nothing."""
    if not MUTATION:
        return []
    survivors = sorted(name for name, failure in MUTATION.items() if failure is None)
    caught = len(MUTATION) - len(survivors)
    lines = [f"mutation score: {caught}/{len(MUTATION)} mutants caught ({100.0 * caught / len(MUTATION):.1f} %)"]
    lines.extend(f"  survived: {name}" for name in survivors)
    return lines


def clear() -> None:
    """Forget every record and mutation result (for tests of the framework itself)."""
    RECORDS.clear()
    MUTATION.clear()
