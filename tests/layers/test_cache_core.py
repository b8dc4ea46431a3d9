"""The cache's parts without ASGI: eligibility and keys (``CachePolicy``), the in-process store's
bounds (``LocalCacheStore``), and answers kept and served again (``CachedAnswer``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import anyio
import pytest

from gateway_kit import MemoryStorage
from gateway_kit.cache import CachedAnswer, CacheKey, LocalCacheStore, StreamAssembler
from gateway_kit.chat.cache_field import check_cache_field
from gateway_kit.config.cache import CacheConfig
from gateway_kit.cost.usage import Usage
from gateway_kit.layers.cache.policy import CacheControls, CachePolicy
from gateway_kit.testing import FakeClock

SECRET = b"s" * 32
REQUEST: dict[str, Any] = {
    "model": "gpt-fake",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0,
}


def policy(**fields: Any) -> CachePolicy:
    return CachePolicy(CacheConfig(**fields))


def answer(content: str = "hello", **usage: int) -> CachedAnswer:
    return CachedAnswer.made("m", {"content": content}, "stop", Usage(10, 2, **usage))


@pytest.mark.parametrize(
    ("change", "header", "reason"),
    [
        ({}, "", None),
        ({"temperature": 0.0}, "", None),
        ({"n": 1}, "", None),
        ({"temperature": None}, "", "temperature-unset"),
        ({"temperature": 0.1}, "", "temperature"),
        ({"temperature": "0"}, "", "temperature"),
        ({"n": 3}, "", "n"),
        ({"cache": False}, "", "opt-out"),
        ({"cache": {"no-cache": True}}, "", "opt-out"),
        ({"cache": {"no-cache": False}}, "", None),
        ({"cache": True}, "", None),
        ({"logprobs": True}, "", "logprobs"),
        ({"logprobs": False}, "", None),
        ({"top_logprobs": 3}, "", "logprobs"),
        ({"modalities": ["text", "audio"]}, "", "audio"),
        ({"modalities": ["text"]}, "", None),
        ({}, "no-store", "cache-control"),
        ({}, "max-age=0, No-Cache", "cache-control"),
        ({}, "max-age=60", None),
    ],
)
def test_what_may_be_served_from_the_cache(
    change: dict[str, Any], header: str, reason: str | None
) -> None:
    payload = {k: v for k, v in {**REQUEST, **change}.items() if v is not None}
    assert policy().bypass_reason(payload, header) == reason


def test_a_configured_maximum_temperature() -> None:
    assert policy(max_temperature=0.5).bypass_reason({**REQUEST, "temperature": 0.5}, "") is None
    assert policy(max_temperature=0.5).bypass_reason({**REQUEST, "temperature": 0.6}, "")


def test_the_values_a_model_read_are_part_of_the_key() -> None:
    cache = policy()
    plain = cache.key(REQUEST, "gpt-fake", SECRET)
    anna = cache.key(REQUEST, "gpt-fake", SECRET, {"<EMAIL_1>": "anna@example.se"})
    assert anna == cache.key(REQUEST, "gpt-fake", SECRET, {"<EMAIL_1>": "anna@example.se"})
    assert anna not in (plain, cache.key(REQUEST, "gpt-fake", SECRET, {"<EMAIL_1>": "bo@x.se"}))
    assert cache.key(REQUEST, "gpt-fake", SECRET, {}) == plain
    parts = cache.semantic_parts(REQUEST, "gpt-fake", "e", SECRET, {"<EMAIL_1>": "a@x.se"})
    other = cache.semantic_parts(REQUEST, "gpt-fake", "e", SECRET, {"<EMAIL_1>": "b@x.se"})
    assert parts is not None
    assert other is not None
    assert parts[0] != other[0]  # another partition
    assert parts[1] == other[1] == "hi"


def test_the_key_ignores_order_and_volatile_fields_and_names_the_resolved_model() -> None:
    cache = policy()
    key = cache.key(REQUEST, "gpt-fake", SECRET)
    reordered = dict(reversed(list(REQUEST.items())))
    assert cache.key(reordered, "gpt-fake", SECRET) == key
    volatile = {**REQUEST, "stream": True, "stream_options": {"include_usage": True}}
    volatile |= {"user": "u", "metadata": {"a": "b"}, "store": True, "cache": True}
    assert cache.key(volatile, "gpt-fake", SECRET) == key
    assert cache.key({**REQUEST, "model": "auto"}, "gpt-fake", SECRET) == key
    assert cache.key(REQUEST, "gpt-other", SECRET) != key
    assert cache.key(REQUEST, "gpt-fake", b"t" * 32) != key  # keyed: the secret matters
    assert cache.key({**REQUEST, "unknown_field": 1}, "gpt-fake", SECRET) != key


@pytest.mark.parametrize(
    ("cache", "header", "controls"),
    [
        (None, "", CacheControls()),
        ({"s-maxage": 60}, "", CacheControls(max_age=60)),
        (None, "max-age=30", CacheControls(max_age=30)),
        (None, 'Max-Age="30", no-transform', CacheControls(max_age=30)),
        ({"s-maxage": 60}, "max-age=30", CacheControls(max_age=30)),  # the stricter
        ({"s-maxage": 10}, "max-age=30", CacheControls(max_age=10)),
        (None, "max-age=-1", CacheControls()),  # not delta-seconds: ignored
        (None, "max-age=1.5", CacheControls()),
        (None, "max-age=", CacheControls()),
        ({"s-maxage": 10**400}, "", CacheControls(max_age=10**12)),
        (None, "max-age=" + "9" * 5000, CacheControls(max_age=10**12)),  # was a 500
        ({"ttl": 60}, "", CacheControls(ttl=60)),
        ({"ttl": 10**9}, "", CacheControls(ttl=3600)),  # at most the configured TTL
        ({"namespace": "team-a"}, "", CacheControls(namespace="team-a")),
        ({"s-maxage": None, "ttl": None}, "", CacheControls()),
    ],
)
def test_what_a_request_asks_of_the_cache(cache: Any, header: str, controls: CacheControls) -> None:
    request = REQUEST if cache is None else {**REQUEST, "cache": cache}
    assert check_cache_field(request) is None
    assert policy(ttl_s=3600).controls(request, header) == controls


def test_an_answers_age_against_the_bound() -> None:
    assert CacheControls().accepts(None, 1000.0)
    bound = CacheControls(max_age=60)
    assert bound.accepts(940.5, 1000.0)
    assert not bound.accepts(940.0, 1000.0)
    assert not bound.accepts(None, 1000.0)  # kept before answers said when
    assert not CacheControls(max_age=0).accepts(1000.0, 1000.0)  # a fresh answer, always


def test_a_namespace_is_its_own_key_and_partition() -> None:
    cache = policy()
    plain = cache.key(REQUEST, "gpt-fake", SECRET)
    team = cache.key(REQUEST, "gpt-fake", SECRET, namespace="team")
    assert team not in (plain, cache.key(REQUEST, "gpt-fake", SECRET, namespace="other"))
    assert team == cache.key(REQUEST, "gpt-fake", SECRET, namespace="team")
    values = {"<EMAIL_1>": "a@x.se"}
    assert cache.key(REQUEST, "gpt-fake", SECRET, values, "team") not in (
        team,
        cache.key(REQUEST, "gpt-fake", SECRET, values),
    )
    # No request field spells a namespace: the field is part of the request, not a namespace.
    assert cache.key({**REQUEST, "namespace": "team"}, "gpt-fake", SECRET) != team
    parts = cache.semantic_parts(REQUEST, "gpt-fake", "e", SECRET, namespace="team")
    plain_parts = cache.semantic_parts(REQUEST, "gpt-fake", "e", SECRET)
    assert parts is not None
    assert plain_parts is not None
    assert parts[0] != plain_parts[0]


def test_the_store_keeps_at_most_its_entries_least_recently_used_first() -> None:
    store = LocalCacheStore(max_entries=2, max_bytes=10**6, max_entry_bytes=10**5, ttl_s=60)
    one, two, three = (CacheKey("ws", "m", str(i)) for i in range(3))
    store.put_now(one, answer())
    store.put_now(two, answer())
    assert store.get_now(one) is not None  # one is now the most recent
    store.put_now(three, answer())
    assert store.get_now(two) is None
    assert store.get_now(one) is not None
    assert store.get_now(three) is not None
    assert store.evicted == 1


def test_the_store_keeps_at_most_its_bytes() -> None:
    size = answer("x" * 1000).size
    store = LocalCacheStore(max_entries=100, max_bytes=size * 3, max_entry_bytes=size * 2, ttl_s=60)
    for index in range(10):
        assert store.put_now(CacheKey("ws", "m", str(index)), answer("x" * 1000))
        assert store.figures_now().bytes <= size * 3
    assert len(store) == 3
    assert not store.put_now(CacheKey("ws", "m", "big"), answer("x" * 5000))  # over an entry's
    assert store.get_now(CacheKey("ws", "m", "big")) is None


def test_entries_expire_after_their_time_to_live() -> None:
    clock = FakeClock(1000.0)
    store = LocalCacheStore(
        max_entries=10, max_bytes=10**6, max_entry_bytes=10**5, ttl_s=60, clock=clock
    )
    key = CacheKey("ws", "m", "k")
    store.put_now(key, answer())
    clock.advance(59)
    assert store.get_now(key) is not None
    clock.advance(2)
    assert store.get_now(key) is None
    assert store.figures_now().entries == 0
    # An answer's own TTL, within the store's.
    store.put_now(key, answer(), ttl_s=10)
    store.put_now(CacheKey("ws", "m", "long"), answer(), ttl_s=10**6)
    clock.advance(11)
    assert store.get_now(key) is None
    clock.advance(48)
    assert store.get_now(CacheKey("ws", "m", "long")) is not None
    clock.advance(2)
    assert store.get_now(CacheKey("ws", "m", "long")) is None


def test_purges_by_scope_model_and_everything() -> None:
    store = LocalCacheStore(max_entries=10, max_bytes=10**6, max_entry_bytes=10**5, ttl_s=60)
    for scope in ("ws_a", "ws_b"):
        for model in ("m1", "org/m2"):
            store.put_now(CacheKey(scope, model, "k"), answer())
    assert store.purge_now("ws_a", "org/m2") == 1
    assert store.figures_now("ws_a").entries == 1
    assert store.purge_now(None, "m1") == 2  # every scope's m1
    assert store.figures_now().entries == 1
    store.purge_now("ws_b")
    assert store.figures_now().entries == 0
    assert store.figures_now().bytes == 0


def test_a_stream_put_back_together_serves_as_json_and_as_chunks() -> None:
    stream = StreamAssembler()
    stream.add({"model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    for piece in ("Hel", "lo ", "wörld"):
        stream.add({"choices": [{"index": 0, "delta": {"content": piece}}]})
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}
    stream.add({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    for piece in ('{"a"', ": 1}"):
        arguments = {"index": 0, "function": {"arguments": piece}}
        stream.add({"choices": [{"index": 0, "delta": {"tool_calls": [arguments]}}]})
    stream.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    kept = stream.answer(Usage(5, 4))
    assert kept is not None
    message = json.loads(kept.body())["choices"][0]["message"]
    assert message["content"] == "Hello wörld"
    assert message["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    events = kept.events(include_usage=False)
    assert events[-1].done
    again = StreamAssembler()
    for event in events[:-1]:
        again.add(event.json())
    assert again.answer(Usage(5, 4)) == kept


@pytest.mark.parametrize(
    "chunk",
    [
        {"choices": [{"index": 1, "delta": {"content": "x"}}]},
        {"error": {"message": "boom"}},
        "not a chunk",
        {"choices": [{"index": 0, "delta": {"annotations": [{"type": "url_citation"}]}}]},
    ],
)
def test_a_stream_that_is_not_one_whole_answer_is_not_kept(chunk: Any) -> None:
    stream = StreamAssembler()
    stream.add({"choices": [{"index": 0, "delta": {"content": "x"}}]})
    stream.add(chunk)
    stream.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    assert stream.answer(Usage(1, 1)) is None


def test_a_reasoning_models_thinking_is_put_back_together_and_replayed_first() -> None:
    stream = StreamAssembler()
    stream.add({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    for piece in ("Let me ", "think." * 100):  # replayed in more pieces than it came in
        stream.add({"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]})
    nothing = {"content": None, "reasoning_content": None, "tool_calls": [], "audio": {}}
    stream.add({"choices": [{"index": 0, "delta": {**nothing, "content": "Done."}}]})
    stream.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    kept = stream.answer(Usage(5, 4))
    assert kept is not None
    assert kept.message == {
        "role": "assistant",
        "reasoning_content": "Let me " + "think." * 100,
        "content": "Done.",
    }
    assert json.loads(kept.body())["choices"][0]["message"]["reasoning_content"].startswith("Let")
    events = kept.events(include_usage=False)
    deltas = [event.json()["choices"][0]["delta"] for event in events[:-1]]
    assert [next(iter(d), None) for d in deltas] == [
        "role", "reasoning_content", "reasoning_content", "reasoning_content", "content", None
    ]  # fmt: skip
    again = StreamAssembler()
    for event in events[:-1]:
        again.add(event.json())
    assert again.answer(Usage(5, 4)) == kept


def test_a_providers_own_fields_are_kept_from_a_stream_and_given_back_in_every_chunk() -> None:
    citations = ["https://example.com/a", "https://example.com/b"]
    stream = StreamAssembler()
    for piece, padding in (("Par", "xq"), ("is.", "k")):  # OpenAI's padding: not the answer's
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}}], "obfuscation": padding}
        stream.add({**chunk, "citations": citations[:1] if piece == "Par" else citations})
    stream.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    kept = stream.answer(Usage(5, 4))
    assert kept is not None
    assert kept.extra == {"citations": citations}  # as the latest chunk had them
    assert json.loads(kept.body())["citations"] == citations
    events = kept.events(include_usage=True)
    assert all(event.json()["citations"] == citations for event in events[:-1])
    assert not any("obfuscation" in event.json() for event in events[:-1])


def test_an_answer_read_back_from_the_storage_is_the_same_answer() -> None:
    document = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi", "reasoning": "Greet."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
        "system_fingerprint": "fp_1",
        "service_tier": "default",
        "citations": ["https://example.com"],
    }
    kept = CachedAnswer.of_body(document, Usage(5, 4, reasoning_tokens=1))
    assert kept is not None
    assert kept.extra == {"service_tier": "default", "citations": ["https://example.com"]}
    assert CachedAnswer.of_bytes(kept.to_bytes()) == kept
    dated = dataclasses.replace(kept, stored_at=1_795_000_000.5)
    assert CachedAnswer.of_bytes(dated.to_bytes()) == dated
    served = json.loads(kept.body())
    assert served.pop("id").startswith("chatcmpl-")
    assert isinstance(served.pop("created"), int)
    message = {"role": "assistant", "content": "Hi", "refusal": None, "reasoning": "Greet."}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
    assert served == {**document, "object": "chat.completion", "choices": [choice]}


def test_each_serving_has_its_own_id_and_time_and_the_same_answer() -> None:
    kept = answer("Grüße \u2028 </script> «ok»")
    first, second = kept.body(), kept.body()
    assert list(json.loads(first)) == ["id", "object", "created", "model", "choices", "usage"]
    one, two = json.loads(first), json.loads(second)
    assert one.pop("id") != two.pop("id")
    assert abs(one.pop("created") - two.pop("created")) <= 1
    assert one == two
    assert one["choices"][0]["message"]["content"] == "Grüße \u2028 </script> «ok»"


def test_a_cut_or_truncated_stream_is_not_kept() -> None:
    stream = StreamAssembler()
    stream.add({"choices": [{"index": 0, "delta": {"content": "x"}}]})
    assert stream.answer(Usage(1, 1)) is None  # no finish
    stream.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    assert stream.answer(Usage(1, 1)) is None


@pytest.mark.anyio
async def test_the_shared_store_bounds_each_scope_and_purges_by_model_and_everything() -> None:
    from gateway_kit import MemoryStorage
    from gateway_kit.cache.shared import StorageCacheStore

    clock = FakeClock(1000.0)
    size = answer("x" * 100).size
    async with MemoryStorage(clock=clock) as storage:
        store = StorageCacheStore(
            storage,
            max_entries=10,
            max_bytes=size * 8,
            max_entry_bytes=size * 4,
            ttl_s=60,
            clock=clock,
            prune_every=1,
        )
        for index in range(30):
            assert await store.put(CacheKey("ws_a", "m1", f"k{index}"), answer("x" * 100))
            figures = await store.figures("ws_a")
            assert figures.entries <= 8  # the bytes bound is the tighter here
            assert figures.bytes <= size * 8
        assert await store.get(CacheKey("ws_a", "m1", "k29")) is not None
        assert await store.get(CacheKey("ws_a", "m1", "k0")) is None
        assert not await store.put(CacheKey("ws_a", "m1", "big"), answer("x" * 5000))
        await store.put(CacheKey("ws_b", "m2", "k"), answer())
        await store.put(CacheKey("ws_b", "m3", "k2"), answer())
        assert await store.purge("ws_b", "m2") == 1
        assert await store.get(CacheKey("ws_b", "m3", "k2")) is not None
        assert await store.purge(None) == 9  # every scope: ws_a's 8 and ws_b's last
        clock.advance(61)
        await store.put(CacheKey("ws_c", "m1", "k"), answer())
        assert (await store.figures("ws_c")).entries == 1


@pytest.mark.anyio
async def test_traffic_alternating_between_workspaces_keeps_each_within_its_bound() -> None:
    """The prune ran every 64 additions of the process, for the scope of the 64th: with two
    workspaces taking turns one of them was never pruned (200 answers kept under a bound of
    3). Counted per scope now, and a small bound checked as often as it could be passed."""
    from gateway_kit import MemoryStorage
    from gateway_kit.cache.shared import StorageCacheStore

    clock = FakeClock(1000.0)
    async with MemoryStorage(clock=clock) as storage:
        store = StorageCacheStore(
            storage, max_entries=3, max_bytes=10**6, max_entry_bytes=10**5, ttl_s=60, clock=clock
        )
        for index in range(200):
            scope = ("ws_x", "ws_y")[index % 2]
            await store.put(CacheKey(scope, "m", f"k{index}"), answer())
        assert (await store.figures("ws_x")).entries <= 3
        assert (await store.figures("ws_y")).entries <= 3
        clock.advance(61)  # expired, not yet pruned: no longer counted
        assert (await store.figures("ws_x")).entries == 0
        assert (await store.figures("ws_x")).bytes == 0


@pytest.mark.anyio
async def test_counts_are_added_up_and_written_once_per_workspace() -> None:
    from gateway_kit import MemoryStorage
    from gateway_kit.cache.counts import CacheCounters
    from gateway_kit.exceptions import StorageError

    class Failing(MemoryStorage):
        down = True

        async def incr_many(self, *args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise StorageError("down")
            return await super().incr_many(*args, **kwargs)

    async with Failing() as storage:
        counters = CacheCounters(storage)
        for _ in range(3):
            counters.add("ws_a:cache:hit")
        counters.add("ws_b:cache:miss", 2)
        assert counters.pending("ws_a:cache:hit") == 3
        await counters.flush()  # the storage is down: nothing lost
        assert counters.pending("ws_a:cache:hit") == 3
        storage.down = False
        await counters.flush()
        assert counters.pending("ws_a:cache:hit") == 0
        assert await storage.get("ws_a:cache:hit") == b"3"
        assert await storage.get("ws_b:cache:miss") == b"2"
        counters.add("ws_a:cache:hit")
        async with anyio.create_task_group() as tasks:
            await tasks.start(counters.run)
            tasks.cancel_scope.cancel()  # a shutdown: the last counts are written
        assert await storage.get("ws_a:cache:hit") == b"4"


def _unit(*values: float) -> Any:
    numpy = pytest.importorskip("numpy")
    vector = numpy.asarray(values, dtype=numpy.float32)
    return vector / numpy.linalg.norm(vector)


class _CountingStorage(MemoryStorage):
    """Memory storage that lists the maps read whole (``map_items``)."""

    def __init__(self) -> None:
        super().__init__()
        self.whole: list[str] = []

    async def map_items(self, key: str) -> dict[str, bytes]:
        self.whole.append(key)
        return await super().map_items(key)


@pytest.mark.anyio
async def test_the_shared_index_reads_only_what_changed_in_a_partition() -> None:
    pytest.importorskip("numpy")
    from gateway_kit.cache.index import IndexEntry
    from gateway_kit.cache.shared import StorageVectorIndex

    async with _CountingStorage() as storage:
        mine = StorageVectorIndex(storage, per_partition=10)
        theirs = StorageVectorIndex(storage, per_partition=10)  # another gateway process
        await theirs.add("ws", "p", IndexEntry(_unit(1, 0), "first", CacheKey("ws", "m", "a")))
        matches, best = await mine.search("ws", "p", _unit(1, 0), threshold=0.9)
        assert [m.entry.text for m in matches] == ["first"]
        assert best == pytest.approx(1.0, abs=1e-3)
        assert storage.whole == ["ws:cache:v:p"]  # the first search reads it whole
        storage.whole.clear()
        for _ in range(3):  # unchanged: the mirror answers
            await mine.search("ws", "p", _unit(1, 0), threshold=0.9)
        # Changed elsewhere: the changes are read from the log, never the whole partition.
        await theirs.add("ws", "p", IndexEntry(_unit(0, 1), "second", CacheKey("ws", "m", "b")))
        matches, _ = await mine.search("ws", "p", _unit(0, 1), threshold=0.9)
        assert [m.entry.text for m in matches] == ["second"]
        await theirs.forget("ws", "p", CacheKey("ws", "m", "b"))
        matches, _ = await mine.search("ws", "p", _unit(0, 1), threshold=0.9)
        assert matches == []
        matches, _ = await mine.search("ws", "p", _unit(1, 0), threshold=0.9)
        assert [m.entry.text for m in matches] == ["first"]
        # Added and forgotten between two searches: the changes apply in their order.
        await theirs.add("ws", "p", IndexEntry(_unit(0, 1), "third", CacheKey("ws", "m", "c")))
        await theirs.forget("ws", "p", CacheKey("ws", "m", "c"))
        assert (await mine.search("ws", "p", _unit(0, 1), threshold=0.9))[0] == []
        assert storage.whole == []
        # A purge: read whole again (nothing left).
        assert await theirs.purge("ws") == 1
        assert await mine.search("ws", "p", _unit(1, 0), threshold=0.9) == ([], None)
        assert storage.whole[-1] == "ws:cache:v:p"


@pytest.mark.anyio
async def test_the_shared_index_mirror_follows_trims_and_many_changes() -> None:
    pytest.importorskip("numpy")
    from gateway_kit.cache.index import IndexEntry
    from gateway_kit.cache.shared import StorageVectorIndex

    async with _CountingStorage() as storage:
        mine = StorageVectorIndex(storage, per_partition=4)
        theirs = StorageVectorIndex(storage, per_partition=4)

        async def add(number: int) -> None:
            vector = _unit(1, number / 10, number / 100)
            key = CacheKey("ws", "m", f"{number:04d}")
            await theirs.add("ws", "p", IndexEntry(vector, f"prompt {number}", key))

        async def seen() -> list[str]:
            matches, _ = await mine.search("ws", "p", _unit(1, 0, 0), threshold=-1.0, limit=99)
            return sorted(m.entry.text for m in matches)

        await add(0)
        assert await seen() == ["prompt 0"]
        for number in range(1, 20):  # a trim every 16 additions drops the oldest past 4
            await add(number)
            assert await seen() == sorted(
                f"prompt {n}" for n in await _held(storage, "ws:cache:v:p")
            )
        assert len(await seen()) <= 16  # trimmed
        # Far behind (more changes than the log is read for): read whole, still right.
        for number in range(20, 400):
            await add(number)
        assert await seen() == sorted(f"prompt {n}" for n in await _held(storage, "ws:cache:v:p"))


async def _held(storage: _CountingStorage, key: str) -> list[int]:
    """The numbers of the prompts a partition's map holds."""
    items = await MemoryStorage.map_items(storage, key)
    return [int(digest) for digest in items]


