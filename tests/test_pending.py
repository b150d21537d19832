"""`knowledge_files(pending=N)` (issue 17, part 6): what of a base is not searchable yet, from Open WebUI's own list
(0.9.6+: uploads that link themselves) and from this server's journal of its uploads in flight; optionally waited
for until nothing is left."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.journal import FileJournal, Inflight, Record
from openwebui_rag_mcp.tools import list_files
from tests.conftest import make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
PENDING = f"/api/v1/knowledge/{KB}/files/pending"
UPLOADING = "7a7a7a7a-1111-4222-8333-444455556666"
OURS = "8b8b8b8b-1111-4222-8333-444455556666"


def in_processing(file_id: str, status: str = "processing") -> dict[str, Any]:
    return {
        "id": file_id,
        "user_id": "u",
        "filename": "handbook.pdf",
        "data": {"status": status},
        "meta": {"name": "handbook.pdf", "size": 4096, "data": {"knowledge_id": KB, "title": "Handbook"}},
        "created_at": 1793000000,
        "updated_at": 1793000000,
    }


def upstream(version: str = "0.12.4", answers: list[list[dict[str, Any]]] | None = None) -> respx.Router:
    router = new_router()
    router.get("/api/version").respond(json={"version": version})
    router.get(f"/api/v1/knowledge/{KB}").respond(json={"id": KB, "name": "Docs", "files": None})
    replies = iter(answers if answers is not None else [[in_processing(UPLOADING)]])
    last: list[list[dict[str, Any]]] = [[]]

    def reply(request: httpx.Request) -> httpx.Response:
        last[0] = next(replies, last[0])
        return httpx.Response(200, json=last[0])

    router.get(PENDING).mock(side_effect=reply)
    return router


@asynccontextmanager
async def app_for(router: respx.Router, journal: Inflight | None = None, **env: str) -> AsyncIterator[App]:
    settings = make_settings(**env)
    client = OpenWebUIClient(settings, transport=mock_transport(router))
    try:
        yield App(settings=settings, client=client, inflight=journal)
    finally:
        await client.aclose()


async def test_open_webuis_own_pending_uploads_are_listed_with_their_status() -> None:
    router = upstream()
    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=0)
    assert [(i.file_id, i.title, i.size, i.status) for i in listed.items] == [
        (UPLOADING, "Handbook", 4096, "processing")
    ]
    assert (listed.total, listed.count, listed.next_cursor) == (1, 1, None)
    assert listed.hint is not None
    assert "1 not searchable yet" in listed.hint
    assert router.routes[2].call_count == 1


async def test_waiting_polls_until_nothing_is_left_and_reports_progress() -> None:
    router = upstream(answers=[[in_processing(UPLOADING, "pending")], [in_processing(UPLOADING)], []])
    told: list[tuple[float, float, str]] = []

    async def progress(done: float, total: float, message: str) -> None:
        told.append((done, total, message))

    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=60, progress=progress)
    assert listed.items == []
    assert listed.hint == "nothing is processing: every document of the base is searchable"
    assert router.routes[2].call_count == 3
    assert [message for _, _, message in told] == ["1 still processing", "1 still processing"]
    assert all(total == 60 for _, total, _ in told)


async def test_a_wait_that_runs_out_says_what_is_still_processing() -> None:
    router = upstream(answers=[[in_processing(UPLOADING)]])  # for ever
    async with app_for(router) as app:
        started = time.monotonic()
        listed = await list_files(app, KB, pending=1)
    assert [item.file_id for item in listed.items] == [UPLOADING]
    assert listed.hint is not None
    assert "after waiting 1 s" in listed.hint
    assert router.routes[2].call_count >= 2
    assert time.monotonic() - started < 30  # a hang guard: the wait ends


async def test_this_servers_own_uploads_in_flight_are_listed_on_every_release(tmp_path: Path) -> None:
    journal = Inflight(FileJournal(tmp_path))
    router = upstream("0.8.12")
    async with app_for(router, journal) as app:
        owner = app.uploads_owner()
        now = time.time()
        for record_id, knowledge_id, file_id in (("r1", KB, OURS), ("r2", "other-base", "x"), ("r3", KB, None)):
            await journal.save(
                Record(record_id, owner, knowledge_id, "notes.md", 12, "0" * 64, now, now, "h", 1, "s", file_id)
            )
        # A record whose writer is gone (here: not renewed) is recovery's, not an upload in progress.
        await FileJournal(tmp_path).put(
            Record("r4", owner, KB, "old.md", 12, "0" * 64, now - 999, now - 900, "h", 1, "s", "dead-file")
        )
        listed = await list_files(app, KB, pending=0)
    # Only this base's, and only uploads Open WebUI has answered (a file id to name); 0.8 lists none of its own.
    assert [(item.file_id, item.filename, item.status) for item in listed.items] == [(OURS, "notes.md", "processing")]
    assert router.routes[2].call_count == 0


async def test_nothing_pending_says_every_document_is_searchable() -> None:
    router = upstream(answers=[[]])
    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=0)
    assert (listed.total, listed.items) == (0, [])
    assert listed.hint == "nothing is processing: every document of the base is searchable"


async def test_a_base_the_key_cannot_read_is_refused_before_its_list() -> None:
    router = upstream()
    router.get(f"/api/v1/knowledge/{KB}").respond(404, json={"detail": "We could not find what you're looking for :/"})
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await list_files(app, KB, pending=0)
    assert caught.value.code == "not_found"
    assert router.routes[2].call_count == 0


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"pending": -1}, "pending must be between 0 and 3600"),
        ({"pending": 3601}, "pending must be between 0 and 3600"),
        ({"pending": 0, "query": "x"}, "give it without query"),
        ({"pending": 0, "where": {"a": 1}}, "give it without query"),
        ({"pending": 0, "cursor": "abc"}, "give it without query"),
    ],
)
async def test_bad_pending_arguments_are_refused_before_any_request(arguments: dict[str, Any], says: str) -> None:
    router = upstream()
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await list_files(app, KB, **arguments)
    assert caught.value.code == "invalid_argument"
    assert says in caught.value.message
    assert [call.request.url.path for call in router.calls] == []


async def test_an_allowlist_keeps_other_bases_out() -> None:
    router = upstream()
    async with app_for(router, OPENWEBUI_KNOWLEDGE_IDS="deadbeef-7777-4888-9999-aaaabbbbcccc") as app:
        with pytest.raises(ToolFailure) as caught:
            await list_files(app, KB, pending=0)
    assert caught.value.code == "not_found"
    assert router.calls == []


def linking_upstream(status: Any, listed_after: int, marked_after: int = 0) -> respx.Router:
    """0.10.2: the upload leaves Open WebUI's pending list at once, with `status`; the base lists it from the
    `listed_after`-th read of its files on, marked as written to the base from the `marked_after`-th."""
    router = upstream("0.10.2", answers=[[in_processing(UPLOADING)], []])
    if isinstance(status, int):
        router.get(f"/api/v1/files/{UPLOADING}/process/status").respond(status, json={"detail": "Not found"})
    else:
        router.get(f"/api/v1/files/{UPLOADING}/process/status").respond(json={"status": status})
    reads = iter(range(1, 1000))

    def files(request: httpx.Request) -> httpx.Response:
        assert request.url.params["query"] == "handbook.pdf"
        read = next(reads)
        item = in_processing(UPLOADING, "completed")
        item["meta"]["collection_name"] = KB if read >= marked_after else f"file-{UPLOADING}"
        items = [item] if read >= listed_after else []
        return httpx.Response(200, json={"items": items, "total": len(items)})

    router.get(f"/api/v1/knowledge/{KB}/files").mock(side_effect=files)
    return router


async def test_before_0_12_4_an_upload_off_the_pending_list_is_waited_for_until_the_base_lists_it() -> None:
    # 0.9.6 to 0.12.3 say "completed" (and drop the file from the pending list) a moment before the link.
    router = linking_upstream("completed", listed_after=3)
    told: list[str] = []

    async def progress(done: float, total: float, message: str) -> None:
        told.append(message)

    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=60, progress=progress)
    assert listed.hint == "nothing is processing: every document of the base is searchable"
    assert told == ["1 still processing"] * 3
    assert router.routes[4].call_count == 3  # the base's list, asked by the file's name until it is there


async def test_on_0_10_a_listed_upload_is_waited_for_until_it_is_marked_as_written_to_the_base() -> None:
    """0.10 links the upload, then indexes it into the base: listed is not yet searchable."""
    router = linking_upstream("completed", listed_after=1, marked_after=4)
    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=60)
    assert listed.hint == "nothing is processing: every document of the base is searchable"
    assert router.routes[4].call_count == 4


async def test_before_0_12_4_a_wait_that_runs_out_before_the_link_names_the_file_as_processing() -> None:
    router = linking_upstream("completed", listed_after=10**6)
    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=1)
    assert [(item.file_id, item.status) for item in listed.items] == [(UPLOADING, "processing")]
    assert listed.hint is not None
    assert "1 not searchable yet after waiting 1 s" in listed.hint


@pytest.mark.parametrize("status", ["failed", 404], ids=["processing failed", "file deleted"])
async def test_before_0_12_4_an_upload_that_failed_or_is_gone_is_not_waited_for(status: Any) -> None:
    router = linking_upstream(status, listed_after=10**6)
    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=60)
    assert (listed.items, listed.hint) == ([], "nothing is processing: every document of the base is searchable")
    assert router.routes[3].call_count == 1
    assert router.routes[4].call_count == 0


async def test_on_0_12_4_leaving_the_pending_list_is_the_link_itself() -> None:
    router = linking_upstream("completed", listed_after=10**6)
    router.get("/api/version").respond(json={"version": "0.12.4"})
    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=60)
    assert listed.items == []
    assert (router.routes[3].call_count, router.routes[4].call_count) == (0, 0)


async def test_before_0_12_4_another_users_upload_whose_status_is_refused_is_waited_for_in_the_list() -> None:
    router = linking_upstream(403, listed_after=2)
    async with app_for(router) as app:
        listed = await list_files(app, KB, pending=60)
    assert (listed.items, listed.hint) == ([], "nothing is processing: every document of the base is searchable")
    assert router.routes[4].call_count == 2
