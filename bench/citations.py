"""The citation benchmark (issue 17): how directly a search leads an agent to the line that answers its question.

    .venv/bin/python -m bench.citations [--version 0.12.4] [--docs 60] [--questions 40] [--long 2]

Against a real Open WebUI seeded with the benchmark corpus (standard-library docstrings, Russian and Chinese notes)
plus a few two-page PDFs, each question is a known line of a known document (its words, for the offline stand-in
embedding model, which ranks by shared words). A second set asks about long documents (`--long` Markdown files and as
many PDFs of over a million characters each, `bench.longdocs`), three questions each, whose answer lines (and pages)
are known. Side by side, on the same questions:

- **this server**: `knowledge_search`, then `knowledge_get_file` around the first hit's `start_line`/`end_line`
  (20 lines either side);
- **this server before citations**: the same search (its answer without the citation fields), then the document
  read from the start with `knowledge_get_file`, `offset`/`next_offset` pages of 8,000 characters, until the line;
- **Open WebUI directly**: `POST /api/v1/retrieval/query/collection`, then `GET /api/v1/files/{id}` (the whole
  document, as its API gives it).

It reports how often the first hit is the right document and, for the PDFs, the right page (Open WebUI's own
`page` is pypdf's, counted from 0), and the median number of characters an agent reads to reach the answer line; and
how often the server's lines for the first hit are exactly those found by reading its document's text through (the
placement before the index of issue 42), and, where the answer's line number is known, whether they cover it.
Benchmarks measure; they gate nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp import Client

from bench import longdocs
from bench.common import live_openwebui, log
from devtools import openwebui_local
from openwebui_rag_mcp.citations import Words, place
from openwebui_rag_mcp.config import load_settings
from openwebui_rag_mcp.server import create_server

WINDOW = 20
PAGE_CHARS = 8_000
CITATION_FIELDS = ("page", "start_line", "end_line", "link")


@dataclass
class Question:
    query: str
    file_id: str
    line: str  # the answer line, as the document's text has it
    page: int | None = None  # from 1, for PDFs
    number: int | None = None  # the answer line's number in the document's text, where known


@dataclass
class Tally:
    right_document: int = 0
    right_page: int = 0
    pages_asked: int = 0
    chars: list[int] = field(default_factory=list)
    found: int = 0
    compared: int = 0  # first hits whose lines were compared with reading the document through
    same: int = 0  # ... and were the same
    numbered: int = 0  # first hits on a document whose answer line number is known
    covered: int = 0  # ... whose lines cover it


def read_through(text: str, fragment: str) -> tuple[int, int] | None:
    """`fragment` placed by reading the text through, with no index (as before issue 42)."""
    return place(Words.of(text, index=False), fragment)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def questions_of(texts: dict[str, str], count: int) -> list[Question]:
    """One question per document while there are documents: a line in its middle with at least six words."""
    chosen: list[Question] = []
    for file_id, text in texts.items():
        lines = [line.strip() for line in text.splitlines()]
        middle = len(lines) // 2
        ordered = lines[middle:] + lines[:middle]
        line = next((candidate for candidate in ordered if len(candidate.split()) >= 6), None)
        if line is not None:
            chosen.append(Question(query=line, file_id=file_id, line=line))
        if len(chosen) == count:
            break
    return chosen


def pdf_questions(inst: openwebui_local.Instance, knowledge_id: str, count: int) -> list[Question]:
    from tests.live.documents import two_page_pdf

    made = []
    for n in range(count):
        phrase = f"Valve {n} of the {['north', 'south', 'east', 'west', 'upper'][n % 5]} pump opens at {3 + n} bar"
        with openwebui_local.client(inst) as http:
            answer = http.post(
                "/api/v1/files/", files={"file": (f"manual-{n}.pdf", two_page_pdf(phrase), "application/pdf")}
            )
        file_id = answer.json()["id"]
        openwebui_local.wait_processed(inst, file_id)
        openwebui_local.add_file(inst, knowledge_id, file_id)
        made.append(Question(query=phrase, file_id=file_id, line=phrase, page=2))
    return made


async def through_server(client: Client, q: Question, bases: list[str], tally: Tally, before: Tally) -> dict[str, Any]:
    """The ways through this server; returns its first hit."""
    found = await client.call_tool("knowledge_search", {"query": q.query, "knowledge_ids": bases, "top_k": 5})
    body = found.structured_content or {}
    hits = body.get("results", [])
    first: dict[str, Any] = hits[0] if hits else {}
    plain = {**body, "results": [{k: v for k, v in hit.items() if k not in CITATION_FIELDS} for hit in hits]}
    for t in (tally, before):
        t.right_document += first.get("file_id") == q.file_id
    if q.page is not None:
        tally.pages_asked += 1
        tally.right_page += first.get("page") == q.page
    if first.get("file_id") != q.file_id:
        return first
    # With citations: the lines around the hit.
    start, end = first.get("start_line"), first.get("end_line")
    read = _size(body)
    if start is not None and end is not None:
        window = await client.call_tool(
            "knowledge_get_file",
            {"file_id": q.file_id, "start_line": max(1, start - WINDOW), "end_line": end + WINDOW},
        )
        text = (window.structured_content or {}).get("text", "")
        read += _size(window.structured_content)
        if q.line in text:
            tally.found += 1
            tally.chars.append(read)
    # Before citations: page through the document from its start.
    read = _size(plain)
    offset: int | None = 0
    while isinstance(offset, int):
        part = await client.call_tool(
            "knowledge_get_file", {"file_id": q.file_id, "offset": offset, "max_chars": PAGE_CHARS}
        )
        content = part.structured_content or {}
        read += _size(content)
        if q.line in content.get("text", ""):
            before.found += 1
            before.chars.append(read)
            break
        next_offset = content.get("next_offset")
        offset = next_offset if isinstance(next_offset, int) else None
    return first


def directly(http: httpx.Client, q: Question, bases: list[str], tally: Tally) -> tuple[str | None, str]:
    """Open WebUI directly; returns its first hit's file_id and whole fragment."""
    answer = http.post(
        "/api/v1/retrieval/query/collection", json={"collection_names": bases, "query": q.query, "k": 5}
    ).json()
    metadatas = (answer.get("metadatas") or [[]])[0]
    first = metadatas[0] if metadatas else {}
    fragment = ((answer.get("documents") or [[]])[0] or [""])[0]
    tally.right_document += first.get("file_id") == q.file_id
    if q.page is not None:
        tally.pages_asked += 1
        tally.right_page += first.get("page") == q.page  # as given, from 0: the raw value misleads by one
    if first.get("file_id") != q.file_id:
        return first.get("file_id"), fragment
    document = http.get(f"/api/v1/files/{q.file_id}").json()
    if q.line in ((document.get("data") or {}).get("content") or ""):
        tally.found += 1
        tally.chars.append(_size(answer) + _size(document))
    return first.get("file_id"), fragment


