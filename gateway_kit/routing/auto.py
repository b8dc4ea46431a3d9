"""Smart routing: an ``auto`` model picks, per request, the cheapest model that can serve it.

The rules, in order:

1. **What the request needs**: tools (``tools`` or ``functions`` given), JSON output
   (``response_format`` of type ``json_object`` or ``json_schema``), vision (an image part in
   any message), and room in the context window: the prompt's tokens (counted locally) plus
   the answer's (``max_completion_tokens``/``max_tokens``, else ``reserve_output_tokens``).
   A model qualifies when it supports each need (``supports_tools``, ``supports_json``,
   ``supports_vision`` in its configuration) and its context window (configured, else the
   price table's; unknown counts as large enough) holds the tokens.
2. **Complexity** (optional): a prompt of at least ``min_prompt_tokens`` tokens, or whose last
   user message matches one of ``patterns``, may only go to ``complexity.models``.
3. **Price**: among the qualifying models, the cheapest for this request (its prompt and the
   usual answer length, at each model's price); models without a price come last, in the order
   listed. Ties keep the configured order.

The savings against the flagship model follow: the request is priced at the model chosen.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway_kit.config import AutoModelConfig, ModelConfig
from gateway_kit.cost.costs import Costs
from gateway_kit.cost.tokens import estimate_prompt_tokens
from gateway_kit.providers.base import asks_for_json

__all__ = ["AutoChoice", "AutoSelector", "Needs"]


@dataclass(frozen=True, slots=True)
class Needs:
    """What one request needs from the model that serves it."""

    tools: bool = False
    json: bool = False
    vision: bool = False
    #: Prompt tokens plus room for the answer.
    tokens: int = 0
    complex: bool = False

    def describe(self) -> str:
        wanted = [name for name in ("tools", "json", "vision") if getattr(self, name)]
        if self.complex:
            wanted.append("complex")
        return ", ".join([*wanted, f"{self.tokens} tokens"])


@dataclass(frozen=True, slots=True)
class AutoChoice:
    """The model an ``auto`` request goes to, or why none could take it."""

    model: str | None
    needs: Needs
    reason: str


@dataclass(frozen=True, slots=True)
class _Candidate:
    name: str
    config: ModelConfig
    context_window: int | None


class AutoSelector:
    """Chooses among one ``auto`` model's candidates; see the module docstring."""

    def __init__(
        self, config: AutoModelConfig, models: Mapping[str, ModelConfig], costs: Costs
    ) -> None:
        self.name = config.name
        self._config = config
        self._costs = costs
        self._candidates = [self._candidate(models[name]) for name in config.models]
        complexity = config.complexity
        self._complex_candidates: list[_Candidate] = []
        self._patterns: list[re.Pattern[str]] = []
        if complexity is not None:
            self._complex_candidates = [self._candidate(models[n]) for n in complexity.models]
            self._patterns = [re.compile(p, re.IGNORECASE) for p in complexity.patterns]

    def _candidate(self, model: ModelConfig) -> _Candidate:
        window = model.context_window or self._costs.context_window(model.name)
        return _Candidate(model.name, model, window)

    def needs(self, payload: Mapping[str, Any]) -> Needs:
        prompt = estimate_prompt_tokens(payload)
        answer = payload.get("max_completion_tokens") or payload.get("max_tokens")
        if not isinstance(answer, int):
            answer = self._config.reserve_output_tokens
        return Needs(
            tools=bool(payload.get("tools") or payload.get("functions")),
            json=asks_for_json(payload),
            vision=_has_image(payload),
            tokens=prompt + answer,
            complex=self._is_complex(payload, prompt),
        )

    def _is_complex(self, payload: Mapping[str, Any], prompt_tokens: int) -> bool:
        complexity = self._config.complexity
        if complexity is None:
            return False
        threshold = complexity.min_prompt_tokens
        if threshold is not None and prompt_tokens >= threshold:
            return True
        text = _last_user_text(payload)
        return any(pattern.search(text) for pattern in self._patterns)

    def choose(self, payload: Mapping[str, Any]) -> AutoChoice:
        needs = self.needs(payload)
        pool = self._complex_candidates if needs.complex else self._candidates
        fitting = [c for c in pool if _fits(c, needs)]
        if not fitting:
            return AutoChoice(
                None, needs, f"no model of '{self.name}' can serve it ({needs.describe()})"
            )
        # One answer length for every candidate: the longest any of them usually gives. Each
        # model's own would favour the one seen answering briefly over one never served yet
        # (its prior, 512 tokens, stands until it has answered): once the expensive model had
        # answered a few short questions, the cheap one was never chosen again.
        costs = self._costs
        output = max(costs.outputs.estimate(c.name, payload) for c in fitting)
        usage = costs.estimate_usage(fitting[0].name, payload, output_tokens=output)
        priced = [
            (costs.prices.cost_micro_usd(costs.ref(c.name), usage), index, c)
            for index, c in enumerate(fitting)
        ]
        priced.sort(key=lambda item: (item[0] is None, item[0] or 0, item[1]))
        chosen = priced[0][2]
        return AutoChoice(chosen.name, needs, f"cheapest fit ({needs.describe()})")


def _fits(candidate: _Candidate, needs: Needs) -> bool:
    config = candidate.config
    if needs.tools and not config.supports_tools:
        return False
    if needs.json and not config.supports_json:
        return False
    if needs.vision and not config.supports_vision:
        return False
    window = candidate.context_window
    return window is None or needs.tokens <= window


def _has_image(payload: Mapping[str, Any]) -> bool:
    for message in payload.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in ("image_url", "input_image"):
                    return True
    return False


def _last_user_text(payload: Mapping[str, Any]) -> str:
    for message in reversed(payload.get("messages") or ()):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    part.get("text", "")
                    for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
    return ""
