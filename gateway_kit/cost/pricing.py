"""What a call costs, in integer micro-USD, from the offline genai-prices table or overrides.

Prices come from genai-prices' bundled snapshot, read from the installed package: this module
never starts its ``UpdatePrices`` refresher, so pricing works with no network at all. Operator
``overrides`` (per model name, exact match) win over the snapshot and price models it lacks.

genai-prices' usage semantics are ours (see ``gateway_kit.usage``): its ``input_tokens`` is the
whole prompt, with ``cache_read_tokens`` and ``cache_write_tokens`` declared as parts of it, and
``output_reasoning_tokens`` is part of ``output_tokens``. A part with a price of its own is
billed at that price and the rest of its total at the total's price; a part without one stays
in the total. Tiered prices are threshold prices: once the prompt (cache included) exceeds a
tier's start, that tier's rate applies to every token of the unit.

``calc_price`` costs 0.2 to 0.4 ms a call (it re-validates the price table, decomposes usage
generically and builds a result object), too slow for a path taken on every request. So the
model lookup is done once per ``(model, provider)`` and cached (bounded), and the arithmetic
above is redone here on the resolved prices (a few microseconds): a test checks that it equals
``calc_price`` to the last digit for every model in the snapshot. Date-bound prices (a price
change on a given day, off-peak hours) are chosen at call time from the injected ``clock``, as
``calc_price`` does. Only the token units and the per-request fee are priced: a ``Usage`` has
no web searches, audio seconds or images billed per unit.

Money: tokens times USD per million tokens is micro-USD, computed in ``Decimal`` and rounded
half up to a whole micro-USD once, at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from typing import TypeAlias, TypeVar

from genai_prices.data_snapshot import find_provider_by_id, get_snapshot
from genai_prices.types import (
    ModelInfo,
    Provider,
    StartDateConstraint,
    TieredPrices,
    TimeOfDateConstraint,
)
from genai_prices.types import ModelPrice as _GenaiModelPrice

from gateway_kit.cost.usage import Usage

_Rate: TypeAlias = Decimal | TieredPrices
_Constraint: TypeAlias = StartDateConstraint | TimeOfDateConstraint
_ZERO = Decimal(0)
_ONE = Decimal(1)
#: Exact for any realistic figure: a trillion tokens at a price with 10 significant digits.
_CONTEXT = Context(prec=40, rounding=ROUND_HALF_UP)


@dataclass(frozen=True, slots=True, init=False)
class ModelPrice:
    """USD per million tokens. Cache reads and writes cost the input price unless given."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    def __init__(
        self,
        input: Decimal | int | str,
        output: Decimal | int | str,
        cache_read: Decimal | int | str | None = None,
        cache_write: Decimal | int | str | None = None,
    ) -> None:
        price_in = _usd(input, "input")
        object.__setattr__(self, "input", price_in)
        object.__setattr__(self, "output", _usd(output, "output"))
        read = price_in if cache_read is None else _usd(cache_read, "cache_read")
        object.__setattr__(self, "cache_read", read)
        write = price_in if cache_write is None else _usd(cache_write, "cache_write")
        object.__setattr__(self, "cache_write", write)


def _usd(value: object, name: str) -> Decimal:
    # Floats are refused rather than converted: 0.1 is not a price anyone published.
    if isinstance(value, bool) or not isinstance(value, Decimal | int | str):
        raise TypeError(f"{name}: a price is a Decimal, an int or a string, not {value!r}")
    try:
        price = Decimal(value)
    except ArithmeticError:
        raise ValueError(f"{name}: {value!r} is not a number") from None
    if not price.is_finite() or price < 0:
        raise ValueError(f"{name}: a price is finite and not negative, got {value!r}")
    return price


