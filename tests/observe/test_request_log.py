"""The request log through the stack: a record per request that reached the chat or embeddings
route (answered, refused, failed upstream, cut by the client), the API that pages and filters
it, the usage totals, and what happens when the storage cannot take the records."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest

from gateway_kit.accounts.scopes import ROLES, KeyScope
from gateway_kit.exceptions import StorageError
from gateway_kit.storage import MemoryStorage
from tests.fakes import COMPLETION, DONE, FakeUpstream, ScriptedStream, chunk, provisioned

pytestmark = pytest.mark.anyio

PRICED = {"models": [{"name": "gpt-fake", "provider": "up", "price_as": "gpt-4o-mini"}]}
USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}


def priced_answer() -> dict[str, Any]:
    message = {"role": "assistant", "content": "ANSWER-TEXT-42"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {**COMPLETION, "choices": [choice], "usage": USAGE}


async def records(env: Any, query: str = "", key: str | None = None) -> Any:
    await env.gateway.requests.flush()
    path = f"/api/v1/workspaces/{env.workspace_id}/requests"
    return await env.recorder.request(
        "GET", path + (f"?{query}" if query else ""), headers=env.auth(key)
    )


async def test_an_answered_request_leaves_one_record_with_what_it_cost() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = priced_answer()
        prompt = [{"role": "user", "content": "Tell me about PROMPT-TEXT-42"}]
        answered = await env.chat(temperature=0.5, messages=prompt)
        assert answered.status == 200
        listed = await records(env)
        assert listed.status == 200
        page = listed.json()
        assert page["object"] == "list"
        assert page["has_more"] is False
        [record] = page["data"]
        key_id = (await env.gateway.keys.list(env.workspace_id))[0].key_id
        assert record["id"] == answered.headers["x-request-id"]
        assert record["object"] == "gateway.request"
        assert record["created_at"].endswith("Z")
        assert record["workspace_id"] == env.workspace_id
        assert record["key_id"] == key_id
        assert (record["route"], record["model"], record["served_model"]) == (
            "chat",
            "gpt-fake",
            "gpt-fake",
        )
        assert (record["provider"], record["status"], record["error_code"]) == ("up", 200, None)
        assert record["stream"] is False
        assert record["completed"] is True
        assert record["usage"] == {
            "input_tokens": 20,
            "cached_tokens": 0,
            "output_tokens": 5,
            "reasoning_tokens": 0,
            "estimated": False,
        }
        cost = answered.headers["x-gateway-cost-usd"]
        assert record["cost_micro_usd"] == round(float(cost) * 1_000_000) > 0
        assert record["latency_ms"]["total"] >= record["latency_ms"]["upstream"] >= 0
        assert record["latency_ms"]["ttft"] is None  # not streamed
        assert record["verdicts"]["limits"] == {"action": "pass"}
        assert record["verdicts"]["routing"]["action"] == "served"
        assert record["verdicts"]["cache"] == {"action": "bypass", "reason": "temperature"}
        assert record["fallbacks"] == []
        # Nothing of the prompt or the answer, nor the key.
        text = json.dumps(record)
        assert "PROMPT-TEXT-42" not in text
        assert "ANSWER-TEXT-42" not in text
        assert env.key not in text


async def test_refused_requests_are_recorded_with_the_code_the_client_saw() -> None:
    async with provisioned("tiny") as env:  # 5 requests a month, 3 a minute
        statuses = [(await env.chat()).status for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        data = (await records(env)).json()["data"]
        assert [r["status"] for r in data] == [429, 200, 200, 200]  # newest first
        refused = data[0]
        assert refused["error_code"] == "rate_limit_exceeded"
        assert refused["verdicts"]["limits"]["action"] == "block"
        assert refused["served_model"] is None
        assert refused["cost_micro_usd"] is None
        assert "routing" not in refused["verdicts"]  # it never got that far


async def test_a_fault_inside_is_a_500_with_its_request_id_recorded_as_such(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in a layer: the client gets the OpenAI-shaped 500 through the request's own
    headers, the record says 500 ``internal_error`` (once status 0, "incomplete"), the quota
    is given back, and the traceback is logged once with the request id."""

    def broken(*args: Any) -> bytes:
        raise RuntimeError("a bug")

    async with provisioned("scale") as env:
        env.upstream.json_body = COMPLETION
        monkeypatch.setattr("gateway_kit.layers.cache.policy.CachePolicy.key", broken)
        failed = await env.chat(temperature=0)
        assert failed.status == 500
        assert failed.json()["error"]["code"] == "internal_error"
        request_id = failed.headers["x-request-id"]
        assert "server-timing" in failed.headers
        [record] = (await records(env)).json()["data"]
        assert (record["id"], record["status"], record["error_code"]) == (
            request_id,
            500,
            "internal_error",
        )
        assert await env.used_requests() == 0
        logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(logged) == 1
        assert request_id in logged[0].getMessage()
        assert logged[0].exc_info is not None
        monkeypatch.undo()
        assert (await env.chat(temperature=0)).status == 200


