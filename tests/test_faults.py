"""Every upstream fault against every tool, through the MCP protocol, over respx and over real loopback HTTP.

`FAULT_CASES` is the table: each case is armed on the one request of each tool that it is about (a tool's main
read, or a write tool's write request), through respx (`Lane.router()`) and through the loopback stub of
tests/faultstub.py with a real httpx transport, or by breaking the whole URL (a closed port, a `.invalid` host,
https to a plain-HTTP server). Each tool then gets its own MCP session on its own Open WebUI (a lane), so the nine
tools of a case run concurrently and a slow fault costs OPENWEBUI_TIMEOUT once per case, not once per tool.

For every tool and fault: the error code, HTTP status, retryability and a piece of the message; for writes the
stage, the file and whether anything may have changed; how many times the request was sent (a read told to come
back by Retry-After is sent twice, a write once); no API key anywhere; and the same session serves the next call.

docs/faults.md is rendered from these tables (devtools/faults_doc.py); tests/test_docs_links.py keeps it current.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import MAX_RESPONSE_BYTES
from openwebui_rag_mcp.config import READ_TOOLS, WRITE_TOOLS
from openwebui_rag_mcp.models import ErrorBody
from openwebui_rag_mcp.server import create_server
from tests import faultstub
from tests.conftest import assert_no_key, make_settings, text_of
from tests.faultstub import (
    AUTHORIZATION,
    FILE,
    KB,
    KB_THIRD,
    NOT_FOUND_TEXT,
    Fault,
    FaultStub,
    Lane,
    answer,
    page,
)
from tests.support.faults import ENV, TIMEOUT, Slot, conforms, fast_sessions

pytestmark = pytest.mark.anyio

# OPENWEBUI_TIMEOUT of every case not about a timeout (those take TIMEOUT): only a hang may run into it, so a slow
# machine never turns a fault's answer into a timeout. What those cases check is the answer, never how fast it came.
HANG_ONLY = 120.0


# -- the tools and the request of each that a fault hits ----------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    tool: str
    args: dict[str, Any]
    method: str
    path: str  # the request the fault is armed on
    stage: str | None = None  # the write stage that request belongs to; None for a read tool
    file_id: str | None = None  # the file a failed write names

    @property
    def write(self) -> bool:
        return self.stage is not None


TOOLS: list[ToolCall] = [
    ToolCall("knowledge_list", {}, "GET", "/api/v1/knowledge/"),
    ToolCall("knowledge_files", {"knowledge_id": KB}, "GET", f"/api/v1/knowledge/{KB}/files"),
    ToolCall(
        "knowledge_search", {"query": "apples", "knowledge_ids": [KB]}, "POST", "/api/v1/retrieval/query/collection"
    ),
    ToolCall("knowledge_get_file", {"file_id": FILE}, "GET", f"/api/v1/files/{FILE}"),
    ToolCall("knowledge_find", {"knowledge_id": KB, "phrase": "Apples"}, "GET", f"/api/v1/knowledge/{KB}/files"),
    ToolCall("knowledge_health", {}, "GET", "/api/v1/knowledge/"),
    ToolCall(
        "knowledge_create", {"name": "Faults", "description": "made by the fault suite"}, "POST",
        "/api/v1/knowledge/create", "create",
    ),
    ToolCall(
        "knowledge_add", {"knowledge_id": KB, "text": "# Pears\n\nPears are green.", "title": "Груши"}, "POST",
        "/api/v1/files/", "upload",
    ),
    ToolCall(
        "knowledge_add_file",
        {"knowledge_id": KB, "content_base64": "IyBQbHVtcwoKUGx1bXMgYXJlIHB1cnBsZS4K", "filename": "plums.md"},
        "POST", "/api/v1/files/", "upload",
    ),
    ToolCall(
        "knowledge_update", {"file_id": FILE, "text": "# Apples\n\nApples are green now.", "knowledge_id": KB},
        "POST", f"/api/v1/files/{FILE}/data/content/update", "update", FILE,
    ),
    ToolCall(
        "knowledge_delete", {"knowledge_id": KB, "file_id": FILE}, "POST", f"/api/v1/knowledge/{KB}/file/remove",
        "unlink", FILE,
    ),
    ToolCall(
        "knowledge_rename", {"knowledge_id": KB, "name": "Фрукты и ягоды"}, "POST", f"/api/v1/knowledge/{KB}/update",
        "rename",
    ),
    ToolCall(
        "knowledge_delete_base", {"knowledge_id": KB_THIRD, "confirm": "Reports"}, "DELETE",
        f"/api/v1/knowledge/{KB_THIRD}/delete", "delete",
    ),
]  # fmt: skip


# -- the fault table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the agent gets. `code` None: the call succeeds."""

    code: str | None
    sees: str = ""  # a piece of the error message
    http_status: int | None = None
    retryable: bool = False
    certain: bool = False  # a failed write certainly changed nothing (refused with a 4xx, or never sent)
    note: str = ""  # why, for the document

    @property
    def write_outcome(self) -> str:
        return "not_applied" if self.certain else "partial_or_unknown"


