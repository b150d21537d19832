"""Citations on search hits (issue 17, part 1): the page, the lines of the document's text a fragment covers, a link
that opens the document, and the title and source given at upload; and the link on `knowledge_find`'s matches."""

from __future__ import annotations

import asyncio
import hashlib
import random
import tracemalloc
import weakref
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx
from mcp import Client

from openwebui_rag_mcp import citations
from openwebui_rag_mcp.citations import Document, Documents, Words, line_span, link, place
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import Chunk
from openwebui_rag_mcp.server import create_server
from tests.conftest import BASE_URL, make_settings, mock_transport

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
GUIDE = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
MANUAL = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d"
GUIDE_TEXT = "# Fruit\n\nApples are red  or green.\nThey grow on trees.\n\n## Bananas\nBananas are yellow.\n"
MANUAL_TEXT = "Page one of the manual.\nSafety first.\nPage two: the pump.\nPrime it before use.\n"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- finding a fragment in its document -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fragment", "span"),
    [
        ("# Fruit", (1, 1)),
        ("Apples are red or green.\nThey grow on trees.", (3, 4)),  # spaces and breaks differ from the document
        ("## Bananas  \nBananas are yellow.", (6, 7)),  # Open WebUI's "  \n" after a heading
        ("Bananas are yellow.", (7, 7)),
        ("They grow on trees. ## Bananas", (4, 6)),  # a chunk re-joined across a blank line
        ("Cherries are small.", None),
        ("   \n ", None),
    ],
)
def test_a_fragment_is_found_whatever_its_whitespace(fragment: str, span: tuple[int, int] | None) -> None:
    assert line_span(GUIDE_TEXT, fragment) == span


def test_a_long_fragment_changed_inside_is_found_by_its_first_and_last_words() -> None:
    document = "\n".join(f"line {n} says word{n}" for n in range(1, 41))
    changed = document.replace("line 20 says word20", "line 20 SAYS word20")
    first, last = "line 3 says word3", "line 30 says word30"
    fragment = changed[changed.index(first) : changed.index(last) + len(last)]
    assert line_span(document, fragment) == (3, 30)


def test_the_link_opens_the_file_at_its_page_and_escapes_the_id() -> None:
    assert link("https://chat.example.com", GUIDE) == f"https://chat.example.com/api/v1/files/{GUIDE}/content"
    assert (
        link("https://chat.example.com/owui", "a/b", 3)
        == "https://chat.example.com/owui/api/v1/files/a%2Fb/content#page=3"
    )
    assert link(None, GUIDE) is None


def test_the_document_memory_keeps_what_fits_and_drops_the_oldest() -> None:
    five, three = Document("12345", "t", None).split(), Document("123", None, "s").split()
    memory = Documents(max_chars=2 * five.cost + 3)
    memory.put(("me", "a", "h"), five)
    memory.put(("me", "b", "h"), five)
    assert memory.get(("me", "a", "h")) == five  # now the most recently used
    memory.put(("me", "c", "h"), three)
    assert memory.get(("me", "b", "h")) is None
    assert memory.get(("me", "a", "h")) == five
    assert memory.get(("me", "c", "h")) == three
    memory.put(("me", "d", "h"), Document("x" * memory.max_chars, None, None).split())  # larger than all: never kept
    assert memory.get(("me", "d", "h")) is None
    assert memory.get(("you", "a", "h")) is None  # what one caller read is not another's


def test_a_document_kept_as_read_is_replaced_by_its_split_and_counted_once() -> None:
    read = Document("Apples are red.\nPears are green.\n", None, None)
    memory = Documents()
    memory.put(("me", "a", "h"), read)
    assert memory.chars == read.cost
    split = read.split()
    memory.put(("me", "a", "h"), split)
    assert memory.get(("me", "a", "h")) is split
    assert memory.chars == split.cost
    small = Documents(max_chars=read.cost)  # the text fits, its split does not
    small.put(("me", "a", "h"), read)
    small.put(("me", "a", "h"), split)
    assert small.get(("me", "a", "h")) is None
    assert small.chars == 0


def test_a_document_keeps_only_what_a_citation_needs() -> None:
    body = {"data": {"content": "text"}, "meta": {"data": {"title": "T" * 5_000, "source": "s", "notes": "n" * 10**6}}}
    document = Document.of(body)
    assert (document.text, document.title, document.source) == ("text", "T" * 1_000, "s")
    assert document.split().cost < 5_000  # the notes are not kept


