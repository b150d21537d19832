"""Shared helpers for the unit tests: settings, a mocked Open WebUI (respx) and fixture bodies.

Nothing here touches the network: HTTP goes through `httpx.MockTransport(router.async_handler)`, injected into the
client or the server factory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from mcp.types import CallToolResult, TextContent

from openwebui_rag_mcp.config import Settings, Timings, load_settings

API_KEY = "sk-test-SECRET-0123456789abcdef"
BASE_URL = "http://owui.test"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_json(name: str) -> Any:
    """A recorded (trimmed) Open WebUI answer body from tests/fixtures."""
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


# The write path's and `pending`'s looks at Open WebUI every 10 to 20 ms (0.2 to 2 s in a real process): mocks answer
# at once.
FAST = Timings(poll_first=0.01, poll_max=0.02, pending_poll=0.01)


def make_settings(url: str = BASE_URL, **extra: str) -> Settings:
    """Settings as the server would load them from an environment with these variables (and `FAST`)."""
    settings = load_settings({"OPENWEBUI_URL": url, "OPENWEBUI_API_KEY": API_KEY, **extra})
    return dataclasses.replace(settings, timings=FAST)


def new_router(base_url: str = BASE_URL) -> respx.Router:
    return respx.Router(base_url=base_url, assert_all_called=False)


def mock_transport(router: respx.Router) -> httpx.MockTransport:
    return httpx.MockTransport(router.async_handler)


def assert_no_key(*texts: object) -> None:
    """The API key (or any long piece of it) appears in none of `texts`."""
    secret = API_KEY.removeprefix("sk-")
    for text in texts:
        shown = str(text)
        assert API_KEY not in shown
        for start in range(len(secret) - 7):
            assert secret[start : start + 8] not in shown, f"a piece of the API key leaked: {shown!r}"


def text_of(result: CallToolResult) -> str:
    """The one text block of a tool result."""
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def sent(route: respx.Route) -> dict[str, Any]:
    """The JSON body of the last request `route` answered."""
    body: dict[str, Any] = json.loads(route.calls.last.request.content)
    return body


def free_port() -> int:
    """A loopback port nothing listens on (yet)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs with HTTP_PROXY pointing nowhere (devtools.check) so that any hidden network use fails; its
    own loopback servers are reached directly, as a user's NO_PROXY would have it."""
    for name in ("NO_PROXY", "no_proxy"):
        present = [part for part in os.environ.get(name, "").split(",") if part]
        os.environ[name] = ",".join(dict.fromkeys([*present, "127.0.0.1", "localhost"]))


@pytest.fixture(autouse=True)
def _own_state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test keeps its own journal of uploads in flight (under XDG_STATE_HOME), never the user's, so no test
    settles what another left."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def router() -> respx.Router:
    return new_router()
