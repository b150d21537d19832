"""The published output schemas promise every field a result carries, and still admit every error body.

Schemas are read from `tools/list` through the in-memory MCP client; results are real ones, from every tool (aliases
included) against the stateful fake Open WebUI of tests/faultstub.py. A schema that only checks types would let `{}`
through as a `knowledge_list` result; these tests fail on that.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, get_args

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from openwebui_rag_mcp.config import ALIASES, READ_TOOLS, WRITE_TOOLS
from openwebui_rag_mcp.errors import ErrorCode, Outcome, Stage
from openwebui_rag_mcp.models import ErrorBody
from tests.faultstub import FILE, KB, KB_OTHER, Lane, answer
from tests.support.servers import LaneServers

pytestmark = pytest.mark.anyio

EVERY_TOOL = {*READ_TOOLS, *WRITE_TOOLS, *ALIASES}
# Every tool once, in an order that works on one fake Open WebUI: reads, then the writes.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("knowledge_list", {}),
    ("rag_list_knowledge", {}),
    ("knowledge_files", {"knowledge_id": KB}),
    ("knowledge_search", {"query": "apples"}),
    ("rag_search", {"query": "apples", "knowledge_ids": [KB]}),
    ("knowledge_get_file", {"file_id": FILE}),
    ("rag_get_file", {"file_id": FILE, "offset": 2}),
    ("knowledge_find", {"knowledge_id": KB, "phrase": "Apples"}),
    ("knowledge_health", {}),
    ("rag_health", {}),
    ("knowledge_create", {"name": "Схемы", "description": "made by the schema tests"}),
    ("knowledge_add", {"knowledge_id": KB, "text": "# Pears\n\nPears are green. 梨是绿色的。", "title": "Груши"}),
    ("knowledge_add_file", {"knowledge_id": KB, "content_base64": "IyBQbHVtcwoKUGx1bXMuCg==", "filename": "plums.md"}),
    ("knowledge_update", {"file_id": FILE, "text": "# Apples\n\nGreen now.", "knowledge_id": KB}),
    ("knowledge_delete", {"knowledge_id": KB, "file_id": FILE}),
    ("knowledge_rename", {"knowledge_id": KB, "description": "Фрукты и ягоды"}),
    ("knowledge_delete_base", {"knowledge_id": KB, "confirm": "Фрукты"}),
]
DUPLICATE = "400: Duplicate content detected. Please provide unique content to proceed."
FREE_FORM = {"metadata"}  # objects of any shape: a key removed from one is still a valid object


SERVERS = LaneServers()
ENV = {"OPENWEBUI_ALLOW_CREATE": "true", "OPENWEBUI_ALLOW_DELETE_BASE": "true", "OPENWEBUI_VERIFY_TLS": "false"}


def connect(lane: Lane) -> AbstractAsyncContextManager[Client]:
    return SERVERS.connect(lane, ENV)


def structured(result: CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    block = result.content[0]
    assert isinstance(block, TextContent)
    assert json.loads(block.text) == result.structured_content
    return result.structured_content


async def listed_schemas(client: Client) -> dict[str, dict[str, Any]]:
    """Every tool's output schema; an alias publishes its tool's."""
    listed = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
    assert set(listed) == EVERY_TOOL
    schemas = {}
    for name, schema in listed.items():
        assert schema is not None, name
        assert schema == listed[ALIASES.get(name, name)], name
        schemas[name] = schema
    return schemas


_VALIDATORS: dict[str, Any] = {}


def validator(schema: dict[str, Any]) -> Any:
    """A validator for `schema`, after checking the schema itself against its meta-schema (once per schema)."""
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        jsonschema = pytest.importorskip("jsonschema")
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _VALIDATORS[key] = cls(schema)
    return _VALIDATORS[key]


def valid(schema: dict[str, Any], instance: object) -> bool:
    return bool(validator(schema).is_valid(instance))


_RESULTS: dict[str, tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]] = {}


async def results() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The listed schemas and one real successful result of every tool (computed once per module)."""
    if not _RESULTS:
        async with connect(Lane()) as client:
            schemas = await listed_schemas(client)
            bodies = {}
            for tool, arguments in CALLS:
                result = await client.call_tool(tool, arguments)
                assert result.is_error is False, (tool, result.content)
                bodies[tool] = structured(result)
        _RESULTS["ok"] = schemas, bodies
    return _RESULTS["ok"]


