"""API keys: shown once, stored hashed, rotated with a grace period, revoked."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from gateway_kit import MemoryStorage, NotFoundError, SQLiteStorage
from gateway_kit.accounts.changes import ChangeFeed
from gateway_kit.accounts.keys import KEY_PATTERN, Keys, hash_key
from gateway_kit.events.bus import EventBus, EventRecorder
from gateway_kit.storage.redis import RedisStorage
from gateway_kit.testing import FakeClock

pytestmark = pytest.mark.anyio

WS = "ws_test1"


class WriteSpy(MemoryStorage):
    """Memory storage that records every write."""

    writes: list[str]

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.writes = []

    async def set(self, key: str, value: bytes, **options: Any) -> bool:
        self.writes.append(f"set {key}")
        return await super().set(key, value, **options)

    async def delete(self, key: str) -> bool:
        self.writes.append(f"delete {key}")
        return await super().delete(key)

    async def map_set(self, key: str, field: str, value: bytes) -> None:
        self.writes.append(f"map_set {key}")
        await super().map_set(key, field, value)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def storage(clock: FakeClock) -> AsyncIterator[WriteSpy]:
    async with WriteSpy(clock=clock) as store:
        yield store


@pytest.fixture
def events() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def keys(storage: WriteSpy, events: EventRecorder) -> Keys:
    bus = EventBus()
    bus.subscribe(events)
    return Keys(storage, bus)


async def test_a_new_key_is_shown_once_and_only_its_hash_is_stored(
    keys: Keys, storage: WriteSpy
) -> None:
    made = await keys.create(WS, name="ci")
    assert KEY_PATTERN.fullmatch(made.secret)
    assert made.key.key_id.startswith("kid_")
    assert made.secret.startswith(made.key.prefix)
    records = await storage.map_items(f"{WS}:keys")
    index = await storage.get(f"gk:apikey:{hash_key(made.secret)}") or b""
    dump = b"".join([*records.values(), index])
    assert made.secret.encode() not in dump
    assert hash_key(made.secret).encode() in dump
    assert made.secret not in json.dumps(made.key.public())


async def test_authenticate_maps_a_key_to_its_workspace(keys: Keys) -> None:
    made = await keys.create(WS)
    principal = await keys.authenticate(made.secret)
    assert principal is not None
    assert (principal.workspace_id, principal.key_id) == (WS, made.key.key_id)


@pytest.mark.parametrize(
    "secret",
    ["", "gk_short", "sk-" + "a" * 43, "gk_" + "a" * 42 + "!", "gk_" + "a" * 44],
)
async def test_malformed_keys_are_refused_without_touching_storage(
    keys: Keys, storage: WriteSpy, secret: str
) -> None:
    assert await keys.authenticate(secret) is None
    assert storage.writes == []


async def test_an_unknown_key_causes_no_storage_writes(keys: Keys, storage: WriteSpy) -> None:
    await keys.create(WS)
    storage.writes.clear()
    assert await keys.authenticate("gk_" + "x" * 43) is None
    assert storage.writes == []


async def test_rotation_without_grace_stops_the_old_secret_at_once(
    keys: Keys, events: EventRecorder
) -> None:
    made = await keys.create(WS)
    rotated = await keys.rotate(WS, made.key.key_id)
    assert rotated.key.key_id == made.key.key_id
    assert rotated.secret != made.secret
    assert await keys.authenticate(made.secret) is None
    assert await keys.authenticate(rotated.secret) is not None
    (event,) = events.events
    assert event.event == "key.rotated"
    assert event.workspace_id == WS
    assert event.data.action == "rotated"
    assert event.data.key_id == made.key.key_id
    assert event.data.key_prefix == rotated.key.prefix
    body = event.to_bytes().decode()
    assert made.secret not in body
    assert rotated.secret not in body
    assert hash_key(made.secret) not in body


async def test_rotation_with_grace_keeps_the_old_secret_until_it_lapses(
    keys: Keys, clock: FakeClock
) -> None:
    made = await keys.create(WS)
    rotated = await keys.rotate(WS, made.key.key_id, grace=60)
    clock.advance(59)
    assert await keys.authenticate(made.secret) is not None
    assert await keys.authenticate(rotated.secret) is not None
    clock.advance(2)
    assert await keys.authenticate(made.secret) is None
    assert await keys.authenticate(rotated.secret) is not None


async def test_a_cached_key_in_its_grace_period_still_lapses_on_time(
    storage: WriteSpy, clock: FakeClock
) -> None:
    changes = ChangeFeed(storage, cache_ttl=3600, clock=clock)
    await changes.poll()
    keys = Keys(storage, EventBus(), changes=changes)
    made = await keys.create(WS)
    assert await keys.authenticate(made.secret) is not None  # now cached
    await keys.rotate(WS, made.key.key_id, grace=10)
    assert await keys.authenticate(made.secret) is not None
    clock.advance(11)
    assert await keys.authenticate(made.secret) is None


async def test_revocation_stops_every_secret_and_is_published(
    keys: Keys, events: EventRecorder, clock: FakeClock
) -> None:
    made = await keys.create(WS)
    rotated = await keys.rotate(WS, made.key.key_id, grace=3600)
    revoked = await keys.revoke(WS, made.key.key_id)
    assert not revoked.active
    assert revoked.public()["status"] == "revoked"
    assert await keys.authenticate(made.secret) is None
    assert await keys.authenticate(rotated.secret) is None
    assert [e.data.action for e in events.events] == ["rotated", "revoked"]
    with pytest.raises(NotFoundError):
        await keys.revoke(WS, made.key.key_id)
    with pytest.raises(NotFoundError):
        await keys.rotate(WS, made.key.key_id)


async def test_keys_of_another_workspace_are_not_found(keys: Keys) -> None:
    made = await keys.create(WS)
    assert await keys.get("ws_other", made.key.key_id) is None
    with pytest.raises(NotFoundError):
        await keys.revoke("ws_other", made.key.key_id)
    assert await keys.authenticate(made.secret) is not None


async def test_listing_shows_prefixes_never_secrets(keys: Keys) -> None:
    first = await keys.create(WS, name="a")
    second = await keys.create(WS, name="b")
    listed = await keys.list(WS)
    assert [k.name for k in listed] == ["a", "b"]
    text = json.dumps([k.public() for k in listed])
    assert first.secret not in text
    assert second.secret not in text
    assert hash_key(first.secret) not in text


async def test_a_second_rotation_never_lengthens_a_grace_already_given(
    keys: Keys, clock: FakeClock
) -> None:
    made = await keys.create(WS)
    first = await keys.rotate(WS, made.key.key_id, grace=3)
    second = await keys.rotate(WS, made.key.key_id, grace=600)
    clock.advance(4)
    assert await keys.authenticate(made.secret) is None  # its 3 s, not 600
    assert await keys.authenticate(first.secret) is not None
    assert await keys.authenticate(second.secret) is not None
    third = await keys.rotate(WS, made.key.key_id, grace=600)
    record = await keys.get(WS, made.key.key_id)
    assert record is not None  # what lapsed is dropped from the record as the key rotates
    assert record.hashes == tuple(hash_key(s.secret) for s in (first, second, third))
    await keys.revoke(WS, made.key.key_id)
    assert [await keys.authenticate(s.secret) for s in (first, second, third)] == [None] * 3


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_concurrent_rotations_and_a_revocation_leave_no_stray_secret(
    backend: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """Rotations at once (from two gateways' storages on Redis) were each a read, a change
    and a write of the key's record: all but the last's new secret stayed working outside the
    record, and revoking the key left them working. One at a time now: the last rotation's
    secret alone works, and after a revocation racing more rotations none does."""
    async with AsyncExitStack() as stack:
        if backend == "sqlite":
            one = await stack.enter_async_context(SQLiteStorage(tmp_path / "keys.db"))
            stores = [one, one]
        else:
            url, prefix = (
                request.getfixturevalue("redis_url"),
                request.getfixturevalue("redis_prefix"),
            )
            stores = [
                await stack.enter_async_context(RedisStorage(url, prefix=prefix)) for _ in range(2)
            ]
        gateways = [Keys(store, EventBus()) for store in stores]
        made = await gateways[0].create(WS)
        key_id = made.key.key_id
        secrets: list[str] = []

        async def rotate(keys: Keys) -> None:
            with contextlib.suppress(NotFoundError):  # revoked first
                secrets.append((await keys.rotate(WS, key_id)).secret)

        async with anyio.create_task_group() as group:
            for index in range(8):
                group.start_soon(rotate, gateways[index % 2])
        working = [s for s in secrets if await gateways[0].authenticate(s) is not None]
        record = await gateways[1].get(WS, key_id)
        assert record is not None
        assert len(secrets) == 8
        assert working == [secrets[-1]]  # the last one to rotate: the others it retired
        assert record.hashes == (hash_key(secrets[-1]),)
        secrets.clear()
        async with anyio.create_task_group() as group:
            for index in range(6):
                group.start_soon(rotate, gateways[index % 2])
            group.start_soon(gateways[1].revoke, WS, key_id)
        candidates = [made.secret, *secrets]
        assert [s for s in candidates if await gateways[0].authenticate(s) is not None] == []
        record = await gateways[0].get(WS, key_id)
        assert record is not None
        assert not record.active
