"""The `sync` command's entry: the folder's source id, the server's write locks and `App`, what killed runs left,
then one `Run`; its exit code."""

from __future__ import annotations

from pathlib import Path

from openwebui_rag_mcp import runtime
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.sync.execute import Run
from openwebui_rag_mcp.sync.source import SourceError, folder_source
from openwebui_rag_mcp.sync.types import CONCURRENCY, UNUSABLE, Say


async def sync(
    settings: Settings,
    folder: Path,
    knowledge_id: str,
    *,
    dry_run: bool,
    delete: bool,
    say: Say,
    tty: bool,
    max_delete: int | None = None,
    source: str | None = None,
    concurrency: int = CONCURRENCY,
) -> int:
    try:
        origin = folder_source(folder, source, create=not dry_run)
    except SourceError as error:
        say(str(error))
        return UNUSABLE
    if origin.note:
        say(origin.note)
    # The server's write locks: with REDIS_URL, the lease of the base that its replicas take too.
    locks = runtime.make_locks(settings)
    try:
        async with runtime.running_app(settings, locks=locks, recover_at_start=False) as app:
            run = Run(app, folder, knowledge_id, origin.id, say, tty, concurrency=concurrency)
            if not dry_run:  # first what an interrupted run (killed, or Open WebUI gone) left in no base
                run.earlier.say_removed(await app.recover_uploads_quietly())
            return await run.sync(dry_run=dry_run, delete=delete, max_delete=max_delete)
    finally:
        await locks.aclose()
