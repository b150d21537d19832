"""What every tool call shares for the life of the process, and the access policy over it.

`App` holds the settings, the one Open WebUI client and the write locks per base. Its checks decide what a
call may touch:
the allowlist (`OPENWEBUI_KNOWLEDGE_IDS`) and, on every release, that a base handed to Open WebUI's retrieval is one
the key can read through the Knowledge API (older retrieval endpoints check no access themselves).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from openwebui_rag_mcp import normalize
from openwebui_rag_mcp.citations import Documents
from openwebui_rag_mcp.client import OpenWebUIClient
from openwebui_rag_mcp.config import ID_PATTERN, Settings
from openwebui_rag_mcp.errors import ToolFailure, invalid_argument
from openwebui_rag_mcp.journal import Inflight, owner_of
from openwebui_rag_mcp.locks import LocalLocks, SharedSets, WriteLocks
from openwebui_rag_mcp.models import KnowledgeBase
from openwebui_rag_mcp.settle import ClientUpstream, Resolution, preview, recover

log = logging.getLogger(__name__)

RECALL_SECONDS = 0.5  # the most a tool call waits to learn what its caller created on other replicas

# Credentials whose readable bases are remembered at once (HTTP transport, one per caller); the oldest goes first.
READABLE_CREDENTIALS_MAX = 1_000
# How long the bases a key can read are remembered for checking a search. Short, because access can be revoked in
# Open WebUI at any time; long enough that an agent's run of searches costs one retrieval request each.
READABLE_TTL_SECONDS = 30.0
# Document text a search by `file_ids` keeps from its readability check for its citations; past it, a hit's document
# is read again, so up to 100 long documents are not all held through the search.
CHECKED_CHARS_MAX = 4 * 1024 * 1024
# Documents of the allowed bases remembered for the allowlist's check of a file (`knowledge_get_file`, a search by
# `file_ids`), at most this many at once over all credentials; the oldest credential's go first.
ALLOWED_FILES_MAX = 200_000
# How long replicas sharing Redis remember the bases a caller created under an allowlist, from its latest creation.
# A convenience for the run that created them: the operator adds a base to OPENWEBUI_KNOWLEDGE_IDS to keep it.
CREATED_TTL_SECONDS = 24 * 3600.0
CREATED_PREFIX = "openwebui-rag-mcp:created:"

# Who the current request's caller is when its Open WebUI credential does not say (HTTP service mode, where every
# caller uses the service account): a digest of the caller's own token, set per request by the HTTP transport.
_CALLER_ID: ContextVar[str | None] = ContextVar("openwebui_rag_mcp_caller_id", default=None)


# A caller that asked for read-only access for its request (HTTP transport, X-OpenWebUI-Read-Only): it can narrow
# what this server does for it, never widen it.
_READING_ONLY: ContextVar[bool] = ContextVar("openwebui_rag_mcp_reading_only", default=False)


@contextmanager
def reading_only(narrowed: bool) -> Iterator[None]:
    """Refuse every write made inside this block when `narrowed`."""
    reset = _READING_ONLY.set(narrowed or _READING_ONLY.get())
    try:
        yield
    finally:
        _READING_ONLY.reset(reset)


@contextmanager
def calling_as(identity: str | None) -> Iterator[None]:
    """Tell callers apart by `identity` (a digest, never a secret) inside this block; None changes nothing."""
    reset = _CALLER_ID.set(identity or _CALLER_ID.get())
    try:
        yield
    finally:
        _CALLER_ID.reset(reset)


def writes_refused() -> bool:
    """Whether this request asked for read-only access."""
    return _READING_ONLY.get()


def check_writes_allowed() -> None:
    if _READING_ONLY.get():
        raise ToolFailure(
            "forbidden",
            "this request asked for read-only access (X-OpenWebUI-Read-Only); nothing was changed",
            outcome="not_applied",
            request_sent=False,
        )


def check_id(value: str, what: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise invalid_argument(f"{what} {shown!r} is not a valid Open WebUI id (letters, digits, '-' and '_' only)")
    return value


def check_range(value: int, name: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise invalid_argument(f"{name} must be between {low} and {high}, got {value}")
    return value


class ReadableBases:
    """The bases each credential can read through the Knowledge API (which checks access on every release),
    remembered for `ttl` seconds under a hash of the credential; concurrent callers share one refresh."""

    def __init__(self, ttl: float = READABLE_TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[float, dict[str, KnowledgeBase]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _current(self, key: str, newer_than: float) -> dict[str, KnowledgeBase] | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] < newer_than or self._clock() - entry[0] >= self._ttl:
            return None
        return entry[1]

    def remember(self, client: OpenWebUIClient, bases: Iterable[KnowledgeBase]) -> dict[str, KnowledgeBase]:
        key = client.credential_key()
        remembered = {base.knowledge_id: base for base in bases}
        self._entries.pop(key, None)
        self._entries[key] = (self._clock(), remembered)
        while len(self._entries) > READABLE_CREDENTIALS_MAX:
            del self._entries[next(iter(self._entries))]
        return remembered

    def forget(self, client: OpenWebUIClient) -> None:
        self._entries.pop(client.credential_key(), None)

    async def get(self, client: OpenWebUIClient, *, fresh: bool = False) -> dict[str, KnowledgeBase]:
        key = client.credential_key()
        asked_at = self._clock()
        newer_than = asked_at if fresh else float("-inf")
        current = self._current(key, newer_than)
        if current is not None:
            return current
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                current = self._current(key, newer_than)  # read while we waited
                if current is not None:
                    return current
                listed = [normalize.knowledge_base(item) for item in await client.list_knowledge()]
                return self.remember(client, listed)
        finally:
            if not lock.locked():
                self._locks.pop(key, None)


class AllowedFiles:
    """The documents of the bases each credential may read under the allowlist, remembered for `ttl` seconds (as
    the bases a key can read are): an agent reading a search's hits, or one document page by page, then costs one
    listing of the allowed bases, not one per call. Only a document found is taken from memory; one not found is
    looked for in a fresh listing, so a document added since is found at once. A document removed from an allowed
    base by someone else may still pass for up to `ttl` seconds; Open WebUI's Files API, asked next, checks the key's
    own access on every release, so nothing the key cannot read passes."""

    def __init__(self, ttl: float = READABLE_TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[tuple[str, tuple[str, ...]], tuple[float, frozenset[str]]] = {}
        self._locks: dict[tuple[str, tuple[str, ...]], asyncio.Lock] = {}

    def forget(self, client: OpenWebUIClient) -> None:
        """After this server removed a document or a base for the credential."""
        credential = client.credential_key()
        for key in [key for key in self._entries if key[0] == credential]:
            del self._entries[key]

    async def holds(self, client: OpenWebUIClient, bases: list[str], file_id: str, *, fresh: bool = False) -> bool:
        key = (client.credential_key(), tuple(bases))
        asked_at = self._clock()
        seen = self._entries.get(key)
        if not fresh and seen is not None and asked_at - seen[0] < self._ttl and file_id in seen[1]:
            return True
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                entry = self._entries.get(key)
                # A read takes a listing another call made while it waited; a write only one begun after it asked.
                if (
                    entry is None
                    or entry is seen
                    or self._clock() - entry[0] >= self._ttl
                    or (fresh and entry[0] < asked_at)
                ):
                    entry = (self._clock(), await _documents_of(client, bases))
                    self._entries.pop(key, None)
                    self._entries[key] = entry
                    while sum(len(ids) for _, ids in self._entries.values()) > ALLOWED_FILES_MAX:
                        del self._entries[next(iter(self._entries))]
                return file_id in entry[1]
        finally:
            if not lock.locked():
                self._locks.pop(key, None)


async def _documents_of(client: OpenWebUIClient, bases: list[str]) -> frozenset[str]:
    """The ids of every document of `bases`; a base that is gone or the key may no longer read holds none."""
    listings = await asyncio.gather(*(client.knowledge_files(base, None) for base in bases), return_exceptions=True)
    for listing in listings:
        # An allowed base that is gone or unshared holds nothing; anything else is a real failure.
        if isinstance(listing, ToolFailure) and listing.code not in ("not_found", "forbidden"):
            raise listing
        if isinstance(listing, BaseException) and not isinstance(listing, ToolFailure):
            raise listing
    return frozenset(
        item["id"]
        for listing in listings
        if not isinstance(listing, BaseException)
        for item in listing[0]
        if isinstance(item.get("id"), str)
    )


class CreatedBases:
    """The bases each caller created while an allowlist was set, under a digest of the caller: in this process, and
    in Redis when the replicas share it (one set per caller, `CREATED_TTL_SECONDS` after its latest creation)."""

    def __init__(self, shared: SharedSets | None = None) -> None:
        self._shared = shared
        self._known: dict[str, set[str]] = {}

    def of(self, caller: str) -> set[str]:
        return self._known.get(caller, set())

    def _keep(self, caller: str, bases: Iterable[str]) -> None:
        known = self._known.pop(caller, set())
        self._known[caller] = known | set(bases)  # the most recent caller last; the oldest is dropped first
        while len(self._known) > READABLE_CREDENTIALS_MAX:
            del self._known[next(iter(self._known))]

    async def add(self, caller: str, knowledge_id: str) -> None:
        self._keep(caller, [knowledge_id])
        if self._shared is None:
            return
        try:
            await self._shared.add_member(CREATED_PREFIX + caller, knowledge_id, int(CREATED_TTL_SECONDS * 1000))
        except Exception as error:  # the base exists; only other replicas will not know it
            log.warning("could not share a created knowledge base through Redis (%s)", type(error).__name__)

    async def recall(self, caller: str) -> None:
        """Learn what this caller created on other replicas."""
        if self._shared is None:
            return
        try:
            # Bounded: every tool call under an allowlist asks, and a Redis that does not answer must not hold reads.
            async with asyncio.timeout(RECALL_SECONDS):
                self._keep(caller, await self._shared.members(CREATED_PREFIX + caller))
        except Exception as error:  # what this replica knows still applies
            log.warning("could not read the shared created knowledge bases from Redis (%s)", type(error).__name__)


@dataclass(frozen=True, slots=True)
class App:
    """What every tool call shares for the life of the process."""

    settings: Settings
    client: OpenWebUIClient
    locks: WriteLocks = field(default_factory=LocalLocks)
    readable: ReadableBases = field(default_factory=ReadableBases)
    # (credential hash, file_id) -> when the Files API last let that credential read the file.
    readable_files: dict[tuple[str, str], float] = field(default_factory=dict)
    allowed_files: AllowedFiles = field(default_factory=AllowedFiles)
    # Bases each caller created while OPENWEBUI_ALLOW_CREATE let it: usable alongside the allowlist, by that caller
    # only; shared with the other replicas through the store of the write locks (Redis) when there is one.
    created: CreatedBases = field(init=False)
    # The journal of uploads in flight (None: writes keep none, as in tests that build an App by hand).
    inflight: Inflight | None = None
    recovering: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Document texts read to cite search hits, by caller, file and hash (citations.py).
    documents: Documents = field(default_factory=Documents)

    def __post_init__(self) -> None:
        object.__setattr__(self, "created", CreatedBases(self.locks.sets))

    def caller(self) -> str:
        """A stable digest naming the current caller: its own token's (HTTP service mode), else its credential's."""
        return _CALLER_ID.get() or self.client.credential_key()

    def uploads_owner(self) -> str:
        """The journal's name for the current credential (never the credential itself)."""
        return owner_of(self.settings, self.client.credential_key())

    async def recover_uploads(self) -> list[Resolution]:
        """Settle what writers with the current credential left when they died between an upload and its attach:
        their files are removed, or kept where the base holds them. Each outcome is logged."""
        if self.inflight is None:
            return []
        async with self.recovering:  # one at a time: the start's and a first write's would settle the same records
            upstream = ClientUpstream(self.client)
            owner = self.uploads_owner()
            resolutions = await recover(self.inflight, upstream, owner, self.locks.hold, self.settings.timings)
        for resolution in resolutions:  # one Open WebUI is still working on is looked at again: no warning each time
            log.log(logging.INFO if resolution.processing else logging.WARNING, "uploads in flight: %s", resolution)
        return resolutions

    async def preview_uploads(self) -> list[Resolution]:
        """What `recover_uploads` would do now, doing none of it (a dry run)."""
        if self.inflight is None:
            return []
        return await preview(self.inflight, ClientUpstream(self.client), self.uploads_owner(), self.settings.timings)

    async def recover_uploads_quietly(self) -> list[Resolution]:
        """`recover_uploads` where its own failure must stop nothing (before a write, at start): then nothing."""
        try:
            return await self.recover_uploads()
        except Exception as error:
            log.warning("could not settle the uploads in flight of a dead writer (%s)", type(error).__name__)
            return []

    async def remember_created(self, knowledge_id: str) -> None:
        await self.created.add(self.caller(), knowledge_id)

    async def recall_created(self) -> None:
        """Before a tool runs under an allowlist: learn the bases this caller created on other replicas."""
        if self.settings.knowledge_ids is not None:
            await self.created.recall(self.caller())

    def link_base(self) -> str | None:
        """Where links to documents point: OPENWEBUI_PUBLIC_URL, else over stdio OPENWEBUI_URL (the person running the
        server knows it); over HTTP without it none, as HTTP callers are not told where Open WebUI is."""
        if self.settings.public_url:
            return self.settings.public_url
        return self.settings.url if self.settings.transport == "stdio" else None

    def allowed_bases(self) -> list[str] | None:
        """The bases this server may touch for the current caller, or None when OPENWEBUI_KNOWLEDGE_IDS does not
        restrict it."""
        if self.settings.knowledge_ids is None:
            return None
        created = self.created.of(self.caller()) - set(self.settings.knowledge_ids)
        return [*self.settings.knowledge_ids, *sorted(created)]

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

    async def check_file(self, file_id: str, *, fresh: bool = False) -> str:
        """Under an allowlist, a file is reachable only when an allowed base holds it; `fresh` for a write, which
        takes no remembered listing."""
        check_id(file_id, "file_id")
        allowed = self.allowed_bases()
        if allowed is None:
            return file_id
        if not await self.allowed_files.holds(self.client, allowed, file_id, fresh=fresh):
            raise ToolFailure(
                "not_found",
                f"file {file_id} is in none of the knowledge bases this server may read (OPENWEBUI_KNOWLEDGE_IDS)",
                request_sent=False,
            )
        return file_id

    async def check_searchable(self, knowledge_ids: list[str]) -> list[str]:
        """The bases to hand to Open WebUI's retrieval, after checking that the key can read every one.

        Open WebUI's retrieval endpoint checks no access before 0.9 (and unknown names before 0.9.6), so a key could
        search a private base it cannot list. Every id must be allowed and among the bases the Knowledge API shows
        this key. Where retrieval checks access itself, a remembered answer is used first and read again once before
        an id is refused; where it does not, every search lists the bases afresh (a share revoked a moment ago must
        not answer). Refused ids get one answer, `not_found`, whether they exist or not.
        """
        bases = list(dict.fromkeys(self.check_base(knowledge_id) for knowledge_id in knowledge_ids))
        if not bases:
            return bases
        if (await self.client.release()).retrieval_checks_access:
            readable = await self.readable.get(self.client)
            if all(base in readable for base in bases):
                return bases
        readable = await self.readable.get(self.client, fresh=True)
        missing = [base for base in bases if base not in readable]
        if not missing:
            return bases
        files = [] if self.allowed_bases() is not None else await self._file_ids_among(missing)
        message = (
            f"no readable knowledge base has the id {', '.join(missing)} (it does not exist, or this key may not "
            "read it); knowledge_list gives the knowledge_ids this key can search"
        )
        if files:
            message += (
                f". {', '.join(files)} is the file_id of a document, not a knowledge_id: read it with "
                "knowledge_get_file(file_id), or search the base that holds it"
            )
        raise ToolFailure("not_found", message, request_sent=False)

    async def _file_ids_among(self, ids: list[str]) -> list[str]:
        """Which of `ids` are documents the key can read (agents often pass a file_id as a knowledge_id)."""

        async def is_file(candidate: str) -> bool:
            try:
                await self.client.file(candidate)
            except ToolFailure:
                return False
            return True

        found = await asyncio.gather(*(is_file(candidate) for candidate in ids[:10]))
        return [candidate for candidate, yes in zip(ids, found, strict=False) if yes]

    async def check_files_searchable(self, file_ids: list[str], bodies: dict[str, object] | None = None) -> list[str]:
        """The documents to hand to Open WebUI's retrieval (as `file-<id>` collections), after checking that the key
        can read each one.

        Under an allowlist a document must be in an allowed base. The Files API must let this key read it (it
        checks access on every release): searching a document then reveals nothing its full text does not. Where
        Open WebUI's retrieval checks access itself, that verdict (and the allowlist's alone) is remembered briefly;
        where it does not, the Files API is asked on every search, since a remembered "may read" would outlive a
        revoked share. Refused ids get one answer, `not_found`, whether they exist or not. The documents read to
        check are put in `bodies`, where given, so their citations need not read them again.
        """
        files = list(dict.fromkeys(check_id(file_id, "file_id") for file_id in file_ids))
        remembered = (await self.client.release()).retrieval_checks_access
        if self.allowed_bases() is not None:
            for file_id in files:
                await self.check_file(file_id)
            if remembered:
                return files

        credential = self.client.credential_key()
        now = time.monotonic()
        kept = 0

        async def readable(file_id: str) -> bool:
            nonlocal kept
            seen = self.readable_files.get((credential, file_id))
            if remembered and seen is not None and now - seen < READABLE_TTL_SECONDS:
                return True
            try:
                body = await self.client.file(file_id)
            except ToolFailure as failure:
                if failure.code in ("not_found", "forbidden"):
                    return False
                raise
            size = normalize.text_chars(body)
            if bodies is not None and kept + size <= CHECKED_CHARS_MAX:
                bodies[file_id] = body
                kept += size
            self.readable_files[(credential, file_id)] = time.monotonic()
            while len(self.readable_files) > READABLE_CREDENTIALS_MAX * 10:
                del self.readable_files[next(iter(self.readable_files))]
            return True

        verdicts = await asyncio.gather(*(readable(file_id) for file_id in files))
        missing = [file_id for file_id, ok in zip(files, verdicts, strict=True) if not ok]
        if missing:
            raise ToolFailure(
                "not_found",
                f"no document this key can read has the file_id {', '.join(missing)}; knowledge_files lists the "
                "documents of a base",
                request_sent=False,
            )
        return files
