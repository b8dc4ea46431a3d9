"""The gateway-kit command: serve (demo and configured) and its errors."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway_kit.cli import main
from tests.servers import free_port, launched, serving

pytestmark = pytest.mark.slow


def test_serve_without_config_runs_the_offline_demo_and_prints_a_working_key(
    tmp_path: Path,
) -> None:
    hello = {"model": "mock-large", "messages": [{"role": "user", "content": "Hello"}]}
    with serving(cwd=tmp_path) as (output, base_url):
        banner = "".join(output)
        assert "admin API key (shown once: it is kept across restarts" in banner
        key = re.search(r"gk_[A-Za-z0-9_-]{43}", banner)
        assert key is not None
        url = f"{base_url}/v1/chat/completions"
        assert httpx.post(url, json=hello).status_code == 401
        response = httpx.post(url, json=hello, headers={"authorization": f"Bearer {key[0]}"})
        assert response.status_code == 200
        assert response.headers["x-request-id"].startswith("req_")
    assert "running offline on the built-in mock provider" in banner
    assert f"curl {base_url}/v1/chat/completions" in banner
    assert (tmp_path / "gateway-kit.db").exists()  # the embedded default
    # A restart keeps the key (stored hashed, so not shown again) and says how to get another.
    with serving(cwd=tmp_path) as (output, base_url):
        banner = "".join(output)
        assert re.search(r"gk_[A-Za-z0-9_-]{43}", banner) is None
        assert f"its admin key ({key[0][:12]}...) was printed at the first start" in banner
        assert "gateway-kit keys create --workspace ws_demo --role admin" in banner
        url = f"{base_url}/v1/chat/completions"
        again = httpx.post(url, json=hello, headers={"authorization": f"Bearer {key[0]}"})
        assert again.status_code == 200
        # The demo key is the demo workspace's admin key: it manages the workspace too.
        keys = httpx.get(
            f"{base_url}/api/v1/workspaces/ws_demo/keys",
            headers={"authorization": f"Bearer {key[0]}"},
        )
        assert keys.status_code == 200
        assert [k["role"] for k in keys.json()["data"]] == ["admin"]


def test_a_second_serve_on_a_taken_port_fails_clearly_and_changes_nothing(
    tmp_path: Path,
) -> None:
    hello = {"model": "mock-large", "messages": [{"role": "user", "content": "Hi"}]}
    with serving(cwd=tmp_path) as (output, base_url):
        key = re.search(r"gk_[A-Za-z0-9_-]{43}", "".join(output))
        assert key is not None
        port = base_url.rsplit(":", 1)[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_KIT_")}
        second = subprocess.run(
            [sys.executable, "-m", "gateway_kit.cli", "serve", "--port", port],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert second.stdout == ""
        assert second.stderr.splitlines() == [
            f"gateway-kit: cannot listen on 127.0.0.1:{port}: address already in use (another "
            "gateway running there? --port or server.port chooses another)"
        ]
        # The first gateway's key still works: the second start wrote nothing.
        answer = httpx.post(
            f"{base_url}/v1/chat/completions",
            json=hello,
            headers={"authorization": f"Bearer {key[0]}"},
        )
        assert answer.status_code == 200


def test_a_start_on_a_port_in_use_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In an empty directory: once the storage was tried (and its file made) before the port
    was known to be free, and a read-only verb then found an empty database to print."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("GATEWAY_KIT_")]:
        monkeypatch.delenv(name)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        assert main(["serve", "--port", port]) == 1
    assert "cannot listen on" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_stop_waits_for_requests_in_flight_at_most_shutdown_timeout_s(tmp_path: Path) -> None:
    """A client that declared a body and never sent it held `kill -TERM` for as long as it
    stayed: past server.shutdown_timeout_s the request is cancelled and the gateway stops."""
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[storage]\nurl = "memory://"\n[auth]\nmode = "off"\n[server]\nshutdown_timeout_s = 1\n'
    )
    port = free_port()
    with (
        launched(
            "serve",
            "--port",
            str(port),
            "--config",
            str(config),
            ready="Uvicorn running on",
            cwd=tmp_path,
        ) as (process, _),
        socket.create_connection(("127.0.0.1", port)) as stuck,
    ):
        stuck.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"content-type: application/json\r\ncontent-length: 100\r\n\r\n"
        )
        time.sleep(0.3)  # the request is in flight, waiting for its body
        started = time.monotonic()
        process.terminate()
        process.wait(timeout=20)
        assert time.monotonic() - started < 6


def test_serve_with_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[storage]\nurl = "memory://"\n[auth]\nmode = "off"\n\n'
        '[[providers]]\nname = "local"\ntype = "mock"\n\n'
        '[[models]]\nname = "house-model"\nprovider = "local"\n'
    )
    with serving("--config", str(config), cwd=tmp_path) as (output, base_url):
        models = httpx.get(f"{base_url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["house-model"]
    assert "running offline" not in "".join(output)


def test_an_invalid_config_stops_start_up_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[server]\nport = 'eighty'\n")
    assert main(["serve", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert str(config) in error
    assert "server.port" in error


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "serve" in capsys.readouterr().out


def test_a_short_wait_is_told_in_seconds() -> None:
    from gateway_kit.cli.status import _duration

    assert _duration(29.2) == "30 s"  # a 30 s cooldown read "1 min"
    assert _duration(0) == "now"
    assert _duration(125) == "2 min"
    assert _duration(3 * 3600 + 60) == "3 h 1 min"
