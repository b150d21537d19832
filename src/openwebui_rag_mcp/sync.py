"""`openwebui-rag-mcp sync DIR --knowledge-id ID`: keep a knowledge base in step with a folder.

A run:

- adds files the base does not hold,
- replaces changed ones (the new version is added first, then the old one removed, so an interrupted run leaves at
  most an extra old version, which the next run removes),
- leaves unchanged ones alone (compared by the SHA-256 of their bytes),
- and removes documents whose file is gone only with `--delete`.

A second run changes nothing. Documents the base holds that this command did not upload are never touched. Writes go
through the same client, write lock and error model as the tools; Open WebUI extracts the text.

How the base says which version of which file it holds depends on the release:

- **Open WebUI 0.9.6 and later** (bases with folders): the base mirrors the folder, each file under its own name in
  an Open WebUI folder of the same path. Open WebUI's own folder sync comparison (`sync/diff`) gives the base's
  folder tree, missing folders are made with `dirs/create`, and Open WebUI keeps the SHA-256 of every upload
  (`meta.file_hash`). Which folder holds a document comes with the document lists from 0.12, and from the folder
  lists before. Uploads carry `synced_by` in their metadata: that is how the command knows its own documents.
- **Older releases**, and bases synced before by an older version of this command: each file is uploaded under a
  name that carries its path and the first 12 hex digits of its SHA-256 (`notes_todo~3f2a9c0d1e4b.md`), since
  older releases keep no folders and some no upload metadata.
"""

from __future__ import annotations

import dataclasses
import hashlib
import mimetypes
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from openwebui_rag_mcp import normalize, tools
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import FileItem
from openwebui_rag_mcp.writes import Upload, safe_filename, upload_to_base

OK, SOME_FAILED, UNUSABLE = 0, 1, 5
SYNCED_BY = "openwebui-rag-mcp sync"  # in the upload metadata of what this command adds to a mirrored base
_DIGEST_CHARS = 12
_NAME_MAX_BYTES = 200
_SYNCED_NAME = re.compile(r"^(?P<key>.+)~(?P<digest>[0-9a-f]{12})(?P<extension>\.[A-Za-z0-9]{1,10})?$")
_EXTENSION = re.compile(r"^\.[A-Za-z0-9]{1,10}$")


@dataclass(frozen=True, slots=True)
class LocalFile:
    path: Path
    relative: str  # with "/" separators
    key: str  # the name part that identifies the file in the base
    digest: str
    extension: str
    size: int
    mirrored: bool = False  # the base mirrors the folder (0.12+): the file keeps its own name and folder

    @property
    def identity(self) -> str:
        """What names this file in the base: its path when mirrored, else its name made safe."""
        return self.relative if self.mirrored else self.key + self.extension

    @property
    def folder(self) -> str:
        return self.relative.rpartition("/")[0]


@dataclass(frozen=True, slots=True)
class RemoteFile:
    file_id: str
    key: str
    digest: str


@dataclass
class Plan:
    add: list[LocalFile] = field(default_factory=list)
    replace: list[tuple[LocalFile, list[RemoteFile]]] = field(default_factory=list)
    unchanged: list[LocalFile] = field(default_factory=list)
    renamed: list[tuple[LocalFile, RemoteFile]] = field(default_factory=list)  # same content under a new name
    stale: list[RemoteFile] = field(default_factory=list)  # older versions of files that are up to date
    gone: list[RemoteFile] = field(default_factory=list)  # files no longer in the folder
    refused: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)


def key_of(relative: str) -> tuple[str, str]:
    """(key, extension) of a path in the folder: the path without its extension, made safe, and the extension."""
    stem, dot, extension = relative.rpartition(".")
    has_extension = bool(dot and stem and "/" not in extension and _EXTENSION.fullmatch(f".{extension}"))
    base = stem if has_extension else relative
    suffix = f".{extension.lower()}" if has_extension else ""
    key = safe_filename(base.replace("/", "_")).removesuffix(".md")
    room = 200 - len(f"~{'0' * _DIGEST_CHARS}{suffix}".encode())
    return key.encode()[:room].decode("utf-8", "ignore").strip("_") or "document", suffix


def synced_name(local: LocalFile) -> str:
    return f"{local.key}~{local.digest}{local.extension}"


