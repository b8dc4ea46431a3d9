"""``gateway-kit workspaces create|list|show|set-plan|set-email|suspend|resume|delete``."""

from __future__ import annotations

import argparse
from typing import Any

from gateway_kit._text import printable
from gateway_kit.accounts.scopes import ROLES
from gateway_kit.accounts.workspaces import Status, Workspace
from gateway_kit.admin import WalletNotEmptyError, delete_workspace, workspace_view
from gateway_kit.cli._store import AddConfig, UsageError, add_common
from gateway_kit.exceptions import InvalidRequestError, NotFoundError
from gateway_kit.gateway import Gateway

__all__ = ["add_parser"]


def add_parser(commands: Any, add_config: AddConfig) -> None:
    parser = commands.add_parser("workspaces", help="create, list, change and delete workspaces")
    verbs = parser.add_subparsers(dest="verb", metavar="verb", required=True)

    create = verbs.add_parser("create", help="create a workspace")
    create.add_argument("--email", required=True, help="contact e-mail")
    create.add_argument("--plan", help="plan name (default: the configured default_plan)")
    create.add_argument(
        "--with-key", action="store_true", help="also issue its first key (an admin key)"
    )
    add_common(create, add_config, _create, reads_only=False)

    listing = verbs.add_parser("list", help="list workspaces by id")
    listing.add_argument("--plan", help="only those on this plan")
    listing.add_argument("--status", choices=["active", "suspended"], help="only those")
    add_common(listing, add_config, _list, reads_only=True)

    show = verbs.add_parser("show", help="a workspace with its usage, budget and wallet")
    show.add_argument("workspace", metavar="WS_ID")
    add_common(show, add_config, _show, reads_only=True)

    plan = verbs.add_parser("set-plan", help="move a workspace to another plan")
    plan.add_argument("workspace", metavar="WS_ID")
    plan.add_argument("plan", metavar="PLAN")
    add_common(plan, add_config, _set_plan, reads_only=False)

    email = verbs.add_parser("set-email", help="change a workspace's contact e-mail")
    email.add_argument("workspace", metavar="WS_ID")
    email.add_argument("email", metavar="EMAIL")
    add_common(email, add_config, _set_email, reads_only=False)

    for verb, what in (("suspend", "refuse every key of"), ("resume", "serve again")):
        parser_ = verbs.add_parser(verb, help=f"{what} a workspace")
        parser_.add_argument("workspace", metavar="WS_ID")
        add_common(parser_, add_config, _set_status, reads_only=False)

    delete = verbs.add_parser(
        "delete", help="delete a workspace, its keys, webhooks and all its state"
    )
    delete.add_argument("workspace", metavar="WS_ID")
    delete.add_argument("--yes", action="store_true", help="really delete (required)")
    delete.add_argument(
        "--force", action="store_true", help="even when its wallet holds money (discarded)"
    )
    add_common(delete, add_config, _delete, reads_only=False)


async def _workspace(gateway: Gateway, workspace_id: str) -> Workspace:
    workspace = await gateway.workspaces.get(workspace_id)
    if workspace is None:
        raise NotFoundError(f"no workspace {printable(workspace_id)}")
    return workspace


async def _create(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    workspace = await gateway.workspaces.create(args.email, plan=args.plan)
    result: dict[str, Any] = {
        "workspace_id": workspace.id,
        "email": workspace.email,
        "plan": workspace.plan,
    }
    if args.with_key:
        made = await gateway.keys.create(workspace.id, scopes=ROLES["admin"])
        result |= {"key_id": made.key.key_id, "role": "admin", "key": made.secret}
    return result


async def _list(gateway: Gateway, args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.plan is not None and args.plan not in gateway.config.plans:
        raise UsageError(f"--plan: no plan named {printable(args.plan)!r}")
    listed: list[dict[str, Any]] = []
    after = None
    while True:
        page = await gateway.workspaces.page(
            limit=500, after=after, plan=args.plan, status=args.status
        )
        listed += (
            {"workspace_id": w.id, "email": w.email, "plan": w.plan, "status": w.status}
            for w in page.workspaces
        )
        if page.next_after is None:
            return listed
        after = page.next_after


async def _show(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    return await workspace_view(gateway, await _workspace(gateway, args.workspace))


async def _set_plan(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await _workspace(gateway, args.workspace)
    updated = await gateway.workspaces.update(args.workspace, plan=args.plan)
    return updated.public()


async def _set_email(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await _workspace(gateway, args.workspace)
    updated = await gateway.workspaces.update(args.workspace, email=args.email)
    return updated.public()


async def _set_status(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await _workspace(gateway, args.workspace)
    status: Status = "suspended" if args.verb == "suspend" else "active"
    updated = await gateway.workspaces.update(args.workspace, status=status)
    return updated.public()


async def _delete(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    if not args.yes:
        raise UsageError(
            "--yes: deleting a workspace removes its keys, webhooks and all its state for good; "
            "run again with --yes"
        )
    workspace = await _workspace(gateway, args.workspace)
    try:
        return await delete_workspace(gateway, workspace, force=args.force)
    except WalletNotEmptyError as exc:
        raise InvalidRequestError(str(exc).replace("with force", "with --force")) from None
