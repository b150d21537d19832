"""Settling what a dead writer left in the journal of uploads in flight: a file the base holds is kept, one in no
base is deleted (an upload that named its base with what it left in the base's search index, `remove_unlinked`),
one Open WebUI may still be working on is looked at later; `preview` says the same without doing it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import Timings
from openwebui_rag_mcp.errors import ToolFailure, unanswered
from openwebui_rag_mcp.giveup import ABANDONED_SECONDS, CLOCK_SLACK_SECONDS, Evidence, given_up_at
from openwebui_rag_mcp.journal import Inflight, Record
from openwebui_rag_mcp.normalize import UPLOAD_MARK  # the record's id in the upload metadata


class Upstream(Protocol):
    """What recovery asks Open WebUI (the client, or a fake in tests)."""

    async def base_lists(self, knowledge_id: str, file_id: str) -> bool | None: ...

    async def files_named(self, filename: str) -> list[Mapping[str, Any]]: ...

    async def delete_file(self, file_id: str) -> object: ...

    async def file_record(self, file_id: str) -> normalize.FileRecord: ...

    async def remove_unlinked(self, knowledge_id: str, file_id: str) -> None: ...

    async def pending(self, knowledge_id: str) -> set[str] | None:
        """The base's pending list (uploads naming it, unfinished, not linked), each as `id:status`; None when it
        cannot be read."""
        ...

    def unreachable_at(self) -> float | None:
        """When a connection to Open WebUI was last refused (seconds since the epoch)."""
        ...


# Processing statuses of a file Open WebUI is still working on (`processing` since 0.11).
_STILL_PROCESSING = frozenset({"pending", "processing"})


@dataclass(frozen=True, slots=True)
class Resolution:
    record: Record
    deleted: tuple[str, ...]  # file ids removed
    kept: str | None  # the file id the base holds: the write had completed
    problem: str | None = None  # why the record stays
    gone: bool = False  # its file was deleted meanwhile
    # the record stays because Open WebUI is still processing an upload that links itself, or may still run its attach
    processing: bool = False
    # ... though it shows Open WebUI lost it: listed (0.10 links first), so kept here; `sync` replaces it
    lost: bool = False

    def __str__(self) -> str:
        what = f"{self.record.filename!r} for knowledge base {self.record.knowledge_id}"
        if self.problem:
            return f"left {what}: {self.problem}"
        if self.kept:
            return f"kept {what}: the base holds file {self.kept} (the write had completed)"
        if self.deleted:
            return f"removed {what}: file(s) {', '.join(self.deleted)} were in no base"
        if self.gone:
            return f"nothing left of {what}: its file {self.record.file_id} was deleted meanwhile"
        return f"nothing left of {what}: no file was made"


Hold = Callable[[str], AbstractAsyncContextManager[object]]
_DEFAULT_TIMINGS = Timings()


async def resolve(
    inflight: Inflight,
    upstream: Upstream,
    record: Record,
    hold: Hold | None = None,
    timings: Timings = _DEFAULT_TIMINGS,
) -> Resolution:
    """Settle one record whose writer is gone; the record is dropped unless something could not be told. Under the
    base's write lock (`hold`), so no write attaches the file between the look at the base and the deletion."""
    async with hold(record.knowledge_id) if hold is not None else contextlib.nullcontext():
        return await _resolve(inflight, upstream, record, timings)


