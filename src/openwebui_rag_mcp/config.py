"""Configuration, read from the environment only and validated once at start.

Every variable is declared once, in `VARIABLES`: its name, the `Settings` field it fills, a one-line meaning, the
default as users see it, and the rule that reads it. `load_settings`, the `--help` text and the tests that hold
README.md, README.ru.md and `.env.example` to the same list all work from that table.

Every problem is collected and reported together, one line each, so a user fixes a broken setup in one go.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import ipaddress
import math
import os
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

TOP_K_MAX = 50
CHUNK_CHARS_MIN = 100
FILE_CHARS_MIN = 1_000

READ_TOOLS = (
    "knowledge_list",
    "knowledge_files",
    "knowledge_search",
    "knowledge_get_file",
    "knowledge_find",
    "knowledge_health",
)
WRITE_TOOLS = (
    "knowledge_create",
    "knowledge_add",
    "knowledge_add_file",
    "knowledge_update",
    "knowledge_delete",
    "knowledge_rename",
    "knowledge_delete_base",
)
ALIASES = {
    "rag_list_knowledge": "knowledge_list",
    "rag_search": "knowledge_search",
    "rag_get_file": "knowledge_get_file",
    "rag_health": "knowledge_health",
}
ALL_TOOLS = (*READ_TOOLS, *WRITE_TOOLS, *ALIASES)
# Offered only when the operator switches them on (OPENWEBUI_ALLOW_DELETE_BASE), so they cost no context otherwise.
SWITCHED_ON_TOOLS = ("knowledge_delete_base",)
DEFAULT_TOOLS = tuple(name for name in ALL_TOOLS if name not in SWITCHED_ON_TOOLS)  # what a default server offers
# Open WebUI ids are UUIDs; every id we place in a URL must match this.
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(Exception):
    """The environment does not describe a usable configuration; `problems` has one line per fault."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Timings:
    """How often the server looks at Open WebUI while it waits; no variable sets them (tests shrink them)."""

    poll_first: float = 0.2  # the first look at an upload's processing; then 1.5 times longer each, up to poll_max
    poll_max: float = 2.0
    confirm_pause: float = 1.0  # before 0.6.42: the pause before reading a base's list again, times the attempt
    # How long a file Open WebUI calls "completed" (or marks written to the base) may take to show in its lists.
    link_wait: float = 10.0
    list_read_every: float = 5.0  # while an unanswered attach shows no mark: the base's list is the dearer read
    # Recovery: a file that linked itself and is "completed" is looked at once more after this long all the same.
    link_settle: float = 2.0
    # The start looks again at what a dead process left that Open WebUI may still be working on: after these, then
    # every last one.
    recheck: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0, 60.0)
    # `sync`: between looks at the uploads a killed run left processing; before 0.6.42, how often a long run reads the
    # base back (`Writer.confirm_some`); the pause before an upload Open WebUI refused before it made anything (0.6.5
    # under load: "Error uploading file" when its database was busy) is sent once more.
    earlier_uploads_poll: float = 1.0
    confirm_every: float = 30.0
    upload_again_after: float = 2.0
    pending_poll: float = 2.0  # `knowledge_files(pending=N)`: between looks at what is still processing