def compare(http: httpx.Client, q: Question, hit: dict[str, Any], direct: tuple[str | None, str], tally: Tally) -> None:
    """The server's lines for its first hit against reading the document through with the same fragment (Open
    WebUI's whole one, from the direct answer to the same query), and against the answer's known line."""
    file_id, fragment = direct
    if not file_id or hit.get("file_id") != file_id:
        return
    text = (http.get(f"/api/v1/files/{file_id}").json().get("data") or {}).get("content") or ""
    expected = read_through(text, fragment)
    tally.compared += 1
    tally.same += (hit.get("start_line"), hit.get("end_line")) == (expected or (None, None))
    if q.number is not None and file_id == q.file_id:
        tally.numbered += 1
        start, end = hit.get("start_line"), hit.get("end_line")
        tally.covered += isinstance(start, int) and isinstance(end, int) and start <= q.number <= end


def row(name: str, t: Tally, total: int) -> str:
    pages = f"{t.right_page}/{t.pages_asked}" if t.pages_asked else "n/a"
    chars = f"{statistics.median(t.chars):,.0f}" if t.chars else "n/a"
    return f"| {name} | {t.right_document}/{total} | {pages} | {t.found}/{total} | {chars} |"


def long_questions(inst: openwebui_local.Instance, knowledge_id: str, count: int, chars: int) -> list[Question]:
    """`count` long Markdown documents and `count` long PDFs in `knowledge_id`, three questions each."""
    asked = []
    for n in range(count):
        document = longdocs.long_markdown(n, chars)
        metadata = {"title": document.title, "source": document.filename}
        file_id = openwebui_local.upload_text(inst, document.filename, document.text, metadata)
        openwebui_local.add_file(inst, knowledge_id, file_id)
        asked += [Question(a.line, file_id, a.line, number=a.number) for a in document.answers]
        content, pdf = longdocs.long_pdf(n, chars)
        with openwebui_local.client(inst) as http:
            answer = http.post("/api/v1/files/", files={"file": (pdf.filename, content, "application/pdf")})
        file_id = answer.json()["id"]
        openwebui_local.wait_processed(inst, file_id, timeout=600)
        openwebui_local.add_file(inst, knowledge_id, file_id)
        asked += [Question(a.line, file_id, a.line, page=a.page) for a in pdf.answers]
        log(f"citations: long document {n + 1} of {count} (Markdown and PDF) added")
    return asked


