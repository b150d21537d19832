"""The test suite's own shape: shared doubles in support modules (no test module imports another one), and
timings passed in as values, never patched module-private or timing constants."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def is_test_module(name: str) -> bool:
    """Whether a dotted module name is a test module pytest collects (`tests.test_x`, `tests.live.test_y`)."""
    return name.split(".")[-1].startswith("test_")


def imported_modules(path: Path) -> list[str]:
    """Every module `path` imports by name, absolute or relative (a relative `from . import test_x` counts too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            dots, module = "." * node.level, node.module or ""
            found.append(dots + module)
            found += [f"{dots}{module}.{alias.name}" if module else dots + alias.name for alias in node.names]
    return found


def test_is_test_module() -> None:
    assert is_test_module("tests.test_writes")
    assert is_test_module("tests.live.test_live_sync")
    assert is_test_module("..test_faults")
    assert not is_test_module("tests.support.upstream")
    assert not is_test_module("tests.live.syncrun")
    assert not is_test_module("tests.conftest")


def test_imported_modules_sees_every_form_of_import(tmp_path: Path) -> None:
    module = tmp_path / "example.py"
    module.write_text(
        "import tests.test_a\nfrom tests.live.test_b import x\nfrom tests import test_c\nfrom . import test_d\n"
        "def later():\n    from tests.test_e import y\n",
        encoding="utf-8",
    )
    assert [name for name in imported_modules(module) if is_test_module(name)] == [
        "tests.test_a",
        "tests.live.test_b",
        "tests.test_c",
        ".test_d",
        "tests.test_e",
    ]


def test_no_module_imports_a_test_module() -> None:
    """Test modules, devtools and bench take what they share from support modules (devtools.faults_doc's tables)."""
    root = TESTS.parent
    paths = [*TESTS.rglob("*.py"), *(root / "devtools").rglob("*.py"), *(root / "bench").rglob("*.py")]
    found = {
        path.relative_to(root).as_posix(): sorted(name for name in imported_modules(path) if is_test_module(name))
        for path in sorted(paths)
    }
    offenders = {path: names for path, names in found.items() if names}
    assert offenders == {}, "move what they share into tests/support/ (or tests/live/ beside stdio.py) and import it"


# `monkeypatch.setattr(module, "_SOME_CONSTANT", ...)`: a module-private constant changed from outside; or a timing
# constant, private or not (`STOP_GRACE`, `SLOW_SECONDS`).
TIMING = r"[A-Z0-9_]*(?:SECONDS|GRACE|TIMEOUT|DELAY|INTERVAL|POLL|WAIT|TTL)[A-Z0-9_]*"
PATCHED_PRIVATE_CONSTANT = re.compile(rf"""setattr\(\s*[\w.]+\s*,\s*["'](_[A-Z][A-Z0-9_]*|[A-Z]{TIMING})["']""")


def test_the_private_constant_pattern() -> None:
    assert PATCHED_PRIVATE_CONSTANT.findall('monkeypatch.setattr(pending, "_POLL_SECONDS", 0.01)') == ["_POLL_SECONDS"]
    assert PATCHED_PRIVATE_CONSTANT.findall("monkeypatch.setattr(\n    a.b, '_X', 1)") == ["_X"]
    assert not PATCHED_PRIVATE_CONSTANT.findall('monkeypatch.setattr(check, "_pytest", recorder)')
    assert not PATCHED_PRIVATE_CONSTANT.findall('monkeypatch.setattr(web, "FAILURES_OVERALL", 2)')
    assert PATCHED_PRIVATE_CONSTANT.findall('monkeypatch.setattr(check, "STOP_GRACE", 1)') == ["STOP_GRACE"]
    assert PATCHED_PRIVATE_CONSTANT.findall("setattr(fake_embeddings, 'SLOW_SECONDS', 1.0)") == ["SLOW_SECONDS"]


def test_no_test_patches_a_module_private_or_timing_constant() -> None:
    """Timings a test shrinks come in as a value (`Settings.timings`, `LeasePolls`), not as a patched constant."""
    found = {
        path.relative_to(TESTS).as_posix(): PATCHED_PRIVATE_CONSTANT.findall(path.read_text(encoding="utf-8"))
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "test_layout.py"
    }
    assert {path: names for path, names in found.items() if names} == {}
