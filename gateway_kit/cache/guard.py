"""The lexical guard: what two prompts must share, word for word, before a semantic match may
answer one with the other's answer.

An embedding says two prompts are about the same thing; it is blind to what changes the answer
while changing few words: "convert 100 USD to EUR" and "convert 100 EUR to USD" embed alike.
So a match above the threshold must also keep, between the prompt cached and the new one:

- the same **numbers**, in the same order (``15% of 80`` is not ``15% of 90``);
- the same **placeholders** (PII masking's ``<EMAIL_12>``), **URLs**, **code identifiers**
  (``snake_case``, ``camelCase``, ``dotted.names``, ``` `quoted` ```, words with digits) and
  **quoted text**;
- the same **negations** (``not``, ``n't``, ``never``, ``without``... in the languages below);
- the same **names** (capitalised words not opening a sentence: ``Austria`` is not
  ``Australia``) and **units and currencies** (``grams`` is not ``ounces``);
- the same **language** (by its function words: English, French, German, Spanish, Italian,
  Portuguese, Dutch), so an answer never comes back in another;
- the same **order** of the content words both hold (``Is Paris north of Madrid`` is not
  ``Is Madrid north of Paris``);
- no content word **added** without another replaced: ``a recipe for chocolate cake`` is not
  ``a vegan recipe for chocolate cake`` (a constraint more); and no word replaced by its
  opposite (``mutable`` and ``immutable``, ``safe`` and ``unsafe``).

Each check is a comparison of small tuples: a few microseconds.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

__all__ = ["same_meaning_words", "signature"]

_URL = re.compile(r"https?://\S+|www\.\S+", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_\d+>")
_QUOTED = re.compile(r"`[^`]+`|\"[^\"]+\"|“[^”]+”|(?<!\w)'[^'\n]+'(?!\w)")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*|[\w.]*\w", re.UNICODE)
_IDENTIFIER = re.compile(
    r"\b(?:[A-Za-z]+_\w+|[a-z]+[A-Z]\w*|[A-Za-z_]\w*\.[A-Za-z_][\w.]*\w|[A-Za-z]+\d\w*)\b"
)
_SENTENCE_END = frozenset(".!?:;\n")
#: Where the names are in a ``signature``.
_NAMES = 6


def _listed(text: str) -> list[str]:
    return text.split()


#: Words that turn a statement around, by language (and the English contraction).
_NEGATIONS = frozenset(
    _listed("""
    not no never none nor nothing nobody nowhere neither without cannot
    ne pas jamais rien aucun aucune sans non
    nicht kein keine keinen keinem keiner nie niemals ohne
    nunca nada ninguno ninguna sin tampoco
    mai niente nessuno nessuna senza
    nao não nem nenhum nenhuma sem
    niet geen nooit zonder
    """)
)
#: Prefixes that make a word its opposite (``un``safe, ``im``mutable, ``non``blocking).
_NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "non", "non-", "dis", "anti", "de")

#: Function words by language: the guard's language guess, and what "content word" leaves out.
_FUNCTION_WORDS = {
    "en": """a an the of to in on for with and or is are was were be been do does did how what
        which who whom whose when where why can could should would will shall may might i you
        he she it we they me my your our their this that these those there here as at by from
        into about than then so if please give tell me some any""",
    "fr": """le la les un une des du de et ou est sont que qui quoi comment pourquoi quand où
        je tu il elle nous vous ils elles mon ma mes ton ta tes son sa ses ce cette ces dans
        sur pour avec par au aux en se""",
    "de": """der die das ein eine einen einem einer und oder ist sind war wie was warum wann wo
        wer ich du er sie es wir ihr mein meine dein sein ihr dieser diese dieses in im auf
        für mit von zu zum zur aus bei den dem des""",
    "es": """el la los las un una unos unas y o es son era que qué cómo por porqué cuándo dónde
        quién yo tú él ella nosotros vosotros ellos mi mis tu tus su sus este esta estos en
        con para del al se""",
    "it": """il lo la i gli le un uno una e o è sono che cosa come perché quando dove chi io tu
        lui lei noi voi loro mio mia tuo tua suo sua questo questa in con per di da del della
        al alla si""",
    "pt": """o a os as um uma uns umas e ou é são que como porque quando onde quem eu tu ele ela
        nós vós eles meu minha teu tua seu sua este esta isso em com para por de do da dos das
        no na se""",
    "nl": """de het een en of is zijn was wat hoe waarom wanneer waar wie ik jij hij zij wij
        jullie mijn jouw zijn haar deze dit die in op voor met van te naar bij""",
}
_EVERY_FUNCTION_WORD = Counter(
    word for words in _FUNCTION_WORDS.values() for word in set(words.split())
)
#: A function word of one language only (``in`` and ``a`` vote for none).
_LANGUAGE_OF = {
    word: language
    for language, words in _FUNCTION_WORDS.items()
    for word in words.split()
    if _EVERY_FUNCTION_WORD[word] == 1
}
_FUNCTION = frozenset(_EVERY_FUNCTION_WORD) | _NEGATIONS
#: Units and currencies, as words: a change of one changes the answer.
_UNITS = frozenset(
    _listed("""
    usd eur gbp jpy chf cny inr cad aud dollar dollars euro euros pound pounds yen franc francs
    rupee rupees yuan bitcoin btc
    inch inches foot feet yard yards mile miles meter meters metre metres kilometer kilometers
    kilometre kilometres centimeter centimeters millimeter millimeters
    gram grams kilogram kilograms kilo kilos ounce ounces lbs ton tons tonne tonnes
    milliliter milliliters liter liters litre litres gallon gallons cup cups tablespoon
    tablespoons tbsp teaspoon teaspoons tsp pint pints quart quarts
    celsius fahrenheit kelvin
    second seconds minute minutes hour hours day days week weeks month months year years
    byte bytes kilobyte kilobytes megabyte megabytes gigabyte gigabytes terabyte terabytes
    bit bits hertz watt watts volt volts percent percentage mph kph knots
    """)
)
#: A unit's symbol right after a number (``5 kg``, ``30°C``, ``10%``, ``2GB``).
_UNIT_SYMBOL = re.compile(r"\d(?:[.,]\d+)?\s?(°?[A-Za-z]{1,3}|%|°|\$|€|£)(?![A-Za-z])")
_CURRENCY = re.compile(r"[$€£¥₹]")


def signature(text: str) -> tuple[object, ...]:
    """What must be equal, in order, between two prompts for either's answer to serve the
    other (the content words aside: see ``same_meaning_words``)."""
    normalized = unicodedata.normalize("NFKC", text)
    urls = tuple(_URL.findall(normalized))
    rest = _URL.sub(" ", normalized)
    placeholders = tuple(_PLACEHOLDER.findall(rest))
    quoted = tuple(q.strip("`\"“”'").casefold() for q in _QUOTED.findall(rest))
    identifiers = tuple(i.casefold() for i in _IDENTIFIER.findall(rest))
    numbers = tuple(n.replace(",", ".") for n in _NUMBER.findall(_PLACEHOLDER.sub(" ", rest)))
    raw = _WORD.findall(rest)
    negations = sum(1 for w in raw if _negation(w.casefold()))
    words = [_base(w.casefold()) for w in raw]
    units = (
        tuple(w for w in words if w in _UNITS),
        tuple(u.casefold() for u in _UNIT_SYMBOL.findall(rest)),
        tuple(_CURRENCY.findall(rest)),
    )
    return (
        urls,
        placeholders,
        quoted,
        identifiers,
        numbers,
        negations,
        _names(rest),
        units,
        _language(words),
    )


def same_meaning_words(cached: str, new: str) -> bool:
    """Whether ``new`` may be answered with ``cached``'s answer as far as words go: the same
    ``signature``, and the content words both hold in the same order."""
    shape = signature(cached)
    if shape != signature(new):
        return False
    first, second = _content(cached), _content(new)
    if shape[_NAMES] is None:  # no case to tell names by: every content word must match
        return first == second
    old_words, new_words = set(first), set(second)
    if old_words != new_words and (old_words < new_words or new_words < old_words):
        return False  # words added, none replaced: a constraint more, or one less
    if any(_opposite(a, b) for a in old_words - new_words for b in new_words - old_words):
        return False
    shared = old_words & new_words
    return [w for w in first if w in shared] == [w for w in second if w in shared]


def _base(word: str) -> str:
    """A word without its clitic: ``what's`` -> ``what``, ``france's`` -> ``france``,
    ``don't`` -> ``do`` (the negation is counted apart)."""
    for mark in ("'", "\u2019"):
        if mark in word:
            base, _, suffix = word.partition(mark)
            if suffix == "t" and base.endswith("n"):
                return base[:-1] if base not in ("can", "won") else base
            return base
    return word


