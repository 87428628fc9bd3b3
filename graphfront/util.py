"""``flow.util``: small helpers of OneFlow's single-client API."""
from graphfront.ops.builder import unique_str  # prefix + a process-wide counter (default op names)

__all__ = ["unique_str"]