OK = Outcome(None)


@dataclass(frozen=True)
class FaultCase:
    name: str
    done: str  # what the upstream did, for the document
    outcome: Outcome
    fault: Fault | None = None  # armed on each tool's request, over respx and (when it can) the loopback stub
    url: str | None = None  # "refused", "dns" or "tls": the whole OPENWEBUI_URL is broken (real transport)
    times: int | None = None  # how many faulty answers before the upstream recovers; None: every one
    read_sends: int = 1  # how many times a read tool's request is sent (writes: always once)
    reads: Outcome | None = None  # the outcome of read tools, when it differs from the writes'
    per_tool: Mapping[str, Outcome] = field(default_factory=dict)
    serial: bool = False  # run the tools one after another (a big answer each)
    timeout: float = HANG_ONLY  # OPENWEBUI_TIMEOUT of the servers the case runs on

    @property
    def transports(self) -> tuple[str, ...]:
        found: list[str] = []
        if self.fault is not None:
            found.append("respx")
            if self.fault.over_http:
                found.append("stub")
        if self.url is not None:
            found.append("url")
        return tuple(found)

    def expected(self, call: ToolCall) -> Outcome:
        if call.tool in self.per_tool:
            return self.per_tool[call.tool]
        if not call.write and self.reads is not None:
            return self.reads
        return self.outcome

    def sends(self, call: ToolCall) -> int:
        return 1 if call.write else self.read_sends


def _fault(status: int, detail: object, **headers: str) -> Fault:
    return answer(status, {"detail": detail}, headers=headers)


UNREACHABLE = Outcome("upstream_unavailable", "could not connect to Open WebUI", retryable=True, certain=True)
BROKE = Outcome("upstream_unavailable", "the connection to Open WebUI broke", retryable=True)
TIMED_OUT = Outcome("timeout", f"did not answer within {TIMEOUT} s (OPENWEBUI_TIMEOUT)", retryable=True)
AUTH = Outcome("auth", "rejected the API key", 401, certain=True)
UNREADABLE = Outcome("unexpected_response", "other than the expected JSON")
RATE_LIMITED = Outcome("rate_limited", "rate limited by Open WebUI", 429, retryable=True, certain=True)
UNAVAILABLE_503 = Outcome("upstream_unavailable", "Open WebUI is unavailable (HTTP 503)", 503, retryable=True)
RETRIED_OK = Outcome(None, note="succeeds after one retry")
TOO_BIG = Outcome("unexpected_response", f"larger than {MAX_RESPONSE_BYTES:,} bytes")
STILL_LISTED = Outcome(
    "upstream_error",
    "still lists file",
    note="the answer is not used; the check that follows finds the file still in the base",
)
ANSWER_UNUSED = Outcome(None, note="the answer's fields are not used")
PAST = "Wed, 21 Oct 2015 07:28:00 GMT"
HTML_ECHO = "<html><body><h1>Denied</h1><p>credentials: " + AUTHORIZATION.decode() + "</p></body></html>"

