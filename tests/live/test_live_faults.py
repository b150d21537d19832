"""The fault tier: real faults against a real Open WebUI (0.6.5 and 0.12.4), and what the writes promise under them.

- A replica killed with SIGKILL at a chosen point of a write (the upload sent but its answer not yet read; between
  upload and attach; while Open WebUI processes the file), held there by a proxy in front of Open WebUI: the base is
  writable again once the dead replica's lease runs out, and the upload it left is found and removed by the next
  start (the journal of uploads in flight).
- Redis killed while a write is between its upload and its attach: the write stops before attaching once its lease
  is lost, and removes its file (`conflict`, `not_applied`).
- Redis unreachable, then restarted: writes are refused as `not_applied` while it is down and nothing reaches Open
  WebUI, reads go on, and writes work again once it is back.
- Twenty adds through nginx over two replicas while one replica is killed and started again: every acknowledged
  document is in the base exactly once, and nothing is left in no base once the killed replica is back.
- Open WebUI killed and started again in the middle of a `sync`: the next run completes, nothing duplicated, nothing
  lost, nothing left in no base.
- An attach held by a proxy until the server gave up on its answer, then run by Open WebUI: the write waits for it
  under the base's lock and says "added"; the document is there once and searchable, nothing left in no base.
- On 0.10.2 and 0.12.4: Open WebUI and a `sync` killed while Open WebUI processes an upload that links itself (0.10:
  linked, not yet indexed into the base; 0.12: not yet linked); the next run past the upload's deadline removes what
  the lost task left and makes the note searchable.
- On 0.10.2 and 0.12.4: an upload indexed into its base and never linked (as Open WebUI 0.11+ killed between the two
  leaves it): the next run takes its text out of the base's search index with the file, so the note sent again is
  not refused as a duplicate.

`docs/writes.md` has the table of these faults, the promise and the test.
"""

from __future__ import annotations

import hashlib
import secrets
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from devtools import fake_embeddings, replicas
from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from devtools.replicas import MissingBinary, Process
from openwebui_rag_mcp import journal as journal_module
from openwebui_rag_mcp.config import load_settings
from tests.live.http import lazy_openwebui, mcp_http, not_on_this_release
from tests.live.stdio import SCRIPT, stdio_session
from tests.live.syncrun import sync_env
from tests.live.versionproxy import VersionProxy

pytestmark = pytest.mark.anyio

RELEASES = ("0.6.5", "0.12.4")
WHY = "the fault tier runs on the oldest release and the newest (issue 16)"
HOLD_WAIT = 120.0  # how long a held request may take to arrive: a hang guard, not a speed check
SETTLE_WAIT = 180.0  # how long recovery may take after a restart: a hang guard too
# The replicas' write leases (OPENWEBUI_MCP_LEASE_SECONDS; 30 by default): a dead replica's lease, and a lease whose
# Redis died, last this long, which the tests wait out. Shorter keeps them short; renewed every third, it still leaves
# a busy machine seconds to spare.
LEASE_SECONDS = 10


def note(number: int) -> dict[str, str]:
    return {
        "title": f"fault note {number}",
        "text": f"# Fault note {number}\n\nWritten under a fault: {uuid.uuid4().hex}",
    }


def strays(inst: Instance, before: set[str], knowledge_id: str) -> set[str]:
    """Files made since `before` that the base does not hold: what a fault may have left behind."""
    return owui.file_ids(inst) - before - owui.files_of(inst, knowledge_id)


def eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f} s", pytrace=False)
        time.sleep(1.0)


def service_variables(url: str, api_key: str, token: str, **extra: str) -> dict[str, str]:
    return {
        "OPENWEBUI_URL": url,
        "OPENWEBUI_MCP_AUTH": "service",
        "OPENWEBUI_API_KEY": api_key,
        "OPENWEBUI_MCP_TOKENS": token,
        "OPENWEBUI_TIMEOUT": "60",
        "OPENWEBUI_MCP_LEASE_SECONDS": str(LEASE_SECONDS),
        **extra,
    }


def started(start: Callable[[], Process]) -> Process:
    problem = ""
    try:
        return start()
    except MissingBinary as exc:
        problem = str(exc)
    except RuntimeError as exc:
        problem = f"did not start: {exc}"
    pytest.fail(problem, pytrace=False)


