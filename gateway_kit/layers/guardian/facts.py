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
from typing import Any, NamedTuple

from gateway_kit.cost.tokens import estimate_message_tokens
from gateway_kit.layers.guardian.memo import MessageMemo, Prefixes

__all__ = [
    "MessageFacts",
    "RequestFacts",
    "facts_of",
    "normalize",
    "normalize_text",
    "ping_pong_cycles",
    "reads_as_error",
    "tail_run",
]

#: Fields of a request that change per call without changing what is asked (``user`` stays:
#: it tells an application's end users apart, and two of them asking alike is no loop).
VOLATILE_FIELDS = frozenset({"stream", "stream_options", "metadata", "seed", "store"})

# Matched inside a word that holds a digit (``normalize`` finds those first: most of a text is
# never looked at). A stamp or an id without a single digit is rare enough to keep.
_VOLATILE = re.compile(
    rb"(?<![0-9])(?:"  # not the tail of a longer number
    rb"[0-9]{4}-[0-9]{2}-[0-9]{2}"  # a date, with its time
    rb"(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]+)?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?"
    rb"|[0-9]{1,2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]+)?)?"  # a time of day
    rb"|1[5-9][0-9]{8}(?:[0-9]{3})?(?![0-9])"  # Unix times, in seconds or milliseconds
    rb")"
    rb"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"  # UUID
    rb"|(?:call|chatcmpl|req|msg|toolu|run|thread|evt|resp|fc)[_-][A-Za-z0-9]{6,}"  # ids
    rb"|[0-9a-fA-F]{16,}"  # long hex ids
)
#: ASCII whitespace (and the information separators ``str.split`` counts as whitespace) as a
#: space; and each byte as ``0`` if it is a digit, else ``a``: a digit is then found by
#: ``bytes.find`` (a memchr), not by a regex.
_SPACES = bytes.maketrans(b"\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f", b" " * 9)
_DIGIT_MARKS = bytes(48 if 48 <= byte <= 57 else 97 for byte in range(256))
#: What a tool's result that reports a failure says near its start (as parts of words, in any
#: case: "Errors", "FAILED", "PermissionDenied"); a substring search is a memchr, a
#: case-insensitive regex with word bounds took 13 us on 400 characters.
_ERROR_WORDS = ("error", "exception", "traceback", "fail", "not found", "denied")
#: A first line that opens with the failure ("Error: ...", "ValueError: ...", "FAILED").
_LEADS_WITH_ERROR = re.compile(r"[\W_]*(?:\w*error|\w*exception|fail|fatal|denied|not found)")
#: A line saying there was no failure: "no errors", "0 failed", "without error", "passed".
_NO_FAILURE = re.compile(
    r"\b(?:no|0|zero|without)\s+(?:\w+\s+)?(?:errors?|failures?|failed|exceptions?)\b"
    r"|\b(?:passed|succeeded|successful(?:ly)?|success)\b"
)
#: A JSON result's ``status`` that reports a failure.
_FAILED_STATUSES = frozenset({"error", "failed", "failure", "fail", "denied"})
_MEMO_SIZE = 50_000
#: How much of a tool's result is searched for an error.
_ERROR_WINDOW = 400


def normalize(data: bytes) -> bytes:
    """UTF-8 ``data`` with what changes from call to call replaced by ``~`` (dates and times,
    UUIDs, ids, Unix times) and runs of ASCII whitespace made one space. A multi-byte
    character holds no ASCII byte, so it is never cut, and other whitespace is kept."""
    data = data.translate(_SPACES)
    while b"  " in data:
        data = data.replace(b"  ", b" ")
    data = data.strip(b" ")
    marks = data.translate(_DIGIT_MARKS)
    at = marks.find(48)
    if at < 0:
        return data
    pieces: list[bytes] = []
    done = 0
    while at >= 0:
        start, end = data.rfind(b" ", 0, at) + 1, data.find(b" ", at)
        if end < 0:
            end = len(data)
        if end - start >= 4:
            word = data[start:end]
            replaced, count = _VOLATILE.subn(b"~", word)
            if count:
                pieces += (data[done:start], replaced)
                done = end
        at = marks.find(48, end)
    pieces.append(data[done:])
    return b"".join(pieces)


def normalize_text(text: str) -> str:
    """``normalize`` for text."""
    return normalize(text.encode()).decode()


class MessageFacts(NamedTuple):
    """One message's facts (a named tuple: made and read on every new message, and a request's
    are transposed at once by ``zip``)."""

    role: str
    #: The canonical message's digest (16 bytes).
    digest: bytes
    #: An assistant turn's tool calls: the digest of their names and canonical arguments, or
    #: ``None``.
    tool_calls: bytes | None
    #: A tool result that reads as an error: the digest of its text, or ``None``.
    tool_error: bytes | None
    #: Estimated tokens (``cost.tokens``), framing included.
    tokens: int


