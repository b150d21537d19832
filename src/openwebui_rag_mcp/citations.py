"""Where a search hit is in its document, so that an agent can cite it and read around it: the page its loader
recorded, the lines of the document's extracted text the fragment covers (the lines `knowledge_get_file` reads), a
link that opens the document in Open WebUI, and the title and source given at upload.

Open WebUI's chunk metadata holds no usable position (`start_index` counts from the start of a section, and in a
base's collection it is usually 0) and, from 0.11, its own `source` (the filename) replaces the one given at upload.
So the documents of the hits are read with the caller's credential, one request each, a few at a time, and each
fragment is found in its text; a document is read again only when its text changed (`Documents`). A document that
cannot be read leaves its hits as they were, with no lines: a citation never fails a search. (The page is read from
the chunk's own metadata, in `normalize.page_of`.)
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import Chunk

log = logging.getLogger(__name__)

READERS = 4
# Characters of document text kept for citations, over all callers (about 64 MB at most).
CACHE_MAX_CHARS = 16 * 1024 * 1024
# Words a fragment is found by when it is not found whole (Open WebUI re-splits and re-joins some texts): the first
# ones give the first line, the last ones the last.
EDGE_WORDS = 12


def _words_pattern(words: Sequence[str]) -> re.Pattern[str]:
    # Any run of whitespace matches any other: chunk texts differ from the document in spaces and line breaks only.
    return re.compile(r"\s+".join(re.escape(word) for word in words))


def line_span(document: str, fragment: str) -> tuple[int, int] | None:
    """The first and last line (from 1, lines ending at "\\n" as `knowledge_get_file` counts them) of `document`
    that `fragment` covers, or None when it is not found there."""
    words = fragment.split()
    if not words:
        return None
    whole = _words_pattern(words).search(document)
    if whole is not None:
        start, end = whole.start(), whole.end()
    else:
        head = _words_pattern(words[:EDGE_WORDS]).search(document)
        if head is None:
            return None
        tail = _words_pattern(words[-EDGE_WORDS:]).search(document, head.start())
        start = head.start()
        end = tail.end() if tail is not None and len(words) > EDGE_WORDS else head.end()
    return document.count("\n", 0, start) + 1, document.count("\n", 0, max(start, end - 1)) + 1


def link(base_url: str | None, file_id: str, page: int | None = None) -> str | None:
    """A link that opens the document in a browser signed in to Open WebUI (as its own citations do), at the page
    where there is one; None when no public address is known."""
    if not base_url:
        return None
    address = f"{base_url}/api/v1/files/{quote(file_id, safe='')}/content"
    return f"{address}#page={page}" if page is not None else address


Document = tuple[str, Mapping[str, Any]]  # a file's extracted text and the metadata given at its upload


class Documents:
    """The texts of documents read for citations, by (caller, file, SHA-256 of the text): a hit whose chunk carries
    its document's hash (Open WebUI keeps the SHA-256 of the extracted text in every chunk) is cited without reading
    the document again, and a changed document has another hash. Only texts whose own hash is that one are kept, and
    only for the caller that read them; the least recently used go first past `max_chars` in all."""

    def __init__(self, max_chars: int = CACHE_MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._texts: OrderedDict[tuple[str, str, str], Document] = OrderedDict()
        self._chars = 0

    def get(self, key: tuple[str, str, str]) -> Document | None:
        text = self._texts.get(key)
        if text is not None:
            self._texts.move_to_end(key)
        return text

    def put(self, key: tuple[str, str, str], document: Document) -> None:
        if len(document[0]) > self.max_chars or key in self._texts:
            return
        self._texts[key] = document
        self._chars += len(document[0])
        while self._chars > self.max_chars:
            _, dropped = self._texts.popitem(last=False)
            self._chars -= len(dropped[0])


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


async def cite(
    read_file: Callable[[str], Awaitable[object]],
    base_url: str | None,
    results: Sequence[Chunk],
    sources: Sequence[tuple[str, str | None]],
    documents: Documents,
    caller: str,
) -> list[Chunk]:
    """`results` with page, lines, link and the title and source given at upload. `sources` are each fragment's
    whole text (`results` may hold it cut) and its document's hash; `read_file` is the client's `file`."""
    read: dict[str, Document | None] = {}
    gate = asyncio.Semaphore(READERS)

    async def fetch(file_id: str, expected_hash: str | None) -> None:
        async with gate:
            try:
                found = normalize.document(await read_file(file_id))
            except ToolFailure as failure:
                log.debug("search: no citation for file %s (%s)", file_id, failure.code)
                read[file_id] = None
                return
        read[file_id] = found
        if expected_hash and _sha256(found[0]) == expected_hash:
            documents.put((caller, file_id, expected_hash), found)

    hashes: dict[str, str | None] = {}
    for chunk, (_, text_hash) in zip(results, sources, strict=True):
        if chunk.file_id:
            hashes.setdefault(chunk.file_id, text_hash)
    for file_id, text_hash in hashes.items():
        cached = documents.get((caller, file_id, text_hash)) if text_hash else None
        if cached is not None:
            read[file_id] = cached
    await asyncio.gather(*(fetch(file_id, text_hash) for file_id, text_hash in hashes.items() if file_id not in read))
    cited: list[Chunk] = []
    for chunk, (text, _) in zip(results, sources, strict=True):
        found = read.get(chunk.file_id) if chunk.file_id else None
        span = line_span(found[0], text) if found else None
        uploaded = found[1] if found else {}
        cited.append(
            chunk.model_copy(
                update={
                    "title": normalize.text_or_none(uploaded.get("title")) or chunk.title,
                    "source": normalize.text_or_none(uploaded.get("source")) or chunk.source,
                    "start_line": span[0] if span else None,
                    "end_line": span[1] if span else None,
                    "link": link(base_url, chunk.file_id, chunk.page) if chunk.file_id else None,
                }
            )
        )
    return cited
