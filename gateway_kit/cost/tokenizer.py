"""Token counts of texts and chat prompts: exact for OpenAI's models, estimated for the rest.

    counter = TokenCounter(config)               # once, where the layer is built
    counter.count_prompt(payload, "gpt-4o")      # TokenCount(tokens=1234, exact=True, ...)

A model is counted exactly when it, its upstream name or its ``price_as`` is an OpenAI model
that tiktoken maps to one of the encodings gateway-kit ships (``encodings``), and tiktoken (the
``tokens`` extra) is installed: its text with the model's own tokenizer, offline, and a chat
prompt the way OpenAI's cookbook counts one (``MESSAGE_TOKENS`` per message, one more for a
name, ``REPLY_TOKENS`` for the reply's priming). Other models get ``estimate_prompt_tokens``,
flagged ``exact=False``. So is a prompt holding what OpenAI does not say how it renders: tool
definitions and calls, tool results, images other than low-detail ones (their size is not
known here), audio and files, a JSON schema response format, message fields other than
``role``, ``content`` and ``name``; its text is still counted by the tokenizer, and those parts
are framed as the estimate frames them.

Counting is on the request path, and a conversation is re-sent whole every turn, so the count
of every text of 64 characters or more is remembered (a bounded LRU keyed by the encoding, the
text's length and its hash, holding no text): a long conversation costs the encoding of its
new message and a lookup for each old one.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway_kit.config import GatewayConfig, ModelConfig
from gateway_kit.cost.encodings import encoding_for_model, load_encoding
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

__all__ = ["TokenCount", "TokenCounter", "count_prompt", "count_text"]

#: Shorter texts are encoded every time: about as fast as a lookup.
_MEMO_MIN_CHARS = 64
#: The message fields the cookbook counts; others with a value make the count inexact.
_PLAIN_FIELDS = frozenset({"role", "content", "name"})
#: The tokens of each role the API accepts, per encoding: looked up, not encoded, per message.
_ROLE_TOKENS: dict[tuple[str, str], int] = {}
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A number of tokens: ``exact`` when counted by the model's tokenizer, else estimated."""

    tokens: int
    exact: bool
    #: The encoding that counted the text (``o200k_base``); ``None`` when estimated by rule.
    encoding: str | None = None


class TokenCounter:
    """Counts tokens for a gateway's models; safe to share between threads and tasks.

    ``config`` maps public model names to what serves them: a model is counted with the
    encoding of its upstream names (every deployment's that tiktoken knows, and they must
    agree), else of its ``price_as``; a model served by an Anthropic provider is estimated.
    Names not configured are looked up as they are. ``memo_size`` bounds the remembered counts.
    """

    def __init__(self, config: GatewayConfig | None = None, *, memo_size: int = 16_384) -> None:
        if memo_size < 0:
            raise ValueError(f"memo_size must not be negative, got {memo_size}")
        self._models: dict[str, str | None] = {}
        if config is not None:
            anthropic = {p.name for p in config.providers if p.type == "anthropic"}
            for model in config.models:
                self._models[model.name] = _configured_encoding(model, anthropic)
        self._memo = _Memo(memo_size)

    def preload(self) -> None:
        """Load the encodings of the configured models now rather than on a first request
        (about half a second each); raises ``ValueError`` when a shipped file is damaged."""
        for name in sorted({name for name in self._models.values() if name is not None}):
            load_encoding(name)

    def encoding(self, model: str) -> str | None:
        """The encoding ``model`` is counted with, or ``None`` when it is estimated."""
        try:
            return self._models[model]
        except KeyError:
            return encoding_for_model(model)

    def count_text(self, text: str, model: str) -> TokenCount:
        """The tokens of ``text`` alone (no message framing)."""
        counting = self._counting(model)
        if counting is None:
            return TokenCount(estimate_text_tokens(text), exact=False)
        return TokenCount(counting.text(text), exact=True, encoding=counting.name)

    def count_prompt(self, payload: Mapping[str, Any], model: str) -> TokenCount:
        """The prompt tokens of a chat-completions (or embeddings) request body.

        Malformed fields are skipped, never raised on, as ``estimate_prompt_tokens`` does.
        """
        counting = self._counting(model)
        if counting is None:
            return TokenCount(estimate_prompt_tokens(payload), exact=False)
        tokens = counting.request(payload)
        return TokenCount(tokens, exact=counting.exact, encoding=counting.name)

    def _counting(self, model: str) -> _Counting | None:
        name = self.encoding(model)
        if name is None:
            return None
        try:
            encoding = load_encoding(name)
        except Exception:  # a damaged installation (logged once): estimate, never fail a request
            return None
        if encoding is None:
            return None
        return _Counting(name, encoding.encode_ordinary, self._memo)


def _configured_encoding(model: ModelConfig, anthropic: set[str]) -> str | None:
    if any(d.provider in anthropic for d in model.served_by):
        return None
    names = {encoding_for_model(d.upstream_model or model.name) for d in model.served_by}
    names.discard(None)
    if not names and model.price_as is not None:
        names.add(encoding_for_model(model.price_as))
        names.discard(None)
    return names.pop() if len(names) == 1 else None


