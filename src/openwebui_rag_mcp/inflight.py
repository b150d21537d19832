"""Uploads in flight: a journal that lets a later start, a later write or `openwebui-rag-mcp recover` find what a
killed process left behind.

An upload makes a file in Open WebUI before the file is attached to its base. A process killed in between (SIGKILL,
the OOM killer, a lost container) cannot remove it again, and nothing in Open WebUI tells that file from any other.
So a write records its intent before its upload request (the base, the file name, the size and SHA-256 of the bytes,
when), adds the file id as soon as Open WebUI answers, and drops the record once the file is attached or removed
again. While it runs, the writer renews the record's `alive_until`; a record whose writer is gone (its time ran out,
or its process on this machine no longer exists) is resolved by whoever next holds the same credential:

- the file id is known and the base lists the file: the write completed, only its answer was lost; nothing to do;
- the file id is known and the base does not list it: the file is deleted; but an upload that links itself to its
  base (`sync` on Open WebUI 0.9.6+) is left alone while Open WebUI is still processing it (its status "pending" or
  "processing"; on 0.10 also "completed" and listed without the base's id as its `meta.collection_name`, as 0.10
  links it before indexing it into the base; 0.11 to 0.12.3 say "completed" a moment early, so an unlisted one is
  looked at again), since deleting it then could leave its vectors in the base's collection with no document: it is
  settled once processing has ended (listed: kept; failed, or "completed" and not linked: deleted, which on 0.10 also
  unlinks it), or, still "pending" or "processing" past the time its own writer would have given up on it
  (`_given_up_at`), taken for a task Open WebUI lost in a restart and deleted (a listed one waits ABANDONED_SECONDS
  and is kept); an unlisted one goes with what it left in the base's search index
  (`remove_unlinked`); and a file whose attach was sent is left alone until that attach's answer was due, since Open
  WebUI goes on with it (and before 0.6.42 rewrites the base's whole list);
- the file id is unknown (killed during the upload request): the credential's own files of that name, size and hash,
  made since the record began and not in the record's base, are deleted.

Records live in Redis when `REDIS_URL` is set (so any replica resolves another's), otherwise in files under
`$XDG_STATE_HOME/openwebui-rag-mcp/inflight` (or `~/.local/state/...`). A record is keyed by a digest of the
credential, never the credential itself, and only a holder of that credential resolves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

import anyio
import httpx

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure, unanswered
from openwebui_rag_mcp.normalize import UPLOAD_MARK  # the record's id in the upload metadata

log = logging.getLogger(__name__)

ALIVE_SECONDS = 45.0  # a writer that has not renewed its records for this long is gone
UPDATE_SECONDS = 5.0  # the most the end of a write waits for the journal
# Files of the credential made this long before a record's start still count as its upload (clock skew between this
# machine and Open WebUI's).
CLOCK_SLACK_SECONDS = 120.0


def _process_start(pid: int) -> str:
    """The start time of a process on this machine (field 22 of /proc/PID/stat), to tell a reused pid; "" if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _host() -> str:
    """This machine and pid namespace: a pid means the same process only where all three agree (containers may share
    a host name, and a pid namespace their pids)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{_read('/proc/sys/kernel/random/boot_id')}/{namespace}"


_HOST = _host
_ME: tuple[int, str] | None = None


def _me() -> tuple[int, str]:
    global _ME
    if _ME is None or _ME[0] != os.getpid():
        _ME = (os.getpid(), _process_start(os.getpid()))
    return _ME


@dataclass(frozen=True, slots=True)
class Record:
    id: str
    owner: str  # a digest of the credential that made the upload
    knowledge_id: str
    filename: str
    size: int
    sha256: str
    started: float  # seconds since the epoch
    alive_until: float
    host: str
    pid: int
    pid_start: str
    file_id: str | None = None
    marked: bool = False  # the upload carries UPLOAD_MARK = id in its metadata (the release keeps upload metadata)
    answer_by: float = 0.0  # when the upload's answer was due at the latest (its start plus OPENWEBUI_TIMEOUT)
    links_itself: bool = False  # the upload carries the base's id: Open WebUI links it once it has processed it
    # Open WebUI lists it in the base before the base's vectors are written (0.10): its mark says when they are
    indexed_after_link: bool = False
    # When an attach (`file/add`) was sent, the time its answer was due at the latest: Open WebUI goes on with an attach
    # whose writer died, and may list the file, or (before 0.6.42) rewrite the base's whole list, until then.
    attach_by: float = 0.0
    # An upload that links itself: when its writer would have given up waiting for Open WebUI to process it (its start
    # plus OPENWEBUI_TIMEOUT and OPENWEBUI_PROCESS_TIMEOUT, as the writer had them); 0 from an earlier version.
    process_by: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Record | None:
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                return None
            known = {field.name for field in fields(cls)}  # a later version's fields are left to it
            return cls(**{name: value for name, value in data.items() if name in known})
        except (TypeError, ValueError):
            return None

    def processing_due(self, fallback_within: float) -> float:
        """When its writer would have given up waiting for its processing (`process_by`; for a record of an earlier
        version, its start plus `fallback_within`), with clock slack for a writer on another host."""
        due = self.process_by or self.started + fallback_within
        return due + (0.0 if self.host == _HOST() else CLOCK_SLACK_SECONDS)

    def past_processing(self, now: float, fallback_within: float) -> bool:
        """Whether `now` is past `processing_due`."""
        return now > self.processing_due(fallback_within)

    def writer_gone(self, now: float) -> bool:
        if now > self.alive_until:
            return True
        # On this machine a dead writer is known at once: its pid is gone or belongs to another process now.
        return self.host == _HOST() and _process_start(self.pid) != self.pid_start


class JournalStore(Protocol):
    async def put(self, record: Record) -> None: ...

    async def drop(self, owner: str, record_id: str) -> None: ...

    async def records(self, owner: str) -> list[Record]: ...

    async def owners(self) -> list[str]: ...

    async def aclose(self) -> None: ...


def make_journal(settings: Settings) -> Inflight:
    """The journal the server's writes use: in Redis with REDIS_URL (every replica sees it), else on this machine."""
    if settings.redis_url is not None:
        return Inflight(RedisJournal(settings.redis_url.get_secret_value()))
    return Inflight(FileJournal(default_directory()))


