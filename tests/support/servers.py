"""MCP servers built once per environment and reused across tests, each session talking to the running test's fake
Open WebUI (a `faultstub.Lane`): building a server per test costs more than the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx
from mcp import Client
from mcp.server.mcpserver import MCPServer

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings
from tests.faultstub import BASE_URL, Lane


class CurrentLane(httpx.AsyncBaseTransport):
    """The transport of the cached servers: every session talks to the lane of the running test."""

    lane: Lane | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert self.lane is not None
        return await self.lane.transport(BASE_URL).handle_async_request(request)


class LaneServers:
    """One server per environment, made on first use; `connect` opens a session on it against `lane`."""

    def __init__(self) -> None:
        self._transport = CurrentLane()
        self._servers: dict[frozenset[tuple[str, str]], MCPServer[App]] = {}

    @asynccontextmanager
    async def connect(self, lane: Lane, env: Mapping[str, str] | None = None) -> AsyncIterator[Client]:
        key = frozenset((env or {}).items())
        if key not in self._servers:
            self._servers[key] = create_server(make_settings(BASE_URL, **dict(key)), transport=self._transport)
        self._transport.lane = lane
        try:
            # The SDK's client validates every successful result against the listed schema too.
            async with Client(self._servers[key], raise_exceptions=True) as client:
                yield client
        finally:
            self._transport.lane = None
