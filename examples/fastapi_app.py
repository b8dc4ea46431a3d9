"""Mount the gateway beside a FastAPI app's own endpoints.

    uvicorn examples.fastapi_app:app

The FastAPI routes (and their OpenAPI docs) are untouched; the gateway answers under /llm
(OpenAI base URL: http://127.0.0.1:8000/llm/v1). An endpoint of your own can call a model
through the same Gateway object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway_kit import AuthConfig, Gateway, GatewayConfig, StorageConfig, create_app

# The offline mock, state in memory, and no API keys: an internal service behind its own auth.
# In real life: Gateway(load_config("gateway.toml")); examples/fastapi_limits.py shows keys.
gateway = Gateway(
    GatewayConfig(storage=StorageConfig(url="memory://"), auth=AuthConfig(mode="off"))
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with gateway:
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/items/{item_id}")
async def read_item(item_id: int) -> dict[str, int | str]:
    return {"item_id": item_id, "name": f"item {item_id}"}


app.mount("/llm", create_app(gateway=gateway))
