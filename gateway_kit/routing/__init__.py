"""Routing: the model table, the router (retries, fallback, cooldown) and smart routing.

table = ModelTable(config, providers)       # the one place that knows which models exist
route = table.resolve("gpt-4o")             # None: no such model
routed = await router.chat(route, call)     # served by a deployment, or RoutingFailed
"""

from gateway_kit.routing.auto import AutoChoice, AutoSelector, Needs
from gateway_kit.routing.cooldown import Cooldowns, Health
from gateway_kit.routing.models import Deployment, ModelRoute, ModelTable
from gateway_kit.routing.router import Attempt, Routed, Router, RoutingFailed

__all__ = [
    "Attempt",
    "AutoChoice",
    "AutoSelector",
    "Cooldowns",
    "Deployment",
    "Health",
    "ModelRoute",
    "ModelTable",
    "Needs",
    "Routed",
    "Router",
    "RoutingFailed",
]
