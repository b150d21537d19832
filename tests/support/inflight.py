"""What the tests of the journal, settle and recover share: a fake Open WebUI as recovery sees it
(`FakeUpstream`), a journal on a test clock, and a write that ends without settling (`abandon`)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.config import Timings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.giveup import Waits
from openwebui_rag_mcp.journal import FileJournal, Inflight, Record, default_directory, owner_of
from tests.conftest import API_KEY, make_settings

OWNER = "a" * 64


NO_SETTLE = Timings(link_settle=0.0)  # recovery looks again at once at a "completed" upload the base does not list


@dataclass
class FakeUpstream:
    """Open WebUI as recovery sees it: which base lists which file, the files by name, deletions."""

    listed: dict[str, set[str]] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unreadable: bool = False
    statuses: dict[str, str] = field(default_factory=dict)  # file_id -> processing status (default "completed")
    # file_id -> `meta.collection_name` (default the base "kb": written to it)
    collections: dict[str, str] = field(default_factory=dict)
    unlinked: list[tuple[str, str]] = field(default_factory=list)  # removed with `remove_unlinked`
    pending_ids: set[str] | None = None  # the base's pending list, `id:status` (None: it cannot be read)
    refused_at: float | None = None  # when a connection to Open WebUI was last refused

    async def base_lists(self, knowledge_id: str, file_id: str) -> bool | None:
        if self.unreadable:
            return None
        return file_id in self.listed.get(knowledge_id, set())

    async def files_named(self, filename: str) -> list[Mapping[str, Any]]:
        return [item for item in self.files if item["filename"] == filename]

    async def delete_file(self, file_id: str) -> object:
        if file_id in self.deleted:
            raise ToolFailure("not_found", "gone")
        self.deleted.append(file_id)
        return {}

    async def file_record(self, file_id: str) -> normalize.FileRecord:
        status = self.statuses.get(file_id, "completed")
        return normalize.FileRecord(file_id, None, status, None, self.collections.get(file_id, "kb"))

    async def remove_unlinked(self, knowledge_id: str, file_id: str) -> None:
        await self.delete_file(file_id)
        self.unlinked.append((knowledge_id, file_id))

    async def pending(self, knowledge_id: str) -> set[str] | None:
        return self.pending_ids

    def unreachable_at(self) -> float | None:
        return self.refused_at


def journal(tmp_path: Path, clock: list[float] | None = None) -> Inflight:
    now = clock or [1_000_000.0]
    return Inflight(FileJournal(tmp_path / "inflight"), alive_seconds=45, clock=lambda: now[0])


async def abandon(
    inflight: Inflight,
    file_id: str | None,
    owner: str = OWNER,
    *,
    links_itself: bool = False,
    indexed_after_link: bool = False,
    attach_within: float | None = None,
    process_within: float = 0.0,
) -> None:
    """A write that ends without settling its upload (killed, or its file could not be removed again); with
    `attach_within`, killed once its attach was sent; `process_within`: its writer's OPENWEBUI_PROCESS_TIMEOUT."""
    async with inflight.tracking(
        owner,
        "kb",
        "a.md",
        b"hello",
        marked=False,
        answer_within=60,
        links_itself=links_itself,
        indexed_after_link=indexed_after_link,
        process_within=process_within,
    ) as tracked:
        if file_id is not None:
            await tracked.uploaded(file_id)
        if attach_within is not None:
            await tracked.attaching(Waits(attach_within, 0.0))
        raise RuntimeError("the write ended without settling")


async def records(inflight: Inflight) -> list[Record]:
    store = inflight._store
    return await store.records(OWNER)


def start_writer(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A real process that records an upload (file id known) and then waits, as if for Open WebUI."""
    ready = tmp_path / "ready"
    script = textwrap.dedent(
        f"""
        import asyncio, pathlib
        from openwebui_rag_mcp.journal import FileJournal, Inflight

        async def main():
            inflight = Inflight(FileJournal(pathlib.Path({str(tmp_path / "inflight")!r})))
            async with inflight.tracking({OWNER!r}, "kb", "a.md", b"hello", marked=False, answer_within=60) as tracked:
                await tracked.uploaded("file-9")
                pathlib.Path({str(ready)!r}).touch()
                await asyncio.sleep(3600)

        asyncio.run(main())
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60  # a hang guard only
    while not ready.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail("the writer never recorded its upload")
        time.sleep(0.05)
    return child


def server_journal() -> tuple[Inflight, str]:
    """The journal the server keeps (under the test's own XDG_STATE_HOME) and the test key's name in it."""
    settings = make_settings()
    return Inflight(FileJournal(default_directory())), owner_of(settings, hashlib.sha256(API_KEY.encode()).hexdigest())


def unknown_record(clock: list[float], *, marked: bool) -> Record:
    now = clock[0]
    return Record("r9", OWNER, "kb", "a.md", 5, "0" * 64, now, 0.0, "gone", 1, "x", None, marked, now + 60)
