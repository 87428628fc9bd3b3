"""File helpers for tests that must prove a directory was left untouched."""
from __future__ import annotations

import hashlib
import os


def tree_digest(root) -> str:
    """SHA-256 over every path name and file content below ``root`` (sorted walk)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        h.update(os.path.relpath(dirpath, root).encode())
        for f in sorted(filenames):
            h.update(f.encode())
            with open(os.path.join(dirpath, f), "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()
