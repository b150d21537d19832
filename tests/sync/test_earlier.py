"""What killed runs left before a run begins: uploads Open WebUI may still finish are waited for (until their
writer's deadline), those past it are taken for lost and what they left is removed; a dry run only says so."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path

import pytest

from openwebui_rag_mcp import journal as journal_module
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.journal import Record
from openwebui_rag_mcp.settle import Resolution
from openwebui_rag_mcp.sync.types import OK, SOME_FAILED
from tests.support.sync import (
    KB,
    SYNC_POLLS,
    Base,
    base_names,
    run,
    writes_since,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("base", ["0.12.4", "0.10.2", "0.9.6"], indirect=True)
async def test_a_run_first_waits_for_uploads_a_killed_run_left_processing(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They join the base when Open WebUI is done: read before that, the base would lack them and this run would send
    them again, and two copies could both be linked."""
    record = Record("r", "o", KB, "a.md", 3, "0" * 64, time.time(), 0.0, "h", 1, "", "f-old", links_itself=True)
    waits = [Resolution(record, (), None, "still processing", processing=True)] * 2
    looks: list[int] = []

    async def recover_uploads(self: App) -> list[Resolution]:
        looks.append(len(base.router.calls))
        return [waits.pop()] if waits else []

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    base.timings = replace(SYNC_POLLS, earlier_uploads_poll=0.0)
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path)
    assert code == OK, lines
    assert "waiting for Open WebUI to finish 1 upload(s) a killed run left processing" in lines
    before = [c.request.url.path for c in base.router.calls[: looks[2]]]  # three looks before the base is read
    assert not [path for path in before if "/knowledge/" in path], before
    assert len(base.members) == 1


@pytest.mark.parametrize("base", ["0.12.4"], indirect=True)
async def test_a_run_waits_for_an_old_upload_still_processing_then_goes_on_without_removing_it(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41, item 4: an upload a killed run left, still "processing" long after its writer would have given up,
    may only be slow: with no evidence that Open WebUI lost it (`giveup`) the run waits OPENWEBUI_PROCESS_TIMEOUT for
    it, then goes on and leaves it to a later run (nothing is removed on a clock alone)."""
    started = time.time() - 1000.0  # past the defaults (120 + 300 s) and 120 s of clock slack (from host "h")
    old = Record("r", "o", KB, "a.md", 3, "0" * 64, started, 0.0, "h", 1, "", "f-old", links_itself=True)

    async def recover_uploads(self: App) -> list[Resolution]:
        return [Resolution(old, (), None, "still processing", processing=True)]

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    base.timings = replace(SYNC_POLLS, earlier_uploads_poll=0.05)
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path, env={"OPENWEBUI_PROCESS_TIMEOUT": "1"})
    assert code == OK, lines
    assert "waiting for Open WebUI to finish 1 upload(s) a killed run left processing" in lines
    assert any(line.startswith("note: Open WebUI is still processing 1 upload(s)") for line in lines), lines
    assert not any("lost in a restart" in line for line in lines), lines
    assert len(base.members) == 1


@pytest.mark.parametrize("base", ["0.12.4"], indirect=True)
async def test_a_run_says_which_lost_uploads_recovery_removed_before_it(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery itself removes a killed run's upload that is past its writer's deadline and in no base: the run says
    so, as when it removes one itself; what recovery removed for another base, or that named no base, is not counted."""
    lost = Record("r", "o", KB, "a.md", 3, "0" * 64, time.time() - 1000.0, 0.0, "h", 1, "", "f-lost", links_itself=True)
    elsewhere = replace(lost, id="e", knowledge_id="another-base", file_id="f-elsewhere")
    attached = replace(lost, id="t", links_itself=False, file_id="f-attached")
    looks = [[lost, elsewhere, attached]]

    async def recover_uploads(self: App) -> list[Resolution]:
        records = looks.pop(0) if looks else []
        return [Resolution(record, (record.file_id or "",), None) for record in records]

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path)
    assert code == OK, lines
    assert "removed 1 file(s) of uploads a killed run left that Open WebUI never finished" in lines, lines
    assert len(base.members) == 1


