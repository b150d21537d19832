"""The release artifacts as users get them: the sdist and the wheel built with ``python -m build``, commands run with
a minimal environment, and the tools (uv, pipx) given homes and caches of their own.

Shared by the wheel step (tests/test_wheel.py) and the release test of the live tier (tests/live/test_live_release.py).
``python -m build`` builds the sdist, then the wheel from the sdist (so a file the sdist leaves out fails the wheel),
with hatchling from the package index in an isolated build environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from openwebui_rag_mcp import __version__

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 300.0
# What uv, pipx and pip need from this environment to reach the package index (a proxy, a CA bundle): passed on.
NETWORK_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "PIP_CERT",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
)


@dataclass(frozen=True)
class Artifacts:
    sdist: Path
    wheel: Path


def run(cmd: list[str], *, timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``; fail the test with its output if it fails or runs out of time. Returns stdout."""
    try:
        result = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`{' '.join(cmd)}` took more than {timeout:.0f} s: {exc.output!r} {exc.stderr!r}", pytrace=False)
    if result.returncode != 0:
        pytest.fail(
            f"`{' '.join(cmd)}` exited with {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n"
            f"--- stderr\n{result.stderr[-3000:]}",
            pytrace=False,
        )
    return result.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """A minimal environment, as an MCP client gives its server: no PYTHONPATH, nothing from the dev venv."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
    return {**env, **extra}


def network_env() -> dict[str, str]:
    """The variables of this environment that say how to reach the package index."""
    return {name: os.environ[name] for name in NETWORK_VARIABLES if name in os.environ}


def base_python() -> str:
    """The interpreter this test's virtual environment was made from (uv and pipx make their own from it)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def build(out: Path) -> Artifacts:
    """``python -m build`` of the repository into ``out``: exactly one sdist and one wheel, named for this version."""
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], timeout=BUILD_TIMEOUT)
    built = sorted(path.name for path in out.iterdir())
    sdist, wheel = f"openwebui_rag_mcp-{__version__}.tar.gz", f"openwebui_rag_mcp-{__version__}-py3-none-any.whl"
    assert built == sorted([sdist, wheel]), built
    return Artifacts(out / sdist, out / wheel)
