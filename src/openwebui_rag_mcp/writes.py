"""The write tools: multi-request sequences that must never damage a user's knowledge.

Each sequence holds its base's write lock (`App.locks`) from its first request to its last, is never retried, and
on failure says which stage failed, which file exists because of it, and whether anything may have changed.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import mimetypes
import re
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import anyio
from anyio.lowlevel import checkpoint

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App, check_id, check_writes_allowed
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ErrorCode, Stage, ToolFailure, invalid_argument, unanswered, write_outcome
from openwebui_rag_mcp.inflight import Tracked
from openwebui_rag_mcp.linkwatch import LinkWatch
from openwebui_rag_mcp.localfiles import FileSource as FileSource  # re-exported: server.py builds one
from openwebui_rag_mcp.localfiles import read_source
from openwebui_rag_mcp.locks import Lease
from openwebui_rag_mcp.models import (
    DocumentAdded,
    DocumentRemoved,
    DocumentUpdated,
    FileAdded,
    KnowledgeBase,
    KnowledgeCreated,
    KnowledgeDeleted,
    KnowledgeRenamed,
)
from openwebui_rag_mcp.normalize import UPLOAD_MARK

Progress = Callable[[float, float, str], Awaitable[None]]
log = logging.getLogger(__name__)

NAME_MAX_CHARS = 200
DESCRIPTION_MAX_CHARS = 4_000
TITLE_MAX_CHARS = 300
TEXT_MAX_CHARS = 2_000_000
METADATA_MAX_BYTES = 16_384
METADATA_MAX_DEPTH = 4
# Upload-metadata keys that change what Open WebUI itself does with the file (auto-linking to a base, overriding the
# content hash, placing it in a folder or a channel), the marks of the documents `sync` manages, and the journal's mark
# of each upload in flight: refused, so a caller can neither bypass checks nor pass for this server.
RESERVED_METADATA_KEYS = frozenset(
    {
        "knowledge_id",
        "file_hash",
        "directory_id",
        "channel_id",
        "collection_name",
        "synced_by",
        UPLOAD_MARK,
        "sync_source",
    }
)
# 255 bytes (NAME_MAX) less Open WebUI's "<uuid>_" prefix (37 bytes), with room to spare.
FILENAME_MAX_BYTES = 200
_POLL_FIRST_DELAY = 0.2
_POLL_MAX_DELAY = 2.0
_CONFIRM_READS = 3  # reads of a base's list to confirm attaches before 0.6.42, `_CONFIRM_PAUSE` × n apart
_CONFIRM_PAUSE = 1.0
# Dots go too, so no "..", hidden file or second extension can come from a title.
_UNSAFE_FILENAME = re.compile(r"[^\w\- ]+")
_UNDERSCORE_RUNS = re.compile(r"[\s_]+")


async def _no_progress(progress: float, total: float, message: str) -> None:
    return None


async def _tell(progress: Progress, done: float, total: float, message: str) -> None:
    """Report progress; a client that went away (a cancelled call) must not stop a write half-way."""
    try:
        await progress(done, total, message)
    except Exception as error:  # a closed stream, a cancelled request: the write goes on
        log.debug("could not report progress (%s)", type(error).__name__)


def safe_filename(title: str) -> str:
    """A filename derived from the title: letters of any script kept, path and shell characters replaced.

    Bounded in UTF-8 bytes, not characters: Open WebUI stores the upload as `<uuid>_<filename>`, and a file name
    of more than 255 bytes fails on Linux (`File name too long`) on releases that do not shorten it themselves;
    72 CJK characters are already 216 bytes. The full title travels in the upload metadata.
    """
    name = unicodedata.normalize("NFKC", title)
    name = _UNSAFE_FILENAME.sub("_", name).strip(" _")
    name = _UNDERSCORE_RUNS.sub("_", name)
    name = name.encode()[: FILENAME_MAX_BYTES - len(".md")].decode("utf-8", "ignore").strip("_")
    return f"{name or 'document'}.md"


def _check_text(text: str, what: str, limit: int) -> str:
    if not text.strip():
        raise invalid_argument(f"{what} must not be empty")
    if len(text) > limit:
        raise invalid_argument(f"{what} is {len(text)} characters long; the limit is {limit}")
    return text


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    reserved = sorted(RESERVED_METADATA_KEYS & metadata.keys())
    if reserved:
        raise invalid_argument(
            f"metadata keys {reserved} are reserved: they change how Open WebUI (or this server's sync) handles the "
            "file"
        )
    try:
        encoded = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise invalid_argument(f"metadata must be plain JSON ({exc})") from None
    if len(encoded.encode()) > METADATA_MAX_BYTES:
        raise invalid_argument(f"metadata is {len(encoded.encode())} bytes as JSON; the limit is {METADATA_MAX_BYTES}")
    if _depth(metadata) > METADATA_MAX_DEPTH:
        raise invalid_argument(f"metadata is nested deeper than {METADATA_MAX_DEPTH} levels")
    return dict(metadata)


def _failed(
    failure: ToolFailure, stage: Stage, file_id: str | None = None, *, after_upload: bool = False
) -> ToolFailure:
    """Place a failure in the write sequence. Once a file was uploaded, something exists that did not before."""
    outcome = "partial_or_unknown" if after_upload else write_outcome(failure)
    return failure.at(stage, file_id=file_id, outcome=outcome)


def _still_held(lease: Lease, stage: Stage, file_id: str | None = None, *, after_upload: bool = False) -> None:
    """Stop before a write request once the base's lock is lost: another replica may be writing to the base."""
    try:
        lease.check()
    except ToolFailure as failure:
        raise _failed(failure, stage, file_id, after_upload=after_upload) from None


