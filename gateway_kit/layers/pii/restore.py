"""Restoring: the model's answer with each placeholder it repeats replaced by the real value.

``restore_text`` does a whole text (a JSON answer's content, a tool call's arguments);
``StreamRestorer`` a stream of text deltas (one per choice, or per tool call), holding back only
the shortest end of what it was given that could still become a placeholder, so ordinary
text is never delayed and a placeholder split across deltas comes out whole.

Models do things to placeholders: ``<email_1>``, ``EMAIL_1``, ``[EMAIL_1]``; and an upstream
writing JSON with Go's defaults escapes a tool call's ``<>`` as ``\\u003c``/``\\u003e``. Those
forms are restored too, but only for placeholders issued in this request: a ``<PHONE_9>`` the
model made up, or one the client wrote itself, stays as it is.
"""

from __future__ import annotations

import json

from gateway_kit.layers.pii.masking import SHAPED

__all__ = ["StreamRestorer", "in_json_strings", "restore_text"]

#: A placeholder's brackets escaped in a JSON string (upper case, as tails are compared).
_OPEN_ESCAPED, _CLOSE_ESCAPED = "\\U003C", "\\U003E"


class _Issued:
    """The placeholders of one request, as a model may write them back."""

    __slots__ = ("names", "values")

    def __init__(self, values: dict[str, str]) -> None:
        #: ``EMAIL_1`` -> the value (names without brackets, upper case).
        self.values = {placeholder[1:-1].upper(): value for placeholder, value in values.items()}
        self.names = sorted(self.values, key=len, reverse=True)

    def sub(self, text: str, start: int = 0) -> str:
        """``text[start:]`` restored (what comes before ``start`` only tells whether a bare
        name at ``start`` continues a word). Only issued names are replaced; anything else
        shaped like one stays as it is."""
        if "_" not in text:
            return text[start:]
        values = self.values
        pieces: list[str] = []
        done = start
        for match in SHAPED.finditer(text, start):
            value = values.get(match.group(1).upper())
            if value is None:
                continue
            pieces += (text[done : match.start()], value)
            done = match.end()
        if not pieces:
            return text[start:]
        pieces.append(text[done:])
        return "".join(pieces)


def in_json_strings(values: dict[str, str]) -> dict[str, str]:
    """``values`` as they are written inside a JSON string (quotes, backslashes and control
    characters escaped): what a placeholder in a tool call's arguments, which are JSON, is
    given back. A raw newline put back there would make the arguments invalid JSON."""
    return {
        placeholder: json.dumps(value, ensure_ascii=False)[1:-1]
        for placeholder, value in values.items()
    }


def restore_text(text: str, values: dict[str, str]) -> str:
    """``text`` with the placeholders of ``values`` (placeholder -> value) restored."""
    if not values or not text:
        return text
    return _Issued(values).sub(text)


class StreamRestorer:
    """Restores one stream of text deltas (one choice's content, or one tool call's
    arguments). ``feed`` returns what can be given out now; ``close`` the rest."""

    __slots__ = ("_held", "_issued", "_last", "_longest")

    def __init__(self, values: dict[str, str]) -> None:
        self._issued = _Issued(values) if values else None
        self._held = ""
        #: The last character given out (a bare name right after a letter is no placeholder).
        self._last = ""
        # The longest form a placeholder can take: its name and two brackets, JSON-escaped.
        names = self._issued.names if self._issued is not None else []
        self._longest = max((len(name) for name in names), default=0) + 2 * len(_OPEN_ESCAPED)

    def feed(self, delta: str) -> str:
        issued = self._issued
        if issued is None:
            return delta
        text = self._held + delta
        keep = self._pending(text)
        cut = len(text) - keep
        self._held = text[cut:]
        if not cut:
            return ""
        out = issued.sub(self._last + text[:cut], len(self._last))
        self._last = text[cut - 1]
        return out

    def close(self) -> str:
        held, self._held = self._held, ""
        if self._issued is None or not held:
            return held
        out = self._issued.sub(self._last + held, len(self._last))
        self._last = held[-1]
        return out

    def _pending(self, text: str) -> int:
        """How many characters at the end of ``text`` could still be (or end) a placeholder:
        the longest such end, so that none is cut."""
        issued = self._issued
        assert issued is not None
        for size in range(min(len(text), self._longest), 0, -1):
            at = len(text) - size
            tail = text[at:]
            if tail[0] not in "<[{\\":
                before = text[at - 1] if at else self._last
                if before and (before.isalnum() or before == "_"):
                    continue  # inside a word: no bare name starts here
            if _could_start(tail, issued):
                return size
        return 0


def _could_start(tail: str, issued: _Issued) -> bool:
    """Whether ``tail`` is the start of an issued placeholder written some way (a complete
    bare name too: it may still grow, EMAIL_1 -> EMAIL_12, or get its closing bracket)."""
    upper = tail.upper()
    if upper[0] == "\\":  # a JSON-escaped "<", or the start of one
        if not upper.startswith(_OPEN_ESCAPED):
            return _OPEN_ESCAPED.startswith(upper)
        body = upper[len(_OPEN_ESCAPED) :]
    else:
        body = upper[1:] if upper[0] in "<[{" else upper
    if not body:
        return True  # an opening bracket alone
    for name in issued.names:
        if name.startswith(body):
            return True
        if body.startswith(name):
            rest = body[len(name) :]
            if rest in ("", ">", "]", "}", _CLOSE_ESCAPED):
                return not rest  # closed: done, unless nothing follows yet
            if _CLOSE_ESCAPED.startswith(rest):
                return True  # its escaped ">" not whole yet
    return False
