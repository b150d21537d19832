"""`sync --delete` in each situation of issue 16's defects 0 to 5, as a subprocess against a real Open WebUI.

Each test syncs a few small files into its own base and checks the base through Open WebUI's own API afterwards
(which documents it holds, by file id and filename; whether a removed document's file was deleted):

0. A file the run skips (over OPENWEBUI_UPLOAD_MAX_BYTES, emptied, replaced by a link) keeps its document, which
   a new file with its former bytes does not take (the rename rule).
1. Two folders (two source ids) in one base: neither folder's `--delete` removes the other's documents, and a file
   with the other folder's bytes takes none of its documents.
2. `--delete` in an empty folder, or removing more than half and more than 5 documents, is refused (exit 3) before
   any change, `--dry-run` too; `--max-delete N` allows exactly N.
3. A document uploaded by hand under a name like the old sync names neither switches the base's naming nor is
   removed.
4. A FIFO and a dangling link where files were: the run ends, names them as skipped and keeps their documents.
5. A folder with an empty file and two copies of the same bytes settles: the next run exits 0 and writes nothing.

The names differ by release (0.9.6 and later: the file's own name in a base that mirrors the folder; before:
`key~source~hash.ext`), so documents are told apart by `synced_as`, which accepts both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from devtools import fake_embeddings
from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from openwebui_rag_mcp.sync.source import SOURCE_FILE, folder_source
from tests.live.syncrun import RUN_TIMEOUT, Run, command, mirrors, sync_env

NO_WRITE = {"added": 0, "replaced": 0, "renamed": 0, "removed": 0}


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test keeps its own journal of uploads in flight (sync_env passes XDG_STATE_HOME on)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def sync(inst: Instance, folder: Path, knowledge_id: str, *flags: str, max_bytes: int | None = None) -> Run:
    """`run_sync`, with OPENWEBUI_UPLOAD_MAX_BYTES when given."""
    env = sync_env(inst)
    if max_bytes is not None:
        env["OPENWEBUI_UPLOAD_MAX_BYTES"] = str(max_bytes)
    started = time.monotonic()
    done = subprocess.run(
        command(folder, knowledge_id, *flags), env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    assert inst.api_key not in done.stdout + done.stderr
    return Run(done.returncode, done.stdout.splitlines() + done.stderr.splitlines(), time.monotonic() - started)


def documents(inst: Instance, knowledge_id: str) -> dict[str, str]:
    """file_id -> filename of every document Open WebUI says the base holds."""
    held = owui.files_of(inst, knowledge_id)
    with owui.client(inst) as http:
        return {file_id: str(http.get(f"/api/v1/files/{file_id}").json()["filename"]) for file_id in held}


def synced_as(filename: str, name: str) -> bool:
    """Whether `filename` is the name sync gives the file `name` (a plain name at the top of the folder): the name
    itself where the base mirrors the folder, else `stem~<source id>~<12 hex digits>.ext`."""
    stem, dot, extension = name.rpartition(".")
    pattern = rf"{re.escape(stem)}~[0-9a-f]{{8}}~[0-9a-f]{{12}}{re.escape(dot + extension)}"
    return filename == name or re.fullmatch(pattern, filename) is not None


def doc_of(held: dict[str, str], name: str) -> str:
    """The file id of the one document of the base that is the file `name`'s."""
    found = [file_id for file_id, filename in held.items() if synced_as(filename, name)]
    assert len(found) == 1, f"{len(found)} documents for {name}: {held}"
    return found[0]


def write(folder: Path, names: list[str], run: str) -> None:
    """Small files, each with its own text (Open WebUI holds a text once per base)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(f"# {name}\n\nThe text of {name} in run {run}, {uuid.uuid4().hex}.\n")


def assert_skipped(run: Run, name: str, why: str = "") -> None:
    """The run named `name` on a `skipped` line (saying `why`)."""
    lines = [line for line in run.lines if line.startswith(f"skipped   {name}: ")]
    assert len(lines) == 1, run.lines
    assert why in lines[0], lines[0]


def refusal(run: Run) -> str:
    lines = [line for line in run.lines if line.startswith("refused: ")]
    assert len(lines) == 1, run.lines
    return lines[0]


def pending(inst: Instance, knowledge_id: str) -> list[object]:
    """Open WebUI's pending list of the base: uploads naming it that it is still processing (0.9.6+)."""
    with owui.client(inst) as http:
        answer = http.get(f"/api/v1/knowledge/{knowledge_id}/files/pending")
        answer.raise_for_status()
        items = answer.json()
    assert isinstance(items, list), items
    return items


