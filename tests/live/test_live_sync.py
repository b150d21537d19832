"""`openwebui-rag-mcp sync DIR --knowledge-id ID` as a subprocess against a real Open WebUI of every release.

A folder of 52 small files (Markdown, plain text, CSV, HTML; Cyrillic and CJK in names and text; subfolders) is
synced into a new base; the base must then hold exactly one document per file, and a second run must change nothing.
On Open WebUI 0.9.6 and later the base mirrors the folder: each file under its own name in an Open WebUI folder of
the same path, with the SHA-256 of its bytes as Open WebUI keeps it. On older releases each file is named
`<path key>~<12 hex digits of the SHA-256 of the bytes>.<ext>`. Then a file is edited, one renamed, one deleted and
one added: `--dry-run` reports and changes nothing, a run without `--delete` keeps the deleted file's document, a run
with `--delete` ends with exactly the folder's files. Last, a run killed half-way (SIGTERM) and run again ends with
the same documents as the uninterrupted runs.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from devtools import fake_embeddings
from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import load_settings
from openwebui_rag_mcp.runtime import running_app
from openwebui_rag_mcp.sync.base import folders_of_documents
from openwebui_rag_mcp.sync.names import synced_name
from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.source import folder_source
from tests.live.syncrun import (
    Run,
    documents_of,
    expected_names,
    folders_by_walk,
    interrupted_sync,
    mirrors,
    names_of,
    run_sync,
)

FILES = 52
# Subfolders (Cyrillic and CJK among them) and name stems the files are spread over.
FOLDERS = ("", "docs", "docs/deep", "заметки", "ノート/第二")
STEMS = ("note", "отчёт", "メモ", "plan")


def content(kind: str, index: int, relative: str, run: str) -> str:
    """Small, unique text (Open WebUI refuses identical text twice in one base)."""
    words = f"document {index} of run {run}, kept at {relative}"
    if kind == "md":
        return f"# Заметка {index} · 笔记 {index}\n\nThe {words}.\nЁжик считает до {index}. 第{index}章。\n"
    if kind == "txt":
        return f"Plain text {index}\n{words}\nПростой текст номер {index}; 純文本 {index}\n"
    if kind == "csv":
        return f"id,name,note\n{index},Имя {index},{words}\n{index + 1},名前 {index},second row {index}\n"
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>Page {index}</title></head>\n"
        f"<body>\n<h1>Page {index}</h1>\n<p>The {words}.</p>\n<p>Страница {index} 页面</p>\n</body></html>\n"
    )


def make_folder(root: Path, run: str) -> Path:
    folder = root / "синхро 同期"
    kinds = ("md", "txt", "csv", "html")
    for index in range(FILES):
        kind = kinds[index % len(kinds)]
        sub = FOLDERS[index % len(FOLDERS)]
        stem = STEMS[(index // len(kinds)) % len(STEMS)]
        relative = f"{sub}/{stem}-{index:02d}.{kind}".lstrip("/")
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content(kind, index, relative, run), encoding="utf-8")
    return folder


def assert_one_document_per_file(inst: Instance, knowledge_id: str, folder: Path) -> None:
    names = names_of(inst, knowledge_id)
    assert len(names) == len(set(names)), f"duplicate documents: {names}"
    assert names == expected_names(folder, mirrors(inst))


def test_sync_a_folder_then_changes_then_an_interrupted_run(live_openwebui: Instance, tmp_path: Path) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = make_folder(tmp_path, run)
    assert len(expected_names(folder, mirrors(inst))) == FILES
    knowledge_id = owui.create_knowledge(inst, f"sync-{run}", "a folder kept in sync", private=True)
    timings: list[str] = []

    # 1. The first run adds every file.
    first = run_sync(inst, folder, knowledge_id)
    timings.append(f"first run ({FILES} uploads): {first.seconds:.1f} s")
    assert first.code == 0, first.lines
    assert first.summary == {"added": FILES, "replaced": 0, "renamed": 0, "removed": 0, "unchanged": 0, "failed": 0}
    assert_one_document_per_file(inst, knowledge_id, folder)
    synced = documents_of(inst, knowledge_id)

    # 2. The second run is a no-op.
    second = run_sync(inst, folder, knowledge_id)
    timings.append(f"second run (no-op): {second.seconds:.1f} s")
    assert second.code == 0, second.lines
    assert second.summary == {"added": 0, "replaced": 0, "renamed": 0, "removed": 0, "unchanged": FILES, "failed": 0}
    assert documents_of(inst, knowledge_id) == synced

    # 3. An edit, a rename, a deletion and a new file.
    edited = folder / "docs" / "отчёт-06.csv"
    renamed_from, renamed_to = folder / "заметки" / "plan-13.txt", folder / "заметки" / "переименован 改名.txt"
    deleted = folder / "ノート" / "第二" / "отчёт-04.md"
    new = folder / "docs" / "deep" / "新しい-новый.html"
    for path in (edited, renamed_from, deleted):
        assert path.is_file(), path
    old_names = {path: expected_name_of(inst, folder, path) for path in (edited, renamed_from, deleted)}
    edited.write_text(edited.read_text(encoding="utf-8") + "99,Правка 编辑,an edited row\n", encoding="utf-8")
    renamed_from.rename(renamed_to)
    deleted.unlink()
    new.write_text(content("html", 99, "docs/deep/новый.html", run), encoding="utf-8")
    final_names = expected_names(folder, mirrors(inst))
    assert len(final_names) == FILES

    # 4. --dry-run says what it would do and does nothing, with or without --delete.
    for flags in (("--dry-run",), ("--dry-run", "--delete")):
        dry = run_sync(inst, folder, knowledge_id, *flags)
        assert dry.code == 0, dry.lines
        said = "\n".join(dry.lines)
        assert "dry run: nothing was changed" in said
        assert f"would replace  {edited.relative_to(folder).as_posix()}" in dry.lines, dry.lines
        assert f"would rename   {renamed_to.relative_to(folder).as_posix()}" in dry.lines, dry.lines
        assert f"would add      {new.relative_to(folder).as_posix()}" in dry.lines, dry.lines
        removals = [line for line in dry.lines if line.startswith("would remove")]
        if "--delete" in flags:
            removed_keys = {old_names[deleted]}  # the renamed file is renamed, not removed
            assert len(removals) == 1, dry.lines
            stems = {key.split("~")[0].split("#")[0] for key in removed_keys}
            assert all(any(stem in line for line in removals) for stem in stems), dry.lines
        else:
            assert removals == [], dry.lines
        assert documents_of(inst, knowledge_id) == synced, f"{flags} changed the base"

    # From here every check runs and the failures are reported together: one wrong step must not hide the others.
    problems: list[str] = []

    def check(condition: bool, what: str) -> None:
        if not condition:
            problems.append(what)

    # 5. Without --delete: the edit, the rename and the new file arrive, the deleted file's document stays. A rename
    # moves the document (Open WebUI holds one text once per base): the old name goes, the new one comes.
    kept = run_sync(inst, folder, knowledge_id)
    timings.append(f"run without --delete: {kept.seconds:.1f} s")
    names = names_of(inst, knowledge_id)
    check(kept.code == 0, f"run without --delete: exit {kept.code}: {kept.lines}")
    check(kept.summary == counted(kept), f"run without --delete: the summary is not what happened: {kept.lines}")
    check(kept.summary["renamed"] == 1, f"run without --delete: not 1 renamed: {kept.lines}")
    check(old_names[deleted] in names, "the deleted file's document was removed without --delete")
    check(old_names[renamed_from] not in names, "the renamed file's old document is still there")
    check(old_names[edited] not in names, "the edited file's old version is still there")
    missing = set(final_names) - set(names)
    check(not missing, f"files of the folder missing after the run without --delete: {sorted(missing)}")

    # 6. With --delete: exactly the folder's files.
    pruned = run_sync(inst, folder, knowledge_id, "--delete")
    timings.append(f"run with --delete: {pruned.seconds:.1f} s")
    check(pruned.code == 0, f"run with --delete: exit {pruned.code}: {pruned.lines}")
    check(pruned.summary == counted(pruned), f"run with --delete: the summary is not what happened: {pruned.lines}")
    check(pruned.summary["removed"] == 1, f"run with --delete: not 1 removed: {pruned.lines}")
    names = names_of(inst, knowledge_id)
    check(
        names == final_names,
        f"after the run with --delete the base has {sorted(set(names) - set(final_names))} more and "
        f"{sorted(set(final_names) - set(names))} fewer than the folder",
    )

    # 7. A run killed half-way (SIGTERM after half the files were reported), then run again, ends with the same
    # documents as an uninterrupted run: one per file of the folder, no duplicate.
    other = owui.create_knowledge(inst, f"sync-killed-{run}", "a folder kept in sync, interrupted", private=True)
    files_before = owui.file_ids(inst)
    started = time.monotonic()
    interrupted_sync(inst, folder, other, after=FILES // 2)
    interrupted = names_of(inst, other)
    assert 0 < len(interrupted) < FILES, f"the run was not stopped half-way: {len(interrupted)} documents"
    timings.append(f"killed run: {time.monotonic() - started:.1f} s, {len(interrupted)} documents")

    again = run_sync(inst, folder, other)
    timings.append(f"run after the kill: {again.seconds:.1f} s")
    check(again.code == 0 and again.summary["failed"] == 0, f"run after the kill: {again.lines}")
    check(again.summary == counted(again), f"run after the kill: the summary is not what happened: {again.lines}")
    names = names_of(inst, other)
    check(len(names) == len(set(names)), f"duplicate documents after the kill and a new run: {names}")
    check(names == final_names, f"after the kill and a new run: {sorted(set(names) ^ set(final_names))} differ")
    # A kill leaves up to --concurrency uploads in flight; the next run's recovery removes those in no base (at most
    # one whose answer never came may be past finding).
    orphans = owui.file_ids(inst) - files_before - set(documents_of(inst, other))
    check(len(orphans) <= 1, f"the killed run and the next left {len(orphans)} uploads in no base: {orphans}")
    timings.append(f"uploads left in no base by the kill: {len(orphans)}")
    print("\n" + "; ".join(timings))
    assert not problems, "\n".join(problems)


def test_a_file_sync_calls_added_is_searchable_at_once(live_openwebui: Instance, tmp_path: Path) -> None:
    """The test embedding server answers a text carrying its slow marker seconds late, so Open WebUI is held while it
    embeds the note: for its own collection, and again for the base's (0.10 links the file between the two; 0.11 to
    0.12.3 call it "completed" between them). When `sync` says "added", a search of the base finds it at once."""
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = tmp_path / "held"
    folder.mkdir()
    words = f"quokka{run} marmot{run} ibis{run}"
    (folder / "held.md").write_text(f"# Held\n\n{words} {fake_embeddings.SLOW_MARKER}.\n", encoding="utf-8")
    knowledge_id = owui.create_knowledge(inst, f"held-{run}", "a note held mid-indexing", private=True)
    done = run_sync(inst, folder, knowledge_id)
    assert done.code == 0, done.lines
    assert done.summary["added"] == 1, done.lines
    answer = owui.query_collection(inst, [knowledge_id], words, k=5)
    texts = [text for documents in answer.get("documents") or [] for text in documents]
    assert any(words in text for text in texts), f"not searchable when sync said it was added: {texts}"
    print(
        f"\n{inst.version}: a note held {2 * fake_embeddings.SLOW_SECONDS:g} s in embedding, synced in "
        f"{done.seconds:.1f} s"
    )


def counted(run: Run) -> dict[str, int]:
    """The summary a run should print: what its per-file lines say happened."""

    def done(action: str) -> int:
        return sum(line.startswith(f"{action} ") and line.endswith(": ok") for line in run.lines)

    return {
        "added": done("add"),
        "replaced": done("replace"),
        "renamed": done("rename"),
        "removed": done("remove"),
        "unchanged": run.summary["unchanged"],
        "failed": sum(": FAILED - " in line or line.startswith("skipped ") for line in run.lines),
    }


def expected_name_of(inst: Instance, folder: Path, path: Path) -> str:
    """The identity of one file of the folder (as it is now) in the base."""
    if mirrors(inst):
        return f"{path.relative_to(folder).as_posix()}#{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"
    local, _ = scan(folder, 10**9)
    (file,) = [item for item in local if item.path == path]
    source = folder_source(folder, None, create=False).id
    assert source is not None  # kept in the folder by the first run
    return synced_name(file, source)


@pytest.mark.parametrize("flags", [(), ("--dry-run",)])
def test_sync_into_a_base_that_cannot_be_read(live_openwebui: Instance, tmp_path: Path, flags: tuple[str]) -> None:
    """Exit 5 and nothing uploaded when the base does not exist (or the key cannot read it)."""
    inst = live_openwebui
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "one.md").write_text("# One\n\nA file that must not be uploaded.\n", encoding="utf-8")
    files_before = owui.file_ids(inst)
    refused = run_sync(inst, folder, str(uuid.uuid4()), *flags)
    assert refused.code == 5, refused.lines
    assert owui.file_ids(inst) == files_before


@pytest.mark.releases("0.10.2")  # folders, but lists that do not say which folder holds a document (0.9.6 to 0.11)
def test_one_comparison_places_the_documents_where_the_lists_do_not(
    live_openwebui: Instance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a run with nothing changed asks instead of reading the folders one by one: Open WebUI's own folder
    comparison, asked where each document's upload metadata places it, names the document at each place. It must
    agree with the folder lists; a document moved by hand must send the run back to them."""
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = tmp_path / "placed"
    for index, where in enumerate(("", "docs", "docs/deep", "заметки", "docs")):
        (folder / where).mkdir(parents=True, exist_ok=True)
        (folder / where / f"note-{index}.md").write_text(f"# {run} note {index} in {where or 'the top'}\n")
    knowledge_id = owui.create_knowledge(inst, f"placed-{run}", "one comparison", private=True)
    assert run_sync(inst, folder, knowledge_id).code == 0
    walks: list[str] = []
    real_walk = OpenWebUIClient.folder_documents

    async def counted_walk(self: OpenWebUIClient, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        walks.append(knowledge_id)
        return await real_walk(self, *args, **kwargs)

    monkeypatch.setattr(OpenWebUIClient, "folder_documents", counted_walk)

    async def placed() -> dict[str, str]:
        settings = load_settings({"OPENWEBUI_URL": inst.url, "OPENWEBUI_API_KEY": inst.api_key})
        async with running_app(settings) as app:
            raw, _ = await app.client.knowledge_files(knowledge_id, None)
            documents = [normalize.folder_document(item) for item in raw]
            return await folders_of_documents(app, knowledge_id, documents)

    truth = folders_by_walk(inst, knowledge_id)
    assert sorted(truth.values()) == ["", "docs", "docs", "docs/deep", "заметки"]
    assert (anyio.run(placed), walks) == (truth, [])

    # Moved by hand into another folder: not where its metadata says, so the folder lists decide.
    moved = next(file_id for file_id, path in truth.items() if path == "docs/deep")
    deeper = next(file_id for file_id, path in truth.items() if path == "заметки")
    target = folders_by_walk_ids(inst, knowledge_id)["заметки"]
    with owui.client(inst) as http:
        answer = http.post(
            f"/api/v1/knowledge/{knowledge_id}/file/move", json={"file_id": moved, "directory_id": target}
        )
        assert answer.status_code == 200, answer.text
    truth = folders_by_walk(inst, knowledge_id)
    assert truth[moved] == truth[deeper] == "заметки"
    assert (anyio.run(placed), walks) == (truth, [knowledge_id])


def folders_by_walk_ids(inst: Instance, knowledge_id: str) -> dict[str, str]:
    """path -> folder id of every folder of the base."""
    with owui.client(inst) as http:
        answer = http.post(f"/api/v1/knowledge/{knowledge_id}/sync/diff", json={"manifest": []})
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["directory_map"])


