"""Several replicas of the HTTP transport behind nginx, writes serialised through Redis (0.6.5 and 0.12.4).

``devtools/replicas.py`` starts, on loopback, redis-server, three server processes (service mode: the admin's key
upstream, callers admitted by a token) and nginx in front of them (``proxy_buffering off``, HTTP/1.1 keep-alive to
the replicas, a long read timeout). Twenty ``knowledge_add`` calls to one base at once go through nginx, which
spreads them over the replicas (its access log names the replica of every ``tools/call``); Open WebUI must list
every one that was acknowledged.

0.6.5 adds a file to a base by read-modify-write of the base's ``data.file_ids`` (read the list, embed the file,
write the list back: ``routers/knowledge.py``, ``add_file_to_knowledge_by_id``), so two attaches to one base that
overlap lose one of the two files. The control run shows it: the same twenty calls over three replicas *without*
Redis (each replica locks only its own writes) lose documents. 0.12.4 links a file with a row of its own
(``knowledge_file``), so nothing is there to lose; its control passes without doing anything.

nginx and redis-server are Debian's packages. If one is missing, these tests fail and say to install them
(``.ci/run`` does); they never skip.
"""

from __future__ import annotations

import re
import secrets
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from devtools import openwebui_local as owui
from devtools import replicas
from devtools.openwebui_local import Instance
from devtools.replicas import MissingBinary, Stack
from tests.live.http import lazy_openwebui, mcp_http, not_on_this_release

pytestmark = pytest.mark.anyio

RELEASES = ("0.6.5", "0.12.4")
WHY = "0.6.5 updates a base by read-modify-write, 0.12.4 is the newest; 0.6.43 is covered by test_live_http"
CONTROL_RELEASES = ("0.6.5",)
CONTROL_WHY = "only 0.6.5 (of the releases tested) updates a base's file list by read-modify-write"
CALLS = 20
REPLICAS = 3
CALL_DEADLINE = 600.0
PER_PROCESS_WARNING = "write locks are per process"


@dataclass
class Outcome:
    acknowledged: list[str] = field(default_factory=list)  # file ids of the calls that returned ok
    refused: list[str] = field(default_factory=list)  # tool errors (code, outcome)
    failed: list[str] = field(default_factory=list)  # transport failures (the call's fate unknown to the caller)
    acked_at: list[float] = field(default_factory=list)
    some_acknowledged: anyio.Event = field(default_factory=anyio.Event)  # set at the third acknowledgement


def stack_for(inst: Instance, workdir: Path, *, redis: bool) -> tuple[Stack, str]:
    token = secrets.token_urlsafe(24)
    variables = {
        "OPENWEBUI_URL": inst.url,
        "OPENWEBUI_MCP_AUTH": "service",
        "OPENWEBUI_API_KEY": inst.api_key,
        "OPENWEBUI_MCP_TOKENS": token,
        "OPENWEBUI_TIMEOUT": "60",
    }
    problem = ""
    try:
        return replicas.start_stack(workdir, variables, replicas=REPLICAS, redis=redis), token
    except MissingBinary as exc:
        problem = str(exc)
    except RuntimeError as exc:
        problem = f"the replicas did not start: {exc}"
    pytest.fail(problem, pytrace=False)


async def add_many(
    url: str, token: str, knowledge_id: str, outcome: Outcome, started: float, *, stagger: float = 0.0
) -> None:
    """CALLS knowledge_add calls to one base at once, each from a caller (an MCP client) of its own; with
    ``stagger``, the calls start that many seconds apart (and still overlap)."""

    async def one(number: int) -> None:
        await anyio.sleep(number * stagger)
        text = f"# Note {number}\n\nConcurrent write {uuid.uuid4().hex} to one base."
        arguments = {"knowledge_id": knowledge_id, "text": text, "title": f"note {number}"}
        try:
            async with mcp_http(url, token) as server:
                is_error, body = await server.call("knowledge_add", arguments)
        except Exception as exc:  # the caller cannot tell what happened: not acknowledged
            outcome.failed.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            return
        if is_error:
            outcome.refused.append(f"{body.get('code')}/{body.get('outcome')}: {body.get('message', '')[:200]}")
        else:
            outcome.acknowledged.append(body["file_id"])
            outcome.acked_at.append(time.monotonic() - started)
            if len(outcome.acknowledged) == 3:
                outcome.some_acknowledged.set()

    with anyio.fail_after(CALL_DEADLINE):
        async with anyio.create_task_group() as group:
            for number in range(CALLS):
                group.start_soon(one, number)


def calls_per_replica(stack: Stack) -> Counter[str]:
    """How many ``tools/call`` POSTs nginx passed to each replica (its access log names the upstream)."""
    counts: Counter[str] = Counter()
    for line in replicas.nginx_access(stack.nginx.log_path.parent):
        if "mcp_method=tools/call" in line:
            match = re.search(r"upstream=(.*?) mcp_method=", line)
            for address in (match[1] if match else "-").split(", "):  # "a, b": a failed, b answered
                counts[address] += 1
    return counts


