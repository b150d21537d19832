"""`openwebui-rag-mcp doctor`: plain words and an exit code per kind of failure, with read-only requests only."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from openwebui_rag_mcp.doctor import AUTH, OK, RETRIEVAL, UNREACHABLE, UNUSABLE, diagnose
from tests.conftest import assert_no_key, make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"


EMPTY = "0a0b0c0d-1111-4222-8333-444455556666"
DOCUMENT = "# Яблоки\n\nApples are red and crisp; яблоки бывают красными. 苹果是红色的。"


def openwebui(
    router: respx.Router, *, found: bool = True, config: dict[str, object] | None = None, first_empty: bool = False
) -> respx.Route:
    router.get("/api/version").respond(json={"version": "0.12.4"})
    bases = [{"id": KB, "name": "Docs", "file_count": 1, "write_access": True}]
    if first_empty:  # a release without file counts: the first base has no documents
        bases = [{"id": EMPTY, "name": "Empty"}, {"id": KB, "name": "Docs"}]
    router.get("/api/v1/knowledge/").respond(json={"items": bases, "total": len(bases)})
    router.get(f"/api/v1/knowledge/{EMPTY}/files").respond(json={"items": [], "total": 0})
    router.get(f"/api/v1/knowledge/{KB}/files").respond(json={"items": [{"id": "f1", "filename": "a.md"}], "total": 1})
    router.get("/api/v1/files/f1").respond(json={"id": "f1", "filename": "a.md", "data": {"content": DOCUMENT}})
    if config is None:
        router.get("/api/v1/retrieval/config").respond(401, json={"detail": "401 Unauthorized"})
    else:
        router.get("/api/v1/retrieval/config").respond(json=config)
    documents = [["a fragment"]] if found else [[]]
    return router.post("/api/v1/retrieval/query/collection").respond(
        json={"distances": [[0.9]] if found else [[]], "documents": documents, "metadatas": [[{}]] if found else [[]]}
    )


async def run(router: respx.Router, *, deep: bool = False, **env: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = await diagnose(make_settings(**env), deep=deep, say=lines.append, transport=mock_transport(router))
    assert_no_key("\n".join(lines))
    return code, lines


async def test_all_good_with_the_retrieval_probe() -> None:
    router = new_router()
    query = openwebui(router)
    code, lines = await run(router, deep=True)
    assert code == OK
    assert "reach Open WebUI: OK, release 0.12.4, API family paged (items/total, files endpoint)" in lines
    assert "retrieval (embedding backend): OK, a search for words of a document in 'Docs' found fragments" in lines
    assert lines[-1] == "all checks passed"
    assert all(call.request.method == "GET" for call in router.calls if "query" not in call.request.url.path)
    # The probe searches words of the base's own document, not a nonsense string.
    assert json.loads(query.calls.last.request.content)["query"].startswith("Яблоки Apples are red")


@pytest.mark.parametrize(
    ("metadata", "env", "said"),
    [
        ({"score": 0.9}, {}, "; Open WebUI ran hybrid search: OPENWEBUI_HYBRID_SEARCH=true lists knowledge_search's"),
        ({}, {"OPENWEBUI_HYBRID_SEARCH": "true"}, "; Open WebUI ran vector search only, so OPENWEBUI_HYBRID_SEARCH's"),
        ({"score": 0.9}, {"OPENWEBUI_HYBRID_SEARCH": "true"}, None),
        ({}, {}, None),
    ],
)
async def test_the_probe_says_when_the_hybrid_switch_disagrees_with_what_ran(
    metadata: dict[str, float], env: dict[str, str], said: str | None
) -> None:
    router = new_router()
    openwebui(router)
    router.post("/api/v1/retrieval/query/collection").respond(
        json={"distances": [[0.9]], "documents": [["a fragment"]], "metadatas": [[metadata]]}
    )
    code, lines = await run(router, deep=True, **env)
    assert code == OK
    line = next(line for line in lines if line.startswith("retrieval (embedding backend): OK"))
    if said is None:
        assert line.endswith("found fragments"), line
    else:
        assert said in line, line


async def test_an_empty_probe_with_no_threshold_to_explain_it_fails() -> None:
    router = new_router()
    openwebui(router, found=False, config={"RELEVANCE_THRESHOLD": 0.0, "ENABLE_RAG_HYBRID_SEARCH": False})
    code, lines = await run(router, deep=True)
    assert code == RETRIEVAL
    assert any(line.startswith("retrieval (embedding backend): FAILED") for line in lines)


@pytest.mark.parametrize("config", [None, {"RELEVANCE_THRESHOLD": 0.5, "ENABLE_RAG_HYBRID_SEARCH": True}])
async def test_an_empty_probe_under_a_threshold_is_inconclusive(config: dict[str, object] | None) -> None:
    """The README recommends a relevance threshold; an empty answer under one is not a failure."""
    router = new_router()
    openwebui(router, found=False, config=config)
    code, lines = await run(router, deep=True)
    assert code == OK
    assert any(line.startswith("retrieval (embedding backend): not confirmed") for line in lines)


async def test_the_probe_looks_past_a_base_without_documents() -> None:
    """Releases without file counts: the first base is empty, the second is searched."""
    router = new_router()
    query = openwebui(router, first_empty=True)
    code, _ = await run(router, deep=True)
    assert code == OK
    assert json.loads(query.calls.last.request.content)["collection_names"] == [KB]


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (httpx.ConnectError("refused"), UNREACHABLE),
        (httpx.Response(200, text="<html>Open WebUI</html>", headers={"content-type": "text/html"}), UNUSABLE),
    ],
)
async def test_version_failures(failure: httpx.Response | Exception, expected: int) -> None:
    router = new_router()
    router.get("/api/version").mock(side_effect=[failure])
    code, lines = await run(router)
    assert code == expected
    assert lines[-1].startswith("reach Open WebUI: FAILED")


async def test_a_refused_key_exits_with_the_auth_code() -> None:
    router = new_router()
    openwebui(router)
    router.get("/api/v1/knowledge/").respond(401, json={"detail": "Your session has expired or the token is invalid."})
    code, lines = await run(router)
    assert code == AUTH
    assert lines[-1].startswith("API key on the Knowledge API: FAILED")


async def test_an_unreadable_allowed_base_fails_the_check() -> None:
    router = new_router()
    openwebui(router)
    gone = "9e8d7c6b-5a49-4837-a625-14131211100f"
    code, lines = await run(router, OPENWEBUI_KNOWLEDGE_IDS=f"{KB},{gone}")
    assert code == UNUSABLE
    assert gone in lines[-1]
