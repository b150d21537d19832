"""Lists that stay small at any scale: `knowledge_list` and `knowledge_files` answer a page (`limit`, default 30)
with the total, an opaque `next_cursor` and a hint, filter with `query`, and are never silently short.

Driven through the in-memory MCP client against a fake Open WebUI with many bases and documents, in both release
families: 0.12.4 (paged lists, `GET /knowledge/search`) and 0.6.5 (flat lists, files nested in the base).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import respx
from mcp import Client
from mcp.types import TextContent

from openwebui_rag_mcp import tools
from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

PAGE = 30  # Open WebUI's page size
OWNER = {"id": "u-1", "name": "Admin Person", "email": "admin@example.com", "role": "admin"}


def kb(number: int) -> str:
    return f"{number:08x}-0000-4000-8000-{number:012x}"


def doc(number: int) -> str:
    return f"{number:08x}-1111-4000-9000-{number:012x}"


@dataclass
class Fake:
    """An Open WebUI whose key reads `bases` (newest first) and whose first base holds `files` documents."""

    release: str
    bases: list[dict[str, Any]]
    files: list[dict[str, Any]]
    router: respx.Router = field(default_factory=new_router)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    fail_page: int | None = None  # a list page that answers 500

    def __post_init__(self) -> None:
        self.router.get("/api/version").respond(json={"version": self.release})
        self.router.get("/api/v1/knowledge/").mock(side_effect=self.listing)
        self.router.get("/api/v1/knowledge/search").mock(side_effect=self.search)
        self.router.get(path__regex=r"^/api/v1/knowledge/[^/]+/files$").mock(side_effect=self.base_files)
        self.router.get(path__regex=r"^/api/v1/knowledge/[^/]+$").mock(side_effect=self.base)
        self.router.post("/api/v1/retrieval/query/collection").respond(
            json={"distances": [[0.5]], "documents": [["text"]], "metadatas": [[{}]]}
        )

    @property
    def paged(self) -> bool:
        return self.release != "0.6.5"

    def _log(self, request: httpx.Request) -> int:
        self.requests.append((request.url.path, dict(request.url.params)))
        page = int(request.url.params.get("page", "1"))
        if page == self.fail_page:
            raise httpx.ConnectError("connection refused")
        return page

    def _page(self, items: list[dict[str, Any]], page: int) -> httpx.Response:
        return httpx.Response(200, json={"items": items[(page - 1) * PAGE : page * PAGE], "total": len(items)})

    def listing(self, request: httpx.Request) -> httpx.Response:
        page = self._log(request)
        if not self.paged:
            return httpx.Response(200, json=[{**base, "files": []} for base in self.bases])
        return self._page(self.bases, page)

    def search(self, request: httpx.Request) -> httpx.Response:
        """0.12.4's search: ILIKE '%query%' on name, description and the owner's name and email, folding case like
        SQLite does (ASCII only)."""
        page = self._log(request)
        needle = ascii_lower(request.url.params["query"])
        found = [
            base
            for base in self.bases
            if any(needle in ascii_lower(text or "") for text in (base["name"], base["description"], *OWNER.values()))
        ]
        return self._page(found, page)

    def base_files(self, request: httpx.Request) -> httpx.Response:
        page = self._log(request)
        return self._page(self.files, page)

    def base(self, request: httpx.Request) -> httpx.Response:
        self._log(request)
        return httpx.Response(200, json={**self.bases[0], "files": None if self.paged else self.files})

    def asked(self, path: str) -> list[dict[str, str]]:
        return [params for asked, params in self.requests if asked == path]


def ascii_lower(text: str) -> str:
    return "".join(ch.lower() if ch.isascii() else ch for ch in text)


def make_bases(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": kb(n),
            "user_id": OWNER["id"],
            "name": f"Team {n} handbook",
            "description": f"Documents of team {n}",
            "updated_at": 1_793_000_000 - n,
            "file_count": n % 7,
            "write_access": True,
            "user": OWNER,
        }
        for n in range(count)
    ]


def make_files(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": doc(n),
            "filename": f"note-{n}.md",
            "meta": {"name": f"note-{n}.md", "size": 100 + n, "data": {"title": f"Заметка {n}"}},
            "updated_at": 1_793_000_000 - n,
        }
        for n in range(count)
    ]


@pytest.fixture(params=["0.12.4", "0.6.5"])
def release(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@asynccontextmanager
async def connect(fake: Fake, **env: str) -> AsyncIterator[Client]:
    server = create_server(make_settings(**env), transport=mock_transport(fake.router))
    async with Client(server, raise_exceptions=True) as client:  # checks every result against its schema
        yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(tool, arguments)
    assert isinstance(result.structured_content, dict)
    block = result.content[0]
    assert isinstance(block, TextContent)
    assert json.loads(block.text) == result.structured_content
    return bool(result.is_error), result.structured_content


async def ok(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    is_error, body = await call(client, tool, arguments)
    assert not is_error, body
    return body


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    is_error, body = await call(client, tool, arguments)
    assert is_error, body
    return body


async def every_page(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Every item, following next_cursor; and how many calls that took."""
    items: list[dict[str, Any]] = []
    body = await ok(client, tool, arguments)
    calls = 1
    while True:
        items += body["items"]
        assert body["count"] == len(body["items"])
        if body["next_cursor"] is None:
            assert body["hint"] is None or "more" not in body["hint"]
            return items, calls
        assert "more" in body["hint"]
        body = await ok(client, tool, {**arguments, "cursor": body["next_cursor"]})
        calls += 1


