"""The answer cache of a workspace: ``/api/v1/workspaces/{workspace_id}/cache``.

- ``GET    .../cache``            the cache's settings, the workspace's counts (exact and
  semantic hits, misses, bypasses, answers stored, hit rate, the semantic lookups' similarity
  histogram) and its entries in this gateway process                         ``cache:read``
- ``PATCH  .../cache``            ``{"semantic": true | false}``: look the workspace's requests
  up by meaning too (the semantic cache)                                     ``cache:write``
- ``DELETE .../cache[?model=m]``  purge the workspace's answers (of one model), here at once
  and in every gateway process on the storage through the change feed        ``cache:write``

The operator does the same for any workspace at ``/api/v1/admin/workspaces/{id}/cache``, and
purges everything at ``DELETE /api/v1/admin/cache[?model=m]``.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway_kit.accounts.scopes import KeyScope
from gateway_kit.api._auth import requires
from gateway_kit.api._common import ApiError, check_fields, json_body, json_response, principal_of
from gateway_kit.cache.settings import CacheSettings
from gateway_kit.config.base import NAME_PATTERN
from gateway_kit.exceptions import ConfigError
from gateway_kit.gateway import Gateway

__all__ = ["cache_routes", "cache_status", "change_cache", "purge_cache"]

_MODEL = re.compile(NAME_PATTERN)


async def cache_status(gateway: Gateway, workspace_id: str) -> dict[str, Any]:
    config = gateway.config.cache
    stats = await gateway.cache.stats(workspace_id)
    settings = await gateway.cache.settings.get(workspace_id)
    return {
        "object": "cache",
        "workspace_id": workspace_id,
        "mode": config.mode.value,
        "scope": config.scope,
        "ttl_s": config.ttl_s,
        "max_temperature": config.max_temperature,
        "semantic": settings.semantic,
        "semantic_models": list(config.semantic.models),
        "semantic_threshold": config.semantic.threshold,
        "semantic_guard": config.semantic.guard,
        "hits": stats.hits,
        "semantic_hits": stats.semantic_hits,
        "misses": stats.misses,
        "bypasses": stats.bypasses,
        "stored": stats.stored,
        "hit_rate": round(stats.hit_rate, 4),
        "entries": stats.store.entries,
        "bytes": stats.store.bytes,
        "max_entries": stats.store.max_entries,
        "max_bytes": stats.store.max_bytes,
        "similarity_histogram": stats.similarity,
    }


async def change_cache(gateway: Gateway, workspace_id: str, body: dict[str, Any]) -> None:
    """Apply a ``PATCH .../cache`` body."""
    check_fields(body, ["semantic"])
    semantic = body.get("semantic")
    if not isinstance(semantic, bool):
        raise ApiError(
            400, "'semantic' must be true or false.", code="invalid_type", param="semantic"
        )
    if semantic and gateway.config.cache.semantic.embedder == "local":
        try:
            gateway.cache.local_embedder()  # loads it now: a missing extra is said here
        except ConfigError as exc:
            raise ApiError(400, f"{exc}.", code="semantic_unavailable", param="semantic") from None
    await gateway.cache.settings.save(workspace_id, CacheSettings(semantic=semantic))


async def purge_cache(gateway: Gateway, workspace_id: str | None, request: Request) -> Response:
    """Purge ``workspace_id``'s answers (every workspace's: ``None``), of ``?model=`` if given."""
    model = request.query_params.get("model")
    unknown = set(request.query_params) - {"model"}
    if unknown:
        name = sorted(unknown)[0]
        raise ApiError(
            400, f"Unknown query parameter '{name}'.", code="unknown_parameter", param=name
        )
    if model is not None and not _MODEL.match(model):
        raise ApiError(400, "'model' is not a model name.", code="invalid_value", param="model")
    purged = await gateway.cache.purge(workspace_id, model)
    return json_response(
        {"object": "cache.purge", "workspace_id": workspace_id, "model": model, "purged": purged}
    )


def cache_routes(gateway: Gateway) -> list[Route]:
    async def read(request: Request) -> Response:
        return json_response(await cache_status(gateway, principal_of(request).workspace_id))

    async def purge(request: Request) -> Response:
        try:
            return await purge_cache(gateway, principal_of(request).workspace_id, request)
        except ApiError as exc:
            return exc.response()

    async def update(request: Request) -> Response:
        workspace_id = principal_of(request).workspace_id
        try:
            await change_cache(gateway, workspace_id, await json_body(request))
        except ApiError as exc:
            return exc.response()
        return json_response(await cache_status(gateway, workspace_id))

    path = "/workspaces/{workspace_id}/cache"
    return [
        Route(path, read, methods=["GET"], middleware=requires(gateway, KeyScope.CACHE_READ)),
        Route(path, update, methods=["PATCH"], middleware=requires(gateway, KeyScope.CACHE_WRITE)),
        Route(path, purge, methods=["DELETE"], middleware=requires(gateway, KeyScope.CACHE_WRITE)),
    ]
