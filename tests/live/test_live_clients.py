"""Real MCP clients against a real Open WebUI, run from the README's own snippets (clients/).

- MCP Inspector's command line (npm ``@modelcontextprotocol/inspector``, the version the snippet pins): every
  ``$INSPECT ...`` line of ``clients/inspector_cli.sh`` is run as written, with the real URL, key, server path and a
  seeded knowledge id put in, and must exit with the code its comment promises (0 unless it says ``exit code N``).
- Claude Code (npm ``@anthropic-ai/claude-code``): the snippet's ``claude mcp add`` with real values, then
  ``claude mcp list`` must report the server ``✔ Connected`` (it exits 0 either way, so the output is checked).
- Goose, Claude Desktop, Cursor and Zed cannot run here; their snippets' command and environment start the server
  with the SDK's stdio client, as those clients would, and it must answer over them.

The npm packages are installed once into the cache by ``devtools.npm_tools`` (the first run needs the npm
registry). A failed install fails these tests with npm's log; it never skips them.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from devtools import openwebui_local as owui
from devtools import snippets
from devtools.npm_tools import CLAUDE_CODE, INSPECTOR
from devtools.openwebui_local import Instance
from devtools.snippets import (
    KEY_PLACEHOLDER,
    KNOWLEDGE_ID_PLACEHOLDER,
    SERVER_NAME,
    SERVER_PLACEHOLDER,
    URL_PLACEHOLDER,
    InspectorCall,
)
from openwebui_rag_mcp.config import DEFAULT_TOOLS
from tests.live.http import npm_binary
from tests.live.stdio import SCRIPT

RUN_TIMEOUT = 120.0
DOCS = {
    "on-call.md": "# On-call hand-over\n\nThe on-call engineer hands over the pager every Monday at 10:00 with notes.",
    "релизы.md": "# Релизы\n\nРелиз выпускается по четвергам, после того как прошли все тесты.",
}
BASE_INSPECT, INSPECT_CALLS = snippets.inspector_snippet()


@dataclass(frozen=True)
class Seeded:
    knowledge_id: str
    file_ids: frozenset[str]


@pytest.fixture(scope="module")
def seeded(live_openwebui: Instance) -> Seeded:
    name = f"clients-{uuid.uuid4().hex[:8]}"
    knowledge_id = owui.create_knowledge(live_openwebui, name, "documents for the MCP client tests")
    file_ids = set()
    for filename, text in DOCS.items():
        file_id = owui.upload_text(live_openwebui, filename, text)
        owui.add_file(live_openwebui, knowledge_id, file_id)
        file_ids.add(file_id)
    return Seeded(knowledge_id, frozenset(file_ids))


@pytest.fixture(scope="module")
def inspector() -> Path:
    return npm_binary(INSPECTOR)


@pytest.fixture(scope="module")
def claude() -> Path:
    return npm_binary(CLAUDE_CODE)


def real_values(instance: Instance, text: str, knowledge_id: str = "") -> str:
    """A snippet argument with the README's example values replaced by the live ones."""
    text = text.replace(SERVER_PLACEHOLDER, str(SCRIPT)).replace(URL_PLACEHOLDER, instance.url)
    text = text.replace(KEY_PLACEHOLDER, instance.api_key)
    return text.replace(KNOWLEDGE_ID_PLACEHOLDER, knowledge_id) if knowledge_id else text


