"""Token counts: exact for OpenAI models (their tokenizer, the cookbook framing), else estimated."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
import tiktoken

from gateway_kit.config import GatewayConfig
from gateway_kit.cost import encodings, tokenizer
from gateway_kit.cost.encodings import load_encoding
from gateway_kit.cost.tokenizer import TokenCount, TokenCounter, count_prompt, count_text
from gateway_kit.cost.tokens import (
    FUNCTION_TOKENS,
    IMAGE_TOKENS,
    LOW_DETAIL_IMAGE_TOKENS,
    MESSAGE_TOKENS,
    REPLY_TOKENS,
    TOOL_CALL_TOKENS,
    TOOLS_TOKENS,
    estimate_prompt_tokens,
    estimate_text_tokens,
)

from .test_tokens import CODE, COOKBOOK_MESSAGES, JSON, MARKDOWN, PROSE


def cookbook_tokens(messages: list[dict[str, str]], encoding: tiktoken.Encoding) -> int:
    """OpenAI cookbook, "How to count tokens with tiktoken": ``num_tokens_from_messages`` for
    gpt-4o, gpt-4o-mini, gpt-4 and gpt-3.5-turbo-0125, as written there."""
    tokens_per_message = 3
    tokens_per_name = 1
    num_tokens = 0
    for message in messages:
        num_tokens += tokens_per_message
        for key, value in message.items():
            num_tokens += len(encoding.encode(value))
            if key == "name":
                num_tokens += tokens_per_name
    num_tokens += 3  # every reply is primed with <|start|>assistant<|message|>
    return num_tokens


def encoding(name: str) -> tiktoken.Encoding:
    loaded = load_encoding(name)
    assert loaded is not None
    return loaded


LONG = PROSE * 3  # past the length from which counts are remembered


@pytest.mark.parametrize(
    ("text", "o200k", "cl100k"),
    [
        ("hello world", 2, 2),
        ("Hello world", 2, 2),
        ("The quick brown fox jumps over the lazy dog.", 10, 10),
        (PROSE, 83, 83),
        (CODE, 97, 94),
        (JSON, 117, 117),
        (MARKDOWN, 81, 81),
        ("人工智能是计算机科学的一个分支。", 11, 16),
    ],
)
def test_texts_count_exactly_for_openai_models(text: str, o200k: int, cl100k: int) -> None:
    assert count_text(text, "gpt-4o") == TokenCount(o200k, exact=True, encoding="o200k_base")
    assert count_text(text, "gpt-4") == TokenCount(cl100k, exact=True, encoding="cl100k_base")
    assert count_text(text, "gpt-4o").tokens == len(encoding("o200k_base").encode(text))


def test_special_token_text_counts_as_ordinary_text() -> None:
    count = count_text("<|endoftext|>", "gpt-4o")
    assert count.exact
    assert count.tokens == len(
        encoding("o200k_base").encode("<|endoftext|>", disallowed_special=())
    )
    assert count.tokens > 1


def test_lone_surrogates_are_counted_not_raised_on() -> None:
    assert count_text("a\ud800b", "gpt-4o").exact
    assert count_prompt({"messages": [{"role": "user", "content": "\udfff" * 100}]}, "gpt-4o").exact


@pytest.mark.parametrize(("model", "api_count"), [("gpt-4o", 124), ("gpt-4", 129)])
def test_the_cookbook_conversation_counts_what_the_api_counted(model: str, api_count: int) -> None:
    # The cookbook's figures for this conversation, counted by the API itself.
    count = count_prompt({"model": model, "messages": COOKBOOK_MESSAGES}, model)
    assert count.tokens == api_count
    assert count.exact


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-5.1", "o3", "gpt-3.5-turbo"])
def test_chat_prompts_count_as_the_cookbook_counts(model: str) -> None:
    messages = [
        {"role": "developer", "content": CODE},
        {"role": "user", "name": "ada", "content": LONG},
        {"role": "assistant", "content": JSON},
        {"role": "user", "content": MARKDOWN + "人工智能"},
        {"role": "user", "content": ""},
    ]
    name = encodings.encoding_for_model(model)
    assert name is not None
    count = count_prompt({"messages": messages}, model)
    assert count == TokenCount(cookbook_tokens(messages, encoding(name)), True, name)


def test_text_parts_count_as_their_text() -> None:
    as_string = count_prompt({"messages": [{"role": "user", "content": PROSE}]}, "gpt-4o")
    as_parts = count_prompt(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": PROSE}]}]}, "gpt-4o"
    )
    assert as_parts == as_string


def test_a_low_detail_image_is_exact_others_are_estimated() -> None:
    def image(detail: str | None) -> dict[str, Any]:
        url: dict[str, Any] = {"url": "https://example.com/cat.png"}
        if detail is not None:
            url["detail"] = detail
        parts = [{"type": "text", "text": "what is it?"}, {"type": "image_url", "image_url": url}]
        return {"messages": [{"role": "user", "content": parts}]}

    text = count_prompt(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "what is it?"}]}]},
        "gpt-4o",
    )
    low = count_prompt(image("low"), "gpt-4o")
    assert low == TokenCount(text.tokens + LOW_DETAIL_IMAGE_TOKENS, True, "o200k_base")
    for detail in ("high", "auto", None):
        high = count_prompt(image(detail), "gpt-4o")
        assert high == TokenCount(text.tokens + IMAGE_TOKENS, False, "o200k_base")


def test_tools_and_tool_calls_are_counted_but_flagged_as_estimates() -> None:
    o200k = encoding("o200k_base")
    function = {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    payload = {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        ],
        "tools": [{"type": "function", "function": function}],
    }
    count = count_prompt(payload, "gpt-4o")
    assert not count.exact
    assert count.encoding == "o200k_base"

    def n(text: str) -> int:
        return len(o200k.encode(text))

    expected = (
        REPLY_TOKENS
        + (MESSAGE_TOKENS + n("user") + n("Weather in Paris?"))
        + (MESSAGE_TOKENS + n("assistant") + TOOL_CALL_TOKENS + n("get_weather"))
        + n('{"city":"Paris"}')
        + (MESSAGE_TOKENS + n("tool") + n("call_1") + n("sunny, 21 C"))
        + TOOLS_TOKENS
        + FUNCTION_TOKENS
        + n(tokenizer._json(function))
    )
    assert count.tokens == expected


def test_a_json_schema_response_format_is_flagged_as_an_estimate() -> None:
    messages = [{"role": "user", "content": "hi"}]
    plain = count_prompt({"messages": messages}, "gpt-4o")
    schema = {"name": "answer", "schema": {"type": "object"}}
    count = count_prompt(
        {"messages": messages, "response_format": {"type": "json_schema", "json_schema": schema}},
        "gpt-4o",
    )
    assert not count.exact
    assert count.tokens == (
        plain.tokens + FUNCTION_TOKENS + len(encoding("o200k_base").encode(tokenizer._json(schema)))
    )


def test_nulls_an_sdk_leaves_on_a_resent_message_keep_the_count_exact() -> None:
    resent = {
        "role": "assistant",
        "content": "Hello!",
        "refusal": None,
        "tool_calls": None,
        "function_call": None,
        "audio": None,
        "annotations": [],
    }
    count = count_prompt({"messages": [resent]}, "gpt-4o")
    plain = count_prompt({"messages": [{"role": "assistant", "content": "Hello!"}]}, "gpt-4o")
    assert count == plain
    assert count.exact


def test_an_unknown_message_field_with_a_value_makes_the_count_an_estimate() -> None:
    count = count_prompt(
        {"messages": [{"role": "assistant", "content": "", "refusal": "I can't."}]}, "gpt-4o"
    )
    assert not count.exact


def test_embedding_inputs_count_exactly() -> None:
    cl100k = encoding("cl100k_base")
    model = "text-embedding-3-small"
    assert count_prompt({"input": PROSE}, model) == TokenCount(83, True, "cl100k_base")
    texts = [PROSE, CODE, "hello world"]
    assert count_prompt({"input": texts}, model).tokens == sum(len(cl100k.encode(t)) for t in texts)
    assert count_prompt({"input": [[1, 2, 3], [4]]}, model).tokens == 4
    assert count_prompt({"input": [1, 2, 3]}, model).tokens == 3


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "llama-3.1-70b", "gpt-oss-20b", "davinci"])
def test_other_models_get_the_estimate_flagged(model: str) -> None:
    payload = {"messages": COOKBOOK_MESSAGES}
    assert count_prompt(payload, model) == TokenCount(estimate_prompt_tokens(payload), False)
    assert count_text(PROSE, model) == TokenCount(estimate_text_tokens(PROSE), False)


def test_without_tiktoken_every_count_is_an_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encodings, "_LOADER", encodings._Loader())
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    payload = {"messages": COOKBOOK_MESSAGES}
    counter = TokenCounter(GatewayConfig())
    for model in ("gpt-4o", "gpt-4", "mock-large"):
        assert counter.encoding(model) is None
        assert counter.count_prompt(payload, model) == TokenCount(
            estimate_prompt_tokens(payload), False
        )
        assert count_text(PROSE, model) == TokenCount(estimate_text_tokens(PROSE), False)


def test_a_damaged_encoding_falls_back_to_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encodings, "_LOADER", encodings._Loader())
    monkeypatch.setattr(encodings._SPECS["cl100k_base"], "sha256", "0" * 64)
    payload = {"messages": COOKBOOK_MESSAGES}
    for _ in range(2):
        count = count_prompt(payload, "gpt-4")
        assert count == TokenCount(estimate_prompt_tokens(payload), False)
    assert count_prompt(payload, "gpt-4o").exact


def test_configured_models_count_as_the_openai_model_they_name() -> None:
    config = GatewayConfig.model_validate(
        {
            "providers": [
                {"name": "openai", "type": "openai"},
                {"name": "azure", "type": "openai", "base_url": "https://x.openai.azure.com/v1"},
                {"name": "claude", "type": "anthropic"},
                {"name": "local", "type": "openai", "base_url": "http://127.0.0.1:8000/v1"},
            ],
            "models": [
                {"name": "gpt-4o", "provider": "openai"},
                {"name": "smart", "provider": "openai", "upstream_model": "gpt-4.1"},
                {"name": "old", "provider": "openai", "upstream_model": "gpt-4-0613"},
                # An Azure deployment name means nothing to tiktoken: its price names it.
                {
                    "name": "az",
                    "provider": "azure",
                    "upstream_model": "prod-4o",
                    "price_as": "gpt-4o",
                },
                # The upstream name wins over the price.
                {
                    "name": "cheap",
                    "provider": "openai",
                    "upstream_model": "gpt-4",
                    "price_as": "gpt-4o",
                },
                # Named like an OpenAI model, served by Anthropic.
                {
                    "name": "sonnet",
                    "provider": "claude",
                    "upstream_model": "claude-sonnet-4-5",
                    "price_as": "gpt-4o",
                },
                {"name": "llama", "provider": "local", "upstream_model": "llama-3.1-8b"},
                # Deployments that disagree: nothing to count with.
                {
                    "name": "mixed",
                    "deployments": [
                        {"provider": "openai", "upstream_model": "gpt-4o"},
                        {"provider": "openai", "upstream_model": "gpt-4"},
                    ],
                },
                {
                    "name": "spread",
                    "deployments": [
                        {"provider": "openai", "upstream_model": "gpt-4o"},
                        {"provider": "azure", "upstream_model": "prod-4o"},
                    ],
                },
            ],
        }
    )
    counter = TokenCounter(config)
    expected = {
        "gpt-4o": "o200k_base",
        "smart": "o200k_base",
        "old": "cl100k_base",
        "az": "o200k_base",
        "cheap": "cl100k_base",
        "sonnet": None,
        "llama": None,
        "mixed": None,
        "spread": "o200k_base",
        "gpt-3.5-turbo": "cl100k_base",  # not configured: known by its own name
    }
    assert {model: counter.encoding(model) for model in expected} == expected
    assert counter.count_text(PROSE, "az") == TokenCount(83, True, "o200k_base")
    assert not counter.count_text(PROSE, "llama").exact


def test_preload_loads_the_configured_encodings(monkeypatch: pytest.MonkeyPatch) -> None:
    loader = encodings._Loader()
    monkeypatch.setattr(encodings, "_LOADER", loader)
    TokenCounter(GatewayConfig()).preload()
    assert sorted(loader._encodings) == ["cl100k_base", "o200k_base"]
    monkeypatch.setattr(encodings, "_LOADER", encodings._Loader())
    monkeypatch.setattr(encodings._SPECS["cl100k_base"], "sha256", "0" * 64)
    with pytest.raises(ValueError, match="SHA-256"):
        TokenCounter(GatewayConfig()).preload()


def test_the_demo_models_count_as_the_models_they_are_priced_as() -> None:
    counter = TokenCounter(GatewayConfig())
    assert counter.encoding("mock-large") == "o200k_base"
    assert counter.encoding("mock-embed") == "cl100k_base"


def test_remembered_counts_are_the_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [
        {"role": "user" if i % 2 else "assistant", "content": f"{i} {LONG}"} for i in range(20)
    ]
    fresh = TokenCounter().count_prompt({"messages": messages}, "gpt-4o")
    counter = TokenCounter()
    first = counter.count_prompt({"messages": messages}, "gpt-4o")
    # The next turn: the old messages re-parsed (new string objects), one new message.
    encoded: list[str] = []
    o200k = encoding("o200k_base")

    def spy(text: str) -> list[int]:
        encoded.append(text)
        return o200k.encode_ordinary(text)

    monkeypatch.setattr(tokenizer._Counting, "__init__", _spying_init(spy))
    resent = [dict(m, content="".join(list(m["content"]))) for m in messages]
    new = {"role": "user", "content": f"new {LONG}"}
    second = counter.count_prompt({"messages": [*resent, new]}, "gpt-4o")
    assert first == fresh
    assert encoded == [new["content"]]  # roles are looked up, old contents remembered
    assert second.tokens == first.tokens + MESSAGE_TOKENS + 1 + len(o200k.encode(new["content"]))
    assert second == TokenCount(
        cookbook_tokens([*messages, new], o200k), exact=True, encoding="o200k_base"
    )


def _spying_init(spy: Any) -> Any:
    original = tokenizer._Counting.__init__

    def init(self: Any, name: str, encode: Any, memo: Any) -> None:
        original(self, name, spy, memo)

    return init


def test_the_memo_is_bounded_and_keyed_by_encoding() -> None:
    counter = TokenCounter(memo_size=3)
    texts = [f"{i} {LONG}" for i in range(5)]
    for text in texts:
        counter.count_text(text, "gpt-4o")
    assert len(counter._memo._counts) == 3
    # The same text under another encoding is its own entry, with its own count.
    assert counter.count_text(texts[-1], "gpt-4").tokens == len(
        encoding("cl100k_base").encode(texts[-1])
    )
    assert counter.count_text(texts[-1], "gpt-4o").tokens == len(
        encoding("o200k_base").encode(texts[-1])
    )


def test_a_memo_of_zero_remembers_nothing() -> None:
    counter = TokenCounter(memo_size=0)
    assert counter.count_text(LONG, "gpt-4o") == count_text(LONG, "gpt-4o")
    assert len(counter._memo._counts) == 0
    with pytest.raises(ValueError, match="memo_size"):
        TokenCounter(memo_size=-1)


def test_counts_agree_across_threads() -> None:
    counter = TokenCounter(memo_size=8)
    texts = [f"{i} {LONG}" for i in range(16)]
    expected = [len(encoding("o200k_base").encode(t)) for t in texts]
    wrong: list[str] = []

    def count() -> None:
        for _ in range(20):
            for text, tokens in zip(texts, expected, strict=True):
                if counter.count_text(text, "gpt-4o").tokens != tokens:
                    wrong.append(text[:10])

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_malformed_payloads_are_skipped_not_raised_on() -> None:
    payload: dict[str, Any] = {
        "messages": [
            "not a message",
            {"role": 3, "content": {"odd": True}, "name": None},
            {"role": "user", "content": [None, 7, {"type": "text", "text": 5}, "plain"]},
            {"role": "assistant", "tool_calls": [None, {"function": "x"}], "function_call": 3},
        ],
        "tools": "nope",
        "functions": [None],
        "response_format": {"json_schema": "nope"},
    }
    count = count_prompt(payload, "gpt-4o")
    assert count.encoding == "o200k_base"
    assert count.tokens > REPLY_TOKENS
    assert count_prompt({}, "gpt-4o") == TokenCount(REPLY_TOKENS, True, "o200k_base")
