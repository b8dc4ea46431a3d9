"""Response transforms: the chain on its own, and a toy transform through the whole gateway.

The toy, ``Shout``, upper-cases every ``hello`` in the answer's content. In a stream the word
may arrive split across events ("hel" + "lo"): it holds back the shortest suffix that could
still become the word, and gives it out with the next event, before ``[DONE]``, or at close.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from gateway_kit import Gateway, TelemetryMiddleware
from gateway_kit._asgi import ASGIApp, Message, Receive, Scope, Send
from gateway_kit.accounts.periods import period_at
from gateway_kit.chat.endpoint import ChatCompletionsEndpoint
from gateway_kit.layers.auth import AuthMiddleware
from gateway_kit.layers.budget import BudgetMiddleware
from gateway_kit.layers.limits import LimitsMiddleware
from gateway_kit.pipeline.context import RequestContext
from gateway_kit.pipeline.layer import PolicyLayer
from gateway_kit.pipeline.transforms import JSONBody, ResponseTransform, TransformChain
from gateway_kit.sse import SSEEvent
from gateway_kit.storage import Storage
from gateway_kit.testing import ASGIRecorder
from tests.fakes import DONE, ScriptedStream, chunk, provisioned

pytestmark = pytest.mark.anyio

WORD = "hello"


class Shout(ResponseTransform):
    """Upper-cases ``hello`` in content, even split across events."""

    def __init__(self) -> None:
        self.held = ""
        self.template: dict[str, Any] | None = None
        self.closed = 0

    def _shout(self, text: str, *, final: bool = False) -> str:
        text = self.held + text
        keep = 0
        if not final:  # the longest suffix that could still grow into the word
            for size in range(min(len(WORD) - 1, len(text)), 0, -1):
                if WORD.startswith(text[-size:].lower()):
                    keep = size
                    break
        out, self.held = text[: len(text) - keep], text[len(text) - keep :]
        return re.sub(WORD, WORD.upper(), out, flags=re.IGNORECASE)

    def body(self, body: JSONBody) -> None:
        document = body.json()
        for choice in document["choices"]:
            choice["message"]["content"] = self._shout(choice["message"]["content"], final=True)
        body.set_json(document)

    def _flush(self) -> list[SSEEvent]:
        if not self.held or self.template is None:
            return []
        text = self._shout("", final=True)
        return [
            SSEEvent.of_json(
                {**self.template, "choices": [{"index": 0, "delta": {"content": text}}]}
            )
        ]

    def event(self, event: SSEEvent) -> Sequence[SSEEvent]:
        if event.done:
            return [*self._flush(), event]
        if event.data is None:
            return (event,)
        document = event.json()
        delta = document["choices"][0]["delta"] if document.get("choices") else {}
        if "content" not in delta:
            return (event,)
        self.template = {k: v for k, v in document.items() if k != "choices"}
        delta["content"] = self._shout(delta["content"])
        event.set_json(document)
        return (event,)

    def close(self) -> Sequence[SSEEvent]:
        self.closed += 1
        return self._flush()


# -- the chain, without ASGI -------------------------------------------------------------------


class Tag(ResponseTransform):
    """Appends its name to every data event; holds the first event back until the second."""

    def __init__(self, name: str, *, hold_first: bool = False) -> None:
        self.name = name
        self.hold: list[SSEEvent] = []
        self.holding = hold_first

    def event(self, event: SSEEvent) -> Sequence[SSEEvent]:
        if event.data is not None:
            event.set_data(event.data + self.name)
        if self.holding:
            self.holding = False
            self.hold.append(event)
            return ()
        out, self.hold = [*self.hold, event], []
        return out

    def close(self) -> Sequence[SSEEvent]:
        out, self.hold = self.hold, []
        return [*out, SSEEvent(f"closed-{self.name}")]


def test_events_pass_through_the_chain_in_order_and_close_flushes_through_later_ones() -> None:
    chain = TransformChain([Tag("a", hold_first=True), Tag("b")])
    assert list(chain.event(SSEEvent("1"))) == []  # "a" holds it
    assert [e.data for e in chain.event(SSEEvent("2"))] == ["1ab", "2ab"]
    # a's close output goes through b (before b closes); then b's own close.
    assert [e.data for e in chain.close()] == ["closed-ab", "closed-b"]
    assert list(chain.close()) == []  # once


def test_a_changed_json_body_is_reserialized_and_an_unchanged_one_is_not() -> None:
    raw = b'{"choices": [{"message": {"content": "hello"}}]}'
    body = JSONBody(raw)
    TransformChain([ResponseTransform()]).body(body)
    assert body.encode() is raw
    TransformChain([Shout()]).body(body)
    assert json.loads(body.encode()) == {"choices": [{"message": {"content": "HELLO"}}]}


def test_the_toy_restores_a_word_split_across_events() -> None:
    shout = Shout()
    chain = TransformChain([shout])
    outputs = [
        chain.event(SSEEvent.of_json({"id": "c", "choices": [{"delta": {"content": text}}]}))
        for text in ("say hel", "lo there, he", "llo, h", "el")
    ]
    texts = [e.json()["choices"][0]["delta"]["content"] for out in outputs for e in out]
    assert texts == ["say ", "HELLO there, ", "HELLO, ", ""]
    # The stream ended on "hel": what could have been the word goes out as it was.
    [last] = chain.close()
    assert last.json()["choices"][0]["delta"]["content"] == "hel"


# -- through the gateway -----------------------------------------------------------------------


class ShoutLayer(PolicyLayer):
    """A layer whose only act is to register the toy transform."""

    def __init__(self, app: ASGIApp, *, gateway: Gateway, transforms: list[Shout]) -> None:
        super().__init__(app)
        self._gateway = gateway
        self._made = transforms

    @property
    def storage(self) -> Storage:
        return self._gateway.storage

    async def admit(
        self, ctx: RequestContext, scope: Scope, receive: Receive, send: Send
    ) -> Receive | None:
        transform = Shout()
        self._made.append(transform)
        ctx.transforms.append(transform)
        return receive


def shouting_app(gateway: Gateway, made: list[Shout]) -> ASGIApp:
    """The chat stack with the toy layer between Limits and Budget."""
    endpoint = ChatCompletionsEndpoint(gateway)
    app: ASGIApp = BudgetMiddleware(endpoint, gateway=gateway)
    app = ShoutLayer(app, gateway=gateway, transforms=made)
    app = LimitsMiddleware(app, gateway=gateway)
    return TelemetryMiddleware(AuthMiddleware(app, gateway=gateway))


async def test_the_toy_changes_a_json_answer_and_its_content_length() -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = {
            **env.upstream.json_body,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello you"}}],
        }
        made: list[Shout] = []
        app = shouting_app(env.gateway, made)
        response = await ASGIRecorder(app).request(
            "POST", "/v1/chat/completions", json=CHAT, headers=env.auth()
        )
    assert response.status == 200
    assert response.json()["choices"][0]["message"]["content"] == "HELLO you"
    assert int(response.headers["content-length"]) == len(response.body)
    assert "ratelimit" in response.headers  # the layers' headers still go out
    assert made[0].closed == 1


CHAT = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}


async def test_the_toy_works_on_a_stream_that_still_leaves_event_by_event() -> None:
    pieces = ["say hel", "lo there", " and ", "bye"]
    events = [chunk(text) for text in pieces] + [DONE]
    seen = [anyio.Event() for _ in events]

    async def wait_for_client(index: int) -> None:
        # Event i is produced only once the client has event i-1 (or, for the held "hel",
        # once the one after it arrives): a buffering gateway would deadlock here.
        if index >= 2:
            await seen[index - 2].wait()

    sent: list[int] = []

    def on_send(message: Message) -> None:
        body = message.get("body", b"")
        if message["type"] == "http.response.body" and body.startswith(b"data: {"):
            sent.append(len(sent))
            seen[len(sent) - 1].set()

    async with provisioned("scale") as env:
        env.upstream.stream = ScriptedStream(events, before_each=wait_for_client)
        made: list[Shout] = []
        with anyio.fail_after(10):
            response = await ASGIRecorder(shouting_app(env.gateway, made)).request(
                "POST",
                "/v1/chat/completions",
                json={**CHAT, "stream": True},
                headers=env.auth(),
                on_send=on_send,
            )
    starts = [m for m in response.messages if m.message["type"] == "http.response.start"]
    assert len(starts) == 1
    assert response.status == 200
    texts = [json.loads(e)["choices"][0]["delta"]["content"] for e in response.events()[:-1]]
    assert "".join(texts) == "say HELLO there and bye"
    assert texts[0] == "say "  # "hel" held back, nothing else
    # One event per body message, each sent as soon as it was ready.
    assert all(m.message["body"].count(b"\n\n") == 1 for m in response.body_messages[:-1])
    assert response.events()[-1] == "[DONE]"
    assert made[0].closed == 1


async def test_the_toy_flushes_what_it_held_before_the_error_of_a_cut_stream() -> None:
    async with provisioned("scale") as env:
        env.upstream.stream = ScriptedStream([chunk("oh hel"), chunk("l")], fail_after=2)
        made: list[Shout] = []
        response = await ASGIRecorder(shouting_app(env.gateway, made)).request(
            "POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers=env.auth()
        )
    data = response.events()
    texts = [json.loads(e)["choices"][0]["delta"]["content"] for e in data[:-1]]
    assert "".join(texts) == "oh hell"
    assert json.loads(data[-1])["error"]["code"] == "upstream_stream_error"


async def test_a_stream_the_client_abandons_closes_the_toy_and_settles() -> None:
    release = anyio.Event()

    async def stall_after_two(index: int) -> None:
        if index >= 2:
            await release.wait()  # only the client leaving ends this

    plan = {"capped": {"included_requests": 100, "burst_limit_rpm": 100, "budget_usd": "10"}}
    models = [
        {
            "name": "gpt-fake",
            "provider": "up",
            "price": {"input_usd_per_mtok": "1", "output_usd_per_mtok": "1"},
        }
    ]
    async with provisioned("capped", plans=plan, default_plan="capped", models=models) as env:
        stream = ScriptedStream(
            [chunk("hel"), chunk("lo"), chunk("more"), DONE], before_each=stall_after_two
        )
        env.upstream.stream = stream
        made: list[Shout] = []
        with anyio.fail_after(10):
            response = await ASGIRecorder(shouting_app(env.gateway, made)).request(
                "POST",
                "/v1/chat/completions",
                json={**CHAT, "stream": True},
                headers=env.auth(),
                disconnect_after=1,
            )
        assert response.disconnected_at is not None
        assert made[0].closed == 1
        assert stream.closed
        assert not stream.finished
        totals = await env.gateway.ledger.totals(env.workspace_id, period_at(env.clock(), "month"))
        assert totals.reserved == 0  # the reservation was settled, with an estimate
        assert totals.settled > 0
