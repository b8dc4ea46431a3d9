"""``RequestLog`` and ``UsageTotals`` alone, on each storage backend: buffering, the cap, pages,
filters, and usage counters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway_kit.config import RequestLogConfig
from gateway_kit.layers.cache.policy import CacheVerdict
from gateway_kit.observe.record import RequestRecord, iso_ms
from gateway_kit.observe.requestlog import RequestFilter, RequestLog
from gateway_kit.storage import MemoryStorage, SQLiteStorage, Storage
from gateway_kit.testing import FakeClock
from tests.observe.test_metrics import record

pytestmark = pytest.mark.anyio

DAY = 86_400.0
START = 1_795_000_000.0  # 2026-11-18


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def storage(
    request: pytest.FixtureRequest, tmp_path: Any, clock: FakeClock
) -> AsyncIterator[Storage]:
    if request.param == "memory":
        async with MemoryStorage(clock=clock) as memory:
            yield memory
    elif request.param == "sqlite":
        async with SQLiteStorage(tmp_path / "log.db", clock=clock) as sqlite:
            yield sqlite
    else:
        from gateway_kit.storage.redis import RedisStorage

        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        async with RedisStorage(url, prefix=prefix) as redis:
            yield redis


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def made(index: int, **fields: Any) -> RequestRecord:
    return record(request_id=f"req_{index}", at=START + index, **fields)


async def test_records_are_buffered_then_written_newest_first(
    storage: Storage, clock: FakeClock
) -> None:
    log = RequestLog(storage, RequestLogConfig(), clock=clock)
    for index in range(5):
        log.add(made(index))
    log.add(made(99, workspace_id=None))  # no workspace: not kept
    assert log.pending == 5
    assert (await log.page("ws_1")).records == []  # not written yet
    assert await log.flush() == 5
    page = await log.page("ws_1", limit=3)
    assert [r["id"] for r in page.records] == ["req_4", "req_3", "req_2"]
    rest = await log.page("ws_1", cursor=page.next_cursor, limit=3)
    assert [r["id"] for r in rest.records] == ["req_1", "req_0"]
    assert rest.next_cursor is None


async def test_the_log_keeps_max_records_per_workspace(storage: Storage, clock: FakeClock) -> None:
    log = RequestLog(storage, RequestLogConfig(max_records=100), clock=clock)
    for index in range(130):
        log.add(made(index))
    log.add(made(1000, workspace_id="ws_2"))
    await log.flush()
    kept = await log.page("ws_1", limit=1000)
    assert len(kept.records) == 100
    assert kept.records[-1]["id"] == "req_30"
    assert [r["id"] for r in (await log.page("ws_2")).records] == ["req_1000"]


async def test_filters_and_a_rare_match_answer_with_a_cursor(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gateway_kit.observe.requestlog as module

    monkeypatch.setattr(module, "SCAN_LIMIT", 50)
    log = RequestLog(storage, RequestLogConfig(), clock=clock)
    log.add(made(0, status=502, served_model="big"))
    for index in range(1, 120):
        log.add(made(index, key_id="kid_2" if index % 3 else "kid_1"))
    await log.flush()
    rare = RequestFilter(status="5xx")
    first = await log.page("ws_1", where=rare)
    assert (first.records, first.next_cursor is None) == ([], False)  # 50 read, none matched
    found: list[dict[str, Any]] = []
    cursor = first.next_cursor
    while cursor is not None:
        page = await log.page("ws_1", where=rare, cursor=cursor)
        found += page.records
        cursor = page.next_cursor
    assert [r["id"] for r in found] == ["req_0"]
    monkeypatch.undo()
    by_key = await log.page("ws_1", where=RequestFilter(key_id="kid_1"), limit=1000)
    assert len(by_key.records) == 40
    model = await log.page("ws_1", where=RequestFilter(model="big"))
    assert [r["id"] for r in model.records] == ["req_0"]
    window = RequestFilter(since=iso_ms(START + 20), until=iso_ms(START + 30))
    assert len((await log.page("ws_1", where=window, limit=1000)).records) == 10


async def test_the_buffer_is_bounded_when_the_storage_stays_down(clock: FakeClock) -> None:
    class Down(MemoryStorage):
        async def log_extend(self, *args: Any, **kwargs: Any) -> None:
            from gateway_kit.exceptions import StorageError

            raise StorageError("down")

    async with Down(clock=clock) as down:
        log = RequestLog(down, RequestLogConfig(max_pending=1000), clock=clock)
        for index in range(1500):
            log.add(made(index))
        assert (log.pending, log.dropped) == (1000, 500)
        await log.flush()
        assert (log.pending, log.dropped) == (1000, 500)  # kept for the next try


async def test_usage_totals_add_up_per_day_and_model(storage: Storage, clock: FakeClock) -> None:
    log = RequestLog(storage, RequestLogConfig(), clock=clock)
    log.add(made(0, served_model="a"))
    log.add(made(1, served_model="a", status=500, cost_micro_usd=None))
    log.add(made(2, served_model="b", verdicts={"cache": CacheVerdict(action="hit")}))
    log.add(record(request_id="req_3", at=START + DAY, served_model="a"))
    await log.flush()
    clock.advance(DAY)
    rows = await log.usage.read("ws_1")
    table = {(row.day, row.model): row.totals for row in rows}
    assert set(table) == {("2026-11-18", "a"), ("2026-11-18", "b"), ("2026-11-19", "a")}
    first = table[("2026-11-18", "a")]
    assert (first["requests"], first["errors"], first["input_tokens"]) == (2, 1, 20)
    assert first["cost_micro_usd"] == 1_500_000
    hit = table[("2026-11-18", "b")]
    assert (hit["cache_hits"], hit["input_tokens"], hit["savings_micro_usd"]) == (1, 0, 500_000)
    assert [row.day for row in await log.usage.read("ws_1", since="2026-11-19")] == ["2026-11-19"]
    # Days past usage_days are dropped from the list.
    clock.advance(402 * DAY)
    assert await log.usage.read("ws_1") == []


async def test_two_gateways_on_one_redis_write_one_log_and_one_usage(
    redis_url: str, redis_prefix: str
) -> None:
    """Two instances' records of one workspace land in one log (no record lost or doubled,
    pages in order of the writes) and their usage adds up in the same counters."""
    from gateway_kit.storage.redis import RedisStorage

    clock = FakeClock(START)
    async with (
        RedisStorage(redis_url, prefix=redis_prefix) as first,
        RedisStorage(redis_url, prefix=redis_prefix) as second,
    ):
        logs = [RequestLog(s, RequestLogConfig(), clock=clock) for s in (first, second)]
        for index in range(300):
            logs[index % 2].add(made(index))
        await logs[0].flush()
        await logs[1].flush()
        seen: list[str] = []
        cursor = None
        while True:
            page = await logs[0].page("ws_1", cursor=cursor, limit=70)
            seen += [r["id"] for r in page.records]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert sorted(seen) == sorted(f"req_{i}" for i in range(300))
        [row] = await logs[1].usage.read("ws_1")
        assert row.totals["requests"] == 300
        assert row.totals["cost_micro_usd"] == 300 * 1_500_000


async def test_the_dropped_records_counter_outlives_a_restart(clock: FakeClock) -> None:
    from gateway_kit import Gateway, GatewayConfig
    from gateway_kit.exceptions import StorageError

    class Down(MemoryStorage):
        async def log_extend(self, *args: Any, **kwargs: Any) -> None:
            raise StorageError("down")

    def dropped(gateway: Gateway) -> float:
        assert gateway.metrics is not None
        value = gateway.metrics.registry().get_sample_value("gateway_request_log_dropped_total")
        assert value is not None
        return value

    config = GatewayConfig.model_validate(
        {"metrics": {"enabled": True}, "request_log": {"max_pending": 1000}}
    )
    gateway = Gateway(config, storage=Down(clock=clock), clock=clock, run_worker=False)
    for start in range(2):
        async with gateway:
            for index in range(1050):
                gateway.requests.add(made(start * 10_000 + index))
            # A counter never goes down: the second start's log counted from 0 again.
            assert dropped(gateway) == 50 * (start + 1)
