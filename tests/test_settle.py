"""What recovery does with a dead writer's uploads (`settle.py`): kept where the base holds them, else deleted,
or left while Open WebUI may still process or attach them; previewed for a dry run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from openwebui_rag_mcp import giveup, normalize
from openwebui_rag_mcp import journal as journal_module
from openwebui_rag_mcp import settle as settle_module
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.journal import Record
from openwebui_rag_mcp.settle import ClientUpstream, preview, recover
from tests.conftest import make_settings, mock_transport, new_router
from tests.support.inflight import NO_SETTLE, OWNER, FakeUpstream, abandon, journal, records, unknown_record
from tests.support.writes import (
    KB,
)

pytestmark = pytest.mark.anyio


async def test_a_file_the_base_holds_is_kept(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "file-1")
    upstream = FakeUpstream(listed={"kb": {"file-1"}})
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == []
    assert resolution.kept == "file-1"
    assert "kept" in str(resolution)


async def test_an_upload_that_links_itself_is_left_alone_while_open_webui_processes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting it mid-processing could leave its vectors in the base's collection with no document (Open WebUI 0.11+
    indexes into the base before it links): recovery waits until processing ends, then keeps it or deletes it."""

    inflight = journal(tmp_path)
    for file_id in ("linking", "failing"):
        with pytest.raises(RuntimeError):
            await abandon(inflight, file_id, links_itself=True)
    upstream = FakeUpstream(statuses={"linking": "processing", "failing": "pending"})
    first = await recover(inflight, upstream, OWNER, timings=NO_SETTLE)
    assert upstream.deleted == []
    assert all("still processing" in str(resolution) for resolution in first)
    assert len(await records(inflight)) == 2  # looked at again next time
    upstream.statuses = {"linking": "completed", "failing": "failed"}
    upstream.listed = {"kb": {"linking"}}
    second = await recover(inflight, upstream, OWNER, timings=NO_SETTLE)
    assert upstream.deleted == ["failing"]
    assert upstream.unlinked == [("kb", "failing")]  # with what it may have left in the base's index
    assert {resolution.kept for resolution in second} == {"linking", None}
    assert await records(inflight) == []


