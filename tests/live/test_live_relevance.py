"""`knowledge_search`'s `min_score` against a real Open WebUI of every release (issue 17, part 4): the threshold keeps
what reaches it, says "nothing above the threshold" with the best score when nothing does, and tells a second user
nothing of a base it cannot read."""

from __future__ import annotations

import uuid

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio


async def test_a_threshold_keeps_what_reaches_it_and_says_when_nothing_does(
    live_openwebui: Instance, live_user: User
) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    base = owui.create_knowledge(inst, f"relevance-{tag}", "thresholds", private=True)
    for name, text in (
        ("rota.md", f"# On-call rota {tag}\n\nThe on-call engineer answers pages within ten minutes."),
        ("lunch.md", f"# Lunch {tag}\n\nThe canteen serves soup on Fridays."),
    ):
        owui.add_file(inst, base, owui.upload_text(inst, name, text))
    query = {"query": f"on-call rota {tag} pages", "knowledge_ids": [base]}
    async with stdio_session(inst) as admin:
        everything = await admin.ok("knowledge_search", query)
        scores = sorted((hit["distance"] for hit in everything["results"]), reverse=True)
        assert len(scores) >= 2, everything
        kept = await admin.ok("knowledge_search", {**query, "min_score": scores[0]})
        too_high = await admin.call("knowledge_search", {**query, "min_score": scores[0] + 1})
    assert kept["count"] >= 1
    assert all(hit["distance"] >= scores[0] for hit in kept["results"])
    assert kept["count"] < everything["count"] or scores[0] == scores[-1]
    is_error, body = too_high
    assert is_error, body
    assert body["code"] == "not_found", body
    assert "nothing above the threshold" in body["message"], body
    assert f"the best scored {scores[0]:g}" in body["message"], body

    # A base the user cannot read is refused before any search: no score, no title of it reaches the user.
    async with stdio_session(inst, api_key=live_user.api_key) as user:
        hidden = await user.call("knowledge_search", {**query, "min_score": 100})
    assert hidden[0], hidden
    assert hidden[1]["code"] in ("not_found", "forbidden"), hidden
    assert "nothing above the threshold" not in hidden[1]["message"]
    assert "rota" not in hidden[1]["message"].lower()