@dataclass(frozen=True, slots=True)
class _Rates:
    """One genai-prices price set, reduced to the units ``Usage`` reports."""

    input: _Rate
    output: _Rate | None
    cache_read: _Rate | None
    cache_write: _Rate | None
    reasoning: _Rate | None
    #: USD per thousand requests (a flat fee some providers add to every call).
    requests: _Rate | None

    @classmethod
    def of(cls, prices: _GenaiModelPrice) -> _Rates | None:
        price_in = _price_of(prices, "input_mtok")
        if price_in is None:
            return None  # not priced by the token (images, audio seconds, ...)
        return cls(
            price_in,
            _price_of(prices, "output_mtok"),
            _price_of(prices, "cache_read_mtok"),
            _price_of(prices, "cache_write_mtok"),
            _price_of(prices, "output_reasoning_mtok"),
            _price_of(prices, "requests_kcount"),
        )

    def micro_usd(self, usage: Usage) -> Decimal:
        """Unrounded micro-USD, as ``ModelPrice.calc_price`` of genai-prices computes it."""
        prompt = usage.input_tokens
        rest_in = prompt
        total = _ZERO
        if self.cache_read is not None:
            total += usage.cache_read_tokens * _at(self.cache_read, prompt)
            rest_in -= usage.cache_read_tokens
        if self.cache_write is not None:
            total += usage.cache_write_tokens * _at(self.cache_write, prompt)
            rest_in -= usage.cache_write_tokens
        total += rest_in * _at(self.input, prompt)
        rest_out = usage.output_tokens
        if self.reasoning is not None:
            total += usage.reasoning_tokens * _at(self.reasoning, prompt)
            rest_out -= usage.reasoning_tokens
        if self.output is not None:
            total += rest_out * _at(self.output, prompt)
        if self.requests is not None:
            total += _at(self.requests, prompt) * 1000  # USD per 1000 calls = 1000 µUSD per call
        return total

    def base(self) -> ModelPrice:
        read = None if self.cache_read is None else _base(self.cache_read)
        write = None if self.cache_write is None else _base(self.cache_write)
        output = _ZERO if self.output is None else _base(self.output)
        return ModelPrice(_base(self.input), output, read, write)


def _price_of(prices: _GenaiModelPrice, key: str) -> _Rate | None:
    # getattr with a default: older genai-prices releases lack some keys altogether.
    value = getattr(prices, key, None)
    return value if isinstance(value, Decimal | TieredPrices) else None


def _at(rate: _Rate, prompt_tokens: int) -> Decimal:
    """The rate for a prompt of this size: the highest tier whose start it exceeds."""
    if isinstance(rate, Decimal):
        return rate
    for tier in reversed(rate.tiers):
        if prompt_tokens > tier.start:
            return tier.price
    return rate.base


def _base(rate: _Rate) -> Decimal:
    return rate if isinstance(rate, Decimal) else rate.base


class _Resolved:
    """A genai-prices model: its price sets, in the snapshot's order, with their constraints."""

    __slots__ = ("conditional", "fixed")

    def __init__(self, model: ModelInfo) -> None:
        self.fixed: _Rates | None = None
        self.conditional: tuple[tuple[_Constraint | None, _Rates | None], ...] = ()
        if isinstance(model.prices, _GenaiModelPrice):
            self.fixed = _Rates.of(model.prices)
        else:
            self.conditional = tuple((c.constraint, _Rates.of(c.prices)) for c in model.prices)

    def rates(self, clock: Callable[[], float]) -> _Rates | None:
        if not self.conditional:
            return self.fixed
        now = datetime.fromtimestamp(clock(), UTC)
        # genai-prices' rule: the last price whose constraint holds, else the first one.
        for constraint, rates in reversed(self.conditional):
            if constraint is None or constraint.active(now):
                return rates
        return self.conditional[0][1]


_MISSING = object()
_Key = tuple[str, str | None]
_V = TypeVar("_V")


