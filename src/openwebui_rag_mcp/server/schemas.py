"""The schemas in `tools/list`, made small: every session reads them into the agent's context. Input schemas lose
titles and null branches, output schemas keep only which fields are always there plus the error branch."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from openwebui_rag_mcp.config import Settings

# What every failure's structured content looks like, in as few characters as the checks need: the field no result has
# (the full body is ErrorBody, `message` included; README lists the codes). Twelve copies of it are in tools/list.
_ERROR_BRANCH: dict[str, Any] = {"required": ["code"]}


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every `{"$ref": "#/$defs/X"}` replaced by X itself (each model is used once per schema)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
            return _inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline_refs(value, defs) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline_refs(value, defs) for value in node]
    return node


def with_error_branch(schema: dict[str, Any]) -> dict[str, Any]:
    """The output schema as "the result, or the error body", with nested models inlined.

    Clients such as MCP Inspector and Claude Code validate the structured content of error results against the
    output schema too; without this branch they would hide our errors behind a schema complaint.
    """
    defs = schema.get("$defs", {})
    result = _inline_refs({key: value for key, value in schema.items() if key not in ("$defs", "title", "type")}, defs)
    return {"type": "object", "anyOf": [_required_only(result), _ERROR_BRANCH]}


def _required_only(schema: dict[str, Any]) -> dict[str, Any]:
    """Which fields are always present, in the result and in the items of its lists, and nothing else.

    tools/list is read into every agent session, and field types took a third of it while telling an agent little
    that the names and docs/tools.md do not; clients still check that every field a result promises is there. The
    one nested object that is not a list item (knowledge_health's diagnostics) is described in docs/tools.md.
    """
    lists = {name: prop["items"] for name, prop in schema.get("properties", {}).items() if "items" in prop}
    items = {name: {"items": _required_only(item)} for name, item in lists.items() if isinstance(item, dict)}
    kept = {name: item for name, item in items.items() if item["items"]}
    return ({"properties": kept} if kept else {}) | ({"required": schema["required"]} if "required" in schema else {})


# Parameters accepted but not listed, so they cost no context: knowledge_files' `page` (now `cursor`), and
# knowledge_search's hybrid controls unless OPENWEBUI_HYBRID_SEARCH says Open WebUI runs hybrid search (they do
# nothing where it does not; docs/tools.md describes them).
_UNLISTED = frozenset({"page"})
_HYBRID_CONTROLS = frozenset({"k_reranker", "hybrid", "bm25_weight"})


def unlisted_for(settings: Settings) -> frozenset[str]:
    return _UNLISTED if settings.hybrid_search else _UNLISTED | _HYBRID_CONTROLS


def compact_input_schema(schema: dict[str, Any], unlisted: frozenset[str]) -> None:
    """Titles only repeat the names, and tools/list is read into the agent's context on every session. An optional
    parameter is listed as its plain type: leaving it out is how a caller says "none" (null is still accepted)."""
    schema.pop("title", None)
    properties: dict[str, Any] = schema.get("properties", {})
    for name in unlisted & set(properties):
        del properties[name]
    for prop in properties.values():
        prop.pop("title", None)
        branches = prop.get("anyOf")
        if prop.get("default", ...) is None and isinstance(branches, list) and {"type": "null"} in branches:
            del prop["default"]
            rest = [branch for branch in prop.pop("anyOf") if branch != {"type": "null"}]
            if len(rest) == 1:
                prop.update(rest[0])
            else:
                prop["anyOf"] = rest
        if prop.get("additionalProperties") is True:
            del prop["additionalProperties"]


def arg(description: str, *, maximum: int | None = None) -> Any:
    """A described tool parameter. Maxima are published in the schema (lower bounds go without saying, and
    tools/list is in every agent's context) but every bound is checked by the tools, so a value out of bounds gets
    the structured invalid_argument error, not the SDK's plain-text validation message."""
    return Field(description=description, json_schema_extra=None if maximum is None else {"maximum": maximum})
