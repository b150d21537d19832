"""Resources and completions through the MCP protocol (in-memory `mcp.Client`), and the server's lifespan.

`resources/list` names every readable base as `openwebui://knowledge/{id}` (allowlist applied, paged with opaque
cursors), so clients that only offer listed resources to a person (Claude Desktop among them) show the bases; the
templates keep serving bases and documents by id; `completion/complete` offers ids for the templates' arguments.
Open WebUI is the stateful fake of tests/faultstub.py behind respx.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import logging
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest
from mcp import Client, MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, PromptReference, Resource, ResourceTemplateReference

from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.server import create_server
from openwebui_rag_mcp.server.resources import COMPLETIONS_MAX, RESOURCES_PAGE
from tests.conftest import API_KEY, assert_no_key, make_settings, mock_transport, new_router
from tests.faultstub import BASE_URL, FILE, FILE_THIRD, KB, KB_OTHER, KB_THIRD, Base, Document, Lane, answer
from tests.support.servers import LaneServers

pytestmark = pytest.mark.anyio

KNOWLEDGE = ResourceTemplateReference(type="ref/resource", uri="openwebui://knowledge/{knowledge_id}")
DOCUMENT = ResourceTemplateReference(type="ref/resource", uri="openwebui://file/{file_id}")
ALLOW = {"OPENWEBUI_KNOWLEDGE_IDS": f"{KB},{KB_THIRD}"}
MISSING = "ffffffff-0000-4000-8000-000000000000"  # a base or file no Open WebUI has


SERVERS = LaneServers()


def connect(lane: Lane, env: dict[str, str] | None = None) -> AbstractAsyncContextManager[Client]:
    return SERVERS.connect(lane, env)


def many_bases(count: int) -> Lane:
    """The fake's three bases plus `count` more, with names in three scripts and some names repeated."""
    lane = Lane()
    names = ["Архив", "归档", "Archive", "Notes", "заметки"]
    for index in range(count):
        knowledge_id = f"{index:08x}-aaaa-4bbb-8ccc-dddddddddddd"
        lane.model.add_base(Base(knowledge_id, f"{names[index % len(names)]} {index // 10}", f"base {index}"))
    return lane


async def every_page(client: Client) -> list[list[Resource]]:
    pages = []
    cursor: str | None = None
    while True:
        listed = await client.list_resources(cursor=cursor)
        pages.append(listed.resources)
        cursor = listed.next_cursor
        if cursor is None:
            return pages
        assert len(pages) < 20, "the cursors never end"


# -- resources/list -----------------------------------------------------------------------------------------------


async def test_resources_list_the_readable_bases() -> None:
    lane = Lane()
    async with connect(lane) as client:
        listed = await client.list_resources()
    assert listed.next_cursor is None
    # By name, case-insensitively: what a person scans.
    assert [(r.uri, r.name, r.description, r.mime_type) for r in listed.resources] == [
        (f"openwebui://knowledge/{KB_OTHER}", "Ops", "Runbooks", "application/json"),
        (f"openwebui://knowledge/{KB_THIRD}", "Reports", "Quarterly", "application/json"),
        (f"openwebui://knowledge/{KB}", "Фрукты", "Всё о фруктах", "application/json"),
    ]
    assert lane.requests() == ["GET /api/v1/knowledge/"]


async def test_a_long_description_is_cut_and_a_missing_one_left_out() -> None:
    lane = Lane()
    lane.model.bases[KB].description = "Всё о фруктах. " * 40
    lane.model.bases[KB_OTHER].description = ""
    async with connect(lane) as client:
        listed = {r.uri.rsplit("/", 1)[1]: r for r in (await client.list_resources()).resources}
    description = listed[KB].description or ""
    assert len(description) <= 100
    assert description.startswith("Всё о фруктах. Всё")
    assert description.endswith("...")
    assert listed[KB_OTHER].description is None


