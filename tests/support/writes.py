"""The write path's doubles: a mocked Open WebUI that holds bases and files and answers every write request
(`Upstream`), the MCP client against it (`connect`, `call`), and what a result must look like (`ok_of`, `error_of`)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import respx
from mcp import Client
from mcp.types import CallToolResult

from openwebui_rag_mcp.config import Timings
from openwebui_rag_mcp.models import ErrorBody
from openwebui_rag_mcp.server import create_server
from tests.conftest import FAST, assert_no_key, make_settings, mock_transport

USER = "5b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
KB = "c0ffee00-1111-4222-8333-444455556666"
NEW_KB = "abcdef01-2345-4678-9abc-def012345678"
FILE = "5f3c1a2b-7d4e-4f60-8a1b-2c3d4e5f6a7b"  # the file every upload in these tests creates
OTHER = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"  # a document the base already holds
TEXT = "# Яблоки\n\nApples are red. 苹果是红色的。\n"
TITLE = "Отчёт 2024: 東京/データ"
NOT_FOUND_TEXT = "We could not find what you're looking for :/"
NO_PERMISSION = "You do not have permission to access this resource. Please contact your administrator for assistance."
DUPLICATE = "400: Duplicate content detected. Please provide unique content to proceed."
REMOVED_AGAIN = re.compile(rf"uploaded file {FILE} was removed again; nothing was added")
OUTLIVED_REMOVED = re.compile(rf"uploaded file {FILE} was removed again, but .* Check with knowledge_files")

Effect = Callable[..., Any]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def form_parts(request: httpx.Request) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a multipart/form-data request: name -> (filename, body)."""
    content_type = request.headers["content-type"]
    assert content_type.startswith("multipart/form-data"), content_type
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    parts: dict[str, tuple[str | None, bytes]] = {}
    for chunk in request.content.split(b"--" + boundary):
        if chunk in (b"", b"--\r\n", b"--") or chunk.startswith(b"--"):
            continue
        head, _, body = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        header = head.decode("utf-8")
        name = re.search(r'(?:^|;\s*)name="([^"]*)"', header, re.MULTILINE)
        filename = re.search(r'filename="([^"]*)"', header)
        assert name is not None, header
        parts[name.group(1)] = (filename.group(1) if filename else None, body.removesuffix(b"\r\n"))
    return parts


def upload_metadata(request: httpx.Request) -> dict[str, Any]:
    _, raw = form_parts(request)["metadata"]
    metadata: dict[str, Any] = json.loads(raw.decode("utf-8"))
    return metadata


# -- a mocked Open WebUI ------------------------------------------------------------------------------------------


def file_item(file_id: str, text: str, filename: str = "notes.md") -> dict[str, Any]:
    """An item of GET /api/v1/knowledge/{id}/files on 0.12.4 (FileUserResponse)."""
    return {
        "id": file_id,
        "user_id": USER,
        "hash": sha256(text),
        "filename": filename,
        "data": None,
        "meta": {"name": filename, "content_type": "text/markdown", "size": len(text.encode()), "data": {}},
        "created_at": 1793000100,
        "updated_at": 1793000200,
        "directory_id": None,
        "directory_path": None,
        "has_original": True,
        "user": {"id": USER, "name": "Admin", "role": "admin", "email": "admin@example.com"},
    }


def full_file(file_id: str, text: str, filename: str = "notes.md") -> dict[str, Any]:
    """GET /api/v1/files/{id} (FileModel), also the files nested in a 0.6.5 base."""
    return {
        "id": file_id,
        "user_id": USER,
        "hash": sha256(text),
        "filename": filename,
        "path": f"/app/backend/data/uploads/{file_id}_{filename}",
        "data": {"status": "completed", "content": text},
        "meta": {"name": filename, "content_type": "text/markdown", "size": len(text.encode()), "data": {}},
        "created_at": 1793000100,
        "updated_at": 1793000200,
    }


