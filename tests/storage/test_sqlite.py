"""SQLiteStorage beyond the conformance suite: WAL, threads, locking, reopening, purging."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from gateway_kit.exceptions import StorageError
from gateway_kit.storage import SQLiteStorage
from gateway_kit.testing.storage import FakeClock

pytestmark = pytest.mark.anyio


async def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    async with SQLiteStorage(tmp_path / "s.db") as storage:
        await storage.set("ws_1:k", b"v")
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()


async def test_sqlite_runs_off_the_event_loop_thread(tmp_path: Path) -> None:
    threads: set[int] = set()

    def clock() -> float:  # read inside the transaction
        threads.add(threading.get_ident())
        return 1000.0

    async with SQLiteStorage(tmp_path / "s.db", clock=clock) as storage:
        await storage.incr("ws_1:c", 1)
        await storage.get("ws_1:c")
    assert threads
    assert threading.get_ident() not in threads


async def test_state_survives_reopening(tmp_path: Path) -> None:
    async with SQLiteStorage(tmp_path / "s.db") as storage:
        await storage.incr("ws_1:c", 41)
        await storage.enqueue("q", "i", b"p", due_at=0)
        await storage.map_set("ws_1:m", "f", b"v")
    async with SQLiteStorage(tmp_path / "s.db") as storage:
        assert (await storage.incr("ws_1:c", 1)).value == 42
        assert [c.item_id for c in await storage.claim("q", limit=5, lease=30)] == ["i"]
        assert await storage.map_items("ws_1:m") == {"f": b"v"}


async def test_two_connections_to_one_file_admit_exactly_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    admitted = 0
    async with SQLiteStorage(path) as one, SQLiteStorage(path) as two:

        async def take(storage: SQLiteStorage) -> None:
            nonlocal admitted
            ok = (await storage.incr("ws_1:c", 1, limit=5)).allowed
            admitted += ok

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(take, one if i % 2 else two)
    assert admitted == 5


async def test_a_locked_database_is_a_storage_error_without_the_path(tmp_path: Path) -> None:
    path = tmp_path / "secret-name.db"
    async with SQLiteStorage(path, busy_timeout=0.1) as storage:
        await storage.set("ws_1:k", b"v")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StorageError, match="locked") as caught:
                await storage.set("ws_1:k", b"w")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert "secret-name" not in str(caught.value)
        assert await storage.get("ws_1:k") == b"v"  # the connection is still usable


async def test_a_closed_storage_raises(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "s.db")
    await storage.aclose()
    with pytest.raises(StorageError, match="closed"):
        await storage.get("ws_1:k")


async def test_expired_keys_are_purged_from_the_file(tmp_path: Path) -> None:
    clock = FakeClock()
    async with SQLiteStorage(tmp_path / "s.db", clock=clock) as storage:
        for i in range(10):
            await storage.incr(f"ws_1:minute{i}", 1, ttl=60)
        clock.advance(60)
        for _ in range(300):  # purging runs every few hundred writes
            await storage.incr("ws_1:lasting", 1)
    conn = sqlite3.connect(tmp_path / "s.db")
    keys = [k for (k,) in conn.execute("SELECT key FROM kv")]
    conn.close()
    assert keys == ["ws_1:lasting"]


def test_a_bad_synchronous_setting_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStorage(tmp_path / "s.db", synchronous="OFF; DROP TABLE kv")


async def test_a_database_that_cannot_use_wal_is_refused() -> None:
    with pytest.raises(StorageError, match="WAL"):
        await SQLiteStorage(":memory:").get("ws_1:k")


def test_one_store_serves_several_event_loops(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "s.db")

    async def work() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(storage.incr, "ws_1:c", 1)

    threads = [threading.Thread(target=anyio.run, args=(work,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert anyio.run(storage.get, "ws_1:c") == b"200"
    anyio.run(storage.aclose)


async def test_an_error_sqlite_rolled_back_itself_is_the_one_reported(tmp_path: Path) -> None:
    """A full disk: SQLite ends the transaction itself, and the ROLLBACK that followed failed
    with "cannot rollback - no transaction is active", hiding "database or disk is full"."""
    async with SQLiteStorage(tmp_path / "s.db") as storage:
        await storage.set("ws_1:k", b"v")

        def full(tx: object, now: float) -> None:
            tx._c.execute("ROLLBACK")  # type: ignore[attr-defined]  # as SQLite does itself
            raise sqlite3.OperationalError("database or disk is full")

        with pytest.raises(StorageError, match="database or disk is full"):
            await storage._run(full)
        assert await storage.get("ws_1:k") == b"v"  # and the store goes on
