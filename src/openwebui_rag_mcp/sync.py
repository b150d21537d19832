"""`openwebui-rag-mcp sync DIR --knowledge-id ID`: keep a knowledge base in step with a folder.

A run:

- adds files the base does not hold,
- replaces changed ones (the new version is added first, then the old one removed, so an interrupted run leaves at
  most an extra old version, which the next run removes),
- leaves unchanged ones alone (compared by the SHA-256 of their bytes),
- and removes documents whose file is gone only with `--delete`, within a bound: a run that would remove any
  document while the folder holds no file (an unmounted share, a wrong path), or more than half of this folder's
  documents and more than DELETE_FEW, is refused before any change (exit 3) unless `--max-delete N` allows it.

**Whose documents.** Several folders (people, machines) may sync into one base, so every document records the folder
it came from: a source id, random (8 hex digits), made by the folder's first run that is not a dry run and kept in
the folder's hidden SOURCE_FILE, or given with `--source ID` (a folder that cannot be written: then a run without it
stops with exit 5 rather than guess). A path is no identity: it moves with the mount. A run manages only documents
carrying its folder's id in the mark the command itself wrote, never one recognised by a name pattern alone (anyone
can file `report~0123456789ab.md` by hand). Every other document (another folder's, an earlier version's without a
source id, anyone's) is never replaced, renamed or removed; a file at its path with its bytes counts as held, and a
file whose bytes it holds is skipped (Open WebUI would refuse the text twice). The plan says how many there are.

A file the run skips (over OPENWEBUI_UPLOAD_MAX_BYTES, empty, a link, unreadable, a name the base cannot keep, in a
folder that cannot be read) is named on a `skipped` line and is still there: its documents stay as they are, never
counted as gone, never taken by the rename rule. Open WebUI holds a text once per base, so a file whose bytes the base
holds already (another file of the folder, a document that stays) is skipped too. Skips the folder cannot get rid of
by itself (empty files, copies) do not change the exit code, so an unchanged folder settles at exit 0 with no write;
the others (too large, a link, unreadable, its name) exit 1, as a failed upload does.

A second run changes nothing. Writes go through the same client, write locks (with REDIS_URL, the Redis lease of the
base that the server's replicas take) and error model as the tools; Open WebUI extracts the text.

How the base says which version of which file it holds, and whose it is, depends on the release:

- **Open WebUI 0.9.6 and later** (bases with folders): the base mirrors the folder, each file under its own name in
  an Open WebUI folder of the same path. Open WebUI's own folder sync comparison (`sync/diff`) gives the base's
  folder tree, missing folders are made with `dirs/create`, and Open WebUI keeps the SHA-256 of every upload
  (`meta.file_hash`). Which folder holds a document comes with the document lists from 0.12; before, from one
  comparison asked where each document's upload metadata places it, or the folder lists where that is not enough;
  a run there first asks the comparison with the folder's own files, which alone tells when nothing is to be done.
  Uploads carry `synced_by` and the folder's `sync_source` in their metadata: that is the mark.
- **Older releases**, and bases this folder synced that way before Open WebUI had folders: each file is uploaded
  under a name that carries its path, the folder's source id and the first 12 hex digits of its SHA-256
  (`notes_todo~5b0a20f4~3f2a9c0d1e4b.md`), since older releases keep no folders and 0.6.5 no upload metadata: the
  name is the mark there. The source id goes into the upload metadata too, and once the release has folders (an
  upgraded Open WebUI) a named document is this folder's only with it: a name alone never decides where the release
  keeps metadata. Names without a source id (`notes_todo~3f2a9c0d1e4b.md`) are an earlier version's, or anyone's.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import hashlib
import mimetypes
import os
import re
import secrets
import stat
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.attach import attached_files, dropped
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.giveup import Waits, given_up_at
from openwebui_rag_mcp.linkwatch import LinkWatch
from openwebui_rag_mcp.localfiles import Refusal, open_folder, read_in, read_under
from openwebui_rag_mcp.models import FileItem
from openwebui_rag_mcp.settle import Resolution, remove_unlinked
from openwebui_rag_mcp.upload import SyncOptions, Upload, upload_to_base
from openwebui_rag_mcp.writes import safe_filename

OK, SOME_FAILED, REFUSED, UNUSABLE = 0, 1, 3, 5
# --delete without --max-delete removes at most this many of this folder's documents, or at most half of them.
DELETE_FEW = 5
# Uploads at once (each holds its file's bytes until its write ends), processed side by side; attaches take turns.
CONCURRENCY = 4
CONCURRENCY_MAX = 16
# An upload that links itself (0.9.6+) gives its turn to the next once Open WebUI has answered it, and waits for its
# indexing beside up to this many times `concurrency` files in all: Open WebUI always has the next file to process
# (issue 18: it is the busy process). An upload Open WebUI then loses in a restart is one a later run takes for lost
# once past its writer's deadline (`_await_earlier_uploads`).
_QUEUED_PER_UPLOAD = 4
SYNCED_BY = "openwebui-rag-mcp sync"  # in the upload metadata of what this command adds to a mirrored base
SOURCE_KEY = "sync_source"  # next to it: the id of the folder it came from
SOURCE_FILE = ".openwebui-rag-mcp-sync"  # in the synced folder (hidden, so never synced itself): the folder's id
_SOURCE_ID = r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}"
_DIGEST_CHARS = 12
_NAME_MAX_BYTES = 200
# `key~source~digest.ext`; `key~digest.ext` from versions that wrote no source id. Keys never hold a `~`.
_SYNCED_NAME = re.compile(
    rf"^(?P<key>[^~]+)~(?:(?P<source>{_SOURCE_ID})~)?(?P<digest>[0-9a-f]{{12}})(?P<extension>\.[A-Za-z0-9]{{1,10}})?$"
)
_EXTENSION = re.compile(r"^\.[A-Za-z0-9]{1,10}$")
_EARLIER_UPLOADS_POLL_SECONDS = 1.0
_CONFIRM_EVERY_SECONDS = 30.0  # before 0.6.42: how often a long run reads the base back (`_confirm_some`)
_FIRST_POLL_SHARE = 0.8  # of the median processing time of the run's recent files: most files are done by then
# An upload Open WebUI refused before it made anything (0.6.5 under load: "Error uploading file" when its database
# was busy) is sent once more after this pause; the second refusal is the file's answer.
_UPLOAD_AGAIN_AFTER_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class LocalFile:
    relative: str  # with "/" separators
    key: str  # the name part that identifies the file in the base
    digest: str  # the whole SHA-256 of its bytes when mirrored, else its first 12 hex digits
    extension: str
    size: int
    mirrored: bool = False  # the base mirrors the folder (0.9.6+): the file keeps its own name and folder
    sha256: str = ""  # the whole SHA-256 of its bytes
    root: str = ""  # the real path of the synced folder, which every read starts from (localfiles.read_under)

    @property
    def path(self) -> Path:
        return Path(self.root, self.relative)

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
    room = 200 - len(f"~{'s' * 32}~{'0' * _DIGEST_CHARS}{suffix}".encode())  # room for the longest source id
    return key.encode()[:room].decode("utf-8", "ignore").strip("_") or "document", suffix


def synced_name(local: LocalFile, source: str) -> str:
    return f"{local.key}~{source}~{local.digest}{local.extension}"


def is_source_id(text: str) -> bool:
    return re.fullmatch(_SOURCE_ID, text) is not None


@dataclass(frozen=True, slots=True)
class Source:
    """Which folder this run syncs, as its documents record it."""

    id: str | None  # None: a dry run in a folder that has none yet (then nothing in the base is its)
    note: str | None = None  # a line to say


class SourceError(Exception):
    """The folder's source id cannot be read or kept."""


