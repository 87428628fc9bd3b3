"""AutoTest summary at the end of a pytest run: draws and skipped draws per file, and
one line per autotest with the op types it exercised when pytest runs with -v (the
project's addopts is -q, so -v brings the verbosity to 0) or GRAPHFRONT_AUTOTEST_SUMMARY=1."""
import os

from graphfront.testing import records

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    per_test = config.getoption("verbose") >= 0 or os.environ.get("GRAPHFRONT_AUTOTEST_SUMMARY") == "1"
    text = records.summary(HERE, per_test=per_test)
    if text:
        terminalreporter.write_sep("-", "graphfront autotest summary")
        terminalreporter.write_line(text)
