"""``ProviderEmbedder``: the semantic cache's prompts embedded by one of the gateway's own
embedding models (``cache.semantic.embedder = "<model>"``), through the router: its
deployments, retries and fallbacks. The call is the gateway's own: it counts against no
workspace's quota, and its cost is not billed to anyone (it is logged at debug level)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from gateway_kit.cache.embedders import Vector
from gateway_kit.gateway import Gateway
from gateway_kit.providers.base import EmbeddingsCall

__all__ = ["EmbeddingFailed", "ProviderEmbedder"]

logger = logging.getLogger("gateway_kit.cache")


class EmbeddingFailed(RuntimeError):
    """The embedding model did not answer with vectors."""


class ProviderEmbedder:
    def __init__(self, gateway: Gateway, model: str) -> None:
        import numpy

        self._np = numpy
        self._gateway = gateway
        self._model = model
        self.id = f"model:{model}"

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        route = self._gateway.route(self._model)
        if route is None:
            raise EmbeddingFailed(f"no embedding model named {self._model!r}")
        payload: dict[str, Any] = {"model": self._model, "input": list(texts)}
        call = EmbeddingsCall(payload, None, request_id="cache-embedding")
        routed = await self._gateway.router.embeddings(route, call)
        if routed.response.status != 200:
            raise EmbeddingFailed(f"the embedding model answered {routed.response.status}")
        try:
            data = json.loads(routed.response.body)["data"]
            vectors = [self._np.asarray(item["embedding"], dtype=self._np.float32) for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingFailed(f"the embedding model's answer has no vectors: {exc}") from None
        if len(vectors) != len(texts):
            raise EmbeddingFailed("the embedding model answered with another number of vectors")
        return [v / (self._np.linalg.norm(v) or 1.0) for v in vectors]
