"""Helpers for the live tests of the Streamable HTTP transport: the SDK's client over HTTP, raw POSTs, the choice of
releases a test runs on (and fixtures asked for lazily), the npm clients, and a scripted OpenAI-compatible model on
loopback (for Open WebUI as the MCP client)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from devtools import npm_tools, openwebui_local
from devtools.npm_tools import NpmInstallError, NpmTool
from devtools.openwebui_local import Instance
from tests.live.stdio import every_page, structured

CALL_TIMEOUT = 300.0


def live_version() -> str:
    """The release the live suite runs against (as ``tests/live/conftest.py`` picks it)."""
    return os.environ.get("OPENWEBUI_LIVE_VERSION") or openwebui_local.NEWEST


def lazily(request: pytest.FixtureRequest, name: str) -> Any:
    """A fixture, asked for only once the test knows it runs on this release (so a no-op starts nothing)."""
    return request.getfixturevalue(name)


def lazy_openwebui(request: pytest.FixtureRequest) -> Instance:
    """`live_openwebui`, asked for lazily."""
    return cast(Instance, lazily(request, "live_openwebui"))


def npm_binary(tool: NpmTool) -> Path:
    """`tool` installed from npm into the cache (once); the test fails, without a traceback, when npm cannot."""
    problem = ""
    try:
        return npm_tools.ensure(tool)
    except NpmInstallError as exc:
        problem = str(exc)
    pytest.fail(f"could not install {tool.spec} from npm: {problem}", pytrace=False)


def not_on_this_release(releases: Sequence[str], why: str) -> bool:
    """True (and says why on stdout) when the live release is not one of ``releases``: the test then passes
    without doing anything, because ``devtools.check`` counts a skip as a failure."""
    version = live_version()
    if version in releases:
        return False
    print(f"nothing to do on Open WebUI {version}: runs on {', '.join(releases)} only ({why})")
    return True


@dataclass
class Progress:
    """The progress notifications one call received."""

    seen: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))


class HttpCaller:
    """One MCP client over HTTP: tool calls as (is_error, structured content), as ``tests.live.stdio.Session``."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def protocol_version(self) -> str:
        return str(self.client.session.protocol_version)

    async def call(
        self, name: str, arguments: dict[str, Any], progress: Progress | None = None
    ) -> tuple[bool, dict[str, Any]]:
        return structured(await self.client.call_tool(name, arguments, progress_callback=progress))

    async def ok(self, name: str, arguments: dict[str, Any], progress: Progress | None = None) -> dict[str, Any]:
        is_error, body = await self.call(name, arguments, progress)
        assert not is_error, f"{name} failed: {body}"
        return body

    async def listing(
        self, name: str, arguments: dict[str, Any], *, max_pages: int = 50
    ) -> tuple[bool, dict[str, Any], list[dict[str, Any]]]:
        """Every page of a listing tool: (is_error, the last body, the items of every page)."""
        return await every_page(self.call, name, arguments, max_pages)


@asynccontextmanager
async def mcp_http(url: str, token: str | None, *, mode: str = "auto", **headers: str) -> AsyncIterator[HttpCaller]:
    """The SDK's client on ``url`` (…/mcp) with ``Authorization: Bearer <token>`` on every request."""
    sent = {**headers, **({"Authorization": f"Bearer {token}"} if token else {})}
    async with (
        httpx2.AsyncClient(headers=sent, timeout=CALL_TIMEOUT, trust_env=False) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=CALL_TIMEOUT) as client,
    ):
        yield HttpCaller(client)


def post_tools_list(url: str, headers: dict[str, str]) -> httpx.Response:
    """One raw JSON-RPC ``tools/list`` POST (legacy protocol header), for the 401 paths."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    with httpx.Client(trust_env=False, timeout=30) as http:
        return http.post(
            url,
            json=body,
            headers={"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25", **headers},
        )


def access_lines(log: str) -> list[str]:
    """The server's access log lines (``openwebui_rag_mcp.access``) from its stderr."""
    return [line for line in log.splitlines() if "openwebui_rag_mcp.access" in line]


def access_lines_when(read: Callable[[], str], done: Callable[[list[str]], bool], timeout: float = 10.0) -> list[str]:
    """The access log lines once ``done`` says they are all there (or after ``timeout``): the server writes a line
    after it has sent its answer, so the caller can read the log before the line is in it."""
    deadline = time.monotonic() + timeout
    while True:
        lines = access_lines(read())
        if done(lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


# -- a scripted OpenAI-compatible model ----------------------------------------------------------------------------


@dataclass
class ScriptedModel:
    """Serves ``/v1/models`` and ``/v1/chat/completions`` on loopback. Turn 1: a call of the first offered tool whose
    name ends in ``tool_suffix``, with ``{"query": <the last user text>}``; once a ``tool`` message is present: the
    text ``ECHO: <tool content>``. Every chat request body is kept in ``requests``."""

    model_id: str = "scripted-mcp"
    tool_suffix: str = "knowledge_search"
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for one request: {"content": ...} or {"tool_calls": [...]}."""
        messages = body.get("messages") or []
        tool_messages = [m for m in messages if m.get("role") == "tool"]
        if tool_messages:
            return {"content": f"ECHO: {tool_messages[-1].get('content')}"}
        names = [tool["function"]["name"] for tool in body.get("tools") or [] if tool.get("type") == "function"]
        wanted = next((name for name in names if name.endswith(self.tool_suffix)), None)
        if wanted is None:
            return {"content": f"NO-TOOL-OFFERED (offered: {names})"}
        user_texts = [m.get("content") for m in messages if m.get("role") == "user"]
        query = user_texts[-1] if user_texts and isinstance(user_texts[-1], str) else ""
        call = {
            "index": 0,
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": wanted, "arguments": json.dumps({"query": query})},
        }
        return {"tool_calls": [call]}


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _json(self, status: int, body: Any) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                data = [{"id": model.model_id, "object": "model", "created": 0, "owned_by": "tests"}]
                self._json(200, {"object": "list", "data": data})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._json(404, {"error": "not found"})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            model.requests.append(body)
            message = model.answer(body)
            created, ident = int(time.time()), f"chatcmpl-{uuid.uuid4().hex[:12]}"
            finish = "tool_calls" if "tool_calls" in message else "stop"
            if not body.get("stream"):
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": "", **message},
                    "finish_reason": finish,
                }
                self._json(200, {"id": ident, "object": "chat.completion", "created": created, "choices": [choice]})
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            for delta, reason in (({"role": "assistant", **message}, None), ({}, finish)):
                chunk = {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model.model_id,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


@contextmanager
def scripted_model(model: ScriptedModel | None = None) -> Iterator[ScriptedModel]:
    """``model`` served on a free loopback port for the duration of the block."""
    served = model or ScriptedModel()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    served.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="scripted-model", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
