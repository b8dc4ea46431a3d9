"""The spend ledger: a workspace's money counters per budget period, reserved and settled.

Layout (``<ws>`` a workspace id, ``<p>`` a period id such as ``2026-11``; integer micro-USD)::

    <ws>:spend:<p>:committed        settled + reserved: what the cap is checked against
    <ws>:spend:<p>:reserved         reservations of requests in flight
    <ws>:spend:<p>:settled          the real cost of finished requests
    <ws>:spend:<p>:key:<kid>        committed, per API key (for per-key caps)
    <ws>:savings                    cumulative savings against the flagship model
    <ws>:budget:settings            the workspace's cap and per-key caps (JSON)

A reservation is one ``incr_many``: committed and reserved up by the estimate, refused as a
whole when committed would pass the cap (or a key's cap). Settling is one ``incr_many`` that
swaps the estimate for the real cost. So many gateway processes on one Redis never commit more
than the cap, and the only overspend is the difference between a request's estimate and its
real cost. Every counter of a period expires a day after the period ends.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Literal

from gateway_kit.accounts.changes import ChangeFeed, FeedCache
from gateway_kit.accounts.periods import Period
from gateway_kit.config.money import BudgetConfig
from gateway_kit.storage import Increment, Storage

__all__ = [
    "BudgetBand",
    "BudgetSettings",
    "BudgetThresholds",
    "Ledger",
    "Reservation",
    "SpendTotals",
    "effective_cap",
    "savings_key",
]

_SLACK_S = 86_400

#: Where committed spend falls against a cap: below warn, warn, downgrade, or past block.
BudgetBand = Literal["ok", "warn", "downgrade", "block"]


def savings_key(workspace_id: str) -> str:
    """The workspace's cumulative savings counter, integer micro-USD."""
    return f"{workspace_id}:savings"


_BANDS: tuple[Literal["warn", "downgrade", "block"], ...] = ("warn", "downgrade", "block")


class BudgetThresholds:
    """Budget Control's thresholds, as exact decimals: bands change at the exact micro-USD.

    The thresholds of a cap are computed once and remembered (caps change seldom; a request
    asks for them several times).
    """

    __slots__ = ("_cuts", "block_at", "downgrade_at", "warn_at")

    def __init__(self, warn_at: Decimal, downgrade_at: Decimal, block_at: Decimal) -> None:
        self.warn_at = warn_at
        self.downgrade_at = downgrade_at
        self.block_at = block_at
        self._cuts: dict[int, tuple[int, int, int]] = {}

    @classmethod
    def from_config(cls, config: BudgetConfig) -> BudgetThresholds:
        return cls(
            Decimal(str(config.warn_at)),
            Decimal(str(config.downgrade_at)),
            Decimal(str(config.block_at)),
        )

    def fraction(self, verdict: Literal["warn", "downgrade", "block"]) -> Decimal:
        """The fraction of the cap at which ``verdict`` applies."""
        return {"warn": self.warn_at, "downgrade": self.downgrade_at, "block": self.block_at}[
            verdict
        ]

    def cuts(self, cap: int) -> tuple[int, int, int]:
        """The warn, downgrade and block thresholds of ``cap``, in micro-USD."""
        cuts = self._cuts.get(cap)
        if cuts is None:
            warn, downgrade, block = (
                int((fraction * cap).to_integral_value(rounding=ROUND_FLOOR))
                for fraction in (self.warn_at, self.downgrade_at, self.block_at)
            )
            cuts = (warn, downgrade, block)
            if len(self._cuts) >= 10_000:
                self._cuts.clear()
            self._cuts[cap] = cuts
        return cuts

    def threshold(self, verdict: Literal["warn", "downgrade", "block"], cap: int) -> int:
        """The committed spend, in micro-USD, from which ``verdict`` applies (block: past it)."""
        return self.cuts(cap)[_BANDS.index(verdict)]

    def limit(self, cap: int) -> int:
        """The most a workspace may commit: ``block_at`` of the cap."""
        return self.cuts(cap)[2]

    def verdict(self, committed: int, cap: int) -> BudgetBand:
        """The band ``committed`` falls in (a refused reservation is ``block`` by itself)."""
        warn, downgrade, block = self.cuts(cap)
        if committed > block:
            return "block"
        if committed >= downgrade:
            return "downgrade"
        if committed >= warn:
            return "warn"
        return "ok"


@dataclass(frozen=True, slots=True)
class BudgetSettings:
    """What a workspace set for itself; ``cap_micro_usd`` ``None`` means the plan's default."""

    cap_micro_usd: int | None = None
    key_caps: dict[str, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"cap_micro_usd": self.cap_micro_usd, "key_caps": self.key_caps}, sort_keys=True
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> BudgetSettings:
        data = json.loads(raw)
        return cls(data.get("cap_micro_usd"), dict(data.get("key_caps") or {}))


@dataclass(slots=True)
class Reservation:
    """Money held for one request in flight; settled exactly once."""

    workspace_id: str
    key_id: str | None
    period: Period
    amount: int
    #: Extra increments settled with it (a wallet's), by key: the reserved amount.
    holds: dict[str, int] = field(default_factory=dict)
    settled: bool = False


@dataclass(frozen=True, slots=True)
class SpendTotals:
    committed: int
    reserved: int
    settled: int


def effective_cap(
    settings: BudgetSettings, plan_budget_usd: Decimal | None
) -> tuple[int | None, str | None]:
    """The cap that applies and where it comes from: the workspace's own, else its plan's."""
    if settings.cap_micro_usd is not None:
        return settings.cap_micro_usd, "workspace"
    if plan_budget_usd is not None:
        return int(plan_budget_usd * 1_000_000), "plan"
    return None, None


