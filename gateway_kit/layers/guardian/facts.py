"""What Guardian's rules read off a chat request, in one pass over its messages: per-message
facts, remembered (``memo``), and the request's canonical digest.

A message's facts are its canonical digest (role, name, text and tool calls; in a prompt and in
tool-call arguments, what changes from call to call is taken out: dates and times, UUIDs, long
hex ids, Unix times, provider ids such as ``call_...``, and runs of whitespace), the signature
of the tool calls of an assistant turn, the signature of a tool result that reads as an error
(read without its stamps), and its estimated tokens. An agent re-sends its whole history on
every turn, so a conversation of 200 messages costs the new messages' work and a comparison of
the others with the last request's.

The request's digest covers its messages' digests, its model and its parameters (``stream``,
``stream_options``, ``metadata``, ``seed`` and ``store`` left out: they change per call, not
what is asked; the end user's ``user`` kept); Guardian keys it with a secret
(``request_hash``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter
from typing import Any

from gateway_kit.cost.tokens import estimate_message_tokens
from gateway_kit.layers.guardian.memo import MessageMemo, Prefixes

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

# Matched inside a word that holds a digit (``normalize_text`` finds those first: most of a
# text is never looked at). A stamp or an id without a single digit is rare enough to keep.
_VOLATILE = re.compile(
    r"(?<![0-9])(?:"  # not the tail of a longer number
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"  # date
    r"|\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"  # a time of day
    r"|1[5-9]\d{8}(?:\d{3})?(?![0-9])"  # Unix times, in seconds or milliseconds
    r")"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # UUID
    r"|(?:call|chatcmpl|req|msg|toolu|run|thread|evt|resp|fc)[_-][A-Za-z0-9]{6,}"  # ids
    r"|[0-9a-fA-F]{16,}"  # long hex ids
)
_DIGIT = re.compile(r"[0-9]")
_ERROR = re.compile(r"\b(?:error|exception|traceback|failed|failure|not found|denied)\b", re.I)
_MEMO_SIZE = 50_000
#: How much of a tool's result is searched for an error.
_ERROR_WINDOW = 400


def normalize_text(text: str) -> str:
    """``text`` with what changes from call to call replaced (dates and times, UUIDs, ids,
    Unix times) and whitespace collapsed."""
    text = " ".join(text.split())
    search, found = _DIGIT.search, _DIGIT.search(text)
    if found is None:
        return text
    pieces: list[str] = []
    done = 0
    while found is not None:
        at = found.start()
        start, end = text.rfind(" ", 0, at) + 1, text.find(" ", at)
        if end < 0:
            end = len(text)
        if end - start >= 4:
            word = text[start:end]
            replaced = _VOLATILE.sub("~", word)
            if replaced != word:
                pieces += (text[done:start], replaced)
                done = end
        found = search(text, end)
    pieces.append(text[done:])
    return "".join(pieces)


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
    """What the rules read of one request, worked out in one pass over its messages."""

    messages: tuple[MessageFacts, ...]
    #: Digest of the canonical request: model, parameters and every message.
    canonical: bytes
    #: The conversation's identity when the client names none: its first system and user
    #: messages.
    conversation: bytes
    #: Estimated tokens of every message, and of those up to the last user message.
    tokens: int
    tokens_at_input: int
    #: Assistant turns after the last user message.
    turns_since_input: int
    #: The assistant turns' tool-call signatures, and the tool results' error signatures.
    tool_turns: tuple[bytes | None, ...]
    tool_results: tuple[bytes | None, ...]


@dataclass(frozen=True, slots=True)
class _Known:
    """What ``Prefixes`` keeps of a conversation's last request besides its messages: their
    facts, and its parameters with their canonical JSON (an agent's tools, the same on every
    turn, are compared with the last request's rather than encoded again)."""

    listed: list[MessageFacts]
    params: dict[str, Any]
    params_dump: bytes


_MEMO: MessageMemo[tuple[int, int], MessageFacts] = MessageMemo(_MEMO_SIZE)
#: At most 256 conversations, and about 4 million tokens of messages (some 16 MB of text).
_PREFIXES: Prefixes[_Known] = Prefixes(conversations=256, weight=4_000_000)
#: Conversations shorter than this are only worked out message by message.
_PREFIX_FROM = 16


def facts_of(payload: Mapping[str, Any]) -> RequestFacts:
    """The facts of a chat request (validated: ``messages`` is a list of objects)."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        messages = []
    head = _head(messages) if len(messages) >= _PREFIX_FROM else None
    same, known = (0, None) if head is None else _PREFIXES.find(head, messages)
    listed = known.listed[:same] if known is not None else []
    memo = _MEMO
    for message in messages[same:] if same else messages:
        if not isinstance(message, dict):
            listed.append(_NOT_A_MESSAGE)  # one fact per message: a prefix is counted in both
            continue
        # The message's fingerprint: the hash of its parts (strings hash in C, and a string
        # object once; a list of content parts is hashed as its JSON) and its size. Inline:
        # this loop runs for every new message of every request.
        get = message.get
        content, calls = get("content"), get("tool_calls")
        if content.__class__ is not str and content is not None:
            content = _dump(content)
        if calls is not None:
            calls = _calls_fingerprint(calls)
        key = (
            hash((get("role"), get("name"), content, get("tool_call_id"), calls)),
            len(content) if content is not None else 0,
        )
        facts = memo.get(key)
        if facts is None:
            facts = _message_facts(message)
            memo.remember(key, facts)
        listed.append(facts)
    params = {k: v for k, v in payload.items() if k != "messages" and k not in VOLATILE_FIELDS}
    if known is not None and params == known.params:
        params_dump = known.params_dump
    else:
        params_dump = _dump(params).encode()
    request = _summary(listed, params_dump)
    if head is not None:
        _PREFIXES.remember(head, messages, _Known(listed, params, params_dump), request.tokens)
    return request


_NOT_A_MESSAGE = MessageFacts("", hashlib.blake2b(b"", digest_size=16).digest(), None, None, 0)
_ROLE, _TOKENS, _DIGEST = attrgetter("role"), attrgetter("tokens"), attrgetter("digest")
_CALLS, _ERRORS = attrgetter("tool_calls"), attrgetter("tool_error")
_SYSTEM = frozenset({"system", "developer"})


def _summary(listed: list[MessageFacts], params_dump: bytes) -> RequestFacts:
    """The request's facts from its messages' (each step a loop in C: no Python per message)."""
    roles = list(map(_ROLE, listed))
    last_user = len(roles) - 1 - roles[::-1].index("user") if "user" in roles else -1
    first_user = listed[roles.index("user")].digest if last_user >= 0 else b""
    system = next(compress(listed, map(_SYSTEM.__contains__, roles)), None)
    canonical = hashlib.blake2b(b"".join(map(_DIGEST, listed)), digest_size=16)
    canonical.update(params_dump)
    first_system = b"" if system is None else system.digest
    return RequestFacts(
        tuple(listed),
        canonical.digest(),
        hashlib.blake2b(first_system + first_user, digest_size=16).digest(),
        sum(map(_TOKENS, listed)),
        sum(map(_TOKENS, listed[: last_user + 1])),
        roles[last_user + 1 :].count("assistant"),
        tuple(compress(map(_CALLS, listed), map("assistant".__eq__, roles))),
        tuple(compress(map(_ERRORS, listed), map("tool".__eq__, roles))),
    )


def _head(messages: list[Any]) -> int | None:
    """Which conversation ``Prefixes`` files a request under: its first two messages' roles and
    texts (a slot two conversations share costs speed only: the messages are compared)."""
    first, second = messages[0], messages[1]
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return None
    one, two = first.get("content"), second.get("content")
    return hash(
        (
            first.get("role"),
            one if isinstance(one, str) else None,
            second.get("role"),
            two if isinstance(two, str) else None,
        )
    )


def _calls_fingerprint(calls: Any) -> Any:
    if not isinstance(calls, list):
        return _dump(calls)
    parts: list[Any] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str | None):
            parts += (call.get("id"), function.get("name"), function.get("arguments"))
        else:
            parts.append(_dump(call))
    return tuple(parts)


def _message_facts(message: Mapping[str, Any]) -> MessageFacts:
    role = message.get("role")
    role = role if isinstance(role, str) else ""
    calls = _tool_calls(message.get("tool_calls"))
    raw = _text_of(message.get("content"))
    # What a loop re-sends with a new stamp each time is its prompt (a cron's "Now: 09:01")
    # and its tool calls' arguments; a tool's result is compared as it is, unless it is an
    # error, read from its start (where errors say so), compared without its stamps.
    tool_error = None
    if role == "tool":
        text = raw
        if _ERROR.search(raw, 0, _ERROR_WINDOW):
            normalized = normalize_text(raw)
            tool_error = hashlib.blake2b(normalized.encode(), digest_size=16).digest()
    elif role == "assistant":
        text = raw
    else:
        text = normalize_text(raw)
    name = message.get("name")
    called = _dump(calls) if calls else ""
    # Fields joined by a separator no JSON text and no normalized text holds.
    canonical = "\x1f".join((role, name if isinstance(name, str) else "", text, called))
    digest = hashlib.blake2b(canonical.encode(), digest_size=16).digest()
    tool_calls = None
    if role == "assistant" and calls:
        tool_calls = hashlib.blake2b(called.encode(), digest_size=16).digest()
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