async def _resolve(
    inflight: Inflight, upstream: Upstream, record: Record, timings: Timings, *, dry: bool = False
) -> Resolution:
    """`dry`: decide as ever, but delete nothing and drop no record (the resolution says what would be done)."""
    try:
        candidates: list[str | None] = [record.file_id]
        if record.file_id is None and not record.marked and await _same_bytes_in_flight(inflight, record):
            # Its name, size and bytes are all that tell its file, and a live write is uploading the very same (a
            # `sync` resuming a killed one): that write's file, not yet attached, would pass for this one's.
            why = "a running write is uploading the same file; looked at after it"
            return Resolution(record, (), None, why)
        if record.file_id is None:
            named = await upstream.files_named(record.filename)
            candidates = [_file_id(item) for item in named if _made_by(item, record)]
            if not candidates and inflight.now() < record.answer_by + CLOCK_SLACK_SECONDS:
                # Open WebUI may still be storing it (0.6.5 extracts the text during the upload request).
                return Resolution(record, (), None, "its upload may still be landing in Open WebUI; looked at later")
        deleted: list[str] = []
        kept: str | None = None
        for file_id in filter(None, candidates):
            state = await upstream.file_record(file_id) if record.links_itself else None
            status = state.status if state is not None else None
            listed: bool | None = None
            unfinished = status in _STILL_PROCESSING
            if (
                status == "completed"
                and record.indexed_after_link
                and state
                and state.collection != record.knowledge_id
            ):
                listed = await upstream.base_lists(record.knowledge_id, file_id)
                unfinished = listed is True  # linked, its vectors not yet written to the base (0.10)
            lost_at = evidence_at = math.inf
            if unfinished and state is not None:
                # Taken for lost (and removed below) only on evidence that Open WebUI lost it, never as slow.
                record, seen = await _looked_at(inflight, upstream, record, state, listed, dry=dry)
                lost_at = given_up_at(
                    "lost",
                    record.started,
                    record.waits(ABANDONED_SECONDS),
                    elsewhere=record.elsewhere(),
                    listed=bool(listed),
                    seen=seen,
                )
                evidence_at = given_up_at("lost", record.started, record.waits(ABANDONED_SECONDS), seen=seen)
            if unfinished and inflight.now() <= lost_at:
                why = "Open WebUI is still processing its upload, which links itself to the base; looked at later"
                lost = inflight.now() > evidence_at
                return Resolution(record, tuple(deleted), kept, why, processing=True, lost=lost)
            if listed is None:
                listed = await upstream.base_lists(record.knowledge_id, file_id)
            attach_lost_at = given_up_at("attach", record.attach_by, record.waits(0.0), elsewhere=record.elsewhere())
            if listed is False and inflight.now() < attach_lost_at:
                # Deleting it now could leave the base's vectors of it with no document, and before 0.6.42 its attach
                # would then rewrite the base's list over whatever was attached since.
                why = "its attach was sent and Open WebUI may still be running it; looked at later"
                return Resolution(record, tuple(deleted), kept, why, processing=True)
            if listed is False and status == "completed":
                await asyncio.sleep(timings.link_settle)
                # 0.11 to 0.12.3 call it "completed" a moment before they index it into the base: looked at again.
                if (await upstream.file_record(file_id)).status in _STILL_PROCESSING:
                    why = "Open WebUI is still processing its upload, which links itself to the base; looked at later"
                    return Resolution(record, tuple(deleted), kept, why, processing=True)
                listed = await upstream.base_lists(record.knowledge_id, file_id)
            if listed is None:
                return Resolution(record, tuple(deleted), kept, "whether the base holds the file could not be read")
            # A listed upload that failed (0.10 links before indexing into the base): deleting the file unlinks it.
            # One still unmarked after an hour is kept: with BYPASS_EMBEDDING_AND_RETRIEVAL Open WebUI never marks.
            if listed and status != "failed":
                kept = file_id
                continue
            if not dry and record.links_itself:
                await upstream.remove_unlinked(record.knowledge_id, file_id)
            elif not dry:
                await upstream.delete_file(file_id)
            deleted.append(file_id)
    except ToolFailure as failure:
        if failure.code == "not_found" and record.file_id is not None:  # deleted meanwhile: nothing is left
            if not dry:
                await inflight.drop(record)
            return Resolution(record, (), None, gone=True)
        if failure.code == "upstream_unavailable" and not dry:
            await _note_unreachable(inflight, upstream, record)
        return Resolution(record, (), None, f"{failure.code}: {failure.message}")
    if not dry:
        await inflight.drop(record)
    return Resolution(record, tuple(deleted), kept)


