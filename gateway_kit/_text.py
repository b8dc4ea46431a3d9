"""Text from clients made safe to print: in log lines and the CLI's human output."""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """``text`` with control characters (and unpaired surrogates) escaped, safe to print: a
    newline can forge no second log line, an escape sequence drives no terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
