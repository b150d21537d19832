"""The normalizer: every known Open WebUI answer shape to this server's result models, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.models import Chunk
from tests.conftest import fixture_json

BANANA = "## Bananas  \nBananas are long yellow fruits. They are rich in potassium."
APPLE = "# Apples  \nApples are red or green fruits that grow on trees."
FRUIT_FILE = "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
NOISE = {"embedding_config", "_chunk_hash", "created_by", "embedding", "embeddings", "vector", "hash", "file_hash"}
PROMOTED = {"file_id", "title", "source", "score", "page"}
CITATION = {"page", "start_line", "end_line", "link"}  # tested below and in tests/test_citations.py


def chunks(body: object, *, limit: int = 4_000, knowledge_id: str | None = None) -> list[Chunk]:
    return [hit.chunk for hit in normalize.hits(body, chunk_max_chars=limit, base=knowledge_id)]


def fields(chunk: Chunk) -> dict[str, Any]:
    """The first-class fields of a chunk, without the free-form metadata and the citation."""
    return {k: v for k, v in chunk.model_dump().items() if k != "metadata" and k not in CITATION}


# -- retrieval answers ------------------------------------------------------------------------------------------

CHUNK_CASES: list[tuple[str, object, list[dict[str, Any]], list[set[str]]]] = [
    (
        "query/collection 0.12.4, vector search",
        fixture_json("query_collection_0124.json"),
        [
            {
                "text": BANANA,
                "truncated": False,
                "chunk_id": None,
                "file_id": FRUIT_FILE,
                "knowledge_id": None,
                "title": "fruits.md",
                "source": "fruits.md",
                "score": None,
                "distance": 0.8481743931770325,
            },
            {
                "text": APPLE,
                "truncated": False,
                "chunk_id": None,
                "file_id": FRUIT_FILE,
                "knowledge_id": None,
                "title": "fruits.md",
                "source": "fruits.md",
                "score": None,
                "distance": 0.5580239295959473,
            },
        ],
        [{"content_type", "start_index", "name", "source_tag", "size", "knowledge_hint"}] * 2,
    ),
    (
        "query/collection 0.12.4, hybrid: score kept as given, even negative",
        fixture_json("query_collection_hybrid_0124.json"),
        [
            {
                "text": "Bananas are long yellow fruits. They are rich in potassium.",
                "truncated": False,
                "chunk_id": None,
                "file_id": FRUIT_FILE,
                "knowledge_id": None,
                "title": "fruits.md",
                "source": "fruits.md",
                "score": 3.4721,
                "distance": 3.4721,
            },
            {
                "text": "Apples are red or green fruits that grow on trees.",
                "truncated": False,
                "chunk_id": None,
                "file_id": FRUIT_FILE,
                "knowledge_id": None,
                "title": "fruits.md",
                "source": "fruits.md",
                "score": -0.1875,
                "distance": -0.1875,
            },
        ],
        [{"start_index", "name", "size"}] * 2,
    ),
    (
        "query/doc with ids: chunk_id from ids, duplicates kept",
        fixture_json("query_doc_0124.json"),
        [
            {
                "text": BANANA,
                "truncated": False,
                "chunk_id": "6f1e0c52-9a7b-4c3d-8e2f-1a0b9c8d7e6f",
                "file_id": FRUIT_FILE,
                "knowledge_id": None,
                "title": "fruits.md",
                "source": "fruits.md",
                "score": None,
                "distance": 0.8481743931770325,
            },
            {
                "text": BANANA,
                "truncated": False,
                "chunk_id": "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d",
                "file_id": FRUIT_FILE,
                "knowledge_id": None,
                "title": "fruits.md",
                "source": "fruits.md",
                "score": None,
                "distance": 0.8481743931770325,
            },
        ],
        [{"name", "start_index"}] * 2,
    ),
    (
        "query/collection 0.6.5: Cyrillic and CJK intact, stringified upload metadata read",
        fixture_json("query_collection_065.json"),
        [
            {
                "text": "Квартальный отчёт: выручка выросла на 12 %.",
                "truncated": False,
                "chunk_id": None,
                "file_id": "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d",
                "knowledge_id": None,
                "title": "отчёт.md",
                "source": "отчёт.md",
                "score": None,
                "distance": 0.7312,
            },
            {
                "text": "季度报告：收入增长了百分之十二。",
                "truncated": False,
                "chunk_id": None,
                "file_id": "3b4c5d6e-7f8a-4b9c-8d0e-1f2a3b4c5d6e",
                "knowledge_id": None,
                "title": "季度报告",
                "source": "https://intranet.example/reports/q3",
                "score": None,
                "distance": 0.6024,
            },
        ],
        [
            {"name", "content_type", "size", "data", "collection_name", "start_index"},
            {"name", "content_type", "size", "data", "start_index"},
        ],
    ),
    (
        "empty result",
        {"distances": [[]], "documents": [[]], "metadatas": [[]]},
        [],
        [],
    ),
    (
        "metadatas null",
        {"distances": [[0.25]], "documents": [["plain"]], "metadatas": None},
        [
            {
                "text": "plain",
                "truncated": False,
                "chunk_id": None,
                "file_id": None,
                "knowledge_id": None,
                "title": None,
                "source": None,
                "score": None,
                "distance": 0.25,
            }
        ],
        [set()],
    ),
    (
        "metadatas and distances missing, one metadata null",
        {"documents": [["first", "second"]], "metadatas": [[None, {"file_id": "f-2"}]]},
        [
            {
                "text": "first",
                "truncated": False,
                "chunk_id": None,
                "file_id": None,
                "knowledge_id": None,
                "title": None,
                "source": None,
                "score": None,
                "distance": None,
            },
            {
                "text": "second",
                "truncated": False,
                "chunk_id": None,
                "file_id": "f-2",
                "knowledge_id": None,
                "title": None,
                "source": None,
                "score": None,
                "distance": None,
            },
        ],
        [set(), set()],
    ),
    (
        "un-nested columns",
        {"documents": ["one"], "metadatas": [{"file_id": "f-1", "title": "T"}], "distances": [0.5], "ids": [7]},
        [
            {
                "text": "one",
                "truncated": False,
                "chunk_id": "7",
                "file_id": "f-1",
                "knowledge_id": None,
                "title": "T",
                "source": None,
                "score": None,
                "distance": 0.5,
            }
        ],
        [set()],
    ),
    (
        "flat array of result objects (with and without a metadata object)",
        [
            {
                "content": "Бананы жёлтые.",
                "metadata": {"file_id": "f-1", "name": "бананы.md", "_chunk_hash": "x", "page": 3},
                "distance": 0.9,
            },
            {
                "document": "香蕉是黄色的。",
                "file_id": "f-2",
                "source": "香蕉.md",
                "distance": 0.4,
                "id": "chunk-9",
                "created_by": "u",
            },
        ],
        [
            {
                "text": "Бананы жёлтые.",
                "truncated": False,
                "chunk_id": None,
                "file_id": "f-1",
                "knowledge_id": None,
                "title": "бананы.md",
                "source": None,
                "score": None,
                "distance": 0.9,
            },
            {
                "text": "香蕉是黄色的。",
                "truncated": False,
                "chunk_id": "chunk-9",
                "file_id": "f-2",
                "knowledge_id": None,
                "title": None,
                "source": "香蕉.md",
                "score": None,
                "distance": 0.4,
            },
        ],
        [{"name"}, set()],
    ),
]


@pytest.mark.parametrize(
    ("body", "expected", "metadata_keys"),
    [pytest.param(body, expected, keys, id=name) for name, body, expected, keys in CHUNK_CASES],
)
def test_chunks(body: object, expected: list[dict[str, Any]], metadata_keys: list[set[str]]) -> None:
    result = chunks(body)
    assert [fields(chunk) for chunk in result] == expected
    assert [set(chunk.metadata) for chunk in result] == metadata_keys
    for chunk in result:
        assert not NOISE & set(chunk.metadata)
        assert not PROMOTED & set(chunk.metadata)


@pytest.mark.parametrize(
    ("metadata", "page"),
    [
        ({"page": 0, "page_label": "i", "total_pages": 3}, 1),  # pypdf counts from 0
        ({"page": "2"}, 3),  # stringified by a vector database
        ({"page": 4.0}, 5),
        ({"page_number": 7}, 7),  # unstructured counts from 1
        ({"page": -1}, None),
        ({"page": True}, None),
        ({"page": "two"}, None),
        ({"page_number": 0}, None),
        ({"page": "²"}, None),  # a digit to str.isdigit, not to int()
        ({"page": "9" * 5_000}, None),  # past int()'s digit limit
        ({"page": 10**12}, None),  # not a page
        ({}, None),
    ],
)
def test_the_page_counts_from_one_whatever_the_loader(metadata: dict[str, Any], page: int | None) -> None:
    [chunk] = chunks({"documents": [["text"]], "metadatas": [[metadata]]})
    assert chunk.page == page
    assert "page" not in chunk.metadata  # shown once, counted from 1
    assert chunk.metadata.get("page_label") == metadata.get("page_label")


def test_hits_keep_the_whole_text_and_the_documents_hash() -> None:
    body = {"documents": [["x" * 50, "short"]], "metadatas": [[{"hash": "ab" * 32}, None]]}
    hits = normalize.hits(body, chunk_max_chars=10)
    assert [(hit.text, hit.document_hash) for hit in hits] == [("x" * 50, "ab" * 32), ("short", None)]
    assert [hit.chunk.text for hit in hits] == ["x" * 10, "short"]


def test_hits_carry_the_base_of_their_document_where_it_is_certain() -> None:
    body = {"documents": [["a", "b", "c"]], "metadatas": [[{"file_id": "f1"}, {"file_id": "f2"}, None]]}
    assert [hit.chunk.knowledge_id for hit in normalize.hits(body, chunk_max_chars=10)] == [None, None, None]
    assert [hit.chunk.knowledge_id for hit in normalize.hits(body, chunk_max_chars=10, base="kb")] == ["kb"] * 3
    by_file = normalize.hits(body, chunk_max_chars=10, base={"f1": "kb1", "f2": "kb2"})
    assert [hit.chunk.knowledge_id for hit in by_file] == ["kb1", "kb2", None]


def test_metadata_values_are_kept_verbatim() -> None:
    [first, _] = chunks(fixture_json("query_collection_0124.json"))
    assert first.metadata["start_index"] == 0
    assert first.metadata["size"] == 152
    assert first.metadata["source_tag"] == "unit-test"
    assert first.metadata["knowledge_hint"] == "fruit"


def test_order_is_kept_as_given() -> None:
    body = {
        "distances": [[0.1, 0.9, 0.5]],
        "documents": [["worst first", "best", "middle"]],
        "metadatas": [[{}, {}, {}]],
    }
    result = chunks(body)
    assert [c.text for c in result] == ["worst first", "best", "middle"]
    assert [c.distance for c in result] == [0.1, 0.9, 0.5]


def test_no_chunk_id_is_invented_without_ids() -> None:
    body = fixture_json("query_collection_0124.json")
    assert all(chunk.chunk_id is None for chunk in chunks(body))


def test_knowledge_id_only_when_passed() -> None:
    body = fixture_json("query_collection_0124.json")
    assert {c.knowledge_id for c in chunks(body)} == {None}
    assert {c.knowledge_id for c in chunks(body, knowledge_id="kb-1")} == {"kb-1"}


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("x" * 10_000, 100),
        ("Ж" * 5_000, 4_000),
        ("文" * 4_001, 4_000),
        ("🍌" * 300, 101),
    ],
)
def test_huge_chunk_is_cut_to_the_budget(text: str, limit: int) -> None:
    body = {"documents": [[text, "short"]], "metadatas": [[{}, {}]], "distances": [[0.9, 0.1]]}
    big, small = chunks(body, limit=limit)
    assert big.truncated is True
    assert big.text == text[:limit]
    assert len(big.text) == limit
    assert small.truncated is False
    assert small.text == "short"


def test_chunk_exactly_at_the_budget_is_not_truncated() -> None:
    [chunk] = chunks({"documents": [["y" * 100]]}, limit=100)
    assert chunk.truncated is False
    assert len(chunk.text) == 100


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"documents": [["a", "b"]], "metadatas": [[{}]], "distances": [[0.1, 0.2]]}, id="short metadatas"),
        pytest.param({"documents": [["a"]], "metadatas": [[{}]], "distances": [[0.1, 0.2]]}, id="long distances"),
        pytest.param({"documents": [["a"]], "ids": [["1", "2"]]}, id="long ids"),
        pytest.param({"documents": "a"}, id="documents a string"),
        pytest.param({"documents": [["a"]], "distances": 0.5}, id="distances a number"),
        pytest.param({"documents": [[1]]}, id="text not a string"),
        pytest.param({"distances": [[0.1]], "metadatas": [[{}]]}, id="no documents"),
        pytest.param({"detail": "Not Found"}, id="error object"),
        pytest.param("<!doctype html><html></html>", id="HTML text"),
        pytest.param(None, id="null"),
        pytest.param(42, id="number"),
        pytest.param(["a", "b"], id="list of strings"),
        pytest.param([{"content": 5}], id="flat array with non-string text"),
    ],
)
def test_unreadable_retrieval_answers_are_unexpected_response(body: object) -> None:
    with pytest.raises(ToolFailure) as caught:
        chunks(body)
    assert caught.value.code == "unexpected_response"


# -- knowledge lists --------------------------------------------------------------------------------------------


def bases(body: object) -> list[dict[str, Any]]:
    items, _ = normalize.page(body, "the list of knowledge bases")
    return [normalize.knowledge_base(item).model_dump() for item in items]


def test_knowledge_list_flat_065_counts_nested_files() -> None:
    body = fixture_json("knowledge_list_065.json")
    items, total = normalize.page(body, "bases")
    assert total is None
    assert bases(body) == [
        {
            "knowledge_id": "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0",
            "name": "Отчёты",
            "description": "Квартальные отчёты",
            "file_count": 2,
            "updated_at": "2025-04-19T22:00:00Z",
            "write_access": None,
        },
        {
            "knowledge_id": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
            "name": "Empty",
            "description": None,
            "file_count": 0,
            "updated_at": "2025-04-21T01:46:40Z",
            "write_access": None,
        },
    ]
    assert len(items) == 2


def test_knowledge_list_items_total_0124() -> None:
    body = fixture_json("knowledge_list_0124.json")
    _, total = normalize.page(body, "bases")
    assert total == 2
    assert bases(body) == [
        {
            "knowledge_id": "c0ffee00-1111-4222-8333-444455556666",
            "name": "Fruits",
            "description": "Facts about fruit",
            "file_count": 3,
            "updated_at": "2026-10-26T07:41:40Z",
            "write_access": True,
        },
        {
            "knowledge_id": "deadbeef-7777-4888-9999-aaaabbbbcccc",
            "name": "运维手册",
            "description": None,
            "file_count": 0,
            "updated_at": "2026-10-14T17:46:40Z",
            "write_access": False,
        },
    ]


def test_knowledge_list_data_total() -> None:
    body = {"data": [{"id": "kb-a", "name": "A"}, {"id": "kb-b", "name": "B", "file_count": 4}], "total": 7}
    _, total = normalize.page(body, "bases")
    assert total == 7
    assert [b["knowledge_id"] for b in bases(body)] == ["kb-a", "kb-b"]
    assert [b["file_count"] for b in bases(body)] == [None, 4]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("<!DOCTYPE html><html><head><title>Open WebUI</title></head></html>", id="HTML"),
        pytest.param(None, id="null"),
        pytest.param(True, id="boolean"),
        pytest.param({"detail": "Not Found"}, id="error object"),
        pytest.param({"items": "x", "total": 1}, id="items a string"),
        pytest.param({"items": None, "total": 0}, id="items null"),
        pytest.param([1, 2], id="list of numbers"),
        pytest.param([["kb"]], id="list of lists"),
    ],
)
def test_unreadable_lists_are_unexpected_response(body: object) -> None:
    with pytest.raises(ToolFailure) as caught:
        normalize.page(body, "the list of knowledge bases")
    assert caught.value.code == "unexpected_response"


def test_knowledge_base_without_id_is_unexpected_response() -> None:
    with pytest.raises(ToolFailure) as caught:
        normalize.knowledge_base({"name": "no id"})
    assert caught.value.code == "unexpected_response"


# -- files ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            fixture_json("knowledge_files_0124.json")["items"][0],
            {
                "file_id": "81db7a2c-3e4f-4a5b-8c6d-7e8f9a0b1c2d",
                "title": "All about fruit",
                "filename": "fruits.md",
                "size": 152,
                "updated_at": "2026-10-26T07:36:40Z",
                "folder": None,
            },
            id="FileUserResponse 0.12.4 with a title at upload",
        ),
        pytest.param(
            fixture_json("knowledge_files_0124.json")["items"][1],
            {
                "file_id": "92ec8b3d-4f5a-4b6c-9d7e-8f9a0b1c2d3e",
                "title": "заметки.txt",
                "filename": "заметки.txt",
                "size": 4096,
                "updated_at": "2026-10-26T07:40:00Z",
                "folder": None,
            },
            id="FileUserResponse 0.12.4 without a title",
        ),
        pytest.param(
            fixture_json("knowledge_065.json")["files"][1],
            {
                "file_id": "3b4c5d6e-7f8a-4b9c-8d0e-1f2a3b4c5d6e",
                "title": "报告.md",
                "filename": "报告.md",
                "size": 1024,
                "updated_at": "2025-04-18T18:16:40Z",
                "folder": None,
            },
            id="FileModel 0.6.5",
        ),
        pytest.param(
            fixture_json("knowledge_list_065.json")[0]["files"][0],
            {
                "file_id": "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d",
                "title": "отчёт.md",
                "filename": "отчёт.md",
                "size": 2048,
                "updated_at": "2025-04-18T18:15:00Z",
                "folder": None,
            },
            id="FileMetadataResponse: name only in meta",
        ),
        pytest.param(
            {"id": "f-old", "meta": {"name": "a.md", "data": "{'title': 'Старый заголовок'}"}},
            {
                "file_id": "f-old",
                "title": "Старый заголовок",
                "filename": "a.md",
                "size": None,
                "updated_at": None,
                "folder": None,
            },
            id="stringified upload metadata",
        ),
        pytest.param(
            {"id": "f-bare", "meta": None},
            {"file_id": "f-bare", "title": None, "filename": None, "size": None, "updated_at": None, "folder": None},
            id="no meta",
        ),
        pytest.param(
            {"id": "f-deep", "filename": "b.md", "directory_path": "guides/deep", "directory_id": "d-1"},
            {
                "file_id": "f-deep",
                "title": "b.md",
                "filename": "b.md",
                "size": None,
                "updated_at": None,
                "folder": "guides/deep",
            },
            id="0.12 names the folder",
        ),
    ],
)
def test_file_item(raw: dict[str, Any], expected: dict[str, Any]) -> None:
    assert normalize.file_item(raw).model_dump() == {**expected, "status": None}  # set only in the pending list


def test_file_item_without_id_is_unexpected_response() -> None:
    with pytest.raises(ToolFailure) as caught:
        normalize.file_item({"filename": "x.md"})
    assert caught.value.code == "unexpected_response"


def test_nested_files() -> None:
    files = normalize.nested_files(fixture_json("knowledge_065.json"))
    assert [f["id"] for f in files] == ["2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d", "3b4c5d6e-7f8a-4b9c-8d0e-1f2a3b4c5d6e"]
    assert normalize.nested_files({"id": "kb", "files": []}) == []
    # A release that embeds the files always sends the list; null (0.6.42+) or nothing means another release.
    for body in ({"id": "kb", "files": None}, {"id": "kb"}, {"id": "kb", "files": "nope"}):
        with pytest.raises(ToolFailure) as caught:
            normalize.nested_files(body)
        assert caught.value.code == "unexpected_response"


FRUIT_TEXT = fixture_json("file_0124.json")["data"]["content"]


def test_file_text_whole() -> None:
    result = normalize.file_text(fixture_json("file_0124.json"), offset=0, max_chars=100_000)
    assert result.model_dump() == {
        "file_id": FRUIT_FILE,
        "title": "All about fruit",
        "filename": "fruits.md",
        "metadata": {"source_tag": "unit-test"},  # the upload metadata, title promoted out of it
        "text": FRUIT_TEXT,
        "truncated": False,
        "total_chars": len(FRUIT_TEXT),
        "offset": 0,
        "next_offset": None,
        "status": "completed",
    }


def test_file_text_pages_through_the_whole_text() -> None:
    body = fixture_json("file_0124.json")
    pieces: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = normalize.file_text(body, offset=offset, max_chars=50)
        assert page.total_chars == len(FRUIT_TEXT)
        assert page.offset == offset
        assert len(page.text) <= 50
        pieces.append(page.text)
        offset = page.next_offset
    assert "".join(pieces) == FRUIT_TEXT
    assert len(pieces) == -(-len(FRUIT_TEXT) // 50)


def test_file_text_first_page_is_truncated() -> None:
    page = normalize.file_text(fixture_json("file_0124.json"), offset=0, max_chars=10)
    assert page.text == FRUIT_TEXT[:10]
    assert page.truncated is True
    assert page.next_offset == 10


def test_file_text_cjk_counts_characters_not_bytes() -> None:
    text = "知识库" * 1_000
    body = {"id": "f-cjk", "filename": "知识.md", "data": {"content": text}, "meta": {}}
    page = normalize.file_text(body, offset=2_999, max_chars=2)
    assert page.total_chars == 3_000
    assert page.text == "库"
    assert page.next_offset is None
    first = normalize.file_text(body, offset=0, max_chars=4)
    assert first.text == "知识库知"
    assert first.next_offset == 4
    assert first.truncated is True


def test_file_text_without_content_is_empty() -> None:
    page = normalize.file_text({"id": "f-1", "data": {"status": "pending"}}, offset=0, max_chars=1000)
    assert page.text == ""
    assert page.total_chars == 0
    assert page.truncated is False
    assert page.status == "pending"


@pytest.mark.parametrize(
    "body",
    [None, "text", {"data": {"content": "no id"}}, {"id": "f-1", "data": {"content": ["not", "text"]}}],
)
def test_file_text_unreadable_is_unexpected_response(body: object) -> None:
    with pytest.raises(ToolFailure) as caught:
        normalize.file_text(body, offset=0, max_chars=10)
    assert caught.value.code == "unexpected_response"


# -- timestamps -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1793000200, "2026-10-26T07:36:40Z"),
        (1793000200.0, "2026-10-26T07:36:40Z"),
        (1793000200123, "2026-10-26T07:36:40.123000Z"),
        (1793000200 * 1_000_000_000, "2026-10-26T07:36:40Z"),
        (1745000000, "2025-04-18T18:13:20Z"),
        (None, None),
        (True, None),
        ("", None),
        ("2026-10-26T07:36:40Z", "2026-10-26T07:36:40Z"),
        ([1], None),
    ],
)
def test_iso_time(value: object, expected: str | None) -> None:
    assert normalize.iso_time(value) == expected


def test_a_comparison_asked_without_checksums_places_each_document_by_id() -> None:
    answer = {
        "added": [{"filename": "new.md", "path": "docs"}],
        "modified": [
            {"filename": "a.md", "path": "docs/deep", "stale_file_id": "f-1"},
            {"filename": "top.md", "path": "", "stale_file_id": "f-2"},
        ],
        "deleted": [{"file_id": "f-3", "filename": "elsewhere.md"}],  # somewhere not asked about: not placed
        "unmodified_count": 0,
    }
    assert normalize.compared_documents(answer) == {"f-1": "docs/deep", "f-2": ""}


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"modified": None},
        {"modified": [1]},
        {"modified": [{"path": "a"}]},
        {"modified": [{"stale_file_id": "f"}]},
    ],
)
def test_an_unreadable_comparison_is_unexpected_response(body: object) -> None:
    with pytest.raises(ToolFailure) as caught:
        normalize.compared_documents(body)
    assert caught.value.code == "unexpected_response"


@pytest.mark.parametrize(
    ("changes", "unmodified"),
    [
        ({}, 7),
        ({"added": [{"filename": "new.md", "path": ""}]}, None),
        ({"modified": [{"filename": "a.md", "path": "", "stale_file_id": "f-1"}]}, None),
        ({"deleted": [{"file_id": "f-3", "filename": "gone.md"}]}, None),
    ],
)
def test_a_comparison_tells_its_unmodified_count_only_when_nothing_else_is_to_do(
    changes: dict[str, list[dict[str, str]]], unmodified: int | None
) -> None:
    answer = {"added": [], "modified": [], "deleted": [], "unmodified_count": 7, "mkdir": [], "rmdir": []}
    assert normalize.unmodified_only(answer | changes) == unmodified


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"added": [], "modified": [], "deleted": []},
        {"added": [], "modified": None, "deleted": [], "unmodified_count": 1},
    ],
)
def test_a_comparison_without_its_counts_is_unexpected_response(body: object) -> None:
    with pytest.raises(ToolFailure) as caught:
        normalize.unmodified_only(body)
    assert caught.value.code == "unexpected_response"


def test_text_chars_counts_a_files_text_and_nothing_else() -> None:
    assert normalize.text_chars({"id": "f", "data": {"content": "Груши\n"}}) == 6
    assert normalize.text_chars({"id": "f", "data": {"content": None}}) == 0
    assert normalize.text_chars({"id": "f", "data": "not a mapping"}) == 0
    assert normalize.text_chars(["not", "a", "file"]) == 0
