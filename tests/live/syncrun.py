"""Run the `sync` command against a live Open WebUI and read back what the base then holds.

Shared by the live sync tests: `run_sync` (one run, its output as a `Run`), `interrupted_sync` (a run stopped with
SIGTERM part-way), `documents_of`/`names_of` (each document's identity, as Open WebUI lists it) and `expected_names`
(the identities a folder's files should have), on every release.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.sync.names import synced_name
from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.source import SOURCE_FILE, folder_source
from tests.live.stdio import SCRIPT

RUN_TIMEOUT = 300.0
SUMMARY = re.compile(
    r"^done: (?P<added>\d+) added, (?P<replaced>\d+) replaced, (?P<renamed>\d+) renamed, (?P<removed>\d+) removed, "
    r"(?P<unchanged>\d+) unchanged, (?P<failed>\d+) failed$"
)


@dataclass
class Run:
    code: int
    lines: list[str]
    seconds: float
    log: list[str] = field(default_factory=list)  # the run's stderr: what it logged of a failure

    def told(self, failed: list[str]) -> str:
        """What a failed assertion shows: the failed lines and the end of the run's log."""
        return "\n".join([*(failed or self.lines[-20:]), "- its log (stderr) -", *self.log[-30:]])

    @property
    def summary(self) -> dict[str, int]:
        matches = [SUMMARY.match(line) for line in self.lines]
        found = [match for match in matches if match]
        assert len(found) == 1, f"no single summary line in {self.lines!r}"
        return {name: int(value) for name, value in found[0].groupdict().items()}


def sync_env(inst: Instance, api_key: str | None = None, url: str | None = None) -> dict[str, str]:
    """The admin's credentials (or `api_key`'s) and nothing else of this server's configuration (no proxies: Open
    WebUI is local; `url` is a test's own proxy in front of it)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OPENWEBUI_", "RAG_", "REDIS_")) and "proxy" not in name.lower()
    }
    env.update(
        {"OPENWEBUI_URL": url or inst.url, "OPENWEBUI_API_KEY": api_key or inst.api_key, "OPENWEBUI_TIMEOUT": "60"}
    )
    return env


def command(folder: Path, knowledge_id: str, *flags: str) -> list[str]:
    return [str(SCRIPT), "sync", str(folder), "--knowledge-id", knowledge_id, *flags]


def run_sync(
    inst: Instance,
    folder: Path,
    knowledge_id: str,
    *flags: str,
    timeout: float = RUN_TIMEOUT,
    api_key: str | None = None,
    url: str | None = None,
) -> Run:
    started = time.monotonic()
    done = subprocess.run(
        command(folder, knowledge_id, *flags),
        env=sync_env(inst, api_key, url),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert inst.api_key not in done.stdout + done.stderr
    assert api_key is None or api_key not in done.stdout + done.stderr
    return Run(done.returncode, done.stdout.splitlines(), time.monotonic() - started, done.stderr.splitlines())


def mirrors(inst: Instance) -> bool:
    """Whether this release's bases mirror the synced folder (files under their own names, in folders: 0.9.6+)."""
    return Release.parse(inst.version).folders


def folders_by_walk(inst: Instance, knowledge_id: str) -> dict[str, str]:
    """file_id -> the path of its folder, from Open WebUI's folder lists (0.9.6 to 0.11 name no folder in the
    document lists)."""
    found: dict[str, str] = {}
    pending = [("", "")]
    with owui.client(inst) as http:
        while pending:
            folder_id, path = pending.pop()
            page, seen = 1, 0
            while True:
                params: dict[str, str | int] = {"directory_id": folder_id, "page": page}
                answer = http.get(f"/api/v1/knowledge/{knowledge_id}/files", params=params).json()
                found.update((item["id"], path) for item in answer["items"])
                if page == 1:
                    pending += [(d["id"], f"{path}/{d['name']}".lstrip("/")) for d in answer["directories"]]
                seen += len(answer["items"])
                if not answer["items"] or seen >= answer["total"]:
                    break
                page += 1
    return found


def identity(item: dict[str, Any], mirrored: bool, folder_of: dict[str, str]) -> str:
    """What tells one version of one file from another in the base: its filename (which carries the path and the
    hash), or, where the base mirrors the folder, its folder path, name and the hash Open WebUI keeps of its bytes."""
    if not mirrored:
        return str(item["filename"])
    folder = item["directory_path"] if "directory_path" in item else folder_of[item["id"]]
    path = f"{folder}/{item['filename']}".lstrip("/")
    return f"{path}#{item['meta']['file_hash'][:12]}"


def interrupted_sync(inst: Instance, folder: Path, knowledge_id: str, after: int) -> list[str]:
    """A run stopped with SIGTERM once `after` files were reported done."""
    reported: list[str] = []
    # SIGTERM ends the run at once; the next run waits until an attach it had sent is answered or its answer is past
    # due (this run's OPENWEBUI_TIMEOUT plus 5 s): 20 s rather than 60 keeps that wait short.
    env = sync_env(inst) | {"OPENWEBUI_TIMEOUT": "20"}
    with subprocess.Popen(
        command(folder, knowledge_id), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            assert process.stdout is not None
            for line in process.stdout:  # one line per file, flushed as each is done
                reported.append(line.rstrip("\n"))
                if sum(entry.endswith(": ok") for entry in reported) >= after:
                    break
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == -signal.SIGTERM, (process.returncode, reported[-5:])
    return reported


def documents_of(inst: Instance, knowledge_id: str) -> dict[str, str]:
    """file_id -> identity of every document Open WebUI itself lists in the base (every page)."""
    found: dict[str, str] = {}
    with owui.client(inst) as http:
        if not Release.parse(inst.version).paged_lists:
            base = http.get(f"/api/v1/knowledge/{knowledge_id}").json()
            return {item["id"]: item["filename"] for item in base.get("files") or []}
        folder_of = folders_by_walk(inst, knowledge_id) if mirrors(inst) else {}
        page = 1
        while True:
            answer = http.get(f"/api/v1/knowledge/{knowledge_id}/files", params={"page": page}).json()
            for item in answer["items"]:
                if mirrors(inst) and "directory_path" not in item and item["id"] not in folder_of:
                    # Linked after the folders were read (Open WebUI goes on with the uploads of a run that was
                    # stopped): read them again.
                    folder_of = folders_by_walk(inst, knowledge_id)
                found[item["id"]] = identity(item, mirrors(inst), folder_of)
            if not answer["items"] or len(found) >= answer["total"]:
                return found
            page += 1


def names_of(inst: Instance, knowledge_id: str) -> list[str]:
    return sorted(documents_of(inst, knowledge_id).values())


def expected_names(folder: Path, mirrored: bool) -> list[str]:
    """One identity per file of the folder, computed here: its path and the SHA-256 of its bytes where the base
    mirrors the folder; else the name the sync command gives it, ending as the brief says, with the first 12 hex
    digits of that SHA-256 and its extension."""
    files = sorted(path for path in folder.rglob("*") if path.is_file() and path.name != SOURCE_FILE)
    if mirrored:
        return sorted(
            f"{path.relative_to(folder).as_posix()}#{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"
            for path in files
        )
    local, refused = scan(folder, 10**9)
    assert refused == [], refused
    source = folder_source(folder, None, create=False).id or "not-synced-yet"  # the first run keeps one
    names = sorted(synced_name(file, source) for file in local)
    assert len(names) == len(files)
    endings = sorted(f"~{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}{path.suffix}" for path in files)
    assert sorted(name[name.rindex("~") :] for name in names) == endings
    return names