class RequestFacts(NamedTuple):
    """What the rules read of one request, worked out in one pass over its messages."""

    messages: tuple[MessageFacts, ...]
    #: Digest of the canonical request: model, parameters and every message.
    canonical: bytes
    #: The conversation's identity when the client names none: its first system, user and
    #: assistant messages (so conversations opened alike part at the model's first answer);
    #: empty for an opening request (no assistant message yet: not a step of a conversation).
    conversation: bytes
    #: Estimated tokens of every message, and of those up to the last user message.
    tokens: int
    tokens_at_input: int
    #: Assistant turns after the last user message.
    turns_since_input: int
    #: The assistant turns' tool-call signatures, and the error signatures of their tool
    #: results (one per turn: its results' error when they all are the same one).
    tool_turns: tuple[bytes | None, ...]
    tool_results: tuple[bytes | None, ...]


_MEMO: MessageMemo[tuple[int, int], MessageFacts] = MessageMemo(_MEMO_SIZE)
#: What is kept of a long conversation's last request besides its messages: their facts. At
#: most 256 conversations, and about 4 million tokens of messages (some 16 MB of text).
_PREFIXES: Prefixes[list[MessageFacts]] = Prefixes(conversations=256, weight=4_000_000)
#: The last requests' parameters, with their canonical JSON: an application or an agent sends
#: the same ones (an agent's tools) again and again, compared rather than encoded again.
_PARAMS: list[tuple[dict[str, Any], bytes]] = []
_PARAMS_KEPT = 8
#: Conversations shorter than this are only worked out message by message.
_PREFIX_FROM = 16


def facts_of(payload: Mapping[str, Any], *, keep_messages: bool = True) -> RequestFacts:
    """The facts of a chat request (validated: ``messages`` is a list of objects).

    ``keep_messages=False`` leaves ``Prefixes`` out: it keeps a conversation's last messages
    as they came, raw text included, which PII masking forbids (raw values live in the
    request's context only). The facts remembered (``MessageMemo``) are digests and counts."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        messages = []
    head = _head(messages) if keep_messages and len(messages) >= _PREFIX_FROM else None
    same, known = (0, None) if head is None else _PREFIXES.find(head, messages)
    listed = known[:same] if known is not None else []
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
        elif get("function_call") is not None:  # the legacy form of one call
            calls = _dump(get("function_call"))
        key = (
            hash((get("role"), get("name"), content, get("tool_call_id"), calls)),
            len(content) if content is not None else 0,
        )
        facts = memo.get(key)
        if facts is None:
            facts = _message_facts(message)
            memo.remember(key, facts)
        listed.append(facts)
    request = _summary(listed, _params_dump(payload))
    if head is not None:
        _PREFIXES.remember(head, messages, listed, request.tokens)
    return request


def _params_dump(payload: Mapping[str, Any]) -> bytes:
    """The canonical JSON of the request's parameters (all but its messages and
    ``VOLATILE_FIELDS``), the last requests' reused when they are the same."""
    params = {k: v for k, v in payload.items() if k != "messages" and k not in VOLATILE_FIELDS}
    kept = _PARAMS
    for index, (known, dump) in enumerate(kept):
        if known == params:
            if index:
                kept.insert(0, kept.pop(index))
            return dump
    dump = _dump(params).encode()
    kept.insert(0, (params, dump))
    del kept[_PARAMS_KEPT:]
    return dump


_NOT_A_MESSAGE = MessageFacts("", hashlib.blake2b(b"", digest_size=16).digest(), None, None, 0)