def scan(folder: Path, max_bytes: int, *, mirrored: bool = False) -> tuple[list[LocalFile], list[tuple[str, str]]]:
    """Regular files under `folder` (hidden files and folders left out, links not followed), and those refused.

    `mirrored`: the base mirrors the folder, so each file is known by its path and the whole SHA-256 of its bytes."""
    found: list[LocalFile] = []
    refused: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(root) / name
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink() or not path.is_file():
                refused.append((relative, "not a regular file (links are not followed)"))
                continue
            size = path.stat().st_size
            if size > max_bytes:
                refused.append((relative, f"{size:,} bytes, over OPENWEBUI_UPLOAD_MAX_BYTES ({max_bytes:,})"))
                continue
            if size == 0:
                refused.append((relative, "empty"))
                continue
            if mirrored:  # the file keeps its name in the base: it must arrive as it is here
                why = _unkeepable(relative)
                if why:
                    refused.append((relative.encode("utf-8", "replace").decode(), why))
                    continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            key, extension = key_of(relative)
            found.append(
                LocalFile(
                    path, relative, key, digest if mirrored else digest[:_DIGEST_CHARS], extension, size, mirrored
                )
            )
    return found, refused


# Characters a multipart upload escapes (`"` as %22, line breaks) and Open WebUI then stores escaped: such a name
# would never match its file again.
_ESCAPED_IN_UPLOADS = re.compile(r'["\x00-\x1f\x7f]')


def _unkeepable(relative: str) -> str | None:
    """Why a file cannot keep its path as its name and folders in the base, or None."""
    try:
        parts = [part.encode() for part in relative.split("/")]
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    if any(len(part) > _NAME_MAX_BYTES for part in parts):
        return f"a name in its path is longer than {_NAME_MAX_BYTES} bytes"
    if _ESCAPED_IN_UPLOADS.search(relative):
        return "its name holds a double quote or a control character, which uploads do not keep"
    return None


def remote_files(items: list[FileItem]) -> list[RemoteFile]:
    """The base's documents this command uploaded (recognised by their names); others are ignored."""
    remote: list[RemoteFile] = []
    for item in items:
        match = _SYNCED_NAME.fullmatch(item.filename or "")
        if match:
            remote.append(RemoteFile(item.file_id, match["key"] + (match["extension"] or ""), match["digest"]))
    return remote


def plan(local: list[LocalFile], remote: list[RemoteFile], refused: list[tuple[str, str]]) -> Plan:
    result = Plan(refused=list(refused))
    by_key: dict[str, list[RemoteFile]] = {}
    for entry in remote:
        by_key.setdefault(entry.key, []).append(entry)
    seen: dict[str, LocalFile] = {}
    for file in local:
        identity = file.identity
        if identity in seen:
            result.refused.append(
                (file.relative, f"its name is the same as {seen[identity].relative}'s once made safe")
            )
            continue
        seen[identity] = file
        held = by_key.get(identity, [])
        current = [entry for entry in held if entry.digest == file.digest]
        older = [entry for entry in held if entry.digest != file.digest]
        if current:
            result.unchanged.append(file)
            result.stale.extend(older + current[1:])
        elif older:
            result.replace.append((file, older))
        else:
            result.add.append(file)
    gone = [entry for key, entries in by_key.items() if key not in seen for entry in entries]
    # A renamed file: its content is in the base under its old name, and Open WebUI refuses the same text twice in
    # one base, so the old document goes first and the file is added under its new name.
    renamed: list[LocalFile] = []
    for file in result.add:
        moved = next((entry for entry in gone if entry.digest == file.digest), None)
        if moved is None:
            continue
        gone.remove(moved)
        result.renamed.append((file, moved))
        renamed.append(file)
    result.add = [file for file in result.add if file not in renamed]
    result.gone = gone
    return result


Say = Callable[[str], None]


@dataclass
class Folders:
    """The base's folders by path, for a base that mirrors the folder: read from Open WebUI's folder comparison when
    a file first needs one, made where missing."""

    ids: dict[str, str] | None = None  # path -> folder id; None until read

    async def read(self, app: App, knowledge_id: str, local: list[LocalFile]) -> list[str]:
        """Ask Open WebUI's comparison (`sync/diff`, which needs write access) for the folders; the paths it would
        make, parents first."""
        manifest = [
            {"filename": file.relative.rpartition("/")[2], "path": file.folder, "checksum": file.digest}
            | {"size": file.size}
            for file in local
        ]
        to_create, self.ids = normalize.folder_tree(await app.client.sync_diff(knowledge_id, manifest))
        return to_create

    async def id_of(self, app: App, knowledge_id: str, path: str) -> str | None:
        """The id of the folder at `path` (None: the top of the base), made with its missing parents first."""
        if not path:
            return None
        if self.ids is None:
            await self.read(app, knowledge_id, [])
        assert self.ids is not None
        if path not in self.ids:
            parent, _, name = path.rpartition("/")
            parent_id = await self.id_of(app, knowledge_id, parent)
            async with app.locks.hold(knowledge_id):
                try:
                    self.ids[path] = await app.client.create_folder(knowledge_id, name, parent_id)
                except ToolFailure:
                    # Made meanwhile by someone else (Open WebUI answers 400 to a name taken at that level)?
                    await self.read(app, knowledge_id, [])
                    if path not in self.ids:
                        raise
        return self.ids[path]


