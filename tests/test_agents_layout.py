"""AGENTS.md's layout table names every module of the package, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "openwebui_rag_mcp"


def _rows() -> set[str]:
    text = (ROOT / "AGENTS.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", layout, flags=re.MULTILINE))


def _modules() -> set[str]:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.name == "__init__.py" and relative.parent != Path("."):
            names.add(f"{relative.parent.as_posix()}/")  # a subpackage's row is the folder
        else:
            names.add(relative.as_posix())
    return names


def test_every_module_has_a_row() -> None:
    assert _modules() - _rows() == set()


def test_every_row_is_a_module() -> None:
    assert _rows() - _modules() == set()
