"""The watch that confirms a base's self-linking uploads together, against the orders Open WebUI does things in:
0.10 links an upload and then indexes it into the base; 0.11 to 0.12.3 take it off the pending list a moment before
they link it; a failure after the link clears the file's hash."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.giveup import Waits
from openwebui_rag_mcp.linkwatch import LinkWatch
from tests.conftest import make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio
KB = "kb-1"


class Lists:
    """The base's pending list and its newest page, as the test sets them; counts how often each is read."""

    def __init__(self, version: str = "0.10.2") -> None:
        self.pending: list[str] = []
        self.listed: dict[str, dict[str, Any]] = {}
        self.reads = {"pending": 0, "page": 0}
        self.pages_wanted = 0
        self.pages_read = asyncio.Event()  # set once the newest page was read `pages_wanted` times
        self.router = new_router()
        self.router.get("/api/version").respond(json={"version": version})
        self.router.get(f"/api/v1/knowledge/{KB}/files/pending").mock(side_effect=self._pending)
        self.router.get(f"/api/v1/knowledge/{KB}/files").mock(side_effect=self._page)

    def _pending(self, request: httpx.Request) -> httpx.Response:
        self.reads["pending"] += 1
        return httpx.Response(200, json=[{"id": file_id} for file_id in self.pending])

    def _page(self, request: httpx.Request) -> httpx.Response:
        self.reads["page"] += 1
        if self.reads["page"] >= self.pages_wanted:
            self.pages_read.set()
        items = list(self.listed.values())
        return httpx.Response(200, json={"items": items, "total": len(items)})

    def link(self, file_id: str, collection: str, file_hash: str | None = "ab" * 32) -> None:
        self.listed[file_id] = {"id": file_id, "hash": file_hash, "meta": {"collection_name": collection}}


async def watched(lists: Lists) -> tuple[OpenWebUIClient, LinkWatch]:
    client = OpenWebUIClient(make_settings(), transport=mock_transport(lists.router))
    return client, LinkWatch(client, KB, poll_seconds=0.01)


async def test_a_file_linked_before_it_is_indexed_is_confirmed_only_once_marked_with_the_base() -> None:
    lists = Lists()
    client, watch = await watched(lists)
    try:
        lists.link("f-1", "file-f-1")  # 0.10: linked, its own collection written, the base's not yet
        lists.pages_wanted = 3
        waiting = asyncio.create_task(watch.linked("f-1", Waits(answer=120, processing=30)))
        await lists.pages_read.wait()
        assert not waiting.done()
        lists.link("f-1", KB)
        record = await waiting
        assert record is not None
        assert record.collection == KB
        assert (watch.confirmed, watch.handed_back) == (1, 0)
    finally:
        await client.aclose()


async def test_a_file_whose_indexing_into_the_base_failed_after_the_link_is_handed_back() -> None:
    """0.10 clears the hash of a file that failed: its writer reads the status and removes it."""
    lists = Lists()
    client, watch = await watched(lists)
    try:
        lists.link("f-1", "file-f-1", file_hash=None)
        assert await watch.linked("f-1", Waits(answer=120, processing=30)) is None
        assert (watch.confirmed, watch.handed_back) == (0, 1)
    finally:
        await client.aclose()


async def test_a_file_on_neither_list_once_is_looked_at_again_before_it_is_handed_back() -> None:
    """0.11 to 0.12.3 call an upload "completed" for a moment between its own collection and the base's, and it is
    then neither pending nor linked: one look like that is not a failure."""
    lists = Lists()
    client, watch = await watched(lists)
    try:
        lists.pages_wanted = 1
        waiting = asyncio.create_task(watch.linked("f-1", Waits(answer=120, processing=30)))
        await lists.pages_read.wait()
        lists.link("f-1", KB)  # linked before the second look
        assert await waiting is not None

        lost = await watch.linked("f-2", Waits(answer=120, processing=30))  # on neither list, look after look
        assert lost is None
        assert (watch.confirmed, watch.handed_back) == (1, 1)
    finally:
        await client.aclose()


async def test_a_file_still_pending_is_not_looked_for_in_the_base() -> None:
    lists = Lists()
    lists.pending = ["f-1"]
    client, watch = await watched(lists)
    try:
        assert await watch.linked("f-1", Waits(answer=120, processing=0.2)) is None  # the writer's wait ran out
        assert lists.reads["pending"] >= 2
        assert lists.reads["page"] == 0
    finally:
        await client.aclose()


async def test_from_0_11_a_listed_file_is_confirmed_without_the_mark() -> None:
    """0.11+ write the base's vectors before the link, so listed is indexed; with BYPASS_EMBEDDING_AND_RETRIEVAL Open
    WebUI never sets the mark, and a file waiting for it would wait out the timeout."""
    lists = Lists("0.12.3")
    client, watch = await watched(lists)
    try:
        lists.link("f-1", "file-f-1")
        record = await watch.linked("f-1", Waits(answer=120, processing=30))
        assert record is not None
        assert (watch.confirmed, watch.handed_back) == (1, 0)
    finally:
        await client.aclose()


async def test_uploads_ready_at_once_share_one_read_of_write_access_begun_after_they_asked() -> None:
    """0.9.x: each self-linking upload needs a read of the base's write access begun after it was ready to go. Those
    asking together share one; one asking while a read runs waits for the next; a refusal reaches all who shared it,
    and the next caller gets a read of its own."""
    watch = LinkWatch(OpenWebUIClient(make_settings(), transport=mock_transport(new_router())), KB)
    began: list[int] = []
    gate = asyncio.Event()
    refuse = False

    async def read() -> None:
        began.append(len(began) + 1)
        await gate.wait()
        if refuse:
            raise PermissionError("read-only")

    first = [asyncio.create_task(watch.writable(read)) for _ in range(3)]
    await _ticks()  # the read begins
    assert began == [1]
    late = asyncio.create_task(watch.writable(read))  # asks while the first read runs
    await _ticks()
    assert began == [1]
    assert not late.done()
    gate.set()
    await asyncio.gather(*first)
    await late
    assert began == [1, 2]  # the late one waited for a read of its own, begun after it asked

    gate.clear()
    refuse = True
    refused = [asyncio.create_task(watch.writable(read)) for _ in range(2)]
    await _ticks()
    gate.set()
    outcomes = await asyncio.gather(*refused, return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [PermissionError, PermissionError]
    assert began == [1, 2, 3]
    refuse = False
    await watch.writable(read)
    assert began == [1, 2, 3, 4]
    assert watch.write_access_reads == 4


async def _ticks() -> None:
    """Let every task that can run, run (a caller's, then the read's it started)."""
    for _ in range(5):
        await asyncio.sleep(0)
