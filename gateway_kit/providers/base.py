"""The ``Provider`` protocol: how the gateway talks to an upstream model service.

A provider takes an OpenAI-format chat request and answers in OpenAI format: a JSON body, or a
stream of server-sent events (``gateway_kit.sse.SSEEvent``, as ``SSEParser`` reads them).
Providers for other wire formats translate both ways.

Error contract (the router and the endpoint rely on it):

- 5xx, connection errors and timeouts before a response raise ``UpstreamUnavailableError``
  (with the upstream's ``Retry-After`` in seconds when it sent one);
- any other status is returned as a ``ChatResponse`` (4xx bodies pass through to the client;
  a 429 carries ``retry_after`` when the upstream said when to come back);
- a stream that breaks off, or ends without its end marker, raises ``UpstreamStreamError``
  from the ``events`` iterator.

A provider that also serves ``POST /v1/embeddings`` implements ``EmbeddingsProvider``: the same
contract, with a whole JSON body in OpenAI's embeddings format.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gateway_kit.cost.usage import Usage
from gateway_kit.sse import SSEEvent


@dataclass(slots=True)
class ChatCall:
    """One upstream call."""

    #: The chat request with ``model`` already set to the upstream model name.
    payload: dict[str, Any]
    #: The exact request bytes when ``payload`` is what the client sent (forwarded untouched);
    #: ``None`` when the provider must serialize ``payload``.
    body: bytes | None
    stream: bool
    request_id: str = ""


@dataclass(slots=True)
class ChatResponse:
    """An upstream answer: a whole body, or a stream of SSE events."""

    status: int
    #: Headers for the client (``content-type`` and safe provider metadata only).
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    events: AsyncIterator[SSEEvent] | None = None
    #: Releases the upstream connection of a stream; the endpoint awaits it exactly once.
    #: ``None`` when there is nothing left open (a whole body was read and released).
    close: Callable[[], Awaitable[None]] | None = None
    #: Seconds the upstream asked to wait before retrying (``Retry-After`` on a 429).
    retry_after: float | None = None
    #: For a stream: the usage the upstream has reported so far (Anthropic's ``message_start``
    #: gives the prompt's exact count and its cache reads and writes), read by metering when
    #: the stream ends before its usage (cut, or the client gone). ``None``: nothing early.
    usage_so_far: Callable[[], Usage | None] | None = None
    #: A whole JSON body as the provider parsed it (checking it is the API's answer), for
    #: readers of ``body`` to reuse rather than parse again; ``None`` when not parsed.
    document: Any = None

    @property
    def streaming(self) -> bool:
        return self.events is not None


@dataclass(slots=True)
class EmbeddingsCall:
    """One upstream embeddings call."""

    #: The embeddings request with ``model`` already set to the upstream model name.
    payload: dict[str, Any]
    #: The exact request bytes when ``payload`` is what the client sent; else ``None``.
    body: bytes | None = None
    request_id: str = ""


@runtime_checkable
class Provider(Protocol):
    """An upstream model service speaking (or translated to) the OpenAI chat format."""

    name: str

    async def chat(self, call: ChatCall) -> ChatResponse:
        """Send one chat-completions call. See the module docstring for the error contract."""
        ...

    async def aclose(self) -> None:
        """Release what the provider owns (not injected HTTP clients)."""
        ...


@runtime_checkable
class EmbeddingsProvider(Protocol):
    """A provider that also serves embeddings (OpenAI's ``POST /v1/embeddings`` format)."""

    name: str

    async def embeddings(self, call: EmbeddingsCall) -> ChatResponse:
        """Send one embeddings call; the answer is a whole JSON body (never a stream)."""
        ...


def asks_for_json(payload: Mapping[str, Any]) -> bool:
    """Whether a chat request asks for its answer's content as JSON (``response_format``
    ``json_object`` or ``json_schema``)."""
    response_format = payload.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") in (
        "json_object",
        "json_schema",
    )
