"""Every relative link and `#anchor` in the repository's Markdown resolves, and the generated sections are current.

A link resolves when the file or folder it names exists inside the repository and, for `page.md#anchor` or
`#anchor`, when the page has a heading whose slug, as GitHub renders it, is the anchor (Cyrillic and CJK headings
included). Links inside code (fenced blocks and inline code) are not links. External links (`https:`, `mailto:`) are
not fetched.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

from devtools import faults_doc, snippets

ROOT = Path(__file__).resolve().parent.parent
# The pages this project keeps; the test also finds any other Markdown file in the repository.
KEPT = (
    "README.md",
    "README.ru.md",
    "AGENTS.md",
    "TODO.md",
    "CONTRIBUTING.md",
    "CHANGELOG.md",
    "docs/clients.md",
    "docs/tools.md",
    "docs/configuration.md",
    "docs/errors.md",
    "docs/writes.md",
    "docs/compatibility.md",
    "docs/deployment.md",
    "docs/performance.md",
    "docs/faults.md",
    "clients/README.md",
    "bench/RESULTS.md",
    "bench/HISTORY.md",
)
_SKIPPED_DIRS = {"node_modules", "__pycache__", "venv"}

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files(root: Path = ROOT) -> list[Path]:
    """Every Markdown file of the repository, hidden folders (.git, .venv, ...) and installed packages left out."""
    return sorted(
        path
        for path in root.rglob("*.md")
        if not any(part.startswith(".") or part in _SKIPPED_DIRS for part in path.relative_to(root).parts[:-1])
    )


def outside_fences(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            continue
        if fence is not None:
            closing = line.strip()
            if closing.startswith(fence) and not closing.strip(fence[0]):
                fence = None
            continue
        lines.append(line)
    return lines


def prose_lines(text: str) -> list[str]:
    """The page's lines outside code, inline code removed: what can hold links."""
    return [_INLINE_CODE.sub("", line) for line in outside_fences(text)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text as rendered (links by their text, code without backticks, no HTML),
    lower-cased, with everything but letters, marks, digits, spaces, `-` and `_` removed and each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    kept = (char for char in text if char in " -_" or unicodedata.category(char)[0] in "LMN")
    return "".join("-" if char == " " else char for char in kept)


def anchors(text: str) -> set[str]:
    """Every anchor a page has: its headings' slugs, a repeated one suffixed -1, -2, ... as GitHub does."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_fences(text):  # a heading's inline code is part of its anchor
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """The targets of a page's inline links, images and reference definitions, outside code."""
    found: list[str] = []
    for line in prose_lines(text):
        found += _LINK.findall(line)
        reference = _REFERENCE.match(line)
        if reference:
            found.append(reference.group(1))
    return found


def problems(page: Path, root: Path = ROOT) -> list[str]:
    """What does not resolve among `page`'s relative links, one line each."""
    text = page.read_text(encoding="utf-8")
    where = page.relative_to(root).as_posix()
    found: list[str] = []
    for target in links(text):
        if not target or _SCHEME.match(target):
            continue  # external: not checked here
        path_part, _, anchor = target.partition("#")
        destination = page if not path_part else (page.parent / unquote(path_part)).resolve()
        if not destination.is_relative_to(root.resolve()):
            found.append(f"{where}: {target} points outside the repository")
            continue
        if not destination.exists():
            found.append(f"{where}: {target}: no such file or folder")
            continue
        if not anchor:
            continue
        if destination.suffix != ".md" or destination.is_dir():
            found.append(f"{where}: {target}: an anchor into something that is not a Markdown page")
            continue
        if unquote(anchor) not in anchors(destination.read_text(encoding="utf-8")):
            shown = destination.relative_to(root.resolve()).as_posix()
            found.append(f"{where}: {target}: {shown} has no heading with the anchor #{unquote(anchor)}")
    return found


# -- the checker itself -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Quick start: you run Open WebUI", "quick-start-you-run-open-webui"),
        ("knowledge_search", "knowledge_search"),
        ("`knowledge_add` and `knowledge_add_file`", "knowledge_add-and-knowledge_add_file"),
        ("Resources, completions and the prompt", "resources-completions-and-the-prompt"),
        ("Быстрый старт: Open WebUI уже есть", "быстрый-старт-open-webui-уже-есть"),
        ("Ёлки и «кавычки» — 2 шт.", "ёлки-и-кавычки--2-шт"),
        ("北京的历史 (история)", "北京的历史-история"),
        ("A [linked](x.md) heading <sup>1</sup>", "a-linked-heading-1"),
    ],
)
def test_slugs_are_those_github_renders(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_repeated_headings_and_code_blocks(tmp_path: Path) -> None:
    text = "# Notes\n\n## Notes\n\n```md\n## Not a heading\n[not a link](missing.md)\n```\n\n## Notes `x`\n"
    assert anchors(text) == {"notes", "notes-1", "notes-x"}
    assert links(text) == []
    assert links("see `[code](missing.md)` and [real](a.md#b) and\n[ref]: <c.md>\n") == ["a.md#b", "c.md"]


def test_broken_links_and_anchors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "target.md").write_text("# Цель\n\n## Second part\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](docs/target.md) [ok](docs/target.md#цель) [ok](docs/target.md#%D1%86%D0%B5%D0%BB%D1%8C) "
        "[ok](#page) [ok](docs/) [ext](https://example.com/x.md#nowhere)\n"
        "[gone](docs/missing.md) [bad anchor](docs/target.md#second) [self](#nothing) [up](../outside.md)\n",
        encoding="utf-8",
    )
    assert problems(page, tmp_path) == [
        "page.md: docs/missing.md: no such file or folder",
        "page.md: docs/target.md#second: docs/target.md has no heading with the anchor #second",
        "page.md: #nothing: page.md has no heading with the anchor #nothing",
        "page.md: ../outside.md points outside the repository",
    ]


# -- the repository ---------------------------------------------------------------------------------------------


def test_the_kept_pages_exist_and_are_all_checked() -> None:
    found = {path.relative_to(ROOT).as_posix() for path in markdown_files()}
    assert set(KEPT) <= found, sorted(set(KEPT) - found)


@pytest.mark.parametrize("page", markdown_files(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert problems(page) == []


def test_generated_sections_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert snippets.main(["--check"]) == 0, capsys.readouterr().err  # clients/* in docs/clients.md and the READMEs
    assert faults_doc.main(["--check"]) == 0, capsys.readouterr().err  # docs/faults.md from the fault tables
