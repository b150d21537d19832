"""An exclusive lock on a file, so that concurrent processes install into the shared cache one at a time.

Used by ``devtools.openwebui_local`` and ``devtools.npm_tools``: each checks its marker file, takes the lock, checks
the marker again (another process may have finished meanwhile), and only then installs. Only the standard library.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created with its folders if missing) for the ``with`` block.

    When another process holds it, ``on_wait`` is called once (to say so) before blocking until it is free.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
