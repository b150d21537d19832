"""The journal of uploads in flight (`journal.py`): records kept while a write runs, renewed while its writer
lives, settled when the write ends, and kept by the write path and the server's start."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from openwebui_rag_mcp import giveup, writes
from openwebui_rag_mcp import journal as journal_module
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.giveup import Waits
from openwebui_rag_mcp.journal import FileJournal, Inflight, Record
from openwebui_rag_mcp.settle import recover
from tests.conftest import API_KEY, FAST, make_settings, new_router
from tests.support.inflight import OWNER, FakeUpstream, abandon, journal, records, server_journal, start_writer
from tests.support.writes import (
    FILE,
    KB,
    Upstream,
    add_args,
    answer,
    call,
    connect,
    error_of,
    form_parts,
    ok_of,
    upload_metadata,
)

pytestmark = pytest.mark.anyio


async def test_a_settled_write_leaves_no_record(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    async with inflight.tracking(OWNER, "kb", "a.md", b"hello", marked=False, answer_within=60) as tracked:
        (during,) = await records(inflight)
        assert (during.knowledge_id, during.filename, during.size, during.file_id) == ("kb", "a.md", 5, None)
        await tracked.uploaded("file-1")
        assert [r.file_id for r in await records(inflight)] == ["file-1"]
        tracked.settle()
    assert await records(inflight) == []
    assert await inflight.owners() == []


async def test_an_unsettled_write_leaves_its_record_for_recovery_at_once(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "file-1")
    assert [r.file_id for r in await inflight.gone(OWNER)] == ["file-1"]
    upstream = FakeUpstream()
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == ["file-1"]
    assert resolution.deleted == ("file-1",)
    assert await records(inflight) == []


async def test_a_running_writer_is_not_recovered(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    async with inflight.tracking(OWNER, "kb", "a.md", b"hello", marked=False, answer_within=60) as tracked:
        await tracked.uploaded("file-1")
        assert await inflight.gone(OWNER) == []
        assert await recover(inflight, FakeUpstream(), OWNER) == []
        tracked.settle()


async def test_a_record_whose_time_ran_out_is_gone(tmp_path: Path) -> None:
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    record = Record("r1", OWNER, "kb", "a.md", 5, "0" * 64, clock[0], clock[0] + 45, "another-host", 1, "1")
    await FileJournal(tmp_path / "inflight").put(record)
    assert await inflight.gone(OWNER) == []
    clock[0] += 46
    assert [r.id for r in await inflight.gone(OWNER)] == ["r1"]


def test_a_killed_writer_on_this_machine_is_gone_at_once(tmp_path: Path) -> None:
    """A real process records an upload and is killed with SIGKILL: its record is recoverable at once, before its
    time runs out."""
    child = start_writer(tmp_path)
    inflight = Inflight(FileJournal(tmp_path / "inflight"))
    upstream = FakeUpstream(listed={"kb": set()})
    try:
        assert anyio.run(inflight.gone, OWNER) == []  # alive: not touched
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    (resolution,) = anyio.run(recover, inflight, upstream, OWNER)
    assert upstream.deleted == ["file-9"], resolution
    assert anyio.run(records, inflight) == []


async def test_a_journal_that_cannot_be_written_refuses_the_upload(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    inflight = Inflight(FileJournal(blocked / "inflight"))
    with pytest.raises(ToolFailure) as caught:
        async with inflight.tracking(OWNER, "kb", "a.md", b"hello", marked=False, answer_within=60):
            pytest.fail("the write must not start")
    assert caught.value.code == "upstream_unavailable"
    assert caught.value.request_sent is False


def test_a_record_reads_back_and_rejects_garbage() -> None:
    record = Record("r", OWNER, "kb", "ü.md", 1, "0" * 64, 1.0, 2.0, "h", 1, "1", "f")
    assert Record.from_json(record.to_json()) == record
    assert Record.from_json(b"not json") is None
    assert Record.from_json("[1]") is None
    assert replace(record, file_id=None).file_id is None
    # A later version's record (a field this one does not know) is still settled, by what this one knows of it.
    assert Record.from_json(json.dumps(json.loads(record.to_json()) | {"later_field": 1})) == record
    assert Record.from_json(json.dumps({"id": "r"})) is None  # too little to settle anything


@pytest.fixture
def upstream() -> Upstream:
    return Upstream(new_router())


async def test_an_upload_is_recorded_while_it_runs_and_dropped_once_attached(upstream: Upstream) -> None:
    """Written before the upload request leaves, with the file id and when the attach's answer is due before the
    attach leaves (recovery lets an attach Open WebUI may still be running end first), dropped once attached."""
    journal, owner = server_journal()
    seen: dict[str, list[Record]] = {"upload": [], "attach": []}

    def seeing(stage: str, handler: Callable[[httpx.Request], httpx.Response]) -> Any:
        async def seen_by(request: httpx.Request) -> httpx.Response:
            seen[stage].extend(await journal._store.records(owner))
            return handler(request)

        return seen_by

    upstream.upload.side_effect = seeing("upload", upstream._upload)
    upstream.add.side_effect = seeing("attach", upstream._add)
    before = time.time()
    ok_of(await call(upstream, "knowledge_add", add_args()))
    (at_upload,), (at_attach,) = seen["upload"], seen["attach"]
    assert (at_upload.knowledge_id, at_upload.file_id, at_upload.attach_by) == (KB, None, 0.0)
    assert at_upload.filename == form_parts(upstream.upload.calls.last.request)["file"][0]
    assert (at_attach.id, at_attach.file_id) == (at_upload.id, FILE)
    timeout = make_settings().timeout
    assert before + timeout <= at_attach.attach_by <= time.time() + timeout
    assert await journal._store.records(owner) == []
    assert API_KEY not in at_attach.to_json()


async def test_a_file_that_could_not_be_removed_is_removed_by_the_next_write(upstream: Upstream) -> None:
    """Open WebUI failed to process the upload and then refused to delete it: the agent is told, and the next write
    with the same credential removes it before its own upload (nothing stays orphaned)."""
    journal, owner = server_journal()
    upstream.status.side_effect = answer(200, json={"status": "failed"})
    upstream.delete.side_effect = answer(500, text="Internal Server Error")
    async with connect(upstream) as client:
        error = error_of(await client.call_tool("knowledge_add", add_args()))
        assert (error.file_id, error.outcome) == (FILE, "partial_or_unknown")
        assert [r.file_id for r in await journal.gone(owner)] == [FILE]
        upstream.status.side_effect = None
        upstream.delete.side_effect = upstream._delete
        ok_of(await client.call_tool("knowledge_add", add_args(title="second")))
    deletes = [i for i, c in enumerate(upstream.router.calls) if c.request.method == "DELETE"]
    uploads = [i for i, c in enumerate(upstream.router.calls) if c.request.url.path == "/api/v1/files/"]
    assert len(deletes) == 2
    assert deletes[1] < uploads[1]  # settled before the second write uploaded anything
    assert await journal._store.records(owner) == []


@pytest.mark.parametrize(("status", "answered"), [(400, True), (504, False)])
async def test_an_attach_open_webui_answered_is_not_waited_for_by_recovery(
    upstream: Upstream, status: int, answered: bool
) -> None:
    """Refused, and the file could not be removed again: the record stays for recovery, which need not wait for an
    attach Open WebUI has answered; a gateway's 504 is no such answer (the attach may still run behind it)."""
    journal, owner = server_journal()
    upstream.add.side_effect = answer(status, json={"detail": "not allowed"})
    upstream.delete.side_effect = answer(500, text="Internal Server Error")
    # (after a 504 the write looks for the file in the base for OPENWEBUI_TIMEOUT more before removing it)
    error_of(await call(upstream, "knowledge_add", add_args(), OPENWEBUI_TIMEOUT="1"))
    (left,) = await journal.gone(owner)
    assert left.file_id == FILE
    assert (left.attach_by == 0.0) is answered


