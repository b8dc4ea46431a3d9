"""Translation between OpenAI chat completions and Anthropic's Messages API, both ways.

Pure functions over JSON values: ``AnthropicProvider`` (``anthropic.py``) does the HTTP. The
request is one that passed ``gateway_kit.chat.request.validate_chat_request`` (the fields it
checks are trusted here); what has no faithful Messages equivalent raises
``UnsupportedRequestError``, which the provider answers with a 400 in OpenAI's error shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway_kit._asgi.errors import error_body
from gateway_kit.cost.usage import Usage

__all__ = [
    "UnsupportedRequestError",
    "finish_reason",
    "openai_error",
    "openai_usage",
    "to_chat_completion",
    "to_messages_request",
]

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
#: The error type of a 4xx whose body is not Anthropic's error shape.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
_EMPTY_SCHEMA = {"type": "object", "properties": {}}
_JSON_OBJECT = "Respond with a single JSON object only, with no other text and no code fences."
_JSON_SCHEMA = (
    "Respond with a single JSON value only, with no other text and no code fences. "
    "It must match this JSON schema: "
)


class UnsupportedRequestError(ValueError):
    """An OpenAI request with no Messages equivalent (or malformed); answered with a 400."""

    def __init__(self, message: str, *, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return error_body(str(self), type="invalid_request_error", code=self.code, param=self.param)


# -- request: OpenAI -> Messages ----------------------------------------------------------------


def to_messages_request(
    payload: Mapping[str, Any], *, stream: bool, default_max_tokens: int
) -> dict[str, Any]:
    """The Messages request body for an OpenAI chat request."""
    n = payload.get("n")
    if n is not None and n != 1:
        raise UnsupportedRequestError(
            "Anthropic's Messages API returns a single choice: 'n' must be 1.",
            param="n",
            code="unsupported_parameter",
        )
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(payload["messages"]):
        where = f"messages[{i}]"
        role = message["role"]
        content: str | list[dict[str, Any]]
        if role in ("system", "developer"):
            system += _text_blocks(message.get("content"), f"{where}.content")
            continue
        if role == "user":
            content = _user_content(message.get("content"), f"{where}.content")
        elif role == "assistant":
            content = _assistant_blocks(message, where)
        elif role == "tool":
            role, content = "user", [_tool_result(message, where)]
        else:
            raise UnsupportedRequestError(
                f"{where} has role {role!r}, which this provider cannot translate.",
                param=f"{where}.role",
            )
        # The Messages API wants user and assistant turns to alternate: consecutive messages
        # of one role (tool results after one another, a user note after them) become one turn.
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] = _as_blocks(turns[-1]["content"]) + _as_blocks(content)
        elif content:
            turns.append({"role": role, "content": content})
    system += _response_format(payload.get("response_format"))

    max_tokens = payload.get("max_completion_tokens") or payload.get("max_tokens")
    body: dict[str, Any] = {
        "model": payload["model"],
        "max_tokens": max_tokens or default_max_tokens,
    }
    if len(system) == 1 and set(system[0]) == {"type", "text"}:
        body["system"] = system[0]["text"]
    elif system:
        body["system"] = system
    body["messages"] = turns
    tools = _tools(payload.get("tools"))
    if tools:
        body["tools"] = tools
    tool_choice = _tool_choice(payload.get("tool_choice"))
    if payload.get("parallel_tool_calls") is False and tools:
        tool_choice = tool_choice or {"type": "auto"}
        if tool_choice["type"] != "none":
            tool_choice["disable_parallel_tool_use"] = True
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    if payload.get("temperature") is not None:
        # OpenAI's range is 0..2, Anthropic's 0..1.
        body["temperature"] = min(max(payload["temperature"], 0), 1)
    if payload.get("top_p") is not None:
        body["top_p"] = payload["top_p"]
    stop = _stop_sequences(payload.get("stop"))
    if stop:
        body["stop_sequences"] = stop
    user = payload.get("user")
    if isinstance(user, str) and user:
        body["metadata"] = {"user_id": user}
    if stream:
        body["stream"] = True
    return body


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content


def _text_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """Text content (a string or text parts) as text blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise UnsupportedRequestError(f"{where} must be a string or a list of parts.", param=where)
    blocks = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("text", "refusal"):
            raise UnsupportedRequestError(
                f"{where}[{j}] must be a text part.", param=f"{where}[{j}]"
            )
        text = part.get("text", part.get("refusal"))
        if not isinstance(text, str):
            raise UnsupportedRequestError(f"{where}[{j}] has no text.", param=f"{where}[{j}]")
        if text:
            blocks.append(_with_cache_control({"type": "text", "text": text}, part))
    return blocks


def _user_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise UnsupportedRequestError(f"{where} must be a string or a list of parts.", param=where)
    blocks = []
    for j, part in enumerate(content):
        here = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            block = {"type": "image", "source": _image_source(url, here)}
            blocks.append(_with_cache_control(block, part))
        elif kind == "text":
            blocks += _text_blocks([part], where)
        else:
            raise UnsupportedRequestError(
                f"{here} is a {kind!r} part, which this provider cannot translate.", param=here
            )
    return blocks


def _image_source(url: Any, where: str) -> dict[str, Any]:
    if isinstance(url, str) and url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if comma and encoding == "base64" and media_type:
            return {"type": "base64", "media_type": media_type, "data": data}
    elif isinstance(url, str) and url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    raise UnsupportedRequestError(
        f"{where} must be an http(s) URL or a base64 data URL.", param=f"{where}.image_url.url"
    )