async def test_resources_list_applies_the_allowlist() -> None:
    lane = Lane()
    async with connect(lane, ALLOW) as client:
        listed = await client.list_resources()
    assert {r.uri for r in listed.resources} == {f"openwebui://knowledge/{KB}", f"openwebui://knowledge/{KB_THIRD}"}


async def test_listed_bases_are_readable_through_the_template() -> None:
    lane = Lane()
    async with connect(lane, ALLOW) as client:
        templates = {t.name: t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        listed = (await client.list_resources()).resources
        read = {r.uri: await client.read_resource(r.uri) for r in listed}
        document = await client.read_resource(f"openwebui://file/{FILE_THIRD}")
    assert templates == {"knowledge_base": KNOWLEDGE.uri, "document": DOCUMENT.uri}
    assert len(listed) == 2
    for resource in listed:
        contents = read[resource.uri].contents[0]
        assert contents.mime_type == resource.mime_type
        body = json.loads(getattr(contents, "text", ""))
        assert resource.uri == f"openwebui://knowledge/{body['knowledge_id']}"
        assert body["name"] == resource.name
        assert body["files"]
    assert getattr(document.contents[0], "text", "").startswith("# Q1")


async def test_paging_covers_every_base_exactly_once() -> None:
    lane = many_bases(2 * RESOURCES_PAGE + 17)
    async with connect(lane) as client:
        pages = await every_page(client)
    assert [len(page) for page in pages] == [RESOURCES_PAGE, RESOURCES_PAGE, 20]
    uris = [r.uri for page in pages for r in page]
    assert sorted(uris) == sorted(f"openwebui://knowledge/{i}" for i in lane.model.bases)
    names = [r.name.casefold() for page in pages for r in page]
    assert names == sorted(names)


async def test_a_base_added_or_removed_between_pages_moves_no_other() -> None:
    lane = many_bases(2 * RESOURCES_PAGE)
    async with connect(lane) as client:
        first = await client.list_resources()
        before = set(lane.model.bases)
        # Sorted before everything already listed, and one listed base gone: an offset would now skip or repeat.
        lane.model.add_base(Base("00000000-0000-4000-8000-00000000aaaa", "000 new", "added while paging"))
        gone = first.resources[0].uri.rsplit("/", 1)[1]
        del lane.model.bases[gone]
        cursor = first.next_cursor
        rest: list[Resource] = []
        while cursor is not None:
            listed = await client.list_resources(cursor=cursor)
            rest.extend(listed.resources)
            cursor = listed.next_cursor
    uris = [r.uri for r in [*first.resources, *rest]]
    assert len(uris) == len(set(uris))
    assert {uri.rsplit("/", 1)[1] for uri in uris} == before


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "abc",
        "not base64 at all!",
        base64.urlsafe_b64encode(b'{"offset": 50}').decode(),
        base64.urlsafe_b64encode(b'["name", 3]').decode(),
        base64.urlsafe_b64encode("\u00ff".encode("latin-1")).decode(),
        "Ф",
    ],
)
async def test_an_invalid_cursor_is_invalid_params(cursor: str) -> None:
    lane = Lane()
    async with connect(lane) as client:
        with pytest.raises(MCPError) as raised:
            await client.list_resources(cursor=cursor)
        still = await client.list_resources()
    assert raised.value.error.code == INVALID_PARAMS
    assert "cursor" in raised.value.error.message
    assert len(still.resources) == 3


@pytest.mark.parametrize(
    ("status", "code"), [(500, "upstream_error"), (401, "auth"), (200, "unexpected_response")]
)  # fmt: skip
async def test_an_upstream_failure_is_an_error_not_an_empty_list(status: int, code: str) -> None:
    lane = Lane()
    body: object = {"detail": f"boom {API_KEY}"} if status != 200 else {"items": None}
    lane.fail(answer(status, body), method="GET", path="/api/v1/knowledge/")
    async with connect(lane) as client:
        with pytest.raises(MCPError) as raised:
            await client.list_resources()
        lane.clear()
        recovered = await client.list_resources()
    message = raised.value.error.message
    assert message.startswith(f"could not list the knowledge bases: {code}: "), message
    assert_no_key(message)
    assert len(recovered.resources) == 3


