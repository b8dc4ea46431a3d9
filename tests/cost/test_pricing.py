"""Costs are exact integer micro-USD at the published prices, offline."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

import pytest
from genai_prices import Usage as GenaiUsage
from genai_prices import calc_price
from genai_prices.data_snapshot import find_provider_by_id, get_snapshot

from gateway_kit.cost.pricing import ModelPrice, PriceTable, _Resolved
from gateway_kit.cost.usage import Usage


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def table() -> PriceTable:
    return PriceTable()


def test_gpt_4o_costs_its_published_price(table: PriceTable) -> None:
    # $2.50 per million input tokens, $1.25 cached, $10 output: tokens x $/MTok = micro-USD.
    assert table.price("gpt-4o", "openai") == ModelPrice("2.5", "10", cache_read="1.25")
    usage = Usage(12_000, 1_500, cache_read_tokens=4_000)
    assert table.cost_micro_usd("gpt-4o", usage, "openai") == 8_000 * 2.5 + 4_000 * 1.25 + 15_000
    assert table.cost_micro_usd("gpt-4o", Usage(1_000_000, 0)) == 2_500_000
    assert table.cost_micro_usd("gpt-4o", Usage(0, 1_000_000)) == 10_000_000


def test_dated_model_names_resolve_to_their_model(table: PriceTable) -> None:
    usage = Usage(1_000, 100)
    assert table.cost_micro_usd("gpt-4o-2024-08-06", usage) == 3_500
    assert table.cost_micro_usd("GPT-4o", usage) == 3_500


def test_reasoning_tokens_are_billed_once_as_output(table: PriceTable) -> None:
    # o4-mini: $1.10 input, $0.275 cached input, $4.40 output (reasoning included).
    with_reasoning = Usage(2_000, 3_000, cache_read_tokens=1_000, reasoning_tokens=2_500)
    expected = 1_000 * Decimal("1.1") + 1_000 * Decimal("0.275") + 3_000 * Decimal("4.4")
    assert table.cost_micro_usd("o4-mini", with_reasoning, "openai") == round(expected)
    without = Usage(2_000, 3_000, cache_read_tokens=1_000)
    assert table.cost_micro_usd("o4-mini", with_reasoning) == table.cost_micro_usd(
        "o4-mini", without
    )


def test_anthropic_cache_writes_and_reads_have_their_own_prices(table: PriceTable) -> None:
    price = table.price("claude-sonnet-4-20250514", "anthropic")
    assert price == ModelPrice("3", "15", cache_read="0.3", cache_write="3.75")
    assert price.cache_write == price.input * Decimal("1.25")
    assert price.cache_read == price.input * Decimal("0.1")
    usage = Usage.from_anthropic(
        {
            "input_tokens": 100,
            "cache_creation_input_tokens": 10_000,
            "cache_read_input_tokens": 50_000,
            "output_tokens": 800,
        }
    )
    assert usage is not None
    cost = table.cost_micro_usd("claude-sonnet-4-20250514", usage, "anthropic")
    assert cost == 100 * 3 + 10_000 * 3.75 + 50_000 * 0.3 + 800 * 15 == 64_800


def test_tiered_prices_switch_once_the_prompt_exceeds_the_tier(table: PriceTable) -> None:
    # Claude Sonnet 4.5 above 200k prompt tokens (cache included): $6 / $22.50 for every token.
    assert table.price("claude-sonnet-4-5") == ModelPrice("3", "15", "0.3", "3.75")
    assert table.cost_micro_usd("claude-sonnet-4-5", Usage(200_000, 1_000)) == 615_000
    assert table.cost_micro_usd("claude-sonnet-4-5", Usage(200_001, 1_000)) == 1_222_506
    cached = Usage(200_001, 1_000, cache_read_tokens=200_000)
    assert table.cost_micro_usd("claude-sonnet-4-5", cached) == 6 + 120_000 + 22_500


def test_date_bound_prices_follow_the_clock() -> None:
    # o3 went from $10/$40 to $2/$8 on 2025-06-10.
    now = [at("2025-06-09T23:59:59")]
    table = PriceTable(clock=lambda: now[0])
    usage = Usage(1_000, 1_000)
    assert table.cost_micro_usd("o3", usage) == 50_000
    now[0] = at("2025-06-10T00:00:00")
    assert table.cost_micro_usd("o3", usage) == 10_000
    assert table.price("o3") == ModelPrice("2", "8", cache_read="0.5")


def test_off_peak_prices_change_within_a_day() -> None:
    now = [at("2026-03-02T12:00:00")]
    table = PriceTable(clock=lambda: now[0])
    usage = Usage(1_000_000, 0)
    peak = table.cost_micro_usd("deepseek-chat", usage, "deepseek")
    now[0] = at("2026-03-02T20:00:00")
    off_peak = table.cost_micro_usd("deepseek-chat", usage, "deepseek")
    assert peak is not None
    assert off_peak is not None
    assert off_peak < peak


def test_override_prices_use_the_same_arithmetic() -> None:
    table = PriceTable({"acme-large": ModelPrice("0.8", "3.2", cache_read="0.08", cache_write="1")})
    usage = Usage(10_000, 2_000, cache_read_tokens=6_000, cache_write_tokens=1_000)
    expected = 3_000 * Decimal("0.8") + 6_000 * Decimal("0.08") + 1_000 + 2_000 * Decimal("3.2")
    assert table.cost_micro_usd("acme-large", usage) == int(expected) == 10_280
    assert table.price("acme-large") == ModelPrice("0.8", "3.2", "0.08", "1")


def test_override_cache_prices_default_to_the_input_price() -> None:
    price = ModelPrice(Decimal("4"), 16)
    assert price.cache_read == price.cache_write == Decimal(4)
    table = PriceTable({"acme": price})
    cached = Usage(1_000, 0, cache_read_tokens=500, cache_write_tokens=500)
    assert table.cost_micro_usd("acme", cached) == table.cost_micro_usd("acme", Usage(1_000, 0))


def test_overrides_win_over_the_snapshot() -> None:
    table = PriceTable({"gpt-4o": ModelPrice("1", "2")})
    assert table.cost_micro_usd("gpt-4o", Usage(1_000, 1_000), "openai") == 3_000
    assert table.price("gpt-4o") == ModelPrice("1", "2")


def test_unknown_models_have_no_price(table: PriceTable) -> None:
    assert table.price("no-such-model-7b") is None
    assert table.cost_micro_usd("no-such-model-7b", Usage(10, 10)) is None
    assert table.cost_micro_usd("no-such-model-7b", Usage(10, 10), "openai") is None
    assert table.savings_micro_usd("gpt-4o", "no-such-model-7b", Usage(10, 10)) is None
    assert table.savings_micro_usd("no-such-model-7b", "gpt-4o", Usage(10, 10)) is None


def test_models_priced_other_than_by_the_token_are_unknown(table: PriceTable) -> None:
    # Whisper bills audio seconds: a token usage has no price there.
    assert table.price("whisper-large-v3", "groq") is None
    assert table.cost_micro_usd("whisper-large-v3", Usage(10, 10), "groq") is None


def test_provider_hints_are_hints(table: PriceTable) -> None:
    usage = Usage(1_000, 100)
    assert table.cost_micro_usd("gpt-4o", usage, "my-upstream") == 3_500
    assert table.cost_micro_usd("openai/gpt-4o", usage) == 3_500
    assert table.cost_micro_usd("anthropic/claude-sonnet-4-20250514", usage) == 4_500
    assert table.cost_micro_usd("gpt-4o", usage, "anthropic") == 3_500


@pytest.mark.parametrize(
    ("model", "usage", "micro_usd"),
    [
        ("gpt-4o", Usage(1, 0), 3),  # 2.5 rounds up
        ("gpt-4o", Usage(3, 0), 8),  # 7.5 rounds up
        ("gpt-4o", Usage(1, 0, cache_read_tokens=1), 1),  # 1.25 rounds down
        ("gpt-4o", Usage(2, 0, cache_read_tokens=1), 4),  # 3.75 rounds up
        ("o4-mini", Usage(1, 0, cache_read_tokens=1), 0),  # 0.275 rounds down
        ("o4-mini", Usage(5, 0), 6),  # 5.5 rounds up
        ("gpt-4o-mini", Usage(10, 0), 2),  # 1.5 rounds up
        ("gpt-4o-mini", Usage(3, 0), 0),  # 0.45 rounds down
    ],
)
def test_rounding_is_half_up_once_at_the_end(
    table: PriceTable, model: str, usage: Usage, micro_usd: int
) -> None:
    assert table.cost_micro_usd(model, usage) == micro_usd


def test_override_rounding_is_half_up() -> None:
    table = PriceTable({"half": ModelPrice("0.5", "0.5")})
    assert table.cost_micro_usd("half", Usage(1, 0)) == 1
    assert table.cost_micro_usd("half", Usage(1, 2)) == 2  # 1.5
    assert table.cost_micro_usd("half", Usage(0, 4)) == 2


@pytest.mark.parametrize("model", ["gpt-4o", "claude-sonnet-4-5", "o3", "acme"])
def test_zero_usage_costs_nothing(model: str) -> None:
    table = PriceTable({"acme": ModelPrice("1", "1")})
    assert table.cost_micro_usd(model, Usage(0, 0)) == 0


def test_savings_are_baseline_minus_actual_and_may_be_negative(table: PriceTable) -> None:
    usage = Usage(10_000, 1_000)
    gpt_4o = table.cost_micro_usd("gpt-4o", usage)
    mini = table.cost_micro_usd("gpt-4o-mini", usage)
    assert (gpt_4o, mini) == (35_000, 2_100)
    assert table.savings_micro_usd("gpt-4o", "gpt-4o-mini", usage) == 32_900
    assert table.savings_micro_usd("gpt-4o-mini", "gpt-4o", usage) == -32_900
    assert table.savings_micro_usd("gpt-4o", "gpt-4o", usage) == 0
    assert (
        table.savings_micro_usd(
            "gpt-4o",
            "claude-sonnet-4-20250514",
            usage,
            baseline_provider="openai",
            actual_provider="anthropic",
        )
        == 35_000 - 45_000
    )


def test_summed_savings_equal_summed_costs() -> None:
    table = PriceTable()
    usages = [Usage(n, n // 3, cache_read_tokens=n // 2) for n in range(1, 200, 7)]
    savings = sum(table.savings_micro_usd("gpt-4o", "o4-mini", u) or 0 for u in usages)
    baseline = sum(table.cost_micro_usd("gpt-4o", u) or 0 for u in usages)
    actual = sum(table.cost_micro_usd("o4-mini", u) or 0 for u in usages)
    assert savings == baseline - actual


_USAGES = [
    Usage(0, 0),
    Usage(1, 1),
    Usage(1_234, 567, cache_read_tokens=200, cache_write_tokens=100, reasoning_tokens=50),
    Usage(250_001, 10_000, cache_read_tokens=100_000, cache_write_tokens=50_000),
    Usage(3_000_000, 64_000, cache_read_tokens=1_000_000, reasoning_tokens=60_000),
]


def _genai_usage(usage: Usage) -> GenaiUsage:
    return GenaiUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_reasoning_tokens=usage.reasoning_tokens,
    )


def test_the_fast_path_matches_calc_price_for_every_token_priced_model() -> None:
    now = at("2026-03-02T12:00:00")
    moment = datetime.fromtimestamp(now, UTC)
    checked = 0
    for provider in get_snapshot().providers:
        for model in provider.models:
            rates = _Resolved(model).rates(lambda: now)
            for usage in _USAGES:
                reference = model.calc_price(
                    _genai_usage(usage), provider, genai_request_timestamp=moment
                ).total_price
                if rates is None:
                    assert reference == 0, (provider.id, model.id)
                    continue
                assert rates.micro_usd(usage) == reference * 1_000_000, (provider.id, model.id)
                checked += 1
    assert checked > 5_000


@pytest.mark.parametrize("provider_id", ["openai", "anthropic", "google", "deepseek", "mistral"])
def test_costs_match_calc_price_by_name(provider_id: str) -> None:
    now = at("2026-03-02T12:00:00")
    table = PriceTable(clock=lambda: now)
    provider = find_provider_by_id(get_snapshot().providers, provider_id)
    assert provider is not None
    compared = 0
    for model in provider.models:
        for usage in _USAGES[1:3]:
            try:
                reference = calc_price(
                    _genai_usage(usage),
                    model.id,
                    provider_id=provider_id,
                    genai_request_timestamp=datetime.fromtimestamp(now, UTC),
                )
            except LookupError:
                continue  # an id its own match rule does not accept
            micro = (reference.total_price * 1_000_000).quantize(Decimal(1), ROUND_HALF_UP)
            cost = table.cost_micro_usd(model.id, usage, provider_id)
            if cost is None:
                assert micro == 0, model.id
            else:
                assert cost == int(micro), model.id
                compared += 1
    assert compared >= 10


def test_the_cache_of_resolved_models_is_bounded() -> None:
    table = PriceTable(cache_size=3)
    for n in range(20):
        assert table.cost_micro_usd(f"unknown-{n}", Usage(1, 1)) is None
    table.cost_micro_usd("gpt-4o", Usage(1, 1))
    assert len(table._cache) == 3
    assert table.cost_micro_usd("gpt-4o", Usage(1, 0)) == 3


def test_pricing_never_touches_the_network() -> None:
    # A fresh interpreter, sockets disabled before genai-prices is even imported.
    script = textwrap.dedent(
        """
        import socket

        def refuse(*args, **kwargs):
            raise OSError("network disabled for this test")

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        from gateway_kit.cost.pricing import PriceTable
        from gateway_kit.cost.usage import Usage

        table = PriceTable()
        print(table.cost_micro_usd("gpt-4o", Usage(1000, 100), "openai"))
        print(table.cost_micro_usd("claude-sonnet-4-5", Usage(1000, 100)))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3500", "4500"]


def test_pricing_works_with_connect_patched_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled for this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    table = PriceTable()
    assert table.cost_micro_usd("o4-mini", Usage(1_000, 1_000, reasoning_tokens=900)) == 5_500


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0.5, "1"), TypeError),
        (("1", 2.0), TypeError),
        ((True, "1"), TypeError),
        (("-1", "1"), ValueError),
        (("1", "1", "-0.1"), ValueError),
        (("NaN", "1"), ValueError),
        (("Infinity", "1"), ValueError),
        (("cheap", "1"), ValueError),
    ],
)
def test_model_prices_are_finite_non_negative_decimals(
    args: tuple[object, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        ModelPrice(*args)  # type: ignore[arg-type]


def test_overrides_must_be_model_prices() -> None:
    with pytest.raises(TypeError, match="ModelPrice"):
        PriceTable({"acme": (1, 2)})  # type: ignore[dict-item]