def without_each_key(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key in body:
        yield key, {k: v for k, v in body.items() if k != key}


def nested_objects(value: object, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object inside a result (not the result itself), with its path; free-form objects left out."""
    children: list[tuple[str, object]] = []
    if isinstance(value, dict):
        children = [(f"{path}.{key}", child) for key, child in value.items() if key not in FREE_FORM]
    elif isinstance(value, list):
        children = [(f"{path}[{index}]", child) for index, child in enumerate(value)]
    for child_path, child in children:
        if isinstance(child, dict):
            yield child_path, child
        yield from nested_objects(child, child_path)


# -- results ------------------------------------------------------------------------------------------------------


async def test_every_tools_real_result_validates() -> None:
    schemas, bodies = await results()
    assert set(bodies) == EVERY_TOOL
    for tool, body in bodies.items():
        assert valid(schemas[tool], body), tool


async def test_every_field_of_a_result_is_required() -> None:
    schemas, bodies = await results()
    for tool, body in bodies.items():
        result_branch = schemas[tool]["anyOf"][0]
        assert set(result_branch["required"]) == set(body), tool
        for key, lacking in without_each_key(body):
            assert not valid(schemas[tool], lacking), f"{tool} accepts a result without {key!r}"


async def test_list_items_require_their_fields_too() -> None:
    schemas, bodies = await results()
    checked = 0
    for tool, body in bodies.items():
        for path, obj in nested_objects(body):
            if not path.endswith("]"):
                continue  # health's capabilities and controls: described in docs/tools.md, not in tools/list
            for key in list(obj):
                broken = copy.deepcopy(body)
                target: Any = broken
                for step in path.replace("[", ".[").strip(".").split("."):
                    target = target[int(step[1:-1])] if step.startswith("[") else target[step]
                del target[key]
                assert not valid(schemas[tool], broken), f"{tool} accepts {path} without {key!r}"
                checked += 1
    # knowledge_list, knowledge_files, knowledge_search and knowledge_find items.
    assert checked > 40


async def test_an_empty_object_is_not_a_result() -> None:
    schemas, _ = await results()
    for tool, schema in schemas.items():
        assert not valid(schema, {}), tool
        assert not valid(schema, {"ok": True}), tool


def declared_types(schema: object) -> list[object]:
    if isinstance(schema, dict):
        return ([schema["type"]] if "type" in schema else []) + [
            found for value in schema.values() for found in declared_types(value)
        ]
    if isinstance(schema, list):
        return [found for value in schema for found in declared_types(value)]
    return []


async def test_result_schemas_say_which_fields_are_there_not_their_types() -> None:
    # Types cost a third of tools/list (issue 13's budget) and are given in docs/tools.md; only the top-level
    # "object" that MCP requires remains.
    schemas, bodies = await results()
    for tool, schema in schemas.items():
        assert schema["type"] == "object", tool
        assert declared_types(schema["anyOf"]) == [], tool
    listing = bodies["knowledge_list"]
    assert valid(schemas["knowledge_list"], {**listing, "items": [{**listing["items"][0], "description": None}]})


# -- errors -------------------------------------------------------------------------------------------------------


async def test_every_tools_real_error_bodies_validate() -> None:
    lane = Lane()
    lane.fail(answer(500, {"detail": "Internal Server Error"}), path="*")
    failures: dict[str, list[dict[str, Any]]] = {}
    async with connect(lane) as client:
        schemas = await listed_schemas(client)
        for tool, arguments in CALLS:
            result = await client.call_tool(tool, arguments)
            assert result.is_error is True, tool
            failures.setdefault(tool, []).append(structured(result))
    # Richer bodies: a write that failed after its upload (stage, file_id, outcome), a duplicate (existing_file_id),
    # an id outside the allowlist's reach, and a malformed argument.
    lane = Lane()
    attach = f"/api/v1/knowledge/{KB}/file/add"
    lane.fail(answer(500, {"detail": "Internal Server Error"}), method="POST", path=attach, times=1)
    lane.fail(answer(400, {"detail": DUPLICATE}), method="POST", path=attach, times=1)
    async with connect(lane) as client:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("knowledge_add", {"knowledge_id": KB, "text": "# Plums\n\nPurple.", "title": "Plums"}),
            ("knowledge_add", {"knowledge_id": KB, "text": "# Apples\n\nApples are red.", "title": "Again"}),
            ("knowledge_files", {"knowledge_id": "not a valid id"}),
            ("knowledge_get_file", {"file_id": "ffffffff-0000-4000-8000-000000000000"}),
            ("knowledge_delete", {"knowledge_id": KB_OTHER, "file_id": FILE}),
            ("knowledge_rename", {"knowledge_id": KB, "name": " "}),
            ("knowledge_search", {"query": 42}),
        ]
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            assert result.is_error is True, tool
            failures.setdefault(tool, []).append(structured(result))
    assert set(failures) == EVERY_TOOL
    every = [body for bodies in failures.values() for body in bodies]
    for field in ("http_status", "stage", "file_id", "outcome", "existing_file_id"):
        assert any(body[field] is not None for body in every), f"no error body here carries {field}"
    assert any(body["code"] == "duplicate_content" for body in failures["knowledge_add"])
    for tool, bodies in failures.items():
        for body in bodies:
            ErrorBody.model_validate(body)
            assert valid(schemas[tool], body), (tool, body)


async def test_every_error_code_stage_and_outcome_validates() -> None:
    schemas, _ = await results()
    stages: list[Stage | None] = [None, *get_args(Stage)]
    outcomes: list[Outcome | None] = [None, *get_args(Outcome)]
    for code in get_args(ErrorCode):
        for index, stage in enumerate(stages):
            body = ErrorBody(
                ok=False,
                code=code,
                message="what happened and what to do",
                http_status=None if index % 2 else 502,
                retryable=bool(index % 2),
                stage=stage,
                file_id=None if stage is None else "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d",
                outcome=outcomes[index % len(outcomes)],
                existing_file_id=None if index % 3 else "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d",
            ).model_dump(mode="json")
            for tool, schema in schemas.items():
                assert valid(schema, body), (tool, code, stage)


async def test_the_error_branch_admits_no_success() -> None:
    schemas, bodies = await results()
    for tool, schema in schemas.items():
        error_branch = {**schema, "anyOf": schema["anyOf"][1:]}
        assert not valid(error_branch, bodies[tool]), tool
        # `code` is what tells an error body from a result (no result has one); `message` is not checked by the
        # schema, to keep tools/list inside its budget, but every body has it (test above).
        assert not valid(error_branch, {"ok": False, "message": "no code"}), tool
