"""A misbehaving Open WebUI: a small stateful stand-in of release 0.12.4 that fails on purpose, per request.

Three pieces, shared by the fault, control and stdio tests:

- `FakeOpenWebUI`, the healthy behaviour: knowledge bases, files, uploads, retrieval, as plain data (no I/O).
- `Lane`, one independent Open WebUI as a test sees it: the healthy model, the faults armed on it (per method and
  path, for the next N requests or for ever) and every request it saw. A lane answers through respx
  (`Lane.router()` / `Lane.transport()`) or over real HTTP from a `FaultStub`.
- `FaultStub`, a loopback HTTP server (ThreadingHTTPServer on port 0, in a daemon thread). It serves many lanes at
  once: the first path segment names the lane, so `http://127.0.0.1:<port>/<lane>` is one Open WebUI base URL.

A `Fault` is what the upstream does instead of answering well: close the connection, reset it, hang, drip the body
one byte per second, answer any status with any body (echoing the caller's Authorization header if asked), cut the
body short, or stream hundreds of megabytes lazily. Over respx the same faults become the exceptions httpx raises for
them, or lazily streamed bodies, so one table of faults drives both transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import struct
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from email import policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import respx

BASE_URL = "http://owui.test"
RELEASE = "0.12.4"
USER = "5b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
KB = "c0ffee00-1111-4222-8333-444455556666"
KB_OTHER = "deadbeef-7777-4888-9999-aaaabbbbcccc"
KB_THIRD = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
FILE = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"  # in KB
FILE_OTHER = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d"  # in KB_OTHER only
FILE_THIRD = "5f3c1a2b-7d4e-4f60-8a1b-2c3d4e5f6a7b"  # in KB_THIRD
NOT_FOUND_TEXT = "We could not find what you're looking for :/"
AUTHORIZATION = b"{authorization}"  # in a fault's body or headers: replaced by the request's Authorization header
MIB = 1024 * 1024

# -- faults -------------------------------------------------------------------------------------------------------

FaultKind = Literal["answer", "close", "reset", "hang", "drip", "short", "huge", "refuse", "connect_timeout"]


@dataclass(frozen=True)
class Fault:
    """What the upstream does with a request instead of answering it well (kind "answer" is also a good answer)."""

    kind: FaultKind
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    size: int = 0  # huge: how many bytes to stream
    declare_length: bool = False  # huge: announce the size in Content-Length

    @property
    def over_http(self) -> bool:
        """Whether the loopback stub can do this (refusing or timing out a connection is a URL-level fault there)."""
        return self.kind not in ("refuse", "connect_timeout")

    def echoing(self, authorization: str) -> Fault:
        """The fault with the request's Authorization header in place of every `{authorization}`."""
        mark = AUTHORIZATION.decode()
        headers = tuple((key, value.replace(mark, authorization)) for key, value in self.headers)
        return replace(self, body=self.body.replace(AUTHORIZATION, authorization.encode()), headers=headers)


def answer(status: int, body: object = None, *, headers: Mapping[str, str] | None = None) -> Fault:
    """A JSON answer (bytes are sent as they are, still labelled JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
    return Fault("answer", status, data, headers=tuple((headers or {}).items()))


def page(status: int, html: str, *, content_type: str = "text/html; charset=utf-8") -> Fault:
    """An HTML (or other non-JSON) page, like a proxy's error page or a login page."""
    return Fault("answer", status, html.encode(), content_type=content_type)


def close() -> Fault:
    """Read the request, then close the connection without a byte of answer."""
    return Fault("close")


def reset() -> Fault:
    """Read the request, then reset the connection (TCP RST)."""
    return Fault("reset")


def hang() -> Fault:
    """Read the request and never answer."""
    return Fault("hang")


def drip(body: object = None) -> Fault:
    """Send the headers at once, then the body one byte per second."""
    return replace(answer(200, body if body is not None else {"items": [], "total": 0}), kind="drip")


