"""What each control refuses (`CONTROL_CASES`) and the bad inputs refused before any request (`BAD_INPUTS`):
tests/test_controls.py runs them; devtools/faults_doc.py renders them into docs/faults.md."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openwebui_rag_mcp import writes
from openwebui_rag_mcp.config import ALIASES, READ_TOOLS, WRITE_TOOLS
from tests.faultstub import (
    FILE,
    FILE_OTHER,
    KB,
    KB_OTHER,
    KB_THIRD,
)

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
MISSING = "ffffffff-0000-4000-8000-000000000000"  # a base no Open WebUI has
MISSING_FILE = "eeeeeeee-0000-4000-8000-000000000000"
ALLOW = {"OPENWEBUI_KNOWLEDGE_IDS": f"{KB},{KB_THIRD}"}
KB_GONE = "9e8d7c6b-5a49-4837-a625-14131211100f"  # allowed, but no longer exists upstream
ALLOW_CREATE = {**ALLOW, "OPENWEBUI_ALLOW_CREATE": "true"}
READ_ONLY = {"OPENWEBUI_READ_ONLY": "true"}
EVERY_TOOL = {*READ_TOOLS, *WRITE_TOOLS, *ALIASES}
TEXT = "# Груши\n\nPears are green. 梨是绿色的。"


# -- what each control refuses --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControlCase:
    name: str  # what was tried, for the document
    control: str  # the configuration, for the document
    env: dict[str, str]
    tool: str
    args: dict[str, Any]
    code: str  # the error code, or "unknown tool" for the SDK's unknown-tool error
    sees: str  # a piece of the message
    never: tuple[str, ...] = ()  # requests that must not be sent; empty: no request at all


def add_args(knowledge_id: str) -> dict[str, Any]:
    return {"knowledge_id": knowledge_id, "text": TEXT, "title": "Груши"}


def _outside(tool: str, args: dict[str, Any], what: str) -> ControlCase:
    return ControlCase(
        f"{what} outside the allowlist", "OPENWEBUI_KNOWLEDGE_IDS", ALLOW, tool, args, "not_found",
        "is not available through this server (OPENWEBUI_KNOWLEDGE_IDS)",
    )  # fmt: skip


def _not_registered(control: str, env: dict[str, str], tool: str, args: dict[str, Any]) -> ControlCase:
    return ControlCase(f"call {tool}", control, env, tool, args, "unknown tool", f"Unknown tool: {tool}")


UPDATE_OTHER = {"file_id": FILE_OTHER, "text": TEXT}
NONE_OF_THE_BASES = "is in none of the knowledge bases this server may read"
CONTROL_CASES: list[ControlCase] = [
    _outside("knowledge_files", {"knowledge_id": KB_OTHER}, "a base"),
    _outside("knowledge_search", {"query": "pears", "knowledge_ids": [KB_OTHER]}, "a base"),
    _outside("knowledge_search", {"query": "pears", "knowledge_ids": [KB, KB_OTHER]}, "one base of several"),
    _outside("rag_search", {"query": "pears", "knowledge_ids": [KB_OTHER]}, "a base"),
    _outside("knowledge_add", add_args(KB_OTHER), "a base"),
    _outside("knowledge_update", {**UPDATE_OTHER, "knowledge_id": KB_OTHER}, "a base"),
    _outside("knowledge_delete", {"knowledge_id": KB_OTHER, "file_id": FILE_OTHER}, "a base"),
    _outside("knowledge_rename", {"knowledge_id": KB_OTHER, "name": "Renamed"}, "a base"),
    _outside("knowledge_delete_base", {"knowledge_id": KB_OTHER, "confirm": "Ops"}, "a base"),
    _not_registered(
        "OPENWEBUI_ALLOW_DELETE_BASE not true", {"OPENWEBUI_ALLOW_DELETE_BASE": "false"}, "knowledge_delete_base",
        {"knowledge_id": KB, "confirm": "Фрукты"},
    ),
    ControlCase(
        "a file in no allowed base", "OPENWEBUI_KNOWLEDGE_IDS", ALLOW, "knowledge_get_file", {"file_id": FILE_OTHER},
        "not_found", NONE_OF_THE_BASES, never=(f"GET /api/v1/files/{FILE_OTHER}",),
    ),
    ControlCase(
        "a file in no allowed base", "OPENWEBUI_KNOWLEDGE_IDS", ALLOW, "rag_get_file", {"file_id": FILE_OTHER},
        "not_found", NONE_OF_THE_BASES, never=(f"GET /api/v1/files/{FILE_OTHER}",),
    ),
    ControlCase(
        "a file in no allowed base, named with an allowed base", "OPENWEBUI_KNOWLEDGE_IDS", ALLOW, "knowledge_update",
        {**UPDATE_OTHER, "knowledge_id": KB}, "not_found", f"is not in knowledge base {KB}",
        never=(f"POST /api/v1/files/{FILE_OTHER}/data/content/update", f"POST /api/v1/knowledge/{KB}/file/update"),
    ),
    ControlCase(
        "a file in no allowed base, named with an allowed base", "OPENWEBUI_KNOWLEDGE_IDS", ALLOW, "knowledge_delete",
        {"knowledge_id": KB, "file_id": FILE_OTHER}, "not_found", FILE_OTHER,
        never=(f"POST /api/v1/knowledge/{KB}/file/remove",),
    ),
    ControlCase(
        "create a base", "OPENWEBUI_KNOWLEDGE_IDS without OPENWEBUI_ALLOW_CREATE", ALLOW, "knowledge_create",
        {"name": "New"}, "forbidden", "creating knowledge bases is switched off",
    ),
    ControlCase(
        "create a base", "OPENWEBUI_KNOWLEDGE_IDS, OPENWEBUI_ALLOW_CREATE=false",
        {**ALLOW, "OPENWEBUI_ALLOW_CREATE": "false"}, "knowledge_create", {"name": "New"}, "forbidden",
        "creating knowledge bases is switched off",
    ),
    _not_registered("OPENWEBUI_READ_ONLY=true", READ_ONLY, "knowledge_create", {"name": "New"}),
    _not_registered("OPENWEBUI_READ_ONLY=true", READ_ONLY, "knowledge_add", add_args(KB)),
    _not_registered("OPENWEBUI_READ_ONLY=true", READ_ONLY, "knowledge_update", {**UPDATE_OTHER, "knowledge_id": KB}),
    _not_registered("OPENWEBUI_READ_ONLY=true", READ_ONLY, "knowledge_delete", {"knowledge_id": KB, "file_id": FILE}),
    _not_registered(
        "OPENWEBUI_DISABLED_TOOLS=knowledge_delete,rag_search",
        {"OPENWEBUI_DISABLED_TOOLS": "knowledge_delete,rag_search"}, "knowledge_delete",
        {"knowledge_id": KB, "file_id": FILE},
    ),
    _not_registered(
        "OPENWEBUI_DISABLED_TOOLS=knowledge_delete,rag_search",
        {"OPENWEBUI_DISABLED_TOOLS": "knowledge_delete,rag_search"}, "rag_search", {"query": "pears"},
    ),
    *[
        ControlCase(
            f"a page on {what}", "OPENWEBUI_URL_ALLOW_PRIVATE not true", {}, "knowledge_add_file",
            {"knowledge_id": KB, "url": url}, "forbidden", "only public addresses",
        )
        for what, url in [
            ("a loopback address", "http://127.0.0.1:8080/api/v1/auths"),
            ("a private address", "http://10.0.0.7/"),
            ("a link-local address (cloud metadata)", "http://169.254.169.254/latest/meta-data/"),
            ("a CGNAT address", "http://100.64.0.1/"),
            ("an IPv4-mapped IPv6 address", "http://[::ffff:127.0.0.1]/"),
            ("a unique-local IPv6 address", "http://[fd00::1]/"),
            ("a short numeric form of loopback", "http://127.1/"),
        ]
    ],
    ControlCase(
        "a page by url", "OPENWEBUI_ALLOW_URL_ADDS=false", {"OPENWEBUI_ALLOW_URL_ADDS": "false"}, "knowledge_add_file",
        {"knowledge_id": KB, "url": "https://example.com/"}, "forbidden", "switched off on this server",
    ),
]  # fmt: skip


# -- input guard rails ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadInput:
    name: str  # what is wrong, for the document
    tool: str
    field: str  # the argument at fault
    args: dict[str, Any]
    sees: str  # the message names this: the limit, or the argument


GOOD: dict[str, dict[str, Any]] = {
    "knowledge_files": {"knowledge_id": KB},
    "knowledge_search": {"query": "pears", "knowledge_ids": [KB]},
    "rag_search": {"query": "pears", "knowledge_ids": [KB]},
    "knowledge_get_file": {"file_id": FILE},
    "rag_get_file": {"file_id": FILE},
    "knowledge_health": {},
    "knowledge_create": {"name": "New", "description": "d"},
    "knowledge_add": add_args(KB),
    "knowledge_find": {"knowledge_id": KB, "phrase": "pears"},
    "knowledge_add_file": {"knowledge_id": KB, "content_base64": "IyBQZWFycwo=", "filename": "pears.md"},
    "knowledge_update": {"file_id": FILE, "text": TEXT, "knowledge_id": KB},
    "knowledge_delete": {"knowledge_id": KB, "file_id": FILE},
    "knowledge_rename": {"knowledge_id": KB, "name": "Renamed"},
    "knowledge_delete_base": {"knowledge_id": KB, "confirm": "Фрукты"},
}
BAD_IDS: list[tuple[str, str]] = [
    ("id with `../`", "../../api/v1/auths"),
    ("id with `%2F`", "a%2Fb"),
    ("id with `/`", "a/b"),
    ("id with `?`", "a?delete_file=true"),
    ("id with `#`", "a#b"),
    ("id with a space", "a b"),
    ("id with a trailing newline", "c0ffee00\n"),
    ("empty id", ""),
    ("over-long id (129 characters)", "a" * 129),
    ("non-ASCII id", "база-знаний"),
]
ID_FIELDS: list[tuple[str, str]] = [
    ("knowledge_files", "knowledge_id"),
    ("knowledge_search", "knowledge_ids"),
    ("rag_search", "knowledge_ids"),
    ("knowledge_get_file", "file_id"),
    ("rag_get_file", "file_id"),
    ("knowledge_add", "knowledge_id"),
    ("knowledge_find", "knowledge_id"),
    ("knowledge_add_file", "knowledge_id"),
    ("knowledge_update", "file_id"),
    ("knowledge_update", "knowledge_id"),
    ("knowledge_delete", "knowledge_id"),
    ("knowledge_delete", "file_id"),
    ("knowledge_rename", "knowledge_id"),
    ("knowledge_delete_base", "knowledge_id"),
]


def _bad(name: str, tool: str, field: str, value: Any, sees: str) -> BadInput:
    return BadInput(name, tool, field, {**GOOD[tool], field: value}, sees)


def _missing(tool: str, field: str) -> BadInput:
    args = {k: v for k, v in GOOD[tool].items() if k != field}
    return BadInput("missing argument", tool, field, args, f"{field}: Field required")


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"next": value}
    return value


ID_INPUTS = [
    _bad(name, tool, field, [KB, value] if field == "knowledge_ids" else value, "is not a valid Open WebUI id")
    for name, value in BAD_IDS
    for tool, field in ID_FIELDS
] + [
    BadInput(
        name,
        "knowledge_search",
        "file_ids",
        {"query": "pears", "file_ids": [FILE, value]},
        "is not a valid Open WebUI id",
    )
    for name, value in BAD_IDS
]
LIMIT_INPUTS = [
    _bad("query over 4000 characters", "knowledge_search", "query", "q" * 4001, "the limit is 4000"),
    _bad("query over 4000 characters", "rag_search", "query", "q" * 4001, "the limit is 4000"),
    _bad("blank query", "knowledge_search", "query", " \n\t", "query must not be empty"),
    _bad("top_k 0", "knowledge_search", "top_k", 0, "top_k must be between 1 and 50"),
    _bad("top_k 51", "knowledge_search", "top_k", 51, "top_k must be between 1 and 50"),
    _bad("top_k -1", "rag_search", "top_k", -1, "top_k must be between 1 and 50"),
    _bad("k_reranker 0", "knowledge_search", "k_reranker", 0, "k_reranker must be between 1 and 200"),
    _bad("k_reranker 201", "knowledge_search", "k_reranker", 201, "k_reranker must be between 1 and 200"),
    _bad("bm25_weight above 1", "knowledge_search", "bm25_weight", 1.5, "bm25_weight must be between 0"),
    _bad("bm25_weight below 0", "knowledge_search", "bm25_weight", -0.5, "bm25_weight must be between 0"),
    _bad("101 knowledge_ids", "knowledge_search", "knowledge_ids", [KB] * 101, "the limit is 100"),
    _bad("page 0", "knowledge_files", "page", 0, "page must be between 1 and 100000"),
    _bad("page 100001", "knowledge_files", "page", 100_001, "page must be between 1 and 100000"),
    _bad("offset -1", "knowledge_get_file", "offset", -1, "offset must be between 0 and"),
    _bad("max_chars 0", "knowledge_get_file", "max_chars", 0, "max_chars must be between 1 and 100000"),
    _bad(
        "max_chars over RAG_FILE_MAX_CHARS", "knowledge_get_file", "max_chars", 100_001,
        "max_chars must be between 1 and 100000",
    ),
    _bad("text over 2,000,000 characters", "knowledge_add", "text", "x" * 2_000_001, "the limit is 2000000"),
    _bad("text over 2,000,000 characters", "knowledge_update", "text", "x" * 2_000_001, "the limit is 2000000"),
    _bad("blank text", "knowledge_add", "text", "  \n ", "text must not be empty"),
    _bad("blank text", "knowledge_update", "text", "", "text must not be empty"),
    _bad("title over 300 characters", "knowledge_add", "title", "т" * 301, "the limit is 300"),
    _bad("blank title", "knowledge_add", "title", " ", "title must not be empty"),
    _bad("name over 200 characters", "knowledge_create", "name", "n" * 201, "the limit is 200"),
    _bad("blank name", "knowledge_create", "name", "", "name must not be empty"),
    _bad("description over 4000 characters", "knowledge_create", "description", "d" * 4001, "the limit is 4000"),
    _bad("metadata over 16 KiB", "knowledge_add", "metadata", {"note": "x" * 16_384}, "the limit is 16384"),
    _bad("metadata nested 5 levels", "knowledge_add", "metadata", _deep(5), "deeper than 4 levels"),
    _bad("metadata not an object", "knowledge_add", "metadata", ["source"], "metadata: Input should be"),
    *[
        _bad(f"reserved metadata key `{key}`", "knowledge_add", "metadata", {key: "x"}, f"'{key}'")
        for key in sorted(writes.RESERVED_METADATA_KEYS)
    ],
]  # fmt: skip
TYPE_INPUTS = [
    _bad("wrong type", "knowledge_search", "query", 42, "query: Input should be a valid string"),
    _bad("wrong type", "knowledge_search", "knowledge_ids", KB, "knowledge_ids: Input should be a valid list"),
    _bad("wrong type", "knowledge_search", "top_k", "many", "top_k: Input should be a valid integer"),
    _bad("wrong type", "knowledge_files", "page", "two", "page: Input should be a valid integer"),
    _bad("wrong type", "knowledge_get_file", "file_id", 7, "file_id: Input should be a valid string"),
    _bad("wrong type", "knowledge_get_file", "max_chars", 1.5, "max_chars: Input should be a valid integer"),
    _bad("wrong type", "knowledge_health", "deep", "maybe", "deep: Input should be a valid boolean"),
    _bad("wrong type", "knowledge_create", "name", None, "name: Input should be a valid string"),
    _bad("wrong type", "knowledge_add", "title", ["a"], "title: Input should be a valid string"),
    _bad("wrong type", "knowledge_update", "text", {"text": "x"}, "text: Input should be a valid string"),
    _bad("wrong type", "knowledge_delete", "knowledge_id", [KB], "knowledge_id: Input should be a valid string"),
    _missing("knowledge_files", "knowledge_id"),
    _missing("knowledge_search", "query"),
    _missing("knowledge_get_file", "file_id"),
    _missing("knowledge_create", "name"),
    _missing("knowledge_add", "title"),
    _missing("knowledge_update", "knowledge_id"),
    _missing("knowledge_delete", "file_id"),
    _bad("wrong type", "knowledge_rename", "name", 7, "name: Input should be a valid string"),
    _bad("nothing to change", "knowledge_rename", "name", None, "give name, description or both"),
    _bad("name over 200 characters", "knowledge_rename", "name", "n" * 201, "the limit is 200"),
    _bad("wrong type", "knowledge_search", "min_score", "high", "min_score: Input should be a valid number"),
    _bad("wrong type", "knowledge_files", "pending", "soon", "pending: Input should be a valid integer"),
    _bad("wait too long", "knowledge_files", "pending", 3_601, "pending must be between 0 and 3600"),
    _missing("knowledge_delete_base", "confirm"),
    _bad("wrong type", "knowledge_delete_base", "confirm", ["Фрукты"], "confirm: Input should be a valid string"),
    _bad("wrong type", "knowledge_add_file", "url", 80, "url: Input should be a valid string"),
    _bad("not http", "knowledge_add_file", "url", "file:///etc/passwd", "exactly one of"),
    _bad("wrong type", "knowledge_find", "phrase", 4711, "phrase: Input should be a valid string"),
    _bad("empty phrase", "knowledge_find", "phrase", " ", "phrase must not be empty"),
    _bad("wrong type", "knowledge_add_file", "content_base64", 12, "content_base64: Input should be a valid string"),
    _bad("not base64", "knowledge_add_file", "content_base64", "%%%", "content_base64 is not valid base64"),
    _bad("both knowledge_ids and file_ids", "knowledge_search", "file_ids", [FILE], "not both"),
    BadInput(
        "lines and offset",
        "knowledge_get_file",
        "start_line",
        {"file_id": FILE, "offset": 5, "start_line": 3},
        "not both",
    ),
]
BAD_INPUTS: list[BadInput] = [*ID_INPUTS, *LIMIT_INPUTS, *TYPE_INPUTS]
