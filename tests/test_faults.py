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
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

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
    FILE,
    FaultStub,
    Lane,
    page,
)
from tests.support.fault_cases import (
    FAULT_CASES,
    HANG_ONLY,
    HTML_ECHO,
    OK,
    TOO_BIG,
    TOOLS,
    UNAVAILABLE_503,
    FaultCase,
    Outcome,
    ToolCall,
    fails,
)
from tests.support.faults import ENV, TIMEOUT, Slot, conforms, fast_sessions

pytestmark = pytest.mark.anyio


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
    lane.fail(fails(503, "Service Unavailable", **{"Retry-After": retry_after}), path=f"/api/v1/files/{FILE}", times=1)
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
