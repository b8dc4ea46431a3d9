"""The inference request (chat completions or embeddings): read once, parsed once, validated
once.

Whichever runs first (a layer that needs the request, or the endpoint) calls ``load_request``
with the route's kind; later callers get the parsed dict from the request context. Validation
checks the fields the gateway relies on and leaves every other field untouched, so new OpenAI
parameters pass through without a release of ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from gateway_kit._asgi import Receive, Scope, header
from gateway_kit.chat.cache_field import check_cache_field
from gateway_kit.pipeline.body import (
    BodyTooLarge,
    ClientDisconnected,
    InvalidJSON,
    encoding_refused,
    parse_json,
    read_body,
)
from gateway_kit.pipeline.context import get_context
from gateway_kit.pipeline.verdicts import Refusal

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

#: The routes' kinds of request (a model's ``kind`` names the same routes).
RequestKind = Literal["chat", "embedding"]

#: The most inputs one embeddings request may carry (OpenAI's limit).
MAX_EMBEDDING_INPUTS = 2048

#: Bounds of the integers the gateway computes with (the budget's estimate multiplies the output
#: tokens by ``n``), each ``(low, high)`` inclusive: OpenAI's own for ``n`` and
#: ``top_logprobs``; a token count below 2**31 (no model comes near it) for the output limits.
#: Within them no estimate comes near a 64-bit counter.
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "n": (1, 128),
    "max_tokens": (1, 2**31 - 1),
    "max_completion_tokens": (1, 2**31 - 1),
    "top_logprobs": (0, 20),
}

#: The most ``dimensions`` an embeddings request may ask for (the largest models give 3072;
#: this leaves room for larger ones).
MAX_DIMENSIONS = 65_536


async def load_chat_request(
    scope: Scope, receive: Receive, *, max_body_bytes: int
) -> tuple[dict[str, Any], Receive] | Refusal | None:
    """The validated chat request and a ``receive`` replaying its body (see ``load_request``)."""
    return await load_request(scope, receive, max_body_bytes=max_body_bytes, kind="chat")


async def load_request(
    scope: Scope, receive: Receive, *, max_body_bytes: int, kind: RequestKind = "chat"
) -> tuple[dict[str, Any], Receive] | Refusal | None:
    """The validated request of the route's ``kind`` and a ``receive`` replaying its body.

    Returns a ``Refusal`` to answer with, or ``None`` when the client disconnected.
    """
    ctx = get_context(scope)
    if ctx.json is not None and ctx.body is not None:
        _, receive = await read_body(scope, receive, limit=max_body_bytes)
        return ctx.json, receive
    content_type = header(scope, b"content-type")
    if content_type is not None and not _is_json(content_type):
        return Refusal(
            415,
            "Content-Type must be application/json.",
            code="unsupported_media_type",
        )
    encoding = header(scope, b"content-encoding")
    refused = encoding_refused(None if encoding is None else encoding.decode("latin-1"))
    if refused is not None:
        return Refusal(415, refused, code="unsupported_media_type")
    try:
        body, receive = await read_body(scope, receive, limit=max_body_bytes)
    except BodyTooLarge as exc:
        return Refusal(413, str(exc), code="request_too_large")
    except ClientDisconnected:
        return None
    try:
        payload = parse_json(body)
    except InvalidJSON as exc:
        return Refusal(
            400,
            f"We could not parse the JSON body of your request: {exc}.",
            code="invalid_json",
            param=exc.param,
        )
    if isinstance(payload, dict) and isinstance(payload.get("model"), str):
        ctx.asked_model = payload["model"]
    error = _VALIDATORS[kind](payload)
    if error is not None:
        return error
    ctx.json = payload
    return payload, receive


def _is_json(content_type: bytes) -> bool:
    media_type = content_type.split(b";", 1)[0].strip().lower()
    return media_type == b"application/json" or media_type.endswith(b"+json")


def _invalid(param: str, message: str, code: str = "invalid_type") -> Refusal:
    return Refusal(400, message, code=code, param=param)


def _missing(param: str) -> Refusal:
    return Refusal(
        400,
        f"Missing required parameter: '{param}'.",
        code="missing_required_parameter",
        param=param,
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_within(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _out_of_bounds(name: str, low: int, high: int) -> Refusal:
    return _invalid(name, f"'{name}' must be an integer from {low} to {high}.")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_model(payload: object) -> Refusal | None:
    """A JSON object naming a model: what every inference request is."""
    if not isinstance(payload, dict):
        return Refusal(
            400, "The request body must be a JSON object.", code="invalid_type", param=None
        )
    if "model" not in payload:
        return _missing("model")
    model = payload["model"]
    if not isinstance(model, str) or not model:
        return _invalid("model", "'model' must be a non-empty string.")
    return None


def validate_chat_request(payload: object) -> Refusal | None:
    """Check the fields the gateway relies on; ``None`` when the request is acceptable."""
    error = _check_model(payload)
    if error is not None:
        return error
    assert isinstance(payload, dict)
    if "messages" not in payload:
        return _missing("messages")
    error = _validate_messages(payload["messages"])
    if error is not None:
        return error
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return _invalid("stream", "'stream' must be a boolean.")
    options = payload.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            return _invalid("stream_options", "'stream_options' must be an object.")
        include_usage = options.get("include_usage")
        if include_usage is not None and not isinstance(include_usage, bool):
            return _invalid(
                "stream_options.include_usage", "'stream_options.include_usage' must be a boolean."
            )
    for name, (low, high) in INT_BOUNDS.items():
        value = payload.get(name)
        if value is not None and not _int_within(value, low, high):
            return _out_of_bounds(name, low, high)
    # Read by the cache to decide what it may serve (a kept answer has no logprobs, no audio).
    logprobs = payload.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        return _invalid("logprobs", "'logprobs' must be a boolean.")
    modalities = payload.get("modalities")
    if modalities is not None and not (
        isinstance(modalities, list) and all(isinstance(m, str) for m in modalities)
    ):
        return _invalid("modalities", "'modalities' must be an array of strings.")
    for name, low, high in (("temperature", 0, 2), ("top_p", 0, 1)):
        value = payload.get(name)
        if value is not None and (not _is_number(value) or not low <= value <= high):
            return _invalid(name, f"'{name}' must be a number between {low} and {high}.")
    error = check_cache_field(payload)
    if error is not None:
        return error
    return _validate_tools(payload.get("tools"))


def _validate_messages(messages: object) -> Refusal | None:
    if not isinstance(messages, list):
        return _invalid("messages", "'messages' must be an array of message objects.")
    if not messages:
        return _invalid(
            "messages", "'messages' must contain at least one message.", "invalid_value"
        )
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            return _invalid(param, f"'{param}' must be an object.")
        role = message.get("role")
        if role is None:
            return _missing(f"{param}.role")
        if not isinstance(role, str) or role not in ROLES:
            return _invalid(
                f"{param}.role",
                f"'{param}.role' must be one of {', '.join(sorted(ROLES))}.",
                "invalid_value",
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            return _invalid(
                f"{param}.content", f"'{param}.content' must be a string or an array of parts."
            )
        for field in ("name", "tool_call_id"):
            if not _str_or_none(message.get(field)):
                return _invalid(f"{param}.{field}", f"'{param}.{field}' must be a string.")
        calls = message.get("tool_calls")
        if calls is not None:
            error = _validate_calls(calls, f"{param}.tool_calls")
            if error is not None:
                return error
    return None


def _validate_calls(calls: object, param: str) -> Refusal | None:
    """An assistant message's ``tool_calls``, as OpenAI types them (each member that is there:
    an upstream, or the layers that read them, rely on it)."""
    if not isinstance(calls, list):
        return _invalid(param, f"'{param}' must be an array of tool calls.")
    for index, call in enumerate(calls):
        at = f"{param}[{index}]"
        if not isinstance(call, dict):
            return _invalid(at, f"'{at}' must be an object.")
        for field in ("id", "type"):
            if not _str_or_none(call.get(field)):
                return _invalid(f"{at}.{field}", f"'{at}.{field}' must be a string.")
        function = call.get("function")
        if function is None:
            continue
        if not isinstance(function, dict):
            return _invalid(f"{at}.function", f"'{at}.function' must be an object.")
        for field in ("name", "arguments"):
            if not _str_or_none(function.get(field)):
                name = f"{at}.function.{field}"
                return _invalid(name, f"'{name}' must be a string.")
    return None


def _str_or_none(value: object) -> bool:
    return value is None or isinstance(value, str)


def _validate_tools(tools: object) -> Refusal | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return _invalid("tools", "'tools' must be an array.")
    for index, tool in enumerate(tools):
        param = f"tools[{index}]"
        if not isinstance(tool, dict):
            return _invalid(param, f"'{param}' must be an object.")
        function = tool.get("function")
        is_function = tool.get("type", "function") == "function"
        if is_function and not (
            isinstance(function, dict) and isinstance(function.get("name"), str)
        ):
            return _invalid(f"{param}.function.name", f"'{param}.function.name' must be a string.")
    return None


def validate_embeddings_request(payload: object) -> Refusal | None:
    """Check an embeddings request; ``None`` when it is acceptable."""
    error = _check_model(payload)
    if error is not None:
        return error
    assert isinstance(payload, dict)
    if "input" not in payload:
        return _missing("input")
    error = _validate_input(payload["input"])
    if error is not None:
        return error
    encoding = payload.get("encoding_format")
    if encoding is not None and encoding not in ("float", "base64"):
        return _invalid(
            "encoding_format", "'encoding_format' must be 'float' or 'base64'.", "invalid_value"
        )
    dimensions = payload.get("dimensions")
    if dimensions is not None and not _int_within(dimensions, 1, MAX_DIMENSIONS):
        return _out_of_bounds("dimensions", 1, MAX_DIMENSIONS)
    user = payload.get("user")
    if user is not None and not isinstance(user, str):
        return _invalid("user", "'user' must be a string.")
    return check_cache_field(payload)


def _validate_input(value: object) -> Refusal | None:
    message = (
        "'input' must be a non-empty string, an array of non-empty strings, an array of "
        "token ids, or an array of arrays of token ids."
    )
    if isinstance(value, str):
        return None if value else _invalid("input", message, "invalid_value")
    if not isinstance(value, list) or not value:
        return _invalid("input", message)
    if len(value) > MAX_EMBEDDING_INPUTS:
        return _invalid(
            "input",
            f"'input' holds {len(value)} items; at most {MAX_EMBEDDING_INPUTS} are allowed.",
            "invalid_value",
        )
    if all(isinstance(item, str) and item for item in value):
        return None
    if all(_is_int(item) and item >= 0 for item in value):
        return None
    if all(
        isinstance(item, list) and item and all(_is_int(t) and t >= 0 for t in item)
        for item in value
    ):
        return None
    return _invalid("input", message)


_VALIDATORS: dict[str, Callable[[object], Refusal | None]] = {
    "chat": validate_chat_request,
    "embedding": validate_embeddings_request,
}
