"""`openwebui-rag-mcp sync DIR --knowledge-id ID`: keep a knowledge base in step with a folder.

A run:

- adds files the base does not hold,
- replaces changed ones (the new version is added first, then the old one removed, so an interrupted run leaves at
  most an extra old version, which the next run removes),
- leaves unchanged ones alone (compared by the SHA-256 of their bytes),
- and removes documents whose file is gone only with `--delete`.

A file the run skips (over OPENWEBUI_UPLOAD_MAX_BYTES, empty, a link, unreadable, a name the base cannot keep, in a
folder that cannot be read) is named on a `skipped` line and is still there: its documents stay as they are, never
counted as gone, never taken by the rename rule. Open WebUI holds a text once per base, so a file whose bytes the base
holds already (another file of the folder, a document that stays) is skipped too. Skips the folder cannot get rid of
by itself (empty files, copies) do not change the exit code, so an unchanged folder settles at exit 0 with no write;
the others (too large, a link, unreadable, its name) exit 1, as a failed upload does.

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
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from openwebui_rag_mcp import normalize, tools
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import FileItem
from openwebui_rag_mcp.writes import Upload, safe_filename, upload_to_base

OK, SOME_FAILED, REFUSED, UNUSABLE = 0, 1, 3, 5
# --delete without --max-delete removes at most this many of this folder's documents, or at most half of them.
DELETE_FEW = 5
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
    digest: str  # the whole SHA-256 of its bytes when mirrored, else its first 12 hex digits
    extension: str
    size: int
    mirrored: bool = False  # the base mirrors the folder (0.9.6+): the file keeps its own name and folder
    sha256: str = ""  # the whole SHA-256 of its bytes

    @property
    def names(self) -> tuple[str, str]:
        """Both ways a document can name this file: its path (mirrored), its name made safe (named)."""
        return self.relative, self.key + self.extension

    @property
    def identity(self) -> str:
        """What names this file in the base: its path when mirrored, else its name made safe."""
        return self.relative if self.mirrored else self.key + self.extension

    @property
    def folder(self) -> str:
        return self.relative.rpartition("/")[0]


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """A document of the base this command manages for this folder."""

    file_id: str
    key: str  # what names its file: the path when mirrored, else the name made safe
    digest: str


@dataclass(frozen=True, slots=True)
class Other:
    """A document of the base this command does not manage for this folder: never replaced, renamed or removed. A
    file at one of its names with its bytes counts as held by it."""

    label: str  # how the lines name it
    names: tuple[tuple[str, str], ...]  # (name, digest: the whole SHA-256 or its first 12 hex digits)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file (or a folder) this run does not sync. It is still in the folder, so its documents stay as they are:
    never counted as gone, never taken by the rename rule."""

    relative: str  # "" for the synced folder itself
    why: str
    fails: bool = True  # makes the exit code 1: someone could act (too large, a link, unreadable, its name)
    folder: bool = False  # a folder that could not be read: everything under it is present

    @property
    def shown(self) -> str:
        """The path, printable even when the name is not UTF-8."""
        return os.fsencode(self.relative or ".").decode("utf-8", "replace")

    def covers(self, entry: RemoteFile) -> bool:
        """Whether the document `entry` may be this file's (or under this folder)."""
        if not self.folder:
            return entry.key in (self.relative, "".join(key_of(self.relative)))
        if not self.relative:
            return True
        return entry.key.startswith((f"{self.relative}/", key_of(f"{self.relative}/x")[0].removesuffix("x")))


@dataclass
class Plan:
    add: list[LocalFile] = field(default_factory=list)
    replace: list[tuple[LocalFile, list[RemoteFile]]] = field(default_factory=list)
    unchanged: list[LocalFile] = field(default_factory=list)
    renamed: list[tuple[LocalFile, RemoteFile]] = field(default_factory=list)  # same content under a new name
    stale: list[RemoteFile] = field(default_factory=list)  # older versions of files that are up to date
    gone: list[RemoteFile] = field(default_factory=list)  # files no longer in the folder
    skipped: list[Skipped] = field(default_factory=list)


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


