"""Guardian through the whole stack: runaway sequences stopped, ordinary traffic untouched, a
blocked request costing nothing, events once per episode, modes, overrides and storage
failures.

Every rule gets a realistic runaway sequence (a cron repeating one prompt, an agent repeating
one tool call, a growing context...) and ordinary traffic of the same shape that must pass.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway_kit.accounts.guardian import GuardianSettings
from gateway_kit.accounts.periods import period_at
from gateway_kit.cost.encodings import load_encoding
from gateway_kit.events import EventRecorder
from gateway_kit.layers.guardian.facts import facts_of
from tests.fakes import COMPLETION, BreakableStorage, Env, provisioned

pytestmark = pytest.mark.anyio

PLANS = {"p": {"included_requests": 10_000, "burst_limit_rpm": 10_000, "budget_usd": 1000}}


@asynccontextmanager
async def guarded(rules: dict[str, Any] | None = None, **guardian: Any) -> AsyncIterator[Any]:
    """A gateway with Guardian on (its defaults, or ``rules`` over them) and a priced model;
    ``extra`` holds other settings of the gateway."""
    extra = guardian.pop("extra", {})
    plans = extra.pop("plans", PLANS)
    async with provisioned(
        next(iter(plans)),
        plans=plans,
        default_plan=next(iter(plans)),
        models=[
            {
                "name": "gpt-fake",
                "provider": "up",
                "price_as": "gpt-4o",
                "context_window": 4000,
                "price": {"input_usd_per_mtok": 1, "output_usd_per_mtok": 2},
            },
            {"name": "llama-local", "provider": "up", "context_window": 4000},
        ],
        guardian={"rules": rules or {}, **guardian},
        **extra,
    ) as env:
        recorder = EventRecorder()
        env.gateway.events.subscribe(recorder)
        yield env, recorder


def blocks(recorder: EventRecorder) -> list[Any]:
    return [e.data for e in recorder.events if e.event == "guardian.block"]


async def ask(
    env: Env,
    *messages: dict[str, Any],
    key: str | None = None,
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> Any:
    payload = {"model": "gpt-fake", "messages": list(messages), **fields}
    headers = env.auth(key) | (headers or {})
    return await env.recorder.request("POST", "/v1/chat/completions", json=payload, headers=headers)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_turn(name: str, **arguments: Any) -> list[dict[str, Any]]:
    call_id = "call_" + hashlib.sha1(json.dumps([name, arguments]).encode()).hexdigest()[:16]
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": f"result of {name}"},
    ]


async def state(env: Env) -> tuple[int, int, int]:
    """Quota used, upstream calls, budget committed."""
    period = period_at(env.clock(), "month")
    totals = await env.gateway.ledger.totals(env.workspace_id, period)
    return await env.used_requests(), env.upstream.calls, totals.committed


# -- repeat ------------------------------------------------------------------------------------


async def test_a_cron_repeating_one_prompt_is_throttled_then_comes_back_after_the_window() -> None:
    async with guarded() as (env, recorder):
        statuses = []
        for minute in range(12):  # "Summarise today's orders", every minute, a timestamp in it
            text = f"Summarise today's orders. Now: 2026-11-18T09:{minute:02}:00Z"
            answer = await ask(env, user(text))
            statuses.append(answer.status)
            env.clock.advance(60)
        # The 10th call within 10 minutes of the first is throttled: it would wait 60 s (600 s
        # / 10), past the 10 s bound, so it is refused with when to come back.
        assert statuses[:9] == [200] * 9
        assert statuses[9] == 429
        # The window started with the first call: ten minutes later the count starts over.
        assert statuses[10:] == [200, 200]
        [event] = blocks(recorder)
        assert (event.rule, event.action, event.threshold, event.observed) == (
            "repeat",
            "throttled",
            10,
            10,
        )


async def test_an_agent_honouring_retry_after_is_served_on_its_next_try() -> None:
    async with guarded() as (env, _):
        for _ in range(9):
            assert (await ask(env, user("Check the deploy status"))).status == 200
            env.clock.advance(1)
        refused = await ask(env, user("Check the deploy status"))
        assert refused.status == 429
        # The count comes down only when the window of the first call ends (the refused
        # request counted nothing): Retry-After was 60 (600 s / 10), ten times in a row.
        wait = int(refused.headers["retry-after"])
        assert 591 <= wait <= 600
        env.clock.advance(wait)
        assert (await ask(env, user("Check the deploy status"))).status == 200


async def test_throttled_answers_say_why_and_when_and_name_the_rule() -> None:
    async with guarded({"repeat": {"window_s": 60, "throttle_at": 3, "block_at": 6}}) as (env, _):
        for _ in range(2):
            assert (await ask(env, user("status?"))).status == 200
        refused = await ask(env, user("status?"))
        assert refused.status == 429
        # Held 20 s (60 s / 3) would pass the 10 s bound: refused until the window ends (the
        # refusal counts nothing, so 20 s later the same count would refuse it again).
        assert refused.headers["retry-after"] == "60"
        assert refused.headers["x-gateway-guardian"] == "throttled=repeat"
        error = refused.json()["error"]
        assert (error["code"], error["type"]) == ("guardian_block", "rate_limit_error")
        assert error["message"] == (
            "Guardian rule 'repeat' throttled this request: 3 identical requests from this key "
            "within 60 s (throttled from 3, blocked from 6); retry in 60 s."
        )


async def test_a_request_guardian_refuses_has_no_verdict_of_the_layers_after_it() -> None:
    """Guardian refuses from the step's counts; Budget, after it, never saw the request (its
    reservation is given back): its "pass" was recorded all the same, and counted."""
    async with guarded({"repeat": {"window_s": 60, "throttle_at": 3, "block_at": 6}}) as (env, _):
        for _ in range(3):
            await ask(env, user("status?"))
        await env.gateway.requests.flush()
        path = f"/api/v1/workspaces/{env.workspace_id}/requests"
        listed = await env.recorder.request("GET", path, headers=env.auth())
        refused, *served = listed.json()["data"]  # newest first
        assert refused["status"] == 429
        assert refused["verdicts"]["guardian"]["action"] == "block"
        assert "budget" not in refused["verdicts"]
        assert refused["verdicts"]["limits"] == {"action": "pass"}  # before it: it did pass
        assert all(r["verdicts"]["budget"]["action"] == "pass" for r in served)


async def test_a_request_refused_in_the_step_by_guardian_shows_the_quota_as_it_stands() -> None:
    async with guarded({"repeat": {"throttle_at": 3, "block_at": 3}}) as (env, _):
        answers = [await ask(env, user("same prompt")) for _ in range(3)]
        assert [a.status for a in answers] == [200, 200, 429]
        used = await env.used_requests()
        assert used == 2
        # Refused by Guardian's counter in the step, nothing was counted: the quota left is
        # what GET /v1/me says (it showed one request more).
        assert f'"quota";r={10_000 - used};' in answers[-1].headers["ratelimit"]


async def test_a_throttle_within_the_bound_holds_the_request_then_serves_it() -> None:
    rules = {"repeat": {"window_s": 0.4, "throttle_at": 2, "block_at": 9}}
    async with guarded(rules, throttle_max_wait_s=1) as (env, _):
        assert (await ask(env, user("ping"))).status == 200
        held = await ask(env, user("ping"))
        assert held.status == 200
        assert held.headers["x-gateway-guardian"] == "throttled=repeat, wait=0.2"
        assert env.upstream.calls == 2


async def test_repeats_are_blocked_exactly_at_block_at() -> None:
    rules = {"repeat": {"window_s": 60, "throttle_at": 30, "block_at": 4}}
    with pytest.raises(ValueError, match="block_at must be at least throttle_at"):
        async with guarded(rules):
            pass
    rules = {"repeat": {"action": "block", "window_s": 60, "throttle_at": 4, "block_at": 4}}
    async with guarded(rules) as (env, recorder):
        before = await state(env)
        statuses = [(await ask(env, user("loop"))).status for _ in range(6)]
        assert statuses == [200, 200, 200, 429, 429, 429]
        after = await state(env)
        # The refused ones cost nothing: no quota, no upstream call, no budget.
        assert after[0] - before[0] == 3
        assert after[1] - before[1] == 3
        assert len(blocks(recorder)) == 1  # one episode, one event


async def test_ordinary_chat_traffic_never_trips_repeat() -> None:
    async with guarded() as (env, recorder):
        for i in range(40):  # forty different questions in ten minutes
            assert (await ask(env, user(f"What is {i} times 7?"))).status == 200
            env.clock.advance(15)
        # Many end users asking the same question, told apart by `user`.
        for person in range(15):
            assert (await ask(env, user("hi"), **{"user": f"person-{person}"})).status == 200
        assert blocks(recorder) == []


async def test_a_retry_after_an_upstream_error_does_not_count() -> None:
    rules = {"repeat": {"window_s": 60, "throttle_at": 3, "block_at": 3, "action": "block"}}
    routing = {"retries": 0, "allowed_fails": 100}
    async with guarded(rules, extra={"routing": routing}) as (env, _):
        env.upstream.status = 503
        for _ in range(5):
            assert (await ask(env, user("flaky?"))).status == 502
        env.upstream.status = 200
        assert [(await ask(env, user("flaky?"))).status for _ in range(3)] == [200, 200, 429]


# -- tool_loop ---------------------------------------------------------------------------------


async def test_an_agent_repeating_one_tool_call_is_blocked_before_the_model() -> None:
    async with guarded() as (env, recorder):
        history = [user("Book the cheapest flight to Lisbon")]
        statuses = []
        for _ in range(7):
            history += tool_turn("search_flights", to="LIS", date="2026-12-01")
            statuses.append((await ask(env, *history)).status)
        assert statuses == [200, 200, 200, 200, 400, 400, 400]
        blocked = await ask(env, *history)
        # The same history is refused again: no rate limit (a 429 had the SDKs retry it, told
        # when by a Retry-After that could never be right).
        assert "retry-after" not in blocked.headers
        error = blocked.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "guardian_block")
        assert error["message"].endswith("sent again, it is refused again.")
        event = blocks(recorder)[0]
        assert (event.rule, event.action, event.threshold, event.observed) == (
            "tool_loop",
            "blocked",
            5,
            5,
        )
        assert len(blocks(recorder)) == 1


async def test_an_agent_making_progress_is_not_stopped() -> None:
    async with guarded() as (env, recorder):
        history = [user("Collect this week's invoices")]
        for page in range(15):
            history += tool_turn("list_invoices", page=page)
            assert (await ask(env, *history)).status == 200
        assert blocks(recorder) == []


# -- context_growth and context_size -----------------------------------------------------------


async def test_a_context_growing_without_new_input_is_blocked() -> None:
    rules = {"context_growth": {"factor": 4, "min_tokens": 1500, "min_turns": 4}}
    async with guarded(rules) as (env, _):
        history = [user("Summarise the repository")]
        statuses = []
        for step in range(10):
            call = tool_turn("read_file", path=f"src/{step}.py")
            call[1]["content"] = f"# file {step}\n" + "def f():\n    return 1\n" * 40
            history += call
            statuses.append((await ask(env, *history)).status)
        assert 400 in statuses
        first = statuses.index(400)
        assert statuses[:first] == [200] * first
        # A long conversation of real exchanges grows just as much, and passes.
        chat = []
        for step in range(10):
            chat += [
                user(f"and then what happened on day {step}?"),
                {"role": "assistant", "content": "story " * 150},
            ]
            assert (await ask(env, *chat)).status == 200


async def test_a_prompt_past_the_window_is_413_with_its_exact_count() -> None:
    async with guarded({"context_size": {"window_share": 0.5}}) as (env, recorder):
        assert (await ask(env, user("word " * 1500))).status == 200  # about 1500 tokens
        big = await ask(env, user("word " * 2500))
        assert big.status == 413
        error = big.json()["error"]
        assert error["code"] == "guardian_block"
        [event] = blocks(recorder)
        assert (event.rule, event.threshold) == ("context_size", 2000)
        # gpt-fake is priced as gpt-4o: counted exactly with its tokenizer, o200k_base.
        assert f"the prompt has {event.observed:,} tokens," in error["message"]
        o200k = load_encoding("o200k_base")  # the shipped data: never downloaded
        assert o200k is not None
        words = len(o200k.encode_ordinary("word " * 2500))
        assert event.observed == words + 3 + 1 + 3  # the message, its role, the reply
        # A model whose tokenizer is unknown is estimated, and says so.
        local = await ask(env, user("word " * 2500), model="llama-local")
        assert local.status == 413
        assert "(estimated)" in local.json()["error"]["message"]


async def test_a_prompt_far_past_the_window_is_refused_on_its_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Megabytes of one repeated character took seconds of CPU to count exactly (and a
    refused request costs no quota: free to repeat). Four times the limit by the estimate is
    over it whatever the text: refused without counting, saying it is an estimate."""
    async with guarded({"context_size": {"window_share": 0.5}}) as (env, recorder):

        def never(*args: Any) -> Any:
            raise AssertionError("counted exactly")

        monkeypatch.setattr(env.gateway.tokens, "count_prompt", never)
        big = await ask(env, user("a" * 2_000_000))
        assert big.status == 413
        assert "retry-after" not in big.headers
        message = big.json()["error"]["message"]
        assert "(estimated), over the limit of 2,000" in message
        [event] = blocks(recorder)
        assert event.rule == "context_size"


