"""The ``gateway-kit`` command line.

- ``serve``: the gateway on uvicorn (offline demo without a configuration);
- ``status``: a workspace's plan, quota, savings, budget and wallet, over the API;
- ``worker``: deliver webhooks without serving HTTP;
- ``workspaces``, ``keys``, ``budget``, ``wallet``, ``cache``, ``logs``, ``usage``: operator
  commands on the configured storage (``cli._store``).

Human output by default, ``--json`` for scripts. Exit codes: 0 success, 1 a failure talking to
the gateway or storage, 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from gateway_kit import __version__
from gateway_kit.cli import budget, cache, keys, logs, serve, status, wallet, worker, workspaces
from gateway_kit.exceptions import ConfigError, GatewayError, InvalidRequestError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        result: int = args.handler(args)
    except ConfigError as exc:
        print(f"gateway-kit: {_one_line(exc)}", file=sys.stderr)
        return 2
    except InvalidRequestError as exc:
        # A value given on the command line the accounts refuse (a plan, an e-mail address):
        # a usage error like the others, naming what it is about (it exited 1, as storage
        # failures do).
        about = f"{exc.param}: " if exc.param else ""
        print(f"gateway-kit: {about}{_one_line(exc)}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"gateway-kit: {_one_line(exc)}", file=sys.stderr)
        return 1
    return result


def _one_line(exc: Exception) -> str:
    # Scripts and log collectors read one line per error; a message should be one already.
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("GATEWAY_KIT_CONFIG"),
        help="TOML configuration file (default: $GATEWAY_KIT_CONFIG, else the built-in defaults)",
    )


class _Parser(argparse.ArgumentParser):
    """argparse's errors in one line, as every other error of the CLI (it printed its usage
    first: three or four lines for a flag's wrong type)."""

    def error(self, message: str) -> NoReturn:
        verb = self.prog.removeprefix("gateway-kit").strip()
        self.exit(2, f"gateway-kit: {verb + ': ' if verb else ''}{message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gateway-kit", description="An LLM gateway as composable ASGI layers.")
    parser.add_argument("--version", action="version", version=f"gateway-kit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command", parser_class=_Parser)
    serve.add_parser(commands, add_config_option)
    worker.add_parser(commands, add_config_option)
    status.add_parser(commands)
    for verbs in (workspaces, keys, budget, wallet, cache, logs):
        verbs.add_parser(commands, add_config_option)
    return parser
