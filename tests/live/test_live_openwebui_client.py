"""Open WebUI 0.12.4 itself as the MCP client of this server, with "Session" authentication.

The chain (``../shared/reference/openwebui-as-mcp-client.md``): this server over HTTP (per-caller credentials) and
a scripted OpenAI-compatible model on loopback; the admin registers the server as an MCP tool server with
``auth_type: "session"`` through Open WebUI's API (verified first), plus an OpenAI connection to the scripted model
and a model entry a normal user may use. The second user then runs one chat completion: the model asks for the tool
whose name ends in ``knowledge_search`` on the first turn and echoes the tool's answer on the second. The stored
answer must hold this server's search result from that user's own private base, and nothing from the admin's private
base, which matches the same query: so the search ran with the user's own token, which Open WebUI forwarded, not
with anything the server holds. Open WebUI's configuration is restored afterwards and compared with the snapshot.

0.12.4 only (issue 11); on other releases the test passes without doing anything.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from devtools import openwebui_local as owui
from devtools import replicas
from devtools.openwebui_local import Instance, User
from tests.live.http import ScriptedModel, access_lines, access_lines_when, not_on_this_release, scripted_model

RELEASES = ("0.12.4",)
WHY = "Open WebUI as the MCP client is tested on the newest release (issue 11)"
SERVER_ID = "ragmcp"  # tool names become ragmcp_<tool>: short, within [A-Za-z0-9_-]
MODEL_ID = "scripted-mcp"


def admin_http(inst: Instance) -> httpx.Client:
    """The admin's session token: the configuration endpoints are for admins signed in (reference §1.1)."""
    return httpx.Client(
        base_url=inst.url, headers={"Authorization": f"Bearer {inst.token}"}, timeout=120.0, trust_env=False
    )


def user_http(inst: Instance, user: User) -> httpx.Client:
    """The user as a browser would be: its session token (JWT), which "Session" authentication forwards."""
    return httpx.Client(
        base_url=inst.url, headers={"Authorization": f"Bearer {user.token}"}, timeout=120.0, trust_env=False
    )


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, f"{response.request.method} {response.request.url}: {response.text[:1000]}"
    return response.json()


@contextmanager
def configured(inst: Instance, model: ScriptedModel, connection: dict[str, Any]) -> Iterator[None]:
    """The OpenAI connection to ``model``, a model entry any user may use and the MCP ``connection``, for the
    duration of the block; Open WebUI's own configuration is put back afterwards and checked."""
    with admin_http(inst) as http:
        openai_before = ok(http.get("/openai/config"))
        servers_before = ok(http.get("/api/v1/configs/tool_servers"))
        try:
            ok(
                http.post(
                    "/openai/config/update",
                    json={
                        "ENABLE_OPENAI_API": True,
                        "OPENAI_API_BASE_URLS": [model.base_url],
                        "OPENAI_API_KEYS": ["sk-scripted"],
                        "OPENAI_API_CONFIGS": {"0": {"enable": True}},
                    },
                )
            )
            entry = {
                "id": MODEL_ID,
                "base_model_id": None,
                "name": "Scripted MCP",
                "meta": {"description": "asks for knowledge_search, then echoes the result"},
                "params": {"function_calling": "native"},
                "access_grants": [{"principal_type": "user", "principal_id": "*", "permission": "read"}],
                "is_active": True,
            }
            ok(http.post("/api/v1/models/create", json=entry))
            listed = [*servers_before["TOOL_SERVER_CONNECTIONS"], connection]
            ok(http.post("/api/v1/configs/tool_servers", json={"TOOL_SERVER_CONNECTIONS": listed}))
            yield
        finally:
            restored_servers = http.post("/api/v1/configs/tool_servers", json=servers_before)
            removed = http.post("/api/v1/models/model/delete", json={"id": MODEL_ID})
            restored_openai = http.post("/openai/config/update", json=openai_before)
            for answer in (restored_servers, removed, restored_openai):
                assert answer.status_code == 200, f"could not restore Open WebUI's configuration: {answer.text}"
            assert ok(http.get("/api/v1/configs/tool_servers")) == servers_before
            assert ok(http.get("/openai/config")) == openai_before