async def sync(
    settings: Settings, folder: Path, knowledge_id: str, *, dry_run: bool, delete: bool, say: Say, tty: bool
) -> int:
    from openwebui_rag_mcp.server import running_app

    async with running_app(settings) as app:
        try:
            app.check_base(knowledge_id)
            raw, _ = await app.client.knowledge_files(knowledge_id, None)
            release = await app.client.release()
            documents = [normalize.folder_document(item) for item in raw]
            # Documents an earlier version of this command uploaded under names that carry path and hash (its own
            # mirrored uploads, marked, can have such a name too: a file called `notes~0123456789ab.md`).
            unmarked = [item for item, document in zip(raw, documents, strict=True) if not _marked(document)]
            named = remote_files([normalize.file_item(item) for item in unmarked])
            mirrored = release.folders and not named
            if mirrored and not release.folder_paths:  # 0.9.6 to 0.11: the lists do not say which folder
                folder_of = await _folders_of_documents(app, knowledge_id)
                documents = [_in_folder(document, folder_of.get(document.file_id, "")) for document in documents]
        except ToolFailure as failure:
            say(f"cannot read knowledge base {knowledge_id}: {failure.message}")
            return UNUSABLE
        if release.folders and named:
            say(
                f"knowledge base {knowledge_id} holds files an earlier version of this command named after their path "
                "and content; it goes on naming them that way"
            )
        local, refused = scan(folder, settings.upload_max_bytes, mirrored=mirrored)
        remote = [RemoteFile(d.file_id, d.path, d.sha256 or "") for d in documents if _marked(d)] if mirrored else named
        todo = plan(local, remote, refused)
        if mirrored:
            # The same bytes at the same path, put there by someone else (Open WebUI's own folder upload, a person):
            # held already. Not uploaded again (Open WebUI would refuse the same text twice), never removed.
            held = {(d.path, d.sha256) for d in documents if not _marked(d)}
            todo.unchanged += [file for file in todo.add if (file.relative, file.digest) in held]
            todo.add = [file for file in todo.add if (file.relative, file.digest) not in held]
        uploads = todo.add + [file for file, _ in todo.replace] + [file for file, _ in todo.renamed]
        folders = Folders()
        to_create: list[str] = []
        if mirrored and any(file.folder for file in uploads):
            try:
                to_create = await folders.read(app, knowledge_id, local)
            except ToolFailure as failure:
                if not dry_run:
                    say(f"cannot read the folders of knowledge base {knowledge_id}: {failure.message}")
                    return UNUSABLE
                say(f"folders to make: unknown ({failure.message})")
        removals = todo.stale + (todo.gone if delete else [])
        say(
            f"{folder}: {len(local)} file(s); knowledge base {knowledge_id}: {len(todo.add)} to add, "
            f"{len(todo.replace)} to replace, {len(todo.renamed)} renamed, {len(todo.unchanged)} unchanged, "
            f"{len(todo.gone)} gone from the folder" + ("" if delete else " (kept; --delete removes them)")
        )
        failed = [f"{relative}: {why}" for relative, why in todo.refused]
        for line in failed:
            say(f"skipped   {line}")
        if dry_run:
            needed = {path for file in uploads for path in _with_parents(file.folder)}
            for path in to_create:
                if path in needed:
                    say(f"would create   folder {path}")
            for file in todo.add:
                say(f"would add      {file.relative}")
            for file, _ in todo.replace:
                say(f"would replace  {file.relative}")
            for file, _ in todo.renamed:
                say(f"would rename   {file.relative}")
            for entry in removals:
                say(f"would remove   {entry.key} ({entry.file_id})")
            say("dry run: nothing was changed")
            return SOME_FAILED if failed else OK
        steps: list[tuple[str, LocalFile, list[RemoteFile]]] = [("add", file, []) for file in todo.add]
        steps += [("replace", file, old) for file, old in todo.replace]
        total = len(steps) + len(todo.renamed) + len(removals)
        done = 0
        succeeded: dict[str, int] = {"rename": 0, "add": 0, "replace": 0, "remove": 0}  # what happened, not the plan
        target = folders if mirrored else None
        for file, moved in todo.renamed:
            done += 1
            problem = await _remove(app, knowledge_id, moved) or await _put(app, knowledge_id, file, target)
            _report(say, tty, done, total, f"rename   {file.relative}", problem)
            if problem:
                failed.append(f"{file.relative}: {problem}")
            else:
                succeeded["rename"] += 1
        for action, file, old in steps:
            done += 1
            problem = await _replace(app, knowledge_id, file, old, target)
            _report(say, tty, done, total, f"{action:<8} {file.relative}", problem)
            if problem:
                failed.append(f"{file.relative}: {problem}")
            else:
                succeeded[action] += 1
        for entry in removals:
            done += 1
            problem = await _remove(app, knowledge_id, entry)
            _report(say, tty, done, total, f"remove   {entry.key}", problem)
            if problem:
                failed.append(f"{entry.key}: {problem}")
            else:
                succeeded["remove"] += 1
        say(
            f"done: {succeeded['add']} added, {succeeded['replace']} replaced, {succeeded['rename']} renamed, "
            f"{succeeded['remove']} removed, {len(todo.unchanged)} unchanged, {len(failed)} failed"
        )
        return SOME_FAILED if failed else OK