def scan(folder: Path, max_bytes: int, *, mirrored: bool = False) -> tuple[list[LocalFile], list[Skipped]]:
    """Regular files under `folder` (hidden files and folders left out, links not followed), and those skipped: a
    file or folder that cannot be read is named, never a crash.

    `mirrored`: the base mirrors the folder, so each file is known by its path and the whole SHA-256 of its bytes."""
    found: list[LocalFile] = []
    skipped: list[Skipped] = []

    def unreadable(error: OSError) -> None:
        where = _relative_to(folder, error.filename)
        skipped.append(Skipped(where, f"a folder that could not be read ({_why(error)})", folder=True))

    for root, dirs, files in os.walk(folder, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                path = Path(root) / name
                outcome = _scan_one(path, path.relative_to(folder).as_posix(), max_bytes, mirrored)
                (found if isinstance(outcome, LocalFile) else skipped).append(outcome)  # type: ignore[arg-type]
    return found, skipped


def _scan_one(path: Path, relative: str, max_bytes: int, mirrored: bool) -> LocalFile | Skipped:
    try:
        info = path.lstat()
    except OSError as error:
        return Skipped(relative, f"could not be looked at ({_why(error)})")
    if not stat.S_ISREG(info.st_mode):
        return Skipped(relative, "not a regular file (links are not followed)")
    if info.st_size > max_bytes:
        return Skipped(relative, f"{info.st_size:,} bytes, over OPENWEBUI_UPLOAD_MAX_BYTES ({max_bytes:,})")
    if mirrored:  # the file keeps its name in the base: it must arrive as it is here
        why = _unkeepable(relative)
        if why:
            return Skipped(relative, why)
    try:
        content = _read(path, max_bytes + 1)
    except OSError as error:  # gone since the walk, no permission, a disk error
        return Skipped(relative, f"could not be read ({_why(error)})")
    if len(content) > max_bytes:
        return Skipped(relative, f"grew over OPENWEBUI_UPLOAD_MAX_BYTES ({max_bytes:,}) while it was read")
    if not content:  # Open WebUI holds no text for it; an editor may be saving it
        return Skipped(relative, "empty: there is nothing for Open WebUI to hold", fails=False)
    sha256 = hashlib.sha256(content).hexdigest()
    key, extension = key_of(relative)
    digest = sha256 if mirrored else sha256[:_DIGEST_CHARS]
    return LocalFile(path, relative, key, digest, extension, len(content), mirrored, sha256)


def _read(path: Path, limit: int) -> bytes:
    with path.open("rb") as stream:
        return stream.read(limit)


def _why(error: OSError) -> str:
    return error.strerror or type(error).__name__


def _relative_to(folder: Path, filename: object) -> str:
    """The path of a folder `os.walk` could not read, relative to the synced folder ("" for itself)."""
    try:
        relative = Path(os.fsdecode(filename)).relative_to(folder).as_posix()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    return "" if relative == "." else relative


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


def plan(
    local: list[LocalFile],
    remote: list[RemoteFile],
    skipped: Sequence[Skipped] = (),
    *,
    others: Sequence[Other] = (),
) -> Plan:
    """What to do. `remote`: the documents this command manages for this folder; `others`: the rest of the base."""
    result = Plan(skipped=list(skipped))
    by_key: dict[str, list[RemoteFile]] = {}
    for entry in remote:
        by_key.setdefault(entry.key, []).append(entry)
    local = _distinct_names(local, result.skipped)
    local = _distinct_bytes(local, by_key, others, result.skipped)
    seen = {file.identity for file in local}
    for file in local:
        held = by_key.get(file.identity, [])
        current = [entry for entry in held if entry.digest == file.digest]
        older = [entry for entry in held if entry.digest != file.digest]
        if current:
            result.unchanged.append(file)
            result.stale.extend(older + current[1:])
        elif older:
            result.replace.append((file, older))
        elif _held_by_others(file, others):
            # The same bytes at the same path, put there by someone else: held already. Not uploaded again (Open
            # WebUI would refuse the same text twice), never removed.
            result.unchanged.append(file)
        else:
            result.add.append(file)
    # A document whose file this run skips (or under a folder it could not read) is not gone: the file is there.
    kept = [entry for entry in remote if any(reason.covers(entry) for reason in result.skipped)]
    gone = [entry for key, entries in by_key.items() if key not in seen for entry in entries if entry not in kept]
    # A renamed file: its content is in the base under its old name, and Open WebUI refuses the same text twice in
    # one base, so the old document goes first and the file is added under its new name.
    for file in list(result.add):
        moved = next((entry for entry in gone if entry.digest == file.digest), None)
        if moved is not None:
            gone.remove(moved)
            result.renamed.append((file, moved))
            result.add.remove(file)
    result.gone = gone
    # Bytes the base holds already under a document that stays (someone else's, or a skipped file's): Open WebUI
    # would refuse them, so they are not sent; the file's own older versions stay too.
    staying = [Other(entry.key, ((entry.key, entry.digest),)) for entry in kept] + list(others)
    for file in result.add + [file for file, _ in result.replace]:
        holder = _holder(file, staying)
        if holder is not None:
            result.skipped.append(Skipped(file.relative, f"its bytes are already in the base as {holder}", fails=False))
    moved_away = {reason.relative for reason in result.skipped}
    result.add = [file for file in result.add if file.relative not in moved_away]
    result.replace = [(file, old) for file, old in result.replace if file.relative not in moved_away]
    return result


def _distinct_names(local: list[LocalFile], skipped: list[Skipped]) -> list[LocalFile]:
    """Files whose names are the same once made safe cannot both be held under it: both are skipped (and so the
    documents under that name stay as they are)."""
    count: dict[str, int] = {}
    for file in local:
        count[file.identity] = count.get(file.identity, 0) + 1
    distinct = []
    for file in local:
        if count[file.identity] == 1:
            distinct.append(file)
        else:
            skipped.append(Skipped(file.relative, "another file's name is the same once made safe; rename one"))
    return distinct


def _distinct_bytes(
    local: list[LocalFile], by_key: dict[str, list[RemoteFile]], others: Sequence[Other], skipped: list[Skipped]
) -> list[LocalFile]:
    """Open WebUI holds a text once per base: of several files with the same bytes one is synced (the one the base
    holds already, else the first), the others are skipped without failing, so the folder settles."""
    copies: dict[str, list[LocalFile]] = {}
    for file in local:
        copies.setdefault(file.sha256, []).append(file)
    distinct = []
    for file in local:
        group = copies[file.sha256]
        holds = [f for f in group if _is_held(f, by_key, others)]
        keeper = (holds or group)[0]
        if file is keeper:
            distinct.append(file)
        else:
            skipped.append(
                Skipped(file.relative, f"the same bytes as {keeper.relative}, which the base holds once", fails=False)
            )
    return distinct


def _is_held(file: LocalFile, by_key: dict[str, list[RemoteFile]], others: Sequence[Other]) -> bool:
    return any(entry.digest == file.digest for entry in by_key.get(file.identity, [])) or _held_by_others(file, others)


def _held_by_others(file: LocalFile, others: Sequence[Other]) -> bool:
    return any(name in file.names and _same_bytes(file, digest) for other in others for name, digest in other.names)


def _holder(file: LocalFile, staying: Sequence[Other]) -> str | None:
    return next((other.label for other in staying for _, digest in other.names if _same_bytes(file, digest)), None)


def _same_bytes(file: LocalFile, digest: str) -> bool:
    return len(digest) >= _DIGEST_CHARS and file.sha256.startswith(digest)


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
    settings: Settings,
    folder: Path,
    knowledge_id: str,
    *,
    dry_run: bool,
    delete: bool,
    say: Say,
    tty: bool,
    max_delete: int | None = None,
) -> int:
    from openwebui_rag_mcp.server import running_app
    from openwebui_rag_mcp.web import make_locks

    # The server's write locks: with REDIS_URL, the lease of the base that its replicas take too.
    locks = make_locks(settings)
    try:
        async with running_app(settings, locks=locks) as app:
            return await _sync(
                app, folder, knowledge_id, dry_run=dry_run, delete=delete, say=say, tty=tty, max_delete=max_delete
            )
    finally:
        await locks.aclose()


