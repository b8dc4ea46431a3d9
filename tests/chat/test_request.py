"""The inference request as the routes read it (``chat.request``): one strict parse, bounds on
the integers the gateway computes with. Each case here was once a 500 or went upstream."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.fakes import provisioned

pytestmark = pytest.mark.anyio

CONFIG = {
    "providers": [
        {"name": "up", "base_url": "https://upstream.test/v1"},
        {"name": "mock", "type": "mock"},
    ],
    "models": [
        {"name": "gpt-fake", "provider": "up"},
        {"name": "embed", "provider": "mock", "kind": "embedding"},
    ],
}
CHAT = b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]'


def saying(content: bytes) -> bytes:
    """A chat request whose message is ``content``, as written (escapes included)."""
    return b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "%s"}]}' % content


EMBED = b'{"model": "embed", "input": "hello"'


async def post(env: Any, path: str, body: bytes, **headers: str) -> Any:
    return await env.recorder.request(
        "POST",
        path,
        body=body,
        headers={**env.auth(), "content-type": "application/json", **headers},
    )


@pytest.fixture
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.WARNING)
    yield
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.usefixtures("no_errors_logged")
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
@pytest.mark.parametrize(
    ("body", "says", "param"),
    [
        (b"[" * 5000 + b"]" * 5000, "levels deep", None),  # once a RecursionError: 500
        (b'{"model": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}", "levels deep", None),
        (CHAT + b', "temperature": NaN}', "NaN", None),
        (CHAT + b', "frequency_penalty": Infinity}', "Infinity", None),
        (CHAT + b', "top_p": -Infinity}', "-Infinity", None),
        (CHAT + b', "presence_penalty": 1e999}', "range of a double", None),
        (saying(b"hi \\ud800"), "lone surrogate", "messages[0].content"),
        (EMBED[:-1] + b'\\uDC00"}', "lone surrogate", "input"),
        (b'{"model": "gpt-fake\\ud800"}', "lone surrogate", "model"),
        (b'{"\\udbff": 1, "model": "gpt-fake"}', "lone surrogate", None),
        (b'{"model": "gpt-fake", "messages": "\xed\xa0\x80"}', "not UTF-8", None),
        ('{"model": "gpt-fake"}'.encode("utf-16"), "not UTF-8", None),
    ],
)
async def test_bodies_that_cannot_be_forwarded_are_a_400_and_never_go_upstream(
    path: str, body: bytes, says: str, param: str | None
) -> None:
    async with provisioned("scale", **CONFIG) as env:
        answer = await post(env, path, body)
        assert answer.status == 400, answer.body
        error = answer.json()["error"]
        assert (error["type"], error["code"], error["param"]) == (
            "invalid_request_error",
            "invalid_json",
            param,
        )
        assert error["message"].startswith("We could not parse the JSON body of your request")
        assert says in error["message"]
        assert env.upstream.calls == 0
        assert await env.used_requests() == 0


@pytest.mark.parametrize(
    ("field", "value", "ok", "says"),
    [
        ("n", 1, True, ""),
        ("n", 128, True, ""),
        ("n", 129, False, "must be an integer from"),
        ("n", 10**16, False, "must be an integer from"),  # once a 500 from Budget's reservation
        ("n", 0, False, "must be an integer from"),
        ("n", 1.0, False, "must be an integer from"),
        ("n", True, False, "must be an integer from"),
        ("max_tokens", 2**31 - 1, True, ""),
        ("max_tokens", 2**31, False, "must be an integer from"),
        ("max_tokens", 10**400, False, "must be an integer from"),
        ("max_completion_tokens", 0, False, "must be an integer from"),
        ("max_completion_tokens", -5, False, "must be an integer from"),
        ("max_completion_tokens", 10**19, False, "must be an integer from"),
        ("top_logprobs", 0, True, ""),
        ("top_logprobs", 20, True, ""),
        ("top_logprobs", 21, False, "must be an integer from"),
        ("top_logprobs", "5", False, "must be an integer from"),
        # The cache decides on these: once "logprobs": 1 was kept as an answer without
        # logprobs and served to the next request.
        ("logprobs", True, True, ""),
        ("logprobs", False, True, ""),
        ("logprobs", 1, False, "'logprobs' must be a boolean."),
        ("logprobs", "true", False, "'logprobs' must be a boolean."),
        ("modalities", ["text"], True, ""),
        ("modalities", "audio", False, "'modalities' must be an array of strings."),
        ("modalities", ["text", 1], False, "'modalities' must be an array of strings."),
    ],
)
async def test_chat_fields_the_gateway_computes_with_have_their_types_and_bounds(
    field: str, value: Any, ok: bool, says: str
) -> None:
    async with provisioned("scale", **CONFIG) as env:
        answer = await env.chat(**{field: value})
        if ok:
            assert answer.status == 200, answer.body
            return
        assert answer.status == 400
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_type", field)
        assert says in error["message"]
        assert env.upstream.calls == 0


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _assistant_calling(**changed: Any) -> list[dict[str, Any]]:
    function = {**CALL["function"], **changed.pop("function", {})}
    call = {**CALL, **changed, "function": function}
    return [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]


@pytest.mark.usefixtures("no_errors_logged")
@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (_assistant_calling(), None),
        ([{"role": "user", "content": "hi", "name": "ann"}], None),
        # Each of these was a 500 (Guardian hashes them): a type error naming the field now.
        ([{"role": "user", "content": "hi", "name": ["x"]}], "messages[0].name"),
        ([{"role": "tool", "content": "hi", "tool_call_id": {"a": 1}}], "messages[0].tool_call_id"),
        (_assistant_calling(id=["c1"]), "messages[1].tool_calls[0].id"),
        (_assistant_calling(type={}), "messages[1].tool_calls[0].type"),
        (_assistant_calling(function={"name": {}}), "messages[1].tool_calls[0].function.name"),
        (
            _assistant_calling(function={"arguments": {"a": 1}}),
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c1", "function": "f"}]}],
            "messages[0].tool_calls[0].function",
        ),
        ([{"role": "assistant", "tool_calls": {"id": "c1"}}], "messages[0].tool_calls"),
        ([{"role": "assistant", "tool_calls": ["c1"]}], "messages[0].tool_calls[0]"),
    ],
)
async def test_message_fields_have_their_types(messages: list[Any], param: str | None) -> None:
    async with provisioned("scale", guardian={"mode": "enforce"}, **CONFIG) as env:
        for stream in (False, True):
            answer = await env.chat(messages=messages, stream=stream)
            if param is None:
                assert answer.status == 200, answer.body
                continue
            assert answer.status == 400, answer.body
            error = answer.json()["error"]
            assert (error["code"], error["param"]) == ("invalid_type", param)
            assert error["message"].startswith(f"'{param}' must be")
        if param is not None:
            assert env.upstream.calls == 0
            assert await env.used_requests() == 0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
async def test_the_cache_field_is_checked_and_never_sent_upstream(path: str) -> None:
    models = [
        {"name": "gpt-fake", "provider": "up"},
        {"name": "embed", "provider": "up", "kind": "embedding"},
    ]
    embedding = {"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}
    async with provisioned("scale", models=models, cache={"mode": "off"}) as env:
        if path == "/v1/embeddings":
            env.upstream.json_body = {
                "object": "list",
                "data": [embedding],
                "model": "embed",
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        start = CHAT if path.endswith("completions") else EMBED
        kept = await post(env, path, start + b', "cache": {"ttl": 60, "namespace": "a"}}')
        assert kept.status == 200, kept.body
        assert "cache" not in env.upstream.sent_json()
        assert env.upstream.sent_json()["model"] in ("gpt-fake", "embed")
        mistaken = await post(env, path, start + b', "cache": {"no-cache": "yes"}}')
        assert mistaken.status == 400
        assert mistaken.json()["error"]["param"] == "cache.no-cache"
        assert env.upstream.calls == 1


@pytest.mark.parametrize(
    ("value", "ok"), [(1, True), (3072, True), (65_537, False), (10**19, False)]
)
async def test_embedding_dimensions_are_bounded(value: int, ok: bool) -> None:
    async with provisioned("scale", **CONFIG) as env:
        answer = await post(env, "/v1/embeddings", EMBED + b', "dimensions": %d}' % value)
        assert (answer.status == 200) == ok, answer.body
        if not ok:
            error = answer.json()["error"]
            assert (error["code"], error["param"]) == ("invalid_type", "dimensions")
            assert "from 1 to 65536" in error["message"]


async def test_surrogate_pairs_and_text_that_looks_like_an_escape_pass_untouched() -> None:
    async with provisioned("scale", **CONFIG) as env:
        body = saying(b"\\ud83d\\ude00 and \\\\ud800 as text")
        answer = await post(env, "/v1/chat/completions", body)
        assert answer.status == 200, answer.body
        assert env.upstream.requests[0].content == body  # forwarded as it came
