from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

import pytest

from gateway_kit import GatewayConfig
from gateway_kit.bench._conversation import Rotation
from gateway_kit.bench.guardian import chat_rotation, conversation_rotation, probe_request
from gateway_kit.bench.proxy import add_server_options, gateway_config
from gateway_kit.chat.request import validate_chat_request
from gateway_kit.config.guardian import RULE_NAMES, GuardianRules
from gateway_kit.layers.guardian import rules as checks
from gateway_kit.layers.guardian.facts import facts_of

#: More requests than any run of the benchmark sends to one gateway.
LOAD = 1_000_000


def _parsed(request: bytes) -> tuple[str, dict[str, Any]]:
    """The request line and the body of a prebuilt request, its length checked."""
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = next(int(line.split(":")[1]) for line in lines if line.startswith("Content-Length"))
    assert length == len(body)
    payload: dict[str, Any] = json.loads(body)
    return lines[0], payload


def _stateless_trips(rules: GuardianRules, payload: dict[str, Any]) -> list[checks.Trip]:
    facts = facts_of(payload)
    found = [
        checks.tool_loop(rules.tool_loop, facts),
        checks.context_growth(rules.context_growth, facts),
        checks.context_size(rules.context_size, facts.tokens, False, None),
    ]
    return [trip for trip in found if trip is not None]


def _config(*flags: str) -> GatewayConfig:
    """The ``proxy --serve gateway`` role's configuration, Auth on, with ``flags``."""
    parser = argparse.ArgumentParser()
    add_server_options(parser)
    base = ["--serve", "gateway", "--upstream", "http://127.0.0.1:9", "--key-file", "k"]
    return gateway_config(parser.parse_args([*base, *flags]))


def test_the_2_kb_prompt_is_a_chat_request_with_a_new_customer_message_each_time() -> None:
    rotation = chat_rotation([("Authorization", "Bearer sk-test")])
    payloads = []
    for index in (0, 1, 7, 999, 123_456):
        line, payload = _parsed(rotation[index])
        assert line == "POST /v1/chat/completions HTTP/1.1"
        assert 1_900 <= len(rotation.body(index)) <= 2_300
        assert validate_chat_request(payload) is None
        assert [m["role"] for m in payload["messages"]] == ["system", "user"]
        payloads.append(payload)
    assert len({json.dumps(p["messages"][0]) for p in payloads}) == 1
    assert len({p["messages"][1]["content"] for p in payloads}) == len(payloads)


def test_the_conversation_is_200_messages_of_about_200_kb_an_agent_sends() -> None:
    rotation = conversation_rotation()
    first, second = rotation.payload(0), rotation.payload(1)
    for index in (0, 1, 2, 3, 4, 5, 500):
        _, payload = _parsed(rotation[index])
        assert 180_000 <= len(rotation.body(index)) <= 220_000
        assert validate_chat_request(payload) is None
        assert len(payload["messages"]) == 200
        assert payload["tools"]
    messages = first["messages"]
    # The history is re-sent as it was; the last turn is new: a tool call and its result.
    assert messages[:198] == second["messages"][:198]
    assert messages[198:] != second["messages"][198:]
    assert [m["role"] for m in messages[198:]] == ["assistant", "tool"]
    roles = {m["role"] for m in messages}
    assert roles == {"system", "user", "assistant", "tool"}
    # Every tool result answers the assistant's call just before it, as the API requires.
    for before, message in itertools.pairwise(messages):
        if message["role"] == "tool":
            assert before["tool_calls"][0]["id"] == message["tool_call_id"]
    assert sum(m["role"] == "user" for m in messages) >= 10


def test_the_probe_sessions_share_no_message_with_each_other_or_the_rotation() -> None:
    seen = {json.dumps(m) for m in conversation_rotation().payload(0)["messages"]}
    for variant in (1, 2, 3):
        _, payload = _parsed(probe_request(variant))
        assert validate_chat_request(payload) is None
        assert 180_000 <= len(json.dumps(payload)) <= 220_000
        messages = {json.dumps(m) for m in payload["messages"]}
        assert len(messages) == 200
        assert not messages & seen
        seen |= messages


def test_guardian_is_off_unless_asked_for() -> None:
    assert _config().guardian.mode == "off"
    assert _config("--budget").guardian.mode == "off"


def test_no_auth_keeps_auth_and_limits_off_though_a_key_is_made() -> None:
    assert (_config().auth.mode, _config().limits.mode) == ("enforce", "enforce")
    config = _config("--cache", "--no-auth")
    assert (config.auth.mode, config.limits.mode, config.cache.mode) == ("off", "off", "enforce")


def test_the_quota_is_far_above_the_load_unless_asked_for() -> None:
    assert _config().plans["bench"].included_requests == 10**12
    assert _config("--included-requests", "1").plans["bench"].included_requests == 1


def test_the_guardian_flag_turns_every_rule_on_far_above_the_load() -> None:
    config = _config("--guardian")
    assert (config.auth.mode, config.limits.mode, config.guardian.mode) == ("enforce",) * 3
    rules = config.guardian.rules
    assert all(getattr(rules, name).action != "off" for name in RULE_NAMES)
    assert all(getattr(rules, name).mode is None for name in RULE_NAMES)  # enforced
    assert rules.repeat.throttle_at > LOAD
    assert rules.conversation_steps.max_steps > LOAD
    assert rules.spend_spike.floor_usd > LOAD
    assert checks.repeat(rules.repeat, LOAD) is None
    assert checks.conversation_steps(rules.conversation_steps, LOAD) is None


@pytest.mark.parametrize("which", ["chat", "conversation", "probe"])
def test_no_rule_trips_on_the_benchmarks_requests(which: str) -> None:
    rules = _config("--guardian").guardian.rules
    if which == "probe":
        payloads = [_parsed(probe_request(variant))[1] for variant in (1, 2)]
    else:
        rotation: Rotation = chat_rotation() if which == "chat" else conversation_rotation()
        payloads = [rotation.payload(index) for index in range(12)]
    for payload in payloads:
        assert _stateless_trips(rules, payload) == []
