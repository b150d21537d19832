"""A stand-in for Open WebUI 0.12.4 on loopback that answers at once and counts what it is asked.

Run as ``python -m bench.stub [--bases N] [--files N]``: it listens on 127.0.0.1 (a free port) and prints
``PORT=<n>`` as its first line. It is a bare asyncio HTTP/1.1 server with keep-alive and pre-encoded answers,
so the time it adds is a few tens of microseconds and the benchmark sees the MCP server's own overhead.

Routes (the ones the server's tools use, with bodies shaped like 0.12.4's):

* ``GET /api/version``
* ``GET /api/v1/knowledge/?page=N``: ``{items, total}``, 30 per page, ``--bases`` bases
* ``GET /api/v1/knowledge/{id}`` and ``GET /api/v1/knowledge/{id}/files?page=N`` (``--files`` per base)
* ``POST /api/v1/retrieval/query/collection``: ``k`` results with 0.12.4's metadata
* ``GET /api/v1/files/{id}``, ``GET /api/v1/files/{id}/process/status``
* ``POST /api/v1/files/`` (upload) and ``POST /api/v1/knowledge/{id}/file/add``, for a write in flight

Control routes for the benchmark:

* ``POST /__reset``: forget the request log
* ``POST /__hold`` with ``{"route": seconds, ...}``: answer that route only after the delay (``{}`` clears)
* ``GET /__inflight``: ``{route: requests being answered now}``
* ``GET /__log``: every request since the reset as ``[route, page, start, end, detail]`` (monotonic seconds);
  ``detail`` is the number of collection names for a retrieval query
* ``GET /__connections``: ``{"opened": n}``, the TCP connections accepted since the start (control ones included)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

PAGE_SIZE = 30
VERSION = "0.12.4"
USER_ID = "5b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
USER = {"id": USER_ID, "name": "Admin", "role": "admin", "email": "admin@example.com"}
EPOCH = 1_793_000_000
LOG_LIMIT = 100_000

_PARAGRAPH = (
    "The knowledge base keeps documents as chunks of text with their embeddings. A search embeds the query, "
    "finds the nearest chunks in every collection named in the request and returns them ranked by distance, "
    "together with the metadata stored at upload time: the file id, the name, the source and the offset. "
)
CHUNK_TEXT = (_PARAGRAPH * 4)[:900]
FILE_TEXT = "# A document\n\n" + "\n\n".join(f"## Section {n}\n\n{_PARAGRAPH * 3}" for n in range(1, 9))
# Open WebUI's `hash` of a document: the SHA-256 of its extracted text, in the file and in each of its chunks.
FILE_HASH = hashlib.sha256(FILE_TEXT.encode()).hexdigest()


def base_id(number: int) -> str:
    return f"{number:08x}-0000-4000-8000-{number:012x}"


def file_id(base: int, number: int) -> str:
    return f"{base:08x}-{number:04x}-4000-9000-{number:012x}"


@dataclass(frozen=True, slots=True)
class Answer:
    route: str
    body: bytes
    status: int = 200
    page: int = 0
    detail: int = 0


def _encode(body: object) -> bytes:
    # Open WebUI (Starlette's JSONResponse) answers compact JSON without ASCII escapes.
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class Upstream:
    """The routes and their answers; the answers are built once and kept encoded."""

    def __init__(self, bases: int, files: int) -> None:
        self.bases = bases
        self.files = files
        self.hold: dict[str, float] = {}
        self.log: list[list[Any]] = []
        self.uploads = 0
        self.inflight: dict[str, int] = {}
        self.connections = 0
        self._cache: dict[tuple[str, str, int], bytes] = {}

    def _cached(self, key: tuple[str, str, int], build: Any) -> bytes:
        body = self._cache.get(key)
        if body is None:
            body = self._cache[key] = _encode(build())
        return body

    def _base(self, number: int) -> dict[str, Any]:
        return {
            "id": base_id(number),
            "user_id": USER_ID,
            "name": f"Base {number}",
            "description": f"Documents of team {number}",
            "meta": None,
            "access_grants": [],
            "created_at": EPOCH,
            "updated_at": EPOCH + number,
            "user": USER,
            "file_count": self.files,
            "write_access": True,
        }

    def _file(self, base: int, number: int, *, with_text: bool) -> dict[str, Any]:
        fid = file_id(base, number)
        name = f"document-{base}-{number}.md"
        return {
            "id": fid,
            "user_id": USER_ID,
            "hash": FILE_HASH,
            "filename": name,
            "path": f"/data/uploads/{fid}_{name}",
            "data": {"status": "completed", "content": FILE_TEXT} if with_text else None,
            "meta": {
                "name": name,
                "content_type": "text/markdown",
                "size": len(FILE_TEXT),
                "data": {"title": f"Document {number} of base {base}", "source": name},
                "collection_name": base_id(base),
            },
            "created_at": EPOCH + number,
            "updated_at": EPOCH + number,
            **({} if with_text else {"directory_id": None, "has_original": True, "user": USER}),
        }

    def knowledge_page(self, page: int) -> bytes:
        def build() -> dict[str, Any]:
            first = (page - 1) * PAGE_SIZE
            numbers = range(first, min(first + PAGE_SIZE, self.bases))
            return {"items": [self._base(n) for n in numbers], "total": self.bases}

        return self._cached(("knowledge", "", page), build)

    def files_page(self, base: int, page: int) -> bytes:
        def build() -> dict[str, Any]:
            first = (page - 1) * PAGE_SIZE
            numbers = range(first, min(first + PAGE_SIZE, self.files))
            return {"items": [self._file(base, n, with_text=False) for n in numbers], "total": self.files}

        return self._cached(("files", str(base), page), build)

    def retrieval(self, k: int) -> bytes:
        def build() -> dict[str, Any]:
            metadatas = []
            for n in range(k):
                fid = file_id(n % max(1, self.bases), n)
                name = f"document-{n % max(1, self.bases)}-{n}.md"
                metadatas.append(
                    {
                        "file_hash": f"{n:064x}",
                        "content_type": "text/markdown",
                        "source": name,
                        "start_index": 900 * n,
                        "name": name,
                        "title": f"Document {n}",
                        "size": len(FILE_TEXT),
                        "embedding_config": "{'engine': 'openai', 'model': 'fake-embed'}",
                        "created_by": USER_ID,
                        "file_id": fid,
                        "hash": FILE_HASH,
                    }
                )
            return {
                "distances": [[round(0.9 - n * 0.01, 6) for n in range(k)]],
                "documents": [[CHUNK_TEXT for _ in range(k)]],
                "metadatas": [metadatas],
            }

        return self._cached(("retrieval", "", k), build)

    def route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> Answer:
        """The answer to one request; its route name keys holds and the log."""
        page = int(query.get("page", ["0"])[0] or 0)
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if method == "GET" and parts == ["api", "version"]:
            return Answer("version", _encode({"version": VERSION, "deployment_id": ""}))
        if parts[:3] == ["api", "v1", "knowledge"]:
            rest = parts[3:]
            if method == "GET" and rest in ([], [""]):
                return Answer("knowledge_list", self.knowledge_page(max(page, 1)), page=page)
            number = _number(rest[0]) if rest else None
            if number is None or number >= self.bases:
                return Answer("not_found", _encode({"detail": "We could not find what you are looking for :/"}), 404)
            if method == "GET" and len(rest) == 1:
                return Answer("knowledge_get", self._cached(("base", "", number), lambda: self._base(number)))
            if method == "GET" and rest[1:] == ["files"]:
                return Answer("knowledge_files", self.files_page(number, max(page, 1)), page=page)
            if method == "POST" and rest[1:] == ["file", "add"]:
                return Answer("file_add", _encode(self._base(number)))
        if method == "POST" and parts == ["api", "v1", "retrieval", "query", "collection"]:
            request = json.loads(body or b"{}")
            k = int(request.get("k") or 4)
            names = len(request.get("collection_names") or [])
            return Answer("retrieval", self.retrieval(max(1, min(k, 50))), detail=names)
        if parts[:3] == ["api", "v1", "files"]:
            rest = parts[3:]
            if method == "POST" and rest in ([], [""]):
                self.uploads += 1
                upload = {"id": file_id(0xFFFF, self.uploads), "filename": "upload.md", "data": {"status": "pending"}}
                return Answer("upload", _encode(upload))
            if method == "GET" and len(rest) == 3 and rest[1:] == ["process", "status"]:
                return Answer("file_status", _encode({"status": "completed"}))
            if method == "GET" and len(rest) == 1:
                base, number = _file_numbers(rest[0])
                if base is not None and number is not None:
                    key = ("file", str(base), number)
                    return Answer("file_get", self._cached(key, lambda: self._file(base, number, with_text=True)))
        return Answer("not_found", _encode({"detail": "Not Found"}), 404)


def _number(knowledge_id: str) -> int | None:
    try:
        return int(knowledge_id.split("-")[0], 16)
    except ValueError:
        return None


def _file_numbers(fid: str) -> tuple[int | None, int | None]:
    pieces = fid.split("-")
    try:
        return int(pieces[0], 16), int(pieces[1], 16)
    except (ValueError, IndexError):
        return None, None


async def _serve_connection(upstream: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    upstream.connections += 1
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, target, _ = line.decode("latin-1").split(" ", 2)
            length = 0
            close = False
            while True:
                header = await reader.readline()
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.decode("latin-1").partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip())
                elif name == "connection":
                    close = value.strip().lower() == "close"
            body = await reader.readexactly(length) if length else b""
            started = time.monotonic()
            control = _control(upstream, method, target, body)
            if control is not None:
                answer = Answer("control", control)
            else:
                parts = urlsplit(target)
                answer = upstream.route(method, parts.path, parse_qs(parts.query), body)
                delay = upstream.hold.get(answer.route, 0.0)
                if delay:
                    upstream.inflight[answer.route] = upstream.inflight.get(answer.route, 0) + 1
                    try:
                        await asyncio.sleep(delay)
                    finally:
                        upstream.inflight[answer.route] -= 1
            reason = "OK" if answer.status == 200 else "Not Found"
            writer.write(
                f"HTTP/1.1 {answer.status} {reason}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(answer.body)}\r\n\r\n".encode()
                + answer.body
            )
            await writer.drain()
            if answer.route != "control" and len(upstream.log) < LOG_LIMIT:
                upstream.log.append([answer.route, answer.page, started, time.monotonic(), answer.detail])
            if close:
                return
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def _control(upstream: Upstream, method: str, target: str, body: bytes) -> bytes | None:
    if not target.startswith("/__"):
        return None
    if method == "POST" and target == "/__reset":
        upstream.log.clear()
        return b"{}"
    if method == "POST" and target == "/__hold":
        upstream.hold = {str(k): float(v) for k, v in json.loads(body or b"{}").items()}
        return b"{}"
    if method == "GET" and target == "/__inflight":
        return _encode(upstream.inflight)
    if method == "GET" and target == "/__log":
        return _encode(upstream.log)
    if method == "GET" and target == "/__connections":
        return _encode({"opened": upstream.connections})
    return _encode({"detail": "unknown control route"})


async def serve(bases: int, files: int, port: int) -> None:
    upstream = Upstream(bases, files)
    server = await asyncio.start_server(lambda r, w: _serve_connection(upstream, r, w), "127.0.0.1", port, backlog=1024)
    sockets = server.sockets
    print(f"PORT={sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bases", type=int, default=100, help="knowledge bases the key can read (100)")
    parser.add_argument("--files", type=int, default=75, help="documents per base (75)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.bases, args.files, args.port))
    sys.exit(0)


if __name__ == "__main__":
    main()
