"""Where a search hit is in its document, so that an agent can cite it and read around it: the page its loader
recorded, the lines of the document's extracted text the fragment covers (the lines `knowledge_get_file` reads), a
link that opens the document in Open WebUI, and the title and source given at upload.

Open WebUI's chunk metadata holds no usable position (`start_index` counts from the start of a section, and in a
base's collection it is usually 0) and, from 0.11, its own `source` (the filename) replaces the one given at upload.
So the documents of the hits are read with the caller's credential, one request each, a few at a time, each placed as
it arrives and its text dropped (a search holds a few at once). A fragment is looked for as it stands in the text
first (two scans at C speed), then by its words; a document is split into words and indexed only when a search meets
it again (`Documents` keeps its text, then its index and the places found in it), and read again only when its text
changed. A document that cannot be read leaves its hits as they were, with no lines: a citation never fails a search.
(The page is read from the chunk's own metadata, in `normalize.page_of`.)
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

import anyio

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import Chunk

log = logging.getLogger(__name__)

READERS = 4  # documents a search reads and places at once
HELD_MAX = 16  # documents read and being placed at once in the whole process, over every search and caller
LABEL_MAX_CHARS = 1_000  # of a title or a source kept for a citation
ENTRY_CHARS = 512  # an entry's key and bookkeeping, counted as characters
# Characters of document text kept for citations, over all callers (about 64 MB at most).
CACHE_MAX_CHARS = 16 * 1024 * 1024
# What a line's two numbers in `Words` take, or an entry of its index, counted as characters (16 bytes, 4 a character)
LINE_CHARS = 4
# The index of a text: a gram of GRAM characters every STRIDE, so a needle of REACH characters or more holds, for each
# occurrence, one gram that is indexed there; an entry (16 bytes) per 32 characters of text.
STRIDE = 32
GRAM = 16
REACH = STRIDE + GRAM - 1
# A lookup takes the rarest of a needle's grams, looking at up to GRAMS_TRIED of them per alignment until one is in at
# most RARE places; it checks up to CANDIDATES_MAX places in all before it reads the text through instead.
RARE = 4
GRAMS_TRIED = 8
CANDIDATES_MAX = 256
# A text of up to this many characters of words is read through for each fragment, on the event loop, and not
# indexed: a `str.find` over it (a few microseconds per 10,000 characters) costs less than a lookup in an index (32
# probes, about 0.05 ms) or a worker thread's hop. Only longer texts are indexed.
SCAN_CHARS = 256 * 1024
# A document just read, up to this many characters, is split and placed on the event loop (a fraction of a millisecond);
# a longer one in a worker thread, so that other calls go on.
SPLIT_INLINE_CHARS = 16 * 1024
HASH_SLICE_CHARS = 1024 * 1024  # of a text encoded at a time to hash it
# Words a fragment is found by when it is not found whole (Open WebUI re-splits and re-joins some texts): the first
# ones give the first line, the last ones the last.
EDGE_WORDS = 12
# A split document remembers where its fragments are, by a digest of each (agents ask alike, so the same chunks come
# back): a fragment met again costs one lookup, not one in the index (about 0.05 ms over a million characters). At
# most one place per PLACE_CHARS characters of text (a chunk is usually 1,000 or more), each counted as PLACE_COST
# characters in the document's cost (a 16-byte digest, a pair and a table slot: under 200 bytes).
PLACE_CHARS = 256
PLACES_MIN = 16
PLACE_COST = 48


@dataclass(frozen=True, slots=True)
class Words:
    """A text's words, single-spaced, line after line: a fragment is found in them however its whitespace differs,
    as chunk texts differ from their document in spaces and line breaks only. Built line by line (not word by word: a
    table of short cells has a million words), once per text, with an index that finds a fragment without reading
    the whole text: the hash of every `GRAM` characters starting at a multiple of `STRIDE`, sorted."""

    joined: str  # the words of every line that has any, one space between words and between lines
    starts: array[int]  # where each of those lines starts in `joined`
    numbers: array[int]  # and its number in the text, from 1, lines ending at "\n" as knowledge_get_file counts them
    grams: array[int]  # the hashes of joined[p:p + GRAM] for p = 0, STRIDE, 2 * STRIDE, ..., sorted
    at: array[int]  # the p of each, in the same order (ascending among equal hashes)
    has_index: bool  # False: `grams` and `at` are empty, and every fragment is found by reading the text through

    @classmethod
    def of(cls, text: str, *, index: bool | None = None) -> Words:
        """`text` split, and indexed if `index` (by default, when its words are longer than `SCAN_CHARS`)."""
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
        joined = " ".join(parts)
        del parts
        if not (len(joined) > SCAN_CHARS if index is None else index):
            return cls(joined, starts, numbers, array("q"), array("q"), has_index=False)
        hashes = array("q", (hash(joined[p : p + GRAM]) for p in range(0, len(joined) - GRAM + 1, STRIDE)))
        order = sorted(range(len(hashes)), key=hashes.__getitem__)  # stable: positions ascend among equal hashes
        grams = array("q", map(hashes.__getitem__, order))
        return cls(joined, starts, numbers, grams, array("q", (n * STRIDE for n in order)), has_index=True)

    @property
    def cost(self) -> int:
        """What it takes in memory, in characters: the words, the numbers of their lines and the index."""
        return len(self.joined) + LINE_CHARS * (len(self.starts) + len(self.grams))

    def line_at(self, position: int) -> int:
        return self.numbers[bisect_right(self.starts, position) - 1]

    def indexed(self, needle: str) -> bool:
        """Whether `needle` is looked up in the index (else the text is read through)."""
        return self.has_index and len(needle) >= REACH

    def find(self, words: Sequence[str], after: int = 0) -> tuple[int, int] | None:
        """Where `words` first occur in `joined`, from `after` on, as (first, last) character; the first and last of
        them may be parts of words (a splitter by tokens cuts inside words). Exactly `joined.find`'s answer."""
        needle = " ".join(words)
        if not needle:
            return None
        position = self._lookup(needle, after) if self.indexed(needle) else None
        if position is None:
            position = self.scan(needle, after)
        return None if position < 0 else (position, position + len(needle) - 1)

    def scan(self, needle: str, after: int) -> int:
        """`needle`'s first position from `after` on, reading the text through (linear in it)."""
        return self.joined.find(needle, after)

    def _lookup(self, needle: str, after: int) -> int | None:
        """`needle`'s first position from `after` on (-1: none) through the index, or None when the index cannot
        say cheaply (a text repeating itself).

        An occurrence at s is aligned with the index at exactly one `o` below STRIDE (s + o is a multiple of it), and
        there every gram of the needle from `o` on, STRIDE apart, is indexed: so the occurrences aligned at `o` are
        among the places of the rarest of those grams, each checked against the text."""
        grams, at = self.grams, self.at
        best = -1
        checked = 0
        for o in range(STRIDE):
            low, high, shift = 0, len(grams) + 1, o
            for tried, start in enumerate(range(o, len(needle) - GRAM + 1, STRIDE)):
                gram = hash(needle[start : start + GRAM])
                first = bisect_left(grams, gram)
                last = bisect_right(grams, gram, first)
                if last - first < high - low:
                    low, high, shift = first, last, start
                if high - low <= RARE or tried + 1 == GRAMS_TRIED:
                    break
            for i in range(bisect_left(at, after + shift, low, high), high):
                start = at[i] - shift
                if best >= 0 and start >= best:
                    break
                checked += 1
                if checked > CANDIDATES_MAX:
                    return None
                if self.joined.startswith(needle, start):
                    best = start
                    break
        return best


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


