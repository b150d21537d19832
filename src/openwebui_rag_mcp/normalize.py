"""Pure functions from Open WebUI's JSON, in all its release-dependent shapes, to this server's result models.

No I/O here. A body that matches none of the known shapes raises `ToolFailure("unexpected_response")`: an
answer we cannot read is an error, never an empty list.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import Chunk, FileItem, FileText, KnowledgeBase

# Metadata Open WebUI adds for its own bookkeeping; useless or harmful in an agent's context window.
# The hashes are 64 hex characters each, twice per chunk, and mean nothing to an agent.
# The journal of uploads in flight marks each upload with its record's id (journal.py); never shown.
UPLOAD_MARK = "openwebui_rag_mcp_upload"
_NOISE_KEYS = frozenset(
    {"embedding_config", "_chunk_hash", "embedding", "embeddings", "vector", "created_by", "hash", "file_hash"}
    | {UPLOAD_MARK}
)
# Metadata that becomes a first-class chunk field instead.
_PROMOTED_KEYS = frozenset({"file_id", "title", "source", "score", "page"})
_TEXT_KEYS = ("content", "document", "text", "page_content")


def unexpected(what: str) -> ToolFailure:
    return ToolFailure(
        "unexpected_response",
        f"Open WebUI answered with something other than the expected JSON ({what}); "
        "check that OPENWEBUI_URL points at Open WebUI itself and that its release is supported",
    )


def cut(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to at most `limit` characters, and whether it was cut."""
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def iso_time(value: object) -> str | None:
    """Open WebUI's epoch timestamps (seconds; some releases used ms or ns) as ISO 8601 UTC."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value if isinstance(value, str) and value else None
    seconds = float(value)
    while seconds > 1e11:  # milliseconds, microseconds or nanoseconds
        seconds /= 1000
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise unexpected(what)
    return value


def _optional_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


text_or_none = _str


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def page(body: object, what: str) -> tuple[list[Mapping[str, Any]], int | None]:
    """The items and total of a list answer: a flat array, `{items, total}` or `{data, total}`."""
    items: object
    total: int | None = None
    if isinstance(body, list):
        items = body
    elif isinstance(body, Mapping):
        items = body.get("items", body.get("data"))
        total = _int(body.get("total"))
    else:
        raise unexpected(what)
    if not isinstance(items, list):
        raise unexpected(what)
    return [_mapping(item, what) for item in items], total


def knowledge_base(item: Mapping[str, Any]) -> KnowledgeBase:
    knowledge_id = _str(item.get("id"))
    if knowledge_id is None:
        raise unexpected("a knowledge base without an id")
    files = item.get("files")
    file_count = _int(item.get("file_count"))
    if file_count is None and isinstance(files, list):
        file_count = len(files)
    write_access = item.get("write_access")
    return KnowledgeBase(
        knowledge_id=knowledge_id,
        name=_str(item.get("name")) or "",
        description=_str(item.get("description")),
        file_count=file_count,
        updated_at=iso_time(item.get("updated_at")),
        write_access=write_access if isinstance(write_access, bool) else None,
    )


def _upload_metadata(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """The metadata given at upload: a dict on new releases, a stringified dict on some old ones."""
    data = meta.get("data")
    if isinstance(data, Mapping):
        return data
    if isinstance(data, str) and data.startswith("{") and len(data) < 100_000:
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(data)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, Mapping):
                return parsed
    return {}


def upload_metadata_of(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The metadata given at a file's upload, from a file in any release's shape."""
    return _upload_metadata(_optional_mapping(raw.get("meta")))


def document(body: object) -> tuple[str, Mapping[str, Any]]:
    """A file's extracted text and the metadata given at its upload."""
    raw = _mapping(body, "a file")
    content = _optional_mapping(raw.get("data")).get("content")
    if content is not None and not isinstance(content, str):
        raise unexpected("a file whose text is not a string")
    return content or "", _upload_metadata(_optional_mapping(raw.get("meta")))


def text_chars(body: object) -> int:
    """The length of the extracted text in Open WebUI's answer for a file; 0 for any other shape (never a failure)."""
    raw = _optional_mapping(body)
    content = _optional_mapping(raw.get("data")).get("content")
    return len(content) if isinstance(content, str) else 0