async def _release(app: App, stage: Stage, file_id: str | None = None) -> Release:
    """The release, read before a write begins: failing to read it changes nothing."""
    try:
        return await app.client.release()
    except ToolFailure as failure:
        raise failure.at(stage, file_id=file_id, outcome="not_applied") from None


def _check_description(description: str) -> None:
    if len(description) > DESCRIPTION_MAX_CHARS:
        raise invalid_argument(
            f"description is {len(description)} characters long; the limit is {DESCRIPTION_MAX_CHARS}"
        )


async def create_knowledge(app: App, name: str, description: str) -> KnowledgeCreated:
    check_writes_allowed()
    name = _check_text(name, "name", NAME_MAX_CHARS).strip()
    _check_description(description)
    if not app.settings.allow_create:
        raise ToolFailure(
            "forbidden",
            "creating knowledge bases is switched off for this server (OPENWEBUI_ALLOW_CREATE is not true; it "
            "defaults to false while OPENWEBUI_KNOWLEDGE_IDS is set); nothing was changed",
            stage="create",
            outcome="not_applied",
        )
    release = await _release(app, "create")
    async with app.locks.hold("create") as lease:
        _still_held(lease, "create")
        try:
            created = await app.client.create_knowledge(release, name, description)
        except ToolFailure as failure:
            raise _failed(failure, "create") from None
        app.readable.forget(app.client)  # the key can read one more base
        try:
            knowledge_id = normalize.created_id(created, "a new knowledge base")
        except ToolFailure as failure:
            raise failure.at("create", outcome="partial_or_unknown") from None
        await app.remember_created(knowledge_id)  # its creator's, alongside an allowlist, when creating is allowed
    return KnowledgeCreated(ok=True, knowledge_id=knowledge_id, name=name, description=description)


async def _check_writable(
    app: App, knowledge_id: str, stage: Stage = "upload", file_id: str | None = None
) -> KnowledgeBase:
    """Refuse a base shared with the key read-only, the same way for every write (Open WebUI's own answers to the
    write requests differ: 401, 403 or a 404 for the file); the base as read."""
    try:
        base = normalize.knowledge_base(await app.client.knowledge(knowledge_id))
    except ToolFailure as failure:  # only a read so far: nothing changed, whatever went wrong
        raise failure.at(stage, file_id=file_id, outcome="not_applied") from None
    if base.write_access is False:
        raise ToolFailure(
            "forbidden",
            f"this API key may read knowledge base {knowledge_id} but not change it; nothing was changed",
            stage=stage,
            file_id=file_id,
            outcome="not_applied",
        )
    return base


async def rename_knowledge(app: App, knowledge_id: str, name: str | None, description: str | None) -> KnowledgeRenamed:
    """Give a base a new name, a new description, or both; its documents and its sharing stay as they are."""
    check_writes_allowed()
    app.check_base(knowledge_id)
    if name is None and description is None:
        raise invalid_argument("give name, description or both: nothing else of a base is changed here")
    if name is not None:
        name = _check_text(name, "name", NAME_MAX_CHARS).strip()
    if description is not None:
        _check_description(description)
    release = await _release(app, "rename")
    if not release.private_by_default:
        # Before 0.8 the update form rewrites the base's sharing (`access_control`; left out, the base becomes
        # readable by every user) and before 0.6.41 its list of files: sending back what was read could undo a
        # change made meanwhile, so nothing is sent.
        raise ToolFailure(
            "unsupported",
            f"Open WebUI {release.version} rewrites a base's sharing along with its name (0.8 and later do not), so "
            "renaming it here could widen or undo its sharing; rename it in Open WebUI's own interface. Nothing was "
            "changed",
            stage="rename",
            outcome="not_applied",
        )
    async with app.locks.hold(knowledge_id) as lease:
        base = await _check_writable(app, knowledge_id, "rename")
        new_name = name if name is not None else base.name
        new_description = description if description is not None else (base.description or "")
        _still_held(lease, "rename")
        try:
            answer = await app.client.rename_knowledge(knowledge_id, new_name, new_description)
        except ToolFailure as failure:
            raise _failed(failure, "rename") from None
        app.readable.forget(app.client)  # lists and completions show the new name
        try:
            renamed = normalize.knowledge_base(answer)
        except ToolFailure as failure:
            raise failure.at("rename", outcome="partial_or_unknown") from None
    return KnowledgeRenamed(
        ok=True, knowledge_id=knowledge_id, name=renamed.name, description=renamed.description or ""
    )


