"""Filters (issue 17, part 3): equality on the metadata given at upload and a window on when a document changed,
for `knowledge_search` (only the qualifying documents' collections are searched) and `knowledge_files`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx
from mcp import Client

from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.filters import make_filter
from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings, mock_transport

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
KB_OTHER = "deadbeef-7777-4888-9999-aaaabbbbcccc"
NOV_1 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())
NOV_20 = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp())
OPS_OLD, OPS_NEW, DEV_NEW, BARE = (f"0000000{n}-aaaa-4bbb-8ccc-dddddddddddd" for n in range(4))


def row(file_id: str, data: dict[str, Any] | str | None, updated_at: int | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{file_id[:8]}.md", "size": 10}
    if data is not None:
        meta["data"] = data
    name = f"{file_id[:8]}.md"
    return {"id": file_id, "filename": name, "meta": meta, "updated_at": updated_at, "created_at": updated_at}


ROWS = [
    row(OPS_OLD, {"author": "ops", "reviewed": True, "level": 2}, NOV_1),
    row(OPS_NEW, {"author": "ops", "reviewed": False, "level": 2.0}, NOV_20),
    row(DEV_NEW, "{'author': 'dev', 'path': 'guides/2024'}", NOV_20),  # stringified, as some releases keep it
    row(BARE, None, None),
]


# -- the filter itself ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "after", "before", "chosen"),
    [
        ({"author": "ops"}, None, None, [OPS_OLD, OPS_NEW]),
        ({"author": "ops", "reviewed": True}, None, None, [OPS_OLD]),
        ({"reviewed": 1}, None, None, []),  # true is not 1
        ({"level": 2}, None, None, [OPS_OLD, OPS_NEW]),  # 2 is 2.0
        ({"path": "guides/2024"}, None, None, [DEV_NEW]),
        ({"author": "OPS"}, None, None, []),  # exact, case included
        ({"missing": "x"}, None, None, []),
        (None, "2026-11-10", None, [OPS_NEW, DEV_NEW]),
        (None, None, "2026-11-10T00:00:00Z", [OPS_OLD]),
        (None, "2026-11-01T00:00:00+00:00", "2026-11-20", [OPS_OLD]),  # from inclusive, until exclusive
        ({"author": "ops"}, "2026-11-10", None, [OPS_NEW]),
        (None, "2026-11-01T01:00:00+01:00", None, [OPS_OLD, OPS_NEW, DEV_NEW]),  # the same instant as Nov 1, 00:00Z
    ],
)
def test_which_documents_qualify(
    where: dict[str, Any] | None, after: str | None, before: str | None, chosen: list[str]
) -> None:
    narrowed = make_filter(where, after, before)
    assert narrowed is not None
    assert [raw["id"] for raw in ROWS if narrowed.matches(raw)] == chosen


@pytest.mark.parametrize(
    ("where", "after", "before", "says"),
    [
        ({}, None, None, "where must be an object"),
        ({"author": None}, None, None, "must be a string"),
        ({"author": ["ops"]}, None, None, "must be a string"),
        ({"author": {"name": "ops"}}, None, None, "must be a string"),
        ({"": "x"}, None, None, "where keys"),
        ({f"k{n}": n for n in range(21)}, None, None, "the limit is 20"),
        (None, "yesterday", None, "changed_after must be a date"),
        (None, None, "2026-13-01", "changed_before must be a date"),
        (None, "2026-11-20", "2026-11-01", "earlier than"),
    ],
)
def test_bad_filters_are_refused(where: Any, after: str | None, before: str | None, says: str) -> None:
    with pytest.raises(ToolFailure) as caught:
        make_filter(where, after, before)
    assert caught.value.code == "invalid_argument"
    assert says in caught.value.message


def test_the_order_of_the_keys_does_not_matter() -> None:
    assert make_filter({"a": 1, "b": "x"}, None, None) == make_filter({"b": "x", "a": 1}, None, None)


def test_no_arguments_are_no_filter() -> None:
    assert make_filter(None, None, None) is None


# -- through the MCP protocol ----------------------------------------------------------------------------------


def upstream(router: respx.Router, version: str = "0.12.4") -> respx.Route:
    router.get("/api/version").respond(json={"version": version})
    bases = [
        {"id": base, "name": base[:4], "description": "", "user_id": "u", "write_access": True, "updated_at": 1}
        for base in (KB, KB_OTHER)
    ]
    if version == "0.6.5":
        router.get("/api/v1/knowledge/").respond(json=[{**base, "files": ROWS} for base in bases])
        router.get(f"/api/v1/knowledge/{KB}").respond(json={**bases[0], "files": ROWS})
    else:
        router.get("/api/v1/knowledge/", params={"page": "1"}).respond(json={"items": bases, "total": 2})
        router.get(f"/api/v1/knowledge/{KB}/files").respond(json={"items": ROWS, "total": len(ROWS)})
        router.get(f"/api/v1/knowledge/{KB_OTHER}/files").respond(json={"items": [], "total": 0})
    for file_id in (OPS_OLD, OPS_NEW, DEV_NEW, BARE):
        router.get(f"/api/v1/files/{file_id}").respond(404)

    def search(request: httpx.Request) -> httpx.Response:
        names = json.loads(request.content)["collection_names"]
        ids = [name.removeprefix("file-") for name in names]
        return httpx.Response(
            200,
            json={
                "distances": [[0.5] * len(ids)],
                "documents": [[f"text of {i}" for i in ids]],
                "metadatas": [[{"file_id": i} for i in ids]],
            },
        )

    return router.post("/api/v1/retrieval/query/collection").mock(side_effect=search)


async def call(router: respx.Router, tool: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    server = create_server(make_settings(), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        result = await client.call_tool(tool, arguments)
    assert isinstance(result.structured_content, dict)
    return bool(result.is_error), result.structured_content


async def test_a_filtered_search_searches_only_the_qualifying_documents(router: respx.Router) -> None:
    query = upstream(router)
    failed, body = await call(
        router,
        "knowledge_search",
        {"query": "rota", "knowledge_ids": [KB, KB_OTHER], "where": {"author": "ops"}, "changed_after": "2026-11-10"},
    )
    assert not failed, body
    assert json.loads(query.calls.last.request.content)["collection_names"] == [f"file-{OPS_NEW}"]
    assert [(hit["file_id"], hit["knowledge_id"]) for hit in body["results"]] == [(OPS_NEW, KB)]
    assert body["knowledge_ids"] == [KB, KB_OTHER]


async def test_a_filter_that_matches_nothing_says_so_and_searches_nothing(router: respx.Router) -> None:
    query = upstream(router)
    failed, body = await call(
        router, "knowledge_search", {"query": "rota", "knowledge_ids": [KB], "where": {"author": "nobody"}}
    )
    assert failed
    assert body["code"] == "not_found"
    assert 'author="nobody"' in body["message"]
    assert "nothing was searched" in body["message"]
    assert query.call_count == 0


async def test_a_filter_needs_bases_and_not_file_ids(router: respx.Router) -> None:
    upstream(router)
    for arguments in ({"where": {"author": "ops"}}, {"knowledge_ids": [KB], "file_ids": [OPS_OLD], "where": {"a": 1}}):
        failed, body = await call(router, "knowledge_search", {"query": "rota", **arguments})
        assert failed
        assert body["code"] == "invalid_argument", body


async def test_a_filter_never_reads_a_base_the_key_cannot_read(router: respx.Router) -> None:
    upstream(router)
    unknown = "99999999-aaaa-4bbb-8ccc-dddddddddddd"
    router.get(f"/api/v1/files/{unknown}").respond(404)  # the server asks whether it is a file_id instead
    failed, body = await call(
        router, "knowledge_search", {"query": "q", "knowledge_ids": [unknown], "changed_after": "2026-01-01"}
    )
    assert failed
    assert body["code"] == "not_found"
    assert not [c for c in router.calls if c.request.url.path.startswith(f"/api/v1/knowledge/{unknown}")]


async def test_metadata_filters_are_unsupported_where_the_release_keeps_no_upload_metadata(
    router: respx.Router,
) -> None:
    query = upstream(router, "0.6.5")
    failed, body = await call(router, "knowledge_search", {"query": "q", "knowledge_ids": [KB], "where": {"a": "b"}})
    assert failed
    assert body["code"] == "unsupported"
    failed, body = await call(router, "knowledge_files", {"knowledge_id": KB, "where": {"a": "b"}})
    assert failed
    assert body["code"] == "unsupported"
    # A time window works there: the files nested in the base carry their times.
    failed, body = await call(
        router, "knowledge_search", {"query": "q", "knowledge_ids": [KB], "changed_before": "2026-11-10"}
    )
    assert not failed, body
    assert json.loads(query.calls.last.request.content)["collection_names"] == [f"file-{OPS_OLD}"]


async def test_knowledge_files_lists_only_what_the_filter_lets_through(router: respx.Router) -> None:
    upstream(router)
    failed, body = await call(router, "knowledge_files", {"knowledge_id": KB, "where": {"author": "ops"}, "limit": 1})
    assert not failed, body
    assert ([item["file_id"] for item in body["items"]], body["total"]) == ([OPS_OLD], 2)
    cursor = body["next_cursor"]
    assert cursor
    failed, body = await call(
        router, "knowledge_files", {"knowledge_id": KB, "where": {"author": "ops"}, "limit": 1, "cursor": cursor}
    )
    assert [item["file_id"] for item in body["items"]] == [OPS_NEW]
    # The cursor belongs to that filter: without it, or with another, it is refused rather than skipping documents.
    failed, body = await call(router, "knowledge_files", {"knowledge_id": KB, "cursor": cursor})
    assert failed
    assert body["code"] == "invalid_argument"

    failed, body = await call(router, "knowledge_files", {"knowledge_id": KB, "changed_after": "2030-01-01"})
    assert not failed
    assert body["items"] == []
    assert "no document of this base matches changed at or after 2030-01-01" in body["hint"]
