"""The client set-up snippets: one source in ``clients/``, rendered into docs/clients.md and both READMEs.

    python -m devtools.snippets            # rewrite the snippet blocks in those files from clients/
    python -m devtools.snippets --check    # exit 1 (and say where) if one of them differs from clients/

A page holds a snippet between two markers; everything between them is replaced by the file in a fenced block::

    <!-- snippet:goose -->
    ```yaml
    ...contents of clients/goose.yaml...
    ```
    <!-- /snippet:goose -->

docs/clients.md must show every snippet; README.md and README.ru.md show the one their quick start needs. The helpers
below also read the snippets back (a small YAML reader for the Goose file, the ``claude mcp add`` command line, the
MCP Inspector command lines) so that the tests check and run exactly what the pages show. Only the standard library
is used.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLIENTS_DIR = REPO / "clients"
README = REPO / "README.md"
README_RU = REPO / "README.ru.md"
CLIENTS_DOC = REPO / "docs" / "clients.md"


# name -> file in clients/; the name is what the markers say.
SNIPPETS = {
    "goose": "goose.yaml",
    "claude_desktop": "claude_desktop.json",
    "claude_code": "claude_code.sh",
    "cursor": "cursor.json",
    "zed": "zed.json",
    "inspector_cli": "inspector_cli.sh",
}
FENCE_LANGUAGE = {".yaml": "yaml", ".json": "json", ".sh": "bash"}

# The placeholders the snippets use; tests put real values in their place.
SERVER_NAME = "openwebui-rag"
SERVER_PLACEHOLDER = "/home/me/openwebui-rag-mcp/.venv/bin/openwebui-rag-mcp"
URL_PLACEHOLDER = "https://openwebui.example.com"
KEY_PLACEHOLDER = "sk-..."
KNOWLEDGE_ID_PLACEHOLDER = "<knowledge_id>"
REQUIRED_VARIABLES = ("OPENWEBUI_URL", "OPENWEBUI_API_KEY")

_BLOCK = re.compile(r"<!-- snippet:(?P<name>[a-z_]+) -->\n(?P<body>.*?)<!-- /snippet:(?P=name) -->", re.DOTALL)
_OPENING = re.compile(r"<!-- snippet:([a-z_]+) -->")
_CLOSING = re.compile(r"<!-- /snippet:([a-z_]+) -->")


class SnippetError(ValueError):
    """A page's markers are broken, or a snippet cannot be read back."""


def snippet_path(name: str) -> Path:
    return CLIENTS_DIR / SNIPPETS[name]


def load(name: str) -> str:
    """The text of snippet ``name``, exactly as in ``clients/``."""
    return snippet_path(name).read_text(encoding="utf-8")


def fenced(name: str) -> str:
    """Snippet ``name`` as the fenced block that goes between its markers."""
    text = load(name)
    if not text.endswith("\n"):
        text += "\n"
    return f"```{FENCE_LANGUAGE[snippet_path(name).suffix]}\n{text}```\n"


def markers(text: str) -> list[str]:
    """The snippet names of ``text``'s marker pairs, in order; raise on unpaired or unknown markers."""
    openings = _OPENING.findall(text)
    closings = _CLOSING.findall(text)
    names = [match.group("name") for match in _BLOCK.finditer(text)]
    if openings != names or closings != names:
        raise SnippetError(f"unpaired or nested snippet markers: openings {openings}, closings {closings}")
    unknown = sorted(set(names) - set(SNIPPETS))
    if unknown:
        raise SnippetError(f"markers name unknown snippets {unknown}; known: {sorted(SNIPPETS)}")
    return names


def render(text: str) -> str:
    """``text`` with every marked block replaced by the current snippet from ``clients/``."""
    markers(text)
    return _BLOCK.sub(
        lambda match: f"<!-- snippet:{match['name']} -->\n{fenced(match['name'])}<!-- /snippet:{match['name']} -->",
        text,
    )


def shown(text: str, name: str) -> list[str]:
    """The bodies that ``text`` shows between the markers of snippet ``name`` (fences removed)."""
    bodies = []
    for match in _BLOCK.finditer(text):
        if match["name"] == name:
            lines = match["body"].splitlines(keepends=True)
            if len(lines) < 2 or not lines[0].startswith("```") or lines[-1].strip() != "```":
                raise SnippetError(f"the block of snippet {name} is not one fenced code block")
            bodies.append("".join(lines[1:-1]))
    return bodies


@dataclass(frozen=True)
class Target:
    path: Path
    needs_all: bool


