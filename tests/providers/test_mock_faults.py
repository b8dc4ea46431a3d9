"""MockProvider's injected faults: errors at a seeded rate, error answers, latency, cut streams."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from gateway_kit import ChatCall, MockProvider
from gateway_kit.config import FaultsConfig
from gateway_kit.exceptions import UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.providers.base import ChatResponse, EmbeddingsCall
from gateway_kit.sse import SSEEvent

pytestmark = pytest.mark.anyio

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
EMBED = {"model": "e", "input": "hello", "dimensions": 8}


def mock(**faults: Any) -> MockProvider:
    return MockProvider(name="flaky", faults=FaultsConfig(**faults))


async def chat(provider: MockProvider, stream: bool = False) -> ChatResponse:
    return await provider.chat(ChatCall(dict(HELLO), None, stream=stream))


async def fails(provider: MockProvider) -> bool:
    try:
        await chat(provider)
    except UpstreamUnavailableError:
        return True
    return False


async def test_without_faults_or_at_rate_zero_every_call_succeeds() -> None:
    for provider in (MockProvider(), mock(error_rate=0.0, status=500)):
        for _ in range(50):
            assert (await chat(provider)).status == 200
        assert (await provider.embeddings(EmbeddingsCall(dict(EMBED)))).status == 200


async def test_at_rate_one_every_call_fails_chat_and_embeddings_alike() -> None:
    provider = mock(error_rate=1.0, status=503)
    for _ in range(20):
        with pytest.raises(UpstreamUnavailableError) as failed:
            await chat(provider)
        assert failed.value.status == 503
        assert failed.value.provider == "flaky"
        assert "injected fault" in str(failed.value)
    with pytest.raises(UpstreamUnavailableError):
        await provider.embeddings(EmbeddingsCall(dict(EMBED)))


async def test_a_seeded_rate_fails_about_that_share_reproducibly() -> None:
    outcomes = [await fails(mock(error_rate=0.3, seed=7)) for _ in range(3)]
    assert outcomes == [outcomes[0]] * 3  # a fresh provider with the seed starts over
    provider = mock(error_rate=0.3, seed=7)
    run = [await fails(provider) for _ in range(1000)]
    assert 250 <= sum(run) <= 350
    again = mock(error_rate=0.3, seed=7)
    assert [await fails(again) for _ in range(1000)] == run
    other = mock(error_rate=0.3, seed=8)
    assert [await fails(other) for _ in range(1000)] != run


async def test_a_refused_connection_raises_with_status_zero() -> None:
    with pytest.raises(UpstreamUnavailableError, match="refused the connection") as failed:
        await chat(mock(error_rate=1, status=0))
    assert failed.value.status == 0
    assert failed.value.retry_after is None


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529])
async def test_5xx_raise_unavailable_with_the_status(status: int) -> None:
    with pytest.raises(UpstreamUnavailableError) as failed:
        await chat(mock(error_rate=1, status=status), stream=True)
    assert failed.value.status == status


@pytest.mark.parametrize(
    ("status", "kind", "retry_after"),
    [(429, "rate_limit_error", 1.0), (408, "timeout", None)],
)
async def test_429_and_408_answer_an_openai_error_body(
    status: int, kind: str, retry_after: float | None
) -> None:
    provider = mock(error_rate=1, status=status)
    answers = [
        await chat(provider),
        await chat(provider, stream=True),
        await provider.embeddings(EmbeddingsCall(dict(EMBED))),
    ]
    for answer in answers:
        assert answer.status == status
        assert answer.events is None
        assert answer.retry_after == retry_after
        assert answer.headers == [(b"content-type", b"application/json")]
        error = json.loads(answer.body)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == kind
        assert error["param"] is None
        assert "injected fault" in error["message"]


async def test_every_call_waits_the_latency_failing_or_not() -> None:
    for provider in (mock(latency_s=0.05), mock(latency_s=0.05, error_rate=1, status=429)):
        started = time.monotonic()
        await chat(provider)
        await provider.embeddings(EmbeddingsCall(dict(EMBED)))
        assert time.monotonic() - started >= 0.09  # two waits; no upper bound asserted


async def read_until_cut(answer: ChatResponse) -> tuple[list[SSEEvent], UpstreamStreamError]:
    assert answer.events is not None
    assert answer.close is not None
    events = []
    while True:
        try:
            events.append(await anext(answer.events))
        except UpstreamStreamError as cut:
            await answer.close()
            return events, cut
        except StopAsyncIteration:
            pytest.fail("the stream ended instead of breaking")


@pytest.mark.parametrize("after", [0, 1, 3])
async def test_a_stream_breaks_after_n_events_without_done(after: int) -> None:
    whole = await chat(MockProvider(), stream=True)
    assert whole.events is not None
    complete = [event async for event in whole.events]
    events, error = await read_until_cut(await chat(mock(cut_after_events=after), stream=True))
    assert events == complete[:after]
    assert error.provider == "flaky"
    assert error.status == 200
    assert "injected fault" in str(error)


async def test_a_stream_shorter_than_the_cut_still_breaks_instead_of_done() -> None:
    whole = await chat(MockProvider(), stream=True)
    assert whole.events is not None
    complete = [event async for event in whole.events]
    events, _ = await read_until_cut(await chat(mock(cut_after_events=1000), stream=True))
    assert events == complete[:-1]
    assert complete[-1].done


async def test_the_cut_spares_whole_bodies_and_embeddings() -> None:
    provider = mock(cut_after_events=0)
    assert (await chat(provider)).status == 200
    assert (await provider.embeddings(EmbeddingsCall(dict(EMBED)))).status == 200