# -- conversation_steps ------------------------------------------------------------------------


async def test_a_conversation_past_its_steps_is_throttled_others_go_on() -> None:
    rules = {"conversation_steps": {"max_steps": 5, "window_s": 600}}
    async with guarded(rules) as (env, recorder):
        named = {"x-conversation-id": "support-ticket-4711"}
        statuses = [(await ask(env, user(f"step {i}"), headers=named)).status for i in range(7)]
        assert statuses == [200] * 5 + [429, 429]
        assert blocks(recorder)[0].rule == "conversation_steps"
        # Another conversation, named or derived from its opening, is its own.
        other = {"x-conversation-id": "support-ticket-4712"}
        assert (await ask(env, user("step 0"), headers=other)).status == 200
        opening = [user("Plan my trip")]
        for i in range(5):
            assert (
                await ask(env, *opening, {"role": "assistant", "content": f"{i}"}, user("more"))
            ).status == 200


async def test_a_derived_conversation_counts_its_opening_and_parts_from_others() -> None:
    rules = {"conversation_steps": {"action": "block", "max_steps": 4, "window_s": 600}}
    async with guarded(rules) as (env, recorder):
        storage = env.gateway.storage
        counted: list[str] = []
        incr_many = storage.incr_many

        async def spy(increments: Any, **kwargs: Any) -> Any:
            counted.extend(i.key for i in increments if ":conv:" in i.key and i.amount > 0)
            return await incr_many(increments, **kwargs)

        storage.incr_many = spy
        system = {"role": "system", "content": "You are a travel agent."}
        opening = [system, user("Hi")]

        def step(answer: str, i: int, **fields: Any) -> Any:
            history = [{"role": "assistant", "content": answer}, user(f"question {i}")]
            return ask(env, *opening, *history, **fields)

        # The opening, then three follow-ups: four requests, the fifth refused.
        assert (await ask(env, *opening)).status == 200
        statuses = [(await step("Hello! Where to?", i)).status for i in range(4)]
        assert statuses == [200, 200, 200, 429]
        assert blocks(recorder)[0].rule == "conversation_steps"
        assert blocks(recorder)[0].observed == 5
        # Opened alike, answered otherwise: another conversation. So is another end user's.
        assert (await step("Hi there! Where would you like to go?", 0)).status == 200
        assert (await step("Hello! Where to?", 9, user="end-user-42")).status == 200
        # An opening is no step of any conversation: nothing is counted for it.
        assert (await ask(env, system, user("Hi, again"))).status == 200
        assert len(counted) == 4 + 2
        assert len(set(counted)) == 3