async def test_a_file_whose_attach_open_webui_may_still_run_is_left_until_the_attach_was_due(tmp_path: Path) -> None:
    """A writer killed during its attach: Open WebUI goes on with the attach. Deleting the file meanwhile could leave
    the base's vectors of it with no document, and before 0.6.42 the attach would still rewrite the base's list over
    whatever the next run attached: recovery waits until the attach's answer was due, then keeps or deletes."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    for file_id in ("landing", "refused"):
        with pytest.raises(RuntimeError):
            await abandon(inflight, file_id, attach_within=120)
    assert {record.attach_by for record in await records(inflight)} == {clock[0] + 120}
    upstream = FakeUpstream()
    first = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == []
    assert all(resolution.processing and "attach" in str(resolution) for resolution in first), first
    upstream.listed = {"kb": {"landing"}}  # its attach landed; the other's never will (Open WebUI refused it)
    clock[0] += 60
    second = await recover(inflight, upstream, OWNER)
    assert (upstream.deleted, [r.kept for r in second if not r.processing]) == ([], ["landing"])
    clock[0] += 61  # past the attach's due time, not past the margin for the journal's write before it
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += giveup.UPDATE_SECONDS
    (third,) = await recover(inflight, upstream, OWNER)
    assert (upstream.deleted, third.processing) == (["refused"], False)
    assert upstream.unlinked == []  # an upload that named no base: nothing of it is in the base's index
    assert await records(inflight) == []


async def test_an_attach_from_another_host_is_given_the_clock_slack_too(tmp_path: Path) -> None:
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    await inflight._store.put(
        Record("r", OWNER, "kb", "a.md", 5, "0" * 64, clock[0], 0.0, "elsewhere", 1, "1", "f", attach_by=clock[0] + 120)
    )
    upstream = FakeUpstream()
    clock[0] += 120 + giveup.UPDATE_SECONDS + 1
    assert (await recover(inflight, upstream, OWNER))[0].processing  # its clock may be behind this one
    clock[0] += giveup.CLOCK_SLACK_SECONDS
    assert not (await recover(inflight, upstream, OWNER))[0].processing
    assert upstream.deleted == ["f"]


async def test_an_upload_that_links_itself_still_processing_past_its_writers_deadline_is_slow_not_lost(
    tmp_path: Path,
) -> None:
    """Issue 41, item 4: past the time its own writer gave up on its processing, an upload still "processing" may only
    be slow (Open WebUI busy with the base's other uploads): recovery leaves it, look after look, while the base's
    pending list moves; only once it and the list stay the same for its writer's OPENWEBUI_PROCESS_TIMEOUT is it
    taken for lost."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "slow", links_itself=True, process_within=600)
    upstream = FakeUpstream(statuses={"slow": "processing"}, pending_ids={"slow:processing", "other:pending"})
    clock[0] += 60 + 600 + 1
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += 500
    upstream.pending_ids = {"slow:processing", "other:processing"}  # Open WebUI works on the other one
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += 500
    assert (await recover(inflight, upstream, OWNER))[0].processing  # the same for 500 s only
    assert upstream.deleted == []
    clock[0] += 101  # nothing of the base moved for 600 s: its tasks are gone
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert (resolution.processing, resolution.deleted) == (False, ("slow",))
    assert upstream.unlinked == [("kb", "slow")]
    assert await records(inflight) == []


async def test_an_upload_that_changes_between_looks_is_looked_at_anew(tmp_path: Path) -> None:
    """Each change Open WebUI makes to the file (its status, its mark, its text's hash) starts the looks again."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "slow", links_itself=True, process_within=600)
    upstream = FakeUpstream(statuses={"slow": "pending"}, pending_ids={"slow:pending"})
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += 599
    upstream.statuses = {"slow": "processing"}
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += 120
    assert (await recover(inflight, upstream, OWNER))[0].processing  # unchanged for two minutes only
    assert upstream.deleted == []


async def test_without_the_pending_list_no_look_counts(tmp_path: Path) -> None:
    """The base's pending list could not be read: nothing tells whether Open WebUI still works on the base."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "slow", links_itself=True, process_within=600)
    upstream = FakeUpstream(statuses={"slow": "processing"})
    for _ in range(3):
        assert (await recover(inflight, upstream, OWNER))[0].processing
        clock[0] += 10_000
    assert upstream.deleted == []


async def test_an_upload_open_webui_was_down_since_is_lost(tmp_path: Path) -> None:
    """A connection to Open WebUI refused after the upload began: Open WebUI was not running then, and a restart drops
    the uploads it was processing, whose status never changes again. Removed at once, with what it left in the
    base's index; a refusal before the upload began tells nothing."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "stuck", links_itself=True, process_within=600)
    upstream = FakeUpstream(statuses={"stuck": "processing"}, refused_at=clock[0] - 1)
    clock[0] += 5
    assert (await recover(inflight, upstream, OWNER))[0].processing
    upstream.refused_at = clock[0] - 1
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert (resolution.processing, resolution.deleted) == (False, ("stuck",))
    assert upstream.unlinked == [("kb", "stuck")]
    assert await records(inflight) == []


class DownUpstream(FakeUpstream):
    """Open WebUI not answering: every look at a file is refused."""

    async def file_record(self, file_id: str) -> normalize.FileRecord:
        raise ToolFailure("upstream_unavailable", "could not connect to Open WebUI")


async def test_a_refusal_one_settler_saw_is_evidence_for_the_next(tmp_path: Path) -> None:
    """The run that saw Open WebUI down settles its own uploads at its end, but Open WebUI may still be restarting then:
    it notes the refusal in their records, and the next run, which finds Open WebUI up and cannot tell it restarted,
    removes them at once on that evidence (the live test that kills Open WebUI mid-sync left them as strays)."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "stuck", links_itself=True, process_within=600)
    clock[0] += 5
    down = DownUpstream(statuses={"stuck": "processing"}, refused_at=clock[0] - 1)
    (resolution,) = await recover(inflight, down, OWNER)
    assert resolution.deleted == ()
    assert [record.unreachable_at for record in await records(inflight)] == [clock[0] - 1]
    clock[0] += 5
    up = FakeUpstream(statuses={"stuck": "processing"}, pending_ids={"stuck:processing"})
    (resolution,) = await recover(inflight, up, OWNER)
    assert (resolution.processing, resolution.deleted) == (False, ("stuck",))
    assert up.unlinked == [("kb", "stuck")]
    assert await records(inflight) == []


async def test_an_upload_off_the_pending_list_and_unchanged_is_lost(tmp_path: Path) -> None:
    """Still "processing" but off the base's pending list (linked without being indexed, 0.10), and the same with the
    list at looks its writer's OPENWEBUI_PROCESS_TIMEOUT apart: taken for lost."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "stuck", links_itself=True, process_within=600)
    upstream = FakeUpstream(statuses={"stuck": "processing"}, pending_ids=set())
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += 599
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += 2
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert resolution.deleted == ("stuck",)


async def test_a_record_without_its_writers_deadline_waits_the_hour(tmp_path: Path) -> None:
    """A record of an earlier version keeps no `process_by` (nor its writer's OPENWEBUI_PROCESS_TIMEOUT): still
    processing and unchanged, it is taken for lost after ABANDONED_SECONDS of looks."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    await inflight._store.put(
        Record(
            "r",
            OWNER,
            "kb",
            "a.md",
            5,
            "0" * 64,
            clock[0],
            0.0,
            journal_module.this_host(),
            1,
            "1",
            "stuck",
            links_itself=True,
        )
    )
    upstream = FakeUpstream(statuses={"stuck": "processing"}, pending_ids={"stuck:processing"})
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += giveup.ABANDONED_SECONDS - 60
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += 120
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == ["stuck"], resolution
    assert await records(inflight) == []


async def test_a_listed_upload_never_marked_still_waits_the_hour_past_its_writers_deadline(tmp_path: Path) -> None:
    """Open WebUI 0.10 lists a self-linking upload before it indexes it into the base, and never marks it with
    BYPASS_EMBEDDING_AND_RETRIEVAL: a listed document is not taken for lost at its writer's deadline (it is kept
    after the hour; `sync` replaces it sooner, as it has the file to send again)."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "unmarked", links_itself=True, indexed_after_link=True)
    upstream = FakeUpstream(listed={"kb": {"unmarked"}}, collections={"unmarked": "file-unmarked"})
    clock[0] += 600
    assert (await recover(inflight, upstream, OWNER))[0].processing
    assert upstream.deleted == []


async def test_an_upload_linked_before_it_is_indexed_into_the_base_waits_for_the_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open WebUI 0.10 links a self-linking upload, still "completed" from its own collection, before it indexes it
    into the base: until the file is marked as written to the base it is unfinished, not kept. A failure there ends
    it linked and "failed": deleted, which also unlinks it."""
    inflight = journal(tmp_path)
    for file_id in ("indexing", "failed-after-link"):
        with pytest.raises(RuntimeError):
            await abandon(inflight, file_id, links_itself=True, indexed_after_link=True)
    upstream = FakeUpstream(
        listed={"kb": {"indexing", "failed-after-link"}},
        collections={"indexing": "file-indexing", "failed-after-link": "file-failed-after-link"},
    )
    first = await recover(inflight, upstream, OWNER, timings=NO_SETTLE)
    assert [resolution.processing for resolution in first] == [True, True]
    assert upstream.deleted == []
    upstream.collections = {"failed-after-link": "file-failed-after-link"}  # "indexing" now marked with "kb"
    upstream.statuses = {"failed-after-link": "failed"}
    second = await recover(inflight, upstream, OWNER, timings=NO_SETTLE)
    assert upstream.deleted == ["failed-after-link"]
    assert {resolution.kept for resolution in second} == {"indexing", None}
    assert await records(inflight) == []


async def test_a_listed_upload_never_marked_is_kept_after_an_hour(tmp_path: Path) -> None:
    """With BYPASS_EMBEDDING_AND_RETRIEVAL Open WebUI never marks a file: after an hour the listed document is kept,
    not deleted (deleting it would make every later sync upload it again)."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "unmarked", links_itself=True, indexed_after_link=True)
    upstream = FakeUpstream(listed={"kb": {"unmarked"}}, collections={"unmarked": "file-unmarked"})
    assert (await recover(inflight, upstream, OWNER))[0].processing
    clock[0] += giveup.ABANDONED_SECONDS + 60
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert resolution.kept == "unmarked"
    assert upstream.deleted == []
    assert await records(inflight) == []


async def test_a_completed_unlisted_upload_that_is_processing_again_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.11 to 0.12.3 call a self-linked upload "completed" a moment before they index it into the base and link it:
    looked at again after the settle, it is "processing", and not deleted."""
    inflight = journal(tmp_path)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "indexing", links_itself=True)
    reads = iter(["completed", "processing"])

    class Flipping(FakeUpstream):
        async def file_record(self, file_id: str) -> normalize.FileRecord:
            return normalize.FileRecord(file_id, None, next(reads), None, f"file-{file_id}")

    upstream = Flipping()
    (resolution,) = await recover(inflight, upstream, OWNER, timings=NO_SETTLE)
    assert resolution.processing
    assert upstream.deleted == []
    assert len(await records(inflight)) == 1


