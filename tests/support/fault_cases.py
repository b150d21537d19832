"""The fault table: each tool and the request of it a fault hits (`TOOLS`), and each fault with what every tool
must answer (`FAULT_CASES`). tests/test_faults.py runs it; devtools/faults_doc.py renders it into docs/faults.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openwebui_rag_mcp.client import MAX_RESPONSE_BYTES
from tests import faultstub
from tests.faultstub import (
    AUTHORIZATION,
    FILE,
    KB,
    KB_THIRD,
    NOT_FOUND_TEXT,
    Fault,
    answer,
    page,
)
from tests.support.faults import TIMEOUT

# OPENWEBUI_TIMEOUT of every case not about a timeout (those take TIMEOUT): only a hang may run into it, so a slow
# machine never turns a fault's answer into a timeout. What those cases check is the answer, never how fast it came.
HANG_ONLY = 120.0


# -- the tools and the request of each that a fault hits ----------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    tool: str
    args: dict[str, Any]
    method: str
    path: str  # the request the fault is armed on
    stage: str | None = None  # the write stage that request belongs to; None for a read tool
    file_id: str | None = None  # the file a failed write names

    @property
    def write(self) -> bool:
        return self.stage is not None


TOOLS: list[ToolCall] = [
    ToolCall("knowledge_list", {}, "GET", "/api/v1/knowledge/"),
    ToolCall("knowledge_files", {"knowledge_id": KB}, "GET", f"/api/v1/knowledge/{KB}/files"),
    ToolCall(
        "knowledge_search", {"query": "apples", "knowledge_ids": [KB]}, "POST", "/api/v1/retrieval/query/collection"
    ),
    ToolCall("knowledge_get_file", {"file_id": FILE}, "GET", f"/api/v1/files/{FILE}"),
    ToolCall("knowledge_find", {"knowledge_id": KB, "phrase": "Apples"}, "GET", f"/api/v1/knowledge/{KB}/files"),
    ToolCall("knowledge_health", {}, "GET", "/api/v1/knowledge/"),
    ToolCall(
        "knowledge_create", {"name": "Faults", "description": "made by the fault suite"}, "POST",
        "/api/v1/knowledge/create", "create",
    ),
    ToolCall(
        "knowledge_add", {"knowledge_id": KB, "text": "# Pears\n\nPears are green.", "title": "Груши"}, "POST",
        "/api/v1/files/", "upload",
    ),
    ToolCall(
        "knowledge_add_file",
        {"knowledge_id": KB, "content_base64": "IyBQbHVtcwoKUGx1bXMgYXJlIHB1cnBsZS4K", "filename": "plums.md"},
        "POST", "/api/v1/files/", "upload",
    ),
    ToolCall(
        "knowledge_update", {"file_id": FILE, "text": "# Apples\n\nApples are green now.", "knowledge_id": KB},
        "POST", f"/api/v1/files/{FILE}/data/content/update", "update", FILE,
    ),
    ToolCall(
        "knowledge_delete", {"knowledge_id": KB, "file_id": FILE}, "POST", f"/api/v1/knowledge/{KB}/file/remove",
        "unlink", FILE,
    ),
    ToolCall(
        "knowledge_rename", {"knowledge_id": KB, "name": "Фрукты и ягоды"}, "POST", f"/api/v1/knowledge/{KB}/update",
        "rename",
    ),
    ToolCall(
        "knowledge_delete_base", {"knowledge_id": KB_THIRD, "confirm": "Reports"}, "DELETE",
        f"/api/v1/knowledge/{KB_THIRD}/delete", "delete",
    ),
]  # fmt: skip


# -- the fault table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the agent gets. `code` None: the call succeeds."""

    code: str | None
    sees: str = ""  # a piece of the error message
    http_status: int | None = None
    retryable: bool = False
    certain: bool = False  # a failed write certainly changed nothing (refused with a 4xx, or never sent)
    note: str = ""  # why, for the document

    @property
    def write_outcome(self) -> str:
        return "not_applied" if self.certain else "partial_or_unknown"


