"""Exact search over a base's documents: every matching line with its number, Open WebUI's content filter passed on
where the release has one, caps on documents read and matches returned, marked when reached."""

from __future__ import annotations

import re
import string
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp import exact
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.exact import find_exact
from tests.conftest import make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
TEXTS = {
    "f-1": "# Ошибки\n\nКод ERR-4711 значит: диск полон.\nERR-4712 is another one.\nerr-4711 in lower case\n",
    "f-2": "Nothing here.\n",
    "f-3": "第一行\n错误 ERR-4711 出现了\n",
}


def upstream(release: str) -> tuple[respx.Router, list[dict[str, Any]]]:
    router = new_router()
    router.get("/api/version").respond(json={"version": release})
    asked: list[dict[str, Any]] = []
    items = [{"id": file_id, "filename": f"{file_id}.md", "meta": {"name": f"{file_id}.md"}} for file_id in TEXTS]

    def files(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        return httpx.Response(200, json={"items": items, "total": len(items)})

    router.get(f"/api/v1/knowledge/{KB}/files").mock(side_effect=files)
    router.get(f"/api/v1/knowledge/{KB}").respond(json={"id": KB, "name": "n", "files": items})
    for file_id, text in TEXTS.items():
        router.get(f"/api/v1/files/{file_id}").respond(
            json={"id": file_id, "filename": f"{file_id}.md", "data": {"content": text}}
        )
    return router, asked


@asynccontextmanager
async def app_for(router: respx.Router) -> AsyncIterator[App]:
    settings = make_settings()
    client = OpenWebUIClient(settings, transport=mock_transport(router))
    try:
        yield App(settings=settings, client=client)
    finally:
        await client.aclose()


@pytest.mark.parametrize("release", ["0.6.5", "0.8.12", "0.9.5", "0.9.6", "0.10.2", "0.12.4"])
async def test_every_matching_line_with_its_number(release: str) -> None:
    router, asked = upstream(release)
    async with app_for(router) as app:
        found = await find_exact(app, KB, "ERR-4711", case_sensitive=True, max_files=50, max_matches=50)
    assert [(m.file_id, m.line, m.text) for m in found.matches] == [
        ("f-1", 3, "Код ERR-4711 значит: диск полон."),
        ("f-3", 2, "错误 ERR-4711 出现了"),
    ]
    assert (found.count, found.files_scanned, found.files_capped, found.matches_capped) == (2, 3, False, False)
    # From 0.9.6 Open WebUI's own content filter narrows what is read; before, every document is listed and read.
    if Release.parse(release).parts >= (0, 9, 6):
        assert [(params["query"], params["include_content"]) for params in asked] == [("ERR-4711", "true")]
    else:
        assert all("query" not in params for params in asked)


async def test_case_insensitive_by_choice() -> None:
    router, _ = upstream("0.12.4")
    async with app_for(router) as app:
        found = await find_exact(app, KB, "err-4711", case_sensitive=False, max_files=50, max_matches=50)
    assert [(m.file_id, m.line) for m in found.matches] == [("f-1", 3), ("f-1", 5), ("f-3", 2)]


async def test_caps_are_reached_and_said() -> None:
    router, _ = upstream("0.12.4")
    async with app_for(router) as app:
        few_files = await find_exact(app, KB, "ERR", case_sensitive=True, max_files=1, max_matches=50)
        few_matches = await find_exact(app, KB, "ERR", case_sensitive=True, max_files=50, max_matches=2)
        exact_fit = await find_exact(app, KB, "ERR", case_sensitive=True, max_files=50, max_matches=3)
    assert (few_files.files_scanned, few_files.files_capped) == (1, True)
    assert (few_matches.count, few_matches.matches_capped) == (2, True)
    assert (exact_fit.count, exact_fit.matches_capped) == (3, False)  # all there were: not capped


@pytest.mark.parametrize("phrase", ["", "   ", "two\nlines", "x" * 501])
async def test_bad_phrases_are_refused(phrase: str) -> None:
    router, _ = upstream("0.12.4")
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await find_exact(app, KB, phrase, case_sensitive=True, max_files=50, max_matches=50)
    assert caught.value.code == "invalid_argument"
    assert router.calls.call_count == 0


# -- Open WebUI's content filter is not exact matching --------------------------------------------------------------
# 0.12's filter is `filename ILIKE '%q%' OR substr(data->>'content', 1, N) ILIKE '%q%'`: on PostgreSQL a backslash in
# q escapes the next character and case is folded per character with lower(); on SQLite lower() folds ASCII only.
# Neither is casefold(), so the phrase itself cannot be trusted to narrow the documents.


def like(text: str, query: str, engine: str) -> bool:
    """`text ILIKE '%query%'` as the engine evaluates it."""
    pattern, chars = "", iter(query)
    for char in chars:
        if char == "\\" and engine == "postgresql":
            pattern += re.escape(next(chars, ""))
        else:
            pattern += {"%": ".*", "_": "."}.get(char) or re.escape(char)

    def lower(value: str) -> str:
        return value.lower() if engine == "postgresql" else value.translate(ASCII_LOWER)

    return re.search(lower(pattern), lower(text), re.DOTALL) is not None


ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def filtering_upstream(texts: dict[str, str], engine: str) -> tuple[respx.Router, list[dict[str, Any]]]:
    """A 0.12-shaped Open WebUI whose content filter behaves like the engine's ILIKE."""
    router = new_router()
    router.get("/api/version").respond(json={"version": "0.12.4"})
    asked: list[dict[str, Any]] = []

    def files(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        asked.append(params)
        query = params.get("query")
        kept = [
            {"id": file_id, "filename": f"{file_id}.md", "meta": {"name": f"{file_id}.md"}}
            for file_id, text in texts.items()
            if query is None or like(f"{file_id}.md", query, engine) or like(text, query, engine)
        ]
        return httpx.Response(200, json={"items": kept, "total": len(kept)})

    router.get(f"/api/v1/knowledge/{KB}/files").mock(side_effect=files)
    for file_id, text in texts.items():
        router.get(f"/api/v1/files/{file_id}").respond(
            json={"id": file_id, "filename": f"{file_id}.md", "data": {"content": text}}
        )
    return router, asked


MISSED = [  # phrase, case_sensitive, the line that must be found
    ("C:\\Users", True, "Profiles live in C:\\Users\\anna."),
    ("C:\\Users", False, "profiles live in c:\\users\\anna."),
    ("STRASSE", False, "Hauptstraße 5"),
    ("file", False, "the ﬁle is closed"),  # the ligature casefolds to "fi"
    ("ΟΔΟΣ", False, "μια οδος"),  # final sigma: lower() keeps it, casefold() does not
    ("5 k", False, "cooled to 5 \u212a"),  # KELVIN SIGN: lower() on SQLite leaves it alone
    ("100%_done", True, "100%_done at last"),
]


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
@pytest.mark.parametrize(("phrase", "case_sensitive", "line"), MISSED)
async def test_matches_the_content_filter_would_miss_are_found(
    engine: str, phrase: str, case_sensitive: bool, line: str
) -> None:
    texts = {"f-1": "Nothing here.\n", "f-2": f"first\n{line}\n"}
    router, _ = filtering_upstream(texts, engine)
    async with app_for(router) as app:
        found = await find_exact(app, KB, phrase, case_sensitive=case_sensitive, max_files=50, max_matches=50)
    assert [(m.file_id, m.line, m.text) for m in found.matches] == [("f-2", 2, line)]
    assert (found.files_capped, found.matches_capped) == (False, False)


async def test_the_filter_still_narrows_where_it_is_exact() -> None:
    """An identifier of safe characters goes to Open WebUI as it is: only the documents that hold it are read."""
    router, asked = filtering_upstream(TEXTS, "postgresql")
    async with app_for(router) as app:
        found = await find_exact(app, KB, "ERR-4711", case_sensitive=False, max_files=50, max_matches=50)
    assert [(params["query"], params["include_content"]) for params in asked] == [("ERR-4711", "true")]
    assert [(m.file_id, m.line) for m in found.matches] == [("f-1", 3), ("f-1", 5), ("f-3", 2)]
    assert found.files_scanned == 2  # f-2 was not read


@pytest.mark.parametrize(
    ("phrase", "case_sensitive", "sent"),
    [
        ("ERR-4711", True, "ERR-4711"),
        ("Код ERR-4711", True, " ERR-4711"),  # the longest run of safe characters
        ("C:\\Users", True, "Users"),
        ("C:\\Users", False, "C:"),  # s is unsafe without case: "ß" and "ſ" casefold to it
        ("50% off", True, " off"),
        ("STRASSE", False, "R"),
        ("ΟΔΟΣ", False, None),  # nothing safe: every document is read
        ("süß", True, "s"),
        ("süß", False, None),
        ('say "hi"', True, "say "),
    ],
)
async def test_what_is_sent_to_the_content_filter(phrase: str, case_sensitive: bool, sent: str | None) -> None:
    router, asked = filtering_upstream(TEXTS, "postgresql")
    async with app_for(router) as app:
        await find_exact(app, KB, phrase, case_sensitive=case_sensitive, max_files=50, max_matches=50)
    assert [params.get("query") for params in asked] == [sent]
    assert [params.get("include_content") for params in asked] == ["true" if sent is not None else None]


def test_the_unsafe_letters_are_those_unicode_casefolds_into() -> None:
    """Every ASCII character that the case-fold of some non-ASCII character contains is unsafe without case."""
    produced = {char for point in range(0x80, sys.maxunicode + 1) for char in chr(point).casefold() if char.isascii()}
    assert produced == set(exact.FOLDED_INTO)
