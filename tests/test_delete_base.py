"""`knowledge_delete_base` (issue 17, part 7): off unless the operator switches it on, and then only for a base the
key's own user created, named exactly in `confirm`. Open WebUI itself also lets admins and users with write access
delete a base; through this server they may not."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx
from mcp import Client

from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings, mock_transport, new_router

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
OWNER = "5b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
DELETE = f"/api/v1/knowledge/{KB}/delete"
ON = {"OPENWEBUI_ALLOW_DELETE_BASE": "true"}


def upstream(version: str = "0.12.4", *, created: bool = True, write_access: bool = True) -> respx.Router:
    router = new_router()
    router.get("/api/version").respond(json={"version": version})
    base: dict[str, Any] = {"id": KB, "name": "Фрукты", "description": "Всё о фруктах", "user_id": OWNER}
    if version != "0.6.5":
        base["write_access"] = write_access
    router.get(f"/api/v1/knowledge/{KB}").respond(json={**base, "files": None if version != "0.6.5" else []})
    router.get(f"/api/v1/knowledge/{KB}/files").respond(
        json={"items": [{"id": "f1", "meta": {}}, {"id": "f2", "meta": {}}], "total": 2}
    )
    mine = [{**base, "files": None}] if created else []
    router.get("/api/v1/knowledge/search").respond(json={"items": mine, "total": len(mine)})
    router.get("/api/v1/auths/").respond(json={"id": OWNER if created else "someone-else", "role": "admin"})
    router.delete(DELETE).respond(json=True)
    return router


async def delete(router: respx.Router, confirm: str = "Фрукты", **env: str) -> tuple[bool, dict[str, Any]]:
    server = create_server(make_settings(**{**ON, **env}), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        result = await client.call_tool("knowledge_delete_base", {"knowledge_id": KB, "confirm": confirm})
    assert isinstance(result.structured_content, dict)
    return result.is_error, result.structured_content


def sent(router: respx.Router) -> list[str]:
    return [f"{call.request.method} {call.request.url.path}" for call in router.calls]


@pytest.mark.parametrize("version", ["0.6.5", "0.6.43", "0.12.4"])
async def test_the_creator_deletes_a_base_named_exactly(version: str) -> None:
    router = upstream(version)
    is_error, body = await delete(router)
    assert (is_error, body["knowledge_id"], body["name"]) == (False, KB, "Фрукты")
    assert body["documents"] == 2 or version == "0.6.5"
    assert sent(router).count(f"DELETE {DELETE}") == 1
    # How the creator is told: the bases it created (0.6.42+, where 0.12 tells an API key nothing of its user), or
    # its user id before.
    asked = "GET /api/v1/auths/" if version == "0.6.5" else "GET /api/v1/knowledge/search"
    assert asked in sent(router)
    if version != "0.6.5":
        search = next(c.request for c in router.calls if c.request.url.path.endswith("/search"))
        assert (search.url.params["view_option"], search.url.params["query"]) == ("created", "Фрукты")


@pytest.mark.parametrize("confirm", ["фрукты", "Фрукты ", "", KB])
async def test_anything_but_the_exact_name_deletes_nothing(confirm: str) -> None:
    router = upstream()
    is_error, body = await delete(router, confirm)
    assert (is_error, body["code"]) == (True, "invalid_argument")
    assert "'Фрукты'" in body["message"]
    assert f"DELETE {DELETE}" not in sent(router)


@pytest.mark.parametrize("version", ["0.6.5", "0.12.4"])
async def test_a_base_someone_else_created_is_refused(version: str) -> None:
    """An admin key or an editor may delete it in Open WebUI; not through this server."""
    router = upstream(version, created=False)
    is_error, body = await delete(router)
    assert (is_error, body["code"], body["stage"], body["outcome"]) == (True, "forbidden", "delete", "not_applied")
    assert "not created by this key's user" in body["message"]
    assert f"DELETE {DELETE}" not in sent(router)


async def test_a_base_shared_read_only_is_refused() -> None:
    router = upstream(write_access=False)
    is_error, body = await delete(router)
    assert (is_error, body["code"], body["outcome"]) == (True, "forbidden", "not_applied")
    assert f"DELETE {DELETE}" not in sent(router)


async def test_an_answer_that_is_not_true_is_not_taken_for_a_deletion() -> None:
    router = upstream()
    router.delete(DELETE).respond(json={"detail": "maybe"})
    is_error, body = await delete(router)
    assert (is_error, body["code"], body["outcome"]) == (True, "unexpected_response", "partial_or_unknown")


async def test_read_only_mode_and_the_default_leave_it_out() -> None:
    for env in ({"OPENWEBUI_ALLOW_DELETE_BASE": "false"}, {**ON, "OPENWEBUI_READ_ONLY": "true"}, {}):
        server = create_server(make_settings(**env))
        async with Client(server) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
        assert "knowledge_delete_base" not in names, env
    server = create_server(make_settings(**ON))
    async with Client(server) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    hints = listed["knowledge_delete_base"].annotations
    assert hints is not None
    assert (hints.destructive_hint, hints.idempotent_hint) == (True, None)


async def test_an_unreadable_version_deletes_nothing() -> None:
    """A fork might ignore view_option=created and list every base."""
    router = upstream("main-branch")
    is_error, body = await delete(router)
    assert (is_error, body["code"], body["outcome"]) == (True, "unsupported", "not_applied")
    assert f"DELETE {DELETE}" not in sent(router)


async def test_a_created_list_with_several_owners_is_not_trusted() -> None:
    router = upstream()
    theirs = {"id": "other", "name": "Фрукты 2", "user_id": "someone-else"}
    mine = {"id": KB, "name": "Фрукты", "user_id": OWNER}
    router.get("/api/v1/knowledge/search").respond(json={"items": [mine, theirs], "total": 2})
    is_error, body = await delete(router)
    assert (is_error, body["code"]) == (True, "forbidden")
    assert f"DELETE {DELETE}" not in sent(router)


async def test_a_name_the_search_cannot_match_is_found_among_all_the_callers_bases() -> None:
    router = upstream()
    mine = {"id": KB, "name": "Фрукты", "user_id": OWNER}
    route = router.get("/api/v1/knowledge/search")
    route.side_effect = lambda request: httpx.Response(
        200,
        json={
            "items": [] if "query" in request.url.params else [mine],
            "total": 0 if "query" in request.url.params else 1,
        },
    )
    is_error, body = await delete(router)
    assert not is_error, body
    assert route.call_count == 2


async def test_a_base_without_a_name_cannot_be_confirmed() -> None:
    router = upstream()
    router.get(f"/api/v1/knowledge/{KB}").respond(json={"id": KB, "name": "", "user_id": OWNER, "write_access": True})
    is_error, body = await delete(router, "")
    assert (is_error, body["code"]) == (True, "invalid_argument")
    assert f"DELETE {DELETE}" not in sent(router)


async def test_a_session_cookie_open_webui_sets_is_never_sent_back() -> None:
    """GET /api/v1/auths/ mints a session for the key it was sent with; one client serves every caller."""
    router = upstream("0.6.5")
    router.get("/api/v1/auths/").respond(
        json={"id": OWNER, "role": "admin"}, headers={"Set-Cookie": "token=minted-session; Path=/; HttpOnly"}
    )
    is_error, body = await delete(router)
    assert not is_error, body
    after = [call.request for call in router.calls][-1]
    assert after.method == "DELETE"
    assert "cookie" not in after.headers