async def test_guardians_windows_never_fill_a_bounded_memory_store() -> None:
    """Each new request opens a window (a counter); on a store bounded in keys the oldest
    windows make room, and the quota and spend counters stay exact."""
    from functools import partial

    from gateway_kit import MemoryStorage

    async with guarded(extra={"storage_class": partial(MemoryStorage, max_keys=80)}) as (env, _):
        statuses = [(await ask(env, user(f"question {i}"))).status for i in range(150)]
        assert statuses == [200] * 150
        used, upstream_calls, _ = await state(env)
        assert (used, upstream_calls) == (150, 150)


# -- spend_spike -------------------------------------------------------------------------------


async def test_a_key_spending_far_past_its_pace_is_throttled() -> None:
    rules = {"spend_spike": {"floor_usd": 1, "factor": 10}}
    async with guarded(rules) as (env, recorder):
        # Each answer costs $0.30 (100k prompt tokens at $1/M, 100k output at $2/M).
        usage = {"prompt_tokens": 100_000, "completion_tokens": 100_000}
        env.upstream.json_body = {**COMPLETION, "usage": usage}
        statuses = [(await ask(env, user(f"report {i}"))).status for i in range(6)]
        # $0.30 a call: the 5th call's window already holds $1.20, the 6th's $1.50, past the
        # $1 floor and far past a new key's pace.
        assert statuses[:4] == [200] * 4
        assert 429 in statuses[4:]
        assert blocks(recorder)[0].rule == "spend_spike"


