"""Search inside chosen documents (file_ids, each checked readable first) and reading a document by lines."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import respx

from openwebui_rag_mcp import app as app_module
from openwebui_rag_mcp import normalize, tools
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.errors import ToolFailure
from tests.conftest import make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

MINE = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
THEIRS = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d"
TEXT = "first line\nsecond line has ERR-4711\nthird line\n"


def upstream() -> tuple[respx.Router, respx.Route]:
    router = new_router()
    router.get("/api/version").respond(json={"version": "0.6.5"})
    router.get(f"/api/v1/files/{MINE}").respond(json={"id": MINE, "filename": "a.md", "data": {"content": TEXT}})
    router.get(f"/api/v1/files/{THEIRS}").respond(401, json={"detail": "You do not have permission to access this"})
    query = router.post("/api/v1/retrieval/query/collection").respond(
        json={"documents": [["second line has ERR-4711"]], "metadatas": [[{"file_id": MINE}]], "distances": [[0.8]]}
    )
    return router, query


@asynccontextmanager
async def app_for(router: respx.Router, **env: str) -> AsyncIterator[App]:
    settings = make_settings(**env)
    client = OpenWebUIClient(settings, transport=mock_transport(router))
    try:
        yield App(settings=settings, client=client)
    finally:
        await client.aclose()


async def test_search_inside_a_readable_document() -> None:
    router, query = upstream()
    async with app_for(router) as app:
        found = await tools.search(app, "error", file_ids=[MINE])
        again = await tools.search(app, "error", file_ids=[MINE])
    assert json.loads(query.calls.last.request.content)["collection_names"] == [f"file-{MINE}"]
    assert found.results[0].file_id == MINE
    assert again.count == 1
    reads = [c for c in router.calls if c.request.url.path == f"/api/v1/files/{MINE}"]
    # The first search's readability check also gives its citation; the second search's check is remembered and its
    # citation reads the document again (the chunk carries no hash that would tell the document is unchanged).
    assert len(reads) == 2
    assert found.results[0].start_line == 2


async def test_long_documents_checked_are_not_all_held_for_their_citations(monkeypatch: pytest.MonkeyPatch) -> None:
    router, _ = upstream()
    monkeypatch.setattr(app_module, "CHECKED_CHARS_MAX", len(TEXT) - 1)  # this document is past the bound
    async with app_for(router) as app:
        found = await tools.search(app, "error", file_ids=[MINE])
    assert found.results[0].start_line == 2
    reads = [c for c in router.calls if c.request.url.path == f"/api/v1/files/{MINE}"]
    assert len(reads) == 2  # its check, then its citation


async def test_a_document_the_key_cannot_read_is_never_searched() -> None:
    """Older releases' retrieval checks no access: the server asks the Files API first."""
    router, query = upstream()
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "error", file_ids=[MINE, THEIRS])
    assert caught.value.code == "not_found"
    assert THEIRS in caught.value.message
    assert MINE not in caught.value.message
    assert query.call_count == 0


async def test_under_an_allowlist_a_document_must_be_in_an_allowed_base() -> None:
    router, query = upstream()
    allowed = "c0ffee00-1111-4222-8333-444455556666"
    router.get(f"/api/v1/knowledge/{allowed}").respond(json={"id": allowed, "files": [{"id": THEIRS}]})
    async with app_for(router, OPENWEBUI_KNOWLEDGE_IDS=allowed) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "error", file_ids=[MINE])
    assert caught.value.code == "not_found"
    assert "OPENWEBUI_KNOWLEDGE_IDS" in caught.value.message
    assert query.call_count == 0


async def test_bases_and_documents_together_are_refused() -> None:
    router, query = upstream()
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "error", knowledge_ids=["kb"], file_ids=[MINE])
    assert (caught.value.code, query.call_count) == ("invalid_argument", 0)


def body(text: str) -> dict[str, object]:
    return {"id": MINE, "filename": "a.md", "data": {"content": text}}


def test_lines_are_numbered_and_continue_by_characters() -> None:
    read = normalize.file_lines(body(TEXT), first=2, last=2, max_chars=1000)
    assert read.text == "2: second line has ERR-4711"
    assert read.offset == len("first line\n")
    assert read.truncated is True
    assert read.next_offset == len("first line\nsecond line has ERR-4711\n")
    assert TEXT[read.next_offset :] == "third line\n"


def test_lines_past_the_end_and_the_last_line() -> None:
    last = normalize.file_lines(body(TEXT), first=3, last=10, max_chars=1000)
    assert (last.text, last.truncated, last.next_offset) == ("3: third line", False, None)
    beyond = normalize.file_lines(body(TEXT), first=9, last=10, max_chars=1000)
    assert (beyond.text, beyond.truncated) == ("", False)
    no_final_newline = normalize.file_lines(body("a\nb"), first=1, last=5, max_chars=1000)
    assert no_final_newline.text == "1: a\n2: b"