@dataclass(frozen=True, slots=True)
class Settings:
    """What the server needs to know, with defaults applied. Build it with `load_settings`.

    The defaults here are the defaults of the variables (see `VARIABLES`), written only here; `allow_create` is the
    exception, its default depends on OPENWEBUI_KNOWLEDGE_IDS.
    """

    url: str
    api_key: SecretStr
    public_url: str = ""
    timeout: float = 120.0
    verify_tls: bool = True
    top_k: int = 8
    chunk_max_chars: int = 4_000
    file_max_chars: int = 100_000
    process_timeout: float = 300.0
    log_level: str = "WARNING"
    knowledge_ids: tuple[str, ...] | None = None
    allow_create: bool = False
    allow_delete_base: bool = False
    hybrid_search: bool = False
    read_only: bool = False
    disabled_tools: frozenset[str] = frozenset()
    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8765
    auth_mode: str = "caller"
    service_tokens: tuple[SecretStr, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ("127.0.0.1",)
    max_body_bytes: int = 16 * 1024 * 1024
    redis_url: SecretStr | None = None
    lease_seconds: float = 30.0
    upload_dirs: tuple[str, ...] = ()
    upload_max_bytes: int = 10 * 1024 * 1024
    allow_url_adds: bool = True
    url_allow_private: bool = False
    warnings: tuple[str, ...] = ()
    timings: Timings = Timings()

    def tool_enabled(self, name: str) -> bool:
        """Whether OPENWEBUI_DISABLED_TOOLS leaves a tool (or alias) in.

        OPENWEBUI_READ_ONLY is not applied here: in read-only mode server/table.py leaves out every tool whose
        annotations do not say read-only, so there is no second list of write tools to keep in step.
        """
        return name not in self.disabled_tools


# -- the declarations ---------------------------------------------------------------------------------------------


class _Reading:
    """One run of `load_settings`: the environment, the problems found so far and the values read so far."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.problems: list[str] = []
        self.values: dict[str, Any] = {}

    def text(self, name: str) -> str:
        return self.environ.get(name, "").strip()


Rule = Callable[[_Reading, "Variable"], object]
"""Reads one variable: returns the value for its `Settings` field, appending a problem line if it is invalid."""


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable, declared once.

    `field` is the `Settings` field it fills, or None for a retired variable (which is only warned about). `note`
    replaces the shown default when the default is not one value ("required", a default that depends on another
    variable); otherwise the default shown is the field's default as one would write it in the environment.
    """

    name: str
    field: str | None
    meaning: str
    read: Rule | None
    note: str = ""
    retired_warning: str = ""

    @property
    def default(self) -> str:
        """The default as users see it, in `--help`, the README tables and `.env.example`."""
        if self.note or self.field is None:
            return self.note
        return _show(_field_default(self.field))

    @property
    def has_value_default(self) -> bool:
        """True when the default is one value that could be written in the environment (e.g. `120`)."""
        return not self.note and self.field is not None


def _default_of(variable: Variable) -> Any:
    assert variable.field is not None, variable.name
    return _field_default(variable.field)


def _field_default(field: str) -> Any:
    for candidate in dataclasses.fields(Settings):
        if candidate.name == field:
            if candidate.default is dataclasses.MISSING:
                raise LookupError(f"Settings.{field} has no default")
            return candidate.default
    raise LookupError(f"Settings has no field {field!r}")


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _url(reading: _Reading, variable: Variable) -> str:
    name = variable.name
    url = reading.text(name).rstrip("/")
    if not url:
        reading.problems.append(f"{name} is not set: give the base URL of Open WebUI, e.g. http://localhost:8080")
        return url
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if "@" in parts.netloc:
        # httpx would send these as Basic auth in place of the API key, and log them at DEBUG.
        reading.problems.append(f"{name} must not contain user:password@; the API key is the credential")
    elif parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        reading.problems.append(f"{name} must look like http(s)://host[:port][/prefix], got {url!r}")
    elif parts.query or parts.fragment:
        reading.problems.append(f"{name} must not contain a query string or fragment")
    return url


def _public_url(reading: _Reading, variable: Variable) -> str:
    # Optional; when given, it must be an address a browser can open, checked as OPENWEBUI_URL is.
    return _url(reading, variable) if reading.text(variable.name) else ""


def _per_caller_http(reading: _Reading) -> bool:
    """Serving HTTP with each caller's own credential: no key of the server's own is needed."""
    transport = reading.text("OPENWEBUI_MCP_TRANSPORT") or "stdio"
    return transport == "streamable-http" and (reading.text("OPENWEBUI_MCP_AUTH") or "caller") == "caller"


def _api_key(reading: _Reading, variable: Variable) -> SecretStr:
    name = variable.name
    api_key = reading.text(name)
    if not api_key and _per_caller_http(reading):
        return SecretStr("")
    if not api_key:
        reading.problems.append(f"{name} is not set: create one in Open WebUI under Settings > Account > API keys")
    elif any(c.isspace() for c in api_key):
        reading.problems.append(f"{name} contains whitespace; copy the key (sk-...) without spaces or newlines")
    elif not (api_key.isascii() and api_key.isprintable()):
        reading.problems.append(f"{name} contains non-ASCII or control characters; copy the key (sk-...) again")
    return SecretStr(api_key)


def _number(name: str, field: str, meaning: str, minimum: float, maximum: float | None, *, integer: bool) -> Variable:
    """A number variable; its bounds are added to its meaning."""
    bound = f"{minimum:g} to {maximum:g}" if maximum is not None else f"at least {minimum:g}"

    def read(reading: _Reading, variable: Variable) -> float:
        default: float = _default_of(variable)
        raw = reading.text(name)
        if not raw:
            return default
        try:
            value = int(raw) if integer else float(raw)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            reading.problems.append(f"{name} must be {kind}, got {raw!r}")
            return default
        if not math.isfinite(value) or value < minimum or (maximum is not None and value > maximum):
            between = f"between {minimum:g} and {maximum:g}" if maximum is not None else f"at least {minimum:g}"
            reading.problems.append(f"{name} must be {between}, got {raw}")
            return default
        return value

    return Variable(name, field, f"{meaning}, {bound}", read)


def _flag_value(reading: _Reading, name: str, default: bool) -> bool:
    raw = reading.text(name).lower()
    if not raw:
        return default
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS:
        return False
    reading.problems.append(f"{name} must be true or false, got {reading.text(name)!r}")
    return default


def _flag(reading: _Reading, variable: Variable) -> bool:
    return _flag_value(reading, variable.name, bool(_default_of(variable)))


def _allow_create(reading: _Reading, variable: Variable) -> bool:
    # Without an allowlist creating is allowed; with one, only when asked for.
    return _flag_value(reading, variable.name, reading.values["knowledge_ids"] is None)


def _log_level(reading: _Reading, variable: Variable) -> str:
    name = variable.name
    log_level = reading.text(name).upper() or str(_default_of(variable))
    if log_level not in _LOG_LEVELS:
        reading.problems.append(f"{name} must be one of {', '.join(_LOG_LEVELS)}, got {reading.text(name)!r}")
    return log_level


def _names(reading: _Reading, name: str) -> list[str]:
    return [part.strip() for part in reading.text(name).split(",") if part.strip()]


def _knowledge_ids(reading: _Reading, variable: Variable) -> tuple[str, ...] | None:
    name = variable.name
    if not reading.text(name):
        return None
    knowledge_ids = tuple(dict.fromkeys(_names(reading, name)))
    bad = [i for i in knowledge_ids if not ID_PATTERN.fullmatch(i)]
    if bad:
        reading.problems.append(f"{name} holds ids that are not Open WebUI ids: {', '.join(bad)}")
    if not knowledge_ids:
        reading.problems.append(f"{name} is set but names no knowledge base")
    return knowledge_ids


def _disabled_tools(reading: _Reading, variable: Variable) -> frozenset[str]:
    name = variable.name
    disabled_tools = frozenset(_names(reading, name))
    unknown = sorted(disabled_tools - set(ALL_TOOLS))
    if unknown:
        reading.problems.append(f"{name} names unknown tools {', '.join(unknown)}; known: {', '.join(ALL_TOOLS)}")
    return disabled_tools


def _choice(*options: str) -> Rule:
    def read(reading: _Reading, variable: Variable) -> str:
        raw = reading.text(variable.name) or str(_default_of(variable))
        if raw not in options:
            reading.problems.append(f"{variable.name} must be one of {', '.join(options)}, got {raw!r}")
        return raw

    return read


def _text(reading: _Reading, variable: Variable) -> str:
    return reading.text(variable.name) or str(_default_of(variable))


def _list(reading: _Reading, variable: Variable) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_names(reading, variable.name)))


