"""Issue 18: a 500-file folder synced into a real Open WebUI of every release, files going up several at a time.

The first run is killed with SIGKILL once a third of the files are reported (up to `--concurrency` uploads are then in
flight, some not answered yet); the next run finishes the work: every file of the folder is one document of the
base, none twice, and no upload of the killed run is left in no base (the journal of uploads in flight finds them).
A third run with nothing changed adds, replaces and removes nothing, and Open WebUI holds no new file after it.
Counts and outcomes only: how long the runs take is printed, never asserted.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from tests.live.test_live_sync import (
    Run,
    command,
    counted,
    documents_of,
    expected_names,
    mirrors,
    names_of,
    run_sync,
    sync_env,
)

FILES = 500
SUBFOLDERS = 10


def make_folder(root: Path, run: str) -> Path:
    folder = root / "handbook"
    for index in range(FILES):
        sub = folder / f"team-{index % SUBFOLDERS:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note-{index:03d}.md").write_text(
            f"# Note {index} of run {run}\n\nMeeting {index}: decision {index * 7919 % 10007}, owner person{index}.\n",
            encoding="utf-8",
        )
    return folder


def killed_after(inst: Instance, folder: Path, knowledge_id: str, reported_ok: int) -> list[str]:
    """Run sync and SIGKILL it once `reported_ok` files were reported done; the lines it printed."""
    reported: list[str] = []
    with subprocess.Popen(
        command(folder, knowledge_id), env=sync_env(inst), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            assert process.stdout is not None
            for line in process.stdout:  # one line per file, flushed as each is done
                reported.append(line.rstrip("\n"))
                if sum(entry.endswith(": ok") for entry in reported) >= reported_ok:
                    break
            process.kill()
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == -signal.SIGKILL, (process.returncode, reported[-5:])
    return reported


def test_a_500_file_folder_killed_half_way_then_finished_then_unchanged(
    live_openwebui: Instance, tmp_path: Path
) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = make_folder(tmp_path, run)
    knowledge_id = owui.create_knowledge(inst, f"sync-500-{run}", "a large folder kept in sync", private=True)
    files_before = owui.file_ids(inst)
    timings: list[str] = []

    started = time.monotonic()
    killed_after(inst, folder, knowledge_id, FILES // 3)
    interrupted = len(documents_of(inst, knowledge_id))
    timings.append(f"killed run: {time.monotonic() - started:.1f} s, {interrupted} documents")
    assert FILES // 3 <= interrupted < FILES, interrupted

    finished: Run = run_sync(inst, folder, knowledge_id)
    timings.append(f"run after the kill: {finished.seconds:.1f} s")
    assert finished.code == 0, finished.lines[-20:]
    assert finished.summary == counted(finished), finished.lines[-5:]
    assert finished.summary["failed"] == 0, finished.lines[-20:]
    assert finished.summary["added"] + finished.summary["unchanged"] == FILES, finished.summary
    names = names_of(inst, knowledge_id)
    assert len(names) == len(set(names)), "duplicate documents after the kill and a new run"
    assert names == expected_names(folder, mirrors(inst))
    held = set(documents_of(inst, knowledge_id))
    orphans = owui.file_ids(inst) - files_before - held
    assert orphans == set(), f"uploads of the killed run left in no base: {sorted(orphans)}"

    again = run_sync(inst, folder, knowledge_id)
    timings.append(f"run with nothing changed: {again.seconds:.1f} s")
    assert again.code == 0, again.lines[-20:]
    assert again.summary == {
        "added": 0,
        "replaced": 0,
        "renamed": 0,
        "removed": 0,
        "unchanged": FILES,
        "failed": 0,
    }, again.lines[-5:]
    assert owui.file_ids(inst) - files_before == held  # nothing uploaded, nothing removed
    print("\n" + "; ".join(timings))
