"""The Open WebUI client: release detection, paging per release family, request shapes and the error funnel."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp.client import OpenWebUIClient, transport
from openwebui_rag_mcp.client.transport import _Pools
from openwebui_rag_mcp.config import ConfigError, load_settings
from openwebui_rag_mcp.errors import ToolFailure
from tests.conftest import API_KEY, BASE_URL, assert_no_key, fixture_json, make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

NOT_FOUND = "We could not find what you're looking for :/"
ACCESS_PROHIBITED = (
    "You do not have permission to access this resource. Please contact your administrator for assistance."
)


@asynccontextmanager
async def open_client(
    router: respx.Router, *, url: str = BASE_URL, max_response_bytes: int | None = None, seconds: float | None = None
) -> AsyncIterator[OpenWebUIClient]:
    settings = make_settings(url)
    if seconds is not None:
        settings = dataclasses.replace(settings, timeout=seconds)
    extra: dict[str, Any] = {} if max_response_bytes is None else {"max_response_bytes": max_response_bytes}
    client = OpenWebUIClient(settings, transport=mock_transport(router), **extra)
    try:
        yield client
    finally:
        await client.aclose()


def version(router: respx.Router, release: str) -> respx.Route:
    return router.get("/api/version").respond(json={"version": release})


def paged(items: list[dict[str, Any]], page_size: int = 30) -> Any:
    """A side effect answering `?page=N` like Open WebUI 0.6.42+, and the list of pages asked for."""
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        raw = request.url.params.get("page")
        asked.append(raw)
        number = int(raw or 1)
        chunk = items[(number - 1) * page_size : number * page_size]
        return httpx.Response(200, json={"items": chunk, "total": len(items)})

    return answer, asked


async def failure_of(client: OpenWebUIClient) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        await client.file("f-1")
    return caught.value


# -- release detection ------------------------------------------------------------------------------------------


async def test_version_is_read_once_even_with_concurrent_first_calls(router: respx.Router) -> None:
    async def slow_version(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.05)
        return httpx.Response(200, json={"version": "0.12.4", "deployment_id": ""})

    route = router.get("/api/version").mock(side_effect=slow_version)
    async with open_client(router) as client:
        releases = await asyncio.gather(*(client.release() for _ in range(8)))
        assert {r.version for r in releases} == {"0.12.4"}
        assert releases[0].paged_lists is True
        await client.release()
    assert route.call_count == 1


async def test_failed_version_read_is_not_cached(router: respx.Router) -> None:
    route = router.get("/api/version").mock(
        side_effect=[httpx.ConnectError("refused"), httpx.Response(200, json={"version": "0.6.5"})]
    )
    async with open_client(router) as client:
        with pytest.raises(ToolFailure) as caught:
            await client.release()
        assert caught.value.code == "upstream_unavailable"
        release = await client.release()
        assert release.version == "0.6.5"
        assert release.paged_lists is False
        await client.release()
    assert route.call_count == 2


@pytest.mark.parametrize("body", [{"status": True}, {"version": 12}, ["0.12.4"]])
async def test_version_answer_without_a_version_is_unexpected(router: respx.Router, body: object) -> None:
    router.get("/api/version").respond(json=body)
    async with open_client(router) as client:
        with pytest.raises(ToolFailure) as caught:
            await client.release()
    assert caught.value.code == "unexpected_response"


# -- lists and paging -------------------------------------------------------------------------------------------


def kb(n: int) -> dict[str, Any]:
    return {"id": f"kb-{n:03d}", "name": f"Base {n}"}


async def test_paged_list_is_followed_to_the_end(router: respx.Router) -> None:
    version(router, "0.12.4")
    items = [kb(n) for n in range(65)]
    answer, asked = paged(items)
    route = router.get("/api/v1/knowledge/").mock(side_effect=answer)
    async with open_client(router) as client:
        result = await client.list_knowledge()
    assert sorted(asked) == ["1", "2", "3"]
    assert route.call_count == 3
    assert [item["id"] for item in result] == [f"kb-{n:03d}" for n in range(65)]


async def test_a_list_that_moved_while_read_is_read_again(router: respx.Router) -> None:
    version(router, "0.12.4")
    moved = [kb(n) for n in range(65)]
    moved[60] = kb(59)  # an item that moved from page 2 to page 3 while we read: kb-060 was missed
    first_read, first_asked = paged(moved)
    second_read, second_asked = paged([kb(n) for n in range(65)])
    reads = iter([first_read] * 3 + [second_read] * 3)
    router.get("/api/v1/knowledge/").mock(side_effect=lambda request: next(reads)(request))
    async with open_client(router) as client:
        result = await client.list_knowledge()
    assert sorted(first_asked) == sorted(second_asked) == ["1", "2", "3"]
    assert [item["id"] for item in result] == [f"kb-{n:03d}" for n in range(65)]


async def test_paged_list_with_one_page_asks_once(router: respx.Router) -> None:
    version(router, "0.6.42")
    answer, asked = paged([kb(n) for n in range(30)])
    router.get("/api/v1/knowledge/").mock(side_effect=answer)
    async with open_client(router) as client:
        assert len(await client.list_knowledge()) == 30
    assert asked == ["1"]


async def test_flat_list_on_065_is_one_request_without_page(router: respx.Router) -> None:
    version(router, "0.6.5")
    route = router.get("/api/v1/knowledge/").respond(json=fixture_json("knowledge_list_065.json"))
    async with open_client(router) as client:
        result = await client.list_knowledge()
    assert [item["name"] for item in result] == ["Отчёты", "Empty"]
    assert route.call_count == 1
    assert "page" not in route.calls.last.request.url.params


async def test_count_knowledge_reads_total_from_one_page(router: respx.Router) -> None:
    version(router, "0.12.4")
    answer, asked = paged([kb(n) for n in range(65)])
    router.get("/api/v1/knowledge/").mock(side_effect=answer)
    async with open_client(router) as client:
        assert await client.count_knowledge() == 65
    assert asked == ["1"]


async def test_knowledge_files_paged_on_0124(router: respx.Router) -> None:
    version(router, "0.12.4")
    files = [{"id": f"file-{n:03d}", "filename": f"{n}.md"} for n in range(65)]
    answer, asked = paged(files)
    route = router.get("/api/v1/knowledge/kb-1/files").mock(side_effect=answer)
    nested = router.get("/api/v1/knowledge/kb-1")
    async with open_client(router) as client:
        every, total = await client.knowledge_files("kb-1", None)
        assert total == 65
        assert [f["id"] for f in every] == [f"file-{n:03d}" for n in range(65)]
        assert asked == ["1", "2", "3"]
        one, total = await client.knowledge_files("kb-1", 2)
        assert total == 65
        assert [f["id"] for f in one] == [f"file-{n:03d}" for n in range(30, 60)]
    assert asked == ["1", "2", "3", "2"]
    assert route.call_count == 4
    assert nested.call_count == 0


@pytest.mark.parametrize(("admin", "count", "requests"), [(True, 65, 1), (True, 5_001, 2), (False, 65, 3)])
async def test_every_document_is_asked_for_in_pages_of_5000_which_only_an_admin_gets(
    router: respx.Router, admin: bool, count: int, requests: int
) -> None:
    """From 0.9.6 Open WebUI takes `limit` from an admin and keeps 30 for anyone else: a base is read whole either
    way, in one request for an admin's key up to 5,000 documents (each page costs Open WebUI a count and its folder
    list again: 2,000 documents in one page took 140 ms against 172 ms in two of 1,000 on 0.12.4)."""
    version(router, "0.10.2")
    files = [{"id": f"file-{n:05d}", "filename": f"{n}.md"} for n in range(count)]
    limits: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        limits.append(request.url.params.get("limit"))
        size = int(request.url.params.get("limit") or 30) if admin else 30
        number = int(request.url.params["page"])
        return httpx.Response(200, json={"items": files[(number - 1) * size : number * size], "total": len(files)})

    router.get("/api/v1/knowledge/kb-1/files").mock(side_effect=answer)
    async with open_client(router) as client:
        every, total = await client.knowledge_files("kb-1", None)
    assert total == count
    assert [f["id"] for f in every] == [f"file-{n:05d}" for n in range(count)]
    assert limits == ["5000"] * requests


async def test_knowledge_files_nested_on_065(router: respx.Router) -> None:
    version(router, "0.6.5")
    body = fixture_json("knowledge_065.json")
    body["files"] = [{"id": f"file-{n:03d}", "filename": f"{n}.md", "data": {"content": "x"}} for n in range(65)]
    route = router.get("/api/v1/knowledge/kb-1").respond(json=body)
    files_endpoint = router.get("/api/v1/knowledge/kb-1/files")
    async with open_client(router) as client:
        every, total = await client.knowledge_files("kb-1", None)
        assert total == 65
        assert len(every) == 65
        third, total = await client.knowledge_files("kb-1", 3)
        assert total == 65
        assert [f["id"] for f in third] == [f"file-{n:03d}" for n in range(60, 65)]
        beyond, _ = await client.knowledge_files("kb-1", 4)
        assert beyond == []
    assert route.call_count == 3
    assert "page" not in route.calls.last.request.url.params
    assert files_endpoint.call_count == 0


async def test_knowledge_200_null_is_not_found(router: respx.Router) -> None:
    version(router, "0.6.5")
    router.get("/api/v1/knowledge/kb-hidden").respond(200, content=b"null", content_type="application/json")
    async with open_client(router) as client:
        with pytest.raises(ToolFailure) as caught:
            await client.knowledge_files("kb-hidden", None)
    assert caught.value.code == "not_found"
    assert "kb-hidden" in caught.value.message


async def test_knowledge_files_html_on_old_release_is_unexpected(router: respx.Router) -> None:
    # 0.6.5 answers unknown routes with the SPA page: a mislabelled release must not read as an empty list.
    version(router, "0.12.4")
    router.get("/api/v1/knowledge/kb-1/files").respond(200, html="<!doctype html><html></html>")
    async with open_client(router) as client:
        with pytest.raises(ToolFailure) as caught:
            await client.knowledge_files("kb-1", None)
    assert caught.value.code == "unexpected_response"


# -- request shapes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("controls", "expected"),
    [
        (None, {"collection_names": ["kb-1", "kb-2"], "query": "жёлтые бананы", "k": 5}),
        (
            {"k_reranker": 20},
            {"collection_names": ["kb-1", "kb-2"], "query": "жёлтые бананы", "k": 5, "k_reranker": 20},
        ),
        (
            {"hybrid": False},
            {"collection_names": ["kb-1", "kb-2"], "query": "жёлтые бананы", "k": 5, "hybrid": False},
        ),
    ],
)
async def test_query_collection_body(
    router: respx.Router, controls: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    route = router.post("/api/v1/retrieval/query/collection").respond(json=fixture_json("query_collection_0124.json"))
    async with open_client(router) as client:
        body = await client.query_collection(["kb-1", "kb-2"], "жёлтые бананы", 5, controls)
    assert body == fixture_json("query_collection_0124.json")
    request = route.calls.last.request
    assert json.loads(request.content) == expected
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"


async def test_every_request_carries_the_bearer_key(router: respx.Router) -> None:
    version(router, "0.12.4")
    answer, _ = paged([kb(1)])
    router.get("/api/v1/knowledge/").mock(side_effect=answer)
    router.get("/api/v1/files/f-1").respond(json=fixture_json("file_0124.json"))
    async with open_client(router) as client:
        await client.list_knowledge()
        await client.file("f-1")
    assert len(router.calls) == 3
    for call in router.calls:
        assert call.request.headers["authorization"] == f"Bearer {API_KEY}"
        assert call.request.headers["accept"] == "application/json"


async def test_base_url_prefix_is_kept() -> None:
    router = new_router("http://owui.test")
    router.get("/owui/api/version").respond(json={"version": "0.12.4"})
    answer, _ = paged([kb(1)])
    listed = router.get("/owui/api/v1/knowledge/").mock(side_effect=answer)
    async with open_client(router, url="http://owui.test/owui/") as client:
        assert [item["id"] for item in await client.list_knowledge()] == ["kb-001"]
    assert listed.calls.last.request.url.path == "/owui/api/v1/knowledge/"
    assert [str(call.request.url.path) for call in router.calls] == ["/owui/api/version", "/owui/api/v1/knowledge/"]


async def test_ids_are_encoded_as_one_path_segment(router: respx.Router) -> None:
    route = router.get(url__regex=r"/api/v1/files/.*").respond(json={"id": "x"})
    async with open_client(router) as client:
        await client.file("../../api/v1/auths")
    assert route.calls.last.request.url.raw_path == b"/api/v1/files/..%2F..%2Fapi%2Fv1%2Fauths"


# -- the error funnel -------------------------------------------------------------------------------------------

ERROR_CASES = [
    pytest.param(400, {"detail": NOT_FOUND}, "not_found", False, id="400 NOT_FOUND text"),
    pytest.param(401, {"detail": NOT_FOUND}, "not_found", False, id="401 NOT_FOUND text (0.6.x missing base)"),
    pytest.param(404, {"detail": "Not Found"}, "not_found", False, id="404"),
    pytest.param(
        400,
        {"detail": "400: Duplicate content detected. Please provide unique content to proceed."},
        "duplicate_content",
        False,
        id="400 duplicate",
    ),
    pytest.param(
        401,
        {"detail": "Your session has expired or the token is invalid. Please sign in again."},
        "auth",
        False,
        id="401 invalid key",
    ),
    pytest.param(403, {"detail": "Not authenticated"}, "auth", False, id="403 Not authenticated (0.6.5)"),
    pytest.param(
        403, {"detail": "Use of API key is not enabled in the environment."}, "auth", False, id="403 keys disabled"
    ),
    pytest.param(403, {"detail": ACCESS_PROHIBITED}, "forbidden", False, id="403 access prohibited"),
    pytest.param(400, {"detail": ACCESS_PROHIBITED}, "forbidden", False, id="400 access prohibited (write routes)"),
    pytest.param(401, {"detail": ACCESS_PROHIBITED}, "forbidden", False, id="401 access prohibited (no read access)"),
    pytest.param(409, {"detail": "Conflict"}, "conflict", False, id="409"),
    pytest.param(413, {"detail": "File too large"}, "too_large", False, id="413"),
    pytest.param(
        422,
        {"detail": [{"type": "missing", "loc": ["body", "name"], "msg": "Field required", "input": None}]},
        "upstream_error",
        False,
        id="422 list detail",
    ),
    pytest.param(429, {"detail": "Too Many Requests"}, "rate_limited", True, id="429"),
    pytest.param(500, {"detail": "Internal Server Error"}, "upstream_error", False, id="500"),
    pytest.param(502, "<html><body><h1>502 Bad Gateway</h1></body></html>", "upstream_unavailable", True, id="502"),
    pytest.param(503, {"detail": "Service Unavailable"}, "upstream_unavailable", True, id="503"),
    pytest.param(504, "Gateway Timeout", "upstream_unavailable", True, id="504"),
]


@pytest.mark.parametrize(("status", "body", "code", "retryable"), ERROR_CASES)
async def test_error_mapping(router: respx.Router, status: int, body: object, code: str, retryable: bool) -> None:
    if isinstance(body, str):
        router.get("/api/v1/files/f-1").respond(status, text=body)
    else:
        router.get("/api/v1/files/f-1").respond(status, json=body)
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert failure.code == code
    assert failure.http_status == status
    assert failure.retryable is retryable
    assert "GET /api/v1/files/f-1" in failure.message


async def test_duplicate_detail_loses_the_status_prefix(router: respx.Router) -> None:
    detail = "400: Duplicate content detected. Please provide unique content to proceed."
    router.get("/api/v1/files/f-1").respond(400, json={"detail": detail})
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert "(Duplicate content detected. Please provide unique content to proceed.)" in failure.message
    assert "400: Duplicate" not in failure.message


async def test_validation_detail_list_is_readable(router: respx.Router) -> None:
    detail = [
        {"type": "missing", "loc": ["body", "name"], "msg": "Field required"},
        {"type": "string_type", "loc": ["body", "description"], "msg": "Input should be a valid string"},
    ]
    router.get("/api/v1/files/f-1").respond(422, json={"detail": detail})
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert "Field required; Input should be a valid string" in failure.message


async def test_html_error_page_is_summarised(router: respx.Router) -> None:
    router.get("/api/v1/files/f-1").respond(502, html="<html>" + "<p>nginx</p>" * 500 + "</html>")
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert "an HTML page" in failure.message
    assert "<p>" not in failure.message


async def test_long_detail_is_shortened(router: respx.Router) -> None:
    router.get("/api/v1/files/f-1").respond(500, json={"detail": "boom " * 1000})
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert len(failure.message) < 600
    assert failure.message.endswith("...)")


@pytest.mark.parametrize(
    "response",
    [
        pytest.param(httpx.Response(200, html="<!doctype html><html><body>Open WebUI</body></html>"), id="200 HTML"),
        pytest.param(httpx.Response(200, text="OK"), id="200 text/plain"),
        pytest.param(httpx.Response(200, content=b'{"id": "f-1"}'), id="200 JSON without content type"),
        pytest.param(
            httpx.Response(200, content=b'{"id": "f-1", "data": {"cont', headers={"content-type": "application/json"}),
            id="200 truncated JSON",
        ),
        pytest.param(
            httpx.Response(200, content=b"\xff\xfe garbage", headers={"content-type": "application/json"}),
            id="200 binary under a JSON type",
        ),
    ],
)
async def test_unreadable_success_is_unexpected_response(router: respx.Router, response: httpx.Response) -> None:
    router.get("/api/v1/files/f-1").mock(return_value=response)
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert failure.code == "unexpected_response"
    assert failure.http_status is None


async def test_response_over_the_cap_is_refused(router: respx.Router) -> None:
    router.get("/api/v1/files/f-1").respond(json={"id": "f-1", "data": {"content": "x" * 5_000}})
    async with open_client(router, max_response_bytes=1_000) as client:
        failure = await failure_of(client)
    assert failure.code == "unexpected_response"
    assert "larger than" in failure.message


async def test_streamed_response_over_the_cap_is_refused(router: respx.Router) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"id": "f-1", "data": {"content": "'
        for _ in range(100):
            yield b"x" * 100
        yield b'"}}'

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=body())

    router.get("/api/v1/files/f-1").mock(side_effect=answer)
    async with open_client(router, max_response_bytes=1_000) as client:
        failure = await failure_of(client)
    assert failure.code == "unexpected_response"


async def test_response_just_under_the_cap_is_read(router: respx.Router) -> None:
    payload = {"id": "f-1", "data": {"content": "y" * 900}}
    router.get("/api/v1/files/f-1").respond(json=payload)
    async with open_client(router, max_response_bytes=1_000) as client:
        assert await client.file("f-1") == payload


@pytest.mark.parametrize(
    ("error", "code"),
    [
        pytest.param(httpx.ConnectError("[Errno 111] Connection refused"), "upstream_unavailable", id="ConnectError"),
        pytest.param(httpx.ConnectTimeout("timed out"), "upstream_unavailable", id="ConnectTimeout"),
        pytest.param(httpx.ReadTimeout("timed out"), "timeout", id="ReadTimeout"),
        pytest.param(httpx.RemoteProtocolError("peer closed connection"), "upstream_unavailable", id="protocol"),
        pytest.param(httpx.ReadError("connection reset"), "upstream_unavailable", id="ReadError"),
    ],
)
async def test_transport_errors(router: respx.Router, error: Exception, code: str) -> None:
    router.get("/api/v1/files/f-1").mock(side_effect=error)
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert failure.code == code
    assert failure.retryable is True
    assert failure.http_status is None


async def test_slow_answer_hits_the_timeout(router: respx.Router) -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, json={"id": "f-1"})

    router.get("/api/v1/files/f-1").mock(side_effect=slow)
    async with open_client(router, seconds=0.05) as client:
        failure = await failure_of(client)
    assert failure.code == "timeout"
    assert failure.retryable is True


# -- the key never leaks ----------------------------------------------------------------------------------------


def echo_authorization(status: int, *, as_json: bool = True, padding: int = 0) -> Any:
    """An upstream that repeats the Authorization header it received in its error detail."""

    def answer(request: httpx.Request) -> httpx.Response:
        said = "p" * padding + f" bad credentials: {request.headers['authorization']} (header was x-api-key: {API_KEY})"
        if as_json:
            return httpx.Response(status, json={"detail": said})
        return httpx.Response(status, text=said)

    return answer


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 429, 500, 502])
@pytest.mark.parametrize("as_json", [True, False])
async def test_key_echoed_by_upstream_is_redacted(router: respx.Router, status: int, as_json: bool) -> None:
    router.get("/api/v1/files/f-1").mock(side_effect=echo_authorization(status, as_json=as_json))
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert_no_key(failure.message, str(failure))
    assert "[redacted]" in failure.message


@pytest.mark.parametrize("padding", [250, 270, 280, 290])
async def test_key_cut_by_the_detail_limit_is_still_redacted(router: respx.Router, padding: int) -> None:
    # The detail is shortened to 300 characters; a key straddling that cut must not leak in part.
    router.get("/api/v1/files/f-1").mock(side_effect=echo_authorization(500, padding=padding))
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert_no_key(failure.message)


async def test_key_in_a_transport_error_is_redacted(router: respx.Router) -> None:
    router.get("/api/v1/files/f-1").mock(side_effect=httpx.ConnectError(f"proxy refused Bearer {API_KEY}"))
    async with open_client(router) as client:
        failure = await failure_of(client)
    assert failure.code == "upstream_unavailable"
    assert_no_key(failure.message)


def test_url_credentials_are_refused() -> None:
    """httpx would send user:password as Basic auth in place of the API key, and log them at DEBUG."""
    with pytest.raises(ConfigError) as caught:
        load_settings({"OPENWEBUI_URL": "http://admin:hunter2@owui.test", "OPENWEBUI_API_KEY": "sk-x"})
    assert caught.value.problems == ["OPENWEBUI_URL must not contain user:password@; the API key is the credential"]
    assert "hunter2" not in str(caught.value)


async def test_a_connection_broken_at_once_is_retried_for_a_read() -> None:
    router = new_router()
    router.get("/api/version").respond(json={"version": "0.12.4"})
    route = router.get("/api/v1/files/f-1").mock(
        side_effect=[httpx.RemoteProtocolError("closed"), httpx.Response(200, json={"id": "f-1"})]
    )
    async with open_client(router) as client:
        assert await client.file("f-1") == {"id": "f-1"}
    assert route.call_count == 2


async def test_a_read_that_broke_late_is_not_retried_past_the_budget() -> None:
    """A retried read stays within OPENWEBUI_TIMEOUT in all: the second attempt gets only what is left."""

    attempts: list[float] = []

    async def slow_then_broken(request: httpx.Request) -> httpx.Response:
        attempts.append(asyncio.get_running_loop().time())
        await asyncio.sleep(0.6)
        raise httpx.RemoteProtocolError("closed")

    router = new_router()
    router.get("/api/v1/files/f-1").mock(side_effect=slow_then_broken)
    loop = asyncio.get_running_loop()
    async with open_client(router, seconds=1.0) as client:
        started = loop.time()
        failure = await failure_of(client)
        spent = loop.time() - started
    assert failure.code in ("upstream_unavailable", "timeout")
    assert len(attempts) == 2  # retried once, at once, and cut off at the deadline
    assert spent < 1.0 + 0.15


async def test_requests_share_a_few_kept_alive_connections_and_closing_closes_them() -> None:
    """Without a transport given, requests go over POOLS pools of kept-alive connections (httpcore's bookkeeping
    grows with each pool's connections): a burst of reads opens no more than it needs, reuses them, and aclose
    closes them all."""
    opened: list[asyncio.StreamWriter] = []
    ended = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(writer)
        body = b'{"version": "0.12.4"}'
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            if all(w.is_closing() for w in opened):
                ended.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        client = OpenWebUIClient(make_settings(f"http://127.0.0.1:{port}"))
        for _ in range(3):  # three bursts, each as many reads at once as there are pools, twice over
            await asyncio.gather(*(client._send("GET", "api/version") for _ in range(2 * transport.POOLS)))
        assert transport.POOLS <= len(opened) <= 2 * transport.POOLS  # kept alive between the bursts
        await client.aclose()
        await asyncio.wait_for(ended.wait(), 5)


async def test_a_request_goes_to_the_least_busy_pool_and_one_at_a_time_stay_in_the_first() -> None:
    """One caller at a time keeps using the first pool (its kept-alive connection, not a new one in each pool in
    turn); requests in flight at once spread over the pools; a pool is busy until its answer's body is closed, also
    when the request failed; closing closes every pool."""
    served: list[int] = []
    closed: list[int] = []
    release, all_held = asyncio.Event(), asyncio.Event()

    class Pool(httpx.AsyncBaseTransport):
        def __init__(self, number: int) -> None:
            self.number = number

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            served.append(self.number)
            if request.url.path == "/held":
                if len(served) == 4:
                    all_held.set()
                await release.wait()
            if request.url.path == "/broken":
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(200, json={"version": "0.12.4"})

        async def aclose(self) -> None:
            closed.append(self.number)

    async with httpx.AsyncClient(transport=_Pools([Pool(n) for n in range(3)])) as http:
        for _ in range(4):
            (await http.get("http://owui.test/api/version")).raise_for_status()
        with pytest.raises(httpx.ConnectError):
            await http.get("http://owui.test/broken")
        assert served == [0, 0, 0, 0, 0]  # one at a time: always the first

        served.clear()
        held = [asyncio.create_task(http.get("http://owui.test/held")) for _ in range(4)]
        await all_held.wait()
        assert served == [0, 1, 2, 0]  # at once: the least busy, the first of those
        release.set()
        assert all(answer.status_code == 200 for answer in await asyncio.gather(*held))

        served.clear()
        async with http.stream("GET", "http://owui.test/api/version") as streamed:
            (await http.get("http://owui.test/api/version")).raise_for_status()  # the first pool is still busy
            await streamed.aread()
        (await http.get("http://owui.test/api/version")).raise_for_status()
        assert served == [0, 1, 0]
    assert sorted(closed) == [0, 1, 2]
