"""The result shapes tools return. Their JSON schemas are the tools' output schemas, so names are stable API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from openwebui_rag_mcp.errors import ErrorCode, Outcome, Stage


def _compact_schema(schema: dict[str, Any]) -> None:
    """Make an output schema promise what the server sends, in as few bytes as possible.

    Every field of every result model is always sent (`None` where unknown), so every property is `required`,
    defaulted ones included: a result that lacks one, or `{}`, does not validate. Nullable fields stay
    `anyOf [X, null]` (the spelling portable clients expect). Every tools/list costs the agent context, so what
    says nothing goes: titles (they repeat the names), `additionalProperties: true` (the default) and the `type`
    beside a `const`.
    """
    properties = schema.get("properties", {})
    schema["required"] = list(properties)
    schema.pop("title", None)
    for prop in properties.values():
        prop.pop("title", None)
        if prop.get("additionalProperties") is True:
            del prop["additionalProperties"]
        if "const" in prop:
            prop.pop("type", None)


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, json_schema_extra=_compact_schema, defer_build=True)


class KnowledgeBase(_Result):
    knowledge_id: str
    name: str
    description: str | None
    file_count: int | None
    updated_at: str | None
    write_access: bool | None


class KnowledgeList(_Result):
    total: int
    count: int
    next_cursor: str | None
    hint: str | None
    items: list[KnowledgeBase]


class FileItem(_Result):
    file_id: str
    title: str | None
    filename: str | None
    size: int | None
    updated_at: str | None
    folder: str | None  # its folder's path in the base ("a/b"), on Open WebUI 0.12+; null at the top or before 0.12
    status: str | None = None  # only in the pending list: "pending" or "processing"; a listed document is searchable


class KnowledgeFiles(_Result):
    knowledge_id: str
    total: int
    count: int
    next_cursor: str | None
    hint: str | None
    items: list[FileItem]


class Chunk(_Result):
    text: str
    truncated: bool
    chunk_id: str | None
    file_id: str | None
    knowledge_id: str | None
    title: str | None
    source: str | None
    metadata: dict[str, Any]
    score: float | None
    distance: float | None
    page: int | None  # from 1, where the loader recorded one (PDF pages, slides)
    start_line: int | None  # the lines of the document's text the fragment covers (knowledge_get_file's numbers)
    end_line: int | None
    link: str | None  # opens the document in a browser signed in to Open WebUI


class SearchResult(_Result):
    query: str
    knowledge_ids: list[str]
    results: list[Chunk]
    count: int


class FileText(_Result):
    file_id: str
    title: str | None
    filename: str | None
    metadata: dict[str, Any]
    text: str
    truncated: bool
    total_chars: int
    offset: int
    next_offset: int | None
    status: str | None


class Capabilities(_Result):
    paged_lists: bool
    files_endpoint: bool
    process_status: bool
    upload_metadata: bool
    keep_file_on_remove: bool
    content_update_reindexes: bool


class Controls(_Result):
    read_only: bool
    knowledge_ids: list[str] | None  # None: no allowlist, or not shown (over HTTP)
    allow_create: bool
    disabled_tools: list[str]


class Health(_Result):
    ok: Literal[True]
    openwebui_version: str
    url: str | None  # None over HTTP: callers are not told where Open WebUI is
    family: str
    capabilities: Capabilities
    controls: Controls
    knowledge_bases_visible: int
    retrieval_ok: bool | None
    retrieval_detail: str | None
    server_version: str


class ErrorBody(_Result):
    ok: Literal[False]
    code: ErrorCode
    message: str
    http_status: int | None
    retryable: bool
    stage: Stage | None
    file_id: str | None
    outcome: Outcome | None
    existing_file_id: str | None = None


class KnowledgeCreated(_Result):
    ok: Literal[True]
    knowledge_id: str
    name: str
    description: str


class KnowledgeRenamed(_Result):
    ok: Literal[True]
    knowledge_id: str
    name: str
    description: str


class KnowledgeDeleted(_Result):
    ok: Literal[True]
    knowledge_id: str
    name: str
    documents: int  # how many documents the base held; Open WebUI keeps their files (Workspace > Files)


class DocumentAdded(_Result):
    ok: Literal[True]
    knowledge_id: str
    file_id: str
    title: str
    filename: str
    status: str


class DocumentUpdated(_Result):
    ok: Literal[True]
    knowledge_id: str
    file_id: str
    total_chars: int
    shared_file: Literal[True]
    note: str


class DocumentRemoved(_Result):
    ok: Literal[True]
    knowledge_id: str
    file_id: str
    file_kept: Literal[True]


class FileAdded(_Result):
    ok: Literal[True]
    knowledge_id: str
    file_id: str
    title: str
    filename: str
    size: int
    extracted_chars: int
    status: str


class ExactMatch(_Result):
    file_id: str
    title: str | None
    line: int
    text: str
    truncated: bool
    link: str | None


class ExactMatches(_Result):
    knowledge_id: str
    phrase: str
    matches: list[ExactMatch]
    count: int
    files_scanned: int
    files_capped: bool
    matches_capped: bool