OK = Outcome(None)


@dataclass(frozen=True)
class FaultCase:
    name: str
    done: str  # what the upstream did, for the document
    outcome: Outcome
    fault: Fault | None = None  # armed on each tool's request, over respx and (when it can) the loopback stub
    url: str | None = None  # "refused", "dns" or "tls": the whole OPENWEBUI_URL is broken (real transport)
    times: int | None = None  # how many faulty answers before the upstream recovers; None: every one
    read_sends: int = 1  # how many times a read tool's request is sent (writes: always once)
    reads: Outcome | None = None  # the outcome of read tools, when it differs from the writes'
    per_tool: Mapping[str, Outcome] = field(default_factory=dict)
    serial: bool = False  # run the tools one after another (a big answer each)
    timeout: float = HANG_ONLY  # OPENWEBUI_TIMEOUT of the servers the case runs on

    @property
    def transports(self) -> tuple[str, ...]:
        found: list[str] = []
        if self.fault is not None:
            found.append("respx")
            if self.fault.over_http:
                found.append("stub")
        if self.url is not None:
            found.append("url")
        return tuple(found)

    def expected(self, call: ToolCall) -> Outcome:
        if call.tool in self.per_tool:
            return self.per_tool[call.tool]
        if not call.write and self.reads is not None:
            return self.reads
        return self.outcome

    def sends(self, call: ToolCall) -> int:
        return 1 if call.write else self.read_sends


def fails(status: int, detail: object, **headers: str) -> Fault:
    return answer(status, {"detail": detail}, headers=headers)


UNREACHABLE = Outcome("upstream_unavailable", "could not connect to Open WebUI", retryable=True, certain=True)
BROKE = Outcome("upstream_unavailable", "the connection to Open WebUI broke", retryable=True)
TIMED_OUT = Outcome("timeout", f"did not answer within {TIMEOUT} s (OPENWEBUI_TIMEOUT)", retryable=True)
AUTH = Outcome("auth", "rejected the API key", 401, certain=True)
UNREADABLE = Outcome("unexpected_response", "other than the expected JSON")
RATE_LIMITED = Outcome("rate_limited", "rate limited by Open WebUI", 429, retryable=True, certain=True)
UNAVAILABLE_503 = Outcome("upstream_unavailable", "Open WebUI is unavailable (HTTP 503)", 503, retryable=True)
RETRIED_OK = Outcome(None, note="succeeds after one retry")
TOO_BIG = Outcome("unexpected_response", f"larger than {MAX_RESPONSE_BYTES:,} bytes")
STILL_LISTED = Outcome(
    "upstream_error",
    "still lists file",
    note="the answer is not used; the check that follows finds the file still in the base",
)
ANSWER_UNUSED = Outcome(None, note="the answer's fields are not used")
PAST = "Wed, 21 Oct 2015 07:28:00 GMT"
HTML_ECHO = "<html><body><h1>Denied</h1><p>credentials: " + AUTHORIZATION.decode() + "</p></body></html>"

