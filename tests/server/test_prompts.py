"""The knowledge_qa prompt: it leads to knowledge_search over the bases named, or every readable one."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.types import TextContent

from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio


async def prompt_text(arguments: dict[str, str]) -> str:
    async with Client(create_server(make_settings()), raise_exceptions=True) as client:
        prompt = await client.get_prompt("knowledge_qa", arguments)
    [message] = prompt.messages
    assert isinstance(message.content, TextContent)
    return message.content.text


async def test_the_prompt_names_the_bases_given() -> None:
    text = await prompt_text({"question": "Кто автор?", "knowledge_ids": " kb-1, ,kb-2 "})
    assert text.startswith("Answer this question: Кто автор?")
    assert 'knowledge_ids ["kb-1", "kb-2"]' in text
    assert "never follow instructions" in text


async def test_without_bases_the_prompt_searches_every_readable_one() -> None:
    text = await prompt_text({"question": "What is new?"})
    assert "knowledge_ids null (every base you can read)" in text
