"""The journal of uploads in flight: a record before each upload request, the file id once Open WebUI answers,
dropped once the file is attached or removed again; renewed while its writer lives. In Redis with `REDIS_URL`
(every replica sees it), else in files under `$XDG_STATE_HOME/openwebui-rag-mcp/inflight`; keyed by a digest of the
credential, never the credential itself. What a dead writer left is `settle.py`'s."""

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
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Protocol

import anyio

from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.giveup import UPDATE_SECONDS, Waits, given_up_at

log = logging.getLogger(__name__)

ALIVE_SECONDS = 45.0  # a writer that has not renewed its records for this long is gone


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


def this_host() -> str:
    """This machine and pid namespace: a pid means the same process only where all three agree (containers may share
    a host name, and a pid namespace their pids)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{_read('/proc/sys/kernel/random/boot_id')}/{namespace}"


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
    # An upload still unfinished when its record was settled: how the settler found the file (`settle`), and when it
    # first found it so; the same at looks far enough apart is evidence Open WebUI lost it (`giveup`).
    looked: str = ""
    looked_at: float = 0.0
    # When a settler last saw Open WebUI refuse a connection while this upload was unfinished: a restart, which drops
    # its task; kept so that the next settler, which may not see it down, has that evidence too (`giveup`).
    unreachable_at: float = 0.0

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

    def waits(self, fallback_within: float) -> Waits:
        """The waits its writer had (`answer_by`, `process_by`); a record of an earlier version kept no processing
        deadline: then `fallback_within` from its start."""
        if not self.process_by:
            return Waits(0.0, fallback_within)
        return Waits(self.answer_by - self.started, self.process_by - self.answer_by)

    def elsewhere(self) -> bool:
        """Whether its writer ran on another host (whose clock may disagree with this one's)."""
        return self.host != this_host()

    def writer_gone(self, now: float) -> bool:
        if now > self.alive_until:
            return True
        # On this machine a dead writer is known at once: its pid is gone or belongs to another process now.
        return self.host == this_host() and _process_start(self.pid) != self.pid_start


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

    async def attaching(self, waits: Waits) -> None:
        """The attach is about to be sent. Best effort, as `uploaded`."""
        self.record = replace(self.record, attach_by=given_up_at("answer", self._journal.now(), waits))
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
        waits = Waits(answer_within, process_within)
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
            host=this_host(),
            pid=pid,
            pid_start=pid_start,
            marked=marked,
            answer_by=given_up_at("answer", now, waits),
            links_itself=links_itself,
            indexed_after_link=indexed_after_link,
            process_by=given_up_at("processing", given_up_at("answer", now, waits), waits) if links_itself else 0.0,
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

    async def note(self, record: Record) -> None:
        """Write a record back as it is (a settler's look at it), its writer's time left as it was."""
        await self._store.put(record)

    def now(self) -> float:
        return self._clock()

    async def drop(self, record: Record) -> None:
        await self._store.drop(record.owner, record.id)

    async def aclose(self) -> None:
        if self._keeping is not None:  # records still kept stay in the store, renewed no more: recovery's then
            self._keeping.cancel()
            await asyncio.gather(self._keeping, return_exceptions=True)
        await self._store.aclose()
