"""The layers' policies as plain objects: no ASGI, no storage."""

from __future__ import annotations

import pytest

from gateway_kit import BudgetConfig, LimitsConfig, Mode, PlanConfig
from gateway_kit.accounts.periods import period_at
from gateway_kit.layers.budget import BudgetPolicy
from gateway_kit.layers.limits import LimitsPolicy
from gateway_kit.storage import THROTTLED, IncrManyResult, ThrottleResult

CAP = 1_000_000  # one dollar


def budget(mode: Mode = Mode.ENFORCE, *, downgrade: str | None = "small") -> BudgetPolicy:
    config = BudgetConfig(warn_at=0.8, downgrade_at=0.9, block_at=1.0)
    return BudgetPolicy(config, mode=mode, downgrades={"big": downgrade, "small": None})


@pytest.mark.parametrize(
    ("committed", "band", "header"),
    [
        (799_999, "ok", None),
        (800_000, "warn", "warn"),
        (899_999, "warn", "warn"),
        (900_000, "downgrade", "downgrade"),
        (1_000_000, "downgrade", "downgrade"),
    ],
)
def test_budget_bands_change_at_the_exact_micro_dollar(
    committed: int, band: str, header: str | None
) -> None:
    verdict = budget().admitted("big", committed, CAP)
    assert (verdict.band, verdict.header) == (band, header)
    assert verdict.refusal is None
    if band == "downgrade":
        assert (verdict.downgrade_to, verdict.downgraded_from) == ("small", "big")


@pytest.mark.parametrize(
    ("settled", "alerts"),
    [
        (799_999, ()),
        (800_000, ("warn",)),
        (900_000, ("warn", "downgrade")),
        (999_999, ("warn", "downgrade")),
        (1_000_000, ("warn", "downgrade", "block")),  # used up: no request passes any more
    ],
)
def test_alerts_follow_the_settled_spend_to_the_micro_dollar(
    settled: int, alerts: tuple[str, ...]
) -> None:
    assert budget().spent(settled, CAP) == alerts
    assert budget().spent(settled, None) == ()


def test_a_model_without_a_downgrade_target_warns_instead() -> None:
    verdict = budget(downgrade=None).admitted("big", 950_000, CAP)
    assert (verdict.band, verdict.header, verdict.downgrade_to) == ("warn", "warn", None)


def test_a_reservation_that_only_fit_downgraded_is_a_downgrade() -> None:
    verdict = budget().admitted("big", 100, CAP, downgraded=True)
    assert verdict.downgrade_to == "small"


@pytest.mark.parametrize(
    ("reason", "code", "header"),
    [
        ("budget", "budget_exceeded", "block"),
        ("key_budget", "budget_exceeded", "block"),
        ("wallet", "insufficient_balance", "wallet"),
    ],
)
def test_refusals_are_402_with_their_reason(reason: str, code: str, header: str) -> None:
    verdict = budget().refused(reason, 1_000_000, CAP)  # type: ignore[arg-type]
    assert verdict.refusal is not None
    assert (verdict.refusal.status, verdict.refusal.code) == (402, code)
    assert verdict.header == header


def test_monitor_says_what_it_would_do_and_never_refuses_or_holds_a_cap() -> None:
    policy = budget(Mode.MONITOR)
    assert policy.limit(CAP) is None
    assert policy.target("big") is None
    verdict = policy.monitored(1_000_001, CAP)
    assert (verdict.action, verdict.header, verdict.refusal) == ("would-block", "would-block", None)
    assert budget().limit(CAP) == CAP


def test_no_cap_means_no_verdict_and_no_alert() -> None:
    verdict = budget().admitted("big", 10**12, None)
    assert (verdict.band, verdict.header) == ("ok", None)


NOV_18 = 1_795_000_000.0


def limits_result(
    *, allowed: bool, used: int, refused: str | None = None, remaining: int = 5
) -> IncrManyResult:
    throttle = ThrottleResult(refused != THROTTLED, remaining, 20.0 if refused else 0.0, 12.0)
    return IncrManyResult(allowed, {f"ws_1:quota:{'2026-11'}": used}, refused, throttle)


def test_limits_operations_are_the_period_counter_and_the_burst_throttle() -> None:
    policy = LimitsPolicy(LimitsConfig())
    plan = PlanConfig(included_requests=10, burst_limit_rpm=6)
    period = policy.period(NOV_18)
    counter, burst = policy.operations("ws_1", "p", plan, period)
    assert (counter.key, counter.amount, counter.limit) == ("ws_1:quota:2026-11", 1, 10)
    assert (burst.key, burst.limit, burst.period) == ("ws_1:burst", 6, 60.0)
    assert policy.operations("ws_1", "p", plan, period) == (counter, burst)  # memoised
    overage = PlanConfig(included_requests=10, burst_limit_rpm=6, overage="allow")
    assert policy.operations("ws_1", "flex", overage, period)[0].limit is None


@pytest.mark.parametrize(
    ("refused", "status", "code"),
    [
        (None, 200, ""),
        (THROTTLED, 429, "rate_limit_exceeded"),
        ("ws_1:quota:2026-11", 402, "quota_exceeded"),
    ],
)
def test_limits_verdicts_from_the_step(refused: str | None, status: int, code: str) -> None:
    policy = LimitsPolicy(LimitsConfig())
    plan = PlanConfig(included_requests=10, burst_limit_rpm=6)
    period = period_at(NOV_18)
    counter, _ = policy.operations("ws_1", "p", plan, period)
    result = limits_result(allowed=refused is None, used=10 if refused else 4, refused=refused)
    verdict = policy.verdict(result, counter, plan, period)
    assert (verdict.status, verdict.code, verdict.refused) == (status, code, refused is not None)
    headers = dict(verdict.headers(NOV_18))
    assert headers[b"x-ratelimit-limit"] == b"6"
    assert (b"retry-after" in headers) == (status == 429)
