"""What every tool call shares for the life of the process, and the access policy over it.

`App` holds the settings, the one Open WebUI client and the write lock. Its checks decide what a call may touch:
the allowlist (`OPENWEBUI_KNOWLEDGE_IDS`) and, on every release, that a base handed to Open WebUI's retrieval is one
the key can read through the Knowledge API (older retrieval endpoints check no access themselves).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import ID_PATTERN, Settings
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument


def check_id(value: str, what: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise invalid_argument(f"{what} {shown!r} is not a valid Open WebUI id (letters, digits, '-' and '_' only)")
    return value


def check_range(value: int, name: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise invalid_argument(f"{name} must be between {low} and {high}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class App:
    """What every tool call shares for the life of the process."""

    settings: Settings
    client: OpenWebUIClient
    write_lock: asyncio.Lock
    # Bases this process created while OPENWEBUI_ALLOW_CREATE let it: usable alongside the allowlist.
    created: set[str] = field(default_factory=set)

    def allowed_bases(self) -> list[str] | None:
        """The bases this server may touch, or None when OPENWEBUI_KNOWLEDGE_IDS does not restrict it."""
        if self.settings.knowledge_ids is None:
            return None
        return [*self.settings.knowledge_ids, *sorted(self.created - set(self.settings.knowledge_ids))]

    def check_base(self, knowledge_id: str) -> str:
        """Refuse a base outside the allowlist, the same way whether it exists or not."""
        check_id(knowledge_id, "knowledge_id")
        allowed = self.allowed_bases()
        if allowed is not None and knowledge_id not in allowed:
            raise ToolFailure(
                "not_found",
                f"knowledge base {knowledge_id} is not available through this server (OPENWEBUI_KNOWLEDGE_IDS)",
                request_sent=False,
            )
        return knowledge_id

    async def check_file(self, file_id: str) -> str:
        """Under an allowlist, a file is reachable only when an allowed base holds it."""
        check_id(file_id, "file_id")
        allowed = self.allowed_bases()
        if allowed is None:
            return file_id
        listings = await asyncio.gather(
            *(self.client.knowledge_files(base, None) for base in allowed), return_exceptions=True
        )
        for listing in listings:
            # An allowed base that is gone or unshared holds nothing; anything else is a real failure.
            if isinstance(listing, ToolFailure) and listing.code not in ("not_found", "forbidden"):
                raise listing
            if isinstance(listing, BaseException) and not isinstance(listing, ToolFailure):
                raise listing
        if not any(
            item.get("id") == file_id
            for listing in listings
            if not isinstance(listing, BaseException)
            for item in listing[0]
        ):
            raise ToolFailure(
                "not_found",
                f"file {file_id} is in none of the knowledge bases this server may read (OPENWEBUI_KNOWLEDGE_IDS)",
                request_sent=False,
            )
        return file_id
