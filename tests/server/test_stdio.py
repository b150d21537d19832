"""stdin and stdout served on the event loop (`server/stdio.py`): through real pipes, in child processes. A small
program echoes every message back through `stdio_streams`, and the console script answers requests longer than what
is read ahead; stdin that is no pipe (a file, a terminal) keeps the SDK's way."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from openwebui_rag_mcp.server.stdio import READ_AHEAD, _is_pipe_or_socket
from openwebui_rag_mcp.tools import QUERY_MAX_CHARS
from tests.conftest import API_KEY, free_port
from tests.rawstdio import RawStdio, path_only_env

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
LIMIT = 30  # seconds for any one child process

# Echoes each message it reads; writes to fd 1 and from a child while serving, and once more after.
ECHO = textwrap.dedent(
    """
    import os, sys
    import anyio
    from openwebui_rag_mcp.server.stdio import stdio_streams

    async def main():
        async with stdio_streams() as (read, write):
            print("a stray print", flush=True)
            os.system("echo from a child")
            async with write:  # closed at the end, as the server closes it, so the writer stops
                async for message in read:
                    await write.send(message)
        print("after serving", flush=True)

    anyio.run(main)
    """
)


def message(number: int, text: str = "") -> dict[str, object]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": f"{number}{text}"}}


def test_messages_are_echoed_whole_and_stray_output_goes_to_stderr() -> None:
    long_text = "ж" * (READ_AHEAD // 2 + 1) + "字" * 1000  # longer than the read-ahead in bytes; multi-byte characters
    lines = [json.dumps(message(1)), json.dumps(message(2, long_text), ensure_ascii=False), json.dumps(message(3))]
    # the last line has no newline: stdin closes right after it
    stdin = ("\n".join(lines)).encode()
    done = subprocess.run([sys.executable, "-c", ECHO], input=stdin, capture_output=True, timeout=LIMIT, check=False)
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode().splitlines()
    assert out[-1] == "after serving"  # fd 1 is put back once serving ends
    echoed = [json.loads(line) for line in out[:-1]]  # nothing else came out on stdout while serving
    assert [m["params"]["data"] for m in echoed] == ["1", f"2{long_text}", "3"]
    err = done.stderr.decode()
    assert "a stray print" in err
    assert "from a child" in err


def server_env() -> dict[str, str]:
    # Nothing answers at this address: the requests below are answered before any request would go there.
    return path_only_env({"OPENWEBUI_URL": f"http://127.0.0.1:{free_port()}", "OPENWEBUI_API_KEY": API_KEY})


def test_the_server_answers_a_request_longer_than_the_read_ahead_and_the_next(tmp_path: Path) -> None:
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        server = RawStdio([str(SCRIPT)], server_env(), stderr, limit=LIMIT)
        try:
            server.initialize("long lines")
            query = "ж" * READ_AHEAD  # two bytes each: twice the read-ahead on the wire
            refused = server.call("knowledge_search", {"query": query})
            assert refused["isError"] is True
            assert refused["structuredContent"]["code"] == "invalid_argument"
            # every character arrived, none was split into two
            assert (
                f"query is {len(query)} characters long; the limit is {QUERY_MAX_CHARS}"
                in (refused["structuredContent"]["message"])
            )
            assert server.request("ping", {}) == {}
        finally:
            code = server.close()
    assert code == 0


def test_only_pipes_and_sockets_are_served_on_the_event_loop(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    left, right = socket.socketpair()
    with (tmp_path / "file").open("wb") as regular, open(os.devnull, "rb") as device:
        try:
            assert _is_pipe_or_socket(read_end)
            assert _is_pipe_or_socket(write_end)
            assert _is_pipe_or_socket(left.fileno())
            assert not _is_pipe_or_socket(regular.fileno())
            assert not _is_pipe_or_socket(device.fileno())  # a character device, as a terminal is
        finally:
            os.close(read_end)
            os.close(write_end)
            left.close()
            right.close()


def test_stdin_that_is_no_pipe_is_served_the_sdks_way() -> None:
    # The null device ends at once: the server starts on the SDK's transport, reads the end, and exits cleanly.
    done = subprocess.run(
        [str(SCRIPT)], stdin=subprocess.DEVNULL, capture_output=True, env=server_env(), timeout=LIMIT, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b""