def place_as_is(text: str, fragment: str) -> tuple[int, int] | None:
    """`place` for a fragment that stands in `text` as it is (whitespace around it aside), found without splitting the
    text: its first such occurrence, which is where its words first occur unless an earlier copy differs in
    whitespace only. None when it does not stand there so."""
    needle = fragment.strip()
    start = text.find(needle) if needle else -1
    if start < 0:
        return None
    first = text.count("\n", 0, start) + 1
    return first, first + needle.count("\n")


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

    @property
    def cost(self) -> int:
        """What it takes in memory, kept as read (until a search meets it again), in characters."""
        return len(self.text) + 2 * LABEL_MAX_CHARS + ENTRY_CHARS

    def place(self, fragments: Sequence[str]) -> list[tuple[int, int] | None] | None:
        """Where each of `fragments` is, when every one stands in the text as it is; else None (they are found by
        their words, in the document split)."""
        found = [place_as_is(self.text, fragment) for fragment in fragments]
        return None if None in found else found

    def split(self) -> Split:
        """The document as citations use it and `Documents` keeps it: its words and their index (linear in the text,
        so called in a worker thread for a long document), the title and the source."""
        return Split(Words.of(self.text), self.title, self.source)


@dataclass(frozen=True, slots=True)
class Split:
    """A document split into words for placing fragments, with the title and source given at its upload, and the
    places of the fragments placed in it so far (by `_digest`)."""

    words: Words
    title: str | None
    source: str | None
    places: dict[bytes, tuple[int, int] | None] = field(default_factory=dict, compare=False)

    @property
    def places_max(self) -> int:
        return PLACES_MIN + len(self.words.joined) // PLACE_CHARS

    @property
    def cost(self) -> int:
        """What it takes in memory, in characters: its words, the places it may remember and a bound for the rest of
        an entry."""
        return self.words.cost + PLACE_COST * self.places_max + 2 * LABEL_MAX_CHARS + ENTRY_CHARS

    def remembered(self, fragments: Sequence[str]) -> list[tuple[int, int] | None] | None:
        """Where each of `fragments` is, when every one was placed here before; else None."""
        places = self.places
        found = []
        for fragment in fragments:
            key = _digest(fragment)
            if key not in places:
                return None
            found.append(places[key])
        return found

    def place(self, fragments: Sequence[str]) -> list[tuple[int, int] | None]:
        """Where each of `fragments` is, remembered for the next time while there is room. Safe in a worker thread
        while the event loop reads `places` (a dict's single reads and writes are atomic)."""
        found = []
        for fragment in fragments:
            key = _digest(fragment)
            span = self.places[key] if key in self.places else place(self.words, fragment)
            if len(self.places) < self.places_max:
                self.places[key] = span
            found.append(span)
        return found

    def cheap(self, fragments: Sequence[str]) -> bool:
        """Whether placing `fragments` is cheap enough for the event loop: each is looked up in the index, or the
        text is short."""
        return len(self.words.joined) <= SCAN_CHARS or all(
            self.words.indexed(" ".join(fragment.split())) for fragment in fragments
        )