async def _sync(
    app: App,
    folder: Path,
    knowledge_id: str,
    *,
    dry_run: bool,
    delete: bool,
    say: Say,
    tty: bool,
    max_delete: int | None,
) -> int:
    settings = app.settings
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
    local, skipped = scan(folder, settings.upload_max_bytes, mirrored=mirrored)
    remote = [RemoteFile(d.file_id, d.path, d.sha256 or "") for d in documents if _marked(d)] if mirrored else named
    others = [Other(d.path, ((d.path, d.sha256),)) for d in documents if d.sha256 and not _marked(d)]
    todo = plan(local, remote, skipped, others=others if mirrored else [])
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
    empty = not local and not skipped
    refusal = _refusal(len(todo.gone), len(remote), max_delete, empty=empty) if delete else None
    say(
        f"{folder}: {len(local)} file(s); knowledge base {knowledge_id}: {len(todo.add)} to add, "
        f"{len(todo.replace)} to replace, {len(todo.renamed)} renamed, {len(todo.unchanged)} unchanged, "
        f"{len(todo.gone)} gone from the folder" + ("" if delete else " (kept; --delete removes them)")
    )
    failed = [f"{reason.shown}: {reason.why}" for reason in todo.skipped if reason.fails]
    for reason in todo.skipped:
        say(f"skipped   {reason.shown}: {reason.why}")
    if refusal is not None:
        say(f"refused: {refusal}; nothing was changed")
        return REFUSED
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
        content = _read_again(file)  # before its old document goes: a file that cannot be read keeps it
        problem = (
            content
            if isinstance(content, Problem)
            else (await _remove(app, knowledge_id, moved) or await _put(app, knowledge_id, file, target, content))
        )
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