@dataclass
class Upstream:
    """Open WebUI as far as the write tools see it: a base KB holding `members`, and FILE once uploaded."""

    router: respx.Router
    release: str = "0.12.4"
    write_access: bool = True
    members: list[dict[str, Any]] = field(default_factory=list)
    upload_error: str | None = None  # releases before 0.6.23 report a processing failure in the upload answer

    def __post_init__(self) -> None:
        r = self.router
        self.members.append(full_file(OTHER, "Pears are green.", "pears.md"))
        self.version = r.get("/api/version").respond(json={"version": self.release})
        self.create = r.post("/api/v1/knowledge/create").mock(side_effect=self._create)
        self.files = r.get(f"/api/v1/knowledge/{KB}/files").mock(side_effect=self._files)
        self.base = r.get(f"/api/v1/knowledge/{KB}").mock(side_effect=self._base)
        self.upload = r.post("/api/v1/files/").mock(side_effect=self._upload)
        self.status = r.get(f"/api/v1/files/{FILE}/process/status").respond(json={"status": "completed"})
        self.file = r.get(f"/api/v1/files/{FILE}").mock(side_effect=self._file)
        self.add = r.post(f"/api/v1/knowledge/{KB}/file/add").mock(side_effect=self._add)
        self.content = r.post(f"/api/v1/files/{FILE}/data/content/update").mock(side_effect=self._content)
        self.reindex = r.post(f"/api/v1/knowledge/{KB}/file/update").mock(side_effect=self._knowledge)
        self.remove = r.post(f"/api/v1/knowledge/{KB}/file/remove").mock(side_effect=self._remove)
        self.delete = r.delete(f"/api/v1/files/{FILE}").mock(side_effect=self._delete)
        self.file_text = TEXT

    @property
    def paged(self) -> bool:
        return self.release != "0.6.5"

    def write_routes(self) -> dict[str, respx.Route]:
        return {
            "create": self.create,
            "upload": self.upload,
            "add": self.add,
            "content": self.content,
            "reindex": self.reindex,
            "remove": self.remove,
            "delete": self.delete,
        }

    def requests(self) -> list[str]:
        """Every request but the version check, as 'METHOD /path'."""
        return [
            f"{call.request.method} {call.request.url.path}"
            for call in self.router.calls
            if call.request.url.path != "/api/version"
        ]

    def hold(self, file_id: str, text: str) -> None:
        self.members.append(full_file(file_id, text))

    def _knowledge(self, request: httpx.Request) -> httpx.Response:
        body: dict[str, Any] = {
            "id": KB,
            "user_id": USER,
            "name": "Фрукты",
            "description": "Всё о фруктах",
            "meta": None,
            "created_at": 1793000000,
            "updated_at": 1793000000,
        }
        if self.paged:
            body |= {"access_grants": [], "files": None, "write_access": self.write_access}
        else:
            body |= {"data": {"file_ids": [m["id"] for m in self.members]}, "access_control": {}}
            body["files"] = self.members
        if request.method == "POST":  # the write routes answer with the file metadata
            body["files"] = [{"id": m["id"], "hash": m["hash"], "meta": m["meta"]} for m in self.members]
            body["write_access"] = False
        return httpx.Response(200, json=body)

    def _base(self, request: httpx.Request) -> httpx.Response:
        return self._knowledge(request)

    def _files(self, request: httpx.Request) -> httpx.Response:
        items = [file_item(m["id"], m["data"]["content"], m["filename"]) for m in self.members]
        return httpx.Response(200, json={"items": items, "directories": [], "breadcrumbs": [], "total": len(items)})

    def _create(self, request: httpx.Request) -> httpx.Response:
        form = json.loads(request.content)
        body = {
            "id": NEW_KB,
            "user_id": USER,
            "name": form["name"],
            "description": form["description"],
            "meta": None,
            "access_grants": [],
            "created_at": 1793000000,
            "updated_at": 1793000000,
            "files": None,
        }
        return httpx.Response(200, json=body)

    def _upload(self, request: httpx.Request) -> httpx.Response:
        parts = form_parts(request)
        filename, content = parts["file"]
        assert filename is not None
        self.file_text = content.decode("utf-8")
        metadata = upload_metadata(request)
        body: dict[str, Any] = {
            "id": FILE,
            "user_id": USER,
            "hash": None,
            "filename": filename,
            "path": f"/app/backend/data/uploads/{FILE}_{filename}",
            "data": {"status": "pending"} if self.paged else {"content": self.file_text},
            "meta": {
                "name": filename,
                "content_type": "text/markdown",
                "size": len(content),
                "file_hash": hashlib.sha256(content).hexdigest(),
                "data": metadata,
            },
            "created_at": 1793000300,
            "updated_at": 1793000300,
            "status": True,
        }
        if self.upload_error is not None:
            body["error"] = self.upload_error
        return httpx.Response(200, json=body)

    def _file(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=full_file(FILE, self.file_text, "upload.md"))

    def _add(self, request: httpx.Request) -> httpx.Response:
        file_id = json.loads(request.content)["file_id"]
        self.members.append(full_file(file_id, self.file_text, "upload.md"))
        return self._knowledge(request)

    def _content(self, request: httpx.Request) -> httpx.Response:
        text = json.loads(request.content)["content"]
        self.file_text = text
        return httpx.Response(200, json={"content": text})

    def _delete(self, request: httpx.Request) -> httpx.Response:
        self.members = [m for m in self.members if m["id"] != FILE]
        return httpx.Response(200, json=True)

    def _remove(self, request: httpx.Request) -> httpx.Response:
        file_id = json.loads(request.content)["file_id"]
        self.members = [m for m in self.members if m["id"] != file_id]
        return self._knowledge(request)


@asynccontextmanager
async def connect(upstream: Upstream, *, timings: Timings = FAST, **env: str) -> AsyncIterator[Client]:
    settings = replace(make_settings(**env), timings=timings)
    server = create_server(settings, transport=mock_transport(upstream.router))
    async with Client(server, raise_exceptions=True) as client:
        yield client


async def call(
    upstream: Upstream, tool: str, args: dict[str, Any], *, timings: Timings = FAST, **env: str
) -> CallToolResult:
    async with connect(upstream, timings=timings, **env) as client:
        return await client.call_tool(tool, args)


def error_of(result: CallToolResult) -> ErrorBody:
    assert result.is_error, result
    assert result.structured_content is not None
    body = ErrorBody.model_validate(result.structured_content)
    assert body.ok is False
    assert body.message
    assert_no_key(body.message, result.content)
    return body


def ok_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    content: dict[str, Any] = result.structured_content
    assert content["ok"] is True
    return content


def add_args(**extra: Any) -> dict[str, Any]:
    return {"knowledge_id": KB, "text": TEXT, "title": TITLE, **extra}


UPDATE_ARGS: dict[str, Any] = {"file_id": FILE, "text": "# Яблоки\n\nApples are green now.", "knowledge_id": KB}
DELETE_ARGS: dict[str, Any] = {"knowledge_id": KB, "file_id": FILE}
CREATE_ARGS: dict[str, Any] = {"name": "Новая база 新しい", "description": "Заметки"}


def answer(status: int, **kwargs: Any) -> Effect:
    def effect(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, **kwargs)

    return effect
