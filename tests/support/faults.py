"""What the fault and control suites share: the settings every faulted server runs with, the respx slot a tool's
server answers from, and sessions that check results against output schemas compiled once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.types import CallToolResult

from openwebui_rag_mcp.config import ALIASES
from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings
from tests.faultstub import Lane

# OPENWEBUI_TIMEOUT of the cases that are about a timeout (a hang, a drip). The requests before the faulted one must
# still fit in it on a busy 2-core machine, where one second was seen to be too little.
TIMEOUT = 5
# No CA bundle per session (fast); every tool offered, knowledge_delete_base too.
ENV = {"OPENWEBUI_TIMEOUT": str(TIMEOUT), "OPENWEBUI_VERIFY_TLS": "false", "OPENWEBUI_ALLOW_DELETE_BASE": "true"}


class Slot(httpx.AsyncBaseTransport):
    """The respx transport of one tool's server: answers from the lane the running test put in it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.transport: httpx.MockTransport | None = None

    def use(self, lane: Lane) -> Lane:
        self.transport = lane.transport(self.url)
        return lane

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert self.transport is not None
        return await self.transport.handle_async_request(request)


# -- sessions: the SDK client compiles every output schema again in every new session, which costs five times the
# call itself. Here the schemas are compiled once and every successful result is still checked against them.

_VALIDATORS: dict[str, Any] = {}


async def _skip_per_session_validation(self: ClientSession, name: str, result: CallToolResult) -> None:
    return None


@contextmanager
def fast_sessions() -> Iterator[None]:
    """New sessions skip the SDK's per-session schema compilation; `conforms` checks results instead."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ClientSession, "validate_tool_result", _skip_per_session_validation)
        yield


async def conforms(tool: str, structured: object) -> None:
    """`structured` matches the output schema `tool` declares (compiled once per tool; an alias declares its
    tool's)."""
    if not _VALIDATORS:
        jsonschema = pytest.importorskip("jsonschema")
        for listed in await create_server(make_settings(OPENWEBUI_ALLOW_DELETE_BASE="true")).list_tools():
            schema = listed.output_schema
            assert schema is not None, listed.name
            _VALIDATORS[listed.name] = jsonschema.validators.validator_for(schema)(schema)
    _VALIDATORS[ALIASES.get(tool, tool)].validate(structured)
