"""The live harness itself: Open WebUI starts, the admin key works, and seeding plus retrieval behave."""

from __future__ import annotations

import uuid

import httpx

from devtools import openwebui_local
from devtools.openwebui_local import Instance, User

RARE_DOC = """# Field notes

The zyxwombat burrows under the eucalyptus grove and only comes out at dusk.
Rangers counted three of them near the northern creek this spring.
"""

PLAIN_DOC = """# Release checklist

Update the changelog, bump the version number, tag the commit and publish the package.
Remember to announce the release on the mailing list.
"""


def test_version_endpoint_reports_the_started_release(live_openwebui: Instance) -> None:
    response = httpx.get(f"{live_openwebui.url}/api/version", trust_env=False)
    assert response.status_code == 200
    assert response.json()["version"] == live_openwebui.version


def test_api_key_is_accepted(live_openwebui: Instance) -> None:
    assert live_openwebui.api_key.startswith("sk-")
    with openwebui_local.client(live_openwebui) as http:
        response = http.get("/api/v1/knowledge/")
    assert response.status_code == 200
    assert "json" in response.headers["content-type"]


def test_seeded_knowledge_base_ranks_the_rare_word_document_first(live_openwebui: Instance) -> None:
    kb_id = openwebui_local.create_knowledge(live_openwebui, "Harness base", "seeded by the live harness test")
    rare_id = openwebui_local.upload_text(live_openwebui, "field-notes.md", RARE_DOC, {"source_tag": "harness"})
    plain_id = openwebui_local.upload_text(live_openwebui, "release-checklist.md", PLAIN_DOC)
    openwebui_local.add_file(live_openwebui, kb_id, rare_id)
    openwebui_local.add_file(live_openwebui, kb_id, plain_id)

    result = openwebui_local.query_collection(live_openwebui, [kb_id], "zyxwombat", k=5)

    documents = result["documents"][0]
    metadatas = result["metadatas"][0]
    distances = result["distances"][0]
    assert len(documents) >= 2
    assert "zyxwombat" in documents[0]
    assert all("zyxwombat" not in doc for doc in documents[1:])
    assert metadatas[0].get("file_id") == rare_id
    assert {meta.get("file_id") for meta in metadatas} == {rare_id, plain_id}
    assert distances[0] > distances[1]  # similarity, higher is better (0.6.x and later)

    # A single file can also be queried through its own collection.
    single = openwebui_local.query_collection(live_openwebui, [f"file-{plain_id}"], "changelog version", k=3)
    assert single["documents"][0]
    assert "changelog" in single["documents"][0][0]


def test_second_user_is_a_plain_user_and_a_share_is_read_only(live_openwebui: Instance, live_user: User) -> None:
    inst, key = live_openwebui, live_user.api_key
    assert key.startswith("sk-")
    assert key != inst.api_key
    with openwebui_local.client(inst, key) as http:
        assert http.get("/api/v1/users/").status_code in (401, 403)  # an admin-only route refuses the user

    private = openwebui_local.create_knowledge(inst, f"harness-share-{uuid.uuid4().hex[:8]}", "", private=True)
    assert private not in openwebui_local.knowledge_ids(inst, key)
    file_id = openwebui_local.upload_text(inst, "shared.md", f"# Shared\n\nShared with the user: {uuid.uuid4().hex}.")
    openwebui_local.add_file(inst, private, file_id)

    openwebui_local.share_read(inst, private, live_user)  # raises unless the user's own key now reads it

    assert private in openwebui_local.knowledge_ids(inst, key)
    assert openwebui_local.files_of(inst, private, key) == {file_id}
    with openwebui_local.client(inst, key) as http:
        refused = http.post(f"/api/v1/knowledge/{private}/update", json={"name": "renamed", "description": ""})
    assert refused.status_code in (400, 401, 403), refused.text  # read-only: Open WebUI refuses the user's write
    assert openwebui_local.files_of(inst, private) == {file_id}