def _summary(listed: list[MessageFacts], params_dump: bytes) -> RequestFacts:
    """The request's facts from its messages' (one loop: faster than C-level passes over the
    list, one per fact, for 2 messages and for 200 alike)."""
    first_system = first_user = first_answer = b""
    tokens = at_input = turns = 0
    digests: list[bytes] = []
    calls: list[bytes | None] = []
    errors: list[bytes | None] = []
    #: The tool results of the last assistant turn: its parallel calls' results are one
    #: outcome, as the model reads them (four fetches failing alike in one turn are not four
    #: turns meeting the same error).
    results: list[bytes | None] = []
    for role, digest, call, error, count in listed:
        digests.append(digest)
        tokens += count
        if role == "tool":
            results.append(error)
            continue
        if results:
            errors.append(_one_outcome(results))
            results = []
        if role == "assistant":
            turns += 1
            calls.append(call)
            first_answer = first_answer or digest
        elif role == "user":
            at_input, turns = tokens, 0
            first_user = first_user or digest
        elif role in ("system", "developer"):
            first_system = first_system or digest
    if results:
        errors.append(_one_outcome(results))
    canonical = hashlib.blake2b(b"".join(digests), digest_size=16)
    canonical.update(params_dump)
    return RequestFacts(
        tuple(listed),
        canonical.digest(),
        (
            hashlib.blake2b(first_system + first_user + first_answer, digest_size=16).digest()
            if first_answer
            else b""
        ),
        tokens,
        at_input,
        turns,
        tuple(calls),
        tuple(errors),
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
    listed = message.get("tool_calls")
    legacy = message.get("function_call")
    if listed is None and isinstance(legacy, dict):
        listed = [{"function": legacy}]  # the legacy form of one call
    calls = _tool_calls(listed)
    raw = _text_of(message.get("content"))
    # What a loop re-sends with a new stamp each time is its prompt (a cron's "Now: 09:01")
    # and its tool calls' arguments (the canonical request, ``repeat``'s); a tool's result is
    # compared as it is, unless it reports a failure, compared without its stamps.
    tool_error = None
    text = raw.encode()
    if role in ("tool", "function"):  # ``function``: a legacy function's result
        role = "tool"
        if reads_as_error(raw):
            tool_error = hashlib.blake2b(normalize(text), digest_size=16).digest()
    elif role != "assistant":
        text = normalize(text)
    name = message.get("name")
    called = _dump(calls).encode() if calls else b""
    # The role (one of a few) and the calls (JSON: control characters escaped) hold no 0x1f;
    # the name is counted, and the text, last, is whatever it is.
    named = name.encode() if isinstance(name, str) else b""
    canonical = b"%s\x1f%s\x1f%d\x1f%s\x1f%s" % (role.encode(), called, len(named), named, text)
    digest = hashlib.blake2b(canonical, digest_size=16).digest()
    tool_calls = None
    if role == "assistant" and calls:
        # ``tool_loop`` compares the arguments as they are (key order and spacing aside): an
        # agent working through records by id, commit, day or hour is making progress (with
        # the stamps taken out, five such calls were "the same arguments").
        exact = _dump(_tool_calls(listed, exact=True)).encode()
        tool_calls = hashlib.blake2b(exact, digest_size=16).digest()
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


def _tool_calls(calls: Any, *, exact: bool = False) -> list[list[str]]:
    """Each call's function name and canonical arguments (ids left out; stamps too unless
    ``exact``), sorted."""
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        arguments = function.get("arguments")
        canonical = _canonical_arguments(arguments)
        out.append(
            [
                name if isinstance(name, str) else "",
                canonical if exact else normalize_text(canonical),
            ]
        )
    return sorted(out)


def _canonical_arguments(arguments: Any) -> str:
    """Arguments as canonical JSON (key order and spacing aside); text that is no JSON as it
    is."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
        return _dump(parsed)
    return _dump(arguments)


def reads_as_error(result: str) -> bool:
    """Whether a tool's result reports a failure. A JSON object says so in its fields
    (``error`` or ``errors`` not empty, ``success`` or ``ok`` false, a failed ``status``);
    text, in its first line or a Python traceback, unless that line says there was none
    ("no errors", "0 failed", "passed"). Words of failure anywhere near the start once
    sufficed, and ``{"success": true, "errors": []}`` or "Lint passed: no errors found."
    made a batch of successful writes a loop of the same error."""
    head = result[:_ERROR_WINDOW].lower()
    if not any(word in head for word in _ERROR_WORDS) and "false" not in head:
        return False  # the usual case: one search per word, in C
    stripped = head.lstrip()
    if stripped.startswith("{"):
        try:
            document = json.loads(result)
        except ValueError:
            document = None
        if isinstance(document, dict):
            return _json_failure(document)
    if "traceback (most recent call last)" in head:
        return True
    return _line_reports_failure(stripped.split("\n", 1)[0])


def _line_reports_failure(line: str) -> bool:
    """A (lower-cased) first line that reports a failure."""
    if not any(word in line for word in _ERROR_WORDS):
        return False  # failure words further on: the result's data, not its outcome
    if _LEADS_WITH_ERROR.match(line):
        return True
    return _NO_FAILURE.search(line) is None


def _json_failure(document: dict[str, Any]) -> bool:
    """A JSON object's fields: a failure said in ``error``/``errors``/``exception``, a false
    ``success``/``ok``, a failed ``status``, or a ``detail``/``message`` that reads as one
    (FastAPI's ``{"detail": "Not Found"}``); counters such as ``"failed_rows": 0`` are data."""
    lowered = {str(key).lower(): value for key, value in document.items()}
    if lowered.get("error") or lowered.get("errors") or lowered.get("exception"):
        return True
    if lowered.get("success") is False or lowered.get("ok") is False:
        return True
    status = lowered.get("status")
    if isinstance(status, str) and status.lower() in _FAILED_STATUSES:
        return True
    return any(
        isinstance(text, str) and _line_reports_failure(text[:_ERROR_WINDOW].lower())
        for text in (lowered.get("detail"), lowered.get("message"))
    )


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _one_outcome(results: Sequence[bytes | None]) -> bytes | None:
    """One turn's tool results as one: their error, when they all are the same error."""
    first = results[0]
    return first if first is not None and all(r == first for r in results) else None


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