TARGETS = (
    Target(CLIENTS_DOC, needs_all=True),
    Target(README, needs_all=False),
    Target(README_RU, needs_all=False),
)


def problems(target: Target) -> list[str]:
    """What is wrong with one page: broken markers, missing snippets, or blocks that differ from clients/."""
    if not target.path.exists():
        return [f"{target.path.name} is missing"]
    text = target.path.read_text(encoding="utf-8")
    try:
        names = markers(text)
    except SnippetError as exc:
        return [f"{target.path.name}: {exc}"]
    found = []
    if target.needs_all:
        missing = [name for name in SNIPPETS if name not in names]
        found += [f"{target.path.name} has no block for snippet {name}" for name in missing]
    if render(text) != text:
        stale = sorted({name for name in names if any(body != load(name) for body in shown(text, name))})
        found.append(f"{target.path.name} differs from clients/ in: {', '.join(stale) or 'fences'}")
    return found


# --------------------------------------------------------------------------------------------------------------------
# Reading snippets back


def parse_simple_yaml(text: str) -> dict[str, Any]:
    """Parse the small YAML subset the Goose snippet uses; raise ``SnippetError`` on anything else.

    Supported: nested block mappings by indentation (spaces), ``key: value`` with plain, single- or double-quoted
    scalars, ``[]`` and flow lists of plain scalars, ``true``/``false``, integers, ``null``/``~``, and ``#`` comments.
    Block lists (``- item``), anchors, tags, multi-line scalars and flow mappings are refused, not guessed at.
    """
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(0, root)]  # (indentation of the block's keys, the block)
    pending: tuple[int, dict[str, Any], str] | None = None  # a `key:` whose value may be the next, deeper block
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise SnippetError(f"line {number}: tab in indentation")
        indent = len(line) - len(line.lstrip(" "))
        content = line.strip()
        if content.startswith(("- ", "&", "*", "!", "{", "|", ">", "?", "---", "...")) or content == "-":
            raise SnippetError(f"line {number}: unsupported YAML: {content!r}")
        if pending is not None:
            key_indent, parent, key = pending
            pending = None
            if indent > key_indent:
                child: dict[str, Any] = {}
                parent[key] = child
                stack.append((indent, child))
        while len(stack) > 1 and indent < stack[-1][0]:
            stack.pop()
        block_indent, mapping = stack[-1]
        if indent != block_indent:
            raise SnippetError(f"line {number}: indentation {indent} does not match its block ({block_indent})")
        key, separator, rest = content.partition(":")
        if not separator or not key.strip() or (rest and not rest.startswith(" ")):
            raise SnippetError(f"line {number}: expected `key: value`, got {content!r}")
        key = _scalar(key.strip(), number)
        if not isinstance(key, str):
            raise SnippetError(f"line {number}: keys must be strings")
        if key in mapping:
            raise SnippetError(f"line {number}: duplicate key {key!r}")
        rest = rest.strip()
        mapping[key] = _value(rest, number) if rest else None
        if not rest:
            pending = (indent, mapping, key)
    return root


def _strip_comment(line: str) -> str:
    quote = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index]
    return line


def _value(text: str, number: int) -> Any:
    if text.startswith("["):
        if not text.endswith("]"):
            raise SnippetError(f"line {number}: unterminated flow list {text!r}")
        inner = text[1:-1].strip()
        if not inner:
            return []
        if any(c in inner for c in "[]{}\"'"):
            raise SnippetError(f"line {number}: only flat lists of plain scalars are supported: {text!r}")
        return [_scalar(part.strip(), number) for part in inner.split(",")]
    return _scalar(text, number)


def _scalar(text: str, number: int) -> Any:
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            value = ast.literal_eval(text)
        except (SyntaxError, ValueError) as exc:
            raise SnippetError(f"line {number}: bad double-quoted scalar {text!r}") from exc
        return value
    if text[0] in "'\"[]{}&*!|>%@`" or ": " in text or text.endswith(":"):
        raise SnippetError(f"line {number}: unsupported scalar {text!r}")
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~"):
        return None
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text):
        return float(text)
    return text


def shell_lines(text: str) -> list[str]:
    """The logical lines of a shell snippet: continuations joined, blank lines dropped."""
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def claude_code_add(text: str | None = None) -> list[str]:
    """The arguments of the snippet's ``claude mcp add`` command, ``claude`` first, placeholders left in."""
    lines = [line for line in shell_lines(load("claude_code") if text is None else text) if "claude mcp add" in line]
    if len(lines) != 1:
        raise SnippetError(f"the Claude Code snippet must hold one `claude mcp add` line, found {len(lines)}")
    return shlex.split(lines[0], comments=True)


