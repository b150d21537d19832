"""Driving the server over real stdio, timing, and reading the processes' memory from /proc."""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.types import CallToolResult, TextContent

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
REPO = Path(__file__).resolve().parent.parent
MINIMAL_SERVER = (sys.executable, str(Path(__file__).resolve().with_name("minimal_server.py")))
MARKER = "OPENWEBUI_RAG_MCP_BENCH"
# The floor: what any server on this SDK pays before it can answer, measured the same way (spawn to a line on
# stdout). It reports its own peak RSS once the import is done.
FLOOR_CODE = (
    "import mcp.server.mcpserver, os\n"
    "status = open('/proc/self/status').read()\n"
    "hwm = [line for line in status.splitlines() if line.startswith('VmHWM:')][0].split()[1]\n"
    "print(hwm, os.times().user + os.times().system, flush=True)\n"
)


class BenchError(RuntimeError):
    """The benchmark could not measure something (a failed tool call, an unexpected answer)."""


# -- numbers ------------------------------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def ms(seconds: float) -> str:
    value = seconds * 1000
    if math.isnan(value):
        return "n/a"
    return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms" if value < 1000 else f"{value:,.0f} ms"


def peak_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an interval ending when another starts does not overlap it)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


async def timed(work: Awaitable[object]) -> float:
    started = time.perf_counter()
    await work
    return time.perf_counter() - started


# -- processes --------------------------------------------------------------------------------------------------


def vm_hwm_kib(pid: int) -> int:
    """Peak resident set size (VmHWM) of a live process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise BenchError(f"/proc/{pid}/status has no VmHWM")


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of a live process (default: this one), from /proc."""
    fields = Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children() -> set[int]:
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return pids


def _pid_with_marker(marker: str) -> int:
    wanted = f"{MARKER}={marker}".encode()
    for pid in _children():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if wanted in environ.split(b"\0"):
            return pid
    raise BenchError("could not find the server process among this process's children")


def server_env(url: str, api_key: str, **extra: str) -> dict[str, str]:
    return {"OPENWEBUI_URL": url, "OPENWEBUI_API_KEY": api_key, **extra}


@dataclass
class Server:
    """One running server process, spoken to by the SDK's stdio client."""

    session: ClientSession
    pid: int
    ready_seconds: float  # from spawning to a completed initialize and tools/list
    ready_cpu: float  # CPU seconds the process had used by then (less sensitive to a busy machine)

    async def call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        result = await self.session.call_tool(name, arguments)
        if result.is_error:
            block = result.content[0] if result.content else None
            raise BenchError(f"{name} failed: {block.text if isinstance(block, TextContent) else result}")
        return result

    def peak_rss_kib(self) -> int:
        return vm_hwm_kib(self.pid)


@asynccontextmanager
async def mcp_server(
    url: str,
    api_key: str,
    errlog: TextIO,
    command: Sequence[str] = (str(SCRIPT),),
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Server]:
    """Spawn the console script (or `command`, with `env` instead of this server's variables), initialize (legacy
    handshake) and list the tools, as an MCP host would."""
    marker = secrets.token_hex(8)
    variables = server_env(url, api_key) if env is None else dict(env)
    params = StdioServerParameters(command=command[0], args=list(command[1:]), env={**variables, MARKER: marker})
    started = time.perf_counter()
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        ready = time.perf_counter() - started
        pid = _pid_with_marker(marker)
        yield Server(session, pid, ready, cpu_seconds(pid))


