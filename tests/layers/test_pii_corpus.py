"""PII masking against the labelled corpus (``gateway_kit/bench/data/pii_corpus.jsonl``):
detection's precision and recall, and every prompt's round trip through an upstream that
echoes what it read: the upstream never reads a raw value, and the client gets back exactly
its own text, as JSON and streamed, whatever the stream's byte boundaries."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway_kit.bench.pii_corpus import FULL_RECALL, evaluate, load_corpus
from gateway_kit.config.pii import PIIConfig
from gateway_kit.layers.pii import PIIPolicy, Vault
from gateway_kit.layers.pii.transform import RestoreTransform
from gateway_kit.sse import SSEParser
from tests.fakes import COMPLETION, DONE, FakeUpstream, chunk, provisioned

CORPUS = load_corpus()


def test_the_corpus_is_big_and_varied_enough() -> None:
    assert len(CORPUS) >= 200
    assert len({prompt["lang"] for prompt in CORPUS}) >= 5
    assert sum(1 for prompt in CORPUS if not prompt["expect"]) >= 50


def test_detection_meets_its_targets_on_the_corpus() -> None:
    score = evaluate(CORPUS)
    for kind in FULL_RECALL:
        assert score.recall(kind) == 1.0, (kind, score.errors)
    assert score.precision() >= 0.95, score.errors


class EchoUpstream(FakeUpstream):
    """Answers with the last user message it read, as JSON or as a stream of two events."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        payload = json.loads(request.content)
        text = payload["messages"][-1]["content"]
        if payload.get("stream"):
            half = len(text) // 2
            body = b"".join([chunk(text[:half]), chunk(text[half:]), chunk(finish="stop"), DONE])
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
        choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        answer = {**COMPLETION, "choices": [{**choice, "finish_reason": "stop"}]}
        return httpx.Response(200, json=answer)


@pytest.mark.anyio
async def test_every_prompt_comes_back_whole_and_no_raw_value_leaves() -> None:
    async with provisioned("scale", pii={"mode": "enforce"}) as env:
        env.upstream.__class__ = EchoUpstream
        for prompt in CORPUS:
            text = prompt["text"]
            for stream in (False, True):
                payload = {
                    "model": "gpt-fake",
                    "messages": [{"role": "user", "content": text}],
                    "stream": stream,
                }
                response = await env.recorder.request(
                    "POST", "/v1/chat/completions", json=payload, headers=env.auth()
                )
                assert response.status == 200, prompt["id"]
                if stream:
                    deltas = [
                        json.loads(e)["choices"][0]["delta"].get("content") or ""
                        for e in response.events()
                        if e != "[DONE]"
                    ]
                    assert "".join(deltas) == text, prompt["id"]
                else:
                    assert response.json()["choices"][0]["message"]["content"] == text
                sent = env.upstream.requests[-1].content.decode()
                for _, value in prompt["expect"]:
                    for written in (value, json.dumps(value)[1:-1]):
                        assert written not in sent, (prompt["id"], value)


def test_every_prompt_restores_whole_with_the_stream_cut_at_every_byte() -> None:
    """The restore's unit, the SSE parser and the transform, fed the echoed stream's bytes in
    two pieces cut at every offset (inside multi-byte characters too)."""
    policy = PIIPolicy(PIIConfig(mode="enforce"))
    for prompt in CORPUS:
        text = prompt["text"]
        if not prompt["expect"]:
            continue
        vault = Vault()
        masked = policy.mask({"messages": [{"role": "user", "content": text}]}, vault)
        echoed = masked["messages"][0]["content"]
        third = len(echoed) // 3
        body = b"".join([chunk(echoed[:third]), chunk(echoed[third:]), chunk(finish="stop"), DONE])
        for cut in range(1, len(body)):
            assert _replayed(body, cut, vault.values) == text, (prompt["id"], cut)


def _replayed(body: bytes, cut: int, values: dict[str, str]) -> str:
    parser, transform, out = SSEParser(), RestoreTransform(values), []
    for piece in (body[:cut], body[cut:]):
        for event in parser.feed(piece):
            out += transform.event(event)
    out += transform.close()
    deltas = [e.json()["choices"][0]["delta"].get("content") or "" for e in out if not e.done]
    return "".join(deltas)


def test_a_corpus_prompt_masks_into_placeholders_only() -> None:
    policy = PIIPolicy(PIIConfig(mode="enforce"))
    for prompt in CORPUS:
        vault = Vault()
        masked = policy.mask({"messages": [{"role": "user", "content": prompt["text"]}]}, vault)
        content = masked["messages"][0]["content"]
        for _, value in prompt["expect"]:
            assert value not in content, (prompt["id"], value)
