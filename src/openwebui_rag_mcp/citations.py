"""Where a search hit is in its document, so that an agent can cite it and read around it: the page its loader
recorded, the lines of the document's extracted text the fragment covers (the lines `knowledge_get_file` reads), a
link that opens the document in Open WebUI, and the title and source given at upload.

Open WebUI's chunk metadata holds no usable position (`start_index` counts from the start of a section, and in a
base's collection it is usually 0) and, from 0.11, its own `source` (the filename) replaces the one given at upload.
So the documents of the hits are read with the caller's credential, one request each, a few at a time, and each
fragment is found in its text; a document is read again only when its text changed, and split into words again only
then (`Documents` keeps it split). A document that cannot be read leaves its hits as they were, with no lines: a
citation never fails a search. (The page is read from the chunk's own metadata, in `normalize.page_of`.)
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

import anyio

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import Chunk

log = logging.getLogger(__name__)

READERS = 4
LABEL_MAX_CHARS = 1_000  # of a title or a source kept for a citation
ENTRY_CHARS = 512  # an entry's key and bookkeeping, counted as characters
# Characters of document text kept for citations, over all callers (about 64 MB at most).
CACHE_MAX_CHARS = 16 * 1024 * 1024
LINE_CHARS = 4  # what a line's two numbers in `Words` take, counted as characters (16 bytes, 4 bytes a character)
# Fragments of documents already split, up to this many characters of words in all, are placed on the event loop:
# a few `str.find` over them (well under a millisecond) cost less CPU than handing them to a worker thread and back.
INLINE_CHARS = 256 * 1024
# Words a fragment is found by when it is not found whole (Open WebUI re-splits and re-joins some texts): the first
# ones give the first line, the last ones the last.
EDGE_WORDS = 12


@dataclass(frozen=True, slots=True)
class Words:
    """A text's words, single-spaced, line after line: a fragment is found with `str.find` (linear, whatever the
    text) however its whitespace differs, as chunk texts differ from their document in spaces and line breaks only.
    Built line by line (not word by word: a table of short cells has a million words)."""

    joined: str  # the words of every line that has any, one space between words and between lines
    starts: array[int]  # where each of those lines starts in `joined`
    numbers: array[int]  # and its number in the text, from 1, lines ending at "\n" as knowledge_get_file counts them

    @classmethod
    def of(cls, text: str) -> Words:
        parts: list[str] = []
        starts = array("q")
        numbers = array("q")
        offset = 0
        for number, line in enumerate(text.split("\n"), start=1):
            words = line.split()
            if words:
                squeezed = " ".join(words)
                parts.append(squeezed)
                starts.append(offset)
                numbers.append(number)
                offset += len(squeezed) + 1
        return cls(" ".join(parts), starts, numbers)

    @property
    def cost(self) -> int:
        """What it takes in memory, in characters: the words and the numbers of their lines."""
        return len(self.joined) + LINE_CHARS * len(self.starts)

    def line_at(self, position: int) -> int:
        return self.numbers[bisect_right(self.starts, position) - 1]

    def find(self, words: Sequence[str], after: int = 0) -> tuple[int, int] | None:
        """Where `words` occur in `joined`, from `after` on, as (first, last) character; the first and last of them
        may be parts of words (a splitter by tokens cuts inside words)."""
        needle = " ".join(words)
        position = self.joined.find(needle, after) if needle else -1
        return None if position < 0 else (position, position + len(needle) - 1)


def place(document: Words, fragment: str) -> tuple[int, int] | None:
    """The first and last line (from 1, lines ending at "\\n" as `knowledge_get_file` counts them) of the document
    that `fragment` covers, or None when it is not found there."""
    words = fragment.split()
    found = document.find(words)
    if found is None:
        head = document.find(words[:EDGE_WORDS])
        if head is None:
            return None
        tail = document.find(words[-EDGE_WORDS:], head[0]) if len(words) > EDGE_WORDS else None
        found = (head[0], tail[1] if tail is not None else head[1])
    return document.line_at(found[0]), document.line_at(found[1])


def line_span(document: str, fragment: str) -> tuple[int, int] | None:
    """`place` in a document given as its text."""
    return place(Words.of(document), fragment)


def link(base_url: str | None, file_id: str, page: int | None = None) -> str | None:
    """A link that opens the document in a browser signed in to Open WebUI (as its own citations do), at the page
    where there is one; None when no public address is known."""
    if not base_url:
        return None
    address = f"{base_url}/api/v1/files/{quote(file_id, safe='')}/content"
    return f"{address}#page={page}" if page is not None else address


@dataclass(frozen=True, slots=True)
class Document:
    """What a citation needs of a document: its extracted text, and the title and source given at its upload."""

    text: str
    title: str | None
    source: str | None

    @classmethod
    def of(cls, body: object) -> Document:
        text, uploaded = normalize.document(body)
        title, source = normalize.text_or_none(uploaded.get("title")), normalize.text_or_none(uploaded.get("source"))
        return cls(text, title[:LABEL_MAX_CHARS] if title else None, source[:LABEL_MAX_CHARS] if source else None)

    def split(self) -> Split:
        """The document as citations use it and `Documents` keeps it: its words (linear in the text, so called in a
        worker thread for a document just read), the title and the source."""
        return Split(Words.of(self.text), self.title, self.source)


@dataclass(frozen=True, slots=True)
class Split:
    """A document split into words for placing fragments, with the title and source given at its upload."""

    words: Words
    title: str | None
    source: str | None

    @property
    def cost(self) -> int:
        """What it takes in memory, in characters: its words and a bound for the rest of an entry."""
        return self.words.cost + 2 * LABEL_MAX_CHARS + ENTRY_CHARS


# A read under way: what its waiters get (the document, or None if it could not be read, and whether its hash was the
# one expected), or None when the read was cancelled and each waiter must read for itself.
_Reading = asyncio.Future[tuple[Document | None, bool] | None]


class Documents:
    """The documents read for citations, split into words, by (caller, file, SHA-256 of the text): a hit whose chunk
    carries its document's hash (Open WebUI keeps the SHA-256 of the extracted text in every chunk) is cited without
    reading the document again or splitting it again, and a changed document has another hash. Only texts whose own
    hash is that one are kept, and only for the caller that read them; the least recently used go first past
    `max_chars` in all."""

    def __init__(self, max_chars: int = CACHE_MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._texts: OrderedDict[tuple[str, str, str], Split] = OrderedDict()
        self._chars = 0
        # Reads under way, so that searches of one caller at the same moment (agents asking alike) read a document
        # once.
        self._reading: dict[tuple[str, str, str], _Reading] = {}

    def reading(self, key: tuple[str, str, str]) -> _Reading | None:
        return self._reading.get(key)

    def begin(self, key: tuple[str, str, str]) -> _Reading:
        future: _Reading = asyncio.get_running_loop().create_future()
        self._reading[key] = future
        return future

    def end(self, key: tuple[str, str, str], future: _Reading) -> None:
        if not future.done():  # the read was cancelled: each waiter reads for itself
            future.set_result(None)
        if self._reading.get(key) is future:
            del self._reading[key]

    def get(self, key: tuple[str, str, str]) -> Split | None:
        text = self._texts.get(key)
        if text is not None:
            self._texts.move_to_end(key)
        return text

    def put(self, key: tuple[str, str, str], document: Split) -> None:
        if document.cost > self.max_chars or key in self._texts:
            return
        self._texts[key] = document
        self._chars += document.cost
        while self._chars > self.max_chars:
            _, dropped = self._texts.popitem(last=False)
            self._chars -= dropped.cost


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
    read: dict[str, Document | Split | None] = {}
    verified: dict[str, str] = {}  # file_id: the hash its text was found to have, so it is kept once split
    gate = asyncio.Semaphore(READERS)

    async def fetch(file_id: str, expected_hash: str | None) -> None:
        key = (caller, file_id, expected_hash) if expected_hash else None
        under_way = documents.reading(key) if key else None
        if under_way is not None and expected_hash:
            shared = await asyncio.shield(under_way)
            if shared is not None:
                read[file_id], matches = shared
                if matches:
                    verified[file_id] = expected_hash
                return
        mine = documents.begin(key) if key else None
        try:
            async with gate:
                try:
                    found = Document.of(await read_file(file_id))
                except ToolFailure as failure:
                    log.debug("search: no citation for file %s (%s)", file_id, failure.code)
                    read[file_id] = None
                    if mine is not None:
                        mine.set_result((None, False))
                    return
            read[file_id] = found
            matches = bool(expected_hash) and _sha256(found.text) == expected_hash
            if matches and expected_hash:
                verified[file_id] = expected_hash
            if mine is not None:
                mine.set_result((found, matches))
        finally:
            if key is not None and mine is not None:
                documents.end(key, mine)

    hashes: dict[str, str | None] = {}
    for chunk, (_, text_hash) in zip(results, sources, strict=True):
        if chunk.file_id:
            hashes.setdefault(chunk.file_id, text_hash)
    for file_id, text_hash in hashes.items():
        cached = documents.get((caller, file_id, text_hash)) if text_hash else None
        if cached is not None:
            read[file_id] = cached
    await asyncio.gather(*(fetch(file_id, text_hash) for file_id, text_hash in hashes.items() if file_id not in read))
    # Splitting a document reads it word by word: in a worker thread, so the event loop goes on. Documents split
    # before are only searched, here unless they are long.
    if _split_and_short(read.values()):
        spans, split = _place_all(results, sources, read)
    else:
        spans, split = await anyio.to_thread.run_sync(_place_all, results, sources, read)
    for file_id, text_hash in verified.items():
        if file_id in split:
            documents.put((caller, file_id, text_hash), split[file_id])
    cited: list[Chunk] = []
    for chunk, span in zip(results, spans, strict=True):
        found = read.get(chunk.file_id) if chunk.file_id else None
        cited.append(
            chunk.model_copy(
                update={
                    "title": (found.title if found else None) or chunk.title,
                    "source": (found.source if found else None) or chunk.source,
                    "start_line": span[0] if span else None,
                    "end_line": span[1] if span else None,
                    "link": link(base_url, chunk.file_id, chunk.page) if chunk.file_id else None,
                }
            )
        )
    return cited


def _split_and_short(documents: Iterable[Document | Split | None]) -> bool:
    """Every document is split already, and all of them together are short enough to search on the event loop."""
    total = 0
    for document in documents:
        if isinstance(document, Document):
            return False
        total += len(document.words.joined) if document is not None else 0
    return total <= INLINE_CHARS


def _place_all(
    results: Sequence[Chunk], sources: Sequence[tuple[str, str | None]], read: Mapping[str, Document | Split | None]
) -> tuple[list[tuple[int, int] | None], dict[str, Split]]:
    """The lines of each hit in its document (None where the document is not known), and each document of a hit
    split into words (once, unless it was already)."""
    split: dict[str, Split] = {}
    spans: list[tuple[int, int] | None] = []
    for chunk, (text, _) in zip(results, sources, strict=True):
        found = read.get(chunk.file_id) if chunk.file_id else None
        if found is None or chunk.file_id is None:
            spans.append(None)
            continue
        if chunk.file_id not in split:
            split[chunk.file_id] = found.split() if isinstance(found, Document) else found
        spans.append(place(split[chunk.file_id].words, text))
    return spans, split
