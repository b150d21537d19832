"""Two Open WebUI users: what the server shows a plain user's key, against a real Open WebUI of every release.

The admin owns a private base (shared with nobody) and a base shared read-only with the second user
(``live_user``, role "user"); the user owns a base of its own. Open WebUI's retrieval endpoint does not check access
to the collections it searches on releases before 0.9 (reference §6.4), so the server itself must keep a key within
the bases the Knowledge API lets it read (issue 10, defect 0).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from tests.live.stdio import stdio_session
from tests.live.syncrun import run_sync

pytestmark = pytest.mark.anyio

# Words the search targets: in the admin's private document and in the user's own document.
ADMIN_WORDS = "quillfern ledger"
USER_WORDS = "mossbriar lantern"
# In the admin's private document only and never sent in a query: if it shows up in the user's output, it leaked.
LEAK_MARK = "zorbanatrix"
# Open WebUI lists write_access on bases from 0.6.42 on (read in 0.6.43's source; 0.6.5 has no such field).
WRITE_ACCESS_SINCE = (0, 6, 42)


@dataclass(frozen=True)
class Bases:
    private: str  # the admin's, shared with nobody
    private_file: str
    shared: str  # the admin's, shared read-only with the user
    shared_file: str
    own: str  # the user's own
    own_file: str


@pytest.fixture(scope="module")
def bases(live_openwebui: Instance, live_user: User) -> Bases:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    private = owui.create_knowledge(inst, f"admin-private-{tag}", "the admin's, shared with nobody", private=True)
    private_text = f"# Ledger\n\nThe {ADMIN_WORDS} lists the admin's accounts. Vault word: {LEAK_MARK}."
    private_file = owui.upload_text(inst, "ledger.md", private_text)
    owui.add_file(inst, private, private_file)

    shared = owui.create_knowledge(inst, f"admin-shared-{tag}", "the admin's, readable by the user", private=True)
    shared_file = owui.upload_text(inst, "handbook.md", f"# Handbook\n\nShared reading {tag}: the office opens at 9.")
    owui.add_file(inst, shared, shared_file)
    owui.share_read(inst, shared, live_user)  # checks through the user's own key that the share took

    key = live_user.api_key
    own = owui.create_knowledge(inst, f"user-own-{tag}", "the user's own", api_key=key)
    own_file = owui.upload_text(inst, "notes.md", f"# Notes\n\nThe {USER_WORDS} hangs in the hall.", api_key=key)
    owui.add_file(inst, own, own_file, api_key=key)

    readable = owui.knowledge_ids(inst, key)
    assert private not in readable, "harness: the admin's private base is readable by the user"
    assert {shared, own} <= set(readable)
    return Bases(private, private_file, shared, shared_file, own, own_file)


def reports_write_access(version: str) -> bool:
    return owui.version_parts(version) >= WRITE_ACCESS_SINCE


async def test_user_key_cannot_search_the_admins_private_base(
    live_openwebui: Instance, live_user: User, bases: Bases
) -> None:
    """Defect 0: naming a base the key cannot read is `not_found` (as for an id that does not exist), on every
    release, whatever Open WebUI's retrieval endpoint would have returned; searching everywhere stays within the
    key's own bases."""
    async with stdio_session(live_openwebui) as admin:  # control: the text is there and findable
        found = await admin.ok("knowledge_search", {"query": ADMIN_WORDS, "knowledge_ids": [bases.private]})
        assert LEAK_MARK in found["results"][0]["text"]

    async with stdio_session(live_openwebui, api_key=live_user.api_key) as server:
        is_error, body = await server.call("knowledge_search", {"query": ADMIN_WORDS, "knowledge_ids": [bases.private]})
        assert LEAK_MARK not in json.dumps(body, ensure_ascii=False), f"the admin's private text leaked: {body}"
        assert is_error, body
        assert body["code"] == "not_found", body

        missing = str(uuid.uuid4())
        is_error, absent = await server.call("knowledge_search", {"query": ADMIN_WORDS, "knowledge_ids": [missing]})
        assert is_error, absent
        assert absent["code"] == body["code"]  # an unreadable base and a missing one look the same

        everywhere = await server.ok("knowledge_search", {"query": f"{ADMIN_WORDS} {USER_WORDS}", "top_k": 10})
        assert LEAK_MARK not in json.dumps(everywhere, ensure_ascii=False), everywhere
        assert bases.private not in everywhere["knowledge_ids"]
        assert bases.private_file not in {chunk["file_id"] for chunk in everywhere["results"]}
        assert bases.own_file in {chunk["file_id"] for chunk in everywhere["results"]}  # the search did run
        assert LEAK_MARK not in server.stderr.read_text(encoding="utf-8")