# -- knowledge_list ---------------------------------------------------------------------------------------------


async def test_a_thousand_bases_answer_thirty_with_the_total_and_a_cursor(release: str) -> None:
    fake = Fake(release, make_bases(1_003), [])
    async with connect(fake) as client:
        body = await ok(client, "knowledge_list", {})
        assert (body["total"], body["count"]) == (1_003, tools.LIST_LIMIT)
        assert [item["knowledge_id"] for item in body["items"]] == [kb(n) for n in range(30)]
        assert body["hint"] == "973 more bases: pass cursor=next_cursor, or narrow with query"
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))  # the text block the agent reads
        assert len(text) < 6_000  # every base was 175,721 characters live
        items, calls = await every_page(client, "knowledge_list", {"limit": 200})
    assert [item["knowledge_id"] for item in items] == [kb(n) for n in range(1_003)]
    assert calls == 6


@pytest.mark.parametrize(
    ("tool", "arguments", "page"),
    [
        ("knowledge_list", {}, 1),
        ("knowledge_list", {"query": "team"}, 3),  # a page of Open WebUI's search, after others answered
        ("knowledge_files", {"knowledge_id": kb(0), "limit": 90}, 3),
        ("knowledge_files", {"knowledge_id": kb(0), "query": "note"}, 1),
    ],
)
async def test_a_listing_error_stays_an_error(tool: str, arguments: dict[str, Any], page: int) -> None:
    fake = Fake("0.12.4", make_bases(100), make_files(100))
    fake.fail_page = page
    async with connect(fake) as client:
        body = await refused(client, tool, arguments)
    assert body["code"] == "upstream_unavailable"


@pytest.mark.parametrize("limit", [0, -1, tools.LIST_LIMIT_MAX + 1])
async def test_limit_out_of_range_is_refused_before_any_request(limit: int) -> None:
    fake = Fake("0.12.4", make_bases(3), make_files(3))
    async with connect(fake) as client:
        for tool, arguments in (("knowledge_list", {}), ("knowledge_files", {"knowledge_id": kb(0)})):
            body = await refused(client, tool, {**arguments, "limit": limit})
            assert body["code"] == "invalid_argument"
            assert "limit must be between 1 and 200" in body["message"]
    assert fake.requests == []


async def test_query_filters_name_and_description_in_any_case(release: str) -> None:
    bases = make_bases(40)
    bases[3]["name"] = "Отчёты за 2026 год"
    bases[7]["description"] = "Годовые ОТЧЁТЫ и планы"
    bases[9]["description"] = None
    fake = Fake(release, bases, [])
    async with connect(fake) as client:
        body = await ok(client, "knowledge_list", {"query": "  отчёты "})
        assert [item["knowledge_id"] for item in body["items"]] == [kb(3), kb(7)]
        assert (body["total"], body["next_cursor"], body["hint"]) == (2, None, None)
        team = await ok(client, "knowledge_list", {"query": "TEAM 1", "limit": 5})
        assert team["total"] == 11  # Team 1, Team 10 .. Team 19
        nothing = await ok(client, "knowledge_list", {"query": "no such thing"})
        assert (nothing["total"], nothing["items"]) == (0, [])
        assert "no bases match" in nothing["hint"]


async def test_an_ascii_query_uses_open_webui_search_where_the_release_has_it(release: str) -> None:
    fake = Fake(release, make_bases(100), [])
    async with connect(fake) as client:
        body = await ok(client, "knowledge_list", {"query": "team 4"})
        # Open WebUI also matches the owner ("Admin Person"): only name and description count here.
        assert (await ok(client, "knowledge_list", {"query": "admin"}))["total"] == 0
    assert body["total"] == 11
    if release == "0.6.5":
        assert fake.asked("/api/v1/knowledge/search") == []
    else:
        assert fake.asked("/api/v1/knowledge/") == []  # the bases are not all read
        assert {params["query"] for params in fake.asked("/api/v1/knowledge/search")} == {"team 4", "admin"}
        assert len(fake.asked("/api/v1/knowledge/search")) == 1 + 4  # one page for "team 4", all four of "admin"


