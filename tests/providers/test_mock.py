"""MockProvider: deterministic answers, streams, tool calls, options, structured output, usage
and embeddings, offline, in the shapes of the OpenAI SDK's types. Faults: test_mock_faults.py."""

from __future__ import annotations

import base64
import datetime as dt
import enum
import json
import math
import struct
import uuid
from collections import defaultdict
from decimal import Decimal
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import jsonschema
import openai
import pytest
from openai.lib._parsing._completions import type_to_response_format_param
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel, Field, HttpUrl

from gateway_kit import ChatCall, MockProvider
from gateway_kit.providers.base import EmbeddingsCall, EmbeddingsProvider, Provider
from gateway_kit.providers.mock import count_tokens

pytestmark = pytest.mark.anyio

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer"},
                "exact": {"type": ["boolean", "null"]},
                "tags": {"type": "array"},
                "optional": {"type": "number"},
            },
            "required": ["query", "limit", "exact", "tags"],
        },
    },
}


async def call(payload: dict[str, Any], stream: bool = False) -> Any:
    response = await MockProvider().chat(ChatCall(payload, None, stream=stream))
    if not stream:
        return json.loads(response.body)
    assert response.events is not None
    assert response.close is not None
    events = [e.data async for e in response.events]
    await response.close()
    return events


