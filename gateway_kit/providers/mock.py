"""``MockProvider``: an offline, deterministic stand-in for a model service.

The same request always gets the same answer: a reply quoting the last user message, or a call
of the first tool (or the one ``tool_choice`` names) with arguments built from its JSON schema,
as one body or as an OpenAI-style stream. Usage is always reported, in streams too, so cost
accounting works offline. It serves the zero-config demo and tests that need no network.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncGenerator
from typing import Any

import anyio

from gateway_kit.providers.base import ChatCall, ChatResponse
from gateway_kit.sse import DONE, SSEEvent

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8")]
_CREATED = 1_700_000_000  # fixed, so answers are reproducible


def count_tokens(text: str) -> int:
    """A rough, deterministic token count (about four characters a token)."""
    return max(1, (len(text) + 3) // 4) if text else 0


class MockProvider:
    """Answers chat calls in-process; ``delay`` seconds between streamed chunks."""

    def __init__(self, *, name: str = "mock", delay: float = 0.0) -> None:
        self.name = name
        self._delay = delay

    async def aclose(self) -> None:
        return None

    async def chat(self, call: ChatCall) -> ChatResponse:
        payload = call.payload
        model = str(payload.get("model", "mock"))
        completion_id = (
            "chatcmpl-mock"
            + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]
        )
        tool_call = _tool_call(payload, completion_id)
        content = None if tool_call else _reply(payload)
        prompt_tokens = sum(4 + count_tokens(_message_text(m)) for m in payload.get("messages", []))
        completion_text = content if content is not None else json.dumps(tool_call)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": count_tokens(completion_text),
            "total_tokens": prompt_tokens + count_tokens(completion_text),
        }
        if call.stream:
            events = self._stream(completion_id, model, content, tool_call, usage)
            return ChatResponse(200, list(_SSE), events=events, close=events.aclose)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_call:
            message["tool_calls"] = [tool_call]
        body = {
            "id": completion_id,
            "object": "chat.completion",
            "created": _CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if tool_call else "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }
        return ChatResponse(200, list(_JSON), body=json.dumps(body).encode())

    async def _stream(
        self,
        completion_id: str,
        model: str,
        content: str | None,
        tool_call: dict[str, Any] | None,
        usage: dict[str, int],
    ) -> AsyncGenerator[SSEEvent, None]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> SSEEvent:
            return SSEEvent.of_json(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": _CREATED,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
            )

        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if tool_call is not None:
            function = tool_call["function"]
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": tool_call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
            deltas += [
                {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                for piece in _pieces(function["arguments"], 16)
            ]
        else:
            deltas += [{"content": piece} for piece in _words(content or "")]
        for delta in deltas:
            yield chunk(delta)
            if self._delay:
                await anyio.sleep(self._delay)
        yield chunk({}, "tool_calls" if tool_call else "stop")
        yield SSEEvent.of_json(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": _CREATED,
                "model": model,
                "choices": [],
                "usage": usage,
            }
        )
        yield SSEEvent(DONE)


def _reply(payload: dict[str, Any]) -> str:
    messages = payload.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return f"Mock answer using the tool result: {_message_text(messages[-1])[:200]}"
    text = " ".join(_last_user_text(payload).split())
    quoted = text if len(text) <= 200 else text[:197] + "..."
    return f"This is a mock reply from gateway-kit to: {quoted}" if quoted else "Hello from mock."


def _tool_call(payload: dict[str, Any], completion_id: str) -> dict[str, Any] | None:
    tools = [t for t in payload.get("tools") or [] if isinstance(t, dict) and "function" in t]
    choice = payload.get("tool_choice")
    messages = payload.get("messages", [])
    if not tools or choice == "none" or (messages and messages[-1].get("role") == "tool"):
        return None
    tool = tools[0]
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        tool = next((t for t in tools if t["function"].get("name") == wanted), tool)
    function = tool["function"]
    arguments = _sample(function.get("parameters") or {"type": "object"})
    return {
        "id": "call_" + completion_id[-20:],
        "type": "function",
        "function": {"name": function["name"], "arguments": json.dumps(arguments)},
    }


def _sample(schema: dict[str, Any]) -> Any:
    """A deterministic value matching a (simple) JSON schema."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)
        return {name: _sample(properties.get(name) or {}) for name in required}
    samples: dict[str, Any] = {
        "string": "mock",
        "integer": 1,
        "number": 1.0,
        "boolean": True,
        "array": [],
        "null": None,
    }
    return samples.get(str(kind), "mock")


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [word if i == 0 else " " + word for i, word in enumerate(words)]


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _last_user_text(payload: dict[str, Any]) -> str:
    """The text of the last user message (parts joined), or ``""``."""
    for message in reversed(payload.get("messages", [])):
        if message.get("role") == "user":
            return _message_text(message)
    return ""


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""
