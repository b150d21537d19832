"""Configuration: defaults, every invalid value reported on its own line, and the console script's exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openwebui_rag_mcp import __version__
from openwebui_rag_mcp.config import ConfigError, load_settings
from tests.conftest import API_KEY

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
VALID = {"OPENWEBUI_URL": "http://localhost:8080", "OPENWEBUI_API_KEY": API_KEY}
ALL_VARIABLES = (
    "OPENWEBUI_URL",
    "OPENWEBUI_API_KEY",
    "OPENWEBUI_TIMEOUT",
    "OPENWEBUI_VERIFY_TLS",
    "RAG_TOP_K",
    "RAG_CHUNK_MAX_CHARS",
    "RAG_FILE_MAX_CHARS",
    "OPENWEBUI_LOG_LEVEL",
)


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


def test_script_help_mentions_every_variable() -> None:
    result = run_script("--help", env={})
    assert result.returncode == 0
    text = result.stdout.decode()
    for variable in ALL_VARIABLES:
        assert variable in text, variable


@pytest.mark.parametrize("key", ["sk-abcé123", "sk-abc\x00def", "sk-ѕ123"])
def test_a_key_that_cannot_be_an_http_header_is_a_configuration_error(key: str) -> None:
    """httpx cannot encode it: without this check the server would crash at start instead of exiting 2."""
    with pytest.raises(ConfigError) as caught:
        load_settings({"OPENWEBUI_URL": "http://owui.test", "OPENWEBUI_API_KEY": key})
    assert caught.value.problems == [
        "OPENWEBUI_API_KEY contains non-ASCII or control characters; copy the key (sk-...) again"
    ]
