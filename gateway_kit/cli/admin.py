"""Operator commands on the configured storage: ``workspaces``, ``keys`` and ``wallet``.

They open the same storage the gateway uses (``storage.url``) and publish the same events, so
a rotation from the command line reaches the workspace's webhooks like one made over the API.
"""

from __future__ import annotations

import argparse
import json
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from gateway_kit.accounts.keys import ApiKey
from gateway_kit.accounts.wallet import MAX_TOPUP_USD
from gateway_kit.config import load_config
from gateway_kit.cost.money import parse_usd
from gateway_kit.exceptions import InvalidRequestError, NotFoundError
from gateway_kit.gateway import Gateway

Action = Callable[[Gateway, argparse.Namespace], Awaitable[Any]]


def add_parsers(
    commands: Any, add_config_option: Callable[[argparse.ArgumentParser], None]
) -> None:
    workspaces = commands.add_parser("workspaces", help="create and list workspaces")
    verbs = workspaces.add_subparsers(dest="verb", metavar="verb", required=True)
    create = verbs.add_parser("create", help="create a workspace")
    create.add_argument("--email", required=True, help="contact e-mail")
    create.add_argument("--plan", help="plan name (default: the configured default_plan)")
    create.add_argument("--with-key", action="store_true", help="also issue its first API key")
    _common(create, add_config_option, _create_workspace)
    _common(verbs.add_parser("list", help="list workspaces"), add_config_option, _list_workspaces)

    keys = commands.add_parser("keys", help="create, list, rotate and revoke API keys")
    verbs = keys.add_subparsers(dest="verb", metavar="verb", required=True)
    create = verbs.add_parser("create", help="issue a new key (shown once)")
    create.add_argument("--workspace", required=True, metavar="WS_ID")
    create.add_argument("--name", default="default", help="a label for the key")
    _common(create, add_config_option, _create_key)
    listing = verbs.add_parser("list", help="list a workspace's keys")
    listing.add_argument("--workspace", required=True, metavar="WS_ID")
    _common(listing, add_config_option, _list_keys)
    rotate = verbs.add_parser("rotate", help="a new secret for a key (shown once)")
    rotate.add_argument("--workspace", required=True, metavar="WS_ID")
    rotate.add_argument("key_id", metavar="KEY_ID")
    rotate.add_argument(
        "--grace-period",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long the old secret keeps working (default 0: stops at once)",
    )
    _common(rotate, add_config_option, _rotate_key)
    revoke = verbs.add_parser("revoke", help="revoke a key")
    revoke.add_argument("--workspace", required=True, metavar="WS_ID")
    revoke.add_argument("key_id", metavar="KEY_ID")
    _common(revoke, add_config_option, _revoke_key)

    wallet = commands.add_parser("wallet", help="wallet balances, top-ups and billing")
    verbs = wallet.add_subparsers(dest="verb", metavar="verb", required=True)
    show = verbs.add_parser("show", help="a workspace's balance and recent top-ups")
    show.add_argument("--workspace", required=True, metavar="WS_ID")
    _common(show, add_config_option, _show_wallet)
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
    _common(topup, add_config_option, _topup)
    billing = verbs.add_parser("billing", help="debit requests from the wallet, or stop")
    billing.add_argument("--workspace", required=True, metavar="WS_ID")
    billing.add_argument("state", choices=["on", "off"])
    _common(billing, add_config_option, _billing)


def _common(
    parser: argparse.ArgumentParser,
    add_config_option: Callable[[argparse.ArgumentParser], None],
    action: Action,
) -> None:
    add_config_option(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=lambda args: _run(action, args))


def _run(action: Action, args: argparse.Namespace) -> int:
    config = load_config(args.config)

    async def main() -> Any:
        # No delivery worker here: the serving gateways (or `gateway-kit worker`) deliver what
        # these commands publish, through the queue in the shared storage.
        async with Gateway(config, run_worker=False) as gateway:
            return await action(gateway, args)

    result = anyio.run(main)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_human(result))
    return 0


def _human(result: Any) -> str:
    if isinstance(result, list):
        return "\n".join(_human(item) for item in result) or "(none)"
    width = max(13, *(len(name) + 2 for name in result))
    lines = [f"{name:<{width}}{value}" for name, value in result.items() if value is not None]
    if "key" in result:
        lines.append("Store the key now: it is shown only this once.")
    return "\n".join(lines)


async def _create_workspace(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    workspace = await gateway.workspaces.create(args.email, plan=args.plan)
    result: dict[str, Any] = {
        "workspace_id": workspace.id,
        "email": workspace.email,
        "plan": workspace.plan,
    }
    if args.with_key:
        made = await gateway.keys.create(workspace.id, name="default")
        result |= {"key_id": made.key.key_id, "key": made.secret}
    return result


async def _list_workspaces(gateway: Gateway, args: argparse.Namespace) -> list[dict[str, Any]]:
    listed = []
    for workspace_id in await gateway.workspaces.list():
        workspace = await gateway.workspaces.get(workspace_id)
        if workspace is not None:
            listed.append(
                {"workspace_id": workspace.id, "email": workspace.email, "plan": workspace.plan}
            )
    return listed


async def _create_key(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await _require_workspace(gateway, args.workspace)
    made = await gateway.keys.create(args.workspace, name=args.name)
    return {**made.key.public(), "key": made.secret}


async def _list_keys(gateway: Gateway, args: argparse.Namespace) -> list[dict[str, Any]]:
    await _require_workspace(gateway, args.workspace)
    return [key.public() for key in await gateway.keys.list(args.workspace)]


async def _rotate_key(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    made = await gateway.keys.rotate(args.workspace, args.key_id, grace=args.grace_period)
    return {**made.key.public(), "key": made.secret}


async def _revoke_key(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    revoked: ApiKey = await gateway.keys.revoke(args.workspace, args.key_id)
    return revoked.public()


async def _require_workspace(gateway: Gateway, workspace_id: str) -> None:
    if await gateway.workspaces.get(workspace_id) is None:
        raise NotFoundError(f"no workspace {workspace_id}")


async def _wallet(gateway: Gateway, workspace_id: str) -> dict[str, Any]:
    return {"workspace_id": workspace_id, **(await gateway.wallet.status(workspace_id)).public()}


async def _show_wallet(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await _require_workspace(gateway, args.workspace)
    return await _wallet(gateway, args.workspace)


async def _topup(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await _require_workspace(gateway, args.workspace)
    try:
        amount = parse_usd(args.amount, "amount_usd", high=MAX_TOPUP_USD, positive=True)
    except InvalidRequestError as exc:
        raise InvalidRequestError(str(exc).replace("'amount_usd'", "--amount")) from None
    key = args.idempotency_key or secrets.token_hex(16)
    balance = await gateway.wallet.credit(
        args.workspace, amount, key=f"manual:{key}", source="operator", reference=args.reference
    )
    return {**await _wallet(gateway, args.workspace), "credited": balance is not None}


async def _billing(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await _require_workspace(gateway, args.workspace)
    await gateway.wallet.set_billing(args.workspace, args.state == "on")
    return await _wallet(gateway, args.workspace)