# -- a replica killed at a chosen point of a write ----------------------------------------------------------------

STAGES = {
    # name: (method, path pattern, held after Open WebUI answered, dropped: never reaches Open WebUI)
    "upload answered, answer never read": ("POST", r"^/api/v1/files/$", True, False),
    "between upload and attach": ("POST", r"/file/add$", False, True),
    "while processing": ("GET", r"/process/status$", False, False),
}


@pytest.mark.parametrize("stage", list(STAGES))
async def test_a_replica_killed_mid_write_leaves_nothing_and_frees_the_base(
    request: pytest.FixtureRequest, tmp_path: Path, stage: str
) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    method, path, after_answer, drop = STAGES[stage]
    if stage == "while processing" and owui.version_parts(inst.version) < (0, 6, 23):
        # 0.6.5 processes during the upload request: "upload answered, answer never read" is that stage there.
        print(f"Open WebUI {inst.version} has no processing stage after the upload")
        return
    knowledge_id = owui.create_knowledge(inst, f"fault-kill-{uuid.uuid4().hex[:8]}", "a replica killed mid-write")
    before = owui.file_ids(inst)
    token = secrets.token_urlsafe(24)
    redis = started(lambda: replicas.start_redis(tmp_path))
    with VersionProxy(inst.url) as proxy:
        variables = service_variables(
            proxy.url,
            inst.api_key,
            token,
            REDIS_URL=f"redis://127.0.0.1:{redis.port}/0",
            XDG_STATE_HOME=str(tmp_path),
            # The killed write's attach may still land until OPENWEBUI_TIMEOUT (plus 5 s) after it was sent, and the
            # restarted replica waits that long before removing its file: 20 s rather than 60 keeps this test short.
            OPENWEBUI_TIMEOUT="20",
        )
        replica = started(lambda: replicas.start_server(variables, tmp_path / "replica.log", name="replica"))
        try:
            held = proxy.hold(method, path, after_answer=after_answer, drop=drop)

            async def doomed_add() -> None:
                try:
                    async with mcp_http(f"{replica.url}/mcp", token) as server:
                        await server.call("knowledge_add", {"knowledge_id": knowledge_id, **note(1)})
                except Exception:  # the replica dies under it
                    return

            async with anyio.create_task_group() as group:
                group.start_soon(doomed_add)
                reached = await anyio.to_thread.run_sync(held.reached.wait, HOLD_WAIT)
                assert reached, f"the write never reached the {stage} stage; replica log:\n{replica.log()[-3000:]}"
                replica.signal(signal.SIGKILL)
                replica.wait(30)
                held.release.set()
            # The dead replica's lease holds the base until it runs out; the restarted replica then writes.
            replica = replicas.respawn(replica)
            replicas.wait_ready(replica)
            async with mcp_http(f"{replica.url}/mcp", token) as server:
                with anyio.fail_after(LEASE_SECONDS + 300):  # a hang guard
                    added = await server.ok("knowledge_add", {"knowledge_id": knowledge_id, **note(2)})
            assert added["file_id"] in owui.files_of(inst, knowledge_id)
            # What the killed write left is removed by the restarted replica (its start resolves the journal).
            eventually(
                lambda: not strays(inst, before, knowledge_id), SETTLE_WAIT, f"removing what the {stage} kill left"
            )
        finally:
            held.release.set()
            replica.stop()
            redis.stop()


