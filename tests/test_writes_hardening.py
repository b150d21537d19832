"""Issue 10's write defects, each pinned by a test that failed before its fix: long non-Latin titles (2), a cancelled
or failed write leaves no orphan and says what it did (3), `retryable` only when repeating is safe (9); issue 16's:
a cancel during the upload strands no file (10), an update of a base shared read-only is forbidden (14); and issue
18's: an attach Open WebUI goes on with after its answer was due is waited for, not undone under it."""

from __future__ import annotations

import logging
from dataclasses import replace

import anyio
import httpx
import pytest

from openwebui_rag_mcp import writes
from tests.conftest import FAST, new_router
from tests.support.writes import (
    FILE,
    KB,
    REMOVED_AGAIN,
    TEXT,
    UPDATE_ARGS,
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

CJK_80 = ("北京是中华人民共和国的首都" * 10)[:80]
RUSSIAN_150 = ("Москва — столица России и крупнейший город страны. " * 3)[:150]


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


# -- issue 18: an attach that outlives its answer -------------------------------------------------------------------


def attach_without_answer(
    upstream: Upstream, reads_until_done: int | None, busy_reads: int = 0, **record: object
) -> list[str]:
    """The attach's answer never comes (a timeout); Open WebUI marks the file written to the base and lists it once
    the file has been read `reads_until_done` times since (None: never; the first `busy_reads` of them time out), and
    until then the file reads as `record` says (its status, its mark). Returns the requests' order as they come."""
    order: list[str] = []
    reads = 0

    def timed_out(request: httpx.Request) -> httpx.Response:
        order.append("attach")
        raise httpx.ReadTimeout("no answer", request=request)

    def read(request: httpx.Request) -> httpx.Response:
        nonlocal reads
        body = full_file(FILE, TEXT, "upload.md")
        body["data"]["status"] = record.get("status", "completed")
        body["meta"]["collection_name"] = record.get("collection", f"file-{FILE}")
        if "attach" in order:
            reads += 1
            order.append("read")
            if reads <= busy_reads:
                raise httpx.ReadTimeout("busy", request=request)
            if reads == reads_until_done:
                upstream.hold(FILE, TEXT)  # Open WebUI's attach ends, well after its answer was due
            if reads_until_done is not None and reads >= reads_until_done:
                body["meta"]["collection_name"] = KB
        return httpx.Response(200, json=body)

    def deleted(request: httpx.Request) -> httpx.Response:
        order.append("delete")
        return httpx.Response(200, json=True)

    upstream.add.side_effect = timed_out
    upstream.file.side_effect = read
    upstream.delete.side_effect = deleted
    return order


@pytest.mark.parametrize("release", ["0.12.4", "0.6.5"])
async def test_an_attach_open_webui_finishes_after_its_answer_was_due_is_kept(release: str) -> None:
    """Deleting the file at the timeout would leave a document without a file (and before 0.6.42 the late attach
    would rewrite the base's list over later writes): the write looks until the base lists it, and says "added"."""
    upstream = Upstream(new_router(), release=release)
    order = attach_without_answer(upstream, reads_until_done=3)

    added = ok_of(await call(upstream, "knowledge_add", add_args(), OPENWEBUI_TIMEOUT="1"))

    assert added["file_id"] == FILE
    assert order == ["attach", "read", "read", "read"]  # no delete, and no second attach
    assert FILE in {member["id"] for member in upstream.members}


async def test_an_attach_marked_written_but_never_listed_is_removed_before_the_second_timeout(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open WebUI marked the file written to the base (its attach ran) yet the base does not list it: the attach
    failed after indexing, so the file is removed then, not after OPENWEBUI_TIMEOUT more (120 s here); its text may
    be in the base's index, so the outcome is not certain."""
    order = attach_without_answer(upstream, None, collection=KB)

    with anyio.fail_after(60):  # a hang guard: without the mark it would look for 120 s
        error = error_of(await call(upstream, "knowledge_add", add_args(), timings=replace(FAST, link_wait=0.05)))

    assert (error.code, error.stage, error.outcome, error.file_id) == ("timeout", "attach", "partial_or_unknown", None)
    assert f"{FILE} was removed again, but" in error.message
    assert "search index" in error.message
    assert (order[0], order[-1], set(order[1:-1])) == ("attach", "delete", {"read"})
    assert FILE not in {member["id"] for member in upstream.members}


async def test_an_attach_marked_failed_is_removed_at_once(upstream: Upstream) -> None:
    order = attach_without_answer(upstream, None, status="failed")

    error = error_of(await call(upstream, "knowledge_add", add_args()))

    assert (error.stage, error.outcome) == ("attach", "not_applied")
    assert REMOVED_AGAIN.search(error.message), error.message
    assert order == ["attach", "read", "delete"]


async def test_a_failed_read_while_looking_is_looked_at_again(upstream: Upstream) -> None:
    """Open WebUI, slow enough to miss the attach's answer, misses a read too: that ends nothing."""
    order = attach_without_answer(upstream, 3, busy_reads=1)

    added = ok_of(await call(upstream, "knowledge_add", add_args()))

    assert added["file_id"] == FILE
    assert order == ["attach", "read", "read", "read"]


async def test_an_attach_that_never_shows_is_removed_after_a_second_timeout(upstream: Upstream) -> None:
    order = attach_without_answer(upstream, None)

    error = error_of(await call(upstream, "knowledge_add", add_args(), OPENWEBUI_TIMEOUT="1"))

    assert (error.code, error.stage, error.outcome) == ("timeout", "attach", "partial_or_unknown")
    assert "may list the file later" in error.message
    assert (order[0], order[-1], set(order[1:-1])) == ("attach", "delete", {"read"})


async def test_an_attach_refused_in_so_many_words_is_not_waited_for(upstream: Upstream) -> None:
    """A 500 is Open WebUI's own answer: it runs the attach no more, so the base is read once and the file removed."""
    order = attach_without_answer(upstream, None)
    upstream.add.side_effect = answer(500, text="Internal Server Error")

    error = error_of(await call(upstream, "knowledge_add", add_args()))

    assert (error.stage, error.outcome) == ("attach", "not_applied")
    assert order == ["delete"]