async def test_an_unknown_key_is_refused_and_belongs_to_no_workspace_log() -> None:
    async with provisioned("scale") as env:
        assert (await env.chat(key="gk_live_not_a_key")).status == 401
        assert (await records(env)).json()["data"] == []


async def test_an_upstream_failure_is_recorded_and_logged_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with provisioned("scale", routing={"retries": 0}) as env:
        env.upstream.status = 500
        env.upstream.json_body = {"error": {"message": "boom", "type": "server_error"}}
        with caplog.at_level("INFO", logger="gateway_kit.requests"):
            failed = await env.chat()
        assert failed.status == 502
        [record] = (await records(env)).json()["data"]
        assert (record["status"], record["error_code"]) == (502, "upstream_unavailable")
        assert record["verdicts"]["routing"]["action"] == "failed"
        assert record["fallbacks"] == ["gpt-fake@up=500"]
        [line] = [r for r in caplog.records if r.name == "gateway_kit.requests"]
        assert line.levelname == "WARNING"
        assert record["id"] in line.getMessage()
        assert env.workspace_id in line.getMessage()
        assert "failed=gpt-fake@up=500" in line.getMessage()


async def test_a_stream_the_client_leaves_is_recorded_as_not_completed() -> None:
    async with provisioned("scale", **PRICED) as env:
        parts = [chunk(role="assistant"), chunk("a"), chunk("b"), chunk(finish="stop"), DONE]
        env.upstream.stream = ScriptedStream(parts, before_each=lambda _: anyio.sleep(0.05))
        response = await env.recorder.request(
            "POST",
            "/v1/chat/completions",
            json={
                "model": "gpt-fake",
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
            },
            headers=env.auth(),
            disconnect_after=1,
        )
        assert response.disconnected_at is not None
        [record] = (await records(env)).json()["data"]
        assert record["stream"] is True
        assert record["status"] == 200
        assert record["completed"] is False
        assert record["latency_ms"]["ttft"] is not None
        assert record["usage"]["estimated"] is True  # the usage never came: estimated
        assert record["cost_micro_usd"] > 0


async def test_a_stream_broken_off_upstream_has_its_error_code() -> None:
    async with provisioned("scale") as env:
        parts = [chunk(role="assistant"), chunk("a"), chunk("b")]
        env.upstream.stream = ScriptedStream(parts, fail_after=2)
        response = await env.chat(stream=True)
        assert response.status == 200
        [record] = (await records(env)).json()["data"]
        assert record["error_code"] == "upstream_stream_error"
        assert record["completed"] is True  # the client got the whole (broken) response


