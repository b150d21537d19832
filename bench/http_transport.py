"""The benchmark's HTTP section: the server over Streamable HTTP, one replica and two, with 1, 16 and 64 concurrent
callers, against the same requests made directly to Open WebUI in the same run.

    .venv/bin/python -m bench.http_transport [--stub] [--quick] [--callers 1,16,64] [--seconds S] [--calls N]
        [--rounds R] [--overhead-rounds N] [--cpu-calls N] [--legacy] [--mix] [--json out.json] [--markdown out.md]
        [--openwebui-version V] [--docs N]

(also part of ``python -m bench.run --http``). Everything is on loopback and stops by itself.

What runs: three server processes (``openwebui-rag-mcp --transport streamable-http``, per-caller credentials: each
request's ``Authorization: Bearer`` is the Open WebUI key), one serving alone ("1 replica") and two side by side
("2 replicas", callers spread round-robin over their ports; no load balancer). Every caller is a client of its own:
the SDK's ``mcp.Client`` over ``streamable_http_client`` with its own connection pool, or, for direct HTTP, its own
``httpx.AsyncClient`` posting ``/api/v1/retrieval/query/collection`` with the same key. Each caller runs a loop of
``knowledge_search`` calls (``--mix``: searches, ``knowledge_list`` and ``knowledge_get_file`` in turn) for at most
``--calls`` calls and ``--seconds`` seconds per phase; the three paths take turns, ``--rounds`` times, the order
rotating each round. Per path and number of callers: calls, errors, calls per second (all calls over the phases'
wall time), p50 and p95 latency, CPU per call in the servers, this (client) process and the upstream, and how busy
the machine was with other work meanwhile. Before that, one caller's per-call overhead over HTTP against stdio,
as the stdio rows of ``bench.run`` measure it (interleaved medians, MCP minus direct); after it, memory per replica.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from bench import corpus
from bench.common import STUB_KEY, TOP_K, Samples, interleaved, live_openwebui, log
from bench.measure import SCRIPT, BenchError, Direct, Stub, cpu_seconds, mcp_server, median, ms, stub_upstream
from bench.report import REPO, load_average, machine
from bench.stub import base_id, file_id

DEFAULT_RESULTS = REPO / "bench" / "RESULTS-http.md"
CALL_TIMEOUT = 120.0  # one call, either way; a call that takes longer counts as an error
START_TIMEOUT = 60.0  # a replica's start, up to /readyz answering 200
STOP_GRACE = 15.0
GOAL_RATIO = 1.2  # at the most callers: direct throughput ≤ 1.2 × the server's
PATHS = ("direct", "one", "two")
PATH_LABELS = {"direct": "direct HTTP", "one": "MCP, 1 replica", "two": "MCP, 2 replicas"}
ERRORS_KEPT = 5


@dataclass(frozen=True, slots=True)
class HttpConfig:
    callers: tuple[int, ...] = (1, 16, 64)
    seconds: float = 8.0  # per phase: callers stop starting calls after this long
    calls: int = 10_000  # per caller per phase, at most
    rounds: int = 3  # phases per path and number of callers, the order of the paths rotating
    overhead_rounds: int = 30  # interleaved rounds of the one-caller overhead measurement
    cpu_calls: int = 100  # calls in a row for the one-caller CPU per call (the clock ticks every 10 ms)
    mix: bool = False
    mode: str = "auto"  # the MCP clients' protocol: "auto" (the stateless 2026-07-28 one) or "legacy" (initialize)

    @classmethod
    def quick(cls, mix: bool = False) -> HttpConfig:
        """Tiny: every code path once, in a few seconds (the smoke test)."""
        return cls(callers=(1, 4), seconds=0.5, calls=3, rounds=1, overhead_rounds=2, cpu_calls=3, mix=mix)


# -- upstream, replicas, callers ------------------------------------------------------------------------------------


@dataclass
class Upstream:
    """What the callers and the servers talk to: its URL, the key, the processes that serve it (for their CPU)
    and, for the stub, its control client (request and connection counts)."""

    name: str
    url: str
    api_key: str
    pids: list[int]
    stub: Stub | None = None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Replica:
    name: str
    port: int
    process: asyncio.subprocess.Process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def pid(self) -> int:
        return self.process.pid

    def memory_kib(self) -> tuple[int, int]:
        return memory_kib(self.pid)


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a live process now, in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found["VmRSS"], found["VmHWM"]


async def _ready(replica: Replica) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last = "no answer yet"
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        while time.monotonic() < deadline:
            if replica.process.returncode is not None:
                raise BenchError(f"{replica.name} exited with code {replica.process.returncode} while starting")
            try:
                answer = await http.get(f"http://127.0.0.1:{replica.port}/readyz")
                if answer.status_code == 200:
                    return
                last = f"/readyz {answer.status_code} {answer.text[:200]}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.05)
    raise BenchError(f"{replica.name} was not ready within {START_TIMEOUT:.0f} s ({last})")


async def _stop(replica: Replica) -> None:
    if replica.process.returncode is not None:
        return
    replica.process.terminate()
    try:
        await asyncio.wait_for(replica.process.wait(), STOP_GRACE)
    except TimeoutError:
        replica.process.kill()
        await replica.process.wait()


@asynccontextmanager
async def replicas(upstream_url: str, names: Sequence[str], errlog: TextIO) -> AsyncIterator[list[Replica]]:
    """One server process per name, over Streamable HTTP on a loopback port of its own, per-caller credentials (no
    OPENWEBUI_API_KEY); started together, returned once every /readyz answers 200, stopped with SIGTERM."""
    env = get_default_environment() | {"OPENWEBUI_URL": upstream_url}
    started: list[Replica] = []
    try:
        for name in names:
            port = free_port()
            process = await asyncio.create_subprocess_exec(
                str(SCRIPT),
                "--transport",
                "streamable-http",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=errlog,
                stderr=errlog,
            )
            started.append(Replica(name, port, process))
        await asyncio.gather(*(_ready(replica) for replica in started))
        yield started
    finally:
        await asyncio.gather(*(_stop(replica) for replica in started))


@asynccontextmanager
async def mcp_callers(urls: Sequence[str], api_key: str, count: int, mode: str = "auto") -> AsyncIterator[list[Client]]:
    """`count` MCP clients over Streamable HTTP, each with its own connection pool and the key as its bearer, caller
    `i` on `urls[i % len(urls)]` (round robin); `mode` as `mcp.Client` takes it."""
    async with AsyncExitStack() as stack:
        clients = []
        for n in range(count):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {api_key}"}, timeout=CALL_TIMEOUT, trust_env=False
                )
            )
            transport = streamable_http_client(urls[n % len(urls)], http_client=http)
            clients.append(
                await stack.enter_async_context(Client(transport, mode=mode, read_timeout_seconds=CALL_TIMEOUT))
            )
        yield clients


@asynccontextmanager
async def direct_callers(url: str, api_key: str, count: int) -> AsyncIterator[list[Direct]]:
    directs = [Direct(url, api_key) for _ in range(count)]
    try:
        yield directs
    finally:
        await asyncio.gather(*(direct.aclose() for direct in directs))


# -- what every caller does ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    ids: list[str]
    queries: list[str]
    files: list[str]
    ops: tuple[str, ...] = ("search",)

    def describe(self) -> str:
        what = (
            "knowledge_search"
            if self.ops == ("search",)
            else "knowledge_search, knowledge_list, " + ("knowledge_search, knowledge_get_file in turn")
        )
        return f"{what}; searches with top_k={TOP_K} over {len(self.ids)} bases, {len(self.queries)} queries in turn"

    def _query(self, n: int) -> str:
        return self.queries[n % len(self.queries)]

    async def mcp(self, client: Client, n: int) -> None:
        op = self.ops[n % len(self.ops)]
        if op == "search":
            name, arguments = "knowledge_search", {"query": self._query(n), "knowledge_ids": self.ids, "top_k": TOP_K}
        elif op == "list":
            name, arguments = "knowledge_list", {}
        else:
            name, arguments = "knowledge_get_file", {"file_id": self.files[n % len(self.files)]}
        result = await client.call_tool(name, arguments)
        if result.is_error:
            block = result.content[0] if result.content else None
            raise BenchError(f"{name} failed: {block.text if isinstance(block, TextContent) else result}")

    async def direct(self, direct: Direct, n: int) -> None:
        op = self.ops[n % len(self.ops)]
        if op == "search":
            await direct.search(self.ids, self._query(n), TOP_K)
        elif op == "list":
            await direct.list_knowledge()
        else:
            await direct.get_file(self.files[n % len(self.files)])


MIX = ("search", "list", "search", "get_file")


# -- CPU and load ---------------------------------------------------------------------------------------------------


def _descendants(pid: int) -> set[int]:
    found = {pid}
    queue = [pid]
    while queue:
        current = queue.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            for child in children:
                if child not in found:
                    found.add(child)
                    queue.append(child)
    return found


def tree_cpu(pids: Sequence[int]) -> float:
    """CPU seconds used so far by `pids` and their descendants (those still alive)."""
    total = 0.0
    for pid in {p for root in pids for p in _descendants(root)}:
        try:
            total += cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            continue
    return total


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (all cores), from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass
class Tally:
    """Everything measured for one path at one number of callers, summed over its phases."""

    calls: int = 0
    seconds: float = 0.0  # wall time of the phases
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_errors: list[str] = field(default_factory=list)
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    upstream_cpu: float = 0.0
    other_cpu: float = 0.0  # the machine's busy time not spent by any process of this benchmark
    busy_cpu: float = 0.0  # the machine's busy time, all of it
    upstream_requests: int | None = None  # the stub only
    upstream_connections: int | None = None  # the stub only
    document_reads: int | None = None  # the stub only: documents read to cite search hits
    phases: list[dict[str, float]] = field(default_factory=list)  # each phase's own figures, for the JSON

    @property
    def throughput(self) -> float:
        return self.calls / self.seconds if self.seconds else math.nan

    def per_call(self, cpu: float) -> float:
        return cpu / self.calls if self.calls else math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _failure(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:300]}"


async def phase(
    calls: Sequence[Callable[[int], Awaitable[None]]],
    cfg: HttpConfig,
    tally: Tally,
    upstream: Upstream,
    servers: Sequence[int],
    ours: Sequence[int],
) -> None:
    """Every caller loops until it made `cfg.calls` calls or `cfg.seconds` have passed; adds what it saw to
    `tally`. `servers`: the pids of the replicas serving this path; `ours`: every process of the benchmark besides
    this one and the upstream's (for the machine's other load)."""
    width = len(calls)
    if upstream.stub is not None:
        await upstream.stub.reset()
        connections_before = await upstream.stub.connections()
    cpu_before = (tree_cpu(servers), cpu_seconds(), tree_cpu(upstream.pids), tree_cpu(ours), machine_busy())
    started = time.perf_counter()
    deadline = started + cfg.seconds

    async def loop(index: int, call: Callable[[int], Awaitable[None]]) -> None:
        for k in range(cfg.calls):
            if time.perf_counter() >= deadline:
                return
            began = time.perf_counter()
            try:
                await asyncio.wait_for(call(k * width + index), CALL_TIMEOUT)
            except Exception as exc:
                tally.errors += 1
                if len(tally.first_errors) < ERRORS_KEPT:
                    tally.first_errors.append(_failure(exc))
                continue
            tally.latencies.append(time.perf_counter() - began)
            tally.calls += 1

    calls_before = tally.calls
    await asyncio.gather(*(loop(index, call) for index, call in enumerate(calls)))
    wall = time.perf_counter() - started
    server, client, up, rest, busy = (
        tree_cpu(servers),
        cpu_seconds(),
        tree_cpu(upstream.pids),
        tree_cpu(ours),
        machine_busy(),
    )
    tally.seconds += wall
    tally.server_cpu += server - cpu_before[0]
    tally.client_cpu += client - cpu_before[1]
    tally.upstream_cpu += up - cpu_before[2]
    spent = (client - cpu_before[1]) + (up - cpu_before[2]) + (rest - cpu_before[3])
    tally.other_cpu += max(0.0, (busy - cpu_before[4]) - spent)
    tally.busy_cpu += busy - cpu_before[4]
    tally.phases.append(
        {
            "calls": tally.calls - calls_before,
            "seconds": wall,
            "server_cpu": server - cpu_before[0],
            "client_cpu": client - cpu_before[1],
            "upstream_cpu": up - cpu_before[2],
            "busy_cpu": busy - cpu_before[4],
        }
    )
    if upstream.stub is not None:
        entries = await upstream.stub.log()
        tally.upstream_requests = (tally.upstream_requests or 0) + len(entries)
        tally.document_reads = (tally.document_reads or 0) + sum(1 for entry in entries if entry[0] == "file_get")
        opened = await upstream.stub.connections() - connections_before
        tally.upstream_connections = (tally.upstream_connections or 0) + opened


# -- the section --------------------------------------------------------------------------------------------------


@dataclass
class HttpReport:
    upstream: str
    workload: str
    config: HttpConfig
    tallies: dict[int, dict[str, Tally]] = field(default_factory=dict)
    overhead: dict[str, Any] = field(default_factory=dict)
    memory: list[tuple[str, int, int]] = field(default_factory=list)  # (what, VmRSS KiB, VmHWM KiB)
    protocol: str = "unknown"
    load_start: str = ""
    load_end: str = ""
    seconds: float = 0.0

    def ratio(self, width: int, path: str) -> float:
        """Direct throughput ÷ this path's (1.00 for direct; above 1: slower than direct)."""
        tallies = self.tallies[width]
        mine = tallies[path].throughput
        return tallies["direct"].throughput / mine if mine else math.inf

    def goals(self) -> list[tuple[str, str, bool | None]]:
        """(goal, measured, met) rows; met is None when it could not be judged."""
        rows: list[tuple[str, str, bool | None]] = []
        if self.tallies:
            width = max(self.tallies)
            for path in ("one", "two"):
                tally, direct = self.tallies[width][path], self.tallies[width]["direct"]
                ratio = self.ratio(width, path)
                rows.append(
                    (
                        f"{width} callers, {PATH_LABELS[path]}: no error, throughput within {GOAL_RATIO}× of direct",
                        f"{tally.errors} errors; {tally.throughput:.1f} vs {direct.throughput:.1f} calls/s: direct "
                        f"÷ this = {ratio:.2f}×",
                        tally.errors == 0 and direct.errors == 0 and ratio <= GOAL_RATIO,
                    )
                )
        if self.overhead:
            http, stdio = self.overhead["http"]["overhead"], self.overhead["stdio"]["overhead"]
            rows.append(
                (
                    "Per-call overhead over HTTP no worse than over stdio (one caller)",
                    f"HTTP {_signed(http)} vs stdio {_signed(stdio)} per call",
                    http <= stdio,
                )
            )
        return rows

    def gaps(self) -> list[str]:
        """Where the time goes, for the judged rows: CPU per call each way and how busy the machine was (on a
        machine whose cores are all busy, throughput follows the CPU each call costs)."""
        notes = []
        if self.tallies:
            width = max(self.tallies)
            direct = self.tallies[width]["direct"]
            plain = direct.per_call(direct.client_cpu + direct.upstream_cpu)
            for path in ("one", "two"):
                t = self.tallies[width][path]
                total = t.per_call(t.server_cpu + t.client_cpu + t.upstream_cpu)
                ratio = f"{total / plain:.2f}" if plain else "n/a"  # tiny runs: no clock tick at all
                notes.append(
                    f"{width} callers, {PATH_LABELS[path]}: CPU per call {ms(total)} against direct's {ms(plain)} "
                    f"(the servers {ms(t.per_call(t.server_cpu))}, the MCP clients "
                    f"{_signed(t.per_call(t.client_cpu) - direct.per_call(direct.client_cpu))}, the upstream "
                    f"{_signed(t.per_call(t.upstream_cpu) - direct.per_call(direct.upstream_cpu))}), a ratio of "
                    f"{ratio}; the machine was busy {_cores(t.busy_cpu, t)} of {os.cpu_count()} cores "
                    f"({_cores(t.other_cpu, t)} of it other work), against {_cores(direct.busy_cpu, direct)} "
                    f"({_cores(direct.other_cpu, direct)}) for direct."
                )
        if self.overhead:
            http, stdio = self.overhead["http"], self.overhead["stdio"]
            notes.append(
                f"One caller: CPU per call over HTTP {ms(http['server_cpu'])} in the server + "
                f"{ms(http['client_cpu'])} in the MCP client, over stdio {ms(stdio['server_cpu'])} + "
                f"{ms(stdio['client_cpu'])}."
            )
        return notes

    def markdown(self, heading: str = "##") -> str:
        cfg = self.config
        lines = [
            f"{heading} Over Streamable HTTP: concurrent callers, one replica and two",
            "",
            f"Upstream: {self.upstream}. Workload: {self.workload}. Load average (1 / 5 / 15 min) at the start of "
            f"this section {self.load_start}, at the end {self.load_end}; it took {self.seconds:.0f} s. MCP "
            f"protocol version the clients negotiated: {self.protocol}.",
            "",
            "Method: three server processes (`openwebui-rag-mcp --transport streamable-http`, per-caller "
            "credentials: each request's `Authorization: Bearer` is the Open WebUI key), one serving alone, two "
            "side by side with the callers spread round-robin over their ports (no load balancer). Each caller is "
            "its own client with its own connections: the SDK's `mcp.Client` over `streamable_http_client`, or for "
            "direct HTTP an `httpx.AsyncClient` with the same key, making the same requests the tool makes. Each "
            f"caller loops for at most {cfg.calls:,} calls and {cfg.seconds:g} s per phase, after one warm-up call; "
            f"the three paths take turns, {cfg.rounds} phase(s) each, the order rotating. Calls/s: every completed "
            "call over the phases' wall time; latency: per call, as the caller saw it. CPU per call: the serving "
            "replicas, this client process (all callers), the upstream's processes. Machine busy: the cores in use "
            f"on average during the phases (of {os.cpu_count()}), and in brackets the part no process of this "
            "benchmark used (other people's work).",
            "",
            "| Callers | Path | Calls | Errors | Calls/s | Direct ÷ this | p50 | p95 | CPU per call: server + "
            "client + upstream | Machine busy (other) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for width, tallies in self.tallies.items():
            for path in PATHS:
                t = tallies[path]
                server = "—" if path == "direct" else ms(t.per_call(t.server_cpu))
                cpu = f"{server} + {ms(t.per_call(t.client_cpu))} + {ms(t.per_call(t.upstream_cpu))}"
                if t.upstream_requests is not None:
                    cpu += f"; upstream requests per call {t.upstream_requests / max(1, t.calls):.2f}, connections "
                    cpu += f"opened {t.upstream_connections}"
                errors = str(t.errors) + (f" (first: {t.first_errors[0]})" if t.first_errors else "")
                lines.append(
                    f"| {width} | {PATH_LABELS[path]} | {t.calls:,} | {errors} | {t.throughput:.1f} | "
                    f"{self.ratio(width, path):.2f}× | {ms(percentile(t.latencies, 50))} | "
                    f"{ms(percentile(t.latencies, 95))} | {cpu} | {_cores(t.busy_cpu, t)} ({_cores(t.other_cpu, t)}) |"
                )
        lines.append("")
        if self.overhead:
            rounds = self.overhead["rounds"]
            lines += [
                f"One caller, `knowledge_search`, {rounds} interleaved rounds, measured as `bench.run` measures the "
                "stdio rows (medians; overhead: MCP minus direct, each against its own direct samples); CPU per call "
                f"over {self.overhead['cpu_calls']} calls in a row:",
                "",
                "| Transport | MCP call | Direct | Overhead per call | CPU per call: server + MCP client | Failed |",
                "|---|---|---|---|---|---|",
            ]
            for key, label in (("stdio", "stdio (one process per user)"), ("http", "Streamable HTTP (1 replica)")):
                row = self.overhead[key]
                lines.append(
                    f"| {label} | {ms(row['proxy'])} | {ms(row['direct'])} | {_signed(row['overhead'])} | "
                    f"{ms(row['server_cpu'])} + {ms(row['client_cpu'])} | {len(row['failures'])} |"
                )
            lines.append("")
        if self.memory:
            lines += ["| Process | RSS after the run | Peak RSS (VmHWM) |", "|---|---|---|"]
            lines += [f"| {what} | {rss / 1024:.1f} MiB | {hwm / 1024:.1f} MiB |" for what, rss, hwm in self.memory]
            lines.append("")
        goals = self.goals()
        if goals:
            lines += ["| Goal | Measured | Verdict |", "|---|---|---|"]
            for goal, measured, met in goals:
                verdict = "—" if met is None else "**met**" if met else "**NOT MET**"
                lines.append(f"| {goal} | {measured} | {verdict} |")
            lines.append("")
        gaps = self.gaps()
        if gaps:
            lines += ["Where the time goes:", "", *[f"- {note}" for note in gaps], ""]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "upstream": self.upstream,
            "workload": self.workload,
            "config": asdict(self.config),
            "protocol": self.protocol,
            "load_start": self.load_start,
            "load_end": self.load_end,
            "seconds": self.seconds,
            "rows": [
                {
                    "callers": width,
                    "path": path,
                    "calls": t.calls,
                    "errors": t.errors,
                    "first_errors": t.first_errors,
                    "seconds": t.seconds,
                    "calls_per_second": t.throughput,
                    "direct_ratio": self.ratio(width, path),
                    "p50": percentile(t.latencies, 50),
                    "p95": percentile(t.latencies, 95),
                    "server_cpu": t.server_cpu,
                    "client_cpu": t.client_cpu,
                    "upstream_cpu": t.upstream_cpu,
                    "other_cpu": t.other_cpu,
                    "busy_cpu": t.busy_cpu,
                    "upstream_requests": t.upstream_requests,
                    "upstream_connections": t.upstream_connections,
                    "document_reads": t.document_reads,
                    "phases": t.phases,
                    "latencies": t.latencies,
                }
                for width, tallies in self.tallies.items()
                for path, t in tallies.items()
            ],
            "overhead": self.overhead,
            "memory": [{"process": what, "rss_kib": rss, "hwm_kib": hwm} for what, rss, hwm in self.memory],
            "goals": [{"goal": g, "measured": m, "met": met} for g, m, met in self.goals()],
        }


