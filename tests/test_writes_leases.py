"""Issue 16, defect 7: a write whose base lock (a Redis lease) was lost stops before its next write request, and on
releases whose attach is read-modify-write (before 0.6.42) an acknowledged attach is confirmed by reading the base.

The lock is a stand-in whose lease the test loses at a chosen request, so nothing here depends on timing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.types import CallToolResult

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import Timings
from openwebui_rag_mcp.locks import Lease
from openwebui_rag_mcp.server import create_server
from tests.conftest import FAST, make_settings, mock_transport, new_router
from tests.support.writes import (
    FILE,
    KB,
    REMOVED_AGAIN,
    TEXT,
    UPDATE_ARGS,
    Upstream,
    add_args,
    answer,
    error_of,
    ok_of,
)

pytestmark = pytest.mark.anyio


class LosableLocks:
    """Write locks whose one lease the test can lose (as a failed Redis renewal would)."""

    shared = True
    sets = None

    def __init__(self) -> None:
        self.lease = Lease()
        self.held = 0
        self.holding = False  # inside a hold right now

    @asynccontextmanager
    async def _held(self) -> AsyncIterator[Lease]:
        self.held += 1
        self.holding = True
        try:
            yield self.lease
        finally:
            self.holding = False

    def hold(self, key: str) -> AbstractAsyncContextManager[Lease]:
        return self._held()

    async def aclose(self) -> None:
        return None


async def call_with(
    upstream: Upstream, locks: LosableLocks, tool: str, args: dict[str, Any], timings: Timings = FAST
) -> CallToolResult:
    settings = replace(make_settings(), timings=timings)
    client = OpenWebUIClient(settings, transport=mock_transport(upstream.router))
    app = App(settings=settings, client=client, locks=locks)
    try:
        async with Client(create_server(settings, shared=lambda: app), raise_exceptions=True) as session:
            return await session.call_tool(tool, args)
    finally:
        await client.aclose()


def losing(locks: LosableLocks, then: Any) -> Any:
    """A route effect that loses the lease while Open WebUI answers this request."""

    def effect(request: httpx.Request) -> httpx.Response:
        locks.lease.lose("the test lost it")
        response: httpx.Response = then(request) if callable(then) else then
        return response

    return effect


# -- 7a: a lost lease stops the write --------------------------------------------------------------------------


async def test_an_upload_holds_the_lock_only_around_its_attach() -> None:
    """Issue 18: uploads to one base upload and process side by side; only the attach, the request that changes the
    base, takes the base's lock."""
    upstream, locks = Upstream(new_router()), LosableLocks()
    seen: dict[str, list[bool]] = {}

    def noting(step: str, then: Any) -> Any:
        def effect(request: httpx.Request) -> httpx.Response:
            seen.setdefault(step, []).append(locks.holding)
            response: httpx.Response = then(request) if callable(then) else then
            return response

        return effect

    upstream.base.side_effect = noting("base", upstream._base)
    upstream.upload.side_effect = noting("upload", upstream.upload.side_effect or upstream.upload.return_value)
    upstream.status.side_effect = noting("status", httpx.Response(200, json={"status": "completed"}))
    upstream.add.side_effect = noting("attach", upstream.add.side_effect or upstream.add.return_value)
    ok_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert {step: set(held) for step, held in seen.items()} == {
        "base": {False},
        "upload": {False},
        "status": {False},
        "attach": {True},
    }
    assert locks.held == 2  # taken and given back at once before the upload, then for the attach


async def test_a_lock_that_cannot_be_had_refuses_before_the_upload() -> None:
    upstream, locks = Upstream(new_router()), LosableLocks()
    locks.lease.lose("the test lost it")
    error = error_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert (error.code, error.stage, error.outcome, error.file_id) == ("conflict", "upload", "not_applied", None)
    assert upstream.upload.call_count == 0


async def test_a_lease_lost_before_the_attach_removes_the_upload() -> None:
    upstream, locks = Upstream(new_router()), LosableLocks()
    upstream.base.side_effect = losing(locks, upstream._base)
    error = error_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert (error.code, error.stage, error.outcome, error.file_id) == ("conflict", "attach", "not_applied", None)
    assert "lost" in error.message
    assert REMOVED_AGAIN.search(error.message), error.message
    assert (upstream.upload.call_count, upstream.add.call_count, upstream.delete.call_count) == (1, 0, 1)


async def test_a_lease_lost_while_processing_stops_before_the_attach_and_removes_the_file() -> None:
    upstream, locks = Upstream(new_router()), LosableLocks()
    upstream.status.side_effect = losing(locks, httpx.Response(200, json={"status": "completed"}))
    error = error_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert (error.code, error.stage, error.outcome, error.file_id) == ("conflict", "attach", "not_applied", None)
    assert REMOVED_AGAIN.search(error.message), error.message
    assert upstream.add.call_count == 0
    assert upstream.delete.call_count == 1


