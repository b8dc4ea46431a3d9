"""PII masking's core without ASGI: detection, masking into placeholders, and restoring
answers, whole and streamed split at every offset."""

from __future__ import annotations

import json
import random

import pytest

from gateway_kit.layers.pii import (
    BuiltinDetector,
    PatternDetector,
    StreamRestorer,
    Vault,
    mask_text,
    restore_text,
)
from gateway_kit.layers.pii.detectors import _KEY_PREFIXES as KEY_PREFIXES
from gateway_kit.layers.pii.detectors import _may_hold_a_key as may_hold_a_key
from gateway_kit.layers.pii.detectors import iban_valid, luhn_valid

DETECTORS = [BuiltinDetector(phone_region="US")]


def found(text: str, detectors: list[object] | None = None) -> list[tuple[str, str]]:
    """The (kind, value) pairs masking takes out of ``text``."""
    vault = Vault()
    mask_text(text, detectors or DETECTORS, vault)  # type: ignore[arg-type]
    return [(p[1:].rsplit("_", 1)[0], v) for p, v in vault.values.items()]


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("Write to anna.lindqvist@example.se today", "EMAIL", "anna.lindqvist@example.se"),
        ("jose+orders@correo.example.com.mx.", "EMAIL", "jose+orders@correo.example.com.mx"),
        ("Call (415) 555-2671 after 5", "PHONE", "(415) 555-2671"),
        ("mobile: +44 20 7946 0958", "PHONE", "+44 20 7946 0958"),
        ("Tel. 0049 30 901820", "PHONE", "0049 30 901820"),
        ("+33 1 42 68 53 00 est le standard", "PHONE", "+33 1 42 68 53 00"),
        # A trunk prefix in parentheses, a slash between the area code and the number.
        ("Call me on +44 (0)20 7946 0958 please", "PHONE", "+44 (0)20 7946 0958"),
        ("Tel. +49 (0)30 1234567", "PHONE", "+49 (0)30 1234567"),
        ("Ring +353 (0)1 234 5678", "PHONE", "+353 (0)1 234 5678"),
        ("Tel: +49 30/1234567", "PHONE", "+49 30/1234567"),
        # A number next to another: the run is cut down to the phone number.
        ("Reach me at +1 415 555 2671 24/7", "PHONE", "+1 415 555 2671"),
        ("Call +1 415-555-2671 2 times a day", "PHONE", "+1 415-555-2671"),
        ("Anna +46701234567 42 orders", "PHONE", "+46701234567"),
        ("Row 3 415-555-2671", "PHONE", "415-555-2671"),
        ("Row 3 (415) 555-2671.", "PHONE", "(415) 555-2671"),
        ("Call 415-555-2671/2672", "PHONE", "415-555-2671"),
        # Not ASCII: the digits' runs are read with any script's digits.
        ("Téléphone : +33 1 42 68 53 00", "PHONE", "+33 1 42 68 53 00"),
        ("IBAN für Zahlung: DE89370400440532013000", "IBAN", "DE89370400440532013000"),
        ("card 4111 1111 1111 1111 exp 12/28", "CARD", "4111 1111 1111 1111"),
        ("Amex 3782-822463-10005", "CARD", "3782-822463-10005"),
        ("5555555555554444", "CARD", "5555555555554444"),
        ("card 4111 1111 1111 1111 12/28", "CARD", "4111 1111 1111 1111"),
        ("ref 12 4012 8888 8888 1881", "CARD", "4012 8888 8888 1881"),
        ("IBAN DE89 3704 0044 0532 0130 00 please", "IBAN", "DE89 3704 0044 0532 0130 00"),
        ("pay to GB82WEST12345698765432", "IBAN", "GB82WEST12345698765432"),
        ("SSN 123-45-6789", "US_SSN", "123-45-6789"),
        ("server at 192.168.10.24, port 22", "IP_ADDRESS", "192.168.10.24"),
        ("v6 2001:db8:85a3::8a2e:370:7334 fails", "IP_ADDRESS", "2001:db8:85a3::8a2e:370:7334"),
        ("key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t", "API_KEY", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"),
        ("AKIAIOSFODNN7EXAMPLE in the logs", "API_KEY", "AKIAIOSFODNN7EXAMPLE"),
        # An AWS secret access key after its name (a credentials file, the environment, STS).
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "API_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            "API_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            '{"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}',
            "API_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            "ghp_1234567890abcdefghijklmnopqrstuvwxyz0",
            "API_KEY",
            "ghp_1234567890abcdefghijklmnopqrstuvwxyz0",
        ),
        (
            "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            "JWT",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        ),
        # Found by an outside probe, missed before: an unsigned token, a Stripe webhook
        # secret, a PGP private key block.
        (
            "token eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0NTY3ODkwIn0. sent",
            "JWT",
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0NTY3ODkwIn0.",
        ),
        (
            "STRIPE_WEBHOOK_SECRET=whsec_5f8a9d2c7e1b4a6f3d0c9b8a7e6d5c4b",
            "API_KEY",
            "whsec_5f8a9d2c7e1b4a6f3d0c9b8a7e6d5c4b",
        ),
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGX2abc\n=abcd\n"
            "-----END PGP PRIVATE KEY BLOCK-----",
            "API_KEY",
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGX2abc\n=abcd\n"
            "-----END PGP PRIVATE KEY BLOCK-----",
        ),
    ],
)
def test_each_kind_is_found_whole(text: str, kind: str, value: str) -> None:
    assert found(text) == [(kind, value)]


