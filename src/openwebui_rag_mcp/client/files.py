"""The Files API (`/api/v1/files/...`) and the signed-in user: upload, read, re-text and delete files, find files
by name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client.transport import ClientBase, Json, _object, segment
from openwebui_rag_mcp.errors import ToolFailure


class FilesAPI(ClientBase):
    """Files, apart from the bases they are in."""

    async def file(self, file_id: str) -> Json:
        return await self._send("GET", f"api/v1/files/{segment(file_id)}")

    # -- writes (never retried; the caller holds the write lock) ---------------------------------------------

    async def upload(
        self, filename: str, content: bytes, metadata: Mapping[str, Any], content_type: str = "text/markdown"
    ) -> Mapping[str, Any]:
        answer = await self._send(
            "POST",
            "api/v1/files/",
            files={"file": (filename, content, content_type)},
            data={"metadata": json.dumps(metadata, ensure_ascii=False)},
        )
        return _object(answer, "an uploaded file")

    async def delete_file(self, file_id: str) -> Json:
        """Delete a file this server uploaded and could not add to a base."""
        return await self._send("DELETE", f"api/v1/files/{segment(file_id)}")

    async def process_status(self, file_id: str) -> str:
        answer = _object(await self._send("GET", f"api/v1/files/{segment(file_id)}/process/status"), "a status")
        status = answer.get("status")
        if not isinstance(status, str):
            raise normalize.unexpected("a processing status without a status")
        return status

    async def update_file_text(self, file_id: str, text: str) -> Json:
        path = f"api/v1/files/{segment(file_id)}/data/content/update"
        return await self._send("POST", path, json_body={"content": text})

    async def user_id(self) -> str:
        """The id of the user the current credential belongs to."""
        answer = _object(await self._send("GET", "api/v1/auths/"), "the signed-in user")
        user_id = answer.get("id")
        if not isinstance(user_id, str) or not user_id:
            raise normalize.unexpected("a user without an id")
        return user_id

    async def files_named(self, filename: str) -> list[Mapping[str, Any]]:
        """The files named exactly `filename` that the credential can list (its own; an admin's: everyone's), without
        their text. Open WebUI matches a glob, so the name's wildcard characters are escaped."""
        pattern = "".join(f"[{char}]" if char in "*?[" else char for char in filename)
        try:
            answer = await self._send(
                "GET", "api/v1/files/search", params={"filename": pattern, "content": "false", "limit": 1000}
            )
        except ToolFailure as failure:
            if failure.code == "not_found":  # Open WebUI answers 404 when no file matches
                return []
            raise
        if not isinstance(answer, list):
            raise normalize.unexpected("a file search")
        return [item for item in answer if isinstance(item, dict) and item.get("filename") == filename]
