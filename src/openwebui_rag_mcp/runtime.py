"""The per-process `App` (one Open WebUI client, the write locks, the journal of uploads in flight): made, warmed up
and closed. Apart from the MCP surface, so the `sync` and `recover` commands start without importing the MCP SDK."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.journal import make_journal
from openwebui_rag_mcp.locks import LeaseLocks, LocalLocks, RedisLeaseStore, WriteLocks

log = logging.getLogger(__name__)


def make_locks(settings: Settings) -> WriteLocks:
    """This process's locks, or with REDIS_URL the Redis leases every replica takes."""
    if settings.redis_url is None:
        return LocalLocks()
    # Long enough for the slowest write to wait its turn behind another.
    wait = settings.process_timeout + 4 * settings.timeout
    store = RedisLeaseStore(settings.redis_url.get_secret_value())
    return LeaseLocks(store, wait_seconds=wait, ttl_seconds=settings.lease_seconds)


def _warm_up_done(task: asyncio.Task[None]) -> None:
    """Read the warm-up's outcome, so a failure is logged once and never reported as "never retrieved"."""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.warning("reading the Open WebUI release at start failed; will retry on the next call", exc_info=error)


@asynccontextmanager
async def running_app(
    settings: Settings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    locks: WriteLocks | None = None,
    recover_at_start: bool = True,
) -> AsyncIterator[App]:
    """The per-process `App`: one Open WebUI client, warmed up at once (and, with `recover_at_start`, the uploads a
    dead process with this key left in flight settled), closed at the end."""
    client = OpenWebUIClient(settings, transport=transport)
    inflight = make_journal(settings)
    app = App(settings=settings, client=client, locks=locks or LocalLocks(), inflight=inflight)
    warm_up = asyncio.create_task(_start(app, recover_at_start))
    warm_up.add_done_callback(_warm_up_done)
    try:
        yield app
    finally:
        warm_up.cancel()
        # Let the cancelled warm-up finish before its client closes; its outcome is the callback's to read.
        await asyncio.wait([warm_up])
        await client.aclose()
        await inflight.aclose()


async def _start(app: App, recover: bool) -> None:
    """Warm the client up; then, with a key of its own, settle what a dead process with that key left in flight:
    what Open WebUI may still be working on (an attach the dead process sent, an upload that links itself) is looked
    at again until it is settled, so its cleaning up waits for no later write (this task ends with the process)."""
    await app.client.warm_up()
    # Never in read-only mode: a server the operator made read-only deletes nothing, even what it once left.
    if not (recover and app.settings.api_key.get_secret_value() and not app.settings.read_only):
        return
    recheck = app.settings.timings.recheck
    waits = iter(recheck)
    while True:
        if not any(resolution.processing for resolution in await app.recover_uploads_quietly()):
            return
        await asyncio.sleep(next(waits, recheck[-1]))