def run(argv: list[str], *, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`{' '.join(argv[:6])} ...` took more than {RUN_TIMEOUT:.0f} s: {exc.stderr!r}", pytrace=False)


def redact(text: str, instance: Instance) -> str:
    return text.replace(instance.api_key, "<api key>")


# -- MCP Inspector ----------------------------------------------------------------------------------------------


def inspector_argv(instance: Instance, binary: Path, call: InspectorCall, knowledge_id: str) -> list[str]:
    """The snippet's ``$INSPECT <call>`` as the shell would run it, with the cached Inspector in place of npx."""
    assert BASE_INSPECT[:2] == ["npx", INSPECTOR.spec], "the snippet must pin the Inspector version we install"
    shell_vars = {"OPENWEBUI_URL": instance.url, "OPENWEBUI_API_KEY": instance.api_key}
    expanded = [re.sub(r"\$([A-Z_]+)", lambda m: shell_vars[m[1]], arg) for arg in BASE_INSPECT[2:]]
    return [str(binary), *(real_values(instance, arg, knowledge_id) for arg in [*expanded, *call.args])]


def _option(call: InspectorCall, name: str) -> str | None:
    return call.args[call.args.index(name) + 1] if name in call.args else None


def _tool_args(call: InspectorCall) -> dict[str, str]:
    pairs = [value for flag, value in itertools.pairwise(call.args) if flag == "--tool-arg"]
    return dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize(
    "call",
    INSPECT_CALLS,
    ids=[f"{i}-{_option(c, '--tool-name') or _option(c, '--method')}" for i, c in enumerate(INSPECT_CALLS)],
)
def test_inspector_cli_runs_the_readme_commands(
    live_openwebui: Instance, seeded: Seeded, inspector: Path, call: InspectorCall, tmp_path: Path
) -> None:
    argv = inspector_argv(live_openwebui, inspector, call, seeded.knowledge_id)
    env = {**os.environ, "HOME": str(tmp_path)}  # nothing from ~/.mcp-inspector
    result = run(argv, env=env, cwd=tmp_path)
    shown = f"{call.line}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    assert result.returncode == call.exit_code, redact(
        f"exit code {result.returncode}, expected {call.exit_code}: {shown}", live_openwebui
    )
    body: dict[str, Any] = json.loads(result.stdout)
    method, tool = _option(call, "--method"), _option(call, "--tool-name")
    if method == "tools/list":
        assert {item["name"] for item in body["tools"]} == set(DEFAULT_TOOLS)
        # Every tool lists an output schema, an alias its tool's.
        assert all("outputSchema" in item for item in body["tools"])
        return
    assert method == "tools/call"
    content = body["structuredContent"]
    assert json.loads(body["content"][0]["text"]) == content  # the text block carries the same JSON
    if call.exit_code == 5:
        # An error result: shown in full on stdout, flagged on stderr.
        assert body["isError"] is True
        assert content["ok"] is False
        assert content["code"] == "not_found"
        assert content["message"]
        assert '"code":"tool_is_error"' in result.stderr
        assert live_openwebui.api_key not in result.stdout + result.stderr
        return
    assert body["isError"] is False
    if tool == "knowledge_health":
        assert content["ok"] is True
        assert content["openwebui_version"] == live_openwebui.version
    elif tool == "knowledge_search":
        assert content["results"], content
        if KNOWLEDGE_ID_PLACEHOLDER in call.line:
            assert content["knowledge_ids"] == [seeded.knowledge_id]
            assert {found["file_id"] for found in content["results"]} <= seeded.file_ids
        if "top_k" in _tool_args(call):
            assert len(content["results"]) <= int(_tool_args(call)["top_k"])
    else:
        pytest.fail(f"no check written for {call.line}")


def test_inspector_cli_reports_an_unknown_base_as_a_tool_error(
    live_openwebui: Instance, inspector: Path, tmp_path: Path
) -> None:
    """A failing call of a read tool outside the snippet: exit 5, structured error visible on stdout."""
    call = InspectorCall(
        ["--method", "tools/call", "--tool-name", "knowledge_files", "--tool-arg", f"knowledge_id={uuid.uuid4()}"],
        5,
        "knowledge_files with an unknown base",
    )
    argv = inspector_argv(live_openwebui, inspector, call, "")
    assert argv[1] == "--cli"
    result = run([*argv[:2], "-q", "--format", "json", *argv[2:]], env={**os.environ, "HOME": str(tmp_path)})
    assert result.returncode == 5, redact(result.stdout + result.stderr, live_openwebui)
    body = json.loads(result.stdout)["result"]
    assert body["isError"] is True
    assert body["structuredContent"]["code"] == "not_found"


# -- Claude Code ------------------------------------------------------------------------------------------------