async def test_a_key_spending_at_its_usual_pace_is_not_a_spike() -> None:
    rules = {"spend_spike": {"floor_usd": 1, "factor": 10}}
    async with guarded(rules) as (env, recorder):
        usage = {"prompt_tokens": 100_000, "completion_tokens": 100_000}
        env.upstream.json_body = {**COMPLETION, "usage": usage}
        [key] = await env.gateway.keys.list(env.workspace_id)
        day = int(env.clock() // 86_400)
        # Yesterday it spent $500: $1.74 every 5 minutes.
        await env.gateway.storage.incr(
            f"{env.workspace_id}:guardian:spend:{key.key_id}:d{day - 1}", 500_000_000
        )
        statuses = [(await ask(env, user(f"report {i}"))).status for i in range(6)]
        assert statuses == [200] * 6
        assert blocks(recorder) == []


async def test_a_keys_spend_over_the_last_days_is_read_once_a_minute() -> None:
    """The recent windows are read in every step; the days (the key's usual pace) by each
    process once a minute per key, in the step too."""
    rules = {"spend_spike": {"floor_usd": 1, "factor": 10}}
    async with guarded(rules) as (env, _):
        storage = env.gateway.storage
        reads: list[list[str]] = []
        incr_many = storage.incr_many

        async def spy(increments: Any, **kwargs: Any) -> Any:
            reads.append(
                [k.rsplit(":", 1)[1][0] for k in kwargs.get("reads", ()) if ":spend:" in k]
            )
            return await incr_many(increments, **kwargs)

        storage.incr_many = spy
        steps = []
        for seconds in (0, 30, 31, 0):
            env.clock.advance(seconds)
            reads.clear()
            assert (await ask(env, user(f"report {seconds}"))).status == 200
            steps.append(next(r for r in reads if r))
        assert steps == [["m", "m", "d", "d"], ["m", "m"], ["m", "m", "d", "d"], ["m", "m"]]


# -- episodes, hashes, modes, overrides --------------------------------------------------------


async def test_an_episode_publishes_once_and_the_hash_is_keyed() -> None:
    rules = {"repeat": {"action": "block", "window_s": 60, "throttle_at": 2, "block_at": 2}}
    async with guarded(rules, hash_secret="s" * 32, episode_s=300) as (env, recorder):
        body = [user("same thing")]
        for _ in range(6):
            await ask(env, *body)
        [event] = blocks(recorder)
        canonical = facts_of({"model": "gpt-fake", "messages": body}).canonical
        assert (
            event.request_hash == "sha256:" + hmac.new(b"s" * 32, canonical, "sha256").hexdigest()
        )
        raw = json.dumps({"model": "gpt-fake", "messages": body}).encode()
        assert event.request_hash != "sha256:" + hashlib.sha256(raw).hexdigest()
        assert event.key_id.startswith("kid_")
        assert event.mode == "enforce"
        status = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/guardian", headers=env.auth()
        )
        [recent] = status.json()["recent_blocks"]
        assert (recent["rule"], recent["episode_refusals"]) == ("repeat", 5)
        # After the episode, the next trip is a new one.
        env.clock.advance(301)
        for _ in range(3):
            await ask(env, *body)
        assert len(blocks(recorder)) == 2


