"""knowledge_add_file by `url` and by `file_id`, and knowledge_delete_base, against a real Open WebUI of every release
(issue 17, parts 5 to 7), with a second, non-admin user.

The session's Open WebUI keeps its production default: it refuses to fetch a local address, and the refusal must
reach the caller with the switch named and nothing left behind. The fetch itself runs on a second Open WebUI of the
same release started with ENABLE_RAG_LOCAL_WEB_FETCH (ENABLE_LOCAL_WEB_FETCH from 0.12) for this module only, against
a page served on loopback. Releases before 0.6.42 cannot fetch without indexing the page outside every base, so there
the tool refuses before any fetch.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio

FETCHES_WITHOUT_INDEXING = (0, 6, 42)
LOCAL_FETCH = {"ENABLE_RAG_LOCAL_WEB_FETCH": "true", "ENABLE_LOCAL_WEB_FETCH": "true"}


class Pages:
    """A web server on loopback with one page, counting the requests it got."""

    def __init__(self, phrase: str) -> None:
        self.phrase = phrase
        self.requests: list[str] = []
        pages = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pages.requests.append(self.path)
                body = (
                    "<!doctype html><html><head><title>Install guide</title></head><body>"
                    f"<h1>Installing</h1><p>Run the installer. {pages.phrase}</p>"
                    "<p>Then sign in with your account.</p></body></html>"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/guide.html"

    def __enter__(self) -> Pages:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def fetches(inst: Instance) -> bool:
    return owui.version_parts(inst.version) >= FETCHES_WITHOUT_INDEXING


@pytest.fixture(scope="module")
def fetching_openwebui(live_openwebui: Instance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    """A second Open WebUI of the same release that may fetch local addresses (started only where the release can
    fetch without indexing; elsewhere the session's, where the tool refuses before fetching)."""
    if not fetches(live_openwebui):
        yield live_openwebui
        return
    workdir: Path = tmp_path_factory.mktemp(f"openwebui-fetch-{live_openwebui.version}")
    instance = owui.start(live_openwebui.version, workdir, extra_env=LOCAL_FETCH)
    try:
        yield instance
    finally:
        owui.stop(instance)


# Pages on loopback are what these tests fetch; the server refuses them unless its operator allows them (issue 41).
ALLOW_PRIVATE = {"OPENWEBUI_URL_ALLOW_PRIVATE": "true"}


async def test_the_server_refuses_a_local_page_before_asking_open_webui(live_openwebui: Instance) -> None:
    """Issue 41, item 2: by default a loopback page (as a literal, and as a name) never reaches Open WebUI's fetch,
    whatever Open WebUI's own check would do."""
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    base = owui.create_knowledge(inst, f"url-private-{tag}", "no local pages", private=True)
    before = owui.file_ids(inst)
    with Pages(f"phrase {tag}") as pages:
        async with stdio_session(inst) as admin:
            for url in (pages.url, pages.url.replace("127.0.0.1", "localhost")):
                is_error, body = await admin.call("knowledge_add_file", {"knowledge_id": base, "url": url})
                assert is_error, body
                assert (body["code"], body["outcome"]) == ("forbidden", "not_applied"), body
                assert "OPENWEBUI_URL_ALLOW_PRIVATE" in body["message"], body
    assert pages.requests == []
    assert owui.files_of(inst, base) == set()
    assert owui.file_ids(inst) == before


async def test_a_production_default_refuses_a_local_page_and_nothing_is_left(live_openwebui: Instance) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    base = owui.create_knowledge(inst, f"url-refused-{tag}", "no local pages", private=True)
    before = owui.file_ids(inst)
    with Pages(f"phrase {tag}") as pages:
        async with stdio_session(inst, **ALLOW_PRIVATE) as admin:  # Open WebUI's own default refuses it then
            is_error, body = await admin.call("knowledge_add_file", {"knowledge_id": base, "url": pages.url})
    assert is_error, body
    assert (body["stage"], body["outcome"]) == ("fetch", "not_applied"), body
    if fetches(inst):
        assert "ENABLE_RAG_LOCAL_WEB_FETCH" in body["message"], body
    else:
        assert body["code"] == "unsupported", body
        assert pages.requests == []  # refused before asking Open WebUI to fetch anything
    assert owui.files_of(inst, base) == set()
    assert owui.file_ids(inst) == before


async def test_a_page_becomes_a_document_once(fetching_openwebui: Instance) -> None:
    inst, tag = fetching_openwebui, uuid.uuid4().hex[:8]
    base = owui.create_knowledge(inst, f"url-{tag}", "pages", private=True)
    phrase = f"Zebra-{tag} lives here"
    with Pages(phrase) as pages:
        async with stdio_session(inst, **ALLOW_PRIVATE) as admin:
            first = await admin.call("knowledge_add_file", {"knowledge_id": base, "url": pages.url})
            if not fetches(inst):
                assert first[0], first
                assert (first[1]["code"], first[1]["stage"]) == ("unsupported", "fetch")
                assert pages.requests == []
                return
            assert not first[0], first
            added = first[1]
            text = await admin.ok("knowledge_get_file", {"file_id": added["file_id"]})
            files = await admin.ok("knowledge_files", {"knowledge_id": base})
            found = await admin.ok("knowledge_search", {"query": f"Zebra-{tag}", "knowledge_ids": [base]})
            before = owui.file_ids(inst)
            again = await admin.call("knowledge_add_file", {"knowledge_id": base, "url": pages.url, "title": "Again"})
    assert pages.requests, "Open WebUI never fetched the page"
    assert added["title"] == f"127.0.0.1:{pages.url.split(':')[2]}"
    assert phrase in text["text"]
    assert [item["file_id"] for item in files["items"]] == [added["file_id"]]
    assert any(hit["file_id"] == added["file_id"] for hit in found["results"]), found
    # The same page again is the same text: named as a duplicate, the second upload removed again.
    assert again[0], again
    assert (again[1]["code"], again[1]["outcome"]) == ("duplicate_content", "not_applied"), again
    assert again[1]["existing_file_id"] in (added["file_id"], None)
    assert owui.files_of(inst, base) == {added["file_id"]}
    assert owui.file_ids(inst) == before


async def test_a_user_gets_no_page_fetched_into_a_base_it_cannot_change(
    live_openwebui: Instance, live_user: User
) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    private = owui.create_knowledge(inst, f"url-private-{tag}", "the admin's", private=True)
    shared = owui.create_knowledge(inst, f"url-shared-{tag}", "read-only for the user", private=True)
    owui.share_read(inst, shared, live_user)
    with Pages(f"phrase {tag}") as pages:
        async with stdio_session(inst, api_key=live_user.api_key, **ALLOW_PRIVATE) as user:
            hidden = await user.call("knowledge_add_file", {"knowledge_id": private, "url": pages.url})
            read_only = await user.call("knowledge_add_file", {"knowledge_id": shared, "url": pages.url})
    for is_error, body in (hidden, read_only):
        assert is_error, body
        assert body["outcome"] == "not_applied", body
    assert read_only[1]["code"] in ("forbidden", "unsupported"), read_only
    assert pages.requests == []
    assert owui.files_of(inst, private) == set()
    assert owui.files_of(inst, shared) == set()


async def test_an_uploaded_file_is_attached_by_id_and_only_by_who_may_read_it(
    live_openwebui: Instance, live_user: User
) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    admins = owui.create_knowledge(inst, f"attach-{tag}", "the admin's", private=True)
    users = owui.create_knowledge(inst, f"attach-user-{tag}", "the user's", api_key=live_user.api_key)
    secret = owui.upload_text(inst, "secret.md", f"# Secret\n\nThe admin's secret {tag}.")
    own = owui.upload_text(inst, "minutes.md", f"# Minutes\n\nThe user's minutes {tag}.", api_key=live_user.api_key)

    async with stdio_session(inst) as admin:
        attached = await admin.ok("knowledge_add_file", {"knowledge_id": admins, "file_id": secret})
        twice = await admin.ok("knowledge_add_file", {"knowledge_id": admins, "file_id": secret})
        found = await admin.ok("knowledge_search", {"query": f"secret {tag}", "knowledge_ids": [admins]})
    assert (attached["file_id"], attached["filename"]) == (secret, "secret.md")
    assert attached["extracted_chars"] > 0
    assert twice["file_id"] == secret
    assert owui.files_of(inst, admins) == {secret}
    assert any(hit["file_id"] == secret for hit in found["results"]), found

    async with stdio_session(inst, api_key=live_user.api_key) as user:
        stolen = await user.call("knowledge_add_file", {"knowledge_id": users, "file_id": secret})
        mine = await user.call("knowledge_add_file", {"knowledge_id": users, "file_id": own})
    # Someone else's upload is never made readable through the user's own base.
    assert stolen[0], stolen
    assert stolen[1]["code"] in ("not_found", "forbidden"), stolen
    assert stolen[1]["outcome"] == "not_applied", stolen
    assert not mine[0], mine
    assert owui.files_of(inst, users, api_key=live_user.api_key) == {own}
    assert secret in owui.file_ids(inst)  # the admin's file untouched


async def test_a_whole_base_is_deleted_only_by_its_creator_naming_it(live_openwebui: Instance, live_user: User) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    admins_name, users_name = f"delete-me-{tag}", f"users-own-{tag}"
    admins = owui.create_knowledge(inst, admins_name, "the admin's", private=True)
    document = owui.upload_text(inst, "kept.md", f"# Kept\n\nThe file stays {tag}.")
    owui.add_file(inst, admins, document)
    users = owui.create_knowledge(inst, users_name, "the user's", api_key=live_user.api_key)
    shared = owui.create_knowledge(inst, f"shared-{tag}", "read-only for the user", private=True)
    owui.share_read(inst, shared, live_user)
    on = {"OPENWEBUI_ALLOW_DELETE_BASE": "true"}

    async with stdio_session(inst) as admin:
        listed = {tool.name for tool in (await admin.session.list_tools()).tools}
    assert "knowledge_delete_base" not in listed  # off by default

    async with stdio_session(inst, **on) as admin:
        wrong = await admin.call("knowledge_delete_base", {"knowledge_id": admins, "confirm": admins_name.upper()})
        not_own = await admin.call("knowledge_delete_base", {"knowledge_id": users, "confirm": users_name})
        deleted = await admin.call("knowledge_delete_base", {"knowledge_id": admins, "confirm": admins_name})
    assert (wrong[0], wrong[1]["code"]) == (True, "invalid_argument"), wrong
    # An admin may delete any base in Open WebUI; through this server, only its own.
    assert (not_own[0], not_own[1]["code"], not_own[1]["outcome"]) == (True, "forbidden", "not_applied"), not_own
    assert not deleted[0], deleted
    assert deleted[1]["documents"] == 1
    ids = owui.knowledge_ids(inst)
    assert admins not in ids
    assert users in ids
    assert document in owui.file_ids(inst)  # Open WebUI keeps the files of a deleted base

    async with stdio_session(inst, api_key=live_user.api_key, **on) as user:
        read_only = await user.call("knowledge_delete_base", {"knowledge_id": shared, "confirm": f"shared-{tag}"})
        own = await user.call("knowledge_delete_base", {"knowledge_id": users, "confirm": users_name})
    assert (read_only[0], read_only[1]["outcome"]) == (True, "not_applied"), read_only
    assert read_only[1]["code"] in ("forbidden", "not_found"), read_only
    assert not own[0], own
    assert shared in owui.knowledge_ids(inst)
    assert users not in owui.knowledge_ids(inst)
