"""``gateway-kit wallet show|topup|billing``: a workspace's prepaid balance, as the operator."""

from __future__ import annotations

import argparse
import secrets
from typing import Any

from gateway_kit.accounts.wallet import MAX_TOPUP_USD
from gateway_kit.cli._store import AddConfig, UsageError, add_common, one_line, require_workspace
from gateway_kit.cost.money import parse_usd
from gateway_kit.exceptions import InvalidRequestError
from gateway_kit.gateway import Gateway

__all__ = ["add_parser"]


def add_parser(commands: Any, add_config: AddConfig) -> None:
    parser = commands.add_parser("wallet", help="wallet balances, top-ups and billing")
    verbs = parser.add_subparsers(dest="verb", metavar="verb", required=True)

    show = verbs.add_parser("show", help="a workspace's balance and recent top-ups")
    show.add_argument("--workspace", required=True, metavar="WS_ID")
    add_common(show, add_config, _show, reads_only=True)

    topup = verbs.add_parser("topup", help="credit a workspace's wallet")
    topup.add_argument("--workspace", required=True, metavar="WS_ID")
    topup.add_argument("--amount", required=True, type=float, metavar="USD")
    topup.add_argument("--reference", default="", help="e.g. an invoice number")
    topup.add_argument(
        "--idempotency-key",
        default="",
        metavar="KEY",
        help="run the command again with the same key and nothing is credited twice",
    )
    add_common(topup, add_config, _topup, reads_only=False)

    billing = verbs.add_parser("billing", help="debit requests from the wallet, or stop")
    billing.add_argument("--workspace", required=True, metavar="WS_ID")
    billing.add_argument("state", choices=["on", "off"])
    add_common(billing, add_config, _billing, reads_only=False)


async def _wallet(gateway: Gateway, workspace_id: str) -> dict[str, Any]:
    return {"workspace_id": workspace_id, **(await gateway.wallet.status(workspace_id)).public()}


async def _show(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await require_workspace(gateway, args.workspace)
    return await _wallet(gateway, args.workspace)


async def _topup(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    try:
        amount = parse_usd(args.amount, "amount_usd", high=MAX_TOPUP_USD, positive=True)
    except InvalidRequestError as exc:
        raise UsageError(str(exc).replace("'amount_usd'", "--amount")) from None
    reference = one_line(args.reference, "--reference")
    key = one_line(args.idempotency_key, "--idempotency-key") or secrets.token_hex(16)
    await require_workspace(gateway, args.workspace)
    balance = await gateway.wallet.credit(
        args.workspace, amount, key=f"manual:{key}", source="operator", reference=reference
    )
    return {**await _wallet(gateway, args.workspace), "credited": balance is not None}


async def _billing(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await require_workspace(gateway, args.workspace)
    await gateway.wallet.set_billing(args.workspace, args.state == "on")
    return await _wallet(gateway, args.workspace)
