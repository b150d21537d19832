"""The folder's source id: kept by the first real run, given with --source where the folder cannot keep it, and
the only thing that makes a document this folder's."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from openwebui_rag_mcp import runtime
from openwebui_rag_mcp.sync.names import SYNCED_BY
from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.source import SOURCE_FILE
from openwebui_rag_mcp.sync.types import OK, UNUSABLE
from openwebui_rag_mcp.upload import Upload, upload_to_base
from tests.conftest import make_settings
from tests.support.sync import (
    KB,
    Base,
    quiet,
    run,
    skipped_lines,
    writes_since,
)

pytestmark = pytest.mark.anyio


async def test_a_folder_that_cannot_keep_its_source_id_needs_source(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only folder cannot keep the id the first run makes: the run stops before any change and asks for
    --source; with it, the folder is synced and settles, and its documents carry that id."""
    (tmp_path / "a.md").write_text("# A")
    real_open = os.open

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(os.fsdecode(path)).name == SOURCE_FILE and flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    code, lines = await run(tmp_path)
    assert code == UNUSABLE, lines
    assert any("--source" in line and "Read-only file system" in line for line in lines), lines
    assert base.router.calls == []  # stopped before asking Open WebUI anything
    code, lines = await run(tmp_path, source="handbook-ro")
    assert code == OK, lines
    (file_id,) = base.members
    if base.mirrored:
        assert base.files[file_id]["meta"]["data"]["sync_source"] == "handbook-ro"
    else:
        assert "~handbook-ro~" in base.files[file_id]["filename"]
    calls = len(base.router.calls)
    assert (await run(tmp_path, source="handbook-ro", delete=True))[0] == OK
    assert writes_since(base, calls) == []
    assert not (tmp_path / SOURCE_FILE).exists()


async def test_the_first_real_run_keeps_a_source_id_in_the_folder(base: Base, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path, dry_run=True)
    assert code == OK, lines
    assert not (tmp_path / SOURCE_FILE).exists()  # a dry run writes nothing, not even the id
    assert (await run(tmp_path))[0] == OK
    kept = (tmp_path / SOURCE_FILE).read_text()
    source = kept.split()[-1]
    assert len(source) == 8
    assert (await run(tmp_path))[0] == OK
    assert (tmp_path / SOURCE_FILE).read_text() == kept


async def test_two_folders_synced_into_one_base_leave_each_other_alone(base: Base, tmp_path: Path) -> None:
    """Two people's folders in one base: each run (with --delete too) manages only its own folder's documents, a
    file with the same bytes as the other folder's is not taken from it, and the plan says the others are there."""
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, names in ((first, ("a.md", "shared.md")), (second, ("b.md", "elsewhere.md"))):
        folder.mkdir()
        for name in names:
            (folder / name).write_text("# the same words in both" if name in ("shared.md", "elsewhere.md") else name)
    assert (await run(first))[0] == OK
    firsts = dict(base.members)

    code, lines = await run(second, delete=True)
    assert code == OK, lines
    assert firsts.items() <= base.members.items()  # none removed, none renamed away
    assert any("2 document(s) synced from other folders" in line for line in lines), lines
    assert "already in the base as shared" in skipped_lines(lines)["elsewhere.md"]
    seconds = set(base.members) - set(firsts)
    assert len(seconds) == 1

    calls = len(base.router.calls)
    code, lines = await run(second, delete=True)
    assert (code, writes_since(base, calls)) == (OK, [])
    code, lines = await run(first, delete=True)
    assert (code, writes_since(base, calls)) == (OK, [])
    assert seconds <= set(base.members)


async def test_a_document_filed_by_hand_under_an_old_synced_name_is_not_the_commands(
    base: Base, tmp_path: Path
) -> None:
    """Only the mark the command writes with this folder's source id makes a document its own: a name that looks
    like an old synced name neither switches a base with folders to names nor is removed by --delete."""
    async with runtime.running_app(make_settings()) as app:
        upload = Upload("report~0123456789ab.md", b"# filed by hand", "text/markdown", {})
        await upload_to_base(app, KB, upload, quiet, text=None, tool="test")
    theirs = set(base.members)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.md").write_text("# A")
    (tmp_path / "sub" / "b.md").write_text("# B")
    code, lines = await run(tmp_path, delete=True)
    assert code == OK, lines
    assert not any("naming them that way" in line for line in lines), lines
    assert theirs <= set(base.members)
    if base.mirrored:
        assert "sub/b.md" in base.names()
    calls = len(base.router.calls)
    code, lines = await run(tmp_path, delete=True)
    assert (code, writes_since(base, calls)) == (OK, []), lines
    assert theirs <= set(base.members)