@pytest.mark.parametrize("base", ["0.12.4"], indirect=True)
async def test_a_lost_upload_indexed_into_the_base_but_never_linked_takes_its_vectors_with_it(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open WebUI 0.11+ indexes an upload that links itself into the base, then links it: a restart in between left
    the text in the base's index under no document, and the file "processing" for good. Deleted as it is, its vectors
    stay and Open WebUI refuses the file sent again as a duplicate; the run attaches it and takes it out again first,
    so the note sent again is added."""
    started = time.time() - 1000.0  # past its writer's deadline
    lost = Record("r", "o", KB, "a.md", 3, "0" * 64, started, 0.0, "h", 1, "", "f-lost", links_itself=True)
    text_hash = hashlib.sha256(b"# A").hexdigest()
    base.files["f-lost"] = {
        "id": "f-lost",
        "filename": "a.md",
        "meta": {"name": "a.md", "data": {"knowledge_id": KB}, "collection_name": "file-f-lost"},
        "hash": text_hash,
        "data": {"content": "# A", "status": "processing"},
    }
    base.unlinked_vectors["f-lost"] = text_hash

    async def recover_uploads(self: App) -> list[Resolution]:
        # what recovery found: the file and the base's pending list unchanged across looks (`giveup`)
        found = Resolution(lost, (), None, "still processing", processing=True, lost=True)
        return [found] if "f-lost" in base.files else []

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path)
    assert code == OK, lines
    assert "removed 1 file(s) of uploads a killed run left that Open WebUI never finished" in lines
    assert "f-lost" not in base.files
    assert base.unlinked_vectors == {}
    (held,) = base.members
    assert base.files[held]["hash"] == text_hash


@pytest.mark.parametrize("base", ["0.10.2"], indirect=True)
@pytest.mark.parametrize("moved", [False, True])
async def test_a_listed_document_whose_upload_open_webui_never_finished_is_removed_then_sent_again(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moved: bool
) -> None:
    """0.10 links an upload before it indexes it into the base: a restart in between leaves it listed, with the hash
    of its text, but never in the base's search index, and still "processing" for good. Past its writer's deadline,
    the run does not count it as held: it removes it first (Open WebUI removes a document's vectors by its text's
    hash too, which a new copy shares), then sends the file again, also when the file has moved meanwhile (no
    `--delete` needed: the stuck one is an upload that never finished, not a document)."""
    (tmp_path / "a.md").write_text("# A")
    assert (await run(tmp_path))[0] == OK
    (stuck,) = base.members
    started = time.time() - 1000.0  # past 120 + 300 s and 120 s of clock slack (the record is from host "h")
    record = Record("r", "o", KB, "a.md", 3, "0" * 64, started, 0.0, "h", 1, "", stuck, links_itself=True)

    async def recover_uploads(self: App) -> list[Resolution]:
        # what recovery found: the file and the base's pending list unchanged across looks (`giveup`)
        found = Resolution(record, (), None, "still processing", processing=True, lost=True)
        return [found] if stuck in base.files else []

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    if moved:
        (tmp_path / "a.md").rename(tmp_path / "b.md")
    calls = len(base.router.calls)
    code, lines = await run(tmp_path)
    assert code == OK, lines
    assert lines[-1] == "done: 1 added, 0 replaced, 0 renamed, 1 removed, 0 unchanged, 0 failed"
    assert stuck not in base.files
    (again,) = base.members
    assert base_names(base) == ["b.md" if moved else "a.md"]
    assert again != stuck
    writes = writes_since(base, calls)
    assert writes.index(f"POST /api/v1/knowledge/{KB}/file/remove") < writes.index("POST /api/v1/files/"), writes


@pytest.mark.parametrize("base", ["0.10.2"], indirect=True)
async def test_a_file_whose_stuck_document_cannot_be_removed_is_not_sent_again(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removing the stuck document later would take a new copy's vectors with it (by the text's hash): while it cannot
    be removed, the file is named as failed and not sent."""
    (tmp_path / "a.md").write_text("# A")
    (tmp_path / "b.md").write_text("# B")
    assert (await run(tmp_path))[0] == OK
    stuck = next(file_id for file_id in base.members if base.files[file_id]["filename"] == "a.md")
    started = time.time() - 1000.0  # past 120 + 300 s and 120 s of clock slack (the record is from host "h")
    record = Record("r", "o", KB, "a.md", 3, "0" * 64, started, 0.0, "h", 1, "", stuck, links_itself=True)

    async def recover_uploads(self: App) -> list[Resolution]:
        return [Resolution(record, (), None, "still processing", processing=True, lost=True)]

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    base.router.post(f"/api/v1/knowledge/{KB}/file/remove").respond(502, text="bad gateway")
    calls = len(base.router.calls)
    code, lines = await run(tmp_path)
    assert code == SOME_FAILED, lines
    assert any(line.startswith("add      a.md: FAILED") and "not removed" in line for line in lines), lines
    assert lines[-1] == "done: 0 added, 0 replaced, 0 renamed, 0 removed, 1 unchanged, 2 failed"
    assert "POST /api/v1/files/" not in writes_since(base, calls)  # nothing sent
    assert stuck in base.members


@pytest.mark.parametrize("base", ["0.12.4"], indirect=True)
async def test_an_unlinked_upload_open_webui_never_finished_is_deleted_past_its_deadline(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.11+ link an upload once it is indexed: a task a restart lost leaves the file in no base, "processing" for
    good. Past its writer's deadline the run deletes it (recovery would wait an hour), and the note is sent again."""
    base.files["f-stuck"] = {"id": "f-stuck", "filename": "a.md", "meta": {}, "hash": None, "data": {}}
    base.files["f-stuck"]["data"]["status"] = "processing"
    started = time.time() - 1000.0  # past 120 + 300 s and 120 s of clock slack (the record is from host "h")
    record = Record("r", "o", KB, "a.md", 3, "0" * 64, started, 0.0, "h", 1, "", "f-stuck", links_itself=True)

    async def recover_uploads(self: App) -> list[Resolution]:
        found = Resolution(record, (), None, "still processing", processing=True, lost=True)
        return [found] if "f-stuck" in base.files else []

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path)
    assert code == OK, lines
    assert "removed 1 file(s) of uploads a killed run left that Open WebUI never finished" in lines
    assert "f-stuck" not in base.files
    assert base_names(base) == ["a.md"]
    assert lines[-1] == "done: 1 added, 0 replaced, 0 renamed, 0 removed, 0 unchanged, 0 failed"


@pytest.mark.parametrize("base", ["0.12.4"], indirect=True)
async def test_a_run_waits_for_an_upload_until_its_deadline_even_past_its_own_wait(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed run's upload Open WebUI lost in a restart is known lost only past its writer's deadline (its start plus
    OPENWEBUI_TIMEOUT and OPENWEBUI_PROCESS_TIMEOUT): a run that began soon after the kill waits that long, not only
    its own OPENWEBUI_PROCESS_TIMEOUT, or it would go on and leave the file in no base (the live test that kills Open
    WebUI mid-sync found one so)."""
    base.files["f-lost"] = {"id": "f-lost", "filename": "a.md", "meta": {}, "hash": None, "data": {}}
    base.files["f-lost"]["data"]["status"] = "processing"
    # Due 1.5 s from now, beyond the run's own wait of 1 s (OPENWEBUI_PROCESS_TIMEOUT below)
    record = Record(
        "r",
        "o",
        KB,
        "a.md",
        3,
        "0" * 64,
        time.time(),
        0.0,
        journal_module.this_host(),  # this machine's: no clock slack
        1,
        "",
        "f-lost",
        links_itself=True,
        process_by=time.time() + 1.5,
    )

    async def recover_uploads(self: App) -> list[Resolution]:
        found = Resolution(record, (), None, "still processing", processing=True, lost=True)
        return [found] if "f-lost" in base.files else []

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    base.timings = replace(SYNC_POLLS, earlier_uploads_poll=0.05)
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path, env={"OPENWEBUI_PROCESS_TIMEOUT": "1"})
    assert code == OK, lines
    assert not any("going on" in line for line in lines), lines
    assert "removed 1 file(s) of uploads a killed run left that Open WebUI never finished" in lines
    assert "f-lost" not in base.files
    assert base_names(base) == ["a.md"]


@pytest.mark.parametrize("base", ["0.10.2", "0.12.4"], indirect=True)
async def test_a_dry_run_says_what_a_run_would_do_with_an_upload_open_webui_never_finished(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run looks at the journal too, settling nothing: past its writer's deadline, an upload a killed run left
    is named as the real run would treat it (0.10: a listed document removed and sent again; 0.12: a file in no base
    removed), and one Open WebUI may still finish as waited for. Nothing is deleted, no record dropped."""
    (tmp_path / "a.md").write_text("# A")
    assert (await run(tmp_path))[0] == OK
    links_first = base.version == "0.10.2"
    if links_first:
        (stuck,) = base.members
    else:
        stuck = "f-stuck"
        base.files[stuck] = {
            "id": stuck,
            "filename": "a.md",
            "meta": {},
            "hash": None,
            "data": {"status": "processing"},
        }
    started = time.time() - 1000.0  # past 120 + 300 s and 120 s of clock slack (the record is from host "h")
    lost = Record("r", "o", KB, "a.md", 3, "0" * 64, started, 0.0, "h", 1, "", stuck, links_itself=True)
    young = replace(lost, id="y", started=time.time(), file_id="f-young")
    looked: list[str] = []

    async def preview_uploads(self: App) -> list[Resolution]:
        looked.append("preview")
        return [
            Resolution(lost, (), None, "still processing", processing=True, lost=True),
            Resolution(young, (), None, "still processing", processing=True),
        ]

    async def recover_uploads(self: App) -> list[Resolution]:
        raise AssertionError("a dry run settles nothing")

    monkeypatch.setattr(App, "preview_uploads", preview_uploads)
    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    calls = len(base.router.calls)
    code, lines = await run(tmp_path, dry_run=True)
    assert code == OK, lines
    assert looked == ["preview"]
    assert writes_since(base, calls) == []
    assert stuck in base.files
    assert "a run now would first wait for Open WebUI to finish 1 upload(s) a killed run left processing" in lines
    if links_first:
        assert f"would remove   a.md ({stuck})" in lines, lines
        assert "would add      a.md" in lines, lines
    else:
        assert "would remove 1 file(s) of uploads a killed run left that Open WebUI never finished" in lines, lines
        assert not any(line.startswith("would add") for line in lines), lines
    assert lines[-1] == "dry run: nothing was changed"


@pytest.mark.parametrize("base", ["0.8.12"], indirect=True)
async def test_an_attach_a_killed_run_sent_is_waited_for_past_the_upload_deadline(
    base: Base, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only uploads that link themselves are given up on at their writer's deadline: an attach may begin late (after
    its processing and its turn at the base's lock) and Open WebUI may still run it, so it is waited for while its
    own window lasts."""
    started = time.time() - 1000.0  # past 120 + 300 s and 120 s of clock slack (the record is from host "h")
    record = Record("r", "o", KB, "a.md", 3, "0" * 64, started, 0.0, "h", 1, "", "f-old", attach_by=time.time() + 60)
    looks = [True, True]

    async def recover_uploads(self: App) -> list[Resolution]:
        waiting = looks.pop() if looks else False
        return [Resolution(record, (), None, "attach may still run", processing=True)] if waiting else []

    monkeypatch.setattr(App, "recover_uploads", recover_uploads)
    base.timings = replace(SYNC_POLLS, earlier_uploads_poll=0.0)
    (tmp_path / "a.md").write_text("# A")
    code, lines = await run(tmp_path)
    assert code == OK, lines
    assert "waiting for Open WebUI to finish 1 upload(s) a killed run left processing" in lines
    assert not any(line.startswith("note: Open WebUI has been processing") for line in lines), lines
    assert looks == []  # looked at until it ended