async def test_twenty_concurrent_adds_through_nginx_all_land(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"replicas-{uuid.uuid4().hex[:8]}", "twenty writes at once")
    stack, token = stack_for(inst, tmp_path, redis=True)
    outcome = Outcome()
    started = time.monotonic()
    try:
        await add_many(stack.url, token, knowledge_id, outcome, started)
    finally:
        stack.stop()
    took = time.monotonic() - started
    spread = calls_per_replica(stack)
    print(f"\n{CALLS} adds through nginx over {REPLICAS} replicas with Redis in {took:.1f} s; per replica {spread}")
    assert not outcome.failed, outcome.failed
    assert not outcome.refused, outcome.refused
    assert len(outcome.acknowledged) == CALLS
    assert owui.files_of(inst, knowledge_id) == set(outcome.acknowledged), "Open WebUI lost acknowledged documents"
    assert len([address for address, count in spread.items() if count]) >= 2, f"not spread over replicas: {spread}"
    assert sum(spread.values()) == CALLS
    for replica in stack.replicas:
        assert PER_PROCESS_WARNING not in replica.log(), "a replica ran without the shared (Redis) lock"


async def test_control_without_redis_loses_documents(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The same twenty calls over the same replicas, without REDIS_URL: each replica serialises only its own writes,
    so attaches from different replicas overlap and 0.6.5's read-modify-write of the base loses files that were
    acknowledged. This shows that the shared lock is what the test above measures."""
    if not_on_this_release(CONTROL_RELEASES, CONTROL_WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"replicas-control-{uuid.uuid4().hex[:8]}", "no shared lock")
    stack, token = stack_for(inst, tmp_path, redis=False)
    outcome = Outcome()
    started = time.monotonic()
    try:
        await add_many(stack.url, token, knowledge_id, outcome, started)
    finally:
        stack.stop()
    listed = owui.files_of(inst, knowledge_id)
    lost = set(outcome.acknowledged) - listed
    print(
        f"\ncontrol without Redis: {len(outcome.acknowledged)} acknowledged, {len(listed)} listed, {len(lost)} lost "
        f"in {time.monotonic() - started:.1f} s; refused {outcome.refused}, failed {outcome.failed}; "
        f"per replica {calls_per_replica(stack)}"
    )
    assert all(PER_PROCESS_WARNING in replica.log() for replica in stack.replicas)
    assert lost, "without the shared lock no document was lost: the control shows nothing (see the docstring)"


async def test_stopping_a_replica_midway_loses_nothing_acknowledged(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """SIGTERM to one replica while the twenty calls (started a quarter of a second apart) run: it finishes what it
    serves and exits; nginx sends the later calls to the others. Every call that returned ok is listed by Open
    WebUI; a call cut off may fail, but none may report ok for a document that is not there."""
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"replicas-stop-{uuid.uuid4().hex[:8]}", "one replica stops")
    stack, token = stack_for(inst, tmp_path, redis=True)
    victim = stack.replicas[0]
    outcome = Outcome()
    started = time.monotonic()
    stopped_at = 0.0
    exit_code: int | None = None

    async def stop_one_midway() -> None:
        nonlocal stopped_at, exit_code
        await outcome.some_acknowledged.wait()
        stopped_at = time.monotonic() - started
        victim.signal(signal.SIGTERM)
        exit_code = await anyio.to_thread.run_sync(victim.wait, 300.0)

    try:
        with anyio.fail_after(CALL_DEADLINE):
            async with anyio.create_task_group() as group:
                group.start_soon(stop_one_midway)
                await add_many(stack.url, token, knowledge_id, outcome, started, stagger=0.25)
    finally:
        stack.stop()
    listed = owui.files_of(inst, knowledge_id)
    after = [at for at in outcome.acked_at if at > stopped_at]
    print(
        f"\nreplica stopped at {stopped_at:.1f} s (exit {exit_code}); {len(outcome.acknowledged)} acknowledged "
        f"({len(after)} after the stop), {len(outcome.refused)} refused, {len(outcome.failed)} failed "
        f"{outcome.failed[:3]}; {len(listed)} listed; per replica {calls_per_replica(stack)}"
    )
    assert set(outcome.acknowledged) <= listed, "an acknowledged document is missing"
    assert len(outcome.acknowledged) + len(outcome.refused) + len(outcome.failed) == CALLS
    assert exit_code in (0, -signal.SIGTERM), f"the replica did not shut down gracefully: {exit_code}"
    assert after, "no call was acknowledged after the replica stopped: the others did not take over"
    assert len(outcome.acknowledged) >= CALLS // 2, (outcome.failed, outcome.refused)
