"""Write locks per base: in process, and as leases in a shared store (Redis across replicas), with a fake clock
where a lease expires."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from openwebui_rag_mcp import runtime
from openwebui_rag_mcp.config import ConfigError, load_settings
from openwebui_rag_mcp.errors import ToolFailure
from openwebui_rag_mcp.locks import LeaseLocks, LeasePolls, LocalLocks

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeStore:
    """A lease store with Redis's semantics (SET NX PX, compare-and-set renew and release) on a fake clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.leases: dict[str, tuple[str, float]] = {}
        self.renewals = 0

    def _live(self, key: str) -> tuple[str, float] | None:
        lease = self.leases.get(key)
        if lease is not None and lease[1] <= self.clock():
            del self.leases[key]
            return None
        return lease

    async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        if self._live(key) is not None:
            return False
        self.leases[key] = (token, self.clock() + ttl_ms / 1000)
        return True

    async def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        lease = self._live(key)
        if lease is None or lease[0] != token:
            return False
        self.renewals += 1
        self.leases[key] = (token, self.clock() + ttl_ms / 1000)
        return True

    async def release(self, key: str, token: str) -> bool:
        lease = self._live(key)
        if lease is None or lease[0] != token:
            return False
        del self.leases[key]
        return True

    async def aclose(self) -> None:
        return None


async def test_local_locks_serialise_one_base_and_not_two() -> None:
    locks = LocalLocks()
    order: list[str] = []

    async def write(base: str, name: str, hold: float) -> None:
        async with locks.hold(base):
            order.append(f"{name} in")
            await asyncio.sleep(hold)
            order.append(f"{name} out")

    await asyncio.gather(write("a", "a1", 0.03), write("a", "a2", 0.0), write("b", "b1", 0.0))
    assert order.index("a1 out") < order.index("a2 in")  # one base: one after the other
    assert order.index("b1 out") < order.index("a1 out")  # another base: not held up
    assert locks._locks == {}  # nothing kept once nobody holds or waits


FAST_POLLS = LeasePolls(first=0.001, most=0.002)


async def test_a_lease_is_exclusive_per_base_across_replicas() -> None:
    clock = Clock()
    store = FakeStore(clock)
    replica_a = LeaseLocks(store, wait_seconds=60, clock=clock, polls=FAST_POLLS)
    replica_b = LeaseLocks(store, wait_seconds=60, clock=clock, polls=FAST_POLLS)
    order: list[str] = []

    async def write(locks: LeaseLocks, base: str, name: str) -> None:
        async with locks.hold(base):
            order.append(f"{name} in")
            await asyncio.sleep(0.02)
            order.append(f"{name} out")

    await asyncio.gather(write(replica_a, "kb", "a"), write(replica_b, "kb", "b"), write(replica_b, "other", "c"))
    first, second = ("a", "b") if order.index("a in") < order.index("b in") else ("b", "a")
    assert order.index(f"{first} out") < order.index(f"{second} in")
    assert order.index("c in") < order.index(f"{first} out")
    assert store.leases == {}  # released


async def test_a_dead_replicas_lease_expires() -> None:
    """A replica that died holding a lease blocks the base only until the lease's ttl has passed."""
    clock = Clock()
    store = FakeStore(clock)
    assert await store.acquire("openwebui-rag-mcp:write:kb", "dead-replica", 30_000)
    alive = LeaseLocks(store, wait_seconds=120, clock=clock, polls=FAST_POLLS)

    async def later() -> None:
        await asyncio.sleep(0.01)
        clock.now = 31.0  # past the dead replica's lease

    entered = asyncio.Event()

    async def write() -> None:
        async with alive.hold("kb"):
            entered.set()

    await asyncio.gather(write(), later())
    assert entered.is_set()


async def test_waiting_too_long_is_a_conflict_that_changed_nothing() -> None:
    clock = Clock()
    store = FakeStore(clock)
    assert await store.acquire("openwebui-rag-mcp:write:kb", "someone", 600_000)
    locks = LeaseLocks(store, wait_seconds=5, clock=clock, polls=FAST_POLLS)

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.001)
            clock.now += 1

    ticking = asyncio.create_task(tick())
    try:
        with pytest.raises(ToolFailure) as caught:
            async with locks.hold("kb"):
                pytest.fail("entered a held lock")
    finally:
        ticking.cancel()
    assert (caught.value.code, caught.value.request_sent, caught.value.retryable) == ("conflict", False, True)


