"""Real document files for the live tests, built in memory: a PDF with real text, a DOCX, a PPTX, an XLSX, an HTML
page, a CSV, plain text in pages (form feeds), Markdown in Cyrillic and in CJK, and files Open WebUI's default loaders
extract nothing from (a PNG, a PDF whose page holds only a drawing).

Every builder puts one distinctive sentence (``phrase``) on a line of its own, surrounded by other text, so a test
can check that the sentence comes back whole from Open WebUI's extraction: from search, from the exact search and
from the text read by lines.
"""

from __future__ import annotations

import csv as csv_module
import html as html_module
import io
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import docx
import openpyxl  # type: ignore[import-untyped]
import pptx
from fpdf import FPDF


@dataclass(frozen=True)
class Document:
    """A file to add: its name (with the extension Open WebUI picks a loader by), its bytes, and the sentence
    inside it that the tests look for (empty for files nothing can be extracted from)."""

    kind: str
    filename: str
    content: bytes
    phrase: str


def phrase_for(kind: str, tag: str) -> str:
    """A sentence no other document holds: made-up words, the kind and a per-test tag. Cyrillic and CJK documents
    get one in their own script (the tag stays ASCII hex)."""
    if kind == "md-cyrillic":
        return f"Ёжик Прохор сверяет амбарную книгу {tag} у тихой реки"
    if kind == "md-cjk":
        return f"東京の図書館で古い帳簿{tag}を静かに読む"
    return f"The zanthorpe ledger {tag} balances at forty {kind} quills"


def pdf(phrase: str) -> bytes:
    """A one-page PDF with real (Helvetica) text: a title, two lines around the phrase."""
    document = FPDF()
    document.add_page()
    document.set_font("Helvetica", size=12)
    for line in ("Quarterly notes", "The first line is about the weather.", phrase, "The last line says goodbye."):
        document.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    return bytes(document.output())


def two_page_pdf(phrase: str) -> bytes:
    """A two-page PDF with real text: a first page of other lines, the phrase on the second between two others."""
    document = FPDF()
    document.set_font("Helvetica", size=12)
    pages = (
        ("Maintenance manual", "Page one covers the cabinet and its doors.", "Keep the doors closed."),
        ("The pump", phrase, "Prime the pump before its first use."),
    )
    for lines in pages:
        document.add_page()
        for line in lines:
            document.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    return bytes(document.output())


def drawing_pdf() -> bytes:
    """A one-page PDF with a rectangle and no text at all: what a scan without OCR looks like to a text loader."""
    document = FPDF()
    document.add_page()
    document.set_fill_color(40, 90, 160)
    document.rect(20, 20, 120, 80, style="F")
    return bytes(document.output())


def docx_file(phrase: str) -> bytes:
    document = docx.Document()
    document.add_heading("Quarterly notes", level=1)
    document.add_paragraph("The first paragraph is about the weather.")
    document.add_paragraph(phrase)
    document.add_paragraph("The last paragraph says goodbye.")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def pptx_file(phrase: str) -> bytes:
    """Two slides: a title slide, then one whose text box holds the phrase between two other lines."""
    deck = pptx.Presentation()
    title = deck.slides.add_slide(deck.slide_layouts[0])
    title.shapes.title.text = "Quarterly review"
    title.placeholders[1].text = "Slides for the live tests"
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Findings"
    body = slide.placeholders[1].text_frame
    body.text = "The first point is about the weather."
    for line in (phrase, "The last point says goodbye."):
        body.add_paragraph().text = line
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def xlsx(phrase: str) -> bytes:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Ledger"
    sheet.append(["id", "note"])
    sheet.append([1, "The first row is about the weather."])
    sheet.append([2, phrase])
    sheet.append([3, "The last row says goodbye."])
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def html(phrase: str) -> bytes:
    """An HTML page; each element on its own line, so the extracted text has the phrase on a line of its own."""
    page = "\n".join(
        [
            "<!DOCTYPE html>",
            "<html>",
            "<head><meta charset='utf-8'><title>Quarterly notes</title></head>",
            "<body>",
            "<h1>Quarterly notes</h1>",
            "<p>The first paragraph is about the weather.</p>",
            f"<p>{html_module.escape(phrase)}</p>",
            "<p>The last paragraph says goodbye.</p>",
            "</body>",
            "</html>",
            "",
        ]
    )
    return page.encode()


def csv_file(phrase: str) -> bytes:
    buffer = io.StringIO()
    writer = csv_module.writer(buffer, lineterminator="\n")
    writer.writerow(["id", "note"])
    writer.writerow([1, "The first row is about the weather."])
    writer.writerow([2, phrase])
    writer.writerow([3, "The last row says goodbye."])
    return buffer.getvalue().encode()


def paged_text(phrase: str) -> bytes:
    """Plain text in pages, as RFCs and printed reports come: a form feed (U+000C) on a line of its own between
    pages. Open WebUI keeps the form feeds in the extracted text."""
    pages = [
        "Quarterly notes\n\nPage one is about the weather.\n",
        f"Page two\n\n{phrase}\n",
        "Page three says goodbye.\n",
    ]
    return "\f\n".join(pages).encode()


def markdown_cyrillic(phrase: str) -> bytes:
    text = f"# Заметки о хозяйстве\n\nПервая строка рассказывает о погоде.\n\n{phrase}\n\nПоследняя строка прощается.\n"
    return text.encode()


def markdown_cjk(phrase: str) -> bytes:
    text = f"# 四半期のメモ\n\n最初の行は天気についてです。\n\n{phrase}\n\n最後の行はさようならと言います。\n"
    return text.encode()


def png() -> bytes:
    """A valid 8x8 RGB PNG (a plain blue square): an image, no text."""
    width = height = 8
    rows = b"".join(b"\x00" + bytes((40, 90, 160)) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# kind -> (extension, builder of the bytes from the phrase)
TEXT_BUILDERS: dict[str, tuple[str, Callable[[str], bytes]]] = {
    "pdf": ("pdf", pdf),
    "docx": ("docx", docx_file),
    "pptx": ("pptx", pptx_file),
    "xlsx": ("xlsx", xlsx),
    "html": ("html", html),
    "csv": ("csv", csv_file),
    "txt-pages": ("txt", paged_text),
    "md-cyrillic": ("md", markdown_cyrillic),
    "md-cjk": ("md", markdown_cjk),
}
# kind -> (filename, bytes) of files with no text for Open WebUI's default loaders
NO_TEXT: dict[str, tuple[str, Callable[[], bytes]]] = {
    "png": ("blue-square.png", png),
    "drawing-pdf": ("scan-without-ocr.pdf", drawing_pdf),
}


def build(kind: str, tag: str, stem: str = "notes") -> Document:
    """The document of ``kind`` (a key of TEXT_BUILDERS) with the phrase for ``tag``, named ``<stem>-<tag>.<ext>``."""
    extension, builder = TEXT_BUILDERS[kind]
    phrase = phrase_for(kind, tag)
    return Document(kind, f"{stem}-{tag}.{extension}", builder(phrase), phrase)


def build_no_text(kind: str) -> Document:
    filename, builder = NO_TEXT[kind]
    return Document(kind, filename, builder(), "")


def one_line(text: str) -> str:
    """`text` with every run of whitespace one space: a phrase as a search hit may show it (lines joined)."""
    return " ".join(text.split())
