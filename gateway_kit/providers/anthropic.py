"""``AnthropicProvider``: Anthropic's Messages API behind the OpenAI chat-completions format.

Requests are translated to ``POST /v1/messages`` and answers back to ``chat.completion`` bodies
and ``chat.completion.chunk`` streams (``_anthropic_translate.py``), one event as it arrives,
never buffered whole. What the translation does:

- ``system`` and ``developer`` messages, wherever they stand, become the top-level ``system``;
  ``tool`` messages become ``tool_result`` blocks of a user turn, and consecutive messages of
  one role merge into one turn, since the Messages API wants the roles to alternate;
- images are base64 data URLs or http(s) URLs; a ``cache_control`` on a text or image part is
  passed on (the usual way to set Anthropic cache breakpoints through the OpenAI format);
- ``temperature`` is clamped to Anthropic's 0..1, ``stop`` becomes ``stop_sequences``, ``user``
  becomes ``metadata.user_id``, ``max_tokens`` defaults to ``default_max_tokens``. Anthropic
  has deprecated ``temperature`` and ``top_p`` (its SDK's v1 dropped them): older models honour
  them, newer ones answer a request carrying them with a 400, which reaches the client as is;
- ``response_format`` of type ``json_object`` or ``json_schema`` is a simplification: rather
  than Anthropic's structured outputs (``output_config.format``, which not every model has),
  an instruction to answer with JSON (quoting the schema) is appended to the system prompt.
  Nothing enforces it: the model usually complies;
- other OpenAI-only fields (``logprobs``, ``seed``, penalties...) are dropped, and
  ``stream_options`` is not sent (``include_usage`` makes the translated stream end with a
  usage chunk); what cannot be translated faithfully (``n`` > 1, tool call arguments that are not
  a JSON object, audio or file parts, non-function tools) is answered with a 400 in OpenAI's
  error shape, without calling Anthropic;
- thinking blocks are dropped from answers; usage counts cache reads and writes in
  ``prompt_tokens`` (``prompt_tokens_details.cached_tokens`` and ``cache_creation_tokens``).

Errors follow the ``Provider`` contract: 4xx bodies are rewritten in OpenAI's shape with their
status kept (a 429 carries ``retry_after``); 5xx, 529 (overloaded), connection errors and
timeouts raise ``UpstreamUnavailableError``; an ``error`` event, a broken connection or a stream
without ``message_stop`` raise ``UpstreamStreamError`` from the events iterator.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import httpx

from gateway_kit.cost.usage import Usage
from gateway_kit.exceptions import UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.providers._anthropic_translate import (
    UnsupportedRequestError,
    finish_reason,
    openai_error,
    openai_usage,
    to_chat_completion,
    to_messages_request,
)
from gateway_kit.providers._http import retry_after_seconds, send_upstream
from gateway_kit.providers.base import ChatCall, ChatResponse
from gateway_kit.sse import DONE, EventTooLarge, SSEEvent, SSEParser

_JSON = (b"content-type", b"application/json")
_SSE = (b"content-type", b"text/event-stream; charset=utf-8")
_MAX_ERROR_BODY = 64 * 1024


class AnthropicProvider:
    """Anthropic's Messages API, translated to and from OpenAI's chat format, over an injected
    ``httpx.AsyncClient``."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        base_url: str = "https://api.anthropic.com",
        api_key: str | None = None,
        name: str = "anthropic",
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | float | None = None,
        version: str = "2023-06-01",
        default_max_tokens: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if default_max_tokens < 1:
            raise ValueError("default_max_tokens must be at least 1")
        self.name = name
        self._client = client
        self._clock = clock
        self._default_max_tokens = default_max_tokens
        self._url = httpx.URL(base_url.rstrip("/") + "/v1/messages")
        # Merged once; `headers` may add `anthropic-beta` or override the version. Cookies are
        # never sent (a proxy must not share a cookie jar between its callers).
        merged = httpx.Headers(client.headers)
        merged.update(
            {"content-type": "application/json", "anthropic-version": version, **(headers or {})}
        )
        if api_key:
            merged["x-api-key"] = api_key
        self._headers = merged.raw
        timeout = timeout if timeout is not None else httpx.Timeout(600.0, connect=10.0)
        self._extensions = {"timeout": httpx.Timeout(timeout).as_dict()}

    async def aclose(self) -> None:
        # The client is injected: its owner closes it.
        return None

    async def chat(self, call: ChatCall) -> ChatResponse:
        # `call.body` is the client's OpenAI request: it is never what Anthropic gets.
        try:
            translated = to_messages_request(
                call.payload, stream=call.stream, default_max_tokens=self._default_max_tokens
            )
        except UnsupportedRequestError as exc:
            return ChatResponse(400, [_JSON], body=exc.body())
        request = httpx.Request(
            "POST",
            self._url,
            content=json.dumps(translated, separators=(",", ":"), ensure_ascii=False).encode(),
            headers=self._headers,
            extensions=self._extensions,
        )
        response = await send_upstream(self._client, request, self.name)
        status = response.status_code
        forwarded: list[tuple[bytes, bytes]] = []
        retry_after = None
        is_stream = False
        # The raw header list: httpx decodes every header on each `.headers` lookup.
        for name, value in response.headers.raw:
            lowered = name.lower()
            if lowered == b"request-id":
                forwarded.append((b"x-upstream-request-id", value))
            elif lowered == b"retry-after":
                retry_after = retry_after_seconds(value, self._clock())
            elif lowered == b"content-type":
                is_stream = value.startswith(b"text/event-stream")
        if status >= 500:  # 529 is Anthropic's "overloaded"
            await response.aclose()
            raise UpstreamUnavailableError(
                f"Upstream provider '{self.name}' answered {status}.",
                provider=self.name,
                status=status,
                retry_after=retry_after,
            )
        created = int(self._clock())
        if call.stream and is_stream and status == 200:
            include_usage = _include_usage(call.payload)
            translator = _StreamTranslator(created=created, include_usage=include_usage)
            events = self._events(response, translator)

            async def close() -> None:
                await events.aclose()
                await response.aclose()

            return ChatResponse(
                200,
                [_SSE, *forwarded],
                events=events,
                close=close,
                usage_so_far=translator.usage_so_far,
            )

        try:
            content = await response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamUnavailableError(
                f"Upstream provider '{self.name}' broke off its response.",
                provider=self.name,
                status=status,
            ) from exc
        finally:
            await response.aclose()
        if status >= 400:
            return ChatResponse(
                status,
                [_JSON, *forwarded],
                body=openai_error(status, content[:_MAX_ERROR_BODY]),
                retry_after=retry_after if status == 429 else None,
            )
        try:
            completion = to_chat_completion(json.loads(content), created=created)
        except ValueError as exc:  # not JSON, or not a Messages response
            raise UpstreamUnavailableError(
                f"Upstream provider '{self.name}' answered {status} without a Messages body.",
                provider=self.name,
                status=status,
            ) from exc
        body = json.dumps(completion, separators=(",", ":"), ensure_ascii=False).encode()
        return ChatResponse(status, [_JSON, *forwarded], body=body)

    async def _events(
        self, response: httpx.Response, translator: _StreamTranslator
    ) -> AsyncGenerator[SSEEvent, None]:
        parser = SSEParser()
        try:
            async for chunk in response.aiter_bytes():
                for event in parser.feed(chunk):
                    for translated in translator.feed(event):
                        yield translated
        except httpx.HTTPError as exc:
            raise UpstreamStreamError(
                f"The stream from '{self.name}' broke off ({type(exc).__name__}).",
                provider=self.name,
                status=200,
            ) from exc
        except _StreamFailure as exc:
            raise UpstreamStreamError(
                f"The stream from '{self.name}' failed: {exc}", provider=self.name, status=200
            ) from exc
        except EventTooLarge as exc:
            raise UpstreamStreamError(
                f"The stream from '{self.name}' sent {exc}.", provider=self.name, status=200
            ) from None
        if not translator.finished:
            raise UpstreamStreamError(
                f"The stream from '{self.name}' ended before message_stop.",
                provider=self.name,
                status=200,
            )


