"""The Streamable HTTP transport: one endpoint (`/mcp`) for a team, every caller acting as themselves.

    caller --HTTPS--> reverse proxy --> [access log] --> /healthz, /readyz
                                                    --> /mcp: Host and Origin (421, 403), CORS preflight (204),
                                                        read-only header (400), failed-check budget (429),
                                                        credential check (401) --> the MCP server (stateless)

Everything that costs nothing is checked before a credential is. The credential modes (`caller`, `service`), the
budget of refused credentials and the trusted front ends are described in docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, NamedTuple

import httpx
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from openwebui_rag_mcp.app import App, calling_as, reading_only
from openwebui_rag_mcp.client import acting_as
from openwebui_rag_mcp.config import FALSE_WORDS, TRUE_WORDS, Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.runtime import make_locks, running_app
from openwebui_rag_mcp.server import create_server

log = logging.getLogger(__name__)
access_log = logging.getLogger("openwebui_rag_mcp.access")

MCP_PATH = "/mcp"
READ_ONLY_HEADER = "x-openwebui-read-only"
# A credential Open WebUI accepted is trusted this long without asking again; a refused one is refused this long.
ACCEPTED_SECONDS = 60.0
KNOWN_SECONDS = 3600.0  # a credential accepted within the hour is still checked while failed checks are limited
REFUSED_SECONDS = 5.0
REMEMBERED_MAX = 10_000
# Distinct credentials refused per minute, from one client address and from all: enough for people mistyping, little
# for guessing; past them a new credential waits (429) and Open WebUI is not asked. The same credential refused again
# counts once (a stale token retried by a client guesses nothing), and a credential accepted within the hour is not
# held up, so guessing from elsewhere does not lock out callers already checked.
FAILURE_WINDOW_SECONDS = 60
FAILURES_PER_CLIENT = 10
FAILURES_OVERALL = 300
# What a browser page of an allowed origin may send and read (Streamable HTTP: POST, GET for the stream, DELETE).
BROWSER_METHODS = "GET, POST, DELETE"
BROWSER_HEADERS = (
    "Authorization, Content-Type, Accept, Last-Event-ID, Mcp-Protocol-Version, Mcp-Session-Id, X-OpenWebUI-Read-Only"
)
BROWSER_EXPOSED = "Mcp-Session-Id, WWW-Authenticate, Retry-After"
PREFLIGHT_MAX_AGE = "600"
_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _well_formed(token: str) -> bool:
    """Visible ASCII only, as an HTTP header sent on to Open WebUI must be (and every real token is)."""
    return all("!" <= char <= "~" for char in token)


class Verdict(NamedTuple):
    outcome: Literal["admitted", "refused", "limited", "unreachable"]
    retry_after: int = 0  # seconds, when limited


class Refusals:
    """Distinct credentials (by hash, never the token) refused in the last minute, each at its latest refusal."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.latest: OrderedDict[str, float] = OrderedDict()  # oldest refusal first

    def add(self, key: str, now: float) -> None:
        self.latest.pop(key, None)
        self.latest[key] = now
        while len(self.latest) > self.limit:
            self.latest.popitem(last=False)

    def wait(self, now: float, window: float) -> float:
        """Seconds until the oldest refusal leaves the window, when the limit is reached; else 0."""
        while self.latest and now - next(iter(self.latest.values())) >= window:
            self.latest.popitem(last=False)
        return next(iter(self.latest.values())) + window - now if len(self.latest) >= self.limit else 0.0


class FailureBudget:
    """Distinct refused credentials in the last minute, per client address and overall."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._window = FAILURE_WINDOW_SECONDS
        self._by_client: dict[str, Refusals] = {}
        self._overall = Refusals(FAILURES_OVERALL)

    def wait(self, client: str, *, overall: bool) -> int:
        """Seconds until `client` may be refused a new credential (0: now). `overall`: all clients' count too."""
        now = self._clock()
        budgets = [self._by_client.get(client, Refusals(FAILURES_PER_CLIENT)), *([self._overall] if overall else [])]
        waits = [wait for budget in budgets if (wait := budget.wait(now, self._window)) > 0]
        return max(1, math.ceil(max(waits))) if waits else 0

    def spend(self, client: str, key: str) -> None:
        """`key` (a credential's hash) was refused to `client` now."""
        now = self._clock()
        budget = self._by_client.pop(client, None) or Refusals(FAILURES_PER_CLIENT)
        budget.add(key, now)
        self._by_client[client] = budget  # last spent, last evicted
        self._overall.add(key, now)
        while len(self._by_client) > REMEMBERED_MAX:
            del self._by_client[next(iter(self._by_client))]