@pytest.mark.parametrize(
    "text",
    [
        "Order NW-1000007 shipped on 2026-11-25 at 09:01:07",  # an order number, a timestamp
        "Upgrade from v1.2.3.4 to 2.0.1",  # versions
        "Invoice 1234567890123 for 12.50 EUR",  # 13 digits, no issuer: not a card
        "4111 1111 1111 1112",  # a Visa prefix, a wrong check digit
        "DE89 3704 0044 0532 0130 01",  # an IBAN's shape, a wrong checksum
        "Unix time 1764064800, build 20261125",
        "ratio 3:4:5 and 12:30:45",  # colons that are no IPv6 address
        "sk-short and ghp_tooshort",
        "000-12-3456 is not an SSN",
        "The S3 bucket and EC2 instance",
        # Versions, however they are written (not dotted quads of an address).
        "Is Version: 4.0.0.0 of the assembly compatible?",
        "<Version>1.2.3.4</Version>",
        '"version": "2.0.1.3"',
        "pip install requests==2.31.0.1 fails",
        '[assembly: AssemblyVersion("1.0.0.0")]',
        # Code: a matrix product, paths (hexadecimal letters around "::").
        "y = x@self.weight.T + self.bias",
        "use abc::def;",
        "Add::add(a, b)",
        # An amount in groups of thousands.
        "World population is 8 045 311 447 people",
        # 40 characters of base64 not named a secret key (a hash, a blob).
        "the blob wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY in the docs",
        "secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYx",  # 41: not one
    ],
)
def test_near_misses_are_left_alone(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize("prefix", KEY_PREFIXES)
def test_every_key_prefix_lets_the_key_search_run(prefix: str) -> None:
    # The check before the search is written out by hand (one search for one character is
    # cheaper): it must pass on every prefix of the list.
    assert may_hold_a_key(f"the token {prefix}xyz, then") is True


def test_two_ibans_in_a_row_are_both_found() -> None:
    text = "From DE89 3704 0044 0532 0130 00 and GB82 WEST 1234 5698 7654 32."
    assert found(text) == [
        ("IBAN", "DE89 3704 0044 0532 0130 00"),
        ("IBAN", "GB82 WEST 1234 5698 7654 32"),
    ]


def test_checksums() -> None:
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("4111111111111112")
    assert iban_valid("gb82west12345698765432")
    assert not iban_valid("GB82WEST1234569876543")  # one character short


def test_international_phone_numbers_are_valid_exactly_when_libphonenumber_says_so() -> None:
    """The detector's own check of an international number (the library's rules with the
    patterns compiled once) agrees with ``phonenumbers.is_valid_number``: on every country
    code's example numbers of every type, and on random digits after each code."""
    phonenumbers = pytest.importorskip("phonenumbers")
    from gateway_kit.layers.pii.detectors import _InternationalNumbers

    def library(digits: str) -> bool:
        for size in (1, 2, 3):
            code = int(digits[:size])
            if code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE:
                national = digits[size:]
                if not national or (national[0] == "0" and code not in (39, 378, 379)):
                    return False
                number = phonenumbers.PhoneNumber(
                    country_code=code,
                    national_number=int(national),
                    italian_leading_zero=national[0] == "0" or None,
                )
                return bool(phonenumbers.is_valid_number(number))
        return False

    rng = random.Random(7)
    cases: list[str] = []
    for code, regions in phonenumbers.COUNTRY_CODE_TO_REGION_CODE.items():
        for region in regions:
            examples = (
                [phonenumbers.example_number_for_non_geo_entity(code)]
                if region == "001"
                else [phonenumbers.example_number_for_type(region, kind) for kind in range(12)]
            )
            cases += [
                f"{code}{phonenumbers.national_significant_number(example)}"
                for example in examples
                if example is not None
            ]
        cases += [f"{code}{rng.randrange(10 ** rng.randint(4, 12)):0{rng.randint(4, 12)}d}"]
        cases += [f"{code}{rng.randrange(10**12)}" for _ in range(20)]
    fast = _InternationalNumbers(phonenumbers)
    assert sum(map(library, cases)) > 1000  # the examples are valid numbers
    assert [case for case in cases if fast.valid(case) != library(case)] == []


def test_a_workspaces_own_patterns_and_allow_list() -> None:
    detectors = [*DETECTORS, PatternDetector({"acme_id": r"ACME-\d+"})]
    vault = Vault()
    masked = mask_text(
        "ACME-4471 for help@acme.example, ops@acme.example",
        detectors,
        vault,
        allow=frozenset({"help@acme.example"}),
    )
    assert masked == "<ACME_ID_1> for help@acme.example, <EMAIL_1>"


# -- masking -----------------------------------------------------------------------------------


def test_the_same_value_gets_the_same_placeholder_and_others_the_next() -> None:
    vault = Vault()
    first = mask_text("From a@x.example to b@x.example", DETECTORS, vault)
    again = mask_text("Reply to a@x.example, call +44 20 7946 0958", DETECTORS, vault)
    assert first == "From <EMAIL_1> to <EMAIL_2>"
    assert again == "Reply to <EMAIL_1>, call <PHONE_1>"
    assert vault.counts == {"EMAIL": 3, "PHONE": 1}


def test_history_resent_masks_the_same_way_on_every_turn() -> None:
    history = ["I am a@x.example", "Noted, <EMAIL_1>.", "My card is 4111 1111 1111 1111"]

    def turn(messages: list[str]) -> list[str]:
        vault = Vault()
        return [mask_text(m, DETECTORS, vault) for m in messages]

    assert turn(history[:1]) == turn(history)[:1]
    assert turn(history)[2] == "My card is <CARD_1>"


def test_a_placeholder_the_client_wrote_is_never_issued() -> None:
    vault = Vault()
    text = "Template: <EMAIL_1>. Mine: a@x.example"
    vault.reserve(text)
    masked = mask_text(text, DETECTORS, vault)
    assert masked == "Template: <EMAIL_1>. Mine: <EMAIL_2>"
    assert restore_text("Sent to <EMAIL_2> per <EMAIL_1>", vault.values) == (
        "Sent to a@x.example per <EMAIL_1>"
    )


def test_a_name_the_client_wrote_in_any_form_restore_reads_is_never_issued() -> None:
    vault = Vault()
    for text in ("x = email_1", "{EMAIL_2}", "<email_3>", "[EMAIL_4]", '"\\u003cEMAIL_5\\u003e"'):
        vault.reserve(text)
    vault.reserve("send_email_6 and EMAIL_7x are other names")
    masked = mask_text("a@x.example", DETECTORS, vault)
    assert masked == "<EMAIL_6>"
    keyed = Vault(lambda kind, value: 1)
    keyed.reserve("email_1")
    assert mask_text("a@x.example", DETECTORS, keyed) == "<EMAIL_2>"


def test_keyed_numbers_give_way_to_a_number_taken_in_the_request() -> None:
    vault = Vault(lambda kind, value: 7)  # every value wants number 7
    vault.reserve("a template's <EMAIL_8>")
    assert mask_text("a@x.example, b@x.example, a@x.example", DETECTORS, vault) == (
        "<EMAIL_7>, <EMAIL_9>, <EMAIL_7>"
    )


def test_keyed_numbers_depend_on_the_secret_and_the_value_only() -> None:
    from gateway_kit.layers.pii.masking import keyed_numbering

    one, other = keyed_numbering(b"k" * 32), keyed_numbering(b"j" * 32)
    assert one("EMAIL", "a@x.example") == one("EMAIL", "a@x.example")
    assert 1 <= one("EMAIL", "a@x.example") <= 9999
    numbers = {one("EMAIL", f"user{i}@x.example") for i in range(50)}
    assert len(numbers) >= 49  # spread: a collision in 50 is possible, two are not likely
    assert [one("EMAIL", f"u{i}@x") for i in range(20)] != [
        other("EMAIL", f"u{i}@x") for i in range(20)
    ]


# -- restore -----------------------------------------------------------------------------------

VALUES = {"<EMAIL_1>": "anna@example.se", "<EMAIL_12>": "bo@example.se", "<PHONE_1>": "+1 415"}


def test_restore_is_lenient_for_issued_placeholders_only() -> None:
    text = "Mail <email_1>, [EMAIL_12] or EMAIL_1; not <PHONE_2>, EMAIL_123 or XEMAIL_1."
    assert restore_text(text, VALUES) == (
        "Mail anna@example.se, bo@example.se or anna@example.se; not <PHONE_2>, EMAIL_123 or "
        "XEMAIL_1."
    )


ANSWER = (
    "Dear customer, we wrote to <EMAIL_1> and to <EMAIL_12>; call <PHONE_1>. EMAIL_1 is "
    "confirmed — ünïcödé ✓, 4 < 5 and [x]."
)


def test_a_stream_split_anywhere_gives_back_exactly_the_whole_restored_answer() -> None:
    whole = restore_text(ANSWER, VALUES)
    for cut in range(len(ANSWER) + 1):
        for second in (cut, min(len(ANSWER), cut + 3)):
            restorer = StreamRestorer(VALUES)
            parts = [ANSWER[:cut], ANSWER[cut:second], ANSWER[second:]]
            out = "".join(restorer.feed(p) for p in parts) + restorer.close()
            assert out == whole, (cut, second)


def test_json_escaped_brackets_are_restored_whole_and_split_anywhere() -> None:
    """Go's encoding/json writes ``<`` and ``>`` as ``\\u003c`` and ``\\u003e``: a placeholder
    so written in a tool call's arguments is restored, whichever way the stream is cut; an
    escape that is none of those is not held."""
    arguments = '{"to": "\\u003cEMAIL_1\\u003e", "cc": "\\u003CEMAIL_12\\u003E", "n": "a\\\\b"}'
    whole = restore_text(arguments, VALUES)
    assert json.loads(whole) == {"to": "anna@example.se", "cc": "bo@example.se", "n": "a\\b"}
    for cut in range(len(arguments) + 1):
        restorer = StreamRestorer(VALUES)
        out = restorer.feed(arguments[:cut]) + restorer.feed(arguments[cut:]) + restorer.close()
        assert out == whole, cut
    assert StreamRestorer(VALUES).feed('"a\\nb\\"') == '"a\\nb\\"'


def test_a_stream_one_character_at_a_time_holds_back_only_a_possible_placeholder() -> None:
    restorer = StreamRestorer(VALUES)
    given = [restorer.feed(char) for char in "Hi there <EMAIL_1> ok"]
    # Ordinary text leaves at once; '<EMAIL_1>' is held until it closes.
    assert "".join(given[:9]) == "Hi there "
    assert given[9:17] == [""] * 8
    assert given[17] == "anna@example.se"
    assert "".join(given[18:]) + restorer.close() == " ok"


def test_tool_call_arguments_restore_into_valid_json() -> None:
    arguments = json.dumps({"to": "<EMAIL_1>", "cc": ["<EMAIL_12>"]})
    restored = restore_text(arguments, VALUES)
    assert json.loads(restored) == {"to": "anna@example.se", "cc": ["bo@example.se"]}


def test_no_placeholders_issued_means_nothing_held() -> None:
    restorer = StreamRestorer({})
    assert restorer.feed("<EMA") == "<EMA"
    assert restorer.close() == ""


def test_streamed_tool_call_arguments_restore_per_call_and_flush_at_the_finish() -> None:
    from gateway_kit.layers.pii.transform import RestoreTransform
    from gateway_kit.sse import SSEEvent

    def event(index: int, arguments: str, finish: str | None = None) -> SSEEvent:
        call = {"index": index, "function": {"arguments": arguments}}
        delta = {"tool_calls": [call]} if arguments else {}
        return SSEEvent.of_json(
            {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        )

    transform = RestoreTransform(VALUES)
    events = [
        event(0, '{"to": "<EMA'),
        event(1, '{"cc": "<EMAIL_'),
        event(0, 'IL_1>"}'),
        event(1, "12"),
        event(0, "", finish="tool_calls"),
    ]
    out = [e for ev in events for e in transform.event(ev)] + list(transform.close())
    arguments: dict[int, str] = {}
    for e in out:
        for call in e.json()["choices"][0]["delta"].get("tool_calls") or ():
            arguments[call["index"]] = (
                arguments.get(call["index"], "") + call["function"]["arguments"]
            )
    assert json.loads(arguments[0]) == {"to": "anna@example.se"}
    assert arguments[1] == '{"cc": "bo@example.se'  # its stream ended there: given out whole


def test_a_reasoning_models_thinking_is_restored_and_given_out_before_its_answer() -> None:
    from gateway_kit.layers.pii.transform import RestoreTransform
    from gateway_kit.pipeline.transforms import JSONBody
    from gateway_kit.sse import SSEEvent

    def event(finish: str | None = None, **delta: str) -> SSEEvent:
        return SSEEvent.of_json(
            {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        )

    transform = RestoreTransform(VALUES)
    events = [
        event(role="assistant", content=""),
        event(reasoning_content="Write to <EMAIL_"),
        event(reasoning_content="1> or <PHO"),  # the thinking ends holding "<PHO"
        event(content="Mail <EMAIL_1"),
        event(content=">.", finish="stop"),
    ]
    deltas = [e.json()["choices"][0]["delta"] for ev in events for e in transform.event(ev)]
    assert not transform.close()
    thinking = "".join(d.get("reasoning_content", "") for d in deltas)
    assert thinking == "Write to anna@example.se or <PHO"
    assert "".join(d.get("content", "") for d in deltas) == "Mail anna@example.se."
    # What the thinking held went out with the answer's first piece, not after the answer.
    assert deltas[3] == {"content": "Mail ", "reasoning_content": "<PHO"}

    body = JSONBody(
        json.dumps(
            {"choices": [{"message": {"reasoning": "To <PHONE_1>", "content": "<EMAIL_12>"}}]}
        ).encode()
    )
    RestoreTransform(VALUES).body(body)
    message = body.json()["choices"][0]["message"]
    assert message == {"reasoning": "To +1 415", "content": "bo@example.se"}
