"""The request body: read once under a size cap, replayed to the inner app (DESIGN.md 3), and
parsed strictly.

The replaying ``receive`` hands over to the original one afterwards, so ``http.disconnect``
still arrives. A layer that changes the parsed request calls ``replace_json``.

``parse_json`` is the one JSON reader of request bodies (the inference routes and the management
API alike): a body it accepts can be forwarded, stored, re-serialized and walked without
surprises, so it refuses what Python's ``json`` would let through: bytes that are not UTF-8, the
``NaN`` and ``Infinity`` literals and numbers past a double's range (``1e400``), integers longer
than Python converts (4300 digits), arrays and objects nested past ``MAX_JSON_DEPTH`` (the
``RecursionError`` of deeper ones included) and strings holding a lone UTF-16 surrogate
(``"\\ud800"``: valid JSON syntax, but no Unicode text, so it can be neither encoded as UTF-8
nor stored).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from gateway_kit._asgi.types import Message, Receive, Scope, header
from gateway_kit.pipeline.context import RequestContext, get_context

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "BodyTooLarge",
    "ClientDisconnected",
    "InvalidJSON",
    "encoding_refused",
    "parse_json",
    "read_body",
    "replace_json",
]

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024

#: The deepest nesting of arrays and objects a body may have. Real requests nest a few levels
#: (a tool's JSON schema perhaps twenty); the bound keeps far below Python's recursion limit
#: (1000 frames, part of them already used by the stack of layers), so that whatever walks the
#: parsed body recursively later (``json.dumps``, a layer) cannot overflow it.
MAX_JSON_DEPTH = 128


class BodyTooLarge(Exception):
    """The body passed the cap; the layer answers 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body exceeds the limit of {limit} bytes.")
        self.limit = limit


class ClientDisconnected(Exception):
    """The client went away while the body was being read."""


class _ReplayReceive:
    """Replays the buffered body once, then hands over to the original ``receive``."""

    __slots__ = ("_ctx", "_receive", "_replayed")

    def __init__(self, ctx: RequestContext, receive: Receive) -> None:
        self._ctx = ctx
        self._receive = receive
        self._replayed = False

    async def __call__(self) -> Message:
        if not self._replayed:
            self._replayed = True
            return {"type": "http.request", "body": self._ctx.body or b"", "more_body": False}
        return await self._receive()


async def read_body(
    scope: Scope, receive: Receive, *, limit: int = DEFAULT_MAX_BODY_BYTES
) -> tuple[bytes, Receive]:
    """Read the request body once and return it with a ``receive`` that replays it.

    A second call (an inner layer) gets the buffered body and the same replaying ``receive``
    without touching the network. Raises ``BodyTooLarge`` past ``limit`` (checked against
    ``content-length`` first, then while reading) and ``ClientDisconnected``.
    """
    ctx = get_context(scope)
    if ctx.body is not None and isinstance(receive, _ReplayReceive) and not receive._replayed:
        return ctx.body, receive
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected()
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    ctx.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return ctx.body, _ReplayReceive(ctx, receive)


def replace_json(scope: Scope, payload: dict[str, Any]) -> None:
    """Replace the request's JSON body for the layers and the app inside.

    Re-serializes once and fixes ``content-length`` in the scope, so an inner app reading
    ``receive`` sees a consistent request.
    """
    ctx = get_context(scope)
    ctx.json = payload
    ctx.body = _ENCODER.encode(payload).encode()
    length = str(len(ctx.body)).encode()
    scope["headers"] = [(k, length if k == b"content-length" else v) for k, v in scope["headers"]]


def encoding_refused(content_encoding: str | None) -> str | None:
    """Why a body sent with this ``Content-Encoding`` is refused (a 415), ``None`` when it is
    not: bodies are read as they come, so a compressed one would be read as broken JSON (or,
    labelled but plain, served as if nothing were wrong)."""
    if content_encoding is None or content_encoding.strip().lower() in ("", "identity"):
        return None
    shown = content_encoding.strip()[:40].encode("ascii", "replace").decode()
    return f"Content-Encoding {shown!r} is not accepted: send the JSON body uncompressed."


