"""The event catalogue: envelope, typed data, stable bytes, samples and webhook filters."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway_kit.events import (
    EVENT_TYPES,
    BudgetAlertData,
    Event,
    GuardianBlockData,
    KeyRotatedData,
    WebhookStaleData,
    event_matches,
    micro_usd,
    normalize_event_filter,
    sample_event,
    sha256_ref,
    usd,
)

NOW = datetime(2026, 3, 4, 5, 6, 7, 891_234, tzinfo=UTC)
README = Path(__file__).resolve().parent.parent / "README.md"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
# The README's samples are generated with these (see test_readme_shows_...).
README_NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
README_EVENT_ID = "evt_01hzy3k8c5qv7m2n4p6r8t0w9x"


def guardian_data(**changes: object) -> GuardianBlockData:
    fields: dict[str, object] = {
        "rule": "max-context-tokens",
        "key_id": "kid_1",
        "request_hash": sha256_ref(b"request"),
        "action": "blocked",
        "threshold": 8000,
        "observed": 9000,
    }
    return GuardianBlockData.model_validate({**fields, **changes})


def test_event_types_are_the_spec_catalogue_in_order() -> None:
    assert EVENT_TYPES == (
        "guardian.block",
        "budget.alert",
        "payment.succeeded",
        "payment.failed",
        "key.rotated",
        "account.low_balance",
        "security.event",
        "webhook.stale",
    )


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_every_event_type_round_trips_byte_for_byte(event_type: str) -> None:
    event = sample_event(event_type, workspace_id="ws_1", now=NOW)
    body = event.to_bytes()
    again = Event.from_bytes(body)
    assert again == event
    assert again.to_bytes() == body
    assert type(again.data) is type(event.data)
    payload = json.loads(body)
    assert list(payload) == ["event", "event_id", "workspace_id", "timestamp", "data"]
    assert payload["event"] == event_type
    assert payload["workspace_id"] == "ws_1"
    # Compact: stored once and sent as is, so no insignificant whitespace.
    assert body == json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def test_guardian_block_data_is_exactly_the_spec_shape() -> None:
    event = Event.create(guardian_data(), workspace_id="ws_1", now=NOW)
    data = json.loads(event.to_bytes())["data"]
    # The spec's six fields first, in its order; then the two documented extras.
    assert list(data) == [
        "rule",
        "key_id",
        "request_hash",
        "action",
        "threshold",
        "observed",
        "mode",
        "message",
    ]
    assert data["threshold"] == 8000
    assert isinstance(data["observed"], int)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", data["request_hash"])


@pytest.mark.parametrize(
    "request_hash",
    ["", "abc", "sha256:", "sha256:" + "A" * 64, "md5:" + "a" * 64, "sha256:" + "a" * 63],
)
def test_request_hash_must_be_sha256_hex(request_hash: str) -> None:
    with pytest.raises(ValidationError, match="request_hash"):
        guardian_data(request_hash=request_hash)


def test_timestamps_are_utc_milliseconds_with_a_z() -> None:
    plus_two = timezone(timedelta(hours=2))
    event = Event.create(guardian_data(), workspace_id="ws_1", now=NOW.astimezone(plus_two))
    payload = json.loads(event.to_bytes())
    assert payload["timestamp"] == "2026-03-04T05:06:07.891Z"
    for event_type in EVENT_TYPES:
        body = json.loads(sample_event(event_type).to_bytes())
        stamps = [body["timestamp"]] + [
            value for key, value in body["data"].items() if key.endswith("_at")
        ]
        assert all(TIMESTAMP.fullmatch(stamp) for stamp in stamps), stamps


def test_naive_timestamps_are_refused() -> None:
    with pytest.raises(ValidationError, match="timezone-aware"):
        Event.create(guardian_data(), workspace_id="ws_1", now=datetime(2026, 1, 1))


def test_event_ids_are_unique_and_prefixed() -> None:
    ids = {Event.create(guardian_data(), workspace_id="ws_1").event_id for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"evt_[0-9a-f]{32}", event_id) for event_id in ids)


def test_a_stored_event_keeps_its_id() -> None:
    event = Event.create(guardian_data(), workspace_id="ws_1")
    assert Event.from_bytes(event.to_bytes()).event_id == event.event_id


def test_create_takes_the_type_from_the_data() -> None:
    event = Event.create(guardian_data(), workspace_id="ws_1", now=NOW)
    assert event.event == "guardian.block"
    assert event.timestamp == NOW.replace(microsecond=891_000)


def test_data_of_another_type_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"guardian\.block event given for budget\.alert"):
        Event(
            event="budget.alert",
            event_id="evt_" + "0" * 26,
            workspace_id="ws_1",
            timestamp=NOW,
            data=guardian_data(),
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"event": "budget.exploded"}, "unknown event type 'budget.exploded'"),
        ({"extra": 1}, "extra"),
        ({"event_id": "evt_short"}, "event_id"),
        ({"workspace_id": "acme"}, "workspace_id"),
        ({"data": {"rule": "x"}}, "key_id"),
    ],
)
def test_bad_stored_bodies_are_refused(change: dict[str, object], message: str) -> None:
    payload = json.loads(sample_event("guardian.block", now=NOW).to_bytes())
    with pytest.raises(ValidationError, match=message):
        Event.from_bytes(json.dumps({**payload, **change}).encode())


def test_events_are_immutable() -> None:
    event = sample_event("budget.alert", now=NOW)
    with pytest.raises(ValidationError):
        event.workspace_id = "ws_other"  # type: ignore[misc]


@pytest.mark.parametrize("micro", [0, 1, 10, 123_456, 1_234_567, 40_125_500, 999_999_999_999_999])
def test_usd_amounts_are_exact_to_the_micro_dollar(micro: int) -> None:
    amount = usd(micro)
    assert Decimal(json.dumps(amount)) == Decimal(micro) / 1_000_000
    assert micro_usd(amount) == micro


def test_usd_fields_are_rounded_to_the_micro_dollar() -> None:
    data = BudgetAlertData(
        cap_usd=0.1 + 0.2,
        spent_usd=usd(1),
        verdict="warn",
        threshold_pct=80,
        period_reset_at=NOW,
    )
    assert json.loads(data.model_dump_json())["cap_usd"] == 0.3
    with pytest.raises(ValidationError, match="finite"):
        BudgetAlertData(
            cap_usd=float("nan"),
            spent_usd=0,
            verdict="warn",
            threshold_pct=80,
            period_reset_at=NOW,
        )


def test_key_rotated_never_carries_a_whole_key() -> None:
    with pytest.raises(ValidationError, match="key_prefix"):
        KeyRotatedData(
            key_id="kid_1",
            key_prefix="gk_live_" + "x" * 40,
            rotated_at=NOW,
            action="rotated",
        )


@pytest.mark.parametrize("url_host", ["hooks.example.com/path", "user@hooks.example.com", ""])
def test_webhook_stale_carries_a_host_only(url_host: str) -> None:
    with pytest.raises(ValidationError, match="url_host"):
        WebhookStaleData(
            webhook_id="wh_1",
            name="n",
            url_host=url_host,
            last_status=0,
            failed_event_id="evt_" + "0" * 26,
            stale_at=NOW,
        )


def test_sample_of_an_unknown_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown event type 'nope'"):
        sample_event("nope")


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_readme_shows_the_current_sample_of_each_type(event_type: str) -> None:
    event = sample_event(event_type, now=README_NOW, event_id=README_EVENT_ID)
    shown = json.dumps(json.loads(event.to_bytes()), indent=2)
    assert shown in README.read_text(), f"README sample of {event_type} is out of date"


# -- filters ------------------------------------------------------------------------------------


def test_omitted_filter_means_every_type() -> None:
    assert normalize_event_filter(None) is None
    assert all(event_matches(None, event_type) for event_type in EVENT_TYPES)


def test_listed_filter_receives_only_those_types() -> None:
    events = normalize_event_filter(["budget.alert", "key.rotated"])
    assert events == ("budget.alert", "key.rotated")
    received = [event_type for event_type in EVENT_TYPES if event_matches(events, event_type)]
    assert received == ["budget.alert", "key.rotated"]


def test_empty_filter_pauses_delivery() -> None:
    events = normalize_event_filter([])
    assert events == ()
    assert not any(event_matches(events, event_type) for event_type in EVENT_TYPES)


def test_duplicates_are_dropped_in_order() -> None:
    events = ["key.rotated", "budget.alert", "key.rotated", "budget.alert"]
    assert normalize_event_filter(events) == ("key.rotated", "budget.alert")


def test_unknown_types_are_named() -> None:
    with pytest.raises(ValueError, match=r"'budget\.alerts', 'everything'") as info:
        normalize_event_filter(["budget.alerts", "key.rotated", "everything"])
    assert "key.rotated'" not in str(info.value).split(";")[0]


def test_a_single_string_is_not_a_filter() -> None:
    with pytest.raises(ValueError, match="not a single string"):
        normalize_event_filter("budget.alert")
