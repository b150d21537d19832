"""knowledge_add_file's sources on Open WebUI's side: a web page Open WebUI fetches (`url`) and a file it already
holds (`file_id`). A page is fetched without indexing and added as a text document with every guarantee of
knowledge_add; an existing file is attached only when the caller can read it, and is never deleted, whatever fails."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from openwebui_rag_mcp import remote
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.localfiles import FileSource
from openwebui_rag_mcp.models import FileAdded
from openwebui_rag_mcp.steps import no_progress
from tests.conftest import make_settings, mock_transport, new_router
from tests.support.writes import DUPLICATE, FILE, KB, NO_PERMISSION, OTHER, Upstream, answer, full_file, upload_metadata

pytestmark = pytest.mark.anyio

PAGE_URL = "https://docs.example.com/guide/install?lang=en"
PAGE_TEXT = "Install\n\nRun the installer, then sign in.\n"
CHAT_FILE = "9e8d7c6b-5a49-4382-9716-05f4e3d2c1b0"  # a chat upload the caller owns
CHAT_TEXT = "Minutes of the meeting\n\nThe budget was approved.\n"


@pytest.fixture
def upstream() -> Upstream:
    up = Upstream(new_router())
    up.fetch = up.router.post("/api/v1/retrieval/process/web").respond(  # type: ignore[attr-defined]
        json={"status": True, "content": PAGE_TEXT}
    )
    chat = {**full_file(CHAT_FILE, CHAT_TEXT, "minutes.pdf")}
    chat["meta"] = {**chat["meta"], "size": 48_213}
    up.chat = up.router.get(f"/api/v1/files/{CHAT_FILE}").respond(json=chat)  # type: ignore[attr-defined]
    up.router.get(f"/api/v1/files/{CHAT_FILE}/process/status").respond(json={"status": "completed"})
    up.router.delete(f"/api/v1/files/{CHAT_FILE}").respond(json=True)
    return up


@asynccontextmanager
async def app_for(upstream: Upstream, **env: str) -> AsyncIterator[App]:
    settings = make_settings(**env)
    client = OpenWebUIClient(settings, transport=mock_transport(upstream.router))
    try:
        yield App(settings=settings, client=client)
    finally:
        await client.aclose()


def page(url: str = PAGE_URL) -> FileSource:
    return FileSource(path=None, content_base64=None, filename=None, url=url)


def existing(file_id: str = CHAT_FILE) -> FileSource:
    return FileSource(path=None, content_base64=None, filename=None, file_id=file_id)


async def add(upstream: Upstream, source: FileSource, title: str | None = None, **env: str) -> FileAdded:
    async with app_for(upstream, **env) as app:
        return await remote.add_file(app, KB, source, title, None, no_progress)


async def refused(upstream: Upstream, source: FileSource, title: str | None = None, **env: str) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        await add(upstream, source, title, **env)
    return caught.value


# -- a web page ---------------------------------------------------------------------------------------------------


async def test_a_page_is_fetched_without_indexing_and_added_as_a_document(upstream: Upstream) -> None:
    added = await add(upstream, page())
    fetch = upstream.fetch.calls.last.request  # type: ignore[attr-defined]
    assert (fetch.url.params["process"], json.loads(fetch.content)) == ("false", {"url": PAGE_URL})
    assert (added.file_id, added.title, added.extracted_chars) == (
        FILE,
        "docs.example.com/guide/install",
        len(PAGE_TEXT),
    )
    assert added.filename == "docs_example_com_guide_install.md"
    metadata = upload_metadata(upstream.upload.calls.last.request)
    assert (metadata["source"], metadata["title"]) == (PAGE_URL, added.title)
    assert upstream.file_text == PAGE_TEXT
    assert upstream.requests().index("POST /api/v1/retrieval/process/web") < upstream.requests().index(
        "POST /api/v1/files/"
    )
    assert upstream.add.call_count == 1


async def test_a_title_given_names_the_page(upstream: Upstream) -> None:
    added = await add(upstream, page(), "Installation guide")
    assert (added.title, added.filename) == ("Installation guide", "Installation_guide.md")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/file", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("https://user:secret@example.com/", "user name or password"),
        ("https://example.com/a b", "spaces"),
        ("http://127.0.0.1\\@1.1.1.1/", "backslashes"),
        ("https:///no-host", "with a host"),
        ("https://example.com/" + "a" * 2_100, "the limit is 2048"),
    ],
)
async def test_a_bad_url_is_refused_before_any_request(upstream: Upstream, url: str, says: str) -> None:
    failure = await refused(upstream, page(url))
    assert failure.code == "invalid_argument"
    assert says in failure.message
    assert "secret" not in failure.message
    assert upstream.requests() == []


async def test_a_release_that_would_index_the_page_elsewhere_is_refused(upstream: Upstream) -> None:
    upstream.version.respond(json={"version": "0.6.41"})
    failure = await refused(upstream, page())
    assert (failure.code, failure.stage, failure.outcome) == ("unsupported", "fetch", "not_applied")
    assert "0.6.42" in failure.message
    assert upstream.fetch.call_count == 0  # type: ignore[attr-defined]
    assert upstream.requests() == []


async def test_no_page_is_fetched_for_a_base_the_key_may_only_read(upstream: Upstream) -> None:
    upstream.write_access = False
    failure = await refused(upstream, page())
    assert (failure.code, failure.stage, failure.outcome) == ("forbidden", "fetch", "not_applied")
    assert upstream.fetch.call_count == 0  # type: ignore[attr-defined]


async def test_open_webui_refusing_the_address_is_said_with_its_switch(upstream: Upstream) -> None:
    detail = "The URL you provided is invalid. Please double-check and try again."
    upstream.fetch.respond(400, json={"detail": detail})  # type: ignore[attr-defined]
    failure = await refused(upstream, page("http://127.0.0.1:8081/page.html"))
    assert (failure.stage, failure.outcome) == ("fetch", "not_applied")
    assert detail in failure.message
    assert "ENABLE_RAG_LOCAL_WEB_FETCH" in failure.message
    assert upstream.upload.call_count == 0


async def test_a_page_without_text_uploads_nothing(upstream: Upstream) -> None:
    upstream.fetch.respond(json={"status": True, "content": "  \n "})  # type: ignore[attr-defined]
    failure = await refused(upstream, page())
    assert (failure.code, failure.stage, failure.outcome) == ("upstream_error", "fetch", "not_applied")
    assert upstream.upload.call_count == 0


async def test_a_page_already_in_the_base_is_a_duplicate_and_leaves_nothing(upstream: Upstream) -> None:
    upstream.hold(OTHER + "x", PAGE_TEXT)
    upstream.add.side_effect = answer(400, json={"detail": DUPLICATE})
    failure = await refused(upstream, page())
    assert (failure.code, failure.stage, failure.outcome) == ("duplicate_content", "attach", "not_applied")
    assert upstream.delete.call_count == 1  # the new upload is removed again


# -- a file Open WebUI already holds ------------------------------------------------------------------------------


async def test_an_existing_file_is_attached_as_it_is(upstream: Upstream) -> None:
    added = await add(upstream, existing())
    assert (added.file_id, added.title, added.filename, added.size) == (CHAT_FILE, "minutes.pdf", "minutes.pdf", 48_213)
    assert added.extracted_chars == len(CHAT_TEXT)
    assert json.loads(upstream.add.calls.last.request.content) == {"file_id": CHAT_FILE}
    assert upstream.upload.call_count == 0
    assert upstream.chat.call_count == 1  # type: ignore[attr-defined]  # a processed file's text is read once


async def test_a_file_already_in_the_base_is_not_attached_twice(upstream: Upstream) -> None:
    upstream.hold(CHAT_FILE, CHAT_TEXT)
    added = await add(upstream, existing())
    assert (added.file_id, added.status) == (CHAT_FILE, "completed")
    assert upstream.add.call_count == 0


async def test_a_file_the_key_cannot_read_is_never_attached(upstream: Upstream) -> None:
    """Open WebUI's own file/add does not check on every release who may read the file."""
    upstream.chat.respond(403, json={"detail": NO_PERMISSION})  # type: ignore[attr-defined]
    failure = await refused(upstream, existing())
    assert (failure.code, failure.stage, failure.outcome) == ("forbidden", "attach", "not_applied")
    assert upstream.add.call_count == 0


