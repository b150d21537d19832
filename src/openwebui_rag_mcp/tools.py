"""What each tool does, independent of MCP: validate input, call Open WebUI, normalise the answer."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from openwebui_rag_mcp import __version__, citations, filters, hybrid, normalize
from openwebui_rag_mcp import pending as pending_list
from openwebui_rag_mcp.app import App, check_id, check_range
from openwebui_rag_mcp.config import TOP_K_MAX
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument
from openwebui_rag_mcp.models import (
    Chunk,
    Controls,
    FileItem,
    FileText,
    Health,
    KnowledgeBase,
    KnowledgeFiles,
    KnowledgeList,
    SearchResult,
)

QUERY_MAX_CHARS = 4_000
KNOWLEDGE_IDS_MAX = 100


# -- the lists: filtered, paged, never silently short --------------------------------------------------------------

LIST_LIMIT = 30  # items per answer when `limit` is not given
LIST_LIMIT_MAX = 200
LIST_QUERY_MAX_CHARS = 500
DESCRIPTION_MAX_CHARS = 200  # a longer base description is cut, ending in "…"
UPSTREAM_PAGE = 30  # Open WebUI's fixed page size for bases and a base's files (0.6.42+)
_LIST_SCOPE = "bases"  # the scope of a knowledge_list cursor; a knowledge_files cursor's is its knowledge_id


def _cursor(scope: str, offset: int, query: str | None, total: int) -> str:
    """An opaque cursor: where the next answer starts, in which listing, and how long the list was then."""
    payload = json.dumps([scope, offset, query, total], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def _position(scope: str, cursor: str | None, query: str | None) -> tuple[int, str | None, int | None]:
    """(offset, query, total when the cursor was made) of a call; a cursor brings its query along."""
    if cursor is None:
        return 0, query, None
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, UnicodeError, RecursionError):
        value = None
    if not (
        isinstance(value, list)
        and len(value) == 4
        and value[0] == scope
        and isinstance(value[1], int)
        and value[1] >= 0
        and (value[2] is None or isinstance(value[2], str))
        and isinstance(value[3], int)
    ):
        raise invalid_argument("cursor is not a next_cursor of this list; list again without cursor")
    if query is not None and query != value[2]:
        raise invalid_argument("cursor belongs to a list with another query; repeat that query, or drop the cursor")
    return value[1], value[2], value[3]


def _list_query(query: str | None) -> str | None:
    text = " ".join((query or "").split())
    if len(text) > LIST_QUERY_MAX_CHARS:
        raise invalid_argument(f"query is {len(text)} characters long; the limit is {LIST_QUERY_MAX_CHARS}")
    return text or None


def _matches(query: str, *texts: str | None) -> bool:
    """A case-insensitive substring, as Open WebUI's ILIKE '%query%' matches it: `lower()`, not `casefold()` ("ss" is
    not "ß"), and the text as it is (a query's single space does not match a line break)."""
    needle = query.lower()
    return any(text is not None and needle in text.lower() for text in texts)


def _hint(shown: int, offset: int, total: int, what: str, query: str | None, seen_total: int | None) -> str | None:
    notes = []
    if seen_total is not None and seen_total != total:
        notes.append(
            f"the list changed since the cursor was made ({seen_total} then, {total} now), so items may have "
            "shifted: list again without cursor to be sure nothing was missed"
        )
    rest = total - offset - shown
    if rest > 0:
        narrow = "" if query is None else " further"
        notes.append(f"{rest} more {what}: pass cursor=next_cursor, or narrow{narrow} with query")
    elif total == 0 and query is not None:
        notes.append(f"no {what} match query {query!r}; try a shorter query")
    return "; ".join(notes) or None


async def _window(
    read: Callable[[int], Awaitable[tuple[list[Mapping[str, Any]], int | None]]], offset: int, limit: int
) -> tuple[list[Mapping[str, Any]], int] | None:
    """Items offset..offset+limit of a list Open WebUI pages by UPSTREAM_PAGE, read from only the pages that hold
    them, and its total; None when the answers do not look like full pages of that size (then read everything)."""
    first_page = offset // UPSTREAM_PAGE + 1
    last_page = (offset + limit - 1) // UPSTREAM_PAGE + 1
    first, total = await read(first_page)
    if total is None:
        return None
    last_page = max(first_page, min(last_page, -(-total // UPSTREAM_PAGE)))
    pages = [first]
    for answer in await asyncio.gather(*map(read, range(first_page + 1, last_page + 1)), return_exceptions=True):
        if isinstance(answer, BaseException):  # every page has been answered; the first failure is reported
            raise answer
        pages.append(answer[0])
    for number, items in enumerate(pages, first_page):
        if len(items) != min(UPSTREAM_PAGE, max(0, total - (number - 1) * UPSTREAM_PAGE)):
            return None  # another page size, or the list changed between the pages
    start = offset - (first_page - 1) * UPSTREAM_PAGE
    return [item for items in pages for item in items][start : start + limit], total


def _cut_description(base: KnowledgeBase) -> KnowledgeBase:
    text = base.description
    if text is None or len(text) <= DESCRIPTION_MAX_CHARS:
        return base
    return base.model_copy(update={"description": text[: DESCRIPTION_MAX_CHARS - 1].rstrip() + "…"})


async def all_knowledge(app: App) -> list[KnowledgeBase]:
    """Every base the key can read and the allowlist allows, in Open WebUI's order; remembered for the search
    access check."""
    listed = app.readable.remember(
        app.client, (normalize.knowledge_base(item) for item in await app.client.list_knowledge())
    )
    allowed = app.allowed_bases()
    return [base for base in listed.values() if allowed is None or base.knowledge_id in allowed]


def server_side_query(query: str) -> bool:
    """Whether Open WebUI's own search can pre-filter for `query` without missing a base: its LIKE folds case only
    for ASCII on SQLite, and PostgreSQL reads a backslash as an escape."""
    return query.isascii() and "\\" not in query


async def _matching_bases(app: App, query: str | None) -> list[KnowledgeBase]:
    if query is not None and server_side_query(query) and (await app.client.release()).paged_lists:
        # Open WebUI's search narrows the list upstream; being a part of it, it is not remembered.
        found = [normalize.knowledge_base(item) for item in await app.client.search_knowledge(query)]
        allowed = app.allowed_bases()
        bases = [base for base in found if allowed is None or base.knowledge_id in allowed]
    else:
        bases = await all_knowledge(app)
    if query is None:
        return bases
    return [base for base in bases if _matches(query, base.name, base.description)]


async def list_knowledge(
    app: App, *, query: str | None = None, limit: int | None = None, cursor: str | None = None
) -> KnowledgeList:
    size = check_range(limit, "limit", 1, LIST_LIMIT_MAX) if limit is not None else LIST_LIMIT
    offset, text, seen_total = _position(_LIST_SCOPE, cursor, _list_query(query))
    # Without a query every base is read, as the total, the allowlist and the search access check need them all.
    bases = await _matching_bases(app, text)
    items, total = bases[offset : offset + size], len(bases)
    end = offset + len(items)
    return KnowledgeList(
        total=total,
        count=len(items),
        next_cursor=_cursor(_LIST_SCOPE, end, text, total) if end < total else None,
        hint=_hint(len(items), offset, total, "bases", text, seen_total),
        items=[_cut_description(base) for base in items],
    )


async def all_files(app: App, knowledge_id: str) -> list[FileItem]:
    """Every document of a base (allowlist checked), in Open WebUI's order."""
    app.check_base(knowledge_id)
    raw, _ = await app.client.knowledge_files(knowledge_id, None)
    return [normalize.file_item(item) for item in raw]


async def list_files(
    app: App,
    knowledge_id: str,
    *,
    query: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    page: int | None = None,
    where: Mapping[str, Any] | None = None,
    changed_after: str | None = None,
    changed_before: str | None = None,
    pending: int | None = None,
    progress: pending_list.Progress = pending_list.no_progress,
) -> KnowledgeFiles:
    if pending is not None:
        others = (query, limit, cursor, page, where, changed_after, changed_before)
        return await pending_list.pending_files(
            app, knowledge_id, pending, progress, others_given=any(value is not None for value in others)
        )
    app.check_base(knowledge_id)
    size = check_range(limit, "limit", 1, LIST_LIMIT_MAX) if limit is not None else LIST_LIMIT
    narrowed = filters.make_filter(where, changed_after, changed_before)
    release = await app.client.release() if narrowed is not None and narrowed.where else None
    if release is not None and not release.capabilities.upload_metadata:
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} keeps no metadata given at upload (0.6.23 and later do), so no document "
            "can be told by it here; filter by changed_after and changed_before only",
        )
    # A cursor belongs to one filter: the next page of another would skip or repeat documents.
    scope = knowledge_id if narrowed is None else f"{knowledge_id} {narrowed.describe()}"
    offset, text, seen_total = _position(scope, cursor, _list_query(query))
    if page is not None:  # the parameter before `cursor`: a page of Open WebUI's size
        check_range(page, "page", 1, 100_000)
        if cursor is not None:
            raise invalid_argument("give cursor or page, not both")
        offset, size = (page - 1) * UPSTREAM_PAGE, limit or UPSTREAM_PAGE
    window = None
    if text is None and narrowed is None and (await app.client.release()).paged_lists:

        async def read(number: int) -> tuple[list[Mapping[str, Any]], int | None]:
            return await app.client.knowledge_files(knowledge_id, number)

        window = await _window(read, offset, size)
    if window is not None:
        items, total = [normalize.file_item(item) for item in window[0]], window[1]
    else:
        rows, _ = await app.client.knowledge_files(knowledge_id, None)
        files = [normalize.file_item(row) for row in rows if narrowed is None or narrowed.matches(row)]
        if text is not None:
            files = [item for item in files if _matches(text, item.filename, item.title)]
        items, total = files[offset : offset + size], len(files)
    end = offset + len(items)
    hint = _hint(len(items), offset, total, "documents", text, seen_total)
    if total == 0 and narrowed is not None:
        hint = f"no document of this base matches {narrowed.describe()}" + (f" and query {text!r}" if text else "")
    return KnowledgeFiles(
        knowledge_id=knowledge_id,
        total=total,
        count=len(items),
        next_cursor=_cursor(scope, end, text, total) if end < total else None,
        hint=hint,
        items=items,
    )


async def search(
    app: App,
    query: str,
    *,
    knowledge_ids: list[str] | None = None,
    top_k: int | None = None,
    k_reranker: int | None = None,
    file_ids: list[str] | None = None,
    folder: str | None = None,
    where: Mapping[str, Any] | None = None,
    changed_after: str | None = None,
    changed_before: str | None = None,
    min_score: float | None = None,
    hybrid_wanted: bool | None = None,
    bm25_weight: float | None = None,
) -> SearchResult:
    text = query.strip()
    if not text:
        raise invalid_argument("query must not be empty")
    if len(text) > QUERY_MAX_CHARS:
        raise invalid_argument(f"query is {len(text)} characters long; the limit is {QUERY_MAX_CHARS}")
    k = check_range(top_k if top_k is not None else app.settings.top_k, "top_k", 1, TOP_K_MAX)
    controls = hybrid.controls(k_reranker, hybrid_wanted, bm25_weight)
    if min_score is not None and not math.isfinite(min_score):
        raise invalid_argument("min_score must be a finite number")
    narrowed = filters.make_filter(where, changed_after, changed_before)
    if folder is not None or narrowed is not None:
        if file_ids is not None:
            what = "folder" if folder is not None else "a filter (where, changed_after, changed_before)"
            raise invalid_argument(f"give {what} or file_ids, not both: file_ids already names the documents")
        return await _search_narrowed(app, text, knowledge_ids, folder, narrowed, k, controls, min_score)
    if file_ids is not None:
        return await _search_documents(app, text, knowledge_ids, file_ids, k, controls, min_score)
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
    body = await _query(app, bases, text, k, controls)
    only_base = bases[0] if len(bases) == 1 else None
    results = await _cited(app, body, k, min_score, controls, base=only_base)
    return SearchResult(query=text, knowledge_ids=bases, results=results, count=len(results))


async def _query(app: App, collections: list[str], text: str, k: int, controls: hybrid.Controls) -> object:
    """The one retrieval request of a search, once the release is known to read its hybrid controls as meant."""
    if controls.given:
        hybrid.check_release(controls, await app.client.release())
    return await app.client.query_collection(collections, text, k, controls.fields())


async def _cited(
    app: App,
    body: object,
    k: int,
    min_score: float | None,
    controls: hybrid.Controls,
    *,
    base: str | Mapping[str, str] | None = None,
    checked: Mapping[str, object] | None = None,
) -> list[Chunk]:
    """The first `k` hits of a retrieval answer at or above `min_score`, each with its citation (page, lines, link),
    once the answer is known to come from the retrieval mode `controls` asked for. `checked`: documents this call
    has just read (to check the key may read them), cited without reading them again.

    The threshold is applied here, on the relevance Open WebUI answers with (`distance`), in every retrieval mode and
    release: its own `r` works only in hybrid search and hides the best score a caller needs to hear about."""
    hits = normalize.hits(body, chunk_max_chars=app.settings.chunk_max_chars, base=base)[:k]
    if controls.given:
        hybrid.confirm(controls, [hit.chunk for hit in hits], await app.client.release())
    if min_score is not None and hits:
        kept = [hit for hit in hits if hit.chunk.distance is not None and hit.chunk.distance >= min_score]
        if not kept:
            raise _nothing_above(min_score, [hit.chunk for hit in hits])
        hits = kept
    results = [hit.chunk for hit in hits]
    sources = [(hit.text, hit.document_hash) for hit in hits]

    async def read_file(file_id: str) -> object:
        return checked[file_id] if checked and file_id in checked else await app.client.file(file_id)

    return await citations.cite(read_file, app.link_base(), results, sources, app.documents, app.caller())


def _nothing_above(min_score: float, results: list[Chunk]) -> ToolFailure:
    """Fragments came back, none relevant enough: said as such, with the best one, never as an empty list."""
    scored = [chunk for chunk in results if chunk.distance is not None]
    if not scored:
        return ToolFailure(
            "not_found",
            f"Open WebUI gave {len(results)} fragments without a relevance score, so none can be held to min_score "
            f"{min_score:g}; search without min_score",
        )
    best = max(scored, key=lambda chunk: chunk.distance or 0.0)
    named = f"file_id {best.file_id}" + (f", {best.title!r}" if best.title else "") if best.file_id else "no file_id"
    return ToolFailure(
        "not_found",
        f"nothing above the threshold: none of the {len(results)} fragments found reached min_score {min_score:g}; "
        f"the best scored {best.distance:g} ({named}). Lower min_score, or rephrase the query",
    )


async def _search_documents(
    app: App,
    text: str,
    knowledge_ids: list[str] | None,
    file_ids: list[str],
    k: int,
    controls: hybrid.Controls,
    min_score: float | None,
) -> SearchResult:
    """Search inside chosen documents: Open WebUI keeps one collection per file, `file-<id>`."""
    if knowledge_ids is not None:
        raise invalid_argument("give knowledge_ids or file_ids, not both: file_ids already names the documents")
    if len(file_ids) > KNOWLEDGE_IDS_MAX:
        raise invalid_argument(f"file_ids has {len(file_ids)} ids; the limit is {KNOWLEDGE_IDS_MAX}")
    checked: dict[str, object] = {}
    files = await app.check_files_searchable(file_ids, checked)
    if not files:
        return SearchResult(query=text, knowledge_ids=[], results=[], count=0)
    body = await _query(app, [f"file-{file_id}" for file_id in files], text, k, controls)
    results = await _cited(app, body, k, min_score, controls, checked=checked)
    return SearchResult(query=text, knowledge_ids=[], results=results, count=len(results))


async def _search_narrowed(
    app: App,
    text: str,
    knowledge_ids: list[str] | None,
    folder: str | None,
    narrowed: filters.Filter | None,
    k: int,
    controls: hybrid.Controls,
    min_score: float | None,
) -> SearchResult:
    """Search the documents of the named bases that are in a folder (and the folders below it) and that a filter
    lets through.

    Open WebUI's retrieval can be narrowed to neither, so the qualifying documents are read from the bases' own lists
    (folder lists, document lists; both check access on every release) and searched through their own collections,
    `file-<id>`, in one retrieval request.
    """
    path = folder.strip().strip("/") if folder is not None else None
    if path == "":
        raise invalid_argument("folder must name a folder, like 'guides/2024'; leave it out to search whole bases")
    what = "folder" if narrowed is None else "a filter"
    if not knowledge_ids:
        raise invalid_argument(f"{what} needs knowledge_ids: the bases to narrow the search to")
    if len(knowledge_ids) > KNOWLEDGE_IDS_MAX:
        raise invalid_argument(f"knowledge_ids has {len(knowledge_ids)} ids; the limit is {KNOWLEDGE_IDS_MAX}")
    release = await app.client.release()
    if path is not None and not release.folders:
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} has no folders in knowledge bases (0.9.6 and later do), so a search "
            "cannot be narrowed to one here; search the whole base, or name the documents with file_ids",
        )
    if narrowed is not None and narrowed.where and not release.capabilities.upload_metadata:
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} keeps no metadata given at upload (0.6.23 and later do), so no document "
            "can be told by it here; filter by changed_after and changed_before only",
        )
    bases = await app.check_searchable(knowledge_ids)
    base_of: dict[str, str] = {}
    for base in bases:
        found = await qualifying(app, base, path, narrowed)
        for file_id in found:
            base_of.setdefault(file_id, base)
        if len(base_of) > KNOWLEDGE_IDS_MAX:
            raise invalid_argument(
                f"more than {KNOWLEDGE_IDS_MAX} documents qualify ({what}); a narrowed search covers at most "
                f"{KNOWLEDGE_IDS_MAX}: narrow it further"
            )
    if not base_of:
        where = [f"in folder {path!r} or below it" if path is not None else ""]
        where += [f"matching {narrowed.describe()}" if narrowed is not None else ""]
        see = (
            "knowledge_files shows each document's folder (Open WebUI 0.12+)"
            if narrowed is None
            else "knowledge_files takes the same filter, and knowledge_get_file shows a document's metadata"
        )
        raise ToolFailure(
            "not_found",
            f"no document {' and '.join(part for part in where if part)} is in "
            f"{', '.join(bases) or 'the named bases'}, so nothing was searched; {see}",
        )
    body = await _query(app, [f"file-{file_id}" for file_id in base_of], text, k, controls)
    results = await _cited(app, body, k, min_score, controls, base=base_of)
    return SearchResult(query=text, knowledge_ids=bases, results=results, count=len(results))