@pytest.mark.parametrize("query", ["отчёт", "Straße", "a\\b"])
async def test_a_query_open_webui_may_fold_differently_is_filtered_here(query: str) -> None:
    # SQLite folds case only for ASCII, and PostgreSQL reads a backslash as an escape: the search endpoint
    # could miss bases, so every base is read and filtered here.
    fake = Fake("0.12.4", make_bases(5), [])
    async with connect(fake) as client:
        await ok(client, "knowledge_list", {"query": query})
    assert fake.asked("/api/v1/knowledge/search") == []
    assert fake.asked("/api/v1/knowledge/") == [{"page": "1"}]


async def test_a_query_over_many_pages_of_matches_is_read_whole() -> None:
    fake = Fake("0.12.4", make_bases(95), [])
    async with connect(fake) as client:
        items, _ = await every_page(client, "knowledge_list", {"query": "handbook", "limit": 40})
    assert [item["knowledge_id"] for item in items] == [kb(n) for n in range(95)]


async def test_the_allowlist_applies_before_paging_and_counting(release: str) -> None:
    allowed = [kb(n) for n in (50, 3, 77, 12)]
    fake = Fake(release, make_bases(100), [])
    async with connect(fake, OPENWEBUI_KNOWLEDGE_IDS=",".join(allowed)) as client:
        first = await ok(client, "knowledge_list", {"limit": 3})
        assert (first["total"], first["count"]) == (4, 3)
        items, _ = await every_page(client, "knowledge_list", {"limit": 3})
        queried = await ok(client, "knowledge_list", {"query": "team 7"})
    assert [item["knowledge_id"] for item in items] == [kb(3), kb(12), kb(50), kb(77)]  # Open WebUI's order
    assert [item["knowledge_id"] for item in queried["items"]] == [kb(77)]
    assert queried["total"] == 1


async def test_long_descriptions_are_cut_visibly(release: str) -> None:
    bases = make_bases(2)
    bases[0]["description"] = "Описание " * 40
    fake = Fake(release, bases, [])
    async with connect(fake) as client:
        body = await ok(client, "knowledge_list", {})
    description = body["items"][0]["description"]
    assert len(description) == tools.DESCRIPTION_MAX_CHARS
    assert description.endswith("…")
    assert body["items"][1]["description"] == "Documents of team 1"


async def test_a_cursor_carries_its_query_and_is_checked() -> None:
    fake = Fake("0.12.4", make_bases(100), make_files(40))
    async with connect(fake) as client:
        first = await ok(client, "knowledge_list", {"query": "handbook", "limit": 10})
        second = await ok(client, "knowledge_list", {"cursor": first["next_cursor"]})  # the query comes along
        assert [item["knowledge_id"] for item in second["items"]] == [kb(n) for n in range(10, 40)]
        other = await refused(client, "knowledge_list", {"query": "team", "cursor": first["next_cursor"]})
        assert other["code"] == "invalid_argument"
        assert "another query" in other["message"]
        files = await ok(client, "knowledge_files", {"knowledge_id": kb(0)})
        for wrong in ("not a cursor", "", files["next_cursor"], "W10"):
            body = await refused(client, "knowledge_list", {"cursor": wrong})
            assert body["code"] == "invalid_argument"
            assert "list again without cursor" in body["message"]
        body = await refused(client, "knowledge_files", {"knowledge_id": kb(1), "cursor": files["next_cursor"]})
        assert body["code"] == "invalid_argument"


async def test_a_list_that_changed_between_pages_says_so() -> None:
    fake = Fake("0.12.4", make_bases(70), [])
    async with connect(fake) as client:
        first = await ok(client, "knowledge_list", {})
        fake.bases.insert(0, {**make_bases(1)[0], "id": kb(999), "name": "New"})
        second = await ok(client, "knowledge_list", {"cursor": first["next_cursor"]})
    assert second["total"] == 71
    assert "the list changed since the cursor was made (70 then, 71 now)" in second["hint"]


async def test_a_filtered_listing_is_not_remembered_for_the_search_check() -> None:
    fake = Fake("0.12.4", make_bases(5), [])
    async with connect(fake) as client:
        await ok(client, "knowledge_list", {"query": "team"})  # through Open WebUI's search: a part of the bases
        await ok(client, "knowledge_search", {"query": "q", "knowledge_ids": [kb(1)]})
        assert len(fake.asked("/api/v1/knowledge/")) == 1  # the check read every base itself
        await ok(client, "knowledge_list", {})  # every base: remembered
        await ok(client, "knowledge_search", {"query": "q", "knowledge_ids": [kb(2)]})
    assert len(fake.asked("/api/v1/knowledge/")) == 2


