"""`openwebui-rag-mcp doctor`: check the configuration and Open WebUI with read-only requests, in plain words.

Exit codes tell the failures apart: 0 all good, 2 configuration, 3 Open WebUI unreachable, 4 key refused,
5 Open WebUI answered in a way this server cannot use, 6 retrieval probe failed (--deep).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from openwebui_rag_mcp import normalize, tools
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure

OK, UNREACHABLE, AUTH, UNUSABLE, RETRIEVAL = 0, 3, 4, 5, 6


def _exit_code(failure: ToolFailure) -> int:
    if failure.code in ("upstream_unavailable", "timeout"):
        return UNREACHABLE
    if failure.code in ("auth", "forbidden"):
        return AUTH
    return UNUSABLE


async def diagnose(
    settings: Settings,
    *,
    deep: bool,
    say: Callable[[str], None] = print,
    transport: httpx.AsyncBaseTransport | None = None,
) -> int:
    client = OpenWebUIClient(settings, transport=transport)
    app = App(settings=settings, client=client)
    try:
        say(f"configuration: OK (Open WebUI at {settings.url}, timeout {settings.timeout:g} s)")
        try:
            release = await client.release()
        except ToolFailure as failure:
            say(f"reach Open WebUI: FAILED - {failure.message}")
            return _exit_code(failure)
        say(f"reach Open WebUI: OK, release {release.version}, API family {release.family}")
        caps = release.capabilities
        say(
            "capabilities: "
            + ", ".join(f"{name} {'yes' if value else 'no'}" for name, value in caps.model_dump().items())
        )
        if not caps.keep_file_on_remove:
            say("  note: knowledge_delete will refuse: this release deletes the file when it leaves a base")

        try:
            bases = [normalize.knowledge_base(item) for item in await client.list_knowledge()]
        except ToolFailure as failure:
            say(f"API key on the Knowledge API: FAILED - {failure.message}")
            return _exit_code(failure)
        say(f"API key on the Knowledge API: OK, {len(bases)} knowledge base(s) readable")
        allowed = app.allowed_bases()
        if allowed is not None:
            readable = {base.knowledge_id for base in bases}
            missing = [i for i in allowed if i not in readable]
            if missing:
                say(
                    f"OPENWEBUI_KNOWLEDGE_IDS: FAILED - {len(missing)} of {len(allowed)} allowed base(s) are not "
                    f"readable with this key (gone, or not shared with its user): {', '.join(missing)}"
                )
                return UNUSABLE
            say(f"OPENWEBUI_KNOWLEDGE_IDS: OK, all {len(allowed)} allowed base(s) readable")
            bases = [base for base in bases if base.knowledge_id in allowed]

        if bases:
            try:
                files, total = await client.knowledge_files(bases[0].knowledge_id, 1)
            except ToolFailure as failure:
                say(f"documents of a base: FAILED - {failure.message}")
                return _exit_code(failure)
            say(f"documents of a base: OK ({bases[0].name!r} lists {total if total is not None else len(files)})")

        if deep:
            try:
                probe = await tools.retrieval_probe(app, bases)
            except ToolFailure as failure:
                say(f"retrieval (embedding backend): FAILED - {failure.message}")
                return RETRIEVAL
            if probe.ok is None:
                say(f"retrieval (embedding backend): not confirmed - {probe.detail}")
            elif probe.ok:
                say(f"retrieval (embedding backend): OK, {probe.detail}")
            else:
                say(f"retrieval (embedding backend): FAILED - {probe.detail}")
                return RETRIEVAL
        else:
            say("retrieval: not checked (add --deep to run one small search through the embedding backend)")
        say("all checks passed")
        return OK
    finally:
        await client.aclose()