def short() -> Fault:
    """Promise a longer body in Content-Length than is sent, then close."""
    return replace(answer(200, {"items": []}), kind="short")


def huge(size: int = 300 * MIB, *, declare_length: bool = False) -> Fault:
    """A 200 JSON answer of `size` bytes (`[` and zeros), produced lazily while it is sent."""
    return Fault("huge", size=size, declare_length=declare_length)


def refuse() -> Fault:
    """respx only: the connection is refused (httpx.ConnectError)."""
    return Fault("refuse")


def connect_timeout() -> Fault:
    """respx only: the connection is not established in time (httpx.ConnectTimeout)."""
    return Fault("connect_timeout")


# -- the healthy Open WebUI ---------------------------------------------------------------------------------------


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Document:
    file_id: str
    filename: str
    text: str

    def item(self) -> dict[str, Any]:
        """An item of GET /api/v1/knowledge/{id}/files (FileUserResponse)."""
        return {
            "id": self.file_id,
            "user_id": USER,
            "hash": _sha256(self.text),
            "filename": self.filename,
            "data": None,
            "meta": {"name": self.filename, "content_type": "text/markdown", "size": len(self.text.encode())},
            "created_at": 1793000100,
            "updated_at": 1793000200,
        }

    def full(self) -> dict[str, Any]:
        """GET /api/v1/files/{id} (FileModel)."""
        return {
            **self.item(),
            "path": f"/app/backend/data/uploads/{self.file_id}_{self.filename}",
            "data": {"status": "completed", "content": self.text},
        }


@dataclass
class Base:
    knowledge_id: str
    name: str
    description: str
    members: list[str] = field(default_factory=list)

    def model(self) -> dict[str, Any]:
        return {
            "id": self.knowledge_id,
            "user_id": USER,
            "name": self.name,
            "description": self.description,
            "meta": None,
            "access_grants": [],
            "created_at": 1793000000,
            "updated_at": 1793000000,
            "files": None,
            "write_access": True,
        }


Reply = tuple[int, object]