async def test_monitor_mode_serves_says_what_it_would_do_and_publishes_marked() -> None:
    async with guarded(mode="monitor") as (env, recorder):
        history = [user("Book a flight")]
        for _ in range(6):
            history += tool_turn("search_flights", to="LIS")
            answer = await ask(env, *history)
            assert answer.status == 200
        assert answer.headers["x-gateway-guardian"] == "would-block=tool_loop"
        [event] = blocks(recorder)
        assert (event.mode, event.action) == ("monitor", "blocked")


async def test_a_rule_whose_own_mode_is_off_is_off_in_the_config_or_for_a_key() -> None:
    looping = [user("Book the cheapest flight to Lisbon")]
    for _ in range(6):
        looping += tool_turn("search_flights", to="LIS")
    rules = {"tool_loop": {"mode": "off"}, "repeat": {"mode": "off", "throttle_at": 2}}
    async with guarded(rules) as (env, recorder):
        assert (await ask(env, *looping)).status == 200
        for _ in range(4):
            answer = await ask(env, user("same question"))
            assert answer.status == 200
            assert "x-gateway-guardian" not in answer.headers
        assert blocks(recorder) == []
    async with guarded() as (env, _):
        made = await env.gateway.keys.create(env.workspace_id)
        path = f"/api/v1/workspaces/{env.workspace_id}/guardian"
        patch = {"key_rules": {made.key.key_id: {"tool_loop": {"mode": "off"}}}}
        changed = await env.recorder.request("PATCH", path, json=patch, headers=env.auth())
        assert changed.status == 200
        assert (await ask(env, *looping, key=made.secret)).status == 200
        assert (await ask(env, *looping)).status == 400  # other keys: the rule as configured


