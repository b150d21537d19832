"""knowledge_add_file's logic: where the bytes may come from (allowed directories, links and '..' resolved first, no
directories, FIFOs or oversized files, base64 checked), all refused before any request; and the upload sequence
with Open WebUI's extraction, an empty extraction failing at the processing stage with the upload removed."""

from __future__ import annotations

import base64
import dataclasses
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from openwebui_rag_mcp import writes
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.localfiles import FileSource
from openwebui_rag_mcp.writes import add_file
from tests.conftest import make_settings, mock_transport, new_router
from tests.support.writes import FILE, KB, Upstream, answer, full_file

pytestmark = pytest.mark.anyio

SECRET_CONTENT = "quarterly figures: 4711"


@pytest.fixture
def upstream() -> Upstream:
    return Upstream(new_router())


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "report.md").write_text(f"# Отчёт\n\n{SECRET_CONTENT}\n", encoding="utf-8")
    return folder


@asynccontextmanager
async def app_for(upstream: Upstream, allowed: Path | None, **env: str) -> AsyncIterator[App]:
    settings = make_settings(**({"OPENWEBUI_UPLOAD_DIRS": str(allowed)} if allowed else {}), **env)
    client = OpenWebUIClient(settings, transport=mock_transport(upstream.router))
    try:
        yield App(settings=settings, client=client)
    finally:
        await client.aclose()


async def refused(upstream: Upstream, allowed: Path | None, source: FileSource, **env: str) -> ToolFailure:
    async with app_for(upstream, allowed, **env) as app:
        with pytest.raises(ToolFailure) as caught:
            await add_file(app, KB, source)
    failure = caught.value
    assert (failure.stage, failure.outcome, failure.request_sent) == ("upload", "not_applied", False)
    assert SECRET_CONTENT not in failure.message
    assert [call.request.url.path for call in upstream.router.calls] == []  # refused before any request
    return failure


def local(path: Path | str) -> FileSource:
    return FileSource(path=str(path), content_base64=None, filename=None)


