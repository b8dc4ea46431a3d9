"""The request body, read once and replayed, and parsed strictly; the request context."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway_kit._asgi import Message
from gateway_kit.pipeline.body import (
    MAX_JSON_DEPTH,
    BodyTooLarge,
    ClientDisconnected,
    InvalidJSON,
    parse_json,
    read_body,
    replace_json,
)
from gateway_kit.pipeline.context import CONTEXT_KEY, get_context

pytestmark = pytest.mark.anyio


def scripted_receive(*messages: Message) -> Any:
    queue = list(messages)

    async def receive() -> Message:
        return queue.pop(0)

    return receive


def http_scope(**headers: str) -> dict[str, Any]:
    return {
        "type": "http",
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }


async def test_body_is_read_once_then_replayed_then_receive_hands_over() -> None:
    scope = http_scope()
    receive = scripted_receive(
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
        {"type": "http.disconnect"},
    )
    body, replay = await read_body(scope, receive)
    assert body == b'{"a":1}'
    # An inner layer reads it again: no network read, the same replaying receive.
    again, replay2 = await read_body(scope, replay)
    assert again == body
    assert replay2 is replay
    assert await replay() == {"type": "http.request", "body": b'{"a":1}', "more_body": False}
    assert await replay() == {"type": "http.disconnect"}


async def test_body_over_the_cap_by_content_length_is_refused_before_reading() -> None:
    async def receive() -> Message:
        raise AssertionError("must not read")

    with pytest.raises(BodyTooLarge):
        await read_body(http_scope(content_length="2048"), receive, limit=1024)


async def test_body_over_the_cap_while_streaming_is_refused() -> None:
    receive = scripted_receive(
        *[{"type": "http.request", "body": b"x" * 600, "more_body": True}] * 2,
        {"type": "http.request", "body": b"", "more_body": False},
    )
    with pytest.raises(BodyTooLarge):
        await read_body(http_scope(), receive, limit=1024)


async def test_disconnect_while_reading_the_body_is_reported() -> None:
    receive = scripted_receive({"type": "http.disconnect"})
    with pytest.raises(ClientDisconnected):
        await read_body(http_scope(), receive)


async def test_replace_json_reserializes_and_fixes_content_length() -> None:
    scope = http_scope(content_length="7")
    receive = scripted_receive({"type": "http.request", "body": b'{"a":1}'})
    _, replay = await read_body(scope, receive)
    replace_json(scope, {"a": 1, "b": "é"})
    message = await replay()
    assert json.loads(message["body"]) == {"a": 1, "b": "é"}
    assert dict(scope["headers"])[b"content-length"] == str(len(message["body"])).encode()
    assert get_context(scope).json == {"a": 1, "b": "é"}


def test_context_is_created_once_per_request() -> None:
    scope = http_scope()
    ctx = get_context(scope)
    assert get_context(scope) is ctx
    assert scope[CONTEXT_KEY] is ctx
    assert ctx.request_id.startswith("req_")


def nested(depth: int, kind: str = "[") -> bytes:
    if kind == "[":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("kind", ["[", "{"])
def test_nesting_is_accepted_to_the_depth_limit_and_refused_past_it(kind: str) -> None:
    parse_json(nested(MAX_JSON_DEPTH, kind))
    for depth in (MAX_JSON_DEPTH + 1, 900, 5000, 100_000):  # 5000: once a RecursionError
        with pytest.raises(InvalidJSON, match=f"more than {MAX_JSON_DEPTH} levels deep"):
            parse_json(nested(depth, kind))


def test_deep_nesting_is_found_among_siblings_and_named_by_its_top_level_member() -> None:
    deep = json.loads(nested(MAX_JSON_DEPTH))  # one level too many inside the object below
    body = {"model": "m", "messages": [{"role": "user"}] * 300, "tools": [1, "a", {"x": deep}]}
    with pytest.raises(InvalidJSON, match="levels deep") as caught:
        parse_json(json.dumps(body).encode())
    assert caught.value.param == "tools"
    with pytest.raises(InvalidJSON, match="levels deep") as caught:
        parse_json(nested(5000))
    assert caught.value.param is None  # Python's parser gave up first


def test_many_brackets_side_by_side_are_no_nesting() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}] * 2000
    body = {"model": "m", "messages": messages, "tools": [{"function": {"a": [[[1]]]}}] * 50}
    assert parse_json(json.dumps(body).encode()) == body


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = "[" * 1000 + "{" * 1000
    assert parse_json(json.dumps({"content": text}).encode()) == {"content": text}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'"\\ud800"', None),
        (b'{"name": "x\\uDBFFy"}', "name"),
        (b'{"messages": [{"role": "user", "content": "hi \\udc00"}]}', "messages[0].content"),
        (b'{"a": {"\\udfff": 1}}', "a"),  # a key
        (b'{"pair": "\\ude00\\ud83d"}', "pair"),  # the halves of a pair, in the wrong order
        (b'{"long": "' + b"x" * 100_000 + b'\\ud800"}', "long"),
    ],
)
def test_lone_surrogates_are_refused_and_located(body: bytes, param: str | None) -> None:
    with pytest.raises(InvalidJSON, match="lone surrogate") as caught:
        parse_json(body)
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'"\\ud83d\\ude00"', "\U0001f600"),  # a pair: one character past U+FFFF
        (b'"\\uD83D\\uDE00"', "\U0001f600"),
        (b'"\\\\ud800"', "\\ud800"),  # an escaped backslash, then text
        (b'"\\ud7ff \\ue000"', "\ud7ff \ue000"),  # either side of the surrogates
        ("\ufeff[1]".encode(), [1]),  # a byte order mark is ignored
        (b"1e-400", 0.0),
        (b"-0.5e3", -500.0),
        (b"1" + b"0" * 400, 10**400),  # an integer is exact; routes bound their own
    ],
)
def test_valid_json_is_read_as_python_reads_it(body: bytes, value: Any) -> None:
    assert parse_json(body) == value


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"NaN", "NaN"),
        (b'{"temperature": NaN}', "NaN"),
        (b"[Infinity]", "Infinity"),
        (b"-Infinity", "-Infinity"),
        (b"1e400", "past the range of a double"),
        (b"-1.5e309", "past the range of a double"),
        (b"9" * 5000, "too many digits"),
        (b"", "not valid JSON"),
        (b"{nope", "not valid JSON"),
        (b'{"a": 1} {"b": 2}', "not valid JSON"),
        (b'"\xed\xa0\x80"', "not UTF-8"),  # a surrogate encoded in UTF-8
        ('"caf\u00e9"'.encode("latin-1"), "not UTF-8"),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8"),
        ('{"a": 1}'.encode("utf-32"), "not UTF-8"),
    ],
)
def test_what_python_would_accept_or_misread_is_refused_saying_why(
    body: bytes, reason: str
) -> None:
    with pytest.raises(InvalidJSON, match=reason):
        parse_json(body)