async def _folders_of_documents(app: App, knowledge_id: str) -> dict[str, str]:
    """file_id -> the path of its folder ("" at the top), from Open WebUI's folder lists, folder by folder."""
    return dict(await tools.folder_documents(app, knowledge_id, [("", "")]))


def _in_folder(document: normalize.FolderDocument, folder: str) -> normalize.FolderDocument:
    name = document.path.rpartition("/")[2]
    return dataclasses.replace(document, path=f"{folder}/{name}" if folder else name)


def _marked(document: normalize.FolderDocument) -> bool:
    return document.upload_metadata.get("synced_by") == SYNCED_BY


async def _replace(
    app: App, knowledge_id: str, file: LocalFile, old: list[RemoteFile], folders: Folders | None
) -> Problem | None:
    """Add the new version, then remove the old ones: an interrupted run leaves an extra old version, never none.
    When the new bytes give the same text as an old version (a PDF saved again), Open WebUI refuses to hold that text
    twice: then that old version goes first."""
    problem = await _put(app, knowledge_id, file, folders)
    holder = next((entry for entry in old if problem and entry.file_id == problem.existing_file_id), None)
    if problem is not None and problem.code == "duplicate_content" and holder is not None:
        problem = await _remove(app, knowledge_id, holder) or await _put(app, knowledge_id, file, folders)
        old = [entry for entry in old if entry is not holder]
    for entry in old:
        problem = problem or await _remove(app, knowledge_id, entry)
    return problem


def _with_parents(path: str) -> list[str]:
    """ "a/b/c" -> ["a", "a/b", "a/b/c"]; "" (the top of the base) -> []."""
    parts = path.split("/") if path else []
    return ["/".join(parts[: depth + 1]) for depth in range(len(parts))]


def _report(say: Say, tty: bool, done: int, total: int, what: str, problem: Problem | None) -> None:
    if tty:
        width = 24
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()
        if done == total:
            sys.stderr.write("\n")
    say(f"{what}: {f'FAILED - {problem}' if problem else 'ok'}")


async def _put(app: App, knowledge_id: str, file: LocalFile, folders: Folders | None) -> Problem | None:
    """Upload one file into the base (into its folder, made first where missing, when the base mirrors the folder)."""
    try:
        folder_id = None if folders is None else await folders.id_of(app, knowledge_id, file.folder)
    except ToolFailure as failure:
        return Problem.of(failure, "could not make its folder in the base: ")
    content = file.path.read_bytes()
    digest = hashlib.sha256(content).hexdigest()
    if (digest if file.mirrored else digest[:_DIGEST_CHARS]) != file.digest:
        return Problem("changed", "the file changed while it was synced; run again")
    name = file.relative.rpartition("/")[2] if file.mirrored else synced_name(file)
    metadata = {"title": file.relative, "source": file.relative} | ({"synced_by": SYNCED_BY} if file.mirrored else {})
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    try:
        await upload_to_base(
            app, knowledge_id, Upload(name, content, content_type, metadata, folder_id), _quiet, text=None, tool="sync"
        )
    except ToolFailure as failure:
        return Problem.of(failure)
    return None


async def _remove(app: App, knowledge_id: str, entry: RemoteFile) -> Problem | None:
    """Take a document this command uploaded out of the base, and delete its file (it belongs to no one else)."""
    try:
        async with app.locks.hold(knowledge_id):
            await app.client.remove_file(knowledge_id, entry.file_id, delete_file=True)
    except ToolFailure as failure:
        return Problem.of(failure)
    return None


@dataclass(frozen=True, slots=True)
class Problem:
    """Why one file was not synced, as said on its line."""

    code: str
    message: str
    existing_file_id: str | None = None

    @classmethod
    def of(cls, failure: ToolFailure, context: str = "") -> Problem:
        return cls(failure.code, context + failure.message, failure.existing_file_id)

    def __str__(self) -> str:
        return self.message if self.code == "changed" else f"{self.code}: {self.message}"


async def _quiet(progress: float, total: float, message: str) -> None:
    return None
