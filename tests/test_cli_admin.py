"""Operator commands and `gateway-kit status`, against real storage and a real server."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from gateway_kit import Gateway, create_app, load_config
from gateway_kit.cli import main
from gateway_kit.testing import run_server

pytestmark = pytest.mark.slow

HELLO = {"model": "mock-large", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[storage]\nurl = "sqlite:///{tmp_path}/state.db"\n\n'
        "[plans.scale]\nincluded_requests = 1000\nburst_limit_rpm = 600\n\n"
        "[plans.starter]\nincluded_requests = 100\nburst_limit_rpm = 60\n"
    )
    return path


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_workspaces_and_keys_from_the_command_line(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ["--config", str(config_file)]
    created = run_json(
        capsys, "workspaces", "create", "--email", "ops@example.com", "--plan", "scale", *cfg
    )
    assert isinstance(created, dict)
    workspace = created["workspace_id"]
    assert workspace.startswith("ws_")
    assert run_json(capsys, "workspaces", "list", *cfg) == [
        {"workspace_id": workspace, "email": "ops@example.com", "plan": "scale", "status": "active"}
    ]
    key = run_json(capsys, "keys", "create", "--workspace", workspace, "--name", "ci", *cfg)
    assert isinstance(key, dict)
    assert key["key"].startswith("gk_")
    listed = run_json(capsys, "keys", "list", "--workspace", workspace, *cfg)
    assert isinstance(listed, list)
    assert [k["key_id"] for k in listed] == [key["key_id"]]
    assert key["key"] not in json.dumps(listed)
    rotated = run_json(
        capsys,
        "keys",
        "rotate",
        key["key_id"],
        "--workspace",
        workspace,
        "--grace-period",
        "60",
        *cfg,
    )
    assert isinstance(rotated, dict)
    assert rotated["key"] != key["key"]
    revoked = run_json(capsys, "keys", "revoke", key["key_id"], "--workspace", workspace, *cfg)
    assert isinstance(revoked, dict)
    assert revoked["status"] == "revoked"

    # Human output shows the key once, with a reminder.
    assert main(["keys", "create", "--workspace", workspace, *cfg]) == 0
    human = capsys.readouterr().out
    assert "Store the key now" in human


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        # A value the accounts refuse is a usage error, named (it exited 1, as storage does).
        (["workspaces", "create", "--email", "not-an-email"], 2, "email: not an e-mail address"),
        (
            ["workspaces", "create", "--email", "a@b.co", "--plan", "gold"],
            2,
            "plan: no plan named 'gold'",
        ),
        (["keys", "create", "--workspace", "ws_nosuch"], 1, "no workspace ws_nosuch"),
        (["keys", "revoke", "kid_nosuch", "--workspace", "ws_nosuch"], 1, "no active key"),
    ],
)
def test_operator_mistakes_get_clear_messages(
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    assert main([*args, "--config", str(config_file)]) == code
    assert message in capsys.readouterr().err


@pytest.fixture
def served(config_file: Path) -> Iterator[tuple[str, str]]:
    """A gateway on the config's SQLite file, and a workspace key made beforehand."""
    config = load_config(config_file)

    async def provision() -> str:
        async with Gateway(config) as gateway:
            workspace = await gateway.workspaces.create("team@example.com", plan="starter")
            return (await gateway.keys.create(workspace.id)).secret

    key = anyio.run(provision)
    with run_server(create_app(config)) as base_url:
        yield base_url, key