class Admission:
    """Decides whether a bearer token may call the server, remembering verdicts under the token's hash and limiting
    failed checks (`FailureBudget`)."""

    def __init__(self, settings: Settings, app: Callable[[], App], clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._app = app
        self._clock = clock
        self._verdicts: dict[str, tuple[float, bool]] = {}
        self._service = [_digest(token.get_secret_value()) for token in settings.service_tokens]
        self._failures = FailureBudget(clock)

    async def admit(self, token: str, client: str) -> Verdict:
        if not _well_formed(token):
            return Verdict("refused")  # no request can carry it on, and no check is spent
        if self._settings.auth_mode == "service":
            return self._admit_service(token, client)
        key = _digest(token)
        remembered = self._remembered(key)
        if remembered is not None:
            return Verdict("admitted" if remembered else "refused")
        # Open WebUI checks everything else; once a client or everyone failed too often, not even a good token is
        # checked, so a guess cannot be told apart from a miss.
        wait = self._failures.wait(client, overall=True)
        if wait and not self._accepted_lately(key):  # a caller admitted within the hour is not locked out by others
            return Verdict("limited", wait)
        try:
            with acting_as(token):
                await self._app().client.check_credential()
            accepted = True
        except ToolFailure as failure:
            if failure.code not in ("auth", "forbidden"):
                log.warning("could not check a caller's credential with Open WebUI: %s", failure.code)
                return Verdict("unreachable")
            accepted = False
            self._failures.spend(client, key)
        self._verdicts.pop(key, None)
        self._verdicts[key] = (self._clock(), accepted)
        while len(self._verdicts) > REMEMBERED_MAX:
            del self._verdicts[next(iter(self._verdicts))]
        return Verdict("admitted" if accepted else "refused")

    def _admit_service(self, token: str, client: str) -> Verdict:
        # Checked here at no cost, against tokens too long to guess, so a good token is always admitted (every caller
        # may share one address: Open WebUI's container, a proxy); only refusals are limited, per client.
        presented = _digest(token)
        if any(hmac.compare_digest(presented, known) for known in self._service):
            return Verdict("admitted")
        wait = self._failures.wait(client, overall=False)
        if wait:
            return Verdict("limited", wait)
        self._failures.spend(client, presented)
        return Verdict("refused")

    def _accepted_lately(self, key: str) -> bool:
        remembered = self._verdicts.get(key)
        return remembered is not None and remembered[1] and self._clock() - remembered[0] < KNOWN_SECONDS

    def _remembered(self, key: str) -> bool | None:
        remembered = self._verdicts.get(key)
        if remembered is None:
            return None
        at, accepted = remembered
        return accepted if self._clock() - at < (ACCEPTED_SECONDS if accepted else REFUSED_SECONDS) else None


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def _matches(value: str, patterns: Iterable[str]) -> bool:
    """`value` is one of `patterns`, where `name:*` stands for `name` with any port (as the MCP SDK reads them)."""
    return any(value == pattern or (pattern.endswith(":*") and value.startswith(pattern[:-1])) for pattern in patterns)


def _read_only_wish(scope: Scope) -> bool | None:
    """The caller's X-OpenWebUI-Read-Only: the configuration's yes and no words, absent or empty for no; None for
    anything else, which is refused rather than guessed (a typo must not leave writes on)."""
    raw = _header(scope, READ_ONLY_HEADER.encode()).strip().lower()
    if not raw or raw in FALSE_WORDS:
        return False
    return True if raw in TRUE_WORDS else None


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


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return sending


class Gate:
    """In front of `/mcp`: a foreign Host or Origin is refused, a browser's preflight from an allowed origin
    answered, and a request without an admitted credential gets 401 (or 429) before any tool runs; an admitted one
    runs with its credential (caller mode) and its own read-only wish."""

    def __init__(
        self, inner: ASGIApp, settings: Settings, admission: Admission, security: TransportSecuritySettings
    ) -> None:
        self._inner = inner
        self._settings = settings
        self._admission = admission
        self._security = security

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        # Nothing that costs an upstream request happens for a Host or Origin that is not ours.
        if not _matches(_header(scope, b"host"), self._security.allowed_hosts):
            await _send_json(send, 421, {"error": "this Host is not served here"}, [])
            return
        origin = _header(scope, b"origin")
        if origin and not _matches(origin, self._security.allowed_origins):
            await _send_json(send, 403, {"error": "this Origin is not allowed"}, [])
            return
        if origin:
            send = _with_headers(send, _cors(origin))
        if scope.get("method") == "OPTIONS" and origin and _header(scope, b"access-control-request-method"):
            await _send_preflight(send)
            return
        await self._admitted(scope, receive, send)

    async def _admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        read_only = _read_only_wish(scope)
        if read_only is None:
            words = "true, 1, yes, on, or false, 0, no, off"
            await _send_json(send, 400, {"error": f"X-OpenWebUI-Read-Only must be one of {words}"}, [])
            return
        token = _bearer(scope)
        client = (scope.get("client") or ("-", 0))[0]
        verdict = await self._admission.admit(token, client) if token else Verdict("refused")
        if verdict.outcome == "unreachable":
            await _send_json(send, 503, {"error": "Open WebUI is unreachable; try again"}, [(b"retry-after", b"5")])
            return
        if verdict.outcome == "limited":
            wait = str(verdict.retry_after).encode()
            await _send_json(send, 429, {"error": "too many refused credentials; wait"}, [(b"retry-after", wait)])
            return
        if verdict.outcome == "refused":
            what = "an Open WebUI API key or session token" if self._settings.auth_mode == "caller" else "a token"
            challenge = b'Bearer realm="openwebui-rag-mcp", error="invalid_token"' if token else b"Bearer"
            await _send_json(
                send,
                401,
                {"error": f"send Authorization: Bearer with {what} that is accepted"},
                [(b"www-authenticate", challenge)],
            )
            return
        # Service mode: callers share the service account, so its own token tells one caller from another.
        with reading_only(read_only), calling_as(_digest(token) if token else None):
            if self._settings.auth_mode == "caller" and token:
                with acting_as(token):
                    await self._inner(scope, receive, send)
            else:
                await self._inner(scope, receive, send)


def _cors(origin: str) -> list[tuple[bytes, bytes]]:
    """On every answer to a page of an allowed origin, so the page can read it (the 401 challenge too)."""
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", BROWSER_EXPOSED.encode()),
        (b"vary", b"Origin"),
    ]