def new_base(inst: Instance, what: str) -> str:
    return owui.create_knowledge(
        inst, f"sync-fault-{what}-{uuid.uuid4().hex[:8]}", f"sync --delete: {what}", private=True
    )


# -- 0. A file skipped by this run keeps its document ------------------------------------------------------------------


def test_files_this_run_skips_keep_their_documents(live_openwebui: Instance, tmp_path: Path) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = tmp_path / "folder"
    write(folder, ["a.md", "b.md", "c.md", "d.md"], run)
    (folder / "c.md").write_text("# c.md\n\n" + f"A file that grows over the limit, run {run}. " * 40)
    knowledge_id = new_base(inst, "skipped")
    first = sync(inst, folder, knowledge_id)
    assert first.code == 0, first.lines
    before = documents(inst, knowledge_id)
    assert len(before) == 4, before
    ids = {name: doc_of(before, name) for name in ("a.md", "b.md", "c.md", "d.md")}

    limit = 400
    assert (folder / "c.md").stat().st_size > limit > max((folder / name).stat().st_size for name in ("a.md", "b.md"))
    # b.md's bytes under a new name (the rename rule must not take the skipped file's document), then b.md emptied.
    shutil.copyfile(folder / "b.md", folder / "b-moved.md")
    (folder / "b.md").write_bytes(b"")
    (folder / "d.md").unlink()
    outside = tmp_path / "outside.md"
    outside.write_text(f"# Outside\n\nNot in the folder, run {run}.\n")
    (folder / "d.md").symlink_to(outside)  # replaced by a link

    for flags in (("--delete", "--dry-run"), ("--delete",)):
        again = sync(inst, folder, knowledge_id, *flags, max_bytes=limit)
        said = "\n".join(again.lines)
        assert again.code == 1, said  # too large and a link fail; empty does not
        assert_skipped(again, "c.md", "over OPENWEBUI_UPLOAD_MAX_BYTES")
        assert_skipped(again, "b.md", "empty")
        assert_skipped(again, "d.md", "not a regular file")
        assert_skipped(again, "b-moved.md", "already in the base")
        assert not any(
            line.startswith(("would remove", "remove ", "would rename", "rename ")) for line in again.lines
        ), said
        if "--dry-run" not in flags:
            assert again.summary == NO_WRITE | {"unchanged": 1, "failed": 2}, said
        assert documents(inst, knowledge_id) == before, f"{flags}: {said}"
    assert set(ids.values()) <= owui.file_ids(inst), "a skipped file's Open WebUI file was deleted"


# -- 1. Two folders in one base ----------------------------------------------------------------------------------------


def test_two_folders_in_one_base_never_remove_each_others_documents(live_openwebui: Instance, tmp_path: Path) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    first, second = tmp_path / "first", tmp_path / "second"
    write(first, ["one.md", "two.md", "shared.md"], run)
    write(second, ["three.md", "four.md"], run)
    shutil.copyfile(first / "shared.md", second / "shared.md")  # the same path and bytes in both folders
    shutil.copyfile(first / "two.md", second / "copied.md")  # the first folder's bytes under another name
    knowledge_id = new_base(inst, "two-folders")

    synced = sync(inst, first, knowledge_id, "--delete")
    assert synced.code == 0, synced.lines
    assert synced.summary == NO_WRITE | {"added": 3, "unchanged": 0, "failed": 0}, synced.lines
    held = documents(inst, knowledge_id)
    firsts = {name: doc_of(held, name) for name in ("one.md", "two.md", "shared.md")}

    other = sync(inst, second, knowledge_id, "--delete")
    said = "\n".join(other.lines)
    assert other.code == 0, said
    sources = folder_source(first, None, create=False).id, folder_source(second, None, create=False).id
    assert None not in sources, sources
    assert sources[0] != sources[1], sources
    assert (first / SOURCE_FILE).is_file()
    assert (second / SOURCE_FILE).is_file()
    assert "also holds 3 document(s) synced from other folders" in said, said
    assert_skipped(other, "copied.md", "already in the base")
    # shared.md: held already (the same path and bytes), so neither uploaded again nor taken over.
    assert other.summary == NO_WRITE | {"added": 2, "unchanged": 1, "failed": 0}, said
    held = documents(inst, knowledge_id)
    assert len(held) == 5, held
    assert {name: doc_of(held, name) for name in firsts} == firsts
    seconds = {name: doc_of(held, name) for name in ("three.md", "four.md")}

    # The second folder's copies go, then one of its own files: --delete removes that one only.
    (second / "shared.md").unlink()
    (second / "copied.md").unlink()
    (second / "three.md").unlink()
    pruned = sync(inst, second, knowledge_id, "--delete")
    said = "\n".join(pruned.lines)
    assert pruned.code == 0, said
    assert pruned.summary == NO_WRITE | {"removed": 1, "unchanged": 1, "failed": 0}, said
    held = documents(inst, knowledge_id)
    assert set(held) == set(firsts.values()) | {seconds["four.md"]}, held
    assert seconds["three.md"] not in owui.file_ids(inst)

    # The first folder's --delete leaves the second folder's document alone.
    back = sync(inst, first, knowledge_id, "--delete")
    said = "\n".join(back.lines)
    assert back.code == 0, said
    assert "also holds 1 document(s) synced from other folders" in said, said
    assert back.summary == NO_WRITE | {"unchanged": 3, "failed": 0}, said
    assert set(documents(inst, knowledge_id)) == set(held)