def _cores(cpu: float, tally: Tally) -> str:
    return f"{cpu / tally.seconds:.2f}" if tally.seconds else "n/a"


def _signed(seconds: float) -> str:
    return f"{'+' if seconds >= 0 else '−'}{ms(abs(seconds))}"


async def _cpu_per_call(call: Callable[[int], Awaitable[object]], server_pid: int, calls: int) -> tuple[float, float]:
    """(server, client) CPU seconds per call over `calls` calls in a row."""
    server_before, client_before = cpu_seconds(server_pid), cpu_seconds()
    for n in range(calls):
        await call(n)
    return (cpu_seconds(server_pid) - server_before) / calls, (cpu_seconds() - client_before) / calls


async def measure_overhead(
    cfg: HttpConfig, report: HttpReport, upstream: Upstream, workload: Workload, single: Replica, errlog: TextIO
) -> None:
    """One caller, knowledge_search: over stdio and over HTTP, each interleaved with direct calls."""
    search_only = Workload(workload.ids, workload.queries, workload.files)
    async with (
        mcp_server(upstream.url, upstream.api_key, errlog) as stdio,
        mcp_callers([single.url], upstream.api_key, 1, cfg.mode) as (client,),
        direct_callers(upstream.url, upstream.api_key, 1) as (direct,),
    ):
        report.protocol = str(client.session.protocol_version)

        def over_stdio(n: int) -> Awaitable[object]:
            arguments = {"query": workload.queries[n % len(workload.queries)], "knowledge_ids": workload.ids}
            return stdio.call("knowledge_search", {**arguments, "top_k": TOP_K})

        def over_http(n: int) -> Awaitable[None]:
            return search_only.mcp(client, n)

        def straight(n: int) -> Awaitable[None]:
            return search_only.direct(direct, n)

        log(f"http: one caller's overhead, stdio and HTTP, {cfg.overhead_rounds} rounds")
        samples: dict[str, Samples] = await interleaved(
            cfg.overhead_rounds, {"stdio": (over_stdio, straight), "http": (over_http, straight)}
        )
        log(f"http: one caller's CPU per call, stdio and HTTP, {cfg.cpu_calls} calls each")
        cpu = {
            "stdio": await _cpu_per_call(over_stdio, stdio.pid, cfg.cpu_calls),
            "http": await _cpu_per_call(over_http, single.pid, cfg.cpu_calls),
        }
        stdio_memory = memory_kib(stdio.pid)
    report.overhead = {"rounds": cfg.overhead_rounds, "cpu_calls": cfg.cpu_calls}
    for key, found in samples.items():
        proxy, plain = median(found.proxy), median(found.direct)
        report.overhead[key] = {
            "proxy": proxy,
            "direct": plain,
            "overhead": proxy - plain,
            "server_cpu": cpu[key][0],
            "client_cpu": cpu[key][1],
            "failures": found.failures,
            "proxy_seconds": found.proxy,
            "direct_seconds": found.direct,
        }
    report.memory.append(("stdio server, for reference (after the one-caller measurement)", *stdio_memory))


