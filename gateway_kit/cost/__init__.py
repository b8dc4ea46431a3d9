"""Cost: what a request costs, what it saved, and estimates before the call.

- ``usage``: token usage normalised so every token is counted once;
- ``pricing``: the offline price table (genai-prices) and configured prices;
- ``tokens``: local token estimates of prompts and outputs;
- ``encodings``: OpenAI's tokenizers, built offline from the BPE files shipped in ``data/``;
- ``tokenizer``: token counts, exact for OpenAI's models, estimated (and flagged) otherwise;
- ``costs``: ``Costs`` prices requests; ``RequestCost`` is one request's cost and savings;
- ``metering``: usage read off JSON bodies and SSE streams.
"""

from __future__ import annotations

from gateway_kit.cost.costs import Costs, RequestCost, usd_text
from gateway_kit.cost.encodings import encoding_for_model
from gateway_kit.cost.pricing import ModelPrice, PriceTable
from gateway_kit.cost.tokenizer import TokenCount, TokenCounter, count_prompt, count_text
from gateway_kit.cost.tokens import OutputEstimator, estimate_prompt_tokens, estimate_text_tokens
from gateway_kit.cost.usage import Usage

__all__ = [
    "Costs",
    "ModelPrice",
    "OutputEstimator",
    "PriceTable",
    "RequestCost",
    "TokenCount",
    "TokenCounter",
    "Usage",
    "count_prompt",
    "count_text",
    "encoding_for_model",
    "estimate_prompt_tokens",
    "estimate_text_tokens",
    "usd_text",
]
