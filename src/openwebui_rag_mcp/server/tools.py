"""The MCP tools: one function per tool, its parameters described for `tools/list`, each calling the layer that does
the work (`tools`, `exact`, `writes`, `remote`) and answering through `respond`."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.types import CallToolResult

from openwebui_rag_mcp import exact, remote, tools, writes
from openwebui_rag_mcp.config import TOP_K_MAX
from openwebui_rag_mcp.hybrid import K_RERANKER_MAX
from openwebui_rag_mcp.models import (
    DocumentAdded,
    DocumentRemoved,
    DocumentUpdated,
    ExactMatches,
    FileAdded,
    FileText,
    Health,
    KnowledgeCreated,
    KnowledgeDeleted,
    KnowledgeFiles,
    KnowledgeList,
    KnowledgeRenamed,
    SearchResult,
)
from openwebui_rag_mcp.server.results import Ctx, app_of, respond
from openwebui_rag_mcp.server.schemas import arg

KnowledgeId = Annotated[str, arg("knowledge_id, not a file_id")]
FileId = Annotated[str, arg("file_id, not a knowledge_id")]
Limit = Annotated[int | None, arg(f"Max items (default {tools.LIST_LIMIT})", maximum=tools.LIST_LIMIT_MAX)]
Cursor = Annotated[str | None, arg("Previous next_cursor")]


async def knowledge_list(
    ctx: Ctx,
    query: Annotated[str | None, arg("Text in name or description")] = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> Annotated[CallToolResult, KnowledgeList]:
    return await respond(tools.list_knowledge(app_of(ctx), query=query, limit=limit, cursor=cursor))


Where = Annotated[dict[str, Any] | None, arg("Metadata to match")]
ChangedAfter = Annotated[str | None, arg("Since (ISO 8601)")]
ChangedBefore = Annotated[str | None, arg("Before (ISO 8601)")]


async def knowledge_files(
    ctx: Ctx,
    knowledge_id: KnowledgeId,
    query: Annotated[str | None, arg("Text in filename or title")] = None,
    limit: Limit = None,
    cursor: Cursor = None,
    page: Annotated[int | None, arg("Unlisted (see schemas._UNLISTED): a page of 30, as before cursor")] = None,
    where: Where = None,
    changed_after: ChangedAfter = None,
    changed_before: ChangedBefore = None,
    pending: Annotated[int | None, arg("Only files processing; wait ≤N s for none")] = None,
) -> Annotated[CallToolResult, KnowledgeFiles]:
    async def progress(done: float, total: float, message: str) -> None:
        await ctx.report_progress(done, total, message)

    return await respond(
        tools.list_files(
            app_of(ctx),
            knowledge_id,
            query=query,
            limit=limit,
            cursor=cursor,
            page=page,
            where=where,
            changed_after=changed_after,
            changed_before=changed_before,
            pending=pending,
            progress=progress,
        )
    )


async def knowledge_search(
    ctx: Ctx,
    query: Annotated[str, arg("What to look for")],
    knowledge_ids: Annotated[list[str] | None, arg("knowledge_ids to search; omit for all")] = None,
    top_k: Annotated[int | None, arg("Fragments (default RAG_TOP_K)", maximum=TOP_K_MAX)] = None,
    k_reranker: Annotated[int | None, arg("Reranker candidates (hybrid)", maximum=K_RERANKER_MAX)] = None,
    file_ids: Annotated[list[str] | None, arg("Or just these file_ids")] = None,
    folder: Annotated[str | None, arg("Only this folder of knowledge_ids")] = None,
    where: Where = None,
    changed_after: ChangedAfter = None,
    changed_before: ChangedBefore = None,
    min_score: Annotated[float | None, arg("Min distance (higher=better)")] = None,
    hybrid: Annotated[bool | None, arg("false: vectors only; true: hybrid or fail")] = None,
    bm25_weight: Annotated[float | None, arg("Keywords' weight, 0-1 (hybrid)")] = None,
) -> Annotated[CallToolResult, SearchResult]:
    return await respond(
        tools.search(
            app_of(ctx),
            query,
            knowledge_ids=knowledge_ids,
            top_k=top_k,
            k_reranker=k_reranker,
            file_ids=file_ids,
            folder=folder,
            where=where,
            changed_after=changed_after,
            changed_before=changed_before,
            min_score=min_score,
            hybrid_wanted=hybrid,
            bm25_weight=bm25_weight,
        )
    )


async def knowledge_get_file(
    ctx: Ctx,
    file_id: FileId,
    offset: Annotated[int | None, arg("First character (next_offset)")] = None,
    max_chars: Annotated[int | None, arg("Max characters")] = None,
    start_line: Annotated[int | None, arg("From line N (gives 'N: text')")] = None,
    end_line: Annotated[int | None, arg("to here (default +99)")] = None,
) -> Annotated[CallToolResult, FileText]:
    return await respond(
        tools.get_file(
            app_of(ctx), file_id, offset=offset or 0, max_chars=max_chars, start_line=start_line, end_line=end_line
        )
    )


async def knowledge_find(
    ctx: Ctx,
    knowledge_id: KnowledgeId,
    phrase: Annotated[str, arg("Exact text (one line)")],
    case_sensitive: Annotated[bool | None, arg("Match case")] = None,
    max_files: Annotated[int, arg("Documents to read", maximum=exact.FILES_MAX)] = 50,
    max_matches: Annotated[int, arg("Lines to return", maximum=exact.MATCHES_MAX)] = 50,
) -> Annotated[CallToolResult, ExactMatches]:
    return await respond(
        exact.find_exact(
            app_of(ctx),
            knowledge_id,
            phrase,
            case_sensitive=bool(case_sensitive),
            max_files=max_files,
            max_matches=max_matches,
        )
    )


async def knowledge_health(
    ctx: Ctx,
    deep: Annotated[bool | None, arg("Also try a search")] = None,
) -> Annotated[CallToolResult, Health]:
    return await respond(tools.health(app_of(ctx), bool(deep)))


Text = Annotated[str, arg(f"Markdown, ≤{writes.TEXT_MAX_CHARS} chars")]


async def knowledge_create(
    ctx: Ctx,
    name: Annotated[str, arg(f"Name, ≤{writes.NAME_MAX_CHARS} chars")],
    description: Annotated[str | None, arg("What the base holds")] = None,
) -> Annotated[CallToolResult, KnowledgeCreated]:
    return await respond(writes.create_knowledge(app_of(ctx), name, description or ""), write=True)


async def knowledge_add(
    ctx: Ctx,
    knowledge_id: KnowledgeId,
    text: Text,
    title: Annotated[str, arg("Title (makes the filename)")],
    metadata: Annotated[dict[str, Any] | None, arg("JSON kept with it")] = None,
) -> Annotated[CallToolResult, DocumentAdded]:
    async def progress(done: float, total: float, message: str) -> None:
        await ctx.report_progress(done, total, message)

    return await respond(
        writes.add_document(app_of(ctx), knowledge_id, text=text, title=title, metadata=metadata, progress=progress),
        write=True,
    )


async def knowledge_add_file(
    ctx: Ctx,
    knowledge_id: KnowledgeId,
    path: Annotated[str | None, arg("Local file (allowed folders, stdio)")] = None,
    content_base64: Annotated[str | None, arg("Or the bytes, base64, with filename")] = None,
    filename: Annotated[str | None, arg("e.g. report.pdf")] = None,
    url: Annotated[str | None, arg("Or a web page Open WebUI fetches")] = None,
    file_id: Annotated[str | None, arg("Or a file_id in Open WebUI, not a knowledge_id")] = None,
    title: Annotated[str | None, arg("Default: the file name")] = None,
    metadata: Annotated[dict[str, Any] | None, arg("JSON kept with it")] = None,
) -> Annotated[CallToolResult, FileAdded]:
    async def progress(done: float, total: float, message: str) -> None:
        await ctx.report_progress(done, total, message)

    source = writes.FileSource(path=path, content_base64=content_base64, filename=filename, url=url, file_id=file_id)
    return await respond(
        remote.add_file(app_of(ctx), knowledge_id, source, title=title, metadata=metadata, progress=progress),
        write=True,
    )


async def knowledge_update(
    ctx: Ctx, file_id: FileId, text: Text, knowledge_id: KnowledgeId
) -> Annotated[CallToolResult, DocumentUpdated]:
    return await respond(writes.update_document(app_of(ctx), file_id, text, knowledge_id), write=True)


async def knowledge_delete(
    ctx: Ctx, knowledge_id: KnowledgeId, file_id: FileId
) -> Annotated[CallToolResult, DocumentRemoved]:
    return await respond(writes.remove_document(app_of(ctx), knowledge_id, file_id), write=True)


async def knowledge_rename(
    ctx: Ctx,
    knowledge_id: KnowledgeId,
    name: Annotated[str | None, arg("New name")] = None,
    description: Annotated[str | None, arg("New description")] = None,
) -> Annotated[CallToolResult, KnowledgeRenamed]:
    return await respond(writes.rename_knowledge(app_of(ctx), knowledge_id, name, description), write=True)


async def knowledge_delete_base(
    ctx: Ctx,
    knowledge_id: KnowledgeId,
    confirm: Annotated[str, arg("The base's exact name")],
) -> Annotated[CallToolResult, KnowledgeDeleted]:
    return await respond(writes.delete_knowledge(app_of(ctx), knowledge_id, confirm), write=True)
