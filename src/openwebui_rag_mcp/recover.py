"""`openwebui-rag-mcp recover`: settle now what dead writers with this key left in flight."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.runtime import running_app
from openwebui_rag_mcp.settle import ClientUpstream, recover


async def recover_command(
    settings: Settings, say: Callable[[str], None], *, transport: httpx.AsyncBaseTransport | None = None
) -> int:
    """`openwebui-rag-mcp recover`: settle now what dead writers with this key left; 0 when nothing of this key is
    left, 1 when something could not be settled (said why), 5 when the journal cannot be read."""
    async with running_app(settings, transport=transport, recover_at_start=False) as app:
        assert app.inflight is not None
        owner = app.uploads_owner()
        try:
            resolutions = await recover(
                app.inflight, ClientUpstream(app.client), owner, app.locks.hold, app.settings.timings
            )
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
