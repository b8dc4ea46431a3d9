"""Real clients against fallback chains over real sockets: the ``openai`` SDK and LangChain's
``ChatOpenAI`` work unchanged when the first provider fails every call, streams and tool calls
included."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from gateway_kit import GatewayConfig, create_app
from gateway_kit.testing import run_server
from tests.fakes import OPEN

pytestmark = pytest.mark.slow

CONFIG = GatewayConfig.model_validate(
    {
        **{k: v.model_dump() for k, v in OPEN.items()},
        "providers": [
            {"name": "down", "type": "mock", "faults": {"error_rate": 1.0, "status": 503}},
            {"name": "refusing", "type": "mock", "faults": {"error_rate": 1.0, "status": 0}},
            {"name": "mock", "type": "mock"},
        ],
        "models": [
            {
                "name": "primary",
                "deployments": [{"provider": "down"}, {"provider": "refusing"}],
                "price_as": "gpt-5.1",
                "fallbacks": ["secondary"],
            },
            {"name": "secondary", "provider": "mock", "price_as": "gpt-5-mini"},
        ],
        "routing": {"backoff_s": 0.001, "max_backoff_s": 0.001},
    }
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with run_server(create_app(CONFIG)) as url:
        yield url


@pytest.fixture
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)


def test_the_openai_sdk_gets_one_clean_answer_from_the_fallback(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="primary", messages=[{"role": "user", "content": "hello"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == (
        "This is a mock reply from gateway-kit to: hello"
    )
    assert raw.headers["x-gateway-model"] == "secondary"
    assert raw.headers["x-gateway-provider"] == "mock"
    assert int(raw.headers["x-gateway-fallbacks"]) == 2


def test_the_openai_sdk_streams_from_the_fallback(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="primary",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "This is a mock reply from gateway-kit to: stream me"
    assert chunks[-1].usage is not None


def test_the_openai_sdk_calls_tools_through_the_fallback(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model="primary",
        messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "mock"}  # type: ignore[union-attr]
    second = client.chat.completions.create(
        model="primary",
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            first.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert "18 C and sunny" in (second.choices[0].message.content or "")


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"18 C in {city}"


def test_langchain_chat_openai_works_unchanged_against_the_chain(base_url: str) -> None:
    llm = ChatOpenAI(model="primary", base_url=f"{base_url}/v1", api_key="unused", max_retries=0)  # type: ignore[call-arg]
    reply = llm.invoke("hello from langchain")
    assert reply.content == "This is a mock reply from gateway-kit to: hello from langchain"
    assert reply.response_metadata["model_name"] == "secondary"

    streamed = "".join(str(piece.content) for piece in llm.stream("stream from langchain"))
    assert streamed == "This is a mock reply from gateway-kit to: stream from langchain"

    with_tools = llm.bind_tools([get_weather])
    question = HumanMessage("weather in Oslo?")
    asked = with_tools.invoke([question])
    assert asked.tool_calls[0]["name"] == "get_weather"  # type: ignore[attr-defined]
    result = ToolMessage("18 C in Oslo", tool_call_id=asked.tool_calls[0]["id"])  # type: ignore[attr-defined]
    answered = with_tools.invoke([question, asked, result])
    assert "18 C in Oslo" in str(answered.content)
