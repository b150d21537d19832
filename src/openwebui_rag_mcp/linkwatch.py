"""Uploads that link themselves to one base (`Release.links_on_upload`), confirmed together rather than one by one:
per file, one read of the base's newest documents for every few files in flight instead of a status poll and a name
search each (issue 18: Open WebUI is the busy process). Where Open WebUI links without asking whether the key may write
(`Release.link_checks_write_access`), uploads ready at once share one write-access read (`LinkWatch.writable`). What
each release does is in docs/compatibility.md. One watch serves one credential (a `sync` run's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.giveup import Waits, time_left

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
# How long an upload may go unlisted before the pending list is read for it, and how often that list is read at most.
PENDING_SECONDS = 2.0
# The most of the time the watch's looks take, when they are slow.
LOOK_SHARE = 0.2


@dataclass
class _Waiting:
    since: float  # when the upload was handed over
    answer: asyncio.Future[normalize.FileRecord | None]
    unseen: bool = False  # on neither list at the last read of the pending list (0.11 to 0.12.3 leave it early)


@dataclass
class LinkWatch:
    """The uploads to one base that link themselves, awaited together. It reads the base's newest documents once for
    every file in flight: a file listed there is linked and indexed (where `Release.links_before_indexing`, once it
    also carries the base's mark). A file long unlisted is looked for on the base's pending list; one on neither list
    at two reads of it, or listed unmarked with its hash cleared, is handed back to its writer, which asks about it
    alone."""

    client: OpenWebUIClient
    knowledge_id: str
    poll_seconds: float = POLL_SECONDS
    pending_seconds: float = PENDING_SECONDS
    _pending_read: float = float("-inf")  # when the pending list was last asked for
    _waiting: dict[str, _Waiting] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    # How the files it was given ended: linked as listed, or handed back to their writer.
    confirmed: int = 0
    handed_back: int = 0
    # The next read of the base's write access, not yet begun: every upload that asks joins it.
    _next_read: asyncio.Future[None] | None = None
    _reading: asyncio.Task[None] | None = None
    write_access_reads: int = 0

    async def writable(self, read: Callable[[], Awaitable[object]]) -> None:
        """Return once a read of the base's write access (`read`, which raises when the key may not write) that began
        after this call has passed; raise its failure. Callers asking while a read runs share the next one."""
        if self._next_read is None:
            self._next_read = asyncio.get_running_loop().create_future()
            if self._reading is None or self._reading.done():
                self._reading = asyncio.create_task(self._read_write_access(read))
        await asyncio.shield(self._next_read)

    async def _read_write_access(self, read: Callable[[], Awaitable[object]]) -> None:
        while self._next_read is not None:
            answer, self._next_read = self._next_read, None
            self.write_access_reads += 1
            try:
                await read()
            except Exception as error:
                answer.set_exception(error)
                answer.exception()  # retrieved here: a caller cancelled meanwhile leaves no warning behind
            else:
                answer.set_result(None)

    async def linked(self, file_id: str, waits: Waits) -> normalize.FileRecord | None:
        """The file as the base lists it once it is linked; None when the writer must look for itself: the file
        left the pending list without showing among the base's newest documents, the lists could not be read, or
        the writer's wait for its processing is over (`giveup`)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        within = time_left("processing", waits, since=now, now=now)
        waiting = _Waiting(loop.time(), loop.create_future())
        self._waiting[file_id] = waiting
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._watch())
        try:
            return await asyncio.wait_for(asyncio.shield(waiting.answer), within)
        except TimeoutError:
            return None
        finally:
            if self._waiting.get(file_id) is waiting:
                del self._waiting[file_id]

    async def _watch(self) -> None:
        """Ask until no upload is waiting; the task ends with the last."""
        loop = asyncio.get_running_loop()
        pause = self.poll_seconds
        while self._waiting:
            await asyncio.sleep(pause)
            if not self._waiting:
                break
            asked = loop.time()
            try:
                answers = await self._look(asked)
            except Exception as error:  # never leave a writer waiting: each looks for itself
                log.info("the lists of knowledge base %s could not be read (%s)", self.knowledge_id, error)
                answers = dict.fromkeys(self._waiting)
            # Looks that keep Open WebUI busy (a large base's page, the pending scan) are spaced out to take at most
            # a share of its time; the uploads waiting meanwhile do not hold up the next ones.
            pause = max(self.poll_seconds, (loop.time() - asked) * (1 - LOOK_SHARE) / LOOK_SHARE)
            for file_id, record in answers.items():
                waiting = self._waiting.pop(file_id, None)
                if waiting is None or waiting.answer.done():
                    continue
                waiting.answer.set_result(record)
                if record is None:
                    self.handed_back += 1
                else:
                    self.confirmed += 1

    async def _look(self, asked: float) -> dict[str, normalize.FileRecord | None]:
        """The files whose outcome the lists tell: linked and indexed (their record), or for their writer to look at.
        The base's newest page is read at every look; the pending list only for files that page has not shown
        `pending_seconds` after they were handed over, at most once per `pending_seconds`: Open WebUI finds pending
        files by scanning every file it holds (about 0.1 s of its time per read with 2,000 held, under load)."""
        marked_only = (await self.client.release()).links_before_indexing
        newest, _ = await self.client.knowledge_files(self.knowledge_id, 1)
        listed = {record.file_id: record for record in normalize.file_records(newest)}
        answers: dict[str, normalize.FileRecord | None] = {}
        late: dict[str, _Waiting] = {}
        for file_id, waiting in self._waiting.items():
            record = listed.get(file_id)
            if record is None:
                if asked - waiting.since >= self.pending_seconds:
                    late[file_id] = waiting
                continue
            waiting.unseen = False
            if not marked_only or record.collection == self.knowledge_id:
                answers[file_id] = record
            elif record.hash is None:  # linked, then its indexing into the base failed (0.10)
                answers[file_id] = None
            # else linked, its vectors not yet written to the base (0.10): asked about again
        now = asyncio.get_running_loop().time()
        if not late or now - self._pending_read < self.pending_seconds:
            return answers
        self._pending_read = now
        pending = {item.get("id") for item in await self.client.pending_files(self.knowledge_id)}
        for file_id, waiting in late.items():
            if file_id in pending:
                waiting.unseen = False
            elif waiting.unseen:  # on neither list at two reads of the pending list
                answers[file_id] = None
            else:
                waiting.unseen = True
        return answers
