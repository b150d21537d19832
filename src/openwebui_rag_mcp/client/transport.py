"""The funnel: one `httpx.AsyncClient` per process and the one place that maps failures.

Every request goes through `_send`, which turns transport errors, HTTP errors and non-JSON answers into
`ToolFailure`s with the codes of errors.py. Nothing else in the package touches httpx exceptions. Also here: the
caller's credential, the release read once per process, and the paging every list shares.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import http.cookiejar
import json
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from openwebui_rag_mcp import __version__, normalize
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument

log = logging.getLogger("openwebui_rag_mcp.client")  # the package's name, for every part of the client

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Far above any real knowledge list (a base with 50,000 documents is 1,667 pages of 30), far below what would exhaust
# the server when a misbehaving upstream claims millions.
MAX_LIST_ITEMS = 50_000
_DETAIL_CHARS = 300
_PAGE_CONCURRENCY = 4
_RETRY_AFTER_MAX = 30.0
# Connections to Open WebUI: in all (httpx's default), and over how many pools (the least busy takes each request).
# httpcore's pool looks at every one of its connections on every request and again when each answer ends (a system
# call for each idle one; known upstream: encode/httpcore#1035), so with 64 calls in flight over HTTP that bookkeeping
# took about a quarter of the server's CPU. In pools of an eighth it took a fraction of that (bench/, the stub with
# 50 ms answers: 7.2 to 8.2 ms of server CPU per call fell to 4.4 to 5.2 ms).
CONNECTIONS = 100
POOLS = 8
_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")
_NOT_FOUND_TEXT = "could not find what you"
_NO_PERMISSION_TEXT = "do not have permission"
_DUPLICATE_TEXT = "duplicate content"

Json = Any  # what json.loads returns; checked by the normalizer at the boundary
T = TypeVar("T")


# The Open WebUI credential of the caller being served (HTTP transport, per-caller mode): set around each request,
# used instead of OPENWEBUI_API_KEY for every upstream request made on its behalf. Never stored beyond the request.
_CALLER: ContextVar[str | None] = ContextVar("openwebui_rag_mcp_caller", default=None)


@contextmanager
def acting_as(token: str) -> Iterator[None]:
    """Send every upstream request made inside this block with `token` as the Bearer credential."""
    reset = _CALLER.set(token)
    try:
        yield
    finally:
        _CALLER.reset(reset)


def caller_token() -> str | None:
    """The credential set by `acting_as` for the current request, if any (for redaction)."""
    return _CALLER.get()


def _needs_tls(settings: Settings) -> bool:
    """Whether TLS can be involved at all. Loading the CA bundle costs tens of milliseconds at start, wasted on a
    plain-HTTP Open WebUI unless a proxy from the environment (possibly an https one) stands in between."""
    if settings.url.startswith("https://"):
        return True
    return any(os.environ.get(name) for name in _PROXY_VARIABLES)


class _Pools(httpx.AsyncBaseTransport):
    """Requests spread over several connection pools (see POOLS): each goes to the pool with the fewest requests in
    flight, the first of those, so one caller at a time keeps reusing the first pool's kept-alive connection (a
    round robin would open a connection, with TLS to a remote Open WebUI, in each pool in turn)."""

    def __init__(self, pools: list[httpx.AsyncBaseTransport]) -> None:
        self._pools = pools
        self._busy = [0] * len(pools)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self._busy.index(min(self._busy))
        self._busy[index] += 1
        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            self._busy[index] -= 1
            raise
        # The connection stays busy until the answer's body is read or given up.
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Counted(response.stream, functools.partial(self._done, index)),
            extensions=response.extensions,
        )

    def _done(self, index: int) -> None:
        self._busy[index] -= 1

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _Counted(httpx.AsyncByteStream):
    """An answer's body that says once when it is closed."""

    def __init__(self, stream: httpx.SyncByteStream | httpx.AsyncByteStream, closed: Callable[[], None]) -> None:
        assert isinstance(stream, httpx.AsyncByteStream)
        self._stream = stream
        self._closed: Callable[[], None] | None = closed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            closed, self._closed = self._closed, None
            if closed is not None:
                closed()


