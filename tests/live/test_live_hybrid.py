"""`knowledge_search`'s hybrid controls against a real Open WebUI of every release (issue 17, part 4).

A second Open WebUI of the session's release is started for this module with hybrid search on and, where the release
has an external reranker (0.6.43 and later), the fake embedding server's `/v1/rerank` as its reranker: its scores
(the share of the query's words a fragment holds) are on another scale than the vectors', so a search shows which of
the two ranked it, and the server counts the reranking requests. The session's own Open WebUI has hybrid search off,
as Open WebUI ships. Each release is held to what its source says it does with `hybrid` and `hybrid_bm25_weight`
(compat.py): a control it honours is sent and the answer shows it; one it would read otherwise is refused.

Open WebUI 0.6.5 as installed from PyPI cannot run hybrid search at all: it imports sentence-transformers for every
hybrid search, whose dependencies today (pyarrow) need NumPy 2 where 0.6.5 pins NumPy 1.26, so every hybrid search
fails with HTTP 400 "Hybrid search failed for all collections". The tests hold it to that, said as Open WebUI's error.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools import openwebui_local as owui
from devtools.fake_embeddings import rerank_score
from devtools.openwebui_local import Instance, User
from openwebui_rag_mcp.compat import BM25_WEIGHT, BM25_WEIGHT_ZERO, VECTOR_ONLY_ON_REQUEST
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def hybrid_openwebui(live_openwebui: Instance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    workdir: Path = tmp_path_factory.mktemp(f"openwebui-hybrid-{live_openwebui.version}")
    instance = owui.start(live_openwebui.version, workdir, hybrid=True)
    try:
        yield instance
    finally:
        owui.stop(instance)


@pytest.fixture(scope="module")
def handbook(hybrid_openwebui: Instance) -> tuple[str, str]:
    """A private base of the admin's on the hybrid instance, and the tag its texts carry."""
    inst, tag = hybrid_openwebui, uuid.uuid4().hex[:8]
    base = owui.create_knowledge(inst, f"hybrid-{tag}", "hybrid search", private=True)
    for name, text in (
        ("zebras.md", f"# Zebras {tag}\n\nZebra stripes are black and white; every zebra has its own pattern."),
        ("horses.md", f"# Horses {tag}\n\nHorses graze on open grassland and sleep standing up."),
        ("lunch.md", f"# Lunch {tag}\n\nThe canteen serves soup on Fridays."),
    ):
        owui.add_file(inst, base, owui.upload_text(inst, name, text))
    return base, tag


def reranked(inst: Instance) -> int:
    answer = httpx.get(f"{inst.embed_url}/rerank/requests", trust_env=False, timeout=10)
    answer.raise_for_status()
    count: int = answer.json()["requests"]
    return count


def ran_hybrid(body: dict[str, Any]) -> bool:
    return bool(body["results"]) and all(hit["score"] == hit["distance"] for hit in body["results"])


def at_least(inst: Instance, boundary: tuple[int, int, int]) -> bool:
    return owui.version_parts(inst.version) >= boundary


def hybrid_fails(inst: Instance) -> bool:
    """The release whose hybrid search fails as installed from PyPI (see the module's docstring)."""
    return inst.version in owui.HYBRID_BROKEN


def failed_upstream(answer: tuple[bool, dict[str, Any]]) -> None:
    is_error, body = answer
    assert is_error, body
    assert body["code"] == "upstream_error", body
    assert "Hybrid search failed for all collections" in body["message"], body


async def test_hybrid_search_runs_with_the_reranker(hybrid_openwebui: Instance, handbook: tuple[str, str]) -> None:
    inst, (base, tag) = hybrid_openwebui, handbook
    query = f"zebra stripes {tag}"
    before = reranked(inst)
    async with stdio_session(inst, OPENWEBUI_HYBRID_SEARCH="true") as admin:
        answer = await admin.call("knowledge_search", {"query": query, "knowledge_ids": [base], "hybrid": True})
        listed = {tool.name: tool for tool in (await admin.session.list_tools()).tools}
    assert {"hybrid", "bm25_weight", "k_reranker"} <= set(listed["knowledge_search"].input_schema["properties"])
    if hybrid_fails(inst):
        failed_upstream(answer)
        assert reranked(inst) == before  # 0.6.5 has no reranker over HTTP
        return
    is_error, body = answer
    assert not is_error, body
    assert ran_hybrid(body), body
    first = body["results"][0]
    assert first["title"].startswith("zebras"), body
    assert reranked(inst) > before
    # The reranker's own score: every query word is in the zebra fragment.
    assert first["distance"] == pytest.approx(rerank_score(query, first["text"])), first
    assert first["distance"] == pytest.approx(1.0)


async def test_vectors_only_where_the_release_takes_it_and_refused_where_not(
    hybrid_openwebui: Instance, handbook: tuple[str, str]
) -> None:
    inst, (base, tag) = hybrid_openwebui, handbook
    before = reranked(inst)
    async with stdio_session(inst) as admin:
        is_error, body = await admin.call(
            "knowledge_search", {"query": f"zebra stripes {tag}", "knowledge_ids": [base], "hybrid": False}
        )
    first, last = VECTOR_ONLY_ON_REQUEST
    if hybrid_fails(inst):  # 0.6.5 ignores hybrid false, so it runs its failing hybrid search
        failed_upstream((is_error, body))
    elif at_least(inst, first) and not at_least(inst, last):  # 0.6.43 takes hybrid false
        assert not is_error, body
        assert body["results"], body
        assert not any(hit["score"] is not None for hit in body["results"]), body
        assert body["results"][0]["title"].startswith("zebras"), body
        assert reranked(inst) == before
    else:
        assert is_error, body
        assert body["code"] == "unsupported", body
        assert "asked for vectors only" in body["message"], body
        assert "ENABLE_RAG_HYBRID_SEARCH" in body["message"] or "ignores hybrid false" in body["message"], body


