"""Money survives a restart: spend, savings, the wallet and payment idempotency live in storage
(SQLite here), so a gateway stopped and started again carries on exactly where it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway_kit import Gateway, GatewayConfig, create_app, sign_stripe_payload
from gateway_kit.accounts.periods import period_at
from gateway_kit.cost.tokens import estimate_prompt_tokens
from gateway_kit.testing import ASGIRecorder
from tests.fakes import COMPLETION, FakeUpstream

pytestmark = pytest.mark.anyio

HELLO = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
OUTPUT = 1000 - estimate_prompt_tokens(HELLO)
SECRET = "whsec_restart_test_secret"


def config(db: Path) -> GatewayConfig:
    one = {"input_usd_per_mtok": "1", "output_usd_per_mtok": "1"}
    return GatewayConfig.model_validate(
        {
            "storage": {"url": f"sqlite:///{db}"},
            "providers": [{"name": "up", "base_url": "https://upstream.test/v1"}],
            "models": [
                {"name": "gpt-fake", "provider": "up", "price": one},
                {
                    "name": "gpt-flagship",
                    "provider": "up",
                    "price": {**one, "output_usd_per_mtok": "3"},
                },
            ],
            "cost": {"flagship_model": "gpt-flagship"},
            "plans": {
                "capped": {
                    "included_requests": 1000,
                    "burst_limit_rpm": 1000,
                    "budget_usd": "0.005",
                }
            },
            "default_plan": "capped",
            "budget": {"default_output_tokens": OUTPUT},
            "payments": {"stripe_webhook_secret": SECRET},
            "webhooks": {"worker": False},
        }
    )


def gateway(db: Path) -> Gateway:
    upstream = FakeUpstream()
    upstream.json_body = {
        **COMPLETION,
        "usage": {"prompt_tokens": 1000 - OUTPUT, "completion_tokens": OUTPUT},
    }
    client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
    return Gateway(config(db), http_client=client)


def paid_invoice(workspace_id: str, now: float) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {
            "id": "evt_restart_1",
            "object": "event",
            "type": "invoice.paid",
            "data": {
                "object": {
                    "id": "in_restart_1",
                    "object": "invoice",
                    "amount_paid": 500,
                    "currency": "usd",
                    "metadata": {"workspace_id": workspace_id},
                }
            },
        }
    ).encode()
    header = sign_stripe_payload(body, SECRET, timestamp=int(now))
    return body, {"stripe-signature": header, "content-type": "application/json"}


async def state(gw: Gateway, workspace_id: str) -> dict[str, Any]:
    period = period_at(gw.clock(), "month")
    totals = await gw.ledger.totals(workspace_id, period)
    wallet = await gw.wallet.status(workspace_id)
    return {
        "spend": (totals.committed, totals.reserved, totals.settled),
        "savings": await gw.ledger.savings(workspace_id),
        "balance": wallet.balance_micro_usd,
        "billing": wallet.billing,
    }


async def test_spend_savings_wallet_and_payments_carry_over_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "gk.db"
    async with gateway(db) as first:
        workspace = await first.workspaces.create("team@example.com")
        key = (await first.keys.create(workspace.id)).secret
        auth = {"authorization": f"Bearer {key}"}
        recorder = ASGIRecorder(create_app(gateway=first))
        await first.wallet.set_billing(workspace.id, True)
        body, headers = paid_invoice(workspace.id, first.clock())
        paid = await recorder.request("POST", "/v1/payments/stripe", body=body, headers=headers)
        assert paid.json()["handled"] is True
        for _ in range(3):
            assert (
                await recorder.request("POST", "/v1/chat/completions", json=HELLO, headers=auth)
            ).status == 200
        before = await state(first, workspace.id)
    assert before == {
        "spend": (3000, 0, 3000),
        "savings": 3 * 2 * OUTPUT,  # the flagship charges 2 more per output token
        "balance": 5_000_000 - 3000,
        "billing": True,
    }

    async with gateway(db) as second:
        assert await state(second, workspace.id) == before
        recorder = ASGIRecorder(create_app(gateway=second))
        # The same payment, re-sent after the restart, is still not credited twice.
        body, headers = paid_invoice(workspace.id, second.clock())
        again = await recorder.request("POST", "/v1/payments/stripe", body=body, headers=headers)
        assert again.json()["duplicate"] is True
        # The period's spend carries on: two more fit the $0.005 cap, the third does not.
        statuses = [
            (
                await recorder.request("POST", "/v1/chat/completions", json=HELLO, headers=auth)
            ).status
            for _ in range(3)
        ]
        assert statuses == [200, 200, 402]
        after = await state(second, workspace.id)
    assert after["spend"] == (5000, 0, 5000)
    assert after["balance"] == 5_000_000 - 5000