async def delete_knowledge(app: App, knowledge_id: str, confirm: str) -> KnowledgeDeleted:
    """Delete a whole base: only with OPENWEBUI_ALLOW_DELETE_BASE, only a base the key's own user created (Open
    WebUI also lets admins and users with write access delete it), and only when `confirm` is its exact name."""
    check_writes_allowed()
    app.check_base(knowledge_id)
    if not app.settings.allow_delete_base:
        raise ToolFailure(
            "forbidden",
            "deleting whole knowledge bases is switched off for this server (OPENWEBUI_ALLOW_DELETE_BASE); nothing "
            "was changed",
            stage="delete",
            outcome="not_applied",
            request_sent=False,
        )
    release = await _release(app, "delete")
    async with app.locks.hold(knowledge_id) as lease:
        base = await _check_writable(app, knowledge_id, "delete")
        if not base.name or confirm != base.name:
            raise invalid_argument(
                f"confirm must be the exact name of knowledge base {knowledge_id}, {base.name!r}; nothing was changed"
            )
        try:
            owned = await _created_by_caller(app, release, knowledge_id, base.name)
            documents = len((await app.client.knowledge_files(knowledge_id, None))[0])
        except ToolFailure as failure:
            raise failure.at("delete", outcome="not_applied") from None
        if not owned:
            raise ToolFailure(
                "forbidden",
                f"knowledge base {knowledge_id} was not created by this key's user; through this server only its "
                "creator may delete it (Open WebUI's own interface lets admins and editors). Nothing was changed",
                stage="delete",
                outcome="not_applied",
            )
        _still_held(lease, "delete")
        try:
            answer = await app.client.delete_knowledge(knowledge_id)
        except ToolFailure as failure:
            raise _failed(failure, "delete") from None
        finally:
            app.allowed_files.forget(app.client)  # its files stay in Open WebUI, in no allowed base now
        app.readable.forget(app.client)
        if answer is not True:  # Open WebUI answers `true`; anything else may be a proxy's page
            raise (
                normalize.unexpected("an answer to deleting a knowledge base that is not `true`")
                .at("delete", outcome="partial_or_unknown")
                .explained(f" Whether knowledge base {knowledge_id} still exists could not be told; list the bases.")
            )
    return KnowledgeDeleted(ok=True, knowledge_id=knowledge_id, name=base.name, documents=documents)


async def _created_by_caller(app: App, release: Release, knowledge_id: str, name: str) -> bool:
    """Whether the credential's own user created the base. From 0.6.42 Open WebUI lists the bases a caller created
    (`view_option=created`; from 0.12 an API key cannot read its own user); before, the base names its owner and
    `GET /auths/` the caller."""
    if not release.known:  # a fork might ignore view_option and list every base: nothing is taken on trust
        raise ToolFailure(
            "unsupported",
            f"the Open WebUI version {release.version!r} cannot be read, so who created the base cannot be told "
            "safely; nothing was changed",
        )
    if release.paged_lists:
        # A name with LIKE's escape character may not match itself upstream: then every base the caller created.
        for query in (name, None):
            created = await app.client.created_knowledge_named(query)
            if len({item.get("user_id") for item in created}) > 1:  # not the caller's own list after all
                return False
            if any(item.get("id") == knowledge_id for item in created):
                return True
        return False
    owner = (await app.client.knowledge(knowledge_id)).get("user_id")
    return isinstance(owner, str) and owner == await app.client.user_id()


async def _wait_processed(
    app: App,
    release: Release,
    uploaded: normalize.FileRecord,
    progress: Progress,
    first_poll: float | None = None,
    waited: float = 0.0,
) -> str:
    """Wait until Open WebUI has extracted and embedded the file; its final status. Progress goes out on every
    poll, so clients that extend their timeout on progress keep waiting. `first_poll`: when to look first (a caller
    that has seen how long its files take), else _POLL_FIRST_DELAY. `waited`: seconds of OPENWEBUI_PROCESS_TIMEOUT
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
    deadline = started + app.settings.process_timeout - waited
    delay = _POLL_FIRST_DELAY if first_poll is None else min(max(first_poll, _POLL_FIRST_DELAY), _POLL_MAX_DELAY)
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
        await _tell(progress, 2 + polls / (polls + 1), 4, f"processing ({status}, {loop.time() - started:.0f} s)")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, _POLL_MAX_DELAY)


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


async def _settled_in_base(
    app: App, release: Release, knowledge_id: str, file_id: str, filename: str, left: float
) -> bool:
    """After "completed" before 0.12.4 (a self-linked upload there is "completed" before it is in the base): wait
    within `left` seconds until the base lists the file (0.9.6 to 0.10: marked as written to the base, too; True),
    or it failed (raised), or it stayed "completed" and unlisted for _LINK_WAIT_SECONDS: Open WebUI did not link it
    (False; the caller reads the link again and removes the file). Asks the base by the file's name, not for the
    file's text."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + left
    unlisted_since: float | None = None
    delay = _POLL_FIRST_DELAY
    while True:
        listed = await app.client.listed_file(knowledge_id, file_id, filename)
        if listed is not None and (not release.links_before_indexing or listed.collection == knowledge_id):
            return True
        status = await app.client.process_status(file_id)
        if status == "failed":
            raise await _processing_failed(app, file_id)
        if listed is None and status == "completed":  # 0.11 to 0.12.3 say so a moment before indexing into the base
            unlisted_since = loop.time() if unlisted_since is None else unlisted_since
            if loop.time() - unlisted_since >= _LINK_WAIT_SECONDS:
                return False
        else:
            unlisted_since = None
        if loop.time() + delay > deadline:
            if listed is not None and status == "completed" and release.links_before_indexing:
                return await _marked_again(app, knowledge_id, file_id, filename, status)
            raise _still_processing(app, status)
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, _POLL_MAX_DELAY)


