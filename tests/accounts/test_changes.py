"""The change feed: ordered, nothing lost, one read per poll, and never trusted when stale."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest

from gateway_kit import MemoryStorage
from gateway_kit.accounts.changes import FEED_KEY, ChangeFeed, FeedCache
from gateway_kit.accounts.keys import Keys, hash_key
from gateway_kit.events.bus import EventBus
from gateway_kit.testing import FakeClock
from tests.accounts.spy import StorageSpy

pytestmark = pytest.mark.anyio

WS = "ws_feedtest"


@pytest.fixture
async def memory(clock: FakeClock) -> Any:
    async with MemoryStorage(clock=clock) as storage:
        yield storage


async def feed_value(storage: Any) -> dict[str, Any]:
    raw = await storage.get(FEED_KEY)
    assert raw is not None
    value: dict[str, Any] = json.loads(raw)
    return value


async def test_a_poll_drops_exactly_the_entries_the_new_changes_name(
    memory: Any, clock: FakeClock
) -> None:
    writer = ChangeFeed(memory, cache_ttl=0)
    reader = ChangeFeed(memory, clock=clock)
    plans: FeedCache[str] = FeedCache(reader, "plan")
    caps: FeedCache[str] = FeedCache(reader, "budget")
    await reader.poll()
    for ws in ("ws_a", "ws_b"):
        plans.put(ws, f"plan of {ws}", version=plans.version)
        caps.put(ws, f"caps of {ws}", version=caps.version)

    await writer.publish(("plan", "ws_a"), ("budget", "ws_b"))
    assert plans.get("ws_a") == "plan of ws_a"  # not polled yet
    await reader.poll()

    assert plans.get("ws_a") is None
    assert plans.get("ws_b") == "plan of ws_b"
    assert caps.get("ws_a") == "caps of ws_a"
    assert caps.get("ws_b") is None


async def test_concurrent_writers_lose_no_change_and_keep_each_ones_order(
    storages: tuple[Any, Any], clock: FakeClock
) -> None:
    first, second = storages
    writers = [ChangeFeed(store, cache_ttl=0) for store in (first, first, second, second)]
    reader = ChangeFeed(second, clock=clock)
    plans: FeedCache[bool] = FeedCache(reader, "plan")
    await reader.poll()
    names = {w: [f"ws_w{w}n{n}" for n in range(15)] for w in range(len(writers))}
    for ws in [*(ws for batch in names.values() for ws in batch), "ws_untouched"]:
        plans.put(ws, True, version=plans.version)
    done = anyio.Event()

    async def write(index: int) -> None:
        for ws in names[index]:
            await writers[index].publish(("plan", ws))

    async def poll_meanwhile() -> None:
        while not done.is_set():
            await reader.poll()
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(poll_meanwhile)
        async with anyio.create_task_group() as writing:
            for index in names:
                writing.start_soon(write, index)
        done.set()
    await reader.poll()

    value = await feed_value(first)
    assert value["seq"] == 60
    entries = value["changes"]
    assert len(entries) == len(set(entries)) == 60
    for batch in names.values():
        positions = [entries.index(f"plan:{ws}") for ws in batch]
        assert positions == sorted(positions)
    # Every change reached the reader one by one: an entry no change named is still there.
    assert all(plans.get(ws) is None for batch in names.values() for ws in batch)
    assert plans.get("ws_untouched") is True


async def test_a_reader_that_fell_behind_the_feed_drops_everything(
    memory: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    writer = ChangeFeed(memory, cache_ttl=0, length=4)
    reader = ChangeFeed(memory, clock=clock)
    plans: FeedCache[str] = FeedCache(reader, "plan")
    keys: FeedCache[str] = FeedCache(reader, "key")
    await reader.poll()
    plans.put("ws_kept", "x", version=plans.version)
    keys.put("digest", "y", version=keys.version)
    await writer.publish(*(("billing", f"ws_{n}") for n in range(4)))
    await reader.poll()
    assert plans.get("ws_kept") == "x"  # four changes: all still on the list

    await writer.publish(*(("billing", f"ws_{n}") for n in range(5)))
    before = reader.version
    with caplog.at_level(logging.INFO, logger="gateway_kit.accounts.changes"):
        await reader.poll()
    assert plans.get("ws_kept") is None
    assert keys.get("digest") is None
    assert reader.version > before
    assert "dropping every cached account entry" in caplog.text
    assert len((await feed_value(memory))["changes"]) == 4


@pytest.mark.parametrize("damage", ["deleted", "unreadable"])
async def test_a_lost_or_damaged_feed_drops_everything_and_is_made_again(
    memory: Any, clock: FakeClock, damage: str
) -> None:
    writer = ChangeFeed(memory, cache_ttl=0)
    reader = ChangeFeed(memory, clock=clock)
    plans: FeedCache[str] = FeedCache(reader, "plan")
    await writer.publish(("plan", "ws_other"))
    await reader.poll()
    plans.put("ws_kept", "x", version=plans.version)
    epoch = (await feed_value(memory))["epoch"]
    if damage == "deleted":
        await memory.delete(FEED_KEY)
    else:
        await memory.set(FEED_KEY, b"\x00 not json")
    await writer.publish(("plan", "ws_other"))

    await reader.poll()
    assert plans.get("ws_kept") is None
    value = await feed_value(memory)
    assert value["epoch"] != epoch
    assert value["seq"] == 1


async def test_a_poll_is_one_storage_read(memory: Any, clock: FakeClock) -> None:
    spy = StorageSpy(memory)
    reader = ChangeFeed(spy, clock=clock)
    await ChangeFeed(memory, cache_ttl=0).publish(("key", "d1"))
    for _ in range(3):
        await reader.poll()
    assert spy.calls == [("get", FEED_KEY)] * 3


async def test_entries_are_trusted_only_while_the_last_good_poll_is_recent(
    memory: Any, clock: FakeClock
) -> None:
    spy = StorageSpy(memory)
    reader = ChangeFeed(spy, cache_ttl=5.0, clock=clock)
    plans: FeedCache[str] = FeedCache(reader, "plan")
    assert plans.get("ws_a") is None  # never polled: nothing is trusted
    await reader.poll()
    plans.put("ws_a", "x", version=plans.version)
    clock.advance(4.9)
    assert plans.get("ws_a") == "x"
    clock.advance(0.1)
    assert plans.get("ws_a") is None  # 5 s since the poll began

    spy.failing = lambda method, key: key == FEED_KEY
    with pytest.raises(Exception, match="storage is down"):
        await reader.poll()
    assert plans.get("ws_a") is None
    spy.failing = lambda method, key: False
    await reader.poll()
    assert plans.get("ws_a") == "x"  # nothing changed meanwhile: the entry is good again


async def test_a_stuck_poll_does_not_keep_the_cache_trusted(memory: Any, clock: FakeClock) -> None:
    spy = StorageSpy(memory)
    reader = ChangeFeed(spy, cache_ttl=5.0, clock=clock)
    plans: FeedCache[str] = FeedCache(reader, "plan")
    await reader.poll()
    plans.put("ws_a", "x", version=plans.version)
    spy.hold_get(FEED_KEY)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader.poll)
        await spy.held.wait()
        clock.advance(4.9)
        assert plans.get("ws_a") == "x"
        clock.advance(0.1)
        assert plans.get("ws_a") is None  # a poll under way vouches for nothing yet
        spy.release.set()
    assert plans.get("ws_a") is None  # it read the feed 5 s ago: as old as the bound
    await reader.poll()
    assert plans.get("ws_a") == "x"


async def test_cached_entries_outlive_the_ttl_until_their_jittered_backstop(
    memory: Any, clock: FakeClock
) -> None:
    reader = ChangeFeed(memory, clock=clock, max_age=600.0, rand=lambda: 0.5)
    plans: FeedCache[str] = FeedCache(reader, "plan")
    await reader.poll()
    plans.put("ws_a", "x", version=plans.version)
    for _ in range(26):  # polling every 20 s, for 520 s
        clock.advance(20)
        await reader.poll()
        assert plans.get("ws_a") == "x"
    clock.advance(20)  # 540 s: 600 s less the drawn 10 % (jitter is up to 20 %)
    await reader.poll()
    assert plans.get("ws_a") is None


async def test_an_entry_read_before_the_first_poll_is_dropped_by_it(
    memory: Any, clock: FakeClock
) -> None:
    reader = ChangeFeed(memory, clock=clock)
    plans: FeedCache[str] = FeedCache(reader, "plan")
    plans.put("ws_a", "read before any poll", version=plans.version)
    await reader.poll()
    assert plans.get("ws_a") is None


async def test_a_cache_ttl_of_zero_keeps_nothing_and_runs_no_loop(
    memory: Any, clock: FakeClock
) -> None:
    spy = StorageSpy(memory)
    feed = ChangeFeed(spy, cache_ttl=0, clock=clock)
    plans: FeedCache[str] = FeedCache(feed, "plan")
    await feed.poll()
    plans.put("ws_a", "x", version=plans.version)
    assert plans.get("ws_a") is None
    assert len(plans) == 0
    spy.calls.clear()
    async with anyio.create_task_group() as tasks:
        await tasks.start(feed.run)  # returns at once: nothing to keep fresh
    assert spy.calls == []


async def test_a_record_read_before_a_revocation_is_not_cached_after_it(
    memory: Any, clock: FakeClock
) -> None:
    """The race: a miss reads the (still valid) record; the key is revoked and the change is
    polled and applied; only then does the read's answer arrive. It must not be cached."""
    spy = StorageSpy(memory)
    reader = Keys(spy, EventBus(), changes=ChangeFeed(spy, clock=clock))
    writer = Keys(memory, EventBus())
    made = await writer.create(WS)
    await reader.changes.poll()
    spy.hold_get(f"gk:apikey:{hash_key(made.secret)}")
    answers: list[object] = []

    async def authenticate() -> None:
        answers.append(await reader.authenticate(made.secret))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(authenticate)
        await spy.held.wait()
        await writer.revoke(WS, made.key.key_id)
        await reader.changes.poll()
        spy.release.set()

    assert answers[0] is not None  # answered from a read made before the revocation
    assert await reader.authenticate(made.secret) is None
    assert len(spy.reads()) == 2  # the second answer came from storage, not the cache


