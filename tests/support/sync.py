"""What the `sync` tests share: a mocked Open WebUI holding one base (`Base`, every release shape), a run of the
command against it, and readers of what a run said and sent."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from openwebui_rag_mcp import journal as journal_module
from openwebui_rag_mcp import runtime
from openwebui_rag_mcp.config import Timings
from openwebui_rag_mcp.models import FileItem
from openwebui_rag_mcp.sync import command
from openwebui_rag_mcp.sync.names import synced_name
from openwebui_rag_mcp.sync.scan import scan
from openwebui_rag_mcp.sync.source import folder_source
from tests.conftest import BASE_URL, make_settings, mock_transport

KB = "c0ffee00-1111-4222-8333-444455556666"
SYNC_POLLS = Timings(poll_first=0.001)  # the first look at an upload at once; then as a real run looks


async def quiet(progress: float, total: float, message: str) -> None:
    return None


def item(file_id: str, filename: str) -> FileItem:
    return FileItem(file_id=file_id, title=None, filename=filename, size=1, updated_at=None, folder=None)


def form_parts(request: httpx.Request) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a multipart upload: name -> (filename, bytes)."""
    boundary = request.headers["content-type"].split("boundary=", 1)[1].encode()
    parts: dict[str, tuple[str | None, bytes]] = {}
    for chunk in request.content.split(b"--" + boundary):
        if b"\r\n\r\n" not in chunk:
            continue
        head, body = chunk.split(b"\r\n\r\n", 1)
        name = head.split(b'name="', 1)[1].split(b'"', 1)[0].decode()
        filename = head.split(b'filename="', 1)[1].split(b'"', 1)[0].decode() if b'filename="' in head else None
        parts[name] = (filename, body.removesuffix(b"\r\n"))
    return parts


