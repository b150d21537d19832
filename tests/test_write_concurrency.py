"""Concurrent writes through one MCP session: their attaches to a base take turns, their uploads do not wait for each
other (issue 18), and reads are not held up by them.

The mocked Open WebUI answers asynchronously with small delays, so without the write lock the attaches of 20
concurrent knowledge_add calls would overlap. The mock counts the attaches in flight and records every request in
arrival order, tagged with the sequence it belongs to.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import httpx
import pytest
import respx
from mcp import Client

from openwebui_rag_mcp import runtime
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import Settings, Timings
from openwebui_rag_mcp.journal import Inflight
from openwebui_rag_mcp.locks import Lease, WriteLocks
from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

N = 20
SEARCHES = 5
DELAY = 0.005  # each mocked request takes this long, so concurrent sequences really would overlap
POLLS = Timings(poll_first=DELAY, poll_max=DELAY)
KBS = [f"0000{i:04d}-aaaa-4bbb-8ccc-dddddddddddd" for i in range(N)]
FILES = [f"f11e{i:04d}-aaaa-4bbb-8ccc-eeeeeeeeeeee" for i in range(N)]
STEPS = ["upload", "status", "status", "attach"]  # one knowledge_add's writes and polls, as Open WebUI sees them
_UPLOADED_NAME = re.compile(rb'filename="doc_(\d+)\.md"')


@dataclass
class Upstream:
    """A mocked Open WebUI that records which write sequence each request belongs to."""

    router: respx.Router
    log: list[tuple[int, str]] = field(default_factory=list)  # (sequence, step) in arrival order
    polls: Counter[int] = field(default_factory=Counter)
    searches: list[int] = field(default_factory=list)  # how many documents were attached when each search arrived
    first_write: asyncio.Event = field(default_factory=asyncio.Event)
    attaching: int = 0  # attaches in flight now
    most_attaching: int = 0

    def __post_init__(self) -> None:
        r = self.router
        r.get("/api/version").respond(json={"version": "0.12.4"})
        listing = [{"id": kb, "name": f"База {i}", "write_access": True} for i, kb in enumerate(KBS)]
        r.get("/api/v1/knowledge/").respond(json={"items": listing[:30], "total": len(listing[:30])})
        r.get(path__regex=r"^/api/v1/knowledge/(?P<kb>[^/]+)$").mock(side_effect=self._base)
        r.post("/api/v1/files/").mock(side_effect=self._upload)
        r.get(path__regex=r"^/api/v1/files/(?P<file>[^/]+)/process/status$").mock(side_effect=self._status)
        r.post(path__regex=r"^/api/v1/knowledge/(?P<kb>[^/]+)/file/add$").mock(side_effect=self._add)
        r.post("/api/v1/retrieval/query/collection").mock(side_effect=self._search)
        # The hit's document, read for its citation (a read: never behind the write lock).
        r.get(f"/api/v1/files/{FILES[0]}").respond(json={"id": FILES[0], "data": {"content": "found in it"}})

    async def _base(self, request: httpx.Request, kb: str) -> httpx.Response:
        sequence = KBS.index(kb)
        self.first_write.set()
        await asyncio.sleep(DELAY)
        body = {"id": kb, "name": f"База {sequence}", "description": "", "files": None, "write_access": True}
        return httpx.Response(200, json=body)

    async def _upload(self, request: httpx.Request) -> httpx.Response:
        found = _UPLOADED_NAME.search(request.content)
        assert found is not None, request.content[:300]
        sequence = int(found.group(1))
        self.log.append((sequence, "upload"))
        await asyncio.sleep(DELAY)
        body = {"id": FILES[sequence], "filename": f"doc_{sequence:02d}.md", "data": {"status": "pending"}}
        return httpx.Response(200, json={**body, "status": True})

    async def _status(self, request: httpx.Request, file: str) -> httpx.Response:
        sequence = FILES.index(file)
        self.log.append((sequence, "status"))
        self.polls[sequence] += 1
        await asyncio.sleep(DELAY)
        return httpx.Response(200, json={"status": "completed" if self.polls[sequence] > 1 else "pending"})

    async def _add(self, request: httpx.Request, kb: str) -> httpx.Response:
        sequence = FILES.index(json.loads(request.content)["file_id"])
        self.log.append((sequence, "attach"))
        self.attaching += 1
        self.most_attaching = max(self.most_attaching, self.attaching)
        try:
            await asyncio.sleep(DELAY)
        finally:
            self.attaching -= 1
        return httpx.Response(200, json={"id": kb, "name": f"База {sequence}", "files": [], "write_access": False})

    async def _search(self, request: httpx.Request) -> httpx.Response:
        self.searches.append(sum(1 for _, step in self.log if step == "attach"))
        await asyncio.sleep(DELAY)
        names = json.loads(request.content)["collection_names"]
        meta = {"file_id": FILES[0], "name": "doc_00.md", "source": "doc_00.md"}
        return httpx.Response(
            200, json={"distances": [[0.9]], "documents": [[f"found in {names[0]}"]], "metadatas": [[meta]]}
        )


def interleavings(log: list[tuple[int, str]]) -> list[str]:
    """Where a sequence's requests resume after another sequence's: empty when every sequence is contiguous."""
    problems: list[str] = []
    finished: set[int] = set()
    current: int | None = None
    for position, (sequence, step) in enumerate(log):
        if sequence == current:
            continue
        if sequence in finished:
            problems.append(f"request {position} ({step} of sequence {sequence}) comes after sequence {current}")
        if current is not None:
            finished.add(current)
        current = sequence
    return problems


@pytest.fixture
def upstream() -> Upstream:
    return Upstream(new_router())


def add_args(i: int, knowledge_id: str = KBS[0]) -> dict[str, Any]:
    """The i-th document, by default into the one base every sequence shares (writes to it must not interleave)."""
    return {"knowledge_id": knowledge_id, "text": f"# Документ {i}\n\nТекст номер {i}.", "title": f"doc {i:02d}"}


async def add_all(client: Client, done: dict[int, float], results: dict[int, dict[str, Any]]) -> None:
    """N knowledge_add calls at once over one session."""
    loop = asyncio.get_running_loop()

    async def add(i: int) -> None:
        result = await client.call_tool("knowledge_add", add_args(i))
        assert not result.is_error, result.content
        assert result.structured_content is not None
        results[i] = result.structured_content
        done[i] = loop.time()

    async with anyio.create_task_group() as group:
        for i in range(N):
            group.start_soon(add, i)


async def test_concurrent_attaches_take_turns_uploads_overlap_and_reads_are_not_held(upstream: Upstream) -> None:
    server = create_server(replace(make_settings(), timings=POLLS), transport=mock_transport(upstream.router))
    loop = asyncio.get_running_loop()
    write_done: dict[int, float] = {}
    results: dict[int, dict[str, Any]] = {}
    search_done: list[float] = []

    async def search_meanwhile(client: Client) -> None:
        await upstream.first_write.wait()
        for _ in range(SEARCHES):
            found = await client.call_tool("knowledge_search", {"query": "документ", "knowledge_ids": [KBS[0]]})
            assert not found.is_error, found.content
            assert found.structured_content is not None
            assert found.structured_content["count"] == 1
            search_done.append(loop.time())

    async with Client(server, raise_exceptions=True) as client:
        # The first call of a tool is slower (schemas are built once); keep that out of the measurement.
        await client.call_tool("knowledge_search", {"query": "warm-up", "knowledge_ids": [KBS[0]]})
        upstream.searches.clear()
        async with anyio.create_task_group() as group:
            group.start_soon(add_all, client, write_done, results)
            group.start_soon(search_meanwhile, client)

    # Every write succeeded with the file its own upload created.
    assert sorted(results) == list(range(N))
    for i, added in results.items():
        assert (added["ok"], added["knowledge_id"], added["file_id"]) == (True, KBS[0], FILES[i])

    # Attaches took turns; the uploads and their processing went on side by side; each sequence is complete, in order.
    assert upstream.most_attaching == 1
    assert interleavings(upstream.log) != []
    steps: dict[int, list[str]] = {}
    for sequence, step in upstream.log:
        steps.setdefault(sequence, []).append(step)
    assert steps == dict.fromkeys(range(N), STEPS)

    # Reads went past the lock: counted, not timed, so load cannot make this flaky. The first search, started once
    # the writes were under way, reached Open WebUI while most documents were still to be attached.
    assert len(search_done) == SEARCHES
    assert len(upstream.searches) == SEARCHES
    assert upstream.searches[0] <= N // 2, upstream.searches


class _NoLock:
    """Stands in for the write lock to show the overlap check can fail."""

    async def __aenter__(self) -> Lease:
        return Lease()

    async def __aexit__(self, *exc: object) -> None:
        return None


class _NoLocks:
    shared = False
    sets = None

    def hold(self, key: str) -> _NoLock:
        return _NoLock()

    async def aclose(self) -> None:
        return None


async def test_overlap_is_detected_without_the_lock(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """A control for the test above: with the lock replaced by a no-op, the same attaches overlap."""

    def unlocked_app(*, settings: Settings, client: OpenWebUIClient, locks: WriteLocks, inflight: Inflight) -> App:
        return App(settings=settings, client=client, locks=_NoLocks(), inflight=inflight)

    monkeypatch.setattr(runtime, "App", unlocked_app)
    server = create_server(replace(make_settings(), timings=POLLS), transport=mock_transport(upstream.router))
    results: dict[int, dict[str, Any]] = {}
    async with Client(server, raise_exceptions=True) as client:
        await add_all(client, {}, results)

    assert sorted(results) == list(range(N))
    assert upstream.most_attaching > 1


async def test_writes_to_different_bases_do_not_wait_for_each_other(upstream: Upstream) -> None:
    """The lock is per base: a slow write to one base does not hold up a write to another."""
    first_status = asyncio.Event()
    let_go = asyncio.Event()
    slow_file = FILES[0]

    async def status(request: httpx.Request, file: str) -> httpx.Response:
        if file == slow_file:
            first_status.set()
            await let_go.wait()
        return httpx.Response(200, json={"status": "completed"})

    upstream.router.get(path__regex=r"^/api/v1/files/(?P<file>[^/]+)/process/status$").mock(side_effect=status)
    server = create_server(replace(make_settings(), timings=POLLS), transport=mock_transport(upstream.router))
    async with Client(server, raise_exceptions=True) as client, anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "knowledge_add", add_args(0, KBS[0]))
        await first_status.wait()
        with anyio.fail_after(5):  # with one lock for every base this would wait for base 0 for ever
            other = await client.call_tool("knowledge_add", add_args(1, KBS[1]))
        assert not other.is_error, other.content
        assert not let_go.is_set()
        let_go.set()
