"""`knowledge_search`'s `min_score` (issue 17, part 4): hits below the threshold are left out, on the relevance Open
WebUI answers with (`distance`), in every search scope; when none reaches it the answer says "nothing above the
threshold" with the best score seen, never an empty list that reads as "no knowledge"."""

from __future__ import annotations

import json
from typing import Any

import pytest
import respx
from mcp import Client

from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings, mock_transport

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
HITS = [  # (file_id, title, distance), in Open WebUI's order
    ("0000000a-aaaa-4bbb-8ccc-dddddddddddd", "Rota", 0.82),
    ("0000000b-aaaa-4bbb-8ccc-dddddddddddd", "Pager", 0.61),
    ("0000000c-aaaa-4bbb-8ccc-dddddddddddd", "Lunch", 0.40),
]


def upstream(router: respx.Router, hits: list[tuple[str, str, float | None]]) -> respx.Route:
    router.get("/api/version").respond(json={"version": "0.12.4"})
    base = {"id": KB, "name": "Ops", "description": "", "user_id": "u", "write_access": True, "updated_at": 1}
    router.get("/api/v1/knowledge/", params={"page": "1"}).respond(json={"items": [base], "total": 1})
    router.get(f"/api/v1/knowledge/{KB}").respond(json={**base, "files": None})
    router.get(f"/api/v1/knowledge/{KB}/files").respond(
        json={"items": [{"id": f, "filename": f"{t}.md", "meta": {"name": f"{t}.md"}} for f, t, _ in hits], "total": 3}
    )
    for file_id, title, _ in hits:
        router.get(f"/api/v1/files/{file_id}").respond(
            json={"id": file_id, "filename": f"{title}.md", "meta": {"name": f"{title}.md"}, "data": {}}
        )
    answer = {
        "distances": [[d for _, _, d in hits]],
        "documents": [[f"text of {t}" for _, t, _ in hits]],
        "metadatas": [[{"file_id": f, "title": t} for f, t, _ in hits]],
    }
    return router.post("/api/v1/retrieval/query/collection").respond(json=answer)


async def search(router: respx.Router, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    server = create_server(make_settings(), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        result = await client.call_tool("knowledge_search", {"query": "who is on call", **arguments})
    assert isinstance(result.structured_content, dict)
    return bool(result.is_error), result.structured_content


@pytest.mark.parametrize(
    ("scope", "collections"),
    [
        ({"knowledge_ids": [KB]}, [KB]),
        ({"file_ids": [HITS[0][0], HITS[1][0]]}, [f"file-{HITS[0][0]}", f"file-{HITS[1][0]}"]),
        ({}, [KB]),
    ],
)
async def test_hits_below_the_threshold_are_left_out(
    router: respx.Router, scope: dict[str, Any], collections: list[str]
) -> None:
    query = upstream(router, list(HITS))
    failed, body = await search(router, min_score=0.6, **scope)
    assert not failed, body
    assert [(hit["title"], hit["distance"]) for hit in body["results"]] == [("Rota", 0.82), ("Pager", 0.61)]
    assert body["count"] == 2
    sent = json.loads(query.calls.last.request.content)
    assert sent["collection_names"] == collections
    assert "r" not in sent  # Open WebUI's own `r` works in hybrid search only, and hides the best score


async def test_a_threshold_at_a_score_keeps_it(router: respx.Router) -> None:
    upstream(router, list(HITS))
    failed, body = await search(router, knowledge_ids=[KB], min_score=0.40)
    assert (failed, body["count"]) == (False, 3)


async def test_nothing_above_the_threshold_is_said_with_the_best_score(router: respx.Router) -> None:
    upstream(router, list(HITS))
    failed, body = await search(router, knowledge_ids=[KB], min_score=0.9)
    assert failed
    assert (body["code"], body["http_status"]) == ("not_found", None)  # nothing upstream failed
    assert "nothing above the threshold" in body["message"]
    assert "min_score 0.9" in body["message"]
    assert f"the best scored 0.82 (file_id {HITS[0][0]}, 'Rota')" in body["message"]
    assert "none of the 3 fragments" in body["message"]


async def test_no_fragments_at_all_is_still_an_empty_answer(router: respx.Router) -> None:
    upstream(router, [])
    failed, body = await search(router, knowledge_ids=[KB], min_score=0.5)
    assert (failed, body["count"], body["results"]) == (False, 0, [])


async def test_fragments_without_a_score_are_not_taken_for_relevant(router: respx.Router) -> None:
    upstream(router, [(HITS[0][0], "Rota", None), (HITS[1][0], "Pager", 0.7)])
    failed, body = await search(router, knowledge_ids=[KB], min_score=0.5)
    assert not failed, body
    assert [hit["title"] for hit in body["results"]] == ["Pager"]


async def test_a_negative_threshold_keeps_negative_hybrid_scores(router: respx.Router) -> None:
    """Hybrid search without a reranker answers raw cosine similarities, which can be negative."""
    upstream(router, [(HITS[0][0], "Rota", -0.05), (HITS[1][0], "Pager", -0.4)])
    failed, body = await search(router, knowledge_ids=[KB], min_score=-0.1)
    assert not failed, body
    assert [hit["title"] for hit in body["results"]] == ["Rota"]


async def test_a_threshold_that_is_not_a_number_is_refused_before_any_request(router: respx.Router) -> None:
    query = upstream(router, list(HITS))
    failed, body = await search(router, knowledge_ids=[KB], min_score="high")
    assert (failed, body["code"]) == (True, "invalid_argument")
    assert "min_score" in body["message"]
    assert query.call_count == 0


async def test_nothing_above_the_threshold_reads_no_document(router: respx.Router) -> None:
    upstream(router, list(HITS))
    await search(router, knowledge_ids=[KB], min_score=0.99)
    assert not [call for call in router.calls if call.request.url.path.startswith("/api/v1/files/")]
    await search(router, knowledge_ids=[KB], min_score=0.8)  # only the hit kept is read, for its citation
    read = {call.request.url.path for call in router.calls if call.request.url.path.startswith("/api/v1/files/")}
    assert read == {f"/api/v1/files/{HITS[0][0]}"}
