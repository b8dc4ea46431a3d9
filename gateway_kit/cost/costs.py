"""What a request costs, what it would have cost on the flagship model, and estimates before it.

    costs = Costs(config, prices)
    costs.reservation("gpt-4o-mini", request)    # micro-USD to reserve before the call
    cost = costs.of("gpt-4o-mini", usage)        # after: RequestCost (exact or estimated)
    cost.savings_micro_usd                       # flagship price of the same usage, minus cost

Models are priced by the name the price table knows them by: a configured ``price`` first (for
private and self-hosted models), then ``price_as``, the upstream name, or the public name. Money
is integer micro-USD throughout; a model nobody can price costs ``None`` (shown as unknown,
never as free) and saves nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway_kit.config import GatewayConfig
from gateway_kit.cost.money import usd_text
from gateway_kit.cost.pricing import ModelPrice, PriceTable
from gateway_kit.cost.tokens import OutputEstimator, estimate_prompt_tokens
from gateway_kit.cost.usage import Usage
from gateway_kit.exceptions import ConfigError

__all__ = ["Costs", "RequestCost", "usd_text"]


@dataclass(frozen=True, slots=True)
class RequestCost:
    """The cost of one request. ``estimated`` when the usage was estimated, not reported."""

    model: str
    usage: Usage
    #: Integer micro-USD; ``None`` when the model has no price.
    cost_micro_usd: int | None
    #: The same usage at the flagship model's price; ``None`` when either has no price.
    baseline_micro_usd: int | None

    @property
    def estimated(self) -> bool:
        return self.usage.estimated

    @property
    def savings_micro_usd(self) -> int:
        """Baseline minus cost; negative when the request used a model pricier than the flagship."""
        if self.cost_micro_usd is None or self.baseline_micro_usd is None:
            return 0
        return self.baseline_micro_usd - self.cost_micro_usd

    def headers(self) -> list[tuple[bytes, bytes]]:
        """``x-gateway-cost-usd`` (and ``-estimated``), ``x-gateway-savings-usd``."""
        if self.cost_micro_usd is None:
            return [(b"x-gateway-cost-usd", b"unknown")]
        headers = [
            (b"x-gateway-cost-usd", usd_text(self.cost_micro_usd).encode()),
            (b"x-gateway-savings-usd", usd_text(self.savings_micro_usd).encode()),
        ]
        if self.estimated:
            headers.append((b"x-gateway-cost-estimated", b"true"))
        return headers

    def comment(self) -> str:
        """The headers as a stream's SSE comment, sent just before ``[DONE]``."""
        return " ".join(f"{name.decode()}={value.decode()}" for name, value in self.headers())


