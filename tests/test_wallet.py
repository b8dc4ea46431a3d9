"""The wallet through requests and the operator API: a top-up serves exactly what it pays for,
``account.low_balance`` once per tier and top-up, no overdraft under concurrency, billing off
debits nothing; ``/api/v1/admin`` guarded by its own token, credits once per idempotency key."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest

from gateway_kit import MemoryStorage
from gateway_kit.accounts.periods import period_at
from gateway_kit.cost.tokens import estimate_prompt_tokens
from gateway_kit.events.bus import EventRecorder
from gateway_kit.storage import Increment
from gateway_kit.testing import RecordedResponse
from tests.fakes import COMPLETION, Env, provisioned

pytestmark = pytest.mark.anyio

HELLO = [{"role": "user", "content": "hi"}]
PROMPT = estimate_prompt_tokens({"model": "gpt-fake", "messages": HELLO})
OUTPUT = 1000 - PROMPT
COST = 1000  # micro-USD: 1 per token, the estimate exactly what upstream reports
TOKEN = "t" * 32
ADMIN = {"authorization": f"Bearer {TOKEN}"}


def config() -> dict[str, Any]:
    """A priced model and a plan without a budget cap: only the wallet can refuse."""
    one = {"input_usd_per_mtok": "1", "output_usd_per_mtok": "1"}
    return {
        "models": [{"name": "gpt-fake", "provider": "up", "price": one}],
        "plans": {"metered": {"included_requests": 100_000, "burst_limit_rpm": 100_000}},
        "default_plan": "metered",
        "budget": {"default_output_tokens": OUTPUT},
        "admin": {"token": TOKEN},
    }


@asynccontextmanager
async def billed(*, billing: bool = True) -> AsyncIterator[tuple[Env, EventRecorder]]:
    async with provisioned("metered", **config()) as env:
        usage = {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT}
        env.upstream.json_body = {**COMPLETION, "usage": usage}
        if billing:
            await env.gateway.wallet.set_billing(env.workspace_id, True)
        recorder = EventRecorder()
        env.gateway.events.subscribe(recorder)
        yield env, recorder


def wallet_path(env: Env, workspace_id: str | None = None) -> str:
    return f"/api/v1/admin/workspaces/{workspace_id or env.workspace_id}/wallet"


async def topup(env: Env, requests: int, **fields: Any) -> RecordedResponse:
    """Credit ``requests`` requests' worth through the operator API."""
    body = {"amount_usd": requests * COST / 1_000_000, **fields}
    response: RecordedResponse = await env.recorder.request(
        "POST", wallet_path(env) + "/topups", json=body, headers=ADMIN
    )
    assert response.status == 201, response.body
    return response


async def balance(env: Env) -> int:
    return (await env.gateway.wallet.status(env.workspace_id)).balance_micro_usd


async def reserved(env: Env) -> int:
    period = period_at(env.clock(), "month")
    return (await env.gateway.ledger.totals(env.workspace_id, period)).reserved


def low_balance(recorder: EventRecorder) -> list[dict[str, Any]]:
    return [e.data.model_dump() for e in recorder.events if e.event == "account.low_balance"]


# -- billing through requests --------------------------------------------------------------------


async def test_a_topup_serves_exactly_that_many_requests_then_402() -> None:
    async with billed() as (env, _):
        await topup(env, 5)
        balances = []
        for _ in range(5):
            assert (await env.chat(messages=HELLO)).status == 200
            balances.append(await balance(env))
        assert balances == [4 * COST, 3 * COST, 2 * COST, COST, 0]
        for _ in range(2):
            refused = await env.chat(messages=HELLO)
            assert refused.status == 402
            assert refused.headers["x-gateway-budget"] == "wallet"
            error = refused.json()["error"]
            assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_balance")
        assert env.upstream.calls == 5
        assert await balance(env) == 0
        assert await reserved(env) == 0


