"""The variables that `--help`, docs/configuration.md's table and `.env.example` show are exactly those
`config.VARIABLES` declares, with the same defaults wherever a default is shown; README.md and README.ru.md show the
same few of them (the required ones among them), with those defaults, and link the full table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openwebui_rag_mcp.__main__ import main
from openwebui_rag_mcp.config import VARIABLES

ROOT = Path(__file__).resolve().parent.parent
DECLARED = {variable.name: variable for variable in VARIABLES}
VALUE_DEFAULTS = {variable.name: variable.default for variable in VARIABLES if variable.has_value_default}
RETIRED = {variable.name for variable in VARIABLES if variable.field is None}
REQUIRED = {name for name, variable in DECLARED.items() if variable.default == "required"}
# Named in the READMEs' quick start, read by the development tools (devtools.openwebui_local), not by the server.
DEV_VARIABLES = {"OPENWEBUI_RAG_MCP_CACHE"}
VARIABLE_NAME = re.compile(r"\b(?:OPENWEBUI_[A-Z0-9_]*[A-Z0-9]|RAG_[A-Z0-9_]*[A-Z0-9]|REDIS_URL)\b")


def help_text(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def help_variables(text: str) -> dict[str, tuple[str, str]]:
    """name -> (meaning, default) from the `--help` list; a long entry goes on over indented lines."""
    section = text.split("configuration comes from the environment:\n", 1)[1]
    entries: list[str] = []
    for line in section.splitlines():
        if re.match(r"^  [A-Z]", line):
            entries.append(line.strip())
        elif line.startswith("   ") and entries:
            entries[-1] += " " + line.strip()
        elif line.strip():
            pytest.fail(f"unexpected line in the --help variable list: {line!r}")
    found: dict[str, tuple[str, str]] = {}
    for entry in entries:
        match = re.fullmatch(r"([A-Z][A-Z0-9_]+)\s+(.*) \((.*)\)", entry)
        assert match, entry
        assert match[1] not in found, f"{match[1]} is listed twice"
        found[match[1]] = (match[2], match[3])
    return found


def table(text: str, header: str) -> dict[str, str]:
    """name -> default cell (backticks removed) of the Markdown table whose header row is `header`."""
    lines = text.splitlines()
    assert lines.count(header) == 1, f"no single table with the header {header!r}"
    start = lines.index(header) + 2
    rows: dict[str, str] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        match = re.fullmatch(r"`([A-Z0-9_]+)`", cells[0])
        assert match, line
        assert match[1] not in rows, f"{match[1]} has two rows"
        rows[match[1]] = cells[1]
    return rows


def test_help_lists_exactly_the_declared_variables_with_their_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    listed = help_variables(help_text(capsys))
    assert list(listed) == list(DECLARED)
    for name, (meaning, default) in listed.items():
        assert meaning == DECLARED[name].meaning, name
        assert default == DECLARED[name].default, name


def test_configuration_page_table_is_exactly_the_declared_variables_with_their_defaults() -> None:
    rows = table((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8"), "| variable | default | meaning |")
    assert list(rows) == list(DECLARED)  # every one, in the order of --help
    for name, cell in rows.items():
        assert cell.replace("`", "") == DECLARED[name].default, name
        if name in VALUE_DEFAULTS:
            assert cell == f"`{VALUE_DEFAULTS[name]}`", name


def readme_rows() -> dict[str, str]:
    return table((ROOT / "README.md").read_text(encoding="utf-8"), "| variable | default | meaning |")


def test_readme_shows_a_few_declared_variables_with_their_defaults_and_links_the_rest() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = readme_rows()
    assert REQUIRED <= set(rows) <= set(DECLARED) - RETIRED
    assert len(rows) <= 10, "the README keeps a short list; the full table is docs/configuration.md"
    for name, cell in rows.items():
        assert cell.replace("`", "") == DECLARED[name].default, name
        if name in VALUE_DEFAULTS:
            assert cell == f"`{VALUE_DEFAULTS[name]}`", name
    assert "(docs/configuration.md)" in text
    assert set(VARIABLE_NAME.findall(text)) - DEV_VARIABLES <= set(DECLARED)  # no variable that does not exist


def test_russian_readme_shows_the_same_variables_with_their_defaults_and_links_the_rest() -> None:
    text = (ROOT / "README.ru.md").read_text(encoding="utf-8")
    rows = table(text, "| переменная | по умолчанию | что задаёт |")
    assert list(rows) == list(readme_rows())
    for name, cell in rows.items():
        if name in VALUE_DEFAULTS:
            assert cell == f"`{VALUE_DEFAULTS[name]}`", name
        else:  # words, translated; a default in backticks here would be one value
            assert not re.fullmatch(r"`[^`]*`", cell), name
    assert {name for name, cell in rows.items() if cell == "обязательна"} == REQUIRED
    assert "(docs/configuration.md)" in text
    assert set(VARIABLE_NAME.findall(text)) - DEV_VARIABLES <= set(DECLARED)


def test_env_example_sets_every_declared_variable_and_mentions_the_retired_ones() -> None:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    assignments: dict[str, tuple[bool, str]] = {}  # name -> (commented out, value)
    for line in text.splitlines():
        match = re.fullmatch(r"(# )?([A-Z][A-Z0-9_]*)=(.*)", line)
        if match:
            assert match[2] not in assignments, f"{match[2]} is set twice"
            assignments[match[2]] = (bool(match[1]), match[3])
    assert set(assignments) == set(DECLARED) - RETIRED
    # The required ones are set (with an example value); every other one is commented out at its default.
    assert {name for name, (commented, _) in assignments.items() if not commented} == REQUIRED
    for name, default in VALUE_DEFAULTS.items():
        assert assignments[name] == (True, default), name
    retired_lines = [line for line in text.splitlines() if line.startswith("# Retired:")]
    assert {name for line in retired_lines for name in VARIABLE_NAME.findall(line)} == RETIRED
    assert set(VARIABLE_NAME.findall(text)) == set(DECLARED)
