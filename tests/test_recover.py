"""The `recover` subcommand (`recover.py`): settles now what dead writers with this key left, and says what it did."""

from __future__ import annotations

import time

import pytest

from openwebui_rag_mcp import journal as journal_module
from openwebui_rag_mcp.journal import Record
from openwebui_rag_mcp.recover import recover_command
from tests.conftest import make_settings, mock_transport, new_router
from tests.support.inflight import server_journal
from tests.support.writes import (
    FILE,
    KB,
    Upstream,
    answer,
)

pytestmark = pytest.mark.anyio


async def test_the_recover_command_settles_and_says_what_it_did() -> None:
    upstream = Upstream(new_router())
    journal, owner = server_journal()
    now = time.time()
    here = journal_module.this_host()
    await journal._store.put(Record("r1", owner, KB, "note.md", 5, "0" * 64, now, 0.0, here, 1, "x", FILE))
    await journal._store.put(Record("r2", "b" * 64, KB, "other.md", 5, "0" * 64, now, 0.0, here, 1, "x", "f-2"))
    lines: list[str] = []
    code = await recover_command(make_settings(), lines.append, transport=mock_transport(upstream.router))
    assert code == 0, lines
    assert upstream.delete.call_count == 1
    assert any(line.startswith("removed 'note.md'") for line in lines), lines
    assert any("1 other key(s)" in line for line in lines), lines
    assert lines[-1] == "done: 1 settled, 0 left"
    assert [r.id for r in await journal._store.records("b" * 64)] == ["r2"]  # another key's: not touched
    upstream.files.side_effect = answer(500, text="down")
    await journal._store.put(Record("r3", owner, KB, "note.md", 5, "0" * 64, now, 0.0, here, 1, "x", FILE))
    lines.clear()
    code = await recover_command(make_settings(), lines.append, transport=mock_transport(upstream.router))
    assert code == 1, lines
    assert lines[-1] == "done: 0 settled, 1 left"