def test_a_copy_of_a_synced_folder_is_refused_and_the_originals_documents_stay(
    live_openwebui: Instance, tmp_path: Path
) -> None:
    """Issue 41, item 5: copying a synced folder copies its id file. Synced as the original, the copy replaced the
    original's documents with its edits and `--delete` removed those of the files it lacks; now the copy is refused
    (exit 5, saying how to go on), the base is as the original left it, and the original still syncs as itself."""
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    original, copy = tmp_path / "original", tmp_path / "copy"
    (original / "docs").mkdir(parents=True)
    for index, where in enumerate(("", "", "docs")):
        (original / where / f"note-{index}.md").write_text(f"# {run} note {index}\n")
    knowledge_id = owui.create_knowledge(inst, f"copied-{run}", "a folder and its copy", private=True)
    first = run_sync(inst, original, knowledge_id)
    assert first.code == 0, first.told([])
    before = documents_of(inst, knowledge_id)
    assert len(before) == 3
    shutil.copytree(original, copy)
    (copy / "note-0.md").write_text(f"# {run} note 0, edited in the copy\n")
    (copy / "note-1.md").unlink()
    for flags in ((), ("--delete",), ("--delete", "--dry-run")):
        refused = run_sync(inst, copy, knowledge_id, *flags)
        assert refused.code == 5, refused.told([])
        assert any("looks like a copy" in line and "--source" in line for line in refused.lines), refused.lines
    assert documents_of(inst, knowledge_id) == before
    again = run_sync(inst, original, knowledge_id, "--delete")
    assert again.code == 0, again.told([])
    assert again.summary == {"added": 0, "replaced": 0, "renamed": 0, "removed": 0, "unchanged": 3, "failed": 0}
    assert documents_of(inst, knowledge_id) == before