async def test_without_the_base_template_no_base_is_listed() -> None:
    lane = Lane()
    async with connect(lane, {"OPENWEBUI_DISABLED_TOOLS": "knowledge_files"}) as client:
        listed = await client.list_resources()
        templates = {t.name for t in (await client.list_resource_templates()).resource_templates}
        offered = await client.complete(KNOWLEDGE, {"name": "knowledge_id", "value": ""})
    assert listed.resources == []
    assert templates == {"document"}
    assert offered.completion.values == []
    assert lane.requests() == []


async def test_read_only_mode_lists_the_bases_too() -> None:
    lane = Lane()
    async with connect(lane, {"OPENWEBUI_READ_ONLY": "true"}) as client:
        listed = await client.list_resources()
    assert len(listed.resources) == 3


async def test_resources_and_completions_over_the_legacy_handshake() -> None:
    """Clients on `initialize` (2025-11-25: MCP Inspector, Claude Desktop) see the same, and the capability."""
    lane = Lane()
    server = create_server(make_settings(BASE_URL, OPENWEBUI_KNOWLEDGE_IDS=KB), transport=lane.transport())
    async with Client(server, mode="legacy") as client:
        capabilities = client.server_capabilities
        listed = await client.list_resources()
        offered = await client.complete(DOCUMENT, {"name": "file_id", "value": "a"}, {"knowledge_id": KB})
        with pytest.raises(MCPError) as raised:
            await client.list_resources(cursor="zz")
    assert capabilities.completions is not None
    assert [(r.uri, r.name) for r in listed.resources] == [(f"openwebui://knowledge/{KB}", "Фрукты")]
    assert offered.completion.values == [FILE]
    assert raised.value.error.code == INVALID_PARAMS


# -- completion/complete ------------------------------------------------------------------------------------------


async def complete(client: Client, ref: Any, name: str, value: str, **context: str) -> list[str]:
    result = await client.complete(ref, {"name": name, "value": value}, context or None)
    values = result.completion.values
    assert result.completion.total == len(values)
    assert result.completion.has_more is False
    return values


async def test_knowledge_id_completes_by_id_or_name_prefix() -> None:
    lane = Lane()
    async with connect(lane) as client:
        capabilities = client.server_capabilities
        every = await complete(client, KNOWLEDGE, "knowledge_id", "")
        by_id = await complete(client, KNOWLEDGE, "knowledge_id", KB[:4])
        by_name = await complete(client, KNOWLEDGE, "knowledge_id", "фРу")
        by_name_latin = await complete(client, KNOWLEDGE, "knowledge_id", "rep")
        nothing = await complete(client, KNOWLEDGE, "knowledge_id", "zzz")
    assert capabilities.completions is not None
    assert capabilities.resources is not None
    assert sorted(every) == sorted([KB, KB_OTHER, KB_THIRD])
    assert by_id == [KB]
    assert by_name == [KB]
    assert by_name_latin == [KB_THIRD]
    assert nothing == []


async def test_knowledge_id_completion_applies_the_allowlist() -> None:
    async with connect(Lane(), ALLOW) as client:
        every = await complete(client, KNOWLEDGE, "knowledge_id", "")
        other = await complete(client, KNOWLEDGE, "knowledge_id", "Ops")
    assert sorted(every) == sorted([KB, KB_THIRD])
    assert other == []


async def test_completions_stop_at_a_hundred() -> None:
    lane = many_bases(COMPLETIONS_MAX + 20)
    async with connect(lane) as client:
        result = await client.complete(KNOWLEDGE, {"name": "knowledge_id", "value": ""})
        archives = await complete(client, KNOWLEDGE, "knowledge_id", "arch")
    assert len(result.completion.values) == COMPLETIONS_MAX
    assert result.completion.total == COMPLETIONS_MAX + 23
    assert result.completion.has_more is True
    assert len(archives) == 24  # "Archive n": every fifth of the 120


