"""API keys and quotas in front of a FastAPI app's own endpoints: no LLM involved.

    uvicorn examples.fastapi_limits:app

``AuthMiddleware`` and ``LimitsMiddleware`` work on any route: here they guard a small
geocoding API. Each workspace's key must be sent as ``Authorization: Bearer <key>``; every
response carries ``RateLimit`` headers; requests past the plan get 429 or 402 in the OpenAI
error shape. ``/health`` stays public. Keys are made with ``gateway-kit keys create`` (against
the same storage) or, as here, at start-up for the demo.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request

from gateway_kit import (
    AuthMiddleware,
    Gateway,
    GatewayConfig,
    LimitsMiddleware,
    PlanConfig,
    StorageConfig,
    get_context,
)

gateway = Gateway(
    GatewayConfig(
        storage=StorageConfig(url=os.environ.get("GEO_STORAGE_URL", "memory://")),
        plans={"free": PlanConfig(included_requests=100, burst_limit_rpm=10)},
        default_plan="free",
    )
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with gateway:
        if os.environ.get("GEO_DEMO_KEY_FILE"):  # the demo: one workspace, its key written out
            workspace = await gateway.workspaces.create("demo@example.com")
            made = await gateway.keys.create(workspace.id)
            await anyio.Path(os.environ["GEO_DEMO_KEY_FILE"]).write_text(made.secret)
        yield


app = FastAPI(lifespan=lifespan)
# Starlette runs the last added middleware first: Auth, then Limits, then the routes.
app.add_middleware(LimitsMiddleware, gateway=gateway)
app.add_middleware(AuthMiddleware, gateway=gateway, public_paths=["/health"])


@app.get("/geocode")
async def geocode(q: str, request: Request) -> dict[str, object]:
    principal = get_context(request.scope).principal
    assert principal is not None  # AuthMiddleware let the request through
    return {"query": q, "lat": 48.8566, "lon": 2.3522, "workspace": principal.workspace_id}


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
