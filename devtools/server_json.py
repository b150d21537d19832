"""server.json: this server as the MCP Registry lists it, rendered from the package itself.

    python -m devtools.server_json            # write server.json
    python -m devtools.server_json --check    # exit 1 when server.json differs from the package

The version is `openwebui_rag_mcp.__version__` and the environment variables are `config.VARIABLES` (the retired ones
left out: they are only warned about), so a new variable or a new version changes server.json by running this.
tests/test_release_metadata.py validates the file against the registry's schema and fails when it is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from devtools.generated import write_or_check
from openwebui_rag_mcp import __version__
from openwebui_rag_mcp.config import VARIABLES, Variable

REPO = Path(__file__).resolve().parent.parent
SERVER_JSON = REPO / "server.json"
# The newest published schema; its copy in tests/fixtures/mcp_registry/ is what the tests validate against.
SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
# The registry's name: a namespace its publisher proves (io.github.<owner>: a GitHub login) and the server's name.
# README.md carries it as `mcp-name: ...`, which is how the registry checks that the PyPI package is this server's.
NAME = "io.github.openwebui-rag-mcp/openwebui-rag-mcp"
PACKAGE = "openwebui-rag-mcp"
TITLE = "Open WebUI knowledge bases"
DESCRIPTION = "Lets AI agents find, search, read and write the knowledge bases of an existing Open WebUI."
# Credentials: clients keep these out of sight (the API key, the service tokens, a Redis URL may hold a password).
SECRETS = frozenset({"OPENWEBUI_API_KEY", "OPENWEBUI_MCP_TOKENS", "REDIS_URL"})


def _variable(variable: Variable) -> dict[str, Any]:
    """One `environmentVariables` entry; fields left out are the schema's defaults (not required, not secret)."""
    entry: dict[str, Any] = {"name": variable.name}
    required = variable.default == "required"
    entry["description"] = (
        variable.meaning
        if required or variable.has_value_default
        else (f"{variable.meaning}; default: {variable.default}")
    )
    if required:
        entry["isRequired"] = True
    if variable.name in SECRETS:
        entry["isSecret"] = True
    if variable.has_value_default:
        entry["default"] = variable.default
        if variable.default in ("true", "false"):
            entry["format"] = "boolean"
        elif variable.default.replace(".", "", 1).isdigit():
            entry["format"] = "number"
    return entry


def document() -> dict[str, Any]:
    return {
        "$schema": SCHEMA,
        "name": NAME,
        "title": TITLE,
        "description": DESCRIPTION,
        "version": __version__,
        "packages": [
            {
                "registryType": "pypi",
                "identifier": PACKAGE,
                "version": __version__,
                "runtimeHint": "uvx",
                "transport": {"type": "stdio"},
                "environmentVariables": [_variable(v) for v in VARIABLES if v.field is not None],
            }
        ],
    }


def render() -> str:
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.server_json", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when server.json is stale; write nothing")
    args = parser.parse_args(argv)
    command = "python -m devtools.server_json"
    return write_or_check(SERVER_JSON, render(), check=args.check, command=command, wrote=f"version {__version__}")


if __name__ == "__main__":
    sys.exit(main())
