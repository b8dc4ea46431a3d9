"""Guardian's facts, rules and policy as plain objects: no ASGI, no storage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway_kit.config import GuardianConfig, PlanConfig
from gateway_kit.config.guardian import (
    ContextGrowthRule,
    ContextSizeRule,
    ConversationStepsRule,
    GuardianRules,
    RepeatRule,
    SpendSpikeRule,
    ToolLoopRule,
    merge_rules,
)
from gateway_kit.layers.guardian import GuardianPolicy
from gateway_kit.layers.guardian import rules as checks
from gateway_kit.layers.guardian.facts import facts_of, normalize_text, reads_as_error


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{abs(hash((name, json.dumps(arguments)))) % 10**12:012d}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result(text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "call_x", "content": text}


def request(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages), **fields}


# -- facts -------------------------------------------------------------------------------------


def test_what_changes_per_call_is_taken_out_of_the_canonical_request() -> None:
    first = request(
        {
            "role": "system",
            "content": "Now: 2026-11-25T10:00:03Z, run 4f1c2a3b-1111-4222-8333-9a8b7c6d5e4f",
        },
        user("Summarise   today's   orders"),
        stream=True,
        seed=4,
        metadata={"trace": "abc"},
    )
    again = request(
        {
            "role": "system",
            "content": "Now: 2026-11-25T10:01:09Z, run 0aa1c2a3-2222-4333-8444-1b2c3d4e5f60",
        },
        user("Summarise today's orders"),
        stream=False,
        seed=91,
    )
    assert facts_of(first).canonical == facts_of(again).canonical
    # What is asked, and who asks, count.
    other = request(first["messages"][0], user("Summarise yesterday's orders"))
    assert facts_of(other).canonical != facts_of(again).canonical
    alice, bob = request(user("hi"), user="alice"), request(user("hi"), user="bob")
    assert facts_of(alice).canonical != facts_of(bob).canonical
    assert (
        facts_of(request(user("hi"), temperature=0)).canonical
        != facts_of(request(user("hi"), temperature=1)).canonical
    )


def test_tool_call_ids_and_argument_formatting_do_not_count() -> None:
    a = call("search", q="gpu prices", page=1)
    b = call("search", page=1, q="gpu prices")
    b["tool_calls"][0]["id"] = "call_ZZZ999999999"
    b["tool_calls"][0]["function"]["arguments"] = '{ "page": 1,  "q": "gpu prices" }'
    fa, fb = facts_of(request(a)).messages[0], facts_of(request(b)).messages[0]
    assert fa.tool_calls is not None
    assert fa.tool_calls == fb.tool_calls
    assert (
        fa.tool_calls
        != facts_of(request(call("search", q="gpu prices", page=2))).messages[0].tool_calls
    )


def test_normalize_text() -> None:
    assert normalize_text("at  1764064800 id 0123456789abcdef0123\nok") == "at ~ id ~ ok"
    assert normalize_text("Now: 2026-11-25T09:01:07Z.") == "Now: ~."
    assert normalize_text("on 2026-11-25, at 09:01 (run_8f3kq2x9)") == "on ~, at ~ (~)"
    assert normalize_text("id=3f2b8c1e-9d4a-4e5f-8a7b-1c2d3e4f5a6b") == "id=~"
    plain = "call 911 about 42 cats, 2x faster, order 41764064800 at 123:45"
    assert normalize_text(plain) == plain


def test_a_tool_result_reads_as_an_error_by_what_its_start_says() -> None:
    def error_of(text: str) -> bytes | None:
        message = {"role": "tool", "tool_call_id": "call_abcdef123", "content": text}
        return facts_of(request(message)).tool_results[0]

    for failed in ("PermissionDenied: /etc/shadow", "FAILED tests/test_x.py", "2 Errors found"):
        assert error_of(failed) is not None, failed
    assert error_of("Found 3 files in 0.2 s") is None
    # Only its start is read: an error far into a long result is the result's business.
    assert error_of("x" * 500 + " error") is None


def test_a_stamped_prompt_is_the_same_request_but_a_new_tool_result_is_not() -> None:
    def stamped(now: str) -> dict[str, Any]:
        return request(user(f"Now: {now}. Summarize the queue."))

    assert facts_of(stamped("09:01")).canonical == facts_of(stamped("09:02")).canonical

    def result(text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": "call_abcdef123", "content": text}

    assert facts_of(request(result("3 open"))).canonical != (
        facts_of(request(result("4 open"))).canonical
    )
    # The same error at another time is the same error.
    one = facts_of(request(result("Error: timeout at 2026-11-25T09:01:07Z")))
    two = facts_of(request(result("Error: timeout at 2026-11-25T09:04:55Z")))
    assert one.tool_results == two.tool_results != (None,)


def test_the_conversation_is_its_first_system_user_and_assistant_messages() -> None:
    system = {"role": "system", "content": "You are a travel agent."}

    def conversation(city: str, *more: dict[str, Any]) -> bytes:
        return facts_of(request(system, user(f"Plan a week in {city}"), *more)).conversation

    def answer(text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    later = conversation("Lisbon", answer("Day 1: Alfama"), user("cheaper"))
    assert conversation("Lisbon", answer("Day 1: Alfama")) == later
    assert conversation("Porto", answer("Day 1: Alfama")) != later
    # Opened alike, answered otherwise: another conversation.
    assert conversation("Lisbon", answer("Day 1: Belem"), user("cheaper")) != later
    # An opening (no answer yet) is no conversation's step.
    assert conversation("Lisbon") == b""


# -- the stateless rules -----------------------------------------------------------------------


def test_the_same_tool_call_turn_after_turn_is_a_loop() -> None:
    rule = ToolLoopRule(identical_turns=5)
    history: list[dict[str, Any]] = [user("Find the cheapest flight")]
    for turn in range(1, 7):
        history += [call("search_flights", to="LIS", when="2026-12-01"), result("[]")]
        trip = checks.tool_loop(rule, facts_of(request(*history)))
        if turn < 5:
            assert trip is None, turn
        else:
            assert trip is not None
            assert (trip.action, trip.threshold, trip.observed) == ("block", 5, turn)
            assert "same tools with the same arguments" in trip.message


def test_two_tools_alternating_and_one_error_repeated_are_loops() -> None:
    rule = ToolLoopRule(ping_pong_cycles=3, repeated_errors=3)
    history: list[dict[str, Any]] = [user("Fix the build")]
    for _ in range(3):
        history += [
            call("read_file", path="a.py"),
            result("x = 1"),
            call("run_tests"),
            result("ok"),
        ]
    trip = checks.tool_loop(rule, facts_of(request(*history)))
    assert trip is not None
    assert trip.observed == 3
    assert "alternate" in trip.message
    errors: list[dict[str, Any]] = [user("Deploy")]
    for attempt in range(3):
        errors += [call("deploy", attempt=attempt), result("Error: permission denied (code 13)")]
    trip = checks.tool_loop(rule, facts_of(request(*errors)))
    assert trip is not None
    assert "same error" in trip.message


def test_one_turns_parallel_calls_failing_alike_are_one_error() -> None:
    rule = ToolLoopRule(repeated_errors=4)
    parallel = call("fetch", url="a")
    parallel["tool_calls"] = [
        {
            **parallel["tool_calls"][0],
            "id": f"call_{n}",
            "function": {
                "name": "fetch",
                "arguments": json.dumps({"url": f"https://example.com/{n}"}),
            },
        }
        for n in range(4)
    ]
    failed = [result("Error: 404 Not Found") for _ in range(4)]
    # The model has not seen a single error yet: four results of one turn are one outcome.
    assert checks.tool_loop(rule, facts_of(request(user("Read these"), parallel, *failed))) is None
    # Four turns in a row meeting the same error is a loop, one call or four each.
    history: list[dict[str, Any]] = [user("Read these")]
    for _ in range(4):
        history += [parallel, *failed]
    trip = checks.tool_loop(rule, facts_of(request(*history)))
    assert trip is not None
    assert "same error" in trip.message
    # A turn whose results differ (one page found) breaks the run.
    mixed = [*failed[:3], result("<html>the page</html>")]
    history = [user("Read these"), *([parallel, *failed] * 3), parallel, *mixed]
    assert checks.tool_loop(rule, facts_of(request(*history))) is None


@pytest.mark.parametrize(
    ("result", "failure"),
    [
        ("Error: 404 Not Found", True),
        ("ValueError: bad input", True),
        ("Traceback (most recent call last):\n  File 'x.py'", True),
        ("Tool 'fetch' failed: timeout", True),
        ("404 Not Found", True),
        ("Permission denied", True),
        ('{"detail": "Not Found"}', True),
        ('{"error": {"message": "quota"}}', True),
        ('{"success": false, "data": null}', True),
        ('{"status": "failed"}', True),
        # Successes that name failures: once "the same error" four times over.
        ('{"success": true, "errors": []}', False),
        ("Lint passed: no errors found.", False),
        ('{"status": "saved", "failed_rows": 0}', False),
        ("Saved. 0 errors, 2 warnings.", False),
        ('{"error": null, "data": [1]}', False),
        ("saved", False),
        ("is_admin: false", False),
    ],
)
def test_a_tool_result_reads_as_a_failure_when_it_reports_one(result: str, failure: bool) -> None:
    assert reads_as_error(result) is failure


def test_arguments_that_differ_in_an_id_a_date_or_a_time_are_progress() -> None:
    rule = ToolLoopRule()
    for name, values in (
        ("get_record", [f"9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6{n}" for n in range(6)]),
        ("git_show", [f"{n}f3a9c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3{n}" for n in range(6)]),
        ("get_weather", [f"2026-12-0{n + 1}" for n in range(6)]),
        ("check_slot", [f"{8 + n:02d}:00" for n in range(6)]),
    ):
        history: list[dict[str, Any]] = [user("Go through them")]
        for value in values:
            history += [call(name, key=value), result("done")]
        # Stamps were taken out of the arguments: five calls were "the same".
        assert checks.tool_loop(rule, facts_of(request(*history))) is None, name
    same: list[dict[str, Any]] = [user("Go")]
    for _ in range(5):
        same += [call("get_record", key="9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"), result("done")]
    assert checks.tool_loop(rule, facts_of(request(*same))) is not None


def test_a_loop_on_the_legacy_functions_api_is_a_loop() -> None:
    rule = ToolLoopRule()
    history: list[dict[str, Any]] = [user("Find flights to Lisbon")]
    for _ in range(5):
        history += [
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "search_flights", "arguments": '{"to": "LIS"}'},
            },
            {"role": "function", "name": "search_flights", "content": "Error: no flights"},
        ]
    # The rule read only `tool_calls` and `role: "tool"`: such a loop ran to 150 steps.
    trip = checks.tool_loop(rule, facts_of(request(*history)))
    assert trip is not None
    assert trip.observed == 5


def test_an_agent_making_progress_is_no_loop() -> None:
    rule = ToolLoopRule()
    history: list[dict[str, Any]] = [user("Research GPU prices")]
    for page in range(12):
        history += [call("search", q="gpu prices", page=page), result(f"results of page {page}")]
    assert checks.tool_loop(rule, facts_of(request(*history))) is None
    # Retrying a failed call with other arguments, the error changing, is no loop either.
    fixing: list[dict[str, Any]] = [user("Fix the tests")]
    for attempt in range(6):
        fixing += [call("edit", line=attempt), result(f"Error: test_{attempt} failed")]
    assert checks.tool_loop(rule, facts_of(request(*fixing))) is None


def test_a_context_growing_without_new_input_trips_and_a_long_chat_does_not() -> None:
    rule = ContextGrowthRule(factor=4, min_tokens=2000, min_turns=5)
    growing: list[dict[str, Any]] = [user("Summarise the repository")]
    for step in range(8):
        growing += [call("read", file=step), result("code " * 300)]
    trip = checks.context_growth(rule, facts_of(request(*growing)))
    assert trip is not None
    assert trip.observed >= trip.threshold >= 2000
    # The same amount of text, each step asked for by the user: no growth past the input.
    chat: list[dict[str, Any]] = []
    for _ in range(8):
        chat += [user("tell me more " * 10), {"role": "assistant", "content": "words " * 300}]
    assert checks.context_growth(rule, facts_of(request(*chat))) is None


def test_context_size_against_the_window_exact_or_estimated() -> None:
    rule = ContextSizeRule(window_share=0.5)
    assert checks.context_size(rule, 500, True, 1000) is None
    trip = checks.context_size(rule, 501, True, 1000)
    assert trip is not None
    assert (trip.status, trip.threshold, trip.observed) == (413, 500, 501)
    assert "501 tokens" in trip.message
    assert "estimated" not in trip.message
    trip = checks.context_size(ContextSizeRule(max_tokens=100), 101, False, None)
    assert trip is not None
    assert "about 101 tokens (estimated)" in trip.message


# -- the stateful rules ------------------------------------------------------------------------


def test_repeat_throttles_then_blocks() -> None:
    rule = RepeatRule(window_s=600, throttle_at=10, block_at=20)
    assert checks.repeat(rule, 9) is None
    throttle = checks.repeat(rule, 10)
    assert throttle is not None
    assert throttle.action == "throttle"
    assert throttle.wait_s == pytest.approx(60)  # 600 s / 10
    assert checks.repeat(rule, 12).wait_s == pytest.approx(180)  # type: ignore[union-attr]
    block = checks.repeat(rule, 19, refused=True)
    assert block is not None
    assert (block.action, block.observed, block.wait_s) == ("block", 20, 600)
    warn = checks.repeat(RepeatRule(action="warn"), 25)
    assert warn is not None
    assert warn.action == "warn"


def test_conversation_steps() -> None:
    rule = ConversationStepsRule(max_steps=5, window_s=100)
    assert checks.conversation_steps(rule, 5) is None
    trip = checks.conversation_steps(rule, 6)
    assert trip is not None
    assert trip.action == "throttle"
    assert trip.wait_s == pytest.approx(20)
    blocked = checks.conversation_steps(
        ConversationStepsRule(action="block", max_steps=5), 5, refused=True
    )
    assert blocked is not None
    assert blocked.action == "block"


def test_spend_spike_against_the_keys_own_pace_with_a_floor() -> None:
    rule = SpendSpikeRule(factor=10, floor_usd=5)  # type: ignore[arg-type]
    day = 86_400.0
    # $100 a day usually ($0.35 per 5 min): $4 in 5 minutes is under the floor.
    assert checks.spend_spike(rule, 4_000_000, 300, 100_000_000, day) is None
    # $6 in 5 minutes is 17 times the usual pace: a spike.
    trip = checks.spend_spike(rule, 6_000_000, 300, 100_000_000, day)
    assert trip is not None
    assert trip.action == "throttle"
    assert 0 < trip.wait_s < 300
    # A key that spends $2,000 a day spends $6 per 5 minutes as a matter of course.
    assert checks.spend_spike(rule, 6_000_000, 300, 2_000_000_000, day) is None


def test_a_spend_spikes_wait_follows_its_fixed_windows() -> None:
    rule = SpendSpikeRule(factor=10, floor_usd=5)  # type: ignore[arg-type]
    day, window = 86_400.0, 300.0

    def wait(current: int, recent: int, into_s: float) -> float:
        trip = checks.spend_spike(
            rule, recent, window, 100_000, day, current=current, into_s=into_s
        )
        assert trip is not None
        return trip.wait_s

    # $5.27 all spent in the current window, 20 s into it: it stays for the 280 s left, then
    # fades over the next window until under the $5 limit (5 % of 300 s): 295.4 s.
    assert wait(5_270_000, 5_270_000, 20) == pytest.approx(280 + 300 * (1 - 5 / 5.27))
    # $4 now and $3 of the previous window still counted: that part fades over the 200 s
    # left until the total is under $5: a third of it is enough.
    assert wait(4_000_000, 7_000_000, 100) == pytest.approx(200 * (1 - 1 / 3))


# -- the policy --------------------------------------------------------------------------------


def trip(rule: str, action: str, wait: float = 0.0, status: int = 429) -> checks.Trip:
    return checks.Trip(rule, action, 1, 2, "what happened", status=status, wait_s=wait)  # type: ignore[arg-type]


def test_the_verdict_blocks_throttles_within_the_bound_and_warns() -> None:
    policy = GuardianPolicy(GuardianConfig(throttle_max_wait_s=5))
    rules = GuardianRules()
    assert policy.verdict(rules, []).action == "pass"
    warned = policy.verdict(rules, [trip("repeat", "warn")])
    assert (warned.action, warned.refusal, warned.headers) == (
        "warn",
        None,
        ((b"x-gateway-guardian", b"warn=repeat"),),
    )
    held = policy.verdict(rules, [trip("repeat", "throttle", 3)])
    assert (held.action, held.delay_s, held.refusal) == ("throttle", 3, None)
    refused = policy.verdict(rules, [trip("repeat", "throttle", 30)])
    assert refused.refusal is not None
    assert refused.refusal.headers == ((b"retry-after", b"30"),)
    assert refused.refusal.code == "guardian_block"
    blocked = policy.verdict(
        rules, [trip("spend_spike", "throttle", 3), trip("tool_loop", "block")]
    )
    assert blocked.refusal is not None
    assert "'tool_loop' blocked" in blocked.refusal.message
    big = policy.verdict(rules, [trip("context_size", "block", status=413)])
    assert big.refusal is not None
    assert big.refusal.status == 413
    # The prompt itself is too big: sent again it is refused again, so no Retry-After.
    assert big.refusal.headers == ()
    assert "retry in" not in big.refusal.message


def test_monitor_mode_says_what_it_would_do_and_never_acts() -> None:
    policy = GuardianPolicy(GuardianConfig(mode="monitor"))  # type: ignore[arg-type]
    verdict = policy.verdict(GuardianRules(), [trip("tool_loop", "block")])
    assert (verdict.action, verdict.refusal, verdict.delay_s) == ("would-block", None, 0.0)
    assert verdict.headers == ((b"x-gateway-guardian", b"would-block=tool_loop"),)
    assert [o.monitor for o in verdict.outcomes] == [True]
    # One rule watched while the others enforce.
    policy = GuardianPolicy(GuardianConfig())
    rules = merge_rules(GuardianRules(), {"tool_loop": {"mode": "monitor"}})
    verdict = policy.verdict(rules, [trip("tool_loop", "block"), trip("repeat", "warn")])
    assert verdict.refusal is None
    assert verdict.action == "warn"


def test_plan_and_key_overrides_apply_in_that_order() -> None:
    policy = GuardianPolicy(GuardianConfig())
    plan = PlanConfig(included_requests=1, burst_limit_rpm=1, guardian={"repeat": {"block_at": 40}})
    assert policy.rules_for("free", None).repeat.block_at == 20
    assert policy.rules_for("pro", plan).repeat.block_at == 40
    key = {"repeat": {"block_at": 60, "throttle_at": 30}}
    merged = policy.rules_for("pro", plan, key)
    assert (merged.repeat.block_at, merged.repeat.throttle_at) == (60, 30)
    assert policy.rules_for("pro", plan, key) is merged  # memoised
    with pytest.raises(ValueError, match="repeat: block_at must be at least throttle_at"):
        merge_rules(GuardianRules(), {"repeat": {"block_at": 5}})
    with pytest.raises(ValueError, match="nope: no such rule"):
        merge_rules(GuardianRules(), {"nope": {}})
