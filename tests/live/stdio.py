"""Drive the installed console script over stdio with the SDK's client, as an MCP host would."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from devtools.openwebui_local import Instance

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")


def server_env(
    instance: Instance, *, api_key: str | None = None, url: str | None = None, **extra: str
) -> dict[str, str]:
    """The server's environment: the admin's key and Open WebUI's URL unless ``api_key`` (e.g. a second user's) or
    ``url`` (e.g. a proxy in front of Open WebUI) say otherwise, plus ``extra`` variables."""
    return {
        "OPENWEBUI_URL": url or instance.url,
        "OPENWEBUI_API_KEY": api_key or instance.api_key,
        "OPENWEBUI_TIMEOUT": "60",
        **extra,
    }


class Session:
    """A running server process and what it wrote to stderr."""

    def __init__(self, session: ClientSession, stderr: Path) -> None:
        self.session = session
        self.stderr = stderr

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        return structured(await self.session.call_tool(name, arguments))

    async def ok(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        is_error, body = await self.call(name, arguments)
        assert not is_error, f"{name} failed: {body}"
        return body

    async def listing(
        self, name: str, arguments: dict[str, Any], *, max_pages: int = 50
    ) -> tuple[bool, dict[str, Any], list[dict[str, Any]]]:
        return await every_page(self.call, name, arguments, max_pages)


def structured(result: CallToolResult) -> tuple[bool, dict[str, Any]]:
    """(is_error, structured content) of one tool call; the text block must carry the same JSON."""
    assert result.structured_content is not None, result
    block = result.content[0]
    assert isinstance(block, TextContent)
    return bool(result.is_error), result.structured_content


Call = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, dict[str, Any]]]]


async def every_page(
    call: Call, name: str, arguments: dict[str, Any], max_pages: int
) -> tuple[bool, dict[str, Any], list[dict[str, Any]]]:
    """A listing tool's whole answer, following ``next_cursor`` where its result has one:
    (is_error, the last body (the error body if a page failed), the items of every page read)."""
    items: list[dict[str, Any]] = []
    cursors: set[str] = set()
    page_arguments = dict(arguments)
    for _ in range(max_pages):
        is_error, body = await call(name, page_arguments)
        if is_error:
            return True, body, items
        items.extend(body["items"])
        cursor = body.get("next_cursor")
        if not cursor:
            return False, body, items
        assert cursor not in cursors, f"{name} gave the cursor {cursor!r} twice"
        cursors.add(cursor)
        page_arguments = {**arguments, "cursor": cursor}
    raise AssertionError(f"{name} gave more than {max_pages} pages")


@asynccontextmanager
async def stdio_session(
    instance: Instance, *, api_key: str | None = None, url: str | None = None, **extra_env: str
) -> AsyncIterator[Session]:
    env = server_env(instance, api_key=api_key, url=url, **extra_env)
    params = StdioServerParameters(command=str(SCRIPT), args=[], env=env)
    stderr = Path(tempfile.mkdtemp(prefix="owui-mcp-")) / "server.stderr"
    with stderr.open("w+", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield Session(session, stderr)