FILTERED_FOLDER_MAX = 10_000  # documents a folder may hold when a filter narrows it further


async def qualifying(app: App, knowledge_id: str, path: str | None, narrowed: filters.Filter | None) -> list[str]:
    """The documents of a base in the folder at `path` (and below it), if given, that `narrowed` lets through."""
    in_folder: list[str] | None = None
    if path is not None:
        room = KNOWLEDGE_IDS_MAX if narrowed is None else FILTERED_FOLDER_MAX
        in_folder = await _documents_in_folder(app, knowledge_id, path, room)
    if narrowed is None or in_folder == []:
        return in_folder or []
    rows, _ = await app.client.knowledge_files(knowledge_id, None)
    passing = [normalize.file_record(row).file_id for row in rows if narrowed.matches(row)]
    if in_folder is None:
        return passing
    chosen = set(in_folder)
    return [file_id for file_id in passing if file_id in chosen]


async def _documents_in_folder(app: App, knowledge_id: str, path: str, room: int) -> list[str]:
    """The documents in the folder at `path` of a base and below it, reading only that part of the base: one folder
    list per level down to it, then each folder of the subtree. More than `room` documents is refused."""
    at = [""]  # the folders matching the path so far ("": the top); a name may repeat at the top level
    for name in path.split("/"):
        at = [
            subfolder.folder_id
            for folder_id in at
            for subfolder in (await app.client.folder(knowledge_id, folder_id, documents=False))[1]
            if subfolder.name == name
        ]
        if not at:
            return []
    found = await app.client.folder_documents(knowledge_id, [(folder_id, path) for folder_id in at], room)
    if len(found) > room:
        raise invalid_argument(
            f"folder {path!r} holds more documents than a folder search covers ({KNOWLEDGE_IDS_MAX} in all): name a "
            "folder further down"
        )
    return [file_id for file_id, _ in found]