async def _marked_again(app: App, knowledge_id: str, file_id: str, filename: str, status: str) -> bool:
    """A file 0.9.6 to 0.10 linked and called "completed" but never marked as written to the base, past the write's
    deadline: indexed into the base again (`file/update`, which writes the mark); True once the base lists it marked.

    Under load those releases can lose the mark: seen on 0.9.6 about once in 1,500 uploads, the file linked and
    "completed" with its hash, Open WebUI's log saying it was indexed into the base and linked, and its mark back at
    its own collection (likely: 0.9.6's metadata update returns quietly when its write fails).
    OPENWEBUI_PROCESS_TIMEOUT after the upload Open WebUI's own task is over unless it hangs, so indexing again does
    not race it: `file/update` replaces the file's vectors in the base rather than adding a second copy."""
    async with app.locks.hold(knowledge_id) as lease:
        _still_held(lease, "reindex", file_id, after_upload=True)
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


def _quoted(app: App, text: str) -> str:
    return app.client.quote(text)


async def _holder_of(app: App, knowledge_id: str, text: str) -> str | None:
    """The file of the base whose extracted text has the same hash as `text`, when Open WebUI tells."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
    except ToolFailure:
        return None
    return next((f.file_id for f in normalize.file_records(files) if f.hash == digest), None)


async def _discard(app: App, file_id: str, failure: ToolFailure, stage: Stage) -> ToolFailure:
    """Remove a file this write uploaded and could not add; `failure` placed at `stage`, saying what is left."""
    try:
        await app.client.delete_file(file_id)
    except ToolFailure as problem:
        log.warning("knowledge_add: could not remove the uploaded file %s again (%s)", file_id, problem.message)
        left = _failed(failure, stage, file_id, after_upload=True)
        return left.explained(
            f" The uploaded file {file_id} could not be removed again ({problem.code}); it is in no knowledge base: "
            "delete it in Open WebUI (Workspace > Knowledge or the Files API)."
        )
    log.warning("knowledge_add: removed the uploaded file %s again after: %s", file_id, failure.message)
    # Nothing is left: repeating the call is as safe as it was before it.
    cleared = replace(
        failure, message=failure.message + f" The uploaded file {file_id} was removed again; nothing was added."
    )
    return cleared.at(stage, outcome="not_applied")


async def add_document(
    app: App,
    knowledge_id: str,
    text: str,
    title: str,
    metadata: Mapping[str, Any] | None,
    progress: Progress = _no_progress,
) -> DocumentAdded:
    check_writes_allowed()
    app.check_base(knowledge_id)
    _check_text(text, "text", TEXT_MAX_CHARS)
    title = _check_text(title, "title", TITLE_MAX_CHARS).strip()
    extra = check_metadata(metadata)
    filename = safe_filename(title)
    upload = Upload(
        filename, text.encode(), "text/markdown", {**extra, "title": title, "source": extra.get("source", filename)}
    )
    added = await upload_to_base(app, knowledge_id, upload, progress, text=text, tool="knowledge_add")
    return DocumentAdded(
        ok=True, knowledge_id=knowledge_id, file_id=added.file_id, title=title, filename=filename, status=added.status
    )


@dataclass(frozen=True, slots=True)
class Upload:
    filename: str
    content: bytes
    content_type: str
    metadata: Mapping[str, Any]
    folder_id: str | None = None  # a folder of the base to put it in (sync, Open WebUI 0.12+)
    # The caller lets the upload link itself to the base where the release says when that is done (`sync`): Open WebUI
    # indexes and links it in its background task, with no `file/add` and no lock held for it.
    links_itself: bool = False
    first_poll: float | None = None  # when to ask first whether it is processed (`sync`: as its files took so far)
    # Where such uploads to the base are awaited together (`sync`); without it each polls its own status.
    watch: LinkWatch | None = None
    # The caller checked that the key may write to the base (`sync`, once per run): Open WebUI refuses the attach or
    # the link of a base that has become read-only since, and the file is then removed again.
    writable_checked: bool = False
    # Before 0.6.42: where to leave the file id of an acknowledged attach for one read-back of the base's list
    # later (`sync`, at the end of its run: `sync._Run._confirm_attaches`) instead of reading the whole list after each
    # attach.
    attach_checks: list[str] | None = None  # its journal record stays until then (`Inflight.confirmed`)
    # Called once an upload that links itself has been answered, before Open WebUI's processing is awaited (`sync`:
    # the next upload may go while this one is indexed).
    sent: Callable[[], None] | None = None


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

    Only the attach holds the lock: it is the one request that changes the base (before 0.6.42 by rewriting its file
    list, and on every release Open WebUI's duplicate check reads the base before it links), so uploads to one base
    upload and process side by side while their attaches take turns. An upload that links itself (`links_itself`,
    Open WebUI 0.9.6+) has no attach: Open WebUI indexes and links it, and the write waits for that and reads the link
    back. `text` is the document's own text when we wrote it; None for a file whose text Open WebUI extracts (then an
    empty extraction is a failure of the processing stage)."""
    release = await _release(app, "upload")
    upload = replace(upload, links_itself=upload.links_itself and release.links_on_upload)
    await app.recover_uploads_quietly()  # what a dead writer with this credential left
    # The lock taken and given back at once: one that cannot be taken (Redis unreachable, a lost lease) refuses the
    # write before anything is sent, rather than after an upload that must then be removed again.
    async with app.locks.hold(knowledge_id) as lease:
        _still_held(lease, "upload")
    # Before 0.10 Open WebUI links an upload naming the base without asking whether the key may write there: each
    # such upload asks just before it is sent.
    if not upload.writable_checked or (upload.links_itself and not release.link_checks_write_access):
        if upload.watch is not None:  # one read for the uploads that are ready at once
            await upload.watch.writable(functools.partial(_check_writable, app, knowledge_id))
        else:
            await _check_writable(app, knowledge_id)
    await _tell(progress, 1, 4, "uploading")
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
        links_itself=upload.links_itself,
        indexed_after_link=upload.links_itself and release.links_before_indexing,
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
    the base (attached, or nothing made, or removed again; an attach left in `upload.attach_checks` keeps it until
    the caller's read-back); otherwise recovery looks at the base later."""
    metadata = dict(upload.metadata)
    if tracked is not None and tracked.record.marked:  # how recovery tells this upload from any other, if need be
        metadata[UPLOAD_MARK] = tracked.record.id
    if upload.links_itself:
        metadata["knowledge_id"] = knowledge_id
        if upload.folder_id:
            metadata["directory_id"] = upload.folder_id
    try:
        answer = await app.client.upload(upload.filename, upload.content, metadata, upload.content_type)
        uploaded = normalize.file_record(answer, "an upload answer")
    except ToolFailure as failure:
        failed = _failed(failure, "upload")
        if failed.outcome == "partial_or_unknown":  # said on stderr too: a cancelled call's error reaches no one
            log.warning("knowledge_add: the upload failed (%s); Open WebUI may hold the file in no base", failure.code)
        elif tracked is not None:
            tracked.settle()
        raise failed from None
    if tracked is not None:
        await tracked.uploaded(uploaded.file_id)
    if upload.links_itself and upload.sent is not None:
        upload.sent()
    try:
        if upload.links_itself:
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
    if tracked is not None and upload.attach_checks is not None and done.file_id in upload.attach_checks:
        tracked.defer()  # settled once the caller has read the base back: a kill before that leaves it to recovery
    elif tracked is not None:
        tracked.settle()
    return done


async def _extracted(app: App, file_id: str, filename: str, body: object = None) -> str:
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
    await _tell(progress, 2, 4, "processing")
    started = asyncio.get_running_loop().time()
    status = await _wait_processed(app, release, uploaded, progress, upload.first_poll, waited)
    return status, asyncio.get_running_loop().time() - started + waited


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
        extracted = await _extracted(app, file_id, upload.filename, processed) if text is None else None
    except ToolFailure as failure:
        raise await _discard(app, file_id, failure, "process") from None
    content = text if text is not None else extracted or ""

    await _tell(progress, 3, 4, "attaching")
    async with AsyncExitStack() as held:
        try:
            lease = await held.enter_async_context(app.locks.hold(knowledge_id))
            if tracked is not None:  # recovery then lets an attach Open WebUI may still be running end first
                await tracked.attaching(app.settings.timeout)
            lease.check()  # after the journal's write: the lease is checked as late as it can be
        except ToolFailure as failure:  # deleting the file again is safe without the lock: it is in no base
            raise await _discard(app, file_id, failure, "attach") from None
        await _attach(app, release, knowledge_id, file_id, upload, content, tracked)
    await _tell(progress, 4, 4, "done")
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
    if upload.watch is not None:
        await _tell(progress, 2, 4, "processing")
        started = asyncio.get_running_loop().time()
        listed = await upload.watch.linked(file_id, app.settings.process_timeout)
        waited = asyncio.get_running_loop().time() - started
        # Listed and marked as written to the base, so linked and indexed; a hash of some text, so it has a text (a
        # hash of none, or none at all, and the text is read back as below).
        if listed is not None and listed.hash not in (None, _NO_TEXT_SHA256):
            await _tell(progress, 4, 4, "done")
            return Uploaded(file_id, "completed", None, waited)
    try:
        status, processed_after = await _timed_processing(app, release, uploaded, progress, upload, waited)
        settled = False
        if not release.completes_when_linked:
            left = app.settings.process_timeout - processed_after
            settled = await _settled_in_base(app, release, knowledge_id, file_id, upload.filename, left)
    except ToolFailure as failure:
        if await _status_or_none(app, file_id) != "failed":
            # Still running in Open WebUI (a timeout), or its status could not be read: Open WebUI may yet index it
            # into the base, and deleting the file now could leave its vectors in the base's collection with no
            # document. Recovery settles it once Open WebUI is done.
            raise _failed(failure, "process", file_id, after_upload=True).explained(
                f" If it finishes, Open WebUI links the file {file_id} to knowledge base {knowledge_id} itself; if it "
                "fails, the next write with this key (or `openwebui-rag-mcp recover`) removes it."
            ) from None
        if failure.code == "duplicate_content" or not release.completes_when_linked:
            # Before 0.12.4 a failure while indexing into the base keeps no reason: a document of the same text in
            # the base says what it was (Open WebUI's duplicate check), and `sync` then replaces rather than adds.
            duplicate = await _duplicate(app, knowledge_id, failure, await _text_or_none(app, file_id))
            if failure.code == "duplicate_content" or duplicate.existing_file_id:
                failure = replace(duplicate, code="duplicate_content")
        raise await _discard(app, file_id, failure, "process") from None
    await _tell(progress, 3, 4, "confirming the link")
    try:
        linked = settled or await _linked(app, knowledge_id, file_id, upload.filename)
    except ToolFailure as failure:
        raise _failed(failure, "attach", file_id, after_upload=True).explained(
            f" Whether knowledge base {knowledge_id} now holds the file {file_id} could not be read; check with "
            "knowledge_files."
        ) from None
    if not linked:
        missing = ToolFailure(
            "upstream_error",
            f"Open WebUI processed the file but did not link it to knowledge base {knowledge_id} (has this key lost "
            "write access to it?)",
        )
        raise await _discard(app, file_id, missing, "attach") from None
    try:
        extracted = await _extracted(app, file_id, upload.filename)
    except ToolFailure as failure:
        raise await _unlink(app, knowledge_id, file_id, failure) from None
    await _tell(progress, 4, 4, "done")
    return Uploaded(file_id, status, len(extracted), processed_after)


# The hash Open WebUI keeps (`hash`, the SHA-256 of the extracted text) for a file with no text at all.
_NO_TEXT_SHA256 = hashlib.sha256(b"").hexdigest()
# How long a file Open WebUI calls "completed" may take to show in the base's lists (0.11+ mark it "completed" after
# the base's vectors and the link are written, but the lists may lag a moment).
_LINK_WAIT_SECONDS = 10.0
_LIST_READ_EVERY = 5.0  # while an unanswered attach shows no mark: the base's list is the dearer read


async def _linked(app: App, knowledge_id: str, file_id: str, filename: str) -> bool:
    """Whether the base lists a file that linked itself, looked at again for a moment when it does not yet; last, in
    every document of the base (Open WebUI's name search is an ILIKE, which on PostgreSQL reads `\\` in a name as an
    escape)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _LINK_WAIT_SECONDS
    delay = _POLL_FIRST_DELAY
    while await app.client.listed_file(knowledge_id, file_id, filename) is None:
        if loop.time() + delay > deadline:
            files, _ = await app.client.knowledge_files(knowledge_id, None)
            return any(f.file_id == file_id for f in normalize.file_records(files))
        await asyncio.sleep(delay)
        delay = min(delay * 2, _POLL_MAX_DELAY)
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


async def _duplicate(app: App, knowledge_id: str, failure: ToolFailure, text: str | None) -> ToolFailure:
    """Open WebUI's duplicate refusal, saying which document of the base holds the text when that can be told."""
    holder = await _holder_of(app, knowledge_id, text) if text else None
    where = f" (file_id {holder})" if holder else ""
    message = f"knowledge base {knowledge_id} already holds a document with this exact text{where}; "
    return replace(failure, message=message + "the new copy was not added.", existing_file_id=holder)


async def _unlink(app: App, knowledge_id: str, file_id: str, failure: ToolFailure) -> ToolFailure:
    """Take a file that linked itself out of its base again (and delete it), under the base's lock."""
    try:
        async with app.locks.hold(knowledge_id) as lease:
            lease.check()
            await app.client.remove_file(knowledge_id, file_id, delete_file=True)
    except ToolFailure as problem:
        return _failed(failure, "process", file_id, after_upload=True).explained(
            f" Knowledge base {knowledge_id} holds the file {file_id}, which could not be removed again "
            f"({problem.code}): remove it with knowledge_delete."
        )
    removed = failure.explained(f" The file {file_id} was removed again; nothing was added.")
    return removed.at("process", outcome="not_applied")


async def _attach(
    app: App, release: Release, knowledge_id: str, file_id: str, upload: Upload, content: str, tracked: Tracked | None
) -> None:
    """Link a processed file to the base, under its write lock: it ends linked (before 0.6.42 read back, or left in
    `upload.attach_checks` for the caller to read back) or removed again, or named in the error when even that
    fails."""
    try:
        await app.client.add_file(knowledge_id, file_id, upload.folder_id)
        if tracked is not None:
            tracked.attach_answered()
    except ToolFailure as failure:
        still_running = unanswered(failure)  # Open WebUI may still be running the attach
        if tracked is not None and not still_running:
            tracked.attach_answered()
        if failure.code == "duplicate_content":
            failure = await _duplicate(app, knowledge_id, failure, content)
        if write_outcome(failure) == "not_applied":
            listed: bool | None = False
        elif still_running:
            end = await _outlived_attach(app, knowledge_id, file_id, tracked)
            if end == "listed":  # it ended well after all, later than its answer was due
                log.warning(
                    "knowledge_add: Open WebUI did not answer the attach of %s (%s), but the base lists it since",
                    file_id,
                    failure.code,
                )
                if tracked is not None:
                    tracked.attach_answered()
                await _confirm_or_defer(app, release, knowledge_id, file_id, upload)
                return
            if end != "unreadable":
                raise await _discard_outlived(app, file_id, failure, end) from None
            listed = None
        else:
            listed = await _listed(app, knowledge_id, file_id)
        if listed is False:
            raise await _discard(app, file_id, failure, "attach") from None
        failed = _failed(failure, "attach", file_id, after_upload=True)
        if listed:
            raise failed.explained(
                f" Knowledge base {knowledge_id} lists the file {file_id} all the same: search it to check that it "
                "was indexed, or remove it with knowledge_delete."
            ) from None
        raise failed.explained(
            f" Whether knowledge base {knowledge_id} now holds the file {file_id} could not be read; check with "
            "knowledge_files."
        ) from None
    await _confirm_or_defer(app, release, knowledge_id, file_id, upload)


AttachEnd = Literal["listed", "failed", "unlisted", "unknown", "unreadable"]


async def _outlived_attach(app: App, knowledge_id: str, file_id: str, tracked: Tracked | None = None) -> AttachEnd:
    """After an attach whose answer never came (`errors.unanswered`): what became of it. Open WebUI goes on with an
    attach its caller gave up on; to delete the file at once could leave the base listing a document without a file,
    and before 0.6.42 the attach would then rewrite the base's whole list over whatever another writer attached
    meanwhile. So, still under the base's lock, for up to OPENWEBUI_TIMEOUT more, look at the file (and at the base
    when the file is marked written to it, `meta.collection_name`, every _LIST_READ_EVERY seconds otherwise, and at
    the end) until: the base lists it ("listed"); Open WebUI marked it failed ("failed"); it is marked written to the
    base and still unlisted after _LINK_WAIT_SECONDS ("unlisted": the attach failed after indexing); or the time is
    up ("unknown", or "unreadable" when the base could not be read then). A failed read is looked at again."""
    if tracked is not None:  # should this process die while it looks, recovery waits as long
        await tracked.attaching(app.settings.timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + app.settings.timeout
    marked_since: float | None = None
    listed_at = -_LIST_READ_EVERY
    delay = _POLL_FIRST_DELAY
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
        if marked or final or loop.time() - listed_at >= _LIST_READ_EVERY:
            listed_at = loop.time()
            listed = await _listed(app, knowledge_id, file_id)
            if listed:
                return "listed"
        if marked and listed is False:
            marked_since = loop.time() if marked_since is None else marked_since
            if loop.time() - marked_since >= _LINK_WAIT_SECONDS:
                return "unlisted"
        if final:
            return "unreadable" if listed is None else "unknown"
        await asyncio.sleep(max(min(delay, deadline - loop.time()), 0.0))
        delay = min(delay * 1.5, _POLL_MAX_DELAY)


async def _discard_outlived(app: App, file_id: str, failure: ToolFailure, end: AttachEnd) -> ToolFailure:
    """Remove the file of an attach that never answered and did not end listed; what is left is uncertain unless
    Open WebUI marked the attach failed."""
    removed = await _discard(app, file_id, failure, "attach")
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


async def _confirm_or_defer(app: App, release: Release, knowledge_id: str, file_id: str, upload: Upload) -> None:
    """Before 0.6.42 an attach rewrites the base's file list (read-modify-write), so a concurrent change (another
    program, or a replica whose lease was lost) can drop the file while Open WebUI answers 200: read the list back, or
    leave that to the caller (`Upload.attach_checks`)."""
    if release.attach_is_atomic:
        return
    if upload.attach_checks is not None:
        upload.attach_checks.append(file_id)
        return
    try:
        listed = await attached_files(app, knowledge_id)
    except ToolFailure as failure:
        raise _failed(failure, "attach", file_id, after_upload=True).explained(
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
            await asyncio.sleep(_CONFIRM_PAUSE * (attempt + 1))
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


async def _listed(app: App, knowledge_id: str, file_id: str) -> bool | None:
    """Whether the base lists the file; None when that cannot be read (then nothing is removed)."""
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
    except ToolFailure:
        return None
    return any(f.file_id == file_id for f in normalize.file_records(files))


async def _require_member(app: App, knowledge_id: str, file_id: str, stage: Stage) -> list[normalize.FileRecord]:
    """The base's documents, after checking that `file_id` is one of them."""
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
        records = normalize.file_records(files)
    except ToolFailure as failure:  # only a read so far: nothing changed, whatever went wrong
        raise failure.at(stage, file_id=file_id, outcome="not_applied") from None
    if not any(f.file_id == file_id for f in records):
        raise ToolFailure(
            "not_found",
            f"file {file_id} is not in knowledge base {knowledge_id}; nothing was changed",
            stage=stage,
            file_id=file_id,
            outcome="not_applied",
        )
    return records


async def update_document(app: App, file_id: str, text: str, knowledge_id: str) -> DocumentUpdated:
    check_writes_allowed()
    check_id(file_id, "file_id")
    app.check_base(knowledge_id)
    _check_text(text, "text", TEXT_MAX_CHARS)
    release = await _release(app, "update", file_id)
    async with app.locks.hold(knowledge_id) as lease:
        await _check_writable(app, knowledge_id, "update", file_id)
        files = await _require_member(app, knowledge_id, file_id, "update")
        # Open WebUI refuses identical text twice in one base, but only after the file's text has changed:
        # refuse first, while nothing has.
        digest = hashlib.sha256(text.encode()).hexdigest()
        holder = next((f.file_id for f in files if f.hash == digest and f.file_id != file_id), None)
        if holder is not None:
            raise ToolFailure(
                "duplicate_content",
                f"knowledge base {knowledge_id} already holds this exact text in file {holder}; nothing was changed",
                stage="update",
                file_id=file_id,
                outcome="not_applied",
                existing_file_id=holder,
            )
        _still_held(lease, "update", file_id)
        with anyio.CancelScope(shield=True):  # the text and the index change together, even when cancelled
            await _replace_text(app, release, knowledge_id, file_id, text, lease)
    if release.content_update_reindexes:
        note = "The text belongs to the file: every knowledge base holding this file_id now has the new text."
    else:
        note = (
            "The text belongs to the file: every base holding this file_id reads the new text, but only this base was "
            "re-indexed; search in other bases finds the old text until knowledge_update is called with their "
            "knowledge_id."
        )
    return DocumentUpdated(
        ok=True, knowledge_id=knowledge_id, file_id=file_id, total_chars=len(text), shared_file=True, note=note
    )


async def _replace_text(app: App, release: Release, knowledge_id: str, file_id: str, text: str, lease: Lease) -> None:
    try:
        if not isinstance(await app.client.update_file_text(file_id, text), dict):
            raise normalize.unexpected("the answer to a text update")
    except ToolFailure as failure:
        raise _failed(failure, "update", file_id) from None
    if not release.content_update_reindexes:
        try:
            lease.check()
            await app.client.reindex_file(knowledge_id, file_id)
        except ToolFailure as failure:
            note = (
                " The file's text was replaced, but this base's search index may hold the old text or none of "
                "it; call knowledge_update again."
            )
            raise _failed(failure, "reindex", file_id, after_upload=True).explained(note) from None


async def remove_document(app: App, knowledge_id: str, file_id: str) -> DocumentRemoved:
    check_writes_allowed()
    app.check_base(knowledge_id)
    check_id(file_id, "file_id")
    release = await _release(app, "unlink", file_id)
    if not release.capabilities.keep_file_on_remove:
        why = (
            f"Open WebUI {release.version} deletes the file itself"
            if release.known
            else f"The Open WebUI version {release.version!r} is unreadable, and releases before 0.6.27 delete the file"
        )
        raise ToolFailure(
            "unsupported",
            f"{why} when it is removed from a base (delete_file=false is ignored before 0.6.27), which would also "
            "take it out of every other base. Refused; nothing was changed. Remove it in Open WebUI's interface if "
            "deleting the file is intended.",
            stage="unlink",
            file_id=file_id,
            outcome="not_applied",
        )
    async with app.locks.hold(knowledge_id) as lease:
        if app.allowed_bases() is not None:  # under an allowlist, never touch a file no allowed base holds
            await _require_member(app, knowledge_id, file_id, "unlink")
        _still_held(lease, "unlink", file_id)
        try:
            await app.client.remove_file(knowledge_id, file_id)
        except ToolFailure as failure:
            raise _failed(failure, "unlink", file_id) from None
        finally:
            app.allowed_files.forget(app.client)  # the allowlist's check of the file asks the base again
        # Confirm from Open WebUI itself that the base no longer lists the file. The file is not looked up: a key
        # that could see it only through this base cannot see it now, and delete_file=false on a release that
        # honours it (checked above) is what keeps it.
        try:
            files, _ = await app.client.knowledge_files(knowledge_id, None)
            still_listed = any(f.file_id == file_id for f in normalize.file_records(files))
        except ToolFailure as failure:
            raise _failed(failure, "unlink", file_id, after_upload=True) from None
        if still_listed:
            raise ToolFailure(
                "upstream_error",
                f"Open WebUI accepted the removal but knowledge base {knowledge_id} still lists file {file_id}",
                stage="unlink",
                file_id=file_id,
                outcome="partial_or_unknown",
            )
    return DocumentRemoved(ok=True, knowledge_id=knowledge_id, file_id=file_id, file_kept=True)


# -- files: Open WebUI extracts the text --------------------------------------------------------------------------

# Extensions kept on an uploaded file's name: Open WebUI picks its loader by them.
_EXTENSION = re.compile(r"^\.[A-Za-z0-9]{1,10}$")


def upload_name(original: str, title: str | None) -> str:
    """The name a file is uploaded under: safe, bounded in bytes, with its original extension (Open WebUI chooses
    how to extract by it)."""
    original = original.replace("\\", "/").rsplit("/", 1)[-1]  # a name, never a path
    stem, dot, extension = original.rpartition(".")
    has_extension = bool(dot and stem and _EXTENSION.fullmatch(f".{extension}"))
    suffix = f".{extension.lower()}" if has_extension else ""
    base = safe_filename(title or (stem if has_extension else original)).removesuffix(".md")
    base = base.encode()[: FILENAME_MAX_BYTES - len(suffix.encode())].decode("utf-8", "ignore").strip("_") or "document"
    return base + suffix


async def add_file(
    app: App,
    knowledge_id: str,
    source: FileSource,
    title: str | None,
    metadata: Mapping[str, Any] | None,
    progress: Progress = _no_progress,
) -> FileAdded:
    check_writes_allowed()
    app.check_base(knowledge_id)
    if title is not None:
        title = _check_text(title, "title", TITLE_MAX_CHARS).strip()
    extra = check_metadata(metadata)
    original, content = await read_source(app.settings, source)
    filename = upload_name(original, title)
    shown_title = title or original
    content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    upload_metadata = {**extra, "title": shown_title, "source": extra.get("source", original)}
    upload = Upload(filename, content, content_type, upload_metadata)
    added = await upload_to_base(app, knowledge_id, upload, progress, text=None, tool="knowledge_add_file")
    return FileAdded(
        ok=True,
        knowledge_id=knowledge_id,
        file_id=added.file_id,
        title=shown_title,
        filename=filename,
        size=len(content),
        extracted_chars=added.extracted_chars or 0,
        status=added.status,
    )
