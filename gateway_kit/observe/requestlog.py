"""``RequestLog``: the request records, collected in the process and written off the request
path, then read back page by page.

A request that ends hands its record to ``add`` (no I/O: it joins a buffer). ``run`` writes
the buffer once every ``flush_interval_s``: per workspace one ``log_extend`` of the records
(a capped log, the oldest dropped past ``max_records``) and one ``incr_many`` of the usage
totals per day and model (``observe.usage``). At shutdown it writes what is left, shielded
from cancellation, so a clean stop (``kill -TERM``: uvicorn lets requests finish, then the
lifespan ends) loses no record. A write that fails keeps its records for the next one; past
``max_pending`` records held, the oldest are dropped and counted (``dropped``).

Reading (``page``) walks the workspace's log newest first from a cursor (the position of the
last record returned), filtering on time, model, key and status; one call reads at most
``SCAN_LIMIT`` records, so a filter that matches rarely answers with fewer records than asked
and a cursor to go on from (``has_more``), never with a long wait.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import anyio

from gateway_kit.config.observe import RequestLogConfig
from gateway_kit.exceptions import StorageError
from gateway_kit.observe.record import BATCH, RequestRecord, decode, iso_ms
from gateway_kit.observe.usage import UsageTotals
from gateway_kit.storage import Storage

__all__ = [
    "DAY",
    "SCAN_LIMIT",
    "STATUS",
    "RequestFilter",
    "RequestLog",
    "RequestPage",
    "is_day",
    "log_key",
]

logger = logging.getLogger("gateway_kit.requests")

#: Records one ``page`` call reads at most, matched or not.
SCAN_LIMIT = 5000
#: How far (seconds) records of several processes may be out of time order in the log: each
#: writes its buffer when its own interval ends.
_SLACK_S = 120.0


#: What a status filter may be (matched whole): a code, a class (``4xx``) or ``error``.
STATUS = re.compile(r"[1-5][0-9][0-9]|[1-5]xx|error")
#: A usage day, ``YYYY-MM-DD`` in ASCII digits (matched whole).
DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def is_day(text: str) -> bool:
    """Whether ``text`` is a calendar day as ``YYYY-MM-DD`` (one that exists: not 2026-02-30)."""
    if not DAY.fullmatch(text):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def log_key(workspace_id: str) -> str:
    return f"{workspace_id}:requests"


@dataclass(frozen=True, slots=True)
class RequestFilter:
    """Which records a page holds. Times are ISO 8601 UTC texts (``...Z``), compared as text
    against the records' ``created_at``; ``status`` is a code (``429``) or a class (``4xx``,
    ``5xx``, ``error``: 400 and above)."""

    since: str | None = None
    until: str | None = None
    model: str | None = None
    key_id: str | None = None
    status: str | None = None

    def matches(self, record: dict[str, Any]) -> bool:
        at = record["created_at"]
        if self.since is not None and at < self.since:
            return False
        if self.until is not None and at >= self.until:
            return False
        if self.model is not None and self.model not in (record["model"], record["served_model"]):
            return False
        if self.key_id is not None and record["key_id"] != self.key_id:
            return False
        return self.status is None or _status_matches(self.status, record)


def _status_matches(wanted: str, record: dict[str, Any]) -> bool:
    status: int = record["status"]
    if wanted == "error":
        # A stream that broke off after its 200 is an error too (it has its error code).
        return status >= 400 or record["error_code"] is not None
    if wanted.endswith("xx"):
        return status // 100 == int(wanted[0])
    return status == int(wanted)


@dataclass(frozen=True, slots=True)
class RequestPage:
    records: list[dict[str, Any]]
    #: Where the next page starts (``None``: the log holds nothing older).
    next_cursor: str | None

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None


class RequestLog:
    """The request log of a ``Gateway``; see the module docstring."""

    def __init__(
        self,
        storage: Storage,
        config: RequestLogConfig,
        *,
        clock: Callable[[], float],
        usage: UsageTotals | None = None,
    ) -> None:
        self._storage = storage
        self._config = config
        self.usage = usage if usage is not None else UsageTotals(storage, config, clock=clock)
        #: Records of requests that just ended, taken in (encoded, counted) ``BATCH`` at a
        #: time, and before each write.
        self._fresh: list[RequestRecord] = []
        #: (workspace id, stored record), oldest first: bytes, so that a second's records
        #: cost the garbage collector nothing.
        self._pending: deque[tuple[str, bytes]] = deque()
        #: Records dropped because the storage could not take them for too long.
        self.dropped = 0
        #: Records written since the start.
        self.written = 0

    @property
    def pending(self) -> int:
        """Records collected and not written yet."""
        return len(self._pending) + len(self._fresh)

    def add(self, record: RequestRecord) -> None:
        """Keep a record of a request (written within ``flush_interval_s``) and count it in
        the usage totals. Records of requests no key authenticated belong to no workspace:
        they are not kept."""
        if record.workspace_id is None or not self._config.enabled:
            return
        fresh = self._fresh
        if len(self._pending) + len(fresh) >= self._config.max_pending:
            # The oldest record is an encoded one: max_pending (1,000 at least) is far above
            # the BATCH fresh ones at most.
            self._pending.popleft()
            self.dropped += 1
        fresh.append(record)
        if len(fresh) >= BATCH:
            self._take()

    def _take(self) -> None:
        """Encode the fresh records for the write, and count them in the usage totals."""
        fresh, self._fresh = self._fresh, []
        pending, usage = self._pending, self.usage
        for record in fresh:
            workspace_id = record.workspace_id
            assert workspace_id is not None  # add keeps no other
            pending.append((workspace_id, record.encode()))
            usage.count(workspace_id, record)

    async def flush(self) -> int:
        """Write the records collected, and the usage totals; what could not be written is
        kept for the next flush. The number of records written."""
        written = 0
        self._take()
        if self._pending:
            batch, self._pending = self._pending, deque()
            groups: dict[str, list[bytes]] = {}
            for workspace_id, value in batch:
                groups.setdefault(workspace_id, []).append(value)
            for workspace_id, values in groups.items():
                try:
                    await self._storage.log_extend(
                        log_key(workspace_id), values, max_len=self._config.max_records
                    )
                except StorageError as exc:
                    logger.warning(
                        "request log: %d records of %s not written yet (kept for the next try): %s",
                        len(values),
                        workspace_id,
                        exc,
                    )
                    self._keep(workspace_id, values)
                    continue
                written += len(values)
            self.written += written
        await self.usage.flush()
        return written

    def _keep(self, workspace_id: str, values: list[bytes]) -> None:
        """Put records back in front of those collected since (their order kept)."""
        room = self._config.max_pending - len(self._pending)
        if room < len(values):
            self.dropped += len(values) - max(room, 0)
            values = values[len(values) - max(room, 0) :]
        self._pending.extendleft((workspace_id, value) for value in reversed(values))

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Write every ``flush_interval_s`` until cancelled, then once more (shielded)."""
        task_status.started()
        try:
            while True:
                await anyio.sleep(self._config.flush_interval_s)
                await self.flush()
        finally:
            with anyio.CancelScope(shield=True):
                await self.flush()
                if self._pending:
                    logger.error(
                        "request log: %d records could not be written at shutdown",
                        len(self._pending),
                    )

    async def page(
        self,
        workspace_id: str,
        *,
        where: RequestFilter = RequestFilter(),
        cursor: str | None = None,
        limit: int = 50,
    ) -> RequestPage:
        """Up to ``limit`` records of ``workspace_id`` matching ``where``, newest first, from
        ``cursor`` (a page's ``next_cursor``) on. The records this process has not written
        yet are not in it."""
        before = int(cursor) if cursor is not None else None
        found: list[dict[str, Any]] = []
        scanned = 0
        floor = _floor(where.since)
        while True:
            chunk = min(max(limit * 2, 100), SCAN_LIMIT - scanned)
            entries = await self._storage.log_page(
                log_key(workspace_id), limit=chunk, before=before
            )
            for entry in entries:
                scanned += 1
                before = entry.seq
                record = decode(entry.value)
                if floor is not None and record["created_at"] < floor:
                    return RequestPage(found, None)
                if where.matches(record):
                    found.append(record)
                    if len(found) == limit:
                        return RequestPage(found, str(entry.seq) if entry.seq > 1 else None)
            if len(entries) < chunk or before is None or before <= 1:
                return RequestPage(found, None)
            if scanned >= SCAN_LIMIT:
                return RequestPage(found, str(before))


def _floor(since: str | None) -> str | None:
    """Below this time no record can match ``since`` any more, however the processes' writes
    interleaved."""
    if since is None:
        return None
    moment = datetime.fromisoformat(since.replace("Z", "+00:00")) - timedelta(seconds=_SLACK_S)
    return iso_ms(moment.timestamp())
