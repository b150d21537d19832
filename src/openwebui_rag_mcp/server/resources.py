"""The resources: a knowledge base (`openwebui://knowledge/{id}`, also listed by resources/list, by name, paged) and
a document's text (`openwebui://file/{id}`), with completions for the templates' arguments."""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CompleteRequestParams,
    CompleteResult,
    Completion,
    ListResourcesResult,
    PaginatedRequestParams,
    Resource,
    ResourceTemplateReference,
)

from openwebui_rag_mcp import normalize, tools
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.config import Settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import KnowledgeBase
from openwebui_rag_mcp.server.results import Ctx, app_of

log = logging.getLogger(__name__)

KNOWLEDGE_TEMPLATE = "openwebui://knowledge/{knowledge_id}"
FILE_TEMPLATE = "openwebui://file/{file_id}"
RESOURCES_PAGE = 50  # bases per resources/list page
COMPLETIONS_MAX = 100  # the most values one completion/complete answer may carry (MCP)
_DESCRIPTION_CHARS = 100

LowCtx = ServerRequestContext[App, Any]


def _resource_error(failure: ToolFailure) -> ResourceError:
    """A resource that does not exist, or that this server may not read (told alike), is not found: -32602 with
    its URI; any other failure is -32603."""
    if failure.code in ("not_found", "invalid_argument"):
        return ResourceNotFoundError(str(failure))
    return ResourceError(str(failure))


async def knowledge_resource(knowledge_id: str, ctx: Ctx) -> str:
    """A knowledge base: its description and its documents (file_id, title, filename), as JSON."""
    app = app_of(ctx)
    try:
        app.check_base(knowledge_id)
        body, items = await app.client.knowledge_with_files(knowledge_id)
        base = normalize.knowledge_base(body)
        files = [normalize.file_item(item) for item in items]
    except ToolFailure as failure:
        raise _resource_error(failure) from None
    return json.dumps(
        {"knowledge_id": knowledge_id, "name": base.name, "description": base.description, "files": files},
        default=lambda model: model.model_dump(mode="json"),
        ensure_ascii=False,
    )


async def file_resource(file_id: str, ctx: Ctx) -> str:
    """A document's extracted text, cut to RAG_FILE_MAX_CHARS with the cut said at the end."""
    try:
        document = await tools.get_file(app_of(ctx), file_id)
    except ToolFailure as failure:
        raise _resource_error(failure) from None
    if document.truncated:
        return document.text + (
            f"\n\n[truncated: {len(document.text)} of {document.total_chars} characters; read on with "
            f"knowledge_get_file(file_id={file_id!r}, offset={document.next_offset})]"
        )
    return document.text


def _upstream_error(what: str, error: Exception) -> MCPError:
    """A JSON-RPC error for a failure behind resources/list or completion/complete: never an empty answer."""
    if isinstance(error, ToolFailure):
        return MCPError(code=INTERNAL_ERROR, message=f"could not {what}: {error}")
    log.error("could not %s", what, exc_info=error)
    return MCPError(code=INTERNAL_ERROR, message=f"could not {what}: unexpected error; the server log has details")


def _sort_key(base: KnowledgeBase) -> tuple[str, str]:
    return base.name.casefold(), base.knowledge_id


def _cursor(base: KnowledgeBase) -> str:
    """An opaque cursor: the position after `base`, so a base added or removed meanwhile shifts nothing."""
    return base64.urlsafe_b64encode(json.dumps(_sort_key(base), ensure_ascii=False).encode()).decode()


def _after(cursor: str) -> tuple[str, str]:
    try:
        key = json.loads(base64.b64decode(cursor.encode("ascii"), altchars=b"-_", validate=True))
    except (UnicodeError, binascii.Error, ValueError):
        key = None
    if not (isinstance(key, list) and len(key) == 2 and all(isinstance(part, str) for part in key)):
        raise MCPError(code=INVALID_PARAMS, message="invalid cursor: list again without a cursor")
    return key[0], key[1]


def _short(text: str | None) -> str | None:
    text = " ".join((text or "").split())
    if len(text) <= _DESCRIPTION_CHARS:
        return text or None
    return text[: _DESCRIPTION_CHARS - 3] + "..."


