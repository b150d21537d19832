"""Configuration, read from the environment only and validated once at start.

Every problem is collected and reported together, one line each, so a user fixes a broken setup in one go.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import SecretStr

TOP_K_MAX = 50
CHUNK_CHARS_MIN = 100
FILE_CHARS_MIN = 1_000

READ_TOOLS = ("knowledge_list", "knowledge_files", "knowledge_search", "knowledge_get_file", "knowledge_health")
WRITE_TOOLS = ("knowledge_create", "knowledge_add", "knowledge_update", "knowledge_delete")
ALIASES = {
    "rag_list_knowledge": "knowledge_list",
    "rag_search": "knowledge_search",
    "rag_get_file": "knowledge_get_file",
    "rag_health": "knowledge_health",
}
ALL_TOOLS = (*READ_TOOLS, *WRITE_TOOLS, *ALIASES)
# Open WebUI ids are UUIDs; every id we place in a URL must match this.
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(Exception):
    """The environment does not describe a usable configuration; `problems` has one line per fault."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Settings:
    """What the server needs to know, with defaults applied. Build it with `load_settings`."""

    url: str
    api_key: SecretStr
    timeout: float = 120.0
    verify_tls: bool = True
    top_k: int = 8
    chunk_max_chars: int = 4_000
    file_max_chars: int = 100_000
    process_timeout: float = 300.0
    log_level: str = "WARNING"
    knowledge_ids: tuple[str, ...] | None = None
    allow_create: bool = False
    read_only: bool = False
    disabled_tools: frozenset[str] = frozenset()
    warnings: tuple[str, ...] = ()

    def tool_enabled(self, name: str) -> bool:
        """Whether a tool (or alias) is registered: read-only mode drops writes, OPENWEBUI_DISABLED_TOOLS any."""
        if name in self.disabled_tools:
            return False
        return not (self.read_only and name in WRITE_TOOLS)


def load_settings(environ: Mapping[str, str]) -> Settings:
    """Read and validate the configuration from `environ`; raise `ConfigError` listing every problem."""
    problems: list[str] = []
    warnings: list[str] = []

    def text(name: str) -> str:
        return environ.get(name, "").strip()

    url = text("OPENWEBUI_URL").rstrip("/")
    if not url:
        problems.append("OPENWEBUI_URL is not set: give the base URL of Open WebUI, e.g. http://localhost:8080")
    else:
        parts = urlsplit(url)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
        if "@" in parts.netloc:
            # httpx would send these as Basic auth in place of the API key, and log them at DEBUG.
            problems.append("OPENWEBUI_URL must not contain user:password@; the API key is the credential")
        elif parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
            problems.append(f"OPENWEBUI_URL must look like http(s)://host[:port][/prefix], got {url!r}")
        elif parts.query or parts.fragment:
            problems.append("OPENWEBUI_URL must not contain a query string or fragment")

    api_key = text("OPENWEBUI_API_KEY")
    if not api_key:
        problems.append("OPENWEBUI_API_KEY is not set: create one in Open WebUI under Settings > Account > API keys")
    elif any(c.isspace() for c in api_key):
        problems.append("OPENWEBUI_API_KEY contains whitespace; copy the key (sk-...) without spaces or newlines")
    elif not (api_key.isascii() and api_key.isprintable()):
        problems.append("OPENWEBUI_API_KEY contains non-ASCII or control characters; copy the key (sk-...) again")

    def number(name: str, default: float, minimum: float, maximum: float | None, integer: bool) -> float:
        raw = text(name)
        if not raw:
            return default
        try:
            value = int(raw) if integer else float(raw)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            problems.append(f"{name} must be {kind}, got {raw!r}")
            return default
        if not math.isfinite(value) or value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum:g} and {maximum:g}" if maximum is not None else f"at least {minimum:g}"
            problems.append(f"{name} must be {bound}, got {raw}")
            return default
        return value

    def flag(name: str, default: bool) -> bool:
        raw = text(name).lower()
        if not raw:
            return default
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        problems.append(f"{name} must be true or false, got {text(name)!r}")
        return default

    timeout = number("OPENWEBUI_TIMEOUT", 120.0, 1.0, 3600.0, integer=False)
    verify_tls = flag("OPENWEBUI_VERIFY_TLS", True)
    top_k = int(number("RAG_TOP_K", 8, 1, TOP_K_MAX, integer=True))
    chunk_max_chars = int(number("RAG_CHUNK_MAX_CHARS", 4_000, CHUNK_CHARS_MIN, None, integer=True))
    file_max_chars = int(number("RAG_FILE_MAX_CHARS", 100_000, FILE_CHARS_MIN, None, integer=True))
    process_timeout = number("OPENWEBUI_PROCESS_TIMEOUT", 300.0, 1.0, 86_400.0, integer=False)

    log_level = text("OPENWEBUI_LOG_LEVEL").upper() or "WARNING"
    if log_level not in _LOG_LEVELS:
        shown = text("OPENWEBUI_LOG_LEVEL")
        problems.append(f"OPENWEBUI_LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, got {shown!r}")

    def names(name: str) -> list[str]:
        return [part.strip() for part in text(name).split(",") if part.strip()]

    knowledge_ids: tuple[str, ...] | None = None
    if text("OPENWEBUI_KNOWLEDGE_IDS"):
        knowledge_ids = tuple(dict.fromkeys(names("OPENWEBUI_KNOWLEDGE_IDS")))
        bad = [i for i in knowledge_ids if not ID_PATTERN.fullmatch(i)]
        if bad:
            problems.append(f"OPENWEBUI_KNOWLEDGE_IDS holds ids that are not Open WebUI ids: {', '.join(bad)}")
        if not knowledge_ids:
            problems.append("OPENWEBUI_KNOWLEDGE_IDS is set but names no knowledge base")
    allow_create = flag("OPENWEBUI_ALLOW_CREATE", knowledge_ids is None)
    read_only = flag("OPENWEBUI_READ_ONLY", False)
    disabled_tools = frozenset(names("OPENWEBUI_DISABLED_TOOLS"))
    unknown = sorted(disabled_tools - set(ALL_TOOLS))
    if unknown:
        problems.append(
            f"OPENWEBUI_DISABLED_TOOLS names unknown tools {', '.join(unknown)}; known: {', '.join(ALL_TOOLS)}"
        )

    if "RAG_SCORE_THRESHOLD" in environ:
        warnings.append(
            "RAG_SCORE_THRESHOLD is no longer used and is ignored: scores mean different things in different "
            "Open WebUI retrieval modes; set a relevance threshold in Open WebUI's own settings instead"
        )

    if problems:
        raise ConfigError(problems)
    return Settings(
        url=url,
        api_key=SecretStr(api_key),
        timeout=timeout,
        verify_tls=verify_tls,
        top_k=top_k,
        chunk_max_chars=chunk_max_chars,
        file_max_chars=file_max_chars,
        process_timeout=process_timeout,
        log_level=log_level,
        knowledge_ids=knowledge_ids,
        allow_create=allow_create,
        read_only=read_only,
        disabled_tools=disabled_tools,
        warnings=tuple(warnings),
    )
