"""Search side by side with another Open WebUI MCP server (issue 42: search with citations at most as slow as the
leanest peer measured in the same run).

The peer is RonasIT's `open-webui-knowledge-mcp-server` (Node, MIT; no citations, no access checks of its own, one
base per search). It is not on npm, so `bench.run --peer` takes the command that starts a built checkout over stdio:

    git clone https://github.com/RonasIT/open-webui-mcp-server && cd open-webui-mcp-server && npm ci && npm run build
    python -m bench.run --peer "node $PWD/dist/cli.js"

Both servers and direct HTTP search one base with the same queries and `k`, interleaved; each server's ratio is taken
to the direct requests of its own pairs.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Sequence
from typing import TextIO

from bench.common import TOP_K, Call, Samples, interleaved
from bench.measure import Direct, mcp_server

PEER_TOOL = "search_knowledge_base"


def peer_env(url: str, api_key: str) -> dict[str, str]:
    """The peer's own variables: its API's address (with `/api/v1`) and token, and stdio."""
    return {"OPEN_WEBUI_API_URL": f"{url}/api/v1", "OPEN_WEBUI_API_TOKEN": api_key, "MCP_TRANSPORT": "stdio"}


def command_of(text: str) -> tuple[str, ...]:
    command = tuple(shlex.split(text))
    if not command:
        raise ValueError("--peer needs the command that starts the peer server over stdio")
    return command


async def side_by_side(
    url: str, api_key: str, errlog: TextIO, command: Sequence[str], base: str, queries: Sequence[str], rounds: int
) -> dict[str, Samples]:
    """Samples of this server's `knowledge_search` ("ours") and the peer's search ("peer"), each beside the same
    retrieval request made directly, over one base."""
    direct = Direct(url, api_key)
    try:
        async with (
            mcp_server(url, api_key, errlog) as ours,
            mcp_server(url, api_key, errlog, command=command, env=peer_env(url, api_key)) as peer,
        ):

            def query(n: int) -> str:
                return queries[n % len(queries)]

            def ours_search(n: int) -> Awaitable[object]:
                return ours.call("knowledge_search", {"query": query(n), "knowledge_ids": [base], "top_k": TOP_K})

            def peer_search(n: int) -> Awaitable[object]:
                return peer.call(PEER_TOOL, {"knowledge_base_id": base, "query": query(n), "k": TOP_K})

            def direct_search(n: int) -> Awaitable[object]:
                return direct.search([base], query(n), TOP_K)

            for n in range(len(queries)):  # every hit's document read once: the steady state
                await ours_search(n)
            ways: dict[str, tuple[Call, Call]] = {
                "ours": (ours_search, direct_search),
                "peer": (peer_search, direct_search),
            }
            return await interleaved(rounds, ways)
    finally:
        await direct.aclose()