# -- knowledge_files ---------------------------------------------------------------------------------------------


async def test_files_of_a_large_base_come_thirty_at_a_time(release: str) -> None:
    fake = Fake(release, make_bases(1), make_files(2_000))
    async with connect(fake) as client:
        body = await ok(client, "knowledge_files", {"knowledge_id": kb(0)})
        assert (body["knowledge_id"], body["total"], body["count"]) == (kb(0), 2_000, 30)
        assert [item["file_id"] for item in body["items"]] == [doc(n) for n in range(30)]
        assert body["items"][0] == {
            "file_id": doc(0),
            "title": "Заметка 0",
            "filename": "note-0.md",
            "size": 100,
            "updated_at": "2026-10-26T07:33:20Z",
            "folder": None,
            "status": None,
        }
        assert body["hint"] == "1970 more documents: pass cursor=next_cursor, or narrow with query"
        if release == "0.12.4":
            assert fake.asked(f"/api/v1/knowledge/{kb(0)}/files") == [{"page": "1"}]  # only the page it needs
        middle = await ok(
            client, "knowledge_files", {"knowledge_id": kb(0), "cursor": body["next_cursor"], "limit": 45}
        )
        assert [item["file_id"] for item in middle["items"]] == [doc(n) for n in range(30, 75)]
        if release == "0.12.4":
            assert fake.asked(f"/api/v1/knowledge/{kb(0)}/files")[1:] == [{"page": "2"}, {"page": "3"}]


async def test_every_document_by_cursor(release: str) -> None:
    fake = Fake(release, make_bases(1), make_files(437))
    async with connect(fake) as client:
        items, calls = await every_page(client, "knowledge_files", {"knowledge_id": kb(0), "limit": 100})
    assert [item["file_id"] for item in items] == [doc(n) for n in range(437)]
    assert calls == 5


async def test_files_query_filters_filename_and_title(release: str) -> None:
    fake = Fake(release, make_bases(1), make_files(120))
    async with connect(fake) as client:
        by_title = await ok(client, "knowledge_files", {"knowledge_id": kb(0), "query": "ЗАМЕТКА 11"})
        by_name = await ok(client, "knowledge_files", {"knowledge_id": kb(0), "query": "note-5.md"})
    assert [item["file_id"] for item in by_title["items"]] == [doc(11), *(doc(n) for n in range(110, 120))]
    assert by_title["total"] == 11
    assert [item["file_id"] for item in by_name["items"]] == [doc(5)]


async def test_files_page_is_still_accepted_but_not_listed(release: str) -> None:
    fake = Fake(release, make_bases(1), make_files(100))
    async with connect(fake) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert "page" not in listed["knowledge_files"].input_schema["properties"]
        body = await ok(client, "knowledge_files", {"knowledge_id": kb(0), "page": 2})
        assert [item["file_id"] for item in body["items"]] == [doc(n) for n in range(30, 60)]
        both = await refused(
            client, "knowledge_files", {"knowledge_id": kb(0), "page": 2, "cursor": body["next_cursor"]}
        )
        assert both["code"] == "invalid_argument"


async def test_files_with_another_page_size_are_read_whole() -> None:
    # A release with another page size: the pages do not line up, so every page is read and the slice is exact.
    fake = Fake("0.12.4", make_bases(1), make_files(130))

    def pages_of_50(request: httpx.Request) -> httpx.Response:
        page = fake._log(request)
        return httpx.Response(200, json={"items": fake.files[(page - 1) * 50 : page * 50], "total": len(fake.files)})

    fake.router.get(path__regex=r"^/api/v1/knowledge/[^/]+/files$").mock(side_effect=pages_of_50)
    async with connect(fake) as client:
        body = await ok(client, "knowledge_files", {"knowledge_id": kb(0), "limit": 40})
        rest = await ok(client, "knowledge_files", {"knowledge_id": kb(0), "cursor": body["next_cursor"]})
    assert [item["file_id"] for item in body["items"]] == [doc(n) for n in range(40)]
    assert [item["file_id"] for item in rest["items"]] == [doc(n) for n in range(40, 70)]
    assert (body["total"], rest["total"]) == (130, 130)


async def test_files_outside_the_allowlist_are_refused_before_any_request() -> None:
    fake = Fake("0.12.4", make_bases(3), make_files(3))
    async with connect(fake, OPENWEBUI_KNOWLEDGE_IDS=kb(1)) as client:
        body = await refused(client, "knowledge_files", {"knowledge_id": kb(0)})
    assert body["code"] == "not_found"
    assert fake.requests == []
