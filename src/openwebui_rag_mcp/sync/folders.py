"""The base's folders by path, for a base that mirrors the folder (0.9.6+): read from Open WebUI's folder comparison,
made where missing, parents first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.app import App
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.sync.types import LocalFile


@dataclass
class Folders:
    """The base's folders by path, for a base that mirrors the folder: read from Open WebUI's folder comparison when
    a file first needs one, made where missing."""

    ids: dict[str, str] | None = None  # path -> folder id; None until read

    async def read(self, app: App, knowledge_id: str, local: list[LocalFile]) -> list[str]:
        """Ask Open WebUI's comparison (`sync/diff`, which needs write access) for the folders; the paths it would
        make, parents first."""
        to_create, self.ids = normalize.folder_tree(await app.client.sync_diff(knowledge_id, manifest(local)))
        return to_create

    async def id_of(self, app: App, knowledge_id: str, path: str) -> str | None:
        """The id of the folder at `path` (None: the top of the base), made with its missing parents first."""
        if not path:
            return None
        if self.ids is None:
            await self.read(app, knowledge_id, [])
        assert self.ids is not None
        if path not in self.ids:
            parent, _, name = path.rpartition("/")
            parent_id = await self.id_of(app, knowledge_id, parent)
            async with app.locks.hold(knowledge_id) as lease:
                if path in self.ids:  # made by another of this run's uploads while this one waited its turn
                    return self.ids[path]
                lease.check()  # a lost lease: another replica may be writing to the base
                try:
                    self.ids[path] = await app.client.create_folder(knowledge_id, name, parent_id)
                except ToolFailure:
                    # Made meanwhile by someone else (Open WebUI answers 400 to a name taken at that level)?
                    await self.read(app, knowledge_id, [])
                    if path not in self.ids:
                        raise
        return self.ids[path]


def manifest(local: Sequence[LocalFile]) -> list[dict[str, Any]]:
    """The files as Open WebUI's folder comparison (`sync/diff`) takes them: name, folder, checksum, size."""
    return [
        {"filename": file.relative.rpartition("/")[2], "path": file.folder, "checksum": file.digest, "size": file.size}
        for file in local
    ]


def with_parents(path: str) -> list[str]:
    """ "a/b/c" -> ["a", "a/b", "a/b/c"]; "" (the top of the base) -> []."""
    parts = path.split("/") if path else []
    return ["/".join(parts[: depth + 1]) for depth in range(len(parts))]
