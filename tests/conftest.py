import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "lenet"))

import graphfront as flow  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_session():
    """Every test starts with a new default session (as flow.unittest.TestCase does)."""
    flow.clear_default_session()
    yield
    flow.clear_default_session()