def owner_of(settings: Settings, credential_key: str) -> str:
    """The journal's name for a credential at this Open WebUI: a record is resolved only where its files are."""
    return hashlib.sha256(f"{settings.url}\n{credential_key}".encode()).hexdigest()


def default_directory() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "openwebui-rag-mcp" / "inflight"


class FileJournal:
    """Records as small JSON files, `<directory>/<owner>/<id>.json`, written whole (a new file renamed into place)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def _path(self, owner: str, record_id: str) -> Path:
        return self._directory / owner / f"{record_id}.json"

    async def put(self, record: Record) -> None:
        path = self._path(record.owner, record.id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(record.to_json(), encoding="utf-8")
        temporary.replace(path)

    async def drop(self, owner: str, record_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(owner, record_id).unlink()

    async def records(self, owner: str) -> list[Record]:
        found: list[Record] = []
        for path in sorted((self._directory / owner).glob("*.json")):
            with contextlib.suppress(OSError):
                record = Record.from_json(path.read_bytes())
                if record is not None:
                    found.append(record)
        return found

    async def owners(self) -> list[str]:
        if not self._directory.is_dir():
            return []
        return sorted(path.name for path in self._directory.iterdir() if path.is_dir() and any(path.glob("*.json")))

    async def aclose(self) -> None:
        return None


class RedisJournal:
    """Records in one Redis hash per credential digest, shared by every replica."""

    def __init__(self, url: str, prefix: str = "openwebui-rag-mcp:inflight:") -> None:
        import redis.asyncio as redis_asyncio

        self._redis = redis_asyncio.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._prefix = prefix

    async def put(self, record: Record) -> None:
        await self._redis.hset(self._prefix + record.owner, record.id, record.to_json())

    async def drop(self, owner: str, record_id: str) -> None:
        await self._redis.hdel(self._prefix + owner, record_id)

    async def records(self, owner: str) -> list[Record]:
        raw: Mapping[bytes | str, bytes | str] = await self._redis.hgetall(self._prefix + owner)
        return [record for value in raw.values() if (record := Record.from_json(value)) is not None]

    async def owners(self) -> list[str]:
        keys = [key async for key in self._redis.scan_iter(match=self._prefix + "*")]
        names = [key.decode() if isinstance(key, bytes) else str(key) for key in keys]
        return sorted(name[len(self._prefix) :] for name in names)

    async def aclose(self) -> None:
        await self._redis.aclose()


class Tracked:
    """One upload's record while its write runs."""

    def __init__(self, journal: Inflight, record: Record) -> None:
        self._journal = journal
        self.record = record
        self.settled = False
        self.deferred = False

    async def uploaded(self, file_id: str) -> None:
        """Open WebUI answered the upload: the record names the file from now on. A journal that cannot be written
        now does not stop the write (it must end with the file attached or removed): recovery then finds the file by
        its name."""
        self.record = replace(self.record, file_id=file_id)
        try:
            await self._journal.save(self.record)
        except Exception as error:
            log.warning("could not add file %s to the journal of uploads in flight (%s)", file_id, type(error).__name__)

    async def attaching(self, answer_within: float) -> None:
        """The attach is about to be sent (`answer_within`: OPENWEBUI_TIMEOUT). Best effort, as `uploaded`."""
        self.record = replace(self.record, attach_by=self._journal.now() + answer_within)
        try:
            await self._journal.save(self.record)
        except Exception as error:
            log.warning(
                "could not note the attach of %s in the journal (%s)", self.record.file_id, type(error).__name__
            )

    def attach_answered(self) -> None:
        """Open WebUI answered the attach: it runs it no more, so recovery need not wait for it (an unsettled record
        is saved with this when the write ends)."""
        self.record = replace(self.record, attach_by=0.0)

    def settle(self) -> None:
        """The file is attached, or removed again, or there is none: nothing is left to find."""
        self.settled = True

    def defer(self) -> None:
        """The attach was acknowledged but is read back later by the caller (before 0.6.42 a concurrent change can
        drop it): the record outlives the write, kept alive until the caller settles it (`Inflight.confirmed`)."""
        self.deferred = True


