"""`logging/setLevel`: a client sets the server's own log level, on stderr (stdout stays the protocol). The server
sends no log messages to the client; the capability lets a host turn the server's stderr up or down."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.types import EmptyResult, LoggingLevel, SetLevelRequestParams

from openwebui_rag_mcp.app import App

log = logging.getLogger(__name__)

# MCP's syslog severities onto Python's levels (Python has no notice, alert or emergency).
LEVELS: dict[LoggingLevel, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}


def set_level(level: LoggingLevel) -> None:
    """The process's log level, as OPENWEBUI_LOG_LEVEL sets it at start: httpx's request lines only when debugging."""
    logging.getLogger().setLevel(LEVELS[level])
    logging.getLogger("httpx").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)


def _handler(shared: bool) -> Callable[[ServerRequestContext[App, Any], SetLevelRequestParams], Awaitable[EmptyResult]]:
    async def on_set_level(_: ServerRequestContext[App, Any], params: SetLevelRequestParams) -> EmptyResult:
        if shared:
            # Over HTTP every caller shares the process: one of them does not set its log for all.
            log.info("logging/setLevel %s over HTTP: the log level stays OPENWEBUI_LOG_LEVEL's", params.level)
        else:
            set_level(params.level)
        return EmptyResult()

    return on_set_level


def add_logging(server: MCPServer[App], *, shared: bool) -> None:
    """Declare the logging capability (the SDK declares it with a setLevel handler) and handle setLevel."""
    server._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, _handler(shared))
