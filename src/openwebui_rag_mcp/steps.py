"""What every write sequence shares: progress, placing a failure in its stage, the lease and write-access checks,
and removing an uploaded file again."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import Stage, ToolFailure, write_outcome
from openwebui_rag_mcp.locks import Lease
from openwebui_rag_mcp.models import KnowledgeBase

Progress = Callable[[float, float, str], Awaitable[None]]
log = logging.getLogger(__name__)


async def no_progress(progress: float, total: float, message: str) -> None:
    return None


async def tell(progress: Progress, done: float, total: float, message: str) -> None:
    """Report progress; a client that went away (a cancelled call) must not stop a write half-way."""
    try:
        await progress(done, total, message)
    except Exception as error:  # a closed stream, a cancelled request: the write goes on
        log.debug("could not report progress (%s)", type(error).__name__)


def failed_at(
    failure: ToolFailure, stage: Stage, file_id: str | None = None, *, after_upload: bool = False
) -> ToolFailure:
    """Place a failure in the write sequence. Once a file was uploaded, something exists that did not before."""
    outcome = "partial_or_unknown" if after_upload else write_outcome(failure)
    return failure.at(stage, file_id=file_id, outcome=outcome)


def still_held(lease: Lease, stage: Stage, file_id: str | None = None, *, after_upload: bool = False) -> None:
    """Stop before a write request once the base's lock is lost: another replica may be writing to the base."""
    try:
        lease.check()
    except ToolFailure as failure:
        raise failed_at(failure, stage, file_id, after_upload=after_upload) from None


async def read_release(app: App, stage: Stage, file_id: str | None = None) -> Release:
    """The release, read before a write begins: failing to read it changes nothing."""
    try:
        return await app.client.release()
    except ToolFailure as failure:
        raise failure.at(stage, file_id=file_id, outcome="not_applied") from None


async def check_writable(
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


async def holder_of(app: App, knowledge_id: str, text: str) -> str | None:
    """The file of the base whose extracted text has the same hash as `text`, when Open WebUI tells."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
    except ToolFailure:
        return None
    return next((f.file_id for f in normalize.file_records(files) if f.hash == digest), None)


async def named_duplicate(app: App, knowledge_id: str, failure: ToolFailure, text: str | None) -> ToolFailure:
    """Open WebUI's duplicate refusal, saying which document of the base holds the text when that can be told."""
    holder = await holder_of(app, knowledge_id, text) if text else None
    where = f" (file_id {holder})" if holder else ""
    message = f"knowledge base {knowledge_id} already holds a document with this exact text{where}; "
    return replace(failure, message=message + "the new copy was not added.", existing_file_id=holder)


async def listed_in(app: App, knowledge_id: str, file_id: str) -> bool | None:
    """Whether the base lists the file; None when that cannot be read (then nothing is removed)."""
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
    except ToolFailure:
        return None
    return any(f.file_id == file_id for f in normalize.file_records(files))


async def discard(app: App, file_id: str, failure: ToolFailure, stage: Stage) -> ToolFailure:
    """Remove a file this write uploaded and could not add; `failure` placed at `stage`, saying what is left."""
    try:
        await app.client.delete_file(file_id)
    except ToolFailure as problem:
        log.warning("knowledge_add: could not remove the uploaded file %s again (%s)", file_id, problem.message)
        left = failed_at(failure, stage, file_id, after_upload=True)
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