# -- 2. The --delete bound ---------------------------------------------------------------------------------------------


def test_delete_is_refused_for_an_empty_folder_and_for_most_documents(live_openwebui: Instance, tmp_path: Path) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder, aside = tmp_path / "folder", tmp_path / "aside"
    names = [f"f{number}.md" for number in range(8)]
    write(folder, names, run)
    knowledge_id = new_base(inst, "bound")
    first = sync(inst, folder, knowledge_id)
    assert first.code == 0, first.lines
    held = documents(inst, knowledge_id)
    assert len(held) == 8, held
    ids = {name: doc_of(held, name) for name in names}

    def unchanged(what: str) -> None:
        assert documents(inst, knowledge_id) == held, f"{what} changed the base"
        assert set(held) <= owui.file_ids(inst), f"{what} deleted files"

    # An empty folder (an unmounted share): refused, with or without --dry-run.
    aside.mkdir()
    for name in names:
        (folder / name).rename(aside / name)
    assert [path.name for path in folder.iterdir()] == [SOURCE_FILE]
    for empty_flags in (("--delete",), ("--delete", "--dry-run")):
        refused = sync(inst, folder, knowledge_id, *empty_flags)
        assert refused.code == 3, refused.lines
        assert "holds no file" in refusal(refused), refused.lines
        assert "--max-delete 8" in refusal(refused), refused.lines
        unchanged(" ".join(empty_flags))

    # Two files back: 6 of 8 would go, more than half and more than 5.
    kept = names[:2]
    for name in kept:
        (aside / name).rename(folder / name)
    for flags in (("--delete",), ("--delete", "--dry-run"), ("--delete", "--max-delete", "5")):
        refused = sync(inst, folder, knowledge_id, *flags)
        assert refused.code == 3, refused.lines
        assert "would remove 6 of this folder's 8 documents" in refusal(refused), refused.lines
        unchanged(" ".join(flags))

    allowed = sync(inst, folder, knowledge_id, "--delete", "--max-delete", "6")
    assert allowed.code == 0, allowed.lines
    assert allowed.summary == NO_WRITE | {"removed": 6, "unchanged": 2, "failed": 0}, allowed.lines
    assert documents(inst, knowledge_id) == {ids[name]: held[ids[name]] for name in kept}
    assert not {ids[name] for name in names[2:]} & owui.file_ids(inst), "removed documents' files were kept"
    settled = sync(inst, folder, knowledge_id, "--delete")
    assert settled.code == 0, settled.lines
    assert settled.summary == NO_WRITE | {"unchanged": 2, "failed": 0}, settled.lines


# -- 3. A document filed by hand under a sync-like name ----------------------------------------------------------------