def _digest(fragment: str) -> bytes:
    """A fragment's key among the places a document remembers: 128 bits, so that two fragments never share one."""
    return hashlib.blake2b(fragment.encode("utf-8", "surrogatepass"), digest_size=16).digest()


# A document as `Documents` keeps it: as read after the search that read it, split and indexed from the next one on.
Kept = Document | Split
# A read under way: what its waiters get (the document, or None in it when it could not be read), or None when the
# read was cancelled and each waiter must read for itself.
_Reading = asyncio.Future[tuple[Kept | None] | None]


class Documents:
    """The documents read for citations, by (caller, file, SHA-256 of the text): a hit whose chunk carries its
    document's hash (Open WebUI keeps the SHA-256 of the extracted text in every chunk) is cited without reading the
    document again, and a changed document has another hash. A document is kept as read, and split and indexed (in
    its place) when a search meets it again; never again after. Only texts whose own hash is that one are kept, and
    only for the caller that read them; the least recently used go first past `max_chars` in all."""

    def __init__(self, max_chars: int = CACHE_MAX_CHARS, held_max: int = HELD_MAX) -> None:
        self.max_chars = max_chars
        # Documents in hand (read, not yet placed) over every search: many callers searching large documents at once
        # wait for each other rather than hold them all.
        self.held = asyncio.Semaphore(held_max)
        self._texts: OrderedDict[tuple[str, str, str], Kept] = OrderedDict()
        self._chars = 0
        # Reads under way, so that searches of one caller at the same moment (agents asking alike) read a document
        # once.
        self._reading: dict[tuple[str, str, str], _Reading] = {}

    @property
    def chars(self) -> int:
        """What the documents kept take, in characters (`Split.cost`)."""
        return self._chars

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

    def get(self, key: tuple[str, str, str]) -> Kept | None:
        text = self._texts.get(key)
        if text is not None:
            self._texts.move_to_end(key)
        return text

    def put(self, key: tuple[str, str, str], document: Kept) -> None:
        """Keep `document`, in place of what was kept under `key` (its text, now that it is split; a split too large
        to keep takes its text out too, so that it is not split again at every search)."""
        before = self._texts.pop(key, None)
        if before is not None:
            self._chars -= before.cost
        if document.cost > self.max_chars:
            return
        self._texts[key] = document
        self._chars += document.cost
        while self._chars > self.max_chars:
            _, dropped = self._texts.popitem(last=False)
            self._chars -= dropped.cost


