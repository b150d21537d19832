"""`knowledge_files(pending=N)`: the documents of a base that are not searchable yet, optionally waited for.

Two places know of them. From 0.9.6 Open WebUI links a file uploaded with `metadata.knowledge_id` (as its own
interface and `oikb` upload) once its background processing is done, and lists those still pending or processing at
`GET /knowledge/{id}/files/pending`. On every release this server's journal knows its own uploads to the base that
are in flight for the caller's credential (uploaded, not attached yet). A base's listed documents are processed
before they are attached, so they are never in this list.

Before 0.12.4 Open WebUI takes an upload off its pending list once it calls it "completed", which is a moment before
the base links it (0.9.6 to 0.10.2: also before it is indexed into the base). So a file seen pending stays in the
answer, as processing, until the base lists it (0.9.6 to 0.10: and it is marked as written to the base,
`meta.collection_name`) or its processing failed: "nothing is processing" means searchable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App, check_range
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument
from openwebui_rag_mcp.models import FileItem, KnowledgeFiles

WAIT_MAX_SECONDS = 3_600
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
    seen: dict[str, FileItem] = {}  # seen on Open WebUI's pending list, until the base lists them
    while True:
        items = await _pending_once(app, knowledge_id, seen)
        left = deadline - loop.time()
        if not items or left <= 0:
            break
        # A client that went away must not stop the wait from ending normally.
        with contextlib.suppress(Exception):
            await progress(wait - left, wait, f"{len(items)} still processing")
        await asyncio.sleep(min(app.settings.timings.pending_poll, left))
    if items:
        waited = f" after waiting {wait} s" if wait else ""
        hint = f"{len(items)} not searchable yet{waited}; pass pending=<seconds> to wait for them"
    else:
        hint = "nothing is processing: every document of the base is searchable"
    return KnowledgeFiles(
        knowledge_id=knowledge_id, total=len(items), count=len(items), next_cursor=None, hint=hint, items=items
    )


async def _pending_once(app: App, knowledge_id: str, seen: dict[str, FileItem]) -> list[FileItem]:
    release = await app.client.release()
    found: dict[str, FileItem] = {}
    if release.folders:  # the release that links uploads itself (0.9.6) lists them too
        for raw in await app.client.pending_files(knowledge_id):
            item = _pending_item(raw)
            found[item.file_id] = item
        if not release.completes_when_linked:
            await _still_linking(app, release, knowledge_id, found, seen)
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


async def _still_linking(
    app: App, release: Release, knowledge_id: str, found: dict[str, FileItem], seen: dict[str, FileItem]
) -> None:
    """Adds to `found` the files seen pending earlier that the base does not list yet (module docstring)."""
    for file_id, item in list(seen.items()):
        if file_id not in found and not await _linked_or_failed(app, release, knowledge_id, item):
            found[file_id] = item.model_copy(update={"status": "processing"})
    for file_id, item in found.items():
        seen.setdefault(file_id, item)
    for file_id in [file_id for file_id in seen if file_id not in found]:
        del seen[file_id]


async def _linked_or_failed(app: App, release: Release, knowledge_id: str, item: FileItem) -> bool:
    try:
        if await app.client.process_status(item.file_id) == "failed":
            return True
    except ToolFailure as failure:
        if failure.code == "not_found":  # deleted (or invisible to this key): nothing this call can wait for
            return True
        if failure.code != "forbidden":  # another user's upload, whose status this key may not read: the list tells
            raise
    listed = await app.client.listed_file(knowledge_id, item.file_id, item.filename or "")
    # 0.9.6 to 0.10 list it before the base's vectors are written; the file's mark says when they are.
    return listed is not None and (not release.links_before_indexing or listed.collection == knowledge_id)


def _pending_item(raw: Mapping[str, Any]) -> FileItem:
    item = normalize.file_item(raw)
    data = raw.get("data")
    status = data.get("status") if isinstance(data, Mapping) else None
    return item.model_copy(update={"status": status if isinstance(status, str) else "pending"})
