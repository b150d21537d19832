"""What the base holds for this folder on each release: documents the command did not upload, a base synced by
names before, and the requests that find where each document is (Open WebUI's folder comparison, the folder
lists)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from openwebui_rag_mcp import runtime
from openwebui_rag_mcp.sync import execute
from openwebui_rag_mcp.sync.names import SOURCE_KEY, synced_name
from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.source import SOURCE_FILE
from openwebui_rag_mcp.sync.types import OK, SOME_FAILED, UNUSABLE
from openwebui_rag_mcp.upload import Upload, upload_to_base
from tests.conftest import make_settings
from tests.support.sync import (
    KB,
    Base,
    folder_lists,
    full_lists,
    notes,
    quiet,
    run,
    skipped_lines,
    writes_since,
)

pytestmark = pytest.mark.anyio


async def test_documents_the_command_did_not_upload_are_never_touched(mirror: Base, tmp_path: Path) -> None:
    """Someone's own upload at the same path (Open WebUI's interface, an agent) is not the command's to replace or
    remove: only uploads marked `synced_by` are."""
    (tmp_path / "a.md").write_text("# mine, from the folder")
    async with runtime.running_app(make_settings()) as app:
        upload = Upload("a.md", b"# someone else's", "text/markdown", {"title": "a.md"})
        await upload_to_base(app, KB, upload, quiet, text=None, tool="test")
        other = Upload("other.md", b"# also someone else's", "text/markdown", {})
        await upload_to_base(app, KB, other, quiet, text=None, tool="test")
    theirs = set(mirror.members)
    code, _ = await run(tmp_path, delete=True)
    assert code == OK
    assert theirs <= set(mirror.members)
    assert mirror.names() == ["a.md", "a.md", "other.md"]


async def test_a_base_synced_by_names_before_stays_synced_by_names(mirror: Base, tmp_path: Path) -> None:
    """This folder synced the base by names before Open WebUI had folders (its uploads carry the source id in their
    name and, where the release keeps it (0.6.43, 0.8.12), in their metadata): it goes on that way."""
    (tmp_path / "a.md").write_text("# A")
    (tmp_path / "b.md").write_text("# B")
    (tmp_path / SOURCE_FILE).write_text("# the folder's id\nhandbook1\n")
    local = {file.relative: file for file in scan(tmp_path, 10**6)[0]}
    async with runtime.running_app(make_settings()) as app:
        mark = {SOURCE_KEY: "handbook1"}
        upload = Upload(synced_name(local["a.md"], "handbook1"), b"# A", "text/markdown", mark)
        await upload_to_base(app, KB, upload, quiet, text=None, tool="test")
    code, lines = await run(tmp_path)
    assert code == OK
    assert "goes on naming them that way" in lines[0]
    assert mirror.names() == sorted(synced_name(file, "handbook1") for file in local.values())
    assert mirror.folders == {}


async def test_a_file_whose_name_looks_like_an_old_synced_name_stays_mirrored(mirror: Base, tmp_path: Path) -> None:
    (tmp_path / "notes~0123456789ab.md").write_text("# a file downloaded from a base synced the old way")
    (tmp_path / "b.md").write_text("# B")
    assert (await run(tmp_path))[0] == OK
    uploads = mirror.count
    code, lines = await run(tmp_path, delete=True)
    assert (code, mirror.count) == (OK, uploads)
    assert not any("naming them that way" in line for line in lines)
    assert mirror.names() == ["b.md", "notes~0123456789ab.md"]


async def test_the_same_file_put_there_by_someone_else_is_held_not_uploaded_again(mirror: Base, tmp_path: Path) -> None:
    """Open WebUI's own folder upload (or a person) put the file at the same path: the command counts it as held and
    never removes it."""
    (tmp_path / "a.md").write_text("# A")
    async with runtime.running_app(make_settings()) as app:
        upload = Upload("a.md", b"# A", "text/markdown", {})
        await upload_to_base(app, KB, upload, quiet, text=None, tool="test")
    theirs, uploads = set(mirror.members), mirror.count
    code, lines = await run(tmp_path, delete=True)
    assert (code, mirror.count, set(mirror.members)) == (OK, uploads, theirs)
    assert lines[-1] == "done: 0 added, 0 replaced, 0 renamed, 0 removed, 1 unchanged, 0 failed"


async def test_a_read_only_key_can_check_a_base_with_nothing_to_upload(mirror: Base, tmp_path: Path) -> None:
    """Open WebUI's folder comparison needs write access: it is asked only when a file must go into a folder."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("# A")
    assert (await run(tmp_path))[0] == OK
    mirror.router.post(f"/api/v1/knowledge/{KB}/sync/diff").respond(403, json={"detail": "not allowed"})
    code, lines = await run(tmp_path)
    assert code == OK, lines
    code, lines = await run(tmp_path, dry_run=True)
    assert code == OK, lines
    (tmp_path / "sub" / "b.md").write_text("# B")
    code, lines = await run(tmp_path, dry_run=True)
    assert code == OK, lines
    assert any(line.startswith("folders to make: unknown") for line in lines), lines
    code, lines = await run(tmp_path)
    assert code == UNUSABLE, lines


