"""Real documents through the stdio server into a real Open WebUI: ``knowledge_add_file`` (from a local path under
``OPENWEBUI_UPLOAD_DIRS`` and from ``content_base64``), then the sentence inside each one found by
``knowledge_search`` scoped to that document (``file_ids``), by ``knowledge_find``, and read back by
``knowledge_get_file``, by characters and by the line ``knowledge_find`` named.

Open WebUI extracts the text with its default loaders (offline). Every kind built here gives its text on every
release: a PDF, a DOCX, an XLSX, an HTML page, a CSV, plain text in pages and Markdown in Cyrillic and CJK. (Reference
§5.5 says 0.6.5 gives no text for an XLSX; live, 0.6.5 reads this openpyxl-built one through UnstructuredExcelLoader,
all cells on one line.) The plain text in pages has form feeds between its pages, as RFCs do: the line
``knowledge_find`` names must be the line ``knowledge_get_file`` reads at that number. Files with no text for the
default loaders (a PNG, a PDF holding only a drawing) must be refused at the processing stage, leaving nothing behind.

Also here: path safety against the real server (nothing reaches Open WebUI), and a second user who cannot search
the admin's private document by naming its file_id.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from tests.live import documents
from tests.live.documents import Document, one_line
from tests.live.stdio import Session, stdio_session

pytestmark = pytest.mark.anyio

# Never sent in a request: if it shows up in an answer, the server read a file it must not have.
SECRET = "kelvorath-secret-do-not-echo"


def tag() -> str:
    return uuid.uuid4().hex[:10]


async def add_file(server: Session, knowledge_id: str, **source: Any) -> tuple[bool, dict[str, Any]]:
    return await server.call("knowledge_add_file", {"knowledge_id": knowledge_id, **source})


async def found_and_read(server: Session, knowledge_id: str, file_id: str, phrase: str) -> list[str]:
    """What is wrong (nothing: []) with the phrase coming back from a search scoped to the document, from the exact
    search (with its line) and from the document's text, read whole and read at that one line. Every check runs,
    so one failing tool does not hide what the others do."""
    problems: list[str] = []

    def check(condition: bool, what: str, answer: object) -> None:
        if not condition:
            problems.append(f"{what}: {answer!r}")

    found = await server.ok("knowledge_search", {"query": phrase, "file_ids": [file_id], "top_k": 10})
    check(bool(found["results"]), "knowledge_search scoped to the file found nothing", found)
    check({result["file_id"] for result in found["results"]} <= {file_id}, "results from other files", found)
    check(any(phrase in one_line(result["text"]) for result in found["results"]), "no result holds it", found)

    whole = await server.ok("knowledge_get_file", {"file_id": file_id})
    check(phrase in whole["text"], "knowledge_get_file does not hold it", whole)
    # Lines as knowledge_get_file numbers them ("N: text"): the text between two line feeds.
    lines = whole["text"].split("\n")
    holding = [number for number, text in enumerate(lines, start=1) if phrase in text]

    exact = await server.ok("knowledge_find", {"knowledge_id": knowledge_id, "phrase": phrase})
    check(exact["count"] == len(exact["matches"]), "count is not the number of matches", exact)
    check((exact["files_capped"], exact["matches_capped"]) == (False, False), "capped", exact)
    mine = [match for match in exact["matches"] if match["file_id"] == file_id]
    check(
        len(mine) == 1 and phrase in mine[0]["text"] and mine[0]["truncated"] is False,
        f"knowledge_find does not give the one line of {file_id} that holds it",
        exact,
    )
    # The line knowledge_find names, read back by line, is the line that holds the phrase.
    for line in [match["line"] for match in mine] or holding:
        at_line = await server.ok("knowledge_get_file", {"file_id": file_id, "start_line": line, "end_line": line})
        expected = f"{line}: {lines[line - 1]}" if line <= len(lines) else None
        check(at_line["text"] == expected, f"knowledge_get_file at line {line} is not {expected!r}", at_line)
        check(phrase in at_line["text"], f"line {line} (holding it: {holding}) does not hold it", at_line)
    return [f"{phrase!r} in {file_id}: {problem}" for problem in problems]


def assert_not_extracted(body: dict[str, Any]) -> None:
    """The answer to a file Open WebUI extracted no text from: refused at the processing stage, the upload removed
    again, so nothing changed."""
    assert body["code"] == "upstream_error", body
    assert body["stage"] == "process", body
    assert body["outcome"] == "not_applied", body
    assert body["file_id"] is None, body
    assert body["retryable"] is False, body


@pytest.fixture
def upload_dir(tmp_path: Path) -> Path:
    """The folder named in OPENWEBUI_UPLOAD_DIRS (links resolved, as the server resolves them)."""
    return tmp_path.resolve()


def write(folder: Path, document: Document) -> Path:
    path = folder / document.filename
    path.write_bytes(document.content)
    return path


# Kinds a release's default loaders cannot read offline. 0.6.5 and 0.6.43 read a PPTX through `unstructured`, which
# fetches NLTK's `punkt_tab` from the internet on first use (seen live: "Resource punkt_tab not found"); there the
# server must say so at the processing stage and leave nothing behind, as for a file with no text.
UNREADABLE_OFFLINE = {"0.6.5": {"pptx"}, "0.6.43": {"pptx"}}


@pytest.mark.parametrize("kind", list(documents.TEXT_BUILDERS))
async def test_document_text_is_searched_found_and_read(live_openwebui: Instance, upload_dir: Path, kind: str) -> None:
    """One document of each kind added twice (different sentences): from a local path and as base64."""
    inst = live_openwebui
    knowledge_id = owui.create_knowledge(inst, f"documents-{kind}-{tag()}", "live documents", private=True)
    if kind in UNREADABLE_OFFLINE.get(inst.version, set()):
        document = documents.build(kind, tag())
        files_before = owui.file_ids(inst)
        async with stdio_session(inst) as server:
            encoded = base64.b64encode(document.content).decode()
            is_error, body = await add_file(server, knowledge_id, content_base64=encoded, filename=document.filename)
        assert is_error, body
        assert (body["code"], body["stage"], body["outcome"]) == ("upstream_error", "process", "not_applied"), body
        assert owui.file_ids(inst) == files_before, "the upload Open WebUI could not read was left behind"
        return
    from_path = documents.build(kind, tag(), stem="from-path")
    from_bytes = documents.build(kind, tag(), stem="from-bytes")
    local = write(upload_dir, from_path)
    extension = from_path.filename.rsplit(".", 1)[1]
    title = f"Документ {kind} 文書"

    async with stdio_session(inst, OPENWEBUI_UPLOAD_DIRS=str(upload_dir)) as server:
        added: list[tuple[Document, dict[str, Any]]] = []
        is_error, body = await add_file(server, knowledge_id, path=str(local))
        added.append((from_path, body))
        encoded = base64.b64encode(from_bytes.content).decode()
        is_error_b64, body_b64 = await add_file(
            server,
            knowledge_id,
            content_base64=encoded,
            filename=from_bytes.filename,
            title=title,
            metadata={"origin": "live test", "язык": "русский"},
        )
        added.append((from_bytes, body_b64))

        assert (is_error, is_error_b64) == (False, False), added
        for document, result in added:
            assert result["ok"] is True
            assert result["knowledge_id"] == knowledge_id
            assert result["status"] == "completed"
            assert result["size"] == len(document.content)
            assert result["filename"].endswith(f".{extension}"), result
            assert result["extracted_chars"] >= len(document.phrase), result
        assert body["title"] == from_path.filename
        assert body["filename"] == from_path.filename
        assert body_b64["title"] == title
        assert owui.files_of(inst, knowledge_id) == {body["file_id"], body_b64["file_id"]}

        problems = [
            problem
            for document, result in added
            for problem in await found_and_read(server, knowledge_id, result["file_id"], document.phrase)
        ]
        assert not problems, "\n".join(problems)


async def test_find_ignores_case_in_every_script(live_openwebui: Instance) -> None:
    """``case_sensitive`` is false by default: a Cyrillic phrase typed in lower case finds its capitalised line."""
    inst = live_openwebui
    knowledge_id = owui.create_knowledge(inst, f"documents-case-{tag()}", "live documents", private=True)
    document = documents.build("md-cyrillic", tag())
    assert document.phrase != document.phrase.lower()
    async with stdio_session(inst) as server:
        encoded = base64.b64encode(document.content).decode()
        added = await server.ok(
            "knowledge_add_file",
            {"knowledge_id": knowledge_id, "content_base64": encoded, "filename": document.filename},
        )
        lower = await server.ok("knowledge_find", {"knowledge_id": knowledge_id, "phrase": document.phrase.lower()})
        assert [match["file_id"] for match in lower["matches"]] == [added["file_id"]], lower
        assert document.phrase in lower["matches"][0]["text"]
        exact = await server.ok(
            "knowledge_find",
            {"knowledge_id": knowledge_id, "phrase": document.phrase.lower(), "case_sensitive": True},
        )
        assert exact["matches"] == [], exact


@pytest.mark.parametrize("kind", list(documents.NO_TEXT))
async def test_file_without_text_is_refused_and_leaves_nothing(live_openwebui: Instance, kind: str) -> None:
    inst = live_openwebui
    knowledge_id = owui.create_knowledge(inst, f"documents-{kind}-{tag()}", "live documents", private=True)
    document = documents.build_no_text(kind)
    files_before = owui.file_ids(inst)
    async with stdio_session(inst) as server:
        encoded = base64.b64encode(document.content).decode()
        is_error, body = await add_file(server, knowledge_id, content_base64=encoded, filename=document.filename)
        assert is_error, body
        assert_not_extracted(body)
        listed = await server.ok("knowledge_files", {"knowledge_id": knowledge_id})
        assert listed["items"] == [], listed
    assert owui.files_of(inst, knowledge_id) == set()
    assert owui.file_ids(inst) == files_before, "the upload of a file with no text was left in Open WebUI"


@pytest.fixture
def paths(upload_dir: Path) -> dict[str, Path]:
    """An allowed folder with a link out of it, a folder, a FIFO, a file over 1000 bytes and a fine file; and a
    folder outside it with a secret."""
    allowed, outside = upload_dir / "allowed", upload_dir / "outside"
    allowed.mkdir()
    outside.mkdir()
    secret = outside / "secret.md"
    secret.write_text(f"# Private\n\n{SECRET}\n", encoding="utf-8")
    (allowed / "link.md").symlink_to(secret)
    (allowed / "folder").mkdir()
    os.mkfifo(allowed / "pipe.md")
    (allowed / "big.md").write_text("# Big\n\n" + "word " * 300, encoding="utf-8")
    fine = allowed / "fine.md"
    fine.write_text(f"# Fine\n\nThe allowed file {tag()} is read.\n", encoding="utf-8")
    return {"allowed": allowed, "secret": secret, "fine": fine}


async def test_local_paths_outside_the_allowed_folder_are_refused_before_any_request(
    live_openwebui: Instance, paths: dict[str, Path]
) -> None:
    inst = live_openwebui
    knowledge_id = owui.create_knowledge(inst, f"documents-paths-{tag()}", "live documents", private=True)
    allowed, secret, fine = paths["allowed"], paths["secret"], paths["fine"]

    refused = {
        str(secret): ("forbidden", "OPENWEBUI_UPLOAD_DIRS"),
        str(allowed / "link.md"): ("forbidden", "OPENWEBUI_UPLOAD_DIRS"),
        f"{allowed}/../outside/secret.md": ("forbidden", "OPENWEBUI_UPLOAD_DIRS"),
        str(allowed / "folder"): ("invalid_argument", "directory"),
        str(allowed / "pipe.md"): ("invalid_argument", "not a regular file"),
        str(allowed / "big.md"): ("too_large", "OPENWEBUI_UPLOAD_MAX_BYTES"),
        str(allowed / "missing.md"): ("not_found", "does not exist"),
    }
    files_before = owui.file_ids(inst)
    async with stdio_session(inst, OPENWEBUI_UPLOAD_DIRS=str(allowed), OPENWEBUI_UPLOAD_MAX_BYTES="1000") as server:
        for path, (code, rule) in refused.items():
            is_error, body = await add_file(server, knowledge_id, path=path)
            assert is_error, (path, body)
            assert (body["code"], body["stage"], body["outcome"]) == (code, "upload", "not_applied"), (path, body)
            assert body["file_id"] is None, (path, body)
            assert rule in body["message"], (path, body)
            assert SECRET not in str(body), (path, body)
        assert owui.file_ids(inst) == files_before, "a refused path reached Open WebUI"
        assert owui.files_of(inst, knowledge_id) == set()
        added = await server.ok("knowledge_add_file", {"knowledge_id": knowledge_id, "path": str(fine)})
        assert owui.files_of(inst, knowledge_id) == {added["file_id"]}
    async with stdio_session(inst) as server:  # no OPENWEBUI_UPLOAD_DIRS: no local file at all
        is_error, body = await add_file(server, knowledge_id, path=str(fine))
        assert is_error, body
        assert (body["code"], body["outcome"]) == ("forbidden", "not_applied"), body
        assert "OPENWEBUI_UPLOAD_DIRS" in body["message"], body
    assert owui.files_of(inst, knowledge_id) == {added["file_id"]}


async def test_another_user_cannot_search_a_private_document_by_file_id(
    live_openwebui: Instance, live_user: User
) -> None:
    """Open WebUI's retrieval endpoint does not check access on older releases (reference §6.4): the server must
    refuse a file_id the key cannot read, on every release, with the same answer as for a file that does not
    exist."""
    inst = live_openwebui
    private = owui.create_knowledge(inst, f"documents-private-{tag()}", "the admin's, shared with nobody", private=True)
    other = owui.create_knowledge(inst, f"documents-other-{tag()}", "another of the admin's bases", private=True)
    secret = documents.build("docx", tag(), stem="private")
    async with stdio_session(inst) as admin:
        encoded = base64.b64encode(secret.content).decode()
        added = await admin.ok(
            "knowledge_add_file", {"knowledge_id": private, "content_base64": encoded, "filename": secret.filename}
        )
        admin_file = added["file_id"]
        found = await admin.ok("knowledge_search", {"query": secret.phrase, "file_ids": [admin_file]})
        assert {result["file_id"] for result in found["results"]} == {admin_file}, found  # the admin can
        is_error, body = await admin.call(
            "knowledge_search", {"query": secret.phrase, "file_ids": [admin_file], "knowledge_ids": [private]}
        )
        assert is_error, body
        assert body["code"] == "invalid_argument", body
    async with stdio_session(inst, OPENWEBUI_KNOWLEDGE_IDS=other) as admin:  # an allowlist without that base
        is_error, body = await admin.call("knowledge_search", {"query": secret.phrase, "file_ids": [admin_file]})
        assert is_error, body
        assert body["code"] == "not_found", body
        assert secret.phrase not in str(body)

    key = live_user.api_key
    own_words = f"mossbriar lantern {tag()}"
    own_file = owui.upload_text(inst, "own-notes.md", f"# Notes\n\nThe {own_words} hangs in the hall.\n", api_key=key)
    unknown = str(uuid.uuid4())
    async with stdio_session(inst, api_key=key) as user:
        mine = await user.ok("knowledge_search", {"query": own_words, "file_ids": [own_file]})
        assert {result["file_id"] for result in mine["results"]} == {own_file}, mine
        for file_ids in ([admin_file], [own_file, admin_file], [unknown]):
            is_error, body = await user.call("knowledge_search", {"query": secret.phrase, "file_ids": file_ids})
            assert is_error, (file_ids, body)
            assert body["code"] == "not_found", (file_ids, body)
            assert secret.phrase not in str(body), (file_ids, body)
        is_error, body = await user.call("knowledge_get_file", {"file_id": admin_file})
        assert is_error, body
        assert body["code"] == "not_found", body
    async with stdio_session(inst, api_key=key, OPENWEBUI_KNOWLEDGE_IDS=private) as user:
        # An allowlist naming the admin's base gives the user no access to it.
        is_error, body = await user.call("knowledge_search", {"query": secret.phrase, "file_ids": [admin_file]})
        assert is_error, body
        assert body["code"] == "not_found", body
        assert secret.phrase not in str(body), body


def make_folder(inst: Instance, knowledge_id: str, name: str, parent_id: str | None = None) -> str:
    """A folder in a base (0.9.6+), the way Open WebUI's own interface makes one."""
    with owui.client(inst) as http:
        answer = http.post(f"/api/v1/knowledge/{knowledge_id}/dirs/create", json={"name": name, "parent_id": parent_id})
    answer.raise_for_status()
    folder_id: str = answer.json()["id"]
    return folder_id