async def test_documents_of_an_earlier_version_without_a_source_are_held_never_removed(
    base: Base, tmp_path: Path
) -> None:
    """Marked by a version of the command that wrote no source id: the same path with the same bytes is held; none
    is removed by --delete, and none is taken by the rename rule."""
    for name in ("keep.md", "gone.md", "moved.md"):
        (tmp_path / name).write_text(f"# {name}")
    async with runtime.running_app(make_settings()) as app:
        for file in scan(tmp_path, 10**6)[0]:
            legacy = f"{file.key}~{file.sha256[:12]}{file.extension}"
            name, metadata = (file.relative, {"synced_by": SYNCED_BY}) if base.mirrored else (legacy, {})
            upload = Upload(name, file.path.read_bytes(), "text/markdown", metadata)
            await upload_to_base(app, KB, upload, quiet, text=None, tool="test")
    earlier, calls = dict(base.members), len(base.router.calls)
    (tmp_path / "gone.md").unlink()
    (tmp_path / "moved.md").rename(tmp_path / "renamed.md")
    code, lines = await run(tmp_path, delete=True)
    assert code == OK, lines
    assert (base.members, writes_since(base, calls)) == (earlier, [])
    assert any("3 document(s) from an earlier version" in line for line in lines), lines
    assert "already in the base" in skipped_lines(lines)["renamed.md"]


async def test_a_document_named_with_this_folders_own_source_is_not_its_own(base: Base, tmp_path: Path) -> None:
    """Someone who knows the folder's source id files a document under a name carrying it: on a release with folders
    (which keeps upload metadata) the name alone neither switches the base to names nor makes --delete remove it."""
    async with runtime.running_app(make_settings()) as app:
        upload = Upload("report~laptop~0123456789ab.md", b"# filed by hand", "text/markdown", {})
        await upload_to_base(app, KB, upload, quiet, text=None, tool="test")
    theirs = set(base.members)
    (tmp_path / "other.md").write_text("# other")
    code, lines = await run(tmp_path, delete=True, source="laptop")
    assert code == OK, lines
    if base.mirrored:  # releases with folders: the mark in the metadata decides
        assert not any("naming them that way" in line for line in lines), lines
        assert theirs <= set(base.members)
        assert "other.md" in base.names()


# -- a copied folder (issue 41, item 5) ------------------------------------------------------------------------------


def real(folder: Path) -> str:
    return os.path.realpath(folder)


def made_in(folder: Path) -> dict[str, Any]:
    """The record of where the folder's id was made, as its id file keeps it."""
    text = (folder / SOURCE_FILE).read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("# made in: ")]
    record: dict[str, Any] = json.loads(line.removeprefix("# made in: "))
    return record


def record_made_in(folder: Path, **changes: Any) -> None:
    """Rewrite the record of where the folder's id was made, as if made elsewhere."""
    text = (folder / SOURCE_FILE).read_text()
    record = made_in(folder)
    old = f"# made in: {json.dumps(record, ensure_ascii=False)}"
    assert old in text
    (folder / SOURCE_FILE).write_text(text.replace(old, f"# made in: {json.dumps(record | changes)}"))


