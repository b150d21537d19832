"""The local scan: each folder opened once, links never followed, and every file or folder it cannot use named as
skipped; a skipped file's documents stay (whole runs against a mocked Open WebUI)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.types import OK, SOME_FAILED
from tests.support.sync import (
    Base,
    cannot_read,
    run,
    skipped_lines,
    writes_since,
)

pytestmark = pytest.mark.anyio


def test_a_folder_is_opened_once_for_all_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each folder is opened once from the root down and its files are read from it: per file one look and one
    open, not a walk from the root (a 2,000-file scan took 0.9 s walking each file's path, 0.1 s this way)."""
    for index in range(30):
        (tmp_path / "a" / "b").mkdir(parents=True, exist_ok=True)
        (tmp_path / "a" / "b" / f"{index:02}.md").write_text(f"# note {index}")
    opened: list[tuple[str, bool]] = []
    real_open = os.open

    def counting_open(target: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
        opened.append((os.fsdecode(target), bool(flags & os.O_DIRECTORY)))
        return real_open(target, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    local, skipped = scan(tmp_path, 10**6, mirrored=True)
    assert skipped == []
    assert sorted(file.relative for file in local) == [f"a/b/{index:02}.md" for index in range(30)]
    assert [name for name, folder in opened if not folder] == [f"{index:02}.md" for index in range(30)]
    assert [name for name, folder in opened if folder] == [str(tmp_path.resolve()), "a", "b"]
    assert all(
        file.path.read_text() == f"# note {index}"
        for index, file in enumerate(sorted(local, key=lambda file: file.relative))
    )


def test_a_folder_swapped_for_a_link_after_it_was_listed_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk lists a folder; by the time its files are read it has become a link to another folder: its files
    are named as skipped, and nothing is read through the link."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.md").write_text("# not for the base")
    folder = tmp_path / "synced"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "secret.md").write_text("# listed")
    listed = list(os.walk(folder))
    (folder / "sub" / "secret.md").unlink()
    (folder / "sub").rmdir()
    (folder / "sub").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(os, "walk", lambda *_, **__: iter(listed))

    local, skipped = scan(folder, 10**6, mirrored=True)
    assert local == []
    # the folder itself is named as a link, and the file the walk listed in it as not read through one
    assert [(entry.shown, "link" in entry.why) for entry in skipped] == [("sub", True), ("sub/secret.md", True)]


def test_a_link_swapped_in_after_the_look_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan looks at a file, then reads it: a link put in its place between the two is refused, never followed
    (issue 16, defect 8). The swap is made deterministic by showing the scan a regular file where the link is."""
    folder, outside = tmp_path / "folder", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("the API key")
    (folder / "plain.md").write_text("plain")
    (folder / "swapped.md").symlink_to(outside / "secret.txt")
    regular = (folder / "plain.md").lstat()
    real_lstat = Path.lstat
    monkeypatch.setattr(Path, "lstat", lambda self: regular if self.name == "swapped.md" else real_lstat(self))
    local, skipped = scan(folder, 10**6)
    assert [file.relative for file in local] == ["plain.md"]
    assert [entry.relative for entry in skipped] == ["swapped.md"]
    assert "link" in skipped[0].why


@pytest.mark.parametrize("name", ['say "hi".md', "tab\there.md"])
async def test_a_name_uploads_do_not_keep_is_refused_in_a_mirrored_base(
    mirror: Base, tmp_path: Path, name: str
) -> None:
    (tmp_path / name).write_text("# quoted")
    (tmp_path / "fine.md").write_text("# fine")
    code, lines = await run(tmp_path)
    assert code == SOME_FAILED
    assert any(line.startswith("skipped") and "double quote or a control character" in line for line in lines), lines
    assert mirror.names() == ["fine.md"]


async def test_a_name_that_is_not_utf8_is_refused_not_a_crash(mirror: Base, tmp_path: Path) -> None:
    (tmp_path / os.fsdecode(b"caf\xe9.md")).write_bytes(b"# cafe")
    (tmp_path / "fine.md").write_text("# fine")
    code, lines = await run(tmp_path)
    assert code == SOME_FAILED
    assert any("its name is not UTF-8" in line for line in lines), lines
    assert mirror.names() == ["fine.md"]


async def test_files_this_run_skips_are_present_and_keep_their_documents(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over this run's size limit, emptied while an editor saves it, now a link, unreadable: each file is still in
    the folder, so its document stays as it is, even with --delete, and is not taken by a new file with its old
    bytes (the rename rule)."""
    for name in ("big.md", "emptied.md", "link.md", "unreadable.md", "moved-away.md", "keep.md"):
        (tmp_path / name).write_text(f"# {name}")
    assert (await run(tmp_path))[0] == OK
    held, calls = dict(base.members), len(base.router.calls)
    (tmp_path / "big.md").write_text("# big, and now over the limit of this run")
    (tmp_path / "emptied.md").write_bytes(b"")
    (tmp_path / "link.md").unlink()
    (tmp_path / "link.md").symlink_to(tmp_path / "keep.md")
    cannot_read(monkeypatch, tmp_path / "unreadable.md", PermissionError)
    (tmp_path / "moved-away.md").write_text("# moved-away.md, now over the limit of this run")
    (tmp_path / "copy.md").write_text("# moved-away.md")  # the old bytes of a file that is still there

    code, lines = await run(tmp_path, delete=True, env={"OPENWEBUI_UPLOAD_MAX_BYTES": "20"})
    assert code == SOME_FAILED, lines
    assert base.members == held  # every document kept, none removed, renamed or added
    assert writes_since(base, calls) == []
    skipped = skipped_lines(lines)
    assert {"big.md", "emptied.md", "link.md", "unreadable.md", "moved-away.md", "copy.md"} <= set(skipped), lines
    assert "already in the base" in skipped["copy.md"]


