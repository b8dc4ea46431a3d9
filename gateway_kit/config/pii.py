"""PII masking: what is found, what is covered, and what happens when a detector fails."""

from __future__ import annotations

import importlib
import re
from re import _constants, _parser  # type: ignore[attr-defined]
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from gateway_kit.config.base import Mode, OnError, _Config

__all__ = [
    "MAX_PATTERN_LENGTH",
    "PII_KINDS",
    "PIIConfig",
    "check_pattern",
    "compile_pattern",
    "re2",
]

#: The built-in detectors' kinds (``layers.pii.detectors``).
PII_KINDS = ("EMAIL", "PHONE", "CARD", "IBAN", "US_SSN", "IP_ADDRESS", "API_KEY", "JWT")

_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
#: The longest pattern a configuration or a workspace may give.
MAX_PATTERN_LENGTH = 200


class PIIConfig(_Config):
    """PII masking (``layers.pii``). Off unless turned on: it changes what the model reads."""

    mode: Mode = Mode.OFF
    #: A detector that fails: ``closed`` answers 503 (never forward raw PII); ``open`` sends
    #: the request unmasked.
    on_error: OnError = OnError.CLOSED
    #: The built-in kinds looked for.
    kinds: list[str] = Field(default_factory=lambda: list(PII_KINDS))
    #: Whose national phone numbers are recognised without a country code (ISO 3166-1).
    phone_region: str = Field(default="US", pattern=r"^[A-Za-z]{2}$")
    #: ``full``: the model reads placeholders, and answers are restored. ``cache``: the model
    #: reads the real values; masking is for cache keys and logs only.
    scope: Literal["full", "cache"] = "full"
    #: System (and developer) prompts are masked too; tool descriptions only when asked.
    mask_system: bool = True
    mask_tool_descriptions: bool = False
    #: Named patterns always masked, ``{ACME_ID = 'ACME-\\d+'}`` (names: upper case).
    patterns: dict[str, str] = Field(default_factory=dict)
    #: Values never masked (a company's own support address, say).
    allow: list[str] = Field(default_factory=list)
    #: How placeholders are numbered: ``keyed``, from a keyed hash of the value (the same
    #: value has the same placeholder in every request, whatever came before it: across a
    #: conversation's turns, cut or not), or ``ordered``, 1, 2, 3 by kind in the order values
    #: appear in the request (short; the same across turns while the history is re-sent).
    placeholders: Literal["keyed", "ordered"] = "keyed"
    #: The key of ``keyed`` placeholders. Unset: one is drawn at random once and kept in the
    #: storage, shared by every gateway on it.
    secret: SecretStr | None = None

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = [kind for kind in kinds if kind not in PII_KINDS]
        if unknown:
            raise ValueError(f"unknown kind {unknown[0]!r} (kinds: {', '.join(PII_KINDS)})")
        return kinds

    @field_validator("phone_region")
    @classmethod
    def _known_region(cls, region: str) -> str:
        """A region libphonenumber knows (``UK`` is ``GB``): an unknown one recognised no
        national number, and said nothing. Checked where the ``pii`` extra is installed (the
        loader requires it when masking is on)."""
        try:
            phonenumbers = importlib.import_module("phonenumbers")
        except ImportError:
            return region
        if region.upper() not in phonenumbers.SUPPORTED_REGIONS:
            hint = " (the United Kingdom is GB)" if region.upper() == "UK" else ""
            raise ValueError(f"{region!r} is no region libphonenumber knows{hint}")
        return region

    @field_validator("patterns")
    @classmethod
    def _valid_patterns(cls, patterns: dict[str, str]) -> dict[str, str]:
        for name, pattern in patterns.items():
            check_pattern(name, pattern)
        return patterns