class InvalidJSON(ValueError):
    """A body ``parse_json`` refuses; the message is a clause (``it is not UTF-8 ...``) that the
    caller puts in its 400 ``invalid_json`` answer, ``param`` the place in the body if known."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


# A \ud800-\udfff escape (hex digits in either case). Python decodes one that is not half of
# a pair into a lone surrogate; only a body holding such an escape is walked for one.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_DEEP = f"it nests arrays and objects more than {MAX_JSON_DEPTH} levels deep"


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body, or ``InvalidJSON`` saying what is wrong with it.

    Cheap on the request path: the checks Python's parser cannot make run over the parsed value
    only when a scan of the bytes (at C speed) says they may fail: a surrogate escape, or more
    brackets than ``MAX_JSON_DEPTH``.
    """
    try:
        # Strict: a surrogate encoded in UTF-8 (ED A0 80) is refused too; json.loads(bytes)
        # would let it through, and would read UTF-16 and UTF-32 as well.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJSON(
            f"it is not UTF-8 (byte {exc.start} is not valid); JSON must be sent as UTF-8"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte order mark, which RFC 8259 lets a parser ignore
    try:
        value = _DECODER.decode(text)
    except InvalidJSON:
        raise
    except RecursionError:
        raise InvalidJSON(_DEEP) from None
    except json.JSONDecodeError as exc:
        raise InvalidJSON(
            f"it is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    except ValueError:  # an integer of more digits than int() converts
        raise InvalidJSON("it holds a number with too many digits") from None
    # Each scan costs under a millisecond a megabyte (the count of brackets only when the first
    # found nothing); the walk that may follow costs a long conversation about half its parse.
    surrogates = _SURROGATE_ESCAPE.search(raw) is not None
    if surrogates or (
        len(raw) > 2 * MAX_JSON_DEPTH
        and len(raw) - len(raw.translate(None, b"[{")) > MAX_JSON_DEPTH
    ):
        _inspect(value, strings=surrogates)
    return value


def _not_a_number(literal: str) -> Any:
    raise InvalidJSON(f"it holds {literal}, which is not a JSON number")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise InvalidJSON(f"it holds the number {literal[:40]}, past the range of a double")
    return value


#: Made once: ``json.loads`` with these arguments makes a decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_not_a_number, parse_float=_finite)
#: The request's JSON, as ``replace_json`` writes it.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _inspect(value: Any, *, strings: bool) -> None:
    """Refuse nesting past ``MAX_JSON_DEPTH`` and (``strings``) lone surrogates, in keys and
    values. A quick pass looks; only a body it refuses is walked again, to say where."""
    if strings:
        if _first_problem(value, strings=True, track=False) is None:
            return
    elif not _too_deep(value):
        return
    problem = _first_problem(value, strings=strings, track=True)
    assert problem is not None
    lone, path = problem
    if lone is None:  # named by the top-level member holding it: the full path is 128 steps
        raise InvalidJSON(_DEEP, param=_render(path, steps=1))
    where = _render(path)
    place = f" in '{where}'" if where else ""
    raise InvalidJSON(
        f"it holds a lone surrogate (\\u{ord(lone):04x}){place}, which is not Unicode text "
        "(a character past U+FFFF is written as a pair of escapes)",
        param=where,
    )


def _first_problem(value: Any, *, strings: bool, track: bool) -> tuple[str | None, Any] | None:
    """(the lone surrogate, or ``None`` for nesting too deep; where, as nested (parent, key)
    pairs when ``track``) of the first problem found, or ``None``. Iterative, and only
    containers go on the stack: the value may be as deep as the parser allowed."""
    if isinstance(value, str):
        lone = _lone(value) if strings else None
        return None if lone is None else (lone, None)
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)]
    while stack:
        node, depth, path = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            return None, path
        members = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in members:
            if strings and isinstance(key, str) and (lone := _lone(key)) is not None:
                return lone, path
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, (path, key) if track else None))
            elif strings and isinstance(child, str) and (lone := _lone(child)) is not None:
                return lone, (path, key) if track else None
    return None


_CONTAINERS = (dict, list)


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests past ``MAX_JSON_DEPTH``: level by level, containers only (the
    quickest walk found in pure Python)."""
    level = [value] if value.__class__ in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            return True
        below: list[Any] = []
        for node in level:
            members = node.values() if node.__class__ is dict else node
            below += [m for m in members if m.__class__ in _CONTAINERS]
        level = below
    return False


def _lone(text: str) -> str | None:
    if text.isascii():  # O(1): CPython knows
        return None
    found = _LONE_SURROGATE.search(text)
    return None if found is None else found.group()


def _render(path: Any, *, steps: int | None = None) -> str | None:
    """``messages[0].content`` for the nested pairs ``((((None, 'messages'), 0), 'content')``;
    its first ``steps`` only, if given."""
    parts: list[str] = []
    while path is not None:
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    parts.reverse()
    return "".join(parts[:steps]).lstrip(".") or None
