"""Issue 10, defects 0 and 1: a search never reaches a base the key cannot read through the Knowledge API, and a
wrong id is `not_found` naming it, not an empty success. The common path stays one retrieval request. Issue 16,
defect 11: a base created under an allowlist is its creator's, on every replica that shares Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
import respx
from mcp import Client

from openwebui_rag_mcp import app as app_module
from openwebui_rag_mcp import tools, writes
from openwebui_rag_mcp.app import (
    CREATED_TTL_SECONDS,
    READABLE_TTL_SECONDS,
    AllowedFiles,
    App,
    ReadableBases,
    calling_as,
)
from openwebui_rag_mcp.client import OpenWebUIClient, acting_as
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.locks import LeaseLocks
from openwebui_rag_mcp.server import create_server
from tests.conftest import API_KEY, make_settings, mock_transport

pytestmark = pytest.mark.anyio

MINE = "c0ffee00-1111-4222-8333-444455556666"
SHARED = "deadbeef-7777-4888-9999-aaaabbbbcccc"
ADMINS_PRIVATE = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
A_FILE = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
ANSWER = {"distances": [[0.9]], "documents": [["text"]], "metadatas": [[{"file_id": A_FILE, "name": "a.md"}]]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["0.6.5", "0.12.4"])
def release(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def upstream(router: respx.Router, release: str, readable: list[str]) -> tuple[respx.Route, respx.Route]:
    """An Open WebUI whose Knowledge API shows the key `readable`, and whose retrieval answers for any collection
    (as 0.6.5 and 0.8 do: they check no access)."""
    router.get("/api/version").respond(json={"version": release})
    items = [{"id": kb, "name": kb[:4]} for kb in readable]
    body = items if release == "0.6.5" else {"items": items, "total": len(items)}
    listing = router.get("/api/v1/knowledge/").respond(json=body)
    query = router.post("/api/v1/retrieval/query/collection").respond(json=ANSWER)
    router.get(f"/api/v1/files/{A_FILE}").respond(json={"id": A_FILE, "filename": "a.md", "data": {}})
    router.get(path__regex=r"^/api/v1/files/[^/]+$").respond(404, json={"detail": "We could not find it :/"})
    return listing, query


@asynccontextmanager
async def app_for(router: respx.Router, clock: Clock | None = None, **env: str) -> AsyncIterator[App]:
    settings = make_settings(**env)
    client = OpenWebUIClient(settings, transport=mock_transport(router))
    readable = ReadableBases(clock=clock) if clock is not None else ReadableBases()
    try:
        yield App(settings=settings, client=client, readable=readable)
    finally:
        await client.aclose()


async def refused(app: App, ids: list[str]) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        await tools.search(app, "bananas", knowledge_ids=ids)
    return caught.value


async def test_a_base_the_key_cannot_list_is_never_searched(router: respx.Router, release: str) -> None:
    _, query = upstream(router, release, [MINE, SHARED])
    async with app_for(router) as app:
        failure = await refused(app, [ADMINS_PRIVATE])
        mixed = await refused(app, [MINE, ADMINS_PRIVATE])
    assert failure.code == mixed.code == "not_found"
    assert ADMINS_PRIVATE in failure.message
    assert MINE not in mixed.message
    assert query.call_count == 0  # nothing reached the retrieval endpoint


async def test_a_search_of_every_base_names_only_listed_bases(router: respx.Router, release: str) -> None:
    _, query = upstream(router, release, [MINE, SHARED])
    async with app_for(router) as app:
        result = await tools.search(app, "bananas")
    assert result.knowledge_ids == [MINE, SHARED]
    assert json.loads(query.calls.last.request.content)["collection_names"] == [MINE, SHARED]


async def test_a_typo_is_not_found_not_an_empty_result(router: respx.Router) -> None:
    _, query = upstream(router, "0.12.4", [MINE])
    async with app_for(router) as app:
        failure = await refused(app, ["kb-typo"])
    assert failure.code == "not_found"
    assert "kb-typo" in failure.message
    assert "file_id" not in failure.message.split(";")[0]
    assert query.call_count == 0


async def test_a_file_id_passed_as_a_knowledge_id_is_named_as_such(router: respx.Router) -> None:
    upstream(router, "0.12.4", [MINE])
    async with app_for(router) as app:
        failure = await refused(app, [A_FILE])
    assert failure.code == "not_found"
    assert f"{A_FILE} is the file_id of a document" in failure.message
    assert "knowledge_get_file" in failure.message


async def test_the_common_path_is_one_request(router: respx.Router) -> None:
    """Measured: after the first search, a search of named bases costs exactly one request to Open WebUI."""
    listing, query = upstream(router, "0.12.4", [MINE, SHARED])
    async with app_for(router) as app:
        await tools.search(app, "bananas", knowledge_ids=[MINE])
        assert (listing.call_count, query.call_count) == (1, 1)
        for _ in range(5):
            await tools.search(app, "bananas", knowledge_ids=[MINE, SHARED])
    assert (listing.call_count, query.call_count) == (1, 6)


async def test_a_listing_warms_the_check(router: respx.Router) -> None:
    listing, query = upstream(router, "0.12.4", [MINE])
    async with app_for(router) as app:
        await tools.list_knowledge(app)
        await tools.search(app, "bananas", knowledge_ids=[MINE])
    assert (listing.call_count, query.call_count) == (1, 1)


async def test_what_the_key_can_read_is_read_again_after_a_short_time(router: respx.Router) -> None:
    """Where Open WebUI's retrieval checks access itself (0.9+), the remembered answer spares a listing per search;
    access revoked in Open WebUI stops reaching retrieval once it expires (and retrieval refuses it meanwhile)."""
    clock = Clock()
    listing, query = upstream(router, "0.12.4", [MINE, SHARED])
    async with app_for(router, clock) as app:
        await tools.search(app, "bananas", knowledge_ids=[SHARED])
        listing.respond(json={"items": [{"id": MINE, "name": "mine"}], "total": 1})  # SHARED unshared
        clock.now += 10
        await tools.search(app, "bananas", knowledge_ids=[SHARED])  # still remembered
        clock.now += 25
        failure = await refused(app, [SHARED])
    assert failure.code == "not_found"
    assert query.call_count == 2


# -- issue 41, item 1: before 0.9 (no access check in retrieval) a remembered "may read" never lets a search through


@pytest.mark.parametrize("old_release", ["0.6.5", "0.8.12", "a-fork"])
async def test_a_revoked_share_is_refused_at_once_where_retrieval_checks_nothing(
    router: respx.Router, old_release: str
) -> None:
    """Open WebUI before 0.9 would search a base for anyone: the named bases are confirmed readable by every search,
    one listing with the caller's own credential, so the search right after a share is revoked is refused."""
    listing, query = upstream(router, old_release, [MINE, SHARED])
    paged = old_release != "0.6.5"
    async with app_for(router) as app:
        with acting_as("the-users-key"):
            await tools.search(app, "bananas", knowledge_ids=[SHARED])
            items = [{"id": MINE, "name": "mine"}]  # the admin stops sharing SHARED with this user
            listing.respond(json={"items": items, "total": 1} if paged else items)
            failure = await refused(app, [SHARED])
            await tools.search(app, "bananas", knowledge_ids=[MINE])  # what is still shared is still searched
    assert failure.code == "not_found"
    assert query.call_count == 2
    assert SHARED not in json.loads(query.calls.last.request.content)["collection_names"]
    assert listing.call_count == 3  # one listing a search, none more
    assert {call.request.headers["Authorization"] for call in listing.calls} == {"Bearer the-users-key"}