async def test_a_lease_lost_while_processing_names_a_file_that_could_not_be_removed() -> None:
    upstream, locks = Upstream(new_router()), LosableLocks()
    upstream.status.side_effect = losing(locks, httpx.Response(200, json={"status": "completed"}))
    upstream.delete.side_effect = answer(500, text="Internal Server Error")
    error = error_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert (error.code, error.stage, error.outcome, error.file_id) == ("conflict", "attach", "partial_or_unknown", FILE)
    assert upstream.add.call_count == 0


async def test_a_lease_lost_before_an_update_changes_nothing() -> None:
    upstream, locks = Upstream(new_router()), LosableLocks()
    upstream.hold(FILE, TEXT)
    upstream.files.side_effect = losing(locks, upstream._files)
    error = error_of(await call_with(upstream, locks, "knowledge_update", UPDATE_ARGS))
    assert (error.code, error.stage, error.outcome, error.file_id) == ("conflict", "update", "not_applied", FILE)
    assert upstream.content.call_count == 0


async def test_a_lease_lost_between_the_text_and_the_reindex_is_partial() -> None:
    upstream, locks = Upstream(new_router(), release="0.6.43"), LosableLocks()
    upstream.hold(FILE, TEXT)
    upstream.content.side_effect = losing(locks, upstream._content)
    error = error_of(await call_with(upstream, locks, "knowledge_update", UPDATE_ARGS))
    assert (error.code, error.stage, error.outcome) == ("conflict", "reindex", "partial_or_unknown")
    assert "knowledge_update again" in error.message
    assert upstream.reindex.call_count == 0


async def test_a_lease_lost_before_a_removal_changes_nothing() -> None:
    upstream, locks = Upstream(new_router()), LosableLocks()
    upstream.hold(FILE, TEXT)
    locks.lease.lose("the test lost it")
    error = error_of(await call_with(upstream, locks, "knowledge_delete", {"knowledge_id": KB, "file_id": FILE}))
    assert (error.code, error.stage, error.outcome) == ("conflict", "unlink", "not_applied")
    assert upstream.remove.call_count == 0


async def test_a_held_lease_changes_nothing_in_a_write() -> None:
    upstream, locks = Upstream(new_router()), LosableLocks()
    added = ok_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert added["file_id"] == FILE
    assert locks.held == 2  # before the upload, and for the attach


# -- 7b: before 0.6.42 an acknowledged attach is confirmed ----------------------------------------------------------


async def test_an_attach_overwritten_by_a_concurrent_change_is_an_error_before_0_6_42() -> None:
    """0.6.5 attaches by read-modify-write of the base's file list: a concurrent writer can drop the file while
    Open WebUI answers 200. The server reads the base again and says so."""
    upstream, locks = Upstream(new_router(), release="0.6.5"), LosableLocks()
    upstream.add.side_effect = upstream._knowledge  # acknowledged, but the base's list lost the file
    error = error_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert (error.code, error.stage, error.outcome) == ("upstream_error", "attach", "partial_or_unknown")
    assert "does not list" in error.message
    assert upstream.add.call_count == 1
    assert upstream.delete.call_count == 1  # no file stranded in no base
    assert all(member["id"] != FILE for member in upstream.members)


async def test_an_attach_that_cannot_be_confirmed_is_partial_before_0_6_42(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream, locks = Upstream(new_router(), release="0.6.5"), LosableLocks()
    reads = 0

    def base(request: httpx.Request) -> httpx.Response:
        nonlocal reads
        reads += 1
        return upstream._knowledge(request) if reads == 1 else httpx.Response(500, text="Internal Server Error")

    upstream.base.side_effect = base
    error = error_of(
        await call_with(upstream, locks, "knowledge_add", add_args(), timings=replace(FAST, confirm_pause=0.0))
    )
    assert (error.code, error.stage, error.outcome, error.file_id) == (
        "upstream_error",
        "attach",
        "partial_or_unknown",
        FILE,
    )
    assert "knowledge_files" in error.message
    assert reads == 4  # the check before the attach, then the read-back tried three times
    assert upstream.delete.call_count == 0  # it may be in the base: never removed blind


async def test_a_confirmed_attach_succeeds_before_0_6_42() -> None:
    upstream, locks = Upstream(new_router(), release="0.6.5"), LosableLocks()
    added = ok_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert added["file_id"] == FILE
    assert upstream.base.call_count == 2  # the check before, and the confirmation after


async def test_no_confirmation_read_from_0_6_42() -> None:
    upstream, locks = Upstream(new_router(), release="0.6.43"), LosableLocks()
    ok_of(await call_with(upstream, locks, "knowledge_add", add_args()))
    assert upstream.files.call_count == 0
    assert upstream.base.call_count == 1
