"""Budget Control: verdicts at the exact thresholds, downgrades, 402, alerts once, reservations
that always settle (client disconnects included), no overspend under concurrency."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest

from gateway_kit.accounts.keys import Principal
from gateway_kit.accounts.periods import period_at
from gateway_kit.cost.tokens import estimate_prompt_tokens
from gateway_kit.events.bus import EventRecorder
from gateway_kit.layers.budget import BudgetMiddleware
from gateway_kit.layers.budget.step import BudgetStep
from gateway_kit.pipeline import RequestContext
from gateway_kit.pipeline.verdicts import Refusal
from gateway_kit.storage import MemoryStorage
from tests.fakes import (
    COMPLETION,
    DONE,
    BreakableStorage,
    Env,
    ScriptedStream,
    chunk,
    provisioned,
)

pytestmark = pytest.mark.anyio

HELLO = [{"role": "user", "content": "hi"}]
PROMPT = estimate_prompt_tokens({"model": "gpt-fake", "messages": HELLO})
OUTPUT = 1000 - PROMPT
COST = 1000  # micro-USD: 1 per token, the estimate exactly what upstream reports
CAP = 10 * COST


def config(*, cap: int = CAP, downgrade: bool = False, **budget: Any) -> dict[str, Any]:
    cheap = {"input_usd_per_mtok": "0.5", "output_usd_per_mtok": "0.5"}
    one = {"input_usd_per_mtok": "1", "output_usd_per_mtok": "1"}
    return {
        "models": [
            {
                "name": "gpt-fake",
                "provider": "up",
                "price": one,
                **({"downgrade_to": "gpt-cheap"} if downgrade else {}),
            },
            {"name": "gpt-cheap", "provider": "up", "price": cheap},
        ],
        "plans": {
            "capped": {
                "included_requests": 100_000,
                "burst_limit_rpm": 100_000,
                "budget_usd": str(cap / 1_000_000),
            }
        },
        "default_plan": "capped",
        "budget": {"default_output_tokens": OUTPUT, **budget},
    }


@asynccontextmanager
async def budgeted(**options: Any) -> Any:
    async with provisioned("capped", **config(**options)) as env:
        usage = {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT}
        env.upstream.json_body = {**COMPLETION, "usage": usage}
        recorder = EventRecorder()
        env.gateway.events.subscribe(recorder)
        yield env, recorder


async def totals(env: Env) -> Any:
    period = period_at(env.clock(), "month")
    return await env.gateway.ledger.totals(env.workspace_id, period)


def alerts(recorder: EventRecorder) -> list[str]:
    return [e.data.verdict for e in recorder.events if e.event == "budget.alert"]


async def test_verdicts_change_at_the_exact_thresholds_and_alert_once() -> None:
    async with budgeted() as (env, recorder):
        verdicts = []
        for _ in range(12):
            response = await env.chat(messages=HELLO)
            verdicts.append((response.status, response.headers.get("x-gateway-budget")))
        # Committed after each: 1000, 2000, ... the 8th reaches 80 %, the 9th 90 % (no
        # downgrade target: warn), the 10th 100 % (allowed: block is *past* the cap).
        assert verdicts[:7] == [(200, None)] * 7
        assert verdicts[7:10] == [(200, "warn")] * 3
        assert verdicts[10:] == [(402, "block")] * 2
        assert alerts(recorder) == ["warn", "downgrade", "block"]
        spent = await totals(env)
        assert (spent.committed, spent.reserved, spent.settled) == (CAP, 0, CAP)
        refused = await env.chat(messages=HELLO)
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("insufficient_quota", "budget_exceeded")
        assert env.upstream.calls == 10


async def test_downgrade_sends_the_request_to_the_cheaper_model() -> None:
    async with budgeted(downgrade=True) as (env, _):
        for _ in range(8):
            assert (await env.chat(messages=HELLO)).status == 200
        response = await env.chat(messages=HELLO)  # committed reaches 9000: 90 %
        assert response.status == 200
        assert response.headers.get("x-gateway-budget") == "downgrade"
        assert response.headers.get("x-gateway-downgraded-from") == "gpt-fake"
        assert response.headers.get("x-gateway-model") == "gpt-cheap"
        assert env.upstream.sent_json()["model"] == "gpt-cheap"
        assert (await totals(env)).settled == 8 * COST + COST // 2


async def test_past_the_cap_the_downgrade_target_is_tried_before_blocking() -> None:
    async with budgeted(downgrade=True, warn_at=1.0, downgrade_at=1.0) as (env, _):
        served: Counter[tuple[int, str | None]] = Counter()
        for _ in range(14):
            response = await env.chat(messages=HELLO)
            served[(response.status, response.headers.get("x-gateway-model"))] += 1
        # Nine at full price; the tenth reaches 100 % and is downgraded (costs 500); the
        # eleventh no longer fits at full price but does on the cheaper model; then nothing.
        assert served == {(200, "gpt-fake"): 9, (200, "gpt-cheap"): 2, (402, None): 3}
        assert (await totals(env)).settled == CAP


async def test_monitor_never_blocks_and_says_what_it_would_do() -> None:
    async with budgeted(mode="monitor") as (env, _):
        statuses = [await env.chat(messages=HELLO) for _ in range(12)]
        assert [r.status for r in statuses] == [200] * 12
        assert statuses[-1].headers.get("x-gateway-budget") == "would-block"
        assert (await totals(env)).settled == 12 * COST


async def test_a_key_cap_applies_to_that_key_only() -> None:
    from gateway_kit.accounts.spend import BudgetSettings

    async with budgeted(cap=100 * COST) as (env, _):
        other = (await env.gateway.keys.create(env.workspace_id)).secret
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        await env.gateway.ledger.save_settings(
            env.workspace_id, BudgetSettings(key_caps={key_id: 2 * COST})
        )
        assert [(await env.chat(messages=HELLO)).status for _ in range(3)] == [200, 200, 402]
        assert (await env.chat(other, messages=HELLO)).status == 200


async def test_monitor_says_what_a_key_cap_would_do_too() -> None:
    from gateway_kit.accounts.spend import BudgetSettings

    async with budgeted(cap=100 * COST, mode="monitor") as (env, _):
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        await env.gateway.ledger.save_settings(
            env.workspace_id, BudgetSettings(key_caps={key_id: 2 * COST})
        )
        answers = [await env.chat(messages=HELLO) for _ in range(3)]
        assert [a.status for a in answers] == [200, 200, 200]
        # Enforcing would refuse the third (the key's cap): monitor said nothing of it.
        assert [a.headers.get("x-gateway-budget") for a in answers] == [None, None, "would-block"]


async def test_a_client_that_leaves_mid_stream_still_settles() -> None:
    async with budgeted() as (env, _):
        usage = {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT}
        usage_event = b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
        parts = [chunk("a"), chunk("b"), chunk("c"), usage_event, DONE]
        env.upstream.stream = ScriptedStream(parts, before_each=lambda _: anyio.sleep(0.1))
        response = await env.recorder.request(
            "POST",
            "/v1/chat/completions",
            json={"model": "gpt-fake", "messages": HELLO, "stream": True},
            headers=env.auth(),
            disconnect_after=1,
        )
        assert response.disconnected_at is not None
        spent = await totals(env)
        assert spent.reserved == 0
        # The usage never arrived: an estimate (prompt + the chunks seen) was settled.
        assert 0 < spent.settled < COST


async def test_alerts_report_the_spend_settled_never_a_burst_of_reservations() -> None:
    """Two requests in flight at once reserve 4,600 each (the estimate before any answer was
    seen): the committed figure is 92 % of the cap for a moment while nothing is spent. That
    once published warn and downgrade with 92 % as ``spent_usd``, and used up the period's
    one alert of each, so the real crossings later said nothing."""
    async with budgeted(default_output_tokens=4600 - PROMPT) as (env, recorder):
        env.upstream.delay = 0.05  # both in flight together
        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(partial(env.chat, messages=HELLO))
        assert (await totals(env)).settled == 2 * COST
        assert alerts(recorder) == []


async def test_no_overspend_and_no_leak_under_concurrency() -> None:
    async with budgeted() as (env, recorder):
        env.upstream.delay = 0.05  # all in flight together
        statuses: Counter[int] = Counter()

        async def one(index: int) -> None:
            gone = anyio.Event()
            if index % 7 == 0:  # this client leaves while upstream is still answering

                async def leave() -> None:
                    await anyio.sleep(0.02)
                    gone.set()

                tasks.start_soon(leave)
            response = await env.recorder.request(
                "POST",
                "/v1/chat/completions",
                json={"model": "gpt-fake", "messages": HELLO},
                headers=env.auth(),
                disconnect=gone,
            )
            statuses[response.status] += 1

        async with anyio.create_task_group() as tasks:
            for index in range(100):
                tasks.start_soon(one, index)
        spent = await totals(env)
        assert spent.reserved == 0
        assert spent.committed == spent.settled
        assert spent.settled <= CAP
        assert statuses[402] >= 90
        # Each threshold the settled spend reached was alerted once, and only those.
        shares = {"warn": 0.8, "downgrade": 0.9, "block": 1.0}
        reached = [name for name, share in shares.items() if spent.settled >= share * CAP]
        assert sorted(alerts(recorder)) == sorted(reached)


@pytest.mark.parametrize(
    ("on_error", "status", "header"), [("closed", 503, None), ("open", 200, "unchecked")]
)
async def test_a_storage_failure_follows_the_budget_policy(
    on_error: str, status: int, header: str | None
) -> None:
    options = config(on_error=on_error)
    async with provisioned("capped", storage_class=BreakableStorage, **options) as env:
        env.upstream.json_body = {
            **COMPLETION,
            "usage": {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT},
        }
        env.storage.broken = True  # limits fail open (their default); then the budget
        response = await env.chat(messages=HELLO)
        assert response.status == status
        if status == 503:
            assert response.json()["error"]["code"] == "budget_unavailable"
            assert env.upstream.calls == 0
        else:
            assert response.headers.get("x-gateway-budget") == header


async def test_a_model_without_a_price_is_served_and_says_so() -> None:
    options = config()
    options["models"].append({"name": "gpt-unpriced", "provider": "up"})
    async with provisioned("capped", **options) as env:
        response = await env.chat(model="gpt-unpriced", messages=HELLO)
        assert response.status == 200
        assert response.headers.get("x-gateway-budget") == "unpriced"
        assert response.headers.get("x-gateway-cost-usd") == "unknown"
        assert (await totals(env)).committed == 0


class SlowReplyStorage(MemoryStorage):
    """Reservations are applied at once, but their reply is held until ``reply`` is set: a
    script that ran in Redis while its answer is still on the wire."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.applied = anyio.Event()
        self.reply = anyio.Event()

    async def incr_many(self, increments: Any, **kwargs: Any) -> Any:
        result = await super().incr_many(increments, **kwargs)
        if any(inc.key.endswith(":reserved") and inc.amount > 0 for inc in increments):
            self.applied.set()
            await self.reply.wait()
        return result