async def test_pages_follow_their_cursor_and_filters_narrow_them() -> None:
    async with provisioned("scale") as env:
        other = (await env.gateway.keys.create(env.workspace_id)).secret
        other_id = next(
            k.key_id
            for k in await env.gateway.keys.list(env.workspace_id)
            if k.prefix == other[: len(k.prefix)]
        )
        for index in range(7):
            await env.chat(other if index % 2 else None)
            env.clock.advance(1)
        await env.chat(model="no-such-model")
        await env.gateway.requests.flush()
        seen: list[str] = []
        cursor = None
        while True:
            query = "limit=3" + (f"&cursor={cursor}" if cursor else "")
            page = (await records(env, query)).json()
            seen += [r["id"] for r in page["data"]]
            cursor = page["next_cursor"]
            assert page["has_more"] is (cursor is not None)
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 8
        by_key = (await records(env, f"key_id={other_id}")).json()["data"]
        assert len(by_key) == 3
        assert {r["key_id"] for r in by_key} == {other_id}
        errors = (await records(env, "status=4xx")).json()["data"]
        assert [(r["status"], r["error_code"]) for r in errors] == [(404, "model_not_found")]
        assert len((await records(env, "status=200")).json()["data"]) == 7
        assert len((await records(env, "model=gpt-fake")).json()["data"]) == 7
        times = sorted(r["created_at"] for r in (await records(env)).json()["data"])
        assert len((await records(env, f"until={quote(times[-1])}")).json()["data"]) == 7
        assert len((await records(env, f"since={quote(times[-3])}")).json()["data"]) == 3
        zoned = times[-3].replace("Z", "+00:00")
        assert len((await records(env, f"since={quote(zoned)}")).json()["data"]) == 3
        assert (await records(env, "since=2100-01-01T00:00:00Z")).json()["data"] == []


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=1001",
        "limit=ten",
        "status=600",
        "status=oops",
        "since=yesterday",
        "until=2026-11-26T00:00:00",  # no zone
        "cursor=-1",
        "cursor=abc",
        "color=blue",
        "limit=1&limit=2",
        "cursor=9999999999999999999",  # past the storage's 64-bit positions
        "limit=%C2%B2",  # a digit to str.isdigit, not to int()
        "limit=" + "9" * 5000,  # more digits than int() reads
        "status=4xx%0A",  # a trailing newline
        "key_id=kid_1%0A",
        "since=2026-11-01T00:00:00%ED%B3%BF%2B00:00",  # a lone surrogate
    ],
)
async def test_bad_queries_are_refused_in_the_openai_shape(query: str) -> None:
    async with provisioned("scale") as env:
        response = await records(env, query)
        assert response.status == 400
        error = response.json()["error"]
        assert set(error) == {"message", "type", "code", "param"}
        assert error["code"] in ("invalid_value", "unknown_parameter")
        if "&" not in query:  # the parameter at fault is named
            assert error["param"] == query.split("=")[0]


async def test_another_workspace_and_a_key_without_the_scope_are_refused() -> None:
    async with provisioned("scale") as env:
        other = await env.gateway.workspaces.create("other@example.com")
        theirs = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{other.id}/requests", headers=env.auth()
        )
        assert theirs.status in (403, 404)
        inference = (await env.gateway.keys.create(env.workspace_id)).secret
        denied = await records(env, key=inference)
        assert denied.status == 403
        assert "requests:read" in denied.json()["error"]["message"]
        scoped = await env.gateway.keys.create(
            env.workspace_id, scopes=ROLES["inference"] | {KeyScope.REQUESTS_READ}
        )
        assert (await records(env, key=scoped.secret)).status == 200


async def test_usage_adds_up_per_day_and_model() -> None:
    async with provisioned("scale", **PRICED) as env:
        env.upstream.json_body = priced_answer()
        for _ in range(3):
            assert (await env.chat(temperature=0)).status == 200  # a miss, then two hits
        await env.chat(model="no-such-model")
        await env.gateway.requests.flush()
        usage = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/usage", headers=env.auth()
        )
        assert usage.status == 200
        body = usage.json()
        rows = {row["model"]: row for row in body["data"]}
        assert set(rows) == {"gpt-fake", "(none)"}
        served = rows["gpt-fake"]
        assert served["day"] == "2026-11-18"  # the test clock's day
        assert (served["requests"], served["errors"], served["cache_hits"]) == (3, 0, 2)
        assert (served["input_tokens"], served["output_tokens"]) == (20, 5)  # upstream's only
        data = (await records(env)).json()["data"]
        assert served["cost_micro_usd"] == sum(r["cost_micro_usd"] or 0 for r in data)
        assert served["savings_micro_usd"] == sum(r["savings_micro_usd"] for r in data)
        assert rows["(none)"]["errors"] == 1
        assert body["totals"]["requests"] == 4
        other_days = await env.recorder.request(
            "GET",
            f"/api/v1/workspaces/{env.workspace_id}/usage?since=2026-11-19&until=2026-11-30",
            headers=env.auth(),
        )
        assert other_days.json()["data"] == []
        bad = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/usage?since=19-11", headers=env.auth()
        )
        assert bad.status == 400


