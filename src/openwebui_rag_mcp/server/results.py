"""What a tool call answers: a result model as structured content and compact JSON text, or a `ToolFailure` as the
`isError` result with the error body (writes always say whether anything may have changed)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.errors import ToolFailure, write_outcome
from openwebui_rag_mcp.models import ErrorBody

log = logging.getLogger(__name__)

Ctx = Context[App, Any]


def app_of(ctx: Ctx) -> App:
    return ctx.request_context.lifespan_context


def _result(model: BaseModel, *, is_error: bool = False) -> CallToolResult:
    # Compact JSON in the text block: the same data as structured content, at the smallest context cost.
    return CallToolResult(
        content=[TextContent(type="text", text=model.model_dump_json())],
        structured_content=model.model_dump(mode="json"),
        is_error=is_error,
    )


def failure_result(failure: ToolFailure, *, write: bool) -> CallToolResult:
    """The `isError` result for a failure. For a write it always says whether anything may have changed."""
    if write and failure.outcome is None:
        failure = replace(failure, outcome=write_outcome(failure))
    body = ErrorBody(
        ok=False,
        code=failure.code,
        message=failure.message,
        http_status=failure.http_status,
        retryable=failure.retryable,
        stage=failure.stage,
        file_id=failure.file_id,
        outcome=failure.outcome,
        existing_file_id=failure.existing_file_id,
    )
    return _result(body, is_error=True)


async def respond(work: Awaitable[BaseModel], *, write: bool = False) -> CallToolResult:
    """Run a tool body; every failure, a bug included, becomes an `isError` result with the structured body."""
    try:
        return _result(await work)
    except ToolFailure as failure:
        return failure_result(failure, write=write)
    except Exception:
        log.exception("tool failed unexpectedly")
        bug = ToolFailure(
            "internal_error",
            "the server hit an unexpected error; its log on stderr has the details",
            outcome="partial_or_unknown" if write else None,
        )
        return failure_result(bug, write=write)
