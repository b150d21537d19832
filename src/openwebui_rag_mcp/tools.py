"""What each tool does, independent of MCP: validate input, call Open WebUI, normalise the answer."""

from __future__ import annotations

from dataclasses import dataclass

from openwebui_rag_mcp import __version__, normalize
from openwebui_rag_mcp.app import App, check_id, check_range
from openwebui_rag_mcp.config import TOP_K_MAX
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


async def list_knowledge(app: App) -> KnowledgeList:
    items = list(
        app.readable.remember(
            app.client, (normalize.knowledge_base(item) for item in await app.client.list_knowledge())
        ).values()
    )
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
        listed = app.readable.remember(
            app.client, (normalize.knowledge_base(item) for item in await app.client.list_knowledge())
        )
        allowed = app.allowed_bases()
        # Under an allowlist, only the allowed bases the key can still read: Open WebUI refuses a whole search
        # for a non-admin key when one named base is unreadable.
        bases = list(listed) if allowed is None else [base for base in allowed if base in listed]
    else:
        if len(knowledge_ids) > KNOWLEDGE_IDS_MAX:
            raise invalid_argument(f"knowledge_ids has {len(knowledge_ids)} ids; the limit is {KNOWLEDGE_IDS_MAX}")
        bases = await app.check_searchable(knowledge_ids)
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


PROBE_BASES = 3
PROBE_WORDS = 12


@dataclass(frozen=True, slots=True)
class Probe:
    """What the deep health check found: `ok` True (retrieval answered with fragments), False (it answered
    nothing where it must have found something), None (inconclusive or nothing to search), and why."""

    ok: bool | None
    detail: str


def probe_query(text: str) -> str:
    """Words from a document's own text: a search for them must find that document, whatever the embedding model,
    unless a relevance threshold hides it."""
    words = [word for word in text.replace("#", " ").split() if any(ch.isalpha() for ch in word)]
    return " ".join(words[:PROBE_WORDS])[:300]


async def _threshold_may_hide(app: App) -> bool:
    """Whether an empty answer may come from Open WebUI's relevance threshold (it applies to hybrid search);
    only an admin key can read the retrieval settings, so for any other key it may."""
    try:
        config = await app.client.retrieval_config()
    except ToolFailure:
        return True
    threshold = config.get("RELEVANCE_THRESHOLD")
    hybrid = config.get("ENABLE_RAG_HYBRID_SEARCH")
    return bool(hybrid) and isinstance(threshold, int | float) and threshold > 0


async def retrieval_probe(app: App, readable: list[KnowledgeBase]) -> Probe:
    """Search a few bases for words taken from one of their own documents, through Open WebUI's embedding backend.

    The plain health check proves only that the Knowledge API accepts the key; this proves that retrieval (and so
    the embedding model Open WebUI is configured with) answers. A failing backend is an error (`upstream_error`).
    Empty answers are a failure only when no relevance threshold can explain them: Open WebUI swallows some
    failures, a vector-dimension mismatch for one, into empty results.
    """
    allowed = app.allowed_bases()
    candidates = [b for b in readable if (allowed is None or b.knowledge_id in allowed) and b.file_count != 0]
    candidates.sort(key=lambda base: base.file_count is None)  # bases known to hold documents first
    searched: list[str] = []
    for base in candidates[: PROBE_BASES * 2]:
        files, _ = await app.client.knowledge_files(base.knowledge_id, 1)
        if not files:
            continue
        document = normalize.file_text(await app.client.file(str(files[0].get("id"))), offset=0, max_chars=3_000)
        query = probe_query(document.text)
        if not query:
            continue
        body = await app.client.query_collection([base.knowledge_id], query, 3, None)
        if normalize.chunks(body, chunk_max_chars=100):
            return Probe(True, f"a search for words of a document in {base.name!r} found fragments")
        searched.append(base.name)
        if len(searched) == PROBE_BASES:
            break
    if not searched:
        return Probe(None, "no base this key can read has a document with text to search for")
    names = ", ".join(repr(name) for name in searched)
    if await _threshold_may_hide(app):
        return Probe(
            None,
            f"searches for words of documents in {names} found nothing; inconclusive, as Open WebUI's relevance "
            "threshold may hide them (an admin key lets this check read the setting)",
        )
    return Probe(
        False,
        f"searches for words of documents in {names} found nothing, with no relevance threshold to explain it; "
        "check Open WebUI's embedding settings (a changed embedding model needs a re-index)",
    )


async def health(app: App, deep: bool = False) -> Health:
    release = await app.client.release()
    if deep:  # the probe needs every base anyway, and the count comes with them
        bases = [normalize.knowledge_base(item) for item in await app.client.list_knowledge()]
        visible: int = len(bases)
        probe: Probe | None = await retrieval_probe(app, bases)
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
        retrieval_ok=probe.ok if probe else None,
        retrieval_detail=probe.detail if probe else None,
        server_version=__version__,
    )
