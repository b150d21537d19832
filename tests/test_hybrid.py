"""`knowledge_search`'s hybrid controls (issue 17, part 4): `hybrid` and `bm25_weight` are sent where the release
reads them, refused before the search where the release would read them otherwise, and refused after it when the
answer came from the other retrieval mode (hybrid answers copy each fragment's relevance into its metadata as
`score`). They are listed only when OPENWEBUI_HYBRID_SEARCH says Open WebUI runs hybrid search."""

from __future__ import annotations

from typing import Any

import pytest
import respx
from mcp import Client

from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings, mock_transport, sent

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
HITS = [  # (file_id, title, distance), in Open WebUI's order
    ("0000000a-aaaa-4bbb-8ccc-dddddddddddd", "Rota", 0.82),
    ("0000000b-aaaa-4bbb-8ccc-dddddddddddd", "Pager", 0.61),
]
CONTROLS = ("k_reranker", "hybrid", "bm25_weight")
NOW = 1_796_000_000  # 2026-11-30, within the filter's window below
SCOPES = [
    {"knowledge_ids": [KB]},
    {"file_ids": [HITS[0][0]]},
    {},
    {"knowledge_ids": [KB], "changed_after": "2026-01-01"},
]


def upstream(
    router: respx.Router, version: str = "0.12.4", *, ran_hybrid: bool = False, hits: int = len(HITS)
) -> respx.Route:
    router.get("/api/version").respond(json={"version": version})
    base = {"id": KB, "name": "Ops", "description": "", "user_id": "u", "write_access": True, "updated_at": 1}
    router.get("/api/v1/knowledge/", params={"page": "1"}).respond(json={"items": [base], "total": 1})
    router.get("/api/v1/knowledge/").respond(json=[base])
    router.get(f"/api/v1/knowledge/{KB}").respond(json={**base, "files": None})
    router.get(f"/api/v1/knowledge/{KB}/files").respond(
        json={
            "items": [
                {"id": f, "filename": f"{t}.md", "meta": {"name": f"{t}.md"}, "created_at": NOW, "updated_at": NOW}
                for f, t, _ in HITS
            ],
            "total": 2,
        }
    )
    for file_id, title, _ in HITS:
        router.get(f"/api/v1/files/{file_id}").respond(
            json={"id": file_id, "filename": f"{title}.md", "meta": {"name": f"{title}.md"}, "data": {}}
        )
    shown = HITS[:hits]
    # Hybrid search copies each fragment's relevance into its metadata; a vector answer has no `score` of its own
    # (the first one here carries an upload's own `score` key, which is not its relevance).
    metadatas = [
        {"file_id": f, "title": t, "score": d} if ran_hybrid else {"file_id": f, "title": t, "score": 5}
        for f, t, d in shown
    ]
    answer = {"distances": [[d for _, _, d in shown]], "documents": [[f"text of {t}" for _, t, _ in shown]]}
    return router.post("/api/v1/retrieval/query/collection").respond(json={**answer, "metadatas": [metadatas]})


async def search(router: respx.Router, env: dict[str, str] | None = None, **arguments: Any) -> tuple[bool, Any]:
    server = create_server(make_settings(**(env or {})), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        result = await client.call_tool("knowledge_search", {"query": "who is on call", **arguments})
    assert isinstance(result.structured_content, dict)
    return bool(result.is_error), result.structured_content


@pytest.mark.parametrize(
    ("arguments", "fields"),
    [
        ({}, {}),
        ({"k_reranker": 12}, {"k_reranker": 12}),
        ({"hybrid": True}, {"hybrid": True}),
        ({"bm25_weight": 0.25}, {"hybrid_bm25_weight": 0.25}),
        ({"bm25_weight": 1}, {"hybrid_bm25_weight": 1}),
        (
            {"hybrid": True, "bm25_weight": 0.5, "k_reranker": 4},
            {"hybrid": True, "hybrid_bm25_weight": 0.5, "k_reranker": 4},
        ),
    ],
)
async def test_the_controls_are_sent_as_open_webui_names_them(
    router: respx.Router, arguments: dict[str, Any], fields: dict[str, Any]
) -> None:
    query = upstream(router, ran_hybrid=True)
    failed, body = await search(router, knowledge_ids=[KB], **arguments)
    assert not failed, body
    assert body["count"] == 2
    assert {key: value for key, value in sent(query).items() if key not in ("collection_names", "query", "k")} == fields


@pytest.mark.parametrize("scope", SCOPES)
async def test_every_scope_sends_the_controls(router: respx.Router, scope: dict[str, Any]) -> None:
    query = upstream(router, ran_hybrid=True)
    failed, body = await search(router, **scope, hybrid=True, bm25_weight=0.5)
    assert not failed, body
    assert (sent(query)["hybrid"], sent(query)["hybrid_bm25_weight"]) == (True, 0.5)


@pytest.mark.parametrize("scope", SCOPES)
async def test_asking_for_hybrid_where_it_did_not_run_is_refused(router: respx.Router, scope: dict[str, Any]) -> None:
    upstream(router, ran_hybrid=False)
    for arguments in ({"hybrid": True}, {"bm25_weight": 0.5}):
        failed, body = await search(router, **scope, **arguments)
        assert failed, body
        assert body["code"] == "unsupported"
        assert "hybrid search is off in this Open WebUI" in body["message"]
        assert "ENABLE_RAG_HYBRID_SEARCH" in body["message"]


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("0.6.5", "Open WebUI 0.6.5 ignores hybrid false (0.6.26 and later take it)"),
        ("0.6.43", "Open WebUI 0.6.43 should have taken it, as releases 0.6.26 to 0.8.10 do"),
        ("0.12.4", "from 0.8.11 on"),
    ],
)
async def test_vectors_only_where_hybrid_ran_anyway_is_refused(router: respx.Router, version: str, why: str) -> None:
    upstream(router, version, ran_hybrid=True)
    failed, body = await search(router, knowledge_ids=[KB], hybrid=False)
    assert failed, body
    assert body["code"] == "unsupported"
    assert why in body["message"]
    assert "asked for vectors only" in body["message"]


