"""The README's write sequence over stdio against a real Open WebUI, confirmed through Open WebUI's own API."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from openwebui_rag_mcp.compat import Release
from tests.live.stdio import Session, stdio_session

pytestmark = pytest.mark.anyio

TITLE = "Ёжик в тумане: заметки 第一"
OLD_WORD = "quasarplinth"
NEW_WORD = "vortexmarrow"


def files_of(instance: Instance, knowledge_id: str) -> set[str]:
    """The file ids Open WebUI itself says the base holds."""
    with owui.client(instance) as http:
        if Release.parse(instance.version).paged_lists:
            answer = http.get(f"/api/v1/knowledge/{knowledge_id}/files", params={"page": 1}).json()
            return {item["id"] for item in answer["items"]}
        answer = http.get(f"/api/v1/knowledge/{knowledge_id}").json()
        return {item["id"] for item in answer.get("files") or []}


def hash_of(instance: Instance, knowledge_id: str, file_id: str) -> str | None:
    """The hash Open WebUI lists for a document of a base (None where the release lists none)."""
    with owui.client(instance) as http:
        if Release.parse(instance.version).paged_lists:
            items = http.get(f"/api/v1/knowledge/{knowledge_id}/files", params={"page": 1}).json()["items"]
        else:
            items = http.get(f"/api/v1/knowledge/{knowledge_id}").json().get("files") or []
    hashes = [item.get("hash") for item in items if item["id"] == file_id]
    return hashes[0] if hashes else None


def file_exists(instance: Instance, file_id: str) -> bool:
    with owui.client(instance) as http:
        return http.get(f"/api/v1/files/{file_id}").status_code == 200


def all_file_ids(instance: Instance) -> set[str]:
    with owui.client(instance) as http:
        answer: Any = http.get("/api/v1/files/").json()
    items = answer["items"] if isinstance(answer, dict) else answer
    return {item["id"] for item in items}


async def texts_found(server: Session, knowledge_id: str, query: str) -> list[str]:
    found = await server.ok("knowledge_search", {"query": query, "knowledge_ids": [knowledge_id], "top_k": 10})
    return [chunk["text"] for chunk in found["results"]]


async def test_create_add_search_read_update_remove(live_openwebui: Instance) -> None:
    release = Release.parse(live_openwebui.version)
    async with stdio_session(live_openwebui) as server:
        created = await server.ok("knowledge_create", {"name": f"write-{uuid.uuid4().hex[:8]}", "description": "w"})
        knowledge_id = created["knowledge_id"]

        text = f"# Notes\n\nThe {OLD_WORD} is a fictional instrument used in this test."
        metadata = {"author": "live test", "url": "https://example.com/notes"}
        added = await server.ok(
            "knowledge_add", {"knowledge_id": knowledge_id, "text": text, "title": TITLE, "metadata": metadata}
        )
        file_id = added["file_id"]
        assert added["title"] == TITLE
        assert added["status"] == "completed"
        assert files_of(live_openwebui, knowledge_id) == {file_id}

        listed = await server.ok("knowledge_files", {"knowledge_id": knowledge_id})
        (item,) = listed["items"]
        assert item["filename"] == added["filename"]
        if release.capabilities.upload_metadata:
            assert item["title"] == TITLE  # the Cyrillic/CJK title round-trips through the upload metadata

        found = await server.ok("knowledge_search", {"query": OLD_WORD, "knowledge_ids": [knowledge_id]})
        assert found["results"][0]["file_id"] == file_id
        assert OLD_WORD in found["results"][0]["text"]

        read = await server.ok("knowledge_get_file", {"file_id": file_id})
        assert OLD_WORD in read["text"]

        new_text = f"# Notes\n\nThe {NEW_WORD} replaced the old instrument entirely."
        updated = await server.ok(
            "knowledge_update", {"file_id": file_id, "text": new_text, "knowledge_id": knowledge_id}
        )
        assert updated["shared_file"] is True
        assert any(NEW_WORD in t for t in await texts_found(server, knowledge_id, NEW_WORD))
        assert not any(OLD_WORD in t for t in await texts_found(server, knowledge_id, OLD_WORD))
        assert NEW_WORD in (await server.ok("knowledge_get_file", {"file_id": file_id}))["text"]

        is_error, removed = await server.call("knowledge_delete", {"knowledge_id": knowledge_id, "file_id": file_id})
        if release.capabilities.keep_file_on_remove:
            assert not is_error, removed
            assert removed["file_kept"] is True
            assert files_of(live_openwebui, knowledge_id) == set()
        else:  # this release would delete the file: refused, and nothing changed
            assert is_error
            assert removed["code"] == "unsupported"
            assert removed["outcome"] == "not_applied"
            assert files_of(live_openwebui, knowledge_id) == {file_id}
        assert file_exists(live_openwebui, file_id)


async def test_duplicate_text_and_unknown_base(live_openwebui: Instance) -> None:
    async with stdio_session(live_openwebui) as server:
        created = await server.ok("knowledge_create", {"name": f"dup-{uuid.uuid4().hex[:8]}", "description": ""})
        knowledge_id = created["knowledge_id"]
        text = f"The same words twice: {uuid.uuid4().hex}."
        first = await server.ok("knowledge_add", {"knowledge_id": knowledge_id, "text": text, "title": "one"})

        before = owui.file_ids(live_openwebui)
        is_error, body = await server.call(
            "knowledge_add", {"knowledge_id": knowledge_id, "text": text, "title": "two"}
        )
        assert is_error
        assert body["code"] == "duplicate_content"
        assert body["stage"] in ("process", "attach")
        # The second copy was uploaded, refused, and removed again: nothing is left, so nothing was applied.
        assert body["file_id"] is None, body
        assert body["outcome"] == "not_applied", body
        assert owui.file_ids(live_openwebui) == before
        assert files_of(live_openwebui, knowledge_id) == {first["file_id"]}
        if hash_of(live_openwebui, knowledge_id, first["file_id"]):  # the release lists hashes: the holder is named
            assert body["existing_file_id"] == first["file_id"], body
        else:
            assert body["existing_file_id"] in (first["file_id"], None)

        before = all_file_ids(live_openwebui)
        missing = str(uuid.uuid4())
        is_error, body = await server.call("knowledge_add", {"knowledge_id": missing, "text": "orphan?", "title": "x"})
        assert is_error
        assert body["code"] == "not_found"
        assert body["outcome"] == "not_applied"
        assert body["file_id"] is None
        assert all_file_ids(live_openwebui) == before  # no orphan file left behind
