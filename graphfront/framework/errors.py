"""Errors raised by graphfront, and how they point at the user's own source line.

Every error raised while a job is built or fed names the op (or argument), what was
expected and what was received, and ends with the user's line (the innermost stack
frame outside the graphfront package), so that a user sees ``at train.py:42`` rather
than a trace into the compiler.
"""
from __future__ import annotations

import contextlib
import linecache
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class GraphfrontError(Exception):
    """Base class of graphfront's own errors."""


class JobBuildError(GraphfrontError, ValueError):
    """A job could not be built: bad op type, argument, attr, shape, dtype or placement."""


class FeedError(GraphfrontError, ValueError):
    """A job was called with inputs that do not match its placeholders."""


class ArgumentError(JobBuildError, TypeError):
    """A public API function (``flow.reshape``, ``flow.nn.conv2d``, ``tp.Numpy.Placeholder`` ...)
    was called with a bad argument. The message names the function and the argument, what
    was expected and what was received; the user's line is appended here, so every API
    wrapper raises ``ArgumentError(message)`` and nothing else. It is both a ``ValueError``
    and a ``TypeError``, so callers catching either built-in keep working.
    """

    def __init__(self, message: str):
        super().__init__(message + format_location(user_frame()))


class OpRunError(GraphfrontError, RuntimeError):
    """A compiled job failed while running because of the values fed to it (e.g. a class
    label outside ``[0, depth)``); the message names the op and input, what was expected
    and what was received, and the user's line that called the job."""

    def __init__(self, message: str):
        self.message = message  # (without the user's line)
        super().__init__(message + format_location(user_frame()))


class DeviceMemoryError(GraphfrontError, RuntimeError):
    """A compiled job ran out of device (GPU) memory; the message names the job and the
    memory the failed allocation asked for. The session stays usable: the job's
    intermediate tensors are freed, and a smaller job (or batch) can run."""

    def __init__(self, message: str):
        super().__init__(message + format_location(user_frame()))


class OpCheckError(Exception):
    """Raised inside shape inference or attr checks; turned into a JobBuildError by the caller."""


_INSIDE: dict = {}  # code filename -> whether it is inside the package (perf: abspath once per file)


def printable(text) -> str:
    """``text`` with each non-printable character (line breaks, NUL, ...) escaped as in a
    ``repr``: for messages that quote a file's contents (a parser's error)."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _inside(filename) -> bool:
    inside = _INSIDE.get(filename)
    if inside is None:
        inside = _INSIDE[filename] = (filename.startswith("<graphfront")  # generated plans
                                      or os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)
                                      or filename == contextlib.__file__)  # a `with` entering graphfront's scope
    return inside


def user_frame(skip_package: bool = True):
    """Return ``(filename, lineno, function, source)`` of the innermost frame outside graphfront
    (and outside ``contextlib``, whose ``__enter__`` runs graphfront's context managers).

    Falls back to the outermost frame when every frame is inside the package (e.g. a
    job built by graphfront's own examples is still attributed to the example file).
    """
    frame = sys._getframe(1)
    last = None
    while frame is not None:
        filename = frame.f_code.co_filename
        last = frame
        if not (skip_package and _inside(filename)) and not filename.startswith("<frozen"):
            break
        frame = frame.f_back
    frame = frame or last
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    lineno = frame.f_lineno
    source = linecache.getline(filename, lineno).strip()
    return filename, lineno, frame.f_code.co_name, source


def format_location(loc) -> str:
    if not loc:
        return ""
    filename, lineno, func, source = loc
    text = f"\n  at {filename}:{lineno} in {func}"
    if source:
        text += f"\n    {source}"
    return text
