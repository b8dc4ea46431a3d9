"""The exact cache through the whole stack: hits in JSON and streamed, what is never stored,
what is never served to another request, quota and savings on a hit, purges, PII masking's
placeholders in keys and stored answers, monitor mode and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway_kit import Gateway, GatewayConfig, MemoryStorage, create_app
from gateway_kit.cache.store import CacheKey
from gateway_kit.exceptions import StorageError
from gateway_kit.testing import ASGIRecorder
from tests.fakes import COMPLETION, DONE, FakeUpstream, ScriptedStream, chunk, provisioned

pytestmark = pytest.mark.anyio

PRICED = {
    "models": [
        {"name": "gpt-fake", "provider": "up", "price_as": "gpt-4o-mini"},
        {"name": "gpt-other", "provider": "up", "price_as": "gpt-4o-mini"},
    ]
}
BASE: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    "temperature": 0,
}


def answer(content: str = "Paris.", finish: str = "stop", **message: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": content, **message}}
    return {
        **COMPLETION,
        "choices": [{**choice, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23},
    }


def streamed(*pieces: str, finish: str = "stop") -> ScriptedStream:
    usage = {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}
    events = [chunk(role="assistant"), *(chunk(p) for p in pieces), chunk(finish=finish)]
    tail = b"data: " + json.dumps({**COMPLETION, "choices": [], "usage": usage}).encode()
    return ScriptedStream([*events, tail + b"\n\n", DONE])


def text_of(response: Any) -> str:
    return "".join(
        json.loads(e)["choices"][0]["delta"].get("content") or ""
        for e in response.events()
        if e != "[DONE]" and json.loads(e)["choices"]
    )


async def test_the_same_request_again_is_answered_from_the_cache() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = answer()
        first = await env.chat(**BASE)
        assert first.status == 200
        assert first.headers["x-gateway-cache"] == "miss"
        second = await env.chat(**BASE)
        assert second.status == 200
        assert second.headers["x-gateway-cache"] == "hit"
        assert env.upstream.calls == 1
        body = second.json()
        assert body["choices"][0]["message"]["content"] == "Paris."
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["usage"]["total_tokens"] == 23
        assert body["id"] != first.json()["id"]  # each answer has an id of its own
        # Nothing paid upstream; the whole flagship baseline saved.
        assert second.headers["x-gateway-cost-usd"] == "0.000000"
        assert float(second.headers["x-gateway-savings-usd"]) > 0
        assert second.headers["x-gateway-model"] == "gpt-fake"


async def test_key_order_whitespace_and_volatile_fields_do_not_change_the_key() -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        body = json.dumps({"temperature": 0, "model": "gpt-fake", **BASE}, indent=2)
        again = await env.recorder.request(
            "POST",
            "/v1/chat/completions",
            body=body.encode(),
            headers={**env.auth(), "content-type": "application/json"},
        )
        assert again.headers["x-gateway-cache"] == "hit"
        volatile = await env.chat(**BASE, user="u-2", metadata={"run": "7"}, stream=False)
        assert volatile.headers["x-gateway-cache"] == "hit"
        assert env.upstream.calls == 1


async def test_a_hit_counts_against_the_quota_and_its_savings_are_the_workspaces() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        used = await env.used_requests()
        await env.chat(**BASE)
        assert await env.used_requests() == used + 1
        savings_after_miss = await env.gateway.ledger.savings(env.workspace_id)
        await env.chat(**BASE)
        # The hit paid nothing and saved the flagship's price of the whole answer.
        assert await env.gateway.ledger.savings(env.workspace_id) > savings_after_miss


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"temperature": None}, "temperature-unset"),
        ({"temperature": 0.7}, "temperature"),
        ({"n": 2}, "n"),
        ({"cache": False}, "opt-out"),
        ({"cache": {"no-store": True}}, "opt-out"),
        ({"logprobs": True, "top_logprobs": 2}, "logprobs"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ],
)
async def test_requests_the_cache_may_not_serve_go_upstream_every_time(
    change: dict[str, Any], reason: str
) -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        fields = {k: v for k, v in {**BASE, **change}.items() if v is not None}
        for _ in range(2):
            response = await env.chat(**fields)
            assert response.status == 200
            assert response.headers["x-gateway-cache"] == "bypass"
            assert response.headers["x-gateway-cache-reason"] == reason
        assert env.upstream.calls == 2
        assert "cache" not in env.upstream.sent_json()  # ours: never sent upstream


async def test_a_request_for_logprobs_gets_them_every_time() -> None:
    """A kept answer has no token logprobs: a request that asks for them is never served
    one (it would get ``"logprobs": null`` from a hit where upstream gave them)."""
    logprobs = {
        "content": [{"token": "Paris", "logprob": -0.01, "bytes": None, "top_logprobs": []}]
    }
    async with provisioned("scale") as env:
        body = answer()
        body["choices"][0]["logprobs"] = logprobs
        env.upstream.json_body = body
        for _ in range(2):
            response = await env.chat(**BASE, logprobs=True)
            assert response.json()["choices"][0]["logprobs"] == logprobs
        assert env.upstream.calls == 2


@pytest.mark.parametrize("directive", ["no-store", "no-cache", "max-age=0, no-cache"])
async def test_cache_control_on_the_request_bypasses_the_cache(directive: str) -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        payload = {"model": "gpt-fake", **BASE}
        response = await env.recorder.request(
            "POST",
            "/v1/chat/completions",
            json=payload,
            headers={**env.auth(), "cache-control": directive},
        )
        assert response.headers["x-gateway-cache"] == "bypass"
        assert env.upstream.calls == 2


@pytest.mark.parametrize(
    "lines", [["max-age=100", "no-store"], ["public", "no-cache"], ["public", "max-age=0"]]
)
async def test_every_line_of_cache_control_is_read(lines: list[str]) -> None:
    """Lines of one header are one list (RFC 9110 5.3): an opt-out on the second line was
    not read, and the answer kept was served."""
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        headers = [*env.auth().items(), *(("cache-control", line) for line in lines)]
        response = await env.recorder.request(
            "POST", "/v1/chat/completions", json={"model": "gpt-fake", **BASE}, headers=headers
        )
        assert response.headers["x-gateway-cache"] in ("bypass", "miss")
        assert env.upstream.calls == 2


@pytest.mark.parametrize(
    ("cache", "param"),
    [
        ("yes", "cache"),
        ([], "cache"),
        ({"no-cache": "true"}, "cache.no-cache"),
        ({"no-store": 1}, "cache.no-store"),
        ({"ttl": 0}, "cache.ttl"),
        ({"ttl": "60"}, "cache.ttl"),
        ({"s-maxage": -1}, "cache.s-maxage"),
        ({"s-maxage": True}, "cache.s-maxage"),
        ({"namespace": ""}, "cache.namespace"),
        ({"namespace": ["team"]}, "cache.namespace"),
        ({"namespace": "x" * 257}, "cache.namespace"),
        ({"type": "redis", "ttl": 60}, "cache.type"),  # ignored, it would be a surprise
    ],
)
async def test_a_cache_field_the_gateway_cannot_follow_is_a_400(cache: Any, param: str) -> None:
    async with provisioned("scale") as env:
        response = await env.chat(**BASE, cache=cache)
        assert response.status == 400
        assert response.json()["error"]["param"] == param
        assert response.json()["error"]["type"] == "invalid_request_error"
        assert env.upstream.calls == 0


async def chat_with(env: Any, headers: dict[str, str], **body: Any) -> Any:
    return await env.recorder.request(
        "POST",
        "/v1/chat/completions",
        json={"model": "gpt-fake", **BASE, **body},
        headers={**env.auth(), **headers},
    )


async def test_an_answer_older_than_the_request_accepts_is_a_miss_and_kept_anew() -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer("Paris.")
        assert (await env.chat(**BASE)).headers["x-gateway-cache"] == "miss"
        env.clock.advance(120)
        young_enough = await env.chat(**BASE, cache={"s-maxage": 300})
        assert young_enough.headers["x-gateway-cache"] == "hit"
        assert young_enough.headers["age"] == "120"
        env.upstream.json_body = answer("Paris, France.")
        too_old = await env.chat(**BASE, cache={"s-maxage": 60})
        assert too_old.headers["x-gateway-cache"] == "miss"
        assert too_old.json()["choices"][0]["message"]["content"] == "Paris, France."
        env.clock.advance(30)
        kept_anew = await env.chat(**BASE)
        assert kept_anew.headers["x-gateway-cache"] == "hit"
        assert kept_anew.headers["age"] == "30"
        assert kept_anew.json()["choices"][0]["message"]["content"] == "Paris, France."
        # HTTP's request directive says the same; the stricter of the two wins.
        for directive, state in [
            ("max-age=0", "miss"),  # a fresh answer, kept in the old one's place
            ("max-age=10", "miss"),
            ("max-age=600", "hit"),
            ('max-age="600"', "hit"),
            ("max-age=soon", "hit"),  # not a number of seconds: ignored, as HTTP caches do
            ("max-age=" + "9" * 5000, "hit"),  # past any bound (it was a 500)
        ]:
            response = await chat_with(env, {"cache-control": directive})
            assert response.headers["x-gateway-cache"] == state, directive
            env.clock.advance(30)  # the miss above kept a new answer: let it age again
        response = await chat_with(env, {"cache-control": "max-age=600"}, cache={"s-maxage": 5})
        assert response.headers["x-gateway-cache"] == "miss"
        assert env.upstream.calls == 5


async def test_a_namespace_shares_answers_only_within_itself() -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        states = [
            (await env.chat(**BASE, **fields)).headers["x-gateway-cache"]
            for fields in (
                {},
                {"cache": {"namespace": "team-a"}},
                {"cache": {"namespace": "team-a", "ttl": 60}},
                {"cache": {"namespace": "team-b"}},
                {},
            )
        ]
        assert states == ["miss", "miss", "hit", "miss", "hit"]
        assert env.upstream.calls == 3


@pytest.mark.parametrize("store", ["local", "storage"])
async def test_a_requests_ttl_keeps_its_answer_that_long_within_the_configured_one(
    store: str,
) -> None:
    async with provisioned("scale", cache={"store": store, "ttl_s": 600}) as env:
        env.upstream.json_body = answer()
        short = {"cache": {"ttl": 60}}
        assert (await env.chat(**BASE, **short)).headers["x-gateway-cache"] == "miss"
        env.clock.advance(59)
        assert (await env.chat(**BASE)).headers["x-gateway-cache"] == "hit"
        env.clock.advance(2)
        assert (await env.chat(**BASE, cache={"ttl": 10**9})).headers["x-gateway-cache"] == "miss"
        env.clock.advance(599)
        assert (await env.chat(**BASE)).headers["x-gateway-cache"] == "hit"
        env.clock.advance(2)  # a longer ttl than the configuration's is the configuration's
        assert (await env.chat(**BASE)).headers["x-gateway-cache"] == "miss"
        assert env.upstream.calls == 3


TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize(
    "change",
    [
        {"model": "gpt-other"},
        {"messages": [{"role": "system", "content": "Be kind."}, *BASE["messages"][1:]]},
        {"messages": [*BASE["messages"][:1], {"role": "user", "content": "And of Spain?"}]},
        {"messages": [*BASE["messages"], {"role": "assistant", "content": "Paris."}]},
        {"tools": [TOOL]},
        {"tools": [TOOL], "tool_choice": "required"},
        {"response_format": {"type": "json_object"}},
        {"top_p": 0.5},
        {"seed": 7},
        {"max_tokens": 5},
        {"stop": ["."]},
        {"presence_penalty": 0.5},
        {"logit_bias": {"50256": -100}},
        {"reasoning_effort": "high"},
    ],
    ids=lambda change: "-".join(change),
)
async def test_a_request_that_differs_in_one_thing_never_hits(change: dict[str, Any]) -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = answer()
        base = {"tools": [TOOL]} if "tool_choice" in change else {}
        assert (await env.chat(**BASE, **base)).headers["x-gateway-cache"] == "miss"
        response = await env.chat(**{**BASE, **change})
        assert response.headers["x-gateway-cache"] == "miss"
        assert env.upstream.calls == 2


async def test_another_workspaces_request_never_hits() -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        other = await env.gateway.workspaces.create("other@example.com", plan="scale")
        made = await env.gateway.keys.create(other.id)
        response = await env.chat(key=made.secret, **BASE)
        assert response.headers["x-gateway-cache"] == "miss"
        assert env.upstream.calls == 2


async def test_the_shared_scope_serves_every_workspace() -> None:
    async with provisioned("scale", cache={"scope": "shared"}) as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        other = await env.gateway.workspaces.create("other@example.com", plan="scale")
        made = await env.gateway.keys.create(other.id)
        response = await env.chat(key=made.secret, **BASE)
        assert response.headers["x-gateway-cache"] == "hit"


@pytest.mark.parametrize(
    "upstream",
    [
        {"json_body": answer(finish="length")},
        {"json_body": answer(finish="content_filter")},
        {"status": 500, "json_body": {"error": {"message": "boom", "type": "server_error"}}},
        {"status": 400, "json_body": {"error": {"message": "bad", "type": "invalid_request"}}},
        {
            "json_body": {
                **answer(),
                "choices": [answer()["choices"][0], {**answer()["choices"][0], "index": 1}],
            }
        },
    ],
    ids=["length", "content-filter", "500", "400", "two-choices"],
)
async def test_answers_that_are_not_whole_are_never_stored(upstream: dict[str, Any]) -> None:
    async with provisioned("scale") as env:
        for name, value in upstream.items():
            setattr(env.upstream, name, value)
        await env.chat(**BASE)
        env.clock.advance(60)  # past a cooldown the 500s started
        calls = env.upstream.calls
        again = await env.chat(**BASE)
        assert again.headers["x-gateway-cache"] == "miss"
        assert env.upstream.calls > calls


async def test_a_streamed_answer_is_stored_and_served_as_json_and_as_a_stream() -> None:
    async with provisioned("scale") as env:
        env.upstream.stream = streamed("Par", "is", ".")
        first = await env.chat(**BASE, stream=True)
        assert first.headers["x-gateway-cache"] == "miss"
        assert text_of(first) == "Paris."
        env.upstream.stream = None
        as_json = await env.chat(**BASE)
        assert as_json.headers["x-gateway-cache"] == "hit"
        assert as_json.json()["choices"][0]["message"]["content"] == "Paris."
        replay = await env.chat(**BASE, stream=True)
        assert replay.headers["x-gateway-cache"] == "hit"
        assert replay.headers["content-type"].startswith("text/event-stream")
        events = replay.events()
        assert events[-1] == "[DONE]"
        assert text_of(replay) == "Paris."
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert not any("usage" in c for c in chunks)  # the client did not ask for it
        # The cost comes as a live stream's does, a comment just before [DONE] (hits had none).
        body = replay.body.decode()
        comment = ": x-gateway-cost-usd=0.000000 x-gateway-savings-usd="
        assert comment in body
        assert body.index(comment) < body.index("data: [DONE]")
        with_usage = await env.chat(**BASE, stream=True, stream_options={"include_usage": True})
        last = json.loads(with_usage.events()[-2])
        assert last["choices"] == []
        assert last["usage"]["total_tokens"] == 23
        assert env.upstream.calls == 1


def delta_text(response: Any, field: str) -> str:
    return "".join(
        json.loads(e)["choices"][0]["delta"].get(field) or ""
        for e in response.events()
        if e != "[DONE]" and json.loads(e)["choices"]
    )


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_a_reasoning_models_thinking_is_kept_and_replayed(field: str) -> None:
    """OpenAI-compatible reasoning models (DeepSeek, vLLM, Ollama, OpenRouter, Groq) send their
    thinking beside the content; a hit gives it back, JSON or streamed, before the content."""
    usage = {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}
    tail = b"data: " + json.dumps({**COMPLETION, "choices": [], "usage": usage}).encode()
    thinking = [
        chunk(role="assistant"),
        chunk(**{field: "France's "}),
        chunk(**{field: "capital."}),
    ]
    async with provisioned("scale") as env:
        env.upstream.stream = ScriptedStream(
            [*thinking, chunk("Paris."), chunk(finish="stop"), tail + b"\n\n", DONE]
        )
        first = await env.chat(**BASE, stream=True)
        assert delta_text(first, field) == "France's capital."
        env.upstream.stream = None
        replay = await env.chat(**BASE, stream=True)
        assert replay.headers["x-gateway-cache"] == "hit"
        assert delta_text(replay, field) == "France's capital."
        assert text_of(replay) == "Paris."
        fields = [
            next(iter(json.loads(e)["choices"][0]["delta"]), None) for e in replay.events()[:-1]
        ]
        assert fields.index(field) < fields.index("content")  # the thinking comes first
        message = (await env.chat(**BASE)).json()["choices"][0]["message"]
        assert message[field] == "France's capital."
        assert message["content"] == "Paris."
        assert env.upstream.calls == 1
    async with provisioned("scale") as env:  # kept from JSON, replayed as a stream
        env.upstream.json_body = answer(**{field: "France's capital."})
        await env.chat(**BASE)
        replay = await env.chat(**BASE, stream=True)
        assert replay.headers["x-gateway-cache"] == "hit"
        assert delta_text(replay, field) == "France's capital."


async def test_a_stream_with_a_part_the_cache_cannot_replay_is_not_kept() -> None:
    """A delta field that is not text (a provider's own structure) could not be given back as
    it came: that answer is not kept, rather than served without it."""
    citation = {"type": "url_citation", "url_citation": {"url": "https://example.com"}}
    async with provisioned("scale") as env:
        env.upstream.stream = ScriptedStream(
            [chunk("Paris."), chunk(annotations=[citation]), chunk(finish="stop"), DONE]
        )
        await env.chat(**BASE, stream=True)
        again = await env.chat(**BASE, stream=True)
        assert again.headers["x-gateway-cache"] == "miss"
        assert env.upstream.calls == 2


async def test_a_providers_own_fields_come_back_on_a_hit() -> None:
    """Perplexity's citations (top-level, in the body and in every chunk) are the answer's:
    a hit without them would be a worse answer."""
    citations = ["https://en.wikipedia.org/wiki/Paris"]
    async with provisioned("scale") as env:
        env.upstream.json_body = {**answer(), "citations": citations, "service_tier": "default"}
        await env.chat(**BASE)
        hit = await env.chat(**BASE)
        assert hit.headers["x-gateway-cache"] == "hit"
        assert hit.json()["citations"] == citations
        assert hit.json()["service_tier"] == "default"
        replay = await env.chat(**BASE, stream=True)
        chunks = [json.loads(e) for e in replay.events()[:-1]]
        assert all(c["citations"] == citations for c in chunks)
        assert env.upstream.calls == 1


async def test_a_cut_stream_is_never_stored() -> None:
    async with provisioned("scale") as env:
        env.upstream.stream = ScriptedStream([chunk(role="assistant"), chunk("Par")])
        await env.chat(**BASE, stream=True)
        env.upstream.stream = None
        env.upstream.json_body = answer()
        again = await env.chat(**BASE)
        assert again.headers["x-gateway-cache"] == "miss"


async def test_tool_calls_are_stored_and_replayed_per_call() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"q": "x" * 600})},
    }
    async with provisioned("scale") as env:
        env.upstream.json_body = answer(None, "tool_calls", tool_calls=[call])  # type: ignore[arg-type]
        await env.chat(**BASE, tools=[TOOL])
        hit = await env.chat(**BASE, tools=[TOOL])
        assert hit.headers["x-gateway-cache"] == "hit"
        message = hit.json()["choices"][0]["message"]
        assert message["tool_calls"] == [call]
        assert message["content"] is None
        replay = await env.chat(**BASE, tools=[TOOL], stream=True)
        arguments = "".join(
            d["function"].get("arguments", "")
            for e in replay.events()[:-1]
            for d in json.loads(e)["choices"][0]["delta"].get("tool_calls") or ()
        )
        assert json.loads(arguments) == {"q": "x" * 600}
        # Opened as upstreams open a tool call's stream: content null, as the message has it
        # (a replay opening with "" gave the SDK's accumulation '' where the live one had None).
        opening = json.loads(replay.events()[0])["choices"][0]["delta"]
        assert opening == {"role": "assistant", "content": None}


async def test_a_purge_empties_the_workspaces_answers_only() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        await env.chat(**BASE, model="gpt-other")
        purge = await env.recorder.request(
            "DELETE",
            f"/api/v1/workspaces/{env.workspace_id}/cache?model=gpt-other",
            headers=env.auth(),
        )
        assert purge.status == 200
        assert purge.json()["purged"] == 1
        assert (await env.chat(**BASE)).headers["x-gateway-cache"] == "hit"
        assert (await env.chat(**BASE, model="gpt-other")).headers["x-gateway-cache"] == "miss"
        purge = await env.recorder.request(
            "DELETE", f"/api/v1/workspaces/{env.workspace_id}/cache", headers=env.auth()
        )
        assert purge.json()["purged"] == 2
        assert (await env.chat(**BASE)).headers["x-gateway-cache"] == "miss"


async def test_a_purge_asks_for_a_model_name() -> None:
    async with provisioned("scale") as env:
        for query in ("?model=%20bad", "?everything=1"):
            response = await env.recorder.request(
                "DELETE", f"/api/v1/workspaces/{env.workspace_id}/cache{query}", headers=env.auth()
            )
            assert response.status == 400


async def test_the_workspaces_counts_and_hit_rate() -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        await env.chat(**BASE)
        await env.chat(**BASE)
        await env.chat(messages=BASE["messages"])  # no temperature: bypass
        stats = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/cache", headers=env.auth()
        )
        body = stats.json()
        assert (body["hits"], body["misses"], body["bypasses"], body["stored"]) == (2, 1, 1, 1)
        assert body["hit_rate"] == pytest.approx(2 / 3, abs=1e-4)
        assert body["entries"] == 1
        assert body["bytes"] > 0


async def test_monitor_mode_never_serves_but_says_what_would_have_hit() -> None:
    async with provisioned("scale", cache={"mode": "monitor"}) as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        again = await env.chat(**BASE)
        assert again.headers["x-gateway-cache"] == "miss"
        assert again.headers["x-gateway-cache-monitor"] == "hit"
        assert env.upstream.calls == 2


async def test_off_is_off() -> None:
    async with provisioned("scale", cache={"mode": "off"}) as env:
        env.upstream.json_body = answer()
        await env.chat(**BASE)
        again = await env.chat(**BASE, cache={"ttl": 60})
        assert "x-gateway-cache" not in again.headers
        assert env.upstream.calls == 2
        # The field is still gateway-kit's: checked, and never sent upstream (OpenAI would
        # refuse an argument it does not know).
        assert "cache" not in env.upstream.sent_json()
        mistaken = await env.chat(**BASE, cache={"no-store": "yes"})
        assert mistaken.status == 400
        assert mistaken.json()["error"]["param"] == "cache.no-store"
        assert env.upstream.calls == 2


async def test_a_refused_request_is_never_served_from_the_cache() -> None:
    async with provisioned("tiny") as env:  # 5 requests included
        env.upstream.json_body = answer()
        statuses = []
        for _ in range(7):
            statuses.append((await env.chat(**BASE)).status)
            env.clock.advance(30)  # within the burst limit
        assert statuses[:5] == [200] * 5
        assert set(statuses[5:]) == {402}  # the quota is spent: a hit is refused too


@pytest.mark.parametrize("pii_scope", ["full", "cache"])
async def test_with_pii_masking_keys_and_stored_answers_hold_no_raw_value(pii_scope: str) -> None:
    email = "anna.lindqvist@example.se"
    question = {"role": "user", "content": f"Write to {email} please."}
    pii = {"mode": "enforce", "scope": pii_scope, "kinds": ["EMAIL"]}
    async with provisioned("scale", pii=pii) as env:
        if pii_scope == "full":
            env.upstream.json_body = answer("Sent to <EMAIL_1>.".replace("1", "{n}"))
        else:  # the model saw the address: it is in its answer and its thinking
            env.upstream.json_body = answer(
                f"Sent to {email}.", reasoning_content=f"The user wants mail sent to {email}."
            )
        first = await env.chat(messages=[question], temperature=0)
        if pii_scope == "full":
            placeholder = env.upstream.sent_json()["messages"][0]["content"].split()[2]
            env.upstream.json_body = answer(f"Sent to {placeholder}.")
            await env.gateway.cache.store.purge()
            first = await env.chat(messages=[question], temperature=0)
        assert first.json()["choices"][0]["message"]["content"] == f"Sent to {email}."
        hit = await env.chat(messages=[question], temperature=0)
        assert hit.headers["x-gateway-cache"] == "hit"
        assert hit.json()["choices"][0]["message"]["content"] == f"Sent to {email}."
        if pii_scope == "cache":  # kept masked, given back restored
            thinking = hit.json()["choices"][0]["message"]["reasoning_content"]
            assert thinking == f"The user wants mail sent to {email}."
        replay = await env.chat(messages=[question], temperature=0, stream=True)
        assert text_of(replay) == f"Sent to {email}."
        kept = list(env.gateway.cache.local._entries.items())
        assert len(kept) == 1
        key, (_, stored) = kept[0]
        assert isinstance(key, CacheKey)
        assert email not in json.dumps(stored.message)
        assert "<EMAIL_" in stored.message["content"]


async def test_in_pii_cache_scope_tool_call_arguments_are_kept_masked_and_served_valid() -> None:
    """The model read the raw value and wrote it into the arguments, JSON-escaped (a private
    key's newlines as ``\\n``): the stored answer holds the placeholder there too, and a hit
    gives back arguments that are valid JSON holding the value."""
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34Gkx\n-----END RSA PRIVATE KEY-----"
    pii = {"mode": "enforce", "scope": "cache", "kinds": ["API_KEY"]}
    async with provisioned("scale", pii=pii) as env:
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "put", "arguments": json.dumps({"key": pem, "by": "Zoë"})},
        }
        env.upstream.json_body = answer("", tool_calls=[call])
        question = {"role": "user", "content": f"Store {pem}"}
        await env.chat(messages=[question], temperature=0)
        hit = await env.chat(messages=[question], temperature=0)
        assert hit.headers["x-gateway-cache"] == "hit"
        served = hit.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(served) == {"key": pem, "by": "Zoë"}
        ((_, stored),) = env.gateway.cache.local._entries.values()
        kept = stored.message["tool_calls"][0]["function"]["arguments"]
        assert "MIIBOgIBAAJBAKj34Gkx" not in kept
        assert json.loads(kept)["key"].startswith("<API_KEY_")


@pytest.mark.parametrize("placeholders", ["ordered", "keyed"])
async def test_in_pii_cache_scope_an_answer_is_never_served_for_other_values(
    placeholders: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In ``cache`` scope the model reads the real values, so its answer may say more of them
    than the values themselves ("Dear Anna"): two requests that mask the same (ordered
    placeholders always do, keyed ones when two values' numbers meet) but hold other values
    must never share an answer."""
    pii = {"mode": "enforce", "scope": "cache", "kinds": ["EMAIL"], "placeholders": placeholders}
    # Keyed numbers are 1 to 9999: make the two values' numbers meet.
    monkeypatch.setattr(
        "gateway_kit.layers.pii.middleware.keyed_numbering", lambda secret: lambda kind, value: 7
    )
    async with provisioned("scale", pii=pii) as env:
        asked = {"role": "user", "content": "Greet the owner of anna.lindqvist@example.se."}
        env.upstream.json_body = answer("Dear Anna, welcome.")
        first = await env.chat(messages=[asked], temperature=0)
        assert first.headers["x-gateway-cache"] == "miss"
        same = await env.chat(messages=[asked], temperature=0)
        assert same.headers["x-gateway-cache"] == "hit"  # the same values: served
        other = {"role": "user", "content": "Greet the owner of bo.nilsson@example.se."}
        env.upstream.json_body = answer("Dear Bo, welcome.")
        response = await env.chat(messages=[other], temperature=0)
        assert response.headers["x-gateway-cache"] == "miss"
        assert response.json()["choices"][0]["message"]["content"] == "Dear Bo, welcome."


class CacheStorageDown(MemoryStorage):
    """Memory storage whose cached answers cannot be read (alone, or in an admission step)."""

    async def get(self, key: str) -> bytes | None:
        if ":cache:a:" in key:
            raise StorageError("the cache's storage is down")
        return await super().get(key)

    async def incr_many(self, *args: Any, reads: Any = (), **kwargs: Any) -> Any:
        if any(":cache:a:" in key for key in reads):
            raise StorageError("the cache's storage is down")
        return await super().incr_many(*args, reads=reads, **kwargs)


@pytest.mark.parametrize(("on_error", "status"), [("open", 200), ("closed", 503)])
async def test_a_shared_store_that_fails_follows_on_error(on_error: str, status: int) -> None:
    cache = {"store": "storage", "on_error": on_error}
    async with provisioned("scale", storage_class=CacheStorageDown, cache=cache) as env:
        env.upstream.json_body = answer()
        response = await env.chat(**BASE)
        assert response.status == status
        if status == 200:
            assert response.headers["x-gateway-cache"] == "unchecked"
        else:
            assert response.json()["error"]["code"] == "cache_unavailable"


async def test_concurrent_requests_are_each_answered_and_counted_once() -> None:
    async with provisioned("scale") as env:
        env.upstream.json_body = answer()
        used = await env.used_requests()
        states: list[str] = []

        async def one() -> None:
            response = await env.chat(**BASE)
            assert response.status == 200
            assert response.json()["choices"][0]["message"]["content"] == "Paris."
            states.append(response.headers["x-gateway-cache"])

        async with anyio.create_task_group() as tasks:
            for _ in range(40):
                tasks.start_soon(one)
        assert await env.used_requests() == used + 40  # a hit is a request like any
        stats = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/cache", headers=env.auth()
        )
        body = stats.json()
        assert body["hits"] == states.count("hit")
        assert body["misses"] == states.count("miss") == env.upstream.calls
        assert body["hits"] + body["misses"] == 40
        assert body["entries"] == 1


async def test_answers_in_the_storage_outlive_a_restart(tmp_path: Path) -> None:
    from gateway_kit import SQLiteStorage
    from gateway_kit.accounts.scopes import ROLES

    config = GatewayConfig.model_validate(
        {
            "providers": [{"name": "up", "base_url": "https://upstream.test/v1"}],
            "models": [{"name": "gpt-fake", "provider": "up"}],
            "plans": {"scale": {"included_requests": 1000, "burst_limit_rpm": 600}},
            "default_plan": "scale",
            "guardian": {"mode": "off"},
            "webhooks": {"worker": False},
            "cache": {"store": "storage"},
        }
    )
    payload = {"model": "gpt-fake", **BASE}
    states, calls, key = [], [], ""
    for run in range(2):  # the same SQLite file, two gateways one after the other
        upstream = FakeUpstream(json_body=answer())
        client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
        async with (
            SQLiteStorage(tmp_path / "state.db") as storage,
            Gateway(config, storage=storage, http_client=client) as gateway,
        ):
            if run == 0:
                workspace = await gateway.workspaces.create("team@example.com")
                key = (await gateway.keys.create(workspace.id, scopes=ROLES["admin"])).secret
            recorder = ASGIRecorder(create_app(gateway=gateway))
            response = await recorder.request(
                "POST",
                "/v1/chat/completions",
                json=payload,
                headers={"authorization": f"Bearer {key}"},
            )
            assert response.status == 200
            states.append(response.headers["x-gateway-cache"])
            calls.append(upstream.calls)
    assert states == ["miss", "hit"]
    assert calls == [1, 0]