async def test_a_held_lease_is_renewed_while_its_write_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write waiting minutes for Open WebUI keeps its lease: renewed every third of the ttl."""
    clock = Clock()
    store = FakeStore(clock)
    locks = LeaseLocks(store, wait_seconds=5, ttl_seconds=0.03, clock=clock)
    async with locks.hold("kb"):
        for _ in range(5):
            await asyncio.sleep(0.012)
            clock.now += 0.012
        assert store.renewals >= 3
        assert "openwebui-rag-mcp:write:kb" in store.leases
    assert store.leases == {}


async def test_an_unreachable_store_refuses_the_write_before_anything_is_sent() -> None:
    class Broken(FakeStore):
        async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
            raise ConnectionError("redis down")

    locks = LeaseLocks(Broken(Clock()), wait_seconds=5)
    with pytest.raises(ToolFailure) as caught:
        async with locks.hold("kb"):
            pytest.fail("entered without a lease")
    assert (caught.value.code, caught.value.request_sent) == ("upstream_unavailable", False)


# -- issue 16: a cancelled write gives its lease back (6), a lost lease is known to its holder (7) ----------------


async def test_a_cancelled_write_releases_its_lease() -> None:
    """The SDK cancels a tool through anyio: the release must still reach the store, or the base stays locked on
    every replica until the lease runs out."""
    store = FakeStore(Clock())
    released: list[str] = []
    original_release = store.release

    async def release(key: str, token: str) -> bool:
        await asyncio.sleep(0)  # a real store answers over the network
        released.append(key)
        return await original_release(key, token)

    store.release = release  # type: ignore[method-assign]
    locks = LeaseLocks(store, wait_seconds=5)
    entered = anyio.Event()

    async def write() -> None:
        async with locks.hold("kb"):
            entered.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as group:
        group.start_soon(write)
        await entered.wait()
        group.cancel_scope.cancel()
    assert released == ["openwebui-rag-mcp:write:kb"]
    assert store.leases == {}


class RenewalFails(FakeStore):
    """Renewals answer with these results in turn (an exception is raised), then succeed."""

    def __init__(self, clock: Clock, *answers: bool | Exception) -> None:
        super().__init__(clock)
        self.answers = list(answers)
        self.renewed = anyio.Event()

    async def renew(self, key: str, token: str, ttl_ms: int) -> bool:
        try:
            if self.answers:
                answer = self.answers.pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return answer
            return await super().renew(key, token, ttl_ms)
        finally:
            if not self.answers:
                self.renewed.set()


async def held_through_renewals(store: RenewalFails, clock: Clock) -> bool:
    """Hold a lease until the store has given every scripted renewal answer; whether the holder saw it lost."""
    locks = LeaseLocks(store, wait_seconds=5, ttl_seconds=0.03, clock=clock)
    async with locks.hold("kb") as lease:
        assert not lease.lost
        await store.renewed.wait()
        await asyncio.sleep(0)
        return lease.lost


async def test_a_renewal_answered_not_yours_loses_the_lease() -> None:
    clock = Clock()
    store = RenewalFails(clock, False)
    locks = LeaseLocks(store, wait_seconds=5, ttl_seconds=0.03, clock=clock)
    async with locks.hold("kb") as lease:
        await store.renewed.wait()
        await asyncio.sleep(0)
        assert lease.lost
        with pytest.raises(ToolFailure) as caught:
            lease.check()
    assert (caught.value.code, caught.value.request_sent) == ("conflict", False)
    assert "lost" in caught.value.message


async def test_one_transient_renewal_error_within_the_ttl_is_tolerated() -> None:
    clock = Clock()
    store = RenewalFails(clock, ConnectionError("blip"), True)
    assert not await held_through_renewals(store, clock)


async def test_two_renewal_errors_in_a_row_lose_the_lease() -> None:
    clock = Clock()
    store = RenewalFails(clock, ConnectionError("blip"), ConnectionError("down"))
    assert await held_through_renewals(store, clock)


async def test_a_renewal_error_too_late_in_the_ttl_loses_the_lease() -> None:
    """No second chance when a retry could not land inside the ttl any more."""
    clock = Clock()

    class Late(RenewalFails):
        async def renew(self, key: str, token: str, ttl_ms: int) -> bool:
            clock.now += 0.025  # the failed renewal took most of the ttl
            return await super().renew(key, token, ttl_ms)

    assert await held_through_renewals(Late(clock, ConnectionError("slow")), clock)


async def test_a_lease_not_renewed_within_its_ttl_counts_as_lost() -> None:
    """Renewals that stall (a frozen event loop, a hung store) must not leave the holder believing it holds."""
    clock = Clock()
    locks = LeaseLocks(FakeStore(clock), wait_seconds=5, ttl_seconds=30, clock=clock)
    async with locks.hold("kb") as lease:
        clock.now += 31
        assert lease.lost


async def test_local_locks_are_never_lost() -> None:
    async with LocalLocks().hold("kb") as lease:
        lease.check()
        assert not lease.lost


@pytest.mark.parametrize("applied", [True, False])
async def test_an_acquire_that_failed_after_sending_leaves_no_lease(applied: bool) -> None:
    """The SET may have reached Redis while its answer was lost: the same token is released before the error."""
    clock = Clock()

    class AnswerLost(FakeStore):
        async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
            if applied:
                await super().acquire(key, token, ttl_ms)
            raise TimeoutError("no answer")

    store = AnswerLost(clock)
    with pytest.raises(ToolFailure) as caught:
        async with LeaseLocks(store, wait_seconds=5, clock=clock).hold("kb"):
            pytest.fail("entered without a lease")
    assert caught.value.code == "upstream_unavailable"
    assert store.leases == {}
    assert await FakeStore.acquire(store, "openwebui-rag-mcp:write:kb", "another replica", 30_000)  # free


async def test_an_acquire_cancelled_in_flight_leaves_no_lease() -> None:
    clock = Clock()
    sent = anyio.Event()

    class Slow(FakeStore):
        async def acquire(self, key: str, token: str, ttl_ms: int) -> bool:
            await super().acquire(key, token, ttl_ms)  # applied in Redis; the answer never arrives
            sent.set()
            await anyio.sleep_forever()
            return True

    store = Slow(clock)

    async def write() -> None:
        async with LeaseLocks(store, wait_seconds=5, clock=clock).hold("kb"):
            pytest.fail("entered")

    async with anyio.create_task_group() as group:
        group.start_soon(write)
        await sent.wait()
        group.cancel_scope.cancel()
    assert store.leases == {}


@pytest.mark.parametrize(("variable", "ttl"), [(None, 30.0), ("7.5", 7.5)])
async def test_the_lease_lasts_what_openwebui_mcp_lease_seconds_says(
    monkeypatch: pytest.MonkeyPatch, variable: str | None, ttl: float
) -> None:
    """A replica's lease lasts OPENWEBUI_MCP_LEASE_SECONDS (30 by default): what a dead replica's lock outlives it."""
    clock = Clock()
    store = FakeStore(clock)
    monkeypatch.setattr(runtime, "RedisLeaseStore", lambda url: store)
    environ = {"OPENWEBUI_URL": "http://localhost:8080", "OPENWEBUI_API_KEY": "sk-test", "REDIS_URL": "redis://r:6379"}
    if variable is not None:
        environ["OPENWEBUI_MCP_LEASE_SECONDS"] = variable
    locks = runtime.make_locks(load_settings(environ))
    async with locks.hold("kb"):
        [(_, expires)] = store.leases.values()
    assert expires == ttl


@pytest.mark.parametrize("value", ["2", "601", "soon"])
def test_a_lease_outside_3_to_600_seconds_is_a_configuration_error(value: str) -> None:
    environ = {"OPENWEBUI_URL": "http://localhost:8080", "OPENWEBUI_API_KEY": "sk-test"}
    with pytest.raises(ConfigError, match="OPENWEBUI_MCP_LEASE_SECONDS"):
        load_settings({**environ, "OPENWEBUI_MCP_LEASE_SECONDS": value})
