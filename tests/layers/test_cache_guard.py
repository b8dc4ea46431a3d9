"""The semantic cache's lexical guard, as plain functions (no ASGI): what two prompts must
share word for word before one's answer serves the other."""

from __future__ import annotations

import pytest

from gateway_kit.cache.guard import in_plain_order, same_meaning_words, signature


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("In Rust, how do I read a file?", "how do I read a file in Rust?"),
        ("From 10, subtract 3", "subtract 3 from 10"),
        ("If x is empty, return 0.", "return 0 if x is empty."),
        ("With bash, how do I list .txt files?", "how do I list .txt files with bash?"),
        # Left as they are: no leading phrase, a verb first, several commas, a quotation, a
        # second sentence, a list after a colon, a long first part.
        ("How do I read a file in Rust?", "How do I read a file in Rust?"),
        ("Sort the list, then reverse it", "Sort the list, then reverse it"),
        ("In Python, how do I sort, dedupe and sum?", "In Python, how do I sort, dedupe and sum?"),
        ('In "Hamlet", who dies?', 'In "Hamlet", who dies?'),
        ("In Python, sort it. Then sum it.", "sort it in Python. Then sum it."),
        ("I bake. Without eggs, what binds?", "I bake. what binds without eggs?"),
        ("If I invest $1,000 at 5%, what do I get?", "what do I get if I invest $1,000 at 5%?"),
        ("For my sister's birthday, write a toast.", "write a toast for my sister's birthday."),
        (
            "Given sides of 3, 4 and 5, what is the area?",
            "Given sides of 3, 4 and 5, what is the area?",
        ),
        ("In 'Hamlet', who dies?", "In 'Hamlet', who dies?"),
        ("For dinner, cook: rice and beans", "For dinner, cook: rice and beans"),
        (
            "In the town where I grew up as a small child, what was there?",
            "In the town where I grew up as a small child, what was there?",
        ),
    ],
)
def test_a_leading_phrase_is_read_where_it_would_stand_without_its_comma(
    text: str, plain: str
) -> None:
    assert in_plain_order(text) == plain


@pytest.mark.parametrize(
    ("cached", "new"),
    [
        (
            "In JavaScript, what's the difference between let and const?",
            "What's the difference between let and const in JavaScript?",
        ),
        (
            "For 4 people, give me a recipe for chicken curry",
            "Give me a recipe for chicken curry for 4 people",
        ),
        ("How many tablespoons are in a cup?", "In a cup, how many tablespoons are there?"),
        (
            "On Linux, how can I find which process is using port 8080?",
            "How can I find which process is using port 8080 on Linux?",
        ),
        (
            "Without using a loop, how do I sum a list in Python?",
            "How do I sum a list in Python without using a loop?",
        ),
        ("From 10, subtract 3", "Subtract 3 from 10"),
    ],
)
def test_the_same_request_with_its_leading_phrase_moved_passes(cached: str, new: str) -> None:
    assert same_meaning_words(cached, new)
    assert same_meaning_words(new, cached)


@pytest.mark.parametrize(
    ("cached", "new"),
    [
        ("From 10, subtract 3", "Subtract 10 from 3"),
        ("From 3, subtract 10", "Subtract 3 from 10"),
        ("Sort the list, then reverse it", "Reverse the list, then sort it"),
        (
            "In Celsius, what is 100 degrees Fahrenheit?",
            "What is 100 degrees Celsius in Fahrenheit?",
        ),
        ("In Python, how do I read a file?", "In Java, how do I read a file?"),
        ("If the list is empty, return 0", "If the list is not empty, return 0"),
        ("For my brother, write a poem about a dog.", "Write a poem for my dog about my brother."),
        ("Into French, translate 'chat'.", "From French, translate 'chat'."),
        ("For my teacher, write a note from my son.", "For my son, write a note from my teacher."),
        ("What is 2 + 3 \u00d7 4?", "What is (2 + 3) \u00d7 4?"),
        ("In Python, what is print('a' * 3 + 'b')?", "In Python, what is print('a' + 'b' * 3)?"),
        ("What time will it be 2 hours later?", "What time was it 2 hours earlier?"),
        ("convert list to tuple, in Python", "convert tuple to list in Python"),
    ],
)
def test_what_order_or_a_word_changes_still_fails(cached: str, new: str) -> None:
    assert not same_meaning_words(cached, new)
    assert not same_meaning_words(new, cached)


def test_a_function_word_after_a_number_is_no_unit_but_a_symbol_is() -> None:
    units = 7  # where the units are in a signature
    assert signature("use port 8080 on Linux")[units] == signature("on Linux use port 8080")[units]
    assert signature("from 2 to 3")[units] == ((), (), ())
    assert signature("5 kg of flour")[units] != signature("5 lb of flour")[units]
    assert signature("5 in")[units] == ((), (), ())  # "in": a word, not inches
    assert signature("5in")[units] == ((), ("in",), ())  # without the space: inches


