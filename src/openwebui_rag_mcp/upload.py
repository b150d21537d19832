"""The upload protocol the write tools, URL adds and `sync` share: upload a file, wait until Open WebUI has processed
it, attach it to the base (or let it link itself), journaled from the upload on and shielded from cancellation."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.attach import attach_file
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ErrorCode, ToolFailure
from openwebui_rag_mcp.giveup import Waits, given_up_at, time_left
from openwebui_rag_mcp.journal import Tracked
from openwebui_rag_mcp.linkwatch import LinkWatch
from openwebui_rag_mcp.normalize import UPLOAD_MARK
from openwebui_rag_mcp.steps import (
    Progress,
    check_writable,
    discard,
    failed_at,
    named_duplicate,
    read_release,
    still_held,
    tell,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncOptions:
    """What only `sync` asks of an upload."""

    folder_id: str | None = None  # a folder of the base to put it in (Open WebUI 0.12+)
    # Let the upload link itself to the base where the release says when that is done: Open WebUI indexes and links it
    # in its background task, with no `file/add` and no lock held for it.
    links_itself: bool = False
    first_poll: float | None = None  # when to ask first whether it is processed (as the run's files took so far)
    watch: LinkWatch | None = None  # where such uploads to the base are awaited together
    # The run checked that the key may write to the base: Open WebUI refuses the attach or the link of a base that has
    # become read-only since, and the file is then removed again.
    writable_checked: bool = False
    # Before 0.6.42: where to leave the file id of an acknowledged attach for one read-back of the base's list at the
    # end of the run instead of reading the whole list after each attach; its journal record stays until then
    # (`Inflight.confirmed`).
    attach_checks: list[str] | None = None
    # Called once an upload that links itself has been answered, before Open WebUI's processing is awaited (the next
    # upload may go while this one is indexed).
    sent: Callable[[], None] | None = None


_NO_OPTIONS = SyncOptions()


@dataclass(frozen=True, slots=True)
class Upload:
    filename: str
    content: bytes
    content_type: str
    metadata: Mapping[str, Any]
    sync: SyncOptions | None = None  # built by `sync` only

    @property
    def options(self) -> SyncOptions:
        return self.sync or _NO_OPTIONS


@dataclass(frozen=True, slots=True)
class Uploaded:
    file_id: str
    status: str
    # None when the text was ours (knowledge_add), or its length was not read (a watched upload listed with its hash)
    extracted_chars: int | None
    processed_after: float | None = None  # seconds from the upload's answer until Open WebUI had processed it


async def upload_to_base(
    app: App, knowledge_id: str, upload: Upload, progress: Progress, *, text: str | None, tool: str
) -> Uploaded:
    """Upload, wait until Open WebUI has processed the file, attach it to the base under the base's write lock.

    Only the attach holds the lock: it is the one request that changes the base (a read-modify-write where not
    `Release.attach_is_atomic`, and Open WebUI's duplicate check reads the base before it links), so uploads to one
    base upload and process side by side while their attaches take turns. An upload that links itself
    (`SyncOptions.links_itself`, where `Release.links_on_upload`) has no attach: the write waits for Open WebUI's link
    and reads it back. `text` is the document's own text when we wrote it; None for a file whose text
    Open WebUI extracts (then an empty extraction is a failure of the processing stage)."""
    release = await read_release(app, "upload")
    if upload.sync is not None and upload.sync.links_itself and not release.links_on_upload:
        upload = replace(upload, sync=replace(upload.sync, links_itself=False))
    if upload.sync is None:  # `sync` settles its own records at its run's end, and a killed run's at its start
        await app.recover_uploads_quietly()  # what a dead writer with this credential left
    # The lock taken and given back at once: one that cannot be taken (Redis unreachable, a lost lease) refuses the
    # write before anything is sent, rather than after an upload that must then be removed again.
    async with app.locks.hold(knowledge_id) as lease:
        still_held(lease, "upload")
    # Without `link_checks_write_access` Open WebUI links an upload naming the base unasked: each such upload asks
    # just before it is sent.
    if not upload.options.writable_checked or (upload.options.links_itself and not release.link_checks_write_access):
        if upload.options.watch is not None:  # one read for the uploads that are ready at once
            await upload.options.watch.writable(functools.partial(check_writable, app, knowledge_id))
        else:
            await check_writable(app, knowledge_id)
    await tell(progress, 1, 4, "uploading")
    await checkpoint()  # a call cancelled by now uploads nothing
    # Recorded before the upload request, so that a process killed from here on leaves a file the next start (or the
    # next write with this credential, or `openwebui-rag-mcp recover`) finds and removes.
    async with _journaled(app, release, knowledge_id, upload) as tracked:
        # Open WebUI may store the file before it answers, so from the upload on the sequence runs to its end even
        # when the client cancels the call (TypeScript clients give up after 60 s): the answer, with the file id, is
        # always read, and the file ends attached or removed again. OPENWEBUI_TIMEOUT bounds the upload request.
        with anyio.CancelScope(shield=True):
            done = await _upload_and_attach(app, release, knowledge_id, upload, text, progress, tracked)
    try:
        await checkpoint()
    except anyio.get_cancelled_exc_class():
        log.warning(
            "%s was cancelled by the client once its upload had begun; it finished anyway: file %s is in knowledge "
            "base %s",
            tool,
            done.file_id,
            knowledge_id,
        )
        raise
    return done


@asynccontextmanager
async def _journaled(app: App, release: Release, knowledge_id: str, upload: Upload) -> AsyncIterator[Tracked | None]:
    if app.inflight is None:
        yield None
        return
    async with app.inflight.tracking(
        app.uploads_owner(),
        knowledge_id,
        upload.filename,
        upload.content,
        marked=release.capabilities.upload_metadata,
        answer_within=app.settings.timeout,
        links_itself=upload.options.links_itself,
        indexed_after_link=upload.options.links_itself and release.links_before_indexing,
        process_within=app.settings.process_timeout,
    ) as tracked:
        yield tracked


async def _upload_and_attach(
    app: App,
    release: Release,
    knowledge_id: str,
    upload: Upload,
    text: str | None,
    progress: Progress,
    tracked: Tracked | None,
) -> Uploaded:
    """The upload and all that follows it. The journal's record is settled when the sequence leaves nothing outside
    the base (attached, or nothing made, or removed again; an attach left in `SyncOptions.attach_checks` keeps it until
    the caller's read-back); otherwise recovery looks at the base later."""
    metadata = dict(upload.metadata)
    if tracked is not None and tracked.record.marked:  # how recovery tells this upload from any other, if need be
        metadata[UPLOAD_MARK] = tracked.record.id
    if upload.options.links_itself:
        metadata["knowledge_id"] = knowledge_id
        if upload.options.folder_id:
            metadata["directory_id"] = upload.options.folder_id
    try:
        answer = await app.client.upload(upload.filename, upload.content, metadata, upload.content_type)
        uploaded = normalize.file_record(answer, "an upload answer")
    except ToolFailure as failure:
        failed = failed_at(failure, "upload")
        if failed.outcome == "partial_or_unknown":  # said on stderr too: a cancelled call's error reaches no one
            log.warning("knowledge_add: the upload failed (%s); Open WebUI may hold the file in no base", failure.code)
        elif tracked is not None:
            tracked.settle()
        raise failed from None
    if tracked is not None:
        await tracked.uploaded(uploaded.file_id)
    if upload.options.links_itself and upload.options.sent is not None:
        upload.options.sent()
    try:
        if upload.options.links_itself:
            done = await _process_linked(app, release, knowledge_id, uploaded, progress, upload)
        else:
            # Before 0.6.23 Open WebUI processes during the upload, and its answer carries the extracted text: taken
            # from there, not read again (that read made a 200-note sync on 0.6.5 14 % slower).
            processed = answer if not release.capabilities.process_status else None
            done = await _process_and_attach(
                app, release, knowledge_id, uploaded, text, progress, upload, tracked, processed
            )
    except ToolFailure as failure:
        if tracked is not None and failure.outcome == "not_applied":  # the file was removed again
            tracked.settle()
        raise
    attach_checks = upload.options.attach_checks
    if tracked is not None and attach_checks is not None and done.file_id in attach_checks:
        tracked.defer()  # settled once the caller has read the base back: a kill before that leaves it to recovery
    elif tracked is not None:
        tracked.settle()
    return done


async def extracted_text(app: App, file_id: str, filename: str, body: object = None) -> str:
    """The text Open WebUI extracted from an uploaded file (from `body`, the file as already read, if given); a
    failure when it extracted none."""
    document = normalize.file_text(
        body if body is not None else await app.client.file(file_id), offset=0, max_chars=10**9
    )
    if not document.text.strip():
        raise ToolFailure(
            "upstream_error",
            f"Open WebUI extracted no text from {filename!r} (an image-only PDF with no OCR configured, or a type its "
            "loaders do not read)",
        )
    return document.text


async def _timed_processing(
    app: App,
    release: Release,
    uploaded: normalize.FileRecord,
    progress: Progress,
    upload: Upload,
    waited: float = 0.0,
) -> tuple[str, float]:
    """The wait for Open WebUI's processing of an upload: its final status and how long it took (with `waited`,
    the seconds already spent on it)."""
    await tell(progress, 2, 4, "processing")
    started = asyncio.get_running_loop().time()
    status = await wait_processed(app, release, uploaded, progress, upload.options.first_poll, waited)
    return status, asyncio.get_running_loop().time() - started + waited


async def wait_processed(
    app: App,
    release: Release,
    uploaded: normalize.FileRecord,
    progress: Progress,
    first_poll: float | None = None,
    waited: float = 0.0,
) -> str:
    """Wait until Open WebUI has extracted and embedded the file; its final status. Progress goes out on every
    poll, so clients that extend their timeout on progress keep waiting. `first_poll`: when to look first (a caller
    that has seen how long its files take), else `Timings.poll_first`. `waited`: seconds of OPENWEBUI_PROCESS_TIMEOUT
    already spent waiting for this file."""
    if not release.capabilities.process_status:
        # Releases before 0.6.23 process during the upload and report failure in the upload answer.
        if uploaded.error:
            raise ToolFailure(
                "upstream_error", f"Open WebUI could not process the document: {_quoted(app, uploaded.error)}"
            )
        return "completed"
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = given_up_at("processing", started - waited, Waits.of(app.settings))
    timings = app.settings.timings
    delay = timings.poll_first if first_poll is None else min(max(first_poll, timings.poll_first), timings.poll_max)
    polls = 0
    while True:
        status = await app.client.process_status(uploaded.file_id)
        if status == "completed":
            return status
        if status == "failed":
            raise await _processing_failed(app, uploaded.file_id)
        if loop.time() + delay > deadline:
            raise _still_processing(app, status)
        polls += 1
        # Always rising, never reaching the next step: 2 + n/(n+1).
        await tell(progress, 2 + polls / (polls + 1), 4, f"processing ({status}, {loop.time() - started:.0f} s)")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, app.settings.timings.poll_max)


async def _processing_failed(app: App, file_id: str) -> ToolFailure:
    error = normalize.file_record(await app.client.file(file_id)).error
    code: ErrorCode = "duplicate_content" if error and "duplicate" in error.lower() else "upstream_error"
    reason = _quoted(app, error) if error else "no reason given"
    return ToolFailure(code, f"Open WebUI could not process the document: {reason}")


def _still_processing(app: App, status: str) -> ToolFailure:
    return ToolFailure(
        "timeout",
        f"Open WebUI was still processing the document (status {status!r}) after "
        f"{app.settings.process_timeout:g} s (OPENWEBUI_PROCESS_TIMEOUT)",
        retryable=True,
    )


def _quoted(app: App, text: str) -> str:
    return app.client.quote(text)


async def _process_and_attach(
    app: App,
    release: Release,
    knowledge_id: str,
    uploaded: normalize.FileRecord,
    text: str | None,
    progress: Progress,
    upload: Upload,
    tracked: Tracked | None,
    processed: object = None,
) -> Uploaded:
    """The rest of an upload once the file exists: it ends with the file in the base, or removed again (or, when
    even that fails, named in the error). `processed`: the file as Open WebUI answered once it had processed it (the
    upload's answer before 0.6.23), when it carries the extracted text."""
    file_id = uploaded.file_id
    try:
        status, processed_after = await _timed_processing(app, release, uploaded, progress, upload)
        extracted = await extracted_text(app, file_id, upload.filename, processed) if text is None else None
    except ToolFailure as failure:
        raise await discard(app, file_id, failure, "process") from None
    content = text if text is not None else extracted or ""

    await tell(progress, 3, 4, "attaching")
    async with AsyncExitStack() as held:
        try:
            lease = await held.enter_async_context(app.locks.hold(knowledge_id))
            if tracked is not None:  # recovery then lets an attach Open WebUI may still be running end first
                await tracked.attaching(Waits.of(app.settings))
            lease.check()  # after the journal's write: the lease is checked as late as it can be
        except ToolFailure as failure:  # deleting the file again is safe without the lock: it is in no base
            raise await discard(app, file_id, failure, "attach") from None
        await attach_file(
            app,
            release,
            knowledge_id,
            file_id,
            content,
            tracked,
            folder_id=upload.options.folder_id,
            attach_checks=upload.options.attach_checks,
        )
    await tell(progress, 4, 4, "done")
    return Uploaded(file_id, status, len(extracted) if extracted is not None else None, processed_after)


async def _process_linked(
    app: App, release: Release, knowledge_id: str, uploaded: normalize.FileRecord, progress: Progress, upload: Upload
) -> Uploaded:
    """The rest of an upload that links itself: Open WebUI indexes the file into the base and links it in its
    background task (0.10 links first), marks it as written to the base and says "completed" (or "failed"; deleting
    the file then also unlinks it). It ends with the file in the base, its text read back and its link confirmed, or
    removed again; the base's lock is not taken, as nothing here changes the base but Open WebUI's own link. With a
    watch, the link is awaited together with the run's other uploads to the base (`linkwatch`), and the file looked at
    by itself only when the watch cannot tell."""
    file_id = uploaded.file_id
    waited = 0.0
    if upload.options.watch is not None:
        await tell(progress, 2, 4, "processing")
        started = asyncio.get_running_loop().time()
        listed = await upload.options.watch.linked(file_id, Waits.of(app.settings))
        waited = asyncio.get_running_loop().time() - started
        # Listed and marked as written to the base, so linked and indexed; a hash of some text, so it has a text (a
        # hash of none, or none at all, and the text is read back as below).
        if listed is not None and listed.hash not in (None, _NO_TEXT_SHA256):
            await tell(progress, 4, 4, "done")
            return Uploaded(file_id, "completed", None, waited)
    try:
        status, processed_after = await _timed_processing(app, release, uploaded, progress, upload, waited)
        settled = False
        if not release.completes_when_linked:
            left = time_left("processing", Waits.of(app.settings), since=0.0, now=processed_after)
            settled = await _settled_in_base(app, release, knowledge_id, file_id, upload.filename, left)
    except ToolFailure as failure:
        if await _status_or_none(app, file_id) != "failed":
            # Still running in Open WebUI (a timeout), or its status could not be read: Open WebUI may yet index it
            # into the base, and deleting the file now could leave its vectors in the base's collection with no
            # document. Recovery settles it once Open WebUI is done.
            raise failed_at(failure, "process", file_id, after_upload=True).explained(
                f" If it finishes, Open WebUI links the file {file_id} to knowledge base {knowledge_id} itself; if it "
                "fails, the next write with this key (or `openwebui-rag-mcp recover`) removes it."
            ) from None
        if failure.code == "duplicate_content" or not release.completes_when_linked:
            # Before 0.12.4 a failure while indexing into the base keeps no reason: a document of the same text in
            # the base says what it was (Open WebUI's duplicate check), and `sync` then replaces rather than adds.
            duplicate = await named_duplicate(app, knowledge_id, failure, await _text_or_none(app, file_id))
            if failure.code == "duplicate_content" or duplicate.existing_file_id:
                failure = replace(duplicate, code="duplicate_content")
        raise await discard(app, file_id, failure, "process") from None
    await tell(progress, 3, 4, "confirming the link")
    try:
        linked = settled or await _linked(app, knowledge_id, file_id, upload.filename)
    except ToolFailure as failure:
        raise failed_at(failure, "attach", file_id, after_upload=True).explained(
            f" Whether knowledge base {knowledge_id} now holds the file {file_id} could not be read; check with "
            "knowledge_files."
        ) from None
    if not linked:
        missing = ToolFailure(
            "upstream_error",
            f"Open WebUI processed the file but did not link it to knowledge base {knowledge_id} (has this key lost "
            "write access to it?)",
        )
        raise await discard(app, file_id, missing, "attach") from None
    try:
        extracted = await extracted_text(app, file_id, upload.filename)
    except ToolFailure as failure:
        raise await _unlink(app, knowledge_id, file_id, failure) from None
    await tell(progress, 4, 4, "done")
    return Uploaded(file_id, status, len(extracted), processed_after)


# The hash Open WebUI keeps (`hash`, the SHA-256 of the extracted text) for a file with no text at all.
_NO_TEXT_SHA256 = hashlib.sha256(b"").hexdigest()


async def _linked(app: App, knowledge_id: str, file_id: str, filename: str) -> bool:
    """Whether the base lists a file that linked itself, looked at again for a moment when it does not yet; last, in
    every document of the base (Open WebUI's name search is an ILIKE, which on PostgreSQL reads `\\` in a name as an
    escape)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + app.settings.timings.link_wait
    delay = app.settings.timings.poll_first
    while await app.client.listed_file(knowledge_id, file_id, filename) is None:
        if loop.time() + delay > deadline:
            files, _ = await app.client.knowledge_files(knowledge_id, None)
            return any(f.file_id == file_id for f in normalize.file_records(files))
        await asyncio.sleep(delay)
        delay = min(delay * 2, app.settings.timings.poll_max)
    return True


async def _settled_in_base(
    app: App, release: Release, knowledge_id: str, file_id: str, filename: str, left: float
) -> bool:
    """After "completed" before 0.12.4 (a self-linked upload there is "completed" before it is in the base): wait
    within `left` seconds until the base lists the file (0.9.6 to 0.10: marked as written to the base, too; True),
    or it failed (raised), or it stayed "completed" and unlisted for `Timings.link_wait`: Open WebUI did not link it
    (False; the caller reads the link again and removes the file). Asks the base by the file's name, not for the
    file's text."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + left
    unlisted_since: float | None = None
    delay = app.settings.timings.poll_first
    while True:
        listed = await app.client.listed_file(knowledge_id, file_id, filename)
        if listed is not None and (not release.links_before_indexing or listed.collection == knowledge_id):
            return True
        status = await app.client.process_status(file_id)
        if status == "failed":
            raise await _processing_failed(app, file_id)
        if listed is None and status == "completed":  # 0.11 to 0.12.3 say so a moment before indexing into the base
            unlisted_since = loop.time() if unlisted_since is None else unlisted_since
            if loop.time() - unlisted_since >= app.settings.timings.link_wait:
                return False
        else:
            unlisted_since = None
        if loop.time() + delay > deadline:
            if listed is not None and status == "completed" and release.links_before_indexing:
                return await _marked_again(app, knowledge_id, file_id, filename, status)
            raise _still_processing(app, status)
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, app.settings.timings.poll_max)