async def test_the_writer_drops_its_own_entries_at_once(memory: Any, clock: FakeClock) -> None:
    keys = Keys(memory, EventBus(), changes=ChangeFeed(memory, clock=clock))
    await keys.changes.poll()
    made = await keys.create(WS)
    assert await keys.authenticate(made.secret) is not None
    await keys.revoke(WS, made.key.key_id)
    assert await keys.authenticate(made.secret) is None  # no poll needed here


async def test_the_background_loop_polls_and_outlives_failures(
    memory: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    spy = StorageSpy(memory)
    reader = ChangeFeed(spy, cache_ttl=3600.0, clock=clock)  # polls every 900 s unless woken
    plans: FeedCache[str] = FeedCache(reader, "plan")
    writer = ChangeFeed(memory, cache_ttl=0)
    async with anyio.create_task_group() as tasks:
        await tasks.start(reader.run)  # the first poll is done before it reports started
        assert spy.polls() == 1
        plans.put("ws_a", "x", version=plans.version)
        await writer.publish(("plan", "ws_a"))
        await reader.next_poll()
        assert plans.get("ws_a") is None

        spy.failing = lambda method, key: key == FEED_KEY
        with caplog.at_level(logging.WARNING, logger="gateway_kit.accounts.changes"):
            await reader.next_poll()
            await reader.next_poll()
        assert caplog.text.count("change feed poll failed") == 1  # once per outage
        spy.failing = lambda method, key: False
        await reader.next_poll()
        assert spy.polls() == 5
        tasks.cancel_scope.cancel()