def test_a_split_document_costs_its_words_and_its_lines() -> None:
    split = Document("one  two\n\n three\n", None, None).split()
    assert split.words.joined == "one two three"
    assert split.words.cost == len("one two three") + 2 * citations.LINE_CHARS


def test_a_long_repetitive_document_is_searched_in_linear_time() -> None:
    # A table of repeated cells: a backtracking search tried hundreds of words at every position (seconds per hit).
    table = "| nan | nan | nan | nan | nan | nan |\n" * 60_000 + "| total | 42 |\n"
    fragment = table[-3_800:]
    assert line_span(table, fragment) == (60_001 - fragment.count("\n") + 1, 60_001)
    assert line_span(table, "| nan | total |") is None


def test_a_text_short_enough_to_read_through_has_no_index() -> None:
    """Issue 42: a find over a few thousand characters is cheaper than a lookup's 32 probes, so short texts (most
    documents) keep no index, and cost only their words and lines."""
    words = Words.of("Apples are red.\n" * 1_000)
    assert not words.has_index
    assert (len(words.grams), len(words.at)) == (0, 0)
    assert not words.indexed("Apples are red. Apples are red. Apples are red. Apples are red.")
    assert place(words, "Apples are red.\nApples are red.") == (1, 2)


def random_text(rng: random.Random, vocabulary: list[str], lines: int) -> str:
    return "\n".join(
        (" " * rng.randint(0, 2)).join(rng.choice(vocabulary) for _ in range(rng.randint(0, 14))) or " \t"
        for _ in range(lines)
    )


@pytest.mark.parametrize("vocabulary_size", [5, 20_000])  # a text repeating itself, and prose
def test_the_index_finds_exactly_what_reading_the_text_finds(
    monkeypatch: pytest.MonkeyPatch, vocabulary_size: int
) -> None:
    """A fragment's place through the index is `str.find`'s in the single-spaced words, for needles that start or
    end inside words, occur many times or not at all; in prose, every needle the index reaches is found without
    reading the text through."""
    rng = random.Random(vocabulary_size)
    alphabet = "abcdefghijklmnopqrstuvwxyzабвгдежзи数据阀门"
    vocabulary = ["".join(rng.choices(alphabet, k=rng.randint(1, 9))) for _ in range(vocabulary_size)]
    scans: list[str] = []
    scan = Words.scan

    def counted(self: Words, needle: str, after: int) -> int:
        scans.append(needle)
        return scan(self, needle, after)

    monkeypatch.setattr(Words, "scan", counted)
    looked_up = 0
    for _ in range(12):
        words = Words.of(random_text(rng, vocabulary, rng.randint(1, 600)), index=True)
        joined = words.joined
        for _ in range(80):
            start = rng.randrange(len(joined) + 1)
            needle = joined[start : start + rng.randint(0, 400)]
            if rng.random() < 0.3 and needle:  # one changed character: mostly found nowhere
                at = rng.randrange(len(needle))
                needle = needle[:at] + rng.choice(alphabet) + needle[at + 1 :]
            after = rng.choice([0, start, max(0, start - 50), start + 1, rng.randrange(len(joined) + 1)])
            expected = joined.find(needle, after) if needle else -1
            found = words.find(needle.split(" "), after)
            assert found == (None if expected < 0 else (expected, expected + len(needle) - 1)), (needle, after)
            looked_up += words.indexed(needle)
    assert looked_up > 300
    if vocabulary_size > 100:
        assert all(not words.indexed(needle) for needle in scans)