async def test_file_id_completes_from_the_base_in_the_context() -> None:
    lane = Lane()
    lane.model.add_base(Base("5e5e5e5e-0000-4000-8000-000000000000", "Many", "docs"))
    for index in range(3):
        document = Document(f"{index:08x}-1111-4222-8333-444455556666", f"отчёт-{index}.md", f"# {index}")
        lane.model.add_base(lane.model.bases["5e5e5e5e-0000-4000-8000-000000000000"], document)
    async with connect(lane) as client:
        in_kb = await complete(client, DOCUMENT, "file_id", "", knowledge_id=KB)
        by_filename = await complete(client, DOCUMENT, "file_id", "APP", knowledge_id=KB)
        by_id = await complete(client, DOCUMENT, "file_id", FILE[:6], knowledge_id=KB)
        reports = await complete(
            client, DOCUMENT, "file_id", "отч", knowledge_id="5e5e5e5e-0000-4000-8000-000000000000"
        )
        no_base = await complete(client, DOCUMENT, "file_id", "")
        missing = await complete(client, DOCUMENT, "file_id", "", knowledge_id="ffffffff-0000-4000-8000-000000000000")
        bad = await complete(client, DOCUMENT, "file_id", "", knowledge_id="../api")
    assert in_kb == [FILE]
    assert by_filename == [FILE]
    assert by_id == [FILE]
    assert len(reports) == 3
    assert no_base == []
    assert missing == []
    assert bad == []


async def test_file_id_completion_applies_the_allowlist() -> None:
    lane = Lane()
    async with connect(lane, ALLOW) as client:
        outside = await complete(client, DOCUMENT, "file_id", "", knowledge_id=KB_OTHER)
        inside = await complete(client, DOCUMENT, "file_id", "", knowledge_id=KB_THIRD)
    assert outside == []
    assert inside == [FILE_THIRD]
    assert f"GET /api/v1/knowledge/{KB_OTHER}/files" not in lane.requests()


async def test_other_references_complete_nothing() -> None:
    lane = Lane()
    async with connect(lane) as client:
        prompt = await complete(client, PromptReference(type="ref/prompt", name="knowledge_qa"), "question", "a")
        unknown = await complete(client, ResourceTemplateReference(type="ref/resource", uri="x://{y}"), "y", "")
        wrong_argument = await complete(client, KNOWLEDGE, "file_id", "")
    assert prompt == unknown == wrong_argument == []
    assert lane.requests() == []


async def test_an_upstream_failure_in_completion_is_an_error() -> None:
    lane = Lane()
    lane.fail(answer(500, {"detail": "boom"}), method="GET")
    async with connect(lane) as client:
        with pytest.raises(MCPError) as listing:
            await client.complete(KNOWLEDGE, {"name": "knowledge_id", "value": ""})
        with pytest.raises(MCPError) as files:
            await client.complete(DOCUMENT, {"name": "file_id", "value": ""}, {"knowledge_id": KB})
        lane.clear()
        recovered = await complete(client, KNOWLEDGE, "knowledge_id", "")
    assert listing.value.error.message.startswith("could not list the knowledge bases: upstream_error: ")
    assert files.value.error.message.startswith(f"could not list the documents of {KB}: upstream_error: ")
    assert len(recovered) == 3


# -- the lifespan: the warm-up task -------------------------------------------------------------------------------


class Broken(httpx.AsyncBaseTransport):
    """A transport that fails with an error no layer expects, or never answers; it records what happened."""

    def __init__(self, *, hang: bool) -> None:
        self.hang = hang
        self.events: list[str] = []
        self.asked = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.events.append("request")
        self.asked.set()
        try:
            if self.hang:
                await asyncio.Event().wait()
            raise RuntimeError("a bug below the client")
        finally:
            self.events.append("request ended")

    async def aclose(self) -> None:
        self.events.append("closed")


