"""Code blocks of README.md and docs/ run as tests (pytest-markdown-docs): each in a fresh
session, with its own temporary working directory (what a block writes stays there)."""
import pytest


@pytest.fixture(autouse=True)
def _markdown_block_sandbox(request, tmp_path, monkeypatch):
    if request.node.path.suffix != ".md":
        yield
        return
    import graphfront as flow
    flow.clear_default_session()
    monkeypatch.chdir(tmp_path)
    yield
    flow.clear_default_session()
