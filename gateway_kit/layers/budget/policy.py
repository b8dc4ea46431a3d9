"""Budget Control's decisions, as plain functions of spend, caps and the mode: no ASGI, no
storage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway_kit._asgi.types import Header
from gateway_kit.accounts.spend import BudgetBand, BudgetThresholds
from gateway_kit.config import BudgetConfig, Mode
from gateway_kit.pipeline.verdicts import Refusal, Verdict

__all__ = ["BudgetPolicy", "BudgetVerdict", "Threshold"]

Threshold = Literal["warn", "downgrade", "block"]
_THRESHOLDS: tuple[Threshold, ...] = ("warn", "downgrade", "block")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetVerdict(Verdict):
    """Budget Control's decision: the band, what the response says, and what to alert."""

    band: BudgetBand = "ok"
    #: ``x-gateway-budget``: warn, downgrade, block, wallet, would-<band>, unpriced, unchecked.
    header: str | None = None
    #: The model the request goes to instead (a downgrade).
    downgrade_to: str | None = None
    downgraded_from: str | None = None
    committed: int = 0
    cap: int | None = None

    def details(self) -> dict[str, Any]:
        details: dict[str, Any] = {"band": self.band}
        if self.downgrade_to is not None:
            details["downgrade_to"] = self.downgrade_to
        return details

    def headers(self) -> list[Header]:
        headers = [] if self.header is None else [(b"x-gateway-budget", self.header.encode())]
        if self.downgraded_from is not None:
            headers.append((b"x-gateway-downgraded-from", self.downgraded_from.encode()))
        return headers


class BudgetPolicy:
    """Budget Control's decisions, as plain functions of spend, caps and the mode."""

    def __init__(
        self, config: BudgetConfig, *, mode: Mode, downgrades: Mapping[str, str | None]
    ) -> None:
        self.thresholds = BudgetThresholds.from_config(config)
        self.mode = mode
        self._downgrades = dict(downgrades)

    def limit(self, cap: int | None) -> int | None:
        """The most a workspace may commit, when the cap is enforced."""
        if cap is None or self.mode is not Mode.ENFORCE:
            return None
        return self.thresholds.limit(cap)

    def target(self, model: str) -> str | None:
        """Where ``model`` is downgraded to (enforce mode only)."""
        return self._downgrades.get(model) if self.mode is Mode.ENFORCE else None

    def spent(self, settled: int, cap: int | None) -> tuple[Threshold, ...]:
        """The thresholds the ``settled`` spend has reached: what ``budget.alert`` reports
        (block once the cap is used up: no request can pass it any more)."""
        if cap is None:
            return ()
        cuts = self.thresholds.cuts(cap)
        return tuple(t for t, cut in zip(_THRESHOLDS, cuts, strict=True) if settled >= cut)

    def admitted(
        self, model: str, committed: int, cap: int | None, *, downgraded: bool = False
    ) -> BudgetVerdict:
        """The reservation went through; ``committed`` includes it."""
        if self.mode is not Mode.ENFORCE:  # off: spend is recorded, nothing is decided
            return BudgetVerdict(committed=committed, cap=cap)
        band = self.thresholds.verdict(committed, cap) if cap is not None else "ok"
        target = self.target(model)
        if band == "downgrade" and target is None:
            band = "warn"
        if target is not None and (downgraded or band == "downgrade"):
            return BudgetVerdict(
                action="downgrade",
                band="downgrade",
                header="downgrade",
                downgrade_to=target,
                downgraded_from=model,
                committed=committed,
                cap=cap,
            )
        return BudgetVerdict(
            action="pass" if band == "ok" else band,
            band=band,
            header=None if band == "ok" else band,
            committed=committed,
            cap=cap,
        )

    def refused(
        self, reason: Literal["budget", "key_budget", "wallet"], committed: int, cap: int | None
    ) -> BudgetVerdict:
        """The reservation did not fit: a 402. ``committed`` is the spend as it stands, without
        this request."""
        if reason == "wallet":
            message = "The wallet balance cannot cover this request. Top up the wallet to continue."
            code, header = "insufficient_balance", "wallet"
        else:
            what = "this API key's" if reason == "key_budget" else "the workspace's"
            message = (
                f"This request would exceed {what} budget for the period. Raise the cap or "
                "wait for the period to reset."
            )
            code, header = "budget_exceeded", "block"
        return BudgetVerdict(
            action="block",
            refusal=Refusal(402, message, code=code, type="insufficient_quota"),
            band="block",
            header=header,
            committed=committed,
            cap=cap,
        )

    def monitored(
        self, committed: int, cap: int | None, *, key_over: bool = False
    ) -> BudgetVerdict:
        """Monitor mode: what enforcing would have done with ``committed`` (this request in);
        ``key_over``: the request would take its key past the key's cap (a block)."""
        band = self.thresholds.verdict(committed, cap) if cap is not None else "ok"
        if key_over:
            band = "block"
        return BudgetVerdict(
            action="pass" if band == "ok" else f"would-{band}",
            band=band,
            header=None if band == "ok" else f"would-{band}",
            committed=committed,
            cap=cap,
        )
