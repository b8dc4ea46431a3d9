"""What PII masking finds in a text: ``Span``s of a kind, from ``Detector``s.

The built-in detectors work offline and download nothing. Each finds candidates with a regex,
then checks what can be checked, so that an order number, a version string or a timestamp is
not taken for a value:

- ``EMAIL``: an address with a dotted domain and a top-level label of letters;
- ``PHONE``: 7 to 15 digits with the separators people write (spaces, dots, dashes, slashes,
  parentheses, a trunk ``(0)``), valid by libphonenumber's rules (the ``pii`` extra):
  international numbers (``+44 20 7946 0958``, ``0044 ...``) in any country, national ones in
  ``phone_region``; a number written next to another (``Row 3 415-555-2671``, ``+1 415 555
  2671 24/7``) is found in the run; an amount in groups of thousands is none;
- ``CARD``: 13 to 19 digits (spaces or dashes between groups) with an issuer's prefix and a
  valid Luhn check digit;
- ``IBAN``: a country's code and length and a valid mod-97 checksum, grouped or not;
- ``US_SSN``: ``123-45-6789`` or ``123 45 6789``, with a valid area, group and serial;
- ``IP_ADDRESS``: IPv4 (not a version: ``v1.2.3.4``, ``Version: 4.0.0.0``,
  ``<Version>1.2.3.4``, ``requests==2.31.0.1``) and IPv6 with a digit (``abc::def`` is a
  path in code), as the ``ipaddress`` module parses them;
- ``API_KEY``: the key formats of OpenAI, Anthropic, AWS, GitHub, Google, Stripe (webhook
  secrets included), Slack, Hugging Face, Groq and gateway-kit itself, PEM and PGP private
  keys, and an AWS secret access key after its name (``aws_secret_access_key = ...``,
  ``"SecretAccessKey": ...``); ``JWT``: tokens, signed or not.

``PatternDetector`` adds a workspace's own named patterns (``ACME_ID = "ACME-\\d+"``). A team
can plug in Presidio or an NER model through ``Detector``: see the README for what those need
offline.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from gateway_kit.config.pii import PII_KINDS, compile_pattern

__all__ = [
    "BUILTIN_KINDS",
    "BuiltinDetector",
    "Detector",
    "PatternDetector",
    "Span",
    "iban_valid",
    "luhn_valid",
    "resolve",
]


class Span(NamedTuple):
    """``text[start:end]`` is a value of ``kind`` (upper case: ``EMAIL``, ``ACME_ID``). A named
    tuple: a detector makes one per value found, and a tuple costs a fraction of a frozen
    dataclass to make."""

    start: int
    end: int
    kind: str


@runtime_checkable
class Detector(Protocol):
    """Finds values in a text. It may raise: the layer's ``on_error`` decides what then."""

    def detect(self, text: str) -> Iterable[Span]: ...


BUILTIN_KINDS = PII_KINDS