async def _marked_again(app: App, knowledge_id: str, file_id: str, filename: str, status: str) -> bool:
    """A file 0.9.6 to 0.10 linked and called "completed" but never marked as written to the base, past the write's
    deadline: indexed into the base again (`file/update`, which writes the mark); True once the base lists it marked.

    Under load those releases can lose the mark: seen on 0.9.6 about once in 1,500 uploads, the file linked and
    "completed" with its hash, Open WebUI's log saying it was indexed into the base and linked, and its mark back at
    its own collection (likely: 0.9.6's metadata update returns quietly when its write fails).
    OPENWEBUI_PROCESS_TIMEOUT after the upload Open WebUI's own task is over unless it hangs, so indexing again does
    not race it: `file/update` replaces the file's vectors in the base rather than adding a second copy."""
    async with app.locks.hold(knowledge_id) as lease:
        still_held(lease, "reindex", file_id, after_upload=True)
        try:
            await app.client.reindex_file(knowledge_id, file_id)
        except ToolFailure:
            raise _still_processing(app, status) from None
    listed = await app.client.listed_file(knowledge_id, file_id, filename)
    if listed is None or listed.collection != knowledge_id:
        raise _still_processing(app, status)
    log.info(
        "file %s was linked to knowledge base %s but never marked as written there; indexed it again",
        file_id,
        knowledge_id,
    )
    return True


async def _status_or_none(app: App, file_id: str) -> str | None:
    try:
        return await app.client.process_status(file_id)
    except ToolFailure:
        return None


async def _text_or_none(app: App, file_id: str) -> str | None:
    try:
        return normalize.file_text(await app.client.file(file_id), offset=0, max_chars=10**9).text
    except ToolFailure:
        return None


async def _unlink(app: App, knowledge_id: str, file_id: str, failure: ToolFailure) -> ToolFailure:
    """Take a file that linked itself out of its base again (and delete it), under the base's lock."""
    try:
        async with app.locks.hold(knowledge_id) as lease:
            lease.check()
            await app.client.remove_file(knowledge_id, file_id, delete_file=True)
    except ToolFailure as problem:
        return failed_at(failure, "process", file_id, after_upload=True).explained(
            f" Knowledge base {knowledge_id} holds the file {file_id}, which could not be removed again "
            f"({problem.code}): remove it with knowledge_delete."
        )
    removed = failure.explained(f" The file {file_id} was removed again; nothing was added.")
    return removed.at("process", outcome="not_applied")
