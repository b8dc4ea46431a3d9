"""The lexical guard: what two prompts must share, word for word, before a semantic match may
answer one with the other's answer.

An embedding says two prompts are about the same thing; it is blind to what changes the answer
while changing few words: "convert 100 USD to EUR" and "convert 100 EUR to USD" embed alike.
So a match above the threshold must also keep, between the prompt cached and the new one:

- the same **numbers** with their signs, in the same order (``15% of 80`` is not ``15% of
  90``, ``-9`` not ``9``); the words **cased** beyond a capital first letter, as written
  (``NO`` is not ``No``, ``-S`` not ``-s``); the shapes of the words that hold **symbols**
  (``$?`` is not ``$!``, ``man-eating`` not ``man eating``, an emoji not another);
- the same **placeholders** (PII masking's ``<EMAIL_12>``), **URLs**, **code identifiers**
  (``snake_case``, ``camelCase``, ``dotted.names``, ``` `quoted` ```, words with digits),
  **quoted text** with its kind of quotation mark (in code ``'$HOME'`` is not ``"$HOME"``),
  and the **text after a colon** as it is (the text to work on: ``Translate to Spanish: I
  live here.`` is not ``...: I live there.``);
- the same **negations** (``not``, ``n't``, ``never``, ``without``... in the languages below);
- the same **names** (capitalised words not opening a sentence: ``Austria`` is not
  ``Australia``) and **units and currencies** (``grams`` is not ``ounces``);
- the same **language** (by its function words: English, French, German, Spanish, Italian,
  Portuguese, Dutch), so an answer never comes back in another;
- the same **symbols of arithmetic and code** in order (``2 + 3 * 4`` is not ``(2 + 3) * 4``,
  ``a.b`` not ``a\\.b``);
- in English, the same **article** before a word both give one (``the bar`` is not ``a bar``,
  nor ``the number of`` ``a number of``; ``a tomato`` / ``the tomato`` is a hit lost), the
  same **possessive** (``my students'`` is not ``my student's``) and the same names with an
  indefinite article (``Mars`` is not ``a Mars``);
- the same **tense and mood** as English auxiliaries give them (``Is Pluto a planet?`` is not
  ``Was Pluto a planet?``, nor ``should`` ``must``; ``How do I`` is ``How can I``);
- the same **order** of the content words both hold (``Is Paris north of Madrid`` is not
  ``Is Madrid north of Paris``) and of the English **prepositions** (one text's are the
  other's with some left out: ``Who wrote X`` is ``Who is the author of X``, but ``into
  French`` is not ``from French``, nor ``a poem for my dog about my brother`` ``a poem about a
  dog for my brother``). A sentence's English leading phrase, set off by its one comma and
  opened by a preposition or a conjunction of time or condition, is read where it would stand
  without the comma, at the sentence's end (``In Rust, how do I read a file?`` is ``How do I
  read a file in Rust?``; ``From 10, subtract 3`` is ``Subtract 3 from 10``, not ``Subtract 10
  from 3``; ``Sort the list, then reverse it`` keeps its order: no such phrase opens it);
- the same **content words** (those that are no function words of the text's language:
  French ``son`` is English "son"; in English also the question word, the person, ``and``
  and ``or``, and how many: ``Why`` is not ``When``, ``Can I`` is not ``Can they``): none
  added (``a recipe for chocolate cake`` is not ``a vegan recipe for chocolate cake``: a
  constraint more), none replaced (``the first occurrence`` is not ``every occurrence``; an
  embedding cannot tell those apart). With ``lenient``, a word may be replaced (a synonym,
  left to the embedder), but not by its opposite (``mutable`` and ``immutable``, ``before``
  and ``after``) nor one of those English function words by another. Negations, numbers and
  commas are compared where they stand among the words (``not all are odd`` is not ``all are
  not odd``; ``admins and active, or banned`` is not ``admins, and active or banned``).

Each check is a comparison of small tuples, made only for a match above the threshold: a tenth
to a quarter of a millisecond for two short prompts, by the machine.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from itertools import pairwise

__all__ = ["in_plain_order", "same_meaning_words", "signature"]

_URL = re.compile(r"https?://\S+|www\.\S+", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_\d+>")
_QUOTED = re.compile(r"`[^`]+`|\"[^\"]+\"|“[^”]+”|(?<!\w)'[^'\n]+'(?!\w)")
#: A number, with its minus sign (``-9``; not the hyphen of ``3-4``).
_NUMBER = re.compile(r"(?:(?<![\w)\]])[-\u2212])?\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*|[\w.]*\w", re.UNICODE)
_IDENTIFIER = re.compile(
    r"\b(?:[A-Za-z]+_\w+|[a-z]+[A-Z]\w*|[A-Za-z_]\w*\.[A-Za-z_][\w.]*\w|[A-Za-z]+\d\w*)\b"
)
_SENTENCE_END = frozenset(".!?:;\n")
#: Where the names and the language are in a ``signature``.
_NAMES = 6
_LANGUAGE = 13


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
#: Words whose opposite is another word, not a prefix: one replaced by the other changes the
#: answer (``remove duplicates before sorting`` is not ``... after sorting``).
_OPPOSITE_PAIRS = _listed("""
    before after above below over under higher lower upper lower uppercase lowercase
    increase decrease increasing decreasing ascending descending asc desc min max minimum maximum
    first last earliest latest oldest newest old new older newer start end begin end left right
    up down top bottom inner outer internal external input output import export send receive
    push pop add remove add subtract plus minus multiply divide sum difference more less
    most least larger smaller largest smallest bigger smaller biggest smallest longer shorter
    longest shortest faster slower fastest slowest cheaper pricier cheapest priciest
    heavier lighter heaviest lightest true false yes no win lose buy sell north south east west
    hot cold warm cool even odd positive negative horizontal vertical rows columns row column
    encrypt decrypt encode decode serialize deserialize compress decompress open close
    client server sync async synchronous asynchronous implicit explicit inclusive exclusive
    include exclude later earlier sooner later future past tomorrow yesterday next previous
    forward backward forwards backwards forward back ahead behind
    """)
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
#: A text's function words when its language is known: French ``son`` is English "son".
_FUNCTION_IN = {
    language: frozenset(words.split()) | _NEGATIONS for language, words in _FUNCTION_WORDS.items()
}
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
#: A unit's symbol right after a number (``5 kg``, ``30°C``, ``10%``, ``2GB``); a function
#: word after the number and a space is none (``port 8080 on Linux``, ``2 to 3``).
_UNIT_SYMBOL = re.compile(r"\d(?:[.,]\d+)?(\s?)(°?[A-Za-z]{1,3}|%|°|\$|€|£)(?![A-Za-z])")
_CURRENCY = re.compile(r"[$€£¥₹]")
#: The symbols of arithmetic and code, in order: ``2 + 3 * 4`` is not ``(2 + 3) * 4`` (nor
#: with a times or division sign). Not ``-``: it joins words (``thank-you``) more often than
#: it subtracts.
_OPERATOR = re.compile(r"[+*/\u00d7\u00f7^=<>()\[\]{}\\|&~@]")
_QUOTE_KIND = {"“": '"'}
_LETTERS = re.compile(r"[^\W_]+")
_WORD_OR_COMMA = re.compile(rf"{_WORD.pattern}|(?<!\d),|,(?!\d{{3}}\b)")
#: Text given to work on, after a colon: ``Translate to Spanish: I live here.`` is not
#: ``...: I live there.``, nor ``I'm sorry, I love you.`` ``I'm sorry I love you.``. Not the
#: colon of a time (``9:00``).
_PAYLOAD = re.compile(r"(?<!\d):\s+(\S.*)", re.DOTALL)
#: English prepositions: one text's must be the other's with some left out, in the same
#: order, since they say where a phrase attaches (``a poem for my dog about my brother`` is
#: not ``a poem about a dog for my brother``) and which way it goes (``into French`` is not
#: ``from French``).
_PREPOSITIONS = frozenset(
    _listed("""
    in on for with without from as at by via to into onto about of over under above below
    between among through across toward towards against within inside outside before after
    during since until per like unlike besides except than
    """)
)


def signature(text: str) -> tuple[object, ...]:
    """What must be equal, in order, between two prompts for either's answer to serve the
    other (the content words aside: see ``same_meaning_words``)."""
    normalized = unicodedata.normalize("NFKC", text)
    urls = tuple(_URL.findall(normalized))
    rest = _URL.sub(" ", normalized)
    placeholders = tuple(_PLACEHOLDER.findall(rest))
    # With its quotation mark: in code '$HOME' is not "$HOME" (“ and ” are " in prose).
    quoted = tuple((_QUOTE_KIND.get(q[0], q[0]), q[1:-1].casefold()) for q in _QUOTED.findall(rest))
    identifiers = tuple(i.casefold() for i in _IDENTIFIER.findall(rest))
    numbers = tuple(
        n.replace(",", ".").replace("\u2212", "-")
        for n in _NUMBER.findall(_PLACEHOLDER.sub(" ", rest))
    )
    raw = _WORD.findall(rest)
    negations = sum(1 for w in raw if _negation(w.casefold()))
    words = [_base(w.casefold()) for w in raw]
    language = _language(words)
    units = (
        tuple(w for w in words if w in _UNITS),
        tuple(
            unit.casefold()
            for space, unit in _UNIT_SYMBOL.findall(rest)
            if not (space and unit.casefold() in _FUNCTION)
        ),
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
        tuple(_OPERATOR.findall(_QUOTED.sub(" ", rest))),
        _payload(rest),
        _tenses(raw, language),
        _cased(rest),
        _symbols(_QUOTED.sub(" ", rest)),
        language,
    )


_EDGES = ".,;:!?\u00bf\u00a1\"'`“”\u2018\u2019()[]{}<>"


def _cased(text: str) -> tuple[str, ...]:
    """The words whose case is more than a capital first letter, as written: ``NO`` is not
    ``No``, ``-S`` not ``-s``, ``mW`` not ``MW`` (none in a text in capitals throughout)."""
    if not any(c.islower() for c in text):
        return ()
    found = []
    for token in text.split():
        word = token.strip(_EDGES)
        if any(c.isupper() for c in word[1:]) or (word[:1] == "-" and word[1:].isupper()):
            found.append(word)
    return tuple(found)


def _symbols(text: str) -> tuple[str, ...]:
    """The shapes of the words that hold symbols, in order (letters and digits as ``w``):
    ``$?`` is not ``$!``, ``user!.name`` not ``user?.name``, ``man-eating`` not ``man
    eating``, an emoji not another. An apostrophe in a word is no symbol (``don't``)."""
    found = []
    for token in text.split():
        # A word's closing mark is the sentence's; a token of symbols only keeps its own ($?).
        word = token.strip(_EDGES) if _LETTERS.search(token) else token
        if not word.strip(".,;:!?\u2026"):
            continue  # a mark alone: French "capitale ?", a dash of prose
        word = word.replace("'", "").replace("\u2019", "")
        shape = _LETTERS.sub("w", word)
        if shape and shape != "w":
            found.append(shape if shape.strip("w") else word)
    return tuple(found)


def _raw_payload(text: str) -> str:
    return _payload(_URL.sub(" ", unicodedata.normalize("NFKC", text)))


def _payload(text: str) -> str:
    """What follows a text's first colon (whitespace collapsed): the text to work on, compared
    as it is (``""``: no colon)."""
    found = _PAYLOAD.search(text)
    return " ".join(found.group(1).split()) if found else ""


def same_meaning_words(cached: str, new: str, *, lenient: bool = False) -> bool:
    """Whether ``new`` may be answered with ``cached``'s answer as far as words go: the same
    ``signature``, and the same content words in the same order (each prompt's leading phrase,
    if it has one, read at its end: see ``in_plain_order``). ``lenient``: content words may
    also have been replaced (``remove`` / ``eliminate``), when no more were added or left out
    and none by its opposite; whether the replacement keeps the meaning is then the embedder's
    call, which it cannot always make (``first`` / ``second``, ``buyer`` / ``seller``)."""
    if _raw_payload(cached) != _raw_payload(new):
        return False  # the text to work on, as it was written (before any reordering)
    cached, new = in_plain_order(cached), in_plain_order(new)
    shape = signature(cached)
    if shape != signature(new):
        return False
    if not _one_within_the_other(_prepositions(cached), _prepositions(new)):
        return False  # a preposition replaced or moved: another direction, another attachment
    language = str(shape[_LANGUAGE])
    if language in ("en", "") and (
        _disagree(_articled(cached), _articled(new))
        or _disagree(_possessives(cached), _possessives(new))
        or _instances(cached) != _instances(new)
        or _deixis_swapped(cached, new)
    ):
        # "the bar" / "a bar", "students'" / "student's", "Mars" / "a Mars", "this" / "that"
        return False
    first, second = _content(cached, language), _content(new, language)
    if shape[_NAMES] is None:  # no case to tell names by: every content word must match
        return first == second
    old_words, new_words = set(first), set(second)
    if old_words != new_words and (not lenient or (old_words ^ new_words) & _ASKED):
        return False  # a word replaced (lenient: a question word, a person, and/or, how many)
    if old_words != new_words and (old_words < new_words or new_words < old_words):
        return False  # words added, none replaced: a constraint more, or one less
    if any(_opposite(a, b) for a in old_words - new_words for b in new_words - old_words):
        return False
    shared = old_words & new_words
    return [w for w in first if w in shared] == [w for w in second if w in shared]


#: The words that open an English leading phrase which reads the same at the end of the
#: sentence: prepositions, and conjunctions of time and condition. Not ``then``, ``and`` nor
#: a verb: ``Sort the list, then reverse it`` is not ``Reverse it, then sort the list``.
_LEADING_PHRASE = frozenset(
    _listed("""
    in on for with without using from as at by via to into about regarding concerning of
    when while if unless once since until before after during unlike besides given per
    within under over through across inside outside between among
    """)
)
#: The same phrases set off at the end of a sentence, opened by a preposition only (a
#: clause after a comma, "when do I arrive?", may be a question of its own).
_TRAILING_PHRASE = _LEADING_PHRASE - frozenset(
    _listed("when while if unless once since until before after")
)
_CLOSING = "?.!"
#: Relative pronouns (``which`` and ``where`` mostly ask, in prompts: left out).
_RELATIVE = frozenset(_listed("that who whom whose"))
_PLEASE = re.compile(r",\s*(please)\b|\b(please)\s*,", re.IGNORECASE)
#: Where a sentence ends: after a word's closing mark (not in ``.txt``, ``3.5`` nor ``$? x``).
_SENTENCES = re.compile(r"(?<=[\w\"')\]][.?!])\s+|\n+")
#: A colon, but not a time's (``9:00``).
_COLON = re.compile(r"(?<!\d):|:(?!\d)")
#: A comma, but not a number's thousands separator (``10,000``).
_COMMA = re.compile(r"(?<!\d),|,(?!\d{3}\b)")


def _leading_phrase(part: str, openers: frozenset[str]) -> bool:
    """Whether ``part`` is a phrase that may stand first or last: opened by one of
    ``openers``, at most eight words, quoting nothing."""
    words = part.rstrip(_CLOSING).split()
    return (
        0 < len(words) <= 8
        and words[0].casefold() in openers
        and not _QUOTED.search(part)
        and not _COLON.search(part)
        and not any(mark in part for mark in '"`“”;')
    )


def in_plain_order(text: str) -> str:
    """``text`` with each sentence's English leading phrase moved to the sentence's end, where
    it would stand without its comma (``In Rust, how do I read a file?`` -> ``how do I read a
    file in Rust?``): in a sentence that holds exactly one comma (a number's thousands
    separator is none), whose part before it opens with one of ``_LEADING_PHRASE``, runs for
    at most eight words and quotes nothing, and whose part after it is no list. Any other
    sentence as it is."""
    if "," not in text:
        return text
    text = _PLEASE.sub(r" \1\2", text)  # "Write a haiku, please." is "Please write a haiku."
    return " ".join(_sentence_in_plain_order(s) for s in _SENTENCES.split(text.strip()))


def _sentence_in_plain_order(sentence: str) -> str:
    commas = _COMMA.findall(sentence)
    if len(commas) != 1:
        return sentence
    head, main = _COMMA.split(sentence, maxsplit=1)
    head, main = head.strip(), main.strip()
    if _leading_phrase(main, _TRAILING_PHRASE) and not _leading_phrase(head, _LEADING_PHRASE):
        return f"{head} {main}"  # already at the end: "... in Python, unlike a list?"
    words = head.split()
    if not words or len(words) > 8 or words[0].casefold() not in _LEADING_PHRASE:
        return sentence
    if not main or _QUOTED.search(head) or _COLON.search(head) or any(m in head for m in '"`“”;'):
        return sentence
    body = main.rstrip(_CLOSING)
    if not body or _COLON.search(body) or any(mark in body for mark in ";\n"):
        return sentence
    if any(w.casefold().strip(_EDGES) in _RELATIVE for w in body.split()[1:]):
        return sentence  # at the end it could be the relative clause's: "cities that grew in 2020"
    return f"{body} {head[0].lower()}{head[1:]}{main[len(body) :]}"


#: French and Italian elided words: the word is what follows them (``l'Australie``).
_ELIDED = frozenset(
    _listed("""
    l d j m n s t c qu jusqu lorsqu puisqu quoiqu dell nell all dall sull quell un
    """)
)


def _base(word: str) -> str:
    """A word without its clitic: ``what's`` -> ``what``, ``france's`` -> ``france``,
    ``don't`` -> ``do`` (the negation is counted apart), ``l'Australie`` -> ``Australie``."""
    for mark in ("'", "\u2019"):
        if mark in word:
            base, _, suffix = word.partition(mark)
            if suffix == "t" and base.endswith("n"):
                return base[:-1] if base not in ("can", "won") else base
            if base.casefold() in _ELIDED and suffix:
                return suffix
            return base
    return word


def _opposite(one: str, other: str) -> bool:
    """Whether one word is the other's opposite: with a negating prefix (``mutable``,
    ``immutable``) or as listed (``before``, ``after``)."""
    if frozenset((one, other)) in _OPPOSITES:
        return True
    longer, shorter = (one, other) if len(one) > len(other) else (other, one)
    return any(longer == prefix + shorter for prefix in _NEGATING_PREFIXES)


def _negation(word: str) -> bool:
    return word in _NEGATIONS or word.endswith(("n't", "n\u2019t"))


#: English function words that change what is asked: the question word (``Why did Rome
#: fall?`` is not ``When did Rome fall?``; ``which`` asks what ``what`` does), the person
#: (``Can I vote?``, ``Can they vote?``; ``my IP``, ``your IP``), ``and`` and ``or``, and how
#: many (``some``, ``any``). Counted as content words.
_ASKING = {
    **{
        w: w
        for w in _listed("""
        how why when where who whom whose what
        i me my mine myself you your yours yourself he him his she her hers it its we us our
        ours they them their theirs and or nor but some any all every each both either few
        many much""")
    },
    "which": "what",
}


_ASKED = frozenset(_ASKING.values())


def _content(text: str, language: str = "") -> list[str]:
    """The content words, in order, case and plural "s" aside (``list`` and ``lists``): the
    words that are not function words of ``language`` (of any language when it is unknown),
    with English's ``_ASKING`` words among them."""
    function = _FUNCTION_IN.get(language, _FUNCTION)
    asking = _ASKING if language in ("en", "") else {}
    out: list[str] = []
    previous = ""
    for word in _WORD_OR_COMMA.findall(_URL.sub(" ", text)):
        if word == ",":  # where the commas are: "admins and active, or banned"
            out.append(",")
            continue
        lowered = word.casefold()
        folded = _base(lowered)
        if _negation(lowered):  # where it stands: "not all are odd" is not "all are not odd"
            out.append("not" if lowered in ("cannot", "not") or folded != lowered else folded)
        elif folded in asking:
            # "a few" is some, "few" hardly any
            few = folded in ("few", "little") and previous == "a"
            out.append("a " + folded if few else asking[folded])
        elif folded == "little" and previous == "a":
            out.append("a little")
        elif folded[:1].isdigit():  # a number where it stands: "In 2020, ... that grew"
            out.append(folded)
        elif not (folded in function or not folded):
            out.append(_singular(folded))
        previous = folded
    return out


#: English auxiliaries by the tense or mood they give a question (``Is Pluto a planet?`` is
#: not ``Was Pluto a planet?``). The present is no mark (``What is 15% of 80?`` asks what
#: ``Calculate 15% of 80`` does), nor are ``do``, ``can`` and ``could`` (``How do I`` and
#: ``How can I``); every other modal is its own.
_TENSE_OF = {
    **dict.fromkeys(_listed("can could ca"), "can"),
    **dict.fromkeys(_listed("was were did had"), "past"),
    **dict.fromkeys(_listed("will 'll wo"), "future"),
    **{w: w for w in _listed("would should shall may might must 'd")},
}


#: The modals that ask politely before ``you`` (``Could you explain``) or ``how`` (``How can
#: I``): no mood of their own there.
_POLITE = frozenset({"can", "would", "future"})


def _tenses(raw: list[str], language: str) -> tuple[str, ...]:
    """The tenses and moods an English text's auxiliaries give it (contractions included:
    ``didn't``, ``won't``, ``they'll``), each once, sorted. German ``was`` is "what": a text
    in another language has none."""
    if language not in ("en", ""):
        return ()
    found = set()
    words = [token.casefold().replace("\u2019", "'") for token in raw]
    for index, word in enumerate(words):
        base, mark, suffix = word.partition("'")
        if mark and suffix == "t" and base.endswith("n"):
            word = base[:-1]  # didn't -> did, won't -> wo, can't -> ca
        elif mark and base not in _ELIDED:
            word = "'" + suffix  # what's -> 's, they'll -> 'll
        tense = _TENSE_OF.get(word)
        if tense is None:
            continue
        after = words[index + 1] if index + 1 < len(words) else ""
        before = words[index - 1] if index else ""
        if tense in _POLITE and (after == "you" or (before == "how" and tense == "can")):
            continue  # "Can you explain", "How can I": asking, not a mood of its own
        found.add(tense)
    return tuple(sorted(found))


_ARTICLE_KIND = {"a": "a", "an": "a", "the": "the"}
#: A token's edges without the apostrophe that makes a plural possessive (``students'``).
_EDGES_BUT_APOSTROPHES = _EDGES.replace("'", "").replace("\u2019", "")


def _articled(text: str) -> dict[str, set[str]]:
    """The English words an article stands before, with the articles' kinds (``a`` for ``a``
    and ``an``, ``the``): ``the bar`` is not ``a bar``, nor ``the number of`` ``a number
    of``."""
    words = [_base(w.casefold()) for w in _WORD.findall(text)]
    found: dict[str, set[str]] = {}
    for article, word in pairwise(words):
        kind = _ARTICLE_KIND.get(article)
        if kind is not None and word not in _ARTICLE_KIND:
            found.setdefault(_singular(word), set()).add(kind)
    return found


#: English words that point (to a time, a place, a thing) and the word that points the other
#: way: one swapped for the other is another question (``this year`` / ``that year``, ``park
#: here`` / ``park there``), though both are function words.
_DEIXIS_PAIRS = (("this", "that"), ("these", "those"), ("here", "there"), ("now", "then"))


def _deixis_swapped(cached: str, new: str) -> bool:
    """Whether one text has a pointing word more where the other has its counterpart more:
    a swap, not a word added alone (``think that it will`` or ``is there`` stays a
    paraphrase)."""
    one = Counter(w.casefold() for w in _WORD.findall(cached))
    other = Counter(w.casefold() for w in _WORD.findall(new))
    for a, b in _DEIXIS_PAIRS:
        more_a, more_b = one[a] - other[a], one[b] - other[b]
        if (more_a > 0 and more_b < 0) or (more_a < 0 and more_b > 0):
            return True
    return False


def _instances(text: str) -> frozenset[str]:
    """The names an English indefinite article stands before: ``a Mars`` (a bar of it) is
    not ``Mars``, nor ``a Tesla`` ``Tesla``."""
    words = _WORD.findall(text)
    return frozenset(
        name.casefold()
        for article, name in pairwise(words)
        if article.casefold() in ("a", "an") and name[:1].isupper()
    )


def _possessives(text: str) -> dict[str, set[str]]:
    """The English words in the possessive, with their number (``students'`` plural,
    ``student's`` singular); not a function word's ``'s`` (``what's``, ``it's``)."""
    found: dict[str, set[str]] = {}
    for token in text.split():
        word = token.strip(_EDGES_BUT_APOSTROPHES).casefold().replace("\u2019", "'")
        if word.endswith("s'") and len(word) > 2:
            base, number = word[:-1], "plural"
        elif word.endswith("'s") and len(word) > 2:
            base, number = word[:-2], "singular"
        else:
            continue
        if base.isalpha() and base not in _FUNCTION and base != "let":
            found.setdefault(_singular(base), set()).add(number)
    return found


def _disagree(one: dict[str, set[str]], other: dict[str, set[str]]) -> bool:
    """Whether a word both texts mark (with an article, in the possessive) is marked
    otherwise in each."""
    return any(kinds.isdisjoint(other[word]) for word, kinds in one.items() if word in other)


def _prepositions(text: str) -> list[str]:
    return [w for w in (_base(w.casefold()) for w in _WORD.findall(text)) if w in _PREPOSITIONS]


def _one_within_the_other(one: list[str], other: list[str]) -> bool:
    """Whether the shorter list is the longer one with items left out (in the same order):
    a preposition added (``Who wrote X`` / ``Who is the author of X``) passes, one replaced
    (``into French`` / ``from French``) or two swapped does not."""
    shorter, longer = (one, other) if len(one) <= len(other) else (other, one)
    items = iter(longer)
    return all(any(item == wanted for item in items) for wanted in shorter)


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


_OPPOSITES = frozenset(
    frozenset((_singular(one), _singular(other)))
    for one, other in zip(_OPPOSITE_PAIRS[::2], _OPPOSITE_PAIRS[1::2], strict=True)
)


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
