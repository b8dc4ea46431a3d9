"""The gateway-kit command: serve (demo and configured) and its errors."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from gateway_kit.cli import main
from tests.servers import serving

pytestmark = pytest.mark.slow


def test_serve_without_config_runs_the_offline_demo_and_prints_a_working_key(
    tmp_path: Path,
) -> None:
    hello = {"model": "mock-large", "messages": [{"role": "user", "content": "Hello"}]}
    with serving(cwd=tmp_path) as (output, base_url):
        banner = "".join(output)
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
    # A restart issues a new key and the old one stops working.
    with serving(cwd=tmp_path) as (output, base_url):
        new_key = re.search(r"gk_[A-Za-z0-9_-]{43}", "".join(output))
        assert new_key is not None
        assert new_key[0] != key[0]
        url = f"{base_url}/v1/chat/completions"
        old = httpx.post(url, json=hello, headers={"authorization": f"Bearer {key[0]}"})
        assert old.status_code == 401
        new = httpx.post(url, json=hello, headers={"authorization": f"Bearer {new_key[0]}"})
        assert new.status_code == 200


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
