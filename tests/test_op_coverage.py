"""Every registered op type is exercised by some autotest in tests/autotest/.

Run alone, the autotests are imported and run with 2 draws each (draw 0 with the
cleanup passes, draw 1 without); inside the whole suite the records of the autotests
that already ran are reused. Exemptions live in graphfront/testing/coverage.py
(EXEMPT), each with its reason.
"""
import os

from graphfront.testing import coverage

AUTOTEST_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "autotest")
DRAWS = 2


def test_exemptions_name_registered_op_types_and_give_reasons():
    assert coverage.EXEMPT, "the exemption list is empty: update ops cannot be autotested"
    problems = coverage.invalid_exemptions()
    assert not problems, "\n".join(problems)


def test_every_registered_op_type_is_exercised_by_an_autotest():
    result = coverage.collect(AUTOTEST_DIR, n=DRAWS)
    assert result.autotests > 0, f"no autotests found in {AUTOTEST_DIR}"
    missing = coverage.uncovered(result.exercised, coverage.all_registered_op_types())
    assert not missing, coverage.format_report(missing, result, os.path.relpath(AUTOTEST_DIR), DRAWS)