def _sha256(text: str) -> str:
    """The SHA-256 of a text's UTF-8, a slice at a time (no second copy of a long text)."""
    digest = hashlib.sha256()
    for start in range(0, len(text), HASH_SLICE_CHARS):
        digest.update(text[start : start + HASH_SLICE_CHARS].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _in_hand(
    body: object, expected_hash: str | None, fragments: Sequence[str]
) -> tuple[Kept, bool, list[tuple[int, int] | None]]:
    """A document just read, whether its text has the hash its chunks carry, and where each of `fragments` is in it:
    found as they stand in the text, else by their words in the document split (and then kept split). Linear in the
    text."""
    document = Document.of(body)
    matches = expected_hash is not None and _sha256(document.text) == expected_hash
    found = document.place(fragments)
    if found is not None:
        return document, matches, found
    split = document.split()
    return split, matches, split.place(fragments)


async def cite(
    read_file: Callable[[str], Awaitable[object]],
    base_url: str | None,
    results: Sequence[Chunk],
    sources: Sequence[tuple[str, str | None]],
    documents: Documents,
    caller: str,
) -> list[Chunk]:
    """`results` with page, lines, link and the title and source given at upload. `sources` are each fragment's
    whole text (`results` may hold it cut) and its document's hash; `read_file` is the client's `file`.

    Each document is placed as it arrives and its text dropped (only `documents` keeps one, within its budget), and
    at most `READERS` are read and placed at once (`HELD_MAX` over every search): a search holds a few documents
    whatever the number of its hits, and a process a bounded number whatever the number of searches."""
    hits: dict[str, list[int]] = {}
    for n, chunk in enumerate(results):
        if chunk.file_id:
            hits.setdefault(chunk.file_id, []).append(n)
    spans: list[tuple[int, int] | None] = [None] * len(results)
    labels: dict[str, tuple[str | None, str | None]] = {}
    gate = asyncio.Semaphore(READERS)

    def placed(file_id: str, document: Kept, found: Sequence[tuple[int, int] | None]) -> None:
        for n, span in zip(hits[file_id], found, strict=True):
            spans[n] = span
        labels[file_id] = (document.title, document.source)

    async def place_kept(file_id: str, kept: Kept, key: tuple[str, str, str] | None) -> None:
        """Place the hits of a document kept, or read by a search at the same moment; one kept as read is split and
        indexed now (and kept so in its place under `key`)."""
        if isinstance(kept, Document):
            async with gate, documents.held:
                if len(kept.text) <= SPLIT_INLINE_CHARS:
                    split = kept.split()
                else:
                    split = await anyio.to_thread.run_sync(kept.split)
            if key is not None:
                documents.put(key, split)
        else:
            split = kept
        fragments = [sources[n][0] for n in hits[file_id]]
        found = split.remembered(fragments)
        if found is None:
            if split.cheap(fragments):
                found = split.place(fragments)
            else:
                found = await anyio.to_thread.run_sync(split.place, fragments)
        placed(file_id, split, found)

    async def cite_document(file_id: str) -> None:
        expected_hash = sources[hits[file_id][0]][1]
        key = (caller, file_id, expected_hash) if expected_hash else None
        kept = documents.get(key) if key else None
        if kept is not None:
            await place_kept(file_id, kept, key)
            return
        under_way = documents.reading(key) if key else None
        if under_way is not None:
            shared = await asyncio.shield(under_way)
            if shared is not None:
                if shared[0] is not None:
                    await place_kept(file_id, shared[0], None)
                return
        mine = documents.begin(key) if key else None
        try:
            # Held until the document is placed: at most READERS texts per search, HELD_MAX in the process.
            async with gate, documents.held:
                try:
                    body = await read_file(file_id)
                except ToolFailure as failure:
                    log.debug("search: no citation for file %s (%s)", file_id, failure.code)
                    if mine is not None:
                        mine.set_result((None,))
                    return
                fragments = [sources[n][0] for n in hits[file_id]]
                if normalize.text_chars(body) <= SPLIT_INLINE_CHARS:
                    document, matches, found = _in_hand(body, expected_hash, fragments)
                else:
                    document, matches, found = await anyio.to_thread.run_sync(_in_hand, body, expected_hash, fragments)
                del body
            placed(file_id, document, found)
            if matches and key is not None:
                documents.put(key, document)
            if mine is not None:
                mine.set_result((document,))
        finally:
            if key is not None and mine is not None:
                documents.end(key, mine)

    await asyncio.gather(*(cite_document(file_id) for file_id in hits))
    cited: list[Chunk] = []
    for chunk, span in zip(results, spans, strict=True):
        title, source = labels.get(chunk.file_id, (None, None)) if chunk.file_id else (None, None)
        cited.append(
            chunk.model_copy(
                update={
                    "title": title or chunk.title,
                    "source": source or chunk.source,
                    "start_line": span[0] if span else None,
                    "end_line": span[1] if span else None,
                    "link": link(base_url, chunk.file_id, chunk.page) if chunk.file_id else None,
                }
            )
        )
    return cited