def check_pattern(name: str, pattern: str) -> None:
    """A named pattern masking may run on every request: a name in upper case (not a built-in
    kind), a regular expression RE2 accepts (``compile_pattern``) of at most
    ``MAX_PATTERN_LENGTH`` characters that matches something. ``ValueError`` says what is
    wrong."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in PII_KINDS:
        raise ValueError(
            f"pattern name {name!r}: upper-case letters, digits and _, not a built-in kind"
        )
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"pattern {name}: a string of at most {MAX_PATTERN_LENGTH} characters")
    engine = re2()
    refused: tuple[type[Exception], ...] = (re.error,) if engine is None else (engine.error,)
    try:
        compiled = compile_pattern(pattern)
    except refused as exc:
        detail = exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc
        syntax = "RE2 accepts" if engine is not None else "Python accepts"
        raise ValueError(f"pattern {name}: not a regular expression {syntax} ({detail})") from None
    if compiled.fullmatch(""):
        raise ValueError(f"pattern {name}: matches the empty string")
    if engine is None:
        parsed = list(_parser.parse(pattern))
        if _nested_repeat(parsed, inside=False):
            raise ValueError(
                f"pattern {name}: a repetition inside a repetition (such as (a+)+) can take "
                "exponential time; write it without"
            )
        # What RE2 refuses is refused here too: a pattern stored by a gateway without the
        # extra would fail on the one that runs it (a lookaround was stored with a 200).
        beyond = _beyond_re2(parsed)
        if beyond is not None:
            raise ValueError(f"pattern {name}: RE2 has no {beyond}; write it without")


def re2() -> Any:
    """Google's RE2 (``google-re2``, in the ``pii`` extra), or ``None`` without it."""
    global _RE2, _RE2_OPTIONS
    if _RE2 is None:
        try:
            _RE2 = importlib.import_module("re2")
        except ImportError:
            _RE2 = False
            return None
        _RE2_OPTIONS = _RE2.Options()
        _RE2_OPTIONS.log_errors = False  # a refused pattern is the caller's 400, not a log line
    return _RE2 or None


_RE2: Any = None
_RE2_OPTIONS: Any = None


def compile_pattern(pattern: str) -> Any:
    """A named pattern compiled as masking runs it: by RE2, whose matching takes time linear in
    the text whatever the pattern (so no workspace's pattern can stall the gateway: Python's
    ``re`` took 18 s over 27 characters for ``(a|a)*b``); RE2's syntax, without backreferences
    or lookarounds. Without the ``pii`` extra (masking then cannot be on), Python's ``re``,
    ``check_pattern`` refusing a repetition inside a repetition."""
    engine = re2()
    return re.compile(pattern) if engine is None else engine.compile(pattern, _RE2_OPTIONS)


_REPEATS = {_constants.MAX_REPEAT, _constants.MIN_REPEAT, _constants.POSSESSIVE_REPEAT}


_BEYOND_RE2 = {
    _constants.ASSERT: "lookaround",
    _constants.ASSERT_NOT: "lookaround",
    _constants.GROUPREF: "backreference",
    _constants.GROUPREF_EXISTS: "conditional group",
}


def _beyond_re2(items: list[Any]) -> str | None:
    """The first construct of parsed ``items`` RE2 does not have, or ``None``."""
    for op, argument in items:
        if op in _BEYOND_RE2:
            return _BEYOND_RE2[op]
        if op in _REPEATS:
            children = [argument[2]]
        elif op is _constants.SUBPATTERN:
            children = [argument[-1]]
        elif op is _constants.BRANCH:
            children = list(argument[1])
        else:
            continue
        for child in children:
            found = _beyond_re2(list(child))
            if found is not None:
                return found
    return None


def _nested_repeat(items: list[Any], *, inside: bool) -> bool:
    """Whether a repetition (of more than once) sits inside another, in parsed ``items``."""
    for op, argument in items:
        repeats = False
        if op in _REPEATS:
            repeats = argument[1] > 1
            if inside and repeats:
                return True
            children = [argument[2]]
        elif op is _constants.SUBPATTERN:
            children = [argument[-1]]
        elif op is _constants.BRANCH:
            children = list(argument[1])
        elif op in (_constants.ASSERT, _constants.ASSERT_NOT):
            children = [argument[1]]
        else:
            continue
        if any(_nested_repeat(list(child), inside=inside or repeats) for child in children):
            return True
    return False