async def _looked_at(
    inflight: Inflight,
    upstream: Upstream,
    record: Record,
    state: normalize.FileRecord,
    listed: bool | None,
    *,
    dry: bool,
) -> tuple[Record, Evidence]:
    """What this look at an unfinished upload shows (`giveup.Evidence`); the record notes how the file and the base's
    pending list were found and since when, so that a later look can tell them unchanged."""
    now = inflight.now()
    pending = await upstream.pending(record.knowledge_id)
    if pending is None:  # the list could not be read: no look counts
        return record, Evidence(_unreachable(upstream, record), None)
    listing = hashlib.sha256("\n".join(sorted(pending)).encode()).hexdigest()[:16]
    looked = f"{state.status}|{state.collection}|{state.hash}|{listed}|{listing}"
    if record.looked != looked:
        record = replace(record, looked=looked, looked_at=now)
        if not dry:
            await inflight.note(record)
    return record, Evidence(_unreachable(upstream, record), record.looked_at)


def _unreachable(upstream: Upstream, record: Record) -> float | None:
    """The latest refused connection seen of Open WebUI: by this settler, or noted in the record by an earlier one."""
    seen = max(upstream.unreachable_at() or 0.0, record.unreachable_at)
    return seen or None


async def _note_unreachable(inflight: Inflight, upstream: Upstream, record: Record) -> None:
    """A settler that could not reach Open WebUI notes when, so the next one (another run, which may find it up again
    and cannot tell it restarted) has that evidence of a restart too."""
    seen = upstream.unreachable_at()
    if seen is None or seen <= record.unreachable_at:
        return
    with contextlib.suppress(Exception):  # a journal that does not answer keeps the record as it was
        await inflight.note(replace(record, unreachable_at=seen))


async def _same_bytes_in_flight(inflight: Inflight, record: Record) -> bool:
    """Whether a running write of the same credential is uploading a file of the record's name and bytes."""
    now = inflight.now()
    return any(
        other.id != record.id
        and not other.writer_gone(now)
        and (other.filename, other.size, other.sha256) == (record.filename, record.size, record.sha256)
        for other in await inflight.records(record.owner)
    )


def _status(item: Mapping[str, Any]) -> object:
    data = item.get("data")
    return data.get("status") if isinstance(data, Mapping) else None


def _file_id(item: Mapping[str, Any]) -> str | None:
    value = item.get("id")
    return value if isinstance(value, str) and value else None


