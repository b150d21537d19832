"""What `tools/list` costs every agent session, held as a budget, and what its descriptions must still say.

The size is that of the JSON-RPC line a server writes for `tools/list` on stdio after a 2025-11-25 handshake (what
`bench.measure.tools_list_wire` reads and the benchmark reports), rebuilt from the in-memory client's result.

Issue 13 asks for at most 12,000 characters with the four aliases and 8,000 without them, counting the tools added
since (knowledge_find, knowledge_add_file: 15 tools with the aliases, 11 without). What it costs: input schemas
(parameter names, types, maxima and one-line descriptions, about 3,700 characters), tool descriptions (about 850),
output schemas that say which fields are always there (`required` in the result and in the items of its lists, no
field types: those took a third of the list) and the error branch every output schema needs (MCP Inspector and
Claude Code validate error results too). Issue 17 (citations, filters, retrieval controls, URL adds) lets the list
grow to 9,000 characters without the aliases; the 12,000 with them stay. Issue 41 gives the four aliases their tools'
output schemas (970 characters: a client that validates structured content needs them), so 12,300 with the aliases.
Issue 43 gives every tool a title hosts show a person (394 characters without the aliases, 543 with them) and an
explicit openWorldHint (21 characters a tool, though true is its default: hosts and directories read a missing one
differently): 9,644 and 13,123 characters, so budgets of 9,700 and 13,200. The budgets are the targets; a new tool
or parameter has to fit in them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from openwebui_rag_mcp.config import ALIASES
from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

BUDGET_WITH_ALIASES = 13_200
BUDGET_WITHOUT_ALIASES = 9_700
HYBRID_CONTROLS_COST = 300  # characters OPENWEBUI_HYBRID_SEARCH may add per tool listing the controls
NO_ALIASES = ",".join(ALIASES)
ID_PARAMETERS = {"knowledge_id": "file_id", "knowledge_ids": "file_id", "file_id": "knowledge_id"}


async def listed(**env: str) -> tuple[int, list[dict[str, Any]]]:
    """The size of the tools/list line on the wire, and the tools as sent."""
    server = create_server(make_settings(OPENWEBUI_ALLOW_CREATE="true", **env))
    async with Client(server, mode="legacy") as client:
        tools = (await client.list_tools()).model_dump(by_alias=True, mode="json", exclude_none=True)["tools"]
    # The 2025-11-25 answer is only the tools (the client's model adds 2026-07-28 defaults such as ttlMs).
    line = json.dumps(
        {"jsonrpc": "2.0", "id": 2, "result": {"tools": tools}}, ensure_ascii=False, separators=(",", ":")
    )
    return len(line), tools


async def test_tools_list_with_the_aliases_fits_its_budget() -> None:
    size, tools = await listed()
    assert len(tools) == 16
    assert size <= BUDGET_WITH_ALIASES, f"tools/list is {size:,} characters; the budget is {BUDGET_WITH_ALIASES:,}"


async def test_tools_list_without_the_aliases_fits_its_budget() -> None:
    size, tools = await listed(OPENWEBUI_DISABLED_TOOLS=NO_ALIASES)
    assert not {tool["name"] for tool in tools} & set(ALIASES)
    assert size <= BUDGET_WITHOUT_ALIASES, (
        f"tools/list is {size:,} characters; the budget is {BUDGET_WITHOUT_ALIASES:,}"
    )


async def test_the_hybrid_controls_cost_context_only_where_switched_on() -> None:
    """OPENWEBUI_HYBRID_SEARCH lists knowledge_search's `hybrid`, `bm25_weight` and `k_reranker` (docs/tools.md):
    an operator whose Open WebUI runs hybrid search pays for them, in knowledge_search and its alias."""
    size, _ = await listed(OPENWEBUI_DISABLED_TOOLS=NO_ALIASES)
    switched, _ = await listed(OPENWEBUI_DISABLED_TOOLS=NO_ALIASES, OPENWEBUI_HYBRID_SEARCH="true")
    assert 0 < switched - size <= HYBRID_CONTROLS_COST, switched - size
    with_aliases, _ = await listed()
    switched_with_aliases, _ = await listed(OPENWEBUI_HYBRID_SEARCH="true")
    assert switched_with_aliases - with_aliases <= 2 * HYBRID_CONTROLS_COST


async def test_the_size_is_what_goes_on_the_wire() -> None:
    bench = pytest.importorskip("bench.measure")
    wire = await bench.tools_list_wire("http://127.0.0.1:9", "sk-budget", OPENWEBUI_ALLOW_CREATE="true")
    size, _ = await listed()
    assert size == len(wire)


async def test_every_parameter_says_what_it_is_and_which_id_it_takes() -> None:
    _, tools = await listed()
    for tool in tools:
        for name, schema in tool["inputSchema"]["properties"].items():
            description = schema.get("description", "")
            assert description, f"{tool['name']}.{name} has no description"
            if name in ID_PARAMETERS:
                assert name.removesuffix("s") in description, f"{tool['name']}.{name}: {description!r}"
                assert f"not a {ID_PARAMETERS[name]}" in description or name == "knowledge_ids", description


async def test_tool_descriptions_name_the_ids_they_take_and_give() -> None:
    _, tools = await listed()
    by_name = {tool["name"]: tool for tool in tools}
    gives = {
        "knowledge_list": "knowledge_id",
        "knowledge_files": "file_id",
        "knowledge_search": "file_id",
        "knowledge_create": "knowledge_id",
        "knowledge_add": "file_id",
    }
    for name, tool in by_name.items():
        description = tool["description"]
        for taken in {"knowledge_id", "file_id"} & set(tool["inputSchema"]["properties"]):
            assert taken in description, f"{name} takes {taken} but its description does not say so"
        if name in gives:
            assert gives[name] in description, f"{name} gives {gives[name]} but its description does not say so"
    for alias, original in ALIASES.items():
        # An alias carries its tool's whole description, the same inputs and output schema, and says whose alias
        # it is.
        assert by_name[alias]["description"].startswith(by_name[original]["description"])
        assert original in by_name[alias]["description"]
        assert by_name[alias]["inputSchema"] == by_name[original]["inputSchema"]
        assert by_name[alias]["outputSchema"] == by_name[original]["outputSchema"]
