"""The write tools through the MCP protocol, against a mocked Open WebUI that fails at every stage in every way.

Each failure must say which stage failed, which file exists because of it, and whether Open WebUI may have applied
part of the write (`outcome`). Writes are never retried: every write endpoint is called exactly once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp import writes
from tests.conftest import new_router
from tests.support.writes import (
    CREATE_ARGS,
    DELETE_ARGS,
    DUPLICATE,
    FILE,
    KB,
    NEW_KB,
    NO_PERMISSION,
    NOT_FOUND_TEXT,
    OTHER,
    OUTLIVED_REMOVED,
    REMOVED_AGAIN,
    TEXT,
    TITLE,
    UPDATE_ARGS,
    Effect,
    Upstream,
    add_args,
    answer,
    call,
    connect,
    error_of,
    form_parts,
    full_file,
    ok_of,
    upload_metadata,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def upstream() -> Upstream:
    return Upstream(new_router())


@pytest.fixture
def upstream_065() -> Upstream:
    return Upstream(new_router(), release="0.6.5")


# -- every stage fails in every way -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    effect: Effect | type[Exception]
    code: str
    http_status: int | None
    certain: bool  # Open WebUI certainly did not apply the request


# No answer of Open WebUI's own came: it may still be running the request (errors.unanswered)
UNANSWERED = ("503", "timeout", "reset", "protocol")

FAILURES: dict[str, Failure] = {
    "400": Failure(answer(400, json={"detail": "[ERROR: Something went wrong :/]"}), "upstream_error", 400, True),
    "401": Failure(
        answer(401, json={"detail": "Your session has expired or the token is invalid. Please sign in again."}),
        "auth",
        401,
        True,
    ),
    "403": Failure(answer(403, json={"detail": NO_PERMISSION}), "forbidden", 403, True),
    "404": Failure(answer(404, json={"detail": NOT_FOUND_TEXT}), "not_found", 404, True),
    "500": Failure(answer(500, text="Internal Server Error"), "upstream_error", 500, False),
    "503": Failure(
        answer(503, html="<html><body>503 Service Unavailable</body></html>"), "upstream_unavailable", 503, False
    ),
    "timeout": Failure(httpx.ReadTimeout, "timeout", None, False),
    "reset": Failure(httpx.ReadError, "upstream_unavailable", None, False),
    "protocol": Failure(httpx.RemoteProtocolError, "upstream_unavailable", None, False),
    "refused": Failure(httpx.ConnectError, "upstream_unavailable", None, True),
    "html 200": Failure(
        answer(200, html="<!doctype html><html><title>Open WebUI</title></html>"), "unexpected_response", None, False
    ),
    "malformed 200": Failure(
        answer(200, content=b'{"id": "x", "data": {', headers={"content-type": "application/json"}),
        "unexpected_response",
        None,
        False,
    ),
}


@dataclass(frozen=True)
class StageCase:
    tool: str
    args: dict[str, Any]
    failing: Callable[[Upstream], respx.Route]  # the request that fails
    sent_once: tuple[str, ...]  # write endpoints reached, each exactly once
    never: tuple[str, ...]  # routes that must not be reached after the failure
    file_id: str | None
    applied: bool  # something exists in Open WebUI before the failing request (an uploaded file, replaced text)
    cleaned_up: bool = False  # the sequence removes what it created, so nothing remains whatever the failure


STAGES: dict[str, StageCase] = {
    "create": StageCase("knowledge_create", CREATE_ARGS, lambda u: u.create, ("create",), (), None, False),
    "upload": StageCase("knowledge_add", add_args(), lambda u: u.upload, ("upload",), ("status", "add"), None, False),
    # After an upload, a failed knowledge_add removes its file again: nothing is left, nothing was applied.
    "process": StageCase(
        "knowledge_add", add_args(), lambda u: u.status, ("upload", "delete"), ("add",), None, False, True
    ),
    "attach": StageCase(
        "knowledge_add", add_args(), lambda u: u.add, ("upload", "add", "delete"), (), None, False, True
    ),
    "update": StageCase("knowledge_update", UPDATE_ARGS, lambda u: u.content, ("content",), ("reindex",), FILE, False),
    "reindex": StageCase("knowledge_update", UPDATE_ARGS, lambda u: u.reindex, ("content", "reindex"), (), FILE, True),
    "unlink": StageCase("knowledge_delete", DELETE_ARGS, lambda u: u.remove, ("remove",), ("file",), FILE, False),
}


@pytest.mark.parametrize("kind", list(FAILURES))
@pytest.mark.parametrize("stage", list(STAGES))
async def test_every_stage_fails_in_every_way(upstream: Upstream, stage: str, kind: str) -> None:
    case, failure = STAGES[stage], FAILURES[kind]
    if stage == "reindex":  # from 0.12 the text update re-indexes every base itself; before, the server asks
        upstream = Upstream(new_router(), release="0.6.43")
    if case.tool != "knowledge_add":  # knowledge_update's membership check passes; knowledge_add's file is new
        upstream.hold(FILE, TEXT)
    case.failing(upstream).side_effect = failure.effect

    # an attach without an answer is looked at for OPENWEBUI_TIMEOUT more: here the base never lists the file
    error = error_of(await call(upstream, case.tool, case.args, OPENWEBUI_TIMEOUT="1"))

    # the file of an unanswered attach is removed, but Open WebUI may still run that attach: uncertain
    outlived = stage == "attach" and kind in UNANSWERED
    certain = ((failure.certain and not case.applied) or case.cleaned_up) and not outlived
    expected_outcome = "not_applied" if certain else "partial_or_unknown"
    assert (error.code, error.stage, error.file_id, error.outcome) == (
        failure.code,
        stage,
        case.file_id,
        expected_outcome,
    ), error.message
    assert error.http_status == failure.http_status
    # Never retried: each write endpoint reached is called exactly once, and nothing after the failure runs.
    routes = {**upstream.write_routes(), "status": upstream.status, "file": upstream.file}
    for name, route in upstream.write_routes().items():
        assert route.call_count == (1 if name in case.sent_once else 0), (name, upstream.requests())
    for name in case.never:
        assert routes[name].call_count == 0, (name, upstream.requests())
    assert case.failing(upstream).call_count >= 1
    if case.cleaned_up:
        assert (OUTLIVED_REMOVED if outlived else REMOVED_AGAIN).search(error.message), error.message
        assert upstream.members == [m for m in upstream.members if m["id"] != FILE]


@pytest.mark.parametrize("stage", ["upload", "attach"])
async def test_a_hanging_write_times_out_once(upstream: Upstream, stage: str) -> None:
    """OPENWEBUI_TIMEOUT bounds the whole exchange; the write is not sent again."""

    started: list[httpx.Request] = []  # respx records a call only once it has an answer

    async def hang(request: httpx.Request) -> httpx.Response:
        started.append(request)
        await asyncio.sleep(30)
        return httpx.Response(200, json={})

    route = upstream.upload if stage == "upload" else upstream.add
    route.side_effect = hang
    error = error_of(await call(upstream, "knowledge_add", add_args(), OPENWEBUI_TIMEOUT="1"))
    # A hung attach is looked for (OPENWEBUI_TIMEOUT more): the base does not list the file, so it is removed again;
    # should Open WebUI still run that attach, the base may list it later, so the outcome is not certain.
    assert (error.code, error.stage, error.outcome) == ("timeout", stage, "partial_or_unknown")
    assert error.file_id is None
    assert upstream.delete.call_count == (1 if stage == "attach" else 0)
    assert len(started) == 1
    assert upstream.upload.call_count == (1 if stage == "attach" else 0)


WRITE_STAGES = ["create", "upload", "attach", "update", "reindex", "unlink"]


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("stage", WRITE_STAGES)
async def test_writes_are_not_retried_even_when_told_to(upstream: Upstream, stage: str, status: int) -> None:
    """Reads may honour Retry-After; a write asked to come back later is still sent once and reported."""
    case = STAGES[stage]
    if stage == "reindex":  # only releases before 0.12 need the server to re-index
        upstream = Upstream(new_router(), release="0.6.43")
    if case.tool != "knowledge_add":
        upstream.hold(FILE, TEXT)
    retry_later = answer(status, json={"detail": "Too many requests"}, headers={"Retry-After": "0"})
    case.failing(upstream).side_effect = retry_later

    error = error_of(await call(upstream, case.tool, case.args, OPENWEBUI_TIMEOUT="1"))

    assert error.code == ("rate_limited" if status == 429 else "upstream_unavailable")
    assert (error.stage, error.file_id, error.http_status) == (stage, case.file_id, status)
    outlived = stage == "attach" and status == 503  # a gateway's 503: the attach may still run behind it
    certain = ((status == 429 and not case.applied) or case.cleaned_up) and not outlived
    assert error.outcome == ("not_applied" if certain else "partial_or_unknown")
    for name, route in upstream.write_routes().items():
        assert route.call_count == (1 if name in case.sent_once else 0), (name, upstream.requests())


VERSION_FAILS: dict[str, tuple[str, dict[str, Any], str, str | None]] = {
    "create": ("knowledge_create", CREATE_ARGS, "create", None),
    "upload": ("knowledge_add", add_args(), "upload", None),
    "update": ("knowledge_update", UPDATE_ARGS, "update", FILE),
    "unlink": ("knowledge_delete", DELETE_ARGS, "unlink", FILE),
}


@pytest.mark.parametrize("kind", ["503", "timeout"])
@pytest.mark.parametrize("stage", list(VERSION_FAILS))
async def test_release_unknown_before_the_first_write(upstream: Upstream, stage: str, kind: str) -> None:
    """GET /api/version fails (Open WebUI restarting): the write is not sent, and the error says so."""
    upstream.hold(FILE, TEXT)
    upstream.version.side_effect = FAILURES[kind].effect
    tool, args, _, file_id = VERSION_FAILS[stage]

    error = error_of(await call(upstream, tool, args))

    assert (error.code, error.stage, error.file_id, error.outcome) == (
        FAILURES[kind].code,
        stage,
        file_id,
        "not_applied",
    )
    assert [route.call_count for route in upstream.write_routes().values()] == [0] * 7


# -- the processing stage -----------------------------------------------------------------------------------------


async def test_processing_failed_reports_open_webuis_error(upstream: Upstream) -> None:
    reason = "Error loading document: unsupported encoding"
    upstream.status.side_effect = answer(200, json={"status": "failed"})
    failed_file = full_file(FILE, "", "upload.md")
    failed_file["data"] = {"status": "failed", "error": reason}
    upstream.file.side_effect = answer(200, json=failed_file)

    error = error_of(await call(upstream, "knowledge_add", add_args()))

    assert (error.code, error.stage, error.file_id, error.outcome) == ("upstream_error", "process", None, "not_applied")
    assert reason in error.message
    assert REMOVED_AGAIN.search(error.message)
    assert upstream.delete.call_count == 1
    assert upstream.file.call_count == 1
    assert upstream.add.call_count == 0
    assert upstream.upload.call_count == 1


async def test_processing_that_never_ends_times_out(upstream: Upstream) -> None:
    upstream.status.side_effect = answer(200, json={"status": "pending"})

    error = error_of(await call(upstream, "knowledge_add", add_args(), OPENWEBUI_PROCESS_TIMEOUT="1"))

    assert (error.code, error.stage, error.file_id, error.outcome) == ("timeout", "process", None, "not_applied")
    assert "OPENWEBUI_PROCESS_TIMEOUT" in error.message
    assert REMOVED_AGAIN.search(error.message)
    assert upstream.delete.call_count == 1
    assert upstream.status.call_count > 1  # it did poll
    assert upstream.upload.call_count == 1
    assert upstream.add.call_count == 0


async def test_polls_until_completed(upstream: Upstream) -> None:
    upstream.status.side_effect = [
        httpx.Response(200, json={"status": "pending"}),
        httpx.Response(200, json={"status": "processing"}),
        httpx.Response(200, json={"status": "completed"}),
    ]

    added = ok_of(await call(upstream, "knowledge_add", add_args()))

    assert added["status"] == "completed"
    assert upstream.status.call_count == 3
    assert upstream.requests() == [
        f"GET /api/v1/knowledge/{KB}",
        "POST /api/v1/files/",
        f"GET /api/v1/files/{FILE}/process/status",
        f"GET /api/v1/files/{FILE}/process/status",
        f"GET /api/v1/files/{FILE}/process/status",
        f"POST /api/v1/knowledge/{KB}/file/add",
    ]


async def test_upload_answer_without_an_id(upstream: Upstream) -> None:
    upstream.upload.side_effect = answer(200, json={"status": True, "data": {"status": "pending"}})
    error = error_of(await call(upstream, "knowledge_add", add_args()))
    assert (error.code, error.stage, error.outcome) == ("unexpected_response", "upload", "partial_or_unknown")
    assert upstream.upload.call_count == 1
    assert upstream.add.call_count == 0


async def test_create_answer_without_an_id(upstream: Upstream) -> None:
    upstream.create.side_effect = answer(200, json={"name": "x"})
    error = error_of(await call(upstream, "knowledge_create", CREATE_ARGS))
    assert (error.code, error.stage, error.outcome) == ("unexpected_response", "create", "partial_or_unknown")
    assert upstream.create.call_count == 1


# -- duplicates ---------------------------------------------------------------------------------------------------


async def test_duplicate_content_at_attach_names_the_existing_file(upstream: Upstream) -> None:
    holder = "0d0e0f10-1112-4314-8516-171819202122"
    upstream.hold(holder, TEXT)
    upstream.add.side_effect = answer(400, json={"detail": DUPLICATE})

    error = error_of(await call(upstream, "knowledge_add", add_args()))

    assert (error.code, error.stage, error.file_id, error.outcome) == (
        "duplicate_content",
        "attach",
        None,
        "not_applied",
    )
    assert error.existing_file_id == holder
    assert holder in error.message
    assert REMOVED_AGAIN.search(error.message)  # the new copy does not stay behind
    assert upstream.delete.call_count == 1
    assert upstream.add.call_count == 1
    assert upstream.upload.call_count == 1


async def test_duplicate_content_without_a_known_holder(upstream: Upstream) -> None:
    upstream.add.side_effect = answer(400, json={"detail": DUPLICATE})  # no file of the base has that hash
    error = error_of(await call(upstream, "knowledge_add", add_args()))
    assert (error.code, error.stage, error.file_id) == ("duplicate_content", "attach", None)
    assert error.existing_file_id is None
    assert upstream.delete.call_count == 1
    assert upstream.add.call_count == 1


# -- knowledge_add: success, pre-check, input ---------------------------------------------------------------------


async def test_add_document(upstream: Upstream) -> None:
    added = ok_of(await call(upstream, "knowledge_add", add_args(metadata={"author": "Иван", "tags": ["a", "b"]})))

    assert added["knowledge_id"] == KB
    assert added["file_id"] == FILE
    assert added["title"] == TITLE
    assert added["status"] == "completed"
    assert upstream.requests() == [
        f"GET /api/v1/knowledge/{KB}",
        "POST /api/v1/files/",
        f"GET /api/v1/files/{FILE}/process/status",
        f"POST /api/v1/knowledge/{KB}/file/add",
    ]
    assert json.loads(upstream.add.calls.last.request.content) == {"file_id": FILE}
    assert any(m["id"] == FILE for m in upstream.members)


async def test_upload_carries_title_source_and_metadata(upstream: Upstream) -> None:
    caller = {"author": "Иван Петров", "url": "https://example.com/東京", "nested": {"a": [1, 2, {"b": None}]}}

    added = ok_of(await call(upstream, "knowledge_add", add_args(metadata=caller)))

    request = upstream.upload.calls.last.request
    parts = form_parts(request)
    filename, content = parts["file"]
    assert content.decode("utf-8") == TEXT
    metadata = upload_metadata(request)
    assert metadata["title"] == TITLE  # verbatim, no escaping or transliteration
    assert metadata["source"] == filename
    for key, value in caller.items():
        assert metadata[key] == value
    assert filename == added["filename"]


async def test_caller_source_is_kept(upstream: Upstream) -> None:
    ok_of(await call(upstream, "knowledge_add", add_args(metadata={"source": "https://example.com/a"})))
    assert upload_metadata(upstream.upload.calls.last.request)["source"] == "https://example.com/a"


@pytest.mark.parametrize(
    "title",
    [
        TITLE,
        "Отчёт/../../etc/passwd 東京",
        "..\\..\\Windows\\System32 データ",
        "a..b",
        "../Отчёт",
    ],
)
async def test_multipart_filename_is_safe(upstream: Upstream, title: str) -> None:
    added = ok_of(await call(upstream, "knowledge_add", add_args(title=title)))

    filename, _ = form_parts(upstream.upload.calls.last.request)["file"]
    assert filename == added["filename"]
    assert filename is not None
    assert "/" not in filename
    assert "\\" not in filename
    assert ".." not in filename, filename
    assert filename.endswith(".md")
    assert all(letter in filename for letter in title if letter.isalpha()), filename  # every script kept
    assert upload_metadata(upstream.upload.calls.last.request)["title"] == title.strip()


async def test_filename_keeps_cyrillic_and_cjk(upstream: Upstream) -> None:
    added = ok_of(await call(upstream, "knowledge_add", add_args()))
    assert "Отчёт" in added["filename"]
    assert "東京" in added["filename"]
    assert "データ" in added["filename"]


async def test_unknown_base_is_not_found_before_any_upload(upstream: Upstream) -> None:
    upstream.base.side_effect = answer(404, json={"detail": NOT_FOUND_TEXT})

    error = error_of(await call(upstream, "knowledge_add", add_args()))

    assert (error.code, error.outcome, error.file_id) == ("not_found", "not_applied", None)
    assert error.stage == "upload"
    assert upstream.upload.call_count == 0
    assert upstream.requests() == [f"GET /api/v1/knowledge/{KB}"]


async def test_read_only_base_is_forbidden_before_any_upload(upstream: Upstream) -> None:
    upstream.write_access = False

    error = error_of(await call(upstream, "knowledge_add", add_args()))

    assert (error.code, error.outcome, error.file_id) == ("forbidden", "not_applied", None)
    assert error.stage == "upload"
    assert upstream.upload.call_count == 0
    assert upstream.requests() == [f"GET /api/v1/knowledge/{KB}"]


@pytest.mark.parametrize("kind", ["500", "timeout", "refused", "html 200"])
async def test_pre_check_failure_uploads_nothing(upstream: Upstream, kind: str) -> None:
    upstream.base.side_effect = FAILURES[kind].effect
    error = error_of(await call(upstream, "knowledge_add", add_args()))
    assert error.code == FAILURES[kind].code
    assert error.outcome == "not_applied"  # only a read was made: nothing can have changed
    assert upstream.upload.call_count == 0


RESERVED = ["knowledge_id", "file_hash", "directory_id", "channel_id", "collection_name", "synced_by"]


@pytest.mark.parametrize("key", RESERVED)
async def test_reserved_metadata_keys_are_refused(upstream: Upstream, key: str) -> None:
    error = error_of(await call(upstream, "knowledge_add", add_args(metadata={"author": "a", key: "x"})))
    assert error.code == "invalid_argument"
    assert key in error.message
    assert upstream.requests() == []


async def test_every_reserved_key_is_named(upstream: Upstream) -> None:
    metadata = dict.fromkeys(RESERVED[:4], "x")
    error = error_of(await call(upstream, "knowledge_add", add_args(metadata=metadata)))
    assert error.code == "invalid_argument"
    for key in RESERVED[:4]:
        assert key in error.message
    assert upstream.requests() == []


def sized_metadata(size: int, letter: str = "x") -> dict[str, Any]:
    """Metadata whose JSON (as the server measures it) is exactly `size` bytes."""
    overhead = len(json.dumps({"k": ""}, ensure_ascii=False).encode())
    width = len(letter.encode())
    assert (size - overhead) % width == 0
    return {"k": letter * ((size - overhead) // width)}


async def test_metadata_at_the_size_limit_is_accepted(upstream: Upstream) -> None:
    metadata = sized_metadata(writes.METADATA_MAX_BYTES)
    assert len(json.dumps(metadata, ensure_ascii=False).encode()) == 16 * 1024
    ok_of(await call(upstream, "knowledge_add", add_args(metadata=metadata)))


@pytest.mark.parametrize("letter", ["x", "я"])
async def test_oversized_metadata_is_refused(upstream: Upstream, letter: str) -> None:
    overhead = len(json.dumps({"k": ""}).encode())
    metadata = {"k": letter * ((16 * 1024 - overhead) // len(letter.encode()) + 1)}
    assert len(json.dumps(metadata, ensure_ascii=False).encode()) > 16 * 1024
    assert len(json.dumps(metadata, ensure_ascii=False)) <= 16 * 1024 or letter == "x"  # bytes count, not characters
    error = error_of(await call(upstream, "knowledge_add", add_args(metadata=metadata)))
    assert error.code == "invalid_argument"
    assert re.search(r"16384|16 ?KiB", error.message), error.message
    assert upstream.requests() == []


def nested(depth: int) -> dict[str, Any]:
    value: Any = "leaf"
    for level in range(depth):
        value = {f"level{level}": value}
    assert isinstance(value, dict)
    return value


async def test_metadata_four_levels_deep_is_accepted(upstream: Upstream) -> None:
    ok_of(await call(upstream, "knowledge_add", add_args(metadata=nested(4))))


@pytest.mark.parametrize("metadata", [nested(5), {"a": [[[[["deep"]]]]]}, {"a": {"b": [{"c": {"d": 1}}]}}])
async def test_over_deep_metadata_is_refused(upstream: Upstream, metadata: dict[str, Any]) -> None:
    error = error_of(await call(upstream, "knowledge_add", add_args(metadata=metadata)))
    assert error.code == "invalid_argument"
    assert "deep" in error.message or "nested" in error.message
    assert upstream.requests() == []


@pytest.mark.parametrize(
    "change",
    [
        {"text": ""},
        {"text": " \n\t "},
        {"title": ""},
        {"title": "   "},
        {"title": "Я" * (writes.TITLE_MAX_CHARS + 1)},
        {"knowledge_id": "../api/v1/files"},
        {"knowledge_id": ""},
    ],
    ids=["empty text", "blank text", "empty title", "blank title", "long title", "path id", "empty id"],
)
async def test_bad_add_input_is_refused_without_a_request(upstream: Upstream, change: dict[str, Any]) -> None:
    error = error_of(await call(upstream, "knowledge_add", add_args(**change)))
    assert error.code == "invalid_argument"
    assert error.outcome in (None, "not_applied")
    assert upstream.requests() == []


async def test_longest_title_is_accepted(upstream: Upstream) -> None:
    added = ok_of(await call(upstream, "knowledge_add", add_args(title="Я" * writes.TITLE_MAX_CHARS)))
    assert upload_metadata(upstream.upload.calls.last.request)["title"] == "Я" * writes.TITLE_MAX_CHARS
    assert len(added["filename"].encode()) <= writes.FILENAME_MAX_BYTES


# -- progress -----------------------------------------------------------------------------------------------------


async def test_progress_is_reported(upstream: Upstream) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(upstream) as client:
        result = await client.call_tool("knowledge_add", add_args(), progress_callback=on_progress)
    ok_of(result)

    assert [message for _, _, message in seen] == ["uploading", "processing", "attaching", "done"]
    progress = [p for p, _, _ in seen]
    assert progress == sorted(progress)
    assert len(set(progress)) == len(progress)
    totals = {t for _, t, _ in seen}
    assert len(totals) == 1
    (total,) = totals
    assert total is not None
    assert progress[-1] == total


# -- releases before 0.6.23: processing happens during the upload -------------------------------------------------


async def test_old_release_does_not_poll(upstream_065: Upstream) -> None:
    added = ok_of(await call(upstream_065, "knowledge_add", add_args()))
    assert added["file_id"] == FILE
    assert upstream_065.status.call_count == 0
    assert upstream_065.add.call_count == 1
    assert upstream_065.upload.call_count == 1


async def test_old_release_processing_error_in_upload_answer(upstream_065: Upstream) -> None:
    upstream_065.upload_error = "400: The content provided is empty. Please ensure that there is text."

    error = error_of(await call(upstream_065, "knowledge_add", add_args()))

    assert (error.code, error.stage, error.file_id, error.outcome) == ("upstream_error", "process", None, "not_applied")
    assert "content provided is empty" in error.message
    assert REMOVED_AGAIN.search(error.message)
    assert upstream_065.delete.call_count == 1
    assert upstream_065.status.call_count == 0
    assert upstream_065.add.call_count == 0
    assert upstream_065.upload.call_count == 1


async def test_old_release_invisible_base(upstream_065: Upstream) -> None:
    """Before 0.7 Open WebUI answers 200 null for a base the key cannot read."""
    upstream_065.base.side_effect = answer(200, content=b"null", headers={"content-type": "application/json"})
    error = error_of(await call(upstream_065, "knowledge_add", add_args()))
    assert (error.code, error.outcome) == ("not_found", "not_applied")
    assert upstream_065.upload.call_count == 0


# -- knowledge_create ---------------------------------------------------------------------------------------------


async def test_create_knowledge(upstream: Upstream) -> None:
    created = ok_of(await call(upstream, "knowledge_create", CREATE_ARGS))
    assert created["knowledge_id"] == NEW_KB
    assert created["name"] == CREATE_ARGS["name"]
    assert upstream.create.call_count == 1
    body = json.loads(upstream.create.calls.last.request.content)
    assert body["name"] == CREATE_ARGS["name"]
    assert body["description"] == CREATE_ARGS["description"]


async def test_create_on_old_release_is_private(upstream_065: Upstream) -> None:
    ok_of(await call(upstream_065, "knowledge_create", CREATE_ARGS))
    body = json.loads(upstream_065.create.calls.last.request.content)
    assert body["access_control"] == {}  # null would make it readable by every user


@pytest.mark.parametrize("name", ["", "   ", "x" * (writes.NAME_MAX_CHARS + 1)])
async def test_bad_create_input_is_refused(upstream: Upstream, name: str) -> None:
    error = error_of(await call(upstream, "knowledge_create", {"name": name}))
    assert error.code == "invalid_argument"
    assert upstream.requests() == []


# -- knowledge_update ---------------------------------------------------------------------------------------------


async def test_update_document() -> None:
    upstream = Upstream(new_router(), release="0.6.43")
    upstream.hold(FILE, TEXT)

    updated = ok_of(await call(upstream, "knowledge_update", UPDATE_ARGS))

    assert updated["file_id"] == FILE
    assert updated["shared_file"] is True
    assert updated["total_chars"] == len(UPDATE_ARGS["text"])
    assert json.loads(upstream.content.calls.last.request.content) == {"content": UPDATE_ARGS["text"]}
    assert json.loads(upstream.reindex.calls.last.request.content) == {"file_id": FILE}
    assert upstream.requests() == [
        f"GET /api/v1/knowledge/{KB}",  # write access (a base shared read-only is refused here)
        f"GET /api/v1/knowledge/{KB}/files",
        f"POST /api/v1/files/{FILE}/data/content/update",
        f"POST /api/v1/knowledge/{KB}/file/update",
    ]


async def test_update_of_a_file_not_in_the_base(upstream: Upstream) -> None:
    error = error_of(await call(upstream, "knowledge_update", UPDATE_ARGS))  # the base holds only OTHER
    assert (error.code, error.outcome, error.file_id, error.stage) == ("not_found", "not_applied", FILE, "update")
    assert upstream.content.call_count == 0
    assert upstream.reindex.call_count == 0


async def test_update_in_an_unknown_base(upstream: Upstream) -> None:
    upstream.files.side_effect = answer(400, json={"detail": NOT_FOUND_TEXT})
    error = error_of(await call(upstream, "knowledge_update", UPDATE_ARGS))
    assert (error.code, error.outcome, error.stage) == ("not_found", "not_applied", "update")
    assert upstream.content.call_count == 0


@pytest.mark.parametrize("kind", ["500", "timeout", "reset"])
async def test_update_membership_check_failure_changes_nothing(upstream: Upstream, kind: str) -> None:
    upstream.files.side_effect = FAILURES[kind].effect
    error = error_of(await call(upstream, "knowledge_update", UPDATE_ARGS))
    assert (error.code, error.stage, error.outcome) == (FAILURES[kind].code, "update", "not_applied")
    assert upstream.content.call_count == 0


async def test_reindex_failure_says_the_text_was_replaced() -> None:
    upstream = Upstream(new_router(), release="0.6.43")
    upstream.hold(FILE, TEXT)
    upstream.reindex.side_effect = answer(500, text="Internal Server Error")
    error = error_of(await call(upstream, "knowledge_update", UPDATE_ARGS))
    assert (error.stage, error.outcome) == ("reindex", "partial_or_unknown")
    assert "replaced" in error.message


@pytest.mark.parametrize("change", [{"text": ""}, {"file_id": "a/b"}, {"knowledge_id": "x y"}])
async def test_bad_update_input_is_refused(upstream: Upstream, change: dict[str, Any]) -> None:
    error = error_of(await call(upstream, "knowledge_update", {**UPDATE_ARGS, **change}))
    assert error.code == "invalid_argument"
    assert upstream.requests() == []


# -- knowledge_delete ---------------------------------------------------------------------------------------------


async def test_delete_keeps_the_file(upstream: Upstream) -> None:
    upstream.hold(FILE, TEXT)

    removed = ok_of(await call(upstream, "knowledge_delete", DELETE_ARGS))

    assert removed == {"ok": True, "knowledge_id": KB, "file_id": FILE, "file_kept": True}
    request = upstream.remove.calls.last.request
    assert request.url.params.get_list("delete_file") == ["false"]
    assert json.loads(request.content) == {"file_id": FILE}
    assert upstream.remove.call_count == 1
    assert upstream.requests() == [
        f"POST /api/v1/knowledge/{KB}/file/remove",
        f"GET /api/v1/knowledge/{KB}/files",
    ]


async def test_delete_is_refused_before_0_6_27(upstream_065: Upstream) -> None:
    upstream_065.hold(FILE, TEXT)

    error = error_of(await call(upstream_065, "knowledge_delete", DELETE_ARGS))

    assert (error.code, error.outcome, error.stage, error.file_id) == ("unsupported", "not_applied", "unlink", FILE)
    assert "0.6.5" in error.message
    assert upstream_065.remove.call_count == 0
    assert not [r for r in upstream_065.requests() if r.startswith("POST")]


async def test_delete_confirmation_still_listed(upstream: Upstream) -> None:
    upstream.hold(FILE, TEXT)
    upstream.remove.side_effect = upstream._knowledge  # accepted, but the base keeps listing the file

    error = error_of(await call(upstream, "knowledge_delete", DELETE_ARGS))

    assert (error.code, error.outcome, error.stage, error.file_id) == (
        "upstream_error",
        "partial_or_unknown",
        "unlink",
        FILE,
    )
    assert upstream.remove.call_count == 1


async def test_delete_does_not_mistake_an_invisible_file_for_a_deleted_one(upstream: Upstream) -> None:
    """A key that saw a shared file only through this base cannot see it afterwards (GET 404); that is no failure."""
    upstream.hold(FILE, TEXT)
    upstream.file.side_effect = answer(404, json={"detail": NOT_FOUND_TEXT})
    removed = ok_of(await call(upstream, "knowledge_delete", DELETE_ARGS))
    assert removed["file_kept"] is True
    assert upstream.file.call_count == 0


@pytest.mark.parametrize("kind", ["500", "timeout", "malformed 200"])
async def test_delete_confirmation_fails(upstream: Upstream, kind: str) -> None:
    upstream.hold(FILE, TEXT)
    upstream.files.side_effect = FAILURES[kind].effect

    error = error_of(await call(upstream, "knowledge_delete", DELETE_ARGS))

    assert (error.code, error.outcome, error.stage, error.file_id) == (
        FAILURES[kind].code,
        "partial_or_unknown",
        "unlink",
        FILE,
    )
    assert upstream.remove.call_count == 1


@pytest.mark.parametrize("change", [{"file_id": "../x"}, {"knowledge_id": "a?b"}])
async def test_bad_delete_input_is_refused(upstream: Upstream, change: dict[str, Any]) -> None:
    error = error_of(await call(upstream, "knowledge_delete", {**DELETE_ARGS, **change}))
    assert error.code == "invalid_argument"
    assert upstream.requests() == []


async def test_update_on_0_12_leaves_reindexing_to_open_webui(upstream: Upstream) -> None:
    """0.12's text update re-indexes every base holding the file, new vectors first; a second re-index would
    delete this base's vectors before re-adding them."""
    upstream.hold(FILE, TEXT)
    updated = ok_of(await call(upstream, "knowledge_update", UPDATE_ARGS))
    assert upstream.content.call_count == 1
    assert upstream.reindex.call_count == 0
    assert "every knowledge base holding this file_id now has the new text" in updated["note"]


