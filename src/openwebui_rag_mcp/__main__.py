"""Command line: `openwebui-rag-mcp` serves MCP over stdio (stdout carries protocol messages and nothing else) or,
with `--transport streamable-http`, over HTTP for many callers."""

from __future__ import annotations

import argparse
import gc
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
exit codes of sync: 0 all synced, 1 some files failed (each is named), 2 configuration, 3 --delete refused (the
folder holds no file, or more than half and more than 5 of its documents would go; --max-delete N), 5 the base cannot
be read, or the folder's source id cannot be read or kept (--source ID)
exit codes of recover: 0 nothing of this key left in flight, 1 something could not be settled (each is named),
2 configuration, 5 the journal of uploads in flight cannot be read
"""


class _Redacting(logging.Formatter):
    """Log lines with credentials blanked out: the API key and, over HTTP, the token of the caller being served (at
    DEBUG, httpx and httpcore log upstream headers verbatim, and a misbehaving upstream can echo a key back)."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._secrets = [secret for secret in secrets if secret]

    def format(self, record: logging.LogRecord) -> str:
        from openwebui_rag_mcp.client import caller_token

        text = super().format(record)
        for secret in [*self._secrets, caller_token()]:
            if secret:
                text = text.replace(secret, "[redacted]")
        return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of documents (0 or more)")
    return value


def _concurrency(text: str) -> int:
    from openwebui_rag_mcp.sync.types import CONCURRENCY_MAX

    if not text.isdigit() or not 1 <= int(text) <= CONCURRENCY_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of files from 1 to {CONCURRENCY_MAX}")
    return int(text)


def _source_id(text: str) -> str:
    from openwebui_rag_mcp.sync.source import is_source_id

    if not is_source_id(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: use 1 to 32 letters, digits, - and _, starting with a letter or digit"
        )
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="openwebui-rag-mcp",
        description="MCP server for the knowledge bases of an Open WebUI instance (stdio, or Streamable HTTP).",
        epilog=f"{_EXIT_CODES}\nconfiguration comes from the environment:\n{variables_help()}\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "command",
        nargs="?",
        choices=("serve", "doctor", "sync", "recover"),
        default="serve",
        help="serve: run the MCP server (default); doctor: check the configuration and Open WebUI; recover: remove "
        "what a killed process left in flight (uploads in no base); sync: keep a "
        "knowledge base in step with a folder",
    )
    parser.add_argument("folder", nargs="?", help="sync: the folder to mirror into the knowledge base")
    parser.add_argument("--knowledge-id", help="sync: the knowledge base to keep in step with the folder")
    parser.add_argument("--dry-run", action="store_true", help="sync: say what would change, change nothing")
    parser.add_argument(
        "--delete", action="store_true", help="sync: also remove documents whose file is gone from the folder"
    )
    parser.add_argument(
        "--max-delete",
        type=_count,
        metavar="N",
        help="sync: with --delete, remove at most N documents; without it, a run that would remove more than half "
        "(and more than 5) of the folder's documents, or any from a folder that holds no file, is refused",
    )
    parser.add_argument(
        "--source",
        type=_source_id,
        metavar="ID",
        help="sync: this folder's id in the base (1 to 32 letters, digits, - and _), the same on every run; by "
        "default a random one the first run keeps in the folder's .openwebui-rag-mcp-sync (give it when the folder "
        "cannot be written)",
    )
    parser.add_argument(
        "--concurrency",
        type=_concurrency,
        default=None,
        metavar="N",
        help="sync: files uploaded at once (1 to 16, default 4); on Open WebUI 0.9.6+ each then waits for its "
        "indexing beside up to 4 times as many; before 0.9.6 their attaches to the base take turns",
    )
    parser.add_argument("--deep", action="store_true", help="doctor: also run one small search (embedding backend)")
    parser.add_argument(
        "--transport",
        choices=("stdio", "streamable-http"),
        help="serve: stdio (default; one process per client) or streamable-http (one endpoint at /mcp for many "
        "callers); overrides OPENWEBUI_MCP_TRANSPORT",
    )
    parser.add_argument(
        "--host", help="streamable-http: address to listen on (127.0.0.1); overrides OPENWEBUI_MCP_HOST"
    )
    parser.add_argument("--port", help="streamable-http: port (8765); overrides OPENWEBUI_MCP_PORT")
    # Intermixed: `sync --knowledge-id ID FOLDER` as well as `sync FOLDER --knowledge-id ID` (plain parsing takes
    # both optional positionals at `sync` and then refuses the folder after the options).
    args = parser.parse_intermixed_args(argv)

    environ = dict(os.environ)
    for option, variable in (
        ("transport", "OPENWEBUI_MCP_TRANSPORT"),
        ("host", "OPENWEBUI_MCP_HOST"),
        ("port", "OPENWEBUI_MCP_PORT"),
    ):
        if getattr(args, option) is not None:
            environ[variable] = str(getattr(args, option))
    try:
        settings = load_settings(environ)
    except ConfigError as error:
        for problem in error.problems:
            print(f"openwebui-rag-mcp: configuration error: {problem}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _Redacting([settings.api_key.get_secret_value(), *(t.get_secret_value() for t in settings.service_tokens)])
    )
    logging.basicConfig(level=settings.log_level, handlers=[handler])
    # httpx logs every request URL at INFO; keep that out unless debugging.
    logging.getLogger("httpx").setLevel(logging.DEBUG if settings.log_level == "DEBUG" else logging.WARNING)
    log = logging.getLogger("openwebui_rag_mcp")
    for warning in settings.warnings:
        log.warning("%s", warning)

    if args.command == "sync":
        if not args.folder or not args.knowledge_id:
            parser.error("sync needs a folder and --knowledge-id")
        from pathlib import Path

        folder = Path(args.folder).expanduser()
        if not folder.is_dir():
            print(f"openwebui-rag-mcp: {args.folder} is not a folder", file=sys.stderr)
            sys.exit(EXIT_CONFIG)
        import asyncio

        from openwebui_rag_mcp.sync.command import sync
        from openwebui_rag_mcp.sync.types import CONCURRENCY

        # The cyclic GC's collections walk every object still tracked, the imported modules' too, and a run that
        # finds nothing changed is over in a fraction of a second: keep them out of it, and out of the final
        # collection at exit (2,000 documents unchanged on 0.12.4: 0.39 s → 0.34 s).
        gc.freeze()
        code = asyncio.run(
            sync(
                settings,
                folder,
                args.knowledge_id,
                dry_run=args.dry_run,
                delete=args.delete,
                say=lambda line: print(line, flush=True),
                tty=sys.stderr.isatty(),
                max_delete=args.max_delete,
                source=args.source,
                concurrency=args.concurrency or CONCURRENCY,
            )
        )
        gc.freeze()
        sys.exit(code)

    if args.command == "recover":
        import asyncio

        from openwebui_rag_mcp.recover import recover_command

        sys.exit(asyncio.run(recover_command(settings, say=lambda line: print(line, flush=True))))

    if args.command == "doctor":
        import asyncio

        from openwebui_rag_mcp.doctor import diagnose

        sys.exit(asyncio.run(diagnose(settings, deep=args.deep)))

    if settings.transport == "streamable-http":
        from openwebui_rag_mcp.web import serve

        serve(settings)
        return

    from openwebui_rag_mcp.server import create_server

    create_server(settings).run("stdio")


if __name__ == "__main__":
    main()
