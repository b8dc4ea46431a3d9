"""The ``gateway-kit`` command line.

``serve`` runs the standalone gateway on uvicorn; with no configuration it runs offline on the
built-in mock provider and prints how to call it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gateway_kit import __version__
from gateway_kit.config import GatewayConfig, load_config
from gateway_kit.exceptions import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        result: int = args.handler(args)
    except ConfigError as exc:
        print(f"gateway-kit: {exc}", file=sys.stderr)
        return 2
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway-kit", description="An LLM gateway as composable ASGI layers."
    )
    parser.add_argument("--version", action="version", version=f"gateway-kit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command")

    serve = commands.add_parser("serve", help="run the gateway on uvicorn")
    serve.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("GATEWAY_KIT_CONFIG"),
        help="TOML configuration file (default: $GATEWAY_KIT_CONFIG, else the offline demo)",
    )
    serve.add_argument("--host", help="interface to bind (default: server.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: server.port, 8080)")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level",
    )
    serve.set_defaults(handler=_serve)
    return parser


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        print(
            "gateway-kit: serving needs the server extra: pip install 'gateway-kit[server]'",
            file=sys.stderr,
        )
        return 2
    from gateway_kit.app import create_app

    config = load_config(args.config)
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    if args.config is None:
        _print_demo_banner(config, host, port)
    uvicorn.run(
        create_app(config),
        host=host,
        port=port,
        log_level=args.log_level,
        proxy_headers=False,
        server_header=False,
    )
    return 0


def _print_demo_banner(config: GatewayConfig, host: str, port: int) -> None:
    shown = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    base = f"http://{shown}:{port}"
    model = config.models[0].name if config.models else "mock-large"
    print(
        f"gateway-kit {__version__}: no --config given, running offline on the built-in mock "
        f"provider (models: {', '.join(m.name for m in config.models)}).\n"
        f"Try it:\n"
        f"  curl {base}/v1/chat/completions -H 'content-type: application/json' \\\n"
        f'    -d \'{{"model": "{model}", "messages": [{{"role": "user", '
        f'"content": "Hello"}}]}}\'\n'
        f'or with the openai SDK: OpenAI(base_url="{base}/v1", api_key="unused")\n',
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
