"""The request body, read once and replayed; the request context."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway_kit._asgi import Message
from gateway_kit.pipeline.body import BodyTooLarge, ClientDisconnected, read_body, replace_json
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