async def test_an_upload_without_the_base_in_its_metadata_is_deleted_whatever_its_status(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "file-1")
    upstream = FakeUpstream(statuses={"file-1": "processing"})  # never linked by Open WebUI: ours to remove
    await recover(inflight, upstream, OWNER)
    assert upstream.deleted == ["file-1"]


async def test_a_preview_says_what_recovery_would_do_and_does_none_of_it(tmp_path: Path) -> None:
    """A dry run's look at the journal: the same decisions as `recover`, but nothing deleted and no record dropped."""
    inflight = journal(tmp_path)
    for file_id in ("kept", "dropped"):
        with pytest.raises(RuntimeError):
            await abandon(inflight, file_id)
    upstream = FakeUpstream(listed={"kb": {"kept"}})
    previewed = await preview(inflight, upstream, OWNER)
    assert {(r.kept, r.deleted) for r in previewed} == {(None, ("dropped",)), ("kept", ())}
    assert upstream.deleted == []
    assert len(await records(inflight)) == 2
    recovered = await recover(inflight, upstream, OWNER)
    assert {(r.kept, r.deleted) for r in recovered} == {(r.kept, r.deleted) for r in previewed}
    assert upstream.deleted == ["dropped"]
    assert await records(inflight) == []


async def test_an_unknown_file_id_is_found_by_name_size_hash_and_time(tmp_path: Path) -> None:
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, None)
    (record,) = await records(inflight)
    made = int(clock[0]) + 1

    def item(file_id: str, **changes: Any) -> dict[str, Any]:
        base: dict[str, Any] = {
            "id": file_id,
            "filename": "a.md",
            "created_at": made,
            "meta": {"size": 5, "file_hash": record.sha256},
        }
        return base | changes

    upstream = FakeUpstream(
        listed={"kb": {"in-base"}},
        files=[
            item("ours"),
            item("in-base"),  # the same bytes, already in the base: someone's document, kept
            item("older", created_at=made - 3600),  # made long before this upload
            item("other-bytes", meta={"size": 5, "file_hash": "f" * 64}),
            item("other-size", meta={"size": 6}),
        ],
    )
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == ["ours"]
    assert resolution.kept == "in-base"