def move_to_folder(inst: Instance, knowledge_id: str, file_id: str, folder_id: str) -> None:
    with owui.client(inst) as http:
        answer = http.post(
            f"/api/v1/knowledge/{knowledge_id}/file/move", json={"file_id": file_id, "directory_id": folder_id}
        )
    answer.raise_for_status()


async def test_a_search_narrowed_to_a_folder(live_openwebui: Instance, live_user: User) -> None:
    """``folder`` searches the documents in a folder and below it (bases have folders from Open WebUI 0.9.6; from
    0.12 ``knowledge_files`` also names each document's); an older release says ``unsupported`` instead of searching
    something else, and a key that cannot read the base learns nothing from it."""
    inst = live_openwebui
    knowledge_id = owui.create_knowledge(inst, f"documents-folders-{tag()}", "live documents", private=True)
    topic = f"quarzelmond{tag()}"
    async with stdio_session(inst) as server:
        added: dict[str, str] = {}
        for name in ("top", "guide", "deep"):
            text = f"# {name}\n\nThe {topic} procedure, as the {name} document tells it."
            body = await server.ok("knowledge_add", {"knowledge_id": knowledge_id, "text": text, "title": name})
            added[name] = body["file_id"]
        search = {"query": f"{topic} procedure", "knowledge_ids": [knowledge_id], "top_k": 10}
        if owui.version_parts(inst.version) < (0, 9, 6):
            is_error, body = await server.call("knowledge_search", {**search, "folder": "guides"})
            assert (is_error, body["code"]) == (True, "unsupported"), body
            return
        guides = make_folder(inst, knowledge_id, "guides")
        move_to_folder(inst, knowledge_id, added["guide"], guides)
        move_to_folder(inst, knowledge_id, added["deep"], make_folder(inst, knowledge_id, "deep", guides))

        listed = await server.ok("knowledge_files", {"knowledge_id": knowledge_id})
        named = owui.version_parts(inst.version) >= (0, 12, 0)  # lists name a document's folder from 0.12
        assert {item["file_id"]: item["folder"] for item in listed["items"]} == {
            added["top"]: None,
            added["guide"]: "guides" if named else None,
            added["deep"]: "guides/deep" if named else None,
        }, listed
        everywhere = await server.ok("knowledge_search", search)
        assert {result["file_id"] for result in everywhere["results"]} == set(added.values()), everywhere
        in_guides = await server.ok("knowledge_search", {**search, "folder": "guides"})
        assert {result["file_id"] for result in in_guides["results"]} == {added["guide"], added["deep"]}, in_guides
        assert {result["knowledge_id"] for result in in_guides["results"]} == {knowledge_id}
        in_deep = await server.ok("knowledge_search", {**search, "folder": "guides/deep/"})
        assert [result["file_id"] for result in in_deep["results"]] == [added["deep"]], in_deep
        is_error, body = await server.call("knowledge_search", {**search, "folder": "guide"})
        assert (is_error, body["code"]) == (True, "not_found"), body

    async with stdio_session(inst, api_key=live_user.api_key) as other:
        is_error, body = await other.call("knowledge_search", {**search, "folder": "guides"})
        assert (is_error, body["code"]) == (True, "not_found"), body
        assert topic not in json.dumps(body), body
