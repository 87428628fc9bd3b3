"""The process environment settings that ``flow.env`` records (machines, control and data ports,
log directory), read by the multi-device runtime's rendezvous."""
from __future__ import annotations

STATE = {"initialized": False, "conf": {}}


def current_env() -> dict:
    """The settings recorded by the setters of ``flow.env`` (a copy)."""
    return dict(STATE["conf"])