class PriceTable:
    """Model prices and call costs; cheap to query on every request.

    ``provider`` is a hint, a genai-prices provider id such as ``"openai"`` or ``"anthropic"``:
    the model is looked up there first, then among all providers (an unknown id is no error),
    then, for ``"vendor/model"`` names, as ``model`` at ``vendor``. Overrides match the model
    name exactly, whatever the provider.
    """

    def __init__(
        self,
        overrides: Mapping[str, ModelPrice] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        cache_size: int = 4096,
    ) -> None:
        self._overrides = dict(overrides or {})
        for model, price in self._overrides.items():
            if not isinstance(price, ModelPrice):
                raise TypeError(f"override for {model!r} must be a ModelPrice, got {price!r}")
        self._clock = clock
        self._cache_size = cache_size
        self._cache: dict[tuple[str, str | None], _Resolved | None] = {}
        self._windows: dict[tuple[str, str | None], int | None] = {}
        self._lock = threading.Lock()
        # Loading the snapshot imports a large module (about a third of a second): pay it now,
        # not on the first request.
        self._snapshot = get_snapshot()

    def price(self, model: str, provider: str | None = None) -> ModelPrice | None:
        """The model's current prices, ``None`` when unknown. Tiered prices give the base tier."""
        override = self._overrides.get(model)
        if override is not None:
            return override
        rates = self._rates(model, provider)
        return None if rates is None else rates.base()

    def cost_micro_usd(self, model: str, usage: Usage, provider: str | None = None) -> int | None:
        """What ``usage`` on ``model`` costs, in micro-USD; ``None`` when the model is unknown."""
        override = self._overrides.get(model)
        if override is not None:
            uncached = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
            with localcontext(_CONTEXT):
                micro = (
                    uncached * override.input
                    + usage.cache_read_tokens * override.cache_read
                    + usage.cache_write_tokens * override.cache_write
                    + usage.output_tokens * override.output
                )
                return int(micro.quantize(_ONE))
        rates = self._rates(model, provider)
        if rates is None:
            return None
        with localcontext(_CONTEXT):
            return int(rates.micro_usd(usage).quantize(_ONE))

    def savings_micro_usd(
        self,
        baseline_model: str,
        actual_model: str,
        usage: Usage,
        *,
        baseline_provider: str | None = None,
        actual_provider: str | None = None,
    ) -> int | None:
        """What ``usage`` would have cost on the baseline model, minus what it cost.

        Not clamped at 0: when a caller picks a model pricier than the flagship baseline, the
        negative figure is the honest one, and clamping would overstate cumulative savings.
        Both costs are rounded before the subtraction, so summed savings always equal summed
        baseline costs minus summed actual costs. ``None`` when either model is unknown.
        """
        baseline = self.cost_micro_usd(baseline_model, usage, baseline_provider)
        actual = self.cost_micro_usd(actual_model, usage, actual_provider)
        if baseline is None or actual is None:
            return None
        return baseline - actual

    def context_window(self, model: str, provider: str | None = None) -> int | None:
        """The model's context window in tokens, where the price table knows it (searched once
        per name, like its prices: Guardian asks on every request)."""
        key = (model, provider)
        window = self._windows.get(key, _MISSING)
        if window is _MISSING:
            window = self._window(model, provider)
            self._remember(self._windows, key, window)
        assert window is None or isinstance(window, int)
        return window

    def _window(self, model: str, provider: str | None) -> int | None:
        attempts: list[tuple[str, str | None]] = [(model, provider), (model, None)]
        vendor, slash, name = model.partition("/")
        if slash and vendor and name:
            attempts += [(name, vendor), (name, None)]
        for ref, provider_id in attempts:
            info = self._find(ref.lower(), provider_id)
            if info is not None and info.context_window:
                return int(info.context_window)
        return None

    def _remember(self, cache: dict[_Key, _V], key: _Key, value: _V) -> None:
        with self._lock:
            if len(cache) >= self._cache_size and key not in cache:
                # Insertion order: the first entry is the oldest.
                cache.pop(next(iter(cache)), None)
            cache[key] = value

    def _rates(self, model: str, provider: str | None) -> _Rates | None:
        key = (model, provider)
        resolved = self._cache.get(key, _MISSING)
        if resolved is _MISSING:
            resolved = self._resolve(model, provider)
            self._remember(self._cache, key, resolved)
        if resolved is None:
            return None
        assert isinstance(resolved, _Resolved)
        return resolved.rates(self._clock)

    def _resolve(self, model: str, provider: str | None) -> _Resolved | None:
        attempts: list[tuple[str, str | None]] = []
        if provider:
            attempts.append((model, provider))
        attempts.append((model, None))
        vendor, slash, name = model.partition("/")
        if slash and vendor and name:
            attempts += [(name, vendor), (name, None)]
        for ref, provider_id in attempts:
            info = self._find(ref.lower(), provider_id)
            if info is not None:
                return _Resolved(info)
        info = self._find_anywhere(model.lower())
        return _Resolved(info) if info is not None else None

    def _find_anywhere(self, ref: str) -> ModelInfo | None:
        """A model no provider's name pattern claims (``text-embedding-3-small``), looked up
        by its exact id at every provider, in the snapshot's order."""
        for provider in self._snapshot.providers:
            for info in provider.models:
                if info.id == ref:
                    return info
        return None

    def _find(self, ref: str, provider_id: str | None) -> ModelInfo | None:
        # genai-prices' own lookup (DataSnapshot.find_provider_model) memoises every model name
        # it is asked about in unbounded dicts; this is the same search without that memory.
        providers = self._snapshot.providers
        found: Provider | None
        if provider_id is not None:
            found = find_provider_by_id(providers, provider_id)
        else:
            found = next(
                (p for p in providers if p.model_match is not None and p.model_match.is_match(ref)),
                None,
            )
        if found is None:
            return None
        return found.find_model(ref, all_providers=providers)
