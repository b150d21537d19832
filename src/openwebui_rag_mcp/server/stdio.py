"""stdin and stdout for MCP, read and written on the event loop.

The SDK's `stdio_server` reads each request line and writes each answer through a worker thread (three thread hops a
call, each a wake-up on a busy machine). Where stdin and stdout are pipes or sockets, as every MCP host starts a
server on Linux and macOS, they are served by asyncio's pipe transports instead, through the SDK's own message
handling; anything else (a file, a terminal, Windows) keeps the SDK's way. As the SDK does, fd 0 then reads the null
device and fd 1 writes to stderr, so a stray print or a child process never reaches the protocol channel; both are
put back at the end.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, cast

from mcp.server.stdio import stdio_server

# Lines may be longer (a base64 file): this is how much is held before reading pauses, not a limit on a message.
READ_AHEAD = 1 << 20
CLOSE_SECONDS = 5.0


def _is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Lines:
    """Request lines from stdin, as `stdio_server` reads them from a file."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        parts: list[bytes] = []
        while True:
            try:
                parts.append(await self._reader.readuntil(b"\n"))
                break
            except asyncio.LimitOverrunError as over:  # a line longer than READ_AHEAD: take what is read, go on
                parts.append(await self._reader.readexactly(over.consumed))
            except asyncio.IncompleteReadError as end:  # stdin closed: the last line, if it has no newline
                parts.append(end.partial)
                break
        line = b"".join(parts)
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Answers:
    """stdout as `stdio_server` writes to a file: a line, then a flush that waits while the pipe is full."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


@contextmanager
def _wire() -> Iterator[tuple[int, int]]:
    """Copies of fd 0 and 1 for the protocol (the caller's to close); meanwhile fd 0 reads the null device and fd 1
    is stderr."""
    sys.stdout.flush()
    saved_in, saved_out = os.dup(0), os.dup(1)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        os.dup2(2, 1)
        yield os.dup(saved_in), os.dup(saved_out)
    finally:
        for saved in (saved_in, saved_out):  # the transports made the copies non-blocking, the originals with them
            os.set_blocking(saved, True)
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)


@asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams of `stdio_server`, over the event loop where stdin and stdout allow it."""
    # (Windows' event loop serves pipes differently: there the SDK's way is kept)
    if os.name != "posix" or not (_is_pipe_or_socket(0) and _is_pipe_or_socket(1)):
        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    with _wire() as (wire_in, wire_out):
        reader = asyncio.StreamReader(limit=READ_AHEAD)
        # The transports own (and close) these file objects and with them the private copies.
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
        )
        # (a stream protocol for the writer too: it is what tells `wait_closed` that everything is written)
        write_transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(wire_out, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        try:
            # `stdio_server` takes anything with the file methods it calls.
            async with stdio_server(stdin=cast(Any, _Lines(reader)), stdout=cast(Any, _Answers(writer))) as streams:
                yield streams
        finally:
            read_transport.close()
            writer.close()
            # What the host has not read a few seconds after the end is dropped: it has gone, or stopped reading.
            with suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_SECONDS)
