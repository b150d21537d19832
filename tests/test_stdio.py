"""The installed console script over real stdio, against a tiny Open WebUI stand-in served over real HTTP.

Two styles: the SDK's own stdio client (proves interoperability, and that structured content validates against the
listed output schemas), and raw newline-delimited JSON-RPC through `subprocess.Popen` (proves that stdout carries
nothing but protocol messages, byte for byte).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from tests.conftest import API_KEY, assert_no_key, fixture_json, free_port
from tests.rawstdio import RawStdio, path_only_env

pytestmark = pytest.mark.anyio

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
FRUIT_FILE = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
KB_FRUIT = "c0ffee00-1111-4222-8333-444455556666"
READ_TOOLS = {
    "knowledge_list",
    "knowledge_files",
    "knowledge_search",
    "knowledge_get_file",
    "knowledge_health",
    "rag_list_knowledge",
    "rag_search",
    "rag_get_file",
    "rag_health",
}
LIMIT = 30  # seconds for any one subprocess conversation


# -- a stand-in Open WebUI 0.12.4 -------------------------------------------------------------------------------


class FakeOpenWebUI(BaseHTTPRequestHandler):
    """Answers the few routes the read tools use, with the recorded bodies in tests/fixtures."""

    seen: list[tuple[str, str, str]]  # (method, path with query, authorization), shared per server

    def log_message(self, format: str, *args: Any) -> None:  # keep the test output clean
        pass

    def answer(self, status: int, body: object) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        parts = urlsplit(self.path)
        page = parse_qs(parts.query).get("page", ["1"])[0]
        if parts.path == "/api/version":
            self.answer(200, {"version": "0.12.4", "deployment_id": ""})
        elif parts.path == "/api/v1/knowledge/":
            self.answer(200, fixture_json("knowledge_list_0124.json") if page == "1" else {"items": [], "total": 2})
        elif parts.path == f"/api/v1/knowledge/{KB_FRUIT}/files":
            self.answer(200, fixture_json("knowledge_files_0124.json"))
        elif parts.path == f"/api/v1/files/{FRUIT_FILE}":
            self.answer(200, fixture_json("file_0124.json"))
        else:
            self.answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        self.seen.append(("POST", self.path, self.headers.get("Authorization", "")))
        if self.path == "/api/v1/retrieval/query/collection":
            self.answer(200, fixture_json("query_collection_0124.json"))
        else:
            self.answer(404, {"detail": "Not Found"})


@contextmanager
def fake_openwebui(port: int = 0) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """Serve the stand-in on 127.0.0.1 in a thread; yields its URL and the requests it saw."""
    seen: list[tuple[str, str, str]] = []
    handler = type("Handler", (FakeOpenWebUI,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def server_env(url: str, **extra: str) -> dict[str, str]:
    return {"OPENWEBUI_URL": url, "OPENWEBUI_API_KEY": API_KEY, "PYTHONUNBUFFERED": "1", **extra}


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


# -- the SDK's stdio client -------------------------------------------------------------------------------------


async def test_sdk_client_over_stdio(tmp_path: Path) -> None:
    assert SCRIPT.exists(), f"console script not installed next to {sys.executable}"
    stderr_path = tmp_path / "stderr.txt"
    with fake_openwebui() as (url, seen), stderr_path.open("w") as errlog:
        params = StdioServerParameters(command=str(SCRIPT), args=[], env=server_env(url))
        with anyio.fail_after(LIMIT):
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                init = await session.initialize()
                assert init.server_info.name == "openwebui-rag-mcp"

                tools = {tool.name: tool for tool in (await session.list_tools()).tools}
                assert set(tools) >= READ_TOOLS
                for name in READ_TOOLS:
                    assert tools[name].output_schema, name  # an alias publishes its tool's
                    annotations = tools[name].annotations
                    assert annotations is not None, name
                    assert annotations.read_only_hint is True, name

                listed = await session.call_tool("knowledge_list", {})
                assert listed.is_error is False
                assert isinstance(listed.structured_content, dict)
                assert listed.structured_content["count"] == 2

                missing = await session.call_tool("knowledge_get_file", {"file_id": "no-such-file"})
                assert missing.is_error is True
                assert isinstance(missing.structured_content, dict)
                assert missing.structured_content["code"] == "not_found"
                assert missing.structured_content["http_status"] == 404
                assert_no_key(text_of(missing))

                found = await session.call_tool("rag_search", {"query": "bananas", "knowledge_ids": [KB_FRUIT]})
                assert found.is_error is False
                assert isinstance(found.structured_content, dict)
                assert found.structured_content["count"] == 2
                assert found.structured_content["results"][0]["knowledge_id"] == KB_FRUIT
    assert ("GET", "/api/v1/files/no-such-file", f"Bearer {API_KEY}") in seen
    assert ("POST", "/api/v1/retrieval/query/collection", f"Bearer {API_KEY}") in seen
    assert_no_key(stderr_path.read_text())


async def test_sdk_client_recovers_when_open_webui_comes_up_later(tmp_path: Path) -> None:
    port = free_port()  # nothing listens here yet
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as errlog:
        params = StdioServerParameters(command=str(SCRIPT), args=[], env=server_env(f"http://127.0.0.1:{port}"))
        with anyio.fail_after(LIMIT):
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                assert "knowledge_list" in {tool.name for tool in (await session.list_tools()).tools}
                down = await session.call_tool("knowledge_list", {})
                assert down.is_error is True
                assert isinstance(down.structured_content, dict)
                assert down.structured_content["code"] == "upstream_unavailable"
                assert down.structured_content["retryable"] is True

                with fake_openwebui(port) as (_, seen):
                    up = await session.call_tool("knowledge_list", {})
                    assert up.is_error is False, text_of(up)
                    assert isinstance(up.structured_content, dict)
                    assert up.structured_content["count"] == 2
                    health = await session.call_tool("knowledge_health", {})
                    assert health.is_error is False
                assert [path for _, path, _ in seen].count("/api/version") == 1
    log = stderr_path.read_text()
    assert "not reachable" in log  # the start-up warning
    assert_no_key(log)


# -- raw JSON-RPC: stdout carries protocol messages only --------------------------------------------------------


def test_raw_stdio_stdout_is_only_json_rpc(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr.txt"
    with fake_openwebui() as (url, _), stderr_path.open("wb") as stderr:
        # DEBUG logging makes the server as chatty as it gets: all of it must land on stderr.
        env = path_only_env(server_env(url, OPENWEBUI_LOG_LEVEL="DEBUG", RAG_SCORE_THRESHOLD="0.5"))
        server = RawStdio([str(SCRIPT)], env, stderr, limit=LIMIT)
        try:
            init = server.initialize("raw")
            assert init["protocolVersion"] == "2025-11-25"
            assert init["serverInfo"]["name"] == "openwebui-rag-mcp"

            tools = {tool["name"]: tool for tool in server.request("tools/list", {})["tools"]}
            assert set(tools) >= READ_TOOLS
            for name in READ_TOOLS:
                assert "outputSchema" in tools[name], name
                assert tools[name]["annotations"]["readOnlyHint"] is True, name
                assert tools[name]["annotations"].get("openWorldHint", True) is True, name  # unset means true

            listed = server.call("knowledge_list", {})
            assert listed["isError"] is False
            assert listed["structuredContent"]["count"] == 2
            assert json.loads(listed["content"][0]["text"]) == listed["structuredContent"]

            missing = server.call("knowledge_get_file", {"file_id": "no-such-file"})
            assert missing["isError"] is True
            assert missing["structuredContent"]["code"] == "not_found"

            bad = server.call("knowledge_search", {"query": "   "})
            assert bad["isError"] is True
            assert bad["structuredContent"]["code"] == "invalid_argument"

            text = server.call("knowledge_get_file", {"file_id": FRUIT_FILE, "max_chars": 8})
            assert text["isError"] is False
            assert text["structuredContent"]["text"] == "# Apples"
            assert text["structuredContent"]["next_offset"] == 8
        finally:
            code = server.close()
    assert code == 0
    assert len(server.lines) >= 6
    for line in server.lines:
        assert line.endswith(b"\n")
        message = json.loads(line)  # every byte on stdout is part of a JSON-RPC message
        assert isinstance(message, dict)
        assert message["jsonrpc"] == "2.0"
        assert "id" in message or "method" in message
    log = stderr_path.read_text()
    assert "RAG_SCORE_THRESHOLD" in log  # the warning went to stderr, not stdout
    assert_no_key(log, b"".join(server.lines).decode())


def test_set_level_turns_the_servers_stderr_up_and_stdout_stays_the_protocol(tmp_path: Path) -> None:
    stderr_path = tmp_path / "stderr.txt"
    with fake_openwebui() as (url, _), stderr_path.open("wb") as stderr:
        env = path_only_env(server_env(url, OPENWEBUI_LOG_LEVEL="ERROR"))
        server = RawStdio([str(SCRIPT)], env, stderr, limit=LIMIT)
        try:
            init = server.initialize("logging")
            assert "logging" in init["capabilities"]
            assert server.call("knowledge_list", {})["isError"] is False
            quiet = stderr_path.read_text()
            assert server.request("logging/setLevel", {"level": "debug"}) == {}
            assert server.call("knowledge_list", {})["isError"] is False
        finally:
            code = server.close()
    assert code == 0
    assert "HTTP Request" not in quiet
    assert "HTTP Request: GET" in stderr_path.read_text()  # httpx's request lines, shown only when debugging
    for line in server.lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
