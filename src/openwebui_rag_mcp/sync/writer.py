"""Writing one file of a run into the base: its upload (marked as this folder's), its replacement or rename, a
document's removal, and before 0.6.42 the new files' attaches read back together."""

from __future__ import annotations

import asyncio
import collections
import functools
import hashlib
import mimetypes
import statistics
from dataclasses import dataclass, field

import anyio

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.attach import attached_files, dropped
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.giveup import Waits, given_up_at
from openwebui_rag_mcp.linkwatch import LinkWatch
from openwebui_rag_mcp.localfiles import Refusal, read_under
from openwebui_rag_mcp.sync.folders import Folders
from openwebui_rag_mcp.sync.names import SOURCE_KEY, SYNCED_BY, synced_name
from openwebui_rag_mcp.sync.types import CONCURRENCY, LocalFile, Problem, RemoteFile, Say
from openwebui_rag_mcp.upload import SyncOptions, Upload, upload_to_base

_FIRST_POLL_SHARE = 0.8  # of the median processing time of the run's recent files: most files are done by then


@dataclass
class Writer:
    """How a run writes to the base, and what its writes so far have shown."""

    app: App
    knowledge_id: str
    source: str | None
    say: Say
    folders: Folders = field(default_factory=Folders)
    mirrored: bool = False
    writable_checked: bool = False  # an upload of this run got in: the key may write to the base
    # How long this run's last files took Open WebUI to process: the next is first asked about after most of that.
    processing_seconds: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=16))
    watch: LinkWatch | None = None  # where uploads that link themselves are awaited together
    sending: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(CONCURRENCY))  # turns to upload
    # Before 0.6.42, the acknowledged attaches of this run's new files, read back together once its uploads are done
    # (`confirm_attaches`), and the path of each.
    attach_checks: list[str] = field(default_factory=list)
    uploaded_paths: dict[str, str] = field(default_factory=dict)
    confirmed_at: float | None = None  # when `confirm_some` last read the base back
    # Uploads Open WebUI was still processing when the run gave up waiting (OPENWEBUI_PROCESS_TIMEOUT): file id ->
    # path. Open WebUI links them itself when done; the run settles them at its end (`await_late`).
    late: dict[str, str] = field(default_factory=dict)
    confirming: bool = False

    def __post_init__(self) -> None:
        self.watch = LinkWatch(self.app.client, self.knowledge_id)

    async def confirm_attaches(self) -> list[tuple[str, Problem]]:
        """Before 0.6.42, the files this run added, read back in the base's list once its uploads are done: one read
        for all, later than a read after each attach and so seeing a drop by a concurrent change anywhere in the run.
        A file the list lacks is deleted again; the files whose state is not known when the list cannot be read."""
        if not self.attach_checks:
            return []
        try:
            listed = await attached_files(self.app, self.knowledge_id)
        except ToolFailure as failure:
            problem = Problem.of(failure, "its attach was acknowledged, but the base's list could not be read back: ")
            self.say(
                f"could not read knowledge base {self.knowledge_id} back to confirm the {len(self.attach_checks)} "
                f"file(s) this run added ({failure.code}: {failure.message}); check with knowledge_files"
            )
            for file_id in self.attach_checks:  # the next run's recovery looks at them (kept if listed)
                await self._confirmed(file_id, settled=False)
            return [(self.uploaded_paths[file_id], problem) for file_id in self.attach_checks]
        found = []
        for file_id in self.attach_checks:
            settled = file_id in listed
            if not settled:
                name = self.uploaded_paths[file_id]
                why, settled = await dropped(self.app, self.knowledge_id, file_id)
                problem = Problem.of(why)
                self.say(f"add      {name}: FAILED - {problem}")
                found.append((name, problem))
            await self._confirmed(file_id, settled=settled)
        return found

    async def confirm_some(self) -> None:
        """During a long run, every `Settings.timings.confirm_every`, the base read back for the journal's sake only:
        the records of the deferred attaches it lists are dropped (a kill leaves fewer for recovery, and the journal
        each upload reads stays short). Every new file is still read back at the end, as a later change could drop it
        too."""
        if self.app.inflight is None or self.confirming:
            return
        loop = asyncio.get_running_loop()
        waiting = self.app.inflight.deferred()
        if self.confirmed_at is None:  # the first deferred attach: counted from here
            self.confirmed_at = loop.time()
        if not waiting or loop.time() - self.confirmed_at < self.app.settings.timings.confirm_every:
            return
        self.confirming, self.confirmed_at = True, loop.time()
        try:
            listed = await attached_files(self.app, self.knowledge_id)
        except ToolFailure:
            return  # the end of the run reads it again
        finally:
            self.confirming = False
        for file_id in waiting:
            if file_id in listed:
                await self._confirmed(file_id, settled=True)

    async def _confirmed(self, file_id: str, *, settled: bool) -> None:
        if self.app.inflight is not None:
            await self.app.inflight.confirmed(file_id, settled=settled)

    async def rename(self, file: LocalFile, moved: RemoteFile) -> Problem | None:
        content = await _read_again(file)  # before its old document goes: a file that cannot be read keeps it
        if isinstance(content, Problem):
            return content
        return await self.remove(moved) or await self.put(file, content)

    async def replace(self, file: LocalFile, old: list[RemoteFile]) -> Problem | None:
        """Add the new version, then remove the old ones: an interrupted run leaves an extra old version, never
        none. When the new bytes give the same text as an old version (a PDF saved again), Open WebUI refuses to
        hold that text twice: then that old version goes first."""
        content = await _read_again(file)
        if isinstance(content, Problem):
            return content
        # A new file's attach is read back at the end of the run (before 0.6.42); a new version's at once, so that a
        # dropped one never takes its old version with it.
        problem = await self.put(file, content, check_later=not old)
        holder = next((entry for entry in old if problem and entry.file_id == problem.existing_file_id), None)
        if problem is not None and problem.code == "duplicate_content" and holder is not None:
            problem = await self.remove(holder) or await self.put(file, content)
            old = [entry for entry in old if entry is not holder]
        for entry in old:
            problem = problem or await self.remove(entry)
        return problem

    async def put(self, file: LocalFile, content: bytes, *, check_later: bool = False) -> Problem | None:
        """Upload one file into the base (into its folder, made first where missing, when the base mirrors the
        folder), marked with this folder's source id: in its metadata when mirrored, else in its name (Open WebUI
        0.6.5 keeps no upload metadata). `check_later`: before 0.6.42 its attach is read back with the run's other
        new files once the uploads are done (`confirm_attaches`), not at once."""
        assert self.source is not None  # only a dry run has none, and it writes nothing
        app, knowledge_id = self.app, self.knowledge_id
        try:
            folder_id = await self.folders.id_of(app, knowledge_id, file.folder) if self.mirrored else None
        except ToolFailure as failure:
            return Problem.of(failure, "could not make its folder in the base: ")
        name = file.relative.rpartition("/")[2] if file.mirrored else synced_name(file, self.source)
        # The source id in the metadata too, where a release keeps it: on a release with folders a name alone never
        # makes a document this folder's.
        metadata = {"title": file.relative, "source": file.relative, SOURCE_KEY: self.source}
        if file.mirrored:
            metadata |= {"synced_by": SYNCED_BY}
        content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        async with _Turn(self.sending) as turn:
            options = SyncOptions(
                folder_id,
                links_itself=True,
                first_poll=_FIRST_POLL_SHARE * statistics.median(self.processing_seconds)
                if self.processing_seconds
                else None,
                writable_checked=self.writable_checked,  # read in its turn: set once an earlier upload got in
                watch=self.watch,
                attach_checks=self.attach_checks if check_later else None,
                sent=functools.partial(self._sent, turn),
            )
            upload = Upload(name, content, content_type, metadata, options)
            try:
                done = await upload_to_base(app, knowledge_id, upload, _quiet, text=None, tool="sync")
            except ToolFailure as failure:
                if failure.code == "timeout" and failure.stage == "process" and failure.file_id:
                    self.late[failure.file_id] = file.relative
                if not _worth_again(failure):
                    return Problem.of(failure)
                await asyncio.sleep(self.app.settings.timings.upload_again_after)
                try:
                    done = await upload_to_base(app, knowledge_id, upload, _quiet, text=None, tool="sync")
                except ToolFailure as again:
                    return Problem.of(again, "sent twice: ")
        self.writable_checked = True
        if check_later:
            self.uploaded_paths[done.file_id] = file.relative
            await self.confirm_some()
        if done.processed_after is not None:
            self.processing_seconds.append(done.processed_after)
        return None

    async def await_late(self) -> list[str]:
        """The run's own uploads it gave up waiting for, settled at its end rather than before each upload: waited
        for while Open WebUI finishes any of them (each that ends gives the rest OPENWEBUI_PROCESS_TIMEOUT more), then
        their journal records settled (`giveup`: a slow one is never taken for lost). The paths of those the base now
        holds. A run that saw Open WebUI refuse a connection (a restart, which drops the tasks it was processing)
        settles its records then too: those uploads are lost, not slow, and a later run would meet their text."""
        if not self.late and self.app.client.unreachable_at is None:
            return []
        loop = asyncio.get_running_loop()
        waits = Waits.of(self.app.settings)
        until = given_up_at("processing", loop.time(), waits)
        left = set(self.late)
        if left:
            self.say(f"waiting for Open WebUI to finish {len(left)} upload(s) of this run it is still processing")
        while left and loop.time() <= until:
            still = {file_id for file_id in left if await self._processing(file_id)}
            if len(still) < len(left):
                until = given_up_at("processing", loop.time(), waits)
            left = still
            if left:
                await asyncio.sleep(self.app.settings.timings.earlier_uploads_poll)
        try:
            resolutions = await self.app.recover_uploads()
        except Exception as error:  # left to a later run, as before
            self.say(f"note: this run's unfinished uploads could not be settled ({type(error).__name__})")
            return []
        if left:
            self.say(
                f"note: Open WebUI is still processing {len(left)} upload(s) of this run; it links them itself when "
                "done (a later run settles them)"
            )
        return [self.late[r.kept] for r in resolutions if r.kept in self.late]

    async def _processing(self, file_id: str) -> bool:
        try:
            return await self.app.client.process_status(file_id) in ("pending", "processing")
        except ToolFailure:
            return True  # unknown: looked at again

    def _sent(self, turn: _Turn) -> None:
        """An upload that links itself was answered: the next may go, and the write access read before it was sent
        (every upload of the run reads it until one got this far) holds for the run's next uploads."""
        self.writable_checked = True
        turn.give_back()

    async def remove(self, entry: RemoteFile) -> Problem | None:
        """Take a document this command uploaded for this folder out of the base, and delete its file (it belongs
        to no one else)."""
        try:
            async with self.app.locks.hold(self.knowledge_id) as lease:
                lease.check()
                await self.app.client.remove_file(self.knowledge_id, entry.file_id, delete_file=True)
        except ToolFailure as failure:
            return Problem.of(failure)
        return None


