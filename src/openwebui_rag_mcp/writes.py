"""The write tools: multi-request sequences that must never damage a user's knowledge.

Each sequence holds its base's write lock (`App.locks`) from its first request to its last, is never retried, and
on failure says which stage failed, which file exists because of it, and whether anything may have changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mimetypes
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

import anyio

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App, check_id, check_writes_allowed
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import Stage, ToolFailure, invalid_argument
from openwebui_rag_mcp.localfiles import FileSource as FileSource  # re-exported: server/tools.py builds one
from openwebui_rag_mcp.localfiles import read_source
from openwebui_rag_mcp.locks import Lease
from openwebui_rag_mcp.models import (
    DocumentAdded,
    DocumentRemoved,
    DocumentUpdated,
    FileAdded,
    KnowledgeCreated,
    KnowledgeDeleted,
    KnowledgeRenamed,
)
from openwebui_rag_mcp.normalize import UPLOAD_MARK
from openwebui_rag_mcp.steps import Progress, check_writable, failed_at, no_progress, read_release, still_held
from openwebui_rag_mcp.upload import Upload, upload_to_base

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
# Dots go too, so no "..", hidden file or second extension can come from a title.
_UNSAFE_FILENAME = re.compile(r"[^\w\- ]+")
_UNDERSCORE_RUNS = re.compile(r"[\s_]+")


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


def check_text(text: str, what: str, limit: int) -> str:
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


def _check_description(description: str) -> None:
    if len(description) > DESCRIPTION_MAX_CHARS:
        raise invalid_argument(
            f"description is {len(description)} characters long; the limit is {DESCRIPTION_MAX_CHARS}"
        )


async def create_knowledge(app: App, name: str, description: str) -> KnowledgeCreated:
    check_writes_allowed()
    name = check_text(name, "name", NAME_MAX_CHARS).strip()
    _check_description(description)
    if not app.settings.allow_create:
        raise ToolFailure(
            "forbidden",
            "creating knowledge bases is switched off for this server (OPENWEBUI_ALLOW_CREATE is not true; it "
            "defaults to false while OPENWEBUI_KNOWLEDGE_IDS is set); nothing was changed",
            stage="create",
            outcome="not_applied",
        )
    release = await read_release(app, "create")
    async with app.locks.hold("create") as lease:
        still_held(lease, "create")
        try:
            created = await app.client.create_knowledge(release, name, description)
        except ToolFailure as failure:
            raise failed_at(failure, "create") from None
        app.readable.forget(app.client)  # the key can read one more base
        try:
            knowledge_id = normalize.created_id(created, "a new knowledge base")
        except ToolFailure as failure:
            raise failure.at("create", outcome="partial_or_unknown") from None
        await app.remember_created(knowledge_id)  # its creator's, alongside an allowlist, when creating is allowed
    return KnowledgeCreated(ok=True, knowledge_id=knowledge_id, name=name, description=description)


async def rename_knowledge(app: App, knowledge_id: str, name: str | None, description: str | None) -> KnowledgeRenamed:
    """Give a base a new name, a new description, or both; its documents and its sharing stay as they are."""
    check_writes_allowed()
    app.check_base(knowledge_id)
    if name is None and description is None:
        raise invalid_argument("give name, description or both: nothing else of a base is changed here")
    if name is not None:
        name = check_text(name, "name", NAME_MAX_CHARS).strip()
    if description is not None:
        _check_description(description)
    release = await read_release(app, "rename")
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
        base = await check_writable(app, knowledge_id, "rename")
        new_name = name if name is not None else base.name
        new_description = description if description is not None else (base.description or "")
        still_held(lease, "rename")
        try:
            answer = await app.client.rename_knowledge(knowledge_id, new_name, new_description)
        except ToolFailure as failure:
            raise failed_at(failure, "rename") from None
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
    release = await read_release(app, "delete")
    async with app.locks.hold(knowledge_id) as lease:
        base = await check_writable(app, knowledge_id, "delete")
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
        still_held(lease, "delete")
        try:
            answer = await app.client.delete_knowledge(knowledge_id)
        except ToolFailure as failure:
            raise failed_at(failure, "delete") from None
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


async def add_document(
    app: App,
    knowledge_id: str,
    *,
    text: str,
    title: str,
    metadata: Mapping[str, Any] | None = None,
    progress: Progress = no_progress,
) -> DocumentAdded:
    check_writes_allowed()
    app.check_base(knowledge_id)
    check_text(text, "text", TEXT_MAX_CHARS)
    title = check_text(title, "title", TITLE_MAX_CHARS).strip()
    extra = check_metadata(metadata)
    filename = safe_filename(title)
    upload = Upload(
        filename, text.encode(), "text/markdown", {**extra, "title": title, "source": extra.get("source", filename)}
    )
    added = await upload_to_base(app, knowledge_id, upload, progress, text=text, tool="knowledge_add")
    return DocumentAdded(
        ok=True, knowledge_id=knowledge_id, file_id=added.file_id, title=title, filename=filename, status=added.status
    )


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
    check_text(text, "text", TEXT_MAX_CHARS)
    release = await read_release(app, "update", file_id)
    async with app.locks.hold(knowledge_id) as lease:
        await check_writable(app, knowledge_id, "update", file_id)
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
        still_held(lease, "update", file_id)
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
        raise failed_at(failure, "update", file_id) from None
    if not release.content_update_reindexes:
        try:
            lease.check()
            await app.client.reindex_file(knowledge_id, file_id)
        except ToolFailure as failure:
            note = (
                " The file's text was replaced, but this base's search index may hold the old text or none of "
                "it; call knowledge_update again."
            )
            raise failed_at(failure, "reindex", file_id, after_upload=True).explained(note) from None


async def remove_document(app: App, knowledge_id: str, file_id: str) -> DocumentRemoved:
    check_writes_allowed()
    app.check_base(knowledge_id)
    check_id(file_id, "file_id")
    release = await read_release(app, "unlink", file_id)
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
        still_held(lease, "unlink", file_id)
        try:
            await app.client.remove_file(knowledge_id, file_id)
        except ToolFailure as failure:
            raise failed_at(failure, "unlink", file_id) from None
        finally:
            app.allowed_files.forget(app.client)  # the allowlist's check of the file asks the base again
        # Confirm from Open WebUI itself that the base no longer lists the file. The file is not looked up: a key
        # that could see it only through this base cannot see it now, and delete_file=false on a release that
        # honours it (checked above) is what keeps it.
        try:
            files, _ = await app.client.knowledge_files(knowledge_id, None)
            still_listed = any(f.file_id == file_id for f in normalize.file_records(files))
        except ToolFailure as failure:
            raise failed_at(failure, "unlink", file_id, after_upload=True) from None
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
    *,
    title: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: Progress = no_progress,
) -> FileAdded:
    check_writes_allowed()
    app.check_base(knowledge_id)
    if title is not None:
        title = check_text(title, "title", TITLE_MAX_CHARS).strip()
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