def _meta(item: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = item.get("meta")
    return meta if isinstance(meta, dict) else {}


def _made_by(item: Mapping[str, Any], record: Record) -> bool:
    """Whether a file of the record's name is the record's upload. Where the release keeps upload metadata, only the
    upload carrying the record's own mark is; before (0.6.5), one of the same size and bytes (where Open WebUI keeps
    them) made while the upload's answer was due, give or take the clock slack."""
    meta = _meta(item)
    if item.get("filename") != record.filename:
        return False
    data = meta.get("data")
    mark = data.get(UPLOAD_MARK) if isinstance(data, dict) else None
    if record.marked or mark is not None:
        return mark == record.id
    size, file_hash = meta.get("size"), meta.get("file_hash")
    if isinstance(size, int) and size != record.size:
        return False
    if isinstance(file_hash, str) and file_hash != record.sha256:
        return False
    created = item.get("created_at")
    latest = max(record.answer_by, record.started) + CLOCK_SLACK_SECONDS
    return isinstance(created, int | float) and record.started - CLOCK_SLACK_SECONDS <= created <= latest


async def recover(
    inflight: Inflight, upstream: Upstream, owner: str, hold: Hold | None = None, timings: Timings = _DEFAULT_TIMINGS
) -> list[Resolution]:
    """Resolve every record of `owner` whose writer is gone (each under its base's write lock, with `hold`)."""
    return [await resolve(inflight, upstream, record, hold, timings) for record in await inflight.gone(owner)]


async def preview(
    inflight: Inflight, upstream: Upstream, owner: str, timings: Timings = _DEFAULT_TIMINGS
) -> list[Resolution]:
    """What `recover` would do now with every record of `owner` whose writer is gone, doing none of it (a dry run)."""
    return [await _resolve(inflight, upstream, record, timings, dry=True) for record in await inflight.gone(owner)]


class ClientUpstream:
    """`Upstream` through the Open WebUI client, with the current credential."""

    def __init__(self, client: OpenWebUIClient) -> None:
        self._client = client

    async def base_lists(self, knowledge_id: str, file_id: str) -> bool | None:
        try:
            files, _ = await self._client.knowledge_files(knowledge_id, None)
        except ToolFailure as failure:
            return False if failure.code == "not_found" else None  # a base deleted meanwhile holds nothing
        return any(record.file_id == file_id for record in normalize.file_records(files))

    async def files_named(self, filename: str) -> list[Mapping[str, Any]]:
        """The credential's own files of that name: an admin lists everyone's, and another user's file is never
        touched. Open WebUI 0.12+ does not tell an API key its own user (`/auths/` needs a signed-in session): then
        only files that carry the SHA-256 of their bytes are offered, so `_made_by` holds them to the upload's very
        bytes, name and time."""
        try:
            mine: str | None = await self._client.user_id()
        except ToolFailure as failure:
            if failure.code not in ("forbidden", "auth"):
                raise
            mine = None
        named = await self._client.files_named(filename)
        if mine is None:
            return [item for item in named if isinstance(_meta(item).get("file_hash"), str)]
        return [item for item in named if item.get("user_id") == mine]

    async def delete_file(self, file_id: str) -> object:
        return await self._client.delete_file(file_id)

    async def file_record(self, file_id: str) -> normalize.FileRecord:
        return normalize.file_record(await self._client.file(file_id))

    async def remove_unlinked(self, knowledge_id: str, file_id: str) -> None:
        await remove_unlinked(self._client, knowledge_id, file_id)

    async def pending(self, knowledge_id: str) -> set[str] | None:
        try:
            items = await self._client.pending_files(knowledge_id)
        except ToolFailure:
            return None
        return {f"{item.get('id')}:{_status(item)}" for item in items}

    def unreachable_at(self) -> float | None:
        return self._client.unreachable_at


async def remove_unlinked(client: OpenWebUIClient, knowledge_id: str, file_id: str) -> None:
    """Delete the file of an upload that named its base (to link itself there) and that the base does not list, with
    whatever of it Open WebUI wrote into the base's search index. Open WebUI 0.11+ indexes such an upload into the
    base before it links it: one cut short between the two (a restart) left its text there under no document, and
    deleting the file leaves that text, which Open WebUI's duplicate check then refuses from any other file (the same
    note sent again). Attached (`file/add`, whose check lets a file's own vectors pass) and taken out again
    (`file/remove`, which drops the base's vectors by the file's id and by its text's hash), it leaves nothing. An
    attach Open WebUI refuses (no text was ever extracted, the base holds the text under another document, a release
    whose check has no such exemption) linked nothing: the file is deleted as it is. Raises when Open WebUI's answer
    never came (the attach may still run: the base may then list the file, a complete document)."""
    try:
        await client.add_file(knowledge_id, file_id)
    except ToolFailure as failure:
        if unanswered(failure) or not failure.request_sent or failure.code == "rate_limited":
            raise
        await client.delete_file(file_id)
        return
    await client.remove_file(knowledge_id, file_id, delete_file=True)
    try:  # a release whose `file/remove` keeps the file
        await client.delete_file(file_id)
    except ToolFailure as failure:
        if failure.code != "not_found":
            raise