async def _send_preflight(send: Send) -> None:
    """The browser asks before sending Authorization; it carries no credential, so it is answered without one."""
    headers = [
        (b"access-control-allow-methods", BROWSER_METHODS.encode()),
        (b"access-control-allow-headers", BROWSER_HEADERS.encode()),
        (b"access-control-max-age", PREFLIGHT_MAX_AGE.encode()),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


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


class _NoStream:
    """GET /mcp is 405: a stateless server has nothing to send on a stream of its own (the SDK opened one that stayed
    silent, and with Last-Event-ID answered 500); Streamable HTTP allows a server to refuse it."""

    def __init__(self, inner: ASGIApp) -> None:
        self._inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path", "").rstrip("/") == MCP_PATH:
            await _send_json(
                send, 405, {"error": "this server offers no stream to GET; POST requests"}, [(b"allow", b"POST")]
            )
            return
        await self._inner(scope, receive, send)


def build_app(
    settings: Settings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Starlette:
    """The ASGI application of the HTTP transport (uvicorn runs it; tests may drive it directly)."""
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

    gate = Gate(_NoStream(mcp_app), settings, Admission(settings, current, clock), security)
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


def uvicorn_config(settings: Settings, app: ASGIApp) -> uvicorn.Config:
    """How uvicorn serves `app`: the client address is the connection's, or the `X-Forwarded-For` of a front end in
    OPENWEBUI_MCP_TRUSTED_PROXIES (the failed-credential budget counts per client address)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,  # ours, without query strings or headers
        proxy_headers=True,
        forwarded_allow_ips=list(settings.trusted_proxies),
        lifespan="on",
        # the slowest write: processing, its attach, and as long again to see an unanswered attach end
        timeout_graceful_shutdown=int(settings.process_timeout + 3 * settings.timeout),
        server_header=False,
    )


def serve(settings: Settings) -> None:
    """Run the HTTP transport under uvicorn until SIGINT/SIGTERM; writes in flight are given time to finish."""
    if settings.log_level != "ERROR":
        access_log.setLevel(logging.INFO)
    uvicorn.Server(uvicorn_config(settings, build_app(settings))).run()
