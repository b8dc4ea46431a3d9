"""MockProvider: deterministic answers, streams, tool calls and usage, offline."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway_kit import ChatCall, MockProvider

pytestmark = pytest.mark.anyio

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "exact": {"type": ["boolean", "null"]},
                "tags": {"type": "array"},
                "optional": {"type": "number"},
            },
            "required": ["query", "limit", "exact", "tags"],
        },
    },
}


async def call(payload: dict[str, Any], stream: bool = False) -> Any:
    response = await MockProvider().chat(ChatCall(payload, None, stream=stream))
    if not stream:
        return json.loads(response.body)
    assert response.events is not None
    events = [e.data async for e in response.events]
    await response.close()
    return events


def messages(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


async def test_answers_are_deterministic_and_carry_usage() -> None:
    payload = {"model": "mock-large", "messages": messages("What is ASGI?")}
    first, second = await call(payload), await call(payload)
    assert first == second
    assert first["choices"][0]["message"]["content"] == (
        "This is a mock reply from gateway-kit to: What is ASGI?"
    )
    usage = first["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert first["model"] == "mock-large"


async def test_different_requests_get_different_ids() -> None:
    a = await call({"model": "m", "messages": messages("a")})
    b = await call({"model": "m", "messages": messages("b")})
    assert a["id"] != b["id"]


async def test_the_stream_spells_the_same_answer_and_ends_with_usage_and_done() -> None:
    payload = {"model": "m", "messages": messages("Stream me")}
    whole = await call(payload)
    events = await call(payload, stream=True)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"] == whole["usage"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


async def test_tools_get_a_call_with_schema_shaped_arguments() -> None:
    result = await call({"model": "m", "messages": messages("find it"), "tools": [TOOL]})
    choice = result["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (tool_call,) = choice["message"]["tool_calls"]
    assert tool_call["function"]["name"] == "lookup"
    assert json.loads(tool_call["function"]["arguments"]) == {
        "query": "mock",
        "limit": 1,
        "exact": True,
        "tags": [],
    }


async def test_streamed_tool_call_arguments_reassemble() -> None:
    events = await call({"model": "m", "messages": messages("x"), "tools": [TOOL]}, stream=True)
    deltas = [json.loads(e) for e in events[:-1]]
    pieces = [
        d["choices"][0]["delta"]["tool_calls"][0]["function"]
        for d in deltas
        if d["choices"] and "tool_calls" in d["choices"][0]["delta"]
    ]
    assert pieces[0]["name"] == "lookup"
    assert json.loads("".join(p["arguments"] for p in pieces))["query"] == "mock"


async def test_tool_choice_none_and_tool_results_get_text() -> None:
    no_tools = await call(
        {"model": "m", "messages": messages("x"), "tools": [TOOL], "tool_choice": "none"}
    )
    assert no_tools["choices"][0]["message"]["content"]
    after_tool = await call(
        {
            "model": "m",
            "tools": [TOOL],
            "messages": [
                *messages("x"),
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
        }
    )
    assert after_tool["choices"][0]["message"]["content"] == (
        "Mock answer using the tool result: 42"
    )


async def test_tool_choice_picks_the_named_function() -> None:
    other = {"type": "function", "function": {"name": "other"}}
    result = await call(
        {
            "model": "m",
            "messages": messages("x"),
            "tools": [TOOL, other],
            "tool_choice": {"type": "function", "function": {"name": "other"}},
        }
    )
    assert result["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "other"