async def test_a_search_of_every_base_lists_them_afresh_on_every_release(router: respx.Router, release: str) -> None:
    listing, query = upstream(router, release, [MINE, SHARED])
    async with app_for(router) as app:
        await tools.search(app, "bananas")
        listing.respond(json=[{"id": MINE}] if release == "0.6.5" else {"items": [{"id": MINE}], "total": 1})
        result = await tools.search(app, "bananas")
    assert result.knowledge_ids == [MINE]
    assert json.loads(query.calls.last.request.content)["collection_names"] == [MINE]


@pytest.mark.parametrize("allowlist", [False, True])
async def test_a_document_no_longer_readable_is_refused_at_once_where_retrieval_checks_nothing(
    router: respx.Router, allowlist: bool
) -> None:
    """A search by `file_ids` before 0.9 asks the Files API (which checks access on every release) each time; the
    allowlist's remembered listing of what its bases hold only narrows, it never stands in for that."""
    _, query = upstream(router, "0.6.5", [MINE])
    router.get(f"/api/v1/knowledge/{MINE}").respond(json={"id": MINE, "files": [{"id": A_FILE, "meta": {}}]})
    reads = router.get(f"/api/v1/files/{A_FILE}").respond(json={"id": A_FILE, "filename": "a.md", "data": {}})
    env = {"OPENWEBUI_KNOWLEDGE_IDS": MINE} if allowlist else {}
    async with app_for(router, None, **env) as app:
        await tools.search(app, "bananas", file_ids=[A_FILE])
        reads.respond(404, json={"detail": "We could not find what you're looking for :/"})  # access revoked
        with pytest.raises(ToolFailure) as caught:
            await tools.search(app, "bananas", file_ids=[A_FILE])
    assert caught.value.code == "not_found"
    assert query.call_count == 1