async def test_key_thresholds_are_checked_against_the_plans_and_never_break_a_request() -> None:
    plans = {"strict": {**PLANS["p"], "guardian": {"repeat": {"throttle_at": 30, "block_at": 50}}}}
    async with guarded(extra={"plans": plans}) as (env, _):
        made = await env.gateway.keys.create(env.workspace_id)
        kid = made.key.key_id
        path = f"/api/v1/workspaces/{env.workspace_id}/guardian"
        for rules in (
            {"repeat": {"block_at": 25}},  # below the plan's throttle_at: was 200, then 500s
            {"repeat": {"block_at": 10**19}},  # past a counter: was 200, then 500s
            {"conversation_steps": {"action": "block", "max_steps": 10**19}},
        ):
            patch = {"key_rules": {kid: rules}}
            answer = await env.recorder.request("PATCH", path, json=patch, headers=env.auth())
            assert answer.status == 400, rules
            assert answer.json()["error"]["param"] == f"key_rules.{kid}"
        # Thresholds set under another plan (saved as the API saved them then): they give way,
        # the key's allow-list stands, and its requests are served.
        stale = GuardianSettings({kid: {"repeat": {"block_at": 25}}}, {kid: ("tool_loop",)})
        await env.gateway.guardian_settings.save(env.workspace_id, stale)
        looping = [user("go")]
        for _ in range(6):
            looping += tool_turn("poll", job=1)
        assert (await ask(env, *looping, key=made.secret)).status == 200
        for _ in range(26):
            assert (await ask(env, user("same"), key=made.secret)).status == 200


