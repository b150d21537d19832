"""What the benchmark's stdio run (`bench/run.py`) and its HTTP section (`bench/http_transport.py`) share: the stub's
key, progress on stderr, interleaved sampling, and a started and seeded Open WebUI."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import corpus
from bench.measure import BenchError, timed
from devtools.openwebui_local import Instance

STUB_KEY = "sk-bench-stub"
TOP_K = 8
LIVE_BASES = 3  # plus one for the multilingual documents

Call = Callable[[int], Awaitable[object]]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Samples:
    """Interleaved timings of one operation both ways, and the failures that made a sample be taken again."""

    proxy: list[float] = field(default_factory=list)
    direct: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


ATTEMPTS = 3  # a sample whose call failed is taken again, at most this many times in all


async def sample(n: int, call: Call, failures: list[str], way: str) -> float:
    """The time of one call. A failed call is recorded and the sample taken again: the failure is a finding
    (reported in the row), but one flaky call should not cost the whole run."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await timed(call(n))
        except (BenchError, httpx.HTTPError, ExceptionGroup) as exc:
            failures.append(f"{way}: {_failure(exc)}")
            log(f"a {way} call failed (attempt {attempt} of {ATTEMPTS}): {_failure(exc)}")
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _failure(exc: BaseException) -> str:
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc)[:300] or type(exc).__name__


async def interleaved(rounds: int, ops: dict[str, tuple[Call, Call]]) -> dict[str, Samples]:
    """Warm each operation up once, then `rounds` rounds that each take one pair of samples of every operation;
    which way goes first alternates every round, so drift hits both alike."""
    samples = {name: Samples() for name in ops}
    for name, (proxy, direct) in ops.items():
        await sample(0, proxy, samples[name].failures, "MCP")
        await sample(0, direct, samples[name].failures, "direct")
    for n in range(rounds):
        for name, (proxy, direct) in ops.items():
            found = samples[name]
            if n % 2 == 0:
                found.proxy.append(await sample(n, proxy, found.failures, "MCP"))
                found.direct.append(await sample(n, direct, found.failures, "direct"))
            else:
                found.direct.append(await sample(n, direct, found.failures, "direct"))
                found.proxy.append(await sample(n, proxy, found.failures, "MCP"))
    return samples


@dataclass
class LiveRun:
    """A started Open WebUI with its seeded corpus; set `failed` to keep Open WebUI's log when it stops."""

    inst: Instance
    seeded: corpus.Corpus
    failed: bool = False


@asynccontextmanager
async def live_openwebui(version: str, docs: int, info: dict[str, Any]) -> AsyncIterator[LiveRun]:
    """Install (if needed) and start Open WebUI `version` with a fresh data directory, seed `docs` standard-library
    documents plus the multilingual ones; stop it (and delete its data) at the end. Describes it in
    `info["openwebui"]`."""
    from devtools import openwebui_local

    log(f"live: installing (if needed) and starting Open WebUI {version}")
    await asyncio.to_thread(openwebui_local.install, version)
    workdir = Path(tempfile.mkdtemp(prefix="openwebui-rag-mcp-bench-"))
    started = time.monotonic()
    inst = await asyncio.to_thread(openwebui_local.start, version, workdir)
    live: LiveRun | None = None
    try:
        log(f"live: Open WebUI {inst.version} up at {inst.url} in {time.monotonic() - started:.0f} s; building corpus")
        documents = await asyncio.to_thread(corpus.stdlib_documents, docs)
        documents += corpus.MULTILINGUAL
        started = time.monotonic()
        log(f"live: seeding {len(documents)} documents ({corpus.SEED_CONCURRENCY} at a time)")
        seeded = await asyncio.to_thread(corpus.seed, inst, documents, LIVE_BASES)
        seconds = time.monotonic() - started
        languages = ", ".join(f"{count} {lang}" for lang, count in seeded.languages.items())
        info["openwebui"] = (
            f"{inst.version}, fresh data directory, fake embeddings (devtools.fake_embeddings); {len(seeded.files)} "
            f"documents ({languages}; the English ones are standard-library docstrings) in {len(seeded.bases)} "
            f"bases, seeded in {seconds:.0f} s"
        )
        live = LiveRun(inst, seeded)
        yield live
    except BaseException:
        if live is not None:
            live.failed = True
        raise
    finally:
        log("live: stopping Open WebUI")
        await asyncio.to_thread(openwebui_local.stop, inst)
        if live is None or live.failed:  # keep Open WebUI's own account of what went wrong
            kept = Path(tempfile.mkdtemp(prefix="openwebui-rag-mcp-bench-log-")) / "openwebui.log"
            shutil.copy(inst.log_path, kept)
            log(f"live: calls failed; Open WebUI's log is kept at {kept}")
        shutil.rmtree(workdir, ignore_errors=True)