def _with_cache_control(block: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    # Not OpenAI's, but the common way to mark Anthropic cache breakpoints through it.
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    return block


def _assistant_blocks(message: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    content = message.get("content")
    blocks = [] if content is None else _text_blocks(content, f"{where}.content")
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise UnsupportedRequestError(f"{where}.tool_calls must be a list.", param=where)
    for j, call in enumerate(tool_calls):
        here = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            raise UnsupportedRequestError(f"{here} needs an 'id' and a 'function'.", param=here)
        name, arguments = function.get("name"), function.get("arguments", "")
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise UnsupportedRequestError(
                f"{here}.function needs a string 'name' and 'arguments'.", param=f"{here}.function"
            )
        try:
            # An empty string is a call without arguments; anything else must be an object.
            value = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise UnsupportedRequestError(
                f"{here}.function.arguments is not a JSON object (message {where}, "
                f"tool call {call['id']!r}); the Messages API needs the input as an object.",
                param=f"{here}.function.arguments",
            )
        blocks.append({"type": "tool_use", "id": call["id"], "name": name, "input": value})
    return blocks


def _tool_result(message: Mapping[str, Any], where: str) -> dict[str, Any]:
    tool_call_id = message.get("tool_call_id")
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise UnsupportedRequestError(f"{where} needs a 'tool_call_id'.", param=where)
    content = message.get("content")
    result = content if isinstance(content, str) else _text_blocks(content, f"{where}.content")
    return {"type": "tool_result", "tool_use_id": tool_call_id, "content": result}


def _response_format(response_format: Any) -> list[dict[str, Any]]:
    """An instruction for JSON output: the Messages API has no response format of its own."""
    if not isinstance(response_format, dict):
        return []
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if isinstance(schema, dict):
            return [{"type": "text", "text": _JSON_SCHEMA + json.dumps(schema)}]
        return [{"type": "text", "text": _JSON_OBJECT}]
    if response_format.get("type") == "json_object":
        return [{"type": "text", "text": _JSON_OBJECT}]
    return []


def _stop_sequences(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    raise UnsupportedRequestError("'stop' must be a string or a list of strings.", param="stop")


def _tools(tools: Any) -> list[dict[str, Any]]:
    translated = []
    for i, tool in enumerate(tools or []):
        if tool.get("type", "function") != "function":
            raise UnsupportedRequestError(
                f"tools[{i}] is not a function tool, the only kind this provider translates.",
                param=f"tools[{i}].type",
            )
        function = tool["function"]
        out: dict[str, Any] = {"name": function["name"]}
        if isinstance(function.get("description"), str):
            out["description"] = function["description"]
        out["input_schema"] = function.get("parameters") or dict(_EMPTY_SCHEMA)
        translated.append(out)
    return translated


def _tool_choice(choice: Any) -> dict[str, Any] | None:
    if choice is None:
        return None
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return {"type": "tool", "name": function["name"]}
    raise UnsupportedRequestError(
        "'tool_choice' must be 'auto', 'none', 'required' or a function by name.",
        param="tool_choice",
    )


# -- responses: Messages -> OpenAI --------------------------------------------------------------


def finish_reason(stop_reason: Any) -> str:
    return _FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def openai_usage(usage: Any) -> dict[str, Any] | None:
    """OpenAI's usage object for Anthropic's; ``None`` when Anthropic's is unusable.

    Anthropic's ``input_tokens`` leaves out the cache reads and writes; OpenAI's
    ``prompt_tokens`` includes them (``Usage.from_anthropic`` adds them back).
    """
    parsed = Usage.from_anthropic(usage)
    if parsed is None:
        return None
    result: dict[str, Any] = {
        "prompt_tokens": parsed.input_tokens,
        "completion_tokens": parsed.output_tokens,
        "total_tokens": parsed.total_tokens,
        "prompt_tokens_details": {
            "cached_tokens": parsed.cache_read_tokens,
            "cache_creation_tokens": parsed.cache_write_tokens,
        },
    }
    if parsed.reasoning_tokens:
        result["completion_tokens_details"] = {"reasoning_tokens": parsed.reasoning_tokens}
    return result


def to_chat_completion(message: Any, *, created: int) -> dict[str, Any]:
    """A ``chat.completion`` for a Messages response (``ValueError`` when it is not one)."""
    blocks = message.get("content") if isinstance(message, dict) else None
    if not isinstance(blocks, list) or message.get("type") != "message":
        raise ValueError("not a Messages response")
    texts: list[str] = []
    tool_calls = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            tool_calls.append(_tool_call(block))
        # thinking, redacted_thinking and server tools' blocks have no OpenAI equivalent.
    reply: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None,
        "refusal": None,
    }
    if tool_calls:
        reply["tool_calls"] = tool_calls
    completion = {
        "id": "chatcmpl-" + str(message.get("id", "")),
        "object": "chat.completion",
        "created": created,
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": finish_reason(message.get("stop_reason")),
                "logprobs": None,
            }
        ],
    }
    usage = openai_usage(message.get("usage"))
    if usage is not None:
        completion["usage"] = usage
    return completion


def _tool_call(block: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {
            "name": block.get("name"),
            "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False),
        },
    }


def openai_error(status: int, content: bytes) -> bytes:
    """OpenAI's error body for an Anthropic 4xx body (``{"type": "error", "error": {...}}``)."""
    try:
        document = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        document = None
    error = document.get("error") if isinstance(document, dict) else None
    kind = _ERROR_TYPES.get(status, "invalid_request_error")
    message = f"The upstream provider answered {status}."
    if isinstance(error, dict):
        kind = error["type"] if isinstance(error.get("type"), str) else kind
        message = error["message"] if isinstance(error.get("message"), str) else message
    return error_body(message, type=kind, code=kind)
