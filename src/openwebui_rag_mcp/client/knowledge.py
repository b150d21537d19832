"""The Knowledge API (`/api/v1/knowledge/...`): list, count, search and read bases and their documents; create
bases, attach, re-index and remove documents."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.client.transport import _PAGE_CONCURRENCY, ClientBase, Json, _object, log, segment
from openwebui_rag_mcp.compat import Release
from openwebui_rag_mcp.errors import ToolFailure

# The page size asked for when every document of a base is read (honoured for admins only). Each page costs Open WebUI
# a count and the base's folder list again (2,000 documents: 140 ms in one page, 172 ms in two of 1,000, 0.12.4); a
# page of 5,000 is about 5 MB of JSON.
_ADMIN_PAGE_SIZE = 5_000


class KnowledgeAPI(ClientBase):
    """Knowledge bases and the documents in them."""

    async def check_credential(self) -> None:
        """One cheap authorised read with the current credential; a `ToolFailure` when Open WebUI refuses it."""
        await self._send("GET", "api/v1/knowledge/", params={"page": 1})

    async def list_knowledge(self) -> list[Mapping[str, Any]]:
        async def read(release: Release) -> list[Mapping[str, Any]]:
            what = "the list of knowledge bases"
            if release.paged_lists:
                items, _ = await self._all_pages("api/v1/knowledge/", what)
                return items
            body = await self._send("GET", "api/v1/knowledge/")
            if isinstance(body, Mapping):  # a paged answer: this Open WebUI is newer than the version we read
                self._release_stale(release)
                items, _ = await self._all_pages("api/v1/knowledge/", what, first_answer=body)
                return items
            items, _ = normalize.page(body, what)
            return items

        return await self._per_release(read)

    async def count_knowledge(self) -> int:
        """How many bases the key can read, with one authorised request (the health check)."""
        release = await self.release()
        params = {"page": 1} if release.paged_lists else None
        items, total = normalize.page(
            await self._send("GET", "api/v1/knowledge/", params=params), "the list of knowledge bases"
        )
        return total if total is not None else len(items)

    async def search_knowledge(self, query: str) -> list[Mapping[str, Any]]:
        """Every base `GET /knowledge/search?query=` (0.6.42+) matches, in its order: all pages, or a failure.

        Open WebUI matches `%query%` with ILIKE on the name and description (0.12 also the owner's name, email and
        username), so the caller filters the answer again. Pages are read like `_all_pages` reads a list: page 1
        tells the total, the rest a few at a time, and a list that comes out short is read once more, then refused.
        """
        path = "api/v1/knowledge/search"
        what = "the knowledge bases matching a query"

        async def read(number: int) -> tuple[list[Mapping[str, Any]], int | None]:
            return normalize.page(await self._send("GET", path, params={"query": query, "page": number}), what)

        gate = asyncio.Semaphore(_PAGE_CONCURRENCY)

        async def gated(number: int) -> list[Mapping[str, Any]]:
            async with gate:
                return (await read(number))[0]

        for _ in (1, 2):
            first, total = await read(1)
            if total is None:
                raise normalize.unexpected(f"{what} as a flat list")
            if total <= len(first):
                return first
            if not first:
                raise normalize.unexpected(f"{what}: an empty first page of {total} items")
            if total > self._max_list_items:
                raise ToolFailure(
                    "unexpected_response",
                    f"GET /{path}: Open WebUI reports {total:,} matching bases, more than this server reads in one "
                    f"list ({self._max_list_items:,}); refused rather than answer with part of it",
                )
            # gather, not a TaskGroup: on Python 3.11 a TaskGroup whose child fails while it waits leaves the calling
            # task with a cancellation request it never withdraws, which the SDK's cancel scopes then act on.
            pages = await asyncio.gather(
                *(gated(n) for n in range(2, math.ceil(total / len(first)) + 1)), return_exceptions=True
            )
            for page in pages:
                if isinstance(page, BaseException):  # the first failed page, in page order, is the one reported
                    raise page
            seen: set[object] = set()
            items: list[Mapping[str, Any]] = []
            for item in [*first, *(item for page in pages if not isinstance(page, BaseException) for item in page)]:
                if item.get("id") not in seen:  # an item can move between pages while we read them
                    seen.add(item.get("id"))
                    items.append(item)
            if len(items) >= total:
                return items
            log.info(
                "GET /%s: %d of %d matches; the list changed while it was read, reading it again",
                path,
                len(items),
                total,
            )
        raise ToolFailure(
            "unexpected_response",
            f"GET /{path}: Open WebUI listed {len(items)} of the {total} matching bases it reports, twice; refused "
            "rather than answer with part of the list",
        )

    async def knowledge(self, knowledge_id: str) -> Mapping[str, Any]:
        body = await self._send("GET", f"api/v1/knowledge/{segment(knowledge_id)}")
        if body is None:  # releases before 0.7 answer 200 null when the key cannot read the base
            raise ToolFailure("not_found", f"knowledge base {knowledge_id} not found, or not visible to this API key")
        return _object(body, "a knowledge base")

    async def knowledge_files(self, knowledge_id: str, page: int | None) -> tuple[list[Mapping[str, Any]], int | None]:
        """The documents of a base: every page (page=None) or one page of Open WebUI's page size."""

        async def read(release: Release) -> tuple[list[Mapping[str, Any]], int | None]:
            if not release.paged_lists:
                files = normalize.nested_files(await self.knowledge(knowledge_id))
                if page is None:
                    return files, len(files)
                return files[(page - 1) * 30 : page * 30], len(files)
            path = f"api/v1/knowledge/{segment(knowledge_id)}/files"
            if page is None:
                # From 0.9.6 Open WebUI takes a page size from an admin (a 5,000-document base in one request rather
                # than 167) and keeps 30 for everyone else; the pages are counted from the first one's length.
                params = {"limit": str(_ADMIN_PAGE_SIZE)} if release.folders else None
                return await self._all_pages(path, "the files of a knowledge base", params=params)
            return normalize.page(await self._send("GET", path, params={"page": page}), "the files of a knowledge base")

        return await self._per_release(read)

    async def knowledge_with_files(self, knowledge_id: str) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
        """A base and all its documents: before 0.6.42 one request (the base's answer nests them), later the base
        and then every page of its documents."""

        async def read(release: Release) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
            if not release.paged_lists:
                base = await self.knowledge(knowledge_id)
                return base, normalize.nested_files(base)
            files, _ = await self.knowledge_files(knowledge_id, None)
            return await self.knowledge(knowledge_id), files

        return await self._per_release(read)

    async def listed_file(self, knowledge_id: str, file_id: str, filename: str) -> normalize.FileRecord | None:
        """The file as the base lists it, or None: asked by its name (the paged releases' `query`, a filename ILIKE
        whose wildcards only widen the match), usually one page however large the base."""
        path = f"api/v1/knowledge/{segment(knowledge_id)}/files"
        items, _ = await self._all_pages(path, "the files of a knowledge base", params={"query": filename})
        return next((record for record in normalize.file_records(items) if record.file_id == file_id), None)

    async def files_containing(self, knowledge_id: str, phrase: str | None) -> list[Mapping[str, Any]]:
        """The documents of a base whose filename or text Open WebUI's own content search matches with `phrase`
        (its ILIKE, not exact matching: the caller decides what it may ask) where the release has it; elsewhere,
        and for None, every document."""

        async def read(release: Release) -> list[Mapping[str, Any]]:
            if not release.paged_lists:
                return normalize.nested_files(await self.knowledge(knowledge_id))
            path = f"api/v1/knowledge/{segment(knowledge_id)}/files"
            # Earlier paged releases match `query` against the filename only: there, read every document.
            params = None
            if release.content_search and phrase is not None:
                params = {"query": phrase, "include_content": "true"}
            items, _ = await self._all_pages(path, "the files of a knowledge base", params=params)
            return items

        return await self._per_release(read)

    # -- writes (never retried; the caller holds the write lock) ---------------------------------------------

    async def create_knowledge(self, release: Release, name: str, description: str) -> Mapping[str, Any]:
        body: dict[str, Any] = {"name": name, "description": description}
        if not release.private_by_default:
            # Before 0.8 a base without access_control is readable by every user; {} is private. Later releases
            # ignore the field, so an unreadable version gets it too.
            body["access_control"] = {}
        return _object(await self._send("POST", "api/v1/knowledge/create", json_body=body), "a new knowledge base")

    async def rename_knowledge(self, knowledge_id: str, name: str, description: str) -> Mapping[str, Any]:
        """A base's new name and description. Only for 0.8 and later: there the form leaves sharing alone when it
        carries no `access_grants`; before 0.8 it rewrites `access_control` (and before 0.6.41 the base's files)."""
        path = f"api/v1/knowledge/{segment(knowledge_id)}/update"
        body = {"name": name, "description": description}
        return _object(await self._send("POST", path, json_body=body), "a renamed knowledge base")

    async def pending_files(self, knowledge_id: str) -> list[Mapping[str, Any]]:
        """Files uploaded for the base (`metadata.knowledge_id`) that Open WebUI is still processing and has not
        linked yet (0.9.6+; it checks read access on the base)."""
        answer = await self._send("GET", f"api/v1/knowledge/{segment(knowledge_id)}/files/pending")
        if not isinstance(answer, list) or not all(isinstance(item, Mapping) for item in answer):
            raise normalize.unexpected("the pending files of a knowledge base")
        return answer

    async def delete_knowledge(self, knowledge_id: str) -> Json:
        """Delete a whole base (its search index; Open WebUI keeps the files themselves)."""
        return await self._send("DELETE", f"api/v1/knowledge/{segment(knowledge_id)}/delete")

    async def created_knowledge_named(self, name: str | None) -> list[Mapping[str, Any]]:
        """The bases the credential's own user created (whose name or description contains `name`, if given;
        0.6.42+: `view_option=created` compares each base's owner with the caller, admins included), all pages."""
        path = "api/v1/knowledge/search"
        params = {"view_option": "created"} | ({"query": name} if name is not None else {})
        items, _ = await self._all_pages(path, "the knowledge bases this key created", params=params)
        return items

    async def add_file(self, knowledge_id: str, file_id: str, directory_id: str | None = None) -> Json:
        """Attach a processed file to a base, into one of its folders (0.9.6+) when `directory_id` is given."""
        path = f"api/v1/knowledge/{segment(knowledge_id)}/file/add"
        folder = {"directory_id": directory_id} if directory_id is not None else {}
        return await self._send("POST", path, json_body={"file_id": file_id, **folder})

    async def reindex_file(self, knowledge_id: str, file_id: str) -> Json:
        path = f"api/v1/knowledge/{segment(knowledge_id)}/file/update"
        return await self._send("POST", path, json_body={"file_id": file_id})

    async def remove_file(self, knowledge_id: str, file_id: str, *, delete_file: bool = False) -> Json:
        """Take a file out of a base; with `delete_file`, delete the file itself too (sync does, for its own)."""
        path = f"api/v1/knowledge/{segment(knowledge_id)}/file/remove"
        params = {"delete_file": "true" if delete_file else "false"}
        return await self._send("POST", path, params=params, json_body={"file_id": file_id})