class Base:
    """A mocked Open WebUI holding one base, with uploads that process at once: 0.12.4, whose lists name each
    document's folder, or 0.10.2 or 0.9.6, which have folders whose lists do not (all three: the base mirrors the
    folder), or 0.8.12, which has no folders (files named after their path and content)."""

    def __init__(self, version: str) -> None:
        self.timings = SYNC_POLLS  # what the runs served from it look at Open WebUI with
        self.mirrored = version in ("0.12.4", "0.10.2", "0.9.6")
        self.paths_listed = version == "0.12.4"
        # uploads name the base and Open WebUI links them (0.9.6+)
        self.links_itself = version in ("0.12.4", "0.10.2", "0.9.6")
        self.links_first = version in ("0.10.2", "0.9.6")  # 0.9.6 to 0.10 link an upload before indexing it there
        # 0.6.5 embeds a base's files in the base, processes during the upload and answers with the text, and
        # attaches by rewriting the base's whole list
        self.embeds_files = version == "0.6.5"
        self.base_unreadable = False
        self.write_access = True
        self.version = version
        self.router = respx.Router(base_url=BASE_URL, assert_all_called=False)
        self.files: dict[str, dict[str, Any]] = {}  # file_id -> file
        self.members: dict[str, str | None] = {}  # file_id -> its folder's id
        self.folders: dict[str, tuple[str, str | None]] = {}  # folder id -> (name, parent id)
        self.manifests: list[list[dict[str, Any]]] = []
        # the base's search index where no document holds it: file_id -> its text's hash (an upload indexed into the
        # base, never linked: 0.11+ index before they link)
        self.unlinked_vectors: dict[str, str] = {}
        self.count = 0
        self.fail_upload_of: str | None = None
        # filename prefix -> (HTTP status, how many of its uploads are refused with it before one is taken)
        self.refuse_uploads: dict[str, tuple[int, int]] = {}
        self.uploads_of: collections.Counter[str] = collections.Counter()
        self.on_write: Callable[[str], None] | None = None  # called with each write request's path
        # Uploads that link themselves stay pending until this many uploads have come (Open WebUI busy with others)
        self.process_after_uploads = 0
        self.upload_seconds = 0.0  # how long each upload takes Open WebUI to answer (it blocks the test's loop)
        self.held_back: list[tuple[str, dict[str, Any]]] = []
        # Files (by name) whose mark as written to the base Open WebUI loses once it has indexed and linked them (0.9.6
        # to 0.10 under load), and the files indexed into the base again with file/update
        self.marks_lost: set[str] = set()
        self.reindexed: list[str] = []
        r = self.router
        r.get("/api/version").respond(json={"version": version})
        r.get(f"/api/v1/knowledge/{KB}").mock(side_effect=self._knowledge)
        r.get(f"/api/v1/knowledge/{KB}/files").mock(side_effect=self._list)
        r.get(f"/api/v1/knowledge/{KB}/files/pending").mock(side_effect=self._pending)
        r.post("/api/v1/files/").mock(side_effect=self._upload)
        r.get(path__regex=r"^/api/v1/files/(?P<file_id>[^/]+)/process/status$").mock(side_effect=self._status)
        r.get(path__regex=r"^/api/v1/files/(?P<file_id>[^/]+)$").mock(side_effect=self._file)
        self.linked_itself: list[str] = []  # uploads that named the base in their metadata (0.10+)
        self.added: list[str] = []  # files linked with file/add
        self.attach = r.post(f"/api/v1/knowledge/{KB}/file/add").mock(side_effect=self._add)
        r.post(f"/api/v1/knowledge/{KB}/file/remove").mock(side_effect=self._remove)
        r.post(f"/api/v1/knowledge/{KB}/file/update").mock(side_effect=self._reindex)
        r.delete(path__regex=r"^/api/v1/files/(?P<file_id>[^/]+)$").mock(side_effect=self._delete)
        r.post(f"/api/v1/knowledge/{KB}/sync/diff").mock(side_effect=self._diff)
        r.post(f"/api/v1/knowledge/{KB}/dirs/create").mock(side_effect=self._create_folder)

    def _knowledge(self, request: httpx.Request) -> httpx.Response:
        if self.base_unreadable:
            return httpx.Response(500, text="Internal Server Error")
        body: dict[str, Any] = {"id": KB, "name": "Sync", "write_access": self.write_access}
        if self.embeds_files:
            body["files"] = [{key: self.files[file_id][key] for key in ("id", "meta")} for file_id in self.members]
        return httpx.Response(200, json=body)

    def _wrote(self, request: httpx.Request) -> None:
        if self.on_write is not None:
            self.on_write(request.url.path)

    def path_of(self, folder_id: str | None) -> str:
        names: list[str] = []
        while folder_id is not None:
            name, folder_id = self.folders[folder_id]
            names.append(name)
        return "/".join(reversed(names))

    def names(self) -> list[str]:
        """What names each document: its path in the base when mirrored, else its filename."""
        found = []
        for file_id, folder_id in self.members.items():
            folder, filename = self.path_of(folder_id), self.files[file_id]["filename"]
            found.append(f"{folder}/{filename}".lstrip("/") if self.mirrored else filename)
        return sorted(found)

    def expected(self, folder: Path) -> list[str]:
        local = scan(folder, 10**6)[0]
        source = folder_source(folder, None, create=False).id or ""
        return sorted(file.relative if self.mirrored else synced_name(file, source) for file in local)

    def _list(self, request: httpx.Request) -> httpx.Response:
        asked = request.url.params.get("directory_id")
        query = request.url.params.get("query", "").lower()
        folder = None if asked is None else (asked or None)
        items = []
        for file_id, folder_id in self.members.items():
            if asked is not None and folder_id != folder:
                continue
            if query not in self.files[file_id]["filename"].lower():  # Open WebUI's filename ILIKE
                continue
            item = {key: self.files[file_id][key] for key in ("id", "filename", "meta", "hash")}
            if self.paths_listed:
                item |= {"directory_id": folder_id, "directory_path": self.path_of(folder_id)}
            items.append(item)
        below = [{"id": i, "name": name} for i, (name, parent) in self.folders.items() if parent == folder]
        answer: dict[str, Any] = {"items": items, "total": len(items)}
        return httpx.Response(200, json=answer | ({"directories": below} if self.mirrored else {}))

    def _pending(self, request: httpx.Request) -> httpx.Response:
        """Uploads naming the base that are still processing and not linked (0.12.4's pending list)."""
        pending = [
            file
            for file_id, file in self.files.items()
            if file["meta"]["data"].get("knowledge_id") == KB
            and file["data"]["status"] in ("pending", "processing")
            and file_id not in self.members
        ]
        return httpx.Response(200, json=pending)

    def _upload(self, request: httpx.Request) -> httpx.Response:
        self._wrote(request)
        time.sleep(self.upload_seconds)
        self.count += 1
        file_id = f"f-{self.count}"
        parts = form_parts(request)
        filename, content = parts["file"]
        assert filename is not None
        if self.fail_upload_of and filename.startswith(self.fail_upload_of):
            return httpx.Response(500, text="boom")
        self.uploads_of[filename.split("~")[0]] += 1
        for prefix, (status, times) in self.refuse_uploads.items():
            if filename.startswith(prefix) and self.uploads_of[filename.split("~")[0]] <= times:
                # what 0.6.5 answers when its database could not store the upload
                return httpx.Response(status, json={"detail": "[ERROR: 400: [ERROR: Error uploading file]]"})
        metadata = json.loads(parts["metadata"][1])
        meta = {
            "name": filename,
            "file_hash": hashlib.sha256(content).hexdigest(),
            "data": {} if self.embeds_files else metadata,
            "collection_name": f"file-{file_id}",  # where Open WebUI wrote its vectors last
        }
        text = content.decode().strip()  # the "extraction": bytes that differ in trailing space give the same text
        self.files[file_id] = {
            "id": file_id,
            "filename": filename,
            "meta": meta,
            "hash": hashlib.sha256(text.encode()).hexdigest(),
            "data": {"content": text, "status": "completed"},
        }
        if metadata.get("knowledge_id") == KB:  # Open WebUI 0.9.6+ indexes it into the base and links it, or fails it
            self.linked_itself.append(file_id)
            self.held_back.append((file_id, metadata))
            if self.count < self.process_after_uploads:
                self.files[file_id]["data"]["status"] = "pending"
            else:
                for held in self.held_back:
                    if held[0] in self.files:  # not deleted meanwhile
                        self._index_into_base(*held)
                self.held_back = []
        if self.embeds_files:
            return httpx.Response(200, json={**self.files[file_id], "data": {"content": text}})
        return httpx.Response(200, json={**self.files[file_id], "data": {"status": "pending"}})

    def _index_into_base(self, file_id: str, metadata: dict[str, Any]) -> None:
        """What Open WebUI's task does with an upload that names the base."""
        self.files[file_id]["data"]["status"] = "completed"
        if self._duplicate(file_id):
            self.files[file_id]["data"] |= {"status": "failed", "error": "Duplicate content detected. Please..."}
            self.files[file_id]["hash"] = None
            if self.links_first:  # 0.10 linked it before indexing it into the base failed, and keeps no reason
                self.members[file_id] = metadata.get("directory_id")
                del self.files[file_id]["data"]["error"]
        else:
            self.members[file_id] = metadata.get("directory_id")
            if self.files[file_id]["filename"] not in self.marks_lost:
                self.files[file_id]["meta"]["collection_name"] = KB

    def _reindex(self, request: httpx.Request) -> httpx.Response:
        self._wrote(request)
        file_id = json.loads(request.content)["file_id"]
        if file_id not in self.members:
            return httpx.Response(400, json={"detail": "We could not find what you're looking for :/"})
        self.reindexed.append(file_id)
        self.files[file_id]["meta"]["collection_name"] = KB
        return httpx.Response(200, json={"id": KB, "files": []})

    def _duplicate(self, file_id: str) -> bool:
        """Open WebUI's check: the text's hash in the base's index under another file (0.8+ let a file's own pass)."""
        text_hash = self.files[file_id]["hash"]
        held = any(self.files[other]["hash"] == text_hash for other in self.members if other != file_id)
        return held or any(h == text_hash and other != file_id for other, h in self.unlinked_vectors.items())

    def _status(self, request: httpx.Request, file_id: str) -> httpx.Response:
        return httpx.Response(200, json={"status": self.files[file_id]["data"]["status"]})

    def _file(self, request: httpx.Request, file_id: str) -> httpx.Response:
        return httpx.Response(200, json=self.files[file_id])

    def _add(self, request: httpx.Request) -> httpx.Response:
        self._wrote(request)
        body = json.loads(request.content)
        assert self.mirrored or "directory_id" not in body
        self.added.append(body["file_id"])
        if body["file_id"] not in self.files:
            return httpx.Response(400, json={"detail": "We could not find what you're looking for :/"})
        if self._duplicate(body["file_id"]):
            return httpx.Response(
                400, json={"detail": "400: Duplicate content detected. Please provide unique content."}
            )
        self.members[body["file_id"]] = body.get("directory_id")
        return httpx.Response(200, json={"id": KB})

    def _remove(self, request: httpx.Request) -> httpx.Response:
        self._wrote(request)
        file_id = json.loads(request.content)["file_id"]
        assert request.url.params["delete_file"] == "true"
        del self.members[file_id]
        removed = self.files.pop(file_id)
        # the base's vectors go by the file's id and by its text's hash
        for other, text_hash in list(self.unlinked_vectors.items()):
            if other == file_id or text_hash == removed["hash"]:
                del self.unlinked_vectors[other]
        return httpx.Response(200, json={"id": KB})

    def _delete(self, request: httpx.Request, file_id: str) -> httpx.Response:
        self._wrote(request)
        self.files.pop(file_id, None)
        self.members.pop(file_id, None)  # deleting a file unlinks it from every base (0.10+)
        return httpx.Response(200, json=True)

    def _diff(self, request: httpx.Request) -> httpx.Response:
        """Open WebUI's comparison (the same in 0.9.6 to 0.12.4): documents by (folder path, filename), the last of
        several at one place hiding the others; a place in the manifest is added, modified (its document's checksum
        differs, named by id) or unmodified; a document at a place not in it is deleted (named by id, not place)."""
        manifest = json.loads(request.content)["manifest"]
        self.manifests.append(manifest)
        existing = {self.path_of(folder_id): folder_id for folder_id in self.folders}
        held = {
            (self.path_of(folder_id), self.files[file_id]["filename"]): (file_id, self.files[file_id]["meta"])
            for file_id, folder_id in self.members.items()
        }
        added, modified, unmodified = [], [], 0
        for entry in manifest:
            place = (entry["path"], entry["filename"])
            if place not in held:
                added.append({"filename": entry["filename"], "path": entry["path"]})
            elif held[place][1].get("file_hash") != entry["checksum"]:
                modified.append({"filename": entry["filename"], "path": entry["path"], "stale_file_id": held[place][0]})
            else:
                unmodified += 1
        asked = {(entry["path"], entry["filename"]) for entry in manifest}
        deleted = [
            {"file_id": file_id, "filename": place[1]} for place, (file_id, _) in held.items() if place not in asked
        ]
        wanted = {"/".join(e["path"].split("/")[: n + 1]) for e in manifest if e["path"] for n in range(99)}
        mkdir = sorted((p for p in wanted if p not in existing), key=lambda p: (p.count("/"), p))
        answer = {"added": added, "modified": modified, "deleted": deleted, "unmodified_count": unmodified}
        return httpx.Response(200, json=answer | {"mkdir": mkdir, "rmdir": [], "directory_map": existing})

    def _create_folder(self, request: httpx.Request) -> httpx.Response:
        self._wrote(request)
        body = json.loads(request.content)
        taken = {(name, parent) for name, parent in self.folders.values()}
        if (body["name"], body["parent_id"]) in taken:
            return httpx.Response(400, json={"detail": "A directory with this name may already exist at this level."})
        folder_id = f"d-{len(self.folders) + 1}"
        self.folders[folder_id] = (body["name"], body["parent_id"])
        return httpx.Response(200, json={"id": folder_id, "name": body["name"], "parent_id": body["parent_id"]})