FAULT_CASES: list[FaultCase] = [
    # -- no connection, a broken one, no answer in time --
    FaultCase(
        "connection refused", "nothing listens on the port (respx: httpx.ConnectError)", UNREACHABLE,
        fault=faultstub.refuse(), url="refused",
    ),
    FaultCase(
        "name resolution failure",
        "OPENWEBUI_URL names a `.invalid` host whose first label is over 63 characters: resolution fails at once, "
        "with no DNS query to wait for",
        UNREACHABLE, url="dns",
    ),
    FaultCase("TLS failure", "https:// to the plain-HTTP stub (no TLS handshake)", UNREACHABLE, url="tls"),
    FaultCase("connect timeout", "respx: httpx.ConnectTimeout", UNREACHABLE, fault=faultstub.connect_timeout()),
    # A broken connection may be a kept-alive one closing as it is reused: a read goes once more at once.
    FaultCase(
        "closed without an answer", "reads the request, closes the connection (respx: RemoteProtocolError)", BROKE,
        fault=faultstub.close(), read_sends=2,
    ),
    FaultCase(
        "connection reset", "reads the request, resets the connection with a TCP RST (respx: ReadError)", BROKE,
        fault=faultstub.reset(), read_sends=2,
    ),
    FaultCase(
        "connection reset once", "the first request's connection is reset, the next is answered", BROKE,
        fault=faultstub.reset(), times=1, read_sends=2, reads=RETRIED_OK,
    ),
    FaultCase(
        "body cut short", "Content-Length promises 1000 bytes more than are sent, then closes", BROKE,
        fault=faultstub.short(), read_sends=2,
    ),
    FaultCase(
        "read timeout", "reads the request and never answers (respx: httpx.ReadTimeout)", TIMED_OUT,
        fault=faultstub.hang(), timeout=TIMEOUT,
    ),
    FaultCase(
        "slow drip", "sends the headers, then the body one byte per second", TIMED_OUT, fault=faultstub.drip(),
        timeout=TIMEOUT,
    ),
    # -- HTTP errors --
    FaultCase(
        "HTTP 401", "401 with Open WebUI's invalid-token detail", AUTH,
        fault=_fault(401, "Your session has expired or the token is invalid. Please sign in again."),
    ),
    FaultCase(
        "HTTP 401 echoing the key", "401 whose detail repeats the Authorization header", AUTH,
        fault=_fault(401, f"invalid token: {AUTHORIZATION.decode()}"),
    ),
    FaultCase(
        "HTTP 403", "403 ACCESS_PROHIBITED",
        Outcome("forbidden", "this API key may not do that", 403, certain=True),
        fault=_fault(403, "You do not have permission to access this resource. Please contact your administrator."),
    ),
    FaultCase(
        "HTTP 403 HTML page echoing the key", "403 from a proxy: an HTML page repeating the Authorization header",
        Outcome("forbidden", "an HTML page", 403, certain=True), fault=page(403, HTML_ECHO),
    ),
    FaultCase(
        "HTTP 404", "404 NOT_FOUND",
        Outcome("not_found", "not found, or not visible to this API key", 404, certain=True),
        fault=_fault(404, NOT_FOUND_TEXT),
    ),
    FaultCase(
        "HTTP 409", "409", Outcome("conflict", "Open WebUI refused the change", 409, certain=True),
        fault=_fault(409, "Conflict"),
    ),
    FaultCase(
        "HTTP 413", "413 from a proxy's body limit",
        Outcome("too_large", "refused the size of the request", 413, certain=True),
        fault=_fault(413, "Request Entity Too Large"),
    ),
    FaultCase(
        "HTTP 422", "422 with FastAPI's validation list",
        Outcome("upstream_error", "answered HTTP 422 (Field required)", 422, certain=True),
        fault=_fault(422, [{"type": "missing", "loc": ["body", "file_id"], "msg": "Field required", "input": None}]),
    ),
    FaultCase("HTTP 429", "429 without Retry-After", RATE_LIMITED, fault=_fault(429, "Too Many Requests")),
    FaultCase(
        "HTTP 429, Retry-After 0, then 200", "one 429 with Retry-After: 0, then healthy answers", RATE_LIMITED,
        fault=_fault(429, "Too Many Requests", **{"Retry-After": "0"}), times=1, read_sends=2, reads=RETRIED_OK,
    ),
    FaultCase(
        "HTTP 429 with Retry-After 0, always", "429 with Retry-After: 0 on every answer", RATE_LIMITED,
        fault=_fault(429, "Too Many Requests", **{"Retry-After": "0"}), read_sends=2,
    ),
    FaultCase(
        "HTTP 429, Retry-After as a past date, then 200", f"one 429 with Retry-After: {PAST}, then healthy answers",
        RATE_LIMITED, fault=_fault(429, "Too Many Requests", **{"Retry-After": PAST}), times=1, read_sends=2,
        reads=RETRIED_OK,
    ),
    FaultCase(
        "HTTP 500", "500", Outcome("upstream_error", "Open WebUI answered HTTP 500 (Internal Server Error)", 500),
        fault=_fault(500, "Internal Server Error"),
    ),
    FaultCase(
        "HTTP 500 HTML page echoing the key", "500 as an HTML page repeating the Authorization header",
        Outcome("upstream_error", "answered HTTP 500 (an HTML page)", 500), fault=page(500, HTML_ECHO),
    ),
    FaultCase(
        "HTTP 502", "502 from a reverse proxy, as an HTML page",
        Outcome("upstream_unavailable", "Open WebUI is unavailable (HTTP 502)", 502, retryable=True),
        fault=page(502, "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"),
    ),
    FaultCase("HTTP 503", "503 without Retry-After", UNAVAILABLE_503, fault=_fault(503, "Service Unavailable")),
    FaultCase(
        "HTTP 503, Retry-After 0, then 200", "one 503 with Retry-After: 0, then healthy answers", UNAVAILABLE_503,
        fault=_fault(503, "Service Unavailable", **{"Retry-After": "0"}), times=1, read_sends=2, reads=RETRIED_OK,
    ),
    FaultCase(
        "HTTP 503 with Retry-After 0, always", "503 with Retry-After: 0 on every answer", UNAVAILABLE_503,
        fault=_fault(503, "Service Unavailable", **{"Retry-After": "0"}), read_sends=2,
    ),
    FaultCase(
        "HTTP 503 with Retry-After beyond the budget", "503 with Retry-After: 3600 (more than OPENWEBUI_TIMEOUT / 2)",
        UNAVAILABLE_503, fault=_fault(503, "Service Unavailable", **{"Retry-After": "3600"}),
    ),
    # -- 200 answers that are not the promised JSON --
    FaultCase(
        "HTML page with 200", "200 text/html (a login page, a wrong OPENWEBUI_URL)",
        Outcome("unexpected_response", "not JSON"),
        fault=page(200, "<!doctype html><html><head><title>Open WebUI</title></head><body></body></html>"),
    ),
    FaultCase(
        "HTML page with 200 echoing the key", "200 text/html repeating the Authorization header",
        Outcome("unexpected_response", "not JSON"), fault=page(200, HTML_ECHO),
    ),
    FaultCase(
        "truncated JSON", "200 application/json whose body stops half-way",
        Outcome("unexpected_response", "malformed JSON"), fault=answer(200, b'{"items": [{"id": "c0ffee00-11'),
    ),
    FaultCase(
        "empty body", "200 application/json with no body", Outcome("unexpected_response", "malformed JSON"),
        fault=answer(200, b""),
    ),
    FaultCase(
        'JSON of the wrong shape: {"items": "nope"}', "200 with an object of the wrong shape", UNREADABLE,
        fault=answer(200, {"items": "nope"}),
        per_tool={"knowledge_update": ANSWER_UNUSED, "knowledge_delete": STILL_LISTED},
    ),
    FaultCase(
        "JSON list where an object is expected", '200 with ["nope"]', UNREADABLE, fault=answer(200, ["nope"]),
        per_tool={"knowledge_delete": STILL_LISTED},
    ),
    FaultCase(
        "300 MB answer", "200 JSON of `[` and 300 MB of zeros, streamed lazily without Content-Length", TOO_BIG,
        fault=faultstub.huge(), serial=True,
    ),
    FaultCase(
        "300 MB answer announced", "200 with Content-Length: 314572800 (refused before reading the body)", TOO_BIG,
        fault=faultstub.huge(declare_length=True),
    ),
]  # fmt: skip