def file_item(raw: Mapping[str, Any]) -> FileItem:
    file_id = _str(raw.get("id"))
    if file_id is None:
        raise unexpected("a file without an id")
    meta = _optional_mapping(raw.get("meta"))
    filename = _str(raw.get("filename")) or _str(meta.get("name"))
    return FileItem(
        file_id=file_id,
        title=_str(_upload_metadata(meta).get("title")) or filename,
        filename=filename,
        size=_int(meta.get("size")),
        updated_at=iso_time(raw.get("updated_at")),
        folder=_str(raw.get("directory_path")) or None,
    )


def nested_files(body: object) -> list[Mapping[str, Any]]:
    """The `files` embedded in `GET /knowledge/{id}` on releases before 0.6.42."""
    files = _mapping(body, "a knowledge base").get("files")
    # These releases always embed the list, [] when the base is empty; a missing or null one means the answer is
    # from another release (0.6.42 and later send `files: null`), never that the base is empty.
    if not isinstance(files, list):
        raise unexpected("the files of a knowledge base")
    return [_mapping(item, "a file of a knowledge base") for item in files]


def file_text(body: object, *, offset: int, max_chars: int) -> FileText:
    raw = _mapping(body, "a file")
    file_id = _str(raw.get("id"))
    if file_id is None:
        raise unexpected("a file without an id")
    whole, uploaded = document(raw)
    text = whole[offset : offset + max_chars]
    end = offset + len(text)
    item = file_item(raw)
    return FileText(
        file_id=file_id,
        title=item.title,
        filename=item.filename,
        metadata={k: v for k, v in uploaded.items() if k not in ("title", UPLOAD_MARK)},
        text=text,
        truncated=end < len(whole),  # more text follows: continue at next_offset
        total_chars=len(whole),
        offset=offset,
        next_offset=end if end < len(whole) else None,
        status=_str(_optional_mapping(raw.get("data")).get("status")),
    )


def file_lines(body: object, *, first: int, last: int, max_chars: int) -> FileText:
    """Lines `first`..`last` (1-based) of a document, each as "N: line", cut to `max_chars`. `offset` and
    `next_offset` are character positions in the whole text, so reading on by characters works too; `truncated`
    says that more text follows."""
    whole = file_text(body, offset=0, max_chars=10**12)
    starts = [0]
    for index, char in enumerate(whole.text):
        if char == "\n":
            starts.append(index + 1)
    if whole.text.endswith("\n"):
        starts.pop()  # a final newline ends the last line, it starts none
    chosen = range(first, min(last, len(starts)) + 1)
    shown: list[str] = []
    used = 0
    end = starts[first - 1] if first <= len(starts) else len(whole.text)
    for number in chosen:
        start = starts[number - 1]
        stop = starts[number] if number < len(starts) else len(whole.text)
        line = f"{number}: {whole.text[start:stop].rstrip(chr(10))}"
        if used + len(line) + 1 > max_chars and shown:
            break
        shown.append(line)
        used += len(line) + 1
        end = stop
    text = "\n".join(shown)[:max_chars]
    return whole.model_copy(
        update={
            "text": text,
            "offset": starts[first - 1] if first <= len(starts) else len(whole.text),
            "truncated": end < len(whole.text),
            "next_offset": end if end < len(whole.text) else None,
        }
    )


def _column(body: Mapping[str, Any], key: str, length: int | None) -> Sequence[object]:
    """One column of a retrieval answer (`[[...]]` or `[...]`), or Nones when the upstream left it out.

    `length` is the number of documents the column must match; None for the documents column itself.
    """
    value = body.get(key)
    if value is None:
        return [None] * (length or 0)
    if not isinstance(value, list):
        raise unexpected(f"retrieval results with a non-list '{key}'")
    cells: list[object] = []
    for row in value:  # one nested row per query, or a flat list
        if isinstance(row, list):
            cells.extend(row)
        else:
            cells.append(row)
    if length is not None and len(cells) != length:
        raise unexpected(f"retrieval results whose '{key}' does not match the documents")
    return cells


