"""Two gateway processes (real uvicorn) sharing one Redis hold Guardian's repeat threshold
exactly under a concurrent burst of one request."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gateway_kit import Gateway, load_config
from tests.layers.test_limits_processes import burst
from tests.servers import serving

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def test_two_gateways_on_one_redis_block_the_repeat_at_exactly_its_threshold(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        f'[storage]\nurl = "{redis_url}"\nredis_prefix = "{redis_prefix}"\n\n'
        "[plans.starter]\nincluded_requests = 100000\nburst_limit_rpm = 100000\n\n"
        "[auth]\ncache_ttl_s = 0\n\n"
        '[guardian.rules.repeat]\naction = "block"\nwindow_s = 600\n'
        "throttle_at = 25\nblock_at = 25\n"
    )
    config = load_config(config_file)

    async def provision() -> str:
        async with Gateway(config) as gateway:
            workspace = await gateway.workspaces.create("a@example.com")
            return (await gateway.keys.create(workspace.id)).secret

    key = anyio.run(provision)
    with (
        serving("--config", str(config_file), cwd=tmp_path) as (_, first),
        serving("--config", str(config_file), cwd=tmp_path) as (_, second),
    ):
        statuses = anyio.run(burst, [first, second], key, 100)
    # The 25th identical request within the window is blocked, whichever gateway it reached:
    # exactly 24 served.
    assert statuses == {200: 24, 429: 76}