def test_the_index_of_a_text_has_an_entry_per_stride_and_is_counted_in_its_cost() -> None:
    words = Words.of("word " * 100_000)
    assert words.has_index
    assert len(words.grams) == len(words.at) <= len(words.joined) // citations.STRIDE + 1
    assert words.cost <= len(words.joined) + citations.LINE_CHARS * (1 + len(words.joined) // citations.STRIDE + 1)


def test_a_fragment_placed_before_is_placed_again_from_memory_and_only_that_fragment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 42: a chunk that comes back (agents ask alike) is placed by one lookup of its digest, not in the index;
    a fragment that differs by a character is placed afresh."""
    split = Document("Apples are red.\nPears are green.\nPlums are blue.\n" * 3, None, None).split()
    placed: list[str] = []
    find = citations.place

    def counted(document: Words, fragment: str) -> tuple[int, int] | None:
        placed.append(fragment)
        return find(document, fragment)

    monkeypatch.setattr(citations, "place", counted)
    fragments = ["Pears are green.\nPlums are blue.", "Cherries are small."]
    assert split.remembered(fragments) is None
    assert split.place(fragments) == [(2, 3), None]
    assert split.remembered(fragments) == [(2, 3), None]  # a fragment found nowhere is remembered too
    assert split.remembered(["Pears are green.\nPlums are blue!"]) is None
    assert split.place(["Plums are blue.", *fragments]) == [(3, 3), (2, 3), None]
    assert placed == [*fragments, "Plums are blue."]


def test_a_split_remembers_a_bounded_number_of_places_counted_in_its_cost() -> None:
    text = "".join(f"Line {n} of the manual.\n" for n in range(2_000))
    split = Document(text, None, None).split()
    bound = citations.PLACES_MIN + len(split.words.joined) // citations.PLACE_CHARS
    assert split.places_max == bound
    rest = 2 * citations.LABEL_MAX_CHARS + citations.ENTRY_CHARS
    assert split.cost == split.words.cost + citations.PLACE_COST * bound + rest
    lines = text.splitlines()
    assert split.place(lines) == [(n + 1, n + 1) for n in range(2_000)]
    assert len(split.places) == bound < 2_000
    assert split.remembered(lines[:bound]) == [(n + 1, n + 1) for n in range(bound)]
    assert split.remembered(lines[bound : bound + 1]) is None
    assert split.place(lines[-1:]) == [(2_000, 2_000)]  # still placed, not remembered


# -- through the MCP protocol ----------------------------------------------------------------------------------


def file_body(file_id: str, text: str, data: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "filename": name,
        "hash": sha(text),
        "data": {"content": text, "status": "completed"},
        "meta": {"name": name, "content_type": "text/markdown", "size": len(text), "data": data},
        "created_at": 1_700_000_000,
        "updated_at": 1_700_000_000,
    }


def hit(text: str, file_id: str, name: str, document: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    # 0.12.4's chunk metadata: the filename as `source`, the upload metadata flattened in, the document's hash.
    return text, {"file_id": file_id, "name": name, "source": name, "hash": sha(document), "start_index": 0, **extra}


def upstream(router: respx.Router, hits: list[tuple[str, dict[str, Any]]]) -> respx.Route:
    router.get("/api/version").respond(json={"version": "0.12.4"})
    router.get(f"/api/v1/files/{GUIDE}").respond(
        json=file_body(GUIDE, GUIDE_TEXT, {"title": "Fruit guide", "source": "https://wiki.example.com/fruit"}, "g.md")
    )
    router.get(f"/api/v1/files/{MANUAL}").respond(json=file_body(MANUAL, MANUAL_TEXT, {}, "manual.pdf"))
    return router.post("/api/v1/retrieval/query/collection").respond(
        json={
            "distances": [[0.9 - n / 10 for n in range(len(hits))]],
            "documents": [[text for text, _ in hits]],
            "metadatas": [[metadata for _, metadata in hits]],
        }
    )


async def search(router: respx.Router, **env: str) -> list[dict[str, Any]]:
    server = create_server(make_settings(**env), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        result = await client.call_tool("knowledge_search", {"query": "fruit", "knowledge_ids": [KB]})
    assert result.is_error is False
    assert isinstance(result.structured_content, dict)
    results: list[dict[str, Any]] = result.structured_content["results"]
    return results


def routed(router: respx.Router) -> None:
    base = {"id": KB, "name": "Fruit", "description": "", "user_id": "u", "write_access": True, "updated_at": 1}
    router.get("/api/v1/knowledge/", params={"page": "1"}).respond(json={"items": [base], "total": 1})


async def test_every_hit_says_its_lines_page_link_and_the_title_and_source_given_at_upload(
    router: respx.Router,
) -> None:
    routed(router)
    upstream(
        router,
        [
            hit("## Bananas  \nBananas are yellow.", GUIDE, "g.md", GUIDE_TEXT, title="Fruit guide"),
            hit("Page two: the pump. Prime it before use.", MANUAL, "manual.pdf", MANUAL_TEXT, page=1, total_pages=2),
        ],
    )
    guide, manual = await search(router)
    assert (guide["start_line"], guide["end_line"], guide["page"]) == (6, 7, None)
    assert guide["link"] == f"{BASE_URL}/api/v1/files/{GUIDE}/content"
    assert (guide["title"], guide["source"]) == ("Fruit guide", "https://wiki.example.com/fruit")
    assert (manual["start_line"], manual["end_line"], manual["page"]) == (3, 4, 2)
    assert manual["link"] == f"{BASE_URL}/api/v1/files/{MANUAL}/content#page=2"
    assert (manual["title"], manual["source"]) == ("manual.pdf", "manual.pdf")  # none given at upload
    assert manual["metadata"]["total_pages"] == 2
    assert "page" not in manual["metadata"]


async def test_the_lines_are_those_knowledge_get_file_reads(router: respx.Router) -> None:
    routed(router)
    upstream(router, [hit("Apples are red or green. They grow on trees.", GUIDE, "g.md", GUIDE_TEXT)])
    [found] = await search(router)
    server = create_server(make_settings(), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        read = await client.call_tool(
            "knowledge_get_file",
            {"file_id": GUIDE, "start_line": found["start_line"], "end_line": found["end_line"]},
        )
    assert isinstance(read.structured_content, dict)
    assert read.structured_content["text"] == "3: Apples are red  or green.\n4: They grow on trees."


async def test_each_document_is_read_once_and_not_again_while_its_hash_is_the_same(router: respx.Router) -> None:
    routed(router)
    upstream(
        router,
        [
            hit("# Fruit", GUIDE, "g.md", GUIDE_TEXT),
            hit("Bananas are yellow.", GUIDE, "g.md", GUIDE_TEXT),
            hit("Safety first.", MANUAL, "manual.pdf", "another text"),  # a hash its text does not have
        ],
    )
    server = create_server(make_settings(), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        for _ in range(3):
            result = await client.call_tool("knowledge_search", {"query": "fruit", "knowledge_ids": [KB]})
            assert isinstance(result.structured_content, dict)
            assert [c["start_line"] for c in result.structured_content["results"]] == [1, 7, 2]
    reads = [call.request.url.path for call in router.calls if call.request.url.path.startswith("/api/v1/files/")]
    # The guide once (its chunks carry its text's hash); the manual on every search (they do not match).
    assert sorted(reads) == sorted([f"/api/v1/files/{GUIDE}"] + [f"/api/v1/files/{MANUAL}"] * 3)


@pytest.mark.parametrize("scan_chars", [citations.SCAN_CHARS, 0])  # read through on the event loop, or in a thread
async def test_a_document_kept_in_memory_is_not_split_again(
    router: respx.Router, monkeypatch: pytest.MonkeyPatch, scan_chars: int
) -> None:
    monkeypatch.setattr(citations, "SCAN_CHARS", scan_chars)
    splits: list[str] = []
    split = citations.Words.of

    def counted(text: str) -> citations.Words:
        splits.append(text)
        return split(text)

    monkeypatch.setattr(citations.Words, "of", counted)
    routed(router)
    upstream(router, [hit("# Fruit", GUIDE, "g.md", GUIDE_TEXT), hit("Bananas are yellow.", GUIDE, "g.md", GUIDE_TEXT)])
    server = create_server(make_settings(), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        for _ in range(3):
            result = await client.call_tool("knowledge_search", {"query": "fruit", "knowledge_ids": [KB]})
            assert isinstance(result.structured_content, dict)
            found = [(c["start_line"], c["end_line"], c["title"]) for c in result.structured_content["results"]]
            assert found == [(1, 1, "Fruit guide"), (7, 7, "Fruit guide")]
    assert splits == [GUIDE_TEXT]  # once, for both hits and all three searches


async def lines_found(router: respx.Router, searches: int) -> AsyncIterator[list[tuple[int, int]]]:
    """The lines of each hit, search after search, over `searches` searches in one session."""
    server = create_server(make_settings(), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        for _ in range(searches):
            result = await client.call_tool("knowledge_search", {"query": "pump", "knowledge_ids": [KB]})
            assert isinstance(result.structured_content, dict)
            yield [(c["start_line"], c["end_line"]) for c in result.structured_content["results"]]


async def test_a_long_document_is_indexed_once_and_each_later_hit_looked_up_without_reading_it_through(
    router: respx.Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: the steady-state cost of placing a fragment does not grow with the document (one index per text,
    one lookup per fragment: a fragment met again is remembered)."""
    builds: list[int] = []
    scans: list[str] = []
    lookups: list[str] = []
    build, scan, lookup = Words.of, Words.scan, Words._lookup

    def counted_build(text: str) -> Words:
        builds.append(len(text))
        return build(text)

    def counted_scan(self: Words, needle: str, after: int) -> int:
        scans.append(needle)
        return scan(self, needle, after)

    def counted_lookup(self: Words, needle: str, after: int) -> int | None:
        lookups.append(needle)
        return lookup(self, needle, after)

    monkeypatch.setattr(Words, "of", counted_build)
    monkeypatch.setattr(Words, "scan", counted_scan)
    monkeypatch.setattr(Words, "_lookup", counted_lookup)
    rng = random.Random(42)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(5_000)]
    prose = random_text(rng, vocabulary, 2_000) + "\n"
    text = prose * 4  # about 400,000 characters (its words over SCAN_CHARS): indexed
    lines = text.split("\n")
    wordy = [n for n in range(2_000) if len(lines[n].split()) >= 10]  # long enough for the index
    one, two, three = wordy[5], wordy[-1], 4_000 + wordy[20]
    routed(router)
    upstream(
        router,
        [
            hit(f"{lines[one]}\n{lines[one + 1]}", GUIDE, "g.md", text),
            hit(lines[two], GUIDE, "g.md", text),
            hit(f"{lines[three]} {lines[three + 1]}", GUIDE, "g.md", text),  # the third copy's: the first's lines
        ],
    )
    router.get(f"/api/v1/files/{GUIDE}").respond(json=file_body(GUIDE, text, {}, "g.md"))
    async for found in lines_found(router, 4):
        assert found == [(one + 1, one + 2), (two + 1, two + 1), (three - 3_999, three - 3_998)]
    assert builds == [len(text)]  # one index, for every hit of every search
    assert scans == []  # every fragment looked up in it, none found by reading the text through
    assert len(lookups) == 3  # at the second search (the first found them as they stand); then remembered


