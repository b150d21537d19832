"""Defect 4 of issue 10: the release Open WebUI reports changes under a running server, or is an odd fork version.

A loopback proxy (``versionproxy.VersionProxy``) forwards everything to the real Open WebUI but answers
``GET /api/version`` with whatever the test sets. The server reads the version once, so it can end up believing in
the other API family (flat lists with nested files, or pages of 30 with a files endpoint). Whatever it believes, a
listing is either complete and correct or an ``unexpected_response`` error: never a silently short or empty success.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from tests.live.stdio import Session, stdio_session
from tests.live.versionproxy import VersionProxy

pytestmark = pytest.mark.anyio

# More bases than one page of Open WebUI's paged list (30), so a first page alone is visibly short.
MIN_BASES = 36
PAGED = (0, 6, 42)


def other_family(version: str) -> str:
    """A version of the other API family than the real ``version``."""
    return "0.6.5" if owui.version_parts(version) >= PAGED else "0.12.4"


@dataclass(frozen=True)
class Seeded:
    knowledge_id: str  # a base with documents
    file_ids: frozenset[str]


@pytest.fixture(scope="module")
def seeded(live_openwebui: Instance) -> Iterator[Seeded]:
    """A base with two documents, and enough small bases that the admin sees more than one page; the small bases
    are deleted afterwards so other tests do not pay for them."""
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    knowledge_id = owui.create_knowledge(inst, f"release-{tag}", "documents for the release-change tests")
    file_ids = set()
    for name in ("one", "two"):
        file_id = owui.upload_text(inst, f"{name}.md", f"# {name.title()}\n\nDocument {name} of {tag}.")
        owui.add_file(inst, knowledge_id, file_id)
        file_ids.add(file_id)
    filler = [
        owui.create_knowledge(inst, f"filler-{tag}-{n}", "")
        for n in range(max(0, MIN_BASES - len(owui.knowledge_ids(inst))))
    ]
    try:
        assert len(owui.knowledge_ids(inst)) >= MIN_BASES
        yield Seeded(knowledge_id, frozenset(file_ids))
    finally:
        for base in filler:
            owui.delete_knowledge(inst, base)


async def full_or_unexpected(server: Session, inst: Instance, seeded: Seeded, when: str) -> list[str]:
    """knowledge_list and knowledge_files answer completely and correctly (every page, where the result is paged),
    or fail with `unexpected_response`; which of the two each did."""
    outcomes = []
    expected_bases = owui.knowledge_ids(inst)
    is_error, body, listed = await server.listing("knowledge_list", {})
    if is_error:
        assert body["code"] == "unexpected_response", (when, body)
        outcomes.append("list: unexpected_response")
    else:
        got = [item["knowledge_id"] for item in listed]
        assert sorted(got) == sorted(expected_bases), (
            f"{when}: knowledge_list returned {len(set(got))} of {len(expected_bases)} bases as a success"
        )
        if "total" in body:
            assert body["total"] == len(expected_bases), (when, body)
        outcomes.append("list: full")

    is_error, body, files = await server.listing("knowledge_files", {"knowledge_id": seeded.knowledge_id})
    if is_error:
        assert body["code"] == "unexpected_response", (when, body)
        outcomes.append("files: unexpected_response")
    else:
        got_files = [item["file_id"] for item in files]
        assert sorted(got_files) == sorted(seeded.file_ids), (
            f"{when}: knowledge_files returned {len(got_files)} of {len(seeded.file_ids)} documents as a success"
        )
        if body.get("total") is not None:
            assert body["total"] == len(seeded.file_ids), (when, body)
        outcomes.append("files: full")
    return outcomes


async def test_release_reported_differently_after_the_server_read_it(live_openwebui: Instance, seeded: Seeded) -> None:
    """The server reads the real release, then Open WebUI reports the other family."""
    inst = live_openwebui
    with VersionProxy(inst.url) as proxy:
        async with stdio_session(inst, url=proxy.url) as server:
            first = await full_or_unexpected(server, inst, seeded, f"through the proxy reporting {inst.version}")
            assert first == ["list: full", "files: full"]  # the proxy itself changes nothing
            proxy.version = other_family(inst.version)
            await full_or_unexpected(server, inst, seeded, f"real {inst.version}, now reported as {proxy.version}")


async def test_open_webui_upgraded_under_a_running_server(live_openwebui: Instance, seeded: Seeded) -> None:
    """The server read the release of the other family (Open WebUI before the upgrade); now Open WebUI runs, and
    reports, its real release: the server's idea of the release is stale."""
    inst = live_openwebui
    with VersionProxy(inst.url) as proxy:
        proxy.version = other_family(inst.version)
        async with stdio_session(inst, url=proxy.url) as server:
            await server.call("knowledge_health", {})  # the release is read by now (at start or on first need)
            assert proxy.version_reads >= 1
            proxy.version = None  # the upgrade is done: /api/version tells the truth again
            await full_or_unexpected(server, inst, seeded, f"stale {other_family(inst.version)}, real {inst.version}")


@pytest.mark.parametrize("reported", ["v0.6.5-custom", "main"])
async def test_odd_fork_version(live_openwebui: Instance, seeded: Seeded, reported: str) -> None:
    inst = live_openwebui
    with VersionProxy(inst.url) as proxy:
        proxy.version = reported
        async with stdio_session(inst, url=proxy.url) as server:
            await full_or_unexpected(server, inst, seeded, f"real {inst.version} reported as {reported!r}")
            assert proxy.version_reads >= 1
