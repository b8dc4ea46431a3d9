"""The wallet: a prepaid balance per workspace, debited by requests when wallet billing is on.

Layout (``<ws>`` a workspace id; integer micro-USD)::

    <ws>:wallet:debt            minus the balance (a counter: a debit adds, a credit subtracts)
    <ws>:wallet:seq             top-ups so far (re-arms the low-balance tiers)
    <ws>:wallet:last_topup      "<seq>:<amount>" of the latest top-up
    <ws>:wallet:credit:<key>    1 once the credit with that key was applied (idempotency)
    <ws>:wallet:billing         present when requests are debited
    <ws>:wallet:tier:<seq>:<t>  present once the balance crossed t % of top-up <seq>
    <ws>:wallet:log             the top-ups, newest last

The balance is a negated counter so that a request's reservation is an increment with a limit
of 0: refused, atomically and with the budget's, when it would take the balance below zero. A
credit is one ``incr_many`` of its idempotency counter (limit 1) and the debt: a re-sent
payment event changes nothing, and a crash cannot apply half of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, cast

from gateway_kit.accounts.changes import ChangeFeed, FeedCache
from gateway_kit.events.bus import EventBus
from gateway_kit.events.models import Event, LowBalanceData, usd
from gateway_kit.storage import Increment, Storage

__all__ = ["MAX_TOPUP_USD", "TIERS", "Wallet", "WalletStatus"]

#: The largest single top-up: a million dollars.
MAX_TOPUP_USD = 1_000_000

#: Percentages of the last top-up at which ``account.low_balance`` is published.
TIERS = (20, 10, 0)


@dataclass(frozen=True, slots=True)
class WalletStatus:
    billing: bool
    balance_micro_usd: int
    last_topup_micro_usd: int
    topups: int

    def public(self) -> dict[str, object]:
        return {
            "billing": self.billing,
            "balance_usd": usd(self.balance_micro_usd),
            "last_topup_usd": usd(self.last_topup_micro_usd),
            "topups": self.topups,
        }


class Wallet:
    """Credits, the billing switch, status and low-balance alerts.

    ``billing`` is cached per process; ``set_billing`` publishes the change to ``changes``
    (the change feed), so every process drops its copy within ``auth.cache_ttl_s``. Without a
    feed nothing is cached.
    """

    def __init__(
        self, storage: Storage, events: EventBus, *, changes: ChangeFeed | None = None
    ) -> None:
        self._storage = storage
        self._events = events
        self.changes = changes if changes is not None else ChangeFeed(storage, cache_ttl=0)
        self._billing: FeedCache[bool] = FeedCache(self.changes, "billing")
        # Tiers this process knows were published: spares a storage write per request.
        self._fired: set[tuple[str, int, int]] = set()

    @staticmethod
    def debt_key(workspace_id: str) -> str:
        return f"{workspace_id}:wallet:debt"

    @staticmethod
    def held_key(workspace_id: str) -> str:
        """What requests in flight hold against the wallet (part of its debt until settled)."""
        return f"{workspace_id}:wallet:held"

    async def billing(self, workspace_id: str) -> bool:
        if (hit := self._billing.get(workspace_id)) is not None:
            return hit
        version = self._billing.version
        on = await self._storage.get(f"{workspace_id}:wallet:billing") is not None
        self._billing.put(workspace_id, on, version=version)
        return on

    async def set_billing(self, workspace_id: str, on: bool) -> None:
        key = f"{workspace_id}:wallet:billing"
        if on:
            await self._storage.set(key, b"1")
        else:
            await self._storage.delete(key)
        await self.changes.publish(("billing", workspace_id))

    async def credit(
        self, workspace_id: str, amount: int, *, key: str, source: str, reference: str = ""
    ) -> int | None:
        """Add ``amount`` micro-USD once per ``key``: the new balance, ``None`` if done before."""
        if amount <= 0:
            raise ValueError("a credit must be positive")
        marker = f"{workspace_id}:wallet:credit:{key}"
        debt, seq = self.debt_key(workspace_id), f"{workspace_id}:wallet:seq"
        result = await self._storage.incr_many(
            [Increment(marker, 1, limit=1), Increment(debt, -amount), Increment(seq, 1)]
        )
        if not result.allowed:
            return None
        await self._record_topup(workspace_id, result.values[seq], amount)
        entry = {
            "amount_usd": usd(amount),
            "source": source,
            "reference": reference,
            "key": key,
            "at": await self._storage.now(),
        }
        await self._storage.log_append(
            f"{workspace_id}:wallet:log", json.dumps(entry).encode(), max_len=1000
        )
        return -result.values[debt]

    async def status(self, workspace_id: str) -> WalletStatus:
        debt = await self._storage.get(self.debt_key(workspace_id))
        seq, last = await self._last_topup(workspace_id)
        return WalletStatus(await self.billing(workspace_id), -int(debt) if debt else 0, last, seq)

    async def topups(self, workspace_id: str, *, limit: int = 100) -> list[dict[str, object]]:
        raw = await self._storage.log_range(f"{workspace_id}:wallet:log", limit=limit)
        return [json.loads(item) for item in raw]

    async def check_low_balance(self, workspace_id: str, balance: int) -> list[Event]:
        """Publish ``account.low_balance`` for each tier ``balance`` has newly crossed; the
        events published."""
        published: list[Event] = []
        seq, last = await self._last_topup(workspace_id)
        if last <= 0 or balance * 100 > last * TIERS[0]:
            return published
        for tier in TIERS:
            if balance * 100 > last * tier or (workspace_id, seq, tier) in self._fired:
                continue
            first = await self._storage.set(
                f"{workspace_id}:wallet:tier:{seq}:{tier}", b"1", if_absent=True
            )
            if len(self._fired) > 100_000:
                self._fired.clear()
            self._fired.add((workspace_id, seq, tier))
            if first:
                level = cast(Literal[20, 10, 0], tier)
                data = LowBalanceData(balance=usd(balance), last_topup=usd(last), tier=level)
                moment = datetime.fromtimestamp(await self._storage.now(), UTC)
                event = Event.create(data, workspace_id=workspace_id, now=moment)
                await self._events.publish(event)
                published.append(event)
        return published

    async def _record_topup(self, workspace_id: str, number: int, amount: int) -> None:
        """Make top-up ``number`` the last one, unless a later one got there first: two
        credits may finish in either order (other processes, a thread-backed store)."""
        key = f"{workspace_id}:wallet:last_topup"
        while True:
            current = await self._storage.get(key)
            if current is not None and int(current.partition(b":")[0]) >= number:
                return
            if await self._storage.cas(key, current, f"{number}:{amount}".encode()):
                return

    async def _last_topup(self, workspace_id: str) -> tuple[int, int]:
        raw = await self._storage.get(f"{workspace_id}:wallet:last_topup")
        if not raw:
            return 0, 0
        seq, _, amount = raw.decode().partition(":")
        return int(seq), int(amount)