def _rows(body: object) -> list[tuple[object, object, object, object]]:
    """(text, metadata, distance, id) per result, from any retrieval answer shape."""
    if isinstance(body, list):
        rows: list[tuple[object, object, object, object]] = []
        for item in body:
            entry = _mapping(item, "a retrieval result")
            text = next((entry[k] for k in _TEXT_KEYS if k in entry), None)
            metadata = entry.get("metadata")
            if metadata is None:
                metadata = {k: v for k, v in entry.items() if k not in _TEXT_KEYS and k not in ("distance", "id")}
            rows.append((text, metadata, entry.get("distance"), entry.get("id")))
        return rows
    answer = _mapping(body, "retrieval results")
    if "documents" not in answer:
        raise unexpected("retrieval results without 'documents'")
    texts = _column(answer, "documents", None)
    count = len(texts)
    metadatas = _column(answer, "metadatas", count)
    distances = _column(answer, "distances", count)
    ids = _column(answer, "ids", count)
    return list(zip(texts, metadatas, distances, ids, strict=True))


def page_of(metadata: Mapping[str, Any]) -> int | None:
    """The page (or slide) a fragment is on, counted from 1, where the loader recorded one: `page` from the PDF
    loader (pypdf counts from 0), `page_number` from the unstructured loaders (from 1)."""
    page = _whole(metadata.get("page"))
    if page is not None and page >= 0:
        return page + 1
    number = _whole(metadata.get("page_number"))
    return number if number is not None and number >= 1 else None


PAGE_MAX = 1_000_000  # past it, a "page" is not one


def _whole(value: object) -> int | None:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer() and abs(value) <= PAGE_MAX:
        number = int(value)
    elif isinstance(value, str):  # chroma and qdrant keep numbers; others may stringify them
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) <= 7:  # "²" is a digit to isdigit(), not to int()
            number = int(text)
    return number if number is not None and abs(number) <= PAGE_MAX else None


@dataclass(frozen=True, slots=True)
class Hit:
    """A search hit: the chunk the agent sees, and what its citation needs, the fragment's whole text (the chunk's
    may be cut) and the SHA-256 of its document's text where Open WebUI keeps it with the chunk."""

    chunk: Chunk
    text: str
    document_hash: str | None


def hits(body: object, *, chunk_max_chars: int, base: str | Mapping[str, str] | None = None) -> list[Hit]:
    """Retrieval results as hits, in Open WebUI's order, the chunks' text cut to `chunk_max_chars`.

    `base` is each chunk's knowledge_id where it is certain: the one base searched, or the base of each file_id
    when the search went through the documents' own collections.
    """
    results: list[Hit] = []
    for text, raw_metadata, distance, chunk_id in _rows(body):
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise unexpected("a retrieval result whose text is not a string")
        metadata = _optional_mapping(raw_metadata)
        uploaded = _upload_metadata(metadata)
        shown, truncated = cut(text, chunk_max_chars)
        file_id = _str(metadata.get("file_id"))
        chunk = Chunk(
            text=shown,
            truncated=truncated,
            chunk_id=str(chunk_id) if isinstance(chunk_id, str | int) and not isinstance(chunk_id, bool) else None,
            file_id=file_id,
            knowledge_id=base if isinstance(base, str) or base is None else base.get(file_id or ""),
            title=_str(metadata.get("title")) or _str(uploaded.get("title")) or _str(metadata.get("name")),
            source=_str(metadata.get("source")) or _str(uploaded.get("source")),
            metadata={k: v for k, v in metadata.items() if k not in _NOISE_KEYS and k not in _PROMOTED_KEYS},
            score=_number(metadata.get("score")),
            distance=_number(distance),
            page=page_of(metadata),
            start_line=None,
            end_line=None,
            link=None,
        )
        results.append(Hit(chunk, text, _str(metadata.get("hash"))))
    return results


# -- typed records for the write path ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileRecord:
    """What the write sequences need to know of a file, in any release's shape."""

    file_id: str
    hash: str | None  # sha256 of the extracted text, on releases that keep it (0.6.34+ in base listings)
    status: str | None  # processing status where the release keeps one in `data.status`
    error: str | None  # why processing failed: `data.error` (background) or `error` (0.6.22 and older, at upload)
    # `meta.collection_name`: the collection Open WebUI last wrote the file's vectors to (its own, or a base's id)
    collection: str | None = None


