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
from pathlib import Path

import pytest

from tests import faultstub
from tests.faultstub import KB, FaultStub, Lane
from tests.rawstdio import RawStdio, path_only_env
from tests.support.secrets_tour import KEY, LIMIT, SCRIPT, TOUR, pieces_of_the_key


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