async def test_a_run_with_nothing_changed_asks_one_comparison_and_reads_no_list(mirror: Base, tmp_path: Path) -> None:
    """0.10.2's lists do not say which folder holds a document, so reading the base in full takes its list and a
    folder comparison, each loading every document in Open WebUI: a run with nothing to do asks the comparison alone,
    with the folder's own files and checksums, and a one-page count. 0.12.4's list says it all: the list alone."""
    notes(tmp_path)
    assert (await run(tmp_path))[0] == OK
    calls, manifests = len(mirror.router.calls), len(mirror.manifests)
    code, lines = await run(tmp_path)
    assert (code, lines[-1]) == (OK, "done: 0 added, 0 replaced, 0 renamed, 0 removed, 4 unchanged, 0 failed")
    assert any(": 0 to add, 0 to replace, 0 renamed, 4 unchanged, 0 gone" in line for line in lines), lines
    assert folder_lists(mirror, calls) == 0
    assert writes_since(mirror, calls) == []
    asked = mirror.manifests[manifests:]
    if mirror.paths_listed:
        assert (asked, full_lists(mirror, calls)) == ([], 1)
    else:
        assert full_lists(mirror, calls) == 0
        by_place = {
            (f"{folder}/" if folder else "") + name: checksum
            for folder, name, checksum in ((e["path"], e["filename"], e["checksum"]) for e in asked[0])
        }
        assert len(asked) == 1
        assert by_place == {file.relative: file.sha256 for file in scan(tmp_path, 10**6, mirrored=True)[0]}
    code, lines = await run(tmp_path, dry_run=True)
    assert (code, lines[-1]) == (OK, "dry run: nothing was changed")
    assert any(": 0 to add, 0 to replace, 0 renamed, 4 unchanged, 0 gone" in line for line in lines), lines


@pytest.mark.parametrize("mirror", ["0.10.2"], indirect=True)
async def test_a_run_with_a_file_changed_places_the_documents_with_one_comparison(mirror: Base, tmp_path: Path) -> None:
    """Where the folder's own comparison finds something to do, the base is read in full: its list, and one folder
    comparison asked where each document's upload metadata places it (no folder read one by one)."""
    notes(tmp_path)
    assert (await run(tmp_path))[0] == OK
    (tmp_path / "docs" / "a.md").write_text("# docs/a.md, edited")
    calls, manifests = len(mirror.router.calls), len(mirror.manifests)
    code, lines = await run(tmp_path)
    assert (code, lines[-1]) == (OK, "done: 0 added, 1 replaced, 0 renamed, 0 removed, 3 unchanged, 0 failed")
    assert (folder_lists(mirror, calls), full_lists(mirror, calls)) == (0, 1)
    placing = [m for m in mirror.manifests[manifests:] if all(e["checksum"] == "" for e in m)]
    assert [sorted((e["path"], e["filename"]) for e in manifest) for manifest in placing] == [
        [("", name) for name in ("a.md", "b.md", "c.md", "top.md")]
        + [("docs", "a.md"), ("docs/deep", "b.md"), ("other", "c.md")]
    ]