async def test_a_folder_or_file_that_cannot_be_read_is_skipped_not_a_crash(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that vanishes or cannot be listed, a file that cannot be looked at or vanishes between the walk and
    the read: each is named as skipped, and their documents stay."""
    for name in ("sub/a.md", "sub/deeper/b.md", "stat.md", "vanished.md", "c.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}")
    assert (await run(tmp_path))[0] == OK
    held, calls = dict(base.members), len(base.router.calls)
    cannot_read(monkeypatch, tmp_path / "sub", FileNotFoundError, how="scandir")
    cannot_read(monkeypatch, tmp_path / "stat.md", PermissionError, how="stat")
    cannot_read(monkeypatch, tmp_path / "vanished.md", FileNotFoundError)

    code, lines = await run(tmp_path, delete=True)
    assert code == SOME_FAILED, lines
    assert base.members == held
    assert writes_since(base, calls) == []
    assert {"sub", "stat.md", "vanished.md"} <= set(skipped_lines(lines)), lines
    assert lines[-1] == "done: 0 added, 0 replaced, 0 renamed, 0 removed, 1 unchanged, 3 failed"


async def test_an_empty_file_and_two_copies_settle_at_exit_0(base: Base, tmp_path: Path) -> None:
    """Open WebUI holds nothing for an empty file and a text only once per base: such files are skipped with the
    reason, not uploaded, and a second run over the same folder makes no write request and exits 0."""
    (tmp_path / "z.md").write_text("# same bytes")
    (tmp_path / "b.md").write_text("# b")
    assert (await run(tmp_path))[0] == OK
    held = dict(base.members)
    (tmp_path / "a.md").write_text("# same bytes")  # a copy that sorts before the file the base holds
    (tmp_path / "copy of b.md").write_text("# b")
    (tmp_path / "empty.md").write_bytes(b"")
    for _ in range(2):
        calls = len(base.router.calls)
        code, lines = await run(tmp_path, delete=True)
        assert code == OK, lines
        assert writes_since(base, calls) == []
        skipped = skipped_lines(lines)
        assert set(skipped) == {"a.md", "copy of b.md", "empty.md"}, lines
        assert "empty" in skipped["empty.md"]
        assert "z.md" in skipped["a.md"]
        assert "b.md" in skipped["copy of b.md"]
    assert base.members == held


async def test_a_folder_replaced_by_a_link_keeps_its_documents(base: Base, tmp_path: Path) -> None:
    """A subfolder that is now a link (to the same files, moved elsewhere) is not followed, and what it held is not
    gone: --delete keeps its documents."""
    folder, elsewhere = tmp_path / "folder", tmp_path / "elsewhere"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# A")
    (folder / "sub" / "b.md").write_text("# B")
    assert (await run(folder))[0] == OK
    held = set(base.members)
    (folder / "sub").rename(elsewhere)
    (folder / "sub").symlink_to(elsewhere, target_is_directory=True)
    code, lines = await run(folder, delete=True)
    assert code == SOME_FAILED, lines
    assert "link to a folder" in skipped_lines(lines)["sub"]
    assert held <= set(base.members)