async def test_a_base_shared_a_moment_ago_is_found_at_once(router: respx.Router) -> None:
    """An id missing from the remembered answer is checked again before it is refused."""
    listing, _ = upstream(router, "0.12.4", [MINE])
    async with app_for(router) as app:
        await tools.search(app, "bananas", knowledge_ids=[MINE])
        listing.respond(json={"items": [{"id": MINE}, {"id": SHARED}], "total": 2})
        result = await tools.search(app, "bananas", knowledge_ids=[SHARED])
    assert result.knowledge_ids == [SHARED]
    assert listing.call_count == 2


async def test_concurrent_first_searches_share_one_listing(router: respx.Router) -> None:
    async def slow_listing(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.02)
        return httpx.Response(200, json={"items": [{"id": MINE}], "total": 1})

    upstream(router, "0.12.4", [MINE])
    listing = router.get("/api/v1/knowledge/").mock(side_effect=slow_listing)
    async with app_for(router) as app:
        await asyncio.gather(*(tools.search(app, "bananas", knowledge_ids=[MINE]) for _ in range(8)))
    assert listing.call_count == 1


async def test_the_allowlist_still_applies_before_readability(router: respx.Router) -> None:
    listing, query = upstream(router, "0.12.4", [MINE, SHARED])
    async with app_for(router, OPENWEBUI_KNOWLEDGE_IDS=MINE) as app:
        failure = await refused(app, [SHARED])
    assert failure.code == "not_found"
    assert "OPENWEBUI_KNOWLEDGE_IDS" in failure.message
    assert listing.call_count == query.call_count == 0


# -- issue 16, defect 11: bases created under an allowlist belong to their creator, on every replica -----------

NEW_KB = "abcdef01-2345-4678-9abc-def012345678"
ALLOW_CREATE: dict[str, str] = {"OPENWEBUI_KNOWLEDGE_IDS": MINE, "OPENWEBUI_ALLOW_CREATE": "true"}


class SharedStore:
    """What replicas share through Redis: leases (unused here) and sets with a ttl."""

    def __init__(self) -> None:
        self.sets: dict[str, set[str]] = {}
        self.ttls: dict[str, int] = {}

    async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        return True

    async def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        return True

    async def release(self, key: str, token: str) -> bool:
        return True

    async def add_member(self, key: str, member: str, ttl_ms: int) -> None:
        self.sets.setdefault(key, set()).add(member)
        self.ttls[key] = ttl_ms

    async def members(self, key: str) -> set[str]:
        return set(self.sets.get(key, set()))

    async def aclose(self) -> None:
        return None


def creating(router: respx.Router) -> respx.Route:
    router.get("/api/version").respond(json={"version": "0.12.4"})
    body: dict[str, object] = {"id": NEW_KB, "name": "new", "description": "", "access_grants": [], "files": None}
    return router.post("/api/v1/knowledge/create").respond(json=body)


async def test_a_created_base_joins_only_its_creators_allowlist(router: respx.Router) -> None:
    """Over HTTP every caller shares the process: caller B must not reach the base caller A created."""
    creating(router)
    async with app_for(router, None, **ALLOW_CREATE) as app:
        with acting_as("caller-a-key"):
            created = await writes.create_knowledge(app, "new", "")
            assert app.check_base(created.knowledge_id) == NEW_KB
            assert app.allowed_bases() == [MINE, NEW_KB]
        with acting_as("caller-b-key"), pytest.raises(ToolFailure) as caught:
            app.check_base(NEW_KB)
        with acting_as("caller-b-key"):
            assert app.allowed_bases() == [MINE]
        with calling_as("another-service-caller"):  # service mode: callers told apart by their MCP token
            assert app.allowed_bases() == [MINE]
    assert caught.value.code == "not_found"


async def test_a_base_created_on_one_replica_is_usable_on_another(router: respx.Router) -> None:
    """knowledge_create answered by replica A, knowledge_add by replica B: B learns the base through Redis."""
    creating(router)
    router.get(f"/api/v1/knowledge/{NEW_KB}").respond(json={"id": NEW_KB, "name": "new", "write_access": True})
    router.post("/api/v1/files/").respond(json={"id": A_FILE, "filename": "t.md", "data": {"status": "pending"}})
    router.get(f"/api/v1/files/{A_FILE}/process/status").respond(json={"status": "completed"})
    router.post(f"/api/v1/knowledge/{NEW_KB}/file/add").respond(json={"id": NEW_KB, "files": []})
    router.get(f"/api/v1/knowledge/{NEW_KB}/files").respond(json={"items": [], "total": 0})
    store = SharedStore()
    settings = make_settings(**ALLOW_CREATE)
    clients = [OpenWebUIClient(settings, transport=mock_transport(router)) for _ in range(2)]
    replica_a, replica_b = (App(settings=settings, client=c, locks=LeaseLocks(store, wait_seconds=5)) for c in clients)
    try:
        async with Client(create_server(settings, shared=lambda: replica_a)) as on_a:
            created = await on_a.call_tool("knowledge_create", {"name": "new"})
        assert not created.is_error, created.content
        async with Client(create_server(settings, shared=lambda: replica_b)) as on_b:
            added = await on_b.call_tool("knowledge_add", {"knowledge_id": NEW_KB, "text": "t", "title": "t"})
            listed = await on_b.call_tool("knowledge_files", {"knowledge_id": NEW_KB})  # reads know it too
        assert not added.is_error, added.content
        assert not listed.is_error, listed.content
    finally:
        for client in clients:
            await client.aclose()
    (key,) = store.sets
    assert store.sets[key] == {NEW_KB}
    assert store.ttls[key] == int(CREATED_TTL_SECONDS * 1000)
    assert API_KEY not in key  # a digest, never the credential


