"""The tool table: each tool once, with its description and annotations; which are registered under the settings
(read-only mode, disabled tools, switched-on tools), their aliases, and their compacted schemas."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ValidationError

from openwebui_rag_mcp.config import ALIASES, SWITCHED_ON_TOOLS, Settings
from openwebui_rag_mcp.errors import invalid_argument
from openwebui_rag_mcp.server import tools as t
from openwebui_rag_mcp.server.results import app_of, failure_result
from openwebui_rag_mcp.server.schemas import compact_input_schema, unlisted_for, with_error_branch

# Only what differs from the MCP defaults (readOnlyHint false, destructiveHint true, idempotentHint false,
# openWorldHint true), as every tools/list costs the agent context; destructiveHint stays explicit where it is true,
# so a client that gets the default wrong still asks before a destructive change. The destructive and idempotent
# hints are defined only for tools that are not read-only (MCP spec).
READ = ToolAnnotations(read_only_hint=True)
CREATE = ToolAnnotations(destructive_hint=False)
CHANGE = ToolAnnotations(destructive_hint=True, idempotent_hint=True)
DESTROY = ToolAnnotations(destructive_hint=True)


class _Tool(Tool):
    """A tool whose malformed arguments get the structured error body too, not only the SDK's text."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        await app_of(context).recall_created()  # bases this caller created on another replica are allowed here too
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as error:
            if not isinstance(error.__cause__, ValidationError):
                raise
            # Only locations and messages: pydantic's full text would echo the caller's input back.
            problems = "; ".join(
                f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
                for e in error.__cause__.errors()
            )
            failure = invalid_argument(f"invalid arguments for {self.name}: {problems}")
            read_only = self.annotations is not None and bool(self.annotations.read_only_hint)
            return failure_result(failure, write=not read_only)


_LIST = "Knowledge bases: knowledge_id, name, description, file_count; newest first."
_FILES = "Documents of base knowledge_id: file_id, title, filename, size; newest first."
_SEARCH = "Semantic search in knowledge bases: fragments with file_id, title, lines, link; best first."
_GET_FILE = "Read a document's text by file_id, in parts (next_offset) or by lines."
_FIND = "Exact text in the documents of base knowledge_id: lines with file_id, line number."
_ADD_FILE = "Add a file (PDF, office...), web page or uploaded file_id to base knowledge_id."
_HEALTH = "Check Open WebUI and this key: version, capabilities, controls."
_CREATE = "Create an empty, private knowledge base; returns its knowledge_id."
_ADD = "Add a text document to base knowledge_id and index it; returns its file_id."
_UPDATE = "Replace the text of file_id in base knowledge_id and re-index it."
_DELETE = "Remove a document (file_id) from base knowledge_id; the file and other bases keep it."
_RENAME = "Rename base knowledge_id or change its description."
_DELETE_BASE = "Delete base knowledge_id, created by this key's user; Open WebUI keeps its files."
_ALIAS = " Alias of {0}."


def _registered(settings: Settings, name: str, hints: ToolAnnotations) -> bool:
    """A tool is offered unless OPENWEBUI_DISABLED_TOOLS names it, or read-only mode is on and it may write;
    knowledge_delete_base only when OPENWEBUI_ALLOW_DELETE_BASE switches it on (so it costs no context otherwise).

    Whether it may write comes from its own annotations, so a new tool needs no second list of names.
    """
    if name in SWITCHED_ON_TOOLS and not settings.allow_delete_base:  # switched on by the operator only
        return False
    return settings.tool_enabled(name) and not (settings.read_only and not hints.read_only_hint)


# No display titles: hosts show the name instead, and every tools/list costs the agent context.
SPECS: list[tuple[Callable[..., Awaitable[CallToolResult]], str, ToolAnnotations]] = [
    (t.knowledge_list, _LIST, READ),
    (t.knowledge_files, _FILES, READ),
    (t.knowledge_search, _SEARCH, READ),
    (t.knowledge_get_file, _GET_FILE, READ),
    (t.knowledge_find, _FIND, READ),
    (t.knowledge_health, _HEALTH, READ),
    (t.knowledge_create, _CREATE, CREATE),
    (t.knowledge_add, _ADD, CREATE),
    (t.knowledge_add_file, _ADD_FILE, CREATE),
    (t.knowledge_update, _UPDATE, CHANGE),
    (t.knowledge_delete, _DELETE, CHANGE),
    (t.knowledge_rename, _RENAME, CHANGE),
    (t.knowledge_delete_base, _DELETE_BASE, DESTROY),
]


def registered_tools(settings: Settings) -> list[Tool]:
    """The tools these settings offer, in the table's order, each followed by its alias if that is offered too."""
    aliases_of = {name: alias for alias, name in ALIASES.items()}
    built: dict[str, Tool] = {}

    def _tool(fn: Callable[..., Any], description: str, hints: ToolAnnotations) -> Tool:
        """The tool for `fn` with compact schemas, built once even when its alias is registered too."""
        if fn.__name__ not in built:
            tool = _Tool.from_function(fn, name=fn.__name__, description=description, annotations=hints)
            compact_input_schema(tool.parameters, unlisted_for(settings))
            if tool.fn_metadata.output_schema is not None:
                tool.fn_metadata.output_schema = with_error_branch(tool.fn_metadata.output_schema)
            built[fn.__name__] = tool
        return built[fn.__name__]

    registered: list[Tool] = []
    for fn, description, hints in SPECS:
        name = fn.__name__
        for tool_name in (name, aliases_of.get(name)):
            if tool_name is None or not _registered(settings, tool_name, hints):
                continue
            if tool_name == name:
                registered.append(_tool(fn, description, hints))
                continue
            # The same inputs, output schema and full description. Copied, not built again: building a tool's
            # schemas is most of create_server's time.
            original = _tool(fn, description, hints)
            registered.append(
                original.model_copy(update={"name": tool_name, "description": description + _ALIAS.format(name)})
            )
    return registered