def claude_env(home: Path) -> dict[str, str]:
    """A throwaway HOME and no Anthropic credentials or telemetry; `claude mcp` needs none."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def claude_add(
    instance: Instance, binary: Path, home: Path, project: Path, name: str = SERVER_NAME, url: str = ""
) -> None:
    """Run the snippet's `claude mcp add` with real values (optionally another server name and URL)."""
    argv = [real_values(instance, arg) for arg in snippets.claude_code_add()]
    assert argv[:4] == ["claude", "mcp", "add", SERVER_NAME]
    argv[3] = name
    if url:
        argv = [arg.replace(f"OPENWEBUI_URL={instance.url}", f"OPENWEBUI_URL={url}") for arg in argv]
    result = run([str(binary), *argv[1:]], env=claude_env(home), cwd=project)
    output = redact(result.stdout + result.stderr, instance)
    assert result.returncode == 0, output
    assert f"Added stdio MCP server {argv[3]}" in output, output


def claude_list(binary: Path, home: Path, project: Path) -> str:
    (listing,) = snippets.claude_code_other()
    assert listing == ["claude", "mcp", "list"]
    result = run([str(binary), *listing[1:]], env=claude_env(home), cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr  # always 0: the output says what happened
    return result.stdout


def test_claude_code_adds_the_server_and_connects(live_openwebui: Instance, claude: Path, tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    claude_add(live_openwebui, claude, home, project)

    # Stored as the README says: local scope, under this project, with both variables.
    stored = json.loads((home / ".claude.json").read_text(encoding="utf-8"))
    servers = [entry["mcpServers"] for entry in stored["projects"].values() if entry.get("mcpServers")]
    assert servers == [
        {
            SERVER_NAME: {
                "type": "stdio",
                "command": str(SCRIPT),
                "args": [],
                "env": {"OPENWEBUI_URL": live_openwebui.url, "OPENWEBUI_API_KEY": live_openwebui.api_key},
            }
        }
    ]

    listing = claude_list(claude, home, project)
    line = next((line for line in listing.splitlines() if line.startswith(f"{SERVER_NAME}:")), "")
    assert line.startswith(f"{SERVER_NAME}: {SCRIPT}"), redact(listing, live_openwebui)
    assert line.endswith("- ✔ Connected"), redact(listing, live_openwebui)
    # The README's comment shows this very line.
    (promised,) = [text.split("#", 1)[1].strip() for text in snippets.load("claude_code").splitlines() if "#" in text]
    assert line == promised.replace(SERVER_PLACEHOLDER, str(SCRIPT))

    result = run([str(claude), "mcp", "get", SERVER_NAME], env=claude_env(home), cwd=project)
    assert "Status: ✔ Connected" in result.stdout, redact(result.stdout + result.stderr, live_openwebui)


def test_claude_code_shows_a_server_that_cannot_start(live_openwebui: Instance, claude: Path, tmp_path: Path) -> None:
    """The control for the test above: `claude mcp list` exits 0 here too, but says the connection failed."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    claude_add(live_openwebui, claude, home, project, name="broken", url="ftp://nowhere")
    listing = claude_list(claude, home, project)
    line = next((line for line in listing.splitlines() if line.startswith("broken:")), "")
    assert "✘ Failed to connect" in line, listing
    assert "Connected" not in line.replace("Failed to connect", "")


# -- Goose, Claude Desktop, Cursor, Zed: their configurations start a working server -----------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["goose", "claude_desktop", "cursor", "zed"])
async def test_client_configuration_starts_a_working_server(
    live_openwebui: Instance, seeded: Seeded, name: str, tmp_path: Path
) -> None:
    config = snippets.server_config(name)
    params = StdioServerParameters(
        command=real_values(live_openwebui, config.command),
        args=[real_values(live_openwebui, arg) for arg in config.args],
        env={key: real_values(live_openwebui, value) for key, value in config.env.items()},
    )
    assert params.command == str(SCRIPT)
    with (tmp_path / "server.stderr").open("w+", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            assert {tool.name for tool in tools.tools} == set(DEFAULT_TOOLS)
            # By name: the session's other tests make many bases, and a list answers 30 at a time.
            listed = await session.call_tool("knowledge_list", {"query": "clients-"})
            assert not listed.is_error, listed
            assert listed.structured_content is not None
            assert seeded.knowledge_id in {item["knowledge_id"] for item in listed.structured_content["items"]}