def table(name: str, asked: list[Question], server: Tally, before: Tally, direct: Tally) -> list[str]:
    total = len(asked)
    numbered = f"; the known answer line inside them {server.covered}/{server.numbered}" if server.numbered else ""
    return [
        f"{name}: {total} questions ({sum(q.page is not None for q in asked)} on a known page of a PDF).",
        "",
        "| way | first hit: right document | right page (PDFs) | answer line reached | median characters read |",
        "|---|---|---|---|---|",
        row("this server, search then the lines around the hit", server, total),
        row("this server before citations, search then the document from its start", before, total),
        row("Open WebUI directly, query then the whole file", direct, total),
        "",
        f"The server's lines for its first hit were those found by reading the document through {server.same}/"
        f"{server.compared} times{numbered}.",
        "",
    ]


async def run(version: str, docs: int, count: int, pdfs: int, long: int, long_chars: int) -> str:
    info: dict[str, Any] = {}
    out: list[str] = []
    async with live_openwebui(version, docs, info) as live:
        inst = live.inst
        bases = live.seeded.base_ids
        pdf_base = openwebui_local.create_knowledge(inst, "Manuals", "two-page PDFs")
        log(f"citations: adding {pdfs} two-page PDFs")
        asked = await asyncio.to_thread(pdf_questions, inst, pdf_base, pdfs)
        bases = [*bases, pdf_base]
        sets: list[tuple[str, list[str], list[Question]]] = []
        with openwebui_local.client(inst) as http:
            texts = {
                file_id: (http.get(f"/api/v1/files/{file_id}").json().get("data") or {}).get("content") or ""
                for file_id in live.seeded.files.values()
            }
        sets.append(("Small documents", bases, questions_of(texts, count) + asked))
        if long:
            long_base = openwebui_local.create_knowledge(
                inst, "Long documents", "Markdown and PDFs over 1 M characters"
            )
            log(f"citations: adding {long} long Markdown documents and {long} long PDFs of {long_chars:,} characters")
            sets.append(
                (
                    "Long documents",
                    [long_base],
                    await asyncio.to_thread(long_questions, inst, long_base, long, long_chars),
                )
            )
        env = {"OPENWEBUI_URL": inst.url, "OPENWEBUI_API_KEY": inst.api_key}
        with openwebui_local.client(inst) as http:
            async with Client(create_server(load_settings(env))) as client:
                for name, searched, questions in sets:
                    server, before, direct = Tally(), Tally(), Tally()
                    for q in questions:
                        hit = await through_server(client, q, searched, server, before)
                        first = await asyncio.to_thread(directly, http, q, searched, direct)
                        await asyncio.to_thread(compare, http, q, hit, first, server)
                    out += table(name, questions, server, before, direct)
    return "\n".join([f"Open WebUI {info.get('openwebui', version)}.", "", *out]).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.citations", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=openwebui_local.NEWEST)
    parser.add_argument("--docs", type=int, default=60, help="standard-library documents to seed")
    parser.add_argument("--questions", type=int, default=40, help="questions on the seeded documents")
    parser.add_argument("--pdfs", type=int, default=5, help="two-page PDFs, one question each")
    parser.add_argument("--long", type=int, default=2, help="long Markdown documents, and as many long PDFs")
    parser.add_argument("--long-chars", type=int, default=longdocs.LONG_CHARS, help="characters of each long one")
    args = parser.parse_args(argv)
    print(asyncio.run(run(args.version, args.docs, args.questions, args.pdfs, args.long, args.long_chars)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
