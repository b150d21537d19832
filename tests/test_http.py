"""The Streamable HTTP transport, served by uvicorn on loopback inside the test's event loop, against a mocked Open
WebUI that answers each credential with its own user's bases: 401 paths, both credential modes, per-caller identity,
guard rails, health endpoints, Host checks and the body limit, over both MCP protocol generations."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
import respx
import uvicorn
from mcp import Client, MCPDeprecationWarning
from mcp.client.streamable_http import streamable_http_client

from openwebui_rag_mcp import web
from openwebui_rag_mcp.config import ConfigError, Settings, load_settings
from openwebui_rag_mcp.web import build_app
from tests.conftest import BASE_URL, free_port, mock_transport, new_router

pytestmark = pytest.mark.anyio

ALICE = "sk-alice-0123456789abcdef"
BOB = "eyJhbGciOiJIUzI1NiJ9.bob-session-token.sig"
STRANGER = "sk-nobody-0000000000000000"
SERVICE_KEY = "sk-service-fedcba9876543210"
AGENT_TOKEN = "agent-token-0123456789abcdef0123"
BASES = {
    ALICE: [{"id": "kb-alice", "name": "Alice's notes"}],
    BOB: [{"id": "kb-bob", "name": "Bob's notes"}],
    SERVICE_KEY: [{"id": "kb-service", "name": "Shared"}],
}


SHARED_DOCUMENT = "notes\nkb-alice as seen by alice\nkb-bob as seen by bob\n"


def caller_of(request: httpx.Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token if scheme == "Bearer" else None


def openwebui() -> respx.Router:
    """An Open WebUI 0.12.4 whose Knowledge API answers per credential, and refuses unknown ones."""
    router = new_router()
    router.get("/api/version").respond(json={"version": "0.12.4"})

    def listing(request: httpx.Request) -> httpx.Response:
        token = caller_of(request)
        if token not in BASES:
            return httpx.Response(401, json={"detail": "Your session has expired or the token is invalid."})
        items = [{**base, "write_access": True} for base in BASES[token]]
        return httpx.Response(200, json={"items": items, "total": len(items)})

    def search(request: httpx.Request) -> httpx.Response:
        token = caller_of(request)
        names = json.loads(request.content)["collection_names"]
        texts = [f"{name} as seen by {'alice' if token == ALICE else 'bob'}" for name in names]
        metadata = {"file_id": "f-1", "hash": hashlib.sha256(SHARED_DOCUMENT.encode()).hexdigest()}
        return httpx.Response(
            200, json={"documents": [texts], "metadatas": [[metadata] * len(texts)], "distances": [[0.5]]}
        )

    def document(request: httpx.Request) -> httpx.Response:  # Alice may read it, Bob may not
        if caller_of(request) != ALICE:
            return httpx.Response(401, json={"detail": "You do not have permission to access this"})
        return httpx.Response(200, json={"id": "f-1", "filename": "f.md", "data": {"content": SHARED_DOCUMENT}})

    router.get("/api/v1/knowledge/").mock(side_effect=listing)
    router.get("/api/v1/files/f-1").mock(side_effect=document)
    router.post("/api/v1/retrieval/query/collection").mock(side_effect=search)
    return router


def settings_for(**env: str) -> Settings:
    return load_settings(
        {"OPENWEBUI_URL": BASE_URL, "OPENWEBUI_MCP_TRANSPORT": "streamable-http", "OPENWEBUI_MCP_PORT": "1", **env}
    )


@asynccontextmanager
async def serving(router: respx.Router, **env: str) -> AsyncIterator[str]:
    """The HTTP transport on a loopback port; yields its base URL."""
    async with serving_at(router, time.monotonic, **env) as base:
        yield base


@asynccontextmanager
async def serving_at(router: respx.Router, clock: Callable[[], float], **env: str) -> AsyncIterator[str]:
    """`serving`, with the credential check's clock."""
    settings = dataclasses.replace(settings_for(**env), host="127.0.0.1", port=free_port())
    config = web.uvicorn_config(settings, build_app(settings, transport=mock_transport(router), clock=clock))
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn stopped while starting"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def mcp_client(base: str, token: str | None, *, mode: str = "auto", **headers: str) -> AsyncIterator[Client]:
    all_headers = {**headers, **({"Authorization": f"Bearer {token}"} if token else {})}
    async with (
        httpx2.AsyncClient(headers=all_headers, timeout=30) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), mode=mode) as client,
    ):
        yield client


