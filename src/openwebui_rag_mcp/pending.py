"""`knowledge_files(pending=N)`: the documents of a base that are not searchable yet, optionally waited for.

Two places know of them. From 0.9.6 Open WebUI links a file uploaded with `metadata.knowledge_id` (as its own
interface and `oikb` upload) once its background processing is done, and lists those still pending or processing at
`GET /knowledge/{id}/files/pending`. On every release this server's journal knows its own uploads to the base that
are in flight for the caller's credential (uploaded, not attached yet). A base's listed documents are processed
before they are attached, so they are never in this list.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App, check_range
from openwebui_rag_mcp.errors import invalid_argument
from openwebui_rag_mcp.models import FileItem, KnowledgeFiles

WAIT_MAX_SECONDS = 3_600
_POLL_SECONDS = 2.0
Progress = Callable[[float, float, str], Awaitable[None]]


async def no_progress(done: float, total: float, message: str) -> None:
    return None


async def pending_files(
    app: App, knowledge_id: str, wait: int, progress: Progress, *, others_given: bool = False
) -> KnowledgeFiles:
    """What of the base is still processing; with `wait` seconds, polled until nothing is (or the time is up)."""
    app.check_base(knowledge_id)
    check_range(wait, "pending", 0, WAIT_MAX_SECONDS)
    if others_given:
        raise invalid_argument("pending lists what is still processing; give it without query, cursor or a filter")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    await app.client.knowledge(knowledge_id)  # the base must be readable with the caller's credential
    while True:
        items = await _pending_once(app, knowledge_id)
        left = deadline - loop.time()
        if not items or left <= 0:
            break
        # A client that went away must not stop the wait from ending normally.
        with contextlib.suppress(Exception):
            await progress(wait - left, wait, f"{len(items)} still processing")
        await asyncio.sleep(min(_POLL_SECONDS, left))
    if items:
        waited = f" after waiting {wait} s" if wait else ""
        hint = f"{len(items)} not searchable yet{waited}; pass pending=<seconds> to wait for them"
    else:
        hint = "nothing is processing: every document of the base is searchable"
    return KnowledgeFiles(
        knowledge_id=knowledge_id, total=len(items), count=len(items), next_cursor=None, hint=hint, items=items
    )


async def _pending_once(app: App, knowledge_id: str) -> list[FileItem]:
    release = await app.client.release()
    found: dict[str, FileItem] = {}
    if release.folders:  # the release that links uploads itself (0.9.6) lists them too
        for raw in await app.client.pending_files(knowledge_id):
            item = _pending_item(raw)
            found[item.file_id] = item
    if app.inflight is not None:
        now = app.inflight.now()
        for record in await app.inflight.records(app.uploads_owner()):
            # A record whose writer is gone is recovery's to settle, not an upload in progress.
            if record.writer_gone(now):
                continue
            if record.knowledge_id == knowledge_id and record.file_id and record.file_id not in found:
                found[record.file_id] = FileItem(
                    file_id=record.file_id,
                    title=record.filename,
                    filename=record.filename,
                    size=record.size,
                    updated_at=normalize.iso_time(int(record.started)),
                    folder=None,
                    status="processing",
                )
    return list(found.values())


def _pending_item(raw: Mapping[str, Any]) -> FileItem:
    item = normalize.file_item(raw)
    data = raw.get("data")
    status = data.get("status") if isinstance(data, Mapping) else None
    return item.model_copy(update={"status": status if isinstance(status, str) else "pending"})