def test_lines_stop_at_max_chars() -> None:
    many = "\n".join(f"line {n}" for n in range(1, 101))
    read = normalize.file_lines(body(many), first=1, last=100, max_chars=30)
    assert read.text.startswith("1: line 1\n2: line 2")
    assert len(read.text) <= 30
    assert read.truncated is True
    assert many[read.next_offset or 0 :].startswith("line ")


async def test_get_file_by_lines_through_the_tool() -> None:
    router, _ = upstream()
    async with app_for(router) as app:
        read = await tools.get_file(app, MINE, start_line=2, end_line=2)
    assert read.text == "2: second line has ERR-4711"


async def test_a_range_ending_before_it_starts_is_refused() -> None:
    router, _ = upstream()
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.get_file(app, MINE, start_line=5, end_line=2)
    assert caught.value.code == "invalid_argument"


# -- a folder of a base (Open WebUI 0.12+ names each document's folder) --------------------------------------------

BASE = "c0ffee00-1111-4222-8333-444455556666"
GUIDE, DEEP, TOP, ELSEWHERE = (f"{n}a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d" for n in "3456")


def folders_upstream(version: str = "0.12.4") -> tuple[respx.Router, respx.Route]:
    """A base with folders guides/ (GUIDE), guides/deep/ (DEEP) and guides-old/ (ELSEWHERE), and TOP at the top."""
    router = new_router()
    router.get("/api/version").respond(json={"version": version})
    router.get("/api/v1/knowledge/").respond(json={"items": [{"id": BASE, "name": "Docs"}], "total": 1})
    folders = {"d-guides": ("guides", None), "d-deep": ("deep", "d-guides"), "d-old": ("guides-old", None)}
    where = {GUIDE: "d-guides", DEEP: "d-deep", TOP: None, ELSEWHERE: "d-old"}
    paths = {None: "", "d-guides": "guides", "d-deep": "guides/deep", "d-old": "guides-old"}

    def listing(request: httpx.Request) -> httpx.Response:
        asked = request.url.params.get("directory_id")
        folder = None if asked is None else (asked or None)
        chosen = [f for f, d in where.items() if asked is None or d == folder]
        items = [{"id": f, "filename": f"{f[:1]}.md", "directory_path": paths[where[f]]} for f in chosen]
        below = [{"id": i, "name": name} for i, (name, parent) in folders.items() if parent == folder]
        return httpx.Response(200, json={"items": items, "total": len(items), "directories": below})

    router.get(f"/api/v1/knowledge/{BASE}/files").mock(side_effect=listing)
    router.get(path__startswith="/api/v1/files/").respond(404, json={"detail": "Not found"})
    query = router.post("/api/v1/retrieval/query/collection").respond(
        json={"documents": [["in the guide"]], "metadatas": [[{"file_id": DEEP}]], "distances": [[0.8]]}
    )
    return router, query


async def test_a_folder_search_covers_the_folder_and_the_folders_below_it() -> None:
    router, query = folders_upstream()
    async with app_for(router) as app:
        found = await tools.search(app, "guide", knowledge_ids=[BASE], folder="/guides/")
    names = json.loads(query.calls.last.request.content)["collection_names"]
    assert sorted(names) == sorted([f"file-{GUIDE}", f"file-{DEEP}"])  # not the top level, not "guides-old"
    assert found.knowledge_ids == [BASE]
    assert (found.results[0].file_id, found.results[0].knowledge_id) == (DEEP, BASE)


async def test_knowledge_files_names_each_documents_folder() -> None:
    router, _ = folders_upstream()
    async with app_for(router) as app:
        listed = await tools.list_files(app, BASE)
    assert {item.file_id: item.folder for item in listed.items} == {
        GUIDE: "guides",
        DEEP: "guides/deep",
        TOP: None,
        ELSEWHERE: "guides-old",
    }


async def test_a_folder_search_reads_only_that_part_of_the_base() -> None:
    router, query = folders_upstream()
    async with app_for(router) as app:
        await tools.search(app, "guide", knowledge_ids=[BASE], folder="guides/deep")
    asked = [c.request.url.params.get("directory_id") for c in router.calls if c.request.url.path.endswith("/files")]
    assert asked == ["", "d-guides", "d-deep"]  # down the path, then the folder itself: never the whole base
    assert json.loads(query.calls.last.request.content)["collection_names"] == [f"file-{DEEP}"]