@pytest.mark.parametrize(
    ("cached", "new"),
    [
        ("Remove duplicates before sorting", "Remove duplicates after sorting"),
        ("Sort the rows in ascending order", "Sort the rows in descending order"),
        ("Find the largest number in the list", "Find the smallest number in the list"),
        ("How do I encrypt a file with openssl?", "How do I decrypt a file with openssl?"),
        ("Which foods are safe for dogs?", "Which foods are unsafe for dogs?"),
    ],
)
def test_a_word_replaced_by_its_opposite_fails_even_when_replacements_are_let_through(
    cached: str, new: str
) -> None:
    assert not same_meaning_words(cached, new, lenient=True)
    assert not same_meaning_words(cached, new)


def test_only_the_lenient_guard_lets_a_replaced_word_through() -> None:
    cached = "How do I remove duplicates from a list in Python?"
    synonym = "How do I eliminate duplicates from a list in Python?"
    assert not same_meaning_words(cached, synonym)
    assert same_meaning_words(cached, synonym, lenient=True)
    # A word more is a constraint more, in either guard.
    vegan = ("Give me a recipe for chocolate cake", "Give me a vegan recipe for chocolate cake")
    assert not same_meaning_words(*vegan, lenient=True)


def test_an_elided_article_is_not_the_word() -> None:
    """French ``l'Australie``: the word is what follows the apostrophe (English ``what's``:
    what comes before it)."""
    australia = "Quelle est la capitale de l'Australie ?"
    assert not same_meaning_words(australia, "Quelle est la capitale de l'Autriche ?")
    assert same_meaning_words(australia, "quelle est la capitale de l'Australie")
    assert same_meaning_words("What's the capital of France?", "What is the capital of France")


@pytest.mark.parametrize(
    ("cached", "new", "same"),
    [
        # the tense and mood an auxiliary gives a question
        ("Is Pluto a planet?", "Was Pluto a planet?", False),
        ("Who is the CEO of Twitter?", "Who was the CEO of Twitter?", False),
        ("What was the population of Tokyo?", "What will the population of Tokyo be?", False),
        ("What did Einstein discover?", "What would Einstein discover?", False),
        ("Should I drink coffee?", "Must I drink coffee?", False),
        ("Who won't win the cup?", "Who didn't win the cup?", False),
        ("How do I reverse a list in Python?", "How can I reverse a list in Python?", True),
        ("What's the capital of France?", "What is the capital of France?", True),
        ("Was ist die Hauptstadt von Spanien?", "Was ist die Hauptstadt von Spanien", True),
        # the question word, the person, and/or
        ("Why did the Roman Empire fall?", "When did the Roman Empire fall?", False),
        ("Where was Mozart born?", "When was Mozart born?", False),
        ("Can I vote at 17 in Austria?", "Can they vote at 17 in Austria?", False),
        ("What is my IP address?", "What is your IP address?", False),
        ("Is coffee or tea healthier?", "Is coffee and tea healthier?", False),
        ("Write a poem about the sea for me", "Write a poem about me for the sea", False),
        ("What is the capital of Australia?", "Which is the capital of Australia?", True),
        ("Can a dog eat grapes?", "Can dogs eat grapes?", True),
    ],
)
def test_tense_question_word_person_and_or_are_kept_by_either_guard(
    cached: str, new: str, same: bool
) -> None:
    assert same_meaning_words(cached, new) is same
    assert same_meaning_words(cached, new, lenient=True) is same


@pytest.mark.parametrize(
    ("cached", "new", "same"),
    [
        ("Translate to Spanish: I live here.", "Translate to Spanish: I live there.", False),
        (
            "Translate into French: I'm sorry, I love you.",
            "Translate into French: I'm sorry I love you.",
            False,
        ),
        (
            "Translate to Spanish: a dog bit the man.",
            "Translate to Spanish: the dog bit a man.",
            False,
        ),
        (
            "Translate to Spanish: a dog bit the man.",
            "Translate to Spanish:  a dog bit the man. ",
            True,
        ),
        ("Translate: Hi. In the morning, I run.", "Translate: Hi. I run in the morning.", False),
        ("Translate to Spanish, please: I run.", "Please translate to Spanish: I run.", True),
        ("In bash, what does echo '$HOME' print?", 'In bash, what does echo "$HOME" print?', False),
        ('What does "carpe diem" mean?', "What does \u201ccarpe diem\u201d mean?", True),
        ("What does the regex a.b match?", "What does the regex a\\.b match?", False),
        (
            "If I leave at 9:00 am, when do I arrive?",
            "When do I arrive if I leave at 9:00 am?",
            True,
        ),
    ],
)
def test_text_to_work_on_quotation_marks_and_code_symbols_are_kept(
    cached: str, new: str, same: bool
) -> None:
    assert same_meaning_words(cached, new) is same


