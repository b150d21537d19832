"""The benchmark: what the MCP proxy costs an agent compared with calling Open WebUI directly.

    .venv/bin/python -m bench.run [--quick] [--no-live] [--http] [--repeats N] [--json out.json] [--markdown out.md]

Everything runs on loopback in one go and is measured side by side: cold start and memory against the floor the
SDK itself imposes, tool-call latency and concurrency against the same HTTP requests made directly (first at an
instant stub upstream, then at a real Open WebUI with a freshly seeded corpus), request counts at the stub, and
result sizes. ``--http`` adds the Streamable HTTP section (``bench/http_transport.py``: 1, 16 and 64 concurrent
callers against one replica and two, memory per replica, one caller's overhead against stdio), against the real
Open WebUI, or against the stub with ``--no-live``. The table goes to stdout (and to ``bench/RESULTS.md`` after a
full run); progress goes to stderr.
Targets are reported as met or not met; the exit code only says whether everything could be measured.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mcp.types import CallToolResult, TextContent

from bench import corpus, longdocs, peers
from bench.common import (
    STUB_KEY,
    TOP_K,
    Call,
    Samples,
    interleaved,
    live_openwebui,
    log,
)
from bench.measure import (
    MINIMAL_SERVER,
    SCRIPT,
    BenchError,
    Direct,
    Server,
    Stub,
    cpu_seconds,
    floor_once,
    mcp_server,
    median,
    ms,
    peak_overlap,
    stub_upstream,
    timed,
    tools_list_wire,
)
from bench.report import REPO, Results, load_average, machine, markdown
from bench.stub import FILE_TEXT, PAGE_SIZE, base_id, file_id
from devtools.openwebui_local import Instance

if TYPE_CHECKING:
    from bench.http_transport import HttpConfig

STUB_BASES = 100  # four pages of knowledge bases
STUB_FILES = 75  # three pages of documents per base
DEFAULT_RESULTS = REPO / "bench" / "RESULTS.md"
TOOLS = {"search": "knowledge_search", "list": "knowledge_list", "get_file": "knowledge_get_file"}


@dataclass(frozen=True, slots=True)
class Config:
    quick: bool
    live: bool
    rounds: int
    cold_rounds: int
    live_docs: int
    version: str
    hold: float  # how long the stub holds each read in the "reads never wait" checks
    write_hold: float  # how long it holds the upload of the write
    # The HTTP section (bench/http_transport.py): against the live Open WebUI, or against the stub with --no-live.
    http: bool = False
    long_chars: int = longdocs.LONG_CHARS  # of each of the LONG_DOCS long documents searched
    peer: tuple[str, ...] | None = None  # the command that starts another Open WebUI MCP server (bench/peers.py)


def http_config(cfg: Config) -> HttpConfig:
    """The HTTP section's configuration for this run (a `bench.http_transport.HttpConfig`)."""
    from bench.http_transport import HttpConfig

    return HttpConfig.quick() if cfg.quick else HttpConfig()


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    if not isinstance(block, TextContent):
        raise BenchError(f"expected a text block, got {block.type}")
    return block.text


def latency_row(results: Results, key: str, samples: Samples, limit: float | None, extra: str = "") -> None:
    proxy, direct = median(samples.proxy), median(samples.direct)
    ratio = proxy / direct
    overhead = proxy - direct
    note = f"{'+' if overhead >= 0 else '−'}{ms(abs(overhead))} per call" if "concurrent" not in key else ""
    failed = ""
    if samples.failures:
        failed = f"{len(samples.failures)} call(s) FAILED and were taken again, first: {samples.failures[0]}"
    results.set(
        key,
        ms(proxy),
        ms(direct),
        ratio,
        None if limit is None else ratio <= limit,
        ", ".join(filter(None, [note, extra, failed])),
        proxy_seconds=samples.proxy,
        direct_seconds=samples.direct,
        failures=samples.failures,
    )


def size_row(results: Results, key: str, sizes: list[tuple[str, str, int, str]]) -> None:
    """`sizes`: (query, the result's text block, whole result chars, Open WebUI's raw answer) per query."""
    query, text, whole, raw = max(sizes, key=lambda s: len(s[1]) / len(s[3]))
    results.set(
        key,
        f"{len(text):,} chars",
        f"{len(raw):,} chars",
        len(text) / len(raw),
        all(len(t) <= len(r) for _, t, _, r in sizes),
        f"the text block an agent reads, top_k={TOP_K}, largest ratio at query {query!r}; the whole tools/call "
        f"result repeats it as structuredContent: {whole:,} chars",
        sizes=[{"query": q, "text": len(t), "whole": w, "raw": len(r)} for q, t, w, r in sizes],
        largest={"query": query, "text": text, "raw": raw},
    )


async def search_sizes(
    server: Server, direct: Direct, ids: list[str], queries: list[str]
) -> list[tuple[str, str, int, str]]:
    sizes = []
    for query in queries:
        result = await server.call("knowledge_search", {"query": query, "knowledge_ids": ids, "top_k": TOP_K})
        raw = await direct.search(ids, query, TOP_K)
        whole = result.model_dump_json(by_alias=True, exclude_none=True)
        sizes.append((query, text_of(result), len(whole), raw.text))
    return sizes


# -- start and footprint ------------------------------------------------------------------------------------------