# -- the servers: one per tool and transport, built once (building one costs more than a call) ---------------------


_SLOTS: dict[str, Slot] = {}
_SERVERS: dict[tuple[str, str, float], MCPServer[App]] = {}


def server_for(kind: str, url: str, timeout: float = TIMEOUT) -> MCPServer[App]:
    if (kind, url, timeout) not in _SERVERS:
        transport = _SLOTS.setdefault(url, Slot(url)) if kind == "respx" else None
        env = {**ENV, "OPENWEBUI_TIMEOUT": str(timeout)}
        _SERVERS[kind, url, timeout] = create_server(make_settings(url, **env), transport=transport)
    return _SERVERS[kind, url, timeout]


@pytest.fixture(autouse=True, scope="module")
def compiled_output_schemas() -> Iterator[None]:
    with fast_sessions():
        yield


@pytest.fixture(scope="module")
def stub() -> Iterator[FaultStub]:
    with faultstub.running() as running:
        yield running


_CLOSED_PORT: list[int] = []


def broken_url(kind: str, stub: FaultStub) -> str:
    if kind == "refused":
        if not _CLOSED_PORT:
            _CLOSED_PORT.append(faultstub.closed_port())
        return f"http://127.0.0.1:{_CLOSED_PORT[0]}"
    if kind == "dns":
        return f"http://openwebui-{'x' * 60}.invalid"  # no resolver is asked: a slow one would make it a timeout
    assert kind == "tls"
    return f"https://127.0.0.1:{stub.port}/tls"