async def _warm(calls: Sequence[Callable[[int], Awaitable[None]]]) -> None:
    """One call per caller, together: connections made, the credential checked and remembered, tools listed."""
    try:
        await asyncio.gather(*(asyncio.wait_for(call(index), CALL_TIMEOUT) for index, call in enumerate(calls)))
    except Exception as exc:
        raise BenchError(f"a warm-up call failed: {_failure(exc)}") from exc


async def measure_width(
    cfg: HttpConfig,
    report: HttpReport,
    width: int,
    upstream: Upstream,
    workload: Workload,
    single: Replica,
    pair: list[Replica],
) -> None:
    tallies = {path: Tally() for path in PATHS}
    report.tallies[width] = tallies
    ours = [single.pid, *(replica.pid for replica in pair)]
    async with (
        direct_callers(upstream.url, upstream.api_key, width) as directs,
        mcp_callers([single.url], upstream.api_key, width, cfg.mode) as alone,
        mcp_callers([replica.url for replica in pair], upstream.api_key, width, cfg.mode) as spread,
    ):
        paths: dict[str, tuple[list[Callable[[int], Awaitable[None]]], list[int]]] = {
            "direct": ([partial(workload.direct, direct) for direct in directs], []),
            "one": ([partial(workload.mcp, client) for client in alone], [single.pid]),
            "two": ([partial(workload.mcp, client) for client in spread], [replica.pid for replica in pair]),
        }
        for calls, _ in paths.values():
            await _warm(calls)
        for n in range(cfg.rounds):
            for path in PATHS[n % 3 :] + PATHS[: n % 3]:
                log(f"http: {width} caller(s), {PATH_LABELS[path]}, phase {n + 1} of {cfg.rounds}")
                calls, servers = paths[path]
                await phase(calls, cfg, tallies[path], upstream, servers, ours)