class FakeOpenWebUI:
    """Open WebUI 0.12.4 as far as this server uses it, kept in memory. Thread-safe through the lane's lock."""

    def __init__(self) -> None:
        self.bases: dict[str, Base] = {}
        self.files: dict[str, Document] = {}
        self._next = 0
        self.add_base(Base(KB, "Фрукты", "Всё о фруктах"), Document(FILE, "apples.md", "# Apples\n\nApples are red."))
        self.add_base(Base(KB_OTHER, "Ops", "Runbooks"), Document(FILE_OTHER, "pager.md", "# Pager\n\nCall Bob."))
        self.add_base(Base(KB_THIRD, "Reports", "Quarterly"), Document(FILE_THIRD, "q1.md", "# Q1\n\nUp 3 %."))

    def add_base(self, base: Base, *documents: Document) -> None:
        self.bases[base.knowledge_id] = base
        for document in documents:
            self.files[document.file_id] = document
            base.members.append(document.file_id)

    def _new_id(self) -> str:
        self._next += 1
        return f"{self._next:08x}-0000-4000-8000-00000000f00d"

    def handle(self, method: str, path: str, query: Mapping[str, list[str]], body: bytes, content_type: str) -> Reply:
        parts = [unquote(part) for part in path.lstrip("/").split("/")]
        route = (method, *parts)
        match route:
            case ("GET", "api", "version"):
                return 200, {"version": RELEASE, "deployment_id": ""}
            case ("GET", "api", "v1", "knowledge", ""):
                items = [base.model() | {"files": None} for base in self.bases.values()]
                number = int(query.get("page", ["1"])[0] or 1)
                return 200, {"items": items if number == 1 else [], "total": len(items)}
            case ("GET", "api", "v1", "knowledge", "search"):  # every base is the one user's (view_option=created)
                needle = query.get("query", [""])[0].lower()
                found = [b.model() for b in self.bases.values() if needle in (b.name + b.description).lower()]
                number = int(query.get("page", ["1"])[0] or 1)
                return 200, {"items": found if number == 1 else [], "total": len(found)}
            case ("DELETE", "api", "v1", "knowledge", knowledge_id, "delete") if knowledge_id in self.bases:
                del self.bases[knowledge_id]
                return 200, True
            case ("POST", "api", "v1", "retrieval", "process", "web"):
                return 200, {"status": True, "content": f"# A page\n\nFetched from {json.loads(body).get('url')}.\n"}
            case ("POST", "api", "v1", "knowledge", "create"):
                form = json.loads(body)
                base = Base(self._new_id(), str(form.get("name", "")), str(form.get("description", "")))
                self.bases[base.knowledge_id] = base
                return 200, base.model()
            case ("GET", "api", "v1", "knowledge", knowledge_id) if knowledge_id in self.bases:
                return 200, self.bases[knowledge_id].model()
            case ("GET", "api", "v1", "knowledge", knowledge_id, "files") if knowledge_id in self.bases:
                documents = [self.files[f].item() for f in self.bases[knowledge_id].members]
                return 200, {"items": documents, "directories": [], "breadcrumbs": [], "total": len(documents)}
            case ("POST", "api", "v1", "knowledge", knowledge_id, "update") if knowledge_id in self.bases:
                form = json.loads(body)
                self.bases[knowledge_id].name = str(form.get("name", ""))
                self.bases[knowledge_id].description = str(form.get("description", ""))
                return 200, self.bases[knowledge_id].model()
            case ("POST", "api", "v1", "knowledge", knowledge_id, "file", action) if knowledge_id in self.bases:
                return self._file_action(self.bases[knowledge_id], action, json.loads(body).get("file_id"))
            case ("GET", "api", "v1", "files", file_id) if file_id in self.files:
                return 200, self.files[file_id].full()
            case ("GET", "api", "v1", "files", file_id, "process", "status") if file_id in self.files:
                return 200, {"status": "completed"}
            case ("POST", "api", "v1", "files", ""):
                return self._upload(body, content_type)
            case ("POST", "api", "v1", "files", file_id, "data", "content", "update") if file_id in self.files:
                self.files[file_id].text = str(json.loads(body).get("content", ""))
                return 200, {"content": self.files[file_id].text}
            case ("POST", "api", "v1", "retrieval", "query", "collection"):
                return 200, self._query(json.loads(body))
        return 404, {"detail": NOT_FOUND_TEXT}

    def _file_action(self, base: Base, action: str, file_id: object) -> Reply:
        if not isinstance(file_id, str) or file_id not in self.files:
            return 400, {"detail": NOT_FOUND_TEXT}
        if action == "add":
            if file_id not in base.members:
                base.members.append(file_id)
        elif action in ("update", "remove"):
            if file_id not in base.members:
                return 400, {"detail": NOT_FOUND_TEXT}
            if action == "remove":
                base.members.remove(file_id)
        else:
            return 404, {"detail": "Not Found"}
        files = [{"id": f, "hash": _sha256(self.files[f].text), "meta": {}} for f in base.members]
        return 200, base.model() | {"files": files, "write_access": False}

    def _upload(self, body: bytes, content_type: str) -> Reply:
        message = BytesParser(policy=policy.default).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        filename, text = "upload.md", ""
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                filename = part.get_filename() or filename
                payload = part.get_payload(decode=True)
                text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
        document = Document(self._new_id(), filename, text)
        self.files[document.file_id] = document
        return 200, {**document.full(), "data": {"status": "pending"}, "status": True}

    def _query(self, form: Mapping[str, Any]) -> dict[str, Any]:
        texts: list[str] = []
        metadatas: list[dict[str, Any]] = []
        for name in form.get("collection_names", []):
            base = self.bases.get(name)
            for file_id in base.members if base else []:
                document = self.files[file_id]
                texts.append(document.text)
                metadatas.append({"file_id": file_id, "name": document.filename, "source": document.filename})
        k = int(form.get("k", 8))
        return {
            "documents": [texts[:k]],
            "metadatas": [metadatas[:k]],
            "distances": [[round(0.9 - i / 100, 2) for i in range(len(texts[:k]))]],
        }