async def test_under_an_allowlist_only_a_file_of_an_allowed_base(upstream: Upstream) -> None:
    failure = await refused(upstream, existing(), OPENWEBUI_KNOWLEDGE_IDS=KB)
    assert failure.code == "not_found"
    assert "OPENWEBUI_KNOWLEDGE_IDS" in failure.message
    assert upstream.add.call_count == 0


async def test_a_failed_file_is_said_and_kept(upstream: Upstream) -> None:
    failed = full_file(CHAT_FILE, "", "minutes.pdf")
    failed["data"] = {"status": "failed", "error": "no loader for this type"}
    upstream.chat.respond(json=failed)  # type: ignore[attr-defined]
    upstream.router.get(f"/api/v1/files/{CHAT_FILE}/process/status").respond(json={"status": "failed"})
    failure = await refused(upstream, existing())
    assert (failure.stage, failure.outcome, failure.file_id) == ("process", "not_applied", CHAT_FILE)
    assert "no loader for this type" in failure.message
    assert [r for r in upstream.requests() if r.startswith("DELETE")] == []
    assert upstream.add.call_count == 0


async def test_a_duplicate_is_named_and_the_file_kept(upstream: Upstream) -> None:
    upstream.hold(OTHER + "y", CHAT_TEXT)
    upstream.add.side_effect = answer(400, json={"detail": DUPLICATE})
    failure = await refused(upstream, existing())
    assert (failure.code, failure.stage, failure.outcome) == ("duplicate_content", "attach", "not_applied")
    assert failure.existing_file_id == OTHER + "y"
    assert [r for r in upstream.requests() if r.startswith("DELETE")] == []
    # Told before file/add: Open WebUI marks a file it refuses as a duplicate `failed`, in every base holding it.
    assert upstream.add.call_count == 0