def test_status_shows_plan_usage_burst_savings_and_reset(
    served: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, key = served
    for i in range(25):  # 25 different questions (one asked 25 times is a loop to Guardian)
        httpx.post(
            f"{base_url}/v1/chat/completions",
            json={**HELLO, "messages": [{"role": "user", "content": f"question {i}"}]},
            headers={"authorization": f"Bearer {key}"},
        )
    assert main(["status", "--base-url", base_url, "--api-key", key]) == 0
    out = capsys.readouterr().out
    assert "Plan       starter" in out
    assert "25 / 100 (25.0%)" in out
    assert "[" + "#" * 8 + "-" * 22 + "]" in out  # a quarter of the bar
    assert "Burst      60 requests/minute" in out
    assert "Savings    $0.00" in out
    assert "Resets in" in out
    assert key not in out


def test_status_json_prints_the_raw_object(
    served: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, key = served
    monkeypatch.setenv("GATEWAY_KIT_API_KEY", key)
    assert main(["status", "--base-url", base_url, "--json"]) == 0
    raw = capsys.readouterr().out
    assert list(json.loads(raw)) == [
        "workspace_id",
        "email",
        "plan",
        "included_requests",
        "used_requests",
        "burst_limit_rpm",
        "savings_usd",
        "reset_at",
    ]
    assert (
        raw.strip()
        == httpx.get(f"{base_url}/v1/me", headers={"authorization": f"Bearer {key}"}).text
    )


def test_status_with_a_bad_key_says_it_was_refused(
    served: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, _ = served
    bad = "gk_" + "q" * 43
    assert main(["status", "--base-url", base_url, "--api-key", bad]) == 1
    err = capsys.readouterr().err
    assert "refused" in err
    assert bad not in err


def test_status_without_a_key_says_how_to_give_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GATEWAY_KIT_API_KEY", raising=False)
    assert main(["status"]) == 2
    assert "GATEWAY_KIT_API_KEY" in capsys.readouterr().err


def test_status_reports_connection_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    assert main(["status", "--base-url", url, "--api-key", "gk_" + "a" * 43]) == 1
    assert f"cannot connect to {url}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "says"),
    [
        # Each was a traceback (or, for 0, "is the gateway running there?").
        (["--timeout", "-1"], "--timeout: must be more than 0 and at most 3600 seconds"),
        (["--timeout", "nan"], "--timeout: must be more than 0 and at most 3600 seconds"),
        (["--timeout", "inf"], "--timeout: must be more than 0 and at most 3600 seconds"),
        (["--timeout", "0"], "--timeout: must be more than 0 and at most 3600 seconds"),
        (["--base-url", "http://[::1"], "--base-url: not a URL"),
        (["--base-url", "ftp://host"], "--base-url: an http:// or https:// URL with a host"),
        (["--api-key", "gk_é"], "the API key holds characters no API key has (not shown)"),
        (["--routes", "--admin-token", "tök"], "the operator token holds characters"),
    ],
)
def test_status_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str], options: list[str], says: str
) -> None:
    assert main(["status", "--api-key", "gk_" + "a" * 43, *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gateway-kit status: {says}")
    assert len(err.splitlines()) == 1
    assert "gk_é" not in err
    assert "tök" not in err


def test_status_reports_a_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code = main(
            ["status", "--base-url", url, "--api-key", "gk_" + "a" * 43, "--timeout", "0.3"]
        )
    assert code == 1
    assert "no answer from" in capsys.readouterr().err


def test_cache_stats_and_a_purge_that_reaches_the_running_gateway(
    served: tuple[str, str], config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, key = served
    headers = {"authorization": f"Bearer {key}"}
    cached = {**HELLO, "temperature": 0}

    def ask() -> str:
        response = httpx.post(f"{base_url}/v1/chat/completions", json=cached, headers=headers)
        assert response.status_code == 200
        return response.headers["x-gateway-cache"]

    assert [ask(), ask()] == ["miss", "hit"]
    me = httpx.get(f"{base_url}/v1/me", headers=headers).json()
    workspace = me["workspace_id"]
    cfg = ["--config", str(config_file)]
    expected = {
        "workspace_id": workspace,
        "hits": 1,
        "semantic_hits": 0,  # counted in hit_rate: shown beside it
        "misses": 1,
        "bypasses": 0,
        "stored": 1,
        "hit_rate": 0.5,
    }
    deadline = time.monotonic() + 5  # the gateway writes its counts once a second
    while (stats := run_json(capsys, "cache", "stats", "--workspace", workspace, *cfg)) != expected:
        assert time.monotonic() < deadline, stats
        time.sleep(0.2)
    run_json(capsys, "cache", "purge", "--workspace", workspace, *cfg)
    deadline = time.monotonic() + 5  # the gateway polls the feed every second
    while ask() == "hit":
        assert time.monotonic() < deadline, "the purge never reached the gateway"
        time.sleep(0.2)
    assert main(["cache", "purge", "--all", "--model", "bad name", *cfg]) == 2
    assert "--model" in capsys.readouterr().err
