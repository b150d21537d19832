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
    ("version", "links", "completes"),
    [
        ("0.9.5", False, False),
        ("0.9.6", True, False),
        ("0.10.0", True, False),
        ("0.10.2", True, False),
        ("0.12.3", True, False),
        ("0.12.4", True, True),
        ("dev", False, False),
    ],
)
def test_uploads_link_themselves_where_the_file_says_when_it_is_indexed(
    version: str, links: bool, completes: bool
) -> None:
    """From 0.9.6 the file's `meta.collection_name` says it is indexed into the base; only from 0.12.4 is
    "completed" that late too. An unreadable version is taken to be neither."""
    release = Release.parse(version)
    assert release.links_on_upload is links
    assert release.completes_when_linked is completes


@pytest.mark.parametrize(
    ("version", "checked"), [("0.6.43", False), ("0.9.4", False), ("0.9.5", True), ("0.12.4", True), ("dev", False)]
)
def test_redirect_targets_are_re_checked_from_0_9_5_and_never_on_an_unreadable_version(
    version: str, checked: bool
) -> None:
    assert Release.parse(version).redirects_checked is checked