async def test_a_base_whose_documents_cannot_be_read_gets_nothing_attached(upstream: Upstream) -> None:
    upstream.files.side_effect = answer(500, json={"detail": "boom"})
    failure = await refused(upstream, existing())
    assert (failure.stage, failure.outcome) == ("attach", "not_applied")
    assert upstream.add.call_count == 0


async def test_a_refusal_inside_processing_says_the_file_may_be_marked_failed(upstream: Upstream) -> None:
    upstream.add.side_effect = answer(400, json={"detail": "400: Error processing file"})
    failure = await refused(upstream, existing())
    assert (failure.stage, failure.outcome) == ("attach", "partial_or_unknown")
    assert "marked the file `failed`" in failure.message
    assert [r for r in upstream.requests() if r.startswith("DELETE")] == []


async def test_an_attach_without_answer_that_open_webui_ran_is_added(upstream: Upstream) -> None:
    """No answer came, but Open WebUI ran the attach: the base lists the file, so it was added (looked for under the
    base's lock, which is not given back while the attach may still run)."""

    def lost(request: httpx.Request) -> httpx.Response:
        upstream.members.append(full_file(CHAT_FILE, CHAT_TEXT, "minutes.pdf"))
        raise httpx.ReadTimeout("no answer", request=request)

    upstream.add.side_effect = lost
    added = await add(upstream, existing())
    assert added.file_id == CHAT_FILE
    assert upstream.add.call_count == 1
    assert [r for r in upstream.requests() if r.startswith("DELETE")] == []


async def test_an_attach_without_answer_that_never_shows_says_so_and_keeps_the_file(upstream: Upstream) -> None:
    """Looked for OPENWEBUI_TIMEOUT more, never listed: the error says the base does not list it; the file is not
    the server's to delete."""
    upstream.add.side_effect = httpx.ReadTimeout("no answer")
    failure = await refused(upstream, existing(), OPENWEBUI_TIMEOUT="1")
    assert (failure.code, failure.stage, failure.outcome) == ("timeout", "attach", "partial_or_unknown")
    assert "does not list the file" in failure.message
    assert len([r for r in upstream.requests() if r == f"GET /api/v1/files/{CHAT_FILE}"]) > 1  # looked again
    assert [r for r in upstream.requests() if r.startswith("DELETE")] == []


@pytest.mark.parametrize(
    ("source", "title", "says"),
    [
        (FileSource(None, None, None), None, "exactly one of"),
        (FileSource("a.md", None, None, url=PAGE_URL), None, "exactly one of"),
        (FileSource(None, None, None, url=PAGE_URL, file_id=CHAT_FILE), None, "exactly one of"),
        (FileSource(None, None, "x.pdf", file_id=CHAT_FILE), None, "as it is"),
        (FileSource(None, None, None, file_id=CHAT_FILE), "A title", "as it is"),
        (FileSource(None, None, "x.pdf", url=PAGE_URL), None, "filename goes with content_base64"),
        (FileSource(None, None, None, file_id="../etc"), None, "not a valid Open WebUI id"),
    ],
)
async def test_sources_are_checked_before_any_request(
    upstream: Upstream, source: FileSource, title: str | None, says: str
) -> None:
    failure = await refused(upstream, source, title)
    assert failure.code == "invalid_argument"
    assert says in failure.message
    assert upstream.requests() == []
