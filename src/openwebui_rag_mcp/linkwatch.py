"""Uploads that link themselves to one base (`Release.links_on_upload`), confirmed together rather than one by one:
per file, one request for every few files in flight instead of a status poll and a name search each (issue 18: Open
WebUI is the busy process). Where Open WebUI links without asking whether the key may write
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


@dataclass
class _Waiting:
    since: float  # when the upload was handed over: only a pending list asked for after that can leave it out
    answer: asyncio.Future[normalize.FileRecord | None]
    unseen: bool = False  # on neither list at the last look (0.11 to 0.12.3 leave the pending list a moment early)


@dataclass
class LinkWatch:
    """The uploads to one base that link themselves, awaited together. It asks the base's pending list once for every
    file in flight and, when some have left it, reads the base's newest documents once: a file listed there is linked
    and indexed (where `Release.links_before_indexing`, once it also carries the base's mark). A file on neither list
    twice running, or listed unmarked with its hash cleared, is handed back to its writer, which asks about it alone."""

    client: OpenWebUIClient
    knowledge_id: str
    poll_seconds: float = POLL_SECONDS
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
        while self._waiting:
            await asyncio.sleep(self.poll_seconds)
            if not self._waiting:
                break
            asked = loop.time()
            try:
                answers = await self._look(asked)
            except Exception as error:  # never leave a writer waiting: each looks for itself
                log.info("the pending list of knowledge base %s could not be read (%s)", self.knowledge_id, error)
                answers = dict.fromkeys(self._waiting)
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
        """The files whose outcome the lists tell: linked and indexed (their record), or for their writer to look at."""
        pending = {item.get("id") for item in await self.client.pending_files(self.knowledge_id)}
        for still in pending:
            if isinstance(still, str) and still in self._waiting:
                self._waiting[still].unseen = False
        left = {file_id: w for file_id, w in self._waiting.items() if w.since < asked and file_id not in pending}
        if not left:
            return {}
        marked_only = (await self.client.release()).links_before_indexing
        newest, _ = await self.client.knowledge_files(self.knowledge_id, 1)
        listed = {record.file_id: record for record in normalize.file_records(newest)}
        answers: dict[str, normalize.FileRecord | None] = {}
        for file_id, waiting in left.items():
            record = listed.get(file_id)
            if record is None:
                if waiting.unseen:
                    answers[file_id] = None
                waiting.unseen = True
                continue
            waiting.unseen = False
            if not marked_only or record.collection == self.knowledge_id:
                answers[file_id] = record
            elif record.hash is None:  # linked, then its indexing into the base failed (0.10)
                answers[file_id] = None
            # else linked, its vectors not yet written to the base (0.10): asked about again
        return answers
