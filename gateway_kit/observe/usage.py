"""``UsageTotals``: a workspace's requests, tokens, cost and savings per UTC day and model.

Kept as counters beside the request log: counted in the process as requests end and written
with the log (one ``incr_many`` per workspace and write), so the totals outlive the log's cap
and cost one read to report:
the day/model pairs are listed in a map (``{ws}:usage``), their counters read in one step.

The model is the one that served; a request that never reached a model counts under the model
it asked for when the gateway has it, else under ``(none)`` (so that made-up names cannot
grow the list). Tokens are upstream tokens: an answer served from the cache adds a request,
a cache hit and its savings, not tokens (nothing was used upstream). Counters live
``usage_days`` days.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gateway_kit.config.observe import RequestLogConfig
from gateway_kit.exceptions import StorageError
from gateway_kit.observe.record import RequestRecord
from gateway_kit.storage import Increment, Storage

__all__ = ["METRICS", "NO_MODEL", "UsageRow", "UsageTotals"]

#: The counters kept per day and model, in the order the API shows them.
METRICS = (
    "requests",
    "errors",
    "cache_hits",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_micro_usd",
    "savings_micro_usd",
)
NO_MODEL = "(none)"
logger = logging.getLogger("gateway_kit.requests")
_DAY_S = 86_400
#: Day/model pairs this process remembers having indexed (past it, it indexes again).
_INDEXED_MAX = 10_000


@dataclass(slots=True)
class UsageRow:
    day: str
    model: str
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(METRICS, 0))

    def to_dict(self) -> dict[str, object]:
        return {"day": self.day, "model": self.model, **self.totals}


def _counter(workspace_id: str, day: str, model: str, metric: str) -> str:
    return f"{workspace_id}:usage:{day}:{metric}:{model}"


def _index(workspace_id: str) -> str:
    return f"{workspace_id}:usage"


class UsageTotals:
    def __init__(
        self,
        storage: Storage,
        config: RequestLogConfig,
        *,
        clock: Callable[[], float],
        models: Iterable[str] = (),
    ) -> None:
        self._storage = storage
        self._ttl = config.usage_days * _DAY_S
        self._days = config.usage_days
        self._clock = clock
        self._models = frozenset(models)
        self._indexed: set[tuple[str, str, str]] = set()
        #: Totals counted and not written yet, by (workspace, day, model), in METRICS' order.
        self._pending: dict[tuple[str, str, str], list[int]] = {}
        self._days_seen: dict[int, str] = {}

    def model_of(self, record: RequestRecord) -> str:
        if record.served_model is not None:
            return record.served_model
        if record.model is not None and record.model in self._models:
            return record.model
        return NO_MODEL

    def count(self, workspace_id: str, record: RequestRecord) -> None:
        """Add a record's figures to its day's and model's totals (written by ``flush``)."""
        key = (workspace_id, self._day(record.at), self.model_of(record))
        totals = self._pending.get(key)
        if totals is None:
            totals = self._pending[key] = [0] * len(METRICS)
        totals[0] += 1
        if record.status >= 400 or record.error_code is not None:  # a broken stream too
            totals[1] += 1
        if record.cache in ("hit", "semantic"):
            totals[2] += 1
        else:
            totals[3] += record.input_tokens
            totals[4] += record.cached_tokens
            totals[5] += record.output_tokens
            totals[6] += record.reasoning_tokens
        totals[7] += record.cost_micro_usd or 0
        totals[8] += record.savings_micro_usd

    def _day(self, moment: float) -> str:
        number = int(moment) // _DAY_S
        day = self._days_seen.get(number)
        if day is None:
            if len(self._days_seen) > 64:
                self._days_seen.clear()
            day = self._days_seen[number] = _day(number * _DAY_S)
        return day

    async def flush(self) -> None:
        """Write the totals counted since the last flush: one ``incr_many`` per workspace;
        those the storage refuses are kept for the next one."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        groups: dict[str, list[tuple[str, str, list[int]]]] = {}
        for (workspace_id, day, model), totals in pending.items():
            groups.setdefault(workspace_id, []).append((day, model, totals))
        for workspace_id, rows in groups.items():
            try:
                for day, model, _ in rows:
                    if (workspace_id, day, model) not in self._indexed:
                        field_name = json.dumps([day, model])
                        await self._storage.map_set(_index(workspace_id), field_name, b"1")
                        if len(self._indexed) >= _INDEXED_MAX:
                            self._indexed.clear()
                        self._indexed.add((workspace_id, day, model))
                await self._storage.incr_many(
                    [
                        Increment(_counter(workspace_id, day, model, metric), amount, ttl=self._ttl)
                        for day, model, totals in rows
                        for metric, amount in zip(METRICS, totals, strict=True)
                        if amount
                    ]
                )
            except StorageError as exc:
                logger.warning("usage totals of %s not written yet (kept): %s", workspace_id, exc)
                for day, model, totals in rows:
                    kept = self._pending.setdefault((workspace_id, day, model), [0] * len(METRICS))
                    for index, amount in enumerate(totals):
                        kept[index] += amount

    async def read(
        self, workspace_id: str, *, since: str | None = None, until: str | None = None
    ) -> list[UsageRow]:
        """The totals of each day (``YYYY-MM-DD``, from ``since`` to ``until`` included) and
        model, oldest day first. Days past the kept ones are left out (and unlisted)."""
        index = _index(workspace_id)
        oldest = _day(self._clock() - self._days * _DAY_S)
        pairs: list[tuple[str, str]] = []
        for name in await self._storage.map_items(index):
            day, model = json.loads(name)
            if day < oldest:
                await self._storage.map_delete(index, name)
                continue
            if (since is None or day >= since) and (until is None or day <= until):
                pairs.append((day, model))
        pairs.sort()
        if not pairs:
            return []
        keys = [_counter(workspace_id, d, m, metric) for d, m in pairs for metric in METRICS]
        values = (await self._storage.incr_many([], reads=keys)).reads
        rows = []
        for day, model in pairs:
            row = UsageRow(day, model)
            for metric in METRICS:
                raw = values.get(_counter(workspace_id, day, model, metric))
                row.totals[metric] = int(raw) if raw is not None else 0
            if row.totals["requests"]:
                rows.append(row)
            else:  # its counters lived their time
                await self._storage.map_delete(index, json.dumps([day, model]))
        return rows


def _day(moment: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(moment))
