"""Filters on a real Open WebUI of every release (issue 17, part 3): equality on the metadata given at upload and a
window on when a document changed, for `knowledge_search` and `knowledge_files`; a plain user's filter never reaches
a base it cannot read."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from openwebui_rag_mcp.compat import Release
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio


async def test_search_and_lists_narrowed_by_metadata_and_time(live_openwebui: Instance) -> None:
    tag = uuid.uuid4().hex[:8]
    started = datetime.now(UTC) - timedelta(minutes=5)  # Open WebUI runs on this machine's clock
    knowledge_id = owui.create_knowledge(live_openwebui, f"filters-{tag}", "documents by team")
    keeps_metadata = Release.parse(live_openwebui.version).capabilities.upload_metadata
    async with stdio_session(live_openwebui) as server:
        ids: dict[str, str] = {}
        for team in ("ops", "dev", ""):
            added = await server.ok(
                "knowledge_add",
                {
                    "knowledge_id": knowledge_id,
                    "title": f"Rota {team or 'none'} {tag}",
                    "text": f"# Rota\n\nThe quillmoss rota {tag} of team {team or 'none'} starts on Monday.",
                    **({"metadata": {"team": team, "tag": tag}} if team else {}),
                },
            )
            ids[team] = str(added["file_id"])
        query = f"quillmoss rota {tag}"
        base = {"query": query, "knowledge_ids": [knowledge_id], "top_k": 10}

        by_team = await server.call("knowledge_search", {**base, "where": {"team": "ops", "tag": tag}})
        listed = await server.call("knowledge_files", {"knowledge_id": knowledge_id, "where": {"team": "dev"}})
        if keeps_metadata:
            assert not by_team[0], by_team
            assert {hit["file_id"] for hit in by_team[1]["results"]} == {ids["ops"]}
            assert all(hit["knowledge_id"] == knowledge_id for hit in by_team[1]["results"])
            assert not listed[0], listed
            assert [item["file_id"] for item in listed[1]["items"]] == [ids["dev"]]
        else:  # 0.6.5 keeps no upload metadata: refused, never answered as "no results"
            assert (by_team[0], by_team[1]["code"]) == (True, "unsupported")
            assert (listed[0], listed[1]["code"]) == (True, "unsupported")

        nobody = await server.call("knowledge_search", {**base, "where": {"team": "nobody"}})
        if keeps_metadata:
            assert (nobody[0], nobody[1]["code"]) == (True, "not_found")
            assert "nothing was searched" in nobody[1]["message"]

        recent = await server.ok("knowledge_search", {**base, "changed_after": started.isoformat()})
        assert {hit["file_id"] for hit in recent["results"]} == set(ids.values())
        future = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
        later = await server.call("knowledge_search", {**base, "changed_after": future})
        assert (later[0], later[1]["code"]) == (True, "not_found")
        window = await server.ok(
            "knowledge_files",
            {"knowledge_id": knowledge_id, "changed_after": started.isoformat(), "changed_before": future},
        )
        assert sorted(item["file_id"] for item in window["items"]) == sorted(ids.values())


async def test_a_plain_users_filter_stays_within_the_bases_it_may_read(
    live_openwebui: Instance, live_user: User
) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    private = owui.create_knowledge(inst, f"filter-private-{tag}", "the admin's, shared with nobody", private=True)
    secret = owui.upload_text(inst, "vault.md", f"# Vault\n\nThe quillmoss vault {tag}.", {"team": "ops"})
    owui.add_file(inst, private, secret)
    narrowed: dict[str, object] = {"changed_after": "2000-01-01"}
    if Release.parse(inst.version).capabilities.upload_metadata:
        narrowed["where"] = {"team": "ops"}
    async with stdio_session(inst, api_key=live_user.api_key) as server:
        searched = await server.call(
            "knowledge_search", {"query": f"quillmoss vault {tag}", "knowledge_ids": [private], **narrowed}
        )
        listed = await server.call("knowledge_files", {"knowledge_id": private, "changed_after": "2000-01-01"})
    assert (searched[0], searched[1]["code"]) == (True, "not_found")
    assert listed[0] is True
    assert secret not in str(searched) + str(listed)