def test_a_document_named_like_a_sync_name_is_never_taken(live_openwebui: Instance, tmp_path: Path) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    knowledge_id = new_base(inst, "by-hand")
    by_hand = {}
    for name in ("report~0123456789ab.md", "notes~someone~0123456789ab.md"):
        file_id = owui.upload_text(inst, name, f"# Filed by hand\n\n{name}, run {run}, {uuid.uuid4().hex}.\n")
        owui.add_file(inst, knowledge_id, file_id)
        by_hand[file_id] = name
    folder = tmp_path / "folder"
    write(folder, ["report.md", "notes.md", "other.md"], run)

    first = sync(inst, folder, knowledge_id, "--delete")
    said = "\n".join(first.lines)
    assert first.code == 0, said
    assert first.summary == NO_WRITE | {"added": 3, "unchanged": 0, "failed": 0}, said
    assert "goes on naming them that way" not in said, said
    assert "1 document(s) synced from other folders" in said, said
    assert "1 document(s) from an earlier version of this command" in said, said
    held = documents(inst, knowledge_id)
    assert {file_id: held.get(file_id) for file_id in by_hand} == by_hand, held
    ours = {name: doc_of(held, name) for name in ("report.md", "notes.md", "other.md")}
    # The release's own naming: the file's name where the base mirrors the folder, else the name scheme.
    assert (held[ours["report.md"]] == "report.md") is mirrors(inst), held

    (folder / "report.md").unlink()
    (folder / "notes.md").unlink()
    pruned = sync(inst, folder, knowledge_id, "--delete")
    said = "\n".join(pruned.lines)
    assert pruned.code == 0, said
    assert pruned.summary == NO_WRITE | {"removed": 2, "unchanged": 1, "failed": 0}, said
    assert documents(inst, knowledge_id) == by_hand | {ours["other.md"]: held[ours["other.md"]]}
    assert set(by_hand) <= owui.file_ids(inst)

    for flags in ((), ("--delete",)):
        later = sync(inst, folder, knowledge_id, *flags)
        assert later.code == 0, later.lines
        assert later.summary == NO_WRITE | {"unchanged": 1, "failed": 0}, later.lines
    assert set(documents(inst, knowledge_id)) == set(by_hand) | {ours["other.md"]}


def test_a_name_carrying_this_folders_own_source_id_is_not_enough(live_openwebui: Instance, tmp_path: Path) -> None:
    """Someone who knows the folder's source id files a document under a name carrying it. Where the release has
    folders (and keeps upload metadata) the name alone makes nothing this folder's: it neither switches the base to
    names nor is removed by --delete. Before, the name is the mark by design (0.6.5 keeps no upload metadata)."""
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    if not mirrors(inst):
        print(f"Open WebUI {inst.version} keeps no folders: the name is the mark there")
        return
    knowledge_id = new_base(inst, "own-id")
    file_id = owui.upload_text(inst, "report~probe1~0123456789ab.md", f"# Filed by hand, run {run}\n")
    owui.add_file(inst, knowledge_id, file_id)
    folder = tmp_path / "folder"
    write(folder, ["other.md"], run)
    done = sync(inst, folder, knowledge_id, "--delete", "--source", "probe1")
    said = "\n".join(done.lines)
    assert done.code == 0, said
    assert "goes on naming them that way" not in said, said
    assert done.summary == NO_WRITE | {"added": 1, "unchanged": 0, "failed": 0}, said
    held = documents(inst, knowledge_id)
    assert held.get(file_id) == "report~probe1~0123456789ab.md", held
    assert file_id in owui.file_ids(inst)


# -- 4. Files that cannot be read --------------------------------------------------------------------------------------


def test_a_fifo_and_a_dangling_link_are_skipped_and_keep_their_documents(
    live_openwebui: Instance, tmp_path: Path
) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = tmp_path / "folder"
    write(folder, ["a.md", "pipe.md", "link.md"], run)
    knowledge_id = new_base(inst, "unreadable")
    first = sync(inst, folder, knowledge_id)
    assert first.code == 0, first.lines
    held = documents(inst, knowledge_id)
    assert len(held) == 3, held

    (folder / "pipe.md").unlink()
    os.mkfifo(folder / "pipe.md")  # root reads any mode, so a FIFO (which nobody writes) stands for "unreadable"
    (folder / "link.md").unlink()
    (folder / "link.md").symlink_to(tmp_path / "nowhere.md")
    for flags in (("--delete", "--dry-run"), ("--delete",)):
        again = sync(inst, folder, knowledge_id, *flags)
        said = "\n".join(again.lines)
        assert again.code == 1, said
        assert_skipped(again, "pipe.md")
        assert_skipped(again, "link.md")
        assert "Traceback" not in said, said
        if "--dry-run" not in flags:
            assert again.summary == NO_WRITE | {"unchanged": 1, "failed": 2}, said
        assert documents(inst, knowledge_id) == held, f"{flags}: {said}"
    assert set(held) <= owui.file_ids(inst)


# -- 5. A folder with an empty file and copies settles -----------------------------------------------------------------