def folder_source(folder: Path, given: str | None, *, create: bool) -> Source:
    """The folder's source id: `given` (--source), else the one kept in its SOURCE_FILE, else (when `create`) a
    new random one, kept there. A path is no identity: the folder may be mounted elsewhere, or synced from another
    machine."""
    path = folder / SOURCE_FILE
    if given is not None and not is_source_id(given):
        raise SourceError(f"--source {given!r}: use 1 to 32 letters, digits, - and _, starting with a letter or digit")
    try:
        kept = _read_source(path)
    except (OSError, ValueError) as error:
        if given is not None:
            return Source(given, f"note: {path} could not be read ({_error_text(error)}); using --source {given}")
        raise SourceError(
            f"cannot read this folder's source id from {path} ({_error_text(error)}): fix or remove that file, or "
            "give the id with --source ID"
        ) from None
    if given is not None:
        return Source(given, None if kept in (None, given) else f"note: {path} says {kept}; using --source {given}")
    if kept is not None:
        return Source(kept)
    if not create:
        return Source(
            None, f"this folder has no source id yet ({SOURCE_FILE}): none of the base's documents counts as its own"
        )
    new = secrets.token_hex(4)
    try:
        _write_source(path, new)
    except FileExistsError:  # another run made it meanwhile
        return folder_source(folder, None, create=False)
    except OSError as error:
        raise SourceError(
            f"cannot keep this folder's source id in {path} ({_why(error)}): give one with --source ID (1 to 32 "
            "letters, digits, - and _; the same on every run of this folder)"
        ) from None
    return Source(new, f"this folder's source id is {new} (kept in {path})")