async def test_redis_lost_during_a_write_stops_it_before_its_next_request(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Redis dies while a write is between its upload and its attach: the base's lease, taken for the attach, cannot
    be had, so the write stops before attaching (another replica may hold the base by then), removes its file and
    says `upstream_unavailable`/`not_applied` at `attach`; the base is unchanged, nothing is left in no base, and reads
    go on."""
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"fault-lease-{uuid.uuid4().hex[:8]}", "Redis dies mid-write")
    before = owui.file_ids(inst)
    token = secrets.token_urlsafe(24)
    redis = started(lambda: replicas.start_redis(tmp_path))
    with VersionProxy(inst.url) as proxy:
        variables = service_variables(
            proxy.url, inst.api_key, token, REDIS_URL=f"redis://127.0.0.1:{redis.port}/0", XDG_STATE_HOME=str(tmp_path)
        )
        replica = started(lambda: replicas.start_server(variables, tmp_path / "replica.log", name="replica"))
        held = proxy.hold("POST", r"^/api/v1/files/$", after_answer=True)
        outcome: dict[str, Any] = {}
        try:

            async def add() -> None:
                async with mcp_http(f"{replica.url}/mcp", token) as server:
                    outcome["error"], outcome["body"] = await server.call(
                        "knowledge_add", {"knowledge_id": knowledge_id, **note(1)}
                    )

            async with anyio.create_task_group() as group:
                group.start_soon(add)
                assert await anyio.to_thread.run_sync(held.reached.wait, HOLD_WAIT), replica.log()[-3000:]
                redis.signal(signal.SIGKILL)
                redis.wait(30)
                # The lease is lost once no renewal was confirmed for its whole ttl: wait past that, by its clock.
                await anyio.sleep(LEASE_SECONDS + 5)
                held.release.set()
            body = outcome["body"]
            assert outcome["error"], body
            assert (body["code"], body["outcome"], body["stage"]) == ("upstream_unavailable", "not_applied", "attach")
            assert "was removed again" in body["message"], body
            assert owui.files_of(inst, knowledge_id) == set()
            assert not strays(inst, before, knowledge_id)
            async with mcp_http(f"{replica.url}/mcp", token) as server:
                listed = await server.ok("knowledge_files", {"knowledge_id": knowledge_id})
            assert listed["items"] == []
        finally:
            held.release.set()
            replica.stop()
            redis.stop()


async def test_redis_down_refuses_writes_reads_go_on_and_writes_come_back(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"fault-redis-{uuid.uuid4().hex[:8]}", "Redis goes away")
    token = secrets.token_urlsafe(24)
    redis = started(lambda: replicas.start_redis(tmp_path))
    variables = service_variables(inst.url, inst.api_key, token, REDIS_URL=f"redis://127.0.0.1:{redis.port}/0")
    replica = started(lambda: replicas.start_server(variables, tmp_path / "replica.log", name="replica"))
    url = f"{replica.url}/mcp"
    try:
        async with mcp_http(url, token) as server:
            first = await server.ok("knowledge_add", {"knowledge_id": knowledge_id, **note(1)})
        files_before, base_before = owui.file_ids(inst), owui.files_of(inst, knowledge_id)

        redis.signal(signal.SIGKILL)
        redis.wait(30)
        async with mcp_http(url, token) as server:
            is_error, body = await server.call("knowledge_add", {"knowledge_id": knowledge_id, **note(2)})
            assert is_error, body
            assert body["outcome"] == "not_applied", body
            listed = await server.ok("knowledge_files", {"knowledge_id": knowledge_id})
            assert [item["file_id"] for item in listed["items"]] == [first["file_id"]]
            found = await server.ok("knowledge_search", {"query": "Fault note 1", "knowledge_ids": [knowledge_id]})
            assert found["results"], found
        assert owui.file_ids(inst) == files_before  # not even an upload reached Open WebUI
        assert owui.files_of(inst, knowledge_id) == base_before

        redis = replicas.respawn(redis)
        replicas.wait_redis(redis)
        async with mcp_http(url, token) as server:
            again = await server.ok("knowledge_add", {"knowledge_id": knowledge_id, **note(2)})
        assert owui.files_of(inst, knowledge_id) == base_before | {again["file_id"]}
    finally:
        replica.stop()
        redis.stop()


async def test_twenty_adds_over_two_replicas_while_one_is_killed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"fault-replicas-{uuid.uuid4().hex[:8]}", "a replica dies")
    before = owui.file_ids(inst)
    token = secrets.token_urlsafe(24)
    # The restarted replica waits out its killed write's attach window (OPENWEBUI_TIMEOUT plus 5 s) before removing
    # its file: 30 s rather than 60 keeps the test short and still leaves the 20 uploads at once room on a busy machine.
    variables = service_variables(inst.url, inst.api_key, token, XDG_STATE_HOME=str(tmp_path), OPENWEBUI_TIMEOUT="30")
    problem = ""
    try:
        stack = replicas.start_stack(tmp_path, variables, replicas=2, redis=True)
    except (MissingBinary, RuntimeError) as exc:
        problem = str(exc)
    if problem:
        pytest.fail(problem, pytrace=False)
    acknowledged: list[str] = []
    refused: list[str] = []
    lost: list[str] = []
    three = anyio.Event()

    async def one(number: int) -> None:
        try:
            async with mcp_http(stack.url, token) as server:
                is_error, body = await server.call("knowledge_add", {"knowledge_id": knowledge_id, **note(number)})
        except Exception as exc:  # the caller cannot tell what happened
            lost.append(type(exc).__name__)
            return
        if is_error:
            refused.append(f"{body.get('code')}/{body.get('outcome')}")
        else:
            acknowledged.append(body["file_id"])
            if len(acknowledged) == 3:
                three.set()

    try:
        with anyio.fail_after(900):  # a hang guard
            async with anyio.create_task_group() as group:
                for number in range(20):
                    group.start_soon(one, number)
                await three.wait()
                stack.replicas[0] = replicas.respawn(stack.replicas[0], kill=True)
                await anyio.to_thread.run_sync(replicas.wait_ready, stack.replicas[0])
        held = owui.files_of(inst, knowledge_id)
        print(f"\n20 adds, one replica killed: {len(acknowledged)} acknowledged, refused {refused}, lost {lost}")
        assert set(acknowledged) <= held, "an acknowledged document is missing"
        titles = Counter(_title(inst, file_id) for file_id in held)
        assert all(count == 1 for count in titles.values()), titles  # nothing twice
        eventually(lambda: not strays(inst, before, knowledge_id), SETTLE_WAIT, "removing what the killed replica left")
    finally:
        stack.stop()


def _described(inst: Instance, file_id: str) -> str:
    """A file's name, processing status and collection, for a failure's report."""
    with owui.client(inst) as http:
        record: dict[str, Any] = http.get(f"/api/v1/files/{file_id}").json()
    data, meta = record.get("data") or {}, record.get("meta") or {}
    return f"{record.get('filename')}: {data.get('status')} {meta.get('collection_name')} {data.get('error')}"


def _title(inst: Instance, file_id: str) -> str:
    with owui.client(inst) as http:
        record: dict[str, Any] = http.get(f"/api/v1/files/{file_id}").json()
    return str(record.get("filename"))


# -- an attach Open WebUI runs after its answer was due ------------------------------------------------------------


async def test_an_attach_answered_too_late_is_waited_for_not_undone(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The proxy holds the attach until the server, its answer overdue (OPENWEBUI_TIMEOUT), reads the file to see
    what became of it; then Open WebUI gets the attach and runs it. Deleting the file then would leave a document
    without a file (before 0.6.42, a late rewrite of the base's list); the write waits and says "added"."""
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"fault-late-{uuid.uuid4().hex[:8]}", "an attach answered too late")
    before = owui.file_ids(inst)
    added = note(1)
    with VersionProxy(inst.url) as proxy:
        attach = proxy.hold("POST", r"/file/add$")
        async with stdio_session(inst, url=proxy.url, OPENWEBUI_TIMEOUT="10", XDG_STATE_HOME=str(tmp_path)) as server:
            outcome: dict[str, Any] = {}

            async def add() -> None:
                outcome["error"], outcome["body"] = await server.call(
                    "knowledge_add", {"knowledge_id": knowledge_id, **added}
                )

            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(add)
                    assert await anyio.to_thread.run_sync(attach.reached.wait, HOLD_WAIT), "the attach never came"
                    # After the attach the server reads the file only to see what became of an unanswered attach.
                    looked = proxy.hold("GET", r"^/api/v1/files/[0-9a-f-]+$", after_answer=True)
                    looked.release.set()  # not stopped: only seen
                    assert await anyio.to_thread.run_sync(looked.reached.wait, HOLD_WAIT), "no look after the timeout"
                    attach.release.set()  # Open WebUI runs the attach now, its answer long overdue
            finally:
                attach.release.set()
            log = server.stderr.read_text(encoding="utf-8")
    assert not outcome["error"], outcome["body"]
    file_id = outcome["body"]["file_id"]
    assert owui.files_of(inst, knowledge_id) == {file_id}
    assert owui.file_ids(inst) - before == {file_id}  # nothing sent twice, nothing left in no base
    assert "did not answer the attach" in log, log[-3000:]
    answer = owui.query_collection(inst, [knowledge_id], added["text"], k=3)
    texts = [text for documents in answer.get("documents") or [] for text in documents]
    assert any(added["text"].split(":")[-1].strip() in text for text in texts), texts