async def test_a_first_search_places_fragments_found_as_they_are_without_splitting_the_document(
    router: respx.Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: a session's first search finds each fragment as it stands in the text (two scans at C speed); the
    document is split and indexed only at the search that meets it again, once, and looked up from then on."""
    builds: list[int] = []
    build = Words.of

    def counted(text: str) -> Words:
        builds.append(len(text))
        return build(text)

    monkeypatch.setattr(Words, "of", counted)
    text = "".join(f"Line {n}: the pump of station {n} is primed before use.\n" for n in range(20_000))
    routed(router)
    upstream(
        router,
        [
            hit("Line 7000: the pump of station 7000 is primed before use.\nLine 7001:", GUIDE, "g.md", text),
            hit("Line 19999: the pump of station 19999 is primed before use.", GUIDE, "g.md", text),
        ],
    )
    router.get(f"/api/v1/files/{GUIDE}").respond(json=file_body(GUIDE, text, {}, "g.md"))
    searched = 0
    async for found in lines_found(router, 3):
        assert found == [(7_001, 7_002), (20_000, 20_000)]
        assert builds == ([] if searched == 0 else [len(text)])  # none at the first search, one at the second
        searched += 1
    reads = [call for call in router.calls if call.request.url.path == f"/api/v1/files/{GUIDE}"]
    assert len(reads) == 1  # the text kept after the first search is what the second one indexes


async def test_a_fragment_not_found_as_it_stands_is_found_by_its_words_at_the_first_search(
    router: respx.Router,
) -> None:
    routed(router)
    upstream(router, [hit("Apples are red or green. They grow on trees.", GUIDE, "g.md", GUIDE_TEXT)])
    (found,) = await search(router)
    assert (found["start_line"], found["end_line"]) == (3, 4)


async def test_a_document_that_cannot_be_read_leaves_its_hits_without_lines(router: respx.Router) -> None:
    routed(router)
    upstream(router, [hit("Bananas are yellow.", GUIDE, "g.md", GUIDE_TEXT, title="Fruit guide")])
    router.get(f"/api/v1/files/{GUIDE}").respond(404, json={"detail": "We could not find what you are looking for :/"})
    [found] = await search(router)
    assert (found["start_line"], found["end_line"]) == (None, None)
    assert (found["title"], found["source"]) == ("Fruit guide", "g.md")  # the chunk's own
    assert found["link"] == f"{BASE_URL}/api/v1/files/{GUIDE}/content"


@pytest.mark.parametrize(
    ("env", "base"),
    [
        ({"OPENWEBUI_PUBLIC_URL": "https://chat.example.com/"}, "https://chat.example.com"),
        ({"OPENWEBUI_MCP_TRANSPORT": "streamable-http"}, None),  # HTTP callers are not told the upstream address
        (
            {"OPENWEBUI_MCP_TRANSPORT": "streamable-http", "OPENWEBUI_PUBLIC_URL": "https://chat.example.com"},
            "https://chat.example.com",
        ),
    ],
)
async def test_links_use_the_public_address_and_none_is_invented_over_http(
    router: respx.Router, env: dict[str, str], base: str | None
) -> None:
    routed(router)
    upstream(router, [hit("Bananas are yellow.", GUIDE, "g.md", GUIDE_TEXT)])
    [found] = await search(router, **env)
    assert found["link"] == (f"{base}/api/v1/files/{GUIDE}/content" if base else None)
    assert found["start_line"] == 7  # the citation itself does not depend on the address


async def test_exact_matches_carry_the_link(router: respx.Router) -> None:
    router.get("/api/version").respond(json={"version": "0.12.4"})
    routed(router)
    record = file_body(GUIDE, GUIDE_TEXT, {}, "g.md")
    router.get(f"/api/v1/knowledge/{KB}/files").mock(
        side_effect=lambda request: httpx.Response(200, json={"items": [record], "total": 1})
    )
    router.get(f"/api/v1/files/{GUIDE}").respond(json=record)
    server = create_server(
        make_settings(OPENWEBUI_PUBLIC_URL="https://chat.example.com"), transport=mock_transport(router)
    )
    async with Client(server, raise_exceptions=True) as client:
        result = await client.call_tool("knowledge_find", {"knowledge_id": KB, "phrase": "bananas are"})
    assert isinstance(result.structured_content, dict), result
    [match] = result.structured_content["matches"]
    assert (match["line"], match["link"]) == (7, f"https://chat.example.com/api/v1/files/{GUIDE}/content")


def chunk(text: str, file_id: str) -> Chunk:
    return Chunk(
        text=text,
        truncated=False,
        chunk_id=None,
        file_id=file_id,
        knowledge_id=KB,
        title=None,
        source=None,
        metadata={},
        score=None,
        distance=None,
        page=None,
        start_line=None,
        end_line=None,
        link=None,
    )


@pytest.mark.parametrize("fails", [False, True])
async def test_searches_at_the_same_moment_read_a_document_once(fails: bool) -> None:
    """Two searches of one caller citing the same document while it is being read: one read, both cited (or, when
    the read fails, neither, and still one read)."""
    documents, reads, release = Documents(), [], asyncio.Event()

    async def read_file(file_id: str) -> object:
        reads.append(file_id)
        await release.wait()
        if fails:
            raise ToolFailure("not_found", "gone")
        return file_body(GUIDE, GUIDE_TEXT, {"title": "Fruit guide"}, "g.md")

    results, sources = [chunk("Bananas are yellow.", GUIDE)], [("Bananas are yellow.", sha(GUIDE_TEXT))]
    searches = [
        asyncio.create_task(citations.cite(read_file, BASE_URL, results, sources, documents, "caller-1"))
        for _ in range(2)
    ]
    for _ in range(20):  # both searches reach their read (no timing: nothing here waits on anything but the event)
        await asyncio.sleep(0)
    release.set()
    first, second = await asyncio.gather(*searches)
    assert reads == [GUIDE]
    expected = (None, None) if fails else (7, 7)
    assert [(c.start_line, c.end_line) for c in (*first, *second)] == [expected, expected]
    assert documents.reading(("caller-1", GUIDE, sha(GUIDE_TEXT))) is None  # nothing left under way


async def test_a_cancelled_read_leaves_the_search_waiting_on_it_to_read_for_itself() -> None:
    documents, reads, release = Documents(), [], asyncio.Event()

    async def read_file(file_id: str) -> object:
        reads.append(file_id)
        await release.wait()
        return file_body(GUIDE, GUIDE_TEXT, {}, "g.md")

    results, sources = [chunk("Bananas are yellow.", GUIDE)], [("Bananas are yellow.", sha(GUIDE_TEXT))]
    leader = asyncio.create_task(citations.cite(read_file, BASE_URL, results, sources, documents, "caller-1"))
    for _ in range(20):
        await asyncio.sleep(0)
    waiter = asyncio.create_task(citations.cite(read_file, BASE_URL, results, sources, documents, "caller-1"))
    for _ in range(20):
        await asyncio.sleep(0)
    leader.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
    release.set()
    [cited] = await waiter
    assert (cited.start_line, cited.end_line) == (7, 7)
    assert reads == [GUIDE, GUIDE]  # the leader's, cancelled, and the waiter's own


# -- memory: a search holds a few documents at once, whatever the number of hits -------------------------------

LONG_CHARS = 128 * 1024


def long_text(file_id: str) -> str:
    """A document of about LONG_CHARS characters whose line 101 is its own."""
    lines: list[str] = []
    size = 0
    while size < LONG_CHARS:
        line = f"Valve {len(lines) + 1} of pump {file_id} opens at three bar once the gauge reads zero."
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


async def peak_bytes(hits: int, documents: Documents) -> int:
    """The most memory `cite` allocates at once for `hits` hits, each in its own long document (read afresh, as the
    client reads it), all found on their line 101."""
    file_ids = [f"doc-{n}" for n in range(hits)]

    async def read_file(file_id: str) -> object:
        await asyncio.sleep(0)
        return {"id": file_id, "data": {"content": long_text(file_id)}, "meta": {}}

    results = [chunk(f"Valve 101 of pump {file_id} opens", file_id) for file_id in file_ids]
    sources = [(results[n].text, sha(long_text(file_id))) for n, file_id in enumerate(file_ids)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cited = await citations.cite(read_file, BASE_URL, results, sources, documents, "caller-1")
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert [(c.start_line, c.end_line) for c in cited] == [(101, 101)] * hits
    return peak


async def test_a_search_holds_a_bounded_number_of_documents_whatever_the_number_of_hits() -> None:
    """Issue 41, item 6: each hit's document is placed as it arrives and its text dropped, so a search's memory is a
    few documents' worth (those read at once), plus what the memory of documents keeps within its own budget."""
    documents = Documents(max_chars=2 * LONG_CHARS)
    many = await peak_bytes(48, documents)
    # The texts are ASCII (a byte a character); a document in hand takes a few times its text (its words, lines).
    assert many < 8 * (citations.READERS + 1) * LONG_CHARS + 4 * documents.max_chars
    assert documents.chars <= documents.max_chars


class Body(dict[str, Any]):
    """A file's answer whose life can be watched (a plain dict cannot be weakly referenced)."""


async def test_searches_at_once_hold_at_most_held_max_documents_in_the_whole_process() -> None:
    """Many callers searching long documents at once: the documents in hand over all of them are bounded too."""
    documents = Documents(max_chars=0, held_max=5)  # nothing kept: every document is read and dropped
    alive: set[int] = set()
    most = 0

    async def read_file(file_id: str) -> object:
        nonlocal most
        body = Body(id=file_id, data={"content": GUIDE_TEXT}, meta={})
        alive.add(id(body))
        weakref.finalize(body, alive.discard, id(body))
        most = max(most, len(alive))
        await asyncio.sleep(0)
        return body

    def search(caller: str) -> Any:
        results = [chunk("Bananas are yellow.", f"doc-{n}") for n in range(12)]
        sources = [("Bananas are yellow.", sha(GUIDE_TEXT))] * 12
        return citations.cite(read_file, BASE_URL, results, sources, documents, caller)

    cited = await asyncio.gather(*(search(f"caller-{n}") for n in range(6)))
    assert all((c.start_line, c.end_line) == (7, 7) for found in cited for c in found)
    assert 1 < most <= 5  # six searches of READERS each would hold 24