def served(mocked: Base, monkeypatch: pytest.MonkeyPatch) -> Base:
    original = runtime.running_app

    def running_app(settings: Any, **kwargs: Any) -> Any:
        timed = replace(settings, timings=mocked.timings)
        return original(timed, **kwargs | {"transport": mock_transport(mocked.router)})

    monkeypatch.setattr(runtime, "running_app", running_app)
    return mocked


async def run(
    folder: Path,
    *,
    dry_run: bool = False,
    delete: bool = False,
    env: dict[str, str] | None = None,
    **options: Any,
) -> tuple[int, list[str]]:
    lines: list[str] = []
    settings = make_settings(**(env or {}))
    code = await command.sync(
        settings, folder, KB, dry_run=dry_run, delete=delete, say=lines.append, tty=False, **options
    )
    return code, lines


def writes_since(base: Base, calls: int) -> list[str]:
    """The requests after the first `calls` that were not reads (Open WebUI's folder comparison, `sync/diff`, is a
    POST that changes nothing)."""
    return [
        f"{c.request.method} {c.request.url.path}"
        for c in base.router.calls[calls:]
        if c.request.method != "GET" and not c.request.url.path.endswith("/sync/diff")
    ]


def skipped_lines(lines: list[str]) -> dict[str, str]:
    """relative path -> why, from the `skipped` lines."""
    found = {}
    for line in lines:
        if line.startswith("skipped   "):
            relative, _, why = line.removeprefix("skipped   ").partition(": ")
            found[relative] = why
    return found


