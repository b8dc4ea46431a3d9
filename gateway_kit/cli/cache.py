"""``gateway-kit cache stats|purge``: the answer cache, as the operator.

- ``stats --workspace WS``: the workspace's counts (hits, misses, bypasses, answers stored) and
  hit rate, from the storage (the entries themselves live in each gateway process: ``GET
  /api/v1/workspaces/{id}/cache`` on a running gateway shows its own);
- ``purge --workspace WS [--model M]`` or ``purge --all [--model M]``: published on the
  storage's change feed, so every running gateway on it drops those answers within a second.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from gateway_kit.cli._store import AddConfig, UsageError, add_common, require_workspace
from gateway_kit.config.base import NAME_PATTERN
from gateway_kit.gateway import Gateway

__all__ = ["add_parser"]


def add_parser(commands: Any, add_config: AddConfig) -> None:
    parser = commands.add_parser("cache", help="the answer cache's counts, and purges")
    verbs = parser.add_subparsers(dest="verb", metavar="verb", required=True)

    stats = verbs.add_parser("stats", help="a workspace's hits, misses and hit rate")
    stats.add_argument("--workspace", required=True, metavar="WS_ID")
    add_common(stats, add_config, _stats, reads_only=True)

    purge = verbs.add_parser("purge", help="drop cached answers in every running gateway")
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument("--workspace", metavar="WS_ID", help="the workspace's answers")
    which.add_argument("--all", action="store_true", help="every workspace's answers")
    purge.add_argument("--model", metavar="MODEL", help="only the answers of this model")
    add_common(purge, add_config, _purge, reads_only=False)


async def _stats(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    await require_workspace(gateway, args.workspace)
    stats = await gateway.cache.stats(args.workspace)
    return {
        "workspace_id": args.workspace,
        "hits": stats.hits,
        "semantic_hits": stats.semantic_hits,  # in the hit rate too: shown, as the API does
        "misses": stats.misses,
        "bypasses": stats.bypasses,
        "stored": stats.stored,
        "hit_rate": round(stats.hit_rate, 4),
    }


async def _purge(gateway: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    if args.model is not None and not re.match(NAME_PATTERN, args.model):
        raise UsageError(f"--model: not a model name: {args.model!r}")
    if args.workspace is not None:
        await require_workspace(gateway, args.workspace)
    await gateway.cache.purge(args.workspace, args.model)
    return {
        "purged": "every workspace" if args.all else args.workspace,
        "model": args.model or "every model",
        "note": "published: running gateways drop these answers within a second",
    }
