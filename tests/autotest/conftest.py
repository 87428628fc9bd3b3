"""AutoTest summary at the end of a pytest run: draws and skipped draws per file
(and, with -v, one line per autotest with the op types it exercised)."""
import os

from graphfront.testing import records

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    text = records.summary(HERE, per_test=config.getoption("verbose") > 0)
    if text:
        terminalreporter.write_sep("-", "graphfront autotest summary")
        terminalreporter.write_line(text)