async def test_a_bm25_weight_is_taken_where_the_release_reads_it_and_refused_where_not(
    hybrid_openwebui: Instance, handbook: tuple[str, str]
) -> None:
    """Accepted by Open WebUI and answered by hybrid search where the release reads the weight as meant, refused
    before searching where not. The reranker puts the same fragment first whatever the weight, so which weight Open
    WebUI used is the unit tests' to show (they check the request)."""
    inst, (base, tag) = hybrid_openwebui, handbook
    query = {"query": f"zebra stripes {tag}", "knowledge_ids": [base]}
    async with stdio_session(inst) as admin:
        keywords = await admin.call("knowledge_search", {**query, "bm25_weight": 1})
        vectors = await admin.call("knowledge_search", {**query, "bm25_weight": 0})
    if not at_least(inst, BM25_WEIGHT):  # 0.6.5
        for is_error, body in (keywords, vectors):
            assert is_error, body
            assert body["code"] == "unsupported", body
            assert "takes no BM25 weight per search" in body["message"], body
        return
    is_error, body = keywords
    assert not is_error, body
    assert ran_hybrid(body), body
    assert body["results"][0]["title"].startswith("zebras"), body
    is_error, body = vectors
    if at_least(inst, BM25_WEIGHT_ZERO):
        assert not is_error, body
        assert ran_hybrid(body), body
        assert body["results"][0]["title"].startswith("zebras"), body
    else:  # 0.6.43, 0.8.12: 0 would mean "the admin setting"
        assert is_error, body
        assert "reads a BM25 weight of 0 as 'use the admin setting'" in body["message"], body


async def test_hybrid_controls_where_open_webui_runs_vectors_only(live_openwebui: Instance) -> None:
    """The session's Open WebUI, as it ships: hybrid search off. Asking for it is refused, not answered by vectors."""
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    base = owui.create_knowledge(inst, f"vectors-{tag}", "no hybrid", private=True)
    owui.add_file(inst, base, owui.upload_text(inst, "zebras.md", f"# Zebras {tag}\n\nZebra stripes are black."))
    query = {"query": f"zebra stripes {tag}", "knowledge_ids": [base]}
    async with stdio_session(inst) as admin:
        plain = await admin.ok("knowledge_search", {**query, "hybrid": False})
        asked = await admin.call("knowledge_search", {**query, "hybrid": True})
        weighted = await admin.call("knowledge_search", {**query, "bm25_weight": 0.5})
        health = await admin.ok("knowledge_health", {"deep": True})
    assert plain["results"], plain
    assert not ran_hybrid(plain), plain
    is_error, body = asked
    assert is_error, body
    assert body["code"] == "unsupported", body
    assert "hybrid search is off in this Open WebUI" in body["message"], body
    is_error, body = weighted
    assert is_error, body
    assert body["code"] == "unsupported", body
    expected = "hybrid search is off" if at_least(inst, BM25_WEIGHT) else "takes no BM25 weight per search"
    assert expected in body["message"], body
    assert "OPENWEBUI_HYBRID_SEARCH" not in (health["retrieval_detail"] or ""), health


async def test_a_second_user_reaches_only_its_own_documents_through_hybrid_search(
    hybrid_openwebui: Instance, handbook: tuple[str, str]
) -> None:
    inst, (base, tag) = hybrid_openwebui, handbook
    user: User = owui.add_user(inst, "Hybrid User", f"hybrid-{tag}@example.com")
    own = owui.create_knowledge(inst, f"own-{tag}", "the user's", private=True, api_key=user.api_key)
    owui.add_file(
        inst,
        own,
        owui.upload_text(inst, "own.md", f"# Own zebra notes {tag}\n\nMy zebra stripes.", api_key=user.api_key),
        api_key=user.api_key,
    )
    async with stdio_session(inst, api_key=user.api_key) as session:
        refused = await session.call(
            "knowledge_search", {"query": f"zebra stripes {tag}", "knowledge_ids": [base], "hybrid": True}
        )
        answer = await session.call("knowledge_search", {"query": f"zebra stripes {tag}", "hybrid": True})
    is_error, body = refused
    assert is_error, body
    assert body["code"] in ("not_found", "forbidden"), body
    assert "Zebras" not in body["message"], body
    if hybrid_fails(inst):
        failed_upstream(answer)
        return
    is_error, everything = answer
    assert not is_error, everything
    assert everything["knowledge_ids"] == [own], everything
    assert ran_hybrid(everything), everything
    assert {hit["title"] for hit in everything["results"]} == {"own.md"}, everything


async def test_health_tells_the_operator_to_list_the_controls(
    hybrid_openwebui: Instance, handbook: tuple[str, str]
) -> None:
    async with stdio_session(hybrid_openwebui) as admin:
        answer = await admin.call("knowledge_health", {"deep": True})
    if hybrid_fails(hybrid_openwebui):  # its probe search fails as every hybrid search does there
        failed_upstream(answer)
        return
    is_error, health = answer
    assert not is_error, health
    assert health["retrieval_ok"] is True, health
    assert "Open WebUI ran hybrid search: OPENWEBUI_HYBRID_SEARCH=true" in health["retrieval_detail"], health
