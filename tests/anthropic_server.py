"""A local stand-in for Anthropic's Messages API (Starlette, served by uvicorn on loopback).

``POST /v1/messages`` answers by the request's ``model`` (see ``SCENARIOS``) with shapes taken
from Anthropic's API documentation, as a whole body or, when the request says ``stream``, as
the documented event stream. Like the real API it refuses a request without ``x-api-key`` or
``anthropic-version``, or one that does not match the official SDK's request types
(``check_request``). Every request is recorded, so tests can assert the translation.

``check_request``, ``sdk_message`` and ``sdk_stream_event`` hold the shapes to the installed
``anthropic`` SDK's types, strictly: unknown keys fail, not only missing ones (the SDK's own
models accept extra keys, and pydantic reads its request TypedDicts lazily and leniently).
"""

from __future__ import annotations

import collections.abc
import json
import types
import typing
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anthropic.types
import pydantic
import typing_extensions
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

# -- strict checks against the SDK's types ------------------------------------------------------

#: Sampling parameters the SDK dropped from its request types (v1 MIGRATION.md, "Removed:
#: deprecated request parameters") but the API still honours for the models that predate them.
SAMPLING = {"temperature": float, "top_p": float}


def check_request(body: dict[str, Any]) -> None:
    """Raise ``ValueError`` (with the path) unless ``body`` is a valid Messages request."""
    params = dict(body)
    for name, kind in SAMPLING.items():
        if name in params and not _is_a(params.pop(name), kind):
            raise ValueError(f"body.{name}: not a number")
    typed = MessageCreateParamsStreaming if body.get("stream") else MessageCreateParamsNonStreaming
    _check(params, typed, "body")