def _read_source(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if len(lines) != 1 or not is_source_id(lines[0]):
        raise ValueError("it holds no source id")
    return lines[0]


def _write_source(path: Path, source: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(
                "# openwebui-rag-mcp sync: the id of this folder in the knowledge bases it is synced to. Keep it with\n"
                "# the folder; a copy synced on its own needs its own (delete this file in the copy).\n"
                f"{source}\n"
            )
    except OSError:
        path.unlink(missing_ok=True)
        raise


def _error_text(error: Exception) -> str:
    return _why(error) if isinstance(error, OSError) else str(error)


def scan(folder: Path, max_bytes: int, *, mirrored: bool = False) -> tuple[list[LocalFile], list[Skipped]]:
    """Regular files under `folder` (hidden files and folders left out, links not followed), and those skipped: a
    file or folder that cannot be read is named, never a crash.

    `mirrored`: the base mirrors the folder, so each file is known by its path and the whole SHA-256 of its bytes."""
    found: list[LocalFile] = []
    skipped: list[Skipped] = []

    def unreadable(error: OSError) -> None:
        where = _relative_to(folder, error.filename)
        skipped.append(Skipped(where, f"a folder that could not be read ({_why(error)})", folder=True))

    real_root = os.path.realpath(folder)
    for root, dirs, files in os.walk(folder, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in [d for d in dirs if (Path(root) / d).is_symlink()]:  # listed, never entered: still there
            where = (Path(root) / name).relative_to(folder).as_posix()
            skipped.append(Skipped(where, "a link to a folder (links are not followed)", folder=True))
        names = sorted(name for name in files if not name.startswith("."))
        if not names:
            continue
        inside = Path(root).relative_to(folder).as_posix()
        prefix = "" if inside == "." else f"{inside}/"
        # The folder is opened once, from the root down without following links, and its files are read from it:
        # per file that is one look and one open, not a walk from the root (issue 18: a 2,000-file scan).
        try:
            directory = open_folder(real_root, prefix.split("/")[:-1])
        except Refusal as refusal:  # gone since the walk, swapped for a link, no permission
            skipped.extend(Skipped(prefix + name, refusal.reason) for name in names)
            continue
        try:
            for name in names:
                outcome = _scan_one(directory, name, prefix + name, max_bytes, mirrored, real_root)
                (found if isinstance(outcome, LocalFile) else skipped).append(outcome)  # type: ignore[arg-type]
        finally:
            os.close(directory)
    return found, skipped


def _scan_one(
    directory: int, name: str, relative: str, max_bytes: int, mirrored: bool, root: str
) -> LocalFile | Skipped:
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
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
    if info.st_size == 0:  # Open WebUI holds no text for it; an editor may be saving it
        return Skipped(relative, "empty: there is nothing for Open WebUI to hold", fails=False)
    try:
        # Opened once from its folder without following links (a link or FIFO swapped in since the look above is
        # refused, never read): what was checked is what is read.
        content = read_in(directory, name, root, max_bytes)
    except Refusal as refusal:  # gone since the walk, swapped, no permission, grew, a disk error
        return Skipped(relative, refusal.reason)
    sha256 = hashlib.sha256(content).hexdigest()
    key, extension = key_of(relative)
    digest = sha256 if mirrored else sha256[:_DIGEST_CHARS]
    return LocalFile(relative, key, digest, extension, len(content), mirrored, sha256, root)


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


def parse_name(name: str) -> tuple[str, str, str | None] | None:
    """(key with extension, digest, source id or None) of a name in the name scheme, or None."""
    match = _SYNCED_NAME.fullmatch(name)
    if match is None:
        return None
    return match["key"] + (match["extension"] or ""), match["digest"], match["source"]


def remote_files(items: list[FileItem], source: str) -> list[RemoteFile]:
    """The base's documents this command uploaded for the folder `source` under the name scheme; others are
    ignored."""
    remote: list[RemoteFile] = []
    for item in items:
        parsed = parse_name(item.filename or "")
        if parsed is not None and parsed[2] == source:
            remote.append(RemoteFile(item.file_id, parsed[0], parsed[1]))
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
        to_create, self.ids = normalize.folder_tree(await app.client.sync_diff(knowledge_id, _manifest(local)))
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
            async with app.locks.hold(knowledge_id) as lease:
                if path in self.ids:  # made by another of this run's uploads while this one waited its turn
                    return self.ids[path]
                lease.check()  # a lost lease: another replica may be writing to the base
                try:
                    self.ids[path] = await app.client.create_folder(knowledge_id, name, parent_id)
                except ToolFailure:
                    # Made meanwhile by someone else (Open WebUI answers 400 to a name taken at that level)?
                    await self.read(app, knowledge_id, [])
                    if path not in self.ids:
                        raise
        return self.ids[path]


def _manifest(local: Sequence[LocalFile]) -> list[dict[str, Any]]:
    """The files as Open WebUI's folder comparison (`sync/diff`) takes them: name, folder, checksum, size."""
    return [
        {"filename": file.relative.rpartition("/")[2], "path": file.folder, "checksum": file.digest, "size": file.size}
        for file in local
    ]


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
    source: str | None = None,
    concurrency: int = CONCURRENCY,
) -> int:
    from openwebui_rag_mcp import runtime

    try:
        origin = folder_source(folder, source, create=not dry_run)
    except SourceError as error:
        say(str(error))
        return UNUSABLE
    if origin.note:
        say(origin.note)
    # The server's write locks: with REDIS_URL, the lease of the base that its replicas take too.
    locks = runtime.make_locks(settings)
    try:
        async with runtime.running_app(settings, locks=locks, recover_at_start=False) as app:
            run = _Run(app, folder, knowledge_id, origin.id, say, tty, concurrency=concurrency)
            if not dry_run:  # first what an interrupted run (killed, or Open WebUI gone) left in no base
                run.say_removed(await app.recover_uploads_quietly())
            return await run.sync(dry_run=dry_run, delete=delete, max_delete=max_delete)
    finally:
        await locks.aclose()


@dataclass
class _Base:
    """What the base holds, as this folder's run sees it."""

    mirrored: bool
    kept_names: bool  # the release has folders, but the base goes on with the name scheme for this folder
    ours: list[RemoteFile] = field(default_factory=list)  # this folder's documents
    # This folder's documents Open WebUI listed but never indexed into the base (`_read_base`'s `lost`): not held
    stuck: list[RemoteFile] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # the file id of every document of the base
    others: list[Other] = field(default_factory=list)
    from_other_folders: int = 0
    from_earlier_versions: int = 0  # marked without a source id, or named the old way (or like it)


async def _read_base(app: App, knowledge_id: str, source: str | None, lost: set[str] | None = None) -> _Base:
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
        folder_of = await _folders_of_documents(app, knowledge_id, documents)
        documents = [_in_folder(document, folder_of.get(document.file_id, "")) for document in documents]
    base = _Base(mirrored, release.folders and named_ours, listed={document.file_id for document in documents})
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


@dataclass
class _Run:
    """One run of the command: the folder, the base, and how to write to it."""

    app: App
    folder: Path
    knowledge_id: str
    source: str | None
    say: Say
    tty: bool
    folders: Folders = field(default_factory=Folders)
    mirrored: bool = False
    concurrency: int = CONCURRENCY
    writable_checked: bool = False  # an upload of this run got in: the key may write to the base
    # How long this run's last files took Open WebUI to process: the next is first asked about after most of that.
    processing_seconds: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=16))
    watch: LinkWatch | None = None  # where uploads that link themselves are awaited together
    sending: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(CONCURRENCY))  # turns to upload
    # Before 0.6.42, the acknowledged attaches of this run's new files, read back together once its uploads are done
    # (`_confirm_attaches`), and the path of each.
    attach_checks: list[str] = field(default_factory=list)
    uploaded_paths: dict[str, str] = field(default_factory=dict)
    confirmed_at: float | None = None  # when `_confirm_some` last read the base back
    confirming: bool = False

    def __post_init__(self) -> None:
        self.watch = LinkWatch(self.app.client, self.knowledge_id)

    async def sync(self, *, dry_run: bool, delete: bool, max_delete: int | None) -> int:
        say, app, knowledge_id = self.say, self.app, self.knowledge_id
        lost = await (self._preview_earlier_uploads() if dry_run else self._await_earlier_uploads())
        max_bytes = app.settings.upload_max_bytes
        try:
            # The folder is read (in a thread) while Open WebUI answers: for a base on a release with folders as its
            # mirror, read again in the rare case that the base goes on with names instead.
            release = await app.client.release()
            scanning = asyncio.ensure_future(asyncio.to_thread(scan, self.folder, max_bytes, mirrored=release.folders))
            at_a_glance = release.folders and not release.folder_paths and not lost
            if at_a_glance and await self._holds_the_folder(scanning):
                base, (local, skipped) = _Base(mirrored=True, kept_names=False), await scanning
                todo = Plan(unchanged=local, skipped=skipped)
            else:
                base = await _read_base(app, knowledge_id, self.source, lost)
                local, skipped = await scanning
                if base.mirrored != release.folders:
                    local, skipped = await asyncio.to_thread(scan, self.folder, max_bytes, mirrored=base.mirrored)
                todo = plan(local, base.ours, skipped, others=base.others)
        except ToolFailure as failure:
            say(f"cannot read knowledge base {knowledge_id}: {failure.message}")
            return UNUSABLE
        self.mirrored = base.mirrored
        if base.kept_names:
            say(
                f"knowledge base {knowledge_id} holds files this folder's earlier runs named after their path and "
                "content; it goes on naming them that way"
            )
        uploads = todo.add + [file for file, _ in todo.replace] + [file for file, _ in todo.renamed]
        to_create: list[str] = []
        if base.mirrored and any(file.folder for file in uploads):
            try:
                to_create = await self.folders.read(app, knowledge_id, local)
            except ToolFailure as failure:
                if not dry_run:
                    say(f"cannot read the folders of knowledge base {knowledge_id}: {failure.message}")
                    return UNUSABLE
                say(f"folders to make: unknown ({failure.message})")
        removals = todo.stale + (todo.gone if delete else [])
        empty = not local and not skipped
        refusal = _refusal(len(todo.gone), len(base.ours), max_delete, empty=empty) if delete else None
        say(
            f"{self.folder}: {len(local)} file(s); knowledge base {knowledge_id}: {len(todo.add)} to add, "
            f"{len(todo.replace)} to replace, {len(todo.renamed)} renamed, {len(todo.unchanged)} unchanged, "
            f"{len(todo.gone)} gone from the folder" + ("" if delete else " (kept; --delete removes them)")
        )
        others = [
            f"{count} document(s) {what}"
            for count, what in (
                (base.from_other_folders, "synced from other folders"),
                (base.from_earlier_versions, "from an earlier version of this command (or named like its files)"),
            )
            if count
        ]
        if others:
            say(
                f"knowledge base {knowledge_id} also holds {' and '.join(others)}: this folder's runs never replace, "
                "rename or remove them"
            )
        if base.stuck:
            say(
                f"{len(base.stuck)} document(s) of this folder that Open WebUI listed but never indexed (an upload a "
                "restart cut short) are removed first, and sent again where their file is still in the folder"
            )
        failed = [f"{reason.shown}: {reason.why}" for reason in todo.skipped if reason.fails]
        for reason in todo.skipped:
            say(f"skipped   {reason.shown}: {reason.why}")
        if refusal is not None:
            say(f"refused: {refusal}; nothing was changed")
            return REFUSED
        # Uploads a killed run left that Open WebUI never finished and never linked (0.11+ link once indexed): files
        # in no base, which recovery would otherwise leave for an hour.
        unlisted = sorted(lost - base.listed)
        if dry_run:
            if unlisted:
                self.say(
                    f"would remove {len(unlisted)} file(s) of uploads a killed run left that Open WebUI never finished"
                )
            self._say_plan(todo, base.stuck + removals, to_create, uploads)
            return SOME_FAILED if failed else OK
        await self._delete_lost(unlisted)
        return await self._apply(todo, removals, failed, first=base.stuck)

    async def _holds_the_folder(self, scanning: asyncio.Future[tuple[list[LocalFile], list[Skipped]]]) -> bool:
        """Whether the base holds exactly the folder's files, unchanged, each in its place, by Open WebUI's folder
        comparison alone. On 0.9.6 to 0.11 reading the base in full takes its list and then that comparison (the
        list names no folders), each loading every document in Open WebUI; a run with nothing to do needs one.

        It tells only when nothing is to be done: the comparison of the folder's own manifest adds, changes and
        removes nothing, and the base counts no more documents than the folder has files (the comparison keeps one
        document per place, so a second copy at a place would hide behind the first). Which documents are this
        folder's and which are someone else's with the same bytes, the full read tells; with nothing to change, it
        makes no difference. A file this run skips is not in the manifest: a document of it makes the comparison
        remove that one, and so sends the run to the full read (which keeps it). Anything else (a name like the name
        scheme's, a comparison refused as it needs write access) is left to the full read too."""
        app, knowledge_id = self.app, self.knowledge_id
        app.check_base(knowledge_id)
        try:
            (local, _), (_, total) = await asyncio.gather(scanning, app.client.knowledge_files(knowledge_id, 1))
            if not local or total != len(local):
                return False
            if any(parse_name(file.relative.rpartition("/")[2]) for file in local):
                return False
            unmodified = normalize.unmodified_only(await app.client.sync_diff(knowledge_id, _manifest(local)))
        except ToolFailure:
            return False
        return unmodified == len(local)

    async def _await_earlier_uploads(self) -> set[str]:
        """Uploads that link themselves, left by a run killed while Open WebUI processed them, join the base when
        Open WebUI is done, and so does a file whose attach Open WebUI was running at the kill: wait for them first
        (OPENWEBUI_PROCESS_TIMEOUT, or until an upload's own deadline where that is later), so that this run neither
        sends them again (two copies could both be linked) nor misses them, and (before 0.6.42) no late attach
        rewrites the base's list over this run's.
        An upload that links itself is waited for only until its own writer would have given up on it
        (`Record.past_processing`): one still processing after that is taken for a task Open WebUI lost in a restart,
        whose status never changes again, and each later run would wait for it in vain. Returns the file ids of those
        not waited for: the run removes what they left (`_read_base`'s `lost`, `_delete_lost`)."""
        loop = asyncio.get_running_loop()
        settings = self.app.settings
        deadline = given_up_at("processing", loop.time(), Waits.of(settings))
        said = told_overdue = False
        lost: set[str] = set()
        while True:
            try:
                resolutions = await self.app.recover_uploads()
            except Exception as error:  # the writes' own recovery says the same again; nothing is lost by going on
                self.say(f"note: the uploads a killed run left could not be looked at ({type(error).__name__})")
                return lost
            waiting, overdue = self._earlier(resolutions)
            self.say_removed(resolutions)
            if overdue and not told_overdue:
                told_overdue = True
                self.say(
                    f"note: Open WebUI has been processing {len(overdue)} upload(s) a killed run left for longer than "
                    "OPENWEBUI_PROCESS_TIMEOUT (lost in a restart?); not waiting for them: what they left is removed "
                    "and their files sent again"
                )
            lost |= {r.record.file_id for r in overdue if r.record.file_id}
            if not waiting:
                return lost
            # An upload that links itself is waited for until its writer's deadline, even past this run's own wait:
            # only then is one Open WebUI lost told from one it is still indexing (a run begun just after a kill).
            now = self._journal_now()
            dues = [r.record.processing_due(self._within()) - now for r in waiting if r.record.links_itself]
            # (one look more past it: the journal's clock and the loop's are read a moment apart)
            deadline = max([deadline, *(loop.time() + due + _EARLIER_UPLOADS_POLL_SECONDS for due in dues)])
            if loop.time() > deadline:
                self.say(
                    f"note: Open WebUI is still processing {len(waiting)} upload(s) a killed run left; going on (a "
                    "later run or `openwebui-rag-mcp recover` settles them)"
                )
                return lost
            if not said:
                self.say(f"waiting for Open WebUI to finish {len(waiting)} upload(s) a killed run left processing")
                said = True
            await asyncio.sleep(_EARLIER_UPLOADS_POLL_SECONDS)

    def _earlier(self, resolutions: list[Resolution]) -> tuple[list[Resolution], list[Resolution]]:
        """Of what a killed run left in this base that Open WebUI is still working on: the uploads to wait for, and
        those past their writer's deadline (`Record.past_processing`), taken for lost."""
        busy = [r for r in resolutions if r.processing and r.record.knowledge_id == self.knowledge_id]
        now = self._journal_now()
        # Only uploads that link themselves: an attach Open WebUI may still run is waited for as long as its own
        # window lasts (it may begin late, after its processing and its turn at the lock).
        overdue = [r for r in busy if r.record.links_itself and r.record.past_processing(now, self._within())]
        return [r for r in busy if r not in overdue], overdue

    def say_removed(self, resolutions: list[Resolution]) -> None:
        """Recovery itself removes a killed run's upload to this base that linked itself and is in no base past its
        writer's deadline (0.11+; lost in a restart), with what it left in the base's search index: said as
        `_delete_lost` says its own."""
        removed = sum(
            len(r.deleted) for r in resolutions if r.record.links_itself and r.record.knowledge_id == self.knowledge_id
        )
        if removed:
            self.say(f"removed {removed} file(s) of uploads a killed run left that Open WebUI never finished")

    def _journal_now(self) -> float:
        return self.app.inflight.now() if self.app.inflight is not None else time.time()

    def _within(self) -> float:
        """A writer's deadline for its upload's processing, for a record of an earlier version (none kept)."""
        return self.app.settings.timeout + self.app.settings.process_timeout

    async def _preview_earlier_uploads(self) -> set[str]:
        """A dry run's look at what killed runs left (`_await_earlier_uploads`), settling and waiting for nothing:
        says what a run would wait for or remove, and returns the files it would take for lost."""
        try:
            resolutions = await self.app.preview_uploads()
        except Exception as error:
            self.say(f"note: the uploads a killed run left could not be looked at ({type(error).__name__})")
            return set()
        waiting, overdue = self._earlier(resolutions)
        if waiting:
            self.say(
                f"a run now would first wait for Open WebUI to finish {len(waiting)} upload(s) a killed run left "
                "processing"
            )
        removed = sum(len(r.deleted) for r in resolutions)
        if removed:
            self.say(f"a run now would first remove {removed} file(s) killed writes with this key left in no base")
        return {r.record.file_id for r in overdue if r.record.file_id}

    def _say_plan(self, todo: Plan, removals: list[RemoteFile], to_create: list[str], uploads: list[LocalFile]) -> None:
        needed = {path for file in uploads for path in _with_parents(file.folder)}
        for path in to_create:
            if path in needed:
                self.say(f"would create   folder {path}")
        for file in todo.add:
            self.say(f"would add      {file.relative}")
        for file, _ in todo.replace:
            self.say(f"would replace  {file.relative}")
        for file, _ in todo.renamed:
            self.say(f"would rename   {file.relative}")
        for entry in removals:
            self.say(f"would remove   {entry.key} ({entry.file_id})")
        self.say("dry run: nothing was changed")

    async def _apply(self, todo: Plan, removals: list[RemoteFile], failed: list[str], first: list[RemoteFile]) -> int:
        """Renames, additions and replacements, their uploads `concurrency` at a time (an upload that links itself
        then waits for Open WebUI beside at most `_QUEUED_PER_UPLOAD` times as many, each holding its file's bytes;
        attaches take turns under the base's lock), before 0.6.42 the new files' attaches read back, then the removals:
        a document goes only once every upload that could replace it has ended. One line per file as each ends.
        `first`: documents never indexed into the base, removed before anything is uploaded (Open WebUI removes a
        document's vectors by its text's hash too, so removed after a new copy, one would take the copy's with it)."""
        # A file whose stuck document could not be removed is not sent: its new copy's vectors would go with that
        # document's removal later.
        blocked: dict[str, Problem] = {}

        async def remove_first(entry: RemoteFile) -> Problem | None:
            if problem := await self._remove(entry):
                blocked[entry.key] = Problem(problem.code, f"its unfinished earlier upload was not removed: {problem}")
            return problem

        def unless_blocked(file: LocalFile, step: Step) -> Step:
            return functools.partial(_refused, blocked[file.identity]) if file.identity in blocked else step

        steps: list[tuple[str, LocalFile, Step]] = [
            ("rename", file, functools.partial(self._rename, file, moved)) for file, moved in todo.renamed
        ]
        steps += [("add", file, functools.partial(self._replace, file, [])) for file in todo.add]
        steps += [("replace", file, functools.partial(self._replace, file, old)) for file, old in todo.replace]
        total = len(first) + len(steps) + len(removals)
        done = 0
        succeeded: dict[str, int] = {"rename": 0, "add": 0, "replace": 0, "remove": 0}  # what happened, not the plan
        self.sending = asyncio.Semaphore(self.concurrency)
        # Before 0.9.6 a write holds its turn to the end: no more files are read ahead than can be sent.
        linking = (await self.app.client.release()).links_on_upload
        queued = asyncio.Semaphore(self.concurrency * (_QUEUED_PER_UPLOAD if linking else 1))
        removing = asyncio.Semaphore(self.concurrency)
        ended_well: set[str] = set()

        async def run(
            action: str, name: str, step: Callable[[], Awaitable[Problem | None]], turns: asyncio.Semaphore = queued
        ) -> None:
            nonlocal done
            async with turns:
                problem = await step()
            done += 1
            _report(self.say, self.tty, done, total, f"{action:<8} {name}", problem)
            if problem:
                failed.append(f"{name}: {problem}")
            else:
                succeeded[action] += 1
                ended_well.add(name)

        async with anyio.create_task_group() as group:
            for entry in first:
                group.start_soon(run, "remove", entry.key, functools.partial(remove_first, entry), removing)
        async with anyio.create_task_group() as group:
            for action, file, step in steps:
                group.start_soon(run, action, file.relative, unless_blocked(file, step))
        for name, problem in await self._confirm_attaches():
            if name in ended_well:
                succeeded["add"] -= 1
                failed.append(f"{name}: {problem}")
        async with anyio.create_task_group() as group:
            for entry in removals:
                group.start_soon(run, "remove", entry.key, functools.partial(self._remove, entry), removing)
        self.say(
            f"done: {succeeded['add']} added, {succeeded['replace']} replaced, {succeeded['rename']} renamed, "
            f"{succeeded['remove']} removed, {len(todo.unchanged)} unchanged, {len(failed)} failed"
        )
        return SOME_FAILED if failed else OK

    async def _delete_lost(self, file_ids: list[str]) -> None:
        """Delete the files of uploads a killed run left that Open WebUI never finished nor linked (past their
        writer's deadline: `_await_earlier_uploads`), with what of them it wrote into the base's search index
        (`remove_unlinked`); what cannot be deleted is left to recovery."""
        deleted = 0
        for file_id in file_ids:
            try:
                await remove_unlinked(self.app.client, self.knowledge_id, file_id)
            except ToolFailure as failure:
                if failure.code != "not_found":
                    self.say(
                        f"note: could not remove file {file_id}, an unfinished upload of a killed run ({failure.code})"
                    )
                continue
            deleted += 1
        if deleted:
            self.say(f"removed {deleted} file(s) of uploads a killed run left that Open WebUI never finished")

    async def _confirm_attaches(self) -> list[tuple[str, Problem]]:
        """Before 0.6.42, the files this run added, read back in the base's list once its uploads are done: one read
        for all, later than a read after each attach and so seeing a drop by a concurrent change anywhere in the run.
        A file the list lacks is deleted again; the files whose state is not known when the list cannot be read."""
        if not self.attach_checks:
            return []
        try:
            listed = await attached_files(self.app, self.knowledge_id)
        except ToolFailure as failure:
            problem = Problem.of(failure, "its attach was acknowledged, but the base's list could not be read back: ")
            self.say(
                f"could not read knowledge base {self.knowledge_id} back to confirm the {len(self.attach_checks)} "
                f"file(s) this run added ({failure.code}: {failure.message}); check with knowledge_files"
            )
            for file_id in self.attach_checks:  # the next run's recovery looks at them (kept if listed)
                await self._confirmed(file_id, settled=False)
            return [(self.uploaded_paths[file_id], problem) for file_id in self.attach_checks]
        found = []
        for file_id in self.attach_checks:
            settled = file_id in listed
            if not settled:
                name = self.uploaded_paths[file_id]
                why, settled = await dropped(self.app, self.knowledge_id, file_id)
                problem = Problem.of(why)
                self.say(f"add      {name}: FAILED - {problem}")
                found.append((name, problem))
            await self._confirmed(file_id, settled=settled)
        return found

    async def _confirm_some(self) -> None:
        """During a long run, every _CONFIRM_EVERY_SECONDS, the base read back for the journal's sake only: the records
        of the deferred attaches it lists are dropped (a kill leaves fewer for recovery, and the journal each upload
        reads stays short). Every new file is still read back at the end, as a later change could drop it too."""
        if self.app.inflight is None or self.confirming:
            return
        loop = asyncio.get_running_loop()
        waiting = self.app.inflight.deferred()
        if self.confirmed_at is None:  # the first deferred attach: counted from here
            self.confirmed_at = loop.time()
        if not waiting or loop.time() - self.confirmed_at < _CONFIRM_EVERY_SECONDS:
            return
        self.confirming, self.confirmed_at = True, loop.time()
        try:
            listed = await attached_files(self.app, self.knowledge_id)
        except ToolFailure:
            return  # the end of the run reads it again
        finally:
            self.confirming = False
        for file_id in waiting:
            if file_id in listed:
                await self._confirmed(file_id, settled=True)

    async def _confirmed(self, file_id: str, *, settled: bool) -> None:
        if self.app.inflight is not None:
            await self.app.inflight.confirmed(file_id, settled=settled)

    async def _rename(self, file: LocalFile, moved: RemoteFile) -> Problem | None:
        content = await _read_again(file)  # before its old document goes: a file that cannot be read keeps it
        if isinstance(content, Problem):
            return content
        return await self._remove(moved) or await self._put(file, content)

    async def _replace(self, file: LocalFile, old: list[RemoteFile]) -> Problem | None:
        """Add the new version, then remove the old ones: an interrupted run leaves an extra old version, never
        none. When the new bytes give the same text as an old version (a PDF saved again), Open WebUI refuses to
        hold that text twice: then that old version goes first."""
        content = await _read_again(file)
        if isinstance(content, Problem):
            return content
        # A new file's attach is read back at the end of the run (before 0.6.42); a new version's at once, so that a
        # dropped one never takes its old version with it.
        problem = await self._put(file, content, check_later=not old)
        holder = next((entry for entry in old if problem and entry.file_id == problem.existing_file_id), None)
        if problem is not None and problem.code == "duplicate_content" and holder is not None:
            problem = await self._remove(holder) or await self._put(file, content)
            old = [entry for entry in old if entry is not holder]
        for entry in old:
            problem = problem or await self._remove(entry)
        return problem

    async def _put(self, file: LocalFile, content: bytes, *, check_later: bool = False) -> Problem | None:
        """Upload one file into the base (into its folder, made first where missing, when the base mirrors the
        folder), marked with this folder's source id: in its metadata when mirrored, else in its name (Open WebUI
        0.6.5 keeps no upload metadata). `check_later`: before 0.6.42 its attach is read back with the run's other
        new files once the uploads are done (`_confirm_attaches`), not at once."""
        assert self.source is not None  # only a dry run has none, and it writes nothing
        app, knowledge_id = self.app, self.knowledge_id
        try:
            folder_id = await self.folders.id_of(app, knowledge_id, file.folder) if self.mirrored else None
        except ToolFailure as failure:
            return Problem.of(failure, "could not make its folder in the base: ")
        name = file.relative.rpartition("/")[2] if file.mirrored else synced_name(file, self.source)
        # The source id in the metadata too, where a release keeps it: on a release with folders a name alone never
        # makes a document this folder's.
        metadata = {"title": file.relative, "source": file.relative, SOURCE_KEY: self.source}
        if file.mirrored:
            metadata |= {"synced_by": SYNCED_BY}
        content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        async with _Turn(self.sending) as turn:
            options = SyncOptions(
                folder_id,
                links_itself=True,
                first_poll=_FIRST_POLL_SHARE * statistics.median(self.processing_seconds)
                if self.processing_seconds
                else None,
                writable_checked=self.writable_checked,  # read in its turn: set once an earlier upload got in
                watch=self.watch,
                attach_checks=self.attach_checks if check_later else None,
                sent=functools.partial(self._sent, turn),
            )
            upload = Upload(name, content, content_type, metadata, options)
            try:
                done = await upload_to_base(app, knowledge_id, upload, _quiet, text=None, tool="sync")
            except ToolFailure as failure:
                if not _worth_again(failure):
                    return Problem.of(failure)
                await asyncio.sleep(_UPLOAD_AGAIN_AFTER_SECONDS)
                try:
                    done = await upload_to_base(app, knowledge_id, upload, _quiet, text=None, tool="sync")
                except ToolFailure as again:
                    return Problem.of(again, "sent twice: ")
        self.writable_checked = True
        if check_later:
            self.uploaded_paths[done.file_id] = file.relative
            await self._confirm_some()
        if done.processed_after is not None:
            self.processing_seconds.append(done.processed_after)
        return None

    def _sent(self, turn: _Turn) -> None:
        """An upload that links itself was answered: the next may go, and the write access read before it was sent
        (every upload of the run reads it until one got this far) holds for the run's next uploads."""
        self.writable_checked = True
        turn.give_back()

    async def _remove(self, entry: RemoteFile) -> Problem | None:
        """Take a document this command uploaded for this folder out of the base, and delete its file (it belongs
        to no one else)."""
        try:
            async with self.app.locks.hold(self.knowledge_id) as lease:
                lease.check()
                await self.app.client.remove_file(self.knowledge_id, entry.file_id, delete_file=True)
        except ToolFailure as failure:
            return Problem.of(failure)
        return None


