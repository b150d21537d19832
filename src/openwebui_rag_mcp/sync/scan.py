"""The local scan: the folder's regular files (hidden ones and links left out), each read once and hashed, and what
is skipped with the reason; never a crash."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from openwebui_rag_mcp.localfiles import Refusal, open_folder, read_in
from openwebui_rag_mcp.sync.names import DIGEST_CHARS, key_of
from openwebui_rag_mcp.sync.types import LocalFile, Skipped, why

_NAME_MAX_BYTES = 200


def scan(folder: Path, max_bytes: int, *, mirrored: bool = False) -> tuple[list[LocalFile], list[Skipped]]:
    """Regular files under `folder` (hidden files and folders left out, links not followed), and those skipped: a
    file or folder that cannot be read is named, never a crash.

    `mirrored`: the base mirrors the folder, so each file is known by its path and the whole SHA-256 of its bytes."""
    found: list[LocalFile] = []
    skipped: list[Skipped] = []

    def unreadable(error: OSError) -> None:
        where = _relative_to(folder, error.filename)
        skipped.append(Skipped(where, f"a folder that could not be read ({why(error)})", folder=True))

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
        return Skipped(relative, f"could not be looked at ({why(error)})")
    if not stat.S_ISREG(info.st_mode):
        return Skipped(relative, "not a regular file (links are not followed)")
    if info.st_size > max_bytes:
        return Skipped(relative, f"{info.st_size:,} bytes, over OPENWEBUI_UPLOAD_MAX_BYTES ({max_bytes:,})")
    if mirrored:  # the file keeps its name in the base: it must arrive as it is here
        unkeepable = _unkeepable(relative)
        if unkeepable:
            return Skipped(relative, unkeepable)
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
    digest = sha256 if mirrored else sha256[:DIGEST_CHARS]
    return LocalFile(relative, key, digest, extension, len(content), mirrored, sha256, root)


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