def _is_a(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _check(value: Any, annotation: Any, path: str) -> None:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation in (Any, object):
        return
    if origin in (typing.Annotated, typing.Required, typing.NotRequired):
        return _check(value, args[0], path)
    if typing_extensions.is_typeddict(annotation):
        return _check_typeddict(value, annotation, path)
    if origin in (typing.Union, types.UnionType):
        return _check_union(value, args, path)
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"{path}: {value!r} is not one of {args}")
        return None
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence) or (
        getattr(origin, "__name__", "") == "SequenceNotStr"
    ):
        if not isinstance(value, list):
            raise ValueError(f"{path}: expected a list, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check(item, args[0], f"{path}[{i}]")
        return None
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            raise ValueError(f"{path}: expected an object")
        return None
    if annotation is type(None):
        if value is not None:
            raise ValueError(f"{path}: expected null")
        return None
    if annotation in (str, int, float, bool):
        if not _is_a(value, annotation):
            raise ValueError(f"{path}: expected {annotation.__name__}, got {value!r}")
        return None
    raise ValueError(f"{path}: the checker does not know {annotation!r}")


def _check_typeddict(value: Any, typed: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected an object ({typed.__name__})")
    hints = typing.get_type_hints(typed, include_extras=True)
    unknown = set(value) - set(hints)
    if unknown:
        raise ValueError(f"{path}: {typed.__name__} has no {sorted(unknown)}")
    # The SDK's modules use string annotations, which TypedDict cannot read Required from.
    required = set(typed.__required_keys__) | {
        name for name, hint in hints.items() if typing.get_origin(hint) is typing.Required
    }
    missing = required - set(value)
    if missing:
        raise ValueError(f"{path}: {typed.__name__} needs {sorted(missing)}")
    for name, item in value.items():
        _check(item, hints[name], f"{path}.{name}")


def _check_union(value: Any, members: tuple[Any, ...], path: str) -> None:
    named: list[Any] = []
    if isinstance(value, dict) and "type" in value:
        # The SDK's unions are discriminated by "type": the members that name it go first, and
        # their complaints are the ones reported (what is wrong with the block, not every
        # alternative); the rest still get a try (a JSON schema is also a plain dict).
        named = [m for m in members if _type_literal_allows(m, value["type"])]
    errors = []
    for member in [*named, *(m for m in members if m not in named)]:
        try:
            _check(value, member, path)
            return
        except ValueError as exc:
            errors.append(str(exc))
    raise ValueError(" | ".join(errors[: len(named)] or errors))


def _type_literal_allows(member: Any, kind: Any) -> bool:
    if not typing_extensions.is_typeddict(member):
        return False
    hint = typing.get_type_hints(member, include_extras=True).get("type")
    while typing.get_origin(hint) in (typing.Required, typing.NotRequired, typing.Union):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return typing.get_origin(hint) is typing.Literal and kind in typing.get_args(hint)


def no_extras(model: pydantic.BaseModel, *, allowed: frozenset[str] = frozenset()) -> None:
    """Raise ``ValueError`` if ``model`` or a model inside it kept keys its type does not name."""
    extra = set(model.model_extra or {}) - allowed
    if extra:
        raise ValueError(f"{type(model).__name__} has unknown fields {sorted(extra)}")
    for name in type(model).model_fields:
        value = getattr(model, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, pydantic.BaseModel):
                no_extras(item, allowed=allowed)


_STREAM_EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)


def sdk_message(data: dict[str, Any]) -> anthropic.types.Message:
    message = anthropic.types.Message.model_validate(data)
    no_extras(message)
    return message


def sdk_stream_event(data: dict[str, Any]) -> object:
    """The SDK's model of one stream event (``ping`` and ``error`` are outside its union)."""
    if data["type"] == "ping":
        if data != {"type": "ping"}:
            raise ValueError(f"ping with fields: {data}")
        return data
    model: pydantic.BaseModel
    if data["type"] == "error":
        model = anthropic.types.ErrorResponse.model_validate(data)
    else:
        model = _STREAM_EVENT.validate_python(data)
    no_extras(model)
    return model


# -- recorded answers (Anthropic's API documentation: Messages, streaming, errors) -------------

TEXT_MESSAGE: dict[str, Any] = {
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Hi! My name is Claude."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 2095, "output_tokens": 503},
}

TOOL_MESSAGE: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-opus-4-1-20250805",
    "content": [
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQB..."},
        {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "celsius"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 472, "output_tokens": 89},
}

CACHED_MESSAGE: dict[str, Any] = {
    **TEXT_MESSAGE,
    "id": "msg_01Cached",
    "usage": {
        "input_tokens": 21,
        "cache_creation_input_tokens": 188086,
        "cache_read_input_tokens": 1500,
        "cache_creation": {"ephemeral_5m_input_tokens": 188086, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 393,
        "service_tier": "standard",
    },
}


def _event(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return data["type"], data


def _start(message_id: str, model: str, usage: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return _event({"type": "message_start", "message": message})


def _text_delta(index: int, text: str) -> tuple[str, dict[str, Any]]:
    delta = {"type": "text_delta", "text": text}
    return _event({"type": "content_block_delta", "index": index, "delta": delta})


def _json_delta(index: int, partial: str) -> tuple[str, dict[str, Any]]:
    delta = {"type": "input_json_delta", "partial_json": partial}
    return _event({"type": "content_block_delta", "index": index, "delta": delta})


def _stop_block(index: int) -> tuple[str, dict[str, Any]]:
    return _event({"type": "content_block_stop", "index": index})


def _message_delta(stop_reason: str, usage: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    return _event({"type": "message_delta", "delta": delta, "usage": usage})


PING = _event({"type": "ping"})
MESSAGE_STOP = _event({"type": "message_stop"})

TEXT_STREAM = [
    _start(
        "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
        "claude-sonnet-4-5-20250929",
        {"input_tokens": 2095, "output_tokens": 1},
    ),
    _event(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    ),
    PING,
    _text_delta(0, "Hi! My"),
    _text_delta(0, " name is"),
    _text_delta(0, " Claude."),
    _stop_block(0),
    _message_delta("end_turn", {"output_tokens": 503}),
    MESSAGE_STOP,
]

TOOL_STREAM = [
    _start(
        "msg_014p7gG3wDgGV9EUtLvnow3U",
        "claude-opus-4-1-20250805",
        {"input_tokens": 472, "output_tokens": 2},
    ),
    _event(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        }
    ),
    _event(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "The user wants the weather."},
        }
    ),
    _event(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "EqQB..."},
        }
    ),
    _stop_block(0),
    _event(
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}
    ),
    PING,
    _text_delta(1, "I'll check the current weather"),
    _text_delta(1, " in San Francisco for you."),
    _stop_block(1),
    _event(
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01A09q90qw90lq917835lq9",
                "name": "get_weather",
                "input": {},
            },
        }
    ),
    _json_delta(2, ""),
    _json_delta(2, '{"location":'),
    _json_delta(2, ' "San'),
    _json_delta(2, " Francisc"),
    _json_delta(2, 'o, CA", "unit": "cel'),
    _json_delta(2, 'sius"}'),
    _stop_block(2),
    _message_delta("tool_use", {"output_tokens": 89}),
    MESSAGE_STOP,
]