@dataclass
class Target:
    """Where one tool of a case talks to: its server, and the lane that records and misbehaves (not for URLs)."""

    server: MCPServer[App]
    lane: Lane | None


def target(kind: str, call: ToolCall, case: FaultCase, stub: FaultStub) -> Target:
    if kind == "url":
        assert case.url is not None
        return Target(server_for("url", broken_url(case.url, stub), case.timeout), None)
    if kind == "respx":
        url = f"{faultstub.BASE_URL}/{call.tool}"
        lane = _SLOTS.setdefault(url, Slot(url)).use(Lane())
        return Target(server_for("respx", url, case.timeout), lane)
    return Target(server_for("stub", stub.url_of(call.tool), case.timeout), stub.lane(call.tool))


# -- checks -------------------------------------------------------------------------------------------------------


async def check(result: CallToolResult, call: ToolCall, expected: Outcome) -> None:
    text = text_of(result)
    assert_no_key(text, json.dumps(result.structured_content))
    assert isinstance(result.structured_content, dict), text
    assert json.loads(text) == result.structured_content
    if expected.code is None:
        assert result.is_error is False, text
        await conforms(call.tool, result.structured_content)
        return
    assert result.is_error is True, text
    body = ErrorBody.model_validate(result.structured_content)
    got = (body.code, body.http_status, body.retryable)
    # "retryable" means safe to repeat as it was: never for a write that may have been applied.
    retryable = expected.retryable and (expected.certain or not call.write)
    assert got == (expected.code, expected.http_status, retryable), body.message
    assert expected.sees in body.message, body.message
    if call.write:
        assert (body.stage, body.file_id, body.outcome) == (call.stage, call.file_id, expected.write_outcome), body
    else:
        assert (body.stage, body.file_id, body.outcome) == (None, None, None), body


async def run_tool(kind: str, case: FaultCase, call: ToolCall, stub: FaultStub) -> str | None:
    """One tool through one case; a description of what went wrong, or None."""
    where = target(kind, call, case, stub)
    if where.lane is not None and case.fault is not None:
        where.lane.fail(case.fault, method=call.method, path=call.path, times=case.times)
    async with Client(where.server, raise_exceptions=True) as client:
        try:
            await exercise(client, case, call, where.lane)
        except AssertionError as failure:
            return f"{call.tool}: {failure}"
    return None


async def exercise(client: Client, case: FaultCase, call: ToolCall, lane: Lane | None) -> None:
    started = time.monotonic()
    result = await client.call_tool(call.tool, call.args)
    elapsed = time.monotonic() - started
    await check(result, call, case.expected(call))
    # A hang guard, not a speed check: no fault holds a tool far beyond OPENWEBUI_TIMEOUT (a drip of this body would
    # take 25 s, a hang for ever; the outcome already says the deadline struck).
    assert elapsed < 2 * case.timeout + 10, f"took {elapsed:.1f} s"
    if lane is None:
        # Still unreachable: the next call gets the same structured error, and the session lives on.
        await check(await client.call_tool(call.tool, call.args), call, case.expected(call))
        return
    sent = lane.count(call.method, call.path)
    assert sent == case.sends(call), f"{call.method} {call.path} sent {sent} times"
    lane.clear()
    # The same session serves the next call, now that Open WebUI answers again.
    await check(await client.call_tool(call.tool, call.args), call, OK)


CASES = [pytest.param(case, kind, id=f"{kind}: {case.name}") for case in FAULT_CASES for kind in case.transports]