LINES_MAX = 2_000


async def get_file(
    app: App,
    file_id: str,
    *,
    offset: int = 0,
    max_chars: int | None = None,
    start_line: int | None = None,
    end_line: int | None = None,
) -> FileText:
    check_id(file_id, "file_id")
    check_range(offset, "offset", 0, 10**12)
    limit = app.settings.file_max_chars
    size = check_range(max_chars, "max_chars", 1, limit) if max_chars is not None else limit
    lines: tuple[int, int] | None = None
    if start_line is not None or end_line is not None:
        if offset:
            raise invalid_argument("give offset or start_line/end_line, not both")
        first = check_range(start_line or 1, "start_line", 1, 10**9)
        last = check_range(end_line if end_line is not None else first + 99, "end_line", first, 10**9)
        lines = (first, min(last, first + LINES_MAX - 1))
    await app.check_file(file_id)
    body = await app.client.file(file_id)
    if lines is not None:
        return normalize.file_lines(body, first=lines[0], last=lines[1], max_chars=size)
    return normalize.file_text(body, offset=offset, max_chars=size)


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


def _mode(app: App, found: list[Chunk]) -> str:
    """What the probe's answer says about OPENWEBUI_HYBRID_SEARCH, when it disagrees with the mode that ran."""
    ran = hybrid.ran_hybrid(found)
    if ran and not app.settings.hybrid_search:
        return "; Open WebUI ran hybrid search: OPENWEBUI_HYBRID_SEARCH=true lists knowledge_search's hybrid controls"
    if ran is False and app.settings.hybrid_search:
        return "; Open WebUI ran vector search only, so OPENWEBUI_HYBRID_SEARCH's controls do nothing here"
    return ""


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
        body = await app.client.query_collection([base.knowledge_id], query, 3)
        found = [hit.chunk for hit in normalize.hits(body, chunk_max_chars=100)]
        if found:
            return Probe(True, f"a search for words of a document in {base.name!r} found fragments" + _mode(app, found))
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
    # Over HTTP the callers are many and not the operator: where Open WebUI is and which bases the operator allowed
    # (ids of bases a caller may not be able to read) are not theirs to see; knowledge_list shows what they can read.
    private = app.settings.transport == "streamable-http"
    return Health(
        ok=True,
        openwebui_version=release.version,
        url=None if private else app.settings.url,
        family=release.family,
        capabilities=release.capabilities,
        controls=Controls(
            read_only=app.settings.read_only,
            knowledge_ids=None if private else app.allowed_bases(),
            allow_create=app.settings.allow_create,
            disabled_tools=sorted(app.settings.disabled_tools),
        ),
        knowledge_bases_visible=visible,
        retrieval_ok=probe.ok if probe else None,
        retrieval_detail=probe.detail if probe else None,
        server_version=__version__,
    )
