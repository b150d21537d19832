"""The README's demo searches against the demo base, seeded the way `./dev setup` seeds it, over stdio.

`./dev setup` runs `python -m devtools.openwebui_local seed`, which is `seed_demo`; `./dev inspect` then searches
"yellow bananas" (or its argument) with `knowledge_search`. Each example in `tests/support/demo.py` must put the
document a person would expect first. That table is the README's list of examples: when the README changes an
example, this test fails until the table follows (tests/test_fake_embeddings.py ranks the same table offline).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance
from tests.live.stdio import stdio_session
from tests.support.demo import OTHER_SEARCHES, README_SEARCHES, shown_in_readme

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_table_is_the_readme_examples() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    missing = [query for query in README_SEARCHES if not shown_in_readme(query, readme)]
    assert not missing, f"README.md no longer shows these demo searches; update README_SEARCHES: {missing}"
    dev = (REPO_ROOT / "dev").read_text(encoding="utf-8")
    assert "query=${2:-yellow bananas}" in dev, "`./dev inspect` searches something else now; update README_SEARCHES"
    assert set(README_SEARCHES.values()) | set(OTHER_SEARCHES.values()) <= set(owui.DEMO_DOCS)


@pytest.fixture(scope="module")
def demo_base(live_openwebui: Instance) -> Iterator[str]:
    """The demo base's id, seeded exactly as `./dev setup` seeds it (`seed_demo` returns None if it already exists).

    A base this fixture created is deleted afterwards: its documents are near copies of other live tests' ones
    (test_live_read's Moscow text differs by a stop word), and those tests search every base of the session."""
    knowledge_id = owui.seed_demo(live_openwebui)
    if knowledge_id is None:
        with owui.client(live_openwebui) as http:
            answer = http.get("/api/v1/knowledge/").json()
        bases = answer["items"] if isinstance(answer, dict) else answer
        yield next(str(base["id"]) for base in bases if base.get("name") == owui.DEMO_BASE)
        return
    try:
        yield knowledge_id
    finally:
        owui.delete_knowledge(live_openwebui, knowledge_id)


async def test_demo_searches_put_the_expected_document_first(live_openwebui: Instance, demo_base: str) -> None:
    async with stdio_session(live_openwebui) as server:
        files = await server.ok("knowledge_files", {"knowledge_id": demo_base})
        file_ids = {item["filename"]: item["file_id"] for item in files["items"]}
        assert set(file_ids) == set(owui.DEMO_DOCS)
        names = {file_id: filename for filename, file_id in file_ids.items()}

        wrong: dict[str, list[str]] = {}
        for query, expected in {**README_SEARCHES, **OTHER_SEARCHES}.items():
            # Only the demo base: other live tests create bases with similar documents in the same Open WebUI (after
            # `./dev setup` the demo base is the only one, so `./dev inspect`'s search over all bases is the same).
            found = await server.ok("knowledge_search", {"query": query, "knowledge_ids": [demo_base]})
            assert found["count"] == len(found["results"]) > 0, (query, found)
            ranking = [names.get(result["file_id"], str(result["file_id"])) for result in found["results"]]
            first = found["results"][0]
            # Seeded without upload metadata: every release gives the filename as the title.
            if ranking[0] != expected or first["title"] != expected or first["knowledge_id"] != demo_base:
                wrong[query] = [f"expected {expected}", f"title {first['title']!r}", *ranking]
        assert not wrong, f"Open WebUI {live_openwebui.version}: first hits not as expected: {wrong}"