async def floor_once() -> tuple[float, int, float]:
    """(seconds from spawn to the import being done, peak RSS in KiB, CPU seconds used) of a bare Python
    importing the SDK."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FLOOR_CODE,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        env=get_default_environment(),
    )
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    elapsed = time.perf_counter() - started
    await proc.wait()
    try:
        kib, cpu = line.split()
        return elapsed, int(kib), float(cpu)
    except ValueError:
        raise BenchError(f"the floor process printed {line!r}") from None


async def tools_list_wire(url: str, api_key: str, **extra: str) -> str:
    """The tools/list answer exactly as the server writes it on stdout (one JSON-RPC line), from raw stdio; `extra`
    adds variables to the server's environment (OPENWEBUI_DISABLED_TOOLS, for one)."""
    env = get_default_environment() | server_env(url, api_key, **extra)
    proc = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        limit=1 << 24,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdout = proc.stdout

    async def answer(request_id: int) -> str:
        while True:
            line = (await stdout.readline()).decode()
            if not line:
                raise BenchError("the server closed stdout during the handshake")
            if json.loads(line).get("id") == request_id:
                return line.rstrip("\n")

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(message) + "\n").encode())

    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        await asyncio.wait_for(answer(1), 60)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        return await asyncio.wait_for(answer(2), 60)
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


# -- the stub upstream ------------------------------------------------------------------------------------------


@dataclass
class Stub:
    url: str
    process: asyncio.subprocess.Process
    control: httpx.AsyncClient

    async def reset(self) -> None:
        (await self.control.post("/__reset")).raise_for_status()

    async def hold(self, **seconds: float) -> None:
        (await self.control.post("/__hold", json=seconds)).raise_for_status()

    async def inflight(self, route: str) -> int:
        response = await self.control.get("/__inflight")
        response.raise_for_status()
        count: int = response.json().get(route, 0)
        return count

    async def connections(self) -> int:
        """TCP connections the stub has accepted since it started."""
        response = await self.control.get("/__connections")
        response.raise_for_status()
        opened: int = response.json()["opened"]
        return opened

    async def log(self) -> list[tuple[str, int, float, float, int]]:
        response = await self.control.get("/__log")
        response.raise_for_status()
        return [(str(r), int(p), float(s), float(e), int(d)) for r, p, s, e, d in response.json()]


@asynccontextmanager
async def stub_upstream(bases: int, files: int) -> AsyncIterator[Stub]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.stub",
        "--bases",
        str(bases),
        "--files",
        str(files),
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        if not line.startswith("PORT="):
            raise BenchError(f"the stub upstream did not start: {line!r}")
        url = f"http://127.0.0.1:{int(line.removeprefix('PORT='))}"
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as control:
            yield Stub(url, proc, control)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


# -- direct calls -------------------------------------------------------------------------------------------------


class Direct:
    """The same HTTP requests the tools make, straight to the upstream with one `httpx.AsyncClient`."""

    def __init__(self, url: str, api_key: str) -> None:
        self.http = httpx.AsyncClient(
            base_url=url + "/",
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=httpx.Timeout(120.0, connect=10.0),
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _json(self, response: httpx.Response) -> Any:
        response.raise_for_status()
        return response.json()

    async def search(self, knowledge_ids: list[str], query: str, k: int) -> httpx.Response:
        body = {"collection_names": knowledge_ids, "query": query, "k": k}
        response = await self.http.post("api/v1/retrieval/query/collection", json=body)
        await self._json(response)
        return response

    async def list_knowledge(self) -> list[Any]:
        """Page 1, then the other pages concurrently, as the server does."""
        items, _ = await self.list_knowledge_sized()
        return items

    async def list_knowledge_sized(self) -> tuple[list[Any], int]:
        """Every base, read as `list_knowledge` reads them, and the characters of all the pages' answers."""
        response = await self.http.get("api/v1/knowledge/", params={"page": 1})
        first = await self._json(response)
        items: list[Any] = list(first["items"])
        chars = len(response.text)
        total = first.get("total") or len(items)
        if items and total > len(items):
            pages = math.ceil(total / len(items))
            rest = await asyncio.gather(
                *(self.http.get("api/v1/knowledge/", params={"page": n}) for n in range(2, pages + 1))
            )
            for response in rest:
                items.extend((await self._json(response))["items"])
                chars += len(response.text)
        return items, chars

    async def search_knowledge(self, query: str) -> Any:
        """The first page of Open WebUI's own name and description search (0.6.42+)."""
        return await self._json(await self.http.get("api/v1/knowledge/search", params={"query": query, "page": 1}))

    async def get_file(self, file_id: str) -> Any:
        return await self._json(await self.http.get(f"api/v1/files/{file_id}"))
