"""Long documents for the benchmarks (issue 42): Markdown and PDFs of over a million characters, made of prose whose
words the offline embedding stand-in ranks, each with a few answer lines planted at known lines (and pages).

The same arguments give the same documents on every run. `bench.run` searches Markdown ones next to the small
corpus; `bench.citations` asks where the answer lines are in both kinds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fpdf import FPDF

LONG_CHARS = 1_100_000  # each long document's text, at least
ANSWERS = 3  # answer lines per document: early, in the middle and late
LINES_PER_PAGE = 40  # of a long PDF: each page gets exactly this many lines
_SYLLABLES = ["ka", "lo", "mi", "ner", "tu", "vas", "pre", "dol", "gan", "sir", "ob", "ul", "fen", "ri", "cas", "tem"]
_ANSWER_SYLLABLES = ["zor", "quil", "brax", "yen", "whip", "jux", "kray", "oxo", "zem", "flib", "grom", "hax"]
_PLACES = [0.2, 0.55, 0.9]  # where the answer lines go, as a share of the document's lines


@dataclass(frozen=True, slots=True)
class Answer:
    """A planted line: its text (the question is its words), its number in the document's text and, for a PDF, its
    page (from 1)."""

    line: str
    number: int
    page: int | None = None


@dataclass(frozen=True, slots=True)
class LongDocument:
    title: str
    filename: str
    text: str
    answers: list[Answer]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    words = {"".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4))) for _ in range(size * 2)}
    return sorted(words)[:size]


def _answer(n: int, k: int) -> str:
    """A line of words found nowhere else, in no other answer either (the offline model then ranks its fragment
    first): made of syllables the prose never uses."""
    rng = random.Random(f"answer {n} {k}")
    word = ["".join(rng.choices(_ANSWER_SYLLABLES, k=3)) for _ in range(5)]
    return (
        f"The {word[0]} {word[1]} valve of station {word[2]} opens at {k + 3} bar once the {word[3]} reads {word[4]}."
    )


def long_lines(n: int, chars: int = LONG_CHARS) -> tuple[list[str], list[Answer]]:
    """Document `n`'s lines (prose under a heading every 40 lines) and its answer lines."""
    rng = random.Random(4200 + n)
    vocabulary = _vocabulary(rng, 3_000)
    lines: list[str] = []
    size = 0
    while size < chars:
        if len(lines) % 40 == 0:
            line = f"## Section {len(lines) // 40 + 1} of part {n}"
        else:
            words = rng.choices(vocabulary, k=rng.randint(8, 16))
            line = " ".join(words).capitalize() + "."
        lines.append(line)
        size += len(line) + 1
    answers = []
    for k, share in enumerate(_PLACES):
        at = int(len(lines) * share) | 1  # an odd line: never a heading (every 40th, from 0)
        lines[at] = _answer(n, k)
        answers.append(Answer(lines[at], at + 1, at // LINES_PER_PAGE + 1))
    return lines, answers


def long_markdown(n: int, chars: int = LONG_CHARS) -> LongDocument:
    lines, answers = long_lines(n, chars)
    text = f"# Field manual, part {n}\n\n" + "\n".join(lines) + "\n"
    shifted = [Answer(a.line, a.number + 2) for a in answers]  # the title and a blank line come first
    return LongDocument(f"Field manual, part {n}", f"field-manual-{n}.md", text, shifted)


def long_pdf(n: int, chars: int = LONG_CHARS) -> tuple[bytes, LongDocument]:
    """A PDF of `LINES_PER_PAGE` lines a page, and what it holds (its text as written; Open WebUI's extraction
    numbers lines its own way, so a PDF's answers are checked by their text and page)."""
    lines, answers = long_lines(100 + n, chars)
    document = FPDF()
    document.set_auto_page_break(False)
    document.set_font("Helvetica", size=9)
    for start in range(0, len(lines), LINES_PER_PAGE):
        document.add_page()
        for line in lines[start : start + LINES_PER_PAGE]:
            document.cell(text=line, h=6, new_x="LMARGIN", new_y="NEXT")
    title = f"Service handbook, part {n}"
    return bytes(document.output()), LongDocument(title, f"service-handbook-{n}.pdf", "\n".join(lines), answers)
