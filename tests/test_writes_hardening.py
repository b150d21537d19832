"""Issue 10's write defects, each pinned by a test that failed before its fix: long non-Latin titles (2), a cancelled
or failed write leaves no orphan and says what it did (3), `retryable` only when repeating is safe (9); and issue 16's:
a cancel during the upload strands no file (10), an update of a base shared read-only is forbidden (14)."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest

from openwebui_rag_mcp import writes
from tests.conftest import new_router
from tests.test_writes import (
    FILE,
    KB,
    TEXT,
    UPDATE_ARGS,
    Upstream,
    add_args,
    answer,
    call,
    connect,
    error_of,
    form_parts,
    ok_of,
    upload_metadata,
)

pytestmark = pytest.mark.anyio

CJK_80 = ("北京是中华人民共和国的首都" * 10)[:80]
RUSSIAN_150 = ("Москва — столица России и крупнейший город страны. " * 3)[:150]


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "_POLL_FIRST_DELAY", 0.01)
    monkeypatch.setattr(writes, "_POLL_MAX_DELAY", 0.02)


@pytest.fixture
def upstream() -> Upstream:
    return Upstream(new_router())


# -- 2: long titles in non-Latin scripts ---------------------------------------------------------------------------


@pytest.mark.parametrize("title", [CJK_80, RUSSIAN_150, "😀" * 120, "a" * 300])
def test_the_filename_fits_open_webuis_storage_in_bytes(title: str) -> None:
    """`<uuid>_<filename>` must stay within Linux's 255-byte file names; 72 CJK characters used to break it."""
    filename = writes.safe_filename(title)
    assert len(filename.encode()) <= writes.FILENAME_MAX_BYTES
    assert 37 + len(filename.encode()) <= 255
    assert filename.endswith(".md")
    assert filename.encode().decode() == filename  # never a broken character


async def test_a_long_cjk_title_is_kept_whole_in_the_metadata(upstream: Upstream) -> None:
    assert len(CJK_80) == 80
    added = ok_of(await call(upstream, "knowledge_add", add_args(title=CJK_80)))
    filename, _ = form_parts(upstream.upload.calls.last.request)["file"]
    assert filename is not None
    assert filename == added["filename"]
    assert len(filename.encode()) <= writes.FILENAME_MAX_BYTES
    assert CJK_80.startswith(filename.removesuffix(".md"))
    assert upload_metadata(upstream.upload.calls.last.request)["title"] == CJK_80
    assert added["title"] == CJK_80


# -- 3: nothing orphaned, and the agent told ------------------------------------------------------------------------


async def test_a_file_that_cannot_be_removed_again_is_named(upstream: Upstream) -> None:
    upstream.status.side_effect = answer(200, json={"status": "failed"})
    upstream.delete.side_effect = answer(500, text="Internal Server Error")
    error = error_of(await call(upstream, "knowledge_add", add_args()))
    assert (error.stage, error.file_id, error.outcome, error.retryable) == (
        "process",
        FILE,
        "partial_or_unknown",
        False,
    )
    assert f"{FILE} could not be removed again" in error.message
    assert upstream.delete.call_count == 1


async def test_an_attach_that_failed_but_was_applied_is_not_undone(upstream: Upstream) -> None:
    """A 500 after Open WebUI linked the file: the base lists it, so it is kept and the agent is told."""

    def linked_then_failed(request: httpx.Request) -> httpx.Response:
        upstream.hold(FILE, upstream.file_text)
        return httpx.Response(500, text="Internal Server Error")

    upstream.add.side_effect = linked_then_failed
    error = error_of(await call(upstream, "knowledge_add", add_args()))
    assert (error.stage, error.file_id, error.outcome, error.retryable) == (
        "attach",
        FILE,
        "partial_or_unknown",
        False,
    )
    assert "lists the file" in error.message
    assert upstream.delete.call_count == 0


async def test_progress_goes_out_on_every_poll(upstream: Upstream) -> None:
    upstream.status.side_effect = [httpx.Response(200, json={"status": "pending"})] * 4 + [
        httpx.Response(200, json={"status": "completed"})
    ]
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with connect(upstream) as client:
        ok_of(await client.call_tool("knowledge_add", add_args(), progress_callback=on_progress))
    polls = [message for _, message in seen if message and message.startswith("processing (")]
    assert len(polls) == 4
    values = [progress for progress, _ in seen]
    assert values == sorted(values)
    assert len(set(values)) == len(values)


