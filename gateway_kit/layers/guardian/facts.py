"""What Guardian's rules read off a chat request: per-message facts, memoised, and the request's
canonical digest.

A message's facts are its canonical digest (role, name, text and tool calls with what changes
from call to call taken out: ISO timestamps, UUIDs, long hex ids, epoch times, provider ids such
as ``call_...``, and runs of whitespace), the signature of the tool calls of an assistant turn,
the signature of a tool result that reads as an error, and its estimated tokens. An agent
re-sends its whole history on every turn, so the facts are kept in a bounded LRU keyed by a
fingerprint of the message (Python's string hashes, keyed per process, and the lengths): a
conversation of 200 messages costs the new messages' work, and a lookup for the others.

The request's digest covers its model, its parameters (``stream``, ``stream_options``,
``metadata``, ``seed`` and ``store`` left out: they change per call, not what is asked; the
end user's ``user`` kept) and its messages' digests; Guardian keys it with a secret
(``request_hash``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from gateway_kit.cost.tokens import estimate_message_tokens

__all__ = [
    "MessageFacts",
    "RequestFacts",
    "facts_of",
    "normalize_text",
    "ping_pong_cycles",
    "tail_run",
]

#: Fields of a request that change per call without changing what is asked (``user`` stays:
#: it tells an application's end users apart, and two of them asking alike is no loop).
VOLATILE_FIELDS = frozenset({"stream", "stream_options", "metadata", "seed", "store"})

_VOLATILE = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"  # ISO time
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # UUID
    r"|\b(?:call|chatcmpl|req|msg|toolu|run|thread|evt|resp|fc)[_-][A-Za-z0-9]{6,}\b"  # ids
    r"|\b[0-9a-fA-F]{16,}\b"  # long hex ids
    r"|\b1[5-9]\d{8}(?:\d{3})?\b"  # Unix times, in seconds or milliseconds
)
_SPACE = re.compile(r"\s+")
_ERROR = re.compile(r"\b(?:error|exception|traceback|failed|failure|not found|denied)\b", re.I)
_MEMO_SIZE = 50_000


def normalize_text(text: str) -> str:
    """``text`` with what changes from call to call replaced and whitespace collapsed."""
    return _SPACE.sub(" ", _VOLATILE.sub("~", text)).strip()


@dataclass(frozen=True, slots=True)
class MessageFacts:
    role: str
    #: The canonical message's digest (16 bytes).
    digest: bytes
    #: An assistant turn's tool calls (names and canonical arguments), or ``None``.
    tool_calls: bytes | None
    #: A tool result that reads as an error: its tool call's canonical text, or ``None``.
    tool_error: bytes | None
    #: Estimated tokens (``cost.tokens``), framing included.
    tokens: int


@dataclass(frozen=True, slots=True)
class RequestFacts:
    messages: tuple[MessageFacts, ...]
    #: Digest of the canonical request: model, parameters and every message.
    canonical: bytes
    #: The conversation's identity when the client names none: its first system and user
    #: messages.
    conversation: bytes

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.messages)


class _Memo:
    """Facts of messages seen recently, by fingerprint; shared by every request."""

    def __init__(self, size: int = _MEMO_SIZE) -> None:
        self._cache: LRUCache[tuple[int, int], MessageFacts] = LRUCache(size)
        self._lock = threading.Lock()

    def facts(self, message: Mapping[str, Any]) -> MessageFacts:
        key = _fingerprint(message)
        with self._lock:
            found = self._cache.get(key)
        if found is None:
            found = _message_facts(message)
            with self._lock:
                self._cache[key] = found
        return found


_MEMO = _Memo()


def facts_of(payload: Mapping[str, Any]) -> RequestFacts:
    """The facts of a chat request (validated: ``messages`` is a list of objects)."""
    messages = payload.get("messages")
    listed = tuple(
        _MEMO.facts(m)
        for m in (messages if isinstance(messages, list) else ())
        if isinstance(m, dict)
    )
    params = {k: v for k, v in payload.items() if k != "messages" and k not in VOLATILE_FIELDS}
    digest = hashlib.blake2b(digest_size=16)
    digest.update(_dump(params).encode())
    for message in listed:
        digest.update(message.digest)
    first_system = next((m.digest for m in listed if m.role in ("system", "developer")), b"")
    first_user = next((m.digest for m in listed if m.role == "user"), b"")
    conversation = hashlib.blake2b(first_system + first_user, digest_size=16).digest()
    return RequestFacts(listed, digest.digest(), conversation)


def _fingerprint(message: Mapping[str, Any]) -> tuple[int, int]:
    """A cheap identity of a message: the hash of its parts (strings hash once, in C) and its
    size; what is not a plain string or list of parts is hashed as its JSON."""
    size = 0
    parts: list[Any] = []
    for name in ("role", "name", "content", "tool_call_id", "tool_calls"):
        value = message.get(name)
        if isinstance(value, str):
            size += len(value)
            parts.append(value)
        elif value is None:
            parts.append(None)
        else:
            text = _dump(value)
            size += len(text)
            parts.append(text)
    return hash(tuple(parts)), size


def _message_facts(message: Mapping[str, Any]) -> MessageFacts:
    role = message.get("role")
    role = role if isinstance(role, str) else ""
    calls = _tool_calls(message.get("tool_calls"))
    text = normalize_text(_text_of(message.get("content")))
    name = message.get("name")
    canonical = _dump([role, name if isinstance(name, str) else None, text, calls])
    digest = hashlib.blake2b(canonical.encode(), digest_size=16).digest()
    tool_calls = None
    if role == "assistant" and calls:
        tool_calls = hashlib.blake2b(_dump(calls).encode(), digest_size=16).digest()
    tool_error = None
    if role == "tool" and _ERROR.search(text):
        tool_error = hashlib.blake2b(text.encode(), digest_size=16).digest()
    return MessageFacts(role, digest, tool_calls, tool_error, estimate_message_tokens(message))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    pieces.append(text)
                else:  # an image, audio, a file: what it is, by its JSON
                    pieces.append(_dump(part))
        return "\n".join(pieces)
    return ""


def _tool_calls(calls: Any) -> list[list[str]]:
    """Each call's function name and canonical arguments (ids left out), sorted."""
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        arguments = function.get("arguments")
        out.append([name if isinstance(name, str) else "", _canonical_arguments(arguments)])
    return sorted(out)


def _canonical_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return normalize_text(arguments)
        return normalize_text(_dump(parsed))
    return normalize_text(_dump(arguments))


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tail_run(signatures: Sequence[bytes | None]) -> int:
    """How many of the last items are the same (``None`` ends a run)."""
    if not signatures or signatures[-1] is None:
        return 0
    last, run = signatures[-1], 0
    for signature in reversed(signatures):
        if signature != last:
            break
        run += 1
    return run


def ping_pong_cycles(signatures: Sequence[bytes | None]) -> int:
    """How many A-B cycles (A different from B) the items end with."""
    if len(signatures) < 2:
        return 0
    a, b = signatures[-2], signatures[-1]
    if a is None or b is None or a == b:
        return 0
    pairs = 0
    for index in range(len(signatures) - 2, -1, -2):
        if signatures[index] == a and signatures[index + 1] == b:
            pairs += 1
        else:
            break
    return pairs
