"""``gateway-kit worker``: deliver webhooks from the shared queue, without serving HTTP.

Run as many as you like beside the gateways (on Redis, or on the same machine with SQLite):
leases keep them from making the same attempt twice. SIGTERM or Ctrl+C stops it; deliveries
it had claimed come back to the queue when their leases lapse.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable
from typing import Any

import anyio

from gateway_kit.cli._store import naming_the_file, try_storage
from gateway_kit.config import load_config
from gateway_kit.gateway import Gateway


def add_parser(commands: Any, add_config_option: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = commands.add_parser("worker", help="deliver webhooks (no HTTP server)")
    add_config_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try_storage(config, args.config)

    with naming_the_file(args.config):
        gateway = Gateway(config, run_worker=True)

    async def main() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with gateway:
                print(
                    f"gateway-kit worker: delivering webhooks from {_where(config.storage.url)}",
                    flush=True,
                )
                async for _ in signals:
                    return

    anyio.run(main)
    return 0


def _where(url: str) -> str:
    """The storage, without credentials."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"
