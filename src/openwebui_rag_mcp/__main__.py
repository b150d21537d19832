"""Command line: `openwebui-rag-mcp` serves MCP over stdio; stdout carries protocol messages and nothing else."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from openwebui_rag_mcp import __version__

# config is light (pydantic only, no httpx or mcp), so --help can list its variables and still be instant.
from openwebui_rag_mcp.config import ConfigError, load_settings, variables_help

EXIT_CONFIG = 2

_EXIT_CODES = """\
exit codes of doctor: 0 all good, 2 configuration, 3 Open WebUI unreachable, 4 API key refused,
5 unusable answers from Open WebUI, 6 retrieval probe failed (--deep)
"""


class _Redacting(logging.Formatter):
    """Log lines with the API key blanked out: at DEBUG, httpx and httpcore log upstream headers verbatim, and a
    misbehaving upstream can echo the key back in one."""

    def __init__(self, secret: str) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._secret = secret

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace(self._secret, "[redacted]")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="openwebui-rag-mcp",
        description="MCP server (stdio) for the knowledge bases of an Open WebUI instance.",
        epilog=f"{_EXIT_CODES}\nconfiguration comes from the environment:\n{variables_help()}\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "command",
        nargs="?",
        choices=("serve", "doctor"),
        default="serve",
        help="serve: run the MCP server on stdio (default); doctor: check the configuration and Open WebUI",
    )
    parser.add_argument("--deep", action="store_true", help="doctor: also run one small search (embedding backend)")
    args = parser.parse_args(argv)

    try:
        settings = load_settings(os.environ)
    except ConfigError as error:
        for problem in error.problems:
            print(f"openwebui-rag-mcp: configuration error: {problem}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Redacting(settings.api_key.get_secret_value()))
    logging.basicConfig(level=settings.log_level, handlers=[handler])
    # httpx logs every request URL at INFO; keep that out unless debugging.
    logging.getLogger("httpx").setLevel(logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING)
    log = logging.getLogger("openwebui_rag_mcp")
    for warning in settings.warnings:
        log.warning("%s", warning)

    if args.command == "doctor":
        import asyncio

        from openwebui_rag_mcp.doctor import diagnose

        sys.exit(asyncio.run(diagnose(settings, deep=args.deep)))

    from openwebui_rag_mcp.server import create_server

    create_server(settings).run("stdio")


if __name__ == "__main__":
    main()
