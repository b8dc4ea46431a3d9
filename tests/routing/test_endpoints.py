"""``POST /v1/embeddings`` (routed like chat, priced, counted) and ``GET /v1/models/{model}``."""

from __future__ import annotations

import base64
import struct
from typing import Any

import httpx
import pytest

from tests.fakes import provisioned

pytestmark = pytest.mark.anyio

CONFIG = {
    "providers": [
        {"name": "up", "base_url": "https://upstream.test/v1"},
        {"name": "mock", "type": "mock"},
    ],
    "models": [
        {"name": "gpt-fake", "provider": "up"},
        {
            "name": "embed",
            "provider": "mock",
            "kind": "embedding",
            "price_as": "text-embedding-3-small",
        },
        {"name": "embed-up", "provider": "up", "kind": "embedding", "fallbacks": ["embed"]},
    ],
    "routing": {"backoff_s": 0.001, "max_backoff_s": 0.001},
}


async def embed(env: Any, **body: Any) -> Any:
    return await env.recorder.request(
        "POST",
        "/v1/embeddings",
        json={"model": "embed", "input": "hello", **body},
        headers=env.auth(),
    )


async def test_embeddings_are_served_priced_and_counted() -> None:
    async with provisioned("scale", **CONFIG) as env:
        texts = [
            "lorem ipsum dolor sit amet " * 400,
            "world",
        ]  # enough tokens to cost micro-dollars
        response = await embed(env, input=texts, dimensions=8)
        assert response.status == 200, response.body
        body = response.json()
        assert [d["index"] for d in body["data"]] == [0, 1]
        assert all(len(d["embedding"]) == 8 for d in body["data"])
        again = (await embed(env, input=texts, dimensions=8)).json()
        assert again["data"] == body["data"]  # deterministic
        assert body["usage"]["prompt_tokens"] > 0
        assert float(response.headers["x-gateway-cost-usd"]) > 0
        assert "x-gateway-cost-estimated" not in response.headers  # the reported usage
        assert response.headers["x-gateway-model"] == "embed"
        assert await env.used_requests() == 2
        budget = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/budget", headers=env.auth()
        )
        assert float(budget.json()["spent_usd"]) > 0


async def test_base64_embeddings_decode_to_the_same_vector() -> None:
    async with provisioned("scale", **CONFIG) as env:
        floats = (await embed(env, dimensions=4)).json()["data"][0]["embedding"]
        packed = (await embed(env, dimensions=4, encoding_format="base64")).json()
        raw = base64.b64decode(packed["data"][0]["embedding"])
        assert struct.unpack("<4f", raw) == pytest.approx(floats, rel=1e-6)


async def test_embeddings_fall_back_like_chat() -> None:
    async with provisioned("scale", **CONFIG) as env:
        env.upstream.error = httpx.ConnectError("refused")
        response = await embed(env, model="embed-up")
        assert response.status == 200
        assert response.headers["x-gateway-model"] == "embed"
        assert response.headers["x-gateway-fallbacks"] == "1"
        assert env.upstream.calls == 2
        assert env.upstream.requests[0].url.path == "/v1/embeddings"


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        ({"input": ""}, 400, "invalid_value", "input"),
        ({"input": []}, 400, "invalid_type", "input"),
        ({"input": [1, "a"]}, 400, "invalid_type", "input"),
        ({"input": None}, 400, "invalid_type", "input"),
        ({"encoding_format": "hex"}, 400, "invalid_value", "encoding_format"),
        ({"dimensions": 0}, 400, "invalid_type", "dimensions"),
        ({"model": "nope"}, 404, "model_not_found", "model"),
        ({"model": "gpt-fake"}, 400, "model_not_supported", "model"),
    ],
)
async def test_bad_embeddings_requests_are_refused_and_hold_nothing(
    body: dict[str, Any], status: int, code: str, param: str
) -> None:
    async with provisioned("scale", **CONFIG) as env:
        response = await embed(env, **body)
        assert response.status == status
        error = response.json()["error"]
        assert (error["code"], error["param"]) == (code, param)
        assert await env.used_requests() == 0


async def test_an_embedding_model_is_refused_on_the_chat_route() -> None:
    async with provisioned("scale", **CONFIG) as env:
        response = await env.chat(model="embed")
        assert response.status == 400
        assert response.json()["error"]["code"] == "model_not_supported"
        assert "/v1/embeddings" in response.json()["error"]["message"]


async def test_one_model_is_read_by_name_and_an_unknown_one_is_404() -> None:
    async with provisioned("scale", **CONFIG) as env:
        found = await env.recorder.request("GET", "/v1/models/embed", headers=env.auth())
        assert found.status == 200
        assert found.json() == {"id": "embed", "object": "model", "created": 0, "owned_by": "mock"}
        missing = await env.recorder.request("GET", "/v1/models/nope", headers=env.auth())
        assert missing.status == 404
        assert missing.json()["error"]["code"] == "model_not_found"
        anonymous = await env.recorder.request("GET", "/v1/models/embed")
        assert anonymous.status == 401


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"object": "list", "data": [{"embedding": [0.1', id="cut"),
        pytest.param(b'{"object": "list"}', id="no-data"),
    ],
)
async def test_a_2xx_that_is_not_an_embeddings_list_falls_back(body: bytes) -> None:
    async with provisioned("scale", **CONFIG) as env:
        env.upstream.raw_body = body
        response = await embed(env, model="embed-up")
        assert response.status == 200
        assert response.headers["x-gateway-model"] == "embed"
        assert env.upstream.calls == 2
