"""Guardian's memories of messages: a request worked out from them has exactly the facts of the
same request worked out from nothing, whatever its history did since (grew, was edited, was cut
short, changed parameters), and they stay within their bounds."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from gateway_kit.layers.guardian import facts
from gateway_kit.layers.guardian.facts import RequestFacts, facts_of
from gateway_kit.layers.guardian.memo import MessageMemo, Prefixes


@pytest.fixture(autouse=True)
def fresh_memories(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "_MEMO", MessageMemo(facts._MEMO_SIZE))
    monkeypatch.setattr(facts, "_PREFIXES", Prefixes(conversations=256, weight=4_000_000))


def from_nothing(payload: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> RequestFacts:
    """``payload``'s facts with both memories empty, then put back as they were."""
    with monkeypatch.context() as patched:
        patched.setattr(facts, "_MEMO", MessageMemo(facts._MEMO_SIZE))
        patched.setattr(facts, "_PREFIXES", Prefixes(conversations=256, weight=4_000_000))
        return facts_of(copy.deepcopy(payload))


def agent_turns(task: str) -> Iterator[list[dict[str, Any]]]:
    """An agent's growing history: each turn a tool call, its result, a note from the user."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools."},
        {"role": "user", "content": task},
    ]
    for turn in range(30):
        history += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn:08d}x",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"src/m{turn % 4}.py"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"call_{turn:08d}x",
                "content": "Error: not found" if turn % 7 == 6 else f"def f{turn}(): ...",
            },
        ]
        if turn % 5 == 4:
            history.append({"role": "user", "content": f"Keep going ({turn})."})
        yield copy.deepcopy(history)  # parsed afresh, as every request is


def request(messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": messages, "tools": [{"type": "function"}], **fields}


def test_a_growing_conversation_has_the_facts_it_would_have_from_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefixes, resumed = facts._PREFIXES, []

    def find(key: int, messages: list[Any]) -> tuple[int, Any]:
        found = Prefixes.find(prefixes, key, messages)
        resumed.append(found[0])
        return found

    monkeypatch.setattr(prefixes, "find", find)
    lengths = []
    for messages in agent_turns("Fix the failing test."):
        lengths.append(len(messages))
        payload = request(messages)
        assert facts_of(payload) == from_nothing(payload, monkeypatch)
    # Each request long enough to be filed carried on where the one before it ended.
    long = [n for n in lengths if n >= facts._PREFIX_FROM]
    assert len(long) > 20
    assert resumed == [0, *long[:-1]]


def test_a_changed_history_is_worked_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    turns = list(agent_turns("Fix the failing test."))
    facts_of(request(turns[20]))
    edited = copy.deepcopy(turns[21])
    edited[5]["content"] = "def something_else(): ..."
    cut = turns[21][:-6]  # shorter than the last request: no prefix of it
    for messages in (edited, cut, turns[21]):
        payload = request(messages)
        assert facts_of(payload) == from_nothing(payload, monkeypatch)
    assert facts_of(request(edited)).canonical != facts_of(request(turns[21])).canonical


def test_changed_parameters_are_encoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    turns = list(agent_turns("Fix the failing test."))
    facts_of(request(turns[20]))
    warmer = request(turns[21], temperature=0.9)
    assert facts_of(warmer) == from_nothing(warmer, monkeypatch)
    assert facts_of(warmer).canonical != facts_of(request(turns[21])).canonical


def test_two_conversations_filed_alike_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same opening, then different histories: they share a slot and only lose speed.
    one, two = list(agent_turns("Fix it.")), list(agent_turns("Fix it."))
    for messages in two:
        messages[3]["content"] = "other: " + str(messages[3]["content"])
    for a, b in zip(one, two, strict=True):
        for payload in (request(a), request(b)):
            assert facts_of(payload) == from_nothing(payload, monkeypatch)


def test_prefixes_are_bounded_by_count_and_weight() -> None:
    kept: Prefixes[str] = Prefixes(conversations=3, weight=100)
    for key in range(5):
        kept.remember(key, [key], f"state {key}", 10)
    assert len(kept) == 3
    assert kept.find(0, [0]) == (0, None)  # the least recently used went first
    assert kept.find(4, [4, 5]) == (1, "state 4")
    kept.remember(9, [9], "heavy", 95)  # over the weight with the others: they go
    assert len(kept) == 1
    kept.remember(10, [10], "too heavy", 101)  # heavier than everything: never kept
    assert kept.find(10, [10]) == (0, None)
    assert kept.find(9, [9]) == (1, "heavy")


def test_the_message_memo_drops_its_oldest_half_when_full() -> None:
    memo: MessageMemo[int, str] = MessageMemo(4)
    for key in range(5):
        memo.remember(key, str(key))
    assert sorted(memo) == [2, 3, 4]
