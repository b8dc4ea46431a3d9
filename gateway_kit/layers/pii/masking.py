"""Masking: each value found replaced by a typed, numbered placeholder (``<EMAIL_1>``).

A ``Vault`` belongs to one request (it lives on the request's context, nowhere else): it
issues the placeholders, the same one for the same value of a kind, numbered by kind in the
order the values first appear. A client re-sends its conversation's history on every turn, so
the history's values come first again and get the same placeholders again; a new value
in the newest message gets the next number. Placeholder-like text the client wrote itself
(``<EMAIL_1>`` typed in a prompt) is never issued, so restoring cannot rewrite it.

``mask_text`` masks one string; the layer calls it on every part of the request it covers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from gateway_kit.layers.pii.detectors import Detector, Span, resolve

__all__ = ["PLACEHOLDER", "Vault", "apply_spans", "find_spans", "mask_text"]

#: A placeholder as issued: ``<KIND_N>``.
PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*)_([1-9][0-9]*)>")


class Vault:
    """One request's placeholders and the values they stand for."""

    __slots__ = ("_by_value", "_next", "_reserved", "counts", "values")

    def __init__(self) -> None:
        #: Placeholder -> the value it stands for.
        self.values: dict[str, str] = {}
        self._by_value: dict[tuple[str, str], str] = {}
        self._next: Counter[str] = Counter()
        self._reserved: set[str] = set()
        #: Values found, by kind (every occurrence).
        self.counts: Counter[str] = Counter()

    def reserve(self, text: str) -> None:
        """Never issue a placeholder that ``text`` (the client's own) already holds."""
        if "<" in text:
            self._reserved.update(match.group() for match in PLACEHOLDER.finditer(text))

    def placeholder(self, kind: str, value: str) -> str:
        """The placeholder of ``value`` (the same for the same value of a kind)."""
        self.counts[kind] += 1
        known = self._by_value.get((kind, value))
        if known is not None:
            return known
        while True:
            self._next[kind] += 1
            issued = f"<{kind}_{self._next[kind]}>"
            if issued not in self._reserved:
                break
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
