"""`openwebui-rag-mcp sync DIR --knowledge-id ID`: keep a knowledge base in step with a folder.

Each local file is uploaded under a name that carries its path in the folder and the first 12 hex digits of the
SHA-256 of its bytes (`notes_todo~3f2a9c0d1e4b.md`), so the base itself says which version of which file it holds,
on every release (older releases keep no upload metadata). A run then:

- adds files the base does not hold,
- replaces changed ones (the new version is added first, then the old one removed, so an interrupted run leaves at
  most an extra old version, which the next run removes),
- leaves unchanged ones alone,
- and removes documents whose file is gone only with `--delete`.

A second run changes nothing. Documents the base holds that this command did not upload are never touched. Writes go
through the same client, write lock and error model as the tools; Open WebUI extracts the text.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import FileItem
from openwebui_rag_mcp.writes import Upload, safe_filename, upload_to_base

OK, SOME_FAILED, UNUSABLE = 0, 1, 5
_DIGEST_CHARS = 12
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


def scan(folder: Path, max_bytes: int) -> tuple[list[LocalFile], list[tuple[str, str]]]:
    """Regular files under `folder` (hidden files and folders left out, links not followed), and those refused."""
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
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:_DIGEST_CHARS]
            key, extension = key_of(relative)
            found.append(LocalFile(path, relative, key, digest, extension, size))
    return found, refused


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
        identity = file.key + file.extension
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


async def sync(
    settings: Settings, folder: Path, knowledge_id: str, *, dry_run: bool, delete: bool, say: Say, tty: bool
) -> int:
    from openwebui_rag_mcp.server import running_app

    async with running_app(settings) as app:
        try:
            app.check_base(knowledge_id)
            files, _ = await app.client.knowledge_files(knowledge_id, None)
            items = [normalize.file_item(item) for item in files]
        except ToolFailure as failure:
            say(f"cannot read knowledge base {knowledge_id}: {failure.message}")
            return UNUSABLE
        local, refused = scan(folder, settings.upload_max_bytes)
        todo = plan(local, remote_files(items), refused)
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
        for file, moved in todo.renamed:
            done += 1
            problem = await _remove(app, knowledge_id, moved)
            if problem is None:
                problem = await _upload(app, knowledge_id, file)
            _report(say, tty, done, total, f"rename   {file.relative}", problem)
            if problem:
                failed.append(f"{file.relative}: {problem}")
            else:
                succeeded["rename"] += 1
        for action, file, old in steps:
            done += 1
            problem = await _upload(app, knowledge_id, file)
            if problem is None:
                for entry in old:
                    problem = await _remove(app, knowledge_id, entry)
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


def _report(say: Say, tty: bool, done: int, total: int, what: str, problem: str | None) -> None:
    if tty:
        width = 24
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()
        if done == total:
            sys.stderr.write("\n")
    say(f"{what}: {'FAILED - ' + problem if problem else 'ok'}")


async def _upload(app: App, knowledge_id: str, file: LocalFile) -> str | None:
    content = file.path.read_bytes()
    if hashlib.sha256(content).hexdigest()[:_DIGEST_CHARS] != file.digest:
        return "the file changed while it was synced; run again"
    name = synced_name(file)
    metadata = {"title": file.relative, "source": file.relative}
    upload = Upload(name, content, mimetypes.guess_type(name)[0] or "application/octet-stream", metadata)
    try:
        await upload_to_base(app, knowledge_id, upload, _quiet, text=None, tool="sync")
    except ToolFailure as failure:
        return f"{failure.code}: {failure.message}"
    return None


async def _remove(app: App, knowledge_id: str, entry: RemoteFile) -> str | None:
    """Take a document this command uploaded out of the base, and delete its file (it belongs to no one else)."""
    try:
        async with app.locks.hold(knowledge_id):
            await app.client.remove_file(knowledge_id, entry.file_id, delete_file=True)
    except ToolFailure as failure:
        return f"{failure.code}: {failure.message}"
    return None


async def _quiet(progress: float, total: float, message: str) -> None:
    return None
