"""`knowledge_rename` (issue 17, part 7): a base's name and description change, its documents and sharing never do;
refused before 0.8, where Open WebUI's update form rewrites a base's sharing with its name."""

from __future__ import annotations

import json
from typing import Any

import pytest
import respx
from mcp import Client

from openwebui_rag_mcp.server import create_server
from tests.conftest import make_settings, mock_transport

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"
UPDATE = f"/api/v1/knowledge/{KB}/update"


def upstream(router: respx.Router, version: str, *, write_access: bool | None = True) -> respx.Route:
    router.get("/api/version").respond(json={"version": version})
    base: dict[str, Any] = {"id": KB, "name": "Fruit", "description": "All about fruit", "user_id": "u"}
    if write_access is not None:
        base["write_access"] = write_access
    router.get(f"/api/v1/knowledge/{KB}").respond(json={**base, "files": None})

    def renamed(request: Any) -> Any:
        form = json.loads(request.content)
        return respx.MockResponse(200, json={**base, **form, "files": []})

    return router.post(UPDATE).mock(side_effect=renamed)


async def rename(router: respx.Router, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    server = create_server(make_settings(), transport=mock_transport(router))
    async with Client(server, raise_exceptions=True) as client:
        result = await client.call_tool("knowledge_rename", {"knowledge_id": KB, **arguments})
    assert isinstance(result.structured_content, dict)
    return bool(result.is_error), result.structured_content


@pytest.mark.parametrize("version", ["0.8.12", "0.12.4"])
async def test_a_new_name_keeps_the_description_and_sends_no_sharing(router: respx.Router, version: str) -> None:
    update = upstream(router, version)
    failed, body = await rename(router, name="  Fruit and berries ")
    assert not failed, body
    assert body == {"ok": True, "knowledge_id": KB, "name": "Fruit and berries", "description": "All about fruit"}
    # Only name and description: without access_grants, 0.8 and later leave the base's sharing as it is.
    assert json.loads(update.calls.last.request.content) == {
        "name": "Fruit and berries",
        "description": "All about fruit",
    }


async def test_a_new_description_keeps_the_name(router: respx.Router) -> None:
    update = upstream(router, "0.12.4")
    failed, body = await rename(router, description="")
    assert not failed, body
    assert json.loads(update.calls.last.request.content) == {"name": "Fruit", "description": ""}


@pytest.mark.parametrize("version", ["0.6.5", "0.6.43", "0.7.2"])
async def test_before_0_8_renaming_is_refused_and_nothing_is_sent(router: respx.Router, version: str) -> None:
    update = upstream(router, version)
    failed, body = await rename(router, name="Renamed")
    assert failed
    assert (body["code"], body["stage"], body["outcome"]) == ("unsupported", "rename", "not_applied")
    assert "sharing" in body["message"]
    assert update.call_count == 0


async def test_a_base_shared_read_only_is_forbidden_and_nothing_is_sent(router: respx.Router) -> None:
    update = upstream(router, "0.12.4", write_access=False)
    failed, body = await rename(router, name="Renamed")
    assert failed
    assert (body["code"], body["stage"], body["outcome"]) == ("forbidden", "rename", "not_applied")
    assert update.call_count == 0


async def test_a_failed_update_says_it_may_have_applied(router: respx.Router) -> None:
    upstream(router, "0.12.4")
    router.post(UPDATE).respond(500, json={"detail": "Internal Server Error"})
    failed, body = await rename(router, name="Renamed")
    assert failed
    assert (body["code"], body["stage"], body["outcome"]) == ("upstream_error", "rename", "partial_or_unknown")
    assert body["retryable"] is False