async def post_mcp(base: str, headers: dict[str, str], body: bytes | None = None) -> httpx.Response:
    payload = body or json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    async with httpx.AsyncClient(trust_env=False) as http:
        return await http.post(
            f"{base}/mcp",
            content=payload,
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2025-11-25",
                **headers,
            },
        )


async def test_no_credential_is_401_with_a_challenge() -> None:
    router = openwebui()
    async with serving(router) as base:
        answer = await post_mcp(base, {})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert router.calls.call_count == 0 or all("/knowledge" not in str(c.request.url) for c in router.calls)


async def test_a_credential_open_webui_refuses_is_401_before_any_tool() -> None:
    router = openwebui()
    async with serving(router) as base:
        answer = await post_mcp(base, {"Authorization": f"Bearer {STRANGER}"})
    assert answer.status_code == 401
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    assert STRANGER not in answer.text
    assert router.calls.last.request.url.path == "/api/v1/knowledge/"  # one cheap authorised read, nothing else


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_every_caller_acts_as_themselves(mode: str) -> None:
    """Alice and Bob at the same time, interleaved: each sees only their own bases, and every upstream request made
    for a call carries that caller's own credential."""
    router = openwebui()
    async with serving(router) as base:

        async def session(token: str, own: str) -> None:
            async with mcp_client(base, token, mode=mode) as client:
                for _ in range(5):
                    listed = await client.call_tool("knowledge_list", {})
                    assert listed.structured_content is not None
                    ids = [item["knowledge_id"] for item in listed.structured_content["items"]]
                    assert ids == [own]
                    found = await client.call_tool("knowledge_search", {"query": "notes"})
                    assert found.structured_content is not None
                    assert found.structured_content["knowledge_ids"] == [own]
                    who = "alice" if token == ALICE else "bob"
                    assert all(who in chunk["text"] for chunk in found.structured_content["results"])
                    # Bob cannot read the document, so his hits are never cited from Alice's read of it.
                    lines = [chunk["start_line"] for chunk in found.structured_content["results"]]
                    assert lines == ([2] if token == ALICE else [None]), lines

        await asyncio.gather(session(ALICE, "kb-alice"), session(BOB, "kb-bob"))
    sent = {caller_of(call.request) for call in router.calls if call.request.url.path != "/api/version"}
    assert sent == {ALICE, BOB}


async def test_a_credential_is_checked_once_and_remembered() -> None:
    router = openwebui()
    async with serving(router) as base:
        for _ in range(4):
            assert (await post_mcp(base, {"Authorization": f"Bearer {ALICE}"})).status_code == 200
    listings = [c for c in router.calls if c.request.url.path == "/api/v1/knowledge/"]
    assert len(listings) == 1  # tools/list makes no upstream request; the credential check is remembered


async def test_service_mode_uses_the_servers_key_for_admitted_agents() -> None:
    router = openwebui()
    env = {"OPENWEBUI_MCP_AUTH": "service", "OPENWEBUI_API_KEY": SERVICE_KEY, "OPENWEBUI_MCP_TOKENS": AGENT_TOKEN}
    async with serving(router, **env) as base:
        assert (await post_mcp(base, {"Authorization": f"Bearer {ALICE}"})).status_code == 401
        async with mcp_client(base, AGENT_TOKEN) as client:
            listed = await client.call_tool("knowledge_list", {})
    assert listed.structured_content is not None
    assert [item["knowledge_id"] for item in listed.structured_content["items"]] == ["kb-service"]
    assert {caller_of(c.request) for c in router.calls if c.request.url.path != "/api/version"} == {SERVICE_KEY}


async def test_a_caller_can_narrow_itself_to_reading() -> None:
    router = openwebui()
    async with serving(router) as base, mcp_client(base, ALICE, **{"X-OpenWebUI-Read-Only": "true"}) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        refused = await client.call_tool("knowledge_create", {"name": "new"})
        listed = await client.call_tool("knowledge_list", {})
    # It is offered only what it may do, and a write it calls anyway is refused before any request.
    assert {"knowledge_list", "knowledge_search", "knowledge_find"} <= names
    assert not names & {
        "knowledge_create",
        "knowledge_add",
        "knowledge_add_file",
        "knowledge_update",
        "knowledge_delete",
    }
    assert refused.is_error
    assert refused.structured_content is not None
    assert (refused.structured_content["code"], refused.structured_content["outcome"]) == ("forbidden", "not_applied")
    assert not listed.is_error
    assert all(c.request.method == "GET" for c in router.calls)