class _Memo:
    """Token counts of long texts, least recently used forgotten first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._counts: OrderedDict[tuple[str, int, int], int] = OrderedDict()
        self._lock = threading.Lock()

    def tokens(self, name: str, text: str, encode: Callable[[str], list[int]]) -> int:
        # The length and the 64-bit (per-process keyed SipHash) hash stand for the text: a
        # collision needs about 2^32 texts of one length, and would only miscount one prompt.
        key = (name, len(text), hash(text))
        with self._lock:
            tokens = self._counts.get(key)
            if tokens is not None:
                self._counts.move_to_end(key)
                return tokens
        tokens = len(encode(text))  # outside the lock: this is the slow part
        with self._lock:
            self._counts[key] = tokens
            if len(self._counts) > self._size:
                self._counts.popitem(last=False)
        return tokens


class _Counting:
    """One count with one encoding; ``exact`` turns false at the first guessed part."""

    __slots__ = ("_encode", "_memo", "exact", "name")

    def __init__(self, name: str, encode: Callable[[str], list[int]], memo: _Memo) -> None:
        self.name = name
        self._encode = encode
        self._memo = memo
        self.exact = True

    def text(self, text: str) -> int:
        # encode_ordinary: special-token text in a prompt is ordinary text to the API too.
        if len(text) < _MEMO_MIN_CHARS:
            return len(self._encode(text))
        return self._memo.tokens(self.name, text, self._encode)

    def request(self, payload: Mapping[str, Any]) -> int:
        if "messages" not in payload and "input" in payload:
            return self._input(payload["input"])
        tokens = REPLY_TOKENS
        messages = payload.get("messages")
        if isinstance(messages, list):
            for message in messages:
                if isinstance(message, Mapping):
                    tokens += self._message(message)
        tools = payload.get("tools")
        functions = [
            tool.get("function")
            for tool in (tools if isinstance(tools, list) else ())
            if isinstance(tool, Mapping)
        ]
        legacy = payload.get("functions")
        if isinstance(legacy, list):
            functions += legacy
        defined = [function for function in functions if isinstance(function, Mapping)]
        if defined:
            self.exact = False
            tokens += TOOLS_TOKENS
            for function in defined:
                tokens += FUNCTION_TOKENS + self.text(_json(function))
        response_format = payload.get("response_format")
        if isinstance(response_format, Mapping):
            schema = response_format.get("json_schema")
            if isinstance(schema, Mapping):
                self.exact = False
                tokens += FUNCTION_TOKENS + self.text(_json(schema))
        return tokens

    def _input(self, value: Any) -> int:
        """An embeddings ``input``: text, texts, token ids, or lists of token ids."""
        if isinstance(value, str):
            return self.text(value)
        if not isinstance(value, list):
            return 0
        tokens = 0
        for item in value:
            if isinstance(item, str):
                tokens += self.text(item)
            elif isinstance(item, list):
                tokens += len(item)
            else:
                tokens += 1  # one token id
        return tokens

    def _message(self, message: Mapping[str, Any]) -> int:
        # The cookbook encodes every value of the message, the role's included.
        tokens = MESSAGE_TOKENS
        role = message.get("role")
        if isinstance(role, str):
            tokens += self._role(role)
        name = message.get("name")
        if isinstance(name, str):
            tokens += 1 + self.text(name)  # the cookbook's tokens_per_name
        content = message.get("content")
        if isinstance(content, str):
            tokens += self.text(content)
        elif isinstance(content, list):
            for part in content:
                tokens += self._part(part)
        if not message.keys() <= _PLAIN_FIELDS:
            tokens += self._tool_fields(message)
        return tokens

    def _role(self, role: str) -> int:
        if role not in _ROLES:
            return self.text(role)
        key = (self.name, role)
        tokens = _ROLE_TOKENS.get(key)
        if tokens is None:
            tokens = _ROLE_TOKENS[key] = len(self._encode(role))
        return tokens

    def _tool_fields(self, message: Mapping[str, Any]) -> int:
        tokens = 0
        for key, value in message.items():
            # Clients re-send assistant messages as the API gave them: nulls and [] are nothing.
            if key not in _PLAIN_FIELDS and value:
                self.exact = False
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str):
            tokens += self.text(call_id)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, Mapping):
                    tokens += self._call(call.get("function"))
        if "function_call" in message:
            tokens += self._call(message.get("function_call"))
        return tokens

    def _part(self, part: Any) -> int:
        if isinstance(part, str):
            return self.text(part)
        if not isinstance(part, Mapping):
            return 0
        kind = part.get("type")
        if kind == "text" or kind == "refusal":
            text = part.get(kind)
            return self.text(text) if isinstance(text, str) else 0
        if kind == "image_url":
            image = part.get("image_url")
            if isinstance(image, Mapping) and image.get("detail") == "low":
                return LOW_DETAIL_IMAGE_TOKENS  # whatever the image's size
            self.exact = False
            return IMAGE_TOKENS
        self.exact = False
        return self.text(_json(part))

    def _call(self, function: Any) -> int:
        if not isinstance(function, Mapping):
            return 0
        tokens = TOOL_CALL_TOKENS
        for key in ("name", "arguments"):
            value = function.get(key)
            if isinstance(value, str):
                tokens += self.text(value)
            elif value is not None:
                tokens += self.text(_json(value))
        return tokens


def _json(value: Any) -> str:
    # As the estimate serialises definitions and schemas (compact, non-ASCII kept).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


_COUNTER = TokenCounter()


def count_text(text: str, model: str) -> TokenCount:
    """The tokens of ``text`` for ``model`` (a name tiktoken knows: no configuration)."""
    return _COUNTER.count_text(text, model)


def count_prompt(payload: Mapping[str, Any], model: str) -> TokenCount:
    """The prompt tokens of a request body for ``model`` (as ``TokenCounter.count_prompt``)."""
    return _COUNTER.count_prompt(payload, model)
