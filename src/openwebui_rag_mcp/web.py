"""The Streamable HTTP transport: one endpoint (`/mcp`) for a team, every caller acting as themselves.

    caller --HTTPS--> reverse proxy --> [access log] --> /healthz, /readyz
                                                    --> /mcp: credential check (401) --> the MCP server (stateless)

Credentials, per `OPENWEBUI_MCP_AUTH`:

- *caller* (default): the request's `Authorization: Bearer` (an Open WebUI API key or session token, as Open WebUI's
  own "Session" tool-server authentication forwards it) is the credential for every upstream request made for that
  request, and for nothing else. It is checked with one cheap authorised read, remembered for a short time under
  its SHA-256; the token itself is never stored, logged or quoted. This is an API-key style of authorisation, not
  MCP's OAuth flow: no protected-resource metadata is published.
- *service*: upstream requests use `OPENWEBUI_API_KEY`; callers present one of `OPENWEBUI_MCP_TOKENS`.

The stateless transport keeps no session between requests, so any replica answers any request. The allowlist,
read-only mode and disabled tools apply to every caller; a caller may narrow its own view with the
`X-OpenWebUI-Read-Only: true` header (writes refused), never widen it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from openwebui_rag_mcp.app import App, reading_only
from openwebui_rag_mcp.client import acting_as
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.locks import LeaseLocks, LocalLocks, RedisLeaseStore, WriteLocks

log = logging.getLogger(__name__)
access_log = logging.getLogger("openwebui_rag_mcp.access")

MCP_PATH = "/mcp"
READ_ONLY_HEADER = "x-openwebui-read-only"
# A credential Open WebUI accepted is trusted this long without asking again; a refused one is refused this long.
ACCEPTED_SECONDS = 60.0
REFUSED_SECONDS = 5.0
REMEMBERED_MAX = 10_000
_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Admission:
    """Decides whether a bearer token may call the server, remembering verdicts under the token's hash."""

    def __init__(self, settings: Settings, app: Callable[[], App], clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._app = app
        self._clock = clock
        self._verdicts: dict[str, tuple[float, bool]] = {}
        self._service = [_digest(token.get_secret_value()) for token in settings.service_tokens]

    async def admit(self, token: str) -> bool | None:
        """True: admitted; False: refused; None: Open WebUI could not be asked (it is unreachable)."""
        if self._settings.auth_mode == "service":
            presented = _digest(token)
            return any(hmac.compare_digest(presented, known) for known in self._service)
        key = _digest(token)
        remembered = self._verdicts.get(key)
        if remembered is not None:
            at, accepted = remembered
            if self._clock() - at < (ACCEPTED_SECONDS if accepted else REFUSED_SECONDS):
                return accepted
        try:
            with acting_as(token):
                await self._app().client.check_credential()
            accepted = True
        except ToolFailure as failure:
            if failure.code not in ("auth", "forbidden"):
                log.warning("could not check a caller's credential with Open WebUI: %s", failure.code)
                return None
            accepted = False
        self._verdicts.pop(key, None)
        self._verdicts[key] = (self._clock(), accepted)
        while len(self._verdicts) > REMEMBERED_MAX:
            del self._verdicts[next(iter(self._verdicts))]
        return accepted


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def _header(scope: Scope, wanted: bytes) -> str:
    for name, value in scope.get("headers", []):
        if name == wanted:
            return str(value.decode("latin-1"))
    return ""


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Gate:
    """In front of `/mcp`: a request without an admitted credential gets 401 before any tool runs; an admitted one
    runs with its credential (caller mode) and its own read-only wish."""

    def __init__(self, inner: ASGIApp, settings: Settings, admission: Admission) -> None:
        self._inner = inner
        self._settings = settings
        self._admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        token = _bearer(scope)
        verdict = await self._admission.admit(token) if token else False
        if verdict is None:
            await _send_json(send, 503, {"error": "Open WebUI is unreachable; try again"}, [(b"retry-after", b"5")])
            return
        if not verdict:
            what = "an Open WebUI API key or session token" if self._settings.auth_mode == "caller" else "a token"
            challenge = b'Bearer realm="openwebui-rag-mcp", error="invalid_token"' if token else b"Bearer"
            await _send_json(
                send,
                401,
                {"error": f"send Authorization: Bearer with {what} that is accepted"},
                [(b"www-authenticate", challenge)],
            )
            return
        read_only = _header(scope, READ_ONLY_HEADER.encode()).strip().lower() in ("1", "true", "yes")
        with reading_only(read_only):
            if self._settings.auth_mode == "caller" and token:
                with acting_as(token):
                    await self._inner(scope, receive, send)
            else:
                await self._inner(scope, receive, send)


class AccessLog:
    """One line per HTTP request on stderr: client, method, path, status, time. Never headers or bodies."""

    def __init__(self, inner: ASGIApp) -> None:
        self._inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._inner(scope, receive, sending)
        finally:
            client = scope.get("client") or ("-", 0)
            access_log.info(
                '%s "%s %s" %d %.0f ms',
                client[0],
                scope.get("method", "-"),
                scope.get("path", "-"),
                status,
                (time.monotonic() - started) * 1000,
            )


def make_locks(settings: Settings) -> WriteLocks:
    if settings.redis_url is None:
        return LocalLocks()
    # Long enough for the slowest write to wait its turn behind another.
    wait = settings.process_timeout + 4 * settings.timeout
    return LeaseLocks(RedisLeaseStore(settings.redis_url.get_secret_value()), wait_seconds=wait)


def build_app(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> Starlette:
    """The ASGI application of the HTTP transport (uvicorn runs it; tests may drive it directly)."""
    from openwebui_rag_mcp.server import create_server, running_app

    state: dict[str, App] = {}

    def current() -> App:
        return state["app"]

    server = create_server(settings, transport=transport, shared=current)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*_LOOPBACK_HOSTS, *settings.allowed_hosts],
        allowed_origins=[*_LOOPBACK_ORIGINS, *settings.allowed_origins],
    )
    mcp_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=False,  # SSE, so progress notifications reach the caller
        max_request_body_size=settings.max_body_bytes,
        transport_security=security,
        host=settings.host,
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        locks = make_locks(settings)
        try:
            async with running_app(settings, transport=transport, locks=locks) as app:
                state["app"] = app
                if not locks.shared:
                    log.warning(
                        "write locks are per process (REDIS_URL is not set): run one replica, or set REDIS_URL so "
                        "writes to a base are serialised across replicas"
                    )
                lifespan_of_mcp: AbstractAsyncContextManager[Any] = mcp_app.router.lifespan_context(mcp_app)
                async with lifespan_of_mcp:
                    log.warning(
                        "serving MCP over Streamable HTTP at http://%s:%d%s (credentials: %s)",
                        settings.host,
                        settings.port,
                        MCP_PATH,
                        "each caller's own" if settings.auth_mode == "caller" else "service account",
                    )
                    yield
        finally:
            await locks.aclose()

    async def healthz(_: Request) -> Response:
        """Liveness: the process answers; asks nothing of Open WebUI."""
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        """Readiness: Open WebUI answers (its version, which needs no credential)."""
        try:
            release = await asyncio.wait_for(current().client.release(), timeout=10)
        except (ToolFailure, TimeoutError) as failure:
            reason = failure.code if isinstance(failure, ToolFailure) else "timeout"
            return JSONResponse({"status": "unavailable", "openwebui": reason}, status_code=503)
        return JSONResponse({"status": "ready", "openwebui_version": release.version})

    gate = Gate(mcp_app, settings, Admission(settings, current))
    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Mount("", app=gate),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(AccessLog)
    return app


def serve(settings: Settings) -> None:
    """Run the HTTP transport under uvicorn until SIGINT/SIGTERM; writes in flight are given time to finish."""
    import uvicorn

    if settings.log_level != "ERROR":
        access_log.setLevel(logging.INFO)
    config = uvicorn.Config(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,  # ours, without query strings or headers
        proxy_headers=True,
        forwarded_allow_ips="127.0.0.1",
        lifespan="on",
        timeout_graceful_shutdown=int(settings.process_timeout + 2 * settings.timeout),
        server_header=False,
    )
    uvicorn.Server(config).run()
