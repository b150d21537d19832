"""The Open WebUI HTTP client: `OpenWebUIClient`, put together from one part per API area of Open WebUI.

`transport` is the funnel every request goes through (and the only module that touches httpx); `knowledge`, `files`,
`folders` and `retrieval` hold the typed calls of each API area, so a difference between releases is found in one
short file.
"""

from __future__ import annotations

from openwebui_rag_mcp.client.files import FilesAPI
from openwebui_rag_mcp.client.folders import FoldersAPI
from openwebui_rag_mcp.client.knowledge import KnowledgeAPI
from openwebui_rag_mcp.client.retrieval import RetrievalAPI
from openwebui_rag_mcp.client.transport import (
    MAX_LIST_ITEMS,
    MAX_RESPONSE_BYTES,
    Json,
    acting_as,
    caller_token,
    segment,
)

__all__ = [
    "MAX_LIST_ITEMS",
    "MAX_RESPONSE_BYTES",
    "Json",
    "OpenWebUIClient",
    "acting_as",
    "caller_token",
    "segment",
]


class OpenWebUIClient(KnowledgeAPI, FilesAPI, FoldersAPI, RetrievalAPI):
    """Typed access to the Knowledge, Files and Retrieval APIs of one Open WebUI instance."""
