"""The console script on raw stdio: newline-delimited JSON-RPC through `subprocess.Popen`, every stdout line kept.

Shared by the tests that must see every byte the server writes (tests/test_stdio.py, tests/test_wheel.py,
tests/test_secrets_stdio.py): a reader thread keeps each stdout line as bytes in `lines`, and answers are matched to
requests by id. No answer within `limit` seconds fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

LIMIT = 30.0  # seconds for any one answer from the server
PROTOCOL_VERSION = "2025-11-25"


def path_only_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus this process's PATH, and nothing else from this process's environment."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}


class RawStdio:
    """``command`` with pipes: JSON-RPC lines in on stdin, every stdout line kept as bytes, stderr to ``stderr``."""

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        stderr: IO[bytes],
        *,
        cwd: Path | None = None,
        limit: float = LIMIT,
    ) -> None:
        self.limit = limit
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd
        )
        self.lines: list[bytes] = []
        self._queue: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            self._queue.put(line)

    def send_raw(self, line: str) -> None:
        """Write ``line`` as it is (plus the newline): for messages ``json.dumps`` would not write."""
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps({"jsonrpc": "2.0", **message}))

    def answer_to(self, request_id: int, what: str | None = None) -> dict[str, Any]:
        """The whole answer (a result or an error) to the request ``request_id``; other messages are passed over."""
        deadline = time.monotonic() + self.limit
        while True:
            try:
                line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no answer to {what or f'request {request_id}'} within {self.limit:.0f} s", pytrace=False)
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id:
                return message

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request with the next id and return its result; a JSON-RPC error fails the test."""
        self._next_id += 1
        self.send({"id": self._next_id, "method": method, "params": params})
        message = self.answer_to(self._next_id, method)
        assert "error" not in message, message
        result: dict[str, Any] = message["result"]
        return result

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def initialize(self, client_name: str) -> dict[str, Any]:
        """The handshake: ``initialize`` then ``notifications/initialized``. Returns the ``initialize`` result."""
        client_info = {"name": client_name, "version": "1"}
        result = self.request(
            "initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": client_info}
        )
        self.send({"method": "notifications/initialized"})
        return result

    def close(self) -> int:
        """Close stdin, wait for the exit (killing the process after ``limit`` seconds) and return its exit code."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            code = self.process.wait(timeout=self.limit)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(timeout=5)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code