async def start_section(cfg: Config, stub: Stub, results: Results, errlog: TextIO) -> float:
    """Cold start and the tools/list size; returns the floor's median peak RSS (KiB) for the memory rows."""
    log("tools/list on the wire")
    wire = await tools_list_wire(stub.url, STUB_KEY)
    tools = json.loads(wire)["result"]["tools"]
    aliases = [t["name"] for t in tools if not t["name"].startswith("knowledge_")]

    def chars(tool: dict[str, Any]) -> int:
        return len(json.dumps(tool, ensure_ascii=False, separators=(",", ":")))

    def parts(tool: dict[str, Any]) -> str:
        return (
            f"{tool['name']} {chars(tool):,} (description {len(tool.get('description', '')):,}, input schema "
            f"{chars(tool['inputSchema']):,}, output schema {chars(tool.get('outputSchema', {})):,})"
        )

    largest = max(tools, key=chars)
    results.set(
        "start.tools_list",
        f"{len(wire):,} chars",
        "—",
        None,
        len(wire) <= 13_200,  # tests/server/test_budget.py
        f"{len(tools)} tools of which {len(aliases)} aliases; largest {parts(largest)}; the aliases take "
        f"{sum(chars(t) for t in tools if t['name'] in aliases):,}; output schemas take "
        f"{sum(chars(t.get('outputSchema', {})) for t in tools):,} in all",
        chars=len(wire),
        tools=len(tools),
        per_tool={t["name"]: parts(t) for t in tools},
    )
    bare = await tools_list_wire(stub.url, STUB_KEY, OPENWEBUI_DISABLED_TOOLS=",".join(aliases))
    results.set(
        "start.tools_list_no_aliases",
        f"{len(bare):,} chars",
        "—",
        None,
        len(bare) <= 8_000,
        f"{len(json.loads(bare)['result']['tools'])} tools",
        chars=len(bare),
    )

    log(f"cold start, {cfg.cold_rounds} rounds against the floor and a minimal server")
    if not cfg.quick:
        await floor_once()  # the first start after a while also reads files from disk; keep it out

    async def server_once(command: tuple[str, ...]) -> tuple[float, int, float]:
        async with mcp_server(stub.url, STUB_KEY, errlog, command) as server:
            return server.ready_seconds, server.peak_rss_kib(), server.ready_cpu

    kinds: dict[str, Callable[[], Awaitable[tuple[float, int, float]]]] = {
        "floor": floor_once,
        "minimal": lambda: server_once(MINIMAL_SERVER),
        "server": lambda: server_once((str(SCRIPT),)),
    }
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    rss: dict[str, list[int]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for n in range(cfg.cold_rounds):
        for kind in order[n % 3 :] + order[: n % 3]:  # each goes first, second and last in turn
            seconds, kib, used = await kinds[kind]()
            times[kind].append(seconds)
            rss[kind].append(kib)
            cpu[kind].append(used)
    floor_time, minimal_time, server_time = (median(times[kind]) for kind in kinds)
    floor_cpu, minimal_cpu, server_cpu = (median(cpu[kind]) for kind in kinds)
    results.set(
        "start.cold",
        ms(server_time),
        ms(floor_time),
        server_time / floor_time,
        server_time / floor_time <= 1.15,
        f"{server_time / minimal_time:.2f}× the minimal server; CPU time used by then {ms(server_cpu)} vs the "
        f"floor's {ms(floor_cpu)} ({server_cpu / floor_cpu:.2f}×); peak RSS right after tools/list "
        f"{median(rss['server']) / 1024:.1f} MiB",
        server_seconds=times["server"],
        floor_seconds=times["floor"],
        server_rss_kib=rss["server"],
        floor_rss_kib=rss["floor"],
        server_cpu_seconds=cpu["server"],
        floor_cpu_seconds=cpu["floor"],
    )
    results.set(
        "start.cold_minimal",
        ms(minimal_time),
        ms(floor_time),
        minimal_time / floor_time,
        None,
        f"bench/minimal_server.py; CPU time used by then {ms(minimal_cpu)} ({minimal_cpu / floor_cpu:.2f}× the "
        f"floor's); peak RSS right after tools/list {median(rss['minimal']) / 1024:.1f} MiB",
        minimal_seconds=times["minimal"],
        minimal_rss_kib=rss["minimal"],
        minimal_cpu_seconds=cpu["minimal"],
    )
    return median(rss["floor"])


def memory_row(results: Results, key: str, server_kib: int, floor_kib: float, what: str) -> None:
    ratio = server_kib / floor_kib
    results.set(
        key,
        f"{server_kib / 1024:.1f} MiB",
        f"{floor_kib / 1024:.1f} MiB",
        ratio,
        ratio <= 1.2,
        what,
        server_kib=server_kib,
        floor_kib=floor_kib,
    )


# -- the instant stub ---------------------------------------------------------------------------------------------


async def paging_row(
    results: Results, key: str, stub: Stub, server: Server, route: str, tool: str, args: dict[str, Any], items: int
) -> None:
    hold = 0.05
    await stub.hold(**{route: hold})
    await stub.reset()
    took = await timed(server.call(tool, args))
    await stub.hold()
    entries = [e for e in await stub.log() if e[0] == route]
    pages = sorted(e[1] for e in entries)
    expected = list(range(1, math.ceil(items / PAGE_SIZE) + 1))
    peak = peak_overlap([(start, end) for _, page, start, end, _ in entries if page >= 2])
    results.set(
        key,
        f"{len(entries)} requests, pages {pages}; up to {peak} later pages at once",
        f"{len(expected)} pages of {PAGE_SIZE}",
        None,
        pages == expected and (len(expected) <= 2 or peak > 1),
        f"{items} items; with each page held {ms(hold)} upstream the call took {ms(took)} (page 1 then the rest "
        f"together: ≥ {ms(hold * min(2, len(expected)))}; one page at a time: ≥ {ms(hold * len(expected))})",
        pages=pages,
        peak=peak,
    )


async def stub_section(cfg: Config, stub: Stub, results: Results, errlog: TextIO, floor_kib: float | None) -> None:
    direct = Direct(stub.url, STUB_KEY)
    try:
        async with mcp_server(stub.url, STUB_KEY, errlog) as server:
            ids = [base_id(n) for n in range(3)]
            files = [file_id(n % 3, n) for n in range(10)]

            def search(n: int) -> Awaitable[object]:
                return server.call("knowledge_search", {"query": f"query {n}", "knowledge_ids": ids, "top_k": TOP_K})

            ops: dict[str, tuple[Call, Call]] = {
                "search": (search, lambda n: direct.search(ids, f"query {n}", TOP_K)),
                "list": (lambda n: server.call("knowledge_list", {}), lambda n: direct.list_knowledge()),
                "get_file": (
                    lambda n: server.call("knowledge_get_file", {"file_id": files[n % len(files)]}),
                    lambda n: direct.get_file(files[n % len(files)]),
                ),
            }
            log(f"stub: latency, {cfg.rounds} rounds")
            samples = await interleaved(cfg.rounds, ops)
            cpu = await cpu_per_call(server, ops, TOOLS, 100 if cfg.quick else 300)
            latency_row(results, "stub.search", samples["search"], None, f"top_k={TOP_K}, 3 bases; {cpu['search']}")
            pages = f"{STUB_BASES} bases in {math.ceil(STUB_BASES / PAGE_SIZE)} pages"
            latency_row(results, "stub.list", samples["list"], None, f"{pages}; {cpu['list']}")
            document = f"a {len(FILE_TEXT):,}-character document; {cpu['get_file']}"
            latency_row(results, "stub.get_file", samples["get_file"], None, document)

            await sdk_call_floor(cfg, stub, results, errlog)

            for width in (16, 64):
                log(f"stub: {width} concurrent searches, {cfg.rounds} rounds")

                def proxy_batch(n: int, width: int = width) -> Awaitable[object]:
                    return asyncio.gather(*(search(n * width + i) for i in range(width)))

                def direct_batch(n: int, width: int = width) -> Awaitable[object]:
                    return asyncio.gather(*(direct.search(ids, f"query {n * width + i}", TOP_K) for i in range(width)))

                batch = await interleaved(cfg.rounds, {"batch": (proxy_batch, direct_batch)})
                latency_row(results, f"stub.concurrent{width}", batch["batch"], 1.5 if width == 64 else None)

            log("stub: request counts and paging")
            await paging_row(
                results, "stub.list_requests", stub, server, "knowledge_list", "knowledge_list", {}, STUB_BASES
            )
            await paging_row(
                results,
                "stub.files_requests",
                stub,
                server,
                "knowledge_files",
                "knowledge_files",
                {"knowledge_id": ids[0], "limit": 200},  # every document in one answer: every page
                STUB_FILES,
            )
            await stub.reset()
            await server.call("knowledge_search", {"query": "every base", "top_k": TOP_K})
            entries = await stub.log()
            retrievals = [e for e in entries if e[0] == "retrieval"]
            lists = [e for e in entries if e[0] == "knowledge_list"]
            named = retrievals[0][4] if retrievals else 0
            results.set(
                "stub.search_all_requests",
                f"{len(retrievals)} retrieval request naming {named} bases",
                "1",
                None,
                len(retrievals) == 1 and named == STUB_BASES,
                f"plus {len(lists)} list requests to learn the {STUB_BASES} bases",
                retrievals=len(retrievals),
                list_requests=len(lists),
            )

            log("stub: reads in parallel, and reads during a write")
            await reads_parallel(cfg, results, stub, server, direct, search, ids)
            await reads_during_write(cfg, results, stub, server, direct, search, ids, files[0])

            log("stub: result size")
            size_row(results, "stub.search_size", await search_sizes(server, direct, ids, ["result size"]))

            if floor_kib is not None:
                memory_row(
                    results,
                    "start.memory",
                    server.peak_rss_kib(),
                    floor_kib,
                    f"after every stub measurement above ({cfg.rounds} rounds, 64 concurrent searches)",
                )
    finally:
        await direct.aclose()


async def sdk_call_floor(cfg: Config, stub: Stub, results: Results, errlog: TextIO) -> None:
    """What one tool call costs on this SDK at all: the minimal server echoing a document-sized text."""
    log("stub: tool calls to the minimal server, for reference")
    async with mcp_server(stub.url, STUB_KEY, errlog, MINIMAL_SERVER) as minimal:
        arguments = {"text": FILE_TEXT}
        for _ in range(3):
            await minimal.call("echo", arguments)
        calls = 100 if cfg.quick else 300
        server_before, client_before = cpu_seconds(minimal.pid), cpu_seconds()
        times = [await timed(minimal.call("echo", arguments)) for _ in range(calls)]
        server_cpu, client_cpu = cpu_seconds(minimal.pid) - server_before, cpu_seconds() - client_before
    results.set(
        "stub.sdk_call_floor",
        ms(median(times)),
        "—",
        None,
        None,
        f"CPU per call: server {ms(server_cpu / calls)} + MCP client {ms(client_cpu / calls)}; part of every "
        "tool call above",
        seconds=times,
    )


def schema_check_seconds(schema: dict[str, Any], instance: object, times: int = 20) -> float:
    """How long one check of `instance` against an output schema takes, done the way the SDK's `ClientSession`
    does it for every tool result (a compiled jsonschema validator and `best_match`)."""
    validators: Any = importlib.import_module("jsonschema.validators")
    exceptions: Any = importlib.import_module("jsonschema.exceptions")
    referencing: Any = importlib.import_module("referencing")
    validator = validators.validator_for(schema)(schema, registry=referencing.Registry())
    started = time.thread_time()  # CPU time: comparable with the CPU figures it is shown next to
    for _ in range(times):
        if exceptions.best_match(validator.iter_errors(instance)) is not None:
            raise BenchError("a tool result does not match its output schema")
    return (time.thread_time() - started) / times


async def cpu_per_call(
    server: Server, ops: dict[str, tuple[Call, Call]], tools: dict[str, str], calls: int
) -> dict[str, str]:
    """Where a call's time goes: CPU seconds per call in the server process and in this (client) process, read
    from /proc around `calls` calls in a row, with the part of the client's that is the output-schema check; the
    same for the direct calls (this process only). `tools` names the tool behind each operation."""
    schemas = {tool.name: tool.output_schema for tool in (await server.session.list_tools()).tools}
    notes = {}
    for name, (proxy, direct) in ops.items():
        server_before, client_before = cpu_seconds(server.pid), cpu_seconds()
        result: object = None
        for n in range(calls):
            result = await proxy(n)
        server_cpu, client_cpu = cpu_seconds(server.pid) - server_before, cpu_seconds() - client_before
        direct_before = cpu_seconds()
        for n in range(calls):
            await direct(n)
        direct_cpu = cpu_seconds() - direct_before
        schema = schemas.get(tools[name])
        check = ""
        if schema is not None and isinstance(result, CallToolResult) and result.structured_content is not None:
            check = f" (its output-schema check {ms(schema_check_seconds(schema, result.structured_content))})"
        notes[name] = (
            f"CPU per call: server {ms(server_cpu / calls)} + MCP client {ms(client_cpu / calls)}{check}, "
            f"direct client {ms(direct_cpu / calls)}"
        )
    return notes


async def reads_parallel(
    cfg: Config,
    results: Results,
    stub: Stub,
    server: Server,
    direct: Direct,
    search: Callable[[int], Awaitable[object]],
    ids: list[str],
) -> None:
    width = 16
    await stub.hold(retrieval=cfg.hold)
    try:
        await stub.reset()
        proxy_wall = await timed(asyncio.gather(*(search(i) for i in range(width))))
        proxy_peak = peak_overlap([(s, e) for r, _, s, e, _ in await stub.log() if r == "retrieval"])
        await stub.reset()
        direct_wall = await timed(asyncio.gather(*(direct.search(ids, f"q {i}", TOP_K) for i in range(width))))
        direct_peak = peak_overlap([(s, e) for r, _, s, e, _ in await stub.log() if r == "retrieval"])
    finally:
        await stub.hold()
    results.set(
        "stub.reads_parallel",
        f"{ms(proxy_wall)}, {proxy_peak} of {width} in flight at once",
        f"{ms(direct_wall)}, {direct_peak} in flight",
        proxy_wall / direct_wall,
        proxy_peak == width and proxy_wall < 2 * cfg.hold,
        f"the upstream holds each search {ms(cfg.hold)}; one at a time would take ≥ {ms(width * cfg.hold)}",
        proxy_peak=proxy_peak,
        proxy_seconds=proxy_wall,
        direct_seconds=direct_wall,
    )


async def reads_during_write(
    cfg: Config,
    results: Results,
    stub: Stub,
    server: Server,
    direct: Direct,
    search: Callable[[int], Awaitable[object]],
    ids: list[str],
    some_file: str,
) -> None:
    async def reads() -> list[float]:
        return list(
            await asyncio.gather(
                timed(search(0)),
                timed(server.call("knowledge_list", {})),
                timed(server.call("knowledge_get_file", {"file_id": some_file})),
            )
        )

    alone = median([max(await reads()) for _ in range(max(3, min(cfg.rounds, 9)))])
    await stub.hold(upload=cfg.write_hold)
    try:
        write = asyncio.create_task(
            server.call(
                "knowledge_add", {"knowledge_id": ids[0], "title": "Bench write", "text": "# Bench\n\nA write."}
            )
        )
        deadline = time.monotonic() + 10
        while await stub.inflight("upload") < 1:
            if write.done() or time.monotonic() > deadline:
                await write
                raise BenchError("the write never reached the upload")
            await asyncio.sleep(0.005)
        during = await reads()
        write_pending = not write.done()
        write_took = await timed(write)
    finally:
        await stub.hold()
    worst = max(during)
    results.set(
        "stub.reads_during_write",
        f"slowest of search, list, get_file: {ms(worst)}",
        f"{ms(alone)} with no write",
        worst / alone,
        write_pending and worst < cfg.write_hold / 2,
        f"knowledge_add's upload held {ms(cfg.write_hold)} upstream; the reads "
        + ("finished while it was still held" if write_pending else "finished only after it")
        + f" (the write ended {ms(write_took)} after the reads)",
        during_seconds=during,
        alone_seconds=alone,
    )


# -- a thousand bases ---------------------------------------------------------------------------------------------

SCALE_BASES = 1_003  # as many bases as issue 13 measured on Open WebUI 0.12.4
ANSWER_BUDGET = 10_000  # characters of a default knowledge_list answer, whatever the number of bases


async def list_scale_row(
    results: Results, key: str, server: Server, direct: Direct, rounds: int, query: str | None = None
) -> None:
    """knowledge_list's default call against reading every page directly: time and characters; then every base
    through the tool's cursor, and (`query`) a filtered call against Open WebUI's own search."""
    ops: dict[str, tuple[Call, Call]] = {
        "list": (lambda n: server.call("knowledge_list", {}), lambda n: direct.list_knowledge())
    }
    samples = (await interleaved(rounds, ops))["list"]
    answer = await server.call("knowledge_list", {})
    text = text_of(answer)
    body = json.loads(text)
    every, raw_chars = await direct.list_knowledge_sized()
    paged_chars, calls, seen, arguments = 0, 0, 0, {"limit": 200}
    while True:
        page = await server.call("knowledge_list", arguments)
        paged_chars += len(text_of(page))
        calls += 1
        seen += json.loads(text_of(page))["count"]
        cursor = json.loads(text_of(page))["next_cursor"]
        if cursor is None:
            break
        arguments = {"cursor": cursor, "limit": 200}
    proxy, plain = median(samples.proxy), median(samples.direct)
    notes = [
        f"{body['count']} of {body['total']} bases with next_cursor and hint; the whole tools/call result repeats "
        f"the text as structuredContent: {len(answer.model_dump_json(by_alias=True, exclude_none=True)):,} chars",
        f"every base through the cursor at limit=200: {calls} calls, {paged_chars:,} chars in all",
    ]
    if query is not None:
        filtered = text_of(await server.call("knowledge_list", {"query": query}))
        took = median([await timed(server.call("knowledge_list", {"query": query})) for _ in range(rounds)])
        own = median([await timed(direct.search_knowledge(query)) for _ in range(rounds)])
        notes.append(
            f"with query={query!r}: {ms(took)} and {len(filtered):,} chars ({json.loads(filtered)['total']} bases) vs "
            f"{ms(own)} for Open WebUI's own search"
        )
    if samples.failures:
        notes.append(f"{len(samples.failures)} call(s) FAILED and were taken again, first: {samples.failures[0]}")
    results.set(
        key,
        f"{ms(proxy)}, {len(text):,} chars",
        f"{ms(plain)}, {raw_chars:,} chars ({len(every):,} bases)",
        proxy / plain,
        len(text) <= ANSWER_BUDGET and body["total"] == len(every) == seen,
        "; ".join(notes),
        proxy_seconds=samples.proxy,
        direct_seconds=samples.direct,
        answer_chars=len(text),
        raw_chars=raw_chars,
        paged_chars=paged_chars,
        failures=samples.failures,
    )


async def stub_scale_section(cfg: Config, results: Results, errlog: TextIO) -> None:
    async with stub_upstream(SCALE_BASES, 1) as stub:
        direct = Direct(stub.url, STUB_KEY)
        try:
            async with mcp_server(stub.url, STUB_KEY, errlog) as server:
                log(f"stub: knowledge_list over {SCALE_BASES:,} bases")
                await list_scale_row(results, "stub.list_1000", server, direct, min(cfg.rounds, 10))
        finally:
            await direct.aclose()


def seed_bases(inst: Instance, count: int) -> list[str]:
    """`count` empty bases with names and descriptions like a team's, created a few at a time."""
    from devtools import openwebui_local

    def one(n: int) -> str:
        return openwebui_local.create_knowledge(inst, f"Team {n} handbook", f"Documents of team {n}: plans, notes")

    with ThreadPoolExecutor(corpus.SEED_CONCURRENCY) as pool:
        return list(pool.map(one, range(count)))


async def live_scale(cfg: Config, results: Results, errlog: TextIO, url: str, api_key: str, inst: Instance) -> None:
    """Top the live corpus up to SCALE_BASES bases, then the knowledge_list row."""
    direct = Direct(url, api_key)
    try:
        have = len(await direct.list_knowledge())
        started = time.monotonic()
        await asyncio.to_thread(seed_bases, inst, max(0, SCALE_BASES - have))
        log(f"live: {SCALE_BASES - have} more bases in {time.monotonic() - started:.0f} s; knowledge_list at scale")
        async with mcp_server(url, api_key, errlog) as server:
            await list_scale_row(results, "live.list_1000", server, direct, min(cfg.rounds, 10), query="team 7")
    finally:
        await direct.aclose()


# -- the real Open WebUI ------------------------------------------------------------------------------------------


async def live_section(
    cfg: Config, results: Results, errlog: TextIO, floor_kib: float | None, info: dict[str, Any]
) -> None:
    async with live_openwebui(cfg.version, cfg.live_docs, info) as live:
        inst, seeded = live.inst, live.seeded
        await measure_live(cfg, results, errlog, floor_kib, inst.url, inst.api_key, seeded)
        log("live: the first search of a session")
        await first_search_row(cfg, results, errlog, "live.search_first", inst, seeded.base_ids, corpus.QUERIES)
        await long_section(cfg, results, errlog, inst)
        if cfg.peer is not None:
            await peer_rows(cfg, results, errlog, inst, seeded.base_ids[0])
        if cfg.http:
            from bench import http_transport as http

            log("live: the HTTP section")
            upstream = http.Upstream(
                f"Open WebUI {info['openwebui']}", inst.url, inst.api_key, [inst.openwebui_pid, inst.embed_pid]
            )
            try:
                report = await http.http_section(http_config(cfg), upstream, http.live_workload(seeded, False), errlog)
            except Exception as exc:
                log(f"HTTP section failed: {exc!r}")
                info["http"] = f"failed: {exc}"
            else:
                info["http"] = report
                live.failed = any(t.errors for tallies in report.tallies.values() for t in tallies.values())
        await live_scale(cfg, results, errlog, inst.url, inst.api_key, inst)
        live.failed |= any(row.data.get("failures") for row in results.rows.values() if row.spec.section == "live")


async def measure_live(
    cfg: Config,
    results: Results,
    errlog: TextIO,
    floor_kib: float | None,
    url: str,
    api_key: str,
    seeded: corpus.Corpus,
) -> None:
    direct = Direct(url, api_key)
    try:
        async with mcp_server(url, api_key, errlog) as server:
            ids = seeded.base_ids
            all_files = list(seeded.files.values())
            files = all_files[:: max(1, len(all_files) // 10)]
            queries = corpus.QUERIES

            def search(n: int) -> Awaitable[object]:
                query = queries[n % len(queries)]
                return server.call("knowledge_search", {"query": query, "knowledge_ids": ids, "top_k": TOP_K})

            def direct_search(n: int) -> Awaitable[object]:
                return direct.search(ids, queries[n % len(queries)], TOP_K)

            ops: dict[str, tuple[Call, Call]] = {
                "search": (search, direct_search),
                "list": (lambda n: server.call("knowledge_list", {}), lambda n: direct.list_knowledge()),
                "get_file": (
                    lambda n: server.call("knowledge_get_file", {"file_id": files[n % len(files)]}),
                    lambda n: direct.get_file(files[n % len(files)]),
                ),
            }
            for n in range(len(queries)):  # each query's documents read for citations once: the steady state
                await search(n)
            log(f"live: latency, {cfg.rounds} rounds")
            samples = await interleaved(cfg.rounds, ops)
            cpu = await cpu_per_call(server, ops, TOOLS, 30 if cfg.quick else 100)
            where = f"top_k={TOP_K} over {len(ids)} bases, {len(queries)} queries in turn, each searched once before"
            latency_row(results, "live.search", samples["search"], 1.10, f"{where}; {cpu['search']}")
            latency_row(results, "live.list", samples["list"], 1.10, f"{len(ids)} bases; {cpu['list']}")
            in_turn = f"{len(files)} documents in turn; {cpu['get_file']}"
            latency_row(results, "live.get_file", samples["get_file"], 1.10, in_turn)

            for width, rounds in ((16, cfg.rounds), (64, max(2, cfg.rounds // 3))):
                log(f"live: {width} concurrent searches, {rounds} rounds")

                def proxy_batch(n: int, width: int = width) -> Awaitable[object]:
                    return asyncio.gather(*(search(n * width + i) for i in range(width)))

                def direct_batch(n: int, width: int = width) -> Awaitable[object]:
                    return asyncio.gather(*(direct_search(n * width + i) for i in range(width)))

                batch = await interleaved(rounds, {"batch": (proxy_batch, direct_batch)})
                latency_row(results, f"live.concurrent{width}", batch["batch"], 1.05 if width == 16 else None)

            log("live: result sizes")
            size_row(results, "live.search_size", await search_sizes(server, direct, ids, queries))
            if floor_kib is not None:
                memory_row(
                    results, "live.memory", server.peak_rss_kib(), floor_kib, "after every live measurement above"
                )
    finally:
        await direct.aclose()


# -- search with citations: a session's first search, and long documents -----------------------------------------

LONG_DOCS = 4


async def first_search_row(
    cfg: Config, results: Results, errlog: TextIO, key: str, inst: Instance, ids: list[str], queries: list[str]
) -> None:
    """A session's first search (over stdio each client session is a new process): a new server process per sample,
    timed from its first `knowledge_search`, beside a new httpx client's query and then its reading of the hits'
    documents, four at a time (what the server must read to cite them)."""
    rounds = max(2, min(cfg.rounds, 10))
    proxy: list[float] = []
    asked: list[float] = []
    reads: list[float] = []
    documents: list[int] = []

    async def server_first(query: str) -> None:
        async with mcp_server(inst.url, inst.api_key, errlog) as server:
            arguments = {"query": query, "knowledge_ids": ids, "top_k": TOP_K}
            proxy.append(await timed(server.call("knowledge_search", arguments)))

    async def direct_first(query: str) -> None:
        direct = Direct(inst.url, inst.api_key)
        gate = asyncio.Semaphore(4)

        async def read(file_id: str) -> None:
            async with gate:
                await direct.get_file(file_id)

        try:
            started = time.perf_counter()
            answer = (await direct.search(ids, query, TOP_K)).json()
            asked.append(time.perf_counter() - started)
            hits = (answer.get("metadatas") or [[]])[0]
            files = list(dict.fromkeys(hit["file_id"] for hit in hits if hit.get("file_id")))
            started = time.perf_counter()
            await asyncio.gather(*(read(file_id) for file_id in files))
            reads.append(time.perf_counter() - started)
            documents.append(len(files))
        finally:
            await direct.aclose()

    for n in range(rounds):
        query = queries[n % len(queries)]
        first, second = (server_first, direct_first) if n % 2 == 0 else (direct_first, server_first)
        await first(query)
        await second(query)
    took, plain, read = median(proxy), median(asked), median(reads)
    results.set(
        key,
        ms(took),
        f"{ms(plain)} + {ms(read)} reading the hits' documents",
        took / plain,
        took <= 2 * plain + read,
        f"{rounds} sessions, queries in turn, top_k={TOP_K}; a median {median([float(d) for d in documents]):.0f} "
        f"documents hit; {took / (plain + read):.2f}× the query and the reads together",
        proxy_seconds=proxy,
        direct_seconds=asked,
        read_seconds=reads,
        documents=documents,
    )


def seed_long(inst: Instance, count: int, chars: int) -> list[str]:
    """A base of `count` long Markdown documents, as the list of bases to search."""
    from devtools import openwebui_local

    knowledge_id = openwebui_local.create_knowledge(
        inst, "Long documents", "Field manuals of over a million characters"
    )

    def one(n: int) -> None:
        document = longdocs.long_markdown(n, chars)
        metadata = {"title": document.title, "source": document.filename}
        openwebui_local.add_file(
            inst, knowledge_id, openwebui_local.upload_text(inst, document.filename, document.text, metadata)
        )

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, range(count)))
    return [knowledge_id]


async def long_section(cfg: Config, results: Results, errlog: TextIO, inst: Instance) -> None:
    """Search with citations over long documents: steady state (each document read and indexed once, before the
    samples), then a session's first search."""
    started = time.monotonic()
    ids = await asyncio.to_thread(seed_long, inst, LONG_DOCS, cfg.long_chars)
    log(f"live: {LONG_DOCS} documents of {cfg.long_chars:,} characters in {time.monotonic() - started:.0f} s")
    queries = [answer.line for n in range(LONG_DOCS) for answer in longdocs.long_markdown(n, cfg.long_chars).answers]
    direct = Direct(inst.url, inst.api_key)
    try:
        async with mcp_server(inst.url, inst.api_key, errlog) as server:

            def search(n: int) -> Awaitable[object]:
                arguments = {"query": queries[n % len(queries)], "knowledge_ids": ids, "top_k": TOP_K}
                return server.call("knowledge_search", arguments)

            for n in range(len(queries)):  # every document read and indexed once: what follows is the steady state
                await search(n)
            log(f"live: searches over long documents, {cfg.rounds} rounds")
            samples = await interleaved(
                cfg.rounds, {"search": (search, lambda n: direct.search(ids, queries[n % len(queries)], TOP_K))}
            )
            where = (
                f"{LONG_DOCS} Markdown documents of {cfg.long_chars:,} characters in one base, top_k={TOP_K}, "
                f"{len(queries)} queries in turn, their documents read and indexed before"
            )
            latency_row(results, "live.long_search", samples["search"], 1.15, where)
    finally:
        await direct.aclose()
    log("live: the first search of a session over long documents")
    await first_search_row(cfg, results, errlog, "live.long_search_first", inst, ids, queries)


async def peer_rows(cfg: Config, results: Results, errlog: TextIO, inst: Instance, base: str) -> None:
    """This server's search and the peer's over one base, each next to direct HTTP in the same rounds."""
    assert cfg.peer is not None
    log(f"live: side by side with {shlex.join(cfg.peer)}, {cfg.rounds} rounds")
    samples = await peers.side_by_side(inst.url, inst.api_key, errlog, cfg.peer, base, corpus.QUERIES, cfg.rounds)
    where = f"one base, top_k={TOP_K}, {len(corpus.QUERIES)} queries in turn, both servers in the same rounds"
    latency_row(results, "live.peer_ours", samples["ours"], 1.15, f"{where}; with citations")
    latency_row(results, "live.peer", samples["peer"], None, f"{where}; {shlex.join(cfg.peer)}, no citations")


# -- profile notes ------------------------------------------------------------------------------------------------

_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def _import_times(module: str) -> dict[str, tuple[int, int]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, check=True
    )
    times: dict[str, tuple[int, int]] = {}
    for line in done.stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            times[match.group(4)] = (int(match.group(1)), int(match.group(2)))
    return times


def startup_notes() -> list[str]:
    """Where the start-up time goes beyond the SDK's own import (one run each, microsecond clocks)."""
    server = _import_times("openwebui_rag_mcp.server")
    floor = _import_times("mcp.server.mcpserver")
    extra = {name: t for name, t in server.items() if name not in floor}
    top = sorted(extra.items(), key=lambda item: item[1][0], reverse=True)[:6]
    build = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from openwebui_rag_mcp.config import load_settings\n"
            "from openwebui_rag_mcp.server import create_server\n"
            "settings = load_settings({'OPENWEBUI_URL': 'http://127.0.0.1:9', 'OPENWEBUI_API_KEY': 'sk-x'})\n"
            "t = time.perf_counter(); create_server(settings); print(time.perf_counter() - t)\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        f"Start-up profile (`python -X importtime`, one run): importing `openwebui_rag_mcp.server` takes "
        f"{server['openwebui_rag_mcp.server'][1] / 1000:.0f} ms, of which the SDK (`mcp`) "
        f"{server.get('mcp', (0, 0))[1] / 1000:.0f} ms; a bare `import mcp.server.mcpserver` takes "
        f"{floor.get('mcp.server.mcpserver', (0, 0))[1] / 1000:.0f} ms. The {len(extra)} modules only the server "
        f"imports cost {sum(t[0] for t in extra.values()) / 1000:.0f} ms of their own, the largest: "
        + ", ".join(f"{name} {t[0] / 1000:.1f} ms" for name, t in top)
        + f". `create_server()` (tool schemas) then takes {float(build.stdout) * 1000:.0f} ms.",
    ]


# -- main -----------------------------------------------------------------------------------------------------------


async def run(cfg: Config, errlog: TextIO) -> tuple[Results, dict[str, Any], list[str]]:
    results = Results()
    info: dict[str, Any] = {"openwebui": "not run (--no-live)", "load_start": load_average()}
    notes: list[str] = []
    floor_kib: float | None = None
    async with stub_upstream(STUB_BASES, STUB_FILES) as stub:
        try:
            floor_kib = await start_section(cfg, stub, results, errlog)
        except Exception as exc:
            log(f"start section failed: {exc!r}")
            results.fail("start", f"failed: {exc}")
        try:
            await stub_section(cfg, stub, results, errlog, floor_kib)
        except Exception as exc:
            log(f"stub section failed: {exc!r}")
            results.fail("stub", f"failed: {exc}")
    try:
        await stub_scale_section(cfg, results, errlog)
    except Exception as exc:
        log(f"stub scale row failed: {exc!r}")
        results.fail("stub", f"failed: {exc}")
    if cfg.live:
        try:
            await live_section(cfg, results, errlog, floor_kib, info)
        except Exception as exc:
            log(f"live section failed: {exc!r}")
            info["openwebui"] = f"{cfg.version}, failed: {exc}"
            results.fail("live", f"failed: {exc}")
    else:
        results.skip("live", "not run (--no-live)")
        if cfg.http:
            from bench import http_transport as http

            log("stub: the HTTP section")
            try:
                info["http"] = await http.against_stub(http_config(cfg), errlog)
            except Exception as exc:
                log(f"HTTP section failed: {exc!r}")
                info["http"] = f"failed: {exc}"
    if not cfg.quick:
        try:
            notes += startup_notes()
        except (subprocess.CalledProcessError, KeyError, ValueError) as exc:
            notes.append(f"start-up profile failed: {exc}")
    info["load_end"] = load_average()
    notes.append(
        "Against the stub a direct request costs only httpx and loopback, so the ratios there are large by "
        "construction: the difference is the server's own cost per call (stdio transport, JSON-RPC, argument and "
        "result validation in the SDK, normalising, the client's schema check), which the minimal server's row "
        "puts in proportion. Ratios against the real Open WebUI are what an agent notices."
    )
    return results, info, notes


def main(argv: list[str] | None = None) -> int:
    from devtools.openwebui_local import NEWEST

    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny configuration: few rounds, a small corpus")
    parser.add_argument("--no-live", action="store_true", help="skip the real Open WebUI (stub upstream only)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds per measurement (30; --quick: 3)")
    parser.add_argument("--json", type=Path, default=None, help="also write every sample as JSON here")
    parser.add_argument(
        "--markdown", type=Path, default=None, help="write the table here (default bench/RESULTS.md without --quick)"
    )
    parser.add_argument("--openwebui-version", default=NEWEST, help=f"the Open WebUI release to run ({NEWEST})")
    parser.add_argument(
        "--http",
        action="store_true",
        help="add the HTTP section (bench/http_transport.py: 1, 16, 64 callers, one replica and two; against the "
        "stub with --no-live)",
    )
    parser.add_argument(
        "--peer",
        type=peers.command_of,
        default=None,
        help="the command that starts another Open WebUI MCP server over stdio, searched side by side (bench/peers.py)",
    )
    args = parser.parse_args(argv)
    rounds = args.repeats or (3 if args.quick else 30)
    if rounds < 1:
        parser.error("--repeats must be at least 1")
    cfg = Config(
        quick=args.quick,
        live=not args.no_live,
        rounds=rounds,
        cold_rounds=rounds if args.quick else min(rounds, 20),
        live_docs=30 if args.quick else 160,
        version=args.openwebui_version,
        hold=0.5,
        write_hold=0.5 if args.quick else 1.0,
        http=args.http,
        long_chars=100_000 if args.quick else longdocs.LONG_CHARS,
        peer=args.peer,
    )
    if not SCRIPT.exists():
        print(f"error: {SCRIPT} is missing; install the package into this environment first", file=sys.stderr)
        return 2
    started = time.monotonic()
    handle, errlog_path = tempfile.mkstemp(prefix="openwebui-rag-mcp-bench-", suffix=".stderr")
    log(f"the servers' stderr goes to {errlog_path}")
    with open(handle, "w", encoding="utf-8") as errlog:
        results, info, notes = asyncio.run(run(cfg, errlog))
    info.update(
        machine=machine(),
        command=" ".join(["python -m bench.run", shlex.join(argv if argv is not None else sys.argv[1:])]).strip(),
        rounds=cfg.rounds,
        cold_rounds=cfg.cold_rounds,
        seconds=time.monotonic() - started,
    )
    http_report = info.pop("http", None)
    sections = []
    if isinstance(http_report, str):
        sections.append(f"## Over Streamable HTTP\n\nThe HTTP section {http_report}")
    elif http_report is not None:
        sections.append(http_report.markdown())
    table = markdown(results, info, notes, sections)
    print(table)
    target = args.markdown or (None if args.quick else DEFAULT_RESULTS)
    if target is not None:
        target.write_text(table, encoding="utf-8")
        log(f"wrote {target}")
    if args.json is not None:
        rows = [
            {
                "key": row.key,
                "section": row.spec.section,
                "label": row.spec.label,
                "target": row.spec.target,
                "proxy": row.proxy,
                "direct": row.direct,
                "ratio": row.ratio,
                "verdict": row.verdict,
                "note": row.note,
                "data": row.data,
            }
            for row in results.rows.values()
        ]
        document = {"info": info, "rows": rows, "notes": notes}
        if http_report is not None:
            document["http"] = http_report if isinstance(http_report, str) else http_report.as_json()
        args.json.write_text(json.dumps(document, indent=2), encoding="utf-8")
        log(f"wrote {args.json}")
    failed = any(row.verdict == "error" for row in results.rows.values()) or isinstance(http_report, str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
