"""The folders of a base (0.9.6+, `/api/v1/knowledge/{id}/files?directory_id=`, `.../dirs/create`), the walk down
them, and Open WebUI's own folder comparison (`.../sync/diff`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client.transport import ClientBase, Json, _object, segment
from openwebui_rag_mcp.errors import ToolFailure

FOLDERS_MAX = 5_000  # folders read in one walk: past it, the tree is not a base's (or it loops)


class FoldersAPI(ClientBase):
    """Folders inside a base."""

    async def folder(
        self, knowledge_id: str, folder_id: str, *, documents: bool = True
    ) -> tuple[list[Mapping[str, Any]], list[normalize.Subfolder]]:
        """One folder of a base (0.9.6+; `folder_id` "" is its top): the documents directly in it (every page; none
        with `documents=False`, which reads one page) and the folders directly under it."""
        path = f"api/v1/knowledge/{segment(knowledge_id)}/files"
        params = {"directory_id": folder_id}
        first = await self._send("GET", path, params={**params, "page": 1})
        subfolders = normalize.subfolders(first)
        if not documents:
            return [], subfolders
        items, _ = await self._all_pages(path, "the documents of a folder", first_answer=first, params=params)
        return items, subfolders

    async def folder_documents(
        self, knowledge_id: str, start: list[tuple[str, str]], room: int | None = None
    ) -> list[tuple[str, str]]:
        """(file_id, path of its folder) of every document in the folders `start` ((folder id, path); "" is the top of
        the base) and every folder below them, from the folder lists (0.9.6+). Past `room` documents the walk stops
        and returns what it found (more than `room`: the caller says why that is too many); a tree that loops or
        passes `FOLDERS_MAX` folders is `unexpected_response`."""
        found: list[tuple[str, str]] = []
        pending, seen = list(start), {folder_id for folder_id, _ in start}
        while pending:
            folder_id, path = pending.pop()
            items, subfolders = await self.folder(knowledge_id, folder_id)
            found += [(record.file_id, path) for record in normalize.file_records(items)]
            if room is not None and len(found) > room:
                return found
            for subfolder in subfolders:
                if subfolder.folder_id in seen or len(seen) >= FOLDERS_MAX:
                    raise ToolFailure(
                        "unexpected_response",
                        f"the folders of knowledge base {knowledge_id} loop or number more than {FOLDERS_MAX:,}; "
                        "refused rather than read without end",
                    )
                seen.add(subfolder.folder_id)
                pending.append((subfolder.folder_id, f"{path}/{subfolder.name}".lstrip("/")))
        return found

    # -- writes (never retried; the caller holds the write lock) ---------------------------------------------

    async def sync_diff(self, knowledge_id: str, manifest: Sequence[Mapping[str, Any]]) -> Json:
        """Open WebUI's own comparison of a folder with a base (0.9.6+; needs write access, changes nothing)."""
        path = f"api/v1/knowledge/{segment(knowledge_id)}/sync/diff"
        return await self._send("POST", path, json_body={"manifest": manifest})

    async def create_folder(self, knowledge_id: str, name: str, parent_id: str | None) -> str:
        """A folder in a base (0.9.6+), under `parent_id` or at the top; its id."""
        path = f"api/v1/knowledge/{segment(knowledge_id)}/dirs/create"
        answer = _object(await self._send("POST", path, json_body={"name": name, "parent_id": parent_id}), "a folder")
        folder_id = answer.get("id")
        if not isinstance(folder_id, str) or not folder_id:
            raise normalize.unexpected("a folder without an id")
        return folder_id
