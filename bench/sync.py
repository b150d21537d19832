"""The sync benchmark (issue 18): `openwebui-rag-mcp sync` side by side with Open WebUI's own sync tool and a floor.

    .venv/bin/python -m bench.sync [--version 0.12.4] [--files 200] [--concurrency 4] [--rounds 3] [--held 1500]
        [--ways sync,oikb,oikb-concurrent,floor]

Against a real Open WebUI (started offline on loopback, as the live tests do; a fresh one for each command, as Open
WebUI slows with the files it holds), for a folder of small Markdown notes in 10 subfolders:

- **openwebui-rag-mcp sync**, the command as a user runs it (a subprocess), first run and runs with nothing changed
  (the median of 5); it ends when every file is confirmed processed and attached (or named as failed);
- **oikb sync** (Open WebUI's own sync tool, `oikb` from PyPI, installed by this benchmark into its own virtual
  environment under the cache), sequential and with `--concurrency`, first run and runs with nothing changed; it
  uploads with the base named in the upload's metadata and leaves processing to Open WebUI, so the time until every
  file is searchable is measured too: until the base lists every file (from 0.9.6, marked as written to the base) and
  none is pending. oikb needs Open WebUI 0.9.6+;
- **a floor**: the same uploads straight from httpx, `--concurrency` at a time, each polled until processed and
  attached (attaches one at a time, as the server does), nothing else; on 0.9.6+, where `sync` lets its uploads link
  themselves, each upload names the base and is polled until completed (before 0.12.4, and marked as written to the
  base), with no attach.

With `--held N` every command's Open WebUI is a copy of one that already holds N other notes in a base of its own
(synced once, before the rounds): Open WebUI's time per file grows with the files it holds, so this measures the ways
at that scale for the price of syncing those files once.

With `--rounds N` each way runs N times, each round in another order; the report gives each way's median and range,
and the ratios per round (a round's ways share the VM's speed of the moment), with the load average before and after.

Benchmarks measure; they gate nothing. The machine and its load change the figures; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import functools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

import openwebui_rag_mcp
from bench.common import log
from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from openwebui_rag_mcp.compat import Release

OIKB = "oikb==0.6.0"
OIKB_FROM = (0, 9, 6)
SUBFOLDERS = 10
POLL = 0.1
COMPLETE_WITHIN = 600.0
STALLED_AFTER = 15.0


def make_folder(root: Path, files: int, kind: str = "notes") -> Path:
    """`files` small Markdown notes, spread over SUBFOLDERS subfolders, each with words of its own (and of its
    `kind`: folders of two kinds hold no text in common)."""
    folder = root / f"{kind}-{files}"
    for i in range(files):
        sub = folder / f"team-{i % SUBFOLDERS:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note-{i:04d}.md").write_text(
            f"# Note {i} of the {kind}\n\nMeeting {i} of team {i % SUBFOLDERS}: decision {i * 7919 % 10007}, owner "
            f"person{i}.\n",
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


AGAIN = 5  # runs with nothing changed, each command: a run takes under a second, so one alone is mostly noise


def rerun(command: list[str], env: dict[str, str], *, failures: bool = False) -> list[Ran]:
    return [timed_run(command, env, failures=failures) for _ in range(AGAIN)]


def median_of(runs: list[Ran]) -> float:
    return statistics.median(ran.seconds for ran in runs)


@dataclass(frozen=True)
class Ran:
    seconds: float
    output: str
    peak_mib: float  # the command's peak resident memory


def timed_run(command: list[str], env: dict[str, str], *, failures: bool = False) -> Ran:
    """Run a command to its end; its time, output and peak memory. A failed run is an error unless `failures`
    (oikb's runs report the files Open WebUI refused, and go on)."""
    with tempfile.TemporaryFile("w+") as output:
        started = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        said = output.read()
    if process.returncode != 0 and not failures:
        # The lines that say what went wrong, not the tail: a 2,000-file run's one failure is far above its last lines.
        told = "\n".join(line for line in said.splitlines() if not line.endswith(": ok"))
        raise RuntimeError(f"{command[0]} failed ({process.returncode}): {told[-4000:]}")
    return Ran(seconds, said, usage.ru_maxrss / 1024)  # Linux reports KiB


def oikb_errors(output: str) -> int:
    found = re.search(r"(\d+) error\(s\)", output)
    return int(found.group(1)) if found else 0


def indexed_files(inst: Instance, knowledge_id: str) -> int:
    """The files the base lists, from 0.9.6 only those marked as written to its collection (0.9.6 to 0.10 list a
    self-linked upload before they index it into the base)."""
    marked = Release.parse(inst.version).links_on_upload
    return len(owui.files_of(inst, knowledge_id, indexed=marked))


def base_is_complete(inst: Instance, knowledge_id: str, files: int) -> bool:
    """Every file in the base and indexed there, and none still pending (0.9.6+ keeps self-linking uploads off the
    base's list until processed)."""
    return indexed_files(inst, knowledge_id) >= files and not pending(inst, knowledge_id)


def pending(inst: Instance, knowledge_id: str) -> list[Any]:
    """The base's pending list (0.9.6+; earlier releases have none, and answer its path with their web page)."""
    if not Release.parse(inst.version).links_on_upload:
        return []
    with owui.client(inst) as http:
        answer = http.get(f"/api/v1/knowledge/{knowledge_id}/files/pending")
    if answer.status_code == 404:
        return []
    answer.raise_for_status()
    body = answer.json()
    return body if isinstance(body, list) else body.get("items", [])


def until_complete(inst: Instance, knowledge_id: str, files: int, started: float) -> float | None:
    """Seconds from `started` until the base holds `files` documents and none is pending; None when that has not
    happened within COMPLETE_WITHIN seconds of this wait's start (the command's end: a 2,000-file run on 0.9.6 takes
    longer than that by itself), or nothing has been pending nor joined the base for STALLED_AFTER seconds (uploads
    Open WebUI refused or dropped: they never come)."""
    held, changed = -1, time.perf_counter()
    waiting_since = changed
    while True:
        now_held, now_pending = indexed_files(inst, knowledge_id), pending(inst, knowledge_id)
        now = time.perf_counter()
        if now_held >= files and not now_pending:
            return now - started
        if now_held != held or now_pending:
            held, changed = now_held, now
        if now - waiting_since > COMPLETE_WITHIN or now - changed > STALLED_AFTER:
            return None
        time.sleep(POLL)


async def floor(inst: Instance, knowledge_id: str, contents: list[tuple[str, bytes]], concurrency: int) -> float:
    """Upload, wait for processing, attach: `concurrency` files at a time, attaches one at a time; where the server's
    sync lets uploads link themselves (0.10+), the same here: upload naming the base, wait until completed and, before
    0.12.4, until the file is marked as written to the base."""
    turns, attaching = asyncio.Semaphore(concurrency), asyncio.Lock()
    status_route = owui.version_parts(inst.version) >= (0, 6, 23)
    release = Release.parse(inst.version)
    links_itself, wait_for_mark = release.links_on_upload, not release.completes_when_linked

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
            while links_itself and wait_for_mark and status == "completed":
                body = (await http.get(f"/api/v1/files/{uploaded['id']}")).json()
                if (body.get("meta") or {}).get("collection_name") == knowledge_id:
                    break
                if (body.get("data") or {}).get("status") == "failed":
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


@dataclass(frozen=True)
class Held:
    """A stopped Open WebUI holding `files` other notes in a base of its own: each way starts on a copy of it."""

    instance: Instance
    files: int


def preload(version: str, root: Path, files: int) -> Held:
    """An Open WebUI that already holds `files` notes, synced by this package's `sync` (every release has it) into a
    base the measured ways do not touch, then stopped; its embedding server goes on for the copies (`start_copy`).
    Open WebUI's time per file grows with the files it holds (0.9.6 lists every collection, one per file, on each
    write), so this measures a way at that scale without syncing those files in every round."""
    inst = owui.start(version, root / "held")
    try:
        base = owui.create_knowledge(inst, "bench-sync-held", "", private=True)
        folder = make_folder(root, files, "held")
        env = {**os.environ, "OPENWEBUI_URL": inst.url, "OPENWEBUI_API_KEY": inst.api_key, "NO_PROXY": "127.0.0.1"}
        command = [sys.executable, "-m", "openwebui_rag_mcp", "sync", str(folder), "--knowledge-id", base]
        ran = timed_run(command, env, failures=True)
        # A file `sync` names failed is not held, and what Open WebUI logged about it is worth keeping; the rest of
        # the benchmark needs only that Open WebUI holds about that many files.
        failed = [line for line in ran.output.splitlines() if ": FAILED" in line]
        if failed:
            said = "\n".join(failed)
            log(f"preload: {len(failed)} of {files} not added:\n{said}\n{_keep_log(inst, 'preload')}")
        until_complete(inst, base, files - len(failed), time.perf_counter())
        held = len(owui.files_of(inst, base))
    except BaseException:
        owui.stop(inst)
        raise
    owui.stop_openwebui(inst)
    return Held(inst, held)


def _keep_log(inst: Instance, name: str) -> str:
    """Open WebUI's log copied out of the benchmark's temporary folder, which goes when it ends; where it is."""
    kept = Path(tempfile.gettempdir()) / f"bench-sync-{name}-{int(time.time())}-openwebui.log"
    shutil.copyfile(inst.log_path, kept)
    return f"Open WebUI's log is kept at {kept}"


@contextlib.contextmanager
def fresh(version: str, root: Path, name: str, held: Held | None = None) -> Iterator[tuple[Instance, dict[str, str]]]:
    """An Open WebUI of its own for one command: Open WebUI slows as it holds more files (0.10.2 took twice as long for
    the same 100 notes into its third base as into its first), so on a shared one each command would pay for those
    measured before it. With `held`, a copy of that preloaded one (removed again afterwards)."""
    inst = owui.start(version, root / name) if held is None else owui.start_copy(held.instance, root / name)
    try:
        yield (
            inst,
            {
                **os.environ,
                "OPENWEBUI_URL": inst.url,
                "OPENWEBUI_API_KEY": inst.api_key,
                "OPEN_WEBUI_URL": inst.url,
                "OPEN_WEBUI_API_KEY": inst.api_key,
                "OIKB_CONFIG_DIR": str(root / name / "oikb-config"),
                "NO_PROXY": "127.0.0.1,localhost",
            },
        )
    except BaseException:
        log(f"{name} failed; {_keep_log(inst, name)}")
        raise
    finally:
        if held is None:
            owui.stop(inst)
        else:
            owui.stop_openwebui(inst)
            shutil.rmtree(inst.data_dir, ignore_errors=True)  # hundreds of MB per copy with thousands of files


@dataclass(frozen=True)
class Measured:
    """One way's first run on a fresh Open WebUI, and its runs with nothing changed."""

    exits: float
    searchable: float | None  # None: the base never held every file
    again: float | None  # median of AGAIN runs with nothing changed (None for the floor)
    peak_mib: float | None
    note: str = ""


def measure_ours(
    version: str, root: Path, folder: Path, files: int, concurrency: int, held: Held | None = None
) -> Measured:
    with fresh(version, root, "ours", held) as (inst, env):
        ours = owui.create_knowledge(inst, "bench-sync-ours", "", private=True)
        command = [sys.executable, "-m", "openwebui_rag_mcp", "sync", str(folder), "--knowledge-id", ours]
        command += ["--concurrency", str(concurrency)]
        first = timed_run(command, env)
        assert base_is_complete(inst, ours, files), "sync ended before every file was in the base"
        again = rerun(command, env)
        assert all(f"{files} unchanged" in ran.output for ran in again), again[0].output[-500:]
    return Measured(first.seconds, first.seconds, median_of(again), first.peak_mib)


def measure_oikb(
    version: str, root: Path, folder: Path, files: int, workers: int, held: Held | None = None
) -> Measured:
    oikb = str(oikb_executable())
    with fresh(version, root, f"oikb-{workers}", held) as (inst, env):
        base = owui.create_knowledge(inst, f"bench-sync-oikb-{workers}", "", private=True)
        command = [oikb, "sync", str(folder), "--kb-id", base, "--concurrency", str(workers)]
        started = time.perf_counter()
        exited = timed_run(command, env, failures=True)
        errors = oikb_errors(exited.output)
        complete = until_complete(inst, base, files - errors, started)
        in_base = len(owui.files_of(inst, base))
        again = rerun(command, env, failures=True)
    notes = []
    if errors:
        notes.append(f"{errors} uploads refused by Open WebUI; {oikb_errors(again[0].output)} on the second run")
    if complete is None:
        notes.append(f"the base held {in_base} of {files} files when nothing more came")
    return Measured(exited.seconds, complete, median_of(again), exited.peak_mib, "; ".join(notes))


def measure_floor(version: str, root: Path, folder: Path, concurrency: int, held: Held | None = None) -> Measured:
    with fresh(version, root, "floor", held) as (inst, _):
        direct = owui.create_knowledge(inst, "bench-sync-floor", "", private=True)
        contents = [(path.name, path.read_bytes()) for path in sorted(folder.rglob("*.md"))]
        low = asyncio.run(floor(inst, direct, contents, concurrency))
    return Measured(low, low, None, None)


def _cell(values: Sequence[float | None], digits: int = 1) -> str:
    """The median of a way's rounds, and their range when there were several (a round that never completed: '-')."""
    known = sorted(value for value in values if value is not None)
    if not known:
        return "-"
    median = f"{statistics.median(known):.{digits}f}"
    spread = f" ({known[0]:.{digits}f} to {known[-1]:.{digits}f})" if len(values) > 1 else ""
    missing = f", {len(values) - len(known)} never" if len(known) < len(values) else ""
    return median + spread + missing


def _known(values: Iterable[float | None]) -> list[float]:
    return [value for value in values if value is not None]


def _ratio(ours: Sequence[float | None], theirs: Sequence[float | None]) -> str:
    """Per round, ours over theirs (rounds run the ways back to back, so a round's ratio shares its VM's speed)."""
    ratios = sorted(a / b for a, b in zip(ours, theirs, strict=True) if a is not None and b)
    if not ratios:
        return "-"
    spread = f" ({ratios[0]:.2f}x to {ratios[-1]:.2f}x)" if len(ratios) > 1 else ""
    return f"{statistics.median(ratios):.2f}x{spread}"


def compiled() -> None:
    """This package's bytecode written, as an install from a wheel writes it (oikb's is, by pip): where
    PYTHONDONTWRITEBYTECODE is set, an edited module would otherwise be compiled again on every run (13 ms for
    sync.py), which a run with nothing changed would count."""
    package = Path(openwebui_rag_mcp.__file__).parent
    if not compileall.compile_dir(package, quiet=1):
        raise RuntimeError(f"could not compile {package}")


def oikb_way(version: str, files: int, workers: int, held: Held | None, root: Path, folder: Path) -> Measured:
    return measure_oikb(version, root, folder, files, workers, held)


WAYS = ("sync", "oikb", "oikb-concurrent", "floor")


def _rounds(
    version: str,
    files: int,
    concurrency: int,
    rounds: int,
    held: Held | None,
    scratch: Path,
    chosen: Sequence[str] = WAYS,
) -> dict[str, list[Measured]]:
    ways: dict[str, Callable[[Path, Path], Measured]] = {
        f"openwebui-rag-mcp sync --concurrency {concurrency}": lambda root, folder: measure_ours(
            version, root, folder, files, concurrency, held
        ),
    }
    if owui.version_parts(version) >= OIKB_FROM:
        for workers, way in ((1, "oikb"), (concurrency, "oikb-concurrent")):
            if way in chosen:
                ways[f"oikb sync --concurrency {workers}"] = functools.partial(oikb_way, version, files, workers, held)
    if "floor" in chosen:
        ways[f"httpx floor, {concurrency} at a time"] = lambda root, folder: measure_floor(
            version, root, folder, concurrency, held
        )
    results: dict[str, list[Measured]] = {name: [] for name in ways}
    names = list(ways)
    folder = make_folder(scratch, files)
    for round_number in range(rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            measured = ways[name](scratch / f"round-{round_number}", folder)
            results[name].append(measured)
            searchable = "-" if measured.searchable is None else f"{measured.searchable:.1f}"
            said = f"exits {measured.exits:.1f} s, searchable {searchable} s"
            log(f"round {round_number + 1}/{rounds}, {name}: {said}")
    return results


def run(
    version: str, files: int, concurrency: int, rounds: int = 1, held_files: int = 0, ways: Sequence[str] = WAYS
) -> str:
    """Each way once per round, each round in another order (a way's place in the order must not favour it); with
    `held_files`, each on a copy of one Open WebUI already holding that many other notes (`preload`). `ways`: which
    besides `sync` itself, always measured (`WAYS`)."""
    load_before = os.getloadavg()[0]
    owui.install(version)
    compiled()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as scratch:
        held = preload(version, Path(scratch) / "preload", held_files) if held_files else None
        try:
            results = _rounds(version, files, concurrency, rounds, held, Path(scratch), ways)
        finally:
            if held is not None:
                owui.stop(held.instance)  # its embedding server
    load_after = os.getloadavg()[0]
    names = list(results)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    holding = f"; each on a copy of an Open WebUI already holding {held.files} other notes" if held else ""
    lines = [
        f"Open WebUI {version}, {files} Markdown notes in {SUBFOLDERS} subfolders{holding}; {machine}; {rounds} "
        f"round(s), the ways in a rotating order; load average {load_before:.2f} before, {load_after:.2f} after.",
        "",
        "| | command ends (s) | every file searchable (s) | nothing changed, median of 5 (s) | peak memory (MiB) |",
        "|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        notes = "; ".join(sorted({m.note for m in rows if m.note}))
        lines.append(
            f"| {name}{f' ({notes})' if notes else ''} | {_cell([m.exits for m in rows])} | "
            f"{_cell([m.searchable for m in rows])} | {_cell([m.again for m in rows], 2)} | "
            f"{_cell([m.peak_mib for m in rows], 0)} |"
        )
    ours = results[names[0]]
    lines.append("")
    floor_names = [name for name in names if name.startswith("httpx floor")]
    if floor_names:
        over_floor = _ratio([m.searchable for m in ours], [m.searchable for m in results[floor_names[0]]])
        lines.append(f"until searchable, ours over the floor per round: {over_floor}")
    oikb_names = [name for name in names if name.startswith("oikb")]
    if oikb_names:
        best = [min(_known(results[n][i].searchable for n in oikb_names), default=None) for i in range(rounds)]
        best_again = [min(results[n][i].again or 0.0 for n in oikb_names) for i in range(rounds)]
        lines.append(f"until searchable, ours over oikb's best per round: {_ratio([m.searchable for m in ours], best)}")
        lines.append(f"nothing changed, ours over oikb's best per round: {_ratio([m.again for m in ours], best_again)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    parser.add_argument("--version", default=owui.NEWEST)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="each way this many times, in a rotating order")
    parser.add_argument(
        "--held",
        type=int,
        default=0,
        help="each way on a copy of an Open WebUI already holding this many other notes (its time per file grows "
        "with them)",
    )
    parser.add_argument(
        "--ways",
        default=",".join(WAYS),
        help=f"comma-separated, of {', '.join(WAYS)} (sync is always measured; oikb-concurrent never completes at "
        "2,000 notes: Open WebUI refuses some of its uploads)",
    )
    args = parser.parse_args()
    ways = [way.strip() for way in args.ways.split(",") if way.strip()]
    unknown = sorted(set(ways) - set(WAYS))
    if unknown:
        parser.error(f"unknown way(s): {', '.join(unknown)}")
    print(run(args.version, args.files, args.concurrency, args.rounds, args.held, ways))


if __name__ == "__main__":
    main()
