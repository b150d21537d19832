"""The Streamable HTTP transport, served by uvicorn on loopback inside the test's event loop, against a mocked Open
WebUI that answers each credential with its own user's bases: 401 paths, both credential modes, per-caller identity,
guard rails, health endpoints, Host checks and the body limit, over both MCP protocol generations."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
import respx
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from openwebui_rag_mcp.config import Settings, load_settings
from openwebui_rag_mcp.web import build_app
from tests.conftest import BASE_URL, mock_transport, new_router

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
        return httpx.Response(
            200, json={"documents": [texts], "metadatas": [[{"file_id": "f-1"}] * len(texts)], "distances": [[0.5]]}
        )

    router.get("/api/v1/knowledge/").mock(side_effect=listing)
    router.post("/api/v1/retrieval/query/collection").mock(side_effect=search)
    return router


def settings_for(**env: str) -> Settings:
    return load_settings(
        {"OPENWEBUI_URL": BASE_URL, "OPENWEBUI_MCP_TRANSPORT": "streamable-http", "OPENWEBUI_MCP_PORT": "1", **env}
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def serving(router: respx.Router, **env: str) -> AsyncIterator[str]:
    """The HTTP transport on a loopback port; yields its base URL."""
    port = free_port()
    settings = settings_for(**env)
    config = uvicorn.Config(
        build_app(settings, transport=mock_transport(router)),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn stopped while starting"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
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
