"""``gateway-kit logs [--follow]`` and ``gateway-kit usage`` on the storage the gateway writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gateway_kit import Gateway, create_app, load_config
from gateway_kit.cli import main
from gateway_kit.testing import ASGIRecorder

pytestmark = pytest.mark.slow


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'default_plan = "scale"\n[storage]\nurl = "sqlite:///{tmp_path}/state.db"\n\n'
        "[plans.scale]\nincluded_requests = 1000\nburst_limit_rpm = 600\n\n"
        '[guardian]\nmode = "off"\n'
    )
    return path


def serve_requests(config_file: Path, count: int, workspace_id: str | None = None) -> str:
    """Send ``count`` chat requests through a gateway on the file's storage (a new workspace
    unless given); its records are written when it stops. The workspace's id."""
    config = load_config(str(config_file))

    async def run() -> str:
        async with Gateway(config, run_worker=False) as gateway:
            nonlocal workspace_id
            if workspace_id is None:
                workspace_id = (await gateway.workspaces.create("ops@example.com")).id
            key = (await gateway.keys.create(workspace_id)).secret
            recorder = ASGIRecorder(create_app(gateway=gateway))
            for index in range(count):
                model = "no-such-model" if index == 0 else "mock-mini"
                await recorder.request(
                    "POST",
                    "/v1/chat/completions",
                    json={"model": model, "messages": [{"role": "user", "content": f"q{index}"}]},
                    headers={"authorization": f"Bearer {key}"},
                )
            return workspace_id

    return anyio.run(run)


def test_logs_prints_the_newest_requests_oldest_first(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = serve_requests(config_file, 4)
    cfg = ["--config", str(config_file)]
    assert main(["logs", "--workspace", workspace, "--json", *cfg]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["status"] for r in records] == [404, 200, 200, 200]
    stamps = [r["created_at"] for r in records]
    assert stamps == sorted(stamps)
    assert main(["logs", "--workspace", workspace, "--status", "4xx", *cfg]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert " 404 " in line
    assert "error=model_not_found" in line
    assert main(["logs", "--workspace", workspace, "--limit", "2", *cfg]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["logs", "--workspace", workspace, "--limit", "0", *cfg]) == 2
    assert "--limit" in capsys.readouterr().err
    assert main(["logs", "--workspace", "ws_nobody", *cfg]) == 1


def test_usage_prints_totals_per_day_and_model(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = serve_requests(config_file, 3)
    cfg = ["--config", str(config_file)]
    assert main(["usage", "--workspace", workspace, "--json", *cfg]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_model = {row["model"]: row for row in rows}
    assert by_model["mock-mini"]["requests"] == 2
    assert by_model["mock-mini"]["cost_micro_usd"] > 0
    assert by_model["(none)"]["errors"] == 1
    assert main(["usage", "--workspace", workspace, *cfg]) == 0
    assert "cost_usd" in capsys.readouterr().out
    assert main(["usage", "--workspace", workspace, "--since", "yesterday", *cfg]) == 2
    assert main(["usage", "--workspace", workspace, "--since", "2026-02-30", *cfg]) == 2
    assert "--since: a day as YYYY-MM-DD, not '2026-02-30'" in capsys.readouterr().err


def test_logs_follow_prints_requests_as_they_are_written(config_file: Path) -> None:
    workspace = serve_requests(config_file, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_KIT_")}
    command = [sys.executable, "-m", "gateway_kit.cli", "logs", "--workspace", workspace]
    follow = subprocess.Popen(
        [*command, "--follow", "--json", "--config", str(config_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert follow.stdout is not None
        assert json.loads(follow.stdout.readline())["status"] == 404  # what was there
        serve_requests(config_file, 3, workspace)  # written as that gateway stops
        fresh = [json.loads(follow.stdout.readline()) for _ in range(3)]
        assert [r["status"] for r in fresh] == [404, 200, 200]
    finally:
        follow.terminate()
        follow.wait(10)


def test_follow_reads_every_entry_written_since_however_many() -> None:
    from gateway_kit import GatewayConfig
    from gateway_kit.cli.logs import _since

    async def run() -> list[int]:
        config = GatewayConfig.model_validate({"storage": {"url": "memory://"}})
        async with Gateway(config, run_worker=False) as gateway:
            values = [b"%d" % i for i in range(2500)]
            await gateway.storage.log_extend("ws_1:requests", values, max_len=10_000)
            return [entry.seq for entry in await _since(gateway, "ws_1:requests", 100)]

    seqs = anyio.run(run)
    assert seqs == list(range(2500, 100, -1))
