"""docs/compatibility.md's table says what the release detection and the live suite establish.

The live suite runs against `devtools.openwebui_local.RELEASES` and asserts each release's documented behaviour
(for example the refusal of knowledge_delete); this test keeps the table in step with both.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devtools.openwebui_local import RELEASES
from openwebui_rag_mcp.compat import Release

COMPATIBILITY = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"


def table() -> dict[str, list[str]]:
    text = COMPATIBILITY.read_text(encoding="utf-8")
    match = re.search(r"<!-- compat:begin -->(.*?)<!-- compat:end -->", text, re.S)
    assert match, "docs/compatibility.md has no compatibility table between the markers"
    rows: dict[str, list[str]] = {}
    for line in match.group(1).strip().splitlines()[2:]:  # skip the header and the rule
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_the_table_lists_exactly_the_releases_the_live_suite_runs() -> None:
    assert sorted(table(), key=lambda v: Release.parse(v).parts) == sorted(
        RELEASES, key=lambda v: Release.parse(v).parts
    )


@pytest.mark.parametrize("version", RELEASES)
def test_each_row_matches_the_detected_capabilities(version: str) -> None:
    detected_as, works, different = table()[version]
    release = Release.parse(version)
    caps = release.capabilities
    assert ("paged lists" in detected_as) is caps.paged_lists
    assert ("files nested in the base" in detected_as) is (not caps.files_endpoint)
    delete_refused = "`knowledge_delete` is refused" in different
    assert delete_refused is (not caps.keep_file_on_remove)
    assert ("except `knowledge_delete`" in works) is delete_refused
    assert ("upload metadata is ignored" in different) is (not caps.upload_metadata)
    assert ("no status to poll" in different) is (not caps.process_status)


@pytest.mark.parametrize(
    ("version", "links"), [("0.10.2", False), ("0.11.0", False), ("0.12.3", False), ("0.12.4", True), ("dev", False)]
)
def test_uploads_link_themselves_only_where_completed_means_indexed_and_linked(version: str, links: bool) -> None:
    """Before 0.12.4 a self-linked upload is "completed" before it is indexed into the base; an unreadable version
    is not taken to be 0.12.4."""
    assert Release.parse(version).links_on_upload is links