@pytest.mark.parametrize(("case", "kind"), CASES)
async def test_fault_over_every_tool(
    case: FaultCase, kind: str, stub: FaultStub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    if case.serial:
        problems = [await run_tool(kind, case, call, stub) for call in TOOLS]
    else:
        problems = await asyncio.gather(*(run_tool(kind, case, call, stub) for call in TOOLS))
    assert [p for p in problems if p] == []
    assert_no_key(caplog.text)


# -- beyond the table ---------------------------------------------------------------------------------------------


def test_every_tool_and_every_fault_of_the_issue_is_covered() -> None:
    assert {call.tool for call in TOOLS} == {*READ_TOOLS, *WRITE_TOOLS}
    statuses = {case.fault.status for case in FAULT_CASES if case.fault and case.fault.kind == "answer"}
    assert statuses >= {200, 401, 403, 404, 409, 413, 422, 429, 500, 502, 503}
    kinds = {case.fault.kind for case in FAULT_CASES if case.fault}
    assert kinds >= {"close", "reset", "hang", "drip", "short", "huge", "refuse", "connect_timeout"}
    assert {case.url for case in FAULT_CASES if case.url} == {"refused", "dns", "tls"}
    assert all(case.transports for case in FAULT_CASES)


@asynccontextmanager
async def stub_session(
    stub: FaultStub, name: str, upstream_timeout: float = TIMEOUT
) -> AsyncIterator[tuple[Client, Lane]]:
    lane = stub.lane(name)
    async with Client(server_for("stub", stub.url_of(name), upstream_timeout), raise_exceptions=True) as client:
        yield client, lane


async def test_huge_answer_stops_at_the_cap_in_little_memory(stub: FaultStub) -> None:
    """300 MB streamed: the client stops reading at 64 MiB and never holds more. How fast is the machine's business:
    the timeout is one only a hang reaches (tracing every allocation slows the read several times over)."""
    async with stub_session(stub, "huge", HANG_ONLY) as (client, lane):
        lane.fail(faultstub.huge(), path=f"/api/v1/files/{FILE}")
        tracemalloc.start()
        try:
            result = await client.call_tool("knowledge_get_file", {"file_id": FILE})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await check(result, TOOLS[3], TOO_BIG)
        assert peak < 2 * MAX_RESPONSE_BYTES, f"peak {peak:,} bytes"  # reading all 300 MB would need 300 MB
        assert lane.count("GET", f"/api/v1/files/{FILE}") == 1  # stopped at the cap: not read again
        lane.clear()
        await check(await client.call_tool("knowledge_get_file", {"file_id": FILE}), TOOLS[3], OK)


@pytest.mark.parametrize(("retry_after", "sends"), [("1", 2), ("2", 1)], ids=["within the budget", "beyond it"])
async def test_a_read_waits_as_told_within_half_the_timeout(retry_after: str, sends: int) -> None:
    """With OPENWEBUI_TIMEOUT=3 a read may wait up to 1.5 s for its one retry: 1 s is waited for, 2 s is not."""
    lane = Lane()
    server = create_server(make_settings(**{**ENV, "OPENWEBUI_TIMEOUT": "3"}), transport=lane.transport())
    lane.fail(_fault(503, "Service Unavailable", **{"Retry-After": retry_after}), path=f"/api/v1/files/{FILE}", times=1)
    async with Client(server, raise_exceptions=True) as client:
        started = time.monotonic()
        result = await client.call_tool("knowledge_get_file", {"file_id": FILE})
        elapsed = time.monotonic() - started
    assert lane.count("GET", f"/api/v1/files/{FILE}") == sends
    if sends == 2:
        await check(result, TOOLS[3], OK)
        assert elapsed >= 1
    else:  # not retried (one send), so not waited for either; no upper bound on time on a busy machine
        await check(result, TOOLS[3], UNAVAILABLE_503)


async def test_every_request_the_stub_saw_carried_the_key(stub: FaultStub) -> None:
    """The faults are real: the key did reach the stub (which echoes it); it only never came back out."""
    async with stub_session(stub, "echo") as (client, lane):
        lane.fail(page(500, HTML_ECHO), path="/api/v1/knowledge/")
        result = await client.call_tool("knowledge_list", {})
    await check(result, TOOLS[0], Outcome("upstream_error", "an HTML page", 500))
    assert lane.seen
    assert {seen.authorization for seen in lane.seen} == {f"Bearer {make_settings().api_key.get_secret_value()}"}