async def test_a_running_upload_of_the_same_bytes_is_not_taken_for_a_killed_ones(tmp_path: Path) -> None:
    """A killed write's upload, known only by name, size and bytes (0.6.5 keeps no upload metadata), and a running
    write uploading the very same file (a `sync` resuming the killed one), its file made but not yet attached:
    recovery leaves both alone until that write has ended, then settles the killed one's record."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    with pytest.raises(RuntimeError):
        await abandon(inflight, None)
    (dead,) = await records(inflight)
    made = int(clock[0]) + 1
    resumed = {"id": "resumed", "filename": "a.md", "created_at": made, "meta": {"size": 5, "file_hash": dead.sha256}}
    upstream = FakeUpstream(files=[resumed])
    async with inflight.tracking(OWNER, "kb", "a.md", b"hello", marked=False, answer_within=60) as running:
        await running.uploaded("resumed")
        (resolution,) = await recover(inflight, upstream, OWNER)
        assert upstream.deleted == []
        assert "running write is uploading the same file" in str(resolution)
        upstream.listed = {"kb": {"resumed"}}  # attached
        running.settle()
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == []
    assert resolution.kept == "resumed"
    assert await records(inflight) == []


async def test_an_unreadable_base_keeps_the_record(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "file-1")
    (resolution,) = await recover(inflight, FakeUpstream(unreadable=True), OWNER)
    assert resolution.problem
    assert "left" in str(resolution)
    assert len(await records(inflight)) == 1  # tried again next time
    (again,) = await recover(inflight, FakeUpstream(), OWNER)
    assert again.deleted == ("file-1",)
    assert await records(inflight) == []


async def test_records_of_another_credential_are_not_touched(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "file-1", "b" * 64)
    upstream = FakeUpstream()
    assert await recover(inflight, upstream, OWNER) == []
    assert upstream.deleted == []
    assert await inflight.owners() == ["b" * 64]


@pytest.mark.parametrize("auths", ["allowed", "refused"])
async def test_only_the_credentials_own_files_are_offered(auths: str) -> None:
    """An admin's key lists every user's files: only its own count. Open WebUI 0.12+ refuses to tell an API key its
    user; then only files carrying the SHA-256 of their bytes are offered (and held to the upload's bytes)."""
    router = new_router()
    if auths == "allowed":
        router.get("/api/v1/auths/").respond(json={"id": "me", "role": "admin"})
    else:
        router.get("/api/v1/auths/").respond(403, json={"detail": "A human session is required."})
    router.get("/api/v1/files/search").respond(
        json=[
            {"id": "mine", "user_id": "me", "filename": "a.md", "meta": {"file_hash": "0" * 64}},
            {"id": "theirs", "user_id": "you", "filename": "a.md", "meta": {}},
            {"id": "other-name", "user_id": "me", "filename": "a.md.bak", "meta": {"file_hash": "0" * 64}},
        ]
    )
    client = OpenWebUIClient(make_settings(), transport=mock_transport(router))
    try:
        offered = await ClientUpstream(client).files_named("a.md")
    finally:
        await client.aclose()
    assert [item["id"] for item in offered] == ["mine"]
    assert router.calls.last.request.url.params["filename"] == "a.md"


async def test_a_file_deleted_meanwhile_settles_the_record(tmp_path: Path) -> None:
    inflight = journal(tmp_path)
    with pytest.raises(RuntimeError):
        await abandon(inflight, "file-1")
    (resolution,) = await recover(inflight, FakeUpstream(deleted=["file-1"]), OWNER)
    assert resolution.gone
    assert "deleted meanwhile" in str(resolution)
    assert await records(inflight) == []


async def test_a_marked_upload_is_told_from_the_same_bytes_elsewhere(tmp_path: Path) -> None:
    """Where the release keeps upload metadata only the upload carrying the record's own mark is its: a file of the
    same name and bytes made meanwhile for another base (or by anyone) is never deleted."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    record = unknown_record(clock, marked=True)
    await inflight._store.put(record)
    made = int(clock[0]) + 1

    def same(file_id: str, data: dict[str, str]) -> dict[str, Any]:
        meta: dict[str, Any] = {"size": 5, "file_hash": "0" * 64, "data": data}
        return {"id": file_id, "filename": "a.md", "created_at": made, "meta": meta}

    upstream = FakeUpstream(
        files=[
            same("for-base-b", {"openwebui_rag_mcp_upload": "other-record"}),
            same("by-hand", {}),
            same("ours", {"openwebui_rag_mcp_upload": "r9"}),
        ]
    )
    clock[0] += 3600
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == ["ours"], resolution


async def test_an_upload_that_may_still_land_is_looked_at_later(tmp_path: Path) -> None:
    """Killed during the upload request, found nowhere yet: Open WebUI may still be storing it, so the record stays
    until the upload's answer was due (plus the clock slack), and a file that landed by then is removed."""
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    await inflight._store.put(unknown_record(clock, marked=False))
    upstream = FakeUpstream()
    (early,) = await recover(inflight, upstream, OWNER)
    assert early.problem is not None
    assert "still be landing" in early.problem
    assert len(await records(inflight)) == 1
    upstream.files.append(
        {
            "id": "landed",
            "filename": "a.md",
            "created_at": int(clock[0]) + 30,
            "meta": {"size": 5, "file_hash": "0" * 64},
        }
    )
    clock[0] += 30
    (later,) = await recover(inflight, upstream, OWNER)
    assert later.deleted == ("landed",)
    assert await records(inflight) == []


async def test_an_unmarked_file_made_long_after_the_upload_was_due_is_not_its(tmp_path: Path) -> None:
    clock = [1_000_000.0]
    inflight = journal(tmp_path, clock)
    await inflight._store.put(unknown_record(clock, marked=False))
    late = {"id": "later", "filename": "a.md", "created_at": int(clock[0]) + 3600, "meta": {"size": 5}}
    upstream = FakeUpstream(files=[late])
    clock[0] += 7200
    (resolution,) = await recover(inflight, upstream, OWNER)
    assert upstream.deleted == []
    assert "no file was made" in str(resolution)


async def test_an_unlinked_upload_is_attached_and_taken_out_so_its_vectors_go_too() -> None:
    """Open WebUI 0.11+ indexes an upload that links itself into the base before it links it: one a restart cut short
    in between left its text in the base's index under no document. Deleting the file would leave that text (and the
    note sent again refused as a duplicate); attached and taken out again, its vectors go with it, and so does the
    file."""
    router = new_router()
    added = router.post(f"/api/v1/knowledge/{KB}/file/add").respond(json={"id": KB, "files": []})
    removed = router.post(f"/api/v1/knowledge/{KB}/file/remove").respond(json={"id": KB, "files": []})
    deleted = router.delete("/api/v1/files/f-lost").respond(404, json={"detail": "not found"})
    client = OpenWebUIClient(make_settings(), transport=mock_transport(router))
    try:
        await settle_module.remove_unlinked(client, KB, "f-lost")
    finally:
        await client.aclose()
    assert json.loads(added.calls.last.request.content) == {"file_id": "f-lost"}
    assert json.loads(removed.calls.last.request.content) == {"file_id": "f-lost"}
    assert removed.calls.last.request.url.params["delete_file"] == "true"
    assert deleted.called  # a release whose `file/remove` keeps the file: deleted after it (here it was gone)
    order = [call.request.url.path for call in router.calls]
    assert order.index(f"/api/v1/knowledge/{KB}/file/add") < order.index(f"/api/v1/knowledge/{KB}/file/remove")


@pytest.mark.parametrize(
    "refusal",
    [
        {"detail": "400: The content provided is empty. Please ensure that there is text or data present."},
        {"detail": "400: Duplicate content detected. Please provide unique content to proceed."},
    ],
)
async def test_an_unlinked_upload_whose_attach_is_refused_is_deleted_as_it_is(refusal: dict[str, str]) -> None:
    """No text was ever extracted (killed before), or the base holds its text under another document: nothing of it
    is linked, and the file is deleted."""
    router = new_router()
    router.post(f"/api/v1/knowledge/{KB}/file/add").respond(400, json=refusal)
    removed = router.post(f"/api/v1/knowledge/{KB}/file/remove").respond(json={"id": KB, "files": []})
    deleted = router.delete("/api/v1/files/f-lost").respond(json=True)
    client = OpenWebUIClient(make_settings(), transport=mock_transport(router))
    try:
        await settle_module.remove_unlinked(client, KB, "f-lost")
    finally:
        await client.aclose()
    assert deleted.called
    assert not removed.called


async def test_an_unlinked_upload_whose_attach_goes_unanswered_is_left() -> None:
    """Open WebUI may still run an attach whose answer never came: the file is neither deleted nor taken out (the base
    may list it, a complete document; recovery looks again)."""
    router = new_router()
    router.post(f"/api/v1/knowledge/{KB}/file/add").mock(side_effect=httpx.ReadTimeout("slow"))
    removed = router.post(f"/api/v1/knowledge/{KB}/file/remove").respond(json={"id": KB, "files": []})
    deleted = router.delete("/api/v1/files/f-lost").respond(json=True)
    client = OpenWebUIClient(make_settings(), transport=mock_transport(router))
    try:
        with pytest.raises(ToolFailure) as raised:
            await settle_module.remove_unlinked(client, KB, "f-lost")
    finally:
        await client.aclose()
    assert raised.value.code == "timeout"
    assert not deleted.called
    assert not removed.called