def _worth_again(failure: ToolFailure) -> bool:
    """An upload that made nothing in Open WebUI and may well work a moment later: refused by Open WebUI itself
    (400, 409, 429: not the key's rights, not a size or a name it will refuse again) or never sent. Or one whose
    attach got no answer and left no trace in a whole OPENWEBUI_TIMEOUT of looking, its file removed again (its
    connection broke): a new upload is what finishes the file; should that attach still come after all, before 0.6.42
    the read-back after the run's uploads sees what it dropped, and later releases refuse the second copy's text as a
    duplicate."""
    if failure.attach_unseen:
        return True
    if failure.stage != "upload" or failure.outcome != "not_applied":
        return False
    if failure.http_status is None:
        return failure.code == "upstream_unavailable"  # the connection was refused: Open WebUI restarting
    return failure.http_status in (400, 409, 429)


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


async def _folders_of_documents(
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
    from openwebui_rag_mcp import tools  # only for these releases: a run on any other does without importing it

    return dict(await tools.folder_documents(app, knowledge_id, [("", "")]))


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


async def _read_again(file: LocalFile) -> bytes | Problem:
    """The file's bytes for its upload, as they were when the folder was read, or why not (off the event loop, which
    keeps the write lease renewed meanwhile)."""
    try:
        content = await anyio.to_thread.run_sync(read_under, file.root, file.relative, file.size)
    except Refusal as refusal:
        return Problem("changed", f"{refusal.reason}; run again")
    if hashlib.sha256(content).hexdigest() != file.sha256:
        return Problem("changed", "the file changed while it was synced; run again")
    return content


class _Turn:
    """A turn to upload, given back once the upload has been answered (`give_back`, for an upload that then waits for
    Open WebUI's indexing) or else when its whole write ends."""

    def __init__(self, turns: asyncio.Semaphore) -> None:
        self._turns = turns
        self._held = False

    async def __aenter__(self) -> _Turn:
        await self._turns.acquire()
        self._held = True
        return self

    async def __aexit__(self, *_: object) -> None:
        self.give_back()

    def give_back(self) -> None:
        if self._held:
            self._held = False
            self._turns.release()


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


Step = Callable[[], Awaitable["Problem | None"]]


async def _refused(problem: Problem) -> Problem:
    return problem


async def _quiet(progress: float, total: float, message: str) -> None:
    return None