class FlakyLogStorage(MemoryStorage):
    broken = False

    async def log_extend(self, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            raise StorageError("log write failed")
        return await super().log_extend(*args, **kwargs)


async def test_records_the_storage_refuses_are_kept_for_the_next_write() -> None:
    async with provisioned("scale", storage_class=FlakyLogStorage) as env:
        env.storage.broken = True
        for _ in range(3):
            await env.chat()
            env.clock.advance(1)
        assert await env.gateway.requests.flush() == 0
        assert env.gateway.requests.pending == 3
        env.storage.broken = False
        await env.chat()
        data = (await records(env)).json()["data"]
        assert len(data) == 4
        stamps = [r["created_at"] for r in data]
        assert stamps == sorted(stamps, reverse=True)  # still in order


async def test_records_collected_are_written_when_the_gateway_stops() -> None:
    import httpx

    from gateway_kit import Gateway, GatewayConfig, create_app
    from gateway_kit.testing import ASGIRecorder
    from tests.fakes import FakeUpstream

    config = GatewayConfig.model_validate(
        {
            "providers": [{"name": "up", "base_url": "https://upstream.test/v1"}],
            "models": [{"name": "gpt-fake", "provider": "up"}],
        }
    )
    client = httpx.AsyncClient(transport=httpx.MockTransport(FakeUpstream()))
    async with MemoryStorage() as storage:
        async with Gateway(config, storage=storage, http_client=client) as gateway:
            workspace = await gateway.workspaces.create("team@example.com")
            key = (await gateway.keys.create(workspace.id)).secret
            recorder = ASGIRecorder(create_app(gateway=gateway))
            for _ in range(5):
                response = await recorder.request(
                    "POST",
                    "/v1/chat/completions",
                    json={"model": "gpt-fake", "messages": [{"role": "user", "content": "x"}]},
                    headers={"authorization": f"Bearer {key}"},
                )
                assert response.status == 200
            assert gateway.requests.pending == 5  # the write interval has not passed
        written = await storage.log_page(f"{workspace.id}:requests", limit=10)
        assert len(written) == 5


async def test_recent_events_are_listed_newest_first_without_webhooks() -> None:
    async with provisioned("scale") as env:
        made = await env.recorder.request(
            "POST",
            f"/api/v1/workspaces/{env.workspace_id}/keys",
            json={"name": "ci"},
            headers=env.auth(),
        )
        key_id = made.json()["key_id"]
        for _ in range(2):
            rotated = await env.recorder.request(
                "POST",
                f"/api/v1/workspaces/{env.workspace_id}/keys/{key_id}/rotate",
                headers=env.auth(),
            )
            assert rotated.status == 200
        listed = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/events?limit=5", headers=env.auth()
        )
        assert listed.status == 200
        events = listed.json()["data"]
        assert [e["event"] for e in events] == ["key.rotated", "key.rotated"]
        assert events[0]["timestamp"] >= events[1]["timestamp"]
        assert events[0]["workspace_id"] == env.workspace_id
        assert made.json()["key"] not in json.dumps(events)
        bad = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/events?limit=0", headers=env.auth()
        )
        assert bad.status == 400


async def test_an_embeddings_request_is_recorded_on_its_route() -> None:
    embedding = {"name": "embed-fake", "provider": "up", "kind": "embedding"}
    async with provisioned(
        "scale", models=[{"name": "gpt-fake", "provider": "up"}, embedding]
    ) as env:
        env.upstream.json_body = {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
            "model": "embed-fake",
            "usage": {"prompt_tokens": 4, "total_tokens": 4},
        }
        response = await env.recorder.request(
            "POST",
            "/v1/embeddings",
            json={"model": "embed-fake", "input": "hello"},
            headers=env.auth(),
        )
        assert response.status == 200
        [record] = (await records(env)).json()["data"]
        assert (record["route"], record["model"], record["status"]) == (
            "embeddings",
            "embed-fake",
            200,
        )
        assert record["usage"]["input_tokens"] == 4


@pytest.mark.parametrize(
    "query",
    [
        "since=%EF%BC%92%EF%BC%90%EF%BC%92%EF%BC%96-11-01",
        "until=2026-11-01%0A",
        "until=2026-02-30",  # no such day: once accepted and echoed back
        "limit=1",
    ],
)
async def test_bad_usage_and_event_queries_are_refused_in_the_openai_shape(query: str) -> None:
    async with provisioned("scale") as env:
        route = "events" if query.startswith("limit") else "usage"
        path = f"/api/v1/workspaces/{env.workspace_id}/{route}?{query}"
        if route == "events":
            path = path.replace("limit=1", "limit=" + "1" * 5000)
        response = await env.recorder.request("GET", path, headers=env.auth())
        assert response.status == 400
        assert response.json()["error"]["code"] == "invalid_value"


async def test_an_upstream_error_body_nested_too_deep_still_gets_a_record() -> None:
    async with provisioned("scale", routing={"retries": 0}) as env:
        env.upstream.status = 400
        env.upstream.raw_body = b"[" * 50_000 + b"]" * 50_000
        response = await env.chat()
        assert response.status == 400  # passed on as the upstream said
        [record] = (await records(env)).json()["data"]
        assert (record["status"], record["error_code"]) == (400, "unknown")


