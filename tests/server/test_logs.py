"""logging/setLevel sets the server's own log level (stderr; stdout stays the protocol)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from mcp import Client, MCPDeprecationWarning

from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def levels_restored() -> Iterator[None]:
    root, httpx_log = logging.getLogger(), logging.getLogger("httpx")
    before = root.level, httpx_log.level
    yield
    root.setLevel(before[0])
    httpx_log.setLevel(before[1])


@pytest.mark.parametrize(
    ("level", "expected"),
    [("debug", logging.DEBUG), ("info", logging.INFO), ("notice", logging.INFO), ("warning", logging.WARNING),
     ("error", logging.ERROR), ("critical", logging.CRITICAL), ("alert", logging.CRITICAL),
     ("emergency", logging.CRITICAL)],
)  # fmt: skip
async def test_set_level_is_the_servers_log_level(level: str, expected: int) -> None:
    async with Client(create_server(make_settings()), mode="legacy") as client:
        assert client.server_capabilities.logging is not None
        with pytest.warns(MCPDeprecationWarning):  # deprecated in 2026-07-28, still in 2025-11-25
            await client.set_logging_level(level)  # type: ignore[arg-type]
    assert logging.getLogger().level == expected
    # httpx logs every request URL at INFO: only debugging shows it, as with OPENWEBUI_LOG_LEVEL.
    assert logging.getLogger("httpx").level == (logging.DEBUG if level == "debug" else logging.WARNING)