def file_record(raw: object, what: str = "a file") -> FileRecord:
    body = _mapping(raw, what)
    file_id = _str(body.get("id"))
    if file_id is None:
        raise unexpected(f"{what} without an id")
    data = _optional_mapping(body.get("data"))
    error = data.get("error") or body.get("error")
    return FileRecord(
        file_id=file_id,
        hash=_str(body.get("hash")),
        status=_str(data.get("status")),
        error=str(error) if error else None,
        collection=_str(_optional_mapping(body.get("meta")).get("collection_name")),
    )


def file_records(items: Iterable[Mapping[str, Any]], what: str = "a file of a knowledge base") -> list[FileRecord]:
    return [file_record(item, what) for item in items]


def created_id(body: object, what: str) -> str:
    """The id of something Open WebUI just created (a base, an uploaded file)."""
    created = _str(body.get("id")) if isinstance(body, Mapping) else None
    if created is None:
        raise unexpected(f"{what} without an id")
    return created


# -- a base's documents as the folder sync sees them (Open WebUI 0.12+) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class FolderDocument:
    """Where a document is in its base, the SHA-256 of its bytes, and its upload metadata."""

    file_id: str
    path: str  # "folder/sub/name.ext", or "name.ext" at the top
    sha256: str | None  # meta.file_hash: Open WebUI keeps it for every upload since 0.9.6
    upload_metadata: Mapping[str, Any]


def folder_document(raw: Mapping[str, Any]) -> FolderDocument:
    file_id = _str(raw.get("id"))
    if file_id is None:
        raise unexpected("a file without an id")
    meta = _optional_mapping(raw.get("meta"))
    filename = _str(raw.get("filename")) or _str(meta.get("name")) or ""
    folder = _str(raw.get("directory_path")) or ""
    return FolderDocument(
        file_id=file_id,
        path=f"{folder}/{filename}" if folder else filename,
        sha256=_str(meta.get("file_hash")),
        upload_metadata=_upload_metadata(meta),
    )


@dataclass(frozen=True, slots=True)
class Subfolder:
    folder_id: str
    name: str


def subfolders(body: object) -> list[Subfolder]:
    """The folders directly under the one a document list was asked for (`directories`, 0.9.6+)."""
    listed = _mapping(body, "a folder's documents").get("directories")
    if not isinstance(listed, list):
        raise unexpected("a folder's documents without its subfolders")
    found = []
    for entry in listed:
        item = _mapping(entry, "a folder")
        folder_id, name = _str(item.get("id")), _str(item.get("name"))
        if folder_id is None or name is None:
            raise unexpected("a folder without an id or a name")
        found.append(Subfolder(folder_id, name))
    return found


def unmodified_only(body: object) -> int | None:
    """From Open WebUI's sync comparison: how many of the manifest's places hold a document with the checksum given,
    when no place is added or modified and no document of the base is outside the manifest; else None."""
    answer = _mapping(body, "a sync comparison")
    lists = [answer.get(key) for key in ("added", "modified", "deleted")]
    unmodified = _int(answer.get("unmodified_count"))
    if not all(isinstance(listed, list) for listed in lists) or unmodified is None:
        raise unexpected("a sync comparison without its counts")
    return unmodified if not any(lists) else None


def compared_documents(body: object) -> dict[str, str]:
    """From Open WebUI's sync comparison asked with no checksums: file id -> the folder path ("" at the top) of each
    document at a key (folder, name) the manifest named; each is reported as changed, with its id."""
    changed = _mapping(body, "a sync comparison").get("modified")
    if not isinstance(changed, list):
        raise unexpected("a sync comparison without its changed files")
    placed: dict[str, str] = {}
    for entry in changed:
        item = _mapping(entry, "a changed file of a sync comparison")
        file_id, path = _str(item.get("stale_file_id")), item.get("path")
        if file_id is None or not isinstance(path, str):
            raise unexpected("a changed file of a sync comparison without its id or folder")
        placed[file_id] = path
    return placed


def folder_tree(body: object) -> tuple[list[str], dict[str, str]]:
    """From Open WebUI's sync comparison: the folder paths to create (parents first) and the existing ones' ids."""
    answer = _mapping(body, "a sync comparison")
    create, existing = answer.get("mkdir"), answer.get("directory_map")
    if not isinstance(create, list) or not all(isinstance(path, str) for path in create):
        raise unexpected("a sync comparison without its folders to create")
    if not isinstance(existing, Mapping):
        raise unexpected("a sync comparison without its folders")
    return list(create), {str(path): value for path, value in existing.items() if isinstance(value, str)}