@pytest.mark.parametrize(
    ("cached", "new", "same"),
    [
        # case beyond a capital first letter, flags, minus signs, symbols, emoji
        ("What is the molar mass of NO?", "What is the molar mass of No?", False),
        ("What does git log -S do?", "What does git log -s do?", False),
        ("What is the square root of -9?", "What is the square root of 9?", False),
        ("Is 3-4 days enough for Rome?", "Is 3-4 days enough for Rome", True),
        ("In bash, what does $? contain?", "In bash, what does $! contain?", False),
        (
            "In TypeScript, what does user!.name mean?",
            "In TypeScript, what does user?.name mean?",
            False,
        ),
        ("Is a man-eating shark dangerous?", "Is a man eating shark dangerous?", False),
        ("What does \U0001f480 mean in a text?", "What does \u2764 mean in a text?", False),
        ("Quelle est la capitale de l'Australie ?", "Quelle est la capitale de l'Australie?", True),
        # a few / few, negation where it stands, commas that group
        (
            "Is it true that few students enjoy math?",
            "Is it true that a few students enjoy math?",
            False,
        ),
        (
            "Is it true that not all prime numbers are odd?",
            "Is it true that all prime numbers are not odd?",
            False,
        ),
        (
            "Write a query for users who are admins and active, or banned",
            "Write a query for users who are admins, and active or banned",
            False,
        ),
        # can is a mood of its own, but not in "how can I" nor "can you"
        (
            "Can a landlord enter my flat without notice?",
            "Does a landlord enter my flat without notice?",
            False,
        ),
        ("Can you explain recursion?", "Would you explain recursion?", True),
        # a leading phrase is not moved over a relative clause (it could be the clause's)
        (
            "In 2020, how many people lived in cities that grew?",
            "How many people lived in cities that grew in 2020?",
            False,
        ),
        # a trailing phrase's comma, and "please" with its comma
        (
            "Unlike a list, why can't a tuple change?",
            "Why can't a tuple change, unlike a list?",
            True,
        ),
        ("Please write a haiku about autumn.", "Write a haiku about autumn, please.", True),
        (
            "\u00bfC\u00f3mo invierto una lista en Python?",
            "C\u00f3mo invierto una lista en Python?",
            True,
        ),
        # an article's kind before the same word; a possessive's number
        ("How hard is the bar?", "How hard is a bar?", False),
        ("What is the Milky Way made of?", "What is a Milky Way made of?", False),
        (
            "Does a number of students take a plural verb?",
            "Does the number of students take a plural verb?",
            False,
        ),
        ("How tall is the Eiffel Tower?", "How tall is Eiffel Tower?", True),  # only one has it
        ("How big is Mars?", "How big is a Mars?", False),  # a name with "a": an instance of it
        ("Is Tesla a good buy?", "Is a Tesla a good buy?", False),
        ("Can a dog eat grapes?", "Can the dog eat grapes?", False),  # a lost hit: safe
        ("How do I sort a list in Python?", "How do I sort lists in Python?", True),
        (
            "How do I calculate my students' average grade?",
            "How do I calculate my student's average grade?",
            False,
        ),
        ("What's my sister's favourite colour?", "What is my sister's favourite colour?", True),
    ],
)
def test_what_a_rule_aware_attack_found(cached: str, new: str, same: bool) -> None:
    assert same_meaning_words(cached, new) is same


@pytest.mark.parametrize(
    ("cached", "new"),
    [
        # Served to a probe at similarities 0.96 to 0.99: pointing words are function words.
        ("Which team won the league this year?", "Which team won the league that year?"),
        ("What happened in the markets this week?", "What happened in the markets that week?"),
        ("What is the weather like here today?", "What is the weather like there today?"),
        ("Can I park here?", "Can I park there?"),
        ("How far is the station from here?", "How far is the station from there?"),
        ("Should I sell these shares?", "Should I sell those shares?"),
        ("What should I do now?", "What should I do then?"),
    ],
)
def test_a_pointing_word_swapped_for_its_counterpart_is_another_question(
    cached: str, new: str
) -> None:
    assert not same_meaning_words(cached, new)
    assert not same_meaning_words(new, cached)
    assert not same_meaning_words(cached, new, lenient=True)


@pytest.mark.parametrize(
    ("cached", "new"),
    [
        ("Do you think it will rain tomorrow?", "Do you think that it will rain tomorrow?"),
        ("Is the museum open on Sunday?", "Is the museum open on Sunday then?"),
    ],
)
def test_a_pointing_word_added_alone_is_no_swap(cached: str, new: str) -> None:
    assert same_meaning_words(cached, new)