class Costs:
    """Prices requests for the ``Gateway``: costs, savings and pre-call reservations."""

    def __init__(self, config: GatewayConfig, prices: PriceTable | None = None) -> None:
        overrides: dict[str, ModelPrice] = {}
        self._refs: dict[str, str] = {}
        #: A model served by deployments of other upstream models is priced by the one that
        #: answered: (model, upstream model) -> its price name, where it is not the model's.
        self._served: dict[tuple[str, str], str] = {}
        #: Every price name a model may be billed at (a reservation holds the dearest).
        self._all_refs: dict[str, tuple[str, ...]] = {}
        #: Embedding models answer with vectors: no output tokens.
        self._embeddings = frozenset(m.name for m in config.models if m.kind == "embedding")
        for model in config.models:
            if model.price is not None:
                price = model.price
                overrides[model.name] = ModelPrice(
                    price.input_usd_per_mtok,
                    price.output_usd_per_mtok,
                    price.cache_read_usd_per_mtok,
                    price.cache_write_usd_per_mtok,
                )
                self._refs[model.name] = model.name
            else:
                upstream = model.served_by[0].upstream_model
                self._refs[model.name] = model.price_as or upstream or model.name
                if model.price_as is None:
                    for deployment in model.served_by[1:]:
                        served = deployment.upstream_model or model.name
                        if served != self._refs[model.name]:
                            self._served[(model.name, served)] = served
            refs = {self._refs[model.name]}
            refs.update(ref for (name, _), ref in self._served.items() if name == model.name)
            self._all_refs[model.name] = tuple(sorted(refs))
        self.prices = prices if prices is not None else PriceTable(overrides)
        self.flagship = config.cost.flagship_model
        self._flagship_ref = self._refs.get(self.flagship, self.flagship)
        if self.prices.price(self._flagship_ref) is None:
            # Every saving would be measured against nothing and shown as $0.
            raise ConfigError(
                f"cost.flagship_model: no price for {self.flagship!r}: name a model of "
                "`models` with a price, or one the price table knows (e.g. gpt-5.1)"
            )
        for index, model in enumerate(config.models):
            asked = model.price_as
            if model.price is None and asked is not None and self.prices.price(asked) is None:
                # A name asked for on purpose: a typo left the model unpriced, passing every
                # budget unreserved, without a word.
                raise ConfigError(
                    f"models[{index}].price_as: the price table has no {asked!r} (give a "
                    "name it knows, e.g. gpt-4o-mini, or a `price`)"
                )
        self.outputs = OutputEstimator(prior=config.budget.default_output_tokens)

    def ref(self, model: str) -> str:
        """The name ``model`` is priced by."""
        return self._refs.get(model, model)

    def context_window(self, model: str) -> int | None:
        """The context window the price table knows for ``model`` (by its price name)."""
        return self.prices.context_window(self.ref(model))

    def priced(self, model: str) -> bool:
        """Whether ``model`` has a price (configured, or in the price table)."""
        return self.prices.price(self.ref(model)) is not None

    def of(self, model: str, usage: Usage, *, upstream: str | None = None) -> RequestCost:
        """The cost of ``usage`` on ``model`` (served as ``upstream``, the upstream model of
        the deployment that answered) and its flagship baseline."""
        ref = self.ref(model)
        if upstream is not None and self._served:
            ref = self._served.get((model, upstream), ref)
        return RequestCost(
            model,
            usage,
            self.prices.cost_micro_usd(ref, usage),
            self.prices.cost_micro_usd(self._flagship_ref, usage),
        )

    def served_free(self, model: str, usage: Usage) -> RequestCost:
        """An answer that cost nothing upstream (a cache hit): 0, and the flagship baseline
        of ``usage`` all saved."""
        return RequestCost(model, usage, 0, self.prices.cost_micro_usd(self._flagship_ref, usage))

    def estimate_usage(
        self, model: str, request: Mapping[str, Any], *, output_tokens: int | None = None
    ) -> Usage:
        """A local estimate: the prompt counted here, the output as seen or as usually seen."""
        prompt = estimate_prompt_tokens(request)
        if model in self._embeddings:
            output_tokens = 0
        elif output_tokens is None:
            output_tokens = self.outputs.estimate(model, request)
        return Usage(input_tokens=prompt, output_tokens=output_tokens, estimated=True)

    def reservation(self, model: str, request: Mapping[str, Any]) -> int | None:
        """Micro-USD to reserve before calling ``model``; ``None`` when it has no price. A
        model whose deployments are priced apart holds what the dearest would cost (whichever
        answers, the settlement swaps in its real cost)."""
        usage = self.estimate_usage(model, request)
        refs = self._all_refs.get(model)
        if refs is None or len(refs) == 1:
            return self.prices.cost_micro_usd(self.ref(model), usage)
        costs = [self.prices.cost_micro_usd(ref, usage) for ref in refs]
        known = [cost for cost in costs if cost is not None]
        return max(known) if known else None

    def observe(self, cost: RequestCost, *, choices: int = 1) -> None:
        """Learn the model's output lengths from reported (not estimated) usage of an answer
        of ``choices`` choices: one choice's length is learnt (the estimate multiplies it by
        the request's ``n``; the whole answer's, learnt as one, was multiplied again)."""
        if not cost.estimated:
            self.outputs.observe(cost.model, cost.usage.output_tokens // max(choices, 1))