async def test_a_new_topup_serves_again_after_402() -> None:
    async with billed() as (env, _):
        assert (await env.chat(messages=HELLO)).status == 402  # never topped up
        await topup(env, 1)
        assert (await env.chat(messages=HELLO)).status == 200
        assert (await env.chat(messages=HELLO)).status == 402
        await topup(env, 2)
        assert [(await env.chat(messages=HELLO)).status for _ in range(3)] == [200, 200, 402]


async def test_low_balance_fires_once_at_each_tier_and_again_after_a_topup() -> None:
    async with billed() as (env, recorder):
        await topup(env, 10)
        crossed: list[tuple[int, list[int]]] = []  # (request number, tiers it published)
        for number in range(1, 13):
            before = len(low_balance(recorder))
            await env.chat(messages=HELLO)
            tiers = [e["tier"] for e in low_balance(recorder)[before:]]
            if tiers:
                crossed.append((number, tiers))
        # 10 000 micro-USD: 2 000 left after the 8th is 20 %, 1 000 after the 9th 10 %.
        assert crossed == [(8, [20]), (9, [10]), (10, [0])]
        assert low_balance(recorder) == [
            {"balance": 0.002, "last_topup": 0.01, "tier": 20},
            {"balance": 0.001, "last_topup": 0.01, "tier": 10},
            {"balance": 0.0, "last_topup": 0.01, "tier": 0},
        ]
        events = [e for e in recorder.events if e.event == "account.low_balance"]
        assert {e.workspace_id for e in events} == {env.workspace_id}

        await topup(env, 10)  # re-arms every tier
        assert len(low_balance(recorder)) == 3  # a top-up itself publishes nothing
        for _ in range(12):
            await env.chat(messages=HELLO)
        assert [e["tier"] for e in low_balance(recorder)] == [20, 10, 0, 20, 10, 0]


async def test_a_request_that_skips_tiers_publishes_each_once_in_order() -> None:
    async with billed() as (env, recorder):
        await topup(env, 4)
        for _ in range(3):
            await env.chat(messages=HELLO)  # 25 % left: above every tier
        assert low_balance(recorder) == []
        await env.chat(messages=HELLO)  # 25 % to 0 %
        assert [e["tier"] for e in low_balance(recorder)] == [20, 10, 0]


async def test_concurrent_requests_never_overdraw_the_wallet() -> None:
    async with billed() as (env, recorder):
        await topup(env, 10)
        env.upstream.delay = 0.05  # all in flight together
        statuses: Counter[int] = Counter()

        async def one() -> None:
            statuses[(await env.chat(messages=HELLO)).status] += 1

        async with anyio.create_task_group() as tasks:
            for _ in range(50):
                tasks.start_soon(one)
        assert statuses == {200: 10, 402: 40}
        assert env.upstream.calls == 10
        assert await balance(env) == 0
        assert await reserved(env) == 0
        assert sorted(e["tier"] for e in low_balance(recorder)) == [0, 10, 20]


async def test_low_balance_follows_the_balance_spent_not_what_is_held_in_flight() -> None:
    """Four requests in flight hold 2,400 each (the estimate before the model was seen
    answering) for a real cost of 1,000: the check once counted the others' holds as spent,
    published 20 % at a balance the wallet never had, and then, that tier used up, said
    nothing when the wallet really got there."""
    fields = config()
    fields["budget"] = {"default_output_tokens": 2400 - PROMPT}
    async with provisioned("metered", **fields) as env:
        env.upstream.json_body = {
            **COMPLETION,
            "usage": {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT},
        }
        await env.gateway.wallet.set_billing(env.workspace_id, True)
        recorder = EventRecorder()
        env.gateway.events.subscribe(recorder)
        await topup(env, 10)
        env.upstream.delay = 0.05  # in flight together
        async with anyio.create_task_group() as tasks:
            for _ in range(4):
                tasks.start_soon(partial(env.chat, messages=HELLO))
        assert await balance(env) == 6 * COST
        assert low_balance(recorder) == []  # 60 % left: no tier crossed
        env.upstream.delay = 0
        while (await env.chat(messages=HELLO)).status == 200:
            pass
        assert [(e["tier"], e["balance"]) for e in low_balance(recorder)] == [
            (20, 0.002),
            (10, 0.001),
            (0, 0.0),
        ]


