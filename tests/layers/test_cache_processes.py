"""Two gateway processes (real uvicorn) on one Redis share the answer cache: what one kept,
the other serves, exactly and by meaning; a restart keeps it; a purge through one empties it
for both; hits from both count against one quota, exactly; and under a concurrent load of
paraphrases and near misses, every answer is its own request's or a paraphrase's."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway_kit import Gateway, load_config
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.bench.cache import PAIRS
from gateway_kit.cache.guard import same_meaning_words
from tests.servers import serving

pytestmark = [pytest.mark.slow, pytest.mark.redis]
pytest.importorskip("wordllama", reason="the semantic extra is not installed")

SYSTEM = {"role": "system", "content": "Answer in one sentence."}


def question(text: str) -> dict[str, Any]:
    messages = [SYSTEM, {"role": "user", "content": text}]
    return {"model": "mock-mini", "messages": messages, "temperature": 0}


def write_config(tmp_path: Path, redis_url: str, redis_prefix: str) -> Path:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        'default_plan = "team"\n\n'
        f'[storage]\nurl = "{redis_url}"\nredis_prefix = "{redis_prefix}"\n\n'
        "[plans.team]\nincluded_requests = 100000\nburst_limit_rpm = 100000\n\n"
        "[plans.small]\nincluded_requests = 30\nburst_limit_rpm = 100000\n\n"
        "[auth]\ncache_ttl_s = 0\n\n"
        # The same request many times over, on purpose: not a loop for Guardian to stop.
        '[guardian]\nmode = "off"\n\n'
        '[cache.semantic]\nmodels = ["mock-mini"]\n'
    )
    return config_file


def provision(config_file: Path, plan: str) -> tuple[str, str]:
    """A workspace on ``plan`` and an admin key of it: (workspace id, key)."""

    async def make() -> tuple[str, str]:
        async with Gateway(load_config(config_file)) as gateway:
            workspace = await gateway.workspaces.create(f"{plan}@example.com", plan=plan)
            made = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
            return workspace.id, made.secret

    return anyio.run(make)


def ask(client: httpx.Client, url: str, text: str) -> httpx.Response:
    response = client.post(f"{url}/v1/chat/completions", json=question(text))
    assert response.status_code == 200, response.text
    return response


def content(response: httpx.Response) -> str:
    text: str = response.json()["choices"][0]["message"]["content"]
    return text


def test_what_one_gateway_kept_the_other_serves_until_a_purge(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    config_file = write_config(tmp_path, redis_url, redis_prefix)
    workspace_id, key = provision(config_file, "team")
    auth = {"authorization": f"Bearer {key}"}
    kept = "Convert 5 miles to kilometers."
    with httpx.Client(headers=auth, timeout=30) as client:
        with (
            serving("--config", str(config_file), cwd=tmp_path) as (_, first),
            serving("--config", str(config_file), cwd=tmp_path) as (_, second),
        ):
            miss = ask(client, first, kept)
            assert miss.headers["x-gateway-cache"] == "miss"
            hit = ask(client, second, kept)
            assert hit.headers["x-gateway-cache"] == "hit"
            assert content(hit) == content(miss)
            assert hit.headers["x-gateway-cost-usd"] == "0.000000"
            # By meaning: the prompt and its vector were kept in the storage by the first.
            paraphrase = ask(client, second, "Please convert 5 miles to kilometers.")
            assert paraphrase.headers["x-gateway-cache"] == "semantic"
            assert float(paraphrase.headers["x-gateway-cache-similarity"]) >= 0.93
            assert content(paraphrase) == content(miss)
            near_miss = ask(client, second, "Convert 5 kilometers to miles.")
            assert near_miss.headers["x-gateway-cache"] == "miss"
        # Both stopped; a gateway started afresh finds the answers in Redis.
        with serving("--config", str(config_file), cwd=tmp_path) as (_, again):
            assert ask(client, again, kept).headers["x-gateway-cache"] == "hit"
            with serving("--config", str(config_file), cwd=tmp_path) as (_, other):
                purged = client.delete(f"{other}/api/v1/workspaces/{workspace_id}/cache")
                assert purged.status_code == 200, purged.text
                # Gone for both, by key and by meaning (asked first: its answer is kept anew).
                paraphrase = ask(client, again, "Please convert 5 miles to kilometers.")
                assert paraphrase.headers["x-gateway-cache"] == "miss"
                assert ask(client, other, kept).headers["x-gateway-cache"] == "semantic"
                counts = cache_counts(client, other, workspace_id, hits=2, semantic_hits=2)
    # Each process's counts, written within a second: the stopped ones' at their shutdown.
    assert counts["hits"] == 2
    assert counts["semantic_hits"] == 2


def cache_counts(
    client: httpx.Client, url: str, workspace_id: str, *, hits: int, semantic_hits: int
) -> Any:
    """The workspace's cache counts as ``url`` reads them, once every process's have been
    written (each writes its own once a second)."""
    deadline = time.monotonic() + 10
    while True:
        response = client.get(f"{url}/api/v1/workspaces/{workspace_id}/cache")
        assert response.status_code == 200, response.text
        counts = response.json()
        done = counts["hits"] >= hits and counts["semantic_hits"] >= semantic_hits
        if done or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def test_hits_on_two_gateways_count_against_one_quota_exactly(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    config_file = write_config(tmp_path, redis_url, redis_prefix)
    _, key = provision(config_file, "small")  # 30 requests
    auth = {"authorization": f"Bearer {key}"}

    async def burst(urls: list[str], count: int) -> Counter[tuple[int, str]]:
        outcomes: Counter[tuple[int, str]] = Counter()
        async with httpx.AsyncClient(headers=auth, timeout=30) as client:

            async def one(index: int) -> None:
                url = urls[index % len(urls)]
                response = await client.post(
                    f"{url}/v1/chat/completions", json=question("Why is the sky blue?")
                )
                cache = response.headers.get("x-gateway-cache", "-")
                outcomes[(response.status_code, cache)] += 1

            async with anyio.create_task_group() as tasks:
                for index in range(count):
                    tasks.start_soon(one, index)
        return outcomes

    with (
        serving("--config", str(config_file), cwd=tmp_path) as (_, first),
        serving("--config", str(config_file), cwd=tmp_path) as (_, second),
    ):
        with httpx.Client(headers=auth, timeout=30) as client:
            assert ask(client, first, "Why is the sky blue?").headers["x-gateway-cache"] == "miss"
        outcomes = anyio.run(burst, [first, second], 100)
        with httpx.Client(headers=auth, timeout=30) as client:
            me = client.get(f"{second}/v1/me")
    # The first request and 29 of the burst were admitted; the 29 were hits (the answer was
    # kept before the burst began), the other 71 refused before any lookup.
    assert outcomes == {(200, "hit"): 29, (402, "-"): 71}, outcomes
    assert me.status_code == 200, me.text
    assert me.json()["used_requests"] == 30


ECHO = "This is a mock reply from gateway-kit to: "


def test_under_concurrent_load_every_answer_is_the_requests_own_or_a_paraphrases(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """The built-in mock answers with the prompt it was asked, so each answer says which
    prompt it was kept for: a miss or an exact hit must be the request's own, a semantic hit
    its labelled paraphrase's, never a near miss's. 30 pairs of each label: each pair's first
    prompt, then both prompts three times over, shuffled, at once, over both gateways."""
    config_file = write_config(tmp_path, redis_url, redis_prefix)
    _, key = provision(config_file, "team")
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines()]
    # Paraphrases the guard lets through (most are then served), near misses of every kind.
    served = [p for p in pairs if p["label"] == "paraphrase" and same_meaning_words(p["a"], p["b"])]
    chosen = served[:30] + [p for p in pairs if p["label"] == "near_miss"][::19][:30]
    # What may answer a prompt: itself (a semantic hit on its own text is possible while its
    # answer is being kept: the exact lookup came just before) and its paraphrases, through
    # every pair that shares a prompt; never a near miss's other prompt.
    answers: dict[str, set[str]] = {}
    for pair in chosen:
        group = answers.setdefault(pair["a"], {pair["a"]})
        other = answers.setdefault(pair["b"], {pair["b"]})
        if pair["label"] == "paraphrase" and group is not other:
            group |= other
            for text in other:
                answers[text] = group
    for pair in chosen:
        if pair["label"] == "near_miss":
            assert pair["b"] not in answers[pair["a"]], pair  # the labels agree
    first_asked = [pair["a"] for pair in chosen]
    prompts = [text for pair in chosen for text in (pair["a"], pair["b"])] * 3
    random.Random(7).shuffle(prompts)

    async def wave(urls: list[str], prompts: list[str]) -> list[tuple[str, str, str]]:
        seen: list[tuple[str, str, str]] = []
        limit = anyio.Semaphore(32)
        auth = {"authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=auth, timeout=60) as client:

            async def one(index: int, text: str) -> None:
                async with limit:
                    response = await client.post(
                        f"{urls[index % 2]}/v1/chat/completions", json=question(text)
                    )
                assert response.status_code == 200, response.text
                answer = content(response)
                assert answer.startswith(ECHO), answer
                asked_for = answer.removeprefix(ECHO)
                seen.append((text, response.headers["x-gateway-cache"], asked_for))

            async with anyio.create_task_group() as tasks:
                for index, text in enumerate(prompts):
                    tasks.start_soon(one, index, text)
        return seen

    with (
        serving("--config", str(config_file), cwd=tmp_path) as (_, first),
        serving("--config", str(config_file), cwd=tmp_path) as (_, second),
    ):
        outcomes = anyio.run(wave, [first, second], first_asked)
        outcomes += anyio.run(wave, [second, first], prompts)
    states = Counter(state for _, state, _ in outcomes)
    for text, state, asked_for in outcomes:
        if state == "semantic":
            assert asked_for in {" ".join(t.split()) for t in answers[text]}, (text, asked_for)
        else:
            assert state in ("miss", "hit"), state
            assert asked_for == " ".join(text.split()), (text, asked_for)
    assert sum(states.values()) == len(first_asked) + len(prompts)
    assert states["hit"] >= len(prompts) // 3  # the first prompts asked again at least
    assert states["semantic"] >= 3 * 10  # the paraphrases the guard serves, each time
