"""The sync benchmark (issue 18): `openwebui-rag-mcp sync` side by side with Open WebUI's own sync tool and a floor.

    .venv/bin/python -m bench.sync [--version 0.12.4] [--files 200] [--concurrency 4]

Against a real Open WebUI (started offline on loopback, as the live tests do), for a folder of small Markdown notes
in 10 subfolders, each into a base of its own:

- **openwebui-rag-mcp sync**, the command as a user runs it (a subprocess), first run and a second run with nothing
  changed; it ends when every file is confirmed processed and attached (or named as failed);
- **oikb sync** (Open WebUI's own sync tool, `oikb` from PyPI, installed by this benchmark into its own virtual
  environment under the cache), sequential and with `--concurrency`, first run and second run; it uploads with the
  base named in the upload's metadata and leaves processing to Open WebUI, so the time until every file is
  searchable is measured too: until the base lists every file and none is pending. oikb needs Open WebUI 0.9.6+;
- **a floor**: the same uploads straight from httpx, `--concurrency` at a time, each polled until processed and
  attached (attaches one at a time, as the server does), nothing else; on 0.12.4+, where `sync` lets its uploads link
  themselves, each upload names the base and is polled until completed, with no attach.

Benchmarks measure; they gate nothing. The machine and its load change the figures; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import log
from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from openwebui_rag_mcp.compat import Release

OIKB = "oikb==0.6.0"
OIKB_FROM = (0, 9, 6)
SUBFOLDERS = 10
POLL = 0.1
COMPLETE_WITHIN = 600.0


def make_folder(root: Path, files: int) -> Path:
    """`files` small Markdown notes, spread over SUBFOLDERS subfolders, each with words of its own."""
    folder = root / f"notes-{files}"
    for i in range(files):
        sub = folder / f"team-{i % SUBFOLDERS:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note-{i:04d}.md").write_text(
            f"# Note {i}\n\nMeeting {i} of team {i % SUBFOLDERS}: decision {i * 7919 % 10007}, owner person{i}.\n",
            encoding="utf-8",
        )
    return folder


def oikb_executable() -> Path:
    """oikb in a virtual environment of its own under the cache, installed from PyPI on first use."""
    venv = owui.CACHE_ROOT / "venvs" / "oikb-0.6.0"
    executable = venv / "bin" / "oikb"
    if not executable.exists():
        log(f"installing {OIKB} into {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", OIKB], check=True)
    return executable


def timed_run(command: list[str], env: dict[str, str], *, failures: bool = False) -> tuple[float, str]:
    """Run a command to its end; its time and output. A failed run is an error unless `failures` (oikb's runs
    report the files Open WebUI refused, and go on)."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0 and not failures:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def oikb_errors(output: str) -> int:
    found = re.search(r"(\d+) error\(s\)", output)
    return int(found.group(1)) if found else 0


def base_is_complete(inst: Instance, knowledge_id: str, files: int) -> bool:
    """Every file listed in the base, and none still pending (0.9.6+ keeps self-linking uploads out until processed)."""
    return len(owui.files_of(inst, knowledge_id)) >= files and not pending(inst, knowledge_id)


def pending(inst: Instance, knowledge_id: str) -> list[Any]:
    with owui.client(inst) as http:
        answer = http.get(f"/api/v1/knowledge/{knowledge_id}/files/pending")
    if answer.status_code == 404:
        return []
    answer.raise_for_status()
    body = answer.json()
    return body if isinstance(body, list) else body.get("items", [])


def until_complete(inst: Instance, knowledge_id: str, files: int, started: float) -> float | None:
    """Seconds from `started` until the base holds `files` documents and none is pending; None when that has not
    happened within COMPLETE_WITHIN seconds (uploads Open WebUI dropped without saying so)."""
    while not base_is_complete(inst, knowledge_id, files):
        if time.perf_counter() - started > COMPLETE_WITHIN:
            return None
        time.sleep(POLL)
    return time.perf_counter() - started