def claude_code_other(text: str | None = None) -> list[list[str]]:
    """The snippet's other ``claude ...`` commands (``claude mcp list``), as argument lists."""
    lines = shell_lines(load("claude_code") if text is None else text)
    return [shlex.split(line, comments=True) for line in lines if line.startswith("claude ") and " add " not in line]


@dataclass(frozen=True)
class InspectorCall:
    """One ``$INSPECT ...`` line of the MCP Inspector snippet and the exit code its comment promises (default 0)."""

    args: list[str]
    exit_code: int
    line: str


def inspector_snippet(text: str | None = None) -> tuple[list[str], list[InspectorCall]]:
    """(the ``INSPECT=...`` command with ``$VARIABLES`` left in, the calls that follow it)."""
    lines = shell_lines(load("inspector_cli") if text is None else text)
    base: list[str] | None = None
    calls: list[InspectorCall] = []
    for line in lines:
        if line.startswith("INSPECT="):
            assignment = shlex.split(line, comments=True)
            if len(assignment) != 1:
                raise SnippetError(f'expected one INSPECT="..." assignment, got {line!r}')
            base = shlex.split(assignment[0].removeprefix("INSPECT="))
        elif line.startswith("$INSPECT "):
            promised = re.search(r"#\s*exit code (\d+)", line)
            args = shlex.split(line.removeprefix("$INSPECT "), comments=True)
            calls.append(InspectorCall(args, int(promised.group(1)) if promised else 0, line))
        else:
            raise SnippetError(f"unexpected line in the MCP Inspector snippet: {line!r}")
    if base is None or not calls:
        raise SnippetError("the MCP Inspector snippet needs an INSPECT=... line and at least one $INSPECT call")
    return base, calls


# Where each JSON snippet keeps its servers.
JSON_ROOTS = {"claude_desktop": "mcpServers", "cursor": "mcpServers", "zed": "context_servers"}


@dataclass(frozen=True)
class ServerConfig:
    """How a snippet tells its client to start the server (placeholders left in)."""

    command: str
    args: list[str]
    env: dict[str, str]


def server_config(name: str) -> ServerConfig:
    """The command, arguments and environment that snippet ``name`` gives, read the way its client reads them."""
    text = load(name)
    if name == "goose":
        entry = parse_simple_yaml(text)["extensions"][SERVER_NAME]
        return ServerConfig(entry["cmd"], entry["args"], entry["envs"])
    if name in JSON_ROOTS:
        entry = json.loads(text)[JSON_ROOTS[name]][SERVER_NAME]
        return ServerConfig(entry["command"], entry["args"], entry["env"])
    if name == "claude_code":
        argv = claude_code_add(text)
        separator = argv.index("--")
        env = _option_values(argv[:separator], ("-e", "--env"))
        return ServerConfig(argv[separator + 1], argv[separator + 2 :], env)
    if name == "inspector_cli":
        base, _ = inspector_snippet(text)
        return ServerConfig(base[-1], [], _option_values(base[:-1], ("-e",)))
    raise SnippetError(f"unknown snippet {name}")


def _option_values(argv: list[str], flags: tuple[str, ...]) -> dict[str, str]:
    pairs = [value for flag, value in itertools.pairwise(argv) if flag in flags]
    bad = [pair for pair in pairs if "=" not in pair]
    if bad:
        raise SnippetError(f"not K=V: {bad}")
    return dict(pair.split("=", 1) for pair in pairs)


def config_variables() -> set[str]:
    """The environment variables the server reads (its declared configuration, less retired names)."""
    from openwebui_rag_mcp.config import VARIABLES

    return {variable.name for variable in VARIABLES if variable.field is not None}


# --------------------------------------------------------------------------------------------------------------------
# CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.snippets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if a page differs from clients/")
    args = parser.parse_args(argv)
    status = 0
    for target in TARGETS:
        if args.check or not target.path.exists():
            for problem in problems(target):
                print(problem, file=sys.stderr)
                status = 1
            continue
        text = target.path.read_text(encoding="utf-8")
        try:
            new = render(text)
        except SnippetError as exc:
            print(f"{target.path.name}: {exc}", file=sys.stderr)
            status = 1
            continue
        if new != text:
            target.path.write_text(new, encoding="utf-8")
            print(f"updated {target.path.name}")
        for problem in problems(target):
            print(problem, file=sys.stderr)
            status = 1
    if args.check and status == 0:
        print("client snippets in docs/clients.md and the READMEs match clients/")
    return status


if __name__ == "__main__":
    sys.exit(main())
