"""Reading one local file under allowed directories, safely.

Checking a path and then opening it by name again leaves a gap in which a link or a FIFO can be swapped in, so a
file is opened once: from the allowed directory down, one component at a time through directory descriptors, with
`O_NOFOLLOW` (no component may be a link at that moment) and `O_NONBLOCK` (a FIFO cannot hold the open). What was
opened is then checked, not the name: a regular file (`fstat`), the file looked at before opening (same device and
inode), under the directory (the path the kernel reports for the descriptor, where it reports one), not over the
limit, and holding the bytes its size says (a pseudo-file such as /proc/self/environ says 0 and yields more).
Hard links are read: a hard link is the file itself, not a pointer that can be moved, and linking another user's
file needs rights over it on systems that protect hard links (Linux's default).

`read_under` is the blocking core (`open_folder` and `read_in` its halves, for the sync command's folder walk);
`read_source` is `knowledge_add_file`'s entry, which runs it in a worker thread so that a slow disk never stalls the
event loop."""

from __future__ import annotations

import base64
import binascii
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import anyio

from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ErrorCode, ToolFailure

# Windows has neither O_NOFOLLOW nor directory descriptors: there no local file is read (the getattr keeps the
# module importable, so base64 uploads still work).
_CAN_WALK = os.open in os.supports_dir_fd and all(hasattr(os, flag) for flag in ("O_NOFOLLOW", "O_DIRECTORY"))
_NO_FOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = _NO_FOLLOW | getattr(os, "O_DIRECTORY", 0)
_FILE = _NO_FOLLOW | getattr(os, "O_NONBLOCK", 0)
_READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileSource:
    """Where a file's bytes come from: a local `path` or `content_base64` with a `filename` (read here), or a web
    page's `url` or an Open WebUI `file_id` (`remote.py`)."""

    path: str | None
    content_base64: str | None
    filename: str | None
    url: str | None = None
    file_id: str | None = None

    def check_one(self) -> None:
        given = [self.path, self.content_base64, self.url, self.file_id]
        if sum(value is not None for value in given) != 1:
            raise _refuse("give exactly one of path (a local file), content_base64 (with filename), url or file_id")


