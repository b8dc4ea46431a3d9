"""``CachedAnswer``: one complete answer as the cache keeps it, from a JSON body or a stream,
and served again as either.

An answer is kept only when it is whole: one choice whose ``finish_reason`` is ``stop`` or
``tool_calls``, with its usage. The same answer serves a JSON request and a streaming one (the
key leaves ``stream`` out): ``body`` writes a ``chat.completion``, ``events`` the chunks a live
stream would have sent (the role, a reasoning model's thinking (``reasoning_content`` or
``reasoning``) and then the content in pieces, each tool call's name then its arguments, the
finish, the usage chunk only when the client asked for it with
``stream_options.include_usage``, then ``[DONE]``). A stream whose deltas carry anything else
that is not text (a provider's own structure) is not kept: it could not be given back. The
provider's own top-level fields (Perplexity's ``citations``) are kept and given back, in the
body and in every chunk. Each serving gets an id and a time of its own, as a live answer
would.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway_kit.cost.usage import Usage
from gateway_kit.sse import DONE, SSEEvent

__all__ = ["STORED_FINISHES", "CachedAnswer", "StreamAssembler"]

#: The finishes of a whole answer: anything else (``length``, ``content_filter``) is not kept.
STORED_FINISHES = frozenset({"stop", "tool_calls"})
#: Characters of content per replayed chunk.
_PIECE = 256
#: The message's fields a stream's deltas spell out one by one; any other text field (a
#: reasoning model's ``reasoning_content`` or ``reasoning``) is kept and replayed too.
_DELTA_FIELDS = frozenset({"role", "content", "refusal", "tool_calls"})
#: A body's or a chunk's own fields; any other top-level field is a provider's (Perplexity's
#: ``citations`` and ``search_results``, ``service_tier``, OpenRouter's ``provider``): kept and
#: given back. OpenAI's ``obfuscation`` pads each chunk at random: not the answer's.
_OWN_FIELDS = frozenset(
    {"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "obfuscation"}
)


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """The model that answered, its message (``role``, ``content``, ``tool_calls``,
    ``refusal``), the finish, the usage (as priced, and as the upstream wrote it when it was
    seen: served again as it was), the size it takes in the store, the provider's own
    top-level fields (``extra``), and when it was kept (Unix seconds; ``None`` until then, and
    for answers kept before answers said when)."""

    model: str
    message: dict[str, Any]
    finish_reason: str
    usage: Usage
    system_fingerprint: str | None = None
    size: int = 0
    reported_usage: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None
    stored_at: float | None = None

    @classmethod
    def of_body(cls, document: Any, usage: Usage) -> CachedAnswer | None:
        """From a ``chat.completion`` body, when it is a whole answer."""
        if not isinstance(document, dict):
            return None
        choices = document.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            return None
        choice = choices[0]
        message = choice.get("message")
        finish = choice.get("finish_reason")
        if not isinstance(message, dict) or finish not in STORED_FINISHES:
            return None
        model = document.get("model")
        fingerprint = document.get("system_fingerprint")
        reported = document.get("usage")
        return cls.made(
            model if isinstance(model, str) else "",
            message,
            finish,
            usage,
            fingerprint if isinstance(fingerprint, str) else None,
            reported if isinstance(reported, dict) else None,
            {k: v for k, v in document.items() if k not in _OWN_FIELDS} or None,
        )

    @classmethod
    def made(
        cls,
        model: str,
        message: dict[str, Any],
        finish: str,
        usage: Usage,
        fingerprint: str | None = None,
        reported_usage: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> CachedAnswer:
        kept = {key: value for key, value in message.items() if value is not None}
        kept.setdefault("role", "assistant")
        size = len(json.dumps([kept, reported_usage, extra], ensure_ascii=False).encode()) + 200
        return cls(model, kept, finish, usage, fingerprint, size, reported_usage, extra)

    def to_bytes(self) -> bytes:
        """The answer as a storage value (``of_bytes`` reads it back)."""
        usage = self.usage
        record = {
            "model": self.model,
            "message": self.message,
            "finish": self.finish_reason,
            "usage": [
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                usage.reasoning_tokens,
                usage.estimated,
            ],
            "fingerprint": self.system_fingerprint,
            "reported": self.reported_usage,
            "extra": self.extra,
            "stored_at": self.stored_at,
        }
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def of_bytes(cls, raw: bytes) -> CachedAnswer:
        record = json.loads(raw)
        counts = record["usage"]
        usage = Usage(
            counts[0], counts[1], counts[2], counts[3], counts[4], estimated=bool(counts[5])
        )
        answer = cls.made(
            record["model"],
            record["message"],
            record["finish"],
            usage,
            record.get("fingerprint"),
            record.get("reported"),
            record.get("extra"),
        )
        stored_at = record.get("stored_at")
        return answer if stored_at is None else replace(answer, stored_at=float(stored_at))

    def usage_json(self) -> dict[str, Any]:
        """The usage as the upstream reported it, else as OpenAI would from the counts."""
        return self.reported_usage if self.reported_usage is not None else usage_json(self.usage)

    def body(self) -> bytes:
        """A ``chat.completion`` body of this answer, with an id and a time of its own."""
        message = {"role": "assistant", "content": None, "refusal": None, **self.message}
        document: dict[str, Any] = {
            "id": _id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": self.usage_json(),
        }
        if self.system_fingerprint is not None:
            document["system_fingerprint"] = self.system_fingerprint
        if self.extra:
            document.update(self.extra)
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()

    def events(self, *, include_usage: bool) -> list[SSEEvent]:
        """The stream of this answer, ``[DONE]`` included."""
        ident, created = _id(), int(time.time())
        head: dict[str, Any] = {"id": ident, "object": "chat.completion.chunk", "created": created}
        head["model"] = self.model
        if self.system_fingerprint is not None:
            head["system_fingerprint"] = self.system_fingerprint
        if self.extra:  # in every chunk, as Perplexity sends its citations
            head.update(self.extra)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> SSEEvent:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return SSEEvent.of_json({**head, "choices": [choice]})

        message = self.message
        # As upstreams open it: content "" for a text answer, null for tool calls or a refusal
        # (a replay opening with "" gave the SDK's accumulation '' where the live one had None).
        text = "" if isinstance(message.get("content"), str) else None
        events = [chunk({"role": "assistant", "content": text})]
        others = [
            (k, v) for k, v in message.items() if k not in _DELTA_FIELDS and v not in ([], {})
        ]
        for field, text in others:  # a reasoning model's thinking comes before its answer
            if isinstance(text, str):
                events += [
                    chunk({field: text[at : at + _PIECE]}) for at in range(0, len(text), _PIECE)
                ]
        content = message.get("content")
        if isinstance(content, str):
            events += [
                chunk({"content": content[at : at + _PIECE]})
                for at in range(0, len(content), _PIECE)
            ]
        refusal = message.get("refusal")
        if isinstance(refusal, str):
            events.append(chunk({"refusal": refusal}))
        for index, call in enumerate(message.get("tool_calls") or ()):
            function = call.get("function") or {}
            opening = {
                "index": index,
                "id": call.get("id"),
                "type": call.get("type", "function"),
                "function": {"name": function.get("name"), "arguments": ""},
            }
            events.append(chunk({"tool_calls": [opening]}))
            arguments = function.get("arguments") or ""
            for at in range(0, len(arguments), _PIECE):
                piece = {"index": index, "function": {"arguments": arguments[at : at + _PIECE]}}
                events.append(chunk({"tool_calls": [piece]}))
        for field, value in others:  # kept from a JSON answer: given as it came
            if not isinstance(value, str):
                events.append(chunk({field: value}))
        events.append(chunk({}, self.finish_reason))
        if include_usage:
            events.append(SSEEvent.of_json({**head, "choices": [], "usage": self.usage_json()}))
        events.append(SSEEvent(DONE))
        return events


class StreamAssembler:
    """Puts a streamed answer's chunks back together into the message they spell out."""

    __slots__ = (
        "_calls",
        "_content",
        "_refusal",
        "_texts",
        "broken",
        "extra",
        "fingerprint",
        "finish",
        "model",
        "reported_usage",
    )

    def __init__(self) -> None:
        self._content: list[str] = []
        self._refusal: list[str] = []
        #: The other text a delta carries, by field: a reasoning model's thinking
        #: (``reasoning_content``, ``reasoning``), in pieces.
        self._texts: dict[str, list[str]] = {}
        #: Tool calls by index: id, type, name, argument pieces.
        self._calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.model = ""
        self.fingerprint: str | None = None
        #: The usage chunk's ``usage``, when it passed (the client asked for it).
        self.reported_usage: dict[str, Any] | None = None
        #: The provider's own top-level fields, as the latest chunk had them.
        self.extra: dict[str, Any] = {}
        #: Set when the stream is not one answer (several choices, an error, a bad chunk).
        self.broken = False

    def add(self, chunk: Any) -> None:
        if self.broken:
            return
        if not isinstance(chunk, dict):
            self.broken = True
            return
        if "error" in chunk:
            self.broken = True
            return
        model = chunk.get("model")
        if isinstance(model, str) and model:
            self.model = model
        fingerprint = chunk.get("system_fingerprint")
        if isinstance(fingerprint, str):
            self.fingerprint = fingerprint
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.reported_usage = usage
        for field, value in chunk.items():
            if field not in _OWN_FIELDS:
                self.extra[field] = value
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                self.broken = True
                return
            self._choice(choice)

    def _choice(self, choice: Mapping[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str):
                self._content.append(content)
            refusal = delta.get("refusal")
            if isinstance(refusal, str):
                self._refusal.append(refusal)
            for field, value in delta.items():
                if field in _DELTA_FIELDS or value is None or value == [] or value == {}:
                    continue
                if not isinstance(value, str):
                    # A provider's own structure (citations, say): it could not be given back
                    # as it came, so the answer is not kept rather than served without it.
                    self.broken = True
                    return
                self._texts.setdefault(field, []).append(value)
            for call in delta.get("tool_calls") or ():
                if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
                    self.broken = True
                    return
                kept = self._calls.setdefault(call.get("index", 0), {"arguments": []})
                for field in ("id", "type"):
                    if isinstance(call.get(field), str):
                        kept[field] = call[field]
                function = call.get("function")
                if isinstance(function, dict):
                    if isinstance(function.get("name"), str):
                        kept["name"] = kept.get("name", "") + function["name"]
                    if isinstance(function.get("arguments"), str):
                        kept["arguments"].append(function["arguments"])
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self.finish = finish

    def answer(self, usage: Usage) -> CachedAnswer | None:
        """The whole answer, or ``None`` when it is not one to keep."""
        if self.broken or self.finish not in STORED_FINISHES:
            return None
        assert self.finish is not None
        message: dict[str, Any] = {"role": "assistant"}
        for field, pieces in self._texts.items():
            message[field] = "".join(pieces)
        if self._content:
            message["content"] = "".join(self._content)
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id"),
                    "type": call.get("type", "function"),
                    "function": {
                        "name": call.get("name", ""),
                        "arguments": "".join(call["arguments"]),
                    },
                }
                for _, call in sorted(self._calls.items())
            ]
        return CachedAnswer.made(
            self.model,
            message,
            self.finish,
            usage,
            self.fingerprint,
            self.reported_usage,
            self.extra or None,
        )


def usage_json(usage: Usage) -> dict[str, Any]:
    """``usage`` as OpenAI reports it."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def _id() -> str:
    return "chatcmpl-" + os.urandom(12).hex()
