"""Issue 10's client defects, each pinned by a test that failed before its fix: a release changed under a running
server (4), listings that trust `total` (6), 401 on reads and writes (5), unknown versions and the privacy gate (10),
a wrong path prefix and redirects (12)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ToolFailure
from tests.conftest import make_settings, mock_transport

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"


@asynccontextmanager
async def open_client(router: respx.Router) -> AsyncIterator[OpenWebUIClient]:
    client = OpenWebUIClient(make_settings(), transport=mock_transport(router))
    try:
        yield client
    finally:
        await client.aclose()


def versions(router: respx.Router, *reported: str) -> respx.Route:
    """/api/version answering each of `reported` in turn, the last one from then on."""
    answers = list(reported)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"version": answers.pop(0) if len(answers) > 1 else answers[0]})

    return router.get("/api/version").mock(side_effect=answer)


def bases(count: int) -> list[dict[str, Any]]:
    return [{"id": f"kb-{n:03d}", "name": f"Base {n}"} for n in range(count)]


def paged_answer(items: list[dict[str, Any]], asked: list[int]) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        number = int(request.url.params.get("page") or 1)
        asked.append(number)
        return httpx.Response(200, json={"items": items[(number - 1) * 30 : number * 30], "total": len(items)})

    return answer


async def failure(call: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        await call
    return caught.value


# -- 4: a release changed under a running server ---------------------------------------------------------------


async def test_an_upgrade_under_the_server_still_lists_every_base(router: respx.Router) -> None:
    """Read as 0.6.5 (flat lists), answered as 0.12.4 (paged by 30): all 75 bases, not the first 30."""
    versions(router, "0.6.5", "0.12.4")
    asked: list[int] = []
    router.get("/api/v1/knowledge/").mock(side_effect=paged_answer(bases(75), asked))
    async with open_client(router) as client:
        await client.release()
        items = await client.list_knowledge()
        assert (await client.release()).version == "0.12.4"  # the next call reads the version again
    assert [item["id"] for item in items] == [f"kb-{n:03d}" for n in range(75)]
    assert sorted(asked) == [1, 2, 3]


async def test_an_upgrade_under_the_server_still_lists_every_document(router: respx.Router) -> None:
    """Read as 0.6.5 (files nested in the base), answered as 0.12.4 (`files: null`, a files endpoint)."""
    version = versions(router, "0.6.5", "0.12.4")
    router.get(f"/api/v1/knowledge/{KB}").respond(json={"id": KB, "name": "n", "files": None})
    router.get(f"/api/v1/knowledge/{KB}/files").respond(json={"items": [{"id": "f-1"}, {"id": "f-2"}], "total": 2})
    async with open_client(router) as client:
        await client.release()
        files, total = await client.knowledge_files(KB, None)
    assert [f["id"] for f in files] == ["f-1", "f-2"]
    assert total == 2
    assert version.call_count == 2


async def test_a_downgrade_under_the_server_reads_the_nested_files(router: respx.Router) -> None:
    """Read as 0.12.4, answered as 0.6.5, whose unknown routes give the HTML page with 200."""
    versions(router, "0.12.4", "0.6.5")
    router.get(f"/api/v1/knowledge/{KB}/files").respond(200, html="<!doctype html><html></html>")
    router.get(f"/api/v1/knowledge/{KB}").respond(json={"id": KB, "name": "n", "files": [{"id": "f-1"}]})
    async with open_client(router) as client:
        await client.release()
        files, _ = await client.knowledge_files(KB, None)
    assert [f["id"] for f in files] == ["f-1"]


@pytest.mark.parametrize("reported", ["0.6.5", "main", "v0.6.5-custom"])
async def test_files_that_do_not_fit_the_release_are_never_an_empty_list(router: respx.Router, reported: str) -> None:
    """A fork or a stale version that keeps saying the same thing: an error, not 'this base has no documents'."""
    versions(router, reported)
    router.get(f"/api/v1/knowledge/{KB}").respond(json={"id": KB, "name": "n", "files": None})
    router.get(f"/api/v1/knowledge/{KB}/files").respond(200, html="<html></html>")
    async with open_client(router) as client:
        caught = await failure(client.knowledge_files(KB, None))
    assert caught.code == "unexpected_response"


# -- 6: a listing never trusts `total` ---------------------------------------------------------------------------


async def test_a_huge_total_is_refused_after_one_request(router: respx.Router) -> None:
    versions(router, "0.12.4")
    route = router.get("/api/v1/knowledge/").respond(json={"items": bases(30), "total": 100_000})
    async with open_client(router) as client:
        caught = await failure(client.list_knowledge())
    assert caught.code == "unexpected_response"
    assert "100,000" in caught.message
    assert route.call_count == 1


async def test_a_total_that_lies_stops_at_the_first_empty_page(router: respx.Router) -> None:
    """`total` claims 10,000 but page 3 is empty: a few requests, then an error, never 334 requests at once."""
    versions(router, "0.12.4")
    asked: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        number = int(request.url.params.get("page") or 1)
        asked.append(number)
        return httpx.Response(200, json={"items": bases(60)[(number - 1) * 30 : number * 30], "total": 10_000})

    router.get("/api/v1/knowledge/").mock(side_effect=answer)
    async with open_client(router) as client:
        caught = await failure(client.list_knowledge())
    assert caught.code == "unexpected_response"
    assert "60 of the 10000" in caught.message
    assert len(asked) <= 2 * (1 + 4 + 4)  # page 1 and at most two rounds of 4 workers, read twice
    assert max(asked) <= 3 + 2 * 4


# -- 5: 401 on reads and on writes ---------------------------------------------------------------------------------


async def test_an_expired_token_on_a_read_is_auth(router: respx.Router) -> None:
    versions(router, "0.12.4")
    router.get("/api/v1/knowledge/").respond(401, json={"detail": "401 Unauthorized"})
    async with open_client(router) as client:
        caught = await failure(client.list_knowledge())
    assert caught.code == "auth"
    assert "expired" in caught.message


async def test_401_unauthorized_on_a_write_names_both_causes(router: respx.Router) -> None:
    versions(router, "0.12.4")
    router.post("/api/v1/knowledge/create").respond(401, json={"detail": "401 Unauthorized"})
    async with open_client(router) as client:
        caught = await failure(client.create_knowledge(Release.parse("0.12.4"), "n", "d"))
    assert caught.code == "forbidden"
    assert "permission" in caught.message
    assert "expired" in caught.message


# -- 10: unknown versions keep both gates shut ---------------------------------------------------------------------


@pytest.mark.parametrize(("reported", "private_field"), [("0.6.43", True), ("main", True), ("0.12.4", False)])
async def test_a_new_base_is_private_unless_the_release_is_known_to_make_it_so(
    router: respx.Router, reported: str, private_field: bool
) -> None:
    route = router.post("/api/v1/knowledge/create").respond(json={"id": KB, "name": "n"})
    async with open_client(router) as client:
        await client.create_knowledge(Release.parse(reported), "n", "d")
    sent = json.loads(route.calls.last.request.content)
    assert ("access_control" in sent) is private_field
    if private_field:
        assert sent["access_control"] == {}
    assert Release.parse(reported).capabilities.keep_file_on_remove is (reported != "main")


# -- 12: a wrong prefix and a redirect say what they are -----------------------------------------------------------


async def test_a_wrong_path_prefix_is_not_a_key_problem(router: respx.Router) -> None:
    router.get("/api/version").respond(404, json={"detail": "Not Found"})
    async with open_client(router) as client:
        caught = await failure(client.release())
    assert caught.code == "unexpected_response"
    assert "prefix" in caught.message
    assert "key" not in caught.message.lower()


async def test_a_redirect_names_where_it_points(router: respx.Router) -> None:
    router.get("/api/version").respond(301, headers={"Location": "https://owui.example/api/version"})
    async with open_client(router) as client:
        caught = await failure(client.release())
    assert caught.code == "unexpected_response"
    assert "https://owui.example/api/version" in caught.message
    assert "HTML" not in caught.message
