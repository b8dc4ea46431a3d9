"""``gateway-kit serve``: the standalone gateway on uvicorn.

Without a configuration it runs offline: the mock provider, state in ``gateway-kit.db`` in the
working directory, and a demo workspace whose API key is issued anew (the previous demo key
revoked) and printed at every start, since only key hashes are ever stored.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from typing import Any

import anyio

from gateway_kit import __version__
from gateway_kit.config import GatewayConfig, load_config
from gateway_kit.gateway import Gateway

DEMO_WORKSPACE = "ws_demo"
DEMO_EMAIL = "demo@example.com"


def add_parser(commands: Any, add_config_option: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = commands.add_parser("serve", help="run the gateway on uvicorn")
    add_config_option(parser)
    parser.add_argument("--host", help="interface to bind (default: server.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (default: server.port, 8080)")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
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
        key = anyio.run(issue_demo_key, config)
        print(demo_banner(config, host, port, key), flush=True)
    app = create_app(config)
    # The price table, the configuration and every module are loaded by now and live as long
    # as the process: out of the garbage collector's view, full collections no longer
    # traverse them (each used to take tens of milliseconds).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 10, 10)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=args.log_level,
        proxy_headers=False,
        server_header=False,
    )
    return 0


async def issue_demo_key(config: GatewayConfig) -> str:
    """Make sure the demo workspace exists; revoke its old demo key and issue a new one."""
    async with Gateway(config, run_worker=False) as gateway:
        if await gateway.workspaces.get(DEMO_WORKSPACE) is None:
            await gateway.workspaces.create(DEMO_EMAIL, workspace_id=DEMO_WORKSPACE)
        for key in await gateway.keys.list(DEMO_WORKSPACE):
            if key.active and key.name == "demo":
                await gateway.keys.revoke(DEMO_WORKSPACE, key.key_id)
        return (await gateway.keys.create(DEMO_WORKSPACE, name="demo")).secret


def demo_banner(config: GatewayConfig, host: str, port: int, key: str) -> str:
    shown = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    base = f"http://{shown}:{port}"
    model = config.models[0].name if config.models else "mock-large"
    models = ", ".join([m.name for m in config.models] + [a.name for a in config.routing.auto])
    return (
        f"gateway-kit {__version__}: no --config given, running offline on the built-in mock "
        f"provider (models: {models}), state in {config.storage.url}.\n"
        f"Demo workspace {DEMO_WORKSPACE}, API key (shown once, replaced at the next start):\n"
        f"  {key}\n"
        f"Try it:\n"
        f"  curl {base}/v1/chat/completions -H 'authorization: Bearer {key}' \\\n"
        f"    -H 'content-type: application/json' \\\n"
        f'    -d \'{{"model": "{model}", "messages": [{{"role": "user", '
        f'"content": "Hello"}}]}}\'\n'
        f"  GATEWAY_KIT_API_KEY={key} gateway-kit status --base-url {base}\n"
        f'or with the openai SDK: OpenAI(base_url="{base}/v1", api_key="{key}")\n'
    )