@pytest.mark.parametrize(
    ("knowledge_ids", "folder", "file_ids", "code", "words"),
    [
        ([BASE], "missing", None, "not_found", "knowledge_files shows"),
        ([BASE], " / ", None, "invalid_argument", "must name a folder"),
        (None, "guides", None, "invalid_argument", "needs knowledge_ids"),
        ([BASE], "guides", [GUIDE], "invalid_argument", "not both"),
        (["ffffffff-0000-4000-8000-000000000000"], "guides", None, "not_found", "no readable knowledge base"),
    ],
)
async def test_a_folder_search_that_cannot_be_done_says_why_and_searches_nothing(
    knowledge_ids: list[str] | None, folder: str, file_ids: list[str] | None, code: str, words: str
) -> None:
    router, query = folders_upstream()
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "guide", knowledge_ids=knowledge_ids, file_ids=file_ids, folder=folder)
    assert (caught.value.code, query.call_count) == (code, 0)
    assert words in caught.value.message


@pytest.mark.parametrize("version", ["0.6.43", "0.8.12", "0.9.5"])
async def test_before_folders_a_folder_search_is_unsupported_not_widened(version: str) -> None:
    router, query = folders_upstream(version)
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "guide", knowledge_ids=[BASE], folder="guides")
    assert (caught.value.code, query.call_count) == ("unsupported", 0)
    assert version in caught.value.message


async def test_a_folder_search_stays_inside_the_allowlist() -> None:
    router, query = folders_upstream()
    async with app_for(router, OPENWEBUI_KNOWLEDGE_IDS="ffffffff-0000-4000-8000-000000000000") as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "guide", knowledge_ids=[BASE], folder="guides")
    assert (caught.value.code, query.call_count) == ("not_found", 0)
    assert "OPENWEBUI_KNOWLEDGE_IDS" in caught.value.message
    listed = [c for c in router.calls if c.request.url.path.endswith("/files")]
    assert listed == []  # the base's documents were not even read


async def test_a_folder_search_in_a_read_only_server_is_still_a_read() -> None:
    router, query = folders_upstream()
    async with app_for(router, OPENWEBUI_READ_ONLY="true") as app:
        found = await tools.search(app, "guide", knowledge_ids=[BASE], folder="guides")
    assert (found.count, query.call_count) == (1, 1)


async def test_a_folder_search_works_where_lists_do_not_name_folders_yet() -> None:
    """0.9.6 to 0.11 have folders but their document lists do not name a document's folder: the folder lists do."""
    router, query = folders_upstream("0.10.2")
    async with app_for(router) as app:
        found = await tools.search(app, "guide", knowledge_ids=[BASE], folder="guides")
    names = json.loads(query.calls.last.request.content)["collection_names"]
    assert sorted(names) == sorted([f"file-{GUIDE}", f"file-{DEEP}"])
    assert found.knowledge_ids == [BASE]


async def test_a_folder_of_more_than_100_documents_is_refused_before_searching() -> None:
    router = new_router()
    router.get("/api/version").respond(json={"version": "0.12.4"})
    router.get("/api/v1/knowledge/").respond(json={"items": [{"id": BASE, "name": "Docs"}], "total": 1})

    def listing(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("directory_id") == "":
            return httpx.Response(200, json={"items": [], "total": 0, "directories": [{"id": "d-1", "name": "big"}]})
        items = [{"id": f"f-{n:03d}", "filename": f"{n}.md"} for n in range(101)]
        return httpx.Response(200, json={"items": items, "total": 101, "directories": []})

    router.get(f"/api/v1/knowledge/{BASE}/files").mock(side_effect=listing)
    query = router.post("/api/v1/retrieval/query/collection").respond(json={"documents": [[]]})
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "x", knowledge_ids=[BASE], folder="big")
    assert (caught.value.code, query.call_count) == ("invalid_argument", 0)
    assert "further down" in caught.value.message


async def test_folders_that_loop_are_refused_not_read_forever() -> None:
    """A misbehaving Open WebUI whose folder lists name a folder as its own descendant."""
    router = new_router()
    router.get("/api/version").respond(json={"version": "0.12.4"})
    router.get("/api/v1/knowledge/").respond(json={"items": [{"id": BASE, "name": "Docs"}], "total": 1})

    def listing(request: httpx.Request) -> httpx.Response:
        below = [{"id": "d-loop", "name": "loop"}]  # every folder holds "loop" again, with the same id
        return httpx.Response(200, json={"items": [], "total": 0, "directories": below})

    router.get(f"/api/v1/knowledge/{BASE}/files").mock(side_effect=listing)
    query = router.post("/api/v1/retrieval/query/collection").respond(json={"documents": [[]]})
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "x", knowledge_ids=[BASE], folder="loop")
    assert (caught.value.code, query.call_count) == ("unexpected_response", 0)
    assert len(router.calls) < 10
