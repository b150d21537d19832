"""Beyond the tools, against a real Open WebUI: resources and the prompt over stdio, the doctor command, the
operator controls (allowlist, read-only mode) and the retrieval probe."""

from __future__ import annotations

import subprocess
import uuid
from typing import Any

import pytest
from mcp.types import TextResourceContents

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from tests.live.stdio import SCRIPT, server_env, stdio_session

pytestmark = pytest.mark.anyio

WORD = "glimmerquartz"


@pytest.fixture(scope="module")
def two_bases(live_openwebui: Instance) -> tuple[str, str, str]:
    """(allowed base, other base, file in the allowed base)."""
    allowed = owui.create_knowledge(live_openwebui, f"allowed-{uuid.uuid4().hex[:6]}", "the allowed one")
    other = owui.create_knowledge(live_openwebui, f"other-{uuid.uuid4().hex[:6]}", "outside the allowlist")
    file_id = owui.upload_text(live_openwebui, "gems.md", f"# Gems\n\nThe {WORD} is a fictional gem.")
    owui.add_file(live_openwebui, allowed, file_id)
    secret = owui.upload_text(live_openwebui, "secret.md", f"# Secret\n\nThe {WORD} vault code is hidden here.")
    owui.add_file(live_openwebui, other, secret)
    return allowed, other, file_id


def doctor(instance: Instance, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "doctor", *args],
        env={"PATH": "/usr/bin:/bin", **server_env(instance, **env)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_doctor_reports_and_exits_by_failure(live_openwebui: Instance, two_bases: tuple[str, str, str]) -> None:
    good = doctor(live_openwebui, "--deep")
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"release {live_openwebui.version}" in good.stdout
    assert "retrieval (embedding backend): OK" in good.stdout

    refused = doctor(live_openwebui, OPENWEBUI_API_KEY="sk-" + "1" * 32)
    assert refused.returncode == 4, refused.stdout
    assert "sk-" + "1" * 32 not in refused.stdout + refused.stderr

    unreachable = doctor(live_openwebui, OPENWEBUI_URL="http://127.0.0.1:9")
    assert unreachable.returncode == 3, unreachable.stdout


async def test_resources_and_prompt_over_stdio(live_openwebui: Instance, two_bases: tuple[str, str, str]) -> None:
    allowed, _, file_id = two_bases
    async with stdio_session(live_openwebui) as server:
        templates = await server.session.list_resource_templates()
        assert {t.uri_template for t in templates.resource_templates} == {
            "openwebui://knowledge/{knowledge_id}",
            "openwebui://file/{file_id}",
        }
        base = await server.session.read_resource(f"openwebui://knowledge/{allowed}")
        (content,) = base.contents
        assert isinstance(content, TextResourceContents)
        assert file_id in content.text
        assert "the allowed one" in content.text

        document = await server.session.read_resource(f"openwebui://file/{file_id}")
        (content,) = document.contents
        assert isinstance(content, TextResourceContents)
        assert WORD in content.text

        prompt = await server.session.get_prompt("knowledge_qa", {"question": "What is a gem?"})
        assert "knowledge_search" in str(prompt.messages[0].content)


async def test_allowlist_confines_every_tool(live_openwebui: Instance, two_bases: tuple[str, str, str]) -> None:
    allowed, other, file_id = two_bases
    async with stdio_session(live_openwebui, OPENWEBUI_KNOWLEDGE_IDS=allowed) as server:
        listed = await server.ok("knowledge_list", {})
        assert [item["knowledge_id"] for item in listed["items"]] == [allowed]

        everywhere = await server.ok("knowledge_search", {"query": WORD})
        assert everywhere["knowledge_ids"] == [allowed]
        assert all("vault" not in chunk["text"] for chunk in everywhere["results"])

        refusals: list[tuple[str, dict[str, Any]]] = [
            ("knowledge_search", {"query": WORD, "knowledge_ids": [other]}),
            ("knowledge_files", {"knowledge_id": other}),
            ("knowledge_files", {"knowledge_id": str(uuid.uuid4())}),
        ]
        for tool, args in refusals:
            is_error, body = await server.call(tool, args)
            assert is_error
            assert body["code"] == "not_found"  # the same answer whether the base exists or not

        with owui.client(live_openwebui) as http:
            files_of_other = http.get(f"/api/v1/knowledge/{other}").json()
        other_file = (files_of_other.get("files") or [{}])[0].get("id")
        if other_file:  # releases that nest files show it directly; newer ones need the files endpoint
            is_error, body = await server.call("knowledge_get_file", {"file_id": other_file})
            assert is_error
            assert body["code"] == "not_found"
        assert not (await server.call("knowledge_get_file", {"file_id": file_id}))[0]

        is_error, body = await server.call("knowledge_create", {"name": "not allowed"})
        assert is_error
        assert body["code"] == "forbidden"
        assert body["outcome"] == "not_applied"

        health = await server.ok("knowledge_health", {})
        assert health["controls"]["knowledge_ids"] == [allowed]


async def test_read_only_mode_registers_no_write_tool(live_openwebui: Instance) -> None:
    async with stdio_session(live_openwebui, OPENWEBUI_READ_ONLY="true") as server:
        names = {tool.name for tool in (await server.session.list_tools()).tools}
        assert names == {
            "knowledge_list",
            "knowledge_files",
            "knowledge_search",
            "knowledge_get_file",
            "knowledge_find",
            "knowledge_health",
            "rag_list_knowledge",
            "rag_search",
            "rag_get_file",
            "rag_health",
        }
        health = await server.ok("knowledge_health", {"deep": True})
        assert health["controls"]["read_only"] is True
        assert health["retrieval_ok"] in (True, None)