# -- a lane: one Open WebUI, its armed faults, the requests it saw ------------------------------------------------


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # without the lane prefix and without the query string
    query: str
    authorization: str
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class _Rule:
    fault: Fault
    method: str
    path: str
    remaining: int | None

    def matches(self, method: str, path: str) -> bool:
        return self.method in ("*", method) and self.path in ("*", path) and self.remaining != 0


class Lane:
    """One Open WebUI for one test: healthy unless a fault is armed for a request."""

    def __init__(self, model: FakeOpenWebUI | None = None) -> None:
        self.model = model or FakeOpenWebUI()
        self.seen: list[Seen] = []
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()

    def fail(self, fault: Fault, *, method: str = "*", path: str = "*", times: int | None = None) -> None:
        """Arm `fault` for requests matching method and path ("*" for any), the next `times` ones or all."""
        with self._lock:
            self._rules.append(_Rule(fault, method, path, times))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def count(self, method: str, path: str) -> int:
        with self._lock:
            return sum(1 for seen in self.seen if seen.method == method and seen.path == path)

    def requests(self) -> list[str]:
        """Every request but the version check (the server reads it at start, whatever the test does)."""
        with self._lock:
            return [str(seen) for seen in self.seen if seen.path != "/api/version"]

    def decide(self, method: str, path: str, query: str, body: bytes, headers: Mapping[str, str]) -> Fault:
        """Record the request; the armed fault for it, or the healthy model's answer as an "answer" fault."""
        authorization = headers.get("authorization", "")
        with self._lock:
            self.seen.append(Seen(method, path, query, authorization, body))
            for rule in self._rules:
                if rule.matches(method, path):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    return rule.fault.echoing(authorization)
            try:
                status, reply = self.model.handle(method, path, parse_qs(query), body, headers.get("content-type", ""))
            except (ValueError, KeyError, TypeError) as exc:  # a request the real Open WebUI would refuse too
                status, reply = 422, {"detail": f"unreadable request: {type(exc).__name__}"}
        return answer(status, reply)

    # -- respx --

    def router(self, base_url: str = BASE_URL) -> respx.Router:
        """A respx router answering every request from this lane."""
        router = respx.Router(base_url=base_url, assert_all_called=False)
        prefix = urlsplit(base_url).path.rstrip("/")

        async def side_effect(request: httpx.Request) -> httpx.Response:
            raw_path, _, query = request.url.raw_path.decode("ascii").partition("?")
            path = raw_path.removeprefix(prefix) or "/"
            fault = self.decide(request.method, path, query, request.content, request.headers)
            return await as_httpx(fault, request)

        router.route().mock(side_effect=side_effect)
        return router

    def transport(self, base_url: str = BASE_URL) -> httpx.MockTransport:
        return httpx.MockTransport(self.router(base_url).async_handler)


async def as_httpx(fault: Fault, request: httpx.Request) -> httpx.Response:
    """The fault as httpx sees it through a mock transport: a response, a lazy stream, or the exception it raises."""
    match fault.kind:
        case "answer":
            headers = [("content-type", fault.content_type), *fault.headers]
            return httpx.Response(fault.status, content=fault.body, headers=headers)
        case "close":
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        case "reset":
            raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
        case "hang":
            raise httpx.ReadTimeout("timed out", request=request)
        case "short":
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body", request=request
            )
        case "refuse":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        case "connect_timeout":
            raise httpx.ConnectTimeout("timed out", request=request)
        case "drip":
            return httpx.Response(
                fault.status,
                headers={"content-type": fault.content_type, "content-length": str(len(fault.body))},
                content=_dripping(fault.body),
            )
        case "huge":
            announced = {"content-length": str(fault.size)} if fault.declare_length else {}
            return httpx.Response(
                200, headers={"content-type": "application/json", **announced}, content=_streaming(fault.size)
            )
    raise AssertionError(fault.kind)