async def http_section(cfg: HttpConfig, upstream: Upstream, workload: Workload, errlog: TextIO) -> HttpReport:
    """The whole section against `upstream`: start three replicas, measure one caller's overhead, then every
    number of callers, then read the replicas' memory; the replicas are stopped at the end, whatever happens."""
    started = time.monotonic()
    report = HttpReport(upstream.name, workload.describe(), cfg, load_start=load_average())
    log("http: starting three replicas (one alone, two side by side)")
    async with replicas(upstream.url, ["alone", "pair-1", "pair-2"], errlog) as (single, *pair):
        await measure_overhead(cfg, report, upstream, workload, single, errlog)
        for width in cfg.callers:
            await measure_width(cfg, report, width, upstream, workload, single, pair)
        report.memory[:0] = [
            ("1 replica (served the 1-replica phases)", *single.memory_kib()),
            *((f"2 replicas: {replica.name}", *replica.memory_kib()) for replica in pair),
        ]
    report.load_end = load_average()
    report.seconds = time.monotonic() - started
    return report


# -- against the stub or a live Open WebUI ------------------------------------------------------------------------


STUB_BASES = 3
STUB_FILES = 10


def stub_workload(mix: bool) -> Workload:
    ids = [base_id(n) for n in range(STUB_BASES)]
    files = [file_id(n % STUB_BASES, n) for n in range(STUB_FILES)]
    return Workload(ids, [f"query {n}" for n in range(14)], files, MIX if mix else ("search",))


