"""The one place that fixes the order of the layers (DESIGN.md section 2).

    client -> Observe -> Auth -> Limits -> Guardian -> Shield -> PII -> ModelSelect -> Budget
           -> Cache -> Router -> Provider -> upstream

Observe comes first so that every request of these routes is recorded as it ends (the request
log, metrics, the log line), the ones a layer refuses included.

Cheap rejections come first, so a request refused for its key or its quota costs no storage
writes further in, no detector time and no upstream call. The model is resolved before Budget
prices it and before the Cache partitions on it: the first piece that needs the model
(Budget, else the endpoint) resolves it once (``chat.model``: smart routing's ``auto`` models
included), and refuses an unknown one before the admission holds anything. The router is not a
layer: the endpoint calls it. Whoever embeds single layers may order them differently; the
standalone gateway always uses this order.
"""

from __future__ import annotations

from gateway_kit._asgi import ASGIApp
from gateway_kit.chat.endpoint import ChatCompletionsEndpoint, EmbeddingsEndpoint
from gateway_kit.gateway import Gateway
from gateway_kit.layers.auth import AuthMiddleware
from gateway_kit.layers.budget import BudgetMiddleware
from gateway_kit.layers.cache import CacheMiddleware
from gateway_kit.layers.guardian import GuardianMiddleware
from gateway_kit.layers.limits import LimitsMiddleware
from gateway_kit.layers.observe import ObserveMiddleware
from gateway_kit.layers.pii.middleware import PIIMiddleware

#: The inference routes' layers, outermost first. Each takes ``(app, *, gateway=...)``.
CHAT_LAYERS = (
    ObserveMiddleware,
    AuthMiddleware,
    LimitsMiddleware,
    GuardianMiddleware,
    PIIMiddleware,
    BudgetMiddleware,
    CacheMiddleware,
)


def build_chat_stack(gateway: Gateway) -> ASGIApp:
    """``POST /v1/chat/completions``: the proxy endpoint inside the layers, in order."""
    return _layered(ChatCompletionsEndpoint(gateway), gateway)


def build_embeddings_stack(gateway: Gateway) -> ASGIApp:
    """``POST /v1/embeddings``: the same layers (quota, budget) around the embeddings endpoint."""
    return _layered(EmbeddingsEndpoint(gateway), gateway)


def _layered(endpoint: ASGIApp, gateway: Gateway) -> ASGIApp:
    app = endpoint
    for layer in reversed(CHAT_LAYERS):
        app = layer(app, gateway=gateway)
    return app