async def test_user_sees_and_writes_only_what_it_may(live_openwebui: Instance, live_user: User, bases: Bases) -> None:
    """A base the admin makes with knowledge_create is invisible to the user; a base shared read-only is listed
    with write_access false and refuses knowledge_add as `forbidden` without leaving a file; the user's own base
    has write_access true and takes documents."""
    inst = live_openwebui
    async with stdio_session(inst) as admin:
        made = await admin.ok("knowledge_create", {"name": f"admin-made-{uuid.uuid4().hex[:8]}", "description": "x"})
    admin_made = made["knowledge_id"]

    async with stdio_session(inst, api_key=live_user.api_key) as server:
        is_error, body, listed = await server.listing("knowledge_list", {})
        assert not is_error, body
        by_id = {item["knowledge_id"]: item for item in listed}
        assert admin_made not in by_id
        assert bases.private not in by_id
        for hidden in (admin_made, bases.private):
            is_error, body = await server.call("knowledge_files", {"knowledge_id": hidden})
            assert is_error, body
            assert body["code"] in ("not_found", "forbidden"), body

        shared, own = by_id[bases.shared], by_id[bases.own]
        if reports_write_access(inst.version):
            assert shared["write_access"] is False
            assert own["write_access"] is True
        else:  # this release has no write_access field at all
            assert shared["write_access"] is None
            assert own["write_access"] is None
        is_error, body, files = await server.listing("knowledge_files", {"knowledge_id": bases.shared})
        assert not is_error, body
        assert [item["file_id"] for item in files] == [bases.shared_file]  # reading is allowed

        before = owui.file_ids(inst)
        refused_text = f"# Not allowed\n\nThe user may only read this base ({uuid.uuid4().hex})."
        is_error, body = await server.call(
            "knowledge_add", {"knowledge_id": bases.shared, "text": refused_text, "title": "not allowed"}
        )
        assert is_error, body
        assert body["code"] == "forbidden", body
        assert body["outcome"] == "not_applied", body
        assert owui.file_ids(inst) == before, "a refused knowledge_add left a file in Open WebUI"
        assert owui.files_of(inst, bases.shared) == {bases.shared_file}

        own_text = f"# Mine\n\nThe user's own note {uuid.uuid4().hex}."
        added = await server.ok("knowledge_add", {"knowledge_id": bases.own, "text": own_text, "title": "mine"})
        assert owui.files_of(inst, bases.own) == {bases.own_file, added["file_id"]}


def test_sync_writes_only_where_the_key_may(
    live_openwebui: Instance, live_user: User, bases: Bases, tmp_path: Path
) -> None:
    """`sync` with the user's key: into the admin's base shared read-only, every file fails and nothing is left in
    Open WebUI (0.9.6 to 0.9.x would link an upload naming the base without asking: the server asks first); into
    the user's own base, every file is added (an upload that links itself, from 0.9.6, for a user who is no admin)."""
    inst, key = live_openwebui, live_user.api_key
    folder = tmp_path / "notes"
    folder.mkdir()
    for n in range(3):
        (folder / f"note-{n}.md").write_text(f"# Note {n}\n\nA line only this note has: {uuid.uuid4().hex}.\n")
    files_before = owui.file_ids(inst)
    refused = run_sync(inst, folder, bases.shared, api_key=key)
    assert refused.code == 1, refused.lines
    assert (refused.summary["added"], refused.summary["failed"]) == (0, 3), refused.lines
    assert owui.file_ids(inst) == files_before, "a refused sync left files in Open WebUI"
    assert owui.files_of(inst, bases.shared) == {bases.shared_file}

    own_before = owui.files_of(inst, bases.own)
    added = run_sync(inst, folder, bases.own, api_key=key)
    assert (added.code, added.summary["added"]) == (0, 3), added.lines
    assert len(owui.files_of(inst, bases.own) - own_before) == 3, added.lines


async def test_a_revoked_share_is_refused_at_the_next_search(live_openwebui: Instance, live_user: User) -> None:
    """Issue 41, item 1: the admin shares a base read-only with the user, the user searches it (by base and by
    document) through one server process, the admin stops sharing it, and the user's next search naming it is
    refused at once, within the 30 s the server remembers what a key can read. Before 0.9 Open WebUI's retrieval
    would answer it: the server asks afresh; from 0.9 Open WebUI refuses it itself."""
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    mark = f"revokeword{tag}"
    base = owui.create_knowledge(inst, f"admin-revoked-{tag}", "shared, then not", private=True)
    file_id = owui.upload_text(inst, "revoked.md", f"# Revoked\n\nThe {mark} paragraph about lighthouses.")
    owui.add_file(inst, base, file_id)
    owui.share_read(inst, base, live_user)
    by_base = {"query": f"{mark} lighthouses", "knowledge_ids": [base]}
    by_file = {"query": f"{mark} lighthouses", "file_ids": [file_id]}

    async with stdio_session(inst, api_key=live_user.api_key) as server:
        for arguments in (by_base, by_file):
            found = await server.ok("knowledge_search", arguments)
            assert mark in json.dumps(found, ensure_ascii=False), found
        owui.unshare(inst, base, live_user)  # checks the user's own listing leaves it out now
        for arguments in (by_base, by_file):
            is_error, body = await server.call("knowledge_search", arguments)
            assert mark not in json.dumps(body, ensure_ascii=False), f"a revoked share still answered: {body}"
            assert is_error, body
            assert body["code"] in ("not_found", "forbidden"), body
