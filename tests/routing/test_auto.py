"""Smart routing: ``auto`` picks the cheapest model that can serve the request."""

from __future__ import annotations

from typing import Any

import pytest

from gateway_kit import Gateway, GatewayConfig, create_app
from gateway_kit.cost.costs import Costs
from gateway_kit.routing import AutoSelector
from gateway_kit.testing import ASGIRecorder
from tests.fakes import offline_config

pytestmark = pytest.mark.anyio

CONFIG = GatewayConfig.model_validate(
    {
        "storage": {"url": "memory://"},
        "providers": [{"name": "mock", "type": "mock"}],
        "models": [
            # Listed priciest first: the order must not decide, the price does.
            {"name": "big", "provider": "mock", "price_as": "gpt-5.1"},
            {
                "name": "small",
                "provider": "mock",
                "price_as": "gpt-5-mini",
                "context_window": 1000,
                "supports_vision": False,
            },
            {
                "name": "tiny",
                "provider": "mock",
                "price_as": "gpt-5-nano",
                "supports_tools": False,
                "supports_json": False,
                "supports_vision": False,
            },
        ],
        "routing": {
            "auto": [
                {
                    "name": "auto",
                    "models": ["big", "small", "tiny"],
                    "reserve_output_tokens": 100,
                    "complexity": {
                        "min_prompt_tokens": 5000,
                        "patterns": [r"\bprove\b"],
                        "models": ["big"],
                    },
                }
            ]
        },
    }
)

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def selector() -> AutoSelector:
    models = {m.name: m for m in CONFIG.models}
    return AutoSelector(CONFIG.routing.auto[0], models, Costs(CONFIG))


def ask(content: Any = "hello", **fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": content}], **fields}


@pytest.mark.parametrize(
    ("request_body", "chosen"),
    [
        pytest.param(ask(), "tiny", id="plain-chat-goes-cheapest"),
        pytest.param(ask(tools=[TOOL]), "small", id="tools"),
        pytest.param(ask(response_format={"type": "json_object"}), "small", id="json"),
        pytest.param(
            ask(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
            "small",
            id="structured-output",
        ),
        pytest.param(ask([{"type": "text", "text": "what is it"}, IMAGE]), "big", id="vision"),
        pytest.param(ask("word " * 1200, tools=[TOOL]), "big", id="too-long-for-small"),
        pytest.param(ask("hi", tools=[TOOL], max_tokens=2000), "big", id="answer-room-counts"),
        pytest.param(ask("Please prove that 2 is prime"), "big", id="complexity-pattern"),
        pytest.param(ask("lorem ipsum " * 6000), "big", id="complexity-length"),
    ],
)
def test_the_cheapest_model_that_can_serve_the_request_is_chosen(
    request_body: dict[str, Any], chosen: str
) -> None:
    choice = selector().choose(request_body)
    assert choice.model == chosen, choice.reason


def test_what_a_model_was_seen_answering_never_makes_it_look_cheaper() -> None:
    """The expensive model answered a few short questions (its learned length: 12 tokens),
    the cheap ones never (the prior, 512, stands until they answer): priced at their own
    lengths, the expensive one looked cheapest and was chosen from then on, so the cheap ones
    never got answers to learn from. All candidates are priced at one answer length."""
    costs = Costs(CONFIG)
    chosen = AutoSelector(CONFIG.routing.auto[0], {m.name: m for m in CONFIG.models}, costs)
    for _ in range(10):
        costs.outputs.observe("big", 12)
    assert chosen.choose(ask()).model == "tiny"
    assert chosen.choose(ask(tools=[TOOL])).model == "small"


def test_no_fitting_model_says_why() -> None:
    choice = selector().choose(ask([IMAGE], tools=[TOOL], max_tokens=10**7))
    assert choice.model is None
    assert "tools" in choice.reason
    assert "vision" in choice.reason


async def test_auto_through_the_gateway_names_its_choice_and_prices_it() -> None:
    async with Gateway(CONFIG.model_copy(update={"auth": offline_config().auth})) as gateway:
        recorder = ASGIRecorder(create_app(gateway=gateway))
        response = await recorder.request("POST", "/v1/chat/completions", json=ask(tools=[TOOL]))
        assert response.status == 200, response.body
        assert response.headers["x-gateway-auto"] == "small"
        assert "tools" in response.headers["x-gateway-auto-reason"]
        assert response.headers["x-gateway-model"] == "small"
        # Savings against the flagship follow from the price of the model chosen.
        assert float(response.headers["x-gateway-savings-usd"]) > 0

        refused = await recorder.request(
            "POST", "/v1/chat/completions", json=ask([IMAGE], tools=[TOOL], max_tokens=10**7)
        )
        assert refused.status == 400
        assert refused.json()["error"]["code"] == "no_model_fits"
        assert refused.json()["error"]["param"] == "model"

        listed = await recorder.request("GET", "/v1/models")
        assert "auto" in [m["id"] for m in listed.json()["data"]]


async def test_the_offline_demo_has_an_auto_model() -> None:
    async with Gateway(offline_config()) as gateway:
        recorder = ASGIRecorder(create_app(gateway=gateway))
        plain = await recorder.request("POST", "/v1/chat/completions", json=ask())
        assert plain.headers["x-gateway-auto"] == "mock-mini"
        hard = await recorder.request(
            "POST", "/v1/chat/completions", json=ask("Explain the architecture step by step")
        )
        assert hard.headers["x-gateway-auto"] == "mock-large"