async def test_the_guard_rails_apply_to_every_caller() -> None:
    router = openwebui()
    async with serving(router, OPENWEBUI_READ_ONLY="true") as base, mcp_client(base, ALICE) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert "knowledge_list" in names
    assert not names & {"knowledge_create", "knowledge_add", "knowledge_update", "knowledge_delete"}


async def test_liveness_needs_no_upstream_and_readiness_does() -> None:
    router = openwebui()
    async with serving(router) as base, httpx.AsyncClient(trust_env=False) as http:
        assert (await http.get(f"{base}/healthz")).json() == {"status": "ok"}
        ready = await http.get(f"{base}/readyz")
        assert (ready.status_code, ready.json()["openwebui_version"]) == (200, "0.12.4")
    down = new_router()
    down.get("/api/version").mock(side_effect=httpx.ConnectError("refused"))
    async with serving(down) as base, httpx.AsyncClient(trust_env=False) as http:
        assert (await http.get(f"{base}/healthz")).status_code == 200
        assert (await http.get(f"{base}/readyz")).status_code == 503


@pytest.mark.parametrize("resume", [{}, {"last-event-id": "0"}])
async def test_a_get_of_the_endpoint_is_405_not_a_stream_that_never_speaks(resume: dict[str, str]) -> None:
    """Stateless: no stream could ever carry anything, so GET is refused as the spec allows (it opened a stream
    that stayed silent, and with Last-Event-ID answered 500)."""
    headers = {"authorization": f"Bearer {ALICE}", "accept": "text/event-stream", "mcp-protocol-version": "2025-11-25"}
    async with serving(openwebui()) as base, httpx.AsyncClient(trust_env=False, timeout=10) as http:
        async with http.stream("GET", f"{base}/mcp", headers={**headers, **resume}) as answer:
            status, allow = answer.status_code, answer.headers.get("allow")
        still = await post_mcp(base, {"authorization": f"Bearer {ALICE}"})
    assert (status, allow) == (405, "POST")
    assert still.status_code == 200


async def test_one_caller_does_not_set_the_log_level_of_a_shared_server() -> None:
    root = logging.getLogger()
    before = root.level
    async with serving(openwebui()) as base, mcp_client(base, ALICE, mode="legacy") as client:
        assert client.server_capabilities.logging is not None
        with pytest.warns(MCPDeprecationWarning):
            await client.set_logging_level("emergency")
        listed = await client.list_tools()
    assert root.level == before
    assert listed.tools


async def test_a_foreign_host_is_refused_unless_allowed() -> None:
    router = openwebui()
    headers = {"Authorization": f"Bearer {ALICE}", "Host": "mcp.example.com"}
    async with serving(router) as base:
        assert (await post_mcp(base, headers)).status_code == 421
    async with serving(router, OPENWEBUI_MCP_ALLOWED_HOSTS="mcp.example.com") as base:
        assert (await post_mcp(base, headers)).status_code == 200


async def test_the_body_limit_fits_the_largest_text_and_refuses_more() -> None:
    router = openwebui()
    text = "北" * 2_000_000  # the largest knowledge_add text, in CJK: about 6 MB as UTF-8 JSON
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "knowledge_list", "arguments": {}}}
    call["params"]["arguments"] = {"padding": text}  # type: ignore[index]
    body = json.dumps(call, ensure_ascii=False).encode()
    assert len(body) > 4 * 1024 * 1024  # more than the SDK's default limit
    async with serving(router) as base:
        fits = await post_mcp(base, {"Authorization": f"Bearer {ALICE}"}, body)
        too_big = await post_mcp(base, {"Authorization": f"Bearer {ALICE}"}, b" " * (17 * 1024 * 1024))
    assert fits.status_code == 200
    assert too_big.status_code == 413


async def test_the_access_log_carries_no_credential(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="openwebui_rag_mcp.access")
    router = openwebui()
    async with serving(router) as base:
        await post_mcp(base, {"Authorization": f"Bearer {ALICE}"})
        await post_mcp(base, {"Authorization": f"Bearer {STRANGER}"})
    lines = [r.getMessage() for r in caplog.records if r.name == "openwebui_rag_mcp.access"]
    assert any('"POST /mcp" 200' in line for line in lines)
    assert any('"POST /mcp" 401' in line for line in lines)
    assert ALICE not in caplog.text
    assert STRANGER not in caplog.text


