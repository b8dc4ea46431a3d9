"""The one response wrapper: the context's headers at the start, and the start exactly once."""

from __future__ import annotations

import pytest

from gateway_kit._asgi import Message
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.response import respond_through

pytestmark = pytest.mark.anyio


async def test_the_response_starts_once_with_the_context_headers() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    ctx = RequestContext(request_id="req_1")
    ctx.headers.append((b"x-a", b"1"))
    ctx.header_sources.append(lambda c: [(b"x-b", c.request_id.encode())])
    wrapped = respond_through(ctx, send)
    await wrapped({"type": "http.response.start", "status": 200, "headers": [(b"x-own", b"0")]})
    assert ctx.status == 200
    assert not ctx.responded
    assert sent[0]["headers"] == [(b"x-own", b"0"), (b"x-a", b"1"), (b"x-b", b"req_1")]
    with pytest.raises(RuntimeError, match="twice"):
        await wrapped({"type": "http.response.start", "status": 500, "headers": []})
    await wrapped({"type": "http.response.body", "body": b"", "more_body": False})
    assert ctx.responded
