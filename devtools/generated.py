"""Writing a generated file, or checking that it is current (`--check`), for the devtools that render one."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(path: Path, text: str, *, check: bool, command: str, wrote: str) -> int:
    """With `check`: 0 when `path` holds `text`, else 1 with a line on stderr naming `command`. Without: write it."""
    if check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is stale: run {command}", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} ({wrote})")
    return 0