async def test_a_request_cancelled_while_reserving_still_settles() -> None:
    # A server that cancels the app when the client leaves, or a timeout around the app.
    async with provisioned("capped", storage_class=SlowReplyStorage, **config()) as env:
        env.upstream.delay = 30  # the cancellation lands after the reservation, mid-request
        scope = anyio.CancelScope()

        async def request() -> None:
            with scope:
                await env.chat(messages=HELLO)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(request)
            await env.storage.applied.wait()
            scope.cancel()
            env.storage.reply.set()
        assert scope.cancelled_caught
        assert (await totals(env)).reserved == 0


async def test_the_context_holds_every_layers_verdict_and_the_events_raised() -> None:
    async with budgeted() as (env, _):
        seen: list[Any] = []
        app = env.recorder.app

        async def keep_context(scope: Any, receive: Any, send: Any) -> None:
            await app(scope, receive, send)
            seen.append(scope["gateway_kit.context"])

        env.recorder.app = keep_context
        for _ in range(8):  # the 8th request reaches warn_at
            await env.chat(messages=HELLO)
        ctx = seen[-1]
        assert {name: v.action for name, v in ctx.verdicts.items()} == {
            "auth": "pass",
            "limits": "pass",
            "budget": "warn",
            "cache": "bypass",  # no temperature given: not cached
            "routing": "served",
        }
        assert ctx.verdicts["budget"].band == "warn"
        assert [(e.event, e.data.verdict) for e in ctx.events] == [("budget.alert", "warn")]
        assert seen[0].events == []