def _refusal(gone: int, held: int, max_delete: int | None, *, empty: bool) -> str | None:
    """Why --delete may not remove `gone` of the `held` documents of this folder, or None."""
    if gone == 0 or (max_delete is not None and gone <= max_delete):
        return None
    if max_delete is not None:
        return f"--delete would remove {gone} of this folder's {held} documents, more than --max-delete {max_delete}"
    if empty:  # an unmounted share or a wrong path looks like a folder whose files are all gone
        return (
            f"the folder holds no file (a share not mounted? a wrong path?), so --delete would remove all {gone} of "
            f"this folder's documents; if that is meant, run again with --max-delete {gone}"
        )
    if gone > DELETE_FEW and gone * 2 > held:
        return (
            f"--delete would remove {gone} of this folder's {held} documents, more than half; if that is meant, run "
            f"again with --max-delete {gone}"
        )
    return None


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
    content = _read_again(file)
    if isinstance(content, Problem):
        return content
    problem = await _put(app, knowledge_id, file, folders, content)
    holder = next((entry for entry in old if problem and entry.file_id == problem.existing_file_id), None)
    if problem is not None and problem.code == "duplicate_content" and holder is not None:
        problem = await _remove(app, knowledge_id, holder) or await _put(app, knowledge_id, file, folders, content)
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


def _read_again(file: LocalFile) -> bytes | Problem:
    """The file's bytes for its upload, as they were when the folder was read, or why not."""
    try:
        content = _read(file.path, file.size + 1)
    except OSError as error:
        return Problem("changed", f"could not be read any more ({_why(error)}); run again")
    if hashlib.sha256(content).hexdigest() != file.sha256:
        return Problem("changed", "the file changed while it was synced; run again")
    return content


async def _put(app: App, knowledge_id: str, file: LocalFile, folders: Folders | None, content: bytes) -> Problem | None:
    """Upload one file into the base (into its folder, made first where missing, when the base mirrors the folder)."""
    try:
        folder_id = None if folders is None else await folders.id_of(app, knowledge_id, file.folder)
    except ToolFailure as failure:
        return Problem.of(failure, "could not make its folder in the base: ")
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
