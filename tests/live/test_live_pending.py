"""`knowledge_files(pending=N)` against a real Open WebUI of every release (issue 17, part 6): a file uploaded the way
Open WebUI's own interface and `oikb` upload it (0.9.6+: `metadata.knowledge_id`, linked by Open WebUI once
processed) is listed while it processes and waited for until the base holds it; before 0.9.6 nothing of a base is
pending; a second user learns nothing of a base it cannot read."""

from __future__ import annotations

import uuid

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio

LINKS_ITSELF = (0, 9, 6)


async def test_pending_uploads_are_waited_for_until_the_base_holds_them(
    live_openwebui: Instance, live_user: User
) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    base = owui.create_knowledge(inst, f"pending-{tag}", "uploads that link themselves", private=True)
    links_itself = owui.version_parts(inst.version) >= LINKS_ITSELF
    uploaded: list[str] = []
    async with stdio_session(inst) as admin:
        if links_itself:
            # Large enough (thousands of chunks to embed) that its processing outlasts the next request.
            text = f"# Handbook {tag}\n\n" + "".join(
                f"Rule {n}: pending note {tag} number {n}.\n" for n in range(20_000)
            )
            files = {"file": ("handbook.md", text.encode(), "text/markdown")}
            with owui.client(inst) as http:
                answer = http.post("/api/v1/files/", files=files, data={"metadata": f'{{"knowledge_id": "{base}"}}'})
            assert answer.status_code == 200, answer.text
            uploaded.append(answer.json()["id"])
            now = await admin.ok("knowledge_files", {"knowledge_id": base, "pending": 0})
            assert [(item["file_id"], item["filename"]) for item in now["items"]] == [(uploaded[0], "handbook.md")]
            assert now["items"][0]["status"] in ("pending", "processing"), now
            assert "1 not searchable yet" in now["hint"], now
        waited = await admin.ok("knowledge_files", {"knowledge_id": base, "pending": 600})
        listed = await admin.ok("knowledge_files", {"knowledge_id": base})
    assert (waited["total"], waited["items"]) == (0, []), waited
    assert waited["hint"] == "nothing is processing: every document of the base is searchable"
    assert {item["file_id"] for item in listed["items"]} == set(uploaded)
    assert all(item["status"] is None for item in listed["items"])

    async with stdio_session(inst, api_key=live_user.api_key) as user:
        hidden = await user.call("knowledge_files", {"knowledge_id": base, "pending": 0})
    assert hidden[0], hidden
    assert hidden[1]["code"] in ("not_found", "forbidden"), hidden