def test_per_caller_http_needs_no_api_key_and_service_mode_needs_tokens() -> None:
    assert settings_for().api_key.get_secret_value() == ""
    with pytest.raises(Exception, match="OPENWEBUI_MCP_TOKENS is not set"):
        settings_for(OPENWEBUI_MCP_AUTH="service", OPENWEBUI_API_KEY=SERVICE_KEY)
    with pytest.raises(Exception, match="OPENWEBUI_API_KEY is not set"):
        load_settings({"OPENWEBUI_URL": BASE_URL})  # stdio still needs it


# -- issue 16, defect 13: edges of the HTTP transport -----------------------------------------------------------------


def credential_checks(router: respx.Router) -> list[str | None]:
    """The credentials Open WebUI was asked to accept (the cheap authorised read), in order."""
    return [caller_of(c.request) for c in router.calls if c.request.url.path == "/api/v1/knowledge/"]


def sse_result(answer: httpx.Response) -> dict[str, object]:
    """The JSON-RPC result in a Streamable HTTP answer (one SSE event, or plain JSON)."""
    for line in answer.text.splitlines():
        if line.startswith("data:"):
            message: dict[str, object] = json.loads(line.removeprefix("data:"))
            return message
    parsed: dict[str, object] = answer.json()
    return parsed


@pytest.mark.parametrize(
    "foreign", [{"Host": "evil.example.com"}, {"Origin": "https://evil.example.com"}], ids=["host", "origin"]
)
async def test_a_foreign_host_or_origin_costs_no_upstream_request(foreign: dict[str, str]) -> None:
    router = openwebui()
    async with serving(router) as base:
        answer = await post_mcp(base, {"Authorization": f"Bearer {STRANGER}", **foreign})
    assert answer.status_code == (421 if "Host" in foreign else 403)
    assert credential_checks(router) == []


async def test_failed_credentials_are_limited_per_client_without_asking_open_webui() -> None:
    router = openwebui()
    now = [1000.0]
    async with serving_at(router, lambda: now[0]) as base:
        assert (await post_mcp(base, {"Authorization": f"Bearer {ALICE}"})).status_code == 200
        for number in range(web.FAILURES_PER_CLIENT):
            answer = await post_mcp(base, {"Authorization": f"Bearer sk-guess-{number:020d}"})
            assert answer.status_code == 401
        asked = len(credential_checks(router))
        limited = await post_mcp(base, {"Authorization": f"Bearer sk-guess-{'x' * 20}"})
        also_limited = await post_mcp(base, {"Authorization": f"Bearer {BOB}"})  # good, but never checked yet
        still_admitted = await post_mcp(base, {"Authorization": f"Bearer {ALICE}"})  # checked before: no cost
        elsewhere = await post_mcp(base, {"Authorization": f"Bearer {BOB}", "X-Forwarded-For": "10.0.0.7"})
        assert len(credential_checks(router)) == asked + 1  # only the other client's check reached Open WebUI
        now[0] += web.FAILURE_WINDOW_SECONDS
        later = await post_mcp(base, {"Authorization": f"Bearer {BOB}"})
    assert asked == 1 + web.FAILURES_PER_CLIENT
    for answer in (limited, also_limited):
        assert answer.status_code == 429
        assert 1 <= int(answer.headers["retry-after"]) <= web.FAILURE_WINDOW_SECONDS
    assert (still_admitted.status_code, elsewhere.status_code, later.status_code) == (200, 200, 200)


async def test_one_stale_token_retried_does_not_lock_out_others_behind_the_same_address() -> None:
    """Issue 41, item 3: behind Open WebUI's own MCP connection or a proxy every caller shares one address; one
    stale token retried for minutes is one refused credential, not one a retry, so others are still checked."""
    router = openwebui()
    now = [1000.0]
    async with serving_at(router, lambda: now[0]) as base:
        for _ in range(3 * web.FAILURES_PER_CLIENT):
            answer = await post_mcp(base, {"Authorization": f"Bearer {STRANGER}"})
            assert answer.status_code == 401
            now[0] += web.REFUSED_SECONDS  # each retry is asked of Open WebUI again
        newcomer = await post_mcp(base, {"Authorization": f"Bearer {BOB}"})  # never admitted before
    assert newcomer.status_code == 200
    assert credential_checks(router).count(STRANGER) == 3 * web.FAILURES_PER_CLIENT