def _worth_again(failure: ToolFailure) -> bool:
    """An upload that made nothing in Open WebUI and may well work a moment later: refused by Open WebUI itself
    (400, 409, 429: not the key's rights, not a size or a name it will refuse again) or never sent. Or one whose
    attach got no answer and left no trace in a whole OPENWEBUI_TIMEOUT of looking, its file removed again (its
    connection broke): a new upload is what finishes the file; should that attach still come after all, before 0.6.42
    the read-back after the run's uploads sees what it dropped, and later releases refuse the second copy's text as a
    duplicate."""
    if failure.attach_unseen:
        return True
    if failure.stage != "upload" or failure.outcome != "not_applied":
        return False
    if failure.http_status is None:
        return failure.code == "upstream_unavailable"  # the connection was refused: Open WebUI restarting
    return failure.http_status in (400, 409, 429)


async def _read_again(file: LocalFile) -> bytes | Problem:
    """The file's bytes for its upload, as they were when the folder was read, or why not (off the event loop, which
    keeps the write lease renewed meanwhile)."""
    try:
        content = await anyio.to_thread.run_sync(read_under, file.root, file.relative, file.size)
    except Refusal as refusal:
        return Problem("changed", f"{refusal.reason}; run again")
    if hashlib.sha256(content).hexdigest() != file.sha256:
        return Problem("changed", "the file changed while it was synced; run again")
    return content


class _Turn:
    """A turn to upload, given back once the upload has been answered (`give_back`, for an upload that then waits for
    Open WebUI's indexing) or else when its whole write ends."""

    def __init__(self, turns: asyncio.Semaphore) -> None:
        self._turns = turns
        self._held = False

    async def __aenter__(self) -> _Turn:
        await self._turns.acquire()
        self._held = True
        return self

    async def __aexit__(self, *_: object) -> None:
        self.give_back()

    def give_back(self) -> None:
        if self._held:
            self._held = False
            self._turns.release()


async def _quiet(progress: float, total: float, message: str) -> None:
    return None