def _pools(settings: Settings) -> _Pools:
    # One TLS context for all (loading the CA bundle is the costly part), and each pool keeps alive as many
    # connections as it may open: httpcore counts all of a pool's connections, not only the idle ones, against its
    # keep-alive limit, and would close every connection that ends while more than that are open. Idle ones still
    # close after 4 s, below the 5 s keep-alive of Open WebUI's uvicorn, so we do not reuse one it is closing.
    context = httpx.create_ssl_context(verify=_needs_tls(settings) and settings.verify_tls, trust_env=True)
    share = math.ceil(CONNECTIONS / POOLS)
    limits = httpx.Limits(max_connections=share, max_keepalive_connections=share, keepalive_expiry=4.0)
    return _Pools([httpx.AsyncHTTPTransport(verify=context, trust_env=True, limits=limits) for _ in range(POOLS)])


def segment(value: str) -> str:
    """A path segment, always encoded, so no id can change the path it is placed in.

    The tools validate ids first; this is defence in depth. `quote` leaves "." and ".." alone, and an empty
    segment would land on another route, so those are refused here too.
    """
    if value in ("", ".", ".."):
        raise invalid_argument(f"{value!r} cannot be an Open WebUI id")
    return quote(value, safe="")


class ClientBase:
    """The funnel, the credential, the release and paging that every API area of `OpenWebUIClient` builds on."""

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_list_items: int = MAX_LIST_ITEMS,
    ) -> None:
        self._settings = settings
        self._max_response_bytes = max_response_bytes
        self._max_list_items = max_list_items
        self._http = httpx.AsyncClient(
            base_url=settings.url + "/",
            headers={
                "Accept": "application/json",
                "User-Agent": f"openwebui-rag-mcp/{__version__}",
            },
            timeout=httpx.Timeout(settings.timeout, connect=min(10.0, settings.timeout)),
            verify=_needs_tls(settings) and settings.verify_tls,  # for a proxy from the environment
            transport=transport or _pools(settings),  # the connections' limits are the pools' (`_pools`)
            trust_env=True,
        )
        # No cookie is ever kept: some answers set Open WebUI's session cookie (GET /api/v1/auths/ mints one for the
        # key it was sent with), and one client serves every caller. (httpx copies a jar given to it, not its policy.)
        self._http.cookies.jar.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self._release: Release | None = None
        self._release_lock = asyncio.Lock()
        # When a connection to Open WebUI was last refused (seconds since the epoch): it was not running then, and a
        # restart drops the uploads it was processing (`giveup`).
        self.unreachable_at: float | None = None

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- the funnel -------------------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        json_body: Json = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
        data: Mapping[str, str] | None = None,
        read: bool | None = None,
        credential_optional: bool = False,
    ) -> Json:
        """The parsed JSON body of a 2xx answer, or a `ToolFailure`.

        A read (every GET, and retrieval queries) told to come back later by a 429 or 503 with Retry-After is
        tried once more when the wait fits in the time budget. Writes are never retried: Open WebUI may have
        applied them.
        """
        retry = (method == "GET") if read is None else read
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.timeout

        def attempt() -> Awaitable[Json]:
            return self._send_once(
                method,
                path,
                params=params,
                json_body=json_body,
                files=files,
                data=data,
                read=retry,
                deadline=deadline,
                credential_optional=credential_optional,
            )

        try:
            return await attempt()
        except ToolFailure as failure:
            wait = failure.retry_after
            left = deadline - loop.time()
            # The wait and a second attempt must fit in what is left of OPENWEBUI_TIMEOUT (one read never takes
            # longer than that in all): the wait may use at most half of it.
            if not retry or wait is None or wait > min(_RETRY_AFTER_MAX, left / 2):
                raise
            log.info("%s %s: retrying after %.1f s", method, path, wait)
        await asyncio.sleep(wait)
        return await attempt()

    async def _send_once(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None,
        json_body: Json,
        files: Mapping[str, tuple[str, bytes, str]] | None,
        data: Mapping[str, str] | None,
        read: bool,
        deadline: float,
        credential_optional: bool = False,
    ) -> Json:
        where = f"{method} /{path}"
        token = self._credential()
        if not token and not credential_optional:
            raise ToolFailure(
                "auth",
                f"{where}: no Open WebUI credential: this request carried none and OPENWEBUI_API_KEY is not set",
                request_sent=False,
            )
        request = self._http.build_request(
            method,
            path,
            params=params,
            json=json_body,
            files=files,
            data=data,
            headers={"Authorization": f"Bearer {token}"} if token else None,
        )
        try:
            # The whole exchange, body included, must fit in the timeout: a slow-drip body cannot hang a tool.
            async with asyncio.timeout_at(deadline):
                response = await self._http.send(request, stream=True)
                try:
                    body = await self._read_capped(response, where)
                finally:
                    await response.aclose()
        except ToolFailure:
            raise
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # No connection, so the request certainly never reached Open WebUI.
            if isinstance(exc, httpx.ConnectError):
                self.unreachable_at = time.time()
            raise ToolFailure(
                "upstream_unavailable",
                f"{where}: could not connect to Open WebUI at {self._settings.url} "
                f"({type(exc).__name__}: {self._redact(str(exc)) or 'no detail'})",
                retryable=True,
                request_sent=False,
            ) from None
        except (TimeoutError, httpx.TimeoutException):
            raise ToolFailure(
                "timeout",
                f"{where}: Open WebUI did not answer within {self._settings.timeout:g} s (OPENWEBUI_TIMEOUT)",
                retryable=True,
            ) from None
        except httpx.HTTPError as exc:
            raise ToolFailure(
                "upstream_unavailable",
                f"{where}: the connection to Open WebUI broke "
                f"({type(exc).__name__}: {self._redact(str(exc)) or 'no detail'})",
                retryable=True,
                # A kept-alive connection can die just as it is reused: a read may go again at once (writes never).
                retry_after=0.0,
            ) from None

        if response.status_code >= 400:
            raise self._http_failure(where, response, body, read=read)
        if response.is_redirect:
            location = self._redact(response.headers.get("location", "")) or "nowhere"
            raise ToolFailure(
                "unexpected_response",
                f"{where}: Open WebUI redirected (HTTP {response.status_code}) to {location[:_DETAIL_CHARS]}; set "
                "OPENWEBUI_URL to the address it redirects to (for example https:// instead of http://)",
                response.status_code,
            )
        content_type = response.headers.get("content-type", "")
        if "json" not in content_type:
            raise normalize.unexpected(f"{where} gave {content_type or 'no content type'}, not JSON")
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            raise normalize.unexpected(f"{where} gave malformed JSON") from None

    async def _read_capped(self, response: httpx.Response, where: str) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_response_bytes:
            raise self._too_large(where)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._max_response_bytes:
                raise self._too_large(where)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, where: str) -> ToolFailure:
        return ToolFailure(
            "unexpected_response",
            f"{where}: the answer is larger than {self._max_response_bytes:,} bytes; refused",
        )

    def _credential(self) -> str:
        return _CALLER.get() or self._settings.api_key.get_secret_value()

    def credential_key(self) -> str:
        """A stable name for the current credential that reveals nothing of it (for per-caller caches)."""
        return hashlib.sha256(self._credential().encode()).hexdigest()

    def _redact(self, text: str) -> str:
        for secret in (self._settings.api_key.get_secret_value(), _CALLER.get()):
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    def quote(self, text: str) -> str:
        """Upstream text fit to quote in a message: the key redacted, whitespace folded, length capped."""
        return _detail(self._redact(text))

    def _http_failure(self, where: str, response: httpx.Response, body: bytes, *, read: bool) -> ToolFailure:
        status = response.status_code
        detail = _detail(self._redact(body.decode("utf-8", "replace")))
        lowered = detail.lower()
        said = f" ({detail})" if detail else ""
        if _DUPLICATE_TEXT in lowered:
            return ToolFailure("duplicate_content", f"{where}: Open WebUI refused duplicate content{said}", status)
        if _NOT_FOUND_TEXT in lowered or status == 404:
            return ToolFailure("not_found", f"{where}: not found, or not visible to this API key{said}", status)
        if _NO_PERMISSION_TEXT in lowered:  # ACCESS_PROHIBITED comes as 400, 401 or 403 depending on the route
            return ToolFailure("forbidden", f"{where}: this API key may not do that{said}", status)
        if status == 401 and detail == "401 Unauthorized" and not read:
            # Open WebUI says this both to a malformed or expired token and to a valid key whose user lacks a
            # permission (creating bases needs Workspace > Knowledge); on a write both are possible.
            return ToolFailure(
                "forbidden",
                f"{where}: Open WebUI refused this action (HTTP 401 Unauthorized): either the key's user lacks the "
                "permission (for knowledge_create: Workspace > Knowledge) or the token is expired or malformed",
                status,
            )
        if status == 401 or (status == 403 and "authenticated" in lowered) or "api key is not enabled" in lowered:
            return ToolFailure(
                "auth",
                f"{where}: Open WebUI rejected the API key (HTTP {status}){said}: it is wrong, expired or revoked. "
                "Check OPENWEBUI_API_KEY and that API keys are enabled in Open WebUI (Admin Settings > General)",
                status,
            )
        if status == 403:
            return ToolFailure("forbidden", f"{where}: this API key may not do that{said}", status)
        if status == 409:
            return ToolFailure("conflict", f"{where}: Open WebUI refused the change{said}", status)
        if status == 413:
            return ToolFailure("too_large", f"{where}: Open WebUI refused the size of the request{said}", status)
        retry_after = _retry_after(response.headers.get("retry-after"))
        if status == 429:
            return ToolFailure(
                "rate_limited", f"{where}: rate limited by Open WebUI{said}", status, True, retry_after=retry_after
            )
        if status in (502, 503, 504):
            return ToolFailure(
                "upstream_unavailable",
                f"{where}: Open WebUI is unavailable (HTTP {status}){said}",
                status,
                True,
                retry_after=retry_after if status == 503 else None,
            )
        return ToolFailure("upstream_error", f"{where}: Open WebUI answered HTTP {status}{said}", status)

    # -- release awareness ------------------------------------------------------------------------------------

    async def release(self, *, stale: Release | None = None) -> Release:
        """The Open WebUI release, read once per process and again when a caller finds it `stale`.

        A failed read is retried on the next call. Passing the release an answer did not fit makes this read the
        version again (once, however many callers ask at the same time): Open WebUI may have been upgraded under a
        running server.
        """
        if self._release is not None and self._release is not stale:
            return self._release
        async with self._release_lock:
            if self._release is None or self._release is stale:
                try:
                    # Open WebUI answers it without a credential (the HTTP transport reads it before any caller).
                    body = await self._send("GET", "api/version", credential_optional=True)
                except ToolFailure as failure:
                    if failure.code == "not_found":
                        raise ToolFailure(
                            "unexpected_response",
                            f"GET /api/version: no Open WebUI API at {self._settings.url} (HTTP 404); check "
                            "OPENWEBUI_URL and its path prefix: it must be the address of Open WebUI's start page",
                            failure.http_status,
                        ) from None
                    raise
                version = body.get("version") if isinstance(body, dict) else None
                if not isinstance(version, str):
                    raise normalize.unexpected("GET /api/version without a version")
                previous = self._release
                self._release = Release.parse(version)
                if previous is not None and previous.version != version:
                    log.warning("Open WebUI changed from %s to %s under this server", previous.version, version)
                log.info("Open WebUI %s at %s", version, self._settings.url)
            return self._release

    async def warm_up(self) -> None:
        """Read the release early so the first tool call is fast; an unreachable Open WebUI is only a warning."""
        try:
            await self.release()
        except ToolFailure as failure:
            log.warning("Open WebUI is not reachable yet (%s); will retry on the next call", failure.message)
        except Exception:  # never an unretrieved task exception; the first tool call will meet the problem again
            log.exception("reading Open WebUI's version failed; will retry on the next call")

    def _release_stale(self, release: Release) -> None:
        """Forget a release an answer showed to be wrong; the next call reads the version again."""
        if self._release is release:
            self._release = None

    # -- paging and per-release reads -------------------------------------------------------------------------

    async def _all_pages(
        self, path: str, what: str, first_answer: Json = None, params: Mapping[str, str] | None = None
    ) -> tuple[list[Mapping[str, Any]], int | None]:
        """Every item of a paged list, or a failure: never a silently short list.

        Page 1 tells the page size and the total. The other pages are read by a few workers at a time, never all at
        once, and never more than `MAX_LIST_ITEMS` allow, whatever `total` claims; an empty page ends the list. A
        list that comes out shorter than its total (items deleted while we read) is read once more, then refused.
        """
        for attempt in (1, 2):
            body = first_answer if attempt == 1 and first_answer is not None else None
            if body is None:
                body = await self._send("GET", path, params={**(params or {}), "page": 1})
            first, total = normalize.page(body, what)
            if total is None or total <= len(first):
                return first, total if total is not None else len(first)
            if not first:
                raise normalize.unexpected(f"{what}: an empty first page of {total} items")
            if total > self._max_list_items:
                raise ToolFailure(
                    "unexpected_response",
                    f"GET /{path}: Open WebUI reports {total:,} items, more than this server reads in one list "
                    f"({self._max_list_items:,}); refused rather than answer with part of it",
                )
            items = await self._rest_of_pages(path, what, first, math.ceil(total / len(first)), params or {})
            if len(items) >= total:
                return items, total
            log.info(
                "GET /%s: %d of %d items; the list changed while it was read, reading it again", path, len(items), total
            )
        raise ToolFailure(
            "unexpected_response",
            f"GET /{path}: Open WebUI listed {len(items)} of the {total} items it reports, twice; refused rather than "
            "answer with part of the list",
        )

    async def _rest_of_pages(
        self, path: str, what: str, first: list[Mapping[str, Any]], pages: int, params: Mapping[str, str]
    ) -> list[Mapping[str, Any]]:
        """Pages 2..`pages` read by `_PAGE_CONCURRENCY` workers in page order, merged without duplicates."""
        found: dict[int, list[Mapping[str, Any]]] = {1: first}
        next_page = 2
        last_page = pages

        async def worker() -> None:
            nonlocal next_page, last_page
            while next_page <= last_page:
                number = next_page
                next_page += 1
                try:
                    items, _ = normalize.page(await self._send("GET", path, params={**params, "page": number}), what)
                except ToolFailure:
                    last_page = 0  # the other workers stop after their current page
                    raise
                if not items:
                    last_page = min(last_page, number - 1)  # past the end: no need to ask for later pages
                found[number] = items

        # gather, not a TaskGroup: on Python 3.11 a TaskGroup whose child fails while it waits leaves the calling task
        # with a cancellation request it never withdraws, which the SDK's cancel scopes then act on.
        outcomes = await asyncio.gather(
            *(worker() for _ in range(min(_PAGE_CONCURRENCY, pages - 1))), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        seen: set[object] = set()
        merged: list[Mapping[str, Any]] = []
        for number in sorted(found):
            for item in found[number]:
                if item.get("id") not in seen:  # an item can move between pages while we read them
                    seen.add(item.get("id"))
                    merged.append(item)
        return merged

    async def _per_release(self, read: Callable[[Release], Awaitable[T]]) -> T:
        """`read` with the release's endpoints; if the answer does not fit that release, read the version again
        and, when it changed, try once more with the new one."""
        release = await self.release()
        try:
            return await read(release)
        except ToolFailure as failure:
            if failure.code != "unexpected_response":
                raise
            fresh = await self.release(stale=release)
            if fresh.version == release.version:
                raise
        return await read(fresh)


def _object(body: Json, what: str) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise normalize.unexpected(what)
    return body


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _detail(body: str) -> str:
    """Open WebUI's error text (`{"detail": ...}`), shortened; the body's start when it is not JSON."""
    text = body[:4096]
    try:
        parsed = json.loads(body) if len(body) < 65536 else None
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and "detail" in parsed:
        detail = parsed["detail"]
        if isinstance(detail, list):  # FastAPI validation errors
            text = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
        else:
            text = str(detail)
    elif text.lstrip().startswith("<"):
        text = "an HTML page"
    text = " ".join(text.split())
    while len(text) > 5 and text[:3].isdigit() and text[3:5] == ": ":  # "400: 400: Duplicate ..." from nesting
        text = text[5:]
    return text[:_DETAIL_CHARS] + ("..." if len(text) > _DETAIL_CHARS else "")