async def against_stub(cfg: HttpConfig, errlog: TextIO) -> HttpReport:
    async with stub_upstream(STUB_BASES, STUB_FILES) as stub:
        upstream = Upstream("the instant stub (bench/stub.py)", stub.url, STUB_KEY, [stub.process.pid], stub)
        return await http_section(cfg, upstream, stub_workload(cfg.mix), errlog)


def live_workload(seeded: corpus.Corpus, mix: bool) -> Workload:
    files = list(seeded.files.values())
    return Workload(seeded.base_ids, corpus.QUERIES, files[:: max(1, len(files) // 10)], MIX if mix else ("search",))


async def against_live(cfg: HttpConfig, version: str, docs: int, errlog: TextIO) -> HttpReport:
    info: dict[str, Any] = {}
    async with live_openwebui(version, docs, info) as live:
        inst = live.inst
        pids = [inst.openwebui_pid, inst.embed_pid]
        upstream = Upstream(f"Open WebUI {info['openwebui']}", inst.url, inst.api_key, pids)
        try:
            report = await http_section(cfg, upstream, live_workload(live.seeded, cfg.mix), errlog)
        except BaseException:
            live.failed = True
            raise
        live.failed = any(t.errors for tallies in report.tallies.values() for t in tallies.values())
        return report


def _callers(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError("every number of callers must be at least 1")
    return widths


def main(argv: list[str] | None = None) -> int:
    from devtools.openwebui_local import NEWEST

    parser = argparse.ArgumentParser(prog="python -m bench.http_transport", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stub", action="store_true", help="against the instant stub instead of a real Open WebUI")
    parser.add_argument("--quick", action="store_true", help="tiny counts: 1 and 4 callers, one short phase each")
    parser.add_argument("--callers", type=_callers, default=None, help="numbers of concurrent callers (1,16,64)")
    parser.add_argument("--seconds", type=float, default=None, help="time limit of each phase (8)")
    parser.add_argument("--calls", type=int, default=None, help="calls per caller per phase, at most (10000)")
    parser.add_argument("--rounds", type=int, default=None, help="phases per path and number of callers (3)")
    parser.add_argument("--overhead-rounds", type=int, default=None, help="rounds of the one-caller overhead (30)")
    parser.add_argument("--cpu-calls", type=int, default=None, help="calls for the one-caller CPU per call (100)")
    parser.add_argument(
        "--legacy", action="store_true", help="MCP clients on the initialize-based protocol (as Open WebUI's own)"
    )
    parser.add_argument("--mix", action="store_true", help="knowledge_list and knowledge_get_file between searches")
    parser.add_argument("--json", type=Path, default=None, help="also write every sample as JSON here")
    parser.add_argument(
        "--markdown",
        type=Path,
        default=None,
        help="write the table here (default bench/RESULTS-http.md on a full live run)",
    )
    parser.add_argument("--openwebui-version", default=NEWEST, help=f"the Open WebUI release to run ({NEWEST})")
    parser.add_argument("--docs", type=int, default=160, help="standard-library documents to seed (160)")
    args = parser.parse_args(argv)
    given = {
        "callers": args.callers,
        "seconds": args.seconds,
        "calls": args.calls,
        "rounds": args.rounds,
        "overhead_rounds": args.overhead_rounds,
        "cpu_calls": args.cpu_calls,
        "mode": "legacy" if args.legacy else None,
    }
    base = HttpConfig.quick(args.mix) if args.quick else HttpConfig(mix=args.mix)
    cfg = replace(base, **{name: value for name, value in given.items() if value is not None})
    if cfg.seconds <= 0 or min(cfg.calls, cfg.rounds, cfg.overhead_rounds, cfg.cpu_calls) < 1:
        parser.error("--seconds must be positive; --calls, --rounds, --overhead-rounds and --cpu-calls at least 1")
    if not SCRIPT.exists():
        print(f"error: {SCRIPT} is missing; install the package into this environment first", file=sys.stderr)
        return 2
    handle, errlog_path = tempfile.mkstemp(prefix="openwebui-rag-mcp-bench-http-", suffix=".stderr")
    log(f"the servers' stderr goes to {errlog_path}")
    with open(handle, "w", encoding="utf-8") as errlog:
        if args.stub:
            report = asyncio.run(against_stub(cfg, errlog))
        else:
            report = asyncio.run(against_live(cfg, args.openwebui_version, 30 if args.quick else args.docs, errlog))
    m = machine()
    command = " ".join(
        ["python -m bench.http_transport", shlex.join(argv if argv is not None else sys.argv[1:])]
    ).strip()
    table = "\n".join(
        [
            "# openwebui-rag-mcp benchmark: Streamable HTTP",
            "",
            f"Machine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['memory_gib']} GiB RAM, "
            f"{m['os']}; {m['python']}; mcp {m['mcp']}, httpx {m['httpx']}, pydantic {m['pydantic']}.",
            f"Server: {m['server']}. Run: {m['date']}; `{command}`.",
            "",
            report.markdown(),
        ]
    )
    print(table)
    target = args.markdown or (None if args.quick or args.stub else DEFAULT_RESULTS)
    if target is not None:
        target.write_text(table, encoding="utf-8")
        log(f"wrote {target}")
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": m, "http": report.as_json()}, indent=2), encoding="utf-8")
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