async def test_a_cancelled_add_finishes_what_it_started(upstream: Upstream, caplog: pytest.LogCaptureFixture) -> None:
    """The client gives up while Open WebUI processes the upload: the sequence still attaches the file (no orphan),
    and stderr says so with the file_id."""
    caplog.set_level(logging.WARNING)
    processing = anyio.Event()
    release = anyio.Event()

    async def slow_status(request: httpx.Request) -> httpx.Response:
        processing.set()
        await release.wait()
        return httpx.Response(200, json={"status": "completed"})

    upstream.status.side_effect = slow_status
    async with connect(upstream) as client, anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "knowledge_add", add_args())
        await processing.wait()
        group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled for the call
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.05)
            release.set()
            with anyio.fail_after(5):
                while upstream.add.call_count == 0 or "cancelled" not in caplog.text:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
    assert upstream.add.call_count == 1
    assert upstream.delete.call_count == 0
    assert FILE in caplog.text
    assert KB in caplog.text


# -- 9: retryable means safe to repeat ----------------------------------------------------------------------------


async def test_a_write_that_may_have_happened_is_not_retryable(upstream: Upstream) -> None:
    upstream.create.side_effect = httpx.ReadTimeout
    error = error_of(await call(upstream, "knowledge_create", {"name": "n", "description": "d"}))
    assert (error.code, error.outcome, error.retryable) == ("timeout", "partial_or_unknown", False)
    assert "check with knowledge_files" in error.message or "before trying again" in error.message


async def test_a_write_that_never_left_is_retryable(upstream: Upstream) -> None:
    upstream.create.side_effect = httpx.ConnectError
    error = error_of(await call(upstream, "knowledge_create", {"name": "n", "description": "d"}))
    assert (error.code, error.outcome, error.retryable) == ("upstream_unavailable", "not_applied", True)


# -- issue 16, defect 10: a cancel while the upload is in flight strands no file --------------------------------


async def test_a_cancel_during_the_upload_strands_no_file(upstream: Upstream, caplog: pytest.LogCaptureFixture) -> None:
    """Open WebUI stores the file as soon as the upload arrives; the client gives up before the answer. The server
    still reads the answer (the file id) and ends with the file attached, and says so on stderr."""
    caplog.set_level(logging.WARNING)
    uploading = anyio.Event()
    answer_now = anyio.Event()
    stored: list[str] = []  # what Open WebUI holds because of an upload, answered or not
    answer_upload = upstream._upload

    async def slow_upload(request: httpx.Request) -> httpx.Response:
        stored.append(FILE)
        uploading.set()
        await answer_now.wait()
        return answer_upload(request)

    upstream.upload.side_effect = slow_upload
    async with connect(upstream) as client, anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "knowledge_add", add_args())
        await uploading.wait()
        group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled for the call
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.05)
            answer_now.set()
            with anyio.fail_after(5):
                while upstream.add.call_count + upstream.delete.call_count == 0 or "cancelled" not in caplog.text:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
    assert stored == [FILE]
    assert (upstream.upload.call_count, upstream.add.call_count, upstream.delete.call_count) == (1, 1, 0)
    assert [m["id"] for m in upstream.members if m["id"] == FILE] == [FILE]  # attached, not stranded
    assert FILE in caplog.text
    assert KB in caplog.text


async def test_a_call_cancelled_before_the_upload_sends_none(upstream: Upstream) -> None:
    """The shield begins with the upload: a call cancelled while the base is being checked uploads nothing."""
    checking = anyio.Event()
    go_on = anyio.Event()
    answer_base = upstream._base

    async def slow_base(request: httpx.Request) -> httpx.Response:
        checking.set()
        await go_on.wait()
        return answer_base(request)

    upstream.base.side_effect = slow_base
    async with connect(upstream) as client, anyio.create_task_group() as group:
        group.start_soon(client.call_tool, "knowledge_add", add_args())
        await checking.wait()
        group.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.05)
            go_on.set()
            await anyio.sleep(0.05)
    assert upstream.upload.call_count == 0


# -- issue 16, defect 14: knowledge_update under read-only sharing ------------------------------------------------


async def test_an_update_of_a_base_shared_read_only_is_forbidden() -> None:
    """The key may read the base but not change it: forbidden, like knowledge_add, before anything is sent."""
    upstream = Upstream(new_router(), write_access=False)
    upstream.hold(FILE, TEXT)
    error = error_of(await call(upstream, "knowledge_update", UPDATE_ARGS))
    assert (error.code, error.stage, error.outcome, error.file_id) == ("forbidden", "update", "not_applied", FILE)
    assert "read" in error.message
    assert upstream.content.call_count == 0
    assert upstream.reindex.call_count == 0
