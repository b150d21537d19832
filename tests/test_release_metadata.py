"""What a release says about itself agrees everywhere: server.json is valid against the MCP Registry's schema and
lists every environment variable the server reads; the package name and version are the same in pyproject.toml,
server.json, the package and CHANGELOG.md's top release; README.md carries the registry's `mcp-name:` marker."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from devtools import server_json
from openwebui_rag_mcp import __version__
from openwebui_rag_mcp.config import VARIABLES

ROOT = Path(__file__).resolve().parent.parent
# The registry's published schema, vendored: see tests/fixtures/mcp_registry/README.md for its source and version.
SCHEMA_FILE = ROOT / "tests" / "fixtures" / "mcp_registry" / "server.schema.json"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SERVED = {variable.name: variable for variable in VARIABLES if variable.field is not None}  # retired ones left out


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def validator() -> Draft7Validator:
    return Draft7Validator(load(SCHEMA_FILE), format_checker=Draft7Validator.FORMAT_CHECKER)


def server() -> dict[str, Any]:
    document: dict[str, Any] = load(ROOT / "server.json")
    return document


def package() -> dict[str, Any]:
    packages = server()["packages"]
    assert len(packages) == 1
    only: dict[str, Any] = packages[0]
    return only


# -- server.json against the registry's schema -------------------------------------------------------------------


def test_server_json_is_valid_against_the_vendored_registry_schema() -> None:
    errors = [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator().iter_errors(server())
    ]
    assert errors == []


def test_server_json_names_the_schema_that_is_vendored() -> None:
    assert server()["$schema"] == load(SCHEMA_FILE)["$id"] == server_json.SCHEMA
    assert server_json.SCHEMA in (SCHEMA_FILE.parent / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda d: d.update(description="x" * 101), "is too long"),
        (lambda d: d.update(name="no-slash"), "does not match"),
        (lambda d: d.pop("version"), "'version' is a required property"),
        (lambda d: d["packages"][0].update(version="latest"), "should not be valid"),
        (lambda d: d["packages"][0].pop("transport"), "'transport' is a required property"),
    ],
    ids=["long description", "name", "no version", "version latest", "no transport"],
)
def test_the_schema_refuses_what_the_registry_refuses(change: Any, complaint: str) -> None:
    broken = copy.deepcopy(server())
    change(broken)
    messages = [error.message for error in validator().iter_errors(broken)]
    assert any(complaint in message for message in messages), messages


def test_server_json_is_current() -> None:
    assert (ROOT / "server.json").read_text(encoding="utf-8") == server_json.render(), (
        "server.json is stale: run python -m devtools.server_json"
    )


def test_server_json_lists_every_variable_the_server_reads_required_and_secret_ones_marked() -> None:
    entries = {entry["name"]: entry for entry in package()["environmentVariables"]}
    assert list(entries) == list(SERVED)
    required = {name for name, entry in entries.items() if entry.get("isRequired")}
    assert required == {name for name, variable in SERVED.items() if variable.default == "required"}
    assert required == {"OPENWEBUI_URL", "OPENWEBUI_API_KEY"}
    assert entries["OPENWEBUI_API_KEY"]["isSecret"] is True
    for name, entry in entries.items():
        assert "value" not in entry, name  # a fixed value could not be configured by users
        if SERVED[name].has_value_default:
            assert entry["default"] == SERVED[name].default, name
        else:
            assert "default" not in entry, name


def test_server_json_offers_the_pypi_package_over_stdio() -> None:
    assert package()["registryType"] == "pypi"
    assert package()["identifier"] == PYPROJECT["project"]["name"] == "openwebui-rag-mcp"
    assert package()["transport"] == {"type": "stdio"}
    assert package()["runtimeHint"] == "uvx"
    assert PYPROJECT["project"]["scripts"] == {"openwebui-rag-mcp": "openwebui_rag_mcp.__main__:main"}


# -- one name, one version -------------------------------------------------------------------------------------


def test_the_version_is_single_sourced_and_server_json_agrees() -> None:
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "src/openwebui_rag_mcp/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert server()["version"] == package()["version"] == __version__


def test_readme_carries_the_registry_name() -> None:
    markers = re.findall(r"mcp-name: (\S+)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert markers == [server()["name"]]
    assert server()["name"].endswith("/" + PYPROJECT["project"]["name"])


def test_the_package_description_names_both_transports() -> None:
    description = PYPROJECT["project"]["description"]
    assert "stdio" in description
    assert "Streamable HTTP" in description


# -- CHANGELOG.md ------------------------------------------------------------------------------------------------


def test_changelog_top_release_is_the_package_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings, "CHANGELOG.md has no release"
    releases = [heading for heading in headings if heading != "[Unreleased]"]
    assert headings[: len(headings) - len(releases)] in ([], ["[Unreleased]"])  # Unreleased, if any, comes first
    for heading in releases:
        assert re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", heading), heading
    assert releases[0].startswith(f"[{__version__}] - ")