async def test_update_before_0_12_reindexes_this_base_and_says_others_are_stale() -> None:
    upstream = Upstream(new_router(), release="0.6.43")
    upstream.hold(FILE, TEXT)
    updated = ok_of(await call(upstream, "knowledge_update", UPDATE_ARGS))
    assert (upstream.content.call_count, upstream.reindex.call_count) == (1, 1)
    assert "only this base was re-indexed" in updated["note"]


async def test_update_to_text_another_document_holds_changes_nothing(upstream: Upstream) -> None:
    upstream.hold(FILE, TEXT)
    duplicate = {**UPDATE_ARGS, "text": "Pears are green."}  # OTHER's text, whose hash the base lists
    error = error_of(await call(upstream, "knowledge_update", duplicate))
    assert (error.code, error.stage, error.outcome, error.existing_file_id) == (
        "duplicate_content",
        "update",
        "not_applied",
        OTHER,
    )
    assert upstream.content.call_count == 0


async def test_a_key_without_the_permission_is_forbidden_not_auth(upstream: Upstream) -> None:
    """Open WebUI answers 401 "401 Unauthorized" to a valid key whose user lacks e.g. Workspace > Knowledge."""
    upstream.create.side_effect = answer(401, json={"detail": "401 Unauthorized"})
    error = error_of(await call(upstream, "knowledge_create", CREATE_ARGS))
    assert (error.code, error.http_status, error.outcome) == ("forbidden", 401, "not_applied")
    assert "permission" in error.message


async def test_delete_is_refused_when_the_version_cannot_be_read() -> None:
    """The one gate that protects user data stays shut for a version string the server cannot parse."""
    upstream = Upstream(new_router(), release="main-dev")
    upstream.hold(FILE, TEXT)
    error = error_of(await call(upstream, "knowledge_delete", DELETE_ARGS))
    assert (error.code, error.outcome) == ("unsupported", "not_applied")
    assert upstream.remove.call_count == 0
