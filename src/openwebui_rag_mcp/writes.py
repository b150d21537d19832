"""The write tools: multi-request sequences that must never damage a user's knowledge.

Each sequence holds `App.write_lock` from its first request to its last, is never retried, and on failure
says which stage failed, which file exists because of it, and whether anything may have changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App, check_id
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ErrorCode, Stage, ToolFailure, invalid_argument, write_outcome
from openwebui_rag_mcp.models import DocumentAdded, DocumentRemoved, DocumentUpdated, KnowledgeCreated

Progress = Callable[[float, float, str], Awaitable[None]]

NAME_MAX_CHARS = 200
DESCRIPTION_MAX_CHARS = 4_000
TITLE_MAX_CHARS = 300
TEXT_MAX_CHARS = 2_000_000
METADATA_MAX_BYTES = 16_384
METADATA_MAX_DEPTH = 4
# Upload-metadata keys that change what Open WebUI itself does with the file (auto-linking to a base,
# overriding the content hash, placing it in a folder or a channel). Refused so a caller cannot bypass checks.
RESERVED_METADATA_KEYS = frozenset({"knowledge_id", "file_hash", "directory_id", "channel_id", "collection_name"})
_POLL_FIRST_DELAY = 0.2
_POLL_MAX_DELAY = 2.0
# Dots go too, so no "..", hidden file or second extension can come from a title.
_UNSAFE_FILENAME = re.compile(r"[^\w\- ]+")


async def _no_progress(progress: float, total: float, message: str) -> None:
    return None


def safe_filename(title: str) -> str:
    """A filename derived from the title: letters of any script kept, path and shell characters replaced."""
    name = unicodedata.normalize("NFKC", title)
    name = _UNSAFE_FILENAME.sub("_", name).strip(" _")
    name = re.sub(r"[\s_]+", "_", name)[:100].strip("_")
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
        raise invalid_argument(f"metadata keys {reserved} are reserved: they change how Open WebUI handles the file")
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


async def _release(app: App, stage: Stage, file_id: str | None = None) -> Release:
    """The release, read before a write begins: failing to read it changes nothing."""
    try:
        return await app.client.release()
    except ToolFailure as failure:
        raise failure.at(stage, file_id=file_id, outcome="not_applied") from None


def _left_behind(file_id: str) -> str:
    return (
        f" The uploaded file {file_id} stays in Open WebUI's files, in no knowledge base; delete it there "
        "(Workspace > Knowledge or the Files API) if it is not wanted."
    )


async def create_knowledge(app: App, name: str, description: str) -> KnowledgeCreated:
    name = _check_text(name, "name", NAME_MAX_CHARS).strip()
    if len(description) > DESCRIPTION_MAX_CHARS:
        raise invalid_argument(
            f"description is {len(description)} characters long; the limit is {DESCRIPTION_MAX_CHARS}"
        )
    if not app.settings.allow_create:
        raise ToolFailure(
            "forbidden",
            "creating knowledge bases is switched off for this server (OPENWEBUI_ALLOW_CREATE is not true; it "
            "defaults to false while OPENWEBUI_KNOWLEDGE_IDS is set); nothing was changed",
            stage="create",
            outcome="not_applied",
        )
    release = await _release(app, "create")
    async with app.write_lock:
        try:
            created = await app.client.create_knowledge(release, name, description)
        except ToolFailure as failure:
            raise _failed(failure, "create") from None
        knowledge_id = created.get("id")
        if not isinstance(knowledge_id, str):
            nameless = normalize.unexpected("a new knowledge base without an id")
            raise nameless.at("create", outcome="partial_or_unknown")
        app.created.add(knowledge_id)  # usable alongside an allowlist when the operator allowed creating
    return KnowledgeCreated(ok=True, knowledge_id=knowledge_id, name=name, description=description)


async def _check_writable(app: App, knowledge_id: str) -> None:
    try:
        base = await app.client.knowledge(knowledge_id)
    except ToolFailure as failure:  # only a read so far: nothing changed, whatever went wrong
        raise failure.at("upload", outcome="not_applied") from None
    if base.get("write_access") is False:
        raise ToolFailure(
            "forbidden",
            f"this API key may read knowledge base {knowledge_id} but not change it; nothing was uploaded",
            stage="upload",
            outcome="not_applied",
        )


async def _wait_processed(app: App, release: Release, file_id: str, uploaded: Mapping[str, Any]) -> str:
    """Wait until Open WebUI has extracted and embedded the file; its final status."""
    if not release.capabilities.process_status:
        # Releases before 0.6.23 process during the upload and report failure in the upload answer.
        error = uploaded.get("error")
        if error:
            raise ToolFailure("upstream_error", f"Open WebUI could not process the document: {error}")
        return "completed"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + app.settings.process_timeout
    delay = _POLL_FIRST_DELAY
    while True:
        status = await app.client.process_status(file_id)
        if status == "completed":
            return status
        if status == "failed":
            data = await app.client.file(file_id)
            details = data.get("data") if isinstance(data, dict) else None
            error = details.get("error") if isinstance(details, dict) else None
            code: ErrorCode = "duplicate_content" if error and "duplicate" in str(error).lower() else "upstream_error"
            raise ToolFailure(code, f"Open WebUI could not process the document: {error or 'no reason given'}")
        if loop.time() + delay > deadline:
            raise ToolFailure(
                "timeout",
                f"Open WebUI was still processing the document (status {status!r}) after "
                f"{app.settings.process_timeout:g} s (OPENWEBUI_PROCESS_TIMEOUT)",
                retryable=True,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, _POLL_MAX_DELAY)


async def _holder_of(app: App, knowledge_id: str, text: str) -> str | None:
    """The file of the base whose extracted text has the same hash as `text`, when Open WebUI tells."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
    except ToolFailure:
        return None
    return next((str(f["id"]) for f in files if f.get("hash") == digest and f.get("id")), None)