async def test_without_redis_created_bases_stay_in_the_process_per_caller(router: respx.Router) -> None:
    creating(router)
    async with app_for(router, None, **ALLOW_CREATE) as app:
        await writes.create_knowledge(app, "new", "")
        await app.recall_created()  # nothing to share: a no-op
        assert app.allowed_bases() == [MINE, NEW_KB]


async def test_a_redis_that_does_not_answer_holds_no_tool_call(router: respx.Router) -> None:
    """Under an allowlist every tool call asks Redis what its caller created elsewhere: bounded, so a Redis that
    hangs costs a moment and what this replica knows still applies (the allowlist itself always does)."""

    class Hanging(SharedStore):
        async def members(self, key: str) -> set[str]:
            await anyio.sleep(3600)
            return set()

    settings = make_settings(**ALLOW_CREATE)
    client = OpenWebUIClient(settings, transport=mock_transport(router))
    app = App(settings=settings, client=client, locks=LeaseLocks(Hanging(), wait_seconds=5))
    try:
        with anyio.fail_after(60):  # a hang guard; the bound itself is half a second
            await app.recall_created()
    finally:
        await client.aclose()
    assert app.allowed_bases() == [MINE]


# -- the allowlist's check of a file: what the allowed bases hold, remembered briefly ------------------------------


def allowed_base(router: respx.Router, holds: list[str]) -> respx.Route:
    """Open WebUI 0.12.4 whose base MINE holds the documents `holds` (the list is read on every request)."""
    router.get("/api/version").respond(json={"version": "0.12.4"})
    return router.get(f"/api/v1/knowledge/{MINE}/files").mock(
        side_effect=lambda _: httpx.Response(200, json={"items": [{"id": f} for f in holds], "total": len(holds)})
    )


async def test_a_document_removed_by_someone_else_passes_the_allowlist_for_at_most_the_ttl(
    router: respx.Router,
) -> None:
    holds = [A_FILE]
    listing = allowed_base(router, holds)
    clock = Clock()
    async with app_for(router, OPENWEBUI_KNOWLEDGE_IDS=MINE) as app:
        object.__setattr__(app, "allowed_files", AllowedFiles(clock=clock))
        assert await app.check_file(A_FILE) == A_FILE
        holds.clear()  # taken out of the base in Open WebUI's own interface
        clock.now += READABLE_TTL_SECONDS - 1
        assert await app.check_file(A_FILE) == A_FILE  # remembered
        assert listing.call_count == 1
        clock.now += 1
        with pytest.raises(ToolFailure) as caught:
            await app.check_file(A_FILE)
    assert caught.value.code == "not_found"
    assert listing.call_count == 2


async def test_concurrent_checks_share_one_listing_and_callers_do_not_share_theirs(router: respx.Router) -> None:
    listing = allowed_base(router, [A_FILE])
    async with app_for(router, OPENWEBUI_KNOWLEDGE_IDS=MINE) as app:
        with acting_as("caller-a-key"):
            checked = await asyncio.gather(*(app.check_file(A_FILE) for _ in range(5)))
        assert checked == [A_FILE] * 5
        assert listing.call_count == 1
        with acting_as("caller-b-key"):  # another caller's credential may not read what caller a's could
            await app.check_file(A_FILE)
    assert listing.call_count == 2
    assert [call.request.headers["Authorization"] for call in listing.calls] == [
        "Bearer caller-a-key",
        "Bearer caller-b-key",
    ]


async def test_what_the_allowed_bases_hold_is_remembered_within_a_bound(
    router: respx.Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = allowed_base(router, [A_FILE, "f2", "f3"])
    monkeypatch.setattr(app_module, "ALLOWED_FILES_MAX", 5)  # two credentials' three documents each: one is dropped
    async with app_for(router, OPENWEBUI_KNOWLEDGE_IDS=MINE) as app:
        for key in ("caller-a-key", "caller-b-key", "caller-a-key", "caller-b-key"):
            with acting_as(key):
                await app.check_file(A_FILE)
    assert listing.call_count == 4  # each credential's listing pushed the other's out