class Inflight:
    """The journal of uploads in flight, over a `JournalStore`."""

    def __init__(
        self,
        store: JournalStore,
        *,
        alive_seconds: float = ALIVE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._alive = alive_seconds
        self._clock = clock
        # Records of ended writes whose attach is still to be read back (`Tracked.defer`), by file id, and the task
        # that renews them while this process lives.
        self._kept: dict[str, Record] = {}
        self._keeping: asyncio.Task[None] | None = None

    async def save(self, record: Record) -> None:
        await self._store.put(replace(record, alive_until=self._clock() + self._alive))

    @asynccontextmanager
    async def tracking(
        self,
        owner: str,
        knowledge_id: str,
        filename: str,
        content: bytes,
        *,
        marked: bool,
        answer_within: float,
        links_itself: bool = False,
        indexed_after_link: bool = False,
        process_within: float = 0.0,
    ) -> AsyncIterator[Tracked]:
        """Record an upload before it is sent; drop the record when the write settled it. A write that ends without
        settling (an error while removing its file again) leaves its record marked gone, for the next recovery.
        `marked`: the upload will carry UPLOAD_MARK with the record's id; `answer_within`: OPENWEBUI_TIMEOUT;
        `process_within`: OPENWEBUI_PROCESS_TIMEOUT, for an upload that links itself."""
        pid, pid_start = _me()
        now = self._clock()
        record = Record(
            id=secrets.token_hex(8),
            owner=owner,
            knowledge_id=knowledge_id,
            filename=filename,
            size=len(content),
            sha256=hashlib.sha256(content).hexdigest(),
            started=now,
            alive_until=now + self._alive,
            host=_HOST(),
            pid=pid,
            pid_start=pid_start,
            marked=marked,
            answer_by=now + answer_within,
            links_itself=links_itself,
            indexed_after_link=indexed_after_link,
            process_by=now + answer_within + process_within if links_itself else 0.0,
        )
        try:
            await self._store.put(record)
        except Exception as error:
            raise ToolFailure(
                "upstream_unavailable",
                f"the journal of uploads in flight could not be written ({type(error).__name__}); nothing was uploaded",
                retryable=True,
                request_sent=False,
                stage="upload",
                outcome="not_applied",
            ) from None
        tracked = Tracked(self, record)
        renewing = asyncio.create_task(self._renew(tracked))
        try:
            yield tracked
        finally:
            # Shielded (a cancelled call ends here too) and bounded: a journal that does not answer keeps the record,
            # whose time then runs out.
            with anyio.CancelScope(shield=True), anyio.move_on_after(UPDATE_SECONDS):
                renewing.cancel()
                await asyncio.gather(renewing, return_exceptions=True)
                try:
                    if tracked.settled:
                        await self._store.drop(owner, record.id)
                    elif tracked.deferred and tracked.record.file_id is not None:
                        await self._keep(tracked.record)
                    else:
                        await self._store.put(replace(tracked.record, alive_until=0.0))
                except Exception as error:  # the record stays; recovery finds it later
                    log.warning("could not update the journal of uploads in flight (%s)", type(error).__name__)

    async def _renew(self, tracked: Tracked) -> None:
        while True:
            await asyncio.sleep(self._alive / 3)
            try:
                await self.save(tracked.record)
            except Exception as error:
                log.warning("could not renew a record of the uploads journal (%s)", type(error).__name__)

    async def _keep(self, record: Record) -> None:
        self._kept[str(record.file_id)] = record
        if self._keeping is None or self._keeping.done():  # first, so that a save that fails is renewed later
            self._keeping = asyncio.create_task(self._renew_kept())
        await self.save(record)

    async def _renew_kept(self) -> None:
        while self._kept:
            await asyncio.sleep(self._alive / 3)
            for file_id, record in list(self._kept.items()):
                if self._kept.get(file_id) is not record:  # confirmed meanwhile: not written back
                    continue
                try:
                    await self.save(record)
                except Exception as error:
                    log.warning("could not renew a record of the uploads journal (%s)", type(error).__name__)
                    break

    def deferred(self) -> list[str]:
        """The file ids whose records are kept for a read-back (`Tracked.defer`) not yet done."""
        return list(self._kept)

    async def confirmed(self, file_id: str, *, settled: bool) -> None:
        """The read-back of a deferred attach is done: `settled` (listed, or its file removed again) drops the record;
        otherwise (the list could not be read, or the file not removed) it is left to recovery at once."""
        record = self._kept.pop(file_id, None)
        if record is None:
            return
        # Bounded as a write's own end is; the record stays, renewed no more, when the journal does not answer:
        # recovery looks at it once its time is out.
        with anyio.move_on_after(UPDATE_SECONDS):
            try:
                if settled:
                    await self._store.drop(record.owner, record.id)
                else:
                    await self._store.put(replace(record, alive_until=0.0))
            except Exception as error:
                log.warning("could not update the journal of uploads in flight (%s)", type(error).__name__)

    async def gone(self, owner: str) -> list[Record]:
        """The records of `owner` whose writer is gone."""
        now = self._clock()
        return [record for record in await self._store.records(owner) if record.writer_gone(now)]

    async def owners(self) -> list[str]:
        return await self._store.owners()

    async def records(self, owner: str) -> list[Record]:
        return await self._store.records(owner)

    def now(self) -> float:
        return self._clock()

    async def drop(self, record: Record) -> None:
        await self._store.drop(record.owner, record.id)

    async def aclose(self) -> None:
        if self._keeping is not None:  # records still kept stay in the store, renewed no more: recovery's then
            self._keeping.cancel()
            await asyncio.gather(self._keeping, return_exceptions=True)
        await self._store.aclose()


class Upstream(Protocol):
    """What recovery asks Open WebUI (the client, or a fake in tests)."""

    async def base_lists(self, knowledge_id: str, file_id: str) -> bool | None: ...

    async def files_named(self, filename: str) -> list[Mapping[str, Any]]: ...

    async def delete_file(self, file_id: str) -> object: ...

    async def file_record(self, file_id: str) -> normalize.FileRecord: ...

    async def remove_unlinked(self, knowledge_id: str, file_id: str) -> None: ...


# Processing statuses of a file Open WebUI is still working on (`processing` since 0.11).
_STILL_PROCESSING = frozenset({"pending", "processing"})
# A file that linked itself and is "completed" is in its base's lists; looked at once more after a moment all the same.
_LINK_SETTLE_SECONDS = 2.0
# An upload that links itself still "pending" or "processing" this long after it began is a background task Open WebUI
# lost (a restart drops them, and the status never changes again): then it is deleted. Only for what keeps no writer's
# deadline of its own (`_given_up_at`).
ABANDONED_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Resolution:
    record: Record
    deleted: tuple[str, ...]  # file ids removed
    kept: str | None  # the file id the base holds: the write had completed
    problem: str | None = None  # why the record stays
    gone: bool = False  # its file was deleted meanwhile
    # the record stays because Open WebUI is still processing an upload that links itself, or may still run its attach
    processing: bool = False

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


async def resolve(inflight: Inflight, upstream: Upstream, record: Record, hold: Hold | None = None) -> Resolution:
    """Settle one record whose writer is gone; the record is dropped unless something could not be told. Under the
    base's write lock (`hold`), so no write attaches the file between the look at the base and the deletion."""
    async with hold(record.knowledge_id) if hold is not None else contextlib.nullcontext():
        return await _resolve(inflight, upstream, record)


async def _resolve(inflight: Inflight, upstream: Upstream, record: Record, *, dry: bool = False) -> Resolution:
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
            if unfinished and inflight.now() <= _given_up_at(record, listed):
                why = "Open WebUI is still processing its upload, which links itself to the base; looked at later"
                return Resolution(record, tuple(deleted), kept, why, processing=True)
            if listed is None:
                listed = await upstream.base_lists(record.knowledge_id, file_id)
            if listed is False and inflight.now() < record.attach_by + _attach_margin(record):
                # Deleting it now could leave the base's vectors of it with no document, and before 0.6.42 its attach
                # would then rewrite the base's list over whatever was attached since.
                why = "its attach was sent and Open WebUI may still be running it; looked at later"
                return Resolution(record, tuple(deleted), kept, why, processing=True)
            if listed is False and status == "completed":
                await asyncio.sleep(_LINK_SETTLE_SECONDS)
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
        return Resolution(record, (), None, f"{failure.code}: {failure.message}")
    if not dry:
        await inflight.drop(record)
    return Resolution(record, tuple(deleted), kept)


def _given_up_at(record: Record, listed: bool | None) -> float:
    """When an upload that links itself and is still unfinished is taken for a task Open WebUI lost in a restart: once
    past the time its own writer would have given up on its processing (as `sync` takes it), or, for a record of an
    earlier version that keeps no such time, ABANDONED_SECONDS after it began. One the base lists (0.10 links before it
    indexes into the base) waits the hour all the same, as with BYPASS_EMBEDDING_AND_RETRIEVAL Open WebUI never marks
    it and it is then kept."""
    if listed:
        return record.started + ABANDONED_SECONDS
    return record.processing_due(ABANDONED_SECONDS)


async def _same_bytes_in_flight(inflight: Inflight, record: Record) -> bool:
    """Whether a running write of the same credential is uploading a file of the record's name and bytes."""
    now = inflight.now()
    return any(
        other.id != record.id
        and not other.writer_gone(now)
        and (other.filename, other.size, other.sha256) == (record.filename, record.size, record.sha256)
        for other in await inflight.records(record.owner)
    )


def _attach_margin(record: Record) -> float:
    """Beyond the attach's due time: the journal write before it was sent, and the clocks of two hosts."""
    return UPDATE_SECONDS + (0.0 if record.host == _HOST() else CLOCK_SLACK_SECONDS)


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


async def recover(inflight: Inflight, upstream: Upstream, owner: str, hold: Hold | None = None) -> list[Resolution]:
    """Resolve every record of `owner` whose writer is gone (each under its base's write lock, with `hold`)."""
    return [await resolve(inflight, upstream, record, hold) for record in await inflight.gone(owner)]


async def preview(inflight: Inflight, upstream: Upstream, owner: str) -> list[Resolution]:
    """What `recover` would do now with every record of `owner` whose writer is gone, doing none of it (a dry run)."""
    return [await _resolve(inflight, upstream, record, dry=True) for record in await inflight.gone(owner)]


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


async def recover_command(
    settings: Settings, say: Callable[[str], None], *, transport: httpx.AsyncBaseTransport | None = None
) -> int:
    """`openwebui-rag-mcp recover`: settle now what dead writers with this key left; 0 when nothing of this key is
    left, 1 when something could not be settled (said why), 5 when the journal cannot be read."""
    from openwebui_rag_mcp.runtime import running_app

    async with running_app(settings, transport=transport, recover_at_start=False) as app:
        assert app.inflight is not None
        owner = app.uploads_owner()
        try:
            resolutions = await recover(app.inflight, ClientUpstream(app.client), owner, app.locks.hold)
            running = await app.inflight.records(owner)
            others = [name for name in await app.inflight.owners() if name != owner]
        except Exception as error:
            say(f"cannot read the journal of uploads in flight ({type(error).__name__}: {error})")
            return 5
    for resolution in resolutions:
        say(str(resolution))
    left = [resolution for resolution in resolutions if resolution.problem]
    busy = [record for record in running if record not in {r.record for r in left}]
    if busy:
        say(f"{len(busy)} upload(s) of this key are in flight in a running process: not touched")
    if others:
        say(f"{len(others)} other key(s) have uploads in flight: only a holder of each key can settle them")
    say(f"done: {len(resolutions) - len(left)} settled, {len(left)} left")
    return 1 if left else 0