FAULT_CASES: list[FaultCase] = [
    # -- no connection, a broken one, no answer in time --
    FaultCase(
        "connection refused", "nothing listens on the port (respx: httpx.ConnectError)", UNREACHABLE,
        fault=faultstub.refuse(), url="refused",
    ),
    FaultCase(
        "name resolution failure",
        "OPENWEBUI_URL names a `.invalid` host whose first label is over 63 characters: resolution fails at once, "
        "with no DNS query to wait for",
        UNREACHABLE, url="dns",
    ),
    FaultCase("TLS failure", "https:// to the plain-HTTP stub (no TLS handshake)", UNREACHABLE, url="tls"),
    FaultCase("connect timeout", "respx: httpx.ConnectTimeout", UNREACHABLE, fault=faultstub.connect_timeout()),
    # A broken connection may be a kept-alive one closing as it is reused: a read goes once more at once.
    FaultCase(
        "closed without an answer", "reads the request, closes the connection (respx: RemoteProtocolError)", BROKE,
        fault=faultstub.close(), read_sends=2,
    ),
    FaultCase(
        "connection reset", "reads the request, resets the connection with a TCP RST (respx: ReadError)", BROKE,
        fault=faultstub.reset(), read_sends=2,
    ),
    FaultCase(
        "connection reset once", "the first request's connection is reset, the next is answered", BROKE,
        fault=faultstub.reset(), times=1, read_sends=2, reads=RETRIED_OK,
    ),
    FaultCase(
        "body cut short", "Content-Length promises 1000 bytes more than are sent, then closes", BROKE,
        fault=faultstub.short(), read_sends=2,
    ),
    FaultCase(
        "read timeout", "reads the request and never answers (respx: httpx.ReadTimeout)", TIMED_OUT,
        fault=faultstub.hang(), timeout=TIMEOUT,
    ),
    FaultCase(
        "slow drip", "sends the headers, then the body one byte per second", TIMED_OUT, fault=faultstub.drip(),
        timeout=TIMEOUT,
    ),
    # -- HTTP errors --
    FaultCase(
        "HTTP 401", "401 with Open WebUI's invalid-token detail", AUTH,
        fault=fails(401, "Your session has expired or the token is invalid. Please sign in again."),
    ),
    FaultCase(
        "HTTP 401 echoing the key", "401 whose detail repeats the Authorization header", AUTH,
        fault=fails(401, f"invalid token: {AUTHORIZATION.decode()}"),
    ),
    FaultCase(
        "HTTP 403", "403 ACCESS_PROHIBITED",
        Outcome("forbidden", "this API key may not do that", 403, certain=True),
        fault=fails(403, "You do not have permission to access this resource. Please contact your administrator."),
    ),
    FaultCase(
        "HTTP 403 HTML page echoing the key", "403 from a proxy: an HTML page repeating the Authorization header",
        Outcome("forbidden", "an HTML page", 403, certain=True), fault=page(403, HTML_ECHO),
    ),
    FaultCase(
        "HTTP 404", "404 NOT_FOUND",
        Outcome("not_found", "not found, or not visible to this API key", 404, certain=True),
        fault=fails(404, NOT_FOUND_TEXT),
    ),
    FaultCase(
        "HTTP 409", "409", Outcome("conflict", "Open WebUI refused the change", 409, certain=True),
        fault=fails(409, "Conflict"),
    ),
    FaultCase(
        "HTTP 413", "413 from a proxy's body limit",
        Outcome("too_large", "refused the size of the request", 413, certain=True),
        fault=fails(413, "Request Entity Too Large"),
    ),
    FaultCase(
        "HTTP 422", "422 with FastAPI's validation list",
        Outcome("upstream_error", "answered HTTP 422 (Field required)", 422, certain=True),
        fault=fails(422, [{"type": "missing", "loc": ["body", "file_id"], "msg": "Field required", "input": None}]),
    ),
    FaultCase("HTTP 429", "429 without Retry-After", RATE_LIMITED, fault=fails(429, "Too Many Requests")),
    FaultCase(
        "HTTP 429, Retry-After 0, then 200", "one 429 with Retry-After: 0, then healthy answers", RATE_LIMITED,
        fault=fails(429, "Too Many Requests", **{"Retry-After": "0"}), times=1, read_sends=2, reads=RETRIED_OK,
    ),
    FaultCase(
        "HTTP 429 with Retry-After 0, always", "429 with Retry-After: 0 on every answer", RATE_LIMITED,
        fault=fails(429, "Too Many Requests", **{"Retry-After": "0"}), read_sends=2,
    ),
    FaultCase(
        "HTTP 429, Retry-After as a past date, then 200", f"one 429 with Retry-After: {PAST}, then healthy answers",
        RATE_LIMITED, fault=fails(429, "Too Many Requests", **{"Retry-After": PAST}), times=1, read_sends=2,
        reads=RETRIED_OK,
    ),
    FaultCase(
        "HTTP 500", "500", Outcome("upstream_error", "Open WebUI answered HTTP 500 (Internal Server Error)", 500),
        fault=fails(500, "Internal Server Error"),
    ),
    FaultCase(
        "HTTP 500 HTML page echoing the key", "500 as an HTML page repeating the Authorization header",
        Outcome("upstream_error", "answered HTTP 500 (an HTML page)", 500), fault=page(500, HTML_ECHO),
    ),
    FaultCase(
        "HTTP 502", "502 from a reverse proxy, as an HTML page",
        Outcome("upstream_unavailable", "Open WebUI is unavailable (HTTP 502)", 502, retryable=True),
        fault=page(502, "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"),
    ),
    FaultCase("HTTP 503", "503 without Retry-After", UNAVAILABLE_503, fault=fails(503, "Service Unavailable")),
    FaultCase(
        "HTTP 503, Retry-After 0, then 200", "one 503 with Retry-After: 0, then healthy answers", UNAVAILABLE_503,
        fault=fails(503, "Service Unavailable", **{"Retry-After": "0"}), times=1, read_sends=2, reads=RETRIED_OK,
    ),
    FaultCase(
        "HTTP 503 with Retry-After 0, always", "503 with Retry-After: 0 on every answer", UNAVAILABLE_503,
        fault=fails(503, "Service Unavailable", **{"Retry-After": "0"}), read_sends=2,
    ),
    FaultCase(
        "HTTP 503 with Retry-After beyond the budget", "503 with Retry-After: 3600 (more than OPENWEBUI_TIMEOUT / 2)",
        UNAVAILABLE_503, fault=fails(503, "Service Unavailable", **{"Retry-After": "3600"}),
    ),
    # -- 200 answers that are not the promised JSON --
    FaultCase(
        "HTML page with 200", "200 text/html (a login page, a wrong OPENWEBUI_URL)",
        Outcome("unexpected_response", "not JSON"),
        fault=page(200, "<!doctype html><html><head><title>Open WebUI</title></head><body></body></html>"),
    ),
    FaultCase(
        "HTML page with 200 echoing the key", "200 text/html repeating the Authorization header",
        Outcome("unexpected_response", "not JSON"), fault=page(200, HTML_ECHO),
    ),
    FaultCase(
        "truncated JSON", "200 application/json whose body stops half-way",
        Outcome("unexpected_response", "malformed JSON"), fault=answer(200, b'{"items": [{"id": "c0ffee00-11'),
    ),
    FaultCase(
        "empty body", "200 application/json with no body", Outcome("unexpected_response", "malformed JSON"),
        fault=answer(200, b""),
    ),
    FaultCase(
        'JSON of the wrong shape: {"items": "nope"}', "200 with an object of the wrong shape", UNREADABLE,
        fault=answer(200, {"items": "nope"}),
        per_tool={"knowledge_update": ANSWER_UNUSED, "knowledge_delete": STILL_LISTED},
    ),
    FaultCase(
        "JSON list where an object is expected", '200 with ["nope"]', UNREADABLE, fault=answer(200, ["nope"]),
        per_tool={"knowledge_delete": STILL_LISTED},
    ),
    FaultCase(
        "300 MB answer", "200 JSON of `[` and 300 MB of zeros, streamed lazily without Content-Length", TOO_BIG,
        fault=faultstub.huge(), serial=True,
    ),
    FaultCase(
        "300 MB answer announced", "200 with Content-Length: 314572800 (refused before reading the body)", TOO_BIG,
        fault=faultstub.huge(declare_length=True),
    ),
]  # fmt: skip