# -- Open WebUI killed in the middle of a sync ----------------------------------------------------------------------


def test_openwebui_killed_mid_sync_then_the_next_run_completes(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    inst = lazy_openwebui(request)
    knowledge_id = owui.create_knowledge(inst, f"fault-sync-{uuid.uuid4().hex[:8]}", "Open WebUI restarts")
    folder = tmp_path / "folder"
    folder.mkdir()
    for number in range(30):
        (folder / f"note-{number:02}.md").write_text(
            f"# Note {number}\n\nSynced while Open WebUI restarts {uuid.uuid4().hex}"
        )
    before = owui.file_ids(inst)
    # The next run waits out the killed run's attach window (OPENWEBUI_TIMEOUT plus 5 s) where an attach may have been
    # in flight: 20 s rather than 60 keeps the test short. The first run, alive through the restart, waits
    # OPENWEBUI_PROCESS_TIMEOUT for an upload the kill caught mid-indexing (its task is lost): 60 s, not the default
    # 300 (a note here is processed in seconds, even on a busy CI machine).
    env = sync_env(inst) | {
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "OPENWEBUI_TIMEOUT": "20",
        "OPENWEBUI_PROCESS_TIMEOUT": "60",
    }
    argv = [str(SCRIPT), "sync", str(folder), "--knowledge-id", knowledge_id]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert first.stdout is not None
    lines: list[str] = []
    for line in first.stdout:
        lines.append(line.rstrip("\n"))
        if sum(": ok" in seen for seen in lines) >= 5:
            break
    owui.restart(inst, kill=True)
    rest, _ = first.communicate(timeout=900)
    lines += rest.splitlines()
    print(f"\nfirst run (Open WebUI killed and restarted under it): exit {first.returncode}; last lines {lines[-3:]}")

    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    held = owui.files_of(inst, knowledge_id)
    names = Counter(_title(inst, file_id) for file_id in held)
    assert len(held) == 30, names
    assert all(count == 1 for count in names.values()), names
    left = strays(inst, before, knowledge_id)
    assert not left, (sorted(_described(inst, file_id) for file_id in left), second.stdout, lines)
    third = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert third.returncode == 0, third.stdout
    assert "done: 0 added, 0 replaced, 0 renamed, 0 removed, 30 unchanged, 0 failed" in third.stdout
    assert inst.api_key not in second.stdout + third.stdout + "\n".join(lines)


# -- Open WebUI 0.10 killed between linking an upload and indexing it into the base -------------------------------


@dataclass(frozen=True)
class CutShort:
    """A `sync` and Open WebUI both killed while Open WebUI processed the run's one upload (`_cut_short`)."""

    knowledge_id: str
    stuck: str  # the upload's file, as the restart left it for good
    words: str  # the note's words, found once it is indexed into the base
    before: set[str]  # every file id before the run
    env: dict[str, str]
    argv: list[str]
    links_first: bool  # 0.10: linked before it is indexed into the base


def _cut_short(inst: Instance, tmp_path: Path) -> CutShort:
    """Kill a `sync` and Open WebUI while Open WebUI processes an upload that links itself (the test embedding server
    holds that note's embeddings 4 s each): its task is lost, and the file stays as it was, for good. On 0.10, killed
    once the file is linked, it stays listed, "completed", never marked as written to the base; on 0.12, killed once
    the upload exists, it stays in no base, never linked. Returns once the upload is past its writer's deadline (its
    start plus OPENWEBUI_TIMEOUT and OPENWEBUI_PROCESS_TIMEOUT, short here)."""
    run = uuid.uuid4().hex[:8]
    words = f"pangolin{run} axolotl{run} tapir{run}"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "held.md").write_text(f"# Held\n\n{words} {fake_embeddings.SLOW_MARKER}.\n", encoding="utf-8")
    knowledge_id = owui.create_knowledge(inst, f"fault-link-{run}", "restarted mid-indexing", private=True)
    before = owui.file_ids(inst)
    links_first = inst.version == "0.10.2"
    env = sync_env(inst) | {
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "OPENWEBUI_TIMEOUT": "10",
        "OPENWEBUI_PROCESS_TIMEOUT": "30",
    }
    argv = [str(SCRIPT), "sync", str(folder), "--knowledge-id", knowledge_id]
    started = time.monotonic()
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if links_first:  # then Open WebUI indexes it into the base, held 4 s
            eventually(lambda: bool(owui.files_of(inst, knowledge_id)), HOLD_WAIT, "the upload's link to the base")
        else:  # then Open WebUI embeds it, held 4 s, and again for the base
            eventually(lambda: bool(owui.file_ids(inst) - before), HOLD_WAIT, "the upload")
    finally:
        first.kill()
        first.wait()
    owui.restart(inst, kill=True)
    (stuck,) = owui.file_ids(inst) - before
    described = _described(inst, stuck)
    assert f" {knowledge_id} " not in described, f"indexed into the base before the kill: {described}"
    assert owui.files_of(inst, knowledge_id) == ({stuck} if links_first else set()), described
    assert not searchable(inst, knowledge_id, words)
    time.sleep(max(0.0, started + 10 + 30 + 5 - time.monotonic()))
    return CutShort(knowledge_id, stuck, words, before, env, argv, links_first)