async def test_a_request_priced_past_the_cap_alone_is_refused_and_alerts_nothing() -> None:
    # The cap is $0.01; this first request's estimate (20 choices) is twice that.
    async with budgeted() as (env, recorder):
        refused = await env.chat(messages=HELLO, n=20)
        assert refused.status == 402
        assert refused.json()["error"]["code"] == "budget_exceeded"
        assert alerts(recorder) == []
        assert (await totals(env)).committed == 0

        # The period's alerts are all still to come, once each, as real spend crosses them.
        statuses = [(await env.chat(messages=HELLO)).status for _ in range(10)]
        assert statuses == [200] * 10
        # The 10th's spend settled at the cap: used up, so block is alerted with it.
        assert alerts(recorder) == ["warn", "downgrade", "block"]
        assert (await env.chat(messages=HELLO)).status == 402  # the spend is at the cap
        assert (await env.chat(messages=HELLO, n=20)).status == 402
        assert alerts(recorder) == ["warn", "downgrade", "block"]
        block = [e for e in recorder.events if e.event == "budget.alert"][-1]
        assert (block.data.spent_usd, block.data.cap_usd) == (0.01, 0.01)


async def test_a_refusal_below_the_cap_alerts_nothing_even_late_in_the_period() -> None:
    async with budgeted() as (env, recorder):
        for _ in range(9):
            assert (await env.chat(messages=HELLO)).status == 200
        assert alerts(recorder) == ["warn", "downgrade"]
        # 9000 of 10000 spent: two choices no longer fit, but the spend has not used the cap up.
        assert (await env.chat(messages=HELLO, n=2)).status == 402
        assert alerts(recorder) == ["warn", "downgrade"]
        assert (await env.chat(messages=HELLO)).status == 200  # one still fits
        # and its spend uses the cap up: block is alerted by the spend settled, not a refusal
        assert alerts(recorder) == ["warn", "downgrade", "block"]


