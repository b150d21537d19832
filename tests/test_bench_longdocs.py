"""The long documents of the benchmarks (`bench.longdocs`): their answer lines are where they say, once each."""

from __future__ import annotations

from bench import longdocs


def test_a_long_markdown_document_holds_each_answer_once_on_its_line() -> None:
    document = longdocs.long_markdown(1, 60_000)
    lines = document.text.split("\n")
    assert len(document.text) >= 60_000
    assert len(document.answers) == longdocs.ANSWERS
    for answer in document.answers:
        assert lines[answer.number - 1] == answer.line
        assert document.text.count(answer.line.split()[1]) == 1  # its words are found nowhere else


def test_a_long_pdf_puts_each_answer_on_its_page() -> None:
    content, document = longdocs.long_pdf(1, 30_000)
    assert content.startswith(b"%PDF")
    lines = document.text.split("\n")
    for answer in document.answers:
        assert lines[answer.number - 1] == answer.line
        assert answer.page == (answer.number - 1) // longdocs.LINES_PER_PAGE + 1
