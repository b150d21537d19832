"""`openwebui-rag-mcp sync`: the plan from a folder and a base (add, replace, keep, remove only with --delete, never
touch documents it did not upload), and whole runs against a mocked Open WebUI: a second run changes nothing, an
interrupted replacement is finished by the next run, --dry-run changes nothing, failures give exit code 1."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp import sync as sync_module
from openwebui_rag_mcp import writes
from openwebui_rag_mcp.models import FileItem
from openwebui_rag_mcp.sync import OK, SOME_FAILED, key_of, plan, remote_files, scan, synced_name
from tests.conftest import BASE_URL, make_settings, mock_transport

pytestmark = pytest.mark.anyio

KB = "c0ffee00-1111-4222-8333-444455556666"


def item(file_id: str, filename: str) -> FileItem:
    return FileItem(file_id=file_id, title=None, filename=filename, size=1, updated_at=None, folder=None)


def test_keys_are_safe_bounded_and_keep_the_extension() -> None:
    assert key_of("notes/Отчёт 2024.PDF") == ("notes_Отчёт_2024", ".pdf")
    assert key_of("README") == ("README", "")
    key, extension = key_of("深/" * 100 + "x.md")
    assert extension == ".md"
    assert len(f"{key}~{'0' * 12}{extension}".encode()) <= 200


def test_the_plan(tmp_path: Path) -> None:
    for name, text in {"a.md": "A", "b.md": "B2", "c/d.txt": "D", "new.csv": "x,y"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / ".hidden.md").write_text("no")
    local, refused = scan(tmp_path, 1_000_000)
    by_path = {file.relative: file for file in local}
    assert sorted(by_path) == ["a.md", "b.md", "c/d.txt", "new.csv"]
    old_b = hashlib.sha256(b"B1").hexdigest()[:12]
    remote = remote_files(
        [
            item("f-a", synced_name(by_path["a.md"])),
            item("f-b-old", f"b~{old_b}.md"),
            item("f-d", synced_name(by_path["c/d.txt"])),
            item("f-d-older", "c_d~" + "1" * 12 + ".txt"),  # left over by an interrupted replacement
            item("f-gone", f"gone~{'2' * 12}.md"),
            item("f-mine", "my_own_upload.md"),  # not uploaded by sync: never touched
        ]
    )
    todo = plan(local, remote, refused)
    assert [file.relative for file in todo.add] == ["new.csv"]
    assert [(file.relative, [e.file_id for e in old]) for file, old in todo.replace] == [("b.md", ["f-b-old"])]
    assert sorted(file.relative for file in todo.unchanged) == ["a.md", "c/d.txt"]
    assert [entry.file_id for entry in todo.stale] == ["f-d-older"]
    assert [entry.file_id for entry in todo.gone] == ["f-gone"]


class Base:
    """A mocked Open WebUI 0.12.4 holding one base, with uploads that process at once."""

    def __init__(self) -> None:
        self.router = respx.Router(base_url=BASE_URL, assert_all_called=False)
        self.files: dict[str, dict[str, Any]] = {}  # file_id -> file
        self.members: list[str] = []
        self.count = 0
        self.fail_upload_of: str | None = None
        r = self.router
        r.get("/api/version").respond(json={"version": "0.12.4"})
        r.get(f"/api/v1/knowledge/{KB}").respond(json={"id": KB, "name": "Sync", "write_access": True})
        r.get(f"/api/v1/knowledge/{KB}/files").mock(side_effect=self._list)
        r.post("/api/v1/files/").mock(side_effect=self._upload)
        r.get(path__regex=r"^/api/v1/files/(?P<file_id>[^/]+)/process/status$").respond(json={"status": "completed"})
        r.get(path__regex=r"^/api/v1/files/(?P<file_id>[^/]+)$").mock(side_effect=self._file)
        r.post(f"/api/v1/knowledge/{KB}/file/add").mock(side_effect=self._add)
        r.post(f"/api/v1/knowledge/{KB}/file/remove").mock(side_effect=self._remove)
        r.delete(path__regex=r"^/api/v1/files/(?P<file_id>[^/]+)$").mock(side_effect=self._delete)

    def names(self) -> list[str]:
        return sorted(self.files[file_id]["filename"] for file_id in self.members)

    def _list(self, request: httpx.Request) -> httpx.Response:
        items = [{"id": f, "filename": self.files[f]["filename"]} for f in self.members]
        return httpx.Response(200, json={"items": items, "total": len(items)})

    def _upload(self, request: httpx.Request) -> httpx.Response:
        self.count += 1
        file_id = f"f-{self.count}"
        filename = request.content.split(b'filename="', 1)[1].split(b'"', 1)[0].decode()
        if self.fail_upload_of and filename.startswith(self.fail_upload_of):
            return httpx.Response(500, text="boom")
        self.files[file_id] = {"id": file_id, "filename": filename, "data": {"content": f"text of {filename}"}}
        return httpx.Response(200, json={**self.files[file_id], "data": {"status": "pending"}})

    def _file(self, request: httpx.Request, file_id: str) -> httpx.Response:
        return httpx.Response(200, json=self.files[file_id])

    def _add(self, request: httpx.Request) -> httpx.Response:
        self.members.append(json.loads(request.content)["file_id"])
        return httpx.Response(200, json={"id": KB})

    def _remove(self, request: httpx.Request) -> httpx.Response:
        file_id = json.loads(request.content)["file_id"]
        assert request.url.params["delete_file"] == "true"
        self.members.remove(file_id)
        self.files.pop(file_id)
        return httpx.Response(200, json={"id": KB})

    def _delete(self, request: httpx.Request, file_id: str) -> httpx.Response:
        self.files.pop(file_id, None)
        return httpx.Response(200, json=True)


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Base:
    mocked = Base()
    from openwebui_rag_mcp import server

    original = server.running_app

    def running_app(settings: Any, **kwargs: Any) -> Any:
        return original(settings, transport=mock_transport(mocked.router))

    monkeypatch.setattr(server, "running_app", running_app)
    monkeypatch.setattr(writes, "_POLL_FIRST_DELAY", 0.001)
    return mocked


async def run(folder: Path, *, dry_run: bool = False, delete: bool = False) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = await sync_module.sync(
        make_settings(), folder, KB, dry_run=dry_run, delete=delete, say=lines.append, tty=False
    )
    return code, lines


async def test_a_folder_is_synced_and_a_second_run_changes_nothing(base: Base, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.csv").write_text("x,y\n1,2\n")
    code, lines = await run(tmp_path)
    assert code == OK
    assert len(base.members) == 2
    uploads = base.count
    code, lines = await run(tmp_path)
    assert code == OK
    assert base.count == uploads  # nothing uploaded again
    assert lines[-1] == "done: 0 added, 0 replaced, 0 renamed, 0 removed, 2 unchanged, 0 failed"


async def test_edit_rename_delete_and_new(base: Base, tmp_path: Path) -> None:
    for name in ("keep.md", "edit.md", "old-name.md", "remove.md"):
        (tmp_path / name).write_text(f"# {name}")
    assert (await run(tmp_path))[0] == OK
    (tmp_path / "edit.md").write_text("# edited")
    (tmp_path / "old-name.md").rename(tmp_path / "new-name.md")
    (tmp_path / "remove.md").unlink()
    (tmp_path / "fresh.md").write_text("# fresh")

    code, lines = await run(tmp_path, dry_run=True)
    assert code == OK
    assert "dry run: nothing was changed" in lines
    assert len(base.members) == 4

    code, lines = await run(tmp_path)  # without --delete, documents of gone files stay; a rename moves its document
    assert code == OK
    assert any(line.startswith("rename   new-name.md: ok") for line in lines)
    assert len(base.members) == 5
    code, _ = await run(tmp_path, delete=True)
    assert code == OK
    assert base.names() == sorted(synced_name(f) for f in scan(tmp_path, 10**6)[0])


async def test_an_interrupted_replacement_is_finished_by_the_next_run(base: Base, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# one")
    await run(tmp_path)
    (tmp_path / "a.md").write_text("# two")
    # As if the previous run stopped after adding the new version and before removing the old one:
    local = scan(tmp_path, 10**6)[0]
    upload = writes.Upload(synced_name(local[0]), b"# two", "text/markdown", {})
    from openwebui_rag_mcp.server import running_app

    async with running_app(make_settings()) as app:
        await writes.upload_to_base(app, KB, upload, sync_module._quiet, text=None, tool="test")
    assert len(base.members) == 2
    code, _ = await run(tmp_path)
    assert code == OK
    assert base.names() == [synced_name(local[0])]


async def test_a_failed_file_is_named_and_the_exit_code_says_so(base: Base, tmp_path: Path) -> None:
    (tmp_path / "good.md").write_text("# good")
    (tmp_path / "bad.md").write_text("# bad")
    base.fail_upload_of = "bad~"
    code, lines = await run(tmp_path)
    assert code == SOME_FAILED
    assert any(line.startswith("add      bad.md: FAILED") for line in lines)
    assert any(line.startswith("add      good.md: ok") for line in lines)
    assert lines[-1] == "done: 1 added, 0 replaced, 0 renamed, 0 removed, 0 unchanged, 1 failed"  # what happened


def test_a_renamed_file_is_planned_as_a_move(tmp_path: Path) -> None:
    """Open WebUI refuses the same text twice in one base: a rename removes the old document before adding."""
    (tmp_path / "new-name.md").write_text("same words")
    local, refused = scan(tmp_path, 10**6)
    old_name = synced_name(local[0]).replace("new-name", "old-name")
    todo = plan(local, remote_files([item("f-old", old_name)]), refused)
    assert todo.add == []
    assert [(file.relative, entry.file_id) for file, entry in todo.renamed] == [("new-name.md", "f-old")]
    assert todo.gone == []