def _networks(reading: _Reading, variable: Variable) -> tuple[str, ...]:
    given = _list(reading, variable)
    if not given:
        return tuple(_default_of(variable))
    bad = []
    for entry in given:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            bad.append(entry)
    if bad:
        reading.problems.append(
            f"{variable.name} must list IP addresses or networks (CIDR, e.g. 10.0.0.0/8), got {', '.join(bad)}"
        )
    return given


SERVICE_TOKEN_MIN_CHARS = 16


def _service_tokens(reading: _Reading, variable: Variable) -> tuple[SecretStr, ...]:
    name = variable.name
    tokens = _names(reading, name)
    service = reading.values.get("transport") == "streamable-http" and reading.values.get("auth_mode") == "service"
    if service and not tokens:
        reading.problems.append(
            f"{name} is not set: in service mode (OPENWEBUI_MCP_AUTH=service) callers authenticate with one of these "
            "bearer tokens"
        )
    short = sum(1 for token in tokens if len(token) < SERVICE_TOKEN_MIN_CHARS or not token.isascii())
    if short:
        reading.problems.append(
            f"{name} holds {short} token(s) shorter than {SERVICE_TOKEN_MIN_CHARS} ASCII characters; use long random "
            "tokens (e.g. openssl rand -hex 32)"
        )
    return tuple(SecretStr(token) for token in tokens)


