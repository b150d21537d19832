"""Configuration: defaults, every invalid value reported on its own line, and the console script's exits."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openwebui_rag_mcp import __version__
from openwebui_rag_mcp.config import (
    ALIASES,
    ALL_TOOLS,
    READ_TOOLS,
    VARIABLES,
    WRITE_TOOLS,
    ConfigError,
    Settings,
    Variable,
    load_settings,
    variables_help,
)
from tests.conftest import API_KEY

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
VALID = {"OPENWEBUI_URL": "http://localhost:8080", "OPENWEBUI_API_KEY": API_KEY}


def problems_of(environ: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ)
    return caught.value.problems


def test_defaults() -> None:
    settings = load_settings(VALID)
    assert settings.url == "http://localhost:8080"
    assert settings.api_key.get_secret_value() == API_KEY
    assert settings.timeout == 120.0
    assert settings.verify_tls is True
    assert settings.top_k == 8
    assert settings.chunk_max_chars == 4_000
    assert settings.file_max_chars == 100_000
    assert settings.log_level == "WARNING"
    assert settings.warnings == ()


def test_key_is_hidden_in_repr() -> None:
    assert API_KEY not in repr(load_settings(VALID))


def test_explicit_values_are_read() -> None:
    settings = load_settings(
        {
            **VALID,
            "OPENWEBUI_TIMEOUT": "2.5",
            "OPENWEBUI_VERIFY_TLS": "off",
            "RAG_TOP_K": "50",
            "RAG_CHUNK_MAX_CHARS": "100",
            "RAG_FILE_MAX_CHARS": "1000",
            "OPENWEBUI_LOG_LEVEL": "debug",
        }
    )
    assert settings.timeout == 2.5
    assert settings.verify_tls is False
    assert settings.top_k == 50
    assert settings.chunk_max_chars == 100
    assert settings.file_max_chars == 1000
    assert settings.log_level == "DEBUG"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://localhost:8080/", "http://localhost:8080"),
        ("http://localhost:8080///", "http://localhost:8080"),
        ("https://chat.example.com/owui/", "https://chat.example.com/owui"),
        ("https://chat.example.com/owui", "https://chat.example.com/owui"),
        ("  http://10.0.0.5:3000  ", "http://10.0.0.5:3000"),
    ],
)
def test_url_is_normalised_and_prefix_kept(raw: str, expected: str) -> None:
    assert load_settings({**VALID, "OPENWEBUI_URL": raw}).url == expected


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("yes", True), ("TRUE", True), ("0", False), ("no", False)])
def test_verify_tls_words(raw: str, expected: bool) -> None:
    assert load_settings({**VALID, "OPENWEBUI_VERIFY_TLS": raw}).verify_tls is expected


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"OPENWEBUI_URL": ""}, "OPENWEBUI_URL"),
        ({"OPENWEBUI_URL": "   "}, "OPENWEBUI_URL"),
        ({"OPENWEBUI_URL": "ftp://owui.example"}, "OPENWEBUI_URL"),
        ({"OPENWEBUI_URL": "localhost:8080"}, "OPENWEBUI_URL"),
        ({"OPENWEBUI_URL": "http://"}, "OPENWEBUI_URL"),
        ({"OPENWEBUI_URL": "http://owui.example/?x=1"}, "OPENWEBUI_URL"),
        ({"OPENWEBUI_API_KEY": ""}, "OPENWEBUI_API_KEY"),
        ({"OPENWEBUI_API_KEY": "sk-abc def"}, "OPENWEBUI_API_KEY"),
        ({"OPENWEBUI_API_KEY": "sk-abc\tdef"}, "OPENWEBUI_API_KEY"),
        ({"OPENWEBUI_TIMEOUT": "soon"}, "OPENWEBUI_TIMEOUT"),
        ({"OPENWEBUI_TIMEOUT": "0"}, "OPENWEBUI_TIMEOUT"),
        ({"OPENWEBUI_TIMEOUT": "-5"}, "OPENWEBUI_TIMEOUT"),
        ({"OPENWEBUI_TIMEOUT": "3601"}, "OPENWEBUI_TIMEOUT"),
        ({"OPENWEBUI_TIMEOUT": "inf"}, "OPENWEBUI_TIMEOUT"),
        ({"RAG_TOP_K": "0"}, "RAG_TOP_K"),
        ({"RAG_TOP_K": "51"}, "RAG_TOP_K"),
        ({"RAG_TOP_K": "eight"}, "RAG_TOP_K"),
        ({"RAG_TOP_K": "8.5"}, "RAG_TOP_K"),
        ({"RAG_CHUNK_MAX_CHARS": "99"}, "RAG_CHUNK_MAX_CHARS"),
        ({"RAG_FILE_MAX_CHARS": "999"}, "RAG_FILE_MAX_CHARS"),
        ({"OPENWEBUI_VERIFY_TLS": "maybe"}, "OPENWEBUI_VERIFY_TLS"),
        ({"OPENWEBUI_LOG_LEVEL": "LOUD"}, "OPENWEBUI_LOG_LEVEL"),
        ({"OPENWEBUI_LOG_LEVEL": "TRACE"}, "OPENWEBUI_LOG_LEVEL"),
    ],
)
def test_each_invalid_value_gives_one_problem_naming_the_variable(changes: dict[str, str], variable: str) -> None:
    problems = problems_of({**VALID, **changes})
    assert len(problems) == 1, problems
    assert variable in problems[0]
    assert "\n" not in problems[0]


def test_missing_url_and_key_are_reported_when_absent_from_the_environment() -> None:
    problems = problems_of({})
    assert len(problems) == 2
    assert "OPENWEBUI_URL" in problems[0]
    assert "OPENWEBUI_API_KEY" in problems[1]


@pytest.mark.parametrize("raw", ["nan", "NaN"])
def test_timeout_not_a_number_is_refused(raw: str) -> None:
    # float("nan") parses, and NaN compares false with both bounds: it must still be refused.
    problems = problems_of({**VALID, "OPENWEBUI_TIMEOUT": raw})
    assert len(problems) == 1
    assert "OPENWEBUI_TIMEOUT" in problems[0]


@pytest.mark.parametrize("url", ["http://owui.example:notaport", "http://owui.example:99999"])
def test_url_with_an_invalid_port_is_refused(url: str) -> None:
    # httpx refuses such a URL only later, when the server starts its client: a crash instead of exit code 2.
    problems = problems_of({**VALID, "OPENWEBUI_URL": url})
    assert len(problems) == 1
    assert "OPENWEBUI_URL" in problems[0]


def test_several_problems_are_reported_together() -> None:
    problems = problems_of(
        {
            "OPENWEBUI_URL": "ftp://x",
            "OPENWEBUI_API_KEY": "sk-a b",
            "OPENWEBUI_TIMEOUT": "x",
            "RAG_TOP_K": "51",
            "OPENWEBUI_VERIFY_TLS": "perhaps",
            "OPENWEBUI_LOG_LEVEL": "LOUD",
        }
    )
    named = ["OPENWEBUI_URL", "OPENWEBUI_API_KEY", "OPENWEBUI_TIMEOUT", "RAG_TOP_K", "OPENWEBUI_VERIFY_TLS"]
    assert len(problems) == len(named) + 1
    for variable in [*named, "OPENWEBUI_LOG_LEVEL"]:
        assert sum(variable in problem for problem in problems) == 1, (variable, problems)


def test_problems_never_show_the_key() -> None:
    problems = problems_of({**VALID, "OPENWEBUI_API_KEY": API_KEY + " trailing-word", "RAG_TOP_K": "0"})
    assert len(problems) == 2
    assert all(API_KEY not in problem for problem in problems)


def test_every_problem_message_and_their_order() -> None:
    """The exact lines a user sees, in the order of the declarations: these are what docs/configuration.md quotes."""
    problems = problems_of(
        {
            "OPENWEBUI_URL": "http://user:pw@owui.example",
            "OPENWEBUI_API_KEY": "sk-a\nb",
            "OPENWEBUI_TIMEOUT": "soon",
            "OPENWEBUI_VERIFY_TLS": "Maybe",
            "RAG_TOP_K": "99",
            "RAG_CHUNK_MAX_CHARS": "1.5",
            "RAG_FILE_MAX_CHARS": "10",
            "OPENWEBUI_PROCESS_TIMEOUT": "inf",
            "OPENWEBUI_LOG_LEVEL": "Loud",
            "OPENWEBUI_KNOWLEDGE_IDS": "good-id,bad/id",
            "OPENWEBUI_ALLOW_CREATE": "perhaps",
            "OPENWEBUI_READ_ONLY": "2",
            "OPENWEBUI_DISABLED_TOOLS": "knowledge_search,nope",
        }
    )
    assert problems == [
        "OPENWEBUI_URL must not contain user:password@; the API key is the credential",
        "OPENWEBUI_API_KEY contains whitespace; copy the key (sk-...) without spaces or newlines",
        "OPENWEBUI_TIMEOUT must be a number, got 'soon'",
        "OPENWEBUI_VERIFY_TLS must be true or false, got 'Maybe'",
        "RAG_TOP_K must be between 1 and 50, got 99",
        "RAG_CHUNK_MAX_CHARS must be a whole number, got '1.5'",
        "RAG_FILE_MAX_CHARS must be at least 1000, got 10",
        "OPENWEBUI_PROCESS_TIMEOUT must be between 1 and 86400, got inf",
        "OPENWEBUI_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, got 'Loud'",
        "OPENWEBUI_KNOWLEDGE_IDS holds ids that are not Open WebUI ids: bad/id",
        "OPENWEBUI_ALLOW_CREATE must be true or false, got 'perhaps'",
        "OPENWEBUI_READ_ONLY must be true or false, got '2'",
        f"OPENWEBUI_DISABLED_TOOLS names unknown tools nope; known: {', '.join(ALL_TOOLS)}",
    ]


def test_missing_url_and_key_and_an_empty_allowlist_messages() -> None:
    assert problems_of({"OPENWEBUI_KNOWLEDGE_IDS": " , "}) == [
        "OPENWEBUI_URL is not set: give the base URL of Open WebUI, e.g. http://localhost:8080",
        "OPENWEBUI_API_KEY is not set: create one in Open WebUI under Settings > Account > API keys",
        "OPENWEBUI_KNOWLEDGE_IDS is set but names no knowledge base",
    ]


SYSTEM_DIRECTORY = "a system directory (/, or /proc, /sys, /dev or a directory in them)"


@pytest.mark.parametrize("raw", ["/", "/proc", "/proc/self", "/sys", "/sys/kernel", "/dev", "/dev/shm", "/tmp/../dev"])
def test_system_directories_are_never_upload_directories(raw: str, tmp_path: Path) -> None:
    """Their files are pseudo-files and devices, and /proc/self/environ holds the API key."""
    problems = problems_of({**VALID, "OPENWEBUI_UPLOAD_DIRS": f"{tmp_path},{raw}"})
    assert problems == [
        f"OPENWEBUI_UPLOAD_DIRS names {raw!r}, {SYSTEM_DIRECTORY}; list the directories that hold your documents"
    ]


def test_a_link_to_a_system_directory_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "docs").symlink_to("/proc", target_is_directory=True)
    problems = problems_of({**VALID, "OPENWEBUI_UPLOAD_DIRS": str(tmp_path / "docs")})
    assert len(problems) == 1
    assert SYSTEM_DIRECTORY in problems[0]


def test_directories_that_only_look_like_system_ones_are_allowed(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "devices").mkdir()
    settings = load_settings({**VALID, "OPENWEBUI_UPLOAD_DIRS": f"{tmp_path / 'proc'},{tmp_path / 'devices'}"})
    assert settings.upload_dirs == (str(tmp_path.resolve() / "proc"), str(tmp_path.resolve() / "devices"))


def test_script_exits_2_for_a_system_upload_directory() -> None:
    result = run_script(env={**VALID, "OPENWEBUI_UPLOAD_DIRS": "/proc"})
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        "openwebui-rag-mcp: configuration error: OPENWEBUI_UPLOAD_DIRS names '/proc', "
        f"{SYSTEM_DIRECTORY}; list the directories that hold your documents"
    ]


def test_every_settings_field_is_declared_by_exactly_one_variable() -> None:
    names = [variable.name for variable in VARIABLES]
    assert len(names) == len(set(names))
    fields = [variable.field for variable in VARIABLES if variable.field is not None]
    assert sorted(fields) == sorted(
        f.name for f in dataclasses.fields(Settings) if f.name not in ("warnings", "timings")
    )


@pytest.mark.parametrize("variable", [v for v in VARIABLES if v.has_value_default], ids=lambda v: v.name)
def test_the_default_shown_is_the_default_used(variable: Variable) -> None:
    # Setting a variable to the default that --help, README and .env.example show changes nothing.
    assert load_settings({**VALID, variable.name: variable.default}) == load_settings(VALID)


def test_defaults_that_are_not_one_value() -> None:
    shown = {variable.name: variable.default for variable in VARIABLES if not variable.has_value_default}
    assert shown == {
        "OPENWEBUI_URL": "required",
        "OPENWEBUI_API_KEY": "required",
        "OPENWEBUI_PUBLIC_URL": "stdio: OPENWEBUI_URL; HTTP: no links",
        "OPENWEBUI_KNOWLEDGE_IDS": "unset: every base the key can read",
        "OPENWEBUI_ALLOW_CREATE": "true, or false when OPENWEBUI_KNOWLEDGE_IDS is set",
        "OPENWEBUI_DISABLED_TOOLS": "empty",
        "OPENWEBUI_MCP_TOKENS": "empty",
        "OPENWEBUI_MCP_ALLOWED_HOSTS": "loopback only",
        "OPENWEBUI_MCP_ALLOWED_ORIGINS": "loopback only",
        "REDIS_URL": "unset: locks per process",
        "OPENWEBUI_UPLOAD_DIRS": "none: only content_base64",
        "OPENWEBUI_ALLOW_URL_ADDS": "true, or false in HTTP service mode",
        "RAG_SCORE_THRESHOLD": "retired",
    }
    assert load_settings(VALID).knowledge_ids is None
    assert load_settings(VALID).allow_create is True
    assert load_settings({**VALID, "OPENWEBUI_KNOWLEDGE_IDS": "kb-1"}).allow_create is False
    assert load_settings({**VALID, "OPENWEBUI_KNOWLEDGE_IDS": "kb-1", "OPENWEBUI_ALLOW_CREATE": "1"}).allow_create
    assert load_settings(VALID).disabled_tools == frozenset()


# -- which tools are registered ---------------------------------------------------------------------------------


def test_tool_enabled_applies_only_the_disabled_tools() -> None:
    settings = load_settings({**VALID, "OPENWEBUI_DISABLED_TOOLS": "rag_search, knowledge_delete ,knowledge_list"})
    assert settings.disabled_tools == {"rag_search", "knowledge_delete", "knowledge_list"}
    assert [name for name in ALL_TOOLS if not settings.tool_enabled(name)] == [
        "knowledge_list",
        "knowledge_delete",
        "rag_search",
    ]


def test_tool_enabled_leaves_read_only_to_the_server() -> None:
    # OPENWEBUI_READ_ONLY is read into `read_only`; which tools it drops follows from their annotations
    # (server/table.py).
    settings = load_settings({**VALID, "OPENWEBUI_READ_ONLY": "true", "OPENWEBUI_DISABLED_TOOLS": "rag_health"})
    assert settings.read_only is True
    assert load_settings(VALID).read_only is False
    assert all(settings.tool_enabled(name) for name in ALL_TOOLS if name != "rag_health")
    assert not settings.tool_enabled("rag_health")


def test_tool_names_are_the_read_and_write_tools_and_their_aliases() -> None:
    assert (*READ_TOOLS, *WRITE_TOOLS, *ALIASES) == ALL_TOOLS
    assert len(set(ALL_TOOLS)) == len(ALL_TOOLS)
    assert set(ALIASES.values()) <= set(READ_TOOLS)


def test_score_threshold_is_ignored_with_a_warning() -> None:
    settings = load_settings({**VALID, "RAG_SCORE_THRESHOLD": "0.7"})
    assert len(settings.warnings) == 1
    assert "RAG_SCORE_THRESHOLD" in settings.warnings[0]
    assert not hasattr(settings, "score_threshold")


# -- the console script -----------------------------------------------------------------------------------------


def run_script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """Run the installed console script with exactly `env` (plus PATH), stdin closed."""
    assert SCRIPT.exists(), f"console script not installed next to {sys.executable}"
    scrubbed = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1", **env}
    return subprocess.run(
        [str(SCRIPT), *args], env=scrubbed, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False
    )


def test_script_invalid_config_exits_2_with_one_stderr_line_per_problem() -> None:
    result = run_script(env={"OPENWEBUI_URL": "ftp://x", "OPENWEBUI_API_KEY": "sk-a b", "RAG_TOP_K": "0"})
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 3, lines
    assert "OPENWEBUI_URL" in lines[0]
    assert "OPENWEBUI_API_KEY" in lines[1]
    assert "RAG_TOP_K" in lines[2]
    assert all("Traceback" not in line for line in lines)


def test_script_without_any_configuration_exits_2() -> None:
    result = run_script(env={})
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 2
    assert "OPENWEBUI_URL" in lines[0]
    assert "OPENWEBUI_API_KEY" in lines[1]


def test_script_version() -> None:
    result = run_script("--version", env={})
    assert result.returncode == 0
    assert __version__ in result.stdout.decode()


def test_script_help_lists_the_declared_variables() -> None:
    # Which variables the list holds, and that docs/configuration.md and .env.example agree: tests/test_config_docs.py.
    result = run_script("--help", env={})
    assert result.returncode == 0
    assert result.stderr == b""
    assert variables_help() in result.stdout.decode()


@pytest.mark.parametrize("key", ["sk-abcé123", "sk-abc\x00def", "sk-ѕ123"])
def test_a_key_that_cannot_be_an_http_header_is_a_configuration_error(key: str) -> None:
    """httpx cannot encode it: without this check the server would crash at start instead of exiting 2."""
    with pytest.raises(ConfigError) as caught:
        load_settings({"OPENWEBUI_URL": "http://owui.test", "OPENWEBUI_API_KEY": key})
    assert caught.value.problems == [
        "OPENWEBUI_API_KEY contains non-ASCII or control characters; copy the key (sk-...) again"
    ]
