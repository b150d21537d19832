"""knowledge_add_file's sources on Open WebUI's side: a web page Open WebUI fetches (`url`) and a file it already
holds (`file_id`). A page is fetched without indexing and added as a text document with every guarantee of
knowledge_add; an existing file is attached only when the caller can read it, and is never deleted, whatever fails."""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest

from openwebui_rag_mcp import remote
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.localfiles import FileSource
from openwebui_rag_mcp.models import FileAdded
from tests.conftest import make_settings, mock_transport, new_router
from tests.support.writes import DUPLICATE, FILE, KB, NO_PERMISSION, OTHER, Upstream, answer, full_file, upload_metadata

pytestmark = pytest.mark.anyio

PAGE_URL = "https://docs.example.com/guide/install?lang=en"
PAGE_TEXT = "Install\n\nRun the installer, then sign in.\n"
CHAT_FILE = "9e8d7c6b-5a49-4382-9716-05f4e3d2c1b0"  # a chat upload the caller owns
CHAT_TEXT = "Minutes of the meeting\n\nThe budget was approved.\n"


# What names resolve to, here: the unit suite asks no DNS server (issue 41, item 2).
NAMES = {
    "docs.example.com": ["93.184.216.34", "2606:2800:220:1::1"],
    "localhost": ["127.0.0.1", "::1"],
    "intranet.example.com": ["10.20.30.40"],
    "rebinding.example.com": ["93.184.216.34", "192.168.1.10"],  # one public address is not enough
    "metadata.example.com": ["169.254.169.254"],
    "six.example.com": ["2606:2800:220:1::1", "fd12:3456::1"],
}


class Resolver:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.delay = 0.0

    def __call__(self, host: str) -> list[str]:
        self.asked.append(host)
        if self.delay:
            time.sleep(self.delay)
        if host not in NAMES:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return NAMES[host]


@pytest.fixture(autouse=True)
def resolver(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    stub = Resolver()
    monkeypatch.setattr(remote, "resolve_host", stub)
    return stub


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
        return await remote.add_file(app, KB, source, title=title)


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
    # The stored source keeps no query string or fragment: they may carry a token (issue 41, item 2).
    assert (metadata["source"], metadata["title"]) == ("https://docs.example.com/guide/install", added.title)
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


@pytest.mark.parametrize(
    ("release", "allow_private", "fetched"),
    [
        ("0.9.4", "false", False),  # follows a redirect to an internal address (GHSA-rh5x-h6pp-cjj6)
        ("0.8.12", "false", False),
        ("0.9.5", "false", True),  # re-checks every redirect target
        ("0.12.4", "false", True),
        ("0.8.12", "true", True),  # the operator accepted internal targets anyway
    ],
)
async def test_a_release_that_follows_redirects_unchecked_fetches_no_page(
    upstream: Upstream, release: str, allow_private: str, fetched: bool
) -> None:
    upstream.version.respond(json={"version": release})
    if fetched:
        await add(upstream, page(), OPENWEBUI_URL_ALLOW_PRIVATE=allow_private)
        assert upstream.fetch.call_count == 1  # type: ignore[attr-defined]
        return
    failure = await refused(upstream, page(), OPENWEBUI_URL_ALLOW_PRIVATE=allow_private)
    assert (failure.code, failure.stage, failure.outcome) == ("unsupported", "fetch", "not_applied")
    assert "redirect" in failure.message
    assert "OPENWEBUI_URL_ALLOW_PRIVATE" in failure.message
    assert upstream.requests() == []


async def test_no_page_is_fetched_for_a_base_the_key_may_only_read(upstream: Upstream) -> None:
    upstream.write_access = False
    failure = await refused(upstream, page())
    assert (failure.code, failure.stage, failure.outcome) == ("forbidden", "fetch", "not_applied")
    assert upstream.fetch.call_count == 0  # type: ignore[attr-defined]


async def test_open_webui_refusing_the_address_is_said_with_its_switch(upstream: Upstream) -> None:
    detail = "The URL you provided is invalid. Please double-check and try again."
    upstream.fetch.respond(400, json={"detail": detail})  # type: ignore[attr-defined]
    failure = await refused(upstream, page("http://127.0.0.1:8081/page.html"), OPENWEBUI_URL_ALLOW_PRIVATE="true")
    assert (failure.stage, failure.outcome) == ("fetch", "not_applied")
    assert detail in failure.message
    assert "ENABLE_RAG_LOCAL_WEB_FETCH" in failure.message
    assert upstream.upload.call_count == 0


# -- issue 41, item 2: no address that is or resolves to a private one is handed to Open WebUI's fetch ------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8081/page.html",
        "http://127.1/",  # inet_aton's short forms
        "http://2130706433/",
        "http://0x7f.0.0.1/",
        "http://0177.0.0.1/",
        "http://[::1]/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://10.1.2.3/",
        "http://172.16.5.4/",
        "http://192.168.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.7/",  # CGNAT
        "http://[fd00::1]/",  # unique-local
        "http://[fe80::1]/",  # link-local
        "http://[fec0::1]/",  # site-local
        "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
        "http://[::ffff:a00:1]/",
        "http://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
        "http://[2002:a9fe:a9fe::1]/",  # 6to4 of 169.254.169.254
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo of 127.0.0.1
        "http://224.0.0.251/",  # multicast
        "http://[ff02::1]/",
        "http://240.0.0.1/",  # reserved
        "http://255.255.255.255/",
        "http://192.0.2.1/",  # documentation
        "http://localhost:8080/admin",
        "http://LOCALHOST./",
        "https://intranet.example.com/wiki",
        "https://rebinding.example.com/",
        "https://metadata.example.com/latest",
        "https://six.example.com/",
    ],
)
async def test_a_private_address_is_refused_before_anything_is_sent(upstream: Upstream, url: str) -> None:
    failure = await refused(upstream, page(url))
    assert (failure.code, failure.outcome, failure.request_sent) == ("forbidden", "not_applied", False)
    assert "OPENWEBUI_URL_ALLOW_PRIVATE" in failure.message
    assert upstream.requests() == []