async def test_a_forwarded_address_is_believed_only_from_a_trusted_front_end() -> None:
    """X-Forwarded-For names the client only when the connection comes from OPENWEBUI_MCP_TRUSTED_PROXIES (here
    not loopback, where the test connects from): otherwise every guess counts against the connection's address."""
    router = openwebui()
    async with serving(router, OPENWEBUI_MCP_TRUSTED_PROXIES="10.9.0.0/16") as base:
        for number in range(web.FAILURES_PER_CLIENT):
            forwarded = {"X-Forwarded-For": f"10.3.0.{number}"}
            answer = await post_mcp(base, {"Authorization": f"Bearer sk-guess-{number:020d}", **forwarded})
            assert answer.status_code == 401
        limited = await post_mcp(base, {"Authorization": f"Bearer {BOB}", "X-Forwarded-For": "10.4.0.1"})
    assert limited.status_code == 429


def test_trusted_front_ends_are_addresses_or_networks() -> None:
    assert settings_for().trusted_proxies == ("127.0.0.1",)
    both = settings_for(OPENWEBUI_MCP_TRUSTED_PROXIES="10.0.0.0/8, fd00::1")
    assert both.trusted_proxies == ("10.0.0.0/8", "fd00::1")
    with pytest.raises(ConfigError) as caught:
        settings_for(OPENWEBUI_MCP_TRUSTED_PROXIES="proxy.example.com,10.0.0.0/33")
    assert any("OPENWEBUI_MCP_TRUSTED_PROXIES" in problem for problem in caught.value.problems)


async def test_failed_credentials_are_limited_overall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web, "FAILURES_OVERALL", 2 * web.FAILURES_PER_CLIENT)  # fewer requests, same rule
    router = openwebui()
    async with serving(router) as base:
        for number in range(web.FAILURES_OVERALL):
            client = {"X-Forwarded-For": f"10.1.{number // 250}.{number % 250}"}
            answer = await post_mcp(base, {"Authorization": f"Bearer sk-guess-{number:020d}", **client})
            assert answer.status_code == 401
        asked = len(credential_checks(router))
        limited = await post_mcp(base, {"Authorization": f"Bearer {ALICE}", "X-Forwarded-For": "10.2.0.1"})
    assert asked == web.FAILURES_OVERALL
    assert limited.status_code == 429
    assert len(credential_checks(router)) == asked


async def test_a_refused_credential_is_remembered_briefly() -> None:
    router = openwebui()
    async with serving(router) as base:
        for _ in range(3):
            assert (await post_mcp(base, {"Authorization": f"Bearer {STRANGER}"})).status_code == 401
    assert credential_checks(router) == [STRANGER]


@pytest.mark.parametrize("token", ["sk-ключ-0123456789", "sk-caf\u00e9-0123456789", "sk-\u2603"])
async def test_a_token_that_is_not_ascii_is_401_without_a_traceback(
    token: str, caplog: pytest.LogCaptureFixture
) -> None:
    router = openwebui()
    async with serving(router) as base, httpx.AsyncClient(trust_env=False) as http:
        answer = await http.post(
            f"{base}/mcp",
            content=b"{}",
            headers=[
                (b"content-type", b"application/json"),
                (b"accept", b"application/json, text/event-stream"),
                (b"authorization", b"Bearer " + token.encode()),
            ],
        )
    assert answer.status_code == 401
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    assert credential_checks(router) == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


WRITES = {"knowledge_create", "knowledge_add", "knowledge_add_file", "knowledge_update", "knowledge_delete"}


@pytest.mark.parametrize(
    ("value", "read_only"),
    [
        *[(word, True) for word in ("1", "true", "yes", "on", "ON", "True")],
        *[(word, False) for word in ("0", "false", "no", "off", "", None)],
    ],
)
async def test_the_read_only_header_reads_the_configurations_words(value: str | None, read_only: bool) -> None:
    router = openwebui()
    header = {} if value is None else {"X-OpenWebUI-Read-Only": value}
    async with serving(router) as base:
        answer = await post_mcp(base, {"Authorization": f"Bearer {ALICE}", **header})
    assert answer.status_code == 200
    result = sse_result(answer)["result"]
    assert isinstance(result, dict)
    names = {tool["name"] for tool in result["tools"]}
    assert ("knowledge_list" in names, bool(names & WRITES)) == (True, not read_only)


