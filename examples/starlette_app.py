"""Mount the gateway beside a Starlette app's own routes.

    uvicorn examples.starlette_app:app

Your routes stay where they are; the gateway answers under /llm (OpenAI base URL:
http://127.0.0.1:8000/llm/v1). The app's lifespan enters the Gateway, which owns the
gateway's HTTP clients and storage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from gateway_kit import AuthConfig, Gateway, GatewayConfig, StorageConfig, create_app

# The offline mock, state in memory, and no API keys: an internal service behind its own auth.
# In real life: Gateway(load_config("gateway.toml")); examples/fastapi_limits.py shows keys.
gateway = Gateway(
    GatewayConfig(storage=StorageConfig(url="memory://"), auth=AuthConfig(mode="off"))
)


async def orders(request: Request) -> JSONResponse:
    return JSONResponse({"orders": [{"id": 1, "status": "shipped"}]})


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with gateway:
        yield


app = Starlette(
    routes=[
        Route("/orders", orders),
        Mount("/llm", app=create_app(gateway=gateway)),
    ],
    lifespan=lifespan,
)
