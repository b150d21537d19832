"""The name scheme: keys made safe and bounded (`sync.names`)."""

from __future__ import annotations

import pytest

from openwebui_rag_mcp.sync.names import key_of

pytestmark = pytest.mark.anyio


def test_keys_are_safe_bounded_and_keep_the_extension() -> None:
    assert key_of("notes/Отчёт 2024.PDF") == ("notes_Отчёт_2024", ".pdf")
    assert key_of("README") == ("README", "")
    key, extension = key_of("深/" * 100 + "x.md")
    assert extension == ".md"
    assert len(f"{key}~{'s' * 32}~{'0' * 12}{extension}".encode()) <= 200  # with the longest source id
