"""The release as users install it: the wheel built by ``python -m build``, run with ``uvx --from <wheel>`` and
installed with ``pipx``, each serving MCP over stdio to a real Open WebUI.

Each tool gets a home, cache and tool folders of its own under the test's temporary folder (nothing of the machine's
uv or pipx state is read or left behind) and installs the wheel's dependencies from the package index, as a user's
first run does; the server then gets the minimal environment an MCP client gives it. On one release only (the newest):
what is checked is the packaging, not the release differences, which the rest of the live suite covers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from devtools.openwebui_local import Instance
from openwebui_rag_mcp import __version__
from openwebui_rag_mcp.config import DEFAULT_TOOLS
from tests.artifacts import Artifacts, base_python, build, clean_env, network_env, run
from tests.rawstdio import RawStdio

pytestmark = pytest.mark.releases("0.12.4")

INSTALL_TIMEOUT = 600.0
LIMIT = 120.0  # seconds for one answer: uvx installs the wheel's dependencies before the server starts
TOOLS = Path(sys.executable).parent  # uv and pipx come from the dev extra, pinned


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return build(tmp_path_factory.mktemp("dist"))


def home_env(home: Path) -> dict[str, str]:
    """A home of its own: nothing the installer writes lands in the user's."""
    return {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }


def uv_env(home: Path) -> dict[str, str]:
    """uv with every folder it writes under ``home``, the interpreter given on its command line (no download)."""
    return {
        **home_env(home),
        "UV_CACHE_DIR": str(home / "uv-cache"),
        "UV_TOOL_DIR": str(home / "uv-tools"),
        "UV_TOOL_BIN_DIR": str(home / "bin"),
        "UV_PYTHON_INSTALL_DIR": str(home / "uv-python"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_CONFIG": "1",
    }


def pipx_env(home: Path) -> dict[str, str]:
    return {
        **home_env(home),
        "PIPX_HOME": str(home / "pipx"),
        "PIPX_BIN_DIR": str(home / "bin"),
        "PIPX_MAN_DIR": str(home / "man"),
        "PIPX_DEFAULT_PYTHON": base_python(),
    }


def serves_openwebui(command: list[str], env: dict[str, str], inst: Instance, workdir: Path) -> None:
    """``command`` answers ``initialize`` and ``tools/list`` over stdio, and a call that reaches Open WebUI; stdout
    carries JSON-RPC only and the key appears nowhere."""
    server_env = {**env, "OPENWEBUI_URL": inst.url, "OPENWEBUI_API_KEY": inst.api_key, "OPENWEBUI_TIMEOUT": "60"}
    stderr_path = workdir / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        server = RawStdio(command, server_env, stderr, cwd=workdir, limit=LIMIT)
        try:
            init = server.initialize("release")
            assert init["serverInfo"]["version"] == __version__
            tools = server.request("tools/list", {})["tools"]
            assert {tool["name"] for tool in tools} == set(DEFAULT_TOOLS)
            health = server.call("knowledge_health", {})
            assert health.get("isError") is not True, health
            assert health["structuredContent"]["openwebui_version"] == inst.version
        finally:
            code = server.close()
    log = stderr_path.read_text(encoding="utf-8", errors="replace")
    assert code == 0, log
    assert server.lines
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in server.lines)
    assert inst.api_key not in log


def test_uvx_runs_the_wheel(artifacts: Artifacts, live_openwebui: Instance, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(**network_env(), **uv_env(home))
    uvx = [str(TOOLS / "uvx"), "--python", base_python(), "--from", str(artifacts.wheel), "openwebui-rag-mcp"]
    # The first run installs (a minute at most); the version shows the wheel's console script runs.
    assert run([*uvx, "--version"], timeout=INSTALL_TIMEOUT, cwd=tmp_path, env=env).strip() == (
        f"openwebui-rag-mcp {__version__}"
    )
    serves_openwebui(uvx, env, live_openwebui, tmp_path)


def test_pipx_installs_the_wheel(artifacts: Artifacts, live_openwebui: Instance, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(**network_env(), **pipx_env(home))
    run([str(TOOLS / "pipx"), "install", str(artifacts.wheel)], timeout=INSTALL_TIMEOUT, cwd=tmp_path, env=env)
    script = home / "bin" / "openwebui-rag-mcp"
    assert script.exists(), sorted(path.name for path in (home / "bin").iterdir())
    listed = json.loads(run([str(TOOLS / "pipx"), "list", "--json"], timeout=60, cwd=tmp_path, env=env))
    assert listed["venvs"]["openwebui-rag-mcp"]["metadata"]["main_package"]["package_version"] == __version__
    # The client's view: the script by its absolute path, an environment with no trace of pipx or this test.
    serves_openwebui([str(script)], clean_env(), live_openwebui, tmp_path)
