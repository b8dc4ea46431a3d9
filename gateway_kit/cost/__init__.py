"""Cost: what a request costs, what it saved, and estimates before the call.

- ``usage``: token usage normalised so every token is counted once;
- ``pricing``: the offline price table (genai-prices) and configured prices;
- ``tokens``: local token estimates of prompts and outputs;
- ``costs``: ``Costs`` prices requests; ``RequestCost`` is one request's cost and savings;
- ``metering``: usage read off JSON bodies and SSE streams.
"""

from __future__ import annotations

from gateway_kit.cost.costs import Costs, RequestCost, usd_text
from gateway_kit.cost.pricing import ModelPrice, PriceTable
from gateway_kit.cost.tokens import OutputEstimator, estimate_prompt_tokens, estimate_text_tokens
from gateway_kit.cost.usage import Usage

__all__ = [
    "Costs",
    "ModelPrice",
    "OutputEstimator",
    "PriceTable",
    "RequestCost",
    "Usage",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
    "usd_text",
]
