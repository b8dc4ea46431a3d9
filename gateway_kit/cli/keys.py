"""``gateway-kit keys create|list|rotate|revoke``: a workspace's API keys, as the operator."""

from __future__ import annotations

import argparse
from typing import Any

from gateway_kit.accounts.keys import ApiKey
from gateway_kit.accounts.scopes import ROLES, ScopeError, parse_scopes, role_scopes
from gateway_kit.api.keys import MAX_GRACE_S
from gateway_kit.cli._store import (
    AddConfig,
    UsageError,
    add_common,
    bounded,
    one_line,
    require_workspace,
)
from gateway_kit.gateway import Gateway

__all__ = ["add_parser"]


def add_parser(commands: Any, add_config: AddConfig) -> None:
    parser = commands.add_parser("keys", help="create, list, rotate and revoke API keys")
    verbs = parser.add_subparsers(dest="verb", metavar="verb", required=True)

    create = verbs.add_parser("create", help="issue a new key (shown once)")
    create.add_argument("--workspace", required=True, metavar="WS_ID")
    create.add_argument("--name", default="default", help="a label for the key")
    what = create.add_mutually_exclusive_group()
    what.add_argument(
        "--role",
        choices=sorted(ROLES),
        help="admin (every scope) or inference (model calls and /v1/me: the default)",
    )
    what.add_argument(
        "--scopes", metavar="S,S", help="scopes instead of a role, e.g. inference,budget:read"
    )
    add_common(create, add_config, _create, reads_only=False)

    listing = verbs.add_parser("list", help="list a workspace's keys")
    listing.add_argument("--workspace", required=True, metavar="WS_ID")
    add_common(listing, add_config, _list, reads_only=True)

    rotate = verbs.add_parser("rotate", help="a new secret for a key (shown once)")
    rotate.add_argument("--workspace", required=True, metavar="WS_ID")
    rotate.add_argument("key_id", metavar="KEY_ID")
    rotate.add_argument(
        "--grace-period",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long the old secret keeps working (default 0: stops at once; at most a week)",
    )
    add_common(rotate, add_config, _rotate, reads_only=False)

    revoke = verbs.add_parser("revoke", help="revoke a key")
    revoke.add_argument("--workspace", required=True, metavar="WS_ID")
    revoke.add_argument("key_id", metavar="KEY_ID")
    add_common(revoke, add_config, _revoke, reads_only=False)


async def _create(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    try:
        if args.scopes is not None:
            scopes = parse_scopes(s.strip() for s in args.scopes.split(",") if s.strip())
            if not scopes:
                raise ScopeError("give at least one scope")
        else:
            scopes = role_scopes(args.role or "inference")
    except ScopeError as exc:
        raise UsageError(f"--{'scopes' if args.scopes is not None else 'role'}: {exc}") from None
    await require_workspace(gateway, args.workspace)
    name = one_line(args.name, "--name")
    made = await gateway.keys.create(args.workspace, name=name, scopes=scopes)
    return {**made.key.public(), "key": made.secret}


async def _list(gateway: Gateway, args: argparse.Namespace) -> list[dict[str, Any]]:
    await require_workspace(gateway, args.workspace)
    return [key.public() for key in await gateway.keys.list(args.workspace)]


async def _rotate(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    grace = bounded(args.grace_period, "--grace-period", low=0, high=MAX_GRACE_S, unit="seconds")
    made = await gateway.keys.rotate(args.workspace, args.key_id, grace=grace)
    return {**made.key.public(), "key": made.secret}


async def _revoke(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    revoked: ApiKey = await gateway.keys.revoke(args.workspace, args.key_id)
    return revoked.public()
