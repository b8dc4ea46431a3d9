"""Usage normalises provider shapes so that every token is counted exactly once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from openai.types import CompletionUsage

from gateway_kit.cost.usage import Usage


def test_openai_cached_and_reasoning_tokens_are_parts_of_the_totals() -> None:
    usage = Usage.from_openai(
        {
            "prompt_tokens": 1200,
            "completion_tokens": 300,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0},
        }
    )
    assert usage == Usage(1200, 300, cache_read_tokens=1024, reasoning_tokens=256)
    assert usage.total_tokens == 1500
    assert not usage.estimated


def test_openai_sdk_objects_are_read_by_attribute() -> None:
    sdk_usage = CompletionUsage.model_validate(
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 2},
        }
    )
    assert Usage.from_openai(sdk_usage) == Usage(10, 5, cache_read_tokens=4, reasoning_tokens=2)


def test_openai_without_details_has_no_parts() -> None:
    usage = Usage.from_openai({"prompt_tokens": 7, "completion_tokens": 3})
    assert usage == Usage(7, 3)
    explicit_nulls = {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    assert Usage.from_openai(explicit_nulls) == Usage(7, 3)


def test_anthropic_cache_tokens_are_added_to_the_input_once() -> None:
    usage = Usage.from_anthropic(
        {
            "input_tokens": 50,
            "cache_read_input_tokens": 2000,
            "cache_creation_input_tokens": 300,
            "output_tokens": 120,
        }
    )
    assert usage == Usage(2350, 120, cache_read_tokens=2000, cache_write_tokens=300)
    assert usage is not None
    uncached = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
    assert uncached == 50
    assert usage.total_tokens == 2470


def test_anthropic_thinking_tokens_are_part_of_the_output() -> None:
    usage = Usage.from_anthropic(
        SimpleNamespace(
            input_tokens=10,
            output_tokens=900,
            cache_read_input_tokens=None,
            cache_creation_input_tokens=None,
            output_tokens_details=SimpleNamespace(thinking_tokens=700),
        )
    )
    assert usage == Usage(10, 900, reasoning_tokens=700)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "prompt_tokens=3",
        42,
        [],
        {},
        {"prompt_tokens": 5},
        {"completion_tokens": 5},
        {"prompt_tokens": -1, "completion_tokens": 5},
        {"prompt_tokens": 5, "completion_tokens": -2},
        {"prompt_tokens": "5", "completion_tokens": 5},
        {"prompt_tokens": 5.5, "completion_tokens": 5},
        {"prompt_tokens": True, "completion_tokens": 5},
        {"prompt_tokens": float("nan"), "completion_tokens": 5},
        {"prompt_tokens": float("inf"), "completion_tokens": 5},
        {"prompt_tokens": None, "completion_tokens": None},
    ],
)
def test_unusable_openai_usage_is_none(raw: Any) -> None:
    assert Usage.from_openai(raw) is None


def test_an_embeddings_usage_has_no_output_and_cache_writes_are_read() -> None:
    assert Usage.from_openai({"prompt_tokens": 8, "total_tokens": 8}) == Usage(8, 0)
    usage = Usage.from_openai(
        {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 3, "cache_creation_tokens": 4},
        }
    )
    assert usage == Usage(10, 2, cache_read_tokens=3, cache_write_tokens=4)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"input_tokens": 5},
        {"output_tokens": 5},
        {"input_tokens": -5, "output_tokens": 5},
        {"input_tokens": "5", "output_tokens": 5},
        {"prompt_tokens": 5, "completion_tokens": 5},
    ],
)
def test_unusable_anthropic_usage_is_none(raw: Any) -> None:
    assert Usage.from_anthropic(raw) is None


def test_malformed_openai_details_count_as_zero_and_are_capped_at_their_total() -> None:
    usage = Usage.from_openai(
        {
            "prompt_tokens": 100,
            "completion_tokens": 10.0,
            "prompt_tokens_details": {"cached_tokens": 500},
            "completion_tokens_details": "lots",
        }
    )
    assert usage == Usage(100, 10, cache_read_tokens=100)
    negative = {
        "prompt_tokens": 100,
        "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": -3},
        "completion_tokens_details": {"reasoning_tokens": 11},
    }
    assert Usage.from_openai(negative) == Usage(100, 10, reasoning_tokens=10)


def test_malformed_anthropic_cache_fields_count_as_zero() -> None:
    usage = Usage.from_anthropic(
        {
            "input_tokens": 40,
            "output_tokens": 2,
            "cache_read_input_tokens": "many",
            "cache_creation_input_tokens": -1,
            "output_tokens_details": {"thinking_tokens": 99},
        }
    )
    assert usage == Usage(40, 2, reasoning_tokens=2)


def test_attribute_errors_in_sdk_objects_do_not_escape() -> None:
    class Broken:
        @property
        def prompt_tokens(self) -> int:
            raise RuntimeError("boom")

    assert Usage.from_openai(Broken()) is None


def test_estimates_are_flagged_and_never_negative() -> None:
    usage = Usage.estimate(120, 512)
    assert usage == Usage(120, 512, estimated=True)
    assert usage.estimated
    assert usage.total_tokens == 632
    assert Usage.estimate(-3, -1) == Usage(0, 0, estimated=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"input_tokens": -1, "output_tokens": 0},
        {"input_tokens": 0, "output_tokens": -1},
        {"input_tokens": 10, "output_tokens": 0, "cache_read_tokens": 8, "cache_write_tokens": 3},
        {"input_tokens": 10, "output_tokens": 5, "reasoning_tokens": 6},
        {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": -1},
    ],
)
def test_inconsistent_usage_is_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="tokens"):
        Usage(**kwargs)


def test_usage_is_immutable_and_hashable() -> None:
    usage = Usage(1, 2)
    with pytest.raises(AttributeError):
        usage.input_tokens = 5  # type: ignore[misc]
    assert len({usage, Usage(1, 2)}) == 1
