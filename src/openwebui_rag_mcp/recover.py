"""`openwebui-rag-mcp recover`: settle now what dead writers with this key left in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.runtime import running_app
from openwebui_rag_mcp.settle import ClientUpstream, Resolution, recover


async def recover_command(
    settings: Settings, say: Callable[[str], None], *, transport: httpx.AsyncBaseTransport | None = None
) -> int:
    """`openwebui-rag-mcp recover`: settle now what dead writers with this key left; 0 when nothing of this key is
    left, 1 when something could not be settled (said why), 5 when the journal cannot be read."""
    async with running_app(settings, transport=transport, recover_at_start=False) as app:
        assert app.inflight is not None
        owner = app.uploads_owner()
        try:
            resolutions = await _settle_watching(app, owner, say)
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


async def _settle_watching(app: App, owner: str, say: Callable[[str], None]) -> list[Resolution]:
    """Settle every record of `owner` whose writer is gone; an upload Open WebUI still works on is looked at again
    for as long as its writer waited for its processing (at most OPENWEBUI_PROCESS_TIMEOUT): whether it is lost or
    only slow shows only across looks (`giveup.given_up_at`)."""
    assert app.inflight is not None
    loop = asyncio.get_running_loop()
    upstream, timings = ClientUpstream(app.client), app.settings.timings
    latest: dict[str, Resolution] = {}
    until: float | None = None
    while True:
        for resolution in await recover(app.inflight, upstream, owner, app.locks.hold, timings):
            latest[resolution.record.id] = resolution
        busy = [r for r in latest.values() if r.processing and r.record.links_itself]
        if not busy:
            break
        if until is None:
            waited = max(r.record.waits(app.settings.process_timeout).processing for r in busy)
            watch = min(waited, app.settings.process_timeout) + timings.earlier_uploads_poll
            until = loop.time() + watch
            say(
                f"Open WebUI is still working on {len(busy)} upload(s) of this key: looking again for up to {watch:g} s"
            )
        if loop.time() > until:
            break
        await asyncio.sleep(timings.earlier_uploads_poll)
    return list(latest.values())
