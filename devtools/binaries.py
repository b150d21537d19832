"""Finding the Debian binaries the live tier runs (nginx, redis-server, podman, mmdebstrap, runc)."""

from __future__ import annotations

import shutil
from pathlib import Path


class MissingBinary(RuntimeError):
    """A binary the live tier needs is not installed; the message says how to install it."""


def find_binary(name: str, advice: str) -> str:
    """The path of `name` (on PATH, or in /usr/sbin and /usr/bin, where Debian puts nginx and redis-server)."""
    found = shutil.which(name) or next(
        (str(path) for path in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if path.exists()), None
    )
    if found is None:
        raise MissingBinary(f"`{name}` is not installed: {advice}")
    return found
