"""The Retrieval API (`/api/v1/retrieval/...`): the vector query over bases, the web loader and the
retrieval settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client.transport import ClientBase, Json, _object


class RetrievalAPI(ClientBase):
    """Retrieval over bases, and the web loader."""

    async def query_collection(
        self, collection_names: list[str], query: str, k: int, controls: Mapping[str, Any] | None = None
    ) -> Json:
        """A vector (or, where the admin switched it on, hybrid) search; `controls` are further request fields
        (`k_reranker`, `hybrid`, `hybrid_bm25_weight`: hybrid.Controls.fields)."""
        body: dict[str, Any] = {"collection_names": collection_names, "query": query, "k": k, **(controls or {})}
        return await self._send("POST", "api/v1/retrieval/query/collection", json_body=body, read=True)

    async def fetch_web(self, url: str) -> str:
        """The text of a web page as Open WebUI's own web loader extracts it, without indexing it anywhere
        (`process=false`, 0.6.42+; before, the endpoint always embeds the page into a collection of its own). Open
        WebUI's refusal of local and private addresses applies."""
        answer = _object(
            await self._send(
                "POST", "api/v1/retrieval/process/web", params={"process": "false"}, json_body={"url": url}, read=True
            ),
            "a fetched web page",
        )
        content = answer.get("content")
        if not isinstance(content, str):
            raise normalize.unexpected("a fetched web page without its text")
        return content

    async def retrieval_config(self) -> Mapping[str, Any]:
        """Open WebUI's retrieval settings (admin keys only)."""
        return _object(await self._send("GET", "api/v1/retrieval/config"), "the retrieval settings")
