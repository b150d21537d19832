"""The per-process App at start (`runtime.running_app`): what it reads before the first tool call."""

from __future__ import annotations

import asyncio

import pytest
import respx

from openwebui_rag_mcp import tools
from openwebui_rag_mcp.runtime import running_app
from tests.conftest import make_settings, mock_transport

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
ANSWER = {"distances": [[0.9]], "documents": [["Bananas are yellow."]], "metadatas": [[{"name": "g.md"}]]}


def upstream(router: respx.Router, release: str) -> tuple[respx.Route, respx.Route]:
    router.get("/api/version").respond(json={"version": release})
    listing = router.get("/api/v1/knowledge/").respond(json={"items": [{"id": KB, "name": "Fruit"}], "total": 1})
    query = router.post("/api/v1/retrieval/query/collection").respond(json=ANSWER)
    return listing, query


async def started(listing: respx.Route) -> None:
    """Until the warm-up has listed the bases (it runs beside the caller): a bound on turns, not on time."""
    for _ in range(10_000):
        if listing.call_count:
            return
        await asyncio.sleep(0)
    raise AssertionError("the bases were not listed at start")


async def test_the_bases_are_listed_at_start_so_a_first_search_lists_nothing(router: respx.Router) -> None:
    """Issue 42: where retrieval checks access itself (0.9+), a search uses a remembered listing, so listing at start
    takes a request off a session's first search."""
    listing, query = upstream(router, "0.12.4")
    settings = make_settings()
    async with running_app(settings, transport=mock_transport(router), list_at_start=True) as app:
        await started(listing)
        result = await tools.search(app, "bananas", knowledge_ids=[KB])
    assert result.knowledge_ids == [KB]
    assert (listing.call_count, query.call_count) == (1, 1)


@pytest.mark.parametrize("release", ["0.6.5", "0.8.12"])
async def test_nothing_is_listed_at_start_where_every_search_lists_afresh(router: respx.Router, release: str) -> None:
    """Before 0.9 retrieval checks no access, so every search lists the bases afresh: a listing at start would be
    wasted."""
    listing, query = upstream(router, release)
    if release == "0.6.5":
        listing.respond(json=[{"id": KB, "name": "Fruit"}])
    async with running_app(make_settings(), transport=mock_transport(router), list_at_start=True) as app:
        await tools.search(app, "bananas", knowledge_ids=[KB])
        await tools.search(app, "bananas", knowledge_ids=[KB])
    assert (listing.call_count, query.call_count) == (2, 2)