def cannot_read(monkeypatch: pytest.MonkeyPatch, path: Path, error: type[OSError], *, how: str = "open") -> None:
    """Make `path` fail as a file that cannot be opened (`open`), looked at (`stat`), or a folder that cannot be
    listed (`scandir`): the tests run as root, which reads any file whatever its mode."""
    if how == "open":  # files are opened by name from their folder's descriptor (localfiles.read_under)
        real_open = os.open

        def failing_open(target: Any, flags: int, *args: Any, dir_fd: int | None = None, **kwargs: Any) -> Any:
            if dir_fd is not None and os.fsdecode(target) == path.name and not flags & os.O_DIRECTORY:
                raise error(13, "simulated", os.fsdecode(target))
            return real_open(target, flags, *args, dir_fd=dir_fd, **kwargs)

        monkeypatch.setattr(os, "open", failing_open)
        return
    real = getattr(os, how)

    def failing(target: Any, *args: Any, **kwargs: Any) -> Any:
        # by its path, or (a file looked at in its folder, `sync.scan`) by its name from the folder's descriptor
        named = kwargs.get("dir_fd") is not None and os.fsdecode(target) == path.name
        if target is not None and (named or Path(os.fsdecode(target)) == path):
            raise error(13, "simulated", os.fsdecode(target))
        return real(target, *args, **kwargs)

    monkeypatch.setattr(os, how, failing)