class Ledger:
    """Reservations, settlements, totals and settings.

    ``settings`` is cached per process; ``save_settings`` publishes the change to ``changes``
    (the change feed), so every process drops its copy within ``auth.cache_ttl_s``. Without a
    feed nothing is cached.
    """

    def __init__(self, storage: Storage, *, changes: ChangeFeed | None = None) -> None:
        self._storage = storage
        self.changes = changes if changes is not None else ChangeFeed(storage, cache_ttl=0)
        self._settings: FeedCache[BudgetSettings] = FeedCache(self.changes, "budget")

    # -- settings -----------------------------------------------------------------------------

    async def settings(self, workspace_id: str) -> BudgetSettings:
        if (hit := self._settings.get(workspace_id)) is not None:
            return hit
        version = self._settings.version
        raw = await self._storage.get(f"{workspace_id}:budget:settings")
        settings = BudgetSettings.from_bytes(raw) if raw else BudgetSettings()
        self._settings.put(workspace_id, settings, version=version)
        return settings

    async def save_settings(self, workspace_id: str, settings: BudgetSettings) -> None:
        await self._storage.set(f"{workspace_id}:budget:settings", settings.to_bytes())
        await self.changes.publish(("budget", workspace_id))

    # -- counters -----------------------------------------------------------------------------

    @staticmethod
    def key(workspace_id: str, period: Period, name: str) -> str:
        return f"{workspace_id}:spend:{period.id}:{name}"

    def reservation(
        self,
        workspace_id: str,
        key_id: str | None,
        period: Period,
        amount: int,
        *,
        cap: int | None,
        key_cap: int | None = None,
        extra: Sequence[Increment] = (),
    ) -> list[Increment]:
        """The increments that hold ``amount``, refused as a whole past ``cap`` (committed) or
        ``key_cap``; ``extra`` increments (a wallet's) are held with it, all or nothing. Run
        them in one ``incr_many``, alone (``reserve``) or with other layers' operations."""
        ttl = period.seconds + _SLACK_S
        increments = [
            Increment(self.key(workspace_id, period, "committed"), amount, ttl=ttl, limit=cap),
            Increment(self.key(workspace_id, period, "reserved"), amount, ttl=ttl),
        ]
        if key_id is not None:
            increments.append(
                Increment(self.key(workspace_id, period, f"key:{key_id}"), amount, ttl, key_cap)
            )
        increments.extend(extra)
        return increments

    async def reserve(
        self,
        workspace_id: str,
        key_id: str | None,
        period: Period,
        amount: int,
        *,
        cap: int | None,
        key_cap: int | None = None,
        extra: Sequence[Increment] = (),
    ) -> tuple[Reservation | None, str | None, int]:
        """Hold ``amount``: (the reservation, ``None``, committed after) when it fits; else
        (``None``, the refused key, committed as it is). See ``reservation``."""
        increments = self.reservation(
            workspace_id, key_id, period, amount, cap=cap, key_cap=key_cap, extra=extra
        )
        result = await self._storage.incr_many(increments)
        committed = result.values[increments[0].key]
        if not result.allowed:
            return None, result.refused, committed
        holds = {inc.key: inc.amount for inc in extra}
        return Reservation(workspace_id, key_id, period, amount, holds=holds), None, committed

    def settlement(
        self,
        workspace_id: str,
        key_id: str | None,
        period: Period,
        reservation: Reservation | None,
        cost: int,
        savings: int,
        *,
        extra: Sequence[tuple[str, int]] = (),
    ) -> list[Increment]:
        """The increments that swap the reservation (if any) for the real ``cost`` and add
        ``savings``. ``extra`` are (key, real amount) pairs for the reservation's holds."""
        ttl = period.seconds + _SLACK_S
        held = reservation.amount if reservation is not None else 0
        increments = [
            Increment(self.key(workspace_id, period, "committed"), cost - held, ttl=ttl),
            Increment(self.key(workspace_id, period, "settled"), cost, ttl=ttl),
        ]
        if held:
            increments.append(Increment(self.key(workspace_id, period, "reserved"), -held, ttl))
        if key_id is not None:
            increments.append(
                Increment(self.key(workspace_id, period, f"key:{key_id}"), cost - held, ttl)
            )
        holds = reservation.holds if reservation is not None else {}
        for key, amount in extra:
            increments.append(Increment(key, amount - holds.get(key, 0)))
        if savings:
            increments.append(Increment(savings_key(workspace_id), savings))
        if reservation is not None:
            reservation.settled = True
        return increments

    async def settle(
        self,
        workspace_id: str,
        key_id: str | None,
        period: Period,
        reservation: Reservation | None,
        cost: int,
        savings: int,
        *,
        extra: Sequence[tuple[str, int]] = (),
    ) -> dict[str, int]:
        """``settlement``, run now (one round trip); the values after (committed, settled,
        the holds')."""
        increments = self.settlement(
            workspace_id, key_id, period, reservation, cost, savings, extra=extra
        )
        return dict((await self._storage.incr_many(increments)).values)

    async def committed(self, workspace_id: str, period: Period) -> int:
        raw = await self._storage.get(self.key(workspace_id, period, "committed"))
        return int(raw) if raw else 0

    async def totals(self, workspace_id: str, period: Period) -> SpendTotals:
        values = []
        for name in ("committed", "reserved", "settled"):
            raw = await self._storage.get(self.key(workspace_id, period, name))
            values.append(int(raw) if raw else 0)
        return SpendTotals(*values)

    async def savings(self, workspace_id: str) -> int:
        raw = await self._storage.get(savings_key(workspace_id))
        return int(raw) if raw else 0
