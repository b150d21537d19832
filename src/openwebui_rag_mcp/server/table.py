"""The tool table: each tool once, with its description and annotations; which are registered under the settings
(read-only mode, disabled tools, switched-on tools), their aliases, and their compacted schemas."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ValidationError

from openwebui_rag_mcp.config import ALIASES, SWITCHED_ON_TOOLS, Settings
from openwebui_rag_mcp.errors import invalid_argument
from openwebui_rag_mcp.server import tools as t
from openwebui_rag_mcp.server.results import app_of, failure_result
from openwebui_rag_mcp.server.schemas import compact_input_schema, unlisted_for, with_error_branch

# Only what differs from the MCP defaults (readOnlyHint false, destructiveHint true, idempotentHint false), as every
# tools/list costs the agent context; destructiveHint stays explicit where it is true, so a client that gets the
# default wrong still asks before a destructive change. openWorldHint is published although true is its default:
# every tool reaches Open WebUI (and URL adds the web), and hosts and directories read a missing hint differently.
# The destructive and idempotent hints are defined only for tools that are not read-only (MCP spec).
READ = ToolAnnotations(read_only_hint=True, open_world_hint=True)
CREATE = ToolAnnotations(destructive_hint=False, open_world_hint=True)
CHANGE = ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=True)
DESTROY = ToolAnnotations(destructive_hint=True, open_world_hint=True)


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
_ALIAS_TITLE = "{0} (alias)"


def _registered(settings: Settings, name: str, hints: ToolAnnotations) -> bool:
    """A tool is offered unless OPENWEBUI_DISABLED_TOOLS names it, or read-only mode is on and it may write;
    knowledge_delete_base only when OPENWEBUI_ALLOW_DELETE_BASE switches it on (so it costs no context otherwise).

    Whether it may write comes from its own annotations, so a new tool needs no second list of names.
    """
    if name in SWITCHED_ON_TOOLS and not settings.allow_delete_base:  # switched on by the operator only
        return False
    return settings.tool_enabled(name) and not (settings.read_only and not hints.read_only_hint)


class Spec(NamedTuple):
    """A tool as declared once: its function (whose name is the tool's), the title hosts show a person, the
    description the agent reads, and its annotations."""

    fn: Callable[..., Awaitable[CallToolResult]]
    title: str
    description: str
    hints: ToolAnnotations


SPECS: list[Spec] = [
    Spec(t.knowledge_list, "List knowledge bases", _LIST, READ),
    Spec(t.knowledge_files, "List a base's documents", _FILES, READ),
    Spec(t.knowledge_search, "Search knowledge bases", _SEARCH, READ),
    Spec(t.knowledge_get_file, "Read a document", _GET_FILE, READ),
    Spec(t.knowledge_find, "Find exact text in a base", _FIND, READ),
    Spec(t.knowledge_health, "Check Open WebUI", _HEALTH, READ),
    Spec(t.knowledge_create, "Create a knowledge base", _CREATE, CREATE),
    Spec(t.knowledge_add, "Add a text document", _ADD, CREATE),
    Spec(t.knowledge_add_file, "Add a file or web page", _ADD_FILE, CREATE),
    Spec(t.knowledge_update, "Replace a document's text", _UPDATE, CHANGE),
    Spec(t.knowledge_delete, "Remove a document from a base", _DELETE, CHANGE),
    Spec(t.knowledge_rename, "Rename a knowledge base", _RENAME, CHANGE),
    Spec(t.knowledge_delete_base, "Delete a knowledge base", _DELETE_BASE, DESTROY),
]


def registered_tools(settings: Settings) -> list[Tool]:
    """The tools these settings offer, in the table's order, each followed by its alias if that is offered too."""
    aliases_of = {name: alias for alias, name in ALIASES.items()}
    built: dict[str, Tool] = {}

    def _tool(spec: Spec) -> Tool:
        """The tool of `spec` with compact schemas, built once even when its alias is registered too."""
        fn = spec.fn
        if fn.__name__ not in built:
            tool = _Tool.from_function(
                fn, name=fn.__name__, title=spec.title, description=spec.description, annotations=spec.hints
            )
            compact_input_schema(tool.parameters, unlisted_for(settings))
            if tool.fn_metadata.output_schema is not None:
                tool.fn_metadata.output_schema = with_error_branch(tool.fn_metadata.output_schema)
            built[fn.__name__] = tool
        return built[fn.__name__]

    registered: list[Tool] = []
    for spec in SPECS:
        name = spec.fn.__name__
        for tool_name in (name, aliases_of.get(name)):
            if tool_name is None or not _registered(settings, tool_name, spec.hints):
                continue
            if tool_name == name:
                registered.append(_tool(spec))
                continue
            # The same inputs, output schema and full description. Copied, not built again: building a tool's
            # schemas is most of create_server's time.
            update = {
                "name": tool_name,
                "title": _ALIAS_TITLE.format(spec.title),
                "description": spec.description + _ALIAS.format(name),
            }
            registered.append(_tool(spec).model_copy(update=update))
    return registered
