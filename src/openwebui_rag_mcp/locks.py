"""Write locks per knowledge base: in this process (`LocalLocks`), or a Redis lease shared by replicas (`LeaseLocks`).

A write sequence holds its base's lock from its first write request to its last, so two sequences on one base never
interleave while writes to other bases go on; reads take none. A lease is not a fence: its holder checks it
(`Lease.check()`) before each write request and stops once it is lost. Also: the Redis sets of bases each caller made.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio

from openwebui_rag_mcp.errors import ToolFailure

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
# How long giving a lease back may take before it is left to expire by itself (a cancelled write, a shutdown).
RELEASE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class LeasePolls:
    """How a replica waits for a lease another one holds: it asks again after `first` seconds, then twice as long
    each time, up to `most`."""

    first: float = 0.05
    most: float = 0.5


class Lease:
    """A held write lock as its holder sees it. A lease in a shared store can be lost while held (its renewals
    failed, or it expired and another replica may have taken it): the holder calls `check()` before each write
    request. An in-process lock (`ttl` None) is never lost."""

    def __init__(
        self, *, ttl: float | None = None, confirmed_at: float = 0.0, clock: Callable[[], float] = time.monotonic
    ):
        self._ttl = ttl
        self._clock = clock
        self.confirmed_at = confirmed_at  # when the store last confirmed it (the time its request was sent)
        self._lost: str | None = None

    def lose(self, why: str) -> None:
        if self._lost is None:
            self._lost = why

    @property
    def lost(self) -> bool:
        if self._lost is None and self._ttl is not None and self._clock() - self.confirmed_at >= self._ttl:
            self.lose(f"it was not renewed within its {self._ttl:g} s")
        return self._lost is not None

    def check(self) -> None:
        """Raise `conflict` (nothing sent by this check) when the lock is no longer held."""
        if self.lost:
            raise ToolFailure(
                "conflict",
                f"the shared write lock of this knowledge base (a Redis lease) was lost while the write ran "
                f"({self._lost}); another replica may be writing to the base, so this write stopped before its next "
                "request",
                retryable=True,
                request_sent=False,
            )


@runtime_checkable
class SharedSets(Protocol):
    """Sets every replica sees (Redis), each expiring `ttl_ms` after its last addition: what replicas remember
    together besides their locks (the bases each caller created)."""

    async def add_member(self, key: str, member: str, ttl_ms: int) -> None: ...

    async def members(self, key: str) -> set[str]: ...


class WriteLocks(Protocol):
    """One lock per knowledge base."""

    shared: bool  # whether other processes see the same locks

    @property
    def sets(self) -> SharedSets | None:
        """The store the replicas share, when they share one."""
        ...

    def hold(self, key: str) -> AbstractAsyncContextManager[Lease]: ...

    async def aclose(self) -> None: ...


class LocalLocks:
    """Per-base `asyncio.Lock`s of this process; a base's lock is dropped once nobody holds or waits for it."""

    shared = False
    sets: SharedSets | None = None

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def _held(self, key: str) -> AsyncIterator[Lease]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield Lease()
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def hold(self, key: str) -> AbstractAsyncContextManager[Lease]:
        return self._held(key)

    async def aclose(self) -> None:
        return None


class LeaseStore(Protocol):
    """The three atomic operations a lease needs (Redis, or a fake in tests)."""

    async def acquire(self, key: str, token: str, ttl_ms: int) -> bool: ...

    async def renew(self, key: str, token: str, ttl_ms: int) -> bool: ...

    async def release(self, key: str, token: str) -> bool: ...

    async def aclose(self) -> None: ...


_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


class RedisLeaseStore:
    """`LeaseStore` on a Redis server (redis-py's asyncio client)."""

    def __init__(self, url: str) -> None:
        try:
            import redis.asyncio as redis_asyncio
        except ImportError as missing:  # pragma: no cover - the config check names the extra first
            raise RuntimeError("REDIS_URL needs the redis package: pip install 'openwebui-rag-mcp[redis]'") from missing
        self._redis = redis_asyncio.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)

    async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._redis.set(key, token, nx=True, px=ttl_ms))

    async def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._redis.eval(_RENEW, 1, key, token, ttl_ms))

    async def release(self, key: str, token: str) -> bool:
        return bool(await self._redis.eval(_RELEASE, 1, key, token))

    async def add_member(self, key: str, member: str, ttl_ms: int) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.sadd(key, member)
            pipe.pexpire(key, ttl_ms)
            await pipe.execute()

    async def members(self, key: str) -> set[str]:
        found = await self._redis.smembers(key)
        return {m.decode() if isinstance(m, bytes) else str(m) for m in found}

    async def ping(self) -> bool:
        return bool(await self._redis.ping())

    async def aclose(self) -> None:
        await self._redis.aclose()


