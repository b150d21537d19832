"""What each tool does, independent of MCP: validate input, call Open WebUI, normalise the answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from openwebui_rag_mcp import __version__, normalize
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import ID_PATTERN, TOP_K_MAX, Settings
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument
from openwebui_rag_mcp.models import (
    Controls,
    FileText,
    Health,
    KnowledgeBase,
    KnowledgeFiles,
    KnowledgeList,
    SearchResult,
)

QUERY_MAX_CHARS = 4_000
KNOWLEDGE_IDS_MAX = 100
K_RERANKER_MAX = 200


@dataclass(frozen=True, slots=True)
class App:
    """What every tool call shares for the life of the process."""

    settings: Settings
    client: OpenWebUIClient
    write_lock: asyncio.Lock
    # Bases this process created while OPENWEBUI_ALLOW_CREATE let it: usable alongside the allowlist.
    created: set[str] = field(default_factory=set)

    def allowed_bases(self) -> list[str] | None:
        """The bases this server may touch, or None when OPENWEBUI_KNOWLEDGE_IDS does not restrict it."""
        if self.settings.knowledge_ids is None:
            return None
        return [*self.settings.knowledge_ids, *sorted(self.created - set(self.settings.knowledge_ids))]

    def check_base(self, knowledge_id: str) -> str:
        """Refuse a base outside the allowlist, the same way whether it exists or not."""
        check_id(knowledge_id, "knowledge_id")
        allowed = self.allowed_bases()
        if allowed is not None and knowledge_id not in allowed:
            raise ToolFailure(
                "not_found",
                f"knowledge base {knowledge_id} is not available through this server (OPENWEBUI_KNOWLEDGE_IDS)",
                request_sent=False,
            )
        return knowledge_id

    async def check_file(self, file_id: str) -> str:
        """Under an allowlist, a file is reachable only when an allowed base holds it."""
        check_id(file_id, "file_id")
        allowed = self.allowed_bases()
        if allowed is None:
            return file_id
        listings = await asyncio.gather(
            *(self.client.knowledge_files(base, None) for base in allowed), return_exceptions=True
        )
        for listing in listings:
            # An allowed base that is gone or unshared holds nothing; anything else is a real failure.
            if isinstance(listing, ToolFailure) and listing.code not in ("not_found", "forbidden"):
                raise listing
            if isinstance(listing, BaseException) and not isinstance(listing, ToolFailure):
                raise listing
        if not any(
            item.get("id") == file_id
            for listing in listings
            if not isinstance(listing, BaseException)
            for item in listing[0]
        ):
            raise ToolFailure(
                "not_found",
                f"file {file_id} is in none of the knowledge bases this server may read (OPENWEBUI_KNOWLEDGE_IDS)",
                request_sent=False,
            )
        return file_id


def check_id(value: str, what: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise invalid_argument(f"{what} {shown!r} is not a valid Open WebUI id (letters, digits, '-' and '_' only)")
    return value


def check_range(value: int, name: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise invalid_argument(f"{name} must be between {low} and {high}, got {value}")
    return value


async def list_knowledge(app: App) -> KnowledgeList:
    items = [normalize.knowledge_base(item) for item in await app.client.list_knowledge()]
    allowed = app.allowed_bases()
    if allowed is not None:
        items = [item for item in items if item.knowledge_id in allowed]
    return KnowledgeList(items=items, count=len(items))


async def list_files(app: App, knowledge_id: str, page: int | None) -> KnowledgeFiles:
    app.check_base(knowledge_id)
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
        readable = [normalize.knowledge_base(item).knowledge_id for item in await app.client.list_knowledge()]
        allowed = app.allowed_bases()
        # Under an allowlist, only the allowed bases the key can still read: Open WebUI refuses a whole search
        # for a non-admin key when one named base is unreadable.
        bases = readable if allowed is None else [base for base in allowed if base in readable]
    else:
        if len(knowledge_ids) > KNOWLEDGE_IDS_MAX:
            raise invalid_argument(f"knowledge_ids has {len(knowledge_ids)} ids; the limit is {KNOWLEDGE_IDS_MAX}")
        bases = list(dict.fromkeys(app.check_base(i) for i in knowledge_ids))
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
    await app.check_file(file_id)
    return normalize.file_text(await app.client.file(file_id), offset=offset, max_chars=size)


PROBE_QUERY = "openwebui-rag-mcp health probe"


async def retrieval_probe(app: App, readable: list[KnowledgeBase]) -> bool | None:
    """One small search through Open WebUI's embedding backend: whether it found anything in a base that has
    documents; None when no base has documents to search.

    The plain health check proves only that the Knowledge API accepts the key; this proves that retrieval
    (and so the embedding model Open WebUI is configured with) answers. A failing backend is an error
    (`upstream_error`); an empty answer from a base with documents is `False` (Open WebUI swallows some
    failures, a vector-dimension mismatch for one, into empty results).
    """
    allowed = app.allowed_bases()
    bases = [base for base in readable if (allowed is None or base.knowledge_id in allowed) and base.file_count != 0]
    if not bases:
        return None
    base = bases[0]
    body = await app.client.query_collection([base.knowledge_id], PROBE_QUERY, 1, None)
    found = bool(normalize.chunks(body, chunk_max_chars=100))
    if base.file_count is None and not found:
        return None  # the release does not say whether the base has documents
    return found


async def health(app: App, deep: bool = False) -> Health:
    release = await app.client.release()
    if deep:  # the probe needs every base anyway, and the count comes with them
        bases = [normalize.knowledge_base(item) for item in await app.client.list_knowledge()]
        visible: int = len(bases)
        probe = await retrieval_probe(app, bases)
    else:
        visible, probe = await app.client.count_knowledge(), None
    return Health(
        ok=True,
        openwebui_version=release.version,
        url=app.settings.url,
        family=release.family,
        capabilities=release.capabilities,
        controls=Controls(
            read_only=app.settings.read_only,
            knowledge_ids=app.allowed_bases(),
            allow_create=app.settings.allow_create,
            disabled_tools=sorted(app.settings.disabled_tools),
        ),
        knowledge_bases_visible=visible,
        retrieval_ok=probe,
        server_version=__version__,
    )
