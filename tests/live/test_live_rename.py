"""`knowledge_rename` against a real Open WebUI of every release (issue 17, part 7): from 0.8 the name and
description change and the documents and sharing stay (a private base stays unreadable to a plain user, a base shared
read-only stays readable and not renamable by that user); before 0.8 it is refused and the base is unchanged."""

from __future__ import annotations

import uuid

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio

RENAMES_SAFELY = (0, 8, 0)


async def test_rename_changes_the_name_and_nothing_else(live_openwebui: Instance, live_user: User) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    private = owui.create_knowledge(inst, f"rename-private-{tag}", "the admin's own", private=True)
    document = owui.upload_text(inst, "plan.md", f"# Plan\n\nThe plan {tag}.")
    owui.add_file(inst, private, document)
    shared = owui.create_knowledge(inst, f"rename-shared-{tag}", "readable by the user", private=True)
    owui.share_read(inst, shared, live_user)
    supported = owui.version_parts(inst.version) >= RENAMES_SAFELY

    async with stdio_session(inst) as admin:
        renamed = await admin.call("knowledge_rename", {"knowledge_id": private, "name": f"renamed-{tag}"})
        described = await admin.call("knowledge_rename", {"knowledge_id": shared, "description": f"shared {tag}"})
        listed = await admin.ok("knowledge_list", {"query": tag})
    names = {item["knowledge_id"]: (item["name"], item["description"]) for item in listed["items"]}
    if supported:
        assert not renamed[0], renamed
        assert renamed[1]["name"] == f"renamed-{tag}"
        assert names[private] == (f"renamed-{tag}", "the admin's own")
        assert not described[0], described
        assert names[shared] == (f"rename-shared-{tag}", f"shared {tag}")
    else:
        for is_error, body in (renamed, described):
            assert (is_error, body["code"], body["outcome"]) == (True, "unsupported", "not_applied")
        assert names[private] == (f"rename-private-{tag}", "the admin's own")
        assert names[shared] == (f"rename-shared-{tag}", "readable by the user")

    # Whatever happened, the documents and the sharing are as they were.
    assert owui.files_of(inst, private) == {document}
    readable = owui.knowledge_ids(inst, live_user.api_key)
    assert private not in readable
    assert shared in readable
    async with stdio_session(inst, api_key=live_user.api_key) as user:
        refused = await user.call("knowledge_rename", {"knowledge_id": shared, "name": f"taken-{tag}"})
        hidden = await user.call("knowledge_rename", {"knowledge_id": private, "name": f"taken-{tag}"})
    assert refused[0] is True
    assert refused[1]["code"] == ("forbidden" if supported else "unsupported"), refused
    assert (hidden[0], hidden[1]["outcome"]) == (True, "not_applied")
    assert owui.knowledge_ids(inst, live_user.api_key).count(shared) == 1