class LeaseLocks:
    """Per-base leases in a `LeaseStore`, shared by every replica that uses the same store and prefix.

    Waiting for a lease polls with backoff up to `wait_seconds`; a held lease is renewed every third of its ttl, so
    a write that waits minutes for Open WebUI to process a PDF keeps it, and a replica that dies loses it after the
    ttl.
    """

    shared = True

    def __init__(
        self,
        store: LeaseStore,
        *,
        wait_seconds: float,
        ttl_seconds: float = LEASE_SECONDS,
        prefix: str = "openwebui-rag-mcp:write:",
        clock: Callable[[], float] = time.monotonic,
        polls: LeasePolls = LeasePolls(),
    ) -> None:
        self._store = store
        self._polls = polls
        self._wait = wait_seconds
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._prefix = prefix
        self._clock = clock
        self.sets: SharedSets | None = store if isinstance(store, SharedSets) else None

    def hold(self, key: str) -> AbstractAsyncContextManager[Lease]:
        return self._held(self._prefix + key)

    @asynccontextmanager
    async def _held(self, key: str) -> AsyncIterator[Lease]:
        token = secrets.token_hex(16)
        lease = Lease(ttl=self._ttl_ms / 1000, confirmed_at=await self._acquire(key, token), clock=self._clock)
        renewing = asyncio.create_task(self._keep(key, token, lease))
        try:
            yield lease
        finally:
            # Runs in a cancelled scope when the write was cancelled: every await here is shielded, and bounded.
            renewing.cancel()
            with anyio.move_on_after(RELEASE_SECONDS, shield=True):
                await asyncio.gather(renewing, return_exceptions=True)
            if await self._give_back(key, token) is False and not lease.lost:
                log.warning("the write lease %s had expired before its write ended", key)

    async def _give_back(self, key: str, token: str) -> bool | None:
        """Release `token`'s lease, shielded from cancellation and bounded; None when the store did not answer."""
        with anyio.move_on_after(RELEASE_SECONDS, shield=True):
            try:
                return await self._store.release(key, token)
            except Exception as error:
                log.warning(
                    "could not release the write lease %s (%s); it expires by itself", key, type(error).__name__
                )
                return None
        log.warning("releasing the write lease %s took over %g s; it expires by itself", key, RELEASE_SECONDS)
        return None

    async def _acquire(self, key: str, token: str) -> float:
        """Take the lease; when the store confirmed it (the time the request was sent, so never later than Redis)."""
        deadline = self._clock() + self._wait
        delay = self._polls.first
        while True:
            sent_at = self._clock()
            try:
                if await self._store.acquire(key, token, self._ttl_ms):
                    return sent_at
            except BaseException as error:
                # The SET may have been applied with its answer lost (a timeout, a cancel): give back whatever this
                # token may hold, or the base stays locked on every replica until the ttl runs out.
                await self._give_back(key, token)
                if not isinstance(error, Exception):
                    raise
                raise ToolFailure(
                    "upstream_unavailable",
                    f"the shared write lock (Redis, REDIS_URL) could not be reached ({type(error).__name__}); "
                    "nothing was changed",
                    retryable=True,
                    request_sent=False,
                ) from None
            if self._clock() + delay > deadline:
                raise ToolFailure(
                    "conflict",
                    f"another write to this knowledge base was still running after {self._wait:g} s; nothing was "
                    "changed, try again later",
                    retryable=True,
                    request_sent=False,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._polls.most)

    async def _keep(self, key: str, token: str, lease: Lease) -> None:
        """Renew every third of the ttl; mark the lease lost when it is no longer certainly ours.

        One transient Redis error is tolerated, and only while a retry can still land inside the ttl (counted from the
        last renewal Redis confirmed); a second error in a row, a later one, or an answer "not yours" loses it.
        """
        ttl = self._ttl_ms / 1000
        interval = ttl / 3
        failed = False
        while True:
            await asyncio.sleep(interval / 2 if failed else interval)  # after an error, try again sooner
            sent_at = self._clock()
            try:
                mine = await self._store.renew(key, token, self._ttl_ms)
            except Exception as error:
                left = ttl - (self._clock() - lease.confirmed_at)
                if failed or left <= interval:
                    lease.lose(f"Redis could not renew it ({type(error).__name__})")
                    log.warning("lost the write lease %s: could not renew it (%s)", key, type(error).__name__)
                    return
                failed = True
                log.warning("could not renew the write lease %s (%s); trying again", key, type(error).__name__)
                continue
            if not mine:
                lease.lose("it had expired, and another replica may hold it")
                log.warning("lost the write lease %s while its write was still running", key)
                return
            failed = False
            lease.confirmed_at = sent_at

    async def aclose(self) -> None:
        await self._store.aclose()
