"""Pinned npm tools (MCP Inspector, Claude Code) installed once into a cache outside the repository.

Importable (used by ``tests/live/test_live_clients.py``) and a CLI::

    python -m devtools.npm_tools install [inspector|claude-code ...]   # prints the path of each binary
    python -m devtools.npm_tools path inspector                         # the path, installing if needed

Each package lives in ``CACHE_ROOT/npm/<name>@<version>/`` (``@scope/name`` is written ``@scope+name``) as a private
npm project with just that dependency, so the first call installs (``npm install --no-audit --no-fund``) and later
calls only check a marker file. Concurrent callers serialise on a lock file. A failed install raises
``NpmInstallError`` with the tail of the npm log. Only the standard library is used, plus ``npm`` on ``PATH``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools.cachelock import exclusive_lock
from devtools.openwebui_local import CACHE_ROOT

NPM_ROOT = CACHE_ROOT / "npm"
INSTALL_TIMEOUT_SECONDS = 900.0
MARKER = ".installed"


class NpmInstallError(RuntimeError):
    """npm is missing, or ``npm install`` failed or did not produce the expected binary."""


@dataclass(frozen=True)
class NpmTool:
    """One pinned npm package and the binary (from its ``bin`` field) that we run."""

    package: str
    version: str
    binary: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    @property
    def directory(self) -> Path:
        return NPM_ROOT / self.spec.replace("/", "+")

    @property
    def bin_path(self) -> Path:
        return self.directory / "node_modules" / ".bin" / self.binary


# Versions pinned here are the ones the README's client set-ups were checked with.
INSPECTOR = NpmTool("@modelcontextprotocol/inspector", "2.12.0", "mcp-inspector")
CLAUDE_CODE = NpmTool("@anthropic-ai/claude-code", "2.1.332", "claude")
TOOLS = {"inspector": INSPECTOR, "claude-code": CLAUDE_CODE}


def _log(message: str) -> None:
    print(f"[npm-tools] {message}", file=sys.stderr, flush=True)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _lock(tool: NpmTool) -> contextlib.AbstractContextManager[None]:
    lock_path = NPM_ROOT / "locks" / f"{tool.directory.name}.lock"
    waiting = f"another process is installing {tool.spec}; waiting for it (lock {lock_path})"
    return exclusive_lock(lock_path, lambda: _log(waiting))


def installed_version(tool: NpmTool) -> str | None:
    """The version of ``tool.package`` in its cache directory, or None when it is not there."""
    manifest = tool.directory / "node_modules" / Path(*tool.package.split("/")) / "package.json"
    try:
        version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def is_installed(tool: NpmTool) -> bool:
    return (tool.directory / MARKER).exists() and tool.bin_path.exists()


def ensure(tool: NpmTool) -> Path:
    """Install ``tool`` if it is not in the cache yet (idempotent) and return the path of its binary."""
    if is_installed(tool):
        return tool.bin_path
    npm = shutil.which("npm")
    if npm is None:
        raise NpmInstallError(f"npm is not on PATH; it is needed to install {tool.spec} (install Node.js and npm)")
    with _lock(tool):
        if is_installed(tool):
            return tool.bin_path
        directory = tool.directory
        log_path = NPM_ROOT / "logs" / f"{directory.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # A directory without the marker is a broken earlier attempt: start again from nothing.
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        # What `npm init -y` would write, minus the name it derives from the directory (not a valid package name).
        manifest = {"name": "openwebui-rag-mcp-npm-tool", "version": "0.0.0", "private": True}
        (directory / "package.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        command = [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--save-exact", tool.spec]
        _log(f"installing {tool.spec} into {directory} (first time only); log: {log_path}")
        started = time.monotonic()
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_yes": "true"}
        try:
            with log_path.open("w", encoding="utf-8") as log:
                log.write(f"$ {' '.join(command)}  (in {directory})\n")
                log.flush()
                result = subprocess.run(
                    command,
                    cwd=directory,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=INSTALL_TIMEOUT_SECONDS,
                    check=False,
                )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NpmInstallError(
                f"`npm install {tool.spec}` could not run: {exc}; last lines of {log_path}:\n{_tail(log_path)}"
            ) from exc
        if result.returncode != 0:
            raise NpmInstallError(
                f"`npm install {tool.spec}` exited with code {result.returncode}; last lines of {log_path}:\n"
                f"{_tail(log_path)}"
            )
        if not tool.bin_path.exists():
            raise NpmInstallError(
                f"npm installed {tool.spec} but {tool.bin_path} is missing; last lines of {log_path}:\n"
                f"{_tail(log_path)}"
            )
        found = installed_version(tool)
        if found != tool.version:
            raise NpmInstallError(f"npm installed {tool.package} {found}, not the pinned {tool.version}")
        (directory / MARKER).write_text(f"{tool.spec}\n", encoding="utf-8")
        _log(f"installed {tool.spec} in {time.monotonic() - started:.0f} s")
    return tool.bin_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.npm_tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("install", "path"))
    parser.add_argument("tools", nargs="*", metavar="TOOL", help=f"{' or '.join(TOOLS)} (default: all)")
    args = parser.parse_args(argv)
    names: list[str] = list(args.tools) or list(TOOLS)
    unknown = [name for name in names if name not in TOOLS]
    if unknown:
        parser.error(f"unknown tool {', '.join(unknown)}; known: {', '.join(TOOLS)}")
    status = 0
    for name in names:
        try:
            print(ensure(TOOLS[name]))
        except NpmInstallError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
