"""Attaching an uploaded file to its base, and what follows an attach Open WebUI never answered or (before 0.6.42)
may have dropped."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Literal

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ToolFailure, unanswered, write_outcome
from openwebui_rag_mcp.giveup import Waits, given_up_at
from openwebui_rag_mcp.journal import Tracked
from openwebui_rag_mcp.steps import discard, failed_at, listed_in, named_duplicate

log = logging.getLogger(__name__)

_CONFIRM_READS = 3  # reads of a base's list to confirm attaches before 0.6.42, `Timings.confirm_pause` × n apart


async def attach_file(
    app: App,
    release: Release,
    knowledge_id: str,
    file_id: str,
    content: str,
    tracked: Tracked | None,
    *,
    folder_id: str | None,
    attach_checks: list[str] | None,
) -> None:
    """Link a processed file to the base, under its write lock: it ends linked (before 0.6.42 read back, or left in
    `attach_checks` for the caller to read back) or removed again, or named in the error when even that
    fails."""
    try:
        await app.client.add_file(knowledge_id, file_id, folder_id)
        if tracked is not None:
            tracked.attach_answered()
    except ToolFailure as failure:
        still_running = unanswered(failure)  # Open WebUI may still be running the attach
        if tracked is not None and not still_running:
            tracked.attach_answered()
        if failure.code == "duplicate_content":
            failure = await named_duplicate(app, knowledge_id, failure, content)
        if write_outcome(failure) == "not_applied":
            listed: bool | None = False
        elif still_running:
            end = await outlived_attach(app, knowledge_id, file_id, tracked)
            if end == "listed":  # it ended well after all, later than its answer was due
                log.warning(
                    "knowledge_add: Open WebUI did not answer the attach of %s (%s), but the base lists it since",
                    file_id,
                    failure.code,
                )
                if tracked is not None:
                    tracked.attach_answered()
                await _confirm_or_defer(app, release, knowledge_id, file_id, attach_checks)
                return
            if end != "unreadable":
                raise await _discard_outlived(app, file_id, failure, end) from None
            listed = None
        else:
            listed = await listed_in(app, knowledge_id, file_id)
        if listed is False:
            raise await discard(app, file_id, failure, "attach") from None
        failed = failed_at(failure, "attach", file_id, after_upload=True)
        if listed:
            raise failed.explained(
                f" Knowledge base {knowledge_id} lists the file {file_id} all the same: search it to check that it "
                "was indexed, or remove it with knowledge_delete."
            ) from None
        raise failed.explained(
            f" Whether knowledge base {knowledge_id} now holds the file {file_id} could not be read; check with "
            "knowledge_files."
        ) from None
    await _confirm_or_defer(app, release, knowledge_id, file_id, attach_checks)


AttachEnd = Literal["listed", "failed", "unlisted", "unknown", "unreadable"]


async def outlived_attach(app: App, knowledge_id: str, file_id: str, tracked: Tracked | None = None) -> AttachEnd:
    """After an attach whose answer never came (`errors.unanswered`): what became of it. Open WebUI goes on with an
    attach its caller gave up on; to delete the file at once could leave the base listing a document without a file,
    and before 0.6.42 the attach would then rewrite the base's whole list over whatever another writer attached
    meanwhile. So, still under the base's lock, for up to OPENWEBUI_TIMEOUT more, look at the file (and at the base
    when the file is marked written to it, `meta.collection_name`, every `Timings.list_read_every` otherwise, and at
    the end) until: the base lists it ("listed"); Open WebUI marked it failed ("failed"); it is marked written to the
    base and still unlisted after `Timings.link_wait` ("unlisted": the attach failed after indexing); or the time is
    up ("unknown", or "unreadable" when the base could not be read then). A failed read is looked at again."""
    if tracked is not None:  # should this process die while it looks, recovery waits as long
        await tracked.attaching(Waits.of(app.settings))
    loop = asyncio.get_running_loop()
    deadline = given_up_at("answer", loop.time(), Waits.of(app.settings))
    marked_since: float | None = None
    listed_at = -app.settings.timings.list_read_every
    delay = app.settings.timings.poll_first
    while True:
        final = loop.time() >= deadline
        try:
            record: normalize.FileRecord | None = normalize.file_record(await app.client.file(file_id))
        except ToolFailure:
            record = None  # Open WebUI busy or restarting: looked at again
        if record is not None and record.status == "failed":
            return "failed"
        marked = record is not None and record.collection == knowledge_id
        listed: bool | None = None
        if marked or final or loop.time() - listed_at >= app.settings.timings.list_read_every:
            listed_at = loop.time()
            listed = await listed_in(app, knowledge_id, file_id)
            if listed:
                return "listed"
        if marked and listed is False:
            marked_since = loop.time() if marked_since is None else marked_since
            if loop.time() - marked_since >= app.settings.timings.link_wait:
                return "unlisted"
        if final:
            return "unreadable" if listed is None else "unknown"
        await asyncio.sleep(max(min(delay, deadline - loop.time()), 0.0))
        delay = min(delay * 1.5, app.settings.timings.poll_max)


async def _discard_outlived(app: App, file_id: str, failure: ToolFailure, end: AttachEnd) -> ToolFailure:
    """Remove the file of an attach that never answered and did not end listed; what is left is uncertain unless
    Open WebUI marked the attach failed."""
    removed = await discard(app, file_id, failure, "attach")
    if end == "failed" or removed.outcome != "not_applied":  # certain, or already says what is left
        return removed
    if end == "unlisted":
        why = (
            "Open WebUI had marked it written to the base's search index without listing it: its text may still be "
            "found there."
        )
    else:
        why = (
            "Open WebUI showed no end of the attach within OPENWEBUI_TIMEOUT more: should it still be running it, "
            "the base may list the file later."
        )
    said = replace(
        failure,
        message=f"{failure.message} The uploaded file {file_id} was removed again, but {why}",
        attach_unseen=end == "unknown",
    )
    return said.explained(" Check with knowledge_files before adding it again.").at(
        "attach", outcome="partial_or_unknown"
    )


async def _confirm_or_defer(
    app: App, release: Release, knowledge_id: str, file_id: str, attach_checks: list[str] | None
) -> None:
    """Before 0.6.42 an attach rewrites the base's file list (read-modify-write), so a concurrent change (another
    program, or a replica whose lease was lost) can drop the file while Open WebUI answers 200: read the list back, or
    leave that to the caller (`attach_checks`)."""
    if release.attach_is_atomic:
        return
    if attach_checks is not None:
        attach_checks.append(file_id)
        return
    try:
        listed = await attached_files(app, knowledge_id)
    except ToolFailure as failure:
        raise failed_at(failure, "attach", file_id, after_upload=True).explained(
            f" Open WebUI accepted the attach, but whether knowledge base {knowledge_id} lists the file {file_id} "
            "could not be read (before 0.6.42 a concurrent change can drop it); check with knowledge_files."
        ) from None
    if file_id not in listed:
        raise (await dropped(app, knowledge_id, file_id))[0]


async def attached_files(app: App, knowledge_id: str) -> set[str]:
    """The file ids the base lists, read to confirm attaches: a failed read is tried again (1 s, then 2 s later), as
    a file is named as failed or removed again on what it says."""
    for attempt in range(_CONFIRM_READS):
        try:
            files, _ = await app.client.knowledge_files(knowledge_id, None)
            return {f.file_id for f in normalize.file_records(files)}
        except ToolFailure:
            if attempt == _CONFIRM_READS - 1:
                raise
            await asyncio.sleep(app.settings.timings.confirm_pause * (attempt + 1))
    raise AssertionError("unreachable")


async def dropped(app: App, knowledge_id: str, file_id: str) -> tuple[ToolFailure, bool]:
    """A file a concurrent change dropped from the base's list after its attach: deleted again (it is in no base).
    The failure to report, and whether the file is gone."""
    lost = ToolFailure(
        "upstream_error",
        f"Open WebUI accepted attaching the file, but knowledge base {knowledge_id} does not list it: before 0.6.42 "
        "it rewrites a base's file list on every change, and a concurrent change dropped it.",
    )
    note = " Its text may still be in the base's search index; check with knowledge_files before adding it again."
    try:
        await app.client.delete_file(file_id)
    except ToolFailure as problem:
        log.warning("knowledge_add: could not remove the uploaded file %s again (%s)", file_id, problem.message)
        return lost.at("attach", file_id=file_id, outcome="partial_or_unknown").explained(
            f" The uploaded file {file_id} could not be removed again ({problem.code}): delete it in Open WebUI." + note
        ), False
    log.warning("knowledge_add: removed the uploaded file %s again after: %s", file_id, lost.message)
    return lost.at("attach", outcome="partial_or_unknown").explained(
        f" The uploaded file {file_id} was removed again." + note
    ), True
