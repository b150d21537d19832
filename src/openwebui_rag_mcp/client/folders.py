"""The folders of a base (0.9.6+, `/api/v1/knowledge/{id}/files?directory_id=`, `.../dirs/create`) and Open WebUI's
own folder comparison (`.../sync/diff`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client.transport import ClientBase, Json, _object, segment


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