@pytest.mark.parametrize("host", ["straße.example.com", "docs。example。com", "ｌｏｃａｌｈｏｓｔ"])
async def test_a_host_not_written_in_ascii_is_refused_unresolved(
    upstream: Upstream, resolver: Resolver, host: str
) -> None:
    """International names are mapped to ASCII differently by different libraries (IDNA 2003 here, often 2008 in
    Open WebUI's loader), so the name checked here could be another than the one fetched: only the xn-- form is."""
    failure = await refused(upstream, page(f"https://{host}/"))
    assert (failure.code, failure.outcome, failure.request_sent) == ("forbidden", "not_applied", False)
    assert "xn--" in failure.message
    assert resolver.asked == []
    assert upstream.requests() == []


async def test_a_name_that_does_not_resolve_or_not_in_time_is_refused(upstream: Upstream, resolver: Resolver) -> None:
    unknown = await refused(upstream, page("https://nowhere.example.org/"))
    resolver.delay = 0.5
    with pytest.raises(ToolFailure) as caught:
        await remote.check_public(PAGE_URL, False, resolve_within=0.05)
    slow = caught.value
    for failure in (unknown, slow):
        assert (failure.code, failure.outcome) == ("forbidden", "not_applied")
        assert "resolve" in failure.message
    assert upstream.requests() == []


async def test_name_lookups_have_their_own_few_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slow DNS holds at most remote.LOOKUPS' threads, never anyio's shared ones (local reads, citations)."""
    shared = anyio.to_thread.current_default_thread_limiter()
    busy, peak, shared_seen, lock = 0, 0, set(), threading.Lock()

    def slow(host: str) -> list[str]:
        nonlocal busy, peak
        with lock:
            busy += 1
            peak = max(peak, busy)
            shared_seen.add(shared.borrowed_tokens)
        time.sleep(0.05)
        with lock:
            busy -= 1
        return NAMES["docs.example.com"]

    monkeypatch.setattr(remote, "resolve_host", slow)
    async with anyio.create_task_group() as group:
        for _ in range(3 * int(remote.LOOKUPS.total_tokens)):
            group.start_soon(functools.partial(remote.check_public, PAGE_URL, False, resolve_within=60))
    assert 1 <= peak <= remote.LOOKUPS.total_tokens
    assert shared_seen == {0}


async def test_a_public_name_is_fetched_and_every_address_was_checked(upstream: Upstream, resolver: Resolver) -> None:
    await add(upstream, page())
    assert resolver.asked == ["docs.example.com"]
    assert upstream.fetch.call_count == 1  # type: ignore[attr-defined]


async def test_the_operator_may_allow_private_addresses(upstream: Upstream, resolver: Resolver) -> None:
    added = await add(upstream, page("http://127.0.0.1:8081/page.html"), OPENWEBUI_URL_ALLOW_PRIVATE="true")
    assert added.file_id == FILE
    assert resolver.asked == []


async def test_url_adds_can_be_switched_off(upstream: Upstream, resolver: Resolver) -> None:
    failure = await refused(upstream, page(), OPENWEBUI_ALLOW_URL_ADDS="false")
    assert (failure.code, failure.outcome, failure.request_sent) == ("forbidden", "not_applied", False)
    assert "OPENWEBUI_ALLOW_URL_ADDS" in failure.message
    assert upstream.requests() == []
    assert resolver.asked == []
    attached = await add(upstream, existing(), OPENWEBUI_ALLOW_URL_ADDS="false")  # other sources are unaffected
    assert attached.file_id == CHAT_FILE


def test_url_adds_are_off_by_default_only_in_service_mode() -> None:
    service = {"OPENWEBUI_MCP_TRANSPORT": "streamable-http", "OPENWEBUI_MCP_AUTH": "service"}
    tokens = {"OPENWEBUI_MCP_TOKENS": "a-long-service-token-0123456789"}
    assert make_settings().allow_url_adds is True
    assert make_settings(OPENWEBUI_MCP_TRANSPORT="streamable-http").allow_url_adds is True
    assert make_settings(**service, **tokens).allow_url_adds is False
    assert make_settings(**service, **tokens, OPENWEBUI_ALLOW_URL_ADDS="true").allow_url_adds is True
    assert make_settings().url_allow_private is False


@pytest.mark.parametrize(
    ("url", "metadata", "stored"),
    [
        ("https://docs.example.com/a?token=s3cret#part", None, "https://docs.example.com/a"),
        ("https://docs.example.com/a#frag", None, "https://docs.example.com/a"),
        ("https://docs.example.com/a?token=s3cret", {"source": "intranet wiki"}, "intranet wiki"),
    ],
)
async def test_the_stored_source_drops_the_query_string_unless_given(
    upstream: Upstream, url: str, metadata: dict[str, str] | None, stored: str
) -> None:
    async with app_for(upstream) as app:
        await remote.add_file(app, KB, page(url), metadata=metadata)
    sent = upload_metadata(upstream.upload.calls.last.request)
    assert sent["source"] == stored
    assert "s3cret" not in json.dumps(sent)
    fetched = json.loads(upstream.fetch.calls.last.request.content)  # type: ignore[attr-defined]
    assert fetched == {"url": url}  # Open WebUI fetches the address as given


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