def _allow_url_adds(reading: _Reading, variable: Variable) -> bool:
    # In service mode a page would be fetched with the operator's key for callers who hold no Open WebUI account.
    service = reading.values.get("transport") == "streamable-http" and reading.values.get("auth_mode") == "service"
    return _flag_value(reading, variable.name, not service)


def _redis_url(reading: _Reading, variable: Variable) -> SecretStr | None:
    raw = reading.text(variable.name)
    if not raw:
        return None
    if urlsplit(raw).scheme not in ("redis", "rediss", "unix"):
        reading.problems.append(f"{variable.name} must be a redis://, rediss:// or unix:// URL")
    elif importlib.util.find_spec("redis") is None:
        reading.problems.append(
            f"{variable.name} is set but the redis package is missing: pip install 'openwebui-rag-mcp[redis]'"
        )
    return SecretStr(raw)


# Never an upload directory: their files are the system's, not documents (/proc/self/environ holds the API key),
# and many are pseudo-files or devices.
_SYSTEM_DIRS = ("/proc", "/sys", "/dev")


def _upload_dirs(reading: _Reading, variable: Variable) -> tuple[str, ...]:
    dirs: list[str] = []
    for raw in _names(reading, variable.name):
        resolved = os.path.realpath(os.path.expanduser(raw))
        if resolved == "/" or any(resolved == system or resolved.startswith(f"{system}/") for system in _SYSTEM_DIRS):
            reading.problems.append(
                f"{variable.name} names {raw!r}, a system directory (/, or /proc, /sys, /dev or a directory in them); "
                "list the directories that hold your documents"
            )
        elif not os.path.isdir(resolved):
            reading.problems.append(f"{variable.name} names {raw!r}, which is not a directory")
        dirs.append(resolved)
    return tuple(dict.fromkeys(dirs))