def _opposite(one: str, other: str) -> bool:
    """Whether one word is the other with a negating prefix (``mutable``, ``immutable``)."""
    longer, shorter = (one, other) if len(one) > len(other) else (other, one)
    return any(longer == prefix + shorter for prefix in _NEGATING_PREFIXES)


def _negation(word: str) -> bool:
    return word in _NEGATIONS or word.endswith(("n't", "n\u2019t"))


def _content(text: str) -> list[str]:
    """The content words, in order, case and plural "s" aside (``list`` and ``lists``)."""
    out = []
    for word in _WORD.findall(_URL.sub(" ", text)):
        folded = _base(word.casefold())
        if folded in _FUNCTION or folded.isdigit() or not folded:
            continue
        out.append(folded[:-1] if len(folded) > 3 and folded.endswith("s") else folded)
    return out


def _names(text: str) -> tuple[str, ...] | None:
    """Capitalised words that do not open a sentence (nor are ``I``): names, places, brands,
    in order. ``None`` when the text is in capitals throughout (its case says nothing): the
    caller then asks for the same content words."""
    if not any(c.islower() for c in text):
        return None
    found = []
    opening = True
    for match in re.finditer(r"\S+", text):
        token = match.group()
        word = _base(token.strip("\"'`“”\u2018\u2019()[]{}.,!?:;"))
        if word and word[0].isupper() and not opening and word != "I" and word.isalpha():
            found.append(word.casefold())
        opening = token[-1] in _SENTENCE_END
    return tuple(found)


def _language(lowered: list[str]) -> str:
    """The language whose function words the text holds most of (``""``: none)."""
    votes = Counter(_LANGUAGE_OF[w] for w in lowered if w in _LANGUAGE_OF)
    if not votes:
        return ""
    (best, count), *rest = [*votes.most_common(2), ("", 0)]
    return best if count > rest[0][1] else "mixed"
