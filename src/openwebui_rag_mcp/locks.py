"""Write locks per knowledge base: in this process, or across replicas through Redis.

A write sequence (upload, wait, attach; or update, re-index; or unlink, confirm) holds the lock of its base from its
first write request to its last, so two sequences on one base never interleave (Open WebUI before 0.6.42 updates a
base's file list by read-modify-write), while writes to other bases go on. Reads never take a lock.

Across replicas the lock is a Redis lease, as Open WebUI's own: `SET key token NX PX ttl`, renewed while held and
released only by its holder (compare-and-set in Lua). A replica that dies loses its lease after `ttl`. A lease is not
a fence: a replica stalled past the ttl could still write, so the writes keep their own checks (duplicate text
refused, confirmation reads).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from openwebui_rag_mcp.errors import ToolFailure

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
_POLL_FIRST = 0.05
_POLL_MAX = 0.5


class WriteLocks(Protocol):
    """One lock per knowledge base."""

    shared: bool  # whether other processes see the same locks

    def hold(self, key: str) -> AbstractAsyncContextManager[None]: ...

    async def aclose(self) -> None: ...


class LocalLocks:
    """Per-base `asyncio.Lock`s of this process; a base's lock is dropped once nobody holds or waits for it."""

    shared = False

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def _held(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def hold(self, key: str) -> AbstractAsyncContextManager[None]:
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
    ) -> None:
        self._store = store
        self._wait = wait_seconds
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._prefix = prefix
        self._clock = clock

    def hold(self, key: str) -> AbstractAsyncContextManager[None]:
        return self._held(self._prefix + key)

    @asynccontextmanager
    async def _held(self, key: str) -> AsyncIterator[None]:
        token = secrets.token_hex(16)
        await self._acquire(key, token)
        renewing = asyncio.create_task(self._keep(key, token))
        try:
            yield
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)
            try:
                if not await self._store.release(key, token):
                    log.warning("the write lease %s had expired before its write ended", key)
            except Exception as error:  # the lease expires by itself
                log.warning("could not release the write lease %s (%s)", key, type(error).__name__)

    async def _acquire(self, key: str, token: str) -> None:
        deadline = self._clock() + self._wait
        delay = _POLL_FIRST
        while True:
            try:
                if await self._store.acquire(key, token, self._ttl_ms):
                    return
            except Exception as error:
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
            delay = min(delay * 2, _POLL_MAX)

    async def _keep(self, key: str, token: str) -> None:
        while True:
            await asyncio.sleep(self._ttl_ms / 3000)
            try:
                if not await self._store.renew(key, token, self._ttl_ms):
                    log.warning("lost the write lease %s while its write was still running", key)
                    return
            except Exception as error:
                log.warning("could not renew the write lease %s (%s)", key, type(error).__name__)

    async def aclose(self) -> None:
        await self._store.aclose()
