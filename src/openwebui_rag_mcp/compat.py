"""Which Open WebUI release we talk to, and what that release can do.

Open WebUI changed its Knowledge API several times (see docs/compatibility.md). The version from
`GET /api/version` picks endpoints; parsers still accept every known shape, so a mislabelled build degrades
gracefully instead of reading an empty list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from openwebui_rag_mcp.models import Capabilities

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")

# Boundaries from Open WebUI's CHANGELOG and source, checked live where the README's table says so.
PAGED_LISTS = (0, 6, 42)  # {items,total} lists paged by 30 and GET /knowledge/{id}/files
PROCESS_STATUS = (0, 6, 23)  # background processing and GET /files/{id}/process/status
UPLOAD_METADATA = (0, 6, 23)  # the upload's `metadata` form field is stored in file.meta.data
KEEP_FILE_ON_REMOVE = (0, 6, 27)  # file/remove honours ?delete_file=false
# POST /files/{id}/data/content/update re-indexes every base holding the file (read in 0.12.4's source; the 0.12.0
# CHANGELOG fixes its error reporting). Before it, each base needs its own POST /knowledge/{id}/file/update.
CONTENT_UPDATE_REINDEXES = (0, 12, 0)
# GET /knowledge/{id}/files?query=&include_content=true searches the text from 0.9.6 (`data->>'content'` ILIKE, the
# whole text; from 0.10.0 its first RAG_FILE_CONTENT_SEARCH_MAX_CHARS characters, 64 Mi by default): read in the
# 0.9.0 to 0.9.6, 0.10.0, 0.10.1, 0.10.2, 0.11.0 and 0.12.4 wheels. 0.9.5 and earlier match the filename only.
CONTENT_SEARCH = (0, 9, 6)
# Bases have folders from 0.9.6 (GET /knowledge/{id}/files?directory_id= lists one with its subfolders); the lists
# name each document's folder (`directory_path`, "a/b") from 0.12.0 (0.10.2's and 0.12.4's source).
FOLDERS = (0, 9, 6)
FOLDER_PATHS = (0, 12, 0)
# POST /retrieval/query/collection checks the caller's read access on a base's collection from 0.9.0 (CHANGELOG 0.9.0,
# #23635 / #23627; unknown names denied from 0.9.6). Before, any verified user could search any base by id (0.8.x
# checks `file-*` collections only; seen live through this server on 0.6.5 and 0.8.12). Below it, a remembered
# "may read" never stands in for Open WebUI's check: every base and document a search hands on is asked afresh.
RETRIEVAL_CHECKS_ACCESS = (0, 9, 0)
PRIVATE_BY_DEFAULT = (0, 8, 0)  # access_grants: a base created without grants is private; access_control is ignored
# file/add links a file through the knowledge_file table (0.6.41's join table, paged API from 0.6.42). Before, it
# rewrote the base's `data.file_ids` (read-modify-write), so a concurrent change could drop a file it acknowledged.
ATOMIC_ATTACH = (0, 6, 42)
# POST /retrieval/process/web?process=false returns a page's text and indexes nothing (read in the 0.6.41 and 0.6.42
# wheels); before, it always embeds the page into a collection named after the URL's hash, which no base lists.
FETCH_WITHOUT_INDEXING = (0, 6, 42)
# The web loader re-checks every redirect target against its private-address rule from 0.9.5 (GHSA-rh5x-h6pp-cjj6);
# before, a public page redirecting to an internal address is fetched, so URL adds are refused there unless the
# operator allows private addresses anyway (OPENWEBUI_URL_ALLOW_PRIVATE).
REDIRECTS_CHECKED = (0, 9, 5)
# knowledge_search's hybrid controls (POST /retrieval/query/collection, read in the wheels on both sides of each
# boundary): `hybrid_bm25_weight` is a request field from 0.6.12; a weight of 0 is honoured from 0.10.0 (before, 0 is
# falsy and means "use the setting"); `hybrid: false` chooses the vector path from 0.6.26, and from 0.8.11 that path
# re-checks the admin setting and runs hybrid search anyway. No release lets a request switch hybrid search on.
BM25_WEIGHT = (0, 6, 12)
BM25_WEIGHT_ZERO = (0, 10, 0)
VECTOR_ONLY_ON_REQUEST = ((0, 6, 26), (0, 8, 11))
# An upload with `metadata.knowledge_id` links itself to the base in Open WebUI's background task (from 0.9.6). Its
# status says when that is done only from 0.12.4: there the file stays "processing" until it is indexed into the base
# and linked, and only then becomes "completed" (a failed index or link ends "failed"). Before, the file is "completed"
# for a moment as soon as its own collection is written: 0.11.0 to 0.12.3 then set it "processing" again, index it into
# the base and link it; 0.10.0 to 0.10.2 link it first and index it into the base after, still "completed" (a failure
# there sets "failed" and clears the file's hash, with no reason kept). Where the base lists a file before its vectors
# are written there (LINKS_BEFORE_INDEXING), the file's own `meta.collection_name` says when they are: Open WebUI sets
# it to the base's id then (with BYPASS_EMBEDDING_AND_RETRIEVAL it never does: such a file waits out
# OPENWEBUI_PROCESS_TIMEOUT and is left to recovery, which keeps it). So from 0.9.6 `sync` lets uploads link
# themselves. 0.9.6 to 0.9.x link such an upload without asking whether its uploader may write to the base (only the
# indexing into the base after the link asks, and fails the file), so there each upload asks first
# (LINK_CHECKS_WRITE_ACCESS): a key that loses write access mid-run adds nothing after that. (Read in the 0.9.6,
# 0.10.0, 0.10.2, 0.11.0, 0.11.4, 0.12.3 and 0.12.4 wheels, `routers/files.py` `process_uploaded_file` and
# `routers/retrieval.py` `process_file`.)
LINKS_ON_UPLOAD = (0, 9, 6)
LINK_CHECKS_WRITE_ACCESS = (0, 10, 0)
COMPLETES_WHEN_LINKED = (0, 12, 4)
LINKS_BEFORE_INDEXING = ((0, 9, 6), (0, 11, 0))


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    parts: tuple[int, int, int]

    @classmethod
    def parse(cls, version: str) -> Release:
        """Read a version string; an unparseable one is treated as the newest family."""
        match = _VERSION.match(version)
        if match is None:
            return cls(version, (999, 0, 0))
        major, minor, patch = match.groups()
        return cls(version, (int(major), int(minor), int(patch or 0)))

    @property
    def content_search(self) -> bool:
        return self.known and self.parts >= CONTENT_SEARCH

    @property
    def folders(self) -> bool:
        return self.known and self.parts >= FOLDERS

    @property
    def folder_paths(self) -> bool:
        """Document lists name each document's folder. An unreadable version is not taken to: a fork without them
        would make every synced file look moved."""
        return self.known and self.parts >= FOLDER_PATHS

    @property
    def retrieval_checks_access(self) -> bool:
        """Open WebUI's retrieval refuses a base or document the caller may not read. Fails safe: an unreadable
        version is taken to check nothing."""
        return self.known and self.parts >= RETRIEVAL_CHECKS_ACCESS

    @property
    def private_by_default(self) -> bool:
        """A new base is private without saying so. Fails safe: an unreadable version is not taken to be one."""
        return self.known and self.parts >= PRIVATE_BY_DEFAULT

    @property
    def attach_is_atomic(self) -> bool:
        """An acknowledged attach stays attached. Fails safe: an unreadable version gets its attach confirmed."""
        return self.known and self.parts >= ATOMIC_ATTACH

    @property
    def fetch_without_indexing(self) -> bool:
        """A web page can be fetched without leaving vectors outside every base. Fails safe on an unreadable version."""
        return self.known and self.parts >= FETCH_WITHOUT_INDEXING

    @property
    def redirects_checked(self) -> bool:
        """Open WebUI's web loader refuses a redirect to a private address. Fails safe on an unreadable version."""
        return self.known and self.parts >= REDIRECTS_CHECKED

    @property
    def links_on_upload(self) -> bool:
        """An upload can link itself to its base, and the file's `meta.collection_name` says when it is indexed there
        (before 0.10 its write access is not checked: see `link_checks_write_access`). Not for an unreadable version:
        there nothing might say so."""
        return self.known and self.parts >= LINKS_ON_UPLOAD

    @property
    def link_checks_write_access(self) -> bool:
        """Open WebUI asks whether the uploader may write to the base before it links a self-linking upload."""
        return self.known and self.parts >= LINK_CHECKS_WRITE_ACCESS

    @property
    def links_before_indexing(self) -> bool:
        """A self-linked upload is listed in the base before its vectors are written there (0.9.6 to 0.10.x)."""
        start, end = LINKS_BEFORE_INDEXING
        return self.known and start <= self.parts < end

    @property
    def completes_when_linked(self) -> bool:
        """An upload that links itself is "completed" only once the base lists it (not a moment before)."""
        return self.known and self.parts >= COMPLETES_WHEN_LINKED

    @property
    def known(self) -> bool:
        return _VERSION.match(self.version) is not None

    @property
    def content_update_reindexes(self) -> bool:
        """A text update re-indexes the file in every base holding it, new vectors before old ones go."""
        return self.parts >= CONTENT_UPDATE_REINDEXES

    @property
    def paged_lists(self) -> bool:
        return self.parts >= PAGED_LISTS

    @property
    def family(self) -> str:
        return "paged (items/total, files endpoint)" if self.paged_lists else "flat (lists, files nested in the base)"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            paged_lists=self.paged_lists,
            files_endpoint=self.paged_lists,
            process_status=self.parts >= PROCESS_STATUS,
            upload_metadata=self.parts >= UPLOAD_METADATA,
            # The one gate that protects user data: an unknown version does not open it.
            keep_file_on_remove=self.known and self.parts >= KEEP_FILE_ON_REMOVE,
            content_update_reindexes=self.content_update_reindexes,
        )