async def test_an_allow_list_and_key_thresholds_come_from_the_api() -> None:
    async with guarded() as (env, _):
        made = await env.recorder.request(
            "POST",
            f"/api/v1/workspaces/{env.workspace_id}/keys",
            json={"name": "agent"},
            headers=env.auth(),
        )
        agent = made.json()
        path = f"/api/v1/workspaces/{env.workspace_id}/guardian"
        patch = {
            "allow": {agent["key_id"]: ["tool_loop"]},
            "key_rules": {agent["key_id"]: {"repeat": {"throttle_at": 2, "block_at": 2}}},
        }
        # The agent's own key may not exempt itself (it has no guardian:write anyway).
        refused = await env.recorder.request(
            "PATCH", path, json=patch, headers=env.auth(agent["key"])
        )
        assert refused.status == 403
        changed = await env.recorder.request("PATCH", path, json=patch, headers=env.auth())
        assert changed.status == 200
        assert changed.json()["allow"] == {agent["key_id"]: ["tool_loop"]}
        history = [user("go")]
        for _ in range(6):
            history += tool_turn("poll", job=1)
        assert (await ask(env, *history, key=agent["key"])).status == 200  # exempt
        assert (await ask(env, *history)).status == 400  # the admin key is not
        assert (await ask(env, user("x"), key=agent["key"])).status == 200
        assert (await ask(env, user("x"), key=agent["key"])).status == 429  # its own threshold
        for bad in (
            {"allow": {agent["key_id"]: ["everything"]}},
            {"key_rules": {agent["key_id"]: {"repeat": {"block_at": 0}}}},
            {"key_rules": {"kid_nosuch": {}}},
            {"rules": {}},
        ):
            answer = await env.recorder.request("PATCH", path, json=bad, headers=env.auth())
            assert answer.status == 400, bad


async def test_when_storage_fails_guardian_is_open_by_default_or_closed() -> None:
    history = [user("go"), *tool_turn("poll") * 6]
    async with guarded(
        extra={
            "storage_class": BreakableStorage,
            "limits": {"on_error": "open"},
            "budget": {"mode": "off"},
        }
    ) as (env, _):
        env.storage.broken = True
        # Open: the stateless rules still stand, the stateful ones are skipped.
        assert (await ask(env, user("fine"))).status == 200
        assert (await ask(env, *history)).status == 400
    async with guarded(
        on_error="closed",
        extra={
            "storage_class": BreakableStorage,
            "limits": {"on_error": "open"},
            "budget": {"mode": "off"},
        },
    ) as (env, _):
        env.storage.broken = True
        answer = await ask(env, user("fine"))
        assert (answer.status, answer.json()["error"]["code"]) == (503, "guardian_unavailable")


async def test_a_blocked_request_costs_nothing_stateless_or_stateful() -> None:
    rules = {"repeat": {"action": "block", "window_s": 60, "throttle_at": 2, "block_at": 2}}
    async with guarded(rules) as (env, _):
        assert (await ask(env, user("once"))).status == 200
        before = await state(env)
        looping = [user("go"), *tool_turn("poll", job=7) * 6]
        assert (await ask(env, *looping)).status == 400  # stateless: before any storage
        assert (await ask(env, user("once"))).status == 429  # stateful: refused in the step
        assert await state(env) == before  # quota, upstream calls, committed budget
        period = period_at(env.clock(), "month")
        totals = await env.gateway.ledger.totals(env.workspace_id, period)
        assert totals.reserved == 0
