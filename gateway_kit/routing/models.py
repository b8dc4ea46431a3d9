"""The model table: which public model names exist, where each is served, what it falls back to.

``ModelTable.resolve`` is the one place that decides whether a model exists; everything else
(the layers, the endpoints, ``GET /v1/models``) asks it. ``ModelTable.plan`` orders where one
request may go: the model's deployments (the first drawn by weight, the rest after it, standbys
of weight 0 last), then each model of its fallback chain the same way, depth first. The
configuration is checked for unknown names and cycles before a table is built.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gateway_kit.config import GatewayConfig, ModelConfig
from gateway_kit.providers.base import Provider

__all__ = ["Deployment", "ModelRoute", "ModelTable"]


@dataclass(frozen=True, slots=True, eq=False)
class Deployment:
    """One place a model is served."""

    #: The public model name it serves.
    model: str
    provider: Provider
    upstream_model: str
    weight: float
    #: The identity its health is kept under, shared by every gateway instance:
    #: ``<provider>/<upstream model>`` (two public names served by the same upstream model of
    #: the same provider share it).
    key: str
    #: Request fields this deployment's provider must not receive (``drop_params``).
    drop: frozenset[str] = frozenset()

    @property
    def provider_name(self) -> str:
        return self.provider.name


@dataclass(frozen=True, slots=True, eq=False)
class ModelRoute:
    """A public model name: its deployments and fallback chain."""

    name: str
    kind: Literal["chat", "embedding"]
    deployments: tuple[Deployment, ...]
    #: The models tried after this one, flattened depth first, without repeats.
    chain: tuple[ModelRoute, ...] = ()
    config: ModelConfig | None = field(default=None, repr=False)
    #: Weights of the weighted deployments, for drawing the first (standbys excluded).
    _weighted: tuple[Deployment, ...] = ()
    _weights: tuple[float, ...] = ()

    @property
    def upstream_model(self) -> str:
        """The upstream name of the first deployment (the one of a single-deployment model)."""
        return self.deployments[0].upstream_model

    @property
    def provider(self) -> Provider:
        """The provider of the first deployment."""
        return self.deployments[0].provider

    def ordered(self, rng: random.Random) -> list[Deployment]:
        """This model's deployments in the order to try them for one request."""
        if len(self.deployments) == 1:
            return [self.deployments[0]]
        rest = list(self._weighted)
        weights = list(self._weights)
        order: list[Deployment] = []
        while rest:
            pick = rng.choices(range(len(rest)), weights=weights)[0]
            order.append(rest.pop(pick))
            weights.pop(pick)
        order += [d for d in self.deployments if d.weight == 0]
        return order


def _deployment_key(provider: str, upstream: str) -> str:
    # Storage keys may not hold braces (Redis hash tags); no real model name has them.
    return f"{provider}/{upstream}".replace("{", "(").replace("}", ")")


class ModelTable:
    """The configured models, resolved against the running providers."""

    def __init__(
        self,
        config: GatewayConfig,
        providers: Mapping[str, Provider],
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._rng = rng or random.Random()
        drops = {p.name: frozenset(p.drop_params) for p in config.providers}
        routes: dict[str, ModelRoute] = {}
        for model in config.models:
            deployments = tuple(
                Deployment(
                    model.name,
                    providers[d.provider],
                    d.upstream_model or model.name,
                    d.weight,
                    _deployment_key(d.provider, d.upstream_model or model.name),
                    drops.get(d.provider, frozenset()),
                )
                for d in model.served_by
            )
            weighted = tuple(d for d in deployments if d.weight > 0)
            routes[model.name] = ModelRoute(
                model.name,
                model.kind,
                deployments,
                config=model,
                _weighted=weighted,
                _weights=tuple(d.weight for d in weighted),
            )
        # The chains, now that every route exists (the configuration has no cycles).
        by_name = {m.name: m for m in config.models}
        self._routes = {
            name: _with_chain(route, _chain(name, by_name, routes))
            for name, route in routes.items()
        }

    def resolve(self, name: str) -> ModelRoute | None:
        """The route of a public model name; ``None`` when there is no such model."""
        return self._routes.get(name)

    def __iter__(self) -> Iterator[ModelRoute]:
        return iter(self._routes.values())

    @property
    def deployment_keys(self) -> list[str]:
        """The health identity of every deployment, once each (what ``Cooldowns.run`` keeps
        current)."""
        return list(dict.fromkeys(d.key for route in self for d in route.deployments))

    def plan(self, route: ModelRoute) -> Sequence[Deployment]:
        """Where one request for ``route`` may go, in the order to try."""
        if len(route.deployments) == 1 and not route.chain:
            return route.deployments  # nothing to draw or chain: the usual single deployment
        order = route.ordered(self._rng)
        for fallback in route.chain:
            order += fallback.ordered(self._rng)
        return order


def _chain(
    name: str, configs: Mapping[str, ModelConfig], routes: Mapping[str, ModelRoute]
) -> tuple[ModelRoute, ...]:
    seen = {name}
    chain: list[ModelRoute] = []

    def visit(model: str) -> None:
        for fallback in configs[model].fallbacks:
            if fallback not in seen:
                seen.add(fallback)
                chain.append(routes[fallback])
                visit(fallback)

    visit(name)
    return tuple(chain)


def _with_chain(route: ModelRoute, chain: Sequence[ModelRoute]) -> ModelRoute:
    return ModelRoute(
        route.name,
        route.kind,
        route.deployments,
        tuple(chain),
        route.config,
        route._weighted,
        route._weights,
    )