def test_a_folder_with_an_empty_file_and_copies_settles(live_openwebui: Instance, tmp_path: Path) -> None:
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = tmp_path / "folder"
    write(folder, ["a.md", "copy-1.md"], run)
    shutil.copyfile(folder / "copy-1.md", folder / "copy-2.md")
    (folder / "empty.md").write_bytes(b"")
    knowledge_id = new_base(inst, "settles")
    first = sync(inst, folder, knowledge_id, "--delete")
    said = "\n".join(first.lines)
    assert first.code == 0, said
    assert first.summary == NO_WRITE | {"added": 2, "unchanged": 0, "failed": 0}, said
    assert_skipped(first, "empty.md")
    assert_skipped(first, "copy-2.md")
    held = documents(inst, knowledge_id)
    assert sorted(doc_of(held, name) for name in ("a.md", "copy-1.md")) == sorted(held), held

    for flags in ((), ("--delete",)):
        files_before = owui.file_ids(inst)
        again = sync(inst, folder, knowledge_id, *flags)
        said = "\n".join(again.lines)
        assert again.code == 0, said
        assert again.summary == NO_WRITE | {"unchanged": 2, "failed": 0}, said
        assert_skipped(again, "empty.md")
        assert_skipped(again, "copy-2.md")
        assert owui.file_ids(inst) == files_before, f"{flags}: Open WebUI's files changed"
        assert documents(inst, knowledge_id) == held


# -- 6. Open WebUI slower than OPENWEBUI_PROCESS_TIMEOUT (issue 41, item 4) --------------------------------------------


@pytest.mark.releases("0.10.2", "0.12.4")  # uploads that link themselves (0.9.6+), the ones recovery may remove
def test_uploads_open_webui_indexes_past_the_deadline_are_kept_not_taken_for_lost(
    live_openwebui: Instance, tmp_path: Path
) -> None:
    """The test embedding server holds back its answer for every fifth of 40 notes (its slow marker:
    SLOW_SECONDS per request) past OPENWEBUI_PROCESS_TIMEOUT (2 s here) while the run's later uploads go on. Slow is
    not lost: the run removes nothing, and once Open WebUI is done every file has exactly one document, each found by
    its own words, and no search hit points at a document the base does not hold; the next run has nothing to do."""
    inst, run = live_openwebui, uuid.uuid4().hex[:8]
    folder = tmp_path / "slow"
    folder.mkdir()
    words: dict[str, str] = {}
    for n in range(40):
        name = f"{n:02d}.md"
        words[name] = f"kiwi{run}x{n} tapir{run}x{n}"
        held_back = f" {fake_embeddings.SLOW_MARKER}" if n % 5 == 0 else ""
        (folder / name).write_text(f"# Note {n}\n\n{words[name]}{held_back}.\n", encoding="utf-8")
    knowledge_id = new_base(inst, "slow")
    env = sync_env(inst) | {"OPENWEBUI_TIMEOUT": "5", "OPENWEBUI_PROCESS_TIMEOUT": "2"}
    first = subprocess.run(
        command(folder, knowledge_id), env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    said = first.stdout + first.stderr
    assert inst.api_key not in said
    assert not [line for line in first.stdout.splitlines() if line.startswith(("remove", "removed"))], first.stdout
    assert "OPENWEBUI_PROCESS_TIMEOUT" in first.stdout, first.stdout  # some were held back past it
    deadline = time.monotonic() + 300  # Open WebUI finishes what it was given (a hang guard only)
    while time.monotonic() < deadline and (
        pending(inst, knowledge_id) or len(owui.files_of(inst, knowledge_id, indexed=True)) < len(words)
    ):
        time.sleep(1)
    held = documents(inst, knowledge_id)
    for name in words:
        doc_of(held, name)  # exactly one each
    assert len(held) == len(words), held
    for name, said_words in words.items():
        answer = owui.query_collection(inst, [knowledge_id], said_words, k=5)
        hits = [meta.get("file_id") for metas in answer.get("metadatas") or [] for meta in metas]
        assert set(hits) <= set(held), f"a hit for {name} points at no document of the base: {hits}"
        texts = [text for documents in answer.get("documents") or [] for text in documents]
        assert any(said_words in text for text in texts), f"{name} is not found by its words"
    second = subprocess.run(
        command(folder, knowledge_id), env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "done: 0 added, 0 replaced, 0 renamed, 0 removed, 40 unchanged, 0 failed" in second.stdout, second.stdout
    assert documents(inst, knowledge_id) == held