@pytest.mark.parametrize("mirror", ["0.10.2"], indirect=True)
async def test_files_the_run_skips_leave_one_comparison_enough_and_say_the_same(
    mirror: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the run skips (empty, over the size limit) is in no manifest; with no document of it in the base the
    comparison alone still tells that nothing is to do, and the run says what the full read would have said."""
    notes(tmp_path)
    (tmp_path / "docs" / "empty.md").write_bytes(b"")
    (tmp_path / "huge.md").write_text("x" * 100)
    env = {"OPENWEBUI_UPLOAD_MAX_BYTES": "50"}
    assert (await run(tmp_path, env=env))[0] == SOME_FAILED
    calls = len(mirror.router.calls)
    code, lines = await run(tmp_path, env=env)
    assert (code, lines[-1]) == (SOME_FAILED, "done: 0 added, 0 replaced, 0 renamed, 0 removed, 4 unchanged, 1 failed")
    assert set(skipped_lines(lines)) == {"docs/empty.md", "huge.md"}
    assert (full_lists(mirror, calls), writes_since(mirror, calls)) == (0, [])

    async def never(*_: object) -> None:
        return None

    monkeypatch.setattr(execute, "glance", never)
    calls = len(mirror.router.calls)
    assert await run(tmp_path, env=env) == (code, lines)
    assert full_lists(mirror, calls) == 1


@pytest.mark.parametrize("mirror", ["0.10.2"], indirect=True)
async def test_an_older_copy_hidden_behind_the_current_one_is_found_and_removed(mirror: Base, tmp_path: Path) -> None:
    """The comparison keeps one document per place: an older version of this folder's file left at the same place
    (an interrupted replacement) hides behind the current one there. The base's count gives it away, and the run
    reads the base in full and removes it."""
    notes(tmp_path)
    assert (await run(tmp_path))[0] == OK
    current = next(file_id for file_id, folder_id in mirror.members.items() if folder_id is None)
    older = copy.deepcopy(mirror.files[current]) | {"id": "f-older", "hash": "older text"}
    older["meta"]["file_hash"] = "0" * 64
    mirror.files["f-older"] = older
    first: dict[str, str | None] = {"f-older": None}
    mirror.members = first | mirror.members  # listed first: the current one is the comparison's
    calls = len(mirror.router.calls)
    code, lines = await run(tmp_path)
    assert (code, lines[-1]) == (OK, "done: 0 added, 0 replaced, 0 renamed, 1 removed, 4 unchanged, 0 failed"), lines
    assert full_lists(mirror, calls) == 1
    assert "f-older" not in mirror.members
    assert current in mirror.members


@pytest.mark.parametrize("mirror", ["0.10.2"], indirect=True)
@pytest.mark.parametrize("change", ["moved by hand", "a second document at its place", "comparison refused"])
async def test_documents_the_comparison_cannot_place_send_the_run_to_the_folder_lists(
    mirror: Base, tmp_path: Path, change: str
) -> None:
    """A document not where its metadata says (moved in Open WebUI's interface), one hidden by another at the same
    place (the comparison keeps one per place), or a comparison refused: the run reads the folders one by one and
    sees the base as it is."""
    notes(tmp_path)
    assert (await run(tmp_path))[0] == OK
    top = next(file_id for file_id, folder_id in mirror.members.items() if folder_id is None)
    if change == "moved by hand":
        docs = next(
            folder_id for folder_id, (name, parent) in mirror.folders.items() if (name, parent) == ("docs", None)
        )
        mirror.members[top] = docs
    elif change == "a second document at its place":  # someone's own upload of another text under the same name
        mirror.files["f-hand"] = {"id": "f-hand", "filename": "top.md", "meta": {"name": "top.md"}, "hash": "other"}
        mirror.members["f-hand"] = None
    else:
        mirror.router.post(f"/api/v1/knowledge/{KB}/sync/diff").respond(403, json={"detail": "not allowed"})
    calls = len(mirror.router.calls)
    code, lines = await run(tmp_path)
    assert code == OK, lines
    assert folder_lists(mirror, calls) == 4  # the top, docs, docs/deep and other
    if change == "moved by hand":  # seen where it is, and moved back
        assert lines[-1] == "done: 0 added, 0 replaced, 1 renamed, 0 removed, 3 unchanged, 0 failed", lines
    elif change == "a second document at its place":  # seen as someone else's, beside this folder's own
        assert lines[-1] == "done: 0 added, 0 replaced, 0 renamed, 0 removed, 4 unchanged, 0 failed", lines
        assert mirror.names() == ["docs/a.md", "docs/deep/b.md", "other/c.md", "top.md", "top.md"]
    else:
        assert lines[-1] == "done: 0 added, 0 replaced, 0 renamed, 0 removed, 4 unchanged, 0 failed", lines
    assert mirror.names()[:4] == ["docs/a.md", "docs/deep/b.md", "other/c.md", "top.md"]
