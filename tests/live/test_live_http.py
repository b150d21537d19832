"""The Streamable HTTP transport against a real Open WebUI (0.6.43 and 0.12.4), every caller acting as themselves.

One server process (``openwebui-rag-mcp --transport streamable-http``, per-caller credentials, no OPENWEBUI_API_KEY)
serves the whole module. Two non-admin Open WebUI users each own a private base the other cannot read: the
session's second user (``live_user``, calling with its API key) and one more made here (calling with its session
token, as Open WebUI's "Session" tool-server authentication forwards it). The admin is left out of the isolation
test on purpose: on 0.6.43 and 0.12.4 an admin lists and reads every user's private base and file (checked by hand
against both releases), so admin and user cannot each hold a base the other cannot read. The admin's key is used
only to check, through Open WebUI's own API, what the callers did (who owns each new file).

0.6.5 is not tested here (issue 11: it has no API-key permission model worth testing; it stays in the stdio matrix
and the replica tests), so on 0.6.5 these tests pass without doing anything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from devtools import openwebui_local as owui
from devtools import replicas
from devtools.npm_tools import CLAUDE_CODE, INSPECTOR
from devtools.openwebui_local import Instance, User
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.config import DEFAULT_TOOLS
from tests.live.http import (
    Progress,
    access_lines_when,
    lazily,
    mcp_http,
    not_on_this_release,
    npm_binary,
    post_tools_list,
)

pytestmark = pytest.mark.anyio

RELEASES = ("0.6.43", "0.12.4")
WHY = "per-caller credentials need Open WebUI's API-key permission model (issue 11)"
ROUNDS = 6  # per worker; two workers (one per protocol generation) per user
WRITE_ROUNDS = (0, 2, 4)
TITLE = "Ёжик в тумане: заметки 第一"
OLD_WORD = "quasarplinth"
NEW_WORD = "vortexmarrow"
RUN_TIMEOUT = 120.0


@dataclass(frozen=True)
class Person:
    """A caller: an Open WebUI user, the credential it sends, its private base and the word only it holds."""

    label: str
    user: User
    credential: str
    base: str
    file: str
    word: str


@dataclass(frozen=True)
class Served:
    url: str  # .../mcp
    server: replicas.Process


@pytest.fixture(scope="module")
def served(live_openwebui: Instance, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    log = tmp_path_factory.mktemp("http-server") / "server.log"
    variables = {"OPENWEBUI_URL": live_openwebui.url, "OPENWEBUI_TIMEOUT": "60"}
    try:
        server = replicas.start_server(variables, log)
    except RuntimeError as exc:
        pytest.fail(f"the HTTP server did not start: {exc}", pytrace=False)
    try:
        yield Served(f"{server.url}/mcp", server)
    finally:
        code = server.stop()
        # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully: -15 is a clean stop.
        assert code in (0, -signal.SIGTERM), f"the server did not stop on SIGTERM (exit {code}):\n{replicas.tail(log)}"


@pytest.fixture(scope="module")
def people(live_openwebui: Instance, live_user: User) -> tuple[Person, Person]:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    other = owui.add_user(inst, "HTTP Test User", f"http-{tag}@example.com")
    made = []
    for label, user, credential, word in (
        ("api-key user", live_user, live_user.api_key, f"glimmerquartz{tag}"),
        ("session user", other, other.token, f"brambleviolin{tag}"),
    ):
        base = owui.create_knowledge(
            inst, f"http-private-{label[:3]}-{tag}", "private", private=True, api_key=user.api_key
        )
        text = f"# Private\n\nThe {word} belongs to {user.name} and nobody else."
        file = owui.upload_text(inst, f"private-{label[:3]}.md", text, api_key=user.api_key)
        owui.add_file(inst, base, file, api_key=user.api_key)
        made.append(Person(label, user, credential, base, file, word))
    first, second = made
    for me, them in ((first, second), (second, first)):  # the harness's own check: private both ways
        assert them.base not in owui.knowledge_ids(inst, me.credential), "harness: a private base is readable"
        with owui.client(inst, me.credential) as http:
            assert http.get(f"/api/v1/files/{them.file}").status_code != 200, "harness: a private file is readable"
    return first, second


def owner_of(inst: Instance, file_id: str) -> str:
    """The user id Open WebUI records as the owner of a file (read as the admin)."""
    with owui.client(inst) as http:
        answer = http.get(f"/api/v1/files/{file_id}")
    assert answer.status_code == 200, answer.text
    owner: str = answer.json()["user_id"]
    return owner


def secrets_absent(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, "a credential appears in the server's output"


# -- 401 -----------------------------------------------------------------------------------------------------------


def test_no_credential_and_a_wrong_one_are_401(request: pytest.FixtureRequest) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    served = cast(Served, lazily(request, "served"))
    missing = post_tools_list(served.url, {})
    assert missing.status_code == 401, missing.text
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong_token = "sk-" + uuid.uuid4().hex
    wrong = post_tools_list(served.url, {"Authorization": f"Bearer {wrong_token}"})
    assert wrong.status_code == 401, wrong.text
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert wrong_token not in wrong.text
    not_bearer = post_tools_list(served.url, {"Authorization": "Basic dXNlcjpwYXNz"})
    assert not_bearer.status_code == 401
    lines = access_lines_when(served.server.log, lambda lines: sum('"POST /mcp" 401' in line for line in lines) >= 3)
    assert sum('"POST /mcp" 401' in line for line in lines) >= 3, lines[-10:]
    secrets_absent(served.server.log(), wrong_token)


# -- the sequences of the stdio tier, over HTTP, as a non-admin user ------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_read_and_write_sequence_with_progress(request: pytest.FixtureRequest, mode: str) -> None:
    """create → add (progress notifications arrive) → list, files, search, find, get_file → update → delete, with
    the user's own key, on both protocol generations; confirmed through Open WebUI's API."""
    if not_on_this_release(RELEASES, WHY):
        return
    inst = cast(Instance, lazily(request, "live_openwebui"))
    user = cast(User, lazily(request, "live_user"))
    served = cast(Served, lazily(request, "served"))
    release = Release.parse(inst.version)
    async with mcp_http(served.url, user.api_key, mode=mode) as server:
        assert server.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        health = await server.ok("knowledge_health", {})
        assert health["openwebui_version"] == inst.version

        name = f"http-write-{mode}-{uuid.uuid4().hex[:8]}"
        created = await server.ok("knowledge_create", {"name": name, "description": "over HTTP"})
        knowledge_id = created["knowledge_id"]
        assert knowledge_id in owui.knowledge_ids(inst, user.api_key)

        text = f"# Notes\n\nThe {OLD_WORD} is a fictional instrument used in this test ({mode})."
        progress = Progress()
        added = await server.ok(
            "knowledge_add",
            {"knowledge_id": knowledge_id, "text": text, "title": TITLE, "metadata": {"author": "http test"}},
            progress,
        )
        file_id = added["file_id"]
        assert added["status"] == "completed"
        messages = [message for _, _, message in progress.seen]
        assert len(progress.seen) >= 4, progress.seen  # uploading, processing, attaching, done
        assert messages[0] == "uploading"
        assert messages[-1] == "done"
        assert progress.seen[-1][:2] == (4, 4)
        assert owui.files_of(inst, knowledge_id) == {file_id}
        assert owner_of(inst, file_id) == user.user_id

        listed = await server.ok("knowledge_list", {"query": name})
        assert [item["knowledge_id"] for item in listed["items"]] == [knowledge_id]
        files = await server.ok("knowledge_files", {"knowledge_id": knowledge_id})
        assert [item["file_id"] for item in files["items"]] == [file_id]
        found = await server.ok("knowledge_search", {"query": OLD_WORD, "knowledge_ids": [knowledge_id]})
        assert found["results"][0]["file_id"] == file_id
        assert OLD_WORD in found["results"][0]["text"]
        read = await server.ok("knowledge_get_file", {"file_id": file_id})
        assert OLD_WORD in read["text"]

        new_text = f"# Notes\n\nThe {NEW_WORD} replaced the old instrument entirely ({mode})."
        updated = await server.ok(
            "knowledge_update", {"file_id": file_id, "text": new_text, "knowledge_id": knowledge_id}
        )
        assert updated["shared_file"] is True
        after = await server.ok("knowledge_search", {"query": NEW_WORD, "knowledge_ids": [knowledge_id], "top_k": 10})
        assert any(NEW_WORD in chunk["text"] for chunk in after["results"])
        assert NEW_WORD in (await server.ok("knowledge_get_file", {"file_id": file_id}))["text"]

        is_error, removed = await server.call("knowledge_delete", {"knowledge_id": knowledge_id, "file_id": file_id})
        if release.capabilities.keep_file_on_remove:
            assert not is_error, removed
            assert owui.files_of(inst, knowledge_id) == set()
        else:
            assert is_error
            assert (removed["code"], removed["outcome"]) == ("unsupported", "not_applied")
            assert owui.files_of(inst, knowledge_id) == {file_id}
    secrets_absent(served.server.log(), user.api_key)


async def test_a_read_only_request_cannot_write(request: pytest.FixtureRequest) -> None:
    if not_on_this_release(RELEASES, WHY):
        return
    inst = cast(Instance, lazily(request, "live_openwebui"))
    first, _ = cast(tuple[Person, Person], lazily(request, "people"))
    served = cast(Served, lazily(request, "served"))
    before = owui.files_of(inst, first.base, first.user.api_key)
    async with mcp_http(served.url, first.credential, **{"X-OpenWebUI-Read-Only": "true"}) as server:
        text = f"# Refused\n\n{uuid.uuid4().hex}"
        is_error, body = await server.call("knowledge_add", {"knowledge_id": first.base, "text": text, "title": "no"})
        assert is_error
        assert (body["code"], body["outcome"]) == ("forbidden", "not_applied")
        found = await server.ok("knowledge_search", {"query": first.word, "knowledge_ids": [first.base]})
        assert found["results"][0]["file_id"] == first.file
    assert owui.files_of(inst, first.base, first.user.api_key) == before


async def test_knowledge_find_reads_the_text_of_the_documents(request: pytest.FixtureRequest) -> None:
    """knowledge_find must find a word that is in a document's text but not in its filename. Over HTTP here, but
    nothing about it is HTTP: on 0.6.43 it fails over stdio too (see the report of issue 11's live tests).

    Cause (src/openwebui_rag_mcp/client/knowledge.py, ``files_containing``): from 0.6.42 on, the server narrows the
    candidates with ``GET /api/v1/knowledge/{id}/files?query=<phrase>&include_content=true``. 0.12.4 matches the query
    against the filename or the text (``include_content``); 0.6.43 knows no ``include_content`` and matches the
    filename only (``Knowledges.search_files_by_id``: ``File.filename.ilike``), so no document is read and the answer
    is empty."""
    if not_on_this_release(RELEASES, WHY):
        return
    first, _ = cast(tuple[Person, Person], lazily(request, "people"))
    served = cast(Served, lazily(request, "served"))
    async with mcp_http(served.url, first.credential) as server:
        found = await server.ok("knowledge_find", {"knowledge_id": first.base, "phrase": first.word})
    assert [match["file_id"] for match in found["matches"]] == [first.file], found


# -- two users at once -----------------------------------------------------------------------------------------------


@dataclass
class Tally:
    calls: int = 0
    added: list[str] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # file ids seen in the caller's own base (checked at the end)


async def _worker(url: str, me: Person, them: Person, mode: str, readable: set[str], tally: Tally) -> None:
    """One caller's interleaved lists, searches, reads and writes; every answer checked against what Open WebUI
    lets this caller read."""
    added = tally.added
    foreign = {them.base, them.file, them.word}

    def clean(body: dict[str, Any], sent: dict[str, Any]) -> None:
        """Nothing of the other user's in an answer, but what this caller itself sent (an id it named, echoed)."""
        shown, asked = json.dumps(body, ensure_ascii=False), json.dumps(sent, ensure_ascii=False)
        leaked = [value for value in foreign if value in shown and value not in asked]
        assert not leaked, f"{me.label} ({mode}) saw {leaked} of the other user: {shown[:2000]}"

    async with mcp_http(url, me.credential, mode=mode) as server:

        async def call(name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
            tally.calls += 1
            is_error, body = await server.call(name, arguments)
            clean(body, arguments)
            return is_error, body

        for round_ in range(ROUNDS):
            if round_ in (0, ROUNDS - 1):  # the whole list, every page
                is_error, body, items = await server.listing("knowledge_list", {})
                tally.calls += 1
                assert not is_error, body
                ids = {item["knowledge_id"] for item in items}
                clean({"items": items}, {})
                assert me.base in ids
                assert ids <= readable, ids - readable
            else:
                is_error, body = await call("knowledge_list", {"query": "http-private-"})
                assert not is_error, body
                assert {item["knowledge_id"] for item in body["items"]} == {me.base}

            is_error, body = await call("knowledge_files", {"knowledge_id": me.base})
            assert not is_error, body
            tally.listed.update(item["file_id"] for item in body["items"])

            is_error, body = await call("knowledge_files", {"knowledge_id": them.base})
            assert is_error
            assert body["code"] in ("not_found", "forbidden"), body

            is_error, body = await call("knowledge_search", {"query": f"{me.word} {them.word}", "top_k": 10})
            assert not is_error, body
            assert me.file in {chunk["file_id"] for chunk in body["results"]}
            assert not any(them.word in chunk["text"] for chunk in body["results"]), body
            assert them.file not in {chunk["file_id"] for chunk in body["results"]}
            assert them.base not in body["knowledge_ids"]
            assert {chunk["knowledge_id"] for chunk in body["results"]} - {None} <= readable
            assert set(body["knowledge_ids"]) <= readable

            is_error, body = await call("knowledge_search", {"query": them.word, "knowledge_ids": [them.base]})
            assert is_error
            assert body["code"] == "not_found", body

            is_error, body = await call("knowledge_get_file", {"file_id": me.file})
            assert not is_error, body
            assert me.word in body["text"]

            is_error, body = await call("knowledge_get_file", {"file_id": them.file})
            assert is_error
            assert body["code"] in ("not_found", "forbidden"), body

            if round_ in WRITE_ROUNDS:
                text = f"# Note {round_} ({mode})\n\nThe {me.word} again, {uuid.uuid4().hex}."
                is_error, body = await call("knowledge_add", {"knowledge_id": me.base, "text": text, "title": "n"})
                assert not is_error, body
                added.append(body["file_id"])

                text = f"# Intrusion\n\n{uuid.uuid4().hex}"
                is_error, body = await call("knowledge_add", {"knowledge_id": them.base, "text": text, "title": "x"})
                assert is_error
                assert body["code"] in ("not_found", "forbidden"), body
                assert body["outcome"] == "not_applied", body


async def test_two_users_at_once_each_see_and_write_only_their_own(request: pytest.FixtureRequest) -> None:
    """The test that matters most (issue 11): two users call one server at the same time, each over both protocol
    generations (four clients at once), dozens of interleaved lists, searches, reads and writes each. Every answer
    holds only what Open WebUI lets the caller read and nothing of the other's; every new file is owned by its
    caller; refused writes leave nothing behind; the server's log holds neither credential."""
    if not_on_this_release(RELEASES, WHY):
        return
    inst = cast(Instance, lazily(request, "live_openwebui"))
    first, second = cast(tuple[Person, Person], lazily(request, "people"))
    served = cast(Served, lazily(request, "served"))
    readable = {person.label: set(owui.knowledge_ids(inst, person.credential)) for person in (first, second)}
    files_before = owui.file_ids(inst)
    tallies = {(person.label, mode): Tally() for person in (first, second) for mode in ("auto", "legacy")}

    with anyio.fail_after(600):
        async with anyio.create_task_group() as group:
            for mode in ("auto", "legacy"):
                for me, them in ((first, second), (second, first)):
                    tally = tallies[(me.label, mode)]
                    group.start_soon(_worker, served.url, me, them, mode, readable[me.label], tally)

    for person in (first, second):
        calls = sum(tallies[(person.label, mode)].calls for mode in ("auto", "legacy"))
        assert calls >= 24, f"{person.label} made only {calls} calls"
    added = {
        person.label: {f for mode in ("auto", "legacy") for f in tallies[(person.label, mode)].added}
        for person in (first, second)
    }
    for person in (first, second):
        assert len(added[person.label]) == 2 * len(WRITE_ROUNDS)
        assert owui.files_of(inst, person.base, person.credential) == {person.file} | added[person.label]
        owners = {file_id: owner_of(inst, file_id) for file_id in added[person.label]}
        assert set(owners.values()) == {person.user.user_id}, owners
        listed = {f for mode in ("auto", "legacy") for f in tallies[(person.label, mode)].listed}
        assert listed <= {person.file} | added[person.label]
    # The refused writes to the other's base left no file anywhere.
    assert owui.file_ids(inst) - files_before == added[first.label] | added[second.label]
    log = served.server.log()
    secrets_absent(log, first.credential, second.credential)
    print(f"\ncalls: { {f'{label} {mode}': t.calls for (label, mode), t in tallies.items()} }")


# -- real clients over HTTP ------------------------------------------------------------------------------------------


def _run(argv: list[str], env: dict[str, str], cwd: Path, *secrets: str) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(
            argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`{' '.join(argv[:4])} ...` took more than {RUN_TIMEOUT:.0f} s: {exc.stderr!r}", pytrace=False)
    for secret in secrets:
        result.stdout, result.stderr = (text.replace(secret, "<credential>") for text in (result.stdout, result.stderr))
    return result


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_cli_over_http(request: pytest.FixtureRequest, era: str, tmp_path: Path) -> None:
    """MCP Inspector's CLI with ``--transport http`` and the caller's key as a header: ``tools/list --strict`` is
    clean, and a search answers from the caller's own base only."""
    if not_on_this_release(RELEASES, WHY):
        return
    first, second = cast(tuple[Person, Person], lazily(request, "people"))
    served = cast(Served, lazily(request, "served"))
    binary = npm_binary(INSPECTOR)
    base = [str(binary), "--cli", "--transport", "http", "--server-url", served.url, "--protocol-era", era]
    base += ["--header", f"Authorization: Bearer {first.credential}"]
    env = {**replicas.server_env({}), "HOME": str(tmp_path)}

    listed = _run([*base, "--method", "tools/list", "--strict"], env, tmp_path, first.credential)
    assert listed.returncode == 0, f"{listed.stdout[-3000:]}\n{listed.stderr[-3000:]}"
    assert {tool["name"] for tool in json.loads(listed.stdout)["tools"]} == set(DEFAULT_TOOLS)

    query = {"query": f"{first.word} {second.word}", "top_k": 10}
    call = [*base, "--method", "tools/call", "--tool-name", "knowledge_search", "--tool-args-json", json.dumps(query)]
    searched = _run(call, env, tmp_path, first.credential)
    assert searched.returncode == 0, f"{searched.stdout[-3000:]}\n{searched.stderr[-3000:]}"
    body = json.loads(searched.stdout)
    assert body["isError"] is False
    assert first.file in {chunk["file_id"] for chunk in body["structuredContent"]["results"]}
    results = body["structuredContent"]["results"]
    assert not any(second.word in chunk["text"] or chunk["file_id"] == second.file for chunk in results)

    refused = _run(
        [*base[: base.index("--header")], "--stored-auth-only", "--method", "tools/list"],
        env,
        tmp_path,
    )
    assert refused.returncode != 0, refused.stdout
    secrets_absent(served.server.log(), first.credential)


def _claude_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    }


def test_claude_code_adds_the_http_server_and_connects(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """``claude mcp add --transport http <name> <url> --header "Authorization: Bearer ..."`` in a throwaway HOME,
    then ``claude mcp list`` shows it connected; the same with a wrong key does not."""
    if not_on_this_release(RELEASES, WHY):
        return
    first, _ = cast(tuple[Person, Person], lazily(request, "people"))
    served = cast(Served, lazily(request, "served"))
    binary = npm_binary(CLAUDE_CODE)
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = _claude_env(home)
    wrong = "sk-" + uuid.uuid4().hex
    for name, credential in (("openwebui-rag", first.credential), ("openwebui-rag-wrong", wrong)):
        argv = [str(binary), "mcp", "add", "--transport", "http", name, served.url]
        added = _run([*argv, "--header", f"Authorization: Bearer {credential}"], env, project, credential)
        assert added.returncode == 0, added.stdout + added.stderr
        assert f"Added HTTP MCP server {name}" in added.stdout + added.stderr, added.stdout + added.stderr

    listing = _run([str(binary), "mcp", "list"], env, project, first.credential, wrong)
    print(f"\n$ claude mcp list\n{listing.stdout}")
    assert listing.returncode == 0, listing.stdout + listing.stderr
    lines = {line.split(":", 1)[0]: line for line in listing.stdout.splitlines() if ": " in line}
    assert lines.get("openwebui-rag", "").startswith(f"openwebui-rag: {served.url} (HTTP)"), listing.stdout
    assert lines["openwebui-rag"].endswith("✔ Connected"), listing.stdout
    assert "✔ Connected" not in lines.get("openwebui-rag-wrong", ""), listing.stdout
    secrets_absent(served.server.log(), first.credential, wrong)
