"""Exact search over a base's documents: every matching line with its number, Open WebUI's content filter passed on
where the release has one, caps on documents read and matches returned, marked when reached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
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


@pytest.mark.parametrize("release", ["0.6.5", "0.12.4"])
async def test_every_matching_line_with_its_number(release: str) -> None:
    router, asked = upstream(release)
    async with app_for(router) as app:
        found = await find_exact(app, KB, "ERR-4711", True, 50, 50)
    assert [(m.file_id, m.line, m.text) for m in found.matches] == [
        ("f-1", 3, "Код ERR-4711 значит: диск полон."),
        ("f-3", 2, "错误 ERR-4711 出现了"),
    ]
    assert (found.count, found.files_scanned, found.files_capped, found.matches_capped) == (2, 3, False, False)
    if release == "0.12.4":  # Open WebUI's own content filter narrows what is read
        assert asked[0]["query"] == "ERR-4711"
        assert asked[0]["include_content"] == "true"


async def test_case_insensitive_by_choice() -> None:
    router, _ = upstream("0.12.4")
    async with app_for(router) as app:
        found = await find_exact(app, KB, "err-4711", False, 50, 50)
    assert [(m.file_id, m.line) for m in found.matches] == [("f-1", 3), ("f-1", 5), ("f-3", 2)]


async def test_caps_are_reached_and_said() -> None:
    router, _ = upstream("0.12.4")
    async with app_for(router) as app:
        few_files = await find_exact(app, KB, "ERR", True, 1, 50)
        few_matches = await find_exact(app, KB, "ERR", True, 50, 2)
        exact_fit = await find_exact(app, KB, "ERR", True, 50, 3)
    assert (few_files.files_scanned, few_files.files_capped) == (1, True)
    assert (few_matches.count, few_matches.matches_capped) == (2, True)
    assert (exact_fit.count, exact_fit.matches_capped) == (3, False)  # all there were: not capped


@pytest.mark.parametrize("phrase", ["", "   ", "two\nlines", "x" * 501])
async def test_bad_phrases_are_refused(phrase: str) -> None:
    router, _ = upstream("0.12.4")
    async with app_for(router) as app:
        with pytest.raises(ToolFailure) as caught:
            await find_exact(app, KB, phrase, True, 50, 50)
    assert caught.value.code == "invalid_argument"
    assert router.calls.call_count == 0
