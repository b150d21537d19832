"""The read tools over stdio against a real Open WebUI, seeded through Open WebUI's own API."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from openwebui_rag_mcp.compat import Release
from tests.live.stdio import stdio_session

pytestmark = pytest.mark.anyio

RARE = "zyxquokkaflux"
DOCS = {
    "apples.md": "# Apples\n\nApples are red or green fruits that grow on trees in orchards.",
    "bananas.md": f"# Bananas\n\nBananas are long yellow fruits. The {RARE} cultivar is rare.",
    "cherries.md": "# Cherries\n\nCherries are small stone fruits, usually dark red.",
    "moscow.md": "# Москва\n\nМосква — столица России, крупнейший город страны.",
    "beijing.md": "# 北京\n\n北京是中华人民共和国的首都。",
}


@dataclass(frozen=True)
class Seeded:
    knowledge_id: str
    name: str
    file_ids: dict[str, str]


@pytest.fixture(scope="module")
def seeded(live_openwebui: Instance) -> Seeded:
    name = f"read-{uuid.uuid4().hex[:8]}"
    knowledge_id = owui.create_knowledge(live_openwebui, name, "fruit and cities for the read tests")
    file_ids: dict[str, str] = {}
    for filename, text in DOCS.items():
        file_id = owui.upload_text(live_openwebui, filename, text)
        owui.add_file(live_openwebui, knowledge_id, file_id)
        file_ids[filename] = file_id
    return Seeded(knowledge_id, name, file_ids)


async def test_list_files_search_and_read(live_openwebui: Instance, seeded: Seeded) -> None:
    async with stdio_session(live_openwebui) as server:
        # By name: the session's other tests make many bases, and a list answers 30 at a time.
        listed = await server.ok("knowledge_list", {"query": seeded.name})
        assert listed["total"] == listed["count"] == 1
        base = next(item for item in listed["items"] if item["knowledge_id"] == seeded.knowledge_id)
        assert base["name"] == seeded.name
        # Lists of 0.6.42 to 0.10 carry neither the files nor a count; 0.6.41 and older embed the files, 0.11+ count.
        parts = Release.parse(live_openwebui.version).parts
        assert base["file_count"] == (None if (0, 6, 42) <= parts < (0, 11, 0) else len(DOCS))

        files = await server.ok("knowledge_files", {"knowledge_id": seeded.knowledge_id})
        assert sorted(item["file_id"] for item in files["items"]) == sorted(seeded.file_ids.values())
        assert files["count"] == files["total"] == len(DOCS)
        assert {item["filename"] for item in files["items"]} == set(DOCS)

        query = {"query": f"{RARE} bananas", "knowledge_ids": [seeded.knowledge_id]}
        found = await server.ok("knowledge_search", query)
        assert found["knowledge_ids"] == [seeded.knowledge_id]
        first = found["results"][0]
        assert first["file_id"] == seeded.file_ids["bananas.md"]
        assert RARE in first["text"]
        assert first["knowledge_id"] == seeded.knowledge_id
        assert "embedding_config" not in first["metadata"]

        text = await server.ok("knowledge_get_file", {"file_id": seeded.file_ids["bananas.md"]})
        assert RARE in text["text"]
        assert text["truncated"] is False
        assert text["total_chars"] == len(text["text"])


async def test_aliases_search_all_bases_and_multilingual(live_openwebui: Instance, seeded: Seeded) -> None:
    async with stdio_session(live_openwebui) as server:
        listed = await server.ok("rag_list_knowledge", {"query": seeded.name.upper()})
        assert seeded.knowledge_id in {item["knowledge_id"] for item in listed["items"]}

        everywhere = await server.ok("rag_search", {"query": "Москва столица", "top_k": 3})
        assert seeded.knowledge_id in everywhere["knowledge_ids"]
        assert everywhere["results"][0]["file_id"] == seeded.file_ids["moscow.md"]
        assert "Москва" in everywhere["results"][0]["text"]

        chinese = await server.ok("knowledge_search", {"query": "北京首都", "knowledge_ids": [seeded.knowledge_id]})
        assert chinese["results"][0]["file_id"] == seeded.file_ids["beijing.md"]

        nothing = await server.ok("knowledge_search", {"query": "anything", "knowledge_ids": []})
        assert nothing == {"query": "anything", "knowledge_ids": [], "results": [], "count": 0}

        cut = await server.ok("rag_get_file", {"file_id": seeded.file_ids["apples.md"], "max_chars": 10})
        assert cut["truncated"] is True
        assert len(cut["text"]) == 10
        assert cut["next_offset"] == 10


async def test_failures_are_structured_and_the_session_goes_on(live_openwebui: Instance, seeded: Seeded) -> None:
    async with stdio_session(live_openwebui) as server:
        is_error, body = await server.call("knowledge_get_file", {"file_id": str(uuid.uuid4())})
        assert is_error
        assert body["ok"] is False
        assert body["code"] == "not_found"

        is_error, body = await server.call("knowledge_files", {"knowledge_id": str(uuid.uuid4())})
        assert is_error
        assert body["code"] == "not_found"

        health = await server.ok("rag_health", {})
        assert health["openwebui_version"] == live_openwebui.version
        assert health["knowledge_bases_visible"] >= 1
        assert live_openwebui.api_key not in server.stderr.read_text()


async def test_wrong_key_is_an_auth_error(live_openwebui: Instance) -> None:
    async with stdio_session(live_openwebui, OPENWEBUI_API_KEY="sk-" + "0" * 32) as server:
        is_error, body = await server.call("knowledge_health", {})
        assert is_error
        assert body["code"] == "auth"
        assert body["http_status"] in (401, 403)