async def test_a_copy_of_a_synced_folder_is_refused_and_the_originals_documents_stay(
    base: Base, tmp_path: Path
) -> None:
    """Copying a folder copies its id file: synced as the original, the copy would replace the original's documents
    with its own edits, and --delete would remove those of the files it lacks. The copy is refused (exit 5) before
    Open WebUI is asked anything, with how to go on; with its id file deleted it syncs as a folder of its own, and the
    original goes on as itself."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    original.mkdir()
    for name in ("a.md", "b.md"):
        (original / name).write_text(f"# {name}")
    assert (await run(original))[0] == OK
    held, calls = dict(base.members), len(base.router.calls)
    shutil.copytree(original, copy)
    (copy / "a.md").write_text("# a.md, edited in the copy")
    (copy / "b.md").unlink()
    every: list[dict[str, Any]] = [{}, {"delete": True}, {"dry_run": True}]
    for options in every:
        code, lines = await run(copy, **options)
        assert code == UNUSABLE, lines
        (said,) = lines
        assert f"was made in {real(original)}, not in this folder" in said, said
        assert f"delete {copy / SOURCE_FILE} here" in said, said
        assert "--source " in said, said
    assert base.router.calls[calls:] == []  # refused before asking Open WebUI anything
    assert base.members == held
    (copy / SOURCE_FILE).unlink()
    code, lines = await run(copy, delete=True)
    assert code == OK, lines
    assert held.items() <= base.members.items()  # the original's documents untouched
    code, lines = await run(original, delete=True)
    assert (code, lines[-1]) == (OK, "done: 0 added, 0 replaced, 0 renamed, 0 removed, 2 unchanged, 0 failed"), lines


async def test_an_old_id_file_is_kept_and_records_where_it_is(base: Base, tmp_path: Path) -> None:
    """An id file from a version that recorded nothing is this folder's: its next real run writes the record beside
    the id (a dry run writes nothing), and the run after that changes nothing."""
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "a.md").write_text("# A")
    (folder / SOURCE_FILE).write_text("# the folder's id\nhandbook1\n")
    assert (await run(folder, dry_run=True))[0] == OK
    assert (folder / SOURCE_FILE).read_text() == "# the folder's id\nhandbook1\n"
    assert (await run(folder))[0] == OK
    assert (folder / SOURCE_FILE).read_text().split()[-1] == "handbook1"
    assert made_in(folder)["path"] == real(folder)
    calls = len(base.router.calls)
    code, lines = await run(folder, delete=True)
    assert (code, writes_since(base, calls)) == (OK, []), lines


async def test_a_moved_folder_keeps_its_id(base: Base, tmp_path: Path) -> None:
    """Renamed on its file system (the same folder: its device and inode), or copied to another and the original
    removed (a move across file systems: nothing else holds the id), the folder is still itself."""
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "a.md").write_text("# A")
    assert (await run(folder))[0] == OK
    calls = len(base.router.calls)
    renamed = folder.rename(tmp_path / "renamed")
    code, lines = await run(renamed, delete=True)
    assert (code, writes_since(base, calls)) == (OK, []), lines
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(renamed, elsewhere)
    shutil.rmtree(renamed)
    code, lines = await run(elsewhere, delete=True)
    assert (code, writes_since(base, calls)) == (OK, []), lines
    assert any("no longer holds it" in line for line in lines), lines
    assert made_in(elsewhere)["path"] == real(elsewhere)


async def test_an_id_made_on_another_machine_is_refused_unless_it_is_the_same_folder(
    base: Base, tmp_path: Path
) -> None:
    """Made on another machine, the id is this folder's only if the folder is the same: at the same path with the
    same inode (a share mounted there too). Else it may be a copy whose original this machine cannot look at:
    refused, and `--source` still overrides. Made again at the same path on this machine (a restore), it is kept."""
    folder = tmp_path / "share"
    folder.mkdir()
    (folder / "a.md").write_text("# A")
    assert (await run(folder))[0] == OK
    source = (folder / SOURCE_FILE).read_text().split()[-1]
    inode = made_in(folder)["inode"]
    record_made_in(folder, host="laptop", device=made_in(folder)["device"] + 1)
    assert (await run(folder))[0] == OK  # the same share on another machine
    record_made_in(folder, inode=inode + 1)
    code, lines = await run(folder)
    assert code == UNUSABLE, lines
    assert f"was made in {real(folder)} on laptop" in lines[0], lines
    code, lines = await run(folder, source=source)
    assert code == OK, lines
    record_made_in(folder, host=socket.gethostname())
    assert (await run(folder))[0] == OK  # made again at this path on this machine
