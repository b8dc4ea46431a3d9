"""``MockProvider``: an offline, deterministic stand-in for a model service.

The same request always gets the same answer: a reply quoting the last user message, or a call
of the first tool (or the one ``tool_choice`` names) with arguments built from its JSON schema,
as one body or as an OpenAI-style stream. Usage is always reported, in streams too (a last chunk
with no choices), so cost accounting works offline. It serves the zero-config demo and tests
that need no network.

The request's options are honoured as OpenAI honours them:

- ``n``: that many choices; choice ``i`` is the reply with `` (i+1)`` appended (a tool call's
  arguments and a structured answer vary their strings and enums instead). A stream
  interleaves the choices chunk by chunk, each chunk carrying its choice's ``index``, and ends
  with one usage chunk counting every choice's completion tokens.
- ``max_completion_tokens`` (or ``max_tokens``): the completion is cut to that many tokens of
  ``count_tokens``, at a word boundary where there is one, with ``finish_reason: "length"``
  (a JSON answer too, then no longer JSON). A tool call is cut as OpenAI cuts it: the call
  stays, its arguments stop mid-JSON, the finish reason is ``"length"`` (the client must not
  run it). So usage never exceeds the limit, which budgets rely on.
- ``stop`` (a string or up to four): the text ends before the first occurrence of any; tool
  call arguments are not searched.
- ``response_format``: ``json_object`` answers ``{"reply": ...}``; ``json_schema`` answers a
  JSON value valid against the schema (see ``gateway_kit.providers._schema_sample``).

Invalid values of these answer 400 in OpenAI's error shape, never an exception.

``EmbeddingsProvider`` too: unit-length vectors seeded from each input's SHA-256 (equal inputs,
equal vectors; similar inputs, unrelated vectors), 1536 dimensions unless ``dimensions`` says
otherwise, as floats or base64 little-endian float32.

``faults`` makes the mock misbehave, to watch retries and fallback offline: every call waits
``latency_s``; then one draw of the provider's own ``random.Random(seed)`` per call fails it
with probability ``error_rate`` (status 0 and 5xx raise ``UpstreamUnavailableError``, 429 and
408 answer an OpenAI error body, the 429 with ``retry_after``); and ``cut_after_events`` breaks
every stream with ``UpstreamStreamError`` after that many events, before ``[DONE]``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import struct
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import anyio

from gateway_kit.config.upstream import FaultsConfig
from gateway_kit.exceptions import UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.providers._schema_sample import sample
from gateway_kit.providers.base import ChatCall, ChatResponse, EmbeddingsCall
from gateway_kit.sse import DONE, SSEEvent

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8")]
_CREATED = 1_700_000_000  # fixed, so answers are reproducible
_MAX_CHOICES = 128  # OpenAI's limits
_MAX_STOPS = 4
_MAX_INPUTS = 2048
_MAX_DIMENSIONS = 3072
_DEFAULT_DIMENSIONS = 1536  # text-embedding-3-small


def count_tokens(text: str) -> int:
    """A rough, deterministic token count (about four characters a token)."""
    return max(1, (len(text) + 3) // 4) if text else 0


class MockProvider:
    """Answers chat and embeddings calls in-process; see the module docstring.

    ``delay`` is the seconds between streamed chunks; ``faults`` the faults to inject.
    """

    def __init__(
        self, *, name: str = "mock", delay: float = 0.0, faults: FaultsConfig | None = None
    ) -> None:
        self.name = name
        self._delay = delay
        self._faults = faults
        self._random = random.Random(faults.seed if faults is not None else 0)

    async def aclose(self) -> None:
        return None

    async def chat(self, call: ChatCall) -> ChatResponse:
        failed = await self._inject_fault()
        if failed is not None:
            return failed
        payload = call.payload
        try:
            options = _ChatOptions.of(payload)
        except _InvalidParam as exc:
            return exc.response()
        model = str(payload.get("model", "mock"))
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode())
        completion_id = "chatcmpl-mock" + digest.hexdigest()[:24]
        tool = _chosen_tool(payload)
        choices = [_answer(payload, options, tool, completion_id, i) for i in range(options.n)]
        prompt_tokens = sum(4 + count_tokens(_message_text(m)) for m in _messages(payload))
        completion_tokens = sum(choice.tokens for choice in choices)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if call.stream:
            events = self._stream(_chunks(completion_id, model, choices, usage))
            return ChatResponse(200, list(_SSE), events=events, close=events.aclose)
        body = {
            "id": completion_id,
            "object": "chat.completion",
            "created": _CREATED,
            "model": model,
            "choices": [
                {
                    "index": i,
                    "message": choice.message(),
                    "finish_reason": choice.finish,
                    "logprobs": None,
                }
                for i, choice in enumerate(choices)
            ],
            "usage": usage,
        }
        return ChatResponse(200, list(_JSON), body=json.dumps(body).encode())

    async def embeddings(self, call: EmbeddingsCall) -> ChatResponse:
        failed = await self._inject_fault()
        if failed is not None:
            return failed
        payload = call.payload
        try:
            inputs = _embedding_inputs(payload.get("input"))
            dimensions = _int_param(payload, "dimensions", _MAX_DIMENSIONS)
            encoding = payload.get("encoding_format") or "float"
            if encoding not in ("float", "base64"):
                raise _InvalidParam("encoding_format", "must be 'float' or 'base64'")
        except _InvalidParam as exc:
            return exc.response()
        data = []
        for index, (key, _) in enumerate(inputs):
            vector = _unit_vector(key, dimensions or _DEFAULT_DIMENSIONS)
            embedding: str | list[float] = (
                base64.b64encode(vector).decode()
                if encoding == "base64"
                # Nine significant digits: each float32 exactly, in OpenAI's short form.
                else [float(f"{x:.9g}") for x in struct.unpack(f"<{len(vector) // 4}f", vector)]
            )
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(count for _, count in inputs)
        body = {
            "object": "list",
            "data": data,
            "model": str(payload.get("model", "mock")),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return ChatResponse(200, list(_JSON), body=json.dumps(body).encode())

    async def _inject_fault(self) -> ChatResponse | None:
        """Wait and fail as ``faults`` says: raise, or return an error answer, or ``None``."""
        faults = self._faults
        if faults is None:
            return None
        if faults.latency_s:
            await anyio.sleep(faults.latency_s)
        # One draw per call, failing or not, so a seed gives the same run every time.
        if self._random.random() >= faults.error_rate:
            return None
        status = faults.status
        if status == 0:
            raise UpstreamUnavailableError(
                f"Upstream provider '{self.name}' refused the connection (injected fault).",
                provider=self.name,
                status=0,
            )
        if status >= 500:
            raise UpstreamUnavailableError(
                f"Upstream provider '{self.name}' answered {status} (injected fault).",
                provider=self.name,
                status=status,
            )
        if status == 429:
            return _error(
                429,
                "Rate limit reached for requests (injected fault).",
                kind="rate_limit_error",
                code="rate_limit_exceeded",
                retry_after=1.0,
            )
        return _error(status, "The request timed out (injected fault).", kind="timeout")

    async def _stream(self, events: list[SSEEvent]) -> AsyncGenerator[SSEEvent, None]:
        cut = self._faults.cut_after_events if self._faults is not None else None
        for count, event in enumerate(events):
            # A cut stream always breaks: when it is shorter than the cut, instead of [DONE].
            if cut is not None and (count == cut or event.done):
                raise UpstreamStreamError(
                    f"The stream from '{self.name}' broke off after {count} events "
                    "(injected fault).",
                    provider=self.name,
                    status=200,
                )
            if count and self._delay:
                await anyio.sleep(self._delay)
            yield event


class _InvalidParam(Exception):
    """A request parameter the mock cannot honour: a 400 naming it."""

    def __init__(self, param: str, problem: str) -> None:
        super().__init__(f"Invalid '{param}': {problem}.")
        self.param = param

    def response(self) -> ChatResponse:
        return _error(400, str(self), param=self.param, code="invalid_value")


def _error(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    retry_after: float | None = None,
) -> ChatResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return ChatResponse(
        status, list(_JSON), body=json.dumps(body).encode(), retry_after=retry_after
    )


def _int_param(payload: dict[str, Any], name: str, maximum: int) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise _InvalidParam(name, f"expected an integer from 1 to {maximum}")
    return value


@dataclass(frozen=True, slots=True)
class _ChatOptions:
    n: int
    max_tokens: int | None
    stops: tuple[str, ...]
    #: ``None`` for text, ``"json_object"``, or the schema of a ``json_schema`` format.
    format: str | dict[str, Any] | None

    @classmethod
    def of(cls, payload: dict[str, Any]) -> _ChatOptions:
        n = _int_param(payload, "n", _MAX_CHOICES) or 1
        limit_name = "max_completion_tokens"
        if payload.get(limit_name) is None:
            limit_name = "max_tokens"
        max_tokens = _int_param(payload, limit_name, 2**31)
        stop = payload.get("stop")
        stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
        if (
            not isinstance(stops, list)
            or len(stops) > _MAX_STOPS
            or not all(isinstance(s, str) for s in stops)
        ):
            raise _InvalidParam("stop", f"expected a string or a list of up to {_MAX_STOPS}")
        return cls(n, max_tokens, tuple(s for s in stops if s), _format(payload))


def _format(payload: dict[str, Any]) -> str | dict[str, Any] | None:
    spec = payload.get("response_format")
    if spec is None:
        return None
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return "json_object"
    if kind != "json_schema":
        raise _InvalidParam(
            "response_format.type", "expected 'text', 'json_object' or 'json_schema'"
        )
    assert isinstance(spec, dict)
    json_schema = spec.get("json_schema")
    if not isinstance(json_schema, dict) or not isinstance(json_schema.get("name"), str):
        raise _InvalidParam("response_format.json_schema", "expected an object with a 'name'")
    schema = json_schema.get("schema", {"type": "object"})
    if not isinstance(schema, dict):
        raise _InvalidParam("response_format.json_schema.schema", "expected an object")
    return schema


@dataclass(frozen=True, slots=True)
class _Choice:
    content: str | None
    tool_call: dict[str, Any] | None
    finish: str
    tokens: int

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content, "refusal": None}
        if self.tool_call is not None:
            message["tool_calls"] = [self.tool_call]
        return message

    def deltas(self) -> list[tuple[dict[str, Any], str | None]]:
        """The stream of this choice: (delta, finish reason) pairs."""
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "", "refusal": None}]
        if self.tool_call is not None:
            function = self.tool_call["function"]
            head = {
                "index": 0,
                "id": self.tool_call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            deltas.append({"tool_calls": [head]})
            deltas += [
                {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                for piece in _pieces(function["arguments"], 16)
            ]
        else:
            deltas += [{"content": piece} for piece in _words(self.content or "")]
        return [(delta, None) for delta in deltas] + [({}, self.finish)]


def _answer(
    payload: dict[str, Any],
    options: _ChatOptions,
    tool: dict[str, Any] | None,
    completion_id: str,
    index: int,
) -> _Choice:
    limit = options.max_tokens
    if tool is not None:
        arguments = json.dumps(sample(tool.get("parameters") or {"type": "object"}, variant=index))
        finish = "tool_calls"
        if limit is not None and count_tokens(arguments) > limit:
            arguments, finish = arguments[: 4 * limit], "length"
        call_id = hashlib.sha256(f"{completion_id}/{index}".encode()).hexdigest()[:24]
        tool_call = {
            "id": "call_" + call_id,
            "type": "function",
            "function": {"name": tool["name"], "arguments": arguments},
        }
        return _Choice(None, tool_call, finish, count_tokens(arguments))
    text = _reply(payload) + (f" ({index + 1})" if index else "")
    if options.format == "json_object":
        text = json.dumps({"reply": text})
    elif isinstance(options.format, dict):
        text = json.dumps(sample(options.format, variant=index))
    cuts = [text.find(stop) for stop in options.stops if stop in text]
    text = text[: min(cuts)] if cuts else text
    finish = "stop"
    if limit is not None and count_tokens(text) > limit:
        text, finish = _truncate(text, limit), "length"
    return _Choice(text, None, finish, count_tokens(text))


def _chunks(
    completion_id: str, model: str, choices: list[_Choice], usage: dict[str, int]
) -> list[SSEEvent]:
    head = {"id": completion_id, "object": "chat.completion.chunk", "created": _CREATED}
    head["model"] = model
    streams = [choice.deltas() for choice in choices]
    events = []
    # The choices take turns, as OpenAI's do: each chunk carries one choice's index.
    for step in range(max(map(len, streams))):
        for index, stream in enumerate(streams):
            if step < len(stream):
                delta, finish = stream[step]
                choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
                events.append(SSEEvent.of_json({**head, "choices": [choice]}))
    return [*events, SSEEvent.of_json({**head, "choices": [], "usage": usage}), SSEEvent(DONE)]


def _truncate(text: str, limit: int) -> str:
    """The longest start of ``text`` within ``limit`` tokens, ending with a whole word if any."""
    cut = text[: 4 * limit]
    if text[len(cut) : len(cut) + 1] == " ":
        return cut.rstrip(" ")
    space = cut.rfind(" ")
    return cut[:space].rstrip(" ") if space > 0 else cut


def _embedding_inputs(value: Any) -> list[tuple[str, int]]:
    """Each input as (the key its vector is seeded from, its token count)."""
    problem = "expected a string, an array of strings, of tokens or of token arrays"
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _InvalidParam("input", problem)
    if all(_is_token(t) for t in value):
        value = [value]  # one input given as tokens
    if len(value) > _MAX_INPUTS:
        raise _InvalidParam("input", f"at most {_MAX_INPUTS} inputs in one request")
    inputs = []
    for item in value:
        if isinstance(item, str) and item:
            inputs.append((item, count_tokens(item)))
        elif isinstance(item, list) and item and all(_is_token(t) for t in item):
            # A prefix no text starts with, so tokens never share a vector with a text.
            inputs.append(("\0tokens:" + ",".join(map(str, item)), len(item)))
        else:
            raise _InvalidParam("input", problem + ", none of them empty")
    return inputs


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _unit_vector(key: str, dimensions: int) -> bytes:
    """A unit-length vector as little-endian float32 bytes, seeded from ``key``.

    Normal draws give a uniformly random direction; a shorter vector is the normalised start of
    a longer one, as OpenAI's ``dimensions`` shortens its embeddings.
    """
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest(), "big")
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(math.fsum(v * v for v in values)) or 1.0
    return struct.pack(f"<{dimensions}f", *(v / norm for v in values))


def _reply(payload: dict[str, Any]) -> str:
    messages = _messages(payload)
    if messages and messages[-1].get("role") == "tool":
        return f"Mock answer using the tool result: {_message_text(messages[-1])[:200]}"
    text = " ".join(_last_user_text(payload).split())
    quoted = text if len(text) <= 200 else text[:197] + "..."
    return f"This is a mock reply from gateway-kit to: {quoted}" if quoted else "Hello from mock."


def _chosen_tool(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The function the answer calls, or ``None`` for a text answer."""
    tools: list[dict[str, Any]] = [
        t["function"]
        for t in payload.get("tools") or []
        if isinstance(t, dict)
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
    ]
    choice = payload.get("tool_choice")
    messages = _messages(payload)
    if not tools or choice == "none" or (messages and messages[-1].get("role") == "tool"):
        return None
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        wanted = choice["function"].get("name")
        return next((t for t in tools if t["name"] == wanted), tools[0])
    return tools[0]


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [word if i == 0 else " " + word for i, word in enumerate(words)]


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _messages(payload: dict[str, Any]) -> list[dict[str, Any]]:
    messages = payload.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _last_user_text(payload: dict[str, Any]) -> str:
    """The text of the last user message (parts joined), or ``""``."""
    for message in reversed(_messages(payload)):
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