def test_open_webui_runs_this_servers_search_with_the_users_own_token(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    inst = cast(Instance, request.getfixturevalue("live_openwebui"))
    user = cast(User, request.getfixturevalue("live_user"))
    tag = uuid.uuid4().hex[:8]
    # The query is the user's word; the admin's private document holds it too, plus a mark that is never sent.
    user_word, leak_mark = f"lanternmoss{tag}", f"zorbanatrix{tag}"

    # The user's private base, and the admin's, both matching the query the user will send.
    own = owui.create_knowledge(inst, f"owui-client-user-{tag}", "the user's", private=True, api_key=user.api_key)
    own_file = owui.upload_text(inst, "mine.md", f"# Mine\n\nThe {user_word} glows.", api_key=user.api_key)
    owui.add_file(inst, own, own_file, api_key=user.api_key)
    theirs = owui.create_knowledge(inst, f"owui-client-admin-{tag}", "the admin's", private=True)
    their_file = owui.upload_text(inst, "admin.md", f"# Admin\n\nThe {user_word} ledger holds {leak_mark}.")
    owui.add_file(inst, theirs, their_file)
    assert theirs not in owui.knowledge_ids(inst, user.api_key), "harness: the admin's base is readable by the user"

    server = replicas.start_server({"OPENWEBUI_URL": inst.url, "OPENWEBUI_TIMEOUT": "60"}, tmp_path / "server.log")
    url = f"{server.url}/mcp"
    connection = {
        "type": "mcp",
        "url": url,
        "path": "",
        "auth_type": "session",
        "key": "",
        "config": {
            "enable": True,
            "access_grants": [{"principal_type": "user", "principal_id": user.user_id, "permission": "read"}],
        },
        "info": {"id": SERVER_ID, "name": "openwebui-rag-mcp", "description": "knowledge bases over MCP"},
    }
    try:
        with scripted_model() as model:
            with admin_http(inst) as http:  # verify first: connects, lists the tools, stores nothing
                verified = ok(http.post("/api/v1/configs/tool_servers/verify", json=connection))
            assert verified["status"] is True, verified
            assert "knowledge_search" in {spec["name"] for spec in verified["specs"]}

            with configured(inst, model, connection), user_http(inst, user) as http:
                tools = ok(http.get("/api/v1/tools/"))
                assert f"server:mcp:{SERVER_ID}" in {tool["id"] for tool in tools}, tools
                specs = ok(http.get(f"/api/v1/tools/id/server:mcp:{SERVER_ID}/specs"))
                assert "knowledge_search" in {spec["name"] for spec in specs["specs"]}

                chat_id = ok(http.post("/api/v1/chats/new", json={"chat": {}}))["id"]
                message_id = str(uuid.uuid4())
                log_before = len(access_lines(server.log()))
                body = {
                    "model": MODEL_ID,
                    "messages": [{"role": "user", "content": user_word}],
                    "tool_ids": [f"server:mcp:{SERVER_ID}"],
                    "stream": True,
                    "chat_id": chat_id,
                    "id": message_id,
                }
                with http.stream("POST", "/api/chat/completions", json=body) as streamed:
                    streamed.read()
                    assert streamed.status_code == 200, streamed.text
                chat = ok(http.get(f"/api/v1/chats/{chat_id}"))
    finally:
        server.stop()

    message = chat["chat"]["history"]["messages"][message_id]
    content: str = message["content"]
    failures = [status for status in message.get("statusHistory") or [] if status.get("error")]
    assert not failures, failures
    assert content.startswith("ECHO: "), content
    assert own_file in content, content  # this server's search result, from the user's own base
    assert user_word in content
    assert leak_mark not in content, "the search ran with a credential that reads the admin's private base"
    assert their_file not in content

    offered = [tool["function"]["name"] for tool in model.requests[0].get("tools") or []]
    assert f"{SERVER_ID}_knowledge_search" in offered, offered
    tool_messages = [m for m in model.requests[-1]["messages"] if m.get("role") == "tool"]
    assert tool_messages, model.requests[-1]
    result = json.loads(tool_messages[-1]["content"])  # Open WebUI re-serialises JSON text; still the same result
    found = [chunk["file_id"] for chunk in result["results"]]
    assert found[0] == own_file, result  # the only document with the user's word the user may read
    assert their_file not in found
    assert own in result["knowledge_ids"]
    assert theirs not in result["knowledge_ids"]

    calls = '"POST /mcp" 200'
    during = access_lines_when(server.log, lambda lines: sum(calls in line for line in lines[log_before:]) >= 3)
    during = during[log_before:]
    assert sum(calls in line for line in during) >= 3, during  # discover, tools/list, tools/call
    assert not any('"POST /mcp" 401' in line for line in during), during
    for secret in (user.token, user.api_key, inst.token, inst.api_key):
        assert secret not in server.log()