class Refusal(Exception):
    """A local file that is not read: `reason` completes a sentence about its path ("path 'x' <reason>")."""

    def __init__(self, code: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.code: ErrorCode = code
        self.reason = reason


def read_under(root: Path | str, relative: str, limit: int) -> bytes:
    """The bytes of the regular file at `relative` (a plain relative path with "/" separators) under the directory
    `root`, opened once without following any link; at most `limit` bytes, never empty. `root` is a real path (no
    links: `os.path.realpath`, as OPENWEBUI_UPLOAD_DIRS holds them). Raises `Refusal`. Blocking: call it from a
    worker thread in async code."""
    names = _names(relative)
    real_root = os.path.abspath(root)
    directory = open_folder(real_root, names[:-1])
    try:
        return read_in(directory, names[-1], real_root, limit)
    finally:
        os.close(directory)


def open_folder(real_root: str, names: list[str]) -> int:
    """A descriptor of the folder `names` under `real_root` (a real path), opened from the root down one folder at a
    time without following any link (`sync` opens each folder once and reads its files with `read_in`). The caller
    closes it. Raises `Refusal`."""
    if not _CAN_WALK:
        raise Refusal("forbidden", "cannot be read safely on this system (no O_NOFOLLOW or directory descriptors)")
    if os.path.realpath(real_root) != real_root:  # the root itself is trusted only as the real path it names
        raise Refusal("forbidden", f"is under {real_root!r}, which is reached through a link; give its real path")
    try:
        directory = os.open(real_root, _DIRECTORY)
    except OSError as error:
        raise _unreadable(error, "its folder") from None
    try:
        for name in names:
            inner = _enter(directory, name)
            os.close(directory)
            directory = inner
    except BaseException:
        os.close(directory)
        raise
    return directory


def _names(relative: str) -> list[str]:
    names = [name for name in relative.split("/") if name not in ("", ".")]
    if not names:
        raise Refusal("invalid_argument", "is a directory; give one file (the sync command adds folders)")
    if relative.startswith("/") or ".." in names or "\x00" in relative:
        raise Refusal("invalid_argument", "is not a plain path inside its folder (no leading '/', '..' or NUL)")
    return names


def _enter(directory: int, name: str) -> int:
    try:
        return os.open(name, _DIRECTORY, dir_fd=directory)
    except FileNotFoundError:
        raise Refusal("not_found", "does not exist") from None
    except NotADirectoryError:  # also what Linux says for a link here, as O_NOFOLLOW refuses it
        raise Refusal("forbidden", f"passes {name!r}, a link or no folder (links are not followed)") from None
    except OSError as error:
        raise _unreadable(error, f"its folder {name!r}") from None


def read_in(directory: int, name: str, real_root: str, limit: int) -> bytes:
    """The bytes of the regular file `name` in the folder opened as `directory` (`open_folder`), under `real_root`,
    opened once without following a link; at most `limit` bytes, never empty. Raises `Refusal`."""
    try:
        seen = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        raise Refusal("not_found", "does not exist") from None
    except OSError as error:
        raise _unreadable(error) from None
    _check_kind(seen, limit)  # before opening: opening a device can have effects of its own
    try:
        handle = os.open(name, _FILE, dir_fd=directory)
    except FileNotFoundError:
        raise Refusal("not_found", "does not exist") from None
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a link swapped in since the look above
            raise Refusal("forbidden", "is a link (links are not followed)") from None
        raise _unreadable(error) from None
    try:
        opened = os.fstat(handle)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            raise Refusal("invalid_argument", "was replaced while it was opened; try again")
        _check_kind(opened, limit)
        _check_place(handle, real_root)
        return _check_content(_read_bounded(handle, limit), opened.st_size, limit)
    finally:
        os.close(handle)


def _check_kind(info: os.stat_result, limit: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise Refusal("forbidden", "is a link (links are not followed)")
    if stat.S_ISDIR(info.st_mode):
        raise Refusal("invalid_argument", "is a directory; give one file (the sync command adds folders)")
    if not stat.S_ISREG(info.st_mode):
        raise Refusal("invalid_argument", "is not a regular file (a FIFO, socket or device is never read)")
    if info.st_size > limit:
        raise Refusal("too_large", f"is {info.st_size:,} bytes; the limit is {limit:,} (OPENWEBUI_UPLOAD_MAX_BYTES)")


def _check_place(handle: int, real_root: str) -> None:
    """The opened file lies under the root, by the kernel's own account: it catches a folder moved out of the root
    while the path was walked. Where the kernel gives no account (no /proc), the walk alone vouches."""
    try:
        where = os.readlink(f"/proc/self/fd/{handle}")
    except OSError:
        return
    if where != real_root and not where.startswith(real_root.rstrip("/") + "/"):  # both real paths: no "..", no "//"
        raise Refusal("forbidden", "was outside its folder once opened (a folder was moved while it was read)")


def _read_bounded(handle: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit + 1  # one byte more than allowed tells a file that grew past the limit
    while left > 0:
        chunk = os.read(handle, min(left, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _check_content(content: bytes, size: int, limit: int) -> bytes:
    if len(content) > limit:
        raise Refusal("too_large", f"grew past {limit:,} bytes while it was read")
    if len(content) != size:
        raise Refusal(
            "invalid_argument",
            f"gave {len(content):,} bytes where its size says {size:,}: a file being written, or a pseudo-file "
            "(as under /proc), is not read",
        )
    if not content:
        raise Refusal("invalid_argument", "is empty")
    return content


def _unreadable(error: OSError, what: str = "") -> Refusal:
    cause = error.strerror or type(error).__name__
    return Refusal("forbidden", f"cannot be read ({what + ': ' if what else ''}{cause})")


# -- knowledge_add_file's sources ------------------------------------------------------------------------------------


def _refuse(message: str, code: ErrorCode = "invalid_argument") -> ToolFailure:
    return ToolFailure(code, message, stage="upload", outcome="not_applied", request_sent=False)


async def read_source(settings: Settings, source: FileSource) -> tuple[str, bytes]:
    """(original filename, bytes) of a file to add, after every check that needs no request: which source, the
    allowed directories, the kind of file and the size limit. Messages name the rule and the path as given, never
    the file's content. A local file is read in a worker thread."""
    limit = settings.upload_max_bytes
    source.check_one()
    if source.path is None and source.content_base64 is None:
        raise _refuse("give path (a local file) or content_base64 (with filename)")
    if source.content_base64 is not None:
        if not source.filename or not source.filename.strip():
            raise _refuse("content_base64 needs a filename (with its extension, e.g. report.pdf)")
        encoded = source.content_base64
        # Base64 is 4 characters per 3 bytes (line breaks aside): refuse a clearly oversized file before decoding it.
        if len(encoded) > (limit // 3 + 1) * 4 * 1.1 + 1024:
            raise _refuse(f"the file is larger than {limit:,} bytes (OPENWEBUI_UPLOAD_MAX_BYTES)", "too_large")
        try:
            content = base64.b64decode("".join(encoded.split()), validate=True)
        except (binascii.Error, ValueError):
            raise _refuse("content_base64 is not valid base64") from None
        if len(content) > limit:
            raise _refuse(
                f"the file is {len(content):,} bytes; the limit is {limit:,} (OPENWEBUI_UPLOAD_MAX_BYTES)", "too_large"
            )
        if not content:
            raise _refuse("the file is empty")
        return source.filename.strip(), content
    assert source.path is not None
    _check_local_allowed(settings, source.path)
    return source.path.rsplit("/", 1)[-1], await anyio.to_thread.run_sync(_read_local, settings, source.path)


def _check_local_allowed(settings: Settings, given: str) -> None:
    if settings.transport != "stdio":
        raise _refuse(
            "path is refused over the HTTP transport (the server's disk is not the caller's); send content_base64",
            "forbidden",
        )
    if not settings.upload_dirs:
        raise _refuse(
            "reading local files is switched off: no directory is listed in OPENWEBUI_UPLOAD_DIRS; send "
            "content_base64, or ask the operator to list the directory",
            "forbidden",
        )
    if "\x00" in given:
        raise _refuse("path contains a NUL character")


def _read_local(settings: Settings, given: str) -> bytes:
    """Links and '..' in `given` are resolved only to find the allowed directory and the path under it; the file is
    then opened from that directory down without following any link (`read_under`)."""
    try:
        resolved = Path(os.path.realpath(os.path.expanduser(given)))
    except FileNotFoundError:  # a link that vanished while it was resolved
        raise _refuse(f"path {given!r} does not exist", "not_found") from None
    except OSError as error:
        raise _refuse(f"path {given!r} {_unreadable(error).reason}", "forbidden") from None
    root = next((Path(allowed) for allowed in settings.upload_dirs if resolved.is_relative_to(allowed)), None)
    if root is None:
        raise _refuse(
            f"path {given!r} is outside the directories in OPENWEBUI_UPLOAD_DIRS (after resolving links and '..')",
            "forbidden",
        )
    try:
        return read_under(root, resolved.relative_to(root).as_posix(), settings.upload_max_bytes)
    except Refusal as refusal:
        raise _refuse(f"path {given!r} {refusal.reason}", refusal.code) from None
