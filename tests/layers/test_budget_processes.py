"""Two gateway processes (real uvicorn) on one Redis never spend past a workspace's budget.

The mock model is priced on output only, and the budget assumes exactly the mock's output
length, so each request's estimate is its real cost: then the cap admits exactly what fits.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import anyio
import httpx
import pytest

from gateway_kit import Gateway, load_config
from gateway_kit.accounts.periods import period_at
from gateway_kit.providers.base import ChatCall
from gateway_kit.providers.mock import MockProvider
from tests.servers import serving

pytestmark = [pytest.mark.slow, pytest.mark.redis]

HELLO = {"model": "mock-mini", "messages": [{"role": "user", "content": "hi"}]}
PRICE_PER_MTOK = 100  # USD per million output tokens: 100 micro-USD a token


async def mock_output_tokens() -> int:
    response = await MockProvider().chat(ChatCall(dict(HELLO), None, stream=False))
    tokens: int = json.loads(response.body)["usage"]["completion_tokens"]
    return tokens


async def burst(urls: list[str], key: str, count: int, *, cut_streams: bool) -> Counter[int]:
    """``count`` concurrent requests over the gateways; streams are left after one chunk."""
    statuses: Counter[int] = Counter()
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(index: int) -> None:
            url = f"{urls[index % len(urls)]}/v1/chat/completions"
            headers = {"authorization": f"Bearer {key}"}
            if not cut_streams:
                response = await client.post(url, json=HELLO, headers=headers)
                statuses[response.status_code] += 1
                return
            body = {**HELLO, "stream": True}
            async with client.stream("POST", url, json=body, headers=headers) as response:
                statuses[response.status_code] += 1
                async for _ in response.aiter_raw():
                    break  # the client leaves mid-stream

        async with anyio.create_task_group() as tasks:
            for index in range(count):
                tasks.start_soon(one, index)
    return statuses


def test_two_gateways_on_one_redis_never_overspend_and_leak_nothing(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    output = anyio.run(mock_output_tokens)
    cost = output * PRICE_PER_MTOK
    cap = 10 * cost
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        'default_plan = "capped"\n\n'
        f'[storage]\nurl = "{redis_url}"\nredis_prefix = "{redis_prefix}"\n\n'
        f"[plans.capped]\nincluded_requests = 100000\nburst_limit_rpm = 100000\n"
        f"budget_usd = {cap / 1_000_000}\n\n"
        f"[budget]\ndefault_output_tokens = {output}\n\n"
        '[[providers]]\nname = "mock"\ntype = "mock"\nstream_delay_s = 0.05\n\n'
        '[[models]]\nname = "mock-mini"\nprovider = "mock"\n'
        f"price = {{ input_usd_per_mtok = 0, output_usd_per_mtok = {PRICE_PER_MTOK} }}\n\n"
        "[auth]\ncache_ttl_s = 0\n"
        # One request sent many times over, on purpose: not a loop for Guardian to stop.
        '[guardian]\nmode = "off"\n'
    )
    config = load_config(config_file)

    async def provision() -> list[tuple[str, str]]:
        async with Gateway(config) as gateway:
            made = []
            for email in ("plain@example.com", "streams@example.com"):
                workspace = await gateway.workspaces.create(email)
                made.append((workspace.id, (await gateway.keys.create(workspace.id)).secret))
            return made

    async def totals(workspace_id: str) -> tuple[int, int, int]:
        async with Gateway(config, run_worker=False) as gateway:
            period = period_at(gateway.clock(), config.budget.period)
            spent = await gateway.ledger.totals(workspace_id, period)
            return spent.committed, spent.reserved, spent.settled

    (plain, plain_key), (streams, streams_key) = anyio.run(provision)
    with (
        serving("--config", str(config_file), cwd=tmp_path) as (_, first),
        serving("--config", str(config_file), cwd=tmp_path) as (_, second),
    ):
        statuses = anyio.run(lambda: burst([first, second], plain_key, 100, cut_streams=False))
        cut = anyio.run(lambda: burst([first, second], streams_key, 100, cut_streams=True))

        # Exact estimates: exactly what fits is served, and exactly the cap is spent.
        assert statuses == {200: 10, 402: 90}
        assert anyio.run(totals, plain) == (cap, 0, cap)

        # Streams the clients left: every reservation settled (on estimates), none leaked,
        # and the cap never passed.
        assert cut[200] >= 10
        assert cut[200] + cut[402] == 100

        async def settled_streams() -> tuple[int, int, int]:
            with anyio.fail_after(10):
                while True:  # the gateways settle as they notice each client has gone
                    committed, reserved, settled = await totals(streams)
                    if reserved == 0:
                        return committed, reserved, settled
                    await anyio.sleep(0.1)

        committed, reserved, settled = anyio.run(settled_streams)
    assert reserved == 0
    assert committed == settled <= cap