async def test_an_empty_wallet_serves_nothing_however_cheap() -> None:
    """A request whose estimate rounds to $0 (a short embedding, say) was served by an empty
    wallet, any number of times: a billed request holds at least a micro-dollar."""
    fields = config()
    cheap = {"input_usd_per_mtok": "0.001", "output_usd_per_mtok": "0.001"}
    fields["models"] = [{"name": "gpt-fake", "provider": "up", "price": cheap}]
    fields["budget"] = {"default_output_tokens": 1}
    async with provisioned("metered", **fields) as env:
        await env.gateway.wallet.set_billing(env.workspace_id, True)
        refused = await env.chat(messages=HELLO)
        assert refused.status == 402
        assert refused.json()["error"]["code"] == "insufficient_balance"
        assert env.upstream.calls == 0


async def test_with_billing_off_requests_are_not_debited() -> None:
    async with billed(billing=False) as (env, recorder):
        await topup(env, 2)
        assert [(await env.chat(messages=HELLO)).status for _ in range(5)] == [200] * 5
        assert await balance(env) == 2 * COST
        # Switched on by the operator, requests are debited; switched off again, no longer.
        patch = await env.recorder.request(
            "PATCH", wallet_path(env), json={"billing": True}, headers=ADMIN
        )
        assert patch.status == 200
        assert patch.json()["billing"] is True
        assert [(await env.chat(messages=HELLO)).status for _ in range(3)] == [200, 200, 402]
        off = await env.recorder.request(
            "PATCH", wallet_path(env), json={"billing": False}, headers=ADMIN
        )
        assert off.json()["billing"] is False
        assert (await env.chat(messages=HELLO)).status == 200
        assert await balance(env) == 0
        assert low_balance(recorder) == [
            {"balance": 0.0, "last_topup": 0.002, "tier": 20},
            {"balance": 0.0, "last_topup": 0.002, "tier": 10},
            {"balance": 0.0, "last_topup": 0.002, "tier": 0},
        ]


async def test_a_topup_that_clears_an_overdraft_is_reported_as_credited() -> None:
    async with billed() as (env, _):
        await topup(env, 1)
        # Upstream answers longer than estimated: the real cost is debited, the balance dips.
        usage = {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT + COST}
        env.upstream.json_body = {**COMPLETION, "usage": usage}
        assert (await env.chat(messages=HELLO)).status == 200
        assert await balance(env) == -COST
        assert (await env.chat(messages=HELLO)).status == 402
        cleared = await topup(env, 1)  # back to exactly zero
        assert cleared.json()["credited"] is True
        assert cleared.json()["balance_usd"] == 0.0


