"""Masking: each value found replaced by a typed, numbered placeholder (``<EMAIL_1>``).

A ``Vault`` belongs to one request (it lives on the request's context, nowhere else): it
issues the placeholders, the same one for the same value of a kind. Numbers are ``keyed``
(``keyed_numbering``: an HMAC of the value under the deployment's secret, 1 to 9999, so a
value has the same placeholder in every request of every conversation, whatever came before
it, and the number says nothing of the value) or ``ordered`` (1, 2, 3 by kind in the order
values first appear: the same across turns as long as the history is re-sent whole).
Placeholder-like text the client wrote itself (``<EMAIL_1>`` typed in a prompt, and any other
form restoring accepts: ``email_1``, ``{EMAIL_1}``) is never issued, so restoring cannot
rewrite it.

``mask_text`` masks one string; the layer calls it on every part of the request it covers.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Sequence

from gateway_kit.layers.pii.detectors import Detector, Span, resolve

__all__ = [
    "KEYED_NUMBERS",
    "PLACEHOLDER",
    "SHAPED",
    "Numbering",
    "Vault",
    "apply_spans",
    "find_spans",
    "keyed_numbering",
    "mask_text",
    "shaped_names",
]

#: A placeholder as issued: ``<KIND_N>``.
PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*)_([1-9][0-9]*)>")

#: Anything shaped like a placeholder, as models write them back (restoring reads these): a
#: name ending in ``_`` and a number, bracketed (<>, [], {}, or <> escaped in JSON as
#: ``\u003c``/``\u003e``, Go's default) or bare, never inside a longer word or number. One
#: pattern for every request (a pattern of the request's own names would be compiled per
#: request).
SHAPED = re.compile(
    r"(?:\\u003[cC]|[<\[{]|(?<![A-Za-z0-9_]))([A-Za-z][A-Za-z0-9_]*_[0-9]+)(?![A-Za-z0-9_])"
    r"(?:\\u003[eE]|[>\]}])?"
)
#: Without this, a text holds nothing ``SHAPED`` (a search cheaper than ``SHAPED``'s).
_SHAPED_HINT = re.compile(r"_[0-9]")


#: A value's placeholder number, from its kind and the value (``keyed`` placeholders).
Numbering = Callable[[str, str], int]

#: Keyed placeholder numbers are 1 to this.
KEYED_NUMBERS = 9999


class Vault:
    """One request's placeholders and the values they stand for. ``numbering`` gives a value's
    number (keyed placeholders: the same in every request); without it values are numbered
    1, 2, 3 by kind in the order they appear. Either way a number already taken in this
    request (or written by the client) gives way to the next free one."""

    __slots__ = ("_by_value", "_next", "_numbering", "_reserved", "counts", "values")

    def __init__(self, numbering: Numbering | None = None) -> None:
        self._numbering = numbering
        #: Placeholder -> the value it stands for.
        self.values: dict[str, str] = {}
        self._by_value: dict[tuple[str, str], str] = {}
        self._next: dict[str, int] = {}
        #: Names the client wrote (``EMAIL_1``, upper case): never issued.
        self._reserved: set[str] = set()
        #: Values found, by kind (every occurrence).
        self.counts: dict[str, int] = {}

    def reserve(self, text: str) -> None:
        """Never issue a placeholder that ``text`` (the client's own) already holds, in any
        form restoring would take for it (``<EMAIL_1>``, ``email_1``, ``[EMAIL_1]``)."""
        self.reserve_names(shaped_names(text))

    def reserve_names(self, names: Iterable[str]) -> None:
        """Never issue the placeholders named ``names`` (``shaped_names`` of the client's
        texts)."""
        self._reserved.update(names)

    def placeholder(self, kind: str, value: str) -> str:
        """The placeholder of ``value`` (the same for the same value of a kind)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        known = self._by_value.get((kind, value))
        if known is not None:
            return known
        if self._numbering is None:
            number = self._next.get(kind, 0)
            while True:
                number += 1
                if f"{kind}_{number}" not in self._reserved:
                    break
            self._next[kind] = number
            issued = f"<{kind}_{number}>"
        else:
            number = self._numbering(kind, value)
            issued = f"<{kind}_{number}>"
            while issued in self.values or issued[1:-1] in self._reserved:
                number = number % KEYED_NUMBERS + 1
                issued = f"<{kind}_{number}>"
        self._by_value[(kind, value)] = issued
        self.values[issued] = value
        return issued


def mask_text(
    text: str,
    detectors: Sequence[Detector],
    vault: Vault,
    *,
    allow: frozenset[str] = frozenset(),
) -> str:
    """``text`` with every value the detectors find (but those in ``allow``) replaced by its
    placeholder."""
    return apply_spans(text, find_spans(text, detectors), vault, allow=allow)


def find_spans(text: str, detectors: Sequence[Detector]) -> tuple[Span, ...]:
    """Where the values of ``text`` are: what the detectors found, overlaps resolved."""
    spans: list[Span] = []
    for detector in detectors:
        spans.extend(detector.detect(text))
    return tuple(resolve(spans)) if spans else ()


def apply_spans(
    text: str, spans: Iterable[Span], vault: Vault, *, allow: frozenset[str] = frozenset()
) -> str:
    """``text`` with the values at ``spans`` (but those in ``allow``) replaced."""
    pieces: list[str] = []
    done = 0
    for span in spans:
        value = text[span.start : span.end]
        if value in allow:
            continue
        pieces += (text[done : span.start], vault.placeholder(span.kind, value))
        done = span.end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def shaped_names(text: str) -> tuple[str, ...]:
    """The names (``EMAIL_1``, upper case) of what ``text`` holds shaped like a placeholder,
    in any form restoring takes for one."""
    if "_" not in text or _SHAPED_HINT.search(text) is None:
        return ()
    return tuple({match.group(1).upper() for match in SHAPED.finditer(text)})


def keyed_numbering(secret: bytes) -> Numbering:
    """Numbers from an HMAC-SHA256 of the kind and the value under ``secret``: the same value
    has the same number in every request, and the numbers say nothing of the values."""
    keyed = hmac.new(secret, digestmod=hashlib.sha256)  # its key's pads hashed once

    def number(kind: str, value: str) -> int:
        mac = keyed.copy()
        mac.update(f"{kind}\x1f{value}".encode())
        return int.from_bytes(mac.digest()[:4], "big") % KEYED_NUMBERS + 1

    return number