async def _dripping(body: bytes) -> AsyncIterator[bytes]:
    for index in range(len(body)):
        yield body[index : index + 1]
        await asyncio.sleep(1)


async def _streaming(size: int) -> AsyncIterator[bytes]:
    for piece in _pieces(size):
        yield piece


def _pieces(size: int) -> Iterator[bytes]:
    """`[` and zeros, `size` bytes in all, in 1 MiB pieces that are never all in memory at once."""
    block = b"0" * MIB
    yield b"["
    left = size - 1
    while left > 0:
        piece = block if left >= MIB else block[:left]
        left -= len(piece)
        yield piece


# -- the loopback server ------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # every tool of a case connects at once; a full backlog would stall connects
    stub: FaultStub


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive for good answers; every fault closes its connection

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        try:
            first = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return
        if first == b"\x16":  # a TLS ClientHello sent to this plain-HTTP server: answer like a web server does
            self.connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        super().handle()

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        name, _, rest = parts.path.lstrip("/").partition("/")
        lane = self.server.stub.lanes.get(name)
        if lane is None:
            self._send(answer(404, {"detail": f"no lane {name!r} on this stub"}))
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        fault = lane.decide(self.command, "/" + rest, parts.query, body, headers)
        with contextlib.suppress(OSError):  # the client gave up (a timeout, the size cap): nothing more to do
            self._send(fault)

    def _head(self, status: int, headers: list[tuple[str, str]], body: bytes = b"") -> None:
        """Status line, headers and the start of the body (TCP_NODELAY: no write waits for an ACK)."""
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        if self.close_connection:  # a fault: this connection is not reused
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _send(self, fault: Fault) -> None:
        stop = self.server.stub.stopping
        self.close_connection = fault.kind != "answer"
        match fault.kind:
            case "answer":
                headers = [("Content-Type", fault.content_type), ("Content-Length", str(len(fault.body)))]
                self._head(fault.status, [*headers, *fault.headers], fault.body)
            case "close":
                pass
            case "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            case "hang":
                stop.wait(60)
            case "drip":
                self._head(
                    fault.status, [("Content-Type", fault.content_type), ("Content-Length", str(len(fault.body)))]
                )
                for index in range(len(fault.body)):
                    self.wfile.write(fault.body[index : index + 1])
                    self.wfile.flush()
                    if stop.wait(1):
                        return
            case "short":
                length = str(len(fault.body) + 1000)
                self._head(200, [("Content-Type", fault.content_type), ("Content-Length", length)], fault.body)
            case "huge":
                headers = [("Content-Type", "application/json")]
                if fault.declare_length:
                    headers.append(("Content-Length", str(fault.size)))
                self._head(200, headers)
                for piece in _pieces(fault.size):
                    if stop.is_set():
                        return
                    self.wfile.write(piece)
            case _:
                raise AssertionError(f"{fault.kind} cannot be done over HTTP")


class FaultStub:
    """The loopback server. `lane(name)` installs a fresh Open WebUI at `url_of(name)`."""

    def __init__(self) -> None:
        self.lanes: dict[str, Lane] = {}
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="faultstub", daemon=True)

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def lane(self, name: str, model: FakeOpenWebUI | None = None) -> Lane:
        self.lanes[name] = lane = Lane(model)
        return lane

    def start(self) -> FaultStub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()  # releases hanging and dripping handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def running() -> Iterator[FaultStub]:
    stub = FaultStub().start()
    try:
        yield stub
    finally:
        stub.stop()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