def folder_lists(base: Base, calls: int = 0) -> int:
    """How many of the requests after the first `calls` read one folder of the base (0.9.6 to 0.11's walk)."""
    return sum(
        1 for c in base.router.calls[calls:] if c.request.method == "GET" and "directory_id" in c.request.url.params
    )


def notes(root: Path) -> None:
    for name in ("top.md", "docs/a.md", "docs/deep/b.md", "other/c.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}")


def full_lists(base: Base, calls: int = 0) -> int:
    """How many of the requests after the first `calls` read the base's whole list: on releases with folders, an
    admin's asks for a page size of its own (a one-page count does not, nor does a folder's list)."""
    return sum(
        1
        for c in base.router.calls[calls:]
        if c.request.method == "GET"
        and c.request.url.path == f"/api/v1/knowledge/{KB}/files"
        and "limit" in c.request.url.params
        and "directory_id" not in c.request.url.params
    )


class Leases:
    """A lease store (Redis's SET NX / compare-and-set semantics) that remembers which leases are held."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}

    async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        if key in self.held:
            return False
        self.held[key] = token
        return True

    async def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        return self.held.get(key) == token

    async def release(self, key: str, token: str) -> bool:
        if self.held.get(key) != token:
            return False
        del self.held[key]
        return True

    async def aclose(self) -> None:
        return None


def journal_records() -> list[journal_module.Record]:
    found = [journal_module.Record.from_json(path.read_bytes()) for path in journal_files()]
    return [record for record in found if record is not None]


def journal_files() -> list[Path]:
    return sorted(journal_module.default_directory().rglob("*.json"))


def base_names(mocked: Base) -> list[str]:
    return sorted(mocked.files[file_id]["filename"] for file_id in mocked.members)
