"""knowledge_list and knowledge_files against a real Open WebUI: a page at a time with the total, a cursor that
reaches every item exactly once, and `query` filters (Open WebUI's own base search where the release has one)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio

DOCS = 35  # more than one of Open WebUI's pages (30)


@dataclass(frozen=True)
class Bases:
    tag: str
    reports: str  # named and described in Russian, holding DOCS documents
    plans: str
    file_ids: list[str]


@pytest.fixture(scope="module")
def bases(live_openwebui: Instance) -> Bases:
    inst = live_openwebui
    tag = uuid.uuid4().hex[:8]
    reports = owui.create_knowledge(inst, f"lists-{tag} Отчёты", f"Годовые отчёты {tag}")
    plans = owui.create_knowledge(inst, f"lists-{tag} plans", f"Quarterly PLANS {tag}")

    def upload(n: int) -> str:
        return owui.upload_text(inst, f"note-{n:02d}-{tag}.md", f"# Note {n}\n\nText number {n} of {tag}.")

    with ThreadPoolExecutor(8) as pool:
        file_ids = list(pool.map(upload, range(DOCS)))
    for file_id in file_ids:
        owui.add_file(inst, reports, file_id)
    return Bases(tag, reports, plans, file_ids)


async def test_documents_come_a_page_at_a_time_and_the_cursor_reaches_each_once(
    live_openwebui: Instance, bases: Bases
) -> None:
    async with stdio_session(live_openwebui) as server:
        first = await server.ok("knowledge_files", {"knowledge_id": bases.reports})
        assert (first["total"], first["count"]) == (DOCS, 30)
        assert first["next_cursor"]
        assert "5 more documents" in first["hint"]
        is_error, body, items = await server.listing("knowledge_files", {"knowledge_id": bases.reports, "limit": 8})
        assert not is_error, body
        found = [item["file_id"] for item in items]
        assert sorted(found) == sorted(bases.file_ids)  # every document, none twice
        named = await server.ok("knowledge_files", {"knowledge_id": bases.reports, "query": f"NOTE-07-{bases.tag}"})
        assert [item["filename"] for item in named["items"]] == [f"note-07-{bases.tag}.md"]
        assert named["total"] == 1


async def test_bases_are_found_by_name_or_description_in_any_case(live_openwebui: Instance, bases: Bases) -> None:
    async with stdio_session(live_openwebui) as server:
        both = await server.ok("knowledge_list", {"query": f"lists-{bases.tag}"})
        assert {item["knowledge_id"] for item in both["items"]} == {bases.reports, bases.plans}
        assert both["total"] == 2
        by_description = await server.ok("knowledge_list", {"query": f"quarterly plans {bases.tag}"})
        assert [item["knowledge_id"] for item in by_description["items"]] == [bases.plans]
        # Not ASCII: filtered here over every base (SQLite folds case only for ASCII).
        russian = await server.ok("knowledge_list", {"query": f"ОТЧЁТЫ {bases.tag}"})
        assert [item["knowledge_id"] for item in russian["items"]] == [bases.reports]
        nothing = await server.ok("knowledge_list", {"query": f"lists-{bases.tag}-nothing"})
        assert (nothing["total"], nothing["items"], nothing["next_cursor"]) == (0, [], None)
        one = await server.ok("knowledge_list", {"limit": 1})
        assert (one["count"], one["total"] >= 2) == (1, True)
        assert one["next_cursor"]
