"""``SQLiteStorage``: durable single-node state in one SQLite file, the standalone default."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from gateway_kit.exceptions import StorageError
from gateway_kit.storage._engine import Entry, Item, Kind, State, Tx
from gateway_kit.storage._local import LocalStorage
from gateway_kit.storage.checks import INT64_MAX, check_seconds

__all__ = ["SQLiteStorage"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY, kind INTEGER NOT NULL, value BLOB, expires_at REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS map_field (
    key TEXT NOT NULL, field TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (key, field)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_entry (
    key TEXT NOT NULL, seq INTEGER NOT NULL, value BLOB NOT NULL, PRIMARY KEY (key, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS queue_item (
    queue TEXT NOT NULL, item_id TEXT NOT NULL, payload BLOB NOT NULL, state INTEGER NOT NULL,
    available_at REAL NOT NULL, due_at REAL NOT NULL, attempts INTEGER NOT NULL,
    token INTEGER, reason TEXT NOT NULL, failed_at REAL NOT NULL,
    PRIMARY KEY (queue, item_id)
);
CREATE INDEX IF NOT EXISTS queue_due ON queue_item (queue, available_at) WHERE state != 2;
CREATE INDEX IF NOT EXISTS queue_dead ON queue_item (queue, failed_at) WHERE state = 2;
CREATE UNIQUE INDEX IF NOT EXISTS queue_token ON queue_item (queue, token)
    WHERE token IS NOT NULL;
CREATE TABLE IF NOT EXISTS queue_seq (queue TEXT PRIMARY KEY, token INTEGER NOT NULL);
"""

_ITEM_COLUMNS = "item_id, payload, state, available_at, due_at, attempts, token, reason, failed_at"
# Expired keys are purged in small batches every so many write transactions.
_PURGE_EVERY = 256
_PURGE_BATCH = 500


