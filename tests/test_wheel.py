"""Packaging: the sdist and wheel build, the wheel installs into a clean virtual environment, and its console script
serves MCP.

Builds both with ``python -m build`` (the wheel from the sdist; hatchling comes from PyPI in build isolation),
installs the wheel with its dependencies from PyPI into a fresh ``python -m venv``, and drives the installed
``openwebui-rag-mcp`` over stdio with raw JSON-RPC, pointed at a closed port: ``initialize`` and ``tools/list`` need no
Open WebUI.

Marked ``wheel``: it needs pip and a package index, so ``devtools.check`` runs it as its own step, outside the unit
suite (which runs with no index and a dead proxy). Not live, but slow the first time (30 to 60 s, mostly pip). The
wheel is reproducible (hatchling pins the file dates), so the virtual environment is cached per wheel hash under the
system temporary directory and later runs only build the artifacts again (about 10 s). The installs users make with
``uvx`` and ``pipx``, against a real Open WebUI, are in the live tier (tests/live/test_live_release.py).
"""

from __future__ import annotations

import contextlib
import email.parser
import fcntl
import hashlib
import json
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from openwebui_rag_mcp import __version__
from openwebui_rag_mcp.config import DEFAULT_TOOLS, variables_help
from tests.artifacts import Artifacts, build, clean_env, run
from tests.rawstdio import RawStdio

pytestmark = pytest.mark.wheel

VENV_CACHE = Path(tempfile.gettempdir()) / "openwebui-rag-mcp-wheel-venvs"
STALE_SECONDS = 2 * 24 * 3600
LIMIT = 30.0  # seconds for any one answer from the server
INSTALL_TIMEOUT = 300.0


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    return build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def wheel(artifacts: Artifacts) -> Path:
    return artifacts.wheel


@pytest.fixture(scope="module")
def venv(wheel: Path) -> Path:
    """A virtual environment with the wheel installed (cached per wheel hash)."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]
    target = VENV_CACHE / digest
    marker = target / ".installed"
    with _lock(VENV_CACHE / f"{digest}.lock"):
        if not marker.exists():
            shutil.rmtree(target, ignore_errors=True)
            run([sys.executable, "-m", "venv", str(target)], timeout=120)
            python = str(target / "bin" / "python")
            run(
                [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
                timeout=INSTALL_TIMEOUT,
            )
            marker.write_text(f"{wheel.name}\n", encoding="utf-8")
        marker.touch()
    for other in VENV_CACHE.iterdir():  # venvs of older wheels nobody used for a while
        other_marker = other / ".installed"
        if other != target and other_marker.exists() and time.time() - other_marker.stat().st_mtime > STALE_SECONDS:
            shutil.rmtree(other, ignore_errors=True)
    return target


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- the wheel itself -------------------------------------------------------------------------------------------


def test_wheel_holds_the_package_and_its_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = f"openwebui_rag_mcp-{__version__}.dist-info"
        metadata = email.parser.Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert {
        "openwebui_rag_mcp/__main__.py",
        "openwebui_rag_mcp/server/__init__.py",
        "openwebui_rag_mcp/py.typed",
    } <= names
    assert not [name for name in names if name.split("/")[0] in ("tests", "devtools", "clients", "bench", "src")]
    assert metadata["Name"] == "openwebui-rag-mcp"
    assert metadata["Version"] == __version__
    requires = {req.split(">")[0].split("<")[0].split("=")[0].strip() for req in metadata.get_all("Requires-Dist", [])}
    assert {"mcp", "httpx", "pydantic"} <= requires
    assert "openwebui-rag-mcp = openwebui_rag_mcp.__main__:main" in entry_points


def test_sdist_holds_the_sources_and_builds_the_wheel(artifacts: Artifacts) -> None:
    top = f"openwebui_rag_mcp-{__version__}"
    with tarfile.open(artifacts.sdist) as archive:
        names = {name.removeprefix(f"{top}/") for name in archive.getnames()}
        pkg_info = archive.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        metadata = email.parser.Parser().parsestr(pkg_info.read().decode())
    assert {"pyproject.toml", "README.md", "LICENSE", "src/openwebui_rag_mcp/__init__.py"} <= names
    assert (metadata["Name"], metadata["Version"]) == ("openwebui-rag-mcp", __version__)
    # No local state travels: the virtual environment, Open WebUI's data and .env files stay out.
    assert not [name for name in names if name.split("/")[0] in (".venv", ".local-openwebui", ".env", ".env.local")]


# -- the installed script ----------------------------------------------------------------------------------------


def test_installed_script_prints_the_version(venv: Path, tmp_path: Path) -> None:
    script = venv / "bin" / "openwebui-rag-mcp"
    assert script.exists()
    out = run([str(script), "--version"], timeout=30, cwd=tmp_path, env=clean_env())
    assert out.strip() == f"openwebui-rag-mcp {__version__}"
    # The installed copy lists the variables declared in config.py (generated, so nothing is left behind).
    assert variables_help() in run([str(script), "--help"], timeout=30, cwd=tmp_path, env=clean_env())
    # The code that runs is the installed copy, not the source tree.
    where = run(
        [str(venv / "bin" / "python"), "-c", "import openwebui_rag_mcp; print(openwebui_rag_mcp.__file__)"],
        timeout=30,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert Path(where.strip()).is_relative_to(venv), where


def test_installed_script_serves_mcp_over_stdio(venv: Path, tmp_path: Path) -> None:
    env = clean_env(OPENWEBUI_URL=closed_port_url(), OPENWEBUI_API_KEY="sk-wheel-test", OPENWEBUI_TIMEOUT="5")
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("wb") as stderr:
        server = RawStdio([str(venv / "bin" / "openwebui-rag-mcp")], env, stderr, cwd=tmp_path, limit=LIMIT)
        try:
            init = server.initialize("wheel")
            assert init["serverInfo"]["name"]
            assert init["protocolVersion"] == "2025-11-25"
            tools = server.request("tools/list", {})["tools"]
            # knowledge_delete_base only when the operator switches it on (OPENWEBUI_ALLOW_DELETE_BASE).
            assert {tool["name"] for tool in tools} == set(DEFAULT_TOOLS)
            assert all(tool["inputSchema"]["type"] == "object" for tool in tools)
            assert all("outputSchema" in tool for tool in tools)  # aliases too: their tool's
            # Open WebUI is not there: the call is a structured error result, and the server keeps serving.
            health = server.request("tools/call", {"name": "knowledge_health", "arguments": {}})
            assert health["isError"] is True
            assert health["structuredContent"]["code"] == "upstream_unavailable", health
            assert len(server.request("tools/list", {})["tools"]) == len(DEFAULT_TOOLS)
        finally:
            code = server.close()
    assert code == 0, stderr_path.read_text(encoding="utf-8", errors="replace")
    # stdout carried JSON-RPC messages and nothing else.
    assert server.lines
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in server.lines)
    assert "sk-wheel-test" not in stderr_path.read_text(encoding="utf-8", errors="replace")
