"""The API key never leaves the process, whatever Open WebUI does: a fault tour over real stdio at DEBUG.

The console script runs as a subprocess speaking raw newline-delimited JSON-RPC, against the loopback fault stub of
tests/faultstub.py, with a distinctive key and OPENWEBUI_LOG_LEVEL=DEBUG (the chattiest it gets). The tour calls
every tool under faults, several of which echo the Authorization header back: in a JSON error detail, in a FastAPI
validation list, in HTML error pages, in a 200 HTML page, past the point where error details are cut. Then every
byte the process wrote is scanned: stdout must be JSON-RPC 2.0 messages only, and neither stdout nor stderr may hold
the key or any distinctive piece of it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import faultstub
from tests.faultstub import AUTHORIZATION, FILE, KB, Fault, FaultStub, Lane, answer, page
from tests.rawstdio import RawStdio, path_only_env

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


@pytest.fixture
def stub() -> Iterator[FaultStub]:
    with faultstub.running() as running:
        yield running


def test_the_key_never_leaves_the_process(stub: FaultStub, tmp_path: Path) -> None:
    assert SCRIPT.exists(), f"console script not installed next to {sys.executable}"
    lane: Lane = stub.lane("tour")
    env = {
        "OPENWEBUI_URL": stub.url_of("tour"),
        "OPENWEBUI_API_KEY": KEY,
        "OPENWEBUI_LOG_LEVEL": "DEBUG",
        "OPENWEBUI_TIMEOUT": "5",  # only the hang reaches it (1 s turned healthy answers into timeouts under load)
        "PYTHONUNBUFFERED": "1",
    }
    stderr_path = tmp_path / "stderr.bin"
    with stderr_path.open("wb") as stderr:
        server = RawStdio([str(SCRIPT)], path_only_env(env), stderr, limit=LIMIT)
        try:
            init = server.initialize("tour")
            assert init["serverInfo"]["name"] == "openwebui-rag-mcp"
            assert len(server.request("tools/list", {})["tools"]) == 16

            for stop in TOUR:
                lane.clear()
                if stop.fault is not None:
                    lane.fail(stop.fault, method=stop.method, path=stop.path, times=stop.times)
                result = server.call(stop.tool, stop.args)
                structured = result["structuredContent"]
                assert json.loads(result["content"][0]["text"]) == structured
                if stop.code is None:
                    assert result["isError"] is False, structured
                else:
                    assert result["isError"] is True, structured
                    assert structured["code"] == stop.code, (stop.tool, structured)

            lane.clear()
            unknown = server.call("knowledge_nuke", {})
            assert unknown["isError"] is True

            # Python's JSON reader takes NaN and 1e400 (infinity), which JSON cannot carry: refused, not uploaded.
            for request_id, number in ((9001, "NaN"), (9002, "1e400")):
                server.send_raw(
                    f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {{"name": '
                    f'"knowledge_add", "arguments": {{"knowledge_id": "{KB}", "text": "x", "title": "t", '
                    f'"metadata": {{"a": {number}}}}}}}}}'
                )
                refused = server.answer_to(request_id)["result"]["structuredContent"]
                assert (refused["code"], refused["outcome"]) == ("invalid_argument", "not_applied"), refused
                assert "metadata must be plain JSON" in refused["message"]
        finally:
            code = server.close()
    assert code == 0

    assert {seen.authorization for seen in lane.seen} == {f"Bearer {KEY}"}  # the key did reach the stub
    stdout = b"".join(server.lines).decode()
    log = stderr_path.read_bytes().decode("utf-8", "replace")
    assert "DEBUG" in log  # the server logged as much as it can
    for piece in pieces_of_the_key():
        assert piece not in stdout, f"{piece!r} on stdout"
        assert piece not in log, f"{piece!r} on stderr"
    assert len(server.lines) >= len(TOUR) + 4
    for line in server.lines:
        assert line.endswith(b"\n")
        message = json.loads(line)
        assert isinstance(message, dict)
        assert message.get("jsonrpc") == "2.0", message
        assert "id" in message or "method" in message, message
        assert ("result" in message) != ("error" in message) or "method" in message, message