async def test_a_file_outside_the_allowed_directories(upstream: Upstream, allowed: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text(SECRET_CONTENT)
    failure = await refused(upstream, allowed, local(outside))
    assert (failure.code, "OPENWEBUI_UPLOAD_DIRS" in failure.message) == ("forbidden", True)


async def test_dot_dot_is_resolved_before_the_check(upstream: Upstream, allowed: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.md").write_text(SECRET_CONTENT)
    failure = await refused(upstream, allowed, local(f"{allowed}/../secret.md"))
    assert failure.code == "forbidden"


async def test_a_symlink_out_of_the_directory(upstream: Upstream, allowed: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.md").write_text(SECRET_CONTENT)
    (allowed / "innocent.md").symlink_to(tmp_path / "secret.md")
    failure = await refused(upstream, allowed, local(allowed / "innocent.md"))
    assert failure.code == "forbidden"


async def test_a_directory_a_fifo_a_missing_file_and_an_oversized_one(upstream: Upstream, allowed: Path) -> None:
    (allowed / "sub").mkdir()
    os.mkfifo(allowed / "pipe")
    (allowed / "big.md").write_bytes(b"x" * 2048)
    assert (await refused(upstream, allowed, local(allowed / "sub"))).code == "invalid_argument"
    assert "directory" in (await refused(upstream, allowed, local(allowed / "sub"))).message
    assert "not a regular file" in (await refused(upstream, allowed, local(allowed / "pipe"))).message
    assert (await refused(upstream, allowed, local(allowed / "nothing.md"))).code == "not_found"
    big = await refused(upstream, allowed, local(allowed / "big.md"), OPENWEBUI_UPLOAD_MAX_BYTES="1024")
    assert (big.code, "OPENWEBUI_UPLOAD_MAX_BYTES" in big.message) == ("too_large", True)


async def test_no_directory_listed_means_no_local_files(upstream: Upstream, allowed: Path) -> None:
    failure = await refused(upstream, None, local(allowed / "report.md"))
    assert (failure.code, "OPENWEBUI_UPLOAD_DIRS" in failure.message) == ("forbidden", True)


async def test_paths_are_refused_over_http(upstream: Upstream, allowed: Path) -> None:
    async with app_for(upstream, allowed) as app:
        http_app = dataclasses.replace(app, settings=dataclasses.replace(app.settings, transport="streamable-http"))
        with pytest.raises(ToolFailure) as caught:
            await add_file(http_app, KB, local(allowed / "report.md"))
    assert caught.value.code == "forbidden"
    assert "HTTP" in caught.value.message


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (FileSource(path=None, content_base64=None, filename=None), "exactly one"),
        (FileSource(path="/x", content_base64="eA==", filename="x.md"), "exactly one"),
        (FileSource(path=None, content_base64="eA==", filename=None), "filename"),
        (FileSource(path=None, content_base64="not base64!", filename="x.md"), "not valid base64"),
        (FileSource(path=None, content_base64="", filename="x.md"), "empty"),
    ],
)
async def test_bad_base64_sources(upstream: Upstream, source: FileSource, says: str) -> None:
    failure = await refused(upstream, None, source)
    assert says in failure.message


async def test_oversized_base64_is_refused_before_decoding(upstream: Upstream) -> None:
    encoded = base64.b64encode(b"x" * 5000).decode()
    failure = await refused(upstream, None, FileSource(None, encoded, "big.csv"), OPENWEBUI_UPLOAD_MAX_BYTES="1024")
    assert failure.code == "too_large"


async def test_a_local_file_is_added_with_its_extension_and_the_extracted_size(
    upstream: Upstream, allowed: Path
) -> None:
    async with app_for(upstream, allowed) as app:
        added = await add_file(
            app, KB, local(allowed / "report.md"), title="Квартальный отчёт", metadata={"author": "Иван"}
        )
    assert (added.file_id, added.filename, added.size) == (
        FILE,
        "Квартальный_отчёт.md",
        len((allowed / "report.md").read_bytes()),
    )
    assert added.extracted_chars == len(f"# Отчёт\n\n{SECRET_CONTENT}\n")
    assert upstream.add.call_count == 1


async def test_base64_content_keeps_its_type(upstream: Upstream) -> None:
    csv = "city,country\nМосква,Россия\n北京,中国\n"
    source = FileSource(None, base64.b64encode(csv.encode()).decode(), "cities.CSV")
    async with app_for(upstream, None) as app:
        added = await add_file(app, KB, source)
    assert added.filename == "cities.csv"
    assert added.title == "cities.CSV"
    request = upstream.upload.calls.last.request
    assert b'filename="cities.csv"' in request.content
    assert b"Content-Type: text/csv" in request.content


async def test_nothing_extracted_fails_at_processing_and_removes_the_upload(upstream: Upstream) -> None:
    upstream.file.side_effect = answer(200, json=full_file(FILE, "", "scan.pdf"))
    source = FileSource(None, base64.b64encode(b"%PDF-1.4 image only").decode(), "scan.pdf")
    async with app_for(upstream, None) as app:
        with pytest.raises(ToolFailure) as caught:
            await add_file(app, KB, source)
    failure = caught.value
    assert (failure.code, failure.stage, failure.outcome, failure.file_id) == (
        "upstream_error",
        "process",
        "not_applied",
        None,
    )
    assert "extracted no text" in failure.message
    assert upstream.delete.call_count == 1
    assert upstream.add.call_count == 0


async def test_before_0_6_23_the_text_comes_from_the_upload_answer(allowed: Path) -> None:
    """0.6.5 processes during the upload and answers with the extracted text: the file is not read again."""
    upstream = Upstream(new_router(), release="0.6.5")
    async with app_for(upstream, allowed) as app:
        added = await add_file(app, KB, local(allowed / "report.md"))
    assert added.extracted_chars == len(f"# Отчёт\n\n{SECRET_CONTENT}\n")
    assert f"GET /api/v1/files/{FILE}" not in upstream.requests()
    assert upstream.add.call_count == 1


async def test_before_0_6_23_an_upload_answered_without_text_is_removed(allowed: Path) -> None:
    upstream = Upstream(new_router(), release="0.6.5")

    def without_text(request: httpx.Request) -> httpx.Response:
        body = upstream._upload(request).json()
        body["data"]["content"] = ""
        return httpx.Response(200, json=body)

    upstream.upload.side_effect = without_text
    async with app_for(upstream, allowed) as app:
        with pytest.raises(ToolFailure) as caught:
            await add_file(app, KB, local(allowed / "report.md"))
    assert (caught.value.stage, caught.value.outcome) == ("process", "not_applied")
    assert "extracted no text" in caught.value.message
    assert upstream.delete.call_count == 1
    assert upstream.add.call_count == 0


def test_upload_names_are_bounded_and_keep_the_extension() -> None:
    assert writes.upload_name("отчёт.PDF", None) == "отчёт.pdf"
    assert writes.upload_name("../../etc/passwd", None).endswith("passwd") is True
    long = writes.upload_name("報告" * 200 + ".docx", None)
    assert long.endswith(".docx")
    assert len(long.encode()) <= writes.FILENAME_MAX_BYTES
    assert writes.upload_name("no-extension", "Title") == "Title"
    assert writes.upload_name("a.tar.gz", None) == "a_tar.gz"
