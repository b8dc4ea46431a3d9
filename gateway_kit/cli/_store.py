"""What the operator commands share: the configured storage, and printing what they did.

They open the storage the gateway uses (``storage.url``) and publish the same events, so a
rotation from the command line reaches the workspace's webhooks like one made over the API.

- On the default storage (``sqlite:///gateway-kit.db``, in the working directory), each command
  says so on stderr: the usual mistake is running it in another directory.
- A command that only reads never creates a database: on SQLite, a file that does not exist is
  an error (exit 2) instead of an empty answer.
- Human output escapes control characters (a name holding a terminal escape sequence prints as
  ``\\x1b[31m``, never as colour); ``--json`` is JSON, escaped as JSON is.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from gateway_kit._text import CONTROL, printable
from gateway_kit.config import GatewayConfig, StorageConfig, load_config
from gateway_kit.exceptions import ConfigError, NotFoundError, StorageError
from gateway_kit.gateway import Gateway
from gateway_kit.storage._factory import sqlite_path, storage_from_url

__all__ = [
    "Action",
    "AddConfig",
    "UsageError",
    "add_common",
    "bounded",
    "one_line",
    "require_workspace",
    "try_storage",
]

Action = Callable[[Gateway, argparse.Namespace], Awaitable[Any]]
AddConfig = Callable[[argparse.ArgumentParser], None]

DEFAULT_STORAGE = StorageConfig().url


class UsageError(ConfigError):
    """A command-line value outside its documented bounds (exit 2, one line)."""


def add_common(
    parser: argparse.ArgumentParser, add_config: AddConfig, action: Action, *, reads_only: bool
) -> None:
    """``--config`` and ``--json``, and ``action`` as the handler."""
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=lambda args: _run(action, args, reads_only=reads_only))


@contextmanager
def naming_the_file(path: str | None) -> Iterator[None]:
    """A ``ConfigError`` raised while the gateway is made or started (a flagship without a
    price, an embedding model on a provider without embeddings) names the configuration file,
    as the loader's errors do (``serve`` alone named it)."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if path else str(exc)) from None


def _run(action: Action, args: argparse.Namespace, *, reads_only: bool) -> int:
    config = load_config(args.config)
    _check_storage(config, args, reads_only=reads_only)
    try_storage(config, args.config)

    async def main() -> Any:
        # No delivery worker here: the serving gateways (or `gateway-kit worker`) deliver what
        # these commands publish, through the queue in the shared storage.
        with naming_the_file(args.config):
            gateway = Gateway(config, run_worker=False)
        async with gateway:
            return await action(gateway, args)

    result = anyio.run(main)
    if result is not None:  # (a command that printed as it went returns nothing)
        print(json.dumps(result, indent=2) if args.json else human(result))
    return 0


def _check_storage(config: GatewayConfig, args: argparse.Namespace, *, reads_only: bool) -> None:
    url = config.storage.url
    file = sqlite_path(url)
    path = None if file is None else Path(file)
    if url == DEFAULT_STORAGE:
        hint = (
            "the configuration names no [storage]"
            if getattr(args, "config", None)
            else "give --config or GATEWAY_KIT_CONFIG for another"
        )
        print(
            f"gateway-kit: using the default storage, {url} in {Path.cwd()} ({hint})",
            file=sys.stderr,
        )
    if reads_only and path is not None and not path.exists():
        command = " ".join(filter(None, [args.command, getattr(args, "verb", None)]))
        raise UsageError(
            f"storage.url: no database at {path.resolve()}: `{command}` only reads, so none was "
            "made (run it where `gateway-kit serve` keeps its state, or give --config)"
        )


def try_storage(config: GatewayConfig, source: str | None) -> None:
    """The storage a command is about to use, tried first: a URL its backend refuses (a Redis
    port past 65535) or an SQLite file that cannot be opened (no such directory, a directory,
    not a database) is a configuration mistake, one line naming ``storage.url``; never a
    traceback, nor a gateway that starts and answers every request with a 503. Redis is
    reached once the gateway runs (and retried when it is down): only its URL is checked."""
    where = f"{source}: storage.url" if source else "storage.url"
    url = config.storage.url
    try:
        storage = storage_from_url(url, redis_prefix=config.storage.redis_prefix)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    file = sqlite_path(url)

    async def touch() -> None:
        async with storage:
            if file is not None:
                await storage.get("gk:start")

    try:
        anyio.run(touch)
    except StorageError as exc:
        opened = f"cannot open the SQLite file {file!r}" if file else "cannot use the storage"
        raise ConfigError(f"{where}: {opened}: {exc}") from None


async def require_workspace(gateway: Gateway, workspace_id: str) -> None:
    if await gateway.workspaces.get(workspace_id) is None:
        raise NotFoundError(f"no workspace {printable(workspace_id)}")


def bounded(value: float, option: str, *, low: float, high: float, unit: str) -> float:
    """``value`` when within ``[low, high]``, else a ``UsageError`` naming ``option``."""
    if not low <= value <= high:
        raise UsageError(f"{option}: must be from {low:g} to {high:g} {unit}, got {value:g}")
    return value


def one_line(value: str, option: str, *, max_length: int = 200) -> str:
    """A label given on the command line (a key's name, a reference), checked as the API checks
    it: no control characters (no terminal escape sequence is ever stored), at most
    ``max_length`` characters; stripped. Else a ``UsageError`` naming ``option``."""
    control = CONTROL.search(value)
    if control is not None:
        raise UsageError(
            f"{option}: must not contain control characters (found U+{ord(control.group()):04X} "
            f"at position {control.start()})"
        )
    if len(value) > max_length:
        raise UsageError(f"{option}: longer than {max_length} characters")
    return value.strip()


def human(result: Any) -> str:
    if isinstance(result, list):
        return "\n".join(human(item) for item in result) or "(none)"
    width = max(13, *(len(name) + 2 for name in result))
    lines = [
        f"{name:<{width}}{_value(value)}" for name, value in result.items() if value is not None
    ]
    if "key" in result:
        lines.append("Store the key now: it is shown only this once.")
    return "\n".join(lines)


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value) or "-"
    return printable(str(value))
