"""``gateway-kit serve``: the standalone gateway on uvicorn.

Without a configuration it runs offline: the mock provider, state in ``gateway-kit.db`` in the
working directory, and a demo workspace (``ws_demo``) with an admin key, made and printed at
the first start only (only key hashes are ever stored, so the key cannot be shown again; later
starts say how to make another). The port is bound before anything is written: a start that
cannot listen (the port in use) changes nothing, and the running gateway's key keeps working.
"""

from __future__ import annotations

import argparse
import gc
import logging
import socket
import sys
from collections.abc import Callable
from typing import Any

import anyio

from gateway_kit import __version__
from gateway_kit.accounts.scopes import ADMIN_SCOPES, ROLES
from gateway_kit.cli._store import UsageError, naming_the_file, try_storage
from gateway_kit.config import GatewayConfig, load_config
from gateway_kit.config.server import host_problem
from gateway_kit.gateway import Gateway
from gateway_kit.observe.logs import logging_config

DEMO_WORKSPACE = "ws_demo"
DEMO_EMAIL = "demo@example.com"
DEMO_KEY_NAME = "demo"


def add_parser(commands: Any, add_config_option: Callable[[argparse.ArgumentParser], None]) -> None:
    parser = commands.add_parser("serve", help="run the gateway on uvicorn")
    add_config_option(parser)
    parser.add_argument("--host", help="interface to bind (default: server.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (default: server.port, 8080)")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="the log level of uvicorn and the gateway (request lines are info)",
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
    if not 0 <= port <= 65535:  # uvicorn would bind the port modulo 65536
        raise UsageError(f"--port: must be from 0 to 65535, got {port}")
    if args.host is not None and (problem := host_problem(args.host)) is not None:
        raise UsageError(f"--host: {problem}")
    try:
        listener = bind(host, port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(
            f"gateway-kit: cannot listen on {host}:{port}: {reason.lower()} (another gateway "
            "running there? --port or server.port chooses another)",
            file=sys.stderr,
        )
        return 1
    with listener:
        # Once the port is ours: a start that fails changes nothing.
        try_storage(config, args.config)
        if args.config is None:
            demo = anyio.run(demo_key, config)
            print(demo_banner(config, host, listener.getsockname()[1], demo), flush=True)
        with naming_the_file(args.config):  # what the gateway checks when it is made
            app = create_app(config)
        # The price table, the configuration and every module are loaded by now and live as
        # long as the process: out of the garbage collector's view, full collections no longer
        # traverse them (each used to take tens of milliseconds).
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 10, 10)
        config_ = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=args.log_level,
            # uvicorn's loggers and the gateway's, in logs.format; the inference routes'
            # access lines give way to their request lines.
            log_config=logging_config(config.logs, args.log_level),
            proxy_headers=False,
            server_header=False,
            # One client that never sends its body no longer holds a stop for ever.
            timeout_graceful_shutdown=config.server.shutdown_timeout_s,
        )
        _announcing_server()(config_).run(sockets=[listener])
    return 0


def _announcing_server() -> type[Any]:
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        """uvicorn announces the address it listens on only for sockets it bound itself; this
        says it for ours, in its words, once the application has started."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and sockets:
                host, port = sockets[0].getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                logging.getLogger("uvicorn.error").info(
                    "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port
                )

    return AnnouncingServer


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, as uvicorn would make it (``OSError`` if taken)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def demo_key(config: GatewayConfig) -> tuple[str | None, str]:
    """Make sure the demo workspace and its admin key exist: ``(secret, prefix)`` when the key
    was made now, ``(None, prefix)`` when it was made at an earlier start."""
    async with Gateway(config, run_worker=False) as gateway:
        if await gateway.workspaces.get(DEMO_WORKSPACE) is None:
            await gateway.workspaces.create(DEMO_EMAIL, workspace_id=DEMO_WORKSPACE)
        for key in await gateway.keys.list(DEMO_WORKSPACE):
            if key.active and key.name == DEMO_KEY_NAME:
                if key.scope_set == ADMIN_SCOPES:
                    return None, key.prefix
                # Made before keys had scopes: replaced by one that may manage the workspace.
                await gateway.keys.revoke(DEMO_WORKSPACE, key.key_id)
        made = await gateway.keys.create(DEMO_WORKSPACE, name=DEMO_KEY_NAME, scopes=ROLES["admin"])
        return made.secret, made.key.prefix


def demo_banner(config: GatewayConfig, host: str, port: int, demo: tuple[str | None, str]) -> str:
    shown = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    base = f"http://{shown}:{port}"
    model = config.models[0].name if config.models else "mock-large"
    models = ", ".join([m.name for m in config.models] + [a.name for a in config.routing.auto])
    intro = (
        f"gateway-kit {__version__}: no --config given, running offline on the built-in mock "
        f"provider (models: {models}), state in {config.storage.url}.\n"
    )
    secret, prefix = demo
    new = f"gateway-kit keys create --workspace {DEMO_WORKSPACE} --role admin"
    if secret is None:
        return intro + (
            f"Demo workspace {DEMO_WORKSPACE}: its admin key ({prefix}...) was printed at the "
            f"first start.\nLost it? Make another: {new}\n"
            f"Dashboard: {base}/dashboard\n"
        )
    return intro + (
        f"Demo workspace {DEMO_WORKSPACE}, admin API key (shown once: it is kept across "
        f"restarts, stored hashed; lost, make another with `{new}`):\n"
        f"  {secret}\n"
        f"Try it:\n"
        f"  curl {base}/v1/chat/completions -H 'authorization: Bearer {secret}' \\\n"
        f"    -H 'content-type: application/json' \\\n"
        f'    -d \'{{"model": "{model}", "messages": [{{"role": "user", '
        f'"content": "Hello"}}]}}\'\n'
        f"  GATEWAY_KIT_API_KEY={secret} gateway-kit status --base-url {base}\n"
        f'or with the openai SDK: OpenAI(base_url="{base}/v1", api_key="{secret}")\n'
        f"Dashboard: {base}/dashboard (sign in with the key)\n"
    )
