"""``GET /metrics``: who may read it, what it counts, and labels that stay bounded."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway_kit import GatewayConfig
from gateway_kit.exceptions import StorageError
from gateway_kit.layers.cache.policy import CacheVerdict
from gateway_kit.observe.metrics import Metrics
from gateway_kit.observe.record import RequestRecord
from tests.fakes import COMPLETION, provisioned

pytestmark = pytest.mark.anyio

TOKEN = "operator-token-for-metrics-0123456789"
PRICED = [{"name": "gpt-fake", "provider": "up", "price_as": "gpt-4o-mini"}]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(found: dict[Any, float], name: str, **labels: str) -> float:
    return sum(
        value
        for (sample, pairs), value in found.items()
        if sample == name and all((k, v) in pairs for k, v in labels.items())
    )


async def scrape(env: Any, token: str | None = TOKEN) -> Any:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return await env.recorder.request("GET", "/metrics", headers=headers)


async def test_metrics_count_requests_verdicts_tokens_and_cost() -> None:
    config = {"metrics": {"enabled": True}, "admin": {"token": TOKEN}, "models": PRICED}
    async with provisioned("tiny", **config) as env:
        env.upstream.json_body = {
            **COMPLETION,
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
        statuses = [(await env.chat(temperature=0)).status for _ in range(4)]
        assert statuses == [200, 200, 200, 429]  # a miss, two hits, the burst limit
        await env.chat(key="gk_live_unknown")
        await env.chat(model="made-up-model-name")
        response = await scrape(env)
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/plain")
        found = samples(response.body.decode())
        assert total(found, "gateway_requests_total") == 6
        assert total(found, "gateway_requests_total", status="200", model="gpt-fake") == 3
        assert total(found, "gateway_requests_total", status="429") == 1
        assert total(found, "gateway_requests_total", status="401", model="(none)") == 1
        # A made-up model name is not a label value: (none).
        assert total(found, "gateway_requests_total", status="404", model="(none)") == 1
        assert not any("made-up" in str(key) for key in found)
        decided = {
            status: {
                dict(labels)["decided_by"]
                for (name, labels), _ in found.items()
                if name == "gateway_requests_total" and dict(labels)["status"] == status
            }
            for status in ("200", "429", "401", "404")
        }
        assert decided == {
            "200": {"upstream", "cache"},
            "429": {"limits"},
            "401": {"auth"},
            "404": {"gateway"},
        }
        assert total(found, "gateway_requests_total", decided_by="cache") == 2
        assert total(found, "gateway_cache_hits_total", kind="exact") == 2
        assert total(found, "gateway_verdicts_total", layer="cache", action="hit") == 2
        assert total(found, "gateway_verdicts_total", layer="limits", action="block") == 1
        assert total(found, "gateway_tokens_total", model="gpt-fake", kind="input") == 20
        assert total(found, "gateway_tokens_total", model="gpt-fake", kind="output") == 5
        assert total(found, "gateway_cost_usd_total", model="gpt-fake") > 0
        assert total(found, "gateway_request_duration_seconds_count", route="chat") == 6
        assert total(found, "gateway_webhook_queue_depth") == 0
        assert "workspace" not in response.body.decode()


async def test_metrics_answer_only_to_the_operator_unless_public() -> None:
    config = {"metrics": {"enabled": True}, "admin": {"token": TOKEN}}
    async with provisioned("scale", **config) as env:
        assert (await scrape(env, token=None)).status == 401
        assert (await scrape(env, token=env.key)).status == 401  # a workspace key is not enough
        assert (await scrape(env)).status == 200
    public = {"metrics": {"enabled": True, "access": "public"}}
    async with provisioned("scale", **public) as env:
        assert (await scrape(env, token=None)).status == 200


async def test_metrics_are_404_when_not_enabled() -> None:
    async with provisioned("scale", admin={"token": TOKEN}) as env:
        response = await scrape(env)
        assert response.status == 404
        assert response.json()["error"]["code"] == "not_found"


async def test_the_workspace_label_is_opt_in() -> None:
    config = {"metrics": {"enabled": True, "workspace_label": True, "access": "public"}}
    async with provisioned("scale", **config) as env:
        await env.chat()
        found = samples((await scrape(env, token=None)).body.decode())
        assert total(found, "gateway_requests_total", workspace=env.workspace_id) == 1


def record(**fields: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "request_id": "req_1",
        "at": 1_795_000_000.0,
        "route": "chat",
        "workspace_id": "ws_1",
        "key_id": "kid_1",
        "model": "m",
        "served_model": "m",
        "provider": "p",
        "status": 200,
        "error_code": None,
        "stream": True,
        "completed": True,
        "input_tokens": 10,
        "cached_tokens": 4,
        "output_tokens": 3,
        "reasoning_tokens": 1,
        "usage_estimated": False,
        "cost_micro_usd": 1_500_000,
        "savings_micro_usd": 500_000,
        "total_ms": 120.0,
        "upstream_ms": 100.0,
        "ttft_ms": 30.0,
        "verdicts": {"cache": CacheVerdict(action="miss")},
        "fallbacks": (),
        "retries": 0,
    }
    return RequestRecord(**{**base, **fields})


def test_metrics_alone_add_up_records_and_bucket_durations() -> None:
    metrics = Metrics(GatewayConfig().metrics, models=["m"], providers=["p"])
    metrics.observe(record())
    metrics.observe(record(served_model="other", model="other", status=502, ttft_ms=None))
    metrics.webhook_attempt("retry")
    found = samples(metrics.exposition()[0].decode())
    assert total(found, "gateway_requests_total", model="m", provider="p", status="200") == 1
    assert total(found, "gateway_requests_total", model="(none)", status="502") == 1
    assert total(found, "gateway_cost_usd_total", model="m") == 1.5
    assert total(found, "gateway_savings_usd_total", model="m") == 0.5
    assert total(found, "gateway_tokens_total", kind="cached") == 8  # both records' 4
    ttft = {
        dict(labels)["le"]: value
        for (name, labels), value in found.items()
        if name == "gateway_time_to_first_token_seconds_bucket"
    }
    assert (ttft["0.025"], ttft["0.05"], ttft["+Inf"]) == (0, 1, 1)
    assert total(found, "gateway_time_to_first_token_seconds_count") == 1
    assert total(found, "gateway_request_duration_seconds_count") == 2
    assert total(found, "gateway_webhook_attempts_total", outcome="retry") == 1


def test_savings_never_go_down_a_counter_what_cost_more_is_overspend() -> None:
    """A model pricier than the flagship saves a negative amount: added to the savings
    counter it went down, which Prometheus reads as a reset (rate() then inflated)."""
    metrics = Metrics(GatewayConfig().metrics, models=["m"], providers=["p"])
    metrics.observe(record(savings_micro_usd=500_000))
    metrics.observe(record(savings_micro_usd=-200_000))
    metrics.observe(record(savings_micro_usd=-100_000))
    found = samples(metrics.exposition()[0].decode())
    assert total(found, "gateway_savings_usd_total", model="m") == 0.5
    assert total(found, "gateway_overspend_usd_total", model="m") == 0.3


async def test_a_storage_failure_is_counted() -> None:
    metrics = Metrics(GatewayConfig().metrics)
    before = StorageError.raised

    async def failing() -> dict[Any, float]:
        raise StorageError("down")

    metrics.read_before_scrape("gateway_x", "gauge", "x", (), failing)
    metrics.read_at_scrape("gateway_errors", "counter", "e", (), lambda: {(): StorageError.raised})
    await metrics.refresh()  # the failed read keeps the last figures (none)
    found = samples(metrics.exposition()[0].decode())
    assert total(found, "gateway_errors_total") == before + 1
    assert total(found, "gateway_x") == 0


async def test_a_restarted_gateway_reads_its_figures_once_not_once_per_start() -> None:
    # The metrics outlive a gateway's restarts; each start registers its reads again. Only
    # the latest of a name is read: an earlier one would read a closed storage, every scrape.
    metrics = Metrics(GatewayConfig().metrics)
    reads: list[str] = []

    def reader(start: str, value: float) -> Any:
        async def read() -> dict[Any, float]:
            reads.append(start)
            return {(): value}

        return read

    metrics.read_before_scrape("gateway_queue", "gauge", "q", (), reader("first", 1))
    metrics.read_before_scrape("gateway_queue", "gauge", "q", (), reader("second", 2))
    await metrics.refresh()
    assert reads == ["second"]
    assert total(samples(metrics.exposition()[0].decode()), "gateway_queue") == 2


async def test_an_auto_models_requests_are_counted_under_its_name() -> None:
    config = {
        "metrics": {"enabled": True},
        "admin": {"token": TOKEN},
        "routing": {"auto": [{"name": "smart", "models": ["gpt-fake"]}]},
    }
    async with provisioned("tiny", **config) as env:
        statuses = [(await env.chat(model="smart")).status for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        found = samples((await scrape(env)).body.decode())
        # The refused one asked for `smart`, a name the gateway has: it was (none).
        assert total(found, "gateway_requests_total", status="429", model="smart") == 1


def test_a_request_whose_client_left_before_any_answer_is_decided_by_the_client() -> None:
    from gateway_kit.observe.metrics import decided_by

    # Gone during the upstream call (no routing verdict yet): it read "gateway", which means a
    # bad body or an unknown model.
    assert decided_by(record(status=0, verdicts={"cache": CacheVerdict(action="miss")})) == (
        "client"
    )
    assert decided_by(record(status=400, verdicts={})) == "gateway"
    assert decided_by(record(status=200, verdicts={"cache": CacheVerdict(action="hit")})) == (
        "cache"
    )