@pytest.mark.parametrize("version", ["0.6.43", "0.12.4"])
async def test_vectors_only_where_the_vector_path_ran(router: respx.Router, version: str) -> None:
    query = upstream(router, version, ran_hybrid=False)
    failed, body = await search(router, knowledge_ids=[KB], hybrid=False)
    assert not failed, body
    assert [hit["title"] for hit in body["results"]] == ["Rota", "Pager"]
    assert sent(query)["hybrid"] is False


async def test_one_fragment_whose_own_score_matches_its_distance_is_no_hybrid_answer(router: respx.Router) -> None:
    """Hybrid search scores every fragment; an upload's own `score` equal to a distance by chance proves nothing."""
    router.get("/api/version").respond(json={"version": "0.12.4"})
    upstream(router, ran_hybrid=False)
    metadatas = [{"file_id": HITS[0][0], "score": 0.82}, {"file_id": HITS[1][0], "score": 5}]
    router.post("/api/v1/retrieval/query/collection").respond(
        json={"distances": [[0.82, 0.61]], "documents": [["a", "b"]], "metadatas": [metadatas]}
    )
    failed, body = await search(router, knowledge_ids=[KB], hybrid=True)
    assert failed, body
    assert "hybrid search is off in this Open WebUI" in body["message"]


async def test_an_empty_answer_cannot_tell_the_mode_and_is_no_error(router: respx.Router) -> None:
    upstream(router, ran_hybrid=False, hits=0)
    failed, body = await search(router, knowledge_ids=[KB], hybrid=True)
    assert (failed, body["count"]) == (False, 0)


async def test_min_score_holds_hybrid_scores(router: respx.Router) -> None:
    upstream(router, ran_hybrid=True)
    failed, body = await search(router, knowledge_ids=[KB], hybrid=True, min_score=0.7)
    assert not failed, body
    assert [(hit["title"], hit["score"], hit["distance"]) for hit in body["results"]] == [("Rota", 0.82, 0.82)]


@pytest.mark.parametrize(
    ("version", "weight", "message"),
    [
        ("0.6.5", 0.5, "Open WebUI 0.6.5 takes no BM25 weight per search (0.6.12 and later do)"),
        ("0.8.12", 0, "reads a BM25 weight of 0 as 'use the admin setting' (0.10.0 and later"),
        ("0.6.43", 0.0, "reads a BM25 weight of 0 as 'use the admin setting'"),
        ("a-fork-build", 0, "Open WebUI a-fork-build reads a BM25 weight of 0 as 'use the admin setting'"),
    ],
)
async def test_a_weight_the_release_would_misread_is_refused_before_searching(
    router: respx.Router, version: str, weight: float, message: str
) -> None:
    query = upstream(router, version, ran_hybrid=True)
    failed, body = await search(router, knowledge_ids=[KB], bm25_weight=weight)
    assert failed, body
    assert body["code"] == "unsupported"
    assert message in body["message"]
    assert "Nothing was searched" in body["message"]
    assert not query.called


@pytest.mark.parametrize("version", ["0.10.2", "0.12.4"])
async def test_a_weight_of_zero_is_sent_where_it_means_vectors_only(router: respx.Router, version: str) -> None:
    query = upstream(router, version, ran_hybrid=True)
    failed, body = await search(router, knowledge_ids=[KB], bm25_weight=0)
    assert not failed, body
    assert sent(query)["hybrid_bm25_weight"] == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"bm25_weight": 1.5}, "bm25_weight must be between 0 (vectors only) and 1 (keywords only), got 1.5"),
        ({"bm25_weight": -0.1}, "bm25_weight must be between 0"),
        ({"bm25_weight": 0.5, "hybrid": False}, "give it without hybrid false"),
        ({"k_reranker": 0}, "k_reranker must be between 1 and 200"),
    ],
)
async def test_controls_out_of_bounds_are_refused(
    router: respx.Router, arguments: dict[str, Any], message: str
) -> None:
    query = upstream(router, ran_hybrid=True)
    failed, body = await search(router, knowledge_ids=[KB], **arguments)
    assert failed, body
    assert body["code"] == "invalid_argument"
    assert message in body["message"]
    assert not query.called


async def _listed(**env: str) -> dict[str, Any]:
    server = create_server(make_settings(**env))
    async with Client(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    properties: dict[str, Any] = tools["knowledge_search"].input_schema["properties"]
    return properties


async def test_the_controls_are_listed_only_where_open_webui_runs_hybrid_search() -> None:
    assert not set(CONTROLS) & set(await _listed())
    listed = await _listed(OPENWEBUI_HYBRID_SEARCH="true")
    assert set(CONTROLS) <= set(listed)
    assert listed["bm25_weight"]["description"]
    assert listed["k_reranker"]["maximum"] == 200
