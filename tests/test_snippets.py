"""The client set-up snippets in clients/: what docs/clients.md and the READMEs show, that each parses and names only
real settings.

The live side (the snippets run against a real Open WebUI with real clients) is tests/live/test_live_clients.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from devtools import snippets
from devtools.snippets import (
    KEY_PLACEHOLDER,
    REQUIRED_VARIABLES,
    SERVER_NAME,
    SERVER_PLACEHOLDER,
    SNIPPETS,
    URL_PLACEHOLDER,
    SnippetError,
)
from openwebui_rag_mcp.config import ALIASES, READ_TOOLS, WRITE_TOOLS, load_settings

README = snippets.README
README_RU = snippets.README_RU
CLIENTS_DOC = snippets.CLIENTS_DOC
JSON_SNIPPETS = snippets.JSON_ROOTS
# Lines that start with ./dev, .venv/bin/, npx, claude or python are commands.
COMMAND = re.compile(r"(\./dev|npx|claude|python[0-9.]*)(\s|$)|\.venv/bin/")


# -- one source ------------------------------------------------------------------------------------------------


def test_clients_page_shows_every_rendered_snippet() -> None:
    text = CLIENTS_DOC.read_text(encoding="utf-8")
    assert snippets.render(text) == text, "docs/clients.md differs from clients/: run python -m devtools.snippets"
    assert snippets.markers(text) == list(SNIPPETS)  # each once, in the order of SNIPPETS
    for name in SNIPPETS:
        assert snippets.shown(text, name) == [snippets.load(name)], name


@pytest.mark.parametrize("readme", [README, README_RU], ids=["README.md", "README.ru.md"])
def test_readmes_show_the_quick_start_snippet_as_rendered(readme: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    assert snippets.render(text) == text, f"{readme.name} differs from clients/: run python -m devtools.snippets"
    assert snippets.markers(text) == ["claude_desktop"]  # the quick start's client; the rest are in docs/clients.md
    assert snippets.shown(text, "claude_desktop") == [snippets.load("claude_desktop")]
    assert "(docs/clients.md)" in text


def test_every_page_with_snippets_is_a_target() -> None:
    pages = {target.path for target in snippets.TARGETS}
    assert pages == {CLIENTS_DOC, README, README_RU}
    assert [target.path for target in snippets.TARGETS if target.needs_all] == [CLIENTS_DOC]
    marked = {
        path
        for path in snippets.REPO.rglob("*.md")
        if not any(part.startswith(".") or part == "node_modules" for part in path.relative_to(snippets.REPO).parts)
        and "<!-- snippet:" in path.read_text(encoding="utf-8")
    }
    assert marked - {snippets.CLIENTS_DIR / "README.md"} == pages  # clients/README.md only names the markers


def test_check_command_passes_and_catches_a_stale_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert snippets.main(["--check"]) == 0
    current = CLIENTS_DOC.read_text(encoding="utf-8")
    stale = tmp_path / "clients.md"
    stale.write_text(current.replace("timeout: 360", "timeout: 30"), encoding="utf-8")
    target = snippets.Target(stale, needs_all=True)
    assert snippets.problems(target) == ["clients.md differs from clients/ in: goose"]
    monkeypatch.setattr(snippets, "TARGETS", (target,))
    assert snippets.main(["--check"]) == 1
    assert stale.read_text(encoding="utf-8") != current  # --check never writes
    assert snippets.main([]) == 0  # without --check it rewrites the block
    assert stale.read_text(encoding="utf-8") == current


def test_a_page_that_must_show_every_snippet_says_which_is_missing(tmp_path: Path) -> None:
    partial = tmp_path / "clients.md"
    partial.write_text(README.read_text(encoding="utf-8"), encoding="utf-8")  # Claude Desktop's only
    missing = [name for name in SNIPPETS if name != "claude_desktop"]
    assert snippets.problems(snippets.Target(partial, needs_all=True)) == [
        f"clients.md has no block for snippet {name}" for name in missing
    ]
    assert snippets.problems(snippets.Target(partial, needs_all=False)) == []


def test_broken_markers_are_reported() -> None:
    with pytest.raises(SnippetError, match="unpaired"):
        snippets.markers("<!-- snippet:goose -->\n```yaml\n```\n")
    with pytest.raises(SnippetError, match="unknown"):
        snippets.markers("<!-- snippet:emacs -->\n<!-- /snippet:emacs -->")
    assert snippets.render("<!-- snippet:zed -->\nold\n<!-- /snippet:zed -->\n").startswith(
        "<!-- snippet:zed -->\n```json\n{\n"
    )


def test_every_file_in_clients_is_a_snippet() -> None:
    files = {path.name for path in snippets.CLIENTS_DIR.iterdir() if path.name != "README.md"}
    assert files == set(SNIPPETS.values())


# -- each snippet is a valid configuration for its client ------------------------------------------------------


def test_goose_snippet_has_the_keys_goose_expects() -> None:
    config = snippets.parse_simple_yaml(snippets.load("goose"))
    assert list(config) == ["extensions"]
    entry = config["extensions"][SERVER_NAME]
    assert entry["type"] == "stdio"
    assert entry["enabled"] is True
    assert entry["name"] == SERVER_NAME
    assert isinstance(entry["cmd"], str)
    assert entry["args"] == []
    assert isinstance(entry["envs"], dict)
    assert all(isinstance(value, str) for value in entry["envs"].values())
    assert "config" not in entry  # Goose entries are flat
    # Seconds; above OPENWEBUI_PROCESS_TIMEOUT's default so that a long knowledge_add is not cut off.
    assert isinstance(entry["timeout"], int)
    assert entry["timeout"] > load_settings({"OPENWEBUI_URL": "http://x", "OPENWEBUI_API_KEY": "k"}).process_timeout


@pytest.mark.parametrize("name", sorted(JSON_SNIPPETS))
def test_json_snippets_have_the_keys_their_client_expects(name: str) -> None:
    config: dict[str, Any] = json.loads(snippets.load(name))
    assert list(config) == [JSON_SNIPPETS[name]]
    entry = config[JSON_SNIPPETS[name]][SERVER_NAME]
    assert set(entry) == {"command", "args", "env"}
    assert isinstance(entry["command"], str)
    assert entry["args"] == []
    assert all(isinstance(value, str) for value in entry["env"].values())


def test_claude_code_snippet_puts_the_name_before_the_variables() -> None:
    argv = snippets.claude_code_add()
    assert argv[:4] == ["claude", "mcp", "add", SERVER_NAME]
    assert argv.index(SERVER_NAME) < argv.index("-e") < argv.index("--")
    # Everything between the name and `--` is `-e K=V` pairs: the variadic -e never swallows the name.
    options = argv[4 : argv.index("--")]
    assert options[::2] == ["-e"] * (len(options) // 2)
    assert all(re.fullmatch(r"[A-Z_]+=\S+", value) for value in options[1::2])
    assert snippets.claude_code_other() == [["claude", "mcp", "list"]]
    assert "✔ Connected" in snippets.load("claude_code")


def test_inspector_snippet_is_the_pinned_cli_with_exit_codes() -> None:
    base, calls = snippets.inspector_snippet()
    assert base[:3] == ["npx", "@modelcontextprotocol/inspector@2.12.0", "--cli"]
    methods = [(call.args[1], call.args[3] if len(call.args) > 3 else None) for call in calls]
    assert ("tools/list", None) in methods
    assert ("tools/call", "knowledge_get_file") in methods
    assert any("--strict" in call.args for call in calls)
    assert {call.exit_code for call in calls} == {0, 5}
    assert [call.args[3] for call in calls if call.exit_code == 5] == ["knowledge_get_file"]


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippet_runs_the_server_with_variables_it_reads(name: str) -> None:
    config = snippets.server_config(name)
    command, args, env = config.command, config.args, config.env
    assert command == SERVER_PLACEHOLDER
    assert Path(command).name == "openwebui-rag-mcp"  # the console script of pyproject.toml
    assert Path(command).is_absolute()
    assert args == []
    assert set(REQUIRED_VARIABLES) <= set(env)
    read = snippets.config_variables()
    assert set(env) <= read, f"{name} names variables the server does not read: {sorted(set(env) - read)}"
    if name != "inspector_cli":  # that one takes both from the shell
        assert env == {"OPENWEBUI_URL": URL_PLACEHOLDER, "OPENWEBUI_API_KEY": KEY_PLACEHOLDER}
        # The example values are a configuration the server accepts.
        load_settings(env)


def test_config_variables_are_found_in_config_py() -> None:
    read = snippets.config_variables()
    assert {"OPENWEBUI_URL", "OPENWEBUI_API_KEY", "OPENWEBUI_TIMEOUT", "RAG_TOP_K", "OPENWEBUI_READ_ONLY"} <= read
    assert all(re.fullmatch(r"(OPENWEBUI|RAG|REDIS)_[A-Z_]+", name) for name in read)
    # Every variable the server reads is documented in the configuration table of docs/configuration.md.
    table = (snippets.REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in table for name in read)


# -- the small YAML reader --------------------------------------------------------------------------------------


def test_simple_yaml_reader() -> None:
    text = (
        "# comment\n"
        "a:\n"
        "  b: 1\n"
        "  c: 'it''s'  # trailing comment\n"
        '  d: "x # y"\n'
        "  e: [p, 2, true]\n"
        "  f:\n"
        "  g: ~\n"
        "h: plain text: no\n"
    )
    with pytest.raises(SnippetError, match="unsupported scalar"):
        snippets.parse_simple_yaml(text)
    parsed = snippets.parse_simple_yaml(text.replace("h: plain text: no\n", "h: https://x.example/p\n"))
    assert parsed == {
        "a": {"b": 1, "c": "it's", "d": "x # y", "e": ["p", 2, True], "f": None, "g": None},
        "h": "https://x.example/p",
    }


@pytest.mark.parametrize(
    "text",
    [
        "a:\n  - b\n",  # block list
        "a:\n    b: 1\n  c: 2\n",  # indentation that matches no block
        "a: 1\na: 2\n",  # duplicate key
        "a: {b: 1}\n",  # flow mapping
        "a: &x 1\n",  # anchor
        "a:1\n",  # not `key: value`
        " a: 1\n",  # indented first level
    ],
)
def test_simple_yaml_reader_refuses_what_it_does_not_know(text: str) -> None:
    with pytest.raises(SnippetError):
        snippets.parse_simple_yaml(text)


# -- the Russian README ------------------------------------------------------------------------------------------


def _commands(text: str) -> set[str]:
    """Shell commands a README shows: code-block lines and inline code, comments and `$ ` prompts removed."""
    fence = re.compile(r"^```[a-z]*\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
    candidates: list[str] = []
    for block in fence.findall(text):
        candidates += block.replace("\\\n", " ").splitlines()
    candidates += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", fence.sub("", text))]
    found: set[str] = set()
    for line in candidates:
        command = re.split(r"\s+#\s", line.strip(), maxsplit=1)[0].removeprefix("$ ").strip()
        if COMMAND.match(command):
            found.add(" ".join(command.split()))
    return found


def _variables(text: str) -> set[str]:
    return set(re.findall(r"\b(?:OPENWEBUI|RAG)_[A-Z_]*[A-Z]\b", text))


def test_russian_readme_commands_and_variables_are_those_of_the_readme() -> None:
    english = README.read_text(encoding="utf-8")
    russian = README_RU.read_text(encoding="utf-8")
    commands = _commands(russian)
    assert {"./dev setup", "./dev inspect", ".venv/bin/openwebui-rag-mcp doctor --deep"} <= commands
    assert commands - _commands(english) == set()
    variables = _variables(russian)
    assert set(REQUIRED_VARIABLES) <= variables
    assert variables - _variables(english) == set()


def _sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.MULTILINE)


def _relative_links(text: str) -> set[str]:
    """Where a page's relative links point (anchors inside the page itself left out)."""
    targets = set(re.findall(r"\]\(([^)\s]+)\)", text))
    return {target for target in targets if not target.startswith(("http://", "https://", "mailto:", "#"))}


def test_russian_readme_has_the_structure_and_links_of_the_readme() -> None:
    english = README.read_text(encoding="utf-8")
    russian = README_RU.read_text(encoding="utf-8")
    # The same sections in the same order (titles translated), and the same places linked.
    assert len(_sections(russian)) == len(_sections(english)), (_sections(english), _sections(russian))
    assert _relative_links(russian) - {"README.md"} == _relative_links(english) - {"README.ru.md"}
    assert "README.md" in _relative_links(russian)
    assert "README.ru.md" in _relative_links(english)
    # The tool tables have one row per tool the server has (aliases aside), and both name the aliases.
    for text in (english, russian):
        rows = set(re.findall(r"^\| `(knowledge_[a-z_]+)` \|", text, flags=re.MULTILINE))
        assert rows == {*READ_TOOLS, *WRITE_TOOLS}
        assert all(f"`{alias}`" in text for alias in ALIASES)