@pytest.mark.parametrize("value", ["y", "n", "maybe", "enabled", "2"])
async def test_a_read_only_header_that_is_not_a_yes_or_no_is_400(value: str) -> None:
    router = openwebui()
    async with serving(router) as base:
        answer = await post_mcp(base, {"Authorization": f"Bearer {ALICE}", "X-OpenWebUI-Read-Only": value})
    assert answer.status_code == 400
    assert "X-OpenWebUI-Read-Only" in answer.json()["error"]


PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version",
}


@pytest.mark.parametrize(
    ("origin", "env"),
    [
        ("http://localhost:5173", {}),
        ("https://chat.example.com", {"OPENWEBUI_MCP_ALLOWED_ORIGINS": "https://chat.example.com"}),
    ],
)
async def test_a_browser_client_from_an_allowed_origin_is_served(origin: str, env: dict[str, str]) -> None:
    router = openwebui()
    async with serving(router, **env) as base, httpx.AsyncClient(trust_env=False) as http:
        preflight = await http.options(f"{base}/mcp", headers={"Origin": origin, **PREFLIGHT})
        refused = await post_mcp(base, {"Origin": origin})
        served = await post_mcp(base, {"Origin": origin, "Authorization": f"Bearer {ALICE}"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed = {name.strip().lower() for name in preflight.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "mcp-protocol-version", "x-openwebui-read-only"} <= allowed
    assert "origin" in preflight.headers["vary"].lower()
    for answer in (refused, served):  # the page may read the answer, the challenge included
        assert answer.headers["access-control-allow-origin"] == origin
        assert "mcp-session-id" in answer.headers["access-control-expose-headers"].lower()
    assert "www-authenticate" in refused.headers["access-control-expose-headers"].lower()
    assert (refused.status_code, served.status_code) == (401, 200)
    assert credential_checks(router) == [ALICE]  # the preflight asked nothing


async def test_a_preflight_from_a_foreign_origin_is_refused() -> None:
    router = openwebui()
    async with serving(router) as base, httpx.AsyncClient(trust_env=False) as http:
        preflight = await http.options(f"{base}/mcp", headers={"Origin": "https://evil.example.com", **PREFLIGHT})
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    assert credential_checks(router) == []


async def test_health_over_http_shows_no_upstream_url_or_allowlist() -> None:
    router = openwebui()
    async with serving(router, OPENWEBUI_KNOWLEDGE_IDS="kb-alice,kb-secret") as base, mcp_client(base, ALICE) as client:
        health = await client.call_tool("knowledge_health", {})
    assert not health.is_error
    body = health.structured_content
    assert body is not None
    assert (body["url"], body["controls"]["knowledge_ids"]) == (None, None)
    shown = json.dumps(body) + json.dumps([block.model_dump() for block in health.content])
    assert BASE_URL.removeprefix("http://").split("/")[0] not in shown
    assert "kb-secret" not in shown


async def test_a_caller_accepted_lately_is_not_locked_out_by_others_failing() -> None:
    """Every caller may come through one address (Open WebUI's container, a proxy): once its failed checks are used
    up, a credential accepted within the hour is still checked (and admitted), while new ones wait."""
    router = openwebui()
    now = [1000.0]
    async with serving_at(router, lambda: now[0]) as base:
        assert (await post_mcp(base, {"Authorization": f"Bearer {ALICE}"})).status_code == 200
        now[0] += web.ACCEPTED_SECONDS + 1  # no longer admitted from memory alone
        for number in range(web.FAILURES_PER_CLIENT):
            await post_mcp(base, {"Authorization": f"Bearer sk-guess-{number:020d}"})
        known = await post_mcp(base, {"Authorization": f"Bearer {ALICE}"})
        new = await post_mcp(base, {"Authorization": f"Bearer {BOB}"})
    assert (known.status_code, new.status_code) == (200, 429)
    assert credential_checks(router).count(ALICE) == 2


async def test_service_mode_admits_a_good_token_whatever_others_sent() -> None:
    router = openwebui()
    env = {"OPENWEBUI_MCP_AUTH": "service", "OPENWEBUI_API_KEY": SERVICE_KEY, "OPENWEBUI_MCP_TOKENS": AGENT_TOKEN}
    async with serving(router, **env) as base:
        for number in range(web.FAILURES_PER_CLIENT + 2):
            await post_mcp(base, {"Authorization": f"Bearer sk-guess-{number:020d}"})
        bad = await post_mcp(base, {"Authorization": f"Bearer sk-guess-{'y' * 20}"})
        good = await post_mcp(base, {"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert (bad.status_code, good.status_code) == (429, 200)
