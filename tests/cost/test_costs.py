"""``Costs`` without ASGI: a model served by deployments of other upstream models is priced by
the one that answered and holds the dearest; output lengths are learnt per choice."""

from __future__ import annotations

from gateway_kit import GatewayConfig
from gateway_kit.cost.costs import Costs
from gateway_kit.cost.usage import Usage

TWO_DEPLOYMENTS = {
    "providers": [{"name": "up", "base_url": "https://up.test/v1"}],
    "models": [
        {
            "name": "chat",
            "deployments": [
                {"provider": "up", "upstream_model": "gpt-4o-mini", "weight": 1},
                {"provider": "up", "upstream_model": "gpt-4o", "weight": 0},
            ],
        },
        {"name": "mini", "provider": "up", "upstream_model": "gpt-4o-mini"},
        {"name": "big", "provider": "up", "upstream_model": "gpt-4o"},
    ],
}
USAGE = Usage(100_000, 100_000)


def test_each_deployment_is_priced_as_its_own_upstream_model() -> None:
    costs = Costs(GatewayConfig.model_validate(TWO_DEPLOYMENTS))
    mini, big = costs.of("mini", USAGE).cost_micro_usd, costs.of("big", USAGE).cost_micro_usd
    assert mini is not None
    assert big is not None
    assert big > 10 * mini
    assert costs.of("chat", USAGE, upstream="gpt-4o-mini").cost_micro_usd == mini
    # The standby answered: its price (it was billed at the first deployment's, 16x less).
    assert costs.of("chat", USAGE, upstream="gpt-4o").cost_micro_usd == big
    assert costs.of("chat", USAGE).cost_micro_usd == mini  # no deployment named: the first's
    # Before the call, whichever may answer: the dearest is held.
    request = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
    assert costs.reservation("chat", request) == costs.reservation("big", request)


def test_a_price_as_or_a_configured_price_prices_every_deployment() -> None:
    config = {
        **TWO_DEPLOYMENTS,
        "models": [{**TWO_DEPLOYMENTS["models"][0], "price_as": "gpt-4o-mini"}],  # type: ignore[dict-item]
    }
    costs = Costs(GatewayConfig.model_validate(config))
    assert costs.of("chat", USAGE, upstream="gpt-4o") == costs.of("chat", USAGE)


def test_output_lengths_are_learnt_per_choice() -> None:
    costs = Costs(GatewayConfig())
    request = {"model": "mock-large", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(10):
        # Answers of n=4, 1,000 output tokens each choice: 4,000 in all.
        costs.observe(costs.of("mock-large", Usage(10, 4000)), choices=4)
    # One choice is 1,000 tokens; n=4 reserves four of them (it reserved 16,000).
    assert costs.outputs.estimate("mock-large", request) == 1000
    assert costs.outputs.estimate("mock-large", {**request, "n": 4}) == 4000
