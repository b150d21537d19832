"""Drive the installed console script over stdio with the SDK's client, as an MCP host would."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from devtools.openwebui_local import Instance

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")


def server_env(instance: Instance, **extra: str) -> dict[str, str]:
    return {"OPENWEBUI_URL": instance.url, "OPENWEBUI_API_KEY": instance.api_key, "OPENWEBUI_TIMEOUT": "60", **extra}


class Session:
    """A running server process and what it wrote to stderr."""

    def __init__(self, session: ClientSession, stderr: Path) -> None:
        self.session = session
        self.stderr = stderr

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """(is_error, structured content) of one tool call; the text block must carry the same JSON."""
        result: CallToolResult = await self.session.call_tool(name, arguments)
        assert result.structured_content is not None, result
        block = result.content[0]
        assert isinstance(block, TextContent)
        return bool(result.is_error), result.structured_content

    async def ok(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        is_error, body = await self.call(name, arguments)
        assert not is_error, f"{name} failed: {body}"
        return body


@asynccontextmanager
async def stdio_session(instance: Instance, **extra_env: str) -> AsyncIterator[Session]:
    params = StdioServerParameters(command=str(SCRIPT), args=[], env=server_env(instance, **extra_env))
    stderr = Path(tempfile.mkdtemp(prefix="owui-mcp-")) / "server.stderr"
    with stderr.open("w+", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield Session(session, stderr)
