"""Deployment health as the operator sees it, and shared: two gateway processes on one Redis
agree on a deployment's cooldown; ``GET /api/v1/admin/routes`` and ``gateway-kit status
--routes`` show it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from gateway_kit.cli import main
from gateway_kit.cli.status import render_routes
from tests.fakes import provisioned
from tests.servers import free_port, serving

TOKEN = "op-secret-token-for-the-routes-view"

ROUTES = {
    "providers": [
        {"name": "up", "base_url": "https://upstream.test/v1"},
        {"name": "mock", "type": "mock"},
    ],
    "models": [
        {
            "name": "gpt-fake",
            "deployments": [
                {"provider": "up", "upstream_model": "gpt-x", "weight": 1},
                {"provider": "mock", "upstream_model": "mock", "weight": 0},
            ],
        }
    ],
    "routing": {"retries": 0, "allowed_fails": 2, "cooldown_s": 30},
    "admin": {"token": TOKEN},
}


@pytest.mark.anyio
async def test_the_operator_reads_every_deployments_health() -> None:
    async with provisioned("scale", **ROUTES) as env:
        env.upstream.error = httpx.ConnectError("refused")
        for _ in range(2):
            assert (await env.chat()).status == 200  # the standby answers
        operator = {"authorization": f"Bearer {TOKEN}"}
        response = await env.recorder.request("GET", "/api/v1/admin/routes", headers=operator)
        assert response.status == 200
        (route,) = response.json()["data"]
        assert route["model"] == "gpt-fake"
        assert route["fallbacks"] == []
        up, standby = route["deployments"]
        assert (up["provider"], up["state"]) == ("up", "open")
        assert up["cooling_until"] == pytest.approx(env.clock() + 30)
        assert (standby["provider"], standby["state"], standby["recent_failures"]) == (
            "mock",
            "closed",
            0,
        )
        shown = render_routes(response.json()["data"], now=env.clock())
        assert "up/gpt-x  weight 1  cooling down" in shown
        assert "mock/mock  weight 0  healthy" in shown

        refused = await env.recorder.request("GET", "/api/v1/admin/routes", headers=env.auth())
        assert refused.status == 401
        assert refused.json()["error"]["code"] == "invalid_admin_token"


@pytest.mark.slow
@pytest.mark.redis
def test_two_gateways_on_one_redis_agree_on_a_cooldown(
    tmp_path: Path, redis_url: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = free_port()  # nothing listens there: every call is refused
    config_file = tmp_path / "gateway.toml"
    config_file.write_text(
        f'[storage]\nurl = "{redis_url}"\nredis_prefix = "{redis_prefix}"\n\n'
        '[auth]\nmode = "off"\n\n'
        f'[admin]\ntoken = "{TOKEN}"\n\n'
        "[routing]\nretries = 0\nallowed_fails = 2\ncooldown_s = 60\nrefresh_s = 0.2\n\n"
        f'[[providers]]\nname = "dead"\nbase_url = "http://127.0.0.1:{dead}/v1"\n\n'
        '[[providers]]\nname = "mock"\ntype = "mock"\n\n'
        '[[models]]\nname = "main"\n'
        '[[models.deployments]]\nprovider = "dead"\nupstream_model = "x"\n'
        '[[models.deployments]]\nprovider = "mock"\nupstream_model = "mock"\nweight = 0\n'
    )
    hello = {"model": "main", "messages": [{"role": "user", "content": "hi"}]}
    with (
        serving("--config", str(config_file), cwd=tmp_path) as (_, first),
        serving("--config", str(config_file), cwd=tmp_path) as (_, second),
    ):
        # The second instance looks before anything failed: healthy, in its view too.
        before = httpx.post(f"{second}/v1/chat/completions", json=hello, timeout=30)
        assert before.headers["x-gateway-attempts"] == "main@dead=error"
        # The first instance sees the second failure of the window: the deployment trips.
        tripped = httpx.post(f"{first}/v1/chat/completions", json=hello, timeout=30)
        assert tripped.status_code == 200
        assert tripped.headers["x-gateway-attempts"] == "main@dead=error"
        time.sleep(0.5)  # the second instance's view is at most refresh_s old
        after = httpx.post(f"{second}/v1/chat/completions", json=hello, timeout=30)
        assert after.status_code == 200
        assert after.headers["x-gateway-attempts"] == "main@dead=cooldown"
        assert after.json()["choices"][0]["message"]["content"].startswith("This is a mock")

        args = ["status", "--routes", "--base-url", second, "--admin-token", TOKEN]
        assert main([*args, "--json"]) == 0
        (route,) = json.loads(capsys.readouterr().out)["data"]
        assert route["deployments"][0]["state"] == "open"
        assert main(args) == 0
        shown = capsys.readouterr().out
        assert "main (chat)" in shown
        assert "dead/x  weight 1  cooling down" in shown
        assert TOKEN not in shown