# In the order problems are reported. A new variable gets a row here, in docs/configuration.md's table and in
# .env.example (tests/test_config_docs.py checks that they agree), and in server.json (python -m devtools.server_json).
VARIABLES: tuple[Variable, ...] = (
    Variable("OPENWEBUI_URL", "url", "base URL of Open WebUI, http(s)://host[:port][/prefix]", _url, note="required"),
    Variable("OPENWEBUI_API_KEY", "api_key", "API key, sk-...", _api_key, note="required"),
    Variable(
        "OPENWEBUI_PUBLIC_URL",
        "public_url",
        "the address people open Open WebUI at, for the links in search results (when OPENWEBUI_URL is internal)",
        _public_url,
        note="stdio: OPENWEBUI_URL; HTTP: no links",
    ),
    _number("OPENWEBUI_TIMEOUT", "timeout", "seconds per HTTP request", 1.0, 3600.0, integer=False),
    Variable("OPENWEBUI_VERIFY_TLS", "verify_tls", "verify TLS certificates", _flag),
    _number("RAG_TOP_K", "top_k", "default number of search results", 1, TOP_K_MAX, integer=True),
    _number(
        "RAG_CHUNK_MAX_CHARS", "chunk_max_chars", "characters per search result", CHUNK_CHARS_MIN, None, integer=True
    ),
    _number(
        "RAG_FILE_MAX_CHARS",
        "file_max_chars",
        "characters per knowledge_get_file answer",
        FILE_CHARS_MIN,
        None,
        integer=True,
    ),
    _number(
        "OPENWEBUI_PROCESS_TIMEOUT",
        "process_timeout",
        "seconds to wait for Open WebUI to index an added document",
        1.0,
        86_400.0,
        integer=False,
    ),
    Variable("OPENWEBUI_LOG_LEVEL", "log_level", "DEBUG, INFO, WARNING or ERROR; logs go to stderr", _log_level),
    Variable(
        "OPENWEBUI_KNOWLEDGE_IDS",
        "knowledge_ids",
        "comma-separated knowledge ids: the only bases the server touches",
        _knowledge_ids,
        note="unset: every base the key can read",
    ),
    Variable(
        "OPENWEBUI_ALLOW_CREATE",
        "allow_create",
        "whether knowledge_create may create bases",
        _allow_create,
        note="true, or false when OPENWEBUI_KNOWLEDGE_IDS is set",
    ),
    Variable(
        "OPENWEBUI_ALLOW_DELETE_BASE",
        "allow_delete_base",
        "true: offer knowledge_delete_base (a whole base the key's user created, confirmed by its name)",
        _flag,
    ),
    Variable(
        "OPENWEBUI_HYBRID_SEARCH",
        "hybrid_search",
        "true: Open WebUI runs hybrid search (its ENABLE_RAG_HYBRID_SEARCH is on), so list knowledge_search's hybrid, "
        "bm25_weight and k_reranker",
        _flag,
    ),
    Variable("OPENWEBUI_READ_ONLY", "read_only", "true: register only the read tools", _flag),
    Variable(
        "OPENWEBUI_DISABLED_TOOLS",
        "disabled_tools",
        "comma-separated tool names (aliases included) to leave out",
        _disabled_tools,
        note="empty",
    ),
    Variable(
        "OPENWEBUI_MCP_TRANSPORT",
        "transport",
        "stdio, or streamable-http to serve many callers at /mcp (the --transport option wins)",
        _choice("stdio", "streamable-http"),
    ),
    Variable("OPENWEBUI_MCP_HOST", "host", "address the HTTP transport listens on (--host wins)", _text),
    _number("OPENWEBUI_MCP_PORT", "port", "port of the HTTP transport (--port wins)", 1, 65_535, integer=True),
    Variable(
        "OPENWEBUI_MCP_AUTH",
        "auth_mode",
        "HTTP: caller (each request's own Open WebUI key or token is used) or service (OPENWEBUI_API_KEY for "
        "everyone, callers admitted by OPENWEBUI_MCP_TOKENS)",
        _choice("caller", "service"),
    ),
    Variable(
        "OPENWEBUI_MCP_TOKENS",
        "service_tokens",
        "HTTP service mode: comma-separated bearer tokens callers must present",
        _service_tokens,
        note="empty",
    ),
    Variable(
        "OPENWEBUI_MCP_ALLOWED_HOSTS",
        "allowed_hosts",
        "HTTP: Host header values accepted besides loopback, e.g. mcp.example.com (behind a reverse proxy)",
        _list,
        note="loopback only",
    ),
    Variable(
        "OPENWEBUI_MCP_ALLOWED_ORIGINS",
        "allowed_origins",
        "HTTP: Origin header values accepted besides loopback, e.g. https://chat.example.com",
        _list,
        note="loopback only",
    ),
    Variable(
        "OPENWEBUI_MCP_TRUSTED_PROXIES",
        "trusted_proxies",
        "HTTP: comma-separated addresses or networks (CIDR) of front ends whose X-Forwarded-For names the client",
        _networks,
    ),
    _number(
        "OPENWEBUI_MCP_MAX_BODY_BYTES",
        "max_body_bytes",
        "HTTP: largest request body (2,000,000 CJK characters of knowledge_add text are about 6 MB, 12 MB escaped)",
        1_048_576,
        268_435_456,
        integer=True,
    ),
    Variable(
        "REDIS_URL",
        "redis_url",
        "HTTP with several replicas: Redis for write locks shared by all of them (needs the [redis] extra)",
        _redis_url,
        note="unset: locks per process",
    ),
    _number(
        "OPENWEBUI_MCP_LEASE_SECONDS",
        "lease_seconds",
        "with REDIS_URL: how long a dead replica's write lock on a base outlives it (renewed every third while held)",
        3.0,
        600.0,
        integer=False,
    ),
    Variable(
        "OPENWEBUI_UPLOAD_DIRS",
        "upload_dirs",
        "comma-separated directories knowledge_add_file may read local files from (stdio only)",
        _upload_dirs,
        note="none: only content_base64",
    ),
    _number(
        "OPENWEBUI_UPLOAD_MAX_BYTES",
        "upload_max_bytes",
        "largest file knowledge_add_file sends to Open WebUI, in bytes",
        1,
        1_073_741_824,
        integer=True,
    ),
    Variable(
        "OPENWEBUI_ALLOW_URL_ADDS",
        "allow_url_adds",
        "whether knowledge_add_file may have Open WebUI fetch a web page (url)",
        _allow_url_adds,
        note="true, or false in HTTP service mode",
    ),
    Variable(
        "OPENWEBUI_URL_ALLOW_PRIVATE",
        "url_allow_private",
        "true: knowledge_add_file's url may be, or resolve to, a loopback, private, link-local or other non-public "
        "address",
        _flag,
    ),
    Variable(
        "RAG_SCORE_THRESHOLD",
        None,
        "no longer used; ignored with a warning",
        None,
        note="retired",
        retired_warning=(
            "RAG_SCORE_THRESHOLD is no longer used and is ignored: scores mean different things in different "
            "Open WebUI retrieval modes; set a relevance threshold in Open WebUI's own settings instead"
        ),
    ),
)


def variables_help(columns: int = 100) -> str:
    """The variables for `--help`: name, meaning, (default); a line longer than `columns` goes on indented."""
    width = max(len(variable.name) for variable in VARIABLES)
    indent = " " * (width + 4)
    return "\n".join(
        textwrap.fill(
            f"{v.meaning} ({v.default})",
            columns,
            initial_indent=f"  {v.name:<{width}}  ",
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
        for v in VARIABLES
    )


def load_settings(environ: Mapping[str, str]) -> Settings:
    """Read and validate the configuration from `environ`; raise `ConfigError` listing every problem."""
    reading = _Reading(environ)
    warnings: list[str] = []
    for variable in VARIABLES:
        if variable.field is None or variable.read is None:
            if variable.name in environ:
                warnings.append(variable.retired_warning)
            continue
        reading.values[variable.field] = variable.read(reading, variable)
    if reading.problems:
        raise ConfigError(reading.problems)
    return Settings(**reading.values, warnings=tuple(warnings))
