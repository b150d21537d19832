"""The tour of tests/test_secrets_stdio.py (`TOUR`): every tool under faults that echo the Authorization header
back; devtools/faults_doc.py renders it into docs/faults.md."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import faultstub
from tests.faultstub import AUTHORIZATION, FILE, KB, Fault, answer, page

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
KEY = "sk-DISTINCTIVE-7f3a9c2e5b8d41f6a0c3e9b7d2f4a8c1"
MIDDLE = "7f3a9c2e5b8d41f6"
LIMIT = 30  # seconds for any one answer
ECHO = AUTHORIZATION.decode()


def pieces_of_the_key() -> list[str]:
    """The key, its distinctive middle, and every 8-character window of its secret part."""
    secret = KEY.removeprefix("sk-")
    return [KEY, MIDDLE, *(secret[i : i + 8] for i in range(len(secret) - 7))]


@dataclass(frozen=True)
class Stop:
    """One step of the tour: a tool call with a fault armed on one request, and the code expected (None: success)."""

    what: str  # for the document
    tool: str
    args: dict[str, Any]
    code: str | None
    fault: Fault | None = None
    method: str = "GET"
    path: str = ""
    times: int | None = None


LIST = "/api/v1/knowledge/"
QUERY = "/api/v1/retrieval/query/collection"
PADDING = "p" * 285  # details are cut at 300 characters: the key straddles the cut
ADD = {"knowledge_id": KB, "text": "# Pears\n\nPears are green.", "title": "Pears"}
SEARCH = {"query": "pears", "knowledge_ids": [KB]}
TOUR: list[Stop] = [
    Stop("401, key echoed in the JSON detail", "knowledge_list", {}, "auth",
         answer(401, {"detail": f"bad token {ECHO}"}), path=LIST),
    Stop("401, key echoed in a WWW-Authenticate header", "knowledge_list", {}, "auth",
         answer(401, {"detail": "Not authenticated"}, headers={"WWW-Authenticate": f'Bearer error="x" {ECHO}'}),
         path=LIST),
    Stop("403 HTML page echoing the key", "knowledge_files", {"knowledge_id": KB}, "forbidden",
         page(403, f"<html><body>Forbidden for {ECHO}</body></html>"), path=f"/api/v1/knowledge/{KB}/files"),
    Stop("500 HTML traceback echoing the key", "knowledge_search", SEARCH, "upstream_error",
         page(500, f"<html><pre>headers={{'authorization': '{ECHO}'}}</pre></html>"), "POST", QUERY),
    Stop("200 HTML page echoing the key", "knowledge_get_file", {"file_id": FILE}, "unexpected_response",
         page(200, f"<html><body>Signed in as {ECHO}</body></html>"), path=f"/api/v1/files/{FILE}"),
    Stop("422 validation list echoing the key", "knowledge_health", {}, "upstream_error",
         answer(422, {"detail": [{"loc": ["header", "authorization"], "msg": f"bad {ECHO}", "input": ECHO}]}),
         path=LIST),
    Stop("502 JSON echoing the key", "knowledge_create", {"name": "Tour"}, "upstream_unavailable",
         answer(502, {"detail": f"upstream said: {ECHO}"}), "POST", "/api/v1/knowledge/create"),
    Stop("400 echoing the key across the 300-character cut", "knowledge_add", ADD, "upstream_error",
         answer(400, {"detail": f"{PADDING} {ECHO}"}), "POST", "/api/v1/files/"),
    Stop("connection reset", "knowledge_update", {"file_id": FILE, "text": "new", "knowledge_id": KB},
         "upstream_unavailable", faultstub.reset(), "POST", f"/api/v1/files/{FILE}/data/content/update"),
    Stop("429 with Retry-After echoing the key (a write: not retried)", "knowledge_delete",
         {"knowledge_id": KB, "file_id": FILE}, "rate_limited",
         answer(429, {"detail": f"slow down, {ECHO}"}, headers={"Retry-After": "0"}), "POST",
         f"/api/v1/knowledge/{KB}/file/remove"),
    Stop("no answer", "rag_get_file", {"file_id": FILE}, "timeout", faultstub.hang(), path=f"/api/v1/files/{FILE}"),
    Stop("one 503 with Retry-After echoing the key (a read: retried)", "rag_search", SEARCH, None,
         answer(503, {"detail": ECHO}, headers={"Retry-After": "0"}), "POST", QUERY, 1),
    Stop("truncated JSON", "rag_list_knowledge", {}, "unexpected_response", answer(200, b'{"items": [{"id": "'),
         path=LIST),
    Stop("JSON of the wrong shape holding the key", "rag_health", {}, "unexpected_response",
         answer(200, {"items": ECHO}), path=LIST),
    Stop("closed without an answer", "knowledge_files", {"knowledge_id": KB}, "upstream_unavailable",
         faultstub.close(), path=f"/api/v1/knowledge/{KB}/files"),
    Stop("an id with `../`", "knowledge_get_file", {"file_id": "../../api/v1/auths"}, "invalid_argument"),
    Stop("a reserved metadata key", "knowledge_add", {**ADD, "metadata": {"file_hash": "0" * 64}}, "invalid_argument"),
    Stop("404 HTML echoing the key, in an exact search", "knowledge_find", {"knowledge_id": KB, "phrase": "x"},
         "not_found", page(404, f"<html>{ECHO}</html>"), path=f"/api/v1/knowledge/{KB}/files"),
    Stop("500 echoing the key, adding a file", "knowledge_add_file",
         {"knowledge_id": KB, "content_base64": "IyBYCg==", "filename": "x.md"}, "upstream_error",
         answer(500, {"detail": f"disk full near {ECHO}"}), "POST", "/api/v1/files/"),
    Stop("409 echoing the key, renaming a base", "knowledge_rename", {"knowledge_id": KB, "name": "Tour"},
         "conflict", answer(409, {"detail": f"taken by {ECHO}"}), "POST", f"/api/v1/knowledge/{KB}/update"),
    Stop("healthy again", "knowledge_list", {}, None),
    Stop("healthy again", "knowledge_add", ADD, None),
]  # fmt: skip
