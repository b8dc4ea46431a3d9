"""The Auth and Limits layers alone, around a FastAPI app's own routes, under uvicorn."""

from __future__ import annotations

import importlib
from pathlib import Path

import httpx
import pytest

from gateway_kit.testing import run_server

pytestmark = pytest.mark.slow


def test_keys_and_quotas_guard_plain_fastapi_routes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "key"
    monkeypatch.setenv("GEO_DEMO_KEY_FILE", str(key_file))
    module = importlib.reload(importlib.import_module("examples.fastapi_limits"))
    with run_server(module.app) as base_url:
        key = key_file.read_text()
        auth = {"authorization": f"Bearer {key}"}
        assert httpx.get(f"{base_url}/health").json() == {"status": "ok"}
        refused = httpx.get(f"{base_url}/geocode", params={"q": "Paris"})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "missing_api_key"

        ok = httpx.get(f"{base_url}/geocode", params={"q": "Paris"}, headers=auth)
        assert ok.status_code == 200
        assert ok.json()["workspace"].startswith("ws_")
        assert ok.headers["x-ratelimit-limit"] == "10"
        assert ok.headers["x-ratelimit-remaining"] == "9"

        statuses = [
            httpx.get(f"{base_url}/geocode", params={"q": "x"}, headers=auth).status_code
            for _ in range(10)
        ]
        assert statuses == [200] * 9 + [429]
        limited = httpx.get(f"{base_url}/geocode", params={"q": "x"}, headers=auth)
        assert limited.json()["error"]["code"] == "rate_limit_exceeded"
        assert int(limited.headers["retry-after"]) >= 1
