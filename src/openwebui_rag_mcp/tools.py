"""What each tool does, independent of MCP: validate input, call Open WebUI, normalise the answer."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from openwebui_rag_mcp import __version__, normalize
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import TOP_K_MAX, Settings
from openwebui_rag_mcp.errors import invalid_argument
from openwebui_rag_mcp.models import FileText, Health, KnowledgeFiles, KnowledgeList, SearchResult

QUERY_MAX_CHARS = 4_000
KNOWLEDGE_IDS_MAX = 100
K_RERANKER_MAX = 200
# Open WebUI ids are UUIDs; collection names must match this pattern too (reference §6.4). Anything else is
# refused before it reaches a URL.
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(frozen=True, slots=True)
class App:
    """What every tool call shares for the life of the process."""

    settings: Settings
    client: OpenWebUIClient
    write_lock: asyncio.Lock


def check_id(value: str, what: str) -> str:
    if not _ID.fullmatch(value):
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise invalid_argument(f"{what} {shown!r} is not a valid Open WebUI id (letters, digits, '-' and '_' only)")
    return value


def check_range(value: int, name: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise invalid_argument(f"{name} must be between {low} and {high}, got {value}")
    return value


def public_url(url: str) -> str:
    """The configured URL without any user:password part, safe to show."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


async def list_knowledge(app: App) -> KnowledgeList:
    items = [normalize.knowledge_base(item) for item in await app.client.list_knowledge()]
    return KnowledgeList(items=items, count=len(items))


async def list_files(app: App, knowledge_id: str, page: int | None) -> KnowledgeFiles:
    check_id(knowledge_id, "knowledge_id")
    if page is not None:
        check_range(page, "page", 1, 100_000)
    raw, total = await app.client.knowledge_files(knowledge_id, page)
    items = [normalize.file_item(item) for item in raw]
    return KnowledgeFiles(knowledge_id=knowledge_id, items=items, count=len(items), total=total, page=page)


async def search(
    app: App, query: str, knowledge_ids: list[str] | None, top_k: int | None, k_reranker: int | None
) -> SearchResult:
    text = query.strip()
    if not text:
        raise invalid_argument("query must not be empty")
    if len(text) > QUERY_MAX_CHARS:
        raise invalid_argument(f"query is {len(text)} characters long; the limit is {QUERY_MAX_CHARS}")
    k = check_range(top_k if top_k is not None else app.settings.top_k, "top_k", 1, TOP_K_MAX)
    if k_reranker is not None:
        check_range(k_reranker, "k_reranker", 1, K_RERANKER_MAX)
    if knowledge_ids is None:
        bases = [normalize.knowledge_base(item).knowledge_id for item in await app.client.list_knowledge()]
    else:
        if len(knowledge_ids) > KNOWLEDGE_IDS_MAX:
            raise invalid_argument(f"knowledge_ids has {len(knowledge_ids)} ids; the limit is {KNOWLEDGE_IDS_MAX}")
        bases = list(dict.fromkeys(check_id(i, "knowledge_id") for i in knowledge_ids))
    if not bases:
        return SearchResult(query=text, knowledge_ids=[], results=[], count=0)
    body = await app.client.query_collection(bases, text, k, k_reranker)
    only_base = bases[0] if len(bases) == 1 else None
    results = normalize.chunks(body, chunk_max_chars=app.settings.chunk_max_chars, knowledge_id=only_base)[:k]
    return SearchResult(query=text, knowledge_ids=bases, results=results, count=len(results))


async def get_file(app: App, file_id: str, offset: int, max_chars: int | None) -> FileText:
    check_id(file_id, "file_id")
    check_range(offset, "offset", 0, 10**12)
    limit = app.settings.file_max_chars
    size = check_range(max_chars, "max_chars", 1, limit) if max_chars is not None else limit
    return normalize.file_text(await app.client.file(file_id), offset=offset, max_chars=size)


async def health(app: App) -> Health:
    release = await app.client.release()
    visible = await app.client.count_knowledge()
    return Health(
        ok=True,
        openwebui_version=release.version,
        url=public_url(app.settings.url),
        family=release.family,
        capabilities=release.capabilities,
        knowledge_bases_visible=visible,
        server_version=__version__,
    )
