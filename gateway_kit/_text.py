"""Text from clients made safe to print: in log lines and the CLI's human output."""

from __future__ import annotations

import re

__all__ = ["CONTROL", "printable"]

#: C0 and C1 controls and DEL: ESC starts the terminal escape sequences a label must never
#: carry (what the API and the CLI refuse in names, references and the like).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (and unpaired surrogates) escaped, safe to print: a
    newline can forge no second log line, an escape sequence drives no terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
