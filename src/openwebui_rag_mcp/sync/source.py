"""The folder's source id: which folder a document came from, kept in the folder's hidden SOURCE_FILE (made by its
first real run, with a record of where: a copy of the folder is told from the folder) or given with `--source`."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from openwebui_rag_mcp.sync.types import why

SOURCE_FILE = ".openwebui-rag-mcp-sync"  # in the synced folder (hidden, so never synced itself): the folder's id
SOURCE_ID = r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}"
# A comment to earlier versions, which read the id alone: where the id was made.
_MADE_IN = "# made in: "


def is_source_id(text: str) -> bool:
    return re.fullmatch(SOURCE_ID, text) is not None


@dataclass(frozen=True, slots=True)
class Source:
    """Which folder this run syncs, as its documents record it."""

    id: str | None  # None: a dry run in a folder that has none yet (then nothing in the base is its)
    note: str | None = None  # a line to say


class SourceError(Exception):
    """The folder's source id cannot be read or kept, or it is a copy's."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where a folder is: the machine, its real path, and the device and inode of the folder itself."""

    host: str
    path: str
    device: int
    inode: int

    @classmethod
    def of(cls, folder: Path) -> Place:
        real = os.path.realpath(folder)
        info = os.stat(real)
        return cls(socket.gethostname(), real, info.st_dev, info.st_ino)

    def is_the_folder(self, now: Place) -> bool:
        """Whether the folder at `now` is the one this place names: the same folder moved on its file system (same
        device and inode), a share mounted on another machine at the same path (the same inode: its server's), or
        one made again at the same path on the same machine (a restore)."""
        same_inode = self.inode == now.inode and (self.device == now.device or self.path == now.path)
        return same_inode or (self.host == now.host and self.path == now.path)


@dataclass(frozen=True, slots=True)
class _Kept:
    id: str
    made_in: Place | None  # None: made by a version that kept no record


def folder_source(folder: Path, given: str | None, *, create: bool) -> Source:
    """The folder's source id: `given` (--source), else the one kept in its SOURCE_FILE, else (when `create`) a
    new random one, kept there with where it was made. A path is no identity: the folder may be mounted elsewhere,
    or synced from another machine. A kept id made for another folder that is still there (a copy of the folder)
    or on another machine is refused (`_check_place`); `given` overrides it."""
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
        said = None if kept is None or kept.id == given else f"note: {path} says {kept.id}; using --source {given}"
        return Source(given, said)
    if kept is not None:
        return _check_place(folder, path, kept, create=create)
    if not create:
        return Source(
            None, f"this folder has no source id yet ({SOURCE_FILE}): none of the base's documents counts as its own"
        )
    new = secrets.token_hex(4)
    try:
        _write_source(path, new, Place.of(folder))
    except FileExistsError:  # another run made it meanwhile
        return folder_source(folder, None, create=False)
    except OSError as error:
        raise SourceError(
            f"cannot keep this folder's source id in {path} ({why(error)}): give one with --source ID (1 to 32 "
            "letters, digits, - and _; the same on every run of this folder)"
        ) from None
    return Source(new, f"this folder's source id is {new} (kept in {path})")


def _check_place(folder: Path, path: Path, kept: _Kept, *, create: bool) -> Source:
    """The kept id, if it was made for this folder. One made before ids kept where (no record) is taken as this
    folder's, and the record written (`create`). One made for another folder on this machine that no longer holds
    it is taken over (the folder moved to another file system). Else the folder is taken for a copy, and refused:
    synced as the original, a copy replaces the original's documents with its own edits, and `--delete` removes the
    original's documents of the files the copy lacks."""
    here = Place.of(folder)
    made = kept.made_in
    if made is not None and made.is_the_folder(here):
        return Source(kept.id)
    if made is None or (made.host == here.host and not _holds(Path(made.path), kept.id)):
        if create:
            _record(path, kept.id, here)
        note = None if made is None else f"note: {path} was made in {made.path}, which no longer holds it: kept here"
        return Source(kept.id, note)
    where = made.path if made.host == here.host else f"{made.path} on {made.host}"
    raise SourceError(
        f"{path} was made in {where}, not in this folder: this folder looks like a copy of that one, and syncing it "
        f"would replace or remove that folder's documents (source id {kept.id}). To sync this folder as a folder of "
        f"its own, delete {path} here: its next run makes a new id. If it is that folder (moved here, or the same "
        f"share mounted on another machine), delete the line starting with {_MADE_IN.strip()!r} from {path}, or "
        f"give the id with --source {kept.id}"
    )


def _holds(folder: Path, source: str) -> bool:
    """Whether `folder` is still there with the id `source` kept in it."""
    try:
        kept = _read_source(folder / SOURCE_FILE)
    except (OSError, ValueError):
        return False
    return kept is not None and kept.id == source


def _read_source(path: Path) -> _Kept | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if len(lines) != 1 or not is_source_id(lines[0]):
        raise ValueError("it holds no source id")
    made = [line.removeprefix(_MADE_IN) for line in text.splitlines() if line.startswith(_MADE_IN)]
    return _Kept(lines[0], _place(made[0]) if len(made) == 1 else None)


def _place(text: str) -> Place | None:
    """The record of where an id was made; None if it cannot be read (then the id is taken as made here)."""
    try:
        fields = json.loads(text)
        return Place(str(fields["host"]), str(fields["path"]), int(fields["device"]), int(fields["inode"]))
    except (ValueError, TypeError, KeyError):
        return None


def _text(source: str, made_in: Place) -> str:
    return (
        "# openwebui-rag-mcp sync: the id of this folder in the knowledge bases it is synced to. Keep it with\n"
        "# the folder; a copy synced on its own needs its own (delete this file in the copy).\n"
        f"{_MADE_IN}{json.dumps(asdict(made_in), ensure_ascii=False)}\n"
        f"{source}\n"
    )


def _write_source(path: Path, source: str, made_in: Place) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(_text(source, made_in))
    except OSError:
        path.unlink(missing_ok=True)
        raise


def _record(path: Path, source: str, made_in: Place) -> None:
    """Write where the id is kept now into its file (replaced whole), or leave the file as it is if it cannot be
    written (a read-only folder goes on as before)."""
    draft = path.with_name(f"{SOURCE_FILE}.{secrets.token_hex(4)}")
    try:
        _write_source(draft, source, made_in)
        os.replace(draft, path)
    except OSError:
        draft.unlink(missing_ok=True)


def _error_text(error: Exception) -> str:
    return why(error) if isinstance(error, OSError) else str(error)