#: Cache counts arrive in message_start; newer API versions repeat them, cumulative, in
#: message_delta's usage.
CACHED_STREAM = [
    _start(
        "msg_01Cached",
        "claude-sonnet-4-5-20250929",
        {
            "input_tokens": 21,
            "cache_creation_input_tokens": 188086,
            "cache_read_input_tokens": 1500,
            "output_tokens": 1,
        },
    ),
    *TEXT_STREAM[1:-2],
    _message_delta(
        "end_turn",
        {
            "input_tokens": 21,
            "cache_creation_input_tokens": 188086,
            "cache_read_input_tokens": 1500,
            "output_tokens": 393,
        },
    ),
    MESSAGE_STOP,
]

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

ERRORS: dict[str, tuple[int, dict[str, Any], dict[str, str]]] = {
    "claude-400": (
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "messages: text content blocks must be non-empty",
            },
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
        },
        {},
    ),
    "claude-404": (
        404,
        {
            "type": "error",
            "error": {"type": "not_found_error", "message": "model: claude-404"},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fz",
        },
        {},
    ),
    "claude-429": (
        429,
        {
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": "This request would exceed the rate limit for your organization.",
            },
        },
        {"retry-after": "7"},
    ),
    "claude-529": (529, OVERLOADED, {"retry-after": "3"}),
    "claude-500": (
        500,
        {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}},
        {},
    ),
}

#: model -> (whole answer, stream). A stream whose last item is ``CUT`` breaks the connection.
CUT = ("cut", {})
SCENARIOS: dict[str, tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]] = {
    "claude-text": (TEXT_MESSAGE, TEXT_STREAM),
    "claude-tool": (TOOL_MESSAGE, TOOL_STREAM),
    "claude-cached": (CACHED_MESSAGE, CACHED_STREAM),
    # An `error` event mid-stream (Anthropic's docs: "Error events").
    "claude-stream-error": (TEXT_MESSAGE, [*TEXT_STREAM[:4], ("error", OVERLOADED)]),
    # The connection breaks mid-stream; or the stream ends cleanly without message_stop.
    "claude-stream-cut": (TEXT_MESSAGE, [*TEXT_STREAM[:5], CUT]),
    # Cut after message_start reported the prompt's count with its cache reads and writes.
    "claude-cached-cut": (CACHED_MESSAGE, [*CACHED_STREAM[:5], CUT]),
    "claude-stream-truncated": (TEXT_MESSAGE, TEXT_STREAM[:-1]),
}
STOP_REASON_PREFIX = "claude-stop-"


def scenario(model: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """``claude-stop-<reason>`` answers the text message with that stop reason."""
    if model.startswith(STOP_REASON_PREFIX):
        reason = model.removeprefix(STOP_REASON_PREFIX)
        return {**TEXT_MESSAGE, "stop_reason": reason}, [
            *TEXT_STREAM[:-2],
            _message_delta(reason, {"output_tokens": 503}),
            MESSAGE_STOP,
        ]
    return SCENARIOS.get(model, SCENARIOS["claude-text"])


# -- the server ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class AnthropicServer:
    """The recorder behind the app: every request in arrival order."""

    requests: list[Received] = field(default_factory=list)

    @property
    def last(self) -> Received:
        return self.requests[-1]

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])

    async def messages(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(Received(dict(request.headers), body))
        headers = {"request-id": f"req_{len(self.requests):04d}"}
        if not request.headers.get("x-api-key"):
            return _error(401, "authentication_error", "x-api-key header is required", headers)
        if request.headers.get("anthropic-version") != "2023-06-01":
            return _error(400, "invalid_request_error", "anthropic-version: bad", headers)
        try:
            check_request(body)
        except ValueError as exc:
            return _error(400, "invalid_request_error", str(exc), headers)
        if body["model"] in ERRORS:
            status, error, extra = ERRORS[body["model"]]
            return JSONResponse(error, status, headers={**headers, **extra})
        message, stream = scenario(body["model"])
        if not body.get("stream"):
            return JSONResponse(message, headers=headers)
        return StreamingResponse(
            _sse(stream), media_type="text/event-stream; charset=utf-8", headers=headers
        )


async def _sse(events: list[tuple[str, dict[str, Any]]]) -> AsyncIterator[bytes]:
    for name, data in events:
        if (name, data) == CUT:
            raise ConnectionResetError("the upstream dropped the connection (scripted)")
        yield f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _error(status: int, kind: str, message: str, headers: dict[str, str]) -> Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status, headers=headers)
