"""Citations on search hits against a real Open WebUI of every release (issue 17, part 1): the page of a PDF hit,
the lines a fragment covers (which `knowledge_get_file` then reads), the link, and the title and source given at
upload; a plain user's search cites only what that user may read."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance, User
from openwebui_rag_mcp.compat import Release
from tests.live import documents
from tests.live.documents import one_line
from tests.live.stdio import Session, stdio_session

pytestmark = pytest.mark.anyio

PUBLIC = "https://chat.example.com"
# In the admin's private document only: if it shows up in the plain user's output, a citation leaked it.
LEAK_MARK = "vorthanquel"


async def hit_with(server: Session, file_id: str, phrase: str) -> dict[str, object]:
    """The hit inside `file_id` whose text holds `phrase` (a search scoped to the document, so ranking cannot lose
    it)."""
    found = await server.ok("knowledge_search", {"query": phrase, "file_ids": [file_id], "top_k": 10})
    hits = [hit for hit in found["results"] if one_line(phrase) in one_line(str(hit["text"]))]
    assert hits, found
    first: dict[str, object] = hits[0]
    return first


async def lines_of(server: Session, file_id: str, hit: dict[str, object]) -> str:
    start, end = hit["start_line"], hit["end_line"]
    assert isinstance(start, int), hit
    assert isinstance(end, int), hit
    assert start <= end
    read = await server.ok("knowledge_get_file", {"file_id": file_id, "start_line": start, "end_line": end})
    return " ".join(line.partition(": ")[2] for line in str(read["text"]).split("\n"))


async def test_hits_cite_their_page_lines_link_title_and_source(live_openwebui: Instance) -> None:
    tag = uuid.uuid4().hex[:10]
    knowledge_id = owui.create_knowledge(live_openwebui, f"citations-{tag}", "pages, lines and links")
    pdf_phrase = f"The zanthorpe pump {tag} needs forty quills of oil"
    note_phrase = f"The marlowind gate {tag} opens at dawn"
    note = "\n".join(["# Gates", "", "The first gate is old.", "", "## Marlowind", note_phrase, "It closes at dusk."])
    async with stdio_session(live_openwebui, OPENWEBUI_PUBLIC_URL=PUBLIC) as server:
        added = await server.ok(
            "knowledge_add_file",
            {
                "knowledge_id": knowledge_id,
                "content_base64": base64.b64encode(documents.two_page_pdf(pdf_phrase)).decode(),
                "filename": f"manual-{tag}.pdf",
            },
        )
        pdf_id = str(added["file_id"])
        written = await server.ok(
            "knowledge_add",
            {
                "knowledge_id": knowledge_id,
                "title": f"Gates {tag}",
                "text": note,
                "metadata": {"source": f"https://wiki.example.com/gates/{tag}"},
            },
        )
        note_id = str(written["file_id"])

        on_page = await hit_with(server, pdf_id, pdf_phrase)
        assert on_page["page"] == 2, on_page  # pypdf's page 1 (from 0)
        assert on_page["link"] == f"{PUBLIC}/api/v1/files/{pdf_id}/content#page=2"
        assert one_line(pdf_phrase) in one_line(await lines_of(server, pdf_id, on_page))

        in_note = await hit_with(server, note_id, note_phrase)
        assert in_note["page"] is None
        assert in_note["link"] == f"{PUBLIC}/api/v1/files/{note_id}/content"
        if Release.parse(live_openwebui.version).capabilities.upload_metadata:
            assert (in_note["title"], in_note["source"]) == (f"Gates {tag}", f"https://wiki.example.com/gates/{tag}")
        else:  # 0.6.5 keeps no upload metadata: the filename stands for both
            assert (in_note["title"], in_note["source"]) == (written["filename"], written["filename"])
        assert note_phrase in await lines_of(server, note_id, in_note)

        # The same through a search of the whole base, and the exact search links the same document.
        found = await server.ok("knowledge_search", {"query": note_phrase, "knowledge_ids": [knowledge_id]})
        assert all(hit["link"] and hit["start_line"] for hit in found["results"]), found
        exact = await server.ok("knowledge_find", {"knowledge_id": knowledge_id, "phrase": note_phrase})
        assert [(m["file_id"], m["line"], m["link"]) for m in exact["matches"]] == [
            (note_id, 6, f"{PUBLIC}/api/v1/files/{note_id}/content")
        ]


async def test_a_plain_users_citations_stay_within_what_it_may_read(live_openwebui: Instance, live_user: User) -> None:
    inst, tag = live_openwebui, uuid.uuid4().hex[:8]
    words = f"quorrel lantern {tag}"
    private = owui.create_knowledge(inst, f"cite-private-{tag}", "the admin's, shared with nobody", private=True)
    private_file = owui.upload_text(
        inst, "vault.md", f"# Vault\n\nThe {words} is kept here. Word: {LEAK_MARK}.", {"source": LEAK_MARK}
    )
    owui.add_file(inst, private, private_file)
    shared = owui.create_knowledge(inst, f"cite-shared-{tag}", "the admin's, readable by the user", private=True)
    shared_file = owui.upload_text(inst, "hall.md", f"# Hall\n\nThe {words} hangs in the hall.")
    owui.add_file(inst, shared, shared_file)
    owui.share_read(inst, shared, live_user)

    async with stdio_session(inst, api_key=live_user.api_key) as server:
        found = await server.ok("knowledge_search", {"query": words, "knowledge_ids": None})
        named = await server.call("knowledge_search", {"query": words, "knowledge_ids": [private]})
    shown = json.dumps([found, named])
    assert LEAK_MARK not in shown
    assert private_file not in shown
    assert named[0] is True  # the private base is not_found for this key, on every release
    assert named[1]["code"] == "not_found"
    hits = [hit for hit in found["results"] if hit["file_id"] == shared_file]
    assert hits, found
    for hit in hits:  # over stdio, links use OPENWEBUI_URL; lines where Open WebUI lets the user read the file
        assert hit["link"] == f"{inst.url}/api/v1/files/{shared_file}/content"