@pytest.mark.releases("0.10.2", "0.12.4")  # 0.10 links an upload to its base before it indexes it there, 0.11+ after
def test_an_upload_a_restart_cut_short_is_removed_and_sent_again(live_openwebui: Instance, tmp_path: Path) -> None:
    """Once the upload a restart cut short (`_cut_short`) is past its writer's deadline, the next run, which watches it
    while it waits, sees nothing of the base move again (`giveup`: evidence, not the deadline), removes it and sends
    the file again (in that order: Open WebUI removes a document's vectors by its text's hash too); the note is then
    found by its words, nothing is left in no base."""
    inst = live_openwebui
    cut = _cut_short(inst, tmp_path)
    second = subprocess.run(cut.argv, env=cut.env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    removed = 1 if cut.links_first else 0  # a document of the base; on 0.12 a file in no base, said on its own line
    summary = f"done: 1 added, 0 replaced, 0 renamed, {removed} removed, 0 unchanged, 0 failed"
    assert summary in second.stdout, second.stdout
    if not cut.links_first:
        assert "removed 1 file(s) of uploads a killed run left that Open WebUI never finished" in second.stdout
    (again,) = owui.files_of(inst, cut.knowledge_id)
    assert again != cut.stuck
    assert cut.stuck not in owui.file_ids(inst)  # the stuck one's file is gone
    assert searchable(inst, cut.knowledge_id, cut.words)
    assert not strays(inst, cut.before, cut.knowledge_id)
    third = subprocess.run(cut.argv, env=cut.env, capture_output=True, text=True, timeout=300, check=False)
    assert "done: 0 added, 0 replaced, 0 renamed, 0 removed, 1 unchanged, 0 failed" in third.stdout, third.stdout


@pytest.mark.releases("0.12.4")  # 0.11+ leave it in no base; 0.10 leaves it listed, kept by recovery after the hour
def test_recover_removes_an_upload_a_restart_cut_short_once_past_its_writers_deadline(
    live_openwebui: Instance, tmp_path: Path
) -> None:
    """Recovery outside `sync` (`openwebui-rag-mcp recover`, as the server's start) takes the upload a restart cut
    short for lost once it has watched nothing of the base move for its writer's OPENWEBUI_PROCESS_TIMEOUT, not an
    hour later: its file is gone, nothing of it is left in the base's index, and the next `sync` adds the note once."""
    inst = live_openwebui
    cut = _cut_short(inst, tmp_path)
    recovered = subprocess.run(
        [str(SCRIPT), "recover"], env=cut.env, capture_output=True, text=True, timeout=300, check=False
    )
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert f"file(s) {cut.stuck} were in no base" in recovered.stdout, recovered.stdout
    assert "done: 1 settled, 0 left" in recovered.stdout, recovered.stdout
    assert cut.stuck not in owui.file_ids(inst)
    assert not strays(inst, cut.before, cut.knowledge_id)
    assert not searchable(inst, cut.knowledge_id, cut.words)
    synced = subprocess.run(cut.argv, env=cut.env, capture_output=True, text=True, timeout=300, check=False)
    assert "done: 1 added, 0 replaced, 0 renamed, 0 removed, 0 unchanged, 0 failed" in synced.stdout, synced.stdout
    assert searchable(inst, cut.knowledge_id, cut.words)
    assert inst.api_key not in recovered.stdout + recovered.stderr


def searchable(inst: Instance, knowledge_id: str, words: str) -> bool:
    """Whether a search of the base finds the words; a base with nothing indexed may answer with an error instead."""
    try:
        answer = owui.query_collection(inst, [knowledge_id], words, k=5)
    except owui.OpenWebUIError:
        return False
    return any(words in text for documents in answer.get("documents") or [] for text in documents)


# -- an upload indexed into its base, never linked (Open WebUI killed between the two) -----------------------------


@pytest.mark.releases("0.10.2", "0.12.4")
def test_an_upload_indexed_into_the_base_but_never_linked_leaves_nothing_behind(
    live_openwebui: Instance, tmp_path: Path
) -> None:
    """An upload that links itself is indexed into its base, then linked (0.11+; 0.10 links first); Open WebUI killed
    between the two leaves the base's search index holding the file's text under a file the base does not list, and
    its duplicate check then refuses the same text from any other file. The state is made here as that kill leaves it
    (the file indexed into the base by `process/file`, never linked; the journal's record of a killed `sync`'s upload
    of it). The next run must not merely delete the file (its vectors would stay, the note sent again refused as a
    duplicate): it ends with the note in the base once, searchable, nothing left in no base."""
    inst = live_openwebui
    run = uuid.uuid4().hex[:8]
    words = f"okapi{run} quokka{run} serval{run}"
    folder = tmp_path / "folder"
    folder.mkdir()
    body = f"# Indexed\n\n{words}.\n".encode()
    (folder / "indexed.md").write_bytes(body)
    knowledge_id = owui.create_knowledge(inst, f"fault-unlinked-{run}", "indexed, never linked", private=True)
    before = owui.file_ids(inst)
    orphan = owui.upload_text(inst, "indexed.md", body.decode())
    with owui.client(inst) as http:
        answer = http.post(
            "/api/v1/retrieval/process/file", json={"file_id": orphan, "collection_name": knowledge_id}, timeout=120
        )
    assert answer.status_code == 200, answer.text
    assert owui.files_of(inst, knowledge_id) == set()
    assert searchable(inst, knowledge_id, words)  # the base's index holds it, no document does

    env = sync_env(inst) | {"XDG_STATE_HOME": str(tmp_path / "state")}
    settings = load_settings(env)
    owner = journal_module.owner_of(settings, hashlib.sha256(inst.api_key.encode()).hexdigest())
    now = time.time()
    record = journal_module.Record(
        id=uuid.uuid4().hex,
        owner=owner,
        knowledge_id=knowledge_id,
        filename="indexed.md",
        size=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
        started=now - 7200,
        alive_until=now - 7100,
        host=journal_module.this_host(),
        pid=2**22 + 1,  # above any pid this machine gives out: no such process
        pid_start="",
        file_id=orphan,
        links_itself=True,
        indexed_after_link=inst.version == "0.10.2",
        process_by=now - 7000,
    )
    journal = journal_module.FileJournal(tmp_path / "state" / "openwebui-rag-mcp" / "inflight")
    anyio.run(journal.put, record)

    argv = [str(SCRIPT), "sync", str(folder), "--knowledge-id", knowledge_id]
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "done: 1 added, 0 replaced, 0 renamed, 0 removed, 0 unchanged, 0 failed" in second.stdout, second.stdout
    (held,) = owui.files_of(inst, knowledge_id)
    assert held != orphan
    assert orphan not in owui.file_ids(inst)
    assert searchable(inst, knowledge_id, words)
    assert not strays(inst, before, knowledge_id)
    assert not list((tmp_path / "state").rglob("*.json")), "the record is settled"
    third = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert "done: 0 added, 0 replaced, 0 renamed, 0 removed, 1 unchanged, 0 failed" in third.stdout, third.stdout
