"""Two gateway processes (real uvicorn) sharing one Redis admit exactly what the plan allows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
import httpx
import pytest

from gateway_kit import Gateway, load_config
from tests.servers import serving

pytestmark = [pytest.mark.slow, pytest.mark.redis]

HELLO = {"model": "mock-mini", "messages": [{"role": "user", "content": "hi"}]}


async def burst(urls: list[str], key: str, count: int) -> Counter[int]:
    """``count`` concurrent requests spread over the gateways; the statuses they got."""
    statuses: Counter[int] = Counter()
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(index: int) -> None:
            response = await client.post(
                f"{urls[index % len(urls)]}/v1/chat/completions",
                json=HELLO,
                headers={"authorization": f"Bearer {key}"},
            )
            statuses[response.status_code] += 1

        async with anyio.create_task_group() as tasks:
            for index in range(count):
                tasks.start_soon(one, index)
    return statuses


def test_two_gateways_on_one_redis_admit_exactly_the_plan(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        'default_plan = "bursty"\n\n'
        f'[storage]\nurl = "{redis_url}"\nredis_prefix = "{redis_prefix}"\n\n'
        "[plans.bursty]\nincluded_requests = 100000\nburst_limit_rpm = 20\n\n"
        "[plans.small]\nincluded_requests = 30\nburst_limit_rpm = 100000\n\n"
        "[auth]\ncache_ttl_s = 0\n"
        # One request sent many times over, on purpose: not a loop for Guardian to stop.
        '[guardian]\nmode = "off"\n'
    )
    config = load_config(config_file)

    async def provision() -> tuple[str, str]:
        async with Gateway(config) as gateway:
            bursty = await gateway.workspaces.create("a@example.com", plan="bursty")
            small = await gateway.workspaces.create("b@example.com", plan="small")
            return (
                (await gateway.keys.create(bursty.id)).secret,
                (await gateway.keys.create(small.id)).secret,
            )

    bursty_key, small_key = anyio.run(provision)
    with (
        serving("--config", str(config_file), cwd=tmp_path) as (_, first),
        serving("--config", str(config_file), cwd=tmp_path) as (_, second),
    ):
        burst_statuses = anyio.run(burst, [first, second], bursty_key, 100)
        quota_statuses = anyio.run(burst, [first, second], small_key, 100)
    assert burst_statuses == {200: 20, 429: 80}
    assert quota_statuses == {200: 30, 402: 70}