async def add_document(
    app: App,
    knowledge_id: str,
    text: str,
    title: str,
    metadata: Mapping[str, Any] | None,
    progress: Progress = _no_progress,
) -> DocumentAdded:
    app.check_base(knowledge_id)
    _check_text(text, "text", TEXT_MAX_CHARS)
    title = _check_text(title, "title", TITLE_MAX_CHARS).strip()
    extra = check_metadata(metadata)
    filename = safe_filename(title)
    upload_metadata = {**extra, "title": title, "source": extra.get("source", filename)}

    release = await _release(app, "upload")
    async with app.write_lock:
        await _check_writable(app, knowledge_id)
        await progress(1, 4, "uploading")
        try:
            uploaded = await app.client.upload(filename, text.encode(), upload_metadata)
        except ToolFailure as failure:
            raise _failed(failure, "upload") from None
        file_id = uploaded.get("id")
        if not isinstance(file_id, str):
            raise normalize.unexpected("an upload answer without a file id").at("upload", outcome="partial_or_unknown")

        await progress(2, 4, "processing")
        try:
            status = await _wait_processed(app, release, file_id, uploaded)
        except ToolFailure as failure:
            raise _failed(failure, "process", file_id, after_upload=True).explained(_left_behind(file_id)) from None

        await progress(3, 4, "attaching")
        try:
            await app.client.add_file(knowledge_id, file_id)
        except ToolFailure as failure:
            failed = _failed(failure, "attach", file_id, after_upload=True)
            if failure.code == "duplicate_content":
                holder = await _holder_of(app, knowledge_id, text)
                where = f" (file_id {holder})" if holder else ""
                message = f"knowledge base {knowledge_id} already holds a document with this exact text{where}; "
                failed = replace(failed, message=message + "the new copy was not added.", existing_file_id=holder)
            raise failed.explained(_left_behind(file_id)) from None
        await progress(4, 4, "done")
    return DocumentAdded(
        ok=True, knowledge_id=knowledge_id, file_id=file_id, title=title, filename=filename, status=status
    )


async def _require_member(app: App, knowledge_id: str, file_id: str, stage: Stage) -> list[Mapping[str, Any]]:
    """The base's documents, after checking that `file_id` is one of them."""
    try:
        files, _ = await app.client.knowledge_files(knowledge_id, None)
    except ToolFailure as failure:  # only a read so far: nothing changed, whatever went wrong
        raise failure.at(stage, file_id=file_id, outcome="not_applied") from None
    if not any(f.get("id") == file_id for f in files):
        raise ToolFailure(
            "not_found",
            f"file {file_id} is not in knowledge base {knowledge_id}; nothing was changed",
            stage=stage,
            file_id=file_id,
            outcome="not_applied",
        )
    return files


async def update_document(app: App, file_id: str, text: str, knowledge_id: str) -> DocumentUpdated:
    check_id(file_id, "file_id")
    app.check_base(knowledge_id)
    _check_text(text, "text", TEXT_MAX_CHARS)
    release = await _release(app, "update", file_id)
    async with app.write_lock:
        files = await _require_member(app, knowledge_id, file_id, "update")
        # Open WebUI refuses identical text twice in one base, but only after the file's text has changed:
        # refuse first, while nothing has.
        digest = hashlib.sha256(text.encode()).hexdigest()
        holder = next((str(f["id"]) for f in files if f.get("hash") == digest and f.get("id") != file_id), None)
        if holder is not None:
            raise ToolFailure(
                "duplicate_content",
                f"knowledge base {knowledge_id} already holds this exact text in file {holder}; nothing was changed",
                stage="update",
                file_id=file_id,
                outcome="not_applied",
                existing_file_id=holder,
            )
        try:
            if not isinstance(await app.client.update_file_text(file_id, text), dict):
                raise normalize.unexpected("the answer to a text update")
        except ToolFailure as failure:
            raise _failed(failure, "update", file_id) from None
        if not release.content_update_reindexes:
            try:
                await app.client.reindex_file(knowledge_id, file_id)
            except ToolFailure as failure:
                note = (
                    " The file's text was replaced, but this base's search index may hold the old text or none of "
                    "it; call knowledge_update again."
                )
                raise _failed(failure, "reindex", file_id, after_upload=True).explained(note) from None
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


async def remove_document(app: App, knowledge_id: str, file_id: str) -> DocumentRemoved:
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
    async with app.write_lock:
        if app.allowed_bases() is not None:  # under an allowlist, never touch a file no allowed base holds
            await _require_member(app, knowledge_id, file_id, "unlink")
        try:
            await app.client.remove_file(knowledge_id, file_id)
        except ToolFailure as failure:
            raise _failed(failure, "unlink", file_id) from None
        # Confirm from Open WebUI itself that the base no longer lists the file. The file is not looked up: a key
        # that could see it only through this base cannot see it now, and delete_file=false on a release that
        # honours it (checked above) is what keeps it.
        try:
            files, _ = await app.client.knowledge_files(knowledge_id, None)
        except ToolFailure as failure:
            raise _failed(failure, "unlink", file_id, after_upload=True) from None
        if any(f.get("id") == file_id for f in files):
            raise ToolFailure(
                "upstream_error",
                f"Open WebUI accepted the removal but knowledge base {knowledge_id} still lists file {file_id}",
                stage="unlink",
                file_id=file_id,
                outcome="partial_or_unknown",
            )
    return DocumentRemoved(ok=True, knowledge_id=knowledge_id, file_id=file_id, file_kept=True)