async def test_a_settlement_past_the_cap_alerts_what_the_real_spend_crossed() -> None:
    async with budgeted() as (env, recorder):
        # Upstream reports far more output than the estimate held: the settled spend passes
        # every threshold at once, and each is alerted once.
        usage = {"prompt_tokens": PROMPT, "completion_tokens": 2 * CAP}
        env.upstream.json_body = {**COMPLETION, "usage": usage}
        assert (await env.chat(messages=HELLO)).status == 200
        assert alerts(recorder) == ["warn", "downgrade", "block"]
        spent = (await totals(env)).committed
        assert spent == PROMPT + 2 * CAP
        assert {e.data.spent_usd for e in recorder.events} == {spent / 1_000_000}
        assert (await env.chat(messages=HELLO)).status == 402
        assert len(alerts(recorder)) == 3


async def test_an_estimate_past_any_counter_is_refused_not_a_server_error() -> None:
    options = config()
    options["models"][0]["price"] = {
        "input_usd_per_mtok": "1",
        "output_usd_per_mtok": str(10**16),  # 10**16 micro-USD a token: past int64 at once
    }
    async with provisioned("capped", **options) as env:
        response = await env.chat(messages=HELLO)
        assert response.status == 402
        assert response.json()["error"]["code"] == "budget_exceeded"
        assert (await totals(env)).committed == 0
        assert env.upstream.calls == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 10**16),
        ("n", 129),
        ("n", 0),
        ("max_tokens", 2**31),
        ("max_completion_tokens", 10**19),
        ("top_logprobs", 21),
        ("top_logprobs", -1),
    ],
)
async def test_integers_past_their_bounds_are_a_400_before_the_budget_prices_them(
    field: str, value: int
) -> None:
    async with budgeted() as (env, recorder):
        response = await env.chat(messages=HELLO, **{field: value})
        assert response.status == 400
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_type", field)
        assert "from" in error["message"]
        assert (await totals(env)).committed == 0
        assert alerts(recorder) == []


class RefusesAfterTheStep:
    """A participant whose decision, once the step ran, refuses the request: every counter the
    step took is given back, the budget's reservation included."""

    concern = "other"

    def contribute(self, ctx: Any) -> None:
        return None

    def decide(self, ctx: Any, result: Any) -> Refusal:
        return Refusal(429, "Refused after the step.", code="refused_after")

    def refused(self, ctx: Any, result: Any) -> Refusal:
        raise AssertionError("the step was not refused")

    def failed(self, ctx: Any, error: Any) -> None:
        return None

    def settle(self, ctx: Any, admitted: bool) -> None:
        return None


async def test_a_reservation_given_back_alerts_nothing() -> None:
    async with budgeted() as (env, recorder):
        gateway = env.gateway
        [key] = await gateway.keys.list(env.workspace_id)
        principal = Principal(env.workspace_id, key.key_id, key.scope_set)
        layer = BudgetMiddleware(env.recorder.app, gateway=gateway)
        period = period_at(env.clock(), "month")
        payload = {"model": "gpt-fake", "messages": HELLO, "n": 9}  # 90 % of the cap at once
        ctx = RequestContext()
        step = BudgetStep(layer, principal, period, payload, CAP, None, False)
        ctx.admission.join(step)
        ctx.admission.join(RefusesAfterTheStep())
        refusal = await ctx.admission.commit(ctx, gateway.storage)
        assert refusal is not None
        assert refusal.code == "refused_after"
        assert ctx.verdicts["budget"].band == "warn"  # what the reservation reached...
        await ctx.admission.settle(ctx, ctx.admission.settlements(ctx))
        assert alerts(recorder) == []  # ...but it did not stand
        assert (await totals(env)).committed == 0
