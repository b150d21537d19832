"""The tool table as clients see it: each tool's title and annotations, aliases beside their tools."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.types import Tool

from openwebui_rag_mcp.config import ALIASES, READ_TOOLS, WRITE_TOOLS
from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

EVERY = {"OPENWEBUI_ALLOW_CREATE": "true", "OPENWEBUI_ALLOW_DELETE_BASE": "true"}


async def listed(**env: str) -> dict[str, Tool]:
    async with Client(create_server(make_settings(**env)), mode="legacy") as client:
        return {tool.name: tool for tool in (await client.list_tools()).tools}


async def test_every_tool_has_a_title_a_person_reads() -> None:
    tools = await listed(**EVERY)
    assert set(tools) == {*READ_TOOLS, *WRITE_TOOLS, *ALIASES}
    titles = {name: tool.title for name, tool in tools.items()}
    for name, title in titles.items():
        assert title, name
        assert "_" not in title, (name, title)  # words, not the tool's name
    assert len(set(titles.values())) == len(titles), "two tools share a title"
    assert titles["knowledge_search"] == "Search knowledge bases"
    for alias, original in ALIASES.items():
        assert (titles[original] or "?") in (titles[alias] or ""), alias


async def test_every_tool_says_it_reaches_beyond_the_server() -> None:
    """Every tool reaches Open WebUI (and knowledge_add_file's `url` the web): openWorldHint is published as true,
    not left to a default that hosts and directories read differently."""
    for name, tool in (await listed(**EVERY)).items():
        assert tool.annotations is not None, name
        assert tool.annotations.open_world_hint is True, name


async def test_read_only_mode_keeps_the_titles() -> None:
    tools = await listed(OPENWEBUI_READ_ONLY="true")
    assert set(tools) == {*READ_TOOLS, *ALIASES}
    assert all(tool.title for tool in tools.values())
