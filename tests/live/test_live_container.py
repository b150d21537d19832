"""The container image of the HTTP deployment: built from the Containerfile with podman on a base made locally with
mmdebstrap (``devtools.container``; nothing is pulled), then run against a real Open WebUI.

The image runs as a non-root user, carries a health check on ``/healthz`` and no credential; the container turns
ready on ``/readyz`` once Open WebUI answers, answers ``initialize`` over Streamable HTTP and finds a document with
``knowledge_search`` using the caller's own key, and stops cleanly on SIGTERM. On one release only (the newest): what
is checked is the image, not the release differences. Needs root and Debian's podman, mmdebstrap and runc
(``.ci/run`` installs them); without them the test fails, it never skips.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from devtools import container
from devtools import openwebui_local as owui
from devtools.container import Podman
from devtools.openwebui_local import Instance
from openwebui_rag_mcp import __version__
from tests.live.http import mcp_http

pytestmark = [pytest.mark.releases("0.12.4"), pytest.mark.anyio]

READY_TIMEOUT = 120.0
WORD = "zephyrlantern"


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    """podman with storage of its own in this test's temporary folder, removed afterwards."""
    try:
        engine = Podman.at(tmp_path_factory.mktemp("podman"))
        engine.run("--version")
    except container.MissingBinary as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield engine
    finally:
        engine.reset()


@pytest.fixture(scope="module")
def image(podman: Podman) -> str:
    started = time.monotonic()
    try:
        tag = podman.build("localhost/openwebui-rag-mcp:test")
    except (container.MissingBinary, RuntimeError) as exc:
        pytest.fail(f"the image did not build: {exc}", pytrace=False)
    print(f"\nbuilt {tag} (base and image) in {time.monotonic() - started:.0f} s")
    return tag


def test_image_runs_unprivileged_with_a_health_check_and_no_credential(podman: Podman, image: str) -> None:
    inspected = podman.inspect("image", image)
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["openwebui-rag-mcp"]
    assert "/healthz" in " ".join(inspected["Healthcheck"]["Test"])  # kept by the docker format (not OCI)
    variables = dict(item.split("=", 1) for item in config["Env"])
    assert variables["OPENWEBUI_MCP_TRANSPORT"] == "streamable-http"
    assert not {"OPENWEBUI_API_KEY", "OPENWEBUI_MCP_TOKENS", "OPENWEBUI_URL", "REDIS_URL"} & set(variables)
    whoami = podman.run("run", "--rm", "--network", "none", "--entrypoint", "id", image, "-u").stdout
    assert whoami.strip() == "10001"
    version = podman.run("run", "--rm", "--network", "none", image, "--version").stdout
    assert version.strip() == f"openwebui-rag-mcp {__version__}"


def _ready(url: str, timeout: float) -> httpx.Response:
    """``/readyz`` once it answers 200, or its last answer after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: httpx.Response | None = None
    while True:
        try:
            last = httpx.get(f"{url}/readyz", timeout=15, trust_env=False)
        except httpx.TransportError:
            last = None
        if (last is not None and last.status_code == 200) or time.monotonic() > deadline:
            if last is None:
                pytest.fail(f"nothing answered at {url} within {timeout:.0f} s", pytrace=False)
            return last
        time.sleep(0.5)


async def test_container_serves_streamable_http_against_open_webui(
    podman: Podman, image: str, live_openwebui: Instance
) -> None:
    inst = live_openwebui
    tag = uuid.uuid4().hex[:8]
    knowledge_id = owui.create_knowledge(inst, f"container-{tag}", "for the container test")
    file_id = owui.upload_text(inst, f"container-{tag}.md", f"# Lantern\n\nThe {WORD} glows in the container test.")
    owui.add_file(inst, knowledge_id, file_id)

    port = owui.free_port()
    name = f"openwebui-rag-mcp-test-{tag}"
    podman.run(
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        "host",  # Open WebUI listens on this machine's loopback
        "--health-interval",
        "disable",  # no systemd timer here; the check is run by hand below
        "--env",
        f"OPENWEBUI_URL={inst.url}",
        "--env",
        "OPENWEBUI_MCP_HOST=127.0.0.1",
        "--env",
        f"OPENWEBUI_MCP_PORT={port}",
        image,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        ready = _ready(url, READY_TIMEOUT)
        assert ready.status_code == 200, f"{ready.status_code} {ready.text}\n{_logs(podman, name)}"
        assert ready.json() == {"status": "ready", "openwebui_version": inst.version}
        assert podman.run("healthcheck", "run", name, check=False).returncode == 0, _logs(podman, name)

        async with mcp_http(f"{url}/mcp", inst.api_key, mode="legacy") as server:
            assert server.protocol_version == "2025-11-25"  # the legacy generation: an initialize handshake
            found = await server.ok("knowledge_search", {"query": WORD, "knowledge_ids": [knowledge_id]})
            assert found["results"][0]["file_id"] == file_id
            assert WORD in found["results"][0]["text"]
        async with mcp_http(f"{url}/mcp", inst.api_key) as server:
            health = await server.ok("knowledge_health", {})
            assert health["openwebui_version"] == inst.version

        podman.run("stop", "--time", "30", name, timeout=90)
        state = podman.inspect("container", name)["State"]
        assert state["ExitCode"] in (0, 143), _logs(podman, name)
        assert inst.api_key not in _logs(podman, name)
    finally:
        podman.run("rm", "--force", name, check=False)
        owui.delete_knowledge(inst, knowledge_id)


def _logs(podman: Podman, name: str) -> str:
    result = podman.run("logs", name, check=False)
    return f"--- the container's log\n{result.stdout[-4000:]}{result.stderr[-4000:]}"