@pytest.mark.anyio
async def test_the_shared_index_reads_a_changed_partition_whole_once_a_minute() -> None:
    """What a change the log does not hold leaves out (here: a writer that does not log, as
    one of an earlier version) lasts until the partition changes a minute later at most."""
    pytest.importorskip("numpy")
    from gateway_kit.cache.index import IndexEntry
    from gateway_kit.cache.shared import StorageVectorIndex

    now = [0.0]
    async with _CountingStorage() as storage:
        mine = StorageVectorIndex(storage, per_partition=10, clock=lambda: now[0])
        theirs = StorageVectorIndex(storage, per_partition=10)
        await theirs.add("ws", "p", IndexEntry(_unit(1, 0), "first", CacheKey("ws", "m", "a")))
        assert len((await mine.search("ws", "p", _unit(1, 0), threshold=0.9))[0]) == 1
        record = (await storage.map_items("ws:cache:v:p"))["a"].replace(b"first", b"quiet")
        await storage.map_set("ws:cache:v:p", "q", record)  # no log entry
        await storage.incr("ws:cache:vv:p", 1)
        matches, _ = await mine.search("ws", "p", _unit(1, 0), threshold=0.9)
        assert [m.entry.text for m in matches] == ["first"]  # the log did not say
        now[0] = 61.0
        await mine.search("ws", "p", _unit(1, 0), threshold=0.9)  # unchanged: the mirror
        assert storage.whole == ["ws:cache:v:p", "ws:cache:v:p"]  # (and the test's own read)
        await storage.incr("ws:cache:vv:p", 1)  # its next change
        matches, _ = await mine.search("ws", "p", _unit(1, 0), threshold=0.9)
        assert sorted(m.entry.text for m in matches) == ["first", "quiet"]
