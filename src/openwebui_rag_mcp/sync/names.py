"""How a document says it is this folder's: the mark in its upload metadata (releases with folders), or the name
scheme `key~source~digest.ext` (releases without, where the name is all 0.6.5 keeps)."""

from __future__ import annotations

import re

from openwebui_rag_mcp.models import FileItem
from openwebui_rag_mcp.sync.source import SOURCE_ID
from openwebui_rag_mcp.sync.types import LocalFile, RemoteFile
from openwebui_rag_mcp.writes import safe_filename

SYNCED_BY = "openwebui-rag-mcp sync"  # in the upload metadata of what this command adds to a mirrored base
SOURCE_KEY = "sync_source"  # next to it: the id of the folder it came from
DIGEST_CHARS = 12
# `key~source~digest.ext`; `key~digest.ext` from versions that wrote no source id. Keys never hold a `~`.
_SYNCED_NAME = re.compile(
    rf"^(?P<key>[^~]+)~(?:(?P<source>{SOURCE_ID})~)?(?P<digest>[0-9a-f]{{12}})(?P<extension>\.[A-Za-z0-9]{{1,10}})?$"
)
_EXTENSION = re.compile(r"^\.[A-Za-z0-9]{1,10}$")


def key_of(relative: str) -> tuple[str, str]:
    """(key, extension) of a path in the folder: the path without its extension, made safe, and the extension."""
    stem, dot, extension = relative.rpartition(".")
    has_extension = bool(dot and stem and "/" not in extension and _EXTENSION.fullmatch(f".{extension}"))
    base = stem if has_extension else relative
    suffix = f".{extension.lower()}" if has_extension else ""
    key = safe_filename(base.replace("/", "_")).removesuffix(".md")
    room = 200 - len(f"~{'s' * 32}~{'0' * DIGEST_CHARS}{suffix}".encode())  # room for the longest source id
    return key.encode()[:room].decode("utf-8", "ignore").strip("_") or "document", suffix


def synced_name(local: LocalFile, source: str) -> str:
    return f"{local.key}~{source}~{local.digest}{local.extension}"


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