def messages(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


def chunks_of(events: list[str]) -> list[dict[str, Any]]:
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def reassemble(chunks: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per choice index: the streamed text, tool-call arguments and finish reasons."""
    choices: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"content": "", "arguments": "", "finish": [], "roles": 0}
    )
    for chunk in chunks:
        for choice in chunk["choices"]:
            got, delta = choices[choice["index"]], choice["delta"]
            got["roles"] += delta.get("role") == "assistant"
            got["content"] += delta.get("content") or ""
            for tool_call in delta.get("tool_calls") or []:
                got["arguments"] += tool_call["function"].get("arguments", "")
            if choice["finish_reason"]:
                got["finish"].append(choice["finish_reason"])
    return dict(choices)


def structured(schema: dict[str, Any], name: str = "answer") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def assert_valid(instance: Any, schema: dict[str, Any]) -> None:
    validator = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    validator.check_schema(schema)
    validator(schema, format_checker=validator.FORMAT_CHECKER).validate(instance)


def sdk_client(provider: MockProvider) -> openai.AsyncOpenAI:
    """The OpenAI SDK, its HTTP calls answered by ``provider`` (streams buffered whole)."""

    async def handle(request: httpx.Request) -> httpx.Response:
        payload = json.loads(request.content)
        if request.url.path.endswith("/embeddings"):
            answer = await provider.embeddings(EmbeddingsCall(payload))
        else:
            answer = await provider.chat(
                ChatCall(payload, None, stream=bool(payload.get("stream")))
            )
        body = answer.body
        if answer.events is not None and answer.close is not None:
            body = b"".join([event.encode() async for event in answer.events])
            await answer.close()
        return httpx.Response(answer.status, headers=answer.headers, content=body)

    http_client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    return openai.AsyncOpenAI(
        api_key="test", base_url="http://mock.test/v1", http_client=http_client, max_retries=0
    )


# --- Chat: the basics -------------------------------------------------------------------------


async def test_answers_are_deterministic_and_carry_usage() -> None:
    payload = {"model": "mock-large", "messages": messages("What is ASGI?")}
    first, second = await call(payload), await call(payload)
    assert first == second
    assert first["choices"][0]["message"]["content"] == (
        "This is a mock reply from gateway-kit to: What is ASGI?"
    )
    usage = first["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert first["model"] == "mock-large"


async def test_different_requests_get_different_ids() -> None:
    a = await call({"model": "m", "messages": messages("a")})
    b = await call({"model": "m", "messages": messages("b")})
    assert a["id"] != b["id"]


async def test_the_stream_spells_the_same_answer_and_ends_with_usage_and_done() -> None:
    payload = {"model": "m", "messages": messages("Stream me")}
    whole = await call(payload)
    chunks = chunks_of(await call(payload, stream=True))
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"] == whole["usage"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


async def test_bodies_and_chunks_have_the_openai_sdk_shapes() -> None:
    payload = {"model": "m", "messages": messages("shape"), "n": 2, "tools": [TOOL]}
    for request in (payload, {"model": "m", "messages": messages("shape")}):
        body = await call(request)
        completion = ChatCompletion.model_validate(body)
        for choice, raw in zip(completion.choices, body["choices"], strict=True):
            # OpenAI always sends these, as nulls.
            assert raw["logprobs"] is None
            assert "logprobs" in raw
            assert raw["message"]["refusal"] is None
            assert "refusal" in raw["message"]
            assert choice.message.role == "assistant"
        chunks = [
            ChatCompletionChunk.model_validate(c) for c in chunks_of(await call(request, True))
        ]
        assert chunks[-1].usage == completion.usage
        assert all(c.id == completion.id for c in chunks)


async def test_tools_get_a_call_with_schema_shaped_arguments() -> None:
    result = await call({"model": "m", "messages": messages("find it"), "tools": [TOOL]})
    choice = result["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (tool_call,) = choice["message"]["tool_calls"]
    assert tool_call["function"]["name"] == "lookup"
    assert json.loads(tool_call["function"]["arguments"]) == {
        "query": "mock",
        "limit": 1,
        "exact": True,
        "tags": [],
    }


async def test_streamed_tool_call_arguments_reassemble() -> None:
    events = await call({"model": "m", "messages": messages("x"), "tools": [TOOL]}, stream=True)
    deltas = [json.loads(e) for e in events[:-1]]
    pieces = [
        d["choices"][0]["delta"]["tool_calls"][0]["function"]
        for d in deltas
        if d["choices"] and "tool_calls" in d["choices"][0]["delta"]
    ]
    assert pieces[0]["name"] == "lookup"
    assert json.loads("".join(p["arguments"] for p in pieces))["query"] == "mock"


async def test_tool_choice_none_and_tool_results_get_text() -> None:
    no_tools = await call(
        {"model": "m", "messages": messages("x"), "tools": [TOOL], "tool_choice": "none"}
    )
    assert no_tools["choices"][0]["message"]["content"]
    after_tool = await call(
        {
            "model": "m",
            "tools": [TOOL],
            "messages": [
                *messages("x"),
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
            ],
        }
    )
    assert after_tool["choices"][0]["message"]["content"] == (
        "Mock answer using the tool result: 42"
    )


async def test_tool_choice_picks_the_named_function() -> None:
    other = {"type": "function", "function": {"name": "other"}}
    result = await call(
        {
            "model": "m",
            "messages": messages("x"),
            "tools": [TOOL, other],
            "tool_choice": {"type": "function", "function": {"name": "other"}},
        }
    )
    assert result["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "other"


# --- Chat: n -----------------------------------------------------------------------------------


async def test_n_gives_distinct_indexed_choices_and_usage_counts_them_all() -> None:
    payload = {"model": "m", "messages": messages("three please"), "n": 3}
    body = await call(payload)
    contents = [c["message"]["content"] for c in body["choices"]]
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert contents[0] == "This is a mock reply from gateway-kit to: three please"
    assert contents[1:] == [contents[0] + " (2)", contents[0] + " (3)"]
    assert body["usage"]["completion_tokens"] == sum(count_tokens(c) for c in contents)
    assert await call(payload) == body


async def test_a_stream_of_n_choices_interleaves_them_by_index() -> None:
    payload = {"model": "m", "messages": messages("interleave these"), "n": 3}
    body = await call(payload)
    chunks = chunks_of(await call(payload, stream=True))
    # Every chunk but the usage one carries exactly one choice; they take turns.
    assert all(len(c["choices"]) == 1 for c in chunks[:-1])
    assert [c["choices"][0]["index"] for c in chunks[:6]] == [0, 1, 2, 0, 1, 2]
    streamed = reassemble(chunks)
    assert sorted(streamed) == [0, 1, 2]
    for choice in body["choices"]:
        got = streamed[choice["index"]]
        assert got["content"] == choice["message"]["content"]
        assert got["finish"] == ["stop"]
        assert got["roles"] == 1
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == body["usage"]


async def test_n_tool_calls_are_distinct_calls() -> None:
    payload = {"model": "m", "messages": messages("x"), "tools": [TOOL], "n": 2}
    body = await call(payload)
    calls = [c["message"]["tool_calls"][0] for c in body["choices"]]
    assert calls[0]["id"] != calls[1]["id"]
    arguments = [json.loads(c["function"]["arguments"]) for c in calls]
    assert arguments[0]["query"] == "mock"
    assert arguments[1]["query"] == "mock (2)"
    streamed = reassemble(chunks_of(await call(payload, stream=True)))
    assert [json.loads(streamed[i]["arguments"]) for i in (0, 1)] == arguments


# --- Chat: max tokens and stop --------------------------------------------------------------


async def test_max_tokens_cuts_the_text_at_a_word_boundary_with_finish_length() -> None:
    payload = {"model": "m", "messages": messages("a fairly long question about the mock")}
    full = (await call(payload))["choices"][0]["message"]["content"]
    body = await call({**payload, "max_tokens": 5})
    choice = body["choices"][0]
    content = choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    assert content == "This is a mock reply"  # 20 characters, 5 tokens, whole words
    assert full.startswith(content)
    assert full[len(content)] == " "
    assert body["usage"]["completion_tokens"] == count_tokens(content) <= 5


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 11, 13])
async def test_truncated_completions_never_exceed_the_limit(limit: int) -> None:
    payload = {"model": "m", "messages": messages("count my tokens please"), "n": 2}
    body = await call({**payload, "max_completion_tokens": limit})
    for choice in body["choices"]:
        assert count_tokens(choice["message"]["content"]) <= limit
        assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] <= 2 * limit


async def test_a_first_word_longer_than_the_limit_is_cut_mid_word() -> None:
    payload = {"model": "m", "messages": messages("x"), "response_format": {"type": "json_object"}}
    body = await call({**payload, "max_tokens": 1})
    assert body["choices"][0]["message"]["content"] == '{"re'
    assert body["choices"][0]["finish_reason"] == "length"


async def test_a_stop_before_the_limit_ends_the_text_with_finish_stop() -> None:
    body = await call({"model": "m", "messages": messages("x"), "stop": " ", "max_tokens": 1})
    assert body["choices"][0]["message"]["content"] == "This"
    assert body["choices"][0]["finish_reason"] == "stop"
    body = await call({"model": "m", "messages": messages("x"), "stop": "x", "max_tokens": 3})
    assert body["choices"][0]["message"]["content"] == "This is a"
    assert body["choices"][0]["finish_reason"] == "length"  # the limit came first


async def test_max_completion_tokens_wins_over_max_tokens() -> None:
    payload = {"model": "m", "messages": messages("limits")}
    plain = await call(payload)
    roomy = await call({**payload, "max_completion_tokens": 1000, "max_tokens": 2})
    assert roomy["choices"][0]["message"] == plain["choices"][0]["message"]
    assert roomy["choices"][0]["finish_reason"] == "stop"


async def test_max_tokens_cuts_tool_call_arguments_as_openai_does() -> None:
    payload = {"model": "m", "messages": messages("x"), "tools": [TOOL], "max_tokens": 4}
    body = await call(payload)
    choice = body["choices"][0]
    arguments = choice["message"]["tool_calls"][0]["function"]["arguments"]
    assert choice["finish_reason"] == "length"
    assert arguments == '{"query": "mock",'[:16]
    assert body["usage"]["completion_tokens"] == 4
    streamed = reassemble(chunks_of(await call(payload, stream=True)))
    assert streamed[0]["arguments"] == arguments
    assert streamed[0]["finish"] == ["length"]


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("reply", "This is a mock "),
        (["zzz", "gateway", "mock"], "This is a "),  # the earliest occurrence, whichever stop
        (["not there"], "This is a mock reply from gateway-kit to: hello"),
        ("This", ""),
        ([], "This is a mock reply from gateway-kit to: hello"),
    ],
)
async def test_stop_cuts_the_text_before_the_first_occurrence(
    stop: str | list[str], expected: str
) -> None:
    payload = {"model": "m", "messages": messages("hello"), "stop": stop}
    body = await call(payload)
    assert body["choices"][0]["message"]["content"] == expected
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == count_tokens(expected)
    streamed = reassemble(chunks_of(await call(payload, stream=True)))
    assert streamed[0]["content"] == expected
    assert streamed[0]["finish"] == ["stop"]


async def test_a_cut_stream_spells_the_cut_text() -> None:
    payload = {"model": "m", "messages": messages("cut me short"), "max_tokens": 6, "n": 2}
    body = await call(payload)
    streamed = reassemble(chunks_of(await call(payload, stream=True)))
    for choice in body["choices"]:
        assert streamed[choice["index"]]["content"] == choice["message"]["content"]
        assert streamed[choice["index"]]["finish"] == ["length"]


# --- Chat: structured output ----------------------------------------------------------------


async def test_json_object_answers_a_json_object_per_choice() -> None:
    payload = {
        "model": "m",
        "messages": messages("json please"),
        "response_format": {"type": "json_object"},
        "n": 2,
    }
    body = await call(payload)
    replies = [json.loads(c["message"]["content"]) for c in body["choices"]]
    assert replies[0] == {"reply": "This is a mock reply from gateway-kit to: json please"}
    assert replies[1] == {"reply": replies[0]["reply"] + " (2)"}
    text = await call({**payload, "response_format": {"type": "text"}})
    assert text["choices"][0]["message"]["content"] == replies[0]["reply"]


SCHEMAS: dict[str, dict[str, Any]] = {
    "flat object": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "draft-07 definitions": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/definitions/point"}}},
        "required": ["points"],
    },
    "draft-04 boolean exclusive bounds": {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "above": {"type": "number", "minimum": 1, "exclusiveMinimum": True},
            "below": {"type": "integer", "maximum": 1, "exclusiveMaximum": True},
        },
        "required": ["above", "below"],
    },
    "numbers": {
        "type": "object",
        "properties": {
            "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
            "open": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "small": {"type": "integer", "minimum": 10, "exclusiveMaximum": 12},
            "fives": {"type": "integer", "multipleOf": 5, "minimum": 7},
            "negative": {"type": "integer", "maximum": -3},
            "temperature": {"type": "number", "minimum": -273.15},
            "quarters": {"type": "number", "multipleOf": 0.25, "exclusiveMinimum": 0.5},
        },
        "required": ["ratio", "open", "small", "fives", "negative", "temperature", "quarters"],
    },
    "string formats and lengths": {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "mail": {"type": "string", "format": "email"},
            "home": {"type": "string", "format": "uri"},
            "id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
            "long": {"type": "string", "minLength": 12},
            "short": {"type": "string", "maxLength": 2},
            "code": {"type": "string", "minLength": 3, "maxLength": 3},  # `pattern`: not honoured
        },
        "required": ["when", "day", "mail", "home", "id", "ip", "long", "short", "code"],
    },
    "arrays": {
        "type": "object",
        "properties": {
            "three": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3},
            "unique": {"type": "array", "items": {"type": "string"}, "minItems": 4},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
            "none": {"type": "array", "items": {"type": "integer"}, "maxItems": 0},
            "nested": {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}},
        },
        "required": ["three", "unique", "pair", "none", "nested"],
    },
    "maps and closed objects": {
        "type": "object",
        "properties": {
            "counts": {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 0},
                "minProperties": 2,
            },
            "closed": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
                "additionalProperties": False,
            },
        },
        "required": ["counts", "closed"],
        "additionalProperties": False,
    },
    "nullable, const, anyOf, oneOf, allOf": {
        "type": "object",
        "properties": {
            "maybe": {"type": ["string", "null"]},
            "only_null": {"type": "null"},
            "version": {"const": 2},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "shape": {
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                        "required": ["kind", "r"],
                    },
                    {
                        "type": "object",
                        "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                        "required": ["kind", "side"],
                    },
                ]
            },
            "merged": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
                ]
            },
        },
        "required": ["maybe", "only_null", "version", "either", "shape", "merged"],
    },
    "recursive linked list": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
                },
                "required": ["value", "next"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    "untyped keywords": {
        "properties": {"a": {"minimum": 5}, "b": {"items": {"type": "integer"}}, "c": {}},
        "required": ["a", "b", "c"],
    },
}


@pytest.mark.parametrize("name", list(SCHEMAS))
async def test_json_schema_answers_validate_against_the_schema(name: str) -> None:
    schema = SCHEMAS[name]
    payload = {
        "model": "m",
        "messages": messages("structured"),
        "response_format": structured(schema),
        "n": 3,
    }
    body = await call(payload)
    contents = [choice["message"]["content"] for choice in body["choices"]]
    for content in contents:
        assert_valid(json.loads(content), schema)
    assert await call(payload) == body  # deterministic
    streamed = reassemble(chunks_of(await call(payload, stream=True)))
    assert [streamed[i]["content"] for i in range(3)] == contents


async def test_json_schema_strings_in_formats_parse_and_choices_differ() -> None:
    schema = SCHEMAS["string formats and lengths"]
    payload = {"model": "m", "messages": messages("x"), "response_format": structured(schema)}
    body = await call({**payload, "n": 3})
    answers = [json.loads(c["message"]["content"]) for c in body["choices"]]
    assert len({json.dumps(a) for a in answers}) == 3
    for answer in answers:
        # The validator's own checks of these need packages not installed here.
        assert dt.datetime.fromisoformat(answer["when"]).tzinfo is not None
        assert urlsplit(answer["home"]).scheme == "https"
        assert len(answer["long"]) >= 12
        assert len(answer["short"]) <= 2


class Priority(enum.StrEnum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    street: str
    city: str
    postcode: str | None
    country: Literal["FR", "DE", "US"]


class Person(BaseModel):
    id: uuid.UUID
    name: str = Field(min_length=2, max_length=40)
    born: dt.date
    updated_at: dt.datetime
    age: int = Field(ge=0, le=150)
    score: float = Field(gt=0, lt=1)
    tags: list[str] = Field(min_length=1)
    addresses: list[Address]
    priority: Priority
    manager: Person | None = None


class Step(BaseModel):
    explanation: str
    output: str


class MathReasoning(BaseModel):
    """The OpenAI structured-outputs guide's example."""

    steps: list[Step]
    final_answer: str


class Tree(BaseModel):
    value: int
    children: list[Tree]


class Cat(BaseModel):
    pet_type: Literal["cat"]
    meows: int


class Dog(BaseModel):
    pet_type: Literal["dog"]
    barks: float


class Owner(BaseModel):
    pet: Cat | Dog = Field(discriminator="pet_type")
    counts: dict[str, int]
    dims: tuple[int, int, str]
    codes: set[str]
    price: Decimal
    site: HttpUrl | None = None


MODELS: list[type[BaseModel]] = [Person, MathReasoning, Tree, Owner]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("strict", [True, False], ids=["sdk-strict", "pydantic"])
async def test_pydantic_models_schemas_get_answers_the_model_accepts(
    model: type[BaseModel], strict: bool
) -> None:
    if strict:  # what the OpenAI SDK's `parse` sends
        response_format: Any = type_to_response_format_param(model)
    else:
        response_format = structured(model.model_json_schema(), model.__name__)
    schema = response_format["json_schema"]["schema"]
    payload = {"model": "m", "messages": messages("x"), "response_format": response_format}
    body = await call({**payload, "n": 2})
    for choice in body["choices"]:
        assert_valid(json.loads(choice["message"]["content"]), schema)
        model.model_validate_json(choice["message"]["content"])


async def test_recursive_models_end() -> None:
    body = await call(
        {
            "model": "m",
            "messages": messages("x"),
            "response_format": type_to_response_format_param(Tree),
        }
    )
    tree = Tree.model_validate_json(body["choices"][0]["message"]["content"])
    depth = 0
    while tree.children:
        tree, depth = tree.children[0], depth + 1
    assert 1 <= depth < 10


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 10**12},
        {"type": "array", "items": {"type": "integer"}, "minItems": 10**12},
        {"type": "object", "minProperties": 10**9},
        {"type": "number", "minimum": float("inf"), "multipleOf": 1e-320},
        {"type": "integer", "maximum": 10**400},
        {"$ref": "#"},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"anyOf": [{"$ref": "#"}]},
        {"$ref": "https://example.com/remote.json"},
        {"required": "x", "properties": [1], "type": []},
        {"enum": []},
    ],
)
async def test_hostile_or_odd_schemas_get_json_quickly_not_a_crash(schema: dict[str, Any]) -> None:
    body = await call({"model": "m", "messages": [], "response_format": structured(schema)})
    json.loads(body["choices"][0]["message"]["content"])