async def test_the_start_settles_what_a_killed_process_left(upstream: Upstream) -> None:
    """A record whose writer is gone (the same pid now names another process) is settled when the server starts."""
    journal, owner = server_journal()
    now = time.time()
    dead = Record(
        "r1", owner, KB, "note.md", 5, "0" * 64, now, now + 3600, journal_module.this_host(), os.getpid(), "x", FILE
    )
    await journal._store.put(dead)
    async with connect(upstream):
        with anyio.fail_after(30):  # a hang guard
            while upstream.delete.call_count == 0:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    assert upstream.delete.calls.last.request.url.path == f"/api/v1/files/{FILE}"
    assert await journal._store.records(owner) == []


async def test_the_start_looks_again_at_an_attach_open_webui_may_still_run(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left at first (Open WebUI may still run the dead writer's attach), removed by the start's own second look once
    the attach's answer was due: no later write is needed to clean it up."""
    journal, owner = server_journal()
    now = time.time()
    host, pid = journal_module.this_host(), os.getpid()
    # its attach's answer due a second from now, with the margin for the journal's write before it was sent
    attach_by = now + 1 - giveup.UPDATE_SECONDS
    dead = Record("r1", owner, KB, "note.md", 5, "0" * 64, now, now + 3600, host, pid, "x", FILE, attach_by=attach_by)
    await journal._store.put(dead)
    async with connect(upstream, timings=replace(FAST, recheck=(0.05,))):
        with anyio.fail_after(30):  # a hang guard
            while upstream.delete.call_count == 0:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert time.time() >= now + 1  # not while the attach could still be running
    assert upstream.delete.calls.last.request.url.path == f"/api/v1/files/{FILE}"
    assert await journal._store.records(owner) == []


@pytest.mark.parametrize(("release", "marked"), [("0.12.4", True), ("0.6.5", False)])
async def test_uploads_carry_the_records_mark_where_the_release_keeps_metadata(release: str, marked: bool) -> None:
    upstream = Upstream(new_router(), release=release)
    journal_, owner = server_journal()
    seen: list[Record] = []

    async def upload_seen(request: httpx.Request) -> httpx.Response:
        seen.extend(await journal_._store.records(owner))
        return upstream._upload(request)

    upstream.upload.side_effect = upload_seen
    ok_of(await call(upstream, "knowledge_add", add_args()))
    sent = upload_metadata(upstream.upload.calls.last.request)
    (record,) = seen
    assert record.marked is marked
    assert sent.get("openwebui_rag_mcp_upload") == (record.id if marked else None)
    assert "openwebui_rag_mcp_upload" in writes.RESERVED_METADATA_KEYS


async def test_a_deferred_record_outlives_its_write_renewed_until_confirmed(tmp_path: Path) -> None:
    """An attach read back later (before 0.6.42): the record stays alive after the write, renewed while the process
    lives (a kill leaves it to recovery once its time runs out), until the read-back drops it or hands it over."""
    clock = [1_000_000.0]
    inflight = Inflight(FileJournal(tmp_path / "inflight"), alive_seconds=0.06, clock=lambda: clock[0])
    for file_id in ("file-1", "file-2"):
        async with inflight.tracking(OWNER, "kb", f"{file_id}.md", b"x", marked=False, answer_within=60) as tracked:
            await tracked.uploaded(file_id)
            tracked.attach_answered()
            tracked.defer()
    assert inflight.deferred() == ["file-1", "file-2"]
    clock[0] += 1.0  # far past the first alive_until: only a renewal keeps them alive
    for _ in range(500):  # a renewal every 0.02 s; up to 10 s on a busy machine
        if not any(r.writer_gone(clock[0]) for r in await records(inflight)):
            break
        await asyncio.sleep(0.02)
    assert [r.writer_gone(clock[0]) for r in await records(inflight)] == [False, False]
    assert await inflight.gone(OWNER) == []

    await inflight.confirmed("file-1", settled=True)  # listed: nothing left to find
    await inflight.confirmed("file-2", settled=False)  # not known: recovery's, at once
    assert inflight.deferred() == []
    (left,) = await records(inflight)
    assert left.file_id == "file-2"
    assert [r.file_id for r in await inflight.gone(OWNER)] == ["file-2"]
    await inflight.aclose()


async def test_an_upload_that_links_itself_records_when_its_writer_gives_up_on_its_processing(tmp_path: Path) -> None:
    """`process_by`: its start plus OPENWEBUI_TIMEOUT and OPENWEBUI_PROCESS_TIMEOUT as its writer had them, so a later
    run with other settings still knows them."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    async with inflight.tracking(
        OWNER, "kb", "a.md", b"x", marked=True, answer_within=60, links_itself=True, process_within=600
    ) as tracked:
        record = tracked.record
    assert record.process_by == 1_000_000.0 + 60 + 600
    assert record.waits(1) == Waits(60, 600)  # its writer's own, not the fallback
    assert replace(record, process_by=0.0).waits(10) == Waits(0, 10)  # a record of an earlier version keeps none
    await inflight.aclose()
