"""Offline token estimates: the prompt slightly over, the output from what models gave."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gateway_kit.cost.tokens import (
    FUNCTION_TOKENS,
    IMAGE_TOKENS,
    LOW_DETAIL_IMAGE_TOKENS,
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    TOOL_CALL_TOKENS,
    TOOLS_TOKENS,
    OutputEstimator,
    estimate_prompt_tokens,
    estimate_text_tokens,
)

# True counts with OpenAI's o200k_base encoding (gpt-4o), counted offline.
PROSE = (
    "The gateway sits between your application and the model providers. Every request passes "
    "through a short chain of layers: authentication first, then quota and burst limits, then "
    "the budget check, and finally the router, which picks an upstream and retries on another "
    "one when the first fails. Each layer can run on its own in any ASGI application, so you "
    "can adopt one piece at a time instead of moving everything at once."
)
CODE = (
    "def settle(ledger, workspace_id, reserved, actual):\n"
    '    """Release a reservation and charge what the call really cost."""\n'
    "    if actual < 0:\n"
    '        raise ValueError(f"negative cost: {actual}")\n'
    "    delta = actual - reserved\n"
    "    for attempt in range(3):\n"
    "        balance = ledger.get(workspace_id, 0)\n"
    "        if ledger.compare_and_set(workspace_id, balance, balance + delta):\n"
    "            return balance + delta\n"
    "    return None\n"
)
JSON = (
    '{"id": "chatcmpl-8f3a2b1c", "object": "chat.completion", "created": 1718035200, '
    '"model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "message": {"role": "assistant", '
    '"content": "The meeting is moved to Thursday at 3 pm."}, "finish_reason": "stop"}], '
    '"usage": {"prompt_tokens": 41, "completion_tokens": 12, "total_tokens": 53}}'
)
MARKDOWN = (
    "| plan | requests | burst (rpm) | price |\n"
    "|---|---|---|---|\n"
    "| free | 1,000 | 20 | $0 |\n"
    "| pro | 50,000 | 300 | $49 |\n"
    "| team | 250,000 | 1,200 | $199 |\n\n"
    "Limits reset on the first day of each month at 00:00 UTC."
)
# OpenAI cookbook, "How to count tokens with tiktoken": 124 prompt tokens on gpt-4o, as
# counted by the API.
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]


def within(estimate: int, true: int) -> bool:
    return 0.9 * true <= estimate <= 1.35 * true


@pytest.mark.parametrize(
    ("text", "true"),
    [
        ("Hello world", 2),
        ("The quick brown fox jumps over the lazy dog.", 10),
        ("New synergies will help drive top-line growth.", 10),
        (PROSE, 83),
        (CODE, 97),
        (JSON, 117),
        (MARKDOWN, 81),
        ("人工智能是计算机科学的一个分支。", 11),
    ],
)
def test_text_estimates_are_close_to_gpt_4o_counts_and_rather_over(text: str, true: int) -> None:
    estimate = estimate_text_tokens(text)
    if true >= 10:
        assert within(estimate, true), (estimate, true)
    else:
        assert true <= estimate <= true + 2


def test_the_cookbook_conversation_is_estimated_near_its_api_count() -> None:
    estimate = estimate_prompt_tokens({"model": "gpt-4o", "messages": COOKBOOK_MESSAGES})
    assert within(estimate, 124), estimate


def test_an_empty_request_is_the_reply_priming() -> None:
    assert estimate_prompt_tokens({}) == REPLY_TOKENS
    assert estimate_prompt_tokens({"messages": []}) == REPLY_TOKENS


def test_each_message_adds_its_framing_and_role() -> None:
    one = estimate_prompt_tokens({"messages": [{"role": "user", "content": ""}]})
    assert one == REPLY_TOKENS + MESSAGE_TOKENS + 1
    two = estimate_prompt_tokens(
        {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]}
    )
    assert two == one + MESSAGE_TOKENS + 1


def test_names_are_counted() -> None:
    plain = estimate_prompt_tokens({"messages": [{"role": "user", "content": "hi"}]})
    named = estimate_prompt_tokens(
        {"messages": [{"role": "user", "name": "alice_smith", "content": "hi"}]}
    )
    assert named >= plain + 1 + estimate_text_tokens("alice_smith") - 1


def test_content_parts_count_like_the_same_text() -> None:
    text = estimate_prompt_tokens({"messages": [{"role": "user", "content": PROSE + CODE}]})
    parts = estimate_prompt_tokens(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": PROSE}, {"type": "text", "text": CODE}],
                }
            ]
        }
    )
    assert parts == text


@pytest.mark.parametrize(
    ("image", "tokens"),
    [
        ({"url": "https://example.com/cat.png"}, IMAGE_TOKENS),
        ({"url": "https://example.com/cat.png", "detail": "high"}, IMAGE_TOKENS),
        ({"url": "https://example.com/cat.png", "detail": "auto"}, IMAGE_TOKENS),
        ({"url": "data:image/png;base64," + "A" * 100_000, "detail": "low"}, 85),
        ("https://example.com/cat.png", IMAGE_TOKENS),
    ],
)
def test_images_get_a_fixed_allowance_whatever_their_payload(image: Any, tokens: int) -> None:
    base = estimate_prompt_tokens({"messages": [{"role": "user", "content": []}]})
    with_image = estimate_prompt_tokens(
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": image}]}]}
    )
    assert with_image - base == tokens
    assert LOW_DETAIL_IMAGE_TOKENS == 85


def test_the_image_allowance_can_be_changed() -> None:
    request = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}] * 2}
        ]
    }
    default = estimate_prompt_tokens(request)
    assert estimate_prompt_tokens(request, image_tokens=1_445) - default == 2 * (1_445 - 765)


def test_tool_calls_and_tool_results_are_counted() -> None:
    arguments = '{"city": "Paris", "unit": "celsius", "days": 7}'
    call = {
        "id": "call_9f8e7d6c5b4a",
        "type": "function",
        "function": {"name": "get_forecast", "arguments": arguments},
    }
    base = estimate_prompt_tokens({"messages": [{"role": "assistant", "content": None}]})
    with_call = estimate_prompt_tokens(
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
    )
    parts = estimate_text_tokens("get_forecast") + estimate_text_tokens(arguments)
    assert parts + TOOL_CALL_TOKENS - 1 <= with_call - base <= parts + TOOL_CALL_TOKENS
    result = {"role": "tool", "tool_call_id": "call_9f8e7d6c5b4a", "content": "18 C, sunny"}
    assert estimate_prompt_tokens({"messages": [result]}) > estimate_prompt_tokens(
        {"messages": [{**result, "tool_call_id": None}]}
    )
    legacy = estimate_prompt_tokens(
        {"messages": [{"role": "assistant", "content": None, "function_call": call["function"]}]}
    )
    assert legacy == with_call


WEATHER = {
    "name": "get_current_weather",
    "description": "Get the current weather in a given location",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city, e.g. San Francisco"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
    },
}


def test_tool_definitions_are_counted_once_each() -> None:
    base = estimate_prompt_tokens({"messages": []})
    one = estimate_prompt_tokens(
        {"messages": [], "tools": [{"type": "function", "function": WEATHER}]}
    )
    two = estimate_prompt_tokens(
        {"messages": [], "tools": [{"type": "function", "function": WEATHER}] * 2}
    )
    assert one - base >= TOOLS_TOKENS + FUNCTION_TOKENS + 40
    assert two - one == pytest.approx(one - base - TOOLS_TOKENS, abs=1)
    legacy = estimate_prompt_tokens({"messages": [], "functions": [WEATHER]})
    assert legacy == one


def test_a_json_schema_response_format_is_counted() -> None:
    base = estimate_prompt_tokens({"messages": []})
    json_mode = estimate_prompt_tokens({"messages": [], "response_format": {"type": "json_object"}})
    assert json_mode == base
    schema = {
        "type": "json_schema",
        "json_schema": {"name": "forecast", "strict": True, "schema": WEATHER["parameters"]},
    }
    assert estimate_prompt_tokens({"messages": [], "response_format": schema}) > base + 30


def test_other_content_parts_count_as_their_json() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg" * 50, "format": "wav"}}
    base = estimate_prompt_tokens({"messages": [{"role": "user", "content": []}]})
    with_audio = estimate_prompt_tokens({"messages": [{"role": "user", "content": [audio]}]})
    assert with_audio - base >= 75


@pytest.mark.parametrize(
    "request_body",
    [
        {"messages": "hello"},
        {"messages": None},
        {"messages": [None, 3, "text", ["nested"]]},
        {"messages": [{"role": 5, "content": 12, "name": None}]},
        {"messages": [{"role": "user", "content": [None, 7, {"type": "text", "text": 9}]}]},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": None}]}]},
        {"messages": [{"role": "assistant", "tool_calls": [None, {"function": "x"}]}]},
        {"messages": [{"role": "assistant", "tool_calls": "x", "function_call": None}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]},
        {"tools": "all", "functions": {"a": 1}, "response_format": "json"},
        {"tools": [None, {"function": None}, {"function": {"name": object()}}]},
        {"response_format": {"type": "json_schema", "json_schema": "x"}},
        {"messages": [{"role": "user", "content": "lone surrogate \ud800 and emoji \U0001f600"}]},
    ],
)
def test_malformed_requests_are_estimated_not_raised_on(request_body: dict[str, Any]) -> None:
    assert estimate_prompt_tokens(request_body) >= REPLY_TOKENS


def test_long_prompts_scale_linearly() -> None:
    long = estimate_prompt_tokens({"messages": [{"role": "user", "content": PROSE * 1_000}]})
    assert within(long, 83 * 1_000)


# Output estimates


def test_the_prior_stands_in_until_a_model_has_enough_outputs() -> None:
    estimator = OutputEstimator(prior=512, min_observations=3)
    assert estimator.estimate("gpt-4o") == 512
    estimator.observe("gpt-4o", 40)
    estimator.observe("gpt-4o", 60)
    assert estimator.estimate("gpt-4o") == 512
    estimator.observe("gpt-4o", 50)
    assert estimator.estimate("gpt-4o") == 60


def test_the_estimate_is_a_high_quantile_of_recent_outputs() -> None:
    estimator = OutputEstimator()
    for tokens in range(1, 101):
        estimator.observe("gpt-4o", tokens)
    assert estimator.estimate("gpt-4o") == 90
    median = OutputEstimator(quantile=0.5)
    for tokens in (10, 20, 30, 40, 1_000):
        median.observe("m", tokens)
    assert median.estimate("m") == 30


def test_old_outputs_leave_the_window() -> None:
    estimator = OutputEstimator(window=10, min_observations=1)
    for _ in range(10):
        estimator.observe("gpt-4o", 2_000)
    assert estimator.estimate("gpt-4o") == 2_000
    for _ in range(10):
        estimator.observe("gpt-4o", 100)
    assert estimator.estimate("gpt-4o") == 100


def test_models_are_learnt_separately() -> None:
    estimator = OutputEstimator(min_observations=1)
    estimator.observe("o3", 4_000)
    estimator.observe("gpt-4o-mini", 150)
    assert estimator.estimate("o3") == 4_000
    assert estimator.estimate("gpt-4o-mini") == 150
    assert estimator.estimate("claude-sonnet-4-5") == 512


@pytest.mark.parametrize(
    ("request_body", "tokens"),
    [
        ({}, 800),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 300}, 300),
        ({"max_completion_tokens": 300, "max_tokens": 200}, 200),
        ({"max_tokens": 5_000}, 800),
        ({"max_tokens": 0}, 800),
        ({"max_tokens": -5}, 800),
        ({"max_tokens": "100"}, 800),
        ({"max_tokens": True}, 800),
        ({"max_tokens": None, "max_completion_tokens": 250}, 250),
        ({"n": 3}, 2_400),
        ({"n": 3, "max_tokens": 100}, 300),
        ({"n": 0}, 800),
        ({"n": "2"}, 800),
    ],
)
def test_the_request_caps_and_multiplies_the_estimate(
    request_body: dict[str, Any], tokens: int
) -> None:
    estimator = OutputEstimator(prior=800)
    assert estimator.estimate("gpt-4o", request_body) == tokens


def test_at_most_max_models_are_tracked_least_recently_observed_first_out() -> None:
    estimator = OutputEstimator(min_observations=1, max_models=2)
    estimator.observe("a", 10)
    estimator.observe("b", 20)
    estimator.observe("a", 10)
    estimator.observe("c", 30)
    assert estimator.estimate("a") == 10
    assert estimator.estimate("b") == 512
    assert estimator.estimate("c") == 30


@pytest.mark.parametrize("tokens", [-1, True, 2.5, "100", None])
def test_unusable_observations_are_ignored(tokens: Any) -> None:
    estimator = OutputEstimator(min_observations=1)
    estimator.observe("gpt-4o", tokens)
    assert estimator.estimate("gpt-4o") == 512


def test_zero_outputs_are_observations() -> None:
    estimator = OutputEstimator(min_observations=1)
    estimator.observe("gpt-4o", 0)
    assert estimator.estimate("gpt-4o") == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prior": -1},
        {"quantile": 0},
        {"quantile": 1.5},
        {"window": 0},
        {"min_observations": 0},
        {"max_models": 0},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        OutputEstimator(**kwargs)


def test_threads_may_share_an_estimator() -> None:
    estimator = OutputEstimator(window=50, min_observations=1, max_models=8)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(2_000):
                estimator.observe(f"model-{(worker + i) % 12}", 100)
                estimator.estimate(f"model-{i % 12}", {"max_tokens": 1_000})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert estimator.estimate("model-0") in {100, 512}