@pytest.mark.parametrize("where", ["transport", "warm_up"])
async def test_a_failed_warm_up_is_logged_not_left_unretrieved(
    where: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the warm-up raises (a bug under the client, or in the warm-up itself) is logged once, with its
    traceback, and never reaches asyncio's "Task exception was never retrieved"."""
    if where == "warm_up":

        async def warm_up(self: OpenWebUIClient) -> None:
            await asyncio.sleep(0)
            raise RuntimeError("a bug in the warm-up")

        monkeypatch.setattr(OpenWebUIClient, "warm_up", warm_up)
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    transport = Broken(hang=False)
    try:
        with caplog.at_level(logging.WARNING, logger="openwebui_rag_mcp"):
            async with Client(create_server(make_settings(), transport=transport), raise_exceptions=True):
                for _ in range(100):
                    await asyncio.sleep(0)
            gc.collect()
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert unhandled == []
    logged = [r for r in caplog.records if r.name.startswith("openwebui_rag_mcp") and r.exc_info is not None]
    assert len(logged) == 1
    assert "retry on the next call" in logged[0].getMessage()
    assert isinstance(logged[0].exc_info and logged[0].exc_info[1], RuntimeError)


async def test_shutdown_waits_for_the_cancelled_warm_up_before_closing_the_client() -> None:
    transport = Broken(hang=True)
    async with Client(create_server(make_settings(), transport=transport), raise_exceptions=True):
        await transport.asked.wait()
    assert transport.events == ["request", "request ended", "closed"]


@pytest.mark.parametrize("release", ["0.6.5", "0.12.4"])
async def test_a_base_is_read_once_where_its_answer_nests_its_documents(release: str) -> None:
    """Before 0.6.42 the base's own answer holds its documents: the resource reads it once, not once for the
    documents and again for the description."""
    router = new_router()
    router.get("/api/version").respond(json={"version": release})
    document = {"id": FILE, "filename": "apples.md", "meta": {"name": "Apples"}}
    described = {"id": KB, "name": "Fruit", "description": "what we know of fruit"}
    base = router.get(f"/api/v1/knowledge/{KB}").respond(
        json={**described, "files": [document]} if release == "0.6.5" else {**described, "files": None}
    )
    router.get(f"/api/v1/knowledge/{KB}/files").respond(json={"items": [document], "total": 1})
    server = create_server(make_settings(BASE_URL), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        read = await client.read_resource(f"openwebui://knowledge/{KB}")
    body = json.loads(getattr(read.contents[0], "text", ""))
    assert (body["name"], body["description"]) == ("Fruit", "what we know of fruit")
    assert [item["file_id"] for item in body["files"]] == [FILE]
    assert base.call_count == 1


@pytest.mark.parametrize(
    ("uri", "env"),
    [(f"openwebui://knowledge/{MISSING}", {}), (f"openwebui://file/{MISSING}", {}), ("openwebui://file/a%20b", {}),
     (f"openwebui://knowledge/{KB_OTHER}", ALLOW), (f"openwebui://knowledge/{MISSING}", ALLOW)],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_resource_that_does_not_exist_is_not_found(uri: str, env: dict[str, str], mode: str) -> None:
    """-32602 with the URI (SDK's ResourceNotFoundError: the 2026-07-28 spec's code; 2025-11-25 only recommended
    -32002), not -32603: nothing went wrong inside the server. A base outside the allowlist is answered alike."""
    lane = Lane()
    server = create_server(make_settings(BASE_URL, **env), transport=lane.transport())
    async with Client(server, mode=mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(uri)
    assert raised.value.error.code == INVALID_PARAMS, raised.value.error
    assert raised.value.error.data == {"uri": uri}
    assert raised.value.error.message.startswith(("not_found: ", "invalid_argument: "))


async def test_a_resource_that_open_webui_fails_to_read_is_an_internal_error() -> None:
    lane = Lane()
    lane.fail(answer(500, {"detail": "boom"}), method="GET", path=f"/api/v1/files/{FILE}")
    async with connect(lane) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(f"openwebui://file/{FILE}")
    assert raised.value.error.code == INTERNAL_ERROR
    assert raised.value.error.message.startswith("upstream_error: ")
