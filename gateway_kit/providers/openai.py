"""``OpenAIProvider``: any OpenAI-compatible HTTP API (OpenAI, Azure-style, Groq, vLLM, Ollama...).

Bodies and events are forwarded as received: tool calls and fields we do not know pass through
untouched, and a stream is relayed event by event as it arrives, never buffered whole.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from gateway_kit.exceptions import UpstreamStreamError, UpstreamUnavailableError
from gateway_kit.providers._http import retry_after_seconds, send_upstream
from gateway_kit.providers.base import ChatCall, ChatResponse, EmbeddingsCall
from gateway_kit.sse import EventTooLarge, SSEEvent, SSEParser

#: Upstream response headers worth handing to the client, renamed where ours would clash.
_FORWARDED_HEADERS = {
    b"content-type": b"content-type",
    b"x-request-id": b"x-upstream-request-id",
    b"openai-processing-ms": b"openai-processing-ms",
}
_MAX_ERROR_BODY = 64 * 1024


class OpenAIProvider:
    """An OpenAI-compatible chat-completions API over an injected ``httpx.AsyncClient``."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        name: str = "openai",
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | float | None = None,
    ) -> None:
        self.name = name
        self._client = client
        # Parsed once: httpx would parse a string URL on every request.
        self._url = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        self._embeddings_url = httpx.URL(base_url.rstrip("/") + "/embeddings")
        # The client's default headers merged with ours once, not on every request; cookies
        # are never sent (a proxy must not share a cookie jar between its callers).
        merged = httpx.Headers(client.headers)
        merged.update({"content-type": "application/json", **(headers or {})})
        if api_key:
            merged["authorization"] = f"Bearer {api_key}"
        self._headers = merged.raw
        timeout = timeout if timeout is not None else httpx.Timeout(600.0, connect=10.0)
        self._extensions = {"timeout": httpx.Timeout(timeout).as_dict()}

    async def aclose(self) -> None:
        # The client is injected: its owner closes it.
        return None

    async def chat(self, call: ChatCall) -> ChatResponse:
        response, forwarded, is_stream = await self._send(self._url, call.payload, call.body, call)
        if not (call.stream and is_stream and response.status_code == 200):
            return await self._whole(response, forwarded, "choices")
        events = self._events(response)

        async def close() -> None:
            await events.aclose()
            await response.aclose()

        return ChatResponse(200, forwarded, events=events, close=close)

    async def embeddings(self, call: EmbeddingsCall) -> ChatResponse:
        url = self._embeddings_url
        response, forwarded, _ = await self._send(url, call.payload, call.body, call)
        return await self._whole(response, forwarded, "data")

    async def _send(
        self,
        url: httpx.URL,
        payload: dict[str, object],
        body: bytes | None,
        call: ChatCall | EmbeddingsCall,
    ) -> tuple[httpx.Response, list[tuple[bytes, bytes]], bool]:
        """Send one call; the response (headers read, body not), the headers for the client,
        and whether it is an event stream. Raises for 5xx, timeouts and connection errors."""
        if body is None:
            body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        headers = self._headers
        if call.request_id:
            headers = [*headers, (b"x-request-id", call.request_id.encode())]
        request = httpx.Request(
            "POST", url, content=body, headers=headers, extensions=self._extensions
        )
        response = await send_upstream(self._client, request, self.name)
        # The raw header list: httpx decodes every header on each `.headers` lookup.
        forwarded = []
        is_stream = False
        for name, value in response.headers.raw:
            renamed = _FORWARDED_HEADERS.get(name.lower())
            if renamed is not None:
                forwarded.append((renamed, value))
                if renamed == b"content-type":
                    is_stream = value.startswith(b"text/event-stream")
        if response.status_code >= 500:
            await response.aclose()
            raise UpstreamUnavailableError(
                f"Upstream provider '{self.name}' answered {response.status_code}.",
                provider=self.name,
                status=response.status_code,
                retry_after=retry_after(response.headers),
            )
        return response, forwarded, is_stream

    async def _whole(
        self, response: httpx.Response, forwarded: list[tuple[bytes, bytes]], answer: str
    ) -> ChatResponse:
        """Read and release a response that is not streamed to the client. A success must be
        the API's JSON: an object whose ``answer`` (``choices``, ``data``) is a list."""
        try:
            content = await response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamUnavailableError(
                f"Upstream provider '{self.name}' broke off its response.",
                provider=self.name,
                status=response.status_code,
            ) from exc
        finally:
            await response.aclose()
        status = response.status_code
        document: Any = None
        if status < 400:
            # A proxy's HTML page, a body cut short, `{}`: not the API's answer, whatever the
            # status. Parsed here once; the parsed body travels on with the response.
            try:
                document = json.loads(content)
            except ValueError:
                problem = "without a JSON body"
            else:
                if isinstance(document, dict) and isinstance(document.get(answer), list):
                    problem = ""
                else:
                    problem = f"with JSON that has no '{answer}' list"
            if problem:
                raise UpstreamUnavailableError(
                    f"Upstream provider '{self.name}' answered {status} {problem}.",
                    provider=self.name,
                )
        else:
            content = content[:_MAX_ERROR_BODY]
        wait = retry_after(response.headers) if status in (408, 429) else None
        return ChatResponse(status, forwarded, body=content, retry_after=wait, document=document)

    async def _events(self, response: httpx.Response) -> AsyncGenerator[SSEEvent, None]:
        parser = SSEParser()
        done = False
        try:
            async for chunk in response.aiter_bytes():
                for event in parser.feed(chunk):
                    # OpenAI ends every complete stream with `data: [DONE]`.
                    done = done or event.done
                    yield event
        except httpx.HTTPError as exc:
            raise UpstreamStreamError(
                f"The stream from '{self.name}' broke off ({type(exc).__name__}).",
                provider=self.name,
                status=200,
            ) from exc
        except EventTooLarge as exc:
            raise UpstreamStreamError(
                f"The stream from '{self.name}' sent {exc}.", provider=self.name, status=200
            ) from None
        if not done:
            raise UpstreamStreamError(
                f"The stream from '{self.name}' ended before its end marker.",
                provider=self.name,
                status=200,
            )


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds an upstream asked to wait: ``retry-after-ms`` (OpenAI's, Azure's) or
    ``Retry-After`` in seconds or as an HTTP date; ``None`` when absent or unreadable."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        found = retry_after_seconds(milliseconds, time.time(), milliseconds=True)
        if found is not None:
            return found
    value = headers.get("retry-after")
    return None if value is None else retry_after_seconds(value, time.time())