async def test_a_retry_of_the_same_deployment_is_served_not_a_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = FakeUpstream.__call__
    calls = 0

    async def busy_once(self: FakeUpstream, request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(429, json={"error": {"message": "busy"}})
        return await answer(self, request)

    monkeypatch.setattr(FakeUpstream, "__call__", busy_once)
    routing = {"backoff_s": 0.001, "max_backoff_s": 0.001}
    async with provisioned("scale", routing=routing) as env:
        response = await env.chat()
        assert response.status == 200
        assert response.headers["x-gateway-fallbacks"] == "0"
        [record] = (await records(env)).json()["data"]
        # The one deployment answered on its second try: served (it said "fallback").
        assert record["verdicts"]["routing"]["action"] == "served"
        assert record["retries"] == 1


async def test_times_at_the_ends_of_the_calendar_filter_as_times() -> None:
    async with provisioned("scale") as env:
        for _ in range(3):
            assert (await env.chat()).status == 200
        for query, found in (
            ("since=0001-01-01T00:00:00Z", 3),  # was a 500
            ("since=9999-12-31T23:59:59-12:00", 0),  # was a 500
            ("until=9999-12-31T23:59:59-01:00", 3),  # compared as text: found none
            ("until=0500-01-01T00:00:00Z", 0),  # compared as text: found all
        ):
            page = await records(env, query)
            assert page.status == 200, query
            assert len(page.json()["data"]) == found, query


async def test_a_model_name_with_a_slash_is_a_filter() -> None:
    models = [{"name": "org/llama-3", "provider": "up"}, {"name": "gpt-fake", "provider": "up"}]
    async with provisioned("scale", models=models) as env:
        assert (await env.chat(model="org/llama-3")).status == 200
        assert (await env.chat()).status == 200
        page = await records(env, "model=org%2Fllama-3")
        assert page.status == 200  # was a 400: "'model' must be a model name."
        assert [r["model"] for r in page.json()["data"]] == ["org/llama-3"]


async def test_a_fault_in_the_management_api_is_a_500_with_its_request_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with provisioned("scale") as env:

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug")

        monkeypatch.setattr(env.gateway.requests, "page", broken)
        answer = await records(env)
        assert answer.status == 500
        assert answer.json()["error"]["code"] == "internal_error"
        assert answer.headers["x-request-id"].startswith("req_")  # the server's 500 had none


async def test_a_stream_request_answered_with_an_error_has_no_time_to_first_token() -> None:
    async with provisioned("tiny") as env:  # 3 a minute
        for _ in range(3):
            assert (await env.chat(stream=True)).status == 200
        assert (await env.chat(stream=True)).status == 429
        assert (await env.chat(model="no-such-model", stream=True)).status == 404
        data = (await records(env)).json()["data"]
        ttfts = [(r["status"], r["latency_ms"]["ttft"] is not None) for r in data]
        # Refused or unknown, no token ever came: the first byte of an error is no token.
        assert ttfts == [(404, False), (429, False), (200, True), (200, True), (200, True)]


async def test_a_body_refused_for_its_fields_is_recorded_with_the_model_it_asked_for() -> None:
    async with provisioned("scale") as env:
        answer = await env.recorder.request(
            "POST",
            "/v1/chat/completions",
            json={"model": "gpt-fake", "n": "x", "messages": [{"role": "user", "content": "x"}]},
            headers=env.auth(),
        )
        assert answer.status == 400
        [record] = (await records(env, "model=gpt-fake")).json()["data"]  # found none
        assert (record["model"], record["status"]) == ("gpt-fake", 400)


async def test_a_stream_broken_off_is_an_error_in_the_filter_and_the_usage() -> None:
    async with provisioned("scale") as env:
        parts = [chunk(role="assistant"), chunk("a"), chunk("b")]
        env.upstream.stream = ScriptedStream(parts, fail_after=2)
        assert (await env.chat(stream=True)).status == 200
        env.upstream.stream = None
        assert (await env.chat()).status == 200
        [broken] = (await records(env, "status=error")).json()["data"]  # found none
        assert (broken["status"], broken["error_code"]) == (200, "upstream_stream_error")
        usage = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/usage", headers=env.auth()
        )
        [row] = usage.json()["data"]
        assert (row["requests"], row["errors"]) == (2, 1)