# Digits with the separators people write; the validator decides.
_PHONE = re.compile(r"(?<![\w+./-])(?:\+|00)?\(?\d[\d ()./-]{5,20}\d(?![\w-]|\.\d)")
#: A phone candidate's words (between spaces and slashes): where one that is no number may
#: hold one (the run went on into a neighbouring number).
_WORD = re.compile(r"[^\s/]+")
#: An amount in groups of thousands (``8 045 311 447``), no phone number.
_AMOUNT = re.compile(r"[1-9]\d{0,2}(?:([ .])\d{3})(?:\1\d{3}){2,}")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]){11,30}(?![A-Za-z0-9])")
_SSN = re.compile(r"(?<![\d-])(\d{3})([- ])(\d{2})\2(\d{4})(?![\d-])")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_DIGIT = re.compile(r"\d")
_IPV6 = re.compile(
    r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])"
)
_API_KEY = re.compile(
    r"(?<![\w-])(?:"
    r"sk-ant-[A-Za-z0-9_-]{20,}"  # Anthropic
    r"|sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"  # OpenAI
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
    r"|AIza[0-9A-Za-z_-]{35}"  # Google
    r"|(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[0-9A-Za-z+/=]{24,}"  # Stripe
    r"|xox[abposr]-[0-9A-Za-z-]{10,}"  # Slack
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|gsk_[A-Za-z0-9]{40,}"  # Groq
    r"|gk_[A-Za-z0-9_-]{30,}"  # gateway-kit
    r")(?![\w-])"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY"
    r"(?: BLOCK)?-----"  # PEM, and PGP's armour
)
#: An AWS secret access key: 40 characters of base64 after its name (a credentials file's
#: ``aws_secret_access_key = ``, an environment's ``AWS_SECRET_ACCESS_KEY=``, STS's JSON
#: ``"SecretAccessKey": "``); anywhere else 40 such characters are as likely a hash.
_AWS_SECRET = re.compile(
    r"(?i:secret[_ -]?access[_ -]?key|aws[_ -]?secret[_ -]?key)[\"']?[ \t]*(?:[:=]|=>)[ \t]*"
    r"[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
#: Substrings without which no provider key can be in a text.
_KEY_PREFIXES = (
    "sk-", "sk_", "rk_", "pk_", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
    "github_pat_", "AIza", "xox", "hf_", "gsk_", "gk_", "whsec_", "PRIVATE KEY",
)  # fmt: skip
_UNDERSCORED_PREFIXES = tuple(prefix for prefix in _KEY_PREFIXES if "_" in prefix)
#: The others: "sk-", "xox", "PRIVATE KEY", and these (a regex with a literal first character
#: finds the three in one search).
_AWS_OR_GOOGLE = re.compile("A(?:KIA|SIA|Iza)")
#: An e-mail address's local part read backwards from its "@" (on the reversed text before it:
#: a search for where it starts would try every start); its domain, from after the "@".
_LOCAL_REVERSED = re.compile(r"[\w.%+-]{1,64}")
_DOMAIN = re.compile(r"(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+[^\W\d_]{2,24}(?![\w-]|\.\w)")
#: A run of digits and the separators numbers are written with (the numeric kinds' candidates
#: are found in those). ``\d`` is any script's digit; a text of ASCII only (``str.isascii`` is
#: free) is scanned for ASCII digits, which costs two thirds.
_RUN = re.compile(r"\d[\d ().:/-]*\d")
_RUN_ASCII = re.compile(r"[0-9][0-9 ().:/-]*[0-9]")
_GROUP = re.compile(r"\d+")
_NUMERIC_KINDS = frozenset({"PHONE", "CARD", "IBAN", "US_SSN", "IP_ADDRESS"})
#: ``str.translate`` table deleting digits: what is left of a run is its separators.
_DIGITS_AWAY = str.maketrans("", "", "0123456789")
#: A date, or a number led by a year (``2026-004815``), is no phone number, whatever
#: libphonenumber would make of its digits.
_DATE = re.compile(r"(?:19|20)\d\d[/-]|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}(?!\d)")
#: The word before a dotted quad that makes it a version or a section, not an address
#: (``Version 3.2.1.7``, ``Section 4.2.1.3``), in the languages of the corpus.
_NOT_AN_ADDRESS = frozenset(
    [
        "v",
        "ver",
        "version",
        "versión",
        "versão",
        "versione",
        "versie",
        "release",
        "build",
        "firmware",
        "patch",
        "section",
        "sección",
        "secção",
        "sezione",
        "sectie",
        "abschnitt",
        "kapitel",
        "chapter",
        "clause",
        "article",
        "art",
        "artikel",
        "paragraph",
        "paragraphe",
        "§",
        "oid",
    ]
)
#: The word, then what may come between it and the number: ``Version: 4.0.0.0``,
#: ``<Version>1.2.3.4``, ``"version": "2.0.1.3"``, ``AssemblyVersion("1.0.0.0")``.
_WORD_BEFORE = re.compile(r"([^\W\d_]+\.?|§)[\s\"'(:=>]*$")
#: A version specifier before a dotted quad (``requests==2.31.0.1``, ``pkg >= 1.2.3.4``).
_SPECIFIERS = ("==", ">=", "<=", "~=", "!=")
_JWT = re.compile(
    # The signature may be empty: an unsigned token (``alg: none``) carries its claims all
    # the same.
    r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.(?:[A-Za-z0-9_-]{8,})?(?![\w-])"
)

# Issuer prefixes (IIN ranges) and lengths: Visa, Mastercard, Amex, Discover, JCB, Diners,
# UnionPay, Maestro. A Luhn-valid run of digits without one is an order number.
_CARD_ISSUER = re.compile(
    r"4\d{12}(?:\d{3}){0,2}|5[1-5]\d{14}|2(?:2[2-9]|[3-6]\d|7[01])\d{13}|2720\d{12}"
    r"|3[47]\d{13}|6(?:011|5\d\d|4[4-9]\d)\d{12,15}|35(?:2[89]|[3-8]\d)\d{12,15}"
    r"|3(?:0[0-5]|[68]\d)\d{11,16}|62\d{14,17}|(?:50|5[6-9]|6\d)\d{10,17}"
)

#: IBAN lengths by country (the SWIFT registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
    "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
    "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
    "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def luhn_valid(digits: str) -> bool:
    """Whether ``digits`` end with a valid Luhn check digit."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """Whether ``iban`` (no spaces, any case) has its country's length and a valid checksum."""
    iban = iban.upper()
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban.isalnum() or not iban.isascii():
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


class BuiltinDetector:
    """The built-in kinds (``kinds``: a subset of ``BUILTIN_KINDS``); national phone numbers
    are read as ``phone_region``'s (ISO 3166 code), international ones in any country."""

    def __init__(self, kinds: Sequence[str] = BUILTIN_KINDS, *, phone_region: str = "US") -> None:
        unknown = sorted(set(kinds) - set(BUILTIN_KINDS))
        if unknown:
            raise ValueError(f"unknown PII kinds {unknown}: the built-in ones are {BUILTIN_KINDS}")
        self.kinds = frozenset(kinds)
        self.phone_region = phone_region.upper()
        self._phones = _phone_validator(self.phone_region) if "PHONE" in self.kinds else None
        self._numeric_kinds = bool(self.kinds & _NUMERIC_KINDS)
        self._iban = "IBAN" in self.kinds
        self._card = "CARD" in self.kinds
        self._ssn = "US_SSN" in self.kinds
        self._ipv4 = "IP_ADDRESS" in self.kinds

    def detect(self, text: str) -> list[Span]:
        kinds = self.kinds
        spans: list[Span] = []
        # The structured kinds first: a key, a token or an e-mail address holds digits a
        # phone or card candidate would otherwise take (``resolve`` keeps the longest). Each
        # kind's regex runs only where a substring search (in C) says it may match.
        if "API_KEY" in kinds:
            if _may_hold_a_key(text):
                spans += _spans(_API_KEY, text, "API_KEY")
            if "ecret" in text or "ECRET" in text:
                spans += _aws_secrets(text)
        if "JWT" in kinds and "eyJ" in text:
            spans += _spans(_JWT, text, "JWT")
        if "EMAIL" in kinds and "@" in text:
            spans += _emails(text)
        if "IP_ADDRESS" in kinds and ":" in text:
            spans += _ipv6(text)
        if self._numeric_kinds:
            # The numeric kinds, from one pass over the runs of digits and separators: each
            # kind's regex then reads a run only (and the two characters before it: an
            # IBAN's country code, a phone number's "+" or "(").
            numeric = self._numeric
            for run in (_RUN_ASCII if text.isascii() else _RUN).finditer(text):
                numeric(text, run.start(), run.end(), spans)
        return spans

    def _numeric(self, text: str, start: int, end: int, spans: list[Span]) -> None:
        """The numeric kinds' values in the run ``text[start:end]``, added to ``spans``."""
        if self._iban and start >= 2 and text[start - 2 : start].isalpha():
            spans += _ibans(text, start - 2)
        # How many digits the run holds: a kind needing more is not looked for at all (most
        # runs are years, amounts and dates: they end here).
        run = text[start:end]
        digits = len(run) - len(run.translate(_DIGITS_AWAY))
        if digits < 4:
            return
        if self._card and digits >= 13:
            for match in _CARD.finditer(text, start, end):
                card = _card_in(match.group())
                if card is not None:
                    spans.append(Span(match.start() + card[0], match.start() + card[1], "CARD"))
        if self._ssn and end - start >= 11 and digits >= 9:
            for match in _SSN.finditer(text, start, end):
                area, group, serial = match.group(1), match.group(3), match.group(4)
                valid_area = area not in ("000", "666") and area[0] != "9"
                if valid_area and group != "00" and serial != "0000":
                    spans.append(Span(match.start(), match.end(), "US_SSN"))
        if self._ipv4 and end - start >= 7 and "." in run:
            spans += _ipv4(text, start, end)
        if self._phones is not None and digits >= 7:
            for match in _PHONE.finditer(text, max(0, start - 2), end):
                spans += self._phones_in(match.group(), match.start())

    def _phones_in(self, candidate: str, at: int) -> Iterator[Span]:
        """The phone numbers in ``candidate`` (at ``at`` in the text): the whole, else its
        longest runs of words that are one (the run went on into a neighbouring number:
        ``Row 3 415-555-2671``, ``+1 415 555 2671 24/7``)."""
        if self._phone(candidate):
            yield _phone_span(candidate, at, len(candidate))
            return
        if (" " not in candidate and "/" not in candidate) or _AMOUNT.fullmatch(candidate):
            return
        words = [(m.start(), m.end()) for m in _WORD.finditer(candidate)]
        first = 0
        while first < len(words):
            for last in range(len(words) - 1, first - 1, -1):
                if first == 0 and last == len(words) - 1:
                    continue  # the whole: not one
                begin, stop = words[first][0], words[last][1]
                while candidate[begin] in ".-/)":
                    begin += 1
                while candidate[stop - 1] in ".-/(":
                    stop -= 1
                if begin < stop and self._phone(candidate[begin:stop]):
                    yield _phone_span(candidate[begin:stop], at + begin, stop - begin)
                    first = last + 1
                    break
            else:
                first += 1

    def _phone(self, candidate: str) -> bool:
        """Whether ``candidate`` (digits and separators) is a phone number, whole."""
        phones = self._phones
        assert phones is not None
        count = len(candidate) - len(candidate.translate(_DIGITS_AWAY))
        if not 7 <= count <= 15 or _DATE.match(candidate):
            return False
        if _AMOUNT.fullmatch(candidate):
            return False
        return phones(candidate)


class PatternDetector:
    """A workspace's own named patterns: ``{"ACME_ID": r"ACME-\\d+"}`` (names upper case)."""

    def __init__(self, patterns: dict[str, str]) -> None:
        self.patterns = [
            (name.upper(), compile_pattern(pattern)) for name, pattern in patterns.items()
        ]

    def detect(self, text: str) -> Iterator[Span]:
        for kind, pattern in self.patterns:
            for match in pattern.finditer(text):
                if match.end() > match.start():
                    yield Span(match.start(), match.end(), kind)


def _phone_span(candidate: str, at: int, size: int) -> Span:
    """The span of the number ``candidate`` at ``at`` (an opening parenthesis never closed is
    punctuation: ``(call 415-555-2671``)."""
    if candidate[0] == "(" and ")" not in candidate:
        return Span(at + 1, at + size, "PHONE")
    return Span(at, at + size, "PHONE")


def _aws_secrets(text: str) -> Iterator[Span]:
    for match in _AWS_SECRET.finditer(text):
        yield Span(match.start(1), match.end(1), "API_KEY")


def _spans(pattern: re.Pattern[str], text: str, kind: str) -> Iterator[Span]:
    for match in pattern.finditer(text):
        yield Span(match.start(), match.end(), kind)


def _emails(text: str) -> Iterator[Span]:
    """Addresses, found from their "@" (a substring search) outwards: the local part read
    backwards, the domain forwards; a regex scanning the whole text costs ten times more."""
    at = text.find("@")
    while at >= 0:
        local = _LOCAL_REVERSED.match(text[max(0, at - 64) : at][::-1])
        domain = _DOMAIN.match(text, at + 1) if local is not None else None
        if local is not None and domain is not None:
            start = at - local.end()
            # Not a URL's user (https://token@host) and not part of a longer word.
            if not text.endswith("://", 0, start) and (
                start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_.%+-")
            ):
                yield Span(start, domain.end(), "EMAIL")
                at = text.find("@", domain.end())
                continue
        at = text.find("@", at + 1)


def _may_hold_a_key(text: str) -> bool:
    """Whether one of the keys' prefixes is in ``text`` (most hold a "_": one search says
    whether to look for them; a search for one character costs a tenth of one for three)."""
    if "_" in text and any(prefix in text for prefix in _UNDERSCORED_PREFIXES):
        return True
    return (
        "sk-" in text
        or "xox" in text
        or "PRIVATE KEY" in text
        or _AWS_OR_GOOGLE.search(text) is not None
    )


def _ibans(text: str, at: int) -> Iterator[Span]:
    """An IBAN at ``at``, grouped or not: a candidate runs on over spaces (into the next
    words, say), so it is cut at its country's length, then checked."""
    match = _IBAN.match(text, at)
    if match is None:
        return
    candidate, start = match.group(), match.start()
    length = IBAN_LENGTHS.get(candidate[:2].upper())
    if length is None:
        return
    taken = end = 0
    for end, char in enumerate(candidate, 1):  # noqa: B007 - end is used after
        if char != " ":
            taken += 1
            if taken == length:
                break
    after = start + end
    if taken != length or (after < len(text) and text[after].isalnum()):
        return  # too short, or the run goes on without a space: not this IBAN
    if iban_valid(candidate[:end].replace(" ", "")):
        yield Span(start, after, "IBAN")


def _card_in(candidate: str) -> tuple[int, int] | None:
    """Where in ``candidate`` (digits in groups) a card number is: the whole, else the
    longest run of its groups that is one (``4111 1111 1111 1111 12`` holds a card and an
    expiry month)."""
    digits = candidate.replace(" ", "").replace("-", "")
    if _CARD_ISSUER.fullmatch(digits) and luhn_valid(digits):
        return 0, len(candidate)
    groups = [(m.start(), m.end()) for m in _GROUP.finditer(candidate)]
    windows = [(i, j) for i in range(len(groups)) for j in range(len(groups), i, -1)]
    windows.sort(key=lambda w: groups[w[1] - 1][1] - groups[w[0]][0], reverse=True)
    for i, j in windows:
        at, stop = groups[i][0], groups[j - 1][1]
        digits = candidate[at:stop].replace(" ", "").replace("-", "")
        if 13 <= len(digits) <= 19 and _CARD_ISSUER.fullmatch(digits) and luhn_valid(digits):
            return at, stop
    return None


def _ipv4(text: str, start: int, end: int) -> Iterator[Span]:
    for match in _IPV4.finditer(text, max(0, start - 1), end):
        at = match.start()
        if at and text[at - 1] in "vV":
            continue  # v1.2.3.4: a version
        if text[max(0, at - 4) : at].rstrip().endswith(_SPECIFIERS):
            continue  # requests==2.31.0.1: a version
        word = _WORD_BEFORE.search(text, max(0, at - 24), at)
        if word is not None:
            name = word.group(1).rstrip(".").lower()
            if name in _NOT_AN_ADDRESS or name.endswith("version"):  # AssemblyVersion
                continue
        try:
            ipaddress.IPv4Address(match.group())
        except ValueError:
            continue
        yield Span(at, match.end(), "IP_ADDRESS")


def _ipv6(text: str) -> Iterator[Span]:
    if "::" not in text and text.count(":") < 7:
        return
    for match in _IPV6.finditer(text):
        if _DIGIT.search(match.group()) is None:
            continue  # abc::def, Add::add: a path in code (an address without a digit is rare)
        try:
            ipaddress.IPv6Address(match.group())
        except ValueError:
            continue
        yield Span(match.start(), match.end(), "IP_ADDRESS")


def _phone_validator(region: str) -> _PhoneCheck:
    try:
        import phonenumbers
    except ImportError as exc:  # pragma: no cover - the error names the extra
        raise ImportError(
            "PII masking's PHONE detector needs the pii extra: pip install 'gateway-kit[pii]'"
        ) from exc

    valid_number = phonenumbers.is_valid_number
    international = _InternationalNumbers(phonenumbers)
    # A national number's possible lengths in the region, with its trunk prefix or without:
    # a run of another length (an order number's 7 digits in the US) is no number there, and
    # is not worth libphonenumber's 15 us.
    metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
    national_lengths: frozenset[int] = frozenset()
    if metadata is not None and metadata.general_desc is not None:
        lengths = set(metadata.general_desc.possible_length or ())
        prefix = len(metadata.national_prefix or "")
        national_lengths = frozenset(lengths | {n + prefix for n in lengths})

    def valid(candidate: str) -> bool:
        if candidate.startswith(("+", "00")):
            # International: the country code (1 to 3 digits, as assigned) and the national
            # number, read straight off the digits; parsing the text would cost as much again.
            # A trunk prefix written in parentheses (+44 (0)20 ...) is dialled at home only.
            dialled = candidate.replace("(0)", "", 1)
            digits = "".join(filter(str.isdigit, dialled[2:] if dialled[0] == "0" else dialled))
            return international.valid(digits)
        if national_lengths and sum(map(str.isdigit, candidate)) not in national_lengths:
            return False
        try:
            number = phonenumbers.parse(candidate, region)
        except phonenumbers.NumberParseException:
            return False
        return bool(valid_number(number))

    return valid


#: A number type's check: its possible lengths (empty: any) and its pattern's fullmatch.
_TypeCheck = tuple[frozenset[int], Callable[[str], object]]


class _InternationalNumbers:
    """libphonenumber's ``is_valid_number`` for a number given as digits after the ``+``,
    with each region's patterns compiled once: the library looks each pattern up in its cache
    on every call, which made a number's check cost 15 us (and most of the 2 KB prompt's
    masking). The same rules, a country code's regions tried in the same order
    (``_number_type_helper`` and ``_region_code_for_number_from_list``); a test holds it to
    the library on numbers of every country code."""

    #: A region's number types (libphonenumber's attributes of its metadata). The library
    #: tries them in another order to name a number's type; a number is valid when it is of
    #: any, so the types most numbers are of come first.
    _TYPES = (
        "fixed_line", "mobile", "toll_free", "premium_rate", "shared_cost", "voip",
        "personal_number", "pager", "uan", "voicemail",
    )  # fmt: skip

    def __init__(self, phonenumbers: Any) -> None:
        self._codes: dict[int, tuple[str, ...]] = phonenumbers.COUNTRY_CODE_TO_REGION_CODE
        self._metadata = phonenumbers.PhoneMetadata
        self._non_geo: str = phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY
        #: (country code, region) -> (leading digits' match or None, general check, types).
        self._regions: dict[
            tuple[int, str], tuple[Callable[[str], object] | None, _TypeCheck, list[_TypeCheck]]
        ] = {}

    def valid(self, digits: str) -> bool:
        for size in (1, 2, 3):
            code = int(digits[:size] or "0")
            regions = self._codes.get(code)
            if regions is None:
                continue
            national = digits[size:]
            if not national or (national[0] == "0" and code not in _LEADING_ZERO):
                return False
            # The national significant number: one leading zero kept ("italian" numbers).
            nsn = ("0" if national[0] == "0" else "") + str(int(national))
            if len(regions) == 1:
                return self._typed(code, regions[0], nsn)
            for region in regions:  # the first region the number belongs to decides
                table = self._table(code, region)
                if table is None:
                    continue
                leading = table[0]
                if leading is not None:
                    if leading(nsn):
                        return self._typed(code, region, nsn)
                elif self._typed(code, region, nsn):
                    return True
            return False
        return False

    def _typed(self, code: int, region: str, nsn: str) -> bool:
        """Whether ``nsn`` is of one of ``region``'s number types."""
        table = self._table(code, region)
        if table is None:
            return False
        _, general, types = table
        if not _matches(general, nsn):
            return False
        return any(_matches(check, nsn) for check in types)

    def _table(
        self, code: int, region: str
    ) -> tuple[Callable[[str], object] | None, _TypeCheck, list[_TypeCheck]] | None:
        table = self._regions.get((code, region))
        if table is None:
            if region == self._non_geo:
                metadata = self._metadata.metadata_for_nongeo_region(code, None)
            else:
                metadata = self._metadata.metadata_for_region(region, None)
            general = _check(metadata.general_desc) if metadata is not None else None
            if general is None:
                return None
            leading = metadata.leading_digits
            leading_match: Callable[[str], object] | None = (
                re.compile(leading).match if leading is not None else None
            )
            types = [_check(getattr(metadata, name)) for name in self._TYPES]
            table = self._regions[(code, region)] = (
                leading_match,
                general,
                [check for check in types if check is not None],
            )
        return table


def _check(desc: Any) -> _TypeCheck | None:
    """A number type's check from its description (None: the region has no such numbers)."""
    if desc is None or not desc.national_number_pattern:
        return None
    lengths = frozenset(desc.possible_length or ())
    return lengths, re.compile(desc.national_number_pattern).fullmatch


def _matches(check: _TypeCheck | None, nsn: str) -> bool:
    if check is None:
        return False
    lengths, fullmatch = check
    return (not lengths or len(nsn) in lengths) and fullmatch(nsn) is not None


#: Countries whose national numbers keep a leading 0 after the country code (Italy, its
#: neighbours on its numbering plan): libphonenumber's "italian leading zero".
_LEADING_ZERO = frozenset({39, 378, 379})


class _PhoneCheck(Protocol):
    def __call__(self, candidate: str) -> bool: ...


#: On an overlap, secrets win over everything (a key inside a URL's user part is a key), then
#: the longer span.
_PRIORITY = {"API_KEY": 1, "JWT": 1}


def resolve(spans: Iterable[Span]) -> list[Span]:
    """Non-overlapping spans in text order: where two overlap, a secret's (``API_KEY``,
    ``JWT``) wins, then the longer, then the earlier."""
    chosen: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -(s.end - s.start))):
        if chosen and span.start < chosen[-1].end:
            if _rank(span) > _rank(chosen[-1]):
                chosen[-1] = span
            continue
        chosen.append(span)
    return chosen


def _rank(span: Span) -> tuple[int, int]:
    return _PRIORITY.get(span.kind, 0), span.end - span.start
