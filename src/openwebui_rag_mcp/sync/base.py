"""What the base holds for this folder, on every release: this folder's documents (by the mark in their upload
metadata, or by the name scheme), everyone else's, and where each is, read with as few requests as the release
allows."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.sync.folders import manifest
from openwebui_rag_mcp.sync.names import SOURCE_KEY, SYNCED_BY, parse_name
from openwebui_rag_mcp.sync.types import LocalFile, Other, RemoteFile, Skipped


@dataclass
class Base:
    """What the base holds, as this folder's run sees it."""

    mirrored: bool
    kept_names: bool  # the release has folders, but the base goes on with the name scheme for this folder
    ours: list[RemoteFile] = field(default_factory=list)  # this folder's documents
    # This folder's documents Open WebUI listed but never indexed into the base (`read_base`'s `lost`): not held
    stuck: list[RemoteFile] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # the file id of every document of the base
    others: list[Other] = field(default_factory=list)
    from_other_folders: int = 0
    from_earlier_versions: int = 0  # marked without a source id, or named the old way (or like it)


async def read_base(app: App, knowledge_id: str, source: str | None, lost: set[str] | None = None) -> Base:
    """`lost`: files of uploads a killed run left that Open WebUI has been processing for too long (a task lost in a
    restart): one the base lists (0.10 links before it indexes into the base) is not held but `stuck`, as its text
    may never have reached the base's search index."""
    app.check_base(knowledge_id)
    raw, _ = await app.client.knowledge_files(knowledge_id, None)
    release = await app.client.release()
    documents = [normalize.folder_document(item) for item in raw]
    # The base goes on with the name scheme only when it holds this folder's documents under it (a base synced
    # before Open WebUI had folders); a name alone, which anyone can give a file, never decides.
    named_ours = source is not None and any(_named_by(d, source, release.folders) for d in documents)
    mirrored = release.folders and not named_ours
    if mirrored and not release.folder_paths:  # 0.9.6 to 0.11: the lists do not say which folder
        folder_of = await folders_of_documents(app, knowledge_id, documents)
        documents = [_in_folder(document, folder_of.get(document.file_id, "")) for document in documents]
    base = Base(mirrored, release.folders and named_ours, listed={document.file_id for document in documents})
    for document in documents:
        parsed = None if _marked(document) else parse_name(document.path.rpartition("/")[2])
        # 0.11+ link once indexed: a lost upload listed there has ended well after all
        stuck = lost is not None and document.file_id in lost and release.links_before_indexing
        held = base.stuck if stuck else base.ours
        if source is not None and mirrored and _marked(document) and _source_of(document) == source:
            held.append(RemoteFile(document.file_id, document.path, document.sha256 or ""))
            continue
        if source is not None and not mirrored and _named_by(document, source, release.folders):
            assert parsed is not None
            held.append(RemoteFile(document.file_id, parsed[0], parsed[1]))
            continue
        names = [(document.path, document.sha256)] if document.sha256 else []
        names += [(parsed[0], parsed[1])] if parsed else []
        base.others.append(Other(document.path, tuple(names)))
        owner = _source_of(document) if _marked(document) else parsed[2] if parsed else None
        if owner is not None and owner != source:
            base.from_other_folders += 1
        elif _marked(document) or parsed:  # no source id, or this folder's in a name without the mark beside it
            base.from_earlier_versions += 1
    return base


async def glance(
    app: App, knowledge_id: str, scanning: asyncio.Future[tuple[list[LocalFile], list[Skipped]]]
) -> Base | None:
    """What the base holds, by Open WebUI's folder comparison alone, when that shows it holds exactly the folder's
    files, unchanged, each in its place; else None (read it in full: `read_base`). Where lists name no folders
    (`Release.folders` without `folder_paths`) a full read costs two loads of every document; a run with nothing to
    do needs this one. It shows that only when the comparison adds, changes and removes nothing and the base counts no
    more documents than the folder has files (a second copy at a place would hide behind the first); each document is
    given at its place with the checksum found there, never to be replaced or removed. Anything else (a skipped file's
    document, a name like the name scheme's, a comparison refused) is left to the full read."""
    app.check_base(knowledge_id)
    try:
        (local, _), (_, total) = await asyncio.gather(scanning, app.client.knowledge_files(knowledge_id, 1))
        if not local or total != len(local):
            return None
        if any(parse_name(file.relative.rpartition("/")[2]) for file in local):
            return None
        unmodified = normalize.unmodified_only(await app.client.sync_diff(knowledge_id, manifest(local)))
    except ToolFailure:
        return None
    if unmodified != len(local):
        return None
    held = [Other(file.relative, ((file.relative, file.digest),)) for file in local]
    return Base(mirrored=True, kept_names=False, others=held)


def _source_of(document: normalize.FolderDocument) -> str | None:
    """The source id in a mirrored upload's mark, or None (an earlier version wrote none)."""
    source = document.upload_metadata.get(SOURCE_KEY)
    return source if isinstance(source, str) and source else None


def _named_by(document: normalize.FolderDocument, source: str, folders: bool) -> bool:
    """Whether the document is this folder's under the name scheme: its name carries the folder's source id, and,
    on a release with folders (which keeps upload metadata), so does its metadata. There a name alone, which anyone
    can give a file, never makes a document this folder's; before, the name is all a release keeps (0.6.5 drops
    upload metadata)."""
    parsed = None if _marked(document) else parse_name(document.path.rpartition("/")[2])
    if parsed is None or parsed[2] != source:
        return False
    return not folders or document.upload_metadata.get(SOURCE_KEY) == source


async def folders_of_documents(
    app: App, knowledge_id: str, documents: Sequence[normalize.FolderDocument]
) -> dict[str, str]:
    """file_id -> the path of its folder ("" at the top) of every listed document, on releases whose lists do not
    say (0.9.6 to 0.11). One request where it can: Open WebUI's folder comparison (`sync/diff`), asked about each
    document where its upload metadata places it (this command's uploads carry their path as `source`) and at the
    top, with no checksum, names the document it holds at each such place, by id. A document it does not place so
    (moved since, uploaded elsewhere by hand, sharing its place with another) or a comparison refused (it needs
    write access) sends the run to the folder lists, folder by folder (about 25 ms a folder)."""
    if not documents:
        return {}
    manifest = {(where, document.path) for document in documents for where in (_hinted_folder(document), "")}
    try:
        answer = await app.client.sync_diff(
            knowledge_id,
            [{"filename": name, "path": folder, "checksum": "", "size": 0} for folder, name in sorted(manifest)],
        )
        placed = normalize.compared_documents(answer)
    except ToolFailure:
        placed = {}
    if all(document.file_id in placed for document in documents):
        return placed
    return dict(await app.client.folder_documents(knowledge_id, [("", "")]))


def _hinted_folder(document: normalize.FolderDocument) -> str:
    """Where the document's upload metadata says it is (its `source`, when that ends in its name), else the top."""
    source = document.upload_metadata.get("source")
    if isinstance(source, str):
        folder, _, name = source.rpartition("/")
        if name == document.path:
            return folder
    return ""


def _in_folder(document: normalize.FolderDocument, folder: str) -> normalize.FolderDocument:
    name = document.path.rpartition("/")[2]
    return dataclasses.replace(document, path=f"{folder}/{name}" if folder else name)


def _marked(document: normalize.FolderDocument) -> bool:
    return document.upload_metadata.get("synced_by") == SYNCED_BY
