"""The rows of the benchmark, the machine it ran on, and the markdown table."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.stub import FILE_TEXT

REPO = Path(__file__).resolve().parent.parent

SECTIONS = {
    "start": "Start and footprint",
    "stub": "Against an instant stub upstream (exposes the server's own overhead)",
    "live": "Against a real Open WebUI with a seeded corpus",
}


@dataclass(frozen=True, slots=True)
class Spec:
    key: str
    section: str
    label: str
    target: str  # "" for a measurement without a target


# Every row the benchmark reports, in order. A row that was not measured still appears, marked "not run".
ROWS = [
    Spec(
        "start.cold",
        "start",
        "Cold start: spawn to initialize + tools/list (vs bare `import mcp.server.mcpserver`)",
        "≤ 1.15× floor",
    ),
    Spec(
        "start.cold_minimal",
        "start",
        "Cold start of a minimal server on the same SDK (one tool), same measurement, for reference",
        "",
    ),
    Spec(
        "start.memory", "start", "Peak RSS (VmHWM) of the server after the stub workload (vs the floor)", "≤ 1.2× floor"
    ),
    Spec("start.tools_list", "start", "tools/list answer, aliases included (characters on the wire)", "≤ 13,200 chars"),
    Spec(
        "start.tools_list_no_aliases",
        "start",
        "tools/list answer without the aliases (`OPENWEBUI_DISABLED_TOOLS` naming all four)",
        "≤ 8,000 chars",
    ),
    Spec("stub.search", "stub", "knowledge_search, one call", ""),
    Spec("stub.list", "stub", "knowledge_list, one call (every page)", ""),
    Spec("stub.get_file", "stub", "knowledge_get_file, one call", ""),
    Spec(
        "stub.sdk_call_floor",
        "stub",
        f"A tool call to the minimal server (echo of a {len(FILE_TEXT):,}-character text), for reference",
        "",
    ),
    Spec("stub.concurrent16", "stub", "16 concurrent searches, one session", ""),
    Spec("stub.concurrent64", "stub", "64 concurrent searches, one session", "≤ 1.5× direct"),
    Spec(
        "stub.reads_parallel",
        "stub",
        "16 concurrent searches, upstream holding each one (reads never wait for each other)",
        "all in flight at once",
    ),
    Spec(
        "stub.reads_during_write",
        "stub",
        "Reads while a knowledge_add is held upstream (reads never wait for a write)",
        "reads done before the write",
    ),
    Spec(
        "stub.list_requests",
        "stub",
        "Requests for knowledge_list over several pages",
        "1 per page, later pages concurrent",
    ),
    Spec(
        "stub.files_requests",
        "stub",
        "Requests for knowledge_files (limit=200: every page) of one base",
        "1 per page, later pages concurrent",
    ),
    Spec("stub.search_all_requests", "stub", "Retrieval requests for a search over all bases", "exactly 1"),
    Spec(
        "stub.list_1000",
        "stub",
        "knowledge_list over 1,003 bases, default call (vs every page read directly): time, characters",
        "answer ≤ 10,000 chars",
    ),
    Spec("stub.search_size", "stub", "Search result vs Open WebUI's raw answer (characters)", "≤ 1.0× raw"),
    Spec("live.search", "live", "knowledge_search, one call", "≤ 1.10× direct"),
    Spec(
        "live.search_first",
        "live",
        "knowledge_search, first call of a session (a new server process: nothing read for citations yet)",
        "≤ 2× direct + reads",
    ),
    Spec(
        "live.long_search",
        "live",
        "knowledge_search over long documents (4 of over 1 M characters), steady state",
        "≤ 1.15× direct",
    ),
    Spec(
        "live.long_search_first",
        "live",
        "knowledge_search over the long documents, first call of a session",
        "≤ 2× direct + reads",
    ),
    Spec(
        "live.peer_ours",
        "live",
        "knowledge_search over one base, beside the peer server (bench/peers.py), steady state",
        "≤ 1.15× direct, ≤ the peer",
    ),
    Spec("live.peer", "live", "the peer server's search over the same base (no citations)", ""),
    Spec("live.list", "live", "knowledge_list, one call", "≤ 1.10× direct"),
    Spec("live.get_file", "live", "knowledge_get_file, one call", "≤ 1.10× direct"),
    Spec(
        "live.list_1000",
        "live",
        "knowledge_list over 1,003 bases, default call (vs every page read directly): time, characters",
        "answer ≤ 10,000 chars",
    ),
    Spec("live.concurrent16", "live", "16 concurrent searches, one session", "≤ 1.05× direct"),
    Spec("live.concurrent64", "live", "64 concurrent searches, one session", ""),
    Spec(
        "live.search_size",
        "live",
        "Search result vs Open WebUI's raw answer, largest ratio over the queries",
        "≤ 1.0× raw",
    ),
    Spec(
        "live.memory", "live", "Peak RSS (VmHWM) of the server after the live workload (vs the floor)", "≤ 1.2× floor"
    ),
]
SPECS = {spec.key: spec for spec in ROWS}


@dataclass
class Row:
    key: str
    proxy: str = "—"
    direct: str = "—"
    ratio: float | None = None
    verdict: str = "not run"  # met, not met, info, not run, error
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> Spec:
        return SPECS[self.key]


class Results:
    def __init__(self) -> None:
        self.rows = {spec.key: Row(spec.key) for spec in ROWS}

    def set(
        self,
        key: str,
        proxy: str,
        direct: str,
        ratio: float | None,
        met: bool | None,
        note: str = "",
        **data: Any,
    ) -> None:
        """Record a row; `met` None means a measurement without a target."""
        verdict = "info" if met is None else "met" if met else "not met"
        self.rows[key] = Row(key, proxy, direct, ratio, verdict, note, data)

    def fail(self, section: str, reason: str) -> None:
        for row in self.rows.values():
            if row.spec.section == section and row.verdict == "not run":
                row.verdict = "error"
                row.note = reason

    def skip(self, section: str, reason: str) -> None:
        for row in self.rows.values():
            if row.spec.section == section and row.verdict == "not run":
                row.note = reason


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return float("nan")


def _git() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=REPO, capture_output=True, text=True)
        return commit + (" with uncommitted changes in src/" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> str:
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def machine() -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(_memory_gib(), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "mcp": _version("mcp"),
        "httpx": _version("httpx"),
        "pydantic": _version("pydantic"),
        "server": f"openwebui-rag-mcp {_version('openwebui-rag-mcp')} (git {_git()})",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _verdict(row: Row) -> str:
    return {"met": "**met**", "not met": "**NOT MET**", "info": "—"}.get(row.verdict, row.verdict)


def markdown(results: Results, info: dict[str, Any], notes: list[str], sections: Sequence[str] = ()) -> str:
    """The whole report; `sections` (markdown, each with its own heading) go after the tables, before the targets."""
    m = info["machine"]
    lines = [
        "# openwebui-rag-mcp benchmark",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['memory_gib']} GiB RAM, "
        f"{m['os']}; {m['python']}; mcp {m['mcp']}, httpx {m['httpx']}, pydantic {m['pydantic']}.",
        f"Load average (1 / 5 / 15 min) at the start {info['load_start']}, at the end {info['load_end']}.",
        f"Server: {m['server']}. Open WebUI: {info['openwebui']}.",
        f"Run: {m['date']}; `{info['command']}`; {info['rounds']} interleaved rounds per measurement "
        f"({info['cold_rounds']} for cold start); took {info['seconds']:.0f} s.",
        "",
        "Method: every measurement pairs the MCP server (the console script over stdio, driven by the SDK's "
        "`ClientSession`) with the same HTTP requests made directly with one `httpx.AsyncClient`, in the same run, "
        "interleaved (the order alternates each round). Times are medians; ratios are proxy median / direct "
        "median. Everything is on 127.0.0.1. Targets are reported, not enforced.",
        "",
    ]
    for section, title in SECTIONS.items():
        lines += [
            f"## {title}",
            "",
            "| Measurement | openwebui-rag-mcp | Direct / floor | Ratio | Target | Verdict |",
            "|---|---|---|---|---|---|",
        ]
        for row in results.rows.values():
            if row.spec.section != section:
                continue
            label = row.spec.label + (f" — {row.note}" if row.note else "")
            lines.append(
                f"| {label} | {row.proxy} | {row.direct} | {_ratio(row.ratio)} | {row.spec.target or '—'} | "
                f"{_verdict(row)} |"
            )
        lines.append("")
    for section in sections:
        lines += [section.rstrip("\n"), ""]
    judged = [r for r in results.rows.values() if r.spec.target]
    met = [r for r in judged if r.verdict == "met"]
    missed = [r for r in judged if r.verdict == "not met"]
    lines += [
        "## Targets",
        "",
        f"{len(met)} of {len(judged)} targets met"
        + (f"; not met: {', '.join(r.key for r in missed)}" if missed else "")
        + (
            f"; not measured: {sum(r.verdict in ('not run', 'error') for r in judged)}"
            if len(met) + len(missed) < len(judged)
            else ""
        )
        + ".",
        "",
    ]
    if notes:
        lines += ["## Notes", "", *[f"- {note}" for note in notes], ""]
    return "\n".join(lines)
