"""The embedding examples run under uvicorn: own routes and the mounted gateway side by side."""

from __future__ import annotations

import importlib

import httpx
import openai
import pytest

from gateway_kit.testing import run_server

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("module", "own_path", "own_body"),
    [
        ("examples.starlette_app", "/orders", {"orders": [{"id": 1, "status": "shipped"}]}),
        ("examples.fastapi_app", "/items/7", {"item_id": 7, "name": "item 7"}),
    ],
)
def test_example_serves_its_routes_and_the_gateway(
    module: str, own_path: str, own_body: object
) -> None:
    app = importlib.import_module(module).app
    with run_server(app) as base_url:
        assert httpx.get(base_url + own_path).json() == own_body
        client = openai.OpenAI(base_url=f"{base_url}/llm/v1", api_key="unused", max_retries=0)
        completion = client.chat.completions.create(
            model="mock-mini", messages=[{"role": "user", "content": "from the host app"}]
        )
        assert completion.choices[0].message.content == (
            "This is a mock reply from gateway-kit to: from the host app"
        )
        streamed = client.chat.completions.create(
            model="mock-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        models = httpx.get(f"{base_url}/llm/v1/models").json()
        assert [m["id"] for m in models["data"]][:2] == ["mock-large", "mock-mini"]
        missing = httpx.get(f"{base_url}/llm/v1/unknown")
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "not_found_error"
