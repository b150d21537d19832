"""The read tools through the MCP protocol (in-memory `mcp.Client`), against a mocked Open WebUI per release family."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import respx
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, Tool

from openwebui_rag_mcp import __version__
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.models import ErrorBody
from openwebui_rag_mcp.server import create_server
from tests.conftest import API_KEY, assert_no_key, fixture_json, make_settings, mock_transport, sent, text_of

pytestmark = pytest.mark.anyio

READ_TOOLS = ("knowledge_list", "knowledge_files", "knowledge_search", "knowledge_get_file", "knowledge_health")
ALIASES = {
    "rag_list_knowledge": "knowledge_list",
    "rag_search": "knowledge_search",
    "rag_get_file": "knowledge_get_file",
    "rag_health": "knowledge_health",
}
ERROR_KEYS = {"ok", "code", "message", "http_status", "retryable", "stage", "file_id", "outcome"}
KB_FRUIT = "c0ffee00-1111-4222-8333-444455556666"
KB_OPS = "deadbeef-7777-4888-9999-aaaabbbbcccc"
KB_REPORTS = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
KB_EMPTY = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
FRUIT_FILE = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
REPORT_FILE = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d"
CJK_REPORT_FILE = "3b4c5d6e-7f8a-4b9c-8d0e-1f2a3b4c5d6e"


# -- a mocked Open WebUI per release family ---------------------------------------------------------------------


@dataclass
class Upstream:
    release: str
    router: respx.Router
    knowledge_ids: list[str]  # every base the list returns, in order
    knowledge_id: str  # a base with documents
    file_id: str  # a document of that base
    file_text: str
    listing: respx.Route
    query: respx.Route
    version: respx.Route

    def calls_beyond_version(self) -> list[str]:
        return [call.request.url.path for call in self.router.calls if call.request.url.path != "/api/version"]


def openwebui_0124(router: respx.Router) -> Upstream:
    listing_body = fixture_json("knowledge_list_0124.json")
    file_body = fixture_json("file_0124.json")
    version = router.get("/api/version").respond(json={"version": "0.12.4", "deployment_id": ""})
    listing = router.get("/api/v1/knowledge/", params={"page": "1"}).respond(json=listing_body)

    def search(request: httpx.Request) -> httpx.Response:  # Open WebUI's ILIKE on the name and description
        needle = request.url.params["query"].lower()
        found = [i for i in listing_body["items"] if needle in f"{i['name']}\n{i['description']}".lower()]
        return httpx.Response(200, json={"items": found, "total": len(found)})

    router.get("/api/v1/knowledge/search", params={"page": "1"}).mock(side_effect=search)
    router.get(f"/api/v1/knowledge/{KB_FRUIT}/files").respond(json=fixture_json("knowledge_files_0124.json"))
    router.get(f"/api/v1/files/{FRUIT_FILE}").respond(json=file_body)
    query = router.post("/api/v1/retrieval/query/collection").respond(json=fixture_json("query_collection_0124.json"))
    return Upstream(
        "0.12.4",
        router,
        [KB_FRUIT, KB_OPS],
        KB_FRUIT,
        FRUIT_FILE,
        file_body["data"]["content"],
        listing,
        query,
        version,
    )


def openwebui_065(router: respx.Router) -> Upstream:
    knowledge = fixture_json("knowledge_065.json")
    file_body = knowledge["files"][0]
    version = router.get("/api/version").respond(json={"version": "0.6.5"})
    listing = router.get("/api/v1/knowledge/").respond(json=fixture_json("knowledge_list_065.json"))
    router.get(f"/api/v1/knowledge/{KB_REPORTS}").respond(json=knowledge)
    router.get(f"/api/v1/files/{REPORT_FILE}").respond(json=file_body)
    router.get(f"/api/v1/files/{CJK_REPORT_FILE}").respond(json=knowledge["files"][1])
    query = router.post("/api/v1/retrieval/query/collection").respond(json=fixture_json("query_collection_065.json"))
    return Upstream(
        "0.6.5",
        router,
        [KB_REPORTS, KB_EMPTY],
        KB_REPORTS,
        REPORT_FILE,
        file_body["data"]["content"],
        listing,
        query,
        version,
    )


FAMILIES: dict[str, Callable[[respx.Router], Upstream]] = {"0.12.4": openwebui_0124, "0.6.5": openwebui_065}


@pytest.fixture(params=list(FAMILIES))
def upstream(request: pytest.FixtureRequest, router: respx.Router) -> Upstream:
    family: str = request.param
    return FAMILIES[family](router)


@pytest.fixture
def upstream_0124(router: respx.Router) -> Upstream:
    return openwebui_0124(router)


class CurrentRouter(httpx.AsyncBaseTransport):
    """A transport that hands each request to the router of the running test.

    Building the server costs more than a whole tool call, so one server per configuration is built once and
    reused; each `Client` session still runs the lifespan, with a fresh Open WebUI client and release cache.
    """

    router: respx.Router | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert self.router is not None
        return await mock_transport(self.router).handle_async_request(request)


_TRANSPORT = CurrentRouter()
_SERVERS: dict[frozenset[tuple[str, str]], MCPServer[App]] = {}


@asynccontextmanager
async def connect(router: respx.Router, url: str | None = None, **env: str) -> AsyncIterator[Client]:
    key = frozenset({**env, "OPENWEBUI_URL": url or ""}.items())
    if key not in _SERVERS:
        settings = make_settings(url, **env) if url else make_settings(**env)
        _SERVERS[key] = create_server(settings, transport=_TRANSPORT)
    _TRANSPORT.router = router
    try:
        async with Client(_SERVERS[key], raise_exceptions=True) as client:
            yield client
    finally:
        _TRANSPORT.router = None


def structured(result: CallToolResult) -> dict[str, Any]:
    """The structured content, after checking that the text block carries the same JSON."""
    assert isinstance(result.structured_content, dict)
    assert json.loads(text_of(result)) == result.structured_content
    return result.structured_content


def validate(instance: object, schema: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(instance, schema)


async def ok(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments or {})
    assert result.is_error is False, text_of(result)
    return structured(result)


async def failed(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments or {})
    assert result.is_error is True
    body = structured(result)
    assert set(body) >= ERROR_KEYS
    assert body["ok"] is False
    validate(body, ErrorBody.model_json_schema())
    assert_no_key(text_of(result))
    return body


async def tools_by_name(client: Client) -> dict[str, Tool]:
    return {tool.name: tool for tool in (await client.list_tools()).tools}


# -- tools/list -------------------------------------------------------------------------------------------------


async def test_tools_list_has_every_read_tool_and_alias(router: respx.Router) -> None:
    openwebui_0124(router)
    async with connect(router) as client:
        tools = await tools_by_name(client)
    assert set(tools) >= set(READ_TOOLS) | set(ALIASES)


async def test_every_tool_is_described_and_annotated(router: respx.Router) -> None:
    openwebui_0124(router)
    async with connect(router) as client:
        tools = await tools_by_name(client)
    for name, tool in tools.items():
        assert tool.description, name
        assert tool.output_schema, name  # an alias's is its tool's (see the next test)
        assert tool.output_schema.get("type") == "object", name
        assert tool.annotations is not None, name
        assert tool.annotations.open_world_hint is not False, name  # unset means true (MCP)
        for prop, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{name}.{prop} has no description"
        assert "ctx" not in tool.input_schema.get("properties", {}), name
    for name in [*READ_TOOLS, *ALIASES]:
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.read_only_hint is True, name
        assert annotations.destructive_hint is not True, name


async def test_aliases_have_the_schemas_of_the_originals(router: respx.Router) -> None:
    openwebui_0124(router)
    async with connect(router) as client:
        tools = await tools_by_name(client)
    for alias, original in ALIASES.items():
        assert tools[alias].input_schema == tools[original].input_schema, alias
        assert tools[original].output_schema is not None, original
        assert tools[alias].output_schema == tools[original].output_schema, alias
        assert tools[alias].annotations == tools[original].annotations, alias
        description = tools[alias].description or ""
        assert (tools[original].description or "") in description, alias
        assert original in description.removeprefix(tools[original].description or ""), alias


async def test_descriptions_say_which_id_a_tool_takes(router: respx.Router) -> None:
    openwebui_0124(router)
    async with connect(router) as client:
        tools = await tools_by_name(client)
    files_id = tools["knowledge_files"].input_schema["properties"]["knowledge_id"]["description"]
    get_id = tools["knowledge_get_file"].input_schema["properties"]["file_id"]["description"]
    assert "knowledge_id" in files_id
    assert "not a file_id" in files_id
    assert "file_id" in get_id
    assert "not a knowledge_id" in get_id


# -- every read tool, both families -----------------------------------------------------------------------------

TOOL_CALLS: list[tuple[str, Callable[[Upstream], dict[str, Any]]]] = [
    ("knowledge_list", lambda u: {}),
    ("rag_list_knowledge", lambda u: {}),
    ("knowledge_files", lambda u: {"knowledge_id": u.knowledge_id}),
    ("knowledge_files", lambda u: {"knowledge_id": u.knowledge_id, "page": 1}),
    ("knowledge_files", lambda u: {"knowledge_id": u.knowledge_id, "query": "a", "limit": 1}),
    ("knowledge_list", lambda u: {"query": "zzz-nothing"}),
    ("knowledge_list", lambda u: {"limit": 1}),
    ("knowledge_search", lambda u: {"query": "yellow fruit"}),
    ("knowledge_search", lambda u: {"query": "отчёт 报告", "knowledge_ids": [u.knowledge_id], "top_k": 2}),
    ("rag_search", lambda u: {"query": "yellow fruit"}),
    ("knowledge_get_file", lambda u: {"file_id": u.file_id}),
    ("rag_get_file", lambda u: {"file_id": u.file_id, "offset": 3}),
    ("knowledge_health", lambda u: {}),
    ("rag_health", lambda u: {}),
]


@pytest.mark.parametrize(
    ("tool", "arguments"), [pytest.param(t, a, id=f"{t}-{i}") for i, (t, a) in enumerate(TOOL_CALLS)]
)
async def test_structured_content_matches_the_output_schema(
    upstream: Upstream, tool: str, arguments: Callable[[Upstream], dict[str, Any]]
) -> None:
    async with connect(upstream.router) as client:
        schema = (await tools_by_name(client))[ALIASES.get(tool, tool)].output_schema  # an alias's is its tool's
        assert schema is not None
        body = await ok(client, tool, arguments(upstream))
    validate(body, schema)


async def test_knowledge_list(upstream: Upstream) -> None:
    async with connect(upstream.router) as client:
        body = await ok(client, "knowledge_list")
    assert [item["knowledge_id"] for item in body["items"]] == upstream.knowledge_ids
    assert body["count"] == body["total"] == len(upstream.knowledge_ids)
    assert body["next_cursor"] is None
    assert body["hint"] is None
    assert all(
        set(item) == {"knowledge_id", "name", "description", "file_count", "updated_at", "write_access"}
        for item in body["items"]
    )
    if upstream.release == "0.6.5":
        assert [item["file_count"] for item in body["items"]] == [2, 0]
        assert body["items"][0]["name"] == "Отчёты"
    else:
        assert [item["write_access"] for item in body["items"]] == [True, False]
        assert body["items"][1]["name"] == "运维手册"


async def test_knowledge_files(upstream: Upstream) -> None:
    async with connect(upstream.router) as client:
        body = await ok(client, "knowledge_files", {"knowledge_id": upstream.knowledge_id})
    assert body["knowledge_id"] == upstream.knowledge_id
    assert body["count"] == 2
    assert body["total"] == 2
    assert body["next_cursor"] is None
    assert body["hint"] is None
    assert body["items"][0]["file_id"] == upstream.file_id
    if upstream.release == "0.12.4":
        assert body["items"][0]["title"] == "All about fruit"
        assert body["items"][1]["filename"] == "заметки.txt"
    else:
        assert [item["filename"] for item in body["items"]] == ["отчёт.md", "报告.md"]


async def test_knowledge_get_file(upstream: Upstream) -> None:
    async with connect(upstream.router) as client:
        body = await ok(client, "knowledge_get_file", {"file_id": upstream.file_id})
    assert body["file_id"] == upstream.file_id
    assert body["text"] == upstream.file_text
    assert body["truncated"] is False
    assert body["total_chars"] == len(upstream.file_text)
    assert body["next_offset"] is None


async def test_health(upstream: Upstream) -> None:
    async with connect(upstream.router) as client:
        body = await ok(client, "knowledge_health")
    assert body["ok"] is True
    assert body["openwebui_version"] == upstream.release
    assert body["server_version"] == __version__
    assert body["url"] == "http://owui.test"
    assert body["knowledge_bases_visible"] == 2
    paged = upstream.release == "0.12.4"
    assert body["capabilities"]["paged_lists"] is paged
    assert body["capabilities"]["files_endpoint"] is paged
    assert body["capabilities"]["process_status"] is paged
    assert body["capabilities"]["keep_file_on_remove"] is paged
    assert ("paged" if paged else "flat") in body["family"]


async def test_health_auth_failure(router: respx.Router) -> None:
    router.get("/api/version").respond(json={"version": "0.12.4"})
    router.get("/api/v1/knowledge/").respond(
        401, json={"detail": "Your session has expired or the token is invalid. Please sign in again."}
    )
    async with connect(router) as client:
        for tool in ("knowledge_health", "rag_health"):
            body = await failed(client, tool)
            assert body["code"] == "auth"
            assert body["http_status"] == 401
            assert body["retryable"] is False
            assert "OPENWEBUI_API_KEY" in body["message"]


# -- search -----------------------------------------------------------------------------------------------------


async def test_search_all_bases_lists_then_queries_once(upstream: Upstream) -> None:
    async with connect(upstream.router) as client:
        body = await ok(client, "knowledge_search", {"query": "  yellow fruit  ", "knowledge_ids": None})
    assert upstream.listing.call_count == 1
    assert upstream.query.call_count == 1
    assert sent(upstream.query) == {"collection_names": upstream.knowledge_ids, "query": "yellow fruit", "k": 8}
    calls = upstream.calls_beyond_version()
    assert calls[0] == "/api/v1/knowledge/"
    # One retrieval, then the documents of the hits, each read once for its citation.
    query_at = calls.index("/api/v1/retrieval/query/collection")
    cited = {f"/api/v1/files/{chunk['file_id']}" for chunk in body["results"]}
    assert sorted(calls[query_at + 1 :]) == sorted(cited)
    assert body["knowledge_ids"] == upstream.knowledge_ids
    assert body["query"] == "yellow fruit"
    assert body["count"] == 2
    # Two bases searched: the base of a chunk is not certain.
    assert [chunk["knowledge_id"] for chunk in body["results"]] == [None, None]


async def test_search_without_knowledge_ids_argument_searches_every_base(upstream_0124: Upstream) -> None:
    async with connect(upstream_0124.router) as client:
        await ok(client, "rag_search", {"query": "bananas"})
    assert sent(upstream_0124.query)["collection_names"] == [KB_FRUIT, KB_OPS]


async def test_search_with_no_bases_asks_nothing(upstream_0124: Upstream) -> None:
    async with connect(upstream_0124.router) as client:
        body = await ok(client, "knowledge_search", {"query": "bananas", "knowledge_ids": []})
    assert body == {"query": "bananas", "knowledge_ids": [], "results": [], "count": 0}
    assert upstream_0124.calls_beyond_version() == []


async def test_search_when_the_key_sees_no_base_does_not_query(router: respx.Router) -> None:
    router.get("/api/version").respond(json={"version": "0.12.4"})
    router.get("/api/v1/knowledge/").respond(json={"items": [], "total": 0})
    query = router.post("/api/v1/retrieval/query/collection")
    async with connect(router) as client:
        body = await ok(client, "knowledge_search", {"query": "bananas"})
    assert body["results"] == []
    assert query.call_count == 0


async def test_search_explicit_ids_deduplicated_in_one_request(upstream_0124: Upstream) -> None:
    ids = [KB_OPS, KB_FRUIT, KB_OPS, KB_FRUIT]
    async with connect(upstream_0124.router) as client:
        body = await ok(client, "knowledge_search", {"query": "bananas", "knowledge_ids": ids})
    assert upstream_0124.listing.call_count == 1  # which bases this key can read: checked before searching
    assert upstream_0124.query.call_count == 1
    assert sent(upstream_0124.query)["collection_names"] == [KB_OPS, KB_FRUIT]
    assert body["knowledge_ids"] == [KB_OPS, KB_FRUIT]


async def test_search_keeps_open_webui_order_and_values(upstream_0124: Upstream) -> None:
    hybrid = fixture_json("query_collection_hybrid_0124.json")
    upstream_0124.query.respond(json=hybrid)
    async with connect(upstream_0124.router) as client:
        body = await ok(client, "knowledge_search", {"query": "bananas", "knowledge_ids": [KB_FRUIT]})
    assert [c["text"] for c in body["results"]] == hybrid["documents"][0]
    assert [c["distance"] for c in body["results"]] == hybrid["distances"][0]
    assert [c["score"] for c in body["results"]] == [3.4721, -0.1875]
    for chunk in body["results"]:
        assert "_chunk_hash" not in chunk["metadata"]
        assert "embedding_config" not in chunk["metadata"]
        assert "created_by" not in chunk["metadata"]


async def test_search_one_base_sets_knowledge_id(upstream: Upstream) -> None:
    async with connect(upstream.router) as client:
        body = await ok(client, "knowledge_search", {"query": "q", "knowledge_ids": [upstream.knowledge_id]})
    assert sent(upstream.query)["collection_names"] == [upstream.knowledge_id]
    assert body["count"] == 2
    assert {chunk["knowledge_id"] for chunk in body["results"]} == {upstream.knowledge_id}


async def test_search_chunks_keep_cyrillic_and_cjk(router: respx.Router) -> None:
    upstream = openwebui_065(router)
    async with connect(router) as client:
        body = await ok(client, "knowledge_search", {"query": "выручка 收入", "knowledge_ids": [upstream.knowledge_id]})
    assert sent(upstream.query)["query"] == "выручка 收入"
    assert [c["text"] for c in body["results"]] == [
        "Квартальный отчёт: выручка выросла на 12 %.",
        "季度报告：收入增长了百分之十二。",
    ]
    assert body["results"][1]["title"] == "季度报告"


@pytest.mark.parametrize(
    ("env", "top_k", "k"), [({}, None, 8), ({"RAG_TOP_K": "3"}, None, 3), ({"RAG_TOP_K": "3"}, 50, 50)]
)
async def test_search_top_k_is_sent_as_k(
    upstream_0124: Upstream, env: dict[str, str], top_k: int | None, k: int
) -> None:
    arguments: dict[str, Any] = {"query": "bananas", "knowledge_ids": [KB_FRUIT]}
    if top_k is not None:
        arguments["top_k"] = top_k
    async with connect(upstream_0124.router, **env) as client:
        await ok(client, "knowledge_search", arguments)
    assert sent(upstream_0124.query) == {"collection_names": [KB_FRUIT], "query": "bananas", "k": k}


async def test_search_returns_at_most_top_k(upstream_0124: Upstream) -> None:
    async with connect(upstream_0124.router) as client:
        body = await ok(client, "knowledge_search", {"query": "bananas", "knowledge_ids": [KB_FRUIT], "top_k": 1})
    assert body["count"] == 1
    assert len(body["results"]) == 1
    assert body["results"][0]["text"].startswith("## Bananas")


async def test_search_passes_k_reranker(upstream_0124: Upstream) -> None:
    async with connect(upstream_0124.router) as client:
        await ok(client, "knowledge_search", {"query": "bananas", "knowledge_ids": [KB_FRUIT], "k_reranker": 40})
    assert sent(upstream_0124.query) == {"collection_names": [KB_FRUIT], "query": "bananas", "k": 8, "k_reranker": 40}


async def test_search_chunk_text_is_cut_to_the_budget(upstream_0124: Upstream) -> None:
    long_text = "Жёлтые бананы. " * 100
    upstream_0124.query.respond(json={"distances": [[0.9]], "documents": [[long_text]], "metadatas": [[{}]]})
    async with connect(upstream_0124.router, RAG_CHUNK_MAX_CHARS="100") as client:
        body = await ok(client, "knowledge_search", {"query": "bananas", "knowledge_ids": [KB_FRUIT]})
    [chunk] = body["results"]
    assert chunk["truncated"] is True
    assert chunk["text"] == long_text[:100]


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"query": "bananas", "top_k": 0}, id="top_k 0"),
        pytest.param({"query": "bananas", "top_k": 51}, id="top_k 51"),
        pytest.param({"query": "bananas", "top_k": -1}, id="top_k -1"),
        pytest.param({"query": ""}, id="empty query"),
        pytest.param({"query": "   \n\t "}, id="whitespace query"),
        pytest.param({"query": "x" * 4_001}, id="query too long"),
        pytest.param({"query": "bananas", "k_reranker": 0}, id="k_reranker 0"),
        pytest.param({"query": "bananas", "knowledge_ids": ["../etc"]}, id="bad knowledge id"),
        pytest.param({"query": "bananas", "knowledge_ids": ["ok-id", "a/b"]}, id="one bad id among good"),
        pytest.param({"query": "bananas", "knowledge_ids": [f"kb-{n}" for n in range(101)]}, id="too many ids"),
    ],
)
async def test_search_invalid_arguments_ask_nothing(upstream_0124: Upstream, arguments: dict[str, Any]) -> None:
    async with connect(upstream_0124.router) as client:
        body = await failed(client, "knowledge_search", arguments)
    assert body["code"] == "invalid_argument"
    assert body["http_status"] is None
    assert body["retryable"] is False
    assert upstream_0124.calls_beyond_version() == []


# -- reading a document -----------------------------------------------------------------------------------------


def long_file(router: respx.Router, text: str) -> respx.Route:
    body = {"id": "f-long", "filename": "long.md", "meta": {"name": "long.md"}, "data": {"content": text}}
    return router.get("/api/v1/files/f-long").respond(json=body)


async def test_get_file_is_cut_at_the_configured_limit_and_pages(router: respx.Router) -> None:
    openwebui_0124(router)
    text = "".join(f"{n:04d}Ж字 " for n in range(400))  # 2,800 characters
    long_file(router, text)
    pieces: list[str] = []
    async with connect(router, RAG_FILE_MAX_CHARS="1000") as client:
        first = await ok(client, "knowledge_get_file", {"file_id": "f-long"})
        assert (first["truncated"], first["total_chars"], first["offset"], first["next_offset"]) == (
            True,
            2_800,
            0,
            1_000,
        )
        pieces.append(first["text"])
        second = await ok(client, "rag_get_file", {"file_id": "f-long", "offset": first["next_offset"]})
        assert (second["offset"], second["next_offset"]) == (1_000, 2_000)
        pieces.append(second["text"])
        last = await ok(client, "knowledge_get_file", {"file_id": "f-long", "offset": 2_000})
        assert last["next_offset"] is None
        assert last["truncated"] is False  # nothing follows the last slice
        assert len(last["text"]) == 800
        pieces.append(last["text"])
        small = await ok(client, "knowledge_get_file", {"file_id": "f-long", "max_chars": 10})
        assert small["text"] == text[:10]
        assert small["next_offset"] == 10
    assert "".join(pieces) == text
    assert [len(p) for p in pieces] == [1_000, 1_000, 800]


async def test_get_file_max_chars_above_the_limit_is_refused(router: respx.Router) -> None:
    openwebui_0124(router)
    route = long_file(router, "x" * 5_000)
    async with connect(router, RAG_FILE_MAX_CHARS="1000") as client:
        body = await failed(client, "knowledge_get_file", {"file_id": "f-long", "max_chars": 1_001})
    assert body["code"] == "invalid_argument"
    assert route.call_count == 0


@pytest.mark.parametrize("file_id", ["../x", "a/b", "%2F", "a?b", "", " ", "a b", "a#b", "файл", "x" * 129])
async def test_get_file_invalid_id_asks_nothing(upstream_0124: Upstream, file_id: str) -> None:
    async with connect(upstream_0124.router) as client:
        for tool in ("knowledge_get_file", "rag_get_file"):
            body = await failed(client, tool, {"file_id": file_id})
            assert body["code"] == "invalid_argument"
            assert body["http_status"] is None
    assert upstream_0124.calls_beyond_version() == []


@pytest.mark.parametrize("knowledge_id", ["../x", "a/b", "%2F", "a?b", "", " "])
async def test_knowledge_files_invalid_id_asks_nothing(upstream_0124: Upstream, knowledge_id: str) -> None:
    async with connect(upstream_0124.router) as client:
        body = await failed(client, "knowledge_files", {"knowledge_id": knowledge_id})
    assert body["code"] == "invalid_argument"
    assert upstream_0124.calls_beyond_version() == []


# -- failures ---------------------------------------------------------------------------------------------------


async def test_failure_is_structured_and_the_session_keeps_serving(upstream: Upstream) -> None:
    upstream.router.get("/api/v1/files/missing-file").respond(404, json={"detail": "Not Found"})
    async with connect(upstream.router) as client:
        body = await failed(client, "knowledge_get_file", {"file_id": "missing-file"})
        # The SPEC's fields, `null` where not applicable (more fields may be added).
        assert {key: body[key] for key in ERROR_KEYS if key != "message"} == {
            "ok": False,
            "code": "not_found",
            "http_status": 404,
            "retryable": False,
            "stage": None,
            "file_id": None,
            "outcome": None,
        }
        assert "not found" in body["message"]
        assert "/api/v1/files/missing-file" in body["message"]
        again = await ok(client, "knowledge_get_file", {"file_id": upstream.file_id})
        assert again["file_id"] == upstream.file_id
        listed = await ok(client, "knowledge_list")
        assert listed["count"] == 2


@pytest.mark.parametrize(
    ("response", "code", "retryable"),
    [
        (httpx.Response(500, json={"detail": "boom"}), "upstream_error", False),
        (httpx.Response(503, text="Service Unavailable"), "upstream_unavailable", True),
        (httpx.Response(429, json={"detail": "slow down"}), "rate_limited", True),
        (
            httpx.Response(403, json={"detail": "You do not have permission to access this resource."}),
            "forbidden",
            False,
        ),
        (httpx.Response(200, html="<!doctype html><html></html>"), "unexpected_response", False),
        (httpx.Response(200, json={"unexpected": True}), "unexpected_response", False),
        (httpx.Response(200, json={"distances": [[0.1]], "documents": [["a", "b"]]}), "unexpected_response", False),
    ],
)
async def test_search_failures(upstream_0124: Upstream, response: httpx.Response, code: str, retryable: bool) -> None:
    upstream_0124.query.mock(return_value=response)
    async with connect(upstream_0124.router) as client:
        body = await failed(client, "knowledge_search", {"query": "bananas", "knowledge_ids": [KB_FRUIT]})
        assert body["code"] == code
        assert body["retryable"] is retryable
        upstream_0124.query.respond(json=fixture_json("query_collection_0124.json"))
        assert (await ok(client, "knowledge_search", {"query": "bananas", "knowledge_ids": [KB_FRUIT]}))["count"] == 2


async def test_knowledge_files_on_a_base_the_key_cannot_read_065(router: respx.Router) -> None:
    router.get("/api/version").respond(json={"version": "0.6.5"})
    router.get("/api/v1/knowledge/kb-hidden").respond(200, content=b"null", content_type="application/json")
    async with connect(router) as client:
        body = await failed(client, "knowledge_files", {"knowledge_id": "kb-hidden"})
    assert body["code"] == "not_found"


async def test_key_echoed_by_upstream_never_reaches_the_agent(router: respx.Router) -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"detail": f"denied for {request.headers['authorization']}"})

    router.get("/api/version").mock(side_effect=echo)
    router.get("/api/v1/knowledge/").mock(side_effect=echo)
    router.get("/api/v1/files/f-1").mock(side_effect=echo)
    async with connect(router) as client:
        for tool, arguments in [
            ("knowledge_list", {}),
            ("knowledge_health", {}),
            ("knowledge_get_file", {"file_id": "f-1"}),
            ("knowledge_search", {"query": "q"}),
        ]:
            result = await client.call_tool(tool, arguments)
            assert result.is_error is True
            assert_no_key(text_of(result), json.dumps(result.structured_content))
    assert router.calls.call_count >= 4
    assert all(call.request.headers["authorization"] == f"Bearer {API_KEY}" for call in router.calls)


async def test_unreachable_at_start_then_recovers(router: respx.Router) -> None:
    up = {"now": False}

    def gate(request: httpx.Request) -> httpx.Response | None:
        if not up["now"]:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        return None  # fall through to the real routes

    router.route().mock(side_effect=gate)
    upstream = openwebui_0124(router)
    async with connect(router) as client:
        body = await failed(client, "knowledge_list")
        assert body["code"] == "upstream_unavailable"
        assert body["retryable"] is True
        assert upstream.version.call_count == 0
        up["now"] = True
        listed = await ok(client, "knowledge_list")
        assert listed["count"] == 2
        health = await ok(client, "knowledge_health")
        assert health["openwebui_version"] == "0.12.4"
    assert upstream.version.call_count == 1


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        pytest.param("knowledge_get_file", {"file_id": "f-1", "offset": -1}, id="offset -1"),
        pytest.param("knowledge_get_file", {"file_id": "f-1", "max_chars": 0}, id="max_chars 0"),
        pytest.param("knowledge_files", {"knowledge_id": KB_FRUIT, "page": 0}, id="page 0"),
    ],
)
async def test_out_of_range_arguments_get_the_structured_error(
    upstream_0124: Upstream, tool: str, arguments: dict[str, Any]
) -> None:
    # SPEC §4: every failure carries the structured body, like top_k=0 does; not only the SDK's validation text.
    async with connect(upstream_0124.router) as client:
        body = await failed(client, tool, arguments)
    assert body["code"] == "invalid_argument"
    assert upstream_0124.calls_beyond_version() == []
