"""A loopback reverse proxy in front of a real Open WebUI that can lie about its release, or hold a request.

Everything is forwarded as it is, except ``GET /api/version`` while ``version`` is set: then the proxy answers
``{"version": <version>}`` itself. Setting ``version`` while a server runs simulates Open WebUI being upgraded (or
swapped for a fork) under a running MCP server::

    with VersionProxy(instance.url) as proxy:      # proxy.url goes into OPENWEBUI_URL
        proxy.version = "0.6.5"                    # from now on /api/version says 0.6.5
        proxy.version = None                       # and now the truth again

``requests`` lists every request that came through (method and path), so a test can tell what was sent.

``hold`` stops the next request that matches at a chosen point, so a test can kill the MCP server exactly there (the
fault tier): before it is forwarded (Open WebUI never sees it) or after Open WebUI answered (the change is made, the
server never learns of it)::

    held = proxy.hold("POST", r"/file/add$")        # the next attach waits here
    held.reached.wait(60); kill the server; held.release.set()

Standard library HTTP server (a thread per connection, HTTP/1.1 keep-alive) plus httpx for the upstream side.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx

# Headers that describe one hop, not the message: never forwarded in either direction.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",  # httpx hands over the decoded body
    }
)


@dataclass
class Hold:
    """One request to stop: ``reached`` is set when it arrives, and it goes on when ``release`` is set."""

    method: str
    path: re.Pattern[str]
    after_answer: bool
    drop: bool = False  # released, the request is dropped unanswered instead of forwarded (its sender is dead)
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class VersionProxy:
    """``url`` forwards to ``upstream``; ``version`` (None: the truth) is what ``GET /api/version`` reports."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.version: str | None = None
        self.version_reads = 0  # how many times anyone asked for /api/version through the proxy
        self.requests: list[tuple[str, str]] = []  # (method, path without the query) of every request, in order
        self._holds: list[Hold] = []
        self._lock = threading.Lock()
        self._http = httpx.Client(base_url=self.upstream, timeout=httpx.Timeout(120.0, connect=10.0), trust_env=False)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="version-proxy", daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> VersionProxy:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()
        self._http.close()

    def hold(self, method: str, path: str, *, after_answer: bool = False, drop: bool = False) -> Hold:
        """Stop the next ``method`` request whose path (without the query) matches the regular expression ``path``:
        before forwarding it (and with ``drop``, never forward it), or with ``after_answer`` once Open WebUI has
        answered it."""
        held = Hold(method, re.compile(path), after_answer, drop)
        with self._lock:
            self._holds.append(held)
        return held

    def _take_hold(self, method: str, path: str) -> Hold | None:
        with self._lock:
            for held in self._holds:
                if held.method == method and held.path.search(path.split("?", 1)[0]):
                    self._holds.remove(held)
                    return held
        return None

    def _fake_version(self) -> str | None:
        with self._lock:
            self.version_reads += 1
            return self.version

    def _forward(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> httpx.Response:
        sent = [(name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP]
        return self._http.request(method, path, headers=sent, content=body or None)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the MCP server's httpx client expects

            def log_message(self, format: str, *args: Any) -> None:  # quiet: stderr belongs to pytest
                return None

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("transfer-encoding", "").lower():
                    chunks: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else b""

            def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _handle(self) -> None:
                body = self._body()
                with proxy._lock:
                    proxy.requests.append((self.command, self.path.split("?", 1)[0]))
                if self.command == "GET" and self.path.split("?", 1)[0] == "/api/version":
                    fake = proxy._fake_version()
                    if fake is not None:
                        payload = json.dumps({"version": fake}).encode()
                        self._reply(200, [("Content-Type", "application/json")], payload)
                        return
                held = proxy._take_hold(self.command, self.path)
                if held is not None and not held.after_answer:
                    held.reached.set()
                    held.release.wait(600)
                    if held.drop:
                        self.close_connection = True
                        return
                try:
                    answer = proxy._forward(self.command, self.path, list(self.headers.items()), body)
                except httpx.HTTPError as exc:
                    self._reply(502, [("Content-Type", "text/plain")], f"proxy: {exc}".encode())
                    return
                if held is not None and held.after_answer:
                    held.reached.set()
                    held.release.wait(600)
                try:
                    self._reply(answer.status_code, list(answer.headers.multi_items()), answer.content)
                except OSError:  # the caller was killed while the request was held
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

        return Handler
