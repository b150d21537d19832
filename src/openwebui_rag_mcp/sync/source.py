"""The folder's source id: which folder a document came from, kept in the folder's hidden SOURCE_FILE (made by its
first real run) or given with `--source`. A path is no identity: it moves with the mount."""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from openwebui_rag_mcp.sync.types import why

SOURCE_FILE = ".openwebui-rag-mcp-sync"  # in the synced folder (hidden, so never synced itself): the folder's id
SOURCE_ID = r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}"


def is_source_id(text: str) -> bool:
    return re.fullmatch(SOURCE_ID, text) is not None


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
            f"cannot keep this folder's source id in {path} ({why(error)}): give one with --source ID (1 to 32 "
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
    return why(error) if isinstance(error, OSError) else str(error)