async def test_the_openai_sdk_parses_structured_output_from_the_mock() -> None:
    async with sdk_client(MockProvider()) as client:
        completion = await client.beta.chat.completions.parse(
            model="mock",
            messages=[{"role": "user", "content": "solve"}],
            response_format=MathReasoning,
        )
        parsed = completion.choices[0].message.parsed
        assert isinstance(parsed, MathReasoning)
        assert parsed.steps == [Step(explanation="mock", output="mock")]
        stream = await client.chat.completions.create(
            model="mock", messages=[{"role": "user", "content": "hi"}], n=2, stream=True
        )
        texts = ["", ""]
        async for chunk in stream:
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
        assert texts[1] == texts[0] + " (2)"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 0}, "n"),
        ({"n": "2"}, "n"),
        ({"n": 129}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": 2.5}, "max_completion_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [1]}, "stop"),
        ({"stop": {"a": 1}}, "stop"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": "json"}, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": 1}}},
            "response_format.json_schema.schema",
        ),
    ],
)
async def test_invalid_options_answer_400_in_openai_error_shape(
    extra: dict[str, Any], param: str
) -> None:
    response = await MockProvider().chat(
        ChatCall({"model": "m", "messages": messages("x"), **extra}, None, stream=True)
    )
    assert response.status == 400
    assert response.events is None
    error = json.loads(response.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


async def test_odd_payloads_do_not_crash_the_mock() -> None:
    for payload in (
        {},
        {"messages": "hello"},
        {"messages": [None, 3, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"messages": [], "tools": [{"function": "nope"}, {"type": "function"}]},
        {"messages": [], "tools": [TOOL], "tool_choice": {"function": "lookup"}},
    ):
        body = await call(payload)
        ChatCompletion.model_validate(body)


# --- Embeddings ------------------------------------------------------------------------------


async def embed(payload: dict[str, Any], provider: MockProvider | None = None) -> Any:
    response = await (provider or MockProvider()).embeddings(EmbeddingsCall(payload))
    assert response.headers == [(b"content-type", b"application/json")]
    return response.status, json.loads(response.body)


async def test_the_mock_is_a_provider_with_embeddings() -> None:
    provider = MockProvider()
    assert isinstance(provider, Provider)
    assert isinstance(provider, EmbeddingsProvider)


async def test_embeddings_are_deterministic_unit_vectors_in_openai_shape() -> None:
    payload = {"model": "text-embedding-3-small", "input": ["hello", "world", "hello"]}
    status, body = await embed(payload)
    assert status == 200
    response = CreateEmbeddingResponse.model_validate(body)
    assert response.model == "text-embedding-3-small"
    assert response.object == "list"
    vectors = [d.embedding for d in response.data]
    assert [d.index for d in response.data] == [0, 1, 2]
    assert all(len(v) == 1536 for v in vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, abs_tol=1e-5) for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert (await embed(payload))[1] == body
    (_, single) = await embed({"model": "e", "input": "hello"})
    assert single["data"][0]["embedding"] == vectors[0]
    tokens = count_tokens("hello") * 2 + count_tokens("world")
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


async def test_dimensions_shorten_a_vector_to_its_normalised_start() -> None:
    (_, full) = await embed({"model": "e", "input": "shorten me"})
    (_, short) = await embed({"model": "e", "input": "shorten me", "dimensions": 256})
    vector, start = short["data"][0]["embedding"], full["data"][0]["embedding"][:256]
    assert len(vector) == 256
    norm = math.sqrt(math.fsum(x * x for x in start))
    assert all(
        math.isclose(a, b / norm, rel_tol=1e-4, abs_tol=1e-6)
        for a, b in zip(vector, start, strict=True)
    )


async def test_base64_is_little_endian_float32_of_the_same_vector() -> None:
    payload = {"model": "e", "input": ["a", "b"], "dimensions": 64}
    (_, floats) = await embed(payload)
    (_, encoded) = await embed({**payload, "encoding_format": "base64"})
    for as_float, as_base64 in zip(floats["data"], encoded["data"], strict=True):
        decoded = struct.unpack("<64f", base64.b64decode(as_base64["embedding"]))
        # The float form is the float32 in nine digits: converting back gives the same bits.
        assert decoded == struct.unpack("<64f", struct.pack("<64f", *as_float["embedding"]))


async def test_token_inputs_are_embedded_and_counted_as_tokens() -> None:
    (_, one) = await embed({"model": "e", "input": [1, 2, 3]})
    (_, two) = await embed({"model": "e", "input": [[1, 2, 3], [4]]})
    assert one["data"][0]["embedding"] == two["data"][0]["embedding"]
    assert len(two["data"]) == 2
    assert two["usage"]["prompt_tokens"] == 4
    assert one["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    (status, long) = await embed({"model": "e", "input": [7] * 3000, "dimensions": 4})
    assert status == 200  # one input of 3000 tokens, not 3000 inputs
    assert len(long["data"]) == 1
    assert long["usage"]["prompt_tokens"] == 3000


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({}, "input"),
        ({"input": []}, "input"),
        ({"input": ""}, "input"),
        ({"input": ["ok", ""]}, "input"),
        ({"input": [1, "a"]}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": [True]}, "input"),
        ({"input": [-1]}, "input"),
        ({"input": {"text": "a"}}, "input"),
        ({"input": 3}, "input"),
        ({"input": ["a"] * 2049}, "input"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "dimensions": "8"}, "dimensions"),
        ({"input": "a", "dimensions": 10**9}, "dimensions"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ],
)
async def test_bad_embeddings_input_answers_400(extra: dict[str, Any], param: str) -> None:
    status, body = await embed({"model": "e", **extra})
    assert status == 400
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param
    assert body["error"]["type"] == "invalid_request_error"


async def test_the_openai_sdk_reads_the_mock_embeddings() -> None:
    async with sdk_client(MockProvider()) as client:
        # The SDK asks for base64 unless told otherwise, and decodes it.
        response = await client.embeddings.create(model="e", input=["x", "y"], dimensions=32)
        floats = await client.embeddings.create(
            model="e", input=["x", "y"], dimensions=32, encoding_format="float"
        )
    for decoded, as_float in zip(response.data, floats.data, strict=True):
        assert len(decoded.embedding) == 32
        # The same float32s, whichever way they travelled.
        assert struct.pack("<32f", *decoded.embedding) == struct.pack("<32f", *as_float.embedding)