class SQLiteStorage(LocalStorage):
    """One SQLite file in WAL mode, shared safely by several processes.

    sqlite3 runs in a worker thread (never on the event loop) over one connection; each
    operation is one transaction, ``BEGIN IMMEDIATE`` when it writes, so a read-modify-write is
    atomic across processes too. ``busy_timeout`` is how long a write waits for another
    process's. ``synchronous=NORMAL`` in WAL mode survives a killed process; pass
    ``synchronous="FULL"`` to survive a power cut as well.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 5.0,
        synchronous: str = "NORMAL",
    ) -> None:
        if synchronous.upper() not in {"NORMAL", "FULL", "EXTRA"}:
            raise ValueError("synchronous must be NORMAL, FULL or EXTRA")
        self._path = str(path)
        self._clock = clock
        self._busy_ms = round(check_seconds(busy_timeout, "busy_timeout") * 1000)
        self._synchronous = synchronous.upper()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._writes = 0
        # A limiter of one per event loop keeps waiting calls off the shared thread pool (a
        # limiter cannot be shared by two loops); the lock guards the connection across loops.
        self._limiters: RunVar[anyio.CapacityLimiter] = RunVar("gateway_kit.sqlite.limiter")
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "SQLiteStorage(...)"

    async def now(self) -> float:
        return self._clock()

    def _connect(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageError("SQLite storage is closed")
        if self._conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                _enable_wal(conn, self._busy_ms / 1000)
                conn.execute(f"PRAGMA synchronous = {self._synchronous}")
                conn.executescript(_SCHEMA)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _transaction(self, fn: Callable[[Tx, float], T], write: bool) -> T:
        with self._lock:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                # Read the clock once the write lock is held, so that the times of two
                # processes' operations are ordered as the operations are.
                now = self._clock()
                result = fn(_SQLiteTx(conn), now)
                if write:
                    self._writes += 1
                    if self._writes % _PURGE_EVERY == 0:
                        _purge_expired(conn, now)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    # SQLite may have rolled back itself (a full disk, an I/O error): a
                    # ROLLBACK then fails, and its error would hide the one that says why.
                    conn.execute("ROLLBACK")
                raise
            return result

    def _limiter(self) -> anyio.CapacityLimiter:
        try:
            return self._limiters.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(1)
            self._limiters.set(limiter)
            return limiter

    async def _run(self, fn: Callable[[Tx, float], T], *, write: bool = True) -> T:
        try:
            # Not abandoned on cancellation: the transaction finishes (or rolls back) whole.
            return await anyio.to_thread.run_sync(
                self._transaction, fn, write, limiter=self._limiter()
            )
        except sqlite3.Error as exc:
            # SQLite's messages are fixed texts ("database is locked"): no paths, no values.
            raise StorageError(f"SQLite storage failed: {type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        def close() -> None:
            with self._lock:
                self._closed = True
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(close, limiter=self._limiter())


def _enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    # Switching a new file to WAL answers "database is locked" at once, without waiting for the
    # busy timeout, while another process opens it too: wait here instead, until one of them
    # has switched it (WAL mode is kept in the file).
    deadline = time.monotonic() + timeout
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        if mode.lower() != "wal":  # e.g. ":memory:", which cannot be shared anyway
            raise StorageError(f"SQLite would not use WAL mode for this database ({mode})")
        return


def _purge_expired(conn: sqlite3.Connection, now: float) -> None:
    conn.execute(
        "DELETE FROM kv WHERE key IN"
        " (SELECT key FROM kv WHERE expires_at <= ? AND kind = ? LIMIT ?)",
        (now, Kind.VALUE, _PURGE_BATCH),
    )


def _item(row: tuple[str, bytes, int, float, float, int, int | None, str, float]) -> Item:
    item_id, payload, state, available_at, due_at, attempts, token, reason, failed_at = row
    return Item(
        item_id, payload, State(state), available_at, due_at, attempts, token, reason, failed_at
    )


class _SQLiteTx:
    """The engine's primitives as SQL statements on one connection inside a transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    def read(self, key: str) -> Entry | None:
        row = self._c.execute(
            "SELECT kind, value, expires_at FROM kv WHERE key = ?", (key,)
        ).fetchone()
        return None if row is None else Entry(Kind(row[0]), row[1], row[2])

    def write(self, key: str, entry: Entry) -> None:
        self._c.execute(
            "INSERT INTO kv (key, kind, value, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (key)"
            " DO UPDATE SET kind = excluded.kind, value = excluded.value,"
            " expires_at = excluded.expires_at",
            (key, entry.kind, entry.value, entry.expires_at),
        )

    def remove(self, key: str) -> None:
        for table in ("kv", "map_field", "log_entry"):
            self._c.execute(f"DELETE FROM {table} WHERE key = ?", (key,))

    def map_put(self, key: str, field: str, value: bytes) -> None:
        self._c.execute(
            "INSERT INTO map_field (key, field, value) VALUES (?, ?, ?)"
            " ON CONFLICT (key, field) DO UPDATE SET value = excluded.value",
            (key, field, value),
        )

    def map_get(self, key: str, field: str) -> bytes | None:
        row = self._c.execute(
            "SELECT value FROM map_field WHERE key = ? AND field = ?", (key, field)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def map_pop(self, key: str, field: str) -> bool:
        cur = self._c.execute("DELETE FROM map_field WHERE key = ? AND field = ?", (key, field))
        return cur.rowcount > 0

    def map_all(self, key: str) -> dict[str, bytes]:
        rows = self._c.execute("SELECT field, value FROM map_field WHERE key = ?", (key,))
        return {field: bytes(value) for field, value in rows}

    def log_push(self, key: str, values: Sequence[bytes], max_len: int) -> None:
        (top,) = self._c.execute(
            "SELECT coalesce(max(seq), 0) FROM log_entry WHERE key = ?", (key,)
        ).fetchone()
        self._c.executemany(
            "INSERT INTO log_entry (key, seq, value) VALUES (?, ?, ?)",
            [(key, top + 1 + i, value) for i, value in enumerate(values)],
        )
        self._c.execute(
            "DELETE FROM log_entry WHERE key = ? AND seq <= ?",
            (key, top + len(values) - max_len),
        )

    def log_read(self, key: str, limit: int) -> list[bytes]:
        rows = self._c.execute(
            "SELECT value FROM log_entry WHERE key = ? ORDER BY seq DESC LIMIT ?", (key, limit)
        )
        return [bytes(value) for (value,) in rows]

    def log_page(self, key: str, limit: int, before: int | None) -> list[tuple[int, bytes]]:
        rows = self._c.execute(
            "SELECT seq, value FROM log_entry WHERE key = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
            (key, INT64_MAX if before is None else before, limit),
        )
        return [(seq, bytes(value)) for seq, value in rows]

    def _items(self, queue: str, where: str, *args: object) -> list[Item]:
        rows = self._c.execute(
            f"SELECT {_ITEM_COLUMNS} FROM queue_item WHERE queue = ? AND {where}", (queue, *args)
        )
        return [_item(row) for row in rows]

    def item(self, queue: str, item_id: str) -> Item | None:
        return next(iter(self._items(queue, "item_id = ?", item_id)), None)

    def item_by_token(self, queue: str, token: int) -> Item | None:
        return next(iter(self._items(queue, "token = ?", token)), None)

    def put_item(self, queue: str, item: Item) -> None:
        self._c.execute(
            f"INSERT OR REPLACE INTO queue_item (queue, {_ITEM_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                queue,
                item.item_id,
                item.payload,
                item.state,
                item.available_at,
                item.due_at,
                item.attempts,
                item.token,
                item.reason,
                item.failed_at,
            ),
        )

    def drop_prefix(self, prefix: str) -> int:
        # A range on the primary keys: [prefix, prefix with its last character's successor).
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        dropped = 0
        for table in ("kv", "map_field", "log_entry"):
            cursor = self._c.execute(
                f"DELETE FROM {table} WHERE key >= ? AND key < ?", (prefix, end)
            )
            if table == "kv":
                dropped = cursor.rowcount
        return dropped

    def drop_item(self, queue: str, item_id: str) -> None:
        self._c.execute("DELETE FROM queue_item WHERE queue = ? AND item_id = ?", (queue, item_id))

    def count_items(self, queue: str) -> dict[State, int]:
        rows = self._c.execute(
            "SELECT state, count(*) FROM queue_item WHERE queue = ? GROUP BY state", (queue,)
        )
        return {State(state): count for state, count in rows}

    def due_items(self, queue: str, now: float, limit: int) -> list[Item]:
        # "state != 2" and "state = 2" as written in the partial indexes, so SQLite uses them.
        where = "state != 2 AND available_at <= ? ORDER BY available_at LIMIT ?"
        return self._items(queue, where, now, limit)

    def dead_items(self, queue: str, limit: int) -> list[Item]:
        return self._items(queue, "state = 2 ORDER BY failed_at LIMIT ?", limit)

    def next_token(self, queue: str) -> int:
        (token,) = self._c.execute(
            "INSERT INTO queue_seq (queue, token) VALUES (?, 1)"
            " ON CONFLICT (queue) DO UPDATE SET token = token + 1 RETURNING token",
            (queue,),
        ).fetchone()
        return int(token)
