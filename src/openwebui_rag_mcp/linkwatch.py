"""Uploads that link themselves to one base (Open WebUI 0.12.4+), confirmed together rather than one by one.

Open WebUI 0.12.4 indexes such an upload into the base, then links it, then says "completed"; until it is linked the
file is on the base's pending list (`GET /knowledge/{id}/files/pending`: uploads naming the base, still `pending` or
`processing`, not linked). So one watch per base asks that list once for every file in flight, and when some have left
it, reads the base's newest documents once (`GET /knowledge/{id}/files`, newest first): a file listed there is linked,
so indexed into the base, and its `hash` (the SHA-256 of its extracted text) comes with it. A file that left the
pending list but is not on that page (processing failed, the link was refused, or others changed so many files meanwhile
that it is not among the newest) is handed back to its writer, which then reads its status and its link itself, as a
single upload does. Per file that is one request for every few files in flight instead of a status poll or two and a
name search each (issue 18: Open WebUI is the busy process, and every request costs it).

One watch serves one credential (a `sync` run's): its task runs in the context of the upload that started it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client import OpenWebUIClient

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2


@dataclass
class _Waiting:
    since: float  # when the upload was handed over: only a pending list asked for after that can leave it out
    answer: asyncio.Future[normalize.FileRecord | None]


@dataclass
class LinkWatch:
    """The uploads to one base that link themselves, awaited together (module docstring)."""

    client: OpenWebUIClient
    knowledge_id: str
    poll_seconds: float = POLL_SECONDS
    _waiting: dict[str, _Waiting] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    # How the files it was given ended: linked as listed, or handed back to their writer.
    confirmed: int = 0
    handed_back: int = 0

    async def linked(self, file_id: str, within: float) -> normalize.FileRecord | None:
        """The file as the base lists it once it is linked; None when the writer must look for itself: the file
        left the pending list without showing among the base's newest documents, the lists could not be read, or
        `within` seconds passed."""
        loop = asyncio.get_running_loop()
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
        """The files that left the pending list, each with its record where the base's newest page lists it."""
        pending = {item.get("id") for item in await self.client.pending_files(self.knowledge_id)}
        left = [file_id for file_id, w in self._waiting.items() if w.since < asked and file_id not in pending]
        if not left:
            return {}
        newest, _ = await self.client.knowledge_files(self.knowledge_id, 1)
        listed = {record.file_id: record for record in normalize.file_records(newest)}
        return {file_id: listed.get(file_id) for file_id in left}