class _StreamFailure(Exception):
    """An ``error`` event, or a stream that cannot be translated."""


class _StreamTranslator:
    """Turns Messages stream events into ``chat.completion.chunk`` events, event by event.

    After ``message_stop`` it has sent ``data: [DONE]`` and ignores whatever follows.
    """

    def __init__(self, *, created: int, include_usage: bool) -> None:
        self.created = created
        self.include_usage = include_usage
        self.finished = False
        self._id = ""
        self._model: Any = None
        self._usage: dict[str, Any] = {}
        #: Content block index -> OpenAI tool call index (tool_use blocks counted from 0).
        self._tools: dict[int, int] = {}
        #: The tool_use blocks whose input has streamed some JSON.
        self._argued: set[int] = set()
        self._finish_sent = False

    def feed(self, event: SSEEvent) -> list[SSEEvent]:
        if event.data is None or self.finished:
            return []  # comments, and anything after message_stop
        try:
            data = event.json()
        except ValueError:
            raise _StreamFailure("an event is not JSON") from None
        if not isinstance(data, dict):
            raise _StreamFailure("an event is not a JSON object")
        return [SSEEvent.of_json(chunk) for chunk in self._chunks(data)] + (
            [SSEEvent(DONE)] if self.finished else []
        )

    def _chunks(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if kind == "error":
            error = event.get("error")
            error = error if isinstance(error, dict) else {}
            raise _StreamFailure(f"{error.get('type', 'error')}: {error.get('message', '')}")
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, dict):
                raise _StreamFailure("message_start without a message")
            self._id = "chatcmpl-" + str(message.get("id", ""))
            self._model = message.get("model")
            self._update_usage(message.get("usage"))
            return [self._chunk({"role": "assistant", "content": ""})]
        if not self._id:
            raise _StreamFailure(f"{kind} before message_start")
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_delta":
            return self._block_delta(event)
        if kind == "message_delta":
            self._update_usage(event.get("usage"))
            delta = event.get("delta")
            return self._finish(delta.get("stop_reason") if isinstance(delta, dict) else None)
        if kind == "message_stop":
            chunks = [] if self._finish_sent else self._finish(None)
            self.finished = True
            usage = openai_usage(self._usage)
            if self.include_usage and usage is not None:
                chunks.append({**self._chunk({}), "choices": [], "usage": usage})
            return chunks
        if kind == "content_block_stop":
            return self._block_stop(event)
        # ping, and event types added after this was written.
        return []

    def _block_stop(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """A tool_use block whose input streamed nothing (a tool without arguments: Anthropic
        sends one empty ``partial_json``) gets ``{}``, as its JSON answer's arguments are:
        ``""`` is no JSON, and agents parse what they are given."""
        index = event.get("index")
        if not isinstance(index, int) or index not in self._tools or index in self._argued:
            return []
        self._argued.add(index)
        call = {"index": self._tools[index], "function": {"arguments": "{}"}}
        return [self._chunk({"tool_calls": [call]})]

    def _block_start(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        block = event.get("content_block")
        index = event.get("index")
        if not isinstance(block, dict):
            return []
        if block.get("type") == "text" and block.get("text"):
            return [self._chunk({"content": block["text"]})]
        if block.get("type") == "tool_use" and isinstance(index, int):
            self._tools[index] = position = len(self._tools)
            call = {
                "index": position,
                "id": block.get("id"),
                "type": "function",
                "function": {"name": block.get("name"), "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        return []  # thinking blocks and server tools have no OpenAI equivalent

    def _block_delta(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        delta = event.get("delta")
        index = event.get("index")
        if not isinstance(delta, dict):
            return []
        if delta.get("type") == "text_delta" and delta.get("text"):
            return [self._chunk({"content": delta["text"]})]
        if (
            delta.get("type") == "input_json_delta"
            and delta.get("partial_json")
            and isinstance(index, int)
            and index in self._tools
        ):
            self._argued.add(index)
            arguments = {"arguments": delta["partial_json"]}
            return [
                self._chunk({"tool_calls": [{"index": self._tools[index], "function": arguments}]})
            ]
        return []  # thinking_delta, signature_delta, citations_delta

    def _finish(self, stop_reason: Any) -> list[dict[str, Any]]:
        self._finish_sent = True
        return [self._chunk({}, finish_reason(stop_reason))]

    def usage_so_far(self) -> Usage | None:
        """What the stream has reported of its usage: from ``message_start`` on, the prompt's
        exact count and its cache reads and writes; the output as counted so far (the whole
        of it only from ``message_delta``)."""
        if "input_tokens" not in self._usage:
            return None
        return Usage.from_anthropic({"output_tokens": 0, **self._usage})

    def _update_usage(self, usage: Any) -> None:
        # message_start carries the input and cache counts, message_delta the cumulative
        # output count (and, in newer API versions, cumulative input counts too).
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }


def _include_usage(payload: Mapping[str, object]) -> bool:
    options = payload.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