async def list_base_resources(ctx: LowCtx, params: PaginatedRequestParams | None) -> ListResourcesResult:
    """resources/list: every readable base (allowlist applied) as `openwebui://knowledge/{id}`, by name, paged."""
    after = _after(params.cursor) if params is not None and params.cursor is not None else None
    try:
        bases = sorted(await tools.all_knowledge(ctx.lifespan_context), key=_sort_key)
    except Exception as error:
        raise _upstream_error("list the knowledge bases", error) from None
    if after is not None:
        bases = [base for base in bases if _sort_key(base) > after]
    page = bases[:RESOURCES_PAGE]
    return ListResourcesResult(
        resources=[
            Resource(
                uri=KNOWLEDGE_TEMPLATE.format(knowledge_id=base.knowledge_id),
                name=base.name,
                description=_short(base.description),
                mime_type="application/json",
            )
            for base in page
        ],
        next_cursor=_cursor(page[-1]) if len(bases) > RESOURCES_PAGE else None,
    )


def _completion(values: list[str]) -> CompleteResult:
    return CompleteResult(
        completion=Completion(
            values=values[:COMPLETIONS_MAX], total=len(values), has_more=len(values) > COMPLETIONS_MAX
        )
    )


def _starts(prefix: str, *texts: str | None) -> bool:
    return any(text is not None and text.casefold().startswith(prefix) for text in texts)


async def _complete_knowledge_id(app: App, prefix: str) -> list[str]:
    try:
        bases = await tools.all_knowledge(app)
    except Exception as error:
        raise _upstream_error("list the knowledge bases", error) from None
    return [base.knowledge_id for base in bases if _starts(prefix, base.knowledge_id, base.name)]


async def _complete_file_id(app: App, prefix: str, knowledge_id: str | None) -> list[str]:
    if not knowledge_id:
        return []  # the file template names no base, and listing every base's documents would cost too much
    try:
        files = await tools.all_files(app, knowledge_id)
    except ToolFailure as failure:
        if failure.code in ("invalid_argument", "not_found", "forbidden"):
            return []  # not a base this server may read: nothing to offer
        raise _upstream_error(f"list the documents of {knowledge_id}", failure) from None
    except Exception as error:
        raise _upstream_error(f"list the documents of {knowledge_id}", error) from None
    return [item.file_id for item in files if _starts(prefix, item.file_id, item.title, item.filename)]


def completion_handler(
    templates: set[str],
) -> Callable[[LowCtx, CompleteRequestParams], Awaitable[CompleteResult]]:
    """completion/complete for the registered templates: knowledge_id by id or name prefix, file_id from the
    documents of the base named in the context's other arguments (`knowledge_id`), else nothing."""

    async def complete(ctx: LowCtx, params: CompleteRequestParams) -> CompleteResult:
        ref, argument = params.ref, params.argument
        if not isinstance(ref, ResourceTemplateReference) or ref.uri not in templates:
            return _completion([])
        prefix = argument.value.strip().casefold()
        if ref.uri == KNOWLEDGE_TEMPLATE and argument.name == "knowledge_id":
            return _completion(await _complete_knowledge_id(ctx.lifespan_context, prefix))
        if ref.uri == FILE_TEMPLATE and argument.name == "file_id":
            others = (params.context.arguments if params.context is not None else None) or {}
            return _completion(await _complete_file_id(ctx.lifespan_context, prefix, others.get("knowledge_id")))
        return _completion([])

    return complete


def add_resources(server: MCPServer[App], settings: Settings) -> None:
    """Register the templates whose tools are enabled, resources/list for the bases, and their completions."""
    templates: set[str] = set()
    if settings.tool_enabled("knowledge_files"):
        templates.add(KNOWLEDGE_TEMPLATE)
        server.resource(
            KNOWLEDGE_TEMPLATE,
            name="knowledge_base",
            title="Knowledge base",
            description="A knowledge base's description and documents (file_id, title, filename), as JSON.",
            mime_type="application/json",
        )(knowledge_resource)
    if settings.tool_enabled("knowledge_get_file"):
        templates.add(FILE_TEMPLATE)
        server.resource(
            FILE_TEMPLATE,
            name="document",
            title="Document text",
            description="The text Open WebUI extracted from a document, by file_id.",
            mime_type="text/markdown",
        )(file_resource)
    # MCPServer lists only static resources and completes nothing; the low-level handlers it documents for this
    # (migration guide, "Registering lowlevel handlers from MCPServer") replace both. Templates stay its own.
    lowlevel = server._lowlevel_server
    if KNOWLEDGE_TEMPLATE in templates:
        lowlevel.add_request_handler("resources/list", PaginatedRequestParams, list_base_resources)
    if templates:
        lowlevel.add_request_handler("completion/complete", CompleteRequestParams, completion_handler(templates))
