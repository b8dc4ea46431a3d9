"""``gateway-kit budget show|set``: a workspace's spend cap and its keys' caps, as the operator.

``set`` takes the same changes as ``PATCH /api/v1/workspaces/{id}/budget`` (and is checked by
the same code): ``--cap 50`` or ``--cap default`` (the plan's cap), ``--key-cap kid_...=5``
and ``--key-cap kid_...=none`` (removes it), as many as needed.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from gateway_kit.admin import budget_status
from gateway_kit.api._common import ApiError
from gateway_kit.api.budget import change_budget
from gateway_kit.cli._store import AddConfig, UsageError, add_common, require_workspace
from gateway_kit.gateway import Gateway

__all__ = ["add_parser"]


def add_parser(commands: Any, add_config: AddConfig) -> None:
    parser = commands.add_parser("budget", help="a workspace's spend cap and key caps")
    verbs = parser.add_subparsers(dest="verb", metavar="verb", required=True)

    show = verbs.add_parser("show", help="the period's cap, spend, verdict and key caps")
    show.add_argument("--workspace", required=True, metavar="WS_ID")
    add_common(show, add_config, _show, reads_only=True)

    change = verbs.add_parser("set", help="set the workspace's cap or its keys' caps")
    change.add_argument("--workspace", required=True, metavar="WS_ID")
    change.add_argument(
        "--cap", metavar="USD", help="the workspace's cap per period, or 'default' (the plan's)"
    )
    change.add_argument(
        "--key-cap",
        action="append",
        default=[],
        metavar="KEY_ID=USD",
        help="a key's cap, or KEY_ID=none to remove it (repeatable)",
    )
    add_common(change, add_config, _set, reads_only=False)


async def _show(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await require_workspace(gateway, args.workspace)
    return await budget_status(gateway, args.workspace)


async def _set(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.cap is not None:
        body["cap_usd"] = None if args.cap == "default" else _amount(args.cap, "--cap")
    if args.key_cap:
        caps: dict[str, Any] = {}
        for item in args.key_cap:
            key_id, sep, amount = item.partition("=")
            if not sep or not key_id:
                raise UsageError(f"--key-cap: expected KEY_ID=USD or KEY_ID=none, got {item!r}")
            caps[key_id] = None if amount == "none" else _amount(amount, "--key-cap")
        body["key_caps"] = caps
    if not body:
        raise UsageError("--cap or --key-cap: nothing to change")
    await require_workspace(gateway, args.workspace)
    try:
        await change_budget(gateway, args.workspace, body, caller=None)
    except ApiError as exc:  # named by the option given, not the API's field
        param = exc.param or ""
        option = "--cap" if param == "cap_usd" else "--key-cap"
        message = re.sub(r"'key_caps(\.[^']*)?'|'cap_usd'", "it", str(exc))
        raise UsageError(f"{option}: {message}") from None
    return await budget_status(gateway, args.workspace)


def _amount(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{option}: not an amount in USD: {text!r}") from None