class HeldCredit(MemoryStorage):
    """Holds the first credit between its counters and the rest until another credit is
    logged: the interleaving two gateway processes (or a thread-backed store) can produce."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.holding = True
        self.held = anyio.Event()
        self.logged = anyio.Event()

    async def incr_many(self, increments: Sequence[Increment], **options: Any) -> Any:
        result = await super().incr_many(increments, **options)
        if self.holding and any(i.key.endswith(":wallet:seq") for i in increments):
            self.holding = False
            self.held.set()
            await self.logged.wait()
        return result

    async def log_append(self, key: str, value: bytes, *, max_len: int) -> None:
        await super().log_append(key, value, max_len=max_len)
        if key.endswith(":wallet:log"):
            self.logged.set()


async def test_the_last_topup_is_the_latest_even_when_two_credits_interleave() -> None:
    async with provisioned("metered", storage_class=HeldCredit, **config()) as env:
        storage: HeldCredit = env.storage
        path = wallet_path(env) + "/topups"
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(
                lambda: env.recorder.request("POST", path, json={"amount_usd": 100}, headers=ADMIN)
            )
            await storage.held.wait()  # the $100 credit is counted (top-up 1), not finished
            await env.recorder.request("POST", path, json={"amount_usd": 5}, headers=ADMIN)
        view = (await env.recorder.request("GET", wallet_path(env), headers=ADMIN)).json()
        # Top-up 2 ($5) is the last one: the low-balance tiers are measured against it.
        assert (view["balance_usd"], view["topups"], view["last_topup_usd"]) == (105.0, 2, 5.0)


# -- the operator API ----------------------------------------------------------------------------


async def test_the_wallet_view_shows_balance_billing_and_recent_topups() -> None:
    async with billed(billing=False) as (env, _):
        await topup(env, 2500, reference="INV-0007")
        response = await env.recorder.request("GET", wallet_path(env), headers=ADMIN)
        assert response.status == 200
        view = response.json()
        [entry] = view.pop("recent_topups")
        assert view == {
            "object": "wallet",
            "workspace_id": env.workspace_id,
            "billing": False,
            "balance_usd": 2.5,
            "last_topup_usd": 2.5,
            "topups": 1,
        }
        assert (entry["amount_usd"], entry["source"], entry["reference"]) == (
            2.5,
            "operator",
            "INV-0007",
        )
        assert entry["at"].endswith("Z")  # ISO 8601 UTC, as the API's other times (was a float)


async def test_the_budget_endpoint_shows_the_wallet() -> None:
    async with billed() as (env, _):
        await topup(env, 3)
        await env.chat(messages=HELLO)
        response = await env.recorder.request(
            "GET", f"/api/v1/workspaces/{env.workspace_id}/budget", headers=env.auth()
        )
        assert response.status == 200
        assert response.json()["wallet"] == {
            "billing": True,
            "balance_usd": 0.002,
            "last_topup_usd": 0.003,
            "topups": 1,
        }


async def test_an_idempotency_key_credits_once() -> None:
    async with billed() as (env, _):
        path = wallet_path(env) + "/topups"
        body = {"amount_usd": 12.5, "idempotency_key": "inv-42"}
        first = await env.recorder.request("POST", path, json=body, headers=ADMIN)
        assert first.status == 201
        assert (first.json()["credited"], first.json()["balance_usd"]) == (True, 12.5)
        again = await env.recorder.request("POST", path, json=body, headers=ADMIN)
        assert again.status == 200
        assert (again.json()["credited"], again.json()["balance_usd"]) == (False, 12.5)
        other = {**body, "idempotency_key": "inv-43"}
        assert (await env.recorder.request("POST", path, json=other, headers=ADMIN)).status == 201
        assert await balance(env) == 25_000_000
        # Without a key every call is a top-up of its own.
        for _ in range(2):
            plain = await env.recorder.request("POST", path, json={"amount_usd": 1}, headers=ADMIN)
            assert plain.status == 201
        assert await balance(env) == 27_000_000


async def test_the_largest_topup_is_a_million_dollars() -> None:
    async with billed() as (env, _):
        path = wallet_path(env) + "/topups"
        response = await env.recorder.request(
            "POST", path, json={"amount_usd": 1_000_000}, headers=ADMIN
        )
        assert response.status == 201
        assert await balance(env) == 10**12


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"amount_usd": 0}, "amount_usd"),
        ({"amount_usd": -5}, "amount_usd"),
        ({"amount_usd": "10"}, "amount_usd"),
        ({"amount_usd": True}, "amount_usd"),
        ({"amount_usd": None}, "amount_usd"),
        ({}, "amount_usd"),
        ({"amount_usd": 1_000_000.01}, "amount_usd"),
        ({"amount_usd": 1e-7}, "amount_usd"),
        ({"amount_usd": 5, "currency": "eur"}, "currency"),
        ({"amount_usd": 5, "reference": 7}, "reference"),
        ({"amount_usd": 5, "idempotency_key": "k" * 201}, "idempotency_key"),
        ({"amount_usd": 5, "reference": "INV-7\x1b[2J"}, "reference"),
        ({"amount_usd": 5, "idempotency_key": "k\x00"}, "idempotency_key"),
        ([5], None),
    ],
)
async def test_bad_topups_are_refused_and_credit_nothing(body: Any, param: str | None) -> None:
    async with billed() as (env, _):
        response = await env.recorder.request(
            "POST", wallet_path(env) + "/topups", json=body, headers=ADMIN
        )
        assert response.status == 400
        error = response.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", param)
        status = await env.gateway.wallet.status(env.workspace_id)
        assert (status.balance_micro_usd, status.topups) == (0, 0)


@pytest.mark.parametrize("raw", [b"{not json", b"NaN", b'{"amount_usd": NaN}'])
async def test_unreadable_topup_bodies_are_refused(raw: bytes) -> None:
    async with billed() as (env, _):
        response = await env.recorder.request(
            "POST",
            wallet_path(env) + "/topups",
            body=raw,
            headers={**ADMIN, "content-type": "application/json"},
        )
        assert response.status == 400
        assert await balance(env) == 0


@pytest.mark.parametrize(
    "body", [{"billing": "yes"}, {"billing": 1}, {}, {"billing": True, "x": 1}]
)
async def test_a_bad_billing_switch_is_refused(body: dict[str, Any]) -> None:
    async with billed(billing=False) as (env, _):
        response = await env.recorder.request("PATCH", wallet_path(env), json=body, headers=ADMIN)
        assert response.status == 400
        assert await env.gateway.wallet.billing(env.workspace_id) is False


def _requests(env: Env) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("GET", wallet_path(env), None),
        ("PATCH", wallet_path(env), {"billing": True}),
        ("POST", wallet_path(env) + "/topups", {"amount_usd": 5}),
    ]


@pytest.mark.parametrize(
    "authorization",
    [None, f"Bearer {'x' * 32}", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}", "workspace key"],
)
async def test_the_operator_api_wants_the_operator_token(authorization: str | None) -> None:
    async with billed(billing=False) as (env, _):
        if authorization == "workspace key":
            authorization = f"Bearer {env.key}"
        headers = {} if authorization is None else {"authorization": authorization}
        for method, path, body in _requests(env):
            response = await env.recorder.request(method, path, json=body, headers=headers)
            assert response.status == 401
            error = response.json()["error"]
            assert error["code"] == "invalid_admin_token"
            assert TOKEN not in response.body.decode()
        status = await env.gateway.wallet.status(env.workspace_id)
        assert (status.balance_micro_usd, status.billing) == (0, False)


async def test_without_a_token_configured_the_operator_api_does_not_exist() -> None:
    async with provisioned("metered", **{**config(), "admin": {}}) as env:
        for method, path, body in _requests(env):
            response = await env.recorder.request(method, path, json=body, headers=ADMIN)
            assert response.status == 404
            assert response.json()["error"]["type"] == "not_found_error"
        assert await balance(env) == 0


async def test_an_unknown_workspace_is_404() -> None:
    async with billed() as (env, _):
        for method, path, body in _requests(env):
            path = path.replace(env.workspace_id, "ws_nosuch")
            response = await env.recorder.request(method, path, json=body, headers=ADMIN)
            assert response.status == 404
            assert response.json()["error"]["code"] == "workspace_not_found"
        status = await env.gateway.wallet.status("ws_nosuch")
        assert (status.balance_micro_usd, status.topups, status.billing) == (0, 0, False)