async def floor(inst: Instance, knowledge_id: str, contents: list[tuple[str, bytes]], concurrency: int) -> float:
    """Upload, wait for processing, attach: `concurrency` files at a time, attaches one at a time; where the server's
    sync lets uploads link themselves (0.12.4+), the same here: upload naming the base, wait until completed."""
    turns, attaching = asyncio.Semaphore(concurrency), asyncio.Lock()
    status_route = owui.version_parts(inst.version) >= (0, 6, 23)
    links_itself = Release.parse(inst.version).links_on_upload

    async def one(http: httpx.AsyncClient, name: str, content: bytes) -> None:
        async with turns:
            files = {"file": (name, content, "text/markdown")}
            data = {"metadata": json.dumps({"knowledge_id": knowledge_id})} if links_itself else None
            uploaded = (await http.post("/api/v1/files/", files=files, data=data)).raise_for_status().json()
            while status_route:
                status = (await http.get(f"/api/v1/files/{uploaded['id']}/process/status")).json().get("status")
                if status in ("completed", "failed"):
                    break
                await asyncio.sleep(POLL)
            if links_itself:
                return
            async with attaching:
                added = await http.post(f"/api/v1/knowledge/{knowledge_id}/file/add", json={"file_id": uploaded["id"]})
                added.raise_for_status()

    headers = {"Authorization": f"Bearer {inst.api_key}"}
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=inst.url, headers=headers, timeout=300, trust_env=False) as http:
        await asyncio.gather(*(one(http, name, content) for name, content in contents))
    return time.perf_counter() - started


def run(version: str, files: int, concurrency: int) -> str:
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as scratch:
        root = Path(scratch)
        folder = make_folder(root, files)
        owui.install(version)
        inst = owui.start(version, root / "openwebui")
        try:
            env = {
                **os.environ,
                "OPENWEBUI_URL": inst.url,
                "OPENWEBUI_API_KEY": inst.api_key,
                "OPEN_WEBUI_URL": inst.url,
                "OPEN_WEBUI_API_KEY": inst.api_key,
                "OIKB_CONFIG_DIR": str(root / "oikb-config"),
                "NO_PROXY": "127.0.0.1,localhost",
            }
            ours = owui.create_knowledge(inst, "bench-sync-ours", "", private=True)
            command = [sys.executable, "-m", "openwebui_rag_mcp", "sync", str(folder), "--knowledge-id", ours]
            command += ["--concurrency", str(concurrency)]
            first, _ = timed_run(command, env)
            assert base_is_complete(inst, ours, files), "sync ended before every file was in the base"
            second, said = timed_run(command, env)
            assert f"{files} unchanged" in said, said[-500:]
            rows.append(
                (f"openwebui-rag-mcp sync --concurrency {concurrency}", f"{first:.1f}", f"{first:.1f}", f"{second:.2f}")
            )
            log(f"ours: {first:.1f} s, again {second:.2f} s")

            if owui.version_parts(version) >= OIKB_FROM:
                oikb = str(oikb_executable())
                for workers in (1, concurrency):
                    base = owui.create_knowledge(inst, f"bench-sync-oikb-{workers}", "", private=True)
                    command = [oikb, "sync", str(folder), "--kb-id", base, "--concurrency", str(workers)]
                    started = time.perf_counter()
                    exited, said = timed_run(command, env, failures=True)
                    errors = oikb_errors(said)
                    complete = until_complete(inst, base, files - errors, started)
                    held = len(owui.files_of(inst, base))
                    again, said = timed_run(command, env, failures=True)
                    name = f"oikb sync --concurrency {workers}"
                    if errors:
                        name += f" ({errors} uploads refused by Open WebUI; {oikb_errors(said)} on the second run)"
                    if complete is None:
                        name += f" (the base held {held} of {files} files after {COMPLETE_WITHIN:.0f} s)"
                    searchable = "-" if complete is None else f"{complete:.1f}"
                    rows.append((name, f"{exited:.1f}", searchable, f"{again:.2f}"))
                    log(f"{name}: exits {exited:.1f} s, searchable {searchable} s, again {again:.2f} s")

            direct = owui.create_knowledge(inst, "bench-sync-floor", "", private=True)
            contents = [(path.name, path.read_bytes()) for path in sorted(folder.rglob("*.md"))]
            low = asyncio.run(floor(inst, direct, contents, concurrency))
            rows.append((f"httpx floor, {concurrency} at a time", f"{low:.1f}", f"{low:.1f}", "-"))
            log(f"floor: {low:.1f} s")
        finally:
            owui.stop(inst)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    lines = [
        f"Open WebUI {version}, {files} Markdown notes in {SUBFOLDERS} subfolders; {machine}.",
        "",
        "| | command ends (s) | every file searchable (s) | second run, nothing changed (s) |",
        "|---|---|---|---|",
        *(f"| {name} | {ends} | {searchable} | {again} |" for name, ends, searchable, again in rows),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--version", default=owui.NEWEST)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    print(run(args.version, args.files, args.concurrency))


if __name__ == "__main__":
    main()
